//! Quota as the providers report it (protocols.md §3, §4, §5): Codex `wham/usage`, Antigravity
//! `fetchAvailableModels`, and the quota headers every model answer carries.
//!
//! A quota read is not a model call: it takes no scripted step and is logged apart, under
//! `quota:<credential>`, so tests count model calls and reads separately. Every read also counts
//! toward the `quota` key of [`MockState::peak`]: the most reads the gateway ever ran at once.
//! A credential's script shapes its reads with `quota` (the body), `quota_status` (a failure)
//! and `quota_delay_ms`; model answers carry `quota_headers` (or the provider's defaults).

use axum::{
    extract::State,
    http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri},
    response::Response,
};
use serde_json::{Value, json};

use super::{MockState, Script, call, credential, json};

pub async fn wham_usage(
    State(s): State<MockState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let script = read(&s, &method, &uri, &headers, &[]).await;
    if let Some(refused) = unauthenticated(&headers) {
        return refused;
    }
    // The ChatGPT backend routes by workspace: the account id travels with every call.
    if !headers.contains_key("chatgpt-account-id") {
        return json(
            StatusCode::FORBIDDEN,
            json!({"detail": {"code": "missing_account_id", "message": "chatgpt-account-id is required"}}),
        );
    }
    if let Some(status) = script.quota_status {
        return failed(status);
    }
    let body = script.quota.unwrap_or_else(|| {
        json!({
            "plan_type": "plus",
            "rate_limit": {
                "allowed": true, "limit_reached": false,
                "primary_window": {"used_percent": 12, "limit_window_seconds": 18000, "reset_after_seconds": 3600, "reset_at": 1_796_000_000},
                "secondary_window": {"used_percent": 40, "limit_window_seconds": 604800, "reset_after_seconds": 86400, "reset_at": 1_796_080_000}
            },
            "credits": {"has_credits": false, "unlimited": false, "balance": "0"}
        })
    });
    json(StatusCode::OK, body)
}

pub async fn fetch_available_models(
    State(s): State<MockState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let script = read(&s, &method, &uri, &headers, &body).await;
    if let Some(refused) = unauthenticated(&headers) {
        return refused;
    }
    // (its client, the Antigravity hub, is checked by `strict`)
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !request["project"].is_string() {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": {"code": 400, "message": "project is required", "status": "INVALID_ARGUMENT"}}),
        );
    }
    if let Some(status) = script.quota_status {
        return failed(status);
    }
    let body = script.quota.unwrap_or_else(|| {
        let model = |frac: f64| json!({"quotaInfo": {"remainingFraction": frac, "resetTime": "2031-01-01T00:00:00Z"}, "supportsThinking": true});
        json!({"models": {"gemini-3.1-pro-low": model(0.8), "gemini-3.6-flash-high": model(0.5), "claude-opus-4-6-thinking": model(0.2)}})
    });
    json(StatusCode::OK, body)
}

/// Logs a read and waits its scripted delay, counted toward the `quota` peak meanwhile.
async fn read(s: &MockState, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Script {
    let cred = credential(headers);
    s.log(&format!("quota:{cred}"), call(method, uri, headers, body));
    let script = s.script(&cred);
    let _reading = s.enter("quota");
    tokio::time::sleep(std::time::Duration::from_millis(script.quota_delay_ms.max(1))).await;
    script
}

/// A read without a bearer token is refused, as the providers do.
fn unauthenticated(headers: &HeaderMap) -> Option<Response> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| !t.trim().is_empty());
    (!bearer).then(|| {
        json(
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": "missing bearer token", "code": "invalid_token"}}),
        )
    })
}

fn failed(status: u16) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, json!({"error": {"message": "scripted quota failure", "type": "server_error"}}))
}

/// Adds a model answer's quota headers: the script's, else the provider's defaults.
pub(crate) fn add_headers(resp: &mut Response, script: &Script, defaults: &[(&'static str, &'static str)]) {
    let h = resp.headers_mut();
    match &script.quota_headers {
        Some(scripted) => {
            for (name, value) in scripted {
                if let (Ok(n), Ok(v)) =
                    (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
                {
                    h.insert(n, v);
                }
            }
        }
        None => {
            for (name, value) in defaults {
                h.insert(*name, HeaderValue::from_static(value));
            }
        }
    }
}

/// An error answer's quota headers: the script's when it sets them (Codex sends its `x-codex-*`
/// headers with a 429 too, Claude its `anthropic-ratelimit-unified-*`), else none, so that
/// scripts that set none see errors as before.
pub(crate) fn add_scripted_headers(resp: &mut Response, script: &Script) {
    if script.quota_headers.is_some() {
        add_headers(resp, script, &[]);
    }
}

/// Codex's defaults: both windows, no reset time (so no pace), far from spent.
pub(crate) const CODEX_HEADERS: &[(&str, &str)] = &[
    ("x-codex-primary-used-percent", "12.0"),
    ("x-codex-primary-window-minutes", "300"),
    ("x-codex-secondary-used-percent", "40.0"),
    ("x-codex-secondary-window-minutes", "10080"),
];

/// Claude's defaults.
pub(crate) const CLAUDE_HEADERS: &[(&str, &str)] = &[
    ("anthropic-ratelimit-unified-status", "allowed"),
    ("anthropic-ratelimit-unified-5h-utilization", "0.12"),
    ("anthropic-ratelimit-unified-7d-utilization", "0.40"),
];
