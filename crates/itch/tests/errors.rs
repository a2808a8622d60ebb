//! Malformed input gives typed errors (never a panic), byte-split packets, the packet
//! builder's limits and the field helpers.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_itch::*;

fn add(order_ref: u64) -> Message {
    AddOrder {
        header: Header {
            stock_locate: 7,
            tracking_number: 0,
            timestamp: 1_000,
        },
        order_ref,
        side: Side::Sell,
        shares: 10,
        stock: Symbol::new("IBM").unwrap(),
        price: Price(1_234_500),
    }
    .into()
}

fn bytes(m: &Message) -> Vec<u8> {
    let mut v = Vec::new();
    m.encode_to_vec(&mut v).unwrap();
    v
}

#[test]
fn itch_decode_errors() {
    assert_eq!(decode(&[]), Err(DecodeError::Empty));
    assert_eq!(decode(b"Z0000000000"), Err(DecodeError::UnknownType(b'Z')));
    let good = bytes(&add(1));
    // Every strict prefix is truncated.
    for cut in 1..good.len() {
        assert_eq!(
            decode(&good[..cut]),
            Err(DecodeError::Truncated {
                msg_type: b'A',
                needed: 36,
                available: cut
            }),
            "cut {cut}"
        );
    }
    // One byte too many.
    let mut long = good.clone();
    long.push(0);
    assert_eq!(
        decode(&long),
        Err(DecodeError::WrongLength {
            msg_type: b'A',
            expected: 36,
            actual: 37
        })
    );
    // decode_prefix accepts the trailing bytes and says where the message ends.
    assert_eq!(decode_prefix(&long), Ok((add(1), 36)));
    // A side other than B / S.
    let mut bad = good.clone();
    bad[19] = b'X';
    assert_eq!(
        decode(&bad),
        Err(DecodeError::InvalidField {
            msg_type: b'A',
            field: "side",
            value: b'X'
        })
    );
    assert!(decode(&bad).unwrap_err().to_string().contains("side"));
}

#[test]
fn itch_encode_errors() {
    let m = add(1);
    let mut small = [0u8; 35];
    assert_eq!(
        m.encode(&mut small),
        Err(EncodeError::BufferTooSmall {
            needed: 36,
            available: 35
        })
    );
    let mut late = m;
    late.header_mut().timestamp = MAX_TIMESTAMP + 1;
    let mut v = vec![1, 2];
    assert_eq!(
        late.encode_to_vec(&mut v),
        Err(EncodeError::TimestampOutOfRange(MAX_TIMESTAMP + 1))
    );
    assert_eq!(v, [1, 2], "a failed append leaves the vector unchanged");
    late.header_mut().timestamp = MAX_TIMESTAMP;
    let b = bytes(&late);
    assert_eq!(&b[5..11], &[0xFF; 6]);
    assert_eq!(decode(&b).unwrap().timestamp(), MAX_TIMESTAMP);
}

fn packet(messages: &[Message], seq: u64) -> Vec<u8> {
    let mut b = PacketBuilder::new(Session::new("S").unwrap(), seq, DEFAULT_MAX_PACKET);
    for m in messages {
        b.push_message(m).unwrap();
    }
    b.finish().to_vec()
}

