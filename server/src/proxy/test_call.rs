//! ACC-3 "Test": one small, real request to the account's upstream, outside the scheduler (no
//! lease, no record, no verdict: an admin's probe never cools an account). The caller recovers
//! the account's runtime state when it succeeds.

use std::time::Duration;

use app::model::{CredentialInput, Provider};
use axum::body::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use crate::{
    app_state::AppState,
    providers::{self, Operation, observe::sanitize},
};

/// How long a test may take end to end.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What the test found.
pub struct Tested {
    pub ok: bool,
    pub upstream_status: Option<u16>,
    pub latency: Duration,
    /// A sanitized error code when it failed.
    pub error: Option<String>,
}

/// The cheapest request each provider answers, and its model.
fn probe(provider: Provider) -> (Operation, &'static str, serde_json::Value) {
    match provider {
        Provider::Codex | Provider::OpenaiApi => (
            Operation::Responses,
            "gpt-5.1-codex-mini",
            json!({"model": "gpt-5.1-codex-mini", "input": "ping", "stream": true, "store": false}),
        ),
        Provider::Claude | Provider::AnthropicApi => (
            Operation::Messages,
            "claude-haiku-4-5",
            json!({"model": "claude-haiku-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]}),
        ),
        Provider::Antigravity => (
            Operation::GeminiGenerate,
            "gemini-3-flash",
            json!({"contents": [{"role": "user", "parts": [{"text": "ping"}]}], "generationConfig": {"maxOutputTokens": 1}}),
        ),
    }
}

pub async fn run(s: &AppState, provider: Provider, credentials: &CredentialInput) -> Tested {
    let started = Instant::now();
    let failed = |error: &str, status: Option<u16>| Tested {
        ok: false,
        upstream_status: status,
        latency: started.elapsed(),
        error: Some(error.to_owned()),
    };
    let (op, model, body) = probe(provider);
    // (as the provider's own client: no client of SubLane's made this call)
    let client = s.config.upstream.agents.as_client(provider);
    let target = match providers::target(provider, credentials, &s.config.upstream, op, &client, None) {
        Ok(t) => t,
        Err(_) => return failed("credentials_do_not_fit_provider", None),
    };
    let body = match &target.envelope {
        Some(project) => match providers::envelope(body, project, model, "test") {
            Ok(b) => Bytes::from(b),
            Err(_) => return failed("internal_error", None),
        },
        None => Bytes::from(body.to_string()),
    };
    let send = super::upstream::post(&s.model_http, &target, body);
    let result = tokio::time::timeout(TEST_TIMEOUT, async {
        let resp = send.await.map_err(|_| ("upstream_unavailable".to_owned(), None))?;
        let status = resp.status();
        // Read the answer to the end: a stream that breaks is a failed test.
        let mut stream = resp.bytes_stream();
        let mut head = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|_| ("upstream_stream_broken".to_owned(), Some(status.as_u16())))?;
            if head.len() < 64 * 1024 {
                head.extend_from_slice(&chunk);
            }
        }
        if !status.is_success() {
            let v: serde_json::Value = serde_json::from_slice(&head).unwrap_or_default();
            let code = v["error"]["type"].as_str().or(v["error"]["status"].as_str()).and_then(sanitize);
            return Err((
                code.unwrap_or_else(|| format!("upstream_{}", status.as_u16())),
                Some(status.as_u16()),
            ));
        }
        Ok(status.as_u16())
    })
    .await;
    match result {
        Ok(Ok(status)) => {
            Tested { ok: true, upstream_status: Some(status), latency: started.elapsed(), error: None }
        }
        Ok(Err((code, status))) => failed(&code, status),
        Err(_) => failed("upstream_timeout", None),
    }
}
