//! How long `FileStore::open` takes to recover a log of MESSAGES messages of SIZE bytes
//! (recovery reads the whole log once): `cargo run --release -p tickwire-fix --example
//! store_open -- [MESSAGES] [SIZE] [RUNS]` prints each run and the median.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use tickwire_fix::store::{FileStore, MessageStore, SyncPolicy};

fn main() {
    let mut args = std::env::args().skip(1);
    let messages: u64 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("MESSAGES"));
    let size: usize = args.next().map_or(200, |a| a.parse().expect("SIZE"));
    let runs: usize = args.next().map_or(5, |a| a.parse().expect("RUNS"));
    let dir = std::env::temp_dir().join(format!("tickwire-store-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 1).unwrap();
        for seq in 1..=messages {
            // Lengths vary, so some records' length starts with a zero byte.
            let mut m = format!("8=FIX.4.4\x0135=D\x0134={seq}\x0158=").into_bytes();
            m.resize(size + (seq % 97) as usize, b'x');
            m.extend_from_slice(b"\x0110=000\x01");
            s.save(seq, &m).unwrap();
            s.incr_next_sender_seq().unwrap();
            if seq % 1000 == 0 {
                s.flush().unwrap();
            }
        }
        s.flush().unwrap();
    }
    let bytes = std::fs::metadata(dir.join("store.log")).unwrap().len();
    let mut times = Vec::new();
    for run in 1..=runs {
        let t = Instant::now();
        let (s, _) = FileStore::open(&dir, SyncPolicy::Os, 2).unwrap();
        let took = t.elapsed();
        assert_eq!(s.next_sender_seq(), messages + 1);
        drop(s);
        println!("run {run}: opened {bytes} bytes ({messages} messages) in {took:?}");
        times.push(took);
    }
    times.sort();
    println!("median {:?}", times[times.len() / 2]);
    std::fs::remove_dir_all(&dir).unwrap();
}
