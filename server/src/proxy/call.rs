//! One model call over HTTP, from gateway key to request record (PX-1, PX-2, PX-5, PX-6, ID-3,
//! ID-4, REC-1, REC-2, REC-7, REC-8, REC-9).
//!
//! Order: key from the headers (401, no record) -> key circuit breaker (BUD-4: 429/403, no
//! record) -> workspace slot -> body, read only now, bounded
//! and decoded (400/413, no record) -> an [`Attempt`] exists from here on and is recorded exactly
//! once -> pool and model policy -> account -> upstream -> stream, collect or pass the JSON
//! answer. Every response carries `X-Request-ID`.

use app::model::Provider;
use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::{
    directory::Account,
    header_names::{ACCEL_BUFFERING, OVERHEAD_MS, QUEUE_MS, REQUEST_ID, SESSION_ID, SESSION_ID_DASHED},
    quota,
};

use super::{
    Spec,
    attempt::{Attempt, Ending, Start, member_rpm, member_slot, new_request_id, stream_verdict},
    auth::authenticate_request,
    body_edit, client, collect,
    error::{GatewayError, LONGEST_CLIENT_WAIT},
    failure::UpstreamFailure,
    relay::{self, Timing},
    request::{self, RoutingFields},
    schedule::{self, Conversation},
    upstream,
};
use app::model::CredentialInput;

use crate::{
    app_state::AppState,
    credentials::TokenError,
    keys::Principal,
    providers::{self, Observer, Operation, TargetError},
    records::Outcome,
    scheduler::{
        Rule, Verdict,
        admission::{MemberSlot, WorkspaceSlot},
    },
};

/// CD-6: SSE heartbeat period: a comment when the client has been sent nothing for this long.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// The heartbeat a streaming client of `op` gets: none for a Gemini client. Google's own streams
/// carry no comment lines and its SDKs read none: google-genai (Python) takes any line not
/// `data: ...` for a JSON document and ends the stream with an error on `: keep-alive`, and
/// `@google/genai` (Gemini CLI; the versions read) matches each event from the start of what it
/// has buffered, so a comment there holds back every event after it and the stream ends in an
/// error. A blank line fails the latter too: such a client keeps the silence a Google stream has.
pub fn heartbeat_for(op: crate::providers::Operation) -> Option<std::time::Duration> {
    (op.grammar() != crate::providers::Grammar::Gemini).then_some(HEARTBEAT)
}

/// ADM-5: reading on after a client cancels a Codex stream, to collect final usage.
pub const CODEX_DRAIN: std::time::Duration = std::time::Duration::from_secs(3);
/// Largest non-streaming upstream answer read (a Responses answer may carry generated images).
pub const MAX_UPSTREAM_JSON_BYTES: usize = 64 * 1024 * 1024;

/// Handles one model call. `path_model` is the model named in the URL (Gemini routes). The key is
/// checked from the headers before a byte of the body is read.
///
/// Not an `async fn`: the route's handler awaits the call's own future in its span, not a second
/// future around it (each layer of futures is one more copy of the whole as it is built).
pub fn handle(
    s: AppState,
    spec: Spec,
    req: Request,
    path_model: Option<String>,
) -> impl Future<Output = Response> + Send {
    let start = Start::now(&*s.clock);
    let request_id = new_request_id(start.unix_ms);
    // The call's trace (BEY-5), and with `RUST_LOG=debug` the context of every line written
    // during it. A debug span costs nothing unless a collector or debug logs want it (at info,
    // making it was 2 % of CPU at c=64); SubLane's own warnings and errors about a call name its
    // request id themselves.
    let span = tracing::debug_span!("call", request_id = %request_id, operation = spec.op.record_name());
    handle_call(s, spec, req, path_model, start, request_id).instrument(span)
}

