//! Tests of the FIX tag=value codec: golden vectors, byte-split framing, property tests
//! (round trip, BodyLength/CheckSum consistency, no panic on arbitrary input), encoder
//! and timestamp behaviour.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use proptest::prelude::*;
use tickwire_fix::codec::{
    checksum, data_length_tag, frame_len, parse, parse_unchecked, parse_utc_date_only,
    parse_utc_time_only, parse_utc_timestamp, write_utc_date_only, write_utc_time_only,
    write_utc_timestamp, Encoder, Field, Fields, FrameError, ParseError, TimestampPrecision, SOH,
};

const MAX_LEN: usize = 4096;

/// `|` → SOH.
fn fix(s: &str) -> Vec<u8> {
    s.bytes().map(|b| if b == b'|' { SOH } else { b }).collect()
}

/// Builds `8=<begin>|9=<len>|<body>10=xxx|` from a body written with `|`.
fn msg(begin: &str, body: &str) -> Vec<u8> {
    let body = fix(body);
    let mut m = fix(&format!("8={begin}|9={}|", body.len()));
    m.extend_from_slice(&body);
    let cs = checksum(&m);
    m.extend_from_slice(&fix(&format!("10={cs:03}|")));
    m
}

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/codec")
}

/// The reference driver: frames and parses a whole stream, producing the transcript
/// format documented in testdata/codec/gen.py.
fn transcript(stream: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = stream;
    let mut fields = Fields::default();
    while !buf.is_empty() {
        match frame_len(buf, MAX_LEN) {
            Ok(Some(n)) => {
                match parse(&buf[..n], &mut fields) {
                    Ok(m) => {
                        out.push("msg".to_string());
                        for f in m.fields() {
                            let v: Vec<u8> = m
                                .value(f)
                                .iter()
                                .map(|&b| if b == SOH { b'|' } else { b })
                                .collect();
                            out.push(format!("{}={}", f.tag, String::from_utf8_lossy(&v)));
                        }
                    }
                    Err(e) => out.push(format!("parse_error={e:?}")),
                }
                buf = &buf[n..];
            }
            Ok(None) => {
                out.push(format!("incomplete={}", buf.len()));
                break;
            }
            Err(e) => {
                out.push(format!("frame_error={e:?}"));
                assert!(e.skip() >= 1 && e.skip() <= buf.len());
                buf = &buf[e.skip()..];
            }
        }
    }
    out
}

/// All golden vector names (NAME.fix files), sorted.
fn vectors() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(testdata())
        .expect("testdata/codec exists")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".fix").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

fn read_vector(name: &str) -> (Vec<u8>, Vec<String>) {
    let raw = std::fs::read(testdata().join(format!("{name}.fix"))).unwrap();
    let line = raw.strip_suffix(b"\n").unwrap_or(&raw);
    let stream: Vec<u8> = line
        .iter()
        .map(|&b| if b == b'|' { SOH } else { b })
        .collect();
    let expect = std::fs::read_to_string(testdata().join(format!("{name}.expect"))).unwrap();
    (stream, expect.lines().map(str::to_string).collect())
}

/// Every golden vector decodes to exactly its expected transcript.
#[test]
fn golden_vectors_decode_as_expected() {
    let names = vectors();
    assert!(
        names.len() >= 27,
        "expected the full vector set, got {names:?}"
    );
    for name in &names {
        let (stream, expect) = read_vector(name);
        assert_eq!(transcript(&stream), expect, "vector {name}");
    }
}

