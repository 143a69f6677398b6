//! Starting and stopping the server: open the database (taking its process lock), load the
//! credentials key, bootstrap the first admin, build the one ordered layer stack, serve until
//! shutdown (OPS-3).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, Request, State},
    http::{Method, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
    serve::ListenerExt,
};
use leptos::config::{Env, LeptosOptions};
use tokio_util::sync::CancellationToken;
use tower_http::{catch_panic::CatchPanicLayer, trace::TraceLayer};

use crate::{
    app_state::AppState,
    auth::origin,
    clock::SharedClock,
    config::Config,
    crypto::Sealer,
    db, members,
    members::Bootstrap,
    proxy::{
        auth::{Generation, Principals},
        directory::Directory,
    },
    records,
    scheduler::Scheduler,
    web,
};

/// Largest request body accepted (model requests with long histories are big).
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Why the server could not start. Each message tells the operator what to do.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error(transparent)]
    Crypto(#[from] crate::crypto::CryptoError),
    #[error("first-start setup failed: {0}")]
    Bootstrap(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// A running server.
pub struct Server {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// What first-start setup did.
    pub bootstrap: Bootstrap,
    shutdown: CancellationToken,
    /// Ends open streams (after the shutdown grace period).
    hard_stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Asks the server to stop accepting and waits until open requests are done.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// A token that stops the server when cancelled (signal handlers use it).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// A token that ends every open stream when cancelled.
    pub fn hard_stop_token(&self) -> CancellationToken {
        self.hard_stop.clone()
    }

    /// Waits until the server has stopped.
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.map_err(std::io::Error::other)?
    }
}

pub async fn start(config: Config, clock: SharedClock) -> Result<Server, StartError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|source| StartError::DataDir { path: config.data_dir.display().to_string(), source })?;
    let (db, lock) = db::open(&config.database_url).await?;
    let sealer = Sealer::load_or_create(&config.data_dir.join("credentials.key"))?;
    let bootstrap = members::bootstrap(&db, &*clock, config.admin_password.as_ref())
        .await
        .map_err(|e| StartError::Bootstrap(e.public_message()))?;

    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|source| StartError::Bind { addr: config.addr, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.addr, source })?;

    let leptos = LeptosOptions::builder()
        .output_name(app::OUTPUT_NAME)
        .site_root(config.site_root.display().to_string())
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .env(Env::PROD)
        .build();
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| StartError::Bootstrap(format!("HTTP client: {e}")))?;
    let (records, writer) =
        records::spawn_writer(db.clone(), Arc::clone(&clock), records::Retention::default());
    let generation = Generation::default();
    let hard_stop = CancellationToken::new();
    let shutdown = CancellationToken::new();
    let admission = Arc::new(crate::scheduler::admission::Admission::new(config.workspace_capacity));
    let (store, store_task) = crate::scheduler::store::spawn(db.clone());
    let scheduler = Scheduler::new(config.scheduler, Arc::clone(&clock), store);
    let binding_ttl =
        chrono::Duration::from_std(config.scheduler.binding_ttl).unwrap_or(chrono::Duration::days(1));
    let since = (clock.now() - binding_ttl).timestamp_millis();
    let loaded = crate::scheduler::store::load(&db, since)
        .await
        .map_err(|e| StartError::Bootstrap(format!("scheduler state: {e}")))?;
    scheduler.restore(loaded);
    let state = AppState {
        config: Arc::new(config),
        db: db.clone(),
        clock,
        sealer: Arc::new(sealer),
        leptos,
        http,
        records,
        principals: Arc::new(Principals::new(generation.clone())),
        directory: Arc::new(Directory::new(generation.clone(), Arc::clone(&scheduler))),
        generation,
        hard_stop: hard_stop.clone(),
        shutdown: shutdown.clone(),
        admission,
        scheduler,
    };
    let router = router(state);

    let stop = shutdown.clone();
    let listener = listener.tap_io(|tcp| {
        // Small writes (SSE events, JSON) must not wait for Nagle's algorithm.
        let _ = tcp.set_nodelay(true);
    });
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        // Every record sender is gone with the router: the writer drains its queue and ends.
        let _ = writer.await;
        let _ = store_task.await;
        db.close().await;
        drop(lock);
        served
    });
    tracing::info!(%addr, "SubLane is listening");
    Ok(Server { addr, bootstrap, shutdown, hard_stop, task })
}

/// The whole application with its layer stack, outermost last: panic -> trace -> body limit ->
/// `HEAD /` probe -> routes (the JSON API and web app add: same-origin check -> change tracking).
pub fn router(state: AppState) -> Router {
    // People and scripts (JSON API, web app): same-origin rule and cache invalidation. The model
    // proxy is authenticated by keys and skips both, keeping its per-request work small.
    let people = Router::new()
        .nest("/api", crate::api::router())
        .merge(web::router(&state))
        .layer(middleware::from_fn_with_state(state.clone(), track_changes))
        .layer(middleware::from_fn_with_state(state.clone(), origin::require_same_origin));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(crate::proxy::router())
        .merge(people)
        .layer(middleware::from_fn(head_probe))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
            // Path only: query strings may carry keys (`?key=`), and headers carry secrets.
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
        }))
        .layer(CatchPanicLayer::custom(|_panic| {
            crate::error::Error::Internal("handler panicked".into()).into_response()
        }))
        .with_state(state)
}

/// A successful change through the JSON API or the web app invalidates the proxy's caches
/// (keys, pools, accounts), so a revoked key or a disabled member stops working at once.
async fn track_changes(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && (path.starts_with("/api/") || path.starts_with("/rpc/"));
    let resp = next.run(req).await;
    if changes && (resp.status().is_success() || resp.status().is_redirection()) {
        s.generation.bump();
    }
    resp
}

/// Claude Code probes `HEAD /` before its first call; answer it without rendering a page.
async fn head_probe(req: Request, next: Next) -> Response {
    if req.method() == Method::HEAD && req.uri().path() == "/" {
        return StatusCode::OK.into_response();
    }
    next.run(req).await
}

/// `GET /healthz`: 200 when the database answers, 503 otherwise (OPS-4).
async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    let probe = tokio::time::timeout(Duration::from_secs(2), sqlx::query("SELECT 1").execute(&s.db)).await;
    match probe {
        Ok(Ok(_)) => (StatusCode::OK, Json(serde_json::json!({ "status": "ok" }))),
        _ => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({ "status": "database unavailable" }))),
    }
}
