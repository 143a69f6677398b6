//! The scheduling rig shared by the scheduler tests: SubLane and the mock upstream with Codex
//! accounts in pool 1, an admin key with unlimited member concurrency, and small helpers.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sublane::mock_upstream::MockUpstream;

use super::{Client, TestServer};

pub const MODEL: &str = "gpt-5.1-codex";

/// SubLane + mock with Codex accounts `tokens[i]` (priority `priorities[i]`) in pool 1 and a key
/// of the admin, whose member concurrency is unlimited so only the scheduler's limits apply.
pub struct Rig {
    pub t: TestServer,
    pub mock: MockUpstream,
    pub admin: Client,
    pub key: String,
    pub http: reqwest::Client,
    pub ids: Vec<i64>,
}

impl Rig {
    pub async fn start(accounts: &[(&str, i64)], env: &[(&str, &str)]) -> Rig {
        let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let t = Self::server(&mock, env, tempfile::tempdir().unwrap()).await;
        let mut rig = Rig::prepare(t, mock).await;
        for (token, priority) in accounts {
            rig.add_account("codex", token, *priority).await;
        }
        rig
    }

    /// SubLane on `dir`, pointed at `mock`, with `extra` settings.
    pub async fn server(mock: &MockUpstream, extra: &[(&str, &str)], dir: tempfile::TempDir) -> TestServer {
        Self::server_with_clock(mock, extra, dir, std::sync::Arc::new(sublane::clock::SystemClock)).await
    }

    /// As [`Rig::server`], on `clock` (a fake one makes token expiry and backoff exact).
    pub async fn server_with_clock(
        mock: &MockUpstream,
        extra: &[(&str, &str)],
        dir: tempfile::TempDir,
        clock: sublane::clock::SharedClock,
    ) -> TestServer {
        let env = Self::env(mock, extra);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        TestServer::start_full(dir, &env, clock).await
    }

    pub fn env<'a>(mock: &MockUpstream, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, String)> {
        // The first value of a name wins: the test's own settings come first.
        let mut env: Vec<(&'a str, String)> = extra.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        env.extend([
            ("SUBLANE_ADMIN_PASSWORD", super::ADMIN_PASSWORD.to_owned()),
            ("SUBLANE_WORKSPACE_CAPACITY", "1000".to_owned()),
        ]);
        env.extend(mock.env());
        env
    }

    pub async fn prepare(t: TestServer, mock: MockUpstream) -> Rig {
        let mut admin = t.admin().await;
        let (status, _) =
            admin.call(Method::PATCH, "/api/members/1", Some(json!({"concurrency_limit": 0}))).await;
        assert_eq!(status, StatusCode::OK);
        let (status, body) = admin.call(Method::POST, "/api/me/keys", Some(json!({"name": "sched"}))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let key = body["secret"].as_str().unwrap().to_owned();
        Rig { t, mock, admin, key, http: reqwest::Client::new(), ids: Vec::new() }
    }

    pub async fn add_account(&mut self, provider: &str, token: &str, priority: i64) -> i64 {
        let (status, body) = self
            .admin
            .call(
                Method::POST,
                "/api/accounts",
                Some(json!({"provider": provider, "name": token, "pool_ids": [1], "priority": priority,
                    "credentials": {"kind": "oauth", "access_token": token, "provider_account_id": "p"}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id = body["id"].as_i64().unwrap();
        self.ids.push(id);
        id
    }

    pub async fn limit(&mut self, account: i64, n: u32) {
        let path = format!("/api/accounts/{account}/limits");
        let (status, body) = self.admin.call(Method::PATCH, &path, Some(json!({"max_concurrency": n}))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    pub async fn script(&self, token: &str, script: Value) {
        let url = format!("{}/__mock/accounts/{token}", self.mock.url());
        let r = self.http.put(url).json(&script).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }

    pub fn calls(&self, token: &str) -> usize {
        self.mock.state.calls(token).len()
    }

    /// A Responses call; `session` makes it part of a conversation (RT-1).
    pub fn responses(&self, session: Option<&str>, body: Value) -> reqwest::RequestBuilder {
        let mut rb =
            self.http.post(format!("{}/v1/responses", self.t.base)).bearer_auth(&self.key).json(&body);
        if let Some(s) = session {
            rb = rb.header("session_id", s);
        }
        rb
    }

    pub async fn send(&self, session: Option<&str>, model: &str) -> Answer {
        Answer::read(self.responses(session, body(model)).send().await.unwrap()).await
    }

    pub async fn runtime(&mut self) -> Vec<Value> {
        let (status, body) = self.admin.call(Method::GET, "/api/accounts/runtime", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body.as_array().unwrap().clone()
    }

    pub async fn account_runtime(&mut self, id: i64) -> Value {
        self.runtime().await.into_iter().find(|a| a["id"] == id).unwrap()
    }

    pub async fn action(&mut self, id: i64, action: &str) {
        let path = format!("/api/accounts/{id}/{action}");
        let (status, body) = self.admin.call(Method::POST, &path, Some(json!({}))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    /// Waits until account `id` has a request in flight.
    pub async fn busy(&mut self, id: i64) {
        for _ in 0..200 {
            if self.account_runtime(id).await["in_flight"] == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("account {id} never got busy");
    }

    /// Waits until nothing is in flight or queued anywhere (slots come back).
    pub async fn settled(&mut self) {
        for _ in 0..200 {
            let rt = self.runtime().await;
            if rt.iter().all(|a| a["in_flight"] == 0 && a["queue_depth"] == 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("slots or waiters left behind: {:?}", self.runtime().await);
    }
}

pub fn body(model: &str) -> Value {
    json!({"model": model, "stream": true, "store": false, "input": [{"role": "user", "content": "hi"}]})
}

#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<u64>,
    /// `x-should-retry`, which the official SDKs obey over their own retry rules.
    pub should_retry: Option<String>,
    pub code: Option<String>,
    /// The body, when it is JSON (an error's).
    pub body: Value,
}

impl Answer {
    pub async fn read(resp: reqwest::Response) -> Answer {
        let status = resp.status();
        let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().parse().unwrap());
        let should_retry = resp.headers().get("x-should-retry").map(|v| v.to_str().unwrap().to_owned());
        let text = resp.text().await.unwrap();
        // OpenAI/Anthropic shapes carry the code as a string; Gemini's as ErrorInfo's reason.
        let body = serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
        let code = body["error"]["code"]
            .as_str()
            .or(body["error"]["details"][0]["reason"].as_str())
            .map(str::to_owned);
        Answer { status, retry_after, should_retry, code, body }
    }

    pub fn code(&self) -> &str {
        self.code.as_deref().unwrap_or("")
    }

    /// A Gemini error body's google.rpc.RetryInfo delay.
    pub fn retry_info(&self) -> Option<&str> {
        let details = self.body["error"]["details"].as_array()?;
        let info = details.iter().find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")?;
        info["retryDelay"].as_str()
    }
}

/// Which of `tokens` got exactly one more call than in `before`.
pub fn served(rig: &Rig, tokens: &[&str], before: &[usize]) -> usize {
    let grew: Vec<usize> = (0..tokens.len()).filter(|i| rig.calls(tokens[*i]) > before[*i]).collect();
    assert_eq!(grew.len(), 1, "exactly one account served the call");
    grew[0]
}

pub fn counts(rig: &Rig, tokens: &[&str]) -> Vec<usize> {
    tokens.iter().map(|t| rig.calls(t)).collect()
}
