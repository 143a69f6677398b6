//! The model path through the real server against the mock upstream (PX-1, PX-2, PX-6, ID-3,
//! ID-4, REC-1, REC-2, REC-7, REC-8, REC-9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{TestServer, contains};
use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sublane::mock_upstream::MockUpstream;

/// SubLane + mock upstream + one pool with a Codex, an OpenAI-key, a Claude and an
/// Anthropic-key account, and a member key for that pool.
struct Rig {
    t: TestServer,
    mock: MockUpstream,
    key: String,
    http: reqwest::Client,
}

const CODEX_TOKEN: &str = "codex-at-1";
const CLAUDE_TOKEN: &str = "sk-ant-oat-1";

impl Rig {
    async fn start() -> Rig {
        let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let urls = mock.env();
        let mut env = vec![("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD)];
        env.extend(urls.iter().map(|(k, v)| (*k, v.as_str())));
        let t = TestServer::start_with(&env).await;
        let mut admin = t.admin().await;
        for (provider, name, creds) in [
            (
                "codex",
                "codex-a",
                json!({"kind": "oauth", "access_token": CODEX_TOKEN, "provider_account_id": "acct-a"}),
            ),
            ("claude", "claude-a", json!({"kind": "oauth", "access_token": CLAUDE_TOKEN})),
        ] {
            let (status, body) = admin
                .call(
                    Method::POST,
                    "/api/accounts",
                    Some(json!({"provider": provider, "name": name, "pool_ids": [1], "credentials": creds})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
        let (status, body) =
            admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "proxy-test"}))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let key = body["secret"].as_str().unwrap().to_owned();
        Rig { t, mock, key, http: reqwest::Client::new() }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{path}", self.t.base)).bearer_auth(&self.key)
    }

    async fn script(&self, credential: &str, script: Value) {
        let r = self
            .http
            .put(format!("{}/__mock/accounts/{credential}", self.mock.url()))
            .json(&script)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }

    fn calls(&self, credential: &str) -> Vec<sublane::mock_upstream::Call> {
        self.mock.state.calls(credential)
    }

    async fn records(&self, n: usize) -> Vec<Value> {
        self.t.records(n).await
    }
}

const RESPONSES_BODY: &str = r#"{"model":"gpt-5.1-codex","stream":true,"store":false,"input":[{"role":"user","content":[{"type":"input_text","text":"MARKER-PROMPT-51e9"}]}],"prompt_cache_key":"sess-1"}"#;

/// CD-6: a streaming client that has been sent nothing for 10 s gets a `: keep-alive` comment,
/// as an event of its own between the upstream's (a Gemini client gets none: the google-genai
/// test in sdk-tests).
#[tokio::test]
async fn a_stream_silent_for_longer_than_the_heartbeat_period_gets_a_comment_between_its_events() {
    let r = Rig::start().await;
    // 15 s between the two deltas: one heartbeat at 10 s, with 5 s of room either way
    r.script(CODEX_TOKEN, json!({"deltas": 2, "delta_delay_ms": 15_000})).await;
    let resp =
        r.post("/v1/responses").header("content-type", "application/json").body(RESPONSES_BODY).send().await;
    let text = resp.unwrap().text().await.unwrap();
    let deltas: Vec<usize> =
        text.match_indices("event: response.output_text.delta").map(|(at, _)| at).collect();
    assert_eq!(deltas.len(), 2, "{text}");
    assert_eq!(text.matches(": keep-alive").count(), 1, "{text}");
    let beat = text.find(": keep-alive\n\n").unwrap();
    assert!(deltas[0] < beat && beat < deltas[1], "between the two deltas: {text}");
    assert!(text[..beat].ends_with("\n\n"), "after a whole event: {text}");
}

#[tokio::test]
async fn responses_stream_relays_events_unchanged_and_records_usage() {
    let r = Rig::start().await;
    let resp = r
        .post("/v1/responses")
        .header("content-type", "application/json")
        .header("session-id", "sess-1")
        .header("x-codex-turn-metadata", "{\"turn_id\":\"t1\"}")
        .body(RESPONSES_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(request_id.starts_with("req_"));
    assert_eq!(resp.headers()["x-codex-primary-used-percent"], "12.0", "quota hints pass through");
    let text = resp.text().await.unwrap();

    // The events are exactly what the upstream sent, in protocols.md order.
    let names: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert!(text.contains(r#""sequence_number":10"#));

    let calls = r.calls(CODEX_TOKEN);
    assert_eq!(calls.len(), 1);
    let h = &calls[0].headers;
    assert_eq!(calls[0].path, "/backend-api/codex/responses");
    assert_eq!(
        h["authorization"],
        format!("Bearer {CODEX_TOKEN}"),
        "the account's token, not the client key"
    );
    assert_eq!(h["chatgpt-account-id"], "acct-a");
    assert_eq!(h["session-id"], "sess-1");
    assert_eq!(h["x-codex-turn-metadata"], "{\"turn_id\":\"t1\"}");
    assert!(!h.values().any(|v| v.contains(&r.key)), "the gateway key never goes upstream");

    let rec = &r.records(1).await[0];
    assert_eq!(rec["request_id"], request_id);
    assert_eq!(rec["outcome"], "success");
    assert_eq!(rec["operation"], "responses");
    assert_eq!(rec["upstream_status"], 200);
    assert_eq!(
        (rec["input"].as_i64(), rec["cached"].as_i64(), rec["output"].as_i64()),
        (Some(120), Some(64), Some(7))
    );
    assert!(rec["first_output_ms"].as_i64().is_some());
    assert!(rec["first_output_ms"].as_i64() <= rec["duration_ms"].as_i64());

    // the key shows when it was last used
    let mut admin = r.t.admin().await;
    let (_, keys) = admin.call(Method::GET, "/api/me/keys", None).await;
    assert!(keys[0]["last_used_at"].is_string(), "{keys}");

    // REC-2 privacy: nothing of the prompt, the key or the session lands in the database.
    let db = r.t.db_bytes();
    for secret in ["MARKER-PROMPT-51e9", "sess-1", r.key.as_str(), CODEX_TOKEN] {
        assert!(!contains(&db, secret), "{secret} stored in the database");
    }
}

#[tokio::test]
async fn non_streaming_responses_are_collected_from_the_codex_stream() {
    let r = Rig::start().await;
    let body = RESPONSES_BODY.replace(r#""stream":true"#, r#""stream":false"#);
    let resp = r
        .post("/v1/responses")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("accept-encoding", "gzip, br")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["content"][0]["text"], "HelloHelloHello");
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 64);
    assert_eq!(
        r.calls(CODEX_TOKEN)[0].stream,
        Some(true),
        "Codex only streams, so SubLane asks for a stream"
    );
    assert_eq!(r.calls(CODEX_TOKEN)[0].headers["accept"], "text/event-stream", "and accepts one");
    assert_eq!(r.calls(CODEX_TOKEN)[0].headers["accept-encoding"], "identity", "uncompressed");
    let rec = &r.records(1).await[0];
    assert_eq!(rec["outcome"], "success");
    assert_eq!(rec["first_output_ms"], Value::Null, "no deltas reach a non-streaming client");
    assert_eq!(rec["output"], 7);
}

#[tokio::test]
async fn messages_stream_and_json_with_usage() {
    let r = Rig::start().await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let resp = r
        .http
        .post(format!("{}/v1/messages?beta=true", r.t.base))
        .header("x-api-key", &r.key)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "claude-code-20250219")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    let names: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    let call = &r.calls(CLAUDE_TOKEN)[0];
    assert_eq!(call.path, "/v1/messages");
    assert_eq!(call.query.as_deref(), Some("beta=true"));
    assert_eq!(call.headers["authorization"], format!("Bearer {CLAUDE_TOKEN}"));
    assert_eq!(call.headers["anthropic-beta"], "claude-code-20250219,oauth-2025-04-20");
    assert!(!call.headers.contains_key("x-api-key"), "the client's key is stripped");

    let mut json_body = body.clone();
    json_body["stream"] = json!(false);
    let resp = r.post("/v1/messages").json(&json_body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "message");

    let recs = r.records(2).await;
    for rec in &recs {
        assert_eq!(rec["outcome"], "success");
        assert_eq!(
            (rec["input"].as_i64(), rec["cached"].as_i64(), rec["output"].as_i64()),
            (Some(120), Some(64), Some(7))
        );
    }
    assert!(recs[0]["first_output_ms"].is_i64());
    assert_eq!(recs[1]["first_output_ms"], Value::Null);
}

#[tokio::test]
async fn bad_keys_get_401_in_each_protocol_shape_and_no_record() {
    let r = Rig::start().await;
    let resp = r
        .http
        .post(format!("{}/v1/responses", r.t.base))
        .bearer_auth("sk-sl-nope")
        .body(RESPONSES_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().contains_key("x-request-id"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let resp = r.http.post(format!("{}/v1/messages", r.t.base)).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");

    // revoking the key takes effect at once, despite the lookup cache
    let ok = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    ok.text().await.unwrap();
    let mut admin = r.t.admin().await;
    let (_, keys) = admin.call(Method::GET, "/api/me/keys", None).await;
    let id = keys[0]["id"].as_i64().unwrap();
    admin.call(Method::DELETE, &format!("/api/me/keys/{id}"), None).await;
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.calls(CODEX_TOKEN).len(), 1, "refused keys never reach an upstream");
    assert_eq!(r.records(1).await.len(), 1);
}

#[tokio::test]
async fn malformed_bodies_are_400_without_a_record() {
    let r = Rig::start().await;
    for body in ["{not json", r#"{"input":"no model"}"#] {
        let resp = r.post("/v1/responses").body(body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    assert!(r.calls(CODEX_TOKEN).is_empty());
}

#[tokio::test]
async fn zstd_request_bodies_are_accepted() {
    let r = Rig::start().await;
    let compressed = zstd::encode_all(RESPONSES_BODY.as_bytes(), 3).unwrap();
    let resp =
        r.post("/v1/responses").header("content-encoding", "zstd").body(compressed).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.unwrap();
    assert_eq!(r.calls(CODEX_TOKEN)[0].model.as_deref(), Some("gpt-5.1-codex"));
}

#[tokio::test]
async fn model_policy_refusals_are_recorded_as_rejected() {
    let r = Rig::start().await;
    let mut admin = r.t.admin().await;
    admin
        .call(
            Method::PATCH,
            "/api/pools/1",
            Some(json!({"model_policy": {"mode": "deny", "models": ["gpt-5.1-codex"]}})),
        )
        .await;
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_allowed");
    let rec = &r.records(1).await[0];
    assert_eq!(rec["outcome"], "rejected");
    assert_eq!(rec["error_code"], "model_not_allowed");
    assert!(r.calls(CODEX_TOKEN).is_empty());
}

#[tokio::test]
async fn upstream_errors_keep_status_and_retry_after_but_not_the_body() {
    let r = Rig::start().await;
    // (the upstream's x-codex-* headers come with its answers, errors included)
    let codex_headers = json!({"x-codex-active-limit": "primary", "x-codex-primary-used-percent": "12.0"});
    r.script(CODEX_TOKEN, json!({"quota_headers": codex_headers, "steps": [{"kind": "ok"}, {"kind": "status", "status": 429, "retry_after": "17"}, {"kind": "usage_limit_reached", "resets_in_secs": 600}]}))
        .await;
    // The conversation's first request is accepted: it is bound to this account (RT-1).
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.unwrap();
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "17");
    let v: Value = resp.json().await.unwrap();
    assert!(!v.to_string().contains("scripted"), "raw upstream messages are not returned: {v}");
    // CD-1: the 429 cooled the account for its Retry-After; the bound conversation is told so
    // (ADM-9) without another upstream call.
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((16..=17).contains(&wait), "bounded by the upstream's 17 s: {wait}");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "account_cooling");
    assert_eq!(r.calls(CODEX_TOKEN).len(), 2);
    // ACC-3: resume clears the cooldown; the next call reaches the upstream again.
    let mut admin = r.t.admin().await;
    let (status, runtime) = admin.call(Method::GET, "/api/accounts/runtime", None).await;
    assert_eq!(status, StatusCode::OK);
    let codex = runtime.as_array().unwrap().iter().find(|a| a["provider"] == "codex").unwrap().clone();
    assert!(codex["rate_limit_reset_at"].is_i64(), "{codex}");
    let (status, _) =
        admin.call(Method::POST, &format!("/api/accounts/{}/resume", codex["id"]), Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK);
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.headers()["x-codex-active-limit"], "primary", "and the headers that say which limit");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "usage_limit_reached", "Codex needs the type to explain the limit");
    assert!(v["error"]["resets_at"].is_u64());
    let recs = r.records(4).await;
    assert_eq!(recs[1]["outcome"], "error");
    assert_eq!(recs[1]["upstream_status"], 429);
    assert_eq!(recs[2]["outcome"], "rejected");
    assert_eq!(recs[2]["error_code"], "account_cooling");
    assert_eq!(recs[3]["error_code"], "usage_limit_reached");
}

/// ERR-3 keeps an upstream's words from the client, but a prompt too long for the model is said
/// again from its numbers: Claude Code compacts and retries on `prompt is too long: N tokens > M
/// maximum`, and OpenAI clients get the code `context_length_exceeded`. Nothing else of the upstream's
/// message comes through, and the account is not blamed.
#[tokio::test]
async fn a_prompt_too_long_for_the_model_is_said_so_in_words_clients_act_on() {
    let r = Rig::start().await;
    let too_long =
        json!({"steps": [{"kind": "context_too_long", "tokens": 210_118, "limit": 200_000}, {"kind": "ok"}]});
    r.script(CLAUDE_TOKEN, too_long.clone()).await;
    r.script(CODEX_TOKEN, too_long).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let resp =
        r.post("/v1/messages").header("anthropic-version", "2023-06-01").json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert_eq!(v["error"]["message"], "prompt is too long: 210118 tokens > 200000 maximum");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    // OpenAI's Responses API names no numbers; the code says what happened
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["message"], "prompt is too long for the model's context window");
    assert!(!v.to_string().contains("adjust your input"), "not the upstream's own words: {v}");
    // neither account was blamed: each serves the next call
    let resp =
        r.post("/v1/messages").header("anthropic-version", "2023-06-01").json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.unwrap();
    assert_eq!((r.calls(CLAUDE_TOKEN).len(), r.calls(CODEX_TOKEN).len()), (2, 1), "no retry elsewhere");
    let recs = r.records(3).await;
    for rec in &recs[..2] {
        assert_eq!(rec["outcome"], "error");
        assert_eq!(rec["upstream_status"], 400);
        assert_eq!(rec["error_code"], "context_length_exceeded");
    }
    assert_eq!(recs[2]["outcome"], "success");
}

#[tokio::test]
async fn a_200_stream_that_fails_is_an_error_outcome() {
    let r = Rig::start().await;
    r.script(
        CODEX_TOKEN,
        json!({"delta_delay_ms": 30, "steps": [
            {"kind": "failed_event", "code": "server_error"},
            {"kind": "abort", "after_deltas": 2},
            {"kind": "abort", "after_deltas": 0}
        ]}),
    )
    .await;
    let text = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("response.failed"));
    // broken after the stream started: the client already has a 200, the body breaks off
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let _ = resp.text().await;
    // broken before any event: nothing was sent yet, so the client gets an honest 502
    let resp = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap();
    let status = resp.status();
    let _ = resp.text().await;
    let recs = r.records(3).await;
    assert_eq!(
        (recs[0]["outcome"].as_str(), recs[0]["upstream_status"].as_i64()),
        (Some("error"), Some(200))
    );
    assert_eq!(recs[0]["error_code"], "server_error");
    assert_eq!(recs[1]["outcome"], "error");
    assert_eq!(recs[1]["error_code"], "upstream_stream_broken");
    assert!(recs[1]["first_output_ms"].is_i64(), "deltas had been relayed before the break");
    if status == StatusCode::BAD_GATEWAY {
        assert_eq!(recs[2]["error_code"], "upstream_unavailable");
    } else {
        // the break raced the first event out: then it is a broken 200 stream
        assert_eq!(recs[2]["error_code"], "upstream_stream_broken");
    }
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_stream() {
    let r = Rig::start().await;
    r.script(CLAUDE_TOKEN, json!({"deltas": 1000, "delta_delay_ms": 20})).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let resp = r.post("/v1/messages").json(&body).send().await.unwrap();
    let mut stream = resp.bytes_stream();
    let _ = stream.next().await;
    drop(stream);
    let rec = &r.records(1).await[0];
    assert_eq!(rec["outcome"], "cancelled");
    assert!(rec["duration_ms"].as_i64().unwrap() < 5_000, "the upstream was not read to the end: {rec}");
}

/// Seed 002: a pool that cannot serve the request at all is a 404 about the model; one whose
/// accounts for it are only out of service now (disabled, expired, ...) is a 503 with Retry-After.
/// EXP-1 counts the latter as unavailable.
#[tokio::test]
async fn a_pool_without_an_account_for_the_protocol_is_404_and_with_one_out_of_service_503() {
    let r = Rig::start().await;
    let resp = r
        .http
        .post(format!("{}/claude/v1/messages", r.t.base))
        .bearer_auth(&r.key)
        .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "the claude prefix reaches the Claude account");
    let mut admin = r.t.admin().await;
    let messages = || {
        r.post("/v1/messages")
            .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let (status, _) = admin.call(Method::POST, "/api/accounts/2/disable", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK);
    let resp = messages().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "no_available_account");
    let rec = &r.records(2).await[1];
    assert_eq!(rec["routing"]["excluded"]["unavailable"], 1, "the disabled account: {rec}");

