//! Pool wait queues (ADM-6, ADM-7): first come, first served, with a released slot handed
//! straight to the oldest waiter that can use it, so a newcomer never overtakes a waiter.
//! Waiters hold no account slot, lock or transaction; dropping a [`Ticket`] (client cancel)
//! leaves the queue at once, and a slot handed to a waiter that is gone is passed on.

use std::sync::Arc;

use app::model::Provider;
use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{Ask, Inner, Refusal, Scheduler, Step};

/// Who a waiter can use.
pub(super) enum Want {
    Account(usize),
    Any { supported: Vec<Provider>, model: String },
}

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) want: Want,
    /// `Some(slot)`: a reserved slot; `None`: capacity may have appeared, decide again.
    pub(super) wake: oneshot::Sender<Option<usize>>,
}

impl Scheduler {
    pub(super) fn enqueue(self: &Arc<Self>, inner: &mut Inner, ask: &Ask<'_>, want: Want) -> Step {
        let id = inner.next_waiter;
        let queue = inner.queues.entry(ask.pool_id).or_default();
        queue.retain(|w| !w.wake.is_closed());
        if queue.len() >= self.settings.queue_capacity {
            return Step::Refuse(Refusal::QueueFull);
        }
        let (tx, rx) = oneshot::channel();
        queue.push_back(Waiter { id, want, wake: tx });
        inner.next_waiter += 1;
        Step::Wait(Ticket { scheduler: Arc::clone(self), pool_id: ask.pool_id, id, rx: Some(rx) })
    }

    /// Gives slot `slot` back: to the oldest waiter that can use it, else to the pool (ADM-6).
    pub(super) fn release_locked(&self, inner: &mut Inner, slot: usize) {
        let now = self.now();
        // Over a lowered limit the slot is not handed on: the count just drops (ADM-4).
        while inner.runtimes[slot].in_flight <= inner.runtimes[slot].limit {
            let Some((pool_id, pos)) = oldest_waiter_for(inner, slot, now) else { break };
            let Some(w) = inner.queues.get_mut(&pool_id).and_then(|q| q.remove(pos)) else { break };
            if w.wake.send(Some(slot)).is_ok() {
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
            if w.wake.send(Some(slot)).is_err() {
                inner.runtimes[slot].in_flight -= 1;
            }
        }
    }

    /// Capacity may have appeared outside any release (an account enabled, switched on, or
    /// cleared): every waiter decides again, keeping its deadline.
    pub fn wake_all(&self) {
        let mut inner = self.lock();
        for queue in inner.queues.values_mut() {
            for w in queue.drain(..) {
                let _ = w.wake.send(None);
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

/// A place in a pool's queue. Dropping it (client cancel) leaves the queue at once.
pub struct Ticket {
    scheduler: Arc<Scheduler>,
    pool_id: i64,
    id: u64,
    rx: Option<oneshot::Receiver<Option<usize>>>,
}

impl Ticket {
    /// Waits until `deadline` (ADM-6) or shutdown for a reserved slot (`Some`), or for a hint
    /// that capacity may have appeared elsewhere (`None`: decide again).
    pub async fn wait(
        mut self,
        deadline: Instant,
        stop: &CancellationToken,
    ) -> Result<Option<Reservation>, Refusal> {
        let Some(rx) = self.rx.as_mut() else { return Err(Refusal::WaitTimeout) };
        // On timeout or shutdown the receiver stays in the ticket: if a slot arrived at the same
        // moment, dropping the ticket passes it on.
        let slot = tokio::select! {
            r = rx => r.map_err(|_| Refusal::WaitTimeout)?,
            () = tokio::time::sleep_until(deadline) => return Err(Refusal::WaitTimeout),
            () = stop.cancelled() => return Err(Refusal::ShuttingDown),
        };
        self.rx = None;
        Ok(slot.map(|slot| Reservation { scheduler: Arc::clone(&self.scheduler), slot, done: false }))
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
            && let Ok(Some(slot)) = rx.try_recv()
        {
            self.scheduler.release_locked(&mut inner, slot);
        }
    }
}
