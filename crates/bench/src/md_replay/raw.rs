//! The raw market-data floor of `tickwire bench md-replay --compare tickwire,raw`
//! (docs/benchmarking.md, "The raw market-data floor"): the replay's topology with
//! nothing of tickwire's on the path.
//!
//! | tickwire                                  | raw floor                                      |
//! |-------------------------------------------|------------------------------------------------|
//! | exchange (same thread, same schedule)     | the same exchange, the same session            |
//! | feed handler thread: MoldUDP64 → books → updates, a `write` per 8 datagrams and per loop turn | [`run_feed`]: MoldUDP64 → one frame per ITCH message (no books), the same writes |
//! | router child process                      | `tickwire bench fanout-relay --stamp` child (same CPU, same `--idle`) |
//! | N clients polled by one thread            | N [`RawSub`]s polled by one thread, same code ([`super::latency::run`]) |
//!
//! A frame's payload ([`encode`], [`decode`]) carries what the tickwire update and the
//! router's STAMPS block carry: `[publisher send][relay in][relay out][ITCH
//! timestamp][feed receive][MoldUDP64 sequence]` (u64 little-endian each) then the ITCH
//! message. The relay writes relay in and out, as the router does. Every ITCH message
//! is forwarded (the tickwire feed handler publishes about 0.76 updates per message in
//! the generated session), so the floor carries at least the tickwire path's load.
//! There is no gap recovery: a sequence gap is counted as lost.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::time::Duration;

use tickwire_capture::net::group_receiver;
use tickwire_itch::{MoldPacket, PacketKind};
use tickwire_rt::{IdleStrategy, MonoNanos, StopFlag};

use super::latency::{Delivery, Sample, Source};
use crate::fanout::raw::{RawPub, RawSub};
use crate::fanout::relay::STAMPS_LEN;

/// The one topic of the floor: every client subscribes to every update.
pub const TOPIC: u16 = 0;
/// Payload bytes before the ITCH message.
pub const FIXED_LEN: usize = STAMPS_LEN + 24;
/// Bytes of the ITCH timestamp (ns since midnight, big-endian) and where it starts.
const ITCH_TS: std::ops::Range<usize> = 5..11;
/// How long the relay connection queues before a write (the tickwire feed handler's
/// client batch): in practice a write per 8 datagrams and per loop turn.
const BATCH_BYTES: usize = 256 * 1024;

/// Appends the payload of one forwarded ITCH message to `out` (cleared first).
pub fn encode(
    out: &mut Vec<u8>,
    publisher_send: u64,
    exchange_ns: u64,
    receive_ns: u64,
    seq: u64,
    msg: &[u8],
) {
    out.clear();
    for v in [publisher_send, 0, 0, exchange_ns, receive_ns, seq] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(msg);
}

/// The sample a payload carries; `None` when it is shorter than [`FIXED_LEN`].
pub fn decode(payload: &[u8]) -> Option<Sample> {
    let fixed = payload.get(..FIXED_LEN)?;
    let w = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&fixed[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    Some(Sample {
        seq: w(5),
        exchange_ns: w(3),
        receive_ns: w(4),
        stamps: Some([w(0), w(1), w(2)]),
    })
}

impl Source for RawSub {
    fn drain(&mut self, mut f: impl FnMut(Delivery)) -> anyhow::Result<()> {
        self.poll(|_, payload| {
            f(Delivery {
                discarded: 0,
                sample: decode(payload),
            })
        })?;
        Ok(())
    }
}

/// Connects `n` subscribers to the relay at `relay` (non-blocking: [`super::latency::run`]
/// waits in `poll(2)`).
pub fn connect_clients(relay: SocketAddr, n: usize) -> anyhow::Result<Vec<RawSub>> {
    (0..n)
        .map(|i| {
            RawSub::connect(
                relay,
                &format!("raw md client {i}"),
                &[TOPIC],
                IdleStrategy::Spin,
                Duration::ZERO,
            )
        })
        .collect()
}

/// Settings of the raw feed thread.
#[derive(Debug, Clone)]
pub struct FeedOptions {
    pub group: SocketAddrV4,
    pub interface: Ipv4Addr,
    pub relay: SocketAddr,
    /// Spin (poll without sleeping) or block (`poll(2)` up to 1 ms), as the feed handler.
    pub idle: IdleStrategy,
}

/// What the raw feed thread saw.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FeedReport {
    pub packets: u64,
    /// ITCH messages forwarded (one frame each).
    pub published: u64,
    /// Messages skipped by a sequence gap (no recovery on the floor).
    pub lost: u64,
    /// Datagrams that were not MoldUDP64 or had a bad block.
    pub malformed: u64,
    pub end_of_session: bool,
}

