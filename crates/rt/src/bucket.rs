//! A token bucket over typed time: a rate per second with a burst.
//!
//! Pure: the caller passes the time. Used where a peer's requests cost work the peer
//! chooses (the router's cache scans, multicast retransmissions): the bucket bounds
//! that work per second whatever the peer sends.

use crate::MonoNanos;

/// Tokens refill at `rate` per second up to `burst`; [`TokenBucket::try_take`] spends
/// them. Starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    tokens: u64,
    /// Spent beyond the tokens there were ([`TokenBucket::take`]): refilling repays
    /// it before any token shows again.
    debt: u64,
    burst: u64,
    rate: u64,
    refilled: MonoNanos,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilling at `rate` per second.
    pub fn full(rate: u64, burst: u64, now: MonoNanos) -> TokenBucket {
        TokenBucket {
            tokens: burst,
            debt: 0,
            burst,
            rate,
            refilled: now,
        }
    }

    /// Tokens available at `now`.
    pub fn available(&mut self, now: MonoNanos) -> u64 {
        self.refill(now);
        self.tokens
    }

    /// Spends `n` tokens if the bucket holds them at `now`; false (nothing spent) if not.
    pub fn try_take(&mut self, now: MonoNanos, n: u64) -> bool {
        self.refill(now);
        match self.tokens.checked_sub(n) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }

    /// Spends `n` tokens; what the bucket lacks is owed, repaid by refilling before
    /// any token shows again. So one piece of work larger than the burst may be done
    /// from a full bucket and is still paid for at the rate.
    pub fn take(&mut self, n: u64) {
        match self.tokens.checked_sub(n) {
            Some(left) => self.tokens = left,
            None => {
                self.debt = self.debt.saturating_add(n - self.tokens);
                self.tokens = 0;
            }
        }
    }

    /// The most tokens the bucket holds.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    fn refill(&mut self, now: MonoNanos) {
        if now <= self.refilled || self.rate == 0 {
            return;
        }
        let ns = u128::from(now.saturating_sub(self.refilled));
        let add = ns * u128::from(self.rate) / 1_000_000_000;
        if add == 0 {
            // Less than one token so far: `refilled` stays, the fraction is kept.
            return;
        }
        let owed = u128::from(self.debt);
        let room = owed + u128::from(self.burst.saturating_sub(self.tokens));
        if add >= room {
            // Repaid and full: whatever accrued beyond the burst is not kept.
            self.debt = 0;
            self.tokens = self.burst;
            self.refilled = now;
        } else {
            // `add` < `room`. The debt first; `refilled` advances by the time those
            // tokens took, not to `now`, so the fraction of the next one is kept.
            if add <= owed {
                self.debt -= add as u64;
            } else {
                self.tokens += (add - owed) as u64;
                self.debt = 0;
            }
            let took = (add * 1_000_000_000).div_ceil(u128::from(self.rate));
            self.refilled = MonoNanos(self.refilled.0.saturating_add(took as u64).min(now.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn starts_full_spends_and_refills_at_the_rate_up_to_the_burst() {
        let mut b = TokenBucket::full(1_000, 100, MonoNanos(0));
        assert!(b.try_take(MonoNanos(0), 60));
        assert!(!b.try_take(MonoNanos(0), 41), "40 left");
        assert!(b.try_take(MonoNanos(0), 40));
        assert_eq!(b.available(MonoNanos(10 * MS)), 10, "1,000/s for 10 ms");
        assert_eq!(
            b.available(MonoNanos(10_000 * MS)),
            100,
            "never past the burst"
        );
    }

    #[test]
    fn work_beyond_the_tokens_is_owed_and_repaid_before_tokens_show() {
        let mut b = TokenBucket::full(1_000, 100, MonoNanos(0));
        b.take(350);
        assert_eq!(b.available(MonoNanos(0)), 0);
        // 250 owed: 250 ms repays it, nothing shows meanwhile.
        assert_eq!(b.available(MonoNanos(200 * MS)), 0);
        assert_eq!(b.available(MonoNanos(250 * MS)), 0);
        assert_eq!(b.available(MonoNanos(260 * MS)), 10);
        assert_eq!(b.available(MonoNanos(10_000 * MS)), 100);
        // A debt longer ago than it takes to repay it and refill: full.
        b.take(1_000);
        assert_eq!(b.available(MonoNanos(20_000 * MS)), 100);
        assert_eq!(b.burst(), 100);
    }

    #[test]
    fn a_slow_rate_accrues_fractions_across_calls() {
        let mut b = TokenBucket::full(1, 1, MonoNanos(0));
        b.take(1);
        for t in 1..10 {
            assert_eq!(b.available(MonoNanos(t * 100 * MS)), 0);
        }
        assert_eq!(b.available(MonoNanos(1_000 * MS)), 1);
    }

    #[test]
    fn fractions_are_kept_across_refills() {
        // 1 token a second, asked every 1.5 s: 3 tokens in 3 s (dropping the half
        // token at each refill gave 1 per call: 2).
        let mut b = TokenBucket::full(1, 10, MonoNanos(0));
        b.take(10);
        assert_eq!(b.available(MonoNanos(1_500 * MS)), 1);
        assert_eq!(b.available(MonoNanos(3_000 * MS)), 3);
        assert_eq!(b.available(MonoNanos(4_500 * MS)), 4);
    }

    #[test]
    fn a_huge_rate_after_a_long_gap_fills_the_bucket_without_wrapping() {
        let mut b = TokenBucket::full(u64::MAX, 1_000, MonoNanos(0));
        b.take(1_000);
        assert_eq!(b.available(MonoNanos(u64::MAX)), 1_000);
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let mut b = TokenBucket::full(1_000, 100, MonoNanos(5 * MS));
        b.take(100);
        assert_eq!(b.available(MonoNanos(0)), 0);
    }
}
