//! Responses over WebSocket (PX-1, REC-9): `GET /v1/responses` upgraded, one turn at a time.
//!
//! Codex keeps conversation state on the connection (`previous_response_id` with `store:false`),
//! so a client connection is bound to one account and one upstream WebSocket, opened at the first
//! turn and reused until either side closes. Each `response.create` frame is forwarded as is (the
//! model may be rewritten by a pool alias, and an upstream that refuses stored responses, Codex's,
//! gets `"store": false` when the frame does not say it); the upstream's event frames come back with a
//! `request_id` added to created / completed / incomplete / failed events and errors. Every
//! generating turn is one attempt with one record; warm-ups (`generate:false`) create none.
//! Between turns the connection holds no slot (ADM-4).
//!
//! A session obeys the rules of HTTP calls: every turn re-checks the key, the member and their
//! pool membership (a refusal ends the socket with close code 1008) and the pool's model policy;
//! a turn sent while one runs gets an error event; sends to a client that stopped reading have a
//! write deadline; on shutdown the session takes no new turn and closes after the current one
//! (1001), and the hard stop ends even that. Messages and frames are capped both ways.

use std::{borrow::Cow, sync::Arc, time::Duration};
use tracing::Instrument as _;

use app::model::{CredentialInput, Provider};
use axum::{
    body::Bytes,
    extract::{
        State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code},
    },
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use futures_util::{FutureExt as _, SinkExt, StreamExt};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest, protocol::WebSocketConfig};

use crate::{credentials::TokenError, directory::Account, quota, scheduler::Rule};

use super::{
    Spec,
    attempt::{Attempt, Ending, Start, member_admission, new_request_id, stream_verdict},
    auth::authenticate_request,
    body_edit, call,
    error::{GatewayError, Protocol},
    failure::{self, Rendered, UpstreamFailure},
    request::{RoutingFields, check_model},
    schedule::{self, Conversation},
};
use crate::{
    app_state::AppState,
    keys::Principal,
    providers::{
        self, Grammar, Observer, Operation,
        lenient::{Known, Loose},
    },
    records::Outcome,
    scheduler::Verdict,
};

type Upstream = tokio_tungstenite::WebSocketStream<
    tokio_tungstenite::MaybeTlsStream<hyper_util::rt::TokioIo<super::client::Conn>>,
>;

/// Recorded operation name of a WebSocket turn.
const OPERATION: &str = "responses_ws";
/// Largest WebSocket message accepted, from the client or the upstream (a `response.create` may
/// carry a whole history, like an HTTP body).
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;
/// Largest single WebSocket frame accepted.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Authenticates before upgrading: a refused key gets a plain 401 (a blocked or banned one its
/// 429/403) and no socket.
pub async fn upgrade(
    State(s): State<AppState>,
    headers: HeaderMap,
    only: Option<Provider>,
    ws: WebSocketUpgrade,
) -> Response {
    let principal = match authenticate_request(&s, &headers).await {
        Ok(p) => p,
        Err(e) => return e.render(Protocol::OpenAi, None).into_response(),
    };
    // BUD-4: a blocked or banned key gets no socket.
    if let Err(e) = s.breaker.check(principal.key_id, s.clock.unix_ms()) {
        return e.render(Protocol::OpenAi, None).into_response();
    }
    // Tracked from now: between this answer and the upgraded socket, a shutdown must not find
    // the session missing.
    let tracked = s.lifecycle.tasks.token();
    ws.max_message_size(MAX_MESSAGE_BYTES).max_frame_size(MAX_FRAME_BYTES).on_upgrade(
        move |socket| async move {
            session(s, principal, headers, only, socket).await;
            drop(tracked);
        },
    )
}

/// The account and upstream socket a client connection is bound to.
struct Binding {
    account: Arc<Account>,
    upstream: Upstream,
    /// The upstream refuses stored responses (Codex's backend): every turn is sent with
    /// `"store": false`, as an HTTP call to it is.
    no_store: bool,
}

/// Why a session ends by the gateway's decision, with its close code.
fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

