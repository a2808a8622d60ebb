//! Closing descriptors a client may have put something behind, off the caller's thread.
//!
//! A Unix socket carries descriptors (`SCM_RIGHTS`), and the last `close` of a file runs
//! its release on the thread that made the call, on its way back from the kernel. A
//! client that passes the router a TCP socket with unsent data and `SO_LINGER` set (or a
//! FUSE file, a terminal) makes that release wait: seconds, or for good. A descriptor
//! received on a handshake socket, and the handshake socket itself (descriptors still
//! queued in it are released with it), are therefore handed to this thread
//! (`tickwire-shm-closer`) to close; the caller only sends it over a channel (docs/shm.md,
//! "Descriptors").
//!
//! Where the kernel can refuse them outright (`SO_PASSRIGHTS`, Linux 6.16), nothing a
//! client does can queue a descriptor, and the thread only ever closes plain sockets.
//! Before that, a client that passes one is disconnected at once, and a release that
//! hangs holds this thread, never the router's event loop; what is handed over later
//! then stays open until it ends. Once more than [`STUCK_AT`] wait and none was closed
//! for [`STUCK_AFTER`], the listener accepts
//! no client until they are closed (fail closed: a stuck closer must not let clients
//! fill the router's descriptor table, where a full table would make the kernel release
//! what they pass on the caller's thread after all, `MSG_CTRUNC`).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The closer thread's queue, started at first use; `None` if it could not start.
static CLOSER: OnceLock<Option<Sender<OwnedFd>>> = OnceLock::new();

/// Descriptors handed to the closer thread and not closed yet.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// When the closer thread last finished a close (nanoseconds since `EPOCH`), or was
/// handed its first descriptor.
static PROGRESS_NS: AtomicU64 = AtomicU64::new(0);

/// The clock of [`PROGRESS_NS`].
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// How long the closer thread must have closed nothing, with more than [`STUCK_AT`]
/// waiting, to count as stuck: a client passing many descriptors at once (up to 253 in
/// one message) only makes it busy for a moment (review: a count alone paused accepting
/// and logged an ERROR for each such client).
const STUCK_AFTER: Duration = Duration::from_secs(1);

fn now_ns() -> u64 {
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Descriptors waiting for the closer thread beyond which it is taken to be stuck on a
/// release that hangs: the listener then stops accepting clients until it is free
/// (`Listener::accept`), so that no more descriptors pile up in the router's table.
pub(crate) const STUCK_AT: usize = 64;

/// Whether the closer thread is behind by more than [`STUCK_AT`] descriptors and has
/// closed none for [`STUCK_AFTER`].
pub(crate) fn stuck() -> bool {
    WAITING.load(Ordering::Relaxed) > STUCK_AT
        && now_ns().saturating_sub(PROGRESS_NS.load(Ordering::Relaxed))
            >= u64::try_from(STUCK_AFTER.as_nanos()).unwrap_or(u64::MAX)
}

/// Closes `fd` on the closer thread (on this one if that thread could not start).
pub(crate) fn close_later(fd: OwnedFd) {
    let closer = CLOSER.get_or_init(|| {
        let (tx, rx) = channel::<OwnedFd>();
        std::thread::Builder::new()
            .name("tickwire-shm-closer".into())
            .spawn(move || {
                for fd in rx {
                    drop(fd);
                    WAITING.fetch_sub(1, Ordering::Relaxed);
                    PROGRESS_NS.store(now_ns(), Ordering::Relaxed);
                }
            })
            .ok()
            .map(|_| tx)
    });
    match closer {
        Some(tx) => {
            if WAITING.fetch_add(1, Ordering::Relaxed) == 0 {
                // Idle until now: its time to make progress starts here.
                PROGRESS_NS.store(now_ns(), Ordering::Relaxed);
            }
            if let Err(e) = tx.send(fd) {
                // The thread is gone: closed here, as a last resort.
                WAITING.fetch_sub(1, Ordering::Relaxed);
                drop(e.0);
            }
        }
        None => drop(fd),
    }
}
