//! Errors the gateway answers itself (SPEC §12), rendered in the client protocol's shape (PX-7):
//! OpenAI `{"error":{"message","type","code","param"}}`, Anthropic
//! `{"type":"error","error":{"type","message","code"}}`, Gemini
//! `{"error":{"code","message","status","details"}}`. Every one carries the gateway's `code`
//! and the request id; none carries a secret or an upstream body (ERR-3).

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

/// The wire protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI Responses.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini generateContent.
    Gemini,
}

impl Protocol {
    /// The protocol a model path speaks (for answers made before the route is known).
    pub fn for_path(path: &str) -> Protocol {
        if path.contains("/messages") {
            Protocol::Anthropic
        } else if path.contains("/v1beta/") || (path.contains("/models/") && path.contains(':')) {
            Protocol::Gemini
        } else {
            Protocol::OpenAi
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GatewayError {
    pub status: StatusCode,
    /// Stable code from the SPEC catalogue (`invalid_api_key`, `no_available_account`, ...).
    pub code: &'static str,
    pub message: String,
    /// Seconds for `Retry-After`, when the catalogue gives one.
    pub retry_after: Option<u64>,
    /// Further body fields a client can act on (BUD-2's `limit`/`used`/`reset_at`, BUD-4's
    /// `retry_after`/`blocked_until`), placed where each protocol keeps such details.
    pub fields: Vec<(String, Value)>,
    /// Says `x-should-retry: false`: nothing changes before a client's own backoff would try
    /// again (a BUD-2 window that ends far ahead; BUD-2 gives no Retry-After to wait out).
    pub not_soon: bool,
    /// For a scheduling refusal, when an account the decision considered could serve, in
    /// seconds (`u64::MAX`: never): a call that already tried other accounts reads it to tell
    /// whether its client may retry soon ([`crate::scheduler::Refusal::back_in`]). Never sent.
    pub back_in: Option<u64>,
    /// When a retry can succeed, in seconds, told only in the body, as Gemini's RetryInfo, where
    /// the catalogue gives no `Retry-After` (BUD-2). gemini-cli reads the body, not the header, to
    /// tell a refusal worth retrying soon from one that is not (over 5 minutes it stops).
    pub retry_delay: Option<u64>,
}

impl GatewayError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        GatewayError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            fields: Vec::new(),
            not_soon: false,
            back_in: None,
            retry_delay: None,
        }
    }

    /// See the field of the same name.
    pub fn retry_delay(self, secs: u64) -> Self {
        GatewayError { retry_delay: Some(secs), ..self }
    }

    /// Marks the refusal as one that a client's own retries cannot outlast (the field of the
    /// same name).
    pub fn not_soon(mut self, not_soon: bool) -> Self {
        self.not_soon = not_soon;
        self
    }

    /// For a refusal that nothing can lift before its `Retry-After` (the key is blocked, BUD-4):
    /// a wait longer than [`LONGEST_CLIENT_WAIT`] also says `x-should-retry: false`.
    /// anthropic-python sleeps through any Retry-After (a 12 h block's) before the user hears
    /// anything; openai-python already gives up past 120 s. A scheduling refusal says it on the
    /// same terms when its wait is the pool's (`proxy::schedule`), and so does an upstream's
    /// forwarded 429 when no account, the one that answered included, can serve sooner
    /// (`proxy::call`).
    pub fn holds_for_the_key(self) -> Self {
        let long = self.retry_after.is_some_and(|secs| secs > LONGEST_CLIENT_WAIT);
        self.not_soon(long)
    }

    /// Adds a body field (see [`GatewayError::fields`]).
    pub fn with_field(mut self, name: &str, value: Value) -> Self {
        self.fields.push((name.to_owned(), value));
        self
    }

    pub fn retry_after(self, secs: u64) -> Self {
        GatewayError { retry_after: Some(secs), ..self }
    }

    pub fn with_message(self, message: impl Into<String>) -> Self {
        GatewayError { message: message.into(), ..self }
    }

