//! Session schedule (`StartTime`/`EndTime`, `StartDay`/`EndDay`, `TimeZone`,
//! `UseLocalTime`).
//!
//! A schedule cuts time into *session periods*: every day from StartTime to EndTime
//! (overnight when EndTime < StartTime, the whole day when they are equal), or every
//! week from StartDay StartTime to EndDay EndTime. Both ends are inclusive, as in
//! QuickFIX. A period is identified by its start as a local date-time label, so two
//! instants are "in the same session" when they map to the same start. The session
//! is only logged on inside a period and resets its store when the store's creation
//! time is not in the current period (QuickFIX's `checkSessionTime`).

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, NaiveTime, TimeZone, Timelike, Weekday};

/// Time zone the StartTime/EndTime are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Zone {
    /// UTC (QuickFIX's default).
    #[default]
    Utc,
    /// An IANA zone (`TimeZone=America/New_York`), daylight saving included.
    Named(chrono_tz::Tz),
    /// The machine's local zone (`UseLocalTime=Y`), looked up by chrono.
    Local,
}

/// When a session may be logged on. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// `StartTime` (local to `zone`).
    pub start_time: NaiveTime,
    /// `EndTime` (local to `zone`).
    pub end_time: NaiveTime,
    /// `StartDay` and `EndDay` for a weekly session; None for a daily one.
    pub days: Option<(Weekday, Weekday)>,
    /// Zone of the times.
    pub zone: Zone,
}

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;

impl Schedule {
    /// A daily session from `start` to `end` (UTC until [`Schedule::in_zone`]).
    pub fn daily(start: NaiveTime, end: NaiveTime) -> Schedule {
        Schedule {
            start_time: start,
            end_time: end,
            days: None,
            zone: Zone::Utc,
        }
    }

    /// A weekly session from `start_day start` to `end_day end`. As in QuickFIX, when
    /// both days are equal and `end` is after `start`, the session lasts the whole week
    /// (it restarts at `start_day start`).
    pub fn weekly(
        start_day: Weekday,
        start: NaiveTime,
        end_day: Weekday,
        end: NaiveTime,
    ) -> Schedule {
        let end = if start_day == end_day && end > start {
            start
        } else {
            end
        };
        Schedule {
            start_time: start,
            end_time: end,
            days: Some((start_day, end_day)),
            zone: Zone::Utc,
        }
    }

    /// The same schedule with its times read in `zone`.
    pub fn in_zone(mut self, zone: Zone) -> Schedule {
        self.zone = zone;
        self
    }

    /// Parses a QuickFIX time of day, `HH:MM:SS`.
    pub fn parse_time(s: &str) -> Option<NaiveTime> {
        NaiveTime::parse_from_str(s.trim(), "%H:%M:%S").ok()
    }

    /// Parses a QuickFIX day name: full English name or its first two or three letters,
    /// any case (`Sunday`, `sun`, `SU`).
    pub fn parse_day(s: &str) -> Option<Weekday> {
        let s = s.trim().to_ascii_lowercase();
        if s.len() < 2 {
            return None;
        }
        const NAMES: [(&str, Weekday); 7] = [
            ("sunday", Weekday::Sun),
            ("monday", Weekday::Mon),
            ("tuesday", Weekday::Tue),
            ("wednesday", Weekday::Wed),
            ("thursday", Weekday::Thu),
            ("friday", Weekday::Fri),
            ("saturday", Weekday::Sat),
        ];
        NAMES
            .iter()
            .find(|(name, _)| name.starts_with(&s))
            .map(|&(_, d)| d)
    }

    /// True when `unix_nanos` is inside a session period.
    pub fn contains(&self, unix_nanos: u64) -> bool {
        self.period_start(unix_nanos).is_some()
    }

