//! Bringing an account's credentials in (CRED-5): the provider's own sign-in (authorization code
//! with PKCE, the code pasted back), or the credential file a provider's CLI wrote.
//!
//! A sign-in is a *flow*: SubLane makes a state and a PKCE verifier, shows the provider's
//! authorize URL, and keeps the flow for 10 minutes. The admin signs in and pastes back the code,
//! `code#state` (Claude's page), or the whole callback URL. A flow is used at most once, whatever
//! the outcome: a wrong state, a refused code or a second paste all need a new sign-in, so a
//! verifier is never presented twice. Flows live in this process only (a sign-in is started and
//! finished on the same SubLane).
//!
//! A credential file is checked before anything is stored: a file of another provider, a file
//! without tokens, or an expired token without a refresh token is refused with what to do; an
//! expired access token is refreshed at once, so a refresh token the CLI has spent since is
//! found now and not at the first request.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use app::model::{CredentialInput, Provider};
use base64::Engine;
use chrono::{DateTime, Utc};
use rand::RngCore;
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use sha2::Digest;

use super::{
    REFRESH_AHEAD,
    refresh::{self, Answer, Fresh},
};
use crate::{
    clock::SharedClock,
    config::{OAuthClient, OAuthClients, UpstreamUrls},
};

/// How long a started sign-in can be finished.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// Sign-ins kept at once; the oldest goes first.
const MAX_FLOWS: usize = 64;
/// The largest credential file accepted.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// How long the Cloud Code project lookup may take.
const PROJECT_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong bringing credentials in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OnboardError {
    /// The admin's input cannot work (wrong file, unknown or expired sign-in, refused code): 422.
    #[error("{0}")]
    Invalid(String),
    /// The provider did not answer usefully; trying again may work: 502.
    #[error("{0}")]
    Upstream(String),
}

fn invalid(msg: impl Into<String>) -> OnboardError {
    OnboardError::Invalid(msg.into())
}

/// A started sign-in, as shown to the admin.
#[derive(Debug, Clone)]
pub struct Started {
    pub flow_id: String,
    pub authorize_url: String,
    pub redirect_uri: String,
    pub expires_at: DateTime<Utc>,
}

struct Flow {
    provider: Provider,
    verifier: String,
    started: DateTime<Utc>,
}

/// Sign-ins under way, and the provider calls that bring credentials in.
pub struct Onboarding {
    flows: Mutex<HashMap<String, Flow>>,
    http: reqwest::Client,
    urls: UpstreamUrls,
    clients: OAuthClients,
    clock: SharedClock,
}

impl Onboarding {
    pub fn new(http: reqwest::Client, urls: UpstreamUrls, clients: OAuthClients, clock: SharedClock) -> Self {
        Onboarding { flows: Mutex::default(), http, urls, clients, clock }
    }

    fn client(&self, provider: Provider) -> Result<&OAuthClient, OnboardError> {
        match provider {
            Provider::Codex => Ok(&self.clients.codex),
            Provider::Claude => Ok(&self.clients.claude),
            Provider::Antigravity => Ok(&self.clients.google),
            Provider::OpenaiApi | Provider::AnthropicApi => {
                Err(invalid(format!("{} accounts take an API key, not a sign-in", provider.as_str())))
            }
        }
    }

