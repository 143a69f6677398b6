//! One account's blocking dimensions (ACC-1) and the transitions the failure policy applies to
//! them (CD-1..CD-5). Pure data and functions: the caller passes the wall-clock time (unix
//! milliseconds) and the attempt's sequence number, so every rule is testable without waiting.
//!
//! Each dimension has its own lifetime and clearing one leaves the others:
//! - account-wide rate limit from an upstream 429 (`rate_limit_reset_at`),
//! - overload from an upstream 529 (`overload_until`),
//! - temporarily unschedulable after the upstream rejected the credentials (401/403),
//! - per model: the gateway's failure cooldown (CD-2) and the provider's own model limit (CD-4).
//!
//! Sequence numbers order attempts by when they were dispatched. A result only clears what was
//! set by an older attempt: a slow success that started before a failure never clears it.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};

/// The failure policy's numbers (CD-1, CD-2, CD-5).
#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    /// Logical failures within `window` that cool a model; 0 disables model cooldowns.
    pub threshold: u32,
    pub window: Duration,
    /// First model cooldown; each repeat doubles it up to `max_cooldown`.
    pub cooldown: Duration,
    pub max_cooldown: Duration,
    /// Account cooldown after a 429 without a usable Retry-After.
    pub fallback_429: Duration,
    /// Overload pause after a 529 without a usable Retry-After.
    pub overload: Duration,
    /// Pause after the upstream rejected the account's credentials (401/403).
    pub credential_pause: Duration,
    /// 403s that do not look like a credential problem, within `forbidden_window`, that pause
    /// the account as one (a single request-specific 403 never does, ERR-1).
    pub forbidden_threshold: u32,
    pub forbidden_window: Duration,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy {
            threshold: 3,
            window: Duration::from_secs(120),
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(300),
            fallback_429: Duration::from_secs(5),
            overload: Duration::from_secs(30),
            credential_pause: Duration::from_secs(300),
            forbidden_threshold: 3,
            forbidden_window: Duration::from_secs(600),
        }
    }
}

/// Retry-After while a probe finds out whether a model recovered (settled when the upstream
/// accepts it, so usually within seconds).
pub const PROBE_RETRY_AFTER_SECS: u64 = 3;

/// The bounds of an honoured Retry-After (CD-1).
pub const RETRY_AFTER_MIN: Duration = Duration::from_secs(1);
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(3600);

/// Whole seconds for a `Retry-After` header: rounded up (a client told 59 s of a 59.5 s wait
/// would come back too early) and bounded to 1..=3600.
pub fn retry_secs(wait: Duration) -> u64 {
    (wait.as_secs_f64().ceil() as u64).clamp(RETRY_AFTER_MIN.as_secs(), RETRY_AFTER_MAX.as_secs())
}

/// [`retry_secs`] for the wait from `now` until `until` (unix ms).
pub fn retry_secs_until(until: i64, now: i64) -> u64 {
    retry_secs(Duration::from_millis(u64::try_from(until - now).unwrap_or(0)))
}

