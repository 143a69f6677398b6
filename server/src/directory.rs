//! The accounts and pools the proxy routes over, held in memory so that a request never waits on
//! SQLite. A snapshot is rebuilt when the configuration [`Generation`] moves (a real change
//! through the JSON API or the web app), or when the soonest account expiry it waits for passes
//! (ACC-1, RT-8: an expired account routes nothing), and otherwise reused.
//!
//! A rebuild is cheap: an account whose row is unchanged keeps its `Arc<Account>` from the last
//! snapshot (its credentials are not opened again), and each pool keeps its rotation position, so
//! a reload never skews rotation onto the first account (RT-5).
//!
//! A pool's accounts are kept sorted by priority (highest first) so the scheduler's eligibility
//! scan finds the top tier as a prefix. Each account carries its scheduler slot, so the scan reads
//! live state by index, not by lookup.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering},
    },
};

use app::model::{ModelPolicy, PolicyMode, Provider};
use sqlx::SqlitePool;
use tokio::sync::Mutex;

use crate::{
    clock::SharedClock,
    credentials::{Flags, TokenCell, Tokens, open_sealed},
    crypto::Sealer,
    error::Result,
    scheduler::Scheduler,
};

/// A counter bumped by every configuration change; caches compare it to know they are stale.
#[derive(Debug, Clone, Default)]
pub struct Generation(Arc<AtomicU64>);

impl Generation {
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}
/// One routable account with its opened credentials. Never logged (no Debug on secrets).
pub struct Account {
    pub id: i64,
    pub provider: Provider,
    /// Larger is preferred (RT-5: highest tier first).
    pub priority: i64,
    pub max_concurrency: u32,
    /// Lifecycle revision (ACC-4): a new one discards old runtime limits.
    pub revision: i64,
    /// Quota revision (QT-2): a new one (re-authorization, disable/enable) discards old quota
    /// observations; Clear cooldown leaves it.
    pub quota_revision: i64,
    /// Pools this account serves.
    pub pools: Vec<i64>,
    /// The account's dense index in the scheduler.
    pub slot: usize,
    /// The configuration generation this view of the account was loaded at.
    pub generation: u64,
    /// Its credentials, alive (refreshed in place, CRED-1): shared by every snapshot.
    pub tokens: Arc<TokenCell>,
}

/// What the scheduler's pool index reads of an account, packed next to its neighbours (the
/// `Arc<Account>` is only touched when chosen or brought in step).
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub slot: usize,
    pub provider: Provider,
    pub priority: i64,
    pub max_concurrency: u32,
    pub revision: i64,
}

/// A pool's routing view.
pub struct PoolRoutes {
    pub policy: ModelPolicy,
    /// Unique to this view in the process (the scheduler keeps its eligibility index by it).
    key: u64,
    accounts: Vec<Arc<Account>>,
    entries: Vec<Entry>,
    /// Account id -> position in `accounts`.
    index: HashMap<i64, usize>,
    /// Rotation positions (RT-5), one per set of providers a request may use (a bit set).
    next: [AtomicUsize; PROVIDER_SETS],
    /// QT-1: some account's quota can be read (Codex, Antigravity), and when model traffic last
    /// looked for stale ones (unix ms): the hot path pays one atomic load otherwise.
    quota_readable: bool,
    quota_checked_at: AtomicI64,
    /// Per provider, the pool's accounts routing leaves out: disabled, in error, switched off,
    /// expired, or whose credentials do not open. EXP-1 counts them as unavailable, and they
    /// tell a pool that has a provider's accounts, none serving now (503), from one that has
    /// none at all (404, seed 002).
    offline: [u32; Provider::ALL.len()],
}

/// Provider sets, as bit sets over the five providers.
const PROVIDER_SETS: usize = 32;

/// Why a model is refused by a pool's policy.
#[derive(Debug, PartialEq, Eq)]
pub enum PolicyRefusal {
    NotAllowed,
}

impl PoolRoutes {
    /// Applies aliases and the allow/deny list (ID-4); returns the model to send upstream.
    pub fn resolve_model(&self, requested: &str) -> std::result::Result<String, PolicyRefusal> {
        let model = self.policy.aliases.get(requested).cloned().unwrap_or_else(|| requested.to_owned());
        let listed = self.policy.models.iter().any(|m| m == &model || m == requested);
        match (self.policy.mode, listed) {
            (PolicyMode::All, _) | (PolicyMode::Allow, true) | (PolicyMode::Deny, false) => Ok(model),
            _ => Err(PolicyRefusal::NotAllowed),
        }
    }

