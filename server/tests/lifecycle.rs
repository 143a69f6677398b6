//! The real `sublane` binary under stress that only a process shows: a client that stops reading
//! a stream, and a graceful shutdown (OPS-3) with a long stream, an idle WebSocket and a stalled
//! reader all open at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sublane::mock_upstream::MockUpstream;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, Command},
};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

const TOKEN: &str = "sk-proj-life";

/// The binary, started on a free port against the in-process mock.
struct Process {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
    mock: MockUpstream,
    key: String,
    account_id: i64,
}

impl Process {
    async fn start(env: &[(&str, &str)]) -> Process {
        let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (child, base) = Self::launch(&dir, &mock, env).await;
        let mut admin = common::Client::new(&base);
        admin.sign_in("admin", common::ADMIN_PASSWORD).await;
        let (status, account) = admin
            .call(
                Method::POST,
                "/api/accounts",
                Some(json!({"provider": "openai_api", "name": "life", "pool_ids": [1],
                            "credentials": {"kind": "api_key", "api_key": TOKEN}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{account}");
        let account_id = account["id"].as_i64().unwrap();
        let (_, key) = admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "life"}))).await;
        Process { child, base, dir, mock, key: key["secret"].as_str().unwrap().to_owned(), account_id }
    }

    /// The binary on `dir`, once it announces its address.
    async fn launch(dir: &tempfile::TempDir, mock: &MockUpstream, env: &[(&str, &str)]) -> (Child, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sublane"));
        cmd.env("SUBLANE_ADDR", "127.0.0.1:0")
            .env("SUBLANE_DATA_DIR", dir.path())
            .env("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD)
            .envs(mock.env())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = loop {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("the binary announces its address")
                .unwrap()
                .expect("stdout open");
            if let Some(url) = line.strip_prefix("SubLane is serving on ") {
                break url.trim().to_owned();
            }
        };
        (child, base)
    }

    /// `kill -9`, then the binary again on the same data directory.
    async fn crash_and_restart(&mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        let (child, base) = Self::launch(&self.dir, &self.mock, &[]).await;
        (self.child, self.base) = (child, base);
    }

    async fn script(&self, script: Value) {
        self.mock.state.set_script(TOKEN, serde_json::from_value(script).unwrap());
    }

    /// A streaming call from a client that reads nothing after sending it.
    async fn stalled_reader(&self) -> tokio::net::TcpStream {
        let host = self.base.trim_start_matches("http://");
        let body = json!({"model": "gpt-5.1-codex", "stream": true, "input": "hi"}).to_string();
        let head = format!(
            "POST /v1/responses HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            self.key,
            body.len()
        );
        let mut tcp = tokio::net::TcpStream::connect(host).await.unwrap();
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp
    }

    fn records(&self) -> Vec<Value> {
        read_records(&self.dir.path().join("sublane.db"))
    }

    async fn runtime_in_flight(&self) -> u64 {
        let mut admin = common::Client::new(&self.base);
        admin.sign_in("admin", common::ADMIN_PASSWORD).await;
        let (_, runtime) = admin.call(Method::GET, "/api/accounts/runtime", None).await;
        runtime
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == self.account_id)
            .map_or(0, |a| a["in_flight"].as_u64().unwrap())
    }

    fn terminate(&self) {
        let pid = self.child.id().unwrap().to_string();
        let ok = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(ok.success());
    }
}

/// The records in a database file, read with sqlx on a runtime of its own.
fn read_records(db: &std::path::Path) -> Vec<Value> {
    let url = format!("sqlite://{}?mode=ro", db.display());
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
                let rows: Vec<String> = sqlx::query_scalar(
                    "SELECT json_object('outcome', outcome, 'error_code', error_code, 'operation', operation)
                     FROM request_records ORDER BY id",
                )
                .fetch_all(&pool)
                .await
                .unwrap();
                pool.close().await;
                rows.iter().map(|r| serde_json::from_str(r).unwrap()).collect()
            })
        })
        .join()
        .unwrap()
    })
}

