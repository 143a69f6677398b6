//! Pages whose features arrive with later work; each says what is coming.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::components::{ComingSoon, PageHeader};

#[component]
pub fn MembersPage() -> impl IntoView {
    view! {
        <Title text="Members" />
        <PageHeader title="Members" description="People in this workspace, their roles and limits." />
        <ComingSoon>
            "Member management in the browser is on its way. Until then use "<code>"GET/POST /api/members"</code>
            " and "<code>"PATCH /api/members/{id}"</code>"."
        </ComingSoon>
    }
}

#[component]
pub fn PoolsPage() -> impl IntoView {
    view! {
        <Title text="Pools" />
        <PageHeader title="Pools" description="Resource groups: which accounts serve which members and models." />
        <ComingSoon>
            "Pool editing in the browser is on its way. Until then use "<code>"GET/POST /api/pools"</code>
            " and "<code>"PATCH /api/pools/{id}"</code>"."
        </ComingSoon>
    }
}

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
        resp.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <Title text="Not found" />
        <main class="mx-auto max-w-md px-4 py-24 text-center">
            <h1 class="text-2xl font-semibold">"Page not found"</h1>
            <p class="mt-2 text-slate-600"><a class="underline" href="/">"Back to SubLane"</a></p>
        </main>
    }
}
