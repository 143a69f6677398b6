//! One model call over HTTP, from gateway key to request record (PX-1, PX-2, PX-5, PX-6, ID-3,
//! ID-4, REC-1, REC-2, REC-7, REC-8, REC-9).
//!
//! Order: key (401, no record) -> body (400, no record) -> an [`Attempt`] exists from here on and
//! is recorded exactly once -> pool and model policy -> account -> upstream -> stream, collect or
//! pass the JSON answer. Every response carries `X-Request-ID`.

use std::time::Duration;

use app::model::Provider;
use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use super::{
    auth::authenticate_request,
    error::{GatewayError, Protocol},
    failure::UpstreamFailure,
    relay::{self, Timing},
    request::{self, RoutingFields},
    schedule::{self, Conversation},
};
use crate::{
    app_state::AppState,
    keys::Principal,
    providers::{self, Observer, Operation, TargetError},
    records::{NewRecord, Outcome, Usage, bounded_model},
    scheduler::{
        Lease, RoutingDecision, Verdict,
        admission::{MemberSlot, WorkspaceSlot},
    },
};

/// CD-6: longest wait for upstream response headers on inference calls.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// CD-6: total request deadline.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// CD-6: SSE heartbeat period while the upstream is silent.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// ADM-5: reading on after a client cancels a Codex stream, to collect final usage.
pub const CODEX_DRAIN: Duration = Duration::from_secs(3);

/// Which call this route makes.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub protocol: Protocol,
    pub op: Operation,
    /// PX-5: a provider-prefixed path restricts selection to one provider.
    pub only: Option<Provider>,
}

/// A server-generated request id (REC-9); client-supplied ids are ignored.
pub fn new_request_id() -> String {
    format!("req_{:032x}", rand::random::<u128>())
}

