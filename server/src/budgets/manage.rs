//! Managing budgets, for the JSON API and the web app alike: admins set policies on any subject
//! and the price table; a key's owner sets their own key's budget (the seed: "a key's budget is
//! adjusted by the key's creator"); every member sees the policies that apply to them.

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
    views(&s.db, all).await
}

/// The policies that apply to the member: the workspace's, their own, their live keys'.
pub async fn mine(s: &AppState, me: &MemberView) -> Result<Vec<BudgetView>> {
    let keys: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM api_keys WHERE member_id = ? AND revoked_at IS NULL")
            .bind(me.id)
            .fetch_all(&s.db)
            .await?;
    let all = s.budgets.standings(s.clock.now(), |p| match p.subject {
        Subject::ApiKey(k) => keys.contains(&k),
        Subject::Member(m) => m == me.id,
        Subject::Workspace => true,
    });
    views(&s.db, all).await
}

pub async fn create(s: &AppState, me: &MemberView, new: NewBudget) -> Result<BudgetView> {
    let subject = Subject::parse(&new.subject, new.subject_id)?;
    may_manage(&s.db, me, subject).await?;
    let metric = Metric::parse(&new.metric)?;
    let window = parse_window(&new.window, new.window_minutes)?;
    let limit = metric.units(new.limit)?;
    let policy = Policy { id: 0, subject, metric, window, limit };
    let now = s.clock.now();
    let id = store::insert_policy(&s.db, &policy, me.id, now.timestamp()).await?;
    s.budgets.reload_policies(&s.db).await?;
    one(s, id, now).await
}

pub async fn update(s: &AppState, me: &MemberView, id: i64, patch: BudgetPatch) -> Result<BudgetView> {
    let old = store::policy(&s.db, id).await?;
    may_manage(&s.db, me, old.subject).await.map_err(|_| Error::NotFound("budget policy"))?;
    let metric = patch.metric.as_deref().map(Metric::parse).transpose()?.unwrap_or(old.metric);
    let window = match patch.window.as_deref() {
        Some(kind) => parse_window(kind, patch.window_minutes)?,
        None if patch.window_minutes.is_some() => {
            parse_window(window_kind(old.window), patch.window_minutes)?
        }
        None => old.window,
    };
    let limit = match patch.limit {
        Some(l) => metric.units(l)?,
        // a new metric keeps the shown number (300 requests -> 300 tokens), not the units
        None => metric.units(old.metric.shown(old.limit).round())?,
    };
    let new = Policy { metric, window, limit, ..old };
    let recount = metric != old.metric || window != old.window;
    let now = s.clock.now();
    store::update_policy(&s.db, &new, recount, now.timestamp()).await?;
    if recount {
        s.budgets.forget(id);
    }
    s.budgets.reload_policies(&s.db).await?;
    one(s, id, now).await
}

pub async fn delete(s: &AppState, me: &MemberView, id: i64) -> Result<()> {
    let old = store::policy(&s.db, id).await?;
    may_manage(&s.db, me, old.subject).await.map_err(|_| Error::NotFound("budget policy"))?;
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

/// Admins manage every policy of a subject that exists; a member only their own live keys'.
async fn may_manage(db: &SqlitePool, me: &MemberView, subject: Subject) -> Result<()> {
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

async fn one(s: &AppState, id: i64, now: DateTime<Utc>) -> Result<BudgetView> {
    let st = s.budgets.standings(now, |p| p.id == id);
    views(&s.db, st).await?.pop().ok_or(Error::NotFound("budget policy"))
}

/// Views with each subject's name (a key as `name (owner)`).
async fn views(db: &SqlitePool, all: Vec<Standing>) -> Result<Vec<BudgetView>> {
    let mut out = Vec::with_capacity(all.len());
    for st in all {
        let p = st.policy;
        let subject_name = match p.subject {
            Subject::ApiKey(id) => {
                let row: Option<(String, String)> = sqlx::query_as(
                    "SELECT k.name, m.username FROM api_keys k JOIN members m ON m.id = k.member_id WHERE k.id = ?",
                )
                .bind(id)
                .fetch_optional(db)
                .await?;
                row.map_or_else(
                    || format!("key {id}"),
                    |(k, m)| format!("{k} ({})", crate::validate::shown_name(m)),
                )
            }
            Subject::Member(id) => {
                let name: Option<String> = sqlx::query_scalar("SELECT username FROM members WHERE id = ?")
                    .bind(id)
                    .fetch_optional(db)
                    .await?;
                name.map_or_else(|| format!("member {id}"), crate::validate::shown_name)
            }
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
        });
    }
    Ok(out)
}
