//! FIX session-layer test cases 2b/2c/2e/2f (sequence numbers too high / too low,
//! PossDupFlag), 8 (send ResendRequest), 9/10/11 (resend, SequenceReset GapFill and
//! Reset modes) and 19 (simultaneous resend requests).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;

use session_harness::*;
use tickwire_fix::session::{Role, SessionConfig};
use tickwire_rt::UtcNanos;

const ORDER: &str = "11=ORD1|21=1|38=100|40=1|54=1|55=IBM|60=20261120-08:00:00.000|";

fn logged_on_acceptor(cfg: Option<SessionConfig>) -> Harness {
    let mut h = Harness::new(cfg.unwrap_or_else(|| Harness::config("FIX.4.4", Role::Acceptor)));
    h.logon_as_acceptor();
    h
}

#[test]
fn case_2b_8_too_high_queues_and_requests_resend_then_processes_the_queue() {
    let mut h = logged_on_acceptor(None);
    let (m4, out) = h.recv_kept("D", 4, ORDER);
    assert_eq!(
        out,
        vec![
            Act::Note("MsgSeqNum too high, expecting 2 but received 4".to_owned()),
            Act::Send(format!("35=2|{}7=2|16=0|", h.hdr(2))),
            Act::Note("Sent ResendRequest FROM: 2 TO: 0".to_owned()),
        ]
    );
    // Another too-high message: queued, no second request.
    let (m5, out) = h.recv_kept("D", 5, ORDER);
    assert_eq!(
        notes(&out),
        vec![
            "MsgSeqNum too high, expecting 2 but received 5",
            "Already sent ResendRequest FROM: 2 TO: 3.  Not sending another.",
        ]
    );
    assert_eq!(sends(&out), Vec::<String>::new());
    // The counterparty resends 2 and 3; 4 and 5 then come out of the queue.
    let orig = ts(h.now);
    h.tick_ms(10);
    let (m2, out) = h.recv_kept("D", 2, &format!("43=Y|122={orig}|{ORDER}"));
    assert_eq!(actions(&out), vec![Act::FromApp(pretty(&m2))]);
    let (m3, out) = h.recv_kept("D", 3, &format!("43=Y|122={orig}|{ORDER}"));
    assert_eq!(
        actions(&out),
        vec![
            Act::FromApp(pretty(&m3)),
            Act::FromApp(pretty(&m4)),
            Act::FromApp(pretty(&m5)),
        ]
    );
    assert!(noted(
        &out,
        "ResendRequest for messages FROM: 2 TO: 3 has been satisfied."
    ));
    assert!(noted(&out, "Processing QUEUED message: 4"));
    assert_eq!(h.seqs(), (3, 6));
}

#[test]
fn case_8_resend_request_before_fix42_uses_end_seq_no_999999() {
    let mut h = Harness::logged_on_acceptor("FIX.4.1");
    let out = h.recv_seq("D", 3, ORDER);
    // FIX.4.1 SendingTime has no milliseconds.
    let hdr = h.hdr(2).replace(".000", "");
    assert_eq!(sends(&out), vec![format!("35=2|{hdr}7=2|16=999999|")]);
}

#[test]
fn case_8_resend_request_chunked_by_resend_request_chunk_size() {
    let mut cfg = Harness::config("FIX.4.4", Role::Acceptor);
    cfg.resend_request_chunk_size = 2;
    let mut h = logged_on_acceptor(Some(cfg));
    // Gap 2..=6.
    let out = h.recv_seq("D", 7, ORDER);
    assert_eq!(sends(&out), vec![format!("35=2|{}7=2|16=3|", h.hdr(2))]);
    let dup = |h: &mut Harness, seq| {
        let extra = format!("43=Y|122={}|{ORDER}", ts(h.now));
        h.recv_seq("D", seq, &extra)
    };
    assert_eq!(sends(&dup(&mut h, 2)), Vec::<String>::new());
    assert_eq!(
        sends(&dup(&mut h, 3)),
        vec![format!("35=2|{}7=4|16=5|", h.hdr(3))]
    );
    assert_eq!(sends(&dup(&mut h, 4)), Vec::<String>::new());
    assert_eq!(
        sends(&dup(&mut h, 5)),
        vec![format!("35=2|{}7=6|16=6|", h.hdr(4))]
    );
    let out = dup(&mut h, 6);
    assert_eq!(sends(&out), Vec::<String>::new());
    assert!(noted(
        &out,
        "ResendRequest for messages FROM: 6 TO: 6 has been satisfied."
    ));
    // The queued 7 was processed.
    assert_eq!(h.seqs(), (5, 8));
}

