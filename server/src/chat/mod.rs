//! OpenAI Chat Completions (BEY-3): translating a Chat Completions call into the protocol of the
//! account that serves it, and the answer back. Pure functions and state machines over JSON
//! values, so each translation is tested golden-style without a server.
//!
//! Served: Responses upstreams (Codex, OpenAI API accounts), Messages upstreams (Claude, Anthropic
//! API accounts) and Gemini upstreams (Antigravity). The body is translated for the account
//! chosen, since a pool may mix providers.

pub mod gemini;
pub mod messages;
pub mod request;
pub mod response;
pub mod stream;
pub mod turns;

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
    Gemini,
}

impl Upstream {
    pub fn of(provider: app::model::Provider) -> Upstream {
        use app::model::Provider;
        match provider {
            Provider::Codex | Provider::OpenaiApi => Upstream::Responses,
            Provider::Claude | Provider::AnthropicApi => Upstream::Messages,
            Provider::Antigravity => Upstream::Gemini,
        }
    }

    /// The grammar the answer's events are watched in.
    pub fn grammar(self) -> crate::providers::Grammar {
        match self {
            Upstream::Responses => crate::providers::Grammar::Responses,
            Upstream::Messages => crate::providers::Grammar::Messages,
            Upstream::Gemini => crate::providers::Grammar::Gemini,
        }
    }
}

/// A Chat Completions request, parsed once at admission and translated for each account tried.
#[derive(Debug)]
pub struct ChatCall {
    pub options: ChatOptions,
    request: serde_json::Value,
    /// RT-1: the conversation the call belongs to, `prompt_cache_key` else `user` (OpenAI's
    /// own guidance for the deprecated `user` field is to use it as the cache key). A `user` is
    /// often an email or an account id: only its hash is used, and sent upstream.
    cache_key: Option<String>,
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
        let key = |k: &str| request[k].as_str().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let cache_key = key("prompt_cache_key").or_else(|| key("user").map(|u| user_key(&u)));
        Ok(ChatCall { options: ChatOptions { include_usage }, request, cache_key })
    }

    /// The fields routing reads (model, stream, prompt_cache_key: the same names as Responses).
    pub fn routing_fields(&self) -> Result<crate::proxy::request::RoutingFields, ChatError> {
        use serde::Deserialize;
        crate::proxy::request::RoutingFields::deserialize(&self.request)
            .map_err(|e| ChatError::new("", format!("the request body is not valid: {e}")))
    }

    /// The conversation key of RT-1 (`prompt_cache_key`, else `user`).
    pub fn cache_key(&self) -> Option<&str> {
        self.cache_key.as_deref()
    }

    /// The request in the protocol of a `provider` account.
    pub fn translate(&self, provider: app::model::Provider) -> Result<serde_json::Value, ChatError> {
        let upstream = Upstream::of(provider);
        // The upstream's cache is keyed by the conversation where it takes a key, so repeated
        // prefixes of one conversation hit it (Messages caches by breakpoints instead).
        let mut translated = match upstream {
            Upstream::Responses => request::to_responses(&self.request)?,
            Upstream::Messages => messages::to_messages(&self.request)?,
            Upstream::Gemini => gemini::to_gemini(&self.request)?,
        };
        if provider == app::model::Provider::Codex {
            request::for_codex(&self.request, &mut translated)?;
        }
        if let Some(key) = &self.cache_key {
            match upstream {
                Upstream::Responses => translated["prompt_cache_key"] = key.as_str().into(),
                Upstream::Gemini => translated["sessionId"] = key.as_str().into(),
                Upstream::Messages => {}
            }
        }
        Ok(translated)
    }
}

/// The conversation key of a Chat `user`: a hash, so the value itself goes nowhere.
fn user_key(user: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("sublane-chat-user:{user}").as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("user-{hex}")
}
