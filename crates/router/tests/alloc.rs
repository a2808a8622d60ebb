//! Steady-state routing allocates nothing: after a warm-up, the real router core
//! routes N messages (plain, with SEQ, with STAMPS) from one publisher to three
//! subscribers (an exact topic, a `*` and a `>` pattern) and the driver-side steps
//! (`poll_transmit`, `egress`, `handle_written`) run, without a single allocation.
//! The same with the last-value cache on for every topic (`>`, last 2 messages each)
//! and a shared subscription: N messages over 64 topics to a `>` subscriber and to a
//! group of two members (`$share/g/md/>`), caching every one. And guaranteed
//! messaging end to end through the core (module `guaranteed`).
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
const WARMUP_BATCHES: usize = 200;
const MEASURED_BATCHES: usize = 1_000;

struct Bench {
    core: Core,
    publisher: Slot,
    subs: Vec<Slot>,
    dirty: Vec<Slot>,
    /// MESSAGE frames drained from each subscriber's egress.
    delivered: Vec<u64>,
}

/// Feeds `bytes` to client `id` and checks that the core took them all.
fn feed(core: &mut Core, id: Slot, bytes: &[u8]) {
    assert_eq!(
        core.handle_input(id, MonoNanos(1), bytes, bytes.len()),
        Input::Consumed(bytes.len())
    );
}

/// A new connection, before its HELLO.
fn accept(core: &mut Core) -> Slot {
    let addr = SocketAddr::from(([127, 0, 0, 1], 1));
    core.handle_accept(addr, MonoNanos(1), UtcNanos(0))
        .map_err(|_| "refused")
        .unwrap()
}

/// Sends `id`'s HELLO as `name`.
fn say_hello(core: &mut Core, id: Slot, name: &str) {
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
    feed(core, id, &b);
}

/// A new client named `name`, past its HELLO.
fn hello(core: &mut Core, name: &str) -> Slot {
    let id = accept(core);
    say_hello(core, id, name);
    id
}

