//! Connection buffers and IO: registering, connecting, reading and framing, writing
//! and closing the engine's connections. One read buffer and one write buffer per
//! connection, reused; before Logon the read buffer is bounded by
//! [`EngineOptions::max_logon_len`].

use super::tls_io::tls_client;
use super::*;

impl<A: Application> Engine<A> {
    /// Registers a new connection with a read buffer of `rbuf_len` bytes (it grows up
    /// to the connection's frame limit).
    pub(super) fn add_conn(
        &mut self,
        stream: TcpStream,
        state: ConnState,
        rbuf_len: usize,
    ) -> Option<ConnId> {
        let c = self.net.free.pop().unwrap_or_else(|| {
            self.net.conns.push(None);
            ConnId(self.net.conns.len() - 1)
        });
        let mut conn = Conn {
            stream,
            state,
            session: None,
            listener: None,
            peer: None,
            rbuf: vec![0; rbuf_len],
            rstart: 0,
            rend: 0,
            scan: codec::FrameScan::default(),
            wbuf: Vec::new(),
            wpos: 0,
            since: self.now.as_nanos(),
            opened: self.net.opened,
            first_bytes: None,
            queued: false,
            paused: None,
            read_turn: 0,
            read_this_turn: 0,
            held: false,
            reset_turn: None,
            resume_queued: false,
            resume_eof: false,
            tls: None,
        };
        if let Err(e) = self.net.poll.registry().register(
            &mut conn.stream,
            Token(CONN_BASE + c.0),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register a FIX connection: {e}");
            self.net.free.push(c);
            return None;
        }
        self.net.conns[c.0] = Some(conn);
        self.net.opened += 1;
        Some(c)
    }

