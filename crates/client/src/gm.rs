//! Guaranteed publishing bookkeeping (pure: no IO, no clock).
//!
//! [`PublishWindow`] holds every guaranteed publish the router has not answered yet,
//! in sequence order, with its topic and payload in one reusable byte buffer (no
//! allocation per message once the buffer and the entry ring have grown to the
//! window). The driver ([`Client`](crate::Client)):
//!
//! 1. after PUB_OPENED calls [`PublishWindow::handle_opened`], then resends
//!    [`PublishWindow::unanswered`] (seq order) — a resend of a stored publish is only
//!    acknowledged again by the router, never stored twice;
//! 2. before each publish checks [`PublishWindow::has_room`], then
//!    [`PublishWindow::push`] returns the sequence number to put on the wire;
//! 3. feeds PUB_ACK / PUB_NACK to [`PublishWindow::handle_ack`] /
//!    [`PublishWindow::handle_nack`]: each publish gets exactly one outcome, counted
//!    once, however often the router (re)answers it;
//! 4. on a lost connection calls [`PublishWindow::handle_disconnect`] and moves the
//!    window to the next connection.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::VecDeque;

use tickwire_wire::gm::NackReason;

/// What became of one guaranteed publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The router stored it durably (PUB_ACK).
    Acked,
    /// The router refused it (PUB_NACK).
    Nacked {
        /// Why.
        reason: NackReason,
        /// The router's explanation.
        text: String,
    },
}

/// Totals of a publisher's outcomes, each publish counted once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishCounts {
    /// Publishes handed to the window (resends not included).
    pub published: u64,
    /// Publishes the router acknowledged.
    pub acked: u64,
    /// Publishes the router refused, all reasons.
    pub nacked: u64,
    /// Refusals by reason, in order of first occurrence.
    pub nacked_by_reason: Vec<(NackReason, u64)>,
    /// Publishes sent again after a (re)open because they were unanswered.
    pub resent: u64,
}

/// One refused publish, as the client remembers the most recent ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NackRecord {
    /// The publish's sequence number.
    pub seq: u64,
    /// Why.
    pub reason: NackReason,
    /// The router's explanation.
    pub text: String,
}

/// How many [`NackRecord`]s are kept (the oldest are dropped; counts stay exact).
pub const RECENT_NACKS: usize = 16;

/// Why [`PublishWindow::push`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushError {
    /// No PUB_OPENED on the current connection.
    NotOpen,
    /// `window` publishes are unanswered.
    Full,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    seq: u64,
    /// Logical offset of the topic in `bytes` (see `PublishWindow::base`).
    off: u64,
    topic_len: u32,
    payload_len: u32,
    answered: bool,
}

/// The unanswered guaranteed publishes of one publisher identity.
#[derive(Debug, Default)]
pub(crate) struct PublishWindow {
    /// Granted by PUB_OPENED; 0 while not open.
    window: u32,
    /// Highest sequence number used (or reported by the router at open).
    last_seq: u64,
    /// In seq order. Answered entries stay until every older one is answered too, so
    /// `entries.len()` (not the unanswered count) is held to the window: memory stays
    /// bounded even if the router answers out of order.
    entries: VecDeque<Entry>,
    unanswered: usize,
    /// Topic and payload bytes of `entries`; `bytes[0]` has logical offset `base`.
    bytes: Vec<u8>,
    base: u64,
    /// A sequence number whose outcome a blocking caller waits for.
    watch: Option<(u64, Option<Outcome>)>,
    counts: PublishCounts,
    recent_nacks: VecDeque<NackRecord>,
}

impl PublishWindow {
    /// PUB_OPENED arrived: `window` publishes may be unanswered; the router holds
    /// sequence numbers up to `last_seq` for this identity.
    pub(crate) fn handle_opened(&mut self, window: u32, last_seq: u64) {
        self.window = window;
        self.last_seq = self.last_seq.max(last_seq);
    }

    /// The connection is gone: nothing more may be published until the next open.
    pub(crate) fn handle_disconnect(&mut self) {
        self.window = 0;
    }

    pub(crate) fn is_open(&self) -> bool {
        self.window > 0
    }

    /// Whether [`PublishWindow::push`] would succeed.
    pub(crate) fn has_room(&self) -> bool {
        self.is_open() && self.entries.len() < self.window as usize
    }

