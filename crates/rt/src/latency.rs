//! The latency-histogram summary every measuring driver reports (docs/benchmarking.md
//! rules 5 and 6): HDR histogram in ns, summary in µs. Pure: no clock, no IO.

use hdrhistogram::Histogram;

/// A latency histogram in ns: 1 ns to 1 h, 3 significant digits (docs/benchmarking.md rule 5).
#[derive(Debug, Clone)]
pub struct Latency {
    pub hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        // Constant, valid bounds (1 <= low, high >= 2 * low, sigfig <= 5): cannot fail.
        #[allow(clippy::expect_used)]
        let hist = Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds");
        Latency { hist }
    }
    /// Records one sample (clamped into range: above one hour counts as one hour).
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.min(MAX_NS));
    }
    /// Adds another histogram losslessly.
    pub fn merge(&mut self, other: &Latency) {
        if self.hist.add(&other.hist).is_err() {
            // Only when `other.hist` was built with a wider range than `new` gives:
            // re-record its values, clamped as `record` would.
            for v in other.hist.iter_recorded() {
                let value = other
                    .hist
                    .highest_equivalent(v.value_iterated_to())
                    .min(MAX_NS);
                self.hist.saturating_record_n(value, v.count_at_value());
            }
        }
    }
    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }
    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }
    /// Every figure of rule 6; all zero (and `p9999_us` None) when empty. Values are the
    /// histogram's (within 0.1%, rule 5); `p9999_us` only with >= 10_000 samples.
    pub fn summary(&self) -> Summary {
        let h = &self.hist;
        if h.is_empty() {
            return Summary {
                samples: 0,
                min_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                p9999_us: None,
                max_us: 0.0,
                mean_us: 0.0,
                stddev_us: 0.0,
            };
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Summary {
            samples: h.len(),
            min_us: us(h.min()),
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            p9999_us: (h.len() >= P9999_MIN_SAMPLES).then(|| us(h.value_at_quantile(0.9999))),
            max_us: us(h.max()),
            mean_us: h.mean() / 1000.0,
            stddev_us: h.stdev() / 1000.0,
        }
    }
}

/// The largest latency recorded: one hour, in ns.
pub const MAX_NS: u64 = 3_600_000_000_000;

/// Samples needed before p99.99 is reported (below that it is just the maximum).
pub const P9999_MIN_SAMPLES: u64 = 10_000;

/// Rule 6 of docs/benchmarking.md, in microseconds (f64). `p9999` only with >= 10_000 samples.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Summary {
    pub samples: u64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: Option<f64>,
    pub max_us: f64,
    pub mean_us: f64,
    pub stddev_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the histogram's precision (3 significant digits) plus float noise.
    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() <= expected.abs() * 1e-3 + 1e-9
    }

    fn one_to_hundred_us() -> Latency {
        let mut l = Latency::new();
        for us in 1..=100u64 {
            l.record(us * 1000);
        }
        l
    }

    #[test]
    fn summary_matches_hand_computed_values() {
        let s = one_to_hundred_us().summary();
        assert_eq!(s.samples, 100);
        for (name, actual, expected) in [
            ("min", s.min_us, 1.0),
            ("p50", s.p50_us, 50.0),
            ("p90", s.p90_us, 90.0),
            ("p99", s.p99_us, 99.0),
            ("p99.9", s.p999_us, 100.0),
            ("max", s.max_us, 100.0),
            ("mean", s.mean_us, 50.5),
            // Population standard deviation of 1..=100: sqrt((100^2 - 1) / 12).
            ("stddev", s.stddev_us, (9999.0f64 / 12.0).sqrt()),
        ] {
            assert!(
                close(actual, expected),
                "{name}: {actual} is not {expected}"
            );
        }
        assert_eq!(s.p9999_us, None, "p99.99 needs 10k samples");
    }

    #[test]
    fn p9999_appears_with_ten_thousand_samples() {
        let mut l = Latency::new();
        for i in 0..P9999_MIN_SAMPLES {
            l.record(1000 + i);
        }
        let p = l.summary().p9999_us.expect("p99.99 with 10k samples");
        assert!(close(p, 10.999), "{p}");
    }

    #[test]
    fn an_empty_histogram_summarises_to_zeros() {
        let s = Latency::new().summary();
        assert_eq!(
            (s.samples, s.max_us, s.mean_us, s.p9999_us),
            (0, 0.0, 0.0, None)
        );
    }

    #[test]
    fn merging_is_lossless_and_records_are_clamped() {
        let (mut a, mut b) = (Latency::new(), Latency::new());
        for us in 1..=100u64 {
            if us % 2 == 0 { &mut a } else { &mut b }.record(us * 1000);
        }
        a.merge(&b);
        assert_eq!(a.summary(), one_to_hundred_us().summary());

        let mut l = Latency::new();
        l.record(u64::MAX);
        l.record(0);
        assert_eq!(l.len(), 2);
        assert!(close(l.hist.max() as f64, MAX_NS as f64));
        // A histogram with a wider range than ours still merges (re-recorded, clamped).
        let mut wide = Latency {
            hist: Histogram::new_with_bounds(1, u64::MAX / 4, 3).unwrap(),
        };
        wide.hist.record(u64::MAX / 8).unwrap();
        wide.hist.record(5000).unwrap();
        l.merge(&wide);
        assert_eq!(l.len(), 4);
    }
}
