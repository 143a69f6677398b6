//! Upstream accounts: provider, name, pools, priority, concurrency limit (ADM-1) and sealed
//! credentials (ID-6).
//!
//! Credentials are write-only: they are sealed with `credentials.key` and only a summary (kind,
//! expiry, provider account id) is ever returned. Deleting an account keeps its row for history
//! (ACC-5) but drops its credentials and pool memberships.

use app::model::{
    AccountPatch, AccountStatus, AccountView, CredentialInput, CredentialSummary, NewAccount, Provider,
};
use sqlx::{FromRow, Sqlite, SqlitePool, Transaction};

use crate::{
    clock::{Clock, from_unix, to_unix},
    crypto::Sealer,
    error::{Error, Result},
    validate,
};

/// Per-account concurrency default for new accounts (ADM-1).
pub const DEFAULT_MAX_CONCURRENCY: u32 = 30;
/// Per-account concurrency bounds (ADM-1).
pub const MAX_CONCURRENCY_RANGE: (u32, u32) = (1, 1000);
/// Purpose label for sealed account credentials.
pub const SEAL_PURPOSE: &str = "account-credentials";

#[derive(Debug, FromRow)]
struct AccountRow {
    id: i64,
    provider: String,
    name: String,
    priority: i64,
    max_concurrency: i64,
    status: String,
    schedulable: bool,
    expires_at: Option<i64>,
    credential_kind: Option<String>,
    token_expires_at: Option<i64>,
    provider_account_id: Option<String>,
    created_at: i64,
    pool_ids: Option<String>,
}

impl AccountRow {
    fn view(self) -> Result<AccountView> {
        let provider = Provider::parse(&self.provider)
            .ok_or_else(|| Error::Internal(format!("unknown provider {:?} in database", self.provider)))?;
        Ok(AccountView {
            id: self.id,
            provider,
            name: self.name,
            pool_ids: validate::id_list(self.pool_ids),
            priority: i32::try_from(self.priority).unwrap_or_default(),
            max_concurrency: u32::try_from(self.max_concurrency).unwrap_or(DEFAULT_MAX_CONCURRENCY),
            status: match self.status.as_str() {
                "error" => AccountStatus::Error,
                "disabled" => AccountStatus::Disabled,
                _ => AccountStatus::Active,
            },
            schedulable: self.schedulable,
            expires_at: self.expires_at.map(from_unix),
            credential: CredentialSummary {
                kind: self.credential_kind.unwrap_or_else(|| "none".into()),
                expires_at: self.token_expires_at.map(from_unix),
                provider_account_id: self.provider_account_id,
            },
            created_at: from_unix(self.created_at),
        })
    }
}

const SELECT: &str =
    "SELECT a.id, a.provider, a.name, a.priority, a.max_concurrency, a.status, a.schedulable, a.expires_at,
    a.credential_kind, a.token_expires_at, a.provider_account_id, a.created_at,
    (SELECT group_concat(pool_id) FROM account_pools WHERE account_id = a.id) AS pool_ids
    FROM accounts a WHERE a.deleted_at IS NULL";

pub async fn list(db: &SqlitePool) -> Result<Vec<AccountView>> {
    let rows: Vec<AccountRow> = sqlx::query_as(&format!("{SELECT} ORDER BY a.id")).fetch_all(db).await?;
    rows.into_iter().map(AccountRow::view).collect()
}

pub async fn get(db: &SqlitePool, id: i64) -> Result<AccountView> {
    let row: Option<AccountRow> =
        sqlx::query_as(&format!("{SELECT} AND a.id = ?")).bind(id).fetch_optional(db).await?;
    row.ok_or(Error::NotFound("account"))?.view()
}

/// Sealed credential plus the non-secret facts stored beside it.
struct Sealed {
    kind: &'static str,
    blob: Vec<u8>,
    expires_at: Option<i64>,
    provider_account_id: Option<String>,
}

