//! Reading the daily summaries for the Usage page and its CSV (BEY-1). A personal view is
//! filtered by the signed-in member in SQL, whatever the filter says, and never names accounts
//! (REC-3); an admin may narrow by member, key, pool, account and model.

use std::collections::BTreeMap;

use app::model::{
    PoolChoice, USAGE_PERIODS, UsageByModel, UsageChoices, UsageDay, UsageFilter, UsageReport, UsageRow,
    UsageTotals,
};
use chrono::{Duration, NaiveDate};
use chrono_tz::Tz;
use sqlx::{FromRow, QueryBuilder, Sqlite, SqlitePool};

use super::{day_of, first_kept_day};
use crate::{
    error::{Error, Result},
    records::query::{self as records, Scope},
    validate,
};

/// Most table rows (days × models) one report holds; beyond, the oldest are left out (and the
/// report says so).
pub const MAX_ROWS: i64 = 10_000;
/// Most entries in one filter list.
const MAX_CHOICES: i64 = 200;
/// The Usage page shows this many models by name; the rest are summed as one.
pub const CHART_MODELS: usize = 12;
/// The name of the sum of the models beyond [`CHART_MODELS`] (the summaries' own name for the
/// models beyond a day's limit).
pub use super::OTHER_MODELS;

/// One group of summed rows: its day and model when grouped by them.
#[derive(FromRow)]
struct Summed {
    #[sqlx(default)]
    day: String,
    #[sqlx(default)]
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

/// The sums of every counted column (`CAST`: PostgreSQL sums bigints to numeric).
const SUMS: &str = "CAST(SUM(requests) AS BIGINT) AS requests, CAST(SUM(succeeded) AS BIGINT) AS succeeded,
    CAST(SUM(incomplete) AS BIGINT) AS incomplete, CAST(SUM(errors) AS BIGINT) AS errors,
    CAST(SUM(cancelled) AS BIGINT) AS cancelled, CAST(SUM(rejected) AS BIGINT) AS rejected,
    CAST(SUM(input_tokens) AS BIGINT) AS input_tokens, CAST(SUM(output_tokens) AS BIGINT) AS output_tokens,
    CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens, CAST(SUM(duration_ms_sum) AS BIGINT) AS duration_ms_sum,
    CAST(SUM(first_output_ms_sum) AS BIGINT) AS first_output_ms_sum,
    CAST(SUM(first_output_count) AS BIGINT) AS first_output_count";

fn text(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// The rows of a report: its period, and only the filters given (so SQLite can use the
/// member's index; a personal view is always its member's).
struct Selection {
    first: String,
    last: String,
    member: Option<i64>,
    key: Option<i64>,
    pool: Option<i64>,
    account: Option<i64>,
    model: Option<String>,
}

impl Selection {
    /// `SELECT <columns>, <sums> FROM usage_daily WHERE ... <tail>`.
    fn query(&self, columns: &str, tail: &str) -> QueryBuilder<'_, Sqlite> {
        let mut q = QueryBuilder::new(format!("SELECT {columns}{SUMS} FROM usage_daily WHERE day >= "));
        q.push_bind(&self.first).push(" AND day <= ").push_bind(&self.last);
        let ids = [
            ("member_id", self.member),
            ("key_id", self.key),
            ("pool_id", self.pool),
            ("account_id", self.account),
        ];
        for (column, id) in ids {
            if let Some(id) = id {
                q.push(format!(" AND {column} = ")).push_bind(id);
            }
        }
        if let Some(model) = &self.model {
            q.push(" AND model = ").push_bind(model);
        }
        q.push(" ");
        q.push(tail);
        q
    }
}

/// The report of `filter`'s period, ending on the day of `now_ms` in `zone`. A period other than
/// 7, 30 or 90 days is refused by name.
///
/// The days, the models and the totals are each summed by the database, so a table cut at
/// [`MAX_ROWS`] (many models a day) never changes them.
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
    let sel = Selection {
        first: text(first),
        last: text(today),
        member,
        key: filter.key_id,
        pool: filter.pool_id,
        account,
        model: filter.model.clone(),
    };
    let by_day: Vec<Summed> = sel.query("day, ", "GROUP BY day").build_query_as().fetch_all(db).await?;
    let by_day: BTreeMap<String, UsageTotals> = by_day.iter().map(|r| (r.day.clone(), r.totals())).collect();
    let mut totals = UsageTotals::default();
    for t in by_day.values() {
        totals.add(t);
    }
    let series = (0..days)
        .map(|n| {
            let day = text(first + Duration::days(i64::from(n)));
            let totals = by_day.get(&day).copied().unwrap_or_default();
            UsageDay { day, totals }
        })
        .collect();

