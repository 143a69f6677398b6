//! The accounts and pools the proxy routes over, held in memory so that a request never waits on
//! SQLite. A snapshot is rebuilt when the configuration [`Generation`] moves (any change through
//! the JSON API or the web app) and otherwise reused.
//!
//! Selection here is the proxy issue's narrow seam: round robin over the pool's active,
//! schedulable accounts of the request's providers, highest priority tier first (RT-5). The
//! scheduler replaces [`PoolRoutes::pick`] with admission, binding and cooldowns.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use app::model::{CredentialInput, ModelPolicy, PolicyMode, Provider};
use sqlx::SqlitePool;
use tokio::sync::{Mutex, RwLock};

use super::auth::Generation;
use crate::{accounts::SEAL_PURPOSE, crypto::Sealer, error::Result};

/// One routable account with its opened credentials. Never logged (no Debug on secrets).
pub struct Account {
    pub id: i64,
    pub provider: Provider,
    /// Larger is preferred (RT-5: highest tier first).
    pub priority: i64,
    pub max_concurrency: i64,
    pub credentials: CredentialInput,
}

/// A pool's routing view.
pub struct PoolRoutes {
    pub policy: ModelPolicy,
    accounts: Vec<Arc<Account>>,
    next: AtomicUsize,
}

/// Why a model is refused by a pool's policy.
#[derive(Debug, PartialEq, Eq)]
pub enum PolicyRefusal {
    NotAllowed,
}

impl PoolRoutes {
    /// Applies aliases and the allow/deny list (ID-4); returns the model to send upstream.
    pub fn resolve_model(&self, requested: &str) -> std::result::Result<String, PolicyRefusal> {
        let model = self.policy.aliases.get(requested).cloned().unwrap_or_else(|| requested.to_owned());
        let listed = self.policy.models.iter().any(|m| m == &model || m == requested);
        match (self.policy.mode, listed) {
            (PolicyMode::All, _) | (PolicyMode::Allow, true) | (PolicyMode::Deny, false) => Ok(model),
            _ => Err(PolicyRefusal::NotAllowed),
        }
    }

    /// The providers that have at least one routable account in this pool.
    pub fn providers(&self) -> Vec<Provider> {
        let mut out: Vec<Provider> = Vec::new();
        for a in &self.accounts {
            if !out.contains(&a.provider) {
                out.push(a.provider);
            }
        }
        out
    }

    /// Round robin within the highest priority tier among accounts of `providers`.
    pub fn pick(&self, providers: &[Provider]) -> Option<Arc<Account>> {
        let top =
            self.accounts.iter().filter(|a| providers.contains(&a.provider)).map(|a| a.priority).max()?;
        let tier: Vec<&Arc<Account>> =
            self.accounts.iter().filter(|a| providers.contains(&a.provider) && a.priority == top).collect();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        tier.get(n % tier.len()).map(|a| Arc::clone(a))
    }
}

/// Everything routable at one configuration generation.
pub struct Snapshot {
    generation: u64,
    pools: HashMap<i64, PoolRoutes>,
}

impl Snapshot {
    pub fn pool(&self, id: i64) -> Option<&PoolRoutes> {
        self.pools.get(&id)
    }
}

pub struct Directory {
    generation: Generation,
    current: RwLock<Option<Arc<Snapshot>>>,
    reload: Mutex<()>,
}

#[derive(sqlx::FromRow)]
struct AccountRow {
    id: i64,
    provider: String,
    priority: i64,
    max_concurrency: i64,
    sealed_credential: Option<Vec<u8>>,
    pool_ids: Option<String>,
}

impl Directory {
    pub fn new(generation: Generation) -> Self {
        Directory { generation, current: RwLock::new(None), reload: Mutex::new(()) }
    }

    /// The current snapshot, rebuilt first if the configuration changed.
    pub async fn snapshot(&self, db: &SqlitePool, sealer: &Sealer) -> Result<Arc<Snapshot>> {
        let generation = self.generation.current();
        if let Some(s) = self.current.read().await.as_ref().filter(|s| s.generation == generation) {
            return Ok(Arc::clone(s));
        }
        // One reload at a time; latecomers reuse its result.
        let _guard = self.reload.lock().await;
        let generation = self.generation.current();
        if let Some(s) = self.current.read().await.as_ref().filter(|s| s.generation == generation) {
            return Ok(Arc::clone(s));
        }
        let snapshot = Arc::new(load(db, sealer, generation).await?);
        *self.current.write().await = Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }
}

