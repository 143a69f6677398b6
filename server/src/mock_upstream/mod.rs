//! A mock of every upstream provider on one 127.0.0.1 port, speaking their real wire protocols
//! at their real paths. Tests, benchmarks and the demo point SubLane's upstream URLs at it;
//! production code never knows it exists (base URLs are plain configuration).
//!
//! Every request first passes [`strict::check`]: the mock refuses what strict upstreams refuse
//! (a repeated singleton header, a body that disagrees with its length), so a wire bug of the
//! gateway fails the tests instead of reaching real providers.
//!
//! Each credential is a simulated account whose behaviour is scripted through the control API:
//! - `PUT  /__mock/accounts/{credential}`        set its [`Script`] (JSON)
//! - `GET  /__mock/accounts/{credential}/calls`  the calls it received, with headers
//! - `POST /__mock/reset`                        forget all scripts and calls

mod anthropic;
mod google;
mod oauth;
mod openai;
mod openai_ws;
mod play;
mod quota;
pub mod script;
pub mod strict;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, Method, StatusCode, Uri},
    response::IntoResponse,
    routing::{get, post, put},
};
pub use script::{Call, MockUsage, Script, Step};

/// Shared state of the mock: scripts and call logs per credential, and the OAuth grants.
#[derive(Clone, Default)]
pub struct MockState {
    inner: Arc<Mutex<Inner>>,
    grants: Arc<Mutex<oauth::Grants>>,
}

/// Calls remembered per credential (the oldest are forgotten), so a long demo or benchmark run
/// does not grow the mock without bound.
pub const MAX_CALLS_KEPT: usize = 10_000;

#[derive(Default)]
struct Inner {
    scripts: HashMap<String, Script>,
    calls: HashMap<String, VecDeque<Call>>,
    next_id: u64,
    /// Calls of a credential inside their scripted header delay now, and the most ever at once.
    waiting: HashMap<String, (u32, u32)>,
    /// Pongs a credential's WebSocket sessions got back for their keep-alive pings.
    pongs: HashMap<String, u32>,
}

/// Marks one call as inside its header delay until dropped.
struct Waiting {
    state: MockState,
    credential: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut inner = self.state.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((now, _)) = inner.waiting.get_mut(&self.credential) {
            *now = now.saturating_sub(1);
        }
    }
}

/// One model call as the handlers see it: the account's script and the step to play.
pub(crate) struct Turn {
    pub script: Script,
    pub step: Step,
    pub id: u64,
}

impl MockState {
    /// Logs a call for `credential` and takes its next step.
    pub(crate) fn begin(&self, credential: &str, call: Call) -> Turn {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.next_id += 1;
        let id = inner.next_id;
        let calls = inner.calls.entry(credential.to_owned()).or_default();
        if calls.len() >= MAX_CALLS_KEPT {
            calls.pop_front();
        }
        calls.push_back(call);
        let script = inner.scripts.entry(credential.to_owned()).or_default();
        let step = script.steps.pop_front().unwrap_or(Step::Ok);
        Turn { script: script.clone(), step, id }
    }

