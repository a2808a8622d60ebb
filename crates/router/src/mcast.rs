//! The router as a reliable multicast sender (pure: docs/multicast.md §10).
//!
//! Topics configured to leave by multicast (`[[router.multicast]]`: a group and its
//! topic patterns) are put once per message into that stream's
//! [`tickwire_mcast::Sender`] core, whatever the number of receivers. Clients that
//! offered [`caps::MCAST`](tickwire_wire::frame::caps::MCAST) in their HELLO are told
//! every stream (MCAST_ROUTE, before WELCOME: topic resolution over their own session)
//! and are no longer sent those topics over their connection: they receive them by
//! multicast instead, so each message reaches a client by exactly one path. Other
//! clients get everything over TCP as before.
//!
//! What stays on TCP even for a multicast topic: requests and replies (the REPLY field
//! is not carried by multicast), deliveries to shared subscriptions (a group picks one
//! member: multicast cannot), a message too large for one datagram (counted:
//! `too_large`), and initial images from the last-value cache.
//!
//! The driver owns the sockets (`driver/mcast.rs`): it sends what [`Multicast`] has for
//! each stream once per loop turn (one `sendto` per datagram, several messages per
//! datagram when a turn routes several), hands it NAKs and flow reports, and runs its
//! timers (heartbeats). Nothing here allocates per message.
#![deny(clippy::disallowed_methods)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tickwire_mcast::{Sender, SenderConfig, SessionId};
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, Frame, PublishOptions};
use tickwire_wire::mcast_route::{encode_mcast_route, MAX_ROUTE_PATTERNS};
use tickwire_wire::topic::{pattern_matches, validate_pattern};

/// One multicast stream of the router: a `[[router.multicast]]` table of the
/// configuration file, or a `--multicast GROUP=PATTERN,...` flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MulticastRoute {
    /// The multicast group and port (`"239.255.74.2:7441"`). Default 239.255.74.1:7440.
    pub group: SocketAddrV4,
    /// Patterns of the topics this stream carries (at least one, at most 32; a topic
    /// matching several streams goes by the first).
    pub topics: Vec<String>,
    /// The interface multicast leaves through (and NAKs arrive on). Default 127.0.0.1:
    /// multicast then stays on this host.
    pub interface: Ipv4Addr,
    /// Largest datagram, header included (256..=65507). Default 1400 (under an Ethernet
    /// MTU). A message that does not fit goes over TCP (counted `too_large`).
    /// A whole number of bytes or a size string (`"1400"`, `"8KiB"`), as every size key.
    #[serde(deserialize_with = "crate::config::size_key::max_datagram")]
    pub max_datagram: usize,
    /// Datagrams kept for retransmission (the retransmission buffer; × max_datagram
    /// bytes, allocated at start). Default 4096.
    pub buffer: usize,
    /// Retransmissions in bytes per second at most (NAKs beyond are dropped; receivers
    /// ask again). Default 67108864 (64 MiB/s).
    pub retransmit_rate: u64,
    /// Tests and demos: drop this fraction of original datagrams (0.05 = 5%), never
    /// retransmissions or heartbeats. Default 0.
    pub loss: f64,
    /// Seed of `loss` (the same seed drops the same datagrams). Default 0.
    pub seed: u64,
}

impl Default for MulticastRoute {
    fn default() -> Self {
        let s = SenderConfig::default();
        MulticastRoute {
            group: tickwire_mcast::driver::DEFAULT_GROUP,
            topics: Vec::new(),
            interface: Ipv4Addr::LOCALHOST,
            max_datagram: s.max_datagram,
            buffer: s.buffer_datagrams,
            retransmit_rate: s.retransmit_rate,
            loss: 0.0,
            seed: 0,
        }
    }
}

