//! Building blocks shared by the pages.

mod copy;
mod shell;
mod time;

pub use copy::CopyButton;
pub use shell::Shell;
pub use time::Timestamp;

use leptos::prelude::*;

/// A page heading with an optional one-line description.
#[component]
pub fn PageHeader(title: &'static str, #[prop(optional)] description: &'static str) -> impl IntoView {
    view! {
        <header class="mb-6">
            <h1 class="text-2xl font-semibold tracking-tight">{title}</h1>
            {(!description.is_empty()).then(|| view! { <p class="mt-1 text-sm text-slate-600">{description}</p> })}
        </header>
    }
}

/// A friendly note for pages whose feature arrives in a later release.
#[component]
pub fn ComingSoon(children: Children) -> impl IntoView {
    view! {
        <div class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">
            {children()}
        </div>
    }
}

/// An error message from a server function, announced to screen readers.
#[component]
pub fn ErrorNote(message: String) -> impl IntoView {
    view! {
        <p role="alert" class="rounded-md border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-800">
            {message}
        </p>
    }
}
