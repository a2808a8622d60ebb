//! The reliable multicast cores (`tickwire_mcast`) fed hostile input: a receiver gets
//! raw datagrams and well-formed DATA / HEARTBEAT of two sessions from two sources with
//! fuzzed sequences, message indexes and low marks, time passing and timers; a sender
//! gets raw and well-formed NAK / STATUS datagrams between its publishes.
//!
//! Checks: no panic; what the receiver delivers has strictly increasing stream
//! positions (messages and gaps, in order); after a timer, the next deadline is not in
//! the past; every datagram either core sends decodes, with the core's session.
#![no_main]

#[path = "common/cursor.rs"]
mod cursor;

use std::net::SocketAddr;

use cursor::Cursor;
use libfuzzer_sys::fuzz_target;
use tickwire_mcast::packet::{self, Datagram, Header, Kind, HEADER_LEN};
use tickwire_mcast::{
    Event, MonoNanos, Receiver, ReceiverConfig, Sender, SenderConfig, SessionId,
};
use tickwire_wire::frame::{encode_publish, PublishOptions};

fn u64_of(c: &mut Cursor<'_>) -> u64 {
    let b = c.bytes(8);
    let mut x = [0u8; 8];
    x[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(x)
}

fn header(kind: Kind, session: u32, count: u16, a: u64, b: u64, c: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    packet::write_header(&mut h, Header { kind, flags: 0, session, count, a, b, c });
    h
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor(data);
    let mut now = MonoNanos(1_000_000_000);
    let rcfg = ReceiverConfig {
        hold_datagrams: 16,
        max_jump: 64,
        confirm: 2,
        ..ReceiverConfig::default()
    };
    let Ok(mut rx) = Receiver::new(rcfg, now) else { return };
    let scfg = SenderConfig {
        session: SessionId(7),
        buffer_datagrams: 8,
        max_datagram: 512,
        ..SenderConfig::default()
    };
    let Ok(mut tx) = Sender::new(scfg, now) else { return };
    let sources: [SocketAddr; 2] = ["127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap()];
    let mut next_pos = 0u64;
    let mut seq = 0u64;
    while let Some(op) = c.u8() {
        let from = sources[usize::from(op >> 7)];
        let session = if op & 0x40 != 0 { 7 } else { 8 };
        match op & 0x0f {
            0 => {
                let n = usize::from(c.u8().unwrap_or(0));
                let _ = rx.handle_datagram(now, from, c.bytes(n));
            }
            1 | 2 | 3 => {
                // Well-formed DATA near the current position (or anywhere).
                let step = c.u8().unwrap_or(0);
                seq = if step == 0xff { u64_of(&mut c) } else { seq.saturating_add(u64::from(step % 8)).saturating_sub(2) };
                let first_msg = u64_of(&mut c) % 4096;
                let low = seq.saturating_sub(u64::from(c.u8().unwrap_or(0)));
                let frames = 1 + c.u8().unwrap_or(0) % 3;
                let mut d = vec![0u8; HEADER_LEN];
                for _ in 0..frames {
                    let len = usize::from(c.u8().unwrap_or(0) % 32);
                    let payload = c.bytes(len).to_vec();
                    let _ = encode_publish(&mut d, "t/a", &payload, PublishOptions::default(), 1 << 16);
                }
                let h = header(Kind::Data, session, u16::from(frames), seq, first_msg, low);
                d[..HEADER_LEN].copy_from_slice(&h);
                let _ = rx.handle_datagram(now, from, &d);
            }
            4 => {
                let next = seq.saturating_add(u64::from(c.u8().unwrap_or(0) % 16));
                let h = header(Kind::Heartbeat, session, 0, next, u64_of(&mut c) % 4096, next.saturating_sub(u64::from(c.u8().unwrap_or(0))));
                let _ = rx.handle_datagram(now, from, &h);
            }
            5 | 6 => {
                now = now.add_nanos(u64::from(c.u8().unwrap_or(0)) * 100_000);
                rx.handle_timer(now);
                assert!(rx.poll_timeout() > now);
                tx.handle_timer(now);
                assert!(tx.poll_timeout() > now);
            }
            7 => {
                let n = usize::from(c.u8().unwrap_or(0) % 40);
                let payload = c.bytes(n).to_vec();
                let _ = tx.publish(now, "t/b", &payload, PublishOptions::default());
                if op & 0x10 != 0 {
                    tx.flush(now);
                }
            }
            8 => {
                let n = usize::from(c.u8().unwrap_or(0));
                let _ = tx.handle_nak(now, c.bytes(n));
            }
            9 => {
                let h = header(Kind::Nak, session, c.u8().unwrap_or(1).max(1).into(), u64_of(&mut c) % 32, 1, 0);
                let _ = tx.handle_nak(now, &h);
            }
            10 => {
                let h = header(Kind::Status, session, 0, u64_of(&mut c) % 32, u64_of(&mut c) % 4, 0);
                let _ = tx.handle_nak(now, &h);
            }
            _ => {}
        }
        while let Some(ev) = rx.poll_event() {
            match ev {
                Event::Message { index, .. } => {
                    assert!(index >= next_pos, "position {index} before {next_pos}");
                    next_pos = index + 1;
                }
                Event::Gap { first_msg, messages, .. } => {
                    assert!(first_msg >= next_pos, "gap at {first_msg} before {next_pos}");
                    next_pos = first_msg + messages;
                }
                Event::Joined { first_msg, .. } => next_pos = first_msg,
                Event::Recovered { .. } => {}
            }
        }
        let rx_session = rx.session();
        while let Some((_, d)) = rx.poll_transmit() {
            let d = packet::decode(d).expect("the receiver sends what decodes");
            assert!(matches!(d, Datagram::Nak { .. } | Datagram::Status { .. }));
            assert_eq!(Some(SessionId(d.session())), rx_session);
        }
        while let Some(d) = tx.poll_transmit() {
            let d = packet::decode(d).expect("the sender sends what decodes");
            assert!(matches!(d, Datagram::Data { .. } | Datagram::Heartbeat { .. }));
            assert_eq!(d.session(), 7);
        }
    }
});