/// Handles one model call. `path_model` is the model named in the URL (Gemini routes).
pub async fn handle(
    s: AppState,
    spec: Spec,
    headers: HeaderMap,
    query: Option<String>,
    path_model: Option<String>,
    raw: Bytes,
) -> Response {
    let started = Instant::now();
    let request_id = new_request_id();
    let mut resp = match admit(&s, &headers, path_model, raw).await {
        Ok((principal, body, fields, model, workspace)) => {
            let member = member_admission(&s, &principal);
            let operation = spec.op.record_name();
            let mut attempt =
                Attempt::new(&s, request_id.clone(), spec.protocol, operation, started, principal, model);
            match member {
                Ok(member) => {
                    attempt.slots = Some((workspace, member));
                    dispatch(&s, spec, attempt, &headers, query.as_deref(), body, fields).await
                }
                Err(e) => attempt.fail(e, Outcome::Rejected, None).await,
            }
        }
        Err(e) => e.render(spec.protocol, Some(&request_id)),
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A random UUID (v4 layout) for an upstream correlation id (RT-4).
fn random_session_id() -> String {
    let r: u128 = rand::random();
    let hex = format!("{:032x}", (r & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62));
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// ADM-3: a slot of the member's concurrency (0 = unlimited), and the call counted against
/// their optional RPM limit. Refusals are recorded as rejected by the caller.
pub(super) fn member_admission(s: &AppState, p: &Principal) -> Result<MemberSlot, GatewayError> {
    let slot = s
        .admission
        .member(p.member_id, u32::try_from(p.concurrency_limit).unwrap_or(0))
        .ok_or_else(GatewayError::member_concurrency_exceeded)?;
    s.admission
        .member_rpm(p.member_id, p.rpm_limit)
        .map_err(|wait| GatewayError::member_rpm_exceeded(wait.as_secs().clamp(1, 60)))?;
    Ok(slot)
}

/// Authentication, workspace admission and body checks: failures here create no record (REC-1).
async fn admit(
    s: &AppState,
    headers: &HeaderMap,
    path_model: Option<String>,
    raw: Bytes,
) -> Result<(Principal, Bytes, RoutingFields, String, WorkspaceSlot), GatewayError> {
    let principal = authenticate_request(s, headers).await?;
    let workspace = s.admission.workspace().ok_or_else(GatewayError::workspace_busy)?;
    let body = request::decode(headers, raw)?;
    let fields = RoutingFields::parse(&body)?;
    let model = path_model
        .or_else(|| fields.model.clone())
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| GatewayError::bad_request("the request has no model"))?;
    Ok((principal, body, fields, model, workspace))
}

/// One authenticated model attempt; recorded exactly once by one of its consuming methods.
pub(super) struct Attempt {
    pub records: crate::records::RecordSink,
    pub request_id: String,
    pub protocol: Protocol,
    /// Recorded operation name (`responses`, `responses_ws`, ...).
    pub operation: &'static str,
    pub started: Instant,
    pub started_at_ms: i64,
    pub principal: Principal,
    pub model: String,
    pub account: Option<(i64, Provider)>,
    /// Workspace and member slots, released when the attempt is recorded (ADM-8).
    pub slots: Option<(WorkspaceSlot, MemberSlot)>,
    /// The account slot, settled with the attempt's verdict and released after its record (ADM-8).
    pub lease: Option<Lease>,
    /// The scheduler's explanation (EXP-1); none when rejected before routing.
    pub routing: Option<RoutingDecision>,
}

/// The end of an attempt, as recorded.
pub(super) struct Ending {
    pub outcome: Outcome,
    pub error_code: Option<String>,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    pub first_output: Option<Duration>,
    /// What the answer says about the account (CD-*); `Neutral` for local failures.
    pub verdict: Verdict,
}

impl Attempt {
    pub(super) fn new(
        s: &AppState,
        request_id: String,
        protocol: Protocol,
        operation: &'static str,
        started: Instant,
        principal: Principal,
        model: String,
    ) -> Self {
        Attempt {
            records: s.records.clone(),
            request_id,
            protocol,
            operation,
            started,
            started_at_ms: s.clock.now().timestamp_millis(),
            principal,
            model,
            account: None,
            slots: None,
            lease: None,
            routing: None,
        }
    }

    pub(super) async fn finish(mut self, end: Ending) {
        if let Some(lease) = self.lease.as_mut() {
            lease.settle(end.verdict);
        }
        let record = NewRecord {
            request_id: self.request_id,
            member_id: self.principal.member_id,
            key_id: Some(self.principal.key_id),
            pool_id: Some(self.principal.pool_id),
            account_id: self.account.map(|a| a.0),
            provider: self.account.map(|a| a.1.as_str()),
            model: bounded_model(&self.model),
            operation: self.operation,
            started_at_ms: self.started_at_ms,
            duration_ms: self.started.elapsed().as_millis() as i64,
            first_output_ms: end.first_output.map(|d| d.as_millis() as i64),
            outcome: end.outcome,
            error_code: end.error_code,
            upstream_status: end.upstream_status,
            usage: end.usage,
            routing: self.routing.and_then(|d| serde_json::to_string(&d).ok()),
        };
        self.records.send(record).await;
        // The slots are released only now, after the record is queued (ADM-8).
        drop(self.lease);
        drop(self.slots);
    }

    /// Answers with a gateway error and records it.
    pub(super) async fn fail(
        self,
        err: GatewayError,
        outcome: Outcome,
        upstream_status: Option<u16>,
    ) -> Response {
        self.fail_with(err, outcome, upstream_status, Verdict::Neutral).await
    }

    /// Answers with a gateway error, records it, and settles the account with `verdict`.
    pub(super) async fn fail_with(
        self,
        err: GatewayError,
        outcome: Outcome,
        upstream_status: Option<u16>,
        verdict: Verdict,
    ) -> Response {
        let resp = err.render(self.protocol, Some(&self.request_id));
        self.finish(Ending {
            outcome,
            error_code: Some(err.code.to_owned()),
            upstream_status,
            usage: Usage::default(),
            first_output: None,
            verdict,
        })
        .await;
        resp
    }
}

async fn dispatch(
    s: &AppState,
    spec: Spec,
    mut attempt: Attempt,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Bytes,
    fields: RoutingFields,
) -> Response {
    let model = attempt.model.clone();
    let conversation = Conversation::of(headers, &fields);
    let client_streams = spec.op == Operation::GeminiStream || fields.stream == Some(true);
    // ACC-2: before any byte is accepted, a request outside a conversation whose account cannot
    // serve it now (rate limited, overloaded, refused, model limited) moves to another account,
    // at most MAX_SWITCHES times; a conversation never moves (RT-2). When no other account can
    // take it, the last upstream answer goes back as it came (BUD-5).
    let mut switches = 0;
    let mut last_failure: Option<UpstreamFailure> = None;
    let (upstream, account, force_stream, rewrite) = loop {
        let (lease, upstream_model) =
            match schedule::schedule(s, spec, &mut attempt, headers, conversation, None).await {
                Ok(chosen) => chosen,
                Err((e, outcome)) => {
                    return match last_failure {
                        Some(f) => f.respond(attempt).await,
                        None => attempt.fail(e, outcome, None).await,
                    };
                }
            };
        let account = std::sync::Arc::clone(lease.account());
        attempt.lease = Some(lease);
        let mut target = match providers::target(
            account.provider,
            &account.credentials,
            &s.config.upstream,
            spec.op,
            headers,
            query,
        ) {
            Ok(t) => t,
            Err(e @ (TargetError::WrongCredential | TargetError::Unsupported)) => {
                tracing::error!(account_id = account.id, error = ?e, "account cannot serve this operation");
                return attempt.fail(GatewayError::no_available_account(&model), Outcome::Error, None).await;
            }
        };
        // RT-4: a Codex request outside any conversation gets a random upstream session id of its
        // own, so unrelated calls are never grouped upstream.
        if account.provider == Provider::Codex
            && conversation.key.is_none()
            && !target.headers.contains_key("session-id")
            && !target.headers.contains_key("session_id")
            && let Ok(v) = HeaderValue::from_str(&random_session_id())
        {
            target.headers.insert("session-id", v);
        }
        let force_stream = target.force_stream && !client_streams;
        let body = match &target.envelope {
            Some(project) => {
                match providers::wrap_envelope(&body, project, &upstream_model, &attempt.request_id) {
                    Some(b) => Bytes::from(b),
                    None => {
                        let e = GatewayError::bad_request(
                            "the body must be a Gemini generateContent request object",
                        );
                        return attempt.fail(e, Outcome::Rejected, None).await;
                    }
                }
            }
            None => match edit_body(
                body.clone(),
                (upstream_model != model).then_some(upstream_model.as_str()),
                force_stream,
                target.force_no_store && fields.store != Some(false),
            ) {
                Ok(b) => b,
                Err(e) => return attempt.fail(e, Outcome::Rejected, None).await,
            },
        };
        let rewrite: Option<relay::Rewrite> =
            target.envelope.is_some().then_some(providers::unwrap_envelope as relay::Rewrite);

        let upstream =
            match send_with_retries(s, headers, &attempt, &account, &upstream_model, target, body).await {
                Ok(r) => r,
                Err((e, outcome)) => return attempt.fail(e, outcome, None).await,
            };
        if upstream.status().is_success() {
            break (upstream, account, force_stream, rewrite);
        }
        let failure = UpstreamFailure::read(upstream, account.provider, &upstream_model).await;
        if conversation.key.is_some() || !failure.account_cannot_serve() || switches >= MAX_SWITCHES {
            return failure.respond(attempt).await;
        }
        // This account learns the verdict and its slot goes back; the next decision skips it.
        if let Some(mut lease) = attempt.lease.take() {
            lease.settle(failure.verdict);
        }
        switches += 1;
        last_failure = Some(failure);
    };
    let status = upstream.status();
    let deadline = attempt.started + REQUEST_DEADLINE;
    let mut observer = Observer::new(spec.op.grammar());
    if client_streams {
        let mut builder = Response::builder().status(status);
        if let Some(h) = builder.headers_mut() {
            copy_headers(upstream.headers(), h);
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        }
        let timing = Timing {
            started: attempt.started,
            heartbeat: HEARTBEAT,
            deadline,
            idle_timeout: s.config.stream_idle_timeout,
            drain_after_cancel: (account.provider == Provider::Codex).then_some(CODEX_DRAIN),
        };
        let upstream_status = status.as_u16();
        let mut stream = upstream.bytes_stream();
        // Wait for the first event so it leaves together with the headers (one write, not two).
        let first = match tokio::time::timeout(HEADER_TIMEOUT, stream.next()).await {
            Ok(Some(Ok(bytes))) => Some(bytes),
            Ok(None) => None,
            Ok(Some(Err(_))) => {
                return attempt
                    .fail_with(
                        GatewayError::upstream_unavailable(),
                        Outcome::Error,
                        Some(upstream_status),
                        Verdict::ModelFailure,
                    )
                    .await;
            }
            Err(_) => {
                return attempt
                    .fail(GatewayError::upstream_timeout(), Outcome::Error, Some(upstream_status))
                    .await;
            }
        };
        let body = relay::relay(
            stream,
            first,
            observer,
            timing,
            s.hard_stop.clone(),
            rewrite,
            move |end| async move {
                let (outcome, error_code) = stream_outcome(&end);
                let verdict = stream_verdict(outcome, error_code.as_deref());
                let o = end.observation;
                attempt
                    .finish(Ending {
                        outcome,
                        error_code,
                        upstream_status: Some(upstream_status),
                        usage: o.usage,
                        first_output: o.first_output,
                        verdict,
                    })
                    .await;
            },
        );
        return builder.body(body).unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    if force_stream {
        return collect_stream(attempt, upstream, observer, deadline).await;
    }
    // A plain JSON answer: pass the bytes through, read usage from them.
    let mut passed = HeaderMap::new();
    copy_headers(upstream.headers(), &mut passed);
    let bytes = match tokio::time::timeout_at(deadline, upstream.bytes()).await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            return attempt
                .fail(GatewayError::upstream_unavailable(), Outcome::Error, Some(status.as_u16()))
                .await;
        }
        Err(_) => {
            return attempt
                .fail(GatewayError::upstream_timeout(), Outcome::Error, Some(status.as_u16()))
                .await;
        }
    };
    let mut bytes = bytes;
    if let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) {
        observer.body(&v);
        // Antigravity: the client gets the inner response, taken from the value already parsed.
        if rewrite.is_some()
            && let Some(inner) = v.get_mut("response").map(Value::take)
            && let Ok(b) = serde_json::to_vec(&inner)
        {
            bytes = Bytes::from(b);
        }
    }
    let o = observer.seen;
    let outcome = o.outcome.unwrap_or(Outcome::Success);
    attempt
        .finish(Ending {
            outcome,
            error_code: o.error_code,
            upstream_status: Some(status.as_u16()),
            usage: o.usage,
            first_output: None,
            verdict: if outcome == Outcome::Success { Verdict::Success } else { Verdict::Neutral },
        })
        .await;
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    *resp.headers_mut() = passed;
    resp
}