    /// Starts a sign-in: the provider's authorize URL with a new state and PKCE challenge.
    pub fn start(&self, provider: Provider) -> Result<Started, OnboardError> {
        let client = self.client(provider)?;
        if provider == Provider::Antigravity && client.client_secret.is_none() {
            return Err(invalid(
                "Google sign-in needs the OAuth client secret: set SUBLANE_GOOGLE_CLIENT_SECRET (or oauth.google_client_secret)",
            ));
        }
        let state = random_token();
        let verifier = random_token();
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(sha2::Sha256::digest(verifier.as_bytes()));
        let mut url = client.authorize_url.clone();
        {
            let mut q = url.query_pairs_mut();
            match provider {
                Provider::Codex => {
                    q.append_pair("response_type", "code")
                        .append_pair("client_id", &client.client_id)
                        .append_pair("redirect_uri", &client.redirect_uri)
                        .append_pair("scope", "openid profile email offline_access")
                        .append_pair("id_token_add_organizations", "true")
                        .append_pair("codex_cli_simplified_flow", "true");
                }
                Provider::Claude => {
                    q.append_pair("code", "true")
                        .append_pair("client_id", &client.client_id)
                        .append_pair("response_type", "code")
                        .append_pair("redirect_uri", &client.redirect_uri)
                        .append_pair("scope", &format!("org:create_api_key {}", refresh::CLAUDE_SCOPES));
                }
                _ => {
                    q.append_pair("access_type", "offline")
                        .append_pair("prompt", "consent")
                        .append_pair("client_id", &client.client_id)
                        .append_pair("redirect_uri", &client.redirect_uri)
                        .append_pair("response_type", "code")
                        .append_pair(
                            "scope",
                            "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/userinfo.email https://www.googleapis.com/auth/userinfo.profile",
                        );
                }
            }
            q.append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", &state);
        }
        let now = self.clock.now();
        let mut flows = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        flows.retain(|_, f| !expired(f, now));
        if flows.len() >= MAX_FLOWS
            && let Some(oldest) = flows.iter().min_by_key(|(_, f)| f.started).map(|(k, _)| k.clone())
        {
            flows.remove(&oldest);
        }
        flows.insert(state.clone(), Flow { provider, verifier, started: now });
        Ok(Started {
            flow_id: state,
            authorize_url: url.to_string(),
            redirect_uri: client.redirect_uri.clone(),
            expires_at: now + chrono::Duration::from_std(FLOW_TTL).unwrap_or_default(),
        })
    }

    /// Finishes sign-in `flow_id` with what the admin pasted: exchanges the code (once) and
    /// returns the provider and its credentials.
    pub async fn finish(
        &self,
        flow_id: &str,
        pasted: &str,
    ) -> Result<(Provider, CredentialInput), OnboardError> {
        let flow = self.flows.lock().unwrap_or_else(|p| p.into_inner()).remove(flow_id);
        let Some(flow) = flow else {
            return Err(invalid("this sign-in is unknown or was already used: start a new one"));
        };
        let now = self.clock.now();
        if expired(&flow, now) {
            return Err(invalid("this sign-in expired (a sign-in lasts 10 minutes): start a new one"));
        }
        let (code, state) = parse_pasted(pasted)?;
        if state.as_deref().is_some_and(|s| s != flow_id) {
            return Err(invalid(
                "the pasted code belongs to another sign-in (its state does not match): start a new one",
            ));
        }
        let client = self.client(flow.provider)?;
        let request = match flow.provider {
            Provider::Codex => self.http.post(self.urls.codex_token_url.clone()).form(&[
                ("grant_type", "authorization_code"),
                ("code", code.as_str()),
                ("redirect_uri", client.redirect_uri.as_str()),
                ("client_id", client.client_id.as_str()),
                ("code_verifier", flow.verifier.as_str()),
            ]),
            Provider::Claude => self.http.post(self.urls.claude_token_url.clone()).json(&json!({
                "grant_type": "authorization_code",
                "code": code,
                "state": flow_id,
                "client_id": client.client_id,
                "redirect_uri": client.redirect_uri,
                "code_verifier": flow.verifier,
            })),
            _ => {
                let secret =
                    client.client_secret.as_ref().map(|s| s.expose_secret().to_owned()).unwrap_or_default();
                self.http.post(self.urls.google_token_url.clone()).form(&[
                    ("grant_type", "authorization_code"),
                    ("code", code.as_str()),
                    ("client_id", client.client_id.as_str()),
                    ("client_secret", secret.as_str()),
                    ("redirect_uri", client.redirect_uri.as_str()),
                    ("code_verifier", flow.verifier.as_str()),
                ])
            }
        };
        let fresh = match refresh::send(self.urls.agents.named(request, flow.provider), now).await {
            Answer::Fresh(f) => f,
            Answer::Terminal(reason) => {
                return Err(invalid(format!(
                    "the provider refused the code ({reason}); codes are single-use and short-lived: start a new sign-in"
                )));
            }
            Answer::Transient { reason, .. } => {
                return Err(OnboardError::Upstream(format!(
                    "the provider's token endpoint failed ({reason}): start a new sign-in"
                )));
            }
        };
        let credentials = self.complete(flow.provider, fresh, None).await?;
        Ok((flow.provider, credentials))
    }

