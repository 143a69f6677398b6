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
mod decision;
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
use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;

pub use self::decision::{Excluded, RoutingDecision, Rule};
use self::state::{AccountState, Block, FailurePolicy};
use crate::{
    clock::SharedClock,
    proxy::directory::{Account, Entry, PoolRoutes},
};

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
}

pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_QUEUE_CAPACITY: usize = 100;
pub const DEFAULT_BINDING_TTL: Duration = Duration::from_secs(24 * 3600);
/// Expired bindings are swept from memory whenever the table grows by this many.
const BINDING_SWEEP: usize = 4096;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            failure: FailurePolicy::default(),
            binding_ttl: DEFAULT_BINDING_TTL,
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
    NoAccount,
    ShuttingDown,
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
    /// 401/403: the account's credentials were refused (ERR-2).
    CredentialsRejected(u16),
    /// Says nothing about the account: cancelled, client errors, timeouts, 408, network errors.
    Neutral,
}

/// Live state of one account (one entry per account ever seen, by dense slot). The fields the
/// eligibility scan reads sit in one small struct; the rest is behind a box, so scanning a
/// thousand accounts touches about one cache line each.
struct Runtime {
    in_flight: u32,
    limit: u32,
    revision: i64,
    /// Cache of `state.blocked_until()`.
    blocked_until: i64,
    /// Cache of `!state.models.is_empty()`.
    has_models: bool,
    cold: Box<Cold>,
}

struct Cold {
    account_id: i64,
    /// Configuration generation of the newest limit set through the API: older snapshots do
    /// not overwrite it.
    limit_generation: u64,
    state: AccountState,
    /// Pools the account is in, as of its newest snapshot (for waking waiters).
    pools: Vec<i64>,
    provider: Option<Provider>,
    requests: HashMap<String, u64>,
}

impl Runtime {
    fn new(account_id: i64) -> Self {
        Runtime {
            in_flight: 0,
            limit: 0,
            revision: 0,
            blocked_until: i64::MIN,
            has_models: false,
            cold: Box::new(Cold {
                account_id,
                limit_generation: 0,
                state: AccountState::default(),
                pools: Vec::new(),
                provider: None,
                requests: HashMap::new(),
            }),
        }
    }

    fn block(&self, model: &str, now: i64) -> Option<Block> {
        if self.blocked_until <= now && !self.has_models {
            return None;
        }
        self.cold.state.block(model, now)
    }

    /// Recomputes the caches after the state changed.
    fn refresh(&mut self) {
        self.blocked_until = self.cold.state.blocked_until();
        self.has_models = !self.cold.state.models.is_empty();
    }

    fn stale(&self, e: &Entry) -> bool {
        self.limit != e.max_concurrency || self.revision != e.revision
    }

    /// Keeps the runtime in step with the account's current configuration.
    fn sync(&mut self, account: &Account) {
        if account.generation >= self.cold.limit_generation {
            self.limit = account.max_concurrency;
        }
        if self.revision != account.revision {
            // A new lifecycle revision (re-auth, disable/enable, manual clear): old limits go (ACC-4).
            if self.revision != 0 {
                self.cold.state = AccountState::default();
                self.refresh();
            }
            self.revision = account.revision;
        }
        if self.cold.pools != account.pools {
            self.cold.pools.clone_from(&account.pools);
        }
        self.cold.provider = Some(account.provider);
    }
}

/// Who a waiter can use.
enum Want {
    Account(usize),
    Any { supported: Vec<Provider>, model: String },
}

struct Waiter {
    id: u64,
    want: Want,
    wake: oneshot::Sender<usize>,
}

struct Binding {
    account_id: i64,
    model: String,
    used_at: i64,
    /// When `used_at` was last written to the database.
    stored_at: i64,
}

/// A binding's scope (RT-1): member, pool, conversation.
pub type BindingKey = (i64, i64, ConversationKey);

