//! The one syntax for durations, rates and sizes on every command line and in every
//! config file.
//!
//! - Duration: `250ms`, `5s`, `2.5s`, `4m`, `1h`, `100us`; a plain number is seconds.
//! - Rate (messages per second): `500000`, `50k`, `1.5M`, optionally with `/s`;
//!   `k` and `M` are decimal (1e3, 1e6).
//! - Size (bytes): `4096`, `64K`, `64KiB`, `8M`, `8MiB`, `1G`; K/M/G are powers of 1024,
//!   and so are KB/MB/GB (taken as KiB/MiB/GiB, as the README says).

use std::time::Duration;

/// Parses a duration (see the module docs). Negative, non-finite and absurd (> ~115
/// days) values are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    duration_or(s, "a plain number is seconds")
}

/// [`parse_duration`], whose error ends with `plain` (what a plain number means for
/// this flag).
fn duration_or(s: &str, plain: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("µs") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t.as_str(), 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| {
        format!("{s:?} is not a duration (examples: 5s, 250ms, 2.5s, 4m, 1h; {plain})")
    })?;
    in_range(v * mult, s)
}

/// [`parse_duration`] for settings measured in micro- or milliseconds (a spin window,
/// a polling interval): a plain number other than 0 is refused, since as seconds it
/// is almost certainly not what was meant (`--hybrid-spin 200` would spin for 200 s).
pub fn parse_short_duration(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        Ok(_) => Err(format!(
            "{s:?} needs a unit (e.g. {}us or {}ms): a plain number would be seconds",
            s.trim(),
            s.trim()
        )),
        Err(_) => duration_or(s, "a number needs a unit here, e.g. 200us or 5ms"),
    }
}

/// `secs` as a duration, refused when negative, not finite or above 1e7 s (`s`: the
/// text it was read from, for the error).
fn in_range(secs: f64, s: &str) -> Result<Duration, String> {
    // Said in words a flag in any unit fits (a new-user pass read "0 to 1e7 seconds"
    // for --probe-ms=-1).
    // "out of range" stays in each (the router's config keys keep such a reason as
    // their own).
    if secs.is_nan() {
        return Err(format!("{s:?} is out of range: not a number"));
    }
    if secs < 0.0 {
        return Err(format!(
            "{s:?} is out of range: negative (a duration is 0 or more)"
        ));
    }
    if secs > 1e7 {
        return Err(format!(
            "{s:?} is out of range: too long (at most 10,000,000 seconds, about 16 weeks)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration for a flag named after its unit (`--probe-ms`, `--coalesce-us`): a plain
/// number is in `unit`, anything else is read as [`parse_duration`] reads it, so
/// `--probe-ms 5` and `--probe-ms 5ms` agree.
pub fn parse_duration_in(s: &str, unit: Duration) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) => in_range(v * unit.as_secs_f64(), s),
        Err(_) => {
            let plain = match unit.as_nanos() {
                1_000 => "a plain number is microseconds",
                1_000_000 => "a plain number is milliseconds",
                1_000_000_000 => "a plain number is seconds",
                _ => "a plain number is in the flag's unit",
            };
            duration_or(s, plain)
        }
    }
}

/// [`parse_duration_in`] milliseconds, as whole milliseconds.
pub fn parse_ms(s: &str) -> Result<u64, String> {
    parse_duration_in(s, Duration::from_millis(1)).map(|d| d.as_millis() as u64)
}

/// [`parse_duration_in`] microseconds, as whole microseconds.
pub fn parse_us(s: &str) -> Result<u64, String> {
    parse_duration_in(s, Duration::from_micros(1)).map(|d| d.as_micros() as u64)
}

/// [`parse_duration_in`] seconds, as whole seconds (at most `u32::MAX`).
pub fn parse_whole_secs(s: &str) -> Result<u32, String> {
    let d = parse_duration_in(s, Duration::from_secs(1))?;
    u32::try_from(d.as_secs()).map_err(|_| format!("{s:?} is out of range"))
}

/// Parses a message rate in msg/s (see the module docs).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("/s").unwrap_or(&t);
    let (num, mult) = if let Some(n) = t.strip_suffix('k') {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1e6)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (examples: 2000, 50k, 1.5M)"))?;
    let v = v * mult;
    if !(0.0..=1e10).contains(&v) {
        return Err(format!("{s:?} is out of range (0 to 1e10 msg/s)"));
    }
    Ok(v)
}

