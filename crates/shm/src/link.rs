//! The connection: a Unix-socket handshake that hands each client its own mapping,
//! and the two ends ([`ServerLink`] in the router, [`ClientLink`] in the client) that
//! speak the tickwire byte stream over the mapping's two rings.
//!
//! Handshake: the client connects to the router's Unix socket (`socket_path`). The
//! router creates a memfd (sealed against shrinking and growing, so a client cannot
//! truncate it under the router), maps it, writes the header, and sends one message:
//! 16 bytes (magic, ring capacity) plus one descriptor by `SCM_RIGHTS`, the memfd. The
//! socket then stays open as the connection's doorbell in both directions (one byte
//! rings the peer, only when it announced a sleep: `notify.rs`), and its end of stream
//! is how each side learns that the other died (the kernel closes a killed process's
//! descriptors); the client's shutdown is its goodbye. The router keeps no descriptor
//! whose file description a client shares: what a client does to its descriptors
//! (`fcntl(F_SETFL)` included) cannot make the router's calls block.

use std::fs::File;
use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::layout::{self, Header};
use crate::notify::{self, Drained, Until};
use crate::prefault::{self, Prefaulter};
use crate::raw::{Region, WatchedWord};
use crate::ring::{Consumer, Corrupt, Producer};

/// Default bytes per ring (each direction).
/// 8 MiB: bursts of the size TCP's kernel buffers absorb (loopback autotunes a socket's
/// receive buffer up to `tcp_rmem`'s maximum, 6–32 MiB on common kernels) are absorbed
/// here too; with 1 MiB a receiver stalled ~1 ms at 10M msg/s overflowed its ring and
/// its egress buffer where TCP did not (BENCHMARKS.md, issue 15). Memory is touched
/// as the ring cycles: 16 MiB per busy client at most.
pub const DEFAULT_RING_BYTES: usize = 8 << 20;
/// Smallest and largest ring accepted.
pub const MIN_RING_BYTES: usize = 4096;
/// See [`MIN_RING_BYTES`].
pub const MAX_RING_BYTES: usize = 1 << 30;

/// The directory of the default socket location (a NAME without `/`). Anyone may
/// create files there (mode 1777), so a client checks whose socket it reached
/// ([`trust_listener`]).
const DEFAULT_DIR: &str = "/dev/shm";

/// Where the router's handshake socket for `name` lives: `name` itself when it holds a
/// `/`, otherwise `/dev/shm/tickwire-<name>.sock`.
pub fn socket_path(name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        PathBuf::from(format!("{DEFAULT_DIR}/tickwire-{name}.sock"))
    }
}

/// Whether a client of user `me` may talk to the listener at `path`, whose process
/// (the kernel's record at `listen`, `SO_PEERCRED`) runs as `owner`. In the default
/// directory, which every local user can write, another user could have bound the name
/// first and would receive the client's traffic and passwords: there the listener
/// must be the client's own user or root. A `path` elsewhere (a NAME with a `/`) is
/// protected by its directory's permissions, which the administrator chose.
fn trust_listener(path: &Path, owner: u32, me: u32) -> io::Result<()> {
    let in_default_dir = path.parent() == Some(Path::new(DEFAULT_DIR));
    if !in_default_dir || owner == me || owner == 0 {
        return Ok(());
    }
    // Not `PermissionDenied`: callers phrase that kind as "the socket admits only the
    // router's user", which is not what happened; this text says what did.
    let trusted = if me == 0 {
        "you (root)".to_owned()
    } else {
        format!("you (uid {me}) or root")
    };
    Err(io::Error::other(format!(
        "refusing the shared-memory socket {}: it was created by uid {owner}, not by \
             {trusted}, so it may be another user's impostor waiting for \
             your messages and password. If no router of yours should be there, remove it \
             (rm {}) and start your router; to share a router between users, give it a \
             NAME with a '/' in a directory only they can write (docs/shm.md)",
        path.display(),
        path.display()
    )))
}

/// The router's shared-memory listener: the handshake socket.
#[derive(Debug)]
pub struct Listener {
    sock: UnixListener,
    path: PathBuf,
    /// The socket file placed at `path` (device, inode): removed at the end only if
    /// the path still names it (another router may have taken the name since).
    placed: Option<(u64, u64)>,
    ring_bytes: usize,
    /// Maps each client's rings into our page tables off the router's thread.
    prefault: Prefaulter,
    /// The kernel refuses descriptors passed to the socket ([`Listener::refuses_descriptors`]).
    refuses_descriptors: bool,
}

