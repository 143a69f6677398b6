//! The proxy's side of scheduling: asks the scheduler for an account, waits in the pool's queue
//! when it says so, re-checks every policy before dispatch (ADM-7), and turns upstream answers
//! into verdicts about the account (CD-1..CD-5).

use std::time::Duration;
use tracing::Instrument as _;

use app::model::Provider;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use serde_json::Value;

use std::sync::Arc;

use super::{
    Spec,
    attempt::Attempt,
    auth::authenticate_request,
    error::{GatewayError, LONGEST_CLIENT_WAIT},
    request::RoutingFields,
};
use crate::directory::{Account, Snapshot};
use crate::{
    app_state::AppState,
    records::Outcome,
    scheduler::{Ask, ConversationKey, Lease, Refusal, Step, Ticket, Verdict, state::RETRY_AFTER_MAX},
};

/// What a request tells the scheduler about its conversation (RT-1, RT-3, RT-4, RT-7).
#[derive(Debug, Clone, Copy, Default)]
pub struct Conversation {
    pub key: Option<ConversationKey>,
    pub parent: Option<ConversationKey>,
    pub continuation: bool,
}

impl Conversation {
    /// `session_id`/`session-id` header, else a non-empty `prompt_cache_key` (RT-1).
    ///
    /// A Codex review/guardian sub-agent (`x-openai-subagent` with `x-codex-parent-thread-id`)
    /// reuses its parent's session id, so it gets a conversation of its own, keyed by its kind and
    /// its `thread-id` (RT-7: parent and review sessions stay separate), and names the parent's
    /// conversation for the preference.
    pub fn of(headers: &HeaderMap, fields: &RoutingFields) -> Self {
        use crate::header_names::{PARENT_THREAD, SESSION_ID, SESSION_ID_DASHED, SUBAGENT, THREAD_ID};
        let header = |name: &HeaderName| {
            headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
        };
        let session = header(&SESSION_ID).or_else(|| header(&SESSION_ID_DASHED));
        let cache_key = fields.prompt_cache_key.as_deref().map(str::trim).filter(|k| !k.is_empty());
        let continuation = fields.previous_response_id.as_deref().is_some_and(|id| !id.is_empty());
        let subagent = header(&SUBAGENT).map(str::to_ascii_lowercase);
        let parent_thread = header(&PARENT_THREAD);
        if let (Some(kind @ ("review" | "guardian" | "codex-auto-review")), Some(parent)) =
            (subagent.as_deref(), parent_thread)
        {
            let child = header(&THREAD_ID).filter(|t| *t != parent).or(cache_key).or(session);
            return Conversation {
                key: child.map(|c| ConversationKey::subagent(kind, c)),
                parent: Some(ConversationKey::session(parent)),
                continuation,
            };
        }
        let key =
            session.map(ConversationKey::session).or_else(|| cache_key.map(ConversationKey::prompt_cache));
        Conversation { key, parent: None, continuation }
    }
}

