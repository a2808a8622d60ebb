//! Issue 18: QuickFIX/C++'s own acceptance-test scenarios (its `test/definitions/server`,
//! FIX.4.0 to FIX.5.0 SP2, 467 scripted sessions) played by QuickFIX's own Ruby runner
//! against the real `tickwire fix acceptor --app echo`, as QuickFIX plays them against
//! its `at` server. `scripts/quickfix-acceptance.sh` fetches the scenarios (Debian's
//! QuickFIX source, pinned by SHA-256) and Ruby, starts one acceptor per FIX version
//! (the SP1/SP2 scenarios also against one with QuickFIX's single settings file: 587
//! runs) and reads the runner's reports; every run must pass.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fix_support;

use std::process::Command;

use fix_support::{repo_root, spec_dir, temp_dir};

#[test]
fn quickfix_acceptance_scenarios_all_pass_against_the_echo_acceptor() {
    // The dictionaries through the tests' shared lock, so the script finds them present.
    let spec = spec_dir();
    let out_dir = temp_dir("acceptance");
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/quickfix-acceptance.sh"))
        .arg("--tickwire")
        .arg(env!("CARGO_BIN_EXE_tickwire"))
        .arg("--out")
        .arg(out_dir.path())
        .env("TICKWIRE_FIX_SPEC", &spec)
        .output()
        .expect("running scripts/quickfix-acceptance.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("quickfix-acceptance: ") && l.contains(" passed, "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}\n{stderr}"));
    // "quickfix-acceptance: P passed, F failed of N"
    let numbers: Vec<u64> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let [passed, failed, total] = numbers[..] else {
        panic!("unexpected summary {summary:?}");
    };
    if !(out.status.success() && failed == 0 && passed == total && total >= 580) {
        // The runner's per-scenario reports explain a failure: keep them (the guard
        // removes the directory in every other case).
        let kept = out_dir.keep();
        panic!(
            "QuickFIX's acceptance scenarios: {summary} (output kept in {}):\n{stdout}\n{stderr}",
            kept.display()
        );
    }
}
