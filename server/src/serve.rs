//! Starting and stopping the server: open the database (taking its process lock), load the
//! credentials key, bootstrap the first admin, build the one ordered layer stack, serve until
//! shutdown (OPS-3).
//!
//! Shutdown, once the shutdown token is cancelled (SIGTERM/SIGINT in the binary):
//! 1. nothing new is admitted: every new request gets 503 with `Connection: close`, queued
//!    requests end with 503, WebSocket sessions take no new turn and close after the current one;
//! 2. open work (requests in flight, streams, WebSocket turns) gets up to the grace period;
//! 3. then the hard stop cuts whatever is left (each cut request is recorded), the listener
//!    closes, and connections still stuck (a client that stopped reading) are abandoned;
//! 4. the record and scheduler writers flush and the process lock is released: the process
//!    exits within the grace period plus a few seconds.

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    body::Body,
    extract::{ConnectInfo, Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
    serve::Listener,
};
use futures_util::FutureExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use leptos::config::{Env, LeptosOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio_io_timeout::TimeoutStream;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::{Layer as _, ServiceExt as _};
use tower_http::{limit::RequestBodyLimitLayer, trace::TraceLayer};

mod body_deadline;
pub use body_deadline::BodyTooSlow;
mod spin;
mod spread;

use crate::{
    accounts,
    app_state::{AppState, CHANGE_APPLIED, Lifecycle},
    auth::{client, client::PeerAddr, origin, throttle::LoginThrottle},
    clock::{Clock, SharedClock},
    config::Config,
    credentials::{Tokens, onboarding::Onboarding},
    crypto::Sealer,
    db,
    directory::{Directory, Generation},
    members,
    members::Bootstrap,
    proxy::{auth::Principals, error::Protocol},
    records,
    scheduler::Scheduler,
    signal::Signal,
    web,
};

/// Largest body of a JSON API or web app (server function) request, read only up to here:
/// signing in, creating keys, accounts and pools all fit in far less.
pub const API_BODY_BYTES: usize = 128 * 1024;
/// How much input hyper buffers for one connection (at most half as much again: a read may bring
/// in more than it asked for), and the largest request head, start line included: 32 KiB, nginx's
/// default for all of a request's header lines. A larger head is answered 431, by hyper, without a
/// body and before any work (see [`head_too_large`]). hyper's read buffer grows with each read a
/// large body fills, up to about this, and keeps its size for the connection's life, which
/// includes every stream the connection carries. At hyper's default (about 408 KiB), SubLane's
/// RSS grew by 310-440 KiB more for each of 300 streams opened with a 2 MiB request body (a long
/// Codex conversation, a picture) than for one opened with a small body; with this bound, by
/// 120-175 KiB more, of which the buffer is at most 48 KiB and the rest the allocator keeping
/// pages the bodies' copies used (`make bench`, memory). A large body is read in more, smaller
/// reads instead.
const CONNECTION_BUFFER: usize = 32 * 1024;
/// After the hard stop: how long cut work gets to record itself, and then how long the server
/// waits for connections to close before abandoning them.
const CUT_SETTLE: Duration = Duration::from_secs(2);

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
    #[error(
        "the credentials key {path} is missing, but the database holds the credentials of {accounts} \
         account(s), sealed with it (ID-6). Restore the key file from the backup the database came from. \
         If it is lost, start once with --replace-credentials-key true (SUBLANE_REPLACE_CREDENTIALS_KEY): \
         a new key is made, and those accounts are marked error until they are re-authorized"
    )]
    KeyMissing { path: String, accounts: usize },
    #[error(
        "the credentials key {path} opens none of the stored credentials of {accounts} account(s): it is \
         not the key they were sealed with (ID-6). Restore the key file from the backup the database came \
         from. If it is lost, start once with --replace-credentials-key true \
         (SUBLANE_REPLACE_CREDENTIALS_KEY): those accounts are marked error until they are \
         re-authorized"
    )]
    KeyWrong { path: String, accounts: usize },
    #[error("cannot check the credentials key {path}: {source}")]
    KeyCheck { path: String, source: std::io::Error },
    #[error("cannot read or mark the stored account credentials: {0}")]
    StoredCredentials(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the threads that serve connections: {0}")]
    Serve(std::io::Error),
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
    /// Starts the shutdown (OPS-3) and waits until the server has stopped.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// A token that starts the shutdown when cancelled (signal handlers use it).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// A token that ends every open stream at once when cancelled (a second signal).
    pub fn hard_stop_token(&self) -> CancellationToken {
        self.hard_stop.clone()
    }

    /// Waits until the server has stopped.
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// The client for the upstream calls around the model calls (OAuth tokens, quota reads, sign-ins):
/// pooled, TCP_NODELAY, and never following a redirect (a redirect would carry the account's
/// credential and the body to another host). Model calls have their own, `proxy::client`.
/// Its answers come [`crate::proxy::upstream::uncompressed`] (reqwest here decodes none).
pub fn upstream_client() -> reqwest::Result<reqwest::Client> {
    let mut defaults = reqwest::header::HeaderMap::new();
    crate::proxy::upstream::uncompressed(&mut defaults);
    reqwest::Client::builder()
        .default_headers(defaults)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .redirect(reqwest::redirect::Policy::none())
        // SubLane retries upstream calls itself (CD-3) and speaks HTTP/1.1 upstream, where
        // reqwest's default retries (HTTP/2 refusals) never apply; without a retry allowance it
        // also stops copying every request's headers in case of one.
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .build()
}

/// The listening socket. Every accepted connection gets TCP_NODELAY (small SSE writes must not
/// wait for Nagle) and two deadlines, so that a client cannot hold a connection (a file and its
/// buffers) open for as long as it likes: one for writes (a client that stops reading) and one
/// for request heads (a client that never sends one, or sends it a byte at a time, and an idle
/// keep-alive connection). Bodies have deadlines of their own: a model call's in
/// `proxy::request`, people's in [`body_deadline`].
pub struct Connections {
    tcp: TcpListener,
    deadlines: Deadlines,
    /// The longest a serving thread polls its connections before it sleeps (see [`spin`]).
    poll_window: Duration,
}

/// A connection's deadlines.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    /// A write that makes no progress for this long fails and closes the connection.
    write: Duration,
    /// A request head must be whole this long after the connection opened or its previous
    /// answer ended, or the connection closes (without an answer: hyper sends none).
    head: Duration,
}

impl Connections {
    /// Connections for a server whose relays give up on a client after `client_write_timeout`,
    /// and that waits `client_header_timeout` for each request head. The connection's own write
    /// deadline outlasts the relay's, so a stalled stream is ended (and recorded) by its relay
    /// first; the connection goes after. Its serving threads poll for at most `poll_window`
    /// before they sleep.
    fn new(
        tcp: TcpListener,
        client_write_timeout: Duration,
        client_header_timeout: Duration,
        poll_window: Duration,
    ) -> Self {
        let deadlines = Deadlines { write: client_write_timeout * 2, head: client_header_timeout };
        Connections { tcp, deadlines, poll_window }
    }

