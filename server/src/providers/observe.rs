//! Watching a model answer go by: usage (input, cached, output tokens), the moment of first output
//! (REC-7), and how it ended (REC-8), for each protocol's stream events and JSON bodies.
//!
//! Only terminal events and the first delta are parsed as JSON; other events are recognised by
//! name, so watching costs little per event.

use std::{borrow::Cow, time::Duration};

use serde::{Deserialize, de::SeqAccess};
use serde_json::Value;

use super::lenient::{AnObject, Expected, First, Loose, NonEmpty, Seen, lenient_object};

use crate::records::{Outcome, Usage};

/// Which event grammar to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar {
    /// OpenAI Responses (also the Codex backend).
    Responses,
    /// Anthropic Messages.
    Messages,
    /// Gemini generateContent chunks (bare or in the v1internal envelope).
    Gemini,
}

/// What was learned from an answer.
#[derive(Debug, Default, Clone)]
pub struct Observation {
    /// `None` until a terminal event (or a complete JSON body) is seen.
    pub outcome: Option<Outcome>,
    pub usage: Usage,
    pub first_output: Option<Duration>,
    /// Sanitized code of a terminal failure.
    pub error_code: Option<String>,
    /// The final response object of a Responses stream (`response.completed` and friends), for
    /// answering a non-streaming client from a streaming upstream.
    pub final_response: Option<Value>,
    /// Anthropic: the `message_delta` with the answer's `stop_reason` was seen, after which only
    /// `message_stop` is due, so a stream cut after it lacks nothing of the answer.
    pub answered: bool,
}

#[derive(Debug)]
pub struct Observer {
    grammar: Grammar,
    pub seen: Observation,
    /// Anthropic: `message_start` input parts, completed by `message_delta`.
    cache_read: Option<i64>,
    cache_creation: Option<i64>,
    fresh_input: Option<i64>,
}

impl Observer {
    /// The protocol whose events it reads.
    pub fn grammar(&self) -> Grammar {
        self.grammar
    }

    pub fn new(grammar: Grammar) -> Self {
        Observer {
            grammar,
            seen: Observation::default(),
            cache_read: None,
            cache_creation: None,
            fresh_input: None,
        }
    }

