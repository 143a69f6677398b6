//! What an admin can do to an account and see of it (ACC-3, API-1), in one place for the JSON
//! API and the web app: each action changes the stored lifecycle (a new lifecycle revision where
//! old limits must go, ACC-4) and the scheduler's live state together.

use std::collections::HashMap;

use app::model::{
    AccountAction, AccountPatch, AccountRuntime, AccountSettings, AccountStatus, AccountTest, AccountView,
    CredentialImport, CredentialInput, CredentialSource, ModelRuntime, NewAccount, OAuthFinish, OAuthStarted,
    Provider,
};

use crate::{
    accounts::{self, Lifecycle},
    app_state::AppState,
    credentials::TokenError,
    error::{Error, Result},
    scheduler::{RuntimeView, StateAction},
};

/// Applies `action` to account `id`. The test result is there for [`AccountAction::Test`].
pub async fn act(s: &AppState, id: i64, action: AccountAction) -> Result<(AccountView, Option<AccountTest>)> {
    match action {
        AccountAction::Test => test(s, id).await,
        AccountAction::RefreshToken => Ok((refresh_token(s, id).await?, None)),
        other => Ok((change(s, id, other).await?, None)),
    }
}

/// Every action but the test: the stored lifecycle and the live state, together.
async fn change(s: &AppState, id: i64, action: AccountAction) -> Result<AccountView> {
    let (lifecycle, state) = match action {
        AccountAction::ClearCooldown => (Lifecycle::NewRevision, Some(StateAction::ClearCooldowns)),
        AccountAction::Recover => (Lifecycle::Recover, Some(StateAction::Recover)),
        AccountAction::ClearError => (Lifecycle::ClearError, None),
        AccountAction::Enable => (Lifecycle::Enable, None),
        AccountAction::Disable => (Lifecycle::Disable, None),
        AccountAction::SchedulableOn => (Lifecycle::Schedulable(true), None),
        AccountAction::SchedulableOff => (Lifecycle::Schedulable(false), None),
        AccountAction::Test | AccountAction::RefreshToken => {
            return Err(Error::Internal("not a lifecycle change".into()));
        }
    };
    let was_disabled = accounts::get(&s.db, id).await?.status == AccountStatus::Disabled;
    let (view, revision) = accounts::change(&s.db, &*s.clock, id, lifecycle).await?;
    if let Some(state) = state {
        s.scheduler.apply(id, revision, state);
    }
    if matches!(action, AccountAction::Enable | AccountAction::Disable)
        && was_disabled != (view.status == AccountStatus::Disabled)
    {
        // QT-2: quota observed before belongs to another period of the account.
        s.quota.invalidate(id).await?;
    }
    if action == AccountAction::Recover {
        // Every runtime block: the token refresh backoff too (a grant that is gone stays gone).
        s.tokens.clear_backoff(id);
    }
    // Enable/disable and the switch change what is routable: the directory is reloaded at once
    // (an account switched off serves no pool any more), and where capacity may have appeared,
    // waiters get it in queue order or look again (ADM-6).
    s.configuration_changed().await;
    Ok(view)
}

/// ACC-3 "Test": a real upstream request. On success the account recovers its error status and
/// runtime state (as "Recover state"); the manual schedulable switch is never turned back on.
/// A failed test changes nothing: an admin's probe does not cool an account.
async fn test(s: &AppState, id: i64) -> Result<(AccountView, Option<AccountTest>)> {
    let account = accounts::get(&s.db, id).await?;
    // The token the proxy would use now, refreshed first when due (CRED-1).
    let credentials = match token_cell(s, id).await? {
        Some(cell) => match s.tokens.usable(&cell).await {
            Ok(c) => c,
            Err(e) => {
                let error = Some(crate::proxy::call::token_error(&e).code.to_owned());
                let result = AccountTest {
                    ok: false,
                    upstream_status: None,
                    latency_ms: 0,
                    error,
                    account: account.clone(),
                };
                return Ok((account, Some(result)));
            }
        },
        None => match accounts::credentials(&s.db, &s.sealer, id).await? {
            Some(c) => std::sync::Arc::new(c),
            None => return Err(Error::invalid("the account has no credentials to test")),
        },
    };
    let tested = crate::proxy::test_call::run(s, account.provider, &credentials).await;
    let account = if tested.ok { change(s, id, AccountAction::Recover).await? } else { account };
    let result = AccountTest {
        ok: tested.ok,
        upstream_status: tested.upstream_status,
        latency_ms: u64::try_from(tested.latency.as_millis()).unwrap_or(u64::MAX),
        error: tested.error,
        account: account.clone(),
    };
    Ok((account, Some(result)))
}

