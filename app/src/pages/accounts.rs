//! Admin -> Accounts (UI-3, without quota rows yet): one card per account with its state badges
//! (every blocking dimension of ACC-1 that is in force), live load and queue, per-model counts and
//! cooldowns, Scheduling settings, and the ACC-3 actions. Every control is a form posting to a
//! server function, so the page also works without JavaScript.

use chrono::{DateTime, Utc};
use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{ErrorNote, PageHeader, Timestamp},
    model::{AccountAction, AccountRuntime, AccountStatus, AccountTest, ModelRuntime, Provider},
    rpc::{RunAccountAction, SetAccountScheduling, list_account_runtime},
};

const INPUT: &str = "mt-1 block w-28 rounded-md border border-slate-300 bg-white px-2 py-1 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";
const ACTION: &str = "rounded-md border border-slate-300 bg-white px-2 py-1 text-xs font-medium text-slate-800 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60";

#[component]
pub fn AccountsPage() -> impl IntoView {
    let act = ServerAction::<RunAccountAction>::new();
    let settings = ServerAction::<SetAccountScheduling>::new();
    let accounts =
        Resource::new(move || (act.version().get(), settings.version().get()), |_| list_account_runtime());
    view! {
        <Title text="Accounts" />
        <PageHeader title="Accounts" description="Upstream accounts: their state, load and scheduling settings." />
        <div class="mb-4 space-y-2" aria-live="polite">
            {move || act.value().get().map(|r| match r {
                Ok(done) => Either::Left(done.test.map(|t| view! { <TestNote test=t /> })),
                Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
            })}
            {move || settings.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
        </div>
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading accounts…"</p> }>
            {move || Suspend::new(async move {
                match accounts.await {
                    Ok(list) if list.is_empty() => Either::Left(view! {
                        <p class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">
                            "No accounts yet. Add one with "<code>"POST /api/accounts"</code>"."
                        </p>
                    }.into_any()),
                    Ok(list) => Either::Left(view! {
                        <div class="grid gap-4 lg:grid-cols-2" data-testid="account-cards">
                            {list.into_iter().map(|a| view! { <AccountCard account=a act settings /> }).collect_view()}
                        </div>
                    }.into_any()),
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).unwrap_or_default()
}

fn provider_label(p: Provider) -> &'static str {
    match p {
        Provider::Codex => "OpenAI Codex",
        Provider::Claude => "Claude",
        Provider::Antigravity => "Antigravity",
        Provider::OpenaiApi => "OpenAI API key",
        Provider::AnthropicApi => "Anthropic API key",
    }
}

#[component]
fn AccountCard(
    account: AccountRuntime,
    act: ServerAction<RunAccountAction>,
    settings: ServerAction<SetAccountScheduling>,
) -> impl IntoView {
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
            {(!a.models.is_empty()).then(|| view! { <ModelTable models=a.models.clone() /> }.into_any())}
            <section class="mt-4 border-t border-slate-100 pt-3" aria-label="Scheduling settings">
                <h3 class="text-sm font-medium">"Scheduling settings"</h3>
                <ActionForm action=settings>
                    <input type="hidden" name="id" value=a.id.to_string() />
                    <div class="mt-1 flex flex-wrap items-end gap-3">
                        <label class="text-xs text-slate-600">"Concurrency limit"
                            <input name="max_concurrency" type="number" min="1" max="1000" required value=a.max_concurrency.to_string() class=INPUT />
                        </label>
                        <label class="text-xs text-slate-600">"Priority"
                            <input name="priority" type="number" required value=a.priority.to_string() class=INPUT />
                        </label>
                        <button type="submit" class=ACTION>"Save"</button>
                    </div>
                </ActionForm>
            </section>
            <div class="mt-3 flex flex-wrap gap-2" aria-label="Actions">
                {action(AccountAction::Test, "Test")}
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
        </article>
    }
    // Erased: the card's full type is too deep for the compiler's layout queries.
    .into_any()
}

/// One badge per state in force (ACC-1); several can hold at once.
#[component]
fn StateBadges(account: AccountRuntime) -> impl IntoView {
    let a = account;
    let badge = |class: &'static str, text: String, until: Option<i64>| {
        view! {
            <li class=format!("rounded px-2 py-0.5 text-xs font-medium {class}")>
                {text}{until.map(|u| view! { " until " <Timestamp at=at(u) /> })}
            </li>
        }
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
