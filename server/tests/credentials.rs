//! Tokens that stay alive (CRED-1..CRED-4), through the real server and the mock's OAuth
//! endpoints, on a fake clock: when each provider refreshes, one refresh for many waiting
//! requests, the backoff ladder and Retry-After, which token-endpoint answers are terminal, the
//! 401 -> refresh -> retry path (HTTP and WebSocket), restarts, and bound conversations.
//!
//! The mock's token families: refresh tokens `<family>`, `<family>.1`, ... are single-use; access
//! tokens are the provider's prefix plus the refresh token's name (`at-`, `sk-ant-oat01-`,
//! `ya29.`), so the model calls logged under an access token say which refresh brought it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use chrono::DateTime;
use common::{
    bed::{Bed, T0},
    rig::{Answer, MODEL, body},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

impl Bed {
    /// An OAuth account in pool 1 whose access token expires `expires_in` seconds from now.
    async fn oauth(&mut self, provider: &str, access: &str, refresh: Option<&str>, expires_in: i64) -> i64 {
        let expires_at = DateTime::from_timestamp(self.now() + expires_in, 0).unwrap();
        let credentials = json!({"kind": "oauth", "access_token": access, "refresh_token": refresh,
            "expires_at": expires_at, "provider_account_id": "p-1"});
        let (status, body) = self
            .rig
            .admin
            .call(
                Method::POST,
                "/api/accounts",
                Some(json!({"provider": provider, "name": access, "pool_ids": [1], "max_concurrency": 100,
                    "credentials": credentials})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_i64().unwrap()
    }

    fn request(&self, provider: &str, session: Option<&str>) -> reqwest::RequestBuilder {
        let (path, body) = match provider {
            "codex" => ("/v1/responses", body(MODEL)),
            "claude" => (
                "/v1/messages",
                json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
            ),
            "antigravity" => (
                "/v1beta/models/gemini-3.1-pro-low:generateContent",
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            ),
            other => panic!("no call for {other}"),
        };
        let mut rb =
            self.rig.http.post(format!("{}{path}", self.rig.t.base)).bearer_auth(&self.rig.key).json(&body);
        if provider == "claude" {
            rb = rb.header("anthropic-version", "2023-06-01");
        }
        if let Some(s) = session {
            rb = rb.header("session_id", s);
        }
        rb
    }

    async fn call(&self, provider: &str) -> Answer {
        Answer::read(self.request(provider, None).send().await.unwrap()).await
    }

    fn token_calls(&self, family: &str) -> usize {
        self.rig.calls(&format!("token:{family}"))
    }

    fn model_calls(&self, access: &str) -> usize {
        self.rig.calls(access)
    }

    async fn script_token(&self, family: &str, script: Value) {
        self.rig.script(&format!("token:{family}"), script).await;
    }

    async fn token(&mut self, id: i64) -> Value {
        self.rig.account_runtime(id).await["token"].clone()
    }

    /// The admin's "Refresh token": status, error code, Retry-After.
    async fn refresh(&mut self, id: i64) -> (StatusCode, String, Option<u64>) {
        let path = format!("/api/accounts/{id}/refresh");
        let resp = self.rig.admin.request(Method::POST, &path).json(&json!({})).send().await.unwrap();
        let status = resp.status();
        let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().parse().unwrap());
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        (status, body["error"]["code"].as_str().unwrap_or("").to_owned(), retry)
    }
}

fn status(code: u16) -> Value {
    json!({"kind": "status", "status": code})
}

fn refused(a: &Answer, retry_after: u64) {
    assert_eq!((a.status, a.code()), (StatusCode::SERVICE_UNAVAILABLE, "account_refresh_failed"), "{a:?}");
    assert_eq!(a.retry_after, Some(retry_after), "{a:?}");
}

/// CRED-1: a Codex token is refreshed on demand once it has 2 minutes or less left, never
/// before; the rotated refresh token and the account id from the id token are stored before
/// use, so a new process refreshes with the new one (the old one is spent).
#[tokio::test]
async fn codex_refreshes_within_two_minutes_of_expiry_and_stores_the_rotation() {
    let mut b = Bed::start(&[]).await;
    let id = b.oauth("codex", "at-cx", Some("cx"), 600).await;
    b.advance(600 - 121);
    assert_eq!(b.call("codex").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("cx"), b.model_calls("at-cx")), (0, 1), "121 s left: no refresh yet");
    b.advance(2);
    assert_eq!(b.call("codex").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("cx"), b.model_calls("at-cx"), b.model_calls("at-cx.1")), (1, 1, 1));
    let token = b.token(id).await;
    assert_eq!(token["expires_at"], b.now() + 864_000, "{token}");
    assert_eq!(token["refreshed_at"], b.now(), "{token}");
    assert_eq!(token["refreshable"], true);
    let (_, view) = b.rig.admin.call(Method::GET, &format!("/api/accounts/{id}"), None).await;
    assert_eq!(view["credential"]["provider_account_id"], "acct-cx", "the id token's account id is kept");
    // A refresh is no lifecycle change: the scheduler's view of the account is untouched.
    let mut b = b.restart().await;
    assert_eq!(b.token(id).await["refreshed_at"], b.now(), "stored with the sealed credential");
    b.advance(864_000);
    assert_eq!(b.call("codex").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("cx"), b.model_calls("at-cx.2")), (2, 1), "the stored rotation was used");
}