    pub(super) fn start_connect(&mut self, k: SessionKey) {
        let Some(slot) = self.slots.get_mut(k.0) else {
            return;
        };
        if slot.conn.is_some() {
            return;
        }
        let n = slot.connect.len().max(1);
        let Some((host, port)) = slot.connect.get(slot.next_addr % n).cloned() else {
            return;
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .ok()
            .and_then(|mut a| a.next());
        self.note(k, format_args!("Connecting to {host} on port {port}"));
        let stream = match addr {
            Some(a) => TcpStream::connect(a),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("cannot resolve {host}"),
            )),
        };
        let c = match stream {
            Ok(s) => {
                let rbuf = self
                    .opts
                    .read_buffer
                    .clamp(256, self.opts.max_message_len.max(256));
                self.add_conn(s, ConnState::Connecting, rbuf)
            }
            Err(e) => {
                self.note(k, format_args!("Connection failed: {e}"));
                None
            }
        };
        match c {
            Some(c) => {
                if let Some(Some(conn)) = self.net.conns.get_mut(c.0) {
                    conn.session = Some(k);
                }
                self.slots[k.0].conn = Some(c);
            }
            None => {
                let slot = &mut self.slots[k.0];
                slot.next_addr = slot.next_addr.wrapping_add(1);
                slot.session.handle_disconnected(self.now);
                slot.touched = true;
            }
        }
    }

    pub(super) fn finish_connect(&mut self, c: ConnId) {
        let Some(Some(conn)) = self.net.conns.get_mut(c.0) else {
            return;
        };
        let result = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Err(e),
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
        };
        let k = conn.session;
        match result {
            Ok(false) => {}
            Ok(true) => {
                if let Some(cfg) = &self.opts.tls.as_ref().and_then(|t| t.client.clone()) {
                    let host = k
                        .and_then(|k| self.slots.get(k.0))
                        .and_then(|s| s.connect.get(s.next_addr % s.connect.len().max(1)))
                        .map(|(h, _)| h.clone())
                        .unwrap_or_default();
                    match tls_client(cfg, &host) {
                        Ok(t) => conn.tls = Some(Box::new(t)),
                        Err(e) => {
                            if let Some(k) = k {
                                self.note(k, format_args!("TLS: {e}"));
                            }
                            self.close_conn(c, "");
                            return;
                        }
                    }
                }
                conn.state = ConnState::Open;
                let nodelay = k
                    .and_then(|k| self.slots.get(k.0))
                    .is_none_or(|s| s.nodelay);
                let _ = conn.stream.set_nodelay(nodelay);
                if let Some(k) = k {
                    self.note(k, format_args!("Connection succeeded"));
                    let slot = &mut self.slots[k.0];
                    slot.session.handle_connected(self.now);
                    slot.touched = true;
                    self.drain(k);
                }
            }
            Err(e) => {
                if let Some(k) = k {
                    self.note(k, format_args!("Connection failed: {e}"));
                    let slot = &mut self.slots[k.0];
                    slot.next_addr = slot.next_addr.wrapping_add(1);
                }
                self.close_conn(c, "");
            }
        }
    }

    /// Reads until the socket would block, processing complete frames after every read.
    /// Reads until the socket is drained. A read that returns less than the space
    /// offered has emptied the receive queue: later bytes raise a new edge, so no
    /// extra `read` is spent to see EAGAIN (one syscall less per message at low rates).
    /// When the peer has closed (`to_eof`), reads go on to the end of the stream.
    /// Past `EngineOptions::read_per_turn` bytes in a turn the rest waits for the next
    /// turn (`Net::resume`).
    pub(super) fn read_conn(&mut self, c: ConnId, to_eof: bool) {
        if self.net.pause_if_backed_up(c, to_eof) {
            return;
        }
        if self.process_held(c) {
            self.net.keep_eof(c, to_eof);
            return;
        }
        if matches!(self.net.conns.get(c.0), Some(Some(conn)) if conn.tls.is_some()) {
            return self.read_conn_tls(c, to_eof);
        }
        loop {
            if self.net.pause_if_backed_up(c, to_eof) {
                return;
            }
            let Some(budget) = self.net.read_budget(c, to_eof, self.opts.read_per_turn) else {
                return;
            };
            let Some(conn) = self.net.open_conn(c) else {
                return;
            };
            if !make_room(conn, frame_limit(&self.opts, conn)) {
                self.close_conn(c, "Read buffer full without a complete message");
                return;
            }
            let (rend, len) = (conn.rend, conn.rbuf.len().min(conn.rend + budget));
            match read_socket(&conn.stream, &mut conn.rbuf[rend..len]) {
                Got::Bytes(n) => {
                    conn.rend += n;
                    conn.read_this_turn += n;
                    if conn.session.is_none() && conn.first_bytes.is_none() {
                        conn.first_bytes = Some(self.now.as_nanos());
                    }
                    let drained = n < len - rend;
                    self.process_frames(c);
                    if self.net.is_held(c) {
                        self.net.keep_eof(c, to_eof);
                        return;
                    }
                    if drained && !to_eof {
                        return;
                    }
                }
                Got::WouldBlock => return,
                Got::Closed(why) => {
                    self.close_conn(c, &why);
                    return;
                }
            }
        }
    }

    /// Frames and delivers every complete message in the read buffer. The framing of an
    /// incomplete frame resumes where the previous call left off (`Conn::scan`), so the
    /// bytes of one frame are searched once however many reads bring them.
    pub(super) fn process_frames(&mut self, c: ConnId) {
        // Held frames wait for `process_held` (TLS moves clear text in meanwhile).
        if self.net.is_held(c) {
            return;
        }
        loop {
            let Some(conn) = self.net.open_conn(c) else {
                return;
            };
            let max = frame_limit(&self.opts, conn);
            let avail = &conn.rbuf[conn.rstart..conn.rend];
            if avail.is_empty() {
                conn.rstart = 0;
                conn.rend = 0;
                conn.scan.reset();
                return;
            }
            match codec::frame_len_resumable(avail, max, &mut conn.scan) {
                Ok(Some(n)) => {
                    let a = conn.rstart;
                    conn.rstart += n;
                    conn.scan.reset();
                    let resets = crate::store::file_resets();
                    self.deliver(c, a, a + n);
                    if crate::store::file_resets() != resets {
                        // The rest waits for the next turn: the other sessions first.
                        self.net.hold(c);
                        return;
                    }
                }
                Ok(None) => return,
                Err(FrameError::TooLong { len, max, .. }) => {
                    let text = if conn.session.is_none() && conn.listener.is_some() {
                        format!(
                            "First message (Logon) of {len} bytes exceeds the limit of {max} \
                             before Logon: disconnecting"
                        )
                    } else {
                        format!("Message of {len} bytes exceeds the limit of {max}: disconnecting")
                    };
                    if conn.session.is_none() {
                        tracing::warn!("FIX acceptor: {text}");
                    }
                    self.close_conn(c, &text);
                    return;
                }
                Err(e) => {
                    // Garbage: skip to the next `8=FIX` candidate (QuickFIX does the same).
                    conn.rstart += e.skip().min(avail.len());
                    conn.scan.reset();
                }
            }
        }
    }

    /// Frames held back after a store reset ([`Net::hold`]) go first; true while
    /// some are still held (then nothing more is read this turn).
    pub(super) fn process_held(&mut self, c: ConnId) -> bool {
        let turn = self.net.turns;
        match self.net.conns.get_mut(c.0) {
            // A connection read twice in one turn (its event and its resume) takes
            // one reset in it, not two (review).
            Some(Some(conn)) if conn.held && conn.reset_turn == Some(turn) => {
                conn.queue_resume(c, false, &mut self.net.resume);
                return true;
            }
            Some(Some(conn)) if conn.held => conn.held = false,
            _ => return false,
        }
        self.process_frames(c);
        self.net.is_held(c)
    }

    /// Closes connection `c` now; a bound session is told (`handle_disconnected`).
    pub(super) fn close_conn(&mut self, c: ConnId, why: &str) {
        let Some(mut conn) = self.net.conns.get_mut(c.0).and_then(Option::take) else {
            return;
        };
        let _ = self.net.poll.registry().deregister(&mut conn.stream);
        if let Some(tls) = &mut conn.tls {
            // Best effort: a close_notify alert in one write, never waiting.
            tls.send_close_notify();
            let _ = tls.write_tls(&mut conn.stream);
        }
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        self.net.free_later.push(c);
        if let Some(k) = conn.session {
            if self.slots.get(k.0).is_some_and(|s| s.conn == Some(c)) {
                if !why.is_empty() {
                    self.note(k, format_args!("{why}"));
                }
                let slot = &mut self.slots[k.0];
                slot.conn = None;
                slot.counters.disconnects += 1;
                slot.session.handle_disconnected(self.now);
                slot.touched = true;
                self.drain(k);
            }
        } else if !why.is_empty() {
            tracing::debug!("FIX connection closed: {why}");
        }
    }

    /// Writes what is queued for `c` (one `write` unless the kernel takes less).
    pub(super) fn write_conn(&mut self, c: ConnId) {
        let Some(Some(conn)) = self.net.conns.get_mut(c.0) else {
            return;
        };
        if conn.state == ConnState::Connecting {
            return;
        }
        if conn.tls.is_some() {
            self.write_conn_tls(c);
            self.net.resume_if_taken(c);
            return;
        }
        while conn.wpos < conn.wbuf.len() {
            match write_socket(&conn.stream, &conn.wbuf[conn.wpos..]) {
                Ok(0) => break,
                Ok(n) => conn.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    conn.wbuf.clear();
                    conn.wpos = 0;
                    let text = format!("Socket error: {e}");
                    self.close_conn(c, &text);
                    return;
                }
            }
        }
        if conn.wpos == conn.wbuf.len() {
            conn.wbuf.clear();
            conn.wpos = 0;
            if conn.state == ConnState::Closing {
                self.close_conn(c, "");
                return;
            }
        }
        self.net.resume_if_taken(c);
    }
}

