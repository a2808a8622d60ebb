//! Open-loop schedules: every message has an intended send time, fixed in advance.
//!
//! A [`Schedule`] is pure and deterministic: [`Schedule::slots`] lists every message of
//! the run with its intended send time (ns from the start of the run) before anything is
//! sent, so a sender that falls behind cannot quietly send fewer messages (rule 1 of
//! docs/benchmarking.md). [`SizeMix`] says how big message `i` is.
//!
//! Time in a [`RatePattern`] is counted from the start of the run, warm-up included: with
//! a whole-second warm-up the measured seconds line up with the pattern's seconds.

/// The rate syntax of every command (`2000`, `50k`, `1.5M`).
pub use tickwire_rt::units::parse_rate;

/// A count of at least 1 with an optional suffix, as for rates: `20000`, `20k`, `1M`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    // New-user pass: `--iterations abc` said "is not a rate".
    let v =
        parse_rate(s).map_err(|_| format!("{s:?} is not a count (examples: 20000, 20k, 1M)"))?;
    if !(1.0..=1e12).contains(&v) {
        return Err(format!("{s:?}: expected a count of at least 1"));
    }
    Ok(v.round() as u64)
}

/// A size mix such as `100:67,600:33` (bytes:weight).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SizeMix {
    /// (size in bytes, weight), in the order given.
    pub parts: Vec<(usize, u32)>,
}

impl SizeMix {
    /// Parses `100:67,600:33` or a single size `100`. Errors name the bad part.
    pub fn parse(s: &str) -> Result<SizeMix, String> {
        let mut parts = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (size, weight) = match part.split_once(':') {
                Some((size, weight)) => (size.trim(), weight.trim()),
                None => (part, "1"),
            };
            let size: usize = size.parse().map_err(|_| {
                format!("bad size {size:?} in {part:?} (expected SIZE or SIZE:WEIGHT, e.g. 100:67)")
            })?;
            let weight: u32 = weight.parse().map_err(|_| {
                format!("bad weight {weight:?} in {part:?} (expected SIZE:WEIGHT, e.g. 100:67)")
            })?;
            if size == 0 {
                return Err(format!("size 0 in {part:?}: sizes are at least 1 byte"));
            }
            if weight == 0 {
                return Err(format!("weight 0 in {part:?}: weights are at least 1"));
            }
            parts.push((size, weight));
        }
        let mix = SizeMix { parts };
        let period = mix.period();
        if period > MAX_PERIOD {
            return Err(format!(
                "the weights in {s:?} repeat only every {period} messages (after dividing by their \
                 common factor); use smaller weights (at most {MAX_PERIOD} in total)"
            ));
        }
        Ok(mix)
    }
    /// One fixed size.
    pub fn single(size: usize) -> SizeMix {
        SizeMix {
            parts: vec![(size, 1)],
        }
    }
    /// Size of message `i`: deterministic and interleaved (smooth weighted round-robin),
    /// so any window of `sum(weights)` consecutive messages has exactly the weights.
    ///
    /// Costs O(period x parts) (period = sum of the weights over their common divisor,
    /// 100 for `100:67,600:33`); on a hot path, index [`SizeMix::cycle`] instead.
    pub fn size_at(&self, i: u64) -> usize {
        match self.parts.as_slice() {
            [] => 0,
            [(size, _)] => *size,
            _ => {
                let period = self.period();
                let mut wrr = SmoothWrr::new(&self.parts);
                let mut pick = 0;
                for _ in 0..=(i % period) {
                    pick = wrr.next();
                }
                self.parts[pick].0
            }
        }
    }
    /// One period of [`SizeMix::size_at`]: `cycle()[i % cycle().len()] == size_at(i)`.
    /// Empty only for an empty mix.
    pub fn cycle(&self) -> Vec<usize> {
        if self.parts.is_empty() {
            return Vec::new();
        }
        let mut wrr = SmoothWrr::new(&self.parts);
        (0..self.period())
            .map(|_| self.parts[wrr.next()].0)
            .collect()
    }
    /// Messages after which the interleaving repeats: the sum of the weights divided by
    /// their greatest common divisor (at least 1).
    pub fn period(&self) -> u64 {
        let g = self.parts.iter().fold(0u64, |g, p| gcd(g, u64::from(p.1)));
        if g == 0 {
            return 1;
        }
        self.parts
            .iter()
            .map(|p| u64::from(p.1) / g)
            .sum::<u64>()
            .max(1)
    }
    /// Largest size in the mix.
    pub fn max_size(&self) -> usize {
        self.parts.iter().map(|p| p.0).max().unwrap_or(0)
    }
}

