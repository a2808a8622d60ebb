//! Model-checks the ring's index protocol and its wake protocol with loom:
//! `RUSTFLAGS="--cfg loom" cargo test -p tickwire-shm --test loom --release`.
//! (Without `--cfg loom` this file is empty.)
#![cfg(loom)]
#![allow(clippy::unwrap_used)]

use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use loom::thread;
use std::sync::Arc;
use tickwire_shm::ring::{Consumer, Mem, Producer, RingLayout};

/// Shared memory for the model: every byte is a loom atomic accessed relaxed, so a
/// read that the index protocol fails to order sees a stale byte and the test fails.
struct Model {
    words: [AtomicU64; 2],
    flag: AtomicU32,
    data: Vec<AtomicU8>,
}

const LAY: RingLayout = RingLayout {
    tail: 0,
    head: 1,
    parked: 2,
    data: 0,
    cap: 4,
};

impl Mem for Model {
    fn word(&self, offset: usize) -> &AtomicU64 {
        &self.words[offset]
    }
    fn flag(&self, _offset: usize) -> &AtomicU32 {
        &self.flag
    }
    fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.data[offset + i].load(Ordering::Relaxed);
        }
    }
    fn copy_in(&self, offset: usize, src: &[u8]) {
        for (i, s) in src.iter().enumerate() {
            self.data[offset + i].store(*s, Ordering::Relaxed);
        }
    }
}

fn model() -> Arc<Model> {
    Arc::new(Model {
        words: [AtomicU64::new(0), AtomicU64::new(0)],
        flag: AtomicU32::new(0),
        data: (0..LAY.cap).map(|_| AtomicU8::new(0)).collect(),
    })
}

/// Six bytes through a four-byte ring (so it wraps and fills): the consumer sees
/// exactly the bytes written, in order, under every interleaving.
#[test]
fn bytes_arrive_in_order_across_the_wrap() {
    loom::model(|| {
        let m = model();
        let mut p = Producer::new(m.clone(), LAY);
        let mut c = Consumer::new(m, LAY);
        let writer = thread::spawn(move || {
            let msg = [1u8, 2, 3, 4, 5, 6];
            let mut sent = 0;
            while sent < msg.len() {
                let n = p.write(&msg[sent..]).unwrap();
                sent += n;
                if n == 0 {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        let mut buf = [0u8; 3];
        while got.len() < 6 {
            let n = c.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            if n == 0 {
                thread::yield_now();
            }
        }
        writer.join().unwrap();
        assert_eq!(got, [1, 2, 3, 4, 5, 6]);
    });
}

/// No lost wake-up: if the consumer decides to sleep, the producer rings.
#[test]
fn a_sleeping_consumer_is_always_woken() {
    loom::model(|| {
        let m = model();
        let mut p = Producer::new(m.clone(), LAY);
        let c = Consumer::new(m, LAY);
        let rung = Arc::new(AtomicBool::new(false));
        let rung2 = rung.clone();
        let writer = thread::spawn(move || {
            assert_eq!(p.write(&[7]).unwrap(), 1);
            if p.wake_needed() {
                rung2.store(true, Ordering::Relaxed);
            }
        });
        let ready = c.park().unwrap();
        writer.join().unwrap();
        if !ready {
            // The consumer would sleep now: the doorbell must have been rung.
            assert!(rung.load(Ordering::Relaxed), "lost wake-up");
        }
    });
}
