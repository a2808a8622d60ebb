//! Guaranteed publishing allocates nothing per message after warm-up: publish into the
//! window (waiting for room when it is full), flush, read the ACKs with `poll_events`.
//! The router is the real one (`tickwire_router::Router` in a thread of this process,
//! on 127.0.0.1, spooling to a fresh data directory, window 64); only the test thread
//! is counted. Its own test binary, so the counting allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use support::InProcessRouter;
use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_client::{Client, ClientOptions, Event, QueueOp, Wait};
use tickwire_router::{Config, IdleStrategy};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const BATCH: u64 = 100;
const WARMUP_BATCHES: u64 = 20;
const MEASURED_BATCHES: u64 = 100;

#[test]
fn guaranteed_publishing_allocates_nothing_per_message() {
    assert_counting();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("alloc-guaranteed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        idle: IdleStrategy::Block,
        data_dir: Some(dir.clone()),
        // What is measured is the client; spare the shared disk 200 fsyncs.
        sync: "page-cache".into(),
        publish_window: 64,
        ..Config::default()
    };
    let router = InProcessRouter::start(cfg);
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    c.queue_request(
        QueueOp::Create,
        r#"{"name":"orders","subscriptions":["orders/>"]}"#,
    )
    .unwrap();
    let opened = c.open_publisher("alloc-test", 0).unwrap();
    assert_eq!(opened.window, 64);
    let payload = [7u8; 64];

    let batch = |c: &mut Client| -> u64 {
        let ((), allocs) = allocations_during(|| {
            for _ in 0..BATCH {
                c.publish_guaranteed("orders/new", &payload).unwrap();
            }
            c.flush().unwrap();
            // Events read while waiting for room come out of the stash here too.
            while c.unanswered() > 0 {
                c.poll_events(Wait::Timeout(Duration::from_secs(5)), |ev| {
                    assert!(matches!(ev, Event::Acked { .. }));
                })
                .unwrap();
            }
        });
        allocs
    };
    for _ in 0..WARMUP_BATCHES {
        batch(&mut c);
    }
    let mut allocs = 0;
    for _ in 0..MEASURED_BATCHES {
        allocs += batch(&mut c);
    }
    let n = BATCH * MEASURED_BATCHES;
    assert_eq!(
        allocs, 0,
        "publish_guaranteed + poll_events allocated {allocs} times for {n} messages"
    );
    let counts = c.publish_counts().clone();
    assert_eq!(
        counts.published,
        BATCH * (WARMUP_BATCHES + MEASURED_BATCHES)
    );
    assert_eq!(counts.acked, counts.published);
    // The router stored every one, once.
    let json = c.queue_request(QueueOp::Show, "orders").unwrap();
    assert!(
        json.contains(&format!("\"depth\":{},", counts.published)),
        "{json}"
    );
    c.close().unwrap();
    router.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
