//! General -> Usage (a member's own) and Admin -> Usage (everyone's, by member, key, pool,
//! account or model) (BEY-1): the last 7, 30 or 90 days from the daily summaries, which outlive
//! the 7-day request records. Four charts answer at a glance how much was used, of which model,
//! and whether errors are rising; the table under them holds the same numbers per day and model,
//! and downloads as CSV. Filters are a plain GET form, so the page works without JavaScript.

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::{
    components::{
        ErrorNote, PageHeader,
        chart::{Bar, RankedBars, RateLine, Series, StackedBars, compact},
        format::{millis, query_value},
    },
    model::{USAGE_PERIODS, UsageChoices, UsageFilter, UsageReport, UsageTotals},
    rpc::get_usage,
};

const FIELD: &str = "mt-1 rounded-md border border-slate-300 bg-white px-2 py-1.5 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";

#[component]
pub fn UsagePage() -> impl IntoView {
    view! {
        <Title text="Usage" />
        <PageHeader title="Usage" description="Your calls through SubLane per day: requests, tokens and errors, kept 90 days." />
        <Usage everyone=false />
    }
}

#[component]
pub fn AdminUsagePage() -> impl IntoView {
    view! {
        <Title text="Workspace usage" />
        <PageHeader title="Workspace usage" description="Everyone's calls per day, by member, key, pool, account and model, kept 90 days." />
        <Usage everyone=true />
    }
}

