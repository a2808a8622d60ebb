//! Where a bench command's output goes. This crate never prints: the caller (the
//! `tickwire` binary) passes the report writer (its stdout) and the progress sink (a
//! function writing to its stderr); warnings are `tracing` events.

use std::io::Write;

/// A bench command's outputs, given by its caller.
pub struct Console<'a> {
    /// The report: tables, notes, "wrote FILE" lines (the binary passes stdout).
    pub out: &'a mut dyn Write,
    /// Progress lines, at most one a second (the binary passes a function writing to
    /// stderr); see [`tickwire_rt::progress::Progress`].
    pub progress: fn(&str),
}

impl<'a> Console<'a> {
    /// A console writing the report to `out` and progress lines to `progress`.
    pub fn new(out: &'a mut dyn Write, progress: fn(&str)) -> Console<'a> {
        Console { out, progress }
    }
}

/// `writeln!` to a report writer. A report that cannot be written (a closed pipe) is
/// not a reason to abandon the measurement: the error is ignored.
#[macro_export]
#[doc(hidden)]
macro_rules! outln {
    ($w:expr) => {{
        let _ = ::std::writeln!($w);
    }};
    ($w:expr, $($arg:tt)*) => {{
        let _ = ::std::writeln!($w, $($arg)*);
    }};
}

/// `write!` to a report writer, ignoring errors as [`outln!`] does.
#[macro_export]
#[doc(hidden)]
macro_rules! out {
    ($w:expr, $($arg:tt)*) => {{
        let _ = ::std::write!($w, $($arg)*);
    }};
}
