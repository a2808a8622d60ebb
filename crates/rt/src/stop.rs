//! The Ctrl-C flag every long-running driver polls, and the child processes it
//! terminates when the user insists.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A Ctrl-C (SIGINT/SIGTERM) flag. [`StopFlag::install`] starts, once per process, a
/// thread that receives the signals, and returns a handle to the one shared flag;
/// installing again returns the same flag.
///
/// The first signal sets the flag (the driver stops, reports what it measured, and
/// drops its children). A second one aborts: it terminates every child process
/// registered with [`register_child`] (SIGTERM) and exits with status 130. A second
/// signal within [`SAME_REQUEST`] of the first is taken as the same request, not as
/// "again": `timeout(1)` and other supervisors signal the process and then its
/// process group, so it receives their one request twice (new-user pass: `timeout 2
/// tickwire sub ...` aborted without its summary in 1 run of 4).
#[derive(Clone, Debug)]
pub struct StopFlag(pub Arc<AtomicBool>);

/// The process-wide flag, once [`StopFlag::install`] ran.
static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// What the first Ctrl-C says, when the command chose it ([`StopFlag::install_saying`]).
static FIRST_SIGNAL_NOTE: OnceLock<&'static str> = OnceLock::new();

/// The first stop signal received (0: none yet), for [`stopped_by`].
static FIRST_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// What stopped the command, for its report: `"SIGTERM"` after a SIGTERM (a
/// supervisor, `kill`, `timeout`), else `"Ctrl-C"` (SIGINT, and before any signal).
pub fn stopped_by() -> &'static str {
    if FIRST_SIGNAL.load(Ordering::Acquire) == signal_hook::consts::SIGTERM {
        "SIGTERM"
    } else {
        "Ctrl-C"
    }
}

/// How close behind the first signal a second one is the same request
/// ([`StopFlag`]); a person pressing Ctrl-C again is slower.
pub const SAME_REQUEST: std::time::Duration = std::time::Duration::from_millis(250);

/// The first Ctrl-C's note by default: what the measuring commands do on it.
const DEFAULT_NOTE: &str = "stopping: reporting what was measured (Ctrl-C again to abort)";

impl StopFlag {
    /// Installs the signal handling (first call only) and returns the flag. If that
    /// fails, warns (a `tracing` event) and returns a flag that only [`StopFlag::set`]
    /// sets (Ctrl-C then kills the process, and its process group with it).
    pub fn install() -> StopFlag {
        let flag = STOP.get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(false));
            if let Err(e) = watch_signals(Arc::clone(&flag)) {
                tracing::warn!(
                    "cannot install the Ctrl-C handler ({e}); Ctrl-C will kill the process"
                );
            }
            flag
        });
        StopFlag(Arc::clone(flag))
    }

    /// [`StopFlag::install`], with `note` as the warning of the first Ctrl-C instead of
    /// "stopping: reporting what was measured", for a command that measures nothing.
    /// The first call in a process chooses the note.
    pub fn install_saying(note: &'static str) -> StopFlag {
        let _ = FIRST_SIGNAL_NOTE.set(note);
        StopFlag::install()
    }

    /// True once [`StopFlag::install`] ran in this process (children may then be put
    /// in a process group of their own: Ctrl-C reaches only this process, which stops
    /// them itself).
    pub fn is_installed() -> bool {
        STOP.get().is_some()
    }

    /// A flag with no signal handling (tests, or an internal stop).
    pub fn unregistered() -> StopFlag {
        StopFlag(Arc::new(AtomicBool::new(false)))
    }

    /// True once Ctrl-C (or SIGTERM) arrived, or [`StopFlag::set`] was called.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Sets the flag, as a signal would (e.g. to stop sibling threads after an error).
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Receives SIGINT/SIGTERM on a thread of its own (not in a signal handler, so it may
/// write, run `kill` and exit). What a signal did goes to [`set_notifier`]'s function
/// (the binary prints a plain line for the person who pressed Ctrl-C), or else is a
/// `tracing` warning.
fn watch_signals(flag: Arc<AtomicBool>) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("registering SIGINT/SIGTERM: {e}"))?;
    std::thread::Builder::new()
        .name("stop-signals".into())
        .spawn(move || {
            // The first signal's time: "again" means a second signal, not a flag the
            // command set itself (at its scheduled end, after an error; review).
            let mut first: Option<std::time::Instant> = None;
            for signal in signals.forever() {
                if first.is_some_and(|at| at.elapsed() < SAME_REQUEST) {
                    continue;
                }
                if first.is_none() {
                    // Before the flag: whoever sees the flag set reads the right name.
                    FIRST_SIGNAL.store(signal, Ordering::Release);
                }
                flag.store(true, Ordering::Release);
                if first.is_some() {
                    let children = live_children();
                    if children.is_empty() {
                        notify("aborting");
                    } else {
                        notify("aborting: stopping the processes this command started");
                    }
                    for &pid in &children {
                        terminate(pid);
                    }
                    remove_scratch_dirs(&children);
                    std::process::exit(130);
                }
                first = Some(std::time::Instant::now());
                let note = FIRST_SIGNAL_NOTE.get().copied().unwrap_or(DEFAULT_NOTE);
                // The notes say "Ctrl-C again"; after a SIGTERM, a second one aborts.
                if signal == SIGTERM {
                    notify(&note.replace("Ctrl-C again", "SIGTERM again"));
                } else {
                    notify(note);
                }
            }
        })
        .map_err(|e| format!("spawning the stop-signals thread: {e}"))?;
    Ok(())
}

