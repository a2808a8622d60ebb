//! The engine: one thread, one `mio::Poll`, every socket and every session. See the
//! crate docs for the loop. This module holds the types, construction and the public
//! API; the driver is split by job:
//!
//! * `conn.rs`: connection buffers and IO (register, connect, read and frame, write,
//!   close);
//! * `logon.rs`: Logon routing (accept with the pending cap and
//!   `AllowedRemoteAddresses`, binding a connection to a session by its Logon);
//! * `turn.rs`: the loop turn (wait, dispatch, commands, timers, housekeeping, drain,
//!   store flush before socket writes).

mod conn;
mod logon;
mod tls_io;
mod turn;

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Component, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use tickwire_fix::codec::{self, Fields, FrameError};
use tickwire_fix::session::{Event, Output, Role, Session};
use tickwire_fix::settings::{ConnectionType, IdleStrategy, SessionId, Settings};
use tickwire_fix::store::{FileStore, MemoryStore, MessageStore, OnLostLog};
use tickwire_fix::validate::is_admin_msg_type;

use crate::app::{Application, Ctx, SessionKey};
use crate::log::{LogTargets, MessageLog};
use crate::monitor::{self, EngineSnapshot, SessionCounters, SessionState, SessionView};
use crate::spec::{DictionaryCache, SessionSpec, StoreSpec};
use crate::store::AnyStore;
use crate::tls::TlsConfig;
use tickwire_rt::{MonoNanos, UtcNanos};

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
/// A resend in progress takes its next step (`Session::handle_send_room`) only while
/// its connection has less than this unsent: a counterparty that asks for a long
/// resend and does not read holds the engine to about this much output for it.
const RESEND_ROOM: usize = 1 << 20;
/// A connection with more than this written for it and not yet taken by its peer is
/// not read until the peer has taken half: a peer that sends and never reads the
/// answers (an echo, rejects, resends) fills its own TCP window, not our memory. Its
/// session then times out as for any silent peer (TestRequest, then disconnect).
const OUTPUT_HIGH: usize = 4 << 20;

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
    /// over all listeners. A connection accepted at the limit closes the one that has
    /// waited longest (counted, [`Engine::evicted_pending_connections`], and logged at
    /// most once a second), so silent connections cannot lock real counterparties out
    /// for `unbound_timeout`. Default 64 (`TickwireMaxPendingConnections`).
    pub max_pending: usize,
    /// A file store whose log was lost, emptied or truncated (see
    /// `tickwire_fix::store`) starts over at sequence 1/1 instead of refusing to start.
    /// Default false; `tickwire fix --reset-lost-store`.
    pub reset_lost_stores: bool,
    /// TLS for every connection (`SocketUseSSL=Y`). [`Engine::from_settings_with`]
    /// builds it from the settings when it is `None` and the settings ask for TLS.
    pub tls: Option<TlsConfig>,
    /// The most one connection's reads take in one loop turn (bytes off the socket,
    /// TLS records included); what is left is read at the next turn, which then does
    /// not sleep. A peer whose input produces no answer (messages with a bad CheckSum,
    /// garbage, messages queued above a gap) never backs its output up to the 4 MiB
    /// that pauses its reading: without this bound, one that kept its socket full held
    /// the turn, and every other session's timers and answers, for as long as it sent
    /// (a hostile-input pass: another session's TestRequest answered 8.7 s late, the
    /// turn's event-log batch at 2.2 GB of RSS). Default 256 KiB, at least 1.
    pub read_per_turn: usize,
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
            tls: None,
            read_per_turn: 256 << 10,
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
    /// Its store was flushed this turn: `prepare` it after the socket writes.
    flushed: bool,
    conn: Option<ConnId>,
    connect: Vec<(String, u16)>,
    next_addr: usize,
    nodelay: bool,
    listener: Option<ListenerId>,
    logged: bool,
    /// `AllowedRemoteAddresses` (empty: any peer).
    allowed: Vec<IpAddr>,
    /// Counted by the engine thread, published on request (`Engine::monitor`).
    pub(crate) counters: SessionCounters,
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
    session: Option<SessionKey>,
    /// The listener it was accepted on.
    listener: Option<ListenerId>,
    /// The peer's address (accepted connections).
    peer: Option<IpAddr>,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// How far framing searched `rbuf[rstart..rend]` for the trailer of a frame whose
    /// BodyLength misses it; reset whenever `rstart` moves, so a peer trickling such a
    /// frame costs work linear in its bytes, not a rescan per read.
    scan: codec::FrameScan,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Accepted / connecting / closing since.
    since: u64,
    /// Order of creation ([`Net::opened`] then): the oldest connection waiting for its
    /// Logon is the one evicted at `max_pending`, even among those of one turn.
    opened: u64,
    /// Unbound: when the first bytes of its first message arrived (QuickFIX gives the
    /// rest of that message 1 s, then closes the connection).
    first_bytes: Option<u64>,
    /// On the write list this turn.
    queued: bool,
    /// Reading stopped because more than [`OUTPUT_HIGH`] of output waits for the peer
    /// (`Some(to_eof)`: whether the peer had closed); it goes on once the peer has
    /// taken half of it.
    paused: Option<bool>,
    /// The turn ([`Net::turns`]) `read_this_turn` counts for, and what that turn read
    /// of this connection (at most `EngineOptions::read_per_turn`).
    read_turn: u64,
    read_this_turn: usize,
    /// Whole frames left in `rbuf` after one that reset a file store: taken at the
    /// next turns, one reset a turn, before anything more is read
    /// ([`crate::store::file_resets`]).
    held: bool,
    /// The turn ([`Net::turns`]) of this connection's last store reset: one a turn.
    reset_turn: Option<u64>,
    /// On [`Net::resume`] for the next turn's read (once, however often it is queued).
    resume_queued: bool,
    /// The peer closed (or the socket is in error): that read goes to the end of the
    /// stream.
    resume_eof: bool,
    /// The TLS state (`SocketUseSSL=Y`): bytes on the socket are TLS records, `rbuf`
    /// and `wbuf` hold clear text.
    tls: Option<Box<rustls::Connection>>,
}