/// A Retry-After hint clamped to 1..=3600 s, or the fallback when there is none.
pub fn clamp_retry(hint: Option<Duration>, fallback: Duration) -> Duration {
    hint.map_or(fallback, |d| d.clamp(RETRY_AFTER_MIN, RETRY_AFTER_MAX))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Why an account cannot take a request now, with when that ends (unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    RateLimited {
        until: i64,
    },
    Overloaded {
        until: i64,
    },
    TempUnschedulable {
        until: i64,
    },
    /// The gateway's own cooldown after repeated failures (CD-2).
    ModelCooling {
        until: i64,
    },
    /// The provider's structured model limit (CD-4).
    ModelLimited {
        until: i64,
    },
    /// A model cooldown ended and one probe request is finding out whether it recovered (CD-4).
    Probing,
    /// The account has no usable token (CRED-3): its refresh backs off until then, or, at
    /// `i64::MAX`, it needs re-authorization.
    Credentials {
        until: i64,
    },
    /// A fresh quota observation says the account's subscription quota is spent (QT-3): until
    /// the observation stops being fresh or the window resets, when it is checked again.
    QuotaExhausted {
        until: i64,
    },
    /// The same for one Antigravity model (QT-4).
    ModelQuotaExhausted {
        until: i64,
    },
}

impl Block {
    /// When the block ends on its own (unix ms); a probe ends when its request does.
    pub fn until(&self) -> Option<i64> {
        match self {
            Block::RateLimited { until }
            | Block::Overloaded { until }
            | Block::TempUnschedulable { until }
            | Block::ModelCooling { until }
            | Block::ModelLimited { until }
            | Block::QuotaExhausted { until }
            | Block::ModelQuotaExhausted { until } => Some(*until),
            Block::Credentials { until } => (*until != i64::MAX).then_some(*until),
            Block::Probing => None,
        }
    }

    pub fn account_wide(&self) -> bool {
        matches!(
            self,
            Block::RateLimited { .. }
                | Block::Overloaded { .. }
                | Block::TempUnschedulable { .. }
                | Block::Credentials { .. }
                | Block::QuotaExhausted { .. }
        )
    }

    /// A quota block (QT-3, QT-4): answered `quota_exhausted`, counted as a quota exclusion.
    pub fn quota(&self) -> bool {
        matches!(self, Block::QuotaExhausted { .. } | Block::ModelQuotaExhausted { .. })
    }

    /// Seconds until the block ends, rounded up and bounded to 1..=3600 for Retry-After. A
    /// probe under way has no end yet: a few seconds, so waiting clients do not storm it.
    pub fn retry_after(&self, now: i64) -> u64 {
        if matches!(self, Block::Credentials { until: i64::MAX }) {
            return RETRY_AFTER_MAX.as_secs(); // until an admin re-authorizes
        }
        let Some(until) = self.until() else { return PROBE_RETRY_AFTER_SECS };
        retry_secs_until(until, now)
    }
}

/// Per-model state of one account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelState {
    /// Times of recent logical failures, oldest first, within the policy window.
    #[serde(default)]
    pub failures: Vec<i64>,
    /// CD-2: the gateway's cooldown for this model.
    #[serde(default)]
    pub cooldown_until: Option<i64>,
    /// How many cooldowns in a row (the escalation ladder's step).
    #[serde(default)]
    pub level: u32,
    /// CD-4: the provider's own limit for this model.
    #[serde(default)]
    pub limited_until: Option<i64>,
    /// Sequence number of the newest attempt that failed or limited this model.
    #[serde(default)]
    pub last_bad_seq: u64,
    /// The attempt probing recovery after a cooldown ended (not persisted: a restart re-probes).
    #[serde(skip)]
    pub probe: Option<u64>,
}

impl ModelState {
    fn block(&self, now: i64) -> Option<Block> {
        if let Some(until) = self.limited_until.filter(|u| *u > now) {
            return Some(Block::ModelLimited { until });
        }
        if let Some(until) = self.cooldown_until.filter(|u| *u > now) {
            return Some(Block::ModelCooling { until });
        }
        if self.probe.is_some() {
            return Some(Block::Probing);
        }
        None
    }

    /// A cooldown or limit has ended and nobody has shown the model works again yet.
    fn awaiting_probe(&self, now: i64) -> bool {
        self.cooldown_until.is_some_and(|u| u <= now) || self.limited_until.is_some_and(|u| u <= now)
    }

    /// Nothing left to remember.
    fn is_clear(&self) -> bool {
        self.failures.is_empty()
            && self.cooldown_until.is_none()
            && self.limited_until.is_none()
            && self.level == 0
            && self.probe.is_none()
    }
}

/// The blocking dimensions of one account (ACC-1), persisted as JSON (ACC-4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountState {
    #[serde(default)]
    pub rate_limited_at: Option<i64>,
    #[serde(default)]
    pub rate_limit_reset_at: Option<i64>,
    #[serde(default)]
    pub overload_until: Option<i64>,
    #[serde(default)]
    pub temp_unschedulable_until: Option<i64>,
    #[serde(default)]
    pub temp_unschedulable_reason: Option<String>,
    #[serde(default)]
    pub models: BTreeMap<String, ModelState>,
    /// Recent 403s that did not look like a credential problem (unix ms), within the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden: Vec<i64>,
}

