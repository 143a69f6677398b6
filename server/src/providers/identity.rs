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

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use app::model::Provider;

/// Codex's interactive CLI (`codex_exec` is its non-interactive one).
pub const CODEX_ORIGINATOR: &str = "codex_cli_rs";
pub const CODEX_USER_AGENT: &str = "codex_cli_rs/0.171.0";
/// Claude Code, as it names itself to Anthropic.
pub const CLAUDE_USER_AGENT: &str = "claude-cli/2.1.197 (external, cli)";
/// The Antigravity hub on this machine's platform, in Go's names for it.
pub const ANTIGRAVITY_USER_AGENT: &str = if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
    "antigravity/hub/2.8.1 darwin/arm64"
} else if cfg!(target_os = "macos") {
    "antigravity/hub/2.8.1 darwin/amd64"
} else if cfg!(target_arch = "aarch64") {
    "antigravity/hub/2.8.1 linux/arm64"
} else {
    "antigravity/hub/2.8.1 linux/amd64"
};

/// The headers that name `provider`'s own client; none for an API-key provider, whose API
/// takes any client.
pub fn headers(provider: Provider) -> &'static [(&'static str, &'static str)] {
    match provider {
        Provider::Codex => &[("originator", CODEX_ORIGINATOR), ("user-agent", CODEX_USER_AGENT)],
        Provider::Claude => &[("user-agent", CLAUDE_USER_AGENT)],
        Provider::Antigravity => &[("user-agent", ANTIGRAVITY_USER_AGENT)],
        Provider::OpenaiApi | Provider::AnthropicApi => &[],
    }
}

/// `request` with `provider`'s client headers.
pub fn named(request: reqwest::RequestBuilder, provider: Provider) -> reqwest::RequestBuilder {
    headers(provider).iter().fold(request, |r, (name, value)| r.header(*name, *value))
}

/// `provider`'s client headers as a client's own, for a model call SubLane makes itself.
pub fn as_client(provider: Provider) -> HeaderMap {
    headers(provider)
        .iter()
        .map(|(name, value)| (HeaderName::from_static(name), HeaderValue::from_static(value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_subscription_provider_is_named_in_its_client_s_form() {
        let agent = |p| headers(p).iter().find(|(n, _)| *n == "user-agent").map(|(_, v)| *v);
        assert!(agent(Provider::Antigravity).is_some_and(|a| a.starts_with("antigravity/hub/2.")));
        assert!(agent(Provider::Claude).is_some_and(|a| a.starts_with("claude-cli/")));
        assert!(agent(Provider::Codex).is_some_and(|a| a.starts_with("codex_cli_rs/")));
        assert_eq!(as_client(Provider::Codex).get("originator").unwrap(), "codex_cli_rs");
        assert!(headers(Provider::OpenaiApi).is_empty() && headers(Provider::AnthropicApi).is_empty());
    }
}