fn seal(sealer: &Sealer, provider: Provider, input: &CredentialInput) -> Result<Sealed> {
    let nonempty = |field: &str, v: &str| -> Result<()> {
        if v.trim().is_empty() {
            return Err(Error::invalid(format!("credentials.{field} must not be empty")));
        }
        Ok(())
    };
    let (kind, expires_at, provider_account_id) = match input {
        CredentialInput::OAuth { access_token, refresh_token, expires_at, provider_account_id } => {
            if !provider.uses_oauth() {
                return Err(Error::invalid(format!(
                    "provider {} takes an API key (credentials.kind = \"api_key\")",
                    provider.as_str()
                )));
            }
            nonempty("access_token", access_token)?;
            if let Some(r) = refresh_token {
                nonempty("refresh_token", r)?;
            }
            ("oauth", expires_at.map(to_unix), provider_account_id.clone())
        }
        CredentialInput::ApiKey { api_key } => {
            if provider.uses_oauth() {
                return Err(Error::invalid(format!(
                    "provider {} takes OAuth tokens (credentials.kind = \"oauth\")",
                    provider.as_str()
                )));
            }
            nonempty("api_key", api_key)?;
            ("api_key", None, None)
        }
    };
    let plaintext = serde_json::to_vec(input).map_err(|e| Error::Internal(e.to_string()))?;
    Ok(Sealed { kind, blob: sealer.seal(SEAL_PURPOSE, &plaintext)?, expires_at, provider_account_id })
}

/// Opens an account's credentials for use upstream (never for display).
pub async fn credentials(db: &SqlitePool, sealer: &Sealer, id: i64) -> Result<Option<CredentialInput>> {
    let blob: Option<Option<Vec<u8>>> =
        sqlx::query_scalar("SELECT sealed_credential FROM accounts WHERE id = ? AND deleted_at IS NULL")
            .bind(id)
            .fetch_optional(db)
            .await?;
    let Some(blob) = blob.ok_or(Error::NotFound("account"))? else {
        return Ok(None);
    };
    let plain = sealer.open(SEAL_PURPOSE, &blob)?;
    serde_json::from_slice(&plain).map(Some).map_err(|e| Error::Internal(e.to_string()))
}

/// ID-6: every live account's sealed credentials, for the start's check of the credentials key:
/// id, sealed credentials, and whether a replaced key already marked them unreadable
/// ([`credentials_unreadable`]).
pub async fn sealed_credentials(db: &SqlitePool) -> Result<Vec<(i64, Vec<u8>, bool)>> {
    Ok(sqlx::query_as(
        "SELECT id, sealed_credential, COALESCE(reauth_reason = ?, 0) FROM accounts
         WHERE deleted_at IS NULL AND sealed_credential IS NOT NULL",
    )
    .bind(KEY_REPLACED)
    .fetch_all(db)
    .await?)
}

/// The re-authorization reason of credentials a replaced credentials key cannot open.
pub const KEY_REPLACED: &str = "credentials_key_replaced";

/// Whether `sealed` opens under `sealer` (the start's check of the key; never for use).
pub fn opens(sealer: &Sealer, sealed: &[u8]) -> bool {
    sealer.open(SEAL_PURPOSE, sealed).is_ok()
}

/// Marks an account whose stored credentials the credentials key cannot open (ID-6: a replaced
/// key): `error`, which its card shows, and re-authorization required ([`KEY_REPLACED`]), which
/// keeps it out of the next start's check. The credentials stay: the old key, found again, opens
/// them ([`credentials_readable_again`]). New credentials (a re-authorization, an import, a
/// PATCH) clear both. Not when they were replaced meanwhile.
pub async fn credentials_unreadable(
    db: &SqlitePool,
    id: i64,
    sealed: &[u8],
    clock: &dyn Clock,
) -> Result<()> {
    let now = to_unix(clock.now());
    sqlx::query(
        "UPDATE accounts SET status = CASE status WHEN 'active' THEN 'error' ELSE status END,
                reauth_required_at = ?, reauth_reason = ?, credential_version = credential_version + 1,
                updated_at = ?
         WHERE id = ? AND sealed_credential = ? AND deleted_at IS NULL",
    )
    .bind(now)
    .bind(KEY_REPLACED)
    .bind(now)
    .bind(id)
    .bind(sealed)
    .execute(db)
    .await?;
    Ok(())
}

/// Undoes [`credentials_unreadable`] once the key in use opens the credentials again (the old
/// key restored): the account serves as before, with no re-authorization.
pub async fn credentials_readable_again(db: &SqlitePool, id: i64, clock: &dyn Clock) -> Result<()> {
    sqlx::query(
        "UPDATE accounts SET status = CASE status WHEN 'error' THEN 'active' ELSE status END,
                reauth_required_at = NULL, reauth_reason = NULL, credential_version = credential_version + 1,
                updated_at = ?
         WHERE id = ? AND reauth_reason = ?",
    )
    .bind(to_unix(clock.now()))
    .bind(id)
    .bind(KEY_REPLACED)
    .execute(db)
    .await?;
    Ok(())
}