    /// The next connection waiting (axum's accept: it backs off on errors such as running out
    /// of files, rather than spinning).
    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        Listener::accept(&mut self.tcp).await
    }
}

/// A served connection's socket, with its write deadline, counted against its serving thread
/// while it is open (see [`spread`]).
struct Connection {
    io: Pin<Box<TimeoutStream<TcpStream>>>,
    _held: spread::Held,
    /// Set once the answer's end was sent: what is left of the lingering close. (Boxed: one
    /// pointer in every open connection, open streams included, performance goal 3.)
    linger: Option<Box<Linger>>,
}

/// How a closing connection reads on (and drops) what its client still sends: for at most
/// [`LINGER_TIME`] and [`LINGER_BYTES`], while something comes within [`LINGER_IDLE`] of the
/// close and then at least every [`LINGER_GAP`] (a lost segment's retransmission waits 200 ms
/// and more).
///
/// An answer sent before a request's body was read (a 413, a refused key) ends the connection.
/// Closed at once with the client still sending, the socket would answer the rest with a reset,
/// which can destroy the answer before the client reads it: the client would see a broken pipe
/// instead of the 413 (nginx's `lingering_close`, for the same reason). A client that sends
/// nothing (an idle keep-alive connection closed at shutdown) holds it only [`LINGER_IDLE`].
const LINGER_TIME: Duration = Duration::from_secs(5);
const LINGER_IDLE: Duration = Duration::from_millis(500);
const LINGER_GAP: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024 * 1024;

/// A lingering close in progress.
struct Linger {
    /// When reading stops if nothing comes (moved on by what does, never past `ends`).
    idle: Pin<Box<tokio::time::Sleep>>,
    ends: tokio::time::Instant,
    left: usize,
    /// Over: a later call returns at once.
    done: bool,
}