/// The account's token cell as the proxy uses it, brought up to date with its row (also for an
/// account the directory does not route: disabled or switched off).
async fn token_cell(s: &AppState, id: i64) -> Result<Option<std::sync::Arc<crate::credentials::TokenCell>>> {
    s.tokens.load(id).await
}

/// ACC-3 "Refresh token": refreshes an OAuth account's access token now, whatever its expiry or
/// backoff. Fails with `account_refresh_failed` (the reason and when the backoff ends) or, for a
/// grant that is gone, with a conflict that says to re-authorize.
async fn refresh_token(s: &AppState, id: i64) -> Result<AccountView> {
    let account = accounts::get(&s.db, id).await?;
    if !account.provider.uses_oauth() {
        return Err(Error::invalid("only OAuth accounts have tokens to refresh"));
    }
    let cell = token_cell(s, id).await?.ok_or_else(|| Error::invalid("the account has no credentials"))?;
    if s.tokens.state(id).is_some_and(|t| !t.refreshable) {
        return Err(Error::invalid(
            "the account has no refresh token: re-authorize it to renew its access token",
        ));
    }
    match s.tokens.refresh_now(&cell).await {
        Ok(_) => accounts::get(&s.db, id).await,
        Err(TokenError::Unavailable { retry_after }) => {
            let reason = s.tokens.state(id).and_then(|t| t.last_error).unwrap_or_else(|| "unknown".into());
            Err(Error::RefreshFailed {
                message: format!(
                    "the token could not be refreshed ({reason}); refreshing is tried again after {retry_after} s"
                ),
                retry_after,
            })
        }
        Err(TokenError::ReauthRequired) => {
            Err(Error::Conflict("the grant is gone: re-authorize the account to use it again".into()))
        }
    }
}

/// CRED-5: starts a provider sign-in (authorization code with PKCE).
pub fn start_sign_in(s: &AppState, provider: Provider) -> Result<OAuthStarted> {
    let started = s.onboarding.start(provider)?;
    Ok(OAuthStarted {
        flow_id: started.flow_id,
        provider,
        authorize_url: started.authorize_url,
        redirect_uri: started.redirect_uri,
        expires_at: started.expires_at.timestamp(),
    })
}

/// CRED-5: a new account from a finished sign-in (its provider is the sign-in's).
pub async fn add_signed_in(s: &AppState, f: OAuthFinish) -> Result<AccountView> {
    let settings = AccountSettings {
        name: f.name,
        pool_ids: f.pool_ids,
        priority: f.priority,
        max_concurrency: f.max_concurrency,
        expires_at: Some(f.expires_at),
    };
    let source = CredentialSource { flow_id: Some(f.flow_id), code: Some(f.code), ..Default::default() };
    add(s, None, settings, source).await
}

/// CRED-5: a new account from a CLI credential file.
pub async fn add_imported(s: &AppState, i: CredentialImport) -> Result<AccountView> {
    let settings = AccountSettings {
        name: i.name,
        pool_ids: i.pool_ids,
        priority: i.priority,
        max_concurrency: i.max_concurrency,
        expires_at: Some(i.expires_at),
    };
    add(s, Some(i.provider), settings, CredentialSource { file: Some(i.file), ..Default::default() }).await
}

/// CRED-5: a new account of `provider` (the sign-in's when `None`) with credentials from
/// `source`. The settings are checked before a sign-in's code is spent, so a bad name does not
/// cost a sign-in.
pub async fn add(
    s: &AppState,
    provider: Option<Provider>,
    settings: AccountSettings,
    source: CredentialSource,
) -> Result<AccountView> {
    accounts::check_new(&s.db, &settings.name, &settings.pool_ids, settings.max_concurrency).await?;
    let (provider, credentials) = credentials_from(s, provider, source).await?;
    let new = NewAccount {
        provider,
        name: settings.name,
        pool_ids: settings.pool_ids,
        priority: settings.priority,
        max_concurrency: settings.max_concurrency,
        expires_at: settings.expires_at.flatten(),
        credentials: Some(credentials),
    };
    accounts::create(&s.db, &*s.clock, &s.sealer, new).await
}