impl MulticastRoute {
    /// Parses the `--multicast` flag: `GROUP:PORT=PATTERN[,PATTERN...]`.
    pub fn parse_flag(s: &str) -> Result<MulticastRoute, String> {
        let (group, topics) = s.split_once('=').ok_or_else(|| {
            format!("{s:?}: expected GROUP:PORT=PATTERN[,PATTERN...], e.g. 239.255.74.2:7441=md/>")
        })?;
        let group = group
            .parse::<SocketAddrV4>()
            .map_err(|e| format!("{s:?}: group {group:?}: {e} (e.g. 239.255.74.2:7441)"))?;
        let route = MulticastRoute {
            group,
            topics: topics.split(',').map(str::to_owned).collect(),
            ..MulticastRoute::default()
        };
        route.validate()?;
        Ok(route)
    }

    fn sender_config(&self, session: SessionId) -> SenderConfig {
        SenderConfig {
            session,
            max_datagram: self.max_datagram,
            buffer_datagrams: self.buffer,
            retransmit_rate: self.retransmit_rate,
            ..SenderConfig::default()
        }
    }

    /// Checks the bounds; the error names the stream and the setting.
    pub fn validate(&self) -> Result<(), String> {
        let g = self.group;
        if !g.ip().is_multicast() || g.port() == 0 {
            return Err(format!(
                "multicast group {g}: not a multicast address with a port (224.0.0.0/4, e.g. 239.255.74.2:7441)"
            ));
        }
        if self.topics.is_empty() || self.topics.len() > MAX_ROUTE_PATTERNS {
            return Err(format!(
                "multicast group {g}: topics must list 1 to {MAX_ROUTE_PATTERNS} patterns"
            ));
        }
        for p in &self.topics {
            if let Err(e) = validate_pattern(p.as_bytes()) {
                return Err(format!(
                    "multicast group {g}: pattern {p:?} is invalid: {e}"
                ));
            }
            if crate::groups::is_shared(p) {
                return Err(format!(
                    "multicast group {g}: pattern {p:?}: $share is for shared subscriptions"
                ));
            }
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(format!(
                "multicast group {g}: loss {} is not a fraction in 0..1 (0.05 is 5%)",
                self.loss
            ));
        }
        self.sender_config(SessionId(1))
            .validate()
            .map_err(|e| format!("multicast group {g}: {e}"))
    }
}

/// Most multicast streams one router sends.
pub const MAX_STREAMS: usize = 64;

/// Checks a list of streams: each valid, no group and port twice.
pub fn validate_routes(routes: &[MulticastRoute]) -> Result<(), String> {
    if routes.len() > MAX_STREAMS {
        return Err(format!("at most {MAX_STREAMS} multicast streams"));
    }
    for (i, r) in routes.iter().enumerate() {
        r.validate()?;
        if routes[..i].iter().any(|o| o.group == r.group) {
            return Err(format!(
                "multicast group {} is configured twice (one stream per group and port)",
                r.group
            ));
        }
    }
    Ok(())
}

/// Counters of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamCounters {
    /// Messages sent by multicast.
    pub messages: u64,
    /// Messages of a multicast topic that did not fit in one datagram (sent over TCP).
    pub too_large: u64,
}

struct Stream {
    route: MulticastRoute,
    sender: Sender,
    counters: StreamCounters,
}

/// Every multicast stream of the router (empty without `[[router.multicast]]`).
#[derive(Default)]
pub struct Multicast {
    streams: Vec<Stream>,
}

impl Multicast {
    /// One sender core per route (routes already validated). Session ids come from the
    /// start time (`wall`), so a restarted router is a new session to its receivers.
    pub fn new(routes: &[MulticastRoute], now: MonoNanos, wall: UtcNanos) -> Multicast {
        let mut streams = Vec::with_capacity(routes.len());
        let w = wall.as_nanos();
        for (i, r) in routes.iter().enumerate() {
            let mix = (w ^ (w >> 32) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) as u32;
            match Sender::new(r.sender_config(SessionId(mix | 1)), now) {
                Ok(sender) => streams.push(Stream {
                    route: r.clone(),
                    sender,
                    counters: StreamCounters::default(),
                }),
                // Validated by `Config::validate`: unreachable for a checked config.
                Err(e) => {
                    tracing::error!(group = %r.group, error = %e, "multicast stream not started")
                }
            }
        }
        Multicast { streams }
    }

