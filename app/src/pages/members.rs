//! Admin -> Members (UI-4, API-1): everyone in the workspace with role, state, limits and pools;
//! add a member (with their pools), change role and limits, switch off or on, set a new password,
//! delete. Every action is a form posting to a server function, so it also works without
//! JavaScript; hydrated, the list refreshes in place (rows keyed by their contents, so an open
//! panel never slides onto another member) and a refused value is explained beside its field.

use std::collections::BTreeMap;

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{
        Confirm, ErrorNote, FieldError, FormError, Me, PageHeader, Timestamp, UnaimedError,
        style::{BUTTON, DANGER_BUTTON, INPUT, SMALL_BUTTON, SUMMARY},
        successes,
    },
    error::AppError,
    model::{MemberView, PoolView, Role},
    rpc::{
        CreateMember, DeleteMember, ResetMemberPassword, SaveMember, SetMemberEnabled, list_members,
        list_pools,
    },
};

/// The row forms' actions, shared by every row, each with the member whose form it sent last, so
/// an answer is shown in that row only.
#[derive(Clone, Copy)]
struct RowActions {
    save: Aimed<SaveMember>,
    toggle: ServerAction<SetMemberEnabled>,
    password: Aimed<ResetMemberPassword>,
    delete: ServerAction<DeleteMember>,
}

/// A row action and the row (member id) that sent it last.
struct Aimed<A: leptos::server_fn::ServerFn + 'static> {
    action: ServerAction<A>,
    row: RwSignal<Option<i64>>,
}

impl<A: leptos::server_fn::ServerFn + 'static> Clone for Aimed<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: leptos::server_fn::ServerFn + 'static> Copy for Aimed<A> {}

impl<A> Aimed<A>
where
    A: leptos::server_fn::ServerFn<Error = AppError> + Clone + Send + Sync + 'static,
    A::Output: Clone + Send + Sync + 'static,
{
    fn new() -> Self {
        Aimed { action: ServerAction::new(), row: RwSignal::new(None) }
    }

    /// The action's answer, for row `id` only.
    fn for_row(self, id: i64) -> Signal<Option<Result<A::Output, AppError>>> {
        Signal::derive(move || if self.row.get() == Some(id) { self.action.value().get() } else { None })
    }
}

