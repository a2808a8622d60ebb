//! What one NAK naming 65,535 datagrams costs the multicast sender when its buffer
//! is full and its retransmission budget spent (a receiver, or anyone who learnt the
//! session id, asking for everything again and again). BENCHMARKS.md quotes it.
//!
//! ```sh
//! cargo run --release -p tickwire-mcast --example nak_cost
//! ```
#![allow(clippy::all, clippy::unwrap_used, clippy::print_stdout)]
use std::time::Instant;
use tickwire_mcast::packet::{write_header, Header, Kind, HEADER_LEN};
use tickwire_mcast::{MonoNanos, Sender, SenderConfig, SessionId};
fn main() {
    let cfg = SenderConfig {
        session: SessionId(7),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, MonoNanos(1)).unwrap();
    // Fill the retransmission buffer: one message per datagram.
    for i in 0..10_000u64 {
        s.publish(MonoNanos(2 + i), "md/x", &[0u8; 1000], Default::default())
            .unwrap();
        s.flush(MonoNanos(2 + i));
        while s.poll_transmit().is_some() {}
    }
    let mut nak = [0u8; HEADER_LEN];
    write_header(
        &mut nak,
        Header {
            kind: Kind::Nak,
            flags: 0,
            session: 7,
            count: u16::MAX,
            a: 0,
            b: 99,
            c: 0,
        },
    );
    let n = 20_000;
    let t = Instant::now();
    for k in 0..n {
        // 1 us apart: tokens refill ~64 bytes per NAK, so nearly all are rate limited.
        let _ = s.handle_nak(MonoNanos(1_000_000_000 + k * 1000), &nak);
        while s.poll_transmit().is_some() {}
    }
    let dt = t.elapsed();
    println!(
        "NAK(from 0, count 65535) on a full 4096-datagram buffer: {:.2} us each ({n})",
        dt.as_secs_f64() * 1e6 / n as f64
    );
}