    /// Whether any stream is configured.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Streams, in configuration order.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// The stream's route.
    pub fn route(&self, i: usize) -> &MulticastRoute {
        &self.streams[i].route
    }

    /// The stream whose topics match `topic` (the first one), if any.
    #[inline]
    fn stream_of(&self, topic: &str) -> Option<usize> {
        self.streams
            .iter()
            .position(|s| s.route.topics.iter().any(|p| pattern_matches(p, topic)))
    }

    /// Puts a routed PUBLISH (`raw`, already validated) into its stream, if its topic
    /// leaves by multicast. True when it went by multicast: multicast clients are then
    /// not sent it over TCP.
    #[inline]
    pub fn publish(&mut self, now: MonoNanos, topic: &str, raw: &[u8]) -> bool {
        if self.streams.is_empty() {
            return false;
        }
        let Some(i) = self.stream_of(topic) else {
            return false;
        };
        let Ok(Some((Frame::Publish(m), _))) = frame::decode(raw, u32::MAX) else {
            return false;
        };
        if m.reply.is_some() {
            return false;
        }
        let opts = PublishOptions {
            seq: m.seq,
            publisher_send: m.stamps.map(|s| s.publisher_send),
        };
        let s = &mut self.streams[i];
        match s.sender.publish(now, topic, m.payload, opts) {
            Ok(_) => {
                s.counters.messages += 1;
                true
            }
            Err(_) => {
                s.counters.too_large += 1;
                false
            }
        }
    }

    /// Closes every open datagram (once per loop turn, after routing).
    pub fn flush(&mut self, now: MonoNanos) {
        for s in &mut self.streams {
            s.sender.flush(now);
        }
    }

    /// A NAK or flow report that arrived on stream `i`'s socket.
    pub fn handle_nak(&mut self, now: MonoNanos, i: usize, bytes: &[u8]) {
        if let Some(s) = self.streams.get_mut(i) {
            let _ = s.sender.handle_nak(now, bytes);
            while let Some(ev) = s.sender.poll_event() {
                tracing::debug!(group = %s.route.group, event = ?ev, "multicast");
            }
        }
    }

    /// Runs the streams' timers (heartbeats, retransmission budget).
    pub fn handle_timer(&mut self, now: MonoNanos) {
        for s in &mut self.streams {
            s.sender.handle_timer(now);
        }
    }

    /// The earliest timer of any stream.
    pub fn poll_timeout(&self) -> Option<MonoNanos> {
        self.streams.iter().map(|s| s.sender.poll_timeout()).min()
    }

    /// Stream `i`'s sender core, for the driver to send what it has.
    pub fn sender_mut(&mut self, i: usize) -> &mut Sender {
        &mut self.streams[i].sender
    }

    /// Appends one MCAST_ROUTE per stream: the group, its topics and the position a
    /// client admitted now starts at (the open datagram is closed first, so everything
    /// routed after this goes in datagrams from that position on).
    pub fn encode_routes(&mut self, now: MonoNanos, out: &mut Vec<u8>) {
        for s in &mut self.streams {
            s.sender.flush(now);
            let r = &s.route;
            let res = encode_mcast_route(
                out,
                r.group,
                s.sender.session().0,
                s.sender.next_seq(),
                s.sender.next_msg(),
                r.topics.iter().map(String::as_str),
            );
            if let Err(e) = res {
                tracing::error!(group = %r.group, error = %e, "cannot announce a multicast stream");
            }
        }
    }

