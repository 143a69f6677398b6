//! Upstream providers (a closed set): where each model operation goes, how it authenticates, which
//! client headers pass through, and the few body edits a provider requires.
//!
//! Header policy: an allow-list, one value per header. Client credentials (`authorization`,
//! `x-api-key`, `x-goog-api-key`), cookies, hop-by-hop headers (RFC 9110 §7.6.1), forwarding
//! headers that would reveal client IPs, `content-type`/`content-length`/`content-encoding` (the
//! gateway sends its own JSON body and sets them once), and every header that selects a billing
//! entity upstream (`OpenAI-Organization`, `OpenAI-Project`: with them a member could bill another
//! organization, or make an account answer 401 and get it paused for everyone) never pass.
//! Session and client metadata headers do (`session-id`/`session_id`, `thread-id`, `x-codex-*`,
//! `x-openai-*`, `anthropic-beta`, `anthropic-version`, ...); a client's repeated list header
//! (`anthropic-beta`) is joined into one line. Query parameters pass only where the upstream route
//! defines them (`beta` on Anthropic's Messages).

mod envelope;
pub mod identity;
pub(crate) mod lenient;
pub mod observe;
pub mod sse;

use crate::header_names::{ANTHROPIC_BETA, ANTHROPIC_VERSION, CHATGPT_ACCOUNT_ID, X_API_KEY};
use app::model::{CredentialInput, Provider};
use axum::http::{HeaderMap, HeaderValue};

use crate::config::UpstreamUrls;
pub use envelope::{answer_in_envelope, envelope, thinking_suffix, unwrap_envelope, wrap_envelope};
pub use observe::{Grammar, Observation, Observer};

/// A model operation as the client asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Responses,
    ResponsesCompact,
    /// OpenAI Chat Completions, translated to Responses (BEY-3).
    ChatCompletions,
    Messages,
    CountTokens,
    /// Gemini `:generateContent`.
    GeminiGenerate,
    /// Gemini `:streamGenerateContent?alt=sse`.
    GeminiStream,
}

impl Operation {
    /// The operation's name in request records.
    pub fn record_name(self) -> &'static str {
        match self {
            Operation::Responses => "responses",
            Operation::ResponsesCompact => "responses_compact",
            Operation::ChatCompletions => "chat_completions",
            Operation::Messages => "messages",
            Operation::CountTokens => "count_tokens",
            Operation::GeminiGenerate => "gemini_generate",
            Operation::GeminiStream => "gemini_stream",
        }
    }

    /// Providers able to serve this operation.
    pub fn providers(self) -> &'static [Provider] {
        match self {
            Operation::Responses | Operation::ResponsesCompact => &[Provider::Codex, Provider::OpenaiApi],
            Operation::ChatCompletions => &Provider::ALL,
            Operation::Messages | Operation::CountTokens => &[Provider::Claude, Provider::AnthropicApi],
            Operation::GeminiGenerate | Operation::GeminiStream => &[Provider::Antigravity],
        }
    }

    /// Providers able to serve this operation for `model` (the upstream model, after aliases).
    /// Chat Completions reaches every family, so the model's name picks one: `claude-*` goes to
    /// Claude and Anthropic API accounts and to Antigravity (which serves Claude models too, as
    /// far as its model list says), `gemini-*` and `gpt-oss-*` to Antigravity, anything else to
    /// Codex and OpenAI API accounts (a pool mixing families never sends a GPT model to a Claude
    /// account or the reverse).
    pub fn providers_for(self, model: &str) -> &'static [Provider] {
        match self {
            Operation::ChatCompletions if model.starts_with("claude") => {
                &[Provider::Claude, Provider::AnthropicApi, Provider::Antigravity]
            }
            Operation::ChatCompletions if model.starts_with("gemini") || model.starts_with("gpt-oss") => {
                &[Provider::Antigravity]
            }
            Operation::ChatCompletions => &[Provider::Codex, Provider::OpenaiApi],
            op => op.providers(),
        }
    }

    pub fn grammar(self) -> Grammar {
        match self {
            Operation::Responses | Operation::ResponsesCompact | Operation::ChatCompletions => {
                Grammar::Responses
            }
            Operation::Messages | Operation::CountTokens => Grammar::Messages,
            Operation::GeminiGenerate | Operation::GeminiStream => Grammar::Gemini,
        }
    }
}

/// Where and how to send one upstream request.
#[derive(Debug)]
pub struct Target {
    /// Built from the configured base URL without parsing text again (reqwest would parse a
    /// string on every call, host and IDNA included).
    pub url: url::Url,
    pub headers: HeaderMap,
    /// The provider only streams (Codex backend): ask for a stream even for non-streaming clients.
    pub force_stream: bool,
    /// The provider rejects stored responses (Codex backend): send `store: false`.
    pub force_no_store: bool,
    /// Antigravity: wrap the client's body in the v1internal envelope for this project, and
    /// unwrap `{"response": ...}` from every answer.
    pub envelope: Option<String>,
}