/// What the driver does after a read: write every dirty client's egress; `on` sees
/// each frame written, with its client.
fn drain_egress(core: &mut Core, dirty: &mut Vec<Slot>, mut on: impl FnMut(Slot, Frame<'_>)) {
    core.poll_transmit(dirty);
    for &id in dirty.iter() {
        let out = core.egress(id);
        let n = out.len();
        let mut rest = out;
        while let Ok(Some((f, used))) = frame::decode(rest, u32::MAX) {
            on(id, f);
            rest = &rest[used..];
        }
        assert!(rest.is_empty(), "a partial frame in the egress");
        core.handle_written(id, n);
    }
    dirty.clear();
}

impl Bench {
    fn new(cfg: Config, patterns: [&str; 3]) -> Bench {
        let mut core = Core::new(cfg, MonoNanos(1), UtcNanos(0));
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
        let (subs, delivered) = (&self.subs, &mut self.delivered);
        drain_egress(&mut self.core, &mut self.dirty, |id, f| {
            if let (Some(k), Frame::Message(_)) = (subs.iter().position(|&s| s == id), f) {
                delivered[k] += 1;
            }
        });
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

/// Monitoring attached and nobody polling: routing plus the loop's per-tick
/// publication (the heartbeat) allocate nothing; a snapshot is made (and allocates)
/// only when the monitoring side asks.
#[test]
fn routing_with_monitoring_attached_allocates_nothing_until_asked() {
    assert_counting();
    let mut b = Bench::new(Config::default(), ["md/AAPL/trade", "md/*/trade", "md/>"]);
    let (publisher, _reader) = tickwire_router::monitor::channel(MonoNanos(1));
    let input = batch(|_| "md/AAPL/trade".into());
    let mut now = MonoNanos(1_000);
    b.route(&input, WARMUP_BATCHES, &mut now);
    let mut made = 0;
    let (_, allocations) = allocations_during(|| {
        for _ in 0..MEASURED_BATCHES / 10 {
            b.route(&input, 10, &mut now);
            publisher.tick(now, || {
                made += 1;
                b.core.snapshot(now)
            });
        }
    });
    assert_eq!(made, 0, "no snapshot without a request");
    assert_eq!(
        allocations, 0,
        "{allocations} allocations with monitoring attached"
    );
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

/// Steady-state guaranteed messaging allocates nothing per message: after a warm-up,
/// the real router core takes batches of guaranteed publishes, hands them to the spool
/// port, acknowledges them when the port reports them durable, delivers them to a queue
/// consumer and takes the consumer's acknowledgements — without a single allocation.
/// (The storage thread's own path is measured by crates/spool/tests/hot_path.rs.)
mod guaranteed {
    use tickwire_alloc_count::{allocations_during, assert_counting};
    use tickwire_router::core::{Core, Input};
    use tickwire_router::gm::{Log, LogError, Progress, SpoolPort};
    use tickwire_router::index::Slot;
    use tickwire_router::Config;
    use tickwire_rt::{MonoNanos, UtcNanos};
    use tickwire_wire::frame::{self, Frame, PublishOptions};
    use tickwire_wire::gm::{self as wgm, QueueOp, Start};

    use super::{accept, feed, hello, say_hello, BATCH, MEASURED_BATCHES, WARMUP_BATCHES};

    /// A spool that keeps nothing: every record is "durable" at the next flush.
    struct Instant {
        next: u64,
        flushed: u64,
        reported: u64,
    }

    impl Log for Instant {
        fn append(&mut self, _: &[u8]) -> Result<u64, LogError> {
            self.next += 1;
            Ok(self.next)
        }
    }

    impl SpoolPort for Instant {
        fn enabled(&self) -> bool {
            true
        }
        fn flush(&mut self) {
            self.flushed = self.next;
        }
        fn poll_progress(&mut self) -> Option<Progress> {
            (self.flushed > self.reported).then(|| {
                self.reported = self.flushed;
                Progress::Durable(self.flushed)
            })
        }
        fn reclaim(&mut self, _: u64) {}
        fn usage(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
    }

    struct Bench {
        core: Core,
        publisher: Slot,
        consumer: Slot,
        dirty: Vec<Slot>,
        acks: Vec<u8>,
        acked_to_publisher: u64,
        delivered: u64,
        now: MonoNanos,
    }

    impl Bench {
        fn new() -> Bench {
            // No retention for replay: acknowledged messages are released (at the timer), so
            // the store stays the same size; with retention it grows to its limit (amortized).
            let cfg = Config {
                retain_bytes: 0,
                ..Config::default()
            };
            let mut core = Core::new(cfg, MonoNanos(1), UtcNanos(1));
            core.gm_mut().finish_recovery();
            core.attach_spool(Box::new(Instant {
                next: 0,
                flushed: 0,
                reported: 0,
            }));
            let publisher = hello(&mut core, "pub");
            let consumer = hello(&mut core, "cons");
            let mut b = Vec::new();
            wgm::encode_queue_request(
                &mut b,
                1,
                QueueOp::Create,
                r#"{"name":"orders","subscriptions":["orders/>"]}"#,
            );
            wgm::encode_pub_open(&mut b, 2, 0, "alloc-test");
            feed(&mut core, publisher, &b);
            b.clear();
            wgm::encode_bind(&mut b, 3, 4 * BATCH as u32, Start::Queue, "orders");
            feed(&mut core, consumer, &b);
            let mut bench = Bench {
                core,
                publisher,
                consumer,
                dirty: Vec::with_capacity(16),
                acks: Vec::with_capacity(64 * BATCH),
                acked_to_publisher: 0,
                delivered: 0,
                now: MonoNanos(1_000),
            };
            bench.drain();
            bench
        }

        /// What the driver does: write every dirty client's egress; the consumer's
        /// deliveries become CONSUMER_ACKs.
        fn drain(&mut self) {
            let (delivered, acks, acked) = (
                &mut self.delivered,
                &mut self.acks,
                &mut self.acked_to_publisher,
            );
            super::drain_egress(&mut self.core, &mut self.dirty, |_, f| match f {
                Frame::Deliver(d) => {
                    *delivered += 1;
                    wgm::encode_consumer_ack(acks, d.binding, d.msg_id, d.msg_id);
                }
                Frame::PubAck { first, last } => *acked += last - first + 1,
                Frame::Error { code, text, .. } => panic!("ERROR {code}: {text}"),
                _ => {}
            });
        }

        fn turn(&mut self, input: &[u8]) {
            self.now = self.now.add_nanos(1_000);
            assert_eq!(
                self.core
                    .handle_input(self.publisher, self.now, input, input.len()),
                Input::Consumed(input.len())
            );
            self.core.flush_spool();
            self.core.handle_spool(self.now);
            self.drain();
            if !self.acks.is_empty() {
                let acks = std::mem::take(&mut self.acks);
                assert_eq!(
                    self.core
                        .handle_input(self.consumer, self.now, &acks, acks.len()),
                    Input::Consumed(acks.len())
                );
                self.acks = acks;
                self.acks.clear();
                self.drain();
            }
            // The driver's timer (every 10 ms at the latest): releases consumed messages.
            self.core.handle_timeout(self.now);
        }
    }

    fn batch(first_seq: u64) -> Vec<u8> {
        let mut input = Vec::new();
        for i in 0..BATCH as u64 {
            let start = input.len();
            let opts = PublishOptions {
                seq: Some(first_seq + i),
                publisher_send: (i % 2 == 1).then_some(12_345),
            };
            frame::encode_publish(&mut input, "orders/new", &[i as u8; 100], opts, 1 << 20)
                .unwrap();
            input[start + 5] |= frame::flags::GUARANTEED;
        }
        input
    }

    #[test]
    fn steady_state_guaranteed_messaging_allocates_nothing() {
        assert_counting();
        let mut b = Bench::new();
        let inputs: Vec<Vec<u8>> = (0..(WARMUP_BATCHES + MEASURED_BATCHES) as u64)
            .map(|k| batch(1 + k * BATCH as u64))
            .collect();
        for input in &inputs[..WARMUP_BATCHES] {
            b.turn(input);
        }
        let warm = (BATCH * WARMUP_BATCHES) as u64;
        assert_eq!((b.acked_to_publisher, b.delivered), (warm, warm));
        let (_, allocations) = allocations_during(|| {
            for input in &inputs[WARMUP_BATCHES..] {
                b.turn(input);
            }
        });
        let n = (BATCH * (WARMUP_BATCHES + MEASURED_BATCHES)) as u64;
        assert_eq!(b.acked_to_publisher, n, "every publish acknowledged");
        assert_eq!(b.delivered, n, "every message delivered");
        assert_eq!(
            allocations,
            0,
            "{allocations} allocations for {} guaranteed messages published, acknowledged, delivered and consumed",
            n - warm
        );
    }

    /// The driver reads clients that carry only guaranteed traffic after it has written the
    /// turn's direct traffic (`Core::is_background`): a queue publisher and a consumer are
    /// such clients; a plain client is not, and a publisher stops being one with its first
    /// direct message.
    #[test]
    fn only_guaranteed_only_clients_are_read_in_the_background() {
        let mut b = Bench::new();
        let core = &mut b.core;
        assert!(core.is_background(b.publisher), "a guaranteed publisher");
        assert!(core.is_background(b.consumer), "a queue consumer");
        let plain = accept(core);
        assert!(!core.is_background(plain), "before HELLO");
        say_hello(core, plain, "plain");
        assert!(
            !core.is_background(plain),
            "a client with no guaranteed role"
        );
        // One guaranteed publish keeps the publisher in the background...
        let g = batch(1);
        core.handle_input(b.publisher, MonoNanos(2), &g, g.len());
        assert!(core.is_background(b.publisher));
        // ...one direct publish brings it to the foreground for good.
        let mut f = Vec::new();
        frame::encode_publish(
            &mut f,
            "md/x",
            b"direct",
            PublishOptions::default(),
            1 << 20,
        )
        .unwrap();
        core.handle_input(b.publisher, MonoNanos(3), &f, f.len());
        assert!(
            !core.is_background(b.publisher),
            "a client that published a direct message"
        );
        assert!(core.is_background(b.consumer));
    }
}

/// Peer comparison: a subscriber that stopped reading, under the discard policy, cost
/// an allocation of its whole egress buffer (and its page faults and a copy) every
/// time the buffer filled, on the one routing thread: the other subscribers' p99 rose
/// 3-5x. Its oldest messages are now dropped in place: once its buffer is at its
/// limit, routing to it and to a reading subscriber allocates nothing.
#[test]
fn discarding_for_a_subscriber_that_does_not_read_allocates_nothing() {
    assert_counting();
    let cfg = Config {
        egress_limit: 64 << 10,
        slow_consumer: tickwire_router::config::SlowConsumerPolicy::Discard,
        ..Config::default()
    };
    let mut core = Core::new(cfg, MonoNanos(1), UtcNanos(0));
    let publisher = hello(&mut core, "pub");
    let reader = hello(&mut core, "reader");
    let stuck = hello(&mut core, "stuck");
    for id in [reader, stuck] {
        let mut b = Vec::new();
        frame::encode_subscribe(&mut b, 1, "md/>");
        feed(&mut core, id, &b);
    }
    let mut dirty = Vec::with_capacity(16);
    let input = batch(|_| "md/AAPL/trade".into());
    let mut now = MonoNanos(1_000);
    let mut delivered = 0u64;
    let mut step = |core: &mut Core, delivered: &mut u64, now: &mut MonoNanos| {
        *now = now.add_nanos(1_000);
        assert_eq!(
            core.handle_input(publisher, *now, &input, input.len()),
            Input::Consumed(input.len())
        );
        // The driver writes the reader only: the stuck one's socket takes nothing.
        core.poll_transmit(&mut dirty);
        let out = core.egress(reader);
        let n = out.len();
        let mut rest = out;
        while let Ok(Some((f, used))) = frame::decode(rest, u32::MAX) {
            *delivered += u64::from(matches!(f, Frame::Message(_)));
            rest = &rest[used..];
        }
        core.handle_written(reader, n);
        dirty.clear();
    };
    for _ in 0..WARMUP_BATCHES {
        step(&mut core, &mut delivered, &mut now);
    }
    delivered = 0;
    let (_, allocations) = allocations_during(|| {
        for _ in 0..MEASURED_BATCHES {
            step(&mut core, &mut delivered, &mut now);
        }
    });
    let n = (BATCH * MEASURED_BATCHES) as u64;
    assert_eq!(delivered, n, "the reader got every message");
    let discards = core.totals().discards;
    assert!(
        discards > n / 2,
        "the stuck one's messages were discarded: {discards}"
    );
    assert_eq!(
        allocations, 0,
        "{allocations} allocations while discarding for a subscriber that does not read"
    );
}
