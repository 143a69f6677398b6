//! Budgets (BUD-1, UI-4): the admin's Budgets page (every policy with its usage against the limit;
//! create, change the limit, delete; the price table behind `credits`), the pieces the Keys page
//! uses for a key's own budget, and the "My quota" card of the Requests page. Plain forms posting
//! to server functions, so everything works without JavaScript too.

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{
        Confirm, ErrorNote, FieldError, FormError, PageHeader, Timestamp, UnaimedError,
        style::{BUTTON, DANGER_BUTTON, INPUT, SMALL_BUTTON},
        successes,
    },
    error::AppError,
    model::{ApiKeyView, BudgetView, KeyFilter, KeyStatus, MemberView, PriceView},
    rpc::{
        CreateBudget, DeleteBudget, DeletePrice, SetBudgetLimit, SetPrice, list_all_keys, list_budgets,
        list_members, list_prices, my_quota,
    },
};

/// The actions on budget rows and the create form, shared by the Budgets and Keys pages.
#[derive(Clone, Copy)]
pub struct BudgetActions {
    pub create: ServerAction<CreateBudget>,
    pub limit: ServerAction<SetBudgetLimit>,
    pub delete: ServerAction<DeleteBudget>,
    /// The row whose limit form was sent last: its refusal is shown in that row only.
    limit_row: RwSignal<Option<i64>>,
}

impl BudgetActions {
    pub fn new() -> Self {
        BudgetActions {
            create: ServerAction::new(),
            limit: ServerAction::new(),
            delete: ServerAction::new(),
            limit_row: RwSignal::new(None),
        }
    }

    /// Changes whenever a budget was created, changed or deleted (lists reload on it).
    pub fn changed(self) -> impl Fn() -> (u32, u32, usize) + Copy {
        let created = successes(self.create);
        let limited = successes(self.limit);
        move || (created.get(), limited.get(), self.delete.version().get())
    }
}

#[component]
pub fn BudgetsPage() -> impl IntoView {
    let actions = BudgetActions::new();
    let changed = actions.changed();
    let budgets = Resource::new(changed, |_| list_budgets());
    // One server function per resource: each reads its request context on its first poll.
    let members = Resource::new(|| (), |_| list_members());
    let keys = Resource::new(|| (), |_| list_all_keys(KeyFilter::default()));
    view! {
        <Title text="Budgets" />
        <PageHeader title="Budgets" description="Limits on requests, tokens or credits for a key, a member or the whole workspace. A call that crosses a limit completes; the next one is refused until the window resets." />
        <section aria-labelledby="new-budget" class="mb-8 rounded-lg border border-slate-200 bg-white p-5">
            <h2 id="new-budget" class="mb-3 text-base font-semibold">"Add a budget"</h2>
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match (members.await, keys.await) {
                        (Ok(members), Ok(keys)) => Either::Left(view! { <NewBudgetForm actions targets=admin_targets(members, keys) /> }),
                        (Err(e), _) | (_, Err(e)) => Either::Right(view! { <ErrorNote message=e.message /> }),
                    }
                })}
            </Transition>
        </section>
        <section aria-labelledby="budgets" class="mb-8">
            <h2 id="budgets" class="mb-3 text-base font-semibold">"Budgets in force"</h2>
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading budgets…"</p> }>
                {move || Suspend::new(async move {
                    match budgets.await {
                        Ok(list) => Either::Left(view! { <BudgetTable budgets=list actions empty="No budgets yet: nothing is limited beyond member concurrency and RPM." /> }),
                        Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                    }
                })}
            </Transition>
        </section>
        <PriceTable />
    }
}

