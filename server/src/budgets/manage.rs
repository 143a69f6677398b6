//! Managing budgets, for the JSON API and the web app alike: admins set policies on any subject
//! and the price table; a key's owner sets their own key's budget (the seed: "a key's budget is
//! adjusted by the key's creator"); every member sees the policies that apply to them.

use std::collections::HashMap;

use app::model::{BudgetPatch, BudgetView, MemberView, NewBudget, PriceInput, PriceView};
use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::{
    Policy, Price, Standing, Subject,
    policy::{Metric, parse_window, window_kind},
    prices::ANY_MODEL,
    store,
};
use crate::{
    app_state::AppState,
    error::{Error, Result},
};

/// Every policy (admins).
pub async fn list(s: &AppState, me: &MemberView) -> Result<Vec<BudgetView>> {
    admin(me)?;
    let now = s.clock.now();
    let all = s.budgets.standings(now, |_| true);
    views(&s.db, me, all).await
}

/// The policies that apply to the member: the workspace's, their own, their live keys'.
pub async fn mine(s: &AppState, me: &MemberView) -> Result<Vec<BudgetView>> {
    let keys: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM api_keys WHERE member_id = ? AND revoked_at IS NULL")
            .bind(me.id)
            .fetch_all(&s.db)
            .await?;
    let mut all = s.budgets.standings(s.clock.now(), |p| match p.subject {
        Subject::ApiKey(k) => keys.contains(&k),
        Subject::Member(m) => m == me.id,
        Subject::Workspace => true,
    });
    all.sort_by_key(|st| (st.policy.subject.rank(), st.policy.id));
    views(&s.db, me, all).await
}

/// Most policies on one subject.
pub const MAX_PER_SUBJECT: usize = 20;

pub async fn create(s: &AppState, me: &MemberView, new: NewBudget) -> Result<BudgetView> {
    let subject = Subject::parse(&new.subject, new.subject_id)?;
    may_create(&s.db, me, subject).await?;
    let metric = Metric::parse(&new.metric)?;
    let window = parse_window(&new.window, new.window_minutes)?;
    let limit = metric.units(new.limit)?;
    let policy = Policy { id: 0, subject, metric, window, limit };
    let policies = s.budgets.policies();
    let same: Vec<&Policy> = policies.all().iter().filter(|p| p.subject == subject).collect();
    if same.iter().any(|p| p.metric == metric && p.window == window) {
        return Err(Error::field(
            "window",
            "there is already such a budget for this subject: change its limit",
        ));
    }
    if same.len() >= MAX_PER_SUBJECT {
        return Err(Error::field("subject_id", format!("at most {MAX_PER_SUBJECT} budgets per subject")));
    }
    let now = s.clock.now();
    let id = store::insert_policy(&s.db, &policy, me.id, now.timestamp()).await?;
    s.budgets.reload_policies(&s.db).await?;
    one(s, me, id, now).await
}

pub async fn update(s: &AppState, me: &MemberView, id: i64, patch: BudgetPatch) -> Result<BudgetView> {
    let old = store::policy(&s.db, id).await?;
    may_change(&s.db, me, id, old.subject).await?;
    let new = Policy { limit: old.metric.units(patch.limit)?, ..old };
    let now = s.clock.now();
    store::update_limit(&s.db, &new, now.timestamp()).await?;
    s.budgets.reload_policies(&s.db).await?;
    one(s, me, id, now).await
}

pub async fn delete(s: &AppState, me: &MemberView, id: i64) -> Result<()> {
    let old = store::policy(&s.db, id).await?;
    may_change(&s.db, me, id, old.subject).await?;
    store::delete_policy(&s.db, id).await?;
    s.budgets.reload_policies(&s.db).await?;
    Ok(())
}

/// The price table in force, each price with where it comes from (admins).
pub async fn prices(s: &AppState, me: &MemberView) -> Result<Vec<PriceView>> {
    admin(me)?;
    let set = store::prices(&s.db).await?;
    let view = |model: &str, p: &Price, source: &str| PriceView {
        model: model.to_owned(),
        prompt: p.prompt,
        completion: p.completion,
        cached: p.cached,
        source: source.to_owned(),
    };
    let mut all: Vec<PriceView> = set.0.iter().map(|(m, p)| view(m, p, "app")).collect();
    for (m, p) in &s.budgets.configured_prices().0 {
        if !set.0.contains_key(m) {
            all.push(view(m, p, "config"));
        }
    }
    all.sort_by(|a, b| a.model.cmp(&b.model));
    Ok(all)
}

pub async fn set_price(
    s: &AppState,
    me: &MemberView,
    model: &str,
    input: PriceInput,
) -> Result<Vec<PriceView>> {
    admin(me)?;
    let model = model.trim();
    if model.is_empty() || model.len() > crate::records::MAX_MODEL_LEN || model.chars().any(char::is_control)
    {
        return Err(Error::field("model", format!("a model id, or {ANY_MODEL} for every other model")));
    }
    let price = Price { prompt: input.prompt, completion: input.completion, cached: input.cached };
    price.validate()?;
    store::set_price(&s.db, model, &price).await?;
    s.budgets.reload_prices(&s.db).await?;
    prices(s, me).await
}

pub async fn delete_price(s: &AppState, me: &MemberView, model: &str) -> Result<Vec<PriceView>> {
    admin(me)?;
    if !store::delete_price(&s.db, model).await? {
        return Err(Error::NotFound("price set in the app"));
    }
    s.budgets.reload_prices(&s.db).await?;
    prices(s, me).await
}