/// CRED-1: while a refresh fails, Codex may keep using a token with more than 30 s left that was
/// not refused; Claude and Antigravity one that is still valid. Antigravity refreshes with
/// Google's form body and the configured client secret (the mock refuses anything else), and
/// Google's refresh token does not rotate.
#[tokio::test]
async fn while_refreshing_fails_codex_keeps_30_s_of_grace_and_the_others_a_valid_token() {
    let mut b = Bed::start(&[]).await;
    b.oauth("codex", "at-g", Some("g"), 100).await;
    b.oauth("claude", "sk-ant-oat01-h", Some("h"), 100).await;
    b.oauth("antigravity", "ya29.k", Some("k"), 100).await;
    for family in ["g", "h", "k"] {
        b.script_token(family, json!({"steps": [status(500), status(500)]})).await;
    }
    // 100 s left, the refresh fails: every provider serves with the old token
    for (provider, family, old) in
        [("codex", "g", "at-g"), ("claude", "h", "sk-ant-oat01-h"), ("antigravity", "k", "ya29.k")]
    {
        assert_eq!(b.call(provider).await.status, StatusCode::OK, "{provider}");
        assert_eq!((b.token_calls(family), b.model_calls(old)), (1, 1), "{provider}");
    }
    // 29 s left and a second failure (a minute's backoff): Codex stops, the others go on
    b.advance(71);
    refused(&b.call("codex").await, 60);
    assert_eq!(b.call("claude").await.status, StatusCode::OK);
    assert_eq!(b.call("antigravity").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("g"), b.token_calls("h"), b.token_calls("k")), (2, 2, 2));
    assert_eq!((b.model_calls("at-g"), b.model_calls("sk-ant-oat01-h"), b.model_calls("ya29.k")), (1, 2, 2));
    // expired, still inside the backoff: nobody serves
    b.advance(30);
    for provider in ["codex", "claude", "antigravity"] {
        refused(&b.call(provider).await, 30);
    }
    // the backoff is over and the endpoint answers
    b.advance(30);
    for (provider, new) in [("codex", "at-g.1"), ("claude", "sk-ant-oat01-h.1"), ("antigravity", "ya29.k.1")]
    {
        assert_eq!(b.call(provider).await.status, StatusCode::OK, "{provider}");
        assert_eq!(b.model_calls(new), 1, "{provider}");
    }
    // Google kept its refresh token: the next refresh presents the same one again
    b.advance(3600);
    assert_eq!(b.call("antigravity").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("k"), b.model_calls("ya29.k.2")), (4, 1));
}

/// CRED-1: fifty requests on an expired account while the token endpoint is slow make exactly one
/// refresh; every one of them uses the token it brought.
#[tokio::test]
async fn fifty_concurrent_requests_on_an_expired_account_make_one_refresh() {
    let mut b = Bed::start(&[]).await;
    b.oauth("claude", "sk-ant-oat01-fifty", Some("fifty"), -10).await;
    b.script_token("fifty", json!({"delay_ms": 300})).await;
    let answers = futures_util::future::join_all((0..50).map(|_| b.call("claude"))).await;
    assert!(answers.iter().all(|a| a.status == StatusCode::OK), "{answers:?}");
    assert_eq!(b.token_calls("fifty"), 1);
    assert_eq!((b.model_calls("sk-ant-oat01-fifty"), b.model_calls("sk-ant-oat01-fifty.1")), (0, 50));
}