#[derive(Default)]
struct Inner {
    runtimes: Vec<Runtime>,
    slots: HashMap<i64, usize>,
    queues: HashMap<i64, VecDeque<Waiter>>,
    bindings: HashMap<BindingKey, Binding>,
    next_waiter: u64,
    /// Reused by the eligibility scan (positions in the pool's account list).
    scratch: Vec<u32>,
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
    settings: Settings,
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
        Arc::new(Scheduler { inner: Mutex::default(), settings, clock, seq: AtomicU64::new(1), store })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// The dense slot of an account (assigned once, kept for the process's life).
    pub fn register(&self, account_id: i64) -> usize {
        self.lock().slot(account_id)
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
        for b in loaded.bindings {
            let binding = Binding {
                account_id: b.account_id,
                model: b.model,
                used_at: b.used_at,
                stored_at: b.used_at,
            };
            inner.bindings.insert(b.key, binding);
        }
        self.seq.fetch_max(max_seq + 1, Ordering::Relaxed);
    }

    /// One decision for `ask` over `pool` (RT-1..RT-5, RT-7, RT-8, ADM-1, ADM-6, ADM-9).
    /// `reserved` is a slot handed to this request while it waited; it counts as free capacity.
    pub fn decide(
        self: &Arc<Self>,
        pool: &PoolRoutes,
        ask: &Ask<'_>,
        reserved: Option<Reservation>,
    ) -> (Step, RoutingDecision) {
        let now = self.now();
        let mut inner = self.lock();
        let reserved_slot = reserved.as_ref().map(|r| r.slot);
        let (step, decision) = self.decide_locked(&mut inner, pool, ask, reserved_slot, now);
        // The reservation was used (its slot is now the lease's) or must be handed on.
        if let Some(mut r) = reserved {
            let used = matches!(&step, Step::Go(l) if l.slot == r.slot);
            r.done = true;
            if !used {
                self.release_locked(&mut inner, r.slot);
            }
        }
        drop(inner);
        if let Step::Go(lease) = &step {
            self.store_binding_if_due(ask, lease, now);
        }
        (step, decision)
    }

