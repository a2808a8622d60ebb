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

/// The TLS connection's socket as rustls reads and writes it: writes go out with
/// `MSG_NOSIGNAL`, as the plain TCP path's do, so that a router that closed the
/// connection gives the writer `EPIPE` instead of killing a process that did not
/// ignore `SIGPIPE` (Rust programs ignore it from `main`; a C or Python host may not).
struct NoSigPipe<'a>(&'a TcpStream);

impl io::Read for NoSigPipe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut &*self.0).read(buf)
    }
}

impl io::Write for NoSigPipe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        rustix::net::send(self.0, buf, SendFlags::NOSIGNAL).map_err(io::Error::from)
    }

    /// rustls hands its records over as several slices: one `sendmsg`, as `writev`
    /// would be, but with `MSG_NOSIGNAL`.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut no_control = rustix::net::SendAncillaryBuffer::default();
        rustix::net::sendmsg(self.0, bufs, &mut no_control, SendFlags::NOSIGNAL)
            .map_err(io::Error::from)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport {
    /// Writes what the transport takes now (`WOULDBLOCK` when nothing fits).
    pub(crate) fn send(&mut self, buf: &[u8]) -> Result<usize, Errno> {
        match self {
            Transport::Tcp(s) => rustix::net::send(&*s, buf, SendFlags::NOSIGNAL),
            Transport::Tls(t) => {
                t.io.write(&mut NoSigPipe(&t.sock), buf)
                    .map_err(|e| to_errno(&e))
            }
            Transport::Shm(l) => l.send(buf).map_err(|e| to_errno(&e)),
        }
    }

    /// Reads what is there (`Ok(0)` at end of stream, `WouldBlock` when nothing is).
    pub(crate) fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Tcp(s) => s.read(buf),
            Transport::Tls(t) => t.io.read(&mut NoSigPipe(&t.sock), buf),
            Transport::Shm(l) => l.recv(buf),
        }
    }

    /// Whether a read may find something: false only for a shared-memory ring that is
    /// empty (one load, no copy). TCP and TLS: true (only a read can tell).
    #[inline]
    pub(crate) fn may_have_input(&mut self) -> io::Result<bool> {
        match self {
            Transport::Shm(l) => l.has_input(),
            Transport::Tcp(_) | Transport::Tls(_) => Ok(true),
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
                    t.io.flush_tls(&mut NoSigPipe(&t.sock))
                        .map_err(|e| to_errno(&e))?;
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
                let _ = t.io.flush_tls(&mut NoSigPipe(&t.sock));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// The TLS path's socket wrapper moves bytes both ways (plain and vectored
    /// writes), and a write after the peer closed returns an error (EPIPE or
    /// ECONNRESET) to the caller. (That no SIGPIPE is raised cannot be seen from a Rust
    /// test, which ignores SIGPIPE from `main`; `strace` shows the writes as
    /// `sendmsg(..., MSG_NOSIGNAL)` where they were `writev`.)
    #[test]
    fn no_sigpipe_socket_reads_writes_and_reports_a_closed_peer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut theirs, _) = l.accept().unwrap();
        let mut s = NoSigPipe(&ours);
        assert_eq!(s.write(b"ping").unwrap(), 4);
        let parts = [io::IoSlice::new(b"one "), io::IoSlice::new(b"two")];
        assert_eq!(s.write_vectored(&parts).unwrap(), 7);
        let mut got = [0u8; 11];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pingone two");
        theirs.write_all(b"pong").unwrap();
        let mut back = [0u8; 4];
        let mut n = 0;
        while n < 4 {
            n += s.read(&mut back[n..]).unwrap();
        }
        assert_eq!(&back, b"pong");
        drop(theirs);
        // The first write after the close may still be accepted (the RST comes back
        // for it); a later one fails.
        let failed = (0..100).find_map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            s.write(&[0u8; 1024]).err()
        });
        let e = failed.expect("a write to a closed peer kept succeeding");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{e:?}"
        );
    }
}
