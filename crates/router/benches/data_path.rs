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

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tickwire_wire::frame;

#[path = "support/one_to_one.rs"]
mod one_to_one;
use one_to_one::{publish_frames, OneToOne};

const BATCH: usize = 64;

fn core_path(c: &mut Criterion) {
    let mut path = OneToOne::new();
    let batch = publish_frames(BATCH);
    // One round first: every PUBLISH must reach the subscriber.
    let queued = path.round(&batch);
    assert!(
        queued >= batch.len(),
        "{queued} bytes queued for {} published",
        batch.len()
    );

    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("publish_1to1", |b| {
        b.iter(|| black_box(path.round(black_box(&batch))))
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