    /// Records one publish; returns its sequence number.
    pub(crate) fn push(&mut self, topic: &str, payload: &[u8]) -> Result<u64, PushError> {
        if !self.is_open() {
            return Err(PushError::NotOpen);
        }
        if !self.has_room() {
            return Err(PushError::Full);
        }
        self.compact();
        let seq = self.last_seq + 1;
        self.last_seq = seq;
        self.entries.push_back(Entry {
            seq,
            off: self.base + self.bytes.len() as u64,
            topic_len: topic.len() as u32,
            payload_len: payload.len() as u32,
            answered: false,
        });
        self.bytes.extend_from_slice(topic.as_bytes());
        self.bytes.extend_from_slice(payload);
        self.unanswered += 1;
        self.counts.published += 1;
        Ok(seq)
    }

    /// PUB_ACK for `first..=last`; returns how many unanswered publishes it answered.
    pub(crate) fn handle_ack(&mut self, first: u64, last: u64) -> u64 {
        let mut n = 0;
        let from = self.entries.partition_point(|e| e.seq < first);
        for i in from..self.entries.len() {
            let e = &mut self.entries[i];
            if e.seq > last {
                break;
            }
            if !e.answered {
                e.answered = true;
                n += 1;
                if let Some((seq, out @ None)) = &mut self.watch {
                    if *seq == e.seq {
                        *out = Some(Outcome::Acked);
                    }
                }
            }
        }
        self.unanswered -= n as usize;
        self.counts.acked += n;
        self.pop_answered();
        n
    }

    /// PUB_NACK for `seq`; true when it answered an unanswered publish.
    pub(crate) fn handle_nack(&mut self, seq: u64, reason: NackReason, text: &str) -> bool {
        let Ok(i) = self.entries.binary_search_by_key(&seq, |e| e.seq) else {
            return false;
        };
        if self.entries[i].answered {
            return false;
        }
        self.entries[i].answered = true;
        self.unanswered -= 1;
        self.counts.nacked += 1;
        match self
            .counts
            .nacked_by_reason
            .iter_mut()
            .find(|(r, _)| *r == reason)
        {
            Some((_, n)) => *n += 1,
            None => self.counts.nacked_by_reason.push((reason, 1)),
        }
        if self.recent_nacks.len() == RECENT_NACKS {
            self.recent_nacks.pop_front();
        }
        self.recent_nacks.push_back(NackRecord {
            seq,
            reason,
            text: crate::error::peer_text(text),
        });
        if let Some((w, out @ None)) = &mut self.watch {
            if *w == seq {
                *out = Some(Outcome::Nacked {
                    reason,
                    text: crate::error::peer_text(text),
                });
            }
        }
        self.pop_answered();
        true
    }

