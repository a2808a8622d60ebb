//! Log and terminal injection through a client's HELLO name, against the real router
//! binary: a name holding a line break forged a line in the router's text log ("...
//! ERROR spool failed; data lost"), and ESC/OSC bytes in a name reached an admin's
//! terminal through `tickwire stats`. A HELLO name with a control character is now a
//! malformed frame (docs/protocol.md 4.1): that client gets the fatal ERROR, everyone
//! else carries on, and neither the log nor `tickwire stats` shows the name.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{run_cli, Got, Raw, RouterProc};
use tickwire_wire::frame::{self, ErrorCode, PROTOCOL_VERSION};

const T: Duration = Duration::from_secs(10);

#[test]
fn a_hello_name_with_control_characters_is_refused_and_other_clients_carry_on() {
    let (r, log) = RouterProc::start_logged(&["--no-guaranteed"]);
    let mut sub = Raw::hello(r.addr, "Zürich-sub");
    sub.subscribe(1, "md/>");
    assert_eq!(sub.next(T), Ok(Got::Ack(1)));

    for (name, reason) in [
        (
            "feed\n2026-12-04T00:00:00Z ERROR spool failed; data lost",
            "control character U+000A at byte 4",
        ),
        ("\x1b]0;owned\x07evil", "control character U+001B at byte 0"),
        ("csi\u{9b}2J", "control character U+009B at byte 3"),
        ("del\x7f", "control character U+007F at byte 3"),
    ] {
        let mut evil = common::Raw::connect(r.addr);
        let mut b = Vec::new();
        frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
        evil.send(&b);
        let text = evil.expect_fatal(ErrorCode::MALFORMED_FRAME);
        assert!(text.contains(reason), "{name:?}: {text}");
        assert!(!text.chars().any(char::is_control), "{text:?}");
    }

    // The subscriber was never disturbed, and a new client is admitted as before.
    let mut publ = Raw::hello(r.addr, "pub 東京");
    publ.publish("md/x", b"after the attacks");
    match sub.next(T) {
        Ok(Got::Message { topic, payload, .. }) => {
            assert_eq!(topic, "md/x");
            assert_eq!(payload, b"after the attacks");
        }
        other => panic!("expected the message, got {other:?}"),
    }

    // The refusals are logged with their reason, and the forged line never appears.
    let line = log
        .wait_for(&["U+000A at byte 4"], T)
        .expect("the refusal in the log");
    assert!(line.contains("malformed"), "{line}");
    assert_eq!(log.count(&["spool failed"]), 0, "{}", log.text());
    assert!(!log.text().contains('\x1b'), "{}", log.text());

    // `tickwire stats` lists the good clients by name and none of the refused ones.
    let (st, out, err) = run_cli(&["stats", "--router", &r.addr_str()], T);
    assert!(st.success(), "stats: {st}\n{out}\n{err}");
    assert!(out.contains("Zürich-sub"), "{out}");
    assert!(out.contains("pub 東京"), "{out}");
    assert!(
        !out.contains("evil") && !out.contains("spool failed"),
        "{out}"
    );
    assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
    assert!(total(&r, "disconnects_error") >= 4);
}

/// The router's `disconnects_error` total, from `tickwire stats --json`.
fn total(r: &RouterProc, key: &str) -> u64 {
    common::u_at(
        &common::stats_json(&r.addr_str()),
        &["router", "totals", key],
    )
}

/// Hostile-input pass: a name without control characters could still forge the log's
/// fields (`name=x addr=10.6.6.6:443 user="root"` read as that client's address and
/// user) or reorder a line (U+202E right-to-left override, U+2028 line separator). The
/// log now quotes and escapes the name; `tickwire stats` escapes the bidi controls and
/// separators.
#[test]
fn a_hello_name_cannot_forge_log_fields_or_reorder_lines() {
    let (r, log) = RouterProc::start_logged(&["--no-guaranteed"]);
    let forged = r#"x addr=10.6.6.6:443 user="root" reason=ok"#;
    let bidi = "feed\u{202e}gnp.exe\u{2028}tail";
    let mut a = Raw::hello(r.addr, forged);
    let mut b = Raw::hello(r.addr, bidi);
    a.subscribe(1, "t");
    assert_eq!(a.next(T), Ok(Got::Ack(1)));
    b.subscribe(1, "t");
    assert_eq!(b.next(T), Ok(Got::Ack(1)));

    let line = log
        .wait_for(&["client connected", "10.6.6.6"], T)
        .expect("the forged name's connect line");
    assert!(
        line.contains(r#"name="x addr=10.6.6.6:443 user=\"root\" reason=ok""#),
        "{line}"
    );
    let line = log
        .wait_for(&["client connected", "gnp.exe"], T)
        .expect("the bidi name's connect line");
    assert!(line.contains(r"feed\u{202e}gnp.exe\u{2028}tail"), "{line}");
    assert!(!log.text().contains('\u{202e}'), "{}", log.text());
    assert!(!log.text().contains('\u{2028}'), "{}", log.text());

    let (st, out, err) = run_cli(&["stats", "--router", &r.addr_str()], T);
    assert!(st.success(), "stats: {st}\n{out}\n{err}");
    // (The table cuts names at 20 characters.)
    assert!(out.contains(r"feed\u{202e}gnp.exe"), "{out}");
    assert!(
        !out.contains('\u{202e}') && !out.contains('\u{2028}'),
        "{out}"
    );
}
