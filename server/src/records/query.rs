//! Reading request records (API-2, REC-3..REC-5). A personal view is filtered by the signed-in
//! member in SQL, before paging, whatever the filter says, and carries no account fields. Every
//! read prunes first in the same transaction, so an expired record is never shown.

use app::model::{Page, RequestFilter, RequestRecord};
use sqlx::{FromRow, QueryBuilder, Sqlite, SqlitePool};

use super::writer::{Retention, prune};
use crate::{clock::Clock, clock::from_unix, error::Result};

/// Records per page (REC-5).
pub const PAGE_SIZE: i64 = 50;

/// Whose records may be read.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// Only this member's, without account details (REC-3).
    Member(i64),
    /// Everyone's, with member and account (admins).
    Admin,
}

#[derive(FromRow)]
struct Row {
    id: i64,
    request_id: String,
    started_at_ms: i64,
    duration_ms: i64,
    first_output_ms: Option<i64>,
    model: String,
    operation: String,
    key_id: Option<i64>,
    key_name: Option<String>,
    outcome: String,
    error_code: Option<String>,
    upstream_status: Option<i64>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cached_tokens: Option<i64>,
    member_id: i64,
    username: Option<String>,
    account_id: Option<i64>,
    account_name: Option<String>,
    account_deleted: Option<i64>,
    provider: Option<String>,
}

pub async fn list(
    db: &SqlitePool,
    clock: &dyn Clock,
    scope: Scope,
    f: &RequestFilter,
) -> Result<Page<RequestRecord>> {
    let mut tx = db.begin().await?;
    prune(&mut tx, clock.now().timestamp_millis(), Retention::default()).await?;
    let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
        "SELECT r.id, r.request_id, r.started_at_ms, r.duration_ms, r.first_output_ms, r.model, r.operation,
                r.key_id, k.name AS key_name, r.outcome, r.error_code, r.upstream_status, r.input_tokens,
                r.output_tokens, r.cached_tokens, r.member_id, m.username, r.account_id, a.name AS account_name,
                a.deleted_at AS account_deleted, r.provider
         FROM request_records r
         LEFT JOIN api_keys k ON k.id = r.key_id
         LEFT JOIN members m ON m.id = r.member_id
         LEFT JOIN accounts a ON a.id = r.account_id
         WHERE 1 = 1",
    );
    match scope {
        Scope::Member(id) => {
            q.push(" AND r.member_id = ").push_bind(id);
        }
        Scope::Admin => {
            if let Some(u) = f.user_id {
                q.push(" AND r.member_id = ").push_bind(u);
            }
            if let Some(a) = f.account_id {
                q.push(" AND r.account_id = ").push_bind(a);
            }
        }
    }
    if let Some(c) = f.cursor {
        q.push(" AND r.id < ").push_bind(c);
    }
    if let Some(o) = f.outcome.as_deref().filter(|o| !o.is_empty()) {
        q.push(" AND r.outcome = ").push_bind(o.to_owned());
    }
    if let Some(m) = f.model.as_deref().filter(|m| !m.is_empty()) {
        q.push(" AND r.model = ").push_bind(m.to_owned());
    }
    if let Some(r) = f.request_id.as_deref().filter(|r| !r.is_empty()) {
        q.push(" AND r.request_id = ").push_bind(r.trim().to_owned());
    }
    if let Some(k) = f.key_id {
        q.push(" AND r.key_id = ").push_bind(k);
    }
    if let Some(from) = f.from {
        q.push(" AND r.started_at_ms >= ").push_bind(from.saturating_mul(1000));
    }
    if let Some(until) = f.until {
        q.push(" AND r.started_at_ms < ").push_bind(until.saturating_mul(1000));
    }
    q.push(" ORDER BY r.id DESC LIMIT ").push_bind(PAGE_SIZE + 1);
    let mut rows: Vec<Row> = q.build_query_as().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    let more = rows.len() as i64 > PAGE_SIZE;
    rows.truncate(PAGE_SIZE as usize);
    let next_cursor = if more { rows.last().map(|r| r.id) } else { None };
    let admin = matches!(scope, Scope::Admin);
    let items = rows
        .into_iter()
        .map(|r| RequestRecord {
            id: r.id,
            request_id: r.request_id,
            started_at: from_unix(r.started_at_ms / 1000)
                + chrono::TimeDelta::milliseconds(r.started_at_ms.rem_euclid(1000)),
            duration_ms: r.duration_ms,
            first_output_ms: r.first_output_ms,
            model: r.model,
            operation: r.operation,
            key_id: r.key_id,
            key_name: r.key_name,
            outcome: r.outcome,
            error_code: r.error_code,
            upstream_status: r.upstream_status.and_then(|s| u16::try_from(s).ok()),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cached_tokens: r.cached_tokens,
            member_id: admin.then_some(r.member_id),
            username: if admin { r.username } else { None },
            account_id: if admin { r.account_id } else { None },
            account_name: if admin {
                if r.account_deleted.is_some() { Some("deleted".into()) } else { r.account_name }
            } else {
                None
            },
            provider: if admin { r.provider } else { None },
        })
        .collect();
    Ok(Page { items, next_cursor })
}
