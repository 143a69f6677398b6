//! SubLane's web app: pages, components, server functions and the wire types shared with the
//! server (`model`). Compiled twice: with `ssr` into the server, with `hydrate` into WASM.
//!
//! Every page renders completely on the server (`SsrMode::Async`), so reading works without
//! JavaScript (UI-5); hydration adds interaction.

pub mod error;
pub mod model;
pub mod rpc;

#[cfg(feature = "ssr")]
pub mod backend;

mod components;
mod pages;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    SsrMode,
    components::{ParentRoute, Route, Router, Routes},
    path,
};

/// Name of the built assets under `/pkg/` (js, wasm, css); the build script uses the same name.
pub const OUTPUT_NAME: &str = "sublane";

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body class="min-h-screen bg-slate-50 text-slate-900 antialiased">
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/sublane.css" />
        <Title formatter=|page: String| format!("{page} · SubLane") />
        <Router>
            <Routes fallback=pages::NotFound>
                <Route path=path!("/login") view=pages::LoginPage ssr=SsrMode::Async />
                <ParentRoute path=path!("") view=components::Shell ssr=SsrMode::Async>
                    <Route path=path!("") view=pages::RequestsPage />
                    <Route path=path!("usage") view=pages::UsagePage />
                    <Route path=path!("keys") view=pages::KeysPage />
                    <Route path=path!("account") view=pages::AccountPage />
                    <Route path=path!("requests/:id") view=pages::RequestDetailPage />
                    <Route path=path!("admin/requests") view=pages::AdminRequestsPage />
                    <Route path=path!("admin/requests/:id") view=pages::AdminRequestDetailPage />
                    <Route path=path!("admin/usage") view=pages::AdminUsagePage />
                    <Route path=path!("admin/accounts") view=pages::AccountsPage />
                    <Route path=path!("admin/members") view=pages::MembersPage />
                    <Route path=path!("admin/keys") view=pages::AdminKeysPage />
                    <Route path=path!("admin/pools") view=pages::PoolsPage />
                    <Route path=path!("admin/settings") view=pages::SettingsPage />
                    <Route path=path!("admin/budgets") view=pages::BudgetsPage />
                </ParentRoute>
            </Routes>
        </Router>
    }
}
