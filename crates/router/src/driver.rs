//! The event loop: one thread owns the listener, every socket and the [`Core`].
//!
//! Each loop turn (smart batching):
//! 1. wait for readiness according to the idle strategy (never when work is pending);
//! 2. accept new connections;
//! 3. read once from every readable client (up to its read buffer) and feed the core,
//!    which routes every complete frame into the subscribers' egress buffers;
//! 4. write each client with queued bytes once (one `write` per client per turn);
//!    only then read the clients that carry nothing but guaranteed traffic
//!    ([`Core::is_background`]) and write what that produced: spooling, acknowledging
//!    and delivering guaranteed messages never delays a direct message read this turn;
//! 5. close clients that finished closing; now and then, check stall timers.
//!
//! Reads are edge-triggered: a client stays on the read list until a read returns
//! less than the buffer space (the socket is then drained) or `WouldBlock`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use tickwire_wire::frame;

mod mcast;
mod shm;
mod tls;

use crate::config::{Config, ConfigError};
use crate::core::{ClientId, Core, Input, Totals};
use crate::index::Slot;
use tickwire_rt::{MonoNanos, UtcNanos};

use shm::{Link, ShmPort, SHM_LISTENER};
use tls::{TlsLink, TlsPort, TLS_LISTENER};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
/// How long a closing client may take to read its last frames.
const LINGER_NS: u64 = 1_000_000_000;
/// Most closed connections lingering at once (each holds a file descriptor and is read
/// once per tick until its peer's EOF or its linger deadline): beyond it the oldest
/// goes at once, so a peer opening connections that get closed and keeping its ends
/// open cannot make the router hold descriptors (and reads) in proportion to its rate.
const MAX_DRAINING: usize = 256;
/// How often timers are checked at the latest.
const TIMER_PERIOD_NS: u64 = 10_000_000;
/// The closest together a core deadline brings the timer work (`Core::handle_timeout`
/// and the rest of a tick): deadlines are kept to the millisecond, and with thousands
/// of queues holding messages one call walks them all, so expiring acknowledgements
/// must not make it run every turn.
const DEADLINE_GAP_NS: u64 = 1_000_000;
/// How often the read buffers of connections idle since the last sweep are released.
const SWEEP_PERIOD_NS: u64 = 1_000_000_000;
/// A new connection's read buffer. It doubles while reads fill it, up to `read_buffer`
/// (or to the one unfinished frame it must hold, never past the core's `frame_limit`),
/// and goes back to this size once the connection is idle (a sweep period) and empty. So a
/// connection holds memory for the bytes it actually sent, not for what its length
/// field claims, and an idle one holds 4 KiB.
const INITIAL_READ_BUFFER: usize = 4096;
/// Longest sleep in `block` mode (timers still need to run).
const MAX_BLOCK: Duration = Duration::from_millis(50);
/// How long shutdown waits for clients to take their last bytes.
const SHUTDOWN_GRACE_NS: u64 = 2_000_000_000;

/// Errors starting or running the router.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address from the configuration.
        addr: SocketAddr,
        /// What the OS said.
        source: io::Error,
    },
    /// The event loop's own IO failed (epoll, waker).
    #[error("router event loop failed: {0}")]
    Io(#[from] io::Error),
    /// The shared-memory listener could not be set up.
    #[error("cannot listen on shared memory {name:?}: {source}")]
    ShmBind {
        /// Name from the configuration.
        name: String,
        /// What the OS said.
        source: io::Error,
    },
    /// A multicast stream's socket could not be set up.
    #[error("cannot send multicast to {group}: {source}")]
    McastBind {
        /// The stream's group.
        group: std::net::SocketAddrV4,
        /// What the OS said.
        source: io::Error,
    },
    /// The TLS listener's certificate, key or client CA could not be used.
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] tickwire_tls::Error),
    /// The guaranteed-messaging spool could not be opened.
    #[error(transparent)]
    Spool(#[from] crate::spool_port::SpoolError),
}