/// Finds the attempt an account: decides, waits in the queue if needed (keeping its place when
/// told to decide again), and re-checks the key, member, pool and model policy before every
/// decision (ADM-7). `avoid`: accounts this request already tried. Returns the lease and the
/// model to send upstream; the routing explanation is left on the attempt (EXP-1).
pub(super) async fn schedule(
    s: &AppState,
    spec: Spec,
    attempt: &mut Attempt,
    headers: &HeaderMap,
    conversation: Conversation,
    pin: Option<i64>,
    avoid: &[i64],
) -> Result<(Lease, String), (GatewayError, Outcome)> {
    let mut reserved = None;
    let mut deadline = None;
    let mut ticket: Option<Ticket> = None;
    loop {
        if deadline.is_some() {
            recheck_principal(s, headers, attempt).await?;
        }
        let (snapshot, upstream_model) = pool_policy(s, attempt).await?;
        let model = &attempt.model;
        let Some(pool) = snapshot.pool(attempt.principal.pool_id) else {
            return Err((GatewayError::no_available_account(model), Outcome::Rejected));
        };
        if deadline.is_none() {
            // QT-1: model traffic keeps the pool's quota data current, in the background.
            s.quota.on_traffic(pool, spec.op.providers_for(&upstream_model));
        }
        // Gemini ids may carry an SDK thinking suffix: the account's state, quota and model list
        // know the model without it (QT-4); the suffix still travels upstream as a setting.
        let scheduled_model = match spec.protocol {
            super::error::Protocol::Gemini => crate::providers::thinking_suffix(&upstream_model).0,
            _ => upstream_model.as_str(),
        };
        let ask = Ask {
            member_id: attempt.principal.member_id,
            pool_id: attempt.principal.pool_id,
            model: scheduled_model,
            supported: spec.op.providers_for(&upstream_model),
            only: spec.only,
            conversation: conversation.key,
            parent: conversation.parent,
            continuation: conversation.continuation,
            pin,
            avoid,
            queued: ticket.as_ref().map(Ticket::place),
        };
        let (step, decision) = s.scheduler.decide(pool, &ask, reserved.take());
        attempt.routing = Some(decision);
        let waiting = match step {
            Step::Go(lease) => {
                // BUD-2, again before dispatch after a wait: calls that finished meanwhile may
                // have used up a budget (the lease goes back unused).
                if ticket.is_some()
                    && let Some(e) = super::call::budget_refusal(s, &attempt.principal)
                {
                    return Err((e, Outcome::Rejected));
                }
                attempt.account = Some((lease.account().id, lease.account().provider));
                return Ok((lease, upstream_model));
            }
            Step::Refuse(r) => {
                let not_soon = futile_to_retry(r, pin, avoid);
                return Err((refusal(r, model).not_soon(not_soon), Outcome::Rejected));
            }
            Step::Wait(ticket) => ticket,
        };
        drop(snapshot);
        // (the wait ends at the request's deadline too, if that comes first: CD-6's deadline
        // holds over the whole call)
        let until = *deadline.get_or_insert_with(|| {
            (tokio::time::Instant::now() + s.scheduler.settings().queue_timeout)
                .min(attempt.started + s.config.request_deadline)
        });
        // Waiting again keeps the same place: the old ticket no longer owns it.
        let waiting = ticket.insert(waiting);
        let queued = tokio::time::Instant::now();
        let waited = waiting
            .wait(until, s.lifecycle.shutdown.cancelled())
            .instrument(tracing::debug_span!("queue_wait", pool_id = attempt.principal.pool_id))
            .await;
        attempt.stopwatch.queued(queued.elapsed());
        match waited {
            Ok(r) => reserved = r,
            Err(r) => return Err((refusal(r, &attempt.model), Outcome::Rejected)),
        }
    }
}

/// The current account directory and the model the caller's pool sends upstream for the
/// attempt's model (aliases, allow/deny lists: ID-4), as every decision and retry sees them.
async fn pool_policy(
    s: &AppState,
    attempt: &Attempt,
) -> Result<(Arc<Snapshot>, String), (GatewayError, Outcome)> {
    let snapshot = s.directory.snapshot(&s.db, &s.sealer).await.map_err(|e| {
        tracing::error!(request_id = %attempt.request_id, error = %e, "account directory could not be loaded");
        (GatewayError::internal(), Outcome::Error)
    })?;
    let model = &attempt.model;
    let pool = snapshot
        .pool(attempt.principal.pool_id)
        .ok_or_else(|| (GatewayError::no_available_account(model), Outcome::Rejected))?;
    let upstream =
        pool.resolve_model(model).map_err(|_| (GatewayError::model_not_allowed(model), Outcome::Rejected))?;
    Ok((snapshot, upstream))
}

/// ADM-7 / CD-3: the key and member still allowed (revoked, disabled, expired keys stop here).
pub(super) async fn recheck_principal(
    s: &AppState,
    headers: &HeaderMap,
    attempt: &Attempt,
) -> Result<(), (GatewayError, Outcome)> {
    match authenticate_request(s, headers).await {
        Ok(p) if p.key_id == attempt.principal.key_id && p.pool_id == attempt.principal.pool_id => Ok(()),
        Ok(_) => Err((GatewayError::invalid_api_key(), Outcome::Rejected)),
        Err(e) => Err((e, Outcome::Rejected)),
    }
}