#[test]
fn case_2c_too_low_without_poss_dup_logs_out_with_quickfix_text_and_disconnects() {
    let mut h = logged_on_acceptor(None);
    h.recv("D", ORDER);
    h.recv("D", ORDER);
    h.recv("D", ORDER);
    assert_eq!(h.seqs(), (2, 5));
    let out = h.recv_seq("D", 3, ORDER);
    assert_eq!(
        actions(&out),
        vec![
            Act::Send(format!(
                "35=5|{}58=MsgSeqNum too low, expecting 5 but received 3|",
                h.hdr(2)
            )),
            Act::Disconnect,
            Act::LoggedOut,
        ]
    );
}

#[test]
fn case_2e_too_low_with_poss_dup_is_ignored() {
    let mut h = logged_on_acceptor(None);
    h.recv("D", ORDER);
    h.recv("D", ORDER);
    let orig = ts(h.now);
    h.tick_ms(5);
    let out = h.recv_seq("D", 2, &format!("43=Y|122={orig}|{ORDER}"));
    assert_eq!(out, vec![]);
    assert_eq!(h.seqs(), (2, 4));
    assert!(h.s.is_logged_on());
}

#[test]
fn case_2f_poss_dup_without_orig_sending_time_is_rejected() {
    let mut h = logged_on_acceptor(None);
    h.recv("D", ORDER);
    h.recv("D", ORDER);
    let out = h.recv_seq("D", 2, &format!("43=Y|{ORDER}"));
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=2|58=Required tag missing|371=122|372=D|373=1|",
    );
    // The duplicate's number was not the expected one: nothing consumed.
    assert_eq!(h.seqs(), (3, 4));
}

#[test]
fn case_2f_orig_sending_time_after_sending_time_is_rejected_and_logged_out() {
    let mut h = logged_on_acceptor(None);
    h.recv("D", ORDER);
    h.recv("D", ORDER);
    let later = ts(h.now + 5 * NANOS);
    let out = h.recv_seq("D", 2, &format!("43=Y|122={later}|{ORDER}"));
    h.assert_sending_time_rejected(&out);
}

#[test]
fn case_9_resend_request_answered_with_poss_dup_resends_and_collapsed_gap_fills() {
    let mut h = logged_on_acceptor(None);
    let t_send = h.now;
    assert_eq!(
        h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x0155=IBM\x01")
            .unwrap(),
        2
    );
    assert_eq!(
        h.s.send_app(UtcNanos(h.now), b"D", b"11=B\x0155=IBM\x01")
            .unwrap(),
        3
    );
    h.drain();
    h.advance(30); // heartbeat 4
    h.advance(30); // heartbeat 5
    assert_eq!(
        h.s.send_app(UtcNanos(h.now), b"D", b"11=C\x0155=IBM\x01")
            .unwrap(),
        6
    );
    let t_c = h.now;
    h.drain();
    h.tick_ms(250);
    let out = h.recv("2", "7=1|16=0|");
    let now = ts(h.now);
    assert_eq!(
        sends(&out),
        vec![
            format!("35=4|34=1|43=Y|49=TW|52={now}|56=CP|122={now}|36=2|123=Y|"),
            format!(
                "35=D|34=2|43=Y|49=TW|52={now}|56=CP|122={}|11=A|55=IBM|",
                ts(t_send)
            ),
            format!(
                "35=D|34=3|43=Y|49=TW|52={now}|56=CP|122={}|11=B|55=IBM|",
                ts(t_send)
            ),
            format!("35=4|34=4|43=Y|49=TW|52={now}|56=CP|122={now}|36=6|123=Y|"),
            format!(
                "35=D|34=6|43=Y|49=TW|52={now}|56=CP|122={}|11=C|55=IBM|",
                ts(t_c)
            ),
        ]
    );
    // Resending consumes no sequence number; the ResendRequest itself is counted.
    assert_eq!(h.seqs(), (7, 3));
    assert!(noted(&out, "Received ResendRequest FROM: 1 TO: 0"));
    assert!(noted(&out, "Resending Message: 6"));
}

