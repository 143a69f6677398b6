//! Resource groups (ID-4): which members may use which accounts, and the model policy.
//!
//! A deleted pool stays as a row (revoked keys and request records point at it) but leaves every
//! list: its name is freed, its keys are revoked, its members and accounts leave it.

use app::model::{ModelPolicy, NewPool, PolicyMode, PoolChoice, PoolPatch, PoolView};
use sqlx::{FromRow, Sqlite, SqlitePool, Transaction};

use crate::{
    clock::{Clock, from_unix, to_unix},
    error::{Error, Result},
    keys, validate,
};

#[derive(Debug, FromRow)]
struct PoolRow {
    id: i64,
    name: String,
    policy_mode: String,
    policy_models: String,
    model_aliases: String,
    created_at: i64,
    member_ids: Option<String>,
    account_ids: Option<String>,
}

impl PoolRow {
    fn view(self) -> PoolView {
        PoolView {
            id: self.id,
            model_policy: policy_from_columns(&self.policy_mode, &self.policy_models, &self.model_aliases),
            name: self.name,
            member_ids: validate::id_list(self.member_ids),
            account_ids: validate::id_list(self.account_ids),
            created_at: from_unix(self.created_at),
        }
    }
}

const SELECT: &str = "SELECT p.id, p.name, p.policy_mode, p.policy_models, p.model_aliases, p.created_at,
    (SELECT group_concat(member_id) FROM pool_members WHERE pool_id = p.id) AS member_ids,
    (SELECT group_concat(ap.account_id) FROM account_pools ap JOIN accounts a ON a.id = ap.account_id
      WHERE ap.pool_id = p.id AND a.deleted_at IS NULL) AS account_ids
    FROM pools p WHERE p.deleted_at IS NULL";

pub async fn list(db: &SqlitePool) -> Result<Vec<PoolView>> {
    let rows: Vec<PoolRow> = sqlx::query_as(&format!("{SELECT} ORDER BY p.name")).fetch_all(db).await?;
    Ok(rows.into_iter().map(PoolRow::view).collect())
}

pub async fn get(db: &SqlitePool, id: i64) -> Result<PoolView> {
    let row: Option<PoolRow> =
        sqlx::query_as(&format!("{SELECT} AND p.id = ?")).bind(id).fetch_optional(db).await?;
    row.map(PoolRow::view).ok_or(Error::NotFound("pool"))
}

/// Pools a member may target with a key.
pub async fn choices_for(db: &SqlitePool, member_id: i64) -> Result<Vec<PoolChoice>> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT p.id, p.name FROM pools p JOIN pool_members pm ON pm.pool_id = p.id
         WHERE pm.member_id = ? AND p.deleted_at IS NULL ORDER BY p.name",
    )
    .bind(member_id)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|(id, name)| PoolChoice { id, name }).collect())
}

/// A pool name: a display name that cannot pass for a deleted pool's.
fn pool_name(value: &str) -> Result<String> {
    let name = validate::name("name", value)?;
    if name.contains(validate::DELETED_MARK) {
        return Err(Error::field("name", format!("name must not contain {:?}", validate::DELETED_MARK)));
    }
    Ok(name)
}

pub async fn create(db: &SqlitePool, clock: &dyn Clock, new: NewPool) -> Result<PoolView> {
    let name = pool_name(&new.name)?;
    let (models, aliases) = policy_json(&new.model_policy)?;
    let now = to_unix(clock.now());
    let mut tx = db.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO pools (name, policy_mode, policy_models, model_aliases, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(&name)
    .bind(new.model_policy.mode.as_str())
    .bind(models)
    .bind(aliases)
    .bind(now)
    .bind(now)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| Error::on_conflict(e, || format!("a pool named {name:?} exists")))?;
    replace_members(&mut tx, id, &new.member_ids).await?;
    tx.commit().await?;
    get(db, id).await
}

