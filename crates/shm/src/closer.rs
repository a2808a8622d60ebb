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
//! then stays open until it ends.

use std::os::fd::OwnedFd;
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

/// The closer thread's queue, started at first use; `None` if it could not start.
static CLOSER: OnceLock<Option<Sender<OwnedFd>>> = OnceLock::new();

/// Closes `fd` on the closer thread (on this one if that thread could not start).
pub(crate) fn close_later(fd: OwnedFd) {
    let closer = CLOSER.get_or_init(|| {
        let (tx, rx) = channel::<OwnedFd>();
        std::thread::Builder::new()
            .name("tickwire-shm-closer".into())
            .spawn(move || {
                for fd in rx {
                    drop(fd);
                }
            })
            .ok()
            .map(|_| tx)
    });
    match closer {
        Some(tx) => {
            // Sent back when the thread is gone: closed here, as a last resort.
            let _ = tx.send(fd);
        }
        None => drop(fd),
    }
}
