//! Child processes that end with the command that started them.
//!
//! A bench or the demo starts `tickwire router` (and other `tickwire` commands) as
//! child processes and stops them when it ends in order (Ctrl-C, SIGTERM, an error).
//! Killed instead (SIGKILL, a closed terminal's SIGHUP, `| head`'s SIGPIPE), it could
//! not, and a spinning router went on using a whole CPU for good (new-user pass). So the
//! parent marks each child's environment ([`mark`]), and the child, first thing,
//! asks the kernel for SIGTERM when its parent dies ([`exit_with_parent`]): a router
//! then stops as on `kill`, its spool flushed.

use std::process::Command;

/// The environment variable [`mark`] sets: the parent's pid.
pub const ENV: &str = "TICKWIRE_EXIT_WITH_PARENT";

/// Marks `cmd` so that the `tickwire` it runs ends (SIGTERM) when this process does.
pub fn mark(cmd: &mut Command) -> &mut Command {
    cmd.env(ENV, std::process::id().to_string())
}

/// In a process started with [`mark`]: SIGTERM when the parent dies (Linux's
/// parent-death signal). If the parent is already gone (it died between the fork and
/// here), returns false: the caller should exit at once. True otherwise, also when
/// not started with [`mark`].
///
/// The kernel sends the signal when the *thread* that started this process ends, so
/// a parent starts such children from a thread that lives as long as they should (the
/// benches and the demo start them from their main thread).
pub fn exit_with_parent() -> bool {
    let Some(parent) = std::env::var(ENV).ok().and_then(|v| v.parse::<i32>().ok()) else {
        return true;
    };
    // Not passed on to this process's own children.
    std::env::remove_var(ENV);
    if rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
        .is_err()
    {
        return true;
    }
    rustix::process::getppid().is_some_and(|p| p.as_raw_nonzero().get() == parent)
}