/// Each good single-message vector re-encodes byte for byte with the Encoder (so the
/// Encoder's BodyLength and CheckSum agree with the independently generated ones).
#[test]
fn golden_messages_reencode_identically() {
    let mut checked = 0;
    for name in vectors() {
        let (stream, _) = read_vector(&name);
        let mut fields = Fields::default();
        let Ok(Some(n)) = frame_len(&stream, MAX_LEN) else {
            continue;
        };
        if n != stream.len() {
            continue;
        }
        let Ok(m) = parse(&stream, &mut fields) else {
            continue;
        };
        let begin = std::str::from_utf8(m.begin_string()).unwrap();
        let mut enc = Encoder::new(begin);
        enc.begin(m.msg_type());
        let fs = m.fields();
        for f in &fs[3..fs.len() - 1] {
            enc.field(f.tag, m.value(f));
        }
        assert_eq!(enc.finish(), &stream[..], "vector {name}");
        checked += 1;
    }
    assert!(checked >= 14, "only {checked} vectors re-encoded");
}

/// The golden stream of several messages
fn stream_of_messages() -> Vec<u8> {
    let mut s = Vec::new();
    for name in [
        "three_messages",
        "logon_raw_data_with_soh",
        "md_incremental_refresh",
    ] {
        s.extend_from_slice(&read_vector(name).0);
    }
    s
}

/// Incremental driver: feeds `chunks` one after another into a buffer, framing after
/// each; returns the framed messages.
fn frame_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        loop {
            match frame_len(&buf, MAX_LEN) {
                Ok(Some(n)) => {
                    out.push(buf[..n].to_vec());
                    buf.drain(..n);
                }
                Ok(None) => break,
                Err(e) => panic!("unexpected frame error {e:?}"),
            }
        }
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    out
}

/// Splitting a stream of messages at every possible point (and feeding it one byte at
/// a time) yields the same messages as feeding it whole.
#[test]
fn byte_split_framing_yields_same_messages() {
    let s = stream_of_messages();
    let whole = frame_chunks([&s[..]]);
    assert_eq!(whole.len(), 5);
    let mut fields = Fields::default();
    for m in &whole {
        parse(m, &mut fields).expect("every framed message parses");
    }
    for i in 0..=s.len() {
        assert_eq!(frame_chunks([&s[..i], &s[i..]]), whole, "split at {i}");
    }
    assert_eq!(frame_chunks(s.chunks(1)), whole);
    assert_eq!(frame_chunks(s.chunks(7)), whole);
}

/// Every proper prefix of a message asks for more bytes.
#[test]
fn every_prefix_is_incomplete() {
    for name in ["logon", "logon_raw_data_with_soh", "fixt_logon"] {
        let (s, _) = read_vector(name);
        for i in 0..s.len() {
            assert_eq!(frame_len(&s[..i], MAX_LEN), Ok(None), "{name} prefix {i}");
        }
        assert_eq!(frame_len(&s, MAX_LEN), Ok(Some(s.len())));
    }
}

#[test]
fn too_long_is_rejected_from_the_header_alone() {
    let m = msg("FIX.4.4", "35=0|49=A|56=B|34=1|52=20240101-00:00:00|");
    // Only the first 20 bytes are buffered.
    let r = frame_len(&m[..20], 50);
    assert!(
        matches!(r, Err(FrameError::TooLong { max: 50, .. })),
        "{r:?}"
    );
    assert_eq!(frame_len(&m, m.len()), Ok(Some(m.len())));
    assert!(matches!(
        frame_len(&m, m.len() - 1),
        Err(FrameError::TooLong { len, .. }) if len == m.len()
    ));
}

