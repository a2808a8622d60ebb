//! FIX session-layer test cases 15 (queue outgoing messages while disconnected) and
//! 18 (PossResend), plus the session schedule (StartTime/EndTime/days/time zone).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;

use chrono::Weekday;
use session_harness::*;
use tickwire_fix::session::{Role, Schedule, SendError, Zone};
use tickwire_rt::UtcNanos;

#[test]
fn case_15_messages_sent_while_disconnected_are_stored_and_recovered_by_resend() {
    let mut h = Harness::logged_on_initiator("FIX.4.4");
    h.disconnected();
    // The application keeps sending: stored under 2 and 3, nothing transmitted.
    let t_send = h.now;
    assert_eq!(h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x01").unwrap(), 2);
    assert_eq!(h.s.send_app(UtcNanos(h.now), b"D", b"11=B\x01").unwrap(), 3);
    assert_eq!(h.drain(), vec![]);
    h.advance(30); // Connect
    h.tick_ms(100);
    let out = h.connect();
    assert_eq!(sends(&out), vec![format!("35=A|{}98=0|108=30|", h.hdr(4))]);
    h.recv("A", "98=0|108=30|"); // the counterparty's 2
                                 // It sees our 4 after 1: it asks for 2..
    h.tick_ms(100);
    let out = h.recv("2", "7=2|16=0|");
    let now = ts(h.now);
    assert_eq!(
        sends(&out),
        vec![
            format!(
                "35=D|34=2|43=Y|49=TW|52={now}|56=CP|122={}|11=A|",
                ts(t_send)
            ),
            format!(
                "35=D|34=3|43=Y|49=TW|52={now}|56=CP|122={}|11=B|",
                ts(t_send)
            ),
            format!("35=4|34=4|43=Y|49=TW|52={now}|56=CP|122={now}|36=5|123=Y|"),
        ]
    );
    assert_eq!(h.seqs(), (5, 4));
}

#[test]
fn case_15_messages_are_refused_when_the_next_logon_resets_sequence_numbers() {
    let mut h = Harness::with("FIX.4.4", Role::Initiator, |c| c.reset_on_logon = true);
    assert!(matches!(
        h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x01"),
        Err(SendError::WouldBeReset)
    ));
    assert_eq!(h.seqs(), (1, 1));
}

#[test]
fn case_18_poss_resend_message_is_delivered_for_the_application_to_judge() {
    let mut h = Harness::logged_on_acceptor("FIX.4.4");
    let (m, out) = h.recv_kept("D", 2, &format!("97=Y|122={}|11=ORD1|55=IBM|", ts(h.now)));
    assert_eq!(out, vec![Act::FromApp(pretty(&m))]);
    assert!(pretty(&m).contains("|97=Y|"));
    assert_eq!(h.seqs(), (2, 3));
}

fn hms(s: &str) -> chrono::NaiveTime {
    Schedule::parse_time(s).unwrap()
}

#[test]
fn schedule_initiator_connects_only_inside_the_window_and_resets_at_its_end() {
    // Window 08:00:30-09:00:00 UTC; the clock starts at 08:00:00.
    let mut cfg = Harness::config("FIX.4.4", Role::Initiator);
    cfg.schedule = Some(Schedule::daily(hms("08:00:30"), hms("09:00:00")));
    cfg.heart_bt_int = 0; // keep the hour quiet
    let mut h = Harness::new(cfg);
    assert_eq!(h.advance(0), vec![]);
    assert_eq!(h.advance(29), vec![]);
    assert_eq!(h.advance(1), vec![Act::Connect]);
    let out = h.connect();
    // The store was created before the window: a new session, reset.
    assert!(noted(
        &out,
        "Session time changed, resetting sequence numbers"
    ));
    h.recv("A", "98=0|108=0|");
    h.s.send_app(UtcNanos(h.now), b"D", b"11=A\x01").unwrap();
    h.drain();
    assert_eq!(h.seqs(), (3, 2));
    assert_eq!(h.advance(3569), vec![]); // 08:59:59
    assert_eq!(h.advance(1), vec![], "EndTime is inclusive"); // 09:00:00
    let out = h.advance(1); // 09:00:01: Logout, disconnect, store reset
    assert_eq!(actions(&out), h.logged_out(3, ""));
    assert_eq!(h.seqs(), (1, 1));
    // No reconnection outside the window.
    assert_eq!(h.advance(60), vec![]);
    assert!(!h.s.is_connected());
}

#[test]
fn schedule_acceptor_refuses_logon_outside_the_window() {
    let mut cfg = Harness::config("FIX.4.4", Role::Acceptor);
    cfg.schedule = Some(
        Schedule::daily(hms("09:00:00"), hms("17:00:00"))
            .in_zone(Zone::Named(chrono_tz::Europe::London)),
    );
    let mut h = Harness::new(cfg);
    h.connect();
    let out = h.recv("A", "98=0|108=30|");
    assert_eq!(actions(&out), vec![Act::Disconnect]);
    assert!(noted(&out, "Received logon outside of valid logon time"));
}

#[test]
fn schedule_weekly_session_keeps_one_store_across_days() {
    // Sunday 17:00 to Friday 16:00 New York time; T0 is Friday 03:00 in New York.
    let mut cfg = Harness::config("FIX.4.4", Role::Acceptor);
    cfg.schedule = Some(
        Schedule::weekly(
            chrono::Weekday::Sun,
            hms("17:00:00"),
            chrono::Weekday::Fri,
            hms("16:00:00"),
        )
        .in_zone(Zone::Named(chrono_tz::America::New_York)),
    );
    let mut h = Harness::new(cfg);
    h.logon_as_acceptor();
    assert_eq!(h.seqs(), (2, 2));
}

#[test]
fn case_15_file_store_restart_continues_the_sequence_and_resends_what_was_queued() {
    use tickwire_fix::session::{Output, Session};
    use tickwire_fix::store::{FileStore, MessageStore, SyncPolicy};
    fn sent<S: MessageStore>(s: &mut Session<S>) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(o) = s.poll_event() {
            if let Output::Send(b) = o {
                v.push(strip(b));
            }
        }
        v
    }
    let dir = tempfile::Builder::new()
        .prefix("tickwire-session-restart-")
        .tempdir()
        .unwrap();
    let cfg = Harness::config("FIX.4.4", Role::Initiator);
    // Builds the counterparty's messages and our expected headers.
    let mut peer = Harness::initiator("FIX.4.4");
    // First run: log on, send one order while logged on and one after the connection
    // dropped; then the process ends.
    {
        let (store, _) = FileStore::open(dir.path(), SyncPolicy::EveryMessage, T0).unwrap();
        let mut s = Session::new(cfg.clone(), store).unwrap();
        s.handle_connected(UtcNanos(T0));
        s.handle_message(UtcNanos(T0), &peer.build("A", 1, "98=0|108=30|"));
        assert!(s.is_logged_on());
        s.send_app(UtcNanos(T0), b"D", b"11=A\x01").unwrap();
        s.handle_disconnected(UtcNanos(T0));
        s.send_app(UtcNanos(T0), b"D", b"11=B\x01").unwrap();
        s.store_mut().flush().unwrap();
        sent(&mut s);
    }
    // Second run: the store continues at 4/2 and still holds order 3.
    let (store, _) = FileStore::open(dir.path(), SyncPolicy::EveryMessage, T0).unwrap();
    let mut s = Session::new(cfg, store).unwrap();
    assert_eq!((s.next_sender_seq(), s.next_target_seq()), (4, 2));
    s.handle_connected(UtcNanos(T0));
    assert_eq!(
        sent(&mut s),
        vec![format!("35=A|{}98=0|108=30|", peer.hdr(4))]
    );
    s.handle_message(UtcNanos(T0), &peer.build("A", 2, "98=0|108=30|"));
    assert!(s.is_logged_on());
    s.handle_message(UtcNanos(T0), &peer.build("2", 3, "7=3|16=0|"));
    let now = ts(T0);
    assert_eq!(
        sent(&mut s),
        vec![
            format!("35=D|34=3|43=Y|49=TW|52={now}|56=CP|122={now}|11=B|"),
            format!("35=4|34=4|43=Y|49=TW|52={now}|56=CP|122={now}|36=5|123=Y|"),
        ]
    );
}

