//! Budget windows (BUD-1): `minute`, `N minutes`, `day`, `month` and `total`, with calendar
//! windows aligned to the workspace's time zone (a real zone database, so a day across a
//! daylight-saving change is 23 or 25 hours long).
//!
//! Decisions where the SPEC is silent:
//! - `N minutes` windows start at the zone's midnight and follow each other through the day; the
//!   last one of a day ends at the next midnight even when shorter (so `60 minutes` is the clock
//!   hour and every day starts afresh).
//! - A midnight the zone skips (a daylight-saving jump at 00:00) starts the day at the first
//!   local time that exists.
//! - `reset_at`, the time a refused client is told to retry, is the window's end plus 90 s: the
//!   seed asks for 1 to 2 minutes after the real end, so a retry at that time is never refused
//!   early by a clock that runs a little ahead.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

/// The workspace zone when none is configured (the seed aligns windows to Beijing time).
pub const DEFAULT_ZONE: Tz = chrono_tz::Asia::Shanghai;
/// How long after a window's end `reset_at` lies.
pub const RESET_MARGIN: Duration = Duration::seconds(90);

/// A budget window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    Minute,
    /// 1..=1440 minutes.
    Minutes(u32),
    Day,
    Month,
    /// Never resets.
    Total,
}

/// The window holding one instant: `[start, end)`, `end` absent for `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: DateTime<Utc>,
    pub end: Option<DateTime<Utc>>,
}

impl Span {
    /// When a refused client may retry (see [`RESET_MARGIN`]); none for `total`.
    pub fn reset_at(&self) -> Option<DateTime<Utc>> {
        self.end.map(|e| e + RESET_MARGIN)
    }
}

impl Window {
    /// The window of this kind that holds `at`, in zone `tz`.
    pub fn span(self, at: DateTime<Utc>, tz: Tz) -> Span {
        match self {
            Window::Minute => {
                let start = at.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(at);
                Span { start, end: Some(start + Duration::minutes(1)) }
            }
            Window::Minutes(n) => {
                let n = i64::from(n.clamp(1, 1440));
                let day = Window::Day.span(at, tz);
                let day_end = day.end.unwrap_or(at);
                let steps = (at - day.start).num_minutes() / n;
                let start = day.start + Duration::minutes(steps * n);
                Span { start, end: Some((start + Duration::minutes(n)).min(day_end)) }
            }
            Window::Day => {
                let date = at.with_timezone(&tz).date_naive();
                Span { start: local_midnight(date, tz), end: Some(local_midnight(next_day(date), tz)) }
            }
            Window::Month => {
                let local = at.with_timezone(&tz);
                let first =
                    NaiveDate::from_ymd_opt(local.year(), local.month(), 1).unwrap_or(local.date_naive());
                let next = if first.month() == 12 {
                    NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
                }
                .unwrap_or(first);
                Span { start: local_midnight(first, tz), end: Some(local_midnight(next, tz)) }
            }
            Window::Total => Span { start: DateTime::<Utc>::UNIX_EPOCH, end: None },
        }
    }
}

fn next_day(date: NaiveDate) -> NaiveDate {
    date.succ_opt().unwrap_or(date)
}

/// The first instant of `date` in `tz` (midnight, or the first local time after a skipped one).
fn local_midnight(date: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let midnight: NaiveDateTime = date.and_hms_opt(0, 0, 0).unwrap_or_default();
    (0..=180)
        .find_map(|m| tz.from_local_datetime(&(midnight + Duration::minutes(m))).earliest())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| midnight.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn span(w: Window, at: &str, tz: Tz) -> (String, Option<String>) {
        let s = w.span(utc(at), tz);
        (s.start.to_rfc3339(), s.end.map(|e| e.to_rfc3339()))
    }

    #[test]
    fn days_follow_the_zones_midnight() {
        // 2026-12-01 17:00 UTC is 2026-12-02 01:00 in Shanghai (UTC+8)
        assert_eq!(
            span(Window::Day, "2026-12-01T17:00:00Z", DEFAULT_ZONE),
            ("2026-12-01T16:00:00+00:00".into(), Some("2026-12-02T16:00:00+00:00".into()))
        );
        assert_eq!(
            span(Window::Day, "2026-12-01T15:59:59Z", DEFAULT_ZONE).1,
            Some("2026-12-01T16:00:00+00:00".into()),
            "one second before midnight is still the old day"
        );
    }

    #[test]
    fn daylight_saving_days_are_23_and_25_hours() {
        let ny = chrono_tz::America::New_York;
        let spring = Window::Day.span(utc("2026-03-08T12:00:00Z"), ny);
        assert_eq!(spring.end.unwrap() - spring.start, Duration::hours(23));
        let autumn = Window::Day.span(utc("2026-11-01T12:00:00Z"), ny);
        assert_eq!(autumn.end.unwrap() - autumn.start, Duration::hours(25));
        assert_eq!(autumn.start.to_rfc3339(), "2026-11-01T04:00:00+00:00", "midnight EDT");
    }

    #[test]
    fn a_skipped_midnight_starts_the_day_at_the_first_local_time() {
        // Santiago jumps from 00:00 to 01:00 on 2026-09-06
        let scl = chrono_tz::America::Santiago;
        let day = Window::Day.span(utc("2026-09-06T15:00:00Z"), scl);
        assert_eq!(day.start.with_timezone(&scl).hour(), 1);
        assert_eq!(day.end.unwrap() - day.start, Duration::hours(23));
    }

    #[test]
    fn months_end_where_the_calendar_says() {
        let (start, end) = span(Window::Month, "2028-02-29T23:00:00Z", chrono_tz::UTC);
        assert_eq!(
            (start.as_str(), end.as_deref()),
            ("2028-02-01T00:00:00+00:00", Some("2028-03-01T00:00:00+00:00"))
        );
        let dec = span(Window::Month, "2026-12-31T16:30:00Z", DEFAULT_ZONE);
        assert_eq!(
            dec,
            ("2026-12-31T16:00:00+00:00".into(), Some("2027-01-31T16:00:00+00:00".into())),
            "Jan in Shanghai"
        );
    }

    #[test]
    fn minute_and_n_minute_windows() {
        assert_eq!(
            span(Window::Minute, "2026-12-01T10:07:42.5Z", DEFAULT_ZONE),
            ("2026-12-01T10:07:00+00:00".into(), Some("2026-12-01T10:08:00+00:00".into()))
        );
        assert_eq!(
            span(Window::Minutes(15), "2026-12-01T10:07:42Z", DEFAULT_ZONE),
            ("2026-12-01T10:00:00+00:00".into(), Some("2026-12-01T10:15:00+00:00".into()))
        );
        // 7-minute windows restart at midnight: the day's last one is cut short
        let last = Window::Minutes(7).span(utc("2026-12-01T15:58:00Z"), DEFAULT_ZONE);
        assert_eq!(last.end, Some(utc("2026-12-01T16:00:00Z")));
        assert_eq!(last.end.unwrap() - last.start, Duration::minutes(1440 % 7));
    }

    #[test]
    fn total_never_resets_and_reset_at_lies_90_s_past_the_end() {
        let t = Window::Total.span(utc("2026-12-01T10:00:00Z"), DEFAULT_ZONE);
        assert_eq!((t.end, t.reset_at()), (None, None));
        let m = Window::Minute.span(utc("2026-12-01T10:00:10Z"), DEFAULT_ZONE);
        assert_eq!(m.reset_at(), Some(utc("2026-12-01T10:02:30Z")));
    }
}
