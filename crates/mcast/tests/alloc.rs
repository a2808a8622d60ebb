//! The multicast cores allocate nothing per message after start: a sender publishing,
//! flushing, answering NAKs and heartbeating, and a receiver taking every datagram in
//! order, out of order (a hole, its NAK, the retransmission) and delivering. Its own test
//! binary, so the counting global allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use tickwire_alloc_count::{allocations_during, assert_counting, CountingAlloc};
use tickwire_mcast::{Event, MonoNanos, Receiver, ReceiverConfig, Sender, SenderConfig};
use tickwire_wire::frame::PublishOptions;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn steady_state_sending_and_receiving_allocates_nothing() {
    assert_counting();
    let mut now = MonoNanos(1_000_000_000);
    let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut tx = Sender::new(SenderConfig::default(), now).unwrap();
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let mut wire = vec![0u8; 65_536];
    let mut nak = [0u8; 64];
    let payload = [7u8; 100];
    let mut delivered = 0u64;
    let mut round = |now: MonoNanos, tx: &mut Sender, rx: &mut Receiver, delivered: &mut u64| {
        for i in 0..40u64 {
            let opts = PublishOptions {
                seq: Some(i),
                publisher_send: Some(now.0),
            };
            tx.publish(now, "md/NASDAQ/AAPL", &payload, opts).unwrap();
            if i % 4 == 3 {
                tx.flush(now);
            }
        }
        tx.flush(now);
        tx.handle_timer(now);
        let mut k = 0;
        while let Some(d) = tx.poll_transmit() {
            k += 1;
            // Every fifth datagram is lost on the way.
            if k % 5 != 0 {
                wire[..d.len()].copy_from_slice(d);
                let n = d.len();
                rx.handle_datagram(now, from, &wire[..n]).unwrap();
            }
        }
        rx.handle_timer(now.add_nanos(2_000_000));
        while let Some((_, d)) = rx.poll_transmit() {
            nak[..d.len()].copy_from_slice(d);
            let n = d.len();
            tx.handle_nak(now.add_nanos(2_000_000), &nak[..n]).unwrap();
        }
        while let Some(d) = tx.poll_transmit() {
            wire[..d.len()].copy_from_slice(d);
            let n = d.len();
            rx.handle_datagram(now, from, &wire[..n]).unwrap();
        }
        while let Some(ev) = rx.poll_event() {
            if let Event::Message { msg, .. } = ev {
                assert_eq!(msg.payload, payload);
                *delivered += 1;
            }
        }
    };
    // Warm-up: the queues reach their working sizes.
    for _ in 0..50 {
        now = now.add_nanos(20_000_000);
        round(now, &mut tx, &mut rx, &mut delivered);
    }
    let ((), allocs) = allocations_during(|| {
        for _ in 0..200 {
            now = now.add_nanos(20_000_000);
            round(now, &mut tx, &mut rx, &mut delivered);
        }
    });
    // All but what the last round lost and has not had recovered yet.
    assert!(delivered > 249 * 40, "{:?}", rx.stats());
    assert_eq!(rx.stats().gaps, 0);
    assert!(tx.stats().retransmitted > 0);
    assert_eq!(allocs, 0, "allocations in 8,000 messages");
}
