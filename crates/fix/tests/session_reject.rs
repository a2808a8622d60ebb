//! FIX session-layer test cases 2 and 3 (standard header and trailer checks), 7
//! (receive Reject) and 14 (field-level errors): the exact Reject (35=3) and
//! BusinessMessageReject (35=j) QuickFIX sends, and garbled messages ignored.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;

use session_harness::*;
use tickwire_fix::codec::Encoder;
use tickwire_fix::session::{business_reject, session_reject, SendError};
use tickwire_rt::UtcNanos;

const ORDER: &str = "11=ORD1|21=1|38=100|40=1|54=1|55=IBM|";

fn logged_on(begin: &str) -> Harness {
    let mut h = Harness::acceptor(begin);
    h.logon_as_acceptor();
    h
}

#[test]
fn case_2a_in_sequence_application_message_reaches_the_application() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build("D", 2, ORDER);
    assert_eq!(h.feed(&m), vec![Act::FromApp(pretty(&m))]);
    assert_eq!(h.seqs(), (2, 3));
}

#[test]
fn case_2d_3_garbled_message_bad_checksum_is_ignored() {
    let mut h = logged_on("FIX.4.4");
    let mut m = h.build("D", 2, ORDER);
    let n = m.len();
    m[n - 2] = if m[n - 2] == b'0' { b'1' } else { b'0' }; // corrupt the CheckSum
    let out = h.feed(&m);
    assert_eq!(actions(&out), vec![]);
    assert!(notes(&out)[0].starts_with("Invalid message: CheckSum (10) is"));
    assert_eq!(h.seqs(), (2, 2), "nothing consumed");
    // The same message intact is then accepted.
    let ok = h.build("D", 2, ORDER);
    assert_eq!(actions(&h.feed(&ok)), vec![Act::FromApp(pretty(&ok))]);
}

#[test]
fn case_2d_garbled_message_before_logon_closes_the_connection() {
    let mut h = Harness::connected_acceptor("FIX.4.4");
    let mut m = h.build("A", 1, "98=0|108=30|");
    let n = m.len();
    m[n - 3] = b'9';
    m[n - 2] = b'9';
    let out = h.feed(&m);
    assert_eq!(actions(&out), vec![Act::Disconnect]);
    assert!(noted(&out, "Logon message is not valid"));
}

#[test]
fn case_2g_wrong_begin_string_logs_out() {
    let mut h = logged_on("FIX.4.4");
    let mut e = Encoder::new("FIX.4.2");
    e.begin(b"D");
    e.raw_fields(
        format!("34=2|49=CP|52={}|56=TW|{ORDER}", ts(h.now))
            .replace('|', "\x01")
            .as_bytes(),
    );
    let out = h.feed(e.finish());
    assert_eq!(
        sends(&out),
        vec![format!("35=5|{}58=Incorrect BeginString|", h.hdr(2))]
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn case_2h_wrong_comp_id_is_rejected_then_logged_out() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build_from("CP", "NOTME", "D", 2, h.now, ORDER);
    let out = h.feed(&m);
    assert_eq!(
        sends(&out),
        vec![
            format!("35=3|{}45=2|58=CompID problem|372=D|373=9|", h.hdr(2)),
            format!("35=5|{}", h.hdr(3)),
        ]
    );
    assert_eq!(h.seqs(), (4, 3));
    // The counterparty's Logout answer ends the session.
    let out = h.recv_seq("5", 3, "");
    assert_eq!(actions(&out)[1..], [Act::Disconnect, Act::LoggedOut]);
    assert!(noted(&out, "Received logout response"));
}

#[test]
fn case_2k_sending_time_accuracy_problem_is_rejected_then_logged_out() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build_from("CP", "TW", "D", 2, h.now - 121 * NANOS, ORDER);
    let out = h.feed(&m);
    h.assert_sending_time_rejected(&out);
    // 120 s is still accurate enough.
    let mut h = logged_on("FIX.4.4");
    let m = h.build_from("CP", "TW", "D", 2, h.now - 120 * NANOS, ORDER);
    assert_eq!(actions(&h.feed(&m)), vec![Act::FromApp(pretty(&m))]);
}

