//! A client's bounded egress buffer: frames queued for one socket, written from the
//! front, with the slow-consumer discard policy.
//!
//! Bytes `[head, len)` of `buf` are unwritten. The frame containing `head` may be half
//! written and is never touched. When a MESSAGE does not fit under the limit the
//! buffer drops its oldest queued MESSAGE frames (control frames are kept) until it is
//! at most half full, so a stalled subscriber costs one compaction per half-buffer of
//! traffic rather than one per message. The discarded count is written into the first
//! MESSAGE delivered after the gap (the DISCARDS field), or carried to the next one
//! queued if none remains.
//!
//! Memory: what a buffer costs the router is its vector's capacity, which the core
//! sums over clients against `egress_memory_limit` ([`Egress::capacity`]). Messages
//! never grow it past the limit they are pushed under (unwritten bytes are moved to the
//! front before it grows); control frames may, and the core then gives the excess back
//! ([`Egress::fit`]). A drained buffer keeps its capacity for the next turn until the
//! core releases it ([`Egress::release`]).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use tickwire_wire::frame::{self, Kind, HEADER_LEN, MAX_TEXT_LEN};

/// Room for the last frame sent to a client being disconnected (a fatal ERROR or a
/// CLOSE: header, two fields and a text of at most `MAX_TEXT_LEN` bytes).
pub const LAST_WORD_ROOM: usize = HEADER_LEN + 8 + MAX_TEXT_LEN;

/// Outcome of queueing one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Queued without dropping anything.
    Queued,
    /// Queued after discarding this many older messages.
    QueuedAfterDiscard(u64),
    /// Not queued: the buffer is full and the policy is to disconnect, or discarding
    /// every queued message would not make room (the rest are control frames or a
    /// half-written frame).
    Full,
}

#[derive(Debug, Default)]
pub struct Egress {
    buf: Vec<u8>,
    head: usize,
    /// A known frame start: frames are contiguous from here to the end. When it is
    /// past `head`, `[head, boundary)` is the rest of a half-written frame; when it is
    /// before, frames are walked from here to find the first start at or after `head`.
    boundary: usize,
    /// Discards not yet reported to the client.
    pending_discards: u64,
}