    admin.call(Method::PATCH, "/api/accounts/2", Some(json!({"pool_ids": []}))).await;
    let resp = messages().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(resp.headers().get("retry-after").is_none());
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn head_probe_answers_200() {
    let r = Rig::start().await;
    let resp = r.http.head(format!("{}/", r.t.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn models_list_follows_the_pool_and_its_policy_without_records() {
    let r = Rig::start().await;
    let list = |anthropic: bool| {
        let mut req = r.http.get(format!("{}/v1/models", r.t.base)).bearer_auth(&r.key);
        if anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        req.send()
    };
    let v: Value = list(false).await.unwrap().json().await.unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"gpt-5.1-codex"), "{ids:?}");
    assert!(
        ids.contains(&"claude-opus-4-8"),
        "OpenAI clients get what Chat Completions serves, every family: {ids:?}"
    );
    assert!(!ids.iter().any(|m| m.starts_with("gemini")), "no Antigravity account in the pool");
    let v: Value = list(true).await.unwrap().json().await.unwrap();
    assert_eq!(v["data"][0]["type"], "model");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"claude-opus-4-8") && !ids.contains(&"gpt-5.1-codex"), "{ids:?}");
    // under Claude's prefix an OpenAI client (Chat Completions) finds Claude's models
    let url = format!("{}/claude/v1/models/claude-opus-4-8", r.t.base);
    let v: Value = r.http.get(url).bearer_auth(&r.key).send().await.unwrap().json().await.unwrap();
    assert_eq!((v["id"].as_str(), v["object"].as_str()), (Some("claude-opus-4-8"), Some("model")), "{v}");

