//! Scheduling through the real server, as the seeds ask and a line-by-line review found missing:
//! waiters served when capacity appears without a release (a cooldown ends, an account is added)
//! and answered at once when their account is disabled; a new conversation's first request
//! moving off a refusing account; a recovery probe settled when the upstream accepts; upstream
//! faults inside 200 streams counting toward model cooldowns; WebSocket handshakes and error
//! events cooling accounts; cancelled waiters leaving a record; waiters holding workspace slots.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::rig::{Answer, MODEL, Rig, body, counts, served};
use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

/// Starts a slow call that holds a slot, and returns its handle.
fn hold(rig: &Rig, session: Option<&str>) -> tokio::task::JoinHandle<Answer> {
    let call = rig.responses(session, body(MODEL)).send();
    tokio::spawn(async move { Answer::read(call.await.unwrap()).await })
}

/// Waits until `n` requests wait in pool 1's queue.
async fn queued(rig: &mut Rig, n: u64) {
    for _ in 0..200 {
        let waiting: u64 =
            rig.runtime().await.iter().map(|a| a["queue_depth"].as_u64().unwrap()).max().unwrap_or(0);
        if waiting == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} waiters never queued");
}

/// A waiter held back by a cooldown is served when it ends, without any release (the busy
/// account is still busy), and not after the queue timeout.
#[tokio::test]
async fn a_waiter_is_served_when_a_cooldown_ends() {
    let tokens = ["cool-a", "cool-b"];
    let mut rig = Rig::start(&[(tokens[0], 1), (tokens[1], 0)], &[]).await;
    for id in rig.ids.clone() {
        rig.limit(id, 1).await;
    }
    rig.script(tokens[0], json!({"steps": [{"kind": "status", "status": 429, "retry_after": "1"}]})).await;
    rig.script(tokens[1], json!({"delay_ms": 4000})).await;
    // a: 429 (cools 1 s), the call moves to b, which holds it for 4 s
    let holder = hold(&rig, None);
    let b = rig.ids[1];
    rig.busy(b).await;
    let started = Instant::now();
    let before = counts(&rig, &tokens);
    let a = rig.send(None, MODEL).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), 0, "served by the account whose cooldown ended");
    assert!(started.elapsed() < Duration::from_millis(3000), "{:?}", started.elapsed());
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    rig.settled().await;
}

/// An account added to the pool serves a waiter at once; disabling a busy account answers its
/// waiters at once (no account left) and hands its slot to nobody.
#[tokio::test]
async fn admin_changes_reach_waiters_at_once() {
    let token = "admin-a";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    let first = rig.ids[0];
    rig.limit(first, 1).await;
    rig.script(token, json!({"delay_ms": 3000})).await;
    let holder = hold(&rig, None);
    rig.busy(first).await;
    let started = Instant::now();
    let waiter = hold(&rig, None);
    queued(&mut rig, 1).await;
    rig.add_account("codex", "admin-b", 0).await;
    let a = waiter.await.unwrap();
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(rig.calls("admin-b"), 1, "the new account served the waiter");
    assert!(started.elapsed() < Duration::from_millis(2500), "{:?}", started.elapsed());

    // Now both are busy or gone: disable the new one, keep the old one busy, queue a waiter.
    rig.script("admin-b", json!({"delay_ms": 3000})).await;
    let second = rig.ids[1];
    rig.limit(second, 1).await;
    let busy_b = hold(&rig, None);
    rig.busy(second).await;
    let waiter = hold(&rig, None);
    queued(&mut rig, 1).await;
    let started = Instant::now();
    rig.action(first, "disable").await;
    rig.action(second, "disable").await;
    let a = waiter.await.unwrap();
    assert_eq!((a.status, a.code()), (StatusCode::SERVICE_UNAVAILABLE, "no_available_account"));
    assert!(started.elapsed() < Duration::from_millis(1000), "answered at once: {:?}", started.elapsed());
    assert_eq!(holder.await.unwrap().status, StatusCode::OK, "admitted requests are never interrupted");
    assert_eq!(busy_b.await.unwrap().status, StatusCode::OK);
    rig.settled().await;
}