#[test]
fn frame_errors_and_resync() {
    assert_eq!(frame_len(b"", MAX_LEN), Ok(None));
    assert_eq!(frame_len(b"8=FI", MAX_LEN), Ok(None));
    // Garbage ending in a partial "8=F": keep the partial prefix.
    assert_eq!(
        frame_len(b"xyz8=F", MAX_LEN),
        Err(FrameError::Garbage { skip: 3 })
    );
    assert_eq!(
        frame_len(b"xyz", MAX_LEN),
        Err(FrameError::Garbage { skip: 3 })
    );
    // BeginString without SOH for too long.
    assert!(matches!(
        frame_len(b"8=FIX.4.4.4.4.4.4.4.4.4.4.4", MAX_LEN),
        Err(FrameError::Garbage { .. })
    ));
    // Non-digit BodyLength, empty BodyLength, too many digits.
    for bad in [
        &b"8=FIX.4.4\x019=1a\x01"[..],
        b"8=FIX.4.4\x019=\x01",
        b"8=FIX.4.4\x019=1234567890",
    ] {
        assert!(
            matches!(
                frame_len(bad, MAX_LEN),
                Err(FrameError::BadBodyLength { .. })
            ),
            "{bad:?}"
        );
    }
    // Second field is not 9.
    assert!(matches!(
        frame_len(b"8=FIX.4.4\x0135=0\x01", MAX_LEN),
        Err(FrameError::BadBodyLength { .. })
    ));
    // A "10=" that is not three digits makes the trailer misaligned: framing waits
    // for the seventh trailer byte, sees it is not SOH, and cuts the frame as
    // QuickFIX's parser does (up to the SOH after the first "10=" from the declared
    // end on); parse() then reports it.
    let mut m = fix("8=FIX.4.4|9=5|35=0|10=12|");
    assert_eq!(frame_len(&m, MAX_LEN), Ok(None));
    m.push(b'8');
    assert_eq!(frame_len(&m, MAX_LEN), Ok(Some(m.len() - 1)));
}

#[test]
fn parse_header_and_trailer_errors() {
    let mut f = Fields::default();
    let good = msg("FIX.4.4", "35=0|49=A|56=B|34=1|52=20240101-00:00:00|");
    assert!(parse(&good, &mut f).is_ok());

    let cases: Vec<(Vec<u8>, ParseError)> = vec![
        (
            fix("9=5|8=FIX.4.4|35=0|10=000|"),
            ParseError::BeginStringNotFirst,
        ),
        (
            fix("8=FIX.4.4|35=0|9=5|10=000|"),
            ParseError::BodyLengthNotSecond,
        ),
        (
            fix("8=FIX.4.4|9=x|35=0|10=000|"),
            ParseError::BodyLengthNotSecond,
        ),
        (msg("FIX.4.4", "49=A|35=0|"), ParseError::MsgTypeNotThird),
        (fix("8=FIX.4.4|9=5|35=0|"), ParseError::MissingCheckSum),
        (
            fix("8=FIX.4.4|9=5|35=0|58=x"),
            ParseError::MissingSoh { tag: 58 },
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|10=1234|"),
            ParseError::CheckSumFormat,
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|10=1a3|"),
            ParseError::CheckSumFormat,
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|10=123|58=x|"),
            ParseError::CheckSumNotLast,
        ),
        (
            fix("8=FIX.4.4|9=6|35=0|10=000|"),
            ParseError::BodyLengthMismatch {
                declared: 6,
                actual: 5,
            },
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|=1|10=000|"),
            ParseError::InvalidTag { offset: 19 },
        ),
        // A leading zero: QuickFIX reads 058 as 58 (neighbour_tag_forms), so the
        // field is fine and the BodyLength is what is wrong here.
        (
            fix("8=FIX.4.4|9=5|35=0|058=1|10=000|"),
            ParseError::BodyLengthMismatch {
                declared: 5,
                actual: 11,
            },
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|00=1|10=000|"),
            ParseError::InvalidTagNumber { tag: 0 },
        ),
        // A minus sign or more than 9 digits: read as QuickFIX reads it, a wrapping
        // C int; zero or negative is an invalid tag number carrying the int's bits.
        (
            fix("8=FIX.4.4|9=5|35=0|-5=1|10=000|"),
            ParseError::InvalidTagNumber { tag: -5i32 as u32 },
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|12345678901=1|10=000|"),
            ParseError::InvalidTagNumber {
                tag: -539_222_987i32 as u32,
            },
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|1-2=1|10=000|"),
            ParseError::InvalidTag { offset: 19 },
        ),
        (
            fix("8=FIX.4.4|9=5|35=0|58|10=000|"),
            ParseError::InvalidTag { offset: 19 },
        ),
        (
            fix("8=|9=5|35=0|10=000|"),
            ParseError::EmptyValue { tag: 8 },
        ),
        (fix(""), ParseError::BeginStringNotFirst),
        (fix("8=FIX.4.4"), ParseError::BeginStringNotFirst),
    ];
    for (raw, want) in cases {
        assert_eq!(
            parse(&raw, &mut f).err(),
            Some(want),
            "{}",
            String::from_utf8_lossy(&raw)
        );
    }
}

