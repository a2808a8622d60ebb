//! The FIX engine's monitoring component (`tickwire fix acceptor|initiator --http`):
//! `/varz`, `/sessionz`, `/metrics` and the dashboard document, rendered on HTTP
//! threads from an [`EngineSnapshot`] the engine hands over at its housekeeping tick.

use serde_json::{json, Value};
use tickwire_fix_engine::monitor::Reader;
use tickwire_fix_engine::{EngineSnapshot, SessionCounters, SessionState, SessionView};
use tickwire_monitor::http::{Request, Response};
use tickwire_monitor::prom::{Kind, Text};

use super::{page, per_item, singles, Component, Family, Source};

const WHO: &str = "the FIX engine's loop";

/// The FIX engine as the monitoring endpoint sees it.
pub struct FixMonitor {
    source: Source<EngineSnapshot>,
    /// `acceptor` or `initiator`.
    side: &'static str,
    started: std::time::Instant,
}

impl FixMonitor {
    /// Serves what `reader` fetches; `side` names the command.
    pub fn new(reader: Reader, side: &'static str) -> FixMonitor {
        FixMonitor {
            source: Source::new(reader, WHO),
            side,
            started: std::time::Instant::now(),
        }
    }
}

fn logged_on(s: &EngineSnapshot) -> usize {
    s.sessions
        .iter()
        .filter(|v| v.state == SessionState::LoggedOn)
        .count()
}

/// Every session's counters added up.
fn totals(s: &EngineSnapshot) -> SessionCounters {
    let mut t = SessionCounters::default();
    for c in s.sessions.iter().map(|v| &v.counters) {
        t.msgs_in += c.msgs_in;
        t.app_msgs_in += c.app_msgs_in;
        t.msgs_out += c.msgs_out;
        t.resend_requests_in += c.resend_requests_in;
        t.resend_requests_out += c.resend_requests_out;
        t.sequence_resets_out += c.sequence_resets_out;
        t.logons += c.logons;
        t.disconnects += c.disconnects;
    }
    t
}

impl Component for FixMonitor {
    fn health(&self) -> Result<(), String> {
        self.source.health()
    }

    fn varz(&self) -> Value {
        self.source.doc("fix", |s| {
            json!({
                "kind": "fix",
                "side": self.side,
                "version": env!("CARGO_PKG_VERSION"),
                "sessions": s.sessions.len(),
                "logged_on": logged_on(s),
                "refused_connections": s.refused_connections,
                "evicted_pending_connections": s.evicted_pending_connections,
                "logon_timeouts": s.logon_timeouts,
                "log_batches_dropped": s.log_batches_dropped,
                "totals": totals(s),
            })
        })
    }

    fn metrics(&self, out: &mut Text, max_series: usize) {
        let Some(s) = self.source.scrape(out, "tickwire_fix_up") else {
            return;
        };
        let t = totals(&s);
        singles(
            out,
            &[
                ("tickwire_fix_sessions", Kind::Gauge, "Configured sessions.", s.sessions.len() as u64),
                ("tickwire_fix_sessions_logged_on", Kind::Gauge, "Sessions logged on now.", logged_on(&s) as u64),
                ("tickwire_fix_refused_connections_total", Kind::Counter, "Accepted connections closed at once (a peer no session allows, or a TLS setup that failed).", s.refused_connections),
                ("tickwire_fix_evicted_pending_connections_total", Kind::Counter, "Connections waiting for their Logon closed to make room for a new one at TickwireMaxPendingConnections (the one that waited longest).", s.evicted_pending_connections),
                ("tickwire_fix_logon_timeouts_total", Kind::Counter, "Accepted connections closed because no complete Logon came in time (nothing sent within the unbound timeout, 10 s by default, or no complete first message within 1 s of its first bytes: not FIX, or unfinished).", s.logon_timeouts),
                ("tickwire_fix_log_batches_dropped_total", Kind::Counter, "Message-log batches dropped because the log writer was behind.", s.log_batches_dropped),
                ("tickwire_fix_received_messages_total", Kind::Counter, "Messages received that passed the session checks, all sessions.", t.msgs_in),
                ("tickwire_fix_sent_messages_total", Kind::Counter, "Messages written, all sessions (resent ones included).", t.msgs_out),
            ],
        );
        let families: [Family<SessionView>; 9] = [
            (
                "tickwire_fix_session_logged_on",
                Kind::Gauge,
                "1 while the session is logged on.",
                |v| f64::from(u8::from(v.state == SessionState::LoggedOn)),
            ),
            (
                "tickwire_fix_session_next_sender_seq_number",
                Kind::Gauge,
                "MsgSeqNum of the next message the session sends.",
                |v| v.next_sender_seq as f64,
            ),
            (
                "tickwire_fix_session_next_target_seq_number",
                Kind::Gauge,
                "MsgSeqNum the session expects next.",
                |v| v.next_target_seq as f64,
            ),
            (
                "tickwire_fix_session_received_messages_total",
                Kind::Counter,
                "Messages received that passed the session checks.",
                |v| v.counters.msgs_in as f64,
            ),
            (
                "tickwire_fix_session_sent_messages_total",
                Kind::Counter,
                "Messages written (resent ones included).",
                |v| v.counters.msgs_out as f64,
            ),
            (
                "tickwire_fix_session_resend_requests_received_total",
                Kind::Counter,
                "ResendRequests received (the counterparty saw a gap).",
                |v| v.counters.resend_requests_in as f64,
            ),
            (
                "tickwire_fix_session_resend_requests_sent_total",
                Kind::Counter,
                "ResendRequests sent (we saw a gap).",
                |v| v.counters.resend_requests_out as f64,
            ),
            (
                "tickwire_fix_session_logons_total",
                Kind::Counter,
                "Logons completed.",
                |v| v.counters.logons as f64,
            ),
            (
                "tickwire_fix_session_disconnects_total",
                Kind::Counter,
                "Connections of the session that ended.",
                |v| v.counters.disconnects as f64,
            ),
        ];
        let items: Vec<(&SessionView, Vec<(&str, String)>)> = s
            .sessions
            .iter()
            .take(max_series)
            .map(|v| (v, vec![("session", v.session.clone())]))
            .collect();
        per_item(
            out,
            (
                "tickwire_fix_session_series_omitted",
                "Sessions without their own series (beyond --metrics-max-series; counted in the totals).",
                s.sessions.len().saturating_sub(items.len()),
            ),
            &families,
            &items,
        );
    }

    fn dashboard(&self) -> Value {
        self.source.doc("fix", |s| {
        let t = totals(s);
        json!({
            "kind": format!("fix {}", self.side),
            "name": tickwire_rt::text::count(s.sessions.len() as u64, "session", "sessions"),
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "counters": {
                "msgs_in": t.msgs_in,
                "msgs_out": t.msgs_out,
                "resend_requests_in": t.resend_requests_in,
                "resend_requests_out": t.resend_requests_out,
                "logons": t.logons,
                "disconnects": t.disconnects,
            },
            "gauges": { "sessions": s.sessions.len(), "logged_on": logged_on(s) },
            "rate_charts": [["msgs_in", "msgs_out"], ["resend_requests_in", "resend_requests_out"]],
            "fix_sessions": s.sessions,
        })
        })
    }

    fn route(&self, req: &Request<'_>) -> Option<Response> {
        match req.path {
            "/sessionz" => Some(self.source.json(|s| {
                let mut doc = page(req, &s.sessions);
                doc["logged_on"] = json!(logged_on(s));
                doc
            })),
            _ => None,
        }
    }
}