/// Seeds 000/001: a new conversation may pick another account when its first request is refused;
/// the binding is made with the account that accepted it.
#[tokio::test]
async fn a_new_conversations_first_request_moves_and_binds_where_accepted() {
    let tokens = ["first-a", "first-b"];
    let mut rig = Rig::start(&[(tokens[0], 1), (tokens[1], 0)], &[]).await;
    rig.script(tokens[0], json!({"steps": [{"kind": "status", "status": 429, "retry_after": "30"}]})).await;
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("fresh"), MODEL).await.status, StatusCode::OK);
    assert_eq!(counts(&rig, &tokens), vec![before[0] + 1, before[1] + 1], "refused by a, served by b");
    rig.action(rig.ids[0], "clear-cooldown").await;
    for _ in 0..3 {
        let before = counts(&rig, &tokens);
        assert_eq!(rig.send(Some("fresh"), MODEL).await.status, StatusCode::OK);
        assert_eq!(served(&rig, &tokens, &before), 1, "the conversation stays with b, though a is higher");
    }
}

/// CD-4: after a model cooldown one request probes; it is settled when the upstream accepts it,
/// so other requests of that model are served while the probe's stream is still running.
#[tokio::test]
async fn a_probe_is_settled_when_the_upstream_accepts_it() {
    let token = "probe-a";
    let rig =
        Rig::start(&[(token, 0)], &[("SUBLANE_FAILURE_THRESHOLD", "1"), ("SUBLANE_MODEL_COOLDOWN", "1s")])
            .await;
    let failing = json!({"kind": "status", "status": 500});
    rig.script(token, json!({"steps": [failing, failing, failing]})).await;
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(rig.send(None, MODEL).await.code(), "model_cooling");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rig.script(token, json!({"deltas": 10, "delta_delay_ms": 300})).await;
    let probe = rig.responses(None, body(MODEL)).send().await.unwrap();
    assert_eq!(probe.status(), StatusCode::OK);
    let mut probe = probe.bytes_stream();
    let _first = probe.next().await.unwrap().unwrap();
    rig.script(token, json!({})).await;
    let meanwhile = rig.send(None, MODEL).await;
    assert_eq!(meanwhile.status, StatusCode::OK, "not held back by the probe's long stream: {meanwhile:?}");
    while probe.next().await.is_some() {}
}

/// CD-2 (seeds: invalid or abnormally ended streams): an upstream fault reported inside a 200
/// stream counts toward the model's cooldown; a refusal reported the same way does not.
#[tokio::test]
async fn upstream_faults_inside_a_stream_count_toward_the_model_cooldown() {
    let token = "fault-a";
    let rig = Rig::start(&[(token, 0)], &[]).await;
    let refused = json!({"kind": "failed_event", "code": "content_filter"});
    rig.script(token, json!({"steps": [refused, refused, refused]})).await;
    for _ in 0..3 {
        assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK, "the stream itself was a 200");
    }
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK, "refusals mark nothing");
    let fault = json!({"kind": "failed_event", "code": "server_error"});
    rig.script(token, json!({"steps": [fault, fault, fault]})).await;
    for _ in 0..3 {
        rig.send(None, MODEL).await;
    }
    assert_eq!(rig.send(None, MODEL).await.code(), "model_cooling");
    let other = rig.send(None, "gpt-5.1-codex-mini").await;
    assert_eq!(other.status, StatusCode::OK, "other models stay eligible");
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws(rig: &Rig) -> Socket {
    ws_of(rig, None).await
}

