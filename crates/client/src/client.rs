//! The driver: a non-blocking TCP stream or a shared-memory ring pair
//! (`crate::transport`), waits with `poll(2)`.

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use tickwire_rt::MonoNanos;

use rustix::event::PollFlags;
use rustix::io::Errno;
use socket2::{Domain, Protocol, Socket, Type};
use tickwire_wire::frame::{
    self, decode, flags, frame_len, ErrorCode, Frame, Image, Kind, Msg, PublishOptions, ReplyField,
    DEFAULT_MAX_FRAME, PROTOCOL_VERSION,
};
use tickwire_wire::gm::{self as wire_gm, NackAction, QueueOp, Start};
use tickwire_wire::topic::{validate_pattern, validate_topic, Topic, TopicMemo};

use crate::buffers::{RxBuf, Stash, MAX_STASH_BYTES};
use crate::error::EOF_REASON;
use crate::event::{Binding, BindingId, Event, Opened};
use crate::gm::{NackRecord, Outcome, PublishCounts, PublishWindow, PushError};
use crate::message::{ReplyTo, TopicText};
use crate::session::{frame_name, Batch, Pending, Reply, Session};
use crate::transport::{TlsStream, Transport};
use crate::{Error, Message, OwnedMessage};

/// Configuration of one [`Client`]. Every field has a sensible [`Default`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Name sent in HELLO, shown in the router's logs and stats (at most 64 bytes are
    /// sent). Default `"tickwire-client"`.
    pub name: String,
    /// Limit for the TCP connect plus the HELLO / WELCOME handshake. Default 5 s.
    pub connect_timeout: Duration,
    /// Limit for an answer to a request (ACK, stats, PONG, the router's CLOSE), and for
    /// a flush that makes no progress. Default 5 s.
    pub request_timeout: Duration,
    /// [`Client::publish`] buffers messages and writes once this many bytes are
    /// pending; 0 writes on every publish. Default 64 KiB.
    pub batch_bytes: usize,
    /// Every publish carries STAMPS with `publisher_send` = [`MonoNanos::now`]. Default off.
    pub stamp: bool,
    /// Largest frame accepted from the router. Default [`DEFAULT_MAX_FRAME`].
    pub max_frame: u32,
    /// Initial receive buffer size; it grows only to hold a single larger frame (up to
    /// `max_frame`). Default 256 KiB.
    pub recv_buffer: usize,
    /// Log in with these credentials (an AUTH frame right after HELLO). Default `None`:
    /// connect anonymously, which a router allows on loopback unless configured
    /// otherwise (docs/security.md).
    pub login: Option<Login>,
    /// Receive the topics the router sends by multicast by multicast: offer the MCAST
    /// capability; the router then announces its streams
    /// ([`Client::multicast_routes`]) and stops sending those topics over this
    /// connection. Receive them with a [`crate::MulticastReceiver`]
    /// (docs/multicast.md §10). Default off: everything over TCP.
    pub multicast: bool,
    /// Connect over TLS with this configuration (docs/security.md, "TLS"). Default
    /// `None`: TLS only for a `tls://` address, which then needs it.
    pub tls: Option<TlsOptions>,
    /// Where [`Client::request`]'s reply topics live: `PREFIX/<client id>/<nonce>`,
    /// subscribed on the first request. Default `None`: `_reply/user/<user>` for a
    /// password login whose user name is one topic level (so that a rule
    /// `_reply/user/<user>/>` lets a user read its own replies and nobody else's), else
    /// `_reply` (then `_reply/<client id>/...`: a client id is all digits, so never
    /// `user`). A token or certificate login does not name its user to the client:
    /// give it the prefix its rules allow.
    pub inbox_prefix: Option<String>,
}

/// TLS settings of [`ClientOptions::tls`].
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// What the client trusts and presents ([`tickwire_tls::client_config`] builds one
    /// from PEM files).
    pub config: std::sync::Arc<rustls::ClientConfig>,
    /// The name the router's certificate must carry. Default `None`: the host of the
    /// address connected to.
    pub server_name: Option<String>,
}

/// Credentials for [`ClientOptions::login`]. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// A user name and its password.
    Password {
        /// The user.
        user: String,
        /// Its password.
        password: String,
    },
    /// A token (it names its user by itself).
    Token(String),
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Login::Password { user, .. } => write!(f, "Password {{ user: {user:?}, .. }}"),
            Login::Token(_) => f.write_str("Token(..)"),
        }
    }
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            name: "tickwire-client".to_owned(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            batch_bytes: 64 * 1024,
            stamp: false,
            max_frame: DEFAULT_MAX_FRAME,
            recv_buffer: 256 * 1024,
            login: None,
            multicast: false,
            tls: None,
            inbox_prefix: None,
        }
    }
}

impl ClientOptions {
    /// The defaults with `name` (shown in the router's logs and stats).
    pub fn named(name: impl Into<String>) -> ClientOptions {
        ClientOptions {
            name: name.into(),
            ..ClientOptions::default()
        }
    }
}

/// How long [`Client::poll`] and [`Client::recv`] may wait when nothing is buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Busy-poll: one non-blocking read, never sleeps.
    NoWait,
    /// Sleep in `poll(2)` up to this long.
    Timeout(Duration),
    /// Sleep until something arrives.
    Forever,
}

/// A connection to a tickwire router. Single-threaded; see the crate docs.
#[derive(Debug)]
pub struct Client {
    stream: Transport,
    opts: ClientOptions,
    client_id: u32,
    router_max_frame: u32,
    session: Session,
    rx: RxBuf,
    /// The router ended its side of the stream (seen while flushing).
    rx_eof: bool,
    /// The last delivered topic, checked as UTF-8 once per run of messages on it.
    topic_text: TopicText,
    /// The last two topics published to, checked once per run of publishes on them
    /// (the full check was ~235 instructions of a ~680-instruction publish).
    publish_topics: TopicMemo,
    /// MESSAGE frames that arrived while waiting for a reply.
    stash: Stash,
    /// Bytes to send: `tx[tx_start..]` is pending.
    tx: Vec<u8>,
    tx_start: usize,
    next_request_id: u32,
    next_ping_token: u64,
    /// An error that happened after messages were already delivered in the same call;
    /// reported by the next call so neither is lost.
    deferred: Option<Error>,
    /// This connection's reply topic, once a request subscribed to it.
    inbox: Option<Box<str>>,
    /// Guaranteed publishes not answered yet (empty unless a publisher is open).
    /// Boxed: most clients never publish guaranteed, and a `Client` moves by value.
    pub(crate) gm: Box<PublishWindow>,
    /// Multicast streams the router announced before WELCOME (with `multicast` on).
    mcast_routes: Vec<crate::MulticastRoute>,
    /// What this connection asked for: a frame it never asked for is a protocol error,
    /// not something to keep for later (a hostile router filled the stash of a
    /// `tickwire stats` to its 1 GiB bound with unsolicited MESSAGEs).
    asked: Asked,
}

/// The requests that make the router send frames unprompted later (see
/// [`Client::unsolicited`]).
#[derive(Debug, Default, Clone, Copy)]
struct Asked {
    /// A SUBSCRIBE was sent: live MESSAGEs.
    subscribed: bool,
    /// An initial image or a cache query was asked for: MESSAGEs flagged CACHED.
    image: bool,
    /// A BIND was sent: DELIVERs, and BOUND announcing a standby's activation.
    bound: bool,
    /// A PUB_OPEN was sent: PUB_ACK and PUB_NACK.
    opened: bool,
}

enum ReadOutcome {
    Data,
    WouldBlock,
    Eof,
}

impl Client {
    /// Connects to the router at `addr` with [`ClientOptions::default`].
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, Error> {
        Client::connect_with(addr, ClientOptions::default())
    }

    /// Connects to the router at `addr` and completes the handshake.
    ///
    /// Tries every address `addr` resolves to until one accepts, all within
    /// `opts.connect_timeout` (handshake included). For an address given as text that
    /// may name shared memory (`shm:NAME`), use [`Client::connect_to`].
    pub fn connect_with(addr: impl ToSocketAddrs, opts: ClientOptions) -> Result<Client, Error> {
        Client::connect_plain(addr, "the given address", opts)
    }

    /// [`Client::connect_with`], naming the address `shown` in its errors.
    fn connect_plain(
        addr: impl ToSocketAddrs,
        shown: &str,
        opts: ClientOptions,
    ) -> Result<Client, Error> {
        let deadline = Instant::now().checked_add(opts.connect_timeout);
        let stream = connect_tcp(addr, shown, deadline)?;
        Client::start(Transport::Tcp(stream), opts, deadline)
    }

    /// Connects to `addr`: `shm:NAME` over shared memory to a router on this host
    /// started with `--shm NAME` (docs/shm.md), `tls://HOST:PORT` over TLS (with
    /// [`ClientOptions::tls`]), anything else over TCP as [`Client::connect_with`] (or
    /// over TLS when [`ClientOptions::tls`] is set).
    pub fn connect_to(addr: &str, opts: ClientOptions) -> Result<Client, Error> {
        if let Some(rest) = addr.strip_prefix(TLS_SCHEME) {
            return Client::connect_tls(rest, opts);
        }
        match tickwire_shm::parse_addr(addr) {
            Some(name) => Client::connect_shm(name, opts),
            None if opts.tls.is_some() => Client::connect_tls(addr, opts),
            None => Client::connect_plain(addr, addr, opts),
        }
    }

    /// Connects over TLS to `addr` (`HOST:PORT`), verifying the router's certificate
    /// against [`TlsOptions::server_name`] or else HOST.
    pub fn connect_tls(addr: &str, opts: ClientOptions) -> Result<Client, Error> {
        let Some(tls) = &opts.tls else {
            return Err(Error::InvalidArgument(format!(
                "{TLS_SCHEME}{addr} needs TLS settings: the CA that signed the router's certificate (--ca FILE)"
            )));
        };
        let name = match &tls.server_name {
            Some(n) => n.clone(),
            None => host_of(addr).to_owned(),
        };
        let server_name =
            tickwire_tls::server_name(&name).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let io = tickwire_tls::TlsIo::client(tls.config.clone(), server_name)
            .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?;
        let deadline = Instant::now().checked_add(opts.connect_timeout);
        // A refused connection names the scheme too (new-user pass: "127.0.0.2:7443"
        // left a user wondering whether TLS was used).
        let sock = connect_tcp(addr, addr, deadline).map_err(|e| match e {
            Error::Connect { addr, cause } => Error::Connect {
                addr: format!("{TLS_SCHEME}{addr}"),
                cause,
            },
            e => e,
        })?;
        let stream = Transport::Tls(Box::new(TlsStream { sock, io }));
        Client::start(stream, opts, deadline).map_err(|e| match e {
            // A failed TLS handshake: say so with the address.
            Error::Io(cause) if cause.kind() == io::ErrorKind::InvalidData => Error::Connect {
                addr: format!("{TLS_SCHEME}{addr} (server name {name})"),
                cause,
            },
            e => e,
        })
    }

    /// Connects over shared memory to the router listening on `name` (its `--shm`).
    pub fn connect_shm(name: &str, opts: ClientOptions) -> Result<Client, Error> {
        let deadline = Instant::now().checked_add(opts.connect_timeout);
        let path = tickwire_shm::socket_path(name);
        let link =
            tickwire_shm::ClientLink::connect(&path, opts.connect_timeout).map_err(|cause| {
                Error::Connect {
                    addr: format!("shm:{name} ({})", path.display()),
                    cause,
                }
            })?;
        Client::start(Transport::Shm(Box::new(link)), opts, deadline)
    }