/// CRED-2, CRED-3: failed refreshes back off 30 s, 1 min, 2 min, 4 min, then 5 min; a longer
/// Retry-After from the token endpoint is honoured up to 1 h. Nothing is tried inside a backoff,
/// clients get 503 `account_refresh_failed` with the time left, and no cooldown is added.
#[tokio::test]
async fn failed_refreshes_follow_the_backoff_ladder_and_retry_after() {
    let mut b = Bed::start(&[]).await;
    let id = b.oauth("claude", "sk-ant-oat01-lad", Some("lad"), -10).await;
    let mut steps = vec![status(500); 6];
    steps.push(json!({"kind": "status", "status": 429, "retry_after": "1200"}));
    steps.push(json!({"kind": "status", "status": 503, "retry_after": "7200"}));
    b.script_token("lad", json!({"steps": steps})).await;
    for (n, wait) in [30, 60, 120, 240, 300, 300, 1200, 3600].into_iter().enumerate() {
        refused(&b.call("claude").await, wait);
        assert_eq!(b.token_calls("lad"), n + 1);
        b.advance(wait as i64 - 1);
        refused(&b.call("claude").await, 1);
        assert_eq!(b.token_calls("lad"), n + 1, "nothing is tried inside the backoff");
        let token = b.token(id).await;
        assert_eq!(token["backoff_until"], b.now() + 1, "{token}");
        assert!(token["last_error"].as_str().unwrap().starts_with("token_endpoint_"), "{token}");
        b.advance(1);
    }
    assert_eq!(b.call("claude").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("lad"), b.model_calls("sk-ant-oat01-lad.1")), (9, 1));
    let rt = b.rig.account_runtime(id).await;
    assert!(rt["token"]["backoff_until"].is_null() && rt["token"]["last_error"].is_null(), "{rt}");
    assert!(rt["temp_unschedulable_until"].is_null() && rt["overload_until"].is_null(), "{rt}");
    assert!(rt["models"].as_array().unwrap().iter().all(|m| m["cooling_until"].is_null()), "{rt}");
}

