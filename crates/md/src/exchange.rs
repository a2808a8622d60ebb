//! The exchange side of a MoldUDP64 feed, pure: a session file in memory, packets cut
//! on a schedule, and answers to re-requests (no sockets, no clock).
//!
//! [`SessionData`] holds a whole ITCH session (the file format of
//! [`crate::generator::write_session`]: each message preceded by its 2-byte big-endian
//! length) as one arena; message `seq` (1-based, as MoldUDP64 numbers them) is a slice
//! of it. [`Exchange`] cuts that sequence into downstream packets: one packet carries the
//! next due message plus every following message already due (so a burst shares
//! packets, a quiet feed sends one message per packet), up to the packet size. Answers
//! to re-requests come from the same arena, so retransmitted bytes are identical to the
//! originals.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use tickwire_itch::{BuildError, PacketBuilder, RetransmitRequest, Session};

/// Offset of the 6-byte ITCH timestamp inside every message (type, locate, tracking).
pub const TIMESTAMP_OFFSET: usize = 5;
/// Length of an ITCH message's common header (type + locate + tracking + timestamp).
pub const ITCH_HEADER_LEN: usize = 11;

/// Why a session file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("session file truncated at byte {offset}: message {index} needs {needed} bytes, {have} left")]
    Truncated {
        offset: usize,
        index: u64,
        needed: usize,
        have: usize,
    },
    #[error(
        "message {index} at byte {offset} is {len} bytes, shorter than the 11-byte ITCH header"
    )]
    TooShort {
        offset: usize,
        index: u64,
        len: usize,
    },
    #[error("session file holds no messages")]
    Empty,
    /// The first message does not look like ITCH: likely another kind of file.
    #[error(
        "not an ITCH 5.0 session file: {why} (expected a 2-byte big-endian length before \
         each ITCH message, as `tickwire md generate` writes)"
    )]
    NotItch { why: String },
}

/// ITCH 5.0 message types (the first byte of every message).
const ITCH_TYPES: &[u8] = b"SRHYLVWKJhAFECXDUPQBINO";

/// A whole ITCH session in memory, messages numbered from 1.
#[derive(Debug, Clone, Default)]
pub struct SessionData {
    arena: Vec<u8>,
    /// Start of message `i + 1` in `arena`; one extra entry marks the end.
    starts: Vec<usize>,
}

impl SessionData {
    /// Parses a session file's bytes (2-byte big-endian length + message, repeated).
    pub fn from_file_bytes(bytes: &[u8]) -> Result<SessionData, SessionError> {
        let mut arena = Vec::with_capacity(bytes.len());
        let mut starts = Vec::with_capacity(bytes.len() / 30 + 1);
        let mut at = 0usize;
        let mut index = 1u64;
        while at < bytes.len() {
            let Some(len) = bytes.get(at..at + 2) else {
                return Err(SessionError::Truncated {
                    offset: at,
                    index,
                    needed: 2,
                    have: bytes.len() - at,
                });
            };
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            // The first message tells a session file from any other file.
            if index == 1 {
                if let Some(&kind) = bytes.get(at + 2) {
                    if !ITCH_TYPES.contains(&kind) {
                        return Err(SessionError::NotItch {
                            why: format!("its first message type would be {:?}", kind as char),
                        });
                    }
                }
                if bytes.len() - at - 2 < len {
                    return Err(SessionError::NotItch {
                        why: format!(
                            "its first length field says {len} bytes, the file holds {}",
                            bytes.len()
                        ),
                    });
                }
            }
            let body = bytes
                .get(at + 2..at + 2 + len)
                .ok_or(SessionError::Truncated {
                    offset: at,
                    index,
                    needed: len,
                    have: bytes.len() - at - 2,
                })?;
            if len < ITCH_HEADER_LEN {
                return Err(SessionError::TooShort {
                    offset: at,
                    index,
                    len,
                });
            }
            starts.push(arena.len());
            arena.extend_from_slice(body);
            at += 2 + len;
            index += 1;
        }
        if starts.is_empty() {
            return Err(SessionError::Empty);
        }
        starts.push(arena.len());
        Ok(SessionData { arena, starts })
    }

    /// Number of messages.
    pub fn len(&self) -> u64 {
        self.starts.len().saturating_sub(1) as u64
    }