    /// Credentials from a CLI credential file of `provider` (Codex `auth.json`, Claude Code
    /// `.credentials.json`, Gemini CLI / Antigravity OAuth JSON).
    pub async fn import(&self, provider: Provider, file: &str) -> Result<CredentialInput, OnboardError> {
        if file.len() > MAX_FILE_BYTES {
            return Err(invalid(format!(
                "the file is larger than {} KiB: not a credential file",
                MAX_FILE_BYTES / 1024
            )));
        }
        let v: Value = serde_json::from_str(file.trim())
            .map_err(|_| invalid("the file is not JSON: paste the whole credential file"))?;
        if !v.is_object() {
            return Err(invalid("the file is not a JSON object: paste the whole credential file"));
        }
        let parsed = parse_file(provider, &v)?;
        let now = self.clock.now();
        let due = parsed
            .fresh
            .expires_at
            .is_some_and(|e| e - now <= chrono::Duration::from_std(REFRESH_AHEAD).unwrap_or_default());
        let fresh = match (&parsed.fresh.refresh_token, due) {
            (_, false) => parsed.fresh.clone(),
            (None, true) => {
                let when = parsed.fresh.expires_at.map(|e| e.to_rfc3339()).unwrap_or_default();
                return Err(invalid(format!(
                    "the file's access token expired ({when}) and it holds no refresh token: sign in again"
                )));
            }
            (Some(r), true) => {
                match refresh::refresh(&self.http, &self.urls, &self.clients, provider, r, now).await {
                    Answer::Fresh(f) => Fresh {
                        refresh_token: f.refresh_token.or_else(|| Some(r.clone())),
                        provider_account_id: f
                            .provider_account_id
                            .or_else(|| parsed.fresh.provider_account_id.clone()),
                        ..f
                    },
                    Answer::Terminal(reason) => {
                        return Err(invalid(format!(
                            "the file's access token expired and its refresh token was refused ({reason}): the CLI may have used it since; copy the file again, or sign in"
                        )));
                    }
                    // The token endpoint is down: keep the file's tokens; the account refreshes when it can.
                    Answer::Transient { .. } => parsed.fresh.clone(),
                }
            }
        };
        self.complete(provider, fresh, parsed.project).await
    }

    /// The account id each provider needs beside its tokens: Codex's ChatGPT account (from the
    /// id token), Antigravity's Cloud Code project (from the file, else `loadCodeAssist`).
    async fn complete(
        &self,
        provider: Provider,
        fresh: Fresh,
        project: Option<String>,
    ) -> Result<CredentialInput, OnboardError> {
        let provider_account_id = match provider {
            Provider::Codex => Some(fresh.provider_account_id.clone().ok_or_else(|| {
                invalid("the sign-in gave no ChatGPT account id (no id token with chatgpt_account_id)")
            })?),
            Provider::Antigravity => match project {
                Some(p) => Some(p),
                None => Some(self.cloud_code_project(&fresh.access_token).await?),
            },
            _ => None,
        };
        Ok(CredentialInput::OAuth {
            access_token: fresh.access_token,
            refresh_token: fresh.refresh_token,
            expires_at: fresh.expires_at,
            provider_account_id,
        })
    }

    /// The Cloud Code project of a Google account (`loadCodeAssist`), which Antigravity calls need.
    async fn cloud_code_project(&self, access_token: &str) -> Result<String, OnboardError> {
        let mut url = self.urls.antigravity_base_url.clone();
        url.set_path(&format!("{}/v1internal:loadCodeAssist", url.path().trim_end_matches('/')));
        let body = json!({"metadata": {"ideType": "ANTIGRAVITY", "platform": "PLATFORM_UNSPECIFIED", "pluginType": "GEMINI"}});
        let sent = self
            .urls
            .agents
            .named(self.http.post(url), Provider::Antigravity)
            .bearer_auth(access_token)
            .json(&body)
            .timeout(PROJECT_TIMEOUT)
            .send()
            .await;
        let resp = sent
            .map_err(|_| OnboardError::Upstream("Cloud Code (loadCodeAssist) could not be reached".into()))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(OnboardError::Upstream(format!(
                "Cloud Code (loadCodeAssist) answered HTTP {}",
                status.as_u16()
            )));
        }
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        let project = &v["cloudaicompanionProject"];
        project
            .as_str()
            .or_else(|| project["id"].as_str())
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| invalid("this Google account has no Cloud Code project yet: open Antigravity with it once, then try again"))
    }
}

fn expired(flow: &Flow, now: DateTime<Utc>) -> bool {
    now - flow.started > chrono::Duration::from_std(FLOW_TTL).unwrap_or_default()
}