    /// One stream event, `at` after the start of gateway processing.
    pub fn event(&mut self, name: Option<&str>, data: &str, at: Duration) {
        match self.grammar {
            Grammar::Responses => self.responses_event(name, data, at),
            Grammar::Messages => self.messages_event(name, data, at),
            Grammar::Gemini => {
                let Ok(Loose(Some(top))) = serde_json::from_str::<Loose<GeminiTop<'_>>>(data) else {
                    return;
                };
                if let Some(error) = &top.error.0 {
                    // an error sent inside the stream ends it
                    self.seen.outcome = Some(Outcome::Error);
                    let status = error.status.0.as_deref().unwrap_or("stream_error");
                    self.seen.error_code = sanitize(&status.to_ascii_lowercase());
                    return;
                }
                self.gemini_chunk(top.chunk(), Some(at));
            }
        }
    }

    /// A complete non-streaming JSON answer, already parsed (it is also being translated).
    pub fn body(&mut self, body: &Value) {
        match self.grammar {
            Grammar::Gemini => self.gemini_answer(Loose::deserialize(body).ok().and_then(|t| t.0)),
            Grammar::Responses => self.responses_final(&Answer::of(body)),
            Grammar::Messages => self.messages_final(&Answer::of(body)),
        }
    }

    /// A complete non-streaming JSON answer passed through as it came: only what the record needs
    /// is read from it, without building the document. Text that is not a JSON object tells
    /// nothing (the call still ends, as a success with no usage).
    pub fn json(&mut self, bytes: &[u8]) {
        match self.grammar {
            Grammar::Gemini => {
                // (any JSON ends the call, as a success unless it says otherwise)
                if let Ok(top) = serde_json::from_slice::<Loose<GeminiTop<'_>>>(bytes) {
                    self.gemini_answer(top.0);
                }
            }
            Grammar::Responses => {
                if let Some(a) = Answer::parse(bytes) {
                    self.responses_final(&a);
                }
            }
            Grammar::Messages => {
                if let Some(a) = Answer::parse(bytes) {
                    self.messages_final(&a);
                }
            }
        }
    }

    /// The end of a Messages answer.
    fn messages_final(&mut self, a: &Answer<'_>) {
        self.anthropic_usage(&a.usage);
        self.seen.outcome = Some(match a.stop_reason.0.as_deref() {
            Some("max_tokens") => Outcome::Incomplete,
            _ => Outcome::Success,
        });
    }

    fn first_output(&mut self, at: Duration) {
        if self.seen.first_output.is_none() {
            self.seen.first_output = Some(at);
        }
    }

    fn responses_event(&mut self, name: Option<&str>, data: &str, at: Duration) {
        let parsed;
        let name = match name {
            Some(n) => n,
            None => {
                parsed = serde_json::from_str::<Value>(data).unwrap_or(Value::Null);
                parsed["type"].as_str().unwrap_or("")
            }
        };
        match name {
            "response.output_text.delta"
            | "response.reasoning_text.delta"
            | "response.reasoning_summary_text.delta"
            | "response.function_call_arguments.delta"
            | "response.custom_tool_call_input.delta"
            | "response.refusal.delta"
                if self.seen.first_output.is_none() && has_nonempty(data, "delta") =>
            {
                self.first_output(at);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Ok(mut v) = serde_json::from_str::<Value>(data) {
                    // (`get_mut`: an index would panic on data that is not an object)
                    let response = v.get_mut("response").map(Value::take).unwrap_or(Value::Null);
                    self.responses_final(&Answer::of(&response));
                    self.seen.final_response = Some(response);
                }
            }
            "error" => {
                let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                self.seen.outcome = Some(Outcome::Error);
                self.seen.error_code =
                    sanitize(v["code"].as_str().or(v["error"]["code"].as_str()).unwrap_or("stream_error"));
            }
            _ => {}
        }
    }

    fn responses_final(&mut self, r: &Answer<'_>) {
        if let Some(u) = &r.usage.0 {
            self.seen.usage = Usage {
                input: u.input_tokens.0,
                output: u.output_tokens.0,
                cached: u.input_tokens_details.0.as_ref().and_then(|d| d.cached_tokens.0),
            };
        }
        self.seen.outcome = Some(match r.status.0.as_deref() {
            Some("completed") => Outcome::Success,
            Some("incomplete") => Outcome::Incomplete,
            Some("failed") | Some("cancelled") => {
                let code = r.error.0.as_ref().and_then(|e| e.code.0.as_deref());
                self.seen.error_code = sanitize(code.unwrap_or("response_failed"));
                Outcome::Error
            }
            _ => Outcome::Success,
        });
    }

    fn messages_event(&mut self, name: Option<&str>, data: &str, at: Duration) {
        match name.unwrap_or("") {
            "content_block_delta" if self.seen.first_output.is_none() => {
                let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                let d = &v["delta"];
                let text = d["text"].as_str().or(d["thinking"].as_str()).or(d["partial_json"].as_str());
                if text.is_some_and(|t| !t.is_empty()) {
                    self.first_output(at);
                }
            }
            "message_start" => {
                let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                self.anthropic_usage(&Loose::deserialize(&v["message"]["usage"]).unwrap_or_default());
            }
            "message_delta" => {
                let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                self.anthropic_usage(&Loose::deserialize(&v["usage"]).unwrap_or_default());
                let stop_reason = v["delta"]["stop_reason"].as_str();
                self.seen.answered |= stop_reason.is_some();
                if stop_reason == Some("max_tokens") {
                    self.seen.outcome = Some(Outcome::Incomplete);
                }
            }
            "message_stop" if self.seen.outcome.is_none() => self.seen.outcome = Some(Outcome::Success),
            "error" => {
                let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                self.seen.outcome = Some(Outcome::Error);
                self.seen.error_code = sanitize(v["error"]["type"].as_str().unwrap_or("stream_error"));
            }
            _ => {}
        }
    }

    /// A complete Gemini answer (`None`: JSON that is not an object, which tells nothing).
    fn gemini_answer(&mut self, top: Option<GeminiTop<'_>>) {
        if let Some(top) = top {
            self.gemini_chunk(top.chunk(), None);
        }
        if self.seen.outcome.is_none() {
            self.seen.outcome = Some(Outcome::Success);
        }
    }

    /// One Gemini chunk: text or a function call is output; `usageMetadata` is cumulative;
    /// `finishReason` ends the answer (STOP success, MAX_TOKENS incomplete, others errors).
    fn gemini_chunk(&mut self, chunk: Option<GeminiChunk<'_>>, at: Option<Duration>) {
        let Some(chunk) = chunk else { return };
        let candidate = chunk.candidates.0.map(|First(c)| c);
        if let Some(at) = at
            && candidate.as_ref().and_then(|c| c.content.0.as_ref()).is_some_and(|c| c.parts.0.is_some())
        {
            self.first_output(at);
        }
        if let Some(u) = chunk.usageMetadata.0 {
            let output =
                u.candidatesTokenCount.0.map(|c| c.saturating_add(u.thoughtsTokenCount.0.unwrap_or(0)));
            self.seen.usage = Usage {
                input: u.promptTokenCount.0,
                output,
                cached: u.cachedContentTokenCount.0.or(Some(0)),
            };
        }
        if let Some(reason) = candidate.and_then(|c| c.finishReason.0) {
            self.seen.outcome = Some(match &*reason {
                "STOP" => Outcome::Success,
                "MAX_TOKENS" => Outcome::Incomplete,
                other => {
                    self.seen.error_code = sanitize(other);
                    Outcome::Error
                }
            });
        }
    }

    /// Anthropic counts fresh input, cache reads and cache writes apart; SubLane records their
    /// sum as input and the reads as cached, so the cache hit rate (REC-6) means the same
    /// thing for every protocol. `message_delta` usage is cumulative.
    fn anthropic_usage(&mut self, u: &Loose<TokenCounts>) {
        let Some(u) = &u.0 else { return };
        if let Some(v) = u.input_tokens.0 {
            self.fresh_input = Some(v);
        }
        if let Some(v) = u.cache_read_input_tokens.0 {
            self.cache_read = Some(v);
        }
        if let Some(v) = u.cache_creation_input_tokens.0 {
            self.cache_creation = Some(v);
        }
        if let Some(v) = u.output_tokens.0 {
            self.seen.usage.output = Some(v);
        }
        // (saturating: the counts are the upstream's, and a sum past i64 must not panic or wrap)
        self.seen.usage.input = self.fresh_input.map(|i| {
            i.saturating_add(self.cache_read.unwrap_or(0)).saturating_add(self.cache_creation.unwrap_or(0))
        });
        self.seen.usage.cached = self.cache_read;
    }
}

