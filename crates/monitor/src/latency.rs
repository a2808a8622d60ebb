//! Latency over time from HDR histograms: one since the start (for Prometheus) and one
//! per interval (for the dashboard's percentiles-over-time chart).
//!
//! Written by a probe thread and read by the HTTP threads (behind the caller's mutex);
//! never touched by a hot thread.

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Points kept: at one per second, five minutes.
pub const HISTORY: usize = 300;

/// Percentiles of one interval, in microseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Point {
    /// End of the interval, Unix milliseconds.
    pub unix_ms: u64,
    /// Samples in the interval.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// Cumulative and per-interval latency of one measured path.
#[derive(Debug)]
pub struct Latency {
    total: Histogram<u64>,
    interval: Histogram<u64>,
    sum_ns: u128,
    history: VecDeque<Point>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

/// The quantiles exported to Prometheus.
pub const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

impl Latency {
    /// Empty; values from 1 ns to 60 s at 3 significant digits.
    pub fn new() -> Latency {
        Latency {
            total: hist(),
            interval: hist(),
            sum_ns: 0,
            history: VecDeque::with_capacity(HISTORY),
        }
    }

    /// Records one sample (clamped into the histogram's range).
    pub fn record(&mut self, ns: u64) {
        let ns = ns.clamp(1, 60_000_000_000);
        self.total.saturating_record(ns);
        self.interval.saturating_record(ns);
        self.sum_ns += u128::from(ns);
    }

    /// Closes the current interval (even an empty one) at `unix_ms`.
    pub fn roll(&mut self, unix_ms: u64) {
        let h = &self.interval;
        let us = |ns: u64| ns as f64 / 1000.0;
        let point = Point {
            unix_ms,
            count: h.len(),
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        };
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(point);
        self.interval.reset();
    }

    /// The intervals kept, oldest first.
    pub fn history(&self) -> impl Iterator<Item = &Point> {
        self.history.iter()
    }

    /// Samples since the start.
    pub fn count(&self) -> u64 {
        self.total.len()
    }

    /// Sum of all samples, seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }

    /// A quantile since the start, seconds.
    pub fn quantile_seconds(&self, q: f64) -> f64 {
        self.total.value_at_quantile(q) as f64 / 1e9
    }
}

fn hist() -> Histogram<u64> {
    // The bounds are constants within hdrhistogram's accepted range (low >= 1,
    // high >= 2 * low, sigfig <= 5): construction cannot fail.
    #[allow(clippy::expect_used)]
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("constant histogram bounds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_roll_into_history_and_totals_accumulate() {
        let mut l = Latency::new();
        for ns in [1_000, 2_000, 3_000] {
            l.record(ns);
        }
        l.roll(10);
        l.roll(20);
        let h: Vec<Point> = l.history().copied().collect();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].count, 3);
        assert!((h[0].max_us - 3.0).abs() < 0.01);
        assert_eq!(h[1].count, 0);
        assert_eq!(l.count(), 3);
        assert!((l.sum_seconds() - 6e-6).abs() < 1e-12);
        for i in 0..HISTORY as u64 + 5 {
            l.roll(i);
        }
        assert_eq!(l.history().count(), HISTORY);
    }
}