    let mut admin = r.t.admin().await;
    admin
        .call(Method::PATCH, "/api/pools/1", Some(json!({"model_policy": {"mode": "allow", "models": ["gpt-5.1-codex"], "aliases": {"fast": "gpt-5.1-codex"}}})))
        .await;
    let v: Value = list(false).await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["fast", "gpt-5.1-codex"]);

    // one model, as the SDKs' models.retrieve asks for it: served, or a 404 in the protocol's shape
    let one = |path: &str, anthropic: bool| {
        let mut req = r.http.get(format!("{}{path}", r.t.base)).bearer_auth(&r.key);
        if anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        req.send()
    };
    let v: Value = one("/v1/models/fast", false).await.unwrap().json().await.unwrap();
    assert_eq!((v["id"].as_str(), v["object"].as_str()), (Some("fast"), Some("model")), "{v}");
    let v: Value = one("/codex/v1/models/gpt-5.1-codex", false).await.unwrap().json().await.unwrap();
    assert_eq!(v["id"], "gpt-5.1-codex", "{v}");
    let resp = one("/v1/models/gpt-5.1", false).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND, "not allowed by the pool's policy");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    let resp = one("/v1/models/claude-opus-4-8", true).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let v: Value = resp.json().await.unwrap();
    assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some("not_found_error")));
    // a model API path SubLane does not serve: JSON in the protocol's shape, not the web app's page
    for (path, anthropic) in [("/v1/responses/resp_1/input_items", false), ("/claude/v1/files", true)] {
        let resp = one(path, anthropic).await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(resp.headers().contains_key("x-request-id"), "{path}");
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"), "{path}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "not_found", "{path}: {v}");
    }
    // a served path asked with a method it does not take: a 405 in the protocol's shape
    let resp =
        r.http.get(format!("{}/v1/messages", r.t.base)).header("x-api-key", &r.key).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(resp.headers()["allow"], "POST");
    assert!(resp.headers().contains_key("x-request-id"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["code"].as_str()),
        (Some("error"), Some("method_not_allowed"))
    );
    // the WebSocket mode's path asked without a handshake: the reason, in OpenAI's shape
    let resp = r.http.get(format!("{}/v1/responses", r.t.base)).bearer_auth(&r.key).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.headers().contains_key("x-request-id"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_request", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("WebSocket"), "{v}");

    let resp = r.http.get(format!("{}/v1/models", r.t.base)).bearer_auth("sk-sl-bad").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(r.records(0).await.is_empty(), "model discovery creates no record (REC-1)");
}

