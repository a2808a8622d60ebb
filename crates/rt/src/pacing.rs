//! Open-loop pacing: wait until a message's intended send time, on the monotonic clock.

use std::time::Duration;

use crate::MonoNanos;

/// Below this much remaining time, [`wait_until`] spins instead of sleeping (sleep
/// wake-ups are late by tens of µs, more on a loaded machine).
const SPIN_BELOW_NS: u64 = 200_000;

/// Busy-waits (sleeping while more than ~200 µs remain) until `MonoNanos::now() >= t`.
/// Returns at once when `t` is already past.
pub fn wait_until(t: MonoNanos) {
    loop {
        let now = MonoNanos::now();
        if now >= t {
            return;
        }
        let remaining = t.saturating_sub(now);
        if remaining > SPIN_BELOW_NS {
            std::thread::sleep(Duration::from_nanos(remaining - SPIN_BELOW_NS));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The longest single sleep of [`wait_until_or`]: how late a stop is seen at worst.
const STOP_CHECK_NS: u64 = 50_000_000;

/// [`wait_until`], looking at `stop` at least every 50 ms: false (at once) when it
/// says stop. For waits whose length comes from input (a capture's timestamps can be
/// years apart) and must still end at the first Ctrl-C.
pub fn wait_until_or(t: MonoNanos, stop: impl Fn() -> bool) -> bool {
    loop {
        if stop() {
            return false;
        }
        let now = MonoNanos::now();
        let remaining = t.saturating_sub(now);
        if remaining <= STOP_CHECK_NS {
            wait_until(t);
            return true;
        }
        std::thread::sleep(Duration::from_nanos(STOP_CHECK_NS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_of_years_ends_when_stop_says_so() {
        let years = MonoNanos::now().add_nanos(100 * 365 * 86_400 * 1_000_000_000);
        let asked = std::cell::Cell::new(0);
        let done = wait_until_or(years, || {
            asked.set(asked.get() + 1);
            asked.get() > 3
        });
        assert!(!done);
        assert_eq!(asked.get(), 4, "looked at stop before each 50 ms sleep");
        // A near deadline is reached.
        let t = MonoNanos::now().add_nanos(1_000_000);
        assert!(wait_until_or(t, || false));
        assert!(MonoNanos::now() >= t);
    }

    #[test]
    fn wait_until_reaches_the_deadline() {
        let t = MonoNanos::now().add_nanos(1_000_000);
        wait_until(t);
        assert!(MonoNanos::now() >= t);
        // A past deadline returns at once.
        wait_until(MonoNanos(0));
    }
}
