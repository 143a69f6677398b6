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

/// What the answer's translation needs from the client's request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatOptions {
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
}

/// A Chat Completions body as a Responses body, and the options its answer needs.
pub fn translate(body: &[u8]) -> Result<(Vec<u8>, ChatOptions), ChatError> {
    let chat: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ChatError::new("", format!("the body is not JSON: {e}")))?;
    let options =
        ChatOptions { include_usage: chat["stream_options"]["include_usage"].as_bool() == Some(true) };
    let responses = request::to_responses(&chat)?;
    let bytes = serde_json::to_vec(&responses).map_err(|e| ChatError::new("", e.to_string()))?;
    Ok((bytes, options))
}
