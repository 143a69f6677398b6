//! The scheduler: which account serves a request, and when (ADM-1, ADM-4, ADM-6..ADM-9, RT-1..RT-5,
//! RT-7, RT-8, EXP-1).
//!
//! Everything a decision reads lives in memory behind one short mutex, never held across an
//! `.await`: per-account runtime (live load, limit, blocking state), per-pool wait queues, and
//! conversation bindings. The database is only the durable copy ([`store`]).
//!
//! A decision either hands out a [`Lease`] (one account slot, released when the attempt's record
//! is queued, ADM-8), refuses with a catalogue error, or puts the request in its pool's queue with
//! a [`Ticket`]. A released slot goes straight to the oldest waiter that can use it (a
//! [`Reservation`]), so a newcomer never overtakes a waiter; the waiter then runs the whole
//! decision again with every policy re-checked (ADM-7) and the reserved slot counted as free.

pub mod admission;
mod bindings;
mod pool_index;
mod queue;
mod runtime;
mod select;
pub mod state;
pub mod store;

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use app::model::Provider;

pub use app::model::{Exclusions as Excluded, RoutingDecision, RoutingRule as Rule};

pub use self::queue::{Reservation, Ticket};
use self::{
    queue::{Waiter, Want},
    runtime::Runtime,
    state::{AccountState, FailurePolicy},
};
use crate::{clock::SharedClock, directory::Account};

/// Queue and binding settings (ADM-6, RT-1).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Longest wait in a pool's queue.
    pub queue_timeout: Duration,
    /// Most waiters per pool.
    pub queue_capacity: usize,
    pub failure: FailurePolicy,
    /// A conversation binding unused this long is forgotten.
    pub binding_ttl: Duration,
    /// RT-6: rotation weighted by remaining quota (`SUBLANE_GATEWAY_QUOTA_WEIGHTED`).
    pub quota_weighted: bool,
}

pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_QUEUE_CAPACITY: usize = 100;
pub const DEFAULT_BINDING_TTL: Duration = Duration::from_secs(24 * 3600);
/// Per-model request counters kept per account (API-1); only models the account served count.
pub const MAX_MODEL_COUNTERS: usize = 64;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            failure: FailurePolicy::default(),
            binding_ttl: DEFAULT_BINDING_TTL,
            quota_weighted: false,
        }
    }
}

/// A conversation's identity (RT-1): a SHA-256 of the session id or prompt cache key, so the raw
/// value is neither kept in memory nor stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConversationKey(pub [u8; 32]);

impl ConversationKey {
    pub fn session(id: &str) -> Self {
        Self::hash(b"session:", id)
    }

    pub fn prompt_cache(key: &str) -> Self {
        Self::hash(b"cache:", key)
    }

    /// A Codex sub-agent's own conversation (RT-7), apart from its parent's.
    pub fn subagent(kind: &str, child: &str) -> Self {
        Self::hash(format!("subagent:{kind}:").as_bytes(), child)
    }

    fn hash(kind: &[u8], value: &str) -> Self {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(kind);
        h.update(value.as_bytes());
        ConversationKey(h.finalize().into())
    }
}

/// What a request asks of the scheduler.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub member_id: i64,
    pub pool_id: i64,
    /// The model sent upstream (after aliases).
    pub model: &'a str,
    /// Providers that speak the request's protocol.
    pub supported: &'a [Provider],
    /// PX-5: a provider prefix narrows the choice further (a policy exclusion).
    pub only: Option<Provider>,
    pub conversation: Option<ConversationKey>,
    /// RT-7: the parent conversation of a Codex review/guardian request.
    pub parent: Option<ConversationKey>,
    /// The request continues upstream state (`previous_response_id`): RT-3 never moves it.
    pub continuation: bool,
    /// A WebSocket connection's account: every turn goes there (like a binding, not stored).
    pub pin: Option<i64>,
    /// Accounts this request already tried (and that could not serve it): left out.
    pub avoid: &'a [i64],
    /// The request's place in its pool's queue, when it waited before ([`Ticket::place`]).
    pub queued: Option<u64>,
}

