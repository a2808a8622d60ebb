//! A progress line at most once per second, handed to the caller's sink.
//!
//! Libraries never print: a driver that reports progress takes a `fn(&str)` from its
//! caller (the binary passes one that writes to stderr) and gives it to [`Progress`].

use std::time::{Duration, Instant};

/// Hands a progress line to its sink at most once per second.
#[derive(Debug)]
pub struct Progress {
    last: Instant,
    sink: fn(&str),
}

impl Progress {
    /// The first line comes one second after this; every line goes to `sink`.
    pub fn new(sink: fn(&str)) -> Progress {
        Progress {
            last: Instant::now(),
            sink,
        }
    }

    /// Hands `line()` to the sink if a second has passed since the last line; `line` is
    /// only called then, so formatting costs nothing on the other calls (one clock read).
    pub fn tick(&mut self, line: impl FnOnce() -> String) {
        if let Some(l) = self.due(Instant::now(), line) {
            (self.sink)(&l);
        }
    }

    /// The line due at `now`, if a second has passed since the last one (`line` is
    /// only called then). Split from [`Progress::tick`] so tests can pass the time.
    fn due(&mut self, now: Instant, line: impl FnOnce() -> String) -> Option<String> {
        if now.duration_since(self.last) >= Duration::from_secs(1) {
            self.last = now;
            Some(line())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_calls_the_closure_at_most_once_per_second() {
        // Times are passed in, so the test does not depend on how fast the machine is.
        let t0 = Instant::now();
        let mut p = Progress {
            last: t0,
            sink: |_| {},
        };
        let mut calls = 0;
        let mut at = |p: &mut Progress, ms: u64| {
            p.due(t0 + Duration::from_millis(ms), || {
                calls += 1;
                format!("line at {ms} ms")
            })
        };
        for ms in 0..1000 {
            assert_eq!(at(&mut p, ms), None, "{ms} ms after the start");
        }
        assert_eq!(at(&mut p, 1000).as_deref(), Some("line at 1000 ms"));
        assert_eq!(at(&mut p, 1500), None);
        assert_eq!(at(&mut p, 1999), None);
        assert_eq!(at(&mut p, 2000).as_deref(), Some("line at 2000 ms"));
        assert_eq!(at(&mut p, 7000).as_deref(), Some("line at 7000 ms"));
        assert_eq!(calls, 3);
    }
}
