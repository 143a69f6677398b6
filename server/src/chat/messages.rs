//! Chat Completions to and from Anthropic Messages (BEY-3), for Claude and Anthropic API accounts:
//! the request, the collected answer, and the stream transform.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::{
    ChatError,
    stream::{Chunks, Transform},
    turns::{self, Turn},
};
use crate::providers::lenient::{Loose, lenient_object};

/// `max_tokens` when the client sets none (Messages requires one; Chat Completions has no limit
/// by default): large enough for any ordinary answer of the current models.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// Parameters with no Messages equivalent, each changing the answer.
const REFUSED: &[(&str, &str)] = &[
    ("n", "only one choice (n = 1) can be produced"),
    ("presence_penalty", "not supported by Anthropic upstreams"),
    ("frequency_penalty", "not supported by Anthropic upstreams"),
    ("logit_bias", "not supported by Anthropic upstreams"),
    ("logprobs", "not supported by Anthropic upstreams"),
    ("top_logprobs", "not supported by Anthropic upstreams"),
    ("seed", "not supported by Anthropic upstreams"),
    ("audio", "audio output is not supported"),
    ("modalities", "only text output is supported"),
    ("prediction", "predicted outputs are not supported"),
    ("functions", "use tools instead of the deprecated functions"),
    ("function_call", "use tool_choice instead of the deprecated function_call"),
    ("web_search_options", "not supported"),
    ("verbosity", "not supported by Anthropic upstreams"),
];

/// Parameters that only concern OpenAI's side (storage, billing tier, routing) and change nothing
/// in the answer.
const IGNORED: &[&str] =
    &["store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier", "stream_options"];

/// Thinking budgets for `reasoning_effort`.
fn thinking_budget(effort: &str) -> Option<u64> {
    match effort {
        "minimal" | "none" => None,
        "low" => Some(1024),
        "medium" => Some(4096),
        _ => Some(16_384),
    }
}