impl Connection {
    /// The socket of a connection this thread serves, ready for hyper.
    fn new(tcp: TcpStream, held: spread::Held, write_timeout: Duration) -> Self {
        let _ = tcp.set_nodelay(true);
        let mut io = TimeoutStream::new(tcp);
        io.set_write_timeout(Some(write_timeout));
        Connection { io: Box::pin(io), _held: held, linger: None }
    }
}

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        spin::active();
        self.get_mut().io.as_mut().poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        spin::active();
        self.get_mut().io.as_mut().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        spin::active();
        self.get_mut().io.as_mut().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.get_mut().io.as_mut().poll_flush(cx)
    }

    /// Sends the end of the answers (FIN), then reads and drops what the client still sends
    /// until it closes its side or a bound of [`LINGER_TIME`] is reached.
    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.linger.is_none() {
            std::task::ready!(this.io.as_mut().poll_shutdown(cx))?;
            let now = tokio::time::Instant::now();
            let idle = Box::pin(tokio::time::sleep_until(now + LINGER_IDLE));
            let (ends, left) = (now + LINGER_TIME, LINGER_BYTES);
            this.linger = Some(Box::new(Linger { idle, ends, left, done: false }));
        }
        let Some(linger) = this.linger.as_mut() else { return Poll::Ready(Ok(())) };
        let mut scratch = [std::mem::MaybeUninit::uninit(); 8192];
        while !linger.done {
            let mut buf = tokio::io::ReadBuf::uninit(&mut scratch);
            match tokio::io::AsyncRead::poll_read(this.io.as_mut(), cx, &mut buf) {
                // the client's side closed (or failed): nothing more can come
                Poll::Ready(Ok(())) if buf.filled().is_empty() => linger.done = true,
                Poll::Ready(Err(_)) => linger.done = true,
                Poll::Ready(Ok(())) => {
                    linger.left = linger.left.saturating_sub(buf.filled().len());
                    let now = tokio::time::Instant::now();
                    linger.done = linger.left == 0 || now >= linger.ends;
                    linger.idle.as_mut().reset((now + LINGER_GAP).min(linger.ends));
                }
                Poll::Pending => {
                    std::task::ready!(linger.idle.as_mut().poll(cx));
                    linger.done = true;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// ID-6: the credentials key must be the one the stored credentials were sealed with. A database
/// restored without its key file (or beside another one) would otherwise start with a new key and
/// skip every account, said only by a log line per account, every call answered
/// `no_available_account`. Such a start is refused, unless the operator says the key is lost
/// (`replace_credentials_key`): then a missing key is made anew, and each account whose
/// credentials it cannot open is marked `error` and for re-authorization, its credentials kept.
/// Accounts so marked are left out of the check, and come back by themselves at a start whose
/// key opens their credentials (the old key found again).
async fn credentials_key(
    db: &sqlx::SqlitePool,
    config: &Config,
    clock: &dyn Clock,
) -> Result<Sealer, StartError> {
    let path = config.data_dir.join("credentials.key");
    let shown = path.display().to_string();
    let failed = |e: crate::error::Error| StartError::StoredCredentials(e.public_message());
    let stored = accounts::sealed_credentials(db).await.map_err(failed)?;
    let in_use = stored.iter().filter(|(_, _, replaced)| !replaced).count();
    let missing =
        !path.try_exists().map_err(|source| StartError::KeyCheck { path: shown.clone(), source })?;
    let replace = config.replace_credentials_key;
    if missing && in_use > 0 && !replace {
        return Err(StartError::KeyMissing { path: shown, accounts: in_use });
    }
    let sealer = Sealer::load_or_create(&path)?;
    // (in use and unopened; marked and opening again)
    let unreadable: Vec<_> =
        stored.iter().filter(|(_, sealed, r)| !r && !accounts::opens(&sealer, sealed)).collect();
    if in_use > 0 && unreadable.len() == in_use && !replace {
        return Err(StartError::KeyWrong { path: shown, accounts: in_use });
    }
    for (id, _, _) in stored.iter().filter(|(_, sealed, r)| *r && accounts::opens(&sealer, sealed)) {
        accounts::credentials_readable_again(db, *id, clock).await.map_err(failed)?;
        tracing::info!(account_id = id, "credentials open with the credentials key again");
    }
    if replace {
        for (id, sealed, _) in unreadable {
            accounts::credentials_unreadable(db, *id, sealed, clock).await.map_err(failed)?;
            tracing::warn!(account_id = id, "credentials key replaced: the account needs new credentials");
        }
    }
    Ok(sealer)
}

pub async fn start(config: Config, clock: SharedClock) -> Result<Server, StartError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|source| StartError::DataDir { path: config.data_dir.display().to_string(), source })?;
    let (db, lock) = db::open(&config.database_url).await?;
    let sealer = Arc::new(credentials_key(&db, &config, &*clock).await?);
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
    let http = upstream_client().map_err(|e| StartError::Bootstrap(format!("HTTP client: {e}")))?;
    let model_http = crate::proxy::client::Client::from_env()
        .map_err(|e| StartError::Bootstrap(format!("model call HTTP client: {e}")))?
        .with_lanes(config.serve_threads);
    let metrics = Arc::new(crate::metrics::Metrics::new(config.observability.metrics));
    let (records, writer) = records::spawn_writer(
        db.clone(),
        Arc::clone(&clock),
        records::Retention::default(),
        config.time_zone,
        Arc::clone(&metrics),
    );
    let generation = Generation::default();
    let hard_stop = CancellationToken::new();
    let shutdown = CancellationToken::new();
    let admission = Arc::new(crate::scheduler::admission::Admission::new(config.workspace_capacity));
    let (store, store_task) = crate::scheduler::store::spawn(db.clone());
    let scheduler = Scheduler::new(config.scheduler, Arc::clone(&clock), store.clone());
    let binding_ttl =
        chrono::Duration::from_std(config.scheduler.binding_ttl).unwrap_or(chrono::Duration::days(1));
    let since = (clock.now() - binding_ttl).timestamp_millis();
    let loaded = crate::scheduler::store::load(&db, since)
        .await
        .map_err(|e| StartError::Bootstrap(format!("scheduler state: {e}")))?;
    scheduler.restore(loaded);
    scheduler.set_catalogues(config.models.clone());
    let lifecycle = Arc::new(Lifecycle {
        shutdown: Signal::new(shutdown.clone()),
        hard_stop: Signal::new(hard_stop.clone()),
        tasks: TaskTracker::new(),
    });
    let tasks = lifecycle.tasks.clone();
    let connections = Connections::new(
        listener,
        config.client_write_timeout,
        config.client_header_timeout,
        config.serve_poll,
    );
    let serve_threads = config.serve_threads;
    let grace = config.shutdown_grace;
    let tokens = Arc::new(Tokens::new(
        http.clone(),
        config.upstream.clone(),
        config.oauth.clone(),
        db.clone(),
        Arc::clone(&sealer),
        Arc::clone(&clock),
        Arc::clone(&scheduler),
        Arc::clone(&metrics),
    ));
    let onboarding = Arc::new(Onboarding::new(
        http.clone(),
        config.upstream.clone(),
        config.oauth.clone(),
        Arc::clone(&clock),
    ));
    let quota = Arc::new(crate::quota::Quota::new(
        db.clone(),
        Arc::clone(&clock),
        Arc::clone(&scheduler),
        crate::quota::reads::Reads::new(
            http.clone(),
            config.upstream.clone(),
            Arc::clone(&tokens),
            Arc::clone(&admission),
            Arc::clone(&metrics),
        ),
    ));
    quota.load().await.map_err(|e| StartError::Bootstrap(format!("quota observations: {e}")))?;
    let workspace_settings =
        Arc::new(crate::workspace_settings::Live::new(&config, config.configured.clone()));
    let breaker = Arc::new(
        crate::breaker::Breaker::load(&db)
            .await
            .map_err(|e| StartError::Bootstrap(format!("key circuit breaker: {e}")))?,
    );
    let budgets = Arc::new(crate::budgets::Budgets::new(config.time_zone, config.prices.clone()));
    budgets.load(&db, clock.now()).await.map_err(|e| StartError::Bootstrap(format!("budgets: {e}")))?;
    let state = AppState::new(crate::app_state::Shared {
        config: Arc::new(config),
        db: db.clone(),
        clock: Arc::clone(&clock),
        sealer,
        leptos,
        http,
        model_http,
        records: records.clone(),
        principals: Arc::new(Principals::new(generation.clone())),
        directory: Arc::new(Directory::new(
            generation.clone(),
            Arc::clone(&clock),
            Arc::clone(&scheduler),
            Arc::clone(&tokens),
        )),
        tokens,
        onboarding,
        generation,
        lifecycle,
        admission,
        scheduler,
        quota,
        workspace_settings,
        logins: Arc::new(LoginThrottle::default()),
        breaker,
        budgets,
        metrics,
    });
    crate::workspace_settings::load(&state)
        .await
        .map_err(|e| StartError::Bootstrap(format!("workspace settings: {e}")))?;
    let app = router(state);

    let (stop, cut) = (shutdown.clone(), hard_stop.clone());
    let Serving { ended, closed, abandon, release } =
        serve(serve_threads, connections, app, "sublane-serve").await.map_err(StartError::Serve)?;
    // However this task ends, even dropped unfinished with its runtime, the serving threads stop.
    let stop_threads = [&closed, &abandon, &release].map(|t| t.clone().drop_guard());
    let task = tokio::spawn(async move {
        let _stop_threads = stop_threads;
        stop.cancelled().await;
        tracing::info!(
            grace_secs = grace.as_secs(),
            "shutting down: admitting nothing new; open requests may finish"
        );
        tasks.close();
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!(open = tasks.len(), "grace period over; ending open requests and streams");
        }
        cut.cancel();
        let _ = tokio::time::timeout(CUT_SETTLE, tasks.wait()).await;
        closed.cancel();
        let served = match tokio::time::timeout(CUT_SETTLE, ended).await {
            Ok(served) => served,
            Err(_) => {
                tracing::warn!(
                    "connections still open after the hard stop (clients not reading); closing anyway"
                );
                abandon.cancel();
                Ok(())
            }
        };
        // No request can be recorded any more: flush what is queued and stop.
        records.close();
        store.close();
        let _ = writer.await;
        let _ = store_task.await;
        release.cancel();
        db.close().await;
        drop(lock);
        tracing::info!("stopped");
        served
    });
    tracing::info!(%addr, "SubLane is listening");
    Ok(Server { addr, bootstrap, shutdown, hard_stop, task })
}

/// Serves `app` on `listener` as SubLane serves its own router (its serving threads, named
/// `{name}-1` and on; hyper's HTTP/1 connection; the default write deadline) until the returned
/// future is dropped. For the benches' stack floor (`benches/support/floor.rs`): what a call
/// costs on this stack before SubLane does anything of its own. Each thread calls through its
/// own pool of a model-call client made `with_lanes(threads)`, as SubLane's do.
#[doc(hidden)]
pub async fn serve_forever<A: Serves>(
    listener: TcpListener,
    threads: usize,
    app: A,
    name: &'static str,
) -> std::io::Result<()> {
    let connections = Connections::new(
        listener,
        crate::config::DEFAULT_CLIENT_WRITE_TIMEOUT,
        crate::config::DEFAULT_CLIENT_HEADER_TIMEOUT,
        crate::config::DEFAULT_SERVE_POLL,
    );
    let Serving { ended, closed, abandon, release } = serve(threads, connections, app, name).await?;
    let _keep = [closed, abandon, release].map(CancellationToken::drop_guard);
    ended.await
}