    fn start(
        stream: Transport,
        opts: ClientOptions,
        deadline: Option<Instant>,
    ) -> Result<Client, Error> {
        let mut client = Client {
            stream,
            rx: RxBuf::new(opts.recv_buffer.max(1024)),
            rx_eof: false,
            topic_text: TopicText::default(),
            publish_topics: TopicMemo::default(),
            stash: Stash::default(),
            tx: Vec::with_capacity(opts.batch_bytes.saturating_add(1024).min(1 << 24)),
            tx_start: 0,
            client_id: 0,
            router_max_frame: 0,
            session: Session::default(),
            next_request_id: 1,
            next_ping_token: 1,
            deferred: None,
            inbox: None,
            gm: Box::default(),
            mcast_routes: Vec::new(),
            asked: Asked::default(),
            opts,
        };
        client.handshake(deadline)?;
        Ok(client)
    }

    /// The id the router gave this connection, as WELCOME carries it: the low 32 bits
    /// of the router's 64-bit id, which is never reused while the router runs (stats
    /// and logs show it in full).
    pub fn client_id(&self) -> u32 {
        self.client_id
    }

    /// The multicast streams the router announced (empty unless
    /// [`ClientOptions::multicast`] is on and the router sends topics by multicast):
    /// join them with [`crate::MulticastReceiver::join`].
    pub fn multicast_routes(&self) -> &[crate::MulticastRoute] {
        &self.mcast_routes
    }

    /// Largest frame the router accepts (from its WELCOME).
    pub fn router_max_frame(&self) -> u32 {
        self.router_max_frame
    }

    /// Largest frame accepted from the router: our `max_frame` plus the fields a router
    /// adds to a PUBLISH of that size ([`frame::ROUTER_FRAME_OVERHEAD`]: DISCARDS and
    /// CACHED in a MESSAGE, binding, count and id in a DELIVER).
    fn rx_limit(&self) -> u32 {
        self.opts
            .max_frame
            .saturating_add(frame::ROUTER_FRAME_OVERHEAD)
    }

    /// Subscribes to `pattern` and waits for the router's ACK.
    ///
    /// Messages that arrive meanwhile are kept for the next [`Client::poll`] /
    /// [`Client::recv`].
    pub fn subscribe(&mut self, pattern: &str) -> Result<(), Error> {
        self.asked.subscribed = true;
        self.pattern_request(
            pattern,
            "the router's ACK to SUBSCRIBE",
            frame::encode_subscribe,
        )
    }

    /// Subscribes to every pattern of `patterns`, like [`Client::subscribe`] on each but
    /// without a round trip each: up to [`SUBSCRIBE_PIPELINE`] SUBSCRIBEs are in flight
    /// at once (the router answers a connection's requests in order), so 100,000
    /// patterns take about as long as the router needs to install them, not 100,000
    /// round trips. Every pattern is checked before anything is sent: an invalid one is
    /// [`Error::InvalidPattern`] and nothing is subscribed.
    ///
    /// Every pattern is sent, whatever the router answers. When it refuses any (say
    /// `TOO_MANY_SUBSCRIPTIONS` past `max_subscriptions`), the result is
    /// [`Error::Rejected`] with the first refusal's code, its text naming that pattern
    /// and how many were refused in all; every pattern not refused is subscribed. A
    /// timeout, a close or a write failure ends it with that error instead: the
    /// patterns acknowledged before it are subscribed, those after it perhaps.
    pub fn subscribe_many<S: AsRef<str>>(&mut self, patterns: &[S]) -> Result<(), Error> {
        batch_result(self.subscribe_batch(patterns)?, patterns)
    }

    /// [`Client::unsubscribe`] of every pattern of `patterns` (each exactly as
    /// subscribed), pipelined as [`Client::subscribe_many`] is. Each pattern the router
    /// refuses (`NOT_SUBSCRIBED`: not held) is counted in one [`Error::Rejected`] as
    /// there; every other is unsubscribed.
    pub fn unsubscribe_many<S: AsRef<str>>(&mut self, patterns: &[S]) -> Result<(), Error> {
        batch_result(self.unsubscribe_batch(patterns)?, patterns)
    }

    /// [`Client::subscribe_many`]'s work: the patterns refused, in order, and the
    /// error that ended it early, if any (the refusals up to it are kept). `Err` only
    /// for an invalid pattern or a closed connection, before anything is sent.
    pub(crate) fn subscribe_batch<S: AsRef<str>>(
        &mut self,
        patterns: &[S],
    ) -> Result<BatchOutcome, Error> {
        let what = "the router's ACKs to SUBSCRIBE";
        self.asked.subscribed = true;
        self.pattern_batch(patterns, frame::encode_subscribe, what)
    }

    /// [`Client::unsubscribe_many`]'s work, as [`Client::subscribe_batch`].
    pub(crate) fn unsubscribe_batch<S: AsRef<str>>(
        &mut self,
        patterns: &[S],
    ) -> Result<BatchOutcome, Error> {
        let what = "the router's ACKs to UNSUBSCRIBE";
        self.pattern_batch(patterns, frame::encode_unsubscribe, what)
    }

    /// SUBSCRIBEs or UNSUBSCRIBEs (`encode`) of every pattern, pipelined; `what` names
    /// the answers in a timeout.
    fn pattern_batch<S: AsRef<str>>(
        &mut self,
        patterns: &[S],
        encode: fn(&mut Vec<u8>, u32, &str),
        what: &'static str,
    ) -> Result<BatchOutcome, Error> {
        for p in patterns {
            validate_pattern(p.as_ref().as_bytes()).map_err(Error::InvalidPattern)?;
        }
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        self.session.batch = Some(Batch::default());
        let res = self.run_batch(patterns, encode, what);
        let batch = self.session.batch.take().unwrap_or_default();
        let refused = Refused {
            indexes: batch.refused,
            first: batch.first_refusal,
        };
        Ok((refused, res.err()))
    }

    /// Sends the batch's requests, [`SUBSCRIBE_PIPELINE`] in flight at most, and takes
    /// their answers.
    fn run_batch<S: AsRef<str>>(
        &mut self,
        patterns: &[S],
        encode: fn(&mut Vec<u8>, u32, &str),
        what: &'static str,
    ) -> Result<(), Error> {
        let mut next = 0;
        loop {
            let waiting = self.session.batch.as_ref().map_or(0, |b| b.waiting.len());
            let room = SUBSCRIBE_PIPELINE.saturating_sub(waiting);
            let end = patterns.len().min(next + room);
            for (index, p) in patterns.iter().enumerate().take(end).skip(next) {
                let id = self.request_id();
                encode(&mut self.tx, id, p.as_ref());
                if let Some(b) = &mut self.session.batch {
                    b.waiting.push_back((id, index));
                }
            }
            next = end;
            if self
                .session
                .batch
                .as_ref()
                .is_none_or(|b| b.waiting.is_empty())
            {
                return Ok(());
            }
            // Half the window answered lets the next half go; the last answers all.
            let done: fn(&Session) -> bool = if next < patterns.len() {
                |s| {
                    s.batch
                        .as_ref()
                        .is_none_or(|b| b.waiting.len() <= SUBSCRIBE_PIPELINE / 2)
                }
            } else {
                |s| s.batch.as_ref().is_none_or(|b| b.waiting.is_empty())
            };
            self.await_until(what, done)?;
        }
    }

    /// Subscribes to `pattern` with an initial image: the router first sends the
    /// messages of its last-value cache matching `pattern` (each with
    /// [`Message::cached`] set to its original receive time), then the ACK, then live
    /// messages, with no gap and no duplicate between the two (docs/protocol.md,
    /// "Last-value cache"). The image is kept for the next [`Client::poll`].
    ///
    /// A `BUSY` answer (the router's budget for image scans is spent, or its egress
    /// buffers are full: "ask again later") is retried with a growing pause, 10 ms to
    /// 500 ms, for up to [`ClientOptions::request_timeout`]; then it is the error.
    pub fn subscribe_with_image(&mut self, pattern: &str) -> Result<(), Error> {
        let pattern = validate_pattern(pattern.as_bytes()).map_err(Error::InvalidPattern)?;
        self.asked.subscribed = true;
        self.asked.image = true;
        self.retry_busy(|c| {
            let id = c.request_id();
            c.call(
                "the router's ACK to SUBSCRIBE (initial image)",
                Pending::Request(id),
                |tx| frame::encode_subscribe_image(tx, id, pattern, Image::ThenLive),
            )
            .and_then(expect_ack)
        })
    }