/// Translates `chat` (a Chat Completions body) into a Messages body.
pub fn to_messages(chat: &Value) -> Result<Value, ChatError> {
    let body =
        chat.as_object().ok_or_else(|| ChatError::new("", "the request body must be a JSON object"))?;
    let mut out = Map::new();
    let mut max_tokens: Option<u64> = None;
    let mut thinking: Option<u64> = None;
    let mut parallel = true;
    let mut tool_choice: Option<Value> = None;
    for (key, value) in super::request::acted_on(body, IGNORED, REFUSED)? {
        match key {
            "model" | "temperature" | "top_p" | "stream" => {
                out.insert(key.to_owned(), value.clone());
            }
            "messages" => {
                let (system, messages) = messages(value)?;
                if let Some(s) = system {
                    out.insert("system".into(), Value::String(s));
                }
                out.insert("messages".into(), Value::Array(messages));
            }
            "max_tokens" | "max_completion_tokens" => {
                let n = super::request::limit(key, value)?;
                max_tokens = Some(n);
            }
            "stop" => {
                let list = super::request::stop_list(value)?;
                if !list.is_empty() {
                    out.insert("stop_sequences".into(), Value::Array(list));
                }
            }
            "user" => {
                out.insert("metadata".into(), json!({"user_id": value}));
            }
            "tools" => {
                out.insert("tools".into(), tools(value)?);
            }
            "tool_choice" => tool_choice = Some(choice(value)?),
            "parallel_tool_calls" => parallel = value.as_bool() != Some(false),
            "reasoning_effort" => {
                let effort =
                    value.as_str().ok_or_else(|| ChatError::new(key, "reasoning_effort is a string"))?;
                thinking = thinking_budget(effort);
            }
            "response_format" => {
                if value["type"] != "text" {
                    return Err(ChatError::new(
                        "response_format",
                        "response_format: JSON output formats are not supported by Anthropic upstreams",
                    ));
                }
            }
            k => return Err(ChatError::new(k, format!("{k}: unknown parameter"))),
        }
    }
    if !out.contains_key("messages") {
        return Err(ChatError::new("messages", "messages is required"));
    }
    let max_tokens = max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    // Thinking resumes a tool loop only from the signed thinking block that started it, which a
    // Chat history cannot carry: the loop's later calls go without thinking (Anthropic refuses
    // an assistant tool use without its thinking block otherwise).
    let thinking = thinking.filter(|_| !in_tool_loop(&out));
    if thinking.is_some() {
        if out.get("temperature").and_then(Value::as_f64).is_some_and(|t| t != 1.0) {
            return Err(ChatError::new(
                "temperature",
                "temperature: Anthropic upstreams take only 1 while reasoning_effort asks for thinking",
            ));
        }
        if out.get("top_p").and_then(Value::as_f64).is_some_and(|p| p < 0.95) {
            return Err(ChatError::new(
                "top_p",
                "top_p: Anthropic upstreams take 0.95 to 1 while reasoning_effort asks for thinking",
            ));
        }
        if tool_choice.as_ref().is_some_and(|c| matches!(c["type"].as_str(), Some("any" | "tool"))) {
            return Err(ChatError::new(
                "tool_choice",
                "tool_choice: Anthropic upstreams cannot force a tool while reasoning_effort asks for thinking",
            ));
        }
    }
    if let Some(budget) = thinking {
        if max_tokens <= budget {
            return Err(ChatError::new(
                "max_completion_tokens",
                format!(
                    "max_completion_tokens must exceed the thinking budget of this reasoning_effort ({budget})"
                ),
            ));
        }
        out.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    out.insert("max_tokens".into(), json!(max_tokens));
    cache_breakpoints(&mut out);
    if out.contains_key("tools") {
        let mut c = tool_choice.unwrap_or_else(|| json!({"type": "auto"}));
        if !parallel && c["type"] != "none" {
            c["disable_parallel_tool_use"] = json!(true);
        }
        out.insert("tool_choice".into(), c);
    }
    Ok(Value::Object(out))
}

/// Whether the last turns are a tool loop: an assistant tool use after the user's last own words.
fn in_tool_loop(out: &Map<String, Value>) -> bool {
    let Some(turns) = out.get("messages").and_then(Value::as_array) else { return false };
    let blocks =
        |t: &Value, kind: &str| t["content"].as_array().into_iter().flatten().any(|b| b["type"] == kind);
    let asked = turns
        .iter()
        .rposition(|t| {
            t["role"] == "user"
                && t["content"].as_array().into_iter().flatten().any(|b| b["type"] != "tool_result")
        })
        .unwrap_or(0);
    turns[asked..].iter().any(|t| t["role"] == "assistant" && blocks(t, "tool_use"))
}

/// Marks where Anthropic may cache the prompt, so a conversation's repeated prefix is read from
/// the cache instead of paid again: after the system prompt (shared by every conversation that
/// uses it) and after the last message (the next call of this conversation starts with it). A
/// client that placed its own `cache_control` marks keeps exactly those (at most 4 are allowed).
fn cache_breakpoints(out: &mut Map<String, Value>) {
    let ephemeral = || json!({"type": "ephemeral"});
    let messages = out.get_mut("messages").and_then(Value::as_array_mut);
    let client_marked = messages.as_ref().is_some_and(|m| {
        m.iter()
            .flat_map(|t| t["content"].as_array().into_iter().flatten())
            .any(|b| b.get("cache_control").is_some())
    });
    if client_marked {
        return;
    }
    if let Some(last) = messages
        .and_then(|m| m.last_mut())
        .and_then(|t| t["content"].as_array_mut())
        .and_then(|c| c.last_mut())
    {
        last["cache_control"] = ephemeral();
    }
    if let Some(Value::String(system)) = out.get("system") {
        let block = json!([{"type": "text", "text": system, "cache_control": ephemeral()}]);
        out.insert("system".into(), block);
    }
}

/// System and developer messages become `system`; the rest become alternating turns (tool results
/// are user content; consecutive turns of one role are merged).
fn messages(value: &Value) -> Result<(Option<String>, Vec<Value>), ChatError> {
    let read = turns::read(value)?;
    let mut items = Vec::new();
    for turn in &read.turns {
        match turn {
            Turn::User { content, index } => items.push(("user", user_blocks(content, *index)?)),
            Turn::Assistant { text, calls, .. } => {
                let mut blocks: Vec<Value> =
                    text.iter().map(|t| json!({"type": "text", "text": t})).collect();
                for call in calls {
                    blocks.push(json!({"type": "tool_use", "id": tool_id(call.id), "name": call.name,
                                       "input": call.object()?}));
                }
                items.push(("assistant", blocks));
            }
            Turn::Tool { id, content, .. } => items.push((
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": tool_id(id), "content": content})],
            )),
        }
    }
    let turns = turns::merged(items)
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((read.system, turns))
}

/// A tool call id as Anthropic takes it (`[A-Za-z0-9_-]+`): without a Gemini signature, other
/// characters replaced, the same for a call and its result.
fn tool_id(id: &str) -> String {
    let plain = super::gemini::plain_id(id);
    plain.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

fn user_blocks(content: &Value, i: usize) -> Result<Vec<Value>, ChatError> {
    match content {
        Value::String(s) => Ok(vec![json!({"type": "text", "text": s})]),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let at = format!("messages[{i}].content[{j}]");
                match p["type"].as_str() {
                    Some("text") => {
                        let mut block =
                            json!({"type": "text", "text": p["text"].as_str().unwrap_or_default()});
                        // a client's own cache mark (the convention of Anthropic-aware Chat clients)
                        if let Some(c) = p.get("cache_control").filter(|c| c.is_object()) {
                            block["cache_control"] = c.clone();
                        }
                        Ok(block)
                    }
                    Some("image_url") => {
                        let url =
                            p["image_url"]["url"].as_str().or(p["image_url"].as_str()).unwrap_or_default();
                        image(url).ok_or_else(|| {
                            ChatError::new(
                                &format!("{at}.image_url"),
                                "an image is a data: URL or an http(s) URL",
                            )
                        })
                    }
                    other => Err(ChatError::new(
                        &format!("{at}.type"),
                        format!(
                            "content part type {} is not supported by Anthropic upstreams",
                            other.unwrap_or("(none)")
                        ),
                    )),
                }
            })
            .collect(),
        _ => Err(ChatError::new(
            &format!("messages[{i}].content"),
            "content must be a string or an array of parts",
        )),
    }
}