#[test]
fn mold_packet_errors() {
    // Header too short, at every length.
    for n in 0..MOLD_HEADER_LEN {
        assert_eq!(
            MoldPacket::parse(&vec![b' '; n]),
            Err(MoldError::Truncated(n))
        );
    }
    let msgs = [add(1), add(2)];
    let good = packet(&msgs, 5);

    // A block length past the end of the packet: the first block is still delivered.
    let mut overrun = good.clone();
    let second = MOLD_HEADER_LEN + 2 + 36;
    overrun[second..second + 2].copy_from_slice(&1000u16.to_be_bytes());
    let p = MoldPacket::parse(&overrun).unwrap();
    let items: Vec<_> = p.messages().collect();
    assert_eq!(items.len(), 2);
    assert_eq!(decode(items[0].unwrap().data), Ok(msgs[0]));
    assert_eq!(
        items[1],
        Err(MoldError::BlockOverrun {
            index: 1,
            offset: second
        })
    );
    assert_eq!(
        p.validate(),
        Err(MoldError::BlockOverrun {
            index: 1,
            offset: second
        })
    );

    // More messages announced than present.
    let mut more = good.clone();
    more[18..20].copy_from_slice(&3u16.to_be_bytes());
    let p = MoldPacket::parse(&more).unwrap();
    let last = p.messages().last().unwrap();
    assert_eq!(
        last,
        Err(MoldError::CountMismatch {
            declared: 3,
            found: 2
        })
    );
    assert_eq!(p.messages().filter(Result::is_ok).count(), 2);

    // Fewer announced than present: trailing bytes.
    let mut fewer = good.clone();
    fewer[18..20].copy_from_slice(&1u16.to_be_bytes());
    let p = MoldPacket::parse(&fewer).unwrap();
    assert_eq!(p.validate(), Err(MoldError::TrailingBytes(38)));

    // A heartbeat with a payload is flagged too.
    let mut hb = good[..MOLD_HEADER_LEN].to_vec();
    hb[18..20].copy_from_slice(&0u16.to_be_bytes());
    hb.push(0);
    let p = MoldPacket::parse(&hb).unwrap();
    assert_eq!(p.kind(), PacketKind::Heartbeat);
    assert_eq!(p.validate(), Err(MoldError::TrailingBytes(1)));

    // A lone byte where a 2-byte block length should be.
    let mut half = good[..MOLD_HEADER_LEN].to_vec();
    half.push(0);
    let p = MoldPacket::parse(&half).unwrap();
    assert_eq!(
        p.validate(),
        Err(MoldError::BlockOverrun {
            index: 0,
            offset: 20
        })
    );

    // Re-requests must be exactly 20 bytes.
    assert_eq!(
        RetransmitRequest::decode(&good[..19]),
        Err(MoldError::RequestLength(19))
    );
    assert_eq!(
        RetransmitRequest::decode(&good[..21]),
        Err(MoldError::RequestLength(21))
    );
    assert_eq!(
        RetransmitRequest {
            session: Session::default(),
            sequence: 1,
            count: 1
        }
        .encode(&mut [0u8; 19]),
        Err(EncodeError::BufferTooSmall {
            needed: 20,
            available: 19
        })
    );
}

/// A packet cut at every offset either fails to parse (header cut) or yields a prefix of
/// the original messages followed by exactly one error: never a wrong or extra message.
#[test]
fn packet_cut_at_every_offset_is_rejected_cleanly() {
    let msgs: Vec<Message> = (0..5).map(|i| add(100 + i)).collect();
    let good = packet(&msgs, 42);
    for cut in 0..good.len() {
        let part = &good[..cut];
        let Ok(p) = MoldPacket::parse(part) else {
            assert!(cut < MOLD_HEADER_LEN, "cut {cut}");
            continue;
        };
        let items: Vec<_> = p.messages().collect();
        let (ok, err): (Vec<&Result<MessageBlock, MoldError>>, Vec<_>) =
            items.iter().partition(|r| r.is_ok());
        assert_eq!(err.len(), 1, "cut {cut}: exactly one error");
        assert!(
            items.last().unwrap().is_err(),
            "cut {cut}: the error comes last"
        );
        for (i, b) in ok.iter().enumerate() {
            let b = b.unwrap();
            assert_eq!(b.sequence, 42 + i as u64);
            assert_eq!(decode(b.data), Ok(msgs[i]), "cut {cut}");
        }
        // Only whole blocks before the cut are delivered.
        assert_eq!(ok.len(), (cut - MOLD_HEADER_LEN) / 38, "cut {cut}");
    }
    // The whole packet yields every message and no error.
    let p = MoldPacket::parse(&good).unwrap();
    assert!(p.validate().is_ok());
    assert_eq!(p.messages().count(), 5);
}

