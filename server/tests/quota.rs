//! Subscription quota awareness through the real server and the mock upstream (QT-1..QT-5,
//! PACE, PX-4, ID-4), on a fake clock where freshness matters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use chrono::{DateTime, TimeDelta};
use common::{
    bed::{Bed, T0},
    rig::{Answer, MODEL, body, counts, served},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

impl Bed {
    /// The account's runtime view once `done` holds of it (observations are stored in the
    /// background, after the answer went back).
    async fn runtime_when(&mut self, id: i64, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..100 {
            let rt = self.rig.account_runtime(id).await;
            if done(&rt) {
                return rt;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("never happened: {}", self.rig.account_runtime(id).await);
    }

    fn quota_reads(&self, token: &str) -> usize {
        self.rig.calls(&format!("quota:{token}"))
    }

    /// Codex headers: the primary window `used` % with its reset `resets_in` s from now.
    fn codex_headers(&self, used: f64, resets_in: i64) -> Value {
        json!({
            "x-codex-primary-used-percent": used.to_string(),
            "x-codex-primary-window-minutes": "300",
            "x-codex-primary-reset-at": (self.now() + resets_in).to_string(),
            "x-codex-secondary-used-percent": "10",
            "x-codex-secondary-window-minutes": "10080",
            "x-codex-secondary-reset-at": (self.now() + 86_400).to_string(),
        })
    }
}

impl Bed {
    /// A `wham/usage` body that agrees with [`Bed::codex_headers`].
    fn codex_usage(&self, used: f64, resets_in: i64) -> Value {
        json!({"plan_type": "plus", "rate_limit": {"allowed": true, "limit_reached": false,
            "primary_window": {"used_percent": used, "limit_window_seconds": 18000, "reset_at": self.now() + resets_in},
            "secondary_window": {"used_percent": 10, "limit_window_seconds": 604800, "reset_at": self.now() + 86_400}}})
    }

    /// Claude's unified headers: the 5-hour window `used` (0..1) resetting `resets_in` s from now.
    fn claude_headers(&self, used: f64, resets_in: i64) -> Value {
        let reset = (self.now() + resets_in).to_string();
        json!({
            "anthropic-ratelimit-unified-status": if used >= 1.0 { "rejected" } else { "allowed" },
            "anthropic-ratelimit-unified-reset": reset,
            "anthropic-ratelimit-unified-5h-utilization": used.to_string(),
            "anthropic-ratelimit-unified-5h-reset": reset,
            "anthropic-ratelimit-unified-7d-utilization": "0.2",
            "anthropic-ratelimit-unified-7d-reset": (self.now() + 400_000).to_string(),
        })
    }

    /// A Gemini `generateContent` call for `model`, part of conversation `session` when given.
    async fn gemini(&self, model: &str, session: Option<&str>) -> Answer {
        let mut rb = self
            .rig
            .http
            .post(format!("{}/v1beta/models/{model}:generateContent", self.rig.t.base))
            .header("x-goog-api-key", &self.rig.key)
            .json(&json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}));
        if let Some(s) = session {
            rb = rb.header("session_id", s);
        }
        Answer::read(rb.send().await.unwrap()).await
    }

    /// A model list (`/v1/models`, `/v1beta/models`) as the key's caller sees it.
    async fn models(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.rig.t.base);
        self.rig.http.get(url).bearer_auth(&self.rig.key).send().await.unwrap().json().await.unwrap()
    }

    /// A Messages call, part of conversation `session` when given.
    async fn messages(&self, session: Option<&str>) -> Answer {
        let mut rb = self
            .rig
            .http
            .post(format!("{}/v1/messages", self.rig.t.base))
            .header("x-api-key", &self.rig.key)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}));
        if let Some(s) = session {
            rb = rb.header("session_id", s);
        }
        Answer::read(rb.send().await.unwrap()).await
    }
}

/// Nothing observed of the account is left (re-authorized, disabled and enabled).
fn forgotten(rt: &Value) {
    assert_eq!((exhausted_until(rt), rt["quota"].as_array().map(Vec::len)), (None, Some(0)), "{rt}");
}

