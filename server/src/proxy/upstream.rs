//! Sending a model call upstream: the one place that builds the upstream HTTP request, so every
//! provider path puts exactly one of each singleton header on the wire (`Content-Type`,
//! `Content-Length`, `Host`, the account's credential) whatever the client sent, and the CD-3
//! retry loop around it.
//!
//! Strict upstreams (aiohttp-based provider proxies, for one) answer 400 to a duplicate
//! `Content-Type`; real providers redirect nowhere, and a redirect followed would carry the
//! account's credential and the body to another host, so a 3xx is an upstream error (the model-call
//! client, [`super::client`], never follows one).

use axum::{
    body::Bytes,
    http::{HeaderMap, HeaderValue, header},
};

use super::{
    attempt::Attempt,
    client::{Answer, Client, SendError},
    error::GatewayError,
    schedule::{self, retry_after_header},
};
use crate::{app_state::AppState, directory::Account, providers, records::Outcome};

/// The upstream POST for `target`: its headers (the account's credential and the client headers
/// that may pass, one value each) and exactly one `Content-Type: application/json`, since what
/// SubLane sends upstream is always the JSON body it decoded; the answer [`uncompressed`].
pub async fn post(http: &Client, target: &providers::Target, body: Bytes) -> Result<Answer, SendError> {
    let mut headers = target.headers.clone();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    uncompressed(&mut headers);
    // what reqwest sent for a client that names no Accept (SubLane's own test calls among them)
    headers.entry(header::ACCEPT).or_insert(HeaderValue::from_static("*/*"));
    http.post(&target.url, headers, body).await
}

/// Asks for an uncompressed answer (`Accept-Encoding: identity`), as every call SubLane makes
/// upstream does: model calls, the WebSocket handshake, and the token, quota and sign-in calls.
/// SubLane reads every answer (usage, errors, translation, tokens) and passes no
/// `Content-Encoding` on, and a request without the header leaves the coding to the upstream
/// (RFC 9110 §12.5.3).
pub(crate) fn uncompressed(headers: &mut HeaderMap) {
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
}

/// Sends the upstream request. CD-3: explicit 408/5xx answers are retried on the same account, at
/// most twice, before any byte is accepted, re-checking policy each time; a long upstream hint
/// goes back to the client instead of being waited out. Same lease, request id and record.
///
/// A plain fn returning an async block (see `call::dispatch`): `target` and `body` live in the
/// future once, not twice.
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(super) fn send_with_retries<'a>(
    s: &'a AppState,
    headers: &'a HeaderMap,
    attempt: &'a Attempt,
    account: &'a Account,
    upstream_model: &'a str,
    target: providers::Target,
    body: Bytes,
) -> impl Future<Output = Result<Answer, (GatewayError, Outcome)>> + 'a {
    async move {
        let mut retries = 0;
        let deadline = attempt.started + s.config.request_deadline;
        loop {
            // CD-6: the header timeout, within the request's deadline (a retry or a long queue
            // wait may have used some of it); none is sent once the deadline has passed
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err((GatewayError::upstream_timeout(), Outcome::Error));
            }
            let by = (now + s.config.upstream_header_timeout).min(deadline);
            // (the call built inside the timeout, as in `send_to`: bound to a local first, its
            // future took room twice in a debug build)
            let upstream = match tokio::time::timeout_at(by, post(&s.model_http, &target, body.clone())).await
            {
                Err(_) => return Err((GatewayError::upstream_timeout(), Outcome::Error)),
                Ok(Err(e)) => {
                    tracing::warn!(
                        request_id = %attempt.request_id,
                        account_id = account.id,
                        error = %error_chain(&e),
                        "upstream call failed before an answer"
                    );
                    return Err((GatewayError::upstream_unavailable(), Outcome::Error));
                }
                Ok(Ok(r)) => r,
            };
            s.metrics.upstream_answer(account.provider.as_str(), upstream.status().as_u16());
            if upstream.status().is_redirection() {
                tracing::warn!(
                    request_id = %attempt.request_id,
                    account_id = account.id,
                    status = upstream.status().as_u16(),
                    "upstream answered a redirect; not followed (check the upstream base URL)"
                );
                return Err((GatewayError::upstream_redirected(), Outcome::Error));
            }
            // (no retry, or no time left for one: the client gets this answer, not a timeout)
            let hint = || retry_after_header(upstream.headers(), s.clock.now());
            let Some(backoff) = schedule::retry_at(upstream.status(), retries, deadline, hint) else {
                return Ok(upstream);
            };
            drop(upstream);
            retries += 1;
            tokio::time::sleep_until(backoff).await;
            schedule::recheck_for_retry(s, headers, attempt, account, upstream_model).await?;
        }
    }
}

/// An error and its causes, one line (hyper's errors name their cause only in `source`).
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}