#[test]
fn parse_unchecked_skips_only_the_checksum_value() {
    let mut m = msg("FIX.4.4", "35=0|49=A|");
    let n = m.len();
    m[n - 2] = if m[n - 2] == b'9' { b'0' } else { m[n - 2] + 1 };
    let mut f = Fields::default();
    assert!(matches!(
        parse(&m, &mut f),
        Err(ParseError::BadCheckSum { .. })
    ));
    let r = parse_unchecked(&m, &mut f).expect("checksum value not verified");
    assert_eq!(r.get(49), Some(&b"A"[..]));
    assert_eq!(
        parse_unchecked(&fix("8=FIX.4.4|9=5|35=0|10=12x|"), &mut f).err(),
        Some(ParseError::CheckSumFormat)
    );
}

#[test]
fn error_classification_for_the_session() {
    assert_eq!(
        ParseError::InvalidTagNumber { tag: 0 }.session_reject_reason(),
        Some(0)
    );
    assert_eq!(
        ParseError::EmptyValue { tag: 58 }.session_reject_reason(),
        Some(4)
    );
    assert_eq!(
        ParseError::IncorrectDataFormat { tag: 95 }.session_reject_reason(),
        Some(6)
    );
    assert_eq!(ParseError::EmptyValue { tag: 58 }.tag(), Some(58));
    assert!(!ParseError::EmptyValue { tag: 58 }.is_garbled());
    let garbled = ParseError::BadCheckSum {
        declared: 1,
        computed: 2,
    };
    assert!(garbled.is_garbled());
    assert_eq!(garbled.session_reject_reason(), None);
    assert_eq!(garbled.tag(), Some(10));
    assert_eq!(
        ParseError::EmptyValue { tag: 58 }.to_string(),
        "tag 58 specified without a value"
    );
    assert_eq!(
        FrameError::TooLong {
            len: 9,
            max: 5,
            skip: 3
        }
        .skip(),
        3
    );
}

#[test]
fn accessors() {
    let m = msg(
        "FIX.4.4",
        "35=X|49=V|56=A|34=42|52=20240315-09:30:00.250|43=Y|97=N|262=R|268=2|\
         279=0|269=0|270=1.5|279=1|269=1|270=-2|58=a=b|",
    );
    let mut f = Fields::default();
    let r = parse(&m, &mut f).unwrap();
    assert_eq!(r.raw(), &m[..]);
    assert_eq!(r.begin_string(), b"FIX.4.4");
    assert_eq!(r.msg_type(), b"X");
    assert_eq!(r.seq_num(), Some(42));
    assert_eq!(r.get_bool(43), Some(true));
    assert_eq!(r.get_bool(97), Some(false));
    assert_eq!(r.get_bool(262), None);
    assert_eq!(r.get_u64(268), Some(2));
    assert_eq!(r.get_u64(270), None); // "1.5" is not a plain integer
    assert_eq!(r.get_u64(1), None);
    assert_eq!(r.get_i64(279), Some(0));
    assert_eq!(r.get_str(58), Some("a=b"));
    assert_eq!(r.get_all(270).collect::<Vec<_>>(), vec![&b"1.5"[..], b"-2"]);
    assert_eq!(r.get_timestamp(52), Some(1_710_495_000_250_000_000));
    let tags: Vec<u32> = r.fields().iter().map(|f| f.tag).collect();
    assert_eq!(
        tags,
        [8, 9, 35, 49, 56, 34, 52, 43, 97, 262, 268, 279, 269, 270, 279, 269, 270, 58, 10]
    );
    let f35: Field = r.fields()[2];
    assert_eq!((f35.tag, f35.end - f35.start), (35, 1));
    assert_eq!(r.value(&f35), b"X");
    assert_eq!(&m[f35.end as usize..f35.end as usize + 1], &[SOH]);
}

