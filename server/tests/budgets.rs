//! Budgets and the key circuit breaker (BUD-4) through the real server, on a fake clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    bed::{Bed, T0},
    rig::{self, MODEL},
};
use reqwest::{Method, StatusCode, header::HeaderMap};
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

/// Successes keep a key open however many failures it also has, as long as under 90 % of the
/// last 60 s failed (the seed's "90% 以上" counts 90 % itself); a Gemini client gets the block in
/// its own shape.
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
    bed.fail(89).await;
    let (status, _, _) = bed.failing_call().await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "90 of 100 failed: answered, and the key trips");
    let (status, _, _) = bed.failing_call().await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the next call is blocked");
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

/// One Responses call on the rig's key, read to the end: status, headers, body (JSON or the
/// streamed text).
async fn call(bed: &Bed) -> (StatusCode, HeaderMap, Value) {
    let resp = bed.rig.responses(None, rig::body(MODEL)).send().await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let text = resp.text().await.unwrap();
    (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

impl Bed {
    /// The id of the rig's (first) key.
    async fn key_id(&mut self) -> i64 {
        let (_, keys) = self.rig.admin.call(Method::GET, "/api/me/keys", None).await;
        keys.as_array().unwrap().iter().filter_map(|k| k["id"].as_i64()).min().unwrap()
    }

    async fn policy(&mut self, policy: Value) -> i64 {
        let (status, body) = self.rig.admin.call(Method::POST, "/api/budgets", Some(policy)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_i64().unwrap()
    }

    /// The policy as `GET /api/budgets` shows it once its usage is `used` (charges land when a
    /// call's record is made, just after its last byte).
    async fn usage(&mut self, id: i64, used: f64) -> Value {
        let mut shown = Value::Null;
        for _ in 0..100 {
            let (_, all) = self.rig.admin.call(Method::GET, "/api/budgets", None).await;
            shown = all.as_array().unwrap().iter().find(|p| p["id"] == id).unwrap().clone();
            if shown["used"] == used {
                return shown;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("usage never reached {used}: {shown}");
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

/// BUD-2/BUD-3: a key's daily token budget lets the call that crosses it complete and refuses
/// the next (429, the seed's message, `limit`/`used`/`reset_at`, no Retry-After, recorded as
/// rejected); every answer carries the quota headers; usage outlives a restart; the next day in
/// the workspace zone (Shanghai) starts afresh.
#[tokio::test]
async fn a_key_budget_refuses_the_call_after_the_one_that_crosses_it() {
    let mut bed = Bed::start(&[]).await;
    bed.rig.add_account("codex", "tok-budget", 0).await;
    let key = bed.key_id().await;
    let id = bed
        .policy(json!({"subject": "apikey", "subject_id": key, "metric": "total_tokens", "window": "day", "limit": 200}))
        .await;
    // T0 is 2030-03-18 01:46:40 in Shanghai: the day ends at 16:00 UTC, reset_at 90 s later
    let (status, h, _) = call(&bed).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&h, "x-sublane-quota-total_tokens-limit"), Some("200"));
    assert_eq!(header(&h, "x-sublane-quota-total_tokens-remaining"), Some("200"));
    assert_eq!(header(&h, "x-sublane-quota-total_tokens-reset"), Some("2030-03-18T16:01:30Z"));
    bed.usage(id, 127.0).await; // the mock reports 120 input + 7 output tokens
    let (status, h, _) = call(&bed).await;
    assert_eq!(status, StatusCode::OK, "127 of 200 used: this call crosses the limit and completes");
    assert_eq!(header(&h, "x-sublane-quota-total_tokens-remaining"), Some("73"));
    let shown = bed.usage(id, 254.0).await;
    assert_eq!(
        (shown["remaining"].clone(), shown["reset_at"].clone()),
        (json!(0.0), json!("2030-03-18T16:01:30Z"))
    );

    let records = bed.rig.t.records(2).await.len();
    let (status, h, body) = call(&bed).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(header(&h, "retry-after"), None);
    assert_eq!(header(&h, "x-should-retry"), Some("false"), "an SDK's backoff would be refused all day");
    assert_eq!(body["error"]["message"], "rate limit exceeded on apikey total_tokens/day");
    assert_eq!((body["error"]["limit"].clone(), body["error"]["used"].clone()), (json!(200), json!(254)));
    assert_eq!(body["error"]["reset_at"], "2030-03-18T16:01:30Z");
    assert_eq!(header(&h, "x-sublane-quota-total_tokens-remaining"), Some("0"), "refusals carry them too");
    let all = bed.rig.t.records(records + 1).await;
    let last = all.iter().max_by_key(|r| r["id"].as_i64()).unwrap();
    assert_eq!(
        (last["outcome"].as_str(), last["error_code"].as_str()),
        (Some("rejected"), Some("budget_exceeded"))
    );
    bed.usage(id, 254.0).await; // a refusal uses nothing

    let secret = bed.rig.key.clone();
    let mut bed = bed.restart().await;
    bed.rig.key = secret;
    bed.usage(id, 254.0).await;
    assert_eq!(call(&bed).await.0, StatusCode::TOO_MANY_REQUESTS, "still refused after a restart");
    bed.advance(80_000 - 1); // 15:59:59 UTC: still the same Shanghai day
    assert_eq!(call(&bed).await.0, StatusCode::TOO_MANY_REQUESTS);
    bed.advance(1);
    let (status, h, _) = call(&bed).await;
    assert_eq!(status, StatusCode::OK, "a new day");
    assert_eq!(header(&h, "x-sublane-quota-total_tokens-reset"), Some("2030-03-19T16:01:30Z"));
    let _ = T0;
}

/// Member and workspace policies, `minutes` windows and `credits` priced per model; a
/// WebSocket turn is refused like an HTTP call; calls in flight when a limit is reached all
/// complete and are all counted (the overshoot is at most what was in flight).
#[tokio::test]
async fn member_workspace_and_credit_budgets_and_calls_in_flight() {
    let mut bed = Bed::start(&[]).await;
    bed.rig.add_account("codex", "tok-credits", 0).await;
    let (status, prices) = bed
        .rig
        .admin
        .call(
            Method::PUT,
            &format!("/api/prices/{MODEL}"),
            Some(json!({"prompt": 1000, "completion": 10000, "cached": 500})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{prices}");
    // (120 - 64) × 1000 + 64 × 500 + 7 × 10000 micro-credits = 0.158 credits a call
    let credits = bed
        .policy(json!({"subject": "member", "subject_id": 1, "metric": "credits", "window": "month", "limit": 0.2}))
        .await;
    assert_eq!(call(&bed).await.0, StatusCode::OK);
    bed.usage(credits, 0.158).await;
    assert_eq!(call(&bed).await.0, StatusCode::OK);
    bed.usage(credits, 0.316).await;
    let (status, h, body) = call(&bed).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"]["message"], "rate limit exceeded on member credits/month");
    assert_eq!(header(&h, "x-sublane-quota-credits-limit"), Some("0.2"));
    let (status, _) = bed.rig.admin.call(Method::DELETE, &format!("/api/budgets/{credits}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // six calls at once, each 300 ms at the upstream, against a workspace limit of 2 requests
    let ws = bed
        .policy(json!({"subject": "ws", "metric": "requests", "window": "minutes", "window_minutes": 15, "limit": 2}))
        .await;
    bed.rig.script("tok-credits", json!({"delay_ms": 300})).await;
    let calls = (0..6).map(|_| call(&bed));
    let answers = futures_util::future::join_all(calls).await;
    assert!(answers.iter().all(|a| a.0 == StatusCode::OK), "all were admitted before any finished");
    bed.usage(ws, 6.0).await;
    let (status, _, body) = call(&bed).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"]["message"], "rate limit exceeded on ws requests/minutes");
    assert_eq!(body["error"]["window_minutes"], 15);

    // a WebSocket turn hears it as an error event
    let url = format!("{}/v1/responses", bed.rig.t.base.replace("http://", "ws://"));
    let mut req =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url).unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {}", bed.rig.key).parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    use futures_util::{SinkExt, StreamExt};
    let create =
        json!({"type": "response.create", "model": MODEL, "input": [{"role": "user", "content": "hi"}]});
    socket.send(tokio_tungstenite::tungstenite::Message::text(create.to_string())).await.unwrap();
    let frame = loop {
        let msg = socket.next().await.unwrap().unwrap();
        if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
            break serde_json::from_str::<Value>(t.as_str()).unwrap();
        }
    };
    assert_eq!(frame["type"], "error", "{frame}");
    assert_eq!(
        (frame["status"].as_u64(), frame["error"]["type"].as_str()),
        (Some(429), Some("rate_limit_error"))
    );
    assert_eq!(frame["error"]["message"], "rate limit exceeded on ws requests/minutes");
    assert_eq!(frame["error"]["limit"], 2);

    // the next 15-minute window (from the zone's midnight) starts afresh
    bed.advance(15 * 60);
    assert_eq!(call(&bed).await.0, StatusCode::OK);
    // and a WebSocket turn the upstream answers uses a request of it, as an HTTP call does
    socket.send(tokio_tungstenite::tungstenite::Message::text(create.to_string())).await.unwrap();
    let end = loop {
        let msg = socket.next().await.unwrap().unwrap();
        if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
            let event = serde_json::from_str::<Value>(t.as_str()).unwrap();
            if matches!(event["type"].as_str(), Some("response.completed" | "error")) {
                break event;
            }
        }
    };
    assert_eq!(end["type"], "response.completed", "{end}");
    bed.usage(ws, 2.0).await;
    assert_eq!(call(&bed).await.0, StatusCode::TOO_MANY_REQUESTS);
}

/// Who may set what (API): a member sets their own key's budget only and sees the policies
/// that apply to them; bad input names its field; anonymous callers are refused.
#[tokio::test]
async fn members_set_their_own_keys_budget_and_see_what_applies_to_them() {
    let mut bed = Bed::start(&[]).await;
    let admin_key = bed.key_id().await;
    let (mut member, member_id) = bed.rig.t.member(&bed.rig.admin, "budgeted").await;
    let (status, key) = member.call(Method::POST, "/api/me/keys", Some(json!({"name": "mine"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{key}");
    let own = key["key"]["id"].as_i64().unwrap();
    let mine =
        json!({"subject": "apikey", "subject_id": own, "metric": "requests", "window": "day", "limit": 50});
    let (status, body) = member.call(Method::POST, "/api/budgets", Some(mine)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let own_policy = body["id"].as_i64().unwrap();
    let (status, body) =
        member.call(Method::PATCH, &format!("/api/budgets/{own_policy}"), Some(json!({"limit": 80}))).await;
    assert_eq!((status, body["limit"].clone()), (StatusCode::OK, json!(80.0)), "{body}");
    let theirs = json!({"subject": "apikey", "subject_id": admin_key, "metric": "requests", "window": "day", "limit": 5});
    let (status, body) = member.call(Method::POST, "/api/budgets", Some(theirs)).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("subject_id"))
    );
    let on_member = json!({"subject": "member", "subject_id": member_id, "metric": "requests", "window": "day", "limit": 5});
    let (status, _) = member.call(Method::POST, "/api/budgets", Some(on_member.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = member.call(Method::GET, "/api/budgets", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = member.call(Method::GET, "/api/prices", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let admin_only = bed
        .policy(json!({"subject": "apikey", "subject_id": admin_key, "metric": "requests", "window": "total", "limit": 9}))
        .await;
    let (status, body) = member.call(Method::DELETE, &format!("/api/budgets/{admin_only}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // an admin's limit on the member's own key binds them: they cannot lift or remove it, are
    // told why, and their view offers no control for it
    let on_their_key = bed
        .policy(json!({"subject": "apikey", "subject_id": own, "metric": "total_tokens", "window": "day", "limit": 9}))
        .await;
    let (status, body) = member
        .call(Method::PATCH, &format!("/api/budgets/{on_their_key}"), Some(json!({"limit": 1e9})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.to_string().contains("an admin set this budget"), "{body}");
    let (status, _) = member.call(Method::DELETE, &format!("/api/budgets/{on_their_key}"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, quota) = member.call(Method::GET, "/api/me/quota", None).await;
    let changeable =
        |id: i64| quota.as_array().unwrap().iter().find(|p| p["id"] == id).unwrap()["changeable"].clone();
    assert_eq!((changeable(own_policy), changeable(on_their_key)), (json!(true), json!(false)), "{quota}");
    let (status, _) = bed.rig.admin.call(Method::DELETE, &format!("/api/budgets/{on_their_key}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // one budget per subject, metric and window
    let twice =
        json!({"subject": "apikey", "subject_id": own, "metric": "requests", "window": "day", "limit": 1});
    let (status, body) = member.call(Method::POST, "/api/budgets", Some(twice)).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("window")),
        "{body}"
    );
    bed.policy(on_member).await;
    bed.policy(json!({"subject": "ws", "metric": "total_tokens", "window": "month", "limit": 1000000})).await;
    let (status, quota) = member.call(Method::GET, "/api/me/quota", None).await;
    assert_eq!(status, StatusCode::OK);
    let subjects: Vec<&str> =
        quota.as_array().unwrap().iter().map(|p| p["subject"].as_str().unwrap()).collect();
    assert_eq!(subjects, ["apikey", "member", "ws"], "their key's, their own and the workspace's: {quota}");
    assert_eq!(quota[0]["subject_name"], "mine (budgeted)");

    for (bad, field) in [
        (json!({"subject": "ws", "metric": "bogus", "window": "day", "limit": 1}), "metric"),
        (json!({"subject": "ws", "metric": "requests", "window": "minutes", "limit": 1}), "window_minutes"),
        (json!({"subject": "ws", "metric": "requests", "window": "week", "limit": 1}), "window"),
        (json!({"subject": "ws", "metric": "requests", "window": "day", "limit": 1.5}), "limit"),
        (
            json!({"subject": "dept", "subject_id": 1, "metric": "requests", "window": "day", "limit": 1}),
            "subject",
        ),
        (
            json!({"subject": "member", "subject_id": 999, "metric": "requests", "window": "day", "limit": 1}),
            "subject_id",
        ),
    ] {
        let (status, body) = bed.rig.admin.call(Method::POST, "/api/budgets", Some(bad.clone())).await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{bad}: {body}"
        );
    }
    let (status, _) = bed.rig.t.client().call(Method::GET, "/api/me/quota", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// BUD-2 before dispatch: a call admitted while the budget still had room, then queued for a busy
/// account, is checked again when it gets the account: the call that finished meanwhile used the
/// budget up, so it is refused without reaching the upstream.
#[tokio::test]
async fn a_call_that_waited_for_an_account_is_checked_again() {
    let mut bed = Bed::start(&[]).await;
    let account = bed.rig.add_account("codex", "tok-wait", 0).await;
    bed.rig.limit(account, 1).await;
    bed.rig.script("tok-wait", json!({"delay_ms": 300})).await;
    bed.policy(json!({"subject": "ws", "metric": "requests", "window": "day", "limit": 1})).await;
    let second = async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        call(&bed).await
    };
    let (first, second) = tokio::join!(call(&bed), second);
    assert_eq!(first.0, StatusCode::OK);
    assert_eq!(second.0, StatusCode::TOO_MANY_REQUESTS, "{}", second.2);
    assert_eq!(second.2["error"]["message"], "rate limit exceeded on ws requests/day");
    assert_eq!(bed.rig.calls("tok-wait"), 1, "the call that waited never reached the upstream");
}