/// CD-3: before a retry on the same account, everything is checked again: key and member, pool
/// and model policy, and that the account is still routable in this pool and not cooling.
pub(super) async fn recheck_for_retry(
    s: &AppState,
    headers: &HeaderMap,
    attempt: &Attempt,
    account: &Account,
    upstream_model: &str,
) -> Result<(), (GatewayError, Outcome)> {
    recheck_principal(s, headers, attempt).await?;
    let (snapshot, resolved) = pool_policy(s, attempt).await?;
    let model = &attempt.model;
    if resolved != upstream_model {
        return Err((GatewayError::model_not_allowed(model), Outcome::Rejected));
    }
    // Still in the pool, at the same lifecycle revision.
    let live = snapshot
        .pool(attempt.principal.pool_id)
        .and_then(|p| p.position(account.id).map(|i| &p.accounts()[i]))
        .is_some_and(|a| a.revision == account.revision);
    if !live {
        return Err((GatewayError::no_available_account(model), Outcome::Rejected));
    }
    // Another request's 429/529/403 on this account meanwhile: no retry into it.
    if let Some(r) = s.scheduler.account_blocked(account.id) {
        return Err((refusal(r, model), Outcome::Rejected));
    }
    Ok(())
}

/// Whether a scheduling refusal outlasts every retry a client makes on its own, so that it says
/// `x-should-retry: false`: its `Retry-After` is longer than [`LONGEST_CLIENT_WAIT`], and it is
/// the answer a new request would get too. An unbound request's `Retry-After` is when the soonest
/// block of any account able to serve it ends; a bound conversation's is its account's, which it
/// waits for (RT-2). Not when this request left out accounts it already tried (a new one would
/// not), nor for a WebSocket connection's account (a new connection may get another).
/// anthropic-python otherwise sleeps through the whole `Retry-After`, up to an hour, twice, before
/// its user hears anything.
fn futile_to_retry(r: Refusal, pin: Option<i64>, avoid: &[i64]) -> bool {
    pin.is_none() && avoid.is_empty() && r.wait_secs().is_some_and(|secs| secs > LONGEST_CLIENT_WAIT)
}

/// The catalogue error for a local refusal (ERR), with when an account the decision considered
/// could serve ([`Refusal::back_in`]).
pub(super) fn refusal(r: Refusal, model: &str) -> GatewayError {
    let e = match r {
        Refusal::QueueFull => GatewayError::account_queue_full(),
        Refusal::WaitTimeout => GatewayError::account_wait_timeout(),
        Refusal::AccountCooling(secs) => GatewayError::account_cooling(secs),
        Refusal::ModelCooling(secs) => GatewayError::model_cooling(secs),
        Refusal::ModelRateLimited(secs) => GatewayError::model_rate_limited(secs),
        Refusal::UpstreamQuotaExhausted(secs) => GatewayError::upstream_quota_exhausted(secs),
        Refusal::NoAccount | Refusal::CredentialsPausedPool(_) => GatewayError::no_available_account(model),
        Refusal::QuotaExhausted => GatewayError::quota_exhausted(),
        Refusal::ModelNotFound => GatewayError::model_not_found(model),
        Refusal::CredentialsPaused(401) => GatewayError::upstream_unauthorized(),
        Refusal::RefreshFailed(secs) => GatewayError::account_refresh_failed(secs),
        Refusal::CredentialsPaused(_) => GatewayError::upstream_forbidden(),
        Refusal::ShuttingDown => GatewayError::shutting_down(),
    };
    GatewayError { back_in: r.back_in(), ..e }
}

/// CD-3: statuses retried on the same account before any byte is accepted.
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 500 | 502 | 503 | 504)
}

/// CD-3: retries after the first try, their backoff, and the longest upstream hint worth waiting.
const MAX_RETRIES: u32 = 2;
const MAX_RETRY_WAIT: Duration = Duration::from_secs(2);

