//! The JSON API for people and scripts, mounted at `/api`. Handlers are thin: extract, call one
//! domain function, map the result. Every error is `{"error":{"code","message"}}` (with `field` when one input is at fault) (see
//! [`crate::error::Error`]); unknown routes and methods answer in the same shape.

mod accounts;
mod budgets;
pub(crate) mod extract;
mod keys;
mod members;
mod pools;
mod requests;
mod session;
mod settings;
mod usage;

use app::model::{ErrorBody, ErrorDetail};
use axum::{
    Json, Router,
    response::{IntoResponse, Response},
};

use crate::{app_state::AppState, error::Error};

pub use extract::{ApiJson, ApiPath, ApiQuery};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(session::router())
        .merge(members::router())
        .merge(pools::router())
        .merge(accounts::router())
        .merge(keys::router())
        .merge(requests::router())
        .merge(settings::router())
        .merge(budgets::router())
        .merge(usage::router())
        .fallback(|| async { Error::NotFound("API route") })
        .method_not_allowed_fallback(|| async { MethodNotAllowed })
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Error::Internal(detail) = &self {
            tracing::error!(%detail, "internal error answered as 500");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().into(),
                message: self.public_message(),
                field: self.field_name().map(str::to_owned),
            },
        };
        let mut resp = (self.status(), Json(body)).into_response();
        if let Some(secs) = self.retry_after() {
            resp.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

/// 405 in the API's error shape.
struct MethodNotAllowed;

impl IntoResponse for MethodNotAllowed {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: "method_not_allowed".into(),
                message: "method not allowed on this route".into(),
                field: None,
            },
        };
        (axum::http::StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
    }
}
