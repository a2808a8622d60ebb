//! Message store benchmarks: `save` + `flush` of a 200-byte message.

// A bench fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use tickwire_fix::store::{FileStore, MessageStore, SyncPolicy};

fn bench_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tickwire-store-bench-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn save_flush(c: &mut Criterion) {
    let msg = vec![b'x'; 200];
    for (name, policy) in [
        ("os", SyncPolicy::Os),
        ("every_message", SyncPolicy::EveryMessage),
    ] {
        let dir = bench_dir(name);
        let (mut store, _) = FileStore::open(&dir, policy, 0).expect("open store");
        let mut seq = store.next_sender_seq();
        c.bench_function(&format!("filestore_save_flush_200b_{name}"), |b| {
            b.iter(|| {
                store.save(seq, &msg).expect("save");
                store.incr_next_sender_seq().expect("incr");
                store.flush().expect("flush");
                seq += 1;
            })
        });
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `save` alone (the in-process append), with one `flush` per 100 messages, to show how
/// much of `save_flush` is the `pwrite`.
fn save_batched_flush(c: &mut Criterion) {
    let msg = vec![b'x'; 200];
    let dir = bench_dir("batched100");
    let (mut store, _) = FileStore::open(&dir, SyncPolicy::Os, 0).expect("open store");
    let mut seq = store.next_sender_seq();
    c.bench_function("filestore_save_200b_flush_every_100_os", |b| {
        b.iter(|| {
            store.save(seq, &msg).expect("save");
            store.incr_next_sender_seq().expect("incr");
            if seq % 100 == 0 {
                store.flush().expect("flush");
            }
            seq += 1;
        })
    });
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, save_flush, save_batched_flush);
criterion_main!(benches);
