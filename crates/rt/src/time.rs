//! Typed time: one newtype per clock, so a core cannot be fed the wrong one.
//!
//! - [`MonoNanos`]: `CLOCK_MONOTONIC` in nanoseconds (vDSO, no syscall). Every latency
//!   stamp on one host uses it (router STAMPS, client and feed-handler stamps), so stamps
//!   taken by different processes on one host compare directly.
//! - [`UtcNanos`]: wall-clock UTC in nanoseconds since the Unix epoch. FIX `SendingTime`
//!   and session schedules use it; it can jump (NTP), so never measure latency with it.
//!
//! Durations between two instants of one clock are `u64` nanoseconds
//! ([`MonoNanos::saturating_sub`]) or [`std::time::Duration`].

use std::time::Duration;

/// An instant of `CLOCK_MONOTONIC`, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonoNanos(pub u64);

/// An instant of wall-clock UTC, in nanoseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UtcNanos(pub u64);

macro_rules! instant_ops {
    ($t:ident) => {
        impl $t {
            /// The raw nanosecond count.
            #[inline]
            pub const fn as_nanos(self) -> u64 {
                self.0
            }

            /// `self - earlier` in nanoseconds, 0 if `earlier` is later.
            #[inline]
            pub const fn saturating_sub(self, earlier: $t) -> u64 {
                self.0.saturating_sub(earlier.0)
            }

            /// `self - earlier` as a [`Duration`], zero if `earlier` is later.
            #[inline]
            pub const fn duration_since(self, earlier: $t) -> Duration {
                Duration::from_nanos(self.saturating_sub(earlier))
            }

            /// This instant plus `ns` nanoseconds (saturating).
            #[inline]
            pub const fn add_nanos(self, ns: u64) -> $t {
                $t(self.0.saturating_add(ns))
            }

            /// This instant plus `d` (saturating).
            #[inline]
            pub fn add_duration(self, d: Duration) -> $t {
                $t(self
                    .0
                    .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
            }
        }
    };
}
instant_ops!(MonoNanos);
instant_ops!(UtcNanos);

impl MonoNanos {
    /// Reads `CLOCK_MONOTONIC`. Drivers only: cores take the time as a parameter.
    #[inline]
    pub fn now() -> MonoNanos {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        // tv_sec and tv_nsec of CLOCK_MONOTONIC are never negative.
        MonoNanos(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
    }
}

impl UtcNanos {
    /// Reads the wall clock (UTC). Drivers only: cores take the time as a parameter.
    /// A clock set before 1970 reads as 0.
    #[inline]
    pub fn now() -> UtcNanos {
        UtcNanos(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .unwrap_or(0),
        )
    }

    /// Milliseconds since the Unix epoch (display only).
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_never_goes_back() {
        let a = MonoNanos::now();
        let b = MonoNanos::now();
        assert!(b >= a);
        assert_eq!(a.saturating_sub(b.add_nanos(1)), 0);
    }

    #[test]
    fn utc_is_after_2020() {
        // 2020-01-01T00:00:00Z in ns: a wall clock below it is not a real clock.
        assert!(UtcNanos::now().as_nanos() > 1_577_836_800_000_000_000);
    }

    #[test]
    fn arithmetic_saturates() {
        let t = MonoNanos(u64::MAX - 1);
        assert_eq!(t.add_nanos(10), MonoNanos(u64::MAX));
        assert_eq!(t.add_duration(Duration::from_secs(1)), MonoNanos(u64::MAX));
        assert_eq!(
            MonoNanos(5_000).duration_since(MonoNanos(2_000)),
            Duration::from_nanos(3_000)
        );
    }
}
