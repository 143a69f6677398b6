//! Admin: `GET/POST /api/accounts`, `GET/PATCH/DELETE /api/accounts/{id}`. Credentials are
//! accepted here and never returned.

use app::model::{AccountPatch, AccountView, NewAccount};
use axum::{Json, Router, extract::State, http::StatusCode, routing::get};

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