fn exhausted_until(rt: &Value) -> Option<i64> {
    rt["quota_exhausted_until"].as_i64()
}

/// QT-3, QT-5: a fresh observation of a spent window leaves the account out of new selections
/// (explained as a quota exclusion) until it stops being fresh, exactly 2 minutes later; Clear
/// cooldown does not restore it; disable/enable does (a new quota revision). Claude accounts:
/// their quota comes from answers only, so nothing else observes meanwhile.
#[tokio::test]
async fn a_spent_window_excludes_the_account_only_while_fresh() {
    let mut b = Bed::start(&[]).await;
    let spent = b.rig.add_account("claude", "sk-ant-oat-spent", 0).await;
    b.rig.add_account("claude", "sk-ant-oat-other", 0).await;
    b.rig.script("sk-ant-oat-spent", json!({"quota_headers": b.claude_headers(1.0, 3600)})).await;
    // the first call of the pool lands on the first account; its answer says the quota is spent
    assert_eq!(b.messages(None).await.status, StatusCode::OK);
    let rt = b.runtime_when(spent, |rt| exhausted_until(rt).is_some()).await;
    assert_eq!(exhausted_until(&rt), Some(T0 + 121), "fresh for 2 minutes after the observation");
    let row = &rt["quota"][0];
    assert_eq!((row["label"].as_str(), row["exhausted"].as_bool()), (Some("5-hour"), Some(true)), "{rt}");
    let tokens = ["sk-ant-oat-spent", "sk-ant-oat-other"];
    for _ in 0..4 {
        let before = counts(&b.rig, &tokens);
        assert_eq!(b.messages(None).await.status, StatusCode::OK);
        assert_eq!(served(&b.rig, &tokens, &before), 1, "the spent account is left out");
    }
    let records = b.rig.t.records(5).await;
    assert_eq!(records[4]["routing"]["excluded"]["quota"], 1, "{}", records[4]);
    // QT-5: Clear cooldown never restores quota
    b.rig.action(spent, "clear-cooldown").await;
    assert!(exhausted_until(&b.rig.account_runtime(spent).await).is_some());
    // exactly 2 minutes after the observation it still counts; a millisecond later it is stale
    b.advance(120);
    assert!(exhausted_until(&b.rig.account_runtime(spent).await).is_some());
    b.clock.advance(TimeDelta::milliseconds(1));
    assert_eq!(exhausted_until(&b.rig.account_runtime(spent).await), None, "stale data never means zero");
    let before = b.rig.calls(tokens[0]);
    for _ in 0..2 {
        assert_eq!(b.messages(None).await.status, StatusCode::OK);
    }
    assert_eq!(b.rig.calls(tokens[0]), before + 1, "eligible again: the rotation reaches it");
    b.runtime_when(spent, |rt| exhausted_until(rt).is_some()).await;
    // enabling an account that is already enabled changes nothing
    b.rig.action(spent, "enable").await;
    assert!(exhausted_until(&b.rig.account_runtime(spent).await).is_some());
    // disable/enable: what was observed before no longer holds
    b.rig.action(spent, "disable").await;
    b.rig.action(spent, "enable").await;
    forgotten(&b.rig.account_runtime(spent).await);
}