/// Forwards every ITCH message of the group to the relay until End of Session or `stop`.
pub fn run_feed(opts: &FeedOptions, stop: &StopFlag) -> anyhow::Result<FeedReport> {
    let sock = group_receiver(opts.group, opts.interface)?;
    sock.set_nonblocking(true)?;
    let mut relay = RawPub::connect(opts.relay, "the raw feed", BATCH_BYTES)?;
    let mut buf = vec![0u8; 65_536];
    let mut payload = Vec::with_capacity(FIXED_LEN + 64 * 1024);
    let mut r = FeedReport::default();
    let mut next_seq: Option<u64> = None;
    while !r.end_of_session && !stop.is_set() {
        let mut got = 0usize;
        loop {
            // A write per FLUSH_EVERY_DATAGRAMS datagrams, as the feed handler does.
            if got > 0 && got % tickwire_md::handler::FLUSH_EVERY_DATAGRAMS == 0 {
                relay.flush()?;
            }
            let n = match sock.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(anyhow::anyhow!("receiving on {}: {e}", opts.group)),
            };
            let receive_ns = MonoNanos::now().as_nanos();
            got += 1;
            let Ok(p) = MoldPacket::parse(&buf[..n]) else {
                r.malformed += 1;
                continue;
            };
            match p.kind() {
                PacketKind::EndOfSession => r.end_of_session = true,
                PacketKind::Heartbeat => {}
                PacketKind::Messages => {
                    r.packets += 1;
                    let expected = *next_seq.get_or_insert(p.sequence());
                    if p.sequence() < expected {
                        continue; // a duplicate
                    }
                    r.lost += p.sequence() - expected;
                    next_seq = Some(p.next_sequence());
                    for block in p.messages() {
                        let Ok(b) = block else {
                            r.malformed += 1;
                            break;
                        };
                        let exchange_ns = b.data.get(ITCH_TS).map_or(0, |t| {
                            let mut w = [0u8; 8];
                            w[2..].copy_from_slice(t);
                            u64::from_be_bytes(w)
                        });
                        let send = MonoNanos::now().as_nanos();
                        encode(
                            &mut payload,
                            send,
                            exchange_ns,
                            receive_ns,
                            b.sequence,
                            b.data,
                        );
                        relay.send(TOPIC, &payload)?;
                        r.published += 1;
                    }
                }
            }
        }
        // The turn's last write.
        relay.flush()?;
        if got == 0 && opts.idle == IdleStrategy::Block {
            let fd = sock.as_fd();
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        }
    }
    relay.close()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_payload_carries_the_stamps_the_relay_fills_in() {
        let mut out = Vec::new();
        encode(&mut out, 11, 22, 33, 44, b"A-itch");
        assert_eq!(out.len(), FIXED_LEN + 6);
        // The relay writes in and out at the offsets it documents.
        out[8..16].copy_from_slice(&55u64.to_le_bytes());
        out[16..24].copy_from_slice(&66u64.to_le_bytes());
        let s = decode(&out).unwrap();
        assert_eq!(
            (s.stamps, s.exchange_ns, s.receive_ns, s.seq),
            (Some([11, 55, 66]), 22, 33, 44)
        );
        assert_eq!(decode(&out[..FIXED_LEN - 1]), None);
    }

    proptest! {
        /// Any bytes decode to a sample or to None, never a panic; a sample only from
        /// at least FIXED_LEN bytes, and encoding round-trips.
        #[test]
        fn decode_is_total_and_round_trips(
            bytes in prop::collection::vec(any::<u8>(), 0..200),
            v in any::<[u64; 4]>(),
        ) {
            prop_assert_eq!(decode(&bytes).is_some(), bytes.len() >= FIXED_LEN);
            let mut out = Vec::new();
            encode(&mut out, v[0], v[1], v[2], v[3], &bytes);
            let s = decode(&out).unwrap();
            prop_assert_eq!((s.stamps, s.exchange_ns, s.receive_ns, s.seq), (Some([v[0], 0, 0]), v[1], v[2], v[3]));
        }
    }
}