/// What one poll event says about a socket, copied out of `mio::Events` so that the
/// loop can act on it while it borrows the engine mutably.
#[derive(Clone, Copy)]
struct Ready {
    token: Token,
    /// Readable, or closed for reading, or in error: read (to learn which).
    readable: bool,
    /// Writable, or closed for writing, or in error.
    writable: bool,
    /// The peer closed or the socket is in error: read to the end of the stream.
    to_eof: bool,
}

/// A connection: its index in `Net::conns` (token `CONN_BASE + index`; indices of
/// closed connections are reused).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ConnId(usize);

/// A listener: its index in `Net::listeners` (token `LISTENER_BASE + index`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ListenerId(usize);

/// Everything but the sessions and the application (split for the borrow checker).
struct Net {
    poll: Poll,
    events: Events,
    ready: Vec<Ready>,
    /// `None` once closed (shutdown): a stopping acceptor takes no new connections.
    listeners: Vec<(Option<TcpListener>, SocketAddr)>,
    conns: Vec<Option<Conn>>,
    free: Vec<ConnId>,
    free_later: Vec<ConnId>,
    write_list: Vec<ConnId>,
    /// Paused connections whose output went below half of [`OUTPUT_HIGH`], and
    /// connections whose reads spent `EngineOptions::read_per_turn`: read at the next
    /// turn (edge-triggered: what waits on the socket raises no new event). Each with
    /// its `Conn::opened`: an entry left by a closed connection does not apply to the
    /// next one given its id.
    resume: Vec<(ConnId, u64)>,
    /// Loop turns so far (the per-turn read budget's clock).
    turns: u64,
    connects: Vec<SessionKey>,
    next_housekeeping: u64,
    /// Accepted connections closed at once because no session of the listener allows
    /// the peer (or TLS could not be set up).
    refused: u64,
    /// `refused` when it was last logged, and when.
    refused_logged: (u64, u64),
    /// Connections waiting for their Logon closed to make room for a newer one
    /// (`max_pending`).
    evicted: u64,
    /// `evicted` when it was last logged, and when.
    evicted_logged: (u64, u64),
    /// Accepted connections closed because no complete Logon came in time (silent, a
    /// first message left unfinished, or only bytes that are not FIX).
    timed_out: u64,
    /// `timed_out` when it was last logged, and when.
    timed_out_logged: (u64, u64),
    /// Accepted connections closed at their first message (not a Logon, garbled, or
    /// for no session of the listener).
    first_refused: u64,
    /// `first_refused` when it was last logged, and when.
    first_refused_logged: (u64, u64),
    /// Connections created so far (numbers them, `Conn::opened`).
    opened: u64,
    /// TLS: what one `read` takes from a socket before rustls decrypts it (empty
    /// without TLS).
    tls_in: Vec<u8>,
}

/// Reused buffers for callbacks.
#[derive(Default)]
struct Scratch {
    msg: Vec<u8>,
    /// The field table of `msg`, as the session parsed it.
    msg_fields: Vec<codec::Field>,
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
    /// The monitoring channel, once [`Engine::monitor`] was called.
    monitor: Option<monitor::Publisher>,
}