    /// The longest message: (its sequence number, its length); `None` when empty.
    pub fn longest(&self) -> Option<(u64, usize)> {
        self.starts
            .windows(2)
            .enumerate()
            .map(|(i, w)| (i as u64 + 1, w[1] - w[0]))
            .max_by_key(|&(seq, len)| (len, std::cmp::Reverse(seq)))
    }

    /// True when there are no messages.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Message `seq` (1-based); `None` outside `1..=len`.
    pub fn message(&self, seq: u64) -> Option<&[u8]> {
        let i = usize::try_from(seq.checked_sub(1)?).ok()?;
        let (a, b) = (*self.starts.get(i)?, *self.starts.get(i + 1)?);
        Some(&self.arena[a..b])
    }

    /// The ITCH timestamp (ns since midnight) of message `seq`.
    pub fn timestamp(&self, seq: u64) -> Option<u64> {
        let m = self.message(seq)?;
        let t = &m[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 6];
        Some(t.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    /// Rewrites message `seq`'s ITCH timestamp (e.g. to the time it is actually sent, so
    /// that exchange-to-feed-handler latency can be measured on one host).
    pub fn restamp(&mut self, seq: u64, ns_since_midnight: u64) {
        if let Some(i) = seq.checked_sub(1).and_then(|i| usize::try_from(i).ok()) {
            if let Some(&a) = self.starts.get(i) {
                let b = ns_since_midnight.to_be_bytes();
                self.arena[a + TIMESTAMP_OFFSET..a + TIMESTAMP_OFFSET + 6]
                    .copy_from_slice(&b[2..8]);
            }
        }
    }
}

/// Cuts a session into MoldUDP64 packets and answers re-requests.
#[derive(Debug)]
pub struct Exchange {
    session: Session,
    next: u64,
    packet: PacketBuilder,
    max_packet: usize,
}

impl Exchange {
    /// An exchange that will send message 1 first, in packets of at most `max_packet`
    /// bytes (MoldUDP64 header included).
    pub fn new(session: Session, max_packet: usize) -> Exchange {
        Exchange {
            session,
            next: 1,
            packet: PacketBuilder::new(session, 1, max_packet),
            max_packet,
        }
    }

    /// The MoldUDP64 session name.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Sequence number of the next message to send.
    pub fn next_sequence(&self) -> u64 {
        self.next
    }

    /// True once every message of `data` was sent.
    pub fn done(&self, data: &SessionData) -> bool {
        self.next > data.len()
    }

    /// The next downstream packet: message `next` plus the following messages for which
    /// `due(seq)` is true, as many as fit. `None` when everything was sent.
    pub fn next_packet(
        &mut self,
        data: &SessionData,
        mut due: impl FnMut(u64) -> bool,
    ) -> Option<&[u8]> {
        if self.done(data) {
            return None;
        }
        self.packet.reset(self.next);
        let mut seq = self.next;
        while let Some(m) = data.message(seq) {
            if seq != self.next && !due(seq) {
                break;
            }
            match self.packet.push(m) {
                Ok(_) => seq += 1,
                Err(BuildError::Full) => break,
                // A message longer than a packet can carry: skip it rather than stall
                // the feed (cannot happen with ITCH, whose longest message is 50 bytes).
                Err(_) => seq += 1,
            }
        }
        self.next = seq;
        Some(self.packet.finish())
    }

    /// As [`Exchange::next_packet`], rewriting the ITCH timestamp of each message that
    /// goes into the packet to `stamp(seq, recorded_timestamp)` first (e.g. its
    /// scheduled send time, so one host can measure exchange-to-feed-handler latency).
    /// Messages left for a later packet keep their recorded timestamps.
    pub fn next_packet_restamped(
        &mut self,
        data: &mut SessionData,
        mut due: impl FnMut(u64) -> bool,
        mut stamp: impl FnMut(u64, u64) -> u64,
    ) -> Option<&[u8]> {
        if self.done(data) {
            return None;
        }
        self.packet.reset(self.next);
        let mut seq = self.next;
        while let Some(recorded) = data.timestamp(seq) {
            if seq != self.next && !due(seq) {
                break;
            }
            data.restamp(seq, stamp(seq, recorded));
            let Some(m) = data.message(seq) else { break };
            match self.packet.push(m) {
                Ok(_) => seq += 1,
                Err(BuildError::Full) => {
                    data.restamp(seq, recorded);
                    break;
                }
                Err(_) => seq += 1,
            }
        }
        self.next = seq;
        Some(self.packet.finish())
    }

    /// A heartbeat announcing the next sequence number.
    pub fn heartbeat(&self) -> [u8; 20] {
        PacketBuilder::new(self.session, self.next, self.max_packet).heartbeat()
    }

    /// An End of Session packet.
    pub fn end_of_session(&self) -> [u8; 20] {
        PacketBuilder::new(self.session, self.next, self.max_packet).end_of_session()
    }

    /// The answer to a re-request: the requested messages that were already sent, from
    /// the first requested, as many as fit in one packet, into `out`. `None` when the
    /// request is for another session or for nothing that was sent yet.
    pub fn answer<'a>(
        &self,
        data: &SessionData,
        req: &RetransmitRequest,
        out: &'a mut PacketBuilder,
    ) -> Option<&'a [u8]> {
        if req.session != self.session
            || req.sequence == 0
            || req.sequence >= self.next
            || req.count == 0
        {
            return None;
        }
        out.reset(req.sequence);
        let end = req
            .sequence
            .saturating_add(u64::from(req.count))
            .min(self.next);
        for seq in req.sequence..end {
            let Some(m) = data.message(seq) else { break };
            if out.push(m).is_err() {
                break;
            }
        }
        Some(out.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_itch::MoldPacket;

    fn session_file(n: u64) -> Vec<u8> {
        let mut f = Vec::new();
        for i in 0..n {
            let mut m = vec![b'D'; 19];
            m[5..11].copy_from_slice(&(i * 1000).to_be_bytes()[2..]);
            m[11..19].copy_from_slice(&i.to_be_bytes());
            f.extend_from_slice(&19u16.to_be_bytes());
            f.extend_from_slice(&m);
        }
        f
    }

    fn seqs(p: &[u8]) -> Vec<u64> {
        MoldPacket::parse(p)
            .unwrap()
            .messages()
            .map(|b| b.unwrap().sequence)
            .collect()
    }

    #[test]
    fn session_file_round_trip_and_errors() {
        let data = SessionData::from_file_bytes(&session_file(5)).unwrap();
        assert_eq!(data.len(), 5);
        assert_eq!(data.timestamp(3), Some(2000));
        assert_eq!(data.message(0), None);
        assert_eq!(data.message(6), None);
        let mut d2 = data.clone();
        d2.restamp(2, 0x0102_0304_0506);
        assert_eq!(d2.timestamp(2), Some(0x0102_0304_0506));
        let f = session_file(2);
        assert!(matches!(
            SessionData::from_file_bytes(&f[..f.len() - 1]),
            Err(SessionError::Truncated { index: 2, .. })
        ));
        assert_eq!(
            SessionData::from_file_bytes(&[]).unwrap_err(),
            SessionError::Empty
        );
        assert!(matches!(
            SessionData::from_file_bytes(&[0, 3, b'S', 2, 3]),
            Err(SessionError::TooShort { .. })
        ));
        // Another kind of file says so, not "truncated" (a text file's first two bytes
        // read as a length of ~20 KB).
        let text = SessionData::from_file_bytes(b"Usage: tickwire md publish [OPTIONS]\n")
            .unwrap_err()
            .to_string();
        assert!(text.starts_with("not an ITCH 5.0 session file"), "{text}");
        let cut = SessionData::from_file_bytes(&[0, 40, b'S', 0, 0]).unwrap_err();
        assert!(matches!(cut, SessionError::NotItch { .. }), "{cut}");
    }

    /// Regression: the replay publisher restamped every due message before cutting the
    /// packet, so the messages a full packet left behind went out later with a stamp
    /// their schedule had been recomputed from, as early as the session's start (md-replay
    /// showed exchange→FH latencies as long as the whole run).
    #[test]
    fn restamping_touches_only_the_messages_a_packet_carries() {
        let mut data = SessionData::from_file_bytes(&session_file(20)).unwrap();
        let mut ex = Exchange::new(Session::new("TEST").unwrap(), 20 + 5 * 21);
        let mut stamped = Vec::new();
        let p = ex
            .next_packet_restamped(
                &mut data,
                |_| true,
                |seq, recorded| {
                    stamped.push((seq, recorded));
                    7_000_000 + seq
                },
            )
            .unwrap();
        assert_eq!(seqs(p), vec![1, 2, 3, 4, 5]);
        // The sixth was offered, did not fit, and got its recorded stamp back.
        assert_eq!(stamped.len(), 6);
        assert_eq!(stamped[5], (6, 5000));
        for seq in 1..=5 {
            assert_eq!(data.timestamp(seq), Some(7_000_000 + seq));
        }
        for seq in 6..=20 {
            assert_eq!(data.timestamp(seq), Some((seq - 1) * 1000), "message {seq}");
        }
        // The next packet starts at 6 and stamps it from its recorded time.
        let mut recorded = Vec::new();
        let p = ex
            .next_packet_restamped(
                &mut data,
                |_| false,
                |seq, r| {
                    recorded.push((seq, r));
                    r + 1
                },
            )
            .unwrap();
        assert_eq!(seqs(p), vec![6]);
        assert_eq!(recorded, vec![(6, 5000)]);
        assert_eq!(data.timestamp(6), Some(5001));
    }

    #[test]
    fn packets_carry_due_messages_in_sequence_and_respect_the_size() {
        let data = SessionData::from_file_bytes(&session_file(200)).unwrap();
        let mut ex = Exchange::new(Session::new("TEST").unwrap(), 20 + 5 * 21);
        // Nothing else due: one message per packet.
        assert_eq!(seqs(ex.next_packet(&data, |_| false).unwrap()), vec![1]);
        // Everything due: five per packet (the size limit).
        assert_eq!(
            seqs(ex.next_packet(&data, |_| true).unwrap()),
            vec![2, 3, 4, 5, 6]
        );
        let mut all = vec![1, 2, 3, 4, 5, 6];
        while let Some(p) = ex.next_packet(&data, |s| s % 3 != 0) {
            all.extend(seqs(p));
        }
        assert_eq!(all, (1..=200).collect::<Vec<_>>());
        assert!(ex.done(&data));
        let hb = ex.heartbeat();
        assert_eq!(MoldPacket::parse(&hb).unwrap().sequence(), 201);
    }

    #[test]
    fn answers_rerequests_with_the_original_bytes() {
        let data = SessionData::from_file_bytes(&session_file(50)).unwrap();
        let session = Session::new("TEST").unwrap();
        let mut ex = Exchange::new(session, 1400);
        let mut sent = Vec::new();
        while ex.next_sequence() <= 30 {
            sent.push(ex.next_packet(&data, |_| false).unwrap().to_vec());
        }
        let mut out = PacketBuilder::new(session, 1, 1400);
        let req = RetransmitRequest {
            session,
            sequence: 10,
            count: 5,
        };
        let p = ex.answer(&data, &req, &mut out).unwrap().to_vec();
        assert_eq!(seqs(&p), vec![10, 11, 12, 13, 14]);
        let orig = MoldPacket::parse(&sent[9])
            .unwrap()
            .messages()
            .next()
            .unwrap()
            .unwrap()
            .data
            .to_vec();
        assert_eq!(
            MoldPacket::parse(&p)
                .unwrap()
                .messages()
                .next()
                .unwrap()
                .unwrap()
                .data,
            &orig[..]
        );
        // Clamped to what was sent; nothing for unsent, other sessions, or zero counts.
        let req = RetransmitRequest {
            session,
            sequence: 29,
            count: 100,
        };
        assert_eq!(
            seqs(ex.answer(&data, &req, &mut out).unwrap()),
            vec![29, 30]
        );
        assert!(ex
            .answer(
                &data,
                &RetransmitRequest {
                    session,
                    sequence: 31,
                    count: 1
                },
                &mut out
            )
            .is_none());
        let other = Session::new("OTHER").unwrap();
        assert!(ex
            .answer(
                &data,
                &RetransmitRequest {
                    session: other,
                    sequence: 1,
                    count: 1
                },
                &mut out
            )
            .is_none());
        assert!(ex
            .answer(
                &data,
                &RetransmitRequest {
                    session,
                    sequence: 1,
                    count: 0
                },
                &mut out
            )
            .is_none());
    }
}
