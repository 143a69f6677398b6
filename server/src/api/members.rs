//! Admin: `GET/POST /api/members`, `GET/PATCH/DELETE /api/members/{id}`.

use app::model::{Deleted, MemberPatch, MemberView, NewMember};
use axum::{Json, Router, extract::State, http::StatusCode, routing::get};

use crate::{
    api::{ApiJson, ApiPath},
    app_state::AppState,
    auth::extract::Admin,
    error::Result,
    members,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/members", get(list).post(create))
        .route("/members/{id}", get(show).patch(update).delete(remove))
}

async fn list(_: Admin, State(s): State<AppState>) -> Result<Json<Vec<MemberView>>> {
    Ok(Json(members::list(&s.db).await?))
}

async fn show(_: Admin, State(s): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Json<MemberView>> {
    Ok(Json(members::get(&s.db, id).await?))
}

async fn create(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(new): ApiJson<NewMember>,
) -> Result<(StatusCode, Json<MemberView>)> {
    Ok((StatusCode::CREATED, Json(members::create(&s.db, &*s.clock, new).await?)))
}

async fn update(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(patch): ApiJson<MemberPatch>,
) -> Result<Json<MemberView>> {
    Ok(Json(members::update(&s.db, &*s.clock, id, patch).await?))
}

/// Signs the member out, revokes their keys, takes them out of every pool; records stay.
async fn remove(
    Admin(me): Admin,
    State(s): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Deleted>> {
    Ok(Json(Deleted { revoked_keys: members::delete(&s.db, &*s.clock, me.id, id).await? }))
}