/// Refuses two sessions whose file stores would share a directory, or whose message
/// logs would share files: both are named by [`FileStore::session_dir_name`], which
/// joins BeginString, SenderCompID, TargetCompID and SessionQualifier with `-` (and
/// leaves out the sub and location IDs), so `A-B`->`C` and `A`->`B-C` collide, as do
/// sessions differing only in a SenderSubID. Paths are compared as written (`./store`
/// and `store` are the same; a symbolic link to the same place is not detected here,
/// the store's lock still refuses a shared store).
fn check_store_dirs(specs: &[SessionSpec]) -> Result<(), Error> {
    // (setting, place) of every session's store and log, in order.
    let mut seen: Vec<(&str, PathBuf, &SessionSpec)> = Vec::new();
    for spec in specs {
        let id = &spec.id;
        let qualifier = (!id.qualifier.is_empty()).then_some(id.qualifier.as_str());
        let name = FileStore::session_dir_name(
            &id.begin_string,
            &id.sender_comp_id,
            &id.target_comp_id,
            qualifier,
        );
        let store = match &spec.store {
            StoreSpec::File { path, .. } => Some(("FileStorePath", path)),
            _ => None,
        };
        let log = spec
            .file_log_path
            .as_ref()
            .map(|path| ("FileLogPath", path));
        for (key, path) in store.into_iter().chain(log) {
            let place: PathBuf = path
                .join(&name)
                .components()
                .filter(|c| !matches!(c, Component::CurDir))
                .collect();
            if let Some((_, _, first)) = seen.iter().find(|(k, p, _)| *k == key && *p == place) {
                let shared = match key {
                    "FileStorePath" => format!(
                        "its file store directory {} is also the store directory of session {}",
                        place.display(),
                        first.id
                    ),
                    _ => format!(
                        "its message log files {}.* are also the message log files of session {}",
                        place.display(),
                        first.id
                    ),
                };
                return Err(Error::Config {
                    session: id.to_string(),
                    reason: format!(
                        "{shared} (the name is BeginString-SenderCompID-TargetCompID\
                         [-SessionQualifier]; sub and location IDs are not part of it): give \
                         one of the two sessions its own {key}"
                    ),
                });
            }
            seen.push((key, place, spec));
        }
    }
    Ok(())
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
        Engine::from_settings_adjusted(settings, app, opts, |_| {})
    }

    /// [`Engine::from_settings_with`], with `adjust` applied to each session's spec
    /// (read from the settings) before the engine starts: for what an application
    /// decides rather than the settings file, e.g.
    /// `SessionConfig::adopt_counterparty_default_appl_ver_id`.
    pub fn from_settings_adjusted(
        settings: &Settings,
        app: A,
        mut opts: EngineOptions,
        mut adjust: impl FnMut(&mut SessionSpec),
    ) -> Result<Engine<A>, Error> {
        if let (None, Some(t)) = (&opts.tls, &settings.tls) {
            let has = |ct| settings.sessions.iter().any(|s| s.connection_type == ct);
            opts.tls = Some(TlsConfig::from_settings(
                t,
                has(ConnectionType::Acceptor),
                has(ConnectionType::Initiator),
            )?);
        }
        let mut dicts = DictionaryCache::new();
        let specs = settings
            .sessions
            .iter()
            .map(|s| {
                let mut spec = SessionSpec::from_settings(s, &mut dicts)?;
                adjust(&mut spec);
                Ok(spec)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Engine::new(specs, app, opts)
    }

    /// An engine for these sessions: opens the stores, binds the acceptors'
    /// listeners (sessions with the same address share one), calls
    /// [`Application::on_create`] per session. Initiators connect in the first turn.
    /// Two sessions whose file stores would share a directory (their
    /// [`FileStore::session_dir_name`]s collide under one `FileStorePath`) are refused
    /// with [`Error::Config`] naming both and the directory, before anything is opened.
    pub fn new(
        specs: Vec<SessionSpec>,
        mut app: A,
        opts: EngineOptions,
    ) -> Result<Engine<A>, Error> {
        // Before anything is opened or bound: the second of two sessions sharing a
        // store directory would otherwise fail on the first one's lock, with a message
        // about "another open store".
        check_store_dirs(&specs)?;
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
            if let Some(t) = &opts.tls {
                let (side, missing) = match spec.role() {
                    Role::Acceptor => ("acceptor", t.server.is_none()),
                    Role::Initiator => ("initiator", t.client.is_none()),
                };
                if missing {
                    return Err(Error::Config {
                        session: name,
                        reason: format!("TLS is on but has no configuration for an {side}"),
                    });
                }
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
                            log_listening(local, opts.tls.is_some());
                            listeners.push((Some(l), local));
                            listen_specs.push(addr);
                            i
                        }
                    };
                    Some(ListenerId(i))
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
                flushed: false,
                conn: None,
                connect: spec.connect,
                next_addr: 0,
                nodelay: spec.nodelay,
                listener,
                allowed: spec.allowed_remote_addresses,
                counters: SessionCounters::default(),
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
                resume: Vec::new(),
                turns: 0,
                connects: Vec::new(),
                next_housekeeping: 0,
                refused: 0,
                refused_logged: (0, 0),
                evicted: 0,
                evicted_logged: (0, 0),
                timed_out: 0,
                timed_out_logged: (0, 0),
                first_refused: 0,
                first_refused_logged: (0, 0),
                opened: 0,
                tls_in: if opts.tls.is_some() {
                    vec![0; opts.read_buffer.clamp(16 << 10, 1 << 20)]
                } else {
                    Vec::new()
                },
            },
            scratch: Scratch::default(),
            log,
            opts,
            rx,
            handle,
            stop: false,
            now,
            monitor: None,
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
                self.close_conn(ConnId(c), "Disconnecting");
            }
        }
        self.drain_touched();
        for s in &mut self.slots {
            let _ = s.session.store_mut().flush();
        }
        if let Some(l) = &mut self.log {
            l.close();
            if l.dropped() > 0 {
                tracing::warn!(
                    "FIX message log: {} batches (loop turns) not written, the log writer was behind",
                    l.dropped()
                );
            }
        }
        Ok(())
    }

    /// Starts publishing to a monitoring thread: the engine stores a heartbeat at its
    /// housekeeping tick (every 10 ms while busy; at most `max_block` apart while idle)
    /// and hands the returned reader an [`EngineSnapshot`] when it asks (at most one
    /// per tick), without a lock (see [`tickwire_rt::snapshot`]).
    pub fn monitor(&mut self) -> monitor::Reader {
        let (publisher, reader) = tickwire_rt::snapshot::channel(MonoNanos::now());
        self.monitor = Some(publisher);
        reader
    }

    /// The counters of a session.
    pub fn counters(&self, key: SessionKey) -> Option<SessionCounters> {
        self.slots.get(key.0).map(|s| s.counters)
    }

    /// Every session's state, sequence numbers and counters, now.
    pub fn snapshot(&self) -> EngineSnapshot {
        let sessions = self
            .slots
            .iter()
            .map(|s| {
                let conn = s
                    .conn
                    .and_then(|c| self.net.conns.get(c.0))
                    .and_then(Option::as_ref);
                let state = match conn.map(|c| c.state) {
                    None | Some(ConnState::Closing) => SessionState::Disconnected,
                    Some(ConnState::Connecting) => SessionState::Connecting,
                    Some(ConnState::Open) if s.session.is_logged_on() => SessionState::LoggedOn,
                    Some(ConnState::Open) => SessionState::LoggingOn,
                };
                SessionView {
                    session: s.id.to_string(),
                    role: match s.session.config().role {
                        Role::Acceptor => "acceptor",
                        Role::Initiator => "initiator",
                    },
                    state,
                    next_sender_seq: s.session.next_sender_seq(),
                    next_target_seq: s.session.next_target_seq(),
                    heart_bt_int: s.session.heart_bt_int(),
                    peer: conn.and_then(|c| c.peer).map(|p| p.to_string()),
                    counters: s.counters,
                }
            })
            .collect();
        EngineSnapshot {
            taken: MonoNanos::now(),
            sessions,
            refused_connections: self.net.refused,
            evicted_pending_connections: self.net.evicted,
            logon_timeouts: self.net.timed_out,
            log_batches_dropped: self.log_dropped(),
        }
    }

    /// Message-log batches (one per loop turn) dropped because the log writer was
    /// behind (the engine never waits for it); 0 without a `FileLogPath`.
    pub fn log_dropped(&self) -> u64 {
        self.log.as_ref().map_or(0, MessageLog::dropped)
    }

    // ─── connections ────────────────────────────────────────────────────────────

    // ─── sessions ───────────────────────────────────────────────────────────────
}

/// The startup line of a listener: its address, whether it speaks TLS, and a warning
/// when it listens on every interface (no `SocketAcceptHost`: QuickFIX's default too).
fn log_listening(local: SocketAddr, tls: bool) {
    let proto = if tls { "TLS" } else { "clear text (no TLS)" };
    if local.ip().is_unspecified() {
        tracing::warn!(
            "FIX acceptor listening on {local}, ALL network interfaces, {proto}: no \
             SocketAcceptHost is set (QuickFIX's default); set SocketAcceptHost=127.0.0.1 \
             (or one interface's address) to restrict it"
        );
    } else {
        tracing::info!("FIX acceptor listening on {local}, {proto}");
    }
}

impl<A: Application> Drop for Engine<A> {
    fn drop(&mut self) {
        for s in &mut self.slots {
            let _ = s.session.store_mut().flush();
        }
    }
}