async fn handle_call(
    s: AppState,
    spec: Spec,
    req: Request,
    path_model: Option<String>,
    start: Start,
    request_id: String,
) -> Response {
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let query = parts.uri.query();
    let stop = &s.lifecycle.hard_stop;
    let principal = match authenticate_request(&s, &headers).await {
        Ok(p) => p,
        Err(e) => {
            s.metrics.refused(e.code);
            return answered(&s, e.render(spec.protocol, Some(&request_id)), &request_id, start.at, None);
        }
    };
    // BUD-4: a blocked or banned key is refused first, neither recorded nor counted.
    let key_id = principal.key_id;
    if let Err(e) = s.breaker.check(key_id, start.unix_ms) {
        s.metrics.refused(e.code);
        return answered(&s, e.render(spec.protocol, Some(&request_id)), &request_id, start.at, None);
    }
    let mut stopwatch = None;
    // (`biased`, the call first: it is most often ready at once, and then the stop signal is never
    // polled, so the call does not join and leave its list of waiters)
    let admitted = tokio::select! {
        biased;
        admitted = admit(&s, spec, principal, &headers, path_model, body) => admitted,
        () = stop.cancelled() => Err(Refused::Silently(GatewayError::shutting_down())),
    };
    let mut budget = None;
    let mut resp = match admitted {
        Ok(Admitted { principal, slots, read, model }) => {
            let operation = spec.op.record_name();
            // BUD-2: the caller's budgets, checked once the call is known (recorded if refused).
            let now = s.clock.now();
            let checked = s.budgets.check(principal.key_id, principal.member_id, now);
            let refused = checked.refused.as_ref().map(|st| st.refusal(now));
            budget = Some(checked);
            let mut attempt =
                Attempt::new(&s, request_id.clone(), spec.protocol, operation, start, principal, model);
            attempt.slots = Some(slots);
            stopwatch = Some(std::sync::Arc::clone(&attempt.stopwatch));
            if let Some(e) = refused {
                attempt.fail(e, Outcome::Rejected, None).await
            } else {
                // The hard stop cuts a call still waiting on its upstream (the dropped attempt
                // records itself); a stream already relaying ends in its relay.
                // Boxed: the dispatch is most of a call's future, and awaited in place it would
                // be copied again with each layer above it (the router boxes the whole call).
                tokio::select! {
                    resp = Box::pin(dispatch(&s, spec, attempt, &headers, query, read)) => resp,
                    () = stop.cancelled() => GatewayError::shutting_down().render(spec.protocol, Some(&request_id)),
                }
            }
        }
        Err(Refused::Silently(e)) => {
            s.metrics.refused(e.code);
            e.render(spec.protocol, Some(&request_id))
        }
        Err(Refused::Recorded(e, principal, model)) => {
            let operation = spec.op.record_name();
            Attempt::new(&s, request_id.clone(), spec.protocol, operation, start, principal, model)
                .fail(e, Outcome::Rejected, None)
                .await
        }
    };
    // BUD-3: every answer that went through the budget check says where the caller stands.
    if let Some(checked) = budget {
        checked.add_headers(resp.headers_mut());
    }
    count_for_breaker(&s, key_id, resp.status().as_u16() >= 400).await;
    answered(&s, resp, &request_id, start.at, stopwatch.as_deref())
}

/// The answer's request id and, BEY-4, the time the gateway itself spent on it (everything but
/// the queue and the upstream) and any queue wait, as headers and in the metrics.
fn answered(
    s: &AppState,
    mut resp: Response,
    request_id: &str,
    started: Instant,
    stopwatch: Option<&super::attempt::Stopwatch>,
) -> Response {
    let (queue, upstream) = stopwatch.map_or_else(Default::default, |w| (w.queue(), w.upstream_total()));
    let overhead = started.elapsed().saturating_sub(queue + upstream);
    s.metrics.overhead(overhead);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&crate::metrics::millis(overhead)) {
        h.insert(OVERHEAD_MS.clone(), v);
    }
    if !queue.is_zero()
        && let Ok(v) = HeaderValue::from_str(&crate::metrics::millis(queue))
    {
        h.insert(QUEUE_MS.clone(), v);
    }
    with_request_id(resp, request_id)
}

/// BUD-2, again before dispatch when a call waited for an account (see `schedule`): calls that
/// finished meanwhile may have used up a budget.
pub(super) fn budget_refusal(s: &AppState, p: &Principal) -> Option<GatewayError> {
    let now = s.clock.now();
    s.budgets.check(p.key_id, p.member_id, now).refused.map(|st| st.refusal(now))
}

/// BUD-4: every answer to an authenticated key counts, SubLane's own refusals included, except
/// what a shutdown cuts (not the key's doing). A trip (rare) is written to the key's row before
/// the answer goes out, so neither a crash nor a shutdown right after it loses it.
pub(super) async fn count_for_breaker(s: &AppState, key_id: i64, failed: bool) {
    if s.lifecycle.shutdown.is_cancelled() {
        return;
    }
    let now = s.clock.unix_ms();
    if let Some(trip) = s.breaker.record(key_id, failed, now) {
        tracing::warn!(
            key_id,
            trips = trip.trips,
            banned = trip.blocked_until.is_none(),
            "key circuit breaker tripped"
        );
        if let Err(e) = crate::breaker::store(&s.db, trip, now).await {
            tracing::error!(error = %e, key_id, "key circuit breaker trip could not be stored");
        }
    }
}

fn with_request_id(mut resp: Response, request_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert(REQUEST_ID.clone(), v);
    }
    resp
}