/// CRED-4: only an explicit grant error marks re-authorization required; an HTML error page,
/// unknown 400/401s, a rate limit and a misconfigured OAuth client only back off. A grant that
/// is gone is not tried again.
#[tokio::test]
async fn only_explicit_grant_errors_require_re_authorization() {
    let mut b = Bed::start(&[]).await;
    let transient = [
        ("html", json!({"kind": "html_error", "status": 502}), 30),
        ("unknown400", status(400), 30),
        ("unknown401", status(401), 30),
        ("limited", json!({"kind": "status", "status": 429, "retry_after": "90"}), 90),
    ];
    for (family, step, wait) in transient {
        let id = b.oauth("claude", &format!("sk-ant-oat01-{family}"), Some(family), 3600).await;
        b.script_token(family, json!({"steps": [step]})).await;
        assert_eq!(
            b.refresh(id).await,
            (StatusCode::SERVICE_UNAVAILABLE, "account_refresh_failed".into(), Some(wait))
        );
        let token = b.token(id).await;
        assert!(token["reauth_required"].is_null(), "{family}: {token}");
        assert_eq!(token["backoff_until"], b.now() + wait as i64, "{family}: {token}");
    }
    // ACC-3 "Recover state" ends a refresh backoff
    let (_, accounts) = b.rig.admin.call(Method::GET, "/api/accounts", None).await;
    let limited = accounts.as_array().unwrap().iter().find(|a| a["name"] == "sk-ant-oat01-limited").unwrap()
        ["id"]
        .as_i64()
        .unwrap();
    b.rig.action(limited, "recover").await;
    assert!(b.token(limited).await["backoff_until"].is_null());
    assert_eq!(b.refresh(limited).await.0, StatusCode::OK);
    // an account without a refresh token has nothing to refresh
    let bare = b.oauth("claude", "sk-ant-oat01-bare", None, 3600).await;
    assert_eq!(b.refresh(bare).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    // Claude's invalid_grant
    let gone = b.oauth("claude", "sk-ant-oat01-gone", Some("gone"), 3600).await;
    b.script_token("gone", json!({"steps": [{"kind": "invalid_grant"}]})).await;
    assert_eq!(b.refresh(gone).await.0, StatusCode::CONFLICT);
    assert_eq!(b.token(gone).await["reauth_required"], "invalid_grant");
    b.advance(600);
    assert_eq!(b.refresh(gone).await.0, StatusCode::CONFLICT);
    assert_eq!(b.token_calls("gone"), 1, "a grant that is gone is not tried again");
    // Codex's refresh_token_reused: two accounts imported from one grant; the second one to
    // refresh presents a spent token
    let first = b.oauth("codex", "at-twin", Some("twin"), 3600).await;
    let second = b.oauth("codex", "at-twin-copy", Some("twin"), 3600).await;
    assert_eq!(b.refresh(first).await.0, StatusCode::OK);
    assert_eq!(b.refresh(second).await.0, StatusCode::CONFLICT);
    assert_eq!(b.token(second).await["reauth_required"], "refresh_token_reused");
    assert!(b.token(first).await["reauth_required"].is_null());

    // A misconfigured client (wrong Google secret, unknown Codex client id) is no dead grant.
    let mut b =
        Bed::start(&[("SUBLANE_GOOGLE_CLIENT_SECRET", "wrong"), ("SUBLANE_CODEX_CLIENT_ID", "app_wrong")])
            .await;
    for (provider, access, family) in [("antigravity", "ya29.cfg", "cfg"), ("codex", "at-cfg", "cfg-cx")] {
        let id = b.oauth(provider, access, Some(family), 3600).await;
        assert_eq!(
            b.refresh(id).await,
            (StatusCode::SERVICE_UNAVAILABLE, "account_refresh_failed".into(), Some(30))
        );
        let token = b.token(id).await;
        assert!(token["reauth_required"].is_null(), "{provider}: {token}");
        assert_eq!(token["last_error"], "token_endpoint_401", "{provider}: {token}");
    }
}

/// CRED-4: a model endpoint's 401 on an OAuth account refreshes the token and retries once, on
/// HTTP and on a WebSocket handshake; a refreshed token refused again requires re-authorization.
/// Neither adds a credential pause or a cooldown.
#[tokio::test]
async fn a_refused_token_is_refreshed_and_the_call_retried_once() {
    let mut b = Bed::start(&[]).await;
    let id = b.oauth("codex", "at-rf", Some("rf"), 3600).await;
    b.rig.script("at-rf", json!({"steps": [status(401)]})).await;
    assert_eq!(b.call("codex").await.status, StatusCode::OK);
    assert_eq!((b.token_calls("rf"), b.model_calls("at-rf"), b.model_calls("at-rf.1")), (1, 1, 1));
    let rt = b.rig.account_runtime(id).await;
    assert!(rt["temp_unschedulable_until"].is_null(), "{rt}");
    assert_eq!(rt["token"]["rejected"], false, "{rt}");
    // refused again after its refresh: the grant is no good
    b.rig.script("at-rf.1", json!({"steps": [status(401)]})).await;
    b.rig.script("at-rf.2", json!({"steps": [status(401)]})).await;
    refused(&b.call("codex").await, 3600);
    assert_eq!((b.token_calls("rf"), b.model_calls("at-rf.2")), (2, 1));
    assert_eq!(b.token(id).await["reauth_required"], "refreshed_token_refused");
    refused(&b.call("codex").await, 3600);
    assert_eq!((b.token_calls("rf"), b.model_calls("at-rf.2")), (2, 1), "the account is left out");

    // The WebSocket path: the handshake's 401 refreshes and connects with the new token.
    b.oauth("codex", "at-ws", Some("ws"), 3600).await;
    b.rig.script("at-ws", json!({"refuse_websocket": 401})).await;
    b.ws_turn().await;
    assert_eq!((b.token_calls("ws"), b.model_calls("at-ws.1")), (1, 1));
}

/// CRED-3: a token refused upstream is stored as refused with the sealed credential, so a new
/// process refreshes before using it; a grant marked gone stays gone after a restart.
#[tokio::test]
async fn a_refused_token_and_a_gone_grant_survive_a_restart() {
    let mut b = Bed::start(&[]).await;
    let id = b.oauth("claude", "sk-ant-oat01-rj", Some("rj"), 3600).await;
    let gone = b.oauth("claude", "sk-ant-oat01-gone", Some("gone"), 3600).await;
    b.script_token("gone", json!({"steps": [{"kind": "invalid_grant"}]})).await;
    assert_eq!(b.refresh(gone).await.0, StatusCode::CONFLICT);
    b.rig.script("sk-ant-oat01-rj", json!({"steps": [status(401)]})).await;
    b.script_token("rj", json!({"steps": [status(500)]})).await;
    refused(&b.call("claude").await, 30);
    assert_eq!(b.token(id).await["rejected"], true);

    let mut b = b.restart().await;
    assert_eq!(b.token(id).await["rejected"], true);
    assert_eq!(b.token(gone).await["reauth_required"], "invalid_grant");
    for _ in 0..3 {
        assert_eq!(b.call("claude").await.status, StatusCode::OK);
    }
    assert_eq!(b.model_calls("sk-ant-oat01-rj"), 1, "the refused token is never sent again");
    assert_eq!((b.token_calls("rj"), b.model_calls("sk-ant-oat01-rj.1")), (2, 3));
    assert_eq!((b.model_calls("sk-ant-oat01-gone"), b.token_calls("gone")), (0, 1));
}

/// CRED-4: a bound conversation keeps its account while that account's refresh fails (it is told
/// `account_refresh_failed`, not moved), unbound requests go elsewhere, and the conversation comes
/// back to its account once a refresh works.
#[tokio::test]
async fn a_bound_conversation_keeps_its_account_through_refresh_failures() {
    let mut b = Bed::start(&[]).await;
    b.oauth("codex", "at-ba", Some("ba"), 3600).await;
    let send = |b: &Bed, session: Option<&'static str>| {
        let rb = b.request("codex", session);
        async move { Answer::read(rb.send().await.unwrap()).await }
    };
    assert_eq!(send(&b, Some("conv")).await.status, StatusCode::OK);
    b.oauth("codex", "at-bb", Some("bb"), 10 * 864_000).await;
    b.script_token("ba", json!({"steps": [status(500)]})).await;
    b.advance(3600);
    refused(&send(&b, Some("conv")).await, 30);
    assert_eq!(b.model_calls("at-bb"), 0, "the conversation did not move");
    assert_eq!(send(&b, None).await.status, StatusCode::OK);
    assert_eq!(b.model_calls("at-bb"), 1, "an unbound request goes to the other account");
    b.advance(30);
    assert_eq!(send(&b, Some("conv")).await.status, StatusCode::OK);
    assert_eq!((b.model_calls("at-ba.1"), b.model_calls("at-bb")), (1, 1));
}

