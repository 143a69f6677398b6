//! General -> Requests and Admin -> All requests (UI-1): request records, newest first, 50 per
//! page, with every REC-4 filter (outcome, model, key, time range, request id; member and account
//! for admins), choices from the caller's own retained history (API-2). Filters and paging are
//! plain GET forms and links, so the pages work without JavaScript; hydrated, they navigate in
//! place. Each row is one line: its start time opens the record's detail page (UI-2, API-3),
//! with every field and the routing explanation in words; the compact request id can be copied.

use chrono::{DateTime, NaiveDateTime};
use leptos::{either::Either, prelude::*};
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::{
    components::{
        CopyButton, ErrorNote, LocalDateTimeInput, PageHeader, Timestamp,
        format::{millis, query_value},
    },
    model::{RequestFilter, RequestFilterChoices, RequestRecord},
    rpc::{list_requests, request_detail, request_filters},
};

/// Column headings of the request tables (UI-1).
pub const REQUEST_COLUMNS: [&str; 11] = [
    "Started",
    "Request ID",
    "Model",
    "Key",
    "Outcome",
    "Upstream status",
    "Duration",
    "First output",
    "Tokens in / out / cached",
    "Cache hit",
    "Routing",
];

/// The query parameters the filters set (and paging keeps).
const FILTER_KEYS: [&str; 8] =
    ["outcome", "model", "key_id", "from", "until", "request_id", "user_id", "account_id"];

const FIELD: &str = "mt-1 rounded-md border border-slate-300 bg-white px-2 py-1.5 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";

#[component]
pub fn RequestsPage() -> impl IntoView {
    view! {
        <Title text="Requests" />
        <PageHeader title="Requests" description="Your model calls through SubLane: metadata only, never prompts or answers." />
        <super::budgets::QuotaCard />
        <RequestHistory everyone=false />
    }
}

#[component]
pub fn AdminRequestsPage() -> impl IntoView {
    view! {
        <Title text="All requests" />
        <PageHeader title="All requests" description="Every member's model calls, with the account that served them." />
        <RequestHistory everyone=true />
    }
}

/// A time filter: unix seconds, or a `datetime-local` value read as UTC.
fn unix_time(v: &str) -> Option<i64> {
    let v = v.trim();
    v.parse().ok().or_else(|| {
        ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
            .iter()
            .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
            .map(|t| t.and_utc().timestamp())
    })
}

