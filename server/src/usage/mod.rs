//! Daily usage summaries (BEY-1): what each member, key, pool, account and model used per day,
//! kept 90 days while the records they come from are pruned after 7.
//!
//! The record writer folds every batch into these rows inside the transaction that inserts the
//! batch (`add`), so a summary always equals the records it counted, a crash included. Days are
//! calendar days of the workspace time zone, the one budget windows follow.

pub mod query;

use std::collections::BTreeMap;

use app::model::UsageTotals;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use chrono_tz::Tz;

use crate::records::{NewRecord, Outcome};

/// How many days of summaries are kept, today included.
pub const KEPT_DAYS: i64 = 90;
/// Rows per upsert statement (18 parameters each).
const UPSERT_ROWS: usize = 128;

/// The calendar day of `at_ms` in `zone`.
pub fn day_of(at_ms: i64, zone: Tz) -> NaiveDate {
    DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_default().with_timezone(&zone).date_naive()
}

/// The key of one summary row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    day: NaiveDate,
    member_id: i64,
    key_id: i64,
    pool_id: i64,
    account_id: i64,
    model: String,
}

/// The model a record is summed under. A call that never reached an account is summed under
/// [`NOT_ROUTED`]: its model is only what the client claimed (possibly no model at all, or a new
/// made-up one per call), and 90 days of rows per such name would let a client grow the table
/// and drown the report.
fn summed_model(r: &NewRecord) -> String {
    if r.account_id.is_some() { r.model.clone() } else { NOT_ROUTED.to_owned() }
}

/// The model of the summaries of calls that reached no account.
pub const NOT_ROUTED: &str = "(not routed)";
/// Most model names summed by name in one day; calls of further names that day are summed as
/// [`OTHER_MODELS`]. A routed call's model is still the client's text (an upstream may refuse
/// it), so this keeps a day's rows bounded whatever clients send.
pub const MODELS_PER_DAY: usize = 500;
/// The model of the summaries beyond [`MODELS_PER_DAY`].
pub const OTHER_MODELS: &str = "(other models)";

/// The model names each recent day already has rows for, as the record writer knows them (read
/// from the table the first time a day comes up, so a restart keeps the count).
#[derive(Debug, Default)]
pub struct Names {
    days: BTreeMap<NaiveDate, std::collections::HashSet<String>>,
}

impl Names {
    /// The name `model` is summed under on `day`.
    async fn name(
        &mut self,
        conn: &mut sqlx::SqliteConnection,
        day: NaiveDate,
        model: String,
    ) -> sqlx::Result<String> {
        if model == NOT_ROUTED {
            return Ok(model);
        }
        // Records arrive for today and, around midnight, yesterday: older days are done (and
        // read again should one come back).
        if self.days.len() >= 2 && !self.days.contains_key(&day) {
            self.days.pop_first();
        }
        let names = match self.days.entry(day) {
            std::collections::btree_map::Entry::Occupied(known) => known.into_mut(),
            std::collections::btree_map::Entry::Vacant(new) => {
                let known: Vec<String> =
                    sqlx::query_scalar("SELECT DISTINCT model FROM usage_daily WHERE day = ?")
                        .bind(day.format("%Y-%m-%d").to_string())
                        .fetch_all(&mut *conn)
                        .await?;
                new.insert(known.into_iter().collect())
            }
        };
        if names.contains(&model) {
            return Ok(model);
        }
        if names.len() >= MODELS_PER_DAY {
            return Ok(OTHER_MODELS.to_owned());
        }
        names.insert(model.clone());
        Ok(model)
    }
}

/// Adds one record to a summary row's counts.
fn count(c: &mut UsageTotals, r: &NewRecord) {
    c.requests += 1;
    *match r.outcome {
        Outcome::Success => &mut c.succeeded,
        Outcome::Incomplete => &mut c.incomplete,
        Outcome::Error => &mut c.errors,
        Outcome::Cancelled => &mut c.cancelled,
        Outcome::Rejected => &mut c.rejected,
    } += 1;
    c.input_tokens += r.usage.input.unwrap_or(0);
    c.output_tokens += r.usage.output.unwrap_or(0);
    c.cached_tokens += r.usage.cached.unwrap_or(0);
    c.duration_ms_sum += r.duration_ms;
    if let Some(ms) = r.first_output_ms {
        c.first_output_ms_sum += ms;
        c.first_output_count += 1;
    }
}

