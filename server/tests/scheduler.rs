//! The scheduler through the real server against the mock upstream: account permits and pool
//! queues (ADM-1, ADM-6, ADM-7), binding and rotation (RT-1..RT-5, RT-7), account state and
//! recovery (ACC-1, ACC-3, ACC-4), the failure policy (CD-1..CD-5) and routing explanations
//! (EXP-1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    TestServer,
    rig::{Answer, MODEL, Rig, body, counts, served},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sublane::mock_upstream::MockUpstream;

#[tokio::test]
async fn bound_conversations_stay_and_unbound_requests_rotate() {
    let tokens = ["rot-a", "rot-b"];
    let rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[]).await;
    // RT-4/RT-5: unbound requests alternate between the two accounts
    for _ in 0..4 {
        assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    }
    assert_eq!(counts(&rig, &tokens), vec![2, 2]);
    // RT-4: each got a random upstream session id of its own
    let ids: std::collections::BTreeSet<String> = tokens
        .iter()
        .flat_map(|t| rig.mock.state.calls(t))
        .map(|c| c.headers["session-id"].clone())
        .collect();
    assert_eq!(ids.len(), 4);
    assert!(ids.iter().all(|id| id.len() == 36), "{ids:?}");
    // RT-1: a conversation stays on the account its first request chose
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-1"), MODEL).await.status, StatusCode::OK);
    let first = served(&rig, &tokens, &before);
    for _ in 0..4 {
        let before = counts(&rig, &tokens);
        assert_eq!(rig.send(Some("conv-1"), MODEL).await.status, StatusCode::OK);
        assert_eq!(served(&rig, &tokens, &before), first);
    }
    // the same session id from the prompt cache key binds the same way
    let before = counts(&rig, &tokens);
    let mut b = body(MODEL);
    b["prompt_cache_key"] = json!("cache-conv");
    rig.responses(None, b.clone()).send().await.unwrap().text().await.unwrap();
    let cached = served(&rig, &tokens, &before);
    for _ in 0..3 {
        let before = counts(&rig, &tokens);
        rig.responses(None, b.clone()).send().await.unwrap().text().await.unwrap();
        assert_eq!(served(&rig, &tokens, &before), cached);
    }
    // EXP-1: the rule and counts are stored, nothing naming an account (exclusions that are all
    // zero are left out of the row, and read back as zeros)
    let recs = rig.t.records(12).await;
    assert_eq!(recs[0]["routing"], json!({"rule": "uniform_rotation", "candidates": 2}));
    assert_eq!(recs[5]["routing"]["rule"], "session_binding");
    assert!(!recs.iter().any(|r| r["routing"].to_string().contains("rot-")));
    // the member's own history carries the explanation (counts only), as the API returns it
    let mut admin = rig.t.admin().await;
    let (_, page) = admin.call(Method::GET, "/api/me/requests", None).await;
    let oldest = page["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(oldest["routing"]["rule"], "uniform_rotation", "{oldest}");
    assert_eq!(oldest["routing"]["candidates"], 2);
    assert_eq!(
        oldest["routing"]["excluded"],
        json!({"model_support": 0, "policy": 0, "quota": 0, "cooldown": 0, "capacity": 0, "unavailable": 0})
    );
    assert!(oldest["account_id"].is_null(), "no account fields in a personal view");
}

#[tokio::test]
async fn a_429_cools_that_account_only_and_the_highest_tier_comes_first() {
    let tokens = ["tier-high", "tier-low"];
    let mut rig = Rig::start(&[(tokens[0], 5), (tokens[1], 0)], &[]).await;
    // RT-5: the highest priority tier takes everything while it can
    for _ in 0..3 {
        assert_eq!(rig.send(Some("conv-t"), MODEL).await.status, StatusCode::OK);
        assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    }
    assert_eq!(counts(&rig, &tokens), vec![6, 0]);
    rig.script(tokens[0], json!({"steps": [{"kind": "status", "status": 429, "retry_after": "30"}]})).await;
    // ACC-2: an unbound request moves to the next account before any byte reaches the client;
    // one record, on the account that served it
    let resp = rig.responses(None, body(MODEL)).send().await.unwrap();
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(Answer::read(resp).await.status, StatusCode::OK);
    assert_eq!(counts(&rig, &tokens), vec![7, 1]);
    let recs = rig.t.records(7).await;
    let moved: Vec<&Value> = recs.iter().filter(|r| r["request_id"] == request_id.as_str()).collect();
    assert_eq!(moved.len(), 1);
    assert_eq!((&moved[0]["outcome"], &moved[0]["account_id"]), (&json!("success"), &json!(rig.ids[1])));
    // ADM-9 / RT-2: the bound conversation does not move; it is told how long to wait
    let a = rig.send(Some("conv-t"), MODEL).await;
    assert_eq!(a.code(), "account_cooling");
    assert!(a.retry_after.is_some_and(|s| (29..=30).contains(&s)), "{a:?}");
    // unbound requests simply use the next tier
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), 1);
    let recs = rig.t.records(9).await;
    let last = &recs[8]["routing"];
    assert_eq!((last["candidates"].as_i64(), last["excluded"]["cooldown"].as_i64()), (Some(1), Some(1)));
    let high = rig.account_runtime(rig.ids[0]).await;
    assert!(high["rate_limit_reset_at"].is_i64() && high["rate_limited_at"].is_i64(), "{high}");
    // ACC-3 resume: cleared at once
    rig.action(rig.ids[0], "resume").await;
    assert_eq!(rig.send(Some("conv-t"), MODEL).await.status, StatusCode::OK);
}