/// PX-3: Gemini clients served by an Antigravity account, envelope translated both ways.
#[tokio::test]
async fn gemini_generate_and_stream_through_antigravity() {
    let r = Rig::start().await;
    let m = r.mock.url();
    // point Antigravity at the mock: a second server would do, but the URL is per process, so
    // this test starts its own SubLane with the Antigravity base set
    // (with the operator's Antigravity version: the built-in one is what the other tests send)
    let env = [
        ("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD),
        ("SUBLANE_ANTIGRAVITY_BASE_URL", m.as_str()),
        ("SUBLANE_ANTIGRAVITY_USER_AGENT", "antigravity/hub/3.1.0 linux/amd64"),
    ];
    let t = TestServer::start_with(&env).await;
    let mut admin = t.admin().await;
    let (status, body) = admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({"provider": "antigravity", "name": "ag-1", "pool_ids": [1],
                "credentials": {"kind": "oauth", "access_token": "ya29.ag", "provider_account_id": "proj-ag"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let account = body["id"].clone();
    let (_, key) = admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "gemini"}))).await;
    let key = key["secret"].as_str().unwrap().to_owned();
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "MARKER-GEMINI"}]}]});
    let gemini = |call: &str| {
        let url = format!("{}/v1beta/models/{call}", t.base);
        r.http.post(url).header("x-goog-api-key", &key).json(&body).send()
    };

    let resp = gemini("gemini-3.1-pro-low:generateContent").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert!(v.get("response").is_none(), "the envelope is removed: {v}");
    assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "HelloHelloHello");
    assert_eq!(v["usageMetadata"]["cachedContentTokenCount"], 64);

    let resp = gemini("gemini-3.1-pro-low:streamGenerateContent?alt=sse").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|c| c.get("response").is_none() && c["candidates"].is_array()));
    assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");

    // Google's other stream, a JSON array (no `alt=sse`), is refused in words, not answered
    // with events the client cannot parse; nothing goes upstream
    let resp = gemini("gemini-3.1-pro-low:streamGenerateContent").await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.headers().contains_key("x-request-id"), "a refusal the log can be searched for");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    assert!(v["error"]["message"].as_str().unwrap().contains("alt=sse"), "{v}");
    let resp = gemini("gemini-3.1-pro-low:streamGenerateContent?alt=json").await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    let calls = r.calls("ya29.ag");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].path, "/v1internal:streamGenerateContent");
    assert_eq!(calls[1].query.as_deref(), Some("alt=sse"));
    assert_eq!(calls[0].headers["authorization"], "Bearer ya29.ag");
    assert!(calls.iter().all(|c| c.headers["user-agent"] == "antigravity/hub/3.1.0 linux/amd64"));
    assert!(!calls[0].headers.contains_key("x-goog-api-key"));

    // a model the pool cannot serve through this protocol, in Gemini's error shape
    let resp = gemini("x:countTokens").await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(resp.headers().contains_key("x-request-id"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["status"], "NOT_FOUND");

    // records: usage from the inner usageMetadata, first output for the stream
    let rows = t.records(2).await;
    assert_eq!(
        (
            &rows[0]["operation"],
            &rows[0]["outcome"],
            &rows[0]["input"],
            &rows[0]["cached"],
            &rows[0]["first_output_ms"]
        ),
        (&json!("gemini_generate"), &json!("success"), &json!(120), &json!(64), &Value::Null)
    );
    assert_eq!((&rows[1]["operation"], &rows[1]["outcome"]), (&json!("gemini_stream"), &json!("success")));
    assert!(rows[1]["first_output_ms"].is_i64());
    assert!(!contains(&t.db_bytes(), "MARKER-GEMINI"));

    // the admin's test call goes to the account in the envelope too
    let test = format!("/api/accounts/{account}/test");
    let (status, tested) = admin.call(Method::POST, &test, Some(json!({}))).await;
    assert_eq!((status, &tested["ok"]), (StatusCode::OK, &json!(true)), "{tested}");
    let calls = r.calls("ya29.ag");
    let probe = calls.last().unwrap();
    assert_eq!(
        (probe.path.as_str(), probe.model.as_deref()),
        ("/v1internal:generateContent", Some("gemini-3-flash"))
    );

    // `$alt=sse`, the system parameter's other spelling, asks for the same stream
    let resp = gemini("gemini-3.1-pro-low:streamGenerateContent?$alt=sse").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.text().await.unwrap().starts_with("data: "));
}

