//! Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`) and the Claude OAuth token
//! endpoint (`/v1/oauth/token`). Events follow protocols.md §4.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    Played, Step, Turn, json,
    play::{self, Action, sse},
};

pub async fn messages(Played { turn, body }: Played) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, None, "invalid JSON body");
    };
    if let Err(message) = check_request(&req) {
        return error(StatusCode::BAD_REQUEST, None, &message);
    }
    if let Some(resp) = scripted_error(&turn) {
        return resp;
    }
    let model = req["model"].as_str().unwrap_or("claude-sonnet-4-5").to_owned();
    let (actions, message) = events(&turn, &model);
    let mut resp = if req["stream"].as_bool().unwrap_or(false) {
        let mut r = (StatusCode::OK, play::body(actions)).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        r
    } else {
        match turn.step {
            Step::Abort { .. } => (StatusCode::OK, play::body(vec![Action::Abort])).into_response(),
            Step::Stall { .. } => {
                (StatusCode::OK, play::body(vec![Action::Stall { keep_alive_ms: 0 }])).into_response()
            }
            _ => json(StatusCode::OK, message),
        }
    };
    let h = resp.headers_mut();
    h.insert(
        "request-id",
        HeaderValue::from_str(&format!("req_mock_{}", turn.id))
            .unwrap_or(HeaderValue::from_static("req_mock")),
    );
    super::quota::add_headers(&mut resp, &turn.script, super::quota::CLAUDE_HEADERS);
    resp
}

pub async fn count_tokens(Played { turn, .. }: Played) -> Response {
    if let Some(resp) = scripted_error(&turn) {
        return resp;
    }
    json(StatusCode::OK, json!({"input_tokens": turn.script.usage.input}))
}

/// An Anthropic error body: `{"type":"error","error":{"type","message"},"request_id"}`.
fn error(status: StatusCode, retry_after: Option<&str>, message: &str) -> Response {
    error_typed(status, retry_after, message, None)
}

/// [`error`] with an explicit `error.type`.
fn error_typed(
    status: StatusCode,
    retry_after: Option<&str>,
    message: &str,
    typed: Option<&str>,
) -> Response {
    let kind = typed.unwrap_or(match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    });
    let mut resp = json(
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_mock_error"}),
    );
    if let Some(ra) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, ra);
    }
    resp
}

fn scripted_error(turn: &Turn) -> Option<Response> {
    let mut resp = scripted_error_body(turn)?;
    super::quota::add_scripted_headers(&mut resp, &turn.script);
    Some(resp)
}

fn scripted_error_body(turn: &Turn) -> Option<Response> {
    match &turn.step {
        Step::Status { status, retry_after, code, message } => Some(error_typed(
            StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            retry_after.as_deref(),
            &message.clone().unwrap_or_else(|| format!("scripted {status}")),
            code.as_deref(),
        )),
        Step::UsageLimitReached { .. } | Step::ResourceExhausted { .. } | Step::InvalidGrant => {
            Some(error(StatusCode::TOO_MANY_REQUESTS, None, "scripted rate limit"))
        }
        Step::ContextTooLong { tokens, limit } => Some(error(
            StatusCode::BAD_REQUEST,
            None,
            &format!("prompt is too long: {tokens} tokens > {limit} maximum"),
        )),
        _ => None,
    }
}

