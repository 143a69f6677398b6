//! Operations: Prometheus `/metrics` (OPS-4), the overhead headers (BEY-4) and daily usage
//! (BEY-1) through the running server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::rig::{MODEL, Rig};
use prometheus_parse::{Scrape, Value as Sample};
use reqwest::{Method, StatusCode};
use serde_json::json;

async fn scrape(rig: &Rig, token: Option<&str>) -> (StatusCode, String) {
    let mut rb = rig.http.get(format!("{}/metrics", rig.t.base));
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let resp = rb.send().await.unwrap();
    let status = resp.status();
    if status == StatusCode::OK {
        assert_eq!(
            resp.headers()["content-type"],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
    }
    (status, resp.text().await.unwrap())
}

/// Parses the exposition; every line must be a comment or a well-formed sample.
fn parse(text: &str) -> Scrape {
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "bad sample: {line}"
        );
    }
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The value of the sample `name` whose labels include `labels` (0 when absent).
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
            _ => 0.0,
        })
        .sum()
}

async fn metrics(rig: &Rig) -> Scrape {
    let (status, text) = scrape(rig, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    parse(&text)
}

fn overhead_ms(resp: &reqwest::Response) -> f64 {
    resp.headers()["x-sublane-overhead-ms"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn metrics_parse_and_move_with_traffic() {
    let mut rig = Rig::start(&[("tok-a", 1)], &[]).await;
    let id = rig.ids[0];
    rig.limit(id, 1).await;
    let before = metrics(&rig).await;
    assert_eq!(value(&before, "sublane_account_concurrency_limit", &[("account_id", &id.to_string())]), 1.0);
    assert_eq!(
        value(&before, "sublane_account_info", &[("name", "tok-a"), ("provider", "codex")]),
        1.0,
        "accounts are named in an info metric"
    );

    for _ in 0..3 {
        let started = Instant::now();
        let resp =
            rig.responses(None, json!({"model": MODEL, "store": false, "input": "hi"})).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let total = started.elapsed().as_secs_f64() * 1000.0;
        let overhead = overhead_ms(&resp);
        assert!(overhead > 0.0 && overhead < total, "overhead {overhead} ms within the total {total} ms");
        assert!(resp.headers().get("x-sublane-queue-ms").is_none(), "no queue wait, no header");
        resp.bytes().await.unwrap();
    }
    // A streamed answer says its overhead in its headers too, before the first event.
    let started = Instant::now();
    let streamed =
        rig.responses(None, json!({"model": MODEL, "stream": true, "store": false, "input": "hi"}));
    let streamed = streamed.send().await.unwrap();
    let overhead = overhead_ms(&streamed);
    streamed.bytes().await.unwrap();
    assert!(overhead > 0.0 && overhead < started.elapsed().as_secs_f64() * 1000.0);
    let refused = rig
        .http
        .post(format!("{}/v1/responses", rig.t.base))
        .bearer_auth("sk-not-a-key")
        .json(&json!({"model": MODEL}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(
        refused.headers().contains_key("x-sublane-overhead-ms"),
        "every proxied answer says its overhead"
    );

    // records are written a few milliseconds later
    let mut after = metrics(&rig).await;
    for _ in 0..100 {
        if value(&after, "sublane_records_written_total", &[])
            >= value(&before, "sublane_records_written_total", &[]) + 4.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = metrics(&rig).await;
    }
    let moved =
        |name: &str, labels: &[(&str, &str)]| value(&after, name, labels) - value(&before, name, labels);
    assert_eq!(moved("sublane_admissions_total", &[("outcome", "admitted")]), 4.0);
    assert_eq!(
        moved("sublane_admissions_total", &[("outcome", "rejected"), ("code", "invalid_api_key")]),
        1.0
    );
    assert_eq!(moved("sublane_upstream_responses_total", &[("provider", "codex"), ("status", "200")]), 4.0);
    assert_eq!(
        moved(
            "sublane_request_duration_seconds_count",
            &[("operation", "responses"), ("outcome", "success")]
        ),
        4.0
    );
    assert_eq!(moved("sublane_upstream_duration_seconds_count", &[("provider", "codex")]), 4.0);
    assert_eq!(moved("sublane_first_output_seconds_count", &[("provider", "codex")]), 1.0);
    assert_eq!(moved("sublane_gateway_overhead_seconds_count", &[]), 5.0);
    assert_eq!(moved("sublane_records_written_total", &[]), 4.0);
    assert_eq!(value(&after, "sublane_records_dropped_total", &[]), 0.0);

    // A call that waits for the busy account carries its queue time, counted per pool.
    rig.script("tok-a", json!({"delay_ms": 600})).await;
    let slow =
        tokio::spawn(rig.responses(None, json!({"model": MODEL, "store": false, "input": "hi"})).send());
    rig.busy(id).await;
    let waiting = metrics(&rig).await;
    assert_eq!(value(&waiting, "sublane_account_in_flight", &[("account_id", &id.to_string())]), 1.0);
    let started = Instant::now();
    let queued =
        rig.responses(None, json!({"model": MODEL, "store": false, "input": "hi"})).send().await.unwrap();
    assert_eq!(queued.status(), StatusCode::OK);
    let total = started.elapsed().as_secs_f64() * 1000.0;
    let queue: f64 = queued.headers()["x-sublane-queue-ms"].to_str().unwrap().parse().unwrap();
    let overhead = overhead_ms(&queued);
    assert!(queue > 100.0 && queue < total, "queue {queue} ms of {total} ms");
    assert!(overhead + queue < total, "overhead {overhead} ms excludes the queue and the upstream");
    assert!(overhead < 200.0, "the 600 ms upstream delay is not overhead: {overhead} ms");
    slow.await.unwrap().unwrap().bytes().await.unwrap();
    let end = metrics(&rig).await;
    assert!(value(&end, "sublane_queue_wait_seconds_count", &[("pool_id", "1")]) >= 1.0);
    assert_eq!(value(&end, "sublane_queue_depth", &[("pool_id", "1")]), 0.0);
}

#[tokio::test]
async fn metric_labels_stay_bounded_whatever_models_clients_name() {
    let rig = Rig::start(&[("tok-b", 1)], &[]).await;
    let call =
        |model: String| rig.responses(None, json!({"model": model, "store": false, "input": "hi"})).send();
    // A few calls first, and time for what traffic starts on the side (a quota read).
    for n in 0..5 {
        call(format!("rand-model-warm-{n}")).await.unwrap().bytes().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let series = |s: &Scrape| s.samples.len();
    let one = metrics(&rig).await;
    for n in 0..40 {
        call(format!("rand-model-{n}-{}", rand::random::<u32>())).await.unwrap().bytes().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, text) = scrape(&rig, None).await;
    assert!(!text.contains("rand-model"), "no model id is a label value");
    assert_eq!(series(&parse(&text)), series(&one), "40 more models, not one more series");
}

#[tokio::test]
async fn metrics_need_the_token_when_set_and_can_be_switched_off() {
    let rig = Rig::start(&[("tok-c", 1)], &[("SUBLANE_METRICS_TOKEN", "scrape-secret-1")]).await;
    assert_eq!(scrape(&rig, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(scrape(&rig, Some("scrape-secret-2")).await.0, StatusCode::UNAUTHORIZED);
    let (status, text) = scrape(&rig, Some("scrape-secret-1")).await;
    assert_eq!(status, StatusCode::OK);
    parse(&text);

    let off = Rig::start(&[("tok-d", 1)], &[("SUBLANE_METRICS", "false")]).await;
    assert_eq!(scrape(&off, None).await.0, StatusCode::NOT_FOUND);
    let resp =
        off.responses(None, json!({"model": MODEL, "store": false, "input": "hi"})).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(overhead_ms(&resp) >= 0.0, "the overhead header does not depend on metrics");
}

#[tokio::test]
async fn usage_reports_follow_traffic_and_match_their_csv() {
    let mut rig = Rig::start(&[("tok-e", 1)], &[("SUBLANE_TIME_ZONE", "UTC")]).await;
    for model in [MODEL, MODEL, "gpt-5.1-codex-mini"] {
        let resp =
            rig.responses(None, json!({"model": model, "store": false, "input": "hi"})).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.bytes().await.unwrap();
    }
    rig.t.records(3).await;
    let (status, report) = rig.admin.call(Method::GET, "/api/usage?days=30", None).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["days"], 30);
    assert_eq!(report["zone"], "UTC");
    assert_eq!(report["series"].as_array().unwrap().len(), 30);
    assert_eq!(report["totals"]["requests"], 3);
    assert_eq!(report["by_model"][0]["model"], MODEL);
    assert_eq!(report["by_model"][0]["totals"]["requests"], 2);
    // This server runs on the system clock.
    #[allow(clippy::disallowed_methods)]
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(report["series"][29]["day"], today.as_str());

    let (status, mine) = rig.admin.call(Method::GET, "/api/me/usage?model=gpt-5.1-codex-mini", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mine["totals"]["requests"], 1);
    assert!(mine["choices"]["accounts"].as_array().unwrap().is_empty(), "no accounts in a personal view");

    let (status, body) = rig.admin.call(Method::GET, "/api/usage?days=12", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let csv = rig.admin.request(Method::GET, "/api/usage.csv?days=30").send().await.unwrap();
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = csv.text().await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0].split(',').count(), 13);
    assert_eq!(lines.len(), 1 + report["rows"].as_array().unwrap().len());
    for (line, row) in lines[1..].iter().zip(report["rows"].as_array().unwrap()) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!((cells[0], cells[1]), (row["day"].as_str().unwrap(), row["model"].as_str().unwrap()));
        assert_eq!(cells[2], row["totals"]["requests"].to_string());
    }

    // Another member sees only their own usage, and none of the workspace's.
    let (mut member, _) = rig.t.member(&rig.admin, "usage-bob").await;
    let (status, theirs) = member.call(Method::GET, "/api/me/usage?days=90", None).await;
    assert_eq!(status, StatusCode::OK);
    // a form's empty fields, as the README writes the URL, are no filter
    let (status, empty) = member.call(Method::GET, "/api/me/usage?days=7&key_id=&pool_id=", None).await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(theirs["totals"]["requests"], 0);
    assert!(theirs["choices"]["models"].as_array().unwrap().is_empty(), "no one else's models as choices");
    for path in ["/api/usage", "/api/usage.csv"] {
        let resp = member.request(Method::GET, path).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{path}");
    }
    // A member's filter for someone else is ignored: the scope is theirs.
    let (_, still) = member.call(Method::GET, "/api/me/usage?user_id=1", None).await;
    assert_eq!(still["totals"]["requests"], 0);

    // Signed out, neither report is there.
    let anonymous = rig.t.client();
    let resp = anonymous.request(Method::GET, "/api/me/usage.csv").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}

/// A WebSocket turn is a call like any other: admitted, its upstream handshake answered, its
/// duration and its day's usage counted.
#[tokio::test]
async fn websocket_turns_are_counted() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

    let mut rig = Rig::start(&[("tok-ws", 1)], &[("SUBLANE_TIME_ZONE", "UTC")]).await;
    let before = metrics(&rig).await;
    let url = format!("{}/v1/responses", rig.t.base.replace("http://", "ws://"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {}", rig.key).parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    for _ in 0..2 {
        let frame = json!({"type": "response.create", "model": MODEL, "input": [], "store": false});
        socket.send(tungstenite::Message::text(frame.to_string())).await.unwrap();
        loop {
            let msg =
                tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
            if let tungstenite::Message::Text(t) = msg
                && t.as_str().contains("\"response.completed\"")
            {
                break;
            }
        }
    }
    socket.close(None).await.unwrap();
    rig.t.records(2).await;
    let after = metrics(&rig).await;
    let moved =
        |name: &str, labels: &[(&str, &str)]| value(&after, name, labels) - value(&before, name, labels);
    assert_eq!(moved("sublane_admissions_total", &[("outcome", "admitted")]), 2.0);
    assert_eq!(moved("sublane_upstream_responses_total", &[("provider", "codex"), ("status", "101")]), 1.0);
    assert_eq!(
        moved(
            "sublane_request_duration_seconds_count",
            &[("operation", "responses_ws"), ("outcome", "success")]
        ),
        2.0
    );
    assert_eq!(moved("sublane_upstream_duration_seconds_count", &[("provider", "codex")]), 2.0);
    let (status, usage) = rig.admin.call(Method::GET, "/api/me/usage", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(usage["totals"]["requests"], 2);
}
