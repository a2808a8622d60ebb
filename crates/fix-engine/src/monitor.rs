//! What the engine publishes to a monitoring thread (`tickwire fix ... --http`):
//! per-session counters the engine thread owns ([`SessionCounters`], plain integers,
//! single writer) and, on request, an [`EngineSnapshot`] of every session, handed over
//! through [`tickwire_rt::snapshot`] at the engine's housekeeping tick (every 10 ms
//! while busy, at most [`EngineOptions::max_block`](crate::EngineOptions) apart while
//! idle). Nothing is locked, allocated or copied per message: counting a message is a
//! few integer additions and a look at the bytes of its MsgType (35) field.

use serde::Serialize;
use tickwire_rt::MonoNanos;

/// Counters of one session, since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SessionCounters {
    /// Messages received that passed the session checks (administrative and
    /// application).
    pub msgs_in: u64,
    /// Of those, application messages.
    pub app_msgs_in: u64,
    /// Messages written to the connection (resent ones included).
    pub msgs_out: u64,
    /// ResendRequests (35=2) received: the counterparty saw a gap in what we sent.
    pub resend_requests_in: u64,
    /// ResendRequests sent: we saw a gap in what the counterparty sent.
    pub resend_requests_out: u64,
    /// SequenceResets (35=4: gap fills and resets) sent, mostly in answer to a
    /// ResendRequest.
    pub sequence_resets_out: u64,
    /// Logons completed.
    pub logons: u64,
    /// Connections of this session that ended.
    pub disconnects: u64,
}

impl SessionCounters {
    /// Counts a message the session wrote.
    #[inline]
    pub(crate) fn sent(&mut self, raw: &[u8]) {
        self.msgs_out += 1;
        match msg_type(raw) {
            Some(b"2") => self.resend_requests_out += 1,
            Some(b"4") => self.sequence_resets_out += 1,
            _ => {}
        }
    }

    /// Counts a message the session accepted.
    #[inline]
    pub(crate) fn received(&mut self, msg_type: &[u8], app: bool) {
        self.msgs_in += 1;
        if app {
            self.app_msgs_in += 1;
        } else if msg_type == b"2" {
            self.resend_requests_in += 1;
        }
    }
}

/// The MsgType (35) of a message as the session encodes it (`8=..|9=..|35=..|`): the
/// third field, found within its first 64 bytes. None for anything else.
fn msg_type(raw: &[u8]) -> Option<&[u8]> {
    let head = &raw[..raw.len().min(64)];
    let at = head.windows(4).position(|w| w == b"\x0135=")? + 4;
    let rest = &raw[at..];
    let end = rest.iter().position(|&b| b == tickwire_fix::codec::SOH)?;
    Some(&rest[..end])
}

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// No connection.
    Disconnected,
    /// Initiator: the TCP connection is being made.
    Connecting,
    /// Connected, the Logon exchange not complete.
    LoggingOn,
    /// Logons exchanged.
    LoggedOn,
}

/// One session as the monitoring endpoint shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    /// `BeginString:Sender->Target[:Qualifier]`.
    pub session: String,
    /// `acceptor` or `initiator`.
    pub role: &'static str,
    /// Where the session is.
    pub state: SessionState,
    /// MsgSeqNum of the next message we send.
    pub next_sender_seq: u64,
    /// MsgSeqNum expected in the next message received.
    pub next_target_seq: u64,
    /// The heartbeat interval in use, seconds (an acceptor's comes from the
    /// initiator's Logon: 0 before one arrives).
    pub heart_bt_int: u64,
    /// The counterparty's address (accepted connections).
    pub peer: Option<String>,
    /// Counters since the engine started.
    #[serde(flatten)]
    pub counters: SessionCounters,
}

/// The engine at one tick, owned by the monitoring side.
#[derive(Debug, Clone, Serialize)]
pub struct EngineSnapshot {
    /// When it was taken.
    #[serde(skip)]
    pub taken: MonoNanos,
    /// Every session, in configuration order.
    pub sessions: Vec<SessionView>,
    /// Accepted connections closed at once (a peer no session allows).
    pub refused_connections: u64,
    /// Connections waiting for their Logon closed to make room for a newer one (the
    /// pending-Logon limit evicts the oldest).
    pub evicted_pending_connections: u64,
    /// Accepted connections closed because no complete Logon came in time (nothing
    /// sent, an unfinished first message, or bytes that are not FIX).
    pub logon_timeouts: u64,
    /// Message-log batches dropped because the log writer was behind.
    pub log_batches_dropped: u64,
}

/// The engine's end of the channel.
pub(crate) type Publisher = tickwire_rt::snapshot::Publisher<EngineSnapshot>;
/// The monitoring thread's end.
pub type Reader = tickwire_rt::snapshot::Reader<EngineSnapshot>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_counted_by_their_type() {
        let mut c = SessionCounters::default();
        c.sent(b"8=FIX.4.4\x019=5\x0135=2\x0134=1\x0110=000\x01");
        c.sent(b"8=FIX.4.4\x019=5\x0135=4\x0134=1\x0110=000\x01");
        c.sent(b"8=FIX.4.4\x019=5\x0135=D\x0134=1\x0110=000\x01");
        c.sent(b"garbage");
        c.received(b"2", false);
        c.received(b"D", true);
        assert_eq!(
            (c.msgs_out, c.resend_requests_out, c.sequence_resets_out),
            (4, 1, 1)
        );
        assert_eq!((c.msgs_in, c.app_msgs_in, c.resend_requests_in), (2, 1, 1));
        assert_eq!(msg_type(b"8=FIX.4.4\x019=5\x0135=AE"), None);
        assert_eq!(msg_type(b""), None);
    }
}
