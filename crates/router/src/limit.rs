//! New connections per source address: a token bucket per address (an IPv6 address
//! counts by its /64, what one host is usually given), for the TLS listener, where
//! every accepted connection costs the router thread a handshake (a signature and a
//! key exchange). Pure: time is a parameter.
//!
//! Memory is bounded: at most [`MAX_SOURCES`] buckets. When the table is full, the
//! buckets that are full again (their sources quiet for a while) are dropped, at most
//! once per [`SWEEP_GAP_NS`] so that many sources cannot make every accept pay a scan;
//! sources that find no room share one more bucket of the same rate.

use std::collections::HashMap;
use std::net::IpAddr;

use tickwire_rt::bucket::TokenBucket;
use tickwire_rt::time::MonoNanos;

/// Most sources with a bucket of their own.
pub const MAX_SOURCES: usize = 4096;

/// Least time between two sweeps of a full table.
pub const SWEEP_GAP_NS: u64 = 1_000_000_000;

/// What a source is counted as: an IPv4 address, or an IPv6 address's /64 (an IPv4
/// address mapped into IPv6 counts as itself).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Admission of new connections per source: at most `rate` a second from one source,
/// `rate` at once after a quiet second.
#[derive(Debug)]
pub struct SourceLimiter {
    rate: u64,
    buckets: HashMap<IpAddr, TokenBucket>,
    /// Shared by the sources that found the table full.
    overflow: TokenBucket,
    last_sweep: Option<MonoNanos>,
}

impl SourceLimiter {
    /// A limiter of `rate` new connections a second per source; 0: no limit.
    pub fn new(rate: u64, now: MonoNanos) -> SourceLimiter {
        SourceLimiter {
            rate,
            buckets: HashMap::new(),
            overflow: TokenBucket::full(rate, rate, now),
            last_sweep: None,
        }
    }

    /// Whether a new connection from `ip` may proceed now (and counts it).
    pub fn admit(&mut self, ip: IpAddr, now: MonoNanos) -> bool {
        if self.rate == 0 {
            return true;
        }
        let source = source_of(ip);
        if let Some(b) = self.buckets.get_mut(&source) {
            return b.try_take(now, 1);
        }
        if self.buckets.len() >= MAX_SOURCES {
            self.sweep(now);
        }
        if self.buckets.len() >= MAX_SOURCES {
            return self.overflow.try_take(now, 1);
        }
        let mut b = TokenBucket::full(self.rate, self.rate, now);
        let admitted = b.try_take(now, 1);
        self.buckets.insert(source, b);
        admitted
    }

    /// Sources with a bucket of their own.
    pub fn sources(&self) -> usize {
        self.buckets.len()
    }

    /// Drops the buckets that are full again (nothing to remember about them), unless
    /// the last sweep was less than [`SWEEP_GAP_NS`] ago.
    fn sweep(&mut self, now: MonoNanos) {
        if self
            .last_sweep
            .is_some_and(|at| now.saturating_sub(at) < SWEEP_GAP_NS)
        {
            return;
        }
        self.last_sweep = Some(now);
        let full = self.rate;
        self.buckets.retain(|_, b| b.available(now) < full);
    }
}

#[cfg(test)]
mod tests {
    // A test fails loudly on the first surprise: unwrap/expect are its asserts.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const MS: u64 = 1_000_000;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn admitted(l: &mut SourceLimiter, from: &str, n: usize, now: u64) -> usize {
        (0..n).filter(|_| l.admit(ip(from), MonoNanos(now))).count()
    }

    #[test]
    fn each_source_gets_its_rate_and_refills_with_time() {
        let mut l = SourceLimiter::new(10, MonoNanos(0));
        assert_eq!(admitted(&mut l, "10.0.0.1", 25, 0), 10);
        // Another source is not affected.
        assert_eq!(admitted(&mut l, "10.0.0.2", 5, 0), 5);
        // 10 a second: one every 100 ms.
        assert_eq!(admitted(&mut l, "10.0.0.1", 5, 250 * MS), 2);
        assert_eq!(admitted(&mut l, "10.0.0.1", 20, 2_000 * MS), 10);
    }

    #[test]
    fn zero_is_no_limit() {
        let mut l = SourceLimiter::new(0, MonoNanos(0));
        assert_eq!(admitted(&mut l, "10.0.0.1", 10_000, 0), 10_000);
        assert_eq!(l.sources(), 0);
    }

    #[test]
    fn an_ipv6_host_counts_by_its_64_and_a_mapped_ipv4_as_itself() {
        let mut l = SourceLimiter::new(3, MonoNanos(0));
        assert!(l.admit(ip("2001:db8:1:2::1"), MonoNanos(0)));
        assert!(l.admit(ip("2001:db8:1:2::ffff"), MonoNanos(0)));
        assert!(l.admit(ip("2001:db8:1:2:aaaa::1"), MonoNanos(0)));
        assert!(!l.admit(ip("2001:db8:1:2::7"), MonoNanos(0)), "same /64");
        assert!(l.admit(ip("2001:db8:1:3::1"), MonoNanos(0)), "another /64");
        assert_eq!(admitted(&mut l, "192.0.2.9", 2, 0), 2);
        assert!(l.admit(ip("::ffff:192.0.2.9"), MonoNanos(0)));
        assert!(
            !l.admit(ip("::ffff:192.0.2.9"), MonoNanos(0)),
            "the same host"
        );
    }

    /// Many sources (an attacker's addresses) cannot grow the table past its bound, nor
    /// make each accept pay a scan of it: beyond it they share one bucket, and full
    /// buckets are dropped at most once a second.
    #[test]
    fn the_table_is_bounded_and_swept_at_most_once_a_second() {
        let mut l = SourceLimiter::new(5, MonoNanos(0));
        let addr = |i: usize| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i as u32));
        for i in 0..MAX_SOURCES {
            assert!(l.admit(addr(i), MonoNanos(0)));
        }
        assert_eq!(l.sources(), MAX_SOURCES);
        // Full: newcomers share the overflow bucket (5 at once), the table stays.
        let newcomers = (0..100)
            .filter(|i| l.admit(addr(MAX_SOURCES + i), MonoNanos(MS)))
            .count();
        assert_eq!(newcomers, 5);
        assert_eq!(l.sources(), MAX_SOURCES);
        // A second on, every bucket is full again: the next newcomer's sweep drops them.
        assert!(l.admit(addr(MAX_SOURCES + 500), MonoNanos(1_100 * MS)));
        assert_eq!(l.sources(), 1);
        // Sources that keep connecting keep their (partly spent) buckets.
        let mut l = SourceLimiter::new(5, MonoNanos(0));
        for i in 0..MAX_SOURCES {
            assert_eq!(admitted(&mut l, &addr(i).to_string(), 5, 0), 5);
        }
        // Not swept within a second of the last sweep, and spent buckets stay.
        assert!(l.admit(addr(MAX_SOURCES), MonoNanos(10 * MS)));
        assert_eq!(l.sources(), MAX_SOURCES);
        assert!(
            !l.admit(addr(7), MonoNanos(20 * MS)),
            "source 7 is still limited"
        );
    }
}
