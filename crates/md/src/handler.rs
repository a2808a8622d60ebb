//! `tickwire feed`: the feed-handler driver. Owns the sockets and the clock around the
//! pure [`crate::feed::FeedHandler`] core.
//!
//! One thread, one loop turn:
//! 1. read every datagram waiting on the multicast socket and on the re-request
//!    socket (retransmissions come back there), stamping each packet's receive time
//!    (CLOCK_MONOTONIC) right after its `recv`, and hand it to the core, whose updates
//!    are queued on the router connection (STAMPS with the publish time);
//! 2. one `write` to the router for everything queued (smart batching);
//! 3. send the core's re-requests, run its timeout when due;
//! 4. once a second, record the counters (packets, messages, gaps, recovered, lost,
//!    published) and optionally print them;
//! 5. every 10 ms, with `--http`, store a heartbeat and, when the monitoring thread
//!    asked, hand it a [`FeedSnapshot`] (see [`tickwire_rt::snapshot`]: no lock, and
//!    nothing at all per message).
//!
//! Idle: `spin` polls the sockets without sleeping (lowest latency, one core); `block`
//! waits in `poll(2)` up to 1 ms.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use tickwire_capture::net::{group_receiver, kernel_drops};
use tickwire_client::{Client, ClientOptions, PublishOptions, Topic, Wait};
use tickwire_rt::{snapshot, IdleStrategy, MonoNanos, StopFlag};

use crate::feed::{Counters, FeedConfig, FeedHandler, Sink};

/// The idle strategies the feed handler supports: spin (poll without sleeping) and
/// block (wait in `poll(2)` up to 1 ms).
pub const FEED_IDLE: [IdleStrategy; 2] = [IdleStrategy::Spin, IdleStrategy::Block];

/// Parses a feed-handler `--idle` value: spin or block.
pub fn parse_feed_idle(s: &str) -> Result<IdleStrategy, String> {
    IdleStrategy::parse_one_of(s, &FEED_IDLE)
}

/// Settings of a feed-handler run.
#[derive(Debug, Clone)]
pub struct HandlerOptions {
    pub group: SocketAddrV4,
    /// Line B: a redundant copy of the same session on a second group (A/B line
    /// arbitration: the first copy of each packet wins, a gap on one line is filled from
    /// the other within `feed.line_wait` before any re-request).
    pub group_b: Option<SocketAddrV4>,
    pub interface: Ipv4Addr,
    /// The exchange's re-request server.
    pub request_to: SocketAddrV4,
    /// The router to publish to.
    pub router: String,
    /// The router connection's login and TLS settings (docs/security.md); the handler
    /// sets the client's name and batching itself.
    pub client: ClientOptions,
    pub feed: FeedConfig,
    /// [`FEED_IDLE`]: spin or block.
    pub idle: IdleStrategy,
    /// Stop after End of Session was received and no gap is open (default on).
    pub exit_on_end_of_session: bool,
    /// Called with each second's counters (None: not reported). The library never prints;
    /// the binary passes a function that does.
    pub on_second: Option<fn(&Second)>,
}

/// One second of counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Second {
    pub second: u64,
    pub packets: u64,
    pub messages: u64,
    pub gaps: u64,
    pub recovered: u64,
    pub lost: u64,
    pub published: u64,
    /// Packets of other MoldUDP64 sessions, ignored.
    pub foreign: u64,
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct HandlerReport {
    pub counters: Counters,
    pub published: u64,
    pub requests_sent: u64,
    /// Re-requests the socket refused to send, and why the first failed.
    pub request_send_errors: u64,
    pub first_request_error: Option<String>,
    /// Order references the books did not know (e.g. their add was lost).
    pub unknown_refs: u64,
    /// Add Orders refused because `max_orders` orders were live.
    pub orders_refused: u64,
    /// The MoldUDP64 session followed (`None`: none was adopted).
    pub session: Option<crate::feed::Session>,
    /// The session of the last packet ignored as another session's.
    pub last_foreign_session: Option<crate::feed::Session>,
    pub timeline: Vec<Second>,
    pub end_of_session: bool,
    /// Datagrams the kernel dropped on the line sockets because their receive buffers
    /// were full (the feed read too slowly): never seen, so never counted as packets;
    /// their messages surface as gaps. `None`: the count is not available (no
    /// `/proc/net/udp`).
    pub kernel_drops: Option<u64>,
    /// Why publishing to the router failed, ending the run early (the router stopped,
    /// or the connection was lost): the counters above are the run's up to then.
    pub router_error: Option<String>,
    /// The first refusal the router sent without closing the connection (a publish the
    /// user's rules refuse), seen at the once-a-second look at the connection.
    pub first_router_refusal: Option<String>,
}

