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
    burst: u64,
    rate: u64,
    refilled: MonoNanos,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilling at `rate` per second.
    pub fn full(rate: u64, burst: u64, now: MonoNanos) -> TokenBucket {
        TokenBucket {
            tokens: burst,
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

    /// Spends up to `n` tokens (what is there when fewer).
    pub fn take(&mut self, n: u64) {
        self.tokens = self.tokens.saturating_sub(n);
    }

    fn refill(&mut self, now: MonoNanos) {
        let ns = now.saturating_sub(self.refilled);
        let add = (u128::from(ns) * u128::from(self.rate) / 1_000_000_000) as u64;
        // While less than one token has accrued, `refilled` stays: the fraction is kept.
        if add > 0 {
            self.tokens = self.tokens.saturating_add(add).min(self.burst);
            self.refilled = now;
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
    fn a_slow_rate_accrues_fractions_across_calls() {
        let mut b = TokenBucket::full(1, 1, MonoNanos(0));
        b.take(1);
        for t in 1..10 {
            assert_eq!(b.available(MonoNanos(t * 100 * MS)), 0);
        }
        assert_eq!(b.available(MonoNanos(1_000 * MS)), 1);
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let mut b = TokenBucket::full(1_000, 100, MonoNanos(5 * MS));
        b.take(100);
        assert_eq!(b.available(MonoNanos(0)), 0);
    }
}
