//! One refresh of an OAuth grant, exactly as each provider's own client sends it (protocols.md
//! §3-5), and what the token endpoint's answer means (CRED-2, CRED-4):
//!
//! | answer | meaning |
//! |---|---|
//! | 2xx with an `access_token` | fresh tokens (a rotated refresh token replaces the old one; none keeps it) |
//! | 400/401 `invalid_grant`, `refresh_token_reused`, `refresh_token_expired`, `refresh_token_invalidated` | terminal: re-authorization required |
//! | 429 (with Retry-After) | transient: back off at least that long (up to 1 h) |
//! | anything else: other 4xx, 5xx, an HTML page, a broken connection | transient |
//!
//! A misconfigured client (`invalid_client`, a missing Google secret) is transient too: the
//! grant may be fine, so the account is not marked for re-authorization.

use std::time::Duration;

use app::model::Provider;
use base64::Engine;
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::config::{OAuthClients, UpstreamUrls};

/// Scopes Claude Code asks for when it refreshes (protocols.md §4); its sign-in asks for these
/// and `org:create_api_key`, so a refresh never asks for more than was granted.
pub const CLAUDE_SCOPES: &str =
    "user:profile user:inference user:sessions:claude_code user:mcp_servers user:file_upload";
/// Longest a token endpoint may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest token-endpoint Retry-After honoured (CRED-2).
pub const MAX_TOKEN_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Tokens a token endpoint issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fresh {
    pub access_token: String,
    /// `None`: the old refresh token stays valid.
    pub refresh_token: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Codex: the ChatGPT account id from the id token, when it has one.
    pub provider_account_id: Option<String>,
}

/// What a token endpoint answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Fresh(Fresh),
    /// The grant is gone: only a re-authorization helps. The reason is a short code.
    Terminal(String),
    /// Try again later; at least after `retry_after` when the endpoint said so.
    Transient {
        reason: String,
        retry_after: Option<Duration>,
    },
}

/// Refreshes `refresh_token` of a `provider` account.
pub async fn refresh(
    http: &reqwest::Client,
    urls: &UpstreamUrls,
    clients: &OAuthClients,
    provider: Provider,
    refresh_token: &str,
    now: DateTime<Utc>,
) -> Answer {
    let request = match provider {
        Provider::Codex => http.post(urls.codex_token_url.clone()).json(&json!({
            "client_id": clients.codex.client_id,
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "refresh_reason": "proactive_expiry",
        })),
        Provider::Claude => http.post(urls.claude_token_url.clone()).json(&json!({
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": clients.claude.client_id,
            "scope": CLAUDE_SCOPES,
        })),
        Provider::Antigravity => {
            let Some(secret) = clients.google.client_secret.as_ref() else {
                return Answer::Transient {
                    reason: "google_client_secret_missing".into(),
                    retry_after: None,
                };
            };
            http.post(urls.google_token_url.clone()).form(&[
                ("client_id", clients.google.client_id.as_str()),
                ("client_secret", secret.expose_secret()),
                ("refresh_token", refresh_token),
                ("grant_type", "refresh_token"),
            ])
        }
        Provider::OpenaiApi | Provider::AnthropicApi => {
            return Answer::Transient { reason: "not_an_oauth_account".into(), retry_after: None };
        }
    };
    send(urls.agents.named(request, provider), now).await
}

/// Sends a token request and reads its answer (also for code exchanges).
pub async fn send(request: reqwest::RequestBuilder, now: DateTime<Utc>) -> Answer {
    let resp = match tokio::time::timeout(TOKEN_TIMEOUT, request.send()).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => {
            return Answer::Transient { reason: "token_endpoint_unreachable".into(), retry_after: None };
        }
        Err(_) => return Answer::Transient { reason: "token_endpoint_timeout".into(), retry_after: None },
    };
    let status = resp.status();
    let retry_after =
        crate::proxy::schedule::retry_after_header(resp.headers(), now).map(|d| d.min(MAX_TOKEN_RETRY_AFTER));
    let body = match tokio::time::timeout(TOKEN_TIMEOUT, resp.bytes()).await {
        Ok(Ok(b)) => b,
        _ => return Answer::Transient { reason: "token_endpoint_broken".into(), retry_after },
    };
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    classify(status.as_u16(), &v, retry_after, now)
}

