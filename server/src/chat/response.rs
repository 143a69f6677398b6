//! A Responses answer as a Chat Completions answer (BEY-3): the collected `chat.completion`, and
//! the pieces the streaming transform shares with it (finish reasons, usage).

use serde_json::{Value, json};

/// `finish_reason` for a Responses answer: tool calls, a token limit, a content filter, or stop.
pub fn finish_reason(response: &Value, called_tools: bool) -> &'static str {
    match (response["status"].as_str(), response["incomplete_details"]["reason"].as_str()) {
        (Some("incomplete"), Some("max_output_tokens")) => "length",
        (Some("incomplete"), Some("content_filter")) => "content_filter",
        _ if called_tools => "tool_calls",
        _ => "stop",
    }
}

/// Responses `usage` as Chat Completions `usage` (cached and reasoning tokens in their details).
pub fn usage(u: &Value) -> Value {
    let prompt = u["input_tokens"].as_i64().unwrap_or(0);
    let completion = u["output_tokens"].as_i64().unwrap_or(0);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": u["total_tokens"].as_i64().unwrap_or(prompt + completion),
        "prompt_tokens_details": {"cached_tokens": u["input_tokens_details"]["cached_tokens"].as_i64().unwrap_or(0)},
        "completion_tokens_details": {"reasoning_tokens": u["output_tokens_details"]["reasoning_tokens"].as_i64().unwrap_or(0)},
    })
}

/// The Chat Completions id of a Responses answer (`resp_abc` -> `chatcmpl-abc`).
pub fn completion_id(response: &Value) -> String {
    let id = response["id"].as_str().unwrap_or_default();
    format!("chatcmpl-{}", id.strip_prefix("resp_").unwrap_or(id))
}

/// A collected Responses answer as a `chat.completion`. `model` is the model the client asked
/// for (an alias stays the client's name).
pub fn from_responses(response: &Value, model: &str) -> Value {
    let mut text = String::new();
    let mut refusal: Option<String> = None;
    let mut tool_calls = Vec::new();
    for item in response["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("output_text") => text.push_str(part["text"].as_str().unwrap_or_default()),
                        Some("refusal") => refusal
                            .get_or_insert_with(String::new)
                            .push_str(part["refusal"].as_str().unwrap_or_default()),
                        _ => {}
                    }
                }
            }
            Some("function_call") => tool_calls.push(json!({
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"].as_str().unwrap_or("{}")},
            })),
            _ => {}
        }
    }
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && (!tool_calls.is_empty() || refusal.is_some()) { Value::Null } else { Value::String(text) },
        "refusal": refusal,
        "annotations": [],
    });
    let finish = finish_reason(response, !tool_calls.is_empty());
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let mut out = json!({
        "id": completion_id(response),
        "object": "chat.completion",
        "created": response["created_at"].as_i64().unwrap_or(0),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
    });
    if response["usage"].is_object() {
        out["usage"] = usage(&response["usage"]);
    }
    if let Some(tier) = response["service_tier"].as_str() {
        out["service_tier"] = json!(tier);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_answer_with_usage() {
        let r = json!({"id": "resp_123", "created_at": 1_900_000_000, "status": "completed",
            "output": [
                {"type": "reasoning", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello", "annotations": []},
                                                                     {"type": "output_text", "text": " there"}]}
            ],
            "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 64}, "output_tokens": 7,
                      "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 127}});
        assert_eq!(
            from_responses(&r, "my-alias"),
            json!({"id": "chatcmpl-123", "object": "chat.completion", "created": 1_900_000_000, "model": "my-alias",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there", "refusal": null, "annotations": []},
                                "logprobs": null, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,
                             "prompt_tokens_details": {"cached_tokens": 64},
                             "completion_tokens_details": {"reasoning_tokens": 2}}})
        );
    }

    #[test]
    fn parallel_tool_calls_and_finish_reasons() {
        let r = json!({"id": "resp_9", "status": "completed", "output": [
            {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_b", "name": "weather", "arguments": "{\"city\":\"Rome\"}"}
        ]});
        let c = from_responses(&r, "m");
        let choice = &c["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(
            choice["message"]["tool_calls"][1],
            json!({"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}})
        );
        let cut = json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []});
        assert_eq!(from_responses(&cut, "m")["choices"][0]["finish_reason"], "length");
        let filtered =
            json!({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}, "output": []});
        assert_eq!(finish_reason(&filtered, false), "content_filter");
    }
}