#[test]
fn encoder_header_cache_order_and_reuse() {
    let mut enc = Encoder::new("FIX.4.2");
    assert_eq!(enc.begin_string(), b"FIX.4.2");
    enc.set_header_fields(&[(49, b"ME"), (56, b"YOU"), (57, b"DESK")]);
    enc.begin(b"D");
    enc.field_u64(34, 12);
    enc.field_timestamp(52, 1_710_495_000_123_456_789, TimestampPrecision::Micros);
    enc.field_str(11, "O1");
    enc.field_i64(44, -17);
    enc.field_bool(43, false);
    enc.field_data(95, 96, b"x\x01y");
    enc.raw_fields(b"58=hi\x01");
    let first = enc.finish().to_vec();
    let expected = msg(
        "FIX.4.2",
        "35=D|49=ME|56=YOU|57=DESK|34=12|52=20240315-09:30:00.123456|11=O1|44=-17|43=N|\
         95=3|96=x|y|58=hi|",
    );
    assert_eq!(first, expected);
    // finish is idempotent; message() returns the same bytes.
    assert_eq!(enc.finish(), &first[..]);
    assert_eq!(enc.message(), Some(&first[..]));
    // begin starts afresh and keeps the header cache.
    enc.begin(b"0");
    assert_eq!(enc.message(), None);
    enc.field_u64(34, 13);
    assert_eq!(
        enc.finish(),
        &msg("FIX.4.2", "35=0|49=ME|56=YOU|57=DESK|34=13|")[..]
    );
    let mut f = Fields::default();
    let r = parse(&first, &mut f).unwrap();
    assert_eq!(r.get(96), Some(&b"x\x01y"[..]));
}

#[test]
fn encoder_body_length_digit_boundaries() {
    // Bodies crossing 1-, 2-, 3- and 4-digit BodyLengths all frame and parse.
    let mut enc = Encoder::new("FIXT.1.1");
    let mut f = Fields::default();
    for n in [0usize, 1, 3, 4, 5, 85, 86, 94, 95, 96, 990, 995, 1000, 3000] {
        enc.begin(b"B");
        if n > 0 {
            enc.field(58, &vec![b'a'; n]);
        }
        let m = enc.finish();
        assert_eq!(frame_len(m, 1 << 20), Ok(Some(m.len())), "n={n}");
        let r = parse(m, &mut f).unwrap();
        assert_eq!(
            r.get(58).map(<[u8]>::len),
            if n > 0 { Some(n) } else { None }
        );
    }
}