    fn decide_locked(
        self: &Arc<Self>,
        inner: &mut Inner,
        pool: &PoolRoutes,
        ask: &Ask<'_>,
        reserved: Option<usize>,
        now: i64,
    ) -> (Step, RoutingDecision) {
        let accounts = pool.accounts();
        let entries = pool.entries();
        // The account at `i` of the pool, brought in step with its configuration.
        let sync = |inner: &mut Inner, i: usize| {
            let rt = &mut inner.runtimes[entries[i].slot];
            if rt.stale(&entries[i]) || rt.cold.provider != Some(entries[i].provider) {
                rt.sync(&accounts[i]);
            }
        };
        let has_room = |inner: &Inner, slot: usize| {
            let rt = &inner.runtimes[slot];
            reserved == Some(slot) || rt.in_flight < rt.limit
        };
        let serves =
            |e: &Entry| ask.supported.contains(&e.provider) && ask.only.is_none_or(|p| p == e.provider);

        // RT-1/RT-2: a bound conversation (or a WebSocket connection) goes to its account.
        let bound_id = ask.pin.or_else(|| {
            let key = (ask.member_id, ask.pool_id, ask.conversation?);
            let b = inner.bindings.get(&key)?;
            (now - b.used_at < self.ttl_ms()).then_some(b.account_id)
        });
        // RT-3: the bound account left out of this choice, and why.
        let mut skip: Option<(usize, Block)> = None;
        if let Some(i) = bound_id.and_then(|id| pool.position(id)).filter(|i| serves(&entries[*i])) {
            sync(inner, i);
            let slot = entries[i].slot;
            let decision = RoutingDecision::kept(Rule::SessionBinding);
            match inner.runtimes[slot].block(ask.model, now) {
                Some(b) if b.account_wide() => {
                    return (Step::Refuse(Refusal::AccountCooling(b.retry_after(now))), decision);
                }
                Some(b) if !self.model_switch_may_move(inner, ask) => {
                    return (Step::Refuse(model_refusal(&b, now)), decision);
                }
                // RT-3: a client-side model switch with portable history may move.
                Some(b) => skip = Some((slot, b)),
                None if has_room(inner, slot) => {
                    let lease = self.lease(inner, &accounts[i], ask, reserved, now);
                    return (Step::Go(lease), decision);
                }
                None => return (self.enqueue(inner, ask, Want::Account(slot)), decision),
            }
        } else if ask.pin.is_some() {
            // The connection's account left the pool or stopped serving this protocol.
            return (Step::Refuse(Refusal::NoAccount), RoutingDecision::kept(Rule::SessionBinding));
        }

        // RT-7: a review/guardian request prefers its parent conversation's account when that
        // account can take it right now; otherwise normal scheduling, parent binding untouched.
        if let Some(parent) = ask.parent
            && let Some(b) = inner.bindings.get(&(ask.member_id, ask.pool_id, parent))
            && now - b.used_at < self.ttl_ms()
            && let Some(i) = pool.position(b.account_id).filter(|i| serves(&entries[*i]))
        {
            sync(inner, i);
            let slot = entries[i].slot;
            if inner.runtimes[slot].block(ask.model, now).is_none() && has_room(inner, slot) {
                let lease = self.lease(inner, &accounts[i], ask, reserved, now);
                return (Step::Go(lease), RoutingDecision::kept(Rule::ParentSession));
            }
        }

        // RT-5/RT-8: rotation among eligible accounts with room, highest priority tier first.
        let mut excluded = Excluded::default();
        let mut eligible = std::mem::take(&mut inner.scratch);
        eligible.clear();
        let skipped = skip.as_ref().map(|(slot, _)| *slot);
        let mut soonest: Option<Block> = skip.map(|(_, b)| b);
        // Whether every block met is an upstream rate limit (BUD-5).
        let mut all_rate_limited = true;
        for (i, e) in entries.iter().enumerate() {
            if !ask.supported.contains(&e.provider) {
                excluded.model_support += 1;
                continue;
            }
            if ask.only.is_some_and(|p| p != e.provider) {
                excluded.policy += 1;
                continue;
            }
            if skipped == Some(e.slot) {
                excluded.cooldown += 1;
                continue;
            }
            if inner.runtimes[e.slot].stale(e) {
                sync(inner, i);
            }
            let rt = &inner.runtimes[e.slot];
            if let Some(b) = rt.block(ask.model, now) {
                if matches!(b, Block::TempUnschedulable { .. }) {
                    excluded.unavailable += 1;
                } else {
                    excluded.cooldown += 1;
                }
                all_rate_limited &= matches!(b, Block::RateLimited { .. });
                if soonest.as_ref().is_none_or(|s| b.retry_after(now) < s.retry_after(now)) {
                    soonest = Some(b);
                }
                continue;
            }
            if !(reserved == Some(e.slot) || rt.in_flight < rt.limit) {
                excluded.capacity += 1;
                continue;
            }
            eligible.push(i as u32);
        }
        let step = match eligible.first() {
            Some(&first) => {
                let top = entries[first as usize].priority;
                let tier = eligible.iter().take_while(|&&i| entries[i as usize].priority == top).count();
                let pick = eligible[pool.next_turn() % tier] as usize;
                let decision = RoutingDecision::rotation(tier as u32, excluded);
                inner.scratch = eligible;
                return (Step::Go(self.lease(inner, &accounts[pick], ask, reserved, now)), decision);
            }
            None if excluded.capacity > 0 => self.enqueue(
                inner,
                ask,
                Want::Any { supported: self.wanted_providers(ask), model: ask.model.to_owned() },
            ),
            None => match soonest {
                // Paused credentials are no cooldown a client can wait out.
                Some(Block::TempUnschedulable { .. }) => Step::Refuse(Refusal::NoAccount),
                // BUD-5: every account able to serve it is rate limited upstream.
                Some(b) if b.account_wide() && all_rate_limited => {
                    Step::Refuse(Refusal::UpstreamQuotaExhausted(b.retry_after(now)))
                }
                Some(b) if b.account_wide() => Step::Refuse(Refusal::AccountCooling(b.retry_after(now))),
                Some(b) => Step::Refuse(model_refusal(&b, now)),
                None => Step::Refuse(Refusal::NoAccount),
            },
        };
        inner.scratch = eligible;
        (step, RoutingDecision::rotation(0, excluded))
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.settings.binding_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    fn wanted_providers(&self, ask: &Ask<'_>) -> Vec<Provider> {
        ask.supported.iter().copied().filter(|p| ask.only.is_none_or(|o| o == *p)).collect()
    }

    /// RT-3: only a request of a conversation, with a model other than the one it is bound for
    /// and no upstream continuation, may leave its account.
    fn model_switch_may_move(&self, inner: &Inner, ask: &Ask<'_>) -> bool {
        if ask.pin.is_some() || ask.continuation {
            return false;
        }
        let Some(conv) = ask.conversation else { return false };
        inner.bindings.get(&(ask.member_id, ask.pool_id, conv)).is_some_and(|b| b.model != ask.model)
    }

    /// Takes a slot of `a` (or keeps the reserved one, already counted) and returns its lease.
    fn lease(
        self: &Arc<Self>,
        inner: &mut Inner,
        a: &Arc<Account>,
        ask: &Ask<'_>,
        reserved: Option<usize>,
        now: i64,
    ) -> Lease {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let rt = &mut inner.runtimes[a.slot];
        if reserved != Some(a.slot) {
            rt.in_flight += 1;
        }
        if rt.has_models {
            rt.cold.state.admit(ask.model, seq, now);
        }
        match rt.cold.requests.get_mut(ask.model) {
            Some(n) => *n += 1,
            None => {
                rt.cold.requests.insert(ask.model.to_owned(), 1);
            }
        }
        if ask.pin.is_none()
            && let Some(conv) = ask.conversation
        {
            let key = (ask.member_id, ask.pool_id, conv);
            match inner.bindings.get_mut(&key) {
                Some(b) if b.account_id == a.id && b.model == ask.model => b.used_at = now,
                Some(b) => {
                    b.account_id = a.id;
                    b.model = ask.model.to_owned();
                    b.used_at = now;
                    b.stored_at = i64::MIN;
                }
                None => {
                    if inner.bindings.len() % BINDING_SWEEP == BINDING_SWEEP - 1 {
                        let ttl = self.ttl_ms();
                        inner.bindings.retain(|_, b| now - b.used_at < ttl);
                    }
                    inner.bindings.insert(
                        key,
                        Binding {
                            account_id: a.id,
                            model: ask.model.to_owned(),
                            used_at: now,
                            stored_at: i64::MIN,
                        },
                    );
                }
            }
        }
        Lease {
            scheduler: Arc::clone(self),
            slot: a.slot,
            account: Arc::clone(a),
            seq,
            model: ask.model.to_owned(),
            settled: false,
        }
    }

    /// Writes a binding through to the database when it is new, moved, or an hour stale.
    fn store_binding_if_due(&self, ask: &Ask<'_>, lease: &Lease, now: i64) {
        let Some(conv) = ask.conversation.filter(|_| ask.pin.is_none()) else { return };
        let key = (ask.member_id, ask.pool_id, conv);
        let mut inner = self.lock();
        let Some(b) = inner.bindings.get_mut(&key) else { return };
        if b.account_id != lease.account.id || now.saturating_sub(b.stored_at) < 3_600_000 {
            return;
        }
        b.stored_at = now;
        let write =
            store::Write::Binding { key, account_id: b.account_id, model: b.model.clone(), used_at: now };
        drop(inner);
        self.store.send(write);
    }

    fn enqueue(self: &Arc<Self>, inner: &mut Inner, ask: &Ask<'_>, want: Want) -> Step {
        let queue = inner.queues.entry(ask.pool_id).or_default();
        queue.retain(|w| !w.wake.is_closed());
        if queue.len() >= self.settings.queue_capacity {
            return Step::Refuse(Refusal::QueueFull);
        }
        let id = inner.next_waiter;
        inner.next_waiter += 1;
        let (tx, rx) = oneshot::channel();
        inner.queues.entry(ask.pool_id).or_default().push_back(Waiter { id, want, wake: tx });
        Step::Wait(Ticket { scheduler: Arc::clone(self), pool_id: ask.pool_id, id, rx: Some(rx) })
    }

    /// Gives slot `slot` back: to the oldest waiter that can use it, else to the pool (ADM-6).
    fn release_locked(&self, inner: &mut Inner, slot: usize) {
        let now = self.now();
        // Over a lowered limit the slot is not handed on: the count just drops (ADM-4).
        while inner.runtimes[slot].in_flight <= inner.runtimes[slot].limit {
            let Some((pool_id, pos)) = oldest_waiter_for(inner, slot, now) else { break };
            let Some(w) = inner.queues.get_mut(&pool_id).and_then(|q| q.remove(pos)) else { break };
            if w.wake.send(slot).is_ok() {
                return; // the slot stays counted: it now belongs to the waiter
            }
        }
        let rt = &mut inner.runtimes[slot];
        rt.in_flight = rt.in_flight.saturating_sub(1);
    }

    /// A raised limit or cleared state can serve waiters now (ADM-6).
    pub fn wake(&self, account_id: i64) {
        let mut inner = self.lock();
        let Some(&slot) = inner.slots.get(&account_id) else { return };
        let now = self.now();
        while inner.runtimes[slot].in_flight < inner.runtimes[slot].limit {
            let Some((pool_id, pos)) = oldest_waiter_for(&inner, slot, now) else { return };
            let Some(w) = inner.queues.get_mut(&pool_id).and_then(|q| q.remove(pos)) else { return };
            inner.runtimes[slot].in_flight += 1;
            if w.wake.send(slot).is_err() {
                inner.runtimes[slot].in_flight -= 1;
            }
        }
    }

    /// API-1 limits: applies a new limit at once and wakes waiters if it rose. `generation` is
    /// the configuration generation that has the new limit stored.
    pub fn set_limit(&self, account_id: i64, limit: u32, generation: u64) {
        {
            let mut inner = self.lock();
            let slot = inner.slot(account_id);
            let rt = &mut inner.runtimes[slot];
            rt.limit = limit;
            rt.cold.limit_generation = rt.cold.limit_generation.max(generation);
        }
        self.wake(account_id);
    }

    /// Applies what the upstream's answer says about the account (CD-1..CD-5).
    fn settle(&self, slot: usize, model: &str, seq: u64, verdict: Verdict) {
        let now = self.now();
        let policy = &self.settings.failure;
        let mut inner = self.lock();
        let rt = &mut inner.runtimes[slot];
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
            Verdict::ModelLimited(r) => state.model_limited(model, seq, now, r),
            Verdict::Overloaded(r) => state.overloaded(now, r, policy),
            Verdict::CredentialsRejected(status) => state.credentials_rejected(now, status, policy),
            Verdict::Neutral => {}
        }
        // Whatever the verdict, a probe this attempt held is over (CD-4).
        state.attempt_ended(model, seq);
        state.forget_expired(now, policy);
        let changed = *state != before;
        rt.refresh();
        if changed {
            let write = store::Write::State {
                account_id: rt.cold.account_id,
                revision: rt.revision,
                state: rt.cold.state.clone(),
                at: now,
            };
            drop(inner);
            self.store.send(write);
        }
    }

