//! Pool wait queues (ADM-6, ADM-7): first come, first served. A freed slot goes straight to the
//! oldest waiter that can use it and whose pool holds the account, so a newcomer never overtakes
//! a waiter. Waiters hold no account slot, lock or transaction; dropping a [`Ticket`] (client
//! cancel) leaves the queue at once, and a slot handed to a waiter that is gone is passed on.
//!
//! Capacity can also appear without a release: a cooldown, rate limit, overload or credential
//! pause ends, or an admin enables, adds or clears an account. Then [`Scheduler::wake_all`]
//! hands the free slots out in queue order, as a release would, and tells every other waiter to
//! decide again. A waiter that decides again keeps its place: its next [`Step::Wait`] reuses its
//! queue entry (same id, a new generation), so waking never reorders the queue. Each pool whose
//! waiters are held back by blocks that end on their own has one timer, on the soonest end.

use std::sync::Arc;

use app::model::Provider;
use tokio::{sync::oneshot, time::Instant};

use super::{Ask, Inner, Refusal, Scheduler, Step};

/// Who a waiter can use.
pub(super) enum Want {
    Account(usize),
    /// Any account of these providers free for `model`, but the ones (by slot) the request
    /// already tried.
    Any {
        supported: Vec<Provider>,
        model: String,
        avoid: Vec<usize>,
    },
}

pub(super) struct Waiter {
    pub(super) id: u64,
    /// Bumped each time the waiter waits again in the same place; a ticket of an older
    /// generation no longer owns the entry.
    generation: u64,
    pub(super) want: Want,
    /// `Some(slot)`: a reserved slot; `None`: decide again. Taken once used: a waiter deciding
    /// again has none until it waits again.
    pub(super) wake: Option<oneshot::Sender<Option<usize>>>,
}

impl Waiter {
    /// Waiting now for a slot (not deciding again, not gone).
    pub(super) fn armed(&self) -> bool {
        self.wake.as_ref().is_some_and(|w| !w.is_closed())
    }

    /// Still wants a place in the queue (waiting, or deciding again).
    pub(super) fn live(&self) -> bool {
        self.wake.as_ref().is_none_or(|w| !w.is_closed())
    }
}

impl Scheduler {
    /// Queues `ask` in its pool, or takes up its old place again when it was queued before
    /// (`ask.queued`). `blocked_until`: when the soonest block that holds back an account this
    /// waiter could use ends (unix ms); the pool's timer is armed for it.
    pub(super) fn enqueue(
        self: &Arc<Self>,
        inner: &mut Inner,
        ask: &Ask<'_>,
        want: Want,
        blocked_until: Option<i64>,
    ) -> Step {
        let (tx, rx) = oneshot::channel();
        let queue = inner.queues.entry(ask.pool_id).or_default();
        queue.retain(Waiter::live);
        let place = ask.queued.and_then(|id| queue.iter_mut().find(|w| w.id == id));
        let (id, generation) = match place {
            Some(w) => {
                w.generation += 1;
                w.want = want;
                w.wake = Some(tx);
                (w.id, w.generation)
            }
            None => {
                if queue.len() >= self.settings().queue_capacity {
                    return Step::Refuse(Refusal::QueueFull);
                }
                let id = inner.next_waiter;
                inner.next_waiter += 1;
                queue.push_back(Waiter { id, generation: 0, want, wake: Some(tx) });
                (id, 0)
            }
        };
        if let Some(until) = blocked_until {
            self.arm_timer(inner, ask.pool_id, until);
        }
        Step::Wait(Ticket { scheduler: Arc::clone(self), pool_id: ask.pool_id, id, generation, rx: Some(rx) })
    }

    /// Gives slot `slot` back: to the oldest waiter that can use it, else to the pool (ADM-6).
    pub(super) fn release_locked(&self, inner: &mut Inner, slot: usize) {
        let now = self.now();
        // Over a lowered limit the slot is not handed on: the count just drops (ADM-4). Handed
        // on, it stays counted: it now belongs to the waiter.
        if inner.runtimes[slot].in_flight <= inner.runtimes[slot].limit && hand_to_oldest(inner, slot, now) {
            return;
        }
        let rt = &mut inner.runtimes[slot];
        rt.in_flight = rt.in_flight.saturating_sub(1);
    }