/// Offered rate over time.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum RatePattern {
    /// `rate` msg/s throughout.
    Steady { rate: f64 },
    /// `base` msg/s, plus `burst` msg/s during every odd second (1 s on, 1 s off).
    Bursts { base: f64, burst: f64 },
}

impl RatePattern {
    /// Target rate (msg/s) during the second that contains `t_ns` (from the start).
    /// Bursts are on during seconds 1, 3, 5, ... A negative or NaN rate counts as 0.
    pub fn rate_at(&self, t_ns: u64) -> f64 {
        let rate = match *self {
            RatePattern::Steady { rate } => rate,
            RatePattern::Bursts { base, burst } => {
                if (t_ns / NS_PER_SEC) % 2 == 1 {
                    base + burst
                } else {
                    base
                }
            }
        };
        if rate.is_nan() {
            0.0
        } else {
            rate.max(0.0)
        }
    }
    /// The mean target rate over `[from_ns, to_ns)` in msg/s (what the INVALID rule
    /// compares the achieved rate with); 0 for an empty interval.
    pub fn mean_rate(&self, from_ns: u64, to_ns: u64) -> f64 {
        if to_ns <= from_ns {
            return 0.0;
        }
        let mut msgs = 0.0;
        let mut t = from_ns;
        while t < to_ns {
            let end = ((t / NS_PER_SEC + 1) * NS_PER_SEC).min(to_ns);
            msgs += self.rate_at(t) * (end - t) as f64 / NS_PER_SEC as f64;
            t = end;
        }
        msgs * NS_PER_SEC as f64 / (to_ns - from_ns) as f64
    }
    /// Multiplies every rate by `f` (the `--scale` option).
    pub fn scaled(&self, f: f64) -> RatePattern {
        match *self {
            RatePattern::Steady { rate } => RatePattern::Steady { rate: rate * f },
            RatePattern::Bursts { base, burst } => RatePattern::Bursts {
                base: base * f,
                burst: burst * f,
            },
        }
    }
}

/// One scheduled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Sequence number from 0 over the whole run (warm-up included).
    pub index: u64,
    /// Intended send time in ns from the start of the run.
    pub at_ns: u64,
    /// True during warm-up (excluded from the results).
    pub warmup: bool,
}

/// A whole run: warm-up then measurement, at `pattern`, split evenly over `senders`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Schedule {
    pub pattern: RatePattern,
    pub warmup_ns: u64,
    pub duration_ns: u64,
}

impl Schedule {
    /// Every slot in order: within second k the messages of that second are evenly spaced
    /// at `rate_at(k)`; the warm-up runs at the pattern's rate too. Pure and deterministic.
    ///
    /// Second k holds `floor(C(k+1)) - floor(C(k))` messages, where C(k) is the sum of the
    /// rates of seconds 0..k (so fractional rates add up exactly over the run), the j-th
    /// at `k s + j * 1 s / n`. The run ends at `warmup_ns + duration_ns`; a partial last
    /// second keeps the slots that fall before the end.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        SlotIter {
            schedule: self,
            end_ns: self.end_ns(),
            second: 0,
            cumulative: 0.0,
            in_second: 0,
            j: 0,
            step: (0, 0),
            offset: 0,
            carry: 0,
            index: 0,
        }
    }
    /// Where the run ends: warm-up plus measurement, in ns from the start.
    pub fn end_ns(&self) -> u64 {
        self.warmup_ns.saturating_add(self.duration_ns)
    }
    /// The mean target rate of the measured part (warm-up excluded), msg/s.
    pub fn target_rate(&self) -> f64 {
        self.pattern.mean_rate(self.warmup_ns, self.end_ns())
    }
    /// The slots of sender `k` of `n` (slot i goes to sender i % n).
    pub fn slots_for(&self, k: usize, n: usize) -> impl Iterator<Item = Slot> + '_ {
        self.slots()
            .filter(move |s| (s.index % n as u64) as usize == k)
    }
    /// Total messages measured (warm-up excluded) and in all.
    /// Computed per second, without listing the slots.
    pub fn counts(&self) -> (u64, u64) {
        let end = self.end_ns();
        let (mut total, mut warmup) = (0u64, 0u64);
        let mut cumulative = 0.0;
        let mut second = 0u64;
        while second.saturating_mul(NS_PER_SEC) < end {
            let n = messages_in_second(&self.pattern, second, &mut cumulative);
            let start = second * NS_PER_SEC;
            total += slots_before(n, end - start);
            warmup += slots_before(n, self.warmup_ns.saturating_sub(start));
            second += 1;
        }
        (total - warmup, total)
    }
}

