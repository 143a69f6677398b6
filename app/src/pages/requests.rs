//! General -> Requests and Admin -> All requests (UI-1): request records, newest first, 50 per
//! page, with outcome and model filters (REC-4). Filters and paging are plain GET links, so the
//! pages work without JavaScript; hydrated, they navigate in place.

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::{
    components::{ErrorNote, PageHeader, Timestamp},
    model::{RequestFilter, RequestRecord},
    rpc::list_requests,
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

const OUTCOMES: [&str; 5] = ["success", "incomplete", "error", "cancelled", "rejected"];

#[component]
pub fn RequestsPage() -> impl IntoView {
    view! {
        <Title text="Requests" />
        <PageHeader title="Requests" description="Your model calls through SubLane: metadata only, never prompts or answers." />
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

#[component]
fn RequestHistory(everyone: bool) -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        let q = query.read();
        let text = |k: &str| q.get(k).filter(|v| !v.trim().is_empty());
        RequestFilter {
            cursor: q.get("cursor").and_then(|c| c.parse().ok()),
            outcome: text("outcome"),
            model: text("model"),
            request_id: text("request_id"),
            ..Default::default()
        }
    };
    let page = Resource::new(filter, move |f| list_requests(f, everyone));
    view! {
        <Filters />
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading requests…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(page) => {
                        let next = page.next_cursor.map(|c| {
                            let q = query.read_untracked();
                            let mut href = format!("?cursor={c}");
                            for k in ["outcome", "model", "request_id"] {
                                if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
                                    href.push_str(&format!("&{k}={}", v.replace('&', "%26")));
                                }
                            }
                            href
                        });
                        Either::Left(view! { <RecordTable records=page.items everyone next /> })
                    }
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn Filters() -> impl IntoView {
    let query = use_query_map();
    let current = move |k: &str| query.read_untracked().get(k).unwrap_or_default();
    view! {
        <form method="get" class="mb-4 flex flex-wrap items-end gap-3" aria-label="Filter requests">
            <div>
                <label for="f-outcome" class="block text-xs font-medium text-slate-600">"Outcome"</label>
                <select id="f-outcome" name="outcome" class="mt-1 rounded-md border border-slate-300 bg-white px-2 py-1.5 text-sm">
                    <option value="">"any"</option>
                    {OUTCOMES.iter().map(|o| view! { <option value=*o selected=current("outcome") == *o>{*o}</option> }).collect_view()}
                </select>
            </div>
            <div>
                <label for="f-model" class="block text-xs font-medium text-slate-600">"Model"</label>
                <input id="f-model" name="model" value=current("model") placeholder="exact model id"
                    class="mt-1 rounded-md border border-slate-300 bg-white px-2 py-1.5 text-sm" />
            </div>
            <div>
                <label for="f-request" class="block text-xs font-medium text-slate-600">"Request ID"</label>
                <input id="f-request" name="request_id" value=current("request_id") placeholder="req_…"
                    class="mt-1 rounded-md border border-slate-300 bg-white px-2 py-1.5 font-mono text-sm" />
            </div>
            <button type="submit" class="rounded-md border border-slate-300 bg-white px-3 py-1.5 text-sm hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900">
                "Filter"
            </button>
        </form>
    }
}

#[component]
fn RecordTable(records: Vec<RequestRecord>, everyone: bool, next: Option<String>) -> impl IntoView {
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
                    {records.into_iter().map(|r| view! { <RecordRow r everyone /> }).collect_view()}
                </tbody>
            </table>
        </div>
        {empty.then(|| view! {
            <p class="rounded-b-lg border border-t-0 border-slate-200 bg-white px-4 py-10 text-center text-sm text-slate-500">
                "No requests recorded yet. Point a client at SubLane with one of your API keys and its calls appear here."
            </p>
        })}
        {next.map(|href| view! {
            <div class="mt-3 text-right">
                <a href=href class="text-sm text-slate-700 underline-offset-2 hover:underline">"Older requests →"</a>
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
    let routing = r.routing.map(|d| d.describe()).unwrap_or_else(|| "\u{2014}".into());
    view! {
        <tr data-request-id=r.request_id.clone()>
            {everyone.then(|| view! {
                <td class="whitespace-nowrap px-3 py-2">{r.username.clone().unwrap_or_default()}</td>
                <td class="whitespace-nowrap px-3 py-2">{r.account_name.clone().unwrap_or_else(|| "\u{2014}".into())}</td>
            })}
            <td class="whitespace-nowrap px-3 py-2"><Timestamp at=r.started_at /></td>
            <td class="whitespace-nowrap px-3 py-2"><code class="font-mono text-xs" title=r.request_id.clone()>{short_id}</code></td>
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
            <td class="px-3 py-2 text-xs text-slate-600">{routing}</td>
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

fn millis(v: Option<i64>) -> String {
    match v {
        None => "\u{2014}".into(),
        Some(ms) if ms >= 1000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{ms} ms"),
    }
}
