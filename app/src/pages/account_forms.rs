//! The account forms of Admin -> Accounts (CRED-5, ACC-3, UI-3): add an account (provider ->
//! method -> settings), re-authorize one, edit one's settings, delete one after a confirmation.
//!
//! Credentials come in one of three ways, each a set of fields inside the surrounding form: a
//! provider sign-in (start it, open the provider's page, paste back the code or the address the
//! browser ended on), a CLI credential file (uploaded or pasted), or an API key. Pools are chosen
//! with checkboxes that write one hidden `pools` field (`1,3`); without JavaScript it keeps the
//! account's pools as they are.

use leptos::{either::EitherOf3, prelude::*};

use crate::{
    components::{ErrorNote, LocalDateTimeInput, Timestamp},
    model::{AccountRuntime, PoolChoice, Provider},
    rpc::{AddAccount, DeleteAccount, ReauthorizeAccount, SaveAccountSettings, StartAccountSignIn},
};

const INPUT: &str = "mt-1 block w-full rounded-md border border-slate-300 bg-white px-2 py-1 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";
const SHORT: &str = "mt-1 block w-28 rounded-md border border-slate-300 bg-white px-2 py-1 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";
const BUTTON: &str = "rounded-md bg-slate-900 px-3 py-1.5 text-sm font-medium text-white hover:bg-slate-700 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60";
const ACTION: &str = "rounded-md border border-slate-300 bg-white px-2 py-1 text-xs font-medium text-slate-800 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60";
const DANGER: &str = "rounded-md bg-red-700 px-2 py-1 text-xs font-medium text-white hover:bg-red-800 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-red-700 disabled:opacity-60";

/// How an account's credentials come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    SignIn,
    File,
    ApiKey,
}

impl Method {
    fn label(self) -> &'static str {
        match self {
            Method::SignIn => "Sign in with the provider",
            Method::File => "Import a CLI credential file",
            Method::ApiKey => "API key",
        }
    }

    /// The ways a provider's credentials come in; the first is the default.
    fn for_provider(p: Provider) -> &'static [Method] {
        if p.uses_oauth() { &[Method::SignIn, Method::File] } else { &[Method::ApiKey] }
    }
}

pub fn provider_label(p: Provider) -> &'static str {
    match p {
        Provider::Codex => "OpenAI Codex",
        Provider::Claude => "Claude",
        Provider::Antigravity => "Antigravity",
        Provider::OpenaiApi => "OpenAI API key",
        Provider::AnthropicApi => "Anthropic API key",
    }
}

/// The CLI file each provider's import takes.
fn file_hint(p: Provider) -> &'static str {
    match p {
        Provider::Codex => "~/.codex/auth.json (Codex CLI, signed in with ChatGPT)",
        Provider::Claude => "~/.claude/.credentials.json (Claude Code)",
        _ => "~/.gemini/oauth_creds.json or an Antigravity OAuth JSON",
    }
}

/// "Add account": provider, then method, then the account's settings.
#[component]
pub fn AddAccountForm(pools: Vec<PoolChoice>, add: ServerAction<AddAccount>) -> impl IntoView {
    let provider = RwSignal::new(Provider::Codex);
    let method = RwSignal::new(Method::SignIn);
    let first_pool: Vec<i64> = pools.first().map(|p| p.id).into_iter().collect();
    view! {
        <section aria-labelledby="add-account" class="mb-6 rounded-lg border border-slate-200 bg-white p-5">
            <h2 id="add-account" class="text-base font-semibold">"Add account"</h2>
            <ActionForm action=add>
                <div class="mt-3 grid gap-4 md:grid-cols-2">
                    <div>
                        <label for="add-provider" class="block text-sm font-medium">"Provider"</label>
                        <select
                            id="add-provider"
                            name="provider"
                            class=INPUT
                            on:change=move |ev| {
                                if let Some(p) = Provider::parse(&event_target_value(&ev)) {
                                    provider.set(p);
                                    method.set(Method::for_provider(p)[0]);
                                }
                            }
                        >
                            {Provider::ALL.into_iter().map(|p| view! {
                                <option value=p.as_str() selected=move || provider.get() == p>{provider_label(p)}</option>
                            }).collect_view()}
                        </select>
                    </div>
                    <fieldset class="text-sm" hidden=move || !provider.get().uses_oauth()>
                        <legend class="font-medium">"Method"</legend>
                        {move || view! { <MethodChoice provider=provider.get() method /> }}
                    </fieldset>
                </div>
                <div class="mt-4">
                    <CredentialFields provider=provider.into() method=method.into() />
                </div>
                <div class="mt-4 grid gap-4 md:grid-cols-[1fr_auto_auto]">
                    <label class="text-sm font-medium">"Name"
                        <input name="name" required maxlength="64" placeholder="codex-team-1" class=INPUT />
                    </label>
                    <label class="text-sm font-medium">"Priority"
                        <input name="priority" type="number" required value="0" class=SHORT />
                    </label>
                    <label class="text-sm font-medium">"Concurrency limit"
                        <input name="max_concurrency" type="number" min="1" max="1000" required value="30" class=SHORT />
                    </label>
                </div>
                <PoolPicker pools chosen=first_pool />
                <button type="submit" class=format!("mt-4 {BUTTON}") disabled=move || add.pending().get()>"Add account"</button>
            </ActionForm>
            <div aria-live="polite" class="mt-3">
                {move || add.value().get().map(|r| match r {
                    Ok(a) => view! {
                        <p role="status" class="rounded-md border border-emerald-200 bg-emerald-50 px-3 py-2 text-sm text-emerald-900">
                            "Added "{a.name}"."
                        </p>
                    }.into_any(),
                    Err(e) => view! { <ErrorNote message=e.message /> }.into_any(),
                })}
            </div>
        </section>
    }
}