/// Credentials from exactly one source: a finished sign-in, a credential file, an API key.
async fn credentials_from(
    s: &AppState,
    provider: Option<Provider>,
    source: CredentialSource,
) -> Result<(Provider, CredentialInput)> {
    let given = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let (flow, code, file, key) =
        (given(source.flow_id), given(source.code), given(source.file), given(source.api_key));
    let (got, credentials) = match (flow, code, file, key, provider) {
        (Some(flow), Some(code), None, None, _) => s.onboarding.finish(&flow, &code).await?,
        (None, None, Some(file), None, Some(p)) => (p, s.onboarding.import(p, &file).await?),
        (None, None, None, Some(api_key), Some(p)) => {
            (p, CredentialInput::ApiKey { api_key: api_key.trim().to_owned() })
        }
        _ => {
            return Err(Error::invalid(
                "send exactly one of: flow_id with code (a sign-in), file (a credential file), api_key",
            ));
        }
    };
    if let Some(p) = provider
        && p != got
    {
        return Err(Error::invalid(format!("that sign-in was for {}, not {}", got.as_str(), p.as_str())));
    }
    Ok((got, credentials))
}

/// ACC-3 "Re-authorize": new credentials in one write, every other setting kept. It starts a new
/// lifecycle revision (old limits go, ACC-4) and clears the refusal and re-authorization marks;
/// conversations bound to the account stay bound.
pub async fn reauthorize(s: &AppState, id: i64, source: CredentialSource) -> Result<AccountView> {
    let account = accounts::get(&s.db, id).await?;
    let (_, credentials) = credentials_from(s, Some(account.provider), source).await?;
    let patch = AccountPatch { credentials: Some(credentials), ..Default::default() };
    let view = accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?;
    // QT-2: another grant; what was observed of the old one's quota no longer holds.
    s.quota.invalidate(id).await?;
    s.configuration_changed().await;
    Ok(view)
}

/// Edits an account's name, pools, concurrency limit (ADM-1) and priority (RT-5) together.
pub async fn edit(s: &AppState, id: i64, mut settings: AccountSettings) -> Result<AccountView> {
    // The form writes minutes: the minute of an expiry set to the second (by the API) is that
    // expiry, not a change to it.
    if let Some(Some(at)) = settings.expires_at {
        let stored = accounts::get(&s.db, id).await?.expires_at;
        if stored.is_some_and(|t| t.timestamp().div_euclid(60) == at.timestamp().div_euclid(60)) {
            settings.expires_at = None;
        }
    }
    let patch = AccountPatch {
        name: Some(settings.name),
        pool_ids: Some(settings.pool_ids),
        priority: settings.priority,
        max_concurrency: settings.max_concurrency,
        expires_at: settings.expires_at,
        ..Default::default()
    };
    let view = accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?;
    limit_changed(s, &view);
    s.configuration_changed().await;
    Ok(view)
}

/// Deletes an account (ACC-5: its history stays); it serves nothing from now on.
pub async fn delete(s: &AppState, id: i64) -> Result<()> {
    accounts::delete(&s.db, &*s.clock, id).await?;
    s.tokens.forget(id);
    s.quota.forget(id);
    s.configuration_changed().await;
    Ok(())
}

/// API-1 limits: stores a concurrency limit and hands it to the scheduler at once, under a new
/// configuration generation so a snapshot loaded before the change cannot put the old one back.
pub fn limit_changed(s: &AppState, view: &AccountView) {
    s.generation.bump();
    s.scheduler.set_limit(view.id, view.max_concurrency, s.generation.current());
}

