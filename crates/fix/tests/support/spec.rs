//! Test helper: locates the standard QuickFIX data dictionaries.
//!
//! The dictionaries are third-party files and are never committed. `spec_dir()` returns
//! `<repo>/target/fix-spec` and, when a file is missing, runs `scripts/fetch-fix-spec.sh`
//! once per process (`std::sync::Once`) under the cross-process lock of
//! `support/provide.rs`, because cargo runs test binaries in parallel.
//! Other test files include it with `#[path = "support/spec.rs"] mod spec;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Once;

#[path = "provide.rs"]
mod provide;

/// Every dictionary file the fetch script provides.
pub const SPEC_FILES: [&str; 9] = [
    "FIX40.xml",
    "FIX41.xml",
    "FIX42.xml",
    "FIX43.xml",
    "FIX44.xml",
    "FIX50.xml",
    "FIX50SP1.xml",
    "FIX50SP2.xml",
    "FIXT11.xml",
];

fn repo_root() -> PathBuf {
    // crates/fix -> repository root
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn all_present(dir: &Path) -> bool {
    SPEC_FILES.iter().all(|f| {
        std::fs::metadata(dir.join(f))
            .map(|m| m.len() > 0)
            .unwrap_or(false)
    })
}

/// Directory holding FIX40.xml ... FIXT11.xml; fetches them first when missing.
///
/// Panics with an explanation when the files cannot be obtained.
pub fn spec_dir() -> PathBuf {
    static FETCH: Once = Once::new();
    let root = repo_root();
    let dir = root.join("target").join("fix-spec");
    FETCH.call_once(|| {
        if !all_present(&dir) {
            fetch_locked(&root, &dir);
        }
    });
    assert!(
        all_present(&dir),
        "the QuickFIX dictionaries are missing from {} and scripts/fetch-fix-spec.sh did not \
         provide them (it needs python3 -m pip and access to PyPI)",
        dir.display()
    );
    dir
}

/// Path of one dictionary, e.g. `spec_file("FIX44.xml")`.
pub fn spec_file(name: &str) -> PathBuf {
    spec_dir().join(name)
}

fn fetch_locked(root: &Path, dir: &Path) {
    provide::provide(
        root,
        "fix-spec.lock",
        "scripts/fetch-fix-spec.sh",
        &[dir],
        || all_present(dir),
    );
}
