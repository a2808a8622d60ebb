//! The run plan: which rates for how long (the published cycles of docs/benchmarking.md
//! family D, scaled in time, never in rate), and when each X is due. Pure: no clock, no IO.
//!
//! A run is a warm-up phase followed by the measured steps, back to back. Market-data
//! message `i` of the run (warm-up included) carries correlation id `i`; its intended
//! send time is [`Timeline::intended_ns`], computed from the phase table in O(1), so
//! the receiving side needs no per-message memory to measure latency from the intended
//! time. Rates are whole messages per second, so every phase's slots are exactly those
//! of a steady [`Schedule`] (unit-tested against it).
//!
//! Within its slot, each X is shifted by a slow triangle wave ([`dither_ns`]: from 0 up
//! to just under one slot over [`DITHER_STEPS`] messages and back), so consecutive X
//! are one slot apart ± 1/997 of it. Why: the kernel splits a process's CPU time into
//! user and system by sampling the mode at its timer tick (4 ms here), and at 50k msg/s
//! the slot (20 µs) divides the tick exactly, so without the shift every tick of a run
//! lands at one phase of the X→D cycle (the phase the run happened to start at), and
//! the user-space CPU per X→D of one binary measured 0.93–2.09 µs from run to run. With
//! it the tick sweeps every phase of the cycle about once a second; the rate, the count
//! per second and the spacing (±0.1%) are unchanged.

use serde::Serialize;

use crate::schedule::{RatePattern, Schedule};

const NS_PER_SEC: u64 = 1_000_000_000;

/// Messages over which [`dither_ns`] rises from 0 to its top (and as many to fall): a
/// prime, so that no tick period (a whole number of slots at common rates and HZ) keeps
/// sampling the same few phases.
pub const DITHER_STEPS: u64 = 997;

/// The shift of message `rel` of a phase within its slot (module docs): a triangle wave
/// of period `2 * DITHER_STEPS` messages, from 0 to `(DITHER_STEPS - 1) / DITHER_STEPS`
/// of the slot (`NS_PER_SEC / rate`), in steps of 1/`DITHER_STEPS` of it.
#[inline]
pub fn dither_ns(rel: u64, rate: u64) -> u64 {
    let m = rel % (2 * DITHER_STEPS);
    let step = if m < DITHER_STEPS {
        m
    } else {
        2 * DITHER_STEPS - 1 - m
    };
    (u128::from(step) * u128::from(NS_PER_SEC)
        / (u128::from(rate.max(1)) * u128::from(DITHER_STEPS))) as u64
}

/// One of the published cycles, or the user's own list of rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cycle {
    /// 50,000 msg/s for 5 minutes.
    Burst,
    /// 10k → 100k msg/s in 10k steps, 4 minutes each.
    Sustained,
    /// 10k → 40k msg/s in 10k steps of 4 minutes, then 50k msg/s held for 4 hours.
    Extended,
}

impl Cycle {
    /// The published steps: (label, rate msg/s, duration s).
    pub fn published(self) -> Vec<(String, u64, f64)> {
        match self {
            Cycle::Burst => vec![("burst 50k".into(), 50_000, 300.0)],
            Cycle::Sustained => (1..=10)
                .map(|k| (format!("{}k", k * 10), k * 10_000, 240.0))
                .collect(),
            Cycle::Extended => {
                let mut v: Vec<(String, u64, f64)> = (1..=4)
                    .map(|k| (format!("{}k", k * 10), k * 10_000, 240.0))
                    .collect();
                v.push(("50k hold".into(), 50_000, 4.0 * 3600.0));
                v
            }
        }
    }

    /// The name printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Cycle::Burst => "burst",
            Cycle::Sustained => "sustained",
            Cycle::Extended => "extended",
        }
    }
}

/// One phase of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// "warm-up", "30k", "50k hold", ...
    pub label: String,
    /// Target rate, msg/s.
    pub rate: u64,
    /// Duration as run, ns.
    pub duration_ns: u64,
    /// The published duration, ns (equal to `duration_ns` when unscaled).
    pub published_ns: u64,
    /// Excluded from every result.
    pub warmup: bool,
}