/// Why no upstream request can be built.
#[derive(Debug, PartialEq, Eq)]
pub enum TargetError {
    /// The account's credentials do not fit its provider.
    WrongCredential,
    /// The provider cannot serve this operation.
    Unsupported,
}

/// Builds the upstream request for `op` on an account of `provider`.
pub fn target(
    provider: Provider,
    credentials: &CredentialInput,
    urls: &UpstreamUrls,
    op: Operation,
    client: &HeaderMap,
    query: Option<&str>,
) -> Result<Target, TargetError> {
    let mut headers = pass_through(client);
    let bearer = |h: &mut HeaderMap, token: &str| -> Result<(), TargetError> {
        let v =
            HeaderValue::from_str(&["Bearer ", token].concat()).map_err(|_| TargetError::WrongCredential)?;
        h.insert(axum::http::header::AUTHORIZATION, v);
        Ok(())
    };
    let at = &urls.endpoints;
    let (url, force_stream, force_no_store) = match (provider, credentials, op) {
        (Provider::Codex, CredentialInput::OAuth { access_token, provider_account_id, .. }, _) => {
            bearer(&mut headers, access_token)?;
            if let Some(id) = provider_account_id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                headers.insert(CHATGPT_ACCOUNT_ID.clone(), id);
            }
            match op {
                Operation::Responses | Operation::ChatCompletions => {
                    // Asked for an event stream, as Codex CLI asks: the backend only streams, and
                    // an SDK's `Accept: application/json` (openai-python sends it on streaming
                    // calls too) would ask for what it never gives.
                    headers.insert(axum::http::header::ACCEPT, HeaderValue::from_static("text/event-stream"));
                    (at.codex_responses.clone(), true, true)
                }
                Operation::ResponsesCompact => (at.codex_compact.clone(), false, false),
                _ => return Err(TargetError::Unsupported),
            }
        }
        (Provider::OpenaiApi, CredentialInput::ApiKey { api_key }, _) => {
            bearer(&mut headers, api_key)?;
            match op {
                Operation::Responses | Operation::ChatCompletions => {
                    (at.openai_responses.clone(), false, false)
                }
                Operation::ResponsesCompact => (at.openai_compact.clone(), false, false),
                _ => return Err(TargetError::Unsupported),
            }
        }
        (Provider::Claude, CredentialInput::OAuth { access_token, .. }, _) => {
            bearer(&mut headers, access_token)?;
            add_beta(&mut headers, "oauth-2025-04-20");
            default_version(&mut headers);
            match op {
                Operation::Messages | Operation::ChatCompletions => {
                    (at.claude_messages.clone(), false, false)
                }
                Operation::CountTokens => (at.claude_count_tokens.clone(), false, false),
                _ => return Err(TargetError::Unsupported),
            }
        }
        (Provider::AnthropicApi, CredentialInput::ApiKey { api_key }, _) => {
            let v = HeaderValue::from_str(api_key).map_err(|_| TargetError::WrongCredential)?;
            headers.insert(X_API_KEY.clone(), v);
            default_version(&mut headers);
            let mut url = match op {
                Operation::Messages | Operation::ChatCompletions => at.anthropic_messages.clone(),
                Operation::CountTokens => at.anthropic_count_tokens.clone(),
                _ => return Err(TargetError::Unsupported),
            };
            url.set_query(defined_query(query, &["beta"]).as_deref());
            (url, false, false)
        }
        (Provider::Antigravity, CredentialInput::OAuth { access_token, provider_account_id, .. }, _) => {
            bearer(&mut headers, access_token)?;
            // The Cloud Code project the account works in; without it there is no envelope.
            let project = provider_account_id.clone().ok_or(TargetError::WrongCredential)?;
            headers.insert(axum::http::header::USER_AGENT, urls.agents.antigravity.clone());
            let url = match op {
                Operation::GeminiGenerate => at.antigravity_generate.clone(),
                Operation::GeminiStream => at.antigravity_stream.clone(),
                _ => return Err(TargetError::Unsupported),
            };
            return Ok(Target {
                url,
                headers,
                force_stream: false,
                force_no_store: false,
                envelope: Some(project),
            });
        }
        _ => return Err(TargetError::WrongCredential),
    };
    Ok(Target { url, headers, force_stream, force_no_store, envelope: None })
}

