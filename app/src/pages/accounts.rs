//! Admin -> Accounts (UI-3): "Add account" (CRED-5) and "Refresh quota" (QT-1), then one card
//! per account with its state badges (every blocking dimension of ACC-1 that is in force, quota
//! exhausted, and the token's state: expiry, last refresh, refresh backoff, re-authorization
//! required), live load and queue, quota rows with pace bars (PACE), per-model counts and
//! cooldowns, its settings, and the ACC-3 actions (Refresh token, Re-authorize, Delete after a
//! confirmation). Loading the page reads stale quota (the server waits briefly for it); once
//! hydrated, the page refreshes itself every few seconds unless a form on it is being edited. The card's controls are forms posting to server
//! functions, so they also work without JavaScript; adding an account and re-authorizing one need
//! it (a sign-in is started in place, a file is read in the browser).

use chrono::{DateTime, Utc};
use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use super::{
    account_forms::{AddAccountForm, DeleteForm, ReauthorizeForm, SettingsForm, provider_label},
    quota_rows::QuotaRows,
};
use crate::{
    components::{ErrorNote, PageHeader, Timestamp},
    model::{
        AccountAction, AccountRuntime, AccountStatus, AccountTest, ModelRuntime, PoolChoice, TokenState,
    },
    rpc::{
        AddAccount, DeleteAccount, ReauthorizeAccount, RefreshQuota, RunAccountAction, SaveAccountSettings,
        list_account_pools, list_account_runtime,
    },
};

/// The forms a card posts to, shared by every card.
#[derive(Clone, Copy)]
struct CardActions {
    act: ServerAction<RunAccountAction>,
    save: ServerAction<SaveAccountSettings>,
    reauthorize: ServerAction<ReauthorizeAccount>,
    delete: ServerAction<DeleteAccount>,
}

const ACTION: &str = "rounded-md border border-slate-300 bg-white px-2 py-1 text-xs font-medium text-slate-800 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60";

