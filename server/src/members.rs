//! Members of the workspace (ID-1, ID-2, ADM-3): listing, creation, changes, and the bootstrap
//! admin on first start.
//!
//! Invariants: at least one enabled admin always remains; disabling a member or changing their
//! password ends all their sessions in the same transaction.
//!
//! A deleted member stays as a row (their revoked keys and request records point at it) but
//! leaves every list; their username is freed (see [`validate::DELETED_MARK`]).

use app::model::{MemberPatch, MemberView, NewMember, Role};
use secrecy::{ExposeSecret, SecretString};
use sqlx::{FromRow, Sqlite, SqlitePool, Transaction};

use crate::{
    auth::password,
    clock::{Clock, from_unix, to_unix},
    error::{Error, Result},
    keys, validate,
};

/// Member concurrency default (ADM-3).
pub const DEFAULT_CONCURRENCY_LIMIT: u32 = 10;
/// Member concurrency upper bound (ADM-3); 0 means unlimited.
pub const MAX_CONCURRENCY_LIMIT: u32 = 1000;
/// Username of the admin created on first start (ID-1).
pub const BOOTSTRAP_ADMIN: &str = "admin";
/// Pool created on first start so keys can be made right away.
pub const DEFAULT_POOL: &str = "default";

#[derive(Debug, FromRow)]
pub struct MemberRow {
    pub id: i64,
    pub username: String,
    pub password_hash: String,
    pub role: String,
    pub enabled: bool,
    pub concurrency_limit: i64,
    pub rpm_limit: Option<i64>,
    pub created_at: i64,
}

impl MemberRow {
    pub fn view(&self) -> MemberView {
        MemberView {
            id: self.id,
            username: self.username.clone(),
            role: if self.role == "admin" { Role::Admin } else { Role::Member },
            enabled: self.enabled,
            concurrency_limit: u32::try_from(self.concurrency_limit).unwrap_or(0),
            rpm_limit: self.rpm_limit.and_then(|v| u32::try_from(v).ok()),
            created_at: from_unix(self.created_at),
        }
    }
}

pub const COLUMNS: &str =
    "id, username, password_hash, role, enabled, concurrency_limit, rpm_limit, created_at";

pub async fn list(db: &SqlitePool) -> Result<Vec<MemberView>> {
    let rows: Vec<MemberRow> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM members WHERE deleted_at IS NULL ORDER BY username"))
            .fetch_all(db)
            .await?;
    Ok(rows.iter().map(MemberRow::view).collect())
}

pub async fn get(db: &SqlitePool, id: i64) -> Result<MemberView> {
    find(db, id).await?.map(|r| r.view()).ok_or(Error::NotFound("member"))
}

async fn find(db: &SqlitePool, id: i64) -> Result<Option<MemberRow>> {
    Ok(sqlx::query_as(&format!("SELECT {COLUMNS} FROM members WHERE id = ? AND deleted_at IS NULL"))
        .bind(id)
        .fetch_optional(db)
        .await?)
}

/// The row for a login attempt (case-insensitive username).
pub async fn find_by_username(db: &SqlitePool, username: &str) -> Result<Option<MemberRow>> {
    Ok(sqlx::query_as(&format!("SELECT {COLUMNS} FROM members WHERE username = ?"))
        .bind(username.trim())
        .fetch_optional(db)
        .await?)
}