/// A radio choice between a provider's ways to bring credentials in (none when it has one).
#[component]
fn MethodChoice(provider: Provider, method: RwSignal<Method>) -> impl IntoView {
    let methods = Method::for_provider(provider);
    (methods.len() > 1).then(|| {
        methods
            .iter()
            .map(|m| {
                let m = *m;
                view! {
                    <label class="mr-4 inline-flex items-center gap-1.5">
                        <input type="radio" checked=move || method.get() == m on:change=move |_| method.set(m) />
                        {m.label()}
                    </label>
                }
            })
            .collect_view()
    })
}

/// The fields of one way to bring credentials in.
#[component]
fn CredentialFields(provider: Signal<Provider>, method: Signal<Method>) -> impl IntoView {
    move || match method.get() {
        Method::SignIn => EitherOf3::A(view! { <SignInSteps provider /> }),
        Method::File => EitherOf3::B(view! { <FileField provider=provider.get() /> }),
        Method::ApiKey => EitherOf3::C(view! {
            <label class="text-sm font-medium">"API key"
                <input name="api_key" type="password" required autocomplete="off" class=INPUT />
            </label>
        }),
    }
}

/// A provider sign-in: start it, open the provider's page, paste back what it ends on.
#[component]
fn SignInSteps(provider: Signal<Provider>) -> impl IntoView {
    let start = ServerAction::<StartAccountSignIn>::new();
    view! {
        <div class="space-y-2 text-sm" data-testid="sign-in">
            <button
                type="button"
                class=ACTION
                disabled=move || start.pending().get()
                on:click=move |_| { start.dispatch(StartAccountSignIn { provider: provider.get_untracked() }); }
            >
                "Start sign-in"
            </button>
            {move || start.value().get().map(|r| match r {
                // A sign-in started for another provider is not shown once the provider changes.
                Ok(s) if s.provider == provider.get() => view! {
                    <input type="hidden" name="flow_id" value=s.flow_id.clone() />
                    <ol class="list-decimal space-y-1 pl-5">
                        <li>
                            <a href=s.authorize_url.clone() target="_blank" rel="noopener noreferrer" class="font-medium underline">
                                "Open the sign-in page"
                            </a>
                            " and sign in with the account to add."
                        </li>
                        <li>
                            "The provider then sends the browser to "<code class="break-all">{s.redirect_uri.clone()}</code>
                            ". That page may not load; that is expected."
                        </li>
                        <li>
                            <label class="font-medium">"Paste the code, or the whole address of that page"
                                <textarea name="code" required rows="2" class=INPUT></textarea>
                            </label>
                        </li>
                    </ol>
                    <p class="text-xs text-slate-500">"Finish before "<Timestamp at=chrono::DateTime::from_timestamp(s.expires_at, 0).unwrap_or_default() />"; a sign-in can be used once."</p>
                }.into_any(),
                Ok(_) => ().into_any(),
                Err(e) => view! { <ErrorNote message=e.message /> }.into_any(),
            })}
        </div>
    }
}

/// A credential file, uploaded (read in the browser) or pasted.
#[component]
fn FileField(provider: Provider) -> impl IntoView {
    let text = RwSignal::new(String::new());
    view! {
        <div class="space-y-2 text-sm">
            <label class="block font-medium">"Upload the file"
                <input type="file" accept=".json,application/json" class="mt-1 block text-sm" on:change=move |ev| read_file(ev, text) />
            </label>
            <label class="block font-medium">"Or paste its content"
                <textarea
                    name="file"
                    required
                    rows="4"
                    class=format!("{INPUT} font-mono")
                    placeholder=file_hint(provider)
                    prop:value=move || text.get()
                    on:input=move |ev| text.set(event_target_value(&ev))
                ></textarea>
            </label>
            <p class="text-xs text-slate-500">
                {file_hint(provider)}". SubLane refreshes the token from now on: sign the CLI out, or it and SubLane will spend each other's refresh tokens."
            </p>
        </div>
    }
}

/// Reads the chosen file into `into` (in the browser; the server never sees the file input).
#[allow(unused_variables)]
fn read_file(ev: leptos::ev::Event, into: RwSignal<String>) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) else {
            return;
        };
        let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
        leptos::task::spawn_local(async move {
            if let Ok(v) = wasm_bindgen_futures::JsFuture::from(file.text()).await
                && let Some(s) = v.as_string()
            {
                into.set(s);
            }
        });
    }
}