impl Listener {
    /// Binds the handshake socket at `path`, mode 0600 (owner only) from the moment the
    /// name exists: bound in a fresh private directory (mode 0700, next to `path`, so on
    /// the same file system), restricted, then renamed into place; nobody else can
    /// reach it before, whatever the umask. A stale socket left by a dead router is
    /// replaced; a live one is an error.
    pub fn bind(path: &Path, ring_bytes: usize) -> io::Result<Listener> {
        if !ring_bytes.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring size {ring_bytes} must be a power of two in {MIN_RING_BYTES}..={MAX_RING_BYTES}"),
            ));
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                use std::os::unix::fs::MetadataExt;
                let owner = std::fs::symlink_metadata(path).map(|m| m.uid()).ok();
                let me = rustix::process::geteuid().as_raw();
                let text = match owner {
                    Some(uid) if uid != me => format!(
                        "{} is taken: a process of another user (uid {uid}) listens on it; \
                         remove the socket if it should not be there, or choose another NAME",
                        path.display()
                    ),
                    _ => format!("a router already listens on {}", path.display()),
                };
                return Err(io::Error::new(io::ErrorKind::AddrInUse, text));
            }
            // Only a stale socket is replaced: a mistyped NAME must not delete a file.
            use std::os::unix::fs::FileTypeExt;
            let is_socket = std::fs::symlink_metadata(path)
                .map(|m| m.file_type().is_socket())
                .unwrap_or(false);
            if !is_socket {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket: refusing to replace it (is the NAME \
                         mistyped? choose another, or remove the file if it should not be \
                         there)",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path).map_err(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => {
                    use std::os::unix::fs::MetadataExt;
                    let owner = std::fs::symlink_metadata(path)
                        .map(|m| format!(" (owned by uid {})", m.uid()))
                        .unwrap_or_default();
                    io::Error::new(
                        e.kind(),
                        format!(
                            "a stale socket at {}{owner}, left by a router that is gone, \
                             cannot be removed by this user (its directory keeps files to \
                             their owners): remove it as its owner or root, or choose \
                             another NAME",
                            path.display()
                        ),
                    )
                }
                _ => e,
            })?;
        }
        let dir = private_dir(path).map_err(|e| {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            match (e.kind(), parent) {
                (io::ErrorKind::NotFound, Some(p)) => io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("the directory {} does not exist", p.display()),
                ),
                _ => e,
            }
        })?;
        let tmp = dir.join("sock");
        let placed = UnixListener::bind(&tmp).and_then(|sock| {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
            // Before anyone can connect (connections inherit it): a client's sendmsg of
            // a descriptor fails (EPERM) instead of handing us something to close.
            let refuses = crate::raw::refuse_passed_descriptors(&sock).is_ok();
            std::fs::rename(&tmp, path)?;
            Ok((sock, refuses))
        });
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_dir(&dir);
        let (sock, refuses_descriptors) = placed?;
        sock.set_nonblocking(true)?;
        let placed = file_id(path);
        let prefault = Prefaulter::start().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start the shared-memory prefault thread: {e}"),
            )
        })?;
        Ok(Listener {
            sock,
            path: path.to_owned(),
            placed,
            ring_bytes,
            prefault,
            refuses_descriptors,
        })
    }

    /// True while no client is accepted ([`Listener::accept`] answers `Ok(None)`): on a
    /// kernel without `SO_PASSRIGHTS`, the thread that closes descriptors clients passed
    /// is stuck on one (more than 64 wait, none closed for a second), and accepting more
    /// clients would let them
    /// fill our descriptor table (closer.rs). Ask again later.
    pub fn paused(&self) -> bool {
        !self.refuses_descriptors && crate::closer::stuck()
    }

    /// Whether the kernel refuses descriptors clients try to pass on the handshake
    /// socket (`SO_PASSRIGHTS`, Linux 6.16). Without it, a client that passes one is
    /// disconnected and the descriptors are closed off the caller's thread (see
    /// docs/shm.md, "Descriptors").
    pub fn refuses_descriptors(&self) -> bool {
        self.refuses_descriptors
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The handshake socket, to register for readability (a client is waiting).
    pub fn raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Accepts one waiting client and hands it its mapping. `Ok(None)`: nobody waits.
    /// An error of `accept(2)` itself is returned as it is (its OS error code intact:
    /// EMFILE means the client still waits, see [`Listener::refuse_one`]); one in
    /// handing over the mapping (descriptors or memory short) has dropped the client,
    /// whose handshake then ends without a mapping, and says so.
    pub fn accept(&self) -> io::Result<Option<ServerLink>> {
        if self.paused() {
            // Fail closed (closer.rs): the clients wait in the kernel's queue.
            return Ok(None);
        }
        let ctl = match self.sock.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        // Who it was, for the log line of a failure (the kernel's record, taken before
        // anything can fail: a probe's thousands of failed handshakes named nobody).
        let who = match crate::raw::peer_credentials(&ctl) {
            Ok((Some(pid), uid)) => format!(" from pid {pid} uid {uid}"),
            // In another pid namespace: no pid of ours for it.
            Ok((None, uid)) => format!(" from uid {uid}"),
            Err(_) => String::new(),
        };
        // Without SO_PASSRIGHTS the client may have queued descriptors already: they
        // are taken off the socket before it closes, if the handshake fails too.
        let ctl = Ctl::new(ctl, !self.refuses_descriptors);
        self.hand_over(ctl).map(Some).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("handing a client{who} its mapping: {e} (the client was dropped)"),
            )
        })
    }

    /// Accepts one waiting client and closes its connection at once: at the descriptor
    /// limit, with one descriptor freed for it, so that it hears (its handshake ends
    /// without a mapping) instead of waiting out its timeout while `accept(2)` fails
    /// again every turn. `Ok(false)`: nobody was waiting.
    pub fn refuse_one(&self) -> io::Result<bool> {
        match self.sock.accept() {
            Ok((ctl, _)) => {
                drop(Ctl::new(ctl, !self.refuses_descriptors));
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn hand_over(&self, mut ctl: Ctl) -> io::Result<ServerLink> {
        let cap = self.ring_bytes;
        let memfd = rustix::fs::memfd_create(
            "tickwire-shm",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let file = File::from(memfd);
        file.set_len(layout::mapping_len(cap) as u64)?;
        rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let region = Arc::new(Region::map(&file)?);
        let header = Header::new(cap);
        layout::write_header(&*region, header);
        let hello = header.to_bytes();
        let fds = [file.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        // A fresh socket's buffer is empty: this small message never blocks.
        let sent = rustix::net::sendmsg(
            &ctl,
            &[io::IoSlice::new(&hello)],
            &mut control,
            SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
        )?;
        if sent != hello.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short handshake"));
        }
        ctl.set_nonblocking(true)?;
        // Inherited from the listener where the kernel has it; said again for the
        // connection itself, and without it its last close is left to the closer thread.
        if self.refuses_descriptors && crate::raw::refuse_passed_descriptors(&*ctl).is_err() {
            ctl.purge_on_drop = true;
        }
        // Who attached, for stats and logs (the kernel's record of the connecting
        // process; unavailable only on a socket that is already gone).
        let peer = crate::raw::peer_credentials(&ctl)
            .ok()
            .map(|(pid, uid)| PeerProcess { pid, uid });
        Ok(ServerLink {
            peer,
            ends: Ends {
                ctl,
                rx: Consumer::new(region.clone(), header.client_to_router()),
                tx: Producer::new(region, header.router_to_client()),
            },
            check_ctl: false,
            eof: false,
            prefault: Some(self.prefault.clone()),
            ring_allowance: std::cell::Cell::new(0),
        })
    }
}

/// A new directory of mode 0700 next to `path` (a fresh name; one someone else made is
/// skipped): a socket bound inside is reachable by nobody else, whatever the umask
/// (which can only take permissions away), until it is renamed out.
fn private_dir(path: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        // Short (at most 21 bytes, "/sock" inside it 5 more): the socket is bound
        // here first, and a socket address holds at most 107 bytes.
        let dir = parent.join(format!(
            ".tw-{:x}-{nanos:x}-{attempt:x}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Only our own socket: if it was removed and another router bound the name
        // since, that router's socket stays (a hostile-input probe saw a router's exit
        // cut a newer router off its clients).
        if self.placed.is_some() && file_id(&self.path) == self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The (device, inode) of the file at `path` itself (a link is not followed).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The process at the other end of a shared-memory connection, as the kernel recorded
/// it when the client connected to the handshake socket (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerProcess {
    /// Its process id; `None` for a process in another PID namespace (a container),
    /// which has no number in the router's.
    pub pid: Option<u32>,
    /// Its user id.
    pub uid: u32,
}

/// The router's end of one client's mapping. Reads and writes never block and make no
/// syscall, except a write that finds the client asleep (one `send` of a byte, the
/// doorbell) and a read after [`ServerLink::hint_ctl_event`] that finds the ring empty
/// (`recv`s that drain the doorbell and look for end of stream).
#[derive(Debug)]
pub struct ServerLink {
    ends: Ends,
    /// The process that connected (`SO_PEERCRED` at accept).
    peer: Option<PeerProcess>,
    /// The handshake socket reported an event (a ring of the doorbell, or end of
    /// stream): drain it once the ring is empty.
    check_ctl: bool,
    /// The client's end of stream was seen on the socket: once the ring is empty, reads
    /// return 0.
    eof: bool,
    /// Until the client's first bytes: the helper that maps its rings into our page
    /// tables (`prefault.rs`).
    prefault: Option<Prefaulter>,
    /// Doorbell rings the client may still send: one per sleep announced to it
    /// ([`ServerLink::park`]), at most [`MAX_RING_ALLOWANCE`] saved up. A client rings
    /// only after taking an announcement, so one that rings more is flooding the
    /// socket (a helper's probe: 1.5 GB of rings in 15 s cost the router a third of a
    /// core in `recv`s, never reported).
    ring_allowance: std::cell::Cell<u64>,
}

/// A handshake socket. On a kernel that let the peer queue descriptors on it (no
/// `SO_PASSRIGHTS`), dropping it first shuts it down (nothing more can be queued) and
/// takes what is queued off it, descriptors to the closer thread: the close then
/// releases nothing a peer chose (`closer.rs`).
#[derive(Debug)]
struct Ctl {
    sock: UnixStream,
    purge_on_drop: bool,
}

impl Ctl {
    fn new(sock: UnixStream, purge_on_drop: bool) -> Ctl {
        Ctl {
            sock,
            purge_on_drop,
        }
    }
}

impl std::ops::Deref for Ctl {
    type Target = UnixStream;
    fn deref(&self) -> &UnixStream {
        &self.sock
    }
}

impl AsFd for Ctl {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl Drop for Ctl {
    fn drop(&mut self) {
        if self.purge_on_drop {
            notify::purge(&self.sock);
        }
    }
}

/// The most doorbell rings a client may have saved up (see `ServerLink::ring_allowance`):
/// the router drains the doorbell at every wake-up, so a well-behaved client's rings
/// waiting at once are a few.
const MAX_RING_ALLOWANCE: u64 = 1024;

/// The ring this end reads.
type Inbound = Consumer<Arc<Region>>;
/// The ring this end writes.
type Outbound = Producer<Arc<Region>>;

/// What both link ends hold: the handshake socket and the inbound and outbound rings.
#[derive(Debug)]
struct Ends {
    /// The handshake socket, kept open: the doorbell both ways (`notify.rs`), and its
    /// end of stream is the peer's.
    ctl: Ctl,
    rx: Inbound,
    tx: Outbound,
}

impl Ends {
    /// Copies what fits into the outbound ring and rings the peer if it sleeps;
    /// `WouldBlock` when full.
    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.tx.write(buf).map_err(corrupt)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if self.tx.wake_needed() {
            notify::ring(&self.ctl);
        }
        Ok(n)
    }
}

impl ServerLink {
    /// The process that connected, when the kernel could say.
    pub fn peer(&self) -> Option<PeerProcess> {
        self.peer
    }

    /// The handshake socket, to register for readability: the client rang the doorbell,
    /// or its end of stream (death or goodbye).
    pub fn ctl_fd(&self) -> RawFd {
        self.ends.ctl.as_raw_fd()
    }

    /// The handshake socket had an event: the next read that finds the ring empty
    /// drains the doorbell and checks for end of stream.
    pub fn hint_ctl_event(&mut self) {
        self.check_ctl = true;
    }

    /// A handshake-socket event has not been looked at yet (a read that finds the ring
    /// empty does): the caller reads again even if the ring does not move.
    pub fn ctl_pending(&self) -> bool {
        self.check_ctl
    }

    /// The index the client publishes its writes with, to watch without going through
    /// this link: it changes whenever the client writes (or scribbles on it, which the
    /// next read reports). For a loop that looks at many clients' rings every turn.
    pub fn input_watch(&self) -> WatchedWord {
        WatchedWord::new(self.ends.rx.mem().clone(), self.ends.rx.layout().tail)
    }

    /// Whether the client's ring has room (or is broken, which a write reports).
    pub fn has_room(&mut self) -> bool {
        !matches!(self.ends.tx.free(), Ok(0))
    }

    /// Announces that the router is about to sleep; true if bytes arrived meanwhile
    /// (then it must not sleep). A broken ring counts as input: the read reports it.
    pub fn park(&self) -> bool {
        let allowed = self.ring_allowance.get() + 1;
        self.ring_allowance.set(allowed.min(MAX_RING_ALLOWANCE));
        self.ends.rx.park().unwrap_or(true)
    }

    /// Withdraws [`ServerLink::park`].
    pub fn unpark(&self) {
        self.ends.rx.unpark();
    }

    /// Ends our side: the client sees end of stream once it has read the ring.
    pub fn shutdown(&self) {
        let _ = self.ends.ctl.shutdown(std::net::Shutdown::Both);
    }
}

impl ServerLink {
    /// At the client's first bytes (our client library has populated its side by
    /// then): hands the mapping to the prefault helper, once, never waiting.
    #[cold]
    fn start_prefault(&mut self) {
        if let Some(helper) = self.prefault.take() {
            helper.submit(prefault::Job::new(self.ends.rx.mem().clone()));
        }
    }
}

impl io::Read for ServerLink {
    /// Copies waiting bytes out of the client's ring. `Ok(0)` only at the client's end
    /// of stream with the ring empty; `WouldBlock` when empty; `InvalidData` when the
    /// client corrupted its ring's index.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.ends.rx.read(buf).map_err(corrupt)?;
        if n > 0 || buf.is_empty() {
            if n > 0 && self.prefault.is_some() {
                self.start_prefault();
            }
            return Ok(n);
        }
        if self.check_ctl && !self.eof {
            // The ring is empty: take the doorbell's rings (the scan, not the bytes,
            // says what to read) and look for the end of stream. Never waits, whatever
            // the client did to its end of the socket.
            let mut rings = 0;
            let drained = notify::drain(&self.ends.ctl, Until::Empty, &mut rings);
            if let Drained::Descriptors(n) = drained {
                // Only a kernel without SO_PASSRIGHTS lets them through (closer.rs).
                let text = if n > 0 {
                    format!(
                        "the client passed {n} file descriptor(s) over its handshake \
                         socket (closed unused, off the event loop)"
                    )
                } else {
                    "the client passed file descriptors over its handshake socket that \
                     the router's full descriptor table could not take (the kernel \
                     closed them)"
                        .to_owned()
                };
                return Err(io::Error::new(io::ErrorKind::InvalidData, text));
            }
            let allowed = self.ring_allowance.get();
            if rings > allowed {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the client rang the router's doorbell {rings} times with {allowed} \
                         ring(s) owed (one per sleep the router announced): flooding its \
                         handshake socket"
                    ),
                ));
            }
            self.ring_allowance.set(allowed - rings);
            match drained {
                Drained::Empty => self.check_ctl = false,
                Drained::More | Drained::Descriptors(_) => {}
                Drained::Eof => {
                    self.eof = true;
                    // Bytes the client wrote just before it went, after our look above.
                    return self.ends.rx.read(buf).map_err(corrupt);
                }
            }
        }
        if self.eof {
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl io::Write for ServerLink {
    /// Copies what fits into the client's ring; rings the client's doorbell if it
    /// sleeps. `WouldBlock` when full.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.ends.send(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The client's end of its mapping.
#[derive(Debug)]
pub struct ClientLink {
    ends: Ends,
    /// Empty reads since the last look at the socket (a busy-polling client looks for
    /// the router's end of stream once per `EOF_CHECK_EVERY` empty reads).
    empty_reads: u32,
    /// Sends since the last look at the socket: a client that only publishes never
    /// reads, and a dead router would otherwise show only when the ring is full (at a
    /// slow rate, after minutes), every message in between lost.
    sends: u32,
    /// The socket may hold doorbell rings (or the end of stream): drain it before the
    /// next sleep, when no input is waiting (off the message's path).
    ctl_pending: bool,
    eof: bool,
}

/// See [`ClientLink::empty_reads`].
const EOF_CHECK_EVERY: u32 = 4096;
/// See [`ClientLink::sends`]: one `recv(2)` per this many sends (~1 ns a send).
const SEND_EOF_CHECK_EVERY: u32 = 512;
/// While waiting for room in the outbound ring (the router wakes nobody for that),
/// look again this often.
const ROOM_POLL: Duration = Duration::from_micros(200);

/// What [`ClientLink::wait`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ready {
    /// Bytes (or the router's end of stream) to read.
    pub input: bool,
    /// Room to write.
    pub output: bool,
}

impl ClientLink {
    /// Connects to the router's handshake socket at `path` and maps the ring pair it
    /// hands over; fails after `timeout`.
    /// In the default directory (`/dev/shm`, a NAME without `/`), the listener must run
    /// as the caller's user or root (an error otherwise, naming the socket, its owner and
    /// what to do): anyone can create a socket there first.
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<ClientLink> {
        let ctl = UnixStream::connect(path)?;
        let (_, owner) = crate::raw::peer_credentials(&ctl)?;
        trust_listener(path, owner, rustix::process::getuid().as_raw())?;
        ctl.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut hello = [0u8; layout::HELLO_LEN];
        // Room for more descriptors than the one expected, so that a peer sending more
        // is recognised (and its descriptors closed) rather than cut short.
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                &ctl,
                &mut [IoSliceMut::new(&mut hello)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(Errno::INTR) => continue,
                Err(Errno::WOULDBLOCK) => return Err(io::ErrorKind::TimedOut.into()),
                r => break r?,
            }
        };
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(1);
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = msg {
                fds.extend(rights);
            }
        }
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        if got.bytes == 0 && fds.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the router closed the handshake without handing over a mapping (it may \
                 be out of file descriptors or memory: its log says which)",
            ));
        }
        if got.bytes != hello.len() || fds.len() != 1 {
            return Err(bad(
                "not a tickwire shared-memory handshake of this version \
                 (the router and the client must be the same tickwire release)",
            ));
        }
        let header = Header::from_bytes(&hello).ok_or_else(|| {
            bad("bad shared-memory header (the router and the client must be the same tickwire release)")
        })?;
        let Some(memfd) = fds.pop() else {
            return Err(bad("missing descriptors"));
        };
        let file = File::from(memfd);
        // Sealed against resizing, as our router seals it: a memfd the sender can still
        // shrink would take the pages from under our mapping (SIGBUS on the next
        // access; a hostile-input probe's fake router did that).
        let seals = rustix::fs::fcntl_get_seals(&file)
            .map_err(|_| bad("the router's shared memory is not a memfd (no seals)"))?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL) {
            return Err(bad(
                "the router's shared memory is not sealed against resizing: refused \
                 (a tickwire router seals it; another process in its place could take \
                 the pages from under the mapping)",
            ));
        }
        if file.metadata()?.len() != layout::mapping_len(header.cap) as u64 {
            return Err(bad("shared-memory mapping of the wrong size"));
        }
        let region = Arc::new(Region::map_populated(&file)?);
        if layout::read_header(&*region) != Some(header) {
            return Err(bad("shared-memory header does not match the handshake"));
        }
        ctl.set_nonblocking(true)?;
        // Nothing more is to come with descriptors: refused where the kernel can
        // (elsewhere a drain closes them off this thread and ends the link).
        let _ = crate::raw::refuse_passed_descriptors(&ctl);
        Ok(ClientLink {
            ends: Ends {
                ctl: Ctl::new(ctl, false),
                rx: Consumer::new(region.clone(), header.router_to_client()),
                tx: Producer::new(region, header.client_to_router()),
            },
            empty_reads: 0,
            sends: 0,
            ctl_pending: false,
            eof: false,
        })
    }

    /// Copies what fits into the router's ring; rings the router if it sleeps.
    /// `WouldBlock` when full.
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.eof {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let sent = self.ends.send(buf)?;
        // After the copy, off this message's path: a router found gone fails the next
        // send.
        self.sends += 1;
        if self.sends >= SEND_EOF_CHECK_EVERY {
            self.sends = 0;
            self.peek_eof()?;
        }
        Ok(sent)
    }

    /// Looks at the handshake socket for the router's end of stream at the next
    /// [`ClientLink::recv`] or [`ClientLink::has_input`] that finds the ring empty,
    /// rather than after `EOF_CHECK_EVERY` of them: for a client that publishes at a
    /// slow pace and polls now and then (one `recv(2)` then).
    pub fn look_for_eof(&mut self) {
        self.empty_reads = EOF_CHECK_EVERY - 1;
    }

    /// Copies waiting bytes out. `Ok(0)` at the router's end of stream (ring empty),
    /// `WouldBlock` when empty.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.ends.rx.read(buf).map_err(corrupt)?;
        if n > 0 || buf.is_empty() {
            self.empty_reads = 0;
            return Ok(n);
        }
        if self.eof {
            return Ok(0);
        }
        self.empty_reads += 1;
        if self.empty_reads >= EOF_CHECK_EVERY {
            self.empty_reads = 0;
            if self.peek_eof()? {
                return self.recv(buf);
            }
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Whether [`ClientLink::recv`] would return something (bytes, end of stream or an
    /// error) without copying: false on an empty ring. An empty answer counts as an
    /// empty read, so a client that polls with this alone still notices the router's
    /// end of stream.
    pub fn has_input(&mut self) -> io::Result<bool> {
        if self.eof || !matches!(self.ends.rx.available(), Ok(0)) {
            return Ok(true);
        }
        self.empty_reads += 1;
        if self.empty_reads >= EOF_CHECK_EVERY {
            self.empty_reads = 0;
            return self.peek_eof();
        }
        Ok(false)
    }

    /// Waits up to `timeout` (`None`: forever) for input (`want_input`) or room
    /// (`want_output`). Sleeps in `poll(2)` on the socket (the doorbell, and the
    /// router's end of stream) after announcing it (wake protocol); room is looked for
    /// every 200 µs.
    pub fn wait(
        &mut self,
        want_input: bool,
        want_output: bool,
        timeout: Option<Duration>,
    ) -> io::Result<Ready> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let ready = Ready {
                input: want_input && (self.eof || !matches!(self.ends.rx.available(), Ok(0))),
                output: want_output && !matches!(self.ends.tx.free(), Ok(0)),
            };
            if ready.input || ready.output {
                return Ok(ready);
            }
            if self.ctl_pending {
                // Rings taken before the next announcement: a ring left in the socket
                // would end every later poll at once.
                self.drain_ctl();
                if self.eof {
                    continue;
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(Ready::default());
            }
            let mut nap = left;
            if want_output {
                nap = Some(nap.map_or(ROOM_POLL, |l| l.min(ROOM_POLL)));
            }
            if want_input && self.ends.rx.park().unwrap_or(true) {
                continue;
            }
            let spec = nap.and_then(|n| Timespec::try_from(n).ok());
            let mut fds = [PollFd::new(&self.ends.ctl, PollFlags::IN)];
            let polled = rustix::event::poll(&mut fds, spec.as_ref());
            self.ends.rx.unpark();
            match polled {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            // Rung (or the end of stream): drained before the next sleep, after the
            // ring has been looked at.
            if !fds[0].revents().is_empty() {
                self.ctl_pending = true;
            }
        }
    }

    /// Ends our side: the router sees end of stream once it has read the ring.
    pub fn shutdown(&mut self) {
        let _ = self.ends.ctl.shutdown(std::net::Shutdown::Both);
    }

    /// The client's doorbell, the handshake socket (readable when the router rang it,
    /// or at its end of stream), for waiting on several connections at once: announce
    /// the sleep with [`ClientLink::begin_sleep`] first (the router rings only a client
    /// that did), withdraw it with [`ClientLink::end_sleep`] after.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.ends.ctl.as_fd()
    }

    /// Announces that the caller is about to sleep on [`ClientLink::wake_fd`] (with
    /// others, in one `poll(2)`), after taking earlier rings off it. False when input
    /// (or the router's end of stream) is already there: then do not sleep. A broken
    /// ring counts as input (the read reports it).
    pub fn begin_sleep(&mut self) -> bool {
        if self.ctl_pending {
            self.drain_ctl();
        }
        !self.eof && !self.ends.rx.park().unwrap_or(true)
    }

    /// Withdraws [`ClientLink::begin_sleep`] after the `poll(2)`; the doorbell, if the
    /// router rang it, is drained before the next sleep.
    pub fn end_sleep(&mut self) {
        self.ends.rx.unpark();
        self.ctl_pending = true;
    }

    /// Test support: writes `bytes` doorbell bytes to the router at once, as a hostile
    /// client could (ours rings once per announced sleep). Returns the bytes written.
    #[doc(hidden)]
    pub fn debug_flood_doorbell(&self, bytes: usize) -> usize {
        let chunk = [1u8; 4096];
        let mut sent = 0;
        while sent < bytes {
            let n = chunk.len().min(bytes - sent);
            match rustix::net::send(
                &self.ends.ctl,
                &chunk[..n],
                rustix::net::SendFlags::DONTWAIT,
            ) {
                Ok(k) => sent += k,
                Err(_) => break,
            }
        }
        sent
    }

    /// Test support: overwrites the published index of the client→router ring, as a
    /// hostile or broken client could.
    #[doc(hidden)]
    pub fn debug_store_tail(&self, tail: u64) {
        self.ends.tx.debug_store_tail(tail);
    }

    /// Test support: overwrites the published index of the router→client ring's
    /// reader, as a hostile or broken client could.
    #[doc(hidden)]
    pub fn debug_store_head(&self, head: u64) {
        self.ends.rx.debug_store_head(head);
    }

    /// Looks for the router's end of stream, taking doorbell rings off the socket (a
    /// ring left there would hide the end of stream behind it).
    fn peek_eof(&mut self) -> io::Result<bool> {
        self.drain_ctl();
        Ok(self.eof)
    }

    /// Drains the socket's doorbell rings without waiting; notes the end of stream.
    fn drain_ctl(&mut self) {
        // The router's rings are not counted: a router that floods costs its own clients
        // a `recv` per wake-up, bounded by `MAX_DRAIN_READS`.
        match notify::drain(&self.ends.ctl, Until::ShortRead, &mut 0) {
            Drained::Empty => self.ctl_pending = false,
            Drained::More => {}
            // A router passing descriptors is not one of ours: the link is over.
            Drained::Eof | Drained::Descriptors(_) => {
                self.eof = true;
                self.ctl_pending = false;
            }
        }
    }
}

