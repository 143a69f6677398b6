//! OpenAI Responses (`/v1/responses`) and the ChatGPT Codex backend (`/backend-api/codex/...`,
//! `/backend-api/wham/usage`, `/oauth/token`). Events follow protocols.md §1a exactly.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    Played, Step, Turn, json,
    play::{self, Action, sse},
};

pub async fn responses_api(Played { turn, body }: Played) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, None, "could not parse the JSON body of your request");
    };
    let stream = req["stream"].as_bool().unwrap_or(false);
    if let Step::LargeBody { bytes } = turn.step {
        return json(
            StatusCode::OK,
            json!({"id": format!("resp_{}", turn.id), "padding": "x".repeat(bytes)}),
        );
    }
    answer(&turn, model(&req), stream, false)
}

/// Responses parameters the Codex backend refuses.
const CODEX_UNSUPPORTED: &[&str] =
    &["max_output_tokens", "temperature", "top_p", "user", "safety_identifier"];

pub async fn codex_responses(Played { turn, body }: Played) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return json(StatusCode::BAD_REQUEST, json!({"detail": "Invalid JSON"}));
    };
    if req["stream"].as_bool() != Some(true) {
        // The real backend serves streams only.
        return json(StatusCode::BAD_REQUEST, json!({"detail": "Stream must be set to true"}));
    }
    if req["store"].as_bool() != Some(false) {
        return json(StatusCode::BAD_REQUEST, json!({"detail": "Store must be set to false"}));
    }
    // Like the real backend, it takes no sampling settings and no output limit.
    if let Some(p) = CODEX_UNSUPPORTED.iter().find(|p| req.get(**p).is_some()) {
        return json(StatusCode::BAD_REQUEST, json!({"detail": format!("Unsupported parameter: {p}")}));
    }
    answer(&turn, model(&req), true, true)
}

pub async fn compact(Played { turn, .. }: Played) -> Response {
    if let Some(resp) = scripted_error(&turn) {
        return resp;
    }
    let u = turn.script.usage;
    json(
        StatusCode::OK,
        json!({
            "id": format!("resp_cmp_{}", turn.id),
            "object": "response.compaction",
            "output": [{"type": "compaction", "encrypted_content": format!("enc-{}", turn.id)}],
            "usage": usage(u.input, u.cached, u.output),
        }),
    )
}

pub async fn codex_models() -> Response {
    json(
        StatusCode::OK,
        json!({"models": [
            {"slug": "gpt-5.1-codex", "display_name": "GPT-5.1 Codex", "supported_in_api": true},
            {"slug": "gpt-5.1-codex-mini", "display_name": "GPT-5.1 Codex Mini", "supported_in_api": true},
            {"slug": "codex-auto-review", "display_name": "Codex auto review", "supported_in_api": true},
        ]}),
    )
}

fn model(req: &Value) -> String {
    req["model"].as_str().unwrap_or("gpt-5.1-codex").to_owned()
}

fn code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The usage object of protocols.md §1a.
fn usage(input: u64, cached: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output
    })
}

/// An OpenAI error body: `{"error":{"message","type","param","code"}}`.
fn error(status: StatusCode, retry_after: Option<&str>, message: &str) -> Response {
    let (kind, code) = match status.as_u16() {
        400 => ("invalid_request_error", Value::Null),
        401 => ("invalid_request_error", json!("invalid_api_key")),
        403 => ("invalid_request_error", json!("unsupported_country_region_territory")),
        404 => ("invalid_request_error", json!("model_not_found")),
        429 => ("rate_limit_exceeded", json!("rate_limit_exceeded")),
        503 => ("server_error", json!("server_is_overloaded")),
        _ => ("server_error", json!("server_error")),
    };
    let mut resp =
        json(status, json!({"error": {"message": message, "type": kind, "param": null, "code": code}}));
    if let Some(ra) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, ra);
    }
    resp
}

/// An OpenAI error answer whose `error.code` is `scripted`.
fn coded_error(status: u16, retry_after: Option<&str>, scripted: &str) -> Response {
    let mut resp = json(
        code(status),
        json!({"error": {"message": format!("scripted {status}"), "type": "invalid_request_error", "param": null, "code": scripted}}),
    );
    if let Some(ra) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, ra);
    }
    resp
}

/// HTTP-level failures a script can ask for; `None` when the call gets a 200.
pub(super) fn scripted_error(turn: &Turn) -> Option<Response> {
    let mut resp = scripted_error_body(turn)?;
    super::quota::add_scripted_headers(&mut resp, &turn.script);
    Some(resp)
}

fn scripted_error_body(turn: &Turn) -> Option<Response> {
    match &turn.step {
        Step::Status { status, retry_after, code: None, message } => {
            let message = message.clone().unwrap_or_else(|| format!("scripted {status}"));
            Some(error(code(*status), retry_after.as_deref(), &message))
        }
        Step::Status { status, retry_after, code: Some(scripted), .. } => {
            Some(coded_error(*status, retry_after.as_deref(), scripted))
        }
        Step::UsageLimitReached { resets_in_secs } => {
            let resets_at = chrono_now_secs() + resets_in_secs;
            Some(json(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                                  "plan_type": "plus", "resets_at": resets_at}}),
            ))
        }
        Step::ResourceExhausted { .. } | Step::InvalidGrant => {
            Some(error(StatusCode::TOO_MANY_REQUESTS, None, "scripted rate limit"))
        }
        // (the Responses API's words; they name neither number)
        Step::ContextTooLong { .. } => Some(json(
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
                             "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}),
        )),
        _ => None,
    }
}