/// A bound, not yet running router.
pub struct Router {
    poll: Poll,
    listener: TcpListener,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    core: Core,
    conns: Vec<Option<Conn>>,
    /// A descriptor held in reserve: at the process's descriptor limit (EMFILE,
    /// ENFILE) it is closed to accept the waiting connection and refuse it with
    /// TOO_MANY_CLIENTS, then reopened (the classic technique: otherwise the client
    /// waits in the backlog for its own timeout).
    reserve_fd: Option<std::fs::File>,
    /// Accepting stopped at the descriptor limit without a reserve: retry every turn.
    accept_retry: bool,
    /// Closed clients whose last bytes (a fatal ERROR, a CLOSE) are written: shut down
    /// for writing and read until their EOF or the linger, discarding what they send.
    /// Closing a socket with unread input would send a reset, and the peer's kernel
    /// then drops the error it has not read yet.
    draining: Vec<(TcpStream, MonoNanos)>,
    /// The shared-memory listener and its clients (`driver/shm.rs`), if configured.
    shm: Option<ShmPort>,
    /// The TLS listener (`driver/tls.rs`), if configured.
    tls: Option<TlsPort>,
    /// New TLS connections per source address (`tls_handshake_rate`).
    tls_limit: crate::limit::SourceLimiter,
    /// Bytes of read buffers beyond each connection's initial 4 KiB, all connections
    /// together; growth stops at `read_memory_limit` (see `read_once`).
    read_extra: usize,
    /// `read_extra` when a read was last refused for want of read memory (the client
    /// is left unread: `Conn::awaits_read_memory`); once it drops below, memory has
    /// freed and those clients are read again at once (`Router::requeue_starved`).
    read_starved_at: Option<usize>,
    /// The monitoring thread's feed (see [`crate::monitor`]), once asked for.
    monitor: Option<crate::monitor::Publisher>,
    /// The thread that checks passwords (argon2: milliseconds each), started with the
    /// first password login; the loop never runs a check itself.
    logins: Option<LoginWorker>,
    /// The multicast streams' sockets (`driver/mcast.rs`), if configured.
    mcast: Option<mcast::McastPort>,
}

/// A thread checking password logins off the event loop: at most
/// [`crate::core::MAX_PENDING_LOGINS`] wait for it (more are refused busy); each answer
/// comes back on a channel and wakes the loop.
struct LoginWorker {
    requests: std::sync::mpsc::SyncSender<crate::core::LoginRequest>,
    results: std::sync::mpsc::Receiver<crate::core::LoginResult>,
}

