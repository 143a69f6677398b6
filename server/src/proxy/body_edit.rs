//! The few edits a provider needs in a client's JSON body (the upstream model's name, `stream`,
//! `store`), made on the body's text: its top-level members are read with each value as raw
//! text (nothing is built for the values), and the body is written again with every other value
//! byte for byte, in the client's order, and the edited members after them.
//!
//! A call's body can be a whole conversation (hundreds of KB for a long Codex session). Parsed
//! into a document and written out again, every string of it was allocated, copied and escaped
//! once more for three small fields, its keys sorted and its numbers rounded to `f64`.
//!
//! Only the top level is read: what the values hold goes upstream as the client wrote it, as it
//! does when no edit is needed (the routing fields were read, and checked, before).

use std::borrow::Cow;

use axum::body::Bytes;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::error::GatewayError;

/// What a call's body must say; `None`/`false` leaves that member as the client sent it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Edits<'a> {
    /// The upstream's name for the model, when it differs from the client's.
    pub model: Option<&'a str>,
    /// `"stream": true` (a streaming-only upstream).
    pub stream: bool,
    /// `"store": false` (an upstream that refuses stored responses).
    pub no_store: bool,
}

impl Edits<'_> {
    fn any(&self) -> bool {
        self.model.is_some() || self.stream || self.no_store
    }

    /// The text each edited member must have, by name.
    fn wanted(&self) -> [(&'static str, Option<String>); 3] {
        [
            ("model", self.model.map(|m| serde_json::Value::from(m).to_string())),
            ("stream", self.stream.then(|| "true".to_owned())),
            ("store", self.no_store.then(|| "false".to_owned())),
        ]
    }
}

/// `body` with `edits` made (the same bytes when there are none).
pub fn edit(body: Bytes, edits: Edits<'_>) -> Result<Bytes, GatewayError> {
    if !edits.any() {
        return Ok(body);
    }
    let Members(members) = Members::of(&body).map_err(|e| match e {
        Unreadable::NotAnObject => GatewayError::bad_request("the body must be a JSON object"),
        Unreadable::NotJson => GatewayError::bad_request("invalid JSON body"),
    })?;
    let wanted = edits.wanted();
    let edited = |key: &str| wanted.iter().any(|(name, text)| text.is_some() && *name == key);
    // The other members as they came, then the edited ones (a name given twice is given once,
    // as a parsed document had it).
    let mut out = Vec::with_capacity(body.len() + 64);
    out.push(b'{');
    let kept = members.iter().filter(|(key, _)| !edited(key)).map(|(key, raw)| (key.as_ref(), raw.get()));
    let set = wanted.iter().filter_map(|(name, text)| Some((*name, text.as_deref()?)));
    for (i, (key, value)) in kept.chain(set).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(serde_json::Value::from(key).to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
    out.push(b'}');
    Ok(Bytes::from(out))
}

/// A JSON object's members in their order, each value as its raw text.
pub struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

/// Why a text has no members to read.
#[derive(Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// JSON, but not an object.
    NotAnObject,
    /// Not JSON (or an object with text that is not UTF-8 in a value).
    NotJson,
}

impl<'a> Members<'a> {
    /// The top-level members of a JSON object.
    pub fn of(text: &'a [u8]) -> Result<Self, Unreadable> {
        serde_json::from_slice(text).map_err(|_| {
            let object = text.trim_ascii_start().starts_with(b"{");
            if !object && serde_json::from_slice::<IgnoredAny>(text).is_ok() {
                Unreadable::NotAnObject
            } else {
                Unreadable::NotJson
            }
        })
    }

