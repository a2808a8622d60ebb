//! Receiving a router's multicast topics by multicast (docs/multicast.md §10).
//!
//! A client connected with [`ClientOptions::multicast`](crate::ClientOptions::multicast)
//! offers the MCAST capability in its HELLO. A router that sends some topics by
//! multicast then tells it, before WELCOME, each stream: its group, its topics and the
//! position the client starts at ([`Client::multicast_routes`](crate::Client::multicast_routes)),
//! and from then on sends it those topics only by multicast. [`MulticastReceiver`]
//! joins those groups and delivers, in stream order, the messages matching the
//! patterns the router accepted ([`MulticastReceiver::add_pattern`] after each
//! subscribe), recovering losses by NAK and reporting what cannot be recovered as a
//! counted [`MulticastEvent::Gap`], never hidden.
//!
//! Per message: one flyweight decode and a pattern match; per datagram one `recvfrom`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use tickwire_mcast::driver::Delivery;
use tickwire_mcast::{Loss, McastSubscriber, ReceiverConfig, SessionId, SubscriberOptions};
use tickwire_rt::MonoNanos;
use tickwire_wire::mcast_route::McastRoute;
use tickwire_wire::topic::{pattern_matches, validate_pattern};

use crate::{Error, Message};

/// Streams a router may announce at most (its own bound).
pub const MAX_ROUTES: usize = 64;

/// One multicast stream announced by the router (an MCAST_ROUTE frame, owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastRoute {
    /// The group and port.
    pub group: SocketAddrV4,
    /// The stream's session id.
    pub session: u32,
    /// Where this connection's part of the stream starts: (datagram, message index).
    pub start: (u64, u64),
    /// The topics it carries, as patterns.
    pub patterns: Vec<String>,
}

impl MulticastRoute {
    /// Appends a route received during the handshake, bounded by [`MAX_ROUTES`].
    pub(crate) fn record(
        routes: &mut Vec<MulticastRoute>,
        r: &McastRoute<'_>,
    ) -> Result<(), String> {
        if routes.len() == MAX_ROUTES {
            return Err(format!(
                "router announced more than {MAX_ROUTES} multicast streams"
            ));
        }
        // Each stream joined holds a receiver and its hold ring: one group and port
        // announced twice would be received twice (hostile-input pass: 64 copies of
        // one route, 275 MiB before a datagram arrived).
        if routes.iter().any(|o| o.group == r.group) {
            return Err(format!(
                "router announced multicast stream {} twice",
                r.group
            ));
        }
        routes.push(MulticastRoute {
            group: r.group,
            session: r.session,
            start: (r.start_seq, r.start_msg),
            patterns: r.patterns().map(str::to_owned).collect(),
        });
        Ok(())
    }
}

/// How to receive.
#[derive(Debug, Clone)]
pub struct MulticastOptions {
    /// The interface to join on. Default 127.0.0.1 (the router's default interface).
    pub interface: Ipv4Addr,
    /// Tests and demos: drop this fraction of the datagrams received (0.05 = 5%),
    /// retransmissions included. Default 0.
    pub loss: f64,
    /// Seed of `loss`. Default 0.
    pub seed: u64,
}

impl Default for MulticastOptions {
    fn default() -> Self {
        MulticastOptions {
            interface: Ipv4Addr::LOCALHOST,
            loss: 0.0,
            seed: 0,
        }
    }
}

/// What [`MulticastReceiver::poll`] hands the application, in stream order.
#[derive(Debug, Clone, Copy)]
pub enum MulticastEvent<'a> {
    /// A message matching one of the patterns (no `discarded` count: see `Gap`).
    Message(Message<'a>),
    /// Messages of the stream lost for good (the sender no longer held them, or stopped
    /// answering): `messages` of them from index `first_msg`, whatever their topic.
    Gap {
        /// The stream's group.
        group: SocketAddrV4,
        /// Index of the first message lost.
        first_msg: u64,
        /// How many.
        messages: u64,
    },
}

/// Counters of a [`MulticastReceiver`], all streams together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MulticastStats {
    /// Messages delivered (matching a pattern).
    pub delivered: u64,
    /// Gaps reported, and the messages they counted.
    pub gaps: u64,
    /// Messages lost in those gaps.
    pub lost: u64,
    /// Holes filled by retransmission.
    pub recovered: u64,
    /// Datagrams dropped by injected loss.
    pub injected_loss: u64,
}

struct Stream {
    group: SocketAddrV4,
    sub: McastSubscriber,
}

/// The multicast side of a client: joined to every stream the router announced.
pub struct MulticastReceiver {
    streams: Vec<Stream>,
    patterns: Vec<String>,
    stats: MulticastStats,
}

