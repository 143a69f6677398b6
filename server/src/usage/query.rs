//! Reading the daily summaries for the Usage page and its CSV (BEY-1). A personal view is
//! filtered by the signed-in member in SQL, whatever the filter says, and never names accounts
//! (REC-3); an admin may narrow by member, key, pool, account and model.

use std::collections::BTreeMap;

use app::model::{
    AccountChoice, KeyChoice, MemberChoice, PoolChoice, USAGE_PERIODS, UsageByModel, UsageChoices, UsageDay,
    UsageFilter, UsageReport, UsageRow, UsageTotals,
};
use chrono::{Duration, NaiveDate};
use chrono_tz::Tz;
use sqlx::{FromRow, SqlitePool};

use super::{day_of, first_kept_day};
use crate::{
    error::{Error, Result},
    records::query::Scope,
    validate,
};

/// Most table rows (days × models) one report holds; beyond, the oldest are left out.
pub const MAX_ROWS: i64 = 10_000;
/// Most entries in one filter list.
const MAX_CHOICES: i64 = 200;
/// The Usage page shows this many models by name; the rest are summed as one.
pub const CHART_MODELS: usize = 12;
/// The name of the sum of the models beyond [`CHART_MODELS`].
pub const OTHER_MODELS: &str = "(other models)";

#[derive(FromRow)]
struct Summed {
    day: String,
    model: String,
    requests: i64,
    succeeded: i64,
    incomplete: i64,
    errors: i64,
    cancelled: i64,
    rejected: i64,
    input_tokens: i64,
    output_tokens: i64,
    cached_tokens: i64,
    duration_ms_sum: i64,
    first_output_ms_sum: i64,
    first_output_count: i64,
}

impl Summed {
    fn totals(&self) -> UsageTotals {
        UsageTotals {
            requests: self.requests,
            succeeded: self.succeeded,
            incomplete: self.incomplete,
            errors: self.errors,
            cancelled: self.cancelled,
            rejected: self.rejected,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_tokens: self.cached_tokens,
            duration_ms_sum: self.duration_ms_sum,
            first_output_ms_sum: self.first_output_ms_sum,
            first_output_count: self.first_output_count,
        }
    }
}