/// A local refusal (ERR catalogue); none of them marks an account (ADM-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    QueueFull,
    WaitTimeout,
    /// ADM-9 / RT-2: the bound account (or every account) is cooling; seconds until it ends.
    AccountCooling(u64),
    ModelCooling(u64),
    ModelRateLimited(u64),
    /// BUD-5: every account that could serve the request is rate limited upstream.
    UpstreamQuotaExhausted(u64),
    /// The bound account is paused because the upstream refused its credentials (the status
    /// the upstream answered, 401 or 403): no cooldown a client can wait out.
    CredentialsPaused(u16),
    /// CRED-3: the account has no usable token; seconds until its refresh may be tried again.
    RefreshFailed(u64),
    /// QT-5: the bound account's (or model's) quota is spent; or every account's is.
    QuotaExhausted,
    /// ID-4: no account of the pool lists the model (RT-8).
    ModelNotFound,
    NoAccount,
    /// Most accounts able to serve the request are paused for their credentials (ERR-2), which
    /// is no cooldown a client can wait out: answered as [`Refusal::NoAccount`]. Seconds until
    /// the soonest block of any of them ends.
    CredentialsPausedPool(u64),
    ShuttingDown,
}

impl Refusal {
    /// The seconds its `Retry-After` gives a client to wait, for a refusal that ends on its own.
    pub fn wait_secs(&self) -> Option<u64> {
        match *self {
            Refusal::AccountCooling(s)
            | Refusal::ModelCooling(s)
            | Refusal::ModelRateLimited(s)
            | Refusal::UpstreamQuotaExhausted(s)
            | Refusal::RefreshFailed(s) => Some(s),
            _ => None,
        }
    }

    /// Seconds until an account the decision considered could serve, `u64::MAX` for never (none
    /// is there, or none takes the request), `None` when one may any moment (a full queue) or
    /// it is not known.
    pub fn back_in(&self) -> Option<u64> {
        match *self {
            Refusal::CredentialsPausedPool(s) => Some(s),
            Refusal::NoAccount | Refusal::ModelNotFound => Some(u64::MAX),
            r => r.wait_secs(),
        }
    }
}

/// What the upstream's answer says about the account (CD-1..CD-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Success,
    /// An explicit 5xx or an invalid/aborted stream (CD-2).
    ModelFailure,
    /// A 429 that cools the whole account (CD-1).
    RateLimited(Option<Duration>),
    /// An Antigravity structured limit for exactly this model (CD-4).
    ModelLimited(Option<Duration>),
    /// 529 / overloaded (CD-5).
    Overloaded(Option<Duration>),
    /// 401/403 in a credential's shape (invalid or expired token, deactivated account): the
    /// account's credentials were refused (ERR-2).
    CredentialsRejected(u16),
    /// Another 403: possibly about this request only (ERR-1); counted per account, and only
    /// repeated ones pause it.
    Forbidden,
    /// Says nothing about the account: cancelled, client errors, timeouts, 408, network errors.
    Neutral,
}

/// A binding's scope (RT-1): member, pool, conversation.
pub type BindingKey = (i64, i64, ConversationKey);

#[derive(Default)]
struct Inner {
    runtimes: pool_index::Runtimes,
    /// Per pool view, which of its accounts a rotation must look at one by one.
    indexes: Vec<pool_index::PoolIndex>,
    /// Rotation decisions taken (the indexes' clock for eviction).
    decisions: u64,
    slots: HashMap<i64, usize>,
    queues: HashMap<i64, VecDeque<Waiter>>,
    bindings: bindings::Bindings,
    next_waiter: u64,
    /// Reused by the weighted pick (positions in the pool's account list).
    scratch: Vec<u32>,
    /// Writes a decision produced, sent after the lock is released.
    pending_writes: Vec<store::Write>,
    /// Per pool, when its armed timer fires (unix ms): the soonest end of a block that holds
    /// back waiters.
    timers: HashMap<i64, i64>,
}

impl Inner {
    fn slot(&mut self, account_id: i64) -> usize {
        if let Some(s) = self.slots.get(&account_id) {
            return *s;
        }
        let s = self.runtimes.len();
        self.runtimes.push(Runtime::new(account_id));
        self.slots.insert(account_id, s);
        s
    }
}

pub struct Scheduler {
    inner: Mutex<Inner>,
    /// Changed by an admin while running (workspace settings); read per decision.
    settings: std::sync::RwLock<Settings>,
    /// RT-8: the operator's model lists, set once at start.
    catalogues: std::sync::OnceLock<crate::catalogue::Catalogues>,
    clock: SharedClock,
    seq: AtomicU64,
    store: store::Writer,
}

/// The result of one decision.
pub enum Step {
    Go(Lease),
    Refuse(Refusal),
    Wait(Ticket),
}