/// PX-1 WebSocket mode: warm-up, then a continuation on the same connection (REC-1, REC-9).
#[tokio::test]
async fn responses_websocket_turns_with_warmup_and_continuation() {
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let r = Rig::start().await;
    let url = format!("{}/v1/responses", r.t.base.replace("http://", "ws://"));

    let mut bad = url.clone().into_client_request().unwrap();
    bad.headers_mut().insert("authorization", "Bearer sk-sl-nope".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(bad).await.is_err(), "a bad key never gets a socket");

    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {}", r.key).parse().unwrap());
    req.headers_mut().insert("session-id", "ws-session".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();

    let warmup = json!({"type": "response.create", "generate": false, "model": "gpt-5.1-codex", "input": [], "store": false});
    ws.send(Message::text(warmup.to_string())).await.unwrap();
    let mut events = Vec::new();
    while events.last().is_none_or(|e: &Value| e["type"] != "response.completed") {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            events.push(serde_json::from_str::<Value>(t.as_str()).unwrap());
        }
    }
    let warm_id = events[0]["response"]["id"].as_str().unwrap().to_owned();
    assert!(events.iter().all(|e| e["request_id"].as_str().is_some_and(|id| id.starts_with("req_"))));

    let turn = json!({"type": "response.create", "model": "gpt-5.1-codex", "previous_response_id": warm_id,
                      "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "store": false});
    // spaced as no serializer writes it: the frame must go upstream as the client wrote it
    let turn = turn.to_string().replace(",", ", ");
    ws.send(Message::text(turn.clone())).await.unwrap();
    let mut events = Vec::new();
    while events.last().is_none_or(|e: &Value| e["type"] != "response.completed") {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            events.push(serde_json::from_str::<Value>(t.as_str()).unwrap());
        }
    }
    assert_eq!(events.len(), 11, "the whole answer, frame by frame");
    let rid = events[0]["request_id"].clone();
    assert_eq!(events.last().unwrap()["request_id"], rid);
    assert!(events[4].get("request_id").is_none(), "deltas pass unchanged");
    assert_eq!(events[4]["delta"], "Hello");
    // ADM-4: an open socket between turns holds no account slot
    let mut admin = r.t.admin().await;
    let mut held = Value::Null;
    for _ in 0..50 {
        let (_, runtime) = admin.call(Method::GET, "/api/accounts/runtime", None).await;
        held =
            runtime.as_array().unwrap().iter().map(|a| a["in_flight"].as_u64().unwrap()).sum::<u64>().into();
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(held, 0);

    // a continuation of an unknown response: the upstream's error comes back with our id
    let lost = json!({"type": "response.create", "model": "gpt-5.1-codex", "previous_response_id": "resp_gone", "input": []});
    ws.send(Message::text(lost.to_string())).await.unwrap();
    let err: Value = loop {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            break serde_json::from_str(t.as_str()).unwrap();
        }
    };
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["code"], "previous_response_not_found");
    assert!(err["request_id"].is_string());
    ws.close(None).await.unwrap();

    let calls = r.calls(CODEX_TOKEN);
    assert_eq!(calls.len(), 3, "every turn went to the same account");
    assert_eq!(calls[0].path, "/backend-api/codex/responses");
    assert_eq!(calls[0].headers["chatgpt-account-id"], "acct-a");
    assert_eq!(calls[0].headers["session-id"], "ws-session");
    assert_eq!(calls[0].headers["accept-encoding"], "identity");
    assert_eq!(calls[1].body_len, turn.len(), "the turn's frame went upstream as it came");
    let recs = r.records(2).await;
    assert_eq!(recs.len(), 2, "the warm-up is not recorded");
    assert_eq!(recs[0]["operation"], "responses_ws");
    assert_eq!(recs[0]["outcome"], "success");
    assert_eq!(recs[0]["request_id"], rid);
    assert_eq!(recs[0]["output"], 7);
    assert!(recs[0]["first_output_ms"].is_i64());
    assert_eq!(recs[1]["outcome"], "error");
    assert_eq!(recs[1]["error_code"], "previous_response_not_found");
}