async fn load(db: &SqlitePool, sealer: &Sealer, generation: u64) -> Result<Snapshot> {
    let policies: Vec<(i64, String, String, String)> =
        sqlx::query_as("SELECT id, policy_mode, policy_models, model_aliases FROM pools")
            .fetch_all(db)
            .await?;
    let mut pools: HashMap<i64, PoolRoutes> = policies
        .into_iter()
        .map(|(id, mode, models, aliases)| {
            let policy = crate::pools::policy_from_columns(&mode, &models, &aliases);
            (id, PoolRoutes { policy, accounts: Vec::new(), next: AtomicUsize::new(0) })
        })
        .collect();
    let rows: Vec<AccountRow> = sqlx::query_as(
        "SELECT a.id, a.provider, a.priority, a.max_concurrency, a.sealed_credential,
                (SELECT group_concat(pool_id) FROM account_pools WHERE account_id = a.id) AS pool_ids
         FROM accounts a
         WHERE a.deleted_at IS NULL AND a.status = 'active' AND a.schedulable = 1 AND a.sealed_credential IS NOT NULL
         ORDER BY a.id",
    )
    .fetch_all(db)
    .await?;
    for row in rows {
        let Some(provider) = Provider::parse(&row.provider) else { continue };
        let Some(sealed) = row.sealed_credential else { continue };
        let credentials = match sealer
            .open(SEAL_PURPOSE, &sealed)
            .ok()
            .and_then(|plain| serde_json::from_slice::<CredentialInput>(&plain).ok())
        {
            Some(c) => c,
            None => {
                tracing::error!(account_id = row.id, "account credentials cannot be opened; account skipped");
                continue;
            }
        };
        let account = Arc::new(Account {
            id: row.id,
            provider,
            priority: row.priority,
            max_concurrency: row.max_concurrency,
            credentials,
        });
        for pool_id in crate::validate::id_list(row.pool_ids) {
            if let Some(pool) = pools.get_mut(&pool_id) {
                pool.accounts.push(Arc::clone(&account));
            }
        }
    }
    Ok(Snapshot { generation, pools })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(id: i64, provider: Provider, priority: i64) -> Arc<Account> {
        Arc::new(Account {
            id,
            provider,
            priority,
            max_concurrency: 30,
            credentials: CredentialInput::ApiKey { api_key: "k".into() },
        })
    }

    fn pool(accounts: Vec<Arc<Account>>, policy: ModelPolicy) -> PoolRoutes {
        PoolRoutes { policy, accounts, next: AtomicUsize::new(0) }
    }

    #[test]
    fn round_robin_stays_in_the_top_priority_tier_and_provider() {
        let p = pool(
            vec![
                account(1, Provider::Codex, 0),
                account(2, Provider::Codex, 5),
                account(3, Provider::Claude, 9),
                account(4, Provider::OpenaiApi, 5),
            ],
            ModelPolicy::default(),
        );
        let picks: Vec<i64> =
            (0..4).map(|_| p.pick(&[Provider::Codex, Provider::OpenaiApi]).unwrap().id).collect();
        assert_eq!(picks, vec![2, 4, 2, 4]);
        assert_eq!(p.pick(&[Provider::Claude]).unwrap().id, 3);
        assert!(p.pick(&[Provider::Antigravity]).is_none());
    }

    #[test]
    fn policy_aliases_allow_and_deny() {
        let mut policy = ModelPolicy {
            mode: PolicyMode::Allow,
            models: vec!["gpt-5.1-codex".into()],
            ..Default::default()
        };
        policy.aliases.insert("fast".into(), "gpt-5.1-codex".into());
        let p = pool(vec![], policy);
        assert_eq!(p.resolve_model("fast"), Ok("gpt-5.1-codex".into()));
        assert_eq!(p.resolve_model("gpt-5.1-codex"), Ok("gpt-5.1-codex".into()));
        assert_eq!(p.resolve_model("o3"), Err(PolicyRefusal::NotAllowed));
        let deny = pool(
            vec![],
            ModelPolicy { mode: PolicyMode::Deny, models: vec!["o3".into()], ..Default::default() },
        );
        assert_eq!(deny.resolve_model("o3"), Err(PolicyRefusal::NotAllowed));
        assert_eq!(deny.resolve_model("gpt-5"), Ok("gpt-5".into()));
    }
}
