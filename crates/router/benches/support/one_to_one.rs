//! The set-up shared by `benches/data_path.rs` and `examples/route_count.rs`: a router
//! core with one publisher and one subscriber on `bench/stream`, and a batch of PUBLISH
//! frames of `bench stream`'s shape (100-byte payload).

use std::net::SocketAddr;

use tickwire_router::core::{Core, Input};
use tickwire_router::index::Slot;
use tickwire_router::Config;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, PublishOptions, PROTOCOL_VERSION};

const T0: u64 = 7_000_000_000;
/// The topic published and subscribed to.
pub const TOPIC: &str = "bench/stream";

/// A core with `publisher` → `subscriber` on [`TOPIC`].
pub struct OneToOne {
    pub core: Core,
    pub publisher: Slot,
    pub subscriber: Slot,
}

impl OneToOne {
    pub fn new() -> OneToOne {
        let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
        let publisher = open(&mut core, "publisher");
        let subscriber = open(&mut core, "subscriber");
        let mut sub = Vec::new();
        frame::encode_subscribe(&mut sub, 1, TOPIC);
        frame::encode_subscribe(&mut sub, 2, OTHER);
        feed(&mut core, subscriber, &sub);
        take_egress(&mut core, subscriber);
        OneToOne {
            core,
            publisher,
            subscriber,
        }
    }

    /// Feeds `batch` from the publisher and takes the subscriber's egress as written;
    /// returns the bytes it held.
    #[inline]
    pub fn round(&mut self, batch: &[u8]) -> usize {
        feed(&mut self.core, self.publisher, batch);
        take_egress(&mut self.core, self.subscriber)
    }
}

/// A second topic the subscriber also takes (for [`publish_frames_alternating`]).
pub const OTHER: &str = "bench/reply";

/// `n` PUBLISH frames on [`TOPIC`], each with a 100-byte payload numbered in its first
/// 8 bytes.
pub fn publish_frames(n: usize) -> Vec<u8> {
    frames(n, &[TOPIC])
}

/// As [`publish_frames`], the topics alternating between [`TOPIC`] and [`OTHER`] (a
/// request and its reply, two interleaved publishers).
#[allow(dead_code)]
pub fn publish_frames_alternating(n: usize) -> Vec<u8> {
    frames(n, &[TOPIC, OTHER])
}

fn frames(n: usize, topics: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        let mut payload = [0u8; 100];
        payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let topic = topics[i % topics.len()];
        frame::encode_publish(&mut b, topic, &payload, PublishOptions::default(), 1 << 20).unwrap();
    }
    b
}

fn feed(core: &mut Core, id: Slot, bytes: &[u8]) {
    let got = core.handle_input(id, MonoNanos(T0), bytes, bytes.len());
    assert_eq!(got, Input::Consumed(bytes.len()));
}

fn take_egress(core: &mut Core, id: Slot) -> usize {
    let n = core.egress(id).len();
    core.handle_written(id, n);
    n
}

fn open(core: &mut Core, name: &str) -> Slot {
    let addr = SocketAddr::from(([127, 0, 0, 1], 9));
    let id = core
        .handle_accept(addr, MonoNanos(T0), UtcNanos(0))
        .ok()
        .expect("accepted");
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
    feed(core, id, &b);
    take_egress(core, id);
    id
}