/// Signs in at the mock's authorize page (it signs in at once) and returns where it sent the
/// browser back to: `redirect_uri?code=...&state=...`.
async fn sign_in_at(b: &mut Bed, provider: &str) -> (String, String) {
    let (status, started) = b
        .rig
        .admin
        .call(Method::POST, "/api/accounts/oauth/start", Some(json!({"provider": provider})))
        .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let authorize = started["authorize_url"].as_str().unwrap();
    assert!(authorize.starts_with(&b.rig.mock.url()), "{authorize}");
    assert!(authorize.contains("code_challenge_method=S256"), "{authorize}");
    let no_redirects =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let resp = no_redirects.get(authorize).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND, "{}", resp.text().await.unwrap());
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(started["redirect_uri"].as_str().unwrap()), "{location}");
    (started["flow_id"].as_str().unwrap().to_owned(), location)
}

/// The code and state in a callback address.
fn code_and_state(location: &str) -> (String, String) {
    let url = url::Url::parse(location).unwrap();
    let get = |k: &str| url.query_pairs().find(|(n, _)| n == k).unwrap().1.into_owned();
    (get("code"), get("state"))
}

/// The mock's grant family of a code `code-N`.
fn family(code: &str) -> String {
    format!("signin-{}", code.trim_start_matches("code-"))
}

impl Bed {
    async fn finish(&mut self, flow_id: &str, code: &str, name: &str) -> (StatusCode, Value) {
        let body = json!({"flow_id": flow_id, "code": code, "name": name, "pool_ids": [1]});
        self.rig.admin.call(Method::POST, "/api/accounts/oauth/finish", Some(body)).await
    }

    async fn import(&mut self, provider: &str, file: Value, name: &str) -> (StatusCode, Value) {
        let body = json!({"provider": provider, "file": file.to_string(), "name": name, "pool_ids": [1]});
        self.rig.admin.call(Method::POST, "/api/accounts/import", Some(body)).await
    }
}