#[tokio::test]
async fn account_permits_hold_and_the_queue_hands_slots_on_in_order() {
    let token = "permit-a";
    let mut rig = Rig::start(&[(token, 0)], &[("SUBLANE_QUEUE_CAPACITY", "3")]).await;
    let id = rig.ids[0];
    rig.limit(id, 2).await;
    rig.script(token, json!({"delay_ms": 800})).await;
    let started = Instant::now();
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let rb = rig.responses(None, body(MODEL));
            tokio::spawn(async move {
                // a small stagger so the six arrive in order
                tokio::time::sleep(Duration::from_millis(i * 15)).await;
                let a = Answer::read(rb.send().await.unwrap()).await;
                (a, started.elapsed())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    let refused: Vec<&Answer> =
        answers.iter().map(|(a, _)| a).filter(|a| a.status != StatusCode::OK).collect();
    assert_eq!(refused.len(), 1, "{answers:?}");
    assert_eq!((refused[0].code(), refused[0].retry_after), ("account_queue_full", Some(1)));
    assert_eq!(rig.mock.state.peak(token), 2, "never more than the account's 2 slots in flight");
    assert_eq!(rig.calls(token), 5);
    rig.settled().await;
    let recs = rig.t.records(6).await;
    let rejected: Vec<&Value> = recs.iter().filter(|r| r["outcome"] == "rejected").collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["routing"]["excluded"]["capacity"], 1);
}

#[tokio::test]
async fn waiting_times_out_and_a_cancelled_waiter_leaves_the_queue() {
    let token = "wait-a";
    let mut rig = Rig::start(&[(token, 0)], &[("SUBLANE_QUEUE_TIMEOUT", "300ms")]).await;
    let id = rig.ids[0];
    rig.limit(id, 1).await;
    rig.script(token, json!({"delay_ms": 1500})).await;
    let holder = rig.responses(None, body(MODEL)).send();
    let holder = tokio::spawn(async move { Answer::read(holder.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    let a = rig.send(None, MODEL).await;
    assert_eq!(
        (a.status, a.code(), a.retry_after),
        (StatusCode::TOO_MANY_REQUESTS, "account_wait_timeout", Some(1))
    );
    assert!(t0.elapsed() >= Duration::from_millis(300) && t0.elapsed() < Duration::from_millis(1200));
    // a waiter whose client gives up is out of the queue at once (ADM-7)
    let quitter = rig.responses(None, body(MODEL)).timeout(Duration::from_millis(100)).send().await;
    assert!(quitter.is_err());
    let mut depth = Value::Null;
    for _ in 0..50 {
        depth = rig.account_runtime(id).await["queue_depth"].clone();
        if depth == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(depth, 0);
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    assert_eq!(rig.calls(token), 1, "waiting never reached the upstream");
    rig.settled().await;
}

#[tokio::test]
async fn a_raised_limit_wakes_a_waiter_at_once() {
    let token = "raise-a";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    let id = rig.ids[0];
    rig.limit(id, 1).await;
    rig.script(token, json!({"delay_ms": 800})).await;
    let first = rig.responses(None, body(MODEL)).send();
    let first = tokio::spawn(async move { Answer::read(first.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = rig.responses(None, body(MODEL)).send();
    let second = tokio::spawn(async move { Answer::read(second.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rig.account_runtime(id).await["queue_depth"], 1);
    rig.limit(id, 2).await;
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    assert_eq!(second.await.unwrap().status, StatusCode::OK);
    assert_eq!(rig.mock.state.peak(token), 2, "the waiter went upstream while the first call was running");
    rig.settled().await;
}

#[tokio::test]
async fn hundreds_of_concurrent_requests_never_exceed_a_limit_and_all_slots_return() {
    let tokens = ["load-a", "load-b"];
    let mut rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[("SUBLANE_QUEUE_CAPACITY", "400")]).await;
    for (i, t) in tokens.iter().enumerate() {
        rig.limit(rig.ids[i], 3).await;
        rig.script(t, json!({"delay_ms": 15})).await;
    }
    let mut tasks = Vec::new();
    for i in 0..240 {
        let session = (i % 3 == 0).then(|| format!("load-conv-{}", i % 12));
        let rb = rig.responses(session.as_deref(), body(MODEL));
        // every tenth client gives up early, some while waiting
        let rb = if i % 10 == 5 { rb.timeout(Duration::from_millis(40)) } else { rb };
        tasks.push(tokio::spawn(async move {
            match rb.send().await {
                Ok(resp) => Some(Answer::read(resp).await.status),
                Err(_) => None,
            }
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Some(StatusCode::OK) => ok += 1,
            Some(other) => panic!("unexpected {other}"),
            None => {}
        }
    }
    assert!(ok >= 216, "every client that waited was served: {ok}");
    for t in tokens {
        assert!(rig.mock.state.peak(t) <= 3, "{t} peaked at {}", rig.mock.state.peak(t));
    }
    rig.settled().await;
}

#[tokio::test]
async fn a_bound_conversation_waits_for_its_account_while_unbound_requests_move_on() {
    let tokens = ["bound-a", "bound-b"];
    let mut rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[]).await;
    for i in 0..2 {
        rig.limit(rig.ids[i], 1).await;
    }
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-w"), MODEL).await.status, StatusCode::OK);
    let mine = served(&rig, &tokens, &before);
    rig.script(tokens[mine], json!({"delay_ms": 700})).await;
    let busy = rig.responses(Some("conv-w"), body(MODEL)).send();
    let busy = tokio::spawn(async move { Answer::read(busy.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    let waiting = rig.responses(Some("conv-w"), body(MODEL)).send();
    let waiting = tokio::spawn(async move {
        let a = Answer::read(waiting.await.unwrap()).await;
        (a, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = counts(&rig, &tokens);
    let free = rig.send(None, MODEL).await;
    let unbound_took = t0.elapsed();
    assert_eq!(free.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), 1 - mine, "the unbound request used the free account");
    assert_eq!(busy.await.unwrap().status, StatusCode::OK);
    let (a, bound_took) = waiting.await.unwrap();
    assert_eq!(a.status, StatusCode::OK);
    assert!(bound_took > unbound_took, "the bound request waited for its own account");
    assert_eq!(rig.calls(tokens[mine]), 3, "all of the conversation's calls went to its account");
    rig.settled().await;
}

#[tokio::test]
async fn a_conversation_moves_only_off_an_account_that_does_not_support_its_new_model() {
    let tokens = ["switch-a", "switch-b"];
    let mut rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[("SUBLANE_FAILURE_THRESHOLD", "1")]).await;
    let (m1, m2) = ("gpt-5.1-codex", "gpt-5.1-codex-mini");
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-s"), m1).await.status, StatusCode::OK);
    let mine = served(&rig, &tokens, &before);
    // m2 fails on the bound account (three 500s are one logical failure after retries)
    rig.script(tokens[mine], json!({"steps": [
        {"kind": "status", "status": 500}, {"kind": "status", "status": 500}, {"kind": "status", "status": 500}]}))
    .await;
    assert_eq!(rig.send(Some("conv-s"), m2).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    // Cooling never moves a conversation (RT-2, seed 000), not even a model switch with its
    // whole history: it is told the model is cooling.
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-s"), m2).await.code(), "model_cooling");
    assert_eq!(counts(&rig, &tokens), before);
    rig.action(rig.ids[mine], "clear-cooldown").await;
    // The bound account does not support m2. A continuation never moves: the upstream's answer
    // comes back as it came.
    rig.script(
        tokens[mine],
        json!({"steps": [{"kind": "status", "status": 404}, {"kind": "status", "status": 404}]}),
    )
    .await;
    let mut cont = body(m2);
    cont["previous_response_id"] = json!("resp_123");
    let before = counts(&rig, &tokens);
    let a = Answer::read(rig.responses(Some("conv-s"), cont).send().await.unwrap()).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(served(&rig, &tokens, &before), mine);
    // A client-side switch with its whole history moves off it (RT-3), and the binding follows.
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-s"), m2).await.status, StatusCode::OK);
    assert_eq!(rig.calls(tokens[mine]), before[mine] + 1, "asked once, answered model_not_found");
    assert_eq!(rig.calls(tokens[1 - mine]), before[1 - mine] + 1, "then served elsewhere");
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-s"), m1).await.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), 1 - mine);
}

#[tokio::test]
async fn codex_review_requests_prefer_the_parent_account_without_touching_its_binding() {
    let tokens = ["review-a", "review-b"];
    let mut rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[]).await;
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("parent-thread"), MODEL).await.status, StatusCode::OK);
    let parent = served(&rig, &tokens, &before);
    // as Codex sends it: the parent's session id, the review's own thread id, and the
    // hidden review model (a model switch that must not touch the parent's binding)
    let review = |child: &str| {
        rig.responses(Some("parent-thread"), body("codex-auto-review"))
            .header("thread-id", child)
            .header("x-openai-subagent", "review")
            .header("x-codex-parent-thread-id", "parent-thread")
    };
    for child in ["child-1", "child-2", "child-3"] {
        let before = counts(&rig, &tokens);
        assert_eq!(Answer::read(review(child).send().await.unwrap()).await.status, StatusCode::OK);
        assert_eq!(served(&rig, &tokens, &before), parent, "{child} went to the parent's account");
    }
    let recs = rig.t.records(4).await;
    assert_eq!(recs[1]["routing"]["rule"], "parent_session");
    // the parent's account cooling: a new review falls back to normal scheduling ...
    rig.script(tokens[parent], json!({"steps": [{"kind": "status", "status": 429, "retry_after": "60"}]}))
        .await;
    assert_eq!(rig.send(Some("parent-thread"), MODEL).await.status, StatusCode::TOO_MANY_REQUESTS);
    let before = counts(&rig, &tokens);
    assert_eq!(Answer::read(review("child-4").send().await.unwrap()).await.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), 1 - parent);
    // ... and the parent stays bound to its own account
    assert_eq!(rig.send(Some("parent-thread"), MODEL).await.code(), "account_cooling");
    rig.action(rig.ids[parent], "resume").await;
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("parent-thread"), MODEL).await.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), parent);
}

#[tokio::test]
async fn retries_stay_on_one_account_and_repeated_failures_cool_only_that_model() {
    let token = "fail-a";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    let status = |s: u16| json!({"kind": "status", "status": s});
    // CD-3: 502 and 503 retried on the same account, one record, one request id
    rig.script(token, json!({"steps": [status(502), status(503)]})).await;
    let resp = rig.responses(None, body(MODEL)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    resp.text().await.unwrap();
    assert_eq!(rig.calls(token), 3);
    let recs = rig.t.records(1).await;
    assert_eq!(
        (recs.len(), &recs[0]["outcome"], recs[0]["request_id"].as_str()),
        (1, &json!("success"), Some(request_id.as_str()))
    );
    // a long upstream hint goes back to the client instead of being waited out
    rig.script(token, json!({"steps": [{"kind": "status", "status": 503, "retry_after": "30"}]})).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.status, a.retry_after), (StatusCode::SERVICE_UNAVAILABLE, Some(30)));
    assert_eq!(a.code(), "server_is_overloaded", "the upstream's code, which Codex reads on a 503");
    assert_eq!(rig.calls(token), 4);
    // 429, 403 and client errors are never replayed; client errors mark nothing (ERR-1)
    rig.script(token, json!({"steps": [status(400), status(404), status(422)]})).await;
    for _ in 0..3 {
        assert!(rig.send(None, MODEL).await.status.is_client_error());
    }
    assert_eq!(rig.calls(token), 7);
    // a malformed request hears the upstream's words about it, without what may name the account
    let words = "max_tokens: 64001 > 64000 for org-abc123 (ops@example.com), see\u{7}docs";
    rig.script(token, json!({"steps": [{"kind": "status", "status": 400, "message": words}]})).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!(
        a.body["error"]["message"],
        "the upstream provider answered 400 (invalid_request_error): max_tokens: 64001 > 64000 for [redacted] [redacted] see docs",
        "{a:?}"
    );
    assert_eq!(rig.calls(token), 8);
    // CD-2: two more logical failures (three calls each) make three: the model cools
    rig.script(
        token,
        json!({"steps": [status(500), status(500), status(500), status(500), status(500), status(500)]}),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(rig.send(None, MODEL).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(rig.calls(token), 14);
    let a = rig.send(None, MODEL).await;
    assert_eq!(a.code(), "model_cooling");
    assert!(a.retry_after.is_some_and(|s| (1..=10).contains(&s)), "{a:?}");
    assert_eq!(rig.calls(token), 14, "a cooling model is not sent upstream");
    // other models of the account stay eligible
    assert_eq!(rig.send(None, "gpt-5.1-codex-mini").await.status, StatusCode::OK);
    let rt = rig.account_runtime(rig.ids[0]).await;
    assert_eq!(rt["limited_models"], 1, "{rt}");
    let m = rt["models"].as_array().unwrap().iter().find(|m| m["model"] == MODEL).unwrap();
    assert!(m["cooling_until"].is_i64() && m["cooldown_level"] == 1, "{m}");
}

/// A refusal whose wait outlasts a client's own retries says `x-should-retry: false`, which the
/// official SDKs obey (anthropic-python would otherwise sleep through the whole Retry-After, up
/// to an hour, twice); an unbound request's Retry-After is when the pool's soonest block ends.
#[tokio::test]
async fn a_refusal_for_minutes_tells_clients_not_to_retry_and_when_to_come_back() {
    let tokens = ["wait-a", "wait-b"];
    let mut rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[]).await;
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-w"), MODEL).await.status, StatusCode::OK);
    let mine = served(&rig, &tokens, &before);
    let other = 1 - mine;
    let limit = |secs: &str| json!({"steps": [{"kind": "status", "status": 429, "retry_after": secs}]});
    rig.script(tokens[mine], limit("600")).await;
    // RT-2: the bound conversation waits for its account, ten minutes, past what a client waits:
    // the upstream's answer says so, and so does the refusal of its next request
    let a = rig.send(Some("conv-w"), MODEL).await;
    assert_eq!(
        (a.status, a.should_retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some("false")),
        "{a:?}"
    );
    let a = rig.send(Some("conv-w"), MODEL).await;
    assert_eq!((a.code(), a.should_retry.as_deref()), ("account_cooling", Some("false")), "{a:?}");
    assert!(a.retry_after.is_some_and(|s| s > 590), "{a:?}");
    // an unbound request has the other account, which then cools for 30 s: the pool serves again
    // then, so the client is left to retry
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    rig.script(tokens[other], limit("30")).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.status, a.should_retry.as_deref()), (StatusCode::TOO_MANY_REQUESTS, None), "{a:?}");
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.code(), a.should_retry.as_deref()), ("upstream_quota_exhausted", None), "{a:?}");
    assert!(a.retry_after.is_some_and(|s| (29..=30).contains(&s)), "{a:?}");
    // five minutes: the pool's soonest end is past what a client waits out
    rig.action(rig.ids[other], "resume").await;
    rig.script(tokens[other], limit("300")).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!(
        (a.status, a.should_retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some("false")),
        "{a:?}"
    );
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.code(), a.should_retry.as_deref()), ("upstream_quota_exhausted", Some("false")), "{a:?}");
    assert!(a.retry_after.is_some_and(|s| (299..=300).contains(&s)), "{a:?}");
}

/// The same with one account: the upstream's own answer is the first to say it, when its limit
/// is longer than a client waits out, and not when it is short.
#[tokio::test]
async fn a_single_account_s_long_limit_tells_clients_not_to_retry() {
    let rig = Rig::start(&[("solo", 0)], &[]).await;
    let limit = |secs: &str| json!({"steps": [{"kind": "status", "status": 429, "retry_after": secs}]});
    rig.script("solo", limit("30")).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!(
        (a.status, a.retry_after, a.should_retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some(30), None)
    );
    let mut rig = rig;
    rig.action(rig.ids[0], "resume").await;
    rig.script("solo", limit("900")).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!(
        (a.status, a.retry_after, a.should_retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some(900), Some("false"))
    );
}

#[tokio::test]
async fn antigravity_limits_narrow_to_the_model_only_when_everything_matches() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let t = Rig::server(&mock, &[], tempfile::tempdir().unwrap()).await;
    let mut rig = Rig::prepare(t, mock).await;
    let id = rig.add_account("antigravity", "ya29.limits", 0).await;
    let (http, base, key) = (rig.http.clone(), rig.t.base.clone(), rig.key.clone());
    let call = move |model: &str, method: &str| {
        http.post(format!("{base}/v1beta/models/{model}:{method}"))
            .header("x-goog-api-key", &key)
            .json(&json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}))
    };
    let gemini = |model: &str| call(model, "generateContent");
    let exhausted = |model: &str| json!({"kind": "resource_exhausted", "reason": "RATE_LIMIT_EXCEEDED", "model": model, "retry_delay": "20s"});
    // the same on a stream, whose error Cloud Code sends in a one-element array
    rig.script("ya29.limits", json!({"steps": [exhausted("claude-opus-4-6-thinking")]})).await;
    let a =
        Answer::read(call("claude-opus-4-6-thinking", "streamGenerateContent?alt=sse").send().await.unwrap())
            .await;
    assert_eq!(
        (a.status, a.code(), a.retry_after),
        (StatusCode::TOO_MANY_REQUESTS, "model_rate_limited", Some(20)),
        "{a:?}"
    );
    rig.script("ya29.limits", json!({"steps": [exhausted("gemini-3.1-pro-low")]})).await;
    let a = Answer::read(gemini("gemini-3.1-pro-low").send().await.unwrap()).await;
    assert_eq!(
        (a.status, a.code(), a.retry_after),
        (StatusCode::TOO_MANY_REQUESTS, "model_rate_limited", Some(20))
    );
    let a = Answer::read(gemini("gemini-3.1-pro-low").send().await.unwrap()).await;
    assert_eq!(a.code(), "model_rate_limited");
    assert!(a.retry_after.is_some_and(|s| (19..=20).contains(&s)));
    assert_eq!(
        Answer::read(gemini("gemini-3.6-flash-high").send().await.unwrap()).await.status,
        StatusCode::OK
    );
    // a limit naming another model cools the whole account (CD-4)
    rig.script("ya29.limits", json!({"steps": [exhausted("some-other-model")]})).await;
    let a = Answer::read(gemini("gemini-3.6-flash-high").send().await.unwrap()).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    // the upstream's answer, passed on, keeps its RetryInfo: gemini-cli reads when to retry there
    assert_eq!((a.retry_after, a.retry_info()), (Some(20), Some("20s")), "{a:?}");
    // BUD-5: the only account able to serve it is rate limited upstream
    let a = Answer::read(gemini("gemini-3.6-flash-high").send().await.unwrap()).await;
    assert_eq!(a.code(), "upstream_quota_exhausted");
    assert!(a.retry_after.is_some_and(|s| (1..=20).contains(&s)), "{a:?}");
    let rt = rig.account_runtime(id).await;
    assert!(rt["rate_limit_reset_at"].is_i64() && rt["limited_models"] == 2, "two models limited: {rt}");
}

