//! Frames and parses arbitrary bytes as a FIX acceptor would receive them.
//!
//! Input: 1 byte choosing `max_len` (64 ..= 4 144, in steps of 16), then the stream.
//!
//! Checks:
//! - `frame_len` never panics; `Ok(Some(n))` has `0 < n <= max_len` and `n <= input`;
//!   errors have `1 <= skip() <= input`, so the resync loop always progresses;
//! - every framed message goes through `parse` and `parse_unchecked` without panicking;
//!   a message `parse` accepts is accepted by `parse_unchecked` with the same fields,
//!   starts with 8/9/35, ends with 10, and every field value lies inside the message;
//! - a parsed message whose tags and BodyLength are written canonically (no leading
//!   zeros, no sign: QuickFIX reads `054=` as tag 54 and the parser follows it, but the
//!   encoder writes `54=`) re-encodes byte for byte with the `Encoder` (so BodyLength
//!   and CheckSum agree with the encoder's one-pass computation);
//! - `parse` on the unframed input never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_fix::codec::{frame_len, parse, parse_unchecked, Encoder, Fields};

fuzz_target!(|data: &[u8]| {
    let Some((&head, mut buf)) = data.split_first() else {
        return;
    };
    let max_len = 64 + 16 * usize::from(head);
    let mut fields = Fields::default();
    let mut fields2 = Fields::default();
    while !buf.is_empty() {
        match frame_len(buf, max_len) {
            Ok(Some(n)) => {
                assert!(n > 0 && n <= max_len && n <= buf.len());
                let raw = &buf[..n];
                let checked = parse(raw, &mut fields);
                let unchecked = parse_unchecked(raw, &mut fields2);
                if let Ok(m) = checked {
                    let u = unchecked.expect("parse_unchecked accepts what parse accepts");
                    assert_eq!(m.fields(), u.fields());
                    let fs = m.fields();
                    assert!(fs.len() >= 4);
                    assert_eq!((fs[0].tag, fs[1].tag, fs[2].tag), (8, 9, 35));
                    assert_eq!(fs[fs.len() - 1].tag, 10);
                    for f in fs {
                        assert!(f.start < f.end && f.end as usize <= n);
                    }
                    // BodyLength with leading zeros parses but the encoder never writes it;
                    // nor a tag written other than in plain decimal.
                    let canonical_len = m.get(9).is_some_and(|v| v.first() != Some(&b'0'))
                        && canonical_tags(raw, fs);
                    if let (Ok(begin), true) =
                        (std::str::from_utf8(m.begin_string()), canonical_len)
                    {
                        let mut enc = Encoder::new(begin);
                        enc.begin(m.msg_type());
                        for f in &fs[3..fs.len() - 1] {
                            enc.field(f.tag, m.value(f));
                        }
                        assert_eq!(enc.finish(), raw);
                    }
                }
                buf = &buf[n..];
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.skip() >= 1 && e.skip() <= buf.len());
                buf = &buf[e.skip()..];
            }
        }
    }
    let _ = parse(&data[1..], &mut fields);
});

/// Every field's tag is written as its number in plain decimal (the text between the
/// previous SOH and the `=` before the value).
fn canonical_tags(raw: &[u8], fs: &[tickwire_fix::codec::Field]) -> bool {
    let mut from = 0usize;
    fs.iter().all(|f| {
        let eq = f.start as usize - 1;
        let ok = raw.get(from..eq) == Some(f.tag.to_string().as_bytes());
        from = f.end as usize + 1;
        ok
    })
}