#[component]
pub fn MembersPage() -> impl IntoView {
    let create = ServerAction::<CreateMember>::new();
    let rows = RowActions {
        save: Aimed::new(),
        toggle: ServerAction::new(),
        password: Aimed::new(),
        delete: ServerAction::new(),
    };
    let (create_ok, save_ok, toggle_ok) =
        (successes(create), successes(rows.save.action), successes(rows.toggle));
    let members = Resource::new(
        move || (create_ok.get(), save_ok.get(), toggle_ok.get(), rows.delete.version().get()),
        |_| list_members(),
    );
    // One server function per resource: each reads its request context on its first poll.
    let pools =
        Resource::new(move || (create.version().get(), rows.delete.version().get()), |_| list_pools());
    let created: Signal<Option<Result<MemberView, AppError>>> = create.value().into();

    view! {
        <Title text="Members" />
        <PageHeader title="Members" description="People in this workspace: their role, limits and pools." />

        <section aria-labelledby="new-member" class="mb-8 rounded-lg border border-slate-200 bg-white p-5">
            <h2 id="new-member" class="mb-3 text-base font-semibold">"Add a member"</h2>
            <ActionForm action=create>
                <div class="grid gap-4 md:grid-cols-3">
                    <div>
                        <label for="member-username" class="block text-sm font-medium">"Username"</label>
                        <input id="member-username" name="username" required maxlength="64" autocomplete="off"
                            aria-describedby="member-username-error" class=INPUT />
                        <FieldError result=created field="username" id="member-username-error".to_owned() />
                    </div>
                    <div>
                        <label for="member-password" class="block text-sm font-medium">"Password"</label>
                        <input id="member-password" name="password" type="password" required autocomplete="new-password"
                            aria-describedby="member-password-error" class=INPUT />
                        <FieldError result=created field="password" id="member-password-error".to_owned() />
                    </div>
                    <div>
                        <label for="member-role" class="block text-sm font-medium">"Role"</label>
                        <select id="member-role" name="role" class=INPUT>
                            <option value="member" selected>"Member"</option>
                            <option value="admin">"Admin"</option>
                        </select>
                    </div>
                    <div>
                        <label for="member-concurrency" class="block text-sm font-medium">"Concurrent requests"</label>
                        <input id="member-concurrency" name="concurrency_limit" type="number" min="0" max="1000" placeholder="10"
                            aria-describedby="member-concurrency-help member-concurrency-error" class=INPUT />
                        <p id="member-concurrency-help" class="mt-1 text-xs text-slate-500">"Empty: 10. 0: no limit."</p>
                        <FieldError result=created field="concurrency_limit" id="member-concurrency-error".to_owned() />
                    </div>
                    <div>
                        <label for="member-rpm" class="block text-sm font-medium">"Requests per minute"</label>
                        <input id="member-rpm" name="rpm_limit" type="number" min="1" placeholder="no limit"
                            aria-describedby="member-rpm-error" class=INPUT />
                        <FieldError result=created field="rpm_limit" id="member-rpm-error".to_owned() />
                    </div>
                    <fieldset class="text-sm" aria-describedby="member-pools-error">
                        <legend class="font-medium">"Pools"</legend>
                        <Suspense fallback=|| ()>
                            {move || Suspend::new(async move {
                                let pools = pools.await.unwrap_or_default();
                                view! { <PoolChecks pools chosen=vec![] /> }
                            })}
                        </Suspense>
                        <FieldError result=created field="pool_ids" id="member-pools-error".to_owned() />
                    </fieldset>
                </div>
                <button type="submit" class=format!("mt-4 {BUTTON}") disabled=move || create.pending().get()>"Add member"</button>
                <FormError result=created fields=&["username", "password", "concurrency_limit", "rpm_limit", "pool_ids"] />
            </ActionForm>
            {move || created.get().and_then(|r| r.ok()).map(|m| view! {
                <p role="status" class="mt-3 text-sm text-emerald-800">
                    {format!("Added {}. They can sign in now with the password you chose.", m.username)}
                </p>
            })}
        </section>

        <section aria-labelledby="member-list">
            <h2 id="member-list" class="mb-3 text-base font-semibold">"Members"</h2>
            {move || rows.toggle.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
            {move || rows.delete.value().get().map(|r| match r {
                Ok(d) => Either::Left(view! {
                    <p role="status" class="mb-2 text-sm text-emerald-800">
                        {format!("Deleted; {} of their API keys revoked.", d.revoked_keys)}
                    </p>
                }),
                Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
            })}
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading members…"</p> }>
                {move || Suspend::new(async move {
                    match (members.await, pools.await) {
                        (Ok(members), Ok(pools)) => Either::Left(view! { <MemberTable members pools rows /> }),
                        (Err(e), _) | (_, Err(e)) => Either::Right(view! { <ErrorNote message=e.message /> }),
                    }
                })}
            </Transition>
        </section>
    }
}

/// Checkboxes `pools[<id>]` (a plain form sends the checked ones).
#[component]
fn PoolChecks(pools: Vec<PoolView>, chosen: Vec<i64>) -> impl IntoView {
    if pools.is_empty() {
        return Either::Left(view! { <p class="mt-1 text-xs text-slate-500">"No pools yet."</p> });
    }
    Either::Right(
        pools
            .into_iter()
            .map(|p| {
                let checked = chosen.contains(&p.id);
                view! {
                    <label class="mr-4 mt-1 inline-flex items-center gap-1.5">
                        <input type="checkbox" name=format!("pools[{}]", p.id) value="on" checked=checked />
                        {p.name}
                    </label>
                }
            })
            .collect_view(),
    )
}

#[component]
fn MemberTable(members: Vec<MemberView>, pools: Vec<PoolView>, rows: RowActions) -> impl IntoView {
    let mut pools_of: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for p in &pools {
        for m in &p.member_ids {
            pools_of.entry(*m).or_default().push(p.name.clone());
        }
    }
    let (save, password) = (rows.save, rows.password);
    view! {
        <UnaimedError result=Signal::derive(move || save.action.value().get()) row=save.row.into() />
        <UnaimedError result=Signal::derive(move || password.action.value().get()) row=password.row.into() />
        <div class="overflow-x-auto rounded-lg border border-slate-200 bg-white">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="members-table">
                <thead class="bg-slate-50">
                    <tr>
                        {["Username", "Role", "State", "Concurrent", "Per minute", "Pools", "Added", ""].into_iter().map(|c| view! {
                            <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{c}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    // Keyed by everything a row shows: an unchanged row keeps its element (and an
                    // open panel), a changed or new one is drawn afresh, a deleted one goes away.
                    <For
                        each=move || {
                            members.clone().into_iter().map(|m| {
                                let pools = pools_of.get(&m.id).cloned().unwrap_or_default();
                                (m, pools)
                            }).collect::<Vec<_>>()
                        }
                        key=|row| row.clone()
                        children=move |(m, pools)| view! { <MemberRow m pools rows /> }
                    />
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn MemberRow(m: MemberView, pools: Vec<String>, rows: RowActions) -> impl IntoView {
    let id = m.id;
    let name = m.username.clone();
    let is_me = use_context::<Me>().is_some_and(|me| me.0.id == id);
    let aim_save = move |_| rows.save.row.set(Some(id));
    let aim_password = move |_| rows.password.row.set(Some(id));
    let saved = rows.save.for_row(id);
    let password_result = rows.password.for_row(id);
    let field_id = move |f: &str| format!("member-{id}-{f}");
    let role = m.role;
    let switch_text = if m.enabled { "Disable" } else { "Enable" };
    let edit_label = format!("Edit {name}");
    let password_label = format!("Set a new password for {name}");
    let switch_label = format!("{switch_text} {name}");
    let delete_summary = format!("Delete {name}…");
    let delete_text = format!(
        "{name} is signed out, their API keys are revoked at once and they leave every pool. Their \
         request records stay until they age out, shown as \u{201c}{name} (deleted)\u{201d}. The \
         username becomes free again. To keep their keys for later, disable them instead."
    );
    let delete_button = format!("Delete {name}");
    view! {
        <tr data-member=m.username.clone() class="align-top">
            <th scope="row" class="px-3 py-2 text-left font-medium">{m.username.clone()}</th>
            <td class="px-3 py-2">{if m.role == Role::Admin { "admin" } else { "member" }}</td>
            <td class="px-3 py-2">
                {if m.enabled {
                    Either::Left(view! { <span class="rounded bg-emerald-100 px-2 py-0.5 text-xs font-medium text-emerald-800">"enabled"</span> })
                } else {
                    Either::Right(view! { <span class="rounded bg-slate-200 px-2 py-0.5 text-xs font-medium text-slate-700">"disabled"</span> })
                }}
            </td>
            <td class="px-3 py-2 tabular-nums">{if m.concurrency_limit == 0 { "no limit".to_owned() } else { m.concurrency_limit.to_string() }}</td>
            <td class="px-3 py-2 tabular-nums">{m.rpm_limit.map_or_else(|| "no limit".to_owned(), |v| v.to_string())}</td>
            <td class="px-3 py-2">{if pools.is_empty() { "none".to_owned() } else { pools.join(", ") }}</td>
            <td class="whitespace-nowrap px-3 py-2"><Timestamp at=m.created_at /></td>
            <td class="space-y-2 px-3 py-2 text-right">
                <details class="text-left">
                    <summary class=SUMMARY aria-label=edit_label>"Edit"</summary>
                    <ActionForm action=rows.save.action attr:class="mt-2 grid w-64 gap-2">
                        <input type="hidden" name="id" value=id.to_string() />
                        <label class="text-xs font-medium" for=field_id("role")>"Role"</label>
                        <select id=field_id("role") name="role" class=INPUT>
                            <option value="member" selected=role == Role::Member>"Member"</option>
                            <option value="admin" selected=role == Role::Admin>"Admin"</option>
                        </select>
                        <label class="text-xs font-medium" for=field_id("concurrency")>"Concurrent requests (0: no limit)"</label>
                        <input id=field_id("concurrency") name="concurrency_limit" type="number" min="0" max="1000" required
                            value=m.concurrency_limit.to_string() aria-describedby=field_id("concurrency-error") class=INPUT />
                        <FieldError result=saved field="concurrency_limit" id=field_id("concurrency-error") />
                        <label class="text-xs font-medium" for=field_id("rpm")>"Requests per minute (empty: no limit)"</label>
                        <input id=field_id("rpm") name="rpm_limit" type="number" min="1"
                            value=m.rpm_limit.map(|v| v.to_string()).unwrap_or_default() aria-describedby=field_id("rpm-error") class=INPUT />
                        <FieldError result=saved field="rpm_limit" id=field_id("rpm-error") />
                        <button type="submit" on:click=aim_save class=SMALL_BUTTON>"Save"</button>
                        <FormError result=saved fields=&["concurrency_limit", "rpm_limit"] />
                    </ActionForm>
                </details>
                <details class="text-left">
                    <summary class=SUMMARY aria-label=password_label>"New password"</summary>
                    <ActionForm action=rows.password.action attr:class="mt-2 grid w-64 gap-2">
                        <input type="hidden" name="id" value=id.to_string() />
                        <label class="text-xs font-medium" for=field_id("password")>
                            {if is_me { "New password (signs you out everywhere, here too)" } else { "New password (signs them out)" }}
                        </label>
                        <input id=field_id("password") name="password" type="password" required autocomplete="new-password"
                            aria-describedby=field_id("password-error") class=INPUT />
                        <FieldError result=password_result field="password" id=field_id("password-error") />
                        <button type="submit" on:click=aim_password class=SMALL_BUTTON>"Set password"</button>
                        {move || password_result.get().and_then(|r| r.ok()).map(|_| view! {
                            <p role="status" class="text-xs text-emerald-800">"Password set; their sessions have ended."</p>
                        })}
                    </ActionForm>
                </details>
                // Nobody switches themselves off or deletes themselves (another admin can).
                {(!is_me).then(|| view! {
                    <ActionForm action=rows.toggle attr:class="inline">
                        <input type="hidden" name="id" value=id.to_string() />
                        <input type="hidden" name="enabled" value=(!m.enabled).to_string() />
                        <button type="submit" aria-label=switch_label class=SMALL_BUTTON>{switch_text}</button>
                    </ActionForm>
                    <Confirm summary=delete_summary>
                        <p>{delete_text}</p>
                        <ActionForm action=rows.delete attr:class="mt-2">
                            <input type="hidden" name="id" value=id.to_string() />
                            <button type="submit" class=DANGER_BUTTON>{delete_button}</button>
                        </ActionForm>
                    </Confirm>
                })}
            </td>
        </tr>
    }
}
