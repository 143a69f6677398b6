//! Admin -> API keys (UI-4): every key of the workspace, filtered by member and pool with a plain
//! GET form; switch a key off or back on (a key an admin switched off stays off for its owner),
//! set or clear its expiry, revoke it behind a confirmation. Secrets are never shown: only the
//! hint. Plain forms posting to server functions, so everything works without JavaScript too.

use std::collections::BTreeMap;

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::keys::{BreakerNote, StatusBadge};
use crate::{
    components::{
        Confirm, ErrorNote, FieldError, LocalDateTimeInput, PageHeader, TimeOrNever, Timestamp, UnaimedError,
        style::{BUTTON, DANGER_BUTTON, INPUT, SMALL_BUTTON},
        successes,
    },
    error::AppError,
    model::{ApiKeyView, KeyFilter, KeyStatus, MemberView, PoolView},
    rpc::{AdminKeyExpiry, AdminRevokeKey, AdminSetKeyEnabled, list_all_keys, list_members, list_pools},
};

#[derive(Clone, Copy)]
struct Actions {
    toggle: ServerAction<AdminSetKeyEnabled>,
    expiry: ServerAction<AdminKeyExpiry>,
    revoke: ServerAction<AdminRevokeKey>,
    /// The key whose expiry form was sent last: its refusal is shown in its row only.
    expiry_row: RwSignal<Option<i64>>,
}