impl Conn {
    /// Puts this connection (`c`) on `resume` for the next turn's read, once however
    /// often it is asked; an end of stream (`to_eof`) seen meanwhile is kept for that
    /// read (review: a flag set by an earlier entry had dropped a later `to_eof`, and
    /// the closed peer's connection was not closed by a read).
    fn queue_resume(&mut self, c: ConnId, to_eof: bool, resume: &mut Vec<(ConnId, u64)>) {
        self.resume_eof |= to_eof;
        if !self.resume_queued {
            self.resume_queued = true;
            resume.push((c, self.opened));
        }
    }
}

/// The longest frame a connection may announce: [`EngineOptions::max_logon_len`] on an
/// accepted connection before its Logon bound it, else `max_message_len`.
impl Net {
    /// Stops reading `c` while more than [`OUTPUT_HIGH`] waits for its peer; true when
    /// paused (the read is left for [`Net::resume_if_taken`]).
    pub(super) fn pause_if_backed_up(&mut self, c: ConnId, to_eof: bool) -> bool {
        match self.conns.get_mut(c.0) {
            Some(Some(conn)) if conn.wbuf.len() - conn.wpos > OUTPUT_HIGH => {
                conn.paused = Some(to_eof || conn.paused == Some(true));
                true
            }
            _ => false,
        }
    }

    /// Leaves the whole frames still in `c`'s read buffer for the next turn (after
    /// one that reset a file store) and puts `c` on [`Net::resume`]; with none left
    /// there is nothing to hold.
    pub(super) fn hold(&mut self, c: ConnId) {
        let turn = self.turns;
        if let Some(Some(conn)) = self.conns.get_mut(c.0) {
            conn.reset_turn = Some(turn);
            if conn.rstart < conn.rend {
                conn.held = true;
                conn.queue_resume(c, false, &mut self.resume);
            } else {
                // Nothing left to hold, but no more is read this turn either (review:
                // resets that ended each read were taken a read at a time, ~32 a
                // turn): the read budget is spent, so the next read is the next turn's.
                conn.read_turn = turn;
                conn.read_this_turn = usize::MAX;
            }
        }
    }

    /// Keeps an end of stream seen by a read that stopped for held frames.
    pub(super) fn keep_eof(&mut self, c: ConnId, to_eof: bool) {
        if let Some(Some(conn)) = self.conns.get_mut(c.0) {
            conn.resume_eof |= to_eof;
        }
    }

