//! Active quota reads (QT-1, PX-4): Codex `wham/usage` and Antigravity `fetchAvailableModels`.
//!
//! Reads are started by model traffic (for the pool's accounts whose data is stale) and by the
//! Accounts page; never by a timer, so an idle gateway polls nothing. At most [`MAX_READS`] run
//! at once, each inside a workspace admission slot (a metadata operation: never a model slot,
//! never a cooldown cleared); a read already under way for an account is joined, not repeated;
//! a failed read backs off. Claude has no read endpoint SubLane relies on: its quota comes from
//! the headers of its answers.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use app::model::{CredentialInput, Provider};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};

use super::{Observation, Quota, observation::FRESH_MS, parse};
use crate::{
    config::UpstreamUrls,
    credentials::Tokens,
    directory::{Account, PoolRoutes},
    scheduler::admission::Admission,
};

/// QT-1: quota reads running at once, workspace-wide.
pub const MAX_READS: usize = 2;
/// Model traffic looks for stale accounts in a pool at most this often (ms).
const TRAFFIC_CHECK_MS: i64 = 10_000;
/// A read's whole time budget.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a read's answer.
const READ_LIMIT: usize = 512 * 1024;
/// Backoff after failed reads: doubles from the first step up to the last (ms).
const BACKOFF_FIRST_MS: i64 = 30_000;
const BACKOFF_MAX_MS: i64 = 15 * 60_000;

/// The read side of the quota service: the upstream client and the bookkeeping that caps,
/// joins and backs off reads.
pub struct Reads {
    http: reqwest::Client,
    urls: UpstreamUrls,
    tokens: Arc<Tokens>,
    admission: Arc<Admission>,
    /// Reads are counted (OPS-4).
    metrics: Arc<crate::metrics::Metrics>,
    permits: Arc<Semaphore>,
    state: Mutex<ReadState>,
    running: AtomicUsize,
    peak: AtomicUsize,
}

#[derive(Default)]
struct ReadState {
    /// Reads under way, by account: a latecomer waits on the same one.
    in_flight: HashMap<i64, watch::Receiver<bool>>,
    /// Failed reads in a row and when the next may start (unix ms), by account.
    backoff: HashMap<i64, (u32, i64)>,
}

/// Why a read gave nothing.
enum ReadError {
    /// The workspace is at capacity: not a failure of the account, tried again later.
    Busy,
    NoToken,
    Upstream(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Busy => f.write_str("workspace at capacity"),
            ReadError::NoToken => f.write_str("no usable token"),
            ReadError::Upstream(why) => f.write_str(why),
        }
    }
}

impl Reads {
    pub fn new(
        http: reqwest::Client,
        urls: UpstreamUrls,
        tokens: Arc<Tokens>,
        admission: Arc<Admission>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Reads {
            http,
            urls,
            tokens,
            admission,
            metrics,
            permits: Arc::new(Semaphore::new(MAX_READS)),
            state: Mutex::default(),
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ReadState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets an account's backoff (re-authorized or deleted: the next read may go at once).
    pub fn forget(&self, account_id: i64) {
        self.state().backoff.remove(&account_id);
    }

    /// The most reads that ever ran at once (tests, and the figure the cap is about).
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Providers SubLane can read the quota of.
    pub fn readable(provider: Provider) -> bool {
        matches!(provider, Provider::Codex | Provider::Antigravity)
    }

    /// One read, its token refresh included, within [`READ_TIMEOUT`].
    async fn fetch(&self, account: &Account, at: i64) -> Result<Observation, ReadError> {
        let read = tokio::time::timeout(READ_TIMEOUT, self.fetch_unbounded(account, at))
            .await
            .map_err(|_| ReadError::Upstream("timed out".into()))
            .and_then(|r| r);
        // A read that found no usable token made no call.
        if !matches!(read, Err(ReadError::NoToken)) {
            self.metrics.quota_read(account.provider.as_str(), read.is_ok());
        }
        read
    }

    async fn fetch_unbounded(&self, account: &Account, at: i64) -> Result<Observation, ReadError> {
        let credentials = self.tokens.usable(&account.tokens).await.map_err(|_| ReadError::NoToken)?;
        let CredentialInput::OAuth { access_token, provider_account_id, .. } = &*credentials else {
            return Err(ReadError::NoToken);
        };
        let request = match account.provider {
            Provider::Codex => {
                let mut r = self.http.get(self.urls.codex_usage_url.clone()).bearer_auth(access_token);
                if let Some(id) = provider_account_id {
                    r = r.header("chatgpt-account-id", id);
                }
                r
            }
            Provider::Antigravity => {
                let project = provider_account_id.as_deref().ok_or(ReadError::NoToken)?;
                let base = self.urls.antigravity_base_url.as_str().trim_end_matches('/');
                self.http
                    .post(format!("{base}/v1internal:fetchAvailableModels"))
                    .bearer_auth(access_token)
                    .json(&json!({ "project": project }))
            }
            _ => return Err(ReadError::Upstream("no quota read for this provider".into())),
        };
        // (as the provider's own client, which its front end expects)
        let request = self.urls.agents.named(request, account.provider);
        let body = async {
            let resp = request.send().await.map_err(|e| ReadError::Upstream(e.without_url().to_string()))?;
            if !resp.status().is_success() {
                return Err(ReadError::Upstream(format!("status {}", resp.status().as_u16())));
            }
            if resp.content_length().is_some_and(|n| n > READ_LIMIT as u64) {
                return Err(ReadError::Upstream("answer too large".into()));
            }
            let bytes = resp.bytes().await.map_err(|e| ReadError::Upstream(e.without_url().to_string()))?;
            if bytes.len() > READ_LIMIT {
                return Err(ReadError::Upstream("answer too large".into()));
            }
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|_| ReadError::Upstream("answer is not JSON".into()))
        }
        .await?;
        let o = match account.provider {
            Provider::Codex => parse::codex_usage(&body, at),
            _ => parse::available_models(&body, at),
        };
        if o.is_empty() {
            return Err(ReadError::Upstream("answer says nothing about the quota".into()));
        }
        Ok(o)
    }
}

impl Quota {
    /// QT-1: model traffic on `pool` starts a background read for its accounts whose quota
    /// data is stale (or, for Antigravity, whose model list is unknown). The request never waits;
    /// a pool is looked at no more than every few seconds, and a pool of accounts SubLane cannot
    /// read costs one check.
    pub fn on_traffic(self: &Arc<Self>, pool: &PoolRoutes, providers: &[Provider]) {
        if !providers.iter().any(|p| Reads::readable(*p)) {
            return;
        }
        let now = self.clock.unix_ms();
        if !pool.quota_check_due(now, TRAFFIC_CHECK_MS) {
            return;
        }
        let eligible = |a: &&Arc<Account>| Reads::readable(a.provider) && providers.contains(&a.provider);
        for account in pool.accounts().iter().filter(eligible) {
            if self.due(account, now) {
                let _ = self.start_read(Arc::clone(account));
            }
        }
    }