fn later(current: Option<i64>, candidate: i64) -> Option<i64> {
    Some(current.map_or(candidate, |c| c.max(candidate)))
}

impl AccountState {
    /// The account-wide block in force, the one that lasts longest.
    pub fn account_block(&self, now: i64) -> Option<Block> {
        let mut worst: Option<Block> = None;
        let mut consider = |until: Option<i64>, make: fn(i64) -> Block| {
            if let Some(u) = until.filter(|u| *u > now) {
                let longer = match &worst {
                    Some(b) => b.retry_after(now) < make(u).retry_after(now),
                    None => true,
                };
                if longer {
                    worst = Some(make(u));
                }
            }
        };
        consider(self.rate_limit_reset_at, |until| Block::RateLimited { until });
        consider(self.overload_until, |until| Block::Overloaded { until });
        consider(self.temp_unschedulable_until, |until| Block::TempUnschedulable { until });
        worst
    }

    /// When the account-wide blocks end (unix ms), for the fast eligibility check.
    pub fn blocked_until(&self) -> i64 {
        [self.rate_limit_reset_at, self.overload_until, self.temp_unschedulable_until]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(i64::MIN)
    }

    /// What keeps this account from serving `model` now, account-wide first.
    pub fn block(&self, model: &str, now: i64) -> Option<Block> {
        self.account_block(now).or_else(|| self.model_block(model, now))
    }

    /// What keeps `model` on this account from serving now (its cooldown, limit or probe).
    pub fn model_block(&self, model: &str, now: i64) -> Option<Block> {
        self.models.get(model).and_then(|m| m.block(now))
    }

    /// Admits attempt `seq` for `model`: if a model cooldown has just ended, this attempt becomes
    /// the one probe (CD-4). Returns whether it is the probe.
    pub fn admit(&mut self, model: &str, seq: u64, now: i64) -> bool {
        match self.models.get_mut(model) {
            Some(m) if m.probe.is_none() && m.awaiting_probe(now) => {
                m.probe = Some(seq);
                true
            }
            _ => false,
        }
    }

    /// CD-1: an upstream 429 cools the whole account.
    pub fn rate_limited(&mut self, now: i64, retry_after: Option<Duration>, policy: &FailurePolicy) {
        let until = now + ms(clamp_retry(retry_after, policy.fallback_429));
        self.rate_limited_at = Some(now);
        self.rate_limit_reset_at = later(self.rate_limit_reset_at, until);
    }

    /// CD-5: an upstream 529 / overload.
    pub fn overloaded(&mut self, now: i64, retry_after: Option<Duration>, policy: &FailurePolicy) {
        let until = now + ms(clamp_retry(retry_after, policy.overload));
        self.overload_until = later(self.overload_until, until);
    }

    /// ERR-2: the upstream rejected the account's credentials.
    pub fn credentials_rejected(&mut self, now: i64, status: u16, policy: &FailurePolicy) {
        self.temp_unschedulable_until =
            later(self.temp_unschedulable_until, now + ms(policy.credential_pause));
        self.temp_unschedulable_reason = Some(format!("upstream_{status}"));
    }

    /// A 403 that may concern only its request (ERR-1): counted; enough of them within the
    /// window pause the account as a credential problem.
    pub fn forbidden(&mut self, now: i64, policy: &FailurePolicy) {
        let window_start = now - ms(policy.forbidden_window);
        self.forbidden.retain(|t| *t > window_start);
        self.forbidden.push(now);
        if policy.forbidden_threshold > 0 && self.forbidden.len() >= policy.forbidden_threshold as usize {
            self.forbidden.clear();
            self.credentials_rejected(now, 403, policy);
        }
    }

    /// CD-4: the provider limited this model for the account, for its hint or, without one, the
    /// 429 fallback (seed 000: a missing or invalid hint means the fallback, 5 s by default).
    pub fn model_limited(
        &mut self,
        model: &str,
        seq: u64,
        now: i64,
        retry_after: Option<Duration>,
        policy: &FailurePolicy,
    ) {
        let m = self.models.entry(model.to_owned()).or_default();
        let until = now + ms(clamp_retry(retry_after, policy.fallback_429));
        m.limited_until = later(m.limited_until, until);
        m.last_bad_seq = m.last_bad_seq.max(seq);
        if m.probe == Some(seq) {
            m.probe = None;
        }
    }

