//! Fake-clock harness for the session tests: a [`Session`] over a [`MemoryStore`],
//! a counterparty that builds raw messages with the real codec [`Encoder`], and
//! helpers that turn the session's outputs into readable strings (`|` for SOH,
//! BodyLength and CheckSum verified and then left out so expectations stay short).
//!
//! Our session is `TW`; the counterparty is `CP`. The clock starts at
//! 2026-11-20 08:00:00 UTC (a Friday), so SendingTime reads `20261120-08:00:00.000`.
#![allow(dead_code)]

use tickwire_fix::codec::{self, Encoder, Fields, TimestampPrecision};
use tickwire_fix::session::{Event, Output, Role, Session, SessionConfig};
use tickwire_fix::store::{MemoryStore, MessageStore};
use tickwire_rt::UtcNanos;

pub const NANOS: u64 = 1_000_000_000;
/// 2026-11-20 08:00:00 UTC.
pub const T0: u64 = 1_795_161_600 * NANOS;

/// One output of the session, made comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// A sent message without 8, 9 and 10 (`35=0|34=2|...|`).
    Send(String),
    Disconnect,
    Connect,
    LoggedOn,
    LoggedOut,
    FromAdmin(String),
    FromApp(String),
    Note(String),
}

/// Renders a raw message with `|` for SOH.
pub fn pretty(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).replace('\x01', "|")
}

/// Checks 9 and 10 with the real parser, then returns the message without them and
/// without 8 (`35=...|...|`).
pub fn strip(raw: &[u8]) -> String {
    let mut fields = Fields::default();
    // Empty values inside repeating groups go back as QuickFIX sends them.
    codec::parse_keeping_empty(raw, &mut fields, true)
        .unwrap_or_else(|e| panic!("session sent an invalid message {}: {e}", pretty(raw)));
    let p = pretty(raw);
    let start = p.find("|35=").expect("35 present") + 1;
    let end = p.rfind("10=").expect("10 present");
    p[start..end].to_owned()
}

/// SendingTime text of an instant, at millisecond precision.
pub fn ts(unix_nanos: u64) -> String {
    let mut v = Vec::new();
    codec::write_utc_timestamp(&mut v, unix_nanos, TimestampPrecision::Millis);
    String::from_utf8(v).unwrap()
}

pub struct Harness {
    pub s: Session<MemoryStore>,
    pub now: u64,
    /// MsgSeqNum of the counterparty's next message (for `msg`).
    pub peer_seq: u64,
    peer: Encoder,
    pub begin_string: String,
}

impl Harness {
    pub fn new(cfg: SessionConfig) -> Harness {
        let begin_string = cfg.begin_string.clone();
        let s = Session::new(cfg, MemoryStore::new(T0)).expect("valid config");
        Harness {
            s,
            now: T0,
            peer_seq: 1,
            peer: Encoder::new(&begin_string),
            begin_string,
        }
    }

    pub fn config(begin_string: &str, role: Role) -> SessionConfig {
        SessionConfig::new(begin_string, "TW", "CP", role)
    }

    pub fn acceptor(begin_string: &str) -> Harness {
        Harness::new(Harness::config(begin_string, Role::Acceptor))
    }

    pub fn initiator(begin_string: &str) -> Harness {
        Harness::new(Harness::config(begin_string, Role::Initiator))
    }

    /// An acceptor on a new connection, before any Logon.
    pub fn connected_acceptor(begin_string: &str) -> Harness {
        let mut h = Harness::acceptor(begin_string);
        h.connect();
        h
    }

    /// An initiator that has connected (and so sent its Logon).
    pub fn connected_initiator(begin_string: &str) -> Harness {
        let mut h = Harness::initiator(begin_string);
        h.connect();
        h
    }

    /// An acceptor already logged on ([`Harness::logon_as_acceptor`]).
    pub fn logged_on_acceptor(begin_string: &str) -> Harness {
        Harness::logged_on_with(begin_string, Role::Acceptor, |_| {})
    }

    /// An initiator already logged on ([`Harness::logon_as_initiator`]).
    pub fn logged_on_initiator(begin_string: &str) -> Harness {
        Harness::logged_on_with(begin_string, Role::Initiator, |_| {})
    }

    /// [`Harness::with`], then logged on: the counterparty's Logon (seq 1, HeartBtInt
    /// 30) arrives on a new connection.
    pub fn logged_on_with(
        begin_string: &str,
        role: Role,
        change: impl FnOnce(&mut SessionConfig),
    ) -> Harness {
        let mut h = Harness::with(begin_string, role, change);
        h.connect_and_logon();
        h
    }