async fn session(
    s: AppState,
    mut principal: Principal,
    headers: HeaderMap,
    only: Option<Provider>,
    mut client: WebSocket,
) {
    let mut bound: Option<Binding> = None;
    let limits = SendLimits::of(&s);
    loop {
        // Between turns: a client frame, or shutdown (no new turn is taken).
        let msg = tokio::select! {
            biased;
            () = s.lifecycle.shutdown.cancelled() => {
                let _ = limits.send(&mut client, close(close_code::AWAY, "server shutting down"), None).await;
                break;
            }
            // (the client first: an upstream that keeps sending does not hold its next turn)
            msg = client.recv() => Ok(msg),
            idle = between_turns(&mut bound) => Err(idle),
        };
        let msg = match msg {
            Ok(msg) => msg,
            Err(Idle::Event(text)) => {
                if !pass_on(&s, &limits, &mut client, &bound, &text).await {
                    break;
                }
                continue;
            }
            Err(Idle::Closed(code)) => {
                // The conversation state the upstream held is gone with its connection: the
                // client's ends as the upstream's did (its code, SubLane's words), and the client
                // reconnects as it would have. (The upstream's socket is closed below.)
                let _ =
                    limits.send(&mut client, close(code, "the upstream ended the connection"), None).await;
                break;
            }
        };
        let text = match msg {
            Some(Ok(Message::Text(t))) => t.to_string(),
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
            Some(Ok(_)) => continue,
        };
        // What the upstream sent as the turn came in was before it: its events go first, and a
        // connection it ended is left (the turn opens another; a continuation then hears the
        // upstream say that its response is not found, and Codex sends the whole request again).
        let mut gone = false;
        while let Some(idle) = between_turns(&mut bound).now_or_never() {
            match idle {
                Idle::Event(text) => {
                    if !pass_on(&s, &limits, &mut client, &bound, &text).await {
                        gone = true;
                        break;
                    }
                }
                Idle::Closed(_) => {
                    bound = None;
                    break;
                }
            }
        }
        if gone {
            break;
        }
        let start = Start::now(&*s.clock);
        let request_id = new_request_id(start.unix_ms);
        // Each turn is a call: its log lines and trace carry its request id (BEY-5).
        let span = tracing::debug_span!("call", request_id = %request_id, operation = OPERATION);
        // ADM-7 per turn: a key revoked, a member disabled or taken off the pool ends the socket.
        principal = match turn_principal(&s, &headers, &principal).instrument(span.clone()).await {
            Ok(p) => p,
            Err((e, end_session)) => {
                s.metrics.refused(e.code);
                let _ = send_error(&limits, &mut client, &e, &request_id).await;
                if end_session {
                    let reason = "the API key is no longer valid";
                    let _ = limits.send(&mut client, close(close_code::POLICY, reason), None).await;
                    break;
                }
                continue;
            }
        };
        let frame = match read_frame(&text) {
            Ok(members) => members,
            Err(e) => {
                s.metrics.refused(e.code);
                // Refusals before a turn exists count for the breaker as an HTTP 400 would.
                super::call::count_for_breaker(&s, principal.key_id, true).await;
                if send_error(&limits, &mut client, &e, &request_id).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let model = match turn_model(&frame) {
            Ok(m) => m,
            Err(e) => {
                s.metrics.refused(e.code);
                super::call::count_for_breaker(&s, principal.key_id, true).await;
                if send_error(&limits, &mut client, &e, &request_id).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let warmup = frame.get("generate") == Some("false");
        // A turn holds workspace and member slots while it runs; an idle socket holds none (ADM-4).
        let Some(workspace) = s.admission.workspace() else {
            s.metrics.refused(GatewayError::workspace_busy().code);
            super::call::count_for_breaker(&s, principal.key_id, true).await;
            if send_error(&limits, &mut client, &GatewayError::workspace_busy(), &request_id).await.is_err() {
                break;
            }
            continue;
        };
        let member = member_admission(&s, &principal);
        let mut attempt = Attempt::new(
            &s,
            request_id.clone(),
            Protocol::OpenAi,
            OPERATION,
            start,
            principal.clone(),
            model.clone(),
        );
        attempt.span = span.clone();
        match member {
            Ok(member) => attempt.slots = Some((workspace, member)),
            Err(e) => {
                if !fail_turn(&s, &limits, &mut client, attempt, warmup, &e, Outcome::Rejected).await {
                    break;
                }
                continue;
            }
        }
        // BUD-2: every turn is checked as an HTTP call is.
        if let Some(e) = super::call::budget_refusal(&s, &principal) {
            if !fail_turn(&s, &limits, &mut client, attempt, warmup, &e, Outcome::Rejected).await {
                break;
            }
            continue;
        }

        // Policy is checked every turn; the account is chosen once per connection, and every
        // turn takes one of its slots (ADM-4).
        let fields = RoutingFields::of_members(&frame).unwrap_or_default();
        let asked = Asked { text, model: &model, fields, warmup, only, headers: &headers, span: &span };
        if !serve_turn(&s, &limits, &mut client, attempt, asked, &mut bound).await {
            break;
        }
        if s.lifecycle.shutdown.is_cancelled() {
            let _ = limits.send(&mut client, close(close_code::AWAY, "server shutting down"), None).await;
            break;
        }
    }
    if let Some(b) = bound {
        close_upstream(b).await;
    }
}

/// Closes an upstream socket the session leaves, giving its close handshake at most a second.
async fn close_upstream(mut left: Binding) {
    let _ = tokio::time::timeout(Duration::from_secs(1), left.upstream.close(None)).await;
}

/// What the upstream socket did between turns.
enum Idle {
    /// An event outside any turn (OpenAI's says so before it ends a connection at its lifetime
    /// limit): passed on as it came.
    Event(tungstenite::Utf8Bytes),
    /// The upstream ended the connection: the close code the client gets.
    Closed(u16),
}

/// Reads the bound upstream socket while the client thinks, so that its pings are answered
/// (reading a Ping queues the Pong, and the next read sends it) and its end is seen at once
/// rather than at the next turn; pending without a socket.
async fn between_turns(bound: &mut Option<Binding>) -> Idle {
    let Some(binding) = bound.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        return match binding.upstream.next().await {
            Some(Ok(tungstenite::Message::Text(text))) => Idle::Event(text),
            // (tungstenite gives no code the client may not be sent: a reserved one is 1002)
            Some(Ok(tungstenite::Message::Close(frame))) => {
                Idle::Closed(frame.map_or(close_code::NORMAL, |f| u16::from(f.code)))
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => Idle::Closed(close_code::AWAY),
        };
    }
}

/// Passes on an event the upstream sent between turns ([`idle_event`]); false when the client is
/// gone.
async fn pass_on(
    s: &AppState,
    limits: &SendLimits,
    client: &mut WebSocket,
    bound: &Option<Binding>,
    text: &str,
) -> bool {
    let out = match bound {
        Some(b) => idle_event(s, &b.account, text),
        None => text.to_owned(),
    };
    limits.send(client, Message::Text(out.into()), None).await.is_ok()
}

/// An upstream event between turns as the client gets it: a `codex.rate_limits` frame observed
/// (QT-2), a wrapped refusal observed and rebuilt as in a turn (ERR-3, with no request id: no
/// turn is running; nothing is settled on the account, no turn having been refused), anything
/// else as it came.
fn idle_event(s: &AppState, account: &Arc<Account>, text: &str) -> String {
    let kind = event_type(text);
    if kind != "codex.rate_limits" && kind != "error" {
        return text.to_owned();
    }
    let Ok(event) = serde_json::from_str::<Value>(text) else { return text.to_owned() };
    if kind == "codex.rate_limits" {
        s.quota.observe(account, quota::parse::codex_frame(&event, s.clock.unix_ms()));
        return text.to_owned();
    }
    let Some(status) = wrapped_status(&event) else { return text.to_owned() };
    let failure = read_refusal(s, account, "", status, event);
    refusal_frame(failure, status, None).1.to_string()
}

/// A wrapped HTTP answer (protocols.md §1c) read as an HTTP refusal is (CD-1..CD-5): its headers
/// as the answer's, the event as its body; what they say of the account's quota is observed
/// (QT-2). `model` is the turn's (none between turns).
fn read_refusal(
    s: &AppState,
    account: &Arc<Account>,
    model: &str,
    status: StatusCode,
    event: Value,
) -> UpstreamFailure {
    let headers = wrapped_headers(&event);
    let refusal = failure::Refusal { status, headers: &headers, body: event };
    let policy = &s.scheduler.settings().failure;
    let failure = UpstreamFailure::classify(refusal, account.provider, model, s.clock.now(), policy);
    let at = s.clock.unix_ms();
    s.quota.observe(account, quota::parse::headers(account.provider, status.as_u16(), &headers, at));
    s.quota.observe(account, failure.quota_observation(account.provider, at));
    failure
}

/// A turn the client asked for, as `serve_turn` needs it.
struct Asked<'a> {
    /// The `response.create` frame as it came.
    text: String,
    /// The model it names.
    model: &'a str,
    fields: RoutingFields,
    /// `generate: false`: a warm-up, recorded by nothing.
    warmup: bool,
    only: Option<Provider>,
    /// The upgrade request's headers.
    headers: &'a HeaderMap,
    span: &'a tracing::Span,
}

/// Routes one turn, forwards its frame and relays the answer; returns whether the session goes
/// on. A first turn refused before its upstream took it, at the handshake (`route`) or by an
/// `error` event with an HTTP status (Codex sends its usage limit so), moves to another account
/// as an HTTP call does (ACC-2): nothing of the refusal has reached the client, and the frame is
/// sent again on the new account's socket. When no other account takes it, the last refusal is
/// the answer, as it came (BUD-5).
async fn serve_turn(
    s: &AppState,
    limits: &SendLimits,
    client: &mut WebSocket,
    mut attempt: Attempt,
    asked: Asked<'_>,
    bound: &mut Option<Binding>,
) -> bool {
    let Asked { text, model, fields, warmup, only, headers, span } = asked;
    let request_id = attempt.request_id.clone();
    let mut tried: Vec<i64> = Vec::new();
    // An `error` event that refused this turn on an account it then left, with the frames held
    // back before it: the answer if no other account takes the turn.
    let mut held: Option<Held> = None;
    loop {
        leave_unrouted(s, attempt.principal.pool_id, bound).await;
        let fresh = bound.is_none();
        let routing =
            route(s, &mut attempt, only, headers, &fields, bound, &mut tried).instrument(span.clone());
        let upstream_model = match watch(routing, limits, client, &request_id).await {
            Ok(Ok(m)) => m,
            Err(cut) => {
                // Queued or connecting when the client left or the hard stop came: no slot is
                // kept for it, and the turn is recorded as cut.
                end_turn(s, attempt, warmup, Ending::failed(cut.code(), Outcome::Cancelled)).await;
                return false;
            }
            Ok(Err(unrouted)) => {
                // (an account tried since that failed otherwise is the answer, as over HTTP)
                if let Some(held) = held.filter(|_| unrouted.yields) {
                    return answer_held(s, limits, client, attempt, warmup, held).await;
                }
                let Unrouted { error, outcome, status, .. } = unrouted;
                let ending = Ending { upstream_status: status, ..Ending::failed(error.code, outcome) };
                return refuse_turn(s, limits, client, attempt, warmup, &error, ending).await;
            }
        };
        let Some(binding) = bound.as_mut() else {
            let e = GatewayError::upstream_unavailable();
            return fail_turn(s, limits, client, attempt, warmup, &e, Outcome::Error).await;
        };
        // The frame as it came, or with the upstream's name for the model and, for an upstream
        // that refuses stored responses, `"store": false` (nothing else edited).
        let no_store = binding.no_store && fields.store != Some(false);
        let out = if upstream_model == model && !no_store {
            text.clone()
        } else {
            let renamed = (upstream_model != model).then_some(upstream_model.as_str());
            let edits = body_edit::Edits { model: renamed, no_store, ..body_edit::Edits::default() };
            match body_edit::edit(Bytes::from(text.clone()), edits).map(|b| String::from_utf8(Vec::from(b))) {
                Ok(Ok(text)) => text,
                _ => {
                    let e = GatewayError::bad_request("frames must be JSON");
                    return fail_turn(s, limits, client, attempt, warmup, &e, Outcome::Rejected).await;
                }
            }
        };
        // An upstream that stops reading gets the same write deadline as a client.
        let forward = tokio::time::timeout(
            limits.write_timeout,
            binding.upstream.send(tungstenite::Message::text(out)),
        );
        let forwarded = match watch(forward, limits, client, &request_id).await {
            Ok(sent) => matches!(sent, Ok(Ok(()))),
            Err(cut) => {
                end_turn(s, attempt, warmup, Ending::failed(cut.code(), Outcome::Cancelled)).await;
                return false;
            }
        };
        if !forwarded {
            *bound = None;
            let e = GatewayError::upstream_unavailable();
            return fail_turn(s, limits, client, attempt, warmup, &e, Outcome::Error).await;
        }
        // Only a socket opened for this turn may be left: a later turn continues a conversation
        // that lives on it.
        let movable = (fresh && tried.len() < call::MAX_SWITCHES)
            .then(|| attempt.routing.is_some_and(|d| d.rule == Rule::SessionBinding));
        let answering = Answering {
            account: &binding.account,
            model,
            request_id: &request_id,
            started: attempt.started,
            lease: attempt.lease.as_mut(),
            movable,
        };
        // The answer is the upstream's time; the relay's own work is small beside it.
        let meter = std::sync::Arc::clone(&attempt.stopwatch);
        let relaying = relay_turn(s, limits, client, &mut binding.upstream, answering);
        let turn = meter.on_upstream(relaying.instrument(span.clone())).await;
        if let Some(frames) = turn.held {
            // The account learns the verdict and its slot goes back; the next decision skips it.
            if let Some(mut lease) = attempt.lease.take() {
                lease.settle(turn.ending.verdict);
            }
            let account = (binding.account.id, binding.account.provider);
            tried.push(account.0);
            held = Some(Held { frames, ending: turn.ending, account });
            if let Some(left) = bound.take() {
                // (closed aside: the turn goes on to another account meanwhile)
                let tracked = s.lifecycle.tasks.token();
                tokio::spawn(async move {
                    close_upstream(left).await;
                    drop(tracked);
                });
            }
            continue;
        }
        if turn.upstream_gone {
            *bound = None;
        }
        end_turn(s, attempt, warmup, turn.ending).await;
        return !turn.client_gone;
    }
}

/// A first turn's refusal by an account it left: the frames the client would have heard.
struct Held {
    frames: Vec<String>,
    ending: Ending,
    /// The account that refused.
    account: (i64, Provider),
}

/// Answers a turn with an account's refusal held back while another was tried (BUD-5: as it came).
async fn answer_held(
    s: &AppState,
    limits: &SendLimits,
    client: &mut WebSocket,
    attempt: Attempt,
    warmup: bool,
    held: Held,
) -> bool {
    let mut attempt = attempt;
    // The turn is recorded as the refusing account's; a later account's slot (one whose token
    // it could not use) goes back unjudged.
    attempt.account = Some(held.account);
    drop(attempt.lease.take());
    let deadline = attempt.started + s.config.request_deadline;
    let sent = send_frames(limits, client, held.frames, deadline).await.is_ok();
    end_turn(s, attempt, warmup, held.ending).await;
    sent
}

/// Ends a turn with a gateway error: the client hears it (an error event with the request id)
/// and the turn is recorded. Returns whether the client is still there.
async fn fail_turn(
    s: &AppState,
    limits: &SendLimits,
    client: &mut WebSocket,
    attempt: Attempt,
    warmup: bool,
    e: &GatewayError,
    outcome: Outcome,
) -> bool {
    refuse_turn(s, limits, client, attempt, warmup, e, Ending::failed(e.code, outcome)).await
}

/// `fail_turn`, recorded as `ending` (an upstream's refusal of the handshake carries its status).
async fn refuse_turn(
    s: &AppState,
    limits: &SendLimits,
    client: &mut WebSocket,
    mut attempt: Attempt,
    warmup: bool,
    e: &GatewayError,
    ending: Ending,
) -> bool {
    if ending.outcome == Outcome::Rejected {
        attempt.refused = Some(e.code);
    }
    let sent = send_error(limits, client, e, &attempt.request_id).await;
    end_turn(s, attempt, warmup, ending).await;
    sent.is_ok()
}

/// Records a generating turn; a warm-up (`generate:false`) leaves no record (REC-1). Either counts
/// for the key's circuit breaker (BUD-4) as an HTTP call would: an error or a refusal is a
/// failure; an incomplete answer (200 over HTTP) or a client that left is not.
async fn end_turn(s: &AppState, attempt: Attempt, warmup: bool, ending: Ending) {
    let failed = matches!(ending.outcome, Outcome::Error | Outcome::Rejected);
    super::call::count_for_breaker(s, attempt.principal.key_id, failed).await;
    if warmup {
        attempt.discard();
    } else {
        attempt.finish(ending).await;
    }
}

/// Why a turn was cut before its upstream answered.
enum Cut {
    ClientGone,
    ShutDown,
}

impl Cut {
    fn code(&self) -> &'static str {
        match self {
            Cut::ClientGone => "client_cancelled",
            Cut::ShutDown => "server_shutdown",
        }
    }
}

/// Runs a turn's setup (waiting for an account, connecting, forwarding the frame) while watching
/// the client and the hard stop: a client that leaves or a shutdown that cuts ends the wait at
/// once (ADM-7), and a frame the client sends meanwhile is refused as a turn in progress.
async fn watch<F: std::future::Future>(
    work: F,
    limits: &SendLimits,
    client: &mut WebSocket,
    request_id: &str,
) -> Result<F::Output, Cut> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return Ok(out),
            () = limits.lifecycle.hard_stop.cancelled() => return Err(Cut::ShutDown),
            msg = client.recv() => match msg {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Err(Cut::ClientGone),
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    if send_error(limits, client, &in_progress(), request_id).await.is_err() {
                        return Err(Cut::ClientGone);
                    }
                }
                Some(Ok(_)) => {}
            },
        }
    }
}