    /// The Accounts page: reads for `accounts` whose data is stale (`force`: the Refresh quota
    /// button, every one not backing off), joined with any under way and capped like the
    /// others, waited for at most `wait`.
    pub async fn read_now(self: &Arc<Self>, accounts: &[Arc<Account>], force: bool, wait: Duration) {
        let now = self.clock.unix_ms();
        let mut started = Vec::new();
        for account in accounts.iter().filter(|a| Reads::readable(a.provider)) {
            let backing_off =
                self.reads.state().backoff.get(&account.id).is_some_and(|(_, next)| *next > now);
            // A read under way is joined (and waited for) whether or not a new one is due.
            let wanted = !backing_off && (force || self.stale(account, now));
            if wanted && let Some(rx) = self.start_read(Arc::clone(account)) {
                started.push(rx);
            }
        }
        let all = futures_util::future::join_all(started.into_iter().map(|mut rx| async move {
            let _ = rx.wait_for(|done| *done).await;
        }));
        let _ = tokio::time::timeout(wait, all).await;
    }

    /// Stale (or never read), not under way, not backing off.
    fn due(&self, account: &Account, now: i64) -> bool {
        let st = self.reads.state();
        if st.in_flight.contains_key(&account.id)
            || st.backoff.get(&account.id).is_some_and(|(_, next)| *next > now)
        {
            return false;
        }
        drop(st);
        // The cooldown rules apply to reads too: an account cooling after a 429 or paused for its
        // credentials is read once it serves again.
        self.stale(account, now) && self.scheduler.account_blocked(account.id).is_none()
    }

    /// Nothing fresh is known of the account (for Antigravity: or its model list is unknown).
    fn stale(&self, account: &Account, now: i64) -> bool {
        let stale = self
            .observed_at(account.id, account.quota_revision)
            .is_none_or(|at| now - at > FRESH_MS || at > now);
        stale || (account.provider == Provider::Antigravity && !self.has_catalogue(account.id))
    }

    /// Starts a read for `account`, or joins the one under way. The receiver turns true when it ends.
    fn start_read(self: &Arc<Self>, account: Arc<Account>) -> Option<watch::Receiver<bool>> {
        let (tx, rx) = {
            let mut st = self.reads.state();
            if let Some(rx) = st.in_flight.get(&account.id) {
                return Some(rx.clone());
            }
            let (tx, rx) = watch::channel(false);
            st.in_flight.insert(account.id, rx.clone());
            (tx, rx)
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            this.read(&account).await;
            this.reads.state().in_flight.remove(&account.id);
            let _ = tx.send(true);
        });
        Some(rx)
    }

    async fn read(&self, account: &Account) {
        let reads = &self.reads;
        let Ok(_permit) = reads.permits.acquire().await else { return };
        let result = match reads.admission.workspace() {
            None => Err(ReadError::Busy),
            Some(_slot) => {
                let running = reads.running.fetch_add(1, Ordering::Relaxed) + 1;
                reads.peak.fetch_max(running, Ordering::Relaxed);
                // Stamped when the read starts: an older read that ends later never wins (QT-2).
                let at = self.clock.unix_ms();
                let got = reads.fetch(account, at).await;
                reads.running.fetch_sub(1, Ordering::Relaxed);
                got
            }
        };
        let now = self.clock.unix_ms();
        match result {
            Ok(o) => {
                reads.state().backoff.remove(&account.id);
                if let Err(e) = self.record(account.id, account.quota_revision, &o).await {
                    tracing::warn!(account_id = account.id, error = %e, "quota read not stored");
                }
            }
            Err(ReadError::Busy) => {}
            Err(e) => {
                let wait = {
                    let mut st = reads.state();
                    let failures = st.backoff.get(&account.id).map_or(0, |(n, _)| *n) + 1;
                    let wait = (BACKOFF_FIRST_MS << (failures - 1).min(10)).min(BACKOFF_MAX_MS);
                    st.backoff.insert(account.id, (failures, now + wait));
                    wait
                };
                self.read_failed(account.id, account.quota_revision, now).await;
                tracing::info!(account_id = account.id, error = %e, retry_in_ms = wait, "quota read failed");
            }
        }
    }
}