/// CD-3: when to try an answer of `status` again on the same account, `retries` tries again
/// having been made: `None` when it is not (a status not retried, two retries made, an upstream
/// hint longer than a retry waits, which goes to the client, or no time left before `deadline`).
/// The HTTP call and the WebSocket handshake both ask here. `hint` (the answer's Retry-After) is
/// read only for a retryable status.
pub(super) fn retry_at(
    status: StatusCode,
    retries: u32,
    deadline: tokio::time::Instant,
    hint: impl FnOnce() -> Option<Duration>,
) -> Option<tokio::time::Instant> {
    if !retryable(status) || retries >= MAX_RETRIES {
        return None;
    }
    let hint = hint();
    if hint.is_some_and(|h| h > MAX_RETRY_WAIT) {
        return None;
    }
    let at = tokio::time::Instant::now() + retry_backoff(retries + 1, hint);
    (at < deadline).then_some(at)
}

fn retry_backoff(retry: u32, hint: Option<Duration>) -> Duration {
    let base = Duration::from_millis(200) * 2u32.pow(retry.saturating_sub(1));
    hint.map_or(base, |h| h.max(base))
}

/// A `Retry-After` header: delay seconds or an HTTP date (RFC 9110 §10.2.3), clamped to
/// 0..=3600 s whatever the upstream wrote (`1e20`, a date far ahead), so an upstream number never
/// overflows a duration or a deadline. `None` when absent or invalid (NaN, a negative number:
/// delay-seconds has no sign), which the callers answer with their fallback (CD-1: 5 s).
pub(crate) fn retry_after_header(
    headers: &reqwest::header::HeaderMap,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    retry_after_value(headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?, now)
}

/// A `Retry-After` value (seconds, or an HTTP date), capped at [`RETRY_AFTER_MAX`].
pub(crate) fn retry_after_value(v: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let v = v.trim();
    let max = RETRY_AFTER_MAX.as_secs_f64();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(max)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let secs = (at.timestamp_millis().saturating_sub(now.timestamp_millis())) as f64 / 1000.0;
    Some(Duration::from_secs_f64(secs.clamp(0.0, max)))
}

/// What an upstream error answer says about the account (CD-1, CD-2, CD-4, CD-5, ERR-1, ERR-2).
pub(super) fn verdict(
    provider: Provider,
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &Value,
    upstream_model: &str,
) -> Verdict {
    match status.as_u16() {
        429 => {
            // The body's own hint when no header gives one: Google's RetryInfo, Codex's reset.
            let hint = retry_after
                .or_else(|| google_retry_delay(body))
                .or_else(|| body["error"]["resets_in_seconds"].as_u64().map(Duration::from_secs));
            if provider == Provider::Antigravity && antigravity_model_limit(body, upstream_model) {
                return Verdict::ModelLimited(hint);
            }
            Verdict::RateLimited(hint)
        }
        529 => Verdict::Overloaded(retry_after),
        401 => Verdict::CredentialsRejected(401),
        403 if credential_shaped(body) => Verdict::CredentialsRejected(403),
        // ERR-1: a 403 about this request (a model the plan lacks, a policy) marks nothing now.
        403 => Verdict::Forbidden,
        s if s >= 500 => Verdict::ModelFailure,
        _ => Verdict::Neutral,
    }
}