#[test]
fn timestamps_format_and_parse() {
    let t = 1_710_495_000_123_456_789u64; // 2024-03-15T09:30:00.123456789Z
    let cases = [
        (TimestampPrecision::Seconds, "20240315-09:30:00"),
        (TimestampPrecision::Millis, "20240315-09:30:00.123"),
        (TimestampPrecision::Micros, "20240315-09:30:00.123456"),
        (TimestampPrecision::Nanos, "20240315-09:30:00.123456789"),
    ];
    for (p, s) in cases {
        let mut out = Vec::new();
        write_utc_timestamp(&mut out, t, p);
        assert_eq!(out, s.as_bytes());
        let back = parse_utc_timestamp(s.as_bytes()).unwrap();
        assert_eq!(back, t - t % 10u64.pow(9 - p.digits() as u32));
        assert_eq!(TimestampPrecision::from_digits(p.digits()), Some(p));
    }
    let mut out = Vec::new();
    write_utc_timestamp(&mut out, 0, TimestampPrecision::Millis);
    assert_eq!(out, b"19700101-00:00:00.000");
    out.clear();
    write_utc_timestamp(&mut out, u64::MAX, TimestampPrecision::Nanos);
    assert_eq!(out, b"25540721-23:34:33.709551615");
    assert_eq!(parse_utc_timestamp(&out), Some(u64::MAX));
    // Leap day, end of a leap year.
    assert_eq!(
        parse_utc_timestamp(b"20240229-23:59:59"),
        Some(1_709_251_199_000_000_000)
    );
    assert_eq!(
        parse_utc_timestamp(b"20241231-00:00:00"),
        Some(1_735_603_200_000_000_000)
    );
    // A leap second is accepted (as the next minute's first second).
    assert_eq!(
        parse_utc_timestamp(b"20161231-23:59:60"),
        parse_utc_timestamp(b"20170101-00:00:00")
    );
    for bad in [
        &b"20240230-00:00:00"[..],
        b"20230229-00:00:00",
        b"20241301-00:00:00",
        b"20240001-00:00:00",
        b"20240100-00:00:00",
        b"20240101-24:00:00",
        b"20240101-00:60:00",
        b"20240101-00:00:61",
        b"20240101 00:00:00",
        b"20240101-00:00:00.",
        b"20240101-00:00:00.12",
        b"20240101-00:00:00.1234",
        b"20240101-00:00:00,123",
        b"2024010-00:00:00.123",
        b"19691231-23:59:59",
        b"99991231-23:59:59",
        b"2024+101-00:00:00",
        b"",
    ] {
        assert_eq!(
            parse_utc_timestamp(bad),
            None,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(
        parse_utc_date_only(b"20240315"),
        Some(1_710_460_800_000_000_000)
    );
    assert_eq!(parse_utc_date_only(b"2024031"), None);
    assert_eq!(parse_utc_time_only(b"09:30:00.5"), None);
    assert_eq!(
        parse_utc_time_only(b"09:30:00.500"),
        Some(34_200_500_000_000)
    );
    let mut out = Vec::new();
    write_utc_date_only(&mut out, t);
    out.push(b' ');
    write_utc_time_only(&mut out, t, TimestampPrecision::Millis);
    assert_eq!(out, b"20240315 09:30:00.123");
}

#[test]
fn default_precision_per_begin_string() {
    use TimestampPrecision::*;
    assert_eq!(TimestampPrecision::default_for("FIX.4.0"), Seconds);
    assert_eq!(TimestampPrecision::default_for(b"FIX.4.1"), Seconds);
    assert_eq!(TimestampPrecision::default_for("FIX.4.2"), Millis);
    assert_eq!(TimestampPrecision::default_for("FIX.4.4"), Millis);
    assert_eq!(TimestampPrecision::default_for("FIXT.1.1"), Millis);
    assert_eq!(TimestampPrecision::default(), Millis);
}

/// Whether `t` is the length field of one of the standard data fields (their data tag
/// is the length tag + 1, or - 4 for Signature 89 / SignatureLength 93).
fn is_length_tag(t: u32) -> bool {
    data_length_tag(t + 1) == Some(t) || (t >= 4 && data_length_tag(t - 4) == Some(t))
}

/// Strategy: a random field list (tag, value) avoiding the framing tags and the data
/// tags/length tags, with values free of SOH and non-empty.
fn field_list() -> impl Strategy<Value = Vec<(u32, Vec<u8>)>> {
    let tag = (1u32..100_000).prop_filter("not a framing or data tag", |t| {
        ![8, 9, 10, 35].contains(t) && data_length_tag(*t).is_none() && !is_length_tag(*t)
    });
    let value = proptest::collection::vec(any::<u8>().prop_filter("no SOH", |b| *b != SOH), 1..40);
    proptest::collection::vec((tag, value), 0..30)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Encode then frame and parse gives back the same fields, BodyLength and CheckSum
    /// agree with an independent count, and data fields with SOH survive.
    #[test]
    fn encode_parse_round_trip(
        fields in field_list(),
        msg_type in proptest::collection::vec(b'0'..=b'z', 1..3),
        data in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..30)),
        begin in prop_oneof![Just("FIX.4.2"), Just("FIX.4.4"), Just("FIXT.1.1")],
    ) {
        let mut enc = Encoder::new(begin);
        enc.set_header_fields(&[(49, b"S"), (56, b"T")]);
        enc.begin(&msg_type);
        for (t, v) in &fields {
            enc.field(*t, v);
        }
        if let Some(d) = &data {
            enc.field_data(95, 96, d);
        }
        let m = enc.finish().to_vec();
        prop_assert_eq!(frame_len(&m, usize::MAX), Ok(Some(m.len())));
        let mut fs = Fields::default();
        let r = parse(&m, &mut fs).unwrap();
        prop_assert_eq!(r.begin_string(), begin.as_bytes());
        prop_assert_eq!(r.msg_type(), &msg_type[..]);
        let got: Vec<(u32, Vec<u8>)> = r.fields()[5..r.fields().len() - 1]
            .iter()
            .map(|f| (f.tag, r.value(f).to_vec()))
            .collect();
        let mut want = fields.clone();
        if let Some(d) = &data {
            want.push((95, d.len().to_string().into_bytes()));
            want.push((96, d.clone()));
        }
        prop_assert_eq!(got, want);
        // Independent BodyLength / CheckSum check.
        let body_start = m.windows(4).position(|w| w == b"\x0135=").unwrap() + 1;
        let trailer = m.len() - 7;
        prop_assert_eq!(r.get_u64(9), Some((trailer - body_start) as u64));
        let sum: u32 = m[..trailer].iter().map(|&b| b as u32).sum();
        prop_assert_eq!(r.get_u64(10), Some(u64::from(sum % 256)));
        prop_assert_eq!(&m[trailer..trailer + 3], b"10=");
    }

    /// Any split of a stream of encoded messages frames to the same messages.
    #[test]
    fn random_splits_frame_identically(
        lists in proptest::collection::vec(field_list(), 1..4),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut enc = Encoder::new("FIX.4.4");
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for l in &lists {
            enc.begin(b"8");
            for (t, v) in l {
                enc.field(*t, v);
            }
            let m = enc.finish().to_vec();
            stream.extend_from_slice(&m);
            want.push(m);
        }
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut prev = 0;
        for p in points {
            chunks.push(&stream[prev..p]);
            prev = p;
        }
        chunks.push(&stream[prev..]);
        prop_assert_eq!(frame_chunks(chunks), want);
    }

    /// Arbitrary bytes never make frame_len or parse panic, and frame_len's answers
    /// stay within the buffer.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), max in 0usize..1000) {
        check_no_panic(&bytes, max);
    }

    /// Valid messages with random byte corruptions never panic either (this reaches the
    /// deeper parser paths that random bytes rarely get to).
    #[test]
    fn corrupted_messages_never_panic(
        fields in field_list(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut enc = Encoder::new("FIX.4.4");
        enc.begin(b"D");
        for (t, v) in &fields {
            enc.field(*t, v);
        }
        enc.field_data(95, 96, b"a\x01b");
        let mut m = enc.finish().to_vec();
        for (i, b) in edits {
            let i = i.index(m.len());
            m[i] = b;
        }
        check_no_panic(&m, MAX_LEN);
    }
}

fn check_no_panic(bytes: &[u8], max: usize) {
    let mut f = Fields::default();
    let mut buf = bytes;
    while !buf.is_empty() {
        match frame_len(buf, max) {
            Ok(Some(n)) => {
                assert!(n <= buf.len() && n <= max && n > 0);
                let _ = parse(&buf[..n], &mut f);
                buf = &buf[n..];
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.skip() >= 1 && e.skip() <= buf.len(), "{e:?}");
                buf = &buf[e.skip()..];
            }
        }
    }
    if let Ok(m) = parse(bytes, &mut f) {
        for fl in m.fields() {
            let _ = m.value(fl);
        }
    }
    let _ = parse_unchecked(bytes, &mut f);
    let _ = parse_utc_timestamp(bytes);
}