    /// The value of member `name` as raw text: the last one, as a parsed document keeps it.
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.0.iter().rev().find(|(key, _)| key == name).map(|(_, raw)| raw.get())
    }

    /// The first of `names` that is given more than once.
    pub fn repeated<'n>(&self, names: &[&'n str]) -> Option<&'n str> {
        names.iter().copied().find(|name| self.0.iter().filter(|(key, _)| key == name).nth(1).is_some())
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(member) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn edited(body: &str, edits: Edits<'_>) -> Bytes {
        edit(Bytes::copy_from_slice(body.as_bytes()), edits).unwrap()
    }

    const ALL: Edits<'static> = Edits { model: Some("gpt-5.1-codex"), stream: true, no_store: true };

    #[test]
    fn without_edits_the_body_is_the_same_bytes() {
        let raw = Bytes::from_static(br#"{"model":"fast",  "stream":false}"#);
        assert_eq!(edit(raw.clone(), Edits::default()).unwrap(), raw);
    }

    #[test]
    fn edits_change_only_their_members_and_keep_the_rest_byte_for_byte() {
        let body =
            r#"{"model":"fast","input":[{"role":"user","content":"h\u00e9\"llo"}],"stream":false,"n":1.50}"#;
        let out = edited(body, ALL);
        let text = std::str::from_utf8(&out).unwrap();
        assert_eq!(
            text,
            r#"{"input":[{"role":"user","content":"h\u00e9\"llo"}],"n":1.50,"model":"gpt-5.1-codex","stream":true,"store":false}"#
        );
        // only what was asked
        let only_store =
            edited(r#"{"model":"fast","stream":false}"#, Edits { no_store: true, ..Edits::default() });
        assert_eq!(&only_store[..], br#"{"model":"fast","stream":false,"store":false}"#);
    }

    #[test]
    fn the_result_is_the_document_a_parsed_edit_gave() {
        // the oracle: the body parsed whole, the members set, written out (the edit before this one)
        let by_value = |body: &str, e: Edits<'_>| {
            let mut v: Value = serde_json::from_str(body).unwrap();
            let obj = v.as_object_mut().unwrap();
            if let Some(m) = e.model {
                obj.insert("model".into(), json!(m));
            }
            if e.stream {
                obj.insert("stream".into(), json!(true));
            }
            if e.no_store {
                obj.insert("store".into(), json!(false));
            }
            v
        };
        let bodies = [
            r#"{}"#,
            r#"{"model":"a"}"#,
            r#"{"stream":true,"stream":false}"#,
            r#"{"store":false,"store":false,"model":"gpt-5.1-codex"}"#,
            r#"{"mod\u0065l":"x","input":"y","stream":null,"store":"no"}"#,
            r#"{"tools":[{"type":"function","parameters":{"type":"object","properties":{}}}],"instructions":"\ud83d\ude00"}"#,
        ];
        let edits = [
            ALL,
            Edits { model: Some("m\"x"), ..Edits::default() },
            Edits { stream: true, ..Edits::default() },
            Edits { no_store: true, ..Edits::default() },
        ];
        for body in bodies {
            for e in edits {
                let out: Value = serde_json::from_slice(&edited(body, e)).unwrap();
                assert_eq!(out, by_value(body, e), "{body} with {e:?}");
            }
        }
    }

    #[test]
    fn a_body_that_is_not_a_json_object_is_refused_as_before() {
        for (body, message) in [
            ("[1,2]", "the body must be a JSON object"),
            ("\"x\"", "the body must be a JSON object"),
            ("{\"model\":", "invalid JSON body"),
            ("{} {}", "invalid JSON body"),
            ("", "invalid JSON body"),
        ] {
            let e = edit(Bytes::copy_from_slice(body.as_bytes()), ALL).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.message, message, "{body}");
        }
        // text that is not UTF-8 inside a value (the routing fields' reader skips such values)
        for body in [&b"{\"input\":\"\xff\"}"[..], b" {\"input\":[\"a\xc3\"]}"] {
            let e = edit(Bytes::copy_from_slice(body), ALL).unwrap_err();
            assert_eq!(e.message, "invalid JSON body", "{body:?}");
        }
    }
}
