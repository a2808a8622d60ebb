//! Latency statistics and correctness counters. Pure: no clock, no IO.
//!
//! Latency is always measured from a message's *intended* send time
//! ([`latency_from_intended`]), so a sender that stalls shows up as latency instead of
//! silently sending later (no coordinated omission, rule 2 of docs/benchmarking.md).

use serde::Serialize;
pub use tickwire_rt::latency::{Latency, Summary, MAX_NS, P9999_MIN_SAMPLES};

/// Latency of a message in ns, measured from its *intended* send time (from the
/// schedule), not from when the sender got round to sending it: a sender stalled for
/// 10 ms adds up to 10 ms to every message due during the stall. 0 if `received_ns`
/// is before `intended_ns` (cannot happen on one monotonic clock).
///
/// The same function gives the sender's lateness: `latency_from_intended(intended, sent)`.
#[inline]
pub fn latency_from_intended(intended_ns: u64, received_ns: u64) -> u64 {
    received_ns.saturating_sub(intended_ns)
}

/// Correctness counters; `sent` and `received` must reconcile.
///
/// As filled by [`SeqTracker`] (one stream, everything sent, nothing duplicated
/// undetected): `received - duplicates + gaps == sent` once the last message arrived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Messages sent (filled by the sender, not by [`SeqTracker`]).
    pub sent: u64,
    /// Every message observed, duplicates and late ones included.
    pub received: u64,
    /// Numbers skipped and not (yet) arrived late.
    pub gaps: u64,
    /// Repeats of the number seen just before (see [`SeqTracker::observe`]).
    pub duplicates: u64,
    /// Numbers that arrived after a higher one (late arrivals).
    pub out_of_order: u64,
}

impl Counters {
    /// Adds another set of counters (e.g. one per subscriber) into this one.
    pub fn add(&mut self, other: &Counters) {
        self.sent += other.sent;
        self.received += other.received;
        self.gaps += other.gaps;
        self.duplicates += other.duplicates;
        self.out_of_order += other.out_of_order;
    }
}

/// Tracks one stream of sequence numbers (one publisher as seen by one subscriber).
/// O(1) memory and time per message.
#[derive(Debug, Clone, Default)]
pub struct SeqTracker {
    /// The number expected next: the highest seen plus `step`.
    next: u64,
    /// Whether anything was observed (before that, `next - step` was never seen).
    started: bool,
    /// Gaps this tracker counted that no late arrival has filled yet (so that a late
    /// arrival never takes back a gap that another stream counted into a shared `c`).
    open_gaps: u64,
}

impl SeqTracker {
    /// Feeds sequence number `seq` (expected to count up from 0 by `step`), updating
    /// `c.received`, `c.gaps` (missing numbers), `c.duplicates`/`c.out_of_order`.
    ///
    /// - `seq == next`: in order.
    /// - `seq > next`: `(seq - next) / step` numbers are missing: added to `gaps`. A
    ///   stream may start at any `seq < step` (sender k of n numbering `k, k+n, ...`)
    ///   without counting a gap.
    /// - `seq == next - step`: the number seen last, again: a duplicate.
    /// - any other `seq < next`: a late arrival, counted as `out_of_order`; it fills one
    ///   of the gaps counted earlier, so `gaps` goes down by one. Without remembering
    ///   every number, an older *duplicate* cannot be told from a late arrival; it is
    ///   counted as out-of-order too (reorder and duplication are both bugs over TCP).
    ///
    /// `step` 0 is taken as 1.
    pub fn observe(&mut self, seq: u64, step: u64, c: &mut Counters) {
        let step = step.max(1);
        c.received += 1;
        if seq >= self.next {
            let missing = (seq - self.next) / step;
            c.gaps += missing;
            self.open_gaps += missing;
            self.next = seq.saturating_add(step);
            self.started = true;
        } else if self.started && seq == self.next - step {
            c.duplicates += 1;
        } else {
            c.out_of_order += 1;
            if self.open_gaps > 0 {
                self.open_gaps -= 1;
                c.gaps = c.gaps.saturating_sub(1);
            }
        }
    }

    /// The number expected next.
    pub fn next_expected(&self) -> u64 {
        self.next
    }
}

