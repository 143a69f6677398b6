//! A streamed Responses answer as a Chat Completions stream (BEY-3): a stateful transform, one
//! upstream event in, the `chat.completion.chunk`s it makes out, in the shape the openai SDK
//! expects: the role in the first delta, text and refusal deltas, tool calls by index (id and name
//! first, then argument pieces), a last chunk with `finish_reason`, a usage chunk with empty
//! `choices` when the client asked for `stream_options.include_usage`, then `[DONE]`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Value, json};

use super::response::{completion_id, finish_reason, usage};
use crate::providers::lenient::{Loose, lenient_object};

/// The data of the stream's last event.
pub const DONE: &str = "[DONE]";

/// The error object that ends a Chat Completions stream cut before its terminal event.
pub fn cut(code: &str, message: &str) -> String {
    error_object(message, "server_error", &json!(code))
}

/// An error in a Chat Completions stream, in the OpenAI error shape.
fn error_object(message: &str, kind: &str, code: &Value) -> String {
    json!({"error": {"message": message, "type": kind, "code": code, "param": null}}).to_string()
}

/// A stream's id until the upstream names its own (a Gemini `responseId`).
pub const PENDING_ID: &str = "chatcmpl-pending";

/// The chunks of one Chat Completions stream: their common fields, and the role chunk first.
/// Shared by the transforms from each upstream protocol.
#[derive(Debug, Clone)]
pub struct Chunks {
    pub id: String,
    pub created: i64,
    model: String,
    pub include_usage: bool,
    /// The role chunk went out.
    started: bool,
    /// The stream's end went out (its last chunks, or an error): nothing more is sent.
    ended: bool,
}

impl Chunks {
    /// `model` is the client's model name; `include_usage` its `stream_options.include_usage`.
    pub fn new(model: &str, include_usage: bool, created: i64) -> Chunks {
        Chunks {
            id: PENDING_ID.to_owned(),
            created,
            model: model.to_owned(),
            include_usage,
            started: false,
            ended: false,
        }
    }

    /// Whether the upstream's terminal event was seen (a stream cut before it is incomplete).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// An upstream event to translate: none once the stream ended, or when it is not JSON.
    pub fn open(&self, data: &str) -> Option<Value> {
        if self.ended {
            return None;
        }
        serde_json::from_str(data).ok()
    }

    /// Ends the stream with an error object (the upstream failed inside its 200).
    pub fn fail(&mut self, message: Option<&str>, kind: &str, code: &Value, out: &mut Vec<String>) {
        out.push(error_object(message.unwrap_or("the upstream failed"), kind, code));
        self.ended = true;
    }

    /// The first chunk names the role.
    pub fn start(&mut self, out: &mut Vec<String>) {
        if !self.started {
            self.started = true;
            out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
    }

    /// A chunk written straight from its parts, in the member order (sorted) a `Value` wrote
    /// it in before, so the bytes are the same: a text delta is the most frequent thing a
    /// stream sends, and building each as a document cost more than reading the event.
    fn frame<C: Serialize>(&self, choices: C, usage: Option<&Value>) -> String {
        #[derive(Serialize)]
        struct Frame<'a, C> {
            choices: C,
            created: i64,
            id: &'a str,
            model: &'a str,
            object: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            usage: Option<&'a Value>,
        }
        let usage = usage.or(self.include_usage.then_some(&Value::Null));
        let frame = Frame {
            choices,
            created: self.created,
            id: &self.id,
            model: &self.model,
            object: "chat.completion.chunk",
            usage,
        };
        // (writing to a String from plain fields and Values cannot fail)
        serde_json::to_string(&frame).unwrap_or_default()
    }

