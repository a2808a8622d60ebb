//! The one clock the router reads: CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall).
//! Clients stamp with the same clock, so stamps from one host compare directly.

/// Monotonic time in nanoseconds.
#[inline]
pub fn now_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Wall-clock time in milliseconds since the Unix epoch (display only).
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
