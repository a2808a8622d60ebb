//! End-to-end smoke runs of `tickwire bench fanout`: the real binary, a real router
//! (and a real NATS server: `.ci/setup` installs it; a missing one fails under CI),
//! tiny rates, short runs. Checks that the report's counters reconcile; never asserts
//! timing or the achieved rate.

// A test shows the child's output on failure: tests may print.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::u_at;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Runs the bench with `args` plus `--json FILE`, within [`TIMEOUT`]; returns the exit
/// code, the parsed JSON and the output (for failure messages).
fn run_fanout(tag: &str, args: &[&str]) -> (i32, serde_json::Value, String) {
    common::run_bench_json("fanout", tag, args, None, TIMEOUT)
}

/// The exit code is 0, or 3 (INVALID: the machine did not sustain 90% of the target
/// rate, which a loaded test machine may not; the report must then say so). Never 1:
/// lost, duplicated or reordered messages or a thread error fail the test whatever the
/// rate. The rate itself is never asserted.
fn assert_exit_ok_or_invalid(code: i32, doc: &serde_json::Value, output: &str) {
    match code {
        0 => assert_eq!(doc["valid"], true, "exit 0 but not valid:\n{output}"),
        3 => {
            assert_eq!(doc["valid"], false, "exit 3 but valid:\n{output}");
            eprintln!(
                "note: rate not sustained on this machine (INVALID): {}",
                doc["invalid"]
            );
        }
        other => panic!("exit code {other}; output:\n{output}"),
    }
}

/// Sent, expected and received reconcile: every message reached every subscriber once.
fn assert_reconciles(doc: &serde_json::Value, subscribers: u64, output: &str) {
    let sent = u_at(doc, &["counters", "sent"]);
    let expected = u_at(doc, &["counters", "expected"]);
    let received = u_at(doc, &["counters", "received"]);
    assert!(sent > 0, "nothing was sent:\n{output}");
    assert_eq!(
        expected,
        sent * subscribers,
        "each subscriber is on every topic:\n{output}"
    );
    assert_eq!(received, expected, "deliveries do not reconcile:\n{output}");
    for c in ["gaps", "duplicates", "out_of_order", "malformed"] {
        assert_eq!(u_at(doc, &["counters", c]), 0, "{c}:\n{output}");
    }
    assert_eq!(doc["counters"]["reconciled"], true, "{output}");
    // The latency figures cover the measured part only, one sample per delivery.
    let samples = u_at(doc, &["latency", "samples"]);
    assert!(
        samples > 0 && samples <= received,
        "{samples} samples of {received}:\n{output}"
    );
    let by_size: u64 = doc["latency_by_size"]
        .as_array()
        .expect("latency_by_size")
        .iter()
        .map(|r| r["latency"]["samples"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        by_size, samples,
        "per-size samples add up to the total:\n{output}"
    );
    assert!(!doc["timeline"].as_array().expect("timeline").is_empty());
    assert!(doc["machine"]["cores"].as_u64().unwrap_or(0) >= 1);
}

const SMALL: &[&str] = &[
    "--rate",
    "2000",
    "--burst",
    "+1000",
    "--duration",
    "1",
    "--warmup",
    "0.2",
    "--publishers",
    "2",
    "--subscribers",
    "2",
    "--topics",
    "3",
];

#[test]
fn fanout_smoke_against_a_tickwire_router_reconciles() {
    let mut args = SMALL.to_vec();
    // Block: the test machine is shared, a spinning router would take a core.
    args.extend(["--idle", "block"]);
    let (code, doc, output) = run_fanout("tickwire", &args);
    assert_exit_ok_or_invalid(code, &doc, &output);
    assert_eq!(doc["system"], "tickwire");
    assert_eq!(doc["bench"], "fanout");
    assert_reconciles(&doc, 2, &output);
    // The router saw every message once and delivered it to both subscribers.
    let totals = &doc["router_stats"]["router"]["totals"];
    if !totals.is_null() {
        assert_eq!(
            totals["msgs_in"].as_u64(),
            Some(u_at(&doc, &["counters", "sent"])),
            "{output}"
        );
    }
}

#[test]
fn fanout_smoke_over_shared_memory_reconciles() {
    let mut args = SMALL.to_vec();
    args.extend(["--idle", "block", "--shm"]);
    let (code, doc, output) = run_fanout("shm", &args);
    assert_exit_ok_or_invalid(code, &doc, &output);
    let shm = doc["router"]["shm"]
        .as_str()
        .expect("router.shm in the report");
    assert!(shm.starts_with("shm:bench-fanout-"), "{shm}:\n{output}");
    let command = doc["router"]["command"].as_str().expect("router.command");
    assert!(command.contains("--shm"), "{command}:\n{output}");
    assert!(
        output.contains("clients connect over shared memory"),
        "the header says so:\n{output}"
    );
    assert_reconciles(&doc, 2, &output);
}

/// `--router shm:NAME`: every publisher and subscriber connects over shared memory to a
/// router that was already running with `--shm NAME`; its counters are in the report.
#[test]
fn fanout_against_a_running_router_over_shared_memory_reconciles() {
    let name = format!("t-fanout-external-{}", std::process::id());
    let socket = tickwire_shm::socket_path(&name);
    let router = common::RouterProc::start(&["--no-guaranteed", "--idle", "block", "--shm", &name]);
    let shm = format!("shm:{name}");
    let mut args = SMALL.to_vec();
    args.extend(["--router", shm.as_str()]);
    let (code, doc, output) = run_fanout("shm-external", &args);
    assert_exit_ok_or_invalid(code, &doc, &output);
    assert_eq!(doc["router"]["shm"], shm.as_str(), "{output}");
    assert!(
        output.contains(&format!("tickwire router at {shm} (external")),
        "the header names the external router:\n{output}"
    );
    assert_reconciles(&doc, 2, &output);
    assert_eq!(
        doc["router_stats"]["router"]["totals"]["msgs_in"].as_u64(),
        Some(u_at(&doc, &["counters", "sent"])),
        "the running router's own counters:\n{output}"
    );
    drop(router);
    let _ = std::fs::remove_file(socket);
}

#[test]
fn fanout_shm_needs_the_tickwire_target() {
    let out = Command::new(env!("CARGO_BIN_EXE_tickwire"))
        .args([
            "bench",
            "fanout",
            "--target",
            "raw",
            "--shm",
            "--duration",
            "1",
        ])
        .output()
        .expect("running tickwire");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--shm") && stderr.contains("--target tickwire"),
        "{stderr}"
    );
}