    /// Logs a call that is not a model call (a quota read) under `key`, taking no step.
    pub(crate) fn log(&self, key: &str, call: Call) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let calls = inner.calls.entry(key.to_owned()).or_default();
        if calls.len() >= MAX_CALLS_KEPT {
            calls.pop_front();
        }
        calls.push_back(call);
    }

    fn enter(&self, credential: &str) -> Waiting {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (now, peak) = inner.waiting.entry(credential.to_owned()).or_default();
        *now += 1;
        *peak = (*peak).max(*now);
        Waiting { state: self.clone(), credential: credential.to_owned() }
    }

    /// The most calls of `credential` that were ever inside their header delay at once: a lower
    /// bound of how many requests the gateway had in flight on that account.
    pub fn peak(&self, credential: &str) -> u32 {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.waiting.get(credential).map_or(0, |w| w.1)
    }

    /// Pongs `credential`'s WebSocket sessions got back for the pings of a stalled turn: that the
    /// client on the other end saw them.
    pub fn pongs(&self, credential: &str) -> u32 {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.pongs.get(credential).copied().unwrap_or(0)
    }

    /// The status to refuse `credential`'s next WebSocket upgrade with, if its script refuses
    /// it (counting down a limited number of refusals).
    fn websocket_refusal(&self, credential: &str) -> Option<u16> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let script = inner.scripts.get_mut(credential)?;
        let status = script.refuse_websocket?;
        match &mut script.refuse_websocket_times {
            None => Some(status),
            Some(0) => None,
            Some(left) => {
                *left -= 1;
                Some(status)
            }
        }
    }

    fn pong(&self, credential: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *inner.pongs.entry(credential.to_owned()).or_default() += 1;
    }

    /// The script of `credential` (defaults when none was set).
    pub fn script(&self, credential: &str) -> Script {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.scripts.get(credential).cloned().unwrap_or_default()
    }

    pub fn set_script(&self, credential: &str, script: Script) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.scripts.insert(credential.to_owned(), script);
    }

    pub fn calls(&self, credential: &str) -> Vec<Call> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.calls.get(credential).map(|c| c.iter().cloned().collect()).unwrap_or_default()
    }

    pub fn reset(&self) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = Inner::default();
        *self.grants() = oauth::Grants::default();
    }

    pub(crate) fn grants(&self) -> std::sync::MutexGuard<'_, oauth::Grants> {
        self.grants.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running mock upstream.
pub struct MockUpstream {
    pub addr: SocketAddr,
    pub state: MockState,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl MockUpstream {
    /// Starts on `addr` (use port 0 for a free port).
    pub async fn start(addr: SocketAddr) -> std::io::Result<MockUpstream> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = MockState::default();
        let app = router(state.clone());
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(MockUpstream { addr, state, task: Some(task) })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The SubLane settings that point every provider at this mock: model, quota, token and
    /// authorize endpoints, and a Google client secret (tests, the demo).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let m = self.url();
        vec![
            ("SUBLANE_CODEX_BASE_URL", format!("{m}/backend-api/codex")),
            ("SUBLANE_CODEX_USAGE_URL", format!("{m}/backend-api/wham/usage")),
            ("SUBLANE_CODEX_TOKEN_URL", format!("{m}/oauth/token")),
            ("SUBLANE_CODEX_AUTHORIZE_URL", format!("{m}/oauth/authorize")),
            ("SUBLANE_OPENAI_BASE_URL", format!("{m}/v1")),
            ("SUBLANE_CLAUDE_BASE_URL", m.clone()),
            ("SUBLANE_CLAUDE_TOKEN_URL", format!("{m}/v1/oauth/token")),
            ("SUBLANE_CLAUDE_AUTHORIZE_URL", format!("{m}/oauth/authorize")),
            ("SUBLANE_ANTHROPIC_BASE_URL", m.clone()),
            ("SUBLANE_ANTIGRAVITY_BASE_URL", m.clone()),
            ("SUBLANE_GOOGLE_TOKEN_URL", format!("{m}/token")),
            ("SUBLANE_GOOGLE_AUTHORIZE_URL", format!("{m}/o/oauth2/v2/auth")),
            ("SUBLANE_GOOGLE_CLIENT_SECRET", oauth::MOCK_GOOGLE_SECRET.to_owned()),
        ]
    }

