//! Chat Completions to and from Gemini `generateContent` (BEY-3), for Antigravity accounts: the
//! request (the caller wraps it in the v1internal envelope), the collected answer, and the stream
//! transform. Answers may arrive in the envelope or bare; both are read.
//!
//! Gemini 3 models sign their function calls (`thoughtSignature`) and refuse a history whose
//! calls come back unsigned. Chat Completions has no field for it, so the signature travels in the
//! tool call's id (`call_…` + [`SIGNATURE_MARK`] + signature), which every client echoes as is.

use std::borrow::Cow;

use serde::{Deserialize, de::SeqAccess};
use serde_json::{Map, Value, json};

use super::{
    ChatError,
    stream::{Chunks, PENDING_ID, Transform},
    turns::{self, Turn},
};
use crate::providers::{
    lenient::{AnObject, Expected, First, Loose, True, lenient_object},
    observe::GeminiUsage,
};

/// Separates a tool call's own id from the Gemini thought signature carried in it.
pub const SIGNATURE_MARK: &str = ".sig.";

/// The signature Google documents for function calls whose own was lost (a history written
/// elsewhere, or by another account family): Gemini 3 then skips the check instead of refusing.
const NO_SIGNATURE: &str = "skip_thought_signature_validator";

/// A tool call id without the Gemini signature it may carry (other upstreams get the plain id).
pub fn plain_id(id: &str) -> &str {
    id.split_once(SIGNATURE_MARK).map_or(id, |(own, _)| own)
}

/// Parameters with no Gemini equivalent, each changing the answer.
const REFUSED: &[(&str, &str)] = &[
    ("n", "only one choice (n = 1) can be produced"),
    ("logit_bias", "not supported by Gemini upstreams"),
    ("logprobs", "not supported through SubLane for Gemini upstreams"),
    ("top_logprobs", "not supported through SubLane for Gemini upstreams"),
    ("audio", "audio output is not supported"),
    ("modalities", "only text output is supported"),
    ("prediction", "predicted outputs are not supported"),
    ("functions", "use tools instead of the deprecated functions"),
    ("function_call", "use tool_choice instead of the deprecated function_call"),
    ("web_search_options", "not supported"),
    ("verbosity", "not supported by Gemini upstreams"),
];

/// Parameters that only concern OpenAI's side (storage, billing tier, routing: the cache key is
/// set by the caller as the envelope's session) and change nothing in the answer.
const IGNORED: &[&str] = &[
    "store",
    "metadata",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "stream_options",
    "user",
    "stream",
    "model",
];

/// Thinking budgets for `reasoning_effort` (Gemini 3 still takes budgets; 0 turns thinking off
/// where the model allows it).
fn thinking_budget(effort: &str) -> u64 {
    match effort {
        "none" => 0,
        "minimal" => 512,
        "low" => 1024,
        "medium" => 4096,
        _ => 16_384,
    }
}

