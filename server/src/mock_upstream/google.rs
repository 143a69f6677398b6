//! Antigravity / Cloud Code Assist (`/v1internal:*`) and Google OAuth (`/token`). Responses use
//! the v1internal envelope `{"response":{...},"traceId"}`; streams are `data:` lines only
//! (protocols.md §5).

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    Played, Step, Turn, json,
    play::{self, Action},
};

pub async fn stream_generate(played: Played) -> Response {
    generate(played, true)
}

pub async fn generate_content(played: Played) -> Response {
    generate(played, false)
}

fn generate(Played { turn, body }: Played, stream: bool) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "Invalid JSON payload received.", None);
    };
    if req["request"]["contents"].is_null() || req["project"].is_null() {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "missing project or request.contents",
            None,
        );
    }
    // Cloud Code knows model ids, not SDK suffixes: `model(high)` is no model there.
    if req["model"].as_str().is_some_and(|m| m.contains('(') || m.contains(')')) {
        return error(StatusCode::NOT_FOUND, "NOT_FOUND", "Requested entity was not found.", None);
    }
    if let Some(resp) = scripted_error(&turn) {
        return resp;
    }
    let model = req["model"].as_str().unwrap_or("gemini-3.1-pro-low").to_owned();
    let (actions, whole) = chunks(&turn, &model);
    if stream {
        let mut r = (StatusCode::OK, play::body(actions)).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        r
    } else {
        json(StatusCode::OK, json!({"response": whole, "traceId": format!("trace-{}", turn.id)}))
    }
}

pub async fn load_code_assist(_: Played) -> Response {
    json(
        StatusCode::OK,
        json!({"cloudaicompanionProject": "mock-project", "currentTier": {"id": "standard-tier"}}),
    )
}

/// A Google error body: `{"error":{"code","message","status","details"}}`.
fn error(status: StatusCode, grpc: &str, message: &str, details: Option<Value>) -> Response {
    json(
        status,
        json!({"error": {"code": status.as_u16(), "message": message, "status": grpc, "details": details.unwrap_or(json!([]))}}),
    )
}

fn scripted_error(turn: &Turn) -> Option<Response> {
    match &turn.step {
        Step::Status { status, retry_after, code: reason } => {
            let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let details = reason.as_ref().map(|r| {
                json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": r, "domain": "googleapis.com"}])
            });
            let grpc = match status {
                400 => "INVALID_ARGUMENT",
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                429 => "RESOURCE_EXHAUSTED",
                503 => "UNAVAILABLE",
                _ => "INTERNAL",
            };
            let mut r = error(code, grpc, &format!("scripted {status}"), details);
            if let Some(ra) = retry_after.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                r.headers_mut().insert(header::RETRY_AFTER, ra);
            }
            Some(r)
        }
        Step::ResourceExhausted { reason, model, retry_delay } => Some(error(
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            "You have exhausted your capacity on this model.",
            Some(json!([
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "cloudcode-pa.googleapis.com",
                 "metadata": {"model": model, "quotaResetDelay": retry_delay}},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
            ])),
        )),
        Step::UsageLimitReached { .. } | Step::InvalidGrant => {
            Some(error(StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED", "scripted rate limit", None))
        }
        _ => None,
    }
}

/// The stream chunks and the whole (non-streamed) response of one answer.
fn chunks(turn: &Turn, model: &str) -> (Vec<Action>, Value) {
    let sc = &turn.script;
    let response_id = format!("resp-{}", turn.id);
    let usage = json!({"promptTokenCount": sc.usage.input, "candidatesTokenCount": sc.usage.output,
                       "cachedContentTokenCount": sc.usage.cached, "totalTokenCount": sc.usage.input + sc.usage.output});
    let chunk = |text: &str, last: bool| {
        let mut candidate = json!({"content": {"role": "model", "parts": [{"text": text}]}, "index": 0});
        let mut r = json!({"candidates": [], "modelVersion": model, "responseId": response_id});
        if last {
            candidate["finishReason"] = json!("STOP");
            r["usageMetadata"] = usage.clone();
        }
        r["candidates"] = json!([candidate]);
        r
    };
    let (actions, cut) = play::deltas(turn, |i| {
        let last = i + 1 == sc.deltas;
        let envelope =
            json!({"response": chunk(&sc.delta_text, last), "traceId": format!("trace-{}", turn.id)});
        Action::Send(format!("data: {envelope}\n\n"))
    });
    if cut {
        return (actions, Value::Null);
    }
    let text = sc.delta_text.repeat(sc.deltas as usize);
    (actions, chunk(&text, true))
}
