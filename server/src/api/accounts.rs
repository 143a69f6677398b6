//! Admin: `GET/POST /api/accounts`, `GET/PATCH/DELETE /api/accounts/{id}`. Credentials are
//! accepted here and never returned.

use app::model::{
    AccountAction, AccountPatch, AccountRuntime, AccountTest, AccountView, CredentialImport,
    CredentialSource, NewAccount, OAuthFinish, OAuthStart, OAuthStarted,
};
use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, patch, post},
};

use crate::{
    account_actions, accounts,
    api::{ApiJson, ApiPath},
    app_state::AppState,
    auth::extract::Admin,
    error::Result,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts", get(list).post(create))
        .route("/accounts/runtime", get(runtime))
        .route("/accounts/quota/refresh", post(refresh_quota))
        .route("/accounts/oauth/start", post(oauth_start))
        .route("/accounts/oauth/finish", post(oauth_finish))
        .route("/accounts/import", post(import))
        .route("/accounts/{id}/reauthorize", post(reauthorize))
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
        .route("/accounts/{id}/refresh", post(refresh))
}

/// ACC-3 actions (see [`AccountAction`]); `resume` is "Clear cooldown".
async fn action(s: &AppState, id: i64, action: AccountAction) -> Result<Json<AccountView>> {
    Ok(Json(account_actions::act(s, id, action).await?.0))
}

async fn resume(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountView>> {
    action(&s, id, AccountAction::ClearCooldown).await
}

async fn recover(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    action(&s, id, AccountAction::Recover).await
}

async fn clear_error(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    action(&s, id, AccountAction::ClearError).await
}

async fn enable(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountView>> {
    action(&s, id, AccountAction::Enable).await
}

async fn disable(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    action(&s, id, AccountAction::Disable).await
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
    let a = if b.schedulable { AccountAction::SchedulableOn } else { AccountAction::SchedulableOff };
    action(&s, id, a).await
}

/// ACC-3 "Test": one real upstream request; the answer says what it found.
async fn test(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<AccountTest>> {
    let (_, tested) = account_actions::act(&s, id, AccountAction::Test).await?;
    tested.map(Json).ok_or_else(|| crate::error::Error::Internal("test gave no result".into()))
}

/// ACC-3 "Refresh token": the OAuth access token is refreshed now (503 `account_refresh_failed`
/// with Retry-After when the token endpoint fails; 409 when the grant is gone).
async fn refresh(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>> {
    action(&s, id, AccountAction::RefreshToken).await
}

/// CRED-5: begins a provider sign-in; the answer has the authorize URL to open.
async fn oauth_start(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(b): ApiJson<OAuthStart>,
) -> Result<Json<OAuthStarted>> {
    Ok(Json(account_actions::start_sign_in(&s, b.provider)?))
}

/// CRED-5: a new account from the code of a started sign-in.
async fn oauth_finish(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(b): ApiJson<OAuthFinish>,
) -> Result<(StatusCode, Json<AccountView>)> {
    Ok((StatusCode::CREATED, Json(account_actions::add_signed_in(&s, b).await?)))
}

/// CRED-5: a new account from a CLI credential file.
async fn import(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(b): ApiJson<CredentialImport>,
) -> Result<(StatusCode, Json<AccountView>)> {
    Ok((StatusCode::CREATED, Json(account_actions::add_imported(&s, b).await?)))
}

/// ACC-3 "Re-authorize": new credentials, every other setting kept.
async fn reauthorize(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(b): ApiJson<CredentialSource>,
) -> Result<Json<AccountView>> {
    Ok(Json(account_actions::reauthorize(&s, id, b).await?))
}

/// API-1: every account's live scheduling state.
async fn runtime(_: Admin, State(s): State<AppState>) -> Result<Json<Vec<AccountRuntime>>> {
    Ok(Json(account_actions::runtime(&s).await?))
}

/// QT-1: reads every routed account's quota now (the Accounts page's Refresh quota button);
/// the answer is the runtime view with what the reads brought.
async fn refresh_quota(_: Admin, State(s): State<AppState>) -> Result<Json<Vec<AccountRuntime>>> {
    account_actions::refresh_quota(&s).await?;
    Ok(Json(account_actions::runtime(&s).await?))
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
    account_actions::limit_changed(&s, &view);
    Ok(Json(view))
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
    let reauthorized = patch.credentials.is_some();
    let view = accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?;
    if reauthorized {
        s.quota.invalidate(id).await?;
    }
    account_actions::limit_changed(&s, &view);
    Ok(Json(view))
}

async fn remove(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<StatusCode> {
    account_actions::delete(&s, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