/// Translates `chat` (a Chat Completions body) into a Gemini `generateContent` request.
pub fn to_gemini(chat: &Value) -> Result<Value, ChatError> {
    let body =
        chat.as_object().ok_or_else(|| ChatError::new("", "the request body must be a JSON object"))?;
    let mut out = Map::new();
    let mut config = Map::new();
    let mut tool_choice: Option<Value> = None;
    for (key, value) in super::request::acted_on(body, IGNORED, REFUSED)? {
        let number = || {
            value
                .as_f64()
                .map(|_| value.clone())
                .ok_or_else(|| ChatError::new(key, format!("{key} is a number")))
        };
        match key {
            "messages" => {
                let (system, contents) = contents(value)?;
                if let Some(s) = system {
                    out.insert("systemInstruction".into(), json!({"parts": [{"text": s}]}));
                }
                out.insert("contents".into(), Value::Array(contents));
            }
            "temperature" => {
                config.insert("temperature".into(), number()?);
            }
            "top_p" => {
                config.insert("topP".into(), number()?);
            }
            "presence_penalty" => {
                config.insert("presencePenalty".into(), number()?);
            }
            "frequency_penalty" => {
                config.insert("frequencyPenalty".into(), number()?);
            }
            "seed" => {
                let seed = value.as_i64().ok_or_else(|| ChatError::new(key, "seed is an integer"))?;
                config.insert("seed".into(), json!(seed));
            }
            "max_tokens" | "max_completion_tokens" => {
                let n = super::request::limit(key, value)?;
                config.insert("maxOutputTokens".into(), json!(n));
            }
            "stop" => {
                let list = super::request::stop_list(value)?;
                if !list.is_empty() {
                    config.insert("stopSequences".into(), Value::Array(list));
                }
            }
            "reasoning_effort" => {
                let effort =
                    value.as_str().ok_or_else(|| ChatError::new(key, "reasoning_effort is a string"))?;
                config.insert("thinkingConfig".into(), json!({"thinkingBudget": thinking_budget(effort)}));
            }
            "response_format" => match value["type"].as_str() {
                Some("text") => {}
                Some("json_object") => {
                    config.insert("responseMimeType".into(), json!("application/json"));
                }
                Some("json_schema") => {
                    let schema = value["json_schema"]["schema"].clone();
                    if !schema.is_object() {
                        return Err(ChatError::new(
                            "response_format.json_schema.schema",
                            "a JSON schema response format needs its schema",
                        ));
                    }
                    config.insert("responseMimeType".into(), json!("application/json"));
                    config.insert("responseJsonSchema".into(), schema);
                }
                _ => {
                    return Err(ChatError::new(
                        "response_format.type",
                        "response_format is text, json_object or json_schema",
                    ));
                }
            },
            "tools" => {
                out.insert("tools".into(), tools(value)?);
            }
            "tool_choice" => tool_choice = Some(choice(value)?),
            "parallel_tool_calls" => {
                if value.as_bool() == Some(false) {
                    return Err(ChatError::new(
                        key,
                        "parallel_tool_calls: Gemini upstreams cannot be limited to one call per turn",
                    ));
                }
            }
            k => return Err(ChatError::new(k, format!("{k}: unknown parameter"))),
        }
    }
    if !out.contains_key("contents") {
        return Err(ChatError::new("messages", "messages is required"));
    }
    if let Some(c) = tool_choice.filter(|_| out.contains_key("tools")) {
        out.insert("toolConfig".into(), json!({"functionCallingConfig": c}));
    }
    // The thinking budget is part of the output limit (Claude models on Antigravity refuse a
    // budget that leaves nothing for the answer).
    if let (Some(budget), Some(max)) = (
        config.get("thinkingConfig").and_then(|t| t["thinkingBudget"].as_u64()),
        config.get("maxOutputTokens"),
    ) && max.as_u64().is_some_and(|m| m <= budget)
    {
        return Err(ChatError::new(
            "max_completion_tokens",
            format!(
                "max_completion_tokens must exceed the thinking budget of this reasoning_effort ({budget})"
            ),
        ));
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(out))
}

/// System and developer messages become `systemInstruction`; the rest become alternating `user`
/// and `model` contents (tool results are user parts naming their function, since Gemini matches
/// results by name; consecutive turns of one role are merged).
fn contents(value: &Value) -> Result<(Option<String>, Vec<Value>), ChatError> {
    let read = turns::read(value)?;
    let mut items = Vec::new();
    for turn in &read.turns {
        match turn {
            Turn::User { content, index } => items.push(("user", user_parts(content, *index)?)),
            Turn::Assistant { text, calls, .. } => {
                let mut parts: Vec<Value> = text.iter().map(|t| json!({"text": t})).collect();
                for call in calls {
                    let signature = call.id.split_once(SIGNATURE_MARK).map_or(NO_SIGNATURE, |(_, s)| s);
                    parts.push(json!({"functionCall": {"name": call.name, "args": call.object()?},
                                      "thoughtSignature": signature}));
                }
                items.push(("model", parts));
            }
            Turn::Tool { name, content, index, .. } => {
                let name = name.ok_or_else(|| {
                    ChatError::new(
                        &format!("messages[{index}].tool_call_id"),
                        "no assistant tool call before has this id",
                    )
                })?;
                // A JSON object result goes as it is; anything else as text.
                let response = serde_json::from_str::<Value>(content)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"content": content}));
                items.push(("user", vec![json!({"functionResponse": {"name": name, "response": response}})]));
            }
        }
    }
    let contents =
        turns::merged(items).into_iter().map(|(role, parts)| json!({"role": role, "parts": parts})).collect();
    Ok((read.system, contents))
}

