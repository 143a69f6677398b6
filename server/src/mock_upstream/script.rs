//! What a simulated upstream account does, as scripted by a test through `/__mock/...`.
//!
//! Each credential (bearer token or API key) is its own account. `steps` are consumed one per
//! model call; when none are left, calls succeed with the account's defaults.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The scripted behaviour of one simulated account.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Script {
    /// One entry per model call, in order; then plain success.
    pub steps: VecDeque<Step>,
    /// Token usage reported at the end of each successful stream.
    pub usage: MockUsage,
    /// Number of text deltas in a streamed answer.
    pub deltas: u32,
    /// Text of each delta.
    pub delta_text: String,
    /// Wait before the response headers.
    pub delay_ms: u64,
    /// Wait between deltas.
    pub delta_delay_ms: u64,
    /// Body answered by quota reads (Codex `wham/usage`, Antigravity `fetchAvailableModels`); a
    /// plausible default when unset.
    pub quota: Option<serde_json::Value>,
    /// Quota reads fail with this HTTP status.
    pub quota_status: Option<u16>,
    /// Wait before a quota read answers.
    pub quota_delay_ms: u64,
    /// Quota headers on every model answer (Codex `x-codex-*`, Claude
    /// `anthropic-ratelimit-unified-*`), instead of the provider's defaults.
    pub quota_headers: Option<std::collections::BTreeMap<String, String>>,
    /// A `codex.rate_limits` frame sent before each WebSocket turn's events.
    pub rate_limits_frame: Option<serde_json::Value>,
    /// Refuse WebSocket upgrades with this HTTP status (and the OpenAI error shape).
    pub refuse_websocket: Option<u16>,
    /// Refuse only this many upgrades (then accept them); unset: every one.
    pub refuse_websocket_times: Option<u32>,
    /// The refusals' `Retry-After`.
    pub refuse_websocket_retry_after: Option<String>,
    /// Wait this long before answering a WebSocket upgrade.
    pub websocket_delay_ms: u64,
    /// After each answered WebSocket turn: `ping` sends a Ping frame (its Pong is counted),
    /// `close` ends the connection as OpenAI's does at its lifetime limit (an `error` event
    /// `websocket_connection_limit_reached`, then a Close frame).
    pub after_websocket_turn: Option<String>,
    /// Token endpoints (`token:<family>`): lifetime of the access tokens they issue, in seconds.
    pub token_expires_in: Option<u64>,
    /// Model answers (Responses, Messages, Gemini): function calls after the text, in order
    /// (parallel tool calls).
    pub function_calls: Vec<MockCall>,
}

/// A function call a Responses answer makes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MockCall {
    pub name: String,
    /// The arguments as the model writes them (a JSON text), streamed in two pieces.
    pub arguments: String,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            steps: VecDeque::new(),
            usage: MockUsage::default(),
            deltas: 3,
            delta_text: "Hello".into(),
            delay_ms: 0,
            delta_delay_ms: 0,
            quota: None,
            quota_status: None,
            quota_delay_ms: 0,
            quota_headers: None,
            rate_limits_frame: None,
            refuse_websocket: None,
            refuse_websocket_times: None,
            refuse_websocket_retry_after: None,
            websocket_delay_ms: 0,
            after_websocket_turn: None,
            token_expires_in: None,
            function_calls: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MockUsage {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
}

impl Default for MockUsage {
    fn default() -> Self {
        MockUsage { input: 120, cached: 64, output: 7 }
    }
}

/// One scripted call.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A normal answer.
    Ok,
    /// An HTTP error in the provider's own error shape, optionally with `Retry-After` and an
    /// error code of the provider's (OpenAI `error.code`, Anthropic `error.type`, Google's
    /// ErrorInfo `reason`), e.g. `account_deactivated` for a 403 about the credentials.
    Status {
        status: u16,
        #[serde(default)]
        retry_after: Option<String>,
        #[serde(default)]
        code: Option<String>,
        /// The error's message (default `scripted <status>`).
        #[serde(default)]
        message: Option<String>,
    },
    /// 400: the prompt (`tokens` long) does not fit the model's context window (`limit`), in the
    /// provider's own words: Anthropic's `prompt is too long: N tokens > M maximum`, OpenAI's
    /// `context_length_exceeded` (its Responses message names no numbers), Google's `The input
    /// token count (N) exceeds the maximum number of tokens allowed (M).`
    ContextTooLong { tokens: u64, limit: u64 },
    /// Codex 429 `usage_limit_reached` with `resets_at` this many seconds ahead.
    UsageLimitReached { resets_in_secs: u64 },
    /// Antigravity 429 RESOURCE_EXHAUSTED with ErrorInfo (reason, model) and RetryInfo.
    ResourceExhausted { reason: String, model: String, retry_delay: String },
    /// 200, then the stream stops after `after_deltas` deltas and never ends. With
    /// `keep_alive_ms`, the connection still carries a keep-alive that often, as a proxy in front
    /// of a stalled model sends one: an SSE comment on a stream, a Ping frame and a `keepalive`
    /// event (OpenAI's) on a WebSocket. With `silent` (Responses only), not even the answer's
    /// opening events come: nothing after the headers, or after a WebSocket turn's frame.
    Stall {
        after_deltas: u32,
        #[serde(default)]
        keep_alive_ms: u64,
        #[serde(default)]
        silent: bool,
    },
    /// 200, then the connection breaks after `after_deltas` deltas.
    Abort { after_deltas: u32 },
    /// 200, then a terminal failure event (`response.failed` / Anthropic `error`).
    FailedEvent { code: String },
    /// 200, then `response.incomplete` (Responses only).
    Incomplete { reason: String },
    /// Token endpoints: the provider's terminal refusal of the grant (`invalid_grant`,
    /// `refresh_token_invalidated`).
    InvalidGrant,
    /// Token endpoints: an HTML error page from a proxy in front of the provider.
    HtmlError { status: u16 },
    /// 307 to `location` (real providers never redirect a model call; the gateway must not follow).
    Redirect { location: String },
    /// A 200 JSON answer padded to about `bytes` bytes (OpenAI Responses, non-streaming).
    LargeBody { bytes: usize },
}

/// What the mock saw of one call, for tests to assert on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Every request header, lower-cased names.
    pub headers: std::collections::BTreeMap<String, String>,
    pub model: Option<String>,
    pub stream: Option<bool>,
    /// Body size in bytes as received (after any decompression by the mock: none).
    pub body_len: usize,
    /// The key the provider caches the prompt under: Responses `prompt_cache_key`, or the
    /// v1internal `request.sessionId`.
    pub cache_key: Option<String>,
    /// Anthropic prompt cache breakpoints (`cache_control` marks) in the body.
    pub cache_marks: usize,
}