    /// True when both instants are inside the same session period.
    pub fn same_period(&self, a_unix_nanos: u64, b_unix_nanos: u64) -> bool {
        match (
            self.period_start(a_unix_nanos),
            self.period_start(b_unix_nanos),
        ) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// The local start of the session period containing `unix_nanos`, None when the
    /// instant is outside every period.
    pub fn period_start(&self, unix_nanos: u64) -> Option<NaiveDateTime> {
        let t = self.local(unix_nanos)?;
        let tod = t.time();
        let (s, e) = (self.start_time, self.end_time);
        match self.days {
            None => {
                let today = t.date().and_time(s);
                let yesterday = today - Duration::days(1);
                if s < e {
                    (tod >= s && tod <= e).then_some(today)
                } else if s > e {
                    if tod >= s {
                        Some(today)
                    } else if tod <= e {
                        Some(yesterday)
                    } else {
                        None
                    }
                } else if tod >= s {
                    Some(today)
                } else {
                    Some(yesterday)
                }
            }
            Some((sd, ed)) => {
                let secs = |d: Weekday, time: NaiveTime| {
                    i64::from(d.num_days_from_sunday()) * DAY
                        + i64::from(time.num_seconds_from_midnight())
                };
                // Offsets within the week (from Sunday 00:00); the sub-second part of
                // `t` is compared separately so that EndTime is inclusive to the second.
                let w = secs(t.weekday(), tod);
                let frac = tod.nanosecond() > 0;
                let start = secs(sd, s);
                let end = secs(ed, e);
                let after_start = w >= start;
                let before_end = w < end || (w == end && !frac);
                let inside = if start < end {
                    after_start && before_end
                } else if start > end {
                    after_start || before_end
                } else {
                    true
                };
                if !inside {
                    return None;
                }
                let back = if after_start {
                    w - start
                } else {
                    w - start + WEEK
                };
                let t_secs = t.with_nanosecond(0)?;
                Some(t_secs - Duration::seconds(back))
            }
        }
    }

    fn local(&self, unix_nanos: u64) -> Option<NaiveDateTime> {
        let secs = i64::try_from(unix_nanos / 1_000_000_000).ok()?;
        let nanos = (unix_nanos % 1_000_000_000) as u32;
        let utc = DateTime::from_timestamp(secs, nanos)?;
        Some(match self.zone {
            Zone::Utc => utc.naive_utc(),
            Zone::Named(tz) => tz.from_utc_datetime(&utc.naive_utc()).naive_local(),
            Zone::Local => chrono::Local
                .from_utc_datetime(&utc.naive_utc())
                .naive_local(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> u64 {
        let t = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        t.and_utc().timestamp() as u64 * 1_000_000_000
    }

    fn hms(s: &str) -> NaiveTime {
        Schedule::parse_time(s).unwrap()
    }

    #[test]
    fn daily_window_is_inclusive_and_splits_days() {
        let s = Schedule::daily(hms("08:00:00"), hms("17:00:00"));
        assert!(!s.contains(at("2026-11-20 07:59:59")));
        assert!(s.contains(at("2026-11-20 08:00:00")));
        assert!(s.contains(at("2026-11-20 17:00:00")));
        assert!(!s.contains(at("2026-11-20 17:00:01")));
        assert!(s.same_period(at("2026-11-20 08:00:00"), at("2026-11-20 16:00:00")));
        assert!(!s.same_period(at("2026-11-20 09:00:00"), at("2026-11-21 09:00:00")));
    }

    #[test]
    fn overnight_daily_window_belongs_to_the_day_it_started() {
        let s = Schedule::daily(hms("22:00:00"), hms("06:00:00"));
        assert!(s.same_period(at("2026-11-20 23:00:00"), at("2026-11-21 05:00:00")));
        assert!(!s.contains(at("2026-11-21 12:00:00")));
        assert!(!s.same_period(at("2026-11-21 05:00:00"), at("2026-11-21 22:30:00")));
    }

    #[test]
    fn weekly_window_spans_days() {
        // 2026-11-22 is a Sunday.
        let s = Schedule::weekly(Weekday::Sun, hms("17:00:00"), Weekday::Fri, hms("16:00:00"));
        assert!(!s.contains(at("2026-11-22 16:59:59")));
        assert!(s.contains(at("2026-11-22 17:00:00")));
        assert!(s.same_period(at("2026-11-22 18:00:00"), at("2026-11-27 16:00:00")));
        assert!(!s.contains(at("2026-11-27 16:00:01")));
        assert!(!s.contains(at("2026-11-28 12:00:00")));
        assert!(!s.same_period(at("2026-11-27 12:00:00"), at("2026-11-30 12:00:00")));
    }

    #[test]
    fn time_zone_moves_the_window() {
        let s = Schedule::daily(hms("09:00:00"), hms("17:00:00"))
            .in_zone(Zone::Named(chrono_tz::America::New_York));
        // 09:00 in New York in November (EST) is 14:00 UTC.
        assert!(!s.contains(at("2026-11-20 13:59:59")));
        assert!(s.contains(at("2026-11-20 14:00:00")));
        assert!(s.contains(at("2026-11-20 22:00:00")));
        assert!(!s.contains(at("2026-11-20 22:00:01")));
    }

    #[test]
    fn day_names_parse_like_quickfix() {
        assert_eq!(Schedule::parse_day("Sunday"), Some(Weekday::Sun));
        assert_eq!(Schedule::parse_day("mo"), Some(Weekday::Mon));
        assert_eq!(Schedule::parse_day("THU"), Some(Weekday::Thu));
        assert_eq!(Schedule::parse_day("x"), None);
        assert_eq!(Schedule::parse_time("25:00:00"), None);
    }
}