/// A preset cut down to 2 publishers, 2 subscribers and 2 topics (a debug build's
/// measuring process on a shared core).
const TWO_BY_TWO: [&str; 6] = ["--publishers", "2", "--subscribers", "2", "--topics", "2"];

#[test]
fn fanout_smoke_scaled_preset_prints_the_scaling() {
    let mut args = vec!["--preset", "mdd", "--scale", "0.002"];
    args.extend(TWO_BY_TWO);
    args.extend([
        "--duration",
        "0.5",
        "--warmup",
        "0",
        "--idle",
        "block",
        // The yielding busy-poll, so that its path is exercised too.
        "--client-idle",
        "yield",
    ]);
    let (code, doc, output) = run_fanout("scaled", &args);
    assert_exit_ok_or_invalid(code, &doc, &output);
    assert_eq!(doc["layout"]["client_idle"], "yield", "{output}");
    assert_eq!(doc["scaled"], "SCALED: 0.002 x published rates");
    assert!(
        output.matches("SCALED: 0.002 x published rates").count() >= 2,
        "top and bottom:\n{output}"
    );
    assert_eq!(doc["workload"]["topic_len"], 12);
    assert_reconciles(&doc, 2, &output);
}

/// A nats-server child on a free loopback port, killed on drop.
struct NatsServer {
    child: Child,
    addr: SocketAddr,
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts nats-server on a free port. The port is only free when it was picked: if
/// another process takes it first, nats-server exits and a connect would reach that
/// process; so the check is NATS's own greeting (`INFO {...}`) from a live child, and a
/// lost race is retried on a new port.
fn start_nats(bin: &Path) -> NatsServer {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(bin)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting nats-server");
        let mut server = NatsServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        loop {
            if server
                .child
                .try_wait()
                .expect("nats-server status")
                .is_some()
            {
                break; // it could not listen: another port
            }
            if greets_as_nats(server.addr) {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {}",
                server.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(Instant::now() < deadline, "nats-server never started");
    }
}

/// Whether `addr` accepts a connection and says `INFO` first, as a NATS server does.
fn greets_as_nats(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut first = [0u8; 4];
    std::io::Read::read_exact(&mut s, &mut first).is_ok() && &first == b"INFO"
}

#[test]
fn fanout_smoke_against_nats_reconciles() {
    let Some(bin) = common::nats_server() else {
        common::peer_missing(
            "fanout_smoke_against_nats_reconciles",
            "nats-server is not installed (looked in $GOBIN, ~/go/bin and PATH; \
             scripts/install-nats.sh installs it)",
        );
        return;
    };
    let server = start_nats(&bin);
    let url = format!("nats://{}", server.addr);
    let mut args = SMALL.to_vec();
    args.extend(["--target", &url]);
    let (code, doc, output) = run_fanout("nats", &args);
    drop(server);
    assert_exit_ok_or_invalid(code, &doc, &output);
    assert_eq!(doc["system"], "NATS");
    assert_reconciles(&doc, 2, &output);
}

#[test]
fn fanout_raw_floor_reconciles_and_judges_the_receivers() {
    let mut args = SMALL.to_vec();
    // With write coalescing: everything still arrives, and the layout says so.
    args.extend(["--target", "raw", "--idle", "block", "--coalesce-us", "50"]);
    let (code, doc, output) = run_fanout("raw", &args);
    assert!(output.contains("writes coalesced within 50 µs"), "{output}");
    assert_eq!(doc["layout"]["coalesce_us"], 50, "{output}");
    assert_exit_ok_or_invalid(code, &doc, &output);
    assert_eq!(doc["system"], "raw", "{output}");
    assert_eq!(doc["router"]["started_by_bench"], true, "{output}");
    assert!(output.contains("raw fan-out relay"), "{output}");
    assert_reconciles(&doc, 2, &output);
    // Both verdicts are reported; everything arrived, so the receivers' third check holds.
    assert!(output.contains("receivers: "), "{output}");
    assert_eq!(doc["receivers"]["all_delivered"], true, "{output}");
    assert!(doc["receivers"]["sustained"].is_boolean(), "{output}");
}

/// Each run of a comparison or sweep reconciles on its own.
fn assert_runs_reconcile(doc: &serde_json::Value, runs: usize, subscribers: u64, output: &str) {
    let all = doc["runs"].as_array().expect("runs");
    assert_eq!(all.len(), runs, "{output}");
    for r in all {
        assert_reconciles(r, subscribers, output);
    }
}

#[test]
fn fanout_compare_puts_each_percentile_ratio_to_the_raw_floor_in_the_json() {
    let mut args = SMALL.to_vec();
    args.extend(["--compare", "tickwire,raw", "--idle", "block"]);
    let (code, doc, output) = run_fanout("compare", &args);
    assert!(code == 0 || code == 3, "exit {code}:\n{output}");
    assert_eq!(doc["mode"], "compare", "{output}");
    assert_eq!(doc["systems"], serde_json::json!(["tickwire", "raw"]));
    assert_runs_reconcile(&doc, 2, 2, &output);
    let ratios = doc["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 1, "{output}");
    assert_eq!(ratios[0]["system"], "tickwire");
    assert_eq!(ratios[0]["floor"], "raw");
    for p in ["p50", "p90", "p99", "p999", "max", "mean"] {
        assert!(
            ratios[0][p].as_f64().is_some_and(|r| r > 0.0),
            "{p}: {output}"
        );
    }
    assert!(output.contains("ratio to the raw floor"), "{output}");
}

#[test]
fn fanout_tiny_sweep_writes_the_table_the_json_and_the_svg() {
    let json = common::temp("bench-fanout-sweep.json");
    let svg = common::temp("bench-fanout-sweep.svg");
    let (json_arg, svg_arg) = (json.display().to_string(), svg.display().to_string());
    let mut args = vec![
        "bench",
        "fanout",
        "--preset",
        "mdd",
        "--sweep",
        "0.001,0.002",
        "--compare",
        "tickwire,raw",
    ];
    args.extend(TWO_BY_TWO);
    args.extend([
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--idle",
        "block",
        "--json",
        &json_arg,
        "--plot",
        &svg_arg,
    ]);
    let (st, out, err) = common::run_bench(&args);
    let output = format!("{out}{err}");
    assert!(st.success(), "exit {st}:\n{output}");
    assert!(
        output.contains("==== fan-out sweep: tickwire vs raw ===="),
        "{output}"
    );
    assert!(
        output.contains("knee (highest scale with p99 <= 1000 µs"),
        "{output}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid");
    assert_eq!(doc["mode"], "sweep");
    assert_eq!(doc["scales"], serde_json::json!([0.001, 0.002]));
    assert_eq!(doc["points"].as_array().map(Vec::len), Some(4), "{output}");
    assert_eq!(doc["ratios"].as_array().map(Vec::len), Some(2), "{output}");
    assert_eq!(doc["knees"].as_array().map(Vec::len), Some(2), "{output}");
    assert_runs_reconcile(&doc, 4, 2, &output);
    let plot = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        plot.contains("<svg") && plot.contains("raw p99"),
        "not the sweep plot"
    );
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
}

/// Ctrl-C stops the run with the status the other benches give (130), the report still
/// printed and marked as stopped (the run exited 0 before: a script could not tell a
/// stopped run from a whole one).
#[test]
fn ctrl_c_stops_a_fanout_run_with_status_130_and_its_report() {
    use std::io::{BufRead, BufReader};
    let json = common::temp("fanout-ctrl-c.json");
    let json_arg = json.to_string_lossy().into_owned();
    let mut child = common::cli(&[
        "bench",
        "fanout",
        "--rate",
        "2000",
        "--duration",
        "60",
        "--warmup",
        "0.2",
        "--publishers",
        "1",
        "--subscribers",
        "1",
        "--topics",
        "1",
        "--idle",
        "block",
        "--json",
        &json_arg,
    ])
    .spawn()
    .expect("spawn bench fanout");
    // The first progress line of the measured part: the run is under way.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" measure]") {
                let _ = tx.send(());
            }
            seen.push(line);
        }
        seen.join("\n")
    });
    if rx.recv_timeout(TIMEOUT).is_err() {
        let _ = child.kill();
        panic!("no progress line within {TIMEOUT:?}");
    }
    common::interrupt(&child);
    let status = common::wait_child(&mut child, TIMEOUT, "bench fanout after Ctrl-C");
    let (out, _) = common::take_output(&mut child);
    let err = reader.join().expect("stderr reader");
    assert_eq!(status.code(), Some(130), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid");
    assert_eq!(doc["stopped_by_user"], true, "{out}");
    assert!(u_at(&doc, &["counters", "sent"]) > 0, "{out}");
    // New-user pass: the 60-second schedule's unrun seconds were listed as measured
    // seconds of nothing delivered, and the stall-free line counted them ("10 of 10
    // measured seconds" after 1.9). Only what ran is reported.
    let measured = doc["rates"]["measured_seconds"]
        .as_f64()
        .expect("measured_seconds");
    assert!(measured < 30.0, "{out}");
    let listed = doc["timeline"].as_array().expect("timeline").len() as f64;
    assert!(listed <= measured + 3.0, "{listed} seconds listed:\n{out}");
    let stall_free = out
        .lines()
        .find(|l| l.starts_with("stall-free: "))
        .unwrap_or_else(|| panic!("no stall-free line:\n{out}"));
    let words: Vec<&str> = stall_free.split_whitespace().collect();
    let of: f64 = words
        .windows(3)
        .find(|w| w[0] == "of" && w[2].starts_with("measured"))
        .map_or(1.0, |w| w[1].parse().expect("a count"));
    assert!(of <= measured + 1.0, "{stall_free} ({measured} s measured)");
}

/// New-user pass: a NATS target with no server there said "Connection refused (os
/// error 111)" alone; it now asks whether a nats-server runs there and says how to get
/// one.
#[test]
fn a_nats_target_without_a_server_asks_whether_one_runs() {
    let port = common::free_port().to_string();
    let url = format!("nats://127.0.0.1:{port}");
    let (st, out, err) = common::run_cli(
        &[
            "bench",
            "fanout",
            "--target",
            &url,
            "--duration",
            "1",
            "--idle",
            "block",
        ],
        TIMEOUT,
    );
    assert_eq!(st.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains("is a nats-server running there?") && err.contains("scripts/install-nats.sh"),
        "{err}"
    );
}
