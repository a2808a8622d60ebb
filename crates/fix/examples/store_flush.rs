//! The file store's flush, timed: `cargo run --release -p tickwire-fix --example
//! store_flush [-- MESSAGES [pwrite]]`. Saves a 230-byte message, flushes, prepares
//! (as the FIX engine does after its socket writes) and waits ~18 µs, MESSAGES times
//! (default 200,000; ~50k per second, the tick-to-trade bar's rate), in a fresh store
//! under the temporary directory; prints the distribution of the flush times and of the
//! prepare times. `pwrite` as the second argument measures the store with mapped writes
//! off (one `pwrite` per flush), for comparison.
// A measuring tool: it prints its figures, and fails loudly on a store error.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tickwire_fix::store::{FileStore, MessageStore, SyncPolicy};

fn summary(name: &str, mut ns: Vec<u64>) {
    let n = ns.len().max(1);
    let total: u64 = ns.iter().sum();
    ns.sort_unstable();
    let q = |f: f64| {
        ns.get(((ns.len() as f64 - 1.0) * f) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{name:8} mean {:>7} ns  p50 {:>7}  p99 {:>7}  p99.9 {:>7}  max {:>8}  over 20 µs: {}",
        total / n as u64,
        q(0.5),
        q(0.99),
        q(0.999),
        ns.last().copied().unwrap_or(0),
        ns.iter().filter(|&&x| x > 20_000).count()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(200_000, |a| a.parse().unwrap());
    let pwrite = args.next().as_deref() == Some("pwrite");
    let dir = std::env::temp_dir().join(format!("tickwire-store-flush-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 0).unwrap();
    if pwrite {
        s.set_mapped_writes(false);
    }
    let msg = vec![b'x'; 230];
    let (mut flush, mut prepare) = (
        Vec::with_capacity(n as usize),
        Vec::with_capacity(n as usize),
    );
    for seq in 1..=n {
        s.save(seq, &msg).unwrap();
        s.incr_next_sender_seq().unwrap();
        let t = Instant::now();
        s.flush().unwrap();
        let t1 = Instant::now();
        s.prepare();
        prepare.push(t1.elapsed().as_nanos() as u64);
        flush.push((t1 - t).as_nanos() as u64);
        let until = Instant::now() + Duration::from_micros(18);
        while Instant::now() < until {}
    }
    println!(
        "{n} flushes of one 230-byte message, writes mapped: {}",
        s.writes_mapped()
    );
    summary("flush", flush);
    summary("prepare", prepare);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
