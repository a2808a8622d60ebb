//! An eventfd used as a doorbell: the producer rings it only when the consumer has
//! announced that it sleeps (`ring.rs`, wake protocol).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{eventfd, EventfdFlags};
use rustix::io::Errno;

/// One eventfd, non-blocking.
#[derive(Debug)]
pub struct Notify {
    fd: OwnedFd,
}

impl Notify {
    /// A fresh doorbell.
    pub fn new() -> io::Result<Notify> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Notify { fd })
    }

    /// Wraps a doorbell received from the peer.
    pub fn from_fd(fd: OwnedFd) -> Notify {
        Notify { fd }
    }

    /// Rings: the sleeper's `poll`/`epoll` reports it readable. One syscall.
    pub fn signal(&self) {
        // EAGAIN means the counter is saturated: the sleeper is woken anyway.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Resets the doorbell after waking (non-blocking; nothing to read is fine).
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut buf) {
                Err(Errno::INTR) => continue,
                _ => return,
            }
        }
    }
}

impl AsFd for Notify {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
