//! One routing decision (RT-1..RT-5, RT-7, RT-8, ADM-9, EXP-1): the bound account, the parent's
//! account, or rotation over the pool's eligible accounts; the lease that comes with a choice and
//! the binding it creates or refreshes.

use std::sync::{Arc, atomic::Ordering};

use app::model::Provider;

use super::{
    Ask, Excluded, Inner, Lease, Refusal, Reservation, RoutingDecision, Rule, Scheduler, Step, Want,
    pool_index,
    state::{AccountState, Block},
};
use crate::directory::{Account, Entry, PoolRoutes};

impl Scheduler {
    /// One decision for `ask` over `pool` (RT-1..RT-5, RT-7, RT-8, ADM-1, ADM-6, ADM-9).
    /// `reserved` is a slot handed to this request while it waited; it counts as free capacity.
    pub fn decide(
        self: &Arc<Self>,
        pool: &PoolRoutes,
        ask: &Ask<'_>,
        reserved: Option<Reservation>,
    ) -> (Step, RoutingDecision) {
        let mut inner = self.lock();
        // Read under the lock, so decisions see time in the order they are taken (the pool
        // indexes' bits hold from the time they were worked out onwards).
        let now = self.now();
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
        let writes = std::mem::take(&mut inner.pending_writes);
        drop(inner);
        for w in writes {
            self.store.send(w);
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
                let _ = rt.sync(&accounts[i]);
            }
        };
        let has_room = |inner: &Inner, slot: usize| {
            let rt = &inner.runtimes[slot];
            reserved == Some(slot) || rt.in_flight < rt.limit
        };
        let serves =
            |e: &Entry| ask.supported.contains(&e.provider) && ask.only.is_none_or(|p| p == e.provider);
        // RT-8 / ID-4: what the operator's model lists say, per provider, worked out once. When
        // every provider that could serve the request lists models and none lists this one, the
        // model is unknown to the pool, bound conversation or not.
        let mut listed: [Option<bool>; Provider::ALL.len()] = [None; Provider::ALL.len()];
        if let Some(c) = self.catalogues.get() {
            let mut any_open = false;
            for &p in ask.supported.iter().filter(|p| ask.only.is_none_or(|o| o == **p)) {
                listed[p as usize] = c.lists(p, ask.model);
                any_open |= listed[p as usize] != Some(false);
            }
            if !any_open && ask.supported.iter().any(|p| ask.only.is_none_or(|o| o == *p)) {
                return (
                    Step::Refuse(Refusal::ModelNotFound),
                    RoutingDecision::rotation(0, Excluded::default()),
                );
            }
        }

        // RT-1/RT-2: a bound conversation (or a WebSocket connection) goes to its account.
        let bound_id = ask.pin.or_else(|| {
            let key = (ask.member_id, ask.pool_id, ask.conversation?);
            inner.bindings.get(&key, now, self.ttl_ms()).map(|b| b.account_id)
        });
        // RT-8: the account at `i` does not serve the model, by the operator's list for its
        // provider or, without one, by its own.
        let unlisted_at = |inner: &Inner, i: usize| {
            let e = &entries[i];
            match listed[e.provider as usize] {
                Some(listed) => !listed,
                None => inner.runtimes[e.slot].has_models && !inner.runtimes[e.slot].supports(ask.model),
            }
        };
        if let Some(bound_id) = bound_id {
            let kept = RoutingDecision::kept(Rule::SessionBinding);
            match pool.position(bound_id).filter(|i| serves(&entries[*i])) {
                // RT-3: the account does not list the model; only a client-side model switch with
                // portable history may move (below).
                Some(i)
                    if unlisted_at(inner, i)
                        && (ask.pin.is_some() || !self.model_switch_may_move(inner, ask, now)) =>
                {
                    return (Step::Refuse(Refusal::ModelNotFound), kept);
                }
                Some(i) if !ask.avoid.contains(&bound_id) && !unlisted_at(inner, i) => {
                    sync(inner, i);
                    let slot = entries[i].slot;
                    // RT-2: capacity, cooldown and health never move a conversation.
                    if let Some(b) = inner.runtimes[slot].block(ask.model, now) {
                        return (
                            Step::Refuse(bound_refusal(&inner.runtimes[slot].cold.state, &b, now)),
                            kept,
                        );
                    }
                    if has_room(inner, slot) {
                        return (Step::Go(self.lease(inner, &accounts[i], ask, reserved, now)), kept);
                    }
                    return (self.enqueue(inner, ask, Want::Account(slot), None), kept);
                }
                // The connection's account left the pool or stopped serving this protocol.
                _ if ask.pin.is_some() => return (Step::Refuse(Refusal::NoAccount), kept),
                // RT-3: the bound account answered that it does not support this model; only a
                // client-side model switch with portable history may move. Otherwise its answer
                // goes back as it came.
                Some(_) if !self.model_switch_may_move(inner, ask, now) => {
                    return (Step::Refuse(Refusal::NoAccount), kept);
                }
                // Gone from the pool, or no longer speaking this protocol: the conversation moves.
                _ => {}
            }
        }