/// The feed handler at one tick, owned by the monitoring side (`tickwire feed --http`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FeedSnapshot {
    /// When it was taken.
    #[serde(skip)]
    pub taken: MonoNanos,
    /// Milliseconds since the handler started.
    pub uptime_ms: u64,
    /// Line A's multicast group.
    pub group: String,
    /// Line B's, if any.
    pub group_b: Option<String>,
    /// The re-request server.
    pub request_to: String,
    /// The router published to.
    pub router: String,
    /// The venue level of the topics.
    pub venue: String,
    /// The MoldUDP64 session followed (None: none adopted yet).
    pub session: Option<String>,
    /// The core's counters (sequencing, stray traffic, bad input).
    pub counters: Counters,
    /// Updates published to the router.
    pub published: u64,
    /// Re-requests sent, and those the socket refused.
    pub requests_sent: u64,
    /// Re-requests the socket refused to send.
    pub request_send_errors: u64,
    /// Order references the books did not know.
    pub unknown_refs: u64,
    /// Add Orders refused because `max_orders` orders were live.
    pub orders_refused: u64,
    /// A gap is open now.
    pub recovering: bool,
    /// End of Session was received.
    pub session_ended: bool,
    /// The last complete second's counts (the rates).
    pub last_second: Option<Second>,
    /// Datagrams received, per socket.
    pub datagrams: Datagrams,
    /// Datagrams the kernel dropped on the line sockets because their receive buffers
    /// were full (read once a second from `/proc/net/udp`; `None` where that is not
    /// available).
    pub kernel_drops: Option<u64>,
}

/// Datagrams received per socket (duplicates across lines included).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Datagrams {
    /// On line A's group.
    pub line_a: u64,
    /// On line B's group (0 without one).
    pub line_b: u64,
    /// Re-request answers.
    pub retransmissions: u64,
}

/// How often the loop stores its heartbeat and answers a snapshot request.
const MONITOR_TICK_NS: u64 = 10_000_000;

struct RouterSink<'a> {
    client: &'a mut Client,
    published: u64,
    error: Option<tickwire_client::Error>,
}

impl Sink for RouterSink<'_> {
    #[inline]
    fn publish(&mut self, topic: &Topic, payload: &[u8]) {
        let opts = PublishOptions {
            seq: None,
            publisher_send: Some(MonoNanos::now().as_nanos()),
        };
        match self.client.publish_to(topic, payload, opts) {
            Ok(()) => self.published += 1,
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(e);
                }
            }
        }
    }
}

/// Most datagrams the loop takes from its sockets between two writes to the router.
/// Under a burst the sockets hold hundreds; writing only once they are all drained would
/// hold the first updates back for the whole drain (measured: FH→router 3.9x the raw
/// floor's at the mean). A write per this many keeps that wait to a few µs and still
/// batches. The raw floor's forwarding thread uses the same bound.
pub const FLUSH_EVERY_DATAGRAMS: usize = 8;

/// Runs the feed handler until End of Session (when asked) or `stop`; a lost router is
/// an error.
pub fn run(opts: &HandlerOptions, stop: &StopFlag) -> anyhow::Result<HandlerReport> {
    let report = run_monitored(opts, stop, None)?;
    match report.router_error {
        Some(e) => Err(anyhow::anyhow!("{e}")),
        None => Ok(report),
    }
}

