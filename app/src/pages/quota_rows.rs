//! An account's quota rows with pace bars (UI-3, PACE-1, PACE-2): per window a bar of the share
//! used, a marker where even use would be at the observation time, the pace in words, when the
//! window resets (viewer's time zone once hydrated) and how old the observation is, and a note
//! that opens without JavaScript (`<details>`). Colour is never the only signal: every state is
//! also written out.

use chrono::{DateTime, Utc};
use leptos::{either::Either, prelude::*};

use crate::{
    components::Timestamp,
    model::{Pace, QuotaKind, QuotaRow},
};

fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).unwrap_or_default()
}

/// "observed just now", "observed 4 min ago", "observed 3 h ago".
fn age(secs: i64) -> String {
    match secs {
        ..60 => "observed just now".to_owned(),
        60..3600 => format!("observed {} min ago", secs / 60),
        _ => format!("observed {} h ago", secs / 3600),
    }
}

/// `observed`: the account's provider reports a subscription quota (API-key accounts do not).
#[component]
pub fn QuotaRows(rows: Vec<QuotaRow>, name: String, observed: bool) -> impl IntoView {
    if rows.is_empty() {
        return Either::Left(observed.then(|| view! {
            <p class="mt-3 text-xs text-slate-500" data-testid="quota-none">"Quota: nothing observed yet."</p>
        }));
    }
    Either::Right(view! {
        <section class="mt-3" aria-label=format!("Quota of {name}") data-testid="quota">
            <h3 class="text-xs font-semibold uppercase tracking-wide text-slate-500">"Quota"</h3>
            <ul class="mt-1 space-y-2">
                {rows.into_iter().map(|r| view! { <QuotaLine row=r /> }.into_any()).collect_view()}
            </ul>
            <details class="mt-2 text-xs text-slate-600" data-testid="pace-note">
                <summary class="cursor-pointer select-none font-medium text-slate-700 focus-visible:outline-2 focus-visible:outline-slate-900">
                    "What does pace mean?"
                </summary>
                <p class="mt-1">
                    "Pace compares the share of a window already used with the share of its time already gone, "
                    "both at the moment the quota was observed: +20 points means 20 percentage points more used "
                    "than an even pace would have used by then. It is informational, not a forecast of when the "
                    "quota runs out, and it changes no admission or scheduling. Providers may roll or reset "
                    "windows early. Pace is hidden when the observation is stale, the last read failed, the "
                    "window has reset since, or its length or reset time is unknown."
                </p>
            </details>
        </section>
    })
}

#[component]
fn QuotaLine(row: QuotaRow) -> impl IntoView {
    let r = row;
    let used = r.used_percent.map(|u| u.clamp(0.0, 100.0));
    let pace_words = r.pace.describe();
    let marker = match r.pace {
        Pace::Shown { elapsed_percent, .. } => Some(elapsed_percent.clamp(0.0, 100.0)),
        Pace::Hidden { .. } => None,
    };
    let ahead = matches!(r.pace, Pace::Shown { points, .. } if points >= 0.5);
    let fill = if r.exhausted {
        "bg-red-600"
    } else if ahead {
        "bg-amber-500"
    } else {
        "bg-emerald-600"
    };
    let used_text = used.map_or_else(|| "usage unknown".to_owned(), |u| format!("{u:.0} % used"));
    let meter_label = format!("{}: {used_text}", r.label);
    view! {
        <li data-testid="quota-row" data-label=r.label.clone()>
            <div class="flex flex-wrap items-baseline justify-between gap-x-2 text-xs">
                <span class="font-medium text-slate-800">
                    {r.label.clone()}
                    {(r.kind == QuotaKind::Extra).then_some(view! { <span class="ml-1 font-normal text-slate-500">"(extra limit)"</span> })}
                </span>
                <span class="text-slate-700">
                    {used_text.clone()}
                    {r.exhausted.then_some(view! { <strong class="ml-1 text-red-800">"· spent"</strong> })}
                </span>
            </div>
            <div
                class="relative mt-0.5 h-2 w-full overflow-hidden rounded bg-slate-200"
                role="meter"
                aria-label=meter_label
                aria-valuemin="0"
                aria-valuemax="100"
                aria-valuenow=used.map(|u| format!("{u:.0}"))
                aria-valuetext=format!("{used_text}; {pace_words}")
            >
                {used.map(|u| view! { <div class=format!("h-full {fill}") style=format!("width: {u:.1}%")></div> })}
                {marker.map(|m| view! {
                    <div
                        class="absolute inset-y-0 w-0.5 bg-slate-900"
                        style=format!("left: calc({m:.1}% - 1px)")
                        title="even pace at the observation"
                        data-testid="pace-marker"
                    ></div>
                })}
            </div>
            <p class="mt-0.5 text-xs text-slate-600">
                <span data-testid="pace">{pace_words}</span>
                {r.resets_at.map(|t| view! { " · resets " <Timestamp at=at(t) /> })}
                " · "{age(r.age_secs)}
            </p>
        </li>
    }
}
