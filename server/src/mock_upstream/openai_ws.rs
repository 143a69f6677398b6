//! Responses over WebSocket (protocols.md §1c) at the same paths as the HTTP API: each text
//! frame from the client is a `response.create`; the answer is the SSE events' JSON, one per
//! frame. `generate:false` is a warm-up (created + completed, no output). Continuations must name a
//! response created on this connection, else `previous_response_not_found`, as upstream does. The
//! Codex backend's socket refuses a turn that does not say `"store": false`, as its HTTP API does.

use std::collections::HashSet;

use axum::{
    extract::{
        State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code},
    },
    http::{HeaderMap, Method, Uri, header},
    response::Response,
};
use serde_json::{Value, json};

use super::{MockState, call, credential, openai::events, play::Action};

pub async fn upgrade(
    State(s): State<MockState>,
    uri: Uri,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let script = s.script(&credential(&headers));
    if script.websocket_delay_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(script.websocket_delay_ms)).await;
    }
    if let Some(status) = s.websocket_refusal(&credential(&headers)) {
        let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::FORBIDDEN);
        let (kind, code) = match status.as_u16() {
            429 => ("rate_limit_exceeded", "rate_limit_exceeded"),
            401 => ("invalid_request_error", "invalid_api_key"),
            500..=599 => ("server_error", "server_error"),
            _ => ("invalid_request_error", "account_deactivated"),
        };
        let mut refusal = super::json(
            status,
            json!({"error": {"type": kind, "code": code, "message": "scripted refusal"}}),
        );
        if let Some(v) = script.refuse_websocket_retry_after.as_deref().and_then(|v| v.parse().ok()) {
            refusal.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
        }
        return refusal;
    }
    ws.on_upgrade(move |socket| session(s, uri, headers, socket))
}

async fn session(s: MockState, uri: Uri, headers: HeaderMap, mut socket: WebSocket) {
    let cred = credential(&headers);
    let mut known: HashSet<String> = HashSet::new();
    while let Some(Ok(msg)) = socket.recv().await {
        let text = match msg {
            Message::Text(text) => text,
            Message::Pong(_) => {
                s.pong(&cred);
                continue;
            }
            _ => continue,
        };
        let turn = s.begin(&cred, call(&Method::GET, &uri, &headers, text.as_bytes()));
        let req: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        let model = req["model"].as_str().unwrap_or("gpt-5.1-codex").to_owned();
        // Codex's backend stores nothing, on its socket as over HTTP, where it answers "Store must
        // be set to false" (the request is checked before any state is looked up).
        if uri.path().starts_with("/backend-api/codex") && req["store"].as_bool() != Some(false) {
            let err = json!({"type": "error", "status": 400, "error": {"type": "invalid_request_error",
                "code": null, "message": "Store must be set to false"}});
            if socket.send(Message::Text(err.to_string().into())).await.is_err() {
                return;
            }
            continue;
        }
        if let Some(prev) = req["previous_response_id"].as_str()
            && !known.contains(prev)
        {
            let err = json!({"type": "error", "status": 400, "error": {"type": "invalid_request_error",
                "code": "previous_response_not_found", "message": format!("Previous response with id '{prev}' not found.")}});
            if socket.send(Message::Text(err.to_string().into())).await.is_err() {
                return;
            }
            continue;
        }
        let warmup = req["generate"].as_bool() == Some(false);
        if !warmup
            && let Some(frame) = &turn.script.rate_limits_frame
            && socket.send(Message::Text(frame.to_string().into())).await.is_err()
        {
            return;
        }
        // A scripted refusal is the HTTP API's, wrapped as Codex's socket sends it (protocols.md
        // §1c): after the turn's `codex.rate_limits` frame, as an answer's events would be.
        if let Some(resp) = super::openai::scripted_error(&turn) {
            let err = wrapped(resp).await;
            if socket.send(Message::Text(err.to_string().into())).await.is_err() {
                return;
            }
            continue;
        }
        let resp_id = format!("resp_{}", turn.id);
        if warmup {
            for (kind, status) in [("response.created", "in_progress"), ("response.completed", "completed")] {
                let ev = json!({"type": kind, "response": {"id": resp_id, "object": "response", "model": model,
                    "status": status, "output": [], "usage": if status == "completed" {
                        json!({"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0, "total_tokens": 0})
                    } else { Value::Null }}});
                if socket.send(Message::Text(ev.to_string().into())).await.is_err() {
                    return;
                }
            }
            known.insert(resp_id);
            continue;
        }
        let (actions, _) = events(&turn, &model, true);
        for action in actions {
            match action {
                Action::Send(sse) => {
                    let data = sse.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("{}").to_owned();
                    if socket.send(Message::Text(data.into())).await.is_err() {
                        return;
                    }
                }
                Action::Sleep(ms) => tokio::time::sleep(std::time::Duration::from_millis(ms)).await,
                Action::Abort => return,
                Action::Stall { keep_alive_ms } => {
                    let period = std::time::Duration::from_millis(keep_alive_ms.max(1));
                    let mut next_ping = tokio::time::Instant::now() + period;
                    let mut sequence_number = 0u64;
                    loop {
                        tokio::select! {
                            msg = socket.recv() => match msg {
                                Some(Ok(Message::Pong(_))) => s.pong(&cred),
                                Some(Ok(_)) => {}
                                _ => return,
                            },
                            () = tokio::time::sleep_until(next_ping), if keep_alive_ms > 0 => {
                                // Both kinds: a Ping frame, and OpenAI's `keepalive` event.
                                next_ping += period;
                                sequence_number += 1;
                                let keepalive = json!({"type": "keepalive", "sequence_number": sequence_number});
                                let ping = Message::Ping(Default::default());
                                if socket.send(ping).await.is_err()
                                    || socket.send(Message::Text(keepalive.to_string().into())).await.is_err()
                                {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        }
        known.insert(resp_id);
        match turn.script.after_websocket_turn.as_deref() {
            Some("ping") if socket.send(Message::Ping(Default::default())).await.is_err() => return,
            Some("close") => {
                let err = json!({"type": "error", "status": 400, "error": {"type": "invalid_request_error",
                    "code": "websocket_connection_limit_reached",
                    "message": "Responses websocket connection limit reached (60 minutes). Create a new websocket connection to continue."}});
                let _ = socket.send(Message::Text(err.to_string().into())).await;
                let close =
                    CloseFrame { code: close_code::NORMAL, reason: "connection limit reached".into() };
                let _ = socket.send(Message::Close(Some(close))).await;
                return;
            }
            _ => {}
        }
    }
}

/// An HTTP error answer as a WebSocket `error` event: `{"type":"error","status","error","headers"}`.
async fn wrapped(resp: Response) -> Value {
    let status = resp.status().as_u16();
    let headers: serde_json::Map<String, Value> = resp
        .headers()
        .iter()
        .filter(|(name, _)| *name != header::CONTENT_TYPE && *name != header::CONTENT_LENGTH)
        .map(|(name, value)| (name.to_string(), json!(value.to_str().unwrap_or_default())))
        .collect();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    json!({"type": "error", "status": status, "error": body["error"], "headers": headers})
}
