//! A fixed amount of the router's per-message data path, for instruction counts:
//! `Core::handle_input` over ROUNDS batches of 64 PUBLISH frames (topic
//! `bench/stream`, 100-byte payload) from one client to one subscriber, the egress
//! taken as written after each batch (`benches/data_path.rs` times the same loop).
//!
//! ```sh
//! cargo build --release --example route_count -p tickwire-router
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/route_count 10000
//! # the same with the topics alternating between two (a request and its reply):
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/route_count 10000 alternating
//! callgrind_annotate --inclusive=yes cg.out | grep 'Core::handle_input'
//! ```
//! The inclusive instructions of `Core::handle_input` divided by ROUNDS × 64 (it prints
//! the message count) are the router core's instructions per message.

// An example fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// It reports on stdout: that is its output.
#![allow(clippy::print_stdout)]

use std::hint::black_box;

#[path = "../benches/support/one_to_one.rs"]
mod one_to_one;
use one_to_one::{publish_frames, publish_frames_alternating, OneToOne};

const BATCH: usize = 64;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(10_000, |a| a.parse().expect("ROUNDS: a number"));
    // `route_count ROUNDS alternating`: the topics alternate between two.
    let alternating = std::env::args().nth(2).is_some_and(|a| a == "alternating");
    let mut path = OneToOne::new();
    let batch = if alternating {
        publish_frames_alternating(BATCH)
    } else {
        publish_frames(BATCH)
    };
    let mut delivered = 0;
    for _ in 0..rounds {
        delivered += path.round(black_box(&batch));
    }
    // Every PUBLISH became a MESSAGE of the same size (no DISCARDS, no STAMPS).
    assert_eq!(delivered, rounds * batch.len());
    println!("{} messages", rounds * BATCH);
}