/// A non-streaming client served by a streaming-only upstream (Codex): read the whole stream and
/// answer with its final response object.
async fn collect_stream(
    attempt: Attempt,
    upstream: reqwest::Response,
    mut observer: Observer,
    deadline: Instant,
) -> Response {
    let status = upstream.status().as_u16();
    let mut passed = HeaderMap::new();
    copy_headers(upstream.headers(), &mut passed);
    passed.remove(header::CONTENT_TYPE);
    let mut splitter = providers::sse::Splitter::default();
    let mut stream = upstream.bytes_stream();
    let read = tokio::time::timeout_at(deadline, async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|_| ())?;
            let at = attempt.started.elapsed();
            splitter.feed(&chunk, |ev| observer.event(ev.name, &ev.data, at));
        }
        Ok::<(), ()>(())
    })
    .await;
    let o = observer.seen;
    let failure = match (&read, &o.final_response) {
        (Err(_), _) => Some((GatewayError::upstream_timeout(), Verdict::Neutral)),
        // CD-2: a broken or unfinished stream counts against the model on this account.
        (Ok(Err(())), _) | (Ok(Ok(())), None) => {
            Some((GatewayError::upstream_unavailable(), Verdict::ModelFailure))
        }
        _ => None,
    };
    if let Some((e, verdict)) = failure {
        return attempt.fail_with(e, Outcome::Error, Some(status), verdict).await;
    }
    let final_response = o.final_response.clone().unwrap_or(Value::Null);
    let outcome = o.outcome.unwrap_or(Outcome::Success);
    attempt
        .finish(Ending {
            outcome,
            error_code: o.error_code,
            upstream_status: Some(status),
            usage: o.usage,
            first_output: None,
            verdict: if outcome == Outcome::Success { Verdict::Success } else { Verdict::Neutral },
        })
        .await;
    let mut resp = axum::Json(final_response).into_response();
    resp.headers_mut().extend(passed);
    resp
}