pub async fn create(db: &SqlitePool, clock: &dyn Clock, new: NewMember) -> Result<MemberView> {
    let username = validate::username(&new.username)?;
    password::validate(&new.password)?;
    let limit = validate::range(
        "concurrency_limit",
        new.concurrency_limit.unwrap_or(DEFAULT_CONCURRENCY_LIMIT),
        0,
        MAX_CONCURRENCY_LIMIT,
    )?;
    let rpm = new.rpm_limit.map(|v| validate::range("rpm_limit", v, 1, 1_000_000)).transpose()?;
    let hash = password::hash_async(new.password).await?;
    let now = to_unix(clock.now());

    let mut tx = db.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO members (username, password_hash, role, enabled, concurrency_limit, rpm_limit, created_at, updated_at)
         VALUES (?, ?, ?, 1, ?, ?, ?, ?) RETURNING id",
    )
    .bind(&username)
    .bind(&hash)
    .bind(new.role.as_str())
    .bind(limit)
    .bind(rpm)
    .bind(now)
    .bind(now)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| Error::on_conflict(e, || format!("username {username:?} is taken")))?;
    for pool_id in new.pool_ids {
        let live: Option<i64> =
            sqlx::query_scalar("SELECT id FROM pools WHERE id = ? AND deleted_at IS NULL")
                .bind(pool_id)
                .fetch_optional(&mut *tx)
                .await?;
        if live.is_none() {
            return Err(Error::field("pool_ids", format!("pool_ids: pool {pool_id} does not exist")));
        }
        sqlx::query("INSERT OR IGNORE INTO pool_members (pool_id, member_id) VALUES (?, ?)")
            .bind(pool_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    get(db, id).await
}

pub async fn update(db: &SqlitePool, clock: &dyn Clock, id: i64, patch: MemberPatch) -> Result<MemberView> {
    let limit = patch
        .concurrency_limit
        .map(|v| validate::range("concurrency_limit", v, 0, MAX_CONCURRENCY_LIMIT))
        .transpose()?;
    let rpm = match patch.rpm_limit {
        Some(Some(v)) => Some(Some(validate::range("rpm_limit", v, 1, 1_000_000)?)),
        other => other,
    };
    let new_hash = match patch.password {
        Some(p) => {
            password::validate(&p)?;
            Some(password::hash_async(p).await?)
        }
        None => None,
    };

    let mut tx = db.begin().await?;
    let current: MemberRow =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM members WHERE id = ? AND deleted_at IS NULL"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(Error::NotFound("member"))?;
    let role = patch.role.map(Role::as_str).unwrap_or(current.role.as_str()).to_owned();
    let enabled = patch.enabled.unwrap_or(current.enabled);
    let loses_admin = current.role == "admin" && current.enabled && (role != "admin" || !enabled);
    if loses_admin {
        keep_an_admin(&mut tx, id).await?;
    }
    let rpm_value = match rpm {
        Some(v) => v.map(i64::from),
        None => current.rpm_limit,
    };
    sqlx::query(
        "UPDATE members SET role = ?, enabled = ?, concurrency_limit = ?, rpm_limit = ?,
                password_hash = COALESCE(?, password_hash), updated_at = ? WHERE id = ?",
    )
    .bind(&role)
    .bind(enabled)
    .bind(limit.map(i64::from).unwrap_or(current.concurrency_limit))
    .bind(rpm_value)
    .bind(new_hash.as_deref())
    .bind(to_unix(clock.now()))
    .bind(id)
    .execute(&mut *tx)
    .await?;
    // ID-2: a disabled member loses access at once; a new password signs out old sessions.
    if !enabled || new_hash.is_some() {
        sqlx::query("DELETE FROM sessions WHERE member_id = ?").bind(id).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    get(db, id).await
}

/// Refuses a change that would leave no enabled admin besides member `id`.
async fn keep_an_admin(tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<()> {
    let other_admins: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM members WHERE role = 'admin' AND enabled = 1 AND deleted_at IS NULL AND id != ?",
    )
    .bind(id)
    .fetch_one(&mut **tx)
    .await?;
    if other_admins == 0 {
        return Err(Error::Conflict("the workspace must keep at least one enabled admin".into()));
    }
    Ok(())
}

/// Deletes member `id` on behalf of admin `actor`: they are signed out, their keys are revoked
/// (the proxy refuses them at once), they leave every pool and their conversation bindings are
/// forgotten. Their request records stay (until retention prunes them), shown as
/// "name (deleted)". Nobody deletes themselves, and the acting admin must still be one when the
/// write happens, so an enabled admin always stays. Answers how many keys were revoked.
pub async fn delete(db: &SqlitePool, clock: &dyn Clock, actor: i64, id: i64) -> Result<u64> {
    if actor == id {
        return Err(Error::Conflict("you cannot delete yourself; ask another admin".into()));
    }
    let now = to_unix(clock.now());
    let mut tx = db.begin().await?;
    let forget = [
        "DELETE FROM sessions WHERE member_id = ?",
        "DELETE FROM pool_members WHERE member_id = ?",
        "DELETE FROM session_bindings WHERE member_id = ?",
    ];
    let revoked = keys::soft_delete(&mut tx, keys::Holder::Member, id, now, &forget).await?;
    // Two admins deleting each other at once: the writes are serialized, and the second finds
    // its actor gone and leaves the workspace its admin.
    let actor_live: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM members WHERE id = ? AND role = 'admin' AND enabled = 1 AND deleted_at IS NULL",
    )
    .bind(actor)
    .fetch_optional(&mut *tx)
    .await?;
    if actor_live.is_none() {
        return Err(Error::forbidden("you are no longer an enabled admin"));
    }
    keep_an_admin(&mut tx, id).await?;
    tx.commit().await?;
    Ok(revoked)
}

/// What the first start did, for the operator's console.
#[derive(Debug, PartialEq)]
pub enum Bootstrap {
    /// Members already exist; nothing was done.
    Existing,
    /// The admin was created with the configured password.
    CreatedWithConfiguredPassword,
    /// The admin was created with this generated password, to be printed once.
    CreatedWithGeneratedPassword(String),
}

/// On an empty workspace, creates the `admin` member and a `default` pool holding them (ID-1).
pub async fn bootstrap(
    db: &SqlitePool,
    clock: &dyn Clock,
    configured: Option<&SecretString>,
) -> Result<Bootstrap> {
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM members").fetch_one(db).await?;
    if count > 0 {
        return Ok(Bootstrap::Existing);
    }
    let (password, outcome) = match configured {
        Some(p) => {
            password::validate(p.expose_secret()).map_err(|e| {
                Error::invalid(format!("SUBLANE_ADMIN_PASSWORD is not acceptable: {}", e.public_message()))
            })?;
            (p.expose_secret().to_owned(), Bootstrap::CreatedWithConfiguredPassword)
        }
        None => {
            let generated = generate_password();
            (generated.clone(), Bootstrap::CreatedWithGeneratedPassword(generated))
        }
    };
    let admin = create(
        db,
        clock,
        NewMember {
            username: BOOTSTRAP_ADMIN.into(),
            password,
            role: Role::Admin,
            concurrency_limit: None,
            rpm_limit: None,
            pool_ids: vec![],
        },
    )
    .await?;
    let now = to_unix(clock.now());
    let pool_id: i64 = sqlx::query_scalar(
        "INSERT INTO pools (name, created_at, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at RETURNING id",
    )
    .bind(DEFAULT_POOL)
    .bind(now)
    .bind(now)
    .fetch_one(db)
    .await?;
    sqlx::query("INSERT OR IGNORE INTO pool_members (pool_id, member_id) VALUES (?, ?)")
        .bind(pool_id)
        .bind(admin.id)
        .execute(db)
        .await?;
    Ok(outcome)
}

/// 20 characters from an unambiguous alphabet (~115 bits).
fn generate_password() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    (0..20).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}
