//! Steady-state routing allocates nothing: after a warm-up, the real router core
//! routes N messages (plain, with SEQ, with STAMPS) from one publisher to three
//! subscribers (an exact topic, a `*` and a `>` pattern) and the driver-side steps
//! (`poll_transmit`, `egress`, `handle_written`) run, without a single allocation.
//! The same with the last-value cache on for every topic (`>`, last 2 messages each)
//! and a shared subscription: N messages over 64 topics to a `>` subscriber and to a
//! group of two members (`$share/g/md/>`), caching every one.
//!
//! Its own test binary, so the counting global allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_router::core::{Core, Input};
use tickwire_router::index::Slot;
use tickwire_router::Config;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, Frame, PublishOptions, PROTOCOL_VERSION};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const BATCH: usize = 64;
const WARMUP_BATCHES: usize = 100;
const MEASURED_BATCHES: usize = 1_000;

struct Bench {
    core: Core,
    publisher: Slot,
    subs: Vec<Slot>,
    dirty: Vec<Slot>,
    /// MESSAGE frames drained from each subscriber's egress.
    delivered: Vec<u64>,
}

impl Bench {
    fn new(cfg: Config, patterns: [&str; 3]) -> Bench {
        let mut core = Core::new(cfg, MonoNanos(1), UtcNanos(0));
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let hello = |core: &mut Core, name: &str| {
            let id = core
                .handle_accept(addr, MonoNanos(1), UtcNanos(0))
                .map_err(|_| "refused")
                .unwrap();
            let mut b = Vec::new();
            frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
            assert_eq!(
                core.handle_input(id, MonoNanos(1), &b, b.len()),
                Input::Consumed(b.len())
            );
            id
        };
        let publisher = hello(&mut core, "pub");
        let mut subs = Vec::new();
        for (i, pattern) in patterns.iter().enumerate() {
            let id = hello(&mut core, &format!("sub{i}"));
            let mut b = Vec::new();
            frame::encode_subscribe(&mut b, 1, pattern);
            assert_eq!(
                core.handle_input(id, MonoNanos(1), &b, b.len()),
                Input::Consumed(b.len())
            );
            subs.push(id);
        }
        let mut bench = Bench {
            core,
            publisher,
            subs,
            dirty: Vec::with_capacity(16),
            delivered: vec![0; 3],
        };
        bench.drain();
        bench.delivered = vec![0; 3];
        bench
    }

    /// What the driver does after a read: write every dirty client's egress.
    fn drain(&mut self) {
        self.core.poll_transmit(&mut self.dirty);
        for &id in &self.dirty {
            let out = self.core.egress(id);
            let n = out.len();
            if let Some(k) = self.subs.iter().position(|&s| s == id) {
                let mut rest = out;
                while let Ok(Some((f, used))) = frame::decode(rest, u32::MAX) {
                    if matches!(f, Frame::Message(_)) {
                        self.delivered[k] += 1;
                    }
                    rest = &rest[used..];
                }
                assert!(rest.is_empty(), "a partial frame in the egress");
            }
            self.core.handle_written(id, n);
        }
        self.dirty.clear();
    }

    fn route(&mut self, input: &[u8], batches: usize, now: &mut MonoNanos) {
        for _ in 0..batches {
            *now = now.add_nanos(1_000);
            assert_eq!(
                self.core
                    .handle_input(self.publisher, *now, input, input.len()),
                Input::Consumed(input.len())
            );
            self.drain();
        }
    }
}

/// One read's worth of PUBLISH frames (plain, SEQ, STAMPS, both) to `topic(i)`.
fn batch(topic: impl Fn(usize) -> String) -> Vec<u8> {
    let mut input = Vec::new();
    for i in 0..BATCH {
        let opts = PublishOptions {
            seq: (i % 2 == 1).then_some(i as u64),
            publisher_send: (i % 4 >= 2).then_some(12_345),
        };
        frame::encode_publish(&mut input, &topic(i), &[i as u8; 100], opts, 1 << 20).unwrap();
    }
    input
}

/// Warms `b` up, then routes the measured batches; returns the allocations counted
/// and the number of messages measured (delivery counts restart after the warm-up).
fn measure(b: &mut Bench, input: &[u8], now: &mut MonoNanos) -> (u64, u64) {
    b.route(input, WARMUP_BATCHES, now);
    b.delivered = vec![0; 3];
    let (_, allocations) = allocations_during(|| b.route(input, MEASURED_BATCHES, now));
    (allocations, (BATCH * MEASURED_BATCHES) as u64)
}

#[test]
fn steady_state_routing_allocates_nothing() {
    assert_counting();
    let mut b = Bench::new(Config::default(), ["md/AAPL/trade", "md/*/trade", "md/>"]);
    let input = batch(|_| "md/AAPL/trade".into());
    let mut now = MonoNanos(1_000);
    let (allocations, n) = measure(&mut b, &input, &mut now);
    assert_eq!(
        b.delivered,
        vec![n; 3],
        "every subscriber got every measured message"
    );
    assert_eq!(
        allocations, 0,
        "{allocations} allocations while routing {n} messages to 3 subscribers"
    );
    assert_eq!(
        b.core.totals().msgs_out,
        3 * (n + (BATCH * WARMUP_BATCHES) as u64)
    );
}

#[test]
fn steady_state_routing_with_the_cache_and_a_group_allocates_nothing() {
    assert_counting();
    let cfg = Config {
        cache: vec![">".into()],
        cache_depth: 2,
        ..Config::default()
    };
    let mut b = Bench::new(cfg, ["md/>", "$share/g/md/>", "$share/g/md/>"]);
    let input = batch(|i| format!("md/T{i}/trade"));
    let mut now = MonoNanos(1_000);
    let (allocations, n) = measure(&mut b, &input, &mut now);
    assert_eq!(b.delivered[0], n, "the plain subscriber got every message");
    assert_eq!(
        (b.delivered[1], b.delivered[2]),
        (n / 2, n / 2),
        "the group shared them, round robin"
    );
    assert_eq!(
        allocations, 0,
        "{allocations} allocations while routing and caching {n} messages"
    );
    let stats: serde_json::Value = serde_json::from_str(&b.core.stats_json(now)).unwrap();
    assert_eq!(stats["cache"]["topics"], 64);
    assert_eq!(
        stats["cache"]["stored"],
        n + (BATCH * WARMUP_BATCHES) as u64
    );
    assert_eq!(stats["cache"]["evicted_topics"], 0);
}
