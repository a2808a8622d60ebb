//! `tickwire bench md-replay` through the real binary on loopback: a short session at
//! 4x through tickwire (feed handler thread, router child, clients) and through the raw
//! floor (forwarding thread, `bench fanout-relay --stamp` child, raw clients), checked
//! by structure and counts, never by durations.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{assert_help_lists, free_udp_port_pair, run_bench_json};
use tickwire_bench::md_replay::latency::HOPS;

#[test]
fn md_replay_compares_tickwire_with_the_raw_floor_hop_by_hop() {
    replay_against_the_floor("tcp");
}

#[test]
fn md_replay_over_shared_memory_compares_with_the_same_tcp_floor() {
    // The feed handler and the clients reach the router over shared memory (waking from
    // one poll(2) over several doorbells); the floor is the same TCP pipeline.
    replay_against_the_floor("shm");
}

/// A short session at 4x through tickwire (its feed handler and clients on `transport`)
/// and the raw floor, checked by structure and counts.
fn replay_against_the_floor(transport: &str) {
    let group = format!("239.1.1.41:{}", free_udp_port_pair());
    let args = [
        "--transport",
        transport,
        "--messages",
        "20000",
        "--symbols",
        "20",
        "--speeds",
        "4x",
        "--clients",
        "2",
        "--window",
        "1s",
        "--compare",
        "tickwire,raw",
        "--group",
        &group,
    ];
    let (code, doc, output) = run_bench_json(
        "md-replay",
        transport,
        &args,
        None,
        Duration::from_secs(240),
    );
    assert_eq!(code, 0, "lossless runs exit 0:\n{output}");
    assert_eq!(doc["transport"], transport, "{output}");
    let results = doc["results"].as_array().expect("results");
    let targets: Vec<&str> = results
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["tickwire", "raw"], "{output}");
    for r in results {
        assert_eq!(r["speed"], "4x");
        assert_eq!(r["messages"].as_u64(), Some(20_000), "{r}");
        assert_eq!(r["lossless"], true, "{r}");
        assert_eq!(r["feed_lost"].as_u64(), Some(0), "{r}");
        let published = r["published_updates"].as_u64().unwrap();
        assert!(published > 0, "{r}");
        // Reconciliation: every client received every update the feed thread sent.
        let clients = r["clients"].as_array().unwrap();
        assert_eq!(clients.len(), 2);
        for c in clients {
            assert_eq!(c["received"].as_u64(), Some(published), "{c}");
            assert_eq!(c["undecodable"].as_u64(), Some(0), "{c}");
            assert_eq!(c["unstamped"].as_u64(), Some(0), "{c}");
            assert_eq!(c["out_of_order"].as_u64(), Some(0), "{c}");
        }
        // Every hop measured, once per received update.
        let hops = r["hops"].as_array().unwrap();
        let names: Vec<&str> = hops.iter().map(|h| h[0].as_str().unwrap()).collect();
        assert_eq!(names, HOPS);
        for h in hops {
            assert_eq!(h[1]["samples"].as_u64(), Some(2 * published), "{h}");
        }
        // The host-stall sentinel watched the run, and the stall-free figure covers at
        // most every update, over the seconds it kept.
        assert!(r["host"]["cpus"].as_u64().is_some_and(|n| n >= 1), "{r}");
        let sf = &r["stall_free"];
        let (kept, of) = (sf["seconds"].as_u64().unwrap(), sf["of"].as_u64().unwrap());
        assert!(of >= 1 && kept <= of, "{sf}");
        if let Some(n) = sf["latency"]["samples"].as_u64() {
            assert!(kept > 0 && n <= 2 * published, "{sf}");
        }
    }
    // The floor forwards every ITCH message; the feed handler publishes updates only.
    assert_eq!(results[1]["published_updates"].as_u64(), Some(20_000));
    // One ratio row per hop, each with both sides' mean, p50 and p99.
    let ratios = doc["ratios"].as_array().expect("ratios");
    let mut names: Vec<&str> = ratios.iter().map(|r| r["hop"].as_str().unwrap()).collect();
    // Then end to end over the stall-free seconds, when both runs kept some.
    let both_kept = results
        .iter()
        .all(|r| r["stall_free"]["latency"].is_object());
    if both_kept {
        assert_eq!(names.pop(), Some("e2e stall-free"), "{output}");
    }
    assert_eq!(names, HOPS, "{output}");
    for r in ratios {
        assert_eq!(r["speed"], "4x");
        for side in ["tickwire_us", "raw_us"] {
            let v = r[side].as_array().unwrap();
            assert_eq!(v.len(), 3, "{r}");
            assert!(
                v.iter().all(|x| x.as_f64().is_some_and(|x| x >= 0.0)),
                "{r}"
            );
        }
        let (t, w) = (&r["tickwire_us"], &r["raw_us"]);
        for i in 0..3 {
            match r["ratio"][i].as_f64() {
                Some(q) => {
                    let want = t[i].as_f64().unwrap() / w[i].as_f64().unwrap();
                    assert!((q - want).abs() <= 1e-9 * want.max(1.0), "{r}");
                }
                None => assert_eq!(w[i].as_f64(), Some(0.0), "{r}"),
            }
        }
    }
    // The printed table: its title and a line per hop.
    assert!(output.contains("tickwire / raw floor at 4x"), "{output}");
    let table = output.split("tickwire / raw floor at 4x").nth(1).unwrap();
    for hop in HOPS {
        assert!(
            table.lines().any(|l| l.starts_with(hop)),
            "{hop}:\n{output}"
        );
    }
}

#[test]
fn md_replay_help_teaches_the_raw_floor() {
    assert_help_lists(
        &["bench", "md-replay", "--help"],
        &[
            "--compare",
            "tickwire,raw",
            "raw floor",
            "ratios",
            "--stamp",
        ],
    );
}

/// New-user pass: `--plot` on a session shorter than one `--window` at every speed
/// ran the whole benchmark, passed, then failed over the plot with exit status 1. It
/// is refused before the run, as a usage error, and nothing is written.
#[test]
fn md_replay_refuses_a_plot_it_could_not_draw_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("md.svg");
    let (st, out, err) = common::run_cli(
        &[
            "bench",
            "md-replay",
            "--messages",
            "2000",
            "--speeds",
            "4x",
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(st.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("--plot draws complete 10-s windows of updates")
            && err.contains("lasts about"),
        "{err}"
    );
    assert!(!out.contains("PASS"), "refused before any run: {out}");
    // Nothing printed before the refusal (it followed the "generated" line).
    assert!(!out.contains("generated"), "{out}");
    assert!(!svg.exists());
}
