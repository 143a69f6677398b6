//! Budgets and the key circuit breaker (BUD-4) through the real server, on a fake clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::bed::{Bed, T0};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

impl Bed {
    /// One call the gateway refuses itself (400: no model): a failure for the breaker.
    async fn failing_call(&self) -> (StatusCode, Option<String>, Value) {
        let resp = self.rig.responses(None, json!({"input": "hi"})).send().await.unwrap();
        let status = resp.status();
        let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        (status, retry, resp.json().await.unwrap_or(Value::Null))
    }

    /// `n` failing calls, each answered 400 (the one that trips the breaker included).
    async fn fail(&self, n: usize) {
        for i in 0..n {
            let (status, _, body) = self.failing_call().await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "call {i}: {body}");
        }
    }

    /// The admin's first key (the rig's, before any restart) as the key list shows it, once
    /// `done` holds (trips are stored off the request path).
    async fn key_when(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..100 {
            let (_, keys) = self.rig.admin.call(Method::GET, "/api/me/keys", None).await;
            let key = keys.as_array().unwrap().iter().min_by_key(|k| k["id"].as_i64()).unwrap().clone();
            if done(&key) {
                return key;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("never happened");
    }
}

/// 100 failed requests in 60 s block the key for 30 s (429 with Retry-After, `retry_after` and
/// `blocked_until`, not recorded); the blocks lengthen (2 min, 10 min, 12 h); the 5th trip bans the
/// key for good (403), across restarts, and the key shows as banned.
#[tokio::test]
async fn a_failing_key_is_blocked_then_banned_for_good() {
    let mut bed = Bed::start(&[]).await;
    bed.fail(99).await;
    let before = bed.rig.t.records(0).await.len();
    bed.fail(1).await; // the 100th failure trips; it is answered like the others
    let (status, retry, body) = bed.failing_call().await;
    assert_eq!((status, retry.as_deref()), (StatusCode::TOO_MANY_REQUESTS, Some("30")), "{body}");
    assert_eq!(body["error"]["code"], "api_key_circuit_open");
    assert_eq!(body["error"]["retry_after"], 30);
    assert_eq!(body["error"]["blocked_until"], "2030-03-17T17:47:10Z");
    assert_eq!(body["error"]["message"], "API Key 因最近 60 秒错误率过高已临时熔断，请在 30 秒后重试。");
    assert_eq!(bed.rig.t.records(0).await.len(), before, "blocked requests are not recorded");
    let shown = bed.key_when(|k| k["breaker_trips"] == 1).await;
    assert_eq!(shown["blocked_until"], "2030-03-17T17:47:10Z");

    bed.advance(30);
    bed.fail(100).await; // the block is over; the window starts empty
    let (status, retry, _) = bed.failing_call().await;
    assert_eq!(
        (status, retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some("120")),
        "the 2nd block is 2 min"
    );
    bed.key_when(|k| k["breaker_trips"] == 2).await;

    // trips outlive the process: the block is still in force, and the ladder goes on
    let key = bed.rig.key.clone();
    let mut bed = bed.restart().await;
    bed.rig.key = key.clone();
    let (status, retry, _) = bed.failing_call().await;
    assert_eq!((status, retry.as_deref()), (StatusCode::TOO_MANY_REQUESTS, Some("120")));
    for (wait, next) in [(120, "600"), (600, "43200")] {
        bed.advance(wait);
        bed.fail(100).await;
        let (status, retry, _) = bed.failing_call().await;
        assert_eq!((status, retry.as_deref()), (StatusCode::TOO_MANY_REQUESTS, Some(next)));
    }
    bed.advance(43_200);
    bed.fail(100).await;
    let (status, _, body) = bed.failing_call().await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "api_key_permanently_banned");
    assert_eq!(
        body["error"]["message"],
        "该 API Key 因多次高错误率请求已被永久封禁，无法恢复，请删除后创建新的 API Key。"
    );
    let shown = bed.key_when(|k| k["status"] == "banned").await;
    assert_eq!(shown["breaker_trips"], 5);

    let mut bed = bed.restart().await;
    bed.rig.key = key.clone();
    bed.advance(365 * 86_400);
    let (status, _, body) = bed.failing_call().await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["error"]["message"], "该 API Key 已被永久封禁，无法恢复，请删除后创建新的 API Key。");
    let _ = T0;
}

/// Successes keep a key open however many failures it also has, as long as no more than 90 %
/// of the last 60 s failed; a Gemini client gets the block in its own shape.
#[tokio::test]
async fn mostly_failing_is_not_enough_and_every_protocol_hears_the_block() {
    let mut bed = Bed::start(&[]).await;
    for _ in 0..10 {
        let resp = bed
            .rig
            .http
            .get(format!("{}/v1/models", bed.rig.t.base))
            .bearer_auth(&bed.rig.key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    bed.fail(90).await;
    let (status, _, _) = bed.failing_call().await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "90 of 100 failed: not more than 90 %, no block yet");
    let (status, _, _) = bed.failing_call().await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "92 of 102 is");
    let resp = bed
        .rig
        .http
        .post(format!("{}/v1beta/models/gemini-2.5-pro:generateContent", bed.rig.t.base))
        .header("x-goog-api-key", &bed.rig.key)
        .json(&json!({"contents": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(body["error"]["details"][0]["reason"], "api_key_circuit_open");
    assert_eq!(body["error"]["details"][0]["metadata"]["retry_after"], "30");
    assert_eq!(body["error"]["details"][1]["retryDelay"], "30s");
    let _ = &mut bed;
}
