//! A Chat Completions request as a Responses request (BEY-3), for Codex and OpenAI API accounts.
//!
//! Every parameter either has a Responses equivalent or is refused with a 400 that names it:
//! nothing that changes the answer is dropped silently. Parameters that only shape the Chat
//! Completions answer (`stream_options`) are kept by the caller for the way back.

use serde_json::{Map, Value, json};

use super::{
    ChatError,
    turns::{self, Turn},
};

/// Parameters Responses has no equivalent for, each changing the answer.
const REFUSED: &[(&str, &str)] = &[
    ("n", "only one choice (n = 1) can be produced"),
    ("stop", "stop sequences are not supported by the upstream"),
    ("presence_penalty", "not supported by the upstream"),
    ("frequency_penalty", "not supported by the upstream"),
    ("logit_bias", "not supported by the upstream"),
    ("logprobs", "not supported by the upstream"),
    ("top_logprobs", "not supported by the upstream"),
    ("seed", "not supported by the upstream"),
    ("audio", "audio output is not supported"),
    ("modalities", "only text output is supported"),
    ("prediction", "predicted outputs are not supported by the upstream"),
    ("functions", "use tools instead of the deprecated functions"),
    ("function_call", "use tool_choice instead of the deprecated function_call"),
    ("web_search_options", "not supported"),
];

/// Parameters passed through unchanged (same name and meaning in Responses).
const SAME: &[&str] = &[
    "model",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "store",
    "metadata",
    "service_tier",
    "user",
    "prompt_cache_key",
    "safety_identifier",
    "stream",
];

/// Translates `chat` (a Chat Completions body) into a Responses body.
pub fn to_responses(chat: &Value) -> Result<Value, ChatError> {
    let body =
        chat.as_object().ok_or_else(|| ChatError::new("", "the request body must be a JSON object"))?;
    let mut out = Map::new();
    for (key, value) in acted_on(body, &[], REFUSED)? {
        match key {
            "messages" => {
                let (instructions, input) = messages(value)?;
                if let Some(i) = instructions {
                    out.insert("instructions".into(), Value::String(i));
                }
                out.insert("input".into(), Value::Array(input));
            }
            "tools" => {
                out.insert("tools".into(), tools(value)?);
            }
            "tool_choice" => {
                out.insert("tool_choice".into(), tool_choice(value)?);
            }
            "response_format" => {
                set_text_option(&mut out, "format", response_format(value)?);
            }
            "reasoning_effort" => {
                out.insert("reasoning".into(), json!({"effort": value}));
            }
            "max_tokens" | "max_completion_tokens" => {
                let n = limit(key, value)?;
                out.insert("max_output_tokens".into(), json!(n));
            }
            "verbosity" => {
                set_text_option(&mut out, "verbosity", value.clone());
            }
            // shapes the answer on the way back; nothing to send
            "stream_options" => {}
            k if SAME.contains(&k) => {
                out.insert(k.to_owned(), value.clone());
            }
            k => return Err(ChatError::new(k, format!("{k}: unknown parameter"))),
        }
    }
    if !out.contains_key("input") {
        return Err(ChatError::new("messages", "messages is required"));
    }
    // Chat Completions stores nothing unless asked; Responses stores by default.
    out.entry("store").or_insert(Value::Bool(false));
    Ok(Value::Object(out))
}

/// The Codex backend takes fewer parameters than the OpenAI API: it refuses sampling settings and
/// an output limit (a 400 upstream that would name neither), so they are refused here by their
/// Chat name, unless harmless (1 is the default temperature and top_p); the end-user and metadata
/// fields, which change nothing in the answer, are left out.
pub(super) fn for_codex(chat: &Value, responses: &mut Value) -> Result<(), ChatError> {
    for key in ["temperature", "top_p"] {
        if chat[key].as_f64().is_some_and(|v| v != 1.0) {
            return Err(ChatError::new(
                key,
                format!("{key}: not supported by Codex accounts (leave it out)"),
            ));
        }
    }
    if let Some(key) = ["max_completion_tokens", "max_tokens"].into_iter().find(|k| !chat[*k].is_null()) {
        return Err(ChatError::new(
            key,
            format!(
                "{key}: Codex accounts take no output limit (leave it out, or use an OpenAI API account)"
            ),
        ));
    }
    if let Some(out) = responses.as_object_mut() {
        for key in ["temperature", "top_p", "user", "safety_identifier", "metadata"] {
            out.remove(key);
        }
    }
    Ok(())
}