impl LoginWorker {
    fn start(waker: Arc<Waker>) -> io::Result<LoginWorker> {
        let (requests, inbox) = std::sync::mpsc::sync_channel::<crate::core::LoginRequest>(
            crate::core::MAX_PENDING_LOGINS,
        );
        let (outbox, results) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("tickwire-login".into())
            .spawn(move || {
                // Ends when the router drops its sender (or its receiver).
                for r in inbox {
                    if outbox.send(r.run()).is_err() {
                        break;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(LoginWorker { requests, results })
    }
}

/// Stops a running router from any thread.
#[derive(Clone)]
pub struct RouterHandle {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl RouterHandle {
    /// Asks the router to shut down gracefully: clients get CLOSE(SHUTTING_DOWN), queued
    /// bytes are flushed for up to two seconds, then [`Router::run`] returns.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        // A failed wake only delays the stop until the next loop turn.
        let _ = self.waker.wake();
    }
}

struct Conn {
    stream: Link,
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    /// The socket may have unread bytes (edge-triggered readiness seen, not drained).
    readable: bool,
    /// A read since the last buffer sweep (idle buffers are released).
    read_recently: bool,
    /// The last read filled the buffer (the peer sends faster than it holds).
    readable_full: bool,
    on_read_list: bool,
    /// The socket accepted our last write in full (or reported writable since).
    writable: bool,
    on_flush_list: bool,
    /// Set when the core closes the client: the time to give up flushing.
    closing_deadline: Option<MonoNanos>,
    /// The core stopped at its work bound with whole frames left in `rbuf`
    /// (`Core::input_paused`): the next read hands them over before reading more.
    paused: bool,
    /// An event said the peer closed its end (or the socket failed): reads go on until
    /// one reports it, however short the last read was. Readiness is edge-triggered, so
    /// a client's last bytes and its FIN in one wake-up gave one event: the read of the
    /// bytes was short ("drained"), the end of stream was never read, and the
    /// connection stayed open for good, holding a `max_clients` place (hostile-input
    /// pass: 50 of 50 places so taken, in CLOSE-WAIT).
    peer_closed: bool,
}

impl Router {
    /// Validates `cfg` and binds its listen address (port 0 picks a free port; see
    /// [`Router::local_addr`]).
    pub fn bind(cfg: Config) -> Result<Router, Error> {
        cfg.validate()?;
        let bind_err = |source| Error::Bind {
            addr: cfg.listen,
            source,
        };
        let mut listener = TcpListener::bind(cfg.listen).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let shm = match &cfg.shm {
            Some(name) => Some(
                ShmPort::open(
                    name,
                    cfg.shm_ring,
                    cfg.shm_epoll_interval_us,
                    poll.registry(),
                )
                .map_err(|source| Error::ShmBind {
                    name: name.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        let mcast = mcast::McastPort::open(&cfg.multicast, poll.registry())?;
        let tls = match cfg.tls_listen {
            Some(tls_addr) => {
                let config = tickwire_tls::server_config(&cfg.tls_files())?;
                let bind_err = |source| Error::Bind {
                    addr: tls_addr,
                    source,
                };
                let mut listener = TcpListener::bind(tls_addr).map_err(bind_err)?;
                poll.registry()
                    .register(&mut listener, TLS_LISTENER, Interest::READABLE)?;
                Some(TlsPort { listener, config })
            }
            None => None,
        };
        let mut cfg = cfg;
        cfg.listen = addr;
        if let Some(port) = &tls {
            cfg.tls_listen = Some(port.listener.local_addr()?);
        }
        let mut core = Core::new(cfg.clone(), MonoNanos::now(), UtcNanos::now());
        core.set_stamp_clock(MonoNanos::now);
        core.set_async_logins(true);
        if let Some(spool) = crate::spool_port::open(&cfg, &mut core, waker.clone())? {
            core.attach_spool(Box::new(spool));
        }
        Ok(Router {
            poll,
            listener,
            addr,
            stop: Arc::new(AtomicBool::new(false)),
            waker,
            core,
            conns: Vec::new(),
            reserve_fd: open_reserve(),
            accept_retry: false,
            draining: Vec::new(),
            shm,
            tls,
            tls_limit: crate::limit::SourceLimiter::new(cfg.tls_handshake_rate, MonoNanos::now()),
            read_extra: 0,
            read_starved_at: None,
            monitor: None,
            logins: None,
            mcast,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The TLS listener's address actually bound, if there is one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.core.config().tls_listen
    }

    /// A handle that stops the router from another thread.
    pub fn handle(&self) -> RouterHandle {
        RouterHandle {
            stop: self.stop.clone(),
            waker: self.waker.clone(),
        }
    }

    /// Connects a monitoring thread: the loop publishes a heartbeat every timer tick and
    /// a [`crate::monitor::Snapshot`] when the returned reader asks (at most one per
    /// tick). Calling it again replaces the earlier reader.
    pub fn monitor(&mut self) -> crate::monitor::Reader {
        let (publisher, reader) = crate::monitor::channel(MonoNanos::now());
        self.monitor = Some(publisher);
        reader
    }

    /// Runs the event loop until [`RouterHandle::shutdown`]; returns the totals.
    pub fn run(mut self) -> Result<Totals, Error> {
        let cfg = self.core.config().clone();
        let mut spin =
            tickwire_rt::idle::SpinBudget::new(Duration::from_micros(cfg.hybrid_spin_us));
        let mut events = Events::with_capacity(1024);
        let mut read_list: Vec<Slot> = Vec::with_capacity(1024);
        let mut reading: Vec<Slot> = Vec::with_capacity(1024);
        let mut flush_list: Vec<Slot> = Vec::with_capacity(1024);
        let mut dirty: Vec<Slot> = Vec::with_capacity(1024);
        let mut closing: Vec<Slot> = Vec::new();
        let mut background: Vec<Slot> = Vec::with_capacity(64);
        let mut now = MonoNanos::now();
        let mut last_active = now;
        let mut next_timer = now.add_nanos(TIMER_PERIOD_NS);
        // When the timer work last ran (see DEADLINE_GAP_NS).
        let mut last_timer = now;
        let mut next_sweep = now.add_nanos(SWEEP_PERIOD_NS);
        let mut shutdown_deadline: Option<MonoNanos> = None;

        loop {
            // Closing clients' subscriptions still being removed (a bounded amount per
            // turn, `Core::poll_closing`) keep the loop turning without sleeping, each
            // turn still polling for the others' events: the work ends as soon as it
            // can, where a deadline would pace it at DEADLINE_GAP_NS a batch (10,000
            // patterns: 157 ms at least) and keep the slot from reuse that long.
            let busy = !read_list.is_empty()
                || self.core.has_pending_teardown()
                || self.shm_accepts_waiting()
                || flush_list
                    .iter()
                    .any(|id| self.conn(*id).is_some_and(|c| c.writable));
            let timeout = if busy {
                Some(Duration::ZERO)
            } else {
                Some(cfg.idle.wait_timeout(
                    Duration::from_nanos(now.saturating_sub(last_active)),
                    spin.get(),
                    MAX_BLOCK,
                ))
            };
            let mut timeout = self.mcast_bound(timeout, now);
            // A queue create filling from retained messages goes on at every tick: the
            // 10 ms period even while idle (~800,000 retained messages a second).
            if self.core.is_filling() {
                let tick = Duration::from_nanos(TIMER_PERIOD_NS);
                timeout = Some(timeout.map_or(tick, |t| t.min(tick)));
            }
            if timeout != Some(Duration::ZERO) {
                // The core's next deadline (a handshake or stall timeout, an ack
                // deadline) ends the sleep, so it fires on time, not up to a block late.
                if let Some(at) = self.core_deadline(last_timer) {
                    let cap = Duration::from_nanos(at.saturating_sub(now));
                    timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
                }
                if let Some(cap) = self.shm_room_wait(now) {
                    timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
                }
            }
            // Shared-memory clients announce nothing to epoll: tell them we sleep.
            if timeout != Some(Duration::ZERO) && self.shm_park() {
                timeout = Some(Duration::ZERO);
            }
            // A spinning turn that skips epoll reads the clock once, for both purposes.
            let skipped_at = if timeout == Some(Duration::ZERO) {
                self.shm_skips_epoll()
            } else {
                None
            };
            let polled = if skipped_at.is_some() {
                events.clear();
                Ok(())
            } else {
                self.poll.poll(&mut events, timeout)
            };
            self.shm_unpark();
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            // The turn's clock read: timers and accepts use it; each read takes its own.
            now = skipped_at.unwrap_or_else(MonoNanos::now);
            let active_before = last_active;
            if !events.is_empty() {
                last_active = now;
            }
            let mut spool_progress = false;
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_all(now, false),
                    TLS_LISTENER => self.accept_all(now, true),
                    // The spool's progress (ACKs, deliveries) is taken after the
                    // direct traffic of this turn is written.
                    WAKER => spool_progress = true,
                    // Accepted in this turn's `shm_scan`: one call a turn, so one
                    // MAX_ACCEPTS_PER_TURN.
                    SHM_LISTENER => self.shm_listener_ready(),
                    t if self.mcast_event(t) => {}
                    Token(i) => {
                        let id = Slot(i as u32);
                        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                            continue;
                        };
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            c.stream.on_event();
                            c.readable = true;
                            c.peer_closed |= ev.is_read_closed() || ev.is_error();
                            if !c.on_read_list && c.closing_deadline.is_none() {
                                c.on_read_list = true;
                                read_list.push(id);
                            }
                        }
                        if ev.is_writable() || ev.is_write_closed() {
                            c.writable = true;
                            // Output that waited for this edge (off the flush list
                            // meanwhile), or TLS records the socket did not take earlier.
                            let waiting = !self.core.egress(id).is_empty();
                            if (waiting || c.stream.wants_write()) && !c.on_flush_list {
                                c.on_flush_list = true;
                                flush_list.push(id);
                            }
                        }
                    }
                }
            }

            if self.shm_scan(&mut read_list, &flush_list, now) {
                last_active = now;
            }
            if let Some(w) = &self.logins {
                while let Ok(r) = w.results.try_recv() {
                    self.core.handle_login_result(r);
                }
            }

            if self.accept_retry {
                self.accept_retry = false;
                self.accept_all(now, false);
                if self.tls.is_some() {
                    self.accept_all(now, true);
                }
            }

            if shutdown_deadline.is_none() && self.stop.load(Ordering::Acquire) {
                tracing::info!(clients = self.core.live(), "shutting down");
                self.core.shutdown();
                shutdown_deadline = Some(now.add_nanos(SHUTDOWN_GRACE_NS));
            }

            // Read and route the direct traffic, hand this turn's guaranteed publishes
            // to the storage thread in one batch, and write each client once...
            std::mem::swap(&mut read_list, &mut reading);
            // The turn's clock reading, read just now, stamps the turn's first read;
            // each further read takes its own (see `read_once`).
            let mut turn_clock = Some(now);
            for &id in &reading {
                if self.core.is_background(id) {
                    background.push(id);
                } else if self.read_once(id, &mut turn_clock) {
                    read_list.push(id);
                }
            }
            reading.clear();
            self.submit_logins();
            self.core.flush_spool();
            self.transmit(&mut dirty, &mut flush_list);
            // ...then the spool's progress (acknowledgements, deliveries) and the
            // clients that carry only guaranteed traffic (publishers and consumers),
            // whose storing, acknowledging and delivering must not delay the direct
            // messages read above; their output is written at once.
            if spool_progress || !background.is_empty() {
                if spool_progress {
                    self.core.handle_spool(now);
                }
                for &id in &background {
                    if self.read_once(id, &mut None) {
                        read_list.push(id);
                    }
                }
                background.clear();
                self.core.flush_spool();
                self.transmit(&mut dirty, &mut flush_list);
            }
            self.mcast_turn(now);
            if !read_list.is_empty() {
                last_active = now;
            }
            // The hybrid spin learns whether spinning after activity pays.
            if last_active != active_before {
                spin.on_activity(Duration::from_nanos(now.saturating_sub(active_before)));
            }

            // Close what finished closing.
            self.core.poll_closing(&mut closing);
            for &id in &closing {
                if let Some(c) = self.conn_mut(id) {
                    c.closing_deadline.get_or_insert(now.add_nanos(LINGER_NS));
                }
            }
            closing.retain(|&id| !self.finish_close(id, now));
            self.requeue_starved(&mut read_list);

            if now >= next_timer || self.core_deadline(last_timer).is_some_and(|t| now >= t) {
                next_timer = now.add_nanos(TIMER_PERIOD_NS);
                last_timer = now;
                self.core.handle_timeout(now);
                self.core.maybe_reclaim(now);
                if let Some(m) = &self.monitor {
                    m.tick_timed(now, MonoNanos::now, || self.core.snapshot(now));
                }
                self.drain_closed(now);
                // Sockets left unread while the read memory was at its limit.
                self.requeue_unread(&mut read_list);
            }
            if now >= next_sweep {
                next_sweep = now.add_nanos(SWEEP_PERIOD_NS);
                self.release_idle_buffers();
                self.core.release_idle_egress();
            }

            if let Some(deadline) = shutdown_deadline {
                if self.core.live() == 0 || now >= deadline {
                    for i in 0..self.conns.len() {
                        self.drop_conn(Slot(i as u32), "router shut down");
                    }
                    let t = self.core.totals().clone();
                    tracing::info!(
                        msgs_in = t.msgs_in,
                        msgs_out = t.msgs_out,
                        discards = t.discards,
                        "router stopped"
                    );
                    return Ok(t);
                }
            }
        }
    }

    /// Hands the turn's password checks to the login thread (started on the first);
    /// one it cannot take is refused busy, as is every one when no thread can start.
    fn submit_logins(&mut self) {
        while let Some(r) = self.core.poll_login() {
            if self.logins.is_none() {
                match LoginWorker::start(self.waker.clone()) {
                    Ok(w) => self.logins = Some(w),
                    Err(e) => tracing::warn!(error = %e, "cannot start the login thread"),
                }
            }
            let refused = match &self.logins {
                Some(w) => match w.requests.try_send(r) {
                    Ok(()) => None,
                    Err(
                        std::sync::mpsc::TrySendError::Full(r)
                        | std::sync::mpsc::TrySendError::Disconnected(r),
                    ) => Some(r),
                },
                None => Some(r),
            };
            if let Some(r) = refused {
                self.core.handle_login_result(r.busy());
            }
        }
    }

    /// Accepts one waiting connection of the plaintext or (`tls`) the TLS listener.
    fn accept_one(&self, tls: bool) -> io::Result<(TcpStream, SocketAddr)> {
        match (&self.tls, tls) {
            (Some(port), true) => port.listener.accept(),
            (None, true) => Err(io::ErrorKind::WouldBlock.into()),
            (_, false) => self.listener.accept(),
        }
    }

    /// Accepts every waiting connection of the plaintext or (`tls`) the TLS listener.
    fn accept_all(&mut self, now: MonoNanos, tls: bool) {
        loop {
            match self.accept_one(tls) {
                Ok((mut stream, addr)) => {
                    if tls && !self.tls_limit.admit(addr.ip(), now) {
                        // Closed before any TLS work: the handshake is what a flood of
                        // connections would make the router thread pay.
                        self.core.note_tls_throttled();
                        let rate = self.core.config().tls_handshake_rate;
                        tracing::warn!(%addr, rate, "TLS connection refused: more than tls_handshake_rate new connections a second from its source");
                        let _ = stream.shutdown(Shutdown::Both);
                        continue;
                    }
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::warn!(%addr, error = %e, "cannot set TCP_NODELAY");
                    }
                    match self.core.handle_accept(addr, now, UtcNanos::now()) {
                        Ok(id) => {
                            let mut link = match &self.tls {
                                Some(port) if tls => {
                                    match TlsLink::accept(stream, port.config.clone()) {
                                        Ok(t) => {
                                            self.core.handle_tls_handshaking(id);
                                            Link::Tls(Box::new(t))
                                        }
                                        Err(e) => {
                                            tracing::warn!(%addr, error = %e, "cannot start a TLS connection");
                                            self.core.handle_closed(id, "TLS setup failed");
                                            continue;
                                        }
                                    }
                                }
                                _ => Link::Tcp(stream),
                            };
                            let token = Token(id.0 as usize);
                            let interest = Interest::READABLE | Interest::WRITABLE;
                            if let Err(e) =
                                self.poll.registry().register(&mut link, token, interest)
                            {
                                tracing::warn!(%addr, error = %e, "cannot register connection");
                                self.core.handle_closed(id, "registration failed");
                                continue;
                            }
                            let i = id.0 as usize;
                            if self.conns.len() <= i {
                                self.conns.resize_with(i + 1, || None);
                            }
                            self.conns[i] = Some(Conn::new(link));
                        }
                        Err(refused) => {
                            tracing::warn!(%addr, max = self.core.config().max_clients, "connection refused: at the connection limit");
                            // A fresh socket's send buffer is empty; a short write only
                            // loses the error text, never blocks. (A TLS client sees the
                            // connection end in its handshake instead.)
                            if !tls {
                                let _ = stream.write(&refused.0);
                            }
                            let _ = stream.shutdown(Shutdown::Both);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) if is_out_of_descriptors(&e) => {
                    // A reserve lost earlier (it could not be opened again at once) is
                    // sought again here (review).
                    if self.reserve_fd.is_none() {
                        self.reserve_fd = open_reserve();
                    }
                    if self.reserve_fd.take().is_none() {
                        tracing::warn!(error = %e, "accept failed at the descriptor limit, no reserve left");
                        self.accept_retry = true;
                        return;
                    }
                    // The reserve is closed: one descriptor for the waiting client.
                    let accepted = self.accept_one(tls);
                    if let Ok((mut stream, addr)) = accepted {
                        tracing::warn!(%addr, "connection refused: out of file descriptors");
                        let refused = self.core.refuse_out_of_descriptors();
                        // As above: a fresh socket takes the short error frame.
                        if !tls {
                            let _ = stream.write(&refused.0);
                        }
                        let _ = stream.shutdown(Shutdown::Both);
                        drop(stream);
                        self.reserve_fd = open_reserve();
                    } else {
                        self.reserve_fd = open_reserve();
                        // Nothing waiting: accept(2) takes its descriptor before it
                        // looks at the queue, so at the limit it fails on an empty one
                        // too. The listener's next readiness event brings us back;
                        // retrying every turn would spin. Still no descriptor: retry
                        // next turn rather than loop here.
                        if !matches!(&accepted, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
                            self.accept_retry = true;
                        }
                        return;
                    }
                }
                Err(e) => {
                    // ENOBUFS, ENOMEM and the like: log and retry next turn.
                    tracing::warn!(error = %e, "accept failed");
                    self.accept_retry = true;
                    return;
                }
            }
        }
    }

    /// Puts the clients left unread at the read memory limit back on the read list once
    /// memory has freed since (`read_starved_at`). Not every turn: a client that still
    /// finds no memory is left again and waits for the next release (or the timer),
    /// so a full read memory costs no turn of its own.
    fn requeue_starved(&mut self, read_list: &mut Vec<Slot>) {
        if self.read_starved_at.is_some_and(|at| self.read_extra < at) {
            self.read_starved_at = None;
            self.requeue_unread(read_list);
        }
    }

    /// Puts every client left unread at the read memory limit back on the read list.
    fn requeue_unread(&mut self, read_list: &mut Vec<Slot>) {
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(c) = c {
                if c.awaits_read_memory() && c.closing_deadline.is_none() {
                    c.on_read_list = true;
                    read_list.push(Slot(i as u32));
                }
            }
        }
    }

    /// Gives back the read buffers of connections that hold no bytes and have not read
    /// since the last sweep.
    fn release_idle_buffers(&mut self) {
        for c in self.conns.iter_mut().flatten() {
            if !c.read_recently && c.start == c.end && c.rbuf.len() > INITIAL_READ_BUFFER {
                self.read_extra -= c.rbuf.len() - INITIAL_READ_BUFFER;
                c.rbuf = vec![0; INITIAL_READ_BUFFER];
                c.start = 0;
                c.end = 0;
            }
            c.read_recently = false;
        }
    }

    /// One read from `id` into its buffer, then feeds the core. Returns true if the
    /// socket may still have unread bytes.
    fn read_once(&mut self, id: Slot, turn_clock: &mut Option<MonoNanos>) -> bool {
        let frame_limit = self.core.frame_limit(id);
        let read_buffer = self.core.config().read_buffer;
        let read_memory_limit = self.core.config().read_memory_limit;
        let read_extra = &mut self.read_extra;
        let starved_at = &mut self.read_starved_at;
        let Some(c) = self.conns.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return false;
        };
        c.on_read_list = false;
        if c.closing_deadline.is_some() {
            return false;
        }
        c.read_recently = true;
        // Whole frames the core left at its work bound last turn
        // (`Core::input_paused`) go to it first, before anything more is read.
        let was_paused = std::mem::take(&mut c.paused);
        let (n, space) = if was_paused {
            (0, usize::MAX)
        } else {
            if c.end == c.rbuf.len() && c.start > 0 {
                c.rbuf.copy_within(c.start..c.end, 0);
                c.end -= c.start;
                c.start = 0;
            }
            if c.end == c.rbuf.len() || c.readable_full {
                // Full of one unfinished frame, or the last read filled the space offered
                // (a sender streaming faster than we read): double, up to the read buffer
                // size or to that frame (whose length the decoder checked against the
                // client's frame limit), whichever is larger. The last read's leftover
                // (a partial frame) must not stop the growth: a stream almost never ends a
                // read on a frame boundary, and a buffer stuck at 4 KiB costs one read()
                // per ~30 small messages (1->1 throughput halved, BENCHMARKS.md).
                let frame = match frame::frame_len(&c.rbuf[c.start..c.end], frame_limit) {
                    Ok(Some(len)) => len,
                    _ => 0,
                };
                let cap = frame.max(read_buffer);
                let grown = (c.rbuf.len() * 2).min(cap);
                let more = grown.saturating_sub(c.rbuf.len());
                if more > 0 && *read_extra + more <= read_memory_limit {
                    *read_extra += more;
                    c.rbuf.resize(grown, 0);
                }
            }
            let space = c.rbuf.len() - c.end;
            if space == 0 {
                // All connections' read buffers are at the limit: leave this socket unread
                // (TCP pushes back on the sender) until buffers are given back; the timer
                // or the next release of read memory puts it back on the read list
                // (`requeue_starved`). Its frame deadline still runs.
                c.readable = true;
                *starved_at = Some(*read_extra);
                return false;
            }
            let n = match c.stream.read(&mut c.rbuf[c.end..]) {
                Ok(0) => {
                    let why = if c.end > c.start {
                        "connection closed by the client in the middle of a frame"
                    } else {
                        "connection closed by the client"
                    };
                    self.drop_conn(id, why);
                    return false;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Nothing to read, but the socket below may still hold more than one
                    // read takes (a shared-memory client's handshake socket stuffed with
                    // doorbell bytes, its end of stream behind them; TLS records): look
                    // again next turn. Left alone, an edge-triggered socket whose last
                    // event has fired is never looked at again, and a client that stuffs
                    // its socket and dies stays open for good.
                    let more = c.stream.socket_unread();
                    c.readable = more;
                    c.on_read_list = more;
                    return more;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    c.on_read_list = true;
                    return true;
                }
                Err(e) => {
                    if matches!(c.stream, Link::Tls(_)) {
                        // The peer does not speak TLS, or a certificate was refused.
                        let addr = self.core.peer_addr(id);
                        tracing::warn!(addr = %addr.map_or_else(String::new, |a| a.to_string()), error = %e, "TLS connection failed");
                    }
                    if matches!(c.stream, Link::Shm(_)) && e.kind() == io::ErrorKind::InvalidData {
                        // Hostile input, as a malformed frame is (logged at WARN there).
                        let addr = self.core.peer_addr(id);
                        let client = self.core.client_id(id).unwrap_or(ClientId(0));
                        tracing::warn!(client = client.0, addr = %addr.map_or_else(String::new, |a| a.to_string()), error = %e, "shared-memory client broke the ring protocol: disconnecting");
                    }
                    self.drop_conn(id, &format!("read failed: {e}"));
                    return false;
                }
            };
            if let Link::Tls(t) = &mut c.stream {
                if let Some(names) = t.take_handshake_done() {
                    self.core.handle_tls_established(id, MonoNanos::now());
                    if !names.is_empty() {
                        self.core.handle_peer_cert(id, &names);
                    }
                }
            }
            c.end += n;
            (n, space)
        };
        // One clock reading per read (not per message): the router-in stamp and the
        // frame deadline are as fresh as the bytes, not as old as the turn (a turn that
        // reads several clients would otherwise charge the earlier reads to the router).
        // The turn's first read takes the turn's reading, taken right before it: a turn
        // that reads one client (a ping-pong, a quiet feed) reads the clock once, not
        // twice (the second read was ~25-40 ns on the message's path in this VM).
        // That reading precedes the read, so the core reads the clock again for the
        // router-in stamp of a STAMPS message in it (only then).
        let (now, fresh) = match turn_clock.take() {
            Some(turn) => (turn, false),
            None => (MonoNanos::now(), true),
        };
        self.core.set_input_clock_fresh(fresh);
        match self.core.handle_input(id, now, &c.rbuf[c.start..c.end], n) {
            Input::Consumed(used) => {
                c.start += used;
                if c.start == c.end {
                    c.start = 0;
                    c.end = 0;
                    if c.rbuf.len() > read_buffer {
                        *read_extra -= c.rbuf.len() - read_buffer;
                        c.rbuf = vec![0; read_buffer];
                    }
                }
            }
            Input::Closing => {
                c.start = 0;
                c.end = 0;
                return false;
            }
        }
        c.paused = self.core.input_paused();
        if !was_paused {
            c.readable = n == space || c.stream.socket_unread() || c.peer_closed;
            c.readable_full = n == space;
        }
        // A paused client skipped its read: what the socket may still hold waits
        // (`readable` as it was) until the core has taken the frames left over.
        let more = c.readable || c.paused;
        c.on_read_list = more;
        more
    }

    /// One write of `id`'s queued bytes. Returns true if bytes remain queued.
    fn write_once(&mut self, id: Slot) -> bool {
        let Some(c) = self.conns.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return false;
        };
        let pending = self.core.egress(id);
        if pending.is_empty() {
            // TLS records the socket did not take earlier.
            if !c.stream.wants_write() {
                return false;
            }
            if !c.writable {
                return c.stream.waits_on_list();
            }
            return match c.stream.flush_below() {
                Ok(more) => {
                    c.writable = !more;
                    more
                }
                Err(e) => {
                    self.drop_conn(id, &format!("write failed: {e}"));
                    false
                }
            };
        }
        if !c.writable {
            return c.stream.waits_on_list();
        }
        match c.stream.write(pending) {
            Ok(n) => {
                let left = pending.len() - n;
                // The socket buffer is full (a short plaintext write, or TLS records
                // left over); wait for the writable edge. A TLS write that stopped at
                // its send buffer with the socket still taking bytes goes on next turn.
                let queued = c.stream.wants_write();
                if queued || (left > 0 && !matches!(c.stream, Link::Tls(_))) {
                    c.writable = false;
                }
                self.core.handle_written(id, n);
                left > 0 || queued
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.writable = false;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) => {
                if matches!(c.stream, Link::Shm(_)) && e.kind() == io::ErrorKind::InvalidData {
                    // Hostile input, as on the read side (a probe found it at INFO only).
                    let addr = self.core.peer_addr(id);
                    let client = self.core.client_id(id).unwrap_or(ClientId(0));
                    tracing::warn!(client = client.0, addr = %addr.map_or_else(String::new, |a| a.to_string()), error = %e, "shared-memory client broke the ring protocol: disconnecting");
                }
                self.drop_conn(id, &format!("write failed: {e}"));
                false
            }
        }
    }

    /// Closes a closing client once its egress is flushed or its linger expired.
    /// Returns true when it is gone.
    fn finish_close(&mut self, id: Slot, now: MonoNanos) -> bool {
        let Some(c) = self.conn(id) else {
            return true;
        };
        let flushed = self.core.egress(id).is_empty() && !c.stream.wants_write();
        if flushed {
            if let Some(mut c) = self.conns.get_mut(id.0 as usize).and_then(Option::take) {
                self.read_extra -= c.rbuf.len().saturating_sub(INITIAL_READ_BUFFER);
                let _ = self.poll.registry().deregister(&mut c.stream);
                if matches!(c.stream, Link::Shm(_)) {
                    self.shm_forget(id);
                }
                // FIN after the last bytes; the peer's input is read and dropped.
                let _ = c.stream.shutdown(Shutdown::Write);
                if let Some(tcp) = c.stream.into_tcp() {
                    if self.draining.len() >= MAX_DRAINING {
                        // The oldest, nearest its deadline (the list keeps its order).
                        self.draining.remove(0);
                    }
                    self.draining.push((tcp, now.add_nanos(LINGER_NS)));
                }
            }
            self.core.handle_closed(id, "closed");
            true
        } else if c.closing_deadline.is_some_and(|d| now >= d) {
            self.drop_conn(id, "closed with unsent bytes (client not reading)");
            true
        } else {
            false
        }
    }

    /// Reads and drops what closed clients still send; closes each at its EOF, on an
    /// error, or at its linger deadline.
    fn drain_closed(&mut self, now: MonoNanos) {
        let mut sink = [0u8; 4096];
        self.draining.retain_mut(|(stream, deadline)| {
            if now >= *deadline {
                return false;
            }
            // At most 16 reads per socket per sweep.
            for _ in 0..16 {
                match stream.read(&mut sink) {
                    Ok(0) => return false,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            true
        });
    }

    fn drop_conn(&mut self, id: Slot, why: &str) {
        if let Some(mut c) = self.conns.get_mut(id.0 as usize).and_then(Option::take) {
            self.read_extra -= c.rbuf.len().saturating_sub(INITIAL_READ_BUFFER);
            let _ = self.poll.registry().deregister(&mut c.stream);
            let _ = c.stream.shutdown(Shutdown::Both);
            if matches!(c.stream, Link::Shm(_)) {
                self.shm_forget(id);
            }
        }
        if self.core.phase(id).is_some() {
            self.core.handle_closed(id, why);
        }
    }

    fn conn(&self, id: Slot) -> Option<&Conn> {
        self.conns.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// Takes the core's newly dirty clients onto the flush list and writes each client
    /// on it once; those with bytes left stay on the list.
    fn transmit(&mut self, dirty: &mut Vec<Slot>, flush_list: &mut Vec<Slot>) {
        self.core.poll_transmit(dirty);
        for id in dirty.drain(..) {
            if let Some(c) = self.conn_mut(id) {
                if !c.on_flush_list {
                    c.on_flush_list = true;
                    flush_list.push(id);
                }
            }
        }
        let mut i = 0;
        while i < flush_list.len() {
            let id = flush_list[i];
            if self.write_once(id) {
                i += 1;
            } else {
                if let Some(c) = self.conn_mut(id) {
                    c.on_flush_list = false;
                }
                flush_list.swap_remove(i);
            }
        }
    }

    /// When the core's next deadline brings the timer work: at its `poll_timeout`, but
    /// no sooner than [`DEADLINE_GAP_NS`] after the work last ran (`last`).
    fn core_deadline(&self, last: MonoNanos) -> Option<MonoNanos> {
        let at = self.core.poll_timeout()?;
        Some(at.max(last.add_nanos(DEADLINE_GAP_NS)))
    }

    fn conn_mut(&mut self, id: Slot) -> Option<&mut Conn> {
        self.conns.get_mut(id.0 as usize).and_then(Option::as_mut)
    }
}

/// The reserve descriptor (see `Router::reserve_fd`); `None` if even that fails.
fn open_reserve() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// EMFILE (process limit) or ENFILE (system limit).
fn is_out_of_descriptors(e: &io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(rustix::io::Errno::MFILE.raw_os_error())
        || code == Some(rustix::io::Errno::NFILE.raw_os_error())
}
