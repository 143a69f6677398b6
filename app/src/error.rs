//! The error server functions return to the UI: a stable `code` and a human `message`.
//!
//! It mirrors the JSON API's `{"error":{"code","message"}}` so both edges speak the same
//! vocabulary. Messages are written for people and never contain secrets or internals.

use serde::{Deserialize, Serialize};
use leptos::server_fn::{
    codec::JsonEncoding,
    error::{FromServerFnError, ServerFnErrorErr},
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct AppError {
    pub code: String,
    pub message: String,
}

impl AppError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into() }
    }

    pub fn unauthenticated() -> Self {
        Self::new("unauthorized", "Sign in to continue.")
    }

    pub fn internal() -> Self {
        Self::new("internal_error", "Something went wrong on the server; it has been logged.")
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Request(_) => {
                Self::new("network_error", "The server could not be reached. Check your connection and retry.")
            }
            ServerFnErrorErr::Args(msg) | ServerFnErrorErr::Deserialization(msg) => {
                Self::new("bad_request", format!("Invalid input: {msg}"))
            }
            other => {
                // Keep the detail out of the UI; it is a programming or transport fault.
                let _ = other;
                Self::internal()
            }
        }
    }
}
