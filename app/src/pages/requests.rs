//! General -> Requests (UI-1): the member's own request records.
//!
//! Records are written by the proxy; until it is in place the table shows its columns and an
//! empty state. It renders completely on the server so it reads without JavaScript.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::components::PageHeader;

/// Column headings of the request tables (UI-1).
pub const REQUEST_COLUMNS: [&str; 10] = [
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
];

#[component]
pub fn RequestsPage() -> impl IntoView {
    view! {
        <Title text="Requests" />
        <PageHeader title="Requests" description="Your model calls through SubLane: metadata only, never prompts or answers." />
        <RequestTable />
    }
}

/// The request table with its empty state; shared with Admin -> All requests.
#[component]
pub fn RequestTable() -> impl IntoView {
    view! {
        <div class="overflow-x-auto rounded-t-lg border border-slate-200 bg-white">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="requests-table">
                <thead class="bg-slate-50">
                    <tr>
                        {REQUEST_COLUMNS.iter().map(|c| view! {
                            <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{*c}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody></tbody>
            </table>
        </div>
        <p class="rounded-b-lg border border-t-0 border-slate-200 bg-white px-4 py-10 text-center text-sm text-slate-500">
            "No requests recorded yet. Point a client at SubLane with one of your API keys and its calls appear here."
        </p>
    }
}
