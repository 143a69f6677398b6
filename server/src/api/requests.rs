//! Request history (API-2, API-3): `GET /api/me/requests` (own records, any signed-in member) and
//! `GET /api/requests` (admin, with `user_id` and `account_id` filters); their filter choices
//! (`.../filters`) and one record by request id (`.../{request_id}`).

use app::model::{Page, RequestFilter, RequestFilterChoices, RequestRecord};
use axum::{Json, Router, extract::State, routing::get};

use crate::{
    api::{ApiPath, ApiQuery},
    app_state::AppState,
    auth::extract::{Admin, SignedIn},
    error::Result,
    records::query::{self, Scope},
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/me/requests", get(mine))
        .route("/me/requests/filters", get(my_choices))
        .route("/me/requests/{request_id}", get(my_record))
        .route("/requests", get(all))
        .route("/requests/filters", get(all_choices))
        .route("/requests/{request_id}", get(any_record))
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

async fn my_choices(SignedIn(me): SignedIn, State(s): State<AppState>) -> Result<Json<RequestFilterChoices>> {
    Ok(Json(query::choices(&s.db, &*s.clock, Scope::Member(me.id)).await?))
}

async fn all_choices(_: Admin, State(s): State<AppState>) -> Result<Json<RequestFilterChoices>> {
    Ok(Json(query::choices(&s.db, &*s.clock, Scope::Admin).await?))
}

/// API-3: one of the member's own records (404 for anyone else's).
async fn my_record(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Json<RequestRecord>> {
    Ok(Json(query::one(&s.db, &*s.clock, Scope::Member(me.id), &request_id).await?))
}

/// API-3: any record (admins).
async fn any_record(
    _: Admin,
    State(s): State<AppState>,
    ApiPath(request_id): ApiPath<String>,
) -> Result<Json<RequestRecord>> {
    Ok(Json(query::one(&s.db, &*s.clock, Scope::Admin, &request_id).await?))
}
