//! OpenAI Chat Completions (BEY-3): translating a Chat Completions call into the protocol of the
//! account that serves it, and the answer back. Pure functions and state machines over JSON
//! values, so each translation is tested golden-style without a server.
//!
//! So far: requests to Responses (Codex, OpenAI API accounts). The answers, the streaming
//! transform, Messages and Gemini, and the route follow.

pub mod request;
pub mod response;
pub mod stream;

/// A Chat Completions parameter SubLane cannot honour: a 400 naming it (`param` in the OpenAI
/// error shape), never a silent drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatError {
    /// The parameter's path, e.g. `stop` or `messages[2].content[0].type`.
    pub param: String,
    pub message: String,
}

impl ChatError {
    pub fn new(param: &str, message: impl Into<String>) -> ChatError {
        ChatError { param: param.to_owned(), message: message.into() }
    }
}