#[component]
pub fn AccountsPage() -> impl IntoView {
    let actions = CardActions {
        act: ServerAction::<RunAccountAction>::new(),
        save: ServerAction::<SaveAccountSettings>::new(),
        reauthorize: ServerAction::<ReauthorizeAccount>::new(),
        delete: ServerAction::<DeleteAccount>::new(),
    };
    let add = ServerAction::<AddAccount>::new();
    let refresh = ServerAction::<RefreshQuota>::new();
    // Live view: while the page is visible and nothing on it is being edited, it reloads the
    // runtime every few seconds (load, queue, badges). Typing into a form marks the page as
    // edited until one of its actions is sent, so a refresh never overwrites what is typed.
    let tick = RwSignal::new(0u64);
    let edited = RwSignal::new(false);
    live_refresh(tick, edited);
    let CardActions { act, save, reauthorize, delete } = actions;
    let accounts = Resource::new(
        move || {
            (
                act.version().get(),
                save.version().get(),
                reauthorize.version().get(),
                delete.version().get(),
                add.version().get(),
                refresh.version().get(),
                tick.get(),
            )
        },
        |_| list_account_runtime(),
    );
    let pools = Resource::new(|| (), |_| list_account_pools());
    let error_of =
        |e: Option<Result<(), String>>| e.and_then(|r| r.err()).map(|m| view! { <ErrorNote message=m /> });
    view! {
        <Title text="Accounts" />
        <PageHeader title="Accounts" description="Upstream accounts: their state, load, tokens and settings." />
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let pools = pools.await.unwrap_or_default();
                view! { <AddAccountForm pools add /> }
            })}
        </Suspense>
        <ActionForm action=refresh attr:class="mb-4">
            <button type="submit" class=ACTION disabled=move || refresh.pending().get()>
                {move || if refresh.pending().get() { "Reading quota…" } else { "Refresh quota" }}
            </button>
        </ActionForm>
        <div class="mb-4 space-y-2" aria-live="polite">
            {move || act.value().get().map(|r| match r {
                Ok(done) => Either::Left(done.test.map(|t| view! { <TestNote test=t /> })),
                Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
            })}
            {move || error_of(save.value().get().map(|r| r.map(|_| ()).map_err(|e| e.message)))}
            {move || error_of(reauthorize.value().get().map(|r| r.map(|_| ()).map_err(|e| e.message)))}
            {move || error_of(delete.value().get().map(|r| r.map_err(|e| e.message)))}
            {move || error_of(refresh.value().get().map(|r| r.map_err(|e| e.message)))}
            {move || reauthorize.value().get().and_then(|r| r.ok()).map(|a| view! {
                <p role="status" class="rounded-md border border-emerald-200 bg-emerald-50 px-3 py-2 text-sm text-emerald-900">
                    "New credentials for "{a.name}"."
                </p>
            })}
        </div>
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading accounts…"</p> }>
            <div on:input=move |_| edited.set(true) on:submit=move |_| edited.set(false)>
            {move || Suspend::new(async move {
                let all_pools = pools.await.unwrap_or_default();
                match accounts.await {
                    Ok(list) if list.is_empty() => Either::Left(view! {
                        <p class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">
                            "No accounts yet. Add one above."
                        </p>
                    }.into_any()),
                    Ok(list) => Either::Left(view! {
                        <div class="grid gap-4 lg:grid-cols-2" data-testid="account-cards">
                            {list.into_iter().map(|a| view! { <AccountCard account=a pools=all_pools.clone() actions /> }).collect_view()}
                        </div>
                    }.into_any()),
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
            </div>
        </Transition>
    }
}

/// Bumps `tick` every 5 s while the page is visible, not `edited`, and no form field
/// has the focus (hydrated only; without JavaScript the page is read as served).
fn live_refresh(tick: RwSignal<u64>, edited: RwSignal<bool>) {
    #[cfg(feature = "hydrate")]
    {
        let quiet = move || {
            let Some(doc) = web_sys::window().and_then(|w| w.document()) else { return false };
            // Anything focused (a field, a button, a link: keyboard users keep their place) or
            // an open panel (Re-authorize, Delete, a sign-in under way) pauses the refresh.
            let focused = doc.active_element().is_some_and(|e| e.tag_name() != "BODY");
            let open = doc.query_selector("article details[open]").ok().flatten().is_some();
            !doc.hidden() && !focused && !open && !edited.get_untracked()
        };
        if let Ok(handle) = set_interval_with_handle(
            move || {
                if quiet() {
                    tick.update(|n| *n += 1);
                }
            },
            std::time::Duration::from_secs(5),
        ) {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (tick, edited);
}

fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).unwrap_or_default()
}

#[component]
fn AccountCard(account: AccountRuntime, pools: Vec<PoolChoice>, actions: CardActions) -> impl IntoView {
    let CardActions { act, save, reauthorize, delete } = actions;
    let a = account;
    let id = a.id.to_string();
    let name = a.name.clone();
    let load = format!("{} / {} in flight", a.in_flight, a.max_concurrency);
    let queue = (a.queue_depth > 0).then(|| format!("{} waiting", a.queue_depth));
    let action = move |what: AccountAction, label: &'static str| {
        let value = what.as_str();
        let aria = format!("{label}: {name}");
        let id = id.clone();
        view! {
            <ActionForm action=act>
                <input type="hidden" name="id" value=id />
                <input type="hidden" name="action" value=value />
                <button type="submit" class=ACTION aria-label=aria disabled=move || act.pending().get()>{label}</button>
            </ActionForm>
        }
        .into_any()
    };
    let status = a.status;
    view! {
        <article class="rounded-lg border border-slate-200 bg-white p-5" data-account-id=a.id.to_string() aria-label=a.name.clone()>
            <header class="flex flex-wrap items-start justify-between gap-2">
                <div>
                    <h2 class="text-base font-semibold">{a.name.clone()}</h2>
                    <p class="text-xs text-slate-500">{provider_label(a.provider)}" · priority "{a.priority}</p>
                </div>
                <p class="text-sm text-slate-700" data-testid="load">{load}{queue.map(|q| view! { <span class="ml-2 text-amber-700">{q}</span> })}</p>
            </header>
            <ul class="mt-3 flex flex-wrap gap-1.5" aria-label="State" data-testid="badges">
                {view! { <StateBadges account=a.clone() /> }.into_any()}
            </ul>
            {view! { <QuotaRows rows=a.quota.clone() name=a.name.clone() observed=a.provider.uses_oauth() /> }.into_any()}
            {(!a.models.is_empty()).then(|| view! { <ModelTable models=a.models.clone() /> }.into_any())}
            {a.token.clone().map(|t| view! { <TokenLine token=t /> })}
            <SettingsForm account=a.clone() pools save />
            <div class="mt-3 flex flex-wrap gap-2" aria-label="Actions">
                {action(AccountAction::Test, "Test")}
                {a.provider.uses_oauth().then(|| action(AccountAction::RefreshToken, "Refresh token"))}
                {action(AccountAction::ClearCooldown, "Clear cooldown")}
                {action(AccountAction::Recover, "Recover state")}
                {(status == AccountStatus::Error).then(|| action(AccountAction::ClearError, "Clear error"))}
                {if status == AccountStatus::Disabled {
                    action(AccountAction::Enable, "Enable")
                } else {
                    action(AccountAction::Disable, "Disable")
                }}
                {if a.schedulable {
                    action(AccountAction::SchedulableOff, "Stop scheduling")
                } else {
                    action(AccountAction::SchedulableOn, "Resume scheduling")
                }}
            </div>
            <div class="mt-2 flex flex-wrap items-start gap-2">
                <ReauthorizeForm account=a.clone() reauthorize />
                <DeleteForm account=a.clone() delete />
            </div>
        </article>
    }
    // Erased: the card's full type is too deep for the compiler's layout queries.
    .into_any()
}

/// One badge per state in force (ACC-1); several can hold at once.
#[component]
fn StateBadges(account: AccountRuntime) -> impl IntoView {
    let a = account;
    // (`joint`: the words between the text and the time)
    let badge_at = |class: &'static str, text: String, time: Option<(&'static str, i64)>| {
        view! {
            <li class=format!("rounded px-2 py-0.5 text-xs font-medium {class}")>
                {text}{time.map(|(joint, u)| view! { {joint} <Timestamp at=at(u) /> })}
            </li>
        }
    };
    let badge = |class: &'static str, text: String, until: Option<i64>| {
        badge_at(class, text, until.map(|u| (" until ", u)))
    };
    let mut out = Vec::new();
    out.push(match a.status {
        AccountStatus::Active => badge("bg-emerald-100 text-emerald-800", "active".into(), None),
        AccountStatus::Error => badge("bg-red-100 text-red-800", "error".into(), None),
        AccountStatus::Disabled => badge("bg-slate-200 text-slate-700", "disabled".into(), None),
    });
    if !a.schedulable {
        out.push(badge("bg-slate-200 text-slate-700", "not scheduling".into(), None));
    }
    // ACC-1: the account's own end (a subscription's), shown ahead so it surprises no one.
    match (a.expires_at, a.expired) {
        (Some(t), true) => out.push(badge_at("bg-red-100 text-red-800", "expired".into(), Some((" ", t)))),
        (Some(t), false) => {
            out.push(badge_at("bg-slate-100 text-slate-700", "expires".into(), Some((" ", t))))
        }
        (None, _) => {}
    }
    if let Some(u) = a.quota_exhausted_until {
        // QT-5: its own state; checked again at that time (no promise that it has recovered).
        out.push(badge("bg-red-100 text-red-800", "quota exhausted".into(), Some(u)));
    }
    if let Some(u) = a.rate_limit_reset_at {
        out.push(badge("bg-amber-100 text-amber-800", "rate limited".into(), Some(u)));
    }
    if let Some(u) = a.overload_until {
        out.push(badge("bg-amber-100 text-amber-800", "overloaded".into(), Some(u)));
    }
    if let Some(u) = a.temp_unschedulable_until {
        let why = a.temp_unschedulable_reason.clone().unwrap_or_else(|| "paused".into());
        out.push(badge("bg-red-100 text-red-800", format!("paused ({why})"), Some(u)));
    }
    if let Some(t) = &a.token {
        if let Some(why) = &t.reauth_required {
            out.push(badge("bg-red-100 text-red-800", format!("re-authorization required ({why})"), None));
        } else if t.rejected {
            out.push(badge("bg-amber-100 text-amber-800", "token refused upstream".into(), None));
        }
        if let Some(u) = t.backoff_until {
            out.push(badge("bg-amber-100 text-amber-800", "token refresh failing".into(), Some(u)));
        }
    }
    if a.limited_models > 0 {
        let n = a.limited_models;
        out.push(badge(
            "bg-amber-100 text-amber-800",
            format!("{n} model{} limited", if n == 1 { "" } else { "s" }),
            None,
        ));
    }
    out.collect_view()
}

