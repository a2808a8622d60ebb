//! The ring reader and writer against a peer that writes anything into the header:
//! they never panic, never read or write outside the ring, and report impossible
//! indexes as `Corrupt`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use proptest::prelude::*;
use tickwire_shm::layout::Header;
use tickwire_shm::ring::{Consumer, Producer};
use tickwire_shm::Region;

const CAP: usize = 4096;

fn region() -> Arc<Region> {
    let fd = rustix::fs::memfd_create("tickwire-hostile", rustix::fs::MemfdFlags::CLOEXEC)
        .expect("memfd");
    let file = std::fs::File::from(fd);
    file.set_len(tickwire_shm::layout::mapping_len(CAP) as u64)
        .expect("size");
    Arc::new(Region::map(&file).expect("map"))
}

#[derive(Debug, Clone)]
enum Op {
    /// The honest side writes this many bytes.
    Write(usize),
    /// The honest side reads up to this many bytes.
    Read(usize),
    /// The hostile peer stores a tail.
    EvilTail(u64),
    /// The hostile peer stores a head.
    EvilHead(u64),
    /// The hostile peer scribbles over the data area.
    EvilBytes(usize, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3 * CAP).prop_map(Op::Write),
        (0usize..3 * CAP).prop_map(Op::Read),
        prop_oneof![any::<u64>(), 0u64..2 * CAP as u64].prop_map(Op::EvilTail),
        prop_oneof![any::<u64>(), 0u64..2 * CAP as u64].prop_map(Op::EvilHead),
        (
            0usize..2 * CAP,
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(at, b)| Op::EvilBytes(at, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The router's view: it consumes the client→router ring and produces into the
    /// router→client ring while the client writes anything anywhere.
    #[test]
    fn hostile_peer_never_panics_and_indexes_stay_checked(ops in proptest::collection::vec(op(), 1..64)) {
        let r = region();
        let h = Header::new(CAP);
        let inbound = h.client_to_router();
        let outbound = h.router_to_client();
        let mut rx = Consumer::new(r.clone(), inbound);
        let mut tx = Producer::new(r.clone(), outbound);
        let src = vec![0xABu8; 3 * CAP];
        let mut dst = vec![0u8; 3 * CAP];
        let mut read_total = 0u64;
        for op in ops {
            match op {
                Op::Write(n) => {
                    if let Ok(w) = tx.write(&src[..n]) {
                        prop_assert!(w <= n && w <= CAP);
                    }
                }
                Op::Read(n) => match rx.read(&mut dst[..n]) {
                    Ok(got) => {
                        prop_assert!(got <= n && got <= CAP);
                        read_total += got as u64;
                    }
                    Err(c) => {
                        // Reported only for a tail more than a ring ahead of us.
                        prop_assert!(c.theirs.wrapping_sub(c.ours) > CAP as u64);
                    }
                },
                Op::EvilTail(t) => r.atomic_u64(inbound.tail).store(t, Ordering::Relaxed),
                Op::EvilHead(hd) => r.atomic_u64(outbound.head).store(hd, Ordering::Relaxed),
                Op::EvilBytes(at, b) => {
                    let at = at.min(2 * CAP - b.len());
                    r.copy_in(tickwire_shm::layout::HEADER_LEN + at, &b);
                }
            }
        }
        // Our own published head is what we read, whatever the peer did.
        prop_assert_eq!(r.atomic_u64(inbound.head).load(Ordering::Relaxed), read_total);
    }
}

#[test]
fn a_head_moving_backwards_or_past_the_tail_is_corrupt() {
    let r = region();
    let lay = Header::new(CAP).router_to_client();
    let mut tx = Producer::new(r.clone(), lay);
    assert_eq!(tx.write(&[1; 100]).unwrap(), 100);
    r.atomic_u64(lay.head).store(101, Ordering::Relaxed);
    assert!(tx.free().is_err());
    r.atomic_u64(lay.head).store(50, Ordering::Relaxed);
    assert_eq!(tx.free().unwrap(), CAP - 50);
    r.atomic_u64(lay.head).store(40, Ordering::Relaxed);
    assert!(tx.free().is_err(), "the consumer may not go back");
}

#[test]
fn bytes_round_trip_through_the_wrap() {
    let (mut a, mut b) = tickwire_shm::bare_pair(CAP).unwrap();
    let mut out = vec![0u8; CAP];
    for round in 0..10u8 {
        let msg: Vec<u8> = (0..3000).map(|i| (i as u8).wrapping_add(round)).collect();
        assert_eq!(a.tx.write(&msg).unwrap(), msg.len());
        let n = b.rx.read(&mut out).unwrap();
        assert_eq!(&out[..n], &msg[..]);
    }
}
