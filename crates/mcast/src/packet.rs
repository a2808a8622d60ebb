//! The datagram layout (docs/multicast.md §2): a 40-byte header, then, in DATA, whole
//! wire PUBLISH frames. Little-endian like the wire protocol.
//!
//! ```text
//! off  size  field
//!  0    4    magic "TWMC"
//!  4    1    version (1)
//!  5    1    kind: 1 DATA, 2 HEARTBEAT, 3 NAK, 4 STATUS
//!  6    1    flags: bit 0 RETRANSMIT (DATA only); others must be 0
//!  7    1    reserved, 0
//!  8    4    session id (chosen by the sender at start)
//! 12    2    count: DATA: frames in the datagram (>= 1); NAK: datagrams asked (>= 1); else 0
//! 14    2    reserved, 0
//! 16    8    a: DATA: this datagram's sequence; HEARTBEAT: the next datagram sequence;
//!            NAK: first datagram asked; STATUS: the receiver's next expected datagram
//! 24    8    b: DATA: index of its first message; HEARTBEAT: the next message index;
//!            NAK, STATUS: the receiver's id
//! 32    8    c: DATA, HEARTBEAT: the oldest datagram the sender still retains;
//!            NAK: 0; STATUS: messages the receiver delivered in this session
//! 40   ...   DATA: `count` PUBLISH frames (crates/wire), nothing after the last
//! ```
//!
//! Sequences, message indexes, low marks and counts of delivered messages are below
//! [`MAX_SEQ`] (2^62); the next sequence (HEARTBEAT's and STATUS's `a`) is at most
//! [`MAX_SEQ`], the position after the last sequence.
//!
//! [`decode`] is a bounded flyweight: it reads only the given bytes, allocates nothing,
//! and checks every DATA frame (length, kind, structure) before anything is believed.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use tickwire_wire::frame::{self, Frame, Msg};

/// The first four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"TWMC";
/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;
/// Header length, every kind.
pub const HEADER_LEN: usize = 40;
/// The largest UDP payload over IPv4; no datagram is longer.
pub const MAX_DATAGRAM: usize = 65_507;
/// The smallest `max_datagram` a sender may be configured with.
pub const MIN_DATAGRAM: usize = 256;
/// Sequences, message indexes and low marks are below this (2^62: a sender at 10^8
/// datagrams a second reaches it in 1,400 years); larger ones are refused, so no sum a
/// core makes with them can overflow.
pub const MAX_SEQ: u64 = 1 << 62;
/// Flag of a DATA datagram sent again after a NAK.
pub const FLAG_RETRANSMIT: u8 = 1;

/// What a datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Sender → group: sequenced frames.
    Data = 1,
    /// Sender → group: the sender's position while idle (reveals tail loss).
    Heartbeat = 2,
    /// Receiver → sender (unicast): send these datagrams again.
    Nak = 3,
    /// Receiver → sender (unicast): how far this receiver is (flow report).
    Status = 4,
}

/// A decoded datagram, borrowing the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// Sequenced frames.
    Data {
        session: u32,
        retransmit: bool,
        seq: u64,
        first_msg: u64,
        count: u16,
        low: u64,
        /// `count` complete PUBLISH frames, already checked.
        frames: &'a [u8],
    },
    /// The sender's position: every datagram below `next` was sent.
    Heartbeat {
        session: u32,
        next: u64,
        next_msg: u64,
        low: u64,
    },
    /// A request for datagrams `from .. from + count`.
    Nak {
        session: u32,
        from: u64,
        count: u16,
        receiver: u64,
    },
    /// A receiver's progress.
    Status {
        session: u32,
        expected: u64,
        receiver: u64,
        delivered: u64,
    },
}

impl Datagram<'_> {
    /// The session id it carries.
    pub fn session(&self) -> u32 {
        match *self {
            Datagram::Data { session, .. }
            | Datagram::Heartbeat { session, .. }
            | Datagram::Nak { session, .. }
            | Datagram::Status { session, .. } => session,
        }
    }
}