/// QT-5: a conversation bound to an account whose quota is spent gets 403 `quota_exhausted` and
/// is never moved; another conversation goes elsewhere.
#[tokio::test]
async fn a_bound_conversation_on_a_spent_account_gets_quota_exhausted_and_stays() {
    let mut b = Bed::start(&[]).await;
    let first = b.rig.add_account("codex", "at-bound", 0).await;
    b.rig.add_account("codex", "at-free", 0).await;
    assert_eq!(b.rig.send(Some("conv-1"), MODEL).await.status, StatusCode::OK);
    assert_eq!(b.rig.calls("at-bound"), 1);
    // the next answer of that account says its quota is reached (Codex 429 usage_limit_reached)
    let resets = b.now() + 900;
    b.rig
        .script(
            "at-bound",
            json!({"steps": [{"kind": "status", "status": 429, "code": "usage_limit_reached"}],
                   "quota": {"rate_limit": {"allowed": false, "limit_reached": true,
                      "primary_window": {"used_percent": 100, "limit_window_seconds": 18000, "reset_at": resets}}}}),
        )
        .await;
    let a = b.rig.send(Some("conv-1"), MODEL).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{a:?}");
    // the Accounts page reads the quota: spent
    b.runtime_when(first, |rt| exhausted_until(rt).is_some()).await;
    b.rig.action(first, "clear-cooldown").await;
    let a = b.rig.send(Some("conv-1"), MODEL).await;
    assert_eq!((a.status, a.code(), a.retry_after), (StatusCode::FORBIDDEN, "quota_exhausted", None));
    assert_eq!((b.rig.calls("at-bound"), b.rig.calls("at-free")), (2, 0), "never moved");
    let a = b.rig.send(Some("conv-2"), MODEL).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(b.rig.calls("at-free"), 1, "a new conversation goes to an account with quota");
    // when every account's quota is spent, an unbound request hears BUD-5's answer with the time
    // the soonest observation is checked again
    let usage = b.codex_usage(100.0, 600);
    b.rig.script("at-free", json!({"quota_headers": b.codex_headers(100.0, 600), "quota": usage})).await;
    b.rig.send(Some("conv-3"), MODEL).await;
    b.runtime_when(b.rig.ids[1], |rt| exhausted_until(rt).is_some()).await;
    let a = b.rig.send(None, MODEL).await;
    assert_eq!((a.status, a.code()), (StatusCode::TOO_MANY_REQUESTS, "upstream_quota_exhausted"), "{a:?}");
    assert_eq!(a.retry_after, Some(121));
}

/// QT-4, RT-8, ID-4, PX-4: Antigravity's model list and per-model quota: only the exact
/// requested model (thinking suffix normalized) is checked; a model no account lists is 404
/// `model_not_found`; `/v1beta/models` lists the catalogue in Gemini's shape.
#[tokio::test]
async fn antigravity_checks_only_the_requested_model_and_lists_its_catalogue() {
    let mut b = Bed::start(&[]).await;
    let id = b.rig.add_account("antigravity", "ya29.q", 0).await;
    let reset = DateTime::from_timestamp(b.now() + 3600, 0).unwrap().to_rfc3339();
    b.rig
        .script(
            "ya29.q",
            json!({"quota": {"models": {
                "gemini-3.1-pro-low": {"quotaInfo": {"remainingFraction": 0, "resetTime": reset}},
                "gemini-3.6-flash-high": {"quotaInfo": {"remainingFraction": 0.5, "resetTime": reset}},
                // (the real catalogue carries internal ids too)
                "chat_20706": {"quotaInfo": {"remainingFraction": 1, "resetTime": reset}}}}}),
        )
        .await;
    // opening the Accounts page reads the quota (no model traffic needed)
    let rt = b.runtime_when(id, |rt| rt["quota"].as_array().is_some_and(|q| q.len() == 3)).await;
    assert_eq!(exhausted_until(&rt), None, "one model's quota never blocks the account");
    assert_eq!(b.quota_reads("ya29.q"), 1);
    for spent in ["gemini-3.1-pro-low", "gemini-3.1-pro-low(high)"] {
        let a = b.gemini(spent, None).await;
        assert_eq!(
            (a.status, a.code()),
            (StatusCode::TOO_MANY_REQUESTS, "upstream_quota_exhausted"),
            "{spent}"
        );
        assert_eq!(a.retry_after, Some(121), "checked again when the observation goes stale");
    }
    assert_eq!(b.gemini("gemini-3.6-flash-high", None).await.status, StatusCode::OK);
    let a = b.gemini("gemini-9-ultra", None).await;
    assert_eq!((a.status, a.code()), (StatusCode::NOT_FOUND, "model_not_found"));
    assert_eq!(b.rig.calls("ya29.q"), 1, "neither refusal reached the upstream");
    let records = b.rig.t.records(4).await;
    assert_eq!(records[0]["routing"]["excluded"]["quota"], 1, "{}", records[0]);
    let list = b.models("/v1beta/models").await;
    let names: Vec<&str> =
        list["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["models/chat_20706", "models/gemini-3.1-pro-low", "models/gemini-3.6-flash-high"]);
    // an OpenAI client is offered what Chat Completions would send to this account: not an id
    // whose name sends it elsewhere
    let list = b.models("/v1/models").await;
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["gemini-3.1-pro-low", "gemini-3.6-flash-high"]);
    // under Antigravity's prefix the same, for an OpenAI client whose chat completions are there;
    // google-genai, whose default API version is there too, gets Gemini's list by its key header
    let list = b.models("/antigravity/v1/models").await;
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["gemini-3.1-pro-low", "gemini-3.6-flash-high"]);
    let one = b.models("/antigravity/v1/models/gemini-3.1-pro-low").await;
    assert_eq!((one["id"].as_str(), one["object"].as_str()), (Some("gemini-3.1-pro-low"), Some("model")));
    let genai = |path: &str| {
        let url = format!("{}{path}", b.rig.t.base);
        b.rig.http.get(url).header("x-goog-api-key", &b.rig.key).send()
    };
    let list: Value = genai("/antigravity/v1/models").await.unwrap().json().await.unwrap();
    assert_eq!(list["models"].as_array().unwrap().len(), 3, "{list}");
    let one: Value = genai("/antigravity/v1/models/gemini-3.1-pro-low").await.unwrap().json().await.unwrap();
    assert_eq!(one["name"], "models/gemini-3.1-pro-low", "{one}");
    // the reset passes: the model is eligible again (and checked anew)
    b.advance(3600);
    assert_eq!(b.gemini("gemini-3.1-pro-low", None).await.status, StatusCode::OK);
}