/// Checks a Messages request as Anthropic does: a positive `max_tokens`, a non-empty list of
/// `user`/`assistant` messages, at most 4 cache breakpoints, and every `tool_result` answering a
/// `tool_use` of the assistant message just before it.
fn check_request(req: &Value) -> Result<(), String> {
    if req["max_tokens"].as_u64().is_none_or(|n| n == 0) {
        return Err("max_tokens: Field required".into());
    }
    let messages = req["messages"]
        .as_array()
        .filter(|m| !m.is_empty())
        .ok_or("messages: at least one message is required")?;
    let marks = super::cache_marks(req);
    if marks > 4 {
        return Err(format!("A maximum of 4 blocks with cache_control may be provided. Found {marks}."));
    }
    let thinking = req["thinking"]["type"] == "enabled";
    if thinking && req["temperature"].as_f64().is_some_and(|t| t != 1.0) {
        return Err("`temperature` may only be set to 1 when thinking is enabled.".into());
    }
    // (the check is on the tool loop in progress: the last assistant turn, answered by results only)
    let last = messages.iter().rposition(|m| m["role"] == "assistant");
    let in_loop = last.is_some_and(|i| {
        messages[i + 1..]
            .iter()
            .all(|m| m["content"].as_array().is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result")))
    });
    if thinking
        && in_loop
        && let Some(blocks) = last.and_then(|i| messages[i]["content"].as_array())
        && blocks.iter().any(|b| b["type"] == "tool_use")
        && !matches!(blocks[0]["type"].as_str(), Some("thinking" | "redacted_thinking"))
    {
        return Err("Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.".into());
    }
    let mut tool_uses: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if !matches!(role, "user" | "assistant") {
            return Err(format!("messages.{i}.role: Input should be 'user' or 'assistant'"));
        }
        let blocks = m["content"].as_array().map(Vec::as_slice).unwrap_or_default();
        for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
            let id = b["tool_use_id"].as_str().unwrap_or_default();
            if !tool_uses.contains(&id) {
                return Err(format!(
                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
        tool_uses =
            blocks.iter().filter(|b| b["type"] == "tool_use").filter_map(|b| b["id"].as_str()).collect();
    }
    Ok(())
}

/// The SSE events of one answer and the final message (for non-streaming calls).
fn events(turn: &Turn, model: &str) -> (Vec<Action>, Value) {
    let sc = &turn.script;
    let id = format!("msg_{}", turn.id);
    // Anthropic reports input without cache reads; the cached part comes separately.
    let fresh_input = sc.usage.input.saturating_sub(sc.usage.cached);
    let mut a = vec![
        sse(
            "message_start",
            &json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": fresh_input, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": sc.usage.cached, "output_tokens": 1, "service_tier": "standard"}}}),
        ),
        sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        sse("ping", &json!({"type": "ping"})),
    ];
    let (deltas, cut) = play::deltas(turn, |_| {
        sse(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": sc.delta_text}}),
        )
    });
    a.extend(deltas);
    if cut {
        return (a, Value::Null);
    }
    let text = sc.delta_text.repeat(sc.deltas as usize);
    if let Step::FailedEvent { code } = &turn.step {
        a.push(sse(
            "error",
            &json!({"type": "error", "error": {"type": code, "message": "scripted failure"}}),
        ));
        return (a, Value::Null);
    }
    a.push(sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
    let mut content = vec![json!({"type": "text", "text": text})];
    // tool uses after the text, their input streamed in two pieces
    for (i, call) in sc.function_calls.iter().enumerate() {
        let (index, tool_id) = (i + 1, format!("toolu_{}_{i}", turn.id));
        a.push(sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": tool_id, "name": call.name, "input": {}}}),
        ));
        let half =
            call.arguments.char_indices().nth(call.arguments.chars().count() / 2).map_or(0, |(b, _)| b);
        for piece in [&call.arguments[..half], &call.arguments[half..]] {
            a.push(sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        a.push(sse("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
        content.push(json!({"type": "tool_use", "id": tool_id, "name": call.name, "input": input}));
    }
    let stop_reason = if sc.function_calls.is_empty() { "end_turn" } else { "tool_use" };
    let usage = json!({"input_tokens": fresh_input, "output_tokens": sc.usage.output,
                       "cache_read_input_tokens": sc.usage.cached, "cache_creation_input_tokens": 0});
    a.push(sse(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": usage}),
    ));
    a.push(sse("message_stop", &json!({"type": "message_stop"})));
    let message = json!({"id": id, "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": usage});
    (a, message)
}
