//! A progress line on stderr at most once per second.

use std::time::{Duration, Instant};

/// Prints a progress line to stderr at most once per second.
#[derive(Debug)]
pub struct Progress {
    last: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Progress {
    /// The first line comes one second after this.
    pub fn new() -> Progress {
        Progress {
            last: Instant::now(),
        }
    }

    /// Prints `line()` if a second has passed since the last line; `line` is only
    /// called then, so formatting costs nothing on the other calls (one clock read).
    pub fn tick(&mut self, line: impl FnOnce() -> String) {
        let now = Instant::now();
        if now.duration_since(self.last) >= Duration::from_secs(1) {
            self.last = now;
            eprintln!("{}", line());
        }
    }
}