/// How the published durations were changed (printed prominently in every report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Scaling {
    /// Published durations.
    None,
    /// Every duration multiplied by this factor.
    Factor(f64),
    /// Every step lasts this many seconds.
    StepSeconds(f64),
}

impl Scaling {
    /// One line for the report.
    /// A few words for a plot title.
    pub fn short(&self) -> String {
        match self {
            Scaling::None => "published durations".into(),
            Scaling::Factor(f) => format!("durations x{f}"),
            Scaling::StepSeconds(s) => format!("{s} s steps"),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Scaling::None => "published durations (not scaled)".into(),
            Scaling::Factor(f) => {
                format!("DURATIONS SCALED x{f} (--duration-scale {f}); rates are never scaled")
            }
            Scaling::StepSeconds(s) => format!(
                "DURATIONS SCALED: every step lasts {s} s (--step-duration); rates are never scaled"
            ),
        }
    }
}

/// The phases of a run with the index of their first message and their start time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// Warm-up first (when any), then the measured steps.
    pub phases: Vec<Phase>,
    /// Index of each phase's first message.
    pub first_index: Vec<u64>,
    /// Messages in each phase.
    pub count: Vec<u64>,
    /// Start of each phase, ns from the start of the run.
    pub start_ns: Vec<u64>,
    /// How the durations were scaled.
    pub scaling: Scaling,
}

/// Builds the phases: an optional warm-up at the first step's rate, then `steps`
/// (label, rate, published seconds) with durations scaled per `scaling`.
pub fn build(
    steps: &[(String, u64, f64)],
    scaling: Scaling,
    warmup_secs: f64,
) -> Result<Timeline, String> {
    if steps.is_empty() {
        return Err("no steps to run".into());
    }
    let secs_ns = |s: f64| -> Result<u64, String> {
        if !s.is_finite() || !(0.0..=1e7).contains(&s) {
            return Err(format!("duration {s} s is out of range"));
        }
        Ok((s * 1e9).round() as u64)
    };
    let mut phases = Vec::new();
    if warmup_secs > 0.0 {
        let ns = secs_ns(warmup_secs)?;
        phases.push(Phase {
            label: "warm-up".into(),
            rate: steps[0].1,
            duration_ns: ns,
            published_ns: ns,
            warmup: true,
        });
    }
    for (label, rate, secs) in steps {
        if *rate == 0 {
            return Err(format!("step {label}: the rate must be at least 1 msg/s"));
        }
        let published_ns = secs_ns(*secs)?;
        let duration_ns = match scaling {
            Scaling::None => published_ns,
            Scaling::Factor(f) => secs_ns(secs * f)?,
            Scaling::StepSeconds(s) => secs_ns(s)?,
        };
        if duration_ns == 0 {
            return Err(format!("step {label} would last 0 s"));
        }
        phases.push(Phase {
            label: label.clone(),
            rate: *rate,
            duration_ns,
            published_ns,
            warmup: false,
        });
    }
    let (mut first_index, mut count, mut start_ns) = (Vec::new(), Vec::new(), Vec::new());
    let (mut index, mut t) = (0u64, 0u64);
    for p in &phases {
        first_index.push(index);
        start_ns.push(t);
        let n = phase_schedule(p).counts().1;
        count.push(n);
        index += n;
        t += p.duration_ns;
    }
    Ok(Timeline {
        phases,
        first_index,
        count,
        start_ns,
        scaling,
    })
}

/// The steady schedule of one phase (times from the phase's start).
pub fn phase_schedule(p: &Phase) -> Schedule {
    Schedule {
        pattern: RatePattern::Steady {
            rate: p.rate as f64,
        },
        warmup_ns: 0,
        duration_ns: p.duration_ns,
    }
}

impl Timeline {
    /// Messages in the whole run, warm-up included.
    pub fn total(&self) -> u64 {
        self.first_index.last().copied().unwrap_or(0) + self.count.last().copied().unwrap_or(0)
    }

