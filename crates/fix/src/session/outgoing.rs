//! Messages the session generates: header in QuickFIX's order, storing and
//! sequence numbering (QuickFIX `sendRaw`), and one builder per message type.

use super::*;

impl<S: MessageStore> Session<S> {
    /// Starts a message: 35 and the header fields we own, in tag order.
    pub(super) fn header(
        &mut self,
        now: u64,
        msg_type: &[u8],
        seq: u64,
        poss_dup: bool,
        orig: Option<u64>,
    ) {
        self.last_sent = now;
        let enc = &mut self.enc;
        let cfg = &self.cfg;
        enc.begin(msg_type);
        enc.field_u64(tag::MSG_SEQ_NUM, seq);
        if poss_dup {
            enc.field(tag::POSS_DUP_FLAG, b"Y");
        }
        enc.field_str(tag::SENDER_COMP_ID, &cfg.sender_comp_id);
        if let Some(v) = &cfg.sender_sub_id {
            enc.field_str(tag::SENDER_SUB_ID, v);
        }
        enc.field_timestamp(tag::SENDING_TIME, now, self.precision);
        enc.field_str(tag::TARGET_COMP_ID, &cfg.target_comp_id);
        if let Some(v) = &cfg.target_sub_id {
            enc.field_str(tag::TARGET_SUB_ID, v);
        }
        if let Some(o) = orig {
            enc.field_timestamp(tag::ORIG_SENDING_TIME, o, self.precision);
        }
        if let Some(v) = &cfg.sender_location_id {
            enc.field_str(tag::SENDER_LOCATION_ID, v);
        }
        if let Some(v) = &cfg.target_location_id {
            enc.field_str(tag::TARGET_LOCATION_ID, v);
        }
    }

    /// QuickFIX `sendRaw` for an administrative message with a new sequence number:
    /// store it, consume the number, transmit it if allowed.
    pub(super) fn finish_admin(&mut self, seq: u64, always_send: bool) -> StoreResult {
        let msg = self.enc.finish();
        if self.cfg.persist_messages {
            self.store.save(seq, msg)?;
        }
        self.store.incr_next_sender_seq()?;
        // The link's fields, not its methods: `msg` borrows the encoder.
        if matches!(&self.link, Link::Up(c) if always_send || c.logon.both()) {
            self.out.send(msg);
        }
        Ok(())
    }

    /// QuickFIX `sendRaw` for an application message.
    pub(super) fn finish_app(&mut self, seq: u64) -> StoreResult {
        let msg = self.enc.finish();
        if self.cfg.persist_messages {
            self.store.save(seq, msg)?;
        }
        self.store.incr_next_sender_seq()?;
        if matches!(&self.link, Link::Up(c) if c.logon.both()) {
            self.out.send(msg);
        }
        Ok(())
    }

    pub(super) fn should_send_reset(&self) -> bool {
        self.ver.ge41
            && (self.cfg.reset_on_logon || self.cfg.reset_on_logout || self.cfg.reset_on_disconnect)
            && self.store.next_sender_seq() == 1
            && self.store.next_target_seq() == 1
    }

    /// Our Logon as initiator (QuickFIX `generateLogon()`).
    pub(super) fn logon_msg(&mut self, now: u64) -> StoreResult {
        if self.cfg.reset_on_logon {
            self.store.reset(now)?;
        }
        let reset = self.should_send_reset();
        if reset && !self.reset_flag().received() {
            self.store.reset(now)?;
        }
        if !self.reset_flag().received() {
            self.set_reset_flag(|f| f.with_sent(reset));
        }
        let expected = self.store.next_target_seq();
        let seq = self.write_logon(now, self.heart_bt_int, reset, expected);
        self.last_received = now;
        self.test_requests = 0;
        if let Some(c) = self.connection_mut() {
            c.logon = c.logon.with_sent(true);
        }
        self.finish_admin(seq, true)
    }

