//! Live state of one account in the scheduler: load, limit, lifecycle revision and blocking
//! state, kept in step with the account's configuration lazily (only where a decision looks).

use std::collections::HashMap;

use app::model::Provider;

use super::state::{AccountState, Block};
use crate::directory::{Account, Entry};

/// Live state of one account (one entry per account ever seen, by dense slot). The fields the
/// eligibility scan reads sit in one small struct; the rest is behind a box, so scanning a
/// thousand accounts touches about one cache line each.
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
            cold: Box::new(Cold {
                account_id,
                limit_generation: 0,
                synced_generation: 0,
                state: AccountState::default(),
                pools: Vec::new(),
                provider: None,
                requests: HashMap::new(),
            }),
        }
    }

    pub(super) fn block(&self, model: &str, now: i64) -> Option<Block> {
        if self.blocked_until <= now && !self.has_models {
            return None;
        }
        if self.credentials_until > now {
            return Some(Block::Credentials { until: self.credentials_until });
        }
        self.cold.state.block(model, now)
    }

    /// Recomputes the caches after the state changed.
    pub(super) fn refresh(&mut self) {
        self.blocked_until = self.cold.state.blocked_until().max(self.credentials_until);
        self.has_models = !self.cold.state.models.is_empty();
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
