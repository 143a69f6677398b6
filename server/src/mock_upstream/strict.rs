//! The mock's HTTP strictness, at least that of the real providers and of the aiohttp-based
//! provider proxies teams put in front of them: before any handler runs, a request with a
//! repeated singleton header, a body that disagrees with its `Content-Length`, an unexpected
//! `Transfer-Encoding`, or a POST body of unknown length gets that provider's own 400 shape.
//!
//! hyper (which the mock is built on) accepts a repeated `Content-Type` and hands handlers the
//! first; a strict upstream refuses the request. A lenient mock hid exactly that bug once, so
//! every test, benchmark and demo call goes through this check.
//!
//! The calls made around model calls are held to their client's form too, as the providers'
//! front ends hold them: a token or usage call that does not name Codex or Claude Code is
//! refused as Cloudflare refuses it (403), and a Cloud Code call that does not come from the
//! Antigravity hub is refused as Cloud Code refuses an unsupported client.

use axum::{
    extract::Request,
    http::{HeaderMap, Method, StatusCode, header},
    middleware::Next,
    response::Response,
};
use serde_json::json;

use super::json;

/// Headers a request may carry at most once: aiohttp's singletons (RFC 9110 fields that are not
/// lists) plus the credentials and version headers the providers read.
pub const SINGLETONS: &[&str] = &[
    "content-type",
    "content-length",
    "content-location",
    "content-range",
    "content-encoding",
    "host",
    "transfer-encoding",
    "user-agent",
    "max-forwards",
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "anthropic-version",
    "chatgpt-account-id",
    "session-id",
    "session_id",
    "openai-organization",
    "openai-project",
];

/// Largest body the mock reads.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// The middleware: refuses what a strict upstream refuses, passes everything else on with its
/// body read (and measured) once.
pub async fn check(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if path.starts_with("/__mock/") {
        return next.run(req).await; // the test-control API is no provider
    }
    if let Err(message) = headers_ok(req.method(), req.headers()) {
        return refuse(&path, &message);
    }
    if let Some(refused) = unnamed_client(&path, req.headers()) {
        return refused;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return refuse(&path, "the request body ended before its Content-Length"),
    };
    if declared.is_some_and(|n| n != bytes.len()) {
        return refuse(&path, "the request body does not match its Content-Length");
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

/// The header rules, apart from the body.
pub fn headers_ok(method: &Method, headers: &HeaderMap) -> Result<(), String> {
    for name in SINGLETONS {
        if headers.get_all(*name).iter().count() > 1 {
            return Err(format!("Duplicate '{}' header found.", title_case(name)));
        }
    }
    if let Some(te) = headers.get(header::TRANSFER_ENCODING) {
        if headers.contains_key(header::CONTENT_LENGTH) {
            return Err("Content-Length and Transfer-Encoding together are not allowed".into());
        }
        if !te.to_str().is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked")) {
            return Err("Unsupported Transfer-Encoding".into());
        }
    }
    let has_length =
        headers.contains_key(header::CONTENT_LENGTH) || headers.contains_key(header::TRANSFER_ENCODING);
    if *method == Method::POST && !has_length {
        return Err("a POST needs a Content-Length".into());
    }
    Ok(())
}

/// 403 for a call that does not name the client its endpoint serves (see the module doc).
fn unnamed_client(path: &str, headers: &HeaderMap) -> Option<Response> {
    let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let named = match path {
        // Codex's token and usage endpoints (OpenAI's auth and ChatGPT backend)
        "/oauth/token" | "/backend-api/wham/usage" => headers.contains_key("originator") && !agent.is_empty(),
        "/v1/oauth/token" => agent.starts_with("claude-cli/"),
        _ if path.starts_with("/v1internal") => agent.starts_with("antigravity/hub/"),
        _ => return None,
    };
    if named {
        return None;
    }
    let body = if path.starts_with("/v1internal") {
        json!({"error": {"code": 403, "message": "This version of Antigravity is no longer supported.",
            "status": "PERMISSION_DENIED"}})
    } else {
        json!({"error": {"message": "Sorry, you have been blocked", "type": "forbidden"}})
    };
    Some(json(StatusCode::FORBIDDEN, body))
}

fn title_case(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// 400 in the shape of the provider that serves `path`.
fn refuse(path: &str, message: &str) -> Response {
    let body = if path.starts_with("/v1/messages") || path == "/v1/oauth/token" {
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
    } else if path.starts_with("/v1internal") || path == "/token" {
        json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
    } else {
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
    };
    json(StatusCode::BAD_REQUEST, body)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn repeated_singletons_are_refused_like_aiohttp_does() {
        let dup = h(&[
            ("content-type", "application/json"),
            ("content-type", "application/json"),
            ("content-length", "2"),
        ]);
        assert_eq!(headers_ok(&Method::POST, &dup).unwrap_err(), "Duplicate 'Content-Type' header found.");
        let auth =
            h(&[("authorization", "Bearer a"), ("authorization", "Bearer b"), ("content-length", "2")]);
        assert!(headers_ok(&Method::POST, &auth).is_err());
        let lists = h(&[("accept", "a"), ("accept", "b"), ("anthropic-beta", "x"), ("content-length", "2")]);
        assert!(headers_ok(&Method::POST, &lists).is_ok(), "list headers may repeat");
    }

    #[test]
    fn transfer_encoding_must_be_plain_chunked_and_alone() {
        let both = h(&[("transfer-encoding", "chunked"), ("content-length", "5")]);
        assert!(headers_ok(&Method::POST, &both).is_err());
        let gzip = h(&[("transfer-encoding", "gzip, chunked")]);
        assert!(headers_ok(&Method::POST, &gzip).is_err());
        assert!(headers_ok(&Method::POST, &h(&[("transfer-encoding", "chunked")])).is_ok());
        assert!(headers_ok(&Method::POST, &HeaderMap::new()).is_err(), "a POST body of unknown length");
        assert!(headers_ok(&Method::GET, &HeaderMap::new()).is_ok());
    }

    #[test]
    fn calls_around_model_calls_must_name_their_client() {
        let refused = |path: &str, pairs: &[(&str, &str)]| unnamed_client(path, &h(pairs)).is_some();
        assert!(refused("/oauth/token", &[]));
        assert!(refused("/oauth/token", &[("user-agent", "reqwest")]), "no originator");
        assert!(!refused(
            "/oauth/token",
            &[("originator", "codex_cli_rs"), ("user-agent", "codex_cli_rs/1")]
        ));
        assert!(refused("/backend-api/wham/usage", &[("user-agent", "codex_cli_rs/1")]));
        assert!(refused("/v1/oauth/token", &[("user-agent", "python-requests/2")]));
        assert!(!refused("/v1/oauth/token", &[("user-agent", "claude-cli/2.1.197 (external, cli)")]));
        assert!(refused("/v1internal:streamGenerateContent", &[("user-agent", "antigravity/1.0 sublane")]));
        assert!(!refused(
            "/v1internal:loadCodeAssist",
            &[("user-agent", "antigravity/hub/2.8.1 linux/amd64")]
        ));
        assert!(!refused("/v1/responses", &[]), "a model call's client is its own business");
        assert!(!refused("/token", &[]), "Google's token endpoint");
    }
}