    /// End of the run, ns from its start.
    pub fn end_ns(&self) -> u64 {
        self.start_ns.last().copied().unwrap_or(0) + self.phases.last().map_or(0, |p| p.duration_ns)
    }

    /// The phase message `index` belongs to (None past the end). `hint` is tried
    /// first (replies come in order, so the last answer is almost always right).
    #[inline]
    pub fn phase_of(&self, index: u64, hint: usize) -> Option<usize> {
        let fits = |k: usize| {
            let first = self.first_index[k];
            index >= first && index - first < self.count[k]
        };
        if hint < self.phases.len() && fits(hint) {
            return Some(hint);
        }
        if hint + 1 < self.phases.len() && fits(hint + 1) {
            return Some(hint + 1);
        }
        (0..self.phases.len()).find(|&k| fits(k))
    }

    /// Intended send time of message `index` of phase `k`, ns from the start of the
    /// run: message j of second s of the phase is due at `s + j / rate` seconds, as in
    /// [`Schedule::slots`] for a whole-number rate, plus its shift within the slot
    /// ([`dither_ns`], module docs).
    #[inline]
    pub fn intended_ns(&self, k: usize, index: u64) -> u64 {
        let rate = self.phases[k].rate.max(1);
        let rel = index - self.first_index[k];
        let (sec, j) = (rel / rate, rel % rate);
        let offset = (u128::from(j) * u128::from(NS_PER_SEC) / u128::from(rate)) as u64;
        self.start_ns[k] + sec * NS_PER_SEC + offset + dither_ns(rel, rate)
    }

    /// The published total and the run's total duration of the measured steps, s.
    pub fn measured_secs(&self) -> (f64, f64) {
        let steps = self.phases.iter().filter(|p| !p.warmup);
        let (mut published, mut run) = (0.0, 0.0);
        for p in steps {
            published += p.published_ns as f64 / 1e9;
            run += p.duration_ns as f64 / 1e9;
        }
        (published, run)
    }
}

/// Parses a duration in seconds (f64), with [`tickwire_rt::units::parse_duration`]:
/// `300`, `2.5s`, `500ms`, `4m`, `4h` (plain numbers are seconds).
pub fn parse_duration(s: &str) -> Result<f64, String> {
    tickwire_rt::units::parse_duration(s).map(|d| d.as_secs_f64())
}

/// Parses a positive scale factor (`0.01`, `1`).
pub fn parse_scale(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number (example: 0.05)"))?;
    if !v.is_finite() || v <= 0.0 || v > 1000.0 {
        return Err(format!("{s:?}: the scale must be above 0 and at most 1000"));
    }
    Ok(v)
}