/// PX-1: one turn at a time on a connection.
fn in_progress() -> GatewayError {
    GatewayError::new(
        axum::http::StatusCode::CONFLICT,
        "response_in_progress",
        "a response is still in progress on this connection; send the next response.create after it ends",
    )
}

/// The caller as of this turn: `Err((error, end the session))`. A key that no longer
/// authenticates (revoked, disabled, expired, its member disabled or off the pool) or that now
/// targets another pool ends the session; a lookup failure only fails this turn.
async fn turn_principal(
    s: &AppState,
    headers: &HeaderMap,
    current: &Principal,
) -> Result<Principal, (GatewayError, bool)> {
    match authenticate_request(s, headers).await {
        // BUD-4: a key blocked or banned since the socket opened is refused per turn; a ban
        // ends the socket.
        Ok(p) if p.key_id == current.key_id && p.pool_id == current.pool_id => {
            match s.breaker.check(p.key_id, s.clock.unix_ms()) {
                Ok(()) => Ok(p),
                Err(e) => {
                    let end = e.code == "api_key_permanently_banned";
                    Err((e, end))
                }
            }
        }
        Ok(_) => Err((GatewayError::invalid_api_key(), true)),
        Err(e) => {
            let end = e.code == GatewayError::invalid_api_key().code;
            Err((e, end))
        }
    }
}

