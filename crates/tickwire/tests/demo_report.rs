//! `tickwire demo`'s command line: values the demo cannot run with are usage errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// Runs `tickwire demo ARGS...`; its exit status and standard error.
fn demo(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .arg("demo")
        .args(args)
        .env("TICKWIRE_LOG", "error")
        .output()
        .expect("running tickwire demo");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Regression: `demo --duration 0` and `demo --rate 0` exited with status 1, as a run
/// that failed; a bad value anywhere else is a usage error, status 2.
#[test]
fn a_zero_duration_or_rate_is_a_usage_error() {
    for (args, flag) in [
        (&["--duration", "0"][..], "--duration"),
        (&["--duration", "0s"][..], "--duration"),
        (&["--duration", "2h"][..], "--duration"),
        (&["--rate", "0"][..], "--rate"),
    ] {
        let (code, err) = demo(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        // Refused before anything ran: no router, no report.
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
