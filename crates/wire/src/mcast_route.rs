//! MCAST_ROUTE (0x08, router → client): topic resolution for reliable multicast
//! (docs/protocol.md §4.11, docs/multicast.md §10).
//!
//! A router whose configuration sends some topics by multicast tells a client that
//! offered [`crate::frame::caps::MCAST`] in its HELLO, once per multicast stream and
//! before its WELCOME, which group carries which topics and where the client's part of
//! the stream starts. Body (after the 8-byte header):
//!
//! | off | size | field |
//! |---|---|---|
//! | 8 | 4 | group: IPv4 address, in address order (239.255.74.1 is `ef ff 4a 01`) |
//! | 12 | 2 | port (`u16`, not 0) |
//! | 14 | 2 | reserved, 0 |
//! | 16 | 4 | session id of the stream (`u32`) |
//! | 20 | 4 | reserved, 0 |
//! | 24 | 8 | start_seq: the stream's next datagram sequence (below 2^62) |
//! | 32 | 8 | start_msg: the stream's next message index (below 2^62) |
//! | 40 | … | 1 to [`MAX_ROUTE_PATTERNS`] patterns, each a `u8` length then a valid pattern; nothing after the last |
//!
//! Decoding is bounded and allocation-free: every length is checked against the frame,
//! every pattern with [`crate::topic::validate_pattern`], the group must be a
//! multicast address.

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::topic::validate_pattern;

/// Most patterns one MCAST_ROUTE carries.
pub const MAX_ROUTE_PATTERNS: usize = 32;
/// Fixed part of the body.
pub const ROUTE_FIXED_LEN: usize = 32;
/// Sequences and message indexes are below this (as in the multicast datagrams).
pub const MAX_POSITION: u64 = 1 << 62;

/// A decoded MCAST_ROUTE: a flyweight over the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McastRoute<'a> {
    /// The multicast group and port the stream is sent to.
    pub group: SocketAddrV4,
    /// The stream's session id (a receiver accepts only this one).
    pub session: u32,
    /// The stream's next datagram sequence when the route was sent.
    pub start_seq: u64,
    /// The stream's next message index when the route was sent.
    pub start_msg: u64,
    /// The patterns, validated: `u8` length, bytes, repeated.
    patterns: &'a [u8],
}

impl<'a> McastRoute<'a> {
    /// The topics the stream carries, as patterns (each valid; at least one).
    pub fn patterns(&self) -> impl Iterator<Item = &'a str> + 'a {
        let mut rest = self.patterns;
        std::iter::from_fn(move || {
            let (&len, tail) = rest.split_first()?;
            let (p, tail) = tail.split_at_checked(usize::from(len))?;
            rest = tail;
            // Validated at decode; an invalid one cannot be here.
            validate_pattern(p).ok()
        })
    }
}

