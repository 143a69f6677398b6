//! A button that copies a text (a request id) to the clipboard once hydrated, and says so. The
//! text itself is always on the page, so without JavaScript it can still be selected by hand.

use leptos::prelude::*;

#[component]
pub fn CopyButton(text: String, #[prop(into)] label: String) -> impl IntoView {
    let copied = RwSignal::new(false);
    let on_click = move |_| {
        #[cfg(feature = "hydrate")]
        {
            if let Some(window) = web_sys::window() {
                let _ = window.navigator().clipboard().write_text(&text);
                copied.set(true);
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &text;
    };
    view! {
        <button
            type="button"
            class="ml-1 rounded border border-slate-300 bg-white px-1.5 py-0.5 text-xs text-slate-700 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900"
            aria-label=label
            on:click=on_click
        >
            {move || if copied.get() { "Copied" } else { "Copy" }}
        </button>
        <span class="sr-only" aria-live="polite">{move || copied.get().then_some("Copied to the clipboard")}</span>
    }
}
