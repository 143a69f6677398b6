//! Gateway keys. Admin: `GET/POST /api/keys` (any member; `?member_id=&pool_id=`),
//! `PATCH/DELETE /api/keys/{id}`. Member: `GET/POST /api/me/keys`, `PATCH /api/me/keys/{id}`
//! (switch off/on, expiry), `DELETE /api/me/keys/{id}` (revoke own).

use app::model::{ApiKeyView, CreatedApiKey, KeyFilter, KeyPatch, NewApiKey};
use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{delete, get},
};

use crate::{
    api::{ApiJson, ApiPath, ApiQuery},
    app_state::AppState,
    auth::extract::{Admin, SignedIn},
    error::{Error, Result},
    keys,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/keys", get(list_all).post(create_for_member))
        .route("/keys/{id}", delete(revoke_any).patch(update_any))
        .route("/me/keys", get(list_mine).post(create_mine))
        .route("/me/keys/{id}", delete(revoke_mine).patch(update_mine))
}

async fn list_all(
    _: Admin,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<KeyFilter>,
) -> Result<Json<Vec<ApiKeyView>>> {
    Ok(Json(keys::list_all(&s.db, &*s.clock, &filter).await?))
}

async fn update_any(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<KeyPatch>,
) -> Result<Json<ApiKeyView>> {
    Ok(Json(keys::update(&s.db, &*s.clock, None, id, patch).await?))
}

async fn update_mine(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<KeyPatch>,
) -> Result<Json<ApiKeyView>> {
    Ok(Json(keys::update(&s.db, &*s.clock, Some(me.id), id, patch).await?))
}

async fn create_for_member(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(new): ApiJson<NewApiKey>,
) -> Result<(StatusCode, Json<CreatedApiKey>)> {
    let owner = new.member_id.ok_or_else(|| Error::invalid("member_id is required"))?;
    Ok((StatusCode::CREATED, Json(keys::create(&s.db, &*s.clock, owner, new).await?)))
}

async fn revoke_any(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<ApiKeyView>> {
    Ok(Json(keys::revoke(&s.db, &*s.clock, None, id).await?))
}

async fn list_mine(SignedIn(me): SignedIn, State(s): State<AppState>) -> Result<Json<Vec<ApiKeyView>>> {
    Ok(Json(keys::list_for_member(&s.db, &*s.clock, me.id).await?))
}

async fn create_mine(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiJson(new): ApiJson<NewApiKey>,
) -> Result<(StatusCode, Json<CreatedApiKey>)> {
    if new.member_id.is_some_and(|id| id != me.id) {
        return Err(Error::invalid("member_id is only accepted by the admin route POST /api/keys"));
    }
    Ok((StatusCode::CREATED, Json(keys::create(&s.db, &*s.clock, me.id, new).await?)))
}

async fn revoke_mine(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<ApiKeyView>> {
    Ok(Json(keys::revoke(&s.db, &*s.clock, Some(me.id), id).await?))
}