lenient_object! {
    /// What a Responses or Messages answer (the JSON body, or the response of a terminal event)
    /// says about how it ended and what it used. Read typed and borrowed: every other field is
    /// skipped unbuilt, and a field of an unexpected type reads as absent, as `Value`'s accessors
    /// would.
    Answer<'a> {
        status: Loose<Cow<'a, str>>,
        usage: Loose<TokenCounts>,
        error: Loose<AnswerError<'a>>,
        stop_reason: Loose<Cow<'a, str>>,
    }
}

impl<'a> Answer<'a> {
    /// What a parsed answer says; one that is not an object says nothing.
    fn of(v: &'a Value) -> Self {
        Loose::deserialize(v).ok().and_then(|a: Loose<Answer<'a>>| a.0).unwrap_or_default()
    }

    /// The answer in JSON text; `None` for text that is not a JSON object.
    fn parse(bytes: &'a [u8]) -> Option<Self> {
        serde_json::from_slice::<Loose<Answer<'a>>>(bytes).ok().and_then(|a| a.0)
    }
}

lenient_object! {
    /// `usage` in either protocol: Responses names input, output and `input_tokens_details`;
    /// Messages names input, output and its two cache parts.
    TokenCounts {
        input_tokens: Loose<i64>,
        output_tokens: Loose<i64>,
        input_tokens_details: Loose<InputDetails>,
        cache_read_input_tokens: Loose<i64>,
        cache_creation_input_tokens: Loose<i64>,
    }
}

lenient_object! {
    InputDetails {
        cached_tokens: Loose<i64>,
    }
}

lenient_object! {
    AnswerError<'a> {
        code: Loose<Cow<'a, str>>,
    }
}

lenient_object! {
    /// A Gemini chunk or answer as the observer reads it: in the v1internal envelope
    /// (`response`), bare (its own `candidates` and `usageMetadata`), or an error sent inside a
    /// stream. Read typed and borrowed, as [`Answer`] is.
    #[allow(non_snake_case)]
    GeminiTop<'a> {
        error: Loose<GeminiError<'a>>,
        response: Seen<GeminiChunk<'a>>,
        candidates: Loose<First<GeminiCandidate<'a>>>,
        usageMetadata: Loose<GeminiUsage>,
    }
}