/// Whether a 403 body speaks of the account's credentials (an invalid or expired token, a
/// deactivated or suspended account) rather than of the request.
fn credential_shaped(body: &Value) -> bool {
    const CODES: &[&str] = &[
        "invalid_api_key",
        "invalid_token",
        "token_expired",
        "token_revoked",
        "token_invalidated",
        "account_deactivated",
        "account_disabled",
        "account_suspended",
        "deactivated_workspace",
        "organization_deactivated",
        "authentication_error",
        "unauthenticated",
    ];
    // Phrases about the account or its token, not a feature ("web search is disabled").
    const WORDS: &[&str] = &[
        "account has been deactivated",
        "account is deactivated",
        "account was deactivated",
        "account deactivated",
        "account has been disabled",
        "account is disabled",
        "account has been suspended",
        "account is suspended",
        "account suspended",
        "account has been banned",
        "token has been revoked",
        "token was revoked",
        "token has expired",
        "token is expired",
        "token expired",
        "invalid api key",
        "invalid token",
        "invalid authentication",
        "invalid access token",
        "oauth token",
    ];
    let e = &body["error"];
    let details = e["details"].as_array().into_iter().flatten().filter_map(|d| d["reason"].as_str());
    let codes =
        [e["code"].as_str(), e["type"].as_str(), e["status"].as_str(), body["detail"]["code"].as_str()]
            .into_iter()
            .flatten()
            .chain(details);
    let code_says = codes.map(str::to_ascii_lowercase).any(|c| CODES.contains(&c.as_str()));
    let message =
        e["message"].as_str().or(body["detail"].as_str()).or(e.as_str()).unwrap_or("").to_lowercase();
    code_says || WORDS.iter().any(|w| message.contains(w))
}

/// An upstream answer that says the account does not serve this model at all (RT-3): another
/// account (or, for a conversation switching models, the request's move) may.
pub(super) fn model_unsupported(status: StatusCode, body: &Value) -> bool {
    if !matches!(status.as_u16(), 400 | 404) {
        return false;
    }
    let e = &body["error"];
    let code = e["code"].as_str().or(e["type"].as_str()).unwrap_or("").to_ascii_lowercase();
    let message = e["message"].as_str().unwrap_or("").to_lowercase();
    // The model must be what the sentence is about: "the model `x` does not exist", not
    // "'temperature' is not supported with this model" (a parameter error, ERR-1).
    let about_model = message.find("model").is_some_and(|at| {
        let rest = &message[at..];
        ["not found", "does not exist", "is not supported", "not supported", "is not available"]
            .iter()
            .any(|w| rest.contains(w))
    });
    code == "model_not_found"
        || (status == StatusCode::NOT_FOUND && (code == "not_found_error" || e["status"] == "NOT_FOUND"))
        || message.contains("unsupported model")
        || about_model
}

/// CD-4: an Antigravity RESOURCE_EXHAUSTED whose ErrorInfo has the Cloud Code domain, a rate or
/// quota reason and exactly the requested model narrows to that model.
fn antigravity_model_limit(body: &Value, upstream_model: &str) -> bool {
    let Some(details) = body["error"]["details"].as_array() else { return false };
    let Some(info) =
        details.iter().find(|d| d["@type"].as_str().is_some_and(|t| t.ends_with("google.rpc.ErrorInfo")))
    else {
        return false;
    };
    let domain_ok = info["domain"].as_str().is_some_and(|d| d.ends_with("cloudcode-pa.googleapis.com"));
    let reason_ok = matches!(info["reason"].as_str(), Some("RATE_LIMIT_EXCEEDED" | "QUOTA_EXHAUSTED"));
    // An SDK thinking suffix (`model(high)`) names the same model upstream (QT-4).
    let base = crate::quota::observation::base_model;
    domain_ok && reason_ok && info["metadata"]["model"].as_str().map(base) == Some(base(upstream_model))
}

/// A google.rpc.RetryInfo delay in an error body.
fn google_retry_delay(body: &Value) -> Option<Duration> {
    body["error"]["details"]
        .as_array()?
        .iter()
        .find(|d| d["@type"].as_str().is_some_and(|t| t.ends_with("google.rpc.RetryInfo")))
        .and_then(|d| d["retryDelay"].as_str())
        .and_then(parse_google_duration)
}

