//! Extractors whose rejections are API errors instead of axum's plain-text ones: bad JSON is 400,
//! JSON of the wrong shape 422, a missing JSON content type 415, a body that did not come whole
//! in time (`serve::body_deadline`) 408, a bad path parameter 400.

use axum::{
    Json,
    extract::{FromRequest, FromRequestParts, Path, Query, Request, rejection::JsonRejection},
    http::request::Parts,
};
use serde::de::DeserializeOwned;

use crate::error::Error;

/// A JSON body.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(Error::UnsupportedMediaType),
            Err(JsonRejection::JsonDataError(e)) => Err(Error::Invalid(e.body_text())),
            Err(e) if too_slow(&e) => Err(Error::RequestTimeout(crate::serve::BodyTooSlow)),
            Err(e) => Err(Error::BadRequest(e.body_text())),
        }
    }
}

/// Whether `e` comes of a body that did not come whole in time (see `serve::body_deadline`).
fn too_slow(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| e.is::<crate::serve::BodyTooSlow>())
}

/// A typed path parameter.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e| Error::BadRequest(e.body_text()))
    }
}

/// Query-string parameters.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| Error::BadRequest(e.body_text()))
    }
}
