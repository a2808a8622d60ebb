//! The router's per-message data path, without IO: what one PUBLISH costs from the
//! bytes a client wrote to the MESSAGE queued for its subscriber.
//!
//! - `core/publish_1to1`: `Core::handle_input` over a batch of 64 PUBLISH frames (topic
//!   `bench/stream`, 100-byte payload: `bench stream`'s shape) from one client, routed
//!   to one subscriber, then the subscriber's egress taken as written (what the driver
//!   does after its ring or socket write). Throughput is per message.
//! - `decode/publish`, `decode/message`: `frame::decode` of one such frame (what the
//!   router does per PUBLISH, and the receiving client per MESSAGE).
//!
//! Run: `cargo bench -p tickwire-router --bench data_path -- --warm-up-time 1 --measurement-time 3`
//! (pin it for steadier figures: `taskset -c 1 cargo bench ...`).

// A bench fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tickwire_router::core::{Core, Input};
use tickwire_router::index::Slot;
use tickwire_router::Config;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, PublishOptions, PROTOCOL_VERSION};

const T0: u64 = 7_000_000_000;
const TOPIC: &str = "bench/stream";
const BATCH: usize = 64;

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

fn publish_frames(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        let mut payload = [0u8; 100];
        payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
        frame::encode_publish(&mut b, TOPIC, &payload, PublishOptions::default(), 1 << 20).unwrap();
    }
    b
}

fn core_path(c: &mut Criterion) {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let publisher = open(&mut core, "publisher");
    let subscriber = open(&mut core, "subscriber");
    let mut sub = Vec::new();
    frame::encode_subscribe(&mut sub, 1, TOPIC);
    feed(&mut core, subscriber, &sub);
    take_egress(&mut core, subscriber);
    let batch = publish_frames(BATCH);
    // One round first: every PUBLISH must reach the subscriber.
    feed(&mut core, publisher, &batch);
    let queued = take_egress(&mut core, subscriber);
    assert!(
        queued >= batch.len(),
        "{queued} bytes queued for {} published",
        batch.len()
    );

    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("publish_1to1", |b| {
        b.iter(|| {
            feed(&mut core, publisher, black_box(&batch));
            black_box(take_egress(&mut core, subscriber));
        })
    });
    group.finish();
}

fn decode(c: &mut Criterion) {
    let publish = publish_frames(1);
    let mut message = Vec::new();
    frame::encode_message_from_publish(&mut message, &publish, 0, 0, 0);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    for (name, bytes) in [("publish", &publish), ("message", &message)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let (f, n) = frame::decode(black_box(bytes), u32::MAX).unwrap().unwrap();
                black_box(&f);
                n
            })
        });
    }
    group.finish();
}

criterion_group!(benches, core_path, decode);
criterion_main!(benches);