/// API-2, REC-3, REC-4: personal history is scoped in SQL; admins see everyone and accounts.
#[tokio::test]
async fn request_history_is_scoped_filtered_and_paged() {
    let r = Rig::start().await;
    let mut admin = r.t.admin().await;
    let (mut bob, bob_id) = r.t.member(&admin, "bob").await;
    let (_, k) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "bob-key"}))).await;
    let bob_key = k["secret"].as_str().unwrap().to_owned();
    for key in [&r.key, &r.key, &bob_key] {
        let resp = r
            .http
            .post(format!("{}/v1/responses", r.t.base))
            .bearer_auth(key)
            .body(RESPONSES_BODY)
            .send()
            .await
            .unwrap();
        resp.text().await.unwrap();
    }
    r.http
        .post(format!("{}/v1/messages", r.t.base))
        .bearer_auth(&bob_key)
        .json(&json!({"model": "claude-opus-4-8", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    r.records(4).await;

    let (status, mine) = bob.call(Method::GET, "/api/me/requests", None).await;
    assert_eq!(status, StatusCode::OK, "{mine}");
    let items = mine["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "only bob's own records");
    assert_eq!(items[0]["model"], "claude-opus-4-8", "newest first");
    assert_eq!(items[0]["key_name"], "bob-key");
    assert!(
        items
            .iter()
            .all(|i| i["account_id"].is_null() && i["account_name"].is_null() && i["username"].is_null())
    );
    // no client input can widen a personal view
    let (_, widened) = bob.call(Method::GET, "/api/me/requests?user_id=1", None).await;
    assert_eq!(widened["items"].as_array().unwrap().len(), 2);
    let (_, filtered) =
        bob.call(Method::GET, "/api/me/requests?model=gpt-5.1-codex&from=&cursor=", None).await;
    assert_eq!(filtered["items"].as_array().unwrap().len(), 1);
    let (status, _) = bob.call(Method::GET, "/api/requests", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = bob.call(Method::GET, "/api/me/requests?cursor=abc", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // a misspelt outcome is named, not answered with an empty history
    let (status, body) = bob.call(Method::GET, "/api/me/requests?outcome=succes", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.to_string().contains("unknown outcome \\\"succes\\\""), "{body}");

    // the seed's API asks a first page as `cursor=0`
    let (_, all) = admin.call(Method::GET, "/api/requests?cursor=0&account_id=&outcome=", None).await;
    let items = all["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert!(items.iter().all(|i| i["username"].is_string() && i["account_name"].is_string()));
    let (_, only_bob) =
        admin.call(Method::GET, &format!("/api/requests?user_id={bob_id}&outcome=success"), None).await;
    assert_eq!(only_bob["items"].as_array().unwrap().len(), 2);
    assert_eq!(only_bob["next_cursor"], Value::Null);

    // a deleted account still shows, as "deleted" (ACC-5)
    admin.call(Method::DELETE, "/api/accounts/2", None).await;
    let (_, all) = admin.call(Method::GET, "/api/requests?account_id=2", None).await;
    assert_eq!(all["items"][0]["account_name"], "deleted");

    // API-2: filter choices from each caller's own retained history, never another's
    let (status, choices) = bob.call(Method::GET, "/api/me/requests/filters", None).await;
    assert_eq!(status, StatusCode::OK, "{choices}");
    assert_eq!(choices["models"], json!(["claude-opus-4-8", "gpt-5.1-codex"]));
    assert_eq!(choices["keys"], json!([{"id": k["key"]["id"], "name": "bob-key", "revoked": false}]));
    assert_eq!(
        (choices["members"].as_array().map(Vec::len), choices["accounts"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );
    assert_eq!(choices["outcomes"][0], "success");
    let (status, _) = bob.call(Method::GET, "/api/requests/filters", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = r.t.client().call(Method::GET, "/api/me/requests/filters", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, everyone) = admin.call(Method::GET, "/api/requests/filters", None).await;
    assert_eq!(everyone["members"].as_array().unwrap().len(), 2, "{everyone}");
    assert_eq!(everyone["keys"].as_array().unwrap().len(), 2);
    assert!(
        everyone["accounts"].as_array().unwrap().iter().any(|a| a["name"] == "deleted (#2)"),
        "{everyone}"
    );
    // a revoked key stays a choice (REC-4)
    bob.call(Method::DELETE, &format!("/api/me/keys/{}", k["key"]["id"]), None).await;
    let (_, choices) = bob.call(Method::GET, "/api/me/requests/filters", None).await;
    assert_eq!(choices["keys"][0]["revoked"], true, "{choices}");

    // API-3: one record by request id: one's own, or any for admins; others' are not found
    let mine_id = mine["items"][0]["request_id"].as_str().unwrap().to_owned();
    let admins_id =
        items.iter().find(|i| i["username"] == "admin").unwrap()["request_id"].as_str().unwrap().to_owned();
    let (status, one) = bob.call(Method::GET, &format!("/api/me/requests/{mine_id}"), None).await;
    assert_eq!((status, one["request_id"].as_str()), (StatusCode::OK, Some(mine_id.as_str())));
    assert!(one["account_id"].is_null() && one["routing"].is_object(), "{one}");
    let (status, _) = bob.call(Method::GET, &format!("/api/me/requests/{admins_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another member's record does not exist for bob");
    let (status, _) = bob.call(Method::GET, &format!("/api/requests/{mine_id}"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, any) = admin.call(Method::GET, &format!("/api/requests/{mine_id}"), None).await;
    assert_eq!((status, any["username"].as_str()), (StatusCode::OK, Some("bob")));
    let (status, _) = admin.call(Method::GET, "/api/requests/req_missing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // the detail page, rendered on the server: the full id and the routing in words
    let page = |path: String| bob.request(Method::GET, &path).header("accept", "text/html").send();
    let html = page(format!("/requests/{mine_id}")).await.unwrap().text().await.unwrap();
    assert!(html.contains(&mine_id) && html.contains("rotation"), "{html}");

    // the Requests page shows the records, rendered on the server
    let html = page("/".to_owned()).await.unwrap().text().await.unwrap();
    assert!(
        html.contains("claude-opus-4-8") && html.contains("bob-key") && html.contains("53.3 %"),
        "{html}"
    );
}

/// PX-6: a stream through SubLane is byte for byte the upstream's (ids and counters aside, which
/// differ between two upstream calls).
#[tokio::test]
async fn streams_are_byte_identical_to_the_upstream() {
    let r = Rig::start().await;
    let digits = |s: &str| s.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect::<String>();
    let body = json!({"model": "claude-opus-4-8", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let direct = r
        .http
        .post(format!("{}/v1/messages", r.mock.url()))
        .bearer_auth(CLAUDE_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let via = r.post("/v1/messages").json(&body).send().await.unwrap().text().await.unwrap();
    assert_eq!(digits(&via), digits(&direct));

    let direct = r
        .http
        .post(format!("{}/backend-api/codex/responses", r.mock.url()))
        .bearer_auth(CODEX_TOKEN)
        .body(RESPONSES_BODY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let via = r.post("/v1/responses").body(RESPONSES_BODY).send().await.unwrap().text().await.unwrap();
    assert_eq!(digits(&via), digits(&direct));
}

/// ADM-3: a member at their concurrency limit gets 429 member_concurrency_exceeded (recorded as
/// rejected); the slot returns when the stream ends.
#[tokio::test]
async fn member_concurrency_limit_rejects_and_frees_on_completion() {
    let r = Rig::start().await;
    let mut admin = r.t.admin().await;
    admin.call(Method::PATCH, "/api/members/1", Some(json!({"concurrency_limit": 1}))).await;
    r.script(CLAUDE_TOKEN, json!({"deltas": 5, "delta_delay_ms": 100})).await;
    let body = json!({"model": "claude-opus-4-8", "max_tokens": 8, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let slow = r.post("/v1/messages").json(&body).send().await.unwrap();
    assert_eq!(slow.status(), StatusCode::OK);

    let resp = r.post("/v1/messages").json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "1");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "member_concurrency_exceeded");

    slow.text().await.unwrap(); // the stream ends, the slot comes back
    let recs = r.records(2).await;
    let ok = r.post("/v1/messages").json(&body).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    ok.text().await.unwrap();
    assert_eq!(recs[0]["outcome"], "rejected");
    assert_eq!(recs[0]["error_code"], "member_concurrency_exceeded");
    assert_eq!(recs[1]["outcome"], "success");
}

/// ADM-2: a full workspace answers 429 workspace_busy without a record, for model calls and
/// model discovery alike.
#[tokio::test]
async fn workspace_capacity_rejects_without_a_record() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let m = mock.url();
    let t = TestServer::start_with(&[
        ("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD),
        ("SUBLANE_ANTHROPIC_BASE_URL", m.as_str()),
        ("SUBLANE_WORKSPACE_CAPACITY", "1"),
    ])
    .await;
    let mut admin = t.admin().await;
    admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({"provider": "anthropic_api", "name": "k", "pool_ids": [1],
            "credentials": {"kind": "api_key", "api_key": "sk-ant-k"}})),
        )
        .await;
    let (_, key) = admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "w"}))).await;
    let key = key["secret"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    http.put(format!("{m}/__mock/accounts/sk-ant-k"))
        .json(&json!({"deltas": 5, "delta_delay_ms": 100}))
        .send()
        .await
        .unwrap();
    let body = json!({"model": "claude-opus-4-8", "max_tokens": 8, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let slow =
        http.post(format!("{}/v1/messages", t.base)).bearer_auth(&key).json(&body).send().await.unwrap();
    assert_eq!(slow.status(), StatusCode::OK);
    let busy =
        http.post(format!("{}/v1/messages", t.base)).bearer_auth(&key).json(&body).send().await.unwrap();
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.headers()["retry-after"], "1");
    let v: Value = busy.json().await.unwrap();
    assert_eq!(v["error"]["code"], "workspace_busy");
    let models = http.get(format!("{}/v1/models", t.base)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(models.status(), StatusCode::TOO_MANY_REQUESTS);
    slow.text().await.unwrap();
    t.records(1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(t.records(0).await.len(), 1, "only the admitted call is recorded");
}
