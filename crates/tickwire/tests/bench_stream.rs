//! `tickwire bench stream` end to end: a short two-rate sweep over raw UDP and a real
//! router, checked for its tables and its JSON counters. No timing is asserted.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_help_lists, run_bench_report, transport_rows, u};

#[test]
fn stream_sweeps_two_rates_on_both_transports_and_reconciles() {
    sweep_two_rates_and_reconcile(&[], &["tickwire"]);
}

/// Over multicast: tickwire's reliable multicast (no router) and its plain UDP floor.
#[test]
fn stream_sweeps_two_rates_over_multicast_and_reconciles() {
    sweep_two_rates_and_reconcile(
        &["--transport", "udp-mcast,tickwire-mcast"],
        &["tickwire-mcast"],
    );
}

/// A short two-rate sweep on the default transports or `transport_args`' two: tables,
/// counters that reconcile, latency samples; on the `reliable` ones every message and
/// every reflection arrived.
fn sweep_two_rates_and_reconcile(transport_args: &[&str], reliable: &[&str]) {
    let (out, v) = short_sweep(transport_args, "1k,2k");
    for header in [
        "target/s",
        "sent/s",
        "recv/s",
        "received",
        "gaps",
        "one-way latency",
        "sender lateness",
        "p99",
    ] {
        assert!(out.contains(header), "no {header:?} in\n{out}");
    }

    // A saturated first step would stop the sweep; at 1k msg/s that means a broken
    // machine, and the message says which step.
    for (t, s) in transport_rows(&v, "steps", 2, 2) {
        let c = &s["counters"];
        let sent = u(c, "sent");
        // 0.4 s at 1k or 2k msg/s, warm-up included.
        assert!(sent >= 390, "{s}");
        assert_eq!(u(c, "duplicates"), 0, "{s}");
        assert_eq!(u(c, "out_of_order"), 0, "{s}");
        // Every message is received or accounted as a gap.
        assert_eq!(u(c, "received") + u(c, "gaps"), sent, "{s}");
        if reliable.iter().any(|r| t["transport"] == *r) {
            assert_eq!(u(c, "received"), sent, "{s}");
            assert_eq!(
                u(s, "reflections_received"),
                u(s, "reflections_sent"),
                "{s}"
            );
        }
        assert!(u(s, "warmup_messages") > 0, "{s}");
        assert!(u(&s["one_way"], "samples") > 0, "{s}");
    }
}

/// The floors of the router's topology (issue 15): a bare relay thread in the
/// router's place over TCP and over shared-memory rings. Every message and every
/// reflection arrives, and the report ends with each one's highest lossless rate and
/// their ratio.
#[test]
fn stream_relay_floors_reconcile_and_report_their_highest_lossless_rates() {
    sweep_two_rates_and_reconcile(
        &["--transport", "tcp-relay,shm-relay", "--size", "100"],
        &["tcp-relay", "shm-relay"],
    );
    let (out, v) = short_sweep(
        &["--transport", "tcp-relay,shm-relay", "--size", "100"],
        "1k,2k",
    );
    assert!(
        out.contains("tcp-relay —") && out.contains("shm-relay —"),
        "{out}"
    );
    assert!(
        out.contains("highest lossless rate"),
        "no summary in\n{out}"
    );
    for (t, _) in transport_rows(&v, "steps", 2, 2) {
        // Both steps lost nothing; at these rates both ends keep the rate.
        let top = t["highest_lossless_rate"].as_f64();
        assert!(matches!(top, Some(r) if r == 1000.0 || r == 2000.0), "{t}");
    }
    assert!(out.contains("shm-relay / tcp-relay:"), "no ratio in\n{out}");
}

/// The TLS path (issue 20): the same router code behind its TLS listener, every
/// message received and every reflection back.
#[test]
fn stream_over_tls_reconciles_beside_plaintext() {
    let (out, v) = short_sweep(
        &["--transport", "tickwire,tickwire-tls", "--size", "100"],
        "2k",
    );
    assert!(out.contains("tickwire-tls —"), "no TLS table in\n{out}");
    let rows = transport_rows(&v, "steps", 2, 1);
    assert_eq!(rows[1].0["transport"], "tickwire-tls", "{v}");
    for (_, s) in rows {
        let c = &s["counters"];
        assert!(u(c, "sent") >= 590, "{s}");
        assert_eq!(u(c, "received"), u(c, "sent"), "{s}");
        assert_eq!(u(c, "gaps"), 0, "{s}");
        assert_eq!(
            u(s, "reflections_received"),
            u(s, "reflections_sent"),
            "{s}"
        );
    }
}

