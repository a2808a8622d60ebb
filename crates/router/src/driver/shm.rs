//! The shared-memory transport's part of the event loop (docs/shm.md).
//!
//! A shared-memory client is a [`Conn`] like any other: its [`Link`] reads and writes
//! like a non-blocking socket (`WouldBlock` when its ring is empty or full), so the
//! loop's read, route, write and close steps, the core, the slow-consumer policy and
//! the stats are the TCP ones. What differs is readiness, which no kernel reports:
//!
//! - every turn, [`Router::shm_scan`] puts each shared-memory client whose ring index
//!   moved on the read list (one load each, from a dense list of the indexes: an idle
//!   client costs the turn ~1 ns, not a walk through its connection; the read that
//!   follows drains the ring, as an edge-triggered socket's does) and marks those on
//!   the flush list whose outbound ring has room again writable (no syscall);
//! - before a wait that could sleep (idle `block`/`hybrid`), [`Router::shm_park`]
//!   announces the sleep in every client's ring header and looks once more; a client
//!   that then publishes rings the router's doorbell: one byte on its own handshake
//!   socket, which is in the epoll set under the client's token (no descriptor is
//!   shared between clients or with a client, so none can block or steal a wake-up);
//! - a client frees room in its full inbound ring without ringing (no doorbell for
//!   room), so while one has output waiting [`Router::shm_room_wait`] caps the
//!   sleep at [`ROOM_POLL`], doubling to [`ROOM_POLL_MAX`] while no room appears (and
//!   on to [`ROOM_POLL_STOPPED`] after a second of that);
//! - the handshake socket of each client is in the epoll set under the client's token:
//!   its rings are drained (never waiting) by the read that finds the ring empty, and
//!   its end of stream (the client closed or died, kill -9 included) is the client's
//!   end of stream.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::RawFd;

use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_shm::{Listener, ServerLink, WatchedWord};

use super::tls::TlsLink;
use super::{Conn, Router, INITIAL_READ_BUFFER};
use crate::core::Peer;
use crate::index::Slot;

/// The shared-memory handshake socket's token.
pub(super) const SHM_LISTENER: Token = Token(usize::MAX - 3);

/// A client's byte stream: a TCP socket, a TLS connection over one (`driver/tls.rs`)
/// or a shared-memory ring pair.
pub(super) enum Link {
    Tcp(TcpStream),
    Tls(Box<TlsLink>),
    Shm(Box<ServerLink>),
}

impl Link {
    pub(super) fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.shutdown(how),
            Link::Tls(t) => t.shutdown(how),
            Link::Shm(l) => {
                l.shutdown();
                Ok(())
            }
        }
    }

    /// The TCP stream, to drain after closing; a shared-memory link needs no draining
    /// (its ring is not read by the kernel, nothing can be reset).
    pub(super) fn into_tcp(self) -> Option<TcpStream> {
        match self {
            Link::Tcp(s) => Some(s),
            Link::Tls(t) => Some(t.into_tcp()),
            Link::Shm(_) => None,
        }
    }

    /// Encrypted bytes wait for the socket (TLS only): the client stays on the flush
    /// list until they are written.
    pub(super) fn wants_write(&self) -> bool {
        matches!(self, Link::Tls(t) if t.wants_write())
    }

    /// Whether a client that cannot take output now stays on the flush list: a
    /// shared-memory client does (the turn's ring scan notices room, no event does);
    /// a socket leaves it until its writable edge puts it back, so clients that stop
    /// reading cost the loop nothing per turn (1,000 of them added ~2.6 µs to every
    /// other client's messages).
    pub(super) fn waits_on_list(&self) -> bool {
        matches!(self, Link::Shm(_))
    }

    /// The last read may have left something to read although it returned less than
    /// the space offered (TLS: the ciphertext buffer filled up; shared memory: an event
    /// on the handshake socket, its end of stream perhaps, not looked at yet, which the
    /// ring's index will not announce).
    pub(super) fn socket_unread(&self) -> bool {
        match self {
            Link::Tls(t) => t.socket_unread(),
            Link::Shm(l) => l.ctl_pending(),
            Link::Tcp(_) => false,
        }
    }

    /// Writes what waits below the stream (TLS records). Returns true if some still wait.
    pub(super) fn flush_below(&mut self) -> io::Result<bool> {
        match self {
            Link::Tls(t) => t.flush(),
            _ => Ok(false),
        }
    }

    /// A readiness event on this client's token: for shared memory, its handshake
    /// socket (a doorbell ring, or its end of stream).
    pub(super) fn on_event(&mut self) {
        if let Link::Shm(l) = self {
            l.hint_ctl_event();
        }
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => s.read(buf),
            Link::Tls(t) => t.read(buf),
            Link::Shm(l) => l.read(buf),
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => s.write(buf),
            Link::Tls(t) => t.write(buf),
            Link::Shm(l) => l.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl mio::event::Source for Link {
    fn register(&mut self, r: &Registry, token: Token, interest: Interest) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.register(r, token, interest),
            Link::Tls(t) => t.socket().register(r, token, interest),
            Link::Shm(l) => SourceFd(&l.ctl_fd()).register(r, token, Interest::READABLE),
        }
    }

    fn reregister(&mut self, r: &Registry, token: Token, interest: Interest) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.reregister(r, token, interest),
            Link::Tls(t) => t.socket().reregister(r, token, interest),
            Link::Shm(l) => SourceFd(&l.ctl_fd()).reregister(r, token, Interest::READABLE),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.deregister(r),
            Link::Tls(t) => t.socket().deregister(r),
            Link::Shm(l) => SourceFd(&l.ctl_fd()).deregister(r),
        }
    }
}

