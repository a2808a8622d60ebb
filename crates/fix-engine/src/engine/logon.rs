//! Logon routing: accepting connections (the pending-connection cap and
//! `AllowedRemoteAddresses` at accept), and binding an accepted connection to a session
//! by its first message, which must be a Logon for a session of the listener that
//! admits the peer and has no connection.

use super::*;

impl<A: Application> Engine<A> {
    /// Accepted connections that have not logged on yet.
    pub(super) fn pending_conns(&self) -> usize {
        self.pending().count()
    }

    /// The accepted connections still waiting for their Logon.
    fn pending(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.net
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((ConnId(i), c.as_ref()?)))
            .filter(|(_, c)| {
                c.session.is_none() && c.listener.is_some() && c.state == ConnState::Open
            })
    }

    /// Makes room for one more connection waiting for its Logon: at
    /// [`EngineOptions::max_pending`], the one that has waited longest is closed
    /// (counted, logged at most once a second). It has had the most time to send its
    /// Logon, so a flood of silent connections holds the engine only while it opens
    /// them faster than real counterparties connect, not for `unbound_timeout` each
    /// (as the HTTP monitor evicts its oldest idle connection).
    fn make_room_for_pending(&mut self) {
        let cap = self.opts.max_pending.max(1);
        // Normally one pass: at most one connection is accepted per call.
        while self.pending_conns() >= cap {
            let Some((oldest, peer)) = self
                .pending()
                .min_by_key(|(_, conn)| conn.opened)
                .map(|(c, conn)| (c, conn.peer))
            else {
                return;
            };
            self.close_conn(oldest, "");
            self.net.evicted += 1;
            if log_due(&mut self.net.evicted_logged, self.net.evicted) {
                let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
                tracing::warn!(
                    "FIX acceptor: connection from {who} closed: the oldest of {cap} connections \
                     waiting for their Logon, making room for a new one ({} closed so far)",
                    self.net.evicted
                );
            }
        }
    }

    /// Whether some session of listener `l` admits a Logon from `peer`.
    pub(super) fn listener_admits(&self, l: ListenerId, peer: IpAddr) -> bool {
        self.slots
            .iter()
            .any(|s| s.listener == Some(l) && admits(&s.allowed, peer))
    }

    /// Counts a connection refused at accept and logs the count at most once a second.
    pub(super) fn refused_at_accept(&mut self, peer: SocketAddr, why: &str) {
        self.net.refused += 1;
        if log_due(&mut self.net.refused_logged, self.net.refused) {
            tracing::warn!(
                "FIX acceptor: connection from {peer} closed: {why} ({} refused at accept so far)",
                self.net.refused
            );
        }
    }

    /// Counts an accepted connection closed because its Logon did not come in time
    /// (`why`), and logs it at most once a second with the count: a peer sending what
    /// is not FIX, or nothing, used to be closed without a word.
    pub(super) fn logon_timed_out(&mut self, peer: Option<IpAddr>, why: &str) {
        self.net.timed_out += 1;
        if log_due(&mut self.net.timed_out_logged, self.net.timed_out) {
            let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
            tracing::warn!(
                "FIX acceptor: connection from {who} closed: {why} ({} closed without a \
                 Logon so far)",
                self.net.timed_out
            );
        }
    }

    /// Accepted connections closed so far because no complete Logon came in time.
    pub fn logon_timeouts(&self) -> u64 {
        self.net.timed_out
    }

    /// Connections closed at accept so far (a peer no session of the listener allows,
    /// or a TLS setup failure).
    pub fn refused_connections(&self) -> u64 {
        self.net.refused
    }

    /// Connections closed while waiting for their Logon to make room for a newer one
    /// ([`EngineOptions::max_pending`]).
    pub fn evicted_pending_connections(&self) -> u64 {
        self.net.evicted
    }

    pub(super) fn accept_all(&mut self, l: ListenerId) {
        loop {
            let Some((Some(listener), _)) = self.net.listeners.get(l.0) else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    // Refused before a byte is read (the stream is dropped: closed).
                    if !self.listener_admits(l, peer.ip()) {
                        self.refused_at_accept(peer, "address not in AllowedRemoteAddresses");
                        continue;
                    }
                    self.make_room_for_pending();
                    // Nodelay before the first byte; unbound connections get the
                    // default (tickwire always wants it), sessions may clear it.
                    let _ = stream.set_nodelay(true);
                    tracing::debug!("FIX connection from {peer}");
                    // Before Logon only a Logon is buffered (up to max_logon_len).
                    let rbuf = self.opts.read_buffer.min(self.opts.max_logon_len).max(256);
                    let tls = match self.opts.tls.as_ref().and_then(|t| t.server.clone()) {
                        None => None,
                        Some(cfg) => match rustls::ServerConnection::new(cfg) {
                            Ok(t) => Some(Box::new(rustls::Connection::Server(t))),
                            Err(e) => {
                                self.refused_at_accept(peer, &format!("TLS: {e}"));
                                continue;
                            }
                        },
                    };
                    if let Some(c) = self.add_conn(stream, ConnState::Open, rbuf) {
                        if let Some(Some(conn)) = self.net.conns.get_mut(c.0) {
                            conn.listener = Some(l);
                            conn.peer = Some(peer.ip());
                            conn.tls = tls;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: try again on the next event.
                    tracing::warn!("accepting a FIX connection: {e}");
                    return;
                }
            }
        }
    }

    /// One complete frame `rbuf[a..b]` of connection `c`.
    pub(super) fn deliver(&mut self, c: ConnId, a: usize, b: usize) {
        let Some(Some(conn)) = self.net.conns.get(c.0) else {
            return;
        };
        let k = match conn.session {
            Some(k) => k,
            None => match self.bind(c, a, b) {
                Some(k) => k,
                None => return,
            },
        };
        let Some(Some(conn)) = self.net.conns.get(c.0) else {
            return;
        };
        let frame = &conn.rbuf[a..b];
        let slot = &mut self.slots[k.0];
        if slot.logged {
            if let Some(l) = &mut self.log {
                l.incoming(k.0, self.now.as_nanos(), frame);
            }
        }
        slot.session.handle_message(self.now, frame);
        slot.touched = true;
        self.drain(k);
    }

    /// An acceptor connection's first frame: must be a Logon for a configured session
    /// of this listener that has no connection; otherwise the connection is closed
    /// without a word, as QuickFIX does.
    pub(super) fn bind(&mut self, c: ConnId, a: usize, b: usize) -> Option<SessionKey> {
        let Some(Some(conn)) = self.net.conns.get(c.0) else {
            return None;
        };
        let listener = conn.listener;
        let peer = conn.peer;
        let found =
            match codec::parse_keeping_empty(&conn.rbuf[a..b], &mut self.scratch.fields, false) {
                Err(_) => Err("garbled first message".to_owned()),
                Ok(m) if m.msg_type() != b"A" => Err("first message is not a Logon".to_owned()),
                Ok(m) => {
                    let (begin, sender, target) = (
                        m.begin_string(),
                        m.get(49).unwrap_or_default(),
                        m.get(56).unwrap_or_default(),
                    );
                    self.slots
                        .iter()
                        .position(|s| {
                            let cfg = s.session.config();
                            s.listener == listener
                                && cfg.begin_string.as_bytes() == begin
                                && cfg.sender_comp_id.as_bytes() == target
                                && cfg.target_comp_id.as_bytes() == sender
                        })
                        .map(SessionKey)
                        .ok_or_else(|| {
                            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                            format!(
                                "Session not found for incoming message (a Logon for {} \
                                 {}->{})",
                                text(begin),
                                text(sender),
                                text(target)
                            )
                        })
                }
            };
        match found {
            Err(why) => {
                // Counted, and logged at most once a second with the peer (a
                // hostile-input pass saw ~100 such lines a second, none naming it).
                self.net.first_refused += 1;
                if log_due(&mut self.net.first_refused_logged, self.net.first_refused) {
                    let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
                    tracing::warn!(
                        "FIX acceptor: connection from {who} closed: {why} ({} closed at \
                         their first message so far)",
                        self.net.first_refused
                    );
                }
                self.close_conn(c, "");
                None
            }
            Ok(k) if !peer.is_some_and(|p| admits(&self.slots[k.0].allowed, p)) => {
                let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
                self.note(
                    k,
                    // QuickFIX 1.16's event (SocketConnection.cpp).
                    format_args!("Deny connections to the acceptor from {who}"),
                );
                tracing::warn!(
                    "FIX acceptor: Logon for {} from {who}, not in its AllowedRemoteAddresses: connection closed",
                    self.slots[k.0].id
                );
                self.close_conn(c, "");
                None
            }
            Ok(k) if self.slots[k.0].conn.is_some() => {
                self.note(
                    k,
                    format_args!("Refusing a second connection for this session"),
                );
                self.close_conn(c, "");
                None
            }
            Ok(k) => {
                let nodelay = self.slots[k.0].nodelay;
                if let Some(Some(conn)) = self.net.conns.get_mut(c.0) {
                    conn.session = Some(k);
                    let _ = conn.stream.set_nodelay(nodelay);
                }
                let slot = &mut self.slots[k.0];
                slot.conn = Some(c);
                slot.session.handle_connected(self.now);
                slot.touched = true;
                self.drain(k);
                Some(k)
            }
        }
    }
}

/// Whether an `AllowedRemoteAddresses` list admits `peer` (an empty list admits any).
/// An IPv4 peer seen as an IPv4-mapped IPv6 address (dual-stack listener) matches its
/// IPv4 form.
/// Whether a line counting `count` events is logged now: the first one, then at most
/// once a second; `logged` is the count and the time (UTC ns) last logged, updated.
fn log_due(logged: &mut (u64, u64), count: u64) -> bool {
    let now = UtcNanos::now().as_nanos();
    if logged.0 == 0 || now.saturating_sub(logged.1) >= 1_000_000_000 {
        *logged = (count, now);
        return true;
    }
    false
}

pub(super) fn admits(allowed: &[IpAddr], peer: IpAddr) -> bool {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    allowed.is_empty() || allowed.contains(&peer)
}
