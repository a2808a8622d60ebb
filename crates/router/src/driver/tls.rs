//! The TLS listener's part of the event loop (docs/security.md, "TLS").
//!
//! A TLS client is a [`super::Conn`] like any other: its [`super::shm::Link`] reads
//! and writes plaintext like a non-blocking socket, through [`tickwire_tls::TlsIo`],
//! so the loop's read, route, write and close steps, the core and the stats are the TCP
//! ones. What differs:
//!
//! - a read makes as many `read(2)` calls as a plaintext read of the same bytes (the
//!   ciphertext buffer is as large as the client's read buffer), and a write of queued
//!   records is one `writev(2)`; encrypted records the socket did not take keep the
//!   client on the flush list ([`super::shm::Link::wants_write`]);
//! - the handshake runs inside those reads and writes; until it ends no frame reaches
//!   the core, so the core's handshake deadline (no HELLO within
//!   `handshake_timeout_ms`) also ends a TLS handshake that stalls; a peer that sends
//!   something that is not TLS fails its first read and is disconnected alone;
//! - after the handshake, the names of a verified client certificate go to the core
//!   once, before the first frame ([`crate::core::Core::handle_peer_cert`]).

use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::Arc;

use mio::net::{TcpListener, TcpStream};
use mio::Token;
use tickwire_tls::TlsIo;

/// The TLS listener's token.
pub(super) const TLS_LISTENER: Token = Token(usize::MAX - 5);

/// The TLS listener and the configuration each connection starts from.
pub(super) struct TlsPort {
    pub(super) listener: TcpListener,
    pub(super) config: Arc<rustls::ServerConfig>,
}

/// One TLS client's socket and TLS state.
pub(super) struct TlsLink {
    sock: TcpStream,
    io: TlsIo,
    /// The handshake's end went to the core, with the certificate's names.
    names_taken: bool,
}

impl TlsLink {
    /// The server side of a new connection on `sock`.
    pub(super) fn accept(
        sock: TcpStream,
        config: Arc<rustls::ServerConfig>,
    ) -> Result<TlsLink, rustls::Error> {
        Ok(TlsLink {
            sock,
            io: TlsIo::server(config)?,
            names_taken: false,
        })
    }

    pub(super) fn socket(&mut self) -> &mut TcpStream {
        &mut self.sock
    }

    pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read(&mut self.sock, buf)
    }

    pub(super) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.io.write(&mut self.sock, buf)
    }

    pub(super) fn flush(&mut self) -> io::Result<bool> {
        self.io.flush_tls(&mut self.sock)
    }

    pub(super) fn wants_write(&self) -> bool {
        self.io.wants_write()
    }

    pub(super) fn socket_unread(&self) -> bool {
        self.io.socket_unread()
    }

    /// Once, when the handshake is done: the names of the client's verified certificate
    /// (CN, then alternative names; none if it presented none).
    pub(super) fn take_handshake_done(&mut self) -> Option<Vec<String>> {
        if self.names_taken || self.io.is_handshaking() {
            return None;
        }
        self.names_taken = true;
        Some(
            self.io
                .peer_certificates()
                .and_then(|c| c.first())
                .map(tickwire_tls::cert_names)
                .unwrap_or_default(),
        )
    }

    /// Sends close_notify (one try) before a write shutdown.
    pub(super) fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if how != Shutdown::Both {
            self.io.send_close_notify();
            let _ = self.io.flush_tls(&mut self.sock);
        }
        let _ = self.sock.flush();
        self.sock.shutdown(how)
    }

    pub(super) fn into_tcp(self) -> TcpStream {
        self.sock
    }
}
