//! The router's calls allocate nothing once the buffers have grown (warm-up).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tickwire_alloc_count::{allocations_during, CountingAlloc};
use tickwire_spool::{Appender, Config, Durable, Lsn, Spool, SyncPolicy};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn round(app: &mut Appender, payload: &[u8]) -> Lsn {
    let mut last = Lsn(0);
    for _ in 0..500 {
        last = app.append(payload).unwrap();
    }
    app.flush();
    last
}

/// Waits until `lsn` is durable. The progress itself may have been taken by an earlier
/// `poll_durable` (the measured round drains it), so the durable mark is read too.
fn wait(app: &mut Appender, lsn: Lsn) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(Durable::Through(l)) = app.poll_durable() {
            if l >= lsn {
                return;
            }
        }
        if app.stats().durable >= lsn {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "record {lsn} not durable after 20 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn append_flush_and_poll_allocate_nothing_after_warm_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.sync = SyncPolicy::PageCache;
    let (spool, _) = Spool::open(config, |_, _| {}).unwrap();
    let mut app = spool.start(Box::new(|| {})).unwrap();
    let payload = [5u8; 100];
    // Warm-up: both buffers of the double buffering grow to the batch size.
    for _ in 0..4 {
        let l = round(&mut app, &payload);
        wait(&mut app, l);
    }
    let (last, allocations) = allocations_during(|| {
        let l = round(&mut app, &payload);
        while app.poll_durable().is_some() {}
        l
    });
    assert_eq!(allocations, 0);
    wait(&mut app, last);
    app.close().unwrap();
}
