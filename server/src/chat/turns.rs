//! A Chat Completions `messages` list read once, checked, in the terms every translation shares:
//! the system text, then user turns, assistant turns (text and tool calls) and tool results, each
//! with the path of the message it came from for errors. Each upstream's translation only says
//! how these become its own items.

use serde_json::Value;

use super::ChatError;

/// One tool call an assistant message made.
#[derive(Debug)]
pub struct Call<'a> {
    pub id: &'a str,
    pub name: &'a str,
    /// The arguments as the client sent them (a JSON text).
    pub arguments: &'a str,
    /// `messages[i].tool_calls[j]`, for errors.
    at: String,
}

impl Call<'_> {
    /// The arguments as a JSON object (an empty text is `{}`), or a 400 naming them.
    pub fn object(&self) -> Result<Value, ChatError> {
        let text = if self.arguments.trim().is_empty() { "{}" } else { self.arguments };
        serde_json::from_str::<Value>(text).ok().filter(Value::is_object).ok_or_else(|| {
            ChatError::new(&format!("{}.function.arguments", self.at), "arguments must be a JSON object")
        })
    }
}

/// One message after the system ones.
#[derive(Debug)]
pub enum Turn<'a> {
    /// A user message's `content` (a string or parts) and its index.
    User { content: &'a Value, index: usize },
    /// An assistant message: its text (if any), its refusal (if any), its tool calls.
    Assistant { text: Option<String>, refusal: Option<&'a str>, calls: Vec<Call<'a>> },
    /// A tool result: the call it answers (`name` when an earlier call had that id) and its text.
    Tool { id: &'a str, name: Option<&'a str>, content: String, index: usize },
}

/// A messages list: system and developer messages joined (by a blank line, in order) and the
/// other turns in order.
#[derive(Debug)]
pub struct Conversation<'a> {
    pub system: Option<String>,
    pub turns: Vec<Turn<'a>>,
}

/// Reads `messages`: a non-empty array of messages with known roles.
pub fn read(value: &Value) -> Result<Conversation<'_>, ChatError> {
    let list = value
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| ChatError::new("messages", "messages must be a non-empty array"))?;
    let mut system: Vec<String> = Vec::new();
    let mut turns = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = |f: &str| format!("messages[{i}].{f}");
        match m["role"].as_str() {
            Some("system" | "developer") => {
                system.push(text_of(&m["content"]).ok_or_else(|| {
                    ChatError::new(&at("content"), "a system or developer message holds text")
                })?)
            }
            Some("user") => turns.push(Turn::User { content: &m["content"], index: i }),
            Some("assistant") => {
                let mut calls = Vec::new();
                for (j, call) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
                    let f = &call["function"];
                    let (Some(id), Some(name)) = (call["id"].as_str(), f["name"].as_str()) else {
                        return Err(ChatError::new(
                            &at(&format!("tool_calls[{j}]")),
                            "a tool call needs an id and a function name",
                        ));
                    };
                    let arguments = f["arguments"].as_str().unwrap_or("{}");
                    calls.push(Call { id, name, arguments, at: at(&format!("tool_calls[{j}]")) });
                }
                let text = text_of(&m["content"]).filter(|t| !t.is_empty());
                turns.push(Turn::Assistant { text, refusal: m["refusal"].as_str(), calls });
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().ok_or_else(|| {
                    ChatError::new(&at("tool_call_id"), "a tool message names its tool_call_id")
                })?;
                let name = turns.iter().rev().find_map(|t| match t {
                    Turn::Assistant { calls, .. } => calls.iter().find(|c| c.id == id).map(|c| c.name),
                    _ => None,
                });
                let content = text_of(&m["content"]).unwrap_or_default();
                turns.push(Turn::Tool { id, name, content, index: i });
            }
            other => {
                return Err(ChatError::new(&at("role"), format!("unknown role {:?}", other.unwrap_or(""))));
            }
        }
    }
    Ok(Conversation { system: (!system.is_empty()).then(|| system.join("\n\n")), turns })
}

/// A message's text: a string, or the text parts of an array joined.
pub fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            Some(parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""))
        }
        Value::Null => Some(String::new()),
        _ => None,
    }
}

/// Items by role, consecutive items of one role merged into one turn (Messages and Gemini want
/// alternating turns).
pub fn merged(
    items: impl IntoIterator<Item = (&'static str, Vec<Value>)>,
) -> Vec<(&'static str, Vec<Value>)> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (role, parts) in items {
        match turns.last_mut() {
            Some((r, content)) if *r == role => content.extend(parts),
            _ if parts.is_empty() => {}
            _ => turns.push((role, parts)),
        }
    }
    turns
}
