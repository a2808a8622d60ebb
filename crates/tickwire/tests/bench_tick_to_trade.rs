//! End-to-end smoke runs of `tickwire bench tick-to-trade`: the real binary, the real
//! algos (tickwire's FIX engine, the raw responder, QuickFIX's reference algo when it is
//! built), a low rate for about two seconds. Checks that every X is answered by exactly
//! one D and that the JSON report has the expected fields; never asserts timing.

// A test shows the child's output and skips on stderr: tests may print.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Short and gentle: 400 X/s for 2 s after a 0.25 s warm-up; the algos block in the
/// kernel when idle (the simulator itself spins, as it must).
const SHORT: &[&str] = &[
    "--rates",
    "400",
    "--step-duration",
    "2s",
    "--warmup",
    "0.25s",
    "--drain",
    "3s",
    "--idle",
    "block",
    "--heartbeat",
    "5",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the bench with `args` plus `--json FILE` (from the workspace root, where the
/// default paths of the QuickFIX tools are), within [`TIMEOUT`]; returns the exit code,
/// the parsed JSON and the output.
fn run_bench(tag: &str, args: &[&str]) -> (i32, Value, String) {
    common::run_bench_json("tick-to-trade", tag, args, Some(&root()), TIMEOUT)
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {v}"))
}

/// The checks every measured algo must pass: counts reconcile (every X answered by
/// exactly one D, none missing, none unexpected) and every reported figure is there.
fn check_algo(doc: &Value, name: &str, output: &str) {
    let algos = doc["algos"].as_array().expect("algos");
    let a = algos
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no result for {name}:\n{output}"));
    assert!(
        a["error"].is_null(),
        "{name} failed: {}\n{output}",
        a["error"]
    );
    assert!(
        a["ended_early"].is_null(),
        "{name}: {}\n{output}",
        a["ended_early"]
    );
    let steps = a["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{name}: one step\n{output}");
    let s = &steps[0];
    // 400/s for exactly 2 s: the schedule holds 800 X.
    assert_eq!(num(s, &["sent"]), 800.0, "{name}\n{output}");
    assert_eq!(
        num(s, &["received"]),
        800.0,
        "{name}: every X answered\n{output}"
    );
    assert_eq!(num(s, &["missing"]), 0.0, "{name}\n{output}");
    assert_eq!(num(s, &["duplicates"]), 0.0, "{name}\n{output}");
    assert_eq!(num(s, &["latency", "samples"]), 800.0, "{name}\n{output}");
    assert_eq!(num(s, &["target_rate"]), 400.0);
    for f in [
        "p95_us",
        "p98_us",
        "achieved_rate",
        "sent_rate",
        "duration_s",
    ] {
        assert!(num(s, &[f]) >= 0.0, "{name}: {f}");
    }
    for f in [
        "min_us",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "mean_us",
        "stddev_us",
    ] {
        assert!(num(s, &["latency", f]) > 0.0, "{name}: latency.{f} missing");
    }
    assert!(num(s, &["latency", "p50_us"]) <= num(s, &["p95_us"]));
    assert!(num(s, &["p98_us"]) <= num(s, &["latency", "p99_us"]));
    assert!(s.get("lateness").is_some() && s.get("invalid").is_some());
    assert!(
        s.get("cpu_us_per_tick").is_some(),
        "{name}: CPU per tick field"
    );
    // The warm-up (0.25 s at 400/s) is excluded and counted apart.
    assert_eq!(num(a, &["warmup_excluded"]), 100.0, "{name}");
    let c = &a["counters"];
    assert_eq!(
        num(c, &["sent"]),
        900.0,
        "{name}: warm-up included\n{output}"
    );
    assert_eq!(num(c, &["received"]), 900.0, "{name}\n{output}");
    assert_eq!(num(c, &["gaps"]), 0.0, "{name}");
    assert_eq!(num(c, &["duplicates"]), 0.0, "{name}");
    assert_eq!(num(a, &["unexpected"]), 0.0, "{name}");
}

fn check_report(doc: &Value) {
    assert_eq!(doc["bench"], "tick-to-trade");
    assert!(num(doc, &["machine", "cores"]) >= 1.0);
    let scaling = doc["scaling"].as_str().expect("scaling");
    assert!(scaling.contains("rates are never scaled"), "{scaling}");
    assert!(doc["warmup_note"]
        .as_str()
        .is_some_and(|n| n.contains("excluded")));
}

#[test]
fn raw_and_builtin_side_by_side_answer_every_tick_once() {
    let mut args = vec!["--compare", "builtin,raw"];
    args.extend_from_slice(SHORT);
    let (code, doc, output) = run_bench("compare", &args);
    assert_eq!(code, 0, "{output}");
    check_report(&doc);
    check_algo(&doc, "builtin", &output);
    check_algo(&doc, "raw", &output);
    // The builtin algo runs with the durable file store by default.
    let b = &doc["algos"][0];
    assert!(
        b["description"]
            .as_str()
            .is_some_and(|d| d.contains("file store")),
        "{}",
        b["description"]
    );
    let ratios = doc["ratios"].as_array().expect("ratios");
    assert!(
        ratios
            .iter()
            .any(|r| r["algo"] == "builtin" && r["versus"] == "raw"),
        "{ratios:?}"
    );
    assert!(output.contains("rates are never scaled"), "{output}");
    assert!(output.contains("p98"), "{output}");
}

#[test]
fn an_external_algo_is_measured_with_its_cpu_time() {
    // tickwire's raw responder started by hand, measured through --algo-addr/--algo-pid.
    let mut algo = Command::new(env!("CARGO_BIN_EXE_tickwire"))
        .args([
            "bench",
            "tick-to-trade-algo",
            "--kind",
            "raw",
            "--idle",
            "block",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the raw responder");
    let mut line = String::new();
    BufReader::new(algo.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("READY line");
    let addr = line
        .trim()
        .strip_prefix("READY ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    let pid = algo.id().to_string();
    let mut args = vec!["--algo-addr", addr.as_str(), "--algo-pid", pid.as_str()];
    args.extend_from_slice(SHORT);
    let (code, doc, output) = run_bench("external", &args);
    let _ = algo.kill();
    let _ = algo.wait();
    assert_eq!(code, 0, "{output}");
    check_report(&doc);
    check_algo(&doc, "external", &output);
    assert!(
        doc["algos"][0]["cpu_resolution_ms"].as_f64().is_some(),
        "the CPU probe of --algo-pid"
    );
}

#[test]
fn an_algo_that_is_not_there_fails_clearly() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["--algo-addr", addr.as_str()];
    args.extend_from_slice(SHORT);
    let (code, doc, output) = run_bench("absent", &args);
    assert_ne!(code, 0, "{output}");
    let e = doc["algos"][0]["error"].as_str().expect("an error");
    assert!(e.contains("connecting"), "{e}");
}

#[test]
fn quickfix_reference_algo_answers_every_tick_once() {
    let r = root();
    if !r.join("target/quickfix/bin/qf_peer").exists()
        || !r.join("target/fix-spec/FIX44.xml").exists()
    {
        common::peer_missing(
            "quickfix_reference_algo_answers_every_tick_once",
            "the QuickFIX reference algo is not built (scripts/install-quickfix.sh, \
             scripts/fetch-fix-spec.sh; .ci/setup runs both)",
        );
        return;
    }
    let mut args = vec!["--algo", "quickfix"];
    args.extend_from_slice(SHORT);
    let (code, doc, output) = run_bench("quickfix", &args);
    assert_eq!(code, 0, "{output}");
    check_report(&doc);
    check_algo(&doc, "quickfix", &output);
}

/// A comparison with a side that cannot be measured is a failure, found before anything
/// is measured: with QuickFIX's peer missing, `--compare builtin:block,quickfix,...` ran
/// ~80 s and only then said `not measured: quickfix`. Now it stops at once with where it
/// looked and how to install it, and measures nothing.
#[test]
fn a_missing_quickfix_peer_stops_the_run_before_anything_is_measured() {
    let args = [
        "bench",
        "tick-to-trade",
        "--compare",
        "builtin:block,quickfix,builtin:spin,raw:spin",
        "--quickfix-bin",
        "/nonexistent/qf_peer",
    ];
    // The published burst cycle unscaled (5 min per algo): only the check can end it
    // within the time allowed.
    let (st, out, err) = common::run_cli_in(Some(&root()), &args, Duration::from_secs(60));
    let output = format!("{out}{err}");
    assert_eq!(st.code(), Some(1), "{output}");
    for part in [
        "quickfix cannot be measured, so nothing was",
        "qf_peer) not found; looked in:",
        "/nonexistent/qf_peer (--quickfix-bin)",
        "scripts/install-quickfix.sh",
    ] {
        assert!(output.contains(part), "{part:?} not in:\n{output}");
    }
    // Nothing started, nothing measured: not even the header of a run.
    for part in ["tick-to-trade (docs", "X sent", "p50", "warm-up"] {
        assert!(!output.contains(part), "{part:?} in:\n{output}");
    }
}

/// An algo that fails while running (its prerequisites were there) is reported as not
/// measured and fails the run (it exited 0 once); what was measured is still reported.
#[test]
fn an_algo_that_fails_while_running_fails_the_run_and_the_rest_is_reported() {
    // A "qf_peer" that exits at once, with settings and a dictionary directory that
    // exist: past the check, it fails when started.
    let spec = std::env::temp_dir().join(format!("t2t-spec-{}", std::process::id()));
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(spec.join("FIX44.xml"), "").unwrap();
    let cfg = spec.join("algo-acceptor.cfg");
    std::fs::write(&cfg, "").unwrap();
    let (spec_arg, cfg_arg) = (spec.display().to_string(), cfg.display().to_string());
    let args = [
        "--compare",
        "raw,quickfix",
        "--rates",
        "1k",
        "--step-duration",
        "1s",
        "--warmup",
        "0s",
        "--drain",
        "1s",
        "--quickfix-bin",
        "/bin/false",
        "--quickfix-config",
        &cfg_arg,
        "--spec-dir",
        &spec_arg,
    ];
    let (code, doc, output) = run_bench("unmeasured", &args);
    let _ = std::fs::remove_dir_all(&spec);
    assert_eq!(code, 1, "{output}");
    assert!(
        output.contains("not measured: quickfix (see above); exit status 1"),
        "{output}"
    );
    // The raw responder was measured all the same.
    let raw = doc["algos"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["name"] == "raw"))
        .unwrap_or_else(|| panic!("no raw algo in the report: {doc}"));
    assert!(raw["error"].is_null(), "{raw}");
}
