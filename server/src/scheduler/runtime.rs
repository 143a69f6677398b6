//! Live state of one account in the scheduler: load, limit, lifecycle revision and blocking
//! state, kept in step with the account's configuration lazily (only where a decision looks).

use std::collections::HashMap;

use app::model::Provider;

use super::state::{AccountState, Block};
use crate::{
    directory::{Account, Entry},
    quota::{QuotaLive, observation::base_model},
};

/// Live state of one account (one entry per account ever seen, by dense slot). The fields a
/// decision reads of an account it looks at sit in one small struct; the rest is behind a box.
/// Changes reach the pools' indexes through [`super::pool_index::Runtimes`].
pub(super) struct Runtime {
    pub(super) in_flight: u32,
    pub(super) limit: u32,
    pub(super) revision: i64,
    /// Cache of `state.blocked_until()`.
    pub(super) blocked_until: i64,
    /// Cache of `!state.models.is_empty()`.
    pub(super) has_models: bool,
    /// CRED-3: no usable token until then (unix ms; `i64::MAX`: re-authorization required;
    /// 0: none). Kept apart from the persisted state: refresh backoff is per process.
    pub(super) credentials_until: i64,
    /// RT-6: cache of the published quota's account-wide remaining percentage and until when
    /// it is fresh (`i64::MIN`: no number), so a pool index that keeps weights reads it with the
    /// load. Not an `Option`, which would take a word more in every account's hot state.
    pub(super) remaining: (f64, i64),
    pub(super) cold: Box<Cold>,
}

pub(super) struct Cold {
    pub(super) account_id: i64,
    /// Configuration generation of the newest limit set through the API: older snapshots do
    /// not overwrite it.
    pub(super) limit_generation: u64,
    /// Configuration generation of the account view last synced: an older view (a request
    /// still holding an old snapshot) never puts back old pools.
    pub(super) synced_generation: u64,
    pub(super) state: AccountState,
    /// Pools the account is in, as of its newest snapshot (for waking waiters).
    pub(super) pools: Vec<i64>,
    pub(super) provider: Option<Provider>,
    pub(super) requests: HashMap<String, u64>,
    /// The account's quota as last published, and the quota revision it belongs to (QT-2).
    pub(super) quota: Option<QuotaLive>,
    pub(super) quota_revision: i64,
    /// QT-3: new selections leave the account out until then (unix ms; 0: not). Folded into
    /// `blocked_until`, so the scan's fast path never reads it.
    pub(super) quota_until: i64,
}

impl Runtime {
    pub(super) fn new(account_id: i64) -> Self {
        Runtime {
            in_flight: 0,
            limit: 0,
            revision: 0,
            blocked_until: i64::MIN,
            has_models: false,
            credentials_until: 0,
            remaining: (0.0, i64::MIN),
            cold: Box::new(Cold {
                account_id,
                limit_generation: 0,
                synced_generation: 0,
                state: AccountState::default(),
                pools: Vec::new(),
                provider: None,
                requests: HashMap::new(),
                quota: None,
                quota_revision: 0,
                quota_until: 0,
            }),
        }
    }

    pub(super) fn block(&self, model: &str, now: i64) -> Option<Block> {
        if self.blocked_until <= now && !self.has_models {
            return None;
        }
        // The first block by priority names it, and it lasts as long as any account-wide block:
        // an account both quota-spent and rate limited serves again only when both are over.
        // (`blocked_until` is the latest of them; a re-authorization's `i64::MAX` stays.)
        if self.credentials_until > now {
            return Some(Block::Credentials { until: self.blocked_until });
        }
        if self.cold.quota_until > now {
            return Some(Block::QuotaExhausted { until: self.blocked_until });
        }
        if let Some(b) = self.cold.state.account_block(now) {
            return Some(b);
        }
        // QT-4/QT-5: a spent model is its quota before any limit the provider set on it (an
        // Antigravity QUOTA_EXHAUSTED is both): a bound conversation hears `quota_exhausted`.
        if let Some(q) = &self.cold.quota
            && let Some(&until) = q.models.get(base_model(model))
            && until > now
        {
            return Some(Block::ModelQuotaExhausted { until });
        }
        self.cold.state.model_block(model, now)
    }

    /// RT-8: whether the account serves `model`, as far as its provider's model list says (an
    /// account whose provider lists no models serves whatever its protocol carries).
    pub(super) fn supports(&self, model: &str) -> bool {
        match self.cold.quota.as_ref().and_then(|q| q.catalogue.as_ref()) {
            Some(c) if self.has_models => c.contains(base_model(model)) || c.contains(model),
            _ => true,
        }
    }

    /// Recomputes the caches after the state changed.
    pub(super) fn refresh(&mut self) {
        self.blocked_until =
            self.cold.state.blocked_until().max(self.credentials_until).max(self.cold.quota_until);
        self.has_models = !self.cold.state.models.is_empty()
            || self.cold.quota.as_ref().is_some_and(|q| !q.models.is_empty() || q.catalogue.is_some());
    }

    /// Takes the account's newly published quota (`None`: forgotten) for quota revision
    /// `revision`; an older revision's is ignored. Returns whether it was taken.
    pub(super) fn set_quota(&mut self, revision: i64, quota: Option<QuotaLive>) -> bool {
        if revision < self.cold.quota_revision {
            return false;
        }
        self.cold.quota_revision = revision;
        self.cold.quota_until = quota.as_ref().map_or(0, |q| q.account_until);
        self.remaining = quota.as_ref().and_then(|q| q.remaining).unwrap_or((0.0, i64::MIN));
        self.cold.quota = quota;
        self.refresh();
        true
    }

    pub(super) fn stale(&self, e: &Entry) -> bool {
        self.limit != e.max_concurrency || self.revision < e.revision
    }

    /// Keeps the runtime in step with the account's configuration. Nothing goes backwards: an
    /// older lifecycle revision (a request holding an older snapshot) never resets the state
    /// (which would wipe newer cooldowns), and an older view never restores old pools or limits.
    /// Returns whether anything routing depends on changed.
    pub(super) fn sync(&mut self, account: &Account) -> bool {
        let before = (self.limit, self.revision, self.cold.provider);
        let mut moved = false;
        if account.generation >= self.cold.limit_generation {
            self.limit = account.max_concurrency;
        }
        if account.revision > self.revision {
            // A new lifecycle revision (re-auth, disable/enable, manual clear): old limits go (ACC-4).
            if self.revision != 0 {
                self.cold.state = AccountState::default();
                self.refresh();
            }
            self.revision = account.revision;
        }
        if account.quota_revision > self.cold.quota_revision {
            // Re-authorized, disabled or enabled: what was observed before no longer holds.
            self.set_quota(account.quota_revision, None);
        }
        if account.generation >= self.cold.synced_generation {
            self.cold.synced_generation = account.generation;
            if self.cold.pools != account.pools {
                self.cold.pools.clone_from(&account.pools);
                moved = true;
            }
            self.cold.provider = Some(account.provider);
        }
        moved || before != (self.limit, self.revision, self.cold.provider)
    }
}