/// [`run`], publishing to a monitoring thread: a heartbeat every 10 ms and a
/// [`FeedSnapshot`] whenever the reader of `monitor` asks. A lost router ends the run
/// with its report ([`HandlerReport::router_error`]), so that its counters are told.
pub fn run_monitored(
    opts: &HandlerOptions,
    stop: &StopFlag,
    monitor: Option<&snapshot::Publisher<FeedSnapshot>>,
) -> anyhow::Result<HandlerReport> {
    let mut core = FeedHandler::new(opts.feed.clone())?;
    let feed = group_receiver(opts.group, opts.interface)?;
    feed.set_nonblocking(true)?;
    let feed_b = match opts.group_b {
        Some(g) => {
            let s = group_receiver(g, opts.interface)?;
            s.set_nonblocking(true)?;
            Some(s)
        }
        None => None,
    };
    let req = request_socket(opts.request_to)?;
    req.set_nonblocking(true)?;
    let client_opts = ClientOptions {
        name: "tickwire-feed".into(),
        batch_bytes: 256 * 1024,
        ..opts.client.clone()
    };
    // A connection error names the router's address itself; any other (a refused
    // login, a failed TLS handshake) gets it here.
    let mut client =
        Client::connect_to(opts.router.as_str(), client_opts).map_err(|e| match e {
            tickwire_client::Error::Connect { .. } => anyhow::anyhow!("{e}"),
            e => anyhow::anyhow!("connecting to the router at {}: {e}", opts.router),
        })?;
    let mut buf = vec![0u8; 65_536];
    let mut report = HandlerReport {
        counters: Counters::default(),
        published: 0,
        requests_sent: 0,
        request_send_errors: 0,
        first_request_error: None,
        unknown_refs: 0,
        orders_refused: 0,
        session: None,
        last_foreign_session: None,
        timeline: Vec::new(),
        end_of_session: false,
        kernel_drops: None,
        router_error: None,
        first_router_refusal: None,
    };
    let start = MonoNanos::now().as_nanos();
    let mut next_second = start + 1_000_000_000;
    let mut next_monitor_tick = start;
    // Datagrams received on line A, line B and the re-request socket.
    let mut line_datagrams = [0u64; 3];
    let mut last = Second::default();
    let mut published = 0u64;
    // The line sockets' kernel drops, read once a second while someone monitors (a
    // proc file read: never per datagram).
    let line_drops = || -> Option<u64> {
        [Some(&feed), feed_b.as_ref()]
            .into_iter()
            .flatten()
            .map(kernel_drops)
            .sum()
    };
    let mut drops_now = monitor.and_then(|_| line_drops());
    let publishing = |e: tickwire_client::Error| format!("publishing to the router: {e}");
    'run: loop {
        let mut sink = RouterSink {
            client: &mut client,
            published: 0,
            error: None,
        };
        let mut got = 0usize;
        // 1. Drain the sockets: line A, line B, retransmissions.
        for (line, sock) in [Some(&feed), feed_b.as_ref(), Some(&req)]
            .into_iter()
            .enumerate()
        {
            let Some(sock) = sock else { continue };
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => {
                        if line == 2 {
                            core.handle_retransmission(MonoNanos::now(), &buf[..n], &mut sink);
                        } else {
                            core.handle_datagram(MonoNanos::now(), &buf[..n], &mut sink);
                        }
                        got += 1;
                        line_datagrams[line] += 1;
                        if got % FLUSH_EVERY_DATAGRAMS == 0 {
                            if let Err(e) = sink.client.flush() {
                                // The turn's publishes so far count, as at a turn's end.
                                published += sink.published;
                                report.router_error = Some(publishing(e));
                                break 'run;
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let from = sock
                            .local_addr()
                            .map_or("a feed socket".into(), |a| a.to_string());
                        return Err(anyhow::anyhow!("receiving on {from}: {e}"));
                    }
                }
            }
        }
        // 3. Timeouts and re-requests.
        let now = MonoNanos::now();
        if core.poll_timeout().is_some_and(|t| now >= t) {
            core.handle_timeout(now, &mut sink);
        }
        published += sink.published;
        if let Some(e) = sink.error.take() {
            report.router_error = Some(publishing(e));
            break;
        }
        // 2. The turn's last write (one per FLUSH_EVERY_DATAGRAMS before it).
        if let Err(e) = client.flush() {
            report.router_error = Some(publishing(e));
            break;
        }
        while let Some(r) = core.poll_transmit() {
            match req.send_to(&r.to_bytes(), opts.request_to) {
                Ok(_) => report.requests_sent += 1,
                Err(e) => {
                    report.request_send_errors += 1;
                    if report.first_request_error.is_none() {
                        report.first_request_error =
                            Some(format!("sending to {}: {e}", opts.request_to));
                    }
                }
            }
        }
        // 4. Per-second counters, and a look at the router connection: a feed with
        // nothing to publish would otherwise not notice a router gone (its CLOSE, or the
        // end of stream) until the next update.
        if now.as_nanos() >= next_second {
            // (Over shared memory the end of stream of a killed router is looked for
            // now, not after thousands of empty polls.)
            client.look_for_router_end();
            match client.poll(Wait::NoWait, |_| {}) {
                Ok(_) => {}
                // A refusal that leaves the connection (a publish the user's rules
                // refuse: `--depth` updates to a topic only quotes and trades may go
                // to) is told, and the feed goes on, as it did before it looked.
                Err(e) if !e.is_fatal() => {
                    report
                        .first_router_refusal
                        .get_or_insert_with(|| e.to_string());
                }
                Err(e) => {
                    report.router_error = Some(publishing(e));
                    break;
                }
            }
            let c = core.counters();
            let s = Second {
                second: (next_second - start) / 1_000_000_000,
                packets: c.packets - last.packets,
                messages: c.messages - last.messages,
                gaps: c.gaps - last.gaps,
                recovered: c.recovered - last.recovered,
                lost: c.lost - last.lost,
                published: published - last.published,
                foreign: c.foreign_session - last.foreign,
            };
            last = Second {
                second: s.second,
                packets: c.packets,
                messages: c.messages,
                gaps: c.gaps,
                recovered: c.recovered,
                lost: c.lost,
                published,
                foreign: c.foreign_session,
            };
            if let Some(on_second) = opts.on_second {
                on_second(&s);
            }
            if monitor.is_some() {
                drops_now = line_drops();
            }
            report.timeline.push(s);
            next_second += 1_000_000_000;
        }
        // 5. Monitoring.
        if let Some(m) = monitor.filter(|_| now.as_nanos() >= next_monitor_tick) {
            next_monitor_tick = now.as_nanos() + MONITOR_TICK_NS;
            m.tick_timed(now, MonoNanos::now, || FeedSnapshot {
                taken: now,
                uptime_ms: (now.as_nanos() - start) / 1_000_000,
                group: opts.group.to_string(),
                group_b: opts.group_b.map(|g| g.to_string()),
                request_to: opts.request_to.to_string(),
                router: opts.router.clone(),
                venue: opts.feed.venue.clone(),
                session: core.session().map(|s| s.to_string().trim_end().to_string()),
                counters: *core.counters(),
                published,
                requests_sent: report.requests_sent,
                request_send_errors: report.request_send_errors,
                unknown_refs: core.books().unknown_refs,
                orders_refused: core.books().refused_full,
                recovering: core.recovering(),
                session_ended: core.session_ended(),
                last_second: report.timeline.last().copied(),
                datagrams: Datagrams {
                    line_a: line_datagrams[0],
                    line_b: line_datagrams[1],
                    retransmissions: line_datagrams[2],
                },
                kernel_drops: drops_now,
            });
        }
        if opts.exit_on_end_of_session && core.session_ended() && !core.recovering() {
            report.end_of_session = true;
            break;
        }
        if stop.is_set() {
            break;
        }
        if got == 0 && opts.idle == IdleStrategy::Block {
            let (feed_fd, req_fd) = (feed.as_fd(), req.as_fd());
            // Line B's socket, or line A's again (polling one fd twice is harmless).
            let b_fd = feed_b.as_ref().map_or(feed.as_fd(), |b| b.as_fd());
            let mut fds = [
                rustix::event::PollFd::new(&feed_fd, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&b_fd, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&req_fd, rustix::event::PollFlags::IN),
            ];
            // Up to 1 ms, or until a gap's line wait or re-request is due.
            let wait_ns = core.poll_timeout().map_or(1_000_000, |t| {
                t.saturating_sub(MonoNanos::now()).clamp(1, 1_000_000)
            });
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: wait_ns as i64,
            };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        }
    }
    client.flush().ok();
    report.counters = *core.counters();
    report.unknown_refs = core.books().unknown_refs;
    report.orders_refused = core.books().refused_full;
    report.session = core.session();
    report.last_foreign_session = core.last_foreign_session();
    report.published = published;
    report.kernel_drops = line_drops();
    let _ = client.close();
    Ok(report)
}

