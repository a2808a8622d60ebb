//! What a driver's loop does when there is nothing to do: the one idle-strategy type of
//! every tickwire driver (router, feed handler, FIX engine, bench clients).
//!
//! Not every driver offers every strategy: each one parses its option with
//! [`IdleStrategy::parse_one_of`] and the strategies it supports, so `--idle yield` is
//! refused where it means nothing. The spellings are the same everywhere: `block`,
//! `spin`, `hybrid`, `yield`.

use std::time::Duration;

/// What a driver's loop does when there is nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum IdleStrategy {
    /// Sleep in `epoll_wait`/`poll` until a socket is ready. Lowest CPU, adds the
    /// kernel's wake-up latency (tens of microseconds on virtual machines) to the first
    /// message after an idle period.
    Block,
    /// Never sleep: poll sockets in a tight loop. Lowest latency; burns one core.
    Spin,
    /// Spin for a while after the last activity, then block. Low latency under steady
    /// traffic, idle CPU when quiet. The router's default; the router's spin shrinks
    /// while spinning finds nothing ([`SpinBudget`]).
    #[default]
    Hybrid,
    /// Busy-poll, yielding the CPU after each empty poll: for threads that share a
    /// core with others, so a waiting thread never holds the core for a scheduler
    /// slice and never pays a sleeping thread's wake-up.
    Yield,
}

impl IdleStrategy {
    /// Every strategy, in the order help texts list them.
    pub const ALL: [IdleStrategy; 4] = [
        IdleStrategy::Block,
        IdleStrategy::Spin,
        IdleStrategy::Hybrid,
        IdleStrategy::Yield,
    ];

    /// The name the command line and the config files use.
    pub const fn name(self) -> &'static str {
        match self {
            IdleStrategy::Block => "block",
            IdleStrategy::Spin => "spin",
            IdleStrategy::Hybrid => "hybrid",
            IdleStrategy::Yield => "yield",
        }
    }

    /// Parses `s` as one of `allowed` (the strategies a driver supports); the error
    /// lists them: `unknown idle strategy "nap": expected block, spin or hybrid`.
    pub fn parse_one_of(s: &str, allowed: &[IdleStrategy]) -> Result<IdleStrategy, String> {
        allowed
            .iter()
            .copied()
            .find(|i| i.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown idle strategy {s:?}: expected {}",
                    one_of(allowed.iter().map(|i| i.name()))
                )
            })
    }

    /// How long the driver's next readiness wait may block: zero (poll and return)
    /// unless the strategy sleeps. `quiet` is how long the loop has had nothing to do,
    /// `hybrid_spin` how long [`IdleStrategy::Hybrid`] spins before it blocks, `block`
    /// the longest sleep the driver allows (so it still sees its timers and stop flag).
    #[inline]
    pub fn wait_timeout(self, quiet: Duration, hybrid_spin: Duration, block: Duration) -> Duration {
        match self {
            IdleStrategy::Spin | IdleStrategy::Yield => Duration::ZERO,
            IdleStrategy::Hybrid if quiet < hybrid_spin => Duration::ZERO,
            IdleStrategy::Hybrid | IdleStrategy::Block => block,
        }
    }

    /// What to do after a poll that found nothing, when the wait itself did not sleep:
    /// [`IdleStrategy::Yield`] yields the CPU, the spinning ones hint the CPU that this
    /// is a spin loop, [`IdleStrategy::Block`] does nothing (its wait slept).
    #[inline]
    pub fn relax(self) {
        match self {
            IdleStrategy::Yield => std::thread::yield_now(),
            IdleStrategy::Spin | IdleStrategy::Hybrid => std::hint::spin_loop(),
            IdleStrategy::Block => {}
        }
    }
}

/// How long [`IdleStrategy::Hybrid`] spins next, learnt from the quiet periods seen:
/// spinning after activity pays only when the next activity comes within the spin. A
/// quiet period that outlasted the longest spin (`max`, `hybrid_spin_us`) means the
/// spin found nothing: the next spin is half as long, down to none (then the loop
/// blocks at once, as [`IdleStrategy::Block`] does). One shorter than `max` means a
/// whole spin would have caught it: the next spin is `max` again. So a feed whose
/// messages come 100 µs apart keeps the loop spinning (and its latency), and one whose
/// messages come 250 µs apart, which a 200 µs spin never caught, no longer burns 80%
/// of a core for nothing. Pure: the caller measures the quiet periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinBudget {
    max: Duration,
    now: Duration,
}

