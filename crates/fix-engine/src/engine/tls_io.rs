//! TLS connections (rustls' buffered API): the same syscalls as the clear path. A
//! readable socket gets one `read` per wake (until it would block, or to the end of
//! the stream when the peer closed) into the engine-wide `tls_in` buffer; rustls
//! decrypts it; the clear text goes into the connection's read buffer and is framed as
//! on the clear path. Writing hands the turn's clear text (`wbuf`) to rustls and writes
//! its records with one vectored `write` per turn.
//!
//! A record or handshake error (an untrusted certificate, clear text on a TLS port)
//! sends rustls' alert once, without waiting, and closes that connection.

use super::*;

/// Where a QuickFIX settings file sets what a TLS failure's text points to.
const FIX_HINTS: tickwire_tls::Hints = tickwire_tls::Hints {
    ca: "CertificationAuthoritiesFile",
    server_name: "SocketConnectHost and the certificate's names",
    client_cert: "ClientCertificateFile and ClientCertificateKeyFile",
};

/// A client-side TLS connection to `host` (the name the acceptor's certificate must
/// carry: a DNS name or an IP address).
pub(super) fn tls_client(
    cfg: &Arc<rustls::ClientConfig>,
    host: &str,
) -> Result<rustls::Connection, String> {
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("SocketConnectHost {host:?} is not a valid TLS server name: {e}"))?;
    rustls::ClientConnection::new(cfg.clone(), name)
        .map(rustls::Connection::Client)
        .map_err(|e| e.to_string())
}

impl<A: Application> Engine<A> {
    /// [`Engine::read_conn`] for a TLS connection.
    pub(super) fn read_conn_tls(&mut self, c: ConnId, to_eof: bool) {
        // Clear text rustls still has (decrypted while frames were held, `Net::hold`)
        // comes first.
        if !self.drain_clear_text(c) {
            return;
        }
        if self.net.is_held(c) {
            self.net.keep_eof(c, to_eof);
            return;
        }
        let mut input = std::mem::take(&mut self.net.tls_in);
        self.read_tls_socket(c, to_eof, &mut input);
        self.net.tls_in = input;
        // Handshake messages, alerts, session tickets; and clear text that waited for
        // the handshake to finish: at the end of the turn, after the stores are
        // flushed (`wbuf` may hold answers to what was just read, not yet stored).
        self.net.queue_write(c);
    }

    fn read_tls_socket(&mut self, c: ConnId, to_eof: bool, input: &mut [u8]) {
        loop {
            if self.net.pause_if_backed_up(c, to_eof) {
                return;
            }
            // As on the clear path: the rest at the next turn.
            let Some(budget) = self.net.read_budget(c, to_eof, self.opts.read_per_turn) else {
                return;
            };
            let Some(conn) = self.net.open_conn(c) else {
                return;
            };
            let room = budget.min(input.len());
            let input = &mut input[..room];
            match conn::read_socket(&conn.stream, input) {
                conn::Got::Bytes(n) => {
                    conn.read_this_turn += n;
                    if !self.feed_tls(c, &input[..n]) {
                        return;
                    }
                    if self.net.is_held(c) {
                        self.net.keep_eof(c, to_eof);
                        return;
                    }
                    // As on the clear path: a short read emptied the receive queue.
                    if n < input.len() && !to_eof {
                        return;
                    }
                }
                conn::Got::WouldBlock => return,
                conn::Got::Closed(why) => {
                    self.close_conn(c, &why);
                    return;
                }
            }
        }
    }

