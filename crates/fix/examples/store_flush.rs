//! The file store's flush, timed: `cargo run --release -p tickwire-fix --example
//! store_flush [-- MESSAGES [pwrite]]`. Saves a 230-byte message, flushes, prepares
//! (as the FIX engine does after its socket writes) and waits ~18 µs, MESSAGES times
//! (default 200,000; ~50k per second, the tick-to-trade bar's rate), in a fresh store
//! under the temporary directory; prints the distribution of the flush times and of the
//! prepare times (HDR histograms, `tickwire_rt::Latency`). `pwrite` as the second argument measures the store with mapped writes
//! off (one `pwrite` per flush), for comparison.
// A measuring tool: it prints its figures, and fails loudly on a store error.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tickwire_fix::store::{FileStore, MessageStore, SyncPolicy};
use tickwire_rt::Latency;

fn summary(name: &str, l: &Latency) {
    let s = l.summary();
    let over = l.hist.count_between(20_001, tickwire_rt::latency::MAX_NS);
    println!(
        "{name:8} mean {:>8.3} µs  p50 {:>8.3}  p99 {:>8.3}  p99.9 {:>8.3}  max {:>8.3}  over 20 µs: {over}",
        s.mean_us, s.p50_us, s.p99_us, s.p999_us, s.max_us
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
    let (mut flush, mut prepare) = (Latency::new(), Latency::new());
    for seq in 1..=n {
        s.save(seq, &msg).unwrap();
        s.incr_next_sender_seq().unwrap();
        let t = Instant::now();
        s.flush().unwrap();
        let t1 = Instant::now();
        s.prepare();
        prepare.record(t1.elapsed().as_nanos() as u64);
        flush.record((t1 - t).as_nanos() as u64);
        let until = Instant::now() + Duration::from_micros(18);
        while Instant::now() < until {}
    }
    println!(
        "{n} flushes of one 230-byte message, writes mapped: {}",
        s.writes_mapped()
    );
    summary("flush", &flush);
    summary("prepare", &prepare);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
