//! The scheduler's durable copy (ACC-4, RT-1): account blocking state and conversation bindings,
//! written through to SQLite by one task so a request never waits on the database, and read back
//! at startup. If a write fails the in-memory state keeps being enforced and the failure is logged
//! (CD-4).

use sqlx::SqlitePool;
use tokio::sync::mpsc;

use super::{BindingKey, ConversationKey, state::AccountState};

/// One change to make durable.
pub enum Write {
    State { account_id: i64, revision: i64, state: AccountState, at: i64 },
    Binding { key: BindingKey, account_id: i64, model: String, used_at: i64 },
}

/// Queue of the store task; sending never blocks.
#[derive(Clone)]
pub struct Writer(Option<mpsc::UnboundedSender<Write>>);

impl Writer {
    /// A writer that drops everything (benchmarks, unit tests).
    pub fn discard() -> Self {
        Writer(None)
    }

    pub fn send(&self, w: Write) {
        if let Some(tx) = &self.0
            && tx.send(w).is_err()
        {
            tracing::warn!("scheduler state could not be queued for storage (shutting down)");
        }
    }
}

/// Starts the store task; it ends when every [`Writer`] is gone.
pub fn spawn(db: SqlitePool) -> (Writer, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Write>();
    let task = tokio::spawn(async move {
        let mut batch = Vec::new();
        while rx.recv_many(&mut batch, 256).await > 0 {
            if let Err(e) = write(&db, &batch).await {
                tracing::error!(error = %e, "scheduler state was not stored; it stays enforced in memory");
            }
            batch.clear();
        }
    });
    (Writer(Some(tx)), task)
}

async fn write(db: &SqlitePool, batch: &[Write]) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
    for w in batch {
        match w {
            Write::State { account_id, revision, state, at } => {
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
            Write::Binding { key: (member_id, pool_id, conv), account_id, model, used_at } => {
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

/// Reads states of the accounts' current lifecycle revisions and bindings used since `since_ms`;
/// older rows are deleted.
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
        "SELECT member_id, pool_id, key_hash, account_id, model, used_at FROM session_bindings",
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