impl Scheduler {
    pub fn new(settings: Settings, clock: SharedClock, store: store::Writer) -> Arc<Self> {
        Arc::new(Scheduler {
            inner: Mutex::default(),
            settings: std::sync::RwLock::new(settings),
            catalogues: std::sync::OnceLock::new(),
            clock,
            seq: AtomicU64::new(1),
            store,
        })
    }

    pub fn settings(&self) -> Settings {
        *self.settings.read().unwrap_or_else(|p| p.into_inner())
    }

    /// New queue and failure-policy settings, for decisions and answers from now on: a waiter
    /// keeps the deadline it was given, a lowered queue capacity turns away only newcomers.
    pub fn set_settings(&self, change: impl FnOnce(&mut Settings)) {
        change(&mut self.settings.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// RT-8: the operator's model lists (once, at start; later calls change nothing).
    pub fn set_catalogues(&self, catalogues: crate::catalogue::Catalogues) {
        let _ = self.catalogues.set(catalogues);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> i64 {
        self.clock.unix_ms()
    }

    /// The dense slot of an account (assigned once, kept for the process's life).
    pub fn register(&self, account_id: i64) -> usize {
        self.lock().slot(account_id)
    }

    /// Brings the live state in step with a new directory snapshot (its accounts, by id): limits,
    /// lifecycle revisions (never backwards) and pool membership of the accounts in it; accounts
    /// left out (disabled, switched off, deleted) serve no pool, so their freed slots go to no
    /// waiter. When anything changed, waiters look again: the change may have made room.
    pub fn sync_directory<'a>(&self, accounts: impl Iterator<Item = &'a Arc<Account>>) {
        let mut inner = self.lock();
        let mut seen = vec![false; inner.runtimes.len()];
        let mut changed = false;
        for account in accounts {
            let slot = inner.slot(account.id);
            if slot >= seen.len() {
                seen.resize(slot + 1, false);
            }
            seen[slot] = true;
            changed |= inner.runtimes[slot].sync(account);
        }
        for slot in 0..inner.runtimes.len() {
            if !seen.get(slot).copied().unwrap_or(false) && !inner.runtimes[slot].cold.pools.is_empty() {
                inner.runtimes[slot].cold.pools.clear();
                changed = true;
            }
        }
        if changed {
            self.wake_locked_all(&mut inner);
        }
    }

    /// Restores persisted state (ACC-4, RT-1) at startup.
    pub fn restore(&self, loaded: store::Loaded) {
        let mut inner = self.lock();
        let mut max_seq = 0;
        for (account_id, revision, state) in loaded.states {
            let s = inner.slot(account_id);
            let rt = &mut inner.runtimes[s];
            max_seq = state.models.values().map(|m| m.last_bad_seq).fold(max_seq, u64::max);
            rt.revision = revision;
            rt.cold.state = state;
            rt.refresh();
        }
        let mut writes = Vec::new();
        for b in loaded.bindings {
            inner.bindings.restore(b.key, b.account_id, b.model, b.used_at, &mut writes);
        }
        drop(inner);
        self.seq.fetch_max(max_seq + 1, Ordering::Relaxed);
        for w in writes {
            self.store.send(w);
        }
    }

    /// CRED-3: account `account_id` has no usable token until `until` (unix ms; `i64::MAX`: until
    /// it is re-authorized), or has one again (`None`). Rotation leaves it out meanwhile; a
    /// conversation bound to it is answered `account_refresh_failed` and keeps its binding.
    pub fn set_credential_block(self: &Arc<Self>, account_id: i64, until: Option<i64>) {
        let mut inner = self.lock();
        let slot = inner.slot(account_id);
        let rt = &mut inner.runtimes[slot];
        let was = rt.credentials_until;
        rt.credentials_until = until.unwrap_or(0);
        rt.refresh();
        match until {
            None if was != 0 => self.wake_locked_all(&mut inner),
            // Waiters for this account are answered now, whether the block ends or not.
            Some(end) if end != was => self.block_appeared(&mut inner, slot, end),
            _ => {}
        }
    }

    /// QT-2: account `account_id`'s quota as just published for quota revision `revision`
    /// (`None`: forgotten after a re-authorization or disable/enable). Older revisions' are
    /// ignored. A block that ends early lets waiters look again.
    pub fn set_quota(
        self: &Arc<Self>,
        account_id: i64,
        revision: i64,
        quota: Option<crate::quota::QuotaLive>,
    ) {
        let mut inner = self.lock();
        let slot = inner.slot(account_id);
        let rt = &mut inner.runtimes[slot];
        let was = rt.cold.quota_until;
        if !rt.set_quota(revision, quota) {
            return;
        }
        let until = rt.cold.quota_until;
        if until < was {
            self.wake_locked_all(&mut inner);
        } else if until > was {
            self.block_appeared(&mut inner, slot, until);
        }
    }

    /// Conversation bindings held in memory (tests, benchmarks).
    pub fn binding_count(&self) -> usize {
        self.lock().bindings.len()
    }

    /// Applies what the upstream's answer says about the account (CD-1..CD-5). `counted`: the
    /// request was already counted for its model when admitted.
    fn settle(self: &Arc<Self>, slot: usize, model: &str, seq: u64, verdict: Verdict, counted: bool) {
        let now = self.now();
        let policy = &self.settings().failure;
        let mut inner = self.lock();
        let rt = &mut inner.runtimes[slot];
        // A model gets a counter once the account has served it, and only a bounded number do:
        // requests naming junk models never grow the table.
        if verdict == Verdict::Success
            && !counted
            && (rt.cold.requests.len() < MAX_MODEL_COUNTERS || rt.cold.requests.contains_key(model))
        {
            *rt.cold.requests.entry(model.to_owned()).or_insert(0) += 1;
        }
        // The common case, a success or a neutral end on a clean account, changes nothing.
        if matches!(verdict, Verdict::Success | Verdict::Neutral) && !rt.has_models && rt.blocked_until <= now
        {
            return;
        }
        let state = &mut rt.cold.state;
        let before = state.clone();
        match verdict {
            Verdict::Success => state.model_succeeded(model, seq, now),
            Verdict::ModelFailure => state.model_failed(model, seq, now, policy),
            Verdict::RateLimited(r) => state.rate_limited(now, r, policy),
            Verdict::ModelLimited(r) => state.model_limited(model, seq, now, r, policy),
            Verdict::Overloaded(r) => state.overloaded(now, r, policy),
            Verdict::CredentialsRejected(status) => state.credentials_rejected(now, status, policy),
            Verdict::Forbidden => state.forbidden(now, policy),
            Verdict::Neutral => {}
        }
        // Whatever the verdict, a probe this attempt held is over (CD-4).
        state.attempt_ended(model, seq);
        state.forget_expired(now, policy);
        let changed = *state != before;
        let ends = state.next_block_end(now);
        rt.refresh();
        if changed {
            let write = store::Write::State {
                account_id: rt.cold.account_id,
                revision: rt.revision,
                state: rt.cold.state.clone(),
                at: now,
            };
            // A block set now may hold back waiters that are already queued: their pools' timers
            // must cover its end, and a conversation waiting for this account hears of it now
            // (ADM-9: a cooling account is answered, not waited for).
            if let Some(until) = ends {
                self.block_appeared(&mut inner, slot, until);
            }
            drop(inner);
            self.store.send(write);
        }
    }

    /// ACC-3 actions on the live state (waiters then look again); the caller bumps the lifecycle
    /// revision in the database.
    pub fn apply(&self, account_id: i64, revision: i64, action: StateAction) {
        let now = self.now();
        let mut inner = self.lock();
        let slot = inner.slot(account_id);
        let rt = &mut inner.runtimes[slot];
        match action {
            StateAction::ClearCooldowns => rt.cold.state.clear_cooldowns(),
            StateAction::Recover => rt.cold.state.recover(),
        }
        // Two actions racing: the newer revision stays.
        rt.revision = rt.revision.max(revision);
        rt.refresh();
        let revision = rt.revision;
        let write = store::Write::State { account_id, revision, state: rt.cold.state.clone(), at: now };
        // Blocks were cleared: capacity may have appeared for waiters.
        self.wake_locked_all(&mut inner);
        drop(inner);
        self.store.send(write);
    }

    /// API-1 runtime view of every account the scheduler has seen.
    pub fn runtime(&self) -> Vec<RuntimeView> {
        let now = self.now();
        let inner = self.lock();
        let mut depth: HashMap<i64, usize> = HashMap::new();
        for (pool, q) in &inner.queues {
            depth.insert(*pool, q.iter().filter(|w| w.live()).count());
        }
        inner
            .runtimes
            .iter()
            .map(|rt| RuntimeView {
                account_id: rt.cold.account_id,
                in_flight: rt.in_flight,
                max_concurrency: rt.limit,
                queue_depth: rt.cold.pools.iter().map(|p| depth.get(p).copied().unwrap_or(0)).sum(),
                limited_models: rt.cold.state.limited_models(now),
                credentials_until: rt.credentials_until,
                quota_until: rt.cold.quota_until,
                state: rt.cold.state.clone(),
                requests: rt.cold.requests.clone(),
            })
            .collect()
    }

    /// Waiters now queued in `pool_id` (tests, runtime view).
    pub fn queue_depth(&self, pool_id: i64) -> usize {
        self.lock().queues.get(&pool_id).map_or(0, |q| q.iter().filter(|w| w.live()).count())
    }

    /// An account-wide block in force on `account_id` now (CD-3 re-checks it before a retry).
    pub fn account_blocked(&self, account_id: i64) -> Option<Refusal> {
        let now = self.now();
        let inner = self.lock();
        let slot = *inner.slots.get(&account_id)?;
        let state = &inner.runtimes[slot].cold.state;
        let b = state.account_block(now)?;
        Some(select::bound_refusal(state, &b, now))
    }

    /// Slots in use on an account (tests, runtime view).
    pub fn in_flight(&self, account_id: i64) -> u32 {
        let inner = self.lock();
        inner.slots.get(&account_id).map_or(0, |s| inner.runtimes[*s].in_flight)
    }
}

/// ACC-3 actions that change the live blocking state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateAction {
    /// Account and model cooldowns and limits (never credentials, status or quota).
    ClearCooldowns,
    /// Every runtime block.
    Recover,
}

/// One account's live scheduling state (API-1).
#[derive(Debug, Clone)]
pub struct RuntimeView {
    pub account_id: i64,
    pub in_flight: u32,
    pub max_concurrency: u32,
    pub queue_depth: usize,
    pub limited_models: usize,
    /// CRED-3: no usable token until then (unix ms; 0 when it has one).
    pub credentials_until: i64,
    /// QT-3: the subscription quota is spent until then (unix ms).
    pub quota_until: i64,
    pub state: AccountState,
    pub requests: HashMap<String, u64>,
}

/// One account slot, held until the attempt's record is queued (ADM-4, ADM-8).
pub struct Lease {
    scheduler: Arc<Scheduler>,
    slot: usize,
    account: Arc<Account>,
    seq: u64,
    model: String,
    settled: bool,
    /// Counted in the account's per-model requests when admitted (the model had a counter).
    counted: bool,
    /// A new conversation to bind to this account once the upstream accepts (RT-1): a first
    /// request that the account refuses may still move (ACC-2), and no binding points at an
    /// account that never answered.
    bind: Option<BindingKey>,
    /// This attempt probes a model whose cooldown ended (CD-4): acceptance settles the probe.
    probe: bool,
}

impl Lease {
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// The upstream accepted the request (2xx headers, or a WebSocket turn under way): a new
    /// conversation is bound here now, and a recovery probe is settled at once instead of holding
    /// its model blocked for the whole stream (CD-4).
    pub fn accepted(&mut self) {
        if self.bind.is_none() && !self.probe {
            return;
        }
        let now = self.scheduler.now();
        let ttl = self.scheduler.ttl_ms();
        let mut inner = self.scheduler.lock();
        let mut writes = Vec::new();
        if let Some(key) = self.bind.take() {
            inner.bindings.touch(key, self.account.id, &self.model, now, ttl, &mut writes);
        }
        if std::mem::take(&mut self.probe) {
            let rt = &mut inner.runtimes[self.slot];
            rt.cold.state.model_succeeded(&self.model, self.seq, now);
            rt.refresh();
            writes.push(store::Write::State {
                account_id: rt.cold.account_id,
                revision: rt.revision,
                state: rt.cold.state.clone(),
                at: now,
            });
            // The model is usable again: waiters held back by the probe look again.
            self.scheduler.wake_locked_all(&mut inner);
        }
        drop(inner);
        for w in writes {
            self.scheduler.store.send(w);
        }
    }

    /// Records what the upstream's answer says about the account; the first verdict counts.
    pub fn settle(&mut self, verdict: Verdict) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.scheduler.settle(self.slot, &self.model, self.seq, verdict, self.counted);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(Verdict::Neutral);
        }
        let mut inner = self.scheduler.lock();
        self.scheduler.release_locked(&mut inner, self.slot);
    }
}

#[cfg(test)]
mod tests;