    /// Runs `request` again while the router answers `BUSY`, pausing 10 ms, then twice
    /// as long each time up to 500 ms, until [`ClientOptions::request_timeout`] has
    /// passed since the first try; then the `BUSY` is returned.
    fn retry_busy<T>(
        &mut self,
        mut request: impl FnMut(&mut Client) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            match request(self) {
                Err(Error::Rejected { code, .. })
                    if code == ErrorCode::BUSY
                        && start.elapsed() + pause < self.opts.request_timeout =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    /// The messages of the router's last-value cache matching `pattern`, without
    /// subscribing (a one-shot query). Live messages of this client's subscriptions
    /// that arrive meanwhile are kept for the next [`Client::poll`]. `BUSY` is retried
    /// as by [`Client::subscribe_with_image`]. The timeout
    /// ([`ClientOptions::request_timeout`]) is on silence; an answer of more than
    /// 1 GiB (topics and payloads, 128 bytes more per message) gives the connection up.
    pub fn cache_query(&mut self, pattern: &str) -> Result<Vec<OwnedMessage>, Error> {
        let pattern = validate_pattern(pattern.as_bytes()).map_err(Error::InvalidPattern)?;
        self.retry_busy(|c| c.cache_query_once(pattern))
    }

    fn cache_query_once(&mut self, pattern: &str) -> Result<Vec<OwnedMessage>, Error> {
        if let Some(e) = self.take_deferred_or_closed() {
            return Err(e);
        }
        let id = self.request_id();
        self.asked.image = true;
        frame::encode_subscribe_image(&mut self.tx, id, pattern, Image::Only);
        let wait = AnswerWait {
            id,
            timeout: self.opts.request_timeout,
            // A large image takes a while: the limit is on silence, not the total.
            silence: true,
            what: "the router's cache query answer",
        };
        // Only this request's image is in flight: the one request outstanding is
        // this one. What the answer holds is bounded as the stash is: a router that
        // answers with cached messages without end ends the connection, not the
        // process's memory.
        let mut kept = 0usize;
        let res = self.await_answer(
            &mut Vec::new(),
            wait,
            |got, m| {
                if m.cached.is_none() {
                    return Take::Stash;
                }
                kept = kept.saturating_add(m.topic.len() + m.payload.len() + QUERY_ENTRY_BYTES);
                if kept > MAX_STASH_BYTES {
                    return Take::Done(Err(Error::Protocol(format!(
                        "the router's answer to a cache query passed {} MiB (a router's \
                         cache holds cache_max_bytes, 64 MiB by default): connection given up",
                        MAX_STASH_BYTES >> 20
                    ))));
                }
                match Message::from_wire(m) {
                    Ok(msg) => {
                        got.push(msg.into_owned());
                        Take::Skip
                    }
                    Err(e) => Take::Done(Err(e)),
                }
            },
            |got, reply| match reply {
                Reply::Ack => Some(Ok(std::mem::take(got))),
                Reply::Rejected { code, text } => Some(Err(Error::Rejected { code, text })),
                _ => None,
            },
        );
        match res {
            Err(Error::Protocol(text)) => Err(self.protocol_error(text)),
            other => other,
        }
    }

    /// Joins the shared subscription (queue group) `group` on `pattern`: the router
    /// gives each message matching `pattern` to one member of the group (round robin),
    /// while every other subscription still gets its own copy. It is the SUBSCRIBE of
    /// the pattern `$share/GROUP/PATTERN` (docs/protocol.md section 8); leave with
    /// [`Client::unsubscribe`] of that same pattern, or by disconnecting.
    pub fn subscribe_shared(&mut self, group: &str, pattern: &str) -> Result<(), Error> {
        validate_group(group)?;
        self.subscribe(&shared_pattern(group, pattern))
    }

    /// Removes the subscription to `pattern` (exactly as subscribed) and waits for the ACK.
    pub fn unsubscribe(&mut self, pattern: &str) -> Result<(), Error> {
        self.pattern_request(
            pattern,
            "the router's ACK to UNSUBSCRIBE",
            frame::encode_unsubscribe,
        )
    }

    /// SUBSCRIBE or UNSUBSCRIBE (`encode`) of a pattern checked here first; waits for
    /// the ACK (`what` names it in a timeout).
    fn pattern_request(
        &mut self,
        pattern: &str,
        what: &'static str,
        encode: fn(&mut Vec<u8>, u32, &str),
    ) -> Result<(), Error> {
        let pattern = validate_pattern(pattern.as_bytes()).map_err(Error::InvalidPattern)?;
        let id = self.request_id();
        self.call(what, Pending::Request(id), |tx| encode(tx, id, pattern))
            .and_then(expect_ack)
    }

    /// Queues one message for `topic`; writes when [`ClientOptions::batch_bytes`] are
    /// pending. Call [`Client::flush`] (or [`Client::poll`]) to send the rest.
    #[inline]
    pub fn publish(&mut self, topic: &str, payload: &[u8]) -> Result<(), Error> {
        self.publish_with(topic, payload, PublishOptions::default())
    }

    /// [`Client::publish`] with a sequence number and / or timestamp.
    ///
    /// With [`ClientOptions::stamp`] set, a missing `publisher_send` is filled in.
    pub fn publish_with(
        &mut self,
        topic: &str,
        payload: &[u8],
        opts: PublishOptions,
    ) -> Result<(), Error> {
        self.check_publish_topic(topic)?;
        self.publish_valid(topic, payload, opts)
    }

    /// [`Client::publish_with`] to a [`Topic`] checked once when it was made, for a
    /// publisher that sends to the same topics over and over (a feed handler): no
    /// per-message topic check.
    #[inline]
    pub fn publish_to(
        &mut self,
        topic: &Topic,
        payload: &[u8],
        opts: PublishOptions,
    ) -> Result<(), Error> {
        self.publish_valid(topic.as_str(), payload, opts)
    }

    /// [`validate_topic`], answered from memory for the last two topics published to.
    #[inline]
    fn check_publish_topic(&mut self, topic: &str) -> Result<(), Error> {
        match self.publish_topics.validate(topic.as_bytes()) {
            Ok(_) => Ok(()),
            Err(e) => Err(Error::InvalidTopic(e)),
        }
    }

    #[inline]
    fn publish_valid(
        &mut self,
        topic: &str,
        payload: &[u8],
        mut opts: PublishOptions,
    ) -> Result<(), Error> {
        if let Some((code, reason)) = &self.session.closed {
            return Err(Error::Closed {
                code: *code,
                reason: reason.clone(),
            });
        }
        if self.opts.stamp && opts.publisher_send.is_none() {
            opts.publisher_send = Some(MonoNanos::now().as_nanos());
        }
        frame::encode_publish(&mut self.tx, topic, payload, opts, self.router_max_frame)
            .map_err(Error::TooLarge)?;
        if self.pending_bytes() >= self.opts.batch_bytes {
            // The shared-memory data path: the whole frame fits the ring, as it
            // nearly always does; anything else (a full ring, a broken link) is
            // `flush`'s.
            if let Transport::Shm(l) = &mut self.stream {
                if self.tx_start == 0 {
                    if let Ok(n) = l.send(&self.tx) {
                        if n == self.tx.len() {
                            self.tx.clear();
                            return Ok(());
                        }
                        self.tx_start = n;
                    }
                }
            }
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every pending byte, waiting in `poll(2)` while the socket is full.
    ///
    /// Fails with [`Error::Timeout`] when the router accepts nothing for
    /// [`ClientOptions::request_timeout`]. While waiting it keeps reading into the
    /// receive buffer, so the router is never blocked on us.
    pub fn flush(&mut self) -> Result<(), Error> {
        if self.pending_bytes() == 0 && !self.stream.pending_below() {
            return Ok(());
        }
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        let mut stalled_since: Option<Instant> = None;
        loop {
            let sent = match self.stream.send(&self.tx[self.tx_start..]) {
                Ok(n) => {
                    self.tx_start += n;
                    if self.tx_start >= self.tx.len() {
                        self.tx.clear();
                        self.tx_start = 0;
                        if !self.stream.pending_below() {
                            return Ok(());
                        }
                    }
                    if n > 0 {
                        stalled_since = None;
                    }
                    // All taken, TLS records still below: wait until the socket takes them.
                    if self.pending_bytes() == 0 {
                        Err(Errno::WOULDBLOCK)
                    } else {
                        Ok(n)
                    }
                }
                Err(e) => Err(e),
            };
            match sent {
                Ok(_) => {}
                Err(Errno::INTR) => {}
                Err(Errno::WOULDBLOCK) => {
                    let since = *stalled_since.get_or_insert_with(Instant::now);
                    let deadline = since.checked_add(self.opts.request_timeout);
                    let want_read = !self.rx_eof && self.rx.room() > 0;
                    let mut events = PollFlags::OUT;
                    if want_read {
                        events |= PollFlags::IN;
                    }
                    match self.wait_fd(events, deadline)? {
                        None => {
                            return Err(Error::Timeout {
                                what: "the router to accept more bytes",
                                after: self.opts.request_timeout,
                            })
                        }
                        Some(revents) if want_read && revents.contains(PollFlags::IN) => {
                            if let ReadOutcome::Eof = self.read_rx()? {
                                self.rx_eof = true;
                            }
                        }
                        Some(_) => {}
                    }
                }
                Err(e) => return Err(self.write_failed(e.into())),
            }
        }
    }

    /// Writes what the socket takes right now, without waiting.
    fn send_now(&mut self) -> Result<(), Error> {
        while self.pending_bytes() > 0 {
            match self.stream.send(&self.tx[self.tx_start..]) {
                Ok(n) => self.tx_start += n,
                Err(Errno::INTR) => {}
                Err(Errno::WOULDBLOCK) => return Ok(()),
                // Not `write_failed`: it reads, which the caller must not have happen.
                Err(e) => return Err(Error::Io(e.into())),
            }
        }
        self.tx.clear();
        self.tx_start = 0;
        Ok(())
    }

    /// Bytes queued by `publish` (or control frames) and not yet written.
    #[inline]
    pub fn pending_bytes(&self) -> usize {
        self.tx.len() - self.tx_start
    }

    /// Before sleeping in `poll(2)` on this client's [`AsFd`](std::os::fd::AsFd) together
    /// with other connections (after a [`Wait::NoWait`] round found nothing): false when
    /// input is already waiting, so the caller must not sleep. Over shared memory it
    /// announces the sleep, so that the router rings the doorbell; call
    /// [`Client::end_sleep`] after the `poll(2)` in every case.
    pub fn begin_sleep(&mut self) -> bool {
        self.stream.begin_sleep()
    }

    /// Withdraws [`Client::begin_sleep`] after the `poll(2)`.
    pub fn end_sleep(&mut self) {
        self.stream.end_sleep();
    }

    /// Flushes pending publishes, then calls `handler` for every message available,
    /// waiting per `wait` only if none is buffered. Returns how many were handled.
    ///
    /// PING, PONG, ERROR and CLOSE frames are handled internally: a close is reported
    /// as [`Error::Closed`] (after the messages that preceded it were delivered), an
    /// ERROR that answers no request as [`Error::Rejected`].
    ///
    /// Guaranteed-messaging answers (PUB_ACK / PUB_NACK) still update the publisher's
    /// window and counts, but queue deliveries and the answers themselves are only
    /// reported by [`Client::poll_events`]: a client that binds to a queue must use it.
    pub fn poll<F: FnMut(Message<'_>)>(
        &mut self,
        wait: Wait,
        mut handler: F,
    ) -> Result<usize, Error> {
        self.poll_any(wait, false, &mut |ev| {
            if let Event::Message(m) = ev {
                handler(m);
            }
        })
    }

    /// [`Client::poll`] for everything that arrives: messages, answers to guaranteed
    /// publishes, queue deliveries and binding activations, in arrival order. Returns
    /// how many events were handled.
    ///
    /// Each [`Event`] borrows the receive buffer (no allocation per event).
    pub fn poll_events<F: FnMut(Event<'_>)>(
        &mut self,
        wait: Wait,
        mut handler: F,
    ) -> Result<usize, Error> {
        self.poll_any(wait, true, &mut handler)
    }

    fn poll_any<F: FnMut(Event<'_>)>(
        &mut self,
        wait: Wait,
        events: bool,
        handler: &mut F,
    ) -> Result<usize, Error> {
        if wait == Wait::NoWait && self.idle_without_input()? {
            return Ok(0);
        }
        let mut n = 0;
        while let Some(range) = self.stash.pop() {
            let ev = Event::from_frame(&self.stash.buf[range])?;
            if events || matches!(ev, Event::Message(_)) {
                handler(ev);
                n += 1;
            }
        }
        match self.poll_inner(wait, events, handler, &mut n) {
            Ok(()) => Ok(n),
            Err(e) if n > 0 => {
                self.defer(e);
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }

    fn poll_inner<F: FnMut(Event<'_>)>(
        &mut self,
        wait: Wait,
        events: bool,
        handler: &mut F,
        n: &mut usize,
    ) -> Result<(), Error> {
        if let Some(e) = self.take_deferred_or_closed() {
            return Err(e);
        }
        self.flush()?;
        let deadline = deadline_for(wait);
        loop {
            let drained = self.drain_rx(handler, n, events);
            // PONGs written while draining go out now, even if draining failed.
            self.flush()?;
            drained?;
            if *n > 0 {
                return Ok(());
            }
            match self.read_rx()? {
                ReadOutcome::Data => {}
                ReadOutcome::Eof => return Err(self.on_eof()),
                ReadOutcome::WouldBlock => {
                    if wait == Wait::NoWait || self.wait_fd(PollFlags::IN, deadline)?.is_none() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Delivers every complete MESSAGE (with `events`: every event) in the receive
    /// buffer to `handler`; other events are applied (publish answers) and dropped.
    fn drain_rx<F: FnMut(Event<'_>)>(
        &mut self,
        handler: &mut F,
        n: &mut usize,
        events: bool,
    ) -> Result<(), Error> {
        let limit = self.rx_limit();
        loop {
            // The data path: a whole MESSAGE without flags (header, topic, payload) is
            // read in place, as `recv` reads it (`frame::plain_message` answers as
            // `decode` does, property-tested in the wire crate); anything else, and a
            // topic that is not UTF-8, takes the decoder below.
            let data = self.rx.data();
            if let Some(head) = data.first_chunk::<5>() {
                let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
                if head[4] == Kind::Message as u8 && len <= data.len() {
                    if let Some((topic, payload)) = frame::plain_message(&data[..len], limit) {
                        if self.topic_text.is_text(topic) {
                            handler(Event::Message(Message::plain(
                                self.topic_text.text(topic),
                                payload,
                            )));
                            *n += 1;
                            self.rx.consume(len);
                            continue;
                        }
                    }
                }
            }
            let decoded = decode(self.rx.data(), limit);
            // A MESSAGE is delivered from where it was decoded (bound by reference:
            // moving the frame out is a copy of ~150 bytes per message).
            if let Ok(Some((Frame::Message(ref m), len))) = decoded {
                let msg = Message::from_wire_in(m, &mut self.topic_text);
                match msg {
                    Ok(msg) => {
                        handler(Event::Message(msg));
                        *n += 1;
                    }
                    Err(Error::Protocol(msg)) => return Err(self.protocol_error(msg)),
                    Err(e) => return Err(e),
                }
                self.rx.consume(len);
                continue;
            }
            let (frame, len) = match decoded {
                Ok(Some(x)) => x,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let msg = format!("undecodable frame from the router: {e}");
                    return Err(self.protocol_error(msg));
                }
            };
            if is_event(&frame) {
                apply_publish_answer(&mut self.gm, &frame);
                match Event::from_decoded(frame) {
                    Ok(ev) => {
                        if events || matches!(ev, Event::Message(_)) {
                            handler(ev);
                            *n += 1;
                        }
                    }
                    Err(Error::Protocol(msg)) => return Err(self.protocol_error(msg)),
                    Err(e) => return Err(e),
                }
                self.rx.consume(len);
                continue;
            }
            let res = self.session.on_control(frame, &mut self.tx);
            self.rx.consume(len);
            match res {
                Ok(()) => {}
                Err(Error::Protocol(msg)) => return Err(self.protocol_error(msg)),
                Err(e) => return Err(e),
            }
        }
    }

    /// Returns the next message, waiting per `wait`; `None` when none arrived in time.
    ///
    /// Like [`Client::poll`], it reports no guaranteed-messaging events.
    pub fn recv(&mut self, wait: Wait) -> Result<Option<Message<'_>>, Error> {
        // The shared-memory data path: nothing buffered, stashed, owed or pending, so
        // the ring's bytes go straight into the empty receive buffer and a MESSAGE at
        // its front is decoded in place; anything else takes the full path below.
        if self.rx.start == self.rx.end && self.quiet() {
            if let Transport::Shm(l) = &mut self.stream {
                match l.recv(&mut self.rx.buf) {
                    Ok(0) => self.rx_eof = true,
                    Ok(n) => {
                        self.rx.start = 0;
                        self.rx.end = n;
                        if let Some(len) = self.front_message_len() {
                            return self.take_front_message(len).map(Some);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if wait == Wait::NoWait {
                            return Ok(None);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if wait == Wait::NoWait && self.idle_without_input()? {
            return Ok(None);
        }
        if let Some(range) = self.next_stashed_message() {
            return Message::from_frame(&self.stash.buf[range], &mut self.topic_text).map(Some);
        }
        if let Some(e) = self.take_deferred_or_closed() {
            return Err(e);
        }
        self.flush()?;
        let deadline = deadline_for(wait);
        loop {
            // The data path: a whole MESSAGE at the front is decoded once, in place.
            if let Some(len) = self.front_message_len() {
                return self.take_front_message(len).map(Some);
            }
            // Control frames before it (an empty buffer holds none: read first).
            if !self.rx.data().is_empty() {
                self.next_rx_message(false)?;
                if self.front_message_len().is_some() {
                    continue;
                }
            }
            self.flush()?;
            match self.read_rx()? {
                ReadOutcome::Data => {}
                ReadOutcome::Eof => return Err(self.on_eof()),
                ReadOutcome::WouldBlock => {
                    if wait == Wait::NoWait || self.wait_fd(PollFlags::IN, deadline)?.is_none() {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// A busy poll's shortcut: true when nothing is buffered in either direction, the
    /// session is open and the transport has no input (a shared-memory ring that is
    /// empty: one load). Then a [`Wait::NoWait`] poll has nothing to do; otherwise (and
    /// always over TCP or TLS) the full path runs.
    #[inline]
    fn idle_without_input(&mut self) -> Result<bool, Error> {
        Ok(self.rx.data().is_empty()
            && self.quiet()
            && !self.stream.pending_below()
            && !self.stream.may_have_input()?)
    }

    /// Nothing to send, nothing stashed, no error waiting to be reported, and the
    /// session open: a receive has only the transport's new bytes to look at.
    #[inline]
    fn quiet(&self) -> bool {
        self.pending_bytes() == 0
            && self.stash.is_empty()
            && self.deferred.is_none()
            && self.session.closed.is_none()
            && !self.rx_eof
    }

    /// The length of the MESSAGE at the front of the receive buffer when it is there
    /// whole (read from its header); `None` for anything else, which
    /// [`Client::next_rx_message`] handles.
    #[inline]
    fn front_message_len(&self) -> Option<usize> {
        let data = self.rx.data();
        let head = data.first_chunk::<5>()?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        (head[4] == Kind::Message as u8 && len <= data.len()).then_some(len)
    }

    /// Consumes the whole MESSAGE of `len` bytes at the front of the receive buffer and
    /// returns it, decoded once (the bytes stay in place until the next read); PONGs
    /// that control frames before it queued go out first. A frame that does not decode
    /// ends the connection as in [`Client::next_rx_message`].
    fn take_front_message(&mut self, len: usize) -> Result<Message<'_>, Error> {
        let start = self.rx.start;
        self.rx.consume(len);
        if self.pending_bytes() > 0 {
            // PONGs go out now, without the waiting (and reading, which would move the
            // message) that `flush` may do.
            if let Err(e) = self.send_now() {
                self.defer(e);
            }
        }
        let limit = self.rx_limit();
        // The common message (no flags: header, topic, payload) read in place; anything
        // else, and a topic that is not UTF-8, takes the decoder.
        if let Some((topic, payload)) =
            frame::plain_message(&self.rx.buf[start..start + len], limit)
        {
            // Asked, then taken: a borrow returned from one call on some paths only
            // would stay borrowed on the path below.
            if self.topic_text.is_text(topic) {
                return Ok(Message::plain(self.topic_text.text(topic), payload));
            }
        }
        // Only `rx.buf` and `topic_text` are borrowed by the message; a failure closes
        // through the session and the stream.
        let failed = match decode(&self.rx.buf[start..start + len], limit) {
            Ok(Some((Frame::Message(m), _))) => {
                match Message::from_wire_in(&m, &mut self.topic_text) {
                    Ok(msg) => return Ok(msg),
                    Err(Error::Protocol(text)) => text,
                    Err(e) => return Err(e),
                }
            }
            Ok(_) => "a MESSAGE header on a frame that is not one".to_owned(),
            Err(e) => format!("undecodable frame from the router: {e}"),
        };
        Err(close_for_protocol_error(
            &mut self.session,
            &mut self.stream,
            failed,
        ))
    }

    /// The oldest stashed MESSAGE; stashed events before it are dropped (`recv` does
    /// not report them).
    fn next_stashed_message(&mut self) -> Option<std::ops::Range<usize>> {
        while let Some(range) = self.stash.pop() {
            if self.stash.buf.get(range.start + 4) == Some(&(Kind::Message as u8)) {
                return Some(range);
            }
        }
        None
    }

    /// Handles control frames in the receive buffer up to the next MESSAGE or event,
    /// which is consumed and returned as a byte range of `rx.buf`. Without
    /// `keep_events` (`recv`, which reports neither events nor anything decoded twice):
    /// events are dropped and a whole MESSAGE is left in place for
    /// [`Client::take_front_message`], so this returns `None`. Publish answers are
    /// applied to the window either way.
    fn next_rx_message(
        &mut self,
        keep_events: bool,
    ) -> Result<Option<std::ops::Range<usize>>, Error> {
        loop {
            if !keep_events && self.front_message_len().is_some() {
                return Ok(None);
            }
            let start = self.rx.start;
            let decoded = decode(self.rx.data(), self.rx_limit());
            let (frame, len) = match decoded {
                Ok(Some(x)) => x,
                Ok(None) => return Ok(None),
                Err(e) => {
                    let msg = format!("undecodable frame from the router: {e}");
                    return Err(self.protocol_error(msg));
                }
            };
            // What is kept for later is only ever what this connection asked for.
            if let Some(what) = self.unsolicited(&frame) {
                let msg = format!("the router sent {what}");
                return Err(self.protocol_error(msg));
            }
            let res = match frame {
                // Checked here so that the stash only ever holds deliverable messages.
                Frame::Message(m) if self.topic_text.check(m.topic).is_none() => {
                    let msg = "router delivered a topic that is not UTF-8".to_owned();
                    return Err(self.protocol_error(msg));
                }
                Frame::Message(_) => {
                    self.rx.consume(len);
                    return Ok(Some(start..start + len));
                }
                frame if is_event(&frame) => {
                    apply_publish_answer(&mut self.gm, &frame);
                    if keep_events {
                        self.rx.consume(len);
                        return Ok(Some(start..start + len));
                    }
                    Ok(())
                }
                frame => self.session.on_control(frame, &mut self.tx),
            };
            self.rx.consume(len);
            match res {
                Ok(()) => {}
                Err(Error::Protocol(msg)) => return Err(self.protocol_error(msg)),
                Err(e) => return Err(e),
            }
        }
    }

    // -- request / reply -------------------------------------------------------------

    /// Sends a request to `topic` and returns the first reply, waiting up to `timeout`.
    ///
    /// The request carries this connection's reply topic (`_reply/<id>/<nonce>`, made
    /// and subscribed on the first request) and a correlation id; the reply is the
    /// first message on the reply topic carrying that id (later ones, and replies to
    /// requests that timed out, are dropped). When no subscription on the router
    /// matches `topic`, the router says so at once: [`Error::NoResponders`]. Messages
    /// that arrive meanwhile are kept for the next [`Client::poll`].
    pub fn request(
        &mut self,
        topic: &str,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<OwnedMessage, Error> {
        validate_topic(topic.as_bytes()).map_err(Error::InvalidTopic)?;
        if let Some(e) = self.take_deferred_or_closed() {
            return Err(e);
        }
        let inbox = self.inbox()?;
        let id = self.request_id();
        let reply = ReplyField {
            correlation: id,
            to: inbox.as_bytes(),
        };
        let opts = PublishOptions {
            seq: None,
            publisher_send: self.opts.stamp.then(|| MonoNanos::now().as_nanos()),
        };
        frame::encode_publish_reply(
            &mut self.tx,
            topic,
            payload,
            opts,
            Some(reply),
            self.router_max_frame,
        )
        .map_err(Error::TooLarge)?;
        let wait = AnswerWait {
            id,
            timeout,
            silence: false,
            what: REQUEST_REPLY_WAIT,
        };
        self.await_answer(
            &mut (),
            wait,
            |_, m| {
                if m.topic != inbox.as_bytes() {
                    return Take::Stash;
                }
                if m.reply.is_some_and(|r| r.correlation == id) {
                    return Take::Done(Message::from_wire(m).map(Message::into_owned));
                }
                // A late reply to an earlier request: nobody waits.
                Take::Skip
            },
            |_, reply| match reply {
                Reply::Rejected { code, .. } if code == ErrorCode::NO_RESPONDERS => {
                    Some(Err(Error::NoResponders {
                        topic: topic.to_owned(),
                    }))
                }
                Reply::Rejected { code, text } => Some(Err(Error::Rejected { code, text })),
                _ => None,
            },
        )
    }

    /// Answers the request `to` (from [`Message::reply_to`] or
    /// [`OwnedMessage::reply_to`](crate::OwnedMessage)) with `payload`. Batched like a
    /// publish: flushed by the next `poll` or `flush`.
    pub fn reply(&mut self, to: &ReplyTo, payload: &[u8]) -> Result<(), Error> {
        // A reply topic the router accepted is valid; checked anyway, since a bad one
        // would cost this connection.
        validate_topic(to.topic.as_bytes()).map_err(Error::InvalidTopic)?;
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        let reply = ReplyField {
            correlation: to.correlation,
            to: b"",
        };
        frame::encode_publish_reply(
            &mut self.tx,
            &to.topic,
            payload,
            PublishOptions::default(),
            Some(reply),
            self.router_max_frame,
        )
        .map_err(Error::TooLarge)?;
        if self.pending_bytes() >= self.opts.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// The reply topic, subscribing to it the first time.
    fn inbox(&mut self) -> Result<Box<str>, Error> {
        if let Some(i) = &self.inbox {
            return Ok(i.clone());
        }
        // Unique per connection: the router's id for it plus a per-process nonce (ids
        // restart with the router, the nonce does not repeat them).
        let nonce = MonoNanos::now().as_nanos() ^ (u64::from(std::process::id()) << 40);
        let prefix = match (&self.opts.inbox_prefix, &self.opts.login) {
            (Some(p), _) => p.clone(),
            (None, Some(Login::Password { user, .. }))
                if !user.contains('/') && validate_topic(user.as_bytes()).is_ok() =>
            {
                // Under `user`, apart from the `_reply/<client id>` inboxes of the
                // other clients: a user named `3` must not read client 3's replies
                // (review).
                format!("_reply/user/{user}")
            }
            (None, _) => "_reply".to_owned(),
        };
        let inbox: Box<str> = format!("{prefix}/{}/{nonce:x}", self.client_id).into();
        // A topic, not a pattern: a wildcard in the prefix would subscribe to more
        // than this connection's replies.
        if let Err(e) = validate_topic(inbox.as_bytes()) {
            return Err(Error::InvalidArgument(format!(
                "inbox_prefix {prefix:?} makes the reply topic {inbox:?}, which is not a \
                 valid topic: {e}"
            )));
        }
        self.subscribe(&inbox)?;
        self.inbox = Some(inbox.clone());
        Ok(inbox)
    }

    /// Waits for the answer to request `wait.id`: every message frame that arrives
    /// meanwhile goes to `on_message` (stashed for the next `poll` unless it says
    /// otherwise), every reply of the router's to `on_reply`, until one of them is
    /// done or `wait.timeout` passes (of silence only, with `wait.silence`).
    fn await_answer<S, T>(
        &mut self,
        state: &mut S,
        wait: AnswerWait,
        mut on_message: impl FnMut(&mut S, Msg<'_>) -> Take<T>,
        mut on_reply: impl FnMut(&mut S, Reply) -> Option<Result<T, Error>>,
    ) -> Result<T, Error> {
        self.session.pending = Some(Pending::Request(wait.id));
        self.session.reply = None;
        let res = self.await_answer_inner(state, &wait, &mut on_message, &mut on_reply);
        self.session.pending = None;
        self.session.reply = None;
        res
    }

    fn await_answer_inner<S, T>(
        &mut self,
        state: &mut S,
        wait: &AnswerWait,
        on_message: &mut impl FnMut(&mut S, Msg<'_>) -> Take<T>,
        on_reply: &mut impl FnMut(&mut S, Reply) -> Option<Result<T, Error>>,
    ) -> Result<T, Error> {
        self.flush()?;
        let mut deadline = Instant::now().checked_add(wait.timeout);
        let mut expired = false;
        loop {
            loop {
                match self.next_rx_message(true) {
                    Ok(Some(range)) => {
                        let bytes = &self.rx.buf[range];
                        if let Ok(Some((Frame::Message(m), _))) = decode(bytes, u32::MAX) {
                            match on_message(state, m) {
                                Take::Stash => {}
                                Take::Skip => continue,
                                Take::Done(res) => return res,
                            }
                        }
                        if !self.stash.push(bytes) {
                            return Err(self.stash_full(wait.what));
                        }
                    }
                    Ok(None) => break,
                    Err(e @ Error::Rejected { .. }) => self.defer(e),
                    Err(e) => return Err(e),
                }
            }
            if let Some(res) = self.session.reply.take().and_then(|r| on_reply(state, r)) {
                return res;
            }
            if expired {
                return Err(Error::Timeout {
                    what: wait.what,
                    after: wait.timeout,
                });
            }
            self.flush()?;
            match self.read_rx()? {
                ReadOutcome::Data if wait.silence => {
                    deadline = Instant::now().checked_add(wait.timeout)
                }
                // A peer that keeps the socket readable never lets a read block: the
                // deadline is looked at after every read too, once what was read is.
                ReadOutcome::Data if past(deadline) => expired = true,
                ReadOutcome::Data => {}
                ReadOutcome::Eof => return Err(self.on_eof()),
                ReadOutcome::WouldBlock => {
                    if self.wait_fd(PollFlags::IN, deadline)?.is_none() {
                        return Err(Error::Timeout {
                            what: wait.what,
                            after: wait.timeout,
                        });
                    }
                }
            }
        }
    }

    // -- guaranteed messaging: publisher -------------------------------------------

    /// Opens this connection as the guaranteed publisher `identity` (1 to 64 bytes)
    /// and waits for PUB_OPENED; `options` are [`open_options`](crate::open_options)
    /// bits. A refusal is [`Error::Rejected`].
    ///
    /// Publishes left unanswered by an earlier connection of this client's window (see
    /// [`GuaranteedPublisher`](crate::GuaranteedPublisher)) are sent again, in
    /// sequence order; the router only acknowledges those it already stored. New
    /// publishes are numbered after both the router's `last_seq` and our own last.
    /// Another connection opening the same identity later takes it over: this one is
    /// then closed ([`Error::Closed`] with [`ErrorCode::TAKEN_OVER`]). A PUB_OPENED
    /// with a window of 0 or a `last_seq` of 2^64-1 (no router sends either) ends the
    /// connection with [`Error::Protocol`].
    pub fn open_publisher(&mut self, identity: &str, options: u32) -> Result<Opened, Error> {
        check_name("publisher identity", identity)?;
        let id = self.request_id();
        self.asked.opened = true;
        let reply = self.call("the router's PUB_OPENED", Pending::Request(id), |tx| {
            wire_gm::encode_pub_open(tx, id, options, identity)
        })?;
        match reply {
            // A window of 0 would leave nothing publishable (every publish refused as
            // not open) and a `last_seq` at the end of the sequence space no number to
            // publish with: neither comes from a router, so the connection ends.
            Reply::PubOpened { window: 0, .. } => Err(self
                .protocol_error("the router opened the publisher with a window of 0".to_owned())),
            Reply::PubOpened {
                last_seq: u64::MAX, ..
            } => Err(self.protocol_error(
                "the router opened the publisher at the last sequence number (2^64-1)".to_owned(),
            )),
            Reply::PubOpened { window, last_seq } => {
                self.gm.handle_opened(window, last_seq);
                let resent = self.resend_unanswered()?;
                Ok(Opened {
                    window,
                    last_seq,
                    resent,
                })
            }
            Reply::Rejected { code, text } => Err(Error::Rejected { code, text }),
            other => Err(unexpected_reply(other)),
        }
    }

    /// Queues one guaranteed publish and returns its sequence number. While the
    /// window is full it waits (reading answers) up to
    /// [`ClientOptions::request_timeout`] for room, then fails with
    /// [`Error::Timeout`]. Batches like [`Client::publish`]: call [`Client::flush`] or
    /// [`Client::poll_events`] after a burst.
    ///
    /// The answer (exactly one per publish) arrives later as [`Event::Acked`] /
    /// [`Event::Nacked`] from [`Client::poll_events`] and in
    /// [`Client::publish_counts`]. The topic and payload are kept until then.
    ///
    /// `Ok(seq)` means the publish is in the window (it will be answered, or resent by
    /// a reconnecting publisher); an `Err` means it was not taken. A write failure
    /// after it was taken is reported by the next call.
    pub fn publish_guaranteed(&mut self, topic: &str, payload: &[u8]) -> Result<u64, Error> {
        self.check_publish_topic(topic)?;
        self.take_fatal_deferred()?;
        self.wait_for_room()?;
        self.push_guaranteed(topic, payload)
    }

    /// [`Client::publish_guaranteed`] that never waits: [`Error::WindowFull`] when
    /// the window is full after reading the answers already received.
    pub fn try_publish_guaranteed(&mut self, topic: &str, payload: &[u8]) -> Result<u64, Error> {
        self.check_publish_topic(topic)?;
        self.take_fatal_deferred()?;
        if self.gm.is_open() && !self.gm.has_room() {
            self.send_now()?;
            if let ReadOutcome::Eof = self.read_rx()? {
                return Err(self.on_eof());
            }
            self.drain_rx_into_stash("the answers to its guaranteed publishes")?;
        }
        self.push_guaranteed(topic, payload)
    }

    /// Publishes, flushes and waits (up to [`ClientOptions::request_timeout`]) for
    /// this publish's answer. Events that arrive meanwhile (its own answer included)
    /// are still reported by the next [`Client::poll_events`].
    pub fn publish_guaranteed_wait(
        &mut self,
        topic: &str,
        payload: &[u8],
    ) -> Result<Outcome, Error> {
        let seq = self.publish_guaranteed(topic, payload)?;
        self.gm.watch(seq);
        let res = self.wait_until("the router's PUB_ACK or PUB_NACK", |c| c.gm.take_watched());
        self.gm.unwatch();
        res
    }

    /// Guaranteed publishes handed to the router and not answered yet.
    pub fn unanswered(&self) -> usize {
        self.gm.unanswered_len()
    }

    /// Outcome totals of this client's guaranteed publishes (each counted once).
    pub fn publish_counts(&self) -> &PublishCounts {
        self.gm.counts()
    }

    /// The window PUB_OPENED granted (0 while no publisher is open).
    pub fn publish_window(&self) -> u32 {
        self.gm.window()
    }

    fn push_guaranteed(&mut self, topic: &str, payload: &[u8]) -> Result<u64, Error> {
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        if !self.gm.has_room() {
            return Err(match self.gm.is_open() {
                true => Error::WindowFull,
                false => Error::PublisherNotOpen,
            });
        }
        let seq = self.gm.last_seq() + 1;
        let stamp = self.opts.stamp.then(|| MonoNanos::now().as_nanos());
        let start = self.tx.len();
        encode_guaranteed(
            &mut self.tx,
            topic,
            payload,
            seq,
            stamp,
            self.router_max_frame,
        )?;
        match self.gm.push(topic, payload) {
            Ok(s) if s == seq => {}
            // `has_room` was checked and numbering is ours alone, so neither happens.
            Ok(_) | Err(PushError::NotOpen | PushError::Full) => {
                self.tx.truncate(start);
                return Err(Error::Protocol("internal: publish window disagrees".into()));
            }
        }
        if self.pending_bytes() >= self.opts.batch_bytes {
            // The publish is taken either way: a failed write is the next call's error.
            if let Err(e) = self.flush() {
                self.defer(e);
            }
        }
        Ok(seq)
    }

    /// Reports a deferred error that ended the connection (a non-fatal one stays for
    /// the next poll).
    fn take_fatal_deferred(&mut self) -> Result<(), Error> {
        if self.deferred.as_ref().is_some_and(Error::is_fatal) {
            if let Some(e) = self.deferred.take() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The last few refused publishes ([`RECENT_NACKS`](crate::RECENT_NACKS)), oldest
    /// first; [`Client::publish_counts`] has the exact totals.
    pub fn recent_nacks(&self) -> impl Iterator<Item = &NackRecord> + '_ {
        self.gm.recent_nacks()
    }

    /// Forgets unsent bytes, so that dropping a dead connection does not wait to
    /// flush them.
    pub(crate) fn abandon_tx(&mut self) {
        self.tx.clear();
        self.tx_start = 0;
    }

    /// Sends every unanswered publish again (after an open), in sequence order.
    fn resend_unanswered(&mut self) -> Result<usize, Error> {
        let stamp = self.opts.stamp.then(|| MonoNanos::now().as_nanos());
        let mut n = 0;
        for (seq, topic, payload) in self.gm.unanswered() {
            encode_guaranteed(
                &mut self.tx,
                topic,
                payload,
                seq,
                stamp,
                self.router_max_frame,
            )?;
            n += 1;
        }
        self.gm.note_resent(n as u64);
        self.flush()?;
        Ok(n)
    }

    fn wait_for_room(&mut self) -> Result<(), Error> {
        if self.gm.has_room() || !self.gm.is_open() {
            // Not open: `push_guaranteed` reports it.
            return Ok(());
        }
        self.wait_until("the router's PUB_ACK (publish window full)", |c| {
            c.gm.has_room().then_some(())
        })
    }

    /// Flushes, then reads (keeping events for `poll_events`) until `done` says so,
    /// failing after [`ClientOptions::request_timeout`] without an answer to a
    /// guaranteed publish arriving (other frames, PINGs or messages, do not count: a
    /// router that sends them without end cannot hold the wait).
    fn wait_until<T>(
        &mut self,
        what: &'static str,
        mut done: impl FnMut(&mut Client) -> Option<T>,
    ) -> Result<T, Error> {
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        self.flush()?;
        let mut deadline = Instant::now().checked_add(self.opts.request_timeout);
        let answers = |c: &Client| c.gm.counts().acked + c.gm.counts().nacked;
        let mut answered = answers(self);
        loop {
            let drained = self.drain_rx_into_stash(what);
            let flushed = self.flush();
            if answers(self) != answered {
                answered = answers(self);
                deadline = Instant::now().checked_add(self.opts.request_timeout);
            }
            if let Some(v) = done(self) {
                if let Err(e) = drained.and(flushed) {
                    self.defer(e);
                }
                return Ok(v);
            }
            drained?;
            flushed?;
            if past(deadline) {
                return Err(Error::Timeout {
                    what,
                    after: self.opts.request_timeout,
                });
            }
            match self.read_rx()? {
                ReadOutcome::Data => {}
                ReadOutcome::Eof => return Err(self.on_eof()),
                ReadOutcome::WouldBlock => {
                    if self.wait_fd(PollFlags::IN, deadline)?.is_none() {
                        return Err(Error::Timeout {
                            what,
                            after: self.opts.request_timeout,
                        });
                    }
                }
            }
        }
    }

    /// Drops stashed events without any IO: for a publisher that reads its answers
    /// through the counts, so that the stash stays bounded.
    pub(crate) fn drop_stashed_events(&mut self) {
        while self.stash.pop().is_some() {}
    }

    // -- guaranteed messaging: consumer and queues -------------------------------

    /// Binds to `queue` and waits for BOUND. At most `window` (≥ 1) deliveries are
    /// unacknowledged at once; [`Start::Queue`] consumes, the other starts replay
    /// (browse). Deliveries arrive as [`Event::Delivery`] from
    /// [`Client::poll_events`]. A missing queue is [`Error::Rejected`] with
    /// [`ErrorCode::NO_SUCH_QUEUE`].
    pub fn bind(&mut self, queue: &str, window: u32, start: Start) -> Result<Binding, Error> {
        check_name("queue name", queue)?;
        if window == 0 {
            return Err(Error::InvalidArgument(
                "a binding's window must be at least 1".into(),
            ));
        }
        let id = self.request_id();
        self.asked.bound = true;
        match self.call("the router's BOUND", Pending::Request(id), |tx| {
            wire_gm::encode_bind(tx, id, window, start, queue)
        })? {
            Reply::Bound { binding, active } => Ok(Binding {
                id: BindingId(binding),
                active,
            }),
            Reply::Rejected { code, text } => Err(Error::Rejected { code, text }),
            other => Err(unexpected_reply(other)),
        }
    }

    /// Acknowledges one delivery: the router forgets it. Queued like a publish; it goes
    /// out with the next flush (every `poll` / `poll_events` flushes first).
    pub fn ack(&mut self, binding: BindingId, msg_id: u64) -> Result<(), Error> {
        self.ack_range(binding, msg_id, msg_id)
    }

    /// Acknowledges every delivery of `binding` with a message id in `first..=last`.
    pub fn ack_range(&mut self, binding: BindingId, first: u64, last: u64) -> Result<(), Error> {
        if first > last {
            return Err(Error::InvalidArgument(format!(
                "acknowledged range {first}..={last} is empty"
            )));
        }
        self.queue_control(|tx| wire_gm::encode_consumer_ack(tx, binding.0, first, last))
    }

    /// Refuses one delivery: redeliver it, or move it to the dead-message queue.
    pub fn nack(
        &mut self,
        binding: BindingId,
        msg_id: u64,
        action: NackAction,
    ) -> Result<(), Error> {
        self.queue_control(|tx| wire_gm::encode_consumer_nack(tx, binding.0, action, msg_id))
    }

    /// Ends a binding and waits for the router's ACK; unacknowledged deliveries go
    /// back to the queue.
    pub fn unbind(&mut self, binding: BindingId) -> Result<(), Error> {
        let id = self.request_id();
        self.call("the router's ACK to UNBIND", Pending::Request(id), |tx| {
            wire_gm::encode_unbind(tx, id, binding.0)
        })
        .and_then(expect_ack)
    }

    /// A queue administration request (create, delete, purge, show, list); returns the
    /// router's JSON answer. `arg` is a JSON queue definition for
    /// [`QueueOp::Create`], the queue name for delete / purge / show, empty for list.
    ///
    /// A create whose `start` is in the past is answered only once the router has
    /// filled the queue from its retained messages (in the background, ~800,000 a
    /// second): with much retained, allow for that in
    /// [`ClientOptions::request_timeout`].
    pub fn queue_request(&mut self, op: QueueOp, arg: &str) -> Result<String, Error> {
        let id = self.request_id();
        match self.call("the router's QUEUE_REPLY", Pending::Request(id), |tx| {
            wire_gm::encode_queue_request(tx, id, op, arg)
        })? {
            Reply::Queue(json) => Ok(json),
            Reply::Rejected { code, text } => Err(Error::Rejected { code, text }),
            other => Err(unexpected_reply(other)),
        }
    }

    fn queue_control(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(), Error> {
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        encode(&mut self.tx);
        if self.pending_bytes() >= self.opts.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// A blocking iterator of owned messages; it ends after the router closes the
    /// connection in an orderly way (CLOSE with code NORMAL or SHUTTING_DOWN, or end of
    /// stream). Any other close or failure is yielded once as an error, then it ends.
    pub fn messages(&mut self) -> Messages<'_> {
        Messages {
            client: self,
            done: false,
        }
    }

    /// Asks the router for its counters; returns the JSON document.
    pub fn stats_json(&mut self) -> Result<String, Error> {
        let id = self.request_id();
        match self.call("the router's STATS_REPLY", Pending::Request(id), |tx| {
            frame::encode_stats_request(tx, id)
        })? {
            Reply::Stats(json) => Ok(json),
            Reply::Rejected { code, text } => Err(Error::Rejected { code, text }),
            other => Err(unexpected_reply(other)),
        }
    }

    /// Sends a PING and returns the time until the matching PONG arrived.
    pub fn ping(&mut self) -> Result<Duration, Error> {
        let token = self.next_ping_token;
        self.next_ping_token = self.next_ping_token.wrapping_add(1);
        let sent = Instant::now();
        match self.call("the router's PONG", Pending::Ping(token), |tx| {
            frame::encode_ping(tx, token)
        })? {
            Reply::Pong => Ok(sent.elapsed()),
            other => Err(unexpected_reply(other)),
        }
    }

    /// Flushes, sends CLOSE(NORMAL) and waits up to [`ClientOptions::request_timeout`]
    /// for the router's CLOSE or end of stream. Messages still arriving are dropped.
    ///
    /// Fails if pending publishes could not be written (they may be lost), or with
    /// [`Error::Rejected`] when a non-fatal ERROR that answers no request (a PUBLISH the
    /// user is not permitted) arrives while closing.
    pub fn close(mut self) -> Result<(), Error> {
        if self.session.closed.is_some() {
            return match self.pending_bytes() {
                0 => Ok(()),
                _ => Err(self
                    .session
                    .closed_error()
                    .unwrap_or_else(|| Error::Protocol("internal: closed state vanished".into()))),
            };
        }
        frame::encode_close(&mut self.tx, ErrorCode::NORMAL, "client closing");
        if let Err(e) = self.flush() {
            // Nothing more to try; keep `Drop` from waiting again.
            self.tx.clear();
            self.tx_start = 0;
            return Err(e);
        }
        let deadline = Instant::now().checked_add(self.opts.request_timeout);
        loop {
            // The router's CLOSE (or anything else that ends it) is what we wait for;
            // messages still arriving are dropped.
            if self.drain_rx_dropping().is_err() {
                break;
            }
            match self.read_rx() {
                // Not past the deadline, however fast the peer keeps sending.
                Ok(ReadOutcome::Data) if past(deadline) => break,
                Ok(ReadOutcome::Data) => {}
                Ok(ReadOutcome::Eof) | Err(_) => break,
                Ok(ReadOutcome::WouldBlock) => match self.wait_fd(PollFlags::IN, deadline) {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                },
            }
        }
        // A refusal nobody read yet (a publish not permitted): the caller's work did not
        // all happen, so say so rather than close quietly.
        match self.deferred.take() {
            Some(e @ Error::Rejected { .. }) => Err(e),
            _ => Ok(()),
        }
    }

    // -- internals ----------------------------------------------------------------

    /// For a plain-TCP handshake that failed: the likeliest cause when the port is a
    /// router's TLS listener (its TLS layer drops or answers a plaintext HELLO).
    fn tls_hint(&self) -> &'static str {
        match self.stream {
            Transport::Tcp(_) => {
                " (is that port a tickwire router's? If it is the router's TLS listener, \
                 connect with tls://HOST:PORT and --ca FILE)"
            }
            _ => "",
        }
    }

    fn handshake(&mut self, deadline: Option<Instant>) -> Result<(), Error> {
        let mcast = if self.opts.multicast {
            frame::caps::MCAST
        } else {
            0
        };
        match &self.opts.login {
            None => {
                frame::encode_hello_caps(&mut self.tx, PROTOCOL_VERSION, mcast, &self.opts.name)
            }
            Some(login) => {
                let auth = match login {
                    Login::Password { user, password } => frame::Auth {
                        method: frame::AuthMethod::Password,
                        user,
                        secret: password.as_bytes(),
                    },
                    Login::Token(token) => frame::Auth {
                        method: frame::AuthMethod::Token,
                        user: "",
                        secret: token.as_bytes(),
                    },
                };
                let name = &self.opts.name;
                let caps = frame::caps::AUTH | mcast;
                frame::encode_hello_caps(&mut self.tx, PROTOCOL_VERSION, caps, name);
                frame::encode_auth(&mut self.tx, &auth)
                    .map_err(|e| Error::InvalidArgument(format!("login: {e}")))?;
            }
        }
        self.flush()?;
        loop {
            let decoded = decode(self.rx.data(), self.rx_limit());
            match decoded {
                Ok(Some((frame, len))) => {
                    let done = match frame {
                        Frame::Welcome {
                            version,
                            client_id,
                            max_frame,
                            capabilities,
                            ..
                        } => {
                            if version != PROTOCOL_VERSION {
                                let msg = format!(
                                    "router speaks protocol version {version}, this client {PROTOCOL_VERSION}"
                                );
                                return Err(self.protocol_error(msg));
                            }
                            if max_frame < frame::MIN_MAX_FRAME {
                                let msg = format!(
                                    "the router's WELCOME announces a max frame of {max_frame} \
                                     bytes, below the protocol's minimum of {}",
                                    frame::MIN_MAX_FRAME
                                );
                                return Err(self.protocol_error(msg));
                            }
                            if !self.mcast_routes.is_empty()
                                && capabilities & frame::caps::MCAST == 0
                            {
                                // Routes only come with the grant (hostile-input pass:
                                // the client joined them without it).
                                let msg = "the router announced multicast streams without \
                                           granting MCAST in its WELCOME"
                                    .to_owned();
                                return Err(self.protocol_error(msg));
                            }
                            self.client_id = client_id;
                            self.router_max_frame = max_frame;
                            true
                        }
                        Frame::Ping(token) => {
                            frame::encode_pong(&mut self.tx, token);
                            false
                        }
                        Frame::McastRoute(r) if self.opts.multicast => {
                            if let Err(msg) =
                                crate::MulticastRoute::record(&mut self.mcast_routes, &r)
                            {
                                return Err(self.protocol_error(msg));
                            }
                            false
                        }
                        Frame::Error { code, text, .. } | Frame::Close { code, reason: text } => {
                            let reason = crate::error::peer_text(text);
                            return Err(self.session.close(code, reason));
                        }
                        other => {
                            let msg = format!("router sent {} before WELCOME", frame_name(&other));
                            return Err(self.protocol_error(msg));
                        }
                    };
                    self.rx.consume(len);
                    self.flush()?;
                    if done {
                        return Ok(());
                    }
                }
                // A peer that keeps sending (PINGs before its WELCOME) never lets a read
                // block: the handshake's deadline is looked at after every read too, once
                // the frames read are handled.
                Ok(None) if past(deadline) => {
                    return Err(Error::Timeout {
                        what: "the router's WELCOME",
                        after: self.opts.connect_timeout,
                    });
                }
                Ok(None) => match self.read_rx()? {
                    ReadOutcome::Data => {}
                    ReadOutcome::Eof => {
                        let reason =
                            format!("{EOF_REASON}, during the handshake{}", self.tls_hint());
                        return Err(self.session.close(ErrorCode::NORMAL, reason));
                    }
                    ReadOutcome::WouldBlock => {
                        if self.wait_fd(PollFlags::IN, deadline)?.is_none() {
                            return Err(Error::Timeout {
                                what: "the router's WELCOME",
                                after: self.opts.connect_timeout,
                            });
                        }
                    }
                },
                Err(e) => {
                    // An error that names the peer (an HTTP server) needs no TLS guess
                    // after it (new-user pass: both were printed).
                    let hint = if e.names_the_peer() {
                        ""
                    } else {
                        self.tls_hint()
                    };
                    let msg = format!("undecodable frame from the router: {e}{hint}");
                    return Err(self.protocol_error(msg));
                }
            }
        }
    }

    fn request_id(&mut self) -> u32 {
        let id = self.next_request_id;
        // 0 means "answers no request", so skip it on wrap-around.
        self.next_request_id = self.next_request_id.checked_add(1).unwrap_or(1);
        id
    }

    /// Sends one request and waits for its reply, keeping messages that arrive meanwhile.
    fn call(
        &mut self,
        what: &'static str,
        pending: Pending,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Reply, Error> {
        if let Some(e) = self.session.closed_error() {
            return Err(e);
        }
        encode(&mut self.tx);
        self.session.pending = Some(pending);
        self.session.reply = None;
        let res = self.await_reply(what);
        self.session.pending = None;
        self.session.reply = None;
        res
    }

    fn await_reply(&mut self, what: &'static str) -> Result<Reply, Error> {
        self.await_until(what, |s| s.reply.is_some())?;
        self.session
            .reply
            .take()
            .ok_or_else(|| Error::Protocol(format!("internal: no reply after {what}")))
    }

    /// Flushes, then reads (keeping messages that arrive meanwhile) until `done` holds
    /// of the session, or [`ClientOptions::request_timeout`] passes without it.
    fn await_until(&mut self, what: &'static str, done: fn(&Session) -> bool) -> Result<(), Error> {
        self.flush()?;
        let deadline = Instant::now().checked_add(self.opts.request_timeout);
        let mut expired = false;
        loop {
            let drained = self.drain_rx_into_stash(what);
            let flushed = self.flush();
            if done(&self.session) {
                // The answer arrived; a close or write failure right behind it is
                // reported by the next call.
                if let Err(e) = drained.and(flushed) {
                    self.defer(e);
                }
                return Ok(());
            }
            drained?;
            flushed?;
            if expired {
                return Err(Error::Timeout {
                    what,
                    after: self.opts.request_timeout,
                });
            }
            match self.read_rx()? {
                // The deadline after every read too (a peer that keeps sending never
                // lets a read block), once what was read is looked at.
                ReadOutcome::Data if past(deadline) => expired = true,
                ReadOutcome::Data => {}
                ReadOutcome::Eof => return Err(self.on_eof()),
                ReadOutcome::WouldBlock => {
                    if self.wait_fd(PollFlags::IN, deadline)?.is_none() {
                        return Err(Error::Timeout {
                            what,
                            after: self.opts.request_timeout,
                        });
                    }
                }
            }
        }
    }

    /// Handles every complete frame in the receive buffer, moving MESSAGEs to the stash.
    /// An ERROR that answers no request is deferred to the next poll / recv.
    /// `what` the client waits for names it in the error of a full stash.
    fn drain_rx_into_stash(&mut self, what: &str) -> Result<(), Error> {
        loop {
            match self.next_rx_message(true) {
                Ok(Some(range)) => {
                    if !self.stash.push(&self.rx.buf[range]) {
                        return Err(self.stash_full(what));
                    }
                }
                Ok(None) => return Ok(()),
                Err(e @ Error::Rejected { .. }) => self.defer(e),
                Err(e) => return Err(e),
            }
        }
    }

    /// Handles every complete frame in the receive buffer as
    /// [`Client::drain_rx_into_stash`] does, dropping MESSAGEs (a closing client).
    fn drain_rx_dropping(&mut self) -> Result<(), Error> {
        loop {
            match self.next_rx_message(true) {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(e @ Error::Rejected { .. }) => self.defer(e),
                Err(e) => return Err(e),
            }
        }
    }

    /// The stash reached [`MAX_STASH_BYTES`] while waiting for `what`: the router sent
    /// messages without end and never the answer. The connection is given up.
    fn stash_full(&mut self, what: &str) -> Error {
        let msg = format!(
            "more than {} MiB of messages and answers arrived while this client waited for \
             {what}, none of them taken by a poll (the client keeps at most that much \
             between polls; a publisher of guaranteed messages that never polls keeps its \
             answers too): connection given up",
            MAX_STASH_BYTES >> 20
        );
        self.protocol_error(msg)
    }

    /// One non-blocking read into the receive buffer.
    fn read_rx(&mut self) -> Result<ReadOutcome, Error> {
        if self.rx_eof {
            return Ok(ReadOutcome::Eof);
        }
        let need = match frame_len(self.rx.data(), self.rx_limit()) {
            Ok(len) => len,
            Err(e) => {
                let msg = format!("undecodable frame from the router: {e}");
                return Err(self.protocol_error(msg));
            }
        };
        let spare = self.rx.spare(need);
        if spare.is_empty() {
            // Only reachable from `flush` with a full buffer, which checks `room` first.
            return Ok(ReadOutcome::WouldBlock);
        }
        loop {
            match self.stream.recv(spare) {
                Ok(0) => {
                    self.rx_eof = true;
                    return Ok(ReadOutcome::Eof);
                }
                Ok(n) => {
                    self.rx.commit(n);
                    return Ok(ReadOutcome::Data);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(ReadOutcome::WouldBlock)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits in `poll(2)` until one of `events` (or an error / hang-up) is signalled.
    /// `None` when `deadline` passed first; no deadline waits forever.
    fn wait_fd(
        &mut self,
        events: PollFlags,
        deadline: Option<Instant>,
    ) -> Result<Option<PollFlags>, Error> {
        loop {
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    Some(left)
                }
            };
            match self.stream.wait(events, timeout) {
                Ok(flags) if flags.is_empty() => {}
                Ok(flags) => return Ok(Some(flags)),
                Err(Errno::INTR) => {}
                Err(e) => return Err(io::Error::from(e).into()),
            }
        }
    }

    fn on_eof(&mut self) -> Error {
        let reason = if self.rx.data().is_empty() {
            EOF_REASON.to_owned()
        } else {
            format!("{EOF_REASON}, in the middle of a frame")
        };
        self.session.close(ErrorCode::NORMAL, reason)
    }

    /// A write failed; if the router said why it is closing, report that instead.
    fn write_failed(&mut self, e: io::Error) -> Error {
        if matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ) {
            let shm = matches!(self.stream, Transport::Shm(_));
            loop {
                if let Err(closed @ Error::Closed { .. }) =
                    self.drain_rx_into_stash("the reason its write failed")
                {
                    return closed;
                }
                match self.read_rx() {
                    Ok(ReadOutcome::Data) => {}
                    // Over shared memory a write fails so only at the router's end of
                    // stream (its death, or its exit): say that, not "broken pipe".
                    Ok(ReadOutcome::Eof) if shm => return self.on_eof(),
                    _ => break,
                }
            }
        }
        Error::Io(e)
    }

    /// Over shared memory: looks at the connection's socket for the router's end of
    /// stream at the next poll or receive that finds nothing to read (one system call
    /// then), not after thousands of them. A client that only publishes reads nothing,
    /// so a router that died shows in its writes only every few hundred messages, or
    /// when its ring is full; a publisher at a slow pace calls this before its polls.
    /// Nothing over TCP or TLS, where the next write or read reports it.
    pub fn look_for_router_end(&mut self) {
        if let Transport::Shm(l) = &mut self.stream {
            l.look_for_eof();
        }
    }

    /// What `frame` is, when this connection never asked for such frames: a MESSAGE
    /// without a SUBSCRIBE (a CACHED one without an image or cache query), a DELIVER or
    /// an activating BOUND without a BIND, a PUB_ACK or PUB_NACK without a PUB_OPEN.
    fn unsolicited(&self, frame: &Frame<'_>) -> Option<&'static str> {
        let a = self.asked;
        match frame {
            Frame::Message(m) if m.cached.is_none() && !a.subscribed => {
                Some("a MESSAGE, but this connection never subscribed")
            }
            Frame::Message(m) if m.cached.is_some() && !a.image => {
                Some("a cached MESSAGE, but this connection never asked for an image")
            }
            Frame::Deliver(_) | Frame::Bound { request_id: 0, .. } if !a.bound => {
                Some("a queue delivery, but this connection never bound to a queue")
            }
            Frame::PubAck { .. } | Frame::PubNack { .. } if !a.opened => {
                Some("a publish answer, but this connection never opened a publisher")
            }
            _ => None,
        }
    }

    /// Gives up on a connection whose byte stream cannot be trusted any more.
    fn protocol_error(&mut self, msg: String) -> Error {
        close_for_protocol_error(&mut self.session, &mut self.stream, msg)
    }

    fn defer(&mut self, e: Error) {
        // Keep the first: it happened earlier in the stream.
        self.deferred.get_or_insert(e);
    }

    fn take_deferred_or_closed(&mut self) -> Option<Error> {
        self.deferred.take().or_else(|| self.session.closed_error())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.session.closed.is_none() && self.pending_bytes() > 0 {
            let _ = self.flush();
        }
    }
}

/// Iterator returned by [`Client::messages`].
#[derive(Debug)]
pub struct Messages<'c> {
    client: &'c mut Client,
    done: bool,
}

impl Iterator for Messages<'_> {
    type Item = Result<OwnedMessage, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            match self.client.recv(Wait::Forever) {
                Ok(Some(m)) => return Some(Ok(m.into_owned())),
                Ok(None) => {}
                Err(Error::Closed { code, .. })
                    if code == ErrorCode::NORMAL || code == ErrorCode::SHUTTING_DOWN =>
                {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = e.is_fatal();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// The prefix of a TLS address.
pub const TLS_SCHEME: &str = "tls://";

/// The host of `HOST:PORT` (`[::1]:PORT` gives `::1`).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `shown`: the address as errors name it (the text given, where there is one).
fn connect_tcp(
    addr: impl ToSocketAddrs,
    shown: &str,
    deadline: Option<Instant>,
) -> Result<TcpStream, Error> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|cause| Error::Connect {
            addr: shown.to_owned(),
            cause,
        })?
        .collect();
    let shown = addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut last = io::Error::new(
        io::ErrorKind::InvalidInput,
        "the address resolved to nothing",
    );
    for a in &addrs {
        let left = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(u32::MAX as u64),
        };
        if left.is_zero() {
            last = io::ErrorKind::TimedOut.into();
            break;
        }
        match connect_one(a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(Error::Connect {
        addr: shown,
        cause: last,
    })
}

fn connect_one(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.connect_timeout(&(*addr).into(), timeout)?;
    socket.set_nodelay(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The SUBSCRIBE pattern of the shared subscription `group` on `pattern` (`group` as
/// [`validate_group`] checks it).
pub fn shared_pattern(group: &str, pattern: &str) -> String {
    format!("$share/{group}/{pattern}")
}

/// Whether `group` can name a shared subscription's group: one topic level (no `/`,
/// `*` or `>`, not empty). A `/` would make the router read the rest as the pattern
/// (`a/b` on `md/>` is group `a` on `b/md/>`).
pub fn validate_group(group: &str) -> Result<(), Error> {
    if group.contains('/') || validate_topic(group.as_bytes()).is_err() {
        return Err(Error::InvalidArgument(format!(
            "{:?} is not a group name: one topic level (not empty; no '/', '*', '>' or \
             control characters)",
            crate::error::peer_text(group)
        )));
    }
    Ok(())
}

/// The router broke the protocol: tells it why (best effort), stops using the
/// connection and records why it closed. Takes the two fields it needs, so that a
/// caller may hold a message borrowed from the receive buffer.
fn close_for_protocol_error(session: &mut Session, stream: &mut Transport, msg: String) -> Error {
    if session.closed.is_none() {
        let mut out = Vec::new();
        frame::encode_close(&mut out, ErrorCode::MALFORMED_FRAME, &msg);
        let _ = stream.send(&out);
        stream.shutdown();
        session.closed = Some((ErrorCode::MALFORMED_FRAME, format!("protocol error: {msg}")));
    }
    Error::Protocol(msg)
}

/// Most SUBSCRIBEs [`Client::subscribe_many`] has in flight: 512 answers (ACKs of 12
/// bytes) are ~6 KiB of the router's egress buffer, far below any limit, and the
/// requests themselves at most 512 frames of the client's transmit buffer.
pub const SUBSCRIBE_PIPELINE: usize = 512;

/// What a pipelined batch came to: the patterns refused, and the error that ended it
/// early, if any (the refusals up to it are kept).
pub(crate) type BatchOutcome = (Refused, Option<Error>);

/// The patterns a [`Client::subscribe_many`] had refused.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    /// Their indexes, in order.
    pub(crate) indexes: Vec<usize>,
    /// The first one's code and text (its index is `indexes[0]`).
    pub(crate) first: Option<(ErrorCode, String)>,
}

/// A batch's outcome as the `*_many` calls return it: the error that ended it, else
/// [`Refused::into_result`].
fn batch_result<S: AsRef<str>>(
    (refused, failed): BatchOutcome,
    patterns: &[S],
) -> Result<(), Error> {
    match failed {
        Some(e) => Err(e),
        None => refused.into_result(patterns),
    }
}

impl Refused {
    /// `Ok` when none of `patterns` was refused, else the first refusal as
    /// [`Error::Rejected`], its text naming the pattern and the count refused.
    pub(crate) fn into_result<S: AsRef<str>>(self, patterns: &[S]) -> Result<(), Error> {
        let (Some(&index), Some((code, text))) = (self.indexes.first(), self.first) else {
            return Ok(());
        };
        let pattern = patterns.get(index).map_or("", AsRef::as_ref);
        let more = match self.indexes.len() {
            1 => String::new(),
            n => format!(" ({n} of the {} patterns refused)", patterns.len()),
        };
        // The router's refusal usually names the pattern already (new-user pass: it
        // came out twice, `"md/>": not permitted to subscribe to "md/>"`).
        let text = if text.contains(&format!("{pattern:?}")) {
            format!("{text}{more}")
        } else {
            format!("{pattern:?}: {text}{more}")
        };
        Err(Error::Rejected { code, text })
    }
}

/// What [`Client::request`]'s [`Error::Timeout`] says it waited for when no reply came
/// (other timeouts of a request are the router's own answers).
pub const REQUEST_REPLY_WAIT: &str = "a reply to the request";

/// Whether `deadline` has passed (`None`: never).
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// `None` waits forever: `Forever`, and a timeout too large to represent. `NoWait`
/// never reaches a wait, so its deadline does not matter.
fn deadline_for(wait: Wait) -> Option<Instant> {
    match wait {
        Wait::Timeout(d) => Instant::now().checked_add(d),
        Wait::NoWait | Wait::Forever => None,
    }
}

/// Appends a guaranteed PUBLISH (GUARANTEED | SEQ, optional STAMPS).
fn encode_guaranteed(
    tx: &mut Vec<u8>,
    topic: &str,
    payload: &[u8],
    seq: u64,
    publisher_send: Option<u64>,
    max_frame: u32,
) -> Result<(), Error> {
    let start = tx.len();
    let opts = PublishOptions {
        seq: Some(seq),
        publisher_send,
    };
    frame::encode_publish(tx, topic, payload, opts, max_frame).map_err(Error::TooLarge)?;
    tx[start + 5] |= flags::GUARANTEED;
    Ok(())
}

fn check_name(what: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > frame::MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what} {name:?} must be 1 to {} bytes",
            frame::MAX_NAME_LEN
        )));
    }
    Ok(())
}

/// Frames reported as [`Event`]s rather than handled as control frames.
fn is_event(frame: &Frame<'_>) -> bool {
    matches!(
        frame,
        Frame::Message(_)
            | Frame::PubAck { .. }
            | Frame::PubNack { .. }
            | Frame::Deliver(_)
            | Frame::Bound {
                request_id: 0,
                active: true,
                ..
            }
    )
}

/// PUB_ACK / PUB_NACK update the window when they arrive, whoever reads them.
fn apply_publish_answer(gm: &mut PublishWindow, frame: &Frame<'_>) {
    match *frame {
        Frame::PubAck { first, last } => {
            gm.handle_ack(first, last);
        }
        Frame::PubNack { seq, reason, text } => {
            gm.handle_nack(seq, reason, text);
        }
        _ => {}
    }
}

fn expect_ack(reply: Reply) -> Result<(), Error> {
    match reply {
        Reply::Ack => Ok(()),
        Reply::Rejected { code, text } => Err(Error::Rejected { code, text }),
        other => Err(unexpected_reply(other)),
    }
}

fn unexpected_reply(reply: Reply) -> Error {
    Error::Protocol(format!("router answered with an unexpected {reply:?}"))
}

/// The connection's socket, for waiting on several clients at once (e.g. `poll(2)` over
/// many connections after a [`Wait::NoWait`] round found nothing). Reading or writing
/// it directly would corrupt the session: only wait on it. Over shared memory this is
/// the client's doorbell, which the router rings only for a client that announced its
/// sleep: bracket the `poll(2)` with [`Client::begin_sleep`] and [`Client::end_sleep`]
/// (over TCP they cost nothing).
impl std::os::fd::AsFd for Client {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.fd()
    }
}

/// What [`Client::await_answer`] waits for, and how long.
struct AnswerWait {
    /// The request's id.
    id: u32,
    timeout: Duration,
    /// The timeout counts silence only (restarts whenever data arrives).
    silence: bool,
    /// For the timeout error.
    what: &'static str,
}

/// What one entry of a cache query's answer is counted as beyond its topic and payload
/// (the owned message and its allocations), so that a flood of empty cached messages
/// is bounded as well as one of large ones.
const QUERY_ENTRY_BYTES: usize = 128;

/// What [`Client::await_answer`] does with a message frame that arrives meanwhile.
enum Take<T> {
    /// Not the answer: keep it for the next `poll`.
    Stash,
    /// Consumed (part of the answer, or nobody's).
    Skip,
    /// The answer is complete.
    Done(Result<T, Error>),
}
