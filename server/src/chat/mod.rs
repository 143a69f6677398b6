//! OpenAI Chat Completions (BEY-3): translating a Chat Completions call into the protocol of the
//! account that serves it, and the answer back. Pure functions and state machines over JSON
//! values, so each translation is tested golden-style without a server.
//!
//! Served: Responses upstreams (Codex, OpenAI API accounts) and Messages upstreams (Claude,
//! Anthropic API accounts). Gemini (Antigravity) follows. The body is translated for the account
//! chosen, since a pool may mix providers.

pub mod messages;
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

/// The protocol a Chat Completions call is translated into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    Responses,
    Messages,
}

impl Upstream {
    pub fn of(provider: app::model::Provider) -> Option<Upstream> {
        use app::model::Provider;
        match provider {
            Provider::Codex | Provider::OpenaiApi => Some(Upstream::Responses),
            Provider::Claude | Provider::AnthropicApi => Some(Upstream::Messages),
            Provider::Antigravity => None,
        }
    }
}

/// A Chat Completions request, parsed once at admission and translated for each account tried.
#[derive(Debug)]
pub struct ChatCall {
    pub options: ChatOptions,
    request: serde_json::Value,
}

impl ChatCall {
    /// Checks a Chat Completions body is a JSON object and reads what its answer needs.
    pub fn parse(body: &[u8]) -> Result<ChatCall, ChatError> {
        let request: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| ChatError::new("", format!("the body is not JSON: {e}")))?;
        if !request.is_object() {
            return Err(ChatError::new("", "the request body must be a JSON object"));
        }
        let include_usage = request["stream_options"]["include_usage"].as_bool() == Some(true);
        Ok(ChatCall { options: ChatOptions { include_usage }, request })
    }

    /// The request in `upstream`'s protocol.
    pub fn translate(&self, upstream: Upstream) -> Result<Vec<u8>, ChatError> {
        let translated = match upstream {
            Upstream::Responses => request::to_responses(&self.request)?,
            Upstream::Messages => messages::to_messages(&self.request)?,
        };
        serde_json::to_vec(&translated).map_err(|e| ChatError::new("", e.to_string()))
    }
}
