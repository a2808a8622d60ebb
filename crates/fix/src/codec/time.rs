//! FIX UTC time formats without a calendar library on the hot path.
//!
//! * UTCTimestamp: `YYYYMMDD-HH:MM:SS`, optionally followed by `.sss`, `.ssssss` or
//!   `.sssssssss` (milli-, micro- or nanoseconds).
//! * UTCDateOnly: `YYYYMMDD`.
//! * UTCTimeOnly: `HH:MM:SS` with the same optional fractions.
//!
//! Conversions between days since 1970-01-01 and the proleptic Gregorian calendar use
//! the well-known "days from civil" / "civil from days" integer arithmetic (eras of 400
//! years), so formatting a timestamp is a handful of integer divisions and no
//! allocation beyond appending to the caller's buffer. Only instants at or after the
//! Unix epoch are representable (times are `u64` nanoseconds since the epoch), and
//! years up to 9999 (four digits on the wire).

const NANOS_PER_SEC: u64 = 1_000_000_000;
const SECS_PER_DAY: u64 = 86_400;
/// Nanoseconds since the epoch of 10000-01-01T00:00:00Z (first instant with a 5-digit year).
const YEAR_10000_DAYS: u64 = 2_932_897;

/// Number of fractional-second digits written in a UTCTimestamp / UTCTimeOnly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TimestampPrecision {
    /// `HH:MM:SS` (the QuickFIX default for FIX.4.0 and FIX.4.1).
    Seconds,
    /// `HH:MM:SS.sss` (the QuickFIX default for FIX.4.2 and later, and FIXT.1.1).
    #[default]
    Millis,
    /// `HH:MM:SS.ssssss`.
    Micros,
    /// `HH:MM:SS.sssssssss`.
    Nanos,
}

impl TimestampPrecision {
    /// The precision QuickFIX uses by default for a BeginString: seconds for `FIX.4.0`
    /// and `FIX.4.1`, milliseconds for everything else (FIX.4.2, 4.3, 4.4, FIXT.1.1).
    pub fn default_for<B: AsRef<[u8]> + ?Sized>(begin_string: &B) -> TimestampPrecision {
        match begin_string.as_ref() {
            b"FIX.4.0" | b"FIX.4.1" => TimestampPrecision::Seconds,
            _ => TimestampPrecision::Millis,
        }
    }

    /// Number of fractional digits (0, 3, 6 or 9).
    pub fn digits(self) -> usize {
        match self {
            TimestampPrecision::Seconds => 0,
            TimestampPrecision::Millis => 3,
            TimestampPrecision::Micros => 6,
            TimestampPrecision::Nanos => 9,
        }
    }

