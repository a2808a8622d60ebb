//! Costs of router work that must not grow with what users or peers control (queues,
//! windows, retained messages, cached topics, clients), timed on the pure cores: no
//! sockets, one thread. BENCHMARKS.md ("a router with many queues") quotes its figures.
//!
//! ```sh
//! cargo run --release -p tickwire-router --example scale_costs -- MODE [N]
//! ```
//!
//! MODE: `durable`, `durable_bound` (a durability step with N idle / bound queues),
//! `tick` (a timer call with N queues holding a message), `discard` (a publish into a
//! full discard-oldest queue with N in flight), `bindtime` (a BIND by time over N
//! retained), `image` (an image-only SUBSCRIBE over N cached topics), `clients`
//! (timer calls with N clients), `snapshot` (the monitor's snapshot), `unbind` (two
//! interleaved windows of N given back), `checkpoint`, `acktimeout`, `ackdefault`,
//! `statsdoc` (a STATS document with N queues), `teardown` (a client of N patterns
//! of LEVELS levels closing while others hold GROUPS shared-subscription groups: its
//! index teardown per core call; `teardown 10000 10 1000`), `relocate` (one relocation
//! step over N held-back messages, each held by 4 queues among 1,000 others).
//! Timings are wall-clock over a loop: run on a quiet machine and compare runs.
#![allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]
use std::time::Instant;
use tickwire_router::core::{Core, Input};
use tickwire_router::gm::{Engine, GmConfig, Log, LogError};
use tickwire_router::index::Slot;
use tickwire_router::Config;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, flags, Image, Msg, PROTOCOL_VERSION};
use tickwire_wire::gm::{QueueOp, Start};

struct NullLog(u64);
impl Log for NullLog {
    fn append(&mut self, _r: &[u8]) -> Result<u64, LogError> {
        self.0 += 1;
        Ok(self.0)
    }
}