pub async fn update(db: &SqlitePool, clock: &dyn Clock, id: i64, patch: PoolPatch) -> Result<PoolView> {
    let current = get(db, id).await?;
    let name = match &patch.name {
        Some(n) => pool_name(n)?,
        None => current.name,
    };
    let policy = patch.model_policy.unwrap_or(current.model_policy);
    let (models, aliases) = policy_json(&policy)?;
    let mut tx = db.begin().await?;
    // A delete landing since `get` wins: the deleted row keeps its freed name and stays empty.
    let changed = sqlx::query(
        "UPDATE pools SET name = ?, policy_mode = ?, policy_models = ?, model_aliases = ?, updated_at = ?
         WHERE id = ? AND deleted_at IS NULL",
    )
    .bind(&name)
    .bind(policy.mode.as_str())
    .bind(models)
    .bind(aliases)
    .bind(to_unix(clock.now()))
    .bind(id)
    .execute(&mut *tx)
    .await
    .map_err(|e| Error::on_conflict(e, || format!("a pool named {name:?} exists")))?;
    if changed.rows_affected() == 0 {
        return Err(Error::NotFound("pool"));
    }
    if let Some(member_ids) = &patch.member_ids {
        replace_members(&mut tx, id, member_ids).await?;
    }
    tx.commit().await?;
    get(db, id).await
}

/// Deletes a pool: its keys are revoked (the proxy refuses them at once), its members and accounts
/// leave it (accounts stay, possibly in no pool), and conversations bound in it are forgotten.
/// Request records keep the pool's id. Answers how many keys were revoked.
pub async fn delete(db: &SqlitePool, clock: &dyn Clock, id: i64) -> Result<u64> {
    let now = to_unix(clock.now());
    let mut tx = db.begin().await?;
    let forget = [
        "DELETE FROM pool_members WHERE pool_id = ?",
        "DELETE FROM account_pools WHERE pool_id = ?",
        "DELETE FROM session_bindings WHERE pool_id = ?",
    ];
    let revoked = keys::soft_delete(&mut tx, keys::Holder::Pool, id, now, &forget).await?;
    tx.commit().await?;
    Ok(revoked)
}

async fn replace_members(tx: &mut Transaction<'_, Sqlite>, pool_id: i64, member_ids: &[i64]) -> Result<()> {
    for member_id in member_ids {
        let live: Option<i64> =
            sqlx::query_scalar("SELECT id FROM members WHERE id = ? AND deleted_at IS NULL")
                .bind(member_id)
                .fetch_optional(&mut **tx)
                .await?;
        if live.is_none() {
            return Err(Error::field("member_ids", format!("member_ids: member {member_id} does not exist")));
        }
    }
    sqlx::query("DELETE FROM pool_members WHERE pool_id = ?").bind(pool_id).execute(&mut **tx).await?;
    for member_id in member_ids {
        sqlx::query("INSERT OR IGNORE INTO pool_members (pool_id, member_id) VALUES (?, ?)")
            .bind(pool_id)
            .bind(member_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// A pool's model policy from its stored columns (mode name, JSON model list, JSON alias map).
pub fn policy_from_columns(mode: &str, models: &str, aliases: &str) -> ModelPolicy {
    ModelPolicy {
        mode: PolicyMode::parse(mode),
        models: serde_json::from_str(models).unwrap_or_default(),
        aliases: serde_json::from_str(aliases).unwrap_or_default(),
    }
}

/// Checks the policy and returns its model list and alias map as JSON text. Each fault is a 422
/// naming its field (`model_policy.models` or `model_policy.aliases`) and the offending entry.
fn policy_json(policy: &ModelPolicy) -> Result<(String, String)> {
    const MODELS: &str = "model_policy.models";
    const ALIASES: &str = "model_policy.aliases";
    let model_id = |field: &'static str, m: &str| -> Result<()> {
        if m.trim().is_empty() || m.len() > 128 || m.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::field(
                field,
                format!("{field}: {m:?} is not a model id (1 to 128 characters, no spaces)"),
            ));
        }
        Ok(())
    };
    for (i, m) in policy.models.iter().enumerate() {
        model_id(MODELS, m)?;
        if policy.models[..i].contains(m) {
            return Err(Error::field(MODELS, format!("{MODELS}: {m:?} is listed twice")));
        }
    }
    if policy.mode == PolicyMode::Allow && policy.models.is_empty() {
        return Err(Error::field(
            MODELS,
            format!("{MODELS}: an allow list needs at least one model (or choose \"every model\")"),
        ));
    }
    for (alias, target) in &policy.aliases {
        model_id(ALIASES, alias)?;
        model_id(ALIASES, target)?;
        if alias == target {
            return Err(Error::field(ALIASES, format!("{ALIASES}: {alias:?} points at itself")));
        }
    }
    let models = serde_json::to_string(&policy.models).map_err(|e| Error::Internal(e.to_string()))?;
    let aliases = serde_json::to_string(&policy.aliases).map_err(|e| Error::Internal(e.to_string()))?;
    Ok((models, aliases))
}