#[test]
fn case_9_resend_request_ending_in_admin_messages_gap_fills_to_the_end() {
    let mut h = logged_on_acceptor(None);
    h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x01").unwrap();
    h.drain();
    h.advance(30); // heartbeat 3
    let out = h.recv("2", "7=2|16=3|");
    let now = ts(h.now);
    assert_eq!(
        sends(&out),
        vec![
            format!("35=D|34=2|43=Y|49=TW|52={now}|56=CP|122={}|11=A|", ts(T0)),
            format!("35=4|34=3|43=Y|49=TW|52={now}|56=CP|122={now}|36=4|123=Y|"),
        ]
    );
}

#[test]
fn case_9_without_persisted_messages_one_gap_fill_answers_the_request() {
    let mut cfg = Harness::config("FIX.4.4", Role::Acceptor);
    cfg.persist_messages = false;
    let mut h = logged_on_acceptor(Some(cfg));
    h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x01").unwrap();
    h.s.send_app(UtcNanos(h.now), b"D", b"11=B\x01").unwrap();
    h.drain();
    let out = h.recv("2", "7=1|16=0|");
    let now = ts(h.now);
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=4|34=1|43=Y|49=TW|52={now}|56=CP|122={now}|36=4|123=Y|"
        )]
    );
}

#[test]
fn case_10_gap_fill_moves_the_expected_number_forward() {
    let mut h = logged_on_acceptor(None);
    let out = h.recv_seq("D", 5, ORDER); // gap 2..4, RR sent, 5 queued
    assert_eq!(sends(&out).len(), 1);
    let (fill, out) = h.recv_kept("4", 2, &format!("43=Y|122={}|36=5|123=Y|", ts(h.now)));
    assert_eq!(actions(&out)[0], Act::FromAdmin(pretty(&fill)));
    assert_eq!(
        actions(&out)[1],
        Act::FromApp(pretty(&h.build("D", 5, ORDER)))
    );
    assert!(noted(&out, "Received SequenceReset FROM: 2 TO: 5"));
    assert_eq!(h.seqs(), (3, 6));
}

#[test]
fn case_10_gap_fill_to_a_lower_number_is_rejected_with_quickfix_text() {
    let mut h = logged_on_acceptor(None);
    h.recv("D", ORDER);
    h.recv("D", ORDER);
    // Expecting 4; a gap fill with MsgSeqNum 4 and NewSeqNo 3.
    let out = h.recv_seq("4", 4, "36=3|123=Y|");
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=4|58=Value is incorrect (out of range) for this tag|372=4|373=5|",
    );
    assert_eq!(h.seqs(), (3, 4));
}

#[test]
fn case_11_sequence_reset_mode_ignores_the_message_sequence_number() {
    let mut h = logged_on_acceptor(None);
    h.recv("D", ORDER);
    // MsgSeqNum 1 is too low, but Reset mode does not check it.
    let out = h.recv_seq("4", 1, "36=20|");
    assert_eq!(sends(&out), Vec::<String>::new());
    assert_eq!(h.seqs(), (2, 20));
    assert!(h.s.is_logged_on());
    // Reset to a lower number than expected: rejected.
    let out = h.recv_seq("4", 99, "36=10|");
    h.assert_sends_one(
        &out,
        "3",
        2,
        "45=99|58=Value is incorrect (out of range) for this tag|372=4|373=5|",
    );
    assert_eq!(h.seqs(), (3, 20));
}

#[test]
fn case_19_simultaneous_resend_requests() {
    // We sent 2 and 3; the peer has missed them and has sent 2..4 that we missed:
    // its ResendRequest arrives with MsgSeqNum 5.
    let mut h = logged_on_acceptor(None);
    h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x01").unwrap();
    h.s.send_app(UtcNanos(h.now), b"D", b"11=B\x01").unwrap();
    h.drain();
    let out = h.recv_seq("2", 5, "7=2|16=0|");
    let now = ts(h.now);
    // Answered at once (ResendRequest is processed whatever its number)...
    assert_eq!(
        sends(&out),
        vec![
            format!("35=D|34=2|43=Y|49=TW|52={now}|56=CP|122={now}|11=A|"),
            format!("35=D|34=3|43=Y|49=TW|52={now}|56=CP|122={now}|11=B|"),
        ]
    );
    // ...and its number not counted: our own request goes out with the next message.
    assert_eq!(h.seqs(), (4, 2));
    let out = h.recv_seq("0", 6, "");
    assert_eq!(sends(&out), vec![format!("35=2|{}7=2|16=0|", h.hdr(4))]);
    // The peer fills 2..5 (its ResendRequest included) and the queued 6 follows.
    let out = h.recv_seq("4", 2, &format!("43=Y|122={now}|36=6|123=Y|"));
    assert!(noted(&out, "Processing QUEUED message: 6"));
    assert_eq!(h.seqs(), (5, 7));
    assert!(h.s.is_logged_on());
}

