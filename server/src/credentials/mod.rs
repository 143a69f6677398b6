//! Account credentials that stay alive (CRED-1..CRED-4), and bringing accounts in (CRED-5,
//! `onboarding`).
//!
//! Each account has one [`TokenCell`], shared by every directory snapshot, that holds its current
//! tokens. A request reads a usable token from it; when the access token is close to expiry the
//! cell refreshes it first:
//! - **One refresh at a time per account.** A rotating refresh token must never be spent twice:
//!   callers queue on the cell's refresh lock, and those who waited use the tokens the refresh
//!   brought.
//! - **Sealed before used.** A refresh's new tokens are sealed and stored (compare-and-swap on the
//!   old sealed blob, so a concurrent re-authorization wins) before anyone uses them; a refresh
//!   never starts a new lifecycle revision (cooldowns and bindings survive it).
//! - **Backoff per account** (in this process only): 30 s, 1 min, 2 min, 4 min, then 5 min, or the
//!   token endpoint's Retry-After up to 1 h; no background polling: the next request after the
//!   backoff tries again. A Codex token with more than 30 s left that was not refused upstream
//!   stays usable meanwhile; Claude and Antigravity need a fresh one (CRED-1).
//! - **Terminal answers only mark re-authorization** (`invalid_grant`, a reused or revoked
//!   refresh token, a refreshed token still refused upstream): stored with the account, so a
//!   restart never revives it. Unknown errors only back off.
//! - While an account has no usable token the scheduler leaves it out (a credential block): a
//!   bound conversation is told `account_refresh_failed` with Retry-After and keeps its binding.

pub mod onboarding;
pub mod refresh;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use app::model::{CredentialInput, Provider, TokenState};
use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use crate::{
    accounts::SEAL_PURPOSE,
    clock::{SharedClock, to_unix},
    config::{OAuthClients, UpstreamUrls},
    crypto::Sealer,
    scheduler::Scheduler,
};
use refresh::Answer;

/// A token this close to expiry is refreshed before use (CRED-1).
pub const REFRESH_AHEAD: Duration = Duration::from_secs(120);
/// A Codex token with more than this left may still be used while its refresh backs off.
pub const CODEX_GRACE: Duration = Duration::from_secs(30);
/// The refresh backoff ladder (CRED-2).
pub const BACKOFF: [Duration; 5] = [
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(120),
    Duration::from_secs(240),
    Duration::from_secs(300),
];

/// Why no usable token can be had now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Refreshing failed and backs off; try again after this many seconds (503
    /// `account_refresh_failed` with Retry-After, CRED-3).
    Unavailable { retry_after: u64 },
    /// The grant is gone: an admin must re-authorize the account (CRED-4).
    ReauthRequired,
}

/// The live state of one account's credentials.
struct Held {
    credentials: CredentialInput,
    /// The sealed blob these credentials are stored as: a directory reload that finds another
    /// one means an admin changed them (re-authorization, new key).
    sealed: Vec<u8>,
    /// The current access token was refused upstream: it is never used again (CRED-1, CRED-3).
    rejected: bool,
    reauth: Option<String>,
    failures: u32,
    /// Refreshing waits until then (unix ms).
    backoff_until: Option<i64>,
    /// Why the last refresh failed (a short code such as `token_endpoint_500`), until one works.
    last_error: Option<String>,
    refreshed_at: Option<i64>,
}

/// One account's credentials, shared by every snapshot of the directory.
pub struct TokenCell {
    pub account_id: i64,
    pub provider: Provider,
    held: Mutex<Held>,
    /// Held while a refresh is under way: one at a time per account.
    refreshing: tokio::sync::Mutex<()>,
}