    /// CD-2: an explicit 5xx or a broken stream of attempt `seq` on `model`.
    pub fn model_failed(&mut self, model: &str, seq: u64, now: i64, policy: &FailurePolicy) {
        if policy.threshold == 0 {
            return;
        }
        let m = self.models.entry(model.to_owned()).or_default();
        m.last_bad_seq = m.last_bad_seq.max(seq);
        let window_start = now - ms(policy.window);
        m.failures.retain(|t| *t > window_start);
        m.failures.push(now);
        // A failed probe cools again at once, one step up the ladder.
        let probe_failed = m.probe == Some(seq);
        if probe_failed {
            m.probe = None;
        }
        if probe_failed || m.failures.len() >= policy.threshold as usize {
            let factor = 1u32.checked_shl(m.level.min(20)).unwrap_or(u32::MAX);
            let length = policy.cooldown.saturating_mul(factor).min(policy.max_cooldown);
            m.cooldown_until = later(m.cooldown_until, now + ms(length));
            m.level = m.level.saturating_add(1);
            m.failures.clear();
        }
    }

    /// A successful attempt `seq` on `model`: clears failures and ended cooldowns that older
    /// attempts caused. Never clears a cooldown still in force or anything a newer attempt set.
    pub fn model_succeeded(&mut self, model: &str, seq: u64, now: i64) {
        let Some(m) = self.models.get_mut(model) else { return };
        if m.probe == Some(seq) {
            m.probe = None;
        }
        if seq <= m.last_bad_seq {
            return;
        }
        m.failures.clear();
        if m.cooldown_until.is_none_or(|u| u <= now) {
            m.cooldown_until = None;
            m.level = 0;
        }
        if m.limited_until.is_some_and(|u| u <= now) {
            m.limited_until = None;
        }
        if m.is_clear() {
            self.models.remove(model);
        }
    }

    /// An attempt ended without saying anything about the model's health (cancelled, client
    /// error, timeout): a probe it held is handed back so another request can probe.
    pub fn attempt_ended(&mut self, model: &str, seq: u64) {
        if let Some(m) = self.models.get_mut(model)
            && m.probe == Some(seq)
        {
            m.probe = None;
        }
    }

    /// ACC-3 "Clear cooldown": account and model cooldowns and limits; never credentials.
    pub fn clear_cooldowns(&mut self) {
        self.forbidden.clear();
        self.rate_limited_at = None;
        self.rate_limit_reset_at = None;
        self.overload_until = None;
        self.models.clear();
    }

    /// ACC-3 "Recover state": every runtime block.
    pub fn recover(&mut self) {
        *self = AccountState::default();
    }

    /// When the soonest block in force ends (unix ms), account-wide or of any model.
    pub fn next_block_end(&self, now: i64) -> Option<i64> {
        let models = self.models.values().flat_map(|m| [m.cooldown_until, m.limited_until]);
        [self.rate_limit_reset_at, self.overload_until, self.temp_unschedulable_until]
            .into_iter()
            .chain(models)
            .flatten()
            .filter(|until| *until > now)
            .min()
    }

    /// Models limited or cooling now (API-1's limited-model count).
    pub fn limited_models(&self, now: i64) -> usize {
        self.models.values().filter(|m| m.block(now).is_some()).count()
    }

