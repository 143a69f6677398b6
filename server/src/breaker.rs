//! The key circuit breaker (BUD-4): a key whose last 60 s hold at least 100 requests of which
//! 90 % or more failed (any status >= 400, SubLane's own 402/403/429 included) is blocked for
//! 30 s, then 2 min, 10 min and 12 h on later trips; the 5th trip bans it for good. Trips are kept
//! on the key's row for its whole life, so a restart neither forgives nor forgets them.
//!
//! "90 % or more": the seed says "90% 以上", and in Chinese usage 以上 counts the number itself
//! (the Civil Code, art. 1259, writes that down); where SPEC.md says "> 90 %", the seed wins.
//!
//! The window is 60 one-second buckets per key. A success touches one bucket; only a failure
//! sums the window, since only a failure can trip it. Blocked requests are neither recorded nor
//! counted: the window after a block starts empty.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use crate::{error::Result, proxy::error::GatewayError};

/// The sliding window, in seconds.
pub const WINDOW_SECS: i64 = 60;
/// Requests in the window before the failure ratio counts.
pub const MIN_REQUESTS: u32 = 100;
/// Block lengths of the 1st to 4th trip, in seconds; the 5th bans.
pub const LADDER_SECS: [i64; 4] = [30, 120, 600, 12 * 3600];
/// The trip that bans the key for good.
pub const BAN_TRIP: u32 = 5;

/// The seed's words for a block (N = seconds to wait).
fn open_message(secs: i64) -> String {
    format!("API Key 因最近 60 秒错误率过高已临时熔断，请在 {secs} 秒后重试。")
}
/// The seed's words for a ban, when this process banned the key.
const BANNED_NOW: &str = "该 API Key 因多次高错误率请求已被永久封禁，无法恢复，请删除后创建新的 API Key。";
/// The seed's words for a ban known from the database (once "synced to the gateway").
const BANNED: &str = "该 API Key 已被永久封禁，无法恢复，请删除后创建新的 API Key。";

#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    second: i64,
    total: u32,
    failed: u32,
}

#[derive(Debug)]
struct KeyState {
    buckets: [Bucket; WINDOW_SECS as usize],
    trips: u32,
    /// Unix ms; 0 when not blocked.
    blocked_until: i64,
    banned: Option<&'static str>,
}

impl KeyState {
    fn new(trips: u32, blocked_until: i64, banned: bool) -> Self {
        KeyState {
            buckets: [Bucket::default(); WINDOW_SECS as usize],
            trips,
            blocked_until,
            banned: banned.then_some(BANNED),
        }
    }

    fn window(&self, second: i64) -> (u32, u32) {
        self.buckets
            .iter()
            .filter(|b| b.second > second - WINDOW_SECS && b.second <= second)
            .fold((0, 0), |(t, f), b| (t + b.total, f + b.failed))
    }
}

/// What a trip changed, to be written to the key's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trip {
    pub key_id: i64,
    pub trips: u32,
    /// Unix ms the block ends; `None` for a ban.
    pub blocked_until: Option<i64>,
}

/// Every key's window and trips.
#[derive(Debug, Default)]
pub struct Breaker {
    keys: Mutex<HashMap<i64, KeyState>>,
    /// Whether any key was ever blocked or banned in this process: until then `check` takes no
    /// lock (the usual case costs one atomic load).
    refusing: AtomicBool,
    /// Counts recordings, to sweep idle keys now and then.
    recorded: std::sync::atomic::AtomicU64,
}

/// Every this many recordings, keys with no trip and nothing in their window are forgotten (a
/// key that is revoked or merely idle costs nothing for long).
const SWEEP_EVERY: u64 = 4096;

impl Breaker {
    /// The breaker with the trips, blocks and bans stored on the keys.
    pub async fn load(db: &SqlitePool) -> Result<Breaker> {
        let rows: Vec<(i64, i64, Option<i64>, Option<i64>)> = sqlx::query_as(
            "SELECT id, breaker_trips, breaker_blocked_until, banned_at FROM api_keys WHERE breaker_trips > 0",
        )
        .fetch_all(db)
        .await?;
        let keys: HashMap<i64, KeyState> = rows
            .into_iter()
            .map(|(id, trips, until, banned)| {
                (id, KeyState::new(u32::try_from(trips).unwrap_or(0), until.unwrap_or(0), banned.is_some()))
            })
            .collect();
        let refusing = AtomicBool::new(!keys.is_empty());
        Ok(Breaker { keys: Mutex::new(keys), refusing, recorded: Default::default() })
    }