fn chrono_now_secs() -> u64 {
    #[allow(clippy::disallowed_methods)] // the mock stands in for a remote host's own clock
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

fn answer(turn: &Turn, model: String, stream: bool, codex: bool) -> Response {
    if let Some(resp) = scripted_error(turn) {
        return resp;
    }
    let (actions, final_response) = events(turn, &model, codex);
    let mut resp = if stream {
        let mut r = (StatusCode::OK, play::body(actions)).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        r
    } else {
        match &turn.step {
            Step::Abort { .. } => (StatusCode::OK, play::body(vec![Action::Abort])).into_response(),
            Step::Stall { .. } => {
                (StatusCode::OK, play::body(vec![Action::Stall { keep_alive_ms: 0 }])).into_response()
            }
            _ => json(StatusCode::OK, final_response),
        }
    };
    if codex {
        super::quota::add_headers(&mut resp, &turn.script, super::quota::CODEX_HEADERS);
    }
    resp
}

/// The SSE events of one answer and the final response object (for non-streaming calls).
/// `unstored`: like the Codex backend (which stores nothing), `response.completed` carries an
/// empty `output`; the items are only in their `response.output_item.done` events.
pub(crate) fn events(turn: &Turn, model: &str, unstored: bool) -> (Vec<Action>, Value) {
    if let Step::Stall { keep_alive_ms, silent: true, .. } = turn.step {
        return (vec![Action::Stall { keep_alive_ms }], Value::Null);
    }
    let sc = &turn.script;
    let resp_id = format!("resp_{}", turn.id);
    let item_id = format!("msg_{}", turn.id);
    let created_at = 1_764_000_000 + turn.id;
    let base = |status: &str, output: Value, usage_v: Value| {
        json!({"id": resp_id, "object": "response", "created_at": created_at, "model": model,
               "status": status, "output": output, "usage": usage_v})
    };
    let mut seq = 0u64;
    let mut ev = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        sse(name, &data)
    };
    let mut a = vec![
        ev("response.created", json!({"response": base("in_progress", json!([]), Value::Null)})),
        ev("response.in_progress", json!({"response": base("in_progress", json!([]), Value::Null)})),
        ev(
            "response.output_item.added",
            json!({"output_index": 0, "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        ev(
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
    ];
    let (deltas, cut) = play::deltas(turn, |_| {
        ev(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": sc.delta_text, "logprobs": []}),
        )
    });
    a.extend(deltas);
    if cut {
        return (a, Value::Null);
    }
    let text = sc.delta_text.repeat(sc.deltas as usize);
    let u = usage(sc.usage.input, sc.usage.cached, sc.usage.output);
    match &turn.step {
        Step::FailedEvent { code } => {
            let failed = json!({"id": resp_id, "object": "response", "created_at": created_at, "model": model,
                "status": "failed", "output": [], "usage": Value::Null,
                "error": {"code": code, "message": "scripted failure"}});
            a.push(ev("response.failed", json!({"response": failed})));
            return (a, failed);
        }
        Step::Incomplete { reason } => {
            let mut r = base("incomplete", json!([]), u.clone());
            r["incomplete_details"] = json!({"reason": reason});
            a.push(ev("response.incomplete", json!({"response": r.clone()})));
            return (a, r);
        }
        _ => {}
    }
    let part = json!({"type": "output_text", "text": text, "annotations": []});
    let item = json!({"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]});
    a.push(ev(
        "response.output_text.done",
        json!({"item_id": item_id, "output_index": 0, "content_index": 0, "text": text}),
    ));
    a.push(ev(
        "response.content_part.done",
        json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
    ));
    a.push(ev("response.output_item.done", json!({"output_index": 0, "item": item})));
    let mut output = vec![item];
    for (i, call) in sc.function_calls.iter().enumerate() {
        let (id, call_id, index) = (format!("fc_{}_{i}", turn.id), format!("call_{}_{i}", turn.id), i + 1);
        let added = json!({"id": id, "type": "function_call", "status": "in_progress", "call_id": call_id,
                           "name": call.name, "arguments": ""});
        a.push(ev("response.output_item.added", json!({"output_index": index, "item": added})));
        let half =
            call.arguments.char_indices().nth(call.arguments.chars().count() / 2).map_or(0, |(b, _)| b);
        for piece in [&call.arguments[..half], &call.arguments[half..]] {
            a.push(ev(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": piece}),
            ));
        }
        a.push(ev(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": call.arguments}),
        ));
        let item = json!({"id": id, "type": "function_call", "status": "completed", "call_id": call_id,
                          "name": call.name, "arguments": call.arguments});
        a.push(ev("response.output_item.done", json!({"output_index": index, "item": item.clone()})));
        output.push(item);
    }
    let done = base("completed", Value::Array(output), u);
    let mut sent = done.clone();
    if unstored {
        sent["output"] = json!([]);
    }
    a.push(ev("response.completed", json!({"response": sent})));
    (a, done)
}
