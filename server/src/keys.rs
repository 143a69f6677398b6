//! Gateway API keys (ID-3): created for a member and one pool, secret shown once, only its
//! SHA-256 stored; listed with a status; revoked (kept for history, never deleted).

use app::model::{ApiKeyView, CreatedApiKey, KeyFilter, KeyPatch, KeyStatus, NewApiKey};
use chrono::{DateTime, Utc};
use sqlx::{FromRow, SqlitePool};

use crate::{
    auth::secrets,
    clock::{Clock, from_unix, to_unix},
    error::{Error, Result},
    validate,
};

#[derive(Debug, FromRow)]
struct KeyRow {
    id: i64,
    name: String,
    member_id: i64,
    pool_id: i64,
    pool_name: String,
    hint: String,
    enabled: bool,
    created_at: i64,
    expires_at: Option<i64>,
    revoked_at: Option<i64>,
    last_used_at: Option<i64>,
    breaker_trips: i64,
    breaker_blocked_until: Option<i64>,
    banned_at: Option<i64>,
}

impl KeyRow {
    fn view(self, now: DateTime<Utc>) -> ApiKeyView {
        let expires_at = self.expires_at.map(from_unix);
        let status = if self.revoked_at.is_some() {
            KeyStatus::Revoked
        } else if self.banned_at.is_some() {
            KeyStatus::Banned
        } else if !self.enabled {
            KeyStatus::Disabled
        } else if expires_at.is_some_and(|e| e <= now) {
            KeyStatus::Expired
        } else {
            KeyStatus::Active
        };
        ApiKeyView {
            id: self.id,
            name: self.name,
            member_id: self.member_id,
            pool_id: self.pool_id,
            pool_name: validate::shown_name(self.pool_name),
            hint: self.hint,
            status,
            created_at: from_unix(self.created_at),
            expires_at,
            revoked_at: self.revoked_at.map(from_unix),
            last_used_at: self.last_used_at.map(from_unix),
            breaker_trips: u32::try_from(self.breaker_trips).unwrap_or(0),
            blocked_until: self
                .breaker_blocked_until
                .and_then(DateTime::from_timestamp_millis)
                .filter(|until| *until > now),
            banned_at: self.banned_at.map(from_unix),
        }
    }
}

const SELECT: &str = "SELECT k.id, k.name, k.member_id, k.pool_id, p.name AS pool_name, k.hint, k.enabled,
    k.created_at, k.expires_at, k.revoked_at, k.last_used_at, k.breaker_trips, k.breaker_blocked_until, k.banned_at
    FROM api_keys k JOIN pools p ON p.id = k.pool_id";

/// The keys of one member, newest first (scoped in SQL).
pub async fn list_for_member(db: &SqlitePool, clock: &dyn Clock, member_id: i64) -> Result<Vec<ApiKeyView>> {
    let rows: Vec<KeyRow> = sqlx::query_as(&format!("{SELECT} WHERE k.member_id = ? ORDER BY k.id DESC"))
        .bind(member_id)
        .fetch_all(db)
        .await?;
    let now = clock.now();
    Ok(rows.into_iter().map(|r| r.view(now)).collect())
}

/// Every key of the workspace (admin), optionally one member's or one pool's.
pub async fn list_all(db: &SqlitePool, clock: &dyn Clock, f: &KeyFilter) -> Result<Vec<ApiKeyView>> {
    let rows: Vec<KeyRow> = sqlx::query_as(&format!(
        "{SELECT} WHERE k.member_id = COALESCE(?, k.member_id) AND k.pool_id = COALESCE(?, k.pool_id)
         ORDER BY k.id DESC"
    ))
    .bind(f.member_id)
    .bind(f.pool_id)
    .fetch_all(db)
    .await?;
    let now = clock.now();
    Ok(rows.into_iter().map(|r| r.view(now)).collect())
}