    /// Hands the free slots of account slot `slot` to the oldest waiters that can use them.
    fn fill(inner: &mut Inner, slot: usize, now: i64) {
        // The slot is counted once a waiter took it (the waiter runs after the lock is let go):
        // an account nobody waits for is left untouched, so the pools' indexes need not look.
        while inner.runtimes[slot].in_flight < inner.runtimes[slot].limit {
            if !hand_to_oldest(inner, slot, now) {
                return;
            }
            inner.runtimes[slot].in_flight += 1;
        }
    }

    /// A raised limit can serve waiters now (ADM-6).
    pub fn wake(&self, account_id: i64) {
        let mut inner = self.lock();
        let Some(&slot) = inner.slots.get(&account_id) else { return };
        let now = self.now();
        Self::fill(&mut inner, slot, now);
    }

    /// Capacity may have appeared outside any release (an account enabled, added, switched on or
    /// cleared; a block ended): free slots go to waiters in queue order, then every other waiter
    /// decides again, keeping its place and its deadline.
    pub fn wake_all(&self) {
        let mut inner = self.lock();
        self.wake_locked(&mut inner, None);
    }

    /// [`Scheduler::wake_all`] under a lock already held.
    pub(super) fn wake_locked_all(&self, inner: &mut Inner) {
        self.wake_locked(inner, None);
    }