/// Connections being served, and how they end.
struct Serving {
    /// Resolves once no thread accepts any more and the connections are done (or abandoned);
    /// with an error if a thread ended without getting there.
    ended: futures_util::future::BoxFuture<'static, std::io::Result<()>>,
    /// Stops accepting; open connections may finish.
    closed: CancellationToken,
    /// Stops serving the connections still open (on a serving thread they are dropped when its
    /// runtime ends, after `release`).
    abandon: CancellationToken,
    /// Lets the serving threads end their runtimes. Until then, what their calls spawned (token
    /// refresh turns, quota writes, record hand-overs) runs on, and so do the connections the
    /// shared HTTP client opened on them, which any thread's calls may be using.
    release: CancellationToken,
}

/// Starts serving `connections` with `app`. With `threads` > 0 it serves on that many threads
/// (named `{name}-1` and on, which the benches' CPU figures go by),
/// each running a single-threaded runtime that accepts from the one listening socket: a
/// connection, the tasks its calls spawn and the upstream connections they use (each thread has
/// its own pool, see [`crate::proxy::client::enter_lane`]) stay on one thread, so a call wakes no
/// other serving thread. On a two-core machine that took a proxied call from about 59 to 36 us of CPU.
/// The cost: work never moves between threads, so connections are spread only as they are
/// accepted (evenly by count, see [`spread`]), and a long computation holds up the other
/// connections of its thread, and the new ones handed to it while it holds the fewest. With 0 it
/// serves on the calling runtime (tests that watch what its thread logs).
async fn serve<A: Serves>(
    threads: usize,
    connections: Connections,
    app: A,
    name: &'static str,
) -> std::io::Result<Serving> {
    let (closed, abandon, release) =
        (CancellationToken::new(), CancellationToken::new(), CancellationToken::new());
    if threads == 0 {
        let lane = spread::lanes(1).swap_remove(0);
        let serving = tokio::spawn(serve_until(connections, lane, app, closed.clone(), abandon.clone()));
        let ended = Box::pin(async move { serving.await.map_err(std::io::Error::other) });
        return Ok(Serving { ended, closed, abandon, release });
    }
    let Connections { tcp, deadlines, poll_window } = connections;
    let listener = tcp.into_std()?;
    let stop = || [&closed, &abandon, &release].into_iter().for_each(CancellationToken::cancel);
    let (mut readies, mut ends) = (Vec::with_capacity(threads), Vec::with_capacity(threads));
    for (lane, spread_lane) in (1..=threads).zip(spread::lanes(threads)) {
        let tokens = (closed.clone(), abandon.clone(), release.clone(), app.clone());
        let (ready, is_ready) = tokio::sync::oneshot::channel::<std::io::Result<()>>();
        let (done, end) = tokio::sync::oneshot::channel();
        let started = listener.try_clone().and_then(|listener| {
            std::thread::Builder::new().name(format!("{name}-{lane}")).spawn(move || {
                let (closed, abandon, release, app) = tokens;
                crate::proxy::client::enter_lane(lane);
                let mut builder = tokio::runtime::Builder::new_current_thread();
                let keeper = spin::hook(&mut builder, poll_window);
                let runtime = match builder.enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => return drop(ready.send(Err(e))),
                };
                runtime.block_on(async move {
                    let tcp = match TcpListener::from_std(listener) {
                        Ok(tcp) => tcp,
                        Err(e) => return drop(ready.send(Err(e))),
                    };
                    let _ = ready.send(Ok(()));
                    if let Some(keeper) = keeper {
                        tokio::spawn(keeper);
                    }
                    serve_until(
                        Connections { tcp, deadlines, poll_window },
                        spread_lane,
                        app,
                        closed,
                        abandon,
                    )
                    .await;
                    let _ = done.send(());
                    release.cancelled().await;
                });
                // Dropping the runtime ends whatever its tasks still had open.
            })
        });
        if let Err(e) = started {
            stop();
            return Err(e);
        }
        readies.push(is_ready);
        ends.push(end);
    }
    // Started means accepting on every thread: a thread that cannot is a start error, not a log
    // line while connections wait unserved.
    for ready in readies {
        let ready =
            ready.await.unwrap_or_else(|_| Err(std::io::Error::other("a serving thread ended at its start")));
        if let Err(e) = ready {
            stop();
            return Err(e);
        }
    }
    let ended = Box::pin(async move {
        let mut all = Ok(());
        for end in ends {
            // (dropped unsent when the thread panicked)
            all = all.and(end.await.map_err(|_| std::io::Error::other("a serving thread ended unfinished")));
        }
        all
    });
    Ok(Serving { ended, closed, abandon, release })
}

/// Serves until `closed` (open connections may finish) or `abandon` (they are left to their
/// runtime: a serving thread's ends after `release`).
async fn serve_until<A: Serves>(
    mut connections: Connections,
    mut lane: spread::Lane,
    app: A,
    closed: CancellationToken,
    abandon: CancellationToken,
) {
    // This thread's own token: every wake of every connection polls it, and a token's state sits
    // behind a lock that the original's other holders (the other serving threads) would share.
    let closed = closed.child_token();
    let serving = async move {
        let open = TaskTracker::new();
        let deadlines = connections.deadlines;
        let http1 = http1(deadlines.head);
        let serve = |(tcp, peer, held)| {
            let io = Connection::new(tcp, held, deadlines.write);
            open.spawn(serve_connection(io, PeerAddr(peer), &http1, app.clone(), &closed));
        };
        loop {
            tokio::select! {
                (tcp, peer) = connections.accept() => lane.place(tcp, peer).into_iter().for_each(&serve),
                Some(handed) = lane.handed() => serve(handed),
                () = closed.cancelled() => break,
            }
        }
        // Connections handed here and not yet taken are served like those already open; no more
        // are handed (a thread still accepting serves what it accepts itself).
        lane.stop().await.into_iter().for_each(&serve);
        // Closed at once, so new clients are refused instead of left in the backlog; each open
        // connection ends once its exchange in progress has.
        drop(connections);
        open.close();
        open.wait().await;
    };
    tokio::select! {
        () = serving => {}
        () = abandon.cancelled() => {}
    }
}

/// hyper's HTTP/1 server settings for a serving thread's connections (made once, cloned for each):
/// the [`CONNECTION_BUFFER`] bound and the head deadline.
///
/// hyper's head deadline runs only while hyper waits for a head: from the connection's start and
/// from each answer's end (written and flushed), never while a request's body is read or its
/// answer awaited or written, so a long stream is not cut by it, nor is a WebSocket session
/// (hyper hands the connection over at the upgrade). A connection past it is closed without an
/// answer: hyper sends none, and an idle one simply ends.
fn http1(head_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .max_buf_size(CONNECTION_BUFFER)
        .max_header_size(CONNECTION_BUFFER)
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout);
    http1
}