/// Switches a key off or on and/or changes its expiry. With `owner_id`, only that member's key
/// matches (others look absent: 404). A revoked key cannot be switched back on (409); an expiry
/// must lie ahead.
pub async fn update(
    db: &SqlitePool,
    clock: &dyn Clock,
    owner_id: Option<i64>,
    id: i64,
    patch: KeyPatch,
) -> Result<ApiKeyView> {
    let now = clock.now();
    if let Some(Some(e)) = patch.expires_at
        && e <= now
    {
        return Err(Error::field("expires_at", "expires_at must be in the future"));
    }
    let current = get(db, clock, id).await?;
    if owner_id.is_some_and(|o| o != current.member_id) {
        return Err(Error::NotFound("API key"));
    }
    if current.status == KeyStatus::Revoked && patch.enabled == Some(true) {
        return Err(Error::Conflict("a revoked key stays revoked; create a new one".into()));
    }
    // An admin's switch-off and an admin's expiry bind the owner: only an admin switches such a
    // key back on, and the owner may only bring such an expiry forward.
    let (off_by_admin, expiry_by_admin): (bool, bool) =
        sqlx::query_as("SELECT disabled_by_admin, expiry_by_admin FROM api_keys WHERE id = ?")
            .bind(id)
            .fetch_one(db)
            .await?;
    if owner_id.is_some() && off_by_admin && patch.enabled == Some(true) {
        return Err(Error::Forbidden("an admin switched this key off; ask an admin to switch it on".into()));
    }
    if let (Some(_), true, Some(wanted), Some(set)) =
        (owner_id, expiry_by_admin, patch.expires_at, current.expires_at)
        && wanted.is_none_or(|w| w > set)
    {
        return Err(Error::Forbidden(
            "an admin set this key's expiry; you may bring it forward, not push it back or remove it".into(),
        ));
    }
    let mark = match (owner_id, patch.enabled) {
        (None, Some(enabled)) => Some(!enabled),
        _ => None,
    };
    let expiry_mark = match (owner_id, patch.expires_at) {
        (None, Some(e)) => Some(e.is_some()),
        _ => None,
    };
    let expires = match patch.expires_at {
        Some(e) => e.map(to_unix),
        None => current.expires_at.map(to_unix),
    };
    sqlx::query(
        "UPDATE api_keys SET enabled = COALESCE(?, enabled), expires_at = ?,
                disabled_by_admin = COALESCE(?, disabled_by_admin), expiry_by_admin = COALESCE(?, expiry_by_admin)
         WHERE id = ?",
    )
    .bind(patch.enabled)
    .bind(expires)
    .bind(mark)
    .bind(expiry_mark)
    .bind(id)
    .execute(db)
    .await?;
    get(db, clock, id).await
}

/// What a soft deletion removes: a member or a pool (both stay as rows for history).
#[derive(Debug, Clone, Copy)]
pub enum Holder {
    Member,
    Pool,
}

/// Deletes member or pool `id` inside `tx`, the one mechanism for both: the row is marked deleted
/// with its name freed (see `validate::DELETED_MARK`; a member is also switched off), every live
/// key it holds is revoked (the proxy refuses them once the change is applied), and the rows that
/// tied it to the workspace are removed (`forget`: statements with one `?` for the id). 404 when
/// there is no such live row. Answers how many keys were revoked.
pub async fn soft_delete(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    holder: Holder,
    id: i64,
    now: i64,
    forget: &[&str],
) -> Result<u64> {
    let (mark, revoke, what) = match holder {
        Holder::Member => (
            "UPDATE members SET deleted_at = ?1, updated_at = ?1, enabled = 0, username = username || ?2 || id
             WHERE id = ?3 AND deleted_at IS NULL",
            "UPDATE api_keys SET revoked_at = ? WHERE member_id = ? AND revoked_at IS NULL",
            "member",
        ),
        Holder::Pool => (
            "UPDATE pools SET deleted_at = ?1, updated_at = ?1, name = name || ?2 || id
             WHERE id = ?3 AND deleted_at IS NULL",
            "UPDATE api_keys SET revoked_at = ? WHERE pool_id = ? AND revoked_at IS NULL",
            "pool",
        ),
    };
    let marked = sqlx::query(mark).bind(now).bind(validate::DELETED_MARK).bind(id).execute(&mut **tx).await?;
    if marked.rows_affected() == 0 {
        return Err(Error::NotFound(what));
    }
    let revoked = sqlx::query(revoke).bind(now).bind(id).execute(&mut **tx).await?.rows_affected();
    for sql in forget {
        sqlx::query(sql).bind(id).execute(&mut **tx).await?;
    }
    Ok(revoked)
}

async fn get(db: &SqlitePool, clock: &dyn Clock, id: i64) -> Result<ApiKeyView> {
    let row: Option<KeyRow> =
        sqlx::query_as(&format!("{SELECT} WHERE k.id = ?")).bind(id).fetch_optional(db).await?;
    Ok(row.ok_or(Error::NotFound("API key"))?.view(clock.now()))
}

