//! Thin drivers over UDP sockets: [`McastPublisher`] (a client publishing directly to a
//! multicast stream, no router) and [`McastSubscriber`] (joins the group, filters by its
//! subscription patterns). Both are non-blocking and driven from the application's
//! loop: read what is waiting, feed the core, drain its polls, send.
//!
//! Sockets come from `tickwire_capture::net` (the market-data feed's multicast set-up:
//! `SO_REUSEADDR` so several receivers share a group and port on one host, multicast
//! loop on, TTL 1). Per datagram one `sendto` or `recvfrom`; nothing per message.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use tickwire_capture::net::{group_receiver, group_sender};
use tickwire_rt::MonoNanos;
use tickwire_wire::frame::{Msg, PublishOptions};
use tickwire_wire::topic::{pattern_matches, validate_pattern};

use crate::packet::{self, Kind};
use crate::receiver::{Event, Receiver, ReceiverConfig, ReceiverStats};
use crate::sender::{ReceiverReport, Sender, SenderConfig, SenderEvent, SenderStats};
use crate::{Error, Loss, SessionId};

/// The group used when none is given.
pub const DEFAULT_GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 74, 1), 7440);

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

fn net(e: tickwire_capture::net::NetError) -> Error {
    Error::Io {
        what: e.to_string(),
        source: std::io::Error::other("multicast socket set-up"),
    }
}

/// Waits until `sock` is readable or `timeout` passes (EINTR counts as a wake-up).
fn wait_readable(sock: &UdpSocket, timeout: Duration) {
    let fd = sock.as_fd();
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let spec = rustix::event::Timespec::try_from(timeout).ok();
    let _ = rustix::event::poll(&mut fds, spec.as_ref());
}

/// Sends every datagram `core` has queued to `group`, one `sendto` each; `loss` drops
/// original DATA datagrams (never retransmissions or heartbeats). Returns the sends that
/// failed (a full socket buffer: receivers NAK what is missing). Used by
/// [`McastPublisher`] and by the router's multicast streams.
pub fn send_pending(
    core: &mut Sender,
    sock: &UdpSocket,
    group: SocketAddr,
    loss: &mut Loss,
) -> u64 {
    let mut errors = 0;
    while let Some(d) = core.poll_transmit() {
        let original = d[5] == Kind::Data as u8 && d[6] == 0;
        if original && loss.drop_next() {
            continue;
        }
        if let Err(e) = sock.send_to(d, group) {
            if e.kind() != ErrorKind::Interrupted {
                errors += 1;
            }
        }
    }
    errors
}

/// The sender's socket for `interface`: bound to it on an ephemeral port (where NAKs
/// arrive), multicast TTL 1 and loop on, non-blocking.
pub fn sender_socket(interface: Ipv4Addr) -> Result<UdpSocket, Error> {
    let sock = group_sender(interface).map_err(net)?;
    sock.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
    Ok(sock)
}

/// How to publish.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// The multicast group and port (default 239.255.74.1:7440).
    pub group: SocketAddrV4,
    /// The interface multicast leaves through (default 127.0.0.1).
    pub interface: Ipv4Addr,
    /// Protocol settings; the session id is drawn at random unless `session` is set.
    pub sender: SenderConfig,
    /// Force this session id (tests of stray senders).
    pub session: Option<SessionId>,
    /// Injected loss of original DATA datagrams (never of retransmissions).
    pub loss: Loss,
}

impl Default for PublisherOptions {
    fn default() -> Self {
        PublisherOptions {
            group: DEFAULT_GROUP,
            interface: Ipv4Addr::LOCALHOST,
            sender: SenderConfig::default(),
            session: None,
            loss: Loss::none(),
        }
    }
}

/// A client publishing directly to a multicast stream.
pub struct McastPublisher {
    core: Sender,
    sock: UdpSocket,
    group: SocketAddr,
    loss: Loss,
    buf: Vec<u8>,
    send_errors: u64,
}

impl McastPublisher {
    /// Opens the socket (bound to the interface, an ephemeral port where NAKs arrive).
    pub fn new(opts: PublisherOptions) -> Result<McastPublisher, Error> {
        let mut cfg = opts.sender;
        cfg.session = opts
            .session
            .unwrap_or_else(|| SessionId(rand::random::<u32>() | 1));
        let core = Sender::new(cfg, MonoNanos::now())?;
        if !opts.group.ip().is_multicast() {
            return Err(Error::Config(format!(
                "{} is not a multicast group (224.0.0.0/4; try 239.255.74.1:7440)",
                opts.group
            )));
        }
        let sock = sender_socket(opts.interface)?;
        Ok(McastPublisher {
            core,
            sock,
            group: SocketAddr::V4(opts.group),
            loss: opts.loss,
            buf: vec![0; packet::MAX_DATAGRAM],
            send_errors: 0,
        })
    }

