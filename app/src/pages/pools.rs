//! Admin -> Pools (ID-4): each resource group with its members, its accounts and its model policy
//! (every model, only the listed ones, or all but the listed ones; aliases that map a name clients
//! send to a real model id). Create, rename, change members and policy in one form per pool, delete
//! behind a confirmation. A refused value is explained beside its field. Plain forms posting to
//! server functions, so everything works without JavaScript too.

use std::collections::BTreeMap;

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{
        Confirm, ErrorNote, FieldError, FormError, PageHeader, UnaimedError,
        style::{BUTTON, DANGER_BUTTON, INPUT},
        successes,
    },
    error::AppError,
    model::{AccountChoice, MemberView, PolicyMode, PoolView},
    rpc::{CreatePool, DeletePool, SavePool, list_account_choices, list_members, list_pools},
};

/// The fields of a pool's form that show their own errors.
const POOL_FIELDS: &[&str] = &["name", "member_ids", "model_policy.models", "model_policy.aliases"];

#[component]
pub fn PoolsPage() -> impl IntoView {
    let create = ServerAction::<CreatePool>::new();
    let save = ServerAction::<SavePool>::new();
    let delete = ServerAction::<DeletePool>::new();
    // The pool whose form was sent last: its refusal is shown in its card only.
    let target = RwSignal::new(None::<i64>);
    // One server function per resource: each reads its request context on its first poll.
    let (create_ok, save_ok) = (successes(create), successes(save));
    let pools =
        Resource::new(move || (create_ok.get(), save_ok.get(), delete.version().get()), |_| list_pools());
    let members = Resource::new(move || save_ok.get(), |_| list_members());
    let accounts = Resource::new(|| (), |_| list_account_choices());
    let created: Signal<Option<Result<PoolView, AppError>>> = create.value().into();

    view! {
        <Title text="Pools" />
        <PageHeader title="Pools" description="Resource groups: which members may use which accounts, and which models." />

        <section aria-labelledby="new-pool" class="mb-8 rounded-lg border border-slate-200 bg-white p-5">
            <h2 id="new-pool" class="mb-3 text-base font-semibold">"Create a pool"</h2>
            <ActionForm action=create>
                <div class="flex flex-wrap items-end gap-3">
                    <div class="w-64">
                        <label for="pool-name" class="block text-sm font-medium">"Name"</label>
                        <input id="pool-name" name="name" required maxlength="64" aria-describedby="pool-name-error" class=INPUT />
                    </div>
                    <button type="submit" class=BUTTON disabled=move || create.pending().get()>"Create pool"</button>
                </div>
                <FieldError result=created field="name" id="pool-name-error".to_owned() />
                <FormError result=created fields=&["name"] />
            </ActionForm>
            <p class="mt-2 text-xs text-slate-500">"Then add members below, and accounts from the Accounts page."</p>
        </section>

        {move || delete.value().get().map(|r| match r {
            Ok(d) => Either::Left(view! {
                <p role="status" class="mb-3 text-sm text-emerald-800">{format!("Pool deleted; {} API keys revoked.", d.revoked_keys)}</p>
            }),
            Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
        })}
        {move || save.value().get().and_then(|r| r.ok()).map(|p| view! {
            <p role="status" class="mb-3 text-sm text-emerald-800">{format!("Saved {}; the next request follows it.", p.name)}</p>
        })}
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading pools…"</p> }>
            {move || Suspend::new(async move {
                match (pools.await, members.await, accounts.await) {
                    (Ok(pools), ..) if pools.is_empty() => Either::Left(view! {
                        <p class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">"No pools yet."</p>
                    }.into_any()),
                    (Ok(pools), Ok(members), Ok(accounts)) => {
                        let account_names: BTreeMap<i64, String> = accounts.into_iter().map(|a: AccountChoice| (a.id, a.name)).collect();
                        let cards: Vec<(PoolView, Vec<MemberView>, Vec<String>)> = pools.into_iter().map(|pool| {
                            let accounts = pool.account_ids.iter()
                                .map(|id| account_names.get(id).cloned().unwrap_or_else(|| format!("#{id}")))
                                .collect();
                            (pool, members.clone(), accounts)
                        }).collect();
                        // Keyed by everything a card shows: an unchanged card keeps its element
                        // (and what is typed into it), a deleted one goes away without its open
                        // confirmation sliding onto the next.
                        Either::Left(view! {
                            <UnaimedError result=Signal::derive(move || save.value().get()) row=target.into() />
                            <div class="space-y-6">
                                <For
                                    each=move || cards.clone()
                                    key=|card| card.clone()
                                    children=move |(pool, members, accounts)| view! { <PoolCard pool members accounts save delete target /> }
                                />
                            </div>
                        }.into_any())
                    }
                    (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn PoolCard(
    pool: PoolView,
    members: Vec<MemberView>,
    accounts: Vec<String>,
    save: ServerAction<SavePool>,
    delete: ServerAction<DeletePool>,
    target: RwSignal<Option<i64>>,
) -> impl IntoView {
    let id = pool.id;
    let name = pool.name.clone();
    let aim = move |_| target.set(Some(id));
    let saved: Signal<Option<Result<PoolView, AppError>>> =
        Signal::derive(move || if target.get() == Some(id) { save.value().get() } else { None });
    let field_id = move |f: &str| format!("pool-{id}-{f}");
    let policy = pool.model_policy.clone();
    let delete_summary = format!("Delete {name}…");
    let delete_text = format!(
        "Every API key that targets {name} is revoked at once; its members and accounts leave it \
         (the accounts stay, in their other pools). Request records keep their history."
    );
    let delete_button = format!("Delete {name}");
    let save_label = format!("Save {name}");
    let name_value = name.clone();
    let models_text = policy.models.join("\n");
    let aliases_text =
        policy.aliases.iter().map(|(a, m)| format!("{a} = {m}")).collect::<Vec<_>>().join("\n");
    let mode_choice = move |mode: PolicyMode, label: &'static str| {
        let checked = policy.mode == mode;
        view! {
            <label class="mr-4 inline-flex items-center gap-1.5 text-sm">
                <input type="radio" name="mode" value=mode.as_str() checked=checked />
                {label}
            </label>
        }
    };
    view! {
        <section aria-labelledby=field_id("title") class="rounded-lg border border-slate-200 bg-white p-5" data-pool=name.clone()>
            <div class="mb-3 flex flex-wrap items-baseline justify-between gap-2">
                <h2 id=field_id("title") class="text-base font-semibold">{name.clone()}</h2>
                <p class="text-xs text-slate-500">
                    {format!("{} members · {} accounts", pool.member_ids.len(), pool.account_ids.len())}
                </p>
            </div>
            <ActionForm action=save>
                <input type="hidden" name="id" value=id.to_string() />
                <div class="grid gap-5 md:grid-cols-2">
                    <div>
                        <label for=field_id("name") class="block text-sm font-medium">"Name"</label>
                        <input id=field_id("name") name="name" required maxlength="64" value=name_value
                            aria-describedby=field_id("name-error") class=INPUT />
                        <FieldError result=saved field="name" id=field_id("name-error") />

                        <fieldset class="mt-4 text-sm" aria-describedby=field_id("members-error")>
                            <legend class="font-medium">"Members who may use it"</legend>
                            {members.into_iter().map(|m| {
                                let checked = pool.member_ids.contains(&m.id);
                                view! {
                                    <input type="hidden" name=format!("shown[{}]", m.id) value="on" />
                                    <label class="mr-4 mt-1 inline-flex items-center gap-1.5">
                                        <input type="checkbox" name=format!("members[{}]", m.id) value="on" checked=checked />
                                        {m.username}
                                    </label>
                                }
                            }).collect_view()}
                            <FieldError result=saved field="member_ids" id=field_id("members-error") />
                        </fieldset>

                        <div class="mt-4 text-sm">
                            <p class="font-medium">"Accounts serving it"</p>
                            <p class="mt-1 text-slate-700" data-testid="pool-accounts">
                                {if accounts.is_empty() { "none yet (choose pools on an account's card)".to_owned() } else { accounts.join(", ") }}
                            </p>
                        </div>
                    </div>
                    <div>
                        <fieldset class="text-sm">
                            <legend class="font-medium">"Models"</legend>
                            {mode_choice(PolicyMode::All, "Every model")}
                            {mode_choice(PolicyMode::Allow, "Only those listed")}
                            {mode_choice(PolicyMode::Deny, "All but those listed")}
                        </fieldset>
                        <label for=field_id("models") class="mt-3 block text-sm font-medium">"Listed models (one per line)"</label>
                        <textarea id=field_id("models") name="models" rows="4" spellcheck="false"
                            aria-describedby=field_id("models-error") class=format!("{INPUT} font-mono") inner_html=escape(&models_text)></textarea>
                        <FieldError result=saved field="model_policy.models" id=field_id("models-error") />
                        <label for=field_id("aliases") class="mt-3 block text-sm font-medium">"Aliases (alias = model, one per line)"</label>
                        <textarea id=field_id("aliases") name="aliases" rows="3" spellcheck="false" placeholder="fast = gpt-5-mini"
                            aria-describedby=field_id("aliases-error") class=format!("{INPUT} font-mono") inner_html=escape(&aliases_text)></textarea>
                        <FieldError result=saved field="model_policy.aliases" id=field_id("aliases-error") />
                    </div>
                </div>
                <button type="submit" on:click=aim class=format!("mt-4 {BUTTON}") disabled=move || save.pending().get()>
                    {save_label}
                </button>
                <FormError result=saved fields=POOL_FIELDS />
            </ActionForm>
            <div class="mt-4 border-t border-slate-100 pt-3">
                <Confirm summary=delete_summary>
                    <p>{delete_text}</p>
                    <ActionForm action=delete attr:class="mt-2">
                        <input type="hidden" name="id" value=id.to_string() />
                        <button type="submit" class=DANGER_BUTTON>{delete_button}</button>
                    </ActionForm>
                </Confirm>
            </div>
        </section>
    }
}

/// Text for a `<textarea>`'s content. It is set as inner HTML, which hydration leaves alone (two
/// textareas with text children failed to hydrate), so it is escaped here.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