/// How long the Accounts page waits for the quota reads it started.
const QUOTA_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The Refresh quota button: every routed account's quota read now (coalesced, capped at two
/// at once, failed ones backing off), waited for briefly.
pub async fn refresh_quota(s: &AppState) -> Result<()> {
    let snapshot = s.directory.snapshot(&s.db, &s.sealer).await?;
    s.quota.read_now(&snapshot.accounts(), true, QUOTA_READ_WAIT).await;
    Ok(())
}

/// API-1: every account's live scheduling state. Times are unix seconds, only while in the future.
pub async fn runtime(s: &AppState) -> Result<Vec<AccountRuntime>> {
    let now = s.clock.unix_ms();
    let live: HashMap<i64, RuntimeView> =
        s.scheduler.runtime().into_iter().map(|r| (r.account_id, r)).collect();
    let future =
        |t: Option<i64>| t.filter(|t| *t > now).map(|t| t.div_euclid(1000) + i64::from(t % 1000 != 0));
    let accounts = accounts::list(&s.db).await?;
    // The token cells are the directory's: load it if this process has not yet, and read the
    // cells of accounts it leaves out (disabled, switched off) from the database.
    let snapshot = s.directory.snapshot(&s.db, &s.sealer).await?;
    // QT-1: opening the page reads the quota of the accounts shown whose data is stale, so an
    // admin sees current pace without traffic (briefly waited for; a slow read shows next time).
    s.quota.read_now(&snapshot.accounts(), false, QUOTA_READ_WAIT).await;
    let mut tokens = HashMap::new();
    for a in accounts.iter().filter(|a| a.provider.uses_oauth()) {
        if snapshot.routes_account(a.id) || s.tokens.load(a.id).await?.is_some() {
            tokens.insert(a.id, s.tokens.state(a.id));
        }
    }
    Ok(accounts
        .into_iter()
        .map(|a| {
            let r = live.get(&a.id);
            let quota = s.quota.rows(a.id);
            let state = r.map(|r| r.state.clone()).unwrap_or_default();
            let requests = |model: &str| r.and_then(|r| r.requests.get(model).copied()).unwrap_or(0);
            let mut models: Vec<ModelRuntime> = state
                .models
                .iter()
                .map(|(model, m)| ModelRuntime {
                    model: model.clone(),
                    requests: requests(model),
                    recent_failures: u32::try_from(m.failures.len()).unwrap_or(u32::MAX),
                    cooldown_level: m.level,
                    cooling_until: future(m.cooldown_until),
                    limited_until: future(m.limited_until),
                })
                .collect();
            for model in r.map(|r| r.requests.keys()).into_iter().flatten() {
                if !state.models.contains_key(model) {
                    models.push(ModelRuntime {
                        model: model.clone(),
                        requests: requests(model),
                        recent_failures: 0,
                        cooldown_level: 0,
                        cooling_until: None,
                        limited_until: None,
                    });
                }
            }
            models.sort_by(|x, y| x.model.cmp(&y.model));
            let limited_until = future(state.rate_limit_reset_at);
            let temp_until = future(state.temp_unschedulable_until);
            AccountRuntime {
                expires_at: a.expires_at.map(|t| t.timestamp()),
                expired: a.expires_at.is_some_and(|t| t.timestamp_millis() <= now),
                id: a.id,
                name: a.name,
                provider: a.provider,
                priority: a.priority,
                status: a.status,
                schedulable: a.schedulable,
                in_flight: r.map_or(0, |r| r.in_flight),
                max_concurrency: a.max_concurrency,
                queue_depth: r.map_or(0, |r| u32::try_from(r.queue_depth).unwrap_or(u32::MAX)),
                rate_limited_at: state.rate_limited_at.filter(|_| limited_until.is_some()).map(|t| t / 1000),
                rate_limit_reset_at: limited_until,
                overload_until: future(state.overload_until),
                temp_unschedulable_until: temp_until,
                temp_unschedulable_reason: state.temp_unschedulable_reason.filter(|_| temp_until.is_some()),
                limited_models: r.map_or(0, |r| u32::try_from(r.limited_models).unwrap_or(u32::MAX)),
                models,
                token: tokens.remove(&a.id).flatten(),
                pool_ids: a.pool_ids,
                quota_exhausted_until: future(Some(quota.1)),
                quota: quota.0,
            }
        })
        .collect())
}