/// The router's shared-memory listener and its clients.
pub(super) struct ShmPort {
    listener: Listener,
    /// Shared-memory clients, each with its ring index as last seen (slots are
    /// removed when their connection goes; checked on use all the same).
    watch: WatchList,
    /// Spin: the least time between two `epoll_wait` calls (`shm_epoll_interval_us`).
    epoll_interval_ns: u64,
    /// When epoll was last asked.
    last_epoll: MonoNanos,
    /// The park flags are set (only then are they cleared: a spinning router must not
    /// write the clients' cache lines every turn).
    parked: bool,
    /// A handshake failed for want of resources: try accepting again next turn.
    accept_retry: bool,
    /// [`MAX_ACCEPTS_PER_TURN`] were accepted and more may wait: accept again next
    /// turn, without sleeping first.
    accept_more: bool,
    /// The listener's pause (`Listener::paused`) was logged.
    paused_logged: bool,
    /// The next sleep cap while output waits for room: [`ROOM_POLL`] after a client
    /// freed room, doubling up to [`ROOM_POLL_MAX`] while none does.
    room_wait: RoomWait,
}

/// One shared-memory client as the turn's scan sees it.
struct Watched {
    id: Slot,
    /// The client's published write index.
    tail: WatchedWord,
    /// Its value at the last look: a change means bytes to read.
    seen: u64,
}

/// The shared-memory clients the scan looks at, densely packed, and where each slot
/// is in the list: a client joins and leaves in O(1), so n clients that come or go at
/// once cost O(n), not O(n²).
#[derive(Default)]
struct WatchList {
    list: Vec<Watched>,
    /// Each slot's index in `list` ([`NOT_WATCHED`] if none).
    pos: Vec<u32>,
}

/// `WatchList::pos` of a slot that is not on the list.
const NOT_WATCHED: u32 = u32::MAX;

impl WatchList {
    /// Puts `id` on the list (in place of an earlier entry of the slot, if any).
    fn add(&mut self, id: Slot, tail: WatchedWord) {
        self.remove(id);
        let i = id.0 as usize;
        if self.pos.len() <= i {
            self.pos.resize(i + 1, NOT_WATCHED);
        }
        self.pos[i] = self.list.len() as u32;
        // `seen` 0: a ring that already moved (the HELLO) is read this turn.
        self.list.push(Watched { id, tail, seen: 0 });
    }

    /// Takes `id` off the list, if it is on it (which unmaps its ring once nothing
    /// else refers to it).
    fn remove(&mut self, id: Slot) {
        let Some(p) = self.pos.get_mut(id.0 as usize) else {
            return;
        };
        let at = std::mem::replace(p, NOT_WATCHED) as usize;
        if at >= self.list.len() {
            return;
        }
        self.list.swap_remove(at);
        if let Some(moved) = self.list.get(at) {
            self.pos[moved.id.0 as usize] = at as u32;
        }
    }

