//! Admin: `GET/POST /api/accounts`, `GET/PATCH/DELETE /api/accounts/{id}`. Credentials are
//! accepted here and never returned.

use app::model::{AccountPatch, AccountView, NewAccount};
use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, patch},
};

use crate::{
    accounts,
    api::{ApiJson, ApiPath},
    app_state::AppState,
    auth::extract::Admin,
    error::Result,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts", get(list).post(create))
        .route("/accounts/{id}", get(show).patch(update).delete(remove))
        .route("/accounts/{id}/limits", patch(limits))
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
    Ok(Json(accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?))
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
    Ok(Json(accounts::update(&s.db, &*s.clock, &s.sealer, id, patch).await?))
}

async fn remove(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<StatusCode> {
    accounts::delete(&s.db, &*s.clock, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
