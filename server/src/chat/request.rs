//! A Chat Completions request as a Responses request (BEY-3), for Codex and OpenAI API accounts.
//!
//! Every parameter either has a Responses equivalent or is refused with a 400 that names it:
//! nothing that changes the answer is dropped silently. Parameters that only shape the Chat
//! Completions answer (`stream_options`) are kept by the caller for the way back.

use serde_json::{Map, Value, json};

use super::ChatError;

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
    for (key, value) in body {
        let key = key.as_str();
        if value.is_null() {
            continue;
        }
        if refused(key, value, REFUSED)? {
            continue;
        }
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
                let n = value
                    .as_u64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ChatError::new(key, format!("{key} must be a positive integer")))?;
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
    let list = value
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| ChatError::new("messages", "messages must be a non-empty array"))?;
    let mut instructions: Vec<String> = Vec::new();
    let mut input = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = |field: &str| format!("messages[{i}].{field}");
        let role =
            m["role"].as_str().ok_or_else(|| ChatError::new(&at("role"), "each message needs a role"))?;
        match role {
            "system" | "developer" => {
                instructions.push(text_of(&m["content"]).ok_or_else(|| {
                    ChatError::new(&at("content"), "a system or developer message holds text")
                })?)
            }
            "user" => input
                .push(json!({"type": "message", "role": "user", "content": user_parts(&m["content"], i)?})),
            "assistant" => {
                if let Some(text) = text_of(&m["content"]).filter(|t| !t.is_empty()) {
                    input.push(json!({"type": "message", "role": "assistant",
                                      "content": [{"type": "output_text", "text": text}]}));
                }
                if let Some(refusal) = m["refusal"].as_str() {
                    input.push(json!({"type": "message", "role": "assistant",
                                      "content": [{"type": "refusal", "refusal": refusal}]}));
                }
                for (j, call) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
                    let f = &call["function"];
                    let (Some(id), Some(name)) = (call["id"].as_str(), f["name"].as_str()) else {
                        return Err(ChatError::new(
                            &at(&format!("tool_calls[{j}]")),
                            "a tool call needs an id and a function name",
                        ));
                    };
                    let id = super::gemini::plain_id(id);
                    input.push(json!({"type": "function_call", "call_id": id, "name": name,
                                      "arguments": f["arguments"].as_str().unwrap_or("{}")}));
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().ok_or_else(|| {
                    ChatError::new(&at("tool_call_id"), "a tool message names its tool_call_id")
                })?;
                let output = text_of(&m["content"]).unwrap_or_default();
                let id = super::gemini::plain_id(id);
                input.push(json!({"type": "function_call_output", "call_id": id, "output": output}));
            }
            other => {
                return Err(ChatError::new(&at("role"), format!("unknown role {other:?}")));
            }
        }
    }
    let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
    Ok((instructions, input))
}

/// A message's text: a string, or the text parts of an array joined.
pub(super) fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            Some(parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""))
        }
        Value::Null => Some(String::new()),
        _ => None,
    }
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
    match value {
        Value::String(s) if ["auto", "none", "required"].contains(&s.as_str()) => Ok(value.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = value["function"]["name"]
                .as_str()
                .ok_or_else(|| ChatError::new("tool_choice.function.name", "name the function"))?;
            Ok(json!({"type": "function", "name": name}))
        }
        _ => Err(ChatError::new("tool_choice", "tool_choice must be auto, none, required or a function")),
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