    /// Keeps the entries `keep` accepts.
    fn retain(&mut self, keep: impl FnMut(&Watched) -> bool) {
        self.list.retain(keep);
        self.pos.fill(NOT_WATCHED);
        for (at, w) in self.list.iter().enumerate() {
            self.pos[w.id.0 as usize] = at as u32;
        }
    }
}

/// Most failed handshakes in one accept round before the rest wait for the next turn.
const MAX_ACCEPT_FAILURES: u32 = 16;

/// Shared-memory clients accepted in one turn at most: a handshake costs the loop a
/// memfd, its seals, a mapping and a `sendmsg` (~50-60 µs measured), so a queue of
/// thousands (a hostile-input pass: 4,000 held the loop 260 ms) is taken a part per
/// turn, the other clients served in between (~3-4 ms a turn at most).
pub(super) const MAX_ACCEPTS_PER_TURN: u32 = 64;

/// The longest sleep while a shared-memory client's output waits for room in its ring,
/// right after some client freed room.
pub(super) const ROOM_POLL: std::time::Duration = std::time::Duration::from_micros(20);

/// The cap [`ROOM_POLL`] doubles up to while no client frees room: a client that stops
/// reading costs the router at most 1,000 wake-ups a second, not 50,000, until the
/// slow-consumer policy deals with it.
pub(super) const ROOM_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(1);

/// How long output must wait for room, with no client freeing any and none newly
/// waiting, before the clients waiting are taken to have stopped reading: the cap then
/// doubles on, up to [`ROOM_POLL_STOPPED`].
const ROOM_POLL_PATIENCE_NS: u64 = 1_000_000_000;

/// The cap for clients that have stopped reading (see [`ROOM_POLL_PATIENCE_NS`]): under
/// the `discard` policy such a client stays connected, and at 1,000 wake-ups a second it
/// cost the router ~2% of a core for as long as it did (a hostile-input pass); at 50 ms
/// that is 20 a second. A client that starts reading again after such a stall waits up
/// to this long for the flow to resume; a client whose output starts waiting meanwhile
/// (a burst that fills its ring) starts the back-off over at [`ROOM_POLL`].
pub(super) const ROOM_POLL_STOPPED: std::time::Duration = std::time::Duration::from_millis(50);

/// The room poll's back-off state: the current sleep cap, since when it has backed off
/// without a client freeing room or newly waiting, and how many clients wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RoomWait {
    cap: std::time::Duration,
    since: Option<MonoNanos>,
    waiting: usize,
}

impl RoomWait {
    pub(super) const START: RoomWait = RoomWait {
        cap: ROOM_POLL,
        since: None,
        waiting: 0,
    };
}

/// One step of the room poll's back-off at `now`, with `waiting` clients' output waiting
/// for room: the sleep cap now (`None`: none waits) and the next state. The cap starts
/// at [`ROOM_POLL`] and doubles while output keeps waiting, up to [`ROOM_POLL_MAX`] and,
/// after [`ROOM_POLL_PATIENCE_NS`] of that, to [`ROOM_POLL_STOPPED`]; it starts over when
/// none waits or one more client does.
fn room_wait_step(
    current: RoomWait,
    waiting: usize,
    now: MonoNanos,
) -> (Option<std::time::Duration>, RoomWait) {
    if waiting == 0 {
        return (None, RoomWait::START);
    }
    let current = if waiting > current.waiting {
        RoomWait {
            since: Some(now),
            waiting,
            ..RoomWait::START
        }
    } else {
        current
    };
    let since = current.since.unwrap_or(now);
    let limit = if now.saturating_sub(since) >= ROOM_POLL_PATIENCE_NS {
        ROOM_POLL_STOPPED
    } else {
        ROOM_POLL_MAX
    };
    let next = RoomWait {
        cap: (current.cap * 2).min(limit.max(current.cap)),
        since: Some(since),
        waiting,
    };
    (Some(current.cap), next)
}