/// A spool that only counts (guaranteed messaging on, nothing written).
struct CountSpool(u64);
impl Log for CountSpool {
    fn append(&mut self, _r: &[u8]) -> Result<u64, LogError> {
        self.0 += 1;
        Ok(self.0)
    }
}
impl tickwire_router::gm::SpoolPort for CountSpool {
    fn enabled(&self) -> bool {
        true
    }
    fn flush(&mut self) {}
    fn poll_progress(&mut self) -> Option<tickwire_router::gm::Progress> {
        None
    }
    fn reclaim(&mut self, _below: u64) {}
    fn usage(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

fn engine() -> Engine {
    let mut e = Engine::new(GmConfig::default());
    e.finish_recovery();
    e
}

fn mk_queue(e: &mut Engine, log: &mut NullLog, name: &str, json_extra: &str) {
    let arg = format!("{{\"name\":\"{name}\",\"subscriptions\":[\"{name}/>\"]{json_extra}}}");
    e.handle_queue_request(log, Slot(0), 1, QueueOp::Create, &arg)
        .unwrap();
    e.poll_transmit(|_, _| {});
}

fn publish(e: &mut Engine, log: &mut NullLog, slot: Slot, seq: u64, topic: &str, now: u64) {
    let m = Msg {
        flags: flags::GUARANTEED | flags::SEQ,
        seq: Some(seq),
        discarded: 0,
        stamps: None,
        reply: None,
        cached: None,
        topic: topic.as_bytes(),
        payload: b"0123456789",
    };
    e.handle_publish(
        log,
        slot,
        UtcNanos(1_700_000_000_000_000_000 + now),
        now,
        &m,
    )
    .unwrap();
}

fn per(label: &str, n: usize, f: impl FnOnce()) {
    let t = Instant::now();
    f();
    let dt = t.elapsed();
    println!(
        "{label}: {:.2} us each ({n} calls, {:?})",
        dt.as_secs_f64() * 1e6 / n as f64,
        dt
    );
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let nq: usize = std::env::args()
        .nth(2)
        .map_or(10_000, |a| a.parse().unwrap());
    match which.as_str() {
        // handle_durable -> pump_all with nq idle queues (no bindings) / nq queues each bound.
        "durable" | "durable_bound" => {
            let mut e = engine();
            let mut log = NullLog(0);
            for i in 0..nq {
                mk_queue(&mut e, &mut log, &format!("q{i}"), "");
            }
            if which == "durable_bound" {
                for i in 0..nq {
                    e.handle_bind(MonoNanos(1), Slot(2), 1, 16, Start::Queue, &format!("q{i}"))
                        .ok();
                }
                e.poll_transmit(|_, _| {});
            }
            let lsn = log.0;
            let n = 2000;
            per(
                &format!("handle_durable (pump_all), {nq} queues ({which})"),
                n,
                || {
                    for k in 0..n {
                        e.handle_durable(MonoNanos(10 + k as u64), lsn);
                    }
                },
            );
            // A publish + durable round on one queue (what one guaranteed message costs).
            e.handle_pub_open(&mut NullLog(0), Slot(3), 1, 0, "p").unwrap();
            e.poll_transmit(|_, _| {});
            per(
                &format!("publish+durable on q0, {nq} queues ({which})"),
                n,
                || {
                    for k in 0..n {
                        publish(
                            &mut e,
                            &mut log,
                            Slot(3),
                            k as u64 + 1,
                            "q0/x",
                            1000 + k as u64,
                        );
                        e.handle_durable(MonoNanos(1000 + k as u64), log.0);
                        e.poll_transmit(|_, _| {});
                    }
                },
            );
        }
        // per-tick handle_timeout with nq queues each holding one undelivered entry.
        "tick" => {
            let mut e = engine();
            let mut log = NullLog(0);
            for i in 0..nq {
                mk_queue(&mut e, &mut log, &format!("q{i}"), "");
            }
            e.handle_pub_open(&mut NullLog(0), Slot(3), 1, 0, "p").unwrap();
            for i in 0..nq {
                publish(
                    &mut e,
                    &mut log,
                    Slot(3),
                    i as u64 + 1,
                    &format!("q{i}/x"),
                    1,
                );
                if i % 1000 == 999 {
                    e.handle_durable(MonoNanos(2), log.0);
                }
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.poll_transmit(|_, _| {});
            let n = 200;
            per(
                &format!("gm handle_timeout, {nq} non-empty queues"),
                n,
                || {
                    for k in 0..n {
                        e.handle_timeout(
                            &mut log,
                            MonoNanos(1000 + k as u64),
                            UtcNanos(1_700_000_000_000_000_000 + 1000),
                        );
                    }
                },
            );
        }
        // discard-oldest queue full with nq messages all in flight; publish cost.
        "discard" => {
            let mut e = engine();
            let mut log = NullLog(0);
            let extra = format!(",\"max_messages\":{nq},\"full_policy\":\"discard-oldest\"");
            mk_queue(&mut e, &mut log, "d", &extra);
            for b in 0..(nq / 65_536 + 1) {
                e.handle_bind(MonoNanos(1), Slot(2), b as u32, 65_536, Start::Queue, "d")
                    .unwrap();
            }
            e.handle_pub_open(&mut NullLog(0), Slot(3), 1, 0, "p").unwrap();
            let mut seq = 0;
            for _ in 0..nq {
                seq += 1;
                publish(&mut e, &mut log, Slot(3), seq, "d/x", 1);
                if seq % 1000 == 0 {
                    e.handle_durable(MonoNanos(2), log.0);
                    e.poll_transmit(|_, _| {});
                }
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.poll_transmit(|_, _| {});
            let n = 200;
            per(
                &format!("publish into full discard-oldest queue, {nq} in flight"),
                n,
                || {
                    for _ in 0..n {
                        seq += 1;
                        publish(&mut e, &mut log, Slot(3), seq, "d/x", 3);
                        e.handle_durable(MonoNanos(3), log.0);
                        e.poll_transmit(|_, _| {});
                    }
                },
            );
        }
        // BIND with a Time start after nq retained messages.
        "bindtime" => {
            let mut e = engine();
            let mut log = NullLog(0);
            mk_queue(&mut e, &mut log, "b", "");
            mk_queue(&mut e, &mut log, "r", ",\"max_messages\":100000000");
            e.handle_pub_open(&mut NullLog(0), Slot(3), 1, 0, "p").unwrap();
            for i in 0..nq {
                publish(&mut e, &mut log, Slot(3), i as u64 + 1, "r/x", 1);
                if i % 4000 == 3999 {
                    e.handle_durable(MonoNanos(2), log.0);
                    e.poll_transmit(|_, _| {});
                }
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.poll_transmit(|_, _| {});
            let n = 50;
            per(
                &format!("BIND start=Time(future), {nq} retained"),
                n,
                || {
                    for k in 0..n {
                        e.handle_bind(
                            MonoNanos(5),
                            Slot(4),
                            k as u32,
                            16,
                            Start::Time(u64::MAX),
                            "b",
                        )
                        .unwrap();
                        e.poll_transmit(|_, _| {});
                    }
                },
            );
            per(
                &format!("BIND start=Beginning (budgeted), {nq} retained"),
                n,
                || {
                    for k in 0..n {
                        e.handle_bind(MonoNanos(5), Slot(5), k as u32, 16, Start::Beginning, "b")
                            .unwrap();
                        e.poll_transmit(|_, _| {});
                    }
                },
            );
        }
        // Image-only SUBSCRIBE against a cache holding nq topics.
        "image" => {
            let cfg = Config {
                cache: vec![">".to_string()],
                cache_max_topics: nq.max(1),
                ..Config::default()
            };
            let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
            let p = open(&mut core);
            let s = open(&mut core);
            let mut buf = Vec::new();
            for i in 0..nq {
                frame::encode_publish(
                    &mut buf,
                    &format!("md/T{i}"),
                    b"0123456789",
                    Default::default(),
                    1 << 20,
                )
                .unwrap();
                if buf.len() > 60_000 {
                    feed(&mut core, p, &buf);
                    buf.clear();
                }
            }
            feed(&mut core, p, &buf);
            let n = 100;
            let mut f = Vec::new();
            for k in 0..n {
                frame::encode_subscribe_image(&mut f, k as u32 + 1, "nomatch/x", Image::Only);
            }
            per(
                &format!("image-only SUBSCRIBE (matching nothing), {nq} cached topics"),
                n,
                || {
                    feed(&mut core, s, &f);
                },
            );
        }
        // A STATS document (Core::stats_json) with nq queues, guaranteed messaging on.
        "statsdoc" => {
            let mut core = Core::new(Config::default(), MonoNanos(0), UtcNanos(0));
            core.attach_spool(Box::new(CountSpool(0)));
            core.gm_mut().finish_recovery();
            let admin = open(&mut core);
            let mut f = Vec::new();
            for i in 0..nq {
                let arg = format!("{{\"name\":\"q{i}\",\"subscriptions\":[\"t{i}\"]}}");
                tickwire_wire::gm::encode_queue_request(&mut f, i as u32 + 1, QueueOp::Create, &arg);
                if f.len() > 60_000 {
                    feed(&mut core, admin, &f);
                    f.clear();
                }
            }
            feed(&mut core, admin, &f);
            let mut len = 0;
            per(&format!("Core::stats_json, {nq} queues"), 5, || {
                for _ in 0..5 {
                    len = std::hint::black_box(core.stats_json(MonoNanos(2))).len();
                }
            });
            println!("  document: {len} bytes");
        }
        // Core::handle_timeout with nq clients (max_clients raised).
        "clients" => {
            let cfg = Config {
                max_clients: nq,
                ..Config::default()
            };
            let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
            for _ in 0..nq {
                open(&mut core);
            }
            let n = 200;
            per(&format!("Core::handle_timeout, {nq} clients"), n, || {
                for k in 0..n {
                    core.handle_timeout(MonoNanos(1000 + k as u64));
                }
            });
            per(
                &format!("Core::poll_timeout, {nq} clients"),
                100_000,
                || {
                    for _ in 0..100_000 {
                        std::hint::black_box(core.poll_timeout());
                    }
                },
            );
        }
        // Monitor snapshot with nq clients x 1000 patterns.
        "snapshot" => {
            let cfg = Config {
                max_clients: nq.max(2),
                ..Config::default()
            };
            let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
            for _ in 0..nq {
                let c = open(&mut core);
                let mut f = Vec::new();
                for j in 0..1000 {
                    frame::encode_subscribe(&mut f, j + 1, &format!("s/{}/{j}", c.0));
                }
                feed(&mut core, c, &f);
            }
            let n = 5;
            per(
                &format!("Core::snapshot, {nq} clients x 1000 patterns"),
                n,
                || {
                    for _ in 0..n {
                        std::hint::black_box(core.snapshot(MonoNanos(5)));
                    }
                },
            );
        }
        // The guaranteed engine's part of a monitoring snapshot: nq queues.
        "snapshot_queues" => {
            let mut e = engine();
            let mut log = NullLog(0);
            for i in 0..nq {
                mk_queue(&mut e, &mut log, &format!("q{i}"), "");
            }
            let n = 5;
            per(&format!("Engine::stats_json, {nq} queues"), n, || {
                for _ in 0..n {
                    std::hint::black_box(e.stats_json());
                }
            });
            per(&format!("Engine::view (the snapshot's copy), {nq} queues"), n, || {
                for _ in 0..n {
                    std::hint::black_box(e.view(usize::MAX));
                }
            });
        }
        // Two bindings of one queue with windows of nq each, never acking; A unbinds, then B.
        "unbind" => {
            let mut e = engine();
            let mut log = NullLog(0);
            mk_queue(&mut e, &mut log, "u", ",\"max_messages\":100000000");
            e.handle_bind(MonoNanos(1), Slot(2), 1, nq as u32, Start::Queue, "u")
                .unwrap();
            e.handle_bind(MonoNanos(1), Slot(3), 2, nq as u32, Start::Queue, "u")
                .unwrap();
            e.handle_pub_open(&mut NullLog(0), Slot(4), 1, 0, "p").unwrap();
            for i in 0..2 * nq {
                publish(&mut e, &mut log, Slot(4), i as u64 + 1, "u/x", 1);
                if i % 1000 == 999 {
                    e.handle_durable(MonoNanos(2), log.0);
                    e.poll_transmit(|_, _| {});
                }
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.poll_transmit(|_, _| {});
            per(&format!("disconnect of A ({nq} in flight)"), 1, || {
                e.handle_disconnect(&mut log, MonoNanos(3), Slot(2));
            });
            e.poll_transmit(|_, _| {});
            per(
                &format!("disconnect of B ({nq} in flight, interleaved with A's requeued)"),
                1,
                || {
                    e.handle_disconnect(&mut log, MonoNanos(4), Slot(3));
                },
            );
        }
        "relocate" => {
            let mut e = Engine::new(GmConfig {
                retain_bytes: 0,
                retain_ms: 0,
                publish_window: 1 << 20,
                ..GmConfig::default()
            });
            e.finish_recovery();
            let mut log = NullLog(0);
            for i in 0..1000 {
                mk_queue(&mut e, &mut log, &format!("x{i}"), "");
            }
            for i in 0..4 {
                let arg = format!("{{\"name\":\"held{i}\",\"subscriptions\":[\"h/>\"]}}");
                e.handle_queue_request(&mut log, Slot(0), 1, QueueOp::Create, &arg)
                    .unwrap();
            }
            e.poll_transmit(|_, _| {});
            e.handle_pub_open(&mut NullLog(0), Slot(4), 1, 0, "p").unwrap();
            for i in 0..nq {
                publish(&mut e, &mut log, Slot(4), i as u64 + 1, "h/x", 1);
            }
            // As much traffic again through queue `t`, acknowledged and released.
            mk_queue(&mut e, &mut log, "t", "");
            e.handle_bind(MonoNanos(1), Slot(5), 1, 1 << 16, Start::Queue, "t")
                .unwrap();
            for i in 0..nq {
                publish(&mut e, &mut log, Slot(4), (nq + i) as u64 + 1, "t/x", 1);
                if i % 1000 == 999 || i + 1 == nq {
                    e.handle_durable(MonoNanos(2), log.0);
                    e.poll_transmit(|_, _| {});
                    let first = (nq + i / 1000 * 1000) as u64 + 1;
                    let last = (nq + i) as u64 + 1;
                    let _ = e.handle_consumer_ack(&mut log, MonoNanos(2), Slot(5), 1, first, last);
                }
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.handle_timeout(&mut log, MonoNanos(3), UtcNanos(1_800_000_000_000_000_000));
            e.poll_transmit(|_, _| {});
            let mut steps = 0;
            loop {
                let mut moved = Default::default();
                per(&format!("Engine::relocate, step {steps} over {nq} held back"), 1, || {
                    moved = e.relocate(&mut log, 1 << 40);
                });
                println!("  {moved:?}");
                e.handle_durable(MonoNanos(4), log.0);
                steps += 1;
                if moved.messages == 0 || steps == 4 {
                    break;
                }
            }
        }
        "checkpoint" => {
            let mut e = engine();
            let mut log = NullLog(0);
            for i in 0..nq {
                mk_queue(&mut e, &mut log, &format!("q{i}"), "");
            }
            per(&format!("Engine::checkpoint, {nq} queues"), 5, || {
                for _ in 0..5 {
                    std::hint::black_box(e.checkpoint(&mut log));
                }
            });
            per(
                &format!("Engine::stats_json (monitor snapshot part), {nq} queues"),
                5,
                || {
                    for _ in 0..5 {
                        std::hint::black_box(e.stats_json());
                    }
                },
            );
        }
        "acktimeout" => {
            let mut e = engine();
            let mut log = NullLog(0);
            for i in 0..nq {
                mk_queue(&mut e, &mut log, &format!("q{i}"), "");
            }
            mk_queue(&mut e, &mut log, "t", ",\"ack_timeout_ms\":50");
            e.handle_pub_open(&mut NullLog(0), Slot(3), 1, 0, "p").unwrap();
            let mut seq = 0;
            for i in 0..nq {
                seq += 1;
                publish(&mut e, &mut log, Slot(3), seq, &format!("q{i}/x"), 1);
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.handle_bind(MonoNanos(2), Slot(5), 1, 65_536, Start::Queue, "t")
                .unwrap();
            e.poll_transmit(|_, _| {});
            let mut fired = 0;
            let n = 2000u64;
            let t0 = Instant::now();
            for k in 0..n {
                // one guaranteed message every 100 us of (simulated) time into "t"; its consumer
                // never acks (50 ms: the floor of a non-zero ack_timeout_ms)
                let now = 1_000_000 + k * 100_000;
                seq += 1;
                publish(&mut e, &mut log, Slot(3), seq, "t/x", now);
                e.handle_durable(MonoNanos(now), log.0);
                if e.poll_timeout().is_some_and(|d| d.as_nanos() <= now) {
                    e.handle_timeout(
                        &mut log,
                        MonoNanos(now),
                        UtcNanos(1_700_000_000_000_000_000 + now),
                    );
                    fired += 1;
                }
                e.poll_transmit(|_, _| {});
            }
            println!("{n} simulated turns (200 ms), {nq} non-empty queues + one with ack_timeout_ms=50: gm.handle_timeout fired {fired} times, wall {:?}", t0.elapsed());
        }
        "ackdefault" => {
            let mut e = engine();
            let mut log = NullLog(0);
            for i in 0..nq {
                mk_queue(&mut e, &mut log, &format!("q{i}"), "");
            }
            mk_queue(&mut e, &mut log, "t", "");
            e.handle_pub_open(&mut NullLog(0), Slot(3), 1, 0, "p").unwrap();
            let mut seq = 0;
            for i in 0..nq {
                seq += 1;
                publish(&mut e, &mut log, Slot(3), seq, &format!("q{i}/x"), 1);
            }
            e.handle_durable(MonoNanos(2), log.0);
            e.handle_bind(MonoNanos(2), Slot(5), 1, 65_536, Start::Queue, "t")
                .unwrap();
            // 1 s of publishing, one message per 100 us, consumer never acks (default ack timeout 30 s)
            for k in 0..10_000u64 {
                let now = 1_000_000 + k * 100_000;
                seq += 1;
                publish(&mut e, &mut log, Slot(3), seq, "t/x", now);
                e.handle_durable(MonoNanos(now), log.0);
                e.poll_transmit(|_, _| {});
            }
            let mut fired = 0;
            let n = 2000u64;
            let t0 = Instant::now();
            for k in 0..n {
                let now = 30_001_000_000 + k * 10_000; // turns every 10 us, 30 s later
                if e.poll_timeout().is_some_and(|d| d.as_nanos() <= now) {
                    e.handle_timeout(
                        &mut log,
                        MonoNanos(now),
                        UtcNanos(1_700_000_000_000_000_000 + now),
                    );
                    fired += 1;
                }
                e.poll_transmit(|_, _| {});
            }
            println!("default ack timeout, non-acking consumer: {n} turns 10 us apart (20 ms) after 30 s: gm.handle_timeout fired {fired} times with {nq} non-empty queues, wall {:?}", t0.elapsed());
        }
        // A client of nq patterns of LEVELS levels (third argument, 10 by default;
        // distinct from the first level, so each removal frees its trie nodes) closes:
        // its teardown's core calls, their median and the slowest.
        "teardown" => {
            let levels: usize = std::env::args()
                .nth(3)
                .map_or(10, |a| a.parse().unwrap());
            let cfg = Config {
                max_subscriptions: nq,
                max_subscription_levels: nq * levels,
                ..Config::default()
            };
            let mut core = Core::new(cfg, MonoNanos(0), UtcNanos(0));
            let nodes = |core: &Core| -> u64 {
                let doc: serde_json::Value =
                    serde_json::from_str(&core.stats_json(MonoNanos(2))).unwrap();
                doc["router"]["index_nodes"].as_u64().unwrap()
            };
            // Shared-subscription groups held by other clients (fourth argument, 0 by
            // default; 100 per client, `max_shared_subscriptions`).
            let groups: usize = std::env::args()
                .nth(4)
                .map_or(0, |a| a.parse().unwrap());
            for c in 0..groups.div_ceil(100) {
                let member = open(&mut core);
                let mut b = Vec::new();
                for g in c * 100..groups.min(c * 100 + 100) {
                    frame::encode_subscribe(&mut b, 1, &format!("$share/g{g}/x/{g}"));
                }
                feed(&mut core, member, &b);
            }
            let id = open(&mut core);
            // What the index holds without the client.
            let floor = nodes(&core);
            let mut b = Vec::new();
            for i in 0..nq {
                let mut p = format!("p{i}");
                for l in 1..levels {
                    p.push_str(&format!("/l{l}"));
                }
                frame::encode_subscribe(&mut b, 1, &p);
            }
            // For comparison: subscribing them all, as one read's worth of frames would.
            let t = Instant::now();
            feed(&mut core, id, &b);
            let subscribing = t.elapsed();
            println!(
                "{nq} patterns of {levels} levels, {groups} shared groups: {} index nodes \
                 (subscribing took {subscribing:?}, {} bytes of SUBSCRIBE)",
                nodes(&core),
                b.len()
            );
            // (time, patterns removed) per core call: each pattern frees `levels` nodes.
            let mut calls = Vec::new();
            let mut before = nodes(&core);
            let t = Instant::now();
            core.handle_closed(id, "gone");
            let dt = t.elapsed();
            let after = nodes(&core);
            calls.push((dt, (before - after) / levels as u64));
            before = after;
            let mut closing = Vec::new();
            while before > floor {
                let t = Instant::now();
                core.poll_closing(&mut closing);
                let dt = t.elapsed();
                let after = nodes(&core);
                calls.push((dt, (before - after) / levels as u64));
                before = after;
            }
            let total: std::time::Duration = calls.iter().map(|c| c.0).sum();
            let mut by_time: Vec<(std::time::Duration, u64, usize)> = calls
                .iter()
                .enumerate()
                .map(|(i, &(t, n))| (t, n, i))
                .collect();
            by_time.sort();
            let (median, _, _) = by_time[by_time.len() / 2];
            let slowest: Vec<String> = by_time
                .iter()
                .rev()
                .take(3)
                .map(|(t, n, i)| format!("call {i}: {t:?} ({n} patterns)"))
                .collect();
            println!(
                "teardown: {} core calls (handle_closed, then poll_closing per turn), {total:?} \
                 in all ({:.2} us per pattern); median call {median:?}; slowest: {}",
                calls.len(),
                total.as_secs_f64() * 1e6 / nq as f64,
                slowest.join(", "),
            );
        }
        _ => println!(
            "usage: scale_costs durable|durable_bound|tick|discard|bindtime|image|clients|snapshot|unbind|checkpoint|acktimeout|ackdefault|statsdoc|teardown|relocate [N [LEVELS [GROUPS]]]"
        ),
    }
}

fn feed(core: &mut Core, id: Slot, b: &[u8]) {
    let mut at = 0;
    while at < b.len() {
        match core.handle_input(id, MonoNanos(1), &b[at..], b.len() - at) {
            Input::Consumed(n) => at += n,
            Input::Closing => panic!("closing"),
        }
        if at < b.len() && b.len() - at < 8 {
            break;
        }
    }
    let e = core.egress(id).len();
    core.handle_written(id, e);
    let mut d = Vec::new();
    core.poll_transmit(&mut d);
}

fn open(core: &mut Core) -> Slot {
    let id = core
        .handle_accept(
            "127.0.0.1:9".parse::<std::net::SocketAddr>().unwrap(),
            MonoNanos(0),
            UtcNanos(0),
        )
        .ok()
        .unwrap();
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, "t");
    assert_eq!(
        core.handle_input(id, MonoNanos(0), &b, b.len()),
        Input::Consumed(b.len())
    );
    let e = core.egress(id).len();
    core.handle_written(id, e);
    id
}
