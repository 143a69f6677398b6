//! The non-standard header names SubLane reads or writes on every model call, each made once.
//! A name given as text (`headers.get("x-api-key")`) is checked byte by byte and hashed anew on
//! every use; one of these is ready. (Standard names are `http::header`'s.)

use axum::http::HeaderName;

/// Keys (ID-3): Anthropic's and Gemini's SDKs send them here rather than as `Authorization`.
pub static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
pub static X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

/// A Codex conversation's session id, in both spellings clients send (RT-4).
pub static SESSION_ID: HeaderName = HeaderName::from_static("session_id");
pub static SESSION_ID_DASHED: HeaderName = HeaderName::from_static("session-id");
/// Codex's sub-agents (RT-7): its kind, its parent's thread and its own.
pub static SUBAGENT: HeaderName = HeaderName::from_static("x-openai-subagent");
pub static PARENT_THREAD: HeaderName = HeaderName::from_static("x-codex-parent-thread-id");
pub static THREAD_ID: HeaderName = HeaderName::from_static("thread-id");

/// Set on upstream calls: Codex's account, Anthropic's betas and API version.
pub static CHATGPT_ACCOUNT_ID: HeaderName = HeaderName::from_static("chatgpt-account-id");
pub static ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
pub static ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

/// Added to answers: the call's id (REC-9), the gateway's own time and queue wait (BEY-4), and
/// a stream's hint to buffering proxies.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub static OVERHEAD_MS: HeaderName = HeaderName::from_static("x-sublane-overhead-ms");
pub static QUEUE_MS: HeaderName = HeaderName::from_static("x-sublane-queue-ms");
pub static ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// Added to a budget refusal that a client's own retries cannot outlast: the SDKs obey it
/// ([`crate::budgets::Standing::refusal`]).
pub static X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
