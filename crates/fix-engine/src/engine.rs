//! The engine: one thread, one `mio::Poll`, every socket and every session. See the
//! crate docs for the loop; this file is the loop.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use tickwire_fix::codec::{self, Fields, FrameError};
use tickwire_fix::session::{Event, Output, Role, Session};
use tickwire_fix::settings::{IdleStrategy, SessionId, Settings};
use tickwire_fix::store::{FileStore, MemoryStore, MessageStore, OnLostLog};
use tickwire_fix::validate::is_admin_msg_type;

use crate::app::{Application, Ctx, SessionKey};
use crate::log::{LogTargets, MessageLog};
use crate::spec::{DictionaryCache, SessionSpec, StoreSpec};
use crate::store::AnyStore;
use tickwire_rt::UtcNanos;

use crate::Error;

const WAKER: Token = Token(0);
const LISTENER_BASE: usize = 1;
const CONN_BASE: usize = 1 << 20;
/// How long a closing connection may take to write what is queued for it.
const LINGER_NS: u64 = 2_000_000_000;
/// How often closing, connecting and unbound connections are checked.
const HOUSEKEEPING_NS: u64 = 10_000_000;
/// Rounds of "drain the sessions the callbacks touched" per turn before the rest is
/// left for the next turn (two applications answering each other forever).
const MAX_DRAIN_ROUNDS: usize = 64;

/// Engine-wide settings (everything per session is in [`SessionSpec`]).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// `block`: wait in `epoll_wait` until IO or the next session deadline; `spin`:
    /// poll without waiting (burns a core, lowest latency).
    pub idle: IdleStrategy,
    /// Longest message accepted; a BodyLength announcing more closes that connection.
    /// Default 4 MiB.
    pub max_message_len: usize,
    /// Initial size of each connection's read buffer (it grows up to
    /// `max_message_len` for a message that does not fit). Default 64 KiB.
    pub read_buffer: usize,
    /// Longest blocking wait, so that [`Engine::stop_flag`] is noticed. Default 100 ms.
    pub max_block: Duration,
    /// Capacity of the [`Handle`] command queue. Default 4096.
    pub command_queue: usize,
    /// How long an accepted connection may stay silent before its first message
    /// (Logon). Default 10 s (QuickFIX's LogonTimeout).
    pub unbound_timeout: Duration,
    /// Longest first message (Logon) buffered from an accepted connection that is not
    /// yet bound to a session; a BodyLength announcing more, or that many bytes without
    /// a complete message, closes the connection. A Logon is a few hundred bytes.
    /// Default 8 KiB (`TickwireMaxLogonLength`).
    pub max_logon_len: usize,
    /// Accepted connections not yet bound to a session (no Logon yet) kept at once,
    /// over all listeners; a connection accepted beyond it is closed at once (counted
    /// and logged at most once a second). Default 64 (`TickwireMaxPendingConnections`).
    pub max_pending: usize,
    /// A file store whose log was lost, emptied or truncated (see
    /// `tickwire_fix::store`) starts over at sequence 1/1 instead of refusing to start.
    /// Default false; `tickwire fix --reset-lost-store`.
    pub reset_lost_stores: bool,
}

impl EngineOptions {
    /// The engine-wide options a settings file asks for: the idle strategy (`spin` if
    /// any session sets `TickwireIdleStrategy=spin`), the largest
    /// `TickwireMaxLogonLength` and the smallest `TickwireMaxPendingConnections` of the
    /// sessions; defaults for the rest.
    pub fn from_settings(settings: &Settings) -> EngineOptions {
        let d = EngineOptions::default();
        let s = &settings.sessions;
        EngineOptions {
            idle: if s.iter().any(|s| s.idle_strategy == IdleStrategy::Spin) {
                IdleStrategy::Spin
            } else {
                IdleStrategy::Block
            },
            max_logon_len: s
                .iter()
                .filter_map(|s| s.max_logon_length)
                .max()
                .unwrap_or(d.max_logon_len),
            max_pending: s
                .iter()
                .filter_map(|s| s.max_pending_connections)
                .min()
                .unwrap_or(d.max_pending),
            ..d
        }
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            idle: IdleStrategy::Block,
            max_message_len: 4 << 20,
            read_buffer: 64 << 10,
            max_block: Duration::from_millis(100),
            command_queue: 4096,
            unbound_timeout: Duration::from_secs(10),
            max_logon_len: 8 << 10,
            max_pending: 64,
            reset_lost_stores: false,
        }
    }
}

/// Why a message could not be sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// No session with this key (application fault).
    #[error("no session {0:?}")]
    UnknownSession(SessionKey),
    /// The session refused the message (see its variants).
    #[error(transparent)]
    Session(#[from] tickwire_fix::session::SendError),
    /// The [`Handle`] queue is full: the engine thread is behind.
    #[error("engine command queue full")]
    QueueFull,
    /// The engine is gone.
    #[error("engine stopped")]
    Stopped,
}

