//! Feeds arbitrary bytes through FIX framing (`codec::frame_len`) into a real
//! `tickwire_fix::session::Session` (acceptor `TW`, counterparty `CP`, FIX.4.4, memory
//! store, fake clock), the way the FIX engine driver does.
//!
//! Input: a list of operations, each one opcode byte followed by its arguments:
//! raw bytes appended to the connection's receive buffer; a well-formed message
//! (valid BodyLength and CheckSum, the right CompIDs) of a fuzz-chosen type and
//! sequence number with fuzz-chosen extra fields, so the fuzzer gets past Logon and
//! into sequencing, resend, gap fill and reject handling; time passing (timers);
//! an application send; a disconnect and reconnect.
//!
//! Checks:
//! - nothing panics;
//! - the receive buffer stays bounded: `frame_len` never asks for more than
//!   `MAX_LEN`, and errors always skip at least one byte;
//! - every message the session sends parses with the checked parser (BodyLength,
//!   CheckSum, 8/9/35 first), carries 49=TW and 56=CP and a MsgSeqNum >= 1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_fix::codec::{self, frame_len, Encoder, Fields, TimestampPrecision};
use tickwire_fix::session::{Output, Role, Session, SessionConfig};
use tickwire_fix::store::MemoryStore;
use tickwire_rt::UtcNanos;

const NANOS: u64 = 1_000_000_000;
/// 2026-11-20 08:00:00 UTC.
const T0: u64 = 1_795_161_600 * NANOS;
const MAX_LEN: usize = 8192;
/// Message types a fuzz op can pick (admin ones and a couple of application ones).
const TYPES: [&[u8]; 10] = [b"A", b"0", b"1", b"2", b"3", b"4", b"5", b"D", b"8", b"j"];

#[path = "common/cursor.rs"]
mod cursor;
use cursor::Cursor;

struct World {
    s: Session<MemoryStore>,
    now: u64,
    rbuf: Vec<u8>,
    peer: Encoder,
    fields: Fields,
    connected: bool,
}

impl World {
    fn drain(&mut self) {
        while let Some(o) = self.s.poll_event() {
            match o {
                Output::Send(raw) => {
                    let m = codec::parse(raw, &mut self.fields).unwrap_or_else(|e| {
                        panic!(
                            "the session sent an invalid message {:?}: {e}",
                            String::from_utf8_lossy(raw)
                        )
                    });
                    assert_eq!(m.get(49), Some(&b"TW"[..]));
                    assert_eq!(m.get(56), Some(&b"CP"[..]));
                    assert!(m.seq_num().is_some_and(|n| n >= 1));
                }
                Output::Disconnect => {
                    self.connected = false;
                    self.rbuf.clear();
                }
                _ => {}
            }
        }
    }

    /// Appends bytes to the receive buffer and hands every complete frame to the
    /// session, as the engine's read path does.
    fn receive(&mut self, bytes: &[u8]) {
        if !self.connected {
            return;
        }
        self.rbuf.extend_from_slice(bytes);
        let mut start = 0;
        while start < self.rbuf.len() && self.connected {
            match frame_len(&self.rbuf[start..], MAX_LEN) {
                Ok(Some(n)) => {
                    assert!(n > 0 && n <= MAX_LEN && start + n <= self.rbuf.len());
                    let raw = self.rbuf[start..start + n].to_vec();
                    start += n;
                    self.s.handle_message(UtcNanos(self.now), &raw);
                    self.drain();
                }
                Ok(None) => break,
                Err(e) => {
                    let skip = e.skip();
                    assert!(skip >= 1 && start + skip <= self.rbuf.len());
                    start += skip;
                }
            }
        }
        if self.connected {
            self.rbuf.drain(..start);
            assert!(self.rbuf.len() < MAX_LEN + 64);
        }
    }

    fn step(&mut self, cur: &mut Cursor<'_>) -> Option<()> {
        let op = cur.u8()?;
        match op % 6 {
            0 => {
                let n = usize::from(cur.u8()?);
                let b = cur.bytes(n).to_vec();
                self.receive(&b);
            }
            1 | 2 => {
                let ty = TYPES[usize::from(cur.u8()?) % TYPES.len()];
                let seq = u64::from(cur.u8()?);
                let n = usize::from(cur.u8()? % 64);
                let extra = cur.bytes(n).to_vec();
                let p = &mut self.peer;
                p.begin(ty);
                p.field_u64(34, seq);
                p.field_str(49, "CP");
                p.field_timestamp(52, self.now, TimestampPrecision::Millis);
                p.field_str(56, "TW");
                if ty == b"A" {
                    p.field_u64(98, 0);
                    p.field_u64(108, 30);
                }
                // Extra fields: `tag=value` pairs from fuzz bytes (SOH-separated).
                p.raw_fields(&extra);
                if !extra.is_empty() && !extra.ends_with(b"\x01") {
                    p.raw_fields(b"\x01");
                }
                let raw = p.finish().to_vec();
                self.receive(&raw);
            }
            3 => {
                self.now += u64::from(cur.u8()?) * NANOS / 4;
                self.s.handle_timeout(UtcNanos(self.now));
                self.drain();
                let _ = self.s.poll_timeout();
            }
            4 => {
                // The application's body is trusted input (the session does not
                // re-validate it): a well-formed one, varying in content only.
                let id = cur.u8()?;
                let body = format!("11=ORD{id}\x0155=IBM\x0138={}\x01", u32::from(id) * 7);
                let _ = self.s.send_app(UtcNanos(self.now), b"D", body.as_bytes());
                self.drain();
            }
            _ => {
                self.s.handle_disconnected(UtcNanos(self.now));
                self.drain();
                self.rbuf.clear();
                self.s.handle_connected(UtcNanos(self.now));
                self.connected = true;
                self.drain();
            }
        }
        Some(())
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = SessionConfig::new("FIX.4.4", "TW", "CP", Role::Acceptor);
    let Ok(s) = Session::new(cfg, MemoryStore::new(T0)) else {
        panic!("the default acceptor configuration is valid");
    };
    let mut w = World {
        s,
        now: T0,
        rbuf: Vec::new(),
        peer: Encoder::new("FIX.4.4"),
        fields: Fields::default(),
        connected: false,
    };
    w.s.handle_connected(UtcNanos(w.now));
    w.connected = true;
    w.drain();
    let mut cur = Cursor(data);
    while w.step(&mut cur).is_some() {}
});
