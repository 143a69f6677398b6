//! Watching a model answer go by: usage (input, cached, output tokens), the moment of first output
//! (REC-7), and how it ended (REC-8), for each protocol's stream events and JSON bodies.
//!
//! Only terminal events and the first delta are parsed as JSON; other events are recognised by
//! name, so watching costs little per event.

use std::time::Duration;

use serde_json::Value;

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
                if let Ok(v) = serde_json::from_str::<Value>(data) {
                    if v["error"].is_object() {
                        // an error sent inside the stream ends it
                        self.seen.outcome = Some(Outcome::Error);
                        let status = v["error"]["status"].as_str().unwrap_or("stream_error");
                        self.seen.error_code = sanitize(&status.to_ascii_lowercase());
                        return;
                    }
                    self.gemini_chunk(v.get("response").unwrap_or(&v), Some(at));
                }
            }
        }
    }

    /// A complete non-streaming JSON answer.
    pub fn body(&mut self, body: &Value) {
        match self.grammar {
            Grammar::Responses => self.responses_final(body),
            Grammar::Gemini => {
                self.gemini_chunk(body.get("response").unwrap_or(body), None);
                if self.seen.outcome.is_none() {
                    self.seen.outcome = Some(Outcome::Success);
                }
            }
            Grammar::Messages => {
                self.anthropic_usage(&body["usage"]);
                self.seen.outcome = Some(match body["stop_reason"].as_str() {
                    Some("max_tokens") => Outcome::Incomplete,
                    _ => Outcome::Success,
                });
            }
        }
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
                    self.responses_final(&response);
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

    fn responses_final(&mut self, r: &Value) {
        let u = &r["usage"];
        if u.is_object() {
            self.seen.usage = Usage {
                input: u["input_tokens"].as_i64(),
                output: u["output_tokens"].as_i64(),
                cached: u["input_tokens_details"]["cached_tokens"].as_i64(),
            };
        }
        self.seen.outcome = Some(match r["status"].as_str() {
            Some("completed") => Outcome::Success,
            Some("incomplete") => Outcome::Incomplete,
            Some("failed") | Some("cancelled") => {
                self.seen.error_code = sanitize(r["error"]["code"].as_str().unwrap_or("response_failed"));
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
                self.anthropic_usage(&v["message"]["usage"]);
            }
            "message_delta" => {
                let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                self.anthropic_usage(&v["usage"]);
                if v["delta"]["stop_reason"].as_str() == Some("max_tokens") {
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

    /// One Gemini chunk: text or a function call is output; `usageMetadata` is cumulative;
    /// `finishReason` ends the answer (STOP success, MAX_TOKENS incomplete, others errors).
    fn gemini_chunk(&mut self, r: &Value, at: Option<Duration>) {
        let candidate = &r["candidates"][0];
        if let (Some(at), Some(parts)) = (at, candidate["content"]["parts"].as_array())
            && parts
                .iter()
                .any(|p| p["text"].as_str().is_some_and(|t| !t.is_empty()) || p["functionCall"].is_object())
        {
            self.first_output(at);
        }
        let u = &r["usageMetadata"];
        if u.is_object() {
            let output =
                u["candidatesTokenCount"].as_i64().map(|c| c + u["thoughtsTokenCount"].as_i64().unwrap_or(0));
            self.seen.usage = Usage {
                input: u["promptTokenCount"].as_i64(),
                output,
                cached: u["cachedContentTokenCount"].as_i64().or(Some(0)),
            };
        }
        if let Some(reason) = candidate["finishReason"].as_str() {
            self.seen.outcome = Some(match reason {
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
    fn anthropic_usage(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        if let Some(v) = u["input_tokens"].as_i64() {
            self.fresh_input = Some(v);
        }
        if let Some(v) = u["cache_read_input_tokens"].as_i64() {
            self.cache_read = Some(v);
        }
        if let Some(v) = u["cache_creation_input_tokens"].as_i64() {
            self.cache_creation = Some(v);
        }
        if let Some(v) = u["output_tokens"].as_i64() {
            self.seen.usage.output = Some(v);
        }
        self.seen.usage.input =
            self.fresh_input.map(|i| i + self.cache_read.unwrap_or(0) + self.cache_creation.unwrap_or(0));
        self.seen.usage.cached = self.cache_read;
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

    #[test]
    fn sanitize_keeps_codes_plain() {
        assert_eq!(sanitize("Rate Limit!<script>").as_deref(), Some("ratelimitscript"));
        assert_eq!(sanitize("%%%"), None);
    }
}
