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

/// Nanoseconds since the Unix epoch of a `CLOCK_REALTIME` reading: 0 before 1970,
/// saturating after year 2554 (`u64` nanoseconds).
#[inline]
fn utc_nanos(sec: i64, nsec: i64) -> u64 {
    let (Ok(sec), Ok(nsec)) = (u64::try_from(sec), u64::try_from(nsec)) else {
        return 0;
    };
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

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
    /// Reads the wall clock (UTC, `CLOCK_REALTIME`). Drivers only: cores take the time
    /// as a parameter. A clock set before 1970 reads as 0.
    ///
    /// Read through rustix's vDSO call, as [`MonoNanos::now`]: `SystemTime::now` and
    /// its `duration_since(UNIX_EPOCH)` cost ~60 instructions more per read (callgrind,
    /// BENCHMARKS.md), and the FIX engine reads the wall clock every loop turn.
    #[inline]
    pub fn now() -> UtcNanos {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        UtcNanos(utc_nanos(t.tv_sec, t.tv_nsec))
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
    fn utc_agrees_with_system_time() {
        let std_ns = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        };
        let before = std_ns(std::time::SystemTime::now());
        let ours = UtcNanos::now().as_nanos();
        let after = std_ns(std::time::SystemTime::now());
        assert!(
            before <= ours && ours <= after,
            "{before} <= {ours} <= {after}"
        );
    }

    #[test]
    fn utc_nanos_of_odd_readings() {
        assert_eq!(utc_nanos(0, 0), 0);
        assert_eq!(utc_nanos(1, 5), 1_000_000_005);
        assert_eq!(utc_nanos(-1, 999_999_999), 0, "before 1970");
        assert_eq!(utc_nanos(i64::MAX, 0), u64::MAX, "saturates");
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
