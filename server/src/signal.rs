//! A one-way signal that every call checks and many wait for: the server's shutdown and its hard
//! stop (OPS-3).
//!
//! A `CancellationToken` keeps its state behind a mutex: checking it, and waiting for it (which
//! also registers the waiter with its `Notify`), takes that lock. With one token shared by every
//! serving thread, each call took it several times, and the lock's cache line went back and
//! forth between the CPUs (issue 15: a contended lock per check in the profile). A [`Signal`]
//! holds one child token per shard and hands each thread the child of its own shard, so a thread
//! checks and waits on a lock no other thread takes. Cancelling the parent cancels every child
//! before `cancel` returns, so a check made after it always sees it, on any thread.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Children per signal: more than the serving threads of a small machine, so that each serving
/// thread (numbered as threads first look) most likely has one of its own. Threads that share
/// one are still right, only contended.
const SHARDS: usize = 8;

/// A cancellation that many threads check; see the module doc.
#[derive(Debug)]
pub struct Signal {
    /// The signal itself: cancelling it cancels every shard.
    token: CancellationToken,
    shards: [CancellationToken; SHARDS],
}

impl Default for Signal {
    fn default() -> Self {
        Signal::new(CancellationToken::new())
    }
}

impl Signal {
    /// A signal raised when `token` is cancelled (or when [`Signal::cancel`] is called).
    pub fn new(token: CancellationToken) -> Self {
        let shards = std::array::from_fn(|_| token.child_token());
        Signal { token, shards }
    }

    /// Raises the signal, for every thread, before it returns.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Whether the signal was raised.
    pub fn is_cancelled(&self) -> bool {
        self.local().is_cancelled()
    }

    /// Completes when the signal is raised.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.local().cancelled()
    }

    /// The token the signal follows (cancelling it raises the signal).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The calling thread's shard.
    fn local(&self) -> &CancellationToken {
        &self.shards[shard()]
    }
}

/// The calling thread's shard: threads are numbered as they first ask.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeSet,
        sync::{Arc, Barrier},
        time::Duration,
    };

    use super::*;

    /// Threads on several shards, each with a waiter registered, raised through the token the
    /// signal follows: every thread sees it at once, and every waiter wakes.
    #[test]
    fn every_thread_sees_the_signal_and_every_waiter_wakes() {
        let token = CancellationToken::new();
        let signal = Arc::new(Signal::new(token.clone()));
        let ready = Arc::new(Barrier::new(SHARDS + 3));
        let threads: Vec<_> = (0..SHARDS + 2)
            .map(|_| {
                let (signal, ready) = (Arc::clone(&signal), Arc::clone(&ready));
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    runtime.block_on(async {
                        assert!(!signal.is_cancelled());
                        let mut waiting = std::pin::pin!(signal.cancelled());
                        let registered = futures_util::poll!(waiting.as_mut()).is_pending();
                        // (at the barrier before asserting: a thread that failed first would
                        // leave the others, and the test, waiting there for good)
                        ready.wait();
                        assert!(registered);
                        let woken = tokio::time::timeout(Duration::from_secs(10), waiting).await;
                        assert!(woken.is_ok(), "a registered waiter was not woken");
                        assert!(signal.is_cancelled());
                        shard()
                    })
                })
            })
            .collect();
        ready.wait();
        assert!(!signal.is_cancelled());
        token.cancel();
        assert!(signal.is_cancelled(), "seen at once on the thread that raised it");
        let shards: BTreeSet<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // (numbered in turn, so at least two of them: the test means nothing on one shard)
        assert!(shards.len() > 1, "the threads share one shard: {shards:?}");
    }

    /// Raised through the signal itself, the token it follows is cancelled too, so whoever
    /// holds the token (the process's signal handler, a server's owner) sees it.
    #[test]
    fn cancelling_the_signal_cancels_its_token() {
        let signal = Signal::default();
        let token = signal.token().clone();
        assert!(!token.is_cancelled() && !signal.is_cancelled());
        signal.cancel();
        assert!(token.is_cancelled() && signal.is_cancelled());
    }
}
