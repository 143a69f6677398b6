//! One routing decision (RT-1..RT-5, RT-7, RT-8, ADM-9, EXP-1): the bound account, the parent's
//! account, or rotation over the pool's eligible accounts; the lease that comes with a choice and
//! the binding it creates or refreshes.

use std::sync::{Arc, atomic::Ordering};

use app::model::Provider;

use super::{
    Ask, Excluded, Inner, Lease, Refusal, Reservation, RoutingDecision, Rule, Scheduler, Step, Want,
    state::Block,
};
use crate::proxy::directory::{Account, Entry, PoolRoutes};

impl Scheduler {
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
            inner.bindings.get(&key, now, self.ttl_ms()).map(|b| b.account_id)
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
                Some(b) if !self.model_switch_may_move(inner, ask, now) => {
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
            && let Some(b) = inner.bindings.get(&(ask.member_id, ask.pool_id, parent), now, self.ttl_ms())
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
        if rt.has_models {
            rt.cold.state.admit(ask.model, seq, now);
        }
        let counted = match rt.cold.requests.get_mut(ask.model) {
            Some(n) => {
                *n += 1;
                true
            }
            None => false,
        };
        if ask.pin.is_none()
            && let Some(conv) = ask.conversation
        {
            let key = (ask.member_id, ask.pool_id, conv);
            let ttl = self.ttl_ms();
            inner.bindings.touch(key, a.id, ask.model, now, ttl, &mut inner.pending_writes);
        }
        Lease {
            scheduler: Arc::clone(self),
            slot: a.slot,
            account: Arc::clone(a),
            seq,
            model: ask.model.to_owned(),
            settled: false,
            counted,
        }
    }
}

fn model_refusal(b: &Block, now: i64) -> Refusal {
    match b {
        Block::ModelLimited { .. } => Refusal::ModelRateLimited(b.retry_after(now)),
        _ => Refusal::ModelCooling(b.retry_after(now)),
    }
}