    /// The providers that have at least one routable account in this pool.
    pub fn providers(&self) -> Vec<Provider> {
        let mut out: Vec<Provider> = Vec::new();
        for a in &self.accounts {
            if !out.contains(&a.provider) {
                out.push(a.provider);
            }
        }
        out
    }

    /// The pool's routable accounts, highest priority first.
    pub fn accounts(&self) -> &[Arc<Account>] {
        &self.accounts
    }

    /// The next turn of the rotation among accounts of the provider set `set` (RT-5).
    pub fn next_turn(&self, set: usize) -> usize {
        self.next[set % PROVIDER_SETS].fetch_add(1, Ordering::Relaxed)
    }

    /// QT-1: whether model traffic should look for stale quota now (at most every `every_ms`);
    /// the first caller after that claims the look.
    pub fn quota_check_due(&self, now: i64, every_ms: i64) -> bool {
        if !self.quota_readable {
            return false;
        }
        let last = self.quota_checked_at.load(Ordering::Relaxed);
        (now.saturating_sub(last) >= every_ms || last > now)
            && self.quota_checked_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// The scan view of `accounts()`, position for position.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// What tells this view apart from every other (of this pool or another) in the process.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Where account `id` is in `accounts()`.
    pub fn position(&self, id: i64) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// A pool over `accounts`, sorted highest priority first (stable by id).
    pub fn new(policy: ModelPolicy, mut accounts: Vec<Arc<Account>>) -> Self {
        accounts.sort_by_key(|a| (std::cmp::Reverse(a.priority), a.id));
        let entries = accounts
            .iter()
            .map(|a| Entry {
                slot: a.slot,
                provider: a.provider,
                priority: a.priority,
                max_concurrency: a.max_concurrency,
                revision: a.revision,
            })
            .collect();
        let index = accounts.iter().enumerate().map(|(i, a)| (a.id, i)).collect();
        let quota_readable = accounts.iter().any(|a| crate::quota::reads::Reads::readable(a.provider));
        static KEYS: AtomicU64 = AtomicU64::new(1);
        PoolRoutes {
            policy,
            key: KEYS.fetch_add(1, Ordering::Relaxed),
            accounts,
            entries,
            index,
            next: std::array::from_fn(|_| AtomicUsize::new(0)),
            quota_readable,
            quota_checked_at: AtomicI64::new(i64::MIN),
            offline: [0; Provider::ALL.len()],
        }
    }

    /// With `n` accounts of `provider` left out of routing (tests).
    #[cfg(test)]
    pub fn with_offline(mut self, provider: Provider, n: u32) -> Self {
        self.offline[provider as usize] = n;
        self
    }

    /// The pool's accounts of `provider` that routing leaves out (see the field).
    pub fn offline(&self, provider: Provider) -> u32 {
        self.offline[provider as usize]
    }
}

/// Everything routable at one configuration generation.
pub struct Snapshot {
    generation: u64,
    /// The soonest expiry of an account in it (unix ms): from then on the snapshot is stale.
    expires: Option<i64>,
    pools: HashMap<i64, PoolRoutes>,
    /// Each account with the sealed credential it was opened from, for the next rebuild.
    accounts: HashMap<i64, (Vec<u8>, Arc<Account>)>,
}

impl Snapshot {
    pub fn pool(&self, id: i64) -> Option<&PoolRoutes> {
        self.pools.get(&id)
    }

    /// Whether account `id` is routed (its token cell follows every reload).
    pub fn routes_account(&self, id: i64) -> bool {
        self.accounts.contains_key(&id)
    }

    /// Every routed account.
    pub fn accounts(&self) -> Vec<Arc<Account>> {
        self.accounts.values().map(|(_, a)| Arc::clone(a)).collect()
    }
}

pub struct Directory {
    generation: Generation,
    /// For account expiries (read only when a snapshot holds an account that expires).
    clock: SharedClock,
    scheduler: Arc<Scheduler>,
    tokens: Arc<Tokens>,
    /// The snapshot every call reads. A plain lock, held only to clone the `Arc`: a tokio
    /// `RwLock` takes its waiters' mutex on every release, one more lock that each call's read
    /// shared with every serving thread (issue 15).
    current: std::sync::RwLock<Option<Arc<Snapshot>>>,
    /// One reload at a time (held across the database reads, hence tokio's).
    reload: Mutex<()>,
}

#[derive(sqlx::FromRow)]
struct AccountRow {
    id: i64,
    provider: String,
    priority: i64,
    max_concurrency: i64,
    lifecycle_revision: i64,
    quota_revision: i64,
    sealed_credential: Option<Vec<u8>>,
    pool_ids: Option<String>,
    token_rejected_at: Option<i64>,
    token_refreshed_at: Option<i64>,
    reauth_reason: Option<String>,
    reauth_required_at: Option<i64>,
    credential_version: i64,
    expires_at: Option<i64>,
}

impl Directory {
    pub fn new(
        generation: Generation,
        clock: SharedClock,
        scheduler: Arc<Scheduler>,
        tokens: Arc<Tokens>,
    ) -> Self {
        Directory {
            generation,
            clock,
            scheduler,
            tokens,
            current: std::sync::RwLock::new(None),
            reload: Mutex::new(()),
        }
    }