#[component]
pub fn AdminKeysPage() -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        let q = query.read();
        let number = |k: &str| q.get(k).and_then(|v| v.trim().parse().ok());
        KeyFilter { member_id: number("member_id"), pool_id: number("pool_id") }
    };
    let actions = Actions {
        toggle: ServerAction::new(),
        expiry: ServerAction::new(),
        revoke: ServerAction::new(),
        expiry_row: RwSignal::new(None),
    };
    let expiry_ok = successes(actions.expiry);
    let keys = Resource::new(
        move || (filter(), actions.toggle.version().get(), expiry_ok.get(), actions.revoke.version().get()),
        |(f, ..)| list_all_keys(f),
    );
    // One server function per resource: each reads its request context on its first poll.
    let members = Resource::new(|| (), |_| list_members());
    let pools = Resource::new(|| (), |_| list_pools());
    view! {
        <Title text="All API keys" />
        <PageHeader title="All API keys" description="Every member's keys. Switch one off, change when it expires, or revoke it." />
        {move || actions.toggle.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
        {move || actions.revoke.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading keys…"</p> }>
            {move || Suspend::new(async move {
                match (keys.await, members.await, pools.await) {
                    (Ok(keys), Ok(members), Ok(pools)) => {
                        let f = filter();
                        Either::Left(view! {
                            <KeyFilters members=members.clone() pools filter=f />
                            <AllKeysTable keys members actions />
                        })
                    }
                    (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn KeyFilters(members: Vec<MemberView>, pools: Vec<PoolView>, filter: KeyFilter) -> impl IntoView {
    view! {
        <form method="get" class="mb-4 flex flex-wrap items-end gap-3" aria-label="Filter keys">
            <div class="w-48">
                <label for="keys-member" class="block text-sm font-medium">"Member"</label>
                <select id="keys-member" name="member_id" class=INPUT>
                    <option value="">"Everyone"</option>
                    {members.into_iter().map(|m| view! {
                        <option value=m.id.to_string() selected=filter.member_id == Some(m.id)>{m.username}</option>
                    }).collect_view()}
                </select>
            </div>
            <div class="w-48">
                <label for="keys-pool" class="block text-sm font-medium">"Pool"</label>
                <select id="keys-pool" name="pool_id" class=INPUT>
                    <option value="">"Every pool"</option>
                    {pools.into_iter().map(|p| view! {
                        <option value=p.id.to_string() selected=filter.pool_id == Some(p.id)>{p.name}</option>
                    }).collect_view()}
                </select>
            </div>
            <button type="submit" class=BUTTON>"Filter"</button>
            <a href="/admin/keys" class="text-sm text-slate-600 underline">"Clear"</a>
        </form>
    }
}

#[component]
fn AllKeysTable(keys: Vec<ApiKeyView>, members: Vec<MemberView>, actions: Actions) -> impl IntoView {
    if keys.is_empty() {
        return Either::Left(view! {
            <p class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">"No keys match."</p>
        });
    }
    let owners: BTreeMap<i64, String> = members.into_iter().map(|m| (m.id, m.username)).collect();
    let expiry = actions.expiry;
    Either::Right(view! {
        <UnaimedError result=Signal::derive(move || expiry.value().get()) row=actions.expiry_row.into() />
        <div class="overflow-x-auto rounded-lg border border-slate-200 bg-white">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="all-keys-table">
                <thead class="bg-slate-50">
                    <tr>
                        {["Name", "Owner", "Key", "Pool", "Status", "Created", "Expires", "Last used", ""].into_iter().map(|c| view! {
                            <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{c}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    // Keyed by everything a row shows, so an open confirmation or a typed expiry
                    // never slides onto another key when the list changes.
                    <For
                        each=move || {
                            keys.clone().into_iter().map(|k| {
                                let owner = owners.get(&k.member_id).cloned().unwrap_or_else(|| "deleted member".to_owned());
                                (k, owner)
                            }).collect::<Vec<_>>()
                        }
                        key=|row| row.clone()
                        children=move |(key, owner)| view! { <AdminKeyRow key owner actions /> }
                    />
                </tbody>
            </table>
        </div>
    })
}

#[component]
fn AdminKeyRow(key: ApiKeyView, owner: String, actions: Actions) -> impl IntoView {
    let id = key.id;
    let aim = move |_| actions.expiry_row.set(Some(id));
    let expiry_result: Signal<Option<Result<ApiKeyView, AppError>>> = Signal::derive(move || {
        if actions.expiry_row.get() == Some(id) { actions.expiry.value().get() } else { None }
    });
    let live = key.status != KeyStatus::Revoked;
    let label = format!("{} ({owner})", key.name);
    let zone = RwSignal::new("UTC");
    let switch = (live && key.status != KeyStatus::Banned).then(|| {
        let label = label.clone();
        let on = key.status == KeyStatus::Disabled;
        let text = if on { "Enable" } else { "Disable" };
        view! {
            <ActionForm action=actions.toggle attr:class="inline">
                <input type="hidden" name="id" value=id.to_string() />
                <input type="hidden" name="enabled" value=on.to_string() />
                <button type="submit" aria-label=format!("{text} key {label}") class=format!("mr-2 {SMALL_BUTTON}")>{text}</button>
            </ActionForm>
        }
    });
    let expiry_form = live.then(|| {
        let label = label.clone();
        let field = format!("key-{id}-expires");
        let error_id = format!("{field}-error");
        let described_by = error_id.clone();
        view! {
            <ActionForm action=actions.expiry attr:class="flex items-center gap-1">
                <input type="hidden" name="id" value=id.to_string() />
                <label for=field.clone() class="sr-only">{move || format!("Expiry of key {label} ({}; empty: never)", zone.get())}</label>
                <LocalDateTimeInput id=field.clone() name="expires_at" value=key.expires_at described_by
                    class="rounded-md border border-slate-300 px-1.5 py-1 text-xs" zone />
                <span class="text-xs text-slate-500" aria-hidden="true">{move || zone.get()}</span>
                <button type="submit" on:click=aim class=SMALL_BUTTON>"Set"</button>
            </ActionForm>
            <FieldError result=expiry_result field="expires_at" id=error_id />
        }
    });
    view! {
        <tr data-key-id=id.to_string() class="align-top">
            <th scope="row" class="px-3 py-2 text-left font-medium">{key.name.clone()}</th>
            <td class="px-3 py-2">{owner.clone()}</td>
            <td class="px-3 py-2"><code class="font-mono text-xs">{key.hint.clone()}</code></td>
            <td class="px-3 py-2">{key.pool_name.clone()}</td>
            <td class="px-3 py-2"><StatusBadge status=key.status /><BreakerNote key=key.clone() /></td>
            <td class="whitespace-nowrap px-3 py-2"><Timestamp at=key.created_at /></td>
            <td class="whitespace-nowrap px-3 py-2">
                <TimeOrNever at=key.expires_at />
                {expiry_form}
            </td>
            <td class="whitespace-nowrap px-3 py-2">
                <TimeOrNever at=key.last_used_at />
            </td>
            <td class="whitespace-nowrap px-3 py-2 text-right">
                {switch}
                {live.then(|| view! {
                    <Confirm summary="Revoke…".to_owned()>
                        <p>{format!("Key {label} stops working at once, for good. Its records stay.")}</p>
                        <ActionForm action=actions.revoke attr:class="mt-2">
                            <input type="hidden" name="id" value=id.to_string() />
                            <button type="submit" class=DANGER_BUTTON>{format!("Revoke key {label}")}</button>
                        </ActionForm>
                    </Confirm>
                })}
            </td>
        </tr>
    }
}