#[test]
fn case_2k_check_latency_off_accepts_any_sending_time() {
    let mut cfg = Harness::config("FIX.4.4", tickwire_fix::session::Role::Acceptor);
    cfg.check_latency = false;
    let mut h = Harness::new(cfg);
    h.logon_as_acceptor();
    let m = h.build_from("CP", "TW", "D", 2, h.now - 3600 * NANOS, ORDER);
    assert_eq!(actions(&h.feed(&m)), vec![Act::FromApp(pretty(&m))]);
}

#[test]
fn case_7_received_reject_is_counted_and_passed_on() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build("3", 2, "45=1|58=whatever|");
    assert_eq!(actions(&h.feed(&m)), vec![Act::FromAdmin(pretty(&m))]);
    assert_eq!(h.seqs(), (2, 3));
}

#[test]
fn case_14a_invalid_tag_number_zero_is_rejected() {
    let mut h = logged_on("FIX.4.4");
    let out = h.recv("D", "0=x|11=ORD1|");
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=2|58=Invalid tag number|371=0|372=D|373=0|",
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn case_14a_negative_tag_number_is_written_as_a_c_int_before_fix42() {
    // QuickFIX's acceptance test fix40/14a_BadField: `-1=HI` in a Heartbeat is
    // "Invalid tag number (-1)" (the tag in the text before FIX.4.2), not the
    // number's unsigned bits.
    for begin in ["FIX.4.0", "FIX.4.1"] {
        let mut h = logged_on(begin);
        let out = h.recv("0", "-1=HI|");
        assert_eq!(
            sends(&out),
            vec![format!(
                "35=3|{}45=2|58=Invalid tag number (-1)|",
                hdr_secs(&h, 2)
            )]
        );
    }
}

#[test]
fn reject_reverses_location_ids_from_fix41_as_quickfix() {
    // QuickFIX 1.15.1's reverseRoute swaps 144/145 from FIX.4.1 on (its acceptance
    // test fix41/ReverseRoute); FIX.4.0 has no such fields.
    let mut h = logged_on("FIX.4.1");
    let out = h.recv(
        "D",
        "115=JCD|116=CS|144=CHI|11=|21=1|38=100|40=1|54=1|55=IBM|",
    );
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}128=JCD|129=CS|145=CHI|45=2|58=Tag specified without a value (11)|",
            hdr_secs(&h, 2)
        )]
    );
    let out = h.recv(
        "D",
        "128=JCD|129=CS|145=CHI|11=|21=1|38=100|40=1|54=1|55=IBM|",
    );
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}115=JCD|116=CS|144=CHI|45=3|58=Tag specified without a value (11)|",
            hdr_secs(&h, 3)
        )]
    );
}

/// Our header for sequence number `seq` with SendingTime in whole seconds (FIX.4.0
/// and 4.1 have no milliseconds).
fn hdr_secs(h: &Harness, seq: u64) -> String {
    h.hdr(seq).replace(".000|", "|")
}

#[test]
fn case_14b_missing_header_tag_disconnects_like_quickfix() {
    // Recorded: QuickFIX's verify() fails on the missing field and disconnects
    // without sending anything (missing_sending_time, missing_msgseqnum).
    let mut h = logged_on("FIX.4.4");
    let m = h.build_raw("D", &format!("34=2|49=CP|56=TW|{ORDER}"));
    let out = h.feed(&m);
    assert_eq!(actions(&out), vec![Act::Disconnect, Act::LoggedOut]);
    assert_eq!(notes(&out)[0], "Field not found");
    let mut h = logged_on("FIX.4.4");
    let m = h.build_raw("D", &format!("49=CP|52={}|56=TW|{ORDER}", ts(h.now)));
    assert_eq!(actions(&h.feed(&m)), vec![Act::Disconnect, Act::LoggedOut]);
}

#[test]
fn case_2_msg_seq_num_not_a_number_is_dropped() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build_raw("D", &format!("34=abc|49=CP|52={}|56=TW|{ORDER}", ts(h.now)));
    let out = h.feed(&m);
    assert_eq!(
        out,
        vec![Act::Note("Incorrect data format for value: abc".to_owned())]
    );
    assert_eq!(h.seqs(), (2, 2));
}

