//! The request path against strict upstreams and hostile clients (the hardening issue): one of
//! each singleton header on every provider path, no redirects followed, no billing selectors or
//! undefined query parameters forwarded, absurd upstream numbers clamped, bodies and messages
//! bounded before any work, junk model ids refused, WebSocket sessions held to the HTTP rules,
//! sign-in throttled, rotation kept while people browse, and cookies `Secure` behind an https proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{collections::HashMap, time::Duration};

use common::{Client, TestServer};
use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sublane::mock_upstream::MockUpstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

/// Upstream credentials, one simulated account per provider.
const CODEX: &str = "codex-at-h";
const OPENAI: &str = "sk-proj-h";
const CLAUDE: &str = "sk-ant-oat-h";
const ANTHROPIC: &str = "sk-ant-api-h";
const ANTIGRAVITY: &str = "ya29.h";

/// SubLane in front of the strict mock, with one pool (and one key) per provider.
struct Rig {
    t: TestServer,
    mock: MockUpstream,
    admin: Client,
    http: reqwest::Client,
    /// Gateway key per provider name.
    keys: HashMap<&'static str, String>,
    /// Account id per provider name.
    accounts: HashMap<&'static str, i64>,
}

impl Rig {
    /// Signs in as the admin with `password`, from the server's own origin.
    async fn sign_in(&self, password: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/api/session", self.t.base))
            .header("origin", &self.t.base)
            .json(&json!({"username": "admin", "password": password}))
            .send()
            .await
            .unwrap()
    }

    async fn start(extra_env: &[(&str, &str)]) -> Rig {
        let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let urls = mock.env();
        // The first value of a name wins: the test's own settings come first.
        let mut env = extra_env.to_vec();
        env.push(("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD));
        env.extend(urls.iter().map(|(k, v)| (*k, v.as_str())));
        let t = TestServer::start_with(&env).await;
        let mut admin = t.admin().await;
        let mut keys = HashMap::new();
        let mut accounts = HashMap::new();
        for (provider, credentials) in [
            ("codex", json!({"kind": "oauth", "access_token": CODEX, "provider_account_id": "acct-h"})),
            ("openai_api", json!({"kind": "api_key", "api_key": OPENAI})),
            ("claude", json!({"kind": "oauth", "access_token": CLAUDE})),
            ("anthropic_api", json!({"kind": "api_key", "api_key": ANTHROPIC})),
            (
                "antigravity",
                json!({"kind": "oauth", "access_token": ANTIGRAVITY, "provider_account_id": "proj-h"}),
            ),
        ] {
            let (status, pool) = admin
                .call(Method::POST, "/api/pools", Some(json!({"name": provider, "member_ids": [1]})))
                .await;
            assert_eq!(status, StatusCode::CREATED, "{pool}");
            let pool_id = pool["id"].as_i64().unwrap();
            let (status, account) = admin
                .call(
                    Method::POST,
                    "/api/accounts",
                    Some(json!({"provider": provider, "name": provider, "pool_ids": [pool_id], "credentials": credentials})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{account}");
            accounts.insert(provider, account["id"].as_i64().unwrap());
            let (status, key) = admin
                .call(Method::POST, "/api/me/keys", Some(json!({"name": provider, "pool_id": pool_id})))
                .await;
            assert_eq!(status, StatusCode::CREATED, "{key}");
            keys.insert(provider, key["secret"].as_str().unwrap().to_owned());
        }
        Rig { t, mock, admin, http: reqwest::Client::new(), keys, accounts }
    }

    fn post(&self, provider: &str, path: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{path}", self.t.base)).bearer_auth(&self.keys[provider])
    }

    async fn script(&self, credential: &str, script: Value) {
        let url = format!("{}/__mock/accounts/{credential}", self.mock.url());
        let r = self.http.put(url).json(&script).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }

    /// The `n` calls so far were all ended by the stream idle timeout.
    async fn all_cut_by_the_idle_timeout(&self, n: usize) {
        for row in self.t.records(n).await {
            let ending = (row["outcome"].as_str(), row["error_code"].as_str());
            assert_eq!(ending, (Some("error"), Some("stream_idle_timeout")), "{row}");
        }
    }

    fn ws_request(&self, provider: &str) -> tungstenite::handshake::client::Request {
        let url = format!("{}/v1/responses", self.t.base.replace("http://", "ws://"));
        let mut req = url.into_client_request().unwrap();
        req.headers_mut().insert("authorization", format!("Bearer {}", self.keys[provider]).parse().unwrap());
        req
    }
}

/// A streamed answer's body as far as it went, which must end (or break off) `within`.
async fn body_ended_within(mut resp: reqwest::Response, within: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            body.extend_from_slice(&chunk);
        }
    };
    tokio::time::timeout(within, read).await.expect("the stream ended in time");
    body
}

fn responses(stream: bool) -> Value {
    json!({"model": "gpt-5.1-codex", "stream": stream, "store": false, "input": "hi"})
}

fn messages(stream: bool) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
}

fn gemini() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
}

