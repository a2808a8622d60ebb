//! Answering a ResendRequest from the store: application messages resent with
//! PossDupFlag, administrative and missing ones replaced by SequenceReset-GapFill.

use super::*;

impl<S: MessageStore> Session<S> {
    /// QuickFIX `generateRetransmits`: application messages resent with
    /// PossDupFlag=Y, OrigSendingTime and a new SendingTime; administrative messages
    /// and missing messages replaced by SequenceReset-GapFill, collapsed into ranges.
    pub(super) fn retransmit(&mut self, now: u64, begin: u64, end: u64) -> StoreResult {
        let mut buf = std::mem::take(&mut self.resend_buf);
        let mut idx = std::mem::take(&mut self.resend_idx);
        buf.clear();
        idx.clear();
        let r = self.store.get_range(begin, end, &mut |_, msg| {
            let start = buf.len();
            buf.extend_from_slice(msg);
            idx.push((start, buf.len()));
        });
        let r = r.and_then(|()| self.retransmit_loaded(now, begin, end, &buf, &idx));
        // Keep the scratch space for the next resend, but not a huge one's worth.
        const KEEP: usize = 1 << 20;
        if buf.capacity() > 16 * KEEP {
            buf.clear();
            buf.shrink_to(KEEP);
            idx.clear();
            idx.shrink_to(KEEP / 64);
        }
        self.resend_buf = buf;
        self.resend_idx = idx;
        r
    }

    pub(super) fn retransmit_loaded(
        &mut self,
        now: u64,
        begin_seq: u64,
        end_seq: u64,
        buf: &[u8],
        idx: &[(usize, usize)],
    ) -> StoreResult {
        let mut fields = self.fields_pool.pop().unwrap_or_default();
        let mut gap_begin = 0u64;
        let mut current = begin_seq;
        let mut last = 0u64;
        let mut app_just_sent = false;
        let mut r = Ok(());
        for &(s, e) in idx {
            let Some(raw) = buf.get(s..e) else { continue };
            let Ok(msg) = codec::parse_keeping_empty(raw, &mut fields, false) else {
                // An unreadable stored message is treated as missing: gap-filled.
                continue;
            };
            let Some(seq) = msg.seq_num() else { continue };
            app_just_sent = false;
            if current != seq && gap_begin == 0 {
                gap_begin = current;
            }
            if is_admin(msg.msg_type()) {
                if gap_begin == 0 {
                    gap_begin = seq;
                }
            } else {
                if gap_begin != 0 {
                    r = self.gap_fill_msg(now, gap_begin, seq);
                    if r.is_err() {
                        break;
                    }
                }
                self.resend_app(now, &msg);
                self.note(format_args!("Resending Message: {seq}"));
                gap_begin = 0;
                app_just_sent = true;
            }
            current = seq.saturating_add(1);
            last = seq;
        }
        self.fields_pool.push(fields);
        r?;
        if gap_begin != 0 {
            self.gap_fill_msg(now, gap_begin, last.saturating_add(1))?;
        }
        if end_seq > last {
            let next = self.store.next_sender_seq();
            let new_seq = end_seq.saturating_add(1).min(next);
            let from = if app_just_sent {
                last.saturating_add(1)
            } else {
                begin_seq
            };
            self.gap_fill_msg(now, from, new_seq)?;
        }
        Ok(())
    }

    /// Re-encodes a stored application message for a resend: its header fields in
    /// tag order with PossDupFlag=Y, SendingTime=now and OrigSendingTime=the original
    /// SendingTime, then the stored body verbatim. Not stored again.
    pub(super) fn resend_app(&mut self, now: u64, msg: &MessageRef<'_>) {
        let raw = msg.raw();
        let mut hdr = std::mem::take(&mut self.header_scratch);
        hdr.clear();
        let mut body_start = None;
        let mut body_end = raw.len();
        let mut orig = None;
        let mut in_header = true;
        for f in msg.fields() {
            let (s, e) = (f.start as usize, f.end as usize);
            match f.tag {
                tag::BEGIN_STRING | tag::BODY_LENGTH | tag::MSG_TYPE => {}
                tag::CHECK_SUM => {
                    // `10=` precedes the value.
                    body_end = s.saturating_sub(3);
                }
                t if in_header && is_header_tag(t) => match t {
                    tag::SENDING_TIME => orig = Some((s, e)),
                    tag::POSS_DUP_FLAG | tag::ORIG_SENDING_TIME => {}
                    _ => hdr.push((t, HeaderValue::Stored(s, e))),
                },
                t => {
                    if in_header {
                        in_header = false;
                        // The field starts at its tag: value start minus "tag=".
                        body_start = Some(s.saturating_sub(digits(t) + 1));
                    }
                }
            }
        }
        hdr.push((tag::POSS_DUP_FLAG, HeaderValue::Yes));
        hdr.push((tag::SENDING_TIME, HeaderValue::Now));
        if let Some((s, e)) = orig {
            hdr.push((tag::ORIG_SENDING_TIME, HeaderValue::Stored(s, e)));
        }
        hdr.sort_by_key(|&(t, _)| t);
        self.last_sent = now;
        self.enc.begin(msg.msg_type());
        for &(t, v) in &hdr {
            match v {
                HeaderValue::Stored(s, e) => self.enc.field(t, raw.get(s..e).unwrap_or_default()),
                HeaderValue::Yes => self.enc.field(t, b"Y"),
                HeaderValue::Now => self.enc.field_timestamp(t, now, self.precision),
            }
        }
        if let Some(bs) = body_start {
            self.enc
                .raw_fields(raw.get(bs..body_end).unwrap_or_default());
        }
        let out = self.enc.finish();
        if matches!(self.link, Link::Up(_)) {
            self.out.send(out);
        }
        self.header_scratch = hdr;
    }
}