    /// Refuses a blocked (429 `api_key_circuit_open`, with when to retry) or banned (403
    /// `api_key_permanently_banned`) key. Called before anything else is done for the request.
    pub fn check(&self, key_id: i64, now_ms: i64) -> Result<(), GatewayError> {
        if !self.refusing.load(Ordering::Acquire) {
            return Ok(());
        }
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let Some(k) = keys.get(&key_id) else { return Ok(()) };
        if let Some(message) = k.banned {
            return Err(GatewayError::new(
                axum::http::StatusCode::FORBIDDEN,
                "api_key_permanently_banned",
                message,
            ));
        }
        if k.blocked_until > now_ms {
            let secs = (k.blocked_until - now_ms + 999) / 1000;
            let until = DateTime::<Utc>::from_timestamp_millis(k.blocked_until).unwrap_or_default();
            return Err(GatewayError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "api_key_circuit_open",
                open_message(secs),
            )
            .retry_after(u64::try_from(secs).unwrap_or(1))
            .holds_for_the_key()
            .with_field("retry_after", serde_json::json!(secs))
            .with_field(
                "blocked_until",
                serde_json::json!(until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            ));
        }
        Ok(())
    }

    /// Counts a finished request of the key; answers the trip when this one tripped it.
    pub fn record(&self, key_id: i64, failed: bool, now_ms: i64) -> Option<Trip> {
        let second = now_ms.div_euclid(1000);
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if self.recorded.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            keys.retain(|_, k| {
                k.trips > 0 || k.buckets.iter().any(|b| b.total > 0 && b.second > second - WINDOW_SECS)
            });
        }
        let k = keys.entry(key_id).or_insert_with(|| KeyState::new(0, 0, false));
        if k.banned.is_some() || k.blocked_until > now_ms {
            return None;
        }
        let b = &mut k.buckets[second.rem_euclid(WINDOW_SECS) as usize];
        if b.second != second {
            *b = Bucket { second, total: 0, failed: 0 };
        }
        b.total += 1;
        b.failed += u32::from(failed);
        if !failed {
            return None;
        }
        let (total, bad) = k.window(second);
        // >= 90 %: bad / total >= 9 / 10, in integers.
        if total < MIN_REQUESTS || bad * 10 < total * 9 {
            return None;
        }
        k.trips += 1;
        k.buckets = [Bucket::default(); WINDOW_SECS as usize];
        self.refusing.store(true, Ordering::Release);
        if k.trips >= BAN_TRIP {
            k.banned = Some(BANNED_NOW);
            return Some(Trip { key_id, trips: k.trips, blocked_until: None });
        }
        // Ends on a whole second, so `blocked_until` in the body, Retry-After and the real end agree.
        let block = LADDER_SECS[(k.trips - 1) as usize] * 1000;
        k.blocked_until = (now_ms + block + 999).div_euclid(1000) * 1000;
        Some(Trip { key_id, trips: k.trips, blocked_until: Some(k.blocked_until) })
    }
}