/// `"12s"`, `"0.5s"`, `"1.234567s"` (protobuf Duration JSON).
fn parse_google_duration(s: &str) -> Option<Duration> {
    let secs: f64 = s.strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0)
        .then(|| Duration::from_secs_f64(secs.min(RETRY_AFTER_MAX.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scheduler::state::clamp_retry;

    fn exhausted(domain: &str, reason: &str, model: &str) -> Value {
        json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": domain,
             "metadata": {"model": model}},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12.5s"}
        ]}})
    }

    #[test]
    fn only_a_matching_antigravity_limit_narrows_to_the_model() {
        let tm = StatusCode::TOO_MANY_REQUESTS;
        let ag = Provider::Antigravity;
        let body = exhausted("cloudcode-pa.googleapis.com", "RATE_LIMIT_EXCEEDED", "gemini-3-pro");
        assert_eq!(
            verdict(ag, tm, None, &body, "gemini-3-pro"),
            Verdict::ModelLimited(Some(Duration::from_millis(12_500)))
        );
        assert_eq!(
            verdict(ag, tm, None, &body, "gemini-3-pro(high)"),
            Verdict::ModelLimited(Some(Duration::from_millis(12_500))),
            "a thinking suffix names the same model"
        );
        // another model, another domain, another reason, another provider: the whole account
        let whole = Verdict::RateLimited(Some(Duration::from_millis(12_500)));
        assert_eq!(verdict(ag, tm, None, &body, "gemini-3-flash"), whole);
        let other = exhausted("example.com", "RATE_LIMIT_EXCEEDED", "gemini-3-pro");
        assert_eq!(verdict(ag, tm, None, &other, "gemini-3-pro"), whole);
        let other = exhausted("cloudcode-pa.googleapis.com", "SOMETHING_ELSE", "gemini-3-pro");
        assert_eq!(verdict(ag, tm, None, &other, "gemini-3-pro"), whole);
        assert_eq!(verdict(Provider::Codex, tm, None, &body, "gemini-3-pro"), whole);
        // a header wins over the body's hint
        let header = Some(Duration::from_secs(3));
        assert_eq!(verdict(ag, tm, header, &other, "gemini-3-pro"), Verdict::RateLimited(header));
    }

    #[test]
    fn statuses_map_to_the_failure_policy() {
        let v = |status: u16| {
            verdict(Provider::Claude, StatusCode::from_u16(status).unwrap(), None, &Value::Null, "m")
        };
        assert_eq!(v(529), Verdict::Overloaded(None));
        assert_eq!(v(401), Verdict::CredentialsRejected(401));
        assert_eq!(v(403), Verdict::Forbidden, "a bare 403 may concern only the request (ERR-1)");
        assert_eq!(v(500), Verdict::ModelFailure);
        assert_eq!(v(503), Verdict::ModelFailure);
        for neutral in [400, 404, 408, 413, 422] {
            assert_eq!(v(neutral), Verdict::Neutral, "client errors never mark an account ({neutral})");
        }
        let codex = json!({"error": {"type": "usage_limit_reached", "resets_in_seconds": 90}});
        assert_eq!(
            verdict(Provider::Codex, StatusCode::TOO_MANY_REQUESTS, None, &codex, "m"),
            Verdict::RateLimited(Some(Duration::from_secs(90)))
        );
    }

    #[test]
    fn retry_after_headers_are_clamped_whatever_they_say() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").unwrap().to_utc();
        let parse = |v: &str| {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert(reqwest::header::RETRY_AFTER, v.parse().unwrap());
            retry_after_header(&h, now)
        };
        let max = Some(RETRY_AFTER_MAX);
        assert_eq!(parse("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse("1e20"), max);
        assert_eq!(parse("1e400"), None, "infinity is unreadable");
        assert_eq!(parse("-5"), None, "invalid: the fallback applies");
        assert_eq!(clamp_retry(parse("-5"), Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(
            clamp_retry(parse("0"), Duration::from_secs(5)),
            Duration::from_secs(1),
            "valid, raised to 1 s"
        );
        assert_eq!(parse("NaN"), None);
        assert_eq!(parse("Mon, 30 Nov 2026 12:00:30 GMT"), Some(Duration::from_secs(30)));
        assert_eq!(parse("Fri, 31 Dec 9999 23:59:59 GMT"), max);
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        assert_eq!(parse("soon"), None);
    }

    #[test]
    fn only_credential_shaped_403s_pause_an_account_at_once() {
        let forbidden = StatusCode::FORBIDDEN;
        let v = |p: Provider, body: Value| verdict(p, forbidden, None, &body, "m");
        for (provider, body) in [
            (
                Provider::OpenaiApi,
                json!({"error": {"code": "account_deactivated", "message": "This account was deactivated"}}),
            ),
            (Provider::Codex, json!({"detail": {"code": "token_expired"}})),
            (
                Provider::Claude,
                json!({"type": "error", "error": {"type": "permission_error", "message": "OAuth token has been revoked"}}),
            ),
            (
                Provider::Antigravity,
                json!({"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "denied",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "ACCOUNT_DISABLED"}]}}),
            ),
        ] {
            assert_eq!(v(provider, body.clone()), Verdict::CredentialsRejected(403), "{body}");
        }
        for (provider, body) in [
            (
                Provider::OpenaiApi,
                json!({"error": {"code": "unsupported_country_region_territory", "message": "Country, region, or territory not supported"}}),
            ),
            (
                Provider::Claude,
                json!({"type": "error", "error": {"type": "permission_error", "message": "This model is not available on your plan"}}),
            ),
            (
                Provider::Antigravity,
                json!({"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "The caller does not have permission"}}),
            ),
            (
                Provider::OpenaiApi,
                json!({"error": {"code": "web_search_disabled", "message": "Web search is disabled for this organization"}}),
            ),
        ] {
            assert_eq!(v(provider, body.clone()), Verdict::Forbidden, "{body}");
        }
    }

    #[test]
    fn model_not_found_answers_are_recognised() {
        let nf = StatusCode::NOT_FOUND;
        assert!(model_unsupported(nf, &json!({"error": {"code": "model_not_found", "message": "x"}})));
        assert!(model_unsupported(
            nf,
            &json!({"type": "error", "error": {"type": "not_found_error", "message": "model: claude-x"}})
        ));
        assert!(model_unsupported(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "The 'gpt-9' model is not supported when using Codex with a ChatGPT account."}})
        ));
        assert!(!model_unsupported(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "max_tokens too large"}})
        ));
        assert!(!model_unsupported(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "'temperature' is not supported with this model."}})
        ));
        assert!(!model_unsupported(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({"error": {"code": "model_not_found"}})
        ));
    }

    #[test]
    fn retries_back_off_and_respect_short_hints() {
        assert_eq!(retry_backoff(1, None), Duration::from_millis(200));
        assert_eq!(retry_backoff(2, None), Duration::from_millis(400));
        assert_eq!(retry_backoff(1, Some(Duration::from_secs(1))), Duration::from_secs(1));
        assert!(retryable(StatusCode::BAD_GATEWAY) && retryable(StatusCode::REQUEST_TIMEOUT));
        assert!(!retryable(StatusCode::TOO_MANY_REQUESTS) && !retryable(StatusCode::FORBIDDEN));
    }

    #[test]
    fn conversations_come_from_headers_or_the_prompt_cache_key() {
        let mut h = HeaderMap::new();
        let fields = RoutingFields::parse(br#"{"prompt_cache_key":"  "}"#).unwrap();
        assert!(Conversation::of(&h, &fields).key.is_none(), "blank keys start no conversation (RT-4)");
        let fields = RoutingFields::parse(br#"{"prompt_cache_key":"abc"}"#).unwrap();
        assert_eq!(Conversation::of(&h, &fields).key, Some(ConversationKey::prompt_cache("abc")));
        h.insert("session-id", "s1".parse().unwrap());
        assert_eq!(Conversation::of(&h, &fields).key, Some(ConversationKey::session("s1")));
        // Codex review: same session id as the parent, its own thread id
        h.insert("x-openai-subagent", "review".parse().unwrap());
        h.insert("x-codex-parent-thread-id", "s1".parse().unwrap());
        h.insert("thread-id", "child".parse().unwrap());
        let c = Conversation::of(&h, &fields);
        assert_eq!(c.parent, Some(ConversationKey::session("s1")));
        assert_eq!(c.key, Some(ConversationKey::subagent("review", "child")));
        assert_ne!(c.key, Some(ConversationKey::session("s1")), "separate from the parent's conversation");
        h.remove("x-codex-parent-thread-id");
        assert_eq!(Conversation::of(&h, &fields).parent, None, "no parent without the parent thread id");
    }
}
