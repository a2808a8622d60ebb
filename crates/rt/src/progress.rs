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
        let now = Instant::now();
        if now.duration_since(self.last) >= Duration::from_secs(1) {
            self.last = now;
            (self.sink)(&line());
        }
    }
}