        // RT-7: a review/guardian request prefers its parent conversation's account when that
        // account can take it right now; otherwise normal scheduling, parent binding untouched.
        if let Some(parent) = ask.parent
            && let Some(b) = inner.bindings.get(&(ask.member_id, ask.pool_id, parent), now, self.ttl_ms())
            && !ask.avoid.contains(&b.account_id)
            && let Some(i) =
                pool.position(b.account_id).filter(|i| serves(&entries[*i]) && !unlisted_at(inner, *i))
        {
            sync(inner, i);
            let slot = entries[i].slot;
            if inner.runtimes[slot].block(ask.model, now).is_none() && has_room(inner, slot) {
                let lease = self.lease(inner, &accounts[i], ask, reserved, now);
                return (Step::Go(lease), RoutingDecision::kept(Rule::ParentSession));
            }
        }

        // RT-5/RT-8: rotation among eligible accounts with room, highest priority tier first.
        let mut blocked = Blocked::default();
        inner.decisions += 1;
        let Inner { runtimes, indexes, decisions, scratch, .. } = inner;
        // (read once: the index keeps weights by it, and the pick below uses them)
        let weighing = self.settings().quota_weighted;
        let at = pool_index::find_or_make(indexes, pool, *decisions, weighing);
        pool_index::follow(indexes, runtimes, now);
        let index = &mut indexes[at];
        let scan = index.scan(runtimes, pool, ask, &listed, reserved, now, |b| blocked.add(b, now));
        #[cfg(debug_assertions)]
        {
            let (excluded, unlisted, eligible) =
                pool_index::reference_scan(runtimes, pool, ask, &listed, reserved, now);
            index.assert_consistent(runtimes, now);
            let mut indexed = Vec::new();
            index.eligible_in(0, entries.len(), &mut indexed);
            assert_eq!((scan.excluded, scan.unlisted, indexed), (excluded, unlisted, eligible));
        }
        // The pool's accounts of the providers asked for that routing leaves out (disabled,
        // expired, ...): unavailable to EXP-1, and what makes a pool without a serving account
        // answer 503 (it has such accounts) or 404 (it has none at all).
        let set = provider_set(ask);
        let offline: u32 =
            Provider::ALL.iter().filter(|p| set & 1 << (**p as usize) != 0).map(|p| pool.offline(*p)).sum();
        let mut excluded = scan.excluded;
        excluded.unavailable += offline;
        let step = match index.top_tier() {
            Some((start, end, tier)) => {
                // RT-5: one rotation position per pool and set of providers, so traffic of one
                // protocol never decides which account serves the other's.
                let turn = pool.next_turn(set);
                let mut decision = RoutingDecision::rotation(tier as u32, excluded);
                let weighted = if weighing && tier > 1 {
                    quota_weighted(index, runtimes, entries, scratch, (start, end), ask.model, turn, now)
                } else {
                    None
                };
                let pick = match weighted {
                    Some(i) => {
                        decision.rule = Rule::QuotaWeightedRotation;
                        Some(i)
                    }
                    None => index.nth_eligible(start, end, turn % tier),
                };
                if let Some(pick) = pick {
                    return (Step::Go(self.lease(inner, &accounts[pick], ask, reserved, now)), decision);
                }
                Step::Refuse(Refusal::NoAccount)
            }
            None if excluded.capacity > 0 => {
                let avoid =
                    ask.avoid.iter().filter_map(|id| pool.position(*id)).map(|i| entries[i].slot).collect();
                let want =
                    Want::Any { supported: self.wanted_providers(ask), model: ask.model.to_owned(), avoid };
                self.enqueue(inner, ask, want, blocked.soonest_end())
            }
            None if scan.unlisted > 0 && scan.unlisted == scan.speaking => {
                Step::Refuse(Refusal::ModelNotFound)
            }
            // Seed 002: a pool that cannot serve the request at all, in any account's state, is
            // a 404 about the model, not a 503 a client would retry.
            None if scan.speaking == 0 && offline == 0 => Step::Refuse(Refusal::ModelNotFound),
            None => Step::Refuse(blocked.refusal(now)),
        };
        (step, RoutingDecision::rotation(0, excluded))
    }

    pub(super) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.settings().binding_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    fn wanted_providers(&self, ask: &Ask<'_>) -> Vec<Provider> {
        ask.supported.iter().copied().filter(|p| ask.only.is_none_or(|o| o == *p)).collect()
    }

    /// RT-3: only a request of a conversation, with a model other than the one it is bound for
    /// and no upstream continuation, may leave its account.
    fn model_switch_may_move(&self, inner: &Inner, ask: &Ask<'_>, now: i64) -> bool {
        if ask.pin.is_some() || ask.continuation {
            return false;
        }
        let Some(conv) = ask.conversation else { return false };
        inner
            .bindings
            .get(&(ask.member_id, ask.pool_id, conv), now, self.ttl_ms())
            .is_some_and(|b| &*b.model != ask.model)
    }

    /// Takes a slot of `a` (or keeps the reserved one, already counted) and returns its lease.
    pub(super) fn lease(
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
        let probe = rt.has_models && rt.cold.state.admit(ask.model, seq, now);
        let counted = match rt.cold.requests.get_mut(ask.model) {
            Some(n) => {
                *n += 1;
                true
            }
            None => false,
        };
        // A conversation's binding: refreshed now when it exists; a new one is made only when
        // the upstream accepts the request (`Lease::accepted`).
        let mut bind = None;
        if ask.pin.is_none()
            && let Some(conv) = ask.conversation
        {
            let key = (ask.member_id, ask.pool_id, conv);
            let ttl = self.ttl_ms();
            if inner
                .bindings
                .get(&key, now, ttl)
                .is_some_and(|b| b.account_id == a.id && &*b.model == ask.model)
            {
                inner.bindings.touch(key, a.id, ask.model, now, ttl, &mut inner.pending_writes);
            } else {
                bind = Some(key);
            }
        }
        Lease {
            scheduler: Arc::clone(self),
            slot: a.slot,
            account: Arc::clone(a),
            seq,
            model: ask.model.to_owned(),
            settled: false,
            counted,
            bind,
            probe,
        }
    }
}