#[tokio::test]
async fn forbidden_and_overloaded_accounts_pause_and_recover_clears_them() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let t = Rig::server(&mock, &[], tempfile::tempdir().unwrap()).await;
    let mut rig = Rig::prepare(t, mock).await;
    let claude = rig.add_account("claude", "sk-ant-oat-pause", 0).await;
    let (http, base, key) = (rig.http.clone(), rig.t.base.clone(), rig.key.clone());
    let messages = move || {
        http.post(format!("{base}/v1/messages"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
    };
    // ERR-1: a 403 that may be about this request only is upstream_forbidden but pauses nothing
    rig.script("sk-ant-oat-pause", json!({"steps": [{"kind": "status", "status": 403}]})).await;
    let a = Answer::read(messages().send().await.unwrap()).await;
    assert_eq!((a.status, a.code()), (StatusCode::FORBIDDEN, "upstream_forbidden"));
    assert!(rig.account_runtime(claude).await["temp_unschedulable_until"].is_null());
    assert_eq!(Answer::read(messages().send().await.unwrap()).await.status, StatusCode::OK);
    // CD-5: a 403 about the credentials is upstream_forbidden (not "invalid key") and pauses
    let revoked = json!({"kind": "status", "status": 403, "code": "authentication_error"});
    rig.script("sk-ant-oat-pause", json!({"steps": [revoked]})).await;
    let a = Answer::read(messages().send().await.unwrap()).await;
    assert_eq!((a.status, a.code()), (StatusCode::FORBIDDEN, "upstream_forbidden"));
    let rt = rig.account_runtime(claude).await;
    assert_eq!(rt["temp_unschedulable_reason"], "upstream_403");
    let a = Answer::read(messages().send().await.unwrap()).await;
    assert_eq!((a.status, a.code()), (StatusCode::SERVICE_UNAVAILABLE, "no_available_account"));
    rig.action(claude, "recover").await;
    assert_eq!(Answer::read(messages().send().await.unwrap()).await.status, StatusCode::OK);
    // 529 sets the overload pause
    rig.script("sk-ant-oat-pause", json!({"steps": [{"kind": "status", "status": 529}]})).await;
    assert_eq!(Answer::read(messages().send().await.unwrap()).await.status.as_u16(), 529);
    let rt = rig.account_runtime(claude).await;
    assert!(rt["overload_until"].is_i64(), "{rt}");
    let a = Answer::read(messages().send().await.unwrap()).await;
    assert_eq!(a.code(), "account_cooling");
    // clear-cooldown ends the overload; a 401 for the account's token is never the caller's 401:
    // this token has no refresh token, so once refused the account needs re-authorization
    // (CRED-3, CRED-4), and no cooldown is added for it
    rig.action(claude, "clear-cooldown").await;
    rig.script("sk-ant-oat-pause", json!({"steps": [{"kind": "status", "status": 401}]})).await;
    let a = Answer::read(messages().send().await.unwrap()).await;
    assert_eq!((a.status, a.code()), (StatusCode::SERVICE_UNAVAILABLE, "account_refresh_failed"));
    assert!(a.retry_after.is_some());
    let rt = rig.account_runtime(claude).await;
    assert!(rt["temp_unschedulable_until"].is_null() && rt["overload_until"].is_null(), "{rt}");
}

#[tokio::test]
async fn cooldowns_and_bindings_survive_a_restart_but_re_authorization_drops_old_limits() {
    let tokens = ["keep-a", "keep-b"];
    let rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[]).await;
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-r"), MODEL).await.status, StatusCode::OK);
    let mine = served(&rig, &tokens, &before);
    rig.script(tokens[mine], json!({"steps": [{"kind": "status", "status": 429, "retry_after": "600"}]}))
        .await;
    assert_eq!(rig.send(Some("conv-r"), MODEL).await.status, StatusCode::TOO_MANY_REQUESTS);
    // restart on the same data directory (ACC-4, RT-1)
    let Rig { t, mock, .. } = rig;
    let TestServer { server, dir, .. } = t;
    server.shutdown().await.unwrap();
    let t = Rig::server(&mock, &[], dir).await;
    let mut rig = Rig::prepare(t, mock).await;
    let (_, accounts) = rig.admin.call(Method::GET, "/api/accounts", None).await;
    rig.ids = accounts.as_array().unwrap().iter().map(|a| a["id"].as_i64().unwrap()).collect();
    let a = rig.send(Some("conv-r"), MODEL).await;
    assert_eq!(a.code(), "account_cooling", "the cooldown and the binding came back");
    assert!(a.retry_after.is_some_and(|s| s > 500));
    // re-authorization starts a new lifecycle revision: the old limit is gone
    let path = format!("/api/accounts/{}", rig.ids[mine]);
    let creds =
        json!({"credentials": {"kind": "oauth", "access_token": tokens[mine], "provider_account_id": "p"}});
    let (status, _) = rig.admin.call(Method::PATCH, &path, Some(creds)).await;
    assert_eq!(status, StatusCode::OK);
    let before = counts(&rig, &tokens);
    assert_eq!(rig.send(Some("conv-r"), MODEL).await.status, StatusCode::OK);
    assert_eq!(served(&rig, &tokens, &before), mine);
}