impl MulticastReceiver {
    /// Joins every stream of `routes` (from [`crate::Client::multicast_routes`]), each
    /// received from the position the router announced and only from its session.
    /// Deliver nothing until [`MulticastReceiver::add_pattern`].
    pub fn join(
        routes: &[MulticastRoute],
        opts: &MulticastOptions,
    ) -> Result<MulticastReceiver, Error> {
        let mut streams = Vec::with_capacity(routes.len());
        for (i, r) in routes.iter().enumerate() {
            let bad = |e: tickwire_mcast::Error| {
                Error::InvalidArgument(format!("multicast group {}: {e}", r.group))
            };
            // Each stream its own seed, so that receivers' losses differ by stream.
            let loss = Loss::new(opts.loss, opts.seed.wrapping_add(i as u64)).map_err(bad)?;
            let sub = McastSubscriber::new(SubscriberOptions {
                group: r.group,
                interface: opts.interface,
                patterns: vec![">".into()],
                receiver: ReceiverConfig {
                    session: Some(SessionId(r.session)),
                    start: Some(r.start),
                    ..ReceiverConfig::default()
                },
                loss,
                recv_buffer: None,
            })
            .map_err(bad)?;
            streams.push(Stream {
                group: r.group,
                sub,
            });
        }
        Ok(MulticastReceiver {
            streams,
            patterns: Vec::new(),
            stats: MulticastStats::default(),
        })
    }

    /// Whether it receives any stream.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Delivers messages matching `pattern` from now on: call it once the router has
    /// accepted the subscription. Shared-subscription patterns (`$share/...`) are
    /// ignored: the router delivers those over TCP.
    pub fn add_pattern(&mut self, pattern: &str) -> Result<(), Error> {
        validate_pattern(pattern.as_bytes())
            .map_err(|e| Error::InvalidArgument(format!("pattern {pattern:?}: {e}")))?;
        if !pattern.starts_with("$share") && !self.patterns.iter().any(|p| p == pattern) {
            self.patterns.push(pattern.to_owned());
        }
        Ok(())
    }

    /// Stops delivering `pattern`.
    pub fn remove_pattern(&mut self, pattern: &str) {
        self.patterns.retain(|p| p != pattern);
    }

    /// Waits up to `wait` for a datagram on any stream (or a NAK timer), then reads what
    /// is waiting and hands matching messages and gaps to `handler`, in each stream's
    /// order; sends NAKs and flow reports. Returns the number of events handled.
    pub fn poll<F: FnMut(MulticastEvent<'_>)>(&mut self, wait: Duration, mut handler: F) -> usize {
        let now = MonoNanos::now();
        let wait = self.streams.iter().fold(wait, |w, s| {
            w.min(Duration::from_nanos(
                s.sub.poll_timeout().saturating_sub(now),
            ))
        });
        if !wait.is_zero() && !self.streams.is_empty() {
            let mut fds: Vec<_> = self
                .streams
                .iter()
                .map(|s| rustix::event::PollFd::new(&s.sub, rustix::event::PollFlags::IN))
                .collect();
            let spec = rustix::event::Timespec::try_from(wait).ok();
            let _ = rustix::event::poll(&mut fds, spec.as_ref());
        }
        let mut n = 0;
        let patterns = &self.patterns;
        let stats = &mut self.stats;
        for s in &mut self.streams {
            let group = s.group;
            s.sub.poll(|d| match d {
                Delivery::Message { topic, msg, .. } => {
                    if patterns.iter().any(|p| pattern_matches(p, topic)) {
                        if let Ok(m) = Message::from_wire(msg) {
                            stats.delivered += 1;
                            n += 1;
                            handler(MulticastEvent::Message(m));
                        }
                    }
                }
                Delivery::Gap {
                    first_msg,
                    messages,
                    ..
                } => {
                    stats.gaps += 1;
                    stats.lost += messages;
                    n += 1;
                    handler(MulticastEvent::Gap {
                        group,
                        first_msg,
                        messages,
                    });
                }
                Delivery::Recovered { .. } => stats.recovered += 1,
                Delivery::Joined { .. } => {}
            });
        }
        n
    }

    /// Counters so far.
    pub fn stats(&self) -> MulticastStats {
        MulticastStats {
            injected_loss: self.streams.iter().map(|s| s.sub.dropped()).sum(),
            ..self.stats
        }
    }

    /// Tells each sender where this receiver stopped (a last flow report).
    pub fn close(&mut self) {
        for s in &mut self.streams {
            s.sub.close();
        }
    }
}

impl std::fmt::Debug for MulticastReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MulticastReceiver")
            .field(
                "groups",
                &self.streams.iter().map(|s| s.group).collect::<Vec<_>>(),
            )
            .field("patterns", &self.patterns)
            .field("stats", &self.stats)
            .finish()
    }
}