/// Parses a byte size (see the module docs).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 4096, 64K, 8MiB)"))?;
    let mult: usize = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        // A fraction ("1.5MiB") stops the digits early: say what a size is rather than
        // blame the suffix, which may be a valid one.
        _ if suffix.starts_with(['.', ',']) => {
            return Err(format!(
                "{s:?}: a size is a whole number with an optional K/KiB, M/MiB or G/GiB suffix"
            ))
        }
        _ => {
            return Err(format!(
                "{s:?}: unknown size suffix (a size is a whole number with an optional K/KiB, M/MiB or G/GiB suffix)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        // Each error says what a plain number means for that flag (a new-user pass
        // found `--probe-ms abc` told "a plain number is seconds").
        assert!(parse_duration("abc")
            .unwrap_err()
            .ends_with("a plain number is seconds)"));
        assert!(parse_ms("abc")
            .unwrap_err()
            .ends_with("a plain number is milliseconds)"));
        assert!(parse_us("abc")
            .unwrap_err()
            .ends_with("a plain number is microseconds)"));
        assert!(parse_short_duration("abc")
            .unwrap_err()
            .contains("a number needs a unit here"));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration(" 2.5S "), Ok(Duration::from_millis(2500)));
        for bad in ["soon", "-1s", "", "s", "1e400", "NaN", "1x"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        // Out of range, in words that fit a flag in any unit.
        assert!(parse_ms("-1")
            .unwrap_err()
            .contains("out of range: negative"));
        assert!(parse_duration("-5s")
            .unwrap_err()
            .contains("out of range: negative"));
        assert!(parse_duration("99999h")
            .unwrap_err()
            .contains("out of range: too long (at most 10,000,000 seconds"));
        assert!(!parse_ms("-1").unwrap_err().contains("1e7"));
    }

    #[test]
    fn short_durations_need_a_unit_unless_zero() {
        assert_eq!(
            parse_short_duration("200us"),
            Ok(Duration::from_micros(200))
        );
        assert_eq!(parse_short_duration("2ms"), Ok(Duration::from_millis(2)));
        assert_eq!(parse_short_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_short_duration("0.0"), Ok(Duration::ZERO));
        let e = parse_short_duration("200").unwrap_err();
        assert!(e.contains("needs a unit") && e.contains("200us"), "{e}");
        assert!(parse_short_duration("-1").is_err());
        assert!(parse_short_duration("soon").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert_eq!(parse_rate("50k"), Ok(50_000.0));
        assert_eq!(parse_rate("1.5M"), Ok(1_500_000.0));
        assert_eq!(parse_rate("200k/s"), Ok(200_000.0));
        for bad in ["fast", "-1", "", "1e11"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        for bad in ["8X", "", "-1", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_fractional_size_says_sizes_are_whole_numbers() {
        for bad in ["1.5MiB", "1.5GiB", "0.5K", "2.0"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("whole number"), "{bad}: {e}");
            assert!(!e.contains("unknown size suffix"), "{bad}: {e}");
        }
        let e = parse_size("8X").unwrap_err();
        assert!(
            e.contains("unknown size suffix") && e.contains("KiB"),
            "{e}"
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,24}") {
            let _ = parse_duration(&s);
            let _ = parse_rate(&s);
            let _ = parse_size(&s);
        }

        #[test]
        fn whole_milliseconds_round_trip(ms in 0u64..10_000_000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
        }
    }

    #[test]
    fn flags_named_for_a_unit_take_a_plain_number_in_it_or_any_duration() {
        assert_eq!(parse_ms("5"), Ok(5));
        assert_eq!(parse_ms("5ms"), Ok(5));
        assert_eq!(parse_ms("2s"), Ok(2000));
        assert_eq!(parse_ms("0"), Ok(0));
        assert_eq!(parse_us("250"), Ok(250));
        assert_eq!(parse_us("1ms"), Ok(1000));
        assert_eq!(parse_whole_secs("30"), Ok(30));
        assert_eq!(parse_whole_secs("2m"), Ok(120));
        assert!(parse_ms("-1").is_err());
        assert!(parse_ms("5 parsecs").is_err());
        assert!(parse_whole_secs("1e30").is_err());
    }
}