    /// Per stream (the `multicast` array of the stats document, docs/multicast.md):
    /// group, topics, session, the router's counters and the sender's own, and every
    /// receiver's last flow report with its age at `now`.
    pub fn stats_json(&self, now: MonoNanos) -> serde_json::Value {
        let streams: Vec<_> = self
            .streams
            .iter()
            .map(|s| {
                let st = s.sender.stats();
                let reports: Vec<_> = s
                    .sender
                    .receivers()
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "receiver": format!("{:016x}", r.receiver),
                            "expected": r.expected,
                            "delivered": r.delivered,
                            "behind": r.behind,
                            "age_ms": now.saturating_sub(r.at) / 1_000_000,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "group": s.route.group.to_string(),
                    "topics": s.route.topics,
                    "session": s.sender.session().to_string(),
                    "messages": s.counters.messages,
                    "too_large": s.counters.too_large,
                    "datagrams": st.datagrams,
                    "heartbeats": st.heartbeats,
                    "retransmitted": st.retransmitted,
                    "naks": st.naks,
                    "nak_suppressed": st.nak_suppressed,
                    "nak_rate_limited": st.nak_rate_limited,
                    "nak_unrecoverable": st.nak_unrecoverable,
                    "nak_heartbeat_suppressed": st.nak_heartbeat_suppressed,
                    "status_refused": st.status_refused,
                    "receivers": reports.len(),
                    "receiver_reports": reports,
                })
            })
            .collect();
        serde_json::Value::Array(streams)
    }
}

/// Heartbeats are due at least this often while a stream is idle; the driver bounds its
/// sleep by it.
pub const TIMER_BOUND: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn route(topics: &[&str]) -> MulticastRoute {
        MulticastRoute {
            group: "239.255.74.9:7449".parse().unwrap(),
            topics: topics.iter().map(|s| s.to_string()).collect(),
            ..MulticastRoute::default()
        }
    }

    fn publish_frame(topic: &str, payload: &[u8], seq: Option<u64>) -> Vec<u8> {
        let mut b = Vec::new();
        let opts = PublishOptions {
            seq,
            publisher_send: None,
        };
        frame::encode_publish(&mut b, topic, payload, opts, 1 << 20).unwrap();
        b
    }

    #[test]
    fn flag_parses_and_bad_routes_are_refused_with_their_reason() {
        let r = MulticastRoute::parse_flag("239.255.74.2:7441=md/>,fx/*").unwrap();
        assert_eq!(r.topics, ["md/>", "fx/*"]);
        for bad in [
            "239.255.74.2:7441",
            "10.0.0.1:7441=md/>",
            "239.255.74.2:0=md/>",
            "239.255.74.2:7441=md//x",
            "239.255.74.2:7441=$share/g/md/>",
        ] {
            assert!(MulticastRoute::parse_flag(bad).is_err(), "{bad}");
        }
        let twice = [route(&["a"]), route(&["b"])];
        assert!(validate_routes(&twice).unwrap_err().contains("twice"));
        let lossy = MulticastRoute {
            loss: 1.5,
            ..route(&["a"])
        };
        assert!(lossy.validate().is_err());
    }

    #[test]
    fn only_matching_topics_go_by_multicast_and_routes_announce_the_position() {
        let now = MonoNanos(1);
        let mut m = Multicast::new(&[route(&["md/>"])], now, UtcNanos(7));
        assert!(m.publish(now, "md/a", &publish_frame("md/a", b"1", Some(9))));
        assert!(!m.publish(now, "fx/a", &publish_frame("fx/a", b"2", None)));
        let big = vec![0u8; 2000];
        assert!(!m.publish(now, "md/b", &publish_frame("md/b", &big, None)));
        let mut out = Vec::new();
        m.encode_routes(now, &mut out);
        let Ok(Some((Frame::McastRoute(r), n))) = frame::decode(&out, 1 << 20) else {
            panic!("no route frame")
        };
        assert_eq!(n, out.len());
        // The open datagram (message 0) was closed: a new client starts at 1, 1.
        assert_eq!((r.start_seq, r.start_msg), (1, 1));
        assert_eq!(r.patterns().collect::<Vec<_>>(), ["md/>"]);
        let d = m.sender_mut(0).poll_transmit().expect("the datagram");
        assert!(d.len() > 40);
        let stats = m.stats_json(now);
        assert_eq!(stats[0]["messages"], 1);
        assert_eq!(stats[0]["too_large"], 1);
    }
}
