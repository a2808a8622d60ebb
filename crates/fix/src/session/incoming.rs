//! Received messages: parsing, QuickFIX's checks (`verify`) and one handler per
//! administrative message type, the out-of-sequence queue.

use super::*;

/// The header fields the session reads from every received message, found in one pass
/// (each the first occurrence of its tag, as `MessageRef::get` finds it).
#[derive(Clone, Copy, Default)]
pub(super) struct Received<'a> {
    sender_comp_id: Option<&'a [u8]>,
    target_comp_id: Option<&'a [u8]>,
    msg_seq_num: Option<&'a [u8]>,
    sending_time: Option<&'a [u8]>,
}

impl<'a> Received<'a> {
    pub(super) fn of(m: &MessageRef<'a>) -> Received<'a> {
        let mut r = Received::default();
        let mut missing = 4;
        for f in m.fields() {
            let slot = match f.tag {
                tag::SENDER_COMP_ID => &mut r.sender_comp_id,
                tag::TARGET_COMP_ID => &mut r.target_comp_id,
                tag::MSG_SEQ_NUM => &mut r.msg_seq_num,
                tag::SENDING_TIME => &mut r.sending_time,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(m.value(f));
                missing -= 1;
                if missing == 0 {
                    break;
                }
            }
        }
        r
    }
}

impl<S: MessageStore> Session<S> {
    /// QuickFIX `Session::next(string)`: parse, then check and dispatch.
    pub(super) fn process(&mut self, now: u64, raw: &[u8], queued: bool) -> StoreResult {
        let mut fields = self.fields_pool.pop().unwrap_or_default();
        let verify_checksum = self
            .validation
            .as_ref()
            .is_none_or(|v| v.options.validate_length_and_checksum);
        let parsed = if queued || !verify_checksum {
            codec::parse_unchecked(raw, &mut fields)
        } else {
            codec::parse(raw, &mut fields)
        };
        let r = match parsed {
            Ok(m) => self.process_message(now, &m, queued),
            // An empty value inside a repeating group is not QuickFIX's business
            // (only a dictionary tells where groups are).
            Err(e @ codec::ParseError::EmptyValue { .. })
                if self
                    .validation
                    .as_ref()
                    .is_some_and(|v| v.options.use_data_dictionary) =>
            {
                let verify = !queued && verify_checksum;
                let seq_empty =
                    matches!(e, codec::ParseError::EmptyValue { tag } if tag == tag::MSG_SEQ_NUM);
                match codec::parse_keeping_empty(raw, &mut fields, verify) {
                    // `34=` is dropped like a MsgSeqNum that is not a number (recorded:
                    // empty_values, QuickFIX's event "Incorrect data format for value").
                    Ok(m) if seq_empty || self.empty_values_only_in_groups(&m) => {
                        self.process_message(now, &m, queued)
                    }
                    _ => self.process_unparsable(now, raw, e, queued),
                }
            }
            Err(e) => self.process_unparsable(now, raw, e, queued),
        };
        fields.release_beyond(super::KEEP_FIELDS);
        self.fields_pool.push(fields);
        r
    }

    /// The SendingTime of `m` (None if absent or malformed), parsed once per message.
    fn sending_time(&mut self, m: &MessageRef<'_>) -> Option<u64> {
        let v = m.get(tag::SENDING_TIME)?;
        self.sending_times.parse(v)
    }

    fn empty_values_only_in_groups(&self, m: &MessageRef<'_>) -> bool {
        self.validation.as_ref().is_some_and(|v| {
            let app = app_dict(v, &self.target_appl_ver_id, m);
            validate::empty_values_only_in_groups(m, &Dictionaries::fixt(&v.transport, app))
        })
    }