    /// Unanswered publishes, oldest first: `(seq, topic, payload)`.
    pub(crate) fn unanswered(&self) -> impl Iterator<Item = (u64, &str, &[u8])> + '_ {
        self.entries.iter().filter(|e| !e.answered).map(|e| {
            let at = (e.off - self.base) as usize;
            let t_end = at + e.topic_len as usize;
            let p_end = t_end + e.payload_len as usize;
            // Only `push` writes these bytes, from a `&str`, so they are UTF-8.
            let topic = std::str::from_utf8(&self.bytes[at..t_end]).unwrap_or("");
            (e.seq, topic, &self.bytes[t_end..p_end])
        })
    }

    /// Counts resends (the driver resent `n` publishes after an open).
    pub(crate) fn note_resent(&mut self, n: u64) {
        self.counts.resent += n;
    }

    pub(crate) fn unanswered_len(&self) -> usize {
        self.unanswered
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub(crate) fn window(&self) -> u32 {
        self.window
    }

    pub(crate) fn counts(&self) -> &PublishCounts {
        &self.counts
    }

    /// The last [`RECENT_NACKS`] refusals, oldest first.
    pub(crate) fn recent_nacks(&self) -> impl Iterator<Item = &NackRecord> + '_ {
        self.recent_nacks.iter()
    }

    /// Remembers the outcome of `seq` for [`PublishWindow::take_watched`]. A seq that
    /// is not unanswered (already answered, or never published) is reported as unknown.
    pub(crate) fn watch(&mut self, seq: u64) -> bool {
        let pending = self
            .entries
            .binary_search_by_key(&seq, |e| e.seq)
            .is_ok_and(|i| !self.entries[i].answered);
        self.watch = pending.then_some((seq, None));
        pending
    }

    /// The watched publish's outcome once it arrived (the watch then ends).
    pub(crate) fn take_watched(&mut self) -> Option<Outcome> {
        match self.watch.take() {
            Some((_, Some(o))) => Some(o),
            other => {
                self.watch = other;
                None
            }
        }
    }

    pub(crate) fn unwatch(&mut self) {
        self.watch = None;
    }

    fn pop_answered(&mut self) {
        while self.entries.front().is_some_and(|e| e.answered) {
            self.entries.pop_front();
        }
        if self.entries.is_empty() {
            self.base += self.bytes.len() as u64;
            self.bytes.clear();
        }
    }

    /// Drops the bytes of popped entries once they are most of the buffer (amortised:
    /// each byte moves at most once per buffer's worth of publishes).
    fn compact(&mut self) {
        let Some(front) = self.entries.front() else {
            return;
        };
        let dead = (front.off - self.base) as usize;
        if dead > 0 && dead >= self.bytes.len() / 2 {
            self.bytes.copy_within(dead.., 0);
            self.bytes.truncate(self.bytes.len() - dead);
            self.base += dead as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn open(window: u32) -> PublishWindow {
        let mut w = PublishWindow::default();
        w.handle_opened(window, 0);
        w
    }

    fn resend_list(w: &PublishWindow) -> Vec<(u64, String, Vec<u8>)> {
        w.unanswered()
            .map(|(s, t, p)| (s, t.to_owned(), p.to_vec()))
            .collect()
    }

    #[test]
    fn not_open_until_opened_and_numbers_after_the_routers_last_seq() {
        let mut w = PublishWindow::default();
        assert_eq!(w.push("a", b"x"), Err(PushError::NotOpen));
        w.handle_opened(4, 41);
        assert_eq!(w.push("a", b"x"), Ok(42));
        assert_eq!(w.push("a", b"y"), Ok(43));
        // A reopen reporting less than we used never moves numbering back.
        w.handle_disconnect();
        assert_eq!(w.push("a", b"z"), Err(PushError::NotOpen));
        w.handle_opened(4, 10);
        assert_eq!(w.push("a", b"z"), Ok(44));
    }

    #[test]
    fn window_bounds_the_unanswered_and_acks_free_it() {
        let mut w = open(2);
        assert_eq!(w.push("t", b"1"), Ok(1));
        assert_eq!(w.push("t", b"2"), Ok(2));
        assert!(!w.has_room());
        assert_eq!(w.push("t", b"3"), Err(PushError::Full));
        assert_eq!(w.handle_ack(1, 1), 1);
        assert_eq!(w.push("t", b"3"), Ok(3));
        assert_eq!(w.handle_ack(1, 3), 2);
        assert_eq!(w.unanswered_len(), 0);
        assert_eq!(w.counts().acked, 3);
    }

    #[test]
    fn an_out_of_order_answer_keeps_its_slot_until_the_older_ones_are_answered() {
        let mut w = open(2);
        w.push("t", b"1").unwrap();
        w.push("t", b"2").unwrap();
        assert!(w.handle_nack(2, NackReason::QUEUE_FULL, "full"));
        assert_eq!(w.unanswered_len(), 1);
        assert!(!w.has_room());
        assert_eq!(resend_list(&w), vec![(1, "t".into(), b"1".to_vec())]);
        assert_eq!(w.handle_ack(1, 2), 1);
        assert!(w.has_room());
        assert_eq!(
            w.counts().nacked_by_reason,
            vec![(NackReason::QUEUE_FULL, 1)]
        );
        let rec: Vec<_> = w.recent_nacks().cloned().collect();
        assert_eq!(
            rec,
            vec![NackRecord {
                seq: 2,
                reason: NackReason::QUEUE_FULL,
                text: "full".into()
            }]
        );
    }

    #[test]
    fn repeated_and_unknown_answers_count_nothing() {
        let mut w = open(8);
        w.push("t", b"1").unwrap();
        assert_eq!(w.handle_ack(1, 1), 1);
        assert_eq!(w.handle_ack(1, 1), 0);
        assert!(!w.handle_nack(1, NackReason::BUSY, ""));
        assert_eq!(w.handle_ack(5, 9), 0);
        assert!(!w.handle_nack(77, NackReason::BUSY, ""));
        assert_eq!((w.counts().acked, w.counts().nacked), (1, 0));
    }

    #[test]
    fn watch_reports_the_outcome_of_one_seq() {
        let mut w = open(8);
        let a = w.push("t", b"1").unwrap();
        let b = w.push("t", b"2").unwrap();
        assert!(w.watch(b));
        w.handle_ack(a, a);
        assert_eq!(w.take_watched(), None);
        w.handle_nack(b, NackReason::TOO_LARGE, "too big");
        assert_eq!(
            w.take_watched(),
            Some(Outcome::Nacked {
                reason: NackReason::TOO_LARGE,
                text: "too big".into()
            })
        );
        assert!(!w.watch(b), "already answered");
    }

    #[test]
    fn the_byte_buffer_is_reused_at_steady_state() {
        let mut w = open(16);
        let payload = [7u8; 100];
        for _ in 0..64 {
            let s = w.push("md/x", &payload).unwrap();
            w.handle_ack(s, s);
        }
        // Keep 8 outstanding while cycling many more through.
        for _ in 0..8 {
            w.push("md/x", &payload).unwrap();
        }
        let cycle = |w: &mut PublishWindow, n: usize| {
            for _ in 0..n {
                let s = w.push("md/x", &payload).unwrap();
                let oldest = s - 8;
                w.handle_ack(oldest, oldest);
            }
        };
        // Warm-up: the buffer grows to about twice the outstanding bytes, then stays.
        cycle(&mut w, 100);
        let cap = (w.bytes.capacity(), w.entries.capacity());
        cycle(&mut w, 10_000);
        assert_eq!((w.bytes.capacity(), w.entries.capacity()), cap);
        assert_eq!(w.unanswered().count(), 8);
        assert!(w.unanswered().all(|(_, t, p)| t == "md/x" && p == payload));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Publish(u8),
        /// Ack a range given relative to the oldest possible seq.
        Ack(u8, u8),
        Nack(u8, u16),
        Reconnect {
            window: u8,
            router_ahead: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u8>().prop_map(Op::Publish),
            2 => (any::<u8>(), 0u8..6).prop_map(|(a, n)| Op::Ack(a, n)),
            1 => (any::<u8>(), 1u16..8).prop_map(|(a, r)| Op::Nack(a, r)),
            1 => (1u8..10, 0u8..3).prop_map(|(w, a)| Op::Reconnect { window: w, router_ahead: a }),
        ]
    }

    proptest! {
        /// Against a map model: every publish gets exactly one outcome; the resend list
        /// is exactly the unanswered publishes in seq order with their bytes; the window
        /// is never exceeded; numbering strictly increases.
        #[test]
        fn agrees_with_a_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut w = open(4);
            // seq -> (topic, payload, outcome: None | Some(acked?))
            let mut model: BTreeMap<u64, (String, Vec<u8>, Option<bool>)> = BTreeMap::new();
            let mut last = 0u64;
            let mut nacked = 0u64;
            for op in ops {
                match op {
                    Op::Publish(b) => {
                        let topic = format!("t/{}", b % 5);
                        let payload = vec![b; (b % 17) as usize];
                        let room = w.has_room();
                        match w.push(&topic, &payload) {
                            Ok(seq) => {
                                prop_assert!(room);
                                prop_assert!(seq > last);
                                last = seq;
                                model.insert(seq, (topic, payload, None));
                            }
                            Err(_) => prop_assert!(!room),
                        }
                    }
                    Op::Ack(a, n) => {
                        let first = last.saturating_sub(u64::from(a % 12));
                        let end = first + u64::from(n);
                        let want = model.range(first..=end).filter(|(_, v)| v.2.is_none()).count();
                        prop_assert_eq!(w.handle_ack(first, end), want as u64);
                        for (_, v) in model.range_mut(first..=end) {
                            v.2.get_or_insert(true);
                        }
                    }
                    Op::Nack(a, r) => {
                        let seq = last.saturating_sub(u64::from(a % 12));
                        let want = model.get(&seq).is_some_and(|v| v.2.is_none());
                        prop_assert_eq!(w.handle_nack(seq, NackReason(r), "x"), want);
                        if want {
                            nacked += 1;
                            if let Some(v) = model.get_mut(&seq) { v.2 = Some(false); }
                        }
                    }
                    Op::Reconnect { window, router_ahead } => {
                        w.handle_disconnect();
                        prop_assert!(!w.has_room());
                        w.handle_opened(u32::from(window), last + u64::from(router_ahead));
                        last += u64::from(router_ahead);
                        let want: Vec<_> = model.iter()
                            .filter(|(_, v)| v.2.is_none())
                            .map(|(s, v)| (*s, v.0.clone(), v.1.clone()))
                            .collect();
                        prop_assert_eq!(resend_list(&w), want);
                    }
                }
                prop_assert_eq!(w.unanswered_len(), model.values().filter(|v| v.2.is_none()).count());
            }
            // The router finally answers everything: each publish exactly one outcome.
            let n = w.handle_ack(1, u64::MAX);
            prop_assert_eq!(w.unanswered_len(), 0);
            let c = w.counts();
            prop_assert_eq!(c.published, model.len() as u64);
            prop_assert_eq!(c.acked + c.nacked, c.published);
            prop_assert_eq!(c.nacked, nacked);
            prop_assert_eq!(c.acked, model.values().filter(|v| v.2 != Some(false)).count() as u64);
            prop_assert!(n <= c.acked);
            prop_assert!(w.entries.is_empty());
        }
    }
}
