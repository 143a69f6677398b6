//! Your account (issue 12, self-service): every member changes their own password, proving the
//! current one, and may sign out their other sessions. A plain form posting to a server
//! function, so it works without JavaScript too.

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{ErrorNote, PageHeader},
    rpc::ChangePassword,
};

const FIELD: &str = "mt-1 block w-72 rounded-md border border-slate-300 bg-white px-2 py-1.5 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";

#[component]
pub fn AccountPage() -> impl IntoView {
    let change = ServerAction::<ChangePassword>::new();
    view! {
        <Title text="Your account" />
        <PageHeader title="Your account" description="Change your password. This session stays signed in." />
        <div class="mb-4" aria-live="polite">
            {move || change.value().get().map(|r| match r {
                Ok(()) => Either::Left(view! {
                    <p role="status" class="rounded-md border border-emerald-200 bg-emerald-50 px-3 py-2 text-sm text-emerald-900">"Your password was changed."</p>
                }),
                Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
            })}
        </div>
        <section aria-label="Change password" class="rounded-lg border border-slate-200 bg-white p-5">
            <ActionForm action=change>
                <div class="space-y-3">
                    <label class="block text-sm font-medium text-slate-700">"Current password"
                        <input type="password" name="current_password" required autocomplete="current-password" class=FIELD />
                    </label>
                    <label class="block text-sm font-medium text-slate-700">"New password"
                        <input type="password" name="new_password" required minlength="8" autocomplete="new-password" class=FIELD />
                    </label>
                    <label class="block text-sm font-medium text-slate-700">"New password again"
                        <input type="password" name="confirm_password" required minlength="8" autocomplete="new-password" class=FIELD />
                    </label>
                    <label class="inline-flex items-center gap-2 text-sm text-slate-700">
                        <input type="checkbox" name="sign_out_others" value="on" checked />
                        "Sign out my other sessions"
                    </label>
                </div>
                <button type="submit" class="mt-4 rounded-md bg-slate-900 px-3 py-1.5 text-sm font-medium text-white hover:bg-slate-700 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60"
                    disabled=move || change.pending().get()>
                    "Change password"
                </button>
            </ActionForm>
        </section>
    }
}