    pub(super) fn process_unparsable(
        &mut self,
        now: u64,
        raw: &[u8],
        e: codec::ParseError,
        queued: bool,
    ) -> StoreResult {
        match e.session_reject_reason() {
            Some(reason) if !e.is_garbled() => {
                // A well-framed message with a bad field (tag 0, empty value, bad
                // data length): QuickFIX rejects it like its dictionary would.
                if !self.check_session_time(now) {
                    return self.reset_session(now);
                }
                let seq = scan_field(raw, tag::MSG_SEQ_NUM).and_then(codec::parse_u64);
                let msg_type = scan_field(raw, tag::MSG_TYPE).unwrap_or_default();
                let route = Route::of(|t| scan_field(raw, t));
                let r = RefMsg {
                    seq,
                    msg_type,
                    route,
                };
                self.reject_quiet(now, r, reason, e.tag().unwrap_or(0), true)?;
                self.after_message(now, queued)
            }
            _ => {
                self.note(format_args!("Invalid message: {e}"));
                if scan_field(raw, tag::MSG_TYPE) == Some(mt::LOGON) {
                    self.note(format_args!("Logon message is not valid"));
                    self.disconnect(now)
                } else if !queued && !self.is_logged_on() {
                    // QuickFIX's socket connection drops a connection that sends an
                    // invalid message before logging on.
                    self.disconnect(now)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// QuickFIX `Session::next(Message)`.
    pub(super) fn process_message(
        &mut self,
        now: u64,
        m: &MessageRef<'_>,
        queued: bool,
    ) -> StoreResult {
        if !self.check_session_time(now) {
            return self.reset_session(now);
        }
        if m.seq_num() == Some(u64::MAX) {
            return self.seq_num_exhausted(now);
        }
        self.dispatch(now, m)?;
        self.after_message(now, queued)
    }

    /// A message numbered 2^64-1, the last number there is: taken, it left the next
    /// expected number stuck there (saturating), and every later message with that
    /// number was taken as new — no duplicate or gap detection for the rest of the
    /// session (hostile-input pass, after a SequenceReset to it). Logged out and
    /// disconnected instead; the sequence numbers need a reset.
    fn seq_num_exhausted(&mut self, now: u64) -> StoreResult {
        let text = "MsgSeqNum 18446744073709551615 is the last there is: reset the \
                    session's sequence numbers";
        self.note(format_args!("{text}"));
        self.logout_msg(now, Some(text))?;
        self.disconnect(now)
    }

    pub(super) fn after_message(&mut self, now: u64, queued: bool) -> StoreResult {
        if !queued {
            self.next_queued(now)?;
        }
        if self.is_logged_on() {
            self.timer(now)?;
        }
        Ok(())
    }

    pub(super) fn dispatch(&mut self, now: u64, m: &MessageRef<'_>) -> StoreResult {
        let msg_type = m.msg_type();
        let h = Received::of(m);
        for (t, v) in [
            (tag::SENDER_COMP_ID, h.sender_comp_id),
            (tag::TARGET_COMP_ID, h.target_comp_id),
        ] {
            if v.is_none() {
                return self.field_not_found(now, m, t);
            }
        }
        if m.begin_string() != self.cfg.begin_string.as_bytes() {
            if msg_type == mt::LOGOUT {
                return self.on_logout(now, m);
            }
            self.logout_msg(now, Some("Incorrect BeginString"))?;
            return self.store.incr_next_target_seq();
        }
        if msg_type == mt::LOGON && self.ver.fixt {
            let Some(v) = m.get(tag::DEFAULT_APPL_VER_ID) else {
                return self.field_not_found(now, m, tag::DEFAULT_APPL_VER_ID);
            };
            // QuickFIX's `setTargetDefaultApplVerID`, before the Logon is validated:
            // the counterparty's application messages without an ApplVerID are
            // validated with this version's dictionary from now on. (Bounded by the
            // Logon's own length.)
            self.target_appl_ver_id.clear();
            self.target_appl_ver_id.extend_from_slice(v);
        }
        // Recorded QuickFIX behaviour (docs/fix/quickfix-behaviour.md): a message
        // without MsgSeqNum or SendingTime makes `verify` fail on a missing field, which
        // disconnects without a word; a MsgSeqNum that is not a number is dropped.
        let (Some(seq_value), Some(sending_value)) = (h.msg_seq_num, h.sending_time) else {
            self.note(format_args!("Field not found"));
            return self.disconnect(now);
        };
        let Some(seq) = codec::parse_u64(seq_value) else {
            let v = String::from_utf8_lossy(seq_value);
            self.note(format_args!("Incorrect data format for value: {v}"));
            return Ok(());
        };
        if let Some(v) = &self.validation {
            let dicts = Dictionaries::fixt(&v.transport, app_dict(v, &self.target_appl_ver_id, m));
            let shape = &mut self.validated_shape;
            if let Err(rej) = validate::validate_cached(m, &dicts, &v.options, shape) {
                return self.validation_failed(now, m, rej);
            }
        }
        // The checks QuickFIX's standard session dictionary makes: required header
        // fields, their formats, and the required fields of administrative messages.
        let Some(sending_time) = self.sending_times.parse(sending_value) else {
            let r = RefMsg::of(m);
            return self.reject_quiet(
                now,
                r,
                session_reject::INCORRECT_DATA_FORMAT,
                tag::SENDING_TIME,
                true,
            );
        };
        let required: &[u32] = match msg_type {
            mt::LOGON => &[tag::ENCRYPT_METHOD, tag::HEART_BT_INT],
            mt::TEST_REQUEST => &[tag::TEST_REQ_ID],
            mt::RESEND_REQUEST => &[tag::BEGIN_SEQ_NO, tag::END_SEQ_NO],
            mt::SEQUENCE_RESET => &[tag::NEW_SEQ_NO],
            mt::REJECT => &[tag::REF_SEQ_NUM],
            _ => &[],
        };
        for &t in required {
            if m.get(t).is_none() {
                return self.reject_quiet(
                    now,
                    RefMsg::of(m),
                    session_reject::REQUIRED_TAG_MISSING,
                    t,
                    true,
                );
            }
        }
        let integers: &[u32] = match msg_type {
            mt::LOGON => &[tag::HEART_BT_INT],
            mt::RESEND_REQUEST => &[tag::BEGIN_SEQ_NO, tag::END_SEQ_NO],
            mt::SEQUENCE_RESET => &[tag::NEW_SEQ_NO],
            _ => &[],
        };
        for &t in integers {
            if m.get_u64(t).is_none() {
                return self.reject_quiet(
                    now,
                    RefMsg::of(m),
                    session_reject::INCORRECT_DATA_FORMAT,
                    t,
                    true,
                );
            }
        }
        match msg_type {
            mt::LOGON => self.on_logon(now, m),
            mt::HEARTBEAT => {
                if self.verify_at(now, m, &h, sending_time, seq, true, true)? {
                    self.store.incr_next_target_seq()?;
                    self.next_queued(now)?;
                }
                Ok(())
            }
            mt::TEST_REQUEST => {
                if self.verify_at(now, m, &h, sending_time, seq, true, true)? {
                    self.heartbeat_msg(now, m.get(tag::TEST_REQ_ID))?;
                    self.store.incr_next_target_seq()?;
                    self.next_queued(now)?;
                }
                Ok(())
            }
            mt::SEQUENCE_RESET => self.on_sequence_reset(now, m),
            mt::LOGOUT => self.on_logout(now, m),
            mt::RESEND_REQUEST => self.on_resend_request(now, m),
            mt::REJECT => {
                if self.verify_at(now, m, &h, sending_time, seq, false, true)? {
                    self.store.incr_next_target_seq()?;
                    self.next_queued(now)?;
                }
                Ok(())
            }
            _ => {
                if self.verify_at(now, m, &h, sending_time, seq, true, true)? {
                    self.store.incr_next_target_seq()?;
                }
                Ok(())
            }
        }
    }

    /// Answers a dictionary validation failure as QuickFIX's `next(Message)` answers
    /// the corresponding exception.
    pub(super) fn validation_failed(
        &mut self,
        now: u64,
        m: &MessageRef<'_>,
        rej: validate::Reject,
    ) -> StoreResult {
        let r = RefMsg::of(m);
        let tag = rej.ref_tag.unwrap_or(0);
        if let Some(reason) = rej.business_reason {
            self.business_reject(now, r, reason, tag, true)
        } else if rej.reason == SessionRejectReason::Other {
            self.reject_with_text(now, r, rej.text, true)
        } else {
            self.reject_quiet(now, r, rej.reason.code(), tag, true)
        }
    }

    /// QuickFIX's `FieldNotFound` handling.
    pub(super) fn field_not_found(&mut self, now: u64, m: &MessageRef<'_>, t: u32) -> StoreResult {
        let r = RefMsg::of(m);
        if m.begin_string() >= b"FIX.4.2".as_slice() && !is_admin(r.msg_type) {
            self.business_reject(
                now,
                r,
                business_reject::CONDITIONALLY_REQUIRED_FIELD_MISSING,
                t,
                true,
            )
        } else {
            self.reject_quiet(now, r, session_reject::REQUIRED_TAG_MISSING, t, true)?;
            if r.msg_type == mt::LOGON {
                self.note(format_args!("Required field missing from logon"));
                self.disconnect(now)?;
            }
            Ok(())
        }
    }

    pub(super) fn valid_logon_state(&self, msg_type: &[u8]) -> bool {
        let logon = msg_type == mt::LOGON;
        let (handshake, reset) = (self.handshake(), self.reset_flag());
        (logon && reset.sent())
            || reset.received()
            || (logon && !handshake.received())
            || (!logon && handshake.received())
            || (msg_type == mt::LOGOUT && handshake.sent())
            || (msg_type != mt::LOGOUT && self.logout_sent())
            || msg_type == mt::SEQUENCE_RESET
            || msg_type == mt::REJECT
    }

    /// QuickFIX `Session::verify`: logon state, SendingTime, CompIDs, sequence
    /// number; on success records the receipt and hands the message to the
    /// application. Returns false when the message must not be processed further.
    pub(super) fn verify(
        &mut self,
        now: u64,
        m: &MessageRef<'_>,
        check_too_high: bool,
        check_too_low: bool,
    ) -> Result<bool, StoreError> {
        let h = Received::of(m);
        let sending_time = self.sending_time(m).unwrap_or(0);
        let seq = m.seq_num().unwrap_or(0);
        self.verify_at(now, m, &h, sending_time, seq, check_too_high, check_too_low)
    }

    /// [`Session::verify`] with the message's header fields already found (`h`) and its
    /// SendingTime and MsgSeqNum already parsed (0 when they do not parse).
    #[allow(clippy::too_many_arguments)] // the message's parsed header, passed by value
    pub(super) fn verify_at(
        &mut self,
        now: u64,
        m: &MessageRef<'_>,
        h: &Received<'_>,
        sending_time: u64,
        seq: u64,
        check_too_high: bool,
        check_too_low: bool,
    ) -> Result<bool, StoreError> {
        let msg_type = m.msg_type();
        if !self.valid_logon_state(msg_type) {
            self.note(format_args!("Logon state is not valid for message"));
            self.disconnect(now)?;
            return Ok(false);
        }
        if self.cfg.check_latency
            && secs_between(now, sending_time).unsigned_abs() > u64::from(self.cfg.max_latency)
        {
            if self.reject(
                now,
                RefMsg::of(m),
                session_reject::SENDING_TIME_ACCURACY,
                0,
                true,
            )? {
                self.logout_msg(now, None)?;
            } else {
                self.disconnect(now)?;
            }
            return Ok(false);
        }
        if self.cfg.check_comp_id
            && (h.sender_comp_id != Some(self.cfg.target_comp_id.as_bytes())
                || h.target_comp_id != Some(self.cfg.sender_comp_id.as_bytes()))
        {
            if self.reject(now, RefMsg::of(m), session_reject::COMPID_PROBLEM, 0, true)? {
                self.logout_msg(now, None)?;
            } else {
                self.disconnect(now)?;
            }
            return Ok(false);
        }
        let expected = self.store.next_target_seq();
        if check_too_high && seq > expected {
            self.target_too_high(now, m, seq)?;
            return Ok(false);
        } else if check_too_low && seq < expected {
            self.target_too_low(now, m, seq)?;
            return Ok(false);
        }
        if check_too_high || check_too_low {
            if let Some(r) = self.resend {
                if seq >= r.end {
                    if r.end < r.gap_end && self.cfg.resend_request_chunk_size > 0 {
                        let begin = r.end.saturating_add(1);
                        let end = r.gap_end.min(r.end + self.cfg.resend_request_chunk_size);
                        self.resend_request_msg(now, begin, end, r.gap_end)?;
                    } else {
                        self.note(format_args!(
                            "ResendRequest for messages FROM: {} TO: {} has been satisfied.",
                            r.begin, r.end
                        ));
                        self.resend = None;
                    }
                }
            }
        }
        self.last_received = now;
        self.test_requests = 0;
        if is_admin(msg_type) {
            self.out.deliver_admin(m);
        } else {
            self.out.deliver_app(m);
        }
        Ok(true)
    }

    pub(super) fn target_too_high(
        &mut self,
        now: u64,
        m: &MessageRef<'_>,
        seq: u64,
    ) -> StoreResult {
        let expected = self.store.next_target_seq();
        self.note(format_args!(
            "MsgSeqNum too high, expecting {expected} but received {seq}"
        ));
        self.enqueue(seq, m.raw());
        if self.queue.contains_key(&expected) {
            // The gap is in the queue, being processed a step at a time: nothing to ask.
            self.note(format_args!(
                "Queued messages from {expected} are being processed.  Not sending ResendRequest."
            ));
            return Ok(());
        }
        if let Some(r) = self.resend {
            if !self.cfg.send_redundant_resend_requests && seq >= r.begin {
                self.note(format_args!(
                    "Already sent ResendRequest FROM: {} TO: {}.  Not sending another.",
                    r.begin, r.end
                ));
                return Ok(());
            }
        }
        let begin = expected;
        let gap_end = seq.saturating_sub(1);
        self.resend_request_msg(now, begin, self.resend_end(begin, gap_end), gap_end)
    }

    /// The EndSeqNo of a ResendRequest from `begin` for a gap up to `gap_end`: the
    /// first chunk's end with ResendRequestChunkSize, else open (0; 999999 before
    /// FIX 4.2).
    fn resend_end(&self, begin: u64, gap_end: u64) -> u64 {
        let chunk = self.cfg.resend_request_chunk_size;
        if chunk > 0 {
            gap_end.min(begin.saturating_add(chunk - 1))
        } else if self.ver.ge42 {
            0
        } else {
            999_999
        }
    }

    pub(super) fn enqueue(&mut self, seq: u64, raw: &[u8]) {
        let replaced = self.queue.get(&seq).map_or(0, Vec::len);
        if (replaced == 0 && self.queue.len() >= MAX_QUEUED)
            || self.queued_bytes - replaced + raw.len() > MAX_QUEUED_BYTES
        {
            // Not queued: asked for again when the drain reaches it (`ask_for_dropped`).
            self.queue_dropped = Some(
                self.queue_dropped
                    .map_or((seq, seq), |(lo, hi)| (lo.min(seq), hi.max(seq))),
            );
            return;
        }
        let mut buf = self.spare_bufs.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(raw);
        self.queued_bytes += raw.len();
        if let Some(old) = self.queue.insert(seq, buf) {
            self.queued_bytes -= old.len();
            self.recycle(old);
        }
    }

    pub(super) fn target_too_low(&mut self, now: u64, m: &MessageRef<'_>, seq: u64) -> StoreResult {
        if m.get_bool(tag::POSS_DUP_FLAG) != Some(true) {
            let expected = self.store.next_target_seq();
            let mut text = std::mem::take(&mut self.text);
            text.clear();
            use std::fmt::Write as _;
            let _ = write!(
                text,
                "MsgSeqNum too low, expecting {expected} but received {seq}"
            );
            let r = self.logout_msg(now, Some(&text));
            self.note(format_args!("{text}"));
            self.text = text;
            r?;
            return self.disconnect(now);
        }
        // PossDupFlag=Y: a duplicate; check OrigSendingTime and ignore it. (A resend
        // is in progress: `dropped_ask_due` waits for it.)
        self.resend_seen = true;
        if m.msg_type() == mt::SEQUENCE_RESET {
            return Ok(());
        }
        let r = RefMsg::of(m);
        let sending = self.sending_time(m).unwrap_or(0);
        let sent = match m
            .get(tag::ORIG_SENDING_TIME)
            .map(codec::parse_utc_timestamp)
        {
            None => {
                let t = tag::ORIG_SENDING_TIME;
                self.reject(now, r, session_reject::REQUIRED_TAG_MISSING, t, true)?
            }
            Some(None) => {
                let t = tag::ORIG_SENDING_TIME;
                self.reject(now, r, session_reject::INCORRECT_DATA_FORMAT, t, true)?
            }
            Some(Some(orig)) if orig > sending => {
                let sent = self.reject(now, r, session_reject::SENDING_TIME_ACCURACY, 0, true)?;
                if sent {
                    self.logout_msg(now, None)?;
                }
                sent
            }
            Some(Some(_)) => true,
        };
        if !sent {
            // QuickFIX cannot reject before Logon and disconnects instead.
            self.disconnect(now)?;
        }
        Ok(())
    }

    /// Processes queued messages that are now in sequence (QuickFIX `nextQueued`),
    /// iteratively: a nested call while draining returns at once and the outer loop
    /// carries on.
    pub(super) fn next_queued(&mut self, now: u64) -> StoreResult {
        // Only a connection has a queue (it is emptied when the connection goes).
        match self.connection_mut() {
            Some(c) if c.queue == Drain::Idle => c.queue = Drain::Running,
            _ => return Ok(()),
        }
        let r = self.drain_queue(now);
        if let Some(c) = self.connection_mut() {
            c.queue = Drain::Idle;
        }
        r
    }

    pub(super) fn drain_queue(&mut self, now: u64) -> StoreResult {
        while self.queue_budget > 0 {
            self.queue_budget -= 1;
            let expected = self.store.next_target_seq();
            let Some(buf) = self.queue.remove(&expected) else {
                return self.ask_for_dropped(now, expected);
            };
            self.queued_bytes -= buf.len();
            self.note(format_args!("Processing QUEUED message: {expected}"));
            let msg_type = scan_field(&buf, tag::MSG_TYPE);
            let r = if msg_type == Some(mt::LOGON) || msg_type == Some(mt::RESEND_REQUEST) {
                self.store.incr_next_target_seq()
            } else {
                self.process(now, &buf, true)
            };
            self.recycle(buf);
            r?;
            if !self.is_connected() {
                return Ok(());
            }
        }
        // More may be in sequence: they go on at the next `handle_send_room`. If not,
        // the budget ran out exactly where the queue ends (review: the drain then never
        // came back to `ask_for_dropped`).
        let expected = self.store.next_target_seq();
        if !self.queue.contains_key(&expected) {
            return self.ask_for_dropped(now, expected);
        }
        Ok(())
    }

    /// The drain stopped at `expected`, which the queue does not hold. When the full
    /// queue refused messages numbered `expected` or above, they are asked for again
    /// if the expected number stands still for [`super::DROPPED_ASK_WAIT`] (QuickFIX's
    /// queue drops nothing; here the counterparty may send nothing more, and a
    /// hostile-input pass saw a session sit 21 s at such a hole, a TestRequest in it
    /// unanswered). A counterparty answering an open-ended ResendRequest resends them
    /// anyway and moves the number on meanwhile: it is not asked twice. Not while a
    /// ResendRequest is outstanding.
    fn ask_for_dropped(&mut self, now: u64, expected: u64) -> StoreResult {
        let Some((low, top)) = self.queue_dropped else {
            return Ok(());
        };
        if top < expected {
            self.queue_dropped = None;
            self.dropped_ask = None;
            return Ok(());
        }
        // A gap below what was refused, or one a ResendRequest is out for, is not
        // this one (the usual too-high handling asks for it).
        if expected < low || self.resend.is_some() {
            return Ok(());
        }
        if self.dropped_ask.is_none() {
            self.dropped_ask = Some((now.saturating_add(super::DROPPED_ASK_WAIT), expected));
            // Only a resent message from now on says a resend is under way.
            self.resend_seen = false;
        }
        Ok(())
    }

    /// The wait of [`Session::ask_for_dropped`] is over: asks for the refused messages
    /// if the expected number has not moved, else waits again.
    pub(super) fn dropped_ask_due(&mut self, now: u64) -> StoreResult {
        let Some((_, armed_at)) = self.dropped_ask.take() else {
            return Ok(());
        };
        let expected = self.store.next_target_seq();
        let Some((_, top)) = self.queue_dropped else {
            return Ok(());
        };
        if top < expected {
            self.queue_dropped = None;
            return Ok(());
        }
        let resending = std::mem::take(&mut self.resend_seen);
        if expected != armed_at
            || resending
            || self.resend.is_some()
            || self.queue.contains_key(&expected)
        {
            // Moving, or being resent, or asked for already, or in the queue: look
            // again later.
            self.dropped_ask = Some((now.saturating_add(super::DROPPED_ASK_WAIT), expected));
            return Ok(());
        }
        self.queue_dropped = None;
        self.note(format_args!(
            "Messages up to {top} were not queued (queue full): asking again from {expected}"
        ));
        self.resend_request_msg(now, expected, self.resend_end(expected, top), top)
    }

    /// Whether queued messages are in sequence now and wait to be processed (the
    /// driver calls [`super::Session::handle_send_room`] when the connection has room).
    pub fn queue_pending(&self) -> bool {
        self.is_connected() && self.queue.contains_key(&self.store.next_target_seq())
    }

    pub(super) fn on_logon(&mut self, now: u64, m: &MessageRef<'_>) -> StoreResult {
        if !self.is_enabled() {
            self.note(format_args!("Session is not enabled for logon"));
            return self.disconnect(now);
        }
        if !self.is_session_time(now) {
            self.note(format_args!("Received logon outside of valid logon time"));
            return self.disconnect(now);
        }
        let reset = m.get_bool(tag::RESET_SEQ_NUM_FLAG) == Some(true);
        self.set_reset_flag(|f| f.with_received(reset));
        if reset {
            self.note(format_args!(
                "Logon contains ResetSeqNumFlag=Y, reseting sequence numbers to 1"
            ));
            if !self.reset_flag().sent() {
                self.store.reset(now)?;
            }
            // Numbers refused under the old numbering are not asked for in the new.
            self.queue_dropped = None;
            self.dropped_ask = None;
            self.resend_seen = false;
        }
        let initiator = self.cfg.role == Role::Initiator;
        if initiator && !self.handshake().sent() && !reset {
            self.note(format_args!(
                "Received logon response before sending request"
            ));
            return self.disconnect(now);
        }
        if !initiator && self.cfg.reset_on_logon {
            self.store.reset(now)?;
        }
        if !self.verify(now, m, false, true)? {
            return Ok(());
        }
        if self.ver.fixt && self.cfg.adopt_counterparty_default_appl_ver_id {
            // Where QuickFIX's acceptance-test application does it: in `fromAdmin`,
            // which `verify` calls, before the Logon is answered. A UTF-8 value only
            // (it is written back as is); bounded by the Logon's own length.
            if let Some(v) = m
                .get(tag::DEFAULT_APPL_VER_ID)
                .and_then(|v| std::str::from_utf8(v).ok())
            {
                self.sender_appl_ver_id.clear();
                self.sender_appl_ver_id.push_str(v);
            }
        }
        if let Some(c) = self.connection_mut() {
            c.logon = c.logon.with_received(true);
        }

        let next_sender = self.store.next_sender_seq();
        let mut retransmit_from = None;
        if let Some(n) = m.get_u64(tag::NEXT_EXPECTED_MSG_SEQ_NUM) {
            if n < next_sender {
                retransmit_from = Some(n);
            } else if n > next_sender {
                let mut text = std::mem::take(&mut self.text);
                text.clear();
                use std::fmt::Write as _;
                let _ = write!(
                    text,
                    "NextExpectedMsgSeqNum too high, expecting {next_sender} but received {n}"
                );
                self.note(format_args!("{text}"));
                let r = self.logout_msg(now, Some(&text));
                self.text = text;
                r?;
                return self.disconnect(now);
            }
        }

        if !initiator || (reset && !self.reset_flag().sent()) {
            if let Some(h) = m.get_u64(tag::HEART_BT_INT) {
                // Bounded so that timer arithmetic cannot overflow on hostile input.
                self.heart_bt_int = h.min(u64::from(u32::MAX));
            }
            self.note(format_args!("Received logon request"));
            self.logon_response_msg(now, m.get_u64(tag::HEART_BT_INT).unwrap_or(0))?;
            self.note(format_args!("Responding to logon request"));
        } else {
            self.note(format_args!("Received logon response"));
        }
        self.set_reset_flag(|_| Sides::NONE);

        let seq = m.seq_num().unwrap_or(0);
        let expected = self.store.next_target_seq();
        if seq > expected && !reset {
            if self.cfg.send_next_expected_msg_seq_num {
                self.note(format_args!(
                    "Expecting retransmits FROM: {expected} TO: {}",
                    seq.saturating_sub(1)
                ));
                self.enqueue(seq, m.raw());
                self.resend = Some(ResendRange {
                    begin: expected,
                    end: seq.saturating_sub(1),
                    gap_end: seq.saturating_sub(1),
                });
            } else {
                self.target_too_high(now, m, seq)?;
            }
        } else {
            self.store.incr_next_target_seq()?;
            self.next_queued(now)?;
        }

        if self.is_logged_on() {
            self.out.logged_on();
        }

        if let Some(begin) = retransmit_from {
            let next = self.store.next_sender_seq();
            let end = next.saturating_sub(1);
            self.note(format_args!(
                "Sending retransmits due to received NextExpectedMsgSeqNum is too low. FROM: {begin} TO: {end}"
            ));
            if self.cfg.persist_messages {
                self.retransmit(now, begin, end)?;
            } else {
                self.gap_fill_msg(now, begin, end.saturating_add(1).min(next))?;
            }
        }
        Ok(())
    }

    pub(super) fn on_logout(&mut self, now: u64, m: &MessageRef<'_>) -> StoreResult {
        if !self.verify(now, m, false, false)? {
            return Ok(());
        }
        if !self.logout_sent() {
            self.note(format_args!("Received logout request"));
            self.logout_msg(now, None)?;
            self.note(format_args!("Sending logout response"));
        } else {
            self.note(format_args!("Received logout response"));
        }
        self.store.incr_next_target_seq()?;
        if self.cfg.reset_on_logout {
            self.store.reset(now)?;
        }
        self.disconnect(now)
    }

    pub(super) fn on_sequence_reset(&mut self, now: u64, m: &MessageRef<'_>) -> StoreResult {
        let gap_fill = m.get_bool(tag::GAP_FILL_FLAG) == Some(true);
        if !self.verify(now, m, gap_fill, gap_fill)? {
            return Ok(());
        }
        if let Some(new_seq) = m.get_u64(tag::NEW_SEQ_NO) {
            let expected = self.store.next_target_seq();
            self.note(format_args!(
                "Received SequenceReset FROM: {expected} TO: {new_seq}"
            ));
            if new_seq > expected {
                self.store.set_next_target_seq(new_seq)?;
                if !gap_fill && self.queue_dropped.is_some_and(|(_, top)| new_seq > top) {
                    // A reset past everything the full queue refused: not asked for
                    // again (a jump into the range leaves the rest to be asked for).
                    self.queue_dropped = None;
                    self.dropped_ask = None;
                    self.resend_seen = false;
                }
            } else if new_seq < expected {
                self.reject_quiet(
                    now,
                    RefMsg::of(m),
                    session_reject::VALUE_IS_INCORRECT,
                    0,
                    true,
                )?;
            }
        }
        Ok(())
    }

    pub(super) fn on_resend_request(&mut self, now: u64, m: &MessageRef<'_>) -> StoreResult {
        if !self.verify(now, m, false, false)? {
            return Ok(());
        }
        let begin = m.get_u64(tag::BEGIN_SEQ_NO).unwrap_or(0);
        let mut end = m.get_u64(tag::END_SEQ_NO).unwrap_or(0);
        self.note(format_args!(
            "Received ResendRequest FROM: {begin} TO: {end}"
        ));
        let next = self.store.next_sender_seq();
        if (self.ver.ge42 && end == 0) || (self.ver.le42 && end == 999_999) || end >= next {
            end = next.saturating_sub(1);
        }
        if self.cfg.persist_messages {
            self.retransmit(now, begin, end)?;
        } else {
            self.gap_fill_msg(now, begin, end.saturating_add(1).min(next))?;
        }
        let seq = m.seq_num().unwrap_or(0);
        if seq == self.store.next_target_seq() {
            self.store.incr_next_target_seq()?;
        }
        Ok(())
    }
}

/// The application dictionary `m` is validated with (QuickFIX's `Session::next`): for
/// FIXT, the one of its ApplVerID (1128), else of the counterparty's DefaultApplVerID
/// (`target`); the default one when that version has none, and for FIX.4.x (one
/// test, inlined: the selection is out of line).
#[inline(always)]
pub(super) fn app_dict<'v>(v: &'v Validation, target: &[u8], m: &MessageRef<'_>) -> &'v Dictionary {
    if v.by_appl_ver_id.is_empty() {
        &v.app
    } else {
        select_app_dict(v, target, m)
    }
}

#[inline(never)]
fn select_app_dict<'v>(v: &'v Validation, target: &[u8], m: &MessageRef<'_>) -> &'v Dictionary {
    v.app_for(m.get(tag::APPL_VER_ID).unwrap_or(target))
}
