//! Reading request records (API-2, REC-3..REC-5). A personal view is filtered by the signed-in
//! member in SQL, before paging, whatever the filter says, and carries no account fields. Every
//! read prunes first in the same transaction, so an expired record is never shown.

use app::model::{
    AccountChoice, KeyChoice, MemberChoice, OUTCOMES, Page, RequestFilter, RequestFilterChoices,
    RequestRecord,
};
use sqlx::{FromRow, QueryBuilder, Sqlite, SqlitePool};

use super::writer::{Retention, prune};
use crate::{
    clock::{Clock, from_unix},
    error::{Error, Result},
    validate,
};

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
    routing: Option<String>,
}

pub async fn list(
    db: &SqlitePool,
    clock: &dyn Clock,
    scope: Scope,
    f: &RequestFilter,
) -> Result<Page<RequestRecord>> {
    // A misspelt outcome would match nothing and look like an empty history.
    if let Some(o) = f.outcome.as_deref().filter(|o| !o.is_empty() && !OUTCOMES.contains(o)) {
        return Err(Error::field(
            "outcome",
            format!("unknown outcome {o:?}: one of {}", OUTCOMES.join(", ")),
        ));
    }
    let mut tx = db.begin().await?;
    prune(&mut tx, clock.unix_ms(), Retention::default()).await?;
    let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
        "SELECT r.id, r.request_id, r.started_at_ms, r.duration_ms, r.first_output_ms, r.model, r.operation,
                r.key_id, k.name AS key_name, r.outcome, r.error_code, r.upstream_status, r.input_tokens,
                r.output_tokens, r.cached_tokens, r.member_id, m.username, r.account_id, a.name AS account_name,
                a.deleted_at AS account_deleted, r.provider, r.routing
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
    // (ids start at 1: `cursor=0`, as the seed's API writes a first page, is the first page)
    if let Some(c) = f.cursor.filter(|c| *c > 0) {
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
            username: if admin { r.username.map(validate::shown_name) } else { None },
            account_id: if admin { r.account_id } else { None },
            account_name: if admin {
                if r.account_deleted.is_some() { Some("deleted".into()) } else { r.account_name }
            } else {
                None
            },
            provider: if admin { r.provider } else { None },
            // Counts and a rule only (EXP-1): safe in personal views too.
            routing: r.routing.as_deref().and_then(|j| serde_json::from_str(j).ok()),
        })
        .collect();
    Ok(Page { items, next_cursor })
}

/// Most choices of each kind a filter offers.
const MAX_CHOICES: i64 = 200;

/// API-2: the filter choices of `scope`, from the retained records it may read (REC-4). Keys
/// include revoked ones; a personal view names no member and no account (REC-3).
pub async fn choices(db: &SqlitePool, clock: &dyn Clock, scope: Scope) -> Result<RequestFilterChoices> {
    let mut tx = db.begin().await?;
    prune(&mut tx, clock.unix_ms(), Retention::default()).await?;
    // A member's own records, or (no member: the bind is NULL) everyone's.
    let filter = "WHERE r.member_id = COALESCE(?, r.member_id)";
    let member = match scope {
        Scope::Member(id) => Some(id),
        Scope::Admin => None,
    };
    let models: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT DISTINCT r.model FROM request_records r {filter} ORDER BY r.model LIMIT {MAX_CHOICES}"
    ))
    .bind(member)
    .fetch_all(&mut *tx)
    .await?;
    let keys: Vec<(i64, String, Option<i64>)> = sqlx::query_as(&format!(
        "SELECT k.id, k.name, k.revoked_at FROM api_keys k
         WHERE k.id IN (SELECT DISTINCT r.key_id FROM request_records r {filter})
         ORDER BY k.name, k.id LIMIT {MAX_CHOICES}"
    ))
    .bind(member)
    .fetch_all(&mut *tx)
    .await?;
    let (members, accounts) = if matches!(scope, Scope::Admin) {
        let members: Vec<(i64, String)> = sqlx::query_as(&format!(
            "SELECT m.id, m.username FROM members m
             WHERE m.id IN (SELECT DISTINCT member_id FROM request_records)
             ORDER BY m.username LIMIT {MAX_CHOICES}"
        ))
        .fetch_all(&mut *tx)
        .await?;
        let accounts: Vec<(i64, String, Option<i64>)> = sqlx::query_as(&format!(
            "SELECT a.id, a.name, a.deleted_at FROM accounts a
             WHERE a.id IN (SELECT DISTINCT account_id FROM request_records WHERE account_id IS NOT NULL)
             ORDER BY a.name, a.id LIMIT {MAX_CHOICES}"
        ))
        .fetch_all(&mut *tx)
        .await?;
        (member_choices(members), account_choices(accounts))
    } else {
        (Vec::new(), Vec::new())
    };
    tx.commit().await?;
    Ok(RequestFilterChoices {
        outcomes: OUTCOMES.iter().map(|o| (*o).to_owned()).collect(),
        models,
        keys: key_choices(keys),
        members,
        accounts,
    })
}

/// Filter choices from `(id, username)` rows: a deleted member as "name (deleted)".
pub(crate) fn member_choices(rows: Vec<(i64, String)>) -> Vec<MemberChoice> {
    rows.into_iter()
        .map(|(id, username)| MemberChoice { id, username: validate::shown_name(username) })
        .collect()
}

