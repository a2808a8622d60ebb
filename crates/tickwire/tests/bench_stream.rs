//! `tickwire bench stream` end to end: a short two-rate sweep over raw UDP and a real
//! router, checked for its tables and its JSON counters. No timing is asserted.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{run_bench as run, temp, u};
use serde_json::Value;

#[test]
fn stream_sweeps_two_rates_on_both_transports_and_reconciles() {
    let json = temp("stream.json");
    let svg = temp("stream.svg");
    let (st, out, err) = run(&[
        "bench",
        "stream",
        "--rates",
        "1k,2k",
        "--step-secs",
        "0.3",
        "--warmup-secs",
        "0.1",
        "--reflect-every",
        "10",
        "--idle",
        "block",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(st.success(), "exit {st}\nstdout:\n{out}\nstderr:\n{err}");
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

    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["bench"], "stream");
    assert!(
        v["machine"]["cores"].as_u64().is_some(),
        "no machine metadata: {v}"
    );
    let transports = v["transports"].as_array().unwrap();
    assert_eq!(transports.len(), 2);
    for t in transports {
        let steps = t["steps"].as_array().unwrap();
        // A saturated first step would stop the sweep; at 1k msg/s that means a broken
        // machine, and the message says which step.
        assert_eq!(steps.len(), 2, "{t}");
        for s in steps {
            let c = &s["counters"];
            let sent = u(c, "sent");
            // 0.4 s at 1k or 2k msg/s, warm-up included.
            assert!(sent >= 390, "{s}");
            assert_eq!(u(c, "duplicates"), 0, "{s}");
            assert_eq!(u(c, "out_of_order"), 0, "{s}");
            // Every message is received or accounted as a gap.
            assert_eq!(u(c, "received") + u(c, "gaps"), sent, "{s}");
            if t["transport"] == "tickwire" {
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
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("<svg"), "not an SVG");
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
}

#[test]
fn stream_help_teaches() {
    let (st, out, _) = run(&["bench", "stream", "--help"]);
    assert!(st.success());
    for s in [
        "--transport",
        "--size",
        "--rates",
        "--step-secs",
        "--reflect-every",
        "--idle",
        "--json",
        "--plot",
        "Examples:",
    ] {
        assert!(out.contains(s), "{s} not in --help:\n{out}");
    }
}
