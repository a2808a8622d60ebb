//! Bounded exponential backoff with jitter (pure: no clock, no sleep, its own PRNG).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::time::Duration;

/// The pauses between reconnection attempts: the first is `initial`, each next one
/// doubles up to `max`. With jitter each pause is drawn uniformly from
/// `[pause / 2, pause]` ("equal jitter"), so that clients losing the same router at the
/// same moment do not all come back in the same millisecond, while the pause never
/// exceeds `max` and never falls below half the schedule.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    jitter: bool,
    rng: u64,
}

impl Backoff {
    /// A schedule from `initial` (at least 1 ms) doubling up to `max` (at least
    /// `initial`); `seed` feeds the jitter (any value; 0 is replaced).
    pub fn new(initial: Duration, max: Duration, jitter: bool, seed: u64) -> Backoff {
        let initial = initial.max(Duration::from_millis(1));
        let max = max.max(initial);
        Backoff {
            initial,
            max,
            next: initial,
            jitter,
            rng: seed | 1,
        }
    }

    /// The pause before the next attempt; the one after it is twice as long (bounded).
    pub fn next_pause(&mut self) -> Duration {
        let base = self.next;
        self.next = base.saturating_mul(2).min(self.max);
        if !self.jitter {
            return base;
        }
        let half = base / 2;
        let span = u64::try_from((base - half).as_nanos()).unwrap_or(u64::MAX);
        let r = self.random();
        half + Duration::from_nanos(r % span.saturating_add(1))
    }

    /// Back to the first pause (after a successful connection).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// xorshift64*: enough to spread clients apart, no dependency.
    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn without_jitter_it_doubles_up_to_the_bound_and_resets() {
        let mut b = Backoff::new(50 * MS, 300 * MS, false, 7);
        let got: Vec<_> = (0..5).map(|_| b.next_pause()).collect();
        assert_eq!(got, [50 * MS, 100 * MS, 200 * MS, 300 * MS, 300 * MS]);
        b.reset();
        assert_eq!(b.next_pause(), 50 * MS);
    }

    #[test]
    fn jitter_stays_between_half_and_the_full_pause() {
        let mut plain = Backoff::new(10 * MS, 1000 * MS, false, 1);
        let mut jit = Backoff::new(10 * MS, 1000 * MS, true, 12345);
        let mut differs = false;
        for _ in 0..200 {
            let p = plain.next_pause();
            let j = jit.next_pause();
            assert!(j >= p / 2 && j <= p, "{j:?} outside [{:?}, {p:?}]", p / 2);
            differs |= j != p;
        }
        assert!(differs, "jitter never moved a pause");
    }

    #[test]
    fn two_seeds_give_two_schedules() {
        let mut a = Backoff::new(100 * MS, 100 * MS, true, 1);
        let mut b = Backoff::new(100 * MS, 100 * MS, true, 2);
        let a: Vec<_> = (0..8).map(|_| a.next_pause()).collect();
        let b: Vec<_> = (0..8).map(|_| b.next_pause()).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn degenerate_bounds_are_clamped() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO, true, 0);
        for _ in 0..10 {
            let p = b.next_pause();
            assert!(p <= MS && p >= MS / 2, "{p:?}");
        }
    }
}