/// An image block from a `data:<type>;base64,<data>` or an http(s) URL.
fn image(url: &str) -> Option<Value> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest.split_once(";base64,")?;
        return Some(
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
        );
    }
    (url.starts_with("https://") || url.starts_with("http://"))
        .then(|| json!({"type": "image", "source": {"type": "url", "url": url}}))
}

fn tools(value: &Value) -> Result<Value, ChatError> {
    let tools = super::request::function_tools(value)?.into_iter().map(|(name, f)| {
        let schema = f
            .get("parameters")
            .filter(|p| !p.is_null())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        let mut tool = json!({"name": name, "input_schema": schema});
        if let Some(d) = f["description"].as_str() {
            tool["description"] = json!(d);
        }
        tool
    });
    Ok(Value::Array(tools.collect()))
}

fn choice(value: &Value) -> Result<Value, ChatError> {
    use super::request::Choice;
    Ok(match Choice::of(value)? {
        Choice::Auto => json!({"type": "auto"}),
        Choice::None => json!({"type": "none"}),
        Choice::Required => json!({"type": "any"}),
        Choice::Function(name) => json!({"type": "tool", "name": name}),
    })
}

/// `finish_reason` for a Messages `stop_reason`.
fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

/// Messages usage as Chat Completions usage: prompt tokens include the cache reads and writes.
fn usage(u: &Value, output: Option<i64>) -> Value {
    let n = |k: &str| u[k].as_i64().unwrap_or(0);
    let cached = n("cache_read_input_tokens");
    let prompt = n("input_tokens") + cached + n("cache_creation_input_tokens");
    let completion = output.unwrap_or_else(|| n("output_tokens"));
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

fn completion_id(message_id: &str) -> String {
    format!("chatcmpl-{}", message_id.strip_prefix("msg_").unwrap_or(message_id))
}

/// A collected Messages answer as a `chat.completion`; `created` is the gateway's clock (Messages
/// answers carry no time).
pub fn from_messages(message: &Value, model: &str, created: i64) -> Value {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in message["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(json!({
                "id": block["id"], "type": "function",
                "function": {"name": block["name"], "arguments": block["input"].to_string()},
            })),
            _ => {}
        }
    }
    let mut msg = json!({"role": "assistant",
                         "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) },
                         "refusal": null, "annotations": []});
    if !tool_calls.is_empty() {
        msg["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": completion_id(message["id"].as_str().unwrap_or_default()),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": msg, "logprobs": null,
                     "finish_reason": finish_reason(message["stop_reason"].as_str())}],
        "usage": usage(&message["usage"], None),
    })
}

lenient_object! {
    /// A Messages event's type and its `delta`, read leniently (see `stream::TextDelta`).
    BlockDelta<'a> {
        kind = "type": Loose<Cow<'a, str>>,
        delta: Loose<TextPart<'a>>,
    }
}

lenient_object! {
    /// A `content_block_delta`'s delta: its type and its `text`.
    TextPart<'a> {
        kind = "type": Loose<Cow<'a, str>>,
        text: Loose<Cow<'a, str>>,
    }
}