fn admin(me: &MemberView) -> Result<()> {
    if me.is_admin() { Ok(()) } else { Err(Error::forbidden("this needs an admin")) }
}

/// Admins change any policy (also of a key since revoked or a member since deleted); a member
/// only one they set on a key of theirs: an admin's limit on their key binds them, and they are
/// told so (403; they see it in My quota). Others' are not theirs to know of: 404.
async fn may_change(db: &SqlitePool, me: &MemberView, id: i64, subject: Subject) -> Result<()> {
    if me.is_admin() {
        return Ok(());
    }
    let Subject::ApiKey(key) = subject else { return Err(Error::NotFound("budget policy")) };
    let on_their_key: Option<Option<i64>> = sqlx::query_scalar(
        "SELECT p.created_by FROM budget_policies p JOIN api_keys k ON k.id = ?
         WHERE p.id = ? AND k.member_id = ?",
    )
    .bind(key)
    .bind(id)
    .bind(me.id)
    .fetch_optional(db)
    .await?;
    match on_their_key {
        Some(Some(by)) if by == me.id => Ok(()),
        Some(_) => Err(Error::forbidden("an admin set this budget on your key: only an admin changes it")),
        None => Err(Error::NotFound("budget policy")),
    }
}

/// Admins set policies on any live subject; a member only on their own live keys.
async fn may_create(db: &SqlitePool, me: &MemberView, subject: Subject) -> Result<()> {
    match subject {
        Subject::ApiKey(key) => {
            let owner: Option<i64> =
                sqlx::query_scalar("SELECT member_id FROM api_keys WHERE id = ? AND revoked_at IS NULL")
                    .bind(key)
                    .fetch_optional(db)
                    .await?;
            match owner {
                Some(owner) if owner == me.id || me.is_admin() => Ok(()),
                _ => Err(Error::field("subject_id", "no such key of yours")),
            }
        }
        Subject::Member(member) => {
            admin(me)?;
            let live: Option<i64> =
                sqlx::query_scalar("SELECT id FROM members WHERE id = ? AND deleted_at IS NULL")
                    .bind(member)
                    .fetch_optional(db)
                    .await?;
            live.map(|_| ()).ok_or_else(|| Error::field("subject_id", "no such member"))
        }
        Subject::Workspace => admin(me),
    }
}

async fn one(s: &AppState, me: &MemberView, id: i64, now: DateTime<Utc>) -> Result<BudgetView> {
    let st = s.budgets.standings(now, |p| p.id == id);
    views(&s.db, me, st).await?.pop().ok_or(Error::NotFound("budget policy"))
}

/// `id -> (name, second column)` for `ids`, from `select` (a query ending in `IN (`).
async fn names(db: &SqlitePool, select: &str, ids: &[i64]) -> Result<HashMap<i64, (String, String)>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(select);
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(id);
    }
    q.push(")");
    let rows: Vec<(i64, String, String)> = q.build_query_as().fetch_all(db).await?;
    Ok(rows.into_iter().map(|(id, a, b)| (id, (a, b))).collect())
}

/// Views with each subject's name (a key as `name (owner)`), and whether `me` may change each.
async fn views(db: &SqlitePool, me: &MemberView, all: Vec<Standing>) -> Result<Vec<BudgetView>> {
    // A member changes only the budgets they set on their keys (see `may_change`).
    let own: Vec<i64> = if me.is_admin() {
        Vec::new()
    } else {
        sqlx::query_scalar("SELECT id FROM budget_policies WHERE created_by = ?")
            .bind(me.id)
            .fetch_all(db)
            .await?
    };
    // Every subject's name in two queries, whatever the number of budgets.
    let ids = |pick: fn(Subject) -> Option<i64>| -> Vec<i64> {
        all.iter().filter_map(|st| pick(st.policy.subject)).collect()
    };
    let keys: HashMap<i64, (String, String)> = names(
        db,
        "SELECT k.id, k.name, m.username FROM api_keys k JOIN members m ON m.id = k.member_id WHERE k.id IN (",
        &ids(|s| if let Subject::ApiKey(k) = s { Some(k) } else { None }),
    )
    .await?;
    let members: HashMap<i64, (String, String)> = names(
        db,
        "SELECT id, username, '' FROM members WHERE id IN (",
        &ids(|s| if let Subject::Member(m) = s { Some(m) } else { None }),
    )
    .await?;
    let mut out = Vec::with_capacity(all.len());
    for st in all {
        let p = st.policy;
        let subject_name = match p.subject {
            Subject::ApiKey(id) => keys.get(&id).map_or_else(
                || format!("key {id}"),
                |(k, m)| format!("{k} ({})", crate::validate::shown_name(m.clone())),
            ),
            Subject::Member(id) => members
                .get(&id)
                .map_or_else(|| format!("member {id}"), |(m, _)| crate::validate::shown_name(m.clone())),
            Subject::Workspace => "Workspace".to_owned(),
        };
        out.push(BudgetView {
            id: p.id,
            subject: p.subject.kind().to_owned(),
            subject_id: p.subject.id(),
            subject_name,
            metric: p.metric.as_str().to_owned(),
            window: window_kind(p.window).to_owned(),
            window_minutes: match p.window {
                super::Window::Minutes(n) => Some(n),
                _ => None,
            },
            limit: p.metric.shown(p.limit),
            used: p.metric.shown(st.used),
            remaining: p.metric.shown(st.remaining()),
            reset_at: st.span.reset_at(),
            changeable: me.is_admin() || (matches!(p.subject, Subject::ApiKey(_)) && own.contains(&p.id)),
        });
    }
    Ok(out)
}