    /// ACC-3 actions on the live state (the caller bumps the lifecycle revision in the database).
    pub fn apply(&self, account_id: i64, revision: i64, action: StateAction) {
        let now = self.now();
        {
            let mut inner = self.lock();
            let slot = inner.slot(account_id);
            let rt = &mut inner.runtimes[slot];
            match action {
                StateAction::ClearCooldowns => rt.cold.state.clear_cooldowns(),
                StateAction::Recover => rt.cold.state.recover(),
            }
            rt.revision = revision;
            rt.refresh();
            let write = store::Write::State { account_id, revision, state: rt.cold.state.clone(), at: now };
            drop(inner);
            self.store.send(write);
        }
        self.wake(account_id);
    }

    /// API-1 runtime view of every account the scheduler has seen.
    pub fn runtime(&self) -> Vec<RuntimeView> {
        let now = self.now();
        let inner = self.lock();
        let mut depth: HashMap<i64, usize> = HashMap::new();
        for (pool, q) in &inner.queues {
            depth.insert(*pool, q.iter().filter(|w| !w.wake.is_closed()).count());
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
                state: rt.cold.state.clone(),
                requests: rt.cold.requests.clone(),
            })
            .collect()
    }

    /// Waiters now queued in `pool_id` (tests, runtime view).
    pub fn queue_depth(&self, pool_id: i64) -> usize {
        self.lock().queues.get(&pool_id).map_or(0, |q| q.iter().filter(|w| !w.wake.is_closed()).count())
    }

    /// An account-wide block in force on `account_id` now (CD-3 re-checks it before a retry).
    pub fn account_blocked(&self, account_id: i64) -> Option<Refusal> {
        let now = self.now();
        let inner = self.lock();
        let slot = *inner.slots.get(&account_id)?;
        let b = inner.runtimes[slot].cold.state.account_block(now)?;
        Some(Refusal::AccountCooling(b.retry_after(now)))
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
    pub state: AccountState,
    pub requests: HashMap<String, u64>,
}