fn user_parts(content: &Value, i: usize) -> Result<Vec<Value>, ChatError> {
    match content {
        Value::String(s) => Ok(vec![json!({"text": s})]),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let at = format!("messages[{i}].content[{j}]");
                match p["type"].as_str() {
                    Some("text") => Ok(json!({"text": p["text"].as_str().unwrap_or_default()})),
                    Some("image_url") => {
                        let url =
                            p["image_url"]["url"].as_str().or(p["image_url"].as_str()).unwrap_or_default();
                        let inline = url.strip_prefix("data:").and_then(|r| r.split_once(";base64,"));
                        let (mime, data) = inline.ok_or_else(|| {
                            ChatError::new(
                                &format!("{at}.image_url"),
                                "Gemini upstreams take images as data: URLs (base64), not links",
                            )
                        })?;
                        Ok(json!({"inlineData": {"mimeType": mime, "data": data}}))
                    }
                    other => Err(ChatError::new(
                        &format!("{at}.type"),
                        format!(
                            "content part type {} is not supported by Gemini upstreams",
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

fn tools(value: &Value) -> Result<Value, ChatError> {
    let declarations: Vec<Value> = super::request::function_tools(value)?
        .into_iter()
        .map(|(name, f)| {
            let mut d = json!({"name": name});
            if let Some(p) = f.get("parameters").filter(|p| !p.is_null()) {
                d["parametersJsonSchema"] = p.clone();
            }
            if let Some(desc) = f["description"].as_str() {
                d["description"] = json!(desc);
            }
            d
        })
        .collect();
    Ok(json!([{"functionDeclarations": declarations}]))
}

fn choice(value: &Value) -> Result<Value, ChatError> {
    use super::request::Choice;
    Ok(match Choice::of(value)? {
        Choice::Auto => json!({"mode": "AUTO"}),
        Choice::None => json!({"mode": "NONE"}),
        Choice::Required => json!({"mode": "ANY"}),
        Choice::Function(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    })
}

/// `finish_reason` for a Gemini `finishReason`.
fn finish_reason(reason: &str, called_tools: bool) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            "content_filter"
        }
        _ if called_tools => "tool_calls",
        _ => "stop",
    }
}

/// Gemini's token counts (`usageMetadata`), each 0 where it is missing or not an `i64`.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    prompt: i64,
    candidates: i64,
    thoughts: i64,
    cached: i64,
}

impl Counts {
    fn of(u: &GeminiUsage) -> Counts {
        let n = |count: &Loose<i64>| count.0.unwrap_or(0);
        Counts {
            prompt: n(&u.promptTokenCount),
            candidates: n(&u.candidatesTokenCount),
            thoughts: n(&u.thoughtsTokenCount),
            cached: n(&u.cachedContentTokenCount),
        }
    }

    /// The counts of a `usageMetadata` value; `None` when it is no object.
    fn of_value(u: &Value) -> Option<Counts> {
        Loose::<GeminiUsage>::deserialize(u).ok()?.0.as_ref().map(Counts::of)
    }

    /// As Chat Completions usage: the prompt count includes the cached tokens, the completion
    /// count the thinking tokens (sums saturate: an upstream's count is not trusted to be small).
    fn usage(self) -> Value {
        let completion = self.candidates.saturating_add(self.thoughts);
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": completion,
            "total_tokens": self.prompt.saturating_add(completion),
            "prompt_tokens_details": {"cached_tokens": self.cached},
            "completion_tokens_details": {"reasoning_tokens": self.thoughts},
        })
    }
}

/// The inner response of an answer in the v1internal envelope, or the answer itself.
fn inner(answer: &Value) -> &Value {
    answer.get("response").filter(|r| r.is_object()).unwrap_or(answer)
}

fn completion_id(response: &Value) -> String {
    format!("chatcmpl-{}", response["responseId"].as_str().unwrap_or("gemini"))
}

/// A tool call from a `functionCall` part: the id carries the part's thought signature.
fn tool_call(response: &Value, part: &Value, index: usize) -> Value {
    let call = &part["functionCall"];
    let mut id = match call["id"].as_str() {
        Some(own) => format!("call_{own}"),
        None => format!("call_{}_{index}", response["responseId"].as_str().unwrap_or("gemini")),
    };
    if let Some(signature) = part["thoughtSignature"].as_str() {
        id.push_str(SIGNATURE_MARK);
        id.push_str(signature);
    }
    let args = if call["args"].is_object() { call["args"].to_string() } else { "{}".to_owned() };
    json!({"id": id, "type": "function", "function": {"name": call["name"], "arguments": args}})
}

/// The answer's text (thoughts left out) and function call parts, in order.
fn parts(response: &Value) -> impl Iterator<Item = &Value> {
    response["candidates"][0]["content"]["parts"].as_array().into_iter().flatten()
}

/// A collected Gemini answer (in the envelope or bare) as a `chat.completion`; `created` is the
/// gateway's clock (Gemini answers carry no time).
pub fn from_gemini(answer: &Value, model: &str, created: i64) -> Value {
    let response = inner(answer);
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for part in parts(response) {
        if part["functionCall"].is_object() {
            tool_calls.push(tool_call(response, part, tool_calls.len()));
        } else if part["thought"] != true
            && let Some(t) = part["text"].as_str()
        {
            text.push_str(t);
        }
    }
    let reason = response["candidates"][0]["finishReason"].as_str().unwrap_or("STOP");
    let finish = finish_reason(reason, !tool_calls.is_empty());
    let mut msg = json!({"role": "assistant",
                         "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) },
                         "refusal": null, "annotations": []});
    if !tool_calls.is_empty() {
        msg["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": completion_id(response),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": msg, "logprobs": null, "finish_reason": finish}],
        "usage": Counts::of_value(&response["usageMetadata"]).unwrap_or_default().usage(),
    })
}

/// A Gemini stream (each chunk a partial `generateContent` answer, in the envelope or bare) as a
/// Chat Completions stream (see `stream::ChatStream` for the shape). The chunk with a
/// `finishReason` ends it; function calls arrive whole, each in one tool-call delta.
#[derive(Debug, Clone)]
pub struct GeminiStream {
    w: Chunks,
    tools: usize,
    /// The last `usageMetadata` seen (each chunk's is the total so far).
    usage: Counts,
}

impl Transform for GeminiStream {
    type Short<'a> = TextChunk<'a>;

    /// Most chunks hold text only: read as the few members used, not a document.
    fn short(data: &str) -> Option<TextChunk<'_>> {
        TextChunk::read(data)
    }

    fn on_short(&mut self, chunk: TextChunk<'_>) -> Vec<String> {
        self.text_chunk(chunk)
    }

    fn in_full(&mut self, data: &str) -> Vec<String> {
        self.event_in_full(data)
    }
}