    /// ID-3 / ERR-3: missing, unknown, disabled, revoked or expired gateway key.
    pub fn invalid_api_key() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_api_key", "missing or invalid API key")
    }

    /// ADM-2: the workspace is at capacity.
    pub fn workspace_busy() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "workspace_busy",
            "the gateway is at capacity; retry shortly",
        )
        .retry_after(1)
    }

    /// ADM-3: the member already has their limit of calls in flight.
    pub fn member_concurrency_exceeded() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "member_concurrency_exceeded",
            "you already have the most concurrent requests your limit allows; retry when one ends",
        )
        .retry_after(1)
    }

    /// ADM-3: the member's optional requests-per-minute limit.
    pub fn member_rpm_exceeded(retry_after: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "member_rpm_exceeded",
            "you have started as many requests this minute as your limit allows",
        )
        .retry_after(retry_after)
    }

    /// BUD-2: a budget policy's limit is reached (the seed's message names it; no Retry-After:
    /// the body's `reset_at` says when).
    pub fn budget_exceeded(message: String) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "budget_exceeded", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// ID-4: the pool's policy denies the model.
    pub fn model_not_allowed(model: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "model_not_allowed",
            format!("model {model:?} is not allowed for this key"),
        )
    }

    /// ID-4 / PX-4: no account of the pool lists the model in its catalogue.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "model_not_found",
            format!("model {model:?} is not served by any account of this key's pool"),
        )
    }

    /// QT-5: the subscription quota of the account (or of the model on it) is spent. A bound
    /// conversation is never moved for it; no retry helps before the quota resets.
    pub fn quota_exhausted() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "quota_exhausted",
            "the subscription quota of the account serving this request is exhausted",
        )
    }

    /// The model exists in no account of the pool (or the pool has no account for this protocol).
    pub fn no_available_account(model: &str) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_available_account",
            format!("no schedulable account can serve model {model:?} right now"),
        )
        .retry_after(1)
    }

    /// ADM-6: the pool's wait queue is full.
    pub fn account_queue_full() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "account_queue_full",
            "every account that can serve this request is busy and the wait queue is full",
        )
        .retry_after(1)
    }

    /// ADM-6: no slot freed up within the queue timeout.
    pub fn account_wait_timeout() -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "account_wait_timeout", "no account slot freed up in time")
            .retry_after(1)
    }

    /// ADM-9 / RT-2: the conversation's account (or every account) is cooling down.
    pub fn account_cooling(retry_after: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "account_cooling",
            "the account serving this conversation is cooling down after an upstream limit",
        )
        .retry_after(retry_after)
    }

    /// CD-2 / CD-4: the gateway paused this model on the account after repeated failures.
    pub fn model_cooling(retry_after: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "model_cooling",
            "this model is cooling down after repeated upstream failures",
        )
        .retry_after(retry_after)
    }

    /// CD-4: the provider limited this model for the account.
    pub fn model_rate_limited(retry_after: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "model_rate_limited",
            "the upstream provider rate-limited this model",
        )
        .retry_after(retry_after)
    }

    /// BUD-5: every account able to serve the model is rate limited upstream. The message is the
    /// seed's, word for word: clients tell the three 429s apart by it (seed 004).
    pub fn upstream_quota_exhausted(retry_after: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "upstream_quota_exhausted",
            "all upstream credentials for this model are rate limited",
        )
        .retry_after(retry_after)
    }

    /// CD-5: the upstream refused the account (403).
    pub fn upstream_forbidden() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "upstream_forbidden",
            "the upstream provider refused this account (403); an admin should check it",
        )
    }

    /// ERR-2: the upstream rejected the account's credentials (401). Not the caller's key: that
    /// would be `invalid_api_key`, so it is reported as a gateway-side failure.
    pub fn upstream_unauthorized() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_unauthorized",
            "the upstream provider rejected the account's credentials; an admin must re-authorize it",
        )
    }

    /// OPS-3: waiting requests end when the server stops.
    pub fn shutting_down() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_shutting_down", "the gateway is shutting down")
            .retry_after(1)
    }

    /// A fault of the gateway itself (details go to the log, never to the client).
    pub fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "internal error")
    }

    /// The upstream could not be reached or broke before answering.
    pub fn upstream_unavailable() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_unavailable",
            "the upstream provider could not be reached",
        )
    }

    /// CD-6: no response headers within the header timeout.
    pub fn upstream_timeout() -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            "the upstream provider did not answer in time",
        )
    }

    /// CRED-3: the chosen account has no usable token (its refresh failed and backs off, or it
    /// must be re-authorized).
    pub fn account_refresh_failed(retry_after: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "account_refresh_failed",
            "the account's credentials could not be refreshed; retry later",
        )
        .retry_after(retry_after)
    }

    /// The upstream answered a redirect: never followed (it would carry the account's credential
    /// and the body to another host), so the upstream base URL needs checking.
    pub fn upstream_redirected() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_redirected",
            "the upstream provider answered with a redirect, which the gateway does not follow",
        )
    }

    /// The upstream's answer exceeds what the gateway reads.
    pub fn upstream_response_too_large() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_response_too_large",
            "the upstream provider's answer is larger than the gateway accepts",
        )
    }

    /// A request body (or its decompressed form) over the limit.
    pub fn request_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("the request body is larger than {} MiB", limit / (1024 * 1024)),
        )
    }

    /// The client took too long to send its request body.
    pub fn request_body_timeout() -> Self {
        Self::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", "the request body did not arrive in time")
    }

    /// The error body in `protocol`'s shape with the request id and the extra fields: in the
    /// `error` object for OpenAI and Anthropic; for Gemini as ErrorInfo metadata (strings, as
    /// google.rpc requires) and a RetryInfo detail when a retry time is known.
    pub fn body(&self, protocol: Protocol, request_id: Option<&str>) -> Value {
        let mut b = body(protocol, self.status, self.code, &self.message, request_id);
        match protocol {
            Protocol::OpenAi | Protocol::Anthropic => {
                for (name, value) in &self.fields {
                    b["error"][name.as_str()] = value.clone();
                }
            }
            Protocol::Gemini => {
                for (name, value) in &self.fields {
                    let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                    b["error"]["details"][0]["metadata"][name.as_str()] = Value::String(text);
                }
                if let Some(secs) = self.retry_after.or(self.retry_delay) {
                    retry_info(&mut b, secs);
                }
            }
        }
        b
    }

    /// Renders in `protocol`'s shape with the request id.
    pub fn render(&self, protocol: Protocol, request_id: Option<&str>) -> Response {
        let body = self.body(protocol, request_id);
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        say_not_soon(resp.headers_mut(), self.not_soon);
        resp
    }
}