const NS_PER_SEC: u64 = 1_000_000_000;

/// Largest accepted [`SizeMix::period`]: keeps `size_at` and `cycle` cheap.
pub const MAX_PERIOD: u64 = 10_000;

/// Messages in second `second`, advancing the running sum `cumulative` (rates of the
/// seconds before it).
fn messages_in_second(pattern: &RatePattern, second: u64, cumulative: &mut f64) -> u64 {
    let before = cumulative.floor();
    *cumulative += pattern.rate_at(second.saturating_mul(NS_PER_SEC));
    // The rates are finite and non-negative, so this is a whole non-negative number.
    (cumulative.floor() - before) as u64
}

/// How many of the `n` evenly spaced slots of a second fall in its first `t_ns`: slot j is
/// at `floor(j * 1e9 / n)`, which is `< t` exactly when `j * 1e9 < t * n`.
fn slots_before(n: u64, t_ns: u64) -> u64 {
    if t_ns >= NS_PER_SEC {
        return n;
    }
    let c = (u128::from(t_ns) * u128::from(n)).div_ceil(u128::from(NS_PER_SEC));
    // c <= n because t < 1e9.
    c as u64
}

struct SlotIter<'a> {
    schedule: &'a Schedule,
    end_ns: u64,
    /// The second being listed, its message count, the next position in it.
    second: u64,
    in_second: u64,
    j: u64,
    /// `1e9 / in_second` as quotient and remainder: slot `j` of the second is at
    /// `floor(j * 1e9 / in_second)` = `offset`, kept by adding the quotient and carrying
    /// the remainder (`carry` = `j * rem mod in_second`) instead of a 128-bit division
    /// per slot (the sender's hot loop at millions of messages a second).
    step: (u64, u64),
    offset: u64,
    carry: u64,
    /// The running sum of [`messages_in_second`].
    cumulative: f64,
    index: u64,
}

impl Iterator for SlotIter<'_> {
    type Item = Slot;

    fn next(&mut self) -> Option<Slot> {
        loop {
            let start = self.second.saturating_mul(NS_PER_SEC);
            if start >= self.end_ns {
                return None;
            }
            if self.j == 0 && self.in_second == 0 {
                self.in_second =
                    messages_in_second(&self.schedule.pattern, self.second, &mut self.cumulative);
                let n = self.in_second.max(1);
                self.step = (NS_PER_SEC / n, NS_PER_SEC % n);
                self.offset = 0;
                self.carry = 0;
            }
            if self.j < self.in_second {
                // offset = floor(j * 1e9 / in_second) < 1e9.
                let at_ns = start + self.offset;
                self.offset += self.step.0;
                self.carry += self.step.1;
                if self.carry >= self.in_second {
                    self.carry -= self.in_second;
                    self.offset += 1;
                }
                if at_ns >= self.end_ns {
                    // Slots only grow in time: none of the rest is before the end either.
                    self.end_ns = 0;
                    return None;
                }
                let slot = Slot {
                    index: self.index,
                    at_ns,
                    warmup: at_ns < self.schedule.warmup_ns,
                };
                self.j += 1;
                self.index += 1;
                return Some(slot);
            }
            self.second += 1;
            self.j = 0;
            self.in_second = 0;
        }
    }
}

/// Smooth weighted round-robin (as in nginx): each step every part gains its weight,
/// the largest current value wins and pays back the total. The picks interleave as
/// evenly as the weights allow and repeat after `period` steps.
struct SmoothWrr {
    weights: Vec<i64>,
    current: Vec<i64>,
    total: i64,
}

impl SmoothWrr {
    fn new(parts: &[(usize, u32)]) -> SmoothWrr {
        let g = parts
            .iter()
            .fold(0u64, |g, p| gcd(g, u64::from(p.1)))
            .max(1);
        let weights: Vec<i64> = parts.iter().map(|p| (u64::from(p.1) / g) as i64).collect();
        let total = weights.iter().sum();
        SmoothWrr {
            current: vec![0; weights.len()],
            weights,
            total,
        }
    }