/// QT-1: 50 concurrent requests over five accounts with no quota data start one read per
/// account, at most two at a time, and none of the requests waits for them.
#[tokio::test]
async fn reads_are_capped_at_two_and_coalesced_under_concurrent_traffic() {
    let b = Bed::start(&[]).await;
    let mut rig = b.rig;
    let tokens = ["at-r1", "at-r2", "at-r3", "at-r4", "at-r5"];
    for t in tokens {
        rig.add_account("codex", t, 0).await;
        rig.script(t, json!({"quota_delay_ms": 1500, "quota_headers": {}})).await;
    }
    let started = std::time::Instant::now();
    let calls = (0..50).map(|_| rig.responses(None, body(MODEL)).send());
    for resp in futures_util::future::join_all(calls).await {
        let resp = resp.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.text().await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_millis(1500), "requests never wait for quota reads");
    for _ in 0..400 {
        if tokens.iter().all(|t| rig.calls(&format!("quota:{t}")) == 1) && rig.mock.state.peak("quota") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1600)).await;
    for t in tokens {
        assert_eq!(rig.calls(&format!("quota:{t}")), 1, "one read for {t}");
    }
    assert_eq!(rig.mock.state.peak("quota"), 2, "at most two reads at once");
}

/// QT-2: observations survive a restart; a re-authorization invalidates them. A failed read
/// keeps the last good value only until its own freshness deadline and hides the pace.
#[tokio::test]
async fn observations_survive_restart_and_a_failed_read_keeps_them_only_until_their_deadline() {
    let mut b = Bed::start(&[]).await;
    let id = b.rig.add_account("codex", "at-keep", 0).await;
    let resets = b.now() + 9000;
    b.rig
        .script(
            "at-keep",
            json!({"quota": {"rate_limit": {"allowed": true, "limit_reached": false,
                "primary_window": {"used_percent": 100, "limit_window_seconds": 18000, "reset_at": resets},
                "secondary_window": {"used_percent": 30, "limit_window_seconds": 604800, "reset_at": b.now() + 86400}}}}),
        )
        .await;
    b.runtime_when(id, |rt| exhausted_until(rt).is_some()).await;
    let mut b = b.restart().await;
    let rt = b.rig.account_runtime(id).await;
    assert_eq!(exhausted_until(&rt), Some(T0 + 121), "survives a restart: {rt}");
    // a failed read: the last good value holds until its deadline, pace hidden meanwhile
    b.rig.script("at-keep", json!({"quota_status": 503})).await;
    b.advance(60);
    let (status, _) = b.rig.admin.call(Method::POST, "/api/accounts/quota/refresh", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK);
    let rt = b.rig.account_runtime(id).await;
    assert_eq!(exhausted_until(&rt), Some(T0 + 121), "{rt}");
    assert_eq!(rt["quota"][0]["pace"], json!({"kind": "hidden", "reason": "refresh_failed"}));
    b.advance(61);
    assert_eq!(exhausted_until(&b.rig.account_runtime(id).await), None);
    // a good read again, then a re-authorization: the old grant's observations go
    b.rig
        .script("at-keep", json!({"quota": {"rate_limit": {"allowed": false, "limit_reached": true}}}))
        .await;
    b.advance(120);
    b.runtime_when(id, |rt| exhausted_until(rt).is_some()).await;
    let (status, body) = b
        .rig
        .admin
        .call(
            Method::PATCH,
            &format!("/api/accounts/{id}"),
            Some(json!({"credentials": {"kind": "oauth", "access_token": "at-keep-2", "provider_account_id": "p"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    b.rig.script("at-keep-2", json!({"quota_status": 503})).await;
    forgotten(&b.rig.account_runtime(id).await);
}

/// PACE-1/PACE-2: a row's pace is computed at the observation time and shipped typed; it is
/// hidden once the observation is stale.
#[tokio::test]
async fn quota_rows_carry_pace_computed_at_the_observation() {
    let mut b = Bed::start(&[]).await;
    let id = b.rig.add_account("claude", "sk-ant-oat-pace", 0).await;
    // half of the 5-hour window elapsed, 70 % used: +20 points
    b.rig.script("sk-ant-oat-pace", json!({"quota_headers": b.claude_headers(0.7, 150 * 60)})).await;
    assert_eq!(b.messages(None).await.status, StatusCode::OK);
    let rt = b.runtime_when(id, |rt| rt["quota"].as_array().is_some_and(|q| !q.is_empty())).await;
    let row = &rt["quota"][0];
    assert_eq!(row["pace"], json!({"kind": "shown", "points": 20.0, "elapsed_percent": 50.0}), "{rt}");
    assert_eq!(row["used_percent"], 70.0);
    assert_eq!(row["window_minutes"], 300);
    b.advance(100);
    let rt = b.rig.account_runtime(id).await;
    assert_eq!(rt["quota"][0]["pace"]["points"], 20.0, "the viewer's later time changes nothing");
    b.advance(21);
    let rt = b.rig.account_runtime(id).await;
    assert_eq!(rt["quota"][0]["pace"], json!({"kind": "hidden", "reason": "stale"}));
}

/// QT-2: Codex's `codex.rate_limits` WebSocket frames are observed like its headers.
#[tokio::test]
async fn websocket_rate_limit_frames_are_observed() {
    let mut b = Bed::start(&[]).await;
    let id = b.rig.add_account("codex", "at-ws", 0).await;
    let frame = json!({"type": "codex.rate_limits", "plan_type": "pro", "rate_limits": {
        "primary": {"used_percent": 100.0, "window_minutes": 300, "reset_at": b.now() + 600},
        "secondary": {"used_percent": 20.0, "window_minutes": 10080, "reset_at": b.now() + 86400}}});
    // reads fail: what is observed comes from the frame alone
    b.rig
        .script("at-ws", json!({"rate_limits_frame": frame, "quota_headers": {}, "quota_status": 503}))
        .await;
    let events = b.ws_turn().await;
    assert_eq!(events[0]["type"], "codex.rate_limits", "the frame reaches the client unchanged");
    let rt = b.runtime_when(id, |rt| exhausted_until(rt).is_some()).await;
    assert_eq!(rt["quota"][1]["used_percent"], 20.0, "{rt}");
}

/// QT-4/QT-5 on the answer path: Antigravity's 429 `QUOTA_EXHAUSTED` for a model spends that
/// model only; a conversation bound there hears 403 `quota_exhausted` (not a rate limit) and
/// stays; a thinking suffix travels upstream as the request's thinking setting.
#[tokio::test]
async fn an_antigravity_quota_exhausted_answer_spends_only_that_model() {
    let mut b = Bed::start(&[]).await;
    let id = b.rig.add_account("antigravity", "ya29.p", 0).await;
    b.rig.account_runtime(id).await; // the catalogue read (the mock's default models)
    // a suffixed model reaches the upstream as the base id with its thinking level
    let a = b.gemini("gemini-3.1-pro-low(high)", Some("c1")).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    let call = b.rig.mock.state.calls("ya29.p").pop().unwrap();
    assert_eq!(call.model.as_deref(), Some("gemini-3.1-pro-low"));
    let exhausted = json!({"kind": "resource_exhausted", "reason": "QUOTA_EXHAUSTED",
        "model": "gemini-3.1-pro-low", "retry_delay": "3600s"});
    b.rig.script("ya29.p", json!({"steps": [exhausted]})).await;
    let a = b.gemini("gemini-3.1-pro-low(high)", Some("c1")).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "the upstream's own answer goes back");
    // with its RetryInfo, which gemini-cli reads to stop rather than retry an hour-long exhaustion
    assert_eq!((a.retry_after, a.retry_info()), (Some(3600), Some("3600s")), "{a:?}");
    let spent = |rt: &Value| rt["quota"].as_array().is_some_and(|q| q.iter().any(|r| r["exhausted"] == true));
    b.runtime_when(id, spent).await;
    let a = b.gemini("gemini-3.1-pro-low", Some("c1")).await;
    assert_eq!((a.status, a.code()), (StatusCode::FORBIDDEN, "quota_exhausted"), "{a:?}");
    let other = b.gemini("gemini-3.6-flash-high", Some("c2")).await;
    assert_eq!(other.status, StatusCode::OK, "{other:?}");
    assert_eq!(exhausted_until(&b.rig.account_runtime(id).await), None, "the account itself serves on");
}

/// QT-1: no traffic, no reads: an idle gateway polls nothing, whatever the time.
#[tokio::test]
async fn an_idle_gateway_reads_nothing() {
    let b = Bed::start(&[]).await;
    let mut rig = b.rig;
    rig.add_account("codex", "at-idle", 0).await;
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reads = rig.calls("quota:at-idle");
    assert_eq!(reads, 1, "the first request read the new account");
    b.clock.advance(TimeDelta::hours(6));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rig.calls("quota:at-idle"), reads, "hours later, without traffic, no read");
}

/// RT-8, ID-4, PX-4: an operator's model list closes its provider: another model is 404
/// `model_not_found` before any upstream call, in or out of a conversation, and `/v1/models` lists
/// exactly the configured models.
#[tokio::test]
async fn a_configured_model_list_decides_what_the_pool_serves() {
    let mut b = Bed::start(&[("SUBLANE_CODEX_MODELS", "gpt-5.1-codex, gpt-5.1")]).await;
    b.rig.add_account("codex", "at-listed", 0).await;
    assert_eq!(b.rig.send(Some("conv"), "gpt-5.1").await.status, StatusCode::OK);
    for session in [None, Some("conv")] {
        let a = b.rig.send(session, "gpt-9").await;
        assert_eq!((a.status, a.code()), (StatusCode::NOT_FOUND, "model_not_found"), "{session:?}");
    }
    assert_eq!(b.rig.calls("at-listed"), 1, "no upstream call for an unlisted model");
    let list = b.models("/v1/models").await;
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["gpt-5.1", "gpt-5.1-codex"]);
}