    pub fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        self.choice(&delta, finish)
    }

    /// What a text delta event makes: the role chunk first, then the text (nothing once the
    /// stream ended).
    pub fn text_delta(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        if !self.ended {
            self.start(&mut out);
            out.push(self.text(text));
        }
        out
    }

    /// A chunk with one text delta.
    pub fn text(&self, text: &str) -> String {
        #[derive(Serialize)]
        struct Text<'a> {
            content: &'a str,
        }
        self.choice(&Text { content: text }, None)
    }

    fn choice<D: Serialize>(&self, delta: &D, finish: Option<&str>) -> String {
        #[derive(Serialize)]
        struct Choice<'a, D> {
            delta: &'a D,
            finish_reason: Option<&'a str>,
            index: u32,
            logprobs: Option<()>,
        }
        self.frame([Choice { delta, finish_reason: finish, index: 0, logprobs: None }], None)
    }

    /// The last chunks: the one with `finish_reason`, the usage chunk when asked, `[DONE]`.
    pub fn finish(&mut self, finish: &str, usage: Value, out: &mut Vec<String>) {
        self.start(out);
        out.push(self.chunk(json!({}), Some(finish)));
        if self.include_usage {
            out.push(self.frame([(); 0], Some(&usage)));
        }
        out.push(DONE.to_owned());
        self.ended = true;
    }
}

/// A Chat Completions stream made from an upstream's events, one event in, the chunks it makes
/// out. Most events are text and take a short path: read as the few members they have
/// (`short`), where any other event is read as a document (`in_full`). `event` is the one
/// place that chooses, so the tests that hold the short path to the document path hold what
/// runs.
pub trait Transform {
    /// What the short path reads from an event.
    type Short<'a>;

    /// The event read as its few members; `None` for any other event or shape.
    fn short(data: &str) -> Option<Self::Short<'_>>;

    /// The chunks an event read short makes.
    fn on_short(&mut self, short: Self::Short<'_>) -> Vec<String>;

    /// The chunks any event makes, read as a document.
    fn in_full(&mut self, data: &str) -> Vec<String>;

    /// The chunks one upstream event makes, each an SSE `data` payload, in order.
    fn event(&mut self, data: &str) -> Vec<String> {
        match Self::short(data) {
            Some(short) => self.on_short(short),
            None => self.in_full(data),
        }
    }
}

lenient_object! {
    /// A Responses event's type and `delta`, read leniently: a text delta when the type says so
    /// and the delta is a string; any other shape (a failed read included) is read as a document
    /// instead, and the document path's reading is the one that counts. Read as `Value`'s
    /// accessors read, a key given twice keeps its last value and no other member is built.
    TextDelta<'a> {
        kind = "type": Loose<Cow<'a, str>>,
        delta: Loose<Cow<'a, str>>,
    }
}

/// One Chat Completions stream being made from Responses events.
#[derive(Debug, Clone)]
pub struct ChatStream {
    w: Chunks,
    /// Tool calls so far, by Chat Completions index: the upstream item id and the arguments sent.
    tools: Vec<(String, String)>,
}

impl Transform for ChatStream {
    type Short<'a> = Cow<'a, str>;

    fn short(data: &str) -> Option<Cow<'_, str>> {
        ChatStream::text_of(data)
    }

    fn on_short(&mut self, text: Cow<'_, str>) -> Vec<String> {
        self.w.text_delta(&text)
    }

    fn in_full(&mut self, data: &str) -> Vec<String> {
        self.event_in_full(data)
    }
}

impl ChatStream {
    /// `model` is the client's model name; `include_usage` its `stream_options.include_usage`.
    pub fn new(model: &str, include_usage: bool) -> ChatStream {
        ChatStream { w: Chunks::new(model, include_usage, 0), tools: Vec::new() }
    }

    /// Whether the upstream's terminal event was seen (a stream cut before it is incomplete).
    pub fn ended(&self) -> bool {
        self.w.ended()
    }

