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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_reaches_the_deadline() {
        let t = MonoNanos::now().add_nanos(1_000_000);
        wait_until(t);
        assert!(MonoNanos::now() >= t);
        // A past deadline returns at once.
        wait_until(MonoNanos(0));
    }
}
