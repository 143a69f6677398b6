//! Admin -> Settings: the workspace settings SubLane applies at once, without a restart (queue
//! timeout and capacity, workspace capacity, failure threshold and window, first model cooldown,
//! stream idle timeout). Each row says where its value comes from (set here, the environment or
//! config file, or the built-in default) and its range; "Use default" hands a value set here back.
//! A plain form posting to a server function, so it works without JavaScript too.

use leptos::{either::Either, prelude::*};
use leptos_meta::Title;

use crate::{
    components::{ErrorNote, PageHeader},
    model::{SettingSource, SettingView},
    rpc::{SaveWorkspaceSettings, list_workspace_settings},
};

#[component]
pub fn SettingsPage() -> impl IntoView {
    let save = ServerAction::<SaveWorkspaceSettings>::new();
    let settings = Resource::new(move || save.version().get(), |_| list_workspace_settings());
    view! {
        <Title text="Settings" />
        <PageHeader title="Settings" description="Workspace-wide scheduling settings. Changes apply to the next request; nothing running is interrupted." />
        <div class="mb-4" aria-live="polite">
            {move || save.value().get().map(|r| match r {
                Ok(_) => Either::Left(view! {
                    <p role="status" class="rounded-md border border-emerald-200 bg-emerald-50 px-3 py-2 text-sm text-emerald-900">"Saved; in force from the next request."</p>
                }),
                Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
            })}
        </div>
        <Transition fallback=|| view! { <p class="text-sm text-slate-500">"Loading settings…"</p> }>
            {move || Suspend::new(async move {
                match settings.await {
                    Ok(list) => Either::Left(view! {
                        <ActionForm action=save>
                            <div class="overflow-x-auto rounded-lg border border-slate-200 bg-white">
                                <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="settings">
                                    <thead class="bg-slate-50">
                                        <tr>
                                            <th scope="col" class="px-3 py-2 text-left font-medium text-slate-600">"Setting"</th>
                                            <th scope="col" class="px-3 py-2 text-left font-medium text-slate-600">"Value"</th>
                                            <th scope="col" class="px-3 py-2 text-left font-medium text-slate-600">"Comes from"</th>
                                            <th scope="col" class="px-3 py-2 text-left font-medium text-slate-600">"Default"</th>
                                        </tr>
                                    </thead>
                                    <tbody class="divide-y divide-slate-100">
                                        {list.into_iter().map(|s| view! { <SettingRow s /> }.into_any()).collect_view()}
                                    </tbody>
                                </table>
                            </div>
                            <button type="submit" class="mt-3 rounded-md bg-slate-900 px-3 py-1.5 text-sm font-medium text-white hover:bg-slate-700 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60"
                                disabled=move || save.pending().get()>
                                "Save settings"
                            </button>
                        </ActionForm>
                    }),
                    Err(e) => Either::Right(view! { <ErrorNote message=e.message /> }),
                }
            })}
        </Transition>
    }
}

#[component]
fn SettingRow(s: SettingView) -> impl IntoView {
    let id = format!("setting-{}", s.name);
    let unit = if s.unit == "seconds" { "s" } else { "" };
    let range = format!("{}–{}{unit}{}", s.min, s.max, if s.optional { ", or empty for off" } else { "" });
    let source = match s.source {
        SettingSource::Database => "set here",
        SettingSource::Configuration => "environment or config file",
        SettingSource::Default => "built-in default",
    };
    let default = s.default.map_or_else(|| "off".to_owned(), |d| format!("{d}{unit}"));
    let reset_label = format!("Use default for {}", s.label);
    view! {
        <tr data-setting=s.name.clone()>
            <td class="px-3 py-2">
                <label for=id.clone() class="font-medium text-slate-800">{s.label.clone()}</label>
                <p class="text-xs text-slate-500">{range}</p>
            </td>
            <td class="px-3 py-2">
                // No HTML min/max: a value from the environment may lie outside the range, and the
                // browser would then refuse the whole form; the server names what is out of range.
                <input id=id name=format!("values[{}]", s.name) type="number"
                    required=!s.optional value=s.value.map(|v| v.to_string()).unwrap_or_default()
                    class="w-28 rounded-md border border-slate-300 bg-white px-2 py-1 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900" />
                <span class="ml-1 text-xs text-slate-500">{s.unit.clone()}</span>
            </td>
            <td class="px-3 py-2 text-slate-700" data-testid="source">{source}</td>
            <td class="px-3 py-2 text-slate-700">
                {default}
                {(s.source == SettingSource::Database).then(|| view! {
                    <label class="ml-3 inline-flex items-center gap-1 text-xs text-slate-600">
                        <input type="checkbox" name=format!("reset[{}]", s.name) value="1" aria-label=reset_label />
                        "Use default"
                    </label>
                })}
            </td>
        </tr>
    }
}