#[tokio::test]
async fn a_waiter_whose_key_is_revoked_is_refused_when_its_turn_comes() {
    let token = "revoke-a";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    rig.limit(rig.ids[0], 1).await;
    let (_, other) = rig.admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "second"}))).await;
    let (other_id, other_key) =
        (other["key"]["id"].as_i64().unwrap(), other["secret"].as_str().unwrap().to_owned());
    rig.script(token, json!({"delay_ms": 1000})).await;
    let holder = rig.responses(None, body(MODEL)).send();
    let holder = tokio::spawn(async move { Answer::read(holder.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiter = rig
        .http
        .post(format!("{}/v1/responses", rig.t.base))
        .bearer_auth(&other_key)
        .json(&body(MODEL))
        .send();
    let waiter = tokio::spawn(async move { Answer::read(waiter.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, _) = rig.admin.call(Method::DELETE, &format!("/api/me/keys/{other_id}"), None).await;
    assert!(status.is_success(), "{status}");
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    let a = waiter.await.unwrap();
    assert_eq!((a.status, a.code()), (StatusCode::UNAUTHORIZED, "invalid_api_key"));
    assert_eq!(rig.calls(token), 1);
    rig.settled().await;
}

#[tokio::test]
async fn member_rpm_is_counted_once_per_request_and_refusals_are_recorded() {
    let token = "rpm-a";
    let mut rig = Rig::start(&[(token, 0)], &[]).await;
    let (status, body) = rig.admin.call(Method::PATCH, "/api/members/1", Some(json!({"rpm_limit": 2}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.status, a.code()), (StatusCode::TOO_MANY_REQUESTS, "member_rpm_exceeded"));
    assert!(a.retry_after.is_some_and(|s| (1..=60).contains(&s)), "{a:?}");
    assert_eq!(rig.calls(token), 2);
    let recs = rig.t.records(3).await;
    assert_eq!((&recs[2]["outcome"], &recs[2]["routing"]), (&json!("rejected"), &Value::Null));
}

#[tokio::test]
async fn the_test_action_recovers_on_success_but_never_turns_scheduling_back_on() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let t = Rig::server(&mock, &[], tempfile::tempdir().unwrap()).await;
    let mut rig = Rig::prepare(t, mock).await;
    let id = rig.add_account("claude", "sk-ant-oat-test", 0).await;
    let (http, base, key) = (rig.http.clone(), rig.t.base.clone(), rig.key.clone());
    let messages = move || {
        http.post(format!("{base}/v1/messages"))
            .header("x-api-key", &key)
            .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
    };
    rig.script(
        "sk-ant-oat-test",
        json!({"steps": [{"kind": "status", "status": 403, "code": "authentication_error"}, {"kind": "status", "status": 500}]}),
    )
    .await;
    assert_eq!(Answer::read(messages().send().await.unwrap()).await.code(), "upstream_forbidden");
    let path = format!("/api/accounts/{id}/schedulable");
    let (status, _) = rig.admin.call(Method::POST, &path, Some(json!({"schedulable": false}))).await;
    assert_eq!(status, StatusCode::OK);
    // a failing test reports and changes nothing
    let test = format!("/api/accounts/{id}/test");
    let (status, t) = rig.admin.call(Method::POST, &test, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!((&t["ok"], &t["upstream_status"]), (&json!(false), &json!(500)), "{t}");
    assert_eq!(rig.account_runtime(id).await["temp_unschedulable_reason"], "upstream_403");
    // a passing one recovers the runtime state, but the manual switch stays off
    let (_, t) = rig.admin.call(Method::POST, &test, Some(json!({}))).await;
    assert_eq!((&t["ok"], &t["account"]["schedulable"]), (&json!(true), &json!(false)), "{t}");
    assert!(rig.account_runtime(id).await["temp_unschedulable_until"].is_null());
    assert_eq!(rig.mock.state.calls("sk-ant-oat-test").len(), 3, "each test is one real upstream call");
    assert_eq!(Answer::read(messages().send().await.unwrap()).await.code(), "no_available_account");
    let (status, _) = rig.admin.call(Method::POST, &path, Some(json!({"schedulable": true}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(Answer::read(messages().send().await.unwrap()).await.status, StatusCode::OK);
    let recs = rig.t.records(3).await;
    assert_eq!(recs.len(), 3, "tests leave no request records");
}

#[tokio::test]
async fn switching_an_account_on_serves_waiting_requests_at_once() {
    let tokens = ["wake-a", "wake-b"];
    let mut rig = Rig::start(&[(tokens[0], 0), (tokens[1], 0)], &[]).await;
    let (a, b) = (rig.ids[0], rig.ids[1]);
    rig.limit(a, 1).await;
    let path = format!("/api/accounts/{b}/schedulable");
    let (status, _) = rig.admin.call(Method::POST, &path, Some(json!({"schedulable": false}))).await;
    assert_eq!(status, StatusCode::OK);
    rig.script(tokens[0], json!({"delay_ms": 1500})).await;
    let holder = rig.responses(None, body(MODEL)).send();
    let holder = tokio::spawn(async move { Answer::read(holder.await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    let waiter = rig.responses(None, body(MODEL)).send();
    let waiter = tokio::spawn(async move { (Answer::read(waiter.await.unwrap()).await, t0.elapsed()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rig.account_runtime(a).await["queue_depth"], 1);
    let (status, _) = rig.admin.call(Method::POST, &path, Some(json!({"schedulable": true}))).await;
    assert_eq!(status, StatusCode::OK);
    let (answer, took) = waiter.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert!(took < Duration::from_millis(1000), "served by the new account, not after the holder: {took:?}");
    assert_eq!(rig.calls(tokens[1]), 1);
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    rig.settled().await;
}

#[tokio::test]
async fn unbound_requests_move_past_refusing_accounts_at_most_twice_then_get_the_upstream_answer() {
    let tokens = ["move-a", "move-b", "move-c", "move-d"];
    let mut rig = Rig::start(&[(tokens[0], 3), (tokens[1], 2), (tokens[2], 1), (tokens[3], 0)], &[]).await;
    // a 403 that may be about this request: no move, no pause (ERR-1)
    rig.script(tokens[0], json!({"steps": [{"kind": "status", "status": 403}]})).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.status, a.code()), (StatusCode::FORBIDDEN, "upstream_forbidden"));
    assert_eq!(counts(&rig, &tokens), vec![1, 0, 0, 0]);
    assert!(rig.account_runtime(rig.ids[0]).await["temp_unschedulable_until"].is_null());
    // a credential refusal on the first account: the next one serves, the refused one pauses
    let deactivated = json!({"kind": "status", "status": 403, "code": "account_deactivated"});
    rig.script(tokens[0], json!({"steps": [deactivated]})).await;
    let a = rig.send(None, MODEL).await;
    assert_eq!(a.status, StatusCode::OK, "{a:?} {:?}", counts(&rig, &tokens));
    assert_eq!(counts(&rig, &tokens), vec![2, 1, 0, 0]);
    assert_eq!(rig.account_runtime(rig.ids[0]).await["temp_unschedulable_reason"], "upstream_403");
    rig.action(rig.ids[0], "recover").await;
    // three accounts rate limited: all three tried (two moves), then the last upstream 429
    // goes back as it came, Retry-After included, in one record (BUD-5)
    for t in &tokens[..3] {
        rig.script(t, json!({"steps": [{"kind": "status", "status": 429, "retry_after": "40"}]})).await;
    }
    let a = rig.send(None, MODEL).await;
    assert_eq!((a.status, a.retry_after), (StatusCode::TOO_MANY_REQUESTS, Some(40)));
    assert_eq!(counts(&rig, &tokens), vec![3, 2, 1, 0], "at most two moves");
    let recs = rig.t.records(3).await;
    assert_eq!(recs.len(), 3, "one record per request, however many accounts it tried");
    assert_eq!((&recs[2]["upstream_status"], &recs[2]["outcome"]), (&json!(429), &json!("error")));
    // the untried account serves the next request; the three that answered 429 are cooling
    assert_eq!(rig.send(None, MODEL).await.status, StatusCode::OK);
    assert_eq!(counts(&rig, &tokens), vec![3, 2, 1, 1]);
}

/// ACC-1, RT-8: an account's own expiry (a subscription's end) takes it out of scheduling when it
/// passes, on the injected clock, with no configuration change in between; moving or clearing it
/// brings the account back. A bound conversation does not keep an expired account.
#[tokio::test]
async fn an_account_stops_serving_when_it_expires() {
    use common::bed::{Bed, T0};
    let mut b = Bed::start(&[]).await;
    let (first, second) = ("exp-a", "exp-b");
    let a = b.rig.add_account("codex", first, 1).await;
    let until = DateTimeText::at(T0 + 60);
    let path = format!("/api/accounts/{a}");
    let (status, view) = b.rig.admin.call(Method::PATCH, &path, Some(json!({"expires_at": until.0}))).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["expires_at"], until.0);
    assert_eq!(b.rig.send(Some("conv-exp"), MODEL).await.status, StatusCode::OK);
    assert_eq!(b.rig.calls(first), 1);
    let rt = b.rig.account_runtime(a).await;
    assert_eq!((&rt["expires_at"], &rt["expired"]), (&json!(T0 + 60), &json!(false)));

    // a second account, created with an expiry already past: never chosen
    let (status, past) = b
        .rig
        .admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({"provider": "codex", "name": second, "pool_ids": [1], "priority": 2,
                "expires_at": DateTimeText::at(T0 - 1).0,
                "credentials": {"kind": "oauth", "access_token": second, "provider_account_id": "p"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{past}");
    assert_eq!(b.rig.send(None, MODEL).await.status, StatusCode::OK);
    assert_eq!((b.rig.calls(first), b.rig.calls(second)), (2, 0), "the higher priority has expired");

    // a second before its end it serves; at its end nothing does, bound or not
    b.advance(59);
    assert_eq!(b.rig.send(Some("conv-exp"), MODEL).await.status, StatusCode::OK);
    b.advance(1);
    for session in [Some("conv-exp"), None] {
        let answer = b.rig.send(session, MODEL).await;
        assert_eq!(answer.code(), "no_available_account", "{session:?}");
    }
    assert_eq!(b.rig.calls(first), 3);
    assert_eq!(b.rig.account_runtime(a).await["expired"], true);

    // cleared, it serves again; the other account moved a day ahead, it takes its turn too
    let (status, view) = b.rig.admin.call(Method::PATCH, &path, Some(json!({"expires_at": null}))).await;
    assert_eq!((status, &view["expires_at"]), (StatusCode::OK, &Value::Null), "{view}");
    let later = DateTimeText::at(T0 + 86_400).0;
    let other = format!("/api/accounts/{}", past["id"]);
    let (status, _) = b.rig.admin.call(Method::PATCH, &other, Some(json!({"expires_at": later}))).await;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = b.rig.admin.call(Method::PATCH, &path, Some(json!({"name": "renamed"}))).await;
    assert_eq!(view["expires_at"], Value::Null, "a patch without it leaves it");
    assert_eq!(b.rig.send(None, MODEL).await.status, StatusCode::OK);
    assert_eq!(b.rig.calls(second), 1, "the highest priority again");
    assert_eq!(b.rig.send(Some("conv-exp"), MODEL).await.status, StatusCode::OK);
}

/// An RFC 3339 time in UTC, as the API writes `expires_at`.
struct DateTimeText(String);

impl DateTimeText {
    fn at(unix: i64) -> Self {
        DateTimeText(
            chrono::DateTime::from_timestamp(unix, 0)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
    }
}
