//! FIX session-layer test cases 1S/1B (logon as acceptor / initiator) and the logon
//! rules around them: ResetSeqNumFlag, ResetOnLogon, DefaultApplVerID, first message
//! not a Logon, logon timeout, wrong CompIDs, duplicate logon, initiator reconnect.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;

use session_harness::*;
use tickwire_fix::session::{Output, Role, SessionConfig};
use tickwire_fix::store::MessageStore;
use tickwire_rt::UtcNanos;

#[test]
fn case_1s_logon_as_acceptor_answers_with_the_initiators_heartbeat_interval() {
    let mut h = Harness::acceptor("FIX.4.4");
    assert_eq!(h.connect(), vec![]);
    let (logon, out) = h.recv_kept("A", 1, "98=0|108=45|");
    assert_eq!(
        actions(&out),
        vec![
            Act::FromAdmin(pretty(&logon)),
            Act::Send(format!("35=A|{}98=0|108=45|", h.hdr(1))),
            Act::LoggedOn,
        ]
    );
    assert_eq!(
        notes(&out),
        vec!["Received logon request", "Responding to logon request"]
    );
    assert_eq!(h.seqs(), (2, 2));
    assert_eq!(h.s.heart_bt_int(), 45);
}

#[test]
fn case_1b_logon_as_initiator_sends_logon_and_accepts_the_answer() {
    let mut h = Harness::initiator("FIX.4.2");
    // Not connected: the session asks its driver to connect.
    assert_eq!(h.advance(0), vec![Act::Connect]);
    let out = h.connect();
    assert_eq!(
        actions(&out),
        vec![Act::Send(format!("35=A|{}98=0|108=30|", h.hdr(1)))]
    );
    let (answer, out) = h.recv_kept("A", 1, "98=0|108=30|");
    assert_eq!(
        actions(&out),
        vec![Act::FromAdmin(pretty(&answer)), Act::LoggedOn]
    );
    assert_eq!(notes(&out), vec!["Received logon response"]);
    assert_eq!(h.seqs(), (2, 2));
}

#[test]
fn case_1s_logon_with_too_high_seq_is_answered_then_gap_requested() {
    let mut h = Harness::connected_acceptor("FIX.4.4");
    let out = h.recv_seq("A", 5, "98=0|108=30|");
    assert_eq!(
        sends(&out),
        vec![
            format!("35=A|{}98=0|108=30|", h.hdr(1)),
            format!("35=2|{}7=1|16=0|", h.hdr(2)),
        ]
    );
    assert!(out.contains(&Act::LoggedOn));
    assert!(noted(
        &out,
        "MsgSeqNum too high, expecting 1 but received 5"
    ));
    assert_eq!(h.seqs(), (3, 1));
    // The counterparty gap-fills 1..4; the queued Logon (5) is then consumed.
    let out = h.recv_seq("4", 1, &format!("43=Y|122={}|36=5|123=Y|", ts(h.now)));
    assert_eq!(sends(&out), Vec::<String>::new());
    assert!(noted(&out, "Processing QUEUED message: 5"));
    assert_eq!(h.seqs(), (3, 6));
}

#[test]
fn logon_reset_seq_num_flag_initiator_with_reset_on_logon_sends_141_and_restarts_at_1() {
    let mut h = Harness::with("FIX.4.4", Role::Initiator, |c| c.reset_on_logon = true);
    h.set_seqs(10, 20);
    let out = h.connect();
    assert_eq!(
        sends(&out),
        vec![format!("35=A|{}98=0|108=30|141=Y|", h.hdr(1))]
    );
    let out = h.recv("A", "98=0|108=30|141=Y|");
    assert!(out.contains(&Act::LoggedOn));
    assert_eq!(sends(&out), Vec::<String>::new(), "no second Logon");
    assert_eq!(h.seqs(), (2, 2));
}

#[test]
fn logon_reset_seq_num_flag_received_by_acceptor_resets_and_echoes_141() {
    let mut h = Harness::acceptor("FIX.4.4");
    h.set_seqs(7, 9);
    h.connect();
    let out = h.recv("A", "98=0|108=30|141=Y|");
    assert_eq!(
        sends(&out),
        vec![format!("35=A|{}98=0|108=30|141=Y|", h.hdr(1))]
    );
    assert!(noted(
        &out,
        "Logon contains ResetSeqNumFlag=Y, reseting sequence numbers to 1"
    ));
    assert_eq!(h.seqs(), (2, 2));
}

#[test]
fn logon_reset_on_logon_acceptor_resets_silently() {
    let mut h = Harness::with("FIX.4.4", Role::Acceptor, |c| c.reset_on_logon = true);
    h.set_seqs(7, 9);
    h.connect();
    let out = h.recv("A", "98=0|108=30|");
    // QuickFIX only echoes 141=Y when it received it.
    assert_eq!(sends(&out), vec![format!("35=A|{}98=0|108=30|", h.hdr(1))]);
    assert_eq!(h.seqs(), (2, 2));
}