    /// Drops what has expired and proves nothing any more, so the state stays small.
    pub fn forget_expired(&mut self, now: i64, policy: &FailurePolicy) {
        if self.rate_limit_reset_at.is_some_and(|u| u <= now) {
            self.rate_limit_reset_at = None;
        }
        if self.overload_until.is_some_and(|u| u <= now) {
            self.overload_until = None;
        }
        if self.temp_unschedulable_until.is_some_and(|u| u <= now) {
            self.temp_unschedulable_until = None;
            self.temp_unschedulable_reason = None;
        }
        let window_start = now - ms(policy.window);
        for m in self.models.values_mut() {
            m.failures.retain(|t| *t > window_start);
        }
        let forbidden_start = now - ms(policy.forbidden_window);
        self.forbidden.retain(|t| *t > forbidden_start);
        // Entries whose failures all left the window remember nothing.
        self.models.retain(|_, m| !m.is_clear());
        // Bounded whatever models the upstream fails: past the cap, entries that block nothing
        // now (cooldowns ended, awaiting a probe that may never come) are forgotten.
        if self.models.len() > MAX_MODEL_STATES {
            let mut excess = self.models.len() - MAX_MODEL_STATES;
            self.models.retain(|_, m| {
                let drop = excess > 0 && m.block(now).is_none();
                excess -= usize::from(drop);
                !drop
            });
        }
    }
}