/// CRED-5: each OAuth provider's sign-in with PKCE, the code pasted back as the whole callback
/// address, Claude's `code#state`, or the query; the new account serves with the tokens the code
/// brought (Codex with the ChatGPT account of its id token, Antigravity with its Cloud Code
/// project).
#[tokio::test]
async fn each_provider_signs_in_with_pkce_and_a_pasted_code() {
    let mut b = Bed::start(&[]).await;
    for provider in ["codex", "claude", "antigravity"] {
        let (flow, location) = sign_in_at(&mut b, provider).await;
        let (code, state) = code_and_state(&location);
        let pasted = match provider {
            "codex" => location.clone(),
            "claude" => format!("{code}#{state}"),
            _ => location.split_once('?').unwrap().1.to_owned(),
        };
        let (status, view) = b.finish(&flow, &pasted, &format!("{provider}-signed-in")).await;
        assert_eq!(status, StatusCode::CREATED, "{provider}: {view}");
        assert_eq!(view["credential"]["kind"], "oauth");
        let fam = family(&code);
        let expected_id = match provider {
            "codex" => json!(format!("acct-{fam}")),
            "antigravity" => json!("mock-project"),
            _ => Value::Null,
        };
        assert_eq!(view["credential"]["provider_account_id"], expected_id, "{provider}");
        assert_eq!(b.call(provider).await.status, StatusCode::OK, "{provider}");
        let access = match provider {
            "codex" => format!("at-{fam}"),
            "claude" => format!("sk-ant-oat01-{fam}"),
            _ => format!("ya29.{fam}"),
        };
        let calls = b.rig.mock.state.calls(&access);
        let lookups = calls.iter().filter(|c| c.path.ends_with(":loadCodeAssist")).count();
        assert_eq!(calls.len() - lookups, 1, "{provider} serves with the signed-in token");
        assert_eq!(lookups, usize::from(provider == "antigravity"), "the project is looked up once");
        assert_eq!(b.token(view["id"].as_i64().unwrap()).await["refreshable"], true);
    }
}