    /// Whether `c` has frames held back for a later turn ([`Net::hold`]).
    pub(super) fn is_held(&self, c: ConnId) -> bool {
        matches!(self.conns.get(c.0), Some(Some(conn)) if conn.held)
    }

    /// What connection `c` may still read this turn (> 0), or `None` when its
    /// `read_per_turn` is spent: it is then put on [`Net::resume`] (once) for the next
    /// turn's read.
    pub(super) fn read_budget(
        &mut self,
        c: ConnId,
        to_eof: bool,
        per_turn: usize,
    ) -> Option<usize> {
        let turn = self.turns;
        let conn = match self.conns.get_mut(c.0) {
            Some(Some(conn)) => conn,
            _ => return None,
        };
        if conn.read_turn != turn {
            conn.read_turn = turn;
            conn.read_this_turn = 0;
        }
        let left = per_turn.max(1).saturating_sub(conn.read_this_turn);
        if left > 0 {
            return Some(left);
        }
        conn.queue_resume(c, to_eof, &mut self.resume);
        None
    }

    /// Puts `c` on the turn's write list: written at the end of the turn, after the
    /// stores are flushed (records reach the kernel before the bytes that depend on
    /// them reach the socket), never during the dispatch, where `wbuf` may hold answers
    /// whose records are not flushed yet.
    pub(super) fn queue_write(&mut self, c: ConnId) {
        if let Some(Some(conn)) = self.conns.get_mut(c.0) {
            if !conn.queued {
                conn.queued = true;
                self.write_list.push(c);
            }
        }
    }

    /// A paused connection whose peer has taken half of what waited is read again
    /// at the next turn.
    pub(super) fn resume_if_taken(&mut self, c: ConnId) {
        if let Some(Some(conn)) = self.conns.get_mut(c.0) {
            if conn.wbuf.len() - conn.wpos <= OUTPUT_HIGH / 2 {
                if let Some(to_eof) = conn.paused.take() {
                    conn.queue_resume(c, to_eof, &mut self.resume);
                }
            }
        }
    }

    /// Connection `c` while it is open (not yet connected, closed or gone: `None`).
    pub(super) fn open_conn(&mut self, c: ConnId) -> Option<&mut Conn> {
        match self.conns.get_mut(c.0) {
            Some(Some(conn)) if conn.state == ConnState::Open => Some(conn),
            _ => None,
        }
    }
}

/// What one `read` of a socket gave.
pub(super) enum Got {
    /// Some bytes.
    Bytes(usize),
    /// Nothing more for now.
    WouldBlock,
    /// The end of the stream or an error: close, saying this.
    Closed(String),
}

/// One `recv` (again after EINTR), issued by rustix without the C library's wrapper:
/// `recv` is a pthread cancellation point there, and its enable/disable pair cost ~1%
/// of the engine's user time per message (perf, BENCHMARKS.md). The engine never
/// cancels threads.
pub(super) fn read_socket(stream: &TcpStream, buf: &mut [u8]) -> Got {
    loop {
        return match rustix::net::recv(stream, &mut *buf, rustix::net::RecvFlags::empty()) {
            Ok((0, _)) => Got::Closed("Connection closed by counterparty".to_string()),
            Ok((n, _)) => Got::Bytes(n),
            Err(rustix::io::Errno::AGAIN) => Got::WouldBlock,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => Got::Closed(format!("Socket error: {}", io::Error::from(e))),
        };
    }
}

/// One `send` (again after EINTR), as [`read_socket`] without the C library's wrapper;
/// `MSG_NOSIGNAL` as the standard library's `write` on a socket.
pub(super) fn write_socket(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    loop {
        return match rustix::net::send(stream, buf, rustix::net::SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => r.map_err(io::Error::from),
        };
    }
}

/// Makes room at the end of a connection's read buffer: moves the unread bytes to the
/// front, else grows the buffer up to `max`. False: full (cannot happen with
/// `frame_len`'s limit; the caller closes rather than loop forever).
pub(super) fn make_room(conn: &mut Conn, max: usize) -> bool {
    if conn.rend == conn.rbuf.len() {
        if conn.rstart > 0 {
            conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
            conn.rend -= conn.rstart;
            conn.rstart = 0;
        } else if conn.rbuf.len() < max {
            let len = conn.rbuf.len().saturating_mul(2).min(max);
            conn.rbuf.resize(len, 0);
        } else {
            return false;
        }
    }
    true
}

pub(super) fn frame_limit(opts: &EngineOptions, conn: &Conn) -> usize {
    if conn.session.is_none() && conn.listener.is_some() {
        opts.max_logon_len.min(opts.max_message_len)
    } else {
        opts.max_message_len
    }
}