/// Serves HTTP/1.1 on one connection, with upgrades (the Codex WebSocket), until the client
/// leaves or, after `closed`, its exchange in progress ends.
///
/// hyper's own HTTP/1 connection, not hyper-util's `auto` one that `axum::serve` uses: SubLane
/// builds no HTTP/2 server, yet `auto` first reads a few bytes to tell the versions apart and
/// hands them back as hyper's whole first read, so hyper's head parse needed a second read,
/// which doubled its 8 KiB read buffer: 8 KiB more for every open connection, every open stream
/// included (performance goal 3).
///
/// Not an `async fn`: the task lives as long as the connection, so its size is paid per open
/// stream (performance goal 3). As an `async fn` (its arguments kept beside the connection made
/// from them, the connection pinned, a `select!`) it was 1,792 bytes in a release build; made
/// here and served by [`Served`], 760 (measured: 0.7 KiB less memory per open stream).
fn serve_connection<A: Serves>(
    io: Connection,
    peer: PeerAddr,
    http1: &hyper::server::conn::http1::Builder,
    app: A,
    closed: &CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let service = axum::Extension(ConnectInfo(peer))
        .layer(app)
        .map_request(|req: Request<hyper::body::Incoming>| req.map(Body::new));
    let conn = http1.serve_connection(TokioIo::new(io), PerCall(service)).with_upgrades();
    Served { conn, closed: closed.clone().cancelled_owned(), closing: false }.map(report_served)
}

/// A connection's service for hyper: the tower stack, its call's future boxed.
///
/// hyper keeps room for the service's future for the connection's whole life (a box made with
/// the connection). With the stack's future in it, as hyper-util's `TowerToHyperService` gives
/// it (a clone of the stack and the request, held until the stack is ready, then the front
/// door's future), that room was about 350 bytes on every open connection, every open stream
/// and idle keep-alive one included (performance goal 3). Boxed, the room is two words, and a
/// call's future is allocated for the call and freed with its answer.
#[derive(Clone)]
struct PerCall<S>(S);

impl<S, R> hyper::service::Service<R> for PerCall<S>
where
    S: tower::Service<R> + Clone + Send + 'static,
    S::Future: Send,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures_util::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn call(&self, req: R) -> Self::Future {
        Box::pin(self.0.clone().oneshot(req))
    }
}

pin_project_lite::pin_project! {
    /// A connection being served: once `closed`, it is told to shut down gracefully (an idle one
    /// closes at once, one in an exchange after its answer, and no other begins) and served until
    /// it has.
    struct Served<C> {
        #[pin]
        conn: C,
        #[pin]
        closed: tokio_util::sync::WaitForCancellationFutureOwned,
        closing: bool,
    }
}

impl<S, B> std::future::Future
    for Served<hyper::server::conn::http1::UpgradeableConnection<TokioIo<Connection>, S>>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Output = hyper::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let mut this = self.project();
        // The connection first: a request that came as the close did is read and answered (the
        // front door's 503, `Connection: close`). Told to shut down first, hyper closes a
        // connection that has read nothing without reading it, and the client cannot tell
        // whether its request was served. (A connection accepted after the close is still
        // closed unread when tokio has not yet seen it readable at its first poll, as before.)
        let served = this.conn.as_mut().poll(cx);
        if served.is_ready() || *this.closing || this.closed.poll(cx).is_pending() {
            return served;
        }
        *this.closing = true;
        this.conn.as_mut().graceful_shutdown();
        this.conn.poll(cx)
    }
}

/// Says how a connection ended, when that is worth saying.
fn report_served(served: hyper::Result<()>) {
    match served {
        Err(e) if e.is_parse_too_large() => head_too_large(),
        Err(e) if e.is_timeout() => {
            tracing::debug!("closed a connection that sent no whole request head in time (idle or slow)");
        }
        Err(e) => tracing::trace!(error = %e, "a connection ended with an error"),
        Ok(()) => {}
    }
}

/// Says that a request head over [`CONNECTION_BUFFER`] was refused: hyper answered it 431 and
/// closed the connection, and the call never reached SubLane (no record, no request id). A client
/// or a proxy in front that sends such heads sends them with every call, so it is said at warn
/// level at most once a minute, and at debug level otherwise.
fn head_too_large() {
    static WARNED_AT: AtomicU64 = AtomicU64::new(0);
    static SINCE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    // (seconds from the first refusal, plus a minute: the first one always warns)
    let now = SINCE.get_or_init(std::time::Instant::now).elapsed().as_secs() + 60;
    let last = WARNED_AT.load(Ordering::Relaxed);
    if now >= last + 60 && WARNED_AT.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        tracing::warn!(
            limit_kib = CONNECTION_BUFFER / 1024,
            "refused a request whose head (start line and headers) is over the limit, with 431; \
             a proxy in front that adds large headers would do this (said once a minute at most)"
        );
    } else {
        tracing::debug!(
            limit_kib = CONNECTION_BUFFER / 1024,
            "refused a request head over the limit, with 431"
        );
    }
}

/// The whole application: the [`FrontDoor`] (panics, 503 while shutting down, the `HEAD /` probe,
/// in-flight tracking) around the routes. People's routes (the JSON API and the web app) add
/// layers, outermost first: trace -> body limit -> body deadline -> client address -> same-origin
/// check -> change tracking. The model proxy reads its own bodies after authenticating the key (see
/// `proxy::call`), so it has no body limit layer and stays lean.
pub type App = FrontDoor<Router>;

/// What the serving threads serve: the [`App`], or the benches' floor (a bare router).
pub trait Serves:
    tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<A> Serves for A where
    A: tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Builds the [`App`].
pub fn router(state: AppState) -> App {
    let people = Router::new()
        .nest("/api", crate::api::router())
        .merge(web::router(&state))
        .layer(middleware::from_fn_with_state(state.clone(), track_changes))
        .layer(middleware::from_fn_with_state(state.clone(), origin::require_same_origin))
        .layer(middleware::from_fn_with_state(state.clone(), client::attach))
        .layer(middleware::map_request(body_deadline::in_time))
        .layer(RequestBodyLimitLayer::new(API_BODY_BYTES))
        // The API's and web app's lines name their route; model calls name their request id
        // (see `proxy::call`) and skip this span, which cost 1 % of CPU at c=64.
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
            // Path only: query strings may carry keys (`?key=`), and headers carry secrets.
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
        }));
    let lifecycle = Arc::clone(&state.lifecycle);
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(crate::metrics::endpoint::scrape))
        .merge(crate::proxy::router())
        .merge(people)
        .with_state(state);
    FrontDoor { inner: routes, lifecycle }
}

/// What every request passes first:
/// - OPS-3: once shutdown starts nothing new is admitted: 503 with `Connection: close`, in the
///   caller's protocol shape (the model paths) or the API's;
/// - Claude Code probes `HEAD /` before its first call: answered without rendering a page;
/// - every request in flight is work a shutdown waits for (up to the grace period);
/// - a panic while serving one request is that request's 500, not the connection's end.
///
/// A service around the whole router rather than router layers (`from_fn`, `CatchPanicLayer`):
/// axum wraps every route in a router layer apart and, per call, clones the boxed route and boxes
/// its future at each level, `from_fn` clones and boxes once more, and `CatchPanic` boxes the
/// response body. Here a call costs none of that (performance goal 1).
#[derive(Clone)]
pub struct FrontDoor<S> {
    inner: S,
    lifecycle: Arc<Lifecycle>,
}

