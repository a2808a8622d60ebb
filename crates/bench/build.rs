//! Records the commit the binary is built from (`TICKWIRE_BUILD_COMMIT`): the benchmark
//! reports name the code that ran, not whatever the checkout holds when they run.
//! Empty when git or the repository is not available (a source tarball); the report
//! then falls back to the checkout's commit at run time.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    println!("cargo:rustc-env=TICKWIRE_BUILD_COMMIT={commit}");
    // Build again when HEAD moves: HEAD itself, and the branch it names (in the common
    // directory for a worktree). Only paths that exist: a missing one would make cargo
    // run this script on every build.
    println!("cargo:rerun-if-changed=build.rs");
    let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let mut watch = vec![Path::new(&dir).join("HEAD")];
    if let Ok(head) = std::fs::read_to_string(Path::new(&dir).join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            watch.push(Path::new(&common).join(branch));
        }
    }
    watch.push(Path::new(&common).join("packed-refs"));
    for p in watch.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