    /// The current snapshot, rebuilt first if the configuration changed.
    pub async fn snapshot(&self, db: &SqlitePool, sealer: &Sealer) -> Result<Arc<Snapshot>> {
        if let Some(s) = self.fresh() {
            return Ok(s);
        }
        // One reload at a time; latecomers reuse its result.
        let _guard = self.reload.lock().await;
        if let Some(s) = self.fresh() {
            return Ok(s);
        }
        let generation = self.generation.current();
        let previous = self.stored().clone();
        let now = self.clock.unix_ms();
        let snapshot = Arc::new(
            load(db, sealer, &self.scheduler, &self.tokens, generation, now, previous.as_deref()).await?,
        );
        // Membership, limits and lifecycle reach the live state at once, not only where a
        // decision happens to look; accounts left out serve no pool any more.
        self.scheduler.sync_directory(snapshot.accounts.values().map(|(_, a)| a));
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }

    /// The stored snapshot, if it is of the current generation and no account in it has expired.
    fn fresh(&self) -> Option<Arc<Snapshot>> {
        let generation = self.generation.current();
        self.stored()
            .as_ref()
            .filter(|s| s.generation == generation && s.expires.is_none_or(|at| self.clock.unix_ms() < at))
            .cloned()
    }

    /// The stored snapshot, read under the lock (never held across an await). A panic while it
    /// was held cannot leave it half written: it is only ever replaced whole.
    fn stored(&self) -> std::sync::RwLockReadGuard<'_, Option<Arc<Snapshot>>> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn load(
    db: &SqlitePool,
    sealer: &Sealer,
    scheduler: &Scheduler,
    tokens: &Tokens,
    generation: u64,
    now_ms: i64,
    previous: Option<&Snapshot>,
) -> Result<Snapshot> {
    // Expiries are whole unix seconds: an account expiring at `t` serves until `t * 1000` ms.
    let now_s = now_ms.div_euclid(1000);
    // One read snapshot: the routed accounts and the ones left out agree (an account changing
    // between them would be counted in neither, its pool's protocol briefly not found).
    let mut read = db.begin().await?;
    let policies: Vec<(i64, String, String, String)> = sqlx::query_as(
        "SELECT id, policy_mode, policy_models, model_aliases FROM pools WHERE deleted_at IS NULL",
    )
    .fetch_all(&mut *read)
    .await?;
    let mut members: HashMap<i64, (ModelPolicy, Vec<Arc<Account>>)> = policies
        .into_iter()
        .map(|(id, mode, models, aliases)| {
            (id, (crate::pools::policy_from_columns(&mode, &models, &aliases), Vec::new()))
        })
        .collect();
    let rows: Vec<AccountRow> = sqlx::query_as(
        "SELECT a.id, a.provider, a.priority, a.max_concurrency, a.lifecycle_revision, a.quota_revision, a.sealed_credential,
                (SELECT group_concat(pool_id) FROM account_pools WHERE account_id = a.id) AS pool_ids,
                a.token_rejected_at, a.token_refreshed_at, a.reauth_reason, a.reauth_required_at, a.credential_version,
                a.expires_at
         FROM accounts a
         WHERE a.deleted_at IS NULL AND a.status = 'active' AND a.schedulable = 1 AND a.sealed_credential IS NOT NULL
               AND (a.expires_at IS NULL OR a.expires_at > ?)
         ORDER BY a.id",
    )
    .bind(now_s)
    .fetch_all(&mut *read)
    .await?;
    let expires = rows.iter().filter_map(|r| r.expires_at).min().map(|s| s.saturating_mul(1000));
    // The rest of each pool's accounts, by provider (`PoolRoutes::offline`): the negation of the
    // condition above.
    let left_out: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT ap.pool_id, a.provider, COUNT(*) FROM account_pools ap JOIN accounts a ON a.id = ap.account_id
         WHERE a.deleted_at IS NULL
               AND NOT (a.status = 'active' AND a.schedulable = 1 AND a.sealed_credential IS NOT NULL
                        AND (a.expires_at IS NULL OR a.expires_at > ?))
         GROUP BY ap.pool_id, a.provider",
    )
    .bind(now_s)
    .fetch_all(&mut *read)
    .await?;
    let mut offline: HashMap<i64, [u32; Provider::ALL.len()]> = HashMap::new();
    let mut count_offline = |pool_id: i64, provider: Provider, n: u32| {
        offline.entry(pool_id).or_default()[provider as usize] += n;
    };
    for (pool_id, provider, n) in left_out {
        if let Some(p) = Provider::parse(&provider) {
            count_offline(pool_id, p, u32::try_from(n).unwrap_or(u32::MAX));
        }
    }
    read.commit().await?;
    let mut opened = HashMap::new();
    for row in rows {
        let Some(provider) = Provider::parse(&row.provider) else { continue };
        let Some(sealed) = row.sealed_credential else { continue };
        let account_pools = crate::validate::id_list(row.pool_ids);
        let max_concurrency = u32::try_from(row.max_concurrency).unwrap_or(1);
        // Unchanged since the last snapshot: the same account, credentials not opened again.
        let kept = previous.and_then(|p| p.accounts.get(&row.id)).filter(|(was_sealed, a)| {
            *was_sealed == sealed
                && a.provider == provider
                && a.priority == row.priority
                && a.max_concurrency == max_concurrency
                && a.revision == row.lifecycle_revision
                && a.quota_revision == row.quota_revision
                && a.pools == account_pools
        });
        // The account's token cell: its stored flags always, its credentials only when they are
        // new to it (a re-authorization after a reused snapshot's view included).
        let flags = Flags::from_columns(
            row.token_rejected_at,
            row.reauth_required_at,
            row.reauth_reason,
            row.token_refreshed_at,
            row.credential_version,
        );
        let open = || open_sealed(sealer, &sealed);
        let Some(cell) = tokens.cell(row.id, provider, &sealed, open, flags) else {
            tracing::error!(account_id = row.id, "account credentials cannot be opened; account skipped");
            for pool_id in &account_pools {
                count_offline(*pool_id, provider, 1);
            }
            continue;
        };
        let account = match kept {
            Some((_, a)) if Arc::ptr_eq(&a.tokens, &cell) => Arc::clone(a),
            _ => Arc::new(Account {
                id: row.id,
                provider,
                priority: row.priority,
                max_concurrency,
                revision: row.lifecycle_revision,
                quota_revision: row.quota_revision,
                slot: scheduler.register(row.id),
                generation,
                pools: account_pools.clone(),
                tokens: cell,
            }),
        };
        for pool_id in &account_pools {
            if let Some((_, accounts)) = members.get_mut(pool_id) {
                accounts.push(Arc::clone(&account));
            }
        }
        opened.insert(row.id, (sealed, account));
    }
    let pools = members
        .into_iter()
        .map(|(id, (policy, accounts))| {
            let mut routes = PoolRoutes::new(policy, accounts);
            routes.offline = offline.get(&id).copied().unwrap_or_default();
            // RT-5: rotation goes on where it was.
            if let Some(was) = previous.and_then(|p| p.pool(id)) {
                for (now, before) in routes.next.iter().zip(&was.next) {
                    now.store(before.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
            (id, routes)
        })
        .collect();
    Ok(Snapshot { generation, expires, pools, accounts: opened })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(accounts: Vec<Arc<Account>>, policy: ModelPolicy) -> PoolRoutes {
        PoolRoutes::new(policy, accounts)
    }

    #[test]
    fn policy_aliases_allow_and_deny() {
        let mut policy = ModelPolicy {
            mode: PolicyMode::Allow,
            models: vec!["gpt-5.1-codex".into()],
            ..Default::default()
        };
        policy.aliases.insert("fast".into(), "gpt-5.1-codex".into());
        let p = pool(vec![], policy);
        assert_eq!(p.resolve_model("fast"), Ok("gpt-5.1-codex".into()));
        assert_eq!(p.resolve_model("gpt-5.1-codex"), Ok("gpt-5.1-codex".into()));
        assert_eq!(p.resolve_model("o3"), Err(PolicyRefusal::NotAllowed));
        let deny = pool(
            vec![],
            ModelPolicy { mode: PolicyMode::Deny, models: vec!["o3".into()], ..Default::default() },
        );
        assert_eq!(deny.resolve_model("o3"), Err(PolicyRefusal::NotAllowed));
        assert_eq!(deny.resolve_model("gpt-5"), Ok("gpt-5".into()));
    }
}