/// The next text frame of a WebSocket, as JSON.
async fn next_event(
    ws: &mut tokio_tungstenite::WebSocketStream<impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>,
) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap();
        if let tungstenite::Message::Text(t) = msg {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// A client sends what real clients (and hostile ones) send: its own Content-Type, twice; a user
/// agent, twice; billing selectors. Every provider path still puts exactly one of each singleton
/// header on the wire (the strict mock refuses anything else with a 400), and neither billing
/// selector nor an undefined query parameter reaches the upstream.
#[tokio::test]
async fn every_provider_path_passes_a_strict_upstream_whatever_the_client_sends() {
    let r = Rig::start(&[]).await;
    let calls: &[(&str, &str, Value)] = &[
        ("codex", "/v1/responses", responses(true)),
        ("codex", "/v1/responses", responses(false)),
        ("codex", "/v1/responses/compact", json!({"model": "gpt-5.1-codex", "input": []})),
        ("openai_api", "/v1/responses", responses(false)),
        ("openai_api", "/v1/responses", responses(true)),
        ("claude", "/v1/messages?beta=true", messages(true)),
        ("claude", "/v1/messages/count_tokens", messages(false)),
        ("anthropic_api", "/v1/messages?beta=true&organization=evil", messages(false)),
        ("anthropic_api", "/v1/messages", messages(true)),
        ("antigravity", "/v1beta/models/gemini-3.1-pro-low:generateContent", gemini()),
        ("antigravity", "/v1beta/models/gemini-3.1-pro-low:streamGenerateContent?alt=sse", gemini()),
    ];
    for (provider, path, body) in calls {
        let resp = r
            .post(provider, path)
            .header("content-type", "application/json")
            .header("content-type", "application/json; charset=utf-8")
            .header("user-agent", "client/1")
            .header("user-agent", "client/2")
            .header("openai-organization", "org-someone-else")
            .header("openai-project", "proj-someone-else")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{provider} {path}: {text}");
    }
    for credential in [CODEX, OPENAI, CLAUDE, ANTHROPIC, ANTIGRAVITY] {
        let seen = r.mock.state.calls(credential);
        assert!(!seen.is_empty(), "{credential} was called");
        for call in seen {
            assert_eq!(call.headers.get("content-type").map(String::as_str), Some("application/json"));
            assert_eq!(
                call.headers.get("user-agent").map(String::as_str).filter(|ua| ua.starts_with("client/")),
                match credential {
                    ANTIGRAVITY => None, // Antigravity always gets SubLane's own agent
                    _ => Some("client/1"),
                }
            );
            for gone in ["openai-organization", "openai-project"] {
                assert!(!call.headers.contains_key(gone), "{gone} reached {credential}");
            }
        }
    }
    let anthropic = r.mock.state.calls(ANTHROPIC);
    assert_eq!(anthropic[0].query.as_deref(), Some("beta=true"), "only the route's own parameter");
    assert_eq!(anthropic[1].query, None);

    // The WebSocket handshake is held to the same wire.
    let mut req = r.ws_request("codex");
    req.headers_mut().append("user-agent", "client/1".parse().unwrap());
    req.headers_mut().append("user-agent", "client/2".parse().unwrap());
    req.headers_mut().insert("openai-organization", "org-someone-else".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    loop {
        let e = next_event(&mut ws).await;
        assert_ne!(e["type"], "error", "{e}");
        if e["type"] == "response.completed" {
            break;
        }
    }
    let upgrade = r.mock.state.calls(CODEX).pop().unwrap();
    assert_eq!(upgrade.method, "GET");
    assert!(!upgrade.headers.contains_key("openai-organization"));
}

/// A redirect would carry the account's credential and the body to another host: it is an
/// upstream error, and the upstream is called once.
#[tokio::test]
async fn an_upstream_redirect_is_an_error_and_never_followed() {
    let r = Rig::start(&[]).await;
    let elsewhere = format!("{}/v1/responses", r.mock.url());
    r.script(OPENAI, json!({"steps": [{"kind": "redirect", "location": elsewhere}]})).await;
    let resp = r.post("openai_api", "/v1/responses").json(&responses(false)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_redirected");
    assert_eq!(r.mock.state.calls(OPENAI).len(), 1);
    assert_eq!(r.mock.state.calls("anonymous").len(), 0, "nothing reached the redirect target");
}

/// Upstream numbers never crash a request: any Retry-After is clamped (1..=3600 s) and the client
/// is told the wait SubLane enforces (an invalid one, unreadable or negative, means the 5 s
/// fallback: CD-1).
#[tokio::test]
async fn absurd_retry_after_values_are_clamped_never_a_crash() {
    let mut r = Rig::start(&[]).await;
    let id = r.accounts["openai_api"];
    for (sent, forwarded) in [
        ("1e20", Some("3600")),
        ("-5", Some("5")),
        ("NaN", Some("5")),
        ("Fri, 31 Dec 9999 23:59:59 GMT", Some("3600")),
        ("Sun, 06 Nov 1994 08:49:37 GMT", Some("1")),
        ("soon", Some("5")),
        ("2.5", Some("3")),
    ] {
        r.script(OPENAI, json!({"steps": [{"kind": "status", "status": 429, "retry_after": sent}]})).await;
        let resp = r.post("openai_api", "/v1/responses").json(&responses(false)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "Retry-After {sent:?}");
        let got = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(got.as_deref(), forwarded, "Retry-After {sent:?}");
        let (status, _) =
            r.admin.call(Method::POST, &format!("/api/accounts/{id}/clear-cooldown"), Some(json!({}))).await;
        assert_eq!(status, StatusCode::OK);
    }
}

/// Writes raw request bytes and returns the status line of the answer, or `None` if none came
/// within `wait`.
async fn raw_status(base: &str, head: String, wait: Duration) -> Option<String> {
    let addr = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(wait, tcp.read(&mut buf)).await.ok()?.ok()?;
    String::from_utf8_lossy(&buf[..n]).lines().next().map(str::to_owned)
}

/// Limits before any work: the proxy checks the key from the headers before reading a body (a
/// bad key is refused while a body over 64 KiB has not even been sent), refuses a declared body over its
/// limit at once, and the API and the web app's server functions accept only small bodies, also
/// before signing in.
#[tokio::test]
async fn bodies_are_bounded_and_keys_checked_before_any_body_is_read() {
    let r = Rig::start(&[]).await;
    let host = r.t.base.trim_start_matches("http://").to_owned();
    let head = |key: &str, length: usize| {
        format!(
            "POST /v1/responses HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        )
    };
    let status = raw_status(&r.t.base, head("sk-sl-wrong", 10_000_000), Duration::from_secs(5)).await;
    assert!(status.as_deref().is_some_and(|s| s.contains(" 401 ")), "refused before the body: {status:?}");
    let status =
        raw_status(&r.t.base, head(&r.keys["codex"], 40 * 1024 * 1024), Duration::from_secs(5)).await;
    assert!(status.as_deref().is_some_and(|s| s.contains(" 413 ")), "over the limit at once: {status:?}");

    let big = "x".repeat(1024 * 1024);
    let form = format!("username=admin&password={big}");
    let resp = r
        .http
        .post(format!("{}/rpc/login", r.t.base))
        .header("origin", &r.t.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE, "anonymous server-function calls are small");
    let resp = r.sign_in(&big).await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(resp.headers()["connection"], "close", "the unread rest of the body ends the connection");
    // a client still sending when the answer comes reads it, not a broken pipe: the closing
    // connection reads on what it sends (more than any socket buffer holds here)
    for _ in 0..3 {
        let resp = r.sign_in(&"x".repeat(24 * 1024 * 1024)).await;
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
    // a body streamed without a length is cut at the same limit
    let chunks = futures_util::stream::iter((0..64).map(|_| Ok::<_, std::io::Error>(vec![b' '; 32 * 1024])));
    let resp = r
        .http
        .post(format!("{}/rpc/login", r.t.base))
        .header("origin", &r.t.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await;
    assert!(resp.is_err() || !resp.unwrap().status().is_success());
    // and the small one still works
    let resp = r.sign_in(common::ADMIN_PASSWORD).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

/// A request head may take 32 KiB, nginx's default for all of a request's header lines: one
/// close to it is served, and one just past it is answered 431 before any work. A body far larger
/// than that still goes upstream whole, and a large answer comes back whole: each is read in
/// pieces of about that size, since hyper keeps a connection's grown read buffer for as long as
/// the connection is open, every stream it carries included.
#[tokio::test]
async fn request_heads_are_bounded_at_32_kib_and_large_bodies_still_pass_whole() {
    let r = Rig::start(&[]).await;
    let host = r.t.base.trim_start_matches("http://").to_owned();
    let head = |padding: usize| {
        format!("GET /healthz HTTP/1.1\r\nhost: {host}\r\nx-padding: {}\r\n\r\n", "p".repeat(padding))
    };
    let status = raw_status(&r.t.base, head(30 * 1024), Duration::from_secs(5)).await;
    assert!(status.as_deref().is_some_and(|s| s.contains(" 200 ")), "a 30 KiB head is served: {status:?}");
    let status = raw_status(&r.t.base, head(33 * 1024), Duration::from_secs(5)).await;
    assert!(status.as_deref().is_some_and(|s| s.contains(" 431 ")), "a 33 KiB head is refused: {status:?}");

    let mut body = responses(true);
    body["input"] = json!("x".repeat(3 * 1024 * 1024));
    let sent = serde_json::to_vec(&body).unwrap();
    let resp = r.post("openai_api", "/v1/responses").json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let answer = resp.text().await.unwrap();
    assert!(answer.contains("response.completed"), "the stream ran to its end");
    let calls = r.mock.state.calls(OPENAI);
    assert_eq!(calls.last().unwrap().body_len, sent.len(), "the whole body went upstream");

    // and a large answer comes back whole (the upstream connection's buffer is bounded the same way)
    let text = "y".repeat(1024);
    r.script(OPENAI, json!({"deltas": 3 * 1024, "delta_text": text})).await;
    let resp = r.post("openai_api", "/v1/responses").json(&responses(false)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    let said = answer["output"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(said.len(), 3 * 1024 * 1024, "the whole answer came back");
}

/// A connection has `SUBLANE_CLIENT_HEADER_TIMEOUT` to send each request head, counted from its
/// start and from its previous answer's end, so no client holds a connection (a file and its
/// buffers) open for ever: one that sends nothing, or sends its head a byte at a time, is closed
/// without an answer, and so is a keep-alive connection left idle. The deadline never runs while
/// a call is read or answered: a body sent slower than it, an upstream slow to answer, a stream
/// and a WebSocket turn that take longer run to their end, a connection used more often than the
/// deadline stays open, and a WebSocket session outlives it.
#[tokio::test]
async fn each_request_head_has_a_deadline_and_answers_have_none() {
    const DEADLINE: Duration = Duration::from_millis(600);
    let r = Rig::start(&[("SUBLANE_CLIENT_HEADER_TIMEOUT", "600ms")]).await;
    let addr = r.t.base.trim_start_matches("http://").to_owned();
    let healthz = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\n");
    // How long until the server closed `tcp`, counted from `since`, and what it sent until then.
    async fn closed(tcp: &mut tokio::net::TcpStream, since: std::time::Instant) -> (Duration, Vec<u8>) {
        let (mut got, mut buf) = (Vec::new(), [0u8; 1024]);
        loop {
            let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf));
            match read.await.expect("the server closes the connection") {
                Ok(0) | Err(_) => return (since.elapsed(), got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    // a connection that sends nothing
    let since = std::time::Instant::now();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (after, got) = closed(&mut tcp, since).await;
    assert!(got.is_empty() && after >= DEADLINE, "closed after {after:?}, unanswered: {got:?}");

    // a head sent a byte every 50 ms (about four seconds in all): closed before it is whole
    let since = std::time::Instant::now();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let slow = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nx-slow: {}\r\n\r\n", "s".repeat(20));
    let writer = tokio::spawn(async move {
        for byte in slow.bytes() {
            if write.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut got = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), read.read_to_end(&mut got)).await.unwrap();
    let after = since.elapsed();
    assert!(n.is_err() || got.is_empty(), "no answer to a head that never came whole: {got:?}");
    assert!(after >= DEADLINE && after < Duration::from_secs(2), "closed after {after:?}");
    writer.abort();

    // a keep-alive connection: served as long as each request comes within the deadline of the
    // previous answer (here for about twice the deadline in all), then closed once it stays idle
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    for _ in 0..8 {
        tcp.write_all(healthz.as_bytes()).await.unwrap();
        assert!(read_response(&mut tcp).await.starts_with("HTTP/1.1 200 "));
        tokio::time::sleep(DEADLINE / 4).await;
    }
    // (from before the last request: its answer's end, where the deadline starts, comes after)
    let since = std::time::Instant::now();
    tcp.write_all(healthz.as_bytes()).await.unwrap();
    assert!(read_response(&mut tcp).await.starts_with("HTTP/1.1 200 "));
    let (after, got) = closed(&mut tcp, since).await;
    assert!(got.is_empty() && after >= DEADLINE && after < Duration::from_secs(3), "idle {after:?}: {got:?}");

    // a model call's body sent in four pieces over twice the deadline is read whole and answered
    let body = serde_json::to_vec(&responses(false)).unwrap();
    let key = &r.keys["openai_api"];
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    for piece in body.chunks(body.len().div_ceil(4)) {
        tokio::time::sleep(DEADLINE / 2).await;
        tcp.write_all(piece).await.unwrap();
    }
    let answered = read_response(&mut tcp).await;
    assert!(answered.starts_with("HTTP/1.1 200 "), "{answered}");

    // an upstream that takes longer than the deadline to answer, then a stream that does too
    r.script(OPENAI, json!({"delay_ms": 700, "deltas": 4, "delta_delay_ms": 300})).await;
    let resp = r.post("openai_api", "/v1/responses").json(&responses(true)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.text().await.unwrap().contains("response.completed"), "the stream ran to its end");

    // and a WebSocket session: a turn longer than the deadline (three pauses of 300 ms between
    // its deltas), a pause past it, and another turn
    r.script(CODEX, json!({"deltas": 4, "delta_delay_ms": 300})).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    for pause in [DEADLINE * 3 / 2, Duration::ZERO] {
        ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
        while next_event(&mut ws).await["type"] != "response.completed" {}
        tokio::time::sleep(pause).await;
    }
    assert_eq!(r.mock.state.calls(CODEX).len(), 2, "both turns went upstream");
}

/// A refusal that leaves a small request body unread reads it first and keeps the connection
/// for the client's next request (under overload, a refusal must not also cost a new
/// connection); a refusal that leaves a larger body unread tells the client the connection ends
/// (hyper does not keep it, and a client that sent its next request on it would see it cut). A
/// refusal that read the body, and any success, leave the connection open.
#[tokio::test]
async fn a_refusal_before_a_small_body_is_read_keeps_the_connection_and_a_larger_one_ends_it() {
    let r = Rig::start(&[]).await;
    let connection =
        |resp: &reqwest::Response| resp.headers().get("connection").map(|v| v.to_str().unwrap().to_owned());
    // two calls on one connection, the first refused from its headers (a wrong key) before its
    // body is sent: the refusal waits for the body, reads it, and the next call follows
    let addr = r.t.base.trim_start_matches("http://").to_owned();
    let body = json!({"model": "gpt-5.1-codex", "input": "hi"}).to_string();
    let head = |length: usize| {
        format!(
            "POST /v1/responses HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer sk-sl-wrong\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        )
    };
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(head(body.len()).as_bytes()).await.unwrap();
    let mut byte = [0u8; 1];
    // (a short wait: the server's one second for the body runs from the refusal)
    let early = tokio::time::timeout(Duration::from_millis(50), tcp.read(&mut byte)).await;
    assert!(early.is_err(), "no answer before the body has come");
    tcp.write_all(body.as_bytes()).await.unwrap();
    let refused = read_response(&mut tcp).await;
    assert!(refused.starts_with("HTTP/1.1 401 "), "{refused}");
    assert!(!refused.to_ascii_lowercase().contains("connection: close"), "{refused}");
    tcp.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
    let next = read_response(&mut tcp).await;
    assert!(next.starts_with("HTTP/1.1 200 "), "the connection carries the next call: {next}");
    // a small body that never comes: answered after a second, and the connection ends
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(head(body.len()).as_bytes()).await.unwrap();
    let stalled = read_response(&mut tcp).await;
    assert!(stalled.starts_with("HTTP/1.1 401 "), "{stalled}");
    assert!(stalled.to_ascii_lowercase().contains("connection: close"), "{stalled}");
    // a larger body is not read for a refusal
    let resp = r
        .http
        .post(format!("{}/v1/responses", r.t.base))
        .bearer_auth("sk-sl-wrong")
        .body(format!("{{\"model\": \"gpt-5.1-codex\", \"input\": \"{}\"}}", "x".repeat(100 * 1024)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(connection(&resp).as_deref(), Some("close"));
    let resp = r.sign_in("wrong-password").await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(connection(&resp), None, "the password was read from the body");
    let resp = r.sign_in(common::ADMIN_PASSWORD).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(connection(&resp), None);
}

/// Reads one response from `tcp` (its head, then a `content-length` body) and returns the head.
async fn read_response(tcp: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(n, 1, "the connection ended after {:?}", String::from_utf8_lossy(&buf));
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0usize);
    let mut body = vec![0u8; length];
    tcp.read_exact(&mut body).await.unwrap();
    head
}

/// A non-streaming upstream answer is read up to a cap: a larger one is a 502, not a buffer.
#[tokio::test]
async fn an_oversized_upstream_answer_is_refused() {
    let r = Rig::start(&[]).await;
    r.script(OPENAI, json!({"steps": [{"kind": "large_body", "bytes": 65 * 1024 * 1024}]})).await;
    let resp = r.post("openai_api", "/v1/responses").json(&responses(false)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_response_too_large");
}

/// A WebSocket message over the cap ends the socket before anything is sent upstream.
#[tokio::test]
async fn websocket_messages_over_the_cap_are_refused() {
    let r = Rig::start(&[]).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let padding = "x".repeat(sublane::proxy::websocket::MAX_MESSAGE_BYTES);
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": padding});
    let _ = ws.send(tungstenite::Message::text(turn.to_string())).await;
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) | Some(Ok(tungstenite::Message::Close(_))) => return true,
                Some(Ok(tungstenite::Message::Text(t))) => panic!("the oversized turn was served: {t}"),
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert_eq!(end, Ok(true));
    assert!(r.mock.state.calls(CODEX).is_empty(), "nothing went upstream");
}

/// Model ids over 256 bytes are refused before scheduling; junk models never get a per-model
/// counter, models the account served do.
#[tokio::test]
async fn junk_model_ids_are_refused_or_never_counted() {
    let mut r = Rig::start(&[]).await;
    let long = "m".repeat(257);
    let resp = r
        .post("openai_api", "/v1/responses")
        .json(&json!({"model": long, "stream": false, "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(r.mock.state.calls(OPENAI).is_empty());

    r.script(
        OPENAI,
        json!({"steps": [{"kind": "status", "status": 400}, {"kind": "status", "status": 404}]}),
    )
    .await;
    for junk in ["junk-a", "junk-b"] {
        let resp = r
            .post("openai_api", "/v1/responses")
            .json(&json!({"model": junk, "stream": false, "input": "hi"}))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_client_error());
    }
    for _ in 0..2 {
        let resp = r.post("openai_api", "/v1/responses").json(&responses(false)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let (_, runtime) = r.admin.call(Method::GET, "/api/accounts/runtime", None).await;
    let account = runtime.as_array().unwrap().iter().find(|a| a["provider"] == "openai_api").unwrap();
    let models: Vec<(&str, u64)> = account["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["model"].as_str().unwrap(), m["requests"].as_u64().unwrap()))
        .collect();
    assert_eq!(models, [("gpt-5.1-codex", 2)]);
    let rows = r.t.records(4).await;
    assert_eq!(rows.len(), 4, "the over-long id left no record");
    assert!(rows.iter().all(|row| row["model"].as_str().unwrap().len() < 100));
}

/// WebSocket sessions obey the HTTP rules: a turn while one runs is refused with an error event
/// (the running turn goes on), and a revoked key is refused on its next turn and the socket is
/// closed with the policy code.
#[tokio::test]
async fn websocket_turns_are_checked_one_at_a_time() {
    let mut r = Rig::start(&[]).await;
    r.script(CODEX, json!({"deltas": 5, "delta_delay_ms": 100})).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    assert_eq!(next_event(&mut ws).await["type"], "response.created");
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    let mut refused = None;
    loop {
        let e = next_event(&mut ws).await;
        if e["type"] == "error" {
            refused = Some(e);
        } else if e["type"] == "response.completed" {
            break;
        }
    }
    let refused = refused.expect("the second turn got an answer");
    assert_eq!(refused["error"]["code"], "response_in_progress");
    assert_eq!(r.mock.state.calls(CODEX).len(), 1, "the refused turn went nowhere");

    let (_, keys) = r.admin.call(Method::GET, "/api/me/keys", None).await;
    let key_id =
        keys.as_array().unwrap().iter().find(|k| k["name"] == "codex").unwrap()["id"].as_i64().unwrap();
    let (status, _) = r.admin.call(Method::DELETE, &format!("/api/me/keys/{key_id}"), None).await;
    assert!(status.is_success());
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    let e = next_event(&mut ws).await;
    assert_eq!(e["error"]["code"], "invalid_api_key", "{e}");
    let close = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap();
    match close {
        Some(Ok(tungstenite::Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1008, "policy violation");
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
    assert_eq!(r.mock.state.calls(CODEX).len(), 1);
}

/// The workspace's stream idle timeout ends a WebSocket turn whose upstream falls silent, as it
/// does an HTTP stream: the client gets an `error` event with the request id and the turn is
/// recorded as `stream_idle_timeout`. (The configured default, below the app's 10 s minimum, keeps
/// the test short.)
#[tokio::test]
async fn a_silent_upstream_ends_a_websocket_turn_after_the_idle_timeout() {
    let r = Rig::start(&[("SUBLANE_STREAM_IDLE_TIMEOUT", "300ms")]).await;
    r.script(CODEX, json!({"steps": [{"kind": "stall", "after_deltas": 1}]})).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    let started = std::time::Instant::now();
    let error = loop {
        let e = next_event(&mut ws).await;
        if e["type"] == "error" {
            break e;
        }
    };
    assert!(started.elapsed() < Duration::from_secs(5), "ended by the idle timeout");
    assert!(error["request_id"].as_str().is_some_and(|id| id.starts_with("req_")), "{error}");
    r.all_cut_by_the_idle_timeout(1).await;
}

/// The idle timeout counts upstream events only (CD-6): an upstream that stalls after one delta
/// but keeps its connection alive, as a proxy in front of a stalled model does, is still cut
/// after the 1 s timeout and recorded as `stream_idle_timeout`. On an HTTP stream its
/// keep-alives are SSE comments every 100 ms (passed on to the client), on a WebSocket turn Ping
/// frames (answered) and OpenAI's `keepalive` events.
#[tokio::test]
async fn the_upstream_s_keep_alives_do_not_reset_the_idle_timeout() {
    let r = Rig::start(&[("SUBLANE_STREAM_IDLE_TIMEOUT", "1s")]).await;
    let stall = json!({"kind": "stall", "after_deltas": 1, "keep_alive_ms": 100});
    r.script(CODEX, json!({"steps": [stall.clone(), stall]})).await;

    let started = std::time::Instant::now();
    let resp = r.post("codex", "/v1/responses").json(&responses(true)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = body_ended_within(resp, Duration::from_secs(5)).await;
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("response.output_text.delta") && body.contains(": keep-alive"), "{body}");
    assert!(started.elapsed() >= Duration::from_secs(1));

    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while next_event(&mut ws).await["type"] != "error" {}
    });
    ended.await.expect("ended by the idle timeout, keep-alives notwithstanding");
    assert!(r.mock.state.pongs(CODEX) >= 1, "the upstream's pings reached SubLane");

    r.all_cut_by_the_idle_timeout(2).await;
}

/// Between turns the upstream's socket is still read: its pings are answered while the client
/// thinks (an upstream that pings an idle connection would otherwise drop it), and when it ends
/// the connection, as OpenAI's does at its 60-minute limit after an error event saying so, the
/// client hears the event and its own connection ends the same way at once, instead of finding
/// the state gone at its next turn.
#[tokio::test]
async fn the_upstream_socket_is_heard_between_turns() {
    let r = Rig::start(&[]).await;
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    let until_completed = async |ws: &mut tokio_tungstenite::WebSocketStream<_>| {
        while next_event(ws).await["type"] != "response.completed" {}
    };
    r.script(CODEX, json!({"after_websocket_turn": "ping"})).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    until_completed(&mut ws).await;
    let answered = async {
        while r.mock.state.pongs(CODEX) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), answered)
        .await
        .expect("the ping between turns was answered");

    r.script(CODEX, json!({"after_websocket_turn": "close"})).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    until_completed(&mut ws).await;
    let event = next_event(&mut ws).await;
    assert_eq!(event["error"]["code"], "websocket_connection_limit_reached", "{event}");
    // rebuilt (ERR-3): SubLane's sentence around the upstream's words about the request, made safe
    let message = event["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the upstream provider answered 400 (invalid_request_error): Responses"),
        "{event}"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.expect("closed at once");
    match closed {
        Some(Ok(tungstenite::Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1000, "the upstream's own close: {frame:?}");
        }
        other => panic!("expected the upstream's close, got {other:?}"),
    }
}

/// The idle timeout runs from the upstream's headers (CD-6): a stream that answers and then sends
/// nothing gets a 504 when the 1 s timeout runs out (not the 5 min the first byte may otherwise
/// take), recorded as `stream_idle_timeout`; one that sends only keep-alives after its headers is
/// cut too, its stream ended.
#[tokio::test]
async fn a_stream_that_sends_no_event_after_its_headers_is_cut_by_the_idle_timeout() {
    let r = Rig::start(&[("SUBLANE_STREAM_IDLE_TIMEOUT", "1s")]).await;
    let silent = json!({"kind": "stall", "after_deltas": 0});
    let kept_alive = json!({"kind": "stall", "after_deltas": 0, "keep_alive_ms": 100});
    r.script(ANTIGRAVITY, json!({"steps": [silent, kept_alive]})).await;
    let path = "/v1beta/models/gemini-3.1-pro-low:streamGenerateContent?alt=sse";
    let answered =
        tokio::time::timeout(Duration::from_secs(5), r.post("antigravity", path).json(&gemini()).send());
    let resp = answered.await.expect("answered once the idle timeout ran out").unwrap();
    assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);

    let resp = r.post("antigravity", path).json(&gemini()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = body_ended_within(resp, Duration::from_secs(5)).await;
    // (the upstream's comments stay out of the unwrapped Gemini stream: only events are unwrapped)
    assert!(!String::from_utf8_lossy(&body).contains("data:"), "{body:?}");

    r.all_cut_by_the_idle_timeout(2).await;
}

/// A Codex stream read whole for a client that does not stream is held to the idle timeout as a
/// relayed one is (CD-6): stalled after its opening events, or after a delta behind keep-alive
/// comments, the client gets a 504 once the 1 s timeout runs out (not at the 30 min deadline),
/// recorded as `stream_idle_timeout`; a stream that sends a delta every 100 ms for about twice the
/// timeout is answered whole. (`collect`'s unit tests hold the rest of the rules in paused time.)
#[tokio::test]
async fn a_stream_read_whole_for_a_client_that_does_not_stream_is_held_to_the_idle_timeout() {
    let r = Rig::start(&[("SUBLANE_STREAM_IDLE_TIMEOUT", "1s")]).await;
    let stalled = json!({"kind": "stall", "after_deltas": 0});
    let kept_alive = json!({"kind": "stall", "after_deltas": 1, "keep_alive_ms": 100});
    let script = json!({"steps": [stalled, kept_alive], "deltas": 20, "delta_delay_ms": 100});
    r.script(CODEX, script).await;
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let call = r.post("codex", "/v1/responses").json(&responses(false)).send();
        let resp = tokio::time::timeout(Duration::from_secs(5), call).await.expect("cut in time").unwrap();
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
        let error: Value = resp.json().await.unwrap();
        assert_eq!(error["error"]["code"], "upstream_timeout", "{error}");
        assert!(started.elapsed() >= Duration::from_secs(1));
    }
    r.all_cut_by_the_idle_timeout(2).await;

    let started = std::time::Instant::now();
    let resp = r.post("codex", "/v1/responses").json(&responses(false)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["status"], "completed", "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(1_900), "the upstream's own pace");
    let rows = r.t.records(3).await;
    assert_eq!((rows[2]["outcome"].as_str(), rows[2]["error_code"].as_str()), (Some("success"), None));
}

/// CD-6's header timeout and total deadline are settings (the seeds: "defaults" of 5 min and
/// 30 min, the deadline "configurable"). With 1 s and 2 s: an upstream whose answer head takes
/// 3 s gets the client a 504 `upstream_timeout` at about 1 s; a stream of 40 deltas 100 ms apart
/// is ended at about 2 s, before its end, recorded as `request_timeout`.
#[tokio::test]
async fn the_upstream_header_timeout_and_the_request_deadline_are_settings() {
    let env = [("SUBLANE_UPSTREAM_HEADER_TIMEOUT", "1s"), ("SUBLANE_REQUEST_DEADLINE", "2s")];
    let r = Rig::start(&env).await;
    r.script(OPENAI, json!({"delay_ms": 3000})).await;
    let started = std::time::Instant::now();
    let resp = r.post("openai_api", "/v1/responses").json(&responses(false)).send().await.unwrap();
    let waited = started.elapsed();
    assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["code"], "upstream_timeout", "{error}");
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_millis(2_500), "{waited:?}");

    r.script(CODEX, json!({"deltas": 40, "delta_delay_ms": 100})).await;
    let started = std::time::Instant::now();
    let resp = r.post("codex", "/v1/responses").json(&responses(true)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = body_ended_within(resp, Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_millis(3_500), "{took:?}");
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("response.output_text.delta") && !body.contains("response.completed"), "{body}");

    let rows = r.t.records(2).await;
    let codes: Vec<_> = rows.iter().map(|r| (r["outcome"].as_str(), r["error_code"].as_str())).collect();
    assert_eq!(codes, [(Some("error"), Some("upstream_timeout")), (Some("error"), Some("request_timeout"))]);
}

/// The header timeout holds for what follows the headers too (CD-6): an upstream that answers a
/// Codex call and then sends nothing at all is cut when it runs out (1 s here) on every path, not
/// at the deadline: a streaming client gets a 504, so does a client that does not stream (its
/// answer read whole), and a WebSocket turn gets an `error` frame. Each is recorded as
/// `upstream_timeout`.
#[tokio::test]
async fn an_upstream_that_answers_and_then_sends_nothing_is_cut_at_the_header_timeout() {
    let r = Rig::start(&[("SUBLANE_UPSTREAM_HEADER_TIMEOUT", "1s")]).await;
    let silent = json!({"kind": "stall", "after_deltas": 0, "silent": true});
    r.script(CODEX, json!({"steps": [silent.clone(), silent.clone(), silent]})).await;
    for stream in [true, false] {
        let started = std::time::Instant::now();
        let call = r.post("codex", "/v1/responses").json(&responses(stream)).send();
        let resp = tokio::time::timeout(Duration::from_secs(5), call).await.expect("cut in time").unwrap();
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT, "stream: {stream}");
        assert!(started.elapsed() >= Duration::from_secs(1));
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    let error = tokio::time::timeout(Duration::from_secs(5), next_event(&mut ws)).await.expect("cut in time");
    assert_eq!(
        (error["type"].as_str(), error["error"]["code"].as_str()),
        (Some("error"), Some("upstream_timeout"))
    );
    for row in r.t.records(3).await {
        assert_eq!(
            (row["outcome"].as_str(), row["error_code"].as_str()),
            (Some("error"), Some("upstream_timeout")),
            "{row}"
        );
    }
}

/// The idle timeout counts the time without an upstream event, not the turn's length: a turn
/// whose upstream sends a frame every 100 ms for about twice the 1 s timeout ends as the upstream
/// ends it.
#[tokio::test]
async fn a_websocket_turn_longer_than_the_idle_timeout_is_not_cut_while_the_upstream_sends() {
    let r = Rig::start(&[("SUBLANE_STREAM_IDLE_TIMEOUT", "1s")]).await;
    r.script(CODEX, json!({"deltas": 20, "delta_delay_ms": 100})).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(r.ws_request("codex")).await.unwrap();
    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(tungstenite::Message::text(turn.to_string())).await.unwrap();
    let started = std::time::Instant::now();
    let mut deltas = 0;
    let last = loop {
        let e = next_event(&mut ws).await;
        match e["type"].as_str() {
            Some("response.output_text.delta") => deltas += 1,
            Some("response.completed" | "error" | "response.failed") => break e,
            _ => {}
        }
    };
    assert!(
        started.elapsed() >= Duration::from_millis(1_900),
        "the upstream's own pace: {:?}",
        started.elapsed()
    );
    assert_eq!((last["type"].as_str(), deltas), (Some("response.completed"), 20), "{last}");
    let rows = r.t.records(1).await;
    assert_eq!((rows[0]["outcome"].as_str(), rows[0]["error_code"].as_str()), (Some("success"), None));
}

/// Failed sign-ins back off per username (and address): after a few, even the right password
/// gets 429 with Retry-After until the block passes; an over-long password is never hashed.
#[tokio::test]
async fn sign_in_is_throttled_per_username() {
    let t = TestServer::start().await;
    let mut c = t.client();
    let attempt = |c: &mut Client, password: String| {
        let body = json!({"username": "admin", "password": password});
        let req = c.request(Method::POST, "/api/session").json(&body);
        async move { req.send().await.unwrap() }
    };
    let long = "p".repeat(10_000);
    assert_eq!(attempt(&mut c, long).await.status(), StatusCode::UNAUTHORIZED);
    for _ in 0..4 {
        assert_eq!(attempt(&mut c, "wrong-password".into()).await.status(), StatusCode::UNAUTHORIZED);
    }
    let blocked = attempt(&mut c, common::ADMIN_PASSWORD.into()).await;
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = blocked.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=900).contains(&wait), "{wait}");
    let body: Value = blocked.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_login_attempts");
    // the web app's sign-in form is held to the same rule
    let resp = c
        .request(Method::POST, "/rpc/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("username=admin&password={}", common::ADMIN_PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(resp.headers().contains_key("retry-after"));
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(attempt(&mut c, common::ADMIN_PASSWORD.into()).await.status(), StatusCode::OK);
}

/// Browsing the web app (server functions are POSTs, reads included) changes no configuration:
/// the account directory is not rebuilt and rotation goes on evenly.
#[tokio::test]
async fn browsing_the_web_app_keeps_rotation_even() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let openai = format!("{}/v1", mock.url());
    let env =
        [("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD), ("SUBLANE_OPENAI_BASE_URL", openai.as_str())];
    let t = TestServer::start_with(&env).await;
    let mut admin = t.admin().await;
    for key in ["sk-rot-a", "sk-rot-b"] {
        let (status, body) = admin
            .call(
                Method::POST,
                "/api/accounts",
                Some(json!({"provider": "openai_api", "name": key, "pool_ids": [1],
                            "credentials": {"kind": "api_key", "api_key": key}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, key) = admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "rot"}))).await;
    let key = key["secret"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    for _ in 0..6 {
        let resp = http
            .post(format!("{}/v1/responses", t.base))
            .bearer_auth(&key)
            .json(&responses(false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        for rpc in ["/rpc/me", "/rpc/requests"] {
            let resp = admin
                .request(Method::POST, rpc)
                .header("content-type", "application/x-www-form-urlencoded")
                .body("")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{rpc}");
        }
    }
    let served = [mock.state.calls("sk-rot-a").len(), mock.state.calls("sk-rot-b").len()];
    assert_eq!(served, [3, 3], "rotation is not reset by reads");
}

/// The session cookie is `Secure` whenever the browser came over HTTPS through a trusted proxy,
/// and forwarding headers from anyone else are ignored.
#[tokio::test]
async fn session_cookies_are_secure_behind_a_trusted_https_proxy() {
    async fn cookie(t: &TestServer, proto: Option<&str>, path: &str) -> String {
        let mut req = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .post(format!("{}{path}", t.base))
            .header("origin", &t.base);
        if let Some(p) = proto {
            req = req.header("x-forwarded-proto", p).header("x-forwarded-for", "203.0.113.7");
        }
        let req = if path == "/api/session" {
            req.json(&json!({"username": "admin", "password": common::ADMIN_PASSWORD}))
        } else {
            req.header("content-type", "application/x-www-form-urlencoded")
                .body(format!("username=admin&password={}", common::ADMIN_PASSWORD))
        };
        let resp = req.send().await.unwrap();
        assert!(resp.status().is_success() || resp.status().is_redirection(), "{}", resp.status());
        resp.headers()["set-cookie"].to_str().unwrap().to_owned()
    }
    let behind = TestServer::start_with(&[
        ("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD),
        ("SUBLANE_TRUSTED_PROXIES", "127.0.0.1"),
    ])
    .await;
    for path in ["/api/session", "/rpc/login"] {
        assert!(cookie(&behind, Some("https"), path).await.contains("Secure"), "{path}");
        assert!(!cookie(&behind, Some("http"), path).await.contains("Secure"), "{path}");
        assert!(!cookie(&behind, None, path).await.contains("Secure"), "{path}");
    }
    let exposed = TestServer::start().await;
    assert!(
        !cookie(&exposed, Some("https"), "/api/session").await.contains("Secure"),
        "an untrusted peer's header is ignored"
    );
}

/// A client that gives up before the upstream answers still leaves a record (REC-1), and its
/// slot comes back.
#[tokio::test]
async fn a_client_that_leaves_before_the_answer_is_recorded_as_cancelled() {
    let mut r = Rig::start(&[]).await;
    r.script(OPENAI, json!({"delay_ms": 3000})).await;
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let gone = impatient
        .post(format!("{}/v1/responses", r.t.base))
        .bearer_auth(&r.keys["openai_api"])
        .json(&responses(false))
        .send()
        .await;
    assert!(gone.is_err());
    let rows = r.t.records(1).await;
    assert_eq!(
        (&rows[0]["outcome"], &rows[0]["error_code"]),
        (&json!("cancelled"), &json!("client_cancelled"))
    );
    let (_, runtime) = r.admin.call(Method::GET, "/api/accounts/runtime", None).await;
    let held: u64 = runtime.as_array().unwrap().iter().map(|a| a["in_flight"].as_u64().unwrap()).sum();
    assert_eq!(held, 0);
}

/// A burst of guesses sent together cannot slip past the throttle while they wait for a hashing
/// slot: the block is checked again when each one's turn to hash comes.
#[tokio::test]
async fn a_burst_of_guesses_gets_no_more_than_a_few_hashes() {
    let t = TestServer::start().await;
    let c = t.client();
    let guesses: Vec<_> = (0..30)
        .map(|i| {
            let body = json!({"username": "admin", "password": format!("guess-{i}-wrong")});
            let req = c.request(Method::POST, "/api/session").json(&body);
            tokio::spawn(async move { req.send().await.unwrap().status() })
        })
        .collect();
    let mut refused_unhashed = 0;
    let mut checked = 0;
    for g in guesses {
        match g.await.unwrap() {
            StatusCode::TOO_MANY_REQUESTS => refused_unhashed += 1,
            StatusCode::UNAUTHORIZED => checked += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let allowed = sublane::auth::throttle::FREE_USERNAME_FAILURES as usize
        + sublane::auth::password::HASHING_CONCURRENCY;
    assert!(checked <= allowed, "{checked} passwords were checked in one burst");
    assert_eq!(checked + refused_unhashed, 30);
}