impl GeminiStream {
    pub fn new(model: &str, include_usage: bool, created: i64) -> GeminiStream {
        GeminiStream { w: Chunks::new(model, include_usage, created), tools: 0, usage: Counts::default() }
    }

    pub fn ended(&self) -> bool {
        self.w.ended()
    }

    fn text_chunk(&mut self, chunk: TextChunk<'_>) -> Vec<String> {
        let mut out = Vec::new();
        if self.w.ended() {
            return out;
        }
        if self.w.id == PENDING_ID
            && let Some(id) = &chunk.id
        {
            self.w.id = format!("chatcmpl-{id}");
        }
        self.w.start(&mut out);
        out.extend(chunk.texts.iter().map(|t| self.w.text(t)));
        self.end_of_chunk(chunk.usage, chunk.finish.as_deref(), &mut out);
        out
    }

    /// Any event, read as a document.
    fn event_in_full(&mut self, data: &str) -> Vec<String> {
        let Some(event) = self.w.open(data) else { return Vec::new() };
        let mut out = Vec::new();
        if event["error"].is_object() {
            let e = &event["error"];
            self.w.fail(e["message"].as_str(), "server_error", &e["status"], &mut out);
            return out;
        }
        let response = inner(&event);
        if self.w.id == PENDING_ID && response["responseId"].is_string() {
            self.w.id = completion_id(response);
        }
        self.w.start(&mut out);
        for part in parts(response) {
            if part["functionCall"].is_object() {
                let mut call = tool_call(response, part, self.tools);
                call["index"] = json!(self.tools);
                self.tools += 1;
                out.push(self.w.chunk(json!({"tool_calls": [call]}), None));
            } else if part["thought"] != true
                && let Some(t) = part["text"].as_str().filter(|t| !t.is_empty())
            {
                out.push(self.w.text(t));
            }
        }
        let usage = Counts::of_value(&response["usageMetadata"]);
        self.end_of_chunk(usage, response["candidates"][0]["finishReason"].as_str(), &mut out);
        out
    }

    /// A chunk's usage is kept (the last one is the answer's); its finish reason ends the stream.
    fn end_of_chunk(&mut self, usage: Option<Counts>, finish: Option<&str>, out: &mut Vec<String>) {
        if let Some(usage) = usage {
            self.usage = usage;
        }
        if let Some(reason) = finish {
            self.w.finish(finish_reason(reason, self.tools > 0), self.usage.usage(), out);
        }
    }
}

