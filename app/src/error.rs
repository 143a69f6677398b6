//! The error server functions return to the UI: a stable `code` and a human `message`.
//!
//! It mirrors the JSON API's `{"error":{"code","message"}}` so both edges speak the same
//! vocabulary. Messages are written for people and never contain secrets or internals.

use leptos::server_fn::{
    codec::JsonEncoding,
    error::{FromServerFnError, ServerFnErrorErr},
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct AppError {
    pub code: String,
    pub message: String,
    /// The input at fault, when the error is about one field: forms show the message beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// HTTP status the server answers with (not sent over the wire: the response carries it).
    #[serde(skip)]
    pub status: u16,
    /// Seconds for a `Retry-After` header (not sent in the body: the response carries it).
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

impl AppError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into(), field: None, status: 500, retry_after: None }
    }

    pub fn with_status(self, status: u16) -> Self {
        Self { status, ..self }
    }

    pub fn unauthenticated() -> Self {
        Self::new("unauthorized", "Sign in to continue.").with_status(401)
    }

    /// 422 `invalid_request`: a value out of range or not understood, the field named.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_request", message).with_status(422)
    }

    /// 422 about one input, named in `field`.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..Self::invalid(message) }
    }

    /// This error's message if it is about `field`.
    pub fn for_field(&self, field: &str) -> Option<String> {
        (self.field.as_deref() == Some(field)).then(|| self.message.clone())
    }

    pub fn internal() -> Self {
        Self::new("internal_error", "Something went wrong on the server; it has been logged.")
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Request(_) => Self::new(
                "network_error",
                "The server could not be reached. Check your connection and retry.",
            ),
            ServerFnErrorErr::Args(msg) | ServerFnErrorErr::Deserialization(msg) => {
                Self::new("bad_request", format!("Invalid input: {msg}")).with_status(400)
            }
            other => {
                // Keep the detail out of the UI; it is a programming or transport fault.
                let _ = other;
                Self::internal()
            }
        }
    }
}
