//! FIX session-layer test cases 4 (send Heartbeat), 5 (receive Heartbeat) and 6
//! (send TestRequest), driven by the fake clock.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;

use session_harness::*;
use tickwire_rt::UtcNanos;

#[test]
fn case_4a_heartbeat_sent_after_heart_bt_int_of_silence() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 30 * NANOS)));
    assert_eq!(h.advance(29), vec![]);
    let out = h.advance(1);
    assert_eq!(out, vec![Act::Send(format!("35=0|{}", h.hdr(2)))]);
    assert_eq!(h.seqs(), (3, 2));
}

#[test]
fn case_4b_heartbeat_answers_test_request_with_its_test_req_id() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    h.tick_ms(1500);
    let (tr, out) = h.recv_kept("1", 2, "112=ABC 123|");
    assert_eq!(
        out,
        vec![
            Act::FromAdmin(pretty(&tr)),
            Act::Send(format!("35=0|{}112=ABC 123|", h.hdr(2))),
        ]
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn case_5_received_heartbeat_counts_and_resets_the_silence_timer() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    h.advance(20);
    let out = h.recv("0", "");
    assert!(matches!(out.as_slice(), [Act::FromAdmin(_)]), "{out:?}");
    assert_eq!(h.seqs(), (2, 3));
    // Our own heartbeat is still due 30 s after we last sent (T0)...
    assert_eq!(sends(&h.advance(10)), vec![format!("35=0|{}", h.hdr(2))]);
    // ...and no test request at 36 s, because the peer spoke at 20 s.
    assert_eq!(h.advance(6), vec![]);
}

#[test]
fn case_6_test_request_after_1_2_heart_bt_int_then_disconnect_at_2_4() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    h.advance(30); // heartbeat 2
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 36 * NANOS)));
    assert_eq!(h.advance(5), vec![]);
    let out = h.advance(1);
    assert_eq!(
        out,
        vec![
            Act::Send(format!("35=1|{}112=TEST|", h.hdr(3))),
            Act::Note("Sent test request TEST".to_owned()),
        ]
    );
    // No heartbeat while a test request is outstanding; disconnect at 72 s.
    h.assert_gives_up(30, 6, "Timed out waiting for heartbeat");
}

#[test]
fn case_6_test_request_answered_keeps_the_session_up() {
    let mut h = Harness::logged_on_initiator("FIX.4.2");
    h.advance(30);
    let out = h.advance(6);
    assert_eq!(sends(&out), vec![format!("35=1|{}112=TEST|", h.hdr(3))]);
    h.advance(1);
    let out = h.recv("0", "112=TEST|");
    assert!(matches!(out.as_slice(), [Act::FromAdmin(_)]), "{out:?}");
    // Silence again: the next test request comes 36 s after the answer (at 73 s).
    assert_eq!(sends(&h.advance(29)), vec![format!("35=0|{}", h.hdr(4))]);
    assert_eq!(h.advance(6), vec![]);
    assert_eq!(
        sends(&h.advance(1)),
        vec![format!("35=1|{}112=TEST|", h.hdr(5))]
    );
    assert!(h.s.is_logged_on());
}

#[test]
fn heart_bt_int_zero_disables_heartbeats() {
    let mut h = Harness::acceptor("FIX.4.4");
    h.logon_with("98=0|108=0|");
    assert_eq!(h.s.poll_timeout(), None);
    assert_eq!(h.advance(1000), vec![]);
}
