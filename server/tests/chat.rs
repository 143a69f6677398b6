//! OpenAI Chat Completions ingress (BEY-3) through the real server and the mock upstream:
//! translated to Responses for Codex accounts, answered as `chat.completion` or
//! `chat.completion.chunk`s, recorded under its own operation name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::rig::{MODEL, Rig};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A Chat Completions call as openai-python makes it: `Accept: application/json`, streaming or not.
async fn chat(rig: &Rig, body: Value) -> reqwest::Response {
    rig.http
        .post(format!("{}/v1/chat/completions", rig.t.base))
        .bearer_auth(&rig.key)
        .header("accept", "application/json")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The chunks of a Chat Completions stream, checked to end with `[DONE]`.
fn chunks(text: &str) -> Vec<Value> {
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect()
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
    let chunks = chunks(&text);
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
    let call = &rig.mock.state.calls("tok-chat-stream")[0];
    assert_eq!(call.headers["accept"], "text/event-stream", "Codex is asked for what it sends");
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
    // the Codex backend takes no sampling settings and no output limit (its mock refuses them)
    for (param, value) in [("temperature", json!(0.2)), ("max_tokens", json!(100)), ("top_p", json!(0.5))] {
        let mut body = ask(false);
        body[param] = value;
        let e: Value = chat(&rig, body).await.json().await.unwrap();
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    assert_eq!(rig.calls("tok-chat-bad"), 0, "nothing reached the upstream");
    let mut body = ask(false);
    body["temperature"] = json!(1);
    body["user"] = json!("someone@example.com");
    assert_eq!(chat(&rig, body).await.status(), StatusCode::OK, "defaults and end-user fields pass");
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
    let chunks = chunks(&text);
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

/// The tool-call turn of a Chat conversation: the assistant's calls and one result per call.
fn tool_turn(message: &Value) -> Vec<Value> {
    let mut turn = vec![message.clone()];
    for call in message["tool_calls"].as_array().unwrap() {
        turn.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "sunny"}));
    }
    turn
}