/// A random UUID (v4 layout) for an upstream correlation id (RT-4).
fn random_session_id() -> String {
    let r: u128 = rand::random();
    let hex = format!("{:032x}", (r & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62));
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// A caller let in, with their request read.
struct Admitted {
    principal: Principal,
    /// The workspace and member slots (ADM-2, ADM-3).
    slots: (WorkspaceSlot, MemberSlot),
    read: Read,
    model: String,
}

/// The request as read: the body (a Chat Completions body already translated to Responses,
/// BEY-3) and its routing fields.
struct Read {
    body: Bytes,
    fields: RoutingFields,
    /// A Chat Completions call: what its answer's translation needs.
    chat: Option<crate::chat::ChatCall>,
}

/// Why a caller was not let in.
enum Refused {
    /// No record (REC-1): a bad key, a full workspace, a bad body.
    Silently(GatewayError),
    /// The member's own limits (ADM-3), recorded as rejected with what is known of the model.
    Recorded(GatewayError, Principal, String),
}

impl From<GatewayError> for Refused {
    fn from(e: GatewayError) -> Self {
        Refused::Silently(e)
    }
}

/// Workspace and member admission (the key is authenticated and not blocked), then the body (bounded, decoded) and its
/// routing fields, then the member's RPM. The body is read only for an authenticated caller who
/// holds a workspace and a member slot, so one member uploading slowly cannot pin more of the
/// workspace than their own concurrency. A member over their concurrency is refused before the
/// body is read (their record has the model only when the path names it); the RPM is counted
/// only for a request that could be read. (A refused request's body of 64 KiB or less is then
/// read and dropped by the front door, outside any slot, so its connection stays: see
/// `serve::FrontDoor`.)
async fn admit(
    s: &AppState,
    spec: Spec,
    principal: Principal,
    headers: &HeaderMap,
    path_model: Option<String>,
    body: Body,
) -> Result<Admitted, Refused> {
    let workspace = s.admission.workspace().ok_or_else(GatewayError::workspace_busy)?;
    let member = match member_slot(s, &principal) {
        Ok(m) => m,
        Err(e) => return Err(Refused::Recorded(e, principal, path_model.unwrap_or_default())),
    };
    let raw = request::read_body(headers, body).await?;
    let body = request::decode(headers, raw).await?;
    // BEY-3: the body is translated for the account chosen (`prepare`); its routing fields
    // (model, stream, prompt_cache_key) have the same names in Chat Completions.
    let chat = (spec.op == Operation::ChatCompletions)
        .then(|| crate::chat::ChatCall::parse(&body).map_err(chat_error))
        .transpose()?;
    // (a Chat body's routing fields are read from the value just parsed, not from the bytes again)
    let mut fields = match &chat {
        Some(c) => c.routing_fields().map_err(chat_error)?,
        None => RoutingFields::parse(&body)?,
    };
    // RT-1: a Chat Completions `user` names the conversation when no prompt_cache_key does.
    if let Some(chat) = &chat
        && fields.prompt_cache_key.is_none()
    {
        fields.prompt_cache_key = chat.cache_key().map(str::to_owned);
    }
    let model = path_model
        .or_else(|| fields.model.clone())
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| GatewayError::bad_request("the request has no model"))?;
    request::check_model(&model)?;
    if let Err(e) = member_rpm(s, &principal) {
        return Err(Refused::Recorded(e, principal, model));
    }
    Ok(Admitted { principal, slots: (workspace, member), read: Read { body, fields, chat }, model })
}

/// Serves an admitted call in two steps: [`choose`] an account and send the call there, then
/// [`answer`] the client from what came back.
///
/// Each step is a future of its own: awaited one after the other, their futures share room in
/// this one's state, where every local held across two waits of one body gets room of its own
/// (this future is boxed and copied once per call). A plain fn returning an async block, so the
/// arguments live in the future once: an async fn keeps each argument twice, as it came and as
/// the body's local.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn dispatch<'a>(
    s: &'a AppState,
    spec: Spec,
    mut attempt: Attempt,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    read: Read,
) -> impl Future<Output = Response> + 'a {
    async move {
        let fields = &read.fields;
        let request = Outgoing {
            spec,
            headers,
            query,
            conversation: Conversation::of(headers, fields),
            client_streams: spec.op == Operation::GeminiStream || fields.stream == Some(true),
            body: &read.body,
            fields,
            chat: read.chat.as_ref(),
        };
        match choose(s, &request, &mut attempt).await {
            Ok((sent, account)) => answer(s, &request, attempt, sent, account).await,
            Err(Stop::Answer(failure)) => failure.respond(attempt).await,
            Err(Stop::Fail(e, outcome)) => attempt.fail(e, outcome, None).await,
        }
    }
}