#[test]
fn case_9_resend_request_beyond_anything_sent_gets_quickfix_gap_fill() {
    // Recorded quirk: 7=50|16=0 with next sender 2 -> 35=4|34=50|...|36=2|123=Y.
    let mut h = logged_on_acceptor(None);
    let out = h.recv("2", "7=50|16=0|");
    let now = ts(h.now);
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=4|34=50|43=Y|49=TW|52={now}|56=CP|122={now}|36=2|123=Y|"
        )]
    );
    assert_eq!(h.seqs(), (2, 3));
}

#[test]
fn case_10_gap_fill_too_low_with_poss_dup_is_ignored_even_without_orig_sending_time() {
    // Recorded (gap_fill_too_low_possdup_without_orig).
    let mut h = logged_on_acceptor(None);
    h.recv("0", "");
    h.recv("0", "");
    let out = h.recv_seq("4", 2, "43=Y|36=3|123=Y|");
    assert_eq!(out, vec![]);
    assert_eq!(h.seqs(), (2, 4));
}

/// Sequence numbers of the `35=<msg_type>` messages in `sends`, with the GapFill's
/// NewSeqNo (36) for SequenceResets.
fn resent(out: &[Act]) -> Vec<(String, u64, u64)> {
    sends(out)
        .iter()
        .map(|m| {
            let get = |tag: &str| {
                m.split('|')
                    .find_map(|f| f.strip_prefix(&format!("{tag}=")[..]))
                    .map(str::to_string)
            };
            let seq = get("34").unwrap().parse().unwrap();
            let new_seq = get("36").map_or(0, |v| v.parse().unwrap());
            (get("35").unwrap(), seq, new_seq)
        })
        .collect()
}

/// Sends orders `11=<i>` for each `i` of `ids` (stored and sent in sequence).
fn send_orders(h: &mut Harness, ids: std::ops::RangeInclusive<u64>) {
    for i in ids {
        h.s.send_app(UtcNanos(h.now), b"D", format!("11={i}\x01").as_bytes())
            .unwrap();
    }
    h.drain();
}

/// Calls `handle_send_room` until the resend in progress is over; returns what it
/// sent and how many steps it took.
fn finish_resend(h: &mut Harness) -> (Vec<Act>, usize) {
    let mut out = Vec::new();
    let mut steps = 0;
    while h.s.resend_pending() {
        assert!(steps < 100, "the resend never ends");
        h.s.handle_send_room(UtcNanos(h.now));
        out.extend(h.drain());
        steps += 1;
    }
    (out, steps)
}

/// A resend of more than 1,024 sequence numbers goes in steps: the first with the
/// ResendRequest, each next one when the driver says the connection has room
/// (`handle_send_room`). Together the steps send what one pass sends: a run of
/// administrative messages across a step boundary is still one gap fill.
#[test]
fn a_long_resend_goes_in_steps_that_together_equal_one_pass() {
    let mut h = logged_on_acceptor(None);
    send_orders(&mut h, 2..=1000);
    // 1001..=1100: our Heartbeats (administrative), the peer's keeping us talking.
    for _ in 0..100 {
        assert_eq!(resent(&h.advance(30))[0].0, "0");
        h.recv("0", "");
    }
    send_orders(&mut h, 1101..=2500);
    assert_eq!(h.seqs().0, 2501);

    let first = h.recv("2", "7=1|16=0|");
    // Seqs 1..=1024: the Logon gap-filled, 2..=1000 resent; the administrative run
    // from 1001 is still open at the step's end.
    let got = resent(&first);
    assert_eq!(got.len(), 1 + 999);
    assert_eq!(got[0], ("4".to_string(), 1, 2));
    assert_eq!(got[999], ("D".to_string(), 1000, 0));
    assert!(h.s.resend_pending());

    let (rest, steps) = finish_resend(&mut h);
    assert_eq!(steps, 2, "1025..=2048 and 2049..=2500");
    let mut all = got;
    all.extend(resent(&rest));
    let mut want = vec![("4".to_string(), 1, 2)];
    want.extend((2..=1000).map(|s| ("D".to_string(), s, 0)));
    want.push(("4".to_string(), 1001, 1101));
    want.extend((1101..=2500).map(|s| ("D".to_string(), s, 0)));
    assert_eq!(all, want);
    // Resending consumes no sequence number.
    assert_eq!(h.seqs().0, 2501);
}

