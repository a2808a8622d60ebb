//! Opening a file store reads its log in windows: the memory it takes is bounded by a
//! window and the index, not by the log's length (it read the whole log into memory,
//! so a busy session's day of messages took as much memory again to open).
//!
//! Its own test binary, so the counting global allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::ControlFlow;

use tickwire_alloc_count::{assert_counting, peak_during, CountingAlloc};
use tickwire_fix::store::{FileStore, MessageStore, SyncPolicy};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A message of about 4 KiB with sequence number `seq` in it.
fn msg(seq: u64) -> Vec<u8> {
    let text = format!("8=FIX.4.4\x019=4000\x0135=D\x0134={seq}\x0158=");
    let mut m = text.into_bytes();
    m.resize(4_000, b'x');
    m.extend_from_slice(b"\x0110=000\x01");
    m
}

#[test]
fn opening_a_large_log_takes_a_window_not_the_log() {
    assert_counting();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    const N: u64 = 6_000; // ~24 MiB of records
    {
        let (mut s, _) = FileStore::open(&dir, SyncPolicy::Os, 42).unwrap();
        for seq in 1..=N {
            s.save(seq, &msg(seq)).unwrap();
            s.incr_next_sender_seq().unwrap();
            if seq % 100 == 0 {
                s.flush().unwrap();
            }
        }
        s.flush().unwrap();
    }
    let log_len = std::fs::metadata(dir.join("store.log")).unwrap().len();
    assert!(log_len > 24_000_000, "log of {log_len} bytes");
    let ((s, warning), peak) = peak_during(|| FileStore::open(&dir, SyncPolicy::Os, 43).unwrap());
    assert!(warning.is_none(), "{warning:?}");
    // A 1 MiB window, the index (16 bytes a message) and the store's own buffers.
    assert!(
        peak < 4 << 20,
        "opening a {log_len}-byte log took {peak} bytes at its peak"
    );
    // And it recovered every message.
    assert_eq!(s.next_sender_seq(), N + 1);
    let mut seen = Vec::new();
    s.get_range(N - 1, N, &mut |seq, m| {
        seen.push((seq, m.to_vec()));
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(seen, vec![(N - 1, msg(N - 1)), (N, msg(N))]);
}
