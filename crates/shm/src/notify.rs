//! The doorbell: the connection's own Unix stream socket (the handshake socket, which
//! stays open). A side rings the other by sending it one byte, only when the other has
//! announced that it sleeps (`ring.rs`, wake protocol); the sleeper's `poll`/`epoll`
//! sees the socket readable, and it drains the bytes after waking.
//!
//! Why the socket and not an eventfd: an eventfd passed by `SCM_RIGHTS` shares its open
//! file description, flags included, with the peer, which could clear `O_NONBLOCK` with
//! `fcntl(F_SETFL)` and make our next write (a full counter) or read (an empty one) block
//! the router's event loop forever, or drain a doorbell shared by every client and steal
//! the others' wake-ups. The two ends of a socket are two file descriptions: nothing
//! the peer does to its end changes ours, and `MSG_DONTWAIT` makes each of our calls
//! non-blocking by itself, whatever any file status flag says. Each client has its own
//! socket, so no descriptor is shared between clients either.

use std::os::unix::net::UnixStream;

use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};

/// Most `recv` calls one [`drain`] makes (of [`DRAIN_CHUNK`] bytes each): a peer that
/// floods its socket costs a bounded amount per call, and the caller drains again later.
const MAX_DRAIN_READS: usize = 16;
/// Bytes one drain `recv` takes.
const DRAIN_CHUNK: usize = 256;

/// Rings the peer: one byte, never waiting. One syscall.
pub(crate) fn ring(sock: &UnixStream) {
    // EAGAIN: the peer's receive buffer is full of rings it has not drained yet, so its
    // poll already reports the socket readable: it is woken anyway. EPIPE/ECONNRESET:
    // the peer is gone; the end of stream tells each side, not this call.
    let _ = rustix::net::send(sock, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
}

/// What [`drain`] found on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Nothing more to read now (rings, if any, were taken).
    Empty,
    /// Bytes still wait: the bound of one drain was reached; drain again.
    More,
    /// The peer's end of stream (it closed, shut down or died), or a broken socket.
    Eof,
}

/// How far [`drain`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// To `EAGAIN` (or the end of stream): for an edge-triggered waiter (the router's
    /// epoll), which hears of an end of stream that follows rings only once: a read
    /// that took the rings and stopped would leave it unseen for good.
    Empty,
    /// To the first read that takes less than it offered (a stream socket's read takes
    /// all that waits): one syscall per wake-up, for a level-triggered waiter (the
    /// client's `poll`), which sees a later end of stream on its next `poll` anyway.
    ShortRead,
}

/// Takes every doorbell ring waiting on the socket without ever waiting
/// (`MSG_DONTWAIT`), at most [`MAX_DRAIN_READS`] reads; adds the rings taken to `rings`.
pub(crate) fn drain(sock: &UnixStream, until: Until, rings: &mut u64) -> Drained {
    let mut buf = [0u8; DRAIN_CHUNK];
    for _ in 0..MAX_DRAIN_READS {
        match rustix::net::recv(sock, &mut buf, RecvFlags::DONTWAIT) {
            Ok((0, _)) => return Drained::Eof,
            Ok((n, _)) if n < DRAIN_CHUNK && until == Until::ShortRead => {
                *rings += n as u64;
                return Drained::Empty;
            }
            Ok((n, _)) => *rings += n as u64,
            Err(Errno::INTR) => continue,
            Err(Errno::WOULDBLOCK) => return Drained::Empty,
            // ECONNRESET and anything else: the connection is over.
            Err(_) => return Drained::Eof,
        }
    }
    Drained::More
}
