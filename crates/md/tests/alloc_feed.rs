//! The feed-handler core allocates nothing per message after warm-up: MoldUDP64
//! packets of a synthetic exchange session (adds, executions, cancels, deletes,
//! replaces, trades over 20 symbols) go through `FeedHandler::handle_datagram` in order,
//! sequencing, ITCH decoding, books and normalized updates included.
//!
//! The session is generated and packed before the count starts; the sink only counts
//! and checks what it is given. Its own test binary, so the counting global allocator
//! is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_itch::{Message, PacketBuilder, Session};
use tickwire_md::feed::{FeedConfig, FeedHandler};
use tickwire_md::generator::{Generator, GeneratorConfig};
use tickwire_rt::MonoNanos;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const NOW: MonoNanos = MonoNanos(1_000_000);

fn packets(msgs: &[Message]) -> Vec<Vec<u8>> {
    PacketBuilder::new(Session::new("TEST0001").unwrap(), 1, 1400)
        .pack(msgs)
        .unwrap()
}

#[test]
fn steady_state_feed_handling_allocates_nothing() {
    assert_counting();
    let cfg = GeneratorConfig {
        symbols: 20,
        messages: 120_000,
        seed: 11,
        ..GeneratorConfig::default()
    };
    let msgs: Vec<Message> = Generator::new(cfg).unwrap().collect();
    let pkts = packets(&msgs);
    // Warm up on the first quarter: books reach their working depth, the order map and
    // the reusable buffers their working size.
    let warm = pkts.len() / 4;
    let mut f = FeedHandler::new(FeedConfig {
        depth_levels: 5,
        order_capacity: 1 << 16,
        ..FeedConfig::default()
    })
    .unwrap();
    let mut updates = 0u64;
    let mut empty = 0u64;
    let mut sink = |topic: &str, payload: &[u8]| {
        updates += 1;
        if topic.is_empty() || payload.is_empty() {
            empty += 1;
        }
    };
    for p in &pkts[..warm] {
        f.handle_datagram(NOW, p, &mut sink);
    }
    let before = f.counters().messages;
    let (_, allocations) = allocations_during(|| {
        for p in &pkts[warm..] {
            f.handle_datagram(NOW, p, &mut sink);
        }
    });
    let measured = f.counters().messages - before;
    assert_eq!(f.counters().messages, msgs.len() as u64);
    assert_eq!(f.counters().gaps, 0);
    assert_eq!(f.counters().malformed, 0);
    assert!(measured > 80_000, "{measured} messages measured");
    assert_eq!(empty, 0, "an update with an empty topic or payload");
    assert!(updates > 0);
    assert_eq!(
        allocations,
        0,
        "{allocations} allocations handling {measured} ITCH messages ({} packets)",
        pkts.len() - warm
    );
}