/// The outcome of a relayed stream (REC-8: a 200 stream can still end in error).
fn stream_outcome(end: &relay::End) -> (Outcome, Option<String>) {
    let o = &end.observation;
    match o.outcome {
        Some(Outcome::Success) if end.cancelled => (Outcome::Cancelled, None),
        Some(outcome) => (outcome, o.error_code.clone()),
        None if end.cancelled => (Outcome::Cancelled, Some("client_cancelled".into())),
        None if end.timed_out => (Outcome::Error, Some("request_timeout".into())),
        None if end.shut_down => (Outcome::Cancelled, Some("server_shutdown".into())),
        None if end.idle_timed_out => (Outcome::Error, Some("stream_idle_timeout".into())),
        None if end.broken => (Outcome::Error, Some("upstream_stream_broken".into())),
        None => (Outcome::Incomplete, Some("stream_ended_early".into())),
    }
}

/// What a relayed stream's end says about the model on this account (CD-2): a completed stream
/// is a success; a broken or cut-off one a failure; anything else (cancel, timeout, shutdown, a
/// model-reported failure) nothing.
pub(super) fn stream_verdict(outcome: Outcome, error_code: Option<&str>) -> Verdict {
    match (outcome, error_code) {
        (Outcome::Success, _) => Verdict::Success,
        (_, Some("upstream_stream_broken" | "stream_ended_early")) => Verdict::ModelFailure,
        _ => Verdict::Neutral,
    }
}

