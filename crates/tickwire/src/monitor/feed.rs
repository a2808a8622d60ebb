//! The feed handler's monitoring component (`tickwire feed --http`): `/varz`,
//! `/channelz`, `/metrics` and the dashboard document, rendered on HTTP threads from a
//! [`FeedSnapshot`] the handler's loop hands over every 10 ms when asked.

use serde_json::{json, Value};
use tickwire_md::handler::FeedSnapshot;
use tickwire_monitor::http::{Request, Response};
use tickwire_monitor::prom::{Kind, Text};
use tickwire_rt::snapshot::Reader;

use super::{page, singles, Component, Source};

const WHO: &str = "the feed handler's loop";

/// The feed handler as the monitoring endpoint sees it.
pub struct FeedMonitor {
    source: Source<FeedSnapshot>,
}

impl FeedMonitor {
    /// Serves what `reader` fetches.
    pub fn new(reader: Reader<FeedSnapshot>) -> FeedMonitor {
        FeedMonitor {
            source: Source::new(reader, WHO),
        }
    }
}

/// The channel's name: the MoldUDP64 session, or line A's group before one is adopted.
fn name(s: &FeedSnapshot) -> String {
    s.session.clone().unwrap_or_else(|| s.group.clone())
}

/// The one channel (a MoldUDP64 session on one or two lines) as `/channelz` and the
/// dashboard list it.
fn channel(s: &FeedSnapshot) -> Value {
    let c = &s.counters;
    json!({
        "channel": name(s),
        "session": s.session,
        "lines": match &s.group_b { Some(b) => format!("A {} · B {}", s.group, b), None => format!("A {}", s.group) },
        "group": s.group,
        "group_b": s.group_b,
        "datagrams": s.datagrams,
        "kernel_drops": s.kernel_drops,
        "packets": c.packets,
        "messages": c.messages,
        "gaps": c.gaps,
        "recovered": c.recovered,
        "lost": c.lost,
        "taken_back": c.taken_back,
        "false_ends": c.false_ends,
        "false_session_ends": c.false_session_ends,
        "line_filled": c.line_filled,
        "duplicates": c.duplicates,
        "overflow": c.overflow,
        "malformed": c.malformed,
        "requests": s.requests_sent,
        "published": s.published,
        "recovering": s.recovering,
        "session_ended": s.session_ended,
        "rates": s.last_second,
    })
}

impl Component for FeedMonitor {
    fn health(&self) -> Result<(), String> {
        self.source.health()
    }

    fn varz(&self) -> Value {
        self.source.doc("feed", |s| {
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            v["kind"] = json!("feed");
            v["version"] = json!(env!("CARGO_PKG_VERSION"));
            v
        })
    }

