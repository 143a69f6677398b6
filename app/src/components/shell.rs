//! The signed-in frame: header, navigation by role, and the page outlet.
//!
//! It loads the current member once; a visitor without a session is redirected to `/login`
//! (on the server as an HTTP redirect, in the browser as a navigation).

use leptos::{either::EitherOf3, prelude::*};
use leptos_router::components::{A, Outlet, Redirect};

use crate::{
    model::MemberView,
    rpc::{Logout, get_me},
};

#[component]
pub fn Shell() -> impl IntoView {
    let me = Resource::new(|| (), |_| get_me());
    view! {
        <Suspense fallback=|| view! { <p class="p-6 text-sm text-slate-500">"Loading…"</p> }>
            // A bare `Suspend`, not a closure returning one: a closure is called again on each of
            // the server's walks over a Suspense's children, and would build the frame each time.
            // Nothing tracks `me` here (a component's body runs untracked): the frame is built
            // for the member loaded once, and a `me.refetch()` would not rebuild it.
            {Suspend::new(async move {
                match me.await {
                    Ok(Some(member)) => EitherOf3::A(built_once(view! { <Frame member /> }.into_any()).await),
                    Ok(None) => EitherOf3::B(view! { <Redirect path="/login" /> }),
                    Err(e) => EitherOf3::C(view! {
                        <div class="p-6"><crate::components::ErrorNote message=e.message /></div>
                    }),
                }
            })}
        </Suspense>
    }
}

/// The frame with the page inside it, built once on the server.
///
/// The router's `<Outlet/>` is a function that builds the page (and creates its resources) each
/// time it is called, and the server calls it once per walk: when it looks for resources to wait
/// on (`dry_resolve`) and again when it renders. Each build serializes its resources' data for
/// hydration; the browser hydrates with the first copy, while the HTML comes from the last. When a
/// record or a quota changed in between, the two differ and hydration panics on the mismatch.
/// Resolving the view here calls the page's function once and keeps what it built. In the browser
/// the outlet must stay a function, so that it follows navigation between pages: the switch is
/// the `ssr` feature, which the WASM build (`frontend`, `hydrate` only) must never enable, or
/// navigation would silently stop swapping pages.
#[cfg(feature = "ssr")]
async fn built_once(view: AnyView) -> AnyView {
    view.resolve().await
}

#[cfg(not(feature = "ssr"))]
async fn built_once(view: AnyView) -> AnyView {
    view
}

/// The signed-in member, in context for the pages inside the frame (e.g. to spare an admin
/// deleting themselves).
#[derive(Debug, Clone)]
pub struct Me(pub MemberView);

#[component]
fn Frame(member: MemberView) -> impl IntoView {
    provide_context(Me(member.clone()));
    let logout = ServerAction::<Logout>::new();
    let is_admin = member.is_admin();
    view! {
        <a href="#main" class="sr-only focus:not-sr-only focus:absolute focus:left-2 focus:top-2 focus:rounded focus:bg-white focus:px-3 focus:py-2">
            "Skip to content"
        </a>
        <div class="md:flex md:min-h-screen">
            <aside class="border-b border-slate-200 bg-white md:w-60 md:shrink-0 md:border-b-0 md:border-r">
                <div class="flex items-center justify-between px-5 py-4">
                    <span class="text-lg font-semibold tracking-tight">"SubLane"</span>
                    <span class="rounded bg-slate-100 px-2 py-0.5 text-xs text-slate-600" data-testid="whoami">
                        {member.username.clone()}
                        {is_admin.then_some(" (admin)")}
                    </span>
                </div>
                <nav aria-label="Main" class="flex flex-wrap gap-x-6 gap-y-2 px-5 pb-4 md:block md:space-y-6">
                    <NavSection title="General">
                        <NavLink href="/" exact=true label="Requests" />
                        <NavLink href="/usage" label="Usage" />
                        <NavLink href="/keys" label="API keys" />
                        <NavLink href="/account" label="Your account" />
                    </NavSection>
                    {is_admin.then(|| view! {
                        <NavSection title="Admin">
                            <NavLink href="/admin/requests" label="All requests" />
                            <NavLink href="/admin/usage" label="Workspace usage" />
                            <NavLink href="/admin/accounts" label="Accounts" />
                            <NavLink href="/admin/members" label="Members" />
                            <NavLink href="/admin/keys" label="All keys" />
                            <NavLink href="/admin/pools" label="Pools" />
                            <NavLink href="/admin/budgets" label="Budgets" />
                            <NavLink href="/admin/settings" label="Settings" />
                        </NavSection>
                    })}
                </nav>
                <div class="px-5 pb-5">
                    <ActionForm action=logout>
                        <button type="submit" class="text-sm text-slate-600 underline-offset-2 hover:text-slate-900 hover:underline focus-visible:outline-2 focus-visible:outline-slate-900">
                            "Sign out"
                        </button>
                    </ActionForm>
                </div>
            </aside>
            <main id="main" class="min-w-0 flex-1 px-5 py-6 md:px-10 md:py-8">
                <Outlet />
            </main>
        </div>
    }
}

#[component]
fn NavSection(title: &'static str, children: Children) -> impl IntoView {
    view! {
        <div>
            <h2 class="mb-1 text-xs font-semibold uppercase tracking-wide text-slate-500">{title}</h2>
            <ul class="flex gap-1 md:block md:space-y-0.5">{children()}</ul>
        </div>
    }
}

#[component]
fn NavLink(href: &'static str, label: &'static str, #[prop(optional)] exact: bool) -> impl IntoView {
    view! {
        <li>
            <A
                href=href
                exact=exact
                attr:class="block rounded-md px-2 py-1.5 text-sm text-slate-700 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900 aria-[current=page]:bg-slate-900 aria-[current=page]:text-white"
            >
                {label}
            </A>
        </li>
    }
}
