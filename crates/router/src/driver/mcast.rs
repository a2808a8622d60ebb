//! The multicast streams' part of the event loop (docs/multicast.md §10): one UDP
//! socket per stream, bound to its interface on an ephemeral port (where receivers'
//! NAKs and flow reports arrive), in the epoll set under its own token.
//!
//! Once per loop turn, after routing ([`Router::mcast_turn`]): read the NAKs that
//! arrived (readiness seen), close each stream's open datagram, run the timers when due
//! (heartbeats) and send what the cores queued, one `sendto` per datagram. So a turn
//! that routes several messages of a stream sends them in as few datagrams as fit.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use tickwire_mcast::driver::{send_pending, sender_socket};
use tickwire_mcast::Loss;
use tickwire_rt::MonoNanos;

use super::{Error, Router};
use crate::mcast::MulticastRoute;

/// Stream `i`'s token is `MCAST_TOKEN_TOP - i` (clients' tokens are small slot numbers).
const MCAST_TOKEN_TOP: usize = usize::MAX - 16;
/// NAK and flow-report datagrams read per stream per turn at most.
const READ_BATCH: usize = 256;

struct StreamSocket {
    sock: UdpSocket,
    group: SocketAddr,
    loss: Loss,
    readable: bool,
}

/// The sockets of the router's multicast streams.
pub(super) struct McastPort {
    streams: Vec<StreamSocket>,
    buf: Vec<u8>,
    send_errors: u64,
}

impl McastPort {
    /// Opens and registers one socket per route; `None` without routes.
    pub(super) fn open(
        routes: &[MulticastRoute],
        registry: &Registry,
    ) -> Result<Option<McastPort>, Error> {
        if routes.is_empty() {
            return Ok(None);
        }
        let mut streams = Vec::with_capacity(routes.len());
        for (i, r) in routes.iter().enumerate() {
            let fail = |e: String| Error::McastBind {
                group: r.group,
                source: io::Error::other(e),
            };
            let sock = sender_socket(r.interface).map_err(|e| fail(e.to_string()))?;
            let loss = Loss::new(r.loss, r.seed).map_err(|e| fail(e.to_string()))?;
            registry
                .register(
                    &mut SourceFd(&sock.as_raw_fd()),
                    Token(MCAST_TOKEN_TOP - i),
                    Interest::READABLE,
                )
                .map_err(|source| Error::McastBind {
                    group: r.group,
                    source,
                })?;
            tracing::info!(group = %r.group, interface = %r.interface, topics = ?r.topics, "multicast stream");
            streams.push(StreamSocket {
                sock,
                group: SocketAddr::V4(r.group),
                loss,
                readable: true,
            });
        }
        Ok(Some(McastPort {
            streams,
            buf: vec![0; tickwire_mcast::packet::MAX_DATAGRAM],
            send_errors: 0,
        }))
    }

    /// Marks the stream of `token` readable; false when the token is not a stream's.
    pub(super) fn on_event(&mut self, token: Token) -> bool {
        let Some(i) = MCAST_TOKEN_TOP.checked_sub(token.0) else {
            return false;
        };
        match self.streams.get_mut(i) {
            Some(s) => {
                s.readable = true;
                true
            }
            None => false,
        }
    }
}

impl Router {
    /// Whether `token` is a multicast stream's (and notes its readiness).
    pub(super) fn mcast_event(&mut self, token: Token) -> bool {
        self.mcast.as_mut().is_some_and(|p| p.on_event(token))
    }

    /// NAKs in, open datagrams closed, timers, datagrams out (see the module docs).
    pub(super) fn mcast_turn(&mut self, now: MonoNanos) {
        let Some(port) = &mut self.mcast else { return };
        let m = self.core.multicast_mut();
        for (i, s) in port.streams.iter_mut().enumerate() {
            if !s.readable {
                continue;
            }
            let mut n = 0;
            loop {
                if n == READ_BATCH {
                    break;
                }
                match s.sock.recv(&mut port.buf) {
                    Ok(len) => m.handle_nak(now, i, &port.buf[..len]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        s.readable = false;
                        break;
                    }
                }
                n += 1;
            }
        }
        m.flush(now);
        if m.poll_timeout().is_some_and(|t| now >= t) {
            m.handle_timer(now);
        }
        for (i, s) in port.streams.iter_mut().enumerate() {
            port.send_errors += send_pending(m.sender_mut(i), &s.sock, s.group, &mut s.loss);
        }
    }

    /// `timeout` shortened to the streams' next timer (heartbeats while idle).
    pub(super) fn mcast_bound(
        &mut self,
        timeout: Option<Duration>,
        now: MonoNanos,
    ) -> Option<Duration> {
        if self.mcast.is_none() {
            return timeout;
        }
        let Some(at) = self.core.multicast_mut().poll_timeout() else {
            return timeout;
        };
        let until = Duration::from_nanos(at.saturating_sub(now));
        Some(timeout.map_or(until, |t| t.min(until)))
    }
}