/// A request from another thread.
enum Command {
    Send {
        session: SessionKey,
        msg_type: Vec<u8>,
        body: Vec<u8>,
    },
    Logout {
        session: SessionKey,
        text: Option<String>,
    },
    Logon {
        session: SessionKey,
    },
    Call(Box<dyn FnOnce(&mut Ctx<'_>) + Send>),
}

/// Acting on an engine from other threads: a bounded queue plus a waker, so a blocked
/// engine wakes at once. Commands allocate (they own their bytes); the engine thread's
/// own path is [`Ctx`]. Cheap to clone; `Send`.
#[derive(Clone)]
pub struct Handle {
    tx: SyncSender<Command>,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
}

impl Handle {
    fn push(&self, c: Command) -> Result<(), SendError> {
        match self.tx.try_send(c) {
            Ok(()) => {
                let _ = self.waker.wake();
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(SendError::QueueFull),
            Err(TrySendError::Disconnected(_)) => Err(SendError::Stopped),
        }
    }

    /// Queues an application message for `session` (see [`Ctx::send`]). Errors of the
    /// session itself are reported to [`Application::on_event`].
    pub fn send(&self, session: SessionKey, msg_type: &[u8], body: &[u8]) -> Result<(), SendError> {
        self.push(Command::Send {
            session,
            msg_type: msg_type.to_vec(),
            body: body.to_vec(),
        })
    }

    /// Queues a logout of `session` (see [`Ctx::logout`]).
    pub fn logout(&self, session: SessionKey, text: Option<&str>) -> Result<(), SendError> {
        self.push(Command::Logout {
            session,
            text: text.map(str::to_owned),
        })
    }

    /// Queues a logon (re-enable) of `session` (see [`Ctx::logon`]).
    pub fn logon(&self, session: SessionKey) -> Result<(), SendError> {
        self.push(Command::Logon { session })
    }

    /// Runs `f` on the engine thread at its next turn, with a [`Ctx`] (commands run in
    /// the order they were queued). For anything the other commands do not cover, or
    /// to learn a result (e.g. the MsgSeqNum a queued message got).
    pub fn call(&self, f: impl FnOnce(&mut Ctx<'_>) + Send + 'static) -> Result<(), SendError> {
        self.push(Command::Call(Box::new(f)))
    }

    /// Asks [`Engine::run`] to return.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
    }
}

/// One session and its driver state.
pub(crate) struct Slot {
    pub(crate) id: SessionId,
    pub(crate) session: Session<AnyStore>,
    /// Something was asked of the session this turn: drain its outputs.
    pub(crate) touched: bool,
    /// Its store has records to flush this turn.
    dirty: bool,
    conn: Option<usize>,
    connect: Vec<(String, u16)>,
    next_addr: usize,
    nodelay: bool,
    listener: Option<usize>,
    logged: bool,
    /// `AllowedRemoteAddresses` (empty: any peer).
    allowed: Vec<IpAddr>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ConnState {
    Connecting,
    Open,
    /// Writing what is queued, then closed (or after the linger).
    Closing,
}

struct Conn {
    stream: TcpStream,
    state: ConnState,
    /// The session bound to this connection (acceptor: after its Logon).
    session: Option<usize>,
    /// The listener it was accepted on.
    listener: Option<usize>,
    /// The peer's address (accepted connections).
    peer: Option<IpAddr>,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Accepted / connecting / closing since.
    since: u64,
    /// On the write list this turn.
    queued: bool,
}

/// Everything but the sessions and the application (split for the borrow checker).
struct Net {
    poll: Poll,
    events: Events,
    ready: Vec<(Token, bool, bool, bool)>,
    /// `None` once closed (shutdown): a stopping acceptor takes no new connections.
    listeners: Vec<(Option<TcpListener>, SocketAddr)>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    free_later: Vec<usize>,
    write_list: Vec<usize>,
    connects: Vec<usize>,
    next_housekeeping: u64,
    /// Accepted connections closed at once because `max_pending` were waiting for
    /// their Logon, or because no session of the listener allows the peer.
    refused: u64,
    /// `refused` when it was last logged, and when.
    refused_logged: (u64, u64),
}

/// Reused buffers for callbacks.
#[derive(Default)]
struct Scratch {
    msg: Vec<u8>,
    fields: Fields,
    out_fields: Fields,
    note: String,
}

/// A FIX engine: sessions, sockets, the application. See the crate docs.
pub struct Engine<A: Application> {
    app: A,
    slots: Vec<Slot>,
    net: Net,
    scratch: Scratch,
    log: Option<MessageLog>,
    opts: EngineOptions,
    rx: Receiver<Command>,
    handle: Handle,
    stop: bool,
    /// The time of this loop turn (read once per turn).
    now: UtcNanos,
}

fn io_err(op: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let op = op.into();
    move |source| Error::Io { op, source }
}

impl<A: Application> Engine<A> {
    /// An engine for the sessions of a QuickFIX settings file (see
    /// [`SessionSpec::from_settings`]). The idle strategy is `spin` if any session sets
    /// `TickwireIdleStrategy=spin`. The settings' warnings are the caller's to print.
    pub fn from_settings(settings: &Settings, app: A) -> Result<Engine<A>, Error> {
        Engine::from_settings_with(settings, app, EngineOptions::from_settings(settings))
    }

    /// [`Engine::from_settings`] with options of the caller's, e.g. from
    /// [`EngineOptions::from_settings`] with a flag applied.
    pub fn from_settings_with(
        settings: &Settings,
        app: A,
        opts: EngineOptions,
    ) -> Result<Engine<A>, Error> {
        let mut dicts = DictionaryCache::new();
        let specs = settings
            .sessions
            .iter()
            .map(|s| SessionSpec::from_settings(s, &mut dicts))
            .collect::<Result<Vec<_>, _>>()?;
        Engine::new(specs, app, opts)
    }

    /// An engine for these sessions: opens the stores, binds the acceptors'
    /// listeners (sessions with the same address share one), calls
    /// [`Application::on_create`] per session. Initiators connect in the first turn.
    pub fn new(
        specs: Vec<SessionSpec>,
        mut app: A,
        opts: EngineOptions,
    ) -> Result<Engine<A>, Error> {
        let now = UtcNanos::now();
        let poll = Poll::new().map_err(io_err("creating the poll instance"))?;
        let waker = Arc::new(
            Waker::new(poll.registry(), WAKER).map_err(io_err("creating the poll waker"))?,
        );
        let mut listeners: Vec<(Option<TcpListener>, SocketAddr)> = Vec::new();
        let mut listen_specs: Vec<SocketAddr> = Vec::new();
        let mut slots = Vec::with_capacity(specs.len());
        let mut log_targets: LogTargets = Vec::new();
        let mut warnings = Vec::new();
        for spec in specs {
            let name = spec.id.to_string();
            let qualifier = (!spec.id.qualifier.is_empty()).then_some(spec.id.qualifier.as_str());
            let store = match &spec.store {
                StoreSpec::Memory => AnyStore::Memory(MemoryStore::new(now.as_nanos())),
                StoreSpec::File { path, sync } => {
                    let (s, w) = FileStore::open_session(
                        path,
                        &spec.id.begin_string,
                        &spec.id.sender_comp_id,
                        &spec.id.target_comp_id,
                        qualifier,
                        *sync,
                        now.as_nanos(),
                        if opts.reset_lost_stores {
                            OnLostLog::StartOver
                        } else {
                            OnLostLog::Refuse
                        },
                    )
                    .map_err(|source| Error::Store {
                        session: name.clone(),
                        source,
                    })?;
                    if let Some(w) = w {
                        warnings.push((slots.len(), w.to_string()));
                    }
                    AnyStore::File(s)
                }
            };
            let mut session = Session::new(spec.config.clone(), store).map_err(|source| {
                Error::SessionConfig {
                    session: name.clone(),
                    source,
                }
            })?;
            if let Some(v) = spec.validation.clone() {
                session = session.with_validation(v);
            }
            let listener = match (spec.role(), spec.accept) {
                (Role::Acceptor, Some(addr)) => {
                    let i = match listen_specs.iter().position(|a| *a == addr) {
                        Some(i) => i,
                        None => {
                            let mut l = TcpListener::bind(addr)
                                .map_err(io_err(format!("binding the FIX acceptor to {addr}")))?;
                            let i = listeners.len();
                            poll.registry()
                                .register(&mut l, Token(LISTENER_BASE + i), Interest::READABLE)
                                .map_err(io_err("registering a listener"))?;
                            let local = l.local_addr().map_err(io_err("listener address"))?;
                            listeners.push((Some(l), local));
                            listen_specs.push(addr);
                            i
                        }
                    };
                    Some(i)
                }
                (Role::Acceptor, None) => {
                    return Err(Error::Config {
                        session: name,
                        reason: "acceptor without a listening address".into(),
                    })
                }
                (Role::Initiator, _) => {
                    if spec.connect.is_empty() {
                        return Err(Error::Config {
                            session: name,
                            reason: "initiator without a connect address".into(),
                        });
                    }
                    None
                }
            };
            log_targets.push(spec.file_log_path.clone().map(|p| {
                (
                    p,
                    FileStore::session_dir_name(
                        &spec.id.begin_string,
                        &spec.id.sender_comp_id,
                        &spec.id.target_comp_id,
                        qualifier,
                    ),
                )
            }));
            slots.push(Slot {
                logged: spec.file_log_path.is_some(),
                id: spec.id,
                session,
                touched: true,
                dirty: false,
                conn: None,
                connect: spec.connect,
                next_addr: 0,
                nodelay: spec.nodelay,
                listener,
                allowed: spec.allowed_remote_addresses,
            });
        }
        let log = if log_targets.iter().any(Option::is_some) {
            Some(MessageLog::start(log_targets).map_err(io_err("starting the message log"))?)
        } else {
            None
        };
        for (k, s) in slots.iter().enumerate() {
            app.on_create(SessionKey(k), &s.id);
        }
        for (k, w) in warnings {
            app.on_event(SessionKey(k), &w);
        }
        let (tx, rx) = mpsc::sync_channel(opts.command_queue.max(1));
        let handle = Handle {
            tx,
            waker,
            stop: Arc::new(AtomicBool::new(false)),
        };
        Ok(Engine {
            app,
            slots,
            net: Net {
                poll,
                events: Events::with_capacity(1024),
                ready: Vec::with_capacity(1024),
                listeners,
                conns: Vec::new(),
                free: Vec::new(),
                free_later: Vec::new(),
                write_list: Vec::new(),
                connects: Vec::new(),
                next_housekeeping: 0,
                refused: 0,
                refused_logged: (0, 0),
            },
            scratch: Scratch::default(),
            log,
            opts,
            rx,
            handle,
            stop: false,
            now,
        })
    }

    /// The acceptors' listening addresses (with the actual port when 0 was asked).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.net.listeners.iter().map(|(_, a)| *a).collect()
    }

    /// A handle for other threads.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// The flag [`Engine::run`] checks every turn (e.g. for `signal_hook::flag`).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.handle.stop.clone()
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The application, mutably.
    pub fn app_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// The sessions' keys and identities, in order.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionKey, &SessionId)> {
        self.slots
            .iter()
            .enumerate()
            .map(|(k, s)| (SessionKey(k), &s.id))
    }

    /// The session with this identity.
    pub fn session_key(&self, id: &SessionId) -> Option<SessionKey> {
        self.slots.iter().position(|s| &s.id == id).map(SessionKey)
    }

    /// A session core, for inspection (sequence numbers, logged on...).
    pub fn session(&self, key: SessionKey) -> Option<&Session<AnyStore>> {
        self.slots.get(key.0).map(|s| &s.session)
    }

    /// Acts on the sessions from outside a callback, on the engine thread: the
    /// outputs are written at the end of the next [`Engine::turn`] (which does not
    /// wait for IO when a session has something to send).
    pub fn with_ctx<R>(&mut self, f: impl FnOnce(&mut A, &mut Ctx<'_>) -> R) -> R {
        let mut ctx = Ctx {
            slots: &mut self.slots,
            now: UtcNanos::now(),
            stop: &mut self.stop,
        };
        f(&mut self.app, &mut ctx)
    }

    /// Sends an application message (see [`Ctx::send`]) from the engine thread.
    pub fn send(
        &mut self,
        key: SessionKey,
        msg_type: &[u8],
        body: &[u8],
    ) -> Result<u64, SendError> {
        self.with_ctx(|_, ctx| ctx.send(key, msg_type, body))
    }

    /// Runs loop turns until [`Handle::stop`], [`Ctx::stop`] or the stop flag.
    pub fn run(&mut self) -> Result<(), Error> {
        while !self.stop && !self.handle.stop.load(Ordering::Relaxed) {
            self.turn()?;
        }
        Ok(())
    }

    /// Logs every logged-on session out, runs until every connection is closed or
    /// `timeout` passed, then closes what is left and flushes the stores and the log.
    pub fn shutdown(&mut self, timeout: Duration) -> Result<(), Error> {
        // Stop listening first: a counterparty reconnecting while we shut down gets a
        // refused connection instead of a Logon that nobody answers (which would
        // cost it a sequence number and both sides a gap fill after our restart).
        for (l, _) in &mut self.net.listeners {
            if let Some(mut l) = l.take() {
                let _ = self.net.poll.registry().deregister(&mut l);
            }
        }
        let now = UtcNanos::now();
        for s in &mut self.slots {
            s.session.logout(now, None);
            s.touched = true;
        }
        let deadline = now.add_duration(timeout);
        self.stop = false;
        loop {
            self.turn()?;
            let open = self.net.conns.iter().any(Option::is_some);
            if !open || UtcNanos::now() >= deadline {
                break;
            }
        }
        let now = UtcNanos::now();
        self.now = now;
        for c in 0..self.net.conns.len() {
            if self.net.conns[c].is_some() {
                self.close_conn(c, "Disconnecting");
            }
        }
        self.drain_touched();
        for s in &mut self.slots {
            let _ = s.session.store_mut().flush();
        }
        if let Some(l) = &mut self.log {
            l.close();
        }
        Ok(())
    }

    /// One loop turn: wait (per the idle strategy), accept, read and process, run the
    /// timers and the queued commands, drain the sessions, flush the stores, write.
    pub fn turn(&mut self) -> Result<(), Error> {
        let timeout = self.wait_timeout();
        if let Err(e) = self.net.poll.poll(&mut self.net.events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::Io {
                    op: "waiting for socket events".into(),
                    source: e,
                });
            }
        }
        self.now = UtcNanos::now();
        self.net.ready.clear();
        for ev in self.net.events.iter() {
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
            let to_eof = ev.is_read_closed() || ev.is_error();
            self.net
                .ready
                .push((ev.token(), readable, writable, to_eof));
        }
        for i in 0..self.net.ready.len() {
            let (token, readable, writable, to_eof) = self.net.ready[i];
            match token.0 {
                0 => {}
                t if t < CONN_BASE => self.accept_all(t - LISTENER_BASE),
                t => {
                    let c = t - CONN_BASE;
                    let state = match self.net.conns.get(c) {
                        Some(Some(conn)) => conn.state,
                        _ => continue,
                    };
                    if state == ConnState::Connecting {
                        if readable || writable {
                            self.finish_connect(c);
                        }
                        // Edge-triggered: bytes that came with the connection must be
                        // read now.
                        let open = matches!(
                            self.net.conns.get(c),
                            Some(Some(conn)) if conn.state == ConnState::Open
                        );
                        if !open {
                            continue;
                        }
                    }
                    if readable {
                        self.read_conn(c, to_eof);
                    }
                    if writable {
                        self.write_conn(c);
                    }
                }
            }
        }
        self.commands();
        self.timers();
        if self.now.as_nanos() >= self.net.next_housekeeping {
            self.net.next_housekeeping = self.now.as_nanos() + HOUSEKEEPING_NS;
            self.housekeeping();
        }
        self.finish_turn();
        Ok(())
    }

    fn wait_timeout(&self) -> Duration {
        if self.opts.idle == IdleStrategy::Spin
            || self.slots.iter().any(|s| s.touched)
            || !self.net.connects.is_empty()
        {
            return Duration::ZERO;
        }
        let now = UtcNanos::now().as_nanos();
        let mut until = now.saturating_add(self.opts.max_block.as_nanos() as u64);
        for s in &self.slots {
            if let Some(d) = s.session.poll_timeout().map(UtcNanos::as_nanos) {
                until = until.min(d);
            }
        }
        if self.net.conns.iter().any(|c| {
            c.as_ref()
                .is_some_and(|c| c.state != ConnState::Open || c.session.is_none())
        }) {
            until = until.min(self.net.next_housekeeping);
        }
        Duration::from_nanos(until.saturating_sub(now))
    }

    // ─── connections ────────────────────────────────────────────────────────────

    /// Accepted connections that have not logged on yet.
    fn pending_conns(&self) -> usize {
        self.net
            .conns
            .iter()
            .flatten()
            .filter(|c| c.session.is_none() && c.listener.is_some() && c.state == ConnState::Open)
            .count()
    }

    /// Whether some session of listener `l` admits a Logon from `peer`.
    fn listener_admits(&self, l: usize, peer: IpAddr) -> bool {
        self.slots
            .iter()
            .any(|s| s.listener == Some(l) && admits(&s.allowed, peer))
    }

    /// Counts a connection refused at accept and logs the count at most once a second.
    fn refused_at_accept(&mut self, peer: SocketAddr, why: &str) {
        self.net.refused += 1;
        let (logged, at) = self.net.refused_logged;
        let now = UtcNanos::now();
        if logged == 0 || now.as_nanos().saturating_sub(at) >= 1_000_000_000 {
            tracing::warn!(
                "FIX acceptor: connection from {peer} closed: {why} ({} refused at accept so far)",
                self.net.refused
            );
            self.net.refused_logged = (self.net.refused, now.as_nanos());
        }
    }

    /// Connections closed at accept so far (too many waiting for their Logon, or a
    /// peer no session of the listener allows).
    pub fn refused_connections(&self) -> u64 {
        self.net.refused
    }

    /// Registers a new connection with a read buffer of `rbuf_len` bytes (it grows up
    /// to the connection's frame limit).
    fn add_conn(&mut self, stream: TcpStream, state: ConnState, rbuf_len: usize) -> Option<usize> {
        let c = self.net.free.pop().unwrap_or_else(|| {
            self.net.conns.push(None);
            self.net.conns.len() - 1
        });
        let mut conn = Conn {
            stream,
            state,
            session: None,
            listener: None,
            peer: None,
            rbuf: vec![0; rbuf_len],
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            since: self.now.as_nanos(),
            queued: false,
        };
        if let Err(e) = self.net.poll.registry().register(
            &mut conn.stream,
            Token(CONN_BASE + c),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register a FIX connection: {e}");
            self.net.free.push(c);
            return None;
        }
        self.net.conns[c] = Some(conn);
        Some(c)
    }

    fn accept_all(&mut self, l: usize) {
        loop {
            let Some((Some(listener), _)) = self.net.listeners.get(l) else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    // Refused before a byte is read (the stream is dropped: closed).
                    if !self.listener_admits(l, peer.ip()) {
                        self.refused_at_accept(peer, "address not in AllowedRemoteAddresses");
                        continue;
                    }
                    if self.pending_conns() >= self.opts.max_pending.max(1) {
                        self.refused_at_accept(
                            peer,
                            "too many connections waiting for their Logon",
                        );
                        continue;
                    }
                    // Nodelay before the first byte; unbound connections get the
                    // default (tickwire always wants it), sessions may clear it.
                    let _ = stream.set_nodelay(true);
                    tracing::debug!("FIX connection from {peer}");
                    // Before Logon only a Logon is buffered (up to max_logon_len).
                    let rbuf = self.opts.read_buffer.min(self.opts.max_logon_len).max(256);
                    if let Some(c) = self.add_conn(stream, ConnState::Open, rbuf) {
                        if let Some(Some(conn)) = self.net.conns.get_mut(c) {
                            conn.listener = Some(l);
                            conn.peer = Some(peer.ip());
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: try again on the next event.
                    tracing::warn!("accepting a FIX connection: {e}");
                    return;
                }
            }
        }
    }

    fn start_connect(&mut self, k: usize) {
        let Some(slot) = self.slots.get_mut(k) else {
            return;
        };
        if slot.conn.is_some() {
            return;
        }
        let n = slot.connect.len().max(1);
        let Some((host, port)) = slot.connect.get(slot.next_addr % n).cloned() else {
            return;
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .ok()
            .and_then(|mut a| a.next());
        self.note(k, format_args!("Connecting to {host} on port {port}"));
        let stream = match addr {
            Some(a) => TcpStream::connect(a),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("cannot resolve {host}"),
            )),
        };
        let c = match stream {
            Ok(s) => {
                let rbuf = self
                    .opts
                    .read_buffer
                    .clamp(256, self.opts.max_message_len.max(256));
                self.add_conn(s, ConnState::Connecting, rbuf)
            }
            Err(e) => {
                self.note(k, format_args!("Connection failed: {e}"));
                None
            }
        };
        match c {
            Some(c) => {
                if let Some(Some(conn)) = self.net.conns.get_mut(c) {
                    conn.session = Some(k);
                }
                self.slots[k].conn = Some(c);
            }
            None => {
                let slot = &mut self.slots[k];
                slot.next_addr = slot.next_addr.wrapping_add(1);
                slot.session.handle_disconnected(self.now);
                slot.touched = true;
            }
        }
    }