/// Parses a whole rate (msg/s, `k`/`M` suffixes as everywhere, at least 1).
pub fn parse_whole_rate(s: &str) -> Result<u64, String> {
    let r = crate::schedule::parse_rate(s)?.round();
    if r < 1.0 {
        return Err(format!("{s:?}: the rate must be at least 1 msg/s"));
    }
    Ok(r as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(rates: &[u64], secs: f64) -> Vec<(String, u64, f64)> {
        rates.iter().map(|&r| (format!("{r}"), r, secs)).collect()
    }

    /// Consecutive X are one slot apart ± 1/997 of it (1 ns of rounding), never closer,
    /// and the tick (every 200 slots at 50k msg/s and 250 Hz) samples hundreds of phases
    /// of the slot instead of one.
    #[test]
    fn the_dither_keeps_the_spacing_and_sweeps_the_tick_phase() {
        let t = build(&steps(&[50_000], 30.0), Scaling::None, 0.0).unwrap();
        let slot = NS_PER_SEC / 50_000;
        let step = slot / DITHER_STEPS;
        let mut phases = std::collections::BTreeSet::new();
        let mut prev = t.intended_ns(0, 0);
        for i in 1..t.total() {
            let at = t.intended_ns(0, i);
            let gap = at - prev;
            assert!(
                gap + 1 >= slot - step && gap <= slot + step + 1,
                "gap {gap} before {i}"
            );
            prev = at;
            if i % 200 == 0 {
                phases.insert((at % slot) / (step + 1));
            }
        }
        assert!(phases.len() > 900, "{} phases", phases.len());
        assert_eq!(dither_ns(0, 50_000), 0);
        assert_eq!(
            dither_ns(DITHER_STEPS - 1, 50_000),
            dither_ns(DITHER_STEPS, 50_000)
        );
        assert!(dither_ns(DITHER_STEPS - 1, 50_000) < slot);
        assert_eq!(dither_ns(2 * DITHER_STEPS, 50_000), 0);
    }

    #[test]
    fn intended_times_are_the_steady_schedules_slots() {
        let t = build(&steps(&[3, 7, 1000], 2.5), Scaling::None, 1.5).unwrap();
        assert_eq!(t.phases.len(), 4);
        assert!(t.phases[0].warmup && t.phases[0].rate == 3);
        let mut index = 0;
        for (k, p) in t.phases.iter().enumerate() {
            let slots: Vec<u64> = phase_schedule(p).slots().map(|s| s.at_ns).collect();
            assert_eq!(slots.len() as u64, t.count[k], "phase {k}");
            assert_eq!(t.first_index[k], index);
            for at in slots {
                assert_eq!(t.phase_of(index, 0), Some(k));
                let rel = index - t.first_index[k];
                assert_eq!(
                    t.intended_ns(k, index),
                    t.start_ns[k] + at + dither_ns(rel, p.rate),
                    "message {index}"
                );
                assert!(dither_ns(rel, p.rate) < NS_PER_SEC / p.rate);
                index += 1;
            }
        }
        assert_eq!(t.total(), index);
        assert_eq!(t.phase_of(index, 2), None);
        assert_eq!(t.end_ns(), 9_000_000_000);
    }

    #[test]
    fn published_cycles_and_scaling() {
        let b = Cycle::Burst.published();
        assert_eq!(b, vec![("burst 50k".to_string(), 50_000, 300.0)]);
        let s = Cycle::Sustained.published();
        assert_eq!(s.len(), 10);
        assert_eq!((s[0].1, s[9].1, s[9].2), (10_000, 100_000, 240.0));
        let e = Cycle::Extended.published();
        assert_eq!(e.last().unwrap().1, 50_000);
        assert_eq!(e.last().unwrap().2, 14_400.0);

        let t = build(&b, Scaling::Factor(0.01), 0.0).unwrap();
        assert_eq!(t.phases.len(), 1);
        assert_eq!(t.phases[0].duration_ns, 3_000_000_000);
        assert_eq!(t.phases[0].published_ns, 300_000_000_000);
        assert_eq!(t.phases[0].rate, 50_000, "rates are never scaled");
        assert_eq!(t.count[0], 150_000);
        assert_eq!(t.measured_secs(), (300.0, 3.0));
        let t = build(&s, Scaling::StepSeconds(2.0), 1.0).unwrap();
        assert!(t.phases[1..].iter().all(|p| p.duration_ns == 2_000_000_000));
        assert!(t.scaling.describe().contains("rates are never scaled"));
        assert!(build(&[], Scaling::None, 0.0).is_err());
        assert!(build(&steps(&[0], 1.0), Scaling::None, 0.0).is_err());
        assert!(build(&steps(&[10], 1.0), Scaling::Factor(0.0), 0.0).is_err());
    }

    #[test]
    fn durations_scales_and_rates_parse() {
        assert_eq!(parse_duration("300"), Ok(300.0));
        assert_eq!(parse_duration("2.5s"), Ok(2.5));
        assert_eq!(parse_duration("500ms"), Ok(0.5));
        assert_eq!(parse_duration("4m"), Ok(240.0));
        assert_eq!(parse_duration("4h"), Ok(14_400.0));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
        assert_eq!(parse_scale("0.05"), Ok(0.05));
        assert!(parse_scale("0").is_err());
        assert!(parse_scale("x").is_err());
        assert_eq!(parse_whole_rate("50k"), Ok(50_000));
        assert_eq!(parse_whole_rate("1.5M"), Ok(1_500_000));
        assert!(parse_whole_rate("0").is_err());
    }
}