fn model_refusal(b: &Block, now: i64) -> Refusal {
    match b {
        Block::ModelLimited { .. } => Refusal::ModelRateLimited(b.retry_after(now)),
        _ => Refusal::ModelCooling(b.retry_after(now)),
    }
}

/// The oldest live waiter, over every pool the account is in, that can use slot `slot`.
fn oldest_waiter_for(inner: &Inner, slot: usize, now: i64) -> Option<(i64, usize)> {
    let rt = &inner.runtimes[slot];
    let mut best: Option<(u64, i64, usize)> = None;
    for pool_id in &rt.cold.pools {
        let Some(q) = inner.queues.get(pool_id) else { continue };
        let found = q.iter().position(|w| {
            !w.wake.is_closed()
                && match &w.want {
                    Want::Account(s) => *s == slot,
                    Want::Any { supported, model } => {
                        rt.cold.provider.is_some_and(|p| supported.contains(&p))
                            && rt.block(model, now).is_none()
                    }
                }
        });
        if let Some(pos) = found
            && best.is_none_or(|(id, _, _)| q[pos].id < id)
        {
            best = Some((q[pos].id, *pool_id, pos));
        }
    }
    best.map(|(_, pool, pos)| (pool, pos))
}

/// One account slot, held until the attempt's record is queued (ADM-4, ADM-8).
pub struct Lease {
    scheduler: Arc<Scheduler>,
    slot: usize,
    account: Arc<Account>,
    seq: u64,
    model: String,
    settled: bool,
}