impl TokenCell {
    /// A cell that only hands out `credentials` (benchmarks and unit tests of other modules).
    pub fn fixed(account_id: i64, provider: Provider, credentials: CredentialInput) -> Arc<TokenCell> {
        Arc::new(TokenCell {
            account_id,
            provider,
            held: Mutex::new(Held {
                credentials,
                sealed: Vec::new(),
                rejected: false,
                reauth: None,
                failures: 0,
                backoff_until: None,
                last_error: None,
                refreshed_at: None,
            }),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The credentials as they are now, whatever their state (targets that need no refresh:
    /// API keys; the Test action).
    pub fn current(&self) -> CredentialInput {
        self.held().credentials.clone()
    }
}

/// What is stored beside an account's sealed credential, read with the directory.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// The stored access token was refused upstream.
    pub rejected: bool,
    /// Re-authorization required, and why.
    pub reauth: Option<String>,
    /// The last successful refresh (unix ms).
    pub refreshed_at: Option<i64>,
}

impl Flags {
    /// From the `accounts` columns `token_rejected_at`, `reauth_required_at`, `reauth_reason`
    /// and `token_refreshed_at` (unix seconds).
    pub fn from_columns(
        rejected_at: Option<i64>,
        reauth_at: Option<i64>,
        reauth_reason: Option<String>,
        refreshed_at: Option<i64>,
    ) -> Flags {
        Flags {
            rejected: rejected_at.is_some(),
            reauth: reauth_at.map(|_| reauth_reason.unwrap_or_else(|| "reauth_required".into())),
            refreshed_at: refreshed_at.map(|s| s * 1000),
        }
    }
}

/// Every account's token cell, and the refreshing.
pub struct Tokens {
    cells: Mutex<HashMap<i64, Arc<TokenCell>>>,
    http: reqwest::Client,
    urls: UpstreamUrls,
    clients: OAuthClients,
    db: SqlitePool,
    sealer: Arc<Sealer>,
    clock: SharedClock,
    scheduler: Arc<Scheduler>,
}

impl Tokens {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        http: reqwest::Client,
        urls: UpstreamUrls,
        clients: OAuthClients,
        db: SqlitePool,
        sealer: Arc<Sealer>,
        clock: SharedClock,
        scheduler: Arc<Scheduler>,
    ) -> Self {
        Tokens { cells: Mutex::default(), http, urls, clients, db, sealer, clock, scheduler }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// The cell of an account as the directory reads it. Stored credentials other than the ones
    /// the cell holds (an admin's re-authorization or new key: another sealed blob) replace them
    /// and clear the backoff; the ones a refresh wrote change nothing. `open` unseals the stored
    /// credentials, called only when they are needed; `None` when they cannot be opened.
    pub fn cell(
        &self,
        account_id: i64,
        provider: Provider,
        sealed: &[u8],
        open: impl FnOnce() -> Option<CredentialInput>,
        flags: Flags,
    ) -> Option<Arc<TokenCell>> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        let known = cells.get(&account_id).filter(|c| c.provider == provider).cloned();
        let (cell, replaced) = match known {
            Some(cell) if cell.held().sealed == sealed => (cell, false),
            Some(cell) => {
                let credentials = open()?;
                let mut held = cell.held();
                held.credentials = credentials;
                held.sealed = sealed.to_vec();
                held.failures = 0;
                held.backoff_until = None;
                held.last_error = None;
                drop(held);
                (cell, true)
            }
            None => {
                let cell = TokenCell::fixed(account_id, provider, open()?);
                cell.held().sealed = sealed.to_vec();
                cells.insert(account_id, Arc::clone(&cell));
                (cell, true)
            }
        };
        drop(cells);
        let mut held = cell.held();
        held.rejected = flags.rejected;
        let was_blocked = held.reauth.is_some();
        held.reauth = flags.reauth;
        held.refreshed_at = held.refreshed_at.max(flags.refreshed_at);
        let blocked = held.reauth.is_some();
        drop(held);
        if blocked {
            self.scheduler.set_credential_block(account_id, Some(i64::MAX));
        } else if replaced || was_blocked {
            self.scheduler.set_credential_block(account_id, None);
        }
        Some(cell)
    }

    /// Credentials to send upstream now, refreshing first when the access token is close to its
    /// end (or was refused). OAuth only; API keys are returned as they are.
    pub async fn usable(&self, cell: &TokenCell) -> Result<CredentialInput, TokenError> {
        self.usable_or_refresh(cell, false).await
    }

    /// An admin's "Refresh token" (ACC-3): now, whatever the expiry or the backoff.
    pub async fn refresh_now(&self, cell: &TokenCell) -> Result<CredentialInput, TokenError> {
        self.usable_or_refresh(cell, true).await
    }

    /// The model endpoint refused `used` (401): the token is marked refused, and a refreshed one
    /// comes back for one retry. `retried`: `used` is already the token a refresh brought for this
    /// request, so the grant is no good: re-authorization (CRED-4).
    pub async fn refused(
        &self,
        cell: &TokenCell,
        used: &CredentialInput,
        retried: bool,
    ) -> Result<CredentialInput, TokenError> {
        if retried {
            self.reauth_required(cell, "refreshed_token_refused").await;
            return Err(TokenError::ReauthRequired);
        }
        let current = cell.current();
        if access_of(&current) != access_of(used) {
            return Ok(current); // someone refreshed meanwhile: try with that
        }
        self.mark_rejected(cell).await;
        self.usable_or_refresh(cell, false).await
    }

    async fn usable_or_refresh(&self, cell: &TokenCell, forced: bool) -> Result<CredentialInput, TokenError> {
        if let Some(ok) = self.check(cell, forced)? {
            return Ok(ok);
        }
        // One refresh at a time: whoever waited here uses what the one before brought. A forced
        // refresh (the admin's) still goes ahead unless one happened while it waited.
        let before = forced.then(|| cell.held().sealed.clone());
        let _turn = cell.refreshing.lock().await;
        let refreshed_meanwhile = before.is_some_and(|b| b != cell.held().sealed);
        if (!forced || refreshed_meanwhile)
            && let Some(ok) = self.check(cell, false)?
        {
            return Ok(ok);
        }
        // Nothing to refresh with: usable while it lasts and is not refused; after that only a
        // re-authorization helps.
        let plan = refresh_plan(&cell.held(), self.now_ms());
        let (refresh_token, sealed) = match plan {
            Plan::Refresh { refresh_token, sealed } => (refresh_token, sealed),
            Plan::Dead => {
                self.reauth_required(cell, "no_refresh_token").await;
                return Err(TokenError::ReauthRequired);
            }
            Plan::Keep => return self.fallback(cell, &cell.held(), None),
        };
        let provider = cell.provider;
        let now = self.clock.now();
        let answer =
            refresh::refresh(&self.http, &self.urls, &self.clients, provider, &refresh_token, now).await;
        match answer {
            Answer::Fresh(fresh) => self.store_fresh(cell, &sealed, fresh).await,
            Answer::Terminal(reason) => {
                tracing::warn!(account_id = cell.account_id, %reason, "refresh refused: re-authorization required");
                self.reauth_required(cell, &reason).await;
                Err(TokenError::ReauthRequired)
            }
            Answer::Transient { reason, retry_after } => {
                tracing::warn!(account_id = cell.account_id, %reason, "token refresh failed; backing off");
                let mut held = cell.held();
                let step = BACKOFF[usize::min(held.failures as usize, BACKOFF.len() - 1)];
                let wait = retry_after.map_or(step, |r| r.max(step));
                held.failures = held.failures.saturating_add(1);
                held.last_error = Some(reason);
                let until = self.now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                held.backoff_until = Some(until);
                let result = self.fallback(cell, &held, Some(until));
                drop(held);
                match result {
                    // The admin asked for a refresh: say it failed, though the old token serves on.
                    Ok(_) if forced => {
                        Err(TokenError::Unavailable { retry_after: secs_until(until, self.now_ms()) })
                    }
                    Ok(c) => Ok(c),
                    Err(e) => {
                        self.scheduler.set_credential_block(cell.account_id, Some(until));
                        Err(e)
                    }
                }
            }
        }
    }

    /// `Some(credentials)` when they can be used as they are; `Ok(None)` when a refresh should be
    /// tried now; an error when it may not be tried yet and nothing is usable.
    fn check(&self, cell: &TokenCell, forced: bool) -> Result<Option<CredentialInput>, TokenError> {
        let held = cell.held();
        if held.reauth.is_some() {
            return Err(TokenError::ReauthRequired);
        }
        let CredentialInput::OAuth { expires_at, .. } = &held.credentials else {
            return Ok(Some(held.credentials.clone()));
        };
        let now = self.now_ms();
        let fresh_enough =
            !held.rejected && expires_at.is_none_or(|e| e.timestamp_millis() - now > ms(REFRESH_AHEAD));
        if fresh_enough && !forced {
            return Ok(Some(held.credentials.clone()));
        }
        match held.backoff_until.filter(|until| *until > now) {
            Some(until) if !forced => self.fallback(cell, &held, Some(until)).map(Some),
            _ => Ok(None),
        }
    }

    /// While refreshing is not possible: the current token if it may still be used (CRED-1).
    fn fallback(
        &self,
        cell: &TokenCell,
        held: &Held,
        until: Option<i64>,
    ) -> Result<CredentialInput, TokenError> {
        let now = self.now_ms();
        let left = match &held.credentials {
            CredentialInput::OAuth { expires_at, .. } => expires_at.map(|e| e.timestamp_millis() - now),
            CredentialInput::ApiKey { .. } => return Ok(held.credentials.clone()),
        };
        let grace = match cell.provider {
            Provider::Codex => ms(CODEX_GRACE),
            // Claude and Antigravity need a valid token: one that a refresh was due for is not.
            _ => ms(REFRESH_AHEAD),
        };
        if !held.rejected && left.is_none_or(|l| l > grace) {
            return Ok(held.credentials.clone());
        }
        Err(TokenError::Unavailable { retry_after: until.map_or(1, |u| secs_until(u, now)) })
    }

    /// Seals and stores a refresh's tokens, then hands them out (CRED-1: sealed before used).
    async fn store_fresh(
        &self,
        cell: &TokenCell,
        old_sealed: &[u8],
        fresh: refresh::Fresh,
    ) -> Result<CredentialInput, TokenError> {
        let credentials = {
            let held = cell.held();
            match &held.credentials {
                CredentialInput::OAuth { refresh_token, provider_account_id, .. } => CredentialInput::OAuth {
                    access_token: fresh.access_token,
                    refresh_token: fresh.refresh_token.or_else(|| refresh_token.clone()),
                    expires_at: fresh.expires_at,
                    provider_account_id: fresh.provider_account_id.or_else(|| provider_account_id.clone()),
                },
                other => other.clone(),
            }
        };
        let now = self.clock.now();
        let sealed = match persist::fresh(
            &self.db,
            &self.sealer,
            cell.account_id,
            old_sealed,
            &credentials,
            now,
        )
        .await
        {
            Ok(Some(sealed)) => sealed,
            Ok(None) => {
                // Re-authorized meanwhile: those credentials win; the directory brings them.
                tracing::info!(
                    account_id = cell.account_id,
                    "refreshed tokens dropped: the account was re-authorized"
                );
                return Err(TokenError::Unavailable { retry_after: 1 });
            }
            Err(e) => {
                // Not stored: a rotated refresh token must not be used only in memory.
                tracing::error!(account_id = cell.account_id, error = %e, "refreshed tokens could not be stored");
                return Err(TokenError::Unavailable { retry_after: 5 });
            }
        };
        {
            let mut held = cell.held();
            held.credentials = credentials.clone();
            held.sealed = sealed;
            held.rejected = false;
            held.failures = 0;
            held.backoff_until = None;
            held.last_error = None;
            held.refreshed_at = Some(now.timestamp_millis());
        }
        self.scheduler.set_credential_block(cell.account_id, None);
        tracing::info!(account_id = cell.account_id, "account token refreshed");
        Ok(credentials)
    }

    async fn mark_rejected(&self, cell: &TokenCell) {
        cell.held().rejected = true;
        if let Err(e) = persist::rejected(&self.db, cell.account_id, self.clock.now()).await {
            tracing::error!(account_id = cell.account_id, error = %e, "a refused token could not be recorded");
        }
    }

    async fn reauth_required(&self, cell: &TokenCell, reason: &str) {
        cell.held().reauth = Some(reason.to_owned());
        self.scheduler.set_credential_block(cell.account_id, Some(i64::MAX));
        if let Err(e) = persist::reauth_required(&self.db, cell.account_id, reason, self.clock.now()).await {
            tracing::error!(account_id = cell.account_id, error = %e, "re-authorization mark could not be stored");
        }
    }

    /// What may be shown of an account's tokens (UI-3): expiry, last refresh, backoff,
    /// re-authorization.
    pub fn state(&self, account_id: i64) -> Option<TokenState> {
        let cell = self.cells.lock().unwrap_or_else(|p| p.into_inner()).get(&account_id).cloned()?;
        let held = cell.held();
        let CredentialInput::OAuth { expires_at, refresh_token, .. } = &held.credentials else { return None };
        let now = self.now_ms();
        Some(TokenState {
            expires_at: expires_at.map(to_unix),
            refreshable: refresh_token.is_some(),
            refreshed_at: held.refreshed_at.map(|ms| ms.div_euclid(1000)),
            backoff_until: held.backoff_until.filter(|u| *u > now).map(|u| (u + 999).div_euclid(1000)),
            rejected: held.rejected,
            reauth_required: held.reauth.clone(),
            last_error: held.last_error.clone(),
        })
    }

    /// The cell of account `id`, if the directory has loaded it.
    pub fn find(&self, id: i64) -> Option<Arc<TokenCell>> {
        self.cells.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// The cell of account `id`, read from the database when the directory has not loaded it
    /// (a disabled or switched-off account, for the admin's Test and Refresh token). `None` when
    /// the account has no credentials.
    pub async fn load(&self, id: i64) -> crate::error::Result<Option<Arc<TokenCell>>> {
        if let Some(cell) = self.find(id) {
            return Ok(Some(cell));
        }
        type Row = (String, Option<Vec<u8>>, Option<i64>, Option<i64>, Option<String>, Option<i64>);
        let row: Option<Row> = sqlx::query_as(
            "SELECT provider, sealed_credential, token_rejected_at, reauth_required_at, reauth_reason, token_refreshed_at
             FROM accounts WHERE id = ? AND deleted_at IS NULL",
        )
        .bind(id)
        .fetch_optional(&self.db)
        .await?;
        let (provider, sealed, rejected_at, reauth_at, reason, refreshed_at) =
            row.ok_or(crate::error::Error::NotFound("account"))?;
        let (Some(provider), Some(sealed)) = (Provider::parse(&provider), sealed) else { return Ok(None) };
        let flags = Flags::from_columns(rejected_at, reauth_at, reason, refreshed_at);
        let open = || open_sealed(&self.sealer, &sealed);
        Ok(self.cell(id, provider, &sealed, open, flags))
    }
}

/// Opens a sealed credential; `None` when it cannot be (wrong key, damaged).
pub fn open_sealed(sealer: &Sealer, sealed: &[u8]) -> Option<CredentialInput> {
    let plain = sealer.open(SEAL_PURPOSE, sealed).ok()?;
    serde_json::from_slice(&plain).ok()
}

/// What a refresh turn does with the credentials it finds.
enum Plan {
    Refresh {
        refresh_token: String,
        sealed: Vec<u8>,
    },
    /// No refresh token, and the access token expired or was refused.
    Dead,
    /// No refresh token, but the access token may still be used.
    Keep,
}

fn refresh_plan(held: &Held, now_ms: i64) -> Plan {
    match &held.credentials {
        CredentialInput::OAuth { refresh_token: Some(r), .. } => {
            Plan::Refresh { refresh_token: r.clone(), sealed: held.sealed.clone() }
        }
        CredentialInput::OAuth { expires_at, .. } => {
            let expired = expires_at.is_some_and(|e| e.timestamp_millis() <= now_ms);
            if held.rejected || expired { Plan::Dead } else { Plan::Keep }
        }
        CredentialInput::ApiKey { .. } => Plan::Keep,
    }
}

fn access_of(c: &CredentialInput) -> &str {
    match c {
        CredentialInput::OAuth { access_token, .. } => access_token,
        CredentialInput::ApiKey { api_key } => api_key,
    }
}

/// Whole seconds from `now` until `until` (unix ms), rounded up, at least 1 (a Retry-After).
fn secs_until(until: i64, now: i64) -> u64 {
    ((until - now).max(0) as u64).div_ceil(1000).max(1)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Writes of the token lifecycle, beside the sealed credential.
mod persist {
    use super::*;

    /// Stores refreshed credentials if the stored ones are still `old` (a re-authorization
    /// meanwhile wins); returns the new sealed blob, or `None` when they were replaced.
    pub(super) async fn fresh(
        db: &SqlitePool,
        sealer: &Sealer,
        account_id: i64,
        old: &[u8],
        credentials: &CredentialInput,
        now: DateTime<Utc>,
    ) -> crate::error::Result<Option<Vec<u8>>> {
        let plain =
            serde_json::to_vec(credentials).map_err(|e| crate::error::Error::Internal(e.to_string()))?;
        let sealed = sealer.seal(SEAL_PURPOSE, &plain)?;
        let (expires_at, provider_account_id) = match credentials {
            CredentialInput::OAuth { expires_at, provider_account_id, .. } => {
                (expires_at.map(to_unix), provider_account_id.clone())
            }
            CredentialInput::ApiKey { .. } => (None, None),
        };
        let done = sqlx::query(
            "UPDATE accounts SET sealed_credential = ?, token_expires_at = ?, token_refreshed_at = ?,
                    token_rejected_at = NULL, provider_account_id = COALESCE(?, provider_account_id)
             WHERE id = ? AND sealed_credential = ? AND deleted_at IS NULL",
        )
        .bind(&sealed)
        .bind(expires_at)
        .bind(to_unix(now))
        .bind(provider_account_id)
        .bind(account_id)
        .bind(old)
        .execute(db)
        .await?;
        Ok((done.rows_affected() == 1).then_some(sealed))
    }

    pub(super) async fn rejected(
        db: &SqlitePool,
        account_id: i64,
        now: DateTime<Utc>,
    ) -> crate::error::Result<()> {
        sqlx::query("UPDATE accounts SET token_rejected_at = ? WHERE id = ?")
            .bind(to_unix(now))
            .bind(account_id)
            .execute(db)
            .await?;
        Ok(())
    }

    pub(super) async fn reauth_required(
        db: &SqlitePool,
        account_id: i64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> crate::error::Result<()> {
        sqlx::query("UPDATE accounts SET reauth_required_at = ?, reauth_reason = ? WHERE id = ?")
            .bind(to_unix(now))
            .bind(reason)
            .bind(account_id)
            .execute(db)
            .await?;
        Ok(())
    }
}
