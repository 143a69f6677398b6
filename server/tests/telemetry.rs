//! Logs and traces (OPS-4, BEY-5): a full run's log lines carry request ids and no secret,
//! prompt or body, and an OTLP collector receives one span per call with its children.
//!
//! Each test installs its subscriber for its own thread and runs the server on that thread
//! (a current-thread runtime), so the subscriber sees every line SubLane writes for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::Write,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::rig::{MODEL, Rig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sublane::{
    config::{LogFormat, Observability},
    telemetry,
};
use tracing_subscriber::EnvFilter;

/// Log output kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

const PROMPT: &str = "PROMPT-SECRET-do-not-log-4711";
const ANSWER: &str = "ANSWER-SECRET-never-in-logs ";
/// The server serves on the test's own runtime: the log subscriber these tests install is the
/// test thread's, and a serving thread of its own would log elsewhere.
const ON_THIS_THREAD: &[(&str, &str)] = &[("SUBLANE_SERVE_THREADS", "0")];
const ACCESS_TOKEN: &str = "sk-upstream-SECRET-access-0042";
const BOGUS_KEY: &str = "sk-bogus-SECRET-key-9";

#[tokio::test(flavor = "current_thread")]
async fn a_full_runs_logs_carry_request_ids_and_no_secret_prompt_or_body() {
    let logs = Captured::default();
    let o = Observability { log_format: LogFormat::Json, ..Observability::default() };
    let writer = logs.clone();
    let (subscriber, _t) =
        telemetry::subscriber(&o, EnvFilter::new("trace"), move || writer.clone()).unwrap();
    let _installed = tracing::subscriber::set_default(subscriber);

    let mut rig = Rig::start(&[], ON_THIS_THREAD).await;
    let (status, body) = rig
        .admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({"provider": "codex", "name": "plain-name", "pool_ids": [1],
                "credentials": {"kind": "oauth", "access_token": ACCESS_TOKEN, "provider_account_id": "p"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    rig.script(ACCESS_TOKEN, json!({"delta_text": ANSWER, "deltas": 3})).await;

    let mut ids = Vec::new();
    for stream in [false, true] {
        let body = json!({"model": MODEL, "stream": stream, "store": false, "input": PROMPT});
        let resp = rig.responses(None, body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        ids.push(resp.headers()["x-request-id"].to_str().unwrap().to_owned());
        assert!(resp.text().await.unwrap().contains(ANSWER.trim()), "the answer went through");
    }
    let chat = rig
        .http
        .post(format!("{}/v1/chat/completions", rig.t.base))
        .bearer_auth(&rig.key)
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), StatusCode::OK);
    ids.push(chat.headers()["x-request-id"].to_str().unwrap().to_owned());
    chat.bytes().await.unwrap();
    // An upstream failure and a refused key are logged about too.
    rig.script(ACCESS_TOKEN, json!({"steps": [{"kind": "status", "status": 400}]})).await;
    let failed =
        rig.responses(None, json!({"model": MODEL, "store": false, "input": PROMPT})).send().await.unwrap();
    assert_eq!(failed.status(), StatusCode::BAD_REQUEST);
    ids.push(failed.headers()["x-request-id"].to_str().unwrap().to_owned());
    let refused = rig
        .http
        .post(format!("{}/v1/responses", rig.t.base))
        .bearer_auth(BOGUS_KEY)
        .json(&json!({"model": MODEL, "input": PROMPT}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    rig.t.records(4).await;

    let text = logs.text();
    assert!(text.lines().count() > 50, "a trace-level run writes plenty of lines");
    for secret in [PROMPT, ANSWER.trim(), ACCESS_TOKEN, BOGUS_KEY, rig.key.as_str(), common::ADMIN_PASSWORD] {
        assert!(!text.contains(secret), "the logs hold a secret, prompt or body: {secret}");
    }
    // Every line is JSON, and each call's end is logged with its request id.
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for id in &ids {
        let about: Vec<&Value> = lines.iter().filter(|l| l.to_string().contains(id.as_str())).collect();
        assert!(
            about.iter().any(|l| l["fields"]["message"] == "call finished"),
            "{id}: its end is logged with its id"
        );
        assert!(
            about.iter().any(|l| l["span"]["name"] == "call"),
            "{id}: lines inside its span carry the id"
        );
    }
}

/// At `RUST_LOG=warn` no call span is made (it is a debug span), yet a warning about a call
/// still names it: SubLane's own lines carry the request id as a field.
#[tokio::test(flavor = "current_thread")]
async fn a_warning_about_a_call_names_it_at_the_warn_level() {
    let logs = Captured::default();
    let o = Observability { log_format: LogFormat::Json, ..Observability::default() };
    let writer = logs.clone();
    let (subscriber, _t) = telemetry::subscriber(&o, EnvFilter::new("warn"), move || writer.clone()).unwrap();
    let _installed = tracing::subscriber::set_default(subscriber);

    let rig = Rig::start(&[("tok-warn", 1)], ON_THIS_THREAD).await;
    rig.script(
        "tok-warn",
        json!({"steps": [{"kind": "redirect", "location": "http://127.0.0.1:9/elsewhere"}]}),
    )
    .await;
    let resp =
        rig.responses(None, json!({"model": MODEL, "store": false, "input": "hi"})).send().await.unwrap();
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    resp.bytes().await.unwrap();
    let text = logs.text();
    let warning = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains("redirect")))
        .unwrap_or_else(|| panic!("the redirect warning: {text}"));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["fields"]["request_id"], id.as_str());
}

/// An OTLP/HTTP collector that keeps what it is sent.
async fn collector() -> (String, Arc<Mutex<Vec<ExportTraceServiceRequest>>>) {
    let got: Arc<Mutex<Vec<ExportTraceServiceRequest>>> = Arc::default();
    let keep = Arc::clone(&got);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let keep = Arc::clone(&keep);
            async move {
                assert_eq!(headers["content-type"], "application/x-protobuf");
                keep.lock().unwrap().push(ExportTraceServiceRequest::decode(body).unwrap());
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

#[tokio::test(flavor = "current_thread")]
async fn traces_export_one_span_per_call_with_its_children() {
    let (url, got) = collector().await;
    let o = Observability { otlp_endpoint: Some(url.parse().unwrap()), ..Observability::default() };
    let (subscriber, t) = telemetry::subscriber(&o, EnvFilter::new("warn"), std::io::sink).unwrap();
    let _installed = tracing::subscriber::set_default(subscriber);

    let mut rig = Rig::start(&[("tok-trace", 1)], ON_THIS_THREAD).await;
    let id = rig.ids[0];
    rig.limit(id, 1).await;
    // The second call waits for the first: its trace has a queue wait.
    rig.script("tok-trace", json!({"delay_ms": 300})).await;
    let first =
        tokio::spawn(rig.responses(None, json!({"model": MODEL, "store": false, "input": "a"})).send());
    rig.busy(id).await;
    let second =
        rig.responses(None, json!({"model": MODEL, "store": false, "input": "b"})).send().await.unwrap();
    let request_id = second.headers()["x-request-id"].to_str().unwrap().to_owned();
    second.bytes().await.unwrap();
    first.await.unwrap().unwrap().bytes().await.unwrap();
    rig.script("tok-trace", json!({})).await;
    // A WebSocket turn is a call too.
    {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};
        let url = format!("{}/v1/responses", rig.t.base.replace("http://", "ws://"));
        let mut req = url.into_client_request().unwrap();
        req.headers_mut().insert("authorization", format!("Bearer {}", rig.key).parse().unwrap());
        let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let frame = json!({"type": "response.create", "model": MODEL, "input": [], "store": false});
        socket.send(tungstenite::Message::text(frame.to_string())).await.unwrap();
        while let Some(Ok(msg)) = socket.next().await {
            if msg.to_text().unwrap_or_default().contains("\"response.completed\"") {
                break;
            }
        }
        socket.close(None).await.unwrap();
    }
    rig.t.records(3).await;

    let t = Arc::new(t);
    let mut spans = Vec::new();
    for _ in 0..100 {
        let flush = Arc::clone(&t);
        tokio::task::spawn_blocking(move || flush.flush()).await.unwrap();
        spans = got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect::<Vec<_>>();
        if spans.iter().filter(|s| s.name == "call").count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        s.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.clone())
            .map(|v| format!("{:?}", v.value))
    };
    let call = spans
        .iter()
        .find(|s| s.name == "call" && attr(s, "request_id").is_some_and(|v| v.contains(&request_id)))
        .unwrap_or_else(|| panic!("a call span with request_id {request_id}: {spans:#?}"));
    for child in ["queue_wait", "upstream", "record_write"] {
        assert!(
            spans
                .iter()
                .any(|s| s.name == child && s.parent_span_id == call.span_id && s.trace_id == call.trace_id),
            "{child} is a child of the call span"
        );
    }
    let upstream = spans.iter().find(|s| s.name == "upstream" && s.parent_span_id == call.span_id).unwrap();
    assert!(attr(upstream, "provider").is_some_and(|v| v.contains("codex")));
    let turn = spans
        .iter()
        .find(|s| s.name == "call" && attr(s, "operation").is_some_and(|v| v.contains("responses_ws")))
        .expect("a WebSocket turn's call span");
    assert!(attr(turn, "request_id").is_some_and(|v| v.contains("req_")));
    assert!(
        spans.iter().any(|s| s.name == "record_write" && s.parent_span_id == turn.span_id),
        "the turn's record hand-over is its child"
    );
}