/// A chunk of text, usage and finish reason only, as [`TextChunk::read`] finds it.
pub struct TextChunk<'a> {
    id: Option<Cow<'a, str>>,
    texts: Vec<Cow<'a, str>>,
    usage: Option<Counts>,
    finish: Option<Cow<'a, str>>,
}

impl TextChunk<'_> {
    /// Reads a chunk as the document path would, without building it: `None` for one that is no
    /// JSON object, carries an `error`, or holds a function call (those go to the document path).
    fn read(data: &str) -> Option<TextChunk<'_>> {
        let Ok(Loose(Some(top))) = serde_json::from_str::<Loose<ChunkTop<'_>>>(data) else {
            return None;
        };
        if top.error.0.is_some() {
            return None;
        }
        // As `inner`: the envelope's `response` when it is an object, else the top level.
        let chunk = top.response.0.unwrap_or(Chunk {
            responseId: top.responseId,
            candidates: top.candidates,
            usageMetadata: top.usageMetadata,
        });
        let (parts, finish) = match chunk.candidates.0 {
            Some(First(c)) => (c.content.0.and_then(|c| c.parts.0).unwrap_or_default(), c.finishReason.0),
            None => (Parts::default(), None),
        };
        if parts.calls {
            return None;
        }
        Some(TextChunk {
            id: chunk.responseId.0,
            texts: parts.texts,
            usage: chunk.usageMetadata.0.as_ref().map(Counts::of),
            finish,
        })
    }
}

lenient_object! {
    /// A stream chunk, in the envelope or bare, or an error sent inside the stream.
    #[allow(non_snake_case)]
    ChunkTop<'a> {
        error: Loose<AnObject>,
        response: Loose<Chunk<'a>>,
        responseId: Loose<Cow<'a, str>>,
        candidates: Loose<First<Candidate<'a>>>,
        usageMetadata: Loose<GeminiUsage>,
    }
}

lenient_object! {
    #[allow(non_snake_case)]
    Chunk<'a> {
        responseId: Loose<Cow<'a, str>>,
        candidates: Loose<First<Candidate<'a>>>,
        usageMetadata: Loose<GeminiUsage>,
    }
}

lenient_object! {
    #[allow(non_snake_case)]
    Candidate<'a> {
        content: Loose<Content<'a>>,
        finishReason: Loose<Cow<'a, str>>,
    }
}

lenient_object! {
    Content<'a> {
        parts: Loose<Parts<'a>>,
    }
}

lenient_object! {
    #[allow(non_snake_case)]
    Part<'a> {
        text: Loose<Cow<'a, str>>,
        thought: Loose<True>,
        functionCall: Loose<AnObject>,
    }
}

/// A `parts` array as [`parts`] and the stream read it: the texts that are not thoughts, in
/// order, and whether a function call is among them.
#[derive(Debug, Default)]
struct Parts<'a> {
    texts: Vec<Cow<'a, str>>,
    calls: bool,
}

