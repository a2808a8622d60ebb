//! Purpose-built log vs embedded store: N records of 100 bytes with group commit, one
//! fsync per batch, through the spool and through redb (one write transaction per
//! batch, `Durability::Immediate`).
//!
//!     cargo run --release -p tickwire-spool --example spool_vs_embedded [-- DIR [redb]]
//!
//! With `redb` as second argument only the redb rows run (to count its syncs with
//! `strace -f -c -e trace=fsync,fdatasync`).
//! DIR (default: a temporary directory under the current one) should be on the disk
//! being measured. Counts of fsync calls for redb come from `strace -f -c` (see the
//! crate README); the spool counts its own.
// An example prints its results.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use redb::{Database, Durability, TableDefinition};
use tickwire_spool::{Config, Durable, Lsn, Spool, SyncPolicy};

const N: u64 = 200_000;
const SIZE: usize = 100;
const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("records");

fn main() {
    let base = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let only_redb = std::env::args().nth(2).is_some_and(|a| a == "redb");
    println!("N = {N} records of {SIZE} bytes, one durable commit per batch; dir under {base}");
    println!(
        "{:<34} {:>7} {:>12} {:>9} {:>9}",
        "store", "batch", "records/s", "fsyncs", "seconds"
    );
    for batch in [1000u64, 100] {
        if only_redb {
            let dir = tempfile::tempdir_in(&base).unwrap();
            row(
                "redb 2 (Durability::Immediate)",
                batch,
                redb(dir.path(), batch),
                None,
            );
            continue;
        }
        let dir = tempfile::tempdir_in(&base).unwrap();
        let (secs, fsyncs) = spool(dir.path(), batch, true);
        row("spool (wait for each batch)", batch, secs, Some(fsyncs));
        let dir = tempfile::tempdir_in(&base).unwrap();
        let (secs, fsyncs) = spool(dir.path(), batch, false);
        row("spool (pipelined, group commit)", batch, secs, Some(fsyncs));
        let dir = tempfile::tempdir_in(&base).unwrap();
        let secs = redb(dir.path(), batch);
        row("redb 2 (Durability::Immediate)", batch, secs, None);
    }
}

fn row(name: &str, batch: u64, secs: f64, fsyncs: Option<u64>) {
    let fsyncs = fsyncs.map_or("strace".to_string(), |f| f.to_string());
    println!(
        "{name:<34} {batch:>7} {:>12.0} {fsyncs:>9} {secs:>9.2}",
        N as f64 / secs
    );
}

/// Appends N records, flushing every `batch`; `wait` waits for each batch to be durable
/// before the next (one fsync per batch, like the redb loop); otherwise the storage
/// thread commits whatever has queued up meanwhile.
fn spool(dir: &Path, batch: u64, wait: bool) -> (f64, u64) {
    let mut config = Config::new(dir);
    config.sync = SyncPolicy::Fsync;
    let (spool, _) = Spool::open(config, |_, _| {}).unwrap();
    let mut app = spool.start(Box::new(|| {})).unwrap();
    let payload = [0x5Au8; SIZE];
    let fsyncs_before = app.stats().fsyncs;
    let start = Instant::now();
    let mut durable = Lsn(0);
    let mut i = 0;
    while i < N {
        for _ in 0..batch {
            loop {
                match app.append(&payload) {
                    Ok(_) => break,
                    Err(tickwire_spool::AppendError::Busy) => {
                        drain(&mut app, &mut durable);
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        i += batch;
        app.flush();
        if wait {
            while durable.0 < i {
                drain(&mut app, &mut durable);
                std::hint::spin_loop();
            }
        } else {
            drain(&mut app, &mut durable);
        }
    }
    while durable.0 < N {
        drain(&mut app, &mut durable);
        std::hint::spin_loop();
    }
    let secs = start.elapsed().as_secs_f64();
    let fsyncs = app.stats().fsyncs - fsyncs_before;
    app.close().unwrap();
    (secs, fsyncs)
}

fn drain(app: &mut tickwire_spool::Appender, durable: &mut Lsn) {
    while let Some(d) = app.poll_durable() {
        match d {
            Durable::Through(l) => *durable = l,
            Durable::Failed { .. } => panic!("write failed: {d:?}"),
        }
    }
}

fn redb(dir: &Path, batch: u64) -> f64 {
    let db = Database::create(dir.join("store.redb")).unwrap();
    let payload = [0x5Au8; SIZE];
    let start = Instant::now();
    let mut i = 0;
    while i < N {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Immediate);
        {
            let mut table = tx.open_table(TABLE).unwrap();
            for k in 0..batch {
                table.insert(i + k + 1, payload.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        i += batch;
    }
    start.elapsed().as_secs_f64()
}