/// Writes a trip to the key's row (the ban with its time), so it outlives the process. An older
/// trip landing late never undoes a newer one (count, block end and ban only move forward).
pub async fn store(db: &SqlitePool, trip: Trip, now_ms: i64) -> Result<()> {
    sqlx::query(
        "UPDATE api_keys SET breaker_trips = MAX(breaker_trips, ?1),
                breaker_blocked_until = CASE WHEN ?1 >= breaker_trips THEN ?2 ELSE breaker_blocked_until END,
                banned_at = CASE WHEN ?3 THEN COALESCE(banned_at, ?4) ELSE banned_at END
         WHERE id = ?5",
    )
    .bind(i64::from(trip.trips))
    .bind(trip.blocked_until)
    .bind(trip.blocked_until.is_none())
    .bind(now_ms / 1000)
    .bind(trip.key_id)
    .execute(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_900_000_000_000;

    /// `n` requests of which `bad` failed, spread over the same second.
    fn feed(b: &Breaker, n: u32, bad: u32, at: i64) -> Option<Trip> {
        let mut trip = None;
        for i in 0..n {
            trip = trip.or(b.record(7, i < bad, at));
        }
        trip
    }

    #[test]
    fn trips_only_past_100_requests_and_90_percent_failed() {
        let b = Breaker::default();
        // 99 requests, all failed: too few
        assert_eq!(feed(&b, 99, 99, T0), None);
        // the 100th: 99 of 100 failed (99 %) trips when it is a failure
        let trip = b.record(7, true, T0).expect("tripped");
        assert_eq!((trip.trips, trip.blocked_until), (1, Some(T0 + 30_000)));

        // 89 % does not trip; exactly 90 % (90 of 100) does
        let b = Breaker::default();
        assert_eq!(feed(&b, 11, 0, T0), None);
        assert_eq!(feed(&b, 89, 89, T0), None, "89 of 100 is under 90 %");
        let b = Breaker::default();
        assert_eq!(feed(&b, 10, 0, T0), None);
        assert_eq!(feed(&b, 89, 89, T0), None, "99 requests are too few");
        assert!(b.record(7, true, T0).is_some(), "90 of 100 is 90 %");
    }

    #[test]
    fn the_window_slides_over_60_seconds() {
        let b = Breaker::default();
        assert_eq!(feed(&b, 60, 60, T0), None);
        // 60 s later those have left the window
        assert_eq!(feed(&b, 60, 60, T0 + 60_000), None);
        assert_eq!(
            feed(&b, 40, 40, T0 + 61_000),
            Some(Trip { key_id: 7, trips: 1, blocked_until: Some(T0 + 91_000) })
        );
    }

    #[test]
    fn blocks_lengthen_and_the_fifth_trip_bans() {
        let b = Breaker::default();
        let mut now = T0;
        for (i, secs) in LADDER_SECS.iter().enumerate() {
            let trip = feed(&b, 100, 100, now).expect("trips");
            assert_eq!(trip.trips, i as u32 + 1);
            assert_eq!(trip.blocked_until, Some(now + secs * 1000));
            let e = b.check(7, now + secs * 1000 - 1).unwrap_err();
            assert_eq!((e.status.as_u16(), e.code), (429, "api_key_circuit_open"));
            assert_eq!(e.retry_after, Some(1));
            assert!(b.check(7, now + secs * 1000).is_ok(), "the block ends on time");
            assert_eq!(b.record(7, true, now + 1), None, "blocked requests are not counted");
            now += secs * 1000;
        }
        let ban = feed(&b, 100, 100, now).expect("fifth trip");
        assert_eq!((ban.trips, ban.blocked_until), (5, None));
        let e = b.check(7, now + 365 * 86_400_000).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (403, "api_key_permanently_banned"));
        assert_eq!(e.message, BANNED_NOW);
    }

    #[test]
    fn idle_keys_are_forgotten_and_tripped_ones_kept() {
        let b = Breaker::default();
        feed(&b, 100, 100, T0); // key 7 trips
        b.record(8, false, T0);
        for i in 0..SWEEP_EVERY {
            b.record(9, false, T0 + 120_000 + i as i64);
        }
        let keys = b.keys.lock().unwrap();
        assert!(keys.contains_key(&7), "trips are kept");
        assert!(!keys.contains_key(&8), "an idle key with no trip is gone");
        assert!(keys.contains_key(&9));
    }

    #[test]
    fn a_block_ends_on_a_whole_second() {
        let b = Breaker::default();
        let trip = feed(&b, 100, 100, T0 + 400).expect("trips");
        assert_eq!(trip.blocked_until, Some(T0 + 31_000));
        let e = b.check(7, T0 + 400).unwrap_err();
        assert_eq!(e.retry_after, Some(31), "Retry-After reaches the end, never short of it");
    }

    #[test]
    fn a_blocked_answer_says_when() {
        let b = Breaker::default();
        feed(&b, 100, 100, T0);
        let e = b.check(7, T0 + 10_400).unwrap_err();
        assert_eq!(e.retry_after, Some(20));
        assert_eq!(e.message, "API Key 因最近 60 秒错误率过高已临时熔断，请在 20 秒后重试。");
        let fields: serde_json::Map<String, serde_json::Value> = e.fields.iter().cloned().collect();
        assert_eq!(fields["retry_after"], 20);
        assert_eq!(fields["blocked_until"], "2030-03-17T17:47:10Z");
        assert!(b.check(8, T0).is_ok(), "other keys are untouched");
    }
}
