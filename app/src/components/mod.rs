//! Building blocks shared by the pages.

pub mod chart;
mod copy;
pub mod format;
mod shell;
pub mod style;
mod time;

pub use copy::CopyButton;
pub use shell::{Me, Shell};
pub use time::{LocalDateTimeInput, TimeOrNever, Timestamp};

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

/// The message of a failed form submission when it is about `field`, shown beside that field and
/// announced to screen readers. The element is always there (empty without an error), so an
/// input's `aria-describedby` pointing at `id` never dangles.
#[component]
pub fn FieldError<T: Clone + Send + Sync + 'static>(
    result: Signal<Option<Result<T, crate::error::AppError>>>,
    field: &'static str,
    id: String,
) -> impl IntoView {
    let message = move || result.get().and_then(|r| r.err()).and_then(|e| e.for_field(field));
    view! {
        <p id=id role="alert" class="mt-1 text-xs text-red-700 empty:hidden" data-field-error=field>
            {message}
        </p>
    }
}

/// A form's error that is not about one of the fields it shows beside them.
#[component]
pub fn FormError<T: Clone + Send + Sync + 'static>(
    result: Signal<Option<Result<T, crate::error::AppError>>>,
    /// The fields that show their own errors.
    fields: &'static [&'static str],
) -> impl IntoView {
    move || {
        result
            .get()
            .and_then(|r| r.err())
            .filter(|e| !e.field.as_deref().is_some_and(|f| fields.contains(&f)))
            .map(|e| view! { <div class="mt-2"><ErrorNote message=e.message /></div> })
    }
}

/// A row action's refusal that no row was aimed at: a form posted without JavaScript, whose
/// answer is a redirect back to the page with the error in its URL but not the row (the row is
/// set by a click handler). Shown once above the rows, so it is not lost.
#[component]
pub fn UnaimedError<T: Clone + Send + Sync + 'static>(
    result: Signal<Option<Result<T, crate::error::AppError>>>,
    row: Signal<Option<i64>>,
) -> impl IntoView {
    move || {
        row.get()
            .is_none()
            .then(|| result.get())
            .flatten()
            .and_then(|r| r.err())
            .map(|e| view! { <div class="mb-3"><ErrorNote message=e.message /></div> })
    }
}

/// A destructive action behind a second step that works without JavaScript: `summary` opens a
/// panel that says what will happen (`children`, holding the confirming form).
#[component]
pub fn Confirm(summary: String, children: Children) -> impl IntoView {
    view! {
        <details class="inline-block align-top">
            <summary class=style::SUMMARY>{summary}</summary>
            <div role="group" class="mt-2 max-w-sm rounded-md border border-red-200 bg-red-50 p-3 text-left text-xs text-red-900">
                {children()}
            </div>
        </details>
    }
}

/// Counts an action's successful answers, for the lists it changes to reload on. Reloading on
/// a refusal too would redraw the form from the server and lose what was typed beside the error.
pub fn successes<A>(action: ServerAction<A>) -> ReadSignal<u32>
where
    A: leptos::server_fn::ServerFn<Error = crate::error::AppError> + Clone + Send + Sync + 'static,
    A::Output: Clone + Send + Sync + 'static,
{
    let (count, set_count) = signal(0u32);
    Effect::new(move |_| {
        if matches!(action.value().get(), Some(Ok(_))) {
            set_count.update(|n| *n += 1);
        }
    });
    count
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