/// Adds google.rpc's RetryInfo to a Gemini error body: Google's clients read when to retry, and
/// whether to, from it.
pub(super) fn retry_info(body: &mut Value, secs: u64) {
    if let Some(details) = body["error"]["details"].as_array_mut() {
        details.push(
            json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{secs}s")}),
        );
    }
}

/// Tells a client its own retries cannot outlast the refusal (`x-should-retry: false`, which the
/// official SDKs obey over their own rules), when `not_soon`.
pub fn say_not_soon(headers: &mut axum::http::HeaderMap, not_soon: bool) {
    if not_soon {
        headers.insert(&crate::header_names::X_SHOULD_RETRY, HeaderValue::from_static("false"));
    }
}

/// The longest `Retry-After`, in seconds, that a client is left to wait out on its own (see
/// [`GatewayError::holds_for_the_key`]).
pub const LONGEST_CLIENT_WAIT: u64 = 120;

/// The error body for `protocol`. Also used for sanitized upstream errors.
pub fn body(
    protocol: Protocol,
    status: StatusCode,
    code: &str,
    message: &str,
    request_id: Option<&str>,
) -> Value {
    match protocol {
        Protocol::OpenAi => {
            let kind = match status.as_u16() {
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                429 => "rate_limit_error",
                500..=599 => "server_error",
                _ => "invalid_request_error",
            };
            let mut b = json!({"error": {"message": message, "type": kind, "code": code, "param": null}});
            if let Some(id) = request_id {
                b["error"]["request_id"] = json!(id);
            }
            b
        }
        Protocol::Anthropic => {
            let kind = match status.as_u16() {
                400 => "invalid_request_error",
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            let mut b = json!({"type": "error", "error": {"type": kind, "message": message, "code": code}});
            if let Some(id) = request_id {
                b["request_id"] = json!(id);
            }
            b
        }
        Protocol::Gemini => {
            // google.rpc.Code's HTTP mapping; 408, 413 and 502, which it lacks, as the nearest
            let grpc = match status.as_u16() {
                400 | 413 | 422 => "INVALID_ARGUMENT",
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                404 => "NOT_FOUND",
                409 => "ABORTED",
                429 => "RESOURCE_EXHAUSTED",
                499 => "CANCELLED",
                501 => "UNIMPLEMENTED",
                502 | 503 => "UNAVAILABLE",
                408 | 504 => "DEADLINE_EXCEEDED",
                _ => "INTERNAL",
            };
            let mut info = json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": code, "domain": "sublane"});
            if let Some(id) = request_id {
                info["metadata"] = json!({"request_id": id});
            }
            json!({"error": {"code": status.as_u16(), "message": message, "status": grpc, "details": [info]}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_carries_the_gateway_code() {
        let e = GatewayError::invalid_api_key();
        let o = body(Protocol::OpenAi, e.status, e.code, &e.message, Some("req_1"));
        assert_eq!(o["error"]["code"], "invalid_api_key");
        assert_eq!(o["error"]["type"], "authentication_error");
        assert_eq!(o["error"]["request_id"], "req_1");
        let a = body(Protocol::Anthropic, e.status, e.code, &e.message, None);
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "authentication_error");
        assert_eq!(a["error"]["code"], "invalid_api_key");
        let g = body(Protocol::Gemini, e.status, e.code, &e.message, None);
        assert_eq!(g["error"]["code"], 401);
        assert_eq!(g["error"]["status"], "UNAUTHENTICATED");
        assert_eq!(g["error"]["details"][0]["reason"], "invalid_api_key");
        for (status, grpc) in
            [(413, "INVALID_ARGUMENT"), (408, "DEADLINE_EXCEEDED"), (502, "UNAVAILABLE"), (500, "INTERNAL")]
        {
            let g = body(Protocol::Gemini, StatusCode::from_u16(status).unwrap(), "c", "m", None);
            assert_eq!(g["error"]["status"], grpc, "{status}");
        }
    }

    /// The scheduler's part of the catalogue (ERR): status, code and Retry-After in each shape.
    #[test]
    fn scheduler_errors_match_the_catalogue_in_every_protocol() {
        let cases = [
            (GatewayError::workspace_busy(), 429, Some("1")),
            (GatewayError::member_concurrency_exceeded(), 429, Some("1")),
            (GatewayError::account_queue_full(), 429, Some("1")),
            (GatewayError::account_wait_timeout(), 429, Some("1")),
            (GatewayError::account_cooling(17), 429, Some("17")),
            (GatewayError::model_cooling(10), 429, Some("10")),
            (GatewayError::model_rate_limited(20), 429, Some("20")),
            (GatewayError::upstream_quota_exhausted(5), 429, Some("5")),
            (GatewayError::upstream_forbidden(), 403, None),
            (GatewayError::no_available_account("m"), 503, Some("1")),
            (GatewayError::model_not_allowed("m"), 403, None),
            (GatewayError::invalid_api_key(), 401, None),
        ];
        for (e, status, retry_after) in cases {
            for protocol in [Protocol::OpenAi, Protocol::Anthropic, Protocol::Gemini] {
                let r = e.render(protocol, Some("req_1"));
                assert_eq!(r.status().as_u16(), status, "{}", e.code);
                let ra = r.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
                assert_eq!(ra.as_deref(), retry_after, "{}", e.code);
                let b = body(protocol, e.status, e.code, &e.message, None);
                let code = match protocol {
                    Protocol::Gemini => &b["error"]["details"][0]["reason"],
                    Protocol::Anthropic | Protocol::OpenAi => &b["error"]["code"],
                };
                assert_eq!(code, e.code, "{protocol:?} {b}");
            }
        }
        // Seed 004 tells its three 429s apart by `error.message`: this one is its text, word for word.
        let e = GatewayError::upstream_quota_exhausted(5);
        let b = body(Protocol::OpenAi, e.status, e.code, &e.message, None);
        assert_eq!(b["error"]["message"], "all upstream credentials for this model are rate limited");
    }

    #[test]
    fn retry_after_header_when_the_catalogue_has_one() {
        let r = GatewayError::no_available_account("m").render(Protocol::OpenAi, None);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        assert!(r.headers().get("x-should-retry").is_none(), "a wait is left to the client");
        let r = GatewayError::upstream_quota_exhausted(3600).render(Protocol::Anthropic, None);
        assert!(r.headers().get("x-should-retry").is_none(), "an account not tried may serve");
        let blocked = |secs| {
            GatewayError::new(StatusCode::TOO_MANY_REQUESTS, "api_key_circuit_open", "m").retry_after(secs)
        };
        let r = blocked(600).holds_for_the_key().render(Protocol::Anthropic, None);
        assert_eq!(r.headers()["x-should-retry"], "false", "nothing lifts the block sooner");
        let r = blocked(120).holds_for_the_key().render(Protocol::OpenAi, None);
        assert!(r.headers().get("x-should-retry").is_none(), "two minutes are the client's to wait");
        let r = GatewayError::budget_exceeded("m".into()).not_soon(true).render(Protocol::OpenAi, None);
        assert_eq!(r.headers()["x-should-retry"], "false");
        let r = GatewayError::invalid_api_key().render(Protocol::OpenAi, None);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
