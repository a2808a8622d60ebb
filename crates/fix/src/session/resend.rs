//! Answering a ResendRequest from the store: application messages resent with
//! PossDupFlag, administrative and missing ones replaced by SequenceReset-GapFill.
//!
//! A resend goes in steps of at most [`RESEND_CHUNK`] sequence numbers and
//! [`RESEND_STEP_BYTES`] of stored messages (plus the one that crosses it): the first
//! step at once (a resend of up to that many small messages is answered whole, as
//! QuickFIX answers it), each further one when the driver says the connection has room
//! ([`Session::handle_send_room`]). So a counterparty cannot make one call produce
//! output in proportion to a range it chose, nor make us buffer it without reading;
//! ResendRequests that arrive during a resend wait their turn ([`MAX_QUEUED_RESENDS`],
//! one more widens the last that waits).

use std::ops::ControlFlow;

use super::*;

/// Sequence numbers loaded from the store and answered per step of a resend.
pub(crate) const RESEND_CHUNK: u64 = 1024;

/// Bytes of stored messages loaded and answered per step of a resend (at least one
/// message, however large). Without it one step of 1,024 messages of up to the
/// largest message size held gigabytes and stalled every session for seconds
/// (hostile-input pass: 240 stored messages of 3.9 MB, one ResendRequest unread:
/// 1.8 GB and 4 s).
pub(crate) const RESEND_STEP_BYTES: usize = 1 << 20;

/// ResendRequests that may wait behind the resend in progress; one more widens the
/// last one waiting to cover both ranges.
pub(crate) const MAX_QUEUED_RESENDS: usize = 8;

/// A resend in progress: the state QuickFIX's `generateRetransmits` keeps in its loop,
/// kept across steps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resend {
    /// The request's BeginSeqNo and (capped) EndSeqNo.
    begin_seq: u64,
    end_seq: u64,
    /// The first sequence number not yet loaded from the store.
    next: u64,
    /// Where the pending gap fill starts (0: none).
    gap_begin: u64,
    /// The sequence number expected next from the store.
    current: u64,
    /// The last stored message's sequence number (0: none yet).
    last: u64,
    app_just_sent: bool,
}

impl Resend {
    fn new(begin_seq: u64, end_seq: u64) -> Resend {
        Resend {
            begin_seq,
            end_seq,
            next: begin_seq,
            gap_begin: 0,
            current: begin_seq,
            last: 0,
            app_just_sent: false,
        }
    }
}

/// The resend in progress on a connection and the requests waiting behind it.
#[derive(Debug, Default)]
pub(super) struct Resends {
    active: Option<Resend>,
    queued: Vec<(u64, u64)>,
}

impl<S: MessageStore> Session<S> {
    /// QuickFIX `generateRetransmits`: application messages resent with
    /// PossDupFlag=Y, OrigSendingTime and a new SendingTime; administrative messages
    /// and missing messages replaced by SequenceReset-GapFill, collapsed into ranges.
    /// The first step now; while one is in progress, the request waits.
    pub(super) fn retransmit(&mut self, now: u64, begin: u64, end: u64) -> StoreResult {
        let Some(c) = self.connection_mut() else {
            return Ok(());
        };
        if c.resends.active.is_none() {
            c.resends.active = Some(Resend::new(begin, end));
            return self.retransmit_step(now);
        }
        let q = &mut c.resends.queued;
        let full = q.len() >= MAX_QUEUED_RESENDS;
        match q.last_mut() {
            Some(last) if full => {
                last.0 = last.0.min(begin);
                last.1 = last.1.max(end);
            }
            _ => q.push((begin, end)),
        }
        self.note(format_args!(
            "ResendRequest FROM: {begin} TO: {end} waits for the resend in progress"
        ));
        Ok(())
    }

    /// Whether a resend is in progress on this connection (the driver calls
    /// [`Session::handle_send_room`] when the connection has room for its next step).
    pub fn resend_pending(&self) -> bool {
        self.connection()
            .is_some_and(|c| c.resends.active.is_some())
    }

