//! Subscription quota awareness (QT-1..QT-5, PACE): what each account's provider says of its
//! quota, kept per account, persisted before it is used, and handed to the scheduler as the
//! blocks and weights it means.
//!
//! Evidence arrives two ways:
//! - passively, from every model answer (headers, WebSocket frames, 429 bodies), on the hot path:
//!   parsing is cheap, and an observation that repeats what is known is written at most every
//!   [`REWRITE_MS`];
//! - actively, from background reads ([`reads`]) that model traffic or the Accounts page start.
//!
//! Every write goes through [`Quota::record`], one at a time: merge into the account's snapshot,
//! a conditional write (the account's quota revision must still be current, and the stored
//! observation must not be newer), then publication to the scheduler. The quota revision goes up
//! on re-authorization and on disable/enable (the evidence was about another grant or another
//! period), never on Clear cooldown (QT-5).

pub mod observation;
pub mod parse;
pub mod reads;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use app::model::{Provider, QuotaRow};
use sqlx::SqlitePool;

pub use self::observation::{Blocks, Observation, Snapshot};
use crate::{clock::SharedClock, directory::Account, error::Result, scheduler::Scheduler};

/// A passive observation that changes nothing that matters (see [`Snapshot::minor_update`]) is
/// written at most this often per account; the freshness it renews (2 min) stays well ahead.
pub const REWRITE_MS: i64 = 20_000;

/// What the scheduler holds of an account's quota (QT-3, QT-4, RT-6, RT-8).
#[derive(Debug, Default)]
pub struct QuotaLive {
    /// New selections leave the account out until then (unix ms; 0: not).
    pub account_until: i64,
    /// Antigravity models left out until then, by base model id.
    pub models: HashMap<String, i64>,
    /// The models the account serves, when its provider listed them.
    pub catalogue: Option<HashSet<String>>,
    /// RT-6: the tightest main window's remaining percentage and until when it is fresh,
    /// worked out once here rather than per decision; for Antigravity, per base model id.
    pub remaining: Option<(f64, i64)>,
    pub model_remaining: HashMap<String, (f64, i64)>,
    pub snapshot: Arc<Snapshot>,
}

impl QuotaLive {
    pub fn of(snapshot: Arc<Snapshot>, now: i64) -> Self {
        let Blocks { account_until, models } = snapshot.blocks(now);
        QuotaLive {
            account_until,
            models: models.into_iter().collect(),
            catalogue: snapshot.catalogue.as_ref().map(|c| c.iter().cloned().collect()),
            remaining: snapshot.remaining(None, now),
            model_remaining: snapshot
                .models
                .iter()
                .filter_map(|m| {
                    let left = snapshot.remaining(Some(&m.model), now)?;
                    Some((observation::base_model(&m.model).to_owned(), left))
                })
                .collect(),
            snapshot,
        }
    }
}

/// What is known of one account.
struct Known {
    revision: i64,
    snapshot: Arc<Snapshot>,
    /// When it was last written (unix ms).
    written_at: i64,
}

pub struct Quota {
    db: SqlitePool,
    clock: SharedClock,
    scheduler: Arc<Scheduler>,
    known: Mutex<HashMap<i64, Known>>,
    /// One merge-write-publish at a time, so two observations never merge from the same base.
    writes: tokio::sync::Mutex<()>,
    pub reads: reads::Reads,
}