/// Chooses an account for the call and sends it there (ACC-2): before any byte is accepted, a
/// request whose account cannot serve it now (rate limited, overloaded, credentials refused,
/// model limited, model unsupported) moves to another account, at most MAX_SWITCHES times. A
/// bound conversation never moves for that (RT-2), except off an account that does not support
/// its new model (RT-3); the first request of a new conversation moves like an unbound one, since
/// the binding is made only with the account that accepts it. When no other account can take it,
/// the last upstream answer goes back as it came (BUD-5). The accepted account's lease is left in
/// the attempt.
async fn choose(
    s: &AppState,
    r: &Outgoing<'_>,
    attempt: &mut Attempt,
) -> Result<(Sent, std::sync::Arc<Account>), Stop> {
    let mut tried: Vec<i64> = Vec::new();
    // The soonest any of them could serve this call again, in seconds from now.
    let mut tried_back_in = u64::MAX;
    let mut last_failure: Option<UpstreamFailure> = None;
    let mut last_token_error: Option<GatewayError> = None;
    let mut untranslatable: Option<GatewayError> = None;
    loop {
        let (lease, upstream_model) =
            match schedule::schedule(s, r.spec, attempt, r.headers, r.conversation, None, &tried).await {
                Ok(chosen) => chosen,
                Err((e, outcome)) => {
                    // Every account refused for longer than a client waits out on its own: the
                    // tried ones (by their answers) and the others (by this refusal).
                    let not_soon = tried_back_in.min(e.back_in.unwrap_or(0)) > LONGEST_CLIENT_WAIT;
                    return Err(match (last_failure, last_token_error, untranslatable) {
                        (Some(f), _, _) => Stop::Answer(f.not_soon(not_soon)),
                        (None, Some(t), _) => Stop::Fail(t, Outcome::Error),
                        (None, None, Some(u)) => Stop::Fail(u, Outcome::Rejected),
                        (None, None, None) => Stop::Fail(e, outcome),
                    });
                }
            };
        let account = std::sync::Arc::clone(lease.account());
        attempt.lease = Some(lease);
        let bound = attempt.routing.is_some_and(|d| d.rule == Rule::SessionBinding);
        let sent = match send_to(s, r, attempt, &account, &upstream_model).await {
            Ok(sent) => sent,
            Err(Unsent::Refused(e, outcome)) => return Err(Stop::Fail(e, outcome)),
            Err(Unsent::Untranslatable(e)) => {
                // BEY-3: a pool mixing families may have an account whose protocol takes what
                // this one's cannot (a JSON schema, a sampling setting): an unbound call moves.
                let elsewhere = r.chat.is_some_and(|c| {
                    r.spec.op.providers_for(&upstream_model).iter().any(|p| {
                        *p != account.provider
                            && r.spec.only.is_none_or(|o| o == *p)
                            && c.translate(*p).is_ok()
                    })
                });
                if bound || !elsewhere || tried.len() >= MAX_SWITCHES {
                    return Err(Stop::Fail(e, Outcome::Rejected));
                }
                tried.push(account.id);
                attempt.lease.take();
                untranslatable = Some(e);
                continue;
            }
            Err(Unsent::NoToken(e)) => {
                // CRED-3: no usable token on this account (the scheduler leaves it out now); no
                // cooldown penalty. A conversation stays; anything else may move.
                let error = token_error(&e);
                if bound || tried.len() >= MAX_SWITCHES {
                    // (a conversation waits for its account's refresh, as the scheduler tells it)
                    let not_soon = bound && error.retry_after.is_some_and(|s| s > LONGEST_CLIENT_WAIT);
                    return Err(Stop::Fail(error.not_soon(not_soon), Outcome::Error));
                }
                tried.push(account.id);
                tried_back_in = 0; // (its refresh may be tried again soon)
                attempt.lease.take();
                last_token_error = Some(error);
                continue;
            }
        };
        let upstream = &sent.response;
        // QT-2: every answer's quota headers, success or not (the request never waits for it).
        if quota::observed(account.provider) {
            let at = s.clock.unix_ms();
            let status = upstream.status().as_u16();
            s.quota
                .observe(&account, quota::parse::headers(account.provider, status, upstream.headers(), at));
        }
        if upstream.status().is_success() {
            if let Some(lease) = attempt.lease.as_mut() {
                lease.accepted();
            }
            return Ok((sent, account));
        }
        let policy = &s.scheduler.settings().failure;
        let failure = attempt
            .stopwatch
            .on_upstream(UpstreamFailure::read(
                sent.response,
                account.provider,
                &upstream_model,
                s.clock.now(),
                policy,
            ))
            .await;
        if quota::observed(account.provider) {
            let at = s.clock.unix_ms();
            s.quota.observe(&account, failure.quota_observation(account.provider, at));
        }
        let may_move = failure.moves(bound);
        if !may_move || tried.len() >= MAX_SWITCHES {
            // A bound conversation waits for its account (RT-2): as its next request would be
            // told (`schedule`), a block longer than a client waits out says so.
            let waits = bound && failure.account_cannot_serve();
            let not_soon = waits && failure.account_back_in() > LONGEST_CLIENT_WAIT;
            return Err(Stop::Answer(failure.not_soon(not_soon)));
        }
        tried.push(account.id);
        if failure.account_cannot_serve() {
            tried_back_in = tried_back_in.min(failure.account_back_in());
        }
        // This account learns the verdict and its slot goes back; the next decision skips it.
        if let Some(mut lease) = attempt.lease.take() {
            lease.settle(failure.verdict);
        }
        last_failure = Some(failure);
    }
}

/// How a call that reached no accepting account ends.
enum Stop {
    /// The last upstream failure, answered in the client's shape.
    Answer(UpstreamFailure),
    /// A gateway error.
    Fail(GatewayError, Outcome),
}