    /// One step of the resend in progress: up to [`RESEND_CHUNK`] sequence numbers
    /// and [`RESEND_STEP_BYTES`] loaded and answered; at the end, the closing gap fill and the next request
    /// waiting (its first step comes with the next call).
    pub(super) fn retransmit_step(&mut self, now: u64) -> StoreResult {
        let Some(mut rs) = self.connection().and_then(|c| c.resends.active) else {
            return Ok(());
        };
        let mut to = rs.next.saturating_add(RESEND_CHUNK - 1).min(rs.end_seq);
        let mut r = Ok(());
        if rs.next <= to {
            let mut buf = std::mem::take(&mut self.resend_buf);
            let mut idx = std::mem::take(&mut self.resend_idx);
            buf.clear();
            idx.clear();
            let mut cut = None;
            r = self.store.get_range(rs.next, to, &mut |seq, msg| {
                let start = buf.len();
                buf.extend_from_slice(msg);
                idx.push((start, buf.len()));
                if buf.len() >= RESEND_STEP_BYTES {
                    cut = Some(seq);
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            // The step ends with the message that reached the budget; the next one
            // starts after it.
            if let Some(seq) = cut {
                to = to.min(seq);
            }
            if r.is_ok() {
                r = self.retransmit_loaded(now, &mut rs, &buf, &idx);
            }
            // Keep the scratch space for the next step, but not a huge one's worth.
            const KEEP: usize = super::KEEP_BYTES;
            if buf.capacity() > 2 * KEEP {
                buf.clear();
                buf.shrink_to(KEEP);
                idx.clear();
                idx.shrink_to(KEEP / 64);
            }
            self.resend_buf = buf;
            self.resend_idx = idx;
        }
        rs.next = to.saturating_add(1);
        let done = r.is_err() || to >= rs.end_seq;
        if r.is_ok() && done {
            r = self.retransmit_finish(now, &rs);
        }
        if let Some(c) = self.connection_mut() {
            c.resends.active = if done {
                (!c.resends.queued.is_empty())
                    .then(|| c.resends.queued.remove(0))
                    .map(|(b, e)| Resend::new(b, e))
            } else {
                Some(rs)
            };
        }
        r
    }

    /// The loop of `generateRetransmits` over one step's stored messages.
    fn retransmit_loaded(
        &mut self,
        now: u64,
        rs: &mut Resend,
        buf: &[u8],
        idx: &[(usize, usize)],
    ) -> StoreResult {
        let mut fields = self.fields_pool.pop().unwrap_or_default();
        let mut r = Ok(());
        for &(s, e) in idx {
            let Some(raw) = buf.get(s..e) else { continue };
            let Ok(msg) = codec::parse_keeping_empty(raw, &mut fields, false) else {
                // An unreadable stored message is treated as missing: gap-filled.
                continue;
            };
            let Some(seq) = msg.seq_num() else { continue };
            rs.app_just_sent = false;
            if rs.current != seq && rs.gap_begin == 0 {
                rs.gap_begin = rs.current;
            }
            if is_admin(msg.msg_type()) {
                if rs.gap_begin == 0 {
                    rs.gap_begin = seq;
                }
            } else {
                if rs.gap_begin != 0 {
                    r = self.gap_fill_msg(now, rs.gap_begin, seq);
                    if r.is_err() {
                        break;
                    }
                }
                self.resend_app(now, &msg);
                self.note(format_args!("Resending Message: {seq}"));
                rs.gap_begin = 0;
                rs.app_just_sent = true;
            }
            rs.current = seq.saturating_add(1);
            rs.last = seq;
        }
        fields.release_beyond(super::KEEP_FIELDS);
        self.fields_pool.push(fields);
        r
    }

    /// The end of `generateRetransmits`: the pending gap fill, then one to EndSeqNo.
    fn retransmit_finish(&mut self, now: u64, rs: &Resend) -> StoreResult {
        if rs.gap_begin != 0 {
            self.gap_fill_msg(now, rs.gap_begin, rs.last.saturating_add(1))?;
        }
        if rs.end_seq > rs.last {
            let next = self.store.next_sender_seq();
            let new_seq = rs.end_seq.saturating_add(1).min(next);
            let from = if rs.app_just_sent {
                rs.last.saturating_add(1)
            } else {
                rs.begin_seq
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