fn model_refusal(b: &Block, now: i64) -> Refusal {
    match b {
        Block::ModelLimited { .. } => Refusal::ModelRateLimited(b.retry_after(now)),
        _ => Refusal::ModelCooling(b.retry_after(now)),
    }
}

/// What a bound conversation hears when its account is blocked (RT-2, ERR): a credential pause
/// is no cooldown to wait out, so it gets the credential code, not `account_cooling`.
pub(super) fn bound_refusal(state: &AccountState, b: &Block, now: i64) -> Refusal {
    match b {
        Block::TempUnschedulable { .. } => {
            let status = match state.temp_unschedulable_reason.as_deref() {
                Some("upstream_401") => 401,
                _ => 403,
            };
            Refusal::CredentialsPaused(status)
        }
        Block::Credentials { .. } => Refusal::RefreshFailed(b.retry_after(now)),
        // QT-5: the conversation stays; its account's (or model's) quota is spent.
        b if b.quota() => Refusal::QuotaExhausted,
        b if b.account_wide() => Refusal::AccountCooling(b.retry_after(now)),
        b => model_refusal(b, now),
    }
}

/// RT-6: a pick among the top tier's candidates (positions `start..end` in the pool) with
/// shares proportional to each one's remaining quota of its tightest window (Antigravity: of
/// the requested model). Only when every candidate is of the same provider, one SubLane
/// observes, and all have fresh, complete numbers; otherwise `None` (uniform rotation).
///
/// Codex and Claude accounts' weights are kept by the pool's index, so the pick adds up words
/// of candidates; Antigravity's depend on the requested model and are looked up one by one.
#[allow(clippy::too_many_arguments)]
fn quota_weighted(
    index: &pool_index::PoolIndex,
    runtimes: &pool_index::Runtimes,
    entries: &[Entry],
    scratch: &mut Vec<u32>,
    (start, end): (usize, usize),
    model: &str,
    turn: usize,
    now: i64,
) -> Option<usize> {
    let provider = entries[index.nth_eligible(start, end, 0)?].provider;
    match provider {
        Provider::Codex | Provider::Claude => {
            let pick = index.weighted_nth(start, end, provider, turn);
            #[cfg(debug_assertions)]
            {
                // With whole-number weights in the whole pool every sum is exact, so the words'
                // sums must pick what the one-by-one sum picks.
                index.eligible_in(start, end, scratch);
                let weight = |i: u32| {
                    let e = &entries[i as usize];
                    let left = pool_index::fresh_weight(&runtimes[e.slot], now)?;
                    (e.provider == provider).then_some(left.0)
                };
                let whole = entries.iter().all(|e| {
                    pool_index::fresh_weight(&runtimes[e.slot], now).is_none_or(|(w, _)| w.fract() == 0.0)
                });
                if whole {
                    assert_eq!(pick, pool_index::weighted_pick(scratch, turn, weight));
                }
            }
            pick
        }
        Provider::Antigravity => {
            index.eligible_in(start, end, scratch);
            let model = crate::quota::observation::base_model(model);
            pool_index::weighted_pick(scratch, turn, |i| {
                let e = &entries[i as usize];
                if e.provider != provider {
                    return None;
                }
                let (left, until) = *runtimes[e.slot].cold.quota.as_ref()?.model_remaining.get(model)?;
                (until > now && pool_index::usable_weight(left)).then_some(left)
            })
        }
        _ => None,
    }
}