/// An upstream event frame's `type` ("" when it names none, or it is not a JSON object), read
/// without building the document and, unless it is written with escapes, without copying it:
/// most frames are deltas the turn only passes on. As a parsed document reads it, the last
/// `type` counts, and one that is not text is none.
pub fn event_type(text: &str) -> Cow<'_, str> {
    serde_json::from_str::<EventType<'_>>(text).map(|t| t.0).unwrap_or_default()
}

/// [`event_type`]'s reading, with the lenient reader's pieces (a key matched unbuilt, a `type`
/// of another JSON type read as none); the other members are skipped unread. (Not a
/// `lenient_object!`: its members are checked as a whole parse checks them, and a frame that
/// parse refuses would lose its type, where the turn still ends on such a terminal frame.)
struct EventType<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for EventType<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = EventType<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut kind = Cow::Borrowed("");
                while let Some(key) = map.next_key_seed(Known(&["type"]))? {
                    if key.is_some() {
                        kind = map.next_value::<Loose<Cow<'de, str>>>()?.0.unwrap_or_default();
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(EventType(kind))
            }
        }
        d.deserialize_map(Object)
    }
}

/// A client frame's top-level members. Only they are read: the frame carries the whole
/// conversation, and it goes upstream as the client wrote it. So a frame that names its type,
/// model or warm-up twice is refused: SubLane would check one, and an upstream might run the
/// other (an HTTP body's routing fields are refused the same way).
fn read_frame(text: &str) -> Result<body_edit::Members<'_>, GatewayError> {
    match body_edit::Members::of(text.as_bytes()) {
        Ok(members) => match members.repeated(&["type", "model", "generate"]) {
            Some(name) => Err(GatewayError::bad_request(format!("the frame names `{name}` more than once"))),
            None => Ok(members),
        },
        Err(body_edit::Unreadable::NotAnObject) => {
            Err(GatewayError::bad_request("expected a response.create frame"))
        }
        Err(body_edit::Unreadable::NotJson) => Err(GatewayError::bad_request("frames must be JSON")),
    }
}

/// A turn's `response.create` and its model (bounded like an HTTP call's).
fn turn_model(frame: &body_edit::Members<'_>) -> Result<String, GatewayError> {
    let text = |name: &str| frame.get(name).and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw).ok());
    if text("type").as_deref() != Some("response.create") {
        return Err(GatewayError::bad_request("expected a response.create frame"));
    }
    let model = text("model")
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| GatewayError::bad_request("response.create needs a model"))?;
    check_model(&model)?;
    Ok(model.into_owned())
}

/// Drops the upstream connection of an account that no longer serves the key's pool (disabled,
/// expired, deleted, taken out of the pool), so the turn is routed afresh, as after an upstream
/// ends its connection (a continuation then hears the new upstream say that its response is not
/// found, and Codex sends the whole request again). Pinned to it, every later turn on the socket
/// would be refused, and the client, its socket open, would never reconnect.
async fn leave_unrouted(s: &AppState, pool_id: i64, bound: &mut Option<Binding>) {
    let Some(account) = bound.as_ref().map(|b| b.account.id) else { return };
    let routed = match s.directory.snapshot(&s.db, &s.sealer).await {
        Ok(snapshot) => snapshot.pool(pool_id).and_then(|p| p.position(account)).is_some(),
        Err(_) => true, // (the turn's own scheduling meets the failure and answers it)
    };
    if !routed {
        tracing::info!(
            account_id = account,
            "websocket session leaves an account that no longer serves its pool"
        );
        *bound = None;
    }
}

/// Schedules this turn: the first turn chooses the account (and opens its upstream socket),
/// later ones are pinned to it. Every turn re-checks policy and takes a lease. Accounts in
/// `tried` are left out; those that refuse here are added.
async fn route(
    s: &AppState,
    attempt: &mut Attempt,
    only: Option<Provider>,
    headers: &HeaderMap,
    fields: &RoutingFields,
    bound: &mut Option<Binding>,
    tried: &mut Vec<i64>,
) -> Result<String, Unrouted> {
    let spec = Spec { protocol: Protocol::OpenAi, op: Operation::Responses, only };
    let pin = bound.as_ref().map(|b| b.account.id);
    let conversation = Conversation::of(headers, fields);
    // The first turn moves off an account without a usable token (CRED-3), or one whose refusal
    // of the handshake says it cannot serve now (ACC-2), like an HTTP request does: a
    // conversation bound to it stays and is told; anything else tries another.
    // The last account's refusal, answered when no other account takes the turn (BUD-5).
    let mut last_refusal: Option<Unrouted> = None;
    loop {
        let (lease, upstream_model) =
            match schedule::schedule(s, spec, attempt, headers, conversation, pin, tried).await {
                Ok(chosen) => chosen,
                Err((error, outcome)) => {
                    let refused = Unrouted { error, outcome, status: None, yields: true };
                    return Err(last_refusal.unwrap_or(refused));
                }
            };
        let account = Arc::clone(lease.account());
        attempt.lease = Some(lease);
        // (recorded with the turn, which this account answers or refuses)
        attempt.account = Some((account.id, account.provider));
        if let Some(b) = bound.as_mut() {
            // (the account as it is now: a re-enable or re-authorization since the socket opened
            // brought new revisions, which the quota it observes is recorded under)
            b.account = account;
            return Ok(upstream_model);
        }
        let bound_here = attempt.routing.is_some_and(|d| d.rule == Rule::SessionBinding);
        match connect(s, attempt, &account, &upstream_model, headers).await {
            Ok((upstream, no_store)) => {
                *bound = Some(Binding { account, upstream, no_store });
                return Ok(upstream_model);
            }
            Err(Refused { error, verdict: None, token: true, .. })
                if !bound_here && tried.len() < call::MAX_SWITCHES =>
            {
                tried.push(account.id);
                attempt.lease.take();
                last_refusal = Some(Unrouted { error, outcome: Outcome::Error, status: None, yields: true });
            }
            Err(Refused { error, local: Some(outcome), .. }) => {
                // (a re-check between tries refused the turn: answered as over HTTP, as it says)
                return Err(Unrouted { error, outcome, status: None, yields: false });
            }
            Err(Refused { mut error, verdict, .. }) => {
                // CD-1..CD-5 apply to a refused handshake as to an HTTP answer, and the client is
                // told the wait that is enforced, or else the upstream's hint (as over HTTP).
                let mut moves = false;
                let status = verdict.as_ref().map(|v| v.0.as_u16());
                if let (Some(lease), Some((status, body, hint))) = (attempt.lease.as_mut(), verdict) {
                    let verdict = schedule::verdict(account.provider, status, hint, &body, &upstream_model);
                    lease.settle(verdict);
                    if let Some(secs) =
                        super::failure::enforced_retry(verdict, &s.scheduler.settings().failure)
                            .or(hint.map(crate::scheduler::state::retry_secs))
                    {
                        error = error.retry_after(secs);
                    }
                    let unsupported = schedule::model_unsupported(status, &body);
                    let cannot_serve = failure::account_cannot_serve(verdict);
                    moves = tried.len() < call::MAX_SWITCHES
                        && failure::moves_off(bound_here, unsupported, cannot_serve);
                }
                if !moves {
                    return Err(Unrouted { error, outcome: Outcome::Error, status, yields: false });
                }
                tried.push(account.id);
                attempt.lease.take();
                last_refusal = Some(Unrouted { error, outcome: Outcome::Error, status, yields: false });
            }
        }
    }
}