/// Folds `batch` into the daily summaries, on the connection of the transaction that writes it:
/// one row per day, member, key, pool, account and model, summed in memory first so a batch of
/// hundreds of records costs a few upserts.
pub async fn add(
    conn: &mut sqlx::SqliteConnection,
    batch: &[NewRecord],
    zone: Tz,
    names: &mut Names,
) -> sqlx::Result<()> {
    let mut rows: BTreeMap<Key, UsageTotals> = BTreeMap::new();
    // The day of the last record's second: a batch's records mostly share one, and a zone's day
    // changes only on a whole second (offsets are whole seconds), so its conversion is made once.
    let mut last: Option<(i64, NaiveDate)> = None;
    for r in batch {
        let second = r.started_at_ms.div_euclid(1000);
        let day = match last {
            Some((s, day)) if s == second => day,
            _ => last.insert((second, day_of(r.started_at_ms, zone))).1,
        };
        let key = Key {
            day,
            member_id: r.member_id,
            key_id: r.key_id.unwrap_or(0),
            pool_id: r.pool_id.unwrap_or(0),
            account_id: r.account_id.unwrap_or(0),
            model: names.name(&mut *conn, day, summed_model(r)).await?,
        };
        count(rows.entry(key).or_default(), r);
    }
    let rows: Vec<(Key, UsageTotals)> = rows.into_iter().collect();
    for chunk in crate::db::statement_sized(&rows, UPSERT_ROWS) {
        let mut upsert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO usage_daily (day, member_id, key_id, pool_id, account_id, model, requests, succeeded,
                incomplete, errors, cancelled, rejected, input_tokens, output_tokens, cached_tokens,
                duration_ms_sum, first_output_ms_sum, first_output_count) ",
        );
        upsert.push_values(chunk, |mut row, (k, c)| {
            row.push_bind(k.day.format("%Y-%m-%d").to_string())
                .push_bind(k.member_id)
                .push_bind(k.key_id)
                .push_bind(k.pool_id)
                .push_bind(k.account_id)
                .push_bind(&k.model)
                .push_bind(c.requests)
                .push_bind(c.succeeded)
                .push_bind(c.incomplete)
                .push_bind(c.errors)
                .push_bind(c.cancelled)
                .push_bind(c.rejected)
                .push_bind(c.input_tokens)
                .push_bind(c.output_tokens)
                .push_bind(c.cached_tokens)
                .push_bind(c.duration_ms_sum)
                .push_bind(c.first_output_ms_sum)
                .push_bind(c.first_output_count);
        });
        // `excluded` is the row that did not go in; the same clause works on PostgreSQL.
        upsert.push(
            " ON CONFLICT (day, member_id, key_id, pool_id, account_id, model) DO UPDATE SET
                requests = usage_daily.requests + excluded.requests,
                succeeded = usage_daily.succeeded + excluded.succeeded,
                incomplete = usage_daily.incomplete + excluded.incomplete,
                errors = usage_daily.errors + excluded.errors,
                cancelled = usage_daily.cancelled + excluded.cancelled,
                rejected = usage_daily.rejected + excluded.rejected,
                input_tokens = usage_daily.input_tokens + excluded.input_tokens,
                output_tokens = usage_daily.output_tokens + excluded.output_tokens,
                cached_tokens = usage_daily.cached_tokens + excluded.cached_tokens,
                duration_ms_sum = usage_daily.duration_ms_sum + excluded.duration_ms_sum,
                first_output_ms_sum = usage_daily.first_output_ms_sum + excluded.first_output_ms_sum,
                first_output_count = usage_daily.first_output_count + excluded.first_output_count",
        );
        upsert.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// The first day still kept on `today`: [`KEPT_DAYS`] days, today included.
pub fn first_kept_day(today: NaiveDate) -> NaiveDate {
    today - Duration::days(KEPT_DAYS - 1)
}

/// Deletes the summaries of days before the 90 kept on the day of `now_ms`.
pub async fn prune(conn: &mut sqlx::SqliteConnection, now_ms: i64, zone: Tz) -> sqlx::Result<u64> {
    let first = first_kept_day(day_of(now_ms, zone));
    let done = sqlx::query("DELETE FROM usage_daily WHERE day < ?")
        .bind(first.format("%Y-%m-%d").to_string())
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use chrono::{DateTime, TimeDelta};
    use proptest::prelude::*;
    use sqlx::{Row as _, SqlitePool};

    use super::*;
    use crate::{
        clock::{Clock, FakeClock},
        records::{Retention, Usage, spawn_writer},
        test_support::{open_db, record},
    };

    const SHANGHAI: Tz = chrono_tz::Asia::Shanghai;

    /// Writes `batches` through the real writer at `clock`'s time, and waits for it.
    async fn write(db: &SqlitePool, clock: &FakeClock, batches: Vec<Vec<NewRecord>>) {
        let retention = Retention { max_age_ms: 7 * 24 * 3_600_000, max_rows: 1_000_000 };
        for batch in batches {
            let (sink, task) =
                spawn_writer(db.clone(), Arc::new(clock.clone()), retention, SHANGHAI, Default::default());
            for r in batch {
                sink.send(r).await;
            }
            drop(sink);
            task.await.unwrap();
        }
    }

    /// Day, member, key, pool, account and model.
    type RowKey = (String, i64, i64, i64, i64, String);
    type Row = (String, i64, i64, i64, i64, String, [i64; 12]);

    async fn summaries(db: &SqlitePool) -> Vec<Row> {
        let rows = sqlx::query(
            "SELECT day, member_id, key_id, pool_id, account_id, model, requests, succeeded, incomplete,
                    errors, cancelled, rejected, input_tokens, output_tokens, cached_tokens,
                    duration_ms_sum, first_output_ms_sum, first_output_count
             FROM usage_daily ORDER BY day, member_id, key_id, pool_id, account_id, model",
        )
        .fetch_all(db)
        .await
        .unwrap();
        rows.iter()
            .map(|r| {
                let counts: [i64; 12] = std::array::from_fn(|i| r.get(6 + i));
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), counts)
            })
            .collect()
    }

    /// The same summaries, worked out here from the stored records themselves.
    async fn from_records(db: &SqlitePool) -> Vec<Row> {
        let records = sqlx::query(
            "SELECT member_id, key_id, pool_id, account_id, model, started_at_ms, duration_ms,
                    first_output_ms, outcome, input_tokens, output_tokens, cached_tokens
             FROM request_records",
        )
        .fetch_all(db)
        .await
        .unwrap();
        let mut sums: BTreeMap<RowKey, [i64; 12]> = BTreeMap::new();
        for r in records {
            let id = |i: usize| r.get::<Option<i64>, _>(i).unwrap_or(0);
            let day = day_of(r.get(5), SHANGHAI).format("%Y-%m-%d").to_string();
            let model = if id(3) == 0 { NOT_ROUTED.to_owned() } else { r.get(4) };
            let s = sums.entry((day, r.get(0), id(1), id(2), id(3), model)).or_default();
            s[0] += 1;
            let outcomes = ["success", "incomplete", "error", "cancelled", "rejected"];
            let outcome: String = r.get(8);
            s[1 + outcomes.iter().position(|o| *o == outcome).unwrap()] += 1;
            s[6] += id(9);
            s[7] += id(10);
            s[8] += id(11);
            s[9] += r.get::<i64, _>(6);
            s[10] += id(7);
            s[11] += i64::from(r.get::<Option<i64>, _>(7).is_some());
        }
        sums.into_iter().map(|((d, m, k, p, a, model), s)| (d, m, k, p, a, model, s)).collect()
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            Just(Outcome::Success),
            Just(Outcome::Incomplete),
            Just(Outcome::Error),
            Just(Outcome::Cancelled),
            Just(Outcome::Rejected)
        ]
    }

    /// Random traffic over three days: who, which model, when (minutes across local midnights),
    /// how it ended and what it used, absent ids and unknown usage included.
    fn traffic() -> impl Strategy<Value = Vec<Vec<NewRecord>>> {
        let one = (
            (
                1i64..4,
                proptest::option::of(1i64..4),
                proptest::option::of(1i64..3),
                proptest::option::of(1i64..3),
            ),
            (0usize..3, 0i64..3 * 24 * 60, outcome(), 0i64..5_000, proptest::option::of(0i64..3_000)),
            (
                proptest::option::of(0i64..10_000),
                proptest::option::of(0i64..10_000),
                proptest::option::of(0i64..5_000),
            ),
        );
        proptest::collection::vec(proptest::collection::vec(one, 0..40), 1..5).prop_map(|batches| {
            let base = DateTime::parse_from_rfc3339("2026-11-27T00:00:00Z").unwrap().timestamp_millis();
            let mut n = 0;
            batches
                .into_iter()
                .map(|batch| {
                    batch
                        .into_iter()
                        .map(
                            |(
                                (member, key, pool, account),
                                (model, minute, outcome, duration, first),
                                (i, o, c),
                            )| {
                                n += 1;
                                NewRecord {
                                    member_id: member,
                                    key_id: key,
                                    pool_id: pool,
                                    account_id: account,
                                    model: ["gpt-5.1-codex", "claude-sonnet-4-5", "gemini-3.1-pro"][model]
                                        .into(),
                                    outcome,
                                    duration_ms: duration,
                                    first_output_ms: first,
                                    usage: Usage { input: i, output: o, cached: c },
                                    ..record(n as i64, base + minute * 60_000)
                                }
                            },
                        )
                        .collect()
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// BEY-1: whatever the traffic and however it is batched, the summaries equal the records.
        #[test]
        fn summaries_equal_the_records_they_came_from(batches in traffic()) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (_dir, db, _lock) = open_db().await;
                let clock = FakeClock::new(DateTime::from_timestamp_millis(
                    DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z").unwrap().timestamp_millis(),
                ).unwrap());
                write(&db, &clock, batches).await;
                assert_eq!(summaries(&db).await, from_records(&db).await);
            });
        }
    }

    /// A client naming a new model on every call cannot grow a day's rows without bound, across
    /// writer restarts too; calls that reached no account are summed as one.
    #[tokio::test]
    async fn a_days_model_names_are_bounded() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::parse_from_rfc3339("2026-11-30T04:00:00Z").unwrap().into());
        let at = clock.unix_ms();
        let named = |n: usize| NewRecord { model: format!("made-up-{n:04}"), ..record(n as i64, at) };
        let first: Vec<NewRecord> = (0..MODELS_PER_DAY - 5).map(named).collect();
        let second: Vec<NewRecord> = (MODELS_PER_DAY - 5..MODELS_PER_DAY + 10).map(named).collect();
        let unrouted = vec![
            NewRecord { account_id: None, model: "x".into(), ..record(9_001, at) },
            NewRecord { account_id: None, model: "y".into(), ..record(9_002, at) },
        ];
        // three writers, as after restarts
        write(&db, &clock, vec![first, second, unrouted]).await;
        let models: Vec<(String, i64)> =
            sqlx::query_as("SELECT model, SUM(requests) FROM usage_daily GROUP BY model")
                .fetch_all(&db)
                .await
                .unwrap();
        assert_eq!(models.len(), MODELS_PER_DAY + 2, "500 names, the others, and the unrouted");
        let count = |m: &str| models.iter().find(|(n, _)| n == m).map(|(_, c)| *c);
        assert_eq!(count(OTHER_MODELS), Some(10));
        assert_eq!(count(NOT_ROUTED), Some(2));
        assert_eq!(count("made-up-0499"), Some(1));
        assert_eq!(count("made-up-0500"), None);
    }

    #[tokio::test]
    async fn days_follow_the_workspace_time_zone() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z").unwrap().into());
        // Shanghai is UTC+8: its 29 November ends at 16:00 UTC on the 29th.
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis();
        let batch = vec![
            record(1, at("2026-11-28T15:59:59.999Z")),
            record(2, at("2026-11-28T16:00:00Z")),
            record(3, at("2026-11-29T15:59:59.999Z")),
            record(4, at("2026-11-29T16:00:00Z")),
        ];
        write(&db, &clock, vec![batch]).await;
        let days: Vec<(String, i64)> = sqlx::query_as("SELECT day, requests FROM usage_daily ORDER BY day")
            .fetch_all(&db)
            .await
            .unwrap();
        assert_eq!(days, vec![("2026-11-28".into(), 1), ("2026-11-29".into(), 2), ("2026-11-30".into(), 1)]);
    }

    #[tokio::test]
    async fn summaries_outlive_records_and_are_kept_ninety_days() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::parse_from_rfc3339("2026-09-01T04:00:00Z").unwrap().into());
        let first = clock.unix_ms();
        write(&db, &clock, vec![vec![record(1, first)]]).await;

        // 10 days on, the record is pruned (7 days) and its summary is still there.
        clock.advance(TimeDelta::days(10));
        write(&db, &clock, vec![vec![record(2, clock.unix_ms())]]).await;
        let records: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM request_records").fetch_one(&db).await.unwrap();
        assert_eq!(records, 1);
        let days = || async {
            sqlx::query_scalar::<_, String>("SELECT day FROM usage_daily ORDER BY day")
                .fetch_all(&db)
                .await
                .unwrap()
        };
        assert_eq!(days().await, vec!["2026-09-01", "2026-09-11"]);

        // On the 90th day (1 September counted as the first), it is still kept; on the 91st not.
        let target: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-11-29T15:59:00Z").unwrap().into();
        clock.advance(target - clock.now());
        write(&db, &clock, vec![vec![record(3, clock.unix_ms())]]).await;
        assert_eq!(days().await, vec!["2026-09-01", "2026-09-11", "2026-11-29"]);
        clock.advance(TimeDelta::minutes(1));
        write(&db, &clock, vec![vec![record(4, clock.unix_ms())]]).await;
        assert_eq!(days().await, vec!["2026-09-11", "2026-11-29", "2026-11-30"]);
    }
}
