//! Budget policies, usage and prices in the database (portable SQL: `ON CONFLICT` upserts work in
//! SQLite and PostgreSQL alike).

use std::collections::BTreeMap;

use sqlx::{SqliteConnection, SqlitePool};

use super::{
    Charge, Metric, Policy, Price, Prices, Subject,
    policy::{parse_window, window_kind},
};
use crate::error::{Error, Result};

/// Usage rows of windows that ended this long ago are deleted.
const USAGE_KEPT_MS: i64 = 2 * 24 * 3600 * 1000;

#[derive(sqlx::FromRow)]
struct PolicyRow {
    id: i64,
    subject: String,
    subject_id: Option<i64>,
    metric: String,
    window_kind: String,
    window_minutes: Option<i64>,
    limit_value: i64,
}

impl PolicyRow {
    fn policy(self) -> Option<Policy> {
        Some(Policy {
            id: self.id,
            subject: Subject::parse(&self.subject, self.subject_id).ok()?,
            metric: Metric::parse(&self.metric).ok()?,
            window: parse_window(&self.window_kind, self.window_minutes).ok()?,
            limit: self.limit_value,
        })
    }
}

const POLICY_COLUMNS: &str =
    "SELECT id, subject, subject_id, metric, window_kind, window_minutes, limit_value FROM budget_policies";

pub async fn policies(db: &SqlitePool) -> sqlx::Result<Vec<Policy>> {
    let rows: Vec<PolicyRow> = sqlx::query_as(POLICY_COLUMNS).fetch_all(db).await?;
    Ok(rows.into_iter().filter_map(PolicyRow::policy).collect())
}

pub async fn policy(db: &SqlitePool, id: i64) -> Result<Policy> {
    let row: Option<PolicyRow> =
        sqlx::query_as(&format!("{POLICY_COLUMNS} WHERE id = ?")).bind(id).fetch_optional(db).await?;
    row.and_then(PolicyRow::policy).ok_or(Error::NotFound("budget policy"))
}

/// `(policy, window start, used)` of every stored window.
pub async fn usage(db: &SqlitePool) -> sqlx::Result<Vec<(i64, i64, i64)>> {
    sqlx::query_as("SELECT policy_id, window_start_ms, used FROM budget_usage").fetch_all(db).await
}

pub async fn prices(db: &SqlitePool) -> sqlx::Result<Prices> {
    let rows: Vec<(String, f64, f64, Option<f64>)> =
        sqlx::query_as("SELECT model, prompt, completion, cached FROM model_prices").fetch_all(db).await?;
    Ok(Prices(
        rows.into_iter()
            .map(|(model, prompt, completion, cached)| (model, Price { prompt, completion, cached }))
            .collect::<BTreeMap<_, _>>(),
    ))
}

pub async fn set_price(db: &SqlitePool, model: &str, p: &Price) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO model_prices (model, prompt, completion, cached) VALUES (?, ?, ?, ?)
         ON CONFLICT (model) DO UPDATE SET prompt = excluded.prompt, completion = excluded.completion,
             cached = excluded.cached",
    )
    .bind(model)
    .bind(p.prompt)
    .bind(p.completion)
    .bind(p.cached)
    .execute(db)
    .await?;
    Ok(())
}

/// Removes the web app's price of a model (the configured one, if any, applies again).
pub async fn delete_price(db: &SqlitePool, model: &str) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM model_prices WHERE model = ?").bind(model).execute(db).await?;
    Ok(done.rows_affected() > 0)
}

pub async fn insert_policy(db: &SqlitePool, p: &Policy, by: i64, now_s: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO budget_policies (subject, subject_id, metric, window_kind, window_minutes, limit_value,
             created_by, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(p.subject.kind())
    .bind(p.subject.id())
    .bind(p.metric.as_str())
    .bind(window_kind(p.window))
    .bind(minutes(p))
    .bind(p.limit)
    .bind(by)
    .bind(now_s)
    .bind(now_s)
    .fetch_one(db)
    .await
}

/// Stores a policy's new limit.
pub async fn update_limit(db: &SqlitePool, p: &Policy, now_s: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE budget_policies SET limit_value = ?, updated_at = ? WHERE id = ?")
        .bind(p.limit)
        .bind(now_s)
        .bind(p.id)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn delete_policy(db: &SqlitePool, id: i64) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    let done = sqlx::query("DELETE FROM budget_policies WHERE id = ?").bind(id).execute(&mut *tx).await?;
    sqlx::query("DELETE FROM budget_usage WHERE policy_id = ?").bind(id).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

fn minutes(p: &Policy) -> Option<i64> {
    match p.window {
        super::Window::Minutes(n) => Some(i64::from(n)),
        _ => None,
    }
}

/// Adds a batch's charges to their windows, in the record writer's transaction (so usage and
/// the records it came from commit together). A charge for a policy deleted meanwhile is
/// dropped; windows that ended two days ago are deleted.
pub async fn add_charges<'a>(
    conn: &mut SqliteConnection,
    charges: impl Iterator<Item = &'a Charge>,
    now_ms: i64,
) -> sqlx::Result<()> {
    let mut sums: BTreeMap<(i64, i64), (Option<i64>, i64)> = BTreeMap::new();
    for c in charges {
        let e = sums.entry((c.policy_id, c.window_start_ms)).or_insert((c.window_end_ms, 0));
        e.1 = e.1.saturating_add(c.amount);
    }
    if sums.is_empty() {
        return Ok(());
    }
    for ((policy_id, start), (end, amount)) in sums {
        sqlx::query(
            "INSERT INTO budget_usage (policy_id, window_start_ms, window_end_ms, used)
             SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM budget_policies WHERE id = ?)
             ON CONFLICT (policy_id, window_start_ms) DO UPDATE SET used = budget_usage.used + excluded.used",
        )
        .bind(policy_id)
        .bind(start)
        .bind(end)
        .bind(amount)
        .bind(policy_id)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query("DELETE FROM budget_usage WHERE window_end_ms < ?")
        .bind(now_ms - USAGE_KEPT_MS)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
