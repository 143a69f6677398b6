//! Everything a request handler may need. Handlers get it by cloning [`AppState`], which is one
//! `Arc`: axum clones the state for every request, and cloning the fields one by one (a score of
//! reference counts, the site options' strings) showed up in profiles (issue 15).

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use sqlx::SqlitePool;
use tokio_util::task::TaskTracker;

use crate::{
    clock::SharedClock,
    config::Config,
    crypto::Sealer,
    directory::{Directory, Generation},
    proxy::auth::Principals,
    records::RecordSink,
    scheduler::{Scheduler, admission::Admission},
    signal::Signal,
};

/// The shared state behind one `Arc`; fields are read through `Deref`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub config: Arc<Config>,
    pub db: SqlitePool,
    /// Wall clock for stored times (sessions, key expiry); a fake one in tests.
    pub clock: SharedClock,
    /// Seals and opens provider credentials (ID-6).
    pub sealer: Arc<Sealer>,
    /// Where leptos_axum finds the built site and how it names the assets.
    pub leptos: LeptosOptions,
    /// Pooled upstream connections for OAuth, quota reads and sign-ins (TCP_NODELAY).
    pub http: reqwest::Client,
    /// Pooled upstream connections for model calls.
    pub model_http: crate::proxy::client::Client,
    /// The request-record writer's queue.
    pub records: RecordSink,
    /// Bumped by every configuration change; the caches below follow it.
    pub generation: Generation,
    /// Cached gateway-key lookups.
    pub principals: Arc<Principals>,
    /// Pools and accounts as the proxy routes over them.
    pub directory: Arc<Directory>,
    /// Workspace and member concurrency (ADM-2, ADM-3).
    pub admission: Arc<Admission>,
    /// OAuth tokens per account: refresh, backoff, re-authorization (CRED-1..CRED-4).
    pub tokens: Arc<crate::credentials::Tokens>,
    /// Sign-ins under way and credential files brought in (CRED-5).
    pub onboarding: Arc<crate::credentials::onboarding::Onboarding>,
    /// Account selection, leases, queues and account state (ADM, RT, ACC, CD).
    pub scheduler: Arc<Scheduler>,
    /// Subscription quota observations and reads (QT, PACE).
    pub quota: Arc<crate::quota::Quota>,
    /// Workspace settings admins change while it runs (queues, failure policy, capacity).
    pub workspace_settings: Arc<crate::workspace_settings::Live>,
    /// Shutdown, hard stop, and the work a shutdown waits for (OPS-3).
    pub lifecycle: Arc<Lifecycle>,
    /// Failed sign-ins per username and address (ID-2).
    pub logins: Arc<crate::auth::throttle::LoginThrottle>,
    /// BUD-4: every key's failure window, blocks and bans.
    pub breaker: Arc<crate::breaker::Breaker>,
    /// BUD-1..BUD-3: budget policies, their usage and the price table.
    pub budgets: Arc<crate::budgets::Budgets>,
    /// OPS-4, BEY-4: counters and histograms for `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
}

tokio::task_local! {
    /// Within a JSON API request: whether its handler already applied its change (bumped the
    /// generation and reloaded the directory), so the change tracker need not do it again.
    pub static CHANGE_APPLIED: std::cell::Cell<bool>;
}

/// The server's shutdown (OPS-3) as the request path sees it. Shared behind one `Arc`, so an
/// attempt or a relay that keeps it costs one reference count, not a copy of each part.
#[derive(Debug, Default)]
pub struct Lifecycle {
    /// Raised when shutdown starts: nothing new is admitted, queued requests leave (ADM-7).
    pub shutdown: Signal,
    /// Raised when the shutdown grace period is over: open streams end.
    pub hard_stop: Signal,
    /// Work a shutdown waits for: requests in flight, relayed streams, WebSocket sessions.
    pub tasks: TaskTracker,
}

impl AppState {
    /// Configuration changed (keys, members, pools, accounts): the proxy's caches follow at once,
    /// and the account directory is reloaded now, which brings membership, limits and lifecycle
    /// into the scheduler and lets waiters look again (an account added, enabled or moved may
    /// serve them).
    ///
    /// Call it after the change is written. A JSON API handler that calls it spares the request
    /// the change tracker's own reload (`serve::track_changes`).
    pub async fn configuration_changed(&self) {
        self.generation.bump();
        if let Err(e) = self.directory.snapshot(&self.db, &self.sealer).await {
            tracing::error!(error = %e, "account directory could not be reloaded after a change");
        }
        let _ = CHANGE_APPLIED.try_with(|applied| applied.set(true));
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