#[component]
fn Usage(everyone: bool) -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        let q = query.read();
        let text = |k: &str| q.get(k).filter(|v| !v.trim().is_empty());
        let id = |k: &str| text(k).and_then(|v| v.trim().parse::<i64>().ok());
        UsageFilter {
            days: text("days").and_then(|v| v.trim().parse().ok()),
            user_id: if everyone { id("user_id") } else { None },
            key_id: id("key_id"),
            pool_id: id("pool_id"),
            account_id: if everyone { id("account_id") } else { None },
            model: text("model"),
        }
    };
    let report = Resource::new(filter, move |f| get_usage(f, everyone));
    view! {
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading usage…"</p> }>
            {move || Suspend::new(async move {
                match report.await {
                    Ok(report) => Either::Left(view! { <Report report filter=filter() everyone /> }),
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

/// `?k=v&…` of the filters the page shows (for the CSV link: the same rows, whatever else the
/// address holds).
fn csv_query(f: &UsageFilter) -> String {
    let id = |k: &str, v: Option<i64>| v.map(|v| format!("{k}={v}"));
    let pairs: Vec<String> = [
        Some(format!("days={}", f.period())),
        id("user_id", f.user_id),
        id("key_id", f.key_id),
        id("pool_id", f.pool_id),
        id("account_id", f.account_id),
        f.model.as_ref().map(|m| format!("model={}", query_value(m))),
    ]
    .into_iter()
    .flatten()
    .collect();
    format!("?{}", pairs.join("&"))
}

fn number(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn percent(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// Day labels on the axis: `MM-DD`.
fn short_day(day: &str) -> String {
    day.get(5..).unwrap_or(day).to_owned()
}

fn describe_requests(day: &str, t: &UsageTotals) -> String {
    format!(
        "{day}: {} requests, {} succeeded, {} failed, {} cancelled",
        number(t.requests),
        number(t.succeeded),
        number(t.failed()),
        number(t.cancelled)
    )
}

fn describe_tokens(day: &str, t: &UsageTotals) -> String {
    format!(
        "{day}: {} input tokens ({} cached), {} output tokens",
        number(t.input_tokens),
        number(t.cached_tokens),
        number(t.output_tokens)
    )
}

#[component]
fn Report(report: UsageReport, filter: UsageFilter, everyone: bool) -> impl IntoView {
    let UsageReport { zone, days, series, by_model, rows, truncated, totals, choices } = report;
    let csv = format!("/api/{}usage.csv{}", if everyone { "" } else { "me/" }, csv_query(&filter));
    let first = series.first().map(|d| d.day.clone()).unwrap_or_default();
    let last = series.last().map(|d| d.day.clone()).unwrap_or_default();
    let busiest = series.iter().max_by_key(|d| d.totals.requests).filter(|d| d.totals.requests > 0);
    let requests_summary = format!(
        "Requests per day from {first} to {last}: {} in all{}.",
        number(totals.requests),
        busiest.map(|d| format!(", most on {} ({})", d.day, number(d.totals.requests))).unwrap_or_default()
    );
    let request_bars = series
        .iter()
        .map(|d| Bar {
            label: short_day(&d.day),
            values: vec![d.totals.succeeded as f64, d.totals.failed() as f64, d.totals.cancelled as f64],
            describe: describe_requests(&d.day, &d.totals),
        })
        .collect();
    let tokens_summary = format!(
        "Tokens per day from {first} to {last}: {} input ({} of them cached) and {} output in all.",
        number(totals.input_tokens),
        number(totals.cached_tokens),
        number(totals.output_tokens)
    );
    let token_bars = series
        .iter()
        .map(|d| Bar {
            label: short_day(&d.day),
            values: vec![
                (d.totals.input_tokens - d.totals.cached_tokens).max(0) as f64,
                d.totals.cached_tokens as f64,
                d.totals.output_tokens as f64,
            ],
            describe: describe_tokens(&d.day, &d.totals),
        })
        .collect();
    let worst = series
        .iter()
        .filter(|d| d.totals.requests > 0)
        .max_by(|a, b| a.totals.error_rate().total_cmp(&b.totals.error_rate()));
    let rate_summary = format!(
        "Share of failed requests per day (errors, cut-off answers and refusals): {} over the period{}.",
        percent(totals.error_rate()),
        worst
            .filter(|d| d.totals.failed() > 0)
            .map(|d| format!(", highest on {} ({})", d.day, percent(d.totals.error_rate())))
            .unwrap_or_default()
    );
    let rate_points = series
        .iter()
        .map(|d| {
            let t = &d.totals;
            if t.requests == 0 {
                return (short_day(&d.day), None, format!("{}: no requests", d.day));
            }
            let describe = format!(
                "{}: {} failed of {} requests ({})",
                d.day,
                number(t.failed()),
                number(t.requests),
                percent(t.error_rate())
            );
            (short_day(&d.day), Some(t.error_rate()), describe)
        })
        .collect();
    let model_summary = match by_model.first() {
        Some(m) => format!(
            "Requests by model over the period: {} models; {} the most used with {}.",
            by_model.len(),
            m.model,
            number(m.totals.requests)
        ),
        None => "No requests in this period.".to_owned(),
    };
    let model_rows = by_model
        .iter()
        .map(|m| {
            let t = &m.totals;
            let describe = format!(
                "{}: {} requests, {} input and {} output tokens, {} failed",
                m.model,
                number(t.requests),
                number(t.input_tokens),
                number(t.output_tokens),
                percent(t.error_rate())
            );
            (m.model.clone(), t.requests as f64, number(t.requests), describe)
        })
        .collect();
    let empty = totals.requests == 0;
    view! {
        <Filters choices everyone days />
        <p class="mb-4 text-xs text-slate-500">
            {format!("{first} to {last}, days in {zone}. ")}
            <a href=csv download="" class="font-medium text-slate-700 underline underline-offset-2 hover:text-slate-900" data-testid="usage-csv">
                "Download CSV"
            </a>
        </p>
        <dl class="mb-6 grid grid-cols-2 gap-3 md:grid-cols-5" data-testid="usage-totals">
            <Stat label="Requests" value=number(totals.requests) />
            <Stat label="Input tokens" value=number(totals.input_tokens) />
            <Stat label="Cached input tokens" value=number(totals.cached_tokens) />
            <Stat label="Output tokens" value=number(totals.output_tokens) />
            <Stat label="Failed" value=percent(totals.error_rate()) />
        </dl>
        {empty.then(|| view! {
            <p class="mb-6 rounded-lg border border-slate-200 bg-white px-4 py-6 text-center text-sm text-slate-500">
                "No calls in this period. Calls made with your API keys are summed here per day."
            </p>
        })}
        <div class="mb-6 grid gap-4 lg:grid-cols-2">
            <StackedBars id="usage-requests" title="Requests per day" summary=requests_summary
                series=vec![
                    Series { name: "Succeeded", fill: "fill-slate-700" },
                    Series { name: "Failed", fill: "fill-rose-600" },
                    Series { name: "Cancelled", fill: "fill-slate-300" },
                ]
                bars=request_bars format=compact />
            <StackedBars id="usage-tokens" title="Tokens per day" summary=tokens_summary
                series=vec![
                    Series { name: "Input, not cached", fill: "fill-sky-700" },
                    Series { name: "Cached input", fill: "fill-sky-300" },
                    Series { name: "Output", fill: "fill-amber-500" },
                ]
                bars=token_bars format=compact />
            <RateLine id="usage-errors" title="Error rate per day" summary=rate_summary points=rate_points />
            <RankedBars id="usage-models" title="Requests by model" summary=model_summary rows=model_rows />
        </div>
        {truncated.then(|| view! {
            <p class="mb-2 text-xs text-slate-600" role="note">
                {format!("The table shows the newest {} rows of days and models; the charts and totals count every call. Narrow the filters to see the rest.", rows.len())}
            </p>
        })}
        <UsageTable rows />
    }
}

#[component]
fn Stat(label: &'static str, value: String) -> impl IntoView {
    view! {
        <div class="rounded-lg border border-slate-200 bg-white px-4 py-3">
            <dt class="text-xs text-slate-500">{label}</dt>
            <dd class="mt-1 text-lg font-semibold tabular-nums">{value}</dd>
        </div>
    }
}

/// The table's columns: the CSV's, in words.
pub const USAGE_COLUMNS: [&str; 13] = [
    "Day",
    "Model",
    "Requests",
    "Succeeded",
    "Incomplete",
    "Errors",
    "Cancelled",
    "Rejected",
    "Input tokens",
    "Output tokens",
    "Cached tokens",
    "Mean duration",
    "Mean first output",
];

#[component]
fn UsageTable(rows: Vec<crate::model::UsageRow>) -> impl IntoView {
    view! {
        <div class="overflow-x-auto rounded-lg border border-slate-200 bg-white">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="usage-table">
                <caption class="sr-only">"Usage per day and model"</caption>
                <thead class="bg-slate-50">
                    <tr>
                        {USAGE_COLUMNS.iter().map(|c| view! {
                            <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{*c}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {rows.into_iter().map(|r| {
                        let t = r.totals;
                        let cells = [
                            t.requests, t.succeeded, t.incomplete, t.errors, t.cancelled, t.rejected,
                            t.input_tokens, t.output_tokens, t.cached_tokens,
                        ];
                        view! {
                            <tr>
                                <td class="whitespace-nowrap px-3 py-2">{r.day}</td>
                                <td class="whitespace-nowrap px-3 py-2 font-mono text-xs">{r.model}</td>
                                {cells.into_iter().map(|n| view! {
                                    <td class="whitespace-nowrap px-3 py-2 text-right tabular-nums">{number(n)}</td>
                                }).collect_view()}
                                <td class="whitespace-nowrap px-3 py-2 text-right tabular-nums">{millis(t.mean_duration_ms())}</td>
                                <td class="whitespace-nowrap px-3 py-2 text-right tabular-nums">{millis(t.mean_first_output_ms())}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn Filters(choices: UsageChoices, everyone: bool, days: u32) -> impl IntoView {
    let query = use_query_map();
    let current = move |k: &str| query.read_untracked().get(k).unwrap_or_default();
    let select = move |id: &'static str,
                       name: &'static str,
                       label: &'static str,
                       any: &'static str,
                       options: Vec<(String, String)>| {
        let now = current(name);
        view! {
            <div>
                <label for=id class="block text-xs font-medium text-slate-600">{label}</label>
                <select id=id name=name class=FIELD>
                    {(!any.is_empty()).then(|| view! { <option value="">{any}</option> })}
                    {options.into_iter().map(|(value, text)| {
                        let selected = value == now;
                        view! { <option value=value selected=selected>{text}</option> }
                    }).collect_view()}
                </select>
            </div>
        }
    };
    let UsageChoices { models, keys, pools, members, accounts } = choices;
    let periods = USAGE_PERIODS.iter().map(|d| (d.to_string(), format!("Last {d} days"))).collect::<Vec<_>>();
    let keys = keys
        .into_iter()
        .map(|k| (k.id.to_string(), if k.revoked { format!("{} (revoked)", k.name) } else { k.name }))
        .collect();
    let period_now = days.to_string();
    view! {
        <form method="get" class="mb-3 flex flex-wrap items-end gap-3" aria-label="Filter usage">
            <div>
                <label for="u-days" class="block text-xs font-medium text-slate-600">"Period"</label>
                <select id="u-days" name="days" class=FIELD>
                    {periods.into_iter().map(|(value, text)| {
                        let selected = value == period_now;
                        view! { <option value=value selected=selected>{text}</option> }
                    }).collect_view()}
                </select>
            </div>
            {everyone.then(|| select("u-member", "user_id", "Member", "any", members.into_iter().map(|m| (m.id.to_string(), m.username)).collect()))}
            {select("u-key", "key_id", "Key", "any", keys)}
            {select("u-pool", "pool_id", "Pool", "any", pools.into_iter().map(|p| (p.id.to_string(), p.name)).collect())}
            {everyone.then(|| select("u-account", "account_id", "Account", "any", accounts.into_iter().map(|a| (a.id.to_string(), a.name)).collect()))}
            {select("u-model", "model", "Model", "any", models.into_iter().map(|m| (m.clone(), m)).collect())}
            <button type="submit" class="rounded-md border border-slate-300 bg-white px-3 py-1.5 text-sm hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900">
                "Show"
            </button>
            <a href="?" class="px-1 py-1.5 text-sm text-slate-600 underline-offset-2 hover:underline">"Clear"</a>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_for_reading() {
        assert_eq!(number(0), "0");
        assert_eq!(number(999), "999");
        assert_eq!(number(1_000), "1,000");
        assert_eq!(number(-1_234_567), "-1,234,567");
        assert_eq!(short_day("2026-11-30"), "11-30");
    }
}