#[test]
fn logon_fixt_sends_default_appl_ver_id_and_requires_it() {
    let mut h = Harness::with("FIXT.1.1", Role::Initiator, |c| {
        c.default_appl_ver_id = "9".to_owned()
    });
    let out = h.connect();
    assert_eq!(
        sends(&out),
        vec![format!("35=A|{}98=0|108=30|1137=9|", h.hdr(1))]
    );

    // An acceptor refuses a FIXT Logon without DefaultApplVerID: it cannot reject
    // before logon, so it disconnects.
    let mut h = Harness::connected_acceptor("FIXT.1.1");
    let out = h.recv("A", "98=0|108=30|");
    assert_eq!(actions(&out), vec![Act::Disconnect]);
    assert!(noted(&out, "Required field missing from logon"));
    let out = h.recv_seq("A", 1, "98=0|108=30|1137=9|");
    assert_eq!(out, vec![], "a disconnected session ignores input");
}

#[test]
fn logon_first_message_not_a_logon_disconnects_the_acceptor() {
    let mut h = Harness::connected_acceptor("FIX.4.4");
    let out = h.recv("0", "");
    assert_eq!(
        out,
        vec![
            Act::Note("Logon state is not valid for message".to_owned()),
            Act::Note("Disconnecting".to_owned()),
            Act::Disconnect,
        ]
    );
    assert!(!h.s.is_connected());
}

#[test]
fn logon_timeout_disconnects_the_initiator() {
    let mut h = Harness::connected_initiator("FIX.4.4");
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 10 * NANOS)));
    h.assert_gives_up(9, 1, "Timed out waiting for logon response");
}

#[test]
fn logon_timeout_disconnects_a_silent_acceptor_connection() {
    let mut h = Harness::connected_acceptor("FIX.4.4");
    assert_eq!(h.advance(9), vec![]);
    assert_eq!(actions(&h.advance(1)), vec![Act::Disconnect]);
}

#[test]
fn logon_with_wrong_comp_ids_disconnects_without_logging_on() {
    let mut h = Harness::connected_acceptor("FIX.4.4");
    let raw = h.build_from("XX", "TW", "A", 1, h.now, "98=0|108=30|");
    let out = h.feed(&raw);
    assert_eq!(actions(&out), vec![Act::Disconnect]);
    assert!(noted(&out, "Message 1 Rejected: CompID problem"));
    assert!(noted(&out, "Tried to send a reject while not logged on"));
}

#[test]
fn logon_duplicate_while_logged_on_disconnects() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    let out = h.recv("A", "98=0|108=30|");
    assert_eq!(actions(&out), vec![Act::Disconnect, Act::LoggedOut]);
    assert!(noted(&out, "Logon state is not valid for message"));
}

#[test]
fn logon_response_without_request_disconnects_initiator() {
    // An initiator that has not sent its Logon yet (disabled) gets one anyway.
    let mut h = Harness::initiator("FIX.4.4");
    h.s.logout(UtcNanos(h.now), None);
    h.connect();
    let out = h.recv("A", "98=0|108=30|");
    assert_eq!(actions(&out), vec![Act::Disconnect]);
    assert_eq!(notes(&out)[0], "Session is not enabled for logon");
}

#[test]
fn initiator_reconnects_every_reconnect_interval() {
    let mut h = Harness::with("FIX.4.4", Role::Initiator, |c| c.reconnect_interval = 30);
    // Before any call the session has seen no time: "now" is due.
    assert!(h.s.poll_timeout().is_some_and(|d| d <= UtcNanos(T0)));
    assert_eq!(h.advance(0), vec![Act::Connect]);
    // Waiting for the driver: nothing scheduled.
    assert_eq!(h.s.poll_timeout(), None);
    // The attempt fails.
    assert_eq!(h.disconnected(), vec![]);
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 30 * NANOS)));
    assert_eq!(h.advance(29), vec![]);
    assert_eq!(h.advance(1), vec![Act::Connect]);
    h.logon_with("98=0|108=30|");
    // The peer drops the connection: logged out, reconnect 30 s after the last attempt.
    let out = h.disconnected();
    assert_eq!(actions(&out), vec![Act::LoggedOut]);
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 60 * NANOS)));
    assert_eq!(h.advance(30), vec![Act::Connect]);
}

#[test]
fn acceptor_never_asks_to_connect() {
    let mut h = Harness::acceptor("FIX.4.4");
    assert_eq!(h.s.poll_timeout(), None);
    assert_eq!(h.advance(100), vec![]);
    assert!(h.s.poll_event().is_none());
    let _: Option<Output<'_>> = h.s.poll_event();
}