/// Sets `key` in the Responses `text` object, shared by `response_format` and `verbosity`.
fn set_text_option(out: &mut Map<String, Value>, key: &str, value: Value) {
    match out.get_mut("text") {
        Some(Value::Object(text)) => {
            text.insert(key.to_owned(), value);
        }
        _ => {
            out.insert("text".into(), json!({ key: value }));
        }
    }
}

/// Whether `key` is one of the `refused` parameters but with its harmless default (n = 1,
/// logprobs false, an empty stop, 0 penalties), so it is skipped; any other value of a refused
/// parameter is a 400 naming it.
pub(super) fn refused(key: &str, value: &Value, refused: &[(&str, &str)]) -> Result<bool, ChatError> {
    let Some((_, why)) = refused.iter().find(|(k, _)| *k == key) else { return Ok(false) };
    let harmless = match key {
        "n" => value.as_u64() == Some(1),
        "logprobs" => value.as_bool() == Some(false),
        "stop" => value.as_array().is_some_and(Vec::is_empty),
        "presence_penalty" | "frequency_penalty" => value.as_f64() == Some(0.0),
        _ => false,
    };
    if harmless { Ok(true) } else { Err(ChatError::new(key, format!("{key}: {why}"))) }
}

/// System and developer messages become `instructions` (joined by a blank line, in order); the
/// rest become input items in order.
fn messages(value: &Value) -> Result<(Option<String>, Vec<Value>), ChatError> {
    let read = turns::read(value)?;
    let mut input = Vec::new();
    for turn in &read.turns {
        match turn {
            Turn::User { content, index } => input
                .push(json!({"type": "message", "role": "user", "content": user_parts(content, *index)?})),
            Turn::Assistant { text, refusal, calls } => {
                if let Some(text) = text {
                    input.push(json!({"type": "message", "role": "assistant",
                                      "content": [{"type": "output_text", "text": text}]}));
                }
                if let Some(refusal) = refusal {
                    input.push(json!({"type": "message", "role": "assistant",
                                      "content": [{"type": "refusal", "refusal": refusal}]}));
                }
                for call in calls {
                    input.push(json!({"type": "function_call", "call_id": super::gemini::plain_id(call.id),
                                      "name": call.name, "arguments": call.arguments}));
                }
            }
            Turn::Tool { id, content, .. } => input.push(
                json!({"type": "function_call_output", "call_id": super::gemini::plain_id(id), "output": content}),
            ),
        }
    }
    Ok((read.system, input))
}

/// A user message's content as Responses input parts: text and images.
fn user_parts(content: &Value, i: usize) -> Result<Vec<Value>, ChatError> {
    match content {
        Value::String(s) => Ok(vec![json!({"type": "input_text", "text": s})]),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match p["type"].as_str() {
                Some("text") => {
                    Ok(json!({"type": "input_text", "text": p["text"].as_str().unwrap_or_default()}))
                }
                Some("image_url") => {
                    let url =
                        p["image_url"]["url"].as_str().or(p["image_url"].as_str()).ok_or_else(|| {
                            ChatError::new(
                                &format!("messages[{i}].content[{j}].image_url"),
                                "an image needs a url",
                            )
                        })?;
                    let detail = p["image_url"]["detail"].as_str().unwrap_or("auto");
                    Ok(json!({"type": "input_image", "image_url": url, "detail": detail}))
                }
                Some("file") => {
                    let f = &p["file"];
                    let mut part = json!({"type": "input_file"});
                    for k in ["file_id", "file_data", "filename"] {
                        if let Some(v) = f.get(k) {
                            part[k] = v.clone();
                        }
                    }
                    Ok(part)
                }
                other => Err(ChatError::new(
                    &format!("messages[{i}].content[{j}].type"),
                    format!("content part type {} is not supported", other.unwrap_or("(none)")),
                )),
            })
            .collect(),
        _ => Err(ChatError::new(
            &format!("messages[{i}].content"),
            "content must be a string or an array of parts",
        )),
    }
}