/// Why a datagram was refused. Counted by the cores, never fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than the header or longer than [`MAX_DATAGRAM`].
    #[error("datagram of {0} bytes (header is 40, maximum 65507)")]
    BadLength(usize),
    /// Not ours: the magic is wrong.
    #[error("not a tickwire multicast datagram (bad magic)")]
    BadMagic,
    /// A version this crate does not speak.
    #[error("unsupported version {0}")]
    BadVersion(u8),
    /// An unknown kind byte.
    #[error("unknown kind {0}")]
    UnknownKind(u8),
    /// Reserved bits or fields not zero, or a count impossible for the kind.
    #[error("malformed {0} header")]
    BadHeader(&'static str),
    /// A DATA body that is not exactly `count` well-formed PUBLISH frames.
    #[error("malformed DATA body: {0}")]
    BadBody(&'static str),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Decodes one datagram. Never panics, never allocates; reads only `buf`.
pub fn decode(buf: &[u8]) -> Result<Datagram<'_>, DecodeError> {
    if buf.len() < HEADER_LEN || buf.len() > MAX_DATAGRAM {
        return Err(DecodeError::BadLength(buf.len()));
    }
    if buf[0..4] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if buf[4] != VERSION {
        return Err(DecodeError::BadVersion(buf[4]));
    }
    let fl = buf[6];
    if buf[7] != 0 || u16_at(buf, 14) != 0 {
        return Err(DecodeError::BadHeader("reserved"));
    }
    let session = u32_at(buf, 8);
    let count = u16_at(buf, 12);
    let (a, b, c) = (u64_at(buf, 16), u64_at(buf, 24), u64_at(buf, 32));
    let body = &buf[HEADER_LEN..];
    // NAK and STATUS carry the receiver's (random) id in `b`.
    let b_is_seq = matches!(buf[5], 1 | 2);
    // HEARTBEAT's and STATUS's `a` is the next sequence: after the last one a sender
    // may use (MAX_SEQ - 1), that is MAX_SEQ itself.
    let a_max = match buf[5] {
        2 | 4 => MAX_SEQ,
        _ => MAX_SEQ - 1,
    };
    if a > a_max || c >= MAX_SEQ || (b_is_seq && b >= MAX_SEQ) {
        return Err(DecodeError::BadHeader("sequence out of range"));
    }
    match buf[5] {
        1 => {
            if fl & !FLAG_RETRANSMIT != 0 {
                return Err(DecodeError::BadHeader("DATA flags"));
            }
            if count == 0 {
                return Err(DecodeError::BadHeader("DATA count"));
            }
            if a < c {
                // A datagram older than the oldest one retained cannot be sent.
                return Err(DecodeError::BadHeader("DATA below its own low mark"));
            }
            check_frames(body, count)?;
            Ok(Datagram::Data {
                session,
                retransmit: fl & FLAG_RETRANSMIT != 0,
                seq: a,
                first_msg: b,
                count,
                low: c,
                frames: body,
            })
        }
        2 => {
            control_checks(fl, count == 0, body, "HEARTBEAT")?;
            if a < c {
                return Err(DecodeError::BadHeader("HEARTBEAT low above next"));
            }
            Ok(Datagram::Heartbeat {
                session,
                next: a,
                next_msg: b,
                low: c,
            })
        }
        3 => {
            control_checks(fl, count > 0 && c == 0, body, "NAK")?;
            Ok(Datagram::Nak {
                session,
                from: a,
                count,
                receiver: b,
            })
        }
        4 => {
            control_checks(fl, count == 0, body, "STATUS")?;
            Ok(Datagram::Status {
                session,
                expected: a,
                receiver: b,
                delivered: c,
            })
        }
        k => Err(DecodeError::UnknownKind(k)),
    }
}

fn control_checks(fl: u8, ok: bool, body: &[u8], what: &'static str) -> Result<(), DecodeError> {
    if fl != 0 || !ok || !body.is_empty() {
        return Err(DecodeError::BadHeader(what));
    }
    Ok(())
}

/// `body` must be exactly `count` complete PUBLISH frames.
fn check_frames(mut body: &[u8], count: u16) -> Result<(), DecodeError> {
    for _ in 0..count {
        match frame::decode(body, MAX_DATAGRAM as u32) {
            Ok(Some((Frame::Publish(m), n))) => {
                if tickwire_wire::topic::validate_topic(m.topic).is_err() {
                    return Err(DecodeError::BadBody("invalid topic"));
                }
                body = &body[n..];
            }
            Ok(Some(_)) => return Err(DecodeError::BadBody("a frame that is not PUBLISH")),
            Ok(None) => return Err(DecodeError::BadBody("truncated frame")),
            Err(_) => return Err(DecodeError::BadBody("undecodable frame")),
        }
    }
    if !body.is_empty() {
        return Err(DecodeError::BadBody("bytes after the last frame"));
    }
    Ok(())
}

/// Iterates the frames of a DATA body that [`decode`] accepted.
pub fn frames(body: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    let mut rest = body;
    std::iter::from_fn(move || match frame::decode(rest, MAX_DATAGRAM as u32) {
        Ok(Some((Frame::Publish(m), n))) => {
            rest = &rest[n..];
            Some(m)
        }
        _ => None,
    })
}

/// Header fields, for [`write_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub session: u32,
    pub count: u16,
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

/// Writes a header into `out[..HEADER_LEN]` (`out` must be at least that long).
pub fn write_header(out: &mut [u8], h: Header) {
    out[0..4].copy_from_slice(&MAGIC);
    out[4] = VERSION;
    out[5] = h.kind as u8;
    out[6] = h.flags;
    out[7] = 0;
    out[8..12].copy_from_slice(&h.session.to_le_bytes());
    out[12..14].copy_from_slice(&h.count.to_le_bytes());
    out[14..16].copy_from_slice(&[0, 0]);
    out[16..24].copy_from_slice(&h.a.to_le_bytes());
    out[24..32].copy_from_slice(&h.b.to_le_bytes());
    out[32..40].copy_from_slice(&h.c.to_le_bytes());
}

/// Patches a stored DATA datagram for a retransmission: the flag and the current low mark.
pub(crate) fn mark_retransmit(datagram: &mut [u8], low: u64) {
    datagram[6] = FLAG_RETRANSMIT;
    datagram[32..40].copy_from_slice(&low.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::frame::{encode_publish, PublishOptions};

    fn data(frames: &[(&str, &[u8])], seq: u64, low: u64) -> Vec<u8> {
        let mut out = vec![0; HEADER_LEN];
        for (t, p) in frames {
            encode_publish(&mut out, t, p, PublishOptions::default(), 1 << 20).unwrap();
        }
        write_header(
            &mut out,
            Header {
                kind: Kind::Data,
                flags: 0,
                session: 7,
                count: frames.len() as u16,
                a: seq,
                b: 100,
                c: low,
            },
        );
        out
    }

    #[test]
    fn data_round_trips_and_lists_its_frames() {
        let d = data(&[("a/b", b"x"), ("c", b"yy")], 5, 2);
        let Datagram::Data {
            session,
            seq,
            first_msg,
            count,
            low,
            frames: body,
            retransmit,
        } = decode(&d).unwrap()
        else {
            panic!("not data")
        };
        assert_eq!(
            (session, seq, first_msg, count, low, retransmit),
            (7, 5, 100, 2, 2, false)
        );
        let got: Vec<_> = frames(body).map(|m| (m.topic, m.payload)).collect();
        assert_eq!(got, vec![(&b"a/b"[..], &b"x"[..]), (&b"c"[..], &b"yy"[..])]);
    }

    #[test]
    fn data_with_a_wrong_count_or_trailing_bytes_is_refused() {
        let mut d = data(&[("a", b"x")], 1, 0);
        d[12] = 2;
        assert_eq!(decode(&d), Err(DecodeError::BadBody("truncated frame")));
        let mut d = data(&[("a", b"x")], 1, 0);
        d.push(0);
        assert_eq!(
            decode(&d),
            Err(DecodeError::BadBody("bytes after the last frame"))
        );
        let d = data(&[("a//b", b"x")], 1, 0);
        assert_eq!(decode(&d), Err(DecodeError::BadBody("invalid topic")));
    }

    #[test]
    fn headers_are_checked_before_anything_is_believed() {
        let good = data(&[("a", b"x")], 1, 0);
        assert_eq!(decode(&good[..39]), Err(DecodeError::BadLength(39)));
        let mut d = good.clone();
        d[0] = b'X';
        assert_eq!(decode(&d), Err(DecodeError::BadMagic));
        let mut d = good.clone();
        d[4] = 2;
        assert_eq!(decode(&d), Err(DecodeError::BadVersion(2)));
        let mut d = good.clone();
        d[5] = 9;
        assert_eq!(decode(&d), Err(DecodeError::UnknownKind(9)));
        let mut d = good.clone();
        d[6] = 2;
        assert_eq!(decode(&d), Err(DecodeError::BadHeader("DATA flags")));
        let mut d = good.clone();
        d[32] = 5; // low above seq
        assert!(decode(&d).is_err());
        let mut d = good.clone();
        d[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            decode(&d),
            Err(DecodeError::BadHeader("sequence out of range"))
        );
        let mut d = good;
        d[14] = 1;
        assert_eq!(decode(&d), Err(DecodeError::BadHeader("reserved")));
    }

    #[test]
    fn control_datagrams_round_trip() {
        let mut b = [0u8; HEADER_LEN];
        write_header(
            &mut b,
            Header {
                kind: Kind::Nak,
                flags: 0,
                session: 3,
                count: 4,
                a: 10,
                b: 99,
                c: 0,
            },
        );
        assert_eq!(
            decode(&b),
            Ok(Datagram::Nak {
                session: 3,
                from: 10,
                count: 4,
                receiver: 99
            })
        );
        b[12] = 0;
        b[13] = 0;
        assert_eq!(decode(&b), Err(DecodeError::BadHeader("NAK")));
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_never_panics_on_valid_headers(
            kind in 1u8..5, count in 0u16..4, body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)
        ) {
            let mut d = vec![0u8; HEADER_LEN];
            d[0..4].copy_from_slice(&MAGIC);
            d[4] = VERSION;
            d[5] = kind;
            d[12..14].copy_from_slice(&count.to_le_bytes());
            d.extend_from_slice(&body);
            if let Ok(Datagram::Data { frames: f, count, .. }) = decode(&d) {
                proptest::prop_assert_eq!(frames(f).count(), count as usize);
            }
        }
    }
}