impl ShmPort {
    /// Binds the handshake socket and registers it.
    pub(super) fn open(
        name: &str,
        ring: usize,
        epoll_interval_us: u64,
        registry: &Registry,
    ) -> io::Result<ShmPort> {
        let path = tickwire_shm::socket_path(name);
        let listener = Listener::bind(&path, ring)?;
        let fd: RawFd = listener.raw_fd();
        registry.register(&mut SourceFd(&fd), SHM_LISTENER, Interest::READABLE)?;
        tracing::info!(path = %path.display(), ring, "shared-memory listener ready");
        if !listener.refuses_descriptors() {
            tracing::info!(
                "this kernel cannot refuse file descriptors passed on the shared-memory \
                 socket (SO_PASSRIGHTS, Linux 6.16): a client that passes one is \
                 disconnected and it is closed off the event loop (docs/shm.md, \
                 \"Descriptors\")"
            );
        }
        Ok(ShmPort {
            listener,
            watch: WatchList::default(),
            epoll_interval_ns: epoll_interval_us.saturating_mul(1000),
            last_epoll: MonoNanos::now(),
            parked: false,
            accept_retry: false,
            accept_more: false,
            paused_logged: false,
            room_wait: RoomWait::START,
        })
    }
}

impl Router {
    /// The handshake listener is readable: clients are accepted by this turn's
    /// [`Router::shm_scan`].
    pub(super) fn shm_listener_ready(&mut self) {
        if let Some(port) = self.shm.as_mut() {
            port.accept_more = true;
        }
    }

    /// More shared-memory clients wait to be accepted than one turn takes
    /// ([`MAX_ACCEPTS_PER_TURN`]): the next turn must not sleep.
    pub(super) fn shm_accepts_waiting(&self) -> bool {
        self.shm.as_ref().is_some_and(|p| p.accept_more)
    }

    /// A turn that would only look (a zero timeout): `Some(now)` when epoll was asked
    /// less than `shm_epoll_interval_us` ago, so this turn scans the rings only and
    /// takes `now` as its clock. One clock read per turn, and only with a
    /// shared-memory listener.
    pub(super) fn shm_skips_epoll(&mut self) -> Option<MonoNanos> {
        let port = self.shm.as_mut()?;
        if port.epoll_interval_ns == 0 {
            return None;
        }
        let now = MonoNanos::now();
        if now.saturating_sub(port.last_epoll) < port.epoll_interval_ns {
            return Some(now);
        }
        port.last_epoll = now;
        None
    }