impl<'a> GeminiTop<'a> {
    /// The chunk itself: the envelope's `response` when there is one (whatever it holds, as
    /// `value.get("response")` decides), else the top level.
    fn chunk(self) -> Option<GeminiChunk<'a>> {
        if self.response.present {
            self.response.value
        } else {
            Some(GeminiChunk { candidates: self.candidates, usageMetadata: self.usageMetadata })
        }
    }
}

lenient_object! {
    #[allow(non_snake_case)]
    GeminiChunk<'a> {
        candidates: Loose<First<GeminiCandidate<'a>>>,
        usageMetadata: Loose<GeminiUsage>,
    }
}

lenient_object! {
    #[allow(non_snake_case)]
    GeminiCandidate<'a> {
        content: Loose<GeminiContent>,
        finishReason: Loose<Cow<'a, str>>,
    }
}

lenient_object! {
    GeminiContent {
        parts: Loose<HasOutput>,
    }
}

lenient_object! {
    #[allow(non_snake_case)]
    GeminiPart {
        text: Loose<NonEmpty>,
        functionCall: Loose<AnObject>,
    }
}

lenient_object! {
    /// Gemini's `usageMetadata`: the counts SubLane reads (the Chat transform reads them too).
    #[allow(non_snake_case)]
    pub(crate) GeminiUsage {
        promptTokenCount: Loose<i64>,
        candidatesTokenCount: Loose<i64>,
        thoughtsTokenCount: Loose<i64>,
        cachedContentTokenCount: Loose<i64>,
    }
}

lenient_object! {
    GeminiError<'a> {
        status: Loose<Cow<'a, str>>,
    }
}

/// A `parts` array that holds output: a part with text or a function call.
#[derive(Debug)]
struct HasOutput;

impl<'de> Expected<'de> for HasOutput {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let mut output = false;
        while let Some(part) = seq.next_element::<Loose<GeminiPart>>()? {
            output |= part.0.is_some_and(|p| p.text.0.is_some() || p.functionCall.0.is_some());
        }
        Ok(output.then_some(HasOutput))
    }
}

/// Cheap check that `"field":"<non-empty>"` appears, without parsing the event.
fn has_nonempty(data: &str, field: &str) -> bool {
    let needle = format!("\"{field}\":");
    match data.find(&needle) {
        Some(i) => {
            let rest = data[i + needle.len()..].trim_start();
            !(rest.starts_with("\"\"") || rest.starts_with("null"))
        }
        None => false,
    }
}