/// A Messages stream as a Chat Completions stream (see `stream::ChatStream` for the shape).
#[derive(Debug, Clone)]
pub struct MessagesStream {
    w: Chunks,
    /// The Chat tool index of each content block that is a tool use, by block index, and whether
    /// any of its arguments went out.
    tool_of_block: Vec<(u64, usize, bool)>,
    tools: usize,
    input_usage: Value,
    output_tokens: Option<i64>,
    stop_reason: Option<String>,
}

impl Transform for MessagesStream {
    type Short<'a> = Cow<'a, str>;

    fn short(data: &str) -> Option<Cow<'_, str>> {
        MessagesStream::text_of(data)
    }

    fn on_short(&mut self, text: Cow<'_, str>) -> Vec<String> {
        self.w.text_delta(&text)
    }

    fn in_full(&mut self, data: &str) -> Vec<String> {
        self.event_in_full(data)
    }
}

impl MessagesStream {
    pub fn new(model: &str, include_usage: bool, created: i64) -> MessagesStream {
        MessagesStream {
            w: Chunks::new(model, include_usage, created),
            tool_of_block: Vec::new(),
            tools: 0,
            input_usage: Value::Null,
            output_tokens: None,
            stop_reason: None,
        }
    }

    pub fn ended(&self) -> bool {
        self.w.ended()
    }

