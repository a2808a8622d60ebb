//! `tickwire bench pingpong` end to end: a short real run (raw TCP, raw UDP and a real
//! router), checked for its table and its JSON counters. No timing is asserted.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    assert_help_lists, run_bench as run, run_bench_report, stats_json, transport_rows, u,
    RouterProc,
};
use serde_json::Value;

#[test]
fn pingpong_runs_every_transport_and_reconciles() {
    let (out, v) = run_bench_report(
        "pingpong",
        &[
            "--sizes",
            "64,100",
            "--iterations",
            "200",
            "--warmup",
            "20",
            "--idle",
            "block",
        ],
    );
    for header in "size mean min median max p99 p99.9 stddev iterations".split_whitespace() {
        assert!(out.contains(header), "no {header:?} column in\n{out}");
    }
    for t in ["tcp", "udp", "tickwire"] {
        assert!(out.contains(&format!("{t} —")), "no {t} table in\n{out}");
    }
    assert!(out.contains("idle block"), "idle mode not reported\n{out}");

    assert_eq!(v["echo"], "same-thread");
    for (t, s) in transport_rows(&v, "sizes", 3, 2) {
        let c = &s["counters"];
        assert_eq!(u(c, "sent"), 200, "{s}");
        // UDP may lose a datagram; every ping is then accounted as a gap.
        assert_eq!(u(c, "received") + u(c, "gaps"), u(c, "sent"), "{s}");
        if t["transport"] != "udp" {
            assert_eq!(u(c, "received"), 200, "{s}");
        }
        assert_eq!(u(&s["latency"], "samples"), u(c, "received"), "{s}");
        assert_eq!(u(s, "warmup_excluded"), 20, "{s}");
    }
}

/// The shared-memory transports against their two floors (a bare ring pair, and the
/// router's topology over bare rings): every ping answered, and each ratio reported.
#[test]
fn pingpong_over_shared_memory_reports_both_floors_and_reconciles() {
    let (out, v) = short_run("shm,shm-relay,tickwire-shm", "spin", &[]);
    for t in ["shm", "shm-relay", "tickwire-shm"] {
        assert!(out.contains(&format!("{t} —")), "no {t} table in\n{out}");
    }
    for line in [
        "tickwire-shm p50 / raw shm p50",
        "tickwire-shm p50 / shm-relay p50",
        "shm-relay p50 / raw shm p50",
    ] {
        assert!(out.contains(line), "no {line:?} line in\n{out}");
    }
    for (_, s) in transport_rows(&v, "sizes", 3, 1) {
        let c = &s["counters"];
        assert_eq!(u(c, "sent"), 300, "{s}");
        assert_eq!(u(c, "received"), 300, "{s}");
        assert_eq!(u(&s["latency"], "samples"), 300, "{s}");
    }
    for key in [
        "shm_ratio_to_raw_shm_p50",
        "shm_ratio_to_shm_relay_p50",
        "shm_relay_ratio_to_raw_shm_p50",
    ] {
        assert_ratio_at_100_bytes(&v, key);
    }
}

/// 300 pings of 100 bytes (30 of warm-up before them) over `transports`, idle `idle`,
/// with `extra` flags: the printed report and its JSON.
fn short_run(transports: &str, idle: &str, extra: &[&str]) -> (String, Value) {
    let mut args = vec![
        "--transports",
        transports,
        "--sizes",
        "100",
        "--iterations",
        "300",
        "--warmup",
        "30",
        "--idle",
        idle,
    ];
    args.extend_from_slice(extra);
    run_bench_report("pingpong", &args)
}

/// The report's ratio list `key` holds a positive ratio for the 100-byte size.
fn assert_ratio_at_100_bytes(v: &Value, key: &str) {
    let r = &v[key][0];
    assert_eq!(r[0], 100, "{key}: {}", v[key]);
    assert!(r[1].as_f64().is_some_and(|x| x > 0.0), "{key}: {}", v[key]);
}

/// The TLS path (issue 20) beside plaintext through the same router code: every ping
/// answered, and the ratio reported.
#[test]
fn pingpong_over_tls_reports_its_ratio_to_plaintext() {
    let (out, v) = short_run("tickwire,tickwire-tls", "block", &[]);
    assert!(out.contains("tickwire-tls —"), "no TLS table in\n{out}");
    assert!(
        out.contains("tickwire-tls p50 / tickwire (TCP) p50"),
        "no ratio line in\n{out}"
    );
    for (_, s) in transport_rows(&v, "sizes", 2, 1) {
        let c = &s["counters"];
        assert_eq!(u(c, "sent"), 300, "{s}");
        assert_eq!(u(c, "received"), 300, "{s}");
    }
    assert_ratio_at_100_bytes(&v, "tls_ratio_to_tickwire_tcp_p50");
}

