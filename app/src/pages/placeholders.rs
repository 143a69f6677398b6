//! The page for addresses that name no page.

use leptos::prelude::*;
use leptos_meta::Title;

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