/// A turn no account took: the error for the client and, when it is an upstream's answer (a
/// refused handshake) rather than the scheduler's or a missing token's, the upstream's status.
struct Unrouted {
    error: GatewayError,
    outcome: Outcome,
    status: Option<u16>,
    /// The scheduler's refusal, or a missing token of an account the turn then left: an
    /// upstream's refusal held from an earlier account goes before it (BUD-5), as over HTTP.
    yields: bool,
}

/// A handshake the upstream refused: the error for the client and, when the upstream answered,
/// its status and body for the account's verdict.
struct Refused {
    error: GatewayError,
    verdict: Option<(axum::http::StatusCode, Value, Option<Duration>)>,
    /// The account had no usable token: nothing was sent.
    token: bool,
    /// Refused here, not upstream: a policy re-check between tries (CD-3), with its outcome.
    local: Option<Outcome>,
}

impl From<GatewayError> for Refused {
    fn from(error: GatewayError) -> Self {
        Refused { error, verdict: None, token: false, local: None }
    }
}

impl From<TokenError> for Refused {
    fn from(e: TokenError) -> Self {
        Refused { error: call::token_error(&e), verdict: None, token: true, local: None }
    }
}

/// The client's error for an upstream's HTTP refusal of a handshake.
fn refused_handshake(status: axum::http::StatusCode) -> GatewayError {
    match status.as_u16() {
        401 => GatewayError::upstream_unauthorized(),
        403 => GatewayError::upstream_forbidden(),
        429 => GatewayError::new(
            status,
            "upstream_rate_limited",
            "the upstream provider rate-limited this account",
        ),
        _ => GatewayError::upstream_unavailable(),
    }
}

/// Opens the upstream WebSocket for `account` with a usable token, before the turn's deadline,
/// as the HTTP path sends a call ([`super::upstream::send_with_retries`]):
/// - a 401 on the handshake of an OAuth account refreshes the token and tries once more (CRED-4);
/// - CD-3: an explicit 408/5xx is tried again on the same account, at most twice, with bounded
///   backoff and policy checked again before each try; a long upstream hint goes to the client.
async fn connect(
    s: &AppState,
    attempt: &Attempt,
    account: &Account,
    upstream_model: &str,
    headers: &HeaderMap,
) -> Result<(Upstream, bool), Refused> {
    let deadline = attempt.started + s.config.request_deadline;
    let (mut refreshed, mut retries) = (false, 0);
    loop {
        let credentials = s.tokens.usable(&account.tokens).await?;
        let refused = match handshake(s, attempt, account, &credentials, headers, deadline).await {
            Err(refused) => refused,
            opened => return opened,
        };
        match &refused.verdict {
            Some((StatusCode::UNAUTHORIZED, ..)) if account.provider.uses_oauth() => {
                // A second refusal, or a failed refresh, is a token error: the session may move
                // to another account like an HTTP call (`token: true`).
                s.tokens.refused(&account.tokens, &credentials, refreshed).await?;
                refreshed = true;
            }
            Some((status, _, hint)) => {
                let Some(backoff) = schedule::retry_at(*status, retries, deadline, || *hint) else {
                    return Err(refused);
                };
                retries += 1;
                tokio::time::sleep_until(backoff).await;
                schedule::recheck_for_retry(s, headers, attempt, account, upstream_model).await.map_err(
                    |(error, outcome)| Refused { error, verdict: None, token: false, local: Some(outcome) },
                )?;
            }
            _ => return Err(refused),
        }
    }
}

/// One handshake with the upstream WebSocket for `account` with `credentials` and the client's
/// headers, within the header timeout and before `deadline`; with the socket, whether the
/// upstream refuses stored responses.
async fn handshake(
    s: &AppState,
    attempt: &Attempt,
    account: &Account,
    credentials: &CredentialInput,
    headers: &HeaderMap,
    deadline: Instant,
) -> Result<(Upstream, bool), Refused> {
    let target = providers::target(
        account.provider,
        credentials,
        &s.config.upstream,
        Operation::Responses,
        headers,
        None,
    )
    .map_err(|_| GatewayError::no_available_account("(websocket)"))?;
    let no_store = target.force_no_store;
    let url = match target.url.as_str().split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some(("http", rest)) => format!("ws://{rest}"),
        _ => return Err(GatewayError::upstream_unavailable().into()),
    };
    let mut request = url.into_client_request().map_err(|_| GatewayError::upstream_unavailable())?;
    // One value per header (the handshake's own headers are already there and stay single).
    for (name, value) in &target.headers {
        if name != "content-type" && name != "accept" && !request.headers().contains_key(name) {
            request.headers_mut().insert(name.clone(), value.clone());
        }
    }
    // (a refused handshake's body is read: the quota and reset in a 429, as in an HTTP answer)
    super::upstream::uncompressed(request.headers_mut());
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    // The connection and TLS of the model calls: the same proxies, roots and TCP settings.
    let http = &s.model_http;
    let connect = async {
        let stream = http.open(&target.url).await.map_err(|e| {
            let error = super::upstream::error_chain(&*e);
            tracing::warn!(
                request_id = %attempt.request_id,
                account_id = account.id,
                error = %error,
                "upstream websocket connection failed"
            );
            tungstenite::Error::Io(std::io::Error::other("connection failed"))
        })?;
        let tls = tokio_tungstenite::Connector::Rustls(http.tls());
        tokio_tungstenite::client_async_tls_with_config(request, stream, Some(config), Some(tls)).await
    };
    let at = s.clock.unix_ms();
    let by = (Instant::now() + s.config.upstream_header_timeout).min(deadline);
    match tokio::time::timeout_at(by, connect).await {
        Ok(Ok((socket, resp))) => {
            s.metrics.upstream_answer(account.provider.as_str(), resp.status().as_u16());
            // QT-2: the handshake's quota headers, as on an HTTP answer (accepted: 2xx-like).
            s.quota.observe(account, quota::parse::headers(account.provider, 200, resp.headers(), at));
            Ok((socket, no_store))
        }
        Ok(Err(tungstenite::Error::Http(resp))) => {
            let status = resp.status();
            let body =
                resp.body().as_deref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or(Value::Null);
            let code = status.as_u16();
            s.metrics.upstream_answer(account.provider.as_str(), code);
            s.quota.observe(account, quota::parse::headers(account.provider, code, resp.headers(), at));
            s.quota.observe(account, quota::parse::error_body(account.provider, code, &body, at));
            let hint = schedule::retry_after_header(resp.headers(), s.clock.now());
            Err(Refused {
                error: refused_handshake(status),
                verdict: Some((status, body, hint)),
                token: false,
                local: None,
            })
        }
        Ok(Err(_)) => Err(GatewayError::upstream_unavailable().into()),
        Err(_) => Err(GatewayError::upstream_timeout().into()),
    }
}