    /// Waits until the server task ends (the binary runs until killed).
    pub async fn wait(mut self) {
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub fn router(state: MockState) -> Router {
    Router::new()
        .route("/__mock/accounts/{credential}", put(set_script))
        .route("/__mock/accounts/{credential}/calls", get(get_calls))
        .route("/__mock/reset", post(reset))
        // OpenAI platform and the ChatGPT Codex backend
        .route("/v1/responses", post(openai::responses_api).get(openai_ws::upgrade))
        .route("/backend-api/codex/responses", post(openai::codex_responses).get(openai_ws::upgrade))
        .route("/backend-api/codex/responses/compact", post(openai::compact))
        .route("/backend-api/codex/models", get(openai::codex_models))
        .route("/backend-api/wham/usage", get(quota::wham_usage))
        .route("/oauth/token", post(oauth::codex_token))
        .route("/oauth/authorize", get(oauth::authorize))
        .route("/o/oauth2/v2/auth", get(oauth::authorize))
        // Anthropic
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/oauth/token", post(oauth::claude_token))
        // Antigravity (Cloud Code Assist) and Google OAuth
        .route("/v1internal:streamGenerateContent", post(google::stream_generate))
        .route("/v1internal:generateContent", post(google::generate_content))
        .route("/v1internal:fetchAvailableModels", post(quota::fetch_available_models))
        .route("/v1internal:loadCodeAssist", post(google::load_code_assist))
        .route("/token", post(oauth::google_token))
        .layer(axum::middleware::from_fn(strict::check))
        .with_state(state)
}

async fn set_script(
    State(s): State<MockState>,
    Path(credential): Path<String>,
    Json(script): Json<Script>,
) -> StatusCode {
    s.set_script(&credential, script);
    StatusCode::NO_CONTENT
}

async fn get_calls(State(s): State<MockState>, Path(credential): Path<String>) -> Json<Vec<Call>> {
    Json(s.calls(&credential))
}

async fn reset(State(s): State<MockState>) -> StatusCode {
    s.reset();
    StatusCode::NO_CONTENT
}

/// The credential a request presents: bearer token, `x-api-key` or `x-goog-api-key`.
pub(crate) fn credential(headers: &HeaderMap) -> String {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    h("authorization")
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .or_else(|| h("x-api-key"))
        .or_else(|| h("x-goog-api-key"))
        .unwrap_or("anonymous")
        .to_owned()
}

/// The logged form of a call.
pub(crate) fn call(method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Call {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    Call {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect::<BTreeMap<_, _>>(),
        model: json.as_ref().and_then(|j| j["model"].as_str()).map(str::to_owned),
        stream: json.as_ref().and_then(|j| j["stream"].as_bool()),
        body_len: body.len(),
        cache_key: json
            .as_ref()
            .and_then(|j| j["prompt_cache_key"].as_str().or(j["request"]["sessionId"].as_str()))
            .map(str::to_owned),
        cache_marks: json.as_ref().map_or(0, cache_marks),
    }
}

/// The `cache_control` marks anywhere in a Messages body.
pub(crate) fn cache_marks(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Object(o) => {
            usize::from(o.contains_key("cache_control")) + o.values().map(cache_marks).sum::<usize>()
        }
        serde_json::Value::Array(a) => a.iter().map(cache_marks).sum(),
        _ => 0,
    }
}

/// A model call as its handler receives it: logged, its scripted step taken and its header
/// delay waited out (while the delay runs, the call counts toward [`MockState::peak`]).
pub(crate) struct Played {
    pub turn: Turn,
    pub body: axum::body::Bytes,
}

impl axum::extract::FromRequest<MockState> for Played {
    type Rejection = axum::response::Response;

    async fn from_request(
        req: axum::extract::Request,
        state: &MockState,
    ) -> Result<Self, axum::response::Response> {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|_| StatusCode::BAD_REQUEST.into_response())?;
        let credential = credential(&parts.headers);
        let _waiting = state.enter(&credential);
        let turn = state.begin(&credential, call(&parts.method, &parts.uri, &parts.headers, &body));
        if turn.script.delay_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(turn.script.delay_ms)).await;
        }
        if let Step::Redirect { location } = &turn.step {
            let mut resp = StatusCode::TEMPORARY_REDIRECT.into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(location) {
                resp.headers_mut().insert(axum::http::header::LOCATION, v);
            }
            return Err(resp);
        }
        Ok(Played { turn, body })
    }
}

/// A plain JSON answer with a status.
pub(crate) fn json(status: StatusCode, body: serde_json::Value) -> axum::response::Response {
    (status, Json(body)).into_response()
}
