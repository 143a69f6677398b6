//! Admin: `GET/POST /api/accounts`, `GET/PATCH/DELETE /api/accounts/{id}`. Credentials are
//! accepted here and never returned.

use app::model::{AccountPatch, AccountRuntime, AccountTest, AccountView, ModelRuntime, NewAccount};
use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, patch, post},
};

use crate::{
    accounts::{self, Lifecycle},
    api::{ApiJson, ApiPath},
    app_state::AppState,
    auth::extract::Admin,
    error::Result,
    scheduler::StateAction,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts", get(list).post(create))
        .route("/accounts/runtime", get(runtime))
        .route("/accounts/{id}", get(show).patch(update).delete(remove))
        .route("/accounts/{id}/limits", patch(limits))
        .route("/accounts/{id}/resume", post(resume))
        .route("/accounts/{id}/clear-cooldown", post(resume))
        .route("/accounts/{id}/recover", post(recover))
        .route("/accounts/{id}/clear-error", post(clear_error))
        .route("/accounts/{id}/enable", post(enable))
        .route("/accounts/{id}/disable", post(disable))
        .route("/accounts/{id}/schedulable", post(schedulable))
        .route("/accounts/{id}/test", post(test))
}

/// ACC-3 "Clear cooldown" (`resume`): account and model cooldowns, limits and failure counts.
/// Never enables, re-authorizes, or touches credentials pauses or quota.
async fn resume(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountView>> {
    let (view, revision) = accounts::change(&s.db, &*s.clock, id, Lifecycle::NewRevision).await?;
    s.scheduler.apply(id, revision, StateAction::ClearCooldowns);
    Ok(Json(view))
}

/// ACC-3 "Recover state": error status, rate limits, overload, temporary unschedulability and
/// model limits all cleared. The manual schedulable switch is left as the admin set it.
async fn recover(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    let (view, revision) = accounts::change(&s.db, &*s.clock, id, Lifecycle::Recover).await?;
    s.scheduler.apply(id, revision, StateAction::Recover);
    Ok(Json(view))
}

/// ACC-3 "Test": a real upstream request. On success the account recovers its error status and
/// runtime state (as "Recover state"); the manual schedulable switch is never turned back on.
/// A failed test changes nothing: an admin's probe does not cool an account.
async fn test(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountTest>> {
    let account = accounts::get(&s.db, id).await?;
    let Some(credentials) = accounts::credentials(&s.db, &s.sealer, id).await? else {
        return Err(crate::error::Error::invalid("the account has no credentials to test"));
    };
    let tested = crate::proxy::test_call::run(&s, account.provider, &credentials).await;
    let account = if tested.ok {
        let (view, revision) = accounts::change(&s.db, &*s.clock, id, Lifecycle::Recover).await?;
        s.scheduler.apply(id, revision, StateAction::Recover);
        view
    } else {
        account
    };
    Ok(Json(AccountTest {
        ok: tested.ok,
        upstream_status: tested.upstream_status,
        latency_ms: u64::try_from(tested.latency.as_millis()).unwrap_or(u64::MAX),
        error: tested.error,
        account,
    }))
}

/// ACC-3 "Clear error": the error status only.
async fn clear_error(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    Ok(Json(accounts::change(&s.db, &*s.clock, id, Lifecycle::ClearError).await?.0))
}

/// Enable / disable: a new lifecycle revision, so limits from before are dropped (ACC-4).
async fn enable(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountView>> {
    Ok(Json(accounts::change(&s.db, &*s.clock, id, Lifecycle::Enable).await?.0))
}

async fn disable(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    Ok(Json(accounts::change(&s.db, &*s.clock, id, Lifecycle::Disable).await?.0))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Schedulable {
    schedulable: bool,
}

/// The manual schedulable switch (RT-8).
async fn schedulable(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(b): ApiJson<Schedulable>,
) -> Result<Json<AccountView>> {
    Ok(Json(accounts::change(&s.db, &*s.clock, id, Lifecycle::Schedulable(b.schedulable)).await?.0))
}

/// API-1: every account's live scheduling state.
async fn runtime(_: Admin, State(s): State<AppState>) -> Result<Json<Vec<AccountRuntime>>> {
    let now = s.clock.now().timestamp_millis();
    let live: std::collections::HashMap<i64, crate::scheduler::RuntimeView> =
        s.scheduler.runtime().into_iter().map(|r| (r.account_id, r)).collect();
    let future =
        |t: Option<i64>| t.filter(|t| *t > now).map(|t| t.div_euclid(1000) + i64::from(t % 1000 != 0));
    let out = accounts::list(&s.db)
        .await?
        .into_iter()
        .map(|a| {
            let r = live.get(&a.id);
            let state = r.map(|r| r.state.clone()).unwrap_or_default();
            let mut models: Vec<ModelRuntime> = state
                .models
                .iter()
                .map(|(model, m)| ModelRuntime {
                    model: model.clone(),
                    requests: r.and_then(|r| r.requests.get(model).copied()).unwrap_or(0),
                    recent_failures: u32::try_from(m.failures.len()).unwrap_or(u32::MAX),
                    cooldown_level: m.level,
                    cooling_until: future(m.cooldown_until),
                    limited_until: future(m.limited_until),
                })
                .collect();
            for (model, n) in r.map(|r| r.requests.iter()).into_iter().flatten() {
                if !state.models.contains_key(model) {
                    models.push(ModelRuntime {
                        model: model.clone(),
                        requests: *n,
                        recent_failures: 0,
                        cooldown_level: 0,
                        cooling_until: None,
                        limited_until: None,
                    });
                }
            }
            models.sort_by(|x, y| x.model.cmp(&y.model));
            let temp_until = future(state.temp_unschedulable_until);
            AccountRuntime {
                id: a.id,
                name: a.name,
                provider: a.provider,
                status: a.status,
                schedulable: a.schedulable,
                in_flight: r.map_or(0, |r| r.in_flight),
                max_concurrency: a.max_concurrency,
                queue_depth: r.map_or(0, |r| u32::try_from(r.queue_depth).unwrap_or(u32::MAX)),
                rate_limited_at: state
                    .rate_limited_at
                    .filter(|_| future(state.rate_limit_reset_at).is_some())
                    .map(|t| t / 1000),
                rate_limit_reset_at: future(state.rate_limit_reset_at),
                overload_until: future(state.overload_until),
                temp_unschedulable_until: temp_until,
                temp_unschedulable_reason: state.temp_unschedulable_reason.filter(|_| temp_until.is_some()),
                limited_models: r.map_or(0, |r| u32::try_from(r.limited_models).unwrap_or(u32::MAX)),
                models,
            }
        })
        .collect();
    Ok(Json(out))
}

/// `PATCH /api/accounts/{id}/limits` body (API-1).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    max_concurrency: u32,
}

/// API-1: the account's concurrency limit (ADM-1: 1..=1000, 422 outside).
async fn limits(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(l): ApiJson<Limits>,
) -> Result<Json<AccountView>> {
    let patch = AccountPatch { max_concurrency: Some(l.max_concurrency), ..Default::default() };
    let view = accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?;
    // Applies at once: a raise wakes waiters, a cut never interrupts admitted requests (ADM-1).
    apply_limit(&s, &view);
    Ok(Json(view))
}

/// Hands a stored limit to the scheduler under a new configuration generation, so a snapshot
/// loaded before the change cannot put the old limit back.
fn apply_limit(s: &AppState, view: &AccountView) {
    s.generation.bump();
    s.scheduler.set_limit(view.id, view.max_concurrency, s.generation.current());
}

async fn list(_: Admin, State(s): State<AppState>) -> Result<Json<Vec<AccountView>>> {
    Ok(Json(accounts::list(&s.db).await?))
}

async fn show(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountView>> {
    Ok(Json(accounts::get(&s.db, id).await?))
}

async fn create(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(new): ApiJson<NewAccount>,
) -> Result<(StatusCode, Json<AccountView>)> {
    Ok((StatusCode::CREATED, Json(accounts::create(&s.db, &*s.clock, &s.sealer, new).await?)))
}

async fn update(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<AccountPatch>,
) -> Result<Json<AccountView>> {
    let view = accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?;
    apply_limit(&s, &view);
    Ok(Json(view))
}

async fn remove(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<StatusCode> {
    accounts::delete(&s.db, &*s.clock, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
