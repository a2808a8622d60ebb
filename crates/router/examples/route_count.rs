//! A fixed amount of the router's per-message data path, for instruction counts:
//! `Core::handle_input` over ROUNDS batches of 64 PUBLISH frames (topic
//! `bench/stream`, 100-byte payload) from one client to one subscriber, the egress
//! taken as written after each batch (`benches/data_path.rs` times the same loop).
//!
//! ```sh
//! cargo build --release --example route_count -p tickwire-router
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/route_count 10000
//! callgrind_annotate --inclusive=yes cg.out | grep 'Core::handle_input'
//! ```
//! The inclusive instructions of `Core::handle_input` divided by ROUNDS × 64 (it prints
//! the message count) are the router core's instructions per message.

// An example fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// It reports on stdout: that is its output.
#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::net::SocketAddr;

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

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(10_000, |a| a.parse().expect("ROUNDS: a number"));
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let publisher = open(&mut core, "publisher");
    let subscriber = open(&mut core, "subscriber");
    let mut sub = Vec::new();
    frame::encode_subscribe(&mut sub, 1, TOPIC);
    feed(&mut core, subscriber, &sub);
    take_egress(&mut core, subscriber);
    let mut batch = Vec::new();
    for i in 0..BATCH {
        let mut payload = [0u8; 100];
        payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
        frame::encode_publish(
            &mut batch,
            TOPIC,
            &payload,
            PublishOptions::default(),
            1 << 20,
        )
        .unwrap();
    }
    let mut delivered = 0;
    for _ in 0..rounds {
        feed(&mut core, publisher, black_box(&batch));
        delivered += take_egress(&mut core, subscriber);
    }
    // Every PUBLISH became a MESSAGE of the same size (no DISCARDS, no STAMPS).
    assert_eq!(delivered, rounds * batch.len());
    println!("{} messages", rounds * BATCH);
}