/// The bounds every send to the client respects.
struct SendLimits {
    write_timeout: Duration,
    lifecycle: Arc<crate::app_state::Lifecycle>,
}

/// Why a send to the client did not happen.
#[derive(Debug, PartialEq, Eq)]
enum Unsent {
    Gone,
    Stalled,
    Deadline,
    ShutDown,
}

impl SendLimits {
    fn of(s: &AppState) -> Self {
        SendLimits { write_timeout: s.config.client_write_timeout, lifecycle: Arc::clone(&s.lifecycle) }
    }

    /// Sends `msg`, giving up at the write deadline, the turn's deadline or the hard stop. The
    /// timers are made only when the socket does not take the frame at once, as the HTTP relay's
    /// `deliver` does: most frames go straight into the socket, and a turn sends hundreds.
    async fn send(
        &self,
        client: &mut WebSocket,
        msg: Message,
        deadline: Option<Instant>,
    ) -> Result<(), Unsent> {
        let mut sending = std::pin::pin!(client.send(msg));
        if let Some(sent) = (&mut sending).now_or_never() {
            return sent.map_err(|_| Unsent::Gone);
        }
        // (no deadline: a day away, as far as one may be set)
        let far = Instant::now() + crate::config::MAX_REQUEST_DEADLINE;
        tokio::select! {
            biased;
            sent = sending => sent.map_err(|_| Unsent::Gone),
            () = self.lifecycle.hard_stop.cancelled() => Err(Unsent::ShutDown),
            () = tokio::time::sleep_until(deadline.unwrap_or(far)) => Err(Unsent::Deadline),
            () = tokio::time::sleep(self.write_timeout) => Err(Unsent::Stalled),
        }
    }
}

/// The turn being answered, as the relay needs it.
struct Answering<'a> {
    /// The account answering: its quota frames and refusals are observed (QT-2).
    account: &'a Arc<Account>,
    /// The model the client asked for (the account's verdicts are per model, CD-2/CD-4).
    model: &'a str,
    request_id: &'a str,
    started: Instant,
    /// Told when the upstream takes the turn (its first event that is not an error, a
    /// `codex.rate_limits` frame or a keep-alive): a new conversation is bound then, a probe
    /// settled.
    lease: Option<&'a mut crate::scheduler::Lease>,
    /// The session may leave this account if it refuses the turn before taking it (a first
    /// turn on a socket opened for it), and whether its conversation is bound here (RT-2).
    movable: Option<bool>,
}

struct Turn {
    ending: Ending,
    client_gone: bool,
    upstream_gone: bool,
    /// The upstream refused the turn with an `error` event that moves the session (ACC-2)
    /// before taking it: the frames it sent, none of them passed on.
    held: Option<Vec<String>>,
}