/// 32 random bytes, base64url: a state or a PKCE verifier (43 characters, RFC 7636).
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The code (and the state, when there is one) from what an admin pasted: the whole callback
/// URL, its query string, Claude's `code#state`, or the bare code.
pub fn parse_pasted(pasted: &str) -> Result<(String, Option<String>), OnboardError> {
    let p = pasted.trim();
    if p.is_empty() {
        return Err(invalid("paste the code or the whole address the sign-in ended on"));
    }
    let query = if p.starts_with("http://") || p.starts_with("https://") {
        let url = url::Url::parse(p).map_err(|_| invalid("the pasted address is not a valid URL"))?;
        Some(url.query().unwrap_or_default().to_owned())
    } else if p.contains("code=") || p.contains("error=") {
        Some(p.trim_start_matches('?').to_owned())
    } else {
        None
    };
    if let Some(query) = query {
        let pairs: HashMap<String, String> =
            url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        if let Some(e) = pairs.get("error") {
            return Err(invalid(format!("the provider ended the sign-in with an error: {e}")));
        }
        let code = pairs
            .get("code")
            .filter(|c| !c.is_empty())
            .ok_or_else(|| invalid("the pasted address has no code"))?;
        return Ok((code.clone(), pairs.get("state").cloned()));
    }
    let (code, state) = match p.split_once('#') {
        Some((c, s)) => (c, Some(s.to_owned())),
        None => (p, None),
    };
    if code.is_empty() || code.chars().any(char::is_whitespace) {
        return Err(invalid("the pasted code is not a code: paste it exactly as the provider showed it"));
    }
    Ok((code.to_owned(), state.filter(|s| !s.is_empty())))
}

/// What a credential file holds.
#[derive(Debug)]
struct Parsed {
    fresh: Fresh,
    project: Option<String>,
}

/// Reads the credential file of `provider`; another provider's file is named as such.
fn parse_file(provider: Provider, v: &Value) -> Result<Parsed, OnboardError> {
    let kind = file_kind(v);
    let expected = match provider {
        Provider::Codex => FileKind::Codex,
        Provider::Claude => FileKind::Claude,
        Provider::Antigravity => FileKind::Google,
        Provider::OpenaiApi | Provider::AnthropicApi => {
            return Err(invalid(format!(
                "{} accounts take an API key, not a credential file",
                provider.as_str()
            )));
        }
    };
    if kind != expected {
        return Err(invalid(match kind {
            FileKind::Codex => "this is a Codex auth.json: add it as an OpenAI Codex account".to_owned(),
            FileKind::CodexApiKey => {
                "this auth.json holds an OpenAI API key, not a ChatGPT sign-in: add the key as an OpenAI API key account".to_owned()
            }
            FileKind::Claude => "this is a Claude Code .credentials.json: add it as a Claude account".to_owned(),
            FileKind::Google => "this is a Google OAuth file: add it as an Antigravity account".to_owned(),
            FileKind::Unknown => format!("this is not a {} credential file ({})", provider_label(provider), expected.describe()),
        }));
    }
    let text = |v: &Value| v.as_str().filter(|s| !s.trim().is_empty()).map(str::to_owned);
    let (fresh, project) = match kind {
        FileKind::Codex => {
            let t = &v["tokens"];
            let access = text(&t["access_token"])
                .ok_or_else(|| invalid("the auth.json has no tokens.access_token"))?;
            let account = text(&t["account_id"])
                .or_else(|| t["id_token"].as_str().and_then(refresh::chatgpt_account_id));
            (
                Fresh {
                    expires_at: refresh::jwt_expiry(&access),
                    access_token: access,
                    refresh_token: text(&t["refresh_token"]),
                    provider_account_id: account,
                },
                None,
            )
        }
        FileKind::Claude => {
            let o = &v["claudeAiOauth"];
            let access = text(&o["accessToken"])
                .ok_or_else(|| invalid("the file has no claudeAiOauth.accessToken"))?;
            (
                Fresh {
                    access_token: access,
                    refresh_token: text(&o["refreshToken"]),
                    expires_at: o["expiresAt"].as_i64().and_then(DateTime::from_timestamp_millis),
                    provider_account_id: None,
                },
                None,
            )
        }
        _ => {
            let access = text(&v["access_token"]).ok_or_else(|| invalid("the file has no access_token"))?;
            let expires_at = v["expiry_date"]
                .as_i64()
                .and_then(DateTime::from_timestamp_millis)
                .or_else(|| ["expiry", "expired"].iter().find_map(|k| v[*k].as_str().and_then(rfc3339)));
            (
                Fresh {
                    access_token: access,
                    refresh_token: text(&v["refresh_token"]),
                    expires_at,
                    provider_account_id: None,
                },
                text(&v["project_id"]),
            )
        }
    };
    Ok(Parsed { fresh, project })
}