    /// The text of a text delta, read as the few members it has; `None` for any other event or
    /// shape.
    fn text_of(data: &str) -> Option<Cow<'_, str>> {
        let Ok(Loose(Some(event))) = serde_json::from_str::<Loose<BlockDelta<'_>>>(data) else { return None };
        let Loose(Some(delta)) = event.delta else { return None };
        let is_text = event.kind.0.as_deref() == Some("content_block_delta")
            && delta.kind.0.as_deref() == Some("text_delta");
        if is_text { delta.text.0 } else { None }
    }

    /// Any event, read as a document.
    fn event_in_full(&mut self, data: &str) -> Vec<String> {
        let Some(event) = self.w.open(data) else { return Vec::new() };
        let mut out = Vec::new();
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let m = &event["message"];
                self.w.id = completion_id(m["id"].as_str().unwrap_or_default());
                self.input_usage = m["usage"].clone();
                self.w.start(&mut out);
            }
            "content_block_start" if event["content_block"]["type"] == "tool_use" => {
                self.w.start(&mut out);
                let b = &event["content_block"];
                let index = self.tools;
                self.tools += 1;
                self.tool_of_block.push((event["index"].as_u64().unwrap_or(0), index, false));
                let call = json!({"index": index, "id": b["id"], "type": "function",
                                  "function": {"name": b["name"], "arguments": ""}});
                out.push(self.w.chunk(json!({"tool_calls": [call]}), None));
            }
            "content_block_delta" => {
                self.w.start(&mut out);
                let d = &event["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => out.push(self.w.chunk(json!({"content": d["text"]}), None)),
                    Some("input_json_delta") => {
                        let block = event["index"].as_u64().unwrap_or(0);
                        let partial = d["partial_json"].as_str().unwrap_or_default();
                        if let Some((_, index, sent)) =
                            self.tool_of_block.iter_mut().find(|(b, ..)| *b == block)
                            && !partial.is_empty()
                        {
                            *sent = true;
                            let call = json!({"index": *index, "function": {"arguments": partial}});
                            out.push(self.w.chunk(json!({"tool_calls": [call]}), None));
                        }
                    }
                    _ => {}
                }
            }
            // A tool called without arguments streams none: its arguments are `{}`, as collected.
            "content_block_stop" => {
                let block = event["index"].as_u64().unwrap_or(0);
                if let Some((_, index, sent)) = self.tool_of_block.iter_mut().find(|(b, ..)| *b == block)
                    && !*sent
                {
                    *sent = true;
                    let call = json!({"index": *index, "function": {"arguments": "{}"}});
                    out.push(self.w.chunk(json!({"tool_calls": [call]}), None));
                }
            }
            "message_delta" => {
                if let Some(r) = event["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(n) = event["usage"]["output_tokens"].as_i64() {
                    self.output_tokens = Some(n);
                }
                // Some upstreams report the input counts only at the end.
                if let Some(u) = event["usage"].as_object().filter(|u| u.contains_key("input_tokens")) {
                    self.input_usage = Value::Object(u.clone());
                }
            }
            "message_stop" => {
                let finish = finish_reason(self.stop_reason.as_deref());
                self.w.finish(finish, usage(&self.input_usage, self.output_tokens), &mut out);
            }
            "error" => {
                let e = &event["error"];
                let kind = e["type"].as_str().unwrap_or("server_error");
                self.w.fail(e["message"].as_str(), kind, &e["type"], &mut out);
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_becomes_a_messages_request() {
        let chat = json!({
            "model": "claude-sonnet-4-5",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": "Calling.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "rain"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "stop": "END",
            "max_completion_tokens": 20000,
            "reasoning_effort": "medium",
            "user": "u-1",
            "store": true,
            "stream": true,
            "stream_options": {"include_usage": true}
        });
        let m = to_messages(&chat).unwrap();
        assert_eq!(
            m["system"],
            json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            m["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Calling."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                             {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rain",
                                              "cache_control": {"type": "ephemeral"}}]}
            ])
        );
        assert_eq!(m["tools"], json!([{"name": "weather", "input_schema": {"type": "object"}}]));
        assert_eq!(m["tool_choice"], json!({"type": "any", "disable_parallel_tool_use": true}));
        assert_eq!(m["stop_sequences"], json!(["END"]));
        // a tool loop goes on without thinking (its signed thinking block is not in a Chat history)
        assert_eq!((m["max_tokens"].clone(), m.get("thinking")), (json!(20000), None));
        assert_eq!(m["metadata"], json!({"user_id": "u-1"}));
        assert!(m.get("store").is_none() && m.get("stream_options").is_none());
        let plain =
            to_messages(&json!({"model": "c", "messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(plain["max_tokens"], DEFAULT_MAX_TOKENS);
        for (param, value) in
            [("response_format", json!({"type": "json_object"})), ("seed", json!(1)), ("n", json!(3))]
        {
            let mut c = json!({"model": "c", "messages": [{"role": "user", "content": "hi"}]});
            c[param] = value;
            assert_eq!(to_messages(&c).unwrap_err().param, param);
        }
        // a client's own cache marks are kept, and then no others are added
        let marked = to_messages(&json!({"model": "c", "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "next"}]}))
        .unwrap();
        assert_eq!(marked["system"], "S");
        assert_eq!(
            marked["messages"][0]["content"],
            json!([{"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "next"}])
        );
        let think = |extra: Value| {
            let mut c = json!({"model": "c", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "medium"});
            c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            to_messages(&c)
        };
        assert_eq!(think(json!({})).unwrap()["thinking"], json!({"type": "enabled", "budget_tokens": 4096}));
        assert_eq!(think(json!({"temperature": 0.3})).unwrap_err().param, "temperature");
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(
            think(json!({"tools": tools, "tool_choice": "required"})).unwrap_err().param,
            "tool_choice"
        );
        assert!(think(json!({"tools": tools, "tool_choice": "auto", "temperature": 1})).is_ok());
        let tight = json!({"model": "c", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high", "max_tokens": 1000});
        assert_eq!(to_messages(&tight).unwrap_err().param, "max_completion_tokens");
    }

    #[test]
    fn a_messages_answer_becomes_a_chat_completion() {
        let m = json!({"id": "msg_01", "type": "message", "role": "assistant", "stop_reason": "tool_use",
            "content": [{"type": "thinking", "thinking": "…"}, {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
            "usage": {"input_tokens": 56, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0, "output_tokens": 7}});
        let c = from_messages(&m, "claude", 5);
        assert_eq!(c["id"], "chatcmpl-01");
        assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(c["choices"][0]["message"]["content"], "Checking.");
        assert_eq!(
            c["choices"][0]["message"]["tool_calls"][0]["function"],
            json!({"name": "weather", "arguments": "{\"city\":\"Paris\"}"})
        );
        assert_eq!(
            c["usage"],
            json!({"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,
            "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 0}})
        );
    }

    #[test]
    fn a_tool_called_without_arguments_streams_them_as_an_empty_object() {
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}}),
            json!({"type": "content_block_stop", "index": 0}),
        ];
        let mut s = MessagesStream::new("claude", false, 5);
        let args: String = events
            .iter()
            .flat_map(|e| s.event(&e.to_string()))
            .filter_map(|c| serde_json::from_str::<Value>(&c).ok())
            .filter_map(|c| {
                c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().map(str::to_owned)
            })
            .collect();
        assert_eq!(args, "{}");
    }

    #[test]
    fn a_messages_stream_becomes_chunks() {
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 56, "cache_read_input_tokens": 64, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ":1}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ];
        let mut s = MessagesStream::new("claude", true, 5);
        let out: Vec<String> = events.iter().flat_map(|e| s.event(&e.to_string())).collect();
        assert_eq!(out.last().map(String::as_str), Some(super::super::stream::DONE));
        let chunks: Vec<Value> =
            out[..out.len() - 1].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(text, "Hi");
        let args: String = chunks
            .iter()
            .flat_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t["function"]["arguments"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(args, "{\"a\":1}");
        let finish: Vec<&str> =
            chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
        assert_eq!(finish, ["tool_calls"]);
        assert_eq!(chunks.last().unwrap()["usage"]["prompt_tokens"], 120);
        assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 7);
    }
}

#[cfg(test)]
mod text_deltas {
    use super::{
        super::stream::tests::{ShortText, same_as_in_full},
        *,
    };
    use crate::providers::lenient::tests::faults_in_skipped_members;

    impl ShortText for MessagesStream {
        fn text(short: Cow<'_, str>) -> String {
            short.into_owned()
        }
    }

    #[test]
    fn text_deltas_read_as_the_document_reads_them() {
        let events = [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\u0048i \"q\""}}"#,
            r#"{"delta":{"text":"","type":"text_delta"},"type":"content_block_delta"}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":7}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta"}}"#,
            r#"{"type":"content_block_delta","delta":["text_delta","by position"]}"#,
            r#"["content_block_delta",{"type":"text_delta","text":"by position"}]"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"},"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
            r#"{"type":"content_block_d\u0065lta","delta":{"type":"text_d\u0065lta","text":"escaped"}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"cut"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"after the end"}}"#,
        ];
        let short = ["Hi", "Hi \"q\"", "", "b", "escaped", "after the end"];
        for include_usage in [false, true] {
            same_as_in_full(MessagesStream::new("m", include_usage, 7), &events, &short);
        }
        let mut faults = faults_in_skipped_members(
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}"#,
        );
        faults.extend(
            faults_in_skipped_members(
                r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x""#,
            )
            .into_iter()
            .map(|inner| format!("{inner}}}")),
        );
        let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
        same_as_in_full(MessagesStream::new("m", true, 7), &faults, &[]);
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::{
        super::stream::tests::{collected, fold_chunks},
        *,
    };

    /// The Messages events of an answer with `texts` as text deltas and `calls` as tool uses
    /// (name, input, where its JSON text is split in two deltas; `{}` streams no delta), and the
    /// collected message.
    fn upstream(texts: &[String], calls: &[(String, Value, usize)]) -> (Vec<String>, Value) {
        let mut events = vec![
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 4}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ];
        for t in texts {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        let mut content = vec![json!({"type": "text", "text": texts.concat()})];
        for (i, (name, input, at)) in calls.iter().enumerate() {
            let (index, id) = (i + 1, format!("toolu_{i}"));
            events.push(json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
            let text = input.to_string();
            if text != "{}" {
                let at = (*at).min(text.len());
                for piece in [&text[..at], &text[at..]] {
                    events.push(json!({"type": "content_block_delta", "index": index,
                                       "delta": {"type": "input_json_delta", "partial_json": piece}}));
                }
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
            content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
        let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
        events.push(
            json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 3}}),
        );
        events.push(json!({"type": "message_stop"}));
        let message = json!({"id": "msg_1", "content": content, "stop_reason": stop,
                             "usage": {"input_tokens": 4, "output_tokens": 3}});
        (events.into_iter().map(|e| e.to_string()).collect(), message)
    }

    proptest! {
        /// A streamed Messages answer folds to the collected one: same text, tool calls, finish.
        #[test]
        fn a_stream_concatenates_to_the_collected_answer(
            texts in proptest::collection::vec("[a-z ]{0,6}", 0..5),
            calls in proptest::collection::vec(("[a-z]{1,6}", proptest::option::of("[a-z0-9 ]{0,8}"), 0usize..12), 0..3),
        ) {
            let calls: Vec<(String, Value, usize)> = calls
                .into_iter()
                .map(|(name, arg, at)| (name, arg.map_or_else(|| json!({}), |a| json!({"a": a})), at))
                .collect();
            let (events, message) = upstream(&texts, &calls);
            let mut s = MessagesStream::new("m", true, 0);
            let (_, text, streamed, finish) = fold_chunks(events.iter().flat_map(|e| s.event(e)).collect());
            prop_assert_eq!((text, streamed, finish), collected(&from_messages(&message, "m", 0)));
        }
    }
}