#[test]
fn schedule_week_wrapping_window_starts_at_its_last_start_day() {
    // Saturday 00:00 to Friday 12:00 UTC: the window wraps the end of the week.
    // T0 (Friday 2026-11-20 08:00) is in the period that began Saturday 2026-11-14.
    let s = Schedule::weekly(Weekday::Sat, hms("00:00:00"), Weekday::Fri, hms("12:00:00"));
    let saturday = chrono::NaiveDate::from_ymd_opt(2026, 11, 14)
        .unwrap()
        .and_time(hms("00:00:00"));
    assert_eq!(s.period_start(T0), Some(saturday));
    let saturday_10h = T0 - 6 * 24 * 3600 * NANOS + 2 * 3600 * NANOS;
    assert_eq!(s.period_start(saturday_10h), Some(saturday));
    assert!(s.same_period(saturday_10h, T0));
    // Friday 13:00 is outside; the next Saturday starts a new period.
    assert!(!s.contains(T0 + 5 * 3600 * NANOS));
    assert!(!s.same_period(T0, T0 + 16 * 3600 * NANOS));
}

#[test]
fn a_scheduled_session_asks_for_the_clock_at_the_next_second() {
    // With a schedule the session looks at the clock every second (to notice the
    // window's end), so its deadline is the next whole second after the last call.
    let mut cfg = Harness::config("FIX.4.4", Role::Acceptor);
    cfg.schedule = Some(Schedule::daily(hms("07:00:00"), hms("09:00:00")));
    let mut h = Harness::new(cfg);
    h.tick_ms(1_500);
    h.connect();
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 2 * NANOS)));
    h.tick_ms(1_000);
    assert_eq!(h.advance(0), vec![]);
    assert_eq!(h.s.poll_timeout(), Some(UtcNanos(T0 + 3 * NANOS)));
}
