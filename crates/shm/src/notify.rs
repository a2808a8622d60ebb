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

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::unix::net::UnixStream;

use rustix::io::Errno;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendFlags};

/// Most `recv` calls one [`drain`] makes (of [`DRAIN_CHUNK`] bytes each): a peer that
/// floods its socket costs a bounded amount per call, and the caller drains again later.
const MAX_DRAIN_READS: usize = 16;
/// Bytes one drain `recv` takes.
const DRAIN_CHUNK: usize = 256;
/// Descriptors one message can carry (the kernel's `SCM_MAX_FD`): the control buffer
/// of a drain holds them all, since any it had no room for the kernel would close on
/// this thread (`closer.rs`).
const MAX_PASSED_FDS: usize = 253;

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
    /// The peer passed this many descriptors (`SCM_RIGHTS`), which no tickwire peer
    /// does after the handshake: they were handed to the closer thread unused, and the
    /// connection is to be dropped (0: some came that our full descriptor table could
    /// not take, `MSG_CTRUNC`). Only on a kernel that cannot refuse them
    /// (`SO_PASSRIGHTS`, Linux 6.16).
    Descriptors(usize),
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
/// Descriptors passed along with the bytes are received (not left to the kernel to
/// close on this thread) and closed on the closer thread ([`Drained::Descriptors`]).
pub(crate) fn drain(sock: &UnixStream, until: Until, rings: &mut u64) -> Drained {
    let mut buf = [0u8; DRAIN_CHUNK];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
    for _ in 0..MAX_DRAIN_READS {
        let (got, passed, truncated) = recv_closing_fds(sock, &mut buf, &mut space);
        if passed > 0 || truncated {
            return Drained::Descriptors(passed);
        }
        match got {
            Ok(0) => return Drained::Eof,
            Ok(n) if n < DRAIN_CHUNK && until == Until::ShortRead => {
                *rings += n as u64;
                return Drained::Empty;
            }
            Ok(n) => *rings += n as u64,
            Err(Errno::INTR) => continue,
            Err(Errno::WOULDBLOCK) => return Drained::Empty,
            // ECONNRESET and anything else: the connection is over.
            Err(_) => return Drained::Eof,
        }
    }
    Drained::More
}

/// One `recvmsg` of `sock` into `buf`, never waiting, with room in `space` for the most
/// descriptors one message carries; every descriptor received goes to the closer thread
/// (never closed on this one). Returns the bytes read, how many descriptors came, and
/// whether some came that could not be taken (`MSG_CTRUNC`: our descriptor table full,
/// so the kernel released them itself, on this thread; hostile all the same).
fn recv_closing_fds(
    sock: &UnixStream,
    buf: &mut [u8],
    space: &mut [MaybeUninit<u8>],
) -> (rustix::io::Result<usize>, usize, bool) {
    let mut control = RecvAncillaryBuffer::new(space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    );
    let mut passed = 0;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for fd in fds {
                passed += 1;
                crate::closer::close_later(fd);
            }
        }
    }
    let truncated = got
        .as_ref()
        .is_ok_and(|m| m.flags.contains(ReturnFlags::CTRUNC));
    (got.map(|m| m.bytes), passed, truncated)
}

/// Most reads [`purge`] makes: a socket's queue is bounded by its sender's buffer
/// (`SO_SNDBUF`: at most `net.core.wmem_max` doubled for an unprivileged peer, 416 KiB
/// by default); this covers 256 MiB of it, at a few microseconds a read; a queue it
/// does not empty is left to the close.
const MAX_PURGE_READS: usize = 65_536;

/// Before the last close of `sock` on a kernel that let its peer pass descriptors:
/// shuts it down both ways (the peer's sends then fail, nothing more is queued) and
/// reads what is queued, never waiting, handing every descriptor to the closer thread,
/// so that the close releases nothing the peer chose (`closer.rs`).
pub(crate) fn purge(sock: &UnixStream) {
    let _ = sock.shutdown(std::net::Shutdown::Both);
    let mut buf = [0u8; 4096];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
    for _ in 0..MAX_PURGE_READS {
        match recv_closing_fds(sock, &mut buf, &mut space) {
            (Ok(n), passed, truncated) if n > 0 || passed > 0 || truncated => {}
            (Err(Errno::INTR), _, _) => {}
            // Empty (0 after the shutdown, or EAGAIN) or broken: nothing queued.
            _ => return,
        }
    }
}