/// Keeps error codes short and plain: `[a-z0-9_.-]`, at most 64 characters.
pub fn sanitize(code: &str) -> Option<String> {
    let clean: String = code
        .chars()
        .take(64)
        .map(|c| c.to_ascii_lowercase())
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        .collect();
    (!clean.is_empty()).then_some(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn responses_usage_first_output_and_success() {
        let mut o = Observer::new(Grammar::Responses);
        o.event(Some("response.created"), r#"{"type":"response.created"}"#, MS);
        o.event(Some("response.output_text.delta"), r#"{"delta":""}"#, 2 * MS);
        assert!(o.seen.first_output.is_none(), "empty deltas are not output");
        o.event(Some("response.output_text.delta"), r#"{"delta":"Hi"}"#, 3 * MS);
        o.event(Some("response.output_text.delta"), r#"{"delta":"!"}"#, 4 * MS);
        o.event(
            Some("response.completed"),
            r#"{"response":{"status":"completed","usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":7}}}"#,
            5 * MS,
        );
        assert_eq!(o.seen.first_output, Some(3 * MS));
        assert_eq!(o.seen.outcome, Some(Outcome::Success));
        assert_eq!(o.seen.usage, Usage { input: Some(120), output: Some(7), cached: Some(64) });
    }

    #[test]
    fn a_final_event_that_is_not_an_object_is_read_as_no_response() {
        for data in ["1", r#""x""#, "[]", "null"] {
            let mut o = Observer::new(Grammar::Responses);
            o.event(Some("response.completed"), data, MS);
            assert_eq!(o.seen.outcome, Some(Outcome::Success), "{data}");
            assert_eq!(o.seen.final_response, Some(Value::Null), "{data}");
        }
    }

    #[test]
    fn responses_failed_and_incomplete() {
        let mut o = Observer::new(Grammar::Responses);
        o.event(
            Some("response.failed"),
            r#"{"response":{"status":"failed","error":{"code":"server_error","message":"x"}}}"#,
            MS,
        );
        assert_eq!(o.seen.outcome, Some(Outcome::Error));
        assert_eq!(o.seen.error_code.as_deref(), Some("server_error"));
        let mut o = Observer::new(Grammar::Responses);
        o.event(
            Some("response.incomplete"),
            r#"{"response":{"status":"incomplete","usage":{"input_tokens":1,"output_tokens":2}}}"#,
            MS,
        );
        assert_eq!(o.seen.outcome, Some(Outcome::Incomplete));
        assert_eq!(o.seen.usage.output, Some(2));
    }

    #[test]
    fn messages_usage_sums_cache_parts() {
        let mut o = Observer::new(Grammar::Messages);
        o.event(
            Some("message_start"),
            r#"{"message":{"usage":{"input_tokens":56,"cache_read_input_tokens":64,"cache_creation_input_tokens":0,"output_tokens":1}}}"#,
            MS,
        );
        o.event(Some("content_block_delta"), r#"{"delta":{"type":"text_delta","text":"Hey"}}"#, 2 * MS);
        o.event(
            Some("message_delta"),
            r#"{"delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#,
            3 * MS,
        );
        o.event(Some("message_stop"), r#"{"type":"message_stop"}"#, 4 * MS);
        assert_eq!(o.seen.usage, Usage { input: Some(120), output: Some(7), cached: Some(64) });
        assert_eq!(o.seen.first_output, Some(2 * MS));
        assert_eq!(o.seen.outcome, Some(Outcome::Success));
    }

    #[test]
    fn messages_error_event_after_200() {
        let mut o = Observer::new(Grammar::Messages);
        o.event(
            Some("error"),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            MS,
        );
        assert_eq!(o.seen.outcome, Some(Outcome::Error));
        assert_eq!(o.seen.error_code.as_deref(), Some("overloaded_error"));
    }

    #[test]
    fn gemini_chunks_in_the_envelope() {
        let mut o = Observer::new(Grammar::Gemini);
        o.event(None, r#"{"response":{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}}"#, MS);
        o.event(
            None,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":5,"thoughtsTokenCount":2,"cachedContentTokenCount":64}}}"#,
            2 * MS,
        );
        assert_eq!(o.seen.first_output, Some(MS));
        assert_eq!(o.seen.outcome, Some(Outcome::Success));
        assert_eq!(o.seen.usage, Usage { input: Some(120), output: Some(7), cached: Some(64) });
    }

    #[test]
    fn a_gemini_error_inside_the_stream_is_an_error() {
        let mut o = Observer::new(Grammar::Gemini);
        o.event(None, r#"{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}"#, Duration::ZERO);
        assert_eq!(
            (o.seen.outcome, o.seen.error_code.as_deref()),
            (Some(Outcome::Error), Some("unavailable"))
        );
    }

    /// What a whole JSON answer tells, read from its bytes (the pass-through path) and from its
    /// parsed value (the translated path): the two must agree.
    fn answer_of(grammar: Grammar, json: &str) -> (Option<Outcome>, Usage, Option<String>) {
        let mut from_bytes = Observer::new(grammar);
        from_bytes.json(json.as_bytes());
        let mut from_value = Observer::new(grammar);
        if let Ok(v) = serde_json::from_str::<Value>(json) {
            from_value.body(&v);
        }
        let (a, b) = (from_bytes.seen, from_value.seen);
        assert_eq!((a.outcome, &a.usage, &a.error_code), (b.outcome, &b.usage, &b.error_code), "{json}");
        (a.outcome, a.usage, a.error_code)
    }

    #[test]
    fn json_answers_in_both_protocols() {
        let responses = r#"{"id":"resp_1","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],
            "usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":7,"total_tokens":127},"error":null}"#;
        let usage = Usage { input: Some(120), output: Some(7), cached: Some(64) };
        assert_eq!(answer_of(Grammar::Responses, responses), (Some(Outcome::Success), usage, None));
        let failed = r#"{"status":"failed","error":{"code":"Server_Error","message":"x"},"usage":null}"#;
        assert_eq!(
            answer_of(Grammar::Responses, failed),
            (Some(Outcome::Error), Usage::default(), Some("server_error".into()))
        );
        let messages = r#"{"type":"message","content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens",
            "usage":{"input_tokens":56,"cache_read_input_tokens":64,"cache_creation_input_tokens":8,"output_tokens":9}}"#;
        let usage = Usage { input: Some(128), output: Some(9), cached: Some(64) };
        assert_eq!(answer_of(Grammar::Messages, messages), (Some(Outcome::Incomplete), usage, None));
    }

    /// The rules as `Value`'s accessors read them (how answers were read before they were read
    /// typed): the oracle the typed reader must agree with, odd input included.
    fn by_value(grammar: Grammar, v: &Value) -> (Option<Outcome>, Usage, Option<String>) {
        let u = &v["usage"];
        match grammar {
            Grammar::Messages => {
                let (cr, cc) =
                    (u["cache_read_input_tokens"].as_i64(), u["cache_creation_input_tokens"].as_i64());
                let usage = Usage {
                    input: u["input_tokens"]
                        .as_i64()
                        .map(|i| i.saturating_add(cr.unwrap_or(0)).saturating_add(cc.unwrap_or(0))),
                    output: u["output_tokens"].as_i64(),
                    cached: cr,
                };
                let incomplete = v["stop_reason"].as_str() == Some("max_tokens");
                (Some(if incomplete { Outcome::Incomplete } else { Outcome::Success }), usage, None)
            }
            Grammar::Gemini => unreachable!("Gemini answers are not read as an Answer"),
            Grammar::Responses => {
                let usage = Usage {
                    input: u["input_tokens"].as_i64(),
                    output: u["output_tokens"].as_i64(),
                    cached: u["input_tokens_details"]["cached_tokens"].as_i64(),
                };
                let (outcome, code) = match v["status"].as_str() {
                    Some("incomplete") => (Outcome::Incomplete, None),
                    Some("failed" | "cancelled") => {
                        (Outcome::Error, sanitize(v["error"]["code"].as_str().unwrap_or("response_failed")))
                    }
                    _ => (Outcome::Success, None),
                };
                (Some(outcome), usage, code)
            }
        }
    }

    #[test]
    fn reads_what_value_accessors_read() {
        let answers = [
            // a field of an unexpected type reads as absent; the fields that are right still count
            r#"{"status":7,"usage":{"input_tokens":"12","output_tokens":3.0,"input_tokens_details":[1,{"cached_tokens":2}]}}"#,
            r#"{"status":"incomplete","usage":[{"input_tokens":1}],"stop_reason":{"x":1}}"#,
            r#"{"status":"failed","error":"rate_limit"}"#,
            r#"{"status":"failed","error":{"code":12}}"#,
            r#"{"status":null,"usage":{"input_tokens":null,"output_tokens":true,"input_tokens_details":"x"}}"#,
            // integers: beyond i64, at its ends, negative, negative zero
            r#"{"usage":{"input_tokens":9223372036854775808,"output_tokens":9223372036854775807,"cache_read_input_tokens":-9223372036854775808}}"#,
            r#"{"usage":{"input_tokens":-1,"output_tokens":-0,"cache_creation_input_tokens":1e2}}"#,
            // escaped strings are read as what they mean
            r#"{"status":"f\u0061iled","error":{"code":"rate_\u006Cimit"},"stop_reason":"max_\u0074okens"}"#,
            // a key given twice keeps its last value, at every level
            r#"{"status":"completed","status":"failed","error":{"code":"a","code":"b"}}"#,
            r#"{"status":"incomplete","usage":{"input_tokens":1,"input_tokens":2,"input_tokens_details":{"cached_tokens":1,"cached_tokens":3}}}"#,
            r#"{"usage":{"input_tokens":5},"usage":{"output_tokens":6},"stop_reason":"end_turn","stop_reason":"max_tokens"}"#,
            // Messages' cache parts, and a Responses answer that names them
            r#"{"stop_reason":"max_tokens","usage":{"input_tokens":56,"cache_read_input_tokens":64,"cache_creation_input_tokens":8,"output_tokens":9}}"#,
            r#"{"status":"cancelled","usage":{"input_tokens":3,"cache_read_input_tokens":64},"error":null}"#,
            // a key given twice whose last value is of the wrong type: absent, as in a Value map
            r#"{"status":"failed","status":7,"usage":{"input_tokens":1},"usage":null}"#,
            r#"{"usage":{"input_tokens":1,"input_tokens":"1"},"error":{"code":"x"},"error":[]}"#,
            // escaped keys, and keys the reader does not know, nested or not
            r#"{"st\u0061tus":"failed","us\u0061ge":{"input_t\u006Fkens":1},"error":{"c\u006fde":"y"}}"#,
            r#"{"response":{"status":"failed"},"x":[1,{"usage":2}],"usage":{"usage":{"input_tokens":1},"output_tokens":2}}"#,
            // a Messages sum past i64 saturates
            r#"{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":1,"cache_creation_input_tokens":5}}"#,
            r#"{}"#,
        ];
        // a fault only a check finds, in a member the reader skips: the answer is no JSON
        let faults = crate::providers::lenient::tests::faults_in_skipped_members(
            r#"{"status":"failed","error":{"code":"x"},"usage":{"input_tokens":1,"output_tokens":2}"#,
        );
        for grammar in [Grammar::Responses, Grammar::Messages] {
            for json in answers {
                let expected = by_value(grammar, &serde_json::from_str(json).unwrap());
                assert_eq!(answer_of(grammar, json), expected, "{grammar:?} {json}");
            }
            for json in &faults {
                assert_eq!(answer_of(grammar, json), answer_of(grammar, "not json"), "{grammar:?} {json}");
            }
        }
    }

    /// Gemini chunks as `Value`'s accessors read them (how they were read before they were read
    /// typed): the oracle of [`gemini_reads_what_value_accessors_read`].
    #[derive(Default)]
    struct GeminiByValue(Observation);

    impl GeminiByValue {
        fn event(&mut self, data: &str, at: Duration) {
            if let Ok(v) = serde_json::from_str::<Value>(data) {
                if v["error"].is_object() {
                    self.0.outcome = Some(Outcome::Error);
                    let status = v["error"]["status"].as_str().unwrap_or("stream_error");
                    self.0.error_code = sanitize(&status.to_ascii_lowercase());
                    return;
                }
                self.chunk(v.get("response").unwrap_or(&v), Some(at));
            }
        }

        fn body(&mut self, v: &Value) {
            self.chunk(v.get("response").unwrap_or(v), None);
            self.0.outcome.get_or_insert(Outcome::Success);
        }

        fn chunk(&mut self, r: &Value, at: Option<Duration>) {
            let candidate = &r["candidates"][0];
            if let (Some(at), Some(parts)) = (at, candidate["content"]["parts"].as_array())
                && parts.iter().any(|p| {
                    p["text"].as_str().is_some_and(|t| !t.is_empty()) || p["functionCall"].is_object()
                })
            {
                self.0.first_output.get_or_insert(at);
            }
            let u = &r["usageMetadata"];
            if u.is_object() {
                let output = u["candidatesTokenCount"]
                    .as_i64()
                    .map(|c| c + u["thoughtsTokenCount"].as_i64().unwrap_or(0));
                self.0.usage = Usage {
                    input: u["promptTokenCount"].as_i64(),
                    output,
                    cached: u["cachedContentTokenCount"].as_i64().or(Some(0)),
                };
            }
            if let Some(reason) = candidate["finishReason"].as_str() {
                self.0.outcome = Some(match reason {
                    "STOP" => Outcome::Success,
                    "MAX_TOKENS" => Outcome::Incomplete,
                    other => {
                        self.0.error_code = sanitize(other);
                        Outcome::Error
                    }
                });
            }
        }
    }

    fn told(o: &Observation) -> (Option<Outcome>, Usage, Option<String>, Option<Duration>) {
        (o.outcome, o.usage, o.error_code.clone(), o.first_output)
    }

    #[test]
    fn gemini_reads_what_value_accessors_read() {
        use crate::providers::lenient::tests::faults_in_skipped_members;
        let chunks = [
            r#"{"response":{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"index":0}]},"traceId":"t"}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":""},{"functionCall":{"name":"f","args":{}}}]}}]}"#,
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":5,"thoughtsTokenCount":2,"cachedContentTokenCount":64}}}"#,
            r#"{"response":{"candidates":[{"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":1}}}"#,
            r#"{"response":{"candidates":[{"finishReason":"SAFETY"}]}}"#,
            r#"{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}"#,
            r#"{"error":{"code":500},"response":{"candidates":[{"finishReason":"STOP"}]}}"#,
            r#"{"error":"text","candidates":[{"finishReason":"STOP"}]}"#,
            // only the first candidate counts; parts of other types, or empty, are no output
            r#"{"candidates":[{"content":{"parts":[{"text":""}]}},{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}]}"#,
            r#"{"candidates":[7,{"finishReason":"STOP"}]}"#,
            r#"{"candidates":[],"usageMetadata":[]}"#,
            r#"{"candidates":{"0":{"finishReason":"STOP"}}}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":7},{"functionCall":[]},null,"x",{"functionCall":"f"}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":{"text":"x"}}}]}"#,
            r#"{"candidates":[{"content":[{"parts":[{"text":"x"}]}],"finishReason":7}]}"#,
            // a response that is there but not an object hides the top level's chunk
            r#"{"response":null,"candidates":[{"finishReason":"STOP"}]}"#,
            r#"{"response":[1],"usageMetadata":{"promptTokenCount":3}}"#,
            // numbers of the wrong kind, and usage fields of the wrong type
            r#"{"usageMetadata":{"promptTokenCount":1.5,"candidatesTokenCount":"5","thoughtsTokenCount":2,"cachedContentTokenCount":null}}"#,
            r#"{"usageMetadata":{"promptTokenCount":9223372036854775808,"candidatesTokenCount":-3}}"#,
            r#"{"usageMetadata":{"candidatesTokenCount":4,"thoughtsTokenCount":[1]}}"#,
            // keys given twice keep their last value; escaped keys and values read as meant
            r#"{"response":{"candidates":[{"finishReason":"STOP"}]},"response":{"candidates":[{"finishReason":"OTHER"}]}}"#,
            r#"{"candidates":[{"finishReason":"STOP","finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":1},"usageMetadata":7}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"H"}]},"finishReason":"MAX_TOKENS"}]}"#,
            r#"{"error":{"status":"RESOURCE_EXHAUSTED"}}"#,
            r#"{"error":{"status":7}}"#,
            // not an object, not JSON, empty
            r#"[{"candidates":[{"finishReason":"STOP"}]}]"#,
            r#""STOP""#,
            r#"{"candidates":[{"finishReason":"STOP"}]"#,
            "",
            "{}",
        ];
        // a fault only a check finds, in a member the observer skips: the chunk is no JSON
        let finished =
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP""#;
        let faults: Vec<String> = faults_in_skipped_members(finished)
            .into_iter()
            .map(|c| format!("{c}]}}}}"))
            .chain(faults_in_skipped_members(r#"{"usageMetadata":{"promptTokenCount":1}"#))
            .collect();
        let chunks: Vec<&str> = chunks.into_iter().chain(faults.iter().map(String::as_str)).collect();
        for (i, data) in chunks.iter().enumerate() {
            let at = MS * (i as u32 + 1);
            let (mut typed, mut oracle) = (Observer::new(Grammar::Gemini), GeminiByValue::default());
            typed.event(None, data, at);
            oracle.event(data, at);
            assert_eq!(told(&typed.seen), told(&oracle.0), "event {data}");
            // as a whole answer, from its bytes and from its parsed value
            let (mut bytes, mut value, mut oracle) =
                (Observer::new(Grammar::Gemini), Observer::new(Grammar::Gemini), GeminiByValue::default());
            bytes.json(data.as_bytes());
            if let Ok(v) = serde_json::from_str::<Value>(data) {
                value.body(&v);
                oracle.body(&v);
            }
            assert_eq!(told(&bytes.seen), told(&oracle.0), "answer {data}");
            assert_eq!(told(&value.seen), told(&oracle.0), "parsed answer {data}");
        }
        // one stream of them all, in order and backwards: what accumulates agrees too
        for order in [chunks.clone(), chunks.iter().rev().copied().collect()] {
            let (mut typed, mut oracle) = (Observer::new(Grammar::Gemini), GeminiByValue::default());
            for (i, data) in order.iter().enumerate() {
                typed.event(None, data, MS * (i as u32 + 1));
                oracle.event(data, MS * (i as u32 + 1));
            }
            assert_eq!(told(&typed.seen), told(&oracle.0));
        }
    }

    #[test]
    fn an_answer_that_is_not_an_object_tells_nothing() {
        for text in ["", "not json", "[]", "null", "\"completed\""] {
            let mut o = Observer::new(Grammar::Responses);
            o.json(text.as_bytes());
            assert_eq!((o.seen.outcome, o.seen.usage), (None, Usage::default()), "{text}");
        }
        // a parsed array is not read field by position
        let mut o = Observer::new(Grammar::Responses);
        o.body(&serde_json::json!(["failed", {"input_tokens": 1}, {"code": "x"}]));
        assert_eq!(
            (o.seen.outcome, o.seen.usage, o.seen.error_code),
            (Some(Outcome::Success), Usage::default(), None)
        );
    }

    #[test]
    fn sanitize_keeps_codes_plain() {
        assert_eq!(sanitize("Rate Limit!<script>").as_deref(), Some("ratelimitscript"));
        assert_eq!(sanitize("%%%"), None);
    }
}
