//! Replay speed and the absolute replay schedule (pure: time is a parameter).
//!
//! Replay keeps the recorded spacing between datagrams, divided by the speed factor,
//! on an *absolute* schedule: datagram `i` is due at `start + (t_i - t_0) / factor`,
//! computed from the recorded times, never from the previous send. A late send therefore
//! never shifts the ones after it (no drift), and how late each send was is the replay's
//! own timing fidelity.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// The recorded timing divided by this factor (`1x` original, `4x` four times faster).
    Factor(f64),
    /// A fixed rate in datagrams (or messages) per second, ignoring recorded times.
    Rate(f64),
    /// As fast as possible.
    Max,
}

/// A rate written as a bare number below this is refused as ambiguous (`4`: 4x or
/// 4/s?); `4/s` and `4x` say which.
pub const BARE_RATE_MIN: f64 = 1000.0;

impl Speed {
    /// Parses `1x`, `4x`, `0.5x`, `max`, or a rate such as `100k` / `2000/s` (a bare
    /// number below [`BARE_RATE_MIN`] is refused as ambiguous).
    pub fn parse(s: &str) -> Result<Speed, String> {
        let t = s.trim().to_ascii_lowercase();
        if t == "max" {
            return Ok(Speed::Max);
        }
        if let Some(f) = t.strip_suffix('x') {
            let v: f64 = f
                .parse()
                .map_err(|_| format!("{s:?} is not a speed (examples: 1x, 4x, 0.5x, max, 50k)"))?;
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Err(format!(
                    "speed factor {s:?} must be above 0 and at most 1000000x"
                ));
            }
            return Ok(Speed::Factor(v));
        }
        // A bare small number is most likely a factor without its `x` (`--speed 4`
        // meant 4x, not four messages a second: a session of hours): ask which.
        if let Ok(n) = t.parse::<f64>() {
            if n > 0.0 && n < BARE_RATE_MIN {
                return Err(format!(
                    "--speed {s} is ambiguous: write {s}x for {s} times the recorded pace, or \
                     {s}/s for {s} a second"
                ));
            }
        }
        let rate = tickwire_rt::units::parse_rate(&t)
            .map_err(|_| format!("{s:?} is not a speed (examples: 1x, 4x, 0.5x, max, 50k)"))?;
        if rate <= 0.0 {
            return Err(format!("rate {s:?} must be above 0"));
        }
        Ok(Speed::Rate(rate))
    }
}

impl std::fmt::Display for Speed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Speed::Factor(x) => write!(f, "{x}x"),
            Speed::Rate(r) => write!(f, "{r}/s"),
            Speed::Max => f.write_str("max"),
        }
    }
}

/// The intended send times of one pass over a recording.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    speed: Speed,
    start_ns: u64,
    first_recorded_ns: u64,
}

impl Schedule {
    /// A pass starting at `start_ns` (monotonic) over a recording whose first datagram
    /// was recorded at `first_recorded_ns`.
    pub fn new(speed: Speed, start_ns: u64, first_recorded_ns: u64) -> Schedule {
        Schedule {
            speed,
            start_ns,
            first_recorded_ns,
        }
    }

    /// When datagram `index`, recorded at `recorded_ns`, is due; `None` under [`Speed::Max`].
    pub fn due(&self, index: u64, recorded_ns: u64) -> Option<u64> {
        match self.speed {
            Speed::Max => None,
            Speed::Factor(x) => {
                // Saturating: a slow speed over timestamps far apart passes 2^64 ns
                // (the add wrapped, and everything went out at once).
                let offset = recorded_ns.saturating_sub(self.first_recorded_ns) as f64 / x;
                Some(self.start_ns.saturating_add(offset as u64))
            }
            Speed::Rate(r) => Some(
                self.start_ns
                    .saturating_add((index as f64 * 1e9 / r) as u64),
            ),
        }
    }

    /// How long one pass over `count` datagrams spanning `span_ns` takes at this speed
    /// (0 for [`Speed::Max`]); a looping replay starts its next pass this long plus one
    /// average gap after the previous start.
    pub fn pass_ns(&self, count: u64, span_ns: u64) -> u64 {
        match self.speed {
            Speed::Max => 0,
            Speed::Factor(x) => {
                let gap = if count > 1 { span_ns / (count - 1) } else { 0 };
                (span_ns.saturating_add(gap) as f64 / x) as u64
            }
            Speed::Rate(r) => (count as f64 * 1e9 / r) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_speeds() {
        assert_eq!(Speed::parse("1x"), Ok(Speed::Factor(1.0)));
        assert_eq!(Speed::parse("4X"), Ok(Speed::Factor(4.0)));
        assert_eq!(Speed::parse("0.5x"), Ok(Speed::Factor(0.5)));
        assert_eq!(Speed::parse("max"), Ok(Speed::Max));
        assert_eq!(Speed::parse("50k"), Ok(Speed::Rate(50_000.0)));
        for bad in ["0x", "-1x", "fast", "x", "0"] {
            assert!(Speed::parse(bad).is_err(), "{bad}");
        }
        // A bare small number: 4x or 4/s? (new-user pass: `--speed 4` was four
        // messages a second, a session of 70 hours.)
        let e = Speed::parse("4").unwrap_err();
        assert!(
            e.contains("ambiguous") && e.contains("4x") && e.contains("4/s"),
            "{e}"
        );
        assert_eq!(Speed::parse("4/s"), Ok(Speed::Rate(4.0)));
        assert_eq!(Speed::parse("2000"), Ok(Speed::Rate(2000.0)));
    }

    #[test]
    fn schedule_is_absolute_and_scaled() {
        let s = Schedule::new(Speed::Factor(4.0), 1_000, 5_000);
        assert_eq!(s.due(0, 5_000), Some(1_000));
        assert_eq!(s.due(1, 9_000), Some(2_000));
        assert_eq!(s.due(2, 405_000), Some(101_000));
        let r = Schedule::new(Speed::Rate(1000.0), 0, 0);
        assert_eq!(r.due(3, 123), Some(3_000_000));
        assert_eq!(Schedule::new(Speed::Max, 0, 0).due(7, 7), None);
        // Hostile-input pass: timestamps 2^32 s apart at 0.001x pass 2^64 ns; the add
        // wrapped (a panic in a debug build) and the replay sent everything at once.
        let slow = Schedule::new(Speed::Factor(0.001), 1_000, 0);
        assert_eq!(slow.due(1, 1 << 62), Some(u64::MAX));
        assert_eq!(slow.pass_ns(2, u64::MAX), u64::MAX);
        assert_eq!(
            Schedule::new(Speed::Rate(1e-9), 5, 0).due(u64::MAX, 0),
            Some(u64::MAX)
        );
        // Four datagrams 1 ms apart at 1x: the next pass starts 4 ms after this one.
        assert_eq!(
            Schedule::new(Speed::Factor(1.0), 0, 0).pass_ns(4, 3_000_000),
            4_000_000
        );
    }
}
