//! Decodes arbitrary bytes as ITCH 5.0 messages, both as one exact message (`decode`) and
//! as a stream of concatenated messages (`decode_prefix`).
//!
//! Checks, for every message decoded:
//! - no decoder panics;
//! - the message occupies exactly its type's fixed length;
//! - it re-encodes to exactly the bytes it came from, and that decodes to the same value;
//! - `order_ref_of` (the feed handler's look-ahead) reads the same order reference as
//!   the full decoder, and never panics on the raw bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_itch::{decode, decode_prefix, message_len, order_ref_of, DecodeError, Message};

fuzz_target!(|data: &[u8]| {
    let _ = order_ref_of(data);
    if let Ok(m) = decode(data) {
        check(data, &m);
    }
    let mut rest = data;
    loop {
        match decode_prefix(rest) {
            Ok((m, n)) => {
                assert!(n <= rest.len());
                check(&rest[..n], &m);
                rest = &rest[n..];
            }
            Err(DecodeError::Empty) => break,
            Err(DecodeError::Truncated {
                needed, available, ..
            }) => {
                assert!(available < needed);
                break;
            }
            Err(DecodeError::UnknownType(t)) => {
                assert!(message_len(t).is_none());
                break;
            }
            Err(_) => break,
        }
    }
});

fn check(bytes: &[u8], m: &Message) {
    assert_eq!(Some(bytes.len()), message_len(bytes[0]));
    assert_eq!(m.msg_type(), bytes[0]);
    assert_eq!(m.encoded_len(), bytes.len());
    let (out, n) = m.to_bytes().expect("a decoded message re-encodes");
    assert_eq!(&out[..n], bytes);
    assert_eq!(decode(&out[..n]).as_ref(), Ok(m));
    let order_ref = match m {
        Message::AddOrder(o) => Some(o.order_ref),
        Message::AddOrderMpid(o) => Some(o.order_ref),
        Message::OrderExecuted(o) => Some(o.order_ref),
        Message::OrderExecutedWithPrice(o) => Some(o.order_ref),
        Message::OrderCancel(o) => Some(o.order_ref),
        Message::OrderDelete(o) => Some(o.order_ref),
        Message::OrderReplace(o) => Some(o.original_order_ref),
        _ => None,
    };
    assert_eq!(order_ref_of(bytes), order_ref);
}
