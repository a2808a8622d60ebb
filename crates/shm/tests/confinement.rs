//! The unsafe-confinement invariant (ARCHITECTURE.md, "Invariants"), checked by a tool
//! rather than by review:
//!
//! - the workspace forbids `unsafe_code`, and every crate but two opts in with
//!   `[lints] workspace = true`: `alloc-count` (test-only `GlobalAlloc`) and this crate;
//! - this crate sets `unsafe_code = "deny"`, so only a module that says
//!   `#[allow(unsafe_code)]` may contain unsafe code, plus clippy's
//!   `undocumented_unsafe_blocks = "deny"` (every block carries `// SAFETY:`);
//! - exactly one file in the whole workspace says `allow(unsafe_code)`:
//!   `crates/shm/src/raw.rs`, and no other file of this crate uses the keyword `unsafe`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Code without `//` comments (doc comments included), so prose may name the lint.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn workspace_forbids_unsafe_and_every_other_crate_opts_in() {
    let root = root();
    let ws = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(ws.contains("[workspace.lints.rust]\nunsafe_code = \"forbid\""));
    let mut crates = 0;
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let manifest = e.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        crates += 1;
        let name = e.file_name().to_string_lossy().into_owned();
        match name.as_str() {
            "shm" => {
                assert!(text.contains("[lints.rust]\nunsafe_code = \"deny\""));
                assert!(text.contains("undocumented_unsafe_blocks = \"deny\""));
            }
            // Test-only counting allocator; documented in ARCHITECTURE.md.
            "alloc-count" => assert!(text.contains("publish = false")),
            _ => assert!(
                code_of(&text).contains("[lints]\nworkspace = true"),
                "{name} must use the workspace lints (unsafe_code = forbid)"
            ),
        }
    }
    assert!(crates >= 14);
}

#[test]
fn only_raw_rs_allows_unsafe_code() {
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("fuzz"), &mut files);
    assert!(files.len() > 100);
    let raw = root.join("crates/shm/src/raw.rs");
    for f in &files {
        if f.ends_with("shm/tests/confinement.rs") {
            continue; // this file names the attribute in its checks
        }
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        if code.contains("allow(unsafe_code)") {
            assert_eq!(f, &raw, "only crates/shm/src/raw.rs may allow unsafe code");
        }
        let in_shm = f.starts_with(root.join("crates/shm"));
        if in_shm && f != &raw {
            assert!(
                !code
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "unsafe"),
                "{} uses `unsafe` outside raw.rs",
                f.display()
            );
        }
    }
    let raw_code = std::fs::read_to_string(&raw).unwrap();
    assert!(raw_code.contains("#![allow(unsafe_code)]"));
    // Every unsafe block and impl in raw.rs is preceded by a SAFETY comment (clippy
    // checks the blocks; this also covers the `unsafe impl`s).
    let lines: Vec<&str> = raw_code.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let code = code_of(l);
        if code.contains("unsafe {") || code.trim_start().starts_with("unsafe impl") {
            let before = lines[..i]
                .iter()
                .rev()
                .take_while(|p| p.trim_start().starts_with("//"));
            assert!(
                before.into_iter().any(|p| p.contains("SAFETY:")),
                "raw.rs line {}: unsafe without a SAFETY comment",
                i + 1
            );
        }
    }
}