/// Passes the accepted upstream answer on: relayed as a stream, collected (a Codex JSON client),
/// or read whole; the attempt is recorded when it ends. A plain fn returning an async block, as
/// [`dispatch`], so `attempt` and the answer live in the future once.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn answer<'a>(
    s: &'a AppState,
    r: &'a Outgoing<'a>,
    attempt: Attempt,
    Sent { response: upstream, force_stream, rewrite }: Sent,
    account: std::sync::Arc<Account>,
) -> impl Future<Output = Response> + 'a {
    async move {
        let (spec, chat, client_streams) = (r.spec, r.chat, r.client_streams);
        let status = upstream.status();
        let deadline = attempt.started + s.config.request_deadline;
        // A Chat Completions call is watched, and answered from, the protocol of the account that
        // serves it.
        let chat_upstream = chat.is_some().then(|| crate::chat::Upstream::of(account.provider));
        let grammar = chat_upstream.map_or_else(|| spec.op.grammar(), crate::chat::Upstream::grammar);
        let mut observer = Observer::new(grammar);
        // CD-6's rules for a stream, relayed or read whole
        let rules = collect::Rules {
            deadline,
            header_timeout: s.config.upstream_header_timeout,
            idle: s.workspace_settings.stream_idle_timeout(),
        };
        if client_streams {
            let mut builder = Response::builder().status(status);
            if let Some(h) = builder.headers_mut() {
                copy_headers(upstream.headers(), h);
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                h.insert(ACCEL_BUFFERING.clone(), HeaderValue::from_static("no"));
            }
            let timing = Timing {
                started: attempt.started,
                heartbeat: heartbeat_for(spec.op),
                deadline,
                idle_timeout: rules.idle,
                answered: tokio::time::Instant::now(),
                drain_after_cancel: (account.provider == Provider::Codex).then_some(CODEX_DRAIN),
                write_timeout: s.config.client_write_timeout,
            };
            let upstream_status = status.as_u16();
            let mut stream = upstream.bytes_stream();
            // Wait for the first chunk so it leaves together with the headers (one write, not two),
            // by the rule a stream read whole keeps for its first byte: the stream idle timeout
            // (CD-6) runs from the headers, so an upstream that answers and then sends nothing is
            // cut when it runs out, as one that falls silent later is.
            let (first_by, cut_as) = rules.first_cut(timing.answered);
            let first =
                match attempt.stopwatch.on_upstream(tokio::time::timeout_at(first_by, stream.next())).await {
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
                            .fail_recorded_as(
                                GatewayError::upstream_timeout(),
                                cut_as,
                                Outcome::Error,
                                Some(upstream_status),
                                Verdict::Neutral,
                            )
                            .await;
                    }
                };
            let (body, relaying) = relay::relay(
                stream,
                first,
                observer,
                timing,
                std::sync::Arc::clone(&s.lifecycle),
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
            // The relay runs in the call's span when that is enabled (debug logs, a trace
            // collector). With none (the default log level: `Span::current()` is `Span::none()`)
            // it carries none: the task lives as long as the stream, and an empty span's 40
            // bytes (the relay future is 1,440 bytes with it, 1,400 without, in a release build)
            // put the task in mimalloc's 1,792-byte class rather than its 1,536 one, for every
            // open stream (performance goal 3).
            let span = tracing::Span::current();
            if span.is_disabled() {
                s.lifecycle.tasks.spawn(relaying);
            } else {
                s.lifecycle.tasks.spawn(relaying.instrument(span));
            }
            return builder.body(body).unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        if force_stream {
            // Boxed: only Codex JSON clients come here, and collecting is the largest future a call
            // awaits; in place, every call's dispatch would carry its room.
            return Box::pin(collect_stream(attempt, upstream, observer, rules, chat_upstream.is_some()))
                .await;
        }
        // A plain JSON answer: pass the bytes through, read usage from them.
        let mut passed = HeaderMap::new();
        copy_headers(upstream.headers(), &mut passed);
        let mut bytes = match attempt
            .stopwatch
            .on_upstream(tokio::time::timeout_at(deadline, read_capped(upstream)))
            .await
        {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return attempt.fail(e, Outcome::Error, Some(status.as_u16())).await,
            Err(_) => {
                return attempt
                    .fail(GatewayError::upstream_timeout(), Outcome::Error, Some(status.as_u16()))
                    .await;
            }
        };
        // An answer passed through as it came needs only what the record reads from it: those
        // fields, without building the whole document.
        if chat_upstream.is_none() {
            observer.json(&bytes);
            // Antigravity: the client gets the inner response, cut out of the answer's text.
            if matches!(rewrite, Some(relay::Rewrite::Envelope))
                && let Some(inner) = providers::answer_in_envelope(&bytes)
            {
                bytes = inner;
            }
        } else if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
            observer.body(&v);
            // BEY-3: a Chat Completions client gets a chat.completion (error answers never come here:
            // the failure path answers them in the client's protocol, PX-7).
            if let Some(upstream) = chat_upstream
                && status.is_success()
            {
                if let Some((e, verdict)) = chat_failure(&v, observer.seen.error_code.as_deref()) {
                    return attempt.fail_with(e, Outcome::Error, Some(status.as_u16()), verdict).await;
                }
                let now = s.clock.now().timestamp();
                let answer = match upstream {
                    crate::chat::Upstream::Messages => {
                        crate::chat::messages::from_messages(&v, &attempt.model, now)
                    }
                    crate::chat::Upstream::Gemini => {
                        crate::chat::gemini::from_gemini(&v, &attempt.model, now)
                    }
                    crate::chat::Upstream::Responses => {
                        crate::chat::response::from_responses(&v, &attempt.model)
                    }
                };
                if let Ok(b) = serde_json::to_vec(&answer) {
                    bytes = Bytes::from(b);
                }
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
}

/// What one call asks of the upstream, the same for every account it may try.
struct Outgoing<'a> {
    spec: Spec,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    conversation: Conversation,
    client_streams: bool,
    body: &'a Bytes,
    fields: &'a RoutingFields,
    /// A Chat Completions client (BEY-3): its answer is translated back.
    chat: Option<&'a crate::chat::ChatCall>,
}

/// An upstream answer with how to pass it on.
struct Sent {
    response: client::Answer,
    /// The upstream streams for a client that did not ask for a stream (Codex): collect it.
    force_stream: bool,
    rewrite: Option<relay::Rewrite>,
}

/// Why nothing was sent to an account.
enum Unsent {
    /// A local refusal: the request itself cannot go (bad body, gateway fault, deadline).
    Refused(GatewayError, Outcome),
    /// A Chat Completions call this account's protocol cannot carry (a 400 naming the parameter).
    Untranslatable(GatewayError),
    /// The account has no usable token (CRED-3).
    NoToken(TokenError),
}

/// Sends the call to `account` with a usable token. An OAuth account's 401 means its token was
/// refused: the token is refreshed and the call sent once more (CRED-4); a refreshed token refused
/// again marks the account for re-authorization.
async fn send_to(
    s: &AppState,
    r: &Outgoing<'_>,
    attempt: &Attempt,
    account: &Account,
    upstream_model: &str,
) -> Result<Sent, Unsent> {
    let mut retried = false;
    loop {
        let watch = &attempt.stopwatch;
        let credentials =
            watch.on_upstream(s.tokens.usable(&account.tokens)).await.map_err(Unsent::NoToken)?;
        let (target, body, force_stream) = prepare(s, r, attempt, account, &credentials, upstream_model)?;
        let rewrite = match (&target.envelope, &r.chat) {
            (_, Some(chat)) if r.client_streams => {
                Some(chat_stream(s, account, &attempt.model, chat.options))
            }
            // a collected Chat answer is translated whole, from the enveloped value
            (_, Some(_)) => None,
            (Some(_), None) => Some(relay::Rewrite::Envelope),
            (None, None) => None,
        };
        // Built in the await, not bound to a name first: in a debug build, binding it first
        // made this function's future 5,192 bytes instead of 2,024 (a small release-mode
        // repro did not show it; no release layout was measured).
        let response = watch
            .on_upstream(
                upstream::send_with_retries(s, r.headers, attempt, account, upstream_model, target, body)
                    .instrument(tracing::debug_span!(
                        "upstream",
                        provider = account.provider.as_str(),
                        account_id = account.id
                    )),
            )
            .await
            .map_err(|(e, outcome)| Unsent::Refused(e, outcome))?;
        if response.status() == StatusCode::UNAUTHORIZED && account.provider.uses_oauth() {
            watch
                .on_upstream(s.tokens.refused(&account.tokens, &credentials, retried))
                .await
                .map_err(Unsent::NoToken)?;
            retried = true;
            continue;
        }
        return Ok(Sent { response, force_stream, rewrite });
    }
}

/// The transform of a streamed Chat Completions answer from `account`'s protocol.
fn chat_stream(
    s: &AppState,
    account: &Account,
    model: &str,
    chat: crate::chat::ChatOptions,
) -> relay::Rewrite {
    let now = s.clock.now().timestamp();
    match crate::chat::Upstream::of(account.provider) {
        crate::chat::Upstream::Messages => relay::Rewrite::ChatFromMessages(Box::new(
            crate::chat::messages::MessagesStream::new(model, chat.include_usage, now),
        )),
        crate::chat::Upstream::Gemini => relay::Rewrite::ChatFromGemini(Box::new(
            crate::chat::gemini::GeminiStream::new(model, chat.include_usage, now),
        )),
        crate::chat::Upstream::Responses => {
            relay::Rewrite::Chat(Box::new(crate::chat::stream::ChatStream::new(model, chat.include_usage)))
        }
    }
}

/// The upstream request for `account`: its target with `credentials`, and the body as that
/// provider needs it.
fn prepare(
    s: &AppState,
    r: &Outgoing<'_>,
    attempt: &Attempt,
    account: &Account,
    credentials: &CredentialInput,
    upstream_model: &str,
) -> Result<(providers::Target, Bytes, bool), Unsent> {
    let model = &attempt.model;
    // A Chat Completions call reaches a Gemini upstream as the generate operation it maps to.
    let op = match (r.spec.op, account.provider) {
        (Operation::ChatCompletions, Provider::Antigravity) if r.client_streams => Operation::GeminiStream,
        (Operation::ChatCompletions, Provider::Antigravity) => Operation::GeminiGenerate,
        (op, _) => op,
    };
    let mut target =
        match providers::target(account.provider, credentials, &s.config.upstream, op, r.headers, r.query) {
            Ok(t) => t,
            Err(e @ (TargetError::WrongCredential | TargetError::Unsupported)) => {
                tracing::error!(
                    request_id = %attempt.request_id,
                    account_id = account.id,
                    error = ?e,
                    "account cannot serve this operation"
                );
                return Err(Unsent::Refused(GatewayError::no_available_account(model), Outcome::Error));
            }
        };
    // RT-4: a Codex request outside any conversation gets a random upstream session id of its
    // own, so unrelated calls are never grouped upstream.
    if account.provider == Provider::Codex
        && r.conversation.key.is_none()
        && !target.headers.contains_key(&SESSION_ID_DASHED)
        && !target.headers.contains_key(&SESSION_ID)
        && let Ok(v) = HeaderValue::from_str(&random_session_id())
    {
        target.headers.insert(SESSION_ID_DASHED.clone(), v);
    }
    let force_stream = target.force_stream && !r.client_streams;
    // BEY-3: a Chat Completions body in the chosen account's protocol.
    let (model_edit, no_store) = (
        (upstream_model != model).then_some(upstream_model),
        target.force_no_store && r.fields.store != Some(false),
    );
    // BEY-3: a Chat Completions body in the chosen account's protocol, edited as a value and
    // serialized once.
    if let Some(chat) = r.chat {
        let mut v = chat.translate(account.provider).map_err(|e| Unsent::Untranslatable(chat_error(e)))?;
        let body = match &target.envelope {
            Some(project) => providers::envelope(v, project, upstream_model, &attempt.request_id),
            None => {
                if let Some(obj) = v.as_object_mut() {
                    edit_value(obj, model_edit, force_stream, no_store);
                }
                serde_json::to_vec(&v)
            }
        }
        .map_err(|_| Unsent::Refused(GatewayError::internal(), Outcome::Error))?;
        return Ok((target, Bytes::from(body), force_stream));
    }
    let body = match &target.envelope {
        Some(project) => {
            match providers::wrap_envelope(r.body, project, upstream_model, &attempt.request_id) {
                Some(b) => Bytes::from(b),
                None => {
                    let e =
                        GatewayError::bad_request("the body must be a Gemini generateContent request object");
                    return Err(Unsent::Refused(e, Outcome::Rejected));
                }
            }
        }
        None => body_edit::edit(
            r.body.clone(),
            body_edit::Edits { model: model_edit, stream: force_stream, no_store },
        )
        .map_err(|e| Unsent::Refused(e, Outcome::Rejected))?,
    };
    Ok((target, body, force_stream))
}

/// The client's error when an account has no usable token (CRED-3).
pub(crate) fn token_error(e: &TokenError) -> GatewayError {
    match e {
        TokenError::Unavailable { retry_after } => GatewayError::account_refresh_failed(*retry_after),
        TokenError::ReauthRequired => GatewayError::account_refresh_failed(3600)
            .with_message("the account must be re-authorized by an admin"),
    }
}

/// A non-streaming client served by a streaming-only upstream (Codex): read the whole stream
/// under the rules a relayed one keeps ([`collect`]) and answer with its final response object.
/// The client, sent nothing yet, hears `upstream_timeout` whichever timeout ran out; the record
/// says which. An answer the upstream finished but did not end is still given.
async fn collect_stream(
    attempt: Attempt,
    upstream: client::Answer,
    mut observer: Observer,
    rules: collect::Rules,
    chat: bool,
) -> Response {
    let answered = Instant::now();
    let status = upstream.status().as_u16();
    let mut passed = HeaderMap::new();
    copy_headers(upstream.headers(), &mut passed);
    passed.remove(header::CONTENT_TYPE);
    let mut splitter = providers::sse::Splitter::default();
    let mut stream = upstream.bytes_stream();
    // The Codex backend sends `response.completed` with an empty `output` when nothing is stored;
    // the answer's items come one by one in `response.output_item.done`, in order.
    let mut items: Vec<Value> = Vec::new();
    // Reading the stream is waiting on the upstream; folding its events is quick beside it.
    let started = attempt.started;
    let read = attempt
        .stopwatch
        .on_upstream(collect::read(&mut stream, &mut splitter, answered, rules, |ev, came| {
            observer.event(ev.name, &ev.data, came - started);
            if ev.name == Some("response.output_item.done")
                && let Ok(mut v) = serde_json::from_str::<Value>(&ev.data)
                && let Some(item) = v.get_mut("item")
            {
                items.push(item.take());
            }
        }))
        .await;
    let mut o = observer.seen;
    let failure = match (read, &o.final_response) {
        // (the answer finished, the stream not ended: the client gets the answer)
        (collect::Collected::Cut(_) | collect::Collected::Broken, Some(_)) => None,
        (collect::Collected::Cut(code), None) => {
            Some((code, GatewayError::upstream_timeout(), Verdict::Neutral))
        }
        (collect::Collected::Ended, None) if splitter.overflowed() => {
            let e = GatewayError::upstream_response_too_large();
            Some((e.code, e, Verdict::Neutral))
        }
        // CD-2: a broken or unfinished stream counts against the model on this account.
        (collect::Collected::Broken | collect::Collected::Ended, None) => {
            let e = GatewayError::upstream_unavailable();
            Some((e.code, e, Verdict::ModelFailure))
        }
        (collect::Collected::Ended, Some(_)) => None,
    };
    if let Some((code, e, verdict)) = failure {
        return attempt.fail_recorded_as(e, code, Outcome::Error, Some(status), verdict).await;
    }
    let mut final_response = o.final_response.take().unwrap_or(Value::Null);
    if final_response["output"].as_array().is_some_and(Vec::is_empty) && !items.is_empty() {
        final_response["output"] = Value::Array(items);
    }
    if chat {
        if let Some((e, verdict)) = chat_failure(&final_response, o.error_code.as_deref()) {
            return attempt.fail_with(e, Outcome::Error, Some(status), verdict).await;
        }
        final_response = crate::chat::response::from_responses(&final_response, &attempt.model);
    }
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

/// A Chat Completions parameter SubLane cannot honour: 400 naming it (`error.param`).
fn chat_error(e: crate::chat::ChatError) -> GatewayError {
    let param = if e.param.is_empty() { Value::Null } else { Value::String(e.param) };
    GatewayError::bad_request(e.message).with_field("param", param)
}

/// A Responses answer that failed inside a 200 (`status: failed`): a Chat Completions answer has
/// no place for that, so the client gets an error (502 with the upstream's code) rather than an
/// empty success; the verdict is the one a stream ending so would get (CD-2).
fn chat_failure(response: &Value, code: Option<&str>) -> Option<(GatewayError, Verdict)> {
    if !matches!(response["status"].as_str(), Some("failed" | "cancelled")) {
        return None;
    }
    let message = match code {
        Some(c) => format!("the upstream could not complete the answer: {c}"),
        None => "the upstream could not complete the answer".to_owned(),
    };
    let e = GatewayError::new(StatusCode::BAD_GATEWAY, "upstream_error", message);
    Some((e, stream_verdict(Outcome::Error, code)))
}

/// The outcome of a relayed stream (REC-8: a 200 stream can still end in error).
fn stream_outcome(end: &relay::End) -> (Outcome, Option<String>) {
    let o = &end.observation;
    if end.stalled {
        // The client stopped reading: whatever the upstream said, the client did not get it all.
        return (Outcome::Cancelled, Some("client_stalled".into()));
    }
    match o.outcome {
        Some(Outcome::Success) if end.cancelled => (Outcome::Cancelled, None),
        Some(outcome) => (outcome, o.error_code.clone()),
        // Anthropic: the answer's stop_reason came, only message_stop was missing (the client
        // was not told of a cut either)
        None if o.answered && !end.cancelled => (Outcome::Success, None),
        None if end.cancelled => (Outcome::Cancelled, Some("client_cancelled".into())),
        None if end.timed_out => (Outcome::Error, Some("request_timeout".into())),
        None if end.shut_down => (Outcome::Cancelled, Some("server_shutdown".into())),
        None if end.idle_timed_out => (Outcome::Error, Some("stream_idle_timeout".into())),
        None if end.broken => (Outcome::Error, Some("upstream_stream_broken".into())),
        None if end.unreadable => (Outcome::Error, Some("upstream_event_too_large".into())),
        None => (Outcome::Incomplete, Some("stream_ended_early".into())),
    }
}

/// ACC-2: how many times an unbound request may move to another account before any byte.
pub(super) const MAX_SWITCHES: usize = 2;

/// Reads a non-streaming upstream answer, at most [`MAX_UPSTREAM_JSON_BYTES`].
async fn read_capped(upstream: client::Answer) -> Result<Bytes, GatewayError> {
    if upstream.content_length().is_some_and(|n| n > MAX_UPSTREAM_JSON_BYTES as u64) {
        return Err(GatewayError::upstream_response_too_large());
    }
    let mut out = Vec::new();
    let mut stream = upstream.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| GatewayError::upstream_unavailable())?;
        if out.len() + chunk.len() > MAX_UPSTREAM_JSON_BYTES {
            return Err(GatewayError::upstream_response_too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if providers::response_header_passes(name.as_str()) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// The edits of [`body_edit::edit`] on a body already parsed (a Chat Completions body, built here).
fn edit_value(obj: &mut serde_json::Map<String, Value>, model: Option<&str>, stream: bool, no_store: bool) {
    if let Some(m) = model {
        obj.insert("model".into(), Value::String(m.to_owned()));
    }
    if stream {
        obj.insert("stream".into(), Value::Bool(true));
    }
    if no_store {
        obj.insert("store".into(), Value::Bool(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anthropic_answer_cut_after_its_stop_reason_is_recorded_whole() {
        let mut end = relay::End { broken: true, ..Default::default() };
        end.observation.answered = true;
        assert_eq!(stream_outcome(&end), (Outcome::Success, None));
        end.observation.answered = false;
        assert_eq!(stream_outcome(&end), (Outcome::Error, Some("upstream_stream_broken".to_owned())));
    }

    #[test]
    fn random_session_ids_are_uuid_v4_shaped() {
        let id = random_session_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, random_session_id());
    }

    #[test]
    fn every_streaming_client_but_a_gemini_one_gets_the_heartbeat() {
        use crate::providers::Operation::*;
        for op in [Responses, ResponsesCompact, ChatCompletions, Messages, CountTokens] {
            assert_eq!(heartbeat_for(op), Some(HEARTBEAT), "{op:?}");
        }
        for op in [GeminiGenerate, GeminiStream] {
            assert_eq!(heartbeat_for(op), None, "{op:?}");
        }
    }
}