#[component]
fn RequestHistory(everyone: bool) -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        let q = query.read();
        let text = |k: &str| q.get(k).filter(|v| !v.trim().is_empty());
        let number = |k: &str| text(k).and_then(|v| v.trim().parse().ok());
        RequestFilter {
            cursor: number("cursor"),
            outcome: text("outcome"),
            model: text("model"),
            request_id: text("request_id"),
            key_id: number("key_id"),
            from: text("from").and_then(|v| unix_time(&v)),
            until: text("until").and_then(|v| unix_time(&v)),
            user_id: if everyone { number("user_id") } else { None },
            account_id: if everyone { number("account_id") } else { None },
        }
    };
    let page = Resource::new(filter, move |f| list_requests(f, everyone));
    // Keyed on the query, so the form shows the filters in force after in-app navigation too.
    let choices = Resource::new(move || query.get(), move |_| request_filters(everyone));
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let choices = choices.await.unwrap_or_default();
                view! { <Filters choices everyone /> }
            })}
        </Suspense>
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading requests…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(page) => {
                        let next = page.next_cursor.map(|c| {
                            let q = query.read_untracked();
                            let mut href = format!("?cursor={c}");
                            for k in FILTER_KEYS {
                                if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
                                    href.push_str(&format!("&{k}={}", query_value(&v)));
                                }
                            }
                            href
                        });
                        let filtered = FILTER_KEYS.iter().any(|k| query.read_untracked().get(k).is_some_and(|v| !v.is_empty()));
                        // Back to the first page, same filters (the browser's history aside).
                        let newest = query.read_untracked().get("cursor").filter(|c| !c.trim().is_empty()).map(|_| {
                            let q = query.read_untracked();
                            let kept: Vec<String> = FILTER_KEYS
                                .iter()
                                .filter_map(|k| q.get(k).filter(|v| !v.is_empty()).map(|v| format!("{k}={}", query_value(&v))))
                                .collect();
                            format!("?{}", kept.join("&"))
                        });
                        Either::Left(view! { <RecordTable records=page.items everyone next newest filtered /> })
                    }
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn Filters(choices: RequestFilterChoices, everyone: bool) -> impl IntoView {
    let query = use_query_map();
    let current = move |k: &str| query.read_untracked().get(k).unwrap_or_default();
    let time = move |k: &str| unix_time(&current(k)).and_then(|u| DateTime::from_timestamp(u, 0));
    let zone = RwSignal::new("UTC");
    let select =
        move |id: &'static str, name: &'static str, label: &'static str, options: Vec<(String, String)>| {
            let now = current(name);
            view! {
                <div>
                    <label for=id class="block text-xs font-medium text-slate-600">{label}</label>
                    <select id=id name=name class=FIELD>
                        <option value="">"any"</option>
                        {options.into_iter().map(|(value, text)| {
                            let selected = value == now;
                            view! { <option value=value selected=selected>{text}</option> }
                        }).collect_view()}
                    </select>
                </div>
            }
        };
    let RequestFilterChoices { outcomes, models, keys, members, accounts } = choices;
    let pair = |v: String| (v.clone(), v);
    let keys = keys
        .into_iter()
        .map(|k| (k.id.to_string(), if k.revoked { format!("{} (revoked)", k.name) } else { k.name }))
        .collect();
    view! {
        <form method="get" class="mb-4 flex flex-wrap items-end gap-3" aria-label="Filter requests">
            {select("f-outcome", "outcome", "Outcome", outcomes.into_iter().map(pair).collect())}
            {select("f-model", "model", "Model", models.into_iter().map(pair).collect())}
            {select("f-key", "key_id", "Key", keys)}
            {everyone.then(|| view! {
                {select("f-member", "user_id", "Member", members.into_iter().map(|m| (m.id.to_string(), m.username)).collect())}
                {select("f-account", "account_id", "Account", accounts.into_iter().map(|a| (a.id.to_string(), a.name)).collect())}
            })}
            <div>
                <label for="f-from" class="block text-xs font-medium text-slate-600">{move || format!("From ({})", zone.get())}</label>
                <LocalDateTimeInput id="f-from".to_owned() name="from" value=time("from") class=FIELD zone />
            </div>
            <div>
                <label for="f-until" class="block text-xs font-medium text-slate-600">{move || format!("Until ({})", zone.get())}</label>
                <LocalDateTimeInput id="f-until".to_owned() name="until" value=time("until") class=FIELD zone />
            </div>
            <div>
                <label for="f-request" class="block text-xs font-medium text-slate-600">"Request ID"</label>
                <input id="f-request" name="request_id" value=current("request_id") placeholder="req_…"
                    class=format!("{FIELD} font-mono") />
            </div>
            <button type="submit" class="rounded-md border border-slate-300 bg-white px-3 py-1.5 text-sm hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900">
                "Filter"
            </button>
            <a href="?" class="px-1 py-1.5 text-sm text-slate-600 underline-offset-2 hover:underline">"Clear"</a>
        </form>
    }
}

