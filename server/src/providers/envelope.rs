//! The v1internal envelope of Antigravity's Cloud Code Assist (protocols.md §5): a Gemini request
//! goes up inside `{"project", "requestId", "userAgent", "requestType", "model", "request"}`, and
//! each answer or stream event comes back as `{"response": ..., "traceId"}`.
//!
//! Both directions work on the text where they can. The client's request goes into the envelope
//! as it was written (checked to be JSON, not rebuilt), and the inner response is cut out of an
//! answer or event rather than parsed into a document and written out again. A Gemini client's
//! request carries its whole conversation, and every streamed event passed through a document.

use std::borrow::Cow;

use axum::body::Bytes;
use serde::{
    Deserialize, Deserializer, Serialize,
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
};
use serde_json::{Value, value::RawValue};

use super::lenient::Known;

/// The envelope around a request, in the member order Antigravity's own clients send.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a, R> {
    project: &'a str,
    request_id: String,
    user_agent: &'static str,
    request_type: &'static str,
    model: &'a str,
    request: R,
}

fn write<R: Serialize>(
    request: R,
    project: &str,
    model: &str,
    request_id: &str,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Envelope {
        project,
        request_id: format!("agent-{request_id}"),
        user_agent: "antigravity",
        request_type: "agent",
        model,
        request,
    })
}

/// A Gemini request body in the envelope; `None` when the body is not JSON. The body goes in as
/// the client wrote it, unless the model names a thinking suffix, which edits the request.
pub fn wrap_envelope(body: &[u8], project: &str, model: &str, request_id: &str) -> Option<Vec<u8>> {
    if thinking_suffix(model).1.is_some() {
        let request: Value = serde_json::from_slice(body).ok()?;
        return envelope(request, project, model, request_id).ok();
    }
    let request: &RawValue = serde_json::from_slice(body).ok()?;
    write(request, project, model, request_id).ok()
}

/// A Gemini request value (a translated Chat Completions call, a request to edit, the admin's
/// test call) in the envelope, written out.
pub fn envelope(
    mut request: Value,
    project: &str,
    model: &str,
    request_id: &str,
) -> serde_json::Result<Vec<u8>> {
    let (model, thinking) = thinking_suffix(model);
    // An SDK thinking-level suffix (`model(high)`, `model(16384)`) is no model id upstream: it
    // becomes the request's thinking setting, unless the client set one itself (QT-4).
    if let Some(level) = thinking
        && request.is_object()
    {
        let config = &mut request["generationConfig"];
        if config.is_null() {
            *config = serde_json::json!({});
        }
        if config.is_object() && config["thinkingConfig"].is_null() {
            config["thinkingConfig"] = match level.parse::<u64>() {
                Ok(budget) => serde_json::json!({"includeThoughts": true, "thinkingBudget": budget}),
                Err(_) => serde_json::json!({"includeThoughts": true, "thinkingLevel": level}),
            };
        }
    }
    write(&request, project, model, request_id)
}

/// A model id with an SDK thinking suffix split in two: `gemini-3.1-pro-low(high)` is
/// `gemini-3.1-pro-low` at level `high`; `claude-opus-4-6-thinking(16384)` a budget of 16384.
/// Only the levels Gemini knows and plain budgets count; anything else stays part of the id.
pub fn thinking_suffix(model: &str) -> (&str, Option<&str>) {
    let base = crate::quota::observation::base_model(model);
    if base.len() == model.len() {
        return (model, None);
    }
    let level = model[base.len()..].trim().trim_start_matches('(').trim_end_matches(')').trim();
    let known = matches!(level, "minimal" | "low" | "medium" | "high")
        || (!level.is_empty() && level.len() <= 7 && level.bytes().all(|b| b.is_ascii_digit()));
    if known { (base, Some(level)) } else { (model, None) }
}

