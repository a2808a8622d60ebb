//! Why the feed handler has its own order map: 8 M sequential order references, each
//! order removed 4,000 references after it was added (the flow of a real feed: short-
//! lived orders, references assigned in sequence), through std's `HashMap` with a hash
//! that keeps the reference in the bucket-index bits (tickwire's map until `b3be813`)
//! and through [`OrderMap`], both sized for 1 Mi orders. Prints every add + remove
//! that took over 200 µs and the slowest one.
//!
//! ```sh
//! cargo run --release -p tickwire-md --example order_map_churn
//! ```
//!
//! With `HashMap`, removals in a full neighbourhood leave tombstones that do not give
//! insert room back, so the table rehashes in place every ~1.83 M adds (about a
//! millisecond each here). `OrderMap` deletes by backward shift and never rehashes
//! unless it grows.

// An example is a small program: it prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// An example stops at the first surprise: unwrap/expect are its error handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use tickwire_md::book::{Order, Side};
use tickwire_md::order_map::OrderMap;

/// The reference in hashbrown's index bits, a multiplicative mix in its 7 tag bits.
#[derive(Default)]
struct LocalityHasher(u64);

impl Hasher for LocalityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }
    fn write_u64(&mut self, k: u64) {
        const TAG: u64 = 0x7F << 57;
        self.0 = (k & !TAG) | (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TAG);
    }
}

const ADDS: u64 = 8_000_000;
const LIFETIME: u64 = 4_000;

fn churn(name: &str, mut add_remove: impl FnMut(u64)) {
    let mut worst = (0u128, 0u64);
    let mut slow = 0;
    for r in 1..=ADDS {
        let t = Instant::now();
        add_remove(r);
        let e = t.elapsed().as_nanos();
        if e > 200_000 {
            slow += 1;
            println!("  {name}: {} µs at reference {r}", e / 1000);
        }
        if e > worst.0 {
            worst = (e, r);
        }
    }
    println!(
        "{name}: slowest add + remove {} µs (reference {}); {slow} over 200 µs",
        worst.0 / 1000,
        worst.1
    );
}

fn main() {
    let o = Order {
        locate: 1,
        side: Side::Buy,
        price: 1,
        shares: 1,
    };
    let mut h: HashMap<u64, Order, BuildHasherDefault<LocalityHasher>> =
        HashMap::with_capacity_and_hasher(1 << 20, Default::default());
    churn("HashMap", |r| {
        h.insert(r, o);
        if r > LIFETIME {
            h.remove(&(r - LIFETIME));
        }
    });
    drop(h);
    let mut m = OrderMap::with_capacity(1 << 20);
    churn("OrderMap", |r| {
        m.insert(r, o);
        if r > LIFETIME {
            m.remove(r - LIFETIME);
        }
    });
}
