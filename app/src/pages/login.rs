//! Sign-in page (ID-2). A plain form that posts to the `login` server function, so it works
//! before hydration and without JavaScript; the server sets the session cookie and redirects.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{components::ErrorNote, rpc::Login};

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let error =
        move || login.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> });
    view! {
        <Title text="Sign in" />
        <main class="flex min-h-screen items-center justify-center px-4">
            <div class="w-full max-w-sm rounded-xl border border-slate-200 bg-white p-8 shadow-sm">
                <h1 class="text-xl font-semibold tracking-tight">"Sign in to SubLane"</h1>
                <p class="mt-1 mb-6 text-sm text-slate-600">"Use the account your workspace admin gave you."</p>
                <ActionForm action=login>
                    <div class="space-y-4">
                        <div>
                            <label for="username" class="block text-sm font-medium">"Username"</label>
                            <input id="username" name="username" type="text" autocomplete="username" required
                                class="mt-1 block w-full rounded-md border border-slate-300 px-3 py-2 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900" />
                        </div>
                        <div>
                            <label for="password" class="block text-sm font-medium">"Password"</label>
                            <input id="password" name="password" type="password" autocomplete="current-password" required
                                class="mt-1 block w-full rounded-md border border-slate-300 px-3 py-2 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900" />
                        </div>
                        {error}
                        <button type="submit" disabled=move || login.pending().get()
                            class="w-full rounded-md bg-slate-900 px-3 py-2 text-sm font-medium text-white hover:bg-slate-700 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60">
                            "Sign in"
                        </button>
                    </div>
                </ActionForm>
            </div>
        </main>
    }
}