#[test]
fn logon_missing_heart_bt_int_is_left_unanswered_like_quickfix() {
    // Recorded (logon_missing_heartbtint): nothing sent, connection left open.
    let mut h = Harness::connected_acceptor("FIX.4.4");
    let out = h.recv("A", "98=0|");
    assert_eq!(
        out,
        vec![
            Act::Note("Message 1 Rejected: Required tag missing:108".to_owned()),
            Act::Note("Tried to send a reject while not logged on".to_owned()),
        ]
    );
    assert!(h.s.is_connected());
}

#[test]
fn logon_with_reset_seq_num_flag_inside_a_session_resets_both_directions() {
    // Recorded (logon_reset_seqnum_after_traffic, logon_reset_seqnum_wrong_seq).
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    h.recv("0", "");
    h.advance(30);
    assert_eq!(h.seqs(), (3, 3));
    let out = h.recv_seq("A", 5, "98=0|108=30|141=Y|");
    assert_eq!(
        sends(&out),
        vec![format!("35=A|{}98=0|108=30|141=Y|", h.hdr(1))]
    );
    assert_eq!(h.seqs(), (2, 2), "141=Y: the Logon's own 34 is not checked");
}

#[test]
fn initiator_logon_answered_by_logout_answers_and_disconnects() {
    // Recorded (initiator_logon_rejected).
    let mut h = Harness::connected_initiator("FIX.4.4");
    let out = h.recv("5", "58=not allowed|");
    assert_eq!(actions(&out)[1..], h.logged_out(2, "")[..]);
}

#[test]
fn initiator_logon_answered_by_heartbeat_disconnects() {
    // Recorded (initiator_logon_answer_not_logon).
    let mut h = Harness::connected_initiator("FIX.4.4");
    let out = h.recv("0", "");
    assert_eq!(actions(&out), vec![Act::Disconnect, Act::LoggedOut]);
    assert_eq!(notes(&out)[0], "Logon state is not valid for message");
}

#[test]
fn logon_next_expected_msg_seq_num_too_high_logs_out() {
    let mut h = Harness::connected_initiator("FIX.4.4");
    let out = h.recv("A", "98=0|108=30|789=5|");
    let text = "NextExpectedMsgSeqNum too high, expecting 2 but received 5";
    assert_eq!(
        actions(&out)[1..],
        h.logged_out(2, &format!("58={text}|"))[..]
    );
}

#[test]
fn logon_next_expected_msg_seq_num_too_low_triggers_retransmission() {
    let mut h = Harness::with("FIX.4.4", Role::Acceptor, |c| {
        c.send_next_expected_msg_seq_num = true
    });
    h.s.store_mut().set_next_sender_seq(4).unwrap();
    h.connect();
    let out = h.recv("A", "98=0|108=30|789=2|");
    let now = ts(h.now);
    assert_eq!(
        sends(&out),
        vec![
            format!("35=A|{}98=0|108=30|789=2|", h.hdr(4)),
            format!("35=4|34=2|43=Y|49=TW|52={now}|56=CP|122={now}|36=5|123=Y|"),
        ]
    );
    assert!(h.s.is_logged_on());
}

#[test]
fn logon_extra_fields_such_as_username_and_password_are_written_in_tag_order() {
    let mut cfg = Harness::config("FIX.4.4", Role::Initiator);
    cfg.reset_on_logon = true;
    cfg.logon_fields = vec![(554, "secret".to_owned()), (553, "trader".to_owned())];
    let mut h = Harness::new(cfg);
    let out = h.connect();
    h.assert_sends_one(&out, "A", 1, "98=0|108=30|141=Y|553=trader|554=secret|");
    let mut bad = Harness::config("FIX.4.4", Role::Initiator);
    bad.logon_fields = vec![(108, "5".to_owned())];
    assert!(bad.check().is_err());
}

#[test]
fn logon_initiator_with_reset_on_logout_or_on_disconnect_at_seq_1_sends_141() {
    // QuickFIX shouldSendReset(): any of ResetOnLogon/Logout/Disconnect, both
    // sequence numbers at 1, FIX.4.1 or later.
    let only_logout: fn(&mut SessionConfig) = |c| c.reset_on_logout = true;
    let only_disconnect: fn(&mut SessionConfig) = |c| c.reset_on_disconnect = true;
    for change in [only_logout, only_disconnect] {
        let mut h = Harness::with("FIX.4.4", Role::Initiator, change);
        let out = h.connect();
        assert_eq!(
            sends(&out),
            vec![format!("35=A|{}98=0|108=30|141=Y|", h.hdr(1))]
        );
    }
}