    /// The stream's session id.
    pub fn session(&self) -> SessionId {
        self.core.session()
    }

    /// Appends a message (with its PUBLISH options: sequence number, STAMPS; or
    /// `PublishOptions::default()`); full datagrams go out at once, the rest at
    /// [`Self::flush`]. Returns the message's index in the stream.
    pub fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        opts: PublishOptions,
    ) -> Result<u64, Error> {
        let i = self.core.publish(MonoNanos::now(), topic, payload, opts)?;
        self.transmit();
        Ok(i)
    }

    /// Sends the open datagram.
    pub fn flush(&mut self) {
        self.core.flush(MonoNanos::now());
        self.transmit();
    }

    /// Reads NAKs and flow reports, runs the timers (heartbeats), sends what is due.
    /// Call it from the application's loop (at least every heartbeat interval).
    pub fn poll(&mut self) {
        let now = MonoNanos::now();
        while let Ok(n) = self.sock.recv(&mut self.buf) {
            let _ = self.core.handle_nak(now, &self.buf[..n]);
        }
        self.core.handle_timer(now);
        self.transmit();
    }

    /// Polls for up to `time`, waking for NAKs: for lingering after the last message so
    /// receivers can recover it.
    pub fn linger(&mut self, time: Duration) {
        let end = MonoNanos::now().add_duration(time);
        loop {
            self.poll();
            let now = MonoNanos::now();
            if now >= end {
                return;
            }
            let wake = self.core.poll_timeout().min(end);
            wait_readable(
                &self.sock,
                Duration::from_nanos(wake.saturating_sub(now).max(1)),
            );
        }
    }

    fn transmit(&mut self) {
        self.send_errors += send_pending(&mut self.core, &self.sock, self.group, &mut self.loss);
    }

    /// The next event of the core (a receiver asked for what is gone).
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.core.poll_event()
    }

    /// Counters of the core.
    pub fn stats(&self) -> SenderStats {
        self.core.stats()
    }

    /// Receivers' flow reports.
    pub fn receivers(&self) -> &[ReceiverReport] {
        self.core.receivers()
    }

    /// Datagrams dropped by injected loss, and sends that failed.
    pub fn dropped(&self) -> (u64, u64) {
        (self.loss.dropped(), self.send_errors)
    }
}

/// How to subscribe.
#[derive(Debug, Clone)]
pub struct SubscriberOptions {
    /// The multicast group and port (default 239.255.74.1:7440).
    pub group: SocketAddrV4,
    /// The interface to join on (default 127.0.0.1).
    pub interface: Ipv4Addr,
    /// Subscription patterns (the router's syntax); messages matching none are skipped.
    pub patterns: Vec<String>,
    /// Protocol settings; the receiver id is drawn at random.
    pub receiver: ReceiverConfig,
    /// Injected loss of every datagram received.
    pub loss: Loss,
    /// The socket's receive buffer (`SO_RCVBUF`); `None` keeps 8 MiB. A small one makes
    /// a receiver that stops reading lose datagrams, as a slow host would.
    pub recv_buffer: Option<usize>,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        SubscriberOptions {
            group: DEFAULT_GROUP,
            interface: Ipv4Addr::LOCALHOST,
            patterns: vec![">".into()],
            receiver: ReceiverConfig::default(),
            loss: Loss::none(),
            recv_buffer: None,
        }
    }
}

/// What a subscriber hands the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// A message matching a pattern, in stream order.
    Message {
        index: u64,
        topic: &'a str,
        msg: Msg<'a>,
    },
    /// Messages lost for good (see [`Event::Gap`]); counted, never hidden.
    Gap {
        first_msg: u64,
        messages: u64,
        datagrams: u64,
    },
    /// A hole filled by retransmission, `after` it was seen.
    Recovered { after: Duration },
    /// A sender's session was adopted.
    Joined { session: SessionId, first_msg: u64 },
}

/// A client receiving a multicast stream.
pub struct McastSubscriber {
    core: Receiver,
    sock: UdpSocket,
    patterns: Vec<String>,
    loss: Loss,
    buf: Vec<u8>,
}

/// Datagrams read per [`McastSubscriber::poll`] at most, so timers run under load.
const READ_BATCH: usize = 64;