    /// Encodes a Logon (header and body, application extras in QuickFIX's order) and
    /// returns its sequence number: ResetSeqNumFlag=Y with `reset`,
    /// NextExpectedMsgSeqNum `next_expected` when configured.
    fn write_logon(&mut self, now: u64, heart_bt_int: u64, reset: bool, next_expected: u64) -> u64 {
        let seq = self.store.next_sender_seq();
        self.header(now, mt::LOGON, seq, false, None);
        let mut extra = 0;
        self.logon_extras(&mut extra, tag::ENCRYPT_METHOD);
        self.enc.field(tag::ENCRYPT_METHOD, b"0");
        self.logon_extras(&mut extra, tag::HEART_BT_INT);
        self.enc.field_u64(tag::HEART_BT_INT, heart_bt_int);
        if reset {
            self.logon_extras(&mut extra, tag::RESET_SEQ_NUM_FLAG);
            self.enc.field(tag::RESET_SEQ_NUM_FLAG, b"Y");
        }
        if self.cfg.send_next_expected_msg_seq_num {
            self.logon_extras(&mut extra, tag::NEXT_EXPECTED_MSG_SEQ_NUM);
            self.enc
                .field_u64(tag::NEXT_EXPECTED_MSG_SEQ_NUM, next_expected);
        }
        if self.ver.fixt {
            self.logon_extras(&mut extra, tag::DEFAULT_APPL_VER_ID);
            self.enc
                .field_str(tag::DEFAULT_APPL_VER_ID, &self.sender_appl_ver_id);
        }
        self.logon_extras(&mut extra, u32::MAX);
        seq
    }

    /// Our Logon answering the counterparty's (QuickFIX `generateLogon(Message)`).
    pub(super) fn logon_response_msg(&mut self, now: u64, heart_bt_int: u64) -> StoreResult {
        let reset = self.reset_flag().received();
        if !reset {
            self.set_reset_flag(|f| f.with_sent(false));
        }
        // +1: the incoming Logon has not been counted yet.
        let expected = self.store.next_target_seq().saturating_add(1);
        let seq = self.write_logon(now, heart_bt_int, reset, expected);
        self.finish_admin(seq, true)?;
        if let Some(c) = self.connection_mut() {
            c.logon = c.logon.with_sent(true);
        }
        Ok(())
    }

    /// Writes the configured extra Logon fields (sorted by tag) with tags below
    /// `below`, continuing from index `next`: the Logon body stays in tag order.
    pub(super) fn logon_extras(&mut self, next: &mut usize, below: u32) {
        while let Some((t, v)) = self.cfg.logon_fields.get(*next) {
            if *t >= below {
                break;
            }
            self.enc.field_str(*t, v);
            *next += 1;
        }
    }