    /// Accepts the waiting shared-memory clients, [`MAX_ACCEPTS_PER_TURN`] at most (the
    /// rest at the next turn, which then does not sleep).
    pub(super) fn shm_accept(&mut self, now: MonoNanos) {
        let mut failures = 0;
        let mut accepted = 0;
        loop {
            let Some(port) = self.shm.as_mut() else {
                return;
            };
            port.accept_retry = false;
            port.accept_more = false;
            if port.listener.paused() {
                // Old kernel, closer thread stuck on a passed descriptor: look again
                // next turn (the listener's events do not come back by themselves).
                port.accept_retry = true;
                if !port.paused_logged {
                    port.paused_logged = true;
                    tracing::error!(
                        "shared-memory clients not accepted: the thread closing file \
                         descriptors clients passed is stuck on one (this kernel lacks \
                         SO_PASSRIGHTS, Linux 6.16; docs/shm.md, \"Descriptors\")"
                    );
                }
                return;
            }
            if port.paused_logged {
                port.paused_logged = false;
                tracing::warn!("shared-memory clients accepted again");
            }
            if accepted >= MAX_ACCEPTS_PER_TURN {
                port.accept_more = true;
                return;
            }
            accepted += 1;
            let link = match port.listener.accept() {
                Ok(Some(link)) => link,
                Ok(None) => return,
                Err(e) if super::is_out_of_descriptors(&e) => {
                    // accept(2) itself: the client still waits, and would until its
                    // timeout while every turn's accept failed again (a hostile-input
                    // probe counted ~200,000 a second). With the reserve descriptor
                    // freed, it is accepted and closed: it hears at once.
                    // A reserve lost earlier (it could not be opened again at once) is
                    // sought again here (review).
                    if self.reserve_fd.is_none() {
                        self.reserve_fd = super::open_reserve();
                    }
                    let refused = match self.reserve_fd.take() {
                        Some(reserve) => {
                            drop(reserve);
                            let r = port.listener.refuse_one();
                            self.reserve_fd = super::open_reserve();
                            r
                        }
                        None => Err(e),
                    };
                    match refused {
                        Ok(true) => {
                            tracing::warn!("shared-memory client refused: out of file descriptors");
                            continue;
                        }
                        // Nobody waits (accept(2) takes its descriptor before it looks
                        // at the queue, so it fails on an empty one too): the
                        // listener's next readiness event brings us back.
                        Ok(false) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "shared-memory accept failed at the descriptor limit");
                            port.accept_retry = true;
                            return;
                        }
                    }
                }
                Err(e) => {
                    // The client may have gone (its handshake fails alone), or we lack
                    // descriptors or memory: then retry next turn rather than spin here.
                    tracing::warn!(error = %e, "shared-memory handshake failed");
                    failures += 1;
                    if failures >= MAX_ACCEPT_FAILURES {
                        port.accept_retry = true;
                        return;
                    }
                    continue;
                }
            };
            let process = link.peer();
            let peer = Peer::Shm {
                pid: process.and_then(|p| p.pid),
                uid: process.map(|p| p.uid),
            };
            let tail = link.input_watch();
            let mut link = Link::Shm(Box::new(link));
            let id = match self.core.handle_accept(peer, now, UtcNanos::now()) {
                Ok(id) => id,
                Err(refused) => {
                    tracing::warn!(
                        max = self.core.config().max_clients,
                        "shared-memory client refused: at the connection limit"
                    );
                    // A fresh ring takes the short error frame.
                    let _ = link.write(&refused.0);
                    let _ = link.shutdown(Shutdown::Both);
                    continue;
                }
            };
            let token = Token(id.0 as usize);
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut link, token, Interest::READABLE)
            {
                tracing::warn!(error = %e, "cannot register shared-memory client");
                self.core.handle_closed(id, "registration failed");
                continue;
            }
            let i = id.0 as usize;
            if self.conns.len() <= i {
                self.conns.resize_with(i + 1, || None);
            }
            self.conns[i] = Some(Conn::new(link));
            if let Some(port) = self.shm.as_mut() {
                port.watch.add(id, tail);
            }
        }
    }

    /// Puts shared-memory clients whose ring index moved since the last look on the
    /// read list, and marks those on `flush_list` that wait for room writable when their
    /// outbound ring has some. Returns true if any has input.
    ///
    /// A moved index is an edge, as epoll's: the read that follows takes what the ring
    /// holds, and a read that fills its buffer keeps the client on the read list (see
    /// `read_once`), so no bytes wait unseen. Bytes written after this look move the
    /// index again.
    pub(super) fn shm_scan(
        &mut self,
        read_list: &mut Vec<Slot>,
        flush_list: &[Slot],
        now: MonoNanos,
    ) -> bool {
        if self
            .shm
            .as_ref()
            .is_some_and(|p| p.accept_retry || p.accept_more)
        {
            self.shm_accept(now);
        }
        let Some(port) = self.shm.as_mut() else {
            return false;
        };
        let conns = &mut self.conns;
        let mut input = false;
        let mut stale = false;
        for w in &mut port.watch.list {
            let tail = w.tail.load();
            if tail == w.seen {
                continue;
            }
            w.seen = tail;
            match conns.get_mut(w.id.0 as usize).and_then(Option::as_mut) {
                Some(c) if matches!(c.stream, Link::Shm(_)) => {
                    if c.closing_deadline.is_none() {
                        input = true;
                        c.readable = true;
                        if !c.on_read_list {
                            c.on_read_list = true;
                            read_list.push(w.id);
                        }
                    }
                }
                _ => stale = true,
            }
        }
        if stale {
            port.watch.retain(|w| {
                conns
                    .get(w.id.0 as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| matches!(c.stream, Link::Shm(_)))
            });
        }
        // A client frees room in its full ring without ringing: look at those waiting
        // (they stay on the flush list while they wait; see `Link::waits_on_list`).
        let mut room = false;
        for &id in flush_list {
            if let Some(c) = conns.get_mut(id.0 as usize).and_then(Option::as_mut) {
                if let Link::Shm(l) = &mut c.stream {
                    if !c.writable && l.has_room() {
                        c.writable = true;
                        room = true;
                    }
                }
            }
        }
        if room {
            port.room_wait = RoomWait::START;
        }
        input
    }

    /// Forgets a shared-memory client whose connection is gone (its mapping is
    /// unmapped once nothing refers to it).
    pub(super) fn shm_forget(&mut self, id: Slot) {
        if let Some(port) = self.shm.as_mut() {
            port.watch.remove(id);
        }
    }

    /// How long a sleep may last while a shared-memory client has output waiting for
    /// room in its full ring (`None`: no client waits). A client rings no doorbell when
    /// it frees room (the wake protocol announces sleeps only), so a sleeping router
    /// looks again after [`ROOM_POLL`]; without that, a burst that filled a subscriber's
    /// ring would wait for the next input or the longest block (50 ms). Each look that
    /// finds no room doubles the wait, up to [`ROOM_POLL_MAX`], so a client that has
    /// stopped reading does not keep the router waking every 20 µs.
    pub(super) fn shm_room_wait(&mut self, now: MonoNanos) -> Option<std::time::Duration> {
        let port = self.shm.as_mut()?;
        let conns = &self.conns;
        let waiting = port
            .watch
            .list
            .iter()
            .filter(|w| {
                conns
                    .get(w.id.0 as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| c.on_flush_list && !c.writable)
            })
            .count();
        let (wait, next) = room_wait_step(port.room_wait, waiting, now);
        port.room_wait = next;
        wait
    }

    /// Announces in every shared-memory client's ring that the router is about to
    /// sleep. True if one of them has bytes after all: do not sleep.
    pub(super) fn shm_park(&mut self) -> bool {
        let Some(port) = self.shm.as_mut() else {
            return false;
        };
        port.parked = true;
        let mut ready = false;
        for w in &mut port.watch.list {
            if let Some(
                c @ Conn {
                    stream: Link::Shm(l),
                    ..
                },
            ) = self.conns.get(w.id.0 as usize).and_then(Option::as_ref)
            {
                // Only a client the loop would read now may keep it awake: bytes from a
                // closing client (read no more) or one left unread at the read memory
                // limit (`Conn::awaits_read_memory`, read again when memory frees) would
                // make every turn a zero-timeout one, a spin until its linger ends or
                // memory frees. Such a client is not asked to ring either.
                if !c.reads_now() {
                    continue;
                }
                if l.park() {
                    ready = true;
                    // Bytes (or a broken index) the scan may not see as a change: a
                    // client can move its index back to the value last seen after the
                    // read took more. The next scan reads it, whatever the index says
                    // (the read drains the ring or reports the corruption), so a
                    // sleeping router does not spin on a ring that stays "ready".
                    w.seen = !w.tail.load();
                }
            }
        }
        ready
    }

    /// Withdraws [`Router::shm_park`] after waking.
    pub(super) fn shm_unpark(&mut self) {
        let Some(port) = self.shm.as_mut().filter(|p| p.parked) else {
            return;
        };
        port.parked = false;
        for w in &port.watch.list {
            if let Some(Conn {
                stream: Link::Shm(l),
                ..
            }) = self.conns.get(w.id.0 as usize).and_then(Option::as_ref)
            {
                l.unpark();
            }
        }
    }
}

