//! `tickwire bench mcast-fanout` end to end: a short run to 1 and 2 receiver processes,
//! plain UDP multicast and reliable, checked for its table and its JSON (every message
//! to every receiver). No timing is asserted.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{assert_help_lists, run_bench_json, u};

#[test]
fn mcast_fanout_reaches_every_receiver_process_raw_and_reliable() {
    let args = [
        "--receivers",
        "1,2",
        "--messages",
        "2000",
        "--rate",
        "5k",
        "--burst",
        "4",
        "--pingpongs",
        "200",
    ];
    let (code, v, out) = run_bench_json(
        "mcast-fanout",
        "smoke",
        &args,
        None,
        Duration::from_secs(180),
    );
    assert_eq!(code, 0, "{out}");
    for header in [
        "half round trip",
        "receivers",
        "CPU ns/msg",
        "one-way p50",
        "sender CPU per message, 1 → 2 receivers",
    ] {
        assert!(out.contains(header), "no {header:?} in\n{out}");
    }
    assert_eq!(v["bench"], "mcast-fanout");
    assert!(u(&v["udp_half_round_trip"], "samples") > 0, "{v}");
    let runs = v["runs"].as_array().unwrap();
    let got: Vec<(String, u64)> = runs
        .iter()
        .map(|r| (r["kind"].as_str().unwrap().to_owned(), u(r, "receivers")))
        .collect();
    let want = [("raw", 1), ("mcast", 1), ("raw", 2), ("mcast", 2)];
    assert_eq!(
        got,
        want.map(|(k, n)| (k.to_owned(), n)),
        "one raw and one reliable run per receiver count, in order"
    );
    for r in runs {
        let n = u(r, "receivers") as usize;
        assert_eq!(u(r, "messages"), 2000, "{r}");
        // Every receiver process got every message.
        assert_eq!(u(r, "delivered_min"), 2000, "{r}");
        let reports = r["receiver_reports"].as_array().unwrap();
        assert_eq!(reports.len(), n, "{r}");
        for rep in reports {
            assert_eq!(u(rep, "delivered"), 2000, "{rep}");
            assert!(u(rep, "latency_samples") > 0, "{rep}");
        }
        if r["kind"] == "mcast" {
            assert_eq!(r["all_in_order"], true, "{r}");
            assert_eq!(
                u(&r["sender"], "datagrams"),
                2000,
                "one message per datagram: {r}"
            );
        }
        for key in ["cpu_ns_per_msg", "one_way_p50_us", "p50_over_half_rtt"] {
            assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {r}");
        }
        // The user/system split needs clock ticks counted: a run this short may have
        // none, and then says so (null) rather than a made-up split.
        let ticks = u(&r["sender"], "cpu_ticks");
        for key in ["cpu_user_ns_per_msg", "cpu_sys_ns_per_msg"] {
            let x = &r[key];
            assert!(
                if ticks > 0 {
                    x.as_f64().is_some_and(|x| x >= 0.0)
                } else {
                    x.is_null()
                },
                "{key} with {ticks} ticks: {r}"
            );
        }
    }
    let growth = v["growth"].as_array().unwrap();
    assert_eq!(growth.len(), 2, "{v}");
    for g in growth {
        assert_eq!(
            (u(g, "from_receivers"), u(g, "to_receivers")),
            (1, 2),
            "{g}"
        );
    }
}

#[test]
fn mcast_fanout_help_teaches() {
    assert_help_lists(
        &["bench", "mcast-fanout", "--help"],
        &[
            "--receivers",
            "--messages",
            "--rate",
            "--burst",
            "--pingpongs",
            "--json",
            "half round trip",
            "user and system",
            "Examples:",
        ],
    );
}