/// `--idle block` (a new-user pass, 2026-12-05): the sender slept on a timer until its
/// next send and read the reflections only then, so every round trip read as the send
/// interval (p50 504.6 µs at 2k msg/s, 202.8 µs at 5k, whatever the transport). It now
/// sleeps on the reflections. At 200 msg/s (5 ms apart; the old timer sleep was capped
/// at 1 ms, so the old round trips read ~1,070 µs) a loopback round trip's median stays
/// far below 700 µs on every transport and floor.
#[test]
fn a_blocking_sender_times_reflections_when_they_arrive_not_at_its_next_send() {
    let (_, v) = run_bench_report(
        "stream",
        &[
            "--transport",
            "udp,tickwire,tcp-relay",
            "--size",
            "100",
            "--rates",
            "200",
            "--step-duration",
            "0.5",
            "--warmup",
            "0.1",
            "--reflect-every",
            "1",
            "--idle",
            "block",
        ],
    );
    for (t, s) in transport_rows(&v, "steps", 3, 1) {
        let rt = &s["round_trip"];
        assert!(u(rt, "samples") >= 50, "{t}");
        let p50 = rt["p50_us"].as_f64().unwrap();
        assert!(
            p50 < 700.0,
            "round trip p50 {p50} µs at 5 ms intervals: {t} {s}"
        );
    }
}

/// A sweep of `rates`, 0.3 s per rate after 0.1 s of warm-up, every tenth message
/// reflected, idle block, with `extra` flags: the printed report and its JSON.
fn short_sweep(extra: &[&str], rates: &str) -> (String, serde_json::Value) {
    let mut args = extra.to_vec();
    args.extend([
        "--rates",
        rates,
        "--step-duration",
        "0.3",
        "--warmup",
        "0.1",
        "--reflect-every",
        "10",
        "--idle",
        "block",
    ]);
    run_bench_report("stream", &args)
}

#[test]
fn stream_help_teaches() {
    assert_help_lists(
        &["bench", "stream", "--help"],
        &[
            "--transport",
            "tickwire-mcast",
            "udp-mcast",
            "tcp-relay",
            "shm-relay",
            "--size",
            "--rates",
            "--step-duration",
            "--reflect-every",
            "--idle",
            "--json",
            "--plot",
            "tickwire-tls",
            "Examples:",
        ],
    );
}

/// New-user pass: Ctrl-C in the middle of a step reported it INVALID (saturated) at
/// half its rate: the messages sent were divided by the whole planned step. A step cut
/// short by Ctrl-C is measured over the time it ran and gets no verdict; the run exits
/// 130 with its report.
#[test]
fn a_step_stopped_by_ctrl_c_is_cut_short_not_invalid() {
    use std::io::{BufRead, BufReader};
    let json = common::temp("stream-ctrl-c.json");
    let json_arg = json.to_string_lossy().into_owned();
    let mut child = common::cli(&[
        "bench",
        "stream",
        "--transport",
        "tickwire",
        "--rates",
        "10k",
        "--step-secs",
        "60s",
        "--idle",
        "block",
        "--json",
        &json_arg,
    ])
    .spawn()
    .expect("spawn bench stream");
    // Two progress lines: well into the measured part of the step.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("msg/s: sent") {
                let _ = tx.send(());
            }
            seen.push(line);
        }
        seen.join("\n")
    });
    for _ in 0..2 {
        if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
            let _ = child.kill();
            panic!("no progress line");
        }
    }
    common::interrupt(&child);
    let status = common::wait_child(
        &mut child,
        std::time::Duration::from_secs(60),
        "bench stream after Ctrl-C",
    );
    let (out, _) = common::take_output(&mut child);
    let err = reader.join().expect("stderr reader");
    assert_eq!(status.code(), Some(130), "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.contains("INVALID"), "{out}");
    assert!(out.contains("cut short"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid");
    let step = &doc["transports"][0]["steps"][0];
    assert_eq!(step["complete"], false, "{step}");
    assert!(step["invalid"].is_null(), "{step}");
}