/// The token's lifecycle (UI-3): when it expires, when it was last refreshed, and why refreshing
/// waits.
#[component]
fn TokenLine(token: TokenState) -> impl IntoView {
    let t = token;
    view! {
        <p class="mt-3 text-xs text-slate-600" data-testid="token">
            "Token: "
            {match t.expires_at {
                Some(e) => Either::Left(view! { "expires " <Timestamp at=at(e) /> }),
                None => Either::Right("no expiry known"),
            }}
            {t.refreshed_at.map(|r| view! { " · last refreshed " <Timestamp at=at(r) /> })}
            {(!t.refreshable).then_some(" · no refresh token")}
            {t.backoff_until.map(|u| view! {
                " · refresh failed ("{t.last_error.clone().unwrap_or_default()}"), next try after " <Timestamp at=at(u) />
            })}
            {t.reauth_required.clone().map(|why| view! { <strong class="text-red-800">" · re-authorization required: "{why}</strong> })}
        </p>
    }
}

#[component]
fn ModelTable(models: Vec<ModelRuntime>) -> impl IntoView {
    view! {
        <table class="mt-3 w-full text-left text-xs">
            <thead class="text-slate-500">
                <tr>
                    <th scope="col" class="py-1 font-medium">"Model"</th>
                    <th scope="col" class="py-1 font-medium">"Requests"</th>
                    <th scope="col" class="py-1 font-medium">"Recent failures"</th>
                    <th scope="col" class="py-1 font-medium">"State"</th>
                </tr>
            </thead>
            <tbody class="divide-y divide-slate-100">
                {models.into_iter().map(|m| view! {
                    <tr>
                        <td class="py-1 font-mono">{m.model.clone()}</td>
                        <td class="py-1">{m.requests}</td>
                        <td class="py-1">{m.recent_failures}</td>
                        <td class="py-1">
                            {match (m.limited_until, m.cooling_until) {
                                (Some(u), _) => Either::Left(view! { "limited by the provider until " <Timestamp at=at(u) /> }),
                                (None, Some(u)) => Either::Left(view! { "cooling until " <Timestamp at=at(u) /> }),
                                (None, None) => Either::Right(view! { <span class="text-slate-400">"ok"</span> }),
                            }}
                        </td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn TestNote(test: AccountTest) -> impl IntoView {
    let status = test.upstream_status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
    let (class, text) = if test.ok {
        (
            "border-emerald-200 bg-emerald-50 text-emerald-900",
            format!(
                "Test of {} passed in {} ms{status}; its state was recovered.",
                test.account.name, test.latency_ms
            ),
        )
    } else {
        let why = test.error.clone().unwrap_or_else(|| "failed".into());
        (
            "border-red-200 bg-red-50 text-red-800",
            format!("Test of {} failed: {why}{status}. Nothing was changed.", test.account.name),
        )
    };
    view! { <p role="status" data-testid="test-result" class=format!("rounded-md border px-3 py-2 text-sm {class}")>{text}</p> }
}