/// Pool checkboxes writing the hidden `pools` field.
#[component]
fn PoolPicker(pools: Vec<PoolChoice>, chosen: Vec<i64>) -> impl IntoView {
    let chosen = RwSignal::new(chosen);
    let value = move || chosen.get().iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    view! {
        <fieldset class="mt-3 text-sm">
            <legend class="font-medium">"Pools"</legend>
            <input type="hidden" name="pools" prop:value=value value=value />
            {pools.into_iter().map(|p| {
                let id = p.id;
                view! {
                    <label class="mr-4 inline-flex items-center gap-1.5">
                        <input
                            type="checkbox"
                            checked=move || chosen.get().contains(&id)
                            on:change=move |ev| {
                                let on = event_target_checked(&ev);
                                chosen.update(|c| {
                                    c.retain(|x| *x != id);
                                    if on { c.push(id); c.sort_unstable(); }
                                });
                            }
                        />
                        {p.name}
                    </label>
                }
            }).collect_view()}
        </fieldset>
    }
}

/// An account's settings: name, pools, concurrency limit, priority.
#[component]
pub fn SettingsForm(
    account: AccountRuntime,
    pools: Vec<PoolChoice>,
    save: ServerAction<SaveAccountSettings>,
) -> impl IntoView {
    let a = account;
    let expires = a.expires_at.and_then(|t| chrono::DateTime::from_timestamp(t, 0));
    let zone = RwSignal::new("UTC");
    let expires_id = format!("account-{}-expires", a.id);
    view! {
        <section class="mt-4 border-t border-slate-100 pt-3" aria-label="Settings">
            <h3 class="text-sm font-medium">"Settings"</h3>
            <ActionForm action=save>
                <input type="hidden" name="id" value=a.id.to_string() />
                <div class="mt-1 flex flex-wrap items-end gap-3">
                    <label class="text-xs text-slate-600">"Name"
                        <input name="name" required maxlength="64" value=a.name.clone() class=SHORT />
                    </label>
                    <label class="text-xs text-slate-600">"Concurrency limit"
                        <input name="max_concurrency" type="number" min="1" max="1000" required value=a.max_concurrency.to_string() class=SHORT />
                    </label>
                    <label class="text-xs text-slate-600">"Priority"
                        <input name="priority" type="number" required value=a.priority.to_string() class=SHORT />
                    </label>
                    // ACC-1: the account's own end (a subscription's); empty, it never expires
                    <div class="text-xs text-slate-600">
                        <label for=expires_id.clone()>{move || format!("Expires ({}, empty: never)", zone.get())}</label>
                        <LocalDateTimeInput id=expires_id name="expires_at" value=expires class=SHORT zone />
                    </div>
                    <button type="submit" class=ACTION disabled=move || save.pending().get()>"Save"</button>
                </div>
                <PoolPicker pools chosen=a.pool_ids.clone() />
            </ActionForm>
        </section>
    }
}

/// "Re-authorize": new credentials (a sign-in, a file, or a key), every other setting kept.
#[component]
pub fn ReauthorizeForm(
    account: AccountRuntime,
    reauthorize: ServerAction<ReauthorizeAccount>,
) -> impl IntoView {
    let provider = account.provider;
    let method = RwSignal::new(Method::for_provider(provider)[0]);
    let name = account.name.clone();
    view! {
        <details class="text-sm" data-testid="reauthorize">
            <summary class=format!("{ACTION} cursor-pointer list-none") aria-label=format!("Re-authorize: {name}")>"Re-authorize"</summary>
            <div class="mt-2 rounded-md border border-slate-200 p-3">
                <p class="mb-2 text-xs text-slate-600">"New credentials replace the old ones at once; name, pools, priority and limits stay."</p>
                <div class="mb-2">
                    <MethodChoice provider method />
                </div>
                <ActionForm action=reauthorize>
                    <input type="hidden" name="id" value=account.id.to_string() />
                    <CredentialFields provider=Signal::stored(provider) method=method.into() />
                    <button type="submit" class=format!("mt-2 {BUTTON}") disabled=move || reauthorize.pending().get()>"Replace credentials"</button>
                </ActionForm>
            </div>
        </details>
    }
}

/// "Delete", then a confirmation that names the account.
#[component]
pub fn DeleteForm(account: AccountRuntime, delete: ServerAction<DeleteAccount>) -> impl IntoView {
    let name = account.name.clone();
    view! {
        <details class="text-sm" data-testid="delete">
            <summary class=format!("{ACTION} cursor-pointer list-none") aria-label=format!("Delete: {name}")>"Delete"</summary>
            <div class="mt-2 rounded-md border border-red-200 bg-red-50 p-3" role="alertdialog" aria-label=format!("Delete {name}?")>
                <p class="text-red-900">"Delete "<strong>{name.clone()}</strong>"? It stops serving at once; its request history stays."</p>
                <ActionForm action=delete>
                    <input type="hidden" name="id" value=account.id.to_string() />
                    <button type="submit" class=format!("mt-2 {DANGER}") disabled=move || delete.pending().get()>"Delete account"</button>
                </ActionForm>
            </div>
        </details>
    }
}
