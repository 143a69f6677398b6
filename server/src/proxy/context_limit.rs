//! An upstream's refusal of a prompt that does not fit the model's context window, recognized by
//! its words and said again in SubLane's (ERR-3: an upstream's message never reaches a client
//! as it came).
//!
//! Why this one refusal gets words of its own: clients act on them. Claude Code compacts the
//! conversation and tries again when a 400 says `prompt is too long: <n> tokens > <m> maximum`,
//! and lowers `max_tokens` when it says `input length and `max_tokens` exceed context limit:
//! <a> + <b> > <c>`; told only `invalid_request_error`, it showed an error the user could not act
//! on. OpenAI clients get the code `context_length_exceeded` (Codex acts on it only in a stream's
//! `response.failed`, which passes as it came; a 400 it shows as it reads). The message SubLane
//! sends is built from the numbers alone, in Anthropic's wording (what the clients that parse
//! it expect), whichever provider refused and whichever protocol the client speaks.

use serde_json::Value;

/// The code a client and the record get for either refusal.
pub(super) const CODE: &str = "context_length_exceeded";

/// Most characters of an upstream message looked at: the phrases come first.
const READ: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContextLimit {
    /// The prompt alone does not fit: its tokens and the model's limit, when the upstream said
    /// them (OpenAI's Responses API does not).
    Prompt { tokens: Option<u64>, limit: Option<u64> },
    /// The prompt and `max_tokens` together do not fit (Anthropic).
    WithOutput { input: u64, max_tokens: u64, limit: u64 },
}

impl ContextLimit {
    /// The refusal in an upstream's 400 error `body`, in any provider's shape, if it is one.
    /// Numbers that do not add up as the words say (a prompt longer than its limit) are left
    /// out: they would be some other number of the message's.
    pub(super) fn recognize(body: &Value) -> Option<ContextLimit> {
        let err = &body["error"];
        let message: String = err["message"].as_str().unwrap_or("").chars().take(READ).collect();
        let message = message.to_ascii_lowercase();
        let after = |phrase: &str| message.find(phrase).map(|at| numbers(&message[at + phrase.len()..]));
        let unnumbered = ContextLimit::Prompt { tokens: None, limit: None };
        let prompt = |tokens: u64, limit: u64| match tokens > limit {
            true => ContextLimit::Prompt { tokens: Some(tokens), limit: Some(limit) },
            false => unnumbered,
        };
        // (an input over the limit by itself is a prompt too long, whatever the output limit)
        let with_output = |input: u64, max_tokens: u64, limit: u64| match input.checked_add(max_tokens) {
            _ if input > limit => prompt(input, limit),
            Some(sum) if sum > limit => ContextLimit::WithOutput { input, max_tokens, limit },
            _ => unnumbered,
        };
        // Anthropic: `input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000`
        if let Some(n) = after("exceed context limit") {
            return Some(match n[..] {
                [input, max_tokens, limit, ..] => with_output(input, max_tokens, limit),
                _ => unnumbered,
            });
        }
        // OpenAI Chat Completions: `This model's maximum context length is 128000 tokens. However,
        // your messages resulted in 130000 tokens.`, or `However, you requested 8500 tokens (7000
        // in the messages, 1500 in the completion).` when the output limit may be what overflows
        // (`..., 217 in the functions, and 783 in the completion)` with tools). GPT-5: `Input
        // tokens exceed the configured limit of 272000 tokens. Your messages resulted in ...`
        for phrase in ["maximum context length is", "exceed the configured limit of"] {
            if let Some(n) = after(phrase) {
                let split = message.contains("in the messages") && message.contains("in the completion");
                let tools = message.contains("in the functions");
                return Some(match n[..] {
                    [limit, _, messages, functions, max_tokens, ..] if split && tools => messages
                        .checked_add(functions)
                        .map_or(unnumbered, |i| with_output(i, max_tokens, limit)),
                    [limit, _, input, max_tokens, ..] if split && !tools => {
                        with_output(input, max_tokens, limit)
                    }
                    [limit, tokens, ..] if !split => prompt(tokens, limit),
                    _ => unnumbered,
                });
            }
        }
        // Anthropic: `prompt is too long: 213462 tokens > 200000 maximum`; Google: `The input
        // token count (1212121) exceeds the maximum number of tokens allowed (1048576).`
        for phrase in ["prompt is too long", "input token count"] {
            if let Some(n) = after(phrase) {
                return Some(match n[..] {
                    [tokens, limit, ..] => prompt(tokens, limit),
                    _ => unnumbered,
                });
            }
        }
        // OpenAI Responses: `Your input exceeds the context window of this model. ...`
        let coded = err["code"].as_str() == Some(CODE) || message.contains("exceeds the context window");
        coded.then_some(unnumbered)
    }