/// The meaning of a token endpoint's answer (see the module table).
pub fn classify(status: u16, v: &Value, retry_after: Option<Duration>, now: DateTime<Utc>) -> Answer {
    if (200..300).contains(&status) {
        return match v["access_token"].as_str().filter(|t| !t.is_empty()) {
            Some(access) => Answer::Fresh(Fresh {
                access_token: access.to_owned(),
                refresh_token: v["refresh_token"].as_str().filter(|t| !t.is_empty()).map(str::to_owned),
                // No expires_in (a Codex answer may lack it): the access token's own `exp`.
                expires_at: v["expires_in"]
                    .as_i64()
                    .filter(|s| *s > 0)
                    .map(|s| now + chrono::Duration::seconds(s))
                    .or_else(|| jwt_expiry(access)),
                provider_account_id: v["id_token"].as_str().and_then(chatgpt_account_id),
            }),
            None => Answer::Transient { reason: "token_endpoint_answer_unreadable".into(), retry_after },
        };
    }
    // The shapes seen: {"error":"invalid_grant"}, {"error":{"code":"refresh_token_reused"}},
    // {"error":"invalid_grant","code":"refresh_token_reused"}.
    let codes =
        [v["error"].as_str(), v["error"]["code"].as_str(), v["code"].as_str(), v["error"]["type"].as_str()];
    const TERMINAL: &[&str] =
        &["invalid_grant", "refresh_token_reused", "refresh_token_expired", "refresh_token_invalidated"];
    if matches!(status, 400 | 401)
        && let Some(code) = codes.into_iter().flatten().find(|c| TERMINAL.contains(c))
    {
        return Answer::Terminal(code.to_owned());
    }
    let reason = match status {
        429 => "token_endpoint_rate_limited".to_owned(),
        s => format!("token_endpoint_{s}"),
    };
    Answer::Transient { reason, retry_after }
}

/// The claims of a JWT, unverified: only read for facts the provider's own client reads too.
fn jwt_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let bytes =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The ChatGPT account id in a Codex id token's claims (`https://api.openai.com/auth`).
pub fn chatgpt_account_id(id_token: &str) -> Option<String> {
    jwt_claims(id_token)?["https://api.openai.com/auth"]["chatgpt_account_id"].as_str().map(str::to_owned)
}

/// When a JWT access token expires (its `exp`), for files that store no expiry (Codex
/// `auth.json`).
pub fn jwt_expiry(token: &str) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(jwt_claims(token)?["exp"].as_i64()?, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    #[test]
    fn fresh_tokens_carry_their_expiry_and_a_rotated_refresh_token() {
        let a = classify(
            200,
            &json!({"access_token": "at", "refresh_token": "rt2", "expires_in": 3600}),
            None,
            now(),
        );
        let Answer::Fresh(f) = a else { panic!("{a:?}") };
        assert_eq!((f.access_token.as_str(), f.refresh_token.as_deref()), ("at", Some("rt2")));
        assert_eq!(f.expires_at, Some(now() + chrono::Duration::seconds(3600)));
        let kept = classify(200, &json!({"access_token": "at", "expires_in": 3599}), None, now());
        assert!(matches!(kept, Answer::Fresh(Fresh { refresh_token: None, .. })), "Google keeps the old one");
    }

    #[test]
    fn only_explicit_grant_errors_are_terminal() {
        for body in [
            json!({"error": "invalid_grant", "error_description": "Bad Request"}),
            json!({"error": {"code": "refresh_token_reused", "type": "invalid_request_error"}}),
            json!({"error": "invalid_grant", "code": "refresh_token_reused"}),
            json!({"error": {"code": "refresh_token_expired"}}),
        ] {
            assert!(matches!(classify(400, &body, None, now()), Answer::Terminal(_)), "{body}");
            assert!(matches!(classify(401, &body, None, now()), Answer::Terminal(_)), "{body}");
        }
        for (status, body) in [
            (400, json!({"error": "invalid_request"})),
            (401, json!({"error": "invalid_client"})),
            (401, Value::Null),                       // an HTML page
            (403, json!({"error": "invalid_grant"})), // a proxy's refusal, not the grant's
            (500, json!({"error": "invalid_grant"})),
            (429, json!({"error": "rate_limited"})),
        ] {
            assert!(
                matches!(classify(status, &body, None, now()), Answer::Transient { .. }),
                "{status} {body}"
            );
        }
        let limited = classify(429, &Value::Null, Some(Duration::from_secs(90)), now());
        assert_eq!(
            limited,
            Answer::Transient {
                reason: "token_endpoint_rate_limited".into(),
                retry_after: Some(Duration::from_secs(90))
            }
        );
    }

    #[test]
    fn the_chatgpt_account_id_comes_from_the_id_token() {
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let claims = json!({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-9"}});
        let token = format!("{}.{}.", b64(&json!({"alg": "none"})), b64(&claims));
        assert_eq!(chatgpt_account_id(&token).as_deref(), Some("acct-9"));
        assert_eq!(chatgpt_account_id("not-a-jwt"), None);
    }
}