impl Lease {
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// Records what the upstream's answer says about the account; the first verdict counts.
    pub fn settle(&mut self, verdict: Verdict) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.scheduler.settle(self.slot, &self.model, self.seq, verdict);
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

/// A slot handed to a waiter; given back (to the next waiter) unless a decision uses it.
pub struct Reservation {
    scheduler: Arc<Scheduler>,
    slot: usize,
    done: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            let mut inner = self.scheduler.lock();
            self.scheduler.release_locked(&mut inner, self.slot);
        }
    }
}

/// A place in a pool's queue. Dropping it (client cancel) leaves the queue at once.
pub struct Ticket {
    scheduler: Arc<Scheduler>,
    pool_id: i64,
    id: u64,
    rx: Option<oneshot::Receiver<usize>>,
}

impl Ticket {
    /// Waits for a slot until `deadline` (ADM-6) or shutdown.
    pub async fn wait(mut self, deadline: Instant, stop: &CancellationToken) -> Result<Reservation, Refusal> {
        let Some(rx) = self.rx.as_mut() else { return Err(Refusal::WaitTimeout) };
        // On timeout or shutdown the receiver stays in the ticket: if a slot arrived at the same
        // moment, dropping the ticket passes it on.
        let slot = tokio::select! {
            r = rx => r.map_err(|_| Refusal::WaitTimeout)?,
            () = tokio::time::sleep_until(deadline) => return Err(Refusal::WaitTimeout),
            () = stop.cancelled() => return Err(Refusal::ShuttingDown),
        };
        self.rx = None;
        Ok(Reservation { scheduler: Arc::clone(&self.scheduler), slot, done: false })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.scheduler.lock();
        if let Some(q) = inner.queues.get_mut(&self.pool_id)
            && let Some(pos) = q.iter().position(|w| w.id == self.id)
        {
            q.remove(pos);
            return;
        }
        // Already handed a slot that nobody will use: pass it on.
        if let Some(mut rx) = self.rx.take()
            && let Ok(slot) = rx.try_recv()
        {
            self.scheduler.release_locked(&mut inner, slot);
        }
    }
}

#[cfg(test)]
mod tests;