    fn metrics(&self, out: &mut Text, _max_series: usize) {
        let Some(s) = self.source.scrape(out, "tickwire_feed_up") else {
            return;
        };
        let c = &s.counters;
        out.single(
            "tickwire_feed_uptime_seconds",
            Kind::Gauge,
            "Seconds since the feed handler started.",
            s.uptime_ms as f64 / 1e3,
        );
        out.single(
            "tickwire_feed_recovering",
            Kind::Gauge,
            "1 while a gap is open (waiting for the other line or a re-request's answer).",
            f64::from(u8::from(s.recovering)),
        );
        let counter = Kind::Counter;
        singles(
            out,
            &[
                ("tickwire_feed_packets_total", counter, "MoldUDP64 packets handled (all lines, good or bad).", c.packets),
                ("tickwire_feed_messages_total", counter, "ITCH messages applied in sequence.", c.messages),
                ("tickwire_feed_gaps_total", counter, "Times messages went missing while none were (holes opened while others are still open add to the same gap).", c.gaps),
                ("tickwire_feed_recovered_messages_total", counter, "Missing messages that arrived later (other line, re-request, reordering).", c.recovered),
                ("tickwire_feed_lost_messages_total", counter, "Messages declared lost (re-requests unanswered, or skipped by an accepted jump); those of them taken back are in tickwire_feed_taken_back_messages_total.", c.lost),
                ("tickwire_feed_taken_back_messages_total", counter, "Messages counted lost by a gap that only a false announcement (heartbeat, End of Session) made, then taken back when the stream showed itself inside it.", c.taken_back),
                ("tickwire_feed_line_filled_gaps_total", counter, "Gaps closed before their first re-request (the other line, or reordering).", c.line_filled),
                ("tickwire_feed_duplicate_messages_total", counter, "Messages received again after they were applied (A/B copies included).", c.duplicates),
                ("tickwire_feed_malformed_total", counter, "Bad input: truncated packets, bad blocks, unknown types, bad messages.", c.malformed),
                ("tickwire_feed_overflow_packets_total", counter, "Packets that arrived ahead with --max-held packets already held; each gave up the oldest gap (its messages counted lost), or, while a line still brought packets in order below the hold, dropped the packet furthest ahead.", c.overflow),
                ("tickwire_feed_false_session_ends_total", counter, "End of Session packets the stream went on past (messages at or after the end they announced, or heartbeats) for --jump-quiet: forged or stale, they were forgotten.", c.false_session_ends),
                ("tickwire_feed_foreign_session_packets_total", counter, "Packets of a MoldUDP64 session other than the one followed.", c.foreign_session),
                ("tickwire_feed_suspect_jumps_total", counter, "Packets too far ahead of the known sequence (--max-jump).", c.suspect_jumps),
                ("tickwire_feed_heartbeats_total", counter, "MoldUDP64 heartbeat packets.", c.heartbeats),
                ("tickwire_feed_published_updates_total", counter, "Normalized updates published to the router.", s.published),
                ("tickwire_feed_rerequests_total", counter, "Re-requests sent to the exchange.", s.requests_sent),
                ("tickwire_feed_rerequest_send_errors_total", counter, "Re-requests the socket refused to send.", s.request_send_errors),
                ("tickwire_feed_orders_refused_total", counter, "Add Orders refused because --max-orders orders were live (those orders are missing from the books).", s.orders_refused),
            ],
        );
        let name = "tickwire_feed_received_datagrams_total";
        out.family(
            name,
            Kind::Counter,
            "Datagrams received, per socket (line a, line b, retransmit).",
        );
        let d = &s.datagrams;
        for (line, v) in [
            ("a", d.line_a),
            ("b", d.line_b),
            ("retransmit", d.retransmissions),
        ] {
            out.sample(name, &[("line", line)], v as f64);
        }
        // Absent where the kernel does not say (no /proc/net/udp).
        if let Some(drops) = s.kernel_drops {
            out.single(
                "tickwire_feed_kernel_dropped_datagrams_total",
                Kind::Counter,
                "Datagrams the kernel dropped on the line sockets because their receive buffers were full (never seen by the handler; gaps recover what a re-request can).",
                drops as f64,
            );
        }
    }

    fn dashboard(&self) -> Value {
        self.source.doc("feed", |s| {
        let c = &s.counters;
        json!({
            "kind": "feed",
            "name": name(s),
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_ms": s.uptime_ms,
            "counters": {
                "packets": c.packets,
                "messages": c.messages,
                "published": s.published,
                "gaps": c.gaps,
                "recovered": c.recovered,
                "lost": c.lost,
                "line_filled": c.line_filled,
                "duplicates": c.duplicates,
            },
            "gauges": { "recovering": u8::from(s.recovering) },
            "rate_charts": [["messages", "published"], ["packets", "duplicates"], ["gaps", "recovered", "lost"]],
            "feed_channels": [channel(s)],
        })
        })
    }

    fn route(&self, req: &Request<'_>) -> Option<Response> {
        match req.path {
            "/channelz" => Some(self.source.json(|s| page(req, &[channel(s)]))),
            _ => None,
        }
    }
}