/// Sends the upstream request. CD-3: explicit 408/5xx answers are retried on the same account, at
/// most twice, before any byte is accepted, re-checking policy each time; a long upstream hint
/// goes back to the client instead of being waited out. Same lease, request id and record.
async fn send_with_retries(
    s: &AppState,
    headers: &HeaderMap,
    attempt: &Attempt,
    account: &super::directory::Account,
    upstream_model: &str,
    target: providers::Target,
    body: Bytes,
) -> Result<reqwest::Response, (GatewayError, Outcome)> {
    let mut retries = 0;
    loop {
        let send = s
            .http
            .post(&target.url)
            .headers(target.headers.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send();
        let upstream = match tokio::time::timeout(HEADER_TIMEOUT, send).await {
            Err(_) => return Err((GatewayError::upstream_timeout(), Outcome::Error)),
            Ok(Err(_)) => return Err((GatewayError::upstream_unavailable(), Outcome::Error)),
            Ok(Ok(r)) => r,
        };
        let hint = schedule::retry_after_header(upstream.headers());
        if !schedule::retryable(upstream.status())
            || retries >= schedule::MAX_RETRIES
            || hint.is_some_and(|h| h > schedule::MAX_RETRY_WAIT)
        {
            return Ok(upstream);
        }
        drop(upstream);
        retries += 1;
        tokio::time::sleep(schedule::retry_backoff(retries, hint)).await;
        schedule::recheck_for_retry(s, headers, attempt, account, upstream_model).await?;
    }
}

/// ACC-2: how many times an unbound request may move to another account before any byte.
const MAX_SWITCHES: u32 = 2;

fn copy_headers(from: &reqwest::header::HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if providers::response_header_passes(name.as_str()) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// The few body edits a provider needs; the body is left byte-for-byte alone otherwise.
fn edit_body(body: Bytes, model: Option<&str>, stream: bool, no_store: bool) -> Result<Bytes, GatewayError> {
    if model.is_none() && !stream && !no_store {
        return Ok(body);
    }
    let mut v: Value =
        serde_json::from_slice(&body).map_err(|_| GatewayError::bad_request("invalid JSON body"))?;
    let Some(obj) = v.as_object_mut() else {
        return Err(GatewayError::bad_request("the body must be a JSON object"));
    };
    if let Some(m) = model {
        obj.insert("model".into(), Value::String(m.to_owned()));
    }
    if stream {
        obj.insert("stream".into(), Value::Bool(true));
    }
    if no_store {
        obj.insert("store".into(), Value::Bool(false));
    }
    serde_json::to_vec(&v).map(Bytes::from).map_err(|_| GatewayError::bad_request("invalid JSON body"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_session_ids_are_uuid_v4_shaped() {
        let id = random_session_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, random_session_id());
    }

    #[test]
    fn request_ids_are_prefixed_and_unique() {
        let a = new_request_id();
        assert!(a.starts_with("req_") && a.len() == 36);
        assert_ne!(a, new_request_id());
    }

    #[test]
    fn body_is_untouched_unless_an_edit_is_needed() {
        let raw = Bytes::from_static(br#"{"model":"fast",  "stream":false}"#);
        assert_eq!(edit_body(raw.clone(), None, false, false).unwrap(), raw);
        let edited: Value =
            serde_json::from_slice(&edit_body(raw, Some("gpt-5.1-codex"), true, true).unwrap()).unwrap();
        assert_eq!(edited, serde_json::json!({"model": "gpt-5.1-codex", "stream": true, "store": false}));
    }
}