    /// The text of a text delta, read as its two members; `None` for any other event or shape.
    fn text_of(data: &str) -> Option<Cow<'_, str>> {
        let Ok(Loose(Some(event))) = serde_json::from_str::<Loose<TextDelta<'_>>>(data) else { return None };
        if event.kind.0.as_deref() == Some("response.output_text.delta") { event.delta.0 } else { None }
    }

    /// Any event, read as a document.
    fn event_in_full(&mut self, data: &str) -> Vec<String> {
        let Some(event) = self.w.open(data) else { return Vec::new() };
        let mut out = Vec::new();
        match event["type"].as_str().unwrap_or_default() {
            "response.created" | "response.in_progress" => {
                self.identify(&event["response"]);
                self.w.start(&mut out);
            }
            "response.output_text.delta" => {
                self.w.start(&mut out);
                out.push(self.w.chunk(json!({"content": event["delta"]}), None));
            }
            "response.refusal.delta" => {
                self.w.start(&mut out);
                out.push(self.w.chunk(json!({"refusal": event["delta"]}), None));
            }
            "response.output_item.added" if event["item"]["type"] == "function_call" => {
                self.w.start(&mut out);
                self.tool(&event["item"], &mut out);
            }
            "response.function_call_arguments.delta" => {
                let item = event["item_id"].as_str().unwrap_or_default();
                let delta = event["delta"].as_str().unwrap_or_default();
                self.arguments(item, delta, &mut out);
            }
            // The delta events are optional (protocols.md): the whole arguments come with the
            // done events, and whatever was not streamed yet is sent from them.
            "response.function_call_arguments.done" => {
                let item = event["item_id"].as_str().unwrap_or_default();
                self.rest_of_arguments(item, event["arguments"].as_str().unwrap_or_default(), &mut out);
            }
            "response.output_item.done" if event["item"]["type"] == "function_call" => {
                self.w.start(&mut out);
                let item = &event["item"];
                let id = item["id"].as_str().unwrap_or_default();
                if !self.tools.iter().any(|(t, _)| t == id) {
                    self.tool(item, &mut out);
                }
                self.rest_of_arguments(id, item["arguments"].as_str().unwrap_or_default(), &mut out);
            }
            "response.completed" | "response.incomplete" => {
                let response = &event["response"];
                self.identify(response);
                let finish = finish_reason(response, !self.tools.is_empty());
                let usage =
                    if response["usage"].is_object() { usage(&response["usage"]) } else { Value::Null };
                self.w.finish(finish, usage, &mut out);
            }
            "response.failed" | "error" => {
                let e = if event["type"] == "error" { &event } else { &event["response"]["error"] };
                self.w.fail(e["message"].as_str(), "server_error", &e["code"], &mut out);
            }
            _ => {}
        }
        out
    }

    /// A new tool call: its index, id, type and name, with empty arguments.
    fn tool(&mut self, item: &Value, out: &mut Vec<String>) {
        let index = self.tools.len();
        self.tools.push((item["id"].as_str().unwrap_or_default().to_owned(), String::new()));
        let call = json!({"index": index, "id": item["call_id"], "type": "function",
                          "function": {"name": item["name"], "arguments": ""}});
        out.push(self.w.chunk(json!({"tool_calls": [call]}), None));
    }

    fn arguments(&mut self, item: &str, delta: &str, out: &mut Vec<String>) {
        let Some(index) = self.tools.iter().position(|(id, _)| id == item) else { return };
        if delta.is_empty() {
            return;
        }
        self.tools[index].1.push_str(delta);
        let call = json!({"index": index, "function": {"arguments": delta}});
        out.push(self.w.chunk(json!({"tool_calls": [call]}), None));
    }

    /// Sends what of the complete `arguments` was not streamed yet.
    fn rest_of_arguments(&mut self, item: &str, arguments: &str, out: &mut Vec<String>) {
        let Some((_, sent)) = self.tools.iter().find(|(id, _)| id == item) else { return };
        if let Some(rest) = arguments.strip_prefix(sent.as_str()).filter(|r| !r.is_empty()).map(str::to_owned)
        {
            self.arguments(item, &rest, out);
        }
    }

    fn identify(&mut self, response: &Value) {
        if response["id"].is_string() {
            self.w.id = completion_id(response);
        }
        if let Some(t) = response["created_at"].as_i64() {
            self.w.created = t;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::{super::response::from_responses, *};

    /// A chunk as it was written before: built as a document (sorted members) and written out.
    fn chunk_by_value(w: &Chunks, delta: Value, finish: Option<&str>, usage: Option<Value>) -> String {
        let choices = if usage.is_some() {
            json!([])
        } else {
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
        };
        let mut c = json!({"id": w.id, "object": "chat.completion.chunk", "created": w.created,
                           "model": w.model, "choices": choices});
        if w.include_usage {
            c["usage"] = usage.unwrap_or(Value::Null);
        }
        c.to_string()
    }

    #[test]
    fn chunks_are_written_as_the_document_wrote_them() {
        for include_usage in [false, true] {
            let mut w = Chunks::new("gpt-5.5 \"q\"", include_usage, 1_700_000_000);
            w.id = "chatcmpl-\u{e9}".to_owned();
            for text in ["Hello", "", "quote \" back\\slash \n\u{1f600} </script>", "\u{7f}\u{0}"] {
                assert_eq!(w.text(text), chunk_by_value(&w, json!({"content": text}), None, None));
            }
            let delta = json!({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": ""}}]});
            assert_eq!(
                w.chunk(delta.clone(), Some("tool_calls")),
                chunk_by_value(&w, delta, Some("tool_calls"), None)
            );
            let mut out = Vec::new();
            let usage = json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3});
            w.finish("stop", usage.clone(), &mut out);
            let mut expected = vec![
                chunk_by_value(&w, json!({"role": "assistant", "content": ""}), None, None),
                chunk_by_value(&w, json!({}), Some("stop"), None),
            ];
            if include_usage {
                expected.push(chunk_by_value(&w, Value::Null, None, Some(usage)));
            }
            expected.push(DONE.to_owned());
            assert_eq!(out, expected);
        }
    }

    #[test]
    fn an_event_read_short_takes_the_short_path() {
        /// Tells which path each event took.
        struct Paths(Vec<&'static str>);
        impl Transform for Paths {
            type Short<'a> = &'a str;
            fn short(data: &str) -> Option<&str> {
                data.strip_prefix("short:")
            }
            fn on_short(&mut self, _: &str) -> Vec<String> {
                self.0.push("short");
                Vec::new()
            }
            fn in_full(&mut self, _: &str) -> Vec<String> {
                self.0.push("in full");
                Vec::new()
            }
        }
        let mut paths = Paths(Vec::new());
        for data in ["short:a", "{}", "short:"] {
            paths.event(data);
        }
        assert_eq!(paths.0, ["short", "in full", "short"]);
    }

    /// The text of what a stream's short path reads.
    pub(in crate::chat) trait ShortText: Transform {
        fn text(short: Self::Short<'_>) -> String;
    }

    impl ShortText for ChatStream {
        fn text(short: Cow<'_, str>) -> String {
            short.into_owned()
        }
    }

    /// Every event of `events`, in order, through `event` and through `in_full` on two copies of
    /// one stream: the short path must say what the document path says, and leave the stream as
    /// the document path leaves it. And the short path must be taken: `short` is the text it
    /// reads, event by event, in order.
    pub(in crate::chat) fn same_as_in_full<S: ShortText + Clone + std::fmt::Debug>(
        mut stream: S,
        events: &[&str],
        short: &[&str],
    ) {
        let read: Vec<_> = events.iter().filter_map(|data| S::short(data).map(S::text)).collect();
        assert_eq!(read, short, "the events the short path reads");
        let mut full = stream.clone();
        for data in events {
            assert_eq!(stream.event(data), full.in_full(data), "{data}");
            assert_eq!(format!("{stream:?}"), format!("{full:?}"), "the state after {data}");
        }
    }

    #[test]
    fn text_deltas_read_as_the_document_reads_them() {
        let events = [
            r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}"#,
            r#"{"type":"response.created","response":{"id":"resp_1","created_at":7}}"#,
            r#"{"type":"response.output_text.delta","item_id":"msg_1","delta":"Hel\u006co \"q\" \ud83d\ude00","logprobs":[]}"#,
            r#"{"delta":"","type":"response.output_text.delta"}"#,
            r#"{"type":"response.output_text.delta","delta":7}"#,
            r#"{"type":"response.output_text.delta","delta":null}"#,
            r#"{"type":"response.output_text.delta"}"#,
            r#"{"type":"response.output_text.delta","delta":"a","delta":"b"}"#,
            r#"{"type":"response.output_text.delta","delta":["not text"],"delta":"last"}"#,
            r#"{"type":"response.refusal.delta","delta":"no"}"#,
            r#"{"type":"response.output_text.d\u0065lta","delta":"escaped type"}"#,
            r#"{"type":"response.output_text.delta","delta":"x","type":"response.refusal.delta"}"#,
            r#"["response.output_text.delta","by position"]"#,
            r#"{"type":"response.output_text.delta","delta":"cut"#,
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":1,"output_tokens":2}}}"#,
            r#"{"type":"response.output_text.delta","delta":"after the end"}"#,
        ];
        let short = ["Hi", "Hello \"q\" \u{1f600}", "", "b", "last", "escaped type", "after the end"];
        for include_usage in [false, true] {
            same_as_in_full(ChatStream::new("m", include_usage), &events, &short);
        }
        let faults = crate::providers::lenient::tests::faults_in_skipped_members(
            r#"{"type":"response.output_text.delta","delta":"x""#,
        );
        let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
        same_as_in_full(ChatStream::new("m", true), &faults, &[]);
    }

    /// The Responses events of an answer with `texts` as output text deltas and `calls` as
    /// function calls (name, argument pieces), ending with `response.completed`; and the final
    /// response object.
    fn upstream(texts: &[String], calls: &[(String, Vec<String>)]) -> (Vec<String>, Value) {
        let mut events =
            vec![json!({"type": "response.created", "response": {"id": "resp_1", "created_at": 7}})];
        let mut output = Vec::new();
        if !texts.is_empty() {
            for t in texts {
                events.push(json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": t}));
            }
            output.push(
                json!({"type": "message", "content": [{"type": "output_text", "text": texts.concat()}]}),
            );
        }
        for (i, (name, pieces)) in calls.iter().enumerate() {
            let (id, call_id) = (format!("fc_{i}"), format!("call_{i}"));
            events.push(json!({"type": "response.output_item.added", "output_index": i + 1,
                               "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": ""}}));
            for p in pieces {
                events.push(
                    json!({"type": "response.function_call_arguments.delta", "item_id": id, "delta": p}),
                );
            }
            output.push(json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": pieces.concat()}));
        }
        let response = json!({"id": "resp_1", "created_at": 7, "status": "completed", "output": output,
                              "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}});
        events.push(json!({"type": "response.completed", "response": response}));
        (events.into_iter().map(|e| e.to_string()).collect(), response)
    }

    /// The chunks, the text, the tool calls (id, name, arguments) and the finish reason.
    pub(in crate::chat) type Folded = (Vec<Value>, String, Vec<(String, String, String)>, Option<String>);

    /// Runs the transform and folds the chunks the way the openai SDK does.
    fn fold(events: &[String], include_usage: bool) -> Folded {
        let mut s = ChatStream::new("m", include_usage);
        fold_chunks(events.iter().flat_map(|e| s.event(e)).collect())
    }

    /// Folds a Chat Completions stream's chunks the way the openai SDK does.
    pub(in crate::chat) fn fold_chunks(chunks: Vec<String>) -> Folded {
        assert_eq!(chunks.last().map(String::as_str), Some(DONE));
        let values: Vec<Value> =
            chunks[..chunks.len() - 1].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
        let (mut text, mut calls, mut finish) = (String::new(), Vec::<(String, String, String)>::new(), None);
        for v in &values {
            let Some(choice) = v["choices"].get(0) else { continue };
            let d = &choice["delta"];
            text.push_str(d["content"].as_str().unwrap_or_default());
            for c in d["tool_calls"].as_array().into_iter().flatten() {
                let i = c["index"].as_u64().unwrap() as usize;
                if i == calls.len() {
                    calls.push((
                        c["id"].as_str().unwrap().into(),
                        c["function"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                calls[i].2.push_str(c["function"]["arguments"].as_str().unwrap_or_default());
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = Some(f.to_owned());
            }
        }
        (values, text, calls, finish)
    }

    /// A collected `chat.completion`'s text, tool calls (id, name, arguments) and finish reason.
    pub(in crate::chat) fn collected(c: &Value) -> (String, Vec<(String, String, String)>, Option<String>) {
        let message = &c["choices"][0]["message"];
        let calls = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (s(&t["id"]), s(&t["function"]["name"]), s(&t["function"]["arguments"]))
            })
            .collect();
        let finish = c["choices"][0]["finish_reason"].as_str().map(str::to_owned);
        (message["content"].as_str().unwrap_or_default().to_owned(), calls, finish)
    }

    #[test]
    fn chunks_have_the_shape_the_sdk_expects() {
        let (events, _) = upstream(
            &["Hel".into(), "lo".into()],
            &[("weather".into(), vec!["{\"ci".into(), "ty\":1}".into()])],
        );
        let (chunks, text, calls, finish) = fold(&events, true);
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert!(
            chunks.iter().all(|c| c["object"] == "chat.completion.chunk"
                && c["id"] == "chatcmpl-1"
                && c["model"] == "m")
        );
        assert_eq!(text, "Hello");
        assert_eq!(calls, vec![("call_0".into(), "weather".into(), "{\"city\":1}".into())]);
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["total_tokens"], 13);
        assert!(
            chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null()),
            "usage only in the last chunk"
        );
        let (plain, ..) = fold(&events, false);
        assert!(
            plain.iter().all(|c| c.get("usage").is_none() && !c["choices"].as_array().unwrap().is_empty())
        );
    }

    #[test]
    fn tool_calls_announced_only_when_done_still_arrive_whole() {
        let mut s = ChatStream::new("m", false);
        let item = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}"});
        let mut out = s.event(&json!({"type": "response.output_item.done", "item": item}).to_string());
        // and one whose deltas stopped half way
        let added =
            json!({"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "g", "arguments": ""});
        out.extend(s.event(&json!({"type": "response.output_item.added", "item": added}).to_string()));
        out.extend(s.event(&json!({"type": "response.function_call_arguments.delta", "item_id": "fc_2", "delta": "{\"b\""}).to_string()));
        out.extend(s.event(&json!({"type": "response.function_call_arguments.done", "item_id": "fc_2", "arguments": "{\"b\":2}"}).to_string()));
        let mut args = vec![String::new(), String::new()];
        for c in &out {
            let v: Value = serde_json::from_str(c).unwrap();
            for t in v["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
                args[t["index"].as_u64().unwrap() as usize]
                    .push_str(t["function"]["arguments"].as_str().unwrap_or_default());
            }
        }
        assert_eq!(args, ["{\"a\":1}", "{\"b\":2}"]);
    }

    #[test]
    fn a_failed_response_ends_with_an_error_and_nothing_after_it() {
        let mut s = ChatStream::new("m", false);
        s.event(&json!({"type": "response.created", "response": {"id": "resp_2"}}).to_string());
        let failed = json!({"type": "response.failed", "response": {"error": {"code": "server_error", "message": "boom"}}});
        let out = s.event(&failed.to_string());
        assert_eq!(out.len(), 1);
        let e: Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(
            (e["error"]["code"].as_str(), e["error"]["message"].as_str()),
            (Some("server_error"), Some("boom"))
        );
        assert!(s.ended());
        assert!(s.event(&json!({"type": "response.output_text.delta", "delta": "x"}).to_string()).is_empty());
    }

    proptest! {
        /// A streamed answer folds to the collected one: same text, same tool calls, same finish.
        #[test]
        fn a_stream_concatenates_to_the_collected_answer(
            texts in proptest::collection::vec("[a-z ]{0,6}", 0..5),
            calls in proptest::collection::vec(("[a-z]{1,6}", proptest::collection::vec("[a-z0-9{}\":,]{0,5}", 0..4)), 0..3),
        ) {
            let (events, response) = upstream(&texts, &calls);
            let (_, text, streamed, finish) = fold(&events, false);
            prop_assert_eq!((text, streamed, finish), collected(&from_responses(&response, "m")));
        }
    }
}