/// The text of the `response` member of an answer or event in the envelope, as written
/// (whatever its value, `null` included; given twice, the last, as in a document), or `None`
/// for JSON with no such member or no object. Every value is passed over for its syntax only
/// (`RawValue`, serde's `IgnoredAny`): the envelope's reader drops only text that is no JSON,
/// and what the upstream wrote in a value, a number past `f64` or a lone surrogate, is the
/// client's to judge. (The readers held to the document path skip with `lenient::Skip` instead.)
struct Wrapped<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Wrapped<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Wrapped<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Wrapped<'de>, A::Error> {
                let mut response = None;
                while let Some(key) = map.next_key_seed(Known(&["response"]))? {
                    match key {
                        Some(_) => response = Some(map.next_value::<&RawValue>()?),
                        None => _ = map.next_value::<IgnoredAny>()?,
                    }
                }
                Ok(Wrapped(response))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Wrapped<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Wrapped(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Wrapped<'de>, E> {
                Ok(Wrapped(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Wrapped<'de>, E> {
                Ok(Wrapped(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Wrapped<'de>, E> {
                Ok(Wrapped(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Wrapped<'de>, E> {
                Ok(Wrapped(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Wrapped<'de>, E> {
                Ok(Wrapped(None))
            }
            fn visit_unit<E>(self) -> Result<Wrapped<'de>, E> {
                Ok(Wrapped(None))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// The `response` of JSON `text`, as written: `Ok(None)` when it has none (or is no object),
/// `Err` when the text is not JSON.
fn inner(text: &[u8]) -> serde_json::Result<Option<&RawValue>> {
    serde_json::from_slice::<Wrapped<'_>>(text).map(|w| w.0)
}

/// The `data` a stream event in the envelope becomes: its inner `response` (an event without
/// one as it came), on one line; `None` for data that is not JSON (the event is dropped).
pub fn unwrap_envelope(data: &str) -> Option<Cow<'_, str>> {
    match inner(data.as_bytes()) {
        Err(_) => None,
        Ok(None) => Some(one_line(data)),
        Ok(Some(r)) => Some(one_line(r.get())),
    }
}

/// JSON `text` on one line. Gemini's own streams carry each event on one `data:` line, and
/// google-genai's clients parse each `data:` line as a document of its own: the relay writes
/// data over several lines as a field per line (valid SSE), but such a client fails on it. A
/// line break in JSON text can only be whitespace between tokens (a string holds none
/// unescaped), so a space in its place keeps the document and every byte of its values.
///
/// The Python client splits lines as `str.splitlines` does, also at U+0085, U+2028 and U+2029,
/// which JSON allows raw inside a string (and only there): those are written as `\u` escapes,
/// the same string to any JSON reader.
fn one_line(text: &str) -> Cow<'_, str> {
    const BREAKS: [char; 5] = ['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'];
    // A byte scan first (CR, LF, and the first byte of each of the others' UTF-8), as most
    // events hold none.
    if !text.bytes().any(|b| matches!(b, b'\n' | b'\r' | 0xC2 | 0xE2)) || !text.contains(BREAKS) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            '\u{85}' => out.push_str("\\u0085"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A whole answer's inner `response`, cut out of `answer` without a copy; `None` when the answer
/// has none or is not JSON (it then goes to the client as it came).
pub fn answer_in_envelope(answer: &Bytes) -> Option<Bytes> {
    let r = inner(answer).ok()??;
    Some(answer.slice_ref(r.get().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn antigravity_envelope_round_trip() {
        let wrapped = wrap_envelope(
            br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            "proj-1",
            "gemini-3.1-pro-low",
            "req_1",
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&wrapped).unwrap();
        assert_eq!(v["project"], "proj-1");
        assert_eq!(v["model"], "gemini-3.1-pro-low");
        assert_eq!(v["request"]["contents"][0]["parts"][0]["text"], "hi");
        assert_eq!(
            unwrap_envelope(r#"{"response":{"candidates":[]},"traceId":"t"}"#).unwrap(),
            r#"{"candidates":[]}"#
        );
        assert_eq!(unwrap_envelope(r#"{"candidates":[]}"#).unwrap(), r#"{"candidates":[]}"#);
    }

    #[test]
    fn a_thinking_suffix_becomes_the_requests_thinking_setting() {
        let wrap = |model: &str, body: &[u8]| -> serde_json::Value {
            serde_json::from_slice(&wrap_envelope(body, "p", model, "r").unwrap()).unwrap()
        };
        let plain = br#"{"contents":[]}"#;
        let v = wrap("gemini-3.1-pro-low(high)", plain);
        assert_eq!(v["model"], "gemini-3.1-pro-low");
        assert_eq!(v["request"]["generationConfig"]["thinkingConfig"]["thinkingLevel"], "high");
        let v = wrap("claude-opus-4-6-thinking(16384)", plain);
        assert_eq!(v["model"], "claude-opus-4-6-thinking");
        assert_eq!(v["request"]["generationConfig"]["thinkingConfig"]["thinkingBudget"], 16384);
        // the client's own setting wins; an unknown suffix is part of the id
        let own = br#"{"contents":[],"generationConfig":{"thinkingConfig":{"thinkingBudget":1}}}"#;
        let v = wrap("gemini-3.1-pro-low(high)", own);
        assert_eq!(
            v["request"]["generationConfig"]["thinkingConfig"],
            serde_json::json!({"thinkingBudget": 1})
        );
        assert_eq!(wrap("odd(model)", plain)["model"], "odd(model)");
        assert_eq!(thinking_suffix("gemini-3.1-pro-low"), ("gemini-3.1-pro-low", None));
    }

    /// The envelope as it was written before: the request parsed and written out inside a
    /// document (the oracle for what `wrap_envelope` means).
    fn wrapped_by_value(body: &[u8], project: &str, model: &str, id: &str) -> Option<Value> {
        let request: Value = serde_json::from_slice(body).ok()?;
        Some(serde_json::json!({"project": project, "requestId": format!("agent-{id}"),
            "userAgent": "antigravity", "requestType": "agent", "model": model, "request": request}))
    }

    #[test]
    fn a_request_goes_into_the_envelope_as_the_client_wrote_it() {
        let bodies: [&[u8]; 8] = [
            br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            b" {\n  \"contents\": [],\n  \"generationConfig\": {\"temperature\": 1.0}\n}\n",
            br#"{"contents":[{"parts":[{"text":"\u00e9t\u00e9 \"quoted\" \\ </script>"}]}],"z":1,"a":2}"#,
            br#"{"a":1,"a":2}"#,
            br#"[1,2]"#,
            br#""just text""#,
            br#"{"n":12345678901234567890123,"f":1.0e-7}"#,
            br#"{}"#,
        ];
        for body in bodies {
            let wrapped = wrap_envelope(body, "proj \"1\"", "gemini-3.1-pro-low", "req_1").unwrap();
            let text = std::str::from_utf8(&wrapped).unwrap();
            // the client's text, as written (only the whitespace around it left out)
            let trimmed = std::str::from_utf8(body).unwrap().trim();
            assert!(text.ends_with(&format!(",\"request\":{trimmed}}}")), "{text}");
            assert!(text.starts_with(r#"{"project":"proj \"1\"","requestId":"agent-req_1","userAgent":"antigravity","requestType":"agent","model":"gemini-3.1-pro-low","#), "{text}");
            // and, read as JSON, what the document round trip wrote (a key given twice aside)
            if body != br#"{"a":1,"a":2}"# && body != br#"{"n":12345678901234567890123,"f":1.0e-7}"# {
                let v: Value = serde_json::from_slice(&wrapped).unwrap();
                assert_eq!(Some(v), wrapped_by_value(body, "proj \"1\"", "gemini-3.1-pro-low", "req_1"));
            }
        }
        for not_json in [&b"{"[..], b"", b"{\"a\":1} x", b"\xff", b"{\"a\":\"\xff\"}"] {
            assert_eq!(wrap_envelope(not_json, "p", "m", "r"), None, "{not_json:?}");
        }
    }

    /// Unwrapping as it was done before: the event parsed, its `response` written out again.
    fn unwrapped_by_value(data: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(data).ok()?;
        match v.get_mut("response") {
            Some(inner) => serde_json::to_string(&inner.take()).ok(),
            None => Some(data.to_owned()),
        }
    }

    #[test]
    fn the_inner_response_is_cut_out_as_written() {
        let events = [
            r#"{"response":{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"modelVersion":"m"},"traceId":"t"}"#,
            r#"{"traceId":"t","response":{"z":1,"a":[1,2,{"b":null}]}}"#,
            r#"{"response":{"text":"\u00e9\n\"q\""}}"#,
            r#"{"response":null}"#,
            r#"{"response":"text"}"#,
            r#"{"response":{"a":1},"response":{"b":2}}"#,
            r#"{"resp\u006fnse":{"escaped":"key"}}"#,
            r#"{"nested":{"response":{"x":1}}}"#,
            r#"{"candidates":[]}"#,
            r#"[{"response":{"x":1}}]"#,
            r#""response""#,
            "{\"response\": {\n  \"a\": 1,\n  \"b\": [1, 2]\n}\r\n}",
            r#"{"response":{"x":1}"#,
            "",
        ];
        for data in events {
            let ours = unwrap_envelope(data);
            let before = unwrapped_by_value(data);
            assert_eq!(ours.is_some(), before.is_some(), "{data}");
            let (Some(ours), Some(before)) = (ours, before) else { continue };
            assert!(!ours.contains(['\n', '\r']), "one line: {ours}");
            // the same JSON as before (as text too, where the upstream wrote it compactly)
            let parse = |s: &str| serde_json::from_str::<Value>(s).ok();
            assert_eq!(parse(&ours), parse(&before), "{data}");
            if parse(&before).is_some_and(|v| v.is_object()) && !data.contains('\n') {
                assert!(data.contains(&*ours), "cut from the event's text: {ours}");
            }
        }
        // on one line, whatever the upstream wrote: an event without a response too
        let pretty = "{\n  \"error\": {\"code\": 429}\r\n}";
        assert_eq!(unwrap_envelope(pretty).as_deref(), Some("{   \"error\": {\"code\": 429}  }"));
        // the response is passed as written: its values are the upstream's to judge (a number
        // past f64 is JSON, and Python and JavaScript clients read it), where the document path
        // dropped the event
        let huge = "{\"response\": {\"n\": 1e400,\n\"a\": 1}}";
        assert_eq!(unwrap_envelope(huge).as_deref(), Some("{\"n\": 1e400, \"a\": 1}"));
        // what Python's line splitting also breaks at, inside a string, is escaped: the same text
        let python = "{\"response\": {\"t\": \"a\u{85}b\u{2028}c\u{2029}d\u{2027}\"}}";
        let escaped = unwrap_envelope(python).unwrap();
        assert_eq!(escaped, "{\"t\": \"a\\u0085b\\u2028c\\u2029d\u{2027}\"}");
        assert_eq!(escaped.lines().count(), 1);
        let t: Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(t["t"], "a\u{85}b\u{2028}c\u{2029}d\u{2027}");
        // faults outside the response are the upstream's to judge too: the response is cut out
        for data in [r#"{"response":{"a":1},"traceId":"\ud800"}"#, r#"{"traceId":1e400,"response":{"a":1}}"#]
        {
            assert_eq!(unwrap_envelope(data).as_deref(), Some(r#"{"a":1}"#), "{data}");
            let answer = Bytes::copy_from_slice(data.as_bytes());
            assert_eq!(answer_in_envelope(&answer).as_deref(), Some(&br#"{"a":1}"#[..]), "{data}");
        }
        assert_eq!(unwrap_envelope("[1e400,\n2]").as_deref(), Some("[1e400, 2]"));
        // a line break inside a string is no JSON (so one outside is only whitespace)
        assert_eq!(unwrap_envelope("{\"response\": {\"t\": \"a\nb\"}}"), None);
        assert_eq!(unwrap_envelope("{\"response\": {\"t\": \"a\rb\"}}"), None);
        // an answer's response is a slice of the answer itself
        let answer = Bytes::from_static(br#"{"response":{"candidates":[]},"traceId":"t"}"#);
        let inner = answer_in_envelope(&answer).unwrap();
        assert_eq!(&inner[..], br#"{"candidates":[]}"#);
        assert_eq!(inner.as_ptr(), answer[12..].as_ptr());
        assert_eq!(answer_in_envelope(&Bytes::from_static(br#"{"candidates":[]}"#)), None);
        assert_eq!(answer_in_envelope(&Bytes::from_static(b"not json")), None);
    }
}