/// Per-model entries kept per account (the models an upstream failed or limited).
pub const MAX_MODEL_STATES: usize = 128;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const S: i64 = 1000;

    fn policy() -> FailurePolicy {
        FailurePolicy::default()
    }

    #[test]
    fn a_429_cools_the_account_for_its_clamped_retry_after_else_five_seconds() {
        let p = policy();
        let mut a = AccountState::default();
        a.rate_limited(0, Some(Duration::from_secs(20)), &p);
        assert_eq!(a.block("m", 19 * S), Some(Block::RateLimited { until: 20 * S }));
        assert_eq!(a.block("m", 20 * S), None);
        let mut a = AccountState::default();
        a.rate_limited(0, None, &p);
        assert_eq!(a.block("any", 0), Some(Block::RateLimited { until: 5 * S }));
        let mut a = AccountState::default();
        a.rate_limited(0, Some(Duration::from_secs(86_400)), &p);
        assert_eq!(a.block("m", 0), Some(Block::RateLimited { until: 3600 * S }));
        let mut a = AccountState::default();
        a.rate_limited(0, Some(Duration::ZERO), &p);
        assert_eq!(a.block("m", 0), Some(Block::RateLimited { until: S }));
    }

    #[test]
    fn three_failures_in_the_window_cool_the_model_and_the_ladder_escalates_to_five_minutes() {
        let p = policy();
        let mut a = AccountState::default();
        a.model_failed("m", 1, 0, &p);
        a.model_failed("m", 2, 60 * S, &p);
        // the first failure left the 2 min window: only two count
        a.model_failed("m", 3, 121 * S, &p);
        assert_eq!(a.block("m", 121 * S), None);
        a.model_failed("m", 4, 122 * S, &p);
        assert_eq!(a.block("m", 122 * S), Some(Block::ModelCooling { until: 132 * S }));
        assert_eq!(a.block("other", 122 * S), None, "other models stay eligible");
        // each probe that fails doubles the cooldown: 20, 40, 80, 160, then 300 at most
        let mut now = 132 * S;
        let mut seq = 10;
        for expected in [20, 40, 80, 160, 300, 300] {
            assert_eq!(a.block("m", now), None);
            assert!(a.admit("m", seq, now), "the first request after a cooldown probes");
            assert_eq!(a.block("m", now), Some(Block::Probing), "only one probe at a time");
            a.model_failed("m", seq, now, &p);
            assert_eq!(a.block("m", now), Some(Block::ModelCooling { until: now + expected * S }));
            now += expected * S;
            seq += 1;
        }
        // a successful probe clears the ladder
        assert!(a.admit("m", seq, now));
        a.model_succeeded("m", seq, now);
        assert_eq!(a.block("m", now), None);
        assert!(a.models.is_empty());
    }

    #[test]
    fn failure_entries_that_left_the_window_are_removed_and_the_table_is_bounded() {
        let p = policy();
        let mut a = AccountState::default();
        a.model_failed("m", 1, 0, &p);
        assert_eq!(a.models.len(), 1);
        a.forget_expired(121 * S, &p);
        assert!(a.models.is_empty(), "one failure long ago proves nothing");
        // junk models that each cooled once and were never probed again
        let mut seq = 10;
        for i in 0..(MAX_MODEL_STATES + 50) {
            for _ in 0..p.threshold {
                seq += 1;
                a.model_failed(&format!("junk-{i}"), seq, 200 * S, &p);
            }
        }
        a.model_failed("hot", seq + 1, 1_000 * S, &p);
        a.model_failed("hot", seq + 2, 1_000 * S, &p);
        a.model_failed("hot", seq + 3, 1_000 * S, &p);
        a.forget_expired(1_000 * S, &p);
        assert!(a.models.len() <= MAX_MODEL_STATES);
        assert!(a.block("hot", 1_000 * S).is_some(), "a block in force is never forgotten");
    }

    #[test]
    fn request_specific_403s_pause_only_when_repeated_within_the_window() {
        let p = policy();
        let mut a = AccountState::default();
        a.forbidden(0, &p);
        a.forbidden(300 * S, &p);
        assert_eq!(a.account_block(300 * S), None, "two 403s in ten minutes: still schedulable");
        a.forbidden(700 * S, &p);
        assert_eq!(a.account_block(700 * S), None, "the first one left the window");
        a.forbidden(710 * S, &p);
        assert_eq!(a.account_block(710 * S), Some(Block::TempUnschedulable { until: 1010 * S }));
        assert_eq!(a.temp_unschedulable_reason.as_deref(), Some("upstream_403"));
    }

    #[test]
    fn threshold_zero_disables_model_cooldowns() {
        let p = FailurePolicy { threshold: 0, ..policy() };
        let mut a = AccountState::default();
        for seq in 0..10 {
            a.model_failed("m", seq, 0, &p);
        }
        assert_eq!(a.block("m", 0), None);
    }

    #[test]
    fn a_late_older_success_never_clears_a_newer_failure() {
        let p = policy();
        let mut a = AccountState::default();
        a.model_failed("m", 5, 0, &p);
        a.model_failed("m", 6, 0, &p);
        a.model_succeeded("m", 4, S);
        assert_eq!(a.models["m"].failures.len(), 2);
        a.model_succeeded("m", 7, S);
        assert!(a.models.is_empty());
    }

    #[test]
    fn an_ended_probe_without_a_verdict_lets_another_request_probe() {
        let p = policy();
        let mut a = AccountState::default();
        for seq in 0..3 {
            a.model_failed("m", seq, 0, &p);
        }
        assert!(a.admit("m", 10, 10 * S));
        assert!(!a.admit("m", 11, 10 * S));
        a.attempt_ended("m", 10);
        assert!(a.admit("m", 12, 10 * S));
    }

    #[test]
    fn dimensions_are_independent_and_clear_cooldowns_keeps_credential_pauses() {
        let p = policy();
        let mut a = AccountState::default();
        a.rate_limited(0, Some(Duration::from_secs(10)), &p);
        a.overloaded(0, Some(Duration::from_secs(60)), &p);
        a.credentials_rejected(0, 403, &p);
        a.model_limited("m", 1, 0, Some(Duration::from_secs(30)), &p);
        a.model_limited("n", 2, 0, None, &p);
        assert_eq!(
            a.model_block("n", 0),
            Some(Block::ModelLimited { until: p.fallback_429.as_millis() as i64 })
        );
        assert_eq!(a.account_block(20 * S), Some(Block::TempUnschedulable { until: 300 * S }));
        assert_eq!(a.blocked_until(), 300 * S);
        a.clear_cooldowns();
        assert_eq!(a.block("m", 0), Some(Block::TempUnschedulable { until: 300 * S }));
        a.recover();
        assert_eq!(a.block("m", 0), None);
    }

    #[test]
    fn retry_seconds_are_rounded_up() {
        assert_eq!(retry_secs(Duration::from_millis(59_500)), 60);
        assert_eq!(retry_secs(Duration::from_millis(200)), 1);
        assert_eq!(retry_secs(Duration::ZERO), 1);
        assert_eq!(retry_secs(Duration::from_secs(100_000)), 3600);
    }

    #[test]
    fn retry_after_is_bounded() {
        assert_eq!(Block::RateLimited { until: 1500 }.retry_after(0), 2);
        assert_eq!(Block::Probing.retry_after(0), PROBE_RETRY_AFTER_SECS, "a probe does not invite a storm");
        assert_eq!(Block::ModelLimited { until: i64::MAX / 2 }.retry_after(0), 3600);
    }

    #[derive(Debug, Clone)]
    enum Event {
        RateLimited(Option<u16>),
        Overloaded(Option<u16>),
        Rejected,
        Limited(u8, Option<u16>),
        Failed(u8),
        Succeeded(u8),
        Admitted(u8),
        Ended(u8),
        Advance(u16),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            proptest::option::of(0u16..4000).prop_map(Event::RateLimited),
            proptest::option::of(0u16..4000).prop_map(Event::Overloaded),
            Just(Event::Rejected),
            (0u8..3, proptest::option::of(0u16..600)).prop_map(|(m, r)| Event::Limited(m, r)),
            (0u8..3).prop_map(Event::Failed),
            (0u8..3).prop_map(Event::Succeeded),
            (0u8..3).prop_map(Event::Admitted),
            (0u8..3).prop_map(Event::Ended),
            (0u16..20_000).prop_map(Event::Advance),
        ]
    }

    proptest! {
        /// Random event sequences: a block promised until T holds until T (never unblocks early,
        /// never loses a reason), and a success never clears a failure from a newer attempt.
        #[test]
        fn blocks_hold_until_their_promised_end(events in proptest::collection::vec(event(), 1..60)) {
            let p = policy();
            let mut a = AccountState::default();
            let mut now: i64 = 1_000_000;
            let mut seq: u64 = 0;
            // dispatched but unfinished attempts per model: (seq, model)
            let mut promised_account: i64 = i64::MIN;
            let mut promised_model = [i64::MIN; 3];
            let model = |i: u8| format!("m{i}");
            for e in events {
                match e {
                    Event::Advance(ms) => now += i64::from(ms),
                    Event::RateLimited(r) => {
                        a.rate_limited(now, r.map(|s| Duration::from_secs(s.into())), &p);
                        promised_account = promised_account.max(a.rate_limit_reset_at.unwrap());
                    }
                    Event::Overloaded(r) => {
                        a.overloaded(now, r.map(|s| Duration::from_secs(s.into())), &p);
                        promised_account = promised_account.max(a.overload_until.unwrap());
                    }
                    Event::Rejected => {
                        a.credentials_rejected(now, 401, &p);
                        promised_account = promised_account.max(a.temp_unschedulable_until.unwrap());
                    }
                    Event::Limited(m, r) => {
                        seq += 1;
                        a.model_limited(&model(m), seq, now, r.map(|s| Duration::from_secs(s.into())), &p);
                        let until = a.models[&model(m)].limited_until.unwrap();
                        promised_model[m as usize] = promised_model[m as usize].max(until);
                    }
                    Event::Failed(m) => {
                        seq += 1;
                        a.model_failed(&model(m), seq, now, &p);
                        if let Some(until) = a.models.get(&model(m)).and_then(|s| s.cooldown_until) {
                            promised_model[m as usize] = promised_model[m as usize].max(until);
                        }
                    }
                    Event::Succeeded(m) => {
                        // a result from an attempt dispatched before everything so far
                        let failures = a.models.get(&model(m)).map(|s| s.failures.len());
                        a.model_succeeded(&model(m), 0, now);
                        prop_assert_eq!(a.models.get(&model(m)).map(|s| s.failures.len()), failures,
                            "a late older success cleared a newer failure");
                        seq += 1;
                        a.model_succeeded(&model(m), seq, now);
                    }
                    Event::Admitted(m) => {
                        seq += 1;
                        if a.block(&model(m), now).is_none() {
                            a.admit(&model(m), seq, now);
                        }
                    }
                    Event::Ended(m) => a.attempt_ended(&model(m), seq),
                }
                for m in 0..3u8 {
                    let block = a.block(&model(m), now);
                    if promised_account > now {
                        prop_assert!(block.as_ref().is_some_and(Block::account_wide),
                            "account block promised until {} lost at {}", promised_account, now);
                    }
                    if promised_model[m as usize] > now {
                        prop_assert!(block.is_some(), "model block promised until {} lost at {}",
                            promised_model[m as usize], now);
                    }
                }
            }
        }
    }
}
