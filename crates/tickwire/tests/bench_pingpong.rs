//! `tickwire bench pingpong` end to end: a short real run (raw TCP, raw UDP and a real
//! router), checked for its table and its JSON counters. No timing is asserted.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{run_bench as run, temp, u};
use serde_json::Value;

#[test]
fn pingpong_runs_every_transport_and_reconciles() {
    let json = temp("pingpong.json");
    let svg = temp("pingpong.svg");
    let (st, out, err) = run(&[
        "bench",
        "pingpong",
        "--sizes",
        "64,100",
        "--iterations",
        "200",
        "--warmup",
        "20",
        "--idle",
        "block",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(st.success(), "exit {st}\nstdout:\n{out}\nstderr:\n{err}");
    for header in [
        "size",
        "mean",
        "min",
        "median",
        "max",
        "p99",
        "p99.9",
        "stddev",
        "iterations",
    ] {
        assert!(out.contains(header), "no {header:?} column in\n{out}");
    }
    for t in ["tcp", "udp", "tickwire"] {
        assert!(out.contains(&format!("{t} —")), "no {t} table in\n{out}");
    }
    assert!(out.contains("idle block"), "idle mode not reported\n{out}");

    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["bench"], "pingpong");
    assert_eq!(v["echo"], "same-thread");
    assert!(
        v["machine"]["cores"].as_u64().is_some(),
        "no machine metadata: {v}"
    );
    let transports = v["transports"].as_array().unwrap();
    assert_eq!(transports.len(), 3);
    for t in transports {
        let sizes = t["sizes"].as_array().unwrap();
        assert_eq!(sizes.len(), 2, "{t}");
        for s in sizes {
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
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("<svg"), "not an SVG");
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
}

/// The other layout: echo client B on its own thread, both ends spinning (and
/// yielding, on a small machine), against a real router.
#[test]
fn pingpong_with_the_echo_on_its_own_thread_reconciles() {
    let json = temp("pingpong-thread.json");
    let (st, out, err) = run(&[
        "bench",
        "pingpong",
        "--transports",
        "tickwire",
        "--sizes",
        "100",
        "--iterations",
        "300",
        "--warmup",
        "30",
        "--idle",
        "spin",
        "--echo",
        "thread",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(st.success(), "exit {st}\nstdout:\n{out}\nstderr:\n{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["echo"], "thread");
    let t = &v["transports"][0];
    assert_eq!(t["transport"], "tickwire");
    let s = &t["sizes"][0];
    assert_eq!(u(&s["counters"], "sent"), 300, "{s}");
    assert_eq!(u(&s["counters"], "received"), 300, "{s}");
    assert_eq!(u(&s["latency"], "samples"), 300, "{s}");
    let _ = std::fs::remove_file(json);
}

#[test]
fn pingpong_help_teaches() {
    let (st, out, _) = run(&["bench", "pingpong", "--help"]);
    assert!(st.success());
    for s in [
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
    ] {
        assert!(out.contains(s), "{s} not in --help:\n{out}");
    }
}

#[test]
fn pingpong_refuses_a_size_below_the_sequence_number() {
    let (st, _, err) = run(&["bench", "pingpong", "--sizes", "4", "--transports", "tcp"]);
    assert!(!st.success());
    assert!(err.contains("too small"), "{err}");
}
