//! Responses over WebSocket (PX-1, REC-9): `GET /v1/responses` upgraded, one turn at a time.
//!
//! Codex keeps conversation state on the connection (`previous_response_id` with `store:false`),
//! so a client connection is bound to one account and one upstream WebSocket, opened at the first
//! turn and reused until either side closes. Each `response.create` frame is forwarded as is (the
//! model may be rewritten by a pool alias); the upstream's event frames come back with a
//! `request_id` added to created / completed / incomplete / failed events and errors. Every
//! generating turn is one attempt with one record; warm-ups (`generate:false`) create none.
//! Between turns the connection holds no slot (ADM-4).

use std::sync::Arc;

use app::model::Provider;
use axum::{
    extract::{
        State,
        ws::{Message, WebSocket, WebSocketUpgrade},
    },
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

use super::{
    auth::authenticate_request,
    call::{Attempt, Ending, REQUEST_DEADLINE, Spec, new_request_id},
    directory::Account,
    error::{GatewayError, Protocol},
    request::RoutingFields,
    schedule::{self, Conversation},
};
use crate::{
    app_state::AppState,
    keys::Principal,
    providers::{self, Grammar, Observer, Operation},
    records::{Outcome, Usage},
    scheduler::Verdict,
};

type Upstream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Recorded operation name of a WebSocket turn.
const OPERATION: &str = "responses_ws";

/// Authenticates before upgrading: a refused key gets a plain 401 and no socket.
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
    ws.on_upgrade(move |socket| session(s, principal, headers, only, socket))
}

/// The account and upstream socket a client connection is bound to.
struct Binding {
    account: Arc<Account>,
    upstream: Upstream,
}

async fn session(
    s: AppState,
    principal: Principal,
    headers: HeaderMap,
    only: Option<Provider>,
    mut client: WebSocket,
) {
    let mut bound: Option<Binding> = None;
    while let Some(Ok(msg)) = client.recv().await {
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Close(_) => break,
            _ => continue,
        };
        let request_id = new_request_id();
        let started = Instant::now();
        let mut frame: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => {
                let _ =
                    send_error(&mut client, &GatewayError::bad_request("frames must be JSON"), &request_id)
                        .await;
                continue;
            }
        };
        if frame["type"] != "response.create" {
            let e = GatewayError::bad_request("expected a response.create frame");
            let _ = send_error(&mut client, &e, &request_id).await;
            continue;
        }
        let Some(model) = frame["model"].as_str().map(str::to_owned) else {
            let _ = send_error(
                &mut client,
                &GatewayError::bad_request("response.create needs a model"),
                &request_id,
            )
            .await;
            continue;
        };
        let warmup = frame["generate"].as_bool() == Some(false);
        // A turn holds workspace and member slots while it runs; an idle socket holds none (ADM-4).
        let Some(workspace) = s.admission.workspace() else {
            let _ = send_error(&mut client, &GatewayError::workspace_busy(), &request_id).await;
            continue;
        };
        let member = super::call::member_admission(&s, &principal);
        let mut attempt = Attempt::new(
            &s,
            request_id.clone(),
            Protocol::OpenAi,
            OPERATION,
            started,
            principal.clone(),
            model.clone(),
        );
        match member {
            Ok(member) => attempt.slots = Some((workspace, member)),
            Err(e) => {
                let _ = send_error(&mut client, &e, &request_id).await;
                if !warmup {
                    attempt.finish(failure(e.code, Outcome::Rejected)).await;
                }
                continue;
            }
        }

        // Policy is checked every turn; the account is chosen once per connection, and every
        // turn takes one of its slots (ADM-4).
        let fields = RoutingFields::parse(text.as_bytes()).unwrap_or_default();
        let routed = route(&s, &mut attempt, only, &headers, &fields, &mut bound).await;
        let upstream_model = match routed {
            Ok(m) => m,
            Err((e, outcome)) => {
                let _ = send_error(&mut client, &e, &request_id).await;
                if !warmup {
                    attempt.finish(failure(e.code, outcome)).await;
                }
                continue;
            }
        };
        let Some(binding) = bound.as_mut() else { continue };
        attempt.account = Some((binding.account.id, binding.account.provider));
        if upstream_model != model {
            frame["model"] = Value::String(upstream_model);
        }
        if binding.upstream.send(tungstenite::Message::text(frame.to_string())).await.is_err() {
            bound = None;
            let e = GatewayError::upstream_unavailable();
            let _ = send_error(&mut client, &e, &request_id).await;
            if !warmup {
                attempt.finish(failure(e.code, Outcome::Error)).await;
            }
            continue;
        }
        let turn = relay_turn(&mut client, &mut binding.upstream, &request_id, started).await;
        if turn.upstream_gone {
            bound = None;
        }
        if !warmup {
            attempt.finish(turn.ending).await;
        }
        if turn.client_gone {
            break;
        }
    }
    if let Some(mut b) = bound {
        let _ = b.upstream.close(None).await;
    }
}

/// Schedules this turn: the first turn chooses the account (and opens its upstream socket),
/// later ones are pinned to it. Every turn re-checks policy and takes a lease.
async fn route(
    s: &AppState,
    attempt: &mut Attempt,
    only: Option<Provider>,
    headers: &HeaderMap,
    fields: &RoutingFields,
    bound: &mut Option<Binding>,
) -> Result<String, (GatewayError, Outcome)> {
    let spec = Spec { protocol: Protocol::OpenAi, op: Operation::Responses, only };
    let pin = bound.as_ref().map(|b| b.account.id);
    let conversation = Conversation::of(headers, fields);
    let (lease, upstream_model) = schedule::schedule(s, spec, attempt, headers, conversation, pin).await?;
    let account = Arc::clone(lease.account());
    attempt.lease = Some(lease);
    if bound.is_none() {
        let upstream = connect(s, &account, headers).await.map_err(|e| (e, Outcome::Error))?;
        *bound = Some(Binding { account, upstream });
    }
    Ok(upstream_model)
}