/// How the signal thread tells what a signal did ([`set_notifier`]).
static NOTIFIER: OnceLock<fn(&str)> = OnceLock::new();

/// Chooses how the notes of the signal thread ("stopping…", "aborting") are shown: a
/// binary prints them as plain lines rather than as timestamped log events. The first
/// call in a process chooses; without one they are `tracing` warnings.
pub fn set_notifier(show: fn(&str)) {
    let _ = NOTIFIER.set(show);
}

fn notify(note: &str) {
    match NOTIFIER.get() {
        Some(show) => show(note),
        None => tracing::warn!("{note}"),
    }
}

/// Pids of the live children, for the abort path.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live_children() -> Vec<u32> {
    CHILDREN.lock().map(|c| c.clone()).unwrap_or_default()
}

/// Registers (`live`) or forgets a child process that a second Ctrl-C must terminate.
pub fn register_child(pid: u32, live: bool) {
    if let Ok(mut c) = CHILDREN.lock() {
        if live {
            c.push(pid);
        } else {
            c.retain(|&p| p != pid);
        }
    }
}

/// Scratch directories the abort path removes (`exit` skips their owners' drops).
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Registers (`live`) or forgets a temporary directory that a second Ctrl-C must not
/// leave behind (its owner's drop, which would remove it, never runs on that path).
pub fn register_scratch_dir(dir: &Path, live: bool) {
    if let Ok(mut d) = SCRATCH.lock() {
        if live {
            d.push(dir.to_owned());
        } else {
            d.retain(|p| p != dir);
        }
    }
}

/// Removes the registered scratch directories once the children just terminated
/// (`children`) have exited, waiting at most 3 s for them. Best effort: the process is
/// exiting.
fn remove_scratch_dirs(children: &[u32]) {
    let dirs = SCRATCH.lock().map(|d| d.clone()).unwrap_or_default();
    if dirs.is_empty() {
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while children.iter().any(|&pid| running(pid)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for dir in dirs {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Whether process `pid` still runs (a zombie, exited but not reaped, does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Sends SIGTERM; true if it was delivered. `kill(1)` rather than a libc call: this
/// crate forbids unsafe and rustix's `process` feature is not enabled here.
pub fn terminate(pid: u32) -> bool {
    Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_flag_installs_twice_and_shares_one_flag() {
        let a = StopFlag::install();
        let b = StopFlag::install();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(StopFlag::is_installed());
        let c = StopFlag::unregistered();
        assert!(!c.is_set());
        c.set();
        assert!(c.is_set());
    }

    #[test]
    fn a_running_process_is_told_from_a_gone_one() {
        assert!(running(std::process::id()));
        assert!(!running(u32::MAX));
    }

    #[test]
    fn the_abort_path_removes_the_registered_scratch_directories_only() {
        let scratch = tempfile::tempdir().expect("scratch dir");
        let base = scratch.path();
        let (kept, gone) = (base.join("kept"), base.join("gone"));
        std::fs::create_dir_all(&kept).expect("mkdir");
        std::fs::create_dir_all(&gone).expect("mkdir");
        std::fs::write(gone.join("segment"), b"x").expect("write");
        register_scratch_dir(&kept, true);
        register_scratch_dir(&gone, true);
        register_scratch_dir(&kept, false);
        remove_scratch_dirs(&[]);
        assert!(kept.is_dir());
        assert!(!gone.exists());
    }
}