impl McastSubscriber {
    /// Joins the group.
    pub fn new(opts: SubscriberOptions) -> Result<McastSubscriber, Error> {
        for p in &opts.patterns {
            validate_pattern(p.as_bytes()).map_err(|e| Error::Pattern(p.clone(), e))?;
        }
        if !opts.group.ip().is_multicast() {
            return Err(Error::Config(format!(
                "{} is not a multicast group (224.0.0.0/4; try 239.255.74.1:7440)",
                opts.group
            )));
        }
        let mut cfg = opts.receiver;
        cfg.receiver_id = rand::random();
        cfg.seed = rand::random();
        let core = Receiver::new(cfg, MonoNanos::now())?;
        let sock = group_receiver(opts.group, opts.interface).map_err(net)?;
        sock.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
        if let Some(bytes) = opts.recv_buffer {
            socket2::SockRef::from(&sock)
                .set_recv_buffer_size(bytes)
                .map_err(io(format!("SO_RCVBUF {bytes}")))?;
        }
        Ok(McastSubscriber {
            core,
            sock,
            patterns: opts.patterns,
            loss: opts.loss,
            buf: vec![0; packet::MAX_DATAGRAM],
        })
    }

    /// Reads what is waiting (up to 64 datagrams), hands matching messages and gaps to
    /// `handler` in order, runs the timers and sends NAKs and flow reports. Returns the
    /// number of datagrams read.
    pub fn poll<F: FnMut(Delivery<'_>)>(&mut self, mut handler: F) -> usize {
        let mut read = 0;
        while read < READ_BATCH {
            let (n, from) = match self.sock.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(_) => break,
            };
            read += 1;
            if self.loss.drop_next() {
                continue;
            }
            let _ = self
                .core
                .handle_datagram(MonoNanos::now(), from, &self.buf[..n]);
            self.deliver(&mut handler);
        }
        self.core.handle_timer(MonoNanos::now());
        self.deliver(&mut handler);
        while let Some((to, d)) = self.core.poll_transmit() {
            let _ = self.sock.send_to(d, to);
        }
        read
    }

    /// [`Self::poll`], first waiting up to `max_wait` for a datagram (or a timer).
    pub fn poll_wait<F: FnMut(Delivery<'_>)>(&mut self, max_wait: Duration, handler: F) -> usize {
        let now = MonoNanos::now();
        let timer = Duration::from_nanos(self.core.poll_timeout().saturating_sub(now));
        let wait = max_wait.min(timer);
        if !wait.is_zero() {
            wait_readable(&self.sock, wait);
        }
        self.poll(handler)
    }

    fn deliver<F: FnMut(Delivery<'_>)>(&mut self, handler: &mut F) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::Message { index, msg } => {
                    // Checked by the decoder: every topic in a datagram is valid.
                    let Ok(topic) = std::str::from_utf8(msg.topic) else {
                        continue;
                    };
                    if self.patterns.iter().any(|p| pattern_matches(p, topic)) {
                        handler(Delivery::Message { index, topic, msg });
                    }
                }
                Event::Gap {
                    first_msg,
                    messages,
                    datagrams,
                } => handler(Delivery::Gap {
                    first_msg,
                    messages,
                    datagrams,
                }),
                Event::Recovered { after, .. } => handler(Delivery::Recovered { after }),
                Event::Joined { session, first_msg } => {
                    handler(Delivery::Joined { session, first_msg })
                }
            }
        }
    }

    /// When the core's next timer (NAK, flow report) is due: a caller waiting on several
    /// subscribers' sockets (see [`std::os::fd::AsFd`]) wakes by then and polls.
    pub fn poll_timeout(&self) -> MonoNanos {
        self.core.poll_timeout()
    }

    /// Tells the sender where this receiver stopped (a last flow report).
    pub fn close(&mut self) {
        self.core.handle_close(MonoNanos::now());
        while let Some((to, d)) = self.core.poll_transmit() {
            let _ = self.sock.send_to(d, to);
        }
    }

    /// Counters of the core.
    pub fn stats(&self) -> ReceiverStats {
        self.core.stats()
    }

    /// Datagrams dropped by injected loss.
    pub fn dropped(&self) -> u64 {
        self.loss.dropped()
    }

    /// The adopted session, once one was heard.
    pub fn session(&self) -> Option<SessionId> {
        self.core.session()
    }
}

impl AsFd for McastSubscriber {
    /// The group socket: readable when a datagram waits.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }
}
