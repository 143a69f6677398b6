//! Test harness: the real server on 127.0.0.1:0 with a temporary data directory, and a small
//! HTTP client that keeps one session cookie and sends this site's Origin on mutations.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod bed;
pub mod rig;

use std::{path::PathBuf, sync::Arc};

use reqwest::{Method, StatusCode, header};
use serde_json::{Value, json};
use sublane::{
    clock::{FakeClock, SharedClock, SystemClock},
    config::{Cli, Config},
    serve::{self, Server},
};

pub const ADMIN_PASSWORD: &str = "admin-password-123";
/// The password of members made by [`TestServer::member`].
pub const MEMBER_PASSWORD: &str = "member-password-1";

pub struct TestServer {
    pub server: Server,
    pub base: String,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts a server with a known admin password.
    pub async fn start() -> TestServer {
        Self::start_with(&[("SUBLANE_ADMIN_PASSWORD", ADMIN_PASSWORD)]).await
    }

    pub async fn start_with(env: &[(&str, &str)]) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, env).await
    }

    pub async fn start_in(dir: tempfile::TempDir, env: &[(&str, &str)]) -> TestServer {
        Self::start_full(dir, env, Arc::new(SystemClock)).await
    }

    /// Starts with a fake clock that the test advances (stored deadlines: sessions, expiry).
    pub async fn start_with_clock(clock: FakeClock) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Self::start_full(dir, &[("SUBLANE_ADMIN_PASSWORD", ADMIN_PASSWORD)], Arc::new(clock)).await
    }

    pub async fn start_full(dir: tempfile::TempDir, env: &[(&str, &str)], clock: SharedClock) -> TestServer {
        let config = config_for(dir.path().to_path_buf(), env);
        let server = serve::start(config, clock).await.unwrap();
        let base = format!("http://{}", server.addr);
        TestServer { server, base, dir }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.base)
    }

    /// A client signed in as the bootstrap admin.
    pub async fn admin(&self) -> Client {
        let mut c = self.client();
        c.sign_in("admin", ADMIN_PASSWORD).await;
        c
    }

    /// Creates a member (in the default pool) and returns a client signed in as them.
    pub async fn member(&self, admin: &Client, name: &str) -> (Client, i64) {
        let mut admin = Client { cookie: admin.cookie.clone(), ..self.client() };
        let (status, body) = admin
            .call(
                Method::POST,
                "/api/members",
                Some(json!({ "username": name, "password": MEMBER_PASSWORD, "pool_ids": [1] })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let mut c = self.client();
        c.sign_in(name, MEMBER_PASSWORD).await;
        (c, body["id"].as_i64().unwrap())
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("sublane.db")
    }

    /// The request records as JSON rows, oldest first, polled until at least `n` exist (the
    /// writer is asynchronous).
    pub async fn records(&self, n: usize) -> Vec<Value> {
        let url = format!("sqlite://{}?mode=ro", self.db_path().display());
        for _ in 0..200 {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let rows: Vec<String> = sqlx::query_scalar(
                "SELECT json_object('request_id', request_id, 'outcome', outcome, 'operation', operation,
                    'upstream_status', upstream_status, 'input', input_tokens, 'output', output_tokens,
                    'cached', cached_tokens, 'first_output_ms', first_output_ms, 'error_code', error_code,
                    'account_id', account_id, 'model', model, 'duration_ms', duration_ms,
                    'routing', json(routing))
                 FROM request_records ORDER BY id",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            pool.close().await;
            if rows.len() >= n {
                return rows.iter().map(|r| serde_json::from_str(r).unwrap()).collect();
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("fewer than {n} records were written");
    }

    /// Every byte SubLane keeps on disk for this database (main file and WAL).
    pub fn db_bytes(&self) -> Vec<u8> {
        let mut all = std::fs::read(self.db_path()).unwrap_or_default();
        all.extend(std::fs::read(self.dir.path().join("sublane.db-wal")).unwrap_or_default());
        all
    }
}

pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

pub fn config_for(data_dir: PathBuf, env: &[(&str, &str)]) -> Config {
    let mut vars: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    vars.push(("SUBLANE_ADDR".into(), "127.0.0.1:0".into()));
    vars.push(("SUBLANE_DATA_DIR".into(), data_dir.display().to_string()));
    let cli = <Cli as clap::Parser>::try_parse_from(["sublane"]).unwrap();
    Config::load(cli, |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap()
}

pub struct Client {
    pub base: String,
    pub http: reqwest::Client,
    pub cookie: Option<String>,
    /// Sent as `Origin` on mutations; `None` sends none.
    pub origin: Option<String>,
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client {
            base: base.to_owned(),
            http: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap(),
            cookie: None,
            origin: Some(base.to_owned()),
        }
    }

    pub async fn sign_in(&mut self, username: &str, password: &str) {
        let (status, body) = self
            .call(Method::POST, "/api/session", Some(json!({"username": username, "password": password})))
            .await;
        assert_eq!(status, StatusCode::OK, "sign in as {username}: {body}");
    }

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method.clone(), format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            r = r.header(header::COOKIE, c);
        }
        if method != Method::GET
            && method != Method::HEAD
            && let Some(o) = &self.origin
        {
            r = r.header(header::ORIGIN, o);
        }
        r
    }

    /// Sends JSON (if any), remembers a session cookie, returns status and JSON body (or Null).
    pub async fn call(&mut self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut r = self.request(method, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        self.absorb(&resp);
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Keeps the session cookie the server sets (or clears).
    pub fn absorb(&mut self, resp: &reqwest::Response) {
        for v in resp.headers().get_all(header::SET_COOKIE) {
            let v = v.to_str().unwrap();
            let pair = v.split(';').next().unwrap();
            if pair.starts_with("sublane_session=") {
                self.cookie = if pair == "sublane_session=" { None } else { Some(pair.to_owned()) };
            }
        }
    }
}

/// The `error.code` of an API error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}