    /// [`Scheduler::wake_all`] for one pool's waiters (`None`: every pool).
    fn wake_locked(&self, inner: &mut Inner, pool: Option<i64>) {
        let now = self.now();
        for slot in 0..inner.runtimes.len() {
            let serves = pool.is_none_or(|p| inner.runtimes[slot].cold.pools.contains(&p));
            if serves {
                Self::fill(inner, slot, now);
            }
        }
        for (pool_id, queue) in inner.queues.iter_mut() {
            if pool.is_some_and(|p| p != *pool_id) {
                continue;
            }
            for w in queue.iter_mut() {
                if let Some(tx) = w.wake.take() {
                    let _ = tx.send(None);
                }
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

    /// A block on account slot `slot` ending at `until` (unix ms) was just set: every pool of the
    /// account with waiters gets its timer armed for that end, and conversations waiting for
    /// this very account decide again (they are answered with the block, ADM-9).
    pub(super) fn block_appeared(self: &Arc<Self>, inner: &mut Inner, slot: usize, until: i64) {
        let pools = inner.runtimes[slot].cold.pools.clone();
        for pool_id in pools {
            let Some(queue) = inner.queues.get_mut(&pool_id) else { continue };
            if queue.is_empty() {
                continue;
            }
            for w in queue.iter_mut().filter(|w| matches!(w.want, Want::Account(s) if s == slot)) {
                if let Some(tx) = w.wake.take() {
                    let _ = tx.send(None);
                }
            }
            // A block without an end (re-authorization required) needs no timer.
            if until != i64::MAX {
                self.arm_timer(inner, pool_id, until);
            }
        }
    }

    /// Arms `pool_id`'s timer for `until` (unix ms) unless it is already armed as early.
    fn arm_timer(self: &Arc<Self>, inner: &mut Inner, pool_id: i64, until: i64) {
        if inner.timers.get(&pool_id).is_some_and(|armed| *armed <= until) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        inner.timers.insert(pool_id, until);
        let wait = std::time::Duration::from_millis(u64::try_from(until - self.now()).unwrap_or(0));
        let scheduler = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(s) = scheduler.upgrade() {
                s.timer_fired(pool_id, until);
            }
        });
    }

    /// A pool's timer: the block it waited for has ended.
    fn timer_fired(self: &Arc<Self>, pool_id: i64, until: i64) {
        let mut inner = self.lock();
        if inner.timers.get(&pool_id) == Some(&until) {
            inner.timers.remove(&pool_id);
        }
        self.wake_locked(&mut inner, Some(pool_id));
    }
}

/// Hands one (already counted) slot of `slot` to the oldest armed waiter, over every pool the
/// account is in now, that can use it. Returns whether one took it. The waiter keeps its place
/// until its decision uses the slot (its ticket then leaves): if the slot turns out unusable, it
/// waits on where it was.
fn hand_to_oldest(inner: &mut Inner, slot: usize, now: i64) -> bool {
    loop {
        let Some((pool_id, pos)) = oldest_waiter_for(inner, slot, now) else { return false };
        let Some(w) = inner.queues.get_mut(&pool_id).and_then(|q| q.get_mut(pos)) else { return false };
        let Some(tx) = w.wake.take() else { continue };
        if tx.send(Some(slot)).is_ok() {
            return true;
        }
    }
}

/// The oldest armed waiter, over every pool the account is in, that can use slot `slot`.
fn oldest_waiter_for(inner: &Inner, slot: usize, now: i64) -> Option<(i64, usize)> {
    let rt = &inner.runtimes[slot];
    let mut best: Option<(u64, i64, usize)> = None;
    for pool_id in &rt.cold.pools {
        let Some(q) = inner.queues.get(pool_id) else { continue };
        let found = q.iter().position(|w| {
            w.armed()
                && match &w.want {
                    Want::Account(s) => *s == slot,
                    Want::Any { supported, model, avoid } => {
                        rt.cold.provider.is_some_and(|p| supported.contains(&p))
                            && !avoid.contains(&slot)
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

/// A slot handed to a waiter; given back (to the next waiter) unless a decision uses it.
pub struct Reservation {
    pub(super) scheduler: Arc<Scheduler>,
    pub(super) slot: usize,
    pub(super) done: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            let mut inner = self.scheduler.lock();
            self.scheduler.release_locked(&mut inner, self.slot);
        }
    }
}

/// A place in a pool's queue. Dropping it (client cancel) leaves the queue at once; a ticket
/// whose waiter has since waited again in the same place (a newer generation) leaves it alone.
pub struct Ticket {
    scheduler: Arc<Scheduler>,
    pool_id: i64,
    id: u64,
    generation: u64,
    rx: Option<oneshot::Receiver<Option<usize>>>,
}

impl Ticket {
    /// The queue place, for deciding again without losing it ([`Ask::queued`]).
    pub fn place(&self) -> u64 {
        self.id
    }

    /// Waits until `deadline` (ADM-6) or until `stop` completes (shutdown) for a reserved slot
    /// (`Some`), or for a hint that capacity may have appeared (`None`: decide again, passing
    /// [`Ticket::place`]).
    pub async fn wait(
        &mut self,
        deadline: Instant,
        stop: impl Future<Output = ()>,
    ) -> Result<Option<Reservation>, Refusal> {
        let Some(rx) = self.rx.as_mut() else { return Err(Refusal::WaitTimeout) };
        // On timeout or shutdown the receiver stays in the ticket: if a slot arrived at the same
        // moment, dropping the ticket passes it on.
        let slot = tokio::select! {
            r = rx => r.map_err(|_| Refusal::WaitTimeout)?,
            () = tokio::time::sleep_until(deadline) => return Err(Refusal::WaitTimeout),
            () = stop => return Err(Refusal::ShuttingDown),
        };
        self.rx = None;
        Ok(slot.map(|slot| Reservation { scheduler: Arc::clone(&self.scheduler), slot, done: false }))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.scheduler.lock();
        if let Some(q) = inner.queues.get_mut(&self.pool_id)
            && let Some(pos) = q.iter().position(|w| w.id == self.id && w.generation == self.generation)
        {
            q.remove(pos);
        }
        // Already handed a slot that nobody will use: pass it on.
        if let Some(mut rx) = self.rx.take()
            && let Ok(Some(slot)) = rx.try_recv()
        {
            self.scheduler.release_locked(&mut inner, slot);
        }
    }
}