#[tokio::test]
async fn an_antigravity_account_answers_chat_completions_with_tools() {
    let mut rig = Rig::start(&[], &[]).await;
    rig.add_account("antigravity", "tok-chat-ag", 0).await;
    let calls = json!([{"name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                       {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}]);
    rig.script("tok-chat-ag", json!({"function_calls": calls})).await;
    let mut body = ask(false);
    body["model"] = json!("gemini-3.1-pro-low");
    body["tools"] =
        json!([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]);
    let resp = chat(&rig, body.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    assert_eq!(choice["message"]["content"], "HelloHelloHello");
    let tool_calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(tool_calls.len(), 2);
    assert_eq!(tool_calls[1]["function"]["arguments"], "{\"city\":\"Rome\"}");
    assert_eq!(answer["usage"]["prompt_tokens"], 120);
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 64);

    // The results go back with the calls as they came: the mock, like Gemini 3, refuses a turn
    // whose function calls lost their thought signatures or miss a response.
    rig.script("tok-chat-ag", json!({})).await;
    let mut next = body.clone();
    next["messages"].as_array_mut().unwrap().extend(tool_turn(&choice["message"]));
    next["stream"] = json!(true);
    next["stream_options"] = json!({"include_usage": true});
    let resp = chat(&rig, next.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    let chunks = chunks(&text);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, "HelloHelloHello");
    assert_eq!(chunks.last().unwrap()["usage"]["prompt_tokens"], 120);

    // a history whose signatures were lost (written elsewhere) passes with Google's placeholder
    let mut unsigned = next.clone();
    let n = unsigned["messages"].as_array().unwrap().len();
    for call in unsigned["messages"][n - 3]["tool_calls"].as_array_mut().unwrap() {
        let id = call["id"].as_str().unwrap().split(".sig.").next().unwrap().to_owned();
        call["id"] = json!(id);
    }
    for i in [n - 2, n - 1] {
        let id = unsigned["messages"][i]["tool_call_id"]
            .as_str()
            .unwrap()
            .split(".sig.")
            .next()
            .unwrap()
            .to_owned();
        unsigned["messages"][i]["tool_call_id"] = json!(id);
    }
    assert_eq!(chat(&rig, unsigned).await.status(), StatusCode::OK);

    let records = rig.t.records(3).await;
    assert!(records.iter().all(|r| r["operation"] == "chat_completions"), "{records:?}");
    assert!(records.iter().all(|r| r["outcome"] == "success" && r["input"] == 120), "{records:?}");
    let paths: Vec<String> = rig.mock.state.calls("tok-chat-ag").iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths[..2], ["/v1internal:generateContent", "/v1internal:streamGenerateContent"]);
}

#[tokio::test]
async fn a_claude_account_answers_chat_tool_calls() {
    let mut rig = Rig::start(&[], &[]).await;
    rig.add_account("claude", "tok-chat-claude-tools", 0).await;
    let calls = json!([{"name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                       {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}]);
    rig.script("tok-chat-claude-tools", json!({"function_calls": calls})).await;
    let mut body = ask(true);
    body["model"] = json!("claude-sonnet-4-5");
    body["tools"] =
        json!([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]);
    let text = chat(&rig, body.clone()).await.text().await.unwrap();
    let chunks = chunks(&text);
    let deltas: Vec<Value> = chunks
        .iter()
        .flat_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default())
        .collect();
    let args = |index: u64| -> String {
        deltas
            .iter()
            .filter(|d| d["index"] == index)
            .filter_map(|d| d["function"]["arguments"].as_str())
            .collect()
    };
    assert_eq!((args(0), args(1)), ("{\"city\":\"Paris\"}".to_owned(), "{\"city\":\"Rome\"}".to_owned()));
    let finish: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finish, ["tool_calls"]);

    // the results go back as tool_result blocks the mock checks against the tool_use ids
    body["stream"] = json!(false);
    let answer: Value = chat(&rig, body.clone()).await.json().await.unwrap();
    rig.script("tok-chat-claude-tools", json!({})).await;
    body["messages"].as_array_mut().unwrap().extend(tool_turn(&answer["choices"][0]["message"]));
    let resp = chat(&rig, body).await;
    assert_eq!(resp.status(), StatusCode::OK, "{}", resp.text().await.unwrap());
}

#[tokio::test]
async fn the_user_field_names_the_conversation_and_the_upstream_cache_key() {
    let mut rig = Rig::start(&[("tok-conv-a", 0), ("tok-conv-b", 0)], &[]).await;
    rig.add_account("claude", "tok-conv-claude", 0).await;
    rig.add_account("antigravity", "tok-conv-ag", 0).await;
    let mut body = ask(false);
    body["user"] = json!("u-7");
    for _ in 0..3 {
        assert_eq!(chat(&rig, body.clone()).await.status(), StatusCode::OK);
    }
    let records = rig.t.records(3).await;
    let accounts: Vec<&Value> = records.iter().map(|r| &r["account_id"]).collect();
    assert!(accounts.iter().all(|a| *a == accounts[0]), "one conversation, one account: {records:?}");
    assert_eq!(records[2]["routing"]["rule"], "session_binding", "{}", records[2]);
    let codex_calls: Vec<_> =
        ["tok-conv-a", "tok-conv-b"].iter().flat_map(|t| rig.mock.state.calls(t)).collect();
    // the user's value goes upstream only as a hash, the same for each call
    let key = codex_calls[0].cache_key.clone().unwrap();
    assert!(key.starts_with("user-") && !key.contains("u-7"), "{key}");
    assert!(codex_calls.iter().all(|c| c.cache_key.as_deref() == Some(key.as_str())), "{codex_calls:?}");

    // Gemini: the conversation is the v1internal session; Messages: cache breakpoints
    body["model"] = json!("gemini-3.1-pro-low");
    body["prompt_cache_key"] = json!("conv-9");
    assert_eq!(chat(&rig, body.clone()).await.status(), StatusCode::OK);
    assert_eq!(rig.mock.state.calls("tok-conv-ag")[0].cache_key.as_deref(), Some("conv-9"));
    // (a new conversation: conv-9 stays with the Antigravity account, which serves Claude models too)
    body["model"] = json!("claude-sonnet-4-5");
    body["prompt_cache_key"] = json!("conv-10");
    rig.script("tok-conv-ag", json!({"steps": [{"kind": "status", "status": 404}]})).await;
    assert_eq!(chat(&rig, body).await.status(), StatusCode::OK);
    assert_eq!(
        rig.mock.state.calls("tok-conv-claude")[0].cache_marks,
        2,
        "after the system prompt and the last turn"
    );
}

#[tokio::test]
async fn a_call_one_family_cannot_carry_moves_to_another_in_a_mixed_pool() {
    let mut rig = Rig::start(&[], &[]).await;
    rig.add_account("claude", "tok-mixed-claude", 0).await;
    let antigravity = rig.add_account("antigravity", "tok-mixed-ag", 0).await;
    let mut body = ask(false);
    // (a model the Antigravity account lists: once its model list is read, it serves no other)
    body["model"] = json!("claude-opus-4-6-thinking");
    // Messages has no JSON schema output; Gemini has
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}});
    for _ in 0..3 {
        let resp = chat(&rig, body.clone()).await;
        assert_eq!(resp.status(), StatusCode::OK, "{}", resp.text().await.unwrap());
    }
    let records = rig.t.records(3).await;
    assert!(records.iter().all(|r| r["account_id"] == antigravity), "{records:?}");
    assert_eq!(rig.calls("tok-mixed-claude"), 0);
    // what no family of the pool can carry is a 400 naming the parameter, at once
    body["logit_bias"] = json!({"50256": -100});
    let resp = chat(&rig, body).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["param"], "logit_bias", "{e}");
    // a provider prefix pins the family (PX-5)
    let resp = rig
        .http
        .post(format!("{}/claude/v1/chat/completions", rig.t.base))
        .bearer_auth(&rig.key)
        .json(&json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(rig.calls("tok-mixed-claude"), 1);
}
