//! Edge cases of the frame codec the mutation-testing pass found unchecked by the
//! crate's own tests (docs/testing.md): the ACK kind byte, error-code names and their
//! Debug form, the 64-byte name bound, and truncation of long names at a character
//! boundary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_wire::frame::{self, ErrorCode, Frame, Kind, MAX_NAME_LEN, PROTOCOL_VERSION};

fn one(bytes: &[u8]) -> Frame<'_> {
    let (f, n) = frame::decode(bytes, u32::MAX).unwrap().unwrap();
    assert_eq!(n, bytes.len());
    f
}

#[test]
fn an_ack_decodes_as_an_ack() {
    assert_eq!(Kind::from_u8(0x12), Some(Kind::Ack));
    let mut b = Vec::new();
    frame::encode_ack(&mut b, 77);
    assert_eq!(one(&b), Frame::Ack { request_id: 77 });
}

#[test]
fn every_error_code_has_its_name_and_debug_form() {
    let names = [
        (ErrorCode::NORMAL, "normal"),
        (ErrorCode::INVALID_TOPIC, "invalid-topic"),
        (ErrorCode::INVALID_PATTERN, "invalid-pattern"),
        (ErrorCode::TOO_MANY_CLIENTS, "too-many-clients"),
        (ErrorCode::UNEXPECTED_KIND, "unexpected-kind"),
        (ErrorCode::AUTH_FAILED, "auth-failed"),
        (ErrorCode::PERMISSION_DENIED, "permission-denied"),
    ];
    for (code, name) in names {
        assert_eq!(code.name(), name);
        assert_eq!(format!("{code:?}"), format!("{name}({})", code.0));
    }
}

#[test]
fn a_name_of_exactly_64_bytes_is_accepted_and_65_refused() {
    let name = "n".repeat(MAX_NAME_LEN);
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, &name);
    match one(&b) {
        Frame::Hello { name: got, .. } => assert_eq!(got, name),
        other => panic!("{other:?}"),
    }
    // 65 bytes cannot be encoded (the encoder truncates), so patch the frame by hand.
    b.push(b'n');
    let len = b.len() as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    assert!(
        frame::decode(&b, u32::MAX).is_err(),
        "a 65-byte name was accepted"
    );
}

#[test]
fn a_long_name_is_truncated_at_a_character_boundary() {
    // 40 two-byte characters: 80 bytes, cut to at most 64 on a boundary.
    let name = "é".repeat(40);
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, &name);
    match one(&b) {
        Frame::Hello { name: got, .. } => {
            assert!(got.len() <= MAX_NAME_LEN, "{} bytes", got.len());
            assert_eq!(got, "é".repeat(MAX_NAME_LEN / 2));
        }
        other => panic!("{other:?}"),
    }
}

/// Hostile-input probe: BIND with start "beginning" and a non-zero value was refused as
/// an "unknown start position", which named the wrong field.
#[test]
fn a_bind_from_the_beginning_with_a_value_names_the_value() {
    let mut b = Vec::new();
    tickwire_wire::gm::encode_bind(&mut b, 1, 8, tickwire_wire::gm::Start::Beginning, "q");
    // header 8, request_id 4, window 4, how 2, zeros 6: the value's first byte.
    b[8 + 4 + 4 + 2 + 6] = 5;
    let e = frame::decode(&b, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("takes a value of 0"), "{e}");
    b[8 + 4 + 4] = 7;
    let e = frame::decode(&b, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("unknown start position"), "{e}");
}