/// The client's query parameters that the upstream route defines (`allowed`), in their order.
fn defined_query(query: Option<&str>, allowed: &[&str]) -> Option<String> {
    let kept: Vec<&str> = query?
        .split('&')
        .filter(|pair| allowed.contains(&pair.split_once('=').map_or(*pair, |(k, _)| k)))
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// Client headers that may travel upstream, one value each.
fn pass_through(client: &HeaderMap) -> HeaderMap {
    const EXACT: &[&str] = &[
        "accept",
        "user-agent",
        "originator",
        "version",
        "session-id",
        "session_id",
        "thread-id",
        "conversation_id",
        "x-client-request-id",
        "openai-beta",
        "anthropic-beta",
        "anthropic-version",
        "anthropic-dangerous-direct-browser-access",
        "x-app",
        "x-claude-code-session-id",
    ];
    const PREFIXES: &[&str] = &["x-codex-", "x-openai-", "x-stainless-"];
    /// Comma-separated lists (RFC 9110 §5.3): repeated lines are joined into one.
    const LISTS: &[&str] = &["anthropic-beta", "openai-beta"];
    let mut out = HeaderMap::new();
    for (name, value) in client {
        let n = name.as_str();
        if !(EXACT.contains(&n) || PREFIXES.iter().any(|p| n.starts_with(p))) {
            continue;
        }
        match out.get(name) {
            None => {
                out.insert(name.clone(), value.clone());
            }
            Some(first) if LISTS.contains(&n) => {
                let mut joined = first.as_bytes().to_vec();
                joined.extend_from_slice(b",");
                joined.extend_from_slice(value.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&joined) {
                    out.insert(name.clone(), v);
                }
            }
            // Anything else is one value: the first wins.
            Some(_) => {}
        }
    }
    out
}

fn add_beta(headers: &mut HeaderMap, beta: &'static str) {
    let current = headers.get(&ANTHROPIC_BETA).and_then(|v| v.to_str().ok()).unwrap_or("");
    if current.split(',').any(|b| b.trim() == beta) {
        return;
    }
    let joined = if current.trim().is_empty() { beta.to_owned() } else { format!("{current},{beta}") };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(ANTHROPIC_BETA.clone(), v);
    }
}

fn default_version(headers: &mut HeaderMap) {
    if !headers.contains_key(&ANTHROPIC_VERSION) {
        headers.insert(ANTHROPIC_VERSION.clone(), HeaderValue::from_static("2023-06-01"));
    }
}