    /// The precision whose number of fractional digits is `digits` (0, 3, 6 or 9).
    pub fn from_digits(digits: usize) -> Option<TimestampPrecision> {
        match digits {
            0 => Some(TimestampPrecision::Seconds),
            3 => Some(TimestampPrecision::Millis),
            6 => Some(TimestampPrecision::Micros),
            9 => Some(TimestampPrecision::Nanos),
            _ => None,
        }
    }
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a (March-based) year.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// (year >= 1970, month, day) to days since 1970-01-01; None before the epoch.
fn days_from_civil(y: u64, m: u64, d: u64) -> Option<u64> {
    let y = if m <= 2 { y.checked_sub(1)? } else { y };
    let era = y / 400;
    let yoe = y - era * 400; // [0, 399]
    let mp = if m > 2 { m - 3 } else { m + 9 }; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    (era * 146_097 + doe).checked_sub(719_468)
}

fn is_leap(y: u64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

#[inline]
fn put2(b: &mut [u8], at: usize, v: u64) {
    b[at] = b'0' + (v / 10 % 10) as u8;
    b[at + 1] = b'0' + (v % 10) as u8;
}

/// Writes `HH:MM:SS[.fff]` for `nanos_of_day` into `b` (at least 18 bytes); returns length.
fn format_time(b: &mut [u8], nanos_of_day: u64, p: TimestampPrecision) -> usize {
    let secs = nanos_of_day / NANOS_PER_SEC;
    let frac = nanos_of_day % NANOS_PER_SEC;
    put2(b, 0, secs / 3600);
    b[2] = b':';
    put2(b, 3, secs / 60 % 60);
    b[5] = b':';
    put2(b, 6, secs % 60);
    let digits = p.digits();
    if digits == 0 {
        return 8;
    }
    b[8] = b'.';
    // Truncate (never round: rounding could carry into the seconds).
    let mut v = frac / 10u64.pow(9 - digits as u32);
    for i in (0..digits).rev() {
        b[9 + i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    9 + digits
}

/// Appends a UTCTimestamp (`YYYYMMDD-HH:MM:SS[.sss|.ssssss|.sssssssss]`) for `unix_nanos`
/// to `out`, truncating (not rounding) to the precision. Instants from the year 10000 on
/// are clamped to 9999-12-31T23:59:59.999999999 (the format has four year digits; a u64
/// of nanoseconds only reaches the year 2554 anyway).
pub fn write_utc_timestamp(out: &mut Vec<u8>, unix_nanos: u64, p: TimestampPrecision) {
    let mut b = [0u8; 27];
    let n = format_utc_timestamp(&mut b, unix_nanos, p);
    out.extend_from_slice(&b[..n]);
}

/// Formats a UTCTimestamp into a fixed buffer; returns the number of bytes written
/// (17, 21, 24 or 27).
pub fn format_utc_timestamp(b: &mut [u8; 27], unix_nanos: u64, p: TimestampPrecision) -> usize {
    let days = (unix_nanos / NANOS_PER_SEC / SECS_PER_DAY).min(YEAR_10000_DAYS - 1);
    let nanos_of_day = unix_nanos - days * SECS_PER_DAY * NANOS_PER_SEC;
    let nanos_of_day = nanos_of_day.min(SECS_PER_DAY * NANOS_PER_SEC - 1);
    let (y, m, d) = civil_from_days(days);
    put2(b, 0, y / 100);
    put2(b, 2, y % 100);
    put2(b, 4, m);
    put2(b, 6, d);
    b[8] = b'-';
    9 + format_time(&mut b[9..], nanos_of_day, p)
}

/// [`write_utc_timestamp`] for a stream of instants that mostly share their second (a
/// session's SendingTime): the `YYYYMMDD-HH:MM:SS` part is formatted once per second and
/// kept, only the fraction is formatted per call, and an instant written again at the
/// same precision (a message's SendingTime and TransactTime from one clock reading) is
/// copied whole. Same output as [`write_utc_timestamp`] for every instant.
#[derive(Debug, Clone)]
pub struct TimestampWriter {
    /// The second `stamp[..17]` is for (u64::MAX: none yet).
    sec: u64,
    /// The instant and fraction digits `stamp[..len]` is for (`digits` 255: none yet).
    nanos: u64,
    digits: u8,
    len: u8,
    stamp: [u8; 27],
}

impl Default for TimestampWriter {
    fn default() -> Self {
        TimestampWriter {
            sec: u64::MAX,
            nanos: u64::MAX,
            digits: u8::MAX,
            len: 0,
            stamp: [0; 27],
        }
    }
}

/// `10^(9 - digits)`: the divisor that truncates nanoseconds to `digits` fraction digits.
const FRAC_DIVISOR: [u64; 10] = [
    1_000_000_000,
    100_000_000,
    10_000_000,
    1_000_000,
    100_000,
    10_000,
    1_000,
    100,
    10,
    1,
];

impl TimestampWriter {
    /// Appends the UTCTimestamp for `unix_nanos` at precision `p` to `out`.
    #[inline]
    pub fn write(&mut self, out: &mut Vec<u8>, unix_nanos: u64, p: TimestampPrecision) {
        out.extend_from_slice(self.stamp(unix_nanos, p));
    }

    /// The UTCTimestamp for `unix_nanos` at precision `p` (what [`TimestampWriter::write`]
    /// appends), valid until the next call.
    #[inline]
    pub fn stamp(&mut self, unix_nanos: u64, p: TimestampPrecision) -> &[u8] {
        let digits = p.digits();
        if unix_nanos != self.nanos || digits != usize::from(self.digits) {
            self.format(unix_nanos, p);
        }
        &self.stamp[..usize::from(self.len)]
    }

    /// Formats `unix_nanos` into `stamp` (the date and time of day only on a new second).
    fn format(&mut self, unix_nanos: u64, p: TimestampPrecision) {
        let digits = p.digits();
        self.nanos = unix_nanos;
        self.digits = digits as u8;
        let sec = unix_nanos / NANOS_PER_SEC;
        if sec / SECS_PER_DAY >= YEAR_10000_DAYS {
            // Clamped by the format: the slow path knows how.
            self.len = format_utc_timestamp(&mut self.stamp, unix_nanos, p) as u8;
            self.sec = u64::MAX;
            return;
        }
        if sec != self.sec {
            format_utc_timestamp(
                &mut self.stamp,
                sec * NANOS_PER_SEC,
                TimestampPrecision::Seconds,
            );
            self.sec = sec;
        }
        self.len = 17;
        if digits > 0 {
            // Truncated, never rounded, as format_time does.
            let mut v = (unix_nanos % NANOS_PER_SEC) / FRAC_DIVISOR[digits];
            self.stamp[17] = b'.';
            for i in (1..=digits).rev() {
                self.stamp[17 + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
            self.len = 18 + digits as u8;
        }
    }
}

/// Appends a UTCDateOnly (`YYYYMMDD`) for the UTC day containing `unix_nanos`.
pub fn write_utc_date_only(out: &mut Vec<u8>, unix_nanos: u64) {
    let mut b = [0u8; 27];
    format_utc_timestamp(&mut b, unix_nanos, TimestampPrecision::Seconds);
    out.extend_from_slice(&b[..8]);
}

/// Appends a UTCTimeOnly (`HH:MM:SS[.fff]`) for the time of day of `unix_nanos`.
pub fn write_utc_time_only(out: &mut Vec<u8>, unix_nanos: u64, p: TimestampPrecision) {
    let mut b = [0u8; 18];
    let nanos_of_day = unix_nanos % (SECS_PER_DAY * NANOS_PER_SEC);
    let n = format_time(&mut b, nanos_of_day, p);
    out.extend_from_slice(&b[..n]);
}

/// Parses exactly `N` ASCII digits.
#[inline]
fn digits(v: &[u8]) -> Option<u64> {
    let mut acc = 0u64;
    for &c in v {
        if !c.is_ascii_digit() {
            return None;
        }
        acc = acc * 10 + u64::from(c - b'0');
    }
    Some(acc)
}

/// Parses `HH:MM:SS[.sss|.ssssss|.sssssssss]` to nanoseconds since midnight. Seconds may
/// be 60 (a leap second), counted as the first second of the next minute.
pub fn parse_utc_time_only(v: &[u8]) -> Option<u64> {
    if v.len() < 8 || v[2] != b':' || v[5] != b':' {
        return None;
    }
    let h = digits(&v[0..2])?;
    let mi = digits(&v[3..5])?;
    let s = digits(&v[6..8])?;
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let frac = match v.len() {
        8 => 0,
        12 | 15 | 18 if v[8] == b'.' => {
            let f = &v[9..];
            digits(f)? * 10u64.pow(9 - f.len() as u32)
        }
        _ => return None,
    };
    Some(((h * 60 + mi) * 60 + s) * NANOS_PER_SEC + frac)
}

/// Parses a UTCDateOnly `YYYYMMDD` to the Unix nanoseconds of that day's midnight;
/// None if malformed, not a real date, or before 1970.
pub fn parse_utc_date_only(v: &[u8]) -> Option<u64> {
    if v.len() != 8 {
        return None;
    }
    let y = digits(&v[0..4])?;
    let m = digits(&v[4..6])?;
    let d = digits(&v[6..8])?;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    days_from_civil(y, m, d)?.checked_mul(SECS_PER_DAY * NANOS_PER_SEC)
}

/// Parses a UTCTimestamp in any of the four precisions to Unix nanoseconds. None if
/// malformed, out of range (month 13, 31 April, hour 24...), before 1970 or beyond
/// what a u64 of nanoseconds holds (the year 2554).
pub fn parse_utc_timestamp(v: &[u8]) -> Option<u64> {
    if v.len() < 17 || v[8] != b'-' {
        return None;
    }
    let day = parse_utc_date_only(&v[..8])?;
    let t = parse_utc_time_only(&v[9..])?;
    day.checked_add(t)
}

/// [`parse_utc_timestamp`] remembering its last input and answer: a session reads a
/// message's SendingTime more than once (the format check, the latency check), and the
/// second read of the same bytes costs a comparison instead of a parse. It also keeps
/// the last `YYYYMMDD-HH:MM:SS` it parsed, so that a new timestamp of the same second
/// (consecutive messages, mostly) costs a comparison and the fraction's digits. Same
/// answer as [`parse_utc_timestamp`] for every input.
#[derive(Debug, Clone, Default)]
pub struct TimestampReader {
    /// The last input (the longest UTCTimestamp has 27 bytes), `len` bytes of it.
    last: [u8; 27],
    /// 0: nothing remembered.
    len: u8,
    value: Option<u64>,
    /// The last date and time to the second parsed (`sec_known` false: none yet) and
    /// its value.
    sec: [u8; 17],
    sec_known: bool,
    sec_value: Option<u64>,
}

impl TimestampReader {
    /// [`parse_utc_timestamp`] of `v`.
    #[inline]
    pub fn parse(&mut self, v: &[u8]) -> Option<u64> {
        let n = v.len();
        if !(17..=27).contains(&n) {
            return parse_utc_timestamp(v);
        }
        if usize::from(self.len) == n && self.last.get(..n) == Some(v) {
            return self.value;
        }
        let value = self.parse_by_second(v);
        if let Some(dst) = self.last.get_mut(..n) {
            dst.copy_from_slice(v);
            self.len = n as u8;
            self.value = value;
        }
        value
    }

    /// [`parse_utc_timestamp`] of `v` (17 to 27 bytes) as the value of its first 17
    /// bytes (`YYYYMMDD-HH:MM:SS`, remembered) plus its fraction: a malformed or
    /// out-of-range prefix makes the whole malformed, and the sum overflows exactly when
    /// the parser's does.
    fn parse_by_second(&mut self, v: &[u8]) -> Option<u64> {
        let (prefix, frac) = v.split_at(17.min(v.len()));
        if !self.sec_known || self.sec[..] != *prefix {
            self.sec_value = parse_utc_timestamp(prefix);
            if let Some(dst) = self.sec.get_mut(..prefix.len()) {
                dst.copy_from_slice(prefix);
                self.sec_known = prefix.len() == 17;
            }
        }
        let base = self.sec_value?;
        match frac.len() {
            0 => Some(base),
            4 | 7 | 10 if frac[0] == b'.' => {
                let f = &frac[1..];
                base.checked_add(digits(f)? * FRAC_DIVISOR[f.len()])
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip_over_many_days() {
        for days in (0..YEAR_10000_DAYS).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m));
            assert_eq!(days_from_civil(y, m, d), Some(days));
        }
    }

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(days_from_civil(2000, 3, 1), Some(11_017));
        assert_eq!(days_from_civil(1969, 12, 31), None);
        assert_eq!(civil_from_days(YEAR_10000_DAYS), (10000, 1, 1));
    }
}

#[cfg(test)]
mod writer_props {
    use super::*;
    use proptest::prelude::*;

    fn precision() -> impl Strategy<Value = TimestampPrecision> {
        prop_oneof![
            Just(TimestampPrecision::Seconds),
            Just(TimestampPrecision::Millis),
            Just(TimestampPrecision::Micros),
            Just(TimestampPrecision::Nanos),
        ]
    }

    proptest! {
        /// The memo answers as the parser does, for repeated and changing inputs alike.
        #[test]
        fn timestamp_reader_agrees_with_the_parser(
            inputs in proptest::collection::vec(
                prop_oneof![
                    "2026112[0-9]-0[0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,9})?",
                    // Few seconds, so that inputs share them, with good and bad
                    // fractions and bad dates and times; the last second of the u64
                    // range, where the fraction decides whether the sum overflows.
                    "202611(29|31)-(00|24):00:(00|60)(\\.[0-9a]{0,10})?",
                    "25540721-23:34:33(\\.[5-9][0-9]{0,8})?",
                    proptest::collection::vec(any::<u8>(), 0..30)
                        .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
                ],
                1..20,
            )
        ) {
            let mut r = TimestampReader::default();
            for v in &inputs {
                prop_assert_eq!(r.parse(v.as_bytes()), parse_utc_timestamp(v.as_bytes()));
                prop_assert_eq!(r.parse(v.as_bytes()), parse_utc_timestamp(v.as_bytes()));
            }
        }

        /// The cached writer gives exactly write_utc_timestamp's bytes, for instants
        /// that share a second, cross one (midnight, month and year ends included) or
        /// jump anywhere in u64.
        #[test]
        fn the_cached_writer_matches_the_formatter(
            start in prop_oneof![any::<u64>(), 0u64..4_102_444_800_000_000_000],
            steps in proptest::collection::vec((0u64..3_000_000_000, precision()), 1..40),
        ) {
            let mut w = TimestampWriter::default();
            let mut t = start;
            for (step, p) in steps {
                t = t.saturating_add(step);
                let (mut got, mut want) = (Vec::new(), Vec::new());
                w.write(&mut got, t, p);
                write_utc_timestamp(&mut want, t, p);
                prop_assert_eq!(&got, &want, "instant {} precision {:?}", t, p);
            }
        }
    }

    #[test]
    fn the_cached_writer_matches_at_day_and_year_ends() {
        let mut w = TimestampWriter::default();
        // 2026-12-31T23:59:59.999999999Z, then the next nanosecond (a new year).
        for t in [
            1_798_761_599_999_999_999u64,
            1_798_761_600_000_000_000,
            0,
            u64::MAX,
        ] {
            for p in [TimestampPrecision::Seconds, TimestampPrecision::Nanos] {
                let (mut got, mut want) = (Vec::new(), Vec::new());
                w.write(&mut got, t, p);
                write_utc_timestamp(&mut want, t, p);
                assert_eq!(got, want, "{t}");
            }
        }
    }
}