impl SpinBudget {
    /// Spins below this are not worth a turn: the budget is then none.
    const FLOOR: Duration = Duration::from_micros(1);

    /// A budget that starts at (and never exceeds) `max`.
    pub fn new(max: Duration) -> SpinBudget {
        SpinBudget { max, now: max }
    }

    /// How long to spin after the last activity now.
    pub fn get(&self) -> Duration {
        self.now
    }

    /// Activity came after `quiet` with nothing to do: learns from it.
    pub fn on_activity(&mut self, quiet: Duration) {
        self.now = if quiet < self.max {
            self.max
        } else {
            let half = self.now / 2;
            if half < Self::FLOOR {
                Duration::ZERO
            } else {
                half
            }
        };
    }
}

/// `a`, `a or b`, `a, b or c`.
fn one_of<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

impl std::fmt::Display for IdleStrategy {
    /// The name the command line and the config files use.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for IdleStrategy {
    type Err = String;
    /// Any of the four names; drivers that support fewer use
    /// [`IdleStrategy::parse_one_of`].
    fn from_str(s: &str) -> Result<Self, String> {
        IdleStrategy::parse_one_of(s, &IdleStrategy::ALL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quiet periods longer than the longest spin halve the next one down to none;
    /// one shorter restores it; an idle loop with no budget blocks at once.
    #[test]
    fn the_spin_budget_halves_when_spinning_finds_nothing_and_comes_back() {
        let max = Duration::from_micros(200);
        let mut b = SpinBudget::new(max);
        assert_eq!(b.get(), max);
        // 100 µs apart: a whole spin catches each one.
        for _ in 0..10 {
            b.on_activity(Duration::from_micros(100));
            assert_eq!(b.get(), max);
        }
        // 250 µs apart: never caught.
        b.on_activity(Duration::from_micros(250));
        assert_eq!(b.get(), Duration::from_micros(100));
        b.on_activity(Duration::from_micros(250));
        assert_eq!(b.get(), Duration::from_micros(50));
        for _ in 0..20 {
            b.on_activity(Duration::from_micros(250));
        }
        assert_eq!(b.get(), Duration::ZERO);
        let hybrid = IdleStrategy::Hybrid;
        let block = Duration::from_millis(100);
        assert_eq!(hybrid.wait_timeout(Duration::ZERO, b.get(), block), block);
        // Back to 150 µs apart: spinning pays again.
        b.on_activity(Duration::from_micros(150));
        assert_eq!(b.get(), max);
        assert_eq!(
            hybrid.wait_timeout(Duration::from_micros(10), b.get(), block),
            Duration::ZERO
        );
    }

    #[test]
    fn names_round_trip() {
        for i in IdleStrategy::ALL {
            assert_eq!(i.to_string().parse::<IdleStrategy>(), Ok(i));
        }
    }

    #[test]
    fn a_driver_refuses_what_it_does_not_support() {
        use IdleStrategy::*;
        assert_eq!(IdleStrategy::parse_one_of("spin", &[Spin, Block]), Ok(Spin));
        assert_eq!(
            IdleStrategy::parse_one_of("hybrid", &[Spin, Block]).unwrap_err(),
            "unknown idle strategy \"hybrid\": expected spin or block"
        );
        assert_eq!(
            "nap".parse::<IdleStrategy>().unwrap_err(),
            "unknown idle strategy \"nap\": expected block, spin, hybrid or yield"
        );
        assert_eq!(IdleStrategy::default(), Hybrid);
    }

    #[test]
    fn only_block_and_quiet_hybrid_sleep() {
        use IdleStrategy::*;
        let (spin, block) = (Duration::from_micros(50), Duration::from_millis(100));
        let busy = Duration::from_micros(10);
        let quiet = Duration::from_millis(1);
        assert_eq!(Spin.wait_timeout(quiet, spin, block), Duration::ZERO);
        assert_eq!(Yield.wait_timeout(quiet, spin, block), Duration::ZERO);
        assert_eq!(Hybrid.wait_timeout(busy, spin, block), Duration::ZERO);
        assert_eq!(Hybrid.wait_timeout(quiet, spin, block), block);
        assert_eq!(Block.wait_timeout(busy, spin, block), block);
    }
}
