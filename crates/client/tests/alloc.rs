//! The client's hot paths allocate nothing per message after warm-up: a real client
//! publishing (`publish` + `flush`) and a real client receiving (`poll`, the decode
//! path) against a real router (`tickwire_router::Router`, in a thread of this
//! process, on 127.0.0.1); and guaranteed publishing (module `guaranteed`).
//!
//! The count is per thread: the router's thread allocates as it likes; only the test
//! thread, which runs both clients, is counted. Its own test binary, so the counting
//! global allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::InProcessRouter;
use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_router::{Config, IdleStrategy};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const BATCH: u64 = 100;
const WARMUP_BATCHES: u64 = 20;
const MEASURED_BATCHES: u64 = 200;

#[test]
fn publishing_and_receiving_allocate_nothing_per_message() {
    pubsub_allocates_nothing(None);
}

/// The same over shared memory (`shm:NAME`): the client's ring writes and reads, and
/// its sleeps on the doorbell (`Wait::Timeout`), allocate nothing either.
#[test]
fn publishing_and_receiving_over_shared_memory_allocate_nothing_per_message() {
    pubsub_allocates_nothing(Some(format!("alloc-client-{}", std::process::id())));
}

fn pubsub_allocates_nothing(shm: Option<String>) {
    assert_counting();
    let cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        idle: IdleStrategy::Block,
        shm: shm.clone(),
        ..Config::default()
    };
    let router = InProcessRouter::start(cfg);
    let addr = match &shm {
        Some(name) => format!("shm:{name}"),
        None => router.addr.to_string(),
    };

    let connect = |name: &str| Client::connect_to(&addr, ClientOptions::named(name)).unwrap();
    let mut publisher = connect("pub");
    let mut subscriber = connect("sub");
    subscriber.subscribe("md/>").unwrap();
    let payload = [7u8; 64];
    let mut received = 0u64;
    let mut bad = 0u64;

    // One batch: publish BATCH messages, flush, then receive them all (bounded wait).
    let mut batch =
        |publisher: &mut Client, subscriber: &mut Client, counts: &mut (u64, u64)| -> u64 {
            let (_, a) = allocations_during(|| {
                for _ in 0..BATCH {
                    publisher.publish("md/AAPL/trade", &payload).unwrap();
                }
                publisher.flush().unwrap();
            });
            counts.0 += a;
            let mut got = 0;
            let mut turns = 0;
            while got < BATCH {
                turns += 1;
                assert!(turns < 10_000, "only {got} of {BATCH} messages arrived");
                let (n, a) = allocations_during(|| {
                    subscriber
                        .poll(Wait::Timeout(Duration::from_secs(5)), |m| {
                            if m.topic() != "md/AAPL/trade" || m.payload() != payload {
                                bad += 1;
                            }
                        })
                        .unwrap()
                });
                counts.1 += a;
                got += n as u64;
            }
            got
        };

    let mut warmup = (0, 0);
    for _ in 0..WARMUP_BATCHES {
        received += batch(&mut publisher, &mut subscriber, &mut warmup);
    }
    let mut measured = (0, 0);
    for _ in 0..MEASURED_BATCHES {
        received += batch(&mut publisher, &mut subscriber, &mut measured);
    }
    let n = BATCH * MEASURED_BATCHES;
    assert_eq!(received, BATCH * (WARMUP_BATCHES + MEASURED_BATCHES));
    assert_eq!(bad, 0, "a message arrived with the wrong topic or payload");
    assert_eq!(
        measured.0, 0,
        "publish + flush allocated {} times for {n} messages",
        measured.0
    );
    assert_eq!(
        measured.1, 0,
        "poll (receive and decode) allocated {} times for {n} messages",
        measured.1
    );

    publisher.close().unwrap();
    subscriber.close().unwrap();
    let totals = router.stop();
    assert_eq!(totals.msgs_in, received);
}

/// Guaranteed publishing allocates nothing per message after warm-up: publish into the
/// window (waiting for room when it is full), flush, read the ACKs with `poll_events`,
/// against the real router spooling to a fresh data directory (window 64).
mod guaranteed {
    use crate::support::InProcessRouter;
    use std::path::Path;
    use std::time::Duration;
    use tickwire_alloc_count::{allocations_during, assert_counting};
    use tickwire_client::{Client, ClientOptions, Event, QueueOp, Wait};
    use tickwire_router::{Config, IdleStrategy};

    use super::{BATCH, MEASURED_BATCHES, WARMUP_BATCHES};

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
}