/// CRED-5: a sign-in's state is checked, its verifier is used once whatever the outcome, a code
/// of another sign-in is refused by the provider (PKCE), and a sign-in lasts 10 minutes.
#[tokio::test]
async fn a_sign_in_is_checked_used_once_and_expires() {
    let mut b = Bed::start(&[]).await;
    let message = |v: &Value| v["error"]["message"].as_str().unwrap_or_default().to_owned();
    // wrong state: refused, and the sign-in is spent
    let (flow, location) = sign_in_at(&mut b, "claude").await;
    let (code, _) = code_and_state(&location);
    let (status, body) = b.finish(&flow, &format!("{code}#not-the-state"), "x").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("another sign-in"), "{body}");
    let (status, body) = b.finish(&flow, &location, "x").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("already used"), "{body}");
    // a finished sign-in cannot be finished again
    let (flow, location) = sign_in_at(&mut b, "claude").await;
    assert_eq!(b.finish(&flow, &location, "once").await.0, StatusCode::CREATED);
    let (status, body) = b.finish(&flow, &location, "twice").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("already used"), "{body}");
    // another sign-in's code: the provider checks the verifier and refuses it
    let (first, _) = sign_in_at(&mut b, "codex").await;
    let (_, other) = sign_in_at(&mut b, "codex").await;
    let (other_code, _) = code_and_state(&other);
    let (status, body) = b.finish(&first, &other_code, "mixed").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("refused the code"), "{body}");
    // ten minutes
    let (flow, location) = sign_in_at(&mut b, "codex").await;
    b.advance(601);
    let (status, body) = b.finish(&flow, &location, "late").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("expired"), "{body}");
    // API-key providers have no sign-in; a bad name is refused before the code is spent
    let (status, _) = b
        .rig
        .admin
        .call(Method::POST, "/api/accounts/oauth/start", Some(json!({"provider": "openai_api"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (flow, location) = sign_in_at(&mut b, "codex").await;
    assert_eq!(b.finish(&flow, &location, " ").await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b.finish(&flow, &location, "named").await.0, StatusCode::CREATED);
    let (_, accounts) = b.rig.admin.call(Method::GET, "/api/accounts", None).await;
    let names: Vec<&str> = accounts.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["once", "named"]);
}

/// CRED-5: each CLI credential file: a valid one is stored (an expired access token is refreshed
/// at once); a spent refresh token, an expired token without one, another provider's file, an API
/// key file and junk are refused with what to do.
#[tokio::test]
async fn credential_files_are_imported_and_wrong_ones_refused() {
    let mut b = Bed::start(&[]).await;
    let message = |v: &Value| v["error"]["message"].as_str().unwrap_or_default().to_owned();
    let ms = |secs: i64| (T0 + secs) * 1000;
    // Codex auth.json: stored as it is (no expiry in it); its refresh token works
    let codex = json!({"auth_mode": "chatgpt", "OPENAI_API_KEY": null, "last_refresh": "2030-03-17T00:00:00Z",
        "tokens": {"id_token": "", "access_token": "at-imp", "refresh_token": "imp", "account_id": "acct-imp"}});
    let (status, view) = b.import("codex", codex.clone(), "codex-file").await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(view["credential"]["provider_account_id"], "acct-imp");
    assert_eq!((b.token_calls("imp"), b.refresh(view["id"].as_i64().unwrap()).await.0), (0, StatusCode::OK));
    // Claude .credentials.json with an expired access token: refreshed during the import
    let claude = |access: &str, refresh: Option<&str>, expires: i64| {
        json!({"claudeAiOauth": {"accessToken": access, "refreshToken": refresh, "expiresAt": expires,
            "scopes": ["user:inference"], "subscriptionType": "max"}})
    };
    let (status, view) =
        b.import("claude", claude("sk-ant-oat01-old", Some("cl-imp"), ms(-60)), "claude-file").await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(b.token_calls("cl-imp"), 1);
    assert_eq!(b.token(view["id"].as_i64().unwrap()).await["expires_at"], b.now() + 28_800);
    // a settings mistake is found before the file's refresh token is spent
    let (status, _) =
        b.import("claude", claude("sk-ant-oat01-dup", Some("cl-dup"), ms(-60)), "claude-file").await;
    assert_eq!((status, b.token_calls("cl-dup")), (StatusCode::CONFLICT, 0));
    // ... whose refresh token was spent since: refused with what to do, nothing stored
    b.script_token("cl-spent", json!({"steps": [{"kind": "invalid_grant"}]})).await;
    let (status, body) =
        b.import("claude", claude("sk-ant-oat01-x", Some("cl-spent"), ms(-60)), "spent").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("refresh token was refused (invalid_grant)"), "{body}");
    let (status, body) = b.import("claude", claude("sk-ant-oat01-y", None, ms(-60)), "expired").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("no refresh token"), "{body}");
    // Gemini CLI / Antigravity OAuth JSON: the Cloud Code project from the file, else looked up
    let google = json!({"access_token": "ya29.imp", "refresh_token": "g-imp", "expiry_date": ms(3600), "token_type": "Bearer"});
    let (status, view) = b.import("antigravity", google.clone(), "google-file").await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(view["credential"]["provider_account_id"], "mock-project");
    let mut with_project = google.clone();
    with_project["project_id"] = json!("proj-own");
    let (_, view) = b.import("antigravity", with_project, "google-file-2").await;
    assert_eq!(view["credential"]["provider_account_id"], "proj-own");
    // an import may set the account's own expiry, as a new account may
    let body = json!({"provider": "codex", "file": codex.to_string(), "name": "codex-until",
        "expires_at": "2031-01-02T03:04:05Z"});
    let (status, view) = b.rig.admin.call(Method::POST, "/api/accounts/import", Some(body)).await;
    assert_eq!(
        (status, &view["expires_at"]),
        (StatusCode::CREATED, &json!("2031-01-02T03:04:05Z")),
        "{view}"
    );
    // wrong files
    for (provider, file, says) in [
        ("codex", claude("a", None, ms(60)), "Claude Code"),
        ("claude", codex.clone(), "Codex auth.json"),
        ("antigravity", json!({"OPENAI_API_KEY": "sk-proj-1", "tokens": null}), "OpenAI API key"),
        ("claude", json!({"hello": "world"}), "not a Claude Code credential file"),
        ("codex", json!({"tokens": {"refresh_token": "r"}}), "no tokens.access_token"),
    ] {
        let (status, body) = b.import(provider, file, "wrong").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{provider}: {body}");
        assert!(message(&body).contains(says), "{provider}: {body}");
    }
    let body = json!({"provider": "codex", "file": "not json", "name": "junk"});
    let (status, body) = b.rig.admin.call(Method::POST, "/api/accounts/import", Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&body).contains("not JSON"), "{body}");
}