/// Creates a key owned by `owner_id`. The owner must be enabled and a member of the pool.
pub async fn create(
    db: &SqlitePool,
    clock: &dyn Clock,
    owner_id: i64,
    new: NewApiKey,
) -> Result<CreatedApiKey> {
    let name = validate::name("name", &new.name)?;
    let now = clock.now();
    if new.expires_at.is_some_and(|e| e <= now) {
        return Err(Error::field("expires_at", "expires_at must be in the future"));
    }
    let enabled: Option<bool> =
        sqlx::query_scalar("SELECT enabled FROM members WHERE id = ? AND deleted_at IS NULL")
            .bind(owner_id)
            .fetch_optional(db)
            .await?;
    match enabled {
        None => return Err(Error::field("member_id", "member_id does not name a member")),
        Some(false) => return Err(Error::field("member_id", "member_id: the member is disabled")),
        Some(true) => {}
    }
    let pools: Vec<i64> =
        sqlx::query_scalar("SELECT pool_id FROM pool_members WHERE member_id = ? ORDER BY pool_id")
            .bind(owner_id)
            .fetch_all(db)
            .await?;
    let pool_id = match (new.pool_id, pools.as_slice()) {
        (Some(p), _) if pools.contains(&p) => p,
        (Some(_), _) => {
            return Err(Error::field(
                "pool_id",
                "pool_id: the member may not use that pool (or it does not exist)",
            ));
        }
        (None, [only]) => *only,
        (None, []) => {
            return Err(Error::field(
                "pool_id",
                "the member belongs to no pool; ask an admin to add them to one",
            ));
        }
        (None, _) => {
            return Err(Error::field("pool_id", "pool_id is required: the member belongs to several pools"));
        }
    };

    let secret = secrets::new_api_key();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO api_keys (member_id, pool_id, name, secret_hash, hint, enabled, created_at, expires_at)
         VALUES (?, ?, ?, ?, ?, 1, ?, ?) RETURNING id",
    )
    .bind(owner_id)
    .bind(pool_id)
    .bind(&name)
    .bind(secrets::hash(&secret))
    .bind(secrets::hint(&secret))
    .bind(to_unix(now))
    .bind(new.expires_at.map(to_unix))
    .fetch_one(db)
    .await?;
    Ok(CreatedApiKey { key: get(db, clock, id).await?, secret })
}

/// Revokes a key. With `owner_id`, only that member's key matches (others look absent: 404).
/// Revoking twice keeps the first revocation time.
pub async fn revoke(
    db: &SqlitePool,
    clock: &dyn Clock,
    owner_id: Option<i64>,
    id: i64,
) -> Result<ApiKeyView> {
    let done = sqlx::query(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND (? IS NULL OR member_id = ?)",
    )
    .bind(to_unix(clock.now()))
    .bind(id)
    .bind(owner_id)
    .bind(owner_id)
    .execute(db)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound("API key"));
    }
    get(db, clock, id).await
}

/// What an authenticated gateway key grants (ID-3): whose it is and which pool it targets.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Principal {
    pub key_id: i64,
    pub member_id: i64,
    pub pool_id: i64,
    /// ADM-3: concurrent model requests for the member; 0 = unlimited.
    pub concurrency_limit: i64,
    pub rpm_limit: Option<i64>,
    /// Unix seconds; checked on every use, also when the principal comes from a cache.
    pub expires_at: Option<i64>,
}

/// Looks up a presented key secret. `None` for unknown, disabled, revoked or expired keys, keys of
/// disabled members, and keys whose member was removed from the key's pool (ID-3, ADM-7).
pub async fn authenticate(db: &SqlitePool, clock: &dyn Clock, secret: &str) -> Result<Option<Principal>> {
    if !secret.starts_with(secrets::API_KEY_PREFIX) {
        return Ok(None);
    }
    Ok(sqlx::query_as(
        "SELECT k.id AS key_id, k.member_id, k.pool_id, m.concurrency_limit, m.rpm_limit, k.expires_at
         FROM api_keys k
         JOIN members m ON m.id = k.member_id
         JOIN pool_members pm ON pm.pool_id = k.pool_id AND pm.member_id = k.member_id
         WHERE k.secret_hash = ? AND k.enabled = 1 AND k.revoked_at IS NULL
           AND (k.expires_at IS NULL OR k.expires_at > ?) AND m.enabled = 1",
    )
    .bind(secrets::hash(secret))
    .bind(to_unix(clock.now()))
    .fetch_optional(db)
    .await?)
}