/// The re-request socket, bound to the local address the kernel sends to `to` from:
/// loopback for a server on this host (so only local processes reach the socket), the
/// outgoing interface's address for one on another host (a socket bound to loopback
/// cannot send there: every re-request failed with "Invalid argument").
fn request_socket(to: SocketAddrV4) -> std::io::Result<UdpSocket> {
    let local = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|probe| {
            probe.connect(to)?;
            probe.local_addr()
        })
        .ok()
        .and_then(|a| match a.ip() {
            std::net::IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
            _ => None,
        })
        .unwrap_or(Ipv4Addr::LOCALHOST);
    UdpSocket::bind(SocketAddrV4::new(local, 0))
}

/// Waits up to `limit` for a router to accept connections at `addr`.
pub fn wait_for_router(addr: &str, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile-input probe: the re-request socket was bound to 127.0.0.1, so a
    /// re-request server on another host was never reached ("Invalid argument").
    #[test]
    fn the_request_socket_is_bound_where_the_server_is_reached_from() {
        let local = request_socket("127.0.0.1:9".parse().unwrap()).unwrap();
        assert_eq!(
            local.local_addr().unwrap().ip(),
            std::net::IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        // A documentation address (TEST-NET-1): routed by the default route when
        // there is one; never bound to loopback then.
        let probe = UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect("192.0.2.1:9").is_ok() {
            let remote = request_socket("192.0.2.1:9".parse().unwrap()).unwrap();
            let ip = remote.local_addr().unwrap().ip();
            assert_eq!(ip, probe.local_addr().unwrap().ip());
            assert!(!ip.is_loopback(), "{ip}");
        }
    }
}