fn rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|d| d.with_timezone(&Utc))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Codex,
    CodexApiKey,
    Claude,
    Google,
    Unknown,
}

impl FileKind {
    fn describe(self) -> &'static str {
        match self {
            FileKind::Codex | FileKind::CodexApiKey => "~/.codex/auth.json",
            FileKind::Claude => "~/.claude/.credentials.json",
            _ => "a Gemini CLI or Antigravity OAuth JSON with access_token and refresh_token",
        }
    }
}

fn provider_label(p: Provider) -> &'static str {
    match p {
        Provider::Codex => "Codex",
        Provider::Claude => "Claude Code",
        _ => "Google OAuth",
    }
}

fn file_kind(v: &Value) -> FileKind {
    if v.get("claudeAiOauth").is_some() {
        FileKind::Claude
    } else if v["tokens"].is_object() {
        FileKind::Codex
    } else if v["OPENAI_API_KEY"].is_string() {
        FileKind::CodexApiKey
    } else if v.get("access_token").is_some() {
        FileKind::Google
    } else {
        FileKind::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pasted_code_is_read_from_each_form() {
        let ok = |p: &str| parse_pasted(p).unwrap();
        assert_eq!(ok("  abc  "), ("abc".into(), None));
        assert_eq!(ok("abc#st"), ("abc".into(), Some("st".into())));
        assert_eq!(
            ok("http://localhost:1455/auth/callback?code=abc&state=st"),
            ("abc".into(), Some("st".into()))
        );
        assert_eq!(ok("code=abc&state=st"), ("abc".into(), Some("st".into())));
        assert!(
            matches!(parse_pasted("http://localhost/cb?error=access_denied"), Err(OnboardError::Invalid(m)) if m.contains("access_denied"))
        );
        assert!(parse_pasted("http://localhost/cb?state=x").is_err());
        assert!(parse_pasted("two words").is_err());
        assert!(parse_pasted("").is_err());
    }

    #[test]
    fn each_credential_file_is_read_and_a_wrong_one_is_named() {
        let codex = json!({"auth_mode": "chatgpt", "OPENAI_API_KEY": null,
            "tokens": {"id_token": "x", "access_token": "at", "refresh_token": "rt", "account_id": "acct-1"}});
        let p = parse_file(Provider::Codex, &codex).unwrap();
        assert_eq!((p.fresh.access_token.as_str(), p.fresh.refresh_token.as_deref()), ("at", Some("rt")));
        assert_eq!(p.fresh.provider_account_id.as_deref(), Some("acct-1"));
        let claude = json!({"claudeAiOauth": {"accessToken": "sk-ant-oat01-a", "refreshToken": "r", "expiresAt": 1_900_000_000_000_i64}});
        let p = parse_file(Provider::Claude, &claude).unwrap();
        assert_eq!(p.fresh.expires_at, DateTime::from_timestamp(1_900_000_000, 0));
        let gemini = json!({"access_token": "ya29.a", "refresh_token": "1//r", "expiry_date": 1_900_000_000_000_i64, "token_type": "Bearer"});
        let p = parse_file(Provider::Antigravity, &gemini).unwrap();
        assert_eq!((p.fresh.expires_at, p.project), (DateTime::from_timestamp(1_900_000_000, 0), None));
        let named = |provider, v: &Value| match parse_file(provider, v) {
            Err(OnboardError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(named(Provider::Codex, &claude).contains("Claude Code"));
        assert!(named(Provider::Claude, &codex).contains("Codex auth.json"));
        assert!(named(Provider::Antigravity, &json!({"OPENAI_API_KEY": "sk-x"})).contains("OpenAI API key"));
        assert!(named(Provider::Claude, &json!({"hello": 1})).contains("not a Claude Code credential file"));
        assert!(named(Provider::Claude, &json!({"claudeAiOauth": {}})).contains("accessToken"));
    }
}