impl Quota {
    pub fn new(db: SqlitePool, clock: SharedClock, scheduler: Arc<Scheduler>, reads: reads::Reads) -> Self {
        Quota { db, clock, scheduler, known: Mutex::default(), writes: tokio::sync::Mutex::new(()), reads }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> i64 {
        self.clock.unix_ms()
    }

    /// Restores the observations of the accounts' current quota revisions (QT-2: they survive a
    /// restart; rows of an older revision are never used).
    pub async fn load(&self) -> Result<()> {
        let rows: Vec<(i64, i64, String)> = sqlx::query_as(
            "SELECT q.account_id, q.revision, q.snapshot FROM quota_observations q
             JOIN accounts a ON a.id = q.account_id
             WHERE a.deleted_at IS NULL AND a.quota_revision = q.revision",
        )
        .fetch_all(&self.db)
        .await?;
        let now = self.now();
        for (account_id, revision, json) in rows {
            let Ok(snapshot) = serde_json::from_str::<Snapshot>(&json) else {
                tracing::warn!(account_id, "stored quota observation unreadable; ignored");
                continue;
            };
            let snapshot = Arc::new(snapshot);
            // Never written by this process: the next observation is written whatever it says.
            self.known()
                .insert(account_id, Known { revision, snapshot: Arc::clone(&snapshot), written_at: 0 });
            self.scheduler.set_quota(account_id, revision, Some(QuotaLive::of(snapshot, now)));
        }
        Ok(())
    }

    /// A passive observation from a model answer (hot path): recorded in the background unless
    /// it adds nothing that matters to what was written recently. The request never waits.
    pub fn observe(self: &Arc<Self>, account: &Account, o: Observation) {
        if o.is_empty() {
            return;
        }
        if let Some(k) = self.known().get(&account.id)
            && k.revision == account.quota_revision
            && o.at - k.written_at < REWRITE_MS
            && k.snapshot.minor_update(&o)
        {
            return;
        }
        let this = Arc::clone(self);
        let (id, revision) = (account.id, account.quota_revision);
        tokio::spawn(async move {
            if let Err(e) = this.record(id, revision, &o).await {
                tracing::warn!(account_id = id, error = %e, "quota observation not stored");
            }
        });
    }

    /// Merges `o` into the account's snapshot, stores it conditionally and only then publishes it
    /// (QT-2). Returns whether it was stored: a write for an older quota revision (re-authorized,
    /// disabled or enabled since) or older than the stored observation is refused.
    pub async fn record(&self, account_id: i64, revision: i64, o: &Observation) -> Result<bool> {
        let _one = self.writes.lock().await;
        let base = match self.known().get(&account_id) {
            Some(k) if k.revision > revision => return Ok(false),
            Some(k) if k.revision == revision => Some(Arc::clone(&k.snapshot)),
            _ => None,
        };
        let mut merged = base.as_deref().cloned().unwrap_or_default();
        merged.merge(o);
        let json =
            serde_json::to_string(&merged).map_err(|e| crate::error::Error::Internal(e.to_string()))?;
        let stored = sqlx::query(
            "INSERT INTO quota_observations (account_id, revision, observed_at, snapshot)
             SELECT id, quota_revision, ?, ? FROM accounts
             WHERE id = ? AND quota_revision = ? AND deleted_at IS NULL
             ON CONFLICT (account_id) DO UPDATE
                SET revision = excluded.revision, observed_at = excluded.observed_at, snapshot = excluded.snapshot
                WHERE excluded.revision > quota_observations.revision
                   OR (excluded.revision = quota_observations.revision
                       AND excluded.observed_at >= quota_observations.observed_at)",
        )
        .bind(merged.observed_at)
        .bind(&json)
        .bind(account_id)
        .bind(revision)
        .execute(&self.db)
        .await?
        .rows_affected()
            == 1;
        if !stored {
            return Ok(false);
        }
        let now = self.now();
        let snapshot = Arc::new(merged);
        self.known().insert(account_id, Known { revision, snapshot: Arc::clone(&snapshot), written_at: now });
        self.scheduler.set_quota(account_id, revision, Some(QuotaLive::of(snapshot, now)));
        Ok(true)
    }

    /// An active read for quota revision `revision` failed: pace is hidden for what was
    /// observed before (PACE-2); the last good observation keeps shaping selection only until its
    /// own freshness deadline (QT-3). A failure of an older revision's read says nothing.
    pub async fn read_failed(&self, account_id: i64, revision: i64, at: i64) {
        let _one = self.writes.lock().await;
        if let Some(k) = self.known().get_mut(&account_id).filter(|k| k.revision == revision) {
            let mut s = (*k.snapshot).clone();
            s.read_failed_at = Some(s.read_failed_at.map_or(at, |f| f.max(at)));
            k.snapshot = Arc::new(s);
        }
    }

    /// A deleted account: nothing of it is kept.
    pub fn forget(&self, account_id: i64) {
        self.known().remove(&account_id);
        self.reads.forget(account_id);
    }

    /// Forgets what was observed under the account's old quota revision, after a
    /// re-authorization or a disable/enable raised it.
    pub async fn invalidate(&self, account_id: i64) -> Result<()> {
        let _one = self.writes.lock().await;
        let revision: Option<i64> = sqlx::query_scalar("SELECT quota_revision FROM accounts WHERE id = ?")
            .bind(account_id)
            .fetch_optional(&self.db)
            .await?;
        self.known().remove(&account_id);
        // The new grant is read at once, whatever the old one's reads did.
        self.reads.forget(account_id);
        if let Some(revision) = revision {
            self.scheduler.set_quota(account_id, revision, None);
        }
        Ok(())
    }

    /// The account's quota rows and when its exclusion ends (unix ms; 0: not excluded), for the
    /// web app and API.
    pub fn rows(&self, account_id: i64) -> (Vec<QuotaRow>, i64) {
        let now = self.now();
        let Some(snapshot) = self.known().get(&account_id).map(|k| Arc::clone(&k.snapshot)) else {
            return (Vec::new(), 0);
        };
        (snapshot.rows(now), snapshot.blocks(now).account_until)
    }

    /// When the account's newest observation was made (unix ms), if any.
    pub fn observed_at(&self, account_id: i64, revision: i64) -> Option<i64> {
        self.known().get(&account_id).filter(|k| k.revision == revision).map(|k| k.snapshot.observed_at)
    }

    /// Whether the account has a known model catalogue (Antigravity, after a read).
    pub fn has_catalogue(&self, account_id: i64) -> bool {
        self.known().get(&account_id).is_some_and(|k| k.snapshot.catalogue.is_some())
    }

    /// The models the account is known to serve (its provider's list), if it listed them.
    pub fn catalogue(&self, account_id: i64) -> Option<Vec<String>> {
        self.known().get(&account_id).and_then(|k| k.snapshot.catalogue.clone())
    }
}

/// Providers whose subscription quota SubLane observes.
pub fn observed(provider: Provider) -> bool {
    matches!(provider, Provider::Codex | Provider::Claude | Provider::Antigravity)
}