/// Checks a new account's settings without writing anything: its name (valid and free), limit
/// and pools. Onboarding calls it before it spends a sign-in's code or refreshes an imported
/// file's token, so a settings mistake never costs a grant.
pub async fn check_new(
    db: &SqlitePool,
    name: &str,
    pool_ids: &[i64],
    max_concurrency: Option<u32>,
) -> Result<()> {
    let name = validate::name("name", name)?;
    let (lo, hi) = MAX_CONCURRENCY_RANGE;
    validate::range("max_concurrency", max_concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY), lo, hi)?;
    let taken: Option<i64> =
        sqlx::query_scalar("SELECT id FROM accounts WHERE name = ? COLLATE NOCASE AND deleted_at IS NULL")
            .bind(&name)
            .fetch_optional(db)
            .await?;
    if taken.is_some() {
        return Err(Error::Conflict(format!("an account named {name:?} exists")));
    }
    for pool_id in pool_ids {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT id FROM pools WHERE id = ? AND deleted_at IS NULL")
                .bind(pool_id)
                .fetch_optional(db)
                .await?;
        if found.is_none() {
            return Err(Error::field("pool_ids", format!("pool_ids: pool {pool_id} does not exist")));
        }
    }
    Ok(())
}

pub async fn create(
    db: &SqlitePool,
    clock: &dyn Clock,
    sealer: &Sealer,
    new: NewAccount,
) -> Result<AccountView> {
    let name = validate::name("name", &new.name)?;
    let (lo, hi) = MAX_CONCURRENCY_RANGE;
    let max =
        validate::range("max_concurrency", new.max_concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY), lo, hi)?;
    let sealed = new.credentials.as_ref().map(|c| seal(sealer, new.provider, c)).transpose()?;
    let now = to_unix(clock.now());
    let mut tx = db.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO accounts (provider, name, priority, max_concurrency, expires_at, credential_kind,
                               sealed_credential, token_expires_at, provider_account_id, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(new.provider.as_str())
    .bind(&name)
    .bind(new.priority.unwrap_or(0))
    .bind(max)
    .bind(new.expires_at.map(to_unix))
    .bind(sealed.as_ref().map(|s| s.kind))
    .bind(sealed.as_ref().map(|s| s.blob.as_slice()))
    .bind(sealed.as_ref().and_then(|s| s.expires_at))
    .bind(sealed.as_ref().and_then(|s| s.provider_account_id.clone()))
    .bind(now)
    .bind(now)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| Error::on_conflict(e, || format!("an account named {name:?} exists")))?;
    replace_pools(&mut tx, id, &new.pool_ids).await?;
    tx.commit().await?;
    get(db, id).await
}

