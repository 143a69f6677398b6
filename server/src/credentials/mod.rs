//! Account credentials that stay alive (CRED-1..CRED-4), and bringing accounts in (CRED-5,
//! `onboarding`).
//!
//! Each account has one [`TokenCell`], shared by every directory snapshot, that holds its current
//! tokens. A request reads a usable token from it; when the access token is close to expiry the
//! cell refreshes it first:
//! - **One refresh at a time per account.** A rotating refresh token must never be spent twice:
//!   callers queue on the cell's refresh lock, and those who waited use the tokens the refresh
//!   brought. The refresh runs in a task of its own, so a client that goes away mid-refresh
//!   never loses a token the provider has already rotated.
//! - **Sealed before used.** A refresh's new tokens are sealed and stored (compare-and-swap on the
//!   old sealed blob, so a concurrent re-authorization wins) before anyone uses them; a refresh
//!   never starts a new lifecycle revision (cooldowns and bindings survive it).
//! - **Versioned.** Every write of a credential or its marks raises `credential_version`; a cell
//!   takes a row only when it is at least as new as what it holds, so a directory reload that
//!   read the row before a refresh never puts a spent refresh token back. Marks (refused,
//!   re-authorization required) are written only onto the credential they are about.
//! - **Backoff per account** (in this process only): 30 s, 1 min, 2 min, 4 min, then 5 min, or the
//!   token endpoint's Retry-After up to 1 h; no background polling: the next request after the
//!   backoff tries again. Meanwhile a Codex token with more than 30 s left that was not refused
//!   upstream stays usable; Claude and Antigravity tokens while they are valid (CRED-1).
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
    scheduler::{Scheduler, state::retry_secs_until},
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
    /// Shared with the requests using them: handing them out copies no token.
    credentials: Arc<CredentialInput>,
    /// The sealed blob these credentials are stored as (the compare-and-swap key of every write).
    sealed: Vec<u8>,
    /// `credential_version` of what is held: a row with a lower one is older than this.
    version: i64,
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
    /// A new cell holding `credentials` (not stored anywhere: [`Tokens::cell`] sets what is;
    /// benchmarks and other modules' unit tests use it as it is).
    pub fn fixed(account_id: i64, provider: Provider, credentials: CredentialInput) -> Arc<TokenCell> {
        Arc::new(TokenCell {
            account_id,
            provider,
            held: Mutex::new(Held {
                credentials: Arc::new(credentials),
                sealed: Vec::new(),
                version: 0,
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
    /// `credential_version` of the row.
    pub version: i64,
}

impl Flags {
    /// From the `accounts` columns `token_rejected_at`, `reauth_required_at`, `reauth_reason`,
    /// `token_refreshed_at` (unix seconds) and `credential_version`.
    pub fn from_columns(
        rejected_at: Option<i64>,
        reauth_at: Option<i64>,
        reauth_reason: Option<String>,
        refreshed_at: Option<i64>,
        version: i64,
    ) -> Flags {
        Flags {
            rejected: rejected_at.is_some(),
            reauth: reauth_at.map(|_| reauth_reason.unwrap_or_else(|| "reauth_required".into())),
            refreshed_at: refreshed_at.map(|s| s * 1000),
            version,
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
    /// Token endpoint calls are counted (OPS-4).
    metrics: Arc<crate::metrics::Metrics>,
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
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Tokens { cells: Mutex::default(), http, urls, clients, db, sealer, clock, scheduler, metrics }
    }

    fn now_ms(&self) -> i64 {
        self.clock.unix_ms()
    }

    /// The cell of an account as the directory reads it. A row newer than what the cell holds
    /// (a higher `credential_version`: an admin's re-authorization or new key, or another
    /// process's write) replaces its credentials and marks and clears the backoff; the row the
    /// cell's own writes produced changes nothing; an older row (read before a refresh that has
    /// since been stored) is ignored. `open` unseals the stored credentials, called only when
    /// they are needed; `None` when they cannot be opened.
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
        let cell = match known {
            Some(cell) => {
                let take = {
                    let held = cell.held();
                    Take::of(held.version, &held.sealed, flags.version, sealed)
                };
                if take == Take::Nothing {
                    return Some(cell);
                }
                if take == Take::Everything {
                    let credentials = open()?;
                    let mut held = cell.held();
                    held.credentials = Arc::new(credentials);
                    held.sealed = sealed.to_vec();
                    held.failures = 0;
                    held.backoff_until = None;
                    held.last_error = None;
                }
                cell
            }
            None => {
                let cell = TokenCell::fixed(account_id, provider, open()?);
                cell.held().sealed = sealed.to_vec();
                cells.insert(account_id, Arc::clone(&cell));
                cell
            }
        };
        drop(cells);
        let mut held = cell.held();
        held.version = flags.version;
        held.rejected = flags.rejected;
        held.reauth = flags.reauth;
        held.refreshed_at = held.refreshed_at.max(flags.refreshed_at);
        let blocked = held.reauth.is_some();
        drop(held);
        self.scheduler.set_credential_block(account_id, blocked.then_some(i64::MAX));
        Some(cell)
    }

    /// Credentials to send upstream now, refreshing first when the access token is close to its
    /// end (or was refused). OAuth only; API keys are returned as they are.
    pub async fn usable(self: &Arc<Self>, cell: &Arc<TokenCell>) -> Result<Arc<CredentialInput>, TokenError> {
        self.usable_or_refresh(cell, false).await
    }

    /// An admin's "Refresh token" (ACC-3): now, whatever the expiry or the backoff.
    pub async fn refresh_now(
        self: &Arc<Self>,
        cell: &Arc<TokenCell>,
    ) -> Result<Arc<CredentialInput>, TokenError> {
        self.usable_or_refresh(cell, true).await
    }

    /// The model endpoint refused `used` (401): the token is marked refused, and a refreshed one
    /// comes back for one retry. `retried`: `used` is already the token a refresh brought for this
    /// request, so the grant is no good: re-authorization (CRED-4).
    pub async fn refused(
        self: &Arc<Self>,
        cell: &Arc<TokenCell>,
        used: &CredentialInput,
        retried: bool,
    ) -> Result<Arc<CredentialInput>, TokenError> {
        let sealed = {
            let held = cell.held();
            if access_of(&held.credentials) != access_of(used) {
                // Someone refreshed or re-authorized meanwhile: try with that.
                return Ok(Arc::clone(&held.credentials));
            }
            held.sealed.clone()
        };
        if retried {
            self.reauth_required(cell, &sealed, "refreshed_token_refused").await;
            return Err(TokenError::ReauthRequired);
        }
        self.mark_rejected(cell, &sealed).await;
        self.usable_or_refresh(cell, false).await
    }

    async fn usable_or_refresh(
        self: &Arc<Self>,
        cell: &Arc<TokenCell>,
        forced: bool,
    ) -> Result<Arc<CredentialInput>, TokenError> {
        if let Some(ok) = self.check(cell, forced)? {
            return Ok(ok);
        }
        // The turn runs on its own task: a caller that goes away (a client disconnecting) never
        // cancels a refresh between the provider's rotation and the store.
        let before = forced.then(|| cell.held().sealed.clone());
        let (this, turn_cell) = (Arc::clone(self), Arc::clone(cell));
        let turn = tokio::spawn(async move { this.refresh_turn(&turn_cell, before).await });
        turn.await.unwrap_or(Err(TokenError::Unavailable { retry_after: 1 }))
    }

    /// One refresh turn under the cell's lock. Whoever waited for the lock uses what the turn
    /// before brought; a forced refresh (`before`: the sealed blob when the admin asked) still
    /// goes ahead unless one happened while it waited.
    async fn refresh_turn(
        &self,
        cell: &TokenCell,
        before: Option<Vec<u8>>,
    ) -> Result<Arc<CredentialInput>, TokenError> {
        let forced = before.is_some();
        let _turn = cell.refreshing.lock().await;
        let refreshed_meanwhile = before.is_some_and(|b| b != cell.held().sealed);
        if (!forced || refreshed_meanwhile)
            && let Some(ok) = self.check(cell, false)?
        {
            return Ok(ok);
        }
        let plan = refresh_plan(&cell.held(), self.now_ms());
        let (refresh_token, sealed) = match plan {
            Plan::Refresh { refresh_token, sealed } => (refresh_token, sealed),
            // Nothing to refresh with: usable while it lasts and is not refused; after that only
            // a re-authorization helps.
            Plan::Dead { sealed } => {
                self.reauth_required(cell, &sealed, "no_refresh_token").await;
                return Err(TokenError::ReauthRequired);
            }
            Plan::Keep => return self.fallback(cell, &cell.held(), None),
        };
        let now = self.clock.now();
        let answer =
            refresh::refresh(&self.http, &self.urls, &self.clients, cell.provider, &refresh_token, now).await;
        self.metrics.token_refresh(cell.provider.as_str(), matches!(answer, Answer::Fresh(_)));
        match answer {
            Answer::Fresh(fresh) => self.store_fresh(cell, &sealed, fresh).await,
            Answer::Terminal(reason) => {
                tracing::warn!(account_id = cell.account_id, %reason, "refresh refused: re-authorization required");
                self.reauth_required(cell, &sealed, &reason).await;
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
                        Err(TokenError::Unavailable { retry_after: retry_secs_until(until, self.now_ms()) })
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
    /// tried now; an error when it may not be tried yet and nothing is usable (the scheduler then
    /// leaves the account out until the backoff ends).
    fn check(&self, cell: &TokenCell, forced: bool) -> Result<Option<Arc<CredentialInput>>, TokenError> {
        let held = cell.held();
        if held.reauth.is_some() {
            return Err(TokenError::ReauthRequired);
        }
        let CredentialInput::OAuth { expires_at, .. } = held.credentials.as_ref() else {
            return Ok(Some(Arc::clone(&held.credentials)));
        };
        let now = self.now_ms();
        let fresh_enough =
            !held.rejected && expires_at.is_none_or(|e| e.timestamp_millis() - now > ms(REFRESH_AHEAD));
        if fresh_enough && !forced {
            return Ok(Some(Arc::clone(&held.credentials)));
        }
        let Some(until) = held.backoff_until.filter(|until| *until > now && !forced) else { return Ok(None) };
        let result = self.fallback(cell, &held, Some(until));
        drop(held);
        if result.is_err() {
            self.scheduler.set_credential_block(cell.account_id, Some(until));
        }
        result.map(Some)
    }

    /// While refreshing is not possible: the current token if it may still be used (CRED-1): a
    /// Codex one with more than 30 s left, a Claude or Antigravity one while it is valid, and
    /// never one that was refused.
    fn fallback(
        &self,
        cell: &TokenCell,
        held: &Held,
        until: Option<i64>,
    ) -> Result<Arc<CredentialInput>, TokenError> {
        let now = self.now_ms();
        let left = match held.credentials.as_ref() {
            CredentialInput::OAuth { expires_at, .. } => expires_at.map(|e| e.timestamp_millis() - now),
            CredentialInput::ApiKey { .. } => return Ok(Arc::clone(&held.credentials)),
        };
        let grace = match cell.provider {
            Provider::Codex => ms(CODEX_GRACE),
            _ => 0,
        };
        if !held.rejected && left.is_none_or(|l| l > grace) {
            return Ok(Arc::clone(&held.credentials));
        }
        Err(TokenError::Unavailable { retry_after: until.map_or(1, |u| retry_secs_until(u, now)) })
    }

    /// Seals and stores a refresh's tokens, then hands them out (CRED-1: sealed before used).
    async fn store_fresh(
        &self,
        cell: &TokenCell,
        old_sealed: &[u8],
        fresh: refresh::Fresh,
    ) -> Result<Arc<CredentialInput>, TokenError> {
        let credentials = Arc::new({
            let held = cell.held();
            match held.credentials.as_ref() {
                CredentialInput::OAuth { refresh_token, provider_account_id, .. } => CredentialInput::OAuth {
                    access_token: fresh.access_token,
                    refresh_token: fresh.refresh_token.or_else(|| refresh_token.clone()),
                    expires_at: fresh.expires_at,
                    provider_account_id: fresh.provider_account_id.or_else(|| provider_account_id.clone()),
                },
                other => other.clone(),
            }
        });
        let now = self.clock.now();
        let (sealed, version) = match persist::fresh(
            &self.db,
            &self.sealer,
            cell.account_id,
            old_sealed,
            &credentials,
            now,
        )
        .await
        {
            Ok(Some(stored)) => stored,
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
            held.credentials = Arc::clone(&credentials);
            held.sealed = sealed;
            held.version = version;
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

    /// Marks the credential stored as `sealed` refused upstream, if it is still the current one.
    async fn mark_rejected(&self, cell: &TokenCell, sealed: &[u8]) {
        match persist::rejected(&self.db, cell.account_id, sealed, self.clock.now()).await {
            Ok(Some(version)) => {
                let mut held = cell.held();
                if held.sealed == sealed {
                    held.rejected = true;
                    held.version = version;
                }
            }
            Ok(None) => {} // replaced meanwhile: the mark is not about the current credential
            Err(e) => {
                tracing::error!(account_id = cell.account_id, error = %e, "a refused token could not be recorded");
                cell.held().rejected = true;
            }
        }
    }

    /// Marks the credential stored as `sealed` as needing re-authorization, if it is still the
    /// current one (a re-authorization meanwhile is never marked by the old grant's answer).
    async fn reauth_required(&self, cell: &TokenCell, sealed: &[u8], reason: &str) {
        let stored =
            persist::reauth_required(&self.db, cell.account_id, sealed, reason, self.clock.now()).await;
        let apply = |version: Option<i64>| {
            let mut held = cell.held();
            if held.sealed != sealed {
                return false;
            }
            held.reauth = Some(reason.to_owned());
            if let Some(v) = version {
                held.version = v;
            }
            true
        };
        let applied = match stored {
            Ok(Some(version)) => apply(Some(version)),
            Ok(None) => false,
            Err(e) => {
                tracing::error!(account_id = cell.account_id, error = %e, "re-authorization mark could not be stored");
                apply(None)
            }
        };
        if applied {
            self.scheduler.set_credential_block(cell.account_id, Some(i64::MAX));
        }
    }

    /// ACC-3 "Recover state": the refresh backoff goes (a grant that is gone stays gone).
    pub fn clear_backoff(&self, account_id: i64) {
        let Some(cell) = self.find(account_id) else { return };
        let blocked = {
            let mut held = cell.held();
            held.failures = 0;
            held.backoff_until = None;
            held.last_error = None;
            held.reauth.is_some()
        };
        if !blocked {
            self.scheduler.set_credential_block(account_id, None);
        }
    }

    /// A deleted account's cell goes, and its tokens with it.
    pub fn forget(&self, account_id: i64) {
        self.cells.lock().unwrap_or_else(|p| p.into_inner()).remove(&account_id);
        self.scheduler.set_credential_block(account_id, None);
    }

    /// What may be shown of an account's tokens (UI-3): expiry, last refresh, backoff,
    /// re-authorization.
    pub fn state(&self, account_id: i64) -> Option<TokenState> {
        let cell = self.cells.lock().unwrap_or_else(|p| p.into_inner()).get(&account_id).cloned()?;
        let held = cell.held();
        let CredentialInput::OAuth { expires_at, refresh_token, .. } = held.credentials.as_ref() else {
            return None;
        };
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
        type Row = (String, Option<Vec<u8>>, Option<i64>, Option<i64>, Option<String>, Option<i64>, i64);
        let row: Option<Row> = sqlx::query_as(
            "SELECT provider, sealed_credential, token_rejected_at, reauth_required_at, reauth_reason,
                    token_refreshed_at, credential_version
             FROM accounts WHERE id = ? AND deleted_at IS NULL",
        )
        .bind(id)
        .fetch_optional(&self.db)
        .await?;
        let (provider, sealed, rejected_at, reauth_at, reason, refreshed_at, version) =
            row.ok_or(crate::error::Error::NotFound("account"))?;
        let (Some(provider), Some(sealed)) = (Provider::parse(&provider), sealed) else { return Ok(None) };
        let flags = Flags::from_columns(rejected_at, reauth_at, reason, refreshed_at, version);
        let open = || open_sealed(&self.sealer, &sealed);
        Ok(self.cell(id, provider, &sealed, open, flags))
    }
}

/// What a cell takes from a stored row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// The row is not newer than what the cell holds (it may be older: read before a refresh
    /// the cell has since stored, holding a spent refresh token).
    Nothing,
    /// Newer marks on the same credential.
    Marks,
    /// Another credential: re-authorized, a new key.
    Everything,
}

impl Take {
    fn of(held_version: i64, held_sealed: &[u8], row_version: i64, row_sealed: &[u8]) -> Take {
        if row_version < held_version || (row_version == held_version && row_sealed == held_sealed) {
            Take::Nothing
        } else if row_sealed == held_sealed {
            Take::Marks
        } else {
            Take::Everything
        }
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
    Dead {
        sealed: Vec<u8>,
    },
    /// No refresh token, but the access token may still be used.
    Keep,
}

fn refresh_plan(held: &Held, now_ms: i64) -> Plan {
    match held.credentials.as_ref() {
        CredentialInput::OAuth { refresh_token: Some(r), .. } => {
            Plan::Refresh { refresh_token: r.clone(), sealed: held.sealed.clone() }
        }
        CredentialInput::OAuth { expires_at, .. } => {
            let expired = expires_at.is_some_and(|e| e.timestamp_millis() <= now_ms);
            if held.rejected || expired { Plan::Dead { sealed: held.sealed.clone() } } else { Plan::Keep }
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

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Writes of the token lifecycle, beside the sealed credential.
mod persist {
    use super::*;

    /// Stores refreshed credentials if the stored ones are still `old` (a re-authorization
    /// meanwhile wins); returns the new sealed blob and `credential_version`, or `None` when they
    /// were replaced.
    pub(super) async fn fresh(
        db: &SqlitePool,
        sealer: &Sealer,
        account_id: i64,
        old: &[u8],
        credentials: &CredentialInput,
        now: DateTime<Utc>,
    ) -> crate::error::Result<Option<(Vec<u8>, i64)>> {
        let plain =
            serde_json::to_vec(credentials).map_err(|e| crate::error::Error::Internal(e.to_string()))?;
        let sealed = sealer.seal(SEAL_PURPOSE, &plain)?;
        let (expires_at, provider_account_id) = match credentials {
            CredentialInput::OAuth { expires_at, provider_account_id, .. } => {
                (expires_at.map(to_unix), provider_account_id.clone())
            }
            CredentialInput::ApiKey { .. } => (None, None),
        };
        let version: Option<i64> = sqlx::query_scalar(
            "UPDATE accounts SET sealed_credential = ?, token_expires_at = ?, token_refreshed_at = ?,
                    token_rejected_at = NULL, provider_account_id = COALESCE(?, provider_account_id),
                    credential_version = credential_version + 1
             WHERE id = ? AND sealed_credential = ? AND deleted_at IS NULL
             RETURNING credential_version",
        )
        .bind(&sealed)
        .bind(expires_at)
        .bind(to_unix(now))
        .bind(provider_account_id)
        .bind(account_id)
        .bind(old)
        .fetch_optional(db)
        .await?;
        Ok(version.map(|v| (sealed, v)))
    }

    /// Marks the credential stored as `sealed` refused upstream; `None` when it was replaced.
    pub(super) async fn rejected(
        db: &SqlitePool,
        account_id: i64,
        sealed: &[u8],
        now: DateTime<Utc>,
    ) -> crate::error::Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "UPDATE accounts SET token_rejected_at = ?, credential_version = credential_version + 1
             WHERE id = ? AND sealed_credential = ? RETURNING credential_version",
        )
        .bind(to_unix(now))
        .bind(account_id)
        .bind(sealed)
        .fetch_optional(db)
        .await?)
    }

    /// Marks the credential stored as `sealed` as needing re-authorization; `None` when it was
    /// replaced.
    pub(super) async fn reauth_required(
        db: &SqlitePool,
        account_id: i64,
        sealed: &[u8],
        reason: &str,
        now: DateTime<Utc>,
    ) -> crate::error::Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "UPDATE accounts SET reauth_required_at = ?, reauth_reason = ?,
                    credential_version = credential_version + 1
             WHERE id = ? AND sealed_credential = ? RETURNING credential_version",
        )
        .bind(to_unix(now))
        .bind(reason)
        .bind(account_id)
        .bind(sealed)
        .fetch_optional(db)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_takes_only_rows_newer_than_what_it_holds() {
        // a reload that read the row before this process stored a refresh: ignored
        assert_eq!(Take::of(3, b"refreshed", 2, b"spent"), Take::Nothing);
        // the row the cell's own write produced
        assert_eq!(Take::of(3, b"refreshed", 3, b"refreshed"), Take::Nothing);
        // a mark written elsewhere on the same credential
        assert_eq!(Take::of(3, b"refreshed", 4, b"refreshed"), Take::Marks);
        // a re-authorization
        assert_eq!(Take::of(3, b"refreshed", 4, b"new grant"), Take::Everything);
    }
}