    pub(super) fn logout_msg(&mut self, now: u64, text: Option<&str>) -> StoreResult {
        let seq = self.store.next_sender_seq();
        self.header(now, mt::LOGOUT, seq, false, None);
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            self.enc.field_str(tag::TEXT, t);
        }
        self.finish_admin(seq, true)?;
        if let Some(c) = self.connection_mut() {
            c.logout = Logout::Sent;
        }
        Ok(())
    }

    pub(super) fn heartbeat_msg(&mut self, now: u64, test_req_id: Option<&[u8]>) -> StoreResult {
        let seq = self.store.next_sender_seq();
        self.header(now, mt::HEARTBEAT, seq, false, None);
        if let Some(id) = test_req_id {
            self.enc.field(tag::TEST_REQ_ID, id);
        }
        self.finish_admin(seq, false)
    }

    pub(super) fn test_request_msg(&mut self, now: u64, id: &[u8]) -> StoreResult {
        let seq = self.store.next_sender_seq();
        self.header(now, mt::TEST_REQUEST, seq, false, None);
        self.enc.field(tag::TEST_REQ_ID, id);
        self.finish_admin(seq, false)
    }

    /// ResendRequest for `begin..=end` (end 0/999999: to infinity) while the gap to
    /// fill ends at `gap_end`.
    pub(super) fn resend_request_msg(
        &mut self,
        now: u64,
        begin: u64,
        end: u64,
        gap_end: u64,
    ) -> StoreResult {
        let seq = self.store.next_sender_seq();
        self.header(now, mt::RESEND_REQUEST, seq, false, None);
        self.enc.field_u64(tag::BEGIN_SEQ_NO, begin);
        self.enc.field_u64(tag::END_SEQ_NO, end);
        self.finish_admin(seq, true)?;
        self.note(format_args!("Sent ResendRequest FROM: {begin} TO: {end}"));
        let chunk_end = if end == 0 || end == 999_999 {
            gap_end
        } else {
            end
        };
        self.resend = Some(ResendRange {
            begin,
            end: chunk_end,
            gap_end,
        });
        Ok(())
    }

    /// SequenceReset-GapFill with MsgSeqNum `begin` and NewSeqNo `new_seq`
    /// (QuickFIX `generateSequenceReset`): not stored, no sequence number consumed.
    pub(super) fn gap_fill_msg(&mut self, now: u64, begin: u64, new_seq: u64) -> StoreResult {
        self.header(now, mt::SEQUENCE_RESET, begin, true, Some(now));
        self.enc.field_u64(tag::NEW_SEQ_NO, new_seq);
        self.enc.field(tag::GAP_FILL_FLAG, b"Y");
        let msg = self.enc.finish();
        if matches!(self.link, Link::Up(_)) {
            self.out.send(msg);
        }
        self.note(format_args!("Sent SequenceReset TO: {new_seq}"));
        Ok(())
    }

    /// QuickFIX `generateReject(message, err, field)`; `consume` says whether the
    /// rejected message's sequence number is consumed here (false when the
    /// application rejects a message the session already counted).
    /// Returns false when nothing could be sent because no Logon was received
    /// (QuickFIX throws there, which makes `verify` disconnect).
    pub(super) fn reject(
        &mut self,
        now: u64,
        r: RefMsg<'_>,
        err: u32,
        field: u32,
        consume: bool,
    ) -> Result<bool, StoreError> {
        let expected = self.store.next_target_seq();
        if consume
            && r.msg_type != mt::LOGON
            && r.msg_type != mt::SEQUENCE_RESET
            && r.seq == Some(expected)
        {
            self.store.incr_next_target_seq()?;
        }
        let reason = session_reject::text(err);
        let seq_txt = SeqText(r.seq);
        match reason {
            Some(t) if field != 0 || err == session_reject::INVALID_TAG_NUMBER => {
                let field = field as i32;
                self.note(format_args!("Message {seq_txt} Rejected: {t}:{field}"))
            }
            Some(t) => self.note(format_args!("Message {seq_txt} Rejected: {t}")),
            None => self.note(format_args!("Message {seq_txt} Rejected")),
        }
        if !self.handshake().received() {
            self.note(format_args!("Tried to send a reject while not logged on"));
            return Ok(false);
        }
        let seq = self.store.next_sender_seq();
        self.header(now, mt::REJECT, seq, false, None);
        self.reverse_route(&r.route);
        if let Some(s) = r.seq {
            self.enc.field_u64(tag::REF_SEQ_NUM, s);
        }
        let with_field =
            reason.is_some() && (field != 0 || err == session_reject::INVALID_TAG_NUMBER);
        if let Some(t) = reason {
            if with_field && !self.ver.ge42 {
                self.write_text_with_field(t, field);
            } else {
                self.enc.field_str(tag::TEXT, t);
            }
        }
        if with_field && self.ver.ge42 {
            // A tag QuickFIX read as a negative `int` (see codec::quickfix_tag_number)
            // is written as that number; every real tag is below 2^31.
            self.enc.field_i64(tag::REF_TAG_ID, i64::from(field as i32));
        }
        if self.ver.ge42 {
            if !r.msg_type.is_empty() {
                self.enc.field(tag::REF_MSG_TYPE, r.msg_type);
            }
            if self.ver.gt42 || err <= session_reject::INVALID_MSG_TYPE {
                self.enc
                    .field_u64(tag::SESSION_REJECT_REASON, u64::from(err));
            }
        }
        self.finish_admin(seq, false)?;
        Ok(true)
    }

    /// The rejected message's routing fields, reversed (recorded: `reverse_route`,
    /// `reverse_route_empty`; QuickFIX 1.15 does this on session Rejects only, not on
    /// Heartbeats, BusinessMessageRejects or Logouts).
    fn reverse_route(&mut self, route: &Route<'_>) {
        for (t, v) in route.reversed(self.ver.ge41) {
            if !v.is_empty() {
                self.enc.field(t, v);
            }
        }
    }

    /// [`Session::reject`] where QuickFIX only logs a failure to reject before Logon.
    pub(super) fn reject_quiet(
        &mut self,
        now: u64,
        r: RefMsg<'_>,
        err: u32,
        field: u32,
        consume: bool,
    ) -> StoreResult {
        self.reject(now, r, err, field, consume).map(|_| ())
    }

    /// QuickFIX `generateReject(message, text)` (before FIX.4.2: unsupported type).
    pub(super) fn reject_with_text(
        &mut self,
        now: u64,
        r: RefMsg<'_>,
        text: &str,
        consume: bool,
    ) -> StoreResult {
        if consume && r.msg_type != mt::LOGON && r.msg_type != mt::SEQUENCE_RESET {
            self.store.incr_next_target_seq()?;
        }
        let seq = self.store.next_sender_seq();
        self.header(now, mt::REJECT, seq, false, None);
        self.reverse_route(&r.route);
        self.enc.field_u64(tag::REF_SEQ_NUM, r.seq.unwrap_or(0));
        self.enc.field_str(tag::TEXT, text);
        if self.ver.ge42 {
            self.enc.field(tag::REF_MSG_TYPE, r.msg_type);
        }
        self.finish_admin(seq, false)?;
        self.note(format_args!("Message {} Rejected: {text}", SeqText(r.seq)));
        Ok(())
    }

    /// QuickFIX `generateBusinessReject`.
    pub(super) fn business_reject(
        &mut self,
        now: u64,
        r: RefMsg<'_>,
        err: u32,
        field: u32,
        consume: bool,
    ) -> StoreResult {
        if consume {
            self.store.incr_next_target_seq()?;
        }
        let reason = business_reject::text(err);
        let seq_txt = SeqText(r.seq);
        match reason {
            Some(t) if field != 0 => {
                self.note(format_args!("Message {seq_txt} Rejected: {t}:{field}"))
            }
            Some(t) => self.note(format_args!("Message {seq_txt} Rejected: {t}")),
            None => self.note(format_args!("Message {seq_txt} Rejected")),
        }
        if !self.is_logged_on() && self.should_send_reset() {
            return Ok(());
        }
        let seq = self.store.next_sender_seq();
        self.header(now, mt::BUSINESS_REJECT, seq, false, None);
        self.enc.field_u64(tag::REF_SEQ_NUM, r.seq.unwrap_or(0));
        if let Some(t) = reason {
            if field != 0 {
                self.write_text_with_field(t, field);
            } else {
                self.enc.field_str(tag::TEXT, t);
            }
        }
        self.enc.field(tag::REF_MSG_TYPE, r.msg_type);
        self.enc
            .field_u64(tag::BUSINESS_REJECT_REASON, u64::from(err));
        if self.ver.fixt {
            self.enc
                .field_str(tag::DEFAULT_APPL_VER_ID, &self.sender_appl_ver_id);
        }
        self.finish_app(seq)
    }

    /// 58 = "reason (field)", QuickFIX's form when RefTagID cannot carry the tag.
    pub(super) fn write_text_with_field(&mut self, reason: &str, field: u32) {
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        use std::fmt::Write as _;
        // The tag as a C `int`, as QuickFIX prints it: `-1=HI` reads "Invalid tag
        // number (-1)" (its acceptance test fix40/14a_BadField).
        let _ = write!(text, "{reason} ({})", field as i32);
        self.enc.field_str(tag::TEXT, &text);
        self.text = text;
    }
}