    // The most used models by name; the rest summed as one.
    let tail = format!("GROUP BY model ORDER BY requests DESC, model LIMIT {}", CHART_MODELS + 1);
    let top: Vec<Summed> = sel.query("model, ", &tail).build_query_as().fetch_all(db).await?;
    let mut by_model: Vec<UsageByModel> =
        top.iter().map(|r| UsageByModel { model: r.model.clone(), totals: r.totals() }).collect();
    if by_model.len() > CHART_MODELS {
        by_model.truncate(CHART_MODELS - 1);
        let mut other = totals;
        for m in &by_model {
            other.subtract(&m.totals);
        }
        by_model.push(UsageByModel { model: OTHER_MODELS.to_owned(), totals: other });
    }

    let tail = format!("GROUP BY day, model ORDER BY day DESC, model LIMIT {}", MAX_ROWS + 1);
    let mut rows: Vec<Summed> = sel.query("day, model, ", &tail).build_query_as().fetch_all(db).await?;
    let truncated = rows.len() > MAX_ROWS as usize;
    rows.truncate(MAX_ROWS as usize);
    let choices = choices(db, zone, now_ms, scope).await?;
    Ok(UsageReport {
        zone: zone.name().to_owned(),
        days,
        series,
        by_model,
        rows: rows
            .iter()
            .map(|r| UsageRow { day: r.day.clone(), model: r.model.clone(), totals: r.totals() })
            .collect(),
        truncated,
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
    let kept = KeptSummaries { db, first: &first, member };
    let models: Vec<(String,)> =
        kept.rows(&format!("SELECT DISTINCT u.model {KEPT} ORDER BY u.model LIMIT {MAX_CHOICES}")).await?;
    let keys: Vec<(i64, String, Option<i64>)> =
        kept.named("SELECT t.id, t.name, t.revoked_at FROM api_keys t", "key_id", "t.name, t.id").await?;
    let pools: Vec<(i64, String)> =
        kept.named("SELECT t.id, t.name FROM pools t", "pool_id", "t.name, t.id").await?;
    let (members, accounts) = if matches!(scope, Scope::Admin) {
        let members: Vec<(i64, String)> =
            kept.named("SELECT t.id, t.username FROM members t", "member_id", "t.username").await?;
        let accounts: Vec<(i64, String, Option<i64>)> = kept
            .named("SELECT t.id, t.name, t.deleted_at FROM accounts t", "account_id", "t.name, t.id")
            .await?;
        (records::member_choices(members), records::account_choices(accounts))
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(UsageChoices {
        models: models.into_iter().map(|(m,)| m).collect(),
        keys: records::key_choices(keys),
        pools: pools
            .into_iter()
            .map(|(id, name)| PoolChoice { id, name: validate::shown_name(name) })
            .collect(),
        members,
        accounts,
    })
}

/// The kept summaries (from the first kept day), the member's own or, with no member, all.
const KEPT: &str = "FROM usage_daily u WHERE u.day >= ? AND u.member_id = COALESCE(?, u.member_id)";

/// Queries over the kept summaries of one scope.
struct KeptSummaries<'a> {
    db: &'a SqlitePool,
    first: &'a str,
    member: Option<i64>,
}

impl KeptSummaries<'_> {
    /// The rows `sql` selects; its two parameters are the first kept day and the member.
    async fn rows<T>(&self, sql: &str) -> Result<Vec<T>>
    where
        T: for<'r> FromRow<'r, sqlx::sqlite::SqliteRow> + Send + Unpin,
    {
        Ok(sqlx::query_as(sql).bind(self.first).bind(self.member).fetch_all(self.db).await?)
    }

    /// The rows of `select` (a table aliased `t`) whose id appears in the summaries' `column`.
    async fn named<T>(&self, select: &str, column: &str, order: &str) -> Result<Vec<T>>
    where
        T: for<'r> FromRow<'r, sqlx::sqlite::SqliteRow> + Send + Unpin,
    {
        self.rows(&format!(
            "{select} WHERE t.id IN (SELECT DISTINCT u.{column} {KEPT}) ORDER BY {order} LIMIT {MAX_CHOICES}"
        ))
        .await
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_cannot_start_a_formula_and_are_quoted() {
        let row = |model: &str| UsageRow {
            day: "2026-11-30".into(),
            model: model.into(),
            totals: UsageTotals::default(),
        };
        let report = UsageReport {
            rows: vec![row("=HYPERLINK(\"x\")"), row("-1+2"), row("@sum"), row("gpt-5.1, \"quoted\"")],
            ..UsageReport::default()
        };
        let text = String::from_utf8(csv(&report).unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert!(lines[1].starts_with("2026-11-30,\"'=HYPERLINK(\"\"x\"\")\","), "{}", lines[1]);
        assert!(lines[2].starts_with("2026-11-30,'-1+2,"));
        assert!(lines[3].starts_with("2026-11-30,'@sum,"));
        assert!(lines[4].starts_with("2026-11-30,\"gpt-5.1, \"\"quoted\"\"\","));
    }
}