/// ACC-3 "Re-authorize": a sign-in replaces the tokens of an account that needs it, in one
/// write; its name, pools, priority and concurrency stay, the re-authorization mark goes, and a
/// conversation bound to it comes back to it.
#[tokio::test]
async fn re_authorize_keeps_settings_and_bindings() {
    let mut b = Bed::start(&[]).await;
    let id = b.oauth("codex", "at-ra", Some("ra"), 3600).await;
    let patch = json!({"priority": 3, "max_concurrency": 7});
    assert_eq!(
        b.rig.admin.call(Method::PATCH, &format!("/api/accounts/{id}"), Some(patch)).await.0,
        StatusCode::OK
    );
    let send = |b: &Bed, session: Option<&'static str>| {
        let rb = b.request("codex", session);
        async move { Answer::read(rb.send().await.unwrap()).await }
    };
    assert_eq!(send(&b, Some("conv")).await.status, StatusCode::OK);
    b.oauth("codex", "at-other", Some("other"), 3600).await;
    b.script_token("ra", json!({"steps": [{"kind": "invalid_grant"}]})).await;
    assert_eq!(b.refresh(id).await.0, StatusCode::CONFLICT);
    refused(&send(&b, Some("conv")).await, 3600);
    // the wrong ways are refused and change nothing
    let (flow, location) = sign_in_at(&mut b, "claude").await;
    let path = format!("/api/accounts/{id}/reauthorize");
    let (status, _) =
        b.rig.admin.call(Method::POST, &path, Some(json!({"flow_id": flow, "code": location}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a Claude sign-in for a Codex account");
    let both = json!({"flow_id": "f", "code": "c", "api_key": "sk-1"});
    assert_eq!(b.rig.admin.call(Method::POST, &path, Some(both)).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b.token(id).await["reauth_required"], "refresh_token_invalidated");
    // a Codex sign-in
    let (flow, location) = sign_in_at(&mut b, "codex").await;
    let (code, _) = code_and_state(&location);
    let (status, view) =
        b.rig.admin.call(Method::POST, &path, Some(json!({"flow_id": flow, "code": location}))).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (&view["name"], &view["priority"], &view["max_concurrency"], &view["pool_ids"]),
        (&json!("at-ra"), &json!(3), &json!(7), &json!([1]))
    );
    assert!(b.token(id).await["reauth_required"].is_null());
    assert_eq!(send(&b, Some("conv")).await.status, StatusCode::OK);
    assert_eq!((b.model_calls(&format!("at-{}", family(&code))), b.model_calls("at-other")), (1, 0));
    // a disabled account is re-authorized by a file; its Refresh token uses the new grant
    b.rig.action(id, "disable").await;
    let file =
        json!({"tokens": {"access_token": "at-ra2", "refresh_token": "ra2", "account_id": "acct-ra2"}});
    let (status, view) = b.rig.admin.call(Method::POST, &path, Some(json!({"file": file.to_string()}))).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(b.refresh(id).await.0, StatusCode::OK);
    assert_eq!(b.token_calls("ra2"), 1);
}

/// CRED-3/CRED-4 and the queue (ADM-9): a conversation waiting for its account's slot is answered
/// at once when that account turns out to need re-authorization, not at the queue timeout.
#[tokio::test]
async fn a_waiting_conversation_is_answered_when_its_account_needs_re_authorization() {
    let mut b = Bed::start(&[]).await;
    let id = b.oauth("codex", "at-q", Some("q"), 3600).await;
    b.rig.limit(id, 1).await;
    assert_eq!(b.call("codex").await.status, StatusCode::OK);
    b.rig.script("at-q", json!({"delay_ms": 2500})).await;
    let send = |b: &Bed| {
        let rb = b.request("codex", Some("conv-q"));
        async move { Answer::read(rb.send().await.unwrap()).await }
    };
    assert_eq!(send(&b).await.status, StatusCode::OK, "binds the conversation");
    let first = tokio::spawn(send(&b));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let waiting = tokio::spawn(send(&b));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    b.script_token("q", json!({"steps": [{"kind": "invalid_grant"}]})).await;
    assert_eq!(b.refresh(id).await.0, StatusCode::CONFLICT);
    let answer = waiting.await.unwrap();
    refused(&answer, 3600);
    assert!(started.elapsed() < std::time::Duration::from_millis(1200), "answered before the slot came back");
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
}

/// CRED-3 on the WebSocket path: a new session moves off an account without a usable token, as an
/// HTTP request does.
#[tokio::test]
async fn a_websocket_session_moves_off_an_account_without_a_usable_token() {
    let mut b = Bed::start(&[]).await;
    b.oauth("codex", "at-w1", Some("w1"), -10).await;
    b.oauth("codex", "at-w2", Some("w2"), 3600).await;
    b.script_token("w1", json!({"steps": [status(500)]})).await;
    for _ in 0..2 {
        b.ws_turn().await;
    }
    assert_eq!(b.model_calls("at-w2"), 2, "both sessions were served by the account with a token");
    assert!(b.token_calls("w1") <= 1, "the failing account was tried at most once (then backed off)");
}