/// A stream of concatenated messages (as `decode_prefix` reads) split at every offset
/// into two reads still yields the same messages when the reader keeps the remainder.
#[test]
fn message_stream_split_at_every_offset() {
    let msgs: Vec<Message> = vec![
        add(1),
        OrderDelete {
            header: Header::default(),
            order_ref: 1,
        }
        .into(),
        SystemEvent {
            header: Header::default(),
            event_code: b'C',
        }
        .into(),
    ];
    let stream: Vec<u8> = msgs.iter().flat_map(bytes).collect();
    for cut in 0..=stream.len() {
        let mut pending: Vec<u8> = Vec::new();
        let mut got = Vec::new();
        for chunk in [&stream[..cut], &stream[cut..]] {
            pending.extend_from_slice(chunk);
            let mut used = 0;
            loop {
                match decode_prefix(&pending[used..]) {
                    Ok((m, n)) => {
                        got.push(m);
                        used += n;
                    }
                    Err(DecodeError::Empty | DecodeError::Truncated { .. }) => break,
                    Err(e) => panic!("cut {cut}: {e}"),
                }
            }
            pending.drain(..used);
        }
        assert_eq!(got, msgs, "cut {cut}");
        assert!(pending.is_empty());
    }
}

#[test]
fn builder_fills_packets_and_continues_the_sequence() {
    let m = add(9); // 36 bytes + 2 length = 38 per block
    let mut b = PacketBuilder::new(Session::new("FEED").unwrap(), 1, 200);
    // (200 - 20) / 38 = 4 blocks fit.
    for i in 0..4 {
        assert_eq!(b.push_message(&m), Ok(1 + i));
    }
    assert_eq!(b.push_message(&m), Err(BuildError::Full));
    assert_eq!(b.count(), 4);
    let first = b.finish().to_vec();
    assert_eq!(first.len(), 20 + 4 * 38);
    assert!(first.len() <= 200);
    assert_eq!(b.finish(), &first[..], "finish is idempotent");
    assert_eq!(b.next_sequence(), 5);
    assert!(b.is_empty());
    assert_eq!(b.push_message(&m), Ok(5));
    let second = MoldPacket::parse(b.finish()).unwrap();
    assert_eq!((second.sequence(), second.message_count()), (5, 1));

    // Too large for any packet of this builder.
    assert_eq!(b.max_message_len(), 178);
    assert_eq!(
        b.push(&[0; 179]),
        Err(BuildError::TooLarge { len: 179, max: 178 })
    );
    // The largest message fills a packet on its own.
    assert_eq!(b.push(&[0; 178]), Ok(6));
    assert_eq!(b.remaining(), 0);
    assert_eq!(b.push(&[]), Err(BuildError::Full));
    assert_eq!(b.finish().len(), 200);

    // A message that fails to encode leaves the packet unchanged.
    b.finish();
    let mut late = m;
    late.header_mut().timestamp = u64::MAX;
    assert_eq!(
        b.push_message(&late),
        Err(BuildError::Encode(EncodeError::TimestampOutOfRange(
            u64::MAX
        )))
    );
    b.push_message(&m).unwrap();
    let p = MoldPacket::parse(b.finish()).unwrap();
    assert_eq!(p.sequence(), 7);
    assert!(p.validate().is_ok());
    assert_eq!(p.messages().count(), 1);

    // reset restarts the numbering and drops the unfinished packet.
    b.push_message(&m).unwrap();
    b.reset(100);
    assert!(b.is_empty());
    assert_eq!(b.push(b"abc"), Ok(100));
    assert_eq!(MoldPacket::parse(b.finish()).unwrap().message_count(), 1);
}