    fn finish_connect(&mut self, c: usize) {
        let Some(Some(conn)) = self.net.conns.get_mut(c) else {
            return;
        };
        let result = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Err(e),
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
        };
        let k = conn.session;
        match result {
            Ok(false) => {}
            Ok(true) => {
                conn.state = ConnState::Open;
                let nodelay = k.and_then(|k| self.slots.get(k)).is_none_or(|s| s.nodelay);
                let _ = conn.stream.set_nodelay(nodelay);
                if let Some(k) = k {
                    self.note(k, format_args!("Connection succeeded"));
                    let slot = &mut self.slots[k];
                    slot.session.handle_connected(self.now);
                    slot.touched = true;
                    self.drain(k);
                }
            }
            Err(e) => {
                if let Some(k) = k {
                    self.note(k, format_args!("Connection failed: {e}"));
                    let slot = &mut self.slots[k];
                    slot.next_addr = slot.next_addr.wrapping_add(1);
                }
                self.close_conn(c, "");
            }
        }
    }

    /// Reads until the socket would block, processing complete frames after every read.
    /// Reads until the socket is drained. A read that returns less than the space
    /// offered has emptied the receive queue: later bytes raise a new edge, so no
    /// extra `read` is spent to see EAGAIN (one syscall less per message at low rates).
    /// When the peer has closed (`to_eof`), reads go on to the end of the stream.
    fn read_conn(&mut self, c: usize, to_eof: bool) {
        loop {
            let Some(Some(conn)) = self.net.conns.get_mut(c) else {
                return;
            };
            if conn.state != ConnState::Open {
                return;
            }
            let max = frame_limit(&self.opts, conn);
            if conn.rend == conn.rbuf.len() {
                if conn.rstart > 0 {
                    conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                    conn.rend -= conn.rstart;
                    conn.rstart = 0;
                } else if conn.rbuf.len() < max {
                    let len = conn.rbuf.len().saturating_mul(2).min(max);
                    conn.rbuf.resize(len, 0);
                } else {
                    // Cannot happen with frame_len's limit; never loop forever.
                    self.close_conn(c, "Read buffer full without a complete message");
                    return;
                }
            }
            let (rend, len) = (conn.rend, conn.rbuf.len());
            match conn.stream.read(&mut conn.rbuf[rend..len]) {
                Ok(0) => {
                    self.close_conn(c, "Connection closed by counterparty");
                    return;
                }
                Ok(n) => {
                    conn.rend += n;
                    let drained = n < len - rend;
                    self.process_frames(c);
                    if drained && !to_eof {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let text = format!("Socket error: {e}");
                    self.close_conn(c, &text);
                    return;
                }
            }
        }
    }

    /// Frames and delivers every complete message in the read buffer.
    fn process_frames(&mut self, c: usize) {
        loop {
            let Some(Some(conn)) = self.net.conns.get_mut(c) else {
                return;
            };
            if conn.state != ConnState::Open {
                return;
            }
            let max = frame_limit(&self.opts, conn);
            let avail = &conn.rbuf[conn.rstart..conn.rend];
            if avail.is_empty() {
                conn.rstart = 0;
                conn.rend = 0;
                return;
            }
            match codec::frame_len(avail, max) {
                Ok(Some(n)) => {
                    let a = conn.rstart;
                    conn.rstart += n;
                    self.deliver(c, a, a + n);
                }
                Ok(None) => return,
                Err(FrameError::TooLong { len, max, .. }) => {
                    let text = if conn.session.is_none() && conn.listener.is_some() {
                        format!(
                            "First message (Logon) of {len} bytes exceeds the limit of {max} \
                             before Logon: disconnecting"
                        )
                    } else {
                        format!("Message of {len} bytes exceeds the limit of {max}: disconnecting")
                    };
                    if conn.session.is_none() {
                        tracing::warn!("FIX acceptor: {text}");
                    }
                    self.close_conn(c, &text);
                    return;
                }
                Err(e) => {
                    // Garbage: skip to the next `8=FIX` candidate (QuickFIX does the same).
                    conn.rstart += e.skip().min(avail.len());
                }
            }
        }
    }

    /// One complete frame `rbuf[a..b]` of connection `c`.
    fn deliver(&mut self, c: usize, a: usize, b: usize) {
        let Some(Some(conn)) = self.net.conns.get(c) else {
            return;
        };
        let k = match conn.session {
            Some(k) => k,
            None => match self.bind(c, a, b) {
                Some(k) => k,
                None => return,
            },
        };
        let Some(Some(conn)) = self.net.conns.get(c) else {
            return;
        };
        let frame = &conn.rbuf[a..b];
        let slot = &mut self.slots[k];
        if slot.logged {
            if let Some(l) = &mut self.log {
                l.incoming(k, self.now.as_nanos(), frame);
            }
        }
        slot.session.handle_message(self.now, frame);
        slot.touched = true;
        self.drain(k);
    }

    /// An acceptor connection's first frame: must be a Logon for a configured session
    /// of this listener that has no connection; otherwise the connection is closed
    /// without a word, as QuickFIX does.
    fn bind(&mut self, c: usize, a: usize, b: usize) -> Option<usize> {
        let Some(Some(conn)) = self.net.conns.get(c) else {
            return None;
        };
        let listener = conn.listener;
        let peer = conn.peer;
        let found = match codec::parse_unchecked(&conn.rbuf[a..b], &mut self.scratch.fields) {
            Err(_) => Err("garbled first message"),
            Ok(m) if m.msg_type() != b"A" => Err("first message is not a Logon"),
            Ok(m) => {
                let (begin, sender, target) = (
                    m.begin_string(),
                    m.get(49).unwrap_or_default(),
                    m.get(56).unwrap_or_default(),
                );
                self.slots
                    .iter()
                    .position(|s| {
                        let cfg = s.session.config();
                        s.listener == listener
                            && cfg.begin_string.as_bytes() == begin
                            && cfg.sender_comp_id.as_bytes() == target
                            && cfg.target_comp_id.as_bytes() == sender
                    })
                    .ok_or("Session not found for incoming message")
            }
        };
        match found {
            Err(why) => {
                tracing::warn!("FIX acceptor: {why}: connection closed");
                self.close_conn(c, "");
                None
            }
            Ok(k) if !peer.is_some_and(|p| admits(&self.slots[k].allowed, p)) => {
                let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
                self.note(
                    k,
                    format_args!("Refusing connection from {who}: not in AllowedRemoteAddresses"),
                );
                tracing::warn!(
                    "FIX acceptor: Logon for {} from {who}, not in its AllowedRemoteAddresses: connection closed",
                    self.slots[k].id
                );
                self.close_conn(c, "");
                None
            }
            Ok(k) if self.slots[k].conn.is_some() => {
                self.note(
                    k,
                    format_args!("Refusing a second connection for this session"),
                );
                self.close_conn(c, "");
                None
            }
            Ok(k) => {
                let nodelay = self.slots[k].nodelay;
                if let Some(Some(conn)) = self.net.conns.get_mut(c) {
                    conn.session = Some(k);
                    let _ = conn.stream.set_nodelay(nodelay);
                }
                let slot = &mut self.slots[k];
                slot.conn = Some(c);
                slot.session.handle_connected(self.now);
                slot.touched = true;
                self.drain(k);
                Some(k)
            }
        }
    }

    /// Closes connection `c` now; a bound session is told (`handle_disconnected`).
    fn close_conn(&mut self, c: usize, why: &str) {
        let Some(mut conn) = self.net.conns.get_mut(c).and_then(Option::take) else {
            return;
        };
        let _ = self.net.poll.registry().deregister(&mut conn.stream);
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        self.net.free_later.push(c);
        if let Some(k) = conn.session {
            if self.slots.get(k).is_some_and(|s| s.conn == Some(c)) {
                if !why.is_empty() {
                    self.note(k, format_args!("{why}"));
                }
                let slot = &mut self.slots[k];
                slot.conn = None;
                slot.session.handle_disconnected(self.now);
                slot.touched = true;
                self.drain(k);
            }
        } else if !why.is_empty() {
            tracing::debug!("FIX connection closed: {why}");
        }
    }

    /// Writes what is queued for `c` (one `write` unless the kernel takes less).
    fn write_conn(&mut self, c: usize) {
        let Some(Some(conn)) = self.net.conns.get_mut(c) else {
            return;
        };
        if conn.state == ConnState::Connecting {
            return;
        }
        while conn.wpos < conn.wbuf.len() {
            match conn.stream.write(&conn.wbuf[conn.wpos..]) {
                Ok(0) => break,
                Ok(n) => conn.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    conn.wbuf.clear();
                    conn.wpos = 0;
                    let text = format!("Socket error: {e}");
                    self.close_conn(c, &text);
                    return;
                }
            }
        }
        if conn.wpos == conn.wbuf.len() {
            conn.wbuf.clear();
            conn.wpos = 0;
            if conn.state == ConnState::Closing {
                self.close_conn(c, "");
            }
        }
    }

    // ─── sessions ───────────────────────────────────────────────────────────────

    fn note(&mut self, k: usize, args: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        self.scratch.note.clear();
        let _ = self.scratch.note.write_fmt(args);
        if let Some(slot) = self.slots.get(k) {
            if slot.logged {
                if let Some(l) = &mut self.log {
                    l.event(k, self.now.as_nanos(), &self.scratch.note);
                }
            }
        }
        self.app.on_event(SessionKey(k), &self.scratch.note);
    }

    fn commands(&mut self) {
        while let Ok(cmd) = self.rx.try_recv() {
            let now = self.now;
            let (k, result) = {
                let mut ctx = Ctx {
                    slots: &mut self.slots,
                    now,
                    stop: &mut self.stop,
                };
                match cmd {
                    Command::Send {
                        session,
                        msg_type,
                        body,
                    } => (session, ctx.send(session, &msg_type, &body).map(|_| ())),
                    Command::Logout { session, text } => {
                        (session, ctx.logout(session, text.as_deref()))
                    }
                    Command::Logon { session } => (session, ctx.logon(session)),
                    Command::Call(f) => {
                        f(&mut ctx);
                        (SessionKey(0), Ok(()))
                    }
                }
            };
            if let Err(e) = result {
                self.note(k.0, format_args!("Queued command failed: {e}"));
            }
        }
    }

    fn timers(&mut self) {
        for k in 0..self.slots.len() {
            let slot = &mut self.slots[k];
            if slot.session.poll_timeout().is_some_and(|d| d <= self.now) {
                slot.session.handle_timeout(self.now);
                slot.touched = true;
                self.drain(k);
            }
        }
    }

    /// Closing connections past their linger, silent unbound connections, connection
    /// attempts that take longer than the session's LogonTimeout.
    fn housekeeping(&mut self) {
        let now = self.now;
        let unbound = self.opts.unbound_timeout.as_nanos() as u64;
        for c in 0..self.net.conns.len() {
            let Some(Some(conn)) = self.net.conns.get(c) else {
                continue;
            };
            let age = now.as_nanos().saturating_sub(conn.since);
            let close = match conn.state {
                ConnState::Closing => age >= LINGER_NS,
                ConnState::Open => conn.session.is_none() && age >= unbound,
                ConnState::Connecting => {
                    let limit = conn
                        .session
                        .and_then(|k| self.slots.get(k))
                        .map_or(10, |s| u64::from(s.session.config().logon_timeout.max(1)));
                    age >= limit * 1_000_000_000
                }
            };
            if close {
                if let Some(k) = conn.session {
                    if conn.state == ConnState::Connecting {
                        let slot = &mut self.slots[k];
                        slot.next_addr = slot.next_addr.wrapping_add(1);
                    }
                }
                let why = match conn.state {
                    ConnState::Connecting => "Connection timed out",
                    _ => "",
                };
                self.close_conn(c, why);
            }
        }
    }

    /// Drains every touched session (callbacks may touch others), starts the
    /// connections asked for, flushes the stores, writes the sockets, hands the log
    /// batch over.
    fn finish_turn(&mut self) {
        for _ in 0..MAX_DRAIN_ROUNDS {
            self.drain_touched();
            if self.net.connects.is_empty() {
                break;
            }
            let connects = std::mem::take(&mut self.net.connects);
            for &k in &connects {
                self.start_connect(k);
            }
            self.net.connects = connects;
            self.net.connects.clear();
        }
        // The store contract: records reach the kernel before the bytes that depend
        // on them reach the socket.
        for k in 0..self.slots.len() {
            if !self.slots[k].dirty {
                continue;
            }
            self.slots[k].dirty = false;
            if let Err(e) = self.slots[k].session.store_mut().flush() {
                let text = format!("Message store error: {e}");
                if let Some(c) = self.slots[k].conn {
                    // Nothing of this turn may go out: it is not durable.
                    if let Some(Some(conn)) = self.net.conns.get_mut(c) {
                        conn.wbuf.clear();
                        conn.wpos = 0;
                    }
                    self.close_conn(c, &text);
                } else {
                    self.note(k, format_args!("{text}"));
                }
            }
        }
        let list = std::mem::take(&mut self.net.write_list);
        for &c in &list {
            if let Some(Some(conn)) = self.net.conns.get_mut(c) {
                conn.queued = false;
            }
            self.write_conn(c);
        }
        self.net.write_list = list;
        self.net.write_list.clear();
        if let Some(l) = &mut self.log {
            l.end_turn();
        }
        self.net.free.append(&mut self.net.free_later);
    }

    fn drain_touched(&mut self) {
        for _ in 0..MAX_DRAIN_ROUNDS {
            let mut any = false;
            for k in 0..self.slots.len() {
                if self.slots[k].touched {
                    any = true;
                    self.drain(k);
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Handles every pending output of session `k`, in order.
    fn drain(&mut self, k: usize) {
        let key = SessionKey(k);
        let observe = self.app.observe_outgoing();
        loop {
            let Engine {
                app,
                slots,
                net,
                scratch,
                log,
                now,
                stop,
                ..
            } = self;
            let now = *now;
            // What to do once the session's borrow has ended.
            enum Then {
                Nothing,
                FromApp,
                FromAdmin,
                LoggedOn,
                LoggedOut,
                Note,
                Disconnect(usize),
            }
            let then = {
                let slot = &mut slots[k];
                slot.touched = false;
                slot.dirty = true;
                let conn_idx = slot.conn;
                let logged = slot.logged;
                let Some(out) = slot.session.poll_event() else {
                    return;
                };
                match out {
                    Output::Send(bytes) => {
                        if let Some(c) = conn_idx {
                            if let Some(Some(conn)) = net.conns.get_mut(c) {
                                conn.wbuf.extend_from_slice(bytes);
                                if !conn.queued {
                                    conn.queued = true;
                                    net.write_list.push(c);
                                }
                            }
                        }
                        if logged {
                            if let Some(l) = log {
                                l.outgoing(k, now.as_nanos(), bytes);
                            }
                        }
                        if observe {
                            if let Ok(m) = codec::parse_unchecked(bytes, &mut scratch.out_fields) {
                                if is_admin_msg_type(m.msg_type()) {
                                    app.to_admin(key, &m);
                                } else {
                                    app.to_app(key, &m);
                                }
                            }
                        }
                        Then::Nothing
                    }
                    Output::Disconnect => match slot.conn.take() {
                        Some(c) => Then::Disconnect(c),
                        None => Then::Nothing,
                    },
                    Output::Connect => {
                        if !net.connects.contains(&k) {
                            net.connects.push(k);
                        }
                        Then::Nothing
                    }
                    Output::Event(Event::FromApp(b)) => {
                        scratch.msg.clear();
                        scratch.msg.extend_from_slice(b);
                        Then::FromApp
                    }
                    Output::Event(Event::FromAdmin(b)) => {
                        scratch.msg.clear();
                        scratch.msg.extend_from_slice(b);
                        Then::FromAdmin
                    }
                    Output::Event(Event::LoggedOn) => Then::LoggedOn,
                    Output::Event(Event::LoggedOut) => Then::LoggedOut,
                    Output::Event(Event::Note(t)) => {
                        scratch.note.clear();
                        scratch.note.push_str(t);
                        Then::Note
                    }
                    _ => Then::Nothing,
                }
            };
            let mut ctx = Ctx {
                slots: &mut slots[..],
                now,
                stop,
            };
            match then {
                Then::Nothing => {}
                Then::FromApp | Then::FromAdmin => {
                    if let Ok(m) = codec::parse_unchecked(&scratch.msg, &mut scratch.fields) {
                        if matches!(then, Then::FromApp) {
                            app.from_app(&mut ctx, key, &m);
                        } else {
                            app.from_admin(&mut ctx, key, &m);
                        }
                    }
                }
                Then::LoggedOn => app.on_logon(&mut ctx, key),
                Then::LoggedOut => app.on_logout(&mut ctx, key),
                Then::Note => {
                    if slots[k].logged {
                        if let Some(l) = log {
                            l.event(k, now.as_nanos(), &scratch.note);
                        }
                    }
                    app.on_event(key, &scratch.note);
                }
                Then::Disconnect(c) => {
                    if let Some(Some(conn)) = net.conns.get_mut(c) {
                        conn.session = None;
                        conn.state = ConnState::Closing;
                        conn.since = now.as_nanos();
                        if !conn.queued {
                            conn.queued = true;
                            net.write_list.push(c);
                        }
                    }
                }
            }
        }
    }
}

/// Whether an `AllowedRemoteAddresses` list admits `peer` (an empty list admits any).
/// An IPv4 peer seen as an IPv4-mapped IPv6 address (dual-stack listener) matches its
/// IPv4 form.
fn admits(allowed: &[IpAddr], peer: IpAddr) -> bool {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    allowed.is_empty() || allowed.contains(&peer)
}

/// The longest frame a connection may announce: [`EngineOptions::max_logon_len`] on an
/// accepted connection before its Logon bound it, else `max_message_len`.
fn frame_limit(opts: &EngineOptions, conn: &Conn) -> usize {
    if conn.session.is_none() && conn.listener.is_some() {
        opts.max_logon_len.min(opts.max_message_len)
    } else {
        opts.max_message_len
    }
}

impl<A: Application> Drop for Engine<A> {
    fn drop(&mut self) {
        for s in &mut self.slots {
            let _ = s.session.store_mut().flush();
        }
    }
}