/// The function tools of a request, checked: each one's name and its `function` object.
pub(super) fn function_tools(value: &Value) -> Result<Vec<(&str, &Value)>, ChatError> {
    let list = value.as_array().ok_or_else(|| ChatError::new("tools", "tools must be an array"))?;
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            if t["type"] != "function" {
                return Err(ChatError::new(&format!("tools[{i}].type"), "only function tools are supported"));
            }
            let f = &t["function"];
            let name = f["name"].as_str().ok_or_else(|| {
                ChatError::new(&format!("tools[{i}].function.name"), "a function tool needs a name")
            })?;
            Ok((name, f))
        })
        .collect()
}

fn tools(value: &Value) -> Result<Value, ChatError> {
    let tools = function_tools(value)?.into_iter().map(|(name, f)| {
        let mut tool = json!({"type": "function", "name": name});
        for k in ["description", "parameters", "strict"] {
            if let Some(v) = f.get(k).filter(|v| !v.is_null()) {
                tool[k] = v.clone();
            }
        }
        // Chat Completions tools are not strict unless asked; Responses tools are by default
        if tool.get("strict").is_none() {
            tool["strict"] = json!(false);
        }
        tool
    });
    Ok(Value::Array(tools.collect()))
}

fn tool_choice(value: &Value) -> Result<Value, ChatError> {
    Ok(match Choice::of(value)? {
        Choice::Auto => json!("auto"),
        Choice::None => json!("none"),
        Choice::Required => json!("required"),
        Choice::Function(name) => json!({"type": "function", "name": name}),
    })
}

/// The parameters of a Chat body a translation acts on, in order: set (not null), not `ignored`,
/// and not one of the `refused` at its harmless default; a refused one at any other value is a
/// 400 naming it.
pub(super) fn acted_on<'a>(
    body: &'a Map<String, Value>,
    ignored: &[&str],
    refused_ones: &[(&str, &str)],
) -> Result<Vec<(&'a str, &'a Value)>, ChatError> {
    let mut out = Vec::new();
    for (key, value) in body {
        let key = key.as_str();
        if value.is_null() || ignored.contains(&key) || refused(key, value, refused_ones)? {
            continue;
        }
        out.push((key, value));
    }
    Ok(out)
}

/// An output limit (`max_tokens`, `max_completion_tokens`): a positive integer.
pub(super) fn limit(key: &str, value: &Value) -> Result<u64, ChatError> {
    value
        .as_u64()
        .filter(|n| *n > 0)
        .ok_or_else(|| ChatError::new(key, format!("{key} must be a positive integer")))
}

/// `stop`: one string or a list of strings, as a list.
pub(super) fn stop_list(value: &Value) -> Result<Vec<Value>, ChatError> {
    match value {
        Value::String(s) => Ok(vec![Value::String(s.clone())]),
        Value::Array(a) if a.iter().all(Value::is_string) => Ok(a.clone()),
        _ => Err(ChatError::new("stop", "stop must be a string or an array of strings")),
    }
}

/// A Chat Completions `tool_choice`, checked; each translation writes it its own way.
pub(super) enum Choice<'a> {
    Auto,
    None,
    Required,
    Function(&'a str),
}