/// A WebSocket to SubLane's Responses path, part of conversation `session` when given.
async fn ws_of(rig: &Rig, session: Option<&str>) -> Socket {
    let url = format!("{}/v1/responses", rig.t.base.replace("http://", "ws://"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {}", rig.key).parse().unwrap());
    if let Some(session) = session {
        req.headers_mut().insert("session-id", session.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

async fn turn(
    socket: &mut tokio_tungstenite::WebSocketStream<
        impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    >,
) -> Value {
    let frame = json!({"type": "response.create", "model": MODEL, "input": [], "store": false});
    socket.send(tungstenite::Message::text(frame.to_string())).await.unwrap();
    loop {
        let msg =
            tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
        if let tungstenite::Message::Text(t) = msg {
            let e: Value = serde_json::from_str(t.as_str()).unwrap();
            if matches!(e["type"].as_str(), Some("error" | "response.completed" | "response.failed")) {
                return e;
            }
        }
    }
}

/// The WebSocket path applies verdicts like HTTP: a handshake refused with 429 cools the account,
/// and so does a Codex `error` event with status 429 inside a turn; both are recorded with it.
#[tokio::test]
async fn websocket_refusals_cool_the_account() {
    let token = "ws-cool";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    let id = rig.ids[0];
    rig.script(token, json!({"refuse_websocket": 429})).await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!(e["type"], "error", "{e}");
    assert!(rig.account_runtime(id).await["rate_limit_reset_at"].is_i64(), "the handshake's 429 cooled it");
    rig.action(id, "clear-cooldown").await;

    rig.script(token, json!({"steps": [{"kind": "status", "status": 429}]})).await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!((e["type"].as_str(), e["status"].as_u64()), (Some("error"), Some(429)), "{e}");
    assert!(rig.account_runtime(id).await["rate_limit_reset_at"].is_i64(), "the error event's 429 cooled it");
    rig.action(id, "clear-cooldown").await;

    rig.script(token, json!({"refuse_websocket": 403})).await;
    let mut socket = ws(&rig).await;
    turn(&mut socket).await;
    let rt = rig.account_runtime(id).await;
    assert_eq!(rt["temp_unschedulable_reason"], "upstream_403", "a deactivated account pauses: {rt}");
    // Each turn is recorded with the upstream's status, as an HTTP call would be.
    let recs = rig.t.records(3).await;
    let statuses: Vec<Option<u64>> = recs.iter().map(|r| r["upstream_status"].as_u64()).collect();
    assert_eq!(statuses, [Some(429), Some(429), Some(403)], "{recs:?}");
}

/// A session whose account stops serving the pool (disabled here; expired, deleted or moved out
/// the same) is not left pinned to it: its next turn is routed afresh, on the socket it has, as
/// after an upstream ends its connection; an HTTP call of the conversation moves the same way.
#[tokio::test]
async fn a_session_leaves_an_account_that_stops_serving() {
    let tokens = ["wsleave-a", "wsleave-b"];
    let mut rig = Rig::start(&[(tokens[0], 1), (tokens[1], 0)], &[]).await;
    let mut socket = ws_of(&rig, Some("ws-leave")).await;
    assert_eq!(turn(&mut socket).await["type"], "response.completed");
    assert_eq!(counts(&rig, &tokens), vec![1, 0]);
    rig.action(rig.ids[0], "disable").await;
    let e = turn(&mut socket).await;
    assert_eq!(e["type"], "response.completed", "the next turn on the same socket: {e}");
    assert_eq!(counts(&rig, &tokens), vec![1, 1], "served by the account that serves");
    assert_eq!(turn(&mut socket).await["type"], "response.completed");
    assert_eq!(counts(&rig, &tokens), vec![1, 2], "and it stays there");
    rig.settled().await;
}

/// CD-3 on the WebSocket path: a handshake refused with an explicit 5xx is tried again on the same
/// account, at most twice, as an HTTP call is; the third refusal is the turn's answer.
#[tokio::test]
async fn a_handshake_refused_with_a_5xx_is_tried_again_at_most_twice() {
    let token = "ws-502";
    let rig = Rig::start(&[(token, 0)], &[]).await;
    rig.script(token, json!({"refuse_websocket": 502, "refuse_websocket_times": 2})).await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!(e["type"], "response.completed", "two 502s, then the turn: {e}");
    assert_eq!(rig.calls(token), 1, "one turn reached the upstream");

    rig.script(token, json!({"refuse_websocket": 503, "refuse_websocket_times": 3})).await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!(
        (e["status"].as_u64(), e["error"]["code"].as_str()),
        (Some(502), Some("upstream_unavailable")),
        "{e}"
    );
    // the three refusals were that turn's: the next one connects at once
    let mut socket = ws(&rig).await;
    assert_eq!(turn(&mut socket).await["type"], "response.completed");
    assert_eq!(rig.calls(token), 2);
    let recs = rig.t.records(3).await;
    let statuses: Vec<Option<u64>> = recs.iter().map(|r| r["upstream_status"].as_u64()).collect();
    assert_eq!(statuses, [Some(200), Some(503), Some(200)], "{recs:?}");

    // a wait longer than a retry's is not waited out: the client is told it, after one try
    rig.script(
        token,
        json!({"refuse_websocket": 503, "refuse_websocket_times": 1, "refuse_websocket_retry_after": "30"}),
    )
    .await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!((e["status"].as_u64(), e["headers"]["retry-after"].as_str()), (Some(502), Some("30")), "{e}");
    let mut socket = ws(&rig).await;
    assert_eq!(turn(&mut socket).await["type"], "response.completed", "one refusal was spent");
}

/// A first turn refused by one account's error event, whose next account then fails its
/// handshake without an answer (a timeout): that failure is the answer, as over HTTP, recorded
/// under the account that failed, which learns nothing from the first account's refusal.
#[tokio::test]
async fn a_held_refusal_gives_way_to_the_next_account_s_own_failure() {
    let tokens = ["wshold-a", "wshold-b"];
    let mut rig =
        Rig::start(&[(tokens[0], 1), (tokens[1], 0)], &[("SUBLANE_UPSTREAM_HEADER_TIMEOUT", "500ms")]).await;
    rig.script(tokens[0], json!({"steps": [{"kind": "status", "status": 429, "retry_after": "30"}]})).await;
    rig.script(tokens[1], json!({"websocket_delay_ms": 3000})).await;
    let mut socket = ws(&rig).await;
    let frames = turn_frames(&mut socket).await;
    let last = frames.last().unwrap();
    assert_eq!(
        (last["status"].as_u64(), last["error"]["code"].as_str()),
        (Some(504), Some("upstream_timeout")),
        "{frames:?}"
    );
    assert_eq!(frames.len(), 1, "nothing of the first account's: {frames:?}");
    rig.settled().await;
    assert!(rig.account_runtime(rig.ids[0]).await["rate_limit_reset_at"].is_i64(), "its own 429 cooled a");
    let b = rig.account_runtime(rig.ids[1]).await;
    assert!(b["rate_limit_reset_at"].is_null(), "b did not take a's verdict: {b}");
    let recs = rig.t.records(1).await;
    let recorded = (recs[0]["account_id"].as_i64(), recs[0]["error_code"].as_str());
    assert_eq!(recorded, (Some(rig.ids[1]), Some("upstream_timeout")), "{recs:?}");
}

/// ERR-3 on the WebSocket path: an upstream's refusal of a turn reaches the client rebuilt as the
/// HTTP answer would be, never in the upstream's words; Codex's usage limit keeps what Codex tells
/// its user from (the type, the plan and the reset time).
#[tokio::test]
async fn a_refused_websocket_turn_is_rebuilt_and_keeps_what_codex_reads() {
    let token = "ws-usage";
    let rig = Rig::start(&[(token, 0)], &[]).await;
    rig.script(token, json!({"steps": [{"kind": "usage_limit_reached", "resets_in_secs": 600}]})).await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!(
        (e["status"].as_u64(), e["error"]["type"].as_str()),
        (Some(429), Some("usage_limit_reached")),
        "{e}"
    );
    assert!(e["error"]["resets_at"].is_u64() && e["error"]["plan_type"] == "plus", "{e}");
    assert!(!e.to_string().contains("The usage limit has been reached"), "not the upstream's words: {e}");
    let recs = rig.t.records(1).await;
    let recorded = (recs[0]["error_code"].as_str(), recs[0]["upstream_status"].as_u64());
    assert_eq!(recorded, (Some("usage_limit_reached"), Some(429)), "as an HTTP call's record: {recs:?}");
}

/// ACC-2 on the WebSocket path: a first turn whose account refuses the upstream handshake moves
/// to another account before anything reaches the client, as an HTTP call does; a session bound
/// to the refusing account stays and is told (RT-2).
#[tokio::test]
async fn a_refused_websocket_handshake_moves_an_unbound_session_to_another_account() {
    let tokens = ["wsmove-a", "wsmove-b"];
    let mut rig = Rig::start(&[(tokens[0], 1), (tokens[1], 0)], &[]).await;
    // (bound over HTTP while the first account still serves)
    assert_eq!(rig.send(Some("ws-bound"), MODEL).await.status, StatusCode::OK);
    rig.script(tokens[0], json!({"refuse_websocket": 429})).await;
    let mut socket = ws_of(&rig, Some("ws-bound")).await;
    let e = turn(&mut socket).await;
    assert_eq!((e["type"].as_str(), e["status"].as_u64()), (Some("error"), Some(429)), "{e}");
    assert_eq!(counts(&rig, &tokens), vec![1, 0], "the bound session did not move");
    assert!(rig.account_runtime(rig.ids[0]).await["rate_limit_reset_at"].is_i64(), "the 429 cooled it");
    rig.action(rig.ids[0], "clear-cooldown").await;
    let mut socket = ws(&rig).await;
    let e = turn(&mut socket).await;
    assert_eq!(e["type"], "response.completed", "{e}");
    assert_eq!(counts(&rig, &tokens), vec![1, 1], "the second account served the turn");
    assert!(rig.account_runtime(rig.ids[0]).await["rate_limit_reset_at"].is_i64(), "the 429 cooled it");
}

/// REC-1: a client that gives up while queued leaves a `cancelled` record and its place at once;
/// a WebSocket turn queued when its socket closes leaves too.
#[tokio::test]
async fn cancelled_waiters_leave_a_record_and_the_queue() {
    let token = "cancel-a";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    let id = rig.ids[0];
    rig.limit(id, 1).await;
    rig.script(token, json!({"delay_ms": 2000})).await;
    let holder = hold(&rig, None);
    rig.busy(id).await;
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let gone = impatient
        .post(format!("{}/v1/responses", rig.t.base))
        .bearer_auth(&rig.key)
        .json(&body(MODEL))
        .send()
        .await;
    assert!(gone.is_err());
    queued(&mut rig, 0).await;
    let mut socket = ws(&rig).await;
    let frame = json!({"type": "response.create", "model": MODEL, "input": [], "store": false});
    socket.send(tungstenite::Message::text(frame.to_string())).await.unwrap();
    queued(&mut rig, 1).await;
    socket.close(None).await.unwrap();
    queued(&mut rig, 0).await;
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    let recs = rig.t.records(3).await;
    let cancelled: Vec<&Value> = recs.iter().filter(|r| r["outcome"] == "cancelled").collect();
    assert_eq!(cancelled.len(), 2, "{recs:?}");
    assert!(cancelled.iter().all(|r| r["error_code"] == "client_cancelled"));
    rig.settled().await;
}

/// ADM-7: waiters count toward workspace admission: with the workspace holding one call in
/// flight and one waiting, the next caller is told the workspace is busy.
#[tokio::test]
async fn waiters_count_toward_the_workspace() {
    let token = "ws-full";
    let mut rig = Rig::start(&[(token, 0)], &[("SUBLANE_WORKSPACE_CAPACITY", "2")]).await;
    let id = rig.ids[0];
    rig.limit(id, 1).await;
    rig.script(token, json!({"delay_ms": 1500})).await;
    let holder = hold(&rig, None);
    rig.busy(id).await;
    let waiter = hold(&rig, None);
    queued(&mut rig, 1).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.status, a.code()), (StatusCode::TOO_MANY_REQUESTS, "workspace_busy"));
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    assert_eq!(waiter.await.unwrap().status, StatusCode::OK);
    let (status, _) = rig.admin.call(Method::GET, "/api/accounts/runtime", None).await;
    assert_eq!(status, StatusCode::OK);
}

/// A WebSocket turn's frames until its end (an error event, or a completed / failed response).
async fn turn_frames(socket: &mut Socket) -> Vec<Value> {
    let frame = json!({"type": "response.create", "model": MODEL, "input": [], "store": false});
    socket.send(tungstenite::Message::text(frame.to_string())).await.unwrap();
    let mut frames = Vec::new();
    loop {
        let msg =
            tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
        if let tungstenite::Message::Text(t) = msg {
            let e: Value = serde_json::from_str(t.as_str()).unwrap();
            let end = matches!(e["type"].as_str(), Some("error" | "response.completed" | "response.failed"));
            frames.push(e);
            if end {
                return frames;
            }
        }
    }
}

/// ACC-2 on the WebSocket path, past the handshake: Codex's backend refuses a turn over its socket
/// with a wrapped `error` event (its usage limit, after the turn's `codex.rate_limits` frame). A
/// first turn so refused moves to another account before the client hears anything, and the
/// session and its conversation stay there; a session bound to the refusing account stays and is
/// told (RT-2); with no other account left, the last refusal is the answer as it came, and a
/// conversation whose first turn was refused is bound to no account.
#[tokio::test]
async fn a_first_websocket_turn_refused_by_an_error_event_moves_to_another_account() {
    let tokens = ["wsfirst-a", "wsfirst-b"];
    let mut rig = Rig::start(&[(tokens[0], 1), (tokens[1], 0)], &[]).await;
    let limits = |plan: &str| {
        json!({"type": "codex.rate_limits", "plan_type": plan, "rate_limits": {
            "primary": {"used_percent": 20.0, "window_minutes": 300, "reset_at": 4_102_444_800_i64}}})
    };
    let limited = |plan: &str| json!({"rate_limits_frame": limits(plan), "steps": [{"kind": "status", "status": 429, "retry_after": "30"}]});
    let kinds = |frames: &[Value]| -> Vec<String> {
        frames.iter().filter_map(|f| f["type"].as_str().map(str::to_owned)).collect()
    };

    // A conversation bound to a (over HTTP) stays on it, and hears its refusal as it came.
    assert_eq!(rig.send(Some("ws-bound"), MODEL).await.status, StatusCode::OK);
    rig.script(tokens[0], limited("plus")).await;
    let mut socket = ws_of(&rig, Some("ws-bound")).await;
    let frames = turn_frames(&mut socket).await;
    assert_eq!(kinds(&frames), ["codex.rate_limits", "error"], "{frames:?}");
    // (rebuilt as the HTTP answer would be, ERR-3: its type, code and Retry-After, not its words)
    let refusal = &frames[1];
    assert_eq!(
        (refusal["status"].as_u64(), refusal["error"]["code"].as_str()),
        (Some(429), Some("rate_limit_exceeded"))
    );
    assert_eq!(refusal["headers"]["retry-after"], "30", "{refusal}");
    assert!(!refusal.to_string().contains("scripted"), "no upstream message: {refusal}");
    assert!(refusal["request_id"].as_str().is_some_and(|id| id.starts_with("req_")), "{refusal}");
    assert_eq!(counts(&rig, &tokens), vec![2, 0], "the bound session did not move");
    // The event's wrapped Retry-After (30 s) is the account's cooldown, which the conversation
    // waits for (RT-2).
    rig.settled().await;
    let waits = rig.send(Some("ws-bound"), MODEL).await;
    assert_eq!(waits.status, StatusCode::TOO_MANY_REQUESTS, "{waits:?}");
    assert!(waits.retry_after.is_some_and(|s| (25..=30).contains(&s)), "{waits:?}");

    // Both refuse: the session tries each once, and hears the last refusal; the conversation is
    // bound to neither.
    rig.action(rig.ids[0], "clear-cooldown").await;
    rig.script(tokens[0], limited("plus")).await;
    rig.script(tokens[1], limited("pro")).await;
    let mut socket = ws_of(&rig, Some("ws-none")).await;
    let frames = turn_frames(&mut socket).await;
    assert_eq!(kinds(&frames), ["codex.rate_limits", "error"], "{frames:?}");
    assert_eq!(frames[0]["plan_type"], "pro", "b's frames, the last refusal: {frames:?}");
    assert_eq!(counts(&rig, &tokens), vec![3, 1]);
    rig.settled().await;
    for (token, id) in tokens.iter().zip(rig.ids.clone()) {
        rig.action(id, "clear-cooldown").await;
        rig.script(token, json!({})).await;
    }
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("ws-none"), MODEL).await.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), 0, "the higher-priority account, as for a new conversation");

    // Codex's usage limit: the first turn of a new conversation moves to b before the client
    // hears anything of a's, and the socket and the conversation stay with b.
    rig.script(
        tokens[0],
        json!({"rate_limits_frame": limits("plus"), "steps": [{"kind": "usage_limit_reached", "resets_in_secs": 600}]}),
    )
    .await;
    let before = counts(&rig, &tokens);
    let mut socket = ws_of(&rig, Some("ws-fresh")).await;
    let frames = turn_frames(&mut socket).await;
    let seen = kinds(&frames);
    assert_eq!(seen.last().map(String::as_str), Some("response.completed"), "{seen:?}");
    assert!(!seen.iter().any(|k| k == "error" || k == "codex.rate_limits"), "nothing of a's: {seen:?}");
    assert_eq!(counts(&rig, &tokens), vec![before[0] + 1, before[1] + 1], "refused by a, served by b");
    let runtime = rig.account_runtime(rig.ids[0]).await;
    assert!(runtime["rate_limit_reset_at"].is_i64(), "the usage limit cooled a: {runtime}");
    // (three HTTP calls and two refused turns before it)
    let recs = rig.t.records(6).await;
    let last = recs.last().unwrap();
    assert_eq!((last["outcome"].as_str(), last["account_id"].as_i64()), (Some("success"), Some(rig.ids[1])));
    assert_eq!((recs.len(), last["operation"].as_str()), (6, Some("responses_ws")), "one turn, one record");
    assert_eq!(turn(&mut socket).await["type"], "response.completed");
    assert_eq!(rig.send(Some("ws-fresh"), MODEL).await.status, StatusCode::OK);
    assert_eq!(counts(&rig, &tokens), vec![before[0] + 1, before[1] + 3], "the conversation is bound to b");
}