/// Relays the upstream's event frames for one turn, adding the request id where REC-9 asks.
async fn relay_turn(
    s: &AppState,
    limits: &SendLimits,
    client: &mut WebSocket,
    upstream: &mut Upstream,
    turn: Answering<'_>,
) -> Turn {
    let Answering { account, model, request_id, started, mut lease, movable } = turn;
    let mut observer = Observer::new(Grammar::Responses);
    let deadline = started + s.config.request_deadline;
    // The workspace's stream idle timeout (off unless set): that long without an upstream event
    // mid-turn ends the turn, as on an HTTP stream. Read per turn, so a changed setting applies
    // to the next one.
    let idle_timeout = s.workspace_settings.stream_idle_timeout();
    let mut last_upstream = Instant::now();
    // CD-6's header timeout holds for the turn's first upstream frame, as for an HTTP stream's
    // first byte: an upstream that takes the turn and never answers does not hold it to the
    // deadline.
    let mut first_until = Some(last_upstream + s.config.upstream_header_timeout).filter(|f| *f < deadline);
    let (mut client_gone, mut upstream_gone) = (false, false);
    let mut ended: Option<&'static str> = None;
    let mut error_code: Option<String> = None;
    // What an `error` event with an HTTP status says about the account (Codex wraps a refused
    // turn's 429 `usage_limit_reached` this way): the same verdicts as an HTTP answer.
    let mut error_verdict: Option<Verdict> = None;
    // Until the upstream takes a turn the session may move (`movable`), its frames are held back
    // here, so that a refusal reaches the client only if the session stays.
    let mut holding = movable.is_some();
    let mut waiting: Vec<String> = Vec::new();
    let mut held: Option<Vec<String>> = None;
    // The turn's answer as an HTTP call's status: 200 once taken, else an error event's own. A
    // turn the upstream answered is recorded with it and uses a request of a budget (BUD-1).
    let mut answered: Option<u16> = None;
    // The recorded code of an error event rebuilt as an HTTP answer: the code the client is given
    // (`usage_limit_reached`, `previous_response_not_found`, `upstream_unauthorized`).
    let mut rebuilt_code: Option<String> = None;
    // One timer for the total deadline, the idle timeout and the first frame's header timeout,
    // and one wait for the hard stop, for the whole turn: made afresh on every pass, they were
    // registered and dropped once per frame.
    let mut stopped = std::pin::pin!(s.lifecycle.hard_stop.cancelled());
    let mut wake = std::pin::pin!(tokio::time::sleep_until(deadline));
    loop {
        let idle_until = idle_timeout.map(|d| last_upstream + d);
        let earliest = [idle_until, first_until].into_iter().flatten().fold(deadline, Instant::min);
        if wake.deadline() != earliest {
            // Usually later (the idle timeout moving on): tokio then only notes the new time.
            wake.as_mut().reset(earliest);
        }
        // Biased, the upstream first: after a send that waited for a slow client longer than the
        // idle timeout, a frame the upstream sent meanwhile is read before the expired idle timer
        // is looked at (in a random order, the turn could end as idle with a frame waiting).
        tokio::select! {
            biased;
            frame = upstream.next() => {
                let text = match frame {
                    Some(Ok(tungstenite::Message::Text(t))) => t,
                    // Not events: the idle timeout counts upstream events only (CD-6), so a
                    // connection kept alive by pings in front of a stalled model is still cut.
                    Some(Ok(tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_) | tungstenite::Message::Frame(_))) => continue,
                    Some(Ok(tungstenite::Message::Binary(_))) => continue,
                    _ => { upstream_gone = true; break; }
                };
                let kind = event_type(&text);
                let keep_alive = crate::providers::sse::keep_alive(Some(&kind));
                if !keep_alive {
                    // (OpenAI's heartbeat on long Responses streams is not an event either)
                    last_upstream = Instant::now();
                }
                let takes = !keep_alive && kind != "error" && kind != "codex.rate_limits";
                if takes || kind == "error" {
                    // Only an answer ends the header timeout: a turn held silent behind a
                    // rate-limits frame, pings or keep-alives is still cut.
                    first_until = None;
                }
                if takes {
                    answered.get_or_insert(200);
                    if let Some(lease) = lease.take() {
                        lease.accepted();
                    }
                }
                observer.event(Some(&kind), &text, started.elapsed());
                let terminal = matches!(
                    kind.as_ref(),
                    "response.completed" | "response.incomplete" | "response.failed" | "error"
                );
                let stamped = terminal || kind == "response.created";
                // Only the frames the turn reads from or stamps are parsed whole; the rest (the
                // deltas, nearly all of them) go on as they came. So does one the parser refuses
                // (nested too deep, say), its type read all the same: better unstamped than lost.
                let event = (stamped || kind == "codex.rate_limits")
                    .then(|| serde_json::from_str::<Value>(&text).ok())
                    .flatten();
                if kind == "codex.rate_limits" && let Some(event) = &event {
                    s.quota.observe(account, quota::parse::codex_frame(event, s.clock.unix_ms()));
                }
                let mut moves = false;
                let mut event = event;
                if kind == "error" {
                    let code = event
                        .as_ref()
                        .and_then(|e| e["error"]["code"].as_str().or(e["error"]["type"].as_str()));
                    error_code = providers::observe::sanitize(code.unwrap_or("upstream_error"));
                    let status = event.as_ref().and_then(wrapped_status);
                    // (without a status, an answer as an SSE stream's in-stream error is: a 200)
                    answered.get_or_insert(status.map_or(200, |s| s.as_u16()));
                    if let Some(status) = status {
                        let failure = read_refusal(s, account, model, status, event.take().unwrap_or_default());
                        error_verdict = Some(failure.verdict);
                        moves = holding && movable.is_some_and(|bound| failure.moves(bound));
                        // ERR-3: the client hears it rebuilt as the HTTP answer would be, never
                        // in the upstream's own words.
                        let (code, frame) = refusal_frame(failure, status, Some(request_id));
                        rebuilt_code = Some(code);
                        event = Some(frame);
                    }
                }
                let out = match event {
                    // (an object: its type was read from its members)
                    Some(mut event) if stamped => {
                        event["request_id"] = json!(request_id);
                        event.to_string()
                    }
                    _ => text.as_str().to_owned(),
                };
                let sent = if !holding {
                    limits.send(client, Message::Text(out.into()), Some(deadline)).await
                } else if moves {
                    waiting.push(out);
                    held = Some(std::mem::take(&mut waiting));
                    break;
                } else if !takes && kind != "error" {
                    waiting.push(out);
                    continue;
                } else {
                    // Taken, or refused where the session stays: what was held goes first.
                    holding = false;
                    waiting.push(out);
                    send_frames(limits, client, std::mem::take(&mut waiting), deadline).await
                };
                match sent {
                    Ok(()) => {}
                    Err(Unsent::Gone) => { client_gone = true; break; }
                    Err(Unsent::Stalled) => { client_gone = true; ended = Some("client_stalled"); break; }
                    Err(Unsent::Deadline) => { ended = Some("request_timeout"); break; }
                    Err(Unsent::ShutDown) => { ended = Some("server_shutdown"); break; }
                }
                if terminal {
                    break;
                }
            }
            msg = client.recv() => match msg {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => { client_gone = true; break; }
                // One turn at a time (PX-1): a new turn while this one runs is refused, not lost
                // (one read only once this turn's events are all sent is the session's next turn).
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    if send_error(limits, client, &in_progress(), request_id).await.is_err() {
                        client_gone = true;
                        break;
                    }
                }
                Some(Ok(_)) => {}
            },
            // `wake` is the earliest of the total deadline, the idle timeout and (until a first
            // frame) the header timeout. When several ends have come by the time the turn runs,
            // the first of these decides, as in the HTTP relay: the total deadline, the hard
            // stop, the idle timeout, then the header timeout.
            () = &mut wake => {
                let now = Instant::now();
                ended = Some(if now >= deadline {
                    "request_timeout"
                } else if s.lifecycle.hard_stop.is_cancelled() {
                    "server_shutdown"
                } else if idle_until.is_some_and(|idle| idle <= now) {
                    "stream_idle_timeout"
                } else if first_until.is_some_and(|first| first <= now) {
                    "upstream_timeout"
                } else {
                    continue;
                });
                break;
            }
            () = &mut stopped => {
                ended = Some(if Instant::now() >= deadline { "request_timeout" } else { "server_shutdown" });
                break;
            }
        }
    }
    if !waiting.is_empty() && !client_gone {
        // (the turn ended before the upstream took it: the frames held back still reach the client)
        client_gone = send_frames(limits, client, waiting, deadline).await == Err(Unsent::Gone);
    }
    let seen = observer.seen;
    let (outcome, code) = match (ended, seen.outcome) {
        (Some("client_stalled"), _) => (Outcome::Cancelled, Some("client_stalled".to_owned())),
        (_, Some(o)) if client_gone && o == Outcome::Success => (o, None),
        (_, Some(o)) => (o, rebuilt_code.or(seen.error_code).or(error_code)),
        (Some("server_shutdown"), None) => (Outcome::Cancelled, Some("server_shutdown".into())),
        (Some(why), None) => (Outcome::Error, Some(why.to_owned())),
        (None, None) if client_gone => (Outcome::Cancelled, Some("client_cancelled".into())),
        (None, None) if upstream_gone => (Outcome::Error, Some("upstream_stream_broken".into())),
        (None, None) => (Outcome::Error, rebuilt_code.or(error_code)),
    };
    if ended.is_some() && ended != Some("client_stalled") {
        // The turn was cut by the gateway: the upstream socket is mid-answer and cannot be reused.
        upstream_gone = true;
    }
    if (upstream_gone || ended.is_some()) && seen.outcome.is_none() && !client_gone {
        let e = match ended {
            Some("server_shutdown") => GatewayError::shutting_down(),
            Some("request_timeout" | "stream_idle_timeout" | "upstream_timeout") => {
                GatewayError::upstream_timeout()
            }
            _ => GatewayError::upstream_unavailable(),
        };
        let _ = send_error(limits, client, &e, request_id).await;
    }
    let verdict = error_verdict.unwrap_or_else(|| stream_verdict(outcome, code.as_deref()));
    Turn {
        ending: Ending {
            outcome,
            error_code: code,
            upstream_status: answered,
            usage: seen.usage,
            first_output: seen.first_output,
            verdict,
        },
        client_gone,
        upstream_gone,
        held,
    }
}

/// Sends `frames` in order, stopping at the first that cannot be sent.
async fn send_frames(
    limits: &SendLimits,
    client: &mut WebSocket,
    frames: Vec<String>,
    deadline: Instant,
) -> Result<(), Unsent> {
    for frame in frames {
        limits.send(client, Message::Text(frame.into()), Some(deadline)).await?;
    }
    Ok(())
}

/// The HTTP status of a wrapped error event (protocols.md §1c), if it names a valid one.
fn wrapped_status(event: &Value) -> Option<StatusCode> {
    let code = u16::try_from(event.get("status")?.as_u64()?).ok()?;
    StatusCode::from_u16(code).ok()
}

