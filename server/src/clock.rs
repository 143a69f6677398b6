//! Wall-clock time for stored deadlines (session expiry, later cooldowns and retention).
//!
//! Everything that stores a point in time reads it through [`Clock`], so tests move time with
//! [`FakeClock::advance`] instead of sleeping. In-memory timers use `tokio::time` instead and are
//! tested with paused time.

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use chrono::{DateTime, TimeDelta, Utc};

/// A source of the current UTC time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> DateTime<Utc>;

    /// The current time in unix milliseconds, as `now().timestamp_millis()` gives it. Most of
    /// the request path wants only this, and the real clock gives it without working out the
    /// calendar date that `now` builds (a visible share of reading the time, issue 15).
    fn unix_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }
}

/// Shared handle to the process clock.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        #[allow(clippy::disallowed_methods)] // the one place allowed to read the system clock
        Utc::now()
    }

    fn unix_ms(&self) -> i64 {
        #[allow(clippy::disallowed_methods)] // the same reading as `now`, in milliseconds
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        match since.map(|d| i64::try_from(d.as_millis())) {
            Ok(Ok(ms)) => ms,
            // before 1970 or past the year 292 million: rare enough for the long way
            _ => self.now().timestamp_millis(),
        }
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct FakeClock {
    micros: Arc<AtomicI64>,
}

impl FakeClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { micros: Arc::new(AtomicI64::new(start.timestamp_micros())) }
    }

    pub fn advance(&self, by: TimeDelta) {
        let step = by.num_microseconds().unwrap_or(i64::MAX);
        self.micros.fetch_add(step, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.micros.load(Ordering::SeqCst)).unwrap_or_default()
    }
}

/// Unix seconds as stored in the database.
pub fn to_unix(at: DateTime<Utc>) -> i64 {
    at.timestamp()
}

/// A stored unix-seconds value back as a UTC time (out-of-range values clamp to the epoch).
pub fn from_unix(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_advanced_and_clones_share_it() {
        let start = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let clock = FakeClock::new(start);
        let other = clock.clone();
        assert_eq!(clock.now(), start);
        other.advance(TimeDelta::seconds(90));
        assert_eq!(clock.now(), start + TimeDelta::seconds(90));
    }

    /// The real clock's milliseconds are `now`'s, read between two readings of `now`. The wall
    /// clock may be set back while the test runs (NTP): a reading that straddles that says
    /// nothing and is skipped, and most must not.
    #[test]
    fn the_real_clock_in_milliseconds_is_now_in_milliseconds() {
        let clock = SystemClock;
        let mut checked = 0;
        for _ in 0..1000 {
            let before = clock.now().timestamp_millis();
            let ms = clock.unix_ms();
            let after = clock.now().timestamp_millis();
            if after < before {
                continue;
            }
            assert!(before <= ms && ms <= after, "{before} <= {ms} <= {after}");
            checked += 1;
        }
        assert!(checked >= 900, "the clock went back in {} of 1000 readings", 1000 - checked);
    }
}