pub async fn update(
    db: &SqlitePool,
    clock: &dyn Clock,
    sealer: &Sealer,
    id: i64,
    patch: AccountPatch,
) -> Result<AccountView> {
    let current = get(db, id).await?;
    let provider = patch.provider.unwrap_or(current.provider);
    if provider != current.provider && patch.credentials.is_none() && current.credential.kind != "none" {
        return Err(Error::invalid("changing the provider needs new credentials for it"));
    }
    let name = match &patch.name {
        Some(n) => validate::name("name", n)?,
        None => current.name,
    };
    let (lo, hi) = MAX_CONCURRENCY_RANGE;
    let max =
        validate::range("max_concurrency", patch.max_concurrency.unwrap_or(current.max_concurrency), lo, hi)?;
    let sealed = patch.credentials.as_ref().map(|c| seal(sealer, provider, c)).transpose()?;
    let expires_at = patch.expires_at.unwrap_or(current.expires_at);
    let mut tx = db.begin().await?;
    sqlx::query(
        "UPDATE accounts SET provider = ?, name = ?, priority = ?, max_concurrency = ?, expires_at = ?, updated_at = ?
         WHERE id = ?",
    )
    .bind(provider.as_str())
    .bind(&name)
    .bind(patch.priority.unwrap_or(current.priority))
    .bind(max)
    .bind(expires_at.map(to_unix))
    .bind(to_unix(clock.now()))
    .bind(id)
    .execute(&mut *tx)
    .await
    .map_err(|e| Error::on_conflict(e, || format!("an account named {name:?} exists")))?;
    if let Some(s) = sealed {
        // New credentials are a re-authorization: a new lifecycle revision (old limits no longer
        // apply, ACC-4), and the old token's refusal and re-authorization mark go (CRED-4), as
        // does the error of credentials a replaced key could not open (`credentials_unreadable`).
        sqlx::query(
            "UPDATE accounts SET status = CASE status WHEN 'error' THEN 'active' ELSE status END,
                    credential_kind = ?, sealed_credential = ?, token_expires_at = ?,
                    provider_account_id = ?, lifecycle_revision = lifecycle_revision + 1,
                    quota_revision = quota_revision + 1, token_refreshed_at = NULL, token_rejected_at = NULL,
                    reauth_required_at = NULL, reauth_reason = NULL,
                    credential_version = credential_version + 1
             WHERE id = ?",
        )
        .bind(s.kind)
        .bind(s.blob)
        .bind(s.expires_at)
        .bind(s.provider_account_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    if let Some(pool_ids) = &patch.pool_ids {
        replace_pools(&mut tx, id, pool_ids).await?;
    }
    tx.commit().await?;
    get(db, id).await
}

/// ACC-3 actions that change an account's stored lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Status back to active from disabled (an account in error stays in error).
    Enable,
    Disable,
    /// Status back to active from error; nothing else.
    ClearError,
    /// Manual switch: the account takes new requests or not (nothing else changes).
    Schedulable(bool),
    /// A manual clear of runtime limits (Clear cooldown, Recover): a new lifecycle revision so
    /// limits persisted under the old one are never reloaded (ACC-4).
    NewRevision,
    /// Recover state: status active from error, and a new revision.
    Recover,
}

/// Applies `action`; returns the account and its lifecycle revision afterwards.
pub async fn change(
    db: &SqlitePool,
    clock: &dyn Clock,
    id: i64,
    action: Lifecycle,
) -> Result<(AccountView, i64)> {
    get(db, id).await?;
    let sql = match action {
        Lifecycle::Enable => {
            "UPDATE accounts SET status = 'active', lifecycle_revision = lifecycle_revision + 1,
                    quota_revision = quota_revision + 1, updated_at = ?
             WHERE id = ? AND status = 'disabled'"
        }
        Lifecycle::Disable => {
            "UPDATE accounts SET status = 'disabled', lifecycle_revision = lifecycle_revision + 1,
                    quota_revision = quota_revision + 1, updated_at = ?
             WHERE id = ? AND status <> 'disabled'"
        }
        Lifecycle::ClearError => {
            "UPDATE accounts SET status = 'active', updated_at = ? WHERE id = ? AND status = 'error'"
        }
        Lifecycle::Schedulable(true) => "UPDATE accounts SET schedulable = 1, updated_at = ? WHERE id = ?",
        Lifecycle::Schedulable(false) => "UPDATE accounts SET schedulable = 0, updated_at = ? WHERE id = ?",
        Lifecycle::NewRevision => {
            "UPDATE accounts SET lifecycle_revision = lifecycle_revision + 1, updated_at = ? WHERE id = ?"
        }
        Lifecycle::Recover => {
            "UPDATE accounts SET status = CASE status WHEN 'error' THEN 'active' ELSE status END,
                    lifecycle_revision = lifecycle_revision + 1, updated_at = ? WHERE id = ?"
        }
    };
    sqlx::query(sql).bind(to_unix(clock.now())).bind(id).execute(db).await?;
    let revision: i64 = sqlx::query_scalar("SELECT lifecycle_revision FROM accounts WHERE id = ?")
        .bind(id)
        .fetch_one(db)
        .await?;
    Ok((get(db, id).await?, revision))
}

/// Soft delete (ACC-5): the row stays so history can say "deleted"; secrets and pools go.
pub async fn delete(db: &SqlitePool, clock: &dyn Clock, id: i64) -> Result<()> {
    let mut tx = db.begin().await?;
    let done = sqlx::query(
        "UPDATE accounts SET deleted_at = ?, sealed_credential = NULL, status = 'disabled', schedulable = 0
         WHERE id = ? AND deleted_at IS NULL",
    )
    .bind(to_unix(clock.now()))
    .bind(id)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound("account"));
    }
    sqlx::query("DELETE FROM account_pools WHERE account_id = ?").bind(id).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

async fn replace_pools(tx: &mut Transaction<'_, Sqlite>, account_id: i64, pool_ids: &[i64]) -> Result<()> {
    // A form loaded before a pool was deleted must not put the account back into it.
    for pool_id in pool_ids {
        let live: Option<i64> =
            sqlx::query_scalar("SELECT id FROM pools WHERE id = ? AND deleted_at IS NULL")
                .bind(pool_id)
                .fetch_optional(&mut **tx)
                .await?;
        if live.is_none() {
            return Err(Error::field("pool_ids", format!("pool_ids: pool {pool_id} does not exist")));
        }
    }
    sqlx::query("DELETE FROM account_pools WHERE account_id = ?").bind(account_id).execute(&mut **tx).await?;
    for pool_id in pool_ids {
        sqlx::query("INSERT OR IGNORE INTO account_pools (account_id, pool_id) VALUES (?, ?)")
            .bind(account_id)
            .bind(pool_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
