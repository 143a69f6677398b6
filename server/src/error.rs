//! The domain error: what a use case can answer besides success.
//!
//! Each variant's doc names its HTTP status and stable `code`. The JSON API renders it as
//! `{"error":{"code","message"}}`, server functions as [`app::error::AppError`]. Internal faults
//! are logged where they are converted and reach the client only as `internal_error`.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 400 `bad_request`: the request is malformed (unparsable JSON, bad path parameter).
    #[error("{0}")]
    BadRequest(String),
    /// 408 `request_timeout`: the request's body did not come whole in time.
    #[error(transparent)]
    RequestTimeout(#[from] crate::serve::BodyTooSlow),
    /// 401 `unauthorized`: no valid session.
    #[error("sign in first")]
    Unauthenticated,
    /// 401 `invalid_credentials`: wrong username or password, or a disabled member.
    #[error("wrong username or password")]
    InvalidCredentials,
    /// 403 `forbidden`: signed in, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// 404 `not_found`.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 409 `conflict`: the request clashes with existing state (duplicate name, last admin).
    #[error("{0}")]
    Conflict(String),
    /// 415 `unsupported_media_type`: a mutating JSON route without `Content-Type: application/json`.
    #[error("send the body as JSON with Content-Type: application/json")]
    UnsupportedMediaType,
    /// 422 `invalid_request`: well-formed but invalid values.
    #[error("{0}")]
    Invalid(String),
    /// 422 `invalid_request` about one input, named in `field` (forms show the message beside it).
    #[error("{message}")]
    InvalidField { field: &'static str, message: String },
    /// 429 `too_many_login_attempts`: this username or address failed to sign in too often;
    /// retry after the given seconds.
    #[error("too many failed sign-ins; retry in {0} s")]
    TooManyAttempts(u64),
    /// 503 `busy`: the server cannot take this now (password hashing queue full); retry shortly.
    #[error("the server is busy; retry in a moment")]
    Busy,
    /// 503 `account_refresh_failed`: an account's token could not be refreshed now (CRED-3);
    /// retry after the given seconds.
    #[error("{message}")]
    RefreshFailed { message: String, retry_after: u64 },
    /// 502 `upstream_error`: a provider SubLane asked on the admin's behalf (a sign-in, a
    /// credential check) did not answer usefully; trying again may work.
    #[error("{0}")]
    Upstream(String),
    /// 500 `internal_error`: a fault on our side; details go to the log only.
    #[error("internal error")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    /// A 422 about one input; the message should name it too (it is read without the field).
    pub fn field(field: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidField { field, message: message.into() }
    }

    /// The input at fault, for a 422 about one field.
    pub fn field_name(&self) -> Option<&'static str> {
        match self {
            Error::InvalidField { field, .. } => Some(field),
            _ => None,
        }
    }

    pub fn forbidden(msg: impl Into<String>) -> Self {
        Error::Forbidden(msg.into())
    }

    /// A database error in which a unique violation means `message` (e.g. a taken name).
    pub fn on_conflict(e: sqlx::Error, message: impl FnOnce() -> String) -> Self {
        match Error::from(e) {
            Error::Conflict(_) => Error::Conflict(message()),
            other => other,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Unauthenticated | Error::InvalidCredentials => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::Invalid(_) | Error::InvalidField { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::TooManyAttempts(_) => StatusCode::TOO_MANY_REQUESTS,
            Error::Busy | Error::RefreshFailed { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::Upstream(_) => StatusCode::BAD_GATEWAY,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Error::BadRequest(_) => "bad_request",
            Error::RequestTimeout(_) => "request_timeout",
            Error::Unauthenticated => "unauthorized",
            Error::InvalidCredentials => "invalid_credentials",
            Error::Forbidden(_) => "forbidden",
            Error::NotFound(_) => "not_found",
            Error::Conflict(_) => "conflict",
            Error::UnsupportedMediaType => "unsupported_media_type",
            Error::Invalid(_) | Error::InvalidField { .. } => "invalid_request",
            Error::TooManyAttempts(_) => "too_many_login_attempts",
            Error::Busy => "busy",
            Error::RefreshFailed { .. } => "account_refresh_failed",
            Error::Upstream(_) => "upstream_error",
            Error::Internal(_) => "internal_error",
        }
    }

    /// Seconds for a `Retry-After` header, where the answer invites a retry.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Error::TooManyAttempts(secs) => Some(*secs),
            Error::Busy => Some(1),
            Error::RefreshFailed { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The message safe to show a client. Internal details are never part of it.
    pub fn public_message(&self) -> String {
        match self {
            Error::Internal(_) => "internal error; see the server log".to_owned(),
            other => other.to_string(),
        }
    }
}

impl From<sqlx::Error> for Error {
    /// Constraint violations are the client's doing (409/422); anything else is ours (500).
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            match db.kind() {
                sqlx::error::ErrorKind::UniqueViolation => {
                    return Error::Conflict("a record with that name already exists".into());
                }
                sqlx::error::ErrorKind::ForeignKeyViolation => {
                    return Error::invalid("a referenced member, pool or account does not exist");
                }
                sqlx::error::ErrorKind::CheckViolation => {
                    return Error::invalid("a value is out of its allowed range");
                }
                _ => {}
            }
        }
        if matches!(e, sqlx::Error::RowNotFound) {
            return Error::NotFound("record");
        }
        tracing::error!(error = %e, "database error");
        Error::Internal(e.to_string())
    }
}

impl From<crate::credentials::onboarding::OnboardError> for Error {
    fn from(e: crate::credentials::onboarding::OnboardError) -> Self {
        use crate::credentials::onboarding::OnboardError;
        match e {
            OnboardError::Invalid(m) => Error::Invalid(m),
            OnboardError::Upstream(m) => Error::Upstream(m),
        }
    }
}

impl From<crate::crypto::CryptoError> for Error {
    fn from(e: crate::crypto::CryptoError) -> Self {
        tracing::error!(error = %e, "credential sealing error");
        Error::Internal(e.to_string())
    }
}

impl From<Error> for app::error::AppError {
    fn from(e: Error) -> Self {
        let mut app =
            app::error::AppError::new(e.code(), e.public_message()).with_status(e.status().as_u16());
        app.retry_after = e.retry_after();
        app.field = e.field_name().map(str::to_owned);
        app
    }
}