#[test]
fn case_14b_required_admin_field_missing_is_rejected() {
    let mut h = logged_on("FIX.4.4");
    let out = h.recv("2", "7=1|");
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=2|58=Required tag missing|371=16|372=2|373=1|",
    );
}

#[test]
fn case_14b_missing_comp_id_in_application_message_gets_business_reject() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build_raw("D", &format!("34=2|56=TW|52={}|{ORDER}", ts(h.now)));
    let out = h.feed(&m);
    h.assert_sends_one(
        &out,
        "j",
        2,
        "45=2|58=Conditionally Required Field Missing (49)|372=D|380=5|",
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn case_14d_tag_without_value_is_rejected() {
    let mut h = logged_on("FIX.4.4");
    let out = h.recv("D", "11=ORD1|58=|");
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=2|58=Tag specified without a value|371=58|372=D|373=4|",
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn case_14f_incorrect_data_format_in_header_is_rejected() {
    let mut h = logged_on("FIX.4.4");
    let m = h.build_raw("D", &format!("34=2|49=CP|52=yesterday|56=TW|{ORDER}"));
    let out = h.feed(&m);
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=2|58=Incorrect data format for value|371=52|372=D|373=6|",
    );
}

#[test]
fn case_14_reject_before_fix42_puts_the_tag_in_the_text() {
    let mut h = logged_on("FIX.4.0");
    let out = h.recv("2", "7=1|");
    let hdr = h.hdr(2).replace(".000", "");
    assert_eq!(
        sends(&out),
        vec![format!("35=3|{hdr}45=2|58=Required tag missing (16)|")]
    );
}

#[test]
fn case_14_fix42_omits_reasons_above_11() {
    let mut h = logged_on("FIX.4.2");
    h.recv("D", ORDER);
    h.s.reject_session(
        UtcNanos(h.now),
        2,
        b"D",
        session_reject::TAG_OUT_OF_ORDER,
        55,
    )
    .unwrap();
    let out = h.drain();
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=2|58=Tag specified out of required order|371=55|372=D|",
    );
    // The application's reject does not consume the rejected message's number again.
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn unsupported_message_type_gets_business_reject_from_fix42_on() {
    let mut h = logged_on("FIX.4.4");
    h.recv("ZZ", "");
    h.s.reject_unsupported(UtcNanos(h.now), 2, b"ZZ").unwrap();
    let out = h.drain();
    h.assert_sends_one(
        &out,
        "j",
        2,
        "45=2|58=Unsupported Message Type|372=ZZ|380=3|",
    );

    let mut h = logged_on("FIX.4.1");
    h.recv("ZZ", "");
    h.s.reject_unsupported(UtcNanos(h.now), 2, b"ZZ").unwrap();
    let out = h.drain();
    let hdr = h.hdr(2).replace(".000", "");
    assert_eq!(
        sends(&out),
        vec![format!("35=3|{hdr}45=2|58=Unsupported message type|")]
    );
}

#[test]
fn business_reject_with_a_field_and_fixt_default_appl_ver_id() {
    let mut h = Harness::acceptor("FIXT.1.1");
    h.logon_with("98=0|108=30|1137=9|");
    h.recv("D", ORDER);
    h.s.reject_business(
        UtcNanos(h.now),
        2,
        b"D",
        business_reject::UNKNOWN_SECURITY,
        55,
    )
    .unwrap();
    let out = h.drain();
    h.assert_sends_one(
        &out,
        "j",
        2,
        "45=2|58=Unknown Security (55)|372=D|380=2|1137=7|",
    );
}

#[test]
fn send_app_refuses_administrative_types_and_rejects_need_a_logon() {
    let mut h = Harness::acceptor("FIX.4.4");
    assert!(matches!(
        h.s.send_app(UtcNanos(h.now), b"A", b""),
        Err(SendError::AdminMsgType(_))
    ));
    assert!(matches!(
        h.s.reject_unsupported(UtcNanos(h.now), 1, b"D"),
        Err(SendError::NotLoggedOn)
    ));
}