    /// The index of the next part. Ties go to the earlier part.
    fn next(&mut self) -> usize {
        let mut best = 0;
        for k in 0..self.weights.len() {
            self.current[k] += self.weights[k];
            if self.current[k] > self.current[best] {
                best = k;
            }
        }
        self.current[best] -= self.total;
        best
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = NS_PER_SEC;

    fn schedule(pattern: RatePattern, warmup_ns: u64, duration_ns: u64) -> Schedule {
        Schedule {
            pattern,
            warmup_ns,
            duration_ns,
        }
    }

    /// Slots per whole second of the run.
    fn per_second(s: &Schedule) -> Vec<u64> {
        let mut counts = vec![0; s.end_ns().div_ceil(SEC) as usize];
        for slot in s.slots() {
            counts[(slot.at_ns / SEC) as usize] += 1;
        }
        counts
    }

    #[test]
    fn steady_rate_gives_the_rate_every_second() {
        let s = schedule(RatePattern::Steady { rate: 1000.0 }, 0, 3 * SEC);
        assert_eq!(per_second(&s), [1000, 1000, 1000]);
        assert_eq!(s.counts(), (3000, 3000));
        assert_eq!(s.target_rate(), 1000.0);
        // Evenly spaced: every 1 ms.
        let at: Vec<u64> = s.slots().take(3).map(|s| s.at_ns).collect();
        assert_eq!(at, [0, 1_000_000, 2_000_000]);
    }

    #[test]
    fn bursts_add_the_burst_rate_every_other_second() {
        let s = schedule(
            RatePattern::Bursts {
                base: 1000.0,
                burst: 500.0,
            },
            0,
            4 * SEC,
        );
        assert_eq!(per_second(&s), [1000, 1500, 1000, 1500]);
        assert_eq!(s.counts(), (5000, 5000));
        assert_eq!(s.slots().count(), 5000);
        assert_eq!(s.target_rate(), 1250.0);
        let p = RatePattern::Bursts {
            base: 1000.0,
            burst: 500.0,
        };
        assert_eq!(p.rate_at(0), 1000.0);
        assert_eq!(p.rate_at(SEC - 1), 1000.0);
        assert_eq!(p.rate_at(SEC), 1500.0);
        assert_eq!(p.rate_at(3 * SEC + 5), 1500.0);
        assert_eq!(
            p.scaled(0.5),
            RatePattern::Bursts {
                base: 500.0,
                burst: 250.0
            }
        );
    }

    #[test]
    fn slot_times_are_the_exact_division() {
        // The carried offsets equal floor(j * 1e9 / n) for rates that divide 1e9, that
        // do not, and that are large.
        for rate in [
            1.0,
            3.0,
            7.0,
            999_999.0,
            1_000_000.0,
            16_000_003.0,
            24_000_000.0,
        ] {
            let s = Schedule {
                pattern: RatePattern::Steady { rate },
                warmup_ns: 0,
                duration_ns: 2 * NS_PER_SEC,
            };
            let n = rate as u64;
            for slot in s.slots() {
                let j = slot.index % n;
                let second = slot.index / n;
                let want =
                    second * NS_PER_SEC + (u128::from(j) * 1_000_000_000 / u128::from(n)) as u64;
                assert_eq!(slot.at_ns, want, "rate {rate}, slot {}", slot.index);
            }
        }
    }

    #[test]
    fn slots_are_numbered_in_order_and_never_go_back_in_time() {
        let s = schedule(
            RatePattern::Bursts {
                base: 700.0,
                burst: 1300.0,
            },
            SEC / 2,
            3 * SEC,
        );
        let slots: Vec<Slot> = s.slots().collect();
        for (i, w) in slots.windows(2).enumerate() {
            assert!(
                w[0].at_ns <= w[1].at_ns,
                "slot {i} goes back in time: {w:?}"
            );
            assert_eq!(w[1].index, w[0].index + 1);
        }
        assert_eq!(slots[0].index, 0);
        assert!(slots.last().is_some_and(|slot| slot.at_ns < s.end_ns()));
    }

    #[test]
    fn warmup_is_flagged_and_excluded_from_the_measured_count() {
        let s = schedule(RatePattern::Steady { rate: 1000.0 }, SEC, 2 * SEC);
        let slots: Vec<Slot> = s.slots().collect();
        assert_eq!(slots.len(), 3000);
        assert!(slots[..1000].iter().all(|s| s.warmup));
        assert!(slots[1000..].iter().all(|s| !s.warmup));
        assert_eq!(s.counts(), (2000, 3000));
    }

    #[test]
    fn partial_seconds_and_fractional_rates_add_up() {
        let s = schedule(RatePattern::Steady { rate: 1000.0 }, SEC / 4, SEC + SEC / 4);
        assert_eq!(s.counts(), (1250, 1500));
        // 2.5 msg/s: 2, 3, 2, 3 per second, 10 in 4 s.
        let s = schedule(RatePattern::Steady { rate: 2.5 }, 0, 4 * SEC);
        assert_eq!(per_second(&s), [2, 3, 2, 3]);
        assert_eq!(s.counts(), (10, 10));
        // Nothing to send.
        let s = schedule(RatePattern::Steady { rate: 0.0 }, SEC, SEC);
        assert_eq!(s.counts(), (0, 0));
        assert_eq!(s.slots().count(), 0);
    }

    #[test]
    fn senders_split_the_slots_between_them() {
        let s = schedule(RatePattern::Steady { rate: 1000.0 }, 0, SEC);
        let per: Vec<Vec<Slot>> = (0..3).map(|k| s.slots_for(k, 3).collect()).collect();
        assert_eq!(
            per.iter().map(Vec::len).collect::<Vec<_>>(),
            [334, 333, 333]
        );
        assert!(per[1].iter().all(|slot| slot.index % 3 == 1));
    }

    #[test]
    fn size_mix_parses_sizes_and_weights() {
        let mix = SizeMix::parse("100:67,600:33").unwrap();
        assert_eq!(mix.parts, [(100, 67), (600, 33)]);
        assert_eq!(mix.max_size(), 600);
        assert_eq!(SizeMix::parse("100").unwrap(), SizeMix::single(100));
        assert_eq!(
            SizeMix::parse(" 64 : 1 , 1472:1 ").unwrap().parts,
            [(64, 1), (1472, 1)]
        );
    }

    #[test]
    fn bad_size_mixes_are_errors_that_name_the_part() {
        for (input, part) in [
            ("", "\"\""),
            ("abc", "abc"),
            ("100:", "100:"),
            ("100:x", "x"),
            (":5", ":5"),
            ("0:5", "0:5"),
            ("100:0", "100:0"),
            ("100:-1", "-1"),
            ("100:67,600;33", "600;33"),
            ("100:67,", "\"\""),
        ] {
            let e = SizeMix::parse(input).expect_err(input);
            assert!(
                e.contains(part),
                "error for {input:?} does not name {part:?}: {e}"
            );
        }
        assert!(SizeMix::parse("1:100000,2:1").is_err(), "period too long");
    }

    #[test]
    fn mix_gives_exact_weights_in_every_window_and_interleaves() {
        let mix = SizeMix::parse("100:67,600:33").unwrap();
        assert_eq!(mix.period(), 100);
        let sizes: Vec<usize> = (0..400).map(|i| mix.size_at(i)).collect();
        for (start, w) in sizes.windows(100).enumerate() {
            let small = w.iter().filter(|&&s| s == 100).count();
            assert_eq!((small, 100 - small), (67, 33), "window at {start}");
        }
        // Interleaved, not 67 small then 33 large.
        let longest_run = sizes.chunk_by(|a, b| a == b).map(<[usize]>::len).max();
        assert!(longest_run <= Some(3), "longest run {longest_run:?}");
        // `cycle` is one period of `size_at`.
        let cycle = mix.cycle();
        assert_eq!(cycle.len(), 100);
        assert!((0..400).all(|i| cycle[i as usize % 100] == mix.size_at(i)));
        // Common factors do not lengthen the period.
        assert_eq!(SizeMix::parse("100:2,600:2").unwrap().cycle(), [100, 600]);
        assert_eq!(SizeMix::single(64).size_at(12345), 64);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn counts_agree_with_the_listed_slots(
            base in 0.0f64..3000.0,
            burst in 0.0f64..3000.0,
            steady in proptest::bool::ANY,
            warmup_ns in 0u64..2 * SEC,
            duration_ns in 0u64..3 * SEC,
        ) {
            let pattern = if steady {
                RatePattern::Steady { rate: base }
            } else {
                RatePattern::Bursts { base, burst }
            };
            let s = schedule(pattern, warmup_ns, duration_ns);
            let slots: Vec<Slot> = s.slots().collect();
            let measured = slots.iter().filter(|s| !s.warmup).count() as u64;
            prop_assert_eq!(s.counts(), (measured, slots.len() as u64));
            prop_assert!(slots.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
            prop_assert!(slots.iter().all(|sl| sl.at_ns < s.end_ns() && sl.warmup == (sl.at_ns < warmup_ns)));
        }

        #[test]
        fn every_mix_window_has_the_weights(weights in proptest::collection::vec(1u32..20, 1..5), start in 0u64..1000) {
            let parts: Vec<(usize, u32)> = weights.iter().enumerate().map(|(k, &w)| (k + 1, w)).collect();
            let mix = SizeMix { parts: parts.clone() };
            let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            let mut seen = vec![0u32; parts.len()];
            for i in start..start + total {
                seen[mix.size_at(i) - 1] += 1;
            }
            prop_assert_eq!(seen, weights);
        }
    }
}
