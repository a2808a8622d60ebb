//! Test helper shared by the FIX tests of `tickwire-fix` (`support/spec.rs`) and of the
//! `tickwire` binary (`tests/fix_support`): run a setup script (fetch the QuickFIX
//! dictionaries, build the QuickFIX peer) once across the test binaries that cargo runs
//! in parallel, under a lock directory in `target/`. The one copy of that lock; include
//! it with `#[path = ".../support/provide.rs"] mod provide;`.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// A lock directory older than this was left by a killed process and is removed. The
/// longest script (building the QuickFIX peer on a loaded machine) fits well inside it.
pub const STALE_AFTER: Duration = Duration::from_secs(900);

/// Runs `bash <root>/<script> <args>` unless `done()` holds, holding the lock directory
/// `<root>/target/<lock_name>` while it runs; waits (at most [`STALE_AFTER`]) for
/// another process holding it. Panics, naming the script, when it fails or `done()`
/// still does not hold afterwards.
pub fn provide(
    root: &Path,
    lock_name: &str,
    script: &str,
    args: &[&Path],
    done: impl Fn() -> bool,
) {
    std::fs::create_dir_all(root.join("target")).expect("creating target/");
    let lock = root.join("target").join(lock_name);
    let deadline = Instant::now() + STALE_AFTER;
    loop {
        match std::fs::create_dir(&lock) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if done() {
                    return; // another test binary did it meanwhile
                }
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .is_some_and(|age| age > STALE_AFTER);
                if stale {
                    let _ = std::fs::remove_dir(&lock);
                    continue;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {} (another test running {script})",
                    lock.display()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("cannot create lock {}: {e}", lock.display()),
        }
    }
    let status = if done() {
        None
    } else {
        Some(
            Command::new("bash")
                .arg(root.join(script))
                .args(args)
                .status(),
        )
    };
    let _ = std::fs::remove_dir(&lock);
    match status {
        None => {}
        Some(Ok(s)) if s.success() && done() => {}
        Some(r) => panic!("{script} failed ({r:?}); the FIX tests need what it provides"),
    }
}
