//! The HELLO client name may hold no control character (docs/protocol.md 4.1): a name
//! goes into the router's log lines and onto terminals showing stats, where a line
//! break forged a log line and ESC/OSC bytes reached an admin's terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tickwire_wire::frame::{self, ErrorCode, Frame, FrameError, Kind, PROTOCOL_VERSION};

fn hello(name: &str) -> Vec<u8> {
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
    b
}

fn decoded_name(bytes: &[u8]) -> Result<String, FrameError> {
    match frame::decode(bytes, frame::DEFAULT_MAX_FRAME)? {
        Some((Frame::Hello { name, .. }, n)) => {
            assert_eq!(n, bytes.len());
            Ok(name.to_string())
        }
        other => panic!("not one HELLO: {other:?}"),
    }
}

#[test]
fn a_name_with_a_forged_log_line_is_malformed_and_says_where() {
    let err = decoded_name(&hello("feed\n2026-12-04 ERROR spool failed; data lost")).unwrap_err();
    assert_eq!(
        err,
        FrameError::ControlInName {
            kind: Kind::Hello,
            ch: '\n',
            offset: 4
        }
    );
    assert_eq!(err.code(), ErrorCode::MALFORMED_FRAME);
    let text = err.to_string();
    assert_eq!(
        text,
        "malformed Hello frame: the name holds control character U+000A at byte 4"
    );
}

#[test]
fn c0_del_and_c1_control_characters_are_refused() {
    for (name, ch, offset) in [
        ("\0", '\0', 0),
        ("a\rb", '\r', 1),
        ("tab\there", '\t', 3),
        ("\x1b]0;owned\x07", '\x1b', 0),
        ("x\x7f", '\x7f', 1),
        // C1 CSI (U+009B, two bytes in UTF-8) after a two-byte character.
        ("é\u{9b}31m", '\u{9b}', 2),
        ("\u{85}next line", '\u{85}', 0),
    ] {
        assert_eq!(
            decoded_name(&hello(name)),
            Err(FrameError::ControlInName {
                kind: Kind::Hello,
                ch,
                offset
            }),
            "{name:?}"
        );
    }
}

#[test]
fn the_reason_never_carries_the_raw_character() {
    let err = decoded_name(&hello("a\u{9b}b")).unwrap_err().to_string();
    assert!(err.contains("U+009B at byte 1"), "{err}");
    assert!(!err.chars().any(char::is_control), "{err:?}");
}

#[test]
fn ordinary_names_decode_unchanged() {
    for name in [
        "",
        "feed-1",
        "md handler #2 (primary)",
        "Zürich-Börse",
        "東京-feed",
        "ربح",
        "emoji 📈",
        // Format characters (Cf) and separators are not control characters.
        "a\u{200d}b",
        "a\u{2028}b",
    ] {
        assert_eq!(decoded_name(&hello(name)).as_deref(), Ok(name), "{name:?}");
    }
}

#[test]
fn a_welcome_name_is_not_checked_here() {
    // Only HELLO's rule: a router name is the operator's own (a client shows it).
    let mut b = Vec::new();
    frame::encode_welcome(&mut b, 1, 1024, "r\tx");
    assert!(matches!(
        frame::decode(&b, frame::DEFAULT_MAX_FRAME),
        Ok(Some((Frame::Welcome { .. }, _)))
    ));
}

proptest! {
    #[test]
    fn a_name_decodes_iff_it_has_no_control_character(name in "\\PC{0,8}([\\x00-\\x1f\\x7f\\u{80}-\\u{9f}]\\PC{0,4})?") {
        // Short enough never to be truncated by the encoder (at most 13 chars of
        // at most 4 bytes: 52 bytes).
        let got = decoded_name(&hello(&name));
        match name.char_indices().find(|(_, c)| c.is_control()) {
            None => prop_assert_eq!(got, Ok(name.clone())),
            Some((offset, ch)) => prop_assert_eq!(
                got,
                Err(FrameError::ControlInName { kind: Kind::Hello, ch, offset })
            ),
        }
    }

    #[test]
    fn any_utf8_name_decodes_or_is_refused_as_malformed(name in any::<String>()) {
        let b = hello(&name);
        // Whatever the encoder kept (it truncates to 64 bytes).
        match frame::decode(&b, frame::DEFAULT_MAX_FRAME) {
            Ok(Some((Frame::Hello { name: got, .. }, _))) => {
                prop_assert!(!got.chars().any(char::is_control));
                prop_assert!(name.starts_with(got));
            }
            Err(e) => {
                prop_assert_eq!(e.code(), ErrorCode::MALFORMED_FRAME);
                let control = matches!(e, FrameError::ControlInName { .. });
                prop_assert!(control, "{:?}", e);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