/// Whom a budget may be for, as `(target, label)` grouped by kind: the workspace, every member,
/// every live key.
fn admin_targets(
    members: Vec<MemberView>,
    keys: Vec<ApiKeyView>,
) -> Vec<(&'static str, Vec<(String, String)>)> {
    let owner =
        |id: i64| members.iter().find(|m| m.id == id).map_or("deleted member", |m| m.username.as_str());
    let keys = keys
        .iter()
        .filter(|k| k.status != KeyStatus::Revoked)
        .map(|k| (format!("apikey:{}", k.id), format!("{} ({})", k.name, owner(k.member_id))))
        .collect();
    let members = members.iter().map(|m| (format!("member:{}", m.id), m.username.clone())).collect();
    vec![
        ("Workspace", vec![("ws".to_owned(), "Whole workspace".to_owned())]),
        ("Members", members),
        ("API keys", keys),
    ]
}

/// The create form: whom (from `targets`), metric, window (with minutes), limit.
#[component]
pub fn NewBudgetForm(
    actions: BudgetActions,
    targets: Vec<(&'static str, Vec<(String, String)>)>,
) -> impl IntoView {
    let result: Signal<Option<Result<BudgetView, AppError>>> = actions.create.value().into();
    let described = |f: &str| format!("new-budget-{f}-error");
    view! {
        <ActionForm action=actions.create>
            <div class="grid gap-4 md:grid-cols-[2fr_1.3fr_1fr_0.8fr_1fr_auto] md:items-start">
                <div>
                    <label for="new-budget-target" class="block text-sm font-medium">"For"</label>
                    <select id="new-budget-target" name="target" class=INPUT aria-describedby=described("subject_id")>
                        {targets.into_iter().filter(|(_, items)| !items.is_empty()).map(|(group, items)| view! {
                            <optgroup label=group>
                                {items.into_iter().map(|(value, label)| view! { <option value=value>{label}</option> }).collect_view()}
                            </optgroup>
                        }).collect_view()}
                    </select>
                    <FieldError result field="subject_id" id=described("subject_id") />
                </div>
                <div>
                    <label for="new-budget-metric" class="block text-sm font-medium">"Counts"</label>
                    <select id="new-budget-metric" name="metric" class=INPUT aria-describedby=described("metric")>
                        <option value="requests">"Requests"</option>
                        <option value="total_tokens">"Total tokens"</option>
                        <option value="prompt_tokens">"Prompt tokens"</option>
                        <option value="completion_tokens">"Completion tokens"</option>
                        <option value="credits">"Credits"</option>
                    </select>
                    <FieldError result field="metric" id=described("metric") />
                </div>
                <div>
                    <label for="new-budget-window" class="block text-sm font-medium">"Per"</label>
                    <select id="new-budget-window" name="window" class=INPUT aria-describedby=described("window")>
                        <option value="day">"Day"</option>
                        <option value="month">"Month"</option>
                        <option value="minute">"Minute"</option>
                        <option value="minutes">"N minutes"</option>
                        <option value="total">"Total (never resets)"</option>
                    </select>
                    <FieldError result field="window" id=described("window") />
                </div>
                <div>
                    <label for="new-budget-minutes" class="block text-sm font-medium">"N (minutes)"</label>
                    <input id="new-budget-minutes" name="window_minutes" inputmode="numeric" placeholder="15" class=INPUT aria-describedby=described("window_minutes") />
                    <FieldError result field="window_minutes" id=described("window_minutes") />
                </div>
                <div>
                    <label for="new-budget-limit" class="block text-sm font-medium">"Limit"</label>
                    <input id="new-budget-limit" name="limit" required inputmode="decimal" placeholder="300" class=INPUT aria-describedby=described("limit") />
                    <FieldError result field="limit" id=described("limit") />
                </div>
                <button type="submit" class=format!("md:mt-6 {BUTTON}") disabled=move || actions.create.pending().get()>"Add budget"</button>
            </div>
            <div class="mt-2"><FormError result fields=&["subject_id", "metric", "window", "window_minutes", "limit"] /></div>
        </ActionForm>
    }
}

/// Budgets with their usage; the limit can be changed in place, a budget deleted.
#[component]
pub fn BudgetTable(budgets: Vec<BudgetView>, actions: BudgetActions, empty: &'static str) -> impl IntoView {
    if budgets.is_empty() {
        return Either::Left(view! {
            <p class="rounded-lg border border-dashed border-slate-300 bg-white p-6 text-sm text-slate-600">{empty}</p>
        });
    }
    let limit = actions.limit;
    Either::Right(view! {
        {move || actions.delete.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
        <UnaimedError result=Signal::derive(move || limit.value().get()) row=actions.limit_row.into() />
        <div class="overflow-x-auto rounded-lg border border-slate-200 bg-white">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="budgets-table">
                <thead class="bg-slate-50">
                    <tr>
                        {["For", "Limit", "Used", "Remaining", "Resets", ""].into_iter().map(|c| view! {
                            <th scope="col" class="whitespace-nowrap px-3 py-2 text-left font-medium text-slate-600">{c}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    <For each=move || budgets.clone() key=|b| (b.id, b.limit.to_bits(), b.used.to_bits()) children=move |b| view! { <BudgetRow b actions /> } />
                </tbody>
            </table>
        </div>
    })
}

#[component]
fn BudgetRow(b: BudgetView, actions: BudgetActions) -> impl IntoView {
    let id = b.id;
    let what = format!("{} — {}", b.subject_name, b.describe());
    let field = format!("budget-{id}-limit");
    let error_id = format!("{field}-error");
    let described_by = error_id.clone();
    let limit_text = b.limit.to_string();
    let result: Signal<Option<Result<BudgetView, AppError>>> =
        Signal::derive(
            move || {
                if actions.limit_row.get() == Some(id) { actions.limit.value().get() } else { None }
            },
        );
    let over = b.remaining <= 0.0;
    let changeable = b.changeable;
    let label = what.clone();
    view! {
        <tr data-budget-id=id.to_string() class="align-top">
            <th scope="row" class="px-3 py-2 text-left font-medium">
                {b.subject_name.clone()}
                <span class="ml-1 text-xs font-normal text-slate-500">{format!("({})", b.subject)}</span>
            </th>
            <td class="px-3 py-2">
                <span>{b.describe()}</span>
                {changeable.then(|| view! {
                    <ActionForm action=actions.limit attr:class="mt-1 flex items-center gap-1">
                        <input type="hidden" name="id" value=id.to_string() />
                        <label for=field.clone() class="sr-only">{format!("New limit of {label}")}</label>
                        <input id=field.clone() name="limit" value=limit_text.clone() inputmode="decimal" aria-describedby=described_by.clone()
                            class="w-24 rounded-md border border-slate-300 px-1.5 py-1 text-xs" />
                        <button type="submit" on:click=move |_| actions.limit_row.set(Some(id)) class=SMALL_BUTTON>"Set"</button>
                    </ActionForm>
                    <FieldError result field="limit" id=error_id.clone() />
                })}
            </td>
            <td class="px-3 py-2 tabular-nums">{b.used.to_string()}</td>
            <td class=if over { "px-3 py-2 tabular-nums font-medium text-red-700" } else { "px-3 py-2 tabular-nums" }>
                {b.remaining.to_string()}
                {over.then(|| view! { <span class="ml-1 text-xs">"(refusing)"</span> })}
            </td>
            <td class="whitespace-nowrap px-3 py-2">
                {match b.reset_at {
                    Some(at) => Either::Left(view! { <Timestamp at /> }),
                    None => Either::Right(view! { <span class="text-slate-400">"never"</span> }),
                }}
            </td>
            <td class="whitespace-nowrap px-3 py-2 text-right">
                {if changeable {
                    Either::Left(view! {
                        <Confirm summary="Delete…".to_owned()>
                            <p>{format!("{what}: calls are no longer limited by it, and its count is forgotten.")}</p>
                            <ActionForm action=actions.delete attr:class="mt-2">
                                <input type="hidden" name="id" value=id.to_string() />
                                <button type="submit" class=DANGER_BUTTON>{format!("Delete budget {what}")}</button>
                            </ActionForm>
                        </Confirm>
                    })
                } else {
                    Either::Right(view! { <span class="text-xs text-slate-500">"set by an admin"</span> })
                }}
            </td>
        </tr>
    }
}

/// The price table behind `credits`: every price with where it comes from; set one, or remove a
/// price set here (the configuration file's applies again).
#[component]
fn PriceTable() -> impl IntoView {
    let set = ServerAction::<SetPrice>::new();
    let delete = ServerAction::<DeletePrice>::new();
    let set_ok = successes(set);
    let prices = Resource::new(move || (set_ok.get(), delete.version().get()), |_| list_prices());
    let result: Signal<Option<Result<Vec<PriceView>, AppError>>> = set.value().into();
    view! {
        <section aria-labelledby="prices" class="rounded-lg border border-slate-200 bg-white p-5">
            <h2 id="prices" class="text-base font-semibold">"Prices for credits"</h2>
            <p class="mb-3 mt-1 text-sm text-slate-600">"Credits per million tokens. "<code>"*"</code>" prices every model without a price of its own; a model with no price costs no credits."</p>
            {move || delete.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNote message=e.message /> })}
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading prices…"</p> }>
                {move || Suspend::new(async move {
                    match prices.await {
                        Ok(list) if list.is_empty() => Either::Left(Either::Left(view! { <p class="text-sm text-slate-600">"No prices yet."</p> })),
                        Ok(list) => Either::Left(Either::Right(view! {
                            <table class="mb-4 min-w-full divide-y divide-slate-200 text-sm" data-testid="prices-table">
                                <thead><tr>
                                    {["Model", "Prompt", "Cached prompt", "Completion", "Set in", ""].into_iter().map(|c| view! {
                                        <th scope="col" class="px-3 py-2 text-left font-medium text-slate-600">{c}</th>
                                    }).collect_view()}
                                </tr></thead>
                                <tbody class="divide-y divide-slate-100">
                                    {list.into_iter().map(|p| {
                                        let from_app = p.source == "app";
                                        let model = p.model.clone();
                                        view! {
                                            <tr>
                                                <th scope="row" class="px-3 py-2 text-left font-mono text-xs font-medium">{p.model.clone()}</th>
                                                <td class="px-3 py-2 tabular-nums">{p.prompt.to_string()}</td>
                                                <td class="px-3 py-2 tabular-nums">{p.cached.map_or_else(|| "as prompt".to_owned(), |c| c.to_string())}</td>
                                                <td class="px-3 py-2 tabular-nums">{p.completion.to_string()}</td>
                                                <td class="px-3 py-2">{if from_app { "this page" } else { "configuration file" }}</td>
                                                <td class="px-3 py-2 text-right">
                                                    {from_app.then(|| view! {
                                                        <ActionForm action=delete>
                                                            <input type="hidden" name="model" value=model.clone() />
                                                            <button type="submit" class=DANGER_BUTTON>{format!("Remove price of {model}")}</button>
                                                        </ActionForm>
                                                    })}
                                                </td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                        })),
                        Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                    }
                })}
            </Transition>
            <ActionForm action=set>
                <div class="grid gap-3 md:grid-cols-[2fr_1fr_1fr_1fr_auto] md:items-start">
                    <div>
                        <label for="price-model" class="block text-sm font-medium">"Model"</label>
                        <input id="price-model" name="model" required placeholder="gpt-5.1-codex or *" class=INPUT aria-describedby="price-model-error" />
                        <FieldError result field="model" id="price-model-error".to_owned() />
                    </div>
                    <div>
                        <label for="price-prompt" class="block text-sm font-medium">"Prompt"</label>
                        <input id="price-prompt" name="prompt" required inputmode="decimal" class=INPUT aria-describedby="price-prompt-error" />
                        <FieldError result field="prompt" id="price-prompt-error".to_owned() />
                    </div>
                    <div>
                        <label for="price-cached" class="block text-sm font-medium">"Cached (optional)"</label>
                        <input id="price-cached" name="cached" inputmode="decimal" class=INPUT aria-describedby="price-cached-error" />
                        <FieldError result field="cached" id="price-cached-error".to_owned() />
                    </div>
                    <div>
                        <label for="price-completion" class="block text-sm font-medium">"Completion"</label>
                        <input id="price-completion" name="completion" required inputmode="decimal" class=INPUT aria-describedby="price-completion-error" />
                        <FieldError result field="completion" id="price-completion-error".to_owned() />
                    </div>
                    <button type="submit" class=format!("md:mt-6 {BUTTON}")>"Set price"</button>
                </div>
                <div class="mt-2"><FormError result fields=&["model", "prompt", "cached", "completion"] /></div>
            </ActionForm>
        </section>
    }
}

/// "My quota" (UI-4): every budget that applies to the signed-in member, with what remains and
/// when it resets, in their time zone. Nothing when no budget applies.
#[component]
pub fn QuotaCard() -> impl IntoView {
    let quota = Resource::new(|| (), |_| my_quota());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match quota.await {
                    Ok(list) if list.is_empty() => None,
                    Ok(list) => Some(Either::Left(view! {
                        <section aria-labelledby="my-quota" class="mb-6 rounded-lg border border-slate-200 bg-white p-4" data-testid="my-quota">
                            <h2 id="my-quota" class="mb-2 text-base font-semibold">"My quota"</h2>
                            <ul class="divide-y divide-slate-100 text-sm">
                                {list.into_iter().map(|b| {
                                    let over = b.remaining <= 0.0;
                                    view! {
                                        <li class="flex flex-wrap items-baseline justify-between gap-2 py-1.5">
                                            <span>
                                                <span class="font-medium">{b.subject_name.clone()}</span>
                                                <span class="ml-2 text-slate-600">{b.describe()}</span>
                                            </span>
                                            <span class=if over { "font-medium text-red-700" } else { "text-slate-700" }>
                                                {format!("{} remaining", b.remaining)}
                                                {match b.reset_at {
                                                    Some(at) => Either::Left(view! { <span class="ml-2 text-xs text-slate-500">"resets "<Timestamp at /></span> }),
                                                    None => Either::Right(view! { <span class="ml-2 text-xs text-slate-500">"never resets"</span> }),
                                                }}
                                            </span>
                                        </li>
                                    }
                                }).collect_view()}
                            </ul>
                        </section>
                    })),
                    Err(e) => Some(Either::Right(view! { <ErrorNote message=e.message /> })),
                }
            })}
        </Transition>
    }
}

/// The Keys page's section: the budgets of the member's own keys (`keys`: the page's list), and a
/// form to add one.
#[component]
pub fn KeyBudgets(keys: Resource<Result<Vec<ApiKeyView>, AppError>>) -> impl IntoView {
    let actions = BudgetActions::new();
    let changed = actions.changed();
    let budgets = Resource::new(changed, |_| my_quota());
    view! {
        <section aria-labelledby="key-budgets" class="mt-8">
            <h2 id="key-budgets" class="mb-1 text-base font-semibold">"Key budgets"</h2>
            <p class="mb-3 text-sm text-slate-600">"Limit what one of your keys may use. Budgets an admin set on you or the workspace apply too; see My quota on the Requests page."</p>
            <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading budgets…"</p> }>
                {move || Suspend::new(async move {
                    // "My quota" lists the budgets of the member's own live keys among the rest.
                    match budgets.await {
                        Ok(list) => {
                            let own: Vec<BudgetView> = list.into_iter().filter(|b| b.subject == "apikey").collect();
                            Either::Left(view! { <BudgetTable budgets=own actions empty="None of your keys has a budget." /> })
                        }
                        Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                    }
                })}
            </Transition>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    let live: Vec<(String, String)> = keys.await.unwrap_or_default()
                        .into_iter()
                        .filter(|k| !matches!(k.status, KeyStatus::Revoked))
                        .map(|k| (format!("apikey:{}", k.id), k.name))
                        .collect();
                    (!live.is_empty()).then(|| view! {
                        <div class="mt-4 rounded-lg border border-slate-200 bg-white p-5">
                            <NewBudgetForm actions targets=vec![("Your keys", live)] />
                        </div>
                    })
                })}
            </Transition>
        </section>
    }
}