impl Choice<'_> {
    pub(super) fn of(value: &Value) -> Result<Choice<'_>, ChatError> {
        match value {
            Value::String(s) if s == "auto" => Ok(Choice::Auto),
            Value::String(s) if s == "none" => Ok(Choice::None),
            Value::String(s) if s == "required" => Ok(Choice::Required),
            Value::Object(_) if value["type"] == "function" => value["function"]["name"]
                .as_str()
                .map(Choice::Function)
                .ok_or_else(|| ChatError::new("tool_choice.function.name", "name the function")),
            _ => Err(ChatError::new("tool_choice", "tool_choice must be auto, none, required or a function")),
        }
    }
}

fn response_format(value: &Value) -> Result<Value, ChatError> {
    match value["type"].as_str() {
        Some("text") => Ok(json!({"type": "text"})),
        Some("json_object") => Ok(json!({"type": "json_object"})),
        Some("json_schema") => {
            let s = &value["json_schema"];
            let name = s["name"].as_str().ok_or_else(|| {
                ChatError::new("response_format.json_schema.name", "a JSON schema needs a name")
            })?;
            let mut format = json!({"type": "json_schema", "name": name, "schema": s["schema"].clone()});
            for k in ["description", "strict"] {
                if let Some(v) = s.get(k).filter(|v| !v.is_null()) {
                    format[k] = v.clone();
                }
            }
            Ok(format)
        }
        _ => Err(ChatError::new(
            "response_format.type",
            "response_format type must be text, json_object or json_schema",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parts_tools_and_parameters_translate() {
        let chat = json!({
            "model": "gpt-5.1",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this picture, and the weather?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather by city",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "parallel_tool_calls": true,
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": true,
                                "schema": {"type": "object"}}},
            "verbosity": "low",
            "reasoning_effort": "low",
            "max_completion_tokens": 300,
            "temperature": 0.2,
            "stream": true,
            "stream_options": {"include_usage": true},
            "n": 1,
            "user": "u-1"
        });
        let r = to_responses(&chat).unwrap();
        assert_eq!(r["instructions"], "Be brief.\n\nUse tools.");
        assert_eq!(
            r["input"],
            json!([
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "What is in this picture, and the weather?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}
                ]},
                {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": "rain"}
            ])
        );
        assert_eq!(
            r["tools"],
            json!([{"type": "function", "name": "weather", "description": "Weather by city", "strict": false,
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
        );
        assert_eq!(r["tool_choice"], json!({"type": "function", "name": "weather"}));
        assert_eq!(
            r["text"],
            json!({"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true},
                   "verbosity": "low"})
        );
        assert_eq!(r["store"], false, "Chat Completions stores nothing unless asked");
        assert_eq!(r["reasoning"], json!({"effort": "low"}));
        assert_eq!(r["max_output_tokens"], 300);
        assert_eq!(
            (r["temperature"].clone(), r["stream"].clone(), r["user"].clone()),
            (json!(0.2), json!(true), json!("u-1"))
        );
        assert!(r.get("stream_options").is_none() && r.get("n").is_none());
    }

    #[test]
    fn what_changes_the_answer_and_has_no_equivalent_is_refused_by_name() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (param, value) in [
            ("n", json!(2)),
            ("stop", json!(["\n"])),
            ("logit_bias", json!({"50256": -100})),
            ("seed", json!(7)),
            ("frequency_penalty", json!(0.5)),
            ("bogus", json!(1)),
        ] {
            let mut chat = base.clone();
            chat[param] = value;
            assert_eq!(to_responses(&chat).unwrap_err().param, param, "{param}");
        }
        let mut harmless = base.clone();
        harmless["n"] = json!(1);
        harmless["stop"] = json!([]);
        harmless["logprobs"] = json!(false);
        harmless["seed"] = Value::Null;
        assert!(to_responses(&harmless).is_ok());
        assert_eq!(to_responses(&json!({"model": "m"})).unwrap_err().param, "messages");
        let bad_role = json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]});
        assert_eq!(to_responses(&bad_role).unwrap_err().param, "messages[0].role");
        let bad_part =
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]});
        assert_eq!(to_responses(&bad_part).unwrap_err().param, "messages[0].content[0].type");
    }
}