impl Conn {
    /// Whether the loop reads this client when it has input: not once it is closing
    /// (its input is dropped) nor while it waits for read memory.
    pub(super) fn reads_now(&self) -> bool {
        self.closing_deadline.is_none() && !self.awaits_read_memory()
    }

    /// Left unread because the read buffers were at `read_memory_limit`: input is
    /// known to wait (`readable`) but the client is off the read list. The loop puts it
    /// back when memory frees (`Router::requeue_starved`) and on every timer tick.
    pub(super) fn awaits_read_memory(&self) -> bool {
        self.readable && !self.on_read_list
    }

    /// A new connection's state around `stream`.
    pub(super) fn new(stream: Link) -> Conn {
        Conn {
            stream,
            rbuf: vec![0; INITIAL_READ_BUFFER],
            start: 0,
            end: 0,
            readable: false,
            read_recently: false,
            readable_full: false,
            on_read_list: false,
            writable: true,
            on_flush_list: false,
            closing_deadline: None,
            paused: false,
            peer_closed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Clients join and leave the watch list in any order: every one still on it is
    /// found at the place its slot records, and one that left is gone (its mapping
    /// with it: the list held the last reference).
    #[test]
    fn the_watch_list_keeps_each_slots_place_as_clients_come_and_go() {
        let path = std::env::temp_dir().join(format!("tickwire-watch-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(4096).unwrap();
        let region = Arc::new(tickwire_shm::Region::map(&file).unwrap());
        let _ = std::fs::remove_file(&path);
        let mut w = WatchList::default();
        let check = |w: &WatchList, want: &[u32]| {
            let mut ids: Vec<u32> = w.list.iter().map(|x| x.id.0).collect();
            ids.sort_unstable();
            assert_eq!(ids, want);
            for (at, x) in w.list.iter().enumerate() {
                assert_eq!(w.pos[x.id.0 as usize], at as u32, "slot {}", x.id.0);
            }
            let on = w.pos.iter().filter(|&&p| p != NOT_WATCHED).count();
            assert_eq!(on, want.len(), "slots recorded as on the list");
        };
        for id in [3u32, 0, 7, 1, 5] {
            w.add(Slot(id), WatchedWord::new(region.clone(), 8 * id as usize));
        }
        check(&w, &[0, 1, 3, 5, 7]);
        w.remove(Slot(3));
        check(&w, &[0, 1, 5, 7]);
        w.remove(Slot(7)); // the last entry
        w.remove(Slot(7)); // again: nothing
        w.remove(Slot(42)); // never seen
        check(&w, &[0, 1, 5]);
        // A slot reused: its new client replaces the old entry.
        w.add(Slot(1), WatchedWord::new(region.clone(), 64));
        check(&w, &[0, 1, 5]);
        w.retain(|x| x.id.0 != 0);
        check(&w, &[1, 5]);
        w.remove(Slot(5));
        w.remove(Slot(1));
        check(&w, &[]);
        assert_eq!(
            Arc::strong_count(&region),
            1,
            "every entry's reference dropped"
        );
    }

    /// A client that stops reading: the router's sleep cap doubles from 20 µs to 1 ms
    /// and stays there (at most 1,000 wake-ups a second), and starts over at 20 µs once
    /// no output waits.
    #[test]
    fn room_poll_doubles_to_its_cap_and_starts_over_when_nothing_waits() {
        let mut cap = RoomWait::START;
        let mut sleeps = Vec::new();
        for i in 0..10u64 {
            let (wait, next) = room_wait_step(cap, 1, MonoNanos(i * 1_000_000));
            sleeps.push(wait.map(|w| w.as_micros()));
            cap = next;
        }
        let us = |v: u128| Some(v);
        assert_eq!(
            sleeps,
            [
                us(20),
                us(40),
                us(80),
                us(160),
                us(320),
                us(640),
                us(1000),
                us(1000),
                us(1000),
                us(1000)
            ]
        );
        let (wait, next) = room_wait_step(cap, 0, MonoNanos(20_000_000));
        assert_eq!((wait, next), (None, RoomWait::START));
        assert_eq!(
            room_wait_step(next, 1, MonoNanos(21_000_000)).0,
            Some(ROOM_POLL)
        );
    }

    /// Hostile-input pass: under `discard` a shm client that stopped reading stays
    /// connected, and 1,000 wake-ups a second cost the router ~2% of a core for good.
    /// After a second with no client freeing room the cap doubles on to 50 ms (20 a
    /// second), measured in time, not looks (review: a router woken by traffic makes
    /// many looks a millisecond); a client whose output starts waiting meanwhile starts
    /// it over at 20 µs (review: a healthy client's burst waited up to 50 ms).
    #[test]
    fn room_poll_backs_off_further_for_a_client_that_stopped_reading() {
        let ms = |m: u64| MonoNanos(m * 1_000_000);
        let mut state = RoomWait::START;
        // Many looks within the first second (traffic wakes the router): at most 1 ms.
        for i in 0..5000u64 {
            let (wait, next) = room_wait_step(state, 1, MonoNanos(i * 100_000));
            assert!(wait.unwrap() <= ROOM_POLL_MAX, "look {i}");
            state = next;
        }
        let mut t = 600;
        while state.cap < ROOM_POLL_STOPPED {
            let (wait, next) = room_wait_step(state, 1, ms(t));
            t += u64::try_from(wait.unwrap().as_millis()).unwrap().max(1);
            state = next;
            assert!(t < 2000, "never reached {ROOM_POLL_STOPPED:?}");
        }
        assert!(t > 1000, "backed off further after {t} ms");
        assert_eq!(room_wait_step(state, 1, ms(t)).0, Some(ROOM_POLL_STOPPED));
        // A second client's output starts waiting: back to 20 µs for it.
        let (wait, next) = room_wait_step(state, 2, ms(t + 50));
        assert_eq!(wait, Some(ROOM_POLL));
        assert_eq!(room_wait_step(next, 2, ms(t + 51)).0, Some(ROOM_POLL * 2));
        assert_eq!(room_wait_step(next, 0, ms(t + 52)).1, RoomWait::START);
    }
}
