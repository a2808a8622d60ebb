//! The client's byte stream: a non-blocking TCP socket, TLS over one (`tls://HOST:PORT`,
//! docs/security.md) or a shared-memory ring pair (`shm:NAME`, docs/shm.md). All read
//! and write like a non-blocking socket, so the client's session, buffers and error
//! handling are one code path.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::SendFlags;
use tickwire_shm::ClientLink;

#[derive(Debug)]
pub(crate) enum Transport {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Shm(Box<ClientLink>),
}

/// A TLS connection and its socket.
#[derive(Debug)]
pub(crate) struct TlsStream {
    pub(crate) sock: TcpStream,
    pub(crate) io: tickwire_tls::TlsIo,
}

impl Transport {
    /// Writes what the transport takes now (`WOULDBLOCK` when nothing fits).
    pub(crate) fn send(&mut self, buf: &[u8]) -> Result<usize, Errno> {
        match self {
            Transport::Tcp(s) => rustix::net::send(&*s, buf, SendFlags::NOSIGNAL),
            Transport::Tls(t) => t.io.write(&mut &t.sock, buf).map_err(|e| to_errno(&e)),
            Transport::Shm(l) => l.send(buf).map_err(|e| to_errno(&e)),
        }
    }

    /// Reads what is there (`Ok(0)` at end of stream, `WouldBlock` when nothing is).
    pub(crate) fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Tcp(s) => s.read(buf),
            Transport::Tls(t) => t.io.read(&mut &t.sock, buf),
            Transport::Shm(l) => l.recv(buf),
        }
    }

    /// Waits up to `timeout` (`None`: forever) for `events` (IN and/or OUT); `Ok(0)`
    /// flags when the time ran out.
    pub(crate) fn wait(
        &mut self,
        events: PollFlags,
        timeout: Option<Duration>,
    ) -> Result<PollFlags, Errno> {
        match self {
            Transport::Tcp(s) => poll_one(s, events, timeout),
            Transport::Tls(t) => {
                if events.contains(PollFlags::IN) && t.io.has_buffered_input() {
                    return Ok(PollFlags::IN);
                }
                // Records the socket did not take yet go out while we wait.
                let queued = t.io.wants_write();
                let asked = if queued {
                    events | PollFlags::OUT
                } else {
                    events
                };
                let ready = poll_one(&t.sock, asked, timeout)?;
                if queued && ready.contains(PollFlags::OUT) {
                    t.io.flush_tls(&mut &t.sock).map_err(|e| to_errno(&e))?;
                    if !events.contains(PollFlags::OUT) {
                        return Ok(ready - PollFlags::OUT);
                    }
                }
                Ok(ready)
            }
            Transport::Shm(l) => {
                let ready = l
                    .wait(
                        events.contains(PollFlags::IN),
                        events.contains(PollFlags::OUT),
                        timeout,
                    )
                    .map_err(|e| to_errno(&e))?;
                let mut flags = PollFlags::empty();
                if ready.input {
                    flags |= PollFlags::IN;
                }
                if ready.output {
                    flags |= PollFlags::OUT;
                }
                Ok(flags)
            }
        }
    }

    /// Ends both directions (the router sees end of stream).
    pub(crate) fn shutdown(&mut self) {
        match self {
            Transport::Tcp(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            Transport::Tls(t) => {
                t.io.send_close_notify();
                let _ = t.io.flush_tls(&mut &t.sock);
                let _ = t.sock.shutdown(std::net::Shutdown::Both);
            }
            Transport::Shm(l) => l.shutdown(),
        }
    }

    /// What to `poll(2)` on: the socket, or the shared-memory doorbell (which the
    /// router rings only after [`crate::Client`] announced a sleep: see
    /// [`crate::Client`]'s `AsFd` docs).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Transport::Tcp(s) => s.as_fd(),
            Transport::Tls(t) => t.sock.as_fd(),
            Transport::Shm(l) => l.wake_fd(),
        }
    }

    /// Before a `poll(2)` on [`Transport::fd`] with other connections: false when input
    /// is already there (do not sleep). Shared memory announces the sleep, so the
    /// router rings the doorbell.
    pub(crate) fn begin_sleep(&mut self) -> bool {
        match self {
            Transport::Tcp(_) => true,
            Transport::Tls(t) => !t.io.has_buffered_input(),
            Transport::Shm(l) => l.begin_sleep(),
        }
    }

    /// After that `poll(2)`: withdraws what [`Transport::begin_sleep`] announced.
    pub(crate) fn end_sleep(&mut self) {
        if let Transport::Shm(l) = self {
            l.end_sleep();
        }
    }

    /// Bytes accepted by [`Transport::send`] still wait below it (TLS records the
    /// socket has not taken): a flush is not complete yet.
    pub(crate) fn pending_below(&self) -> bool {
        matches!(self, Transport::Tls(t) if t.io.wants_write())
    }
}

fn poll_one(
    fd: &impl AsFd,
    events: PollFlags,
    timeout: Option<Duration>,
) -> Result<PollFlags, Errno> {
    let spec = timeout.and_then(|t| Timespec::try_from(t).ok());
    let mut fds = [PollFd::new(fd, events)];
    match rustix::event::poll(&mut fds, spec.as_ref())? {
        0 => Ok(PollFlags::empty()),
        _ => Ok(fds[0].revents()),
    }
}

fn to_errno(e: &io::Error) -> Errno {
    match e.kind() {
        io::ErrorKind::WouldBlock => Errno::WOULDBLOCK,
        io::ErrorKind::BrokenPipe => Errno::PIPE,
        io::ErrorKind::InvalidData => Errno::PROTO,
        _ => Errno::from_io_error(e).unwrap_or(Errno::IO),
    }
}