/// Decodes the body (the frame without its 8-byte header).
pub(crate) fn decode_body(body: &[u8]) -> Result<McastRoute<'_>, &'static str> {
    let Some((fixed, patterns)) = body.split_at_checked(ROUTE_FIXED_LEN) else {
        return Err("body shorter than its fixed fields");
    };
    let u16_at = |o: usize| u16::from_le_bytes([fixed[o], fixed[o + 1]]);
    let u32_at =
        |o: usize| u32::from_le_bytes([fixed[o], fixed[o + 1], fixed[o + 2], fixed[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&fixed[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let ip = Ipv4Addr::new(fixed[0], fixed[1], fixed[2], fixed[3]);
    if !ip.is_multicast() {
        return Err("group is not a multicast address");
    }
    let port = u16_at(4);
    if port == 0 {
        return Err("group port is 0");
    }
    if u16_at(6) != 0 || u32_at(12) != 0 {
        return Err("reserved field is not zero");
    }
    let (start_seq, start_msg) = (u64_at(16), u64_at(24));
    if start_seq >= MAX_POSITION || start_msg >= MAX_POSITION {
        return Err("start position at or above 2^62");
    }
    let mut rest = patterns;
    let mut count = 0;
    while let Some((&len, tail)) = rest.split_first() {
        let Some((p, tail)) = tail.split_at_checked(usize::from(len)) else {
            return Err("pattern length exceeds frame");
        };
        if validate_pattern(p).is_err() {
            return Err("invalid pattern");
        }
        count += 1;
        if count > MAX_ROUTE_PATTERNS {
            return Err("more than 32 patterns");
        }
        rest = tail;
    }
    if count == 0 {
        return Err("no pattern");
    }
    Ok(McastRoute {
        group: SocketAddrV4::new(ip, port),
        session: u32_at(8),
        start_seq,
        start_msg,
        patterns,
    })
}

/// Why an MCAST_ROUTE could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteEncodeError {
    /// The group is not a multicast address, or its port is 0.
    #[error("{0} is not a multicast group with a port")]
    Group(SocketAddrV4),
    /// No pattern, more than [`MAX_ROUTE_PATTERNS`], or one that is not valid.
    #[error("route patterns: {0}")]
    Patterns(String),
    /// A start position at or above 2^62.
    #[error("start position at or above 2^62")]
    Position,
}

/// Appends an MCAST_ROUTE.
pub fn encode_mcast_route<'p>(
    out: &mut Vec<u8>,
    group: SocketAddrV4,
    session: u32,
    start_seq: u64,
    start_msg: u64,
    patterns: impl IntoIterator<Item = &'p str>,
) -> Result<(), RouteEncodeError> {
    if !group.ip().is_multicast() || group.port() == 0 {
        return Err(RouteEncodeError::Group(group));
    }
    if start_seq >= MAX_POSITION || start_msg >= MAX_POSITION {
        return Err(RouteEncodeError::Position);
    }
    let s = crate::frame::begin(out, crate::frame::Kind::McastRoute, 0, 0);
    out.extend_from_slice(&group.ip().octets());
    out.extend_from_slice(&group.port().to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&session.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&start_seq.to_le_bytes());
    out.extend_from_slice(&start_msg.to_le_bytes());
    let mut count = 0;
    for p in patterns {
        if validate_pattern(p.as_bytes()).is_err() || count == MAX_ROUTE_PATTERNS {
            out.truncate(s);
            return Err(RouteEncodeError::Patterns(format!(
                "{p:?} is not a valid pattern, or more than {MAX_ROUTE_PATTERNS} patterns"
            )));
        }
        // A valid pattern is at most 250 bytes.
        out.push(p.len() as u8);
        out.extend_from_slice(p.as_bytes());
        count += 1;
    }
    if count == 0 {
        out.truncate(s);
        return Err(RouteEncodeError::Patterns("no pattern".into()));
    }
    crate::frame::finish(out, s);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode, Frame, DEFAULT_MAX_FRAME};
    use proptest::prelude::*;

    fn group() -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(239, 255, 74, 2), 7441)
    }

    #[test]
    fn round_trips_and_lists_its_patterns() {
        let mut b = Vec::new();
        encode_mcast_route(&mut b, group(), 0xdead_beef, 7, 42, ["md/>", "fx/*"]).unwrap();
        let (f, n) = decode(&b, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(n, b.len());
        let Frame::McastRoute(r) = f else {
            panic!("not a route: {f:?}")
        };
        assert_eq!(
            (r.group, r.session, r.start_seq, r.start_msg),
            (group(), 0xdead_beef, 7, 42)
        );
        assert_eq!(r.patterns().collect::<Vec<_>>(), ["md/>", "fx/*"]);
    }

    #[test]
    fn the_protocol_documents_example_encodes_byte_for_byte() {
        // docs/protocol.md §4.11.
        let want = "2d 00 00 00 08 00 00 00 ef ff 4a 02 11 1d 00 00 fe ca ad 0b 00 00 00 00 \
                    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 04 6d 64 2f 3e";
        let want: Vec<u8> = want
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        let mut b = Vec::new();
        encode_mcast_route(&mut b, group(), 0x0bad_cafe, 0, 0, ["md/>"]).unwrap();
        assert_eq!(b, want);
    }

    #[test]
    fn refuses_what_it_cannot_encode() {
        let mut b = Vec::new();
        let unicast = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7441);
        assert!(encode_mcast_route(&mut b, unicast, 1, 0, 0, ["a"]).is_err());
        assert!(encode_mcast_route(&mut b, group(), 1, 0, 0, []).is_err());
        assert!(encode_mcast_route(&mut b, group(), 1, 0, 0, ["a//b"]).is_err());
        assert!(encode_mcast_route(&mut b, group(), 1, MAX_POSITION, 0, ["a"]).is_err());
        let many = vec!["a"; MAX_ROUTE_PATTERNS + 1];
        assert!(encode_mcast_route(&mut b, group(), 1, 0, 0, many).is_err());
        assert!(b.is_empty(), "a refused route leaves nothing behind");
    }

    #[test]
    fn hostile_bodies_are_malformed_not_panics() {
        let mut good = Vec::new();
        encode_mcast_route(&mut good, group(), 1, 0, 0, ["md/>"]).unwrap();
        let cases: [(usize, u8); 6] = [
            (8, 10),    // group 10.x: not multicast
            (12, 0),    // port low byte 0 ...
            (14, 1),    // reserved
            (20, 1),    // reserved
            (31, 0x40), // start_seq ≥ 2^62
            (40, 200),  // pattern length past the end
        ];
        for (off, v) in cases {
            let mut b = good.clone();
            b[off] = v;
            if off == 12 {
                b[13] = 0;
            }
            assert!(decode(&b, DEFAULT_MAX_FRAME).is_err(), "offset {off}");
        }
        // No pattern at all.
        let mut b = good[..40].to_vec();
        b[..4].copy_from_slice(&40u32.to_le_bytes());
        assert!(decode(&b, DEFAULT_MAX_FRAME).is_err());
    }

    proptest! {
        #[test]
        fn any_body_decodes_or_errs_and_valid_routes_round_trip(
            body in proptest::collection::vec(any::<u8>(), 0..400),
            patterns in proptest::collection::vec("[a-z]{1,6}(/[a-z*]{1,4}){0,2}(/>)?", 1..=MAX_ROUTE_PATTERNS),
            session in any::<u32>(),
            seq in 0..MAX_POSITION,
            msg in 0..MAX_POSITION,
            c in 224u8..=239,
        ) {
            // Arbitrary bytes behind a MCAST_ROUTE header: an answer, never a panic.
            let mut b = Vec::new();
            let s = crate::frame::begin(&mut b, crate::frame::Kind::McastRoute, 0, 0);
            b.extend_from_slice(&body);
            crate::frame::finish(&mut b, s);
            if let Ok(Some((Frame::McastRoute(r), _))) = decode(&b, DEFAULT_MAX_FRAME) {
                prop_assert!(r.group.ip().is_multicast());
                prop_assert!(r.patterns().count() >= 1);
            }
            let valid: Vec<&str> = patterns
                .iter()
                .map(String::as_str)
                .filter(|p| validate_pattern(p.as_bytes()).is_ok())
                .collect();
            prop_assume!(!valid.is_empty());
            let g = SocketAddrV4::new(Ipv4Addr::new(c, 1, 2, 3), 9000);
            let mut b = Vec::new();
            encode_mcast_route(&mut b, g, session, seq, msg, valid.iter().copied()).unwrap();
            let Ok(Some((Frame::McastRoute(r), n))) = decode(&b, DEFAULT_MAX_FRAME) else {
                panic!("a valid route must decode");
            };
            prop_assert_eq!(n, b.len());
            prop_assert_eq!((r.group, r.session, r.start_seq, r.start_msg), (g, session, seq, msg));
            prop_assert_eq!(r.patterns().collect::<Vec<_>>(), valid);
        }
    }
}