    /// Hands `bytes` (from the socket) to rustls and frames the clear text. False: the
    /// connection was closed.
    fn feed_tls(&mut self, c: ConnId, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            let Some(conn) = self.net.open_conn(c) else {
                return false;
            };
            let Some(tls) = conn.tls.as_mut() else {
                return false;
            };
            let result: Result<(), String> = match tls.read_tls(&mut bytes) {
                // The peer sent close_notify earlier: nothing after it counts.
                Ok(0) => return true,
                Ok(_) => tls.process_new_packets().map(|_| ()).map_err(|e| {
                    // rustls queued an alert for the peer: one attempt to send it.
                    let _ = tls.write_tls(&mut conn.stream);
                    // In the router's words ("the peer does not speak TLS", which
                    // certificate check failed), not rustls's.
                    tickwire_tls::describe_with(&e, &FIX_HINTS)
                }),
                Err(e) => Err(format!("TLS failed: {e}")),
            };
            if let Err(e) = result {
                self.tls_failed(c, &e);
                return false;
            }
            if !self.drain_clear_text(c) {
                return false;
            }
        }
        true
    }

    /// Moves what rustls decrypted into the read buffer and frames it. False: the
    /// connection was closed.
    fn drain_clear_text(&mut self, c: ConnId) -> bool {
        loop {
            let Some(conn) = self.net.open_conn(c) else {
                return false;
            };
            // While frames are held the clear text still moves into the read buffer
            // (rustls refuses more records past 16 KiB of it: review), unframed until
            // they are taken; no more is read from the socket meanwhile, so it is at
            // most the one read that brought the reset.
            if !conn::make_room(conn, conn::frame_limit(&self.opts, conn)) {
                self.close_conn(c, "Read buffer full without a complete message");
                return false;
            }
            let Conn {
                tls: Some(tls),
                rbuf,
                rend,
                ..
            } = &mut *conn
            else {
                return false;
            };
            match tls.reader().read(&mut rbuf[*rend..]) {
                Ok(0) => {
                    self.close_conn(c, "Connection closed by counterparty (TLS close_notify)");
                    return false;
                }
                Ok(n) => {
                    *rend += n;
                    if conn.session.is_none() && conn.first_bytes.is_none() {
                        conn.first_bytes = Some(self.now.as_nanos());
                    }
                    self.process_frames(c);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) => {
                    let text = format!("TLS: {e}");
                    self.close_conn(c, &text);
                    return false;
                }
            }
        }
    }

    /// A TLS error on connection `c`: closes it; before its Logon (an acceptor's
    /// handshake) it is counted and logged with the refusals at accept (rate-limited).
    fn tls_failed(&mut self, c: ConnId, e: &str) {
        let Some(Some(conn)) = self.net.conns.get(c.0) else {
            return;
        };
        let text = e.to_string();
        match (conn.session, conn.peer) {
            (None, Some(peer)) => {
                let port = conn.stream.peer_addr().map_or(0, |a| a.port());
                self.refused_at_accept(SocketAddr::new(peer, port), &text);
                self.close_conn(c, "");
            }
            _ => self.close_conn(c, &text),
        }
    }

    /// [`Engine::write_conn`] for a TLS connection: the clear text of `wbuf` into
    /// rustls, its records onto the socket (vectored), until everything is out or the
    /// socket would block (the next writable event goes on).
    pub(super) fn write_conn_tls(&mut self, c: ConnId) {
        let Some(Some(conn)) = self.net.conns.get_mut(c.0) else {
            return;
        };
        if conn.state == ConnState::Connecting {
            return;
        }
        let Conn {
            tls: Some(tls),
            stream,
            wbuf,
            wpos,
            state,
            ..
        } = conn
        else {
            return;
        };
        let mut error = None;
        loop {
            let took = if *wpos < wbuf.len() {
                match tls.writer().write(&wbuf[*wpos..]) {
                    Ok(n) => n,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            } else {
                0
            };
            *wpos += took;
            let mut blocked = false;
            while tls.wants_write() {
                match tls.write_tls(stream) {
                    Ok(0) => {
                        blocked = true;
                        break;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        blocked = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            // Done, blocked, or rustls takes no more yet (its buffer is full of clear
            // text waiting for the handshake): the next event goes on.
            if error.is_some() || blocked || took == 0 || *wpos == wbuf.len() {
                break;
            }
        }
        if let Some(e) = error {
            wbuf.clear();
            *wpos = 0;
            let text = format!("Socket error: {e}");
            self.close_conn(c, &text);
            return;
        }
        if *wpos == wbuf.len() {
            wbuf.clear();
            *wpos = 0;
            if *state == ConnState::Closing && !tls.wants_write() {
                self.close_conn(c, "");
            }
        }
    }
}
