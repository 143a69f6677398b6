//! An upstream's HTTP error answer: read (bounded in size and time), classified into a verdict
//! about the account (CD-1..CD-5, ERR-1, ERR-2), and re-rendered for the client without its raw
//! body (ERR-3).

use std::time::Duration;

use app::model::Provider;
use axum::{
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use serde_json::Value;

use super::{
    attempt::{Attempt, Ending, Failing},
    context_limit::{self, ContextLimit},
    error::{GatewayError, Protocol},
    schedule,
};
use crate::{
    providers::observe::sanitize,
    records::{Outcome, Usage},
    scheduler::{
        Verdict,
        state::{FailurePolicy, RETRY_AFTER_MIN, clamp_retry, retry_secs},
    },
};

/// Most bytes of an upstream error body read (to classify it; it is never returned raw).
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// Longest an upstream may take to send its error body; then it is classified by status alone.
pub const ERROR_BODY_DEADLINE: Duration = Duration::from_secs(10);

/// An upstream HTTP error answer, read (at most 64 KiB, at most 10 s) and classified
/// (CD-1..CD-5, ERR-1/2).
pub(super) struct UpstreamFailure {
    status: StatusCode,
    /// The Retry-After the client gets: what SubLane enforces on the account for this answer
    /// (the upstream's hint from a header or the body, clamped, else the policy's fallback),
    /// or the upstream's own hint, clamped, for answers that block nothing.
    retry_after: Option<u64>,
    body: Value,
    /// The upstream's quota and model hints that pass to the client as on a success
    /// (`x-codex-*`, `anthropic-ratelimit-*`, ...): Codex reads them to say which limit a
    /// `usage_limit_reached` hit, Claude Code to explain its 429s.
    hints: HeaderMap,
    pub(super) verdict: Verdict,
    /// Seconds the answer blocks the account for (CD-1, CD-4, CD-5), if it blocks it.
    blocks_for: Option<u64>,
    /// No account can serve the call for longer than a client waits out on its own: the answer
    /// says `x-should-retry: false` ([`GatewayError::not_soon`]).
    not_soon: bool,
}

/// The error object of an upstream's error body. Google's Cloud Code endpoint (Antigravity)
/// answers a failed `streamGenerateContent` with its error in a one-element array
/// (`[{"error": {...}}]`, as gemini-cli's reports show), which would hide its status, its
/// `RetryInfo` and which model is limited from every reading of the body.
fn error_object(body: Value) -> Value {
    match body {
        Value::Array(mut items) if items.len() == 1 && items[0].is_object() => {
            items.pop().unwrap_or_default()
        }
        body => body,
    }
}

impl UpstreamFailure {
    pub(super) async fn read(
        upstream: super::client::Answer,
        provider: Provider,
        upstream_model: &str,
        now: chrono::DateTime<chrono::Utc>,
        policy: &FailurePolicy,
    ) -> Self {
        let status = upstream.status();
        let headers = upstream.headers().clone();
        let mut bytes = Vec::new();
        let mut stream = upstream.bytes_stream();
        let read = async {
            while let Some(Ok(chunk)) = stream.next().await {
                bytes.extend_from_slice(&chunk);
                if bytes.len() >= ERROR_BODY_LIMIT {
                    break;
                }
            }
        };
        let complete = tokio::time::timeout(ERROR_BODY_DEADLINE, read).await.is_ok();
        let body = if complete { serde_json::from_slice(&bytes).unwrap_or(Value::Null) } else { Value::Null };
        let answer = Refusal { status, headers: &headers, body };
        Self::classify(answer, provider, upstream_model, now, policy)
    }

    /// Classifies an upstream's refusal, read: over HTTP an error answer, over a WebSocket a
    /// wrapped `error` event (its `headers` taken as the answer's, the event as its body).
    pub(super) fn classify(
        answer: Refusal<'_>,
        provider: Provider,
        upstream_model: &str,
        now: chrono::DateTime<chrono::Utc>,
        policy: &FailurePolicy,
    ) -> Self {
        let Refusal { status, headers, body } = answer;
        let hint = schedule::retry_after_header(headers, now);
        let mut hints = HeaderMap::new();
        for (name, value) in headers {
            // (the answer's own type and Retry-After are SubLane's)
            let own = name == header::CONTENT_TYPE || name == header::RETRY_AFTER;
            if !own && crate::providers::response_header_passes(name.as_str()) {
                hints.append(name.clone(), value.clone());
            }
        }
        let body = error_object(body);
        let verdict = schedule::verdict(provider, status, hint, &body, upstream_model);
        let blocks_for = enforced_retry(verdict, policy);
        let retry_after = blocks_for.or(hint.map(retry_secs));
        UpstreamFailure { status, retry_after, body, hints, verdict, blocks_for, not_soon: false }
    }

    /// When the account that answered could serve again, in seconds from now: at once unless
    /// the answer blocks it (a credential refusal's pause is not known here: at once too).
    pub(super) fn account_back_in(&self) -> u64 {
        self.blocks_for.unwrap_or(0)
    }

    /// Marks the answer as one no account can outlast a client's own retries for (see
    /// [`UpstreamFailure::not_soon`]).
    pub(super) fn not_soon(self, not_soon: bool) -> Self {
        UpstreamFailure { not_soon, ..self }
    }

    /// What the body says of the subscription quota (QT-2: Codex `usage_limit_reached`,
    /// Antigravity `QUOTA_EXHAUSTED` for one model).
    pub(super) fn quota_observation(&self, provider: Provider, at: i64) -> crate::quota::Observation {
        crate::quota::parse::error_body(provider, self.status.as_u16(), &self.body, at)
    }

    /// The account cannot serve this request now, whoever asks: another account might.
    pub(super) fn account_cannot_serve(&self) -> bool {
        account_cannot_serve(self.verdict)
    }

    /// The account answered that it does not serve this model (RT-3).
    pub(super) fn model_unsupported(&self) -> bool {
        schedule::model_unsupported(self.status, &self.body)
    }

    /// Whether a request refused so before anything reached its client moves to another account
    /// ([`moves_off`]).
    pub(super) fn moves(&self, bound: bool) -> bool {
        moves_off(bound, self.model_unsupported(), self.account_cannot_serve())
    }

    /// Re-rendered for the client: status and Retry-After kept, the body rebuilt in the client's
    /// shape from the upstream's error type/code, and for a malformed request its message made
    /// safe ([`about_the_request`]; ERR-3: never a raw upstream body). 403
    /// becomes `upstream_forbidden`, a 401 for the account's credentials `upstream_unauthorized`
    /// (never the caller's `invalid_api_key`), a model-scoped Antigravity limit
    /// `model_rate_limited`. A prompt too long for the model is said again in Anthropic's words,
    /// from the upstream's numbers alone ([`ContextLimit`]). The verdict settles the attempt's
    /// account, if it still holds one.
    pub(super) fn respond(self, attempt: Attempt) -> Failing {
        Box::pin(self.answer(attempt))
    }

    async fn answer(self, attempt: Attempt) -> Response {
        let (status, verdict) = (self.status, self.verdict);
        let (code, body, headers) = match self.render(attempt.protocol, Some(&attempt.request_id)) {
            Rendered::Local(e) => {
                return attempt.fail_with(e, Outcome::Error, Some(status.as_u16()), verdict).await;
            }
            Rendered::Upstream { code, body, headers } => (code, body, headers),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        resp.headers_mut().extend(headers);
        attempt
            .finish(Ending {
                outcome: Outcome::Error,
                error_code: Some(code),
                upstream_status: Some(status.as_u16()),
                usage: Usage::default(),
                first_output: None,
                verdict,
            })
            .await;
        resp
    }

    /// The client's answer in `protocol`'s shape (see [`UpstreamFailure::respond`]).
    pub(super) fn render(self, protocol: Protocol, request_id: Option<&str>) -> Rendered {
        let UpstreamFailure { status, retry_after, body: v, hints, verdict, not_soon, .. } = self;
        let local = match verdict {
            // (the wait enforced on the model: its hint, else the 429 fallback)
            Verdict::ModelLimited(d) => Some(GatewayError::model_rate_limited(
                retry_after.unwrap_or_else(|| retry_secs(clamp_retry(d, RETRY_AFTER_MIN))),
            )),
            Verdict::CredentialsRejected(403) | Verdict::Forbidden => {
                Some(GatewayError::upstream_forbidden())
            }
            Verdict::CredentialsRejected(_) => Some(GatewayError::upstream_unauthorized()),
            _ => None,
        };
        if let Some(e) = local {
            return Rendered::Local(e.not_soon(not_soon));
        }
        let err = &v["error"];
        // A prompt too long for the model: the one refusal whose words clients act on.
        let too_long = (status == StatusCode::BAD_REQUEST).then(|| ContextLimit::recognize(&v)).flatten();
        let (code, message) = match too_long {
            Some(refusal) => (context_limit::CODE.to_owned(), refusal.message()),
            None => {
                let code = sanitize(
                    err["type"]
                        .as_str()
                        .or(err["code"].as_str())
                        .or(err["status"].as_str())
                        .or(v["error"].as_str())
                        .unwrap_or(""),
                )
                .unwrap_or_else(|| format!("upstream_{}", status.as_u16()));
                let message = match about_the_request(status, &v) {
                    Some(words) => {
                        format!("the upstream provider answered {} ({code}): {words}", status.as_u16())
                    }
                    None => format!("the upstream provider answered {}: {code}", status.as_u16()),
                };
                (code, message)
            }
        };
        let mut body = super::error::body(protocol, status, &code, &message, request_id);
        if protocol == Protocol::OpenAi {
            // The upstream's type and code, each as it gave them (sanitized): Codex reads the
            // type of some answers (`usage_limit_reached`) and the code of others (a 503's
            // `server_is_overloaded` or `slow_down`, protocols.md §1b).
            let (kind, upstream_code) = match too_long {
                // (OpenAI's own type for it, whichever provider refused: Google's has none)
                Some(_) => (Some("invalid_request_error".to_owned()), Some(code.clone())),
                None => (err["type"].as_str().and_then(sanitize), err["code"].as_str().and_then(sanitize)),
            };
            body["error"]["type"] =
                Value::String(kind.clone().or(upstream_code.clone()).unwrap_or(code.clone()));
            body["error"]["code"] = Value::String(upstream_code.or(kind).unwrap_or(code.clone()));
            // Codex reads these to tell the user when their quota resets.
            // (a number as it came, a word sanitized like the code: nothing else of the body)
            for field in ["resets_at", "plan_type", "resets_in_seconds"] {
                let kept = match &err[field] {
                    Value::Number(n) => Some(Value::Number(n.clone())),
                    Value::String(word) => sanitize(word).map(Value::String),
                    _ => None,
                };
                if let Some(kept) = kept {
                    body["error"][field] = kept;
                }
            }
        }
        if let (Protocol::Gemini, Some(secs)) = (protocol, retry_after) {
            // gemini-cli decides from the body alone whether to retry and when (it stops past 5
            // minutes): without this it retries an exhaustion lasting hours.
            super::error::retry_info(&mut body, secs);
        }
        let mut headers = hints;
        if let Some(secs) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        super::error::say_not_soon(&mut headers, not_soon);
        Rendered::Upstream { code, body, headers }
    }
}

/// The upstream's own words about a request it refused as malformed (400, 404, 413, 422): what
/// to fix, which a client shows its user ("max_tokens: 64001 > 64000", "the model is not
/// supported with a ChatGPT account"). Only the message, never the body (ERR-3), at most
/// [`WORDS_MAX`] characters, control characters as spaces, and any word that looks like a
/// credential, an organisation or account id or an address replaced. Not for other statuses:
/// a 401, 403 or 429 is about the account, and its words may name it.
fn about_the_request(status: StatusCode, v: &Value) -> Option<String> {
    if !matches!(status.as_u16(), 400 | 404 | 413 | 422) {
        return None;
    }
    // (OpenAI, Anthropic and Google: `error.message`; the Codex backend: `detail`)
    let raw = v["error"]["message"].as_str().or(v["detail"].as_str())?;
    let mut out = String::new();
    for word in raw.split(|c: char| c.is_whitespace() || c.is_control()).filter(|w| !w.is_empty()) {
        if out.chars().count() + word.chars().count() > WORDS_MAX {
            out.push_str(" …");
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(if identifying(word) { "[redacted]" } else { word });
    }
    (!out.is_empty()).then_some(out)
}

/// Longest upstream message passed on (see [`about_the_request`]).
const WORDS_MAX: usize = 600;

/// A word that may identify an account or carry a secret. The word is looked at in pieces (split
/// at `= : / ? & , ; ( ) [ ] { } " '`, as in `key=sk-…` or `{"project":"…"}`): a piece shaped
/// like a key or token, an organisation, project, account or user id, a UUID, a long run of
/// letters and digits, or an e-mail address; or the word names a Google project (`projects/…`).
fn identifying(word: &str) -> bool {
    const SHAPES: [&str; 11] =
        ["sk-", "org-", "org_", "proj_", "acct_", "user-", "ya29.", "eyj", "bearer", "sess-", "aiza"];
    let lower = word.to_ascii_lowercase();
    if lower.contains("projects/") {
        return true;
    }
    lower.split(|c: char| "=:/?&,;()[]{}\"'`<>".contains(c)).any(|piece| {
        let piece = piece.trim_matches(|c: char| !c.is_alphanumeric());
        let email = piece.split_once('@').is_some_and(|(user, host)| !user.is_empty() && host.contains('.'));
        SHAPES.iter().any(|p| piece.starts_with(p)) || email || uuid(piece) || secret_like(piece)
    })
}

/// `8-4-4-4-12` hex digits.
fn uuid(piece: &str) -> bool {
    let groups: Vec<&str> = piece.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// 20 or more letters and digits in a row, both kinds: a key or id, never a word or a number.
fn secret_like(piece: &str) -> bool {
    piece.split(|c: char| !c.is_ascii_alphanumeric()).any(|run| {
        run.len() >= 20
            && run.chars().any(|c| c.is_ascii_digit())
            && run.chars().any(|c| c.is_ascii_alphabetic())
    })
}

/// An upstream's refusal as read: its status, headers and body.
pub(super) struct Refusal<'a> {
    pub status: StatusCode,
    pub headers: &'a HeaderMap,
    pub body: Value,
}

/// An upstream failure as the client gets it.
pub(super) enum Rendered {
    /// Said in SubLane's own words (a credential refusal, a model-scoped limit).
    Local(GatewayError),
    /// The upstream's refusal rebuilt: the recorded error code, the body and the headers
    /// (Retry-After, the quota hints, `x-should-retry`).
    Upstream { code: String, body: Value, headers: HeaderMap },
}

/// ACC-2: a request refused before any byte reached its client moves to another account when the
/// account cannot serve it now, or does not serve its model; a conversation bound to the account
/// (RT-2) only in the second case, and only if the scheduler then lets it (RT-3: a model switch,
/// no continuation).
pub(super) fn moves_off(bound: bool, model_unsupported: bool, cannot_serve: bool) -> bool {
    model_unsupported || (!bound && cannot_serve)
}

/// Whether `verdict` says the account cannot serve the request now, whoever asks (another
/// account might): rate limited, model limited, overloaded, or its credentials refused.
pub(super) fn account_cannot_serve(verdict: Verdict) -> bool {
    matches!(
        verdict,
        Verdict::RateLimited(_)
            | Verdict::ModelLimited(_)
            | Verdict::Overloaded(_)
            | Verdict::CredentialsRejected(_)
    )
}

/// The wait SubLane enforces on the account for `verdict`, in whole seconds (CD-1, CD-4, CD-5):
/// what a client is told, so it comes back when the account can serve again.
pub(super) fn enforced_retry(verdict: Verdict, policy: &FailurePolicy) -> Option<u64> {
    match verdict {
        Verdict::RateLimited(hint) => Some(retry_secs(clamp_retry(hint, policy.fallback_429))),
        Verdict::Overloaded(hint) => Some(retry_secs(clamp_retry(hint, policy.overload))),
        Verdict::ModelLimited(hint) => Some(retry_secs(clamp_retry(hint, policy.fallback_429))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn clients_are_told_the_wait_that_is_enforced() {
        let p = FailurePolicy::default();
        assert_eq!(enforced_retry(Verdict::RateLimited(None), &p), Some(5), "the 429 fallback");
        assert_eq!(enforced_retry(Verdict::Overloaded(None), &p), Some(30), "the overload pause");
        let from_body = Verdict::RateLimited(Some(Duration::from_millis(12_500)));
        assert_eq!(enforced_retry(from_body, &p), Some(13), "a body's hint, rounded up");
        assert_eq!(enforced_retry(Verdict::RateLimited(Some(Duration::from_secs(90_000))), &p), Some(3600));
        assert_eq!(
            enforced_retry(Verdict::ModelLimited(None), &p),
            Some(5),
            "a model's limit: the 429 fallback"
        );
        assert_eq!(enforced_retry(Verdict::ModelFailure, &p), None);
    }

    #[test]
    fn words_that_may_name_an_account_are_redacted() {
        for word in [
            "sk-ant-api03-abc",
            "key=sk-proj-abc",
            r#"{"api_key":"sk-abc"}"#,
            "org-AbC123",
            "(ops@example.com),",
            "projects/123456789/locations",
            "https://x.example/v1?project=proj_abc",
            "2f1c7a52-9a3b-4c1e-8f2d-0123456789ab",
            "AIzaSyD-abcdefg",
            "acct:7f3a9c2e1b4d8f6a0c5e",
        ] {
            assert!(identifying(word), "{word}");
        }
        for word in [
            "max_tokens:",
            "64001",
            "gemini-1.5-pro@001",
            "claude-sonnet-4-5-20250929",
            "7340032",
            "`max_tokens`",
        ] {
            assert!(!identifying(word), "{word}");
        }
    }

    /// A model's limit without a hint: the client is told the fallback the model is held for.
    #[test]
    fn a_model_limit_without_a_hint_is_told_the_fallback() {
        let body = serde_json::json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
             "domain": "cloudcode-pa.googleapis.com", "metadata": {"model": "gemini-3.1-pro-low"}}]}});
        let headers = HeaderMap::new();
        let answer = Refusal { status: StatusCode::TOO_MANY_REQUESTS, headers: &headers, body };
        let p = FailurePolicy::default();
        let f = UpstreamFailure::classify(
            answer,
            Provider::Antigravity,
            "gemini-3.1-pro-low",
            chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            &p,
        );
        let Rendered::Local(e) = f.render(Protocol::Gemini, None) else { panic!("a local answer") };
        assert_eq!((e.code, e.retry_after), ("model_rate_limited", Some(5)));
    }
}
