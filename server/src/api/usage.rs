//! Daily usage (BEY-1): `GET /api/me/usage` (the member's own) and `GET /api/usage` (admins, with
//! member, key, pool, account and model filters), each also as CSV (`.../usage.csv`), the same
//! rows as the Usage page's table.

use app::model::{UsageFilter, UsageReport};
use axum::{
    Json, Router,
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};

use crate::{
    api::ApiQuery,
    app_state::AppState,
    auth::extract::{Admin, SignedIn},
    error::{Error, Result},
    records::query::Scope,
    usage::query,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/me/usage", get(mine))
        .route("/me/usage.csv", get(mine_csv))
        .route("/usage", get(all))
        .route("/usage.csv", get(all_csv))
}

async fn report(s: &AppState, scope: Scope, filter: &UsageFilter) -> Result<UsageReport> {
    query::report(&s.db, s.config.time_zone, s.clock.unix_ms(), scope, filter).await
}

async fn mine(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<UsageFilter>,
) -> Result<Json<UsageReport>> {
    Ok(Json(report(&s, Scope::Member(me.id), &filter).await?))
}

async fn all(
    _: Admin,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<UsageFilter>,
) -> Result<Json<UsageReport>> {
    Ok(Json(report(&s, Scope::Admin, &filter).await?))
}

async fn mine_csv(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<UsageFilter>,
) -> Result<Response> {
    csv(&report(&s, Scope::Member(me.id), &filter).await?)
}

async fn all_csv(
    _: Admin,
    State(s): State<AppState>,
    ApiQuery(filter): ApiQuery<UsageFilter>,
) -> Result<Response> {
    csv(&report(&s, Scope::Admin, &filter).await?)
}

fn csv(report: &UsageReport) -> Result<Response> {
    let body = query::csv(report).map_err(|e| Error::Internal(format!("usage CSV: {e}")))?;
    let name = format!("attachment; filename=\"sublane-usage-{}d.csv\"", report.days);
    Ok((
        [(header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()), (header::CONTENT_DISPOSITION, name)],
        body,
    )
        .into_response())
}
