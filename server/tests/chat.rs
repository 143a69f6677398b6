//! OpenAI Chat Completions ingress (BEY-3) through the real server and the mock upstream:
//! translated to Responses for Codex accounts, answered as `chat.completion` or
//! `chat.completion.chunk`s, recorded under its own operation name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::rig::{MODEL, Rig};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn chat(rig: &Rig, body: Value) -> reqwest::Response {
    rig.http
        .post(format!("{}/v1/chat/completions", rig.t.base))
        .bearer_auth(&rig.key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn ask(stream: bool) -> Value {
    json!({"model": MODEL, "stream": stream, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"}
    ]})
}

#[tokio::test]
async fn a_codex_account_answers_a_chat_completion() {
    let rig = Rig::start(&[("tok-chat", 0)], &[]).await;
    let resp = chat(&rig, ask(false)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion", "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["model"], MODEL);
    let choice = &body["choices"][0];
    assert_eq!(
        (choice["message"]["role"].as_str(), choice["finish_reason"].as_str()),
        (Some("assistant"), Some("stop"))
    );
    assert!(!choice["message"]["content"].as_str().unwrap().is_empty());
    assert_eq!(body["usage"]["prompt_tokens"], 120);
    assert_eq!(body["usage"]["completion_tokens"], 7);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
    let records = rig.t.records(1).await;
    assert_eq!(
        (records[0]["operation"].as_str(), records[0]["outcome"].as_str()),
        (Some("chat_completions"), Some("success"))
    );
    assert_eq!(records[0]["input"], 120);
}

#[tokio::test]
async fn a_streamed_chat_completion_has_the_chunks_the_sdk_expects() {
    let rig = Rig::start(&[("tok-chat-stream", 0)], &[]).await;
    let mut body = ask(true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = chat(&rig, body).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(!content.is_empty());
    let finish: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finish, ["stop"]);
    let last = chunks.last().unwrap();
    assert_eq!((last["choices"].clone(), last["usage"]["total_tokens"].clone()), (json!([]), json!(127)));
    let records = rig.t.records(1).await;
    assert_eq!(
        (records[0]["operation"].as_str(), records[0]["outcome"].as_str()),
        (Some("chat_completions"), Some("success"))
    );
    assert!(records[0]["first_output_ms"].is_number(), "first output is still observed");
}

#[tokio::test]
async fn a_parameter_without_an_equivalent_is_a_400_naming_it() {
    let rig = Rig::start(&[("tok-chat-bad", 0)], &[]).await;
    let mut body = ask(false);
    body["stop"] = json!(["\n\n"]);
    let resp = chat(&rig, body).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(
        (e["error"]["param"].as_str(), e["error"]["code"].as_str()),
        (Some("stop"), Some("invalid_request")),
        "{e}"
    );
    assert_eq!(rig.calls("tok-chat-bad"), 0, "nothing reached the upstream");
}

/// An answer that fails inside a 200 is an error for a Chat client, not an empty success; a
/// stream cut before its end says so in an error object instead of just stopping.
#[tokio::test]
async fn failures_inside_a_200_reach_a_chat_client_as_errors() {
    let rig = Rig::start(&[("tok-chat-fail", 0)], &[]).await;
    // the cut comes a moment after the first deltas, as a dropped connection would
    rig.script(
        "tok-chat-fail",
        json!({"delta_delay_ms": 30, "steps": [
            {"kind": "failed_event", "code": "server_error"},
            {"kind": "abort", "after_deltas": 2}
        ]}),
    )
    .await;
    let resp = chat(&rig, ask(false)).await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "upstream_error", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("server_error"));

    let resp = chat(&rig, ask(true)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_ne!(data.last(), Some(&"[DONE]"), "{text}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "upstream_stream_broken", "{text}");
    let records = rig.t.records(2).await;
    assert!(records.iter().all(|r| r["outcome"] == "error"), "{records:?}");
}

/// A Claude account serves Chat Completions too: translated to Messages and back, streamed and
/// not, watched in the Messages grammar for the record.
#[tokio::test]
async fn a_claude_account_answers_chat_completions() {
    let mut rig = Rig::start(&[], &[]).await;
    rig.add_account("claude", "tok-chat-claude", 0).await;
    let mut body = ask(false);
    body["model"] = json!("claude-sonnet-4-5");
    let resp = chat(&rig, body.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert!(!answer["choices"][0]["message"]["content"].as_str().unwrap().is_empty());
    assert_eq!(answer["usage"]["prompt_tokens"], 120);
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 64);

    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let text = chat(&rig, body).await.text().await.unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, answer["choices"][0]["message"]["content"].as_str().unwrap());
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], answer["usage"]["completion_tokens"]);
    let records = rig.t.records(2).await;
    assert!(
        records.iter().all(|r| r["operation"] == "chat_completions" && r["outcome"] == "success"),
        "{records:?}"
    );
    assert!(records.iter().all(|r| r["input"] == 120), "usage observed in the Messages grammar: {records:?}");
}