/// Polls `check` every 50 ms for up to `within`.
async fn eventually<F: FnMut() -> Fut, Fut: std::future::Future<Output = bool>>(
    within: Duration,
    mut check: F,
) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A client that stops reading cannot pin capacity: after the write deadline the stream ends,
/// the upstream is dropped, the slot comes back, and the record says why.
#[tokio::test]
async fn a_client_that_stops_reading_frees_its_slot_after_the_write_deadline() {
    let p = Process::start(&[("SUBLANE_CLIENT_WRITE_TIMEOUT", "1s")]).await;
    // A fast, large stream: socket buffers fill within moments.
    p.script(json!({"deltas": 20000, "delta_text": "x".repeat(2048)})).await;
    let _stalled = p.stalled_reader().await;
    assert!(eventually(Duration::from_secs(5), || async { p.runtime_in_flight().await == 1 }).await);
    let freed = eventually(Duration::from_secs(15), || async { p.runtime_in_flight().await == 0 }).await;
    assert!(freed, "the stalled stream still holds its account slot");
    let ok = eventually(Duration::from_secs(5), || async {
        p.records().iter().any(|r| r["error_code"] == "client_stalled" && r["outcome"] == "cancelled")
    })
    .await;
    assert!(ok, "records: {:?}", p.records());
    // The account serves the next caller.
    p.script(json!({})).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/responses", p.base))
        .bearer_auth(&p.key)
        .json(&json!({"model": "gpt-5.1-codex", "stream": false, "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

/// The same over a WebSocket: a client that stops reading mid-turn is given up after the write
/// deadline (the send that waits for it is the only one that builds timers), its slot comes
/// back and the turn is recorded as `client_stalled`.
#[tokio::test]
async fn a_websocket_client_that_stops_reading_frees_its_slot_after_the_write_deadline() {
    let p = Process::start(&[("SUBLANE_CLIENT_WRITE_TIMEOUT", "1s")]).await;
    p.script(json!({"deltas": 20000, "delta_text": "x".repeat(2048)})).await;
    let mut req =
        format!("{}/v1/responses", p.base.replace("http://", "ws://")).into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {}", p.key).parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    // (nothing read from here on)
    assert!(eventually(Duration::from_secs(5), || async { p.runtime_in_flight().await == 1 }).await);
    let freed = eventually(Duration::from_secs(15), || async { p.runtime_in_flight().await == 0 }).await;
    assert!(freed, "the stalled turn still holds its account slot");
    let ok = eventually(Duration::from_secs(5), || async {
        p.records().iter().any(|r| {
            (r["operation"].as_str(), r["outcome"].as_str(), r["error_code"].as_str())
                == (Some("responses_ws"), Some("cancelled"), Some("client_stalled"))
        })
    })
    .await;
    assert!(ok, "records: {:?}", p.records());
    drop(ws);
}

/// OPS-3 on the real binary: SIGTERM stops admitting (503 with `Connection: close`), ends a
/// queued request with 503, closes an idle WebSocket at once, lets a stream and a WebSocket turn
/// run for the grace period, then cuts everything (a stalled reader included), records what was
/// cut, and exits within grace + 5 s.
#[tokio::test]
async fn sigterm_drains_then_cuts_and_the_process_exits_in_time() {
    let grace = Duration::from_secs(2);
    let mut p = Process::start(&[("SUBLANE_SHUTDOWN_GRACE", "2s")]).await;
    let mut admin = common::Client::new(&p.base);
    admin.sign_in("admin", common::ADMIN_PASSWORD).await;
    let (status, _) = admin
        .call(
            Method::PATCH,
            &format!("/api/accounts/{}/limits", p.account_id),
            Some(json!({"max_concurrency": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // Every answer is long: 200 deltas, 100 ms apart (20 s), each delta 4 KiB.
    p.script(json!({"deltas": 200, "delta_delay_ms": 100, "delta_text": "y".repeat(4096)})).await;
    let http = reqwest::Client::new();
    let call = || {
        http.post(format!("{}/v1/responses", p.base))
            .bearer_auth(&p.key)
            .json(&json!({"model": "gpt-5.1-codex", "stream": true, "input": "hi"}))
            .send()
    };
    let reading = call().await.unwrap();
    assert_eq!(reading.status(), StatusCode::OK);
    let mut reading = reading.bytes_stream();
    let reader = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(Ok(b)) = reading.next().await {
            n += b.len();
        }
        n
    });
    let _stalled = p.stalled_reader().await;
    let ws = || {
        let mut req =
            format!("{}/v1/responses", p.base.replace("http://", "ws://")).into_client_request().unwrap();
        req.headers_mut().insert("authorization", format!("Bearer {}", p.key).parse().unwrap());
        tokio_tungstenite::connect_async(req)
    };
    let (mut idle_ws, _) = ws().await.unwrap();
    let (mut busy_ws, _) = ws().await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    busy_ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || async { p.runtime_in_flight().await == 3 }).await);
    // The account is full: the next call waits in the queue.
    let queued = tokio::spawn(call());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A client that has sent half a request head: it holds its connection until the end.
    let addr = p.base.trim_start_matches("http://").to_owned();
    let mut half = tokio::net::TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"POST /v1/responses HTTP/1.1\r\nhost: sublane\r\n").await.unwrap();

    let signalled = Instant::now();
    p.terminate();
    let queued = tokio::time::timeout(Duration::from_secs(2), queued).await.expect("the waiter ends at once");
    let queued = queued.unwrap().unwrap();
    assert_eq!(queued.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = queued.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_shutting_down");
    // New calls are refused with 503 and the connection closes.
    let resp = call().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["connection"], "close");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_shutting_down");
    let health = http.get(format!("{}/healthz", p.base)).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The idle WebSocket is closed at once with "going away".
    assert_eq!(close_code(&mut idle_ws, Duration::from_secs(2)).await, Some(1001));
    // The busy one runs its turn until the hard stop, is told so, then closed.
    let mut cut_event = None;
    let code = tokio::time::timeout(grace + Duration::from_secs(3), async {
        loop {
            match busy_ws.next().await {
                Some(Ok(tungstenite::Message::Text(t))) => {
                    let e: Value = serde_json::from_str(t.as_str()).unwrap();
                    if e["type"] == "error" {
                        cut_event = Some(e);
                    }
                }
                Some(Ok(tungstenite::Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .expect("the busy WebSocket is closed after the hard stop");
    assert!(signalled.elapsed() >= grace, "the turn ran for the grace period");
    assert_eq!(cut_event.expect("an error event")["error"]["code"], "server_shutting_down");
    assert_eq!(code, Some(1001));
    // Once the shutdown stops serving, the port refuses new clients at once: not only when the
    // half-sent request is given up on (2 s later) and the process ends. None waits unanswered in
    // the backlog meanwhile.
    let refused_at = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tokio::net::TcpStream::connect(&addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break Instant::now(),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("the port stops accepting");

    let status = tokio::time::timeout(grace + Duration::from_secs(5), p.child.wait())
        .await
        .expect("the process exits within grace + 5 s")
        .unwrap();
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}");
    let open_after = refused_at.elapsed();
    assert!(open_after >= Duration::from_secs(1), "refused only {open_after:?} before the end");
    assert!(took >= grace, "the stream got its grace period ({took:?})");
    let got = reader.await.unwrap();
    assert!(got > 0 && got < 200 * 4096, "the long stream was cut, after some output ({got} bytes)");
    let records = p.records();
    let cut = records
        .iter()
        .filter(|r| r["outcome"] == "cancelled" && r["error_code"] == "server_shutdown")
        .count();
    assert_eq!(cut, 3, "both streams and the WebSocket turn recorded as cut by the shutdown: {records:?}");
    assert!(records.iter().any(|r| r["outcome"] == "rejected" && r["error_code"] == "server_shutting_down"));
}

/// The close code a WebSocket receives within `within` (`None`: closed without one).
async fn close_code<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, within: Duration) -> Option<u16>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(within, async {
        loop {
            match ws.next().await {
                Some(Ok(tungstenite::Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .expect("the WebSocket is closed in time")
}

/// BUD-2: budget usage is written in the transaction of the records it counts, so a `kill -9`
/// keeps exactly what was written: after the restart the count equals the records (never counted
/// twice, nothing written lost), and counting goes on from there.
#[tokio::test]
async fn budget_usage_survives_kill_9_without_double_counting() {
    let mut p = Process::start(&[]).await;
    let mut admin = common::Client::new(&p.base);
    admin.sign_in("admin", common::ADMIN_PASSWORD).await;
    let policy = json!({"subject": "ws", "metric": "requests", "window": "total", "limit": 100});
    let (status, body) = admin.call(Method::POST, "/api/budgets", Some(policy)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let http = reqwest::Client::new();
    let secret = p.key.clone();
    let call = |base: String| {
        let req = http
            .post(format!("{base}/v1/responses"))
            .bearer_auth(&secret)
            .json(&json!({"model": "gpt-5.1-codex", "input": "hi"}));
        async move { req.send().await.unwrap().status() }
    };
    for _ in 0..3 {
        assert_eq!(call(p.base.clone()).await, StatusCode::OK);
    }
    assert!(eventually(Duration::from_secs(10), || async { p.records().len() == 3 }).await);

    p.crash_and_restart().await;
    let mut admin = common::Client::new(&p.base);
    admin.sign_in("admin", common::ADMIN_PASSWORD).await;
    let (_, quota) = admin.call(Method::GET, "/api/me/quota", None).await;
    assert_eq!(quota[0]["used"], 3.0, "{quota}");
    assert_eq!(call(p.base.clone()).await, StatusCode::OK);
    let mut used = Value::Null;
    for _ in 0..100 {
        used = admin.call(Method::GET, "/api/me/quota", None).await.1[0]["used"].clone();
        if used == 4.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(used, 4.0);
}