/// The providers a request may use, as a bit set (its rotation position's key).
fn provider_set(ask: &Ask<'_>) -> usize {
    ask.supported
        .iter()
        .filter(|p| ask.only.is_none_or(|o| o == **p))
        .fold(0, |set, p| set | 1 << (*p as usize))
}

/// The blocks met while scanning for an unbound request, by kind: when no account is left, the
/// answer follows the reason most accounts share (not whichever block ends soonest), and its
/// `Retry-After` says when the soonest block of any kind ends: capacity may appear then, so a
/// client told to wait for the common reason's end would wait longer than it needs to.
#[derive(Default)]
struct Blocked {
    /// Per kind (rate limited, overloaded, credentials, model cooling, model limited, quota):
    /// how many accounts, and the block of that kind that ends soonest.
    kinds: [(u32, Option<Block>); 6],
    /// The soonest end of any timed block (a probe has none), for the pool's timer.
    soonest_end: Option<i64>,
}

impl Blocked {
    fn add(&mut self, b: Block, now: i64) {
        let k = match b {
            Block::RateLimited { .. } => 0,
            Block::Overloaded { .. } => 1,
            Block::TempUnschedulable { .. } | Block::Credentials { .. } => 2,
            Block::ModelCooling { .. } | Block::Probing => 3,
            Block::ModelLimited { .. } => 4,
            Block::QuotaExhausted { .. } | Block::ModelQuotaExhausted { .. } => 5,
        };
        if let Some(until) = b.until() {
            self.soonest_end = Some(self.soonest_end.map_or(until, |s| s.min(until)));
        }
        let (n, soonest) = &mut self.kinds[k];
        *n += 1;
        if soonest.as_ref().is_none_or(|s| b.retry_after(now) < s.retry_after(now)) {
            *soonest = Some(b);
        }
    }

    /// When the soonest timed block ends (unix ms): capacity may appear then.
    fn soonest_end(&self) -> Option<i64> {
        self.soonest_end
    }

    fn refusal(&self, now: i64) -> Refusal {
        let total: u32 = self.kinds.iter().map(|(n, _)| n).sum();
        // Most accounts first; on a tie the reason that ends soonest, then the lower kind (a rate
        // limit before an overload before a credential pause).
        let dominant = (0..self.kinds.len()).filter(|k| self.kinds[*k].0 > 0).max_by_key(|k| {
            (self.kinds[*k].0, std::cmp::Reverse(self.retry(*k, now)), std::cmp::Reverse(*k))
        });
        let Some(k) = dominant else { return Refusal::NoAccount };
        // (the dominant kind's own soonest end is among them)
        let retry = (0..self.kinds.len()).map(|k| self.retry(k, now)).min().unwrap_or(1);
        match k {
            // BUD-5: every account able to serve it is rate limited upstream.
            0 if self.kinds[0].0 == total => Refusal::UpstreamQuotaExhausted(retry),
            0 | 1 => Refusal::AccountCooling(retry),
            // Paused credentials are no cooldown a client can wait out; missing tokens say when
            // their refresh may be tried again.
            2 => match &self.kinds[2].1 {
                Some(Block::Credentials { .. }) => Refusal::RefreshFailed(retry),
                _ => Refusal::CredentialsPausedPool(retry),
            },
            3 => Refusal::ModelCooling(retry),
            4 => Refusal::ModelRateLimited(retry),
            // Most accounts' (or the model's) subscription quota is spent: BUD-5's answer, with
            // the time when the soonest of those observations is checked again (QT-3). The 403
            // `quota_exhausted` is for a bound conversation (QT-5), which never moves.
            _ => Refusal::UpstreamQuotaExhausted(retry),
        }
    }

    /// Seconds until the soonest block of `kind` ends (`u64::MAX` when none was met).
    fn retry(&self, kind: usize, now: i64) -> u64 {
        self.kinds[kind].1.as_ref().map_or(u64::MAX, |b| b.retry_after(now))
    }
}