    /// A session of `role` with the configuration `change` makes to the defaults.
    pub fn with(
        begin_string: &str,
        role: Role,
        change: impl FnOnce(&mut SessionConfig),
    ) -> Harness {
        let mut cfg = Harness::config(begin_string, role);
        change(&mut cfg);
        Harness::new(cfg)
    }

    /// Sets the store's next sender and target sequence numbers.
    pub fn set_seqs(&mut self, sender: u64, target: u64) {
        self.s.store_mut().set_next_sender_seq(sender).unwrap();
        self.s.store_mut().set_next_target_seq(target).unwrap();
    }

    /// Moves the fake clock forward and fires the timer.
    pub fn advance(&mut self, secs: u64) -> Vec<Act> {
        self.now += secs * NANOS;
        self.s.handle_timeout(UtcNanos(self.now));
        self.drain()
    }

    /// Moves the fake clock forward by milliseconds without firing the timer.
    pub fn tick_ms(&mut self, ms: u64) {
        self.now += ms * 1_000_000;
    }

    pub fn connect(&mut self) -> Vec<Act> {
        self.s.handle_connected(UtcNanos(self.now));
        self.drain()
    }

    pub fn disconnected(&mut self) -> Vec<Act> {
        self.s.handle_disconnected(UtcNanos(self.now));
        self.drain()
    }

    /// Feeds raw bytes as one framed message.
    pub fn feed(&mut self, raw: &[u8]) -> Vec<Act> {
        self.s.handle_message(UtcNanos(self.now), raw);
        self.drain()
    }

    /// Builds a counterparty message with MsgSeqNum `seq`: header 35, 34, 49=CP,
    /// 52=now, 56=TW, then `extra` (`|`-separated fields, header ones first).
    pub fn build(&mut self, msg_type: &str, seq: u64, extra: &str) -> Vec<u8> {
        self.build_from("CP", "TW", msg_type, seq, self.now, extra)
    }

    /// Like `build` with explicit CompIDs and SendingTime.
    pub fn build_from(
        &mut self,
        sender: &str,
        target: &str,
        msg_type: &str,
        seq: u64,
        sending_time: u64,
        extra: &str,
    ) -> Vec<u8> {
        let p = &mut self.peer;
        p.begin(msg_type.as_bytes());
        p.field_u64(34, seq);
        p.field_str(49, sender);
        p.field_timestamp(52, sending_time, TimestampPrecision::Millis);
        p.field_str(56, target);
        p.raw_fields(extra.replace('|', "\x01").as_bytes());
        p.finish().to_vec()
    }

    /// Builds a message from raw `|`-separated fields after 35 (no header added):
    /// for malformed headers.
    pub fn build_raw(&mut self, msg_type: &str, fields: &str) -> Vec<u8> {
        let p = &mut self.peer;
        p.begin(msg_type.as_bytes());
        p.raw_fields(fields.replace('|', "\x01").as_bytes());
        p.finish().to_vec()
    }

    /// Sends the counterparty's next message (next `peer_seq`).
    pub fn recv(&mut self, msg_type: &str, extra: &str) -> Vec<Act> {
        let seq = self.peer_seq;
        self.peer_seq += 1;
        let raw = self.build(msg_type, seq, extra);
        self.feed(&raw)
    }

    /// Sends a counterparty message with an explicit MsgSeqNum (peer_seq untouched).
    pub fn recv_seq(&mut self, msg_type: &str, seq: u64, extra: &str) -> Vec<Act> {
        self.recv_kept(msg_type, seq, extra).1
    }

    /// [`Harness::recv_seq`] that also returns the message, for expectations that
    /// show it (`Act::FromAdmin(pretty(&msg))`).
    pub fn recv_kept(&mut self, msg_type: &str, seq: u64, extra: &str) -> (Vec<u8>, Vec<Act>) {
        let raw = self.build(msg_type, seq, extra);
        let out = self.feed(&raw);
        (raw, out)
    }

    pub fn drain(&mut self) -> Vec<Act> {
        let mut v = Vec::new();
        while let Some(o) = self.s.poll_event() {
            v.push(match o {
                Output::Send(b) => Act::Send(strip(b)),
                Output::Disconnect => Act::Disconnect,
                Output::Connect => Act::Connect,
                Output::Event(Event::LoggedOn) => Act::LoggedOn,
                Output::Event(Event::LoggedOut) => Act::LoggedOut,
                Output::Event(Event::FromAdmin(b)) => Act::FromAdmin(pretty(b)),
                Output::Event(Event::FromApp(b)) => Act::FromApp(pretty(b)),
                Output::Event(Event::Note(n)) => Act::Note(n.to_owned()),
                other => panic!("unexpected output {other:?}"),
            });
        }
        v
    }