impl Egress {
    /// Unwritten bytes.
    #[inline]
    pub fn pending(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Bytes the buffer holds allocated (its vector's capacity): what it costs, whether
    /// or not they are pending.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The unwritten bytes, for the socket write.
    #[inline]
    pub fn unwritten(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    /// Records that the socket accepted `n` bytes.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.head += n;
        if self.head >= self.buf.len() {
            self.buf.clear();
            self.head = 0;
            self.boundary = 0;
        }
    }

    /// Appends a control frame (ACK, ERROR, PONG, ...); never discarded (the core
    /// counts it against the limit and disconnects a client that does not read them).
    pub fn control(&mut self) -> &mut Vec<u8> {
        self.compact_if_worthwhile();
        &mut self.buf
    }

    /// Queues the MESSAGE for `publish` (a decoded PUBLISH frame's exact bytes), applying
    /// the discard policy when `limit` would be exceeded; the buffer's capacity then
    /// stays within `limit` (or one message, if that is larger). `router_in` and `router_out`
    /// are written only into messages that carry STAMPS.
    #[inline]
    pub fn push_message(
        &mut self,
        publish: &[u8],
        limit: usize,
        discard: bool,
        router_in: u64,
        stamp: impl FnOnce() -> u64,
    ) -> Push {
        let need = publish.len() + 8;
        let mut result = Push::Queued;
        if self.pending() + need > limit {
            if !discard {
                return Push::Full;
            }
            let dropped = self.discard_oldest(limit / 2, need);
            if self.pending() > 0 && self.pending() + need > limit {
                // What is left (answers, a half-written frame) leaves no room: a
                // message never takes the buffer past its limit.
                return Push::Full;
            }
            result = Push::QueuedAfterDiscard(dropped);
        } else {
            self.compact_if_worthwhile();
        }
        self.reserve(need, limit);
        // The router-out stamp is taken per message, and only for messages that carry
        // STAMPS: it measures the routing itself (lookup and copy), which one reading per
        // loop turn could not.
        let router_out = if publish[5] & frame::flags::STAMPS != 0 {
            stamp()
        } else {
            0
        };
        let discarded = std::mem::take(&mut self.pending_discards);
        frame::encode_message_from_publish(
            &mut self.buf,
            publish,
            discarded,
            router_in,
            router_out,
        );
        result
    }

    /// Under the discard policy, makes room for control frames: drops the oldest queued
    /// MESSAGE frames until at most `target` bytes remain (or none is left); returns how
    /// many were dropped (they are reported in the next MESSAGE's DISCARDS).
    pub fn discard_messages(&mut self, target: usize) -> u64 {
        self.discard_oldest(target, 0)
    }

    /// Drops every unwritten frame, control frames included, except the rest of a
    /// half-written one (used before disconnecting a client that does not read its
    /// answers: the fatal ERROR queued next is then the next frame it reads).
    pub fn drop_unwritten(&mut self) {
        self.advance_boundary();
        self.buf.truncate(self.boundary);
        self.pending_discards = 0;
    }

    /// Drops every unwritten complete frame except control frames (used before a
    /// disconnect, so the error frame is not stuck behind megabytes of messages).
    pub fn drop_messages(&mut self) {
        self.retain(|_, _| false, LAST_WORD_ROOM);
    }

    /// Gives back capacity beyond `max` bytes, or beyond what is pending and room for
    /// a last word ([`LAST_WORD_ROOM`]) if that is more (the unwritten bytes are moved
    /// to the front first). Does nothing when the capacity is within `max`; else one
    /// reallocation: after a control frame grew the buffer past its limit, or once for
    /// a large buffer while the router-wide bound is reached.
    pub fn fit(&mut self, max: usize) {
        if self.buf.capacity() <= max {
            return;
        }
        self.compact();
        self.buf.shrink_to(max.max(self.buf.len() + LAST_WORD_ROOM));
    }

    /// Frees a drained buffer's memory (it is allocated again when a frame is queued).
    /// Does nothing while bytes are pending.
    pub fn release(&mut self) {
        if self.pending() == 0 {
            self.buf = Vec::new();
            self.head = 0;
            self.boundary = 0;
        }
    }

    /// Moves unwritten bytes to the front when the written prefix is large, so the
    /// vector does not grow past what is pending.
    #[inline]
    fn compact_if_worthwhile(&mut self) {
        if self.head > 0 && self.head >= self.buf.len() / 2 && self.head >= 64 << 10 {
            self.compact();
        }
    }

    /// Moves the unwritten bytes to the front.
    fn compact(&mut self) {
        if self.head == 0 {
            return;
        }
        self.advance_boundary();
        self.buf.copy_within(self.head.., 0);
        self.buf.truncate(self.buf.len() - self.head);
        self.boundary -= self.head;
        self.head = 0;
    }

    /// Makes room for `need` more bytes: first by moving the unwritten bytes to the
    /// front, then by growing the vector, doubling as `Vec` does but never past `limit`
    /// (or past exactly what is needed, if that is more). So a buffer that messages
    /// are pushed to under a limit holds at most that limit, not twice it.
    #[inline]
    fn reserve(&mut self, need: usize, limit: usize) {
        let cap = self.buf.capacity();
        if self.buf.len() + need <= cap {
            return;
        }
        self.compact();
        let want = self.buf.len() + need;
        if want <= cap {
            return;
        }
        let target = (cap * 2).max(want).min(limit.max(want));
        self.buf.reserve_exact(target - self.buf.len());
    }

    /// Moves `boundary` to the first frame start at or after `head`.
    fn advance_boundary(&mut self) {
        while self.boundary < self.head {
            self.boundary += frame_len(&self.buf[self.boundary..]);
        }
    }

    /// Drops the oldest MESSAGE frames until at most `target` bytes (and room for
    /// `need` more) remain; returns how many were dropped.
    fn discard_oldest(&mut self, target: usize, need: usize) -> u64 {
        let goal = target.saturating_sub(need);
        let mut excess = self.pending().saturating_sub(goal);
        let mut dropped = 0;
        self.retain(
            |kind, len| {
                if kind == Kind::Message as u8 && excess > 0 {
                    excess = excess.saturating_sub(len);
                    dropped += 1;
                    false
                } else {
                    true
                }
            },
            need,
        );
        dropped
    }

    /// Rewrites the unwritten complete frames in place, dropping MESSAGE frames for
    /// which `keep` returns false (control frames are always kept). Discard counts of
    /// dropped frames plus the frames themselves are reported in the first kept MESSAGE
    /// after them, or carried in `pending_discards`. When most of the buffer was dropped
    /// (a disconnect, a much tighter limit) the capacity beyond what is kept plus `room`
    /// is given back.
    ///
    /// In place: it used to build a new vector each time and free the old one, so a
    /// stuck subscriber under the discard policy cost an 8 MiB allocation, its page
    /// faults and a copy every time its buffer filled, on the one router thread, and
    /// every other subscriber's p99 rose 3-5x (peer comparison). Kept frames only move
    /// towards the front: a DISCARDS field (8 bytes) is inserted only into the first
    /// kept MESSAGE after dropped ones, and those freed at least a frame header (8
    /// bytes) before it.
    fn retain(&mut self, mut keep: impl FnMut(u8, usize) -> bool, room: usize) {
        self.advance_boundary();
        // The half-written frame (if any) stays first: its start is before `head`.
        let partial = self.boundary - self.head;
        self.buf.copy_within(self.head..self.boundary, 0);
        let end = self.buf.len();
        let mut w = partial;
        let mut at = self.boundary;
        let mut carry = 0u64;
        while at < end {
            let len = frame_len(&self.buf[at..]);
            let kind = self.buf[at + 4];
            if kind != Kind::Message as u8 || keep(kind, len) {
                if kind == Kind::Message as u8 && carry > 0 {
                    w = move_with_discards(&mut self.buf, at, len, w, carry);
                    carry = 0;
                } else {
                    self.buf.copy_within(at..at + len, w);
                    w += len;
                }
            } else {
                carry += 1 + discards_of(&self.buf[at..at + len]);
            }
            at += len;
        }
        self.buf.truncate(w);
        self.pending_discards += carry;
        if self.buf.capacity() > 4 * (w + room) {
            // Most of it was dropped (a disconnect's drop of every message): give the
            // memory back rather than keep a vector sized for what was pending. Not
            // after the discard policy's drop of about half (at 2x, a kept half a few
            // bytes short of it gave the memory back, and the next push took it again,
            // every time the buffer filled).
            self.buf.shrink_to(w + room);
        }
        self.head = 0;
        self.boundary = partial;
    }
}

/// Length of the frame at the start of `b` (the buffer only holds frames we encoded).
#[inline]
fn frame_len(b: &[u8]) -> usize {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

fn discards_of(f: &[u8]) -> u64 {
    match frame::decode(f, u32::MAX) {
        Ok(Some((frame::Frame::Message(m), _))) => m.discarded,
        _ => 0,
    }
}

/// Moves MESSAGE frame `buf[at..at + len]` to `w` (at or before `at`) with `more` added
/// to its DISCARDS count, inserting the field when it has none (then `w + 8 <= at`:
/// dropped frames came before it, see `Egress::retain`). Returns where the next frame
/// goes.
fn move_with_discards(buf: &mut [u8], at: usize, len: usize, w: usize, more: u64) -> usize {
    buf.copy_within(at..at + len, w);
    if frame::add_discards(&mut buf[w..w + len], more) {
        return w + len;
    }
    // Insert the DISCARDS field after the header (and after SEQ when present): the
    // bytes after that point move 8 further (the frame's source bytes were all copied
    // above, and the 8 bytes freed before it leave the room).
    debug_assert!(w + 8 <= at, "no room to insert DISCARDS in place");
    let fl = buf[w + 5];
    let h = HEADER_LEN + if fl & frame::flags::SEQ != 0 { 8 } else { 0 };
    buf.copy_within(w + h..w + len, w + h + 8);
    buf[w + h..w + h + 8].copy_from_slice(&more.to_le_bytes());
    buf[w..w + 4].copy_from_slice(&((len + 8) as u32).to_le_bytes());
    buf[w + 5] = fl | frame::flags::DISCARDS;
    w + len + 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::frame::{decode, encode_ack, encode_publish, Frame, PublishOptions};

    fn publish(i: u64, size: usize) -> Vec<u8> {
        let mut p = Vec::new();
        let opts = PublishOptions {
            seq: Some(i),
            publisher_send: None,
        };
        encode_publish(&mut p, "t/x", &vec![b'x'; size], opts, u32::MAX).unwrap();
        p
    }

    /// Decodes all frames: (seq or u64::MAX for control frames, discarded).
    fn frames(b: &[u8]) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let (f, n) = decode(&b[at..], u32::MAX).unwrap().unwrap();
            match f {
                Frame::Message(m) => v.push((m.seq.unwrap(), m.discarded)),
                _ => v.push((u64::MAX, 0)),
            }
            at += n;
        }
        v
    }

    #[test]
    fn under_the_limit_everything_is_queued_in_order() {
        let mut e = Egress::default();
        for i in 0..10 {
            assert_eq!(
                e.push_message(&publish(i, 10), 10_000, true, 0, || 0),
                Push::Queued
            );
        }
        let got = frames(e.unwritten());
        assert_eq!(got, (0..10).map(|i| (i, 0)).collect::<Vec<_>>());
    }

    #[test]
    fn overflow_discards_oldest_and_reports_the_count_on_the_next_delivered() {
        let mut e = Egress::default();
        let limit = 1000;
        let mut dropped_total = 0;
        for i in 0..100 {
            if let Push::QueuedAfterDiscard(n) =
                e.push_message(&publish(i, 50), limit, true, 0, || 0)
            {
                dropped_total += n;
            }
            assert!(e.pending() <= limit);
        }
        let got = frames(e.unwritten());
        // Every message is either still queued or counted exactly once.
        let reported: u64 = got.iter().map(|f| f.1).sum::<u64>() + e.pending_discards;
        assert_eq!(reported, dropped_total);
        assert_eq!(got.len() as u64 + dropped_total, 100);
        // The survivors are the newest, in order, and the last one is 99.
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(got.last().unwrap().0, 99);
        // Gaps in sequence numbers equal the discard count carried by the message after them.
        let mut prev: Option<u64> = None;
        for (seq, disc) in &got {
            let expected_gap = match prev {
                Some(p) => seq - p - 1,
                None => *seq, // the oldest discarded ones
            };
            assert_eq!(*disc, expected_gap, "at seq {seq}");
            prev = Some(*seq);
        }
    }

    /// Message 0, an ACK and message 1 (100-byte payloads), of which the socket took
    /// 5 bytes of the first frame.
    fn half_written() -> Egress {
        let mut e = Egress::default();
        e.push_message(&publish(0, 100), 10_000, true, 0, || 0);
        encode_ack(e.control(), 7);
        e.push_message(&publish(1, 100), 10_000, true, 0, || 0);
        e.consume(5);
        e
    }

    #[test]
    fn half_written_frame_and_control_frames_survive_a_discard() {
        let mut e = half_written();
        for i in 2..40 {
            e.push_message(&publish(i, 100), 1000, true, 0, || 0);
        }
        let rest = e.unwritten();
        // The rest of frame 0 comes first, untouched.
        let first_len = publish(0, 100).len();
        let mut whole = publish(0, 100);
        whole[4] = Kind::Message as u8;
        assert_eq!(&rest[..first_len - 5], &whole[5..]);
        let got = frames(&rest[first_len - 5..]);
        assert_eq!(got[0], (u64::MAX, 0), "the ACK is kept");
        let total: u64 = got
            .iter()
            .filter(|f| f.0 != u64::MAX)
            .map(|f| f.1 + 1)
            .sum::<u64>()
            + e.pending_discards;
        assert_eq!(total, 39, "messages 1..40 all accounted for");
    }

    #[test]
    fn disconnect_policy_reports_full_without_queueing() {
        let mut e = Egress::default();
        while e.push_message(&publish(0, 100), 1000, false, 0, || 0) == Push::Queued {}
        let before = e.pending();
        assert_eq!(
            e.push_message(&publish(1, 100), 1000, false, 0, || 0),
            Push::Full
        );
        assert_eq!(e.pending(), before);
        e.drop_messages();
        assert_eq!(e.pending(), 0);
    }

    #[test]
    fn drop_unwritten_keeps_only_the_half_written_frame() {
        let mut e = half_written();
        let first_len = publish(0, 100).len();
        e.drop_unwritten();
        assert_eq!(e.pending(), first_len - 5);
        encode_ack(e.control(), 8);
        e.consume(first_len - 5);
        assert_eq!(frames(e.unwritten()), [(u64::MAX, 0)]);
    }

    /// Messages never grow the vector past the limit they are pushed under (unwritten
    /// bytes move to the front first), a discard gives memory back, and `fit` and
    /// `release` shrink it.
    #[test]
    fn capacity_stays_within_the_limit_and_is_given_back() {
        let mut e = Egress::default();
        let limit = 50_000;
        for i in 0..2_000 {
            e.push_message(
                &publish(i, 100 + (i as usize * 13) % 400),
                limit,
                true,
                0,
                || 0,
            );
            assert!(e.capacity() <= limit, "{} at {i}", e.capacity());
            if i % 7 == 0 {
                let n = e.pending() / 3;
                e.consume(n);
            }
        }
        // A tighter limit (the router-wide bound reached): discarding shrinks it.
        e.push_message(&publish(9, 100), 10_000, true, 0, || 0);
        assert!(e.pending() <= 10_000);
        assert!(e.capacity() <= 10_000, "{}", e.capacity());
        // A control frame may double it; `fit` gives the excess back.
        for _ in 0..200 {
            encode_ack(e.control(), 1);
            if e.capacity() > 10_000 {
                break;
            }
        }
        assert!(e.capacity() > e.pending().max(10_000));
        e.fit(10_000);
        assert!(e.capacity() <= (e.pending() + LAST_WORD_ROOM).max(10_000));
        assert!(e.capacity() >= e.pending());
        e.consume(e.pending());
        e.release();
        assert_eq!(e.capacity(), 0);
        assert_eq!(
            e.push_message(&publish(10, 100), 10_000, true, 0, || 0),
            Push::Queued
        );
    }

    #[test]
    fn consume_everything_resets() {
        let mut e = Egress::default();
        e.push_message(&publish(0, 10), 1000, true, 0, || 0);
        let n = e.pending();
        e.consume(n);
        assert_eq!(e.pending(), 0);
        assert!(e.unwritten().is_empty());
    }
}