/// A wrapped error event's `headers`, which Codex reads as an HTTP answer's: those with a text
/// value that is a valid header.
fn wrapped_headers(event: &Value) -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    let names = event.get("headers").and_then(Value::as_object);
    for (name, value) in names.into_iter().flatten() {
        let value = match value {
            Value::String(v) => v.clone(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(name.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            headers.append(name, value);
        }
    }
    headers
}

/// An upstream's refusal of a turn as the client hears it (ERR-3): the HTTP answer SubLane would
/// give, wrapped as an error event with its headers in `headers`; with the recorded error code.
fn refusal_frame(failure: UpstreamFailure, status: StatusCode, request_id: Option<&str>) -> (String, Value) {
    match failure.render(Protocol::OpenAi, request_id) {
        Rendered::Local(e) => (e.code.to_owned(), error_frame(&e, request_id)),
        Rendered::Upstream { code, body, headers } => {
            // (recorded as the code the client is given: the upstream's code, else its type)
            let code = body["error"]["code"].as_str().map_or(code, str::to_owned);
            let mut frame = body;
            frame["type"] = json!("error");
            frame["status"] = json!(status.as_u16());
            if let Some(id) = request_id {
                frame["request_id"] = json!(id);
            }
            let headers: serde_json::Map<String, Value> = headers
                .iter()
                .filter_map(|(name, value)| Some((name.as_str().to_owned(), json!(value.to_str().ok()?))))
                .collect();
            if !headers.is_empty() {
                frame["headers"] = Value::Object(headers);
            }
            (code, frame)
        }
    }
}

/// A gateway error as a WebSocket `error` event with the request id (REC-9).
async fn send_error(
    limits: &SendLimits,
    client: &mut WebSocket,
    e: &GatewayError,
    request_id: &str,
) -> Result<(), Unsent> {
    limits.send(client, Message::Text(error_frame(e, Some(request_id)).to_string().into()), None).await
}

/// A gateway error as the Responses WebSocket wraps one (protocols.md §1b): `{"type":"error",
/// "status", "error": {...}, "headers": {...}}`. The `error` object is the HTTP answer's (its
/// `type` from the status, as over HTTP), and the retry time goes where the HTTP answer's
/// `Retry-After` header would be: Codex reads the wrapped error's headers as a response's.
fn error_frame(e: &GatewayError, request_id: Option<&str>) -> Value {
    let mut frame = e.body(Protocol::OpenAi, None);
    frame["type"] = json!("error");
    frame["status"] = json!(e.status.as_u16());
    if let Some(id) = request_id {
        frame["request_id"] = json!(id);
    }
    if let Some(secs) = e.retry_after {
        frame["headers"]["retry-after"] = json!(secs.to_string());
    }
    if e.not_soon {
        frame["headers"][crate::header_names::X_SHOULD_RETRY.as_str()] = json!("false");
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_error_frame_has_the_http_answer_s_error_and_its_retry_time_in_headers() {
        let cooling = error_frame(&GatewayError::account_cooling(30), Some("req_1"));
        assert_eq!(
            (cooling["type"].as_str(), cooling["status"].as_u64(), cooling["request_id"].as_str()),
            (Some("error"), Some(429), Some("req_1"))
        );
        assert_eq!(cooling["error"]["type"], "rate_limit_error", "{cooling}");
        assert_eq!(cooling["error"]["code"], "account_cooling");
        assert_eq!(cooling["headers"], json!({"retry-after": "30"}));
        let budget = error_frame(&GatewayError::budget_exceeded("m".into()).not_soon(true), Some("req_2"));
        assert_eq!(budget["headers"], json!({"x-should-retry": "false"}), "as over HTTP");
        let refused = GatewayError::bad_request("no").with_field("param", json!("model"));
        let refused = error_frame(&refused, Some("req_2"));
        assert_eq!(
            (refused["error"]["type"].as_str(), refused["status"].as_u64()),
            (Some("invalid_request_error"), Some(400))
        );
        assert_eq!(refused["error"]["param"], "model", "the error's own fields are kept");
        assert!(refused.get("headers").is_none(), "{refused}");
    }

    fn model_of(text: &str) -> Result<String, String> {
        read_frame(text).and_then(|f| turn_model(&f)).map_err(|e| e.message)
    }

    #[test]
    fn a_turn_frame_is_read_at_its_top_level_as_a_parsed_document_read_it() {
        assert_eq!(
            model_of(r#"{"type":"response.create","model":"gpt-5.1-codex","input":[]}"#).unwrap(),
            "gpt-5.1-codex"
        );
        // escapes read as text
        assert_eq!(model_of(r#"{"type":"response\u002ecreate","model":"gpt\u002d5"}"#).unwrap(), "gpt-5");
        // what SubLane checks is what goes upstream: no name it reads may be given twice
        for text in [
            r#"{"type":"response.create","model":"a","model":"gpt-5"}"#,
            r#"{"type":"response.create","mod\u0065l":"a","model":"a"}"#,
            r#"{"type":"response.create","type":"response.create","model":"a"}"#,
            r#"{"type":"response.create","model":"a","generate":true,"generate":false}"#,
        ] {
            assert!(model_of(text).unwrap_err().contains("more than once"), "{text}");
        }
        assert_eq!(model_of(r#"{"type":"response.create","model":"a","input":1,"input":2}"#).unwrap(), "a");
        for (text, message) in [
            ("not json", "frames must be JSON"),
            (r#"{"type":"response.create","model":"m""#, "frames must be JSON"),
            ("[1]", "expected a response.create frame"),
            (r#"{"type":"response.cancel","model":"m"}"#, "expected a response.create frame"),
            (r#"{"type":["response.create"],"model":"m"}"#, "expected a response.create frame"),
            (r#"{"type":"response.create"}"#, "response.create needs a model"),
            (r#"{"type":"response.create","model":"  "}"#, "response.create needs a model"),
            (r#"{"type":"response.create","model":7}"#, "response.create needs a model"),
        ] {
            assert_eq!(model_of(text).unwrap_err(), message, "{text}");
        }
        let warmup = |text| read_frame(text).unwrap().get("generate") == Some("false");
        assert!(warmup(r#"{"type":"response.create","generate":false}"#));
        assert!(warmup(r#"{"type":"response.create","generate" : false}"#));
        assert!(!warmup(r#"{"type":"response.create","generate":"false"}"#));
        assert!(!warmup(r#"{"type":"response.create"}"#));
    }

    #[test]
    fn an_upstream_event_s_type_is_read_as_the_parsed_document_read_it() {
        // what the turn read before: the whole document, then its `type` if that is text
        let document = |text: &str| {
            let v = serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
            v["type"].as_str().unwrap_or("").to_owned()
        };
        for text in [
            r#"{"type":"response.output_text.delta","item_id":"msg_1","delta":"Hi"}"#,
            r#"{"delta":{"type":"nested"},"type":"response.completed","response":{"usage":{}}}"#,
            r#"{"type":"response\u002ecreated"}"#,
            r#"{"type":"error","type":"response.completed"}"#,
            r#"{"type":7,"type":"response.completed"}"#,
            r#"{"type":"response.completed","type":7}"#,
            r#"{"typ\u0065":"response.completed","delta":"\u00e9"}"#,
            r#"{"delta":"x","type":{"type":"response.completed"}}"#,
            r#"{"type":["response.completed"]}"#,
            r#" {"type":"codex.rate_limits"} "#,
            r#"{"type":7}"#,
            r#"{"type":null}"#,
            r#"{"kind":"response.completed"}"#,
            r#"["response.completed"]"#,
            r#""response.completed""#,
            r#"{"type":"response.completed""#,
            r#"{"type":"response.completed"} trailing"#,
            "",
        ] {
            assert_eq!(event_type(text), document(text), "{text}");
        }
        // Frames a whole parse refuses, which a turn cannot stamp, still say what they are (and
        // a terminal one ends the turn): nested deeper than the parser goes, an unpaired
        // surrogate, a number out of range.
        let deep = format!(r#"{{"type":"response.completed","x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        for text in [
            deep.as_str(),
            r#"{"type":"response.completed","x":"\ud800"}"#,
            r#"{"type":"response.completed","n":1e400}"#,
        ] {
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
            assert_eq!(event_type(text), "response.completed", "{text}");
        }
        // Read in place, unless written with escapes.
        assert!(matches!(event_type(r#"{"type":"response.output_text.delta"}"#), Cow::Borrowed(_)));
    }
}