    /// The standard header we write, for expectations: `34=<seq>|49=TW|52=<now>|56=CP|`.
    pub fn hdr(&self, seq: u64) -> String {
        format!("34={seq}|49=TW|52={}|56=CP|", ts(self.now))
    }

    /// Acceptor: the counterparty logs on (seq 1, HeartBtInt 30) and we answer.
    pub fn logon_as_acceptor(&mut self) -> Vec<Act> {
        self.connect_and_logon()
    }

    /// Initiator: we connect and send Logon, the counterparty answers.
    pub fn logon_as_initiator(&mut self) -> Vec<Act> {
        self.connect_and_logon()
    }

    /// Connects, then the counterparty's Logon (seq 1, HeartBtInt 30) arrives: for an
    /// acceptor the first message, for an initiator the answer to ours.
    fn connect_and_logon(&mut self) -> Vec<Act> {
        self.logon_with("98=0|108=30|")
    }

    /// Connects, then the counterparty's Logon (seq 1) with `fields` arrives and
    /// logs the session on.
    pub fn logon_with(&mut self, fields: &str) -> Vec<Act> {
        let mut v = self.connect();
        v.extend(self.recv("A", fields));
        assert!(self.s.is_logged_on(), "not logged on: {v:#?}");
        v
    }

    /// Asserts that `out` is the answer to a SendingTime accuracy problem in the
    /// counterparty's NewOrderSingle 2: a Reject (373=10) as our 2, then a Logout.
    pub fn assert_sending_time_rejected(&self, out: &[Act]) {
        assert_eq!(
            sends(out),
            vec![
                format!(
                    "35=3|{}45=2|58=SendingTime accuracy problem|372=D|373=10|",
                    self.hdr(2)
                ),
                format!("35=5|{}", self.hdr(3)),
            ]
        );
    }

    /// A Logout sent as our `seq` (with `tail` after the header), then the disconnect.
    pub fn logged_out(&self, seq: u64, tail: &str) -> Vec<Act> {
        vec![
            Act::Send(format!("35=5|{}{tail}", self.hdr(seq))),
            Act::Disconnect,
            Act::LoggedOut,
        ]
    }

    /// Asserts that `out` sends exactly one message: `35=<msg_type>|`, our header with
    /// sequence number `seq`, then `body`.
    pub fn assert_sends_one(&self, out: &[Act], msg_type: &str, seq: u64, body: &str) {
        assert_eq!(
            sends(out),
            vec![format!("35={msg_type}|{}{body}", self.hdr(seq))]
        );
    }

    /// Asserts that nothing happens for `quiet` seconds, and that `after` seconds more
    /// the session gives up: `why`, then the disconnect ([`gave_up`]).
    pub fn assert_gives_up(&mut self, quiet: u64, after: u64, why: &str) {
        assert_eq!(self.advance(quiet), vec![]);
        assert_eq!(self.advance(after), gave_up(why));
    }

    pub fn store(&self) -> &MemoryStore {
        self.s.store()
    }

    pub fn seqs(&self) -> (u64, u64) {
        (
            self.s.store().next_sender_seq(),
            self.s.store().next_target_seq(),
        )
    }
}

/// What the session does when it gives up with `why`: notes it, notes that it
/// disconnects, disconnects, and reports the session logged out.
pub fn gave_up(why: &str) -> Vec<Act> {
    vec![
        Act::Note(why.to_owned()),
        Act::Note("Disconnecting".to_owned()),
        Act::Disconnect,
        Act::LoggedOut,
    ]
}

/// Only the messages sent.
pub fn sends(v: &[Act]) -> Vec<String> {
    texts(v, |o| match o {
        Act::Send(s) => Some(s),
        _ => None,
    })
}

/// Everything except notes.
pub fn actions(v: &[Act]) -> Vec<Act> {
    v.iter()
        .filter(|o| !matches!(o, Act::Note(_)))
        .cloned()
        .collect()
}

/// Whether one of the notes is `text`.
pub fn noted(v: &[Act], text: &str) -> bool {
    notes(v).iter().any(|n| n == text)
}

/// Only the notes.
pub fn notes(v: &[Act]) -> Vec<String> {
    texts(v, |o| match o {
        Act::Note(s) => Some(s),
        _ => None,
    })
}

/// The text of every act that `pick` takes, in order.
fn texts(v: &[Act], pick: fn(&Act) -> Option<&String>) -> Vec<String> {
    v.iter().filter_map(pick).cloned().collect()
}