/// docs/benchmarking.md rule 3: a run whose achieved send rate is below 90% of the target is
/// INVALID (saturated). Returns `None` when valid, else the reason.
///
/// A target that is not positive (0: no target, e.g. ping-pong) is never INVALID.
/// Exactly 90% is valid.
pub fn invalid_reason(target_rate: f64, achieved_rate: f64) -> Option<String> {
    if !target_rate.is_finite() || target_rate <= 0.0 {
        return None;
    }
    // `a * 10 < t * 9` rather than `a < 0.9 * t`: 0.9 is inexact in binary and would
    // make some exact-90% runs INVALID.
    if achieved_rate.is_nan() || achieved_rate * 10.0 < target_rate * 9.0 {
        Some(format!(
            "achieved {achieved_rate:.0} msg/s is below 90% of the target {target_rate:.0} msg/s: saturated"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Coordinated omission: the schedule wants a message every 100 µs; the sender
    /// stalls for 10 ms and then sends the messages it owes late. Measured from the
    /// intended time the stall is latency; measured from the actual send it vanishes.
    #[test]
    fn a_sender_stall_shows_up_as_latency() {
        const INTERVAL: u64 = 100_000;
        const WIRE: u64 = 20_000; // one-way transit
        const STALL_AT: u64 = 100_000_000;
        const STALL: u64 = 10_000_000;
        let mut from_intended = Latency::new();
        let mut from_actual_send = Latency::new();
        let mut lateness = Latency::new();
        let mut clock = 0u64; // the simulated sender's clock
        for i in 0..10_000u64 {
            let intended = i * INTERVAL;
            clock = clock.max(intended); // open loop: wait for the slot, never for replies
            if (STALL_AT..STALL_AT + INTERVAL).contains(&clock) {
                clock += STALL; // e.g. a page fault, a preemption, a GC
            }
            let sent = clock;
            let received = sent + WIRE;
            from_intended.record(latency_from_intended(intended, received));
            from_actual_send.record(received - sent);
            lateness.record(latency_from_intended(intended, sent));
        }
        let s = from_intended.summary();
        assert!(s.max_us >= 10_000.0, "max {} µs", s.max_us);
        let over_1ms = from_intended.hist.count_between(1_000_000, MAX_NS);
        assert!(over_1ms >= 90, "only {over_1ms} samples over 1 ms");
        assert!(lateness.summary().max_us >= 10_000.0);
        // What a closed-loop measurement would have reported: no trace of the stall.
        assert!(from_actual_send.summary().max_us < 21.0);
        assert_eq!(latency_from_intended(10, 5), 0);
    }

    #[test]
    fn runs_below_ninety_percent_of_the_target_are_invalid() {
        let reason = invalid_reason(100_000.0, 89_000.0).expect("89% is invalid");
        assert_eq!(
            reason,
            "achieved 89000 msg/s is below 90% of the target 100000 msg/s: saturated"
        );
        assert_eq!(invalid_reason(100_000.0, 90_000.0), None, "90% is valid");
        assert_eq!(invalid_reason(1_000.0, 900.0), None);
        assert_eq!(invalid_reason(333.0, 299.7), None);
        assert_eq!(invalid_reason(100_000.0, 120_000.0), None);
        assert!(invalid_reason(100_000.0, 0.0).is_some());
        assert!(invalid_reason(100_000.0, f64::NAN).is_some());
        assert_eq!(
            invalid_reason(0.0, 0.0),
            None,
            "no target, nothing to saturate"
        );
        assert_eq!(invalid_reason(0.0, 5.0), None);
        assert_eq!(invalid_reason(f64::NAN, 5.0), None);
    }

    fn track(seqs: &[u64], step: u64) -> Counters {
        let mut t = SeqTracker::default();
        let mut c = Counters::default();
        for &s in seqs {
            t.observe(s, step, &mut c);
        }
        c
    }

    fn counters(received: u64, gaps: u64, duplicates: u64, out_of_order: u64) -> Counters {
        Counters {
            sent: 0,
            received,
            gaps,
            duplicates,
            out_of_order,
        }
    }

    #[test]
    fn seq_tracker_counts_gaps_duplicates_and_late_arrivals() {
        assert_eq!(track(&[0, 1, 2, 3], 1), counters(4, 0, 0, 0));
        assert_eq!(
            track(&[0, 1, 4, 5], 1),
            counters(4, 2, 0, 0),
            "2 and 3 missing"
        );
        assert_eq!(
            track(&[2, 3], 1),
            counters(2, 2, 0, 0),
            "0 and 1 missing at the start"
        );
        assert_eq!(track(&[0, 1, 1, 2], 1), counters(4, 0, 1, 0), "1 twice");
        assert_eq!(
            track(&[0, 2, 1, 3], 1),
            counters(4, 0, 0, 1),
            "1 late fills its gap"
        );
        assert_eq!(
            track(&[0, 3, 1, 4], 1),
            counters(4, 1, 0, 1),
            "2 still missing"
        );
        // An older repeat cannot be told from a late arrival in O(1): out-of-order.
        assert_eq!(track(&[0, 1, 2, 0], 1), counters(4, 0, 0, 1));
        assert_eq!(track(&[0], 1), counters(1, 0, 0, 0));
        assert_eq!(track(&[0, 0], 1), counters(2, 0, 1, 0));
    }

    #[test]
    fn seq_tracker_follows_one_sender_of_several() {
        // Sender 2 of 3 numbers its messages 2, 5, 8, ...: no gap at the start.
        assert_eq!(track(&[2, 5, 8, 11], 3), counters(4, 0, 0, 0));
        assert_eq!(
            track(&[2, 5, 14], 3),
            counters(3, 2, 0, 0),
            "8 and 11 missing"
        );
        assert_eq!(track(&[2, 5, 5], 3), counters(3, 0, 1, 0));
        assert_eq!(track(&[0, 1, 2], 0), counters(3, 0, 0, 0), "step 0 is 1");
    }

    #[test]
    fn a_late_arrival_only_fills_gaps_of_its_own_stream() {
        // Two streams share one set of counters; stream a has a gap, stream b a late
        // (actually re-sent) number that must not cancel a's gap.
        let (mut a, mut b, mut c) = (
            SeqTracker::default(),
            SeqTracker::default(),
            Counters::default(),
        );
        for s in [0, 2] {
            a.observe(s, 1, &mut c);
        }
        for s in [0, 1, 2, 0] {
            b.observe(s, 1, &mut c);
        }
        assert_eq!(c, counters(6, 1, 0, 1));
        // Reconciliation: received - duplicates + gaps == sent.
        let mut total = track(&[0, 1, 3, 3, 2, 5], 1);
        total.sent = 6;
        assert_eq!(total.received - total.duplicates + total.gaps, total.sent);
        let mut sum = Counters::default();
        sum.add(&total);
        sum.add(&total);
        assert_eq!(sum.received, 2 * total.received);
    }
}
