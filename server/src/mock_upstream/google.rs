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
        return error(
            stream,
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "Invalid JSON payload received.",
            None,
        );
    };
    if req["request"]["contents"].is_null() || req["project"].is_null() {
        return error(
            stream,
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "missing project or request.contents",
            None,
        );
    }
    // Cloud Code knows model ids, not SDK suffixes: `model(high)` is no model there.
    if req["model"].as_str().is_some_and(|m| m.contains('(') || m.contains(')')) {
        return error(stream, StatusCode::NOT_FOUND, "NOT_FOUND", "Requested entity was not found.", None);
    }
    if let Err(message) = check_request(&req["request"], req["model"].as_str().unwrap_or_default()) {
        return error(stream, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", &message, None);
    }
    if let Some(resp) = scripted_error(&turn, stream) {
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

/// A Google error body: `{"error":{"code","message","status","details"}}`. Cloud Code's
/// streaming method (`stream`) sends it as the one element of an array, as it would send a
/// stream of answers in JSON (gemini-cli's reports of its 429s show `[{"error": {...}}]`).
fn error(stream: bool, status: StatusCode, grpc: &str, message: &str, details: Option<Value>) -> Response {
    let error = json!({"error": {"code": status.as_u16(), "message": message, "status": grpc, "details": details.unwrap_or(json!([]))}});
    json(status, if stream { json!([error]) } else { error })
}

fn scripted_error(turn: &Turn, stream: bool) -> Option<Response> {
    match &turn.step {
        Step::Status { status, retry_after, code: reason, message } => {
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
            let message = message.clone().unwrap_or_else(|| format!("scripted {status}"));
            let mut r = error(stream, code, grpc, &message, details);
            if let Some(ra) = retry_after.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                r.headers_mut().insert(header::RETRY_AFTER, ra);
            }
            Some(r)
        }
        Step::ResourceExhausted { reason, model, retry_delay } => Some(error(
            stream,
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            "You have exhausted your capacity on this model.",
            Some(json!([
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "cloudcode-pa.googleapis.com",
                 "metadata": {"model": model, "quotaResetDelay": retry_delay}},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
            ])),
        )),
        Step::UsageLimitReached { .. } | Step::InvalidGrant => Some(error(
            stream,
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            "scripted rate limit",
            None,
        )),
        Step::ContextTooLong { tokens, limit } => Some(error(
            stream,
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            &format!(
                "The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit})."
            ),
            None,
        )),
        _ => None,
    }
}

/// The request fields Gemini knows; like the real API (a protobuf message), any other name is a 400.
const REQUEST_FIELDS: &[&str] = &[
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "labels",
    "sessionId",
];
const CONFIG_FIELDS: &[&str] = &[
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "thinkingConfig",
    "mediaResolution",
];
const PART_DATA: &[&str] = &["text", "inlineData", "fileData", "functionCall", "functionResponse"];
const PART_FIELDS: &[&str] =
    &["text", "inlineData", "fileData", "functionCall", "functionResponse", "thought", "thoughtSignature"];

/// Checks a generateContent request as strictly as Gemini does: known field names only, `user`
/// and `model` roles, one datum per part, as many function responses as the calls they answer,
/// and (Gemini 3) the current turn's function calls signed with the signature they came with.
fn check_request(request: &Value, model: &str) -> Result<(), String> {
    let unknown = |obj: &Value, known: &[&str], at: &str| {
        obj.as_object().into_iter().flatten().find(|(k, _)| !known.contains(&k.as_str())).map(|(k, _)| {
            format!("Invalid JSON payload received. Unknown name \"{k}\" at '{at}': Cannot find field.")
        })
    };
    if let Some(e) = unknown(request, REQUEST_FIELDS, "request") {
        return Err(e);
    }
    if let Some(e) = unknown(&request["generationConfig"], CONFIG_FIELDS, "request.generation_config") {
        return Err(e);
    }
    let contents = request["contents"].as_array().ok_or("contents must be a list")?;
    let mut calls_before = 0;
    // the current turn starts after the last user content that is not only function responses
    let current = contents
        .iter()
        .rposition(|c| {
            c["role"] == "user"
                && c["parts"].as_array().into_iter().flatten().any(|p| p.get("functionResponse").is_none())
        })
        .unwrap_or(0);
    for (i, c) in contents.iter().enumerate() {
        let role = c["role"].as_str().unwrap_or_default();
        if !matches!(role, "user" | "model") {
            return Err(format!("Please use a valid role: user, model. (contents[{i}].role is {role:?})"));
        }
        let parts = c["parts"]
            .as_array()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("contents[{i}].parts must not be empty"))?;
        for (j, p) in parts.iter().enumerate() {
            if let Some(e) = unknown(p, PART_FIELDS, &format!("request.contents[{i}].parts[{j}]")) {
                return Err(e);
            }
            if PART_DATA.iter().filter(|k| p.get(**k).is_some()).count() != 1 {
                return Err(format!("contents[{i}].parts[{j}] must hold exactly one of {PART_DATA:?}"));
            }
            if model.starts_with("gemini-3")
                && i > current
                && p.get("functionCall").is_some()
                && p["thoughtSignature"]
                    .as_str()
                    .is_none_or(|s| !s.starts_with("sig-") && s != "skip_thought_signature_validator")
            {
                return Err(format!(
                    "Function call is missing a thought_signature in functionCall parts. (contents[{i}].parts[{j}])"
                ));
            }
        }
        let count = |k: &str| parts.iter().filter(|p| p.get(k).is_some()).count();
        let responses = count("functionResponse");
        if responses > 0 && responses != calls_before {
            return Err("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into());
        }
        calls_before = count("functionCall");
    }
    Ok(())
}

/// The stream chunks and the whole (non-streamed) response of one answer.
fn chunks(turn: &Turn, model: &str) -> (Vec<Action>, Value) {
    let sc = &turn.script;
    let response_id = format!("resp-{}", turn.id);
    let usage = json!({"promptTokenCount": sc.usage.input, "candidatesTokenCount": sc.usage.output,
                       "cachedContentTokenCount": sc.usage.cached, "totalTokenCount": sc.usage.input + sc.usage.output});
    // function calls come whole in the last chunk, each signed (Gemini 3 checks it comes back)
    let calls: Vec<Value> = sc
        .function_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let args: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
            json!({"functionCall": {"name": c.name, "args": args}, "thoughtSignature": format!("sig-{}-{i}", turn.id)})
        })
        .collect();
    let chunk = |text: &str, last: bool| {
        let mut parts = vec![json!({"text": text})];
        if last {
            parts.extend(calls.iter().cloned());
        }
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
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