    /// What the client is told: Anthropic's words, with the upstream's numbers.
    pub(super) fn message(self) -> String {
        match self {
            ContextLimit::Prompt { tokens: Some(tokens), limit: Some(limit) } => {
                format!("prompt is too long: {tokens} tokens > {limit} maximum")
            }
            ContextLimit::Prompt { .. } => "prompt is too long for the model's context window".to_owned(),
            ContextLimit::WithOutput { input, max_tokens, limit } => format!(
                "input length and `max_tokens` exceed context limit: {input} + {max_tokens} > {limit}, decrease input length or `max_tokens` and try again"
            ),
        }
    }
}

/// The first five numbers standing as words of their own in `text`: not the digits of a model
/// name (`gemini-1.0-pro-002`) or of an id.
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|word| word.parse().ok())
        .take(5)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn said(message: &str) -> Option<ContextLimit> {
        ContextLimit::recognize(&json!({"error": {"type": "invalid_request_error", "message": message}}))
    }

    #[test]
    fn each_providers_words_are_recognized_with_their_numbers() {
        let prompt = |tokens, limit| Some(ContextLimit::Prompt { tokens: Some(tokens), limit: Some(limit) });
        assert_eq!(said("prompt is too long: 210118 tokens > 200000 maximum"), prompt(210_118, 200_000));
        assert_eq!(
            said("The input token count (1212121) exceeds the maximum number of tokens allowed (1048576)."),
            prompt(1_212_121, 1_048_576)
        );
        assert_eq!(
            said(
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages."
            ),
            prompt(130_532, 128_000),
            "the limit comes first in OpenAI's words"
        );
        assert_eq!(
            said(
                "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"
            ),
            Some(ContextLimit::WithOutput { input: 188_240, max_tokens: 21_333, limit: 200_000 })
        );
        assert_eq!(
            said(
                "This model's maximum context length is 8192 tokens. However, you requested 8500 tokens (7000 in the messages, 1500 in the completion). Please reduce the length of the messages or completion."
            ),
            Some(ContextLimit::WithOutput { input: 7_000, max_tokens: 1_500, limit: 8_192 }),
            "the output limit is what overflows: the client should lower it, not compact"
        );
        assert_eq!(
            said(
                "This model's maximum context length is 16385 tokens. However, you requested 16762 tokens (15762 in the messages, 217 in the functions, and 783 in the completion)."
            ),
            Some(ContextLimit::WithOutput { input: 15_979, max_tokens: 783, limit: 16_385 }),
            "the functions count as input"
        );
        assert_eq!(
            said(
                "This model's maximum context length is 4097 tokens. However, you requested 5360 tokens (4360 in the messages, 1000 in the completion)."
            ),
            prompt(4_360, 4_097),
            "the input alone is over: shortening it is the fix"
        );
        assert_eq!(
            said(
                "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 310000 tokens. Please reduce the length of the messages."
            ),
            prompt(310_000, 272_000)
        );
        let unnumbered = Some(ContextLimit::Prompt { tokens: None, limit: None });
        assert_eq!(said("Prompt is too long"), unnumbered);
        assert_eq!(
            said("The input token count is 40149 but model gemini-1.0-pro-002 only supports up to 32768."),
            Some(ContextLimit::Prompt { tokens: Some(40_149), limit: Some(32_768) }),
            "a model name's digits are not numbers of the message"
        );
        assert_eq!(
            said("prompt is too long: 100 tokens > 200 maximum"),
            unnumbered,
            "numbers that do not add up are left out"
        );
        let responses = json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}});
        assert_eq!(ContextLimit::recognize(&responses), unnumbered);
        assert_eq!(
            ContextLimit::recognize(&json!({"error": {"code": "context_length_exceeded"}})),
            unnumbered
        );
    }

    #[test]
    fn other_refusals_are_not_this_one() {
        for message in [
            "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5",
            "messages.1.content.0.tool_result: unexpected `tool_use_id`",
            "Request exceeds the maximum allowed number of bytes.",
            "",
        ] {
            assert_eq!(said(message), None, "{message}");
        }
        assert_eq!(ContextLimit::recognize(&json!({"error": "invalid_grant"})), None);
        assert_eq!(ContextLimit::recognize(&Value::Null), None);
    }

    #[test]
    fn the_client_is_told_in_anthropics_words_built_from_the_numbers_alone() {
        let told =
            said("prompt is too long: 210118 tokens > 200000 maximum (sk-secret-in-a-message)").unwrap();
        assert_eq!(told.message(), "prompt is too long: 210118 tokens > 200000 maximum");
        let told =
            said("input length and `max_tokens` exceed context limit: 2 + 2 > 3, user@example.com").unwrap();
        assert_eq!(
            told.message(),
            "input length and `max_tokens` exceed context limit: 2 + 2 > 3, decrease input length or `max_tokens` and try again"
        );
        let told = said("Your input exceeds the context window of this model.").unwrap();
        assert_eq!(told.message(), "prompt is too long for the model's context window");
    }
}