/// Opens the upstream WebSocket for `account` with its credentials and the client's headers.
async fn connect(s: &AppState, account: &Account, headers: &HeaderMap) -> Result<Upstream, GatewayError> {
    let target = providers::target(
        account.provider,
        &account.credentials,
        &s.config.upstream,
        Operation::Responses,
        headers,
        None,
    )
    .map_err(|_| GatewayError::no_available_account("(websocket)"))?;
    let url = match target.url.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some(("http", rest)) => format!("ws://{rest}"),
        _ => return Err(GatewayError::upstream_unavailable()),
    };
    let mut request = url.into_client_request().map_err(|_| GatewayError::upstream_unavailable())?;
    for (name, value) in &target.headers {
        if name != "content-type" && name != "accept" {
            request.headers_mut().append(name.clone(), value.clone());
        }
    }
    let connect = tokio_tungstenite::connect_async(request);
    match tokio::time::timeout(super::call::HEADER_TIMEOUT, connect).await {
        Ok(Ok((socket, _))) => Ok(socket),
        Ok(Err(_)) => Err(GatewayError::upstream_unavailable()),
        Err(_) => Err(GatewayError::upstream_timeout()),
    }
}

struct Turn {
    ending: Ending,
    client_gone: bool,
    upstream_gone: bool,
}

/// Relays the upstream's event frames for one turn, adding the request id where REC-9 asks.
async fn relay_turn(
    client: &mut WebSocket,
    upstream: &mut Upstream,
    request_id: &str,
    started: Instant,
) -> Turn {
    let mut observer = Observer::new(Grammar::Responses);
    let deadline = started + REQUEST_DEADLINE;
    let (mut client_gone, mut upstream_gone, mut timed_out) = (false, false, false);
    let mut error_code: Option<String> = None;
    loop {
        tokio::select! {
            frame = upstream.next() => {
                let text = match frame {
                    Some(Ok(tungstenite::Message::Text(t))) => t.to_string(),
                    Some(Ok(tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_) | tungstenite::Message::Frame(_))) => continue,
                    Some(Ok(tungstenite::Message::Binary(_))) => continue,
                    _ => { upstream_gone = true; break; }
                };
                let mut event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let kind = event["type"].as_str().unwrap_or("").to_owned();
                observer.event(Some(&kind), &text, started.elapsed());
                let terminal = matches!(kind.as_str(), "response.completed" | "response.incomplete" | "response.failed" | "error");
                if kind == "error" {
                    error_code = providers::observe::sanitize(
                        event["error"]["code"].as_str().or(event["error"]["type"].as_str()).unwrap_or("upstream_error"),
                    );
                }
                let out = if terminal || kind == "response.created" {
                    event["request_id"] = json!(request_id);
                    event.to_string()
                } else {
                    text
                };
                if client.send(Message::Text(out.into())).await.is_err() {
                    client_gone = true;
                    break;
                }
                if terminal {
                    break;
                }
            }
            msg = client.recv() => {
                // A client frame mid-turn: a close ends the turn; anything else waits its turn.
                if matches!(msg, None | Some(Err(_)) | Some(Ok(Message::Close(_)))) {
                    client_gone = true;
                    break;
                }
            }
            _ = tokio::time::sleep_until(deadline) => { timed_out = true; break; }
        }
    }
    let seen = observer.seen;
    let (outcome, code) = match seen.outcome {
        Some(o) if client_gone && o == Outcome::Success => (o, None),
        Some(o) => (o, seen.error_code.or(error_code)),
        None if client_gone => (Outcome::Cancelled, Some("client_cancelled".into())),
        None if timed_out => (Outcome::Error, Some("request_timeout".into())),
        None if upstream_gone => (Outcome::Error, Some("upstream_stream_broken".into())),
        None => (Outcome::Error, error_code),
    };
    if upstream_gone && seen.outcome.is_none() && !client_gone {
        let e = GatewayError::upstream_unavailable();
        let _ = send_error(client, &e, request_id).await;
    }
    let verdict = super::call::stream_verdict(outcome, code.as_deref());
    Turn {
        ending: Ending {
            outcome,
            error_code: code,
            upstream_status: None,
            usage: seen.usage,
            first_output: seen.first_output,
            verdict,
        },
        client_gone,
        upstream_gone,
    }
}

/// A gateway error as a WebSocket `error` event with the request id (REC-9).
async fn send_error(client: &mut WebSocket, e: &GatewayError, request_id: &str) -> Result<(), axum::Error> {
    let frame = json!({"type": "error", "status": e.status.as_u16(), "request_id": request_id,
        "error": {"type": "invalid_request_error", "code": e.code, "message": e.message}});
    client.send(Message::Text(frame.to_string().into())).await
}

fn failure(code: &str, outcome: Outcome) -> Ending {
    Ending {
        outcome,
        error_code: Some(code.to_owned()),
        upstream_status: None,
        usage: Usage::default(),
        first_output: None,
        verdict: Verdict::Neutral,
    }
}