fn corrupt(c: Corrupt) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP connection with unsent bytes and `SO_LINGER` of 30 s (its peer never
    /// accepted, never reads): the last close of it waits up to 30 s. The listener must
    /// outlive the test (dropped, it resets the connection).
    fn lingering_socket() -> (std::net::TcpListener, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        s.set_nonblocking(true).unwrap();
        let chunk = [0u8; 65536];
        for _ in 0..10_000 {
            if std::io::Write::write(&mut &s, &chunk).is_err() {
                break;
            }
        }
        rustix::net::sockopt::set_socket_linger(&s, Some(Duration::from_secs(30))).unwrap();
        (l, s)
    }

    /// Sends one doorbell byte with `fd` attached over `ctl`.
    fn pass(ctl: &UnixStream, fd: BorrowedFd<'_>) -> rustix::io::Result<usize> {
        let fds = [fd];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            ctl,
            &[io::IoSlice::new(&[1])],
            &mut control,
            SendFlags::DONTWAIT,
        )
    }

    fn linked(l: &Listener, path: &Path) -> (ServerLink, ClientLink) {
        let p = path.to_owned();
        let client = std::thread::spawn(move || ClientLink::connect(&p, Duration::from_secs(5)));
        let server = (0..1000)
            .find_map(|_| {
                let s = l.accept().unwrap();
                if s.is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                s
            })
            .expect("no client");
        (server, client.join().unwrap().unwrap())
    }

    /// Hostile-input pass: a client passed the router a TCP socket with unsent bytes
    /// and SO_LINGER set; the router's drain dropped it, and its release (the last
    /// close) waited out the linger on the event loop: every client frozen for as long
    /// as the client chose. A kernel with SO_PASSRIGHTS (6.16) refuses the descriptor
    /// at the client's sendmsg.
    #[test]
    fn a_kernel_with_so_passrights_refuses_a_clients_descriptors() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap();
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap();
        let path = socket_path(&format!("passrights-{}", std::process::id()));
        let l = Listener::bind(&path, 4096).unwrap();
        if (major, minor) >= (6, 16) {
            assert!(l.refuses_descriptors(), "{release}");
        }
        if !l.refuses_descriptors() {
            // Older kernels: `a_passed_descriptor_never_blocks_the_routers_thread`.
            return;
        }
        let (_server, client) = linked(&l, &path);
        let (_keep, sock) = lingering_socket();
        assert_eq!(pass(&client.ends.ctl, sock.as_fd()), Err(Errno::PERM));
        // Ours to close, here: without its linger.
        rustix::net::sockopt::set_socket_linger(&sock, None).unwrap();
    }

    /// What a kernel without SO_PASSRIGHTS does (the option turned back on here): a
    /// descriptor the client passes is taken with its doorbell byte, closed on the
    /// closer thread, and the client reported; one still queued when the router drops
    /// the link is released on the closer thread too. The router's calls return at once
    /// (the descriptor's last close would wait its 30-s linger).
    #[test]
    fn a_passed_descriptor_never_blocks_the_routers_thread() {
        let path = socket_path(&format!("passfd-{}", std::process::id()));
        let mut l = Listener::bind(&path, 4096).unwrap();
        crate::raw::set_pass_rights(&l.sock, true).unwrap();
        l.refuses_descriptors = false;
        let (keep, sock) = lingering_socket();

        let (mut server, client) = linked(&l, &path);
        assert_eq!(pass(&client.ends.ctl, sock.as_fd()), Ok(1));
        server.hint_ctl_event();
        let t = std::time::Instant::now();
        let e = io::Read::read(&mut server, &mut [0u8; 64]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("passed 1 file descriptor"), "{e}");
        drop(server);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

        // Never read: released with the socket, on the closer thread.
        let (server, client) = linked(&l, &path);
        assert_eq!(pass(&client.ends.ctl, sock.as_fd()), Ok(1));
        drop(sock);
        let t = std::time::Instant::now();
        drop(server);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

        // The closer thread now waits out that socket's linger: once more than
        // STUCK_AT descriptors wait behind it, no client is accepted (fail closed),
        // and the one waiting is taken once it is free.
        assert!(!l.paused());
        for _ in 0..=crate::closer::STUCK_AT {
            crate::closer::close_later(File::open("/dev/null").unwrap().into());
        }
        // Stuck once it has closed nothing for a second.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !l.paused() {
            assert!(Instant::now() < deadline, "never taken as stuck");
            std::thread::sleep(Duration::from_millis(20));
        }
        let p = path.clone();
        let waiting = std::thread::spawn(move || ClientLink::connect(&p, Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            l.accept().unwrap().is_none(),
            "accepted while the closer is stuck"
        );
        // The lingering socket's peer resets it: its close, and the closer, end.
        drop(keep);
        let deadline = Instant::now() + Duration::from_secs(20);
        let server = loop {
            if let Some(s) = l.accept().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "never accepted after the closer freed"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(!l.paused());
        waiting.join().unwrap().unwrap();
        drop(server);
    }

    /// In /dev/shm only the client's own user and root are trusted; elsewhere the
    /// directory is the protection and any owner is accepted.
    #[test]
    fn a_listener_in_the_default_directory_must_be_ours_or_roots() {
        let default = socket_path("md");
        assert!(trust_listener(&default, 1000, 1000).is_ok());
        assert!(trust_listener(&default, 0, 1000).is_ok());
        let Err(e) = trust_listener(&default, 1001, 1000) else {
            panic!("another user's socket trusted");
        };
        let text = e.to_string();
        for part in ["/dev/shm/tickwire-md.sock", "uid 1001", "uid 1000", "rm "] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        // root as the client: only root's own sockets, and the text says so.
        let Err(e) = trust_listener(&default, 1001, 0) else {
            panic!("another user's socket trusted by root");
        };
        let text = e.to_string();
        assert!(text.contains("not by you (root),"), "{text}");
        // An administrator's directory (NAME with a '/').
        assert!(trust_listener(Path::new("/run/tickwire/md.sock"), 1001, 1000).is_ok());
        assert!(trust_listener(Path::new("/dev/shm/sub/md.sock"), 1001, 1000).is_ok());
    }

    /// Hostile-input probe (a fake router): the client mapped a memfd its sender could
    /// still shrink, and a `ftruncate` after the handshake killed it with SIGBUS. A
    /// memfd not sealed against resizing is refused before it is mapped.
    #[test]
    fn a_client_refuses_a_mapping_not_sealed_against_resizing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fake.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let fake = std::thread::spawn(move || {
            let (ctl, _) = listener.accept().unwrap();
            let cap = 1 << 16;
            let memfd = rustix::fs::memfd_create("fake", MemfdFlags::CLOEXEC).unwrap();
            let file = File::from(memfd);
            file.set_len(layout::mapping_len(cap) as u64).unwrap();
            let region = Region::map(&file).unwrap();
            let header = Header::new(cap);
            layout::write_header(&region, header);
            let hello = header.to_bytes();
            let fds = [file.as_fd()];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fds));
            rustix::net::sendmsg(
                &ctl,
                &[io::IoSlice::new(&hello)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
            .unwrap();
            // Held until the client has looked (and gone).
            let mut b = [0u8; 1];
            let _ = std::io::Read::read(&mut &ctl, &mut b);
        });
        let Err(e) = ClientLink::connect(&path, Duration::from_secs(5)) else {
            panic!("an unsealed mapping was accepted");
        };
        assert!(e.to_string().contains("not sealed against resizing"), "{e}");
        fake.join().unwrap();
    }
}
