//! The scheduler's durable copy (ACC-4, RT-1): account blocking state and conversation bindings,
//! written through to SQLite by one task so a request never waits on the database, and read back
//! at startup. If a write fails the in-memory state keeps being enforced and the failure is logged
//! (CD-4).
//!
//! The queue to the task is bounded and coalescing: it holds the newest state per account and
//! the newest change per binding, so a burst of decisions costs one write per thing changed, and
//! at most [`MAX_PENDING_BINDINGS`] binding changes wait at once (beyond that a binding change is
//! dropped and counted: the binding still holds in memory, it would only not survive a restart).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use sqlx::SqlitePool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{BindingKey, ConversationKey, state::AccountState};

/// Binding changes waiting for the store task at most.
pub const MAX_PENDING_BINDINGS: usize = 20_000;

/// One change to make durable.
pub enum Write {
    State {
        account_id: i64,
        revision: i64,
        state: AccountState,
        at: i64,
    },
    Binding {
        key: BindingKey,
        account_id: i64,
        model: String,
        used_at: i64,
    },
    /// A binding evicted or expired.
    Unbind {
        key: BindingKey,
    },
    /// Every binding last used before this time (unix ms) has expired.
    SweepBindings {
        used_before: i64,
    },
}

/// A binding as the next write will leave it.
enum BindingChange {
    Upsert { account_id: i64, model: String, used_at: i64 },
    Delete,
}

/// What waits for the store task, coalesced.
#[derive(Default)]
struct Pending {
    states: HashMap<i64, (i64, AccountState, i64)>,
    bindings: HashMap<BindingKey, BindingChange>,
    sweep_before: Option<i64>,
    /// Binding changes dropped because the queue was full, since the last report.
    dropped: u64,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.states.is_empty() && self.bindings.is_empty() && self.sweep_before.is_none()
    }
}

struct Shared {
    pending: Mutex<Pending>,
    doorbell: Notify,
    closed: CancellationToken,
}

/// Queue of the store task; sending never blocks.
#[derive(Clone)]
pub struct Writer(Option<Arc<Shared>>);

impl Writer {
    /// A writer that drops everything (benchmarks, unit tests).
    pub fn discard() -> Self {
        Writer(None)
    }

    pub fn send(&self, w: Write) {
        let Some(shared) = &self.0 else { return };
        {
            let mut p = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
            let binding = |p: &mut Pending, key: BindingKey, change: BindingChange| {
                if p.bindings.len() >= MAX_PENDING_BINDINGS && !p.bindings.contains_key(&key) {
                    p.dropped += 1;
                } else {
                    p.bindings.insert(key, change);
                }
            };
            match w {
                Write::State { account_id, revision, state, at } => {
                    p.states.insert(account_id, (revision, state, at));
                }
                Write::Binding { key, account_id, model, used_at } => {
                    binding(&mut p, key, BindingChange::Upsert { account_id, model, used_at });
                }
                Write::Unbind { key } => binding(&mut p, key, BindingChange::Delete),
                Write::SweepBindings { used_before } => {
                    p.sweep_before = Some(p.sweep_before.map_or(used_before, |b| b.max(used_before)));
                }
            }
        }
        shared.doorbell.notify_one();
    }

    /// Asks the store task to write what is pending and stop (shutdown).
    pub fn close(&self) {
        if let Some(shared) = &self.0 {
            shared.closed.cancel();
        }
    }
}

/// Starts the store task; it ends after [`Writer::close`], once everything pending is written.
pub fn spawn(db: SqlitePool) -> (Writer, tokio::task::JoinHandle<()>) {
    let shared = Arc::new(Shared {
        pending: Mutex::default(),
        doorbell: Notify::new(),
        closed: CancellationToken::new(),
    });
    let task_shared = Arc::clone(&shared);
    let task = tokio::spawn(async move {
        let shared = task_shared;
        loop {
            let closing = tokio::select! {
                () = shared.doorbell.notified() => false,
                () = shared.closed.cancelled() => true,
            };
            let batch = std::mem::take(&mut *shared.pending.lock().unwrap_or_else(|e| e.into_inner()));
            if batch.dropped > 0 {
                tracing::warn!(
                    dropped = batch.dropped,
                    "binding changes dropped: the store queue was full (the bindings still hold in memory)"
                );
            }
            if !batch.is_empty()
                && let Err(e) = write(&db, &batch).await
            {
                tracing::error!(error = %e, "scheduler state was not stored; it stays enforced in memory");
            }
            if closing {
                break;
            }
        }
    });
    (Writer(Some(shared)), task)
}