impl<S> tower::Service<Request> for FrontDoor<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = FrontDoorFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if self.lifecycle.shutdown.is_cancelled() {
            return FrontDoorFuture::Answered { resp: Some(draining(req.uri().path())) };
        }
        if req.method() == Method::HEAD && req.uri().path() == "/" {
            return FrontDoorFuture::Answered { resp: Some(StatusCode::OK.into_response()) };
        }
        let (parts, body) = req.into_parts();
        let read = (!http_body::Body::is_end_stream(&body)).then(|| {
            let drainable = http_body::Body::size_hint(&body).upper().is_some_and(|n| n <= DRAIN_MAX)
                && connection_may_stay(&parts);
            Arc::new(BodyWatch::new(drainable))
        });
        let body = match &read {
            Some(read) => Body::new(Watched { body, watch: Arc::clone(read) }),
            None => body,
        };
        let req = Request::from_parts(parts, body);
        let inner = &mut self.inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || inner.call(req))) {
            Ok(serving) => FrontDoorFuture::Serving {
                serving: std::panic::AssertUnwindSafe(serving).catch_unwind(),
                in_flight: self.lifecycle.tasks.token(),
                read,
            },
            Err(_) => {
                let mut resp = panicked();
                if read.is_some() {
                    // (the routes never read its body: the connection ends rather than wait for it)
                    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                FrontDoorFuture::Answered { resp: Some(resp) }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A call through the [`FrontDoor`]: answered there, or served by the routes.
    #[project = Call]
    pub enum FrontDoorFuture<F> {
        Answered { resp: Option<Response> },
        Serving {
            #[pin]
            serving: futures_util::future::CatchUnwind<std::panic::AssertUnwindSafe<F>>,
            // (work a shutdown waits for, from the call until its answer, a drain included)
            in_flight: tokio_util::task::task_tracker::TaskTrackerToken,
            read: Option<Arc<BodyWatch>>,
        },
        // A refusal waiting while the rest of its request's small body is read (see [`drain`]).
        Draining { draining: Pin<Box<dyn std::future::Future<Output = Response> + Send>> },
    }
}

impl<F> std::future::Future for FrontDoorFuture<F>
where
    F: std::future::Future<Output = Result<Response, std::convert::Infallible>>,
{
    type Output = Result<Response, std::convert::Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let draining = match self.as_mut().project() {
            // (polled again after its answer, which hyper never does: a 500 rather than a panic)
            Call::Answered { resp } => {
                return std::task::Poll::Ready(Ok(resp.take().unwrap_or_else(panicked)));
            }
            Call::Draining { draining } => return draining.as_mut().poll(cx).map(Ok),
            Call::Serving { serving, in_flight, read } => {
                let mut resp = match std::task::ready!(serving.poll(cx)) {
                    Ok(Ok(resp)) => resp,
                    Ok(Err(never)) => match never {},
                    Err(_panic) => panicked(),
                };
                let refused = resp.status().is_client_error() || resp.status().is_server_error();
                let Some(watch) = read.as_ref().filter(|w| refused && !w.read.load(Ordering::Relaxed)) else {
                    return std::task::Poll::Ready(Ok(resp));
                };
                // A body refused before it was read to its end (too large; a key, limit or origin
                // checked from the headers): hyper keeps such a connection only when the rest of
                // the body happens to be in already. A small rest is read first; otherwise the
                // client is told the connection ends, or it may send its next request on it as
                // it closes. (A success that leaves a small body unread keeps it.)
                // (a shutdown closes the tracker as it begins: then nothing more is read)
                let tasks = in_flight.task_tracker();
                match watch.left_unread() {
                    Some(body) if !tasks.is_closed() => Box::pin(tasks.track_future(drain(body, resp))),
                    _ => {
                        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                        return std::task::Poll::Ready(Ok(resp));
                    }
                }
            }
        };
        self.set(FrontDoorFuture::Draining { draining });
        self.poll(cx)
    }
}

/// Most of a refused request's body that is read (and dropped) to keep its connection open, and
/// how long that read may take. Under overload every refusal would otherwise cost the client a
/// new connection, and the gateway an accept and a close, when it can least afford them (in
/// `make bench`'s open-loop run, a backlog's refusals opened thousands of connections).
const DRAIN_MAX: u64 = 64 * 1024;
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// Whether hyper may keep the connection after this request: not when the client said it ends
/// it, nor for HTTP/1.0 (reading the rest of a refused body would then be wasted).
fn connection_may_stay(parts: &axum::http::request::Parts) -> bool {
    let closes = parts.headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| v.split(',').any(|token| token.trim().eq_ignore_ascii_case("close")))
    });
    // (a client that waits for `100 Continue` is not asked for a body only to drop it)
    parts.version >= axum::http::Version::HTTP_11 && !closes && !parts.headers.contains_key(header::EXPECT)
}

