//! The loop turn: wait, dispatch readiness, queued commands, session timers,
//! housekeeping, then drain the sessions, flush the stores, write the sockets and let
//! the stores prepare their next flushes.

use super::*;

impl<A: Application> Engine<A> {
    /// One loop turn: wait (per the idle strategy), accept, read and process, run the
    /// timers and the queued commands, drain the sessions, flush the stores, write.
    pub fn turn(&mut self) -> Result<(), Error> {
        let (timeout, earliest) = self.wait_timeout();
        if let Err(e) = self.net.poll.poll(&mut self.net.events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::Io {
                    op: "waiting for socket events".into(),
                    source: e,
                });
            }
        }
        self.now = UtcNanos::now();
        self.net.turns += 1;
        self.net.ready.clear();
        for ev in self.net.events.iter() {
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
            let to_eof = ev.is_read_closed() || ev.is_error();
            self.net.ready.push(Ready {
                token: ev.token(),
                readable,
                writable,
                to_eof,
            });
        }
        for i in 0..self.net.ready.len() {
            let Ready {
                token,
                readable,
                writable,
                to_eof,
            } = self.net.ready[i];
            match token.0 {
                0 => {}
                t if t < CONN_BASE => self.accept_all(ListenerId(t - LISTENER_BASE)),
                t => {
                    let c = ConnId(t - CONN_BASE);
                    let state = match self.net.conns.get(c.0) {
                        Some(Some(conn)) => conn.state,
                        _ => continue,
                    };
                    if state == ConnState::Connecting {
                        if readable || writable {
                            self.finish_connect(c);
                        }
                        // Edge-triggered: bytes that came with the connection must be
                        // read now.
                        let open = matches!(
                            self.net.conns.get(c.0),
                            Some(Some(conn)) if conn.state == ConnState::Open
                        );
                        if !open {
                            continue;
                        }
                    }
                    if readable {
                        self.read_conn(c, to_eof);
                    }
                    // Not written here: what the read just processed put this turn's
                    // answers in `wbuf`, and their records are flushed only in
                    // `finish_turn` (the store contract). A write here put them on
                    // the wire first, and a `kill -9` in between lost their numbers.
                    if writable {
                        self.net.queue_write(c);
                    }
                }
            }
        }
        if !self.net.resume.is_empty() {
            let mut resume = std::mem::take(&mut self.net.resume);
            for &(c, opened) in &resume {
                let to_eof = match self.net.conns.get_mut(c.0) {
                    Some(Some(conn)) if conn.opened == opened => {
                        conn.resume_queued = false;
                        std::mem::take(&mut conn.resume_eof)
                    }
                    _ => continue,
                };
                self.read_conn(c, to_eof);
            }
            // Connections whose read budget this turn had already spent (read above,
            // in the event dispatch) or spends now: the next turn's.
            resume.clear();
            resume.append(&mut self.net.resume);
            self.net.resume = resume;
        }
        self.commands();
        self.timers(earliest);
        if self.now.as_nanos() >= self.net.next_housekeeping {
            self.net.next_housekeeping = self.now.as_nanos() + HOUSEKEEPING_NS;
            self.housekeeping();
            if let Some(m) = &self.monitor {
                m.tick_timed(MonoNanos::now(), MonoNanos::now, || self.snapshot());
            }
        }
        self.finish_turn();
        Ok(())
    }

    /// How long the turn may wait, and the earliest session deadline found on the way
    /// (None: not looked at, as when a session has work; u64::MAX: no session has one).
    ///
    /// The wait is measured from the previous turn's clock reading, not a new one (a
    /// clock read costs ~2% of the engine's user time per message, BENCHMARKS.md): so a
    /// deadline fires at most the previous turn's own duration late, as it would if
    /// that turn had been longer; the wait never exceeds `max_block`.
    pub(super) fn wait_timeout(&self) -> (Duration, Option<u64>) {
        if self.opts.idle == IdleStrategy::Spin
            || self.slots.iter().any(|s| s.touched)
            || !self.net.connects.is_empty()
            || !self.net.resume.is_empty()
            || (0..self.slots.len()).any(|k| self.resend_has_room(k))
        {
            return (Duration::ZERO, None);
        }
        let now = self.now.as_nanos();
        let mut earliest = u64::MAX;
        for s in &self.slots {
            if let Some(d) = s.session.poll_timeout().map(UtcNanos::as_nanos) {
                earliest = earliest.min(d);
            }
        }
        let mut until = now
            .saturating_add(self.opts.max_block.as_nanos() as u64)
            .min(earliest);
        if self.net.conns.iter().any(|c| {
            c.as_ref()
                .is_some_and(|c| c.state != ConnState::Open || c.session.is_none())
        }) {
            until = until.min(self.net.next_housekeeping);
        }
        (
            Duration::from_nanos(until.saturating_sub(now)),
            Some(earliest),
        )
    }

    pub(super) fn note(&mut self, k: SessionKey, args: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        self.scratch.note.clear();
        let _ = self.scratch.note.write_fmt(args);
        if let Some(slot) = self.slots.get(k.0) {
            if slot.logged {
                if let Some(l) = &mut self.log {
                    l.event(k.0, self.now.as_nanos(), &self.scratch.note);
                }
            }
        }
        self.app.on_event(k, &self.scratch.note);
    }

    pub(super) fn commands(&mut self) {
        while let Ok(cmd) = self.rx.try_recv() {
            let now = self.now;
            let (k, result) = {
                let mut ctx = Ctx {
                    slots: &mut self.slots,
                    now,
                    stop: &mut self.stop,
                };
                match cmd {
                    Command::Send {
                        session,
                        msg_type,
                        body,
                    } => (session, ctx.send(session, &msg_type, &body).map(|_| ())),
                    Command::Logout { session, text } => {
                        (session, ctx.logout(session, text.as_deref()))
                    }
                    Command::Logon { session } => (session, ctx.logon(session)),
                    Command::Call(f) => {
                        f(&mut ctx);
                        (SessionKey(0), Ok(()))
                    }
                }
            };
            if let Err(e) = result {
                self.note(k, format_args!("Queued command failed: {e}"));
            }
        }
    }

    /// Runs `handle_timeout` for every session past its deadline. `earliest`: the
    /// earliest deadline `wait_timeout` found before this turn's wait; while the clock
    /// is before it, no session is asked (two `poll_timeout`s per session per turn
    /// otherwise). What this turn did can only move a deadline into the past through a
    /// disconnect or a command, and such a session is then served by the next turn,
    /// whose wait is zero because its deadline is due.
    pub(super) fn timers(&mut self, earliest: Option<u64>) {
        if earliest.is_some_and(|d| self.now.as_nanos() < d) {
            return;
        }
        for k in (0..self.slots.len()).map(SessionKey) {
            let slot = &mut self.slots[k.0];
            if slot.session.poll_timeout().is_some_and(|d| d <= self.now) {
                slot.session.handle_timeout(self.now);
                slot.touched = true;
                self.drain(k);
            }
        }
    }

    /// Closing connections past their linger, silent unbound connections, connection
    /// attempts that take longer than the session's LogonTimeout.
    pub(super) fn housekeeping(&mut self) {
        const FIRST_MESSAGE_NS: u64 = 1_000_000_000;
        let now = self.now;
        let unbound = self.opts.unbound_timeout.as_nanos() as u64;
        for c in 0..self.net.conns.len() {
            let Some(Some(conn)) = self.net.conns.get(c) else {
                continue;
            };
            let age = now.as_nanos().saturating_sub(conn.since);
            let close = match conn.state {
                ConnState::Closing => age >= LINGER_NS,
                // QuickFIX's acceptor reads a connection's first message with a 1 s
                // select and closes the connection if it is not complete by then
                // (recorded: logon_body_length_long).
                ConnState::Open => {
                    conn.session.is_none()
                        && (age >= unbound
                            || conn.first_bytes.is_some_and(|t| {
                                now.as_nanos().saturating_sub(t) >= FIRST_MESSAGE_NS
                            }))
                }
                ConnState::Connecting => {
                    let limit = conn
                        .session
                        .and_then(|k| self.slots.get(k.0))
                        .map_or(10, |s| u64::from(s.session.config().logon_timeout.max(1)));
                    age >= limit * 1_000_000_000
                }
            };
            if close {
                if let Some(k) = conn.session {
                    if conn.state == ConnState::Connecting {
                        let slot = &mut self.slots[k.0];
                        slot.next_addr = slot.next_addr.wrapping_add(1);
                    }
                }
                let why = match conn.state {
                    ConnState::Connecting => "Connection timed out",
                    _ => "",
                };
                if conn.state == ConnState::Open && conn.session.is_none() {
                    // Which limit closed it: the first message's 1 s, or the
                    // connection's own (bytes that came late meet the latter).
                    let within = if age >= unbound {
                        format!("{} s of connecting", self.opts.unbound_timeout.as_secs())
                    } else {
                        "1 s of its first bytes".to_string()
                    };
                    let what = match conn.first_bytes {
                        Some(_) if conn.rend > conn.rstart => format!(
                            "no complete Logon within {within} ({} bytes unfinished; \
                             bytes before an 8=FIX header are skipped)",
                            conn.rend - conn.rstart
                        ),
                        Some(_) => format!(
                            "no Logon within {within} (none of the bytes began a FIX \
                             message: 8=FIX...)"
                        ),
                        None => format!("nothing received within {within}"),
                    };
                    let peer = conn.peer;
                    self.logon_timed_out(peer, &what);
                }
                self.close_conn(ConnId(c), why);
            }
        }
    }

    /// Drains every touched session (callbacks may touch others), starts the
    /// connections asked for, flushes the stores, writes the sockets, hands the log
    /// batch over.
    pub(super) fn finish_turn(&mut self) {
        self.continue_resends();
        for _ in 0..MAX_DRAIN_ROUNDS {
            self.drain_touched();
            if self.net.connects.is_empty() {
                break;
            }
            let connects = std::mem::take(&mut self.net.connects);
            for &k in &connects {
                self.start_connect(k);
            }
            self.net.connects = connects;
            self.net.connects.clear();
        }
        // The store contract: records reach the kernel before the bytes that depend
        // on them reach the socket.
        for k in (0..self.slots.len()).map(SessionKey) {
            if !self.slots[k.0].dirty {
                continue;
            }
            self.slots[k.0].dirty = false;
            self.slots[k.0].flushed = true;
            if let Err(e) = self.slots[k.0].session.store_mut().flush() {
                let text = format!("Message store error: {e}");
                if let Some(c) = self.slots[k.0].conn {
                    // Nothing of this turn may go out: it is not durable.
                    if let Some(Some(conn)) = self.net.conns.get_mut(c.0) {
                        conn.wbuf.clear();
                        conn.wpos = 0;
                    }
                    self.close_conn(c, &text);
                } else {
                    self.note(k, format_args!("{text}"));
                }
            }
        }
        let list = std::mem::take(&mut self.net.write_list);
        for &c in &list {
            if let Some(Some(conn)) = self.net.conns.get_mut(c.0) {
                conn.queued = false;
            }
            self.write_conn(c);
        }
        self.net.write_list = list;
        self.net.write_list.clear();
        // Off the message path, after the writes: the stores prepare their next flushes
        // (the file store's mapped window).
        for slot in &mut self.slots {
            if slot.flushed {
                slot.flushed = false;
                slot.session.store_mut().prepare();
            }
        }
        if let Some(l) = &mut self.log {
            l.end_turn();
        }
        self.net.free.append(&mut self.net.free_later);
    }

    /// Resends in progress, and queued messages now in sequence, go on by one step each
    /// on a connection with room ([`RESEND_ROOM`]); one without room waits for the
    /// socket to take its output.
    fn continue_resends(&mut self) {
        for k in 0..self.slots.len() {
            if self.resend_has_room(k) {
                let slot = &mut self.slots[k];
                slot.session.handle_send_room(self.now);
                slot.touched = true;
            }
        }
    }

    /// Whether session `k` has a resend in progress (or queued messages in sequence) and
    /// its connection room for more.
    fn resend_has_room(&self, k: usize) -> bool {
        let slot = &self.slots[k];
        if !slot.session.resend_pending() && !slot.session.queue_pending() {
            return false;
        }
        let Some(c) = slot.conn else {
            return false;
        };
        matches!(
            self.net.conns.get(c.0),
            Some(Some(conn)) if conn.state == ConnState::Open
                && conn.wbuf.len() - conn.wpos < RESEND_ROOM
        )
    }

    pub(super) fn drain_touched(&mut self) {
        for _ in 0..MAX_DRAIN_ROUNDS {
            let mut any = false;
            for k in (0..self.slots.len()).map(SessionKey) {
                if self.slots[k.0].touched {
                    any = true;
                    self.drain(k);
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Handles every pending output of session `k`, in order.
    pub(super) fn drain(&mut self, k: SessionKey) {
        let key = k;
        let observe = self.app.observe_outgoing();
        loop {
            let Engine {
                app,
                slots,
                net,
                scratch,
                log,
                now,
                stop,
                ..
            } = self;
            let now = *now;
            // What to do once the session's borrow has ended.
            enum Then {
                Nothing,
                FromApp,
                FromAdmin,
                LoggedOn,
                LoggedOut,
                Note,
                Disconnect(ConnId),
            }
            let then = {
                let slot = &mut slots[k.0];
                slot.touched = false;
                slot.dirty = true;
                let conn_idx = slot.conn;
                let logged = slot.logged;
                let Some(out) = slot.session.poll_event() else {
                    return;
                };
                let then = match out {
                    Output::Send(bytes) => {
                        slot.counters.sent(bytes);
                        if let Some(c) = conn_idx {
                            if let Some(Some(conn)) = net.conns.get_mut(c.0) {
                                conn.wbuf.extend_from_slice(bytes);
                                if !conn.queued {
                                    conn.queued = true;
                                    net.write_list.push(c);
                                }
                            }
                        }
                        if logged {
                            if let Some(l) = log {
                                l.outgoing(k.0, now.as_nanos(), bytes);
                            }
                        }
                        if observe {
                            if let Ok(m) =
                                codec::parse_keeping_empty(bytes, &mut scratch.out_fields, false)
                            {
                                if is_admin_msg_type(m.msg_type()) {
                                    app.to_admin(key, &m);
                                } else {
                                    app.to_app(key, &m);
                                }
                            }
                        }
                        Then::Nothing
                    }
                    Output::Disconnect => match slot.conn.take() {
                        Some(c) => {
                            slot.counters.disconnects += 1;
                            Then::Disconnect(c)
                        }
                        None => Then::Nothing,
                    },
                    Output::Connect => {
                        if !net.connects.contains(&k) {
                            net.connects.push(k);
                        }
                        Then::Nothing
                    }
                    Output::Event(Event::FromApp(_)) => Then::FromApp,
                    Output::Event(Event::FromAdmin(_)) => Then::FromAdmin,
                    Output::Event(Event::LoggedOn) => Then::LoggedOn,
                    Output::Event(Event::LoggedOut) => Then::LoggedOut,
                    Output::Event(Event::Note(t)) => {
                        scratch.note.clear();
                        scratch.note.push_str(t);
                        Then::Note
                    }
                    _ => Then::Nothing,
                };
                if matches!(then, Then::FromApp | Then::FromAdmin) {
                    // The bytes, and the session's field table for them (handed over,
                    // not copied, when the event was the session's last output).
                    slot.session
                        .take_event_message(&mut scratch.msg, &mut scratch.msg_fields);
                }
                then
            };
            let mut ctx = Ctx {
                slots: &mut slots[..],
                now,
                stop,
            };
            match then {
                Then::Nothing => {}
                Then::FromApp | Then::FromAdmin => {
                    // The session's own parse of these bytes: no second parse.
                    let m = codec::MessageRef::from_parts(&scratch.msg, &scratch.msg_fields);
                    let is_app = matches!(then, Then::FromApp);
                    ctx.slots[k.0].counters.received(m.msg_type(), is_app);
                    if is_app {
                        app.from_app(&mut ctx, key, &m);
                    } else {
                        app.from_admin(&mut ctx, key, &m);
                    }
                    // Handed back and forth with the sessions' outboxes (which give
                    // back their own room past the same bounds): not a huge message's
                    // worth kept here.
                    if scratch.msg_fields.capacity() > tickwire_fix::session::KEEP_FIELDS {
                        scratch.msg_fields = Vec::new();
                    }
                    if scratch.msg.capacity() > 2 * tickwire_fix::session::KEEP_BYTES {
                        scratch.msg = Vec::new();
                    }
                }
                Then::LoggedOn => {
                    ctx.slots[k.0].counters.logons += 1;
                    app.on_logon(&mut ctx, key);
                }
                Then::LoggedOut => app.on_logout(&mut ctx, key),
                Then::Note => {
                    if slots[k.0].logged {
                        if let Some(l) = log {
                            l.event(k.0, now.as_nanos(), &scratch.note);
                        }
                    }
                    app.on_event(key, &scratch.note);
                }
                Then::Disconnect(c) => {
                    if let Some(Some(conn)) = net.conns.get_mut(c.0) {
                        conn.session = None;
                        conn.state = ConnState::Closing;
                        conn.since = now.as_nanos();
                        if !conn.queued {
                            conn.queued = true;
                            net.write_list.push(c);
                        }
                    }
                }
            }
        }
    }
}