/// Hostile-input pass: a step was bounded by sequence numbers only, so 240 stored
/// orders of 3.9 MB resent in one step held ~1.8 GB and stalled the engine for 4 s.
/// Now a step also ends at the message that brings it to 1 MiB of stored bytes: large
/// messages go a few per step, and the steps together still send what one pass sends.
#[test]
fn a_resend_of_large_messages_goes_in_steps_bounded_by_bytes() {
    let mut h = logged_on_acceptor(None);
    let big = "x".repeat(300_000);
    for _ in 2..=11 {
        h.s.send_app(UtcNanos(h.now), b"D", format!("58={big}\x01").as_bytes())
            .unwrap();
    }
    h.drain();
    assert_eq!(h.seqs().0, 12);

    let first = h.recv("2", "7=1|16=0|");
    // The Logon's gap fill, then 2..=5: the fourth order (~1.2 MB stored) crosses 1 MiB.
    let got = resent(&first);
    assert_eq!(got[0], ("4".to_string(), 1, 2));
    assert_eq!(
        got[1..],
        (2..=5).map(|s| ("D".to_string(), s, 0)).collect::<Vec<_>>()[..]
    );
    assert!(h.s.resend_pending());

    let (rest, steps) = finish_resend(&mut h);
    assert_eq!(steps, 2, "6..=9, then 10..=11");
    let mut all = got;
    all.extend(resent(&rest));
    let mut want = vec![("4".to_string(), 1, 2)];
    want.extend((2..=11).map(|s| ("D".to_string(), s, 0)));
    assert_eq!(all, want);
    assert_eq!(h.seqs().0, 12);
}

/// ResendRequests that arrive during a resend wait their turn, at most eight of
/// them; the ninth and later widen the last one waiting instead of adding work. So
/// a flood of requests costs what eight requests cost, however many there are.
#[test]
fn resend_requests_during_a_resend_wait_and_a_flood_of_them_is_bounded() {
    let mut h = logged_on_acceptor(None);
    send_orders(&mut h, 2..=1500);
    let first = h.recv("2", "7=2|16=0|");
    assert_eq!(resent(&first).len(), 1024, "2..=1025");
    let mut waiting = Vec::new();
    for _ in 0..50 {
        waiting.extend(h.recv("2", "7=5|16=6|"));
    }
    assert!(
        resent(&waiting).is_empty(),
        "nothing sent while one is in progress"
    );
    assert!(noted(
        &waiting,
        "ResendRequest FROM: 5 TO: 6 waits for the resend in progress"
    ));
    let (rest, steps) = finish_resend(&mut h);
    // The rest of the first (1026..=1500), then eight waiting requests of two each.
    assert_eq!(steps, 1 + 8);
    let got = resent(&rest);
    assert_eq!(got.len(), 475 + 8 * 2);
    let fives = got.iter().filter(|(t, s, _)| t == "D" && *s == 5).count();
    assert_eq!(fives, 8);
    assert!(!h.s.resend_pending());
    assert!(h.s.is_logged_on());
}

/// A disconnect ends a resend in progress and drops the requests waiting.
#[test]
fn a_disconnect_ends_the_resend_in_progress() {
    let mut h = logged_on_acceptor(None);
    send_orders(&mut h, 2..=1500);
    h.recv("2", "7=1|16=0|");
    h.recv("2", "7=1|16=0|");
    assert!(h.s.resend_pending());
    h.disconnected();
    assert!(!h.s.resend_pending());
    h.s.handle_send_room(UtcNanos(h.now));
    assert!(resent(&h.drain()).is_empty());
}
