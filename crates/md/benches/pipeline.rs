//! The issue-5 bar: decode + book update + publish-encode throughput, one core.
//!
//! A generated session (50 symbols, 1,000,000 ITCH messages, seed 1) is packed into
//! MoldUDP64 packets of at most 1400 bytes in memory. One iteration runs a fresh
//! [`FeedHandler`] over the whole session; every normalized update is encoded as a
//! router PUBLISH frame with a STAMPS block into a reused buffer (cleared at 64 KiB,
//! as a client's flush would). Throughput is reported in ITCH messages per second.
//!
//! `cargo bench -p tickwire-md --bench pipeline -- --warm-up-time 1 --measurement-time 3`
//!
//! The order map has the feed handler's default size (1 Mi orders), as `tickwire feed`
//! runs it. (Through commit `8ae3322` this bench used 64 Ki, which hid most of what the
//! old order-map hasher cost at the real size.)
//!
//! Two variants: quotes and trades only (the default feed), and with 5-level depth.

// A bench fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tickwire_itch::{PacketBuilder, Session};
use tickwire_md::feed::{FeedConfig, FeedHandler};
use tickwire_md::generator::{Generator, GeneratorConfig};
use tickwire_wire::frame::{encode_publish, PublishOptions, DEFAULT_MAX_FRAME};

const SYMBOLS: u16 = 50;
const MESSAGES: u64 = 1_000_000;

fn session_packets() -> Vec<Vec<u8>> {
    let cfg = GeneratorConfig {
        symbols: SYMBOLS,
        messages: MESSAGES,
        seed: 1,
        ..GeneratorConfig::default()
    };
    PacketBuilder::new(Session::new("BENCH").expect("valid session"), 1, 1400)
        .pack(Generator::new(cfg).expect("valid generator config"))
        .expect("a message fits an empty packet")
}

fn run(f: &mut FeedHandler, packets: &[Vec<u8>], tx: &mut Vec<u8>) -> u64 {
    let mut now = 1u64;
    for p in packets {
        // The driver reads the clock once per packet; the same value stamps the publish.
        now += 1000;
        let mut sink = |topic: &str, payload: &[u8]| {
            if tx.len() > 64 * 1024 {
                tx.clear();
            }
            let opts = PublishOptions {
                seq: None,
                publisher_send: Some(now),
            };
            let _ = encode_publish(tx, topic, payload, opts, DEFAULT_MAX_FRAME);
        };
        f.handle_datagram(tickwire_rt::MonoNanos(now), p, &mut sink);
    }
    f.counters().published
}

fn pipeline(c: &mut Criterion) {
    let packets = session_packets();
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(MESSAGES));
    g.sample_size(10);
    for depth in [0usize, 5] {
        let cfg = FeedConfig {
            depth_levels: depth,
            ..FeedConfig::default()
        };
        let mut tx = Vec::with_capacity(128 * 1024);
        let name = if depth == 0 {
            "quotes_trades"
        } else {
            "with_depth5"
        };
        g.bench_function(name, |b| {
            b.iter_batched(
                || FeedHandler::new(cfg.clone()).expect("valid feed config"),
                |mut f| {
                    let published = run(&mut f, &packets, &mut tx);
                    assert_eq!(f.counters().messages, MESSAGES);
                    black_box(published);
                    f
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