#[component]
fn RecordTable(
    records: Vec<RequestRecord>,
    everyone: bool,
    next: Option<String>,
    /// The first page with the same filters, when this is a later one.
    newest: Option<String>,
    filtered: bool,
) -> impl IntoView {
    let empty = records.is_empty();
    view! {
        <div class=if empty { "overflow-x-auto rounded-t-lg border border-slate-200 bg-white" } else { "overflow-x-auto rounded-lg border border-slate-200 bg-white" }>
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="requests-table">
                <thead class="bg-slate-50">
                    <tr>
                        {everyone.then(|| view! { <Th text="Member" /><Th text="Account" /> })}
                        {REQUEST_COLUMNS.iter().map(|c| view! { <Th text=c /> }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {records.into_iter().map(|r| view! { <RecordRow r everyone /> }.into_any()).collect_view()}
                </tbody>
            </table>
        </div>
        {empty.then(|| view! {
            <p class="rounded-b-lg border border-t-0 border-slate-200 bg-white px-4 py-10 text-center text-sm text-slate-500">
                {if filtered {
                    "No requests match these filters."
                } else {
                    "No requests recorded yet. Point a client at SubLane with one of your API keys and its calls appear here."
                }}
            </p>
        })}
        {(next.is_some() || newest.is_some()).then(|| view! {
            <div class="mt-3 flex justify-between text-sm text-slate-700">
                <span>{newest.map(|href| view! { <a href=href class="underline-offset-2 hover:underline">"← Newest requests"</a> })}</span>
                <span>{next.map(|href| view! { <a href=href class="underline-offset-2 hover:underline">"Older requests →"</a> })}</span>
            </div>
        })}
    }
}

#[component]
fn Th(text: &'static str) -> impl IntoView {
    view! { <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{text}</th> }
}

#[component]
fn RecordRow(r: RequestRecord, everyone: bool) -> impl IntoView {
    let hit = r.cache_hit_rate().map(|p| format!("{p:.1} %")).unwrap_or_else(|| "\u{2014}".into());
    let tokens =
        format!("{} / {} / {}", count(r.input_tokens), count(r.output_tokens), count(r.cached_tokens));
    let short_id = format!("{}…", r.request_id.chars().take(12).collect::<String>());
    let (badge, outcome_class) = outcome_style(&r.outcome, r.error_code.as_deref());
    let routing = r.routing.map(|d| d.short()).unwrap_or_else(|| "\u{2014}".into());
    let routing_words = r.routing.map(|d| d.describe()).unwrap_or_default();
    let detail = detail_href(&r.request_id, everyone);
    let copy_label = format!("Copy request ID {}", r.request_id);
    view! {
        <tr data-request-id=r.request_id.clone()>
            {everyone.then(|| view! {
                <td class="whitespace-nowrap px-3 py-2">{r.username.clone().unwrap_or_default()}</td>
                <td class="whitespace-nowrap px-3 py-2">{r.account_name.clone().unwrap_or_else(|| "\u{2014}".into())}</td>
            })}
            <td class="whitespace-nowrap px-3 py-2">
                <a href=detail class="text-slate-900 underline-offset-2 hover:underline focus-visible:outline-2 focus-visible:outline-slate-900" aria-label=format!("Details of {}", r.request_id)>
                    <Timestamp at=r.started_at />
                </a>
            </td>
            <td class="whitespace-nowrap px-3 py-2">
                <code class="font-mono text-xs" title=r.request_id.clone()>{short_id}</code>
                <CopyButton text=r.request_id.clone() label=copy_label />
            </td>
            <td class="whitespace-nowrap px-3 py-2">{r.model.clone()}</td>
            <td class="whitespace-nowrap px-3 py-2">{r.key_name.clone().unwrap_or_else(|| "\u{2014}".into())}</td>
            <td class="whitespace-nowrap px-3 py-2">
                <span class=format!("rounded px-2 py-0.5 text-xs font-medium {outcome_class}") title=r.error_code.clone().unwrap_or_default()>{badge}</span>
            </td>
            <td class="px-3 py-2 tabular-nums">{r.upstream_status.map(|s| s.to_string()).unwrap_or_else(|| "\u{2014}".into())}</td>
            <td class="whitespace-nowrap px-3 py-2 tabular-nums">{millis(Some(r.duration_ms))}</td>
            <td class="whitespace-nowrap px-3 py-2 tabular-nums">{millis(r.first_output_ms)}</td>
            <td class="whitespace-nowrap px-3 py-2 tabular-nums">{tokens}</td>
            <td class="whitespace-nowrap px-3 py-2 tabular-nums">{hit}</td>
            <td class="whitespace-nowrap px-3 py-2 text-xs text-slate-600" title=routing_words>{routing}</td>
        </tr>
    }
}

fn outcome_style(outcome: &str, code: Option<&str>) -> (String, &'static str) {
    let class = match outcome {
        "success" => "bg-emerald-100 text-emerald-800",
        "incomplete" | "cancelled" => "bg-amber-100 text-amber-800",
        "rejected" => "bg-slate-200 text-slate-700",
        _ => "bg-red-100 text-red-800",
    };
    let text = match code {
        Some(c) if outcome != "success" => format!("{outcome}: {c}"),
        _ => outcome.to_owned(),
    };
    (text, class)
}

fn count(v: Option<i64>) -> String {
    v.map(|n| n.to_string()).unwrap_or_else(|| "\u{2014}".into())
}

/// Where a record's detail page is.
fn detail_href(request_id: &str, everyone: bool) -> String {
    let base = if everyone { "/admin/requests" } else { "/requests" };
    format!("{base}/{}", query_value(request_id))
}

#[component]
pub fn RequestDetailPage() -> impl IntoView {
    view! { <RequestDetail everyone=false /> }
}

#[component]
pub fn AdminRequestDetailPage() -> impl IntoView {
    view! { <RequestDetail everyone=true /> }
}

/// UI-2 / API-3: one record with every field and the routing explanation in words.
#[component]
fn RequestDetail(everyone: bool) -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let record = Resource::new(id, move |id| request_detail(id, everyone));
    let back = if everyone { "/admin/requests" } else { "/" };
    view! {
        <Title text="Request" />
        <PageHeader title="Request" description="One model call: metadata only, never prompts or answers." />
        <p class="mb-4 text-sm"><a href=back class="text-slate-700 underline-offset-2 hover:underline">"← All requests"</a></p>
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match record.await {
                    Ok(r) => Either::Left(view! { <RecordFields r everyone /> }.into_any()),
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn RecordFields(r: RequestRecord, everyone: bool) -> impl IntoView {
    let dash = || "\u{2014}".to_owned();
    let hit = r.cache_hit_rate().map(|p| format!("{p:.1} %")).unwrap_or_else(dash);
    let (badge, outcome_class) = outcome_style(&r.outcome, r.error_code.as_deref());
    let routing = r
        .routing
        .map(|d| d.describe())
        .unwrap_or_else(|| "not routed (refused before an account was chosen)".into());
    let row = |term: &'static str, value: String| {
        view! {
            <div class="grid grid-cols-3 gap-4 px-4 py-2">
                <dt class="text-sm font-medium text-slate-600">{term}</dt>
                <dd class="col-span-2 text-sm text-slate-900">{value}</dd>
            </div>
        }
    };
    let copy_label = format!("Copy request ID {}", r.request_id);
    view! {
        <dl class="divide-y divide-slate-100 rounded-lg border border-slate-200 bg-white" data-testid="request-detail">
            <div class="grid grid-cols-3 gap-4 px-4 py-2">
                <dt class="text-sm font-medium text-slate-600">"Request ID"</dt>
                <dd class="col-span-2 text-sm"><code class="font-mono" data-testid="full-request-id">{r.request_id.clone()}</code>
                    <CopyButton text=r.request_id.clone() label=copy_label /></dd>
            </div>
            <div class="grid grid-cols-3 gap-4 px-4 py-2">
                <dt class="text-sm font-medium text-slate-600">"Started"</dt>
                <dd class="col-span-2 text-sm"><Timestamp at=r.started_at /></dd>
            </div>
            {row("Model", r.model.clone())}
            {row("Operation", r.operation.clone())}
            {row("Key", r.key_name.clone().unwrap_or_else(dash))}
            {everyone.then(|| view! {
                {row("Member", r.username.clone().unwrap_or_else(dash))}
                {row("Account", r.account_name.clone().unwrap_or_else(dash))}
                {row("Provider", r.provider.clone().unwrap_or_else(dash))}
            })}
            <div class="grid grid-cols-3 gap-4 px-4 py-2">
                <dt class="text-sm font-medium text-slate-600">"Outcome"</dt>
                <dd class="col-span-2 text-sm"><span class=format!("rounded px-2 py-0.5 text-xs font-medium {outcome_class}")>{badge}</span></dd>
            </div>
            {row("Upstream status", r.upstream_status.map(|s| s.to_string()).unwrap_or_else(dash))}
            {row("Duration", millis(Some(r.duration_ms)))}
            {row("First output", millis(r.first_output_ms))}
            {row("Tokens in", count(r.input_tokens))}
            {row("Tokens out", count(r.output_tokens))}
            {row("Tokens cached", count(r.cached_tokens))}
            {row("Cache hit", hit)}
            <div class="grid grid-cols-3 gap-4 px-4 py-2">
                <dt class="text-sm font-medium text-slate-600">"Routing"</dt>
                <dd class="col-span-2 text-sm" data-testid="routing-words">{routing}</dd>
            </div>
        </dl>
    }
}