/// Upstream response headers worth returning to the client (quota and model hints that Codex
/// and Claude Code read); everything else stays with the gateway.
pub fn response_header_passes(name: &str) -> bool {
    name == "content-type"
        || name == "retry-after"
        || name == "openai-model"
        || name == "x-reasoning-included"
        || name == "x-models-etag"
        || name.starts_with("x-codex-")
        || name.starts_with("anthropic-ratelimit-")
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderName;

    use super::*;

    #[test]
    fn chat_completions_go_to_the_models_family() {
        let chat = Operation::ChatCompletions;
        assert_eq!(
            chat.providers_for("claude-sonnet-4-5"),
            &[Provider::Claude, Provider::AnthropicApi, Provider::Antigravity]
        );
        assert_eq!(chat.providers_for("gpt-5.1-codex"), &[Provider::Codex, Provider::OpenaiApi]);
        assert_eq!(chat.providers_for("gemini-3.1-pro-low"), &[Provider::Antigravity]);
        assert_eq!(chat.providers_for("gpt-oss-120b-medium"), &[Provider::Antigravity]);
        assert_eq!(Operation::Messages.providers_for("gpt-5"), Operation::Messages.providers());
    }

    fn urls() -> UpstreamUrls {
        let c = crate::config::Settings::default().resolve().unwrap();
        c.upstream
    }

    fn client() -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer sk-sl-client"),
            ("x-api-key", "sk-sl-client"),
            ("cookie", "a=b"),
            ("connection", "keep-alive"),
            ("x-forwarded-for", "10.1.2.3"),
            ("content-length", "10"),
            ("session-id", "s1"),
            ("x-codex-turn-metadata", "{}"),
            ("x-openai-subagent", "review"),
            ("anthropic-beta", "claude-code-20250219"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn codex_gets_its_token_account_id_and_forced_stream() {
        let creds = CredentialInput::OAuth {
            access_token: "at".into(),
            refresh_token: None,
            expires_at: None,
            provider_account_id: Some("acct-1".into()),
        };
        let mut sdk = client();
        sdk.insert("accept", HeaderValue::from_static("application/json"));
        let t = target(Provider::Codex, &creds, &urls(), Operation::Responses, &sdk, None).unwrap();
        assert_eq!(t.url.as_str(), "https://chatgpt.com/backend-api/codex/responses");
        assert_eq!(t.headers["accept"], "text/event-stream", "what the backend sends, whoever asks");
        assert_eq!(t.headers["authorization"], "Bearer at");
        assert_eq!(t.headers["chatgpt-account-id"], "acct-1");
        assert_eq!(t.headers["session-id"], "s1");
        assert_eq!(t.headers["x-openai-subagent"], "review");
        for gone in ["x-api-key", "cookie", "connection", "x-forwarded-for", "content-length"] {
            assert!(!t.headers.contains_key(gone), "{gone} must not pass");
        }
        assert!(t.force_stream && t.force_no_store);
    }

    #[test]
    fn billing_selectors_and_body_headers_never_pass_and_each_header_passes_once() {
        let mut h = client();
        for (k, v) in [
            ("openai-organization", "org-other"),
            ("openai-project", "proj-other"),
            ("content-type", "application/json"),
            ("content-encoding", "zstd"),
            ("x-goog-user-project", "someone-elses"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        h.append("user-agent", HeaderValue::from_static("first/1"));
        h.append("user-agent", HeaderValue::from_static("second/2"));
        h.append("anthropic-beta", HeaderValue::from_static("oauth-2025-04-20"));
        let key = CredentialInput::ApiKey { api_key: "sk-proj".into() };
        let t = target(Provider::OpenaiApi, &key, &urls(), Operation::Responses, &h, None).unwrap();
        for gone in [
            "openai-organization",
            "openai-project",
            "content-type",
            "content-encoding",
            "x-goog-user-project",
        ] {
            assert!(!t.headers.contains_key(gone), "{gone} must not pass");
        }
        assert_eq!(t.headers.get_all("user-agent").iter().count(), 1);
        assert_eq!(t.headers["user-agent"], "first/1");
        assert_eq!(t.headers.get_all("authorization").iter().count(), 1);
        let claude = CredentialInput::OAuth {
            access_token: "sk-ant-oat".into(),
            refresh_token: None,
            expires_at: None,
            provider_account_id: None,
        };
        let t = target(Provider::Claude, &claude, &urls(), Operation::Messages, &h, None).unwrap();
        assert_eq!(t.headers.get_all("anthropic-beta").iter().count(), 1);
        assert_eq!(
            t.headers["anthropic-beta"], "claude-code-20250219,oauth-2025-04-20",
            "joined, not doubled"
        );
    }

    #[test]
    fn only_query_parameters_the_route_defines_pass() {
        let url = |provider, api_key: &str, op, query| {
            let key = CredentialInput::ApiKey { api_key: api_key.into() };
            target(provider, &key, &urls(), op, &HeaderMap::new(), Some(query)).unwrap().url.to_string()
        };
        let (anthropic, messages) = (Provider::AnthropicApi, Operation::Messages);
        assert_eq!(
            url(anthropic, "sk-ant-api", messages, "beta=true&organization=other&key=sk-sl-secret"),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        assert_eq!(url(anthropic, "sk-ant-api", messages, "x=1"), "https://api.anthropic.com/v1/messages");
        assert_eq!(
            url(Provider::OpenaiApi, "sk-proj", Operation::Responses, "beta=true"),
            "https://api.openai.com/v1/responses"
        );
    }

    #[test]
    fn claude_oauth_adds_the_beta_and_anthropic_keys_use_x_api_key() {
        let oauth = CredentialInput::OAuth {
            access_token: "sk-ant-oat".into(),
            refresh_token: None,
            expires_at: None,
            provider_account_id: None,
        };
        let t = target(Provider::Claude, &oauth, &urls(), Operation::Messages, &client(), Some("beta=true"))
            .unwrap();
        assert_eq!(t.url.as_str(), "https://api.anthropic.com/v1/messages?beta=true");
        assert_eq!(t.headers["anthropic-beta"], "claude-code-20250219,oauth-2025-04-20");
        assert_eq!(t.headers["anthropic-version"], "2023-06-01");
        let key = CredentialInput::ApiKey { api_key: "sk-ant-api".into() };
        let t =
            target(Provider::AnthropicApi, &key, &urls(), Operation::Messages, &client(), Some("beta=true"))
                .unwrap();
        assert_eq!(t.headers["x-api-key"], "sk-ant-api");
        assert!(!t.headers.contains_key("authorization"));
        assert_eq!(t.url.as_str(), "https://api.anthropic.com/v1/messages?beta=true");
    }

    #[test]
    fn mismatched_credentials_and_operations_are_refused() {
        let key = CredentialInput::ApiKey { api_key: "k".into() };
        assert_eq!(
            target(Provider::Codex, &key, &urls(), Operation::Responses, &HeaderMap::new(), None)
                .unwrap_err(),
            TargetError::WrongCredential
        );
        assert_eq!(
            target(Provider::OpenaiApi, &key, &urls(), Operation::Messages, &HeaderMap::new(), None)
                .unwrap_err(),
            TargetError::Unsupported
        );
    }
}
