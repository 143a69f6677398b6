//! Admin: `GET/POST /api/pools`, `GET/PATCH/DELETE /api/pools/{id}` (members, model policy).

use app::model::{Deleted, NewPool, PoolPatch, PoolView};
use axum::{Json, Router, extract::State, http::StatusCode, routing::get};

use crate::{
    api::{ApiJson, ApiPath},
    app_state::AppState,
    auth::extract::Admin,
    error::Result,
    pools,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/pools", get(list).post(create))
        .route("/pools/{id}", get(show).patch(update).delete(remove))
}

async fn list(_: Admin, State(s): State<AppState>) -> Result<Json<Vec<PoolView>>> {
    Ok(Json(pools::list(&s.db).await?))
}

async fn show(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<PoolView>> {
    Ok(Json(pools::get(&s.db, id).await?))
}

async fn create(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(new): ApiJson<NewPool>,
) -> Result<(StatusCode, Json<PoolView>)> {
    Ok((StatusCode::CREATED, Json(pools::create(&s.db, &*s.clock, new).await?)))
}

async fn update(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<PoolPatch>,
) -> Result<Json<PoolView>> {
    Ok(Json(pools::update(&s.db, &*s.clock, id, patch).await?))
}

/// Revokes the pool's keys and empties it; accounts and members stay; records keep its id.
async fn remove(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<Deleted>> {
    Ok(Json(Deleted { revoked_keys: pools::delete(&s.db, &*s.clock, id).await? }))
}
