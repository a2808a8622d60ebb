//! Property tests: round trips for every message type and for MoldUDP64 packets, and
//! arbitrary bytes never panic any decoder.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tickwire_itch::*;

/// Valid wire bytes of any ITCH type: random field bytes, with the side byte (offset 19
/// of `A`, `F` and `P`) made valid.
fn message_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        0..MESSAGE_TYPES.len(),
        prop::collection::vec(any::<u8>(), MAX_MESSAGE_LEN),
        any::<bool>(),
    )
        .prop_map(|(i, mut body, buy)| {
            let (ty, len, _) = MESSAGE_TYPES[i];
            body.truncate(len);
            body[0] = ty;
            if matches!(ty, b'A' | b'F' | b'P') {
                body[19] = if buy { b'B' } else { b'S' };
            }
            body
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// bytes -> message -> bytes is the identity, and message -> bytes -> message too,
    /// for every type (every field value is reachable: the wire is a bijection).
    #[test]
    fn itch_round_trip(bytes in message_bytes()) {
        let msg = decode(&bytes).unwrap();
        prop_assert_eq!(msg.msg_type(), bytes[0]);
        prop_assert_eq!(msg.encoded_len(), bytes.len());
        let (out, n) = msg.to_bytes().unwrap();
        prop_assert_eq!(&out[..n], &bytes[..]);
        prop_assert_eq!(decode(&out[..n]), Ok(msg));
        prop_assert!(msg.timestamp() <= MAX_TIMESTAMP);
    }

    /// `order_ref_of` reads exactly the reference the full decoder finds: the order's
    /// own for adds, executions, cancels and deletes, the original one for replaces,
    /// and nothing for every other type.
    #[test]
    fn order_ref_of_agrees_with_decode(bytes in message_bytes()) {
        let expected = match decode(&bytes).unwrap() {
            Message::AddOrder(m) => Some(m.order_ref),
            Message::AddOrderMpid(m) => Some(m.order_ref),
            Message::OrderExecuted(m) => Some(m.order_ref),
            Message::OrderExecutedWithPrice(m) => Some(m.order_ref),
            Message::OrderCancel(m) => Some(m.order_ref),
            Message::OrderDelete(m) => Some(m.order_ref),
            Message::OrderReplace(m) => Some(m.original_order_ref),
            _ => None,
        };
        prop_assert_eq!(order_ref_of(&bytes), expected);
    }

    /// Arbitrary and truncated bytes: `order_ref_of` never panics; it reads bytes
    /// 11..19 of an order type's buffer long enough to hold them, and nothing else.
    #[test]
    fn order_ref_of_takes_any_bytes(
        ty in prop::sample::select(b"AFECXDUPQS".to_vec()),
        mut bytes in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        if let Some(b) = bytes.first_mut() {
            *b = ty;
        }
        let r = order_ref_of(&bytes);
        let order_type = matches!(bytes.first(), Some(b'A' | b'F' | b'E' | b'C' | b'X' | b'D' | b'U'));
        if order_type && bytes.len() >= 19 {
            let b: [u8; 8] = bytes[11..19].try_into().unwrap();
            prop_assert_eq!(r, Some(u64::from_be_bytes(b)));
        } else {
            prop_assert_eq!(r, None);
        }
    }

    /// Messages put through a builder come back out of the packets, in order, with
    /// consecutive sequence numbers, and no packet exceeds the limit.
    #[test]
    fn mold_round_trip(
        msgs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 0..60),
        first in any::<u32>(),
        max_packet in 22usize..600,
        session in "[A-Z0-9]{0,10}",
    ) {
        let session = Session::new(&session).unwrap();
        let first = u64::from(first);
        let mut b = PacketBuilder::new(session, first, max_packet);
        let mut packets: Vec<Vec<u8>> = Vec::new();
        let mut sent: Vec<&[u8]> = Vec::new();
        for m in &msgs {
            match b.push(m) {
                Ok(_) => sent.push(m),
                Err(BuildError::Full) => {
                    packets.push(b.finish().to_vec());
                    b.push(m).unwrap();
                    sent.push(m);
                }
                Err(BuildError::TooLarge { len, max }) => {
                    prop_assert!(len > max && max == max_packet - 22);
                }
                Err(e) => panic!("{e}"),
            }
        }
        if !b.is_empty() {
            packets.push(b.finish().to_vec());
        }
        let mut got: Vec<&[u8]> = Vec::new();
        let mut next = first;
        for p in &packets {
            prop_assert!(p.len() <= max_packet);
            let p = MoldPacket::parse(p).unwrap();
            prop_assert_eq!(p.session(), session);
            prop_assert_eq!(p.sequence(), next);
            prop_assert_eq!(p.kind(), PacketKind::Messages);
            for block in p.messages() {
                let block = block.unwrap();
                prop_assert_eq!(block.sequence, next);
                next += 1;
                got.push(block.data);
            }
            prop_assert_eq!(p.next_sequence(), next);
        }
        prop_assert_eq!(got, sent);
        prop_assert_eq!(b.next_sequence(), next);
    }

    #[test]
    fn request_round_trip(seq in any::<u64>(), count in any::<u16>(), s in "[ -~]{0,10}") {
        let r = RetransmitRequest { session: Session::new(&s).unwrap(), sequence: seq, count };
        prop_assert_eq!(RetransmitRequest::decode(&r.to_bytes()), Ok(r));
    }

    /// No decoder panics on arbitrary bytes, and what they accept is consistent.
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..400)) {
        check_any(&data);
    }

    /// Nor on valid packets with a few bytes overwritten.
    #[test]
    fn mutated_packets_never_panic(
        msgs in prop::collection::vec(message_bytes(), 1..20),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut b = PacketBuilder::new(Session::new("MUT").unwrap(), 1, 64 * 1024);
        for m in &msgs {
            b.push(m).unwrap();
        }
        let mut p = b.finish().to_vec();
        for (i, v) in edits {
            let at = i.index(p.len());
            p[at] = v;
        }
        check_any(&p);
    }
}

fn check_any(data: &[u8]) {
    if let Ok(m) = decode(data) {
        assert_eq!(m.encoded_len(), data.len());
        assert_eq!(
            m.to_bytes().map(|(b, n)| b[..n].to_vec()),
            Ok(data.to_vec())
        );
    }
    if let Ok((m, n)) = decode_prefix(data) {
        assert_eq!(n, m.encoded_len());
        assert!(n <= data.len());
    }
    let _ = RetransmitRequest::decode(data);
    if let Ok(p) = MoldPacket::parse(data) {
        let mut errors = 0;
        let mut total = 0usize;
        for block in p.messages() {
            match block {
                Ok(b) => {
                    total += 2 + b.data.len();
                    let _ = decode(b.data);
                }
                Err(_) => errors += 1,
            }
        }
        assert!(errors <= 1);
        assert!(total <= data.len() - MOLD_HEADER_LEN);
        assert_eq!(p.validate().is_ok(), errors == 0);
    }
}
