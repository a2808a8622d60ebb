//! FIX session-layer test cases 12 (initiate Logout) and 13 (receive Logout), the
//! Logout timeout and ResetOnLogout / ResetOnDisconnect.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;

use session_harness::*;
use tickwire_fix::session::Role;
use tickwire_rt::UtcNanos;

#[test]
fn case_12_initiated_logout_waits_for_the_answer_then_disconnects() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    h.s.logout(UtcNanos(h.now), Some("end of day"));
    let out = h.drain();
    assert_eq!(
        out,
        vec![
            Act::Note("Initiated logout request".to_owned()),
            Act::Send(format!("35=5|{}58=end of day|", h.hdr(2))),
        ]
    );
    // Messages still arrive until the answer.
    let m = h.build("D", 2, "11=A|");
    assert_eq!(actions(&h.feed(&m)), vec![Act::FromApp(pretty(&m))]);
    let (answer, out) = h.recv_kept("5", 3, "");
    assert_eq!(
        actions(&out),
        vec![
            Act::FromAdmin(pretty(&answer)),
            Act::Disconnect,
            Act::LoggedOut,
        ]
    );
    assert!(noted(&out, "Received logout response"));
    assert_eq!(h.seqs(), (3, 4));
}

#[test]
fn case_12_logout_answer_not_received_disconnects_after_logout_timeout() {
    let mut h = Harness::logged_on_initiator("FIX.4.4");
    h.s.logout(UtcNanos(h.now), None);
    assert_eq!(sends(&h.drain()), vec![format!("35=5|{}", h.hdr(2))]);
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 2 * NANOS)));
    h.assert_gives_up(1, 1, "Timed out waiting for logout response");
    // Disabled by logout(): no reconnection until logon().
    assert_eq!(h.advance(60), vec![]);
    h.s.logon(UtcNanos(h.now));
    assert_eq!(h.advance(0), vec![Act::Connect]);
}

#[test]
fn case_13_received_logout_is_answered_and_the_connection_closed() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    let (logout, out) = h.recv_kept("5", 2, "58=bye|");
    assert_eq!(
        out,
        vec![
            Act::FromAdmin(pretty(&logout)),
            Act::Note("Received logout request".to_owned()),
            Act::Send(format!("35=5|{}", h.hdr(2))),
            Act::Note("Sending logout response".to_owned()),
            Act::Note("Disconnecting".to_owned()),
            Act::Disconnect,
            Act::LoggedOut,
        ]
    );
    assert_eq!(
        h.seqs(),
        (3, 3),
        "sequence numbers kept without ResetOnLogout"
    );
}

#[test]
fn reset_on_logout_restarts_sequence_numbers() {
    let mut h = Harness::logged_on_with("FIX.4.4", Role::Acceptor, |c| c.reset_on_logout = true);
    h.recv("5", "");
    assert_eq!(h.seqs(), (1, 1));
}

#[test]
fn reset_on_disconnect_restarts_sequence_numbers_when_the_connection_drops() {
    let mut h =
        Harness::logged_on_with("FIX.4.4", Role::Acceptor, |c| c.reset_on_disconnect = true);
    h.recv("D", "11=A|");
    assert_eq!(h.seqs(), (2, 3));
    assert_eq!(actions(&h.disconnected()), vec![Act::LoggedOut]);
    assert_eq!(h.seqs(), (1, 1));
}

#[test]
fn logout_before_logon_completes_just_closes_the_connection() {
    let mut h = Harness::connected_initiator("FIX.4.4");
    h.s.logout(UtcNanos(h.now), None);
    assert_eq!(actions(&h.drain()), vec![Act::Disconnect, Act::LoggedOut]);
}
