//! Request history (API-2): `GET /api/me/requests` (own records, any signed-in member) and
//! `GET /api/requests` (admin, with `user_id` and `account_id` filters).

use app::model::{Page, RequestFilter, RequestRecord};
use axum::{Json, Router, extract::State, routing::get};

use crate::{
    api::ApiQuery,
    app_state::AppState,
    auth::extract::{Admin, SignedIn},
    error::Result,
    records::query::{self, Scope},
};

pub fn router() -> Router<AppState> {
    Router::new().route("/me/requests", get(mine)).route("/requests", get(all))
}

async fn mine(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<RequestFilter>,
) -> Result<Json<Page<RequestRecord>>> {
    Ok(Json(query::list(&s.db, &*s.clock, Scope::Member(me.id), &filter).await?))
}

async fn all(
    _: Admin,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<RequestFilter>,
) -> Result<Json<Page<RequestRecord>>> {
    Ok(Json(query::list(&s.db, &*s.clock, Scope::Admin, &filter).await?))
}