impl<'de: 'a, 'a> Expected<'de> for Parts<'a> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let mut parts = Parts::default();
        while let Some(Loose(part)) = seq.next_element::<Loose<Part<'a>>>()? {
            let Some(part) = part else { continue };
            if part.functionCall.0.is_some() {
                parts.calls = true;
            } else if part.thought.0.is_none()
                && let Some(text) = part.text.0.filter(|t| !t.is_empty())
            {
                parts.texts.push(text);
            }
        }
        Ok(Some(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_becomes_a_gemini_request() {
        let chat = json!({
            "model": "gemini-3.1-pro-low",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_r_0.sig.c2ln", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_r_1", "type": "function", "function": {"name": "time", "arguments": ""}}]},
                {"role": "tool", "tool_call_id": "call_r_0.sig.c2ln", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_r_1", "content": "{\"hour\":9}"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "W", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "stop": ["END"],
            "max_completion_tokens": 2000,
            "temperature": 0.2,
            "reasoning_effort": "low",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
            "user": "u-1",
            "stream": true,
            "stream_options": {"include_usage": true}
        });
        let g = to_gemini(&chat).unwrap();
        assert_eq!(g["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
        assert_eq!(
            g["contents"],
            json!([
                {"role": "user", "parts": [{"text": "Look"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
                {"role": "model", "parts": [
                    {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"},
                    {"functionCall": {"name": "time", "args": {}}, "thoughtSignature": "skip_thought_signature_validator"}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "weather", "response": {"content": "sunny"}}},
                    {"functionResponse": {"name": "time", "response": {"hour": 9}}}]}
            ])
        );
        assert_eq!(
            g["tools"],
            json!([{"functionDeclarations": [{"name": "weather", "description": "W", "parametersJsonSchema": {"type": "object"}}]}])
        );
        assert_eq!(
            g["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}})
        );
        assert_eq!(
            g["generationConfig"],
            json!({"stopSequences": ["END"], "maxOutputTokens": 2000, "temperature": 0.2,
                   "thinkingConfig": {"thinkingBudget": 1024}, "responseMimeType": "application/json",
                   "responseJsonSchema": {"type": "object"}})
        );
        for k in ["model", "stream", "user", "stream_options"] {
            assert!(g.get(k).is_none(), "{k} leaked");
        }
        for (param, value, named) in [
            ("n", json!(2), "n"),
            ("parallel_tool_calls", json!(false), "parallel_tool_calls"),
            ("logprobs", json!(true), "logprobs"),
            ("frobnicate", json!(1), "frobnicate"),
        ] {
            let mut c = json!({"messages": [{"role": "user", "content": "hi"}]});
            c[param] = value;
            assert_eq!(to_gemini(&c).unwrap_err().param, named);
        }
        let tight = json!({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high", "max_tokens": 1000});
        assert_eq!(to_gemini(&tight).unwrap_err().param, "max_completion_tokens");
        let link = json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]});
        assert_eq!(to_gemini(&link).unwrap_err().param, "messages[0].content[0].image_url");
        let orphan = json!({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]});
        assert_eq!(to_gemini(&orphan).unwrap_err().param, "messages[0].tool_call_id");
    }

    fn answer() -> Value {
        json!({"response": {"responseId": "r9", "candidates": [{"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [
                {"text": "pondering", "thought": true},
                {"text": "Checking."},
                {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}]}}],
            "usageMetadata": {"promptTokenCount": 120, "cachedContentTokenCount": 64, "candidatesTokenCount": 5, "thoughtsTokenCount": 2, "totalTokenCount": 127}},
            "traceId": "t"})
    }

    #[test]
    fn a_gemini_answer_becomes_a_chat_completion() {
        let c = from_gemini(&answer(), "gemini", 5);
        assert_eq!(c["id"], "chatcmpl-r9");
        let choice = &c["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], "Checking.");
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": "call_r9_0.sig.c2ln", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}])
        );
        assert_eq!(
            c["usage"],
            json!({"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,
                   "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 2}})
        );
        // the id carries the signature back upstream
        let back = to_gemini(&json!({"messages": [
            {"role": "user", "content": "hi"}, choice["message"].clone(),
            {"role": "tool", "tool_call_id": "call_r9_0.sig.c2ln", "content": "sunny"}]}))
        .unwrap();
        assert_eq!(back["contents"][1]["parts"][1]["thoughtSignature"], "c2ln");
        let cut =
            json!({"candidates": [{"finishReason": "MAX_TOKENS", "content": {"parts": [{"text": "a"}]}}]});
        assert_eq!(from_gemini(&cut, "g", 0)["choices"][0]["finish_reason"], "length");
    }

    #[test]
    fn a_gemini_stream_concatenates_to_the_collected_answer() {
        let whole = answer();
        let r = &whole["response"];
        let events = [
            json!({"response": {"responseId": "r9", "candidates": [{"content": {"role": "model", "parts": [{"text": "pondering", "thought": true}]}}]}}),
            json!({"response": {"responseId": "r9", "candidates": [{"content": {"role": "model", "parts": [{"text": "Check"}]}}]}}),
            json!({"responseId": "r9", "candidates": [{"content": {"role": "model", "parts": [{"text": "ing."}]}}]}),
            json!({"response": {"responseId": "r9", "candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [r["candidates"][0]["content"]["parts"][2].clone()]}}],
                                "usageMetadata": r["usageMetadata"].clone()}}),
        ];
        let mut s = GeminiStream::new("gemini", true, 5);
        let out: Vec<String> = events.iter().flat_map(|e| s.event(&e.to_string())).collect();
        assert!(s.ended());
        assert_eq!(out.last().map(String::as_str), Some(super::super::stream::DONE));
        let chunks: Vec<Value> =
            out[..out.len() - 1].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
        assert!(chunks.iter().all(|c| c["id"] == "chatcmpl-r9"));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        let collected = from_gemini(&whole, "gemini", 5);
        assert_eq!(text, collected["choices"][0]["message"]["content"].as_str().unwrap());
        let calls: Vec<Value> = chunks
            .iter()
            .flat_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default())
            .collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["index"], 0);
        assert_eq!(calls[0]["id"], collected["choices"][0]["message"]["tool_calls"][0]["id"]);
        let finish: Vec<&str> =
            chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
        assert_eq!(finish, ["tool_calls"]);
        assert_eq!(chunks.last().unwrap()["usage"], collected["usage"]);
        // an error inside the stream ends it with an error object
        let mut s = GeminiStream::new("gemini", false, 5);
        let e = s.event(r#"{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}"#);
        assert!(e[0].contains("\"busy\"") && s.ended());
    }

    impl super::super::stream::tests::ShortText for GeminiStream {
        fn text(chunk: TextChunk<'_>) -> String {
            chunk.texts.concat()
        }
    }

    #[test]
    fn text_chunks_read_as_the_document_reads_them() {
        use super::super::stream::tests::same_as_in_full;
        use crate::providers::lenient::tests::faults_in_skipped_members;
        let ended_by_finish = [
            r#"{"response":{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}],"usageMetadata":{"promptTokenCount":5},"modelVersion":"g","responseId":"r1"},"traceId":"t"}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"lo"},{"text":""},{"text":"think","thought":true},{"text":" there","thought":false}]}}],"responseId":"r2"}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"\u0041 \"q\" \ud83d\ude00"}]}}]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"s","thought":"true"},{"text":"d","thought":true,"thought":false},{"text":"t","thought":false,"thought":true}]}}]}}"#,
            r#"{"response":"x","candidates":[{"content":{"parts":[{"text":"top"}]}}]}"#,
            r#"{"response":null,"candidates":[{"content":{"parts":[{"text":"top2"}]}}],"usageMetadata":{"promptTokenCount":6}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"first"}]}}]},"response":1,"candidates":[{"content":{"parts":[{"text":"last"}]}}]}"#,
            r#"{"response":{"candidates":[]}}"#,
            r#"{"response":{"candidates":["x",{"content":{"parts":[{"text":"second"}]}}]}}"#,
            r#"{"response":{"candidates":{"0":{"content":{"parts":[{"text":"obj"}]}}}}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":{"text":"x"}}}]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":["raw",7,{"text":7},{"text":null},{"text":"ok"}]}}]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"calling"},{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"sig"}]}}],"responseId":"r3"}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"functionCall":"f","text":"fc-str"}]}}]}}"#,
            r#"{"error":"x","response":{"candidates":[{"content":{"parts":[{"text":"e"}]}}]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"u"}]}}],"usageMetadata":{"promptTokenCount":1.5,"candidatesTokenCount":"3","thoughtsTokenCount":18446744073709551615,"cachedContentTokenCount":2}}}"#,
            r#"{"response":{"usageMetadata":[1],"responseId":7}}"#,
            r#"{"response":"#,
            r#"[1,2]"#,
            r#"7"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":3,"thoughtsTokenCount":2,"cachedContentTokenCount":4}}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"after the end"}]}}]}}"#,
        ];
        let short = [
            "Hel",
            "lo there",
            "A \"q\" \u{1f600}",
            "sd",
            "top",
            "top2",
            "last",
            "",
            "",
            "",
            "",
            "ok",
            "fc-str",
            "e",
            "u",
            "",
            "!",
            "after the end",
        ];
        let ended_by_error = [
            r#"{"response":{"responseId":"r4","candidates":[{"content":{"parts":[{"text":"a"}]}}]}}"#,
            r#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"},"response":{"candidates":[{"content":{"parts":[{"text":"b"}]}}]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"c"}]}}]}}"#,
        ];
        let odd_ends = [
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"a"}]}}]}}"#,
            r#"{"response":{"candidates":[]},"responseId":"top"}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"b"}]}}],"usageMetadata":{"promptTokenCount":-3,"candidatesTokenCount":9223372036854775807,"thoughtsTokenCount":9223372036854775807}}}"#,
            r#"{"response":{"usageMetadata":[1]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"c"}]},"finishReason":7}]}}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"d"}]},"finishReason":"MAX_TOKENS"}]}}"#,
        ];
        for include_usage in [false, true] {
            same_as_in_full(GeminiStream::new("m", include_usage, 7), &ended_by_finish, &short);
            same_as_in_full(GeminiStream::new("m", include_usage, 7), &ended_by_error, &["a", "c"]);
            same_as_in_full(
                GeminiStream::new("m", include_usage, 7),
                &odd_ends,
                &["a", "", "b", "", "c", "d"],
            );
        }
        let mut faults =
            faults_in_skipped_members(r#"{"response":{"candidates":[{"content":{"parts":[{"text":"x"}]}}]}"#);
        let in_candidate =
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP""#;
        faults.extend(faults_in_skipped_members(in_candidate).into_iter().map(|c| format!("{c}]}}}}")));
        let in_part = r#"{"response":{"candidates":[{"content":{"parts":[{"text":"x""#;
        faults.extend(faults_in_skipped_members(in_part).into_iter().map(|c| format!("{c}]}}}}]}}}}")));
        let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
        same_as_in_full(GeminiStream::new("m", true, 7), &faults, &[]);
    }

    #[test]
    fn usage_counts_read_as_the_document_reads_them() {
        // the reading before counts were typed, where its sums do not overflow
        let by_value = |u: &Value| {
            let n = |k: &str| u[k].as_i64().unwrap_or(0);
            let (prompt, thoughts) = (n("promptTokenCount"), n("thoughtsTokenCount"));
            let completion = n("candidatesTokenCount") + thoughts;
            json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                   "prompt_tokens_details": {"cached_tokens": n("cachedContentTokenCount")},
                   "completion_tokens_details": {"reasoning_tokens": thoughts}})
        };
        for u in [
            json!({"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 2, "cachedContentTokenCount": 4}),
            json!({"promptTokenCount": 1.5, "candidatesTokenCount": "3", "thoughtsTokenCount": u64::MAX, "totalTokenCount": 9}),
            json!({"promptTokenCount": -4, "cachedContentTokenCount": null}),
            json!({}),
        ] {
            assert_eq!(Counts::of_value(&u).unwrap().usage(), by_value(&u), "{u}");
        }
        for not_an_object in [json!(null), json!([1]), json!("x"), json!(3)] {
            assert!(Counts::of_value(&not_an_object).is_none());
        }
        let huge =
            json!({"promptTokenCount": i64::MAX, "candidatesTokenCount": i64::MAX, "thoughtsTokenCount": 1});
        let usage = Counts::of_value(&huge).unwrap().usage();
        assert_eq!(
            (&usage["completion_tokens"], &usage["total_tokens"]),
            (&json!(i64::MAX), &json!(i64::MAX))
        );
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::{
        super::stream::tests::{collected, fold_chunks},
        *,
    };

    proptest! {
        /// A streamed Gemini answer (text pieces, then whole function calls in the last chunk,
        /// some thoughts between) folds to the collected one.
        #[test]
        fn a_stream_concatenates_to_the_collected_answer(
            texts in proptest::collection::vec(("[a-z ]{0,6}", any::<bool>()), 0..5),
            calls in proptest::collection::vec(("[a-z]{1,6}", proptest::option::of("[a-z0-9]{1,8}")), 0..3),
        ) {
            let part = |(t, thought): &(String, bool)| if *thought { json!({"text": t, "thought": true}) } else { json!({"text": t}) };
            let call_parts: Vec<Value> = calls.iter().enumerate().map(|(i, (name, sig))| {
                let mut p = json!({"functionCall": {"name": name, "args": {"i": i}}});
                if let Some(s) = sig { p["thoughtSignature"] = json!(s); }
                p
            }).collect();
            let chunk = |parts: Vec<Value>, last: bool| {
                let mut c = json!({"responseId": "r", "candidates": [{"content": {"role": "model", "parts": parts}}]});
                if last {
                    c["candidates"][0]["finishReason"] = json!("STOP");
                    c["usageMetadata"] = json!({"promptTokenCount": 4, "candidatesTokenCount": 3});
                }
                json!({"response": c}).to_string()
            };
            let mut events: Vec<String> = texts.iter().map(|t| chunk(vec![part(t)], false)).collect();
            events.push(chunk(call_parts.clone(), true));
            let mut all: Vec<Value> = texts.iter().map(part).collect();
            all.extend(call_parts);
            let whole = json!({"response": {"responseId": "r", "candidates": [{"finishReason": "STOP",
                "content": {"role": "model", "parts": all}}], "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 3}}});
            let mut s = GeminiStream::new("m", true, 0);
            let (_, text, streamed, finish) = fold_chunks(events.iter().flat_map(|e| s.event(e)).collect());
            prop_assert_eq!((text, streamed, finish), collected(&from_gemini(&whole, "m", 0)));
        }
    }
}