#[test]
fn pack_fills_packets_in_order_and_reports_a_message_that_never_fits() {
    let m = add(9); // 38 bytes a block: 4 fit a 200-byte packet.
    let mut b = PacketBuilder::new(Session::new("FEED").unwrap(), 1, 200);
    let packets = b.pack(vec![m; 10]).unwrap();
    let got: Vec<(u64, u16)> = packets
        .iter()
        .map(|p| {
            let p = MoldPacket::parse(p).unwrap();
            (p.sequence(), p.message_count())
        })
        .collect();
    assert_eq!(got, [(1, 4), (5, 4), (9, 2)]);
    assert_eq!(b.next_sequence(), 11);
    assert_eq!(
        b.pack(Vec::<Message>::new()).unwrap(),
        Vec::<Vec<u8>>::new()
    );
    let mut late = m;
    late.header_mut().timestamp = u64::MAX;
    assert!(matches!(b.pack([&m, &late]), Err(BuildError::Encode(_))));
}

#[test]
fn builder_stops_before_the_end_of_session_count() {
    let mut b = PacketBuilder::new(Session::default(), 0, 200_000);
    let mut n = 0u32;
    while b.push(b"").is_ok() {
        n += 1;
    }
    assert_eq!(n, 0xFFFE);
    let p = MoldPacket::parse(b.finish()).unwrap();
    assert_eq!(p.kind(), PacketKind::Messages);
    assert_eq!(p.messages().filter(Result::is_ok).count(), 0xFFFE);
}

#[test]
fn price_symbol_and_session_helpers() {
    assert_eq!(Price(1_234_500).to_string(), "123.4500");
    assert_eq!(Price(5).to_string(), "0.0005");
    assert_eq!(Price::MAX.to_string(), "214748.3647");
    assert_eq!(Price::from_parts(123, 4500), Some(Price(1_234_500)));
    assert_eq!(Price::from_parts(1, 10_000), None);
    assert_eq!(Price::from_parts(u32::MAX, 0), None);
    assert!((Price(1_234_500).as_f64() - 123.45).abs() < 1e-9);
    assert_eq!(Price8(3_710_123_000_000).to_string(), "37101.23000000");

    let s = Symbol::new("AAPL").unwrap();
    assert_eq!(s.as_bytes(), b"AAPL    ");
    assert_eq!(s.trimmed(), b"AAPL");
    assert_eq!(s.as_str(), Some("AAPL"));
    assert_eq!(s.to_string(), "AAPL");
    assert_eq!("AAPL".parse::<Symbol>(), Ok(s));
    assert_eq!(format!("{s:?}"), "Symbol(\"AAPL\")");
    assert_eq!(
        Symbol::new("TOOLONGSYM"),
        Err(AlphaError::TooLong { len: 10, max: 8 })
    );
    assert_eq!(Symbol::new("A\tB"), Err(AlphaError::NotPrintable(b'\t')));
    assert_eq!(
        Symbol([b'A', 0xFF, b' ', b' ', b' ', b' ', b' ', b' ']).to_string(),
        "A\\xff"
    );
    assert_eq!(Symbol::new("").unwrap().trimmed(), b"");
    assert_eq!(alpha::<4>("GS"), Ok(*b"GS  "));
    assert_eq!(alpha_str(b"NSDQ  "), Some("NSDQ"));

    let session = Session::new("20261122A").unwrap();
    assert_eq!(session.as_bytes(), b"20261122A ");
    assert_eq!(session.to_string(), "20261122A");
    assert_eq!(
        Session::new("12345678901"),
        Err(AlphaError::TooLong { len: 11, max: 10 })
    );

    assert_eq!(Side::from_byte(b'B'), Some(Side::Buy));
    assert_eq!(Side::from_byte(b'S'), Some(Side::Sell));
    assert_eq!(Side::from_byte(b'b'), None);
    assert_eq!(Side::Sell.as_byte(), b'S');
}