async fn write(db: &SqlitePool, batch: &Pending) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
    for (account_id, (revision, state, at)) in &batch.states {
        let json = serde_json::to_string(state).unwrap_or_else(|_| "{}".into());
        // Only for the account's current lifecycle revision (a stale write is dropped).
        sqlx::query(
            "INSERT INTO account_runtime (account_id, revision, state, updated_at)
             SELECT id, ?, ?, ? FROM accounts WHERE id = ? AND lifecycle_revision = ?
             ON CONFLICT (account_id) DO UPDATE SET revision = excluded.revision,
                state = excluded.state, updated_at = excluded.updated_at",
        )
        .bind(revision)
        .bind(json)
        .bind(at)
        .bind(account_id)
        .bind(revision)
        .execute(&mut *tx)
        .await?;
    }
    if let Some(before) = batch.sweep_before {
        sqlx::query("DELETE FROM session_bindings WHERE used_at < ?").bind(before).execute(&mut *tx).await?;
    }
    for ((member_id, pool_id, conv), change) in &batch.bindings {
        match change {
            BindingChange::Upsert { account_id, model, used_at } => {
                sqlx::query(
                    "INSERT INTO session_bindings (member_id, pool_id, key_hash, account_id, model, used_at)
                     VALUES (?, ?, ?, ?, ?, ?)
                     ON CONFLICT (member_id, pool_id, key_hash) DO UPDATE SET account_id = excluded.account_id,
                        model = excluded.model, used_at = excluded.used_at",
                )
                .bind(member_id)
                .bind(pool_id)
                .bind(&conv.0[..])
                .bind(account_id)
                .bind(model)
                .bind(used_at)
                .execute(&mut *tx)
                .await?;
            }
            BindingChange::Delete => {
                sqlx::query(
                    "DELETE FROM session_bindings WHERE member_id = ? AND pool_id = ? AND key_hash = ?",
                )
                .bind(member_id)
                .bind(pool_id)
                .bind(&conv.0[..])
                .execute(&mut *tx)
                .await?;
            }
        }
    }
    tx.commit().await
}

/// What the store held at startup.
#[derive(Default)]
pub struct Loaded {
    pub states: Vec<(i64, i64, AccountState)>,
    pub bindings: Vec<StoredBinding>,
}

/// A conversation binding as stored.
pub struct StoredBinding {
    pub key: BindingKey,
    pub account_id: i64,
    pub model: String,
    pub used_at: i64,
}

/// Reads states of the accounts' current lifecycle revisions and bindings used since `since_ms`
/// (oldest first); older rows are deleted.
pub async fn load(db: &SqlitePool, since_ms: i64) -> sqlx::Result<Loaded> {
    sqlx::query(
        "DELETE FROM account_runtime WHERE account_id NOT IN
           (SELECT id FROM accounts WHERE deleted_at IS NULL AND lifecycle_revision = account_runtime.revision)",
    )
    .execute(db)
    .await?;
    sqlx::query("DELETE FROM session_bindings WHERE used_at < ?").bind(since_ms).execute(db).await?;
    let rows: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT account_id, revision, state FROM account_runtime").fetch_all(db).await?;
    let states = rows
        .into_iter()
        .filter_map(|(id, rev, json)| match serde_json::from_str::<AccountState>(&json) {
            Ok(s) => Some((id, rev, s)),
            Err(e) => {
                tracing::error!(account_id = id, error = %e, "stored account state unreadable; starting clean");
                None
            }
        })
        .collect();
    let rows: Vec<(i64, i64, Vec<u8>, i64, String, i64)> = sqlx::query_as(
        "SELECT member_id, pool_id, key_hash, account_id, model, used_at FROM session_bindings ORDER BY used_at",
    )
    .fetch_all(db)
    .await?;
    let bindings = rows
        .into_iter()
        .filter_map(|(m, p, hash, account_id, model, used_at)| {
            let key: [u8; 32] = hash.try_into().ok()?;
            Some(StoredBinding { key: (m, p, ConversationKey(key)), account_id, model, used_at })
        })
        .collect();
    Ok(Loaded { states, bindings })
}
