//! Who SubLane says it is on the calls that no client of its own made: token refreshes and
//! sign-in code exchanges, quota reads, Cloud Code's project lookup, the admin's test call, and
//! every Antigravity call (whose client speaks Gemini, not Antigravity).
//!
//! Why: the providers' front ends judge a caller by its client headers. Claude's and OpenAI's
//! token and usage endpoints sit behind Cloudflare, which answers a request without a known
//! user agent with 403 or 429 (reported by other gateways' users; SubLane would take that for a
//! transient failure and retry until the access token expired). Cloud Code refuses Antigravity
//! versions it no longer supports. So these calls name the provider's own client, in its own
//! form (protocols.md §1, §3, §4, §5). A model call made for a client passes that client's own
//! headers on instead (`super::pass_through`).

use axum::http::{HeaderMap, HeaderName, HeaderValue, header::USER_AGENT};

use app::model::Provider;

/// Codex's interactive CLI (`codex_exec` is its non-interactive one).
pub const CODEX_ORIGINATOR: &str = "codex_cli_rs";
pub const CODEX_USER_AGENT: &str = "codex_cli_rs/0.171.0";
/// Claude Code, as it names itself to Anthropic.
pub const CLAUDE_USER_AGENT: &str = "claude-cli/2.1.197 (external, cli)";
/// The Antigravity hub's version, on `$platform`.
macro_rules! hub {
    ($platform:literal) => {
        concat!("antigravity/hub/2.8.1 ", $platform)
    };
}

/// The Antigravity hub on this machine's platform, in Go's names for it.
pub const ANTIGRAVITY_USER_AGENT: &str = if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
    hub!("darwin/arm64")
} else if cfg!(target_os = "macos") {
    hub!("darwin/amd64")
} else if cfg!(target_arch = "aarch64") {
    hub!("linux/arm64")
} else {
    hub!("linux/amd64")
};

/// The user agents sent: the built-in ones above, or the operator's (settings
/// `SUBLANE_*_USER_AGENT`), so that a provider that stops taking a client version is answered
/// by a setting, not a new release.
#[derive(Debug, Clone)]
pub struct Agents {
    pub antigravity: HeaderValue,
    pub claude: HeaderValue,
    pub codex: HeaderValue,
}

impl Default for Agents {
    fn default() -> Self {
        Agents {
            antigravity: HeaderValue::from_static(ANTIGRAVITY_USER_AGENT),
            claude: HeaderValue::from_static(CLAUDE_USER_AGENT),
            codex: HeaderValue::from_static(CODEX_USER_AGENT),
        }
    }
}

impl Agents {
    /// The operator's agents where given; an error names a setting whose value cannot be a
    /// header value.
    pub fn new(
        antigravity: Option<String>,
        claude: Option<String>,
        codex: Option<String>,
    ) -> Result<Self, String> {
        let given = |setting: &str, value: Option<String>, default: HeaderValue| match value {
            None => Ok(default),
            Some(v) => HeaderValue::from_str(v.trim()).ok().filter(|h| !h.is_empty()).ok_or_else(|| {
                format!(
                    "{setting} (or its flag or TOML key) must be a non-empty User-Agent of printable ASCII"
                )
            }),
        };
        let built_in = Agents::default();
        Ok(Agents {
            antigravity: given("SUBLANE_ANTIGRAVITY_USER_AGENT", antigravity, built_in.antigravity)?,
            claude: given("SUBLANE_CLAUDE_USER_AGENT", claude, built_in.claude)?,
            codex: given("SUBLANE_CODEX_USER_AGENT", codex, built_in.codex)?,
        })
    }

    /// The headers that name `provider`'s own client; none for an API-key provider, whose API
    /// takes any client.
    pub fn headers(&self, provider: Provider) -> Vec<(HeaderName, HeaderValue)> {
        match provider {
            Provider::Codex => vec![
                (HeaderName::from_static("originator"), HeaderValue::from_static(CODEX_ORIGINATOR)),
                (USER_AGENT, self.codex.clone()),
            ],
            Provider::Claude => vec![(USER_AGENT, self.claude.clone())],
            Provider::Antigravity => vec![(USER_AGENT, self.antigravity.clone())],
            Provider::OpenaiApi | Provider::AnthropicApi => Vec::new(),
        }
    }

    /// `request` with `provider`'s client headers.
    pub fn named(&self, request: reqwest::RequestBuilder, provider: Provider) -> reqwest::RequestBuilder {
        self.headers(provider).into_iter().fold(request, |r, (name, value)| r.header(name, value))
    }

    /// `provider`'s client headers as a client's own, for a model call SubLane makes itself.
    pub fn as_client(&self, provider: Provider) -> HeaderMap {
        self.headers(provider).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_subscription_provider_is_named_in_its_client_s_form() {
        let agents = Agents::default();
        let agent = |p| agents.as_client(p).get(USER_AGENT).map(|v| v.to_str().unwrap().to_owned());
        assert!(agent(Provider::Antigravity).is_some_and(|a| a.starts_with("antigravity/hub/2.")));
        assert!(agent(Provider::Claude).is_some_and(|a| a.starts_with("claude-cli/")));
        assert!(agent(Provider::Codex).is_some_and(|a| a.starts_with("codex_cli_rs/")));
        assert_eq!(agents.as_client(Provider::Codex).get("originator").unwrap(), "codex_cli_rs");
        assert!(
            agents.headers(Provider::OpenaiApi).is_empty()
                && agents.headers(Provider::AnthropicApi).is_empty()
        );
    }

    #[test]
    fn an_operator_s_agent_replaces_the_built_in_one_and_a_bad_one_is_refused() {
        let agents = Agents::new(Some(" antigravity/hub/9.9.9 linux/amd64 ".into()), None, None).unwrap();
        assert_eq!(agents.antigravity, "antigravity/hub/9.9.9 linux/amd64");
        assert_eq!(agents.claude, CLAUDE_USER_AGENT);
        let bad = Agents::new(None, Some("claude\ncli".into()), None).unwrap_err();
        assert!(bad.contains("SUBLANE_CLAUDE_USER_AGENT"), "{bad}");
        assert!(Agents::new(None, None, Some("  ".into())).is_err());
    }
}
