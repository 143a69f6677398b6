//! General -> API keys (ID-3): create a key (its secret is shown once, with copy; an optional
//! expiry), list the member's keys, switch one off or back on, revoke one. Every action is a form
//! posting to a server function, so switching and revoking also work without JavaScript (the list
//! refreshes in place with it). Creating needs it: the secret is in the answer, which a plain form
//! post's redirect drops, so the server refuses that post in words (`rpc::create_key`).

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{
        Confirm, ErrorNote, LocalDateTimeInput, PageHeader, TimeOrNever, Timestamp,
        style::{BUTTON, DANGER_BUTTON, INPUT},
    },
    model::{ApiKeyView, CreatedApiKey, KeyStatus},
    rpc::{CreateKey, RevokeKey, SetKeyEnabled, list_my_keys, list_my_pools},
};

#[component]
pub fn KeysPage() -> impl IntoView {
    let create = ServerAction::<CreateKey>::new();
    let revoke = ServerAction::<RevokeKey>::new();
    let toggle = ServerAction::<SetKeyEnabled>::new();
    let keys = Resource::new(
        move || (create.version().get(), revoke.version().get(), toggle.version().get()),
        |_| list_my_keys(),
    );
    let pools = Resource::new(|| (), |_| list_my_pools());
    let zone = RwSignal::new("UTC");

    view! {
        <Title text="API keys" />
        <PageHeader title="API keys" description="Keys let your tools call models through SubLane. Each key targets one pool." />

        <section aria-labelledby="new-key" class="mb-8 rounded-lg border border-slate-200 bg-white p-5">
            <h2 id="new-key" class="mb-3 text-base font-semibold">"Create a key"</h2>
            <ActionForm action=create>
                <div class="grid gap-4 md:grid-cols-[1fr_1fr_1fr_auto] md:items-end">
                    <div>
                        <label for="key-name" class="block text-sm font-medium">"Name"</label>
                        <input id="key-name" name="name" required maxlength="64" placeholder="laptop codex" class=INPUT />
                    </div>
                    <div>
                        <label for="key-pool" class="block text-sm font-medium">"Pool"</label>
                        <Suspense fallback=|| view! { <select id="key-pool" disabled class=INPUT></select> }>
                            {move || Suspend::new(async move {
                                let pools = pools.await.unwrap_or_default();
                                view! {
                                    <select id="key-pool" name="pool_id" class=INPUT>
                                        {pools.into_iter().map(|p| view! { <option value=p.id.to_string()>{p.name}</option> }).collect_view()}
                                    </select>
                                }
                            })}
                        </Suspense>
                    </div>
                    <div>
                        <label for="key-expires" class="block text-sm font-medium">{move || format!("Expires ({}, optional)", zone.get())}</label>
                        <LocalDateTimeInput id="key-expires".to_owned() name="expires_at" value=None class=INPUT zone />
                    </div>
                    <button type="submit" class=BUTTON disabled=move || create.pending().get()>"Create key"</button>
                </div>
            </ActionForm>
            {move || create.value().get().map(|result| match result {
                Ok(created) => Either::Left(view! { <NewSecret created /> }),
                Err(e) => Either::Right(view! { <div class="mt-3"><ErrorNote message=e.message /></div> }),
            })}
        </section>

        <section aria-labelledby="your-keys">
            <h2 id="your-keys" class="mb-3 text-base font-semibold">"Your keys"</h2>
            {move || revoke.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
            {move || toggle.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading keys…"</p> }>
                {move || Suspend::new(async move {
                    match keys.await {
                        Ok(keys) => Either::Left(view! { <KeyTable keys revoke toggle /> }),
                        Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                    }
                })}
            </Transition>
        </section>
        <super::budgets::KeyBudgets keys />
    }
}

/// The freshly created secret, shown exactly once.
#[component]
fn NewSecret(created: CreatedApiKey) -> impl IntoView {
    let copied = RwSignal::new(false);
    let secret = created.secret.clone();
    let copy = move |_| {
        // The clipboard exists only in the browser; the server renders the button inert.
        #[cfg(feature = "hydrate")]
        let _ = window().navigator().clipboard().write_text(&secret);
        #[cfg(not(feature = "hydrate"))]
        let _ = &secret;
        copied.set(true);
    };
    view! {
        <div role="status" class="mt-4 rounded-md border border-emerald-200 bg-emerald-50 p-4" data-testid="new-key">
            <p class="text-sm font-medium text-emerald-900">
                "Key \u{201c}"{created.key.name.clone()}"\u{201d} created. Copy the secret now: it is never shown again."
            </p>
            <div class="mt-2 flex flex-wrap items-center gap-2">
                <code class="break-all rounded bg-white px-2 py-1 font-mono text-sm" data-testid="new-secret">{created.secret.clone()}</code>
                <button type="button" on:click=copy class="rounded-md border border-emerald-300 bg-white px-2 py-1 text-sm hover:bg-emerald-100 focus-visible:outline-2 focus-visible:outline-emerald-700">
                    {move || if copied.get() { "Copied" } else { "Copy" }}
                </button>
            </div>
        </div>
    }
}

#[component]
fn KeyTable(
    keys: Vec<ApiKeyView>,
    revoke: ServerAction<RevokeKey>,
    toggle: ServerAction<SetKeyEnabled>,
) -> impl IntoView {
    if keys.is_empty() {
        return Either::Left(view! {
            <p class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">
                "You have no API keys yet."
            </p>
        });
    }
    Either::Right(view! {
        <div class="overflow-x-auto rounded-lg border border-slate-200 bg-white">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="keys-table">
                <thead class="bg-slate-50">
                    <tr>
                        {["Name", "Key", "Pool", "Status", "Created", "Expires", "Last used", ""].into_iter().map(|c| view! {
                            <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{c}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {keys.into_iter().map(|k| view! { <KeyRow key=k revoke toggle /> }.into_any()).collect_view()}
                </tbody>
            </table>
        </div>
    })
}

#[component]
fn KeyRow(
    key: ApiKeyView,
    revoke: ServerAction<RevokeKey>,
    toggle: ServerAction<SetKeyEnabled>,
) -> impl IntoView {
    // Any key but a revoked one can be revoked (a banned key too: the seed says to delete it).
    let active = key.status != KeyStatus::Revoked;
    let label = format!("Revoke key {}", key.name);
    // A revoked key stays revoked; any other can be switched off or back on.
    // A banned key stays refused whatever its switch says, so it has none.
    let switch = (!matches!(key.status, KeyStatus::Revoked | KeyStatus::Banned)).then(|| {
        let on = key.status == KeyStatus::Disabled;
        let text = if on { "Enable" } else { "Disable" };
        let aria = format!("{text} key {}", key.name);
        view! {
            <ActionForm action=toggle attr:class="inline">
                <input type="hidden" name="id" value=key.id.to_string() />
                <input type="hidden" name="enabled" value=on.to_string() />
                <button type="submit" aria-label=aria
                    class="mr-2 rounded-md border border-slate-300 px-2 py-1 text-xs text-slate-700 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900">
                    {text}
                </button>
            </ActionForm>
        }
    });
    view! {
        <tr data-key-id=key.id.to_string()>
            <td class="px-3 py-2 font-medium">{key.name.clone()}</td>
            <td class="px-3 py-2"><code class="font-mono text-xs">{key.hint.clone()}</code></td>
            <td class="px-3 py-2">{key.pool_name.clone()}</td>
            <td class="px-3 py-2"><StatusBadge status=key.status /><BreakerNote key=key.clone() /></td>
            <td class="whitespace-nowrap px-3 py-2"><Timestamp at=key.created_at /></td>
            <td class="whitespace-nowrap px-3 py-2">
                <TimeOrNever at=key.expires_at />
            </td>
            <td class="whitespace-nowrap px-3 py-2">
                <TimeOrNever at=key.last_used_at />
            </td>
            <td class="whitespace-nowrap px-3 py-2 text-right">
                {switch}
                // Behind a second step, as on the admin's page: a revoked key never works again.
                {active.then(|| view! {
                    <Confirm summary="Revoke…".to_owned()>
                        <p>{format!("Key {} stops working at once, for good. Its records stay.", key.name)}</p>
                        <ActionForm action=revoke attr:class="mt-2">
                            <input type="hidden" name="id" value=key.id.to_string() />
                            <button type="submit" class=DANGER_BUTTON>{label.clone()}</button>
                        </ActionForm>
                    </Confirm>
                })}
            </td>
        </tr>
    }
}

/// BUD-4 on a key: banned since when, or blocked until when, and how often it tripped.
#[component]
pub(crate) fn BreakerNote(key: ApiKeyView) -> impl IntoView {
    let trips = key.breaker_trips;
    let note = if let Some(at) = key.banned_at {
        Some(view! { <span>"banned "<Timestamp at />{format!(" after {trips} trips of the error-rate breaker")}</span> }.into_any())
    } else if let Some(until) = key.blocked_until {
        Some(
            view! { <span>"blocked until "<Timestamp at=until />{format!(" (trip {trips} of 5)")}</span> }
                .into_any(),
        )
    } else if trips > 0 {
        Some(view! { <span>{format!("tripped the error-rate breaker {trips} of 5 times")}</span> }.into_any())
    } else {
        None
    };
    note.map(|n| view! { <p class="mt-1 text-xs text-red-800" data-testid="breaker-note">{n}</p> })
}

#[component]
pub(crate) fn StatusBadge(status: KeyStatus) -> impl IntoView {
    let (text, class) = match status {
        KeyStatus::Active => ("active", "bg-emerald-100 text-emerald-800"),
        KeyStatus::Disabled => ("disabled", "bg-slate-200 text-slate-700"),
        KeyStatus::Revoked => ("revoked", "bg-red-100 text-red-800"),
        KeyStatus::Expired => ("expired", "bg-amber-100 text-amber-800"),
        KeyStatus::Banned => ("banned", "bg-red-200 text-red-900"),
    };
    view! { <span class=format!("rounded px-2 py-0.5 text-xs font-medium {class}") data-testid="key-status">{text}</span> }
}