/// Reads the rest of a refused request's small body and drops it, then answers with `resp`: the
/// connection can carry the client's next request. A body that errs, grows past [`DRAIN_MAX`],
/// stops short of its length (hyper's body ends early when the connection fails) or does not end
/// within [`DRAIN_WAIT`] (the client is slow or gone) ends the connection instead.
async fn drain(mut body: Body, mut resp: Response) -> Response {
    use http_body_util::BodyExt as _;
    let read_all = async {
        let mut left = DRAIN_MAX;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            let len = frame.data_ref().map_or(0, |d| d.len() as u64);
            let Some(rest) = left.checked_sub(len) else { return false };
            left = rest;
        }
        http_body::Body::is_end_stream(&body)
    };
    if !matches!(tokio::time::timeout(DRAIN_WAIT, read_all).await, Ok(true)) {
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// A handler that panicked: its caller gets a 500 (Rust's panic hook has printed where).
fn panicked() -> Response {
    crate::error::Error::Internal("handler panicked".into()).into_response()
}

/// What the front door knows of a request body the routes took: whether it was read to its end
/// and, when it was dropped unread and is small enough to read on, the body itself.
struct BodyWatch {
    read: AtomicBool,
    /// Whether the body is handed back when dropped unread ([`DRAIN_MAX`] or less, and a
    /// connection that may stay: see [`connection_may_stay`]).
    drainable: bool,
    /// (locked once, by the drop that hands it back)
    unread: std::sync::Mutex<Option<Body>>,
}

impl BodyWatch {
    fn new(drainable: bool) -> Self {
        BodyWatch { read: AtomicBool::new(false), drainable, unread: std::sync::Mutex::new(None) }
    }

    /// The body the routes dropped unread, when it was handed back.
    fn left_unread(&self) -> Option<Body> {
        self.unread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

/// A request body that notes when it has been read to its end, and hands itself back to its
/// [`BodyWatch`] when dropped before that.
struct Watched {
    body: Body,
    watch: Arc<BodyWatch>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.watch.drainable && !self.watch.read.load(Ordering::Relaxed) {
            let body = std::mem::replace(&mut self.body, Body::empty());
            *self.watch.unread.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(body);
        }
    }
}

impl http_body::Body for Watched {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || self.body.is_end_stream() {
            self.watch.read.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

fn draining(path: &str) -> Response {
    let mut resp = if path.starts_with("/api/") || path.starts_with("/rpc/") || path == "/healthz" {
        let body = app::model::ErrorBody {
            error: app::model::ErrorDetail {
                code: "server_shutting_down".into(),
                message: "the gateway is shutting down".into(),
                field: None,
            },
        };
        (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], Json(body)).into_response()
    } else {
        let protocol = Protocol::for_path(path);
        crate::proxy::error::GatewayError::shutting_down().render(protocol, None)
    };
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A successful change through the JSON API invalidates the proxy's caches (keys, pools,
/// accounts), so a revoked key or a disabled member stops working at once. Only real changes
/// count: reads, signing in and out, and the web app's server functions (which bump the
/// generation themselves where they change something) leave the caches and the account
/// directory alone.
/// A handler that applied its change itself (an account action) is not reloaded after twice.
async fn track_changes(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let changes = changes_configuration(req.method(), req.uri().path());
    let (resp, applied) = CHANGE_APPLIED
        .scope(std::cell::Cell::new(false), async {
            let resp = next.run(req).await;
            (resp, CHANGE_APPLIED.with(std::cell::Cell::get))
        })
        .await;
    if changes && !applied && (resp.status().is_success() || resp.status().is_redirection()) {
        s.configuration_changed().await;
    }
    resp
}

/// JSON API mutations other than the session's, and other than starting a sign-in or refreshing
/// a token (neither changes what is routed: a token cell is shared by every snapshot).
fn changes_configuration(method: &Method, path: &str) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        && path.starts_with("/api/")
        && path != "/api/session"
        && path != "/api/accounts/oauth/start"
        && !(path.starts_with("/api/accounts/") && path.ends_with("/refresh"))
}

/// `GET /healthz`: 200 when the database answers, 503 otherwise (OPS-4).
async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    let probe = tokio::time::timeout(Duration::from_secs(2), sqlx::query("SELECT 1").execute(&s.db)).await;
    match probe {
        Ok(Ok(_)) => (StatusCode::OK, Json(serde_json::json!({ "status": "ok" }))),
        _ => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({ "status": "database unavailable" }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_api_mutations_change_configuration() {
        assert!(changes_configuration(&Method::POST, "/api/members"));
        assert!(changes_configuration(&Method::DELETE, "/api/keys/3"));
        assert!(changes_configuration(&Method::PATCH, "/api/accounts/1/limits"));
        assert!(!changes_configuration(&Method::GET, "/api/members"));
        assert!(!changes_configuration(&Method::POST, "/api/session"), "signing in changes nothing");
        assert!(!changes_configuration(&Method::DELETE, "/api/session"));
        assert!(!changes_configuration(&Method::POST, "/rpc/me"), "server functions bump for themselves");
    }

    /// What the client for token, quota and sign-in calls puts on the wire, read by a listener
    /// of our own: every answer is JSON SubLane reads, so none may come compressed.
    #[tokio::test]
    async fn calls_around_model_calls_ask_for_uncompressed_answers() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth/token", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                conn.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await.unwrap();
            String::from_utf8(head).unwrap().to_ascii_lowercase()
        });
        let sent = upstream_client().unwrap().get(url).send().await.unwrap();
        assert_eq!(sent.status(), StatusCode::OK);
        let head = server.await.unwrap();
        assert_eq!(head.matches("accept-encoding").count(), 1, "{head}");
        assert!(head.contains("\r\naccept-encoding: identity\r\n"), "{head}");
    }

    fn door<S>(inner: S) -> (FrontDoor<S>, Arc<Lifecycle>) {
        let lifecycle = Arc::new(Lifecycle::default());
        (FrontDoor { inner, lifecycle: Arc::clone(&lifecycle) }, lifecycle)
    }

    fn post(path: &str, body: &'static str) -> Request {
        Request::post(path).body(Body::from(body)).unwrap()
    }

    #[tokio::test]
    async fn a_panic_while_serving_is_that_calls_500_and_the_next_call_is_served() {
        let routes = tower::service_fn(|req: Request| {
            if req.uri().path() == "/panics-at-call" {
                panic!("test: a panic while the route is chosen");
            }
            async move {
                if req.uri().path() == "/panics-when-polled" {
                    panic!("test: a panic in the handler");
                }
                Ok::<_, std::convert::Infallible>(StatusCode::NO_CONTENT.into_response())
            }
        });
        let (app, lifecycle) = door(routes);
        for path in ["/panics-at-call", "/panics-when-polled"] {
            let resp = app.clone().oneshot(post(path, "")).await.unwrap();
            assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        }
        let resp = app.clone().oneshot(post("/panics-at-call", "{}")).await.unwrap();
        assert_eq!(resp.headers()[header::CONNECTION], "close", "its body went unread with the panic");
        let resp = app.clone().oneshot(post("/panics-when-polled", "{}")).await.unwrap();
        assert_eq!(resp.headers().get(header::CONNECTION), None, "its small body was read after the panic");
        let resp = app.clone().oneshot(post("/fine", "")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        assert!(lifecycle.tasks.is_empty(), "a panicked call is no longer in flight");
    }

    #[tokio::test]
    async fn the_door_tracks_calls_in_flight_answers_probes_and_refuses_after_shutdown() {
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let released = Arc::new(tokio::sync::Mutex::new(Some(released)));
        let routes = tower::service_fn(move |_req: Request| {
            let released = Arc::clone(&released);
            async move {
                if let Some(released) = released.lock().await.take() {
                    let _ = released.await;
                }
                Ok::<_, std::convert::Infallible>(StatusCode::OK.into_response())
            }
        });
        let (app, lifecycle) = door(routes);
        let call = tokio::spawn(app.clone().oneshot(post("/v1/responses", "")));
        while lifecycle.tasks.is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(lifecycle.tasks.len(), 1, "the call in flight is tracked");

        let probe = Request::head("/").body(Body::empty()).unwrap();
        let resp = app.clone().oneshot(probe).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "Claude Code's probe is answered at the door");

        lifecycle.shutdown.cancel();
        let resp = app.clone().oneshot(post("/v1/responses", "{}")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::CONNECTION], "close");
        assert_eq!(lifecycle.tasks.len(), 1, "a refused call is not waited for");

        release.send(()).unwrap();
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK, "the call in flight ends normally");
        assert!(lifecycle.tasks.is_empty());
    }

    /// A body that says it is 12 bytes long and never sends them: it never comes (a client that
    /// stopped sending), or it ends at once, short of its length (as hyper's does when its
    /// connection fails).
    struct Promised {
        ends_short: bool,
    }

    impl http_body::Body for Promised {
        type Data = axum::body::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            if self.ends_short { std::task::Poll::Ready(None) } else { std::task::Poll::Pending }
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(12)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_small_body_refused_unread_is_read_first_and_any_other_ends_the_connection() {
        let routes = tower::service_fn(|req: Request| async move {
            if req.uri().path() == "/reads" {
                let _ = axum::body::to_bytes(req.into_body(), 1024).await;
            }
            Ok::<_, std::convert::Infallible>(StatusCode::UNAUTHORIZED.into_response())
        });
        let (app, lifecycle) = door(routes);
        let connection = |req: Request| {
            let app = app.clone();
            async move { app.oneshot(req).await.unwrap().headers().get(header::CONNECTION).cloned() }
        };
        let kept = connection(post("/refuses", "{\"model\":\"m\"}")).await;
        assert_eq!(kept, None, "a small body is read after the refusal, and the connection kept");
        let big = Request::post("/refuses").body(Body::from(vec![b' '; DRAIN_MAX as usize + 1])).unwrap();
        assert_eq!(connection(big).await.unwrap(), "close", "a larger one is not read");
        let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(axum::body::Bytes::from("{}"))]);
        let unknown = Request::post("/refuses").body(Body::from_stream(chunks)).unwrap();
        assert_eq!(connection(unknown).await.unwrap(), "close", "nor one of unknown length");
        let mut waits = post("/refuses", "{}");
        waits.headers_mut().insert(header::EXPECT, HeaderValue::from_static("100-continue"));
        assert_eq!(connection(waits).await.unwrap(), "close", "nor one the client waits to send");
        let started = tokio::time::Instant::now();
        let stalled = tokio::spawn(connection(
            Request::post("/refuses").body(Body::new(Promised { ends_short: false })).unwrap(),
        ));
        tokio::time::sleep(DRAIN_WAIT / 2).await;
        assert_eq!(lifecycle.tasks.len(), 1, "a shutdown waits for the read, as for the call");
        assert_eq!(stalled.await.unwrap().unwrap(), "close", "a body that does not come ends it");
        assert!(started.elapsed() >= DRAIN_WAIT, "after waiting for it this long");
        assert_eq!(lifecycle.tasks.len(), 0);
        let short = Request::post("/refuses").body(Body::new(Promised { ends_short: true })).unwrap();
        assert_eq!(connection(short).await.unwrap(), "close", "nor one that ends short of its length");
        assert_eq!(connection(post("/reads", "{\"model\":\"m\"}")).await, None);
        assert_eq!(connection(post("/refuses", "")).await, None, "no body, nothing left unread");
        let mut ends = post("/refuses", "{}");
        ends.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("keep-alive, Close"));
        assert_eq!(connection(ends).await.unwrap(), "close", "not read when the client ends the connection");
        let mut old = post("/refuses", "{}");
        *old.version_mut() = axum::http::Version::HTTP_10;
        assert_eq!(connection(old).await.unwrap(), "close", "nor for HTTP/1.0");
    }

    /// Reads from `client` until what came ends with `end` (an answer's body), or fails after 5 s.
    async fn read_until(client: &mut TcpStream, end: &str) -> String {
        use tokio::io::AsyncReadExt as _;
        let mut got = Vec::new();
        let reading = async {
            while !got.ends_with(end.as_bytes()) {
                let mut chunk = [0u8; 1024];
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the connection ended before {end:?}: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&chunk[..n]);
            }
        };
        tokio::time::timeout(Duration::from_secs(5), reading).await.expect("no answer within 5 s");
        String::from_utf8(got).unwrap()
    }

    /// Whether the server closed `client` within 5 s, nothing more having come.
    async fn closed_by_server(client: &mut TcpStream) -> bool {
        use tokio::io::AsyncReadExt as _;
        let mut chunk = [0u8; 64];
        matches!(tokio::time::timeout(Duration::from_secs(5), client.read(&mut chunk)).await, Ok(Ok(0)))
    }

    #[tokio::test]
    async fn closing_ends_idle_connections_at_once_and_an_exchange_in_progress_after_its_answer() {
        use tokio::io::AsyncWriteExt as _;
        let (started, answer) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
        let (s, a) = (Arc::clone(&started), Arc::clone(&answer));
        let app = tower::service_fn(move |req: Request| {
            let (started, answer) = (Arc::clone(&s), Arc::clone(&a));
            async move {
                if req.uri().path() == "/slow" {
                    started.notify_one();
                    answer.notified().await;
                }
                Ok::<_, std::convert::Infallible>(req.uri().path().to_owned().into_response())
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // (the head deadline far away: only the close may end the idle connection in this test)
        let connections =
            Connections::new(listener, Duration::from_secs(60), Duration::from_secs(3600), Duration::ZERO);
        let Serving { mut ended, closed, abandon: _abandon, release: _release } =
            serve(0, connections, app, "test").await.unwrap();
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /fast HTTP/1.1\r\nhost: t\r\n\r\n").await.unwrap();
        read_until(&mut idle, "/fast").await;
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n").await.unwrap();
        started.notified().await;

        closed.cancel();
        assert!(closed_by_server(&mut idle).await, "an idle keep-alive connection is closed at once");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut ended).await.is_err(),
            "serving ends only after the exchange in progress"
        );
        answer.notify_one();
        let answered = read_until(&mut busy, "/slow").await;
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        assert!(answered.to_ascii_lowercase().contains("connection: close"), "{answered}");
        assert!(closed_by_server(&mut busy).await, "and its connection closes after the answer");
        tokio::time::timeout(Duration::from_secs(5), ended).await.expect("serving ended").unwrap();
    }

    #[tokio::test]
    async fn a_refusal_once_shutdown_has_begun_reads_no_body_and_ends_the_connection() {
        let (shutdown, tasks) = (CancellationToken::new(), TaskTracker::new());
        let (during, closing) = (shutdown.clone(), tasks.clone());
        let routes = tower::service_fn(move |_: Request| {
            // (shutdown begins while this call is served: the token, then the tracker closed)
            during.cancel();
            closing.close();
            async { Ok::<_, std::convert::Infallible>(StatusCode::SERVICE_UNAVAILABLE.into_response()) }
        });
        let (mut app, lifecycle) = door(routes);
        app.lifecycle = Arc::new(Lifecycle {
            shutdown: Signal::new(shutdown),
            hard_stop: Signal::new(lifecycle.hard_stop.token().clone()),
            tasks,
        });
        let resp = app.oneshot(post("/refuses", "{}")).await.unwrap();
        assert_eq!(resp.headers()[header::CONNECTION], "close");
    }
}