/// The other layout: echo client B on its own thread, both ends spinning (and
/// yielding, on a small machine), against a real router.
#[test]
fn pingpong_with_the_echo_on_its_own_thread_reconciles() {
    let (_, v) = short_run("tickwire", "spin", &["--echo", "thread"]);
    assert_eq!(v["echo"], "thread");
    for (_, s) in transport_rows(&v, "sizes", 1, 1) {
        assert_eq!(u(&s["counters"], "sent"), 300, "{s}");
        assert_eq!(u(&s["counters"], "received"), 300, "{s}");
        assert_eq!(u(&s["latency"], "samples"), 300, "{s}");
    }
}

/// `--router shm:NAME`: the tickwire-shm transport measures a router that is already
/// running with `--shm NAME` (its own counters show the pings), and a `--router` that
/// none of the selected transports would use is refused instead of ignored.
#[test]
fn pingpong_measures_a_running_router_over_shared_memory() {
    let name = format!("t-pp-external-{}", std::process::id());
    let socket = tickwire_shm::socket_path(&name);
    let r = RouterProc::start(&["--no-guaranteed", "--idle", "block", "--shm", &name]);
    let shm = format!("shm:{name}");
    let (out, v) = short_run("tickwire-shm", "block", &["--router", &shm]);
    assert!(
        out.contains(&format!("external router at {shm}")),
        "the report does not name the external router:\n{out}"
    );
    assert_eq!(v["router"], format!("external router at {shm}"), "{v}");
    for (_, s) in transport_rows(&v, "sizes", 1, 1) {
        assert_eq!(u(&s["counters"], "received"), 300, "{s}");
    }
    // 330 pings and 330 pongs went through this router, not one the bench started.
    let stats = stats_json(&r.addr_str());
    let msgs_in = u(&stats["router"]["totals"], "msgs_in");
    assert!(
        msgs_in >= 660,
        "the external router routed {msgs_in} messages: {stats}"
    );

    let (st, _, err) = run(&[
        "bench",
        "pingpong",
        "--transports",
        "tcp,tickwire",
        "--router",
        &shm,
    ]);
    assert!(!st.success(), "a --router no transport uses was accepted");
    assert!(
        err.contains("shared-memory name") && err.contains("tickwire-shm"),
        "{err}"
    );
    let (st, _, err) = run(&["bench", "pingpong", "--router", "shm:"]);
    assert!(!st.success() && err.contains("shm:NAME"), "{err}");
    drop(r);
    let _ = std::fs::remove_file(socket);
}

#[test]
fn pingpong_help_teaches() {
    assert_help_lists(
        &["bench", "pingpong", "--help"],
        &[
            "--sizes",
            "--iterations",
            "--warmup",
            "--transports",
            "--idle",
            "--pin",
            "--router",
            "--echo",
            "--json",
            "--plot",
            "Examples:",
        ],
    );
}

#[test]
fn pingpong_refuses_a_size_below_the_sequence_number() {
    let (st, _, err) = run(&["bench", "pingpong", "--sizes", "4", "--transports", "tcp"]);
    // A usage error, as clap reports one: status 2.
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("too small"), "{err}");
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the fields after the last ')'.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == pid {
            out.push(child);
        }
    }
    out
}

/// New-user pass: a bench killed other than by Ctrl-C or SIGTERM (SIGKILL, a closed
/// terminal's SIGHUP, `| head`'s SIGPIPE) left its router running, spinning a whole
/// CPU for good. The router now asks for SIGTERM when the bench dies: killed with
/// SIGKILL mid-run, the bench takes its router with it.
#[test]
fn a_killed_bench_takes_its_router_with_it() {
    let mut bench = std::process::Command::new(common::BIN)
        .args([
            "bench",
            "pingpong",
            "--transports",
            "tickwire",
            "--sizes",
            "64",
            "--iterations",
            "10M",
            "--warmup",
            "0",
            "--idle",
            "block",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let router = loop {
        if let Some(&r) = children_of(bench.id()).first() {
            let cmd = std::fs::read(format!("/proc/{r}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmd).contains("router") {
                break r;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no router child appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Running: its ping-pong is under way before the bench dies.
    std::thread::sleep(std::time::Duration::from_millis(500));
    bench.kill().unwrap();
    bench.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // Gone, or a zombie until init reaps it: either way no longer running.
        let state = std::fs::read_to_string(format!("/proc/{router}/stat"))
            .ok()
            .and_then(|s| s[s.rfind(')').unwrap() + 2..].chars().next());
        if matches!(state, None | Some('Z') | Some('X')) {
            break;
        }
        if std::time::Instant::now() >= deadline {
            // Not left behind by the failing test either.
            let _ = std::process::Command::new("kill")
                .arg(router.to_string())
                .status();
            panic!(
                "router {router} still running 30 s after its bench was killed (state {state:?})"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
