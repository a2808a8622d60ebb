//! The temporary spool of a router listening on port 0 (a test's, a benchmark's): a
//! `tickwire-spool-*` directory in the system's temporary directory, removed when the
//! router stops. A router killed outright (SIGKILL) cannot remove its own, and its
//! spool's preallocated segments take tens of megabytes, so each new one first removes
//! those whose router is gone: directories of this user that name their owner process
//! (`tickwire-owner`: its pid and pid namespace) when that process no longer exists in
//! this pid namespace. A directory without that file (being made, or made by an older
//! version), another user's, or one whose owner lives, or lives in another pid
//! namespace that shares the directory, is left alone.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::Context;

const PREFIX: &str = "tickwire-spool-";
const OWNER: &str = "tickwire-owner";

/// Removes the spools left by routers that are gone, then makes this router's own.
pub fn create() -> anyhow::Result<tempfile::TempDir> {
    let tmp = std::env::temp_dir();
    let removed = reap(&tmp);
    if removed > 0 {
        tracing::info!(
            removed,
            dir = %tmp.display(),
            "removed temporary spool directories left by routers that were killed"
        );
    }
    let dir = tempfile::Builder::new()
        .prefix(PREFIX)
        .tempdir()
        .context("creating a temporary spool directory")?;
    std::fs::write(dir.path().join(OWNER), owner_line(std::process::id()))
        .context("writing the temporary spool's owner file")?;
    Ok(dir)
}

/// The owner file's content for process `pid` of this pid namespace.
fn owner_line(pid: u32) -> String {
    format!("{pid} {}\n", pid_namespace().unwrap_or_default())
}

/// This process's pid namespace (the link text of `/proc/self/ns/pid`).
fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|l| l.to_string_lossy().into_owned())
}

/// Removes the temporary spools in `tmp` whose owner is gone (see the module docs);
/// returns how many.
pub fn reap(tmp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let uid = rustix::process::getuid().as_raw();
    let Some(ns) = pid_namespace() else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let path = e.path();
        // Not a symlink (symlink_metadata), a directory, ours.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(path.join(OWNER)) else {
            continue;
        };
        let mut words = text.split_whitespace();
        let (Some(Ok(pid)), Some(owner_ns)) = (words.next().map(str::parse::<u32>), words.next())
        else {
            continue;
        };
        if owner_ns != ns || pid == 0 || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid that no process has: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        pid
    }

    fn spool(tmp: &Path, name: &str, owner: Option<String>) -> std::path::PathBuf {
        let d = tmp.join(format!("{PREFIX}{name}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("segment"), b"data").unwrap();
        if let Some(o) = owner {
            std::fs::write(d.join(OWNER), o).unwrap();
        }
        d
    }

    #[test]
    fn only_spools_whose_owner_is_gone_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let gone = spool(t, "gone", Some(owner_line(dead_pid())));
        let alive = spool(t, "alive", Some(owner_line(std::process::id())));
        let unnamed = spool(t, "unnamed", None);
        let other_ns = spool(t, "otherns", Some(format!("{} pid:[1]\n", dead_pid())));
        let garbage = spool(t, "garbage", Some("not a pid".into()));
        let unrelated = t.join("something-else");
        std::fs::create_dir(&unrelated).unwrap();
        assert_eq!(reap(t), 1);
        assert!(!gone.exists());
        for kept in [&alive, &unnamed, &other_ns, &garbage, &unrelated] {
            assert!(kept.exists(), "{} removed", kept.display());
        }
        assert_eq!(reap(t), 0);
    }
}
