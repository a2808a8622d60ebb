//! Guaranteed publishing allocates nothing per message after warm-up: publish into the
//! window (waiting for room when it is full), flush, read the ACKs with `poll_events`.
//! The router is a fake in another thread that acknowledges whatever it read; only the
//! test thread is counted. Its own test binary, so the counting allocator is this
//! file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_client::{Client, ClientOptions, Event, Wait};
use tickwire_wire::frame::{self, decode, Frame, DEFAULT_MAX_FRAME};
use tickwire_wire::gm;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const BATCH: u64 = 100;
const WARMUP_BATCHES: u64 = 20;
const MEASURED_BATCHES: u64 = 100;

/// Accepts one client, opens it with a window of 64 and acknowledges every guaranteed
/// publish, one PUB_ACK per read. Returns how many it acknowledged.
fn fake_router(l: TcpListener) -> u64 {
    let (mut s, _) = l.accept().unwrap();
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut tmp = vec![0u8; 64 << 10];
    let mut acked = 0;
    loop {
        let n = s.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return acked;
        }
        buf.extend_from_slice(&tmp[..n]);
        let mut used = 0;
        let mut range: Option<(u64, u64)> = None;
        while let Ok(Some((f, len))) = decode(&buf[used..], DEFAULT_MAX_FRAME) {
            match f {
                Frame::Hello { .. } => {
                    frame::encode_welcome(&mut out, 1, DEFAULT_MAX_FRAME, "fake")
                }
                Frame::PubOpen { request_id, .. } => {
                    gm::encode_pub_opened(&mut out, request_id, 64, 0)
                }
                Frame::Publish(p) => {
                    let seq = p.seq.unwrap();
                    range = Some(range.map_or((seq, seq), |(a, _)| (a, seq)));
                }
                Frame::Close { .. } => {
                    frame::encode_close(&mut out, frame::ErrorCode::NORMAL, "bye")
                }
                _ => {}
            }
            used += len;
        }
        buf.drain(..used);
        if let Some((a, b)) = range {
            gm::encode_pub_ack(&mut out, a, b);
            acked += b - a + 1;
        }
        if !out.is_empty() {
            s.write_all(&out).unwrap();
            out.clear();
        }
    }
}

#[test]
fn guaranteed_publishing_allocates_nothing_per_message() {
    assert_counting();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let router = thread::spawn(move || fake_router(l));
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    c.open_publisher("alloc-test", 0).unwrap();
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
    c.close().unwrap();
    assert_eq!(router.join().unwrap(), counts.published);
}