fn text(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// The report of `filter`'s period, ending on the day of `now_ms` in `zone`. A period other than
/// 7, 30 or 90 days is refused by name.
pub async fn report(
    db: &SqlitePool,
    zone: Tz,
    now_ms: i64,
    scope: Scope,
    filter: &UsageFilter,
) -> Result<UsageReport> {
    if let Some(days) = filter.days.filter(|d| !USAGE_PERIODS.contains(d)) {
        return Err(Error::BadRequest(format!("days must be 7, 30 or 90, not {days}")));
    }
    let days = filter.period();
    let today = day_of(now_ms, zone);
    let first = today - Duration::days(i64::from(days) - 1);
    let (member, account) = match scope {
        Scope::Member(id) => (Some(id), None),
        Scope::Admin => (filter.user_id, filter.account_id),
    };
    // A NULL bind leaves its column unfiltered.
    let rows: Vec<Summed> = sqlx::query_as(&format!(
        "SELECT day, model, SUM(requests) AS requests, SUM(succeeded) AS succeeded,
                SUM(incomplete) AS incomplete, SUM(errors) AS errors, SUM(cancelled) AS cancelled,
                SUM(rejected) AS rejected, SUM(input_tokens) AS input_tokens,
                SUM(output_tokens) AS output_tokens, SUM(cached_tokens) AS cached_tokens,
                SUM(duration_ms_sum) AS duration_ms_sum, SUM(first_output_ms_sum) AS first_output_ms_sum,
                SUM(first_output_count) AS first_output_count
         FROM usage_daily
         WHERE day >= ? AND day <= ?
           AND member_id = COALESCE(?, member_id) AND key_id = COALESCE(?, key_id)
           AND pool_id = COALESCE(?, pool_id) AND account_id = COALESCE(?, account_id)
           AND model = COALESCE(?, model)
         GROUP BY day, model
         ORDER BY day DESC, model
         LIMIT {MAX_ROWS}"
    ))
    .bind(text(first))
    .bind(text(today))
    .bind(member)
    .bind(filter.key_id)
    .bind(filter.pool_id)
    .bind(account)
    .bind(filter.model.as_deref())
    .fetch_all(db)
    .await?;

    let mut by_day: BTreeMap<&str, UsageTotals> = BTreeMap::new();
    let mut by_model: BTreeMap<&str, UsageTotals> = BTreeMap::new();
    let mut totals = UsageTotals::default();
    for r in &rows {
        let t = r.totals();
        by_day.entry(&r.day).or_default().add(&t);
        by_model.entry(&r.model).or_default().add(&t);
        totals.add(&t);
    }
    let series = (0..days)
        .map(|n| {
            let day = text(first + Duration::days(i64::from(n)));
            let totals = by_day.get(day.as_str()).copied().unwrap_or_default();
            UsageDay { day, totals }
        })
        .collect();
    let mut models: Vec<UsageByModel> = by_model
        .into_iter()
        .map(|(model, totals)| UsageByModel { model: model.to_owned(), totals })
        .collect();
    models.sort_by(|a, b| b.totals.requests.cmp(&a.totals.requests).then_with(|| a.model.cmp(&b.model)));
    if models.len() > CHART_MODELS {
        let mut other = UsageTotals::default();
        for m in models.drain(CHART_MODELS - 1..) {
            other.add(&m.totals);
        }
        models.push(UsageByModel { model: OTHER_MODELS.to_owned(), totals: other });
    }
    let choices = choices(db, zone, now_ms, scope).await?;
    Ok(UsageReport {
        zone: zone.name().to_owned(),
        days,
        series,
        by_model: models,
        rows: rows
            .iter()
            .map(|r| UsageRow { day: r.day.clone(), model: r.model.clone(), totals: r.totals() })
            .collect(),
        totals,
        choices,
    })
}

/// Who and what appears in the kept summaries: the member's own models, keys and pools, or for
/// admins everyone's, with members and accounts. Deleted ones keep a name that says so.
async fn choices(db: &SqlitePool, zone: Tz, now_ms: i64, scope: Scope) -> Result<UsageChoices> {
    let first = text(first_kept_day(day_of(now_ms, zone)));
    let member = match scope {
        Scope::Member(id) => Some(id),
        Scope::Admin => None,
    };
    let kept = "FROM usage_daily u WHERE u.day >= ? AND u.member_id = COALESCE(?, u.member_id)";
    let models: Vec<String> =
        sqlx::query_scalar(&format!("SELECT DISTINCT u.model {kept} ORDER BY u.model LIMIT {MAX_CHOICES}"))
            .bind(&first)
            .bind(member)
            .fetch_all(db)
            .await?;
    let keys: Vec<(i64, String, Option<i64>)> = sqlx::query_as(&format!(
        "SELECT k.id, k.name, k.revoked_at FROM api_keys k
         WHERE k.id IN (SELECT DISTINCT u.key_id {kept}) ORDER BY k.name, k.id LIMIT {MAX_CHOICES}"
    ))
    .bind(&first)
    .bind(member)
    .fetch_all(db)
    .await?;
    let pools: Vec<(i64, String)> = sqlx::query_as(&format!(
        "SELECT p.id, p.name FROM pools p
         WHERE p.id IN (SELECT DISTINCT u.pool_id {kept}) ORDER BY p.name, p.id LIMIT {MAX_CHOICES}"
    ))
    .bind(&first)
    .bind(member)
    .fetch_all(db)
    .await?;
    let (members, accounts) = if matches!(scope, Scope::Admin) {
        let members: Vec<(i64, String)> = sqlx::query_as(&format!(
            "SELECT m.id, m.username FROM members m
             WHERE m.id IN (SELECT DISTINCT u.member_id {kept}) ORDER BY m.username LIMIT {MAX_CHOICES}"
        ))
        .bind(&first)
        .bind(member)
        .fetch_all(db)
        .await?;
        let accounts: Vec<(i64, String, Option<i64>)> = sqlx::query_as(&format!(
            "SELECT a.id, a.name, a.deleted_at FROM accounts a
             WHERE a.id IN (SELECT DISTINCT u.account_id {kept}) ORDER BY a.name, a.id LIMIT {MAX_CHOICES}"
        ))
        .bind(&first)
        .bind(member)
        .fetch_all(db)
        .await?;
        (
            members
                .into_iter()
                .map(|(id, username)| MemberChoice { id, username: validate::shown_name(username) })
                .collect(),
            accounts
                .into_iter()
                .map(|(id, name, deleted)| AccountChoice {
                    id,
                    name: if deleted.is_some() { format!("deleted (#{id})") } else { name },
                })
                .collect(),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(UsageChoices {
        models,
        keys: keys
            .into_iter()
            .map(|(id, name, revoked)| KeyChoice { id, name, revoked: revoked.is_some() })
            .collect(),
        pools: pools.into_iter().map(|(id, name)| PoolChoice { id, name }).collect(),
        members,
        accounts,
    })
}

/// The CSV columns, in order.
pub const CSV_COLUMNS: [&str; 13] = [
    "day",
    "model",
    "requests",
    "succeeded",
    "incomplete",
    "errors",
    "cancelled",
    "rejected",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "mean_duration_ms",
    "mean_first_output_ms",
];

/// The report's table as CSV: the rows the page shows, in its order. A cell a spreadsheet would
/// read as a formula (a model id is the client's text) is prefixed with `'`.
pub fn csv(report: &UsageReport) -> std::result::Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_COLUMNS)?;
    let mean = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in &report.rows {
        let t = &r.totals;
        w.write_record([
            r.day.clone(),
            inert(&r.model),
            t.requests.to_string(),
            t.succeeded.to_string(),
            t.incomplete.to_string(),
            t.errors.to_string(),
            t.cancelled.to_string(),
            t.rejected.to_string(),
            t.input_tokens.to_string(),
            t.output_tokens.to_string(),
            t.cached_tokens.to_string(),
            mean(t.mean_duration_ms()),
            mean(t.mean_first_output_ms()),
        ])?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

/// A cell that cannot start a spreadsheet formula.
fn inert(cell: &str) -> String {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{cell}") } else { cell.to_owned() }
}