/// Filter choices from `(id, name, deleted_at)` rows: a deleted account as "deleted (#id)".
pub(crate) fn account_choices(rows: Vec<(i64, String, Option<i64>)>) -> Vec<AccountChoice> {
    rows.into_iter()
        .map(|(id, name, deleted)| AccountChoice {
            id,
            name: if deleted.is_some() { format!("deleted (#{id})") } else { name },
        })
        .collect()
}

/// Filter choices from `(id, name, revoked_at)` rows.
pub(crate) fn key_choices(rows: Vec<(i64, String, Option<i64>)>) -> Vec<KeyChoice> {
    rows.into_iter().map(|(id, name, revoked)| KeyChoice { id, name, revoked: revoked.is_some() }).collect()
}

/// API-3: one record by its request id, if `scope` may read it.
pub async fn one(
    db: &SqlitePool,
    clock: &dyn Clock,
    scope: Scope,
    request_id: &str,
) -> Result<RequestRecord> {
    if request_id.trim().is_empty() {
        return Err(Error::NotFound("request"));
    }
    let filter = RequestFilter { request_id: Some(request_id.to_owned()), ..RequestFilter::default() };
    list(db, clock, scope, &filter).await?.items.into_iter().next().ok_or(Error::NotFound("request"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{DateTime, TimeDelta};

    use super::*;
    use crate::{
        clock::FakeClock,
        records::{NewRecord, Outcome, Usage, spawn_writer},
    };

    fn record(n: i64, key: i64, started_at_ms: i64) -> NewRecord {
        NewRecord {
            request_id: format!("req_{n:04}"),
            member_id: 1,
            key_id: Some(key),
            pool_id: Some(1),
            account_id: None,
            provider: None,
            model: "m".into(),
            operation: "responses",
            started_at_ms,
            duration_ms: 1,
            first_output_ms: None,
            outcome: Outcome::Success,
            error_code: None,
            upstream_status: Some(200),
            usage: Usage::default(),
            routing: None,
            charges: Vec::new(),
        }
    }

    #[tokio::test]
    async fn pages_filters_and_pruning_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let (db, _lock) =
            crate::db::open(&format!("sqlite://{}", dir.path().join("q.db").display())).await.unwrap();
        let start = DateTime::from_timestamp(1_900_000_000, 0).unwrap();
        let clock = FakeClock::new(start);
        let t0 = start.timestamp_millis();
        // 120 records, one second apart, alternating between keys 1 and 2
        let (sink, task) = spawn_writer(
            db.clone(),
            Arc::new(clock.clone()),
            Default::default(),
            chrono_tz::UTC,
            Default::default(),
        );
        for n in 0..120 {
            sink.send(record(n, 1 + n % 2, t0 + n * 1000)).await;
        }
        drop(sink);
        task.await.unwrap();
        let scope = Scope::Member(1);
        let all = RequestFilter::default();

        // REC-5: pages of 50, newest first, by cursor, to the end
        let p1 = list(&db, &clock, scope, &all).await.unwrap();
        assert_eq!(p1.items.len(), 50);
        assert_eq!(p1.items[0].request_id, "req_0119");
        let zero = list(&db, &clock, scope, &RequestFilter { cursor: Some(0), ..all.clone() }).await.unwrap();
        assert_eq!(zero.items.len(), 50, "cursor=0 is the first page");
        assert_eq!(zero.items[0].request_id, "req_0119");
        let p2 =
            list(&db, &clock, scope, &RequestFilter { cursor: p1.next_cursor, ..all.clone() }).await.unwrap();
        assert_eq!(p2.items[0].request_id, "req_0069");
        let p3 =
            list(&db, &clock, scope, &RequestFilter { cursor: p2.next_cursor, ..all.clone() }).await.unwrap();
        assert_eq!(p3.items.len(), 20);
        assert_eq!(p3.next_cursor, None);

        // REC-4: request id, key, and a [from, until) range in unix seconds
        let one = RequestFilter { request_id: Some("req_0007".into()), ..all.clone() };
        assert_eq!(list(&db, &clock, scope, &one).await.unwrap().items.len(), 1);
        let key2 = RequestFilter { key_id: Some(2), ..all.clone() };
        let p = list(&db, &clock, scope, &key2).await.unwrap();
        assert!(p.items.iter().all(|r| r.key_id == Some(2)) && p.items.len() == 50);
        let secs = start.timestamp();
        let range = RequestFilter { from: Some(secs + 10), until: Some(secs + 20), ..all.clone() };
        let p = list(&db, &clock, scope, &range).await.unwrap();
        assert_eq!(p.items.len(), 10, "from inclusive, until exclusive");
        assert_eq!(
            (p.items[0].request_id.as_str(), p.items[9].request_id.as_str()),
            ("req_0019", "req_0010")
        );
        assert!(list(&db, &clock, Scope::Member(2), &all).await.unwrap().items.is_empty());

        // REC-5 on read: nothing is written, yet a read after the window shows only what is left
        clock.advance(TimeDelta::days(7) + TimeDelta::seconds(60));
        let p = list(&db, &clock, scope, &all).await.unwrap();
        assert_eq!(p.items.len(), 50);
        let older = RequestFilter { cursor: p.next_cursor, ..all.clone() };
        let rest = list(&db, &clock, scope, &older).await.unwrap();
        assert_eq!(rest.items.last().unwrap().request_id, "req_0060", "records older than 7 days are gone");
        let left: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM request_records").fetch_one(&db).await.unwrap();
        assert_eq!(left, 60, "pruned in the database, not just hidden");
    }
}
