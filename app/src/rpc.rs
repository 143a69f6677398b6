//! Server functions used by the web app. Each one authenticates the session, then calls one
//! [`Backend`](crate::backend::Backend) method; all rules live behind that trait.
//!
//! They are mounted under `/rpc/`, apart from the JSON API under `/api/`, and the server applies
//! the same-origin check (ID-5) to them.

// A form's fields are a server function's arguments; the macro's generated client code does not
// carry a per-function `allow`, so the lint is allowed for the module.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::{error::AppError, model::*};

#[cfg(feature = "ssr")]
mod ssr {
    use leptos::prelude::*;

    use crate::{backend::SharedBackend, error::AppError, model::MemberView};

    pub fn backend() -> Result<SharedBackend, AppError> {
        use_context::<SharedBackend>().ok_or_else(AppError::internal)
    }

    pub fn headers() -> http::HeaderMap {
        use_context::<http::request::Parts>().map(|p| p.headers).unwrap_or_default()
    }

    /// The request as the server received it (headers and the server's extensions).
    pub fn parts() -> Result<http::request::Parts, AppError> {
        use_context::<http::request::Parts>().ok_or_else(AppError::internal)
    }

    /// The signed-in member, or `unauthorized`.
    pub async fn require_member() -> Result<MemberView, AppError> {
        backend()?.member_for(&headers()).await?.ok_or_else(AppError::unauthenticated)
    }

    /// Whether the request is a browser's own form post, made without JavaScript: a POST that
    /// asks for HTML, which server_fn answers with a redirect back to the form's page
    /// (`Referer`), the error in the redirect's query for the page to show. (A page rendered on
    /// the server also asks for HTML, and its resources call server functions with its GET's
    /// headers: their errors keep their statuses.)
    pub fn plain_form_post() -> bool {
        use_context::<http::request::Parts>().is_some_and(|p| {
            p.method == http::Method::POST
                && p.headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("text/html"))
        })
    }

    /// Answers errors with their HTTP status instead of a blanket 500 (a wrong password is a 401),
    /// and a Retry-After where the error invites a retry. Not a plain form post's: its answer is
    /// the redirect back to the page, which shows the error; a browser follows no `Location` on a
    /// 4xx and would show the error's JSON instead.
    pub fn finish<T>(result: Result<T, AppError>) -> Result<T, AppError> {
        if let (Err(e), Some(opts)) = (&result, use_context::<leptos_axum::ResponseOptions>())
            && let Ok(status) = http::StatusCode::from_u16(e.status)
            && !plain_form_post()
        {
            opts.set_status(status);
            if let Some(secs) = e.retry_after {
                opts.insert_header(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
            }
        }
        result
    }

    pub fn set_cookie(value: &str) -> Result<(), AppError> {
        let opts = use_context::<leptos_axum::ResponseOptions>().ok_or_else(AppError::internal)?;
        let value = http::HeaderValue::from_str(value).map_err(|_| AppError::internal())?;
        opts.append_header(http::header::SET_COOKIE, value);
        Ok(())
    }
}

/// The signed-in member, or `None` when the visitor is not signed in.
#[server(prefix = "/rpc", endpoint = "me")]
pub async fn get_me() -> Result<Option<MemberView>, AppError> {
    ssr::finish(async { ssr::backend()?.member_for(&ssr::headers()).await }.await)
}

/// Signs in and redirects to the app. Works as a plain HTML form post without JavaScript.
#[server(prefix = "/rpc", endpoint = "login")]
pub async fn login(username: String, password: String) -> Result<(), AppError> {
    ssr::finish(
        async {
            let signed_in = ssr::backend()?.sign_in(&ssr::parts()?, &username, &password).await?;
            ssr::set_cookie(&signed_in.set_cookie)?;
            leptos_axum::redirect("/");
            Ok(())
        }
        .await,
    )
}

/// Ends the session and returns to the login page.
#[server(prefix = "/rpc", endpoint = "logout")]
pub async fn logout() -> Result<(), AppError> {
    ssr::finish(
        async {
            let clear = ssr::backend()?.sign_out(&ssr::parts()?).await?;
            ssr::set_cookie(&clear)?;
            leptos_axum::redirect("/login");
            Ok(())
        }
        .await,
    )
}

/// Self-service: the signed-in member's own password; other sessions end when asked (the
/// checkbox is present only when checked).
#[server(prefix = "/rpc", endpoint = "change_password")]
pub async fn change_password(
    current_password: String,
    new_password: String,
    confirm_password: String,
    #[server(default)] sign_out_others: Option<String>,
) -> Result<(), AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let change = PasswordChangeRequest {
                current_password,
                new_password,
                confirm_password: Some(confirm_password),
                sign_out_others: sign_out_others.is_some(),
            };
            ssr::backend()?.change_password(&ssr::parts()?, &me, change).await
        }
        .await,
    )
}

#[server(prefix = "/rpc", endpoint = "my_keys")]
pub async fn list_my_keys() -> Result<Vec<ApiKeyView>, AppError> {
    ssr::finish(async { ssr::backend()?.my_keys(&ssr::require_member().await?).await }.await)
}

#[server(prefix = "/rpc", endpoint = "my_pools")]
pub async fn list_my_pools() -> Result<Vec<PoolChoice>, AppError> {
    ssr::finish(async { ssr::backend()?.my_pools(&ssr::require_member().await?).await }.await)
}

/// Creates a key for the signed-in member; the answer holds the secret, shown once.
/// `expires_at` is a `datetime-local` value read as UTC (empty: never expires).
#[server(prefix = "/rpc", endpoint = "create_key")]
pub async fn create_key(
    name: String,
    pool_id: Option<i64>,
    #[server(default)] expires_at: Option<String>,
) -> Result<CreatedApiKey, AppError> {
    ssr::finish(
        async {
            // The answer holds the only copy of the secret, and a plain form post's answer is a
            // redirect that drops it: the key would be made and its secret lost.
            if ssr::plain_form_post() {
                return Err(AppError::invalid(
                    "Creating a key needs JavaScript: its secret is shown once, on this page, and a \
                     page without JavaScript cannot show it (or use POST /api/me/keys).",
                ));
            }
            let expires_at = form::utc_minute("expires_at", expires_at.as_deref().unwrap_or_default())?;
            let new = NewApiKey { name, pool_id, expires_at, member_id: None };
            ssr::backend()?.create_my_key(&ssr::require_member().await?, new).await
        }
        .await,
    )
}

/// Switches one of the member's own keys off (`enabled=false`) or back on.
#[server(prefix = "/rpc", endpoint = "set_key_enabled")]
pub async fn set_key_enabled(id: i64, enabled: bool) -> Result<ApiKeyView, AppError> {
    let patch = KeyPatch { enabled: Some(enabled), expires_at: None };
    ssr::finish(async { ssr::backend()?.update_my_key(&ssr::require_member().await?, id, patch).await }.await)
}

#[server(prefix = "/rpc", endpoint = "revoke_key")]
pub async fn revoke_key(id: i64) -> Result<(), AppError> {
    ssr::finish(async { ssr::backend()?.revoke_my_key(&ssr::require_member().await?, id).await }.await)
}

/// Request records; `everyone` lists the whole workspace (admins only).
#[server(prefix = "/rpc", endpoint = "requests")]
pub async fn list_requests(
    // Form encoding omits a struct whose fields are all unset; absent means "no filter".
    #[server(default)] filter: RequestFilter,
    #[server(default)] everyone: bool,
) -> Result<Page<RequestRecord>, AppError> {
    ssr::finish(
        async { ssr::backend()?.requests(&ssr::require_member().await?, filter, everyone).await }.await,
    )
}

/// Daily usage (BEY-1): own, or with `everyone` (admins) the workspace's.
#[server(prefix = "/rpc", endpoint = "usage")]
pub async fn get_usage(
    #[server(default)] filter: UsageFilter,
    #[server(default)] everyone: bool,
) -> Result<UsageReport, AppError> {
    ssr::finish(async { ssr::backend()?.usage(&ssr::require_member().await?, filter, everyone).await }.await)
}

/// The request filters' choices (API-2): own records, or with `everyone` (admins) all.
#[server(prefix = "/rpc", endpoint = "request_filters")]
pub async fn request_filters(#[server(default)] everyone: bool) -> Result<RequestFilterChoices, AppError> {
    ssr::finish(
        async { ssr::backend()?.request_filters(&ssr::require_member().await?, everyone).await }.await,
    )
}

/// One request record (API-3): own, or with `everyone` (admins) any.
#[server(prefix = "/rpc", endpoint = "request_detail")]
pub async fn request_detail(
    request_id: String,
    #[server(default)] everyone: bool,
) -> Result<RequestRecord, AppError> {
    ssr::finish(
        async { ssr::backend()?.request(&ssr::require_member().await?, &request_id, everyone).await }.await,
    )
}

/// Every account's live scheduling state (admins).
#[server(prefix = "/rpc", endpoint = "account_runtime")]
pub async fn list_account_runtime() -> Result<Vec<AccountRuntime>, AppError> {
    ssr::finish(async { ssr::backend()?.account_runtime(&ssr::require_member().await?).await }.await)
}

/// QT-1: reads every account's quota now (admins; the Accounts page's Refresh quota button).
#[server(prefix = "/rpc", endpoint = "refresh_quota")]
pub async fn refresh_quota() -> Result<(), AppError> {
    ssr::finish(async { ssr::backend()?.refresh_quota(&ssr::require_member().await?).await }.await)
}

/// The workspace settings (admins).
#[server(prefix = "/rpc", endpoint = "workspace_settings")]
pub async fn list_workspace_settings() -> Result<Vec<SettingView>, AppError> {
    ssr::finish(async { ssr::backend()?.workspace_settings(&ssr::require_member().await?).await }.await)
}

/// The Settings form (admins): `values[name]` for every setting, `reset[name]` to hand one back to
/// its default. Only what differs from the value in force is changed; an empty optional value
/// turns it off; anything that is not a whole number is refused with the setting named.
#[server(prefix = "/rpc", endpoint = "save_workspace_settings")]
pub async fn save_workspace_settings(
    #[server(default)] values: std::collections::BTreeMap<String, String>,
    #[server(default)] reset: std::collections::BTreeMap<String, String>,
) -> Result<Vec<SettingView>, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let backend = ssr::backend()?;
            let now = backend.workspace_settings(&me).await?;
            let mut changes = Vec::new();
            for s in now {
                if reset.contains_key(&s.name) {
                    changes.push((s.name, SettingChange::Reset));
                    continue;
                }
                let Some(raw) = values.get(&s.name).map(|v| v.trim()) else { continue };
                let value = match raw {
                    "" if s.optional => None,
                    v => Some(v.parse::<u64>().map_err(|_| {
                        AppError::invalid(format!(
                            "{}: must be a whole number from {} to {}",
                            s.name, s.min, s.max
                        ))
                    })?),
                };
                if value != s.value {
                    changes.push((s.name, SettingChange::Set(value)));
                }
            }
            if changes.is_empty() {
                return backend.workspace_settings(&me).await;
            }
            backend.change_workspace_settings(&me, changes).await
        }
        .await,
    )
}

/// An ACC-3 action on an account (admins).
#[server(prefix = "/rpc", endpoint = "account_action")]
pub async fn run_account_action(id: i64, action: AccountAction) -> Result<AccountActionDone, AppError> {
    ssr::finish(
        async { ssr::backend()?.account_action(&ssr::require_member().await?, id, action).await }.await,
    )
}

/// An account's name, pools (comma-separated pool ids), concurrency limit, priority and expiry
/// (`YYYY-MM-DDTHH:MM` in UTC, as [`crate::components::LocalDateTimeInput`] sends it; empty:
/// never) (admins).
#[server(prefix = "/rpc", endpoint = "account_settings")]
pub async fn save_account_settings(
    id: i64,
    name: String,
    pools: String,
    max_concurrency: u32,
    priority: i32,
    expires_at: String,
) -> Result<AccountView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let settings = AccountSettings {
                name,
                pool_ids: pool_list(&pools)?,
                priority: Some(priority),
                max_concurrency: Some(max_concurrency),
                // (required: a form without it, an older page's, is refused rather than read as
                // "never")
                expires_at: Some(form::utc_minute("expires_at", &expires_at)?),
            };
            ssr::backend()?.account_settings(&me, id, settings).await
        }
        .await,
    )
}

/// Every pool, to choose an account's pools from (admins).
#[server(prefix = "/rpc", endpoint = "account_pools")]
pub async fn list_account_pools() -> Result<Vec<PoolChoice>, AppError> {
    ssr::finish(async { ssr::backend()?.account_pools(&ssr::require_member().await?).await }.await)
}

/// CRED-5: starts a provider sign-in; the answer has the authorize URL (admins).
#[server(prefix = "/rpc", endpoint = "account_sign_in")]
pub async fn start_account_sign_in(provider: Provider) -> Result<OAuthStarted, AppError> {
    ssr::finish(
        async {
            // (the answer, the provider's sign-in address, would be dropped like a key's secret)
            if ssr::plain_form_post() {
                return Err(AppError::invalid(
                    "Signing an account in needs JavaScript: the provider's sign-in page is opened from \
                     this page.",
                ));
            }
            ssr::backend()?.start_sign_in(&ssr::require_member().await?, provider).await
        }
        .await,
    )
}

/// CRED-5: adds an account with credentials from a finished sign-in (`flow_id` + `code`), a
/// credential `file`, or an `api_key` (admins).
#[server(prefix = "/rpc", endpoint = "add_account")]
pub async fn add_account(
    provider: Provider,
    name: String,
    pools: String,
    max_concurrency: u32,
    priority: i32,
    flow_id: Option<String>,
    code: Option<String>,
    file: Option<String>,
    api_key: Option<String>,
) -> Result<AccountView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let settings = AccountSettings {
                name,
                pool_ids: pool_list(&pools)?,
                priority: Some(priority),
                max_concurrency: Some(max_concurrency),
                expires_at: None,
            };
            let source = CredentialSource { flow_id, code, file, api_key };
            ssr::backend()?.add_account(&me, provider, settings, source).await
        }
        .await,
    )
}

/// ACC-3 "Re-authorize": new credentials for account `id`, every other setting kept (admins).
#[server(prefix = "/rpc", endpoint = "reauthorize_account")]
pub async fn reauthorize_account(
    id: i64,
    flow_id: Option<String>,
    code: Option<String>,
    file: Option<String>,
    api_key: Option<String>,
) -> Result<AccountView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            ssr::backend()?.reauthorize(&me, id, CredentialSource { flow_id, code, file, api_key }).await
        }
        .await,
    )
}

/// Deletes account `id` (admins).
#[server(prefix = "/rpc", endpoint = "delete_account")]
pub async fn delete_account(id: i64) -> Result<(), AppError> {
    ssr::finish(async { ssr::backend()?.delete_account(&ssr::require_member().await?, id).await }.await)
}

/// Every member (admins).
#[server(prefix = "/rpc", endpoint = "members")]
pub async fn list_members() -> Result<Vec<MemberView>, AppError> {
    ssr::finish(async { ssr::backend()?.members(&ssr::require_member().await?).await }.await)
}

/// The Members page's new-member form (admins): empty limits take the defaults; `pools[<id>]`
/// is a checked pool.
#[server(prefix = "/rpc", endpoint = "create_member")]
pub async fn create_member(
    username: String,
    password: String,
    role: Role,
    #[server(default)] concurrency_limit: String,
    #[server(default)] rpm_limit: String,
    #[server(default)] pools: std::collections::BTreeMap<String, String>,
) -> Result<MemberView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let new = NewMember {
                username,
                password,
                role,
                concurrency_limit: form::number("concurrency_limit", &concurrency_limit)?,
                rpm_limit: form::number("rpm_limit", &rpm_limit)?,
                pool_ids: form::checked("pools", &pools)?,
            };
            ssr::backend()?.create_member(&me, new).await
        }
        .await,
    )
}

/// A member's role and limits (admins); an empty RPM limit removes it.
#[server(prefix = "/rpc", endpoint = "save_member")]
pub async fn save_member(
    id: i64,
    role: Role,
    concurrency_limit: String,
    #[server(default)] rpm_limit: String,
) -> Result<MemberView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let patch = MemberPatch {
                role: Some(role),
                concurrency_limit: Some(form::number("concurrency_limit", &concurrency_limit)?.ok_or_else(
                    || {
                        AppError::invalid_field(
                            "concurrency_limit",
                            "concurrency_limit: a whole number, 0 for no limit",
                        )
                    },
                )?),
                rpm_limit: Some(form::number("rpm_limit", &rpm_limit)?),
                ..MemberPatch::default()
            };
            ssr::backend()?.update_member(&me, id, patch).await
        }
        .await,
    )
}

/// Switches a member off (signed out, keys refused) or back on (admins).
#[server(prefix = "/rpc", endpoint = "set_member_enabled")]
pub async fn set_member_enabled(id: i64, enabled: bool) -> Result<MemberView, AppError> {
    let patch = MemberPatch { enabled: Some(enabled), ..MemberPatch::default() };
    ssr::finish(async { ssr::backend()?.update_member(&ssr::require_member().await?, id, patch).await }.await)
}

/// Sets a member's password (admins); their sessions end.
#[server(prefix = "/rpc", endpoint = "reset_member_password")]
pub async fn reset_member_password(id: i64, password: String) -> Result<MemberView, AppError> {
    let patch = MemberPatch { password: Some(password), ..MemberPatch::default() };
    ssr::finish(async { ssr::backend()?.update_member(&ssr::require_member().await?, id, patch).await }.await)
}

#[server(prefix = "/rpc", endpoint = "delete_member")]
pub async fn delete_member(id: i64) -> Result<Deleted, AppError> {
    ssr::finish(async { ssr::backend()?.delete_member(&ssr::require_member().await?, id).await }.await)
}

/// Every pool (admins).
#[server(prefix = "/rpc", endpoint = "pools")]
pub async fn list_pools() -> Result<Vec<PoolView>, AppError> {
    ssr::finish(async { ssr::backend()?.pools(&ssr::require_member().await?).await }.await)
}

/// Every account's name, for the Pools page (admins).
#[server(prefix = "/rpc", endpoint = "account_choices")]
pub async fn list_account_choices() -> Result<Vec<AccountChoice>, AppError> {
    ssr::finish(async { ssr::backend()?.account_choices(&ssr::require_member().await?).await }.await)
}

#[server(prefix = "/rpc", endpoint = "create_pool")]
pub async fn create_pool(name: String) -> Result<PoolView, AppError> {
    let new = NewPool { name, model_policy: ModelPolicy::default(), member_ids: vec![] };
    ssr::finish(async { ssr::backend()?.create_pool(&ssr::require_member().await?, new).await }.await)
}

/// A pool's form (admins): name, members (`members[<id>]` checked, `shown[<id>]` for every member
/// the form listed), and model policy: the mode, models one per line (or comma-separated),
/// aliases one `alias = model` per line. Membership changes only among the members the form
/// showed, so a member added meanwhile (another tab, another admin) is not dropped.
#[server(prefix = "/rpc", endpoint = "save_pool")]
pub async fn save_pool(
    id: i64,
    name: String,
    mode: PolicyMode,
    #[server(default)] models: String,
    #[server(default)] aliases: String,
    #[server(default)] members: std::collections::BTreeMap<String, String>,
    #[server(default)] shown: std::collections::BTreeMap<String, String>,
) -> Result<PoolView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let backend = ssr::backend()?;
            let shown = form::checked("member_ids", &shown)?;
            let current = backend
                .pools(&me)
                .await?
                .into_iter()
                .find(|p| p.id == id)
                .ok_or_else(|| AppError::new("not_found", "pool not found").with_status(404))?;
            let mut member_ids: Vec<i64> =
                current.member_ids.into_iter().filter(|m| !shown.contains(m)).collect();
            member_ids.extend(form::checked("member_ids", &members)?);
            let patch = PoolPatch {
                name: Some(name),
                model_policy: Some(ModelPolicy {
                    mode,
                    models: form::model_list(&models),
                    aliases: form::alias_lines(&aliases)?,
                }),
                member_ids: Some(member_ids),
            };
            backend.update_pool(&me, id, patch).await
        }
        .await,
    )
}

#[server(prefix = "/rpc", endpoint = "delete_pool")]
pub async fn delete_pool(id: i64) -> Result<Deleted, AppError> {
    ssr::finish(async { ssr::backend()?.delete_pool(&ssr::require_member().await?, id).await }.await)
}

/// Every key of the workspace (admins), optionally one member's or pool's.
#[server(prefix = "/rpc", endpoint = "all_keys")]
pub async fn list_all_keys(#[server(default)] filter: KeyFilter) -> Result<Vec<ApiKeyView>, AppError> {
    ssr::finish(async { ssr::backend()?.all_keys(&ssr::require_member().await?, filter).await }.await)
}

/// Switches any key off or on (admins); a key an admin switched off stays off for its owner.
#[server(prefix = "/rpc", endpoint = "admin_set_key_enabled")]
pub async fn admin_set_key_enabled(id: i64, enabled: bool) -> Result<ApiKeyView, AppError> {
    let patch = KeyPatch { enabled: Some(enabled), expires_at: None };
    ssr::finish(async { ssr::backend()?.update_key(&ssr::require_member().await?, id, patch).await }.await)
}

/// Sets or clears (empty) any key's expiry (admins); `datetime-local`, read as UTC.
#[server(prefix = "/rpc", endpoint = "admin_key_expiry")]
pub async fn admin_key_expiry(
    id: i64,
    #[server(default)] expires_at: String,
) -> Result<ApiKeyView, AppError> {
    ssr::finish(
        async {
            let patch =
                KeyPatch { enabled: None, expires_at: Some(form::utc_minute("expires_at", &expires_at)?) };
            ssr::backend()?.update_key(&ssr::require_member().await?, id, patch).await
        }
        .await,
    )
}

#[server(prefix = "/rpc", endpoint = "admin_revoke_key")]
pub async fn admin_revoke_key(id: i64) -> Result<(), AppError> {
    ssr::finish(async { ssr::backend()?.revoke_key(&ssr::require_member().await?, id).await }.await)
}

/// Every budget policy with its usage now (admins).
#[server(prefix = "/rpc", endpoint = "budgets")]
pub async fn list_budgets() -> Result<Vec<BudgetView>, AppError> {
    ssr::finish(async { ssr::backend()?.budgets(&ssr::require_member().await?).await }.await)
}

/// The budgets that apply to the signed-in member ("My quota").
#[server(prefix = "/rpc", endpoint = "my_quota")]
pub async fn my_quota() -> Result<Vec<BudgetView>, AppError> {
    ssr::finish(async { ssr::backend()?.my_quota(&ssr::require_member().await?).await }.await)
}

/// A new budget. `target` is `ws`, `member:<id>` or `apikey:<id>`; `window_minutes` only for a
/// `minutes` window (other windows ignore it, so one form serves every window).
#[server(prefix = "/rpc", endpoint = "create_budget")]
pub async fn create_budget(
    target: String,
    metric: String,
    window: String,
    #[server(default)] window_minutes: String,
    limit: String,
) -> Result<BudgetView, AppError> {
    ssr::finish(
        async {
            let (subject, subject_id) = form::target(&target)?;
            let window_minutes = if window == "minutes" {
                form::number("window_minutes", &window_minutes)?.map(i64::from)
            } else {
                None
            };
            let limit = form::amount("limit", &limit)?;
            let new = NewBudget { subject, subject_id, metric, window, window_minutes, limit };
            ssr::backend()?.create_budget(&ssr::require_member().await?, new).await
        }
        .await,
    )
}

/// A budget's new limit.
#[server(prefix = "/rpc", endpoint = "set_budget_limit")]
pub async fn set_budget_limit(id: i64, limit: String) -> Result<BudgetView, AppError> {
    ssr::finish(
        async {
            let patch = BudgetPatch { limit: form::amount("limit", &limit)? };
            ssr::backend()?.update_budget(&ssr::require_member().await?, id, patch).await
        }
        .await,
    )
}

#[server(prefix = "/rpc", endpoint = "delete_budget")]
pub async fn delete_budget(id: i64) -> Result<(), AppError> {
    ssr::finish(async { ssr::backend()?.delete_budget(&ssr::require_member().await?, id).await }.await)
}

/// The price table (admins).
#[server(prefix = "/rpc", endpoint = "prices")]
pub async fn list_prices() -> Result<Vec<PriceView>, AppError> {
    ssr::finish(async { ssr::backend()?.prices(&ssr::require_member().await?).await }.await)
}

/// Sets a model's price (credits per million tokens; empty cached: the prompt price).
#[server(prefix = "/rpc", endpoint = "set_price")]
pub async fn set_price(
    model: String,
    prompt: String,
    completion: String,
    #[server(default)] cached: String,
) -> Result<Vec<PriceView>, AppError> {
    ssr::finish(
        async {
            let price = PriceInput {
                prompt: form::amount("prompt", &prompt)?,
                completion: form::amount("completion", &completion)?,
                cached: if cached.trim().is_empty() { None } else { Some(form::amount("cached", &cached)?) },
            };
            ssr::backend()?.set_price(&ssr::require_member().await?, model, price).await
        }
        .await,
    )
}

#[server(prefix = "/rpc", endpoint = "delete_price")]
pub async fn delete_price(model: String) -> Result<Vec<PriceView>, AppError> {
    ssr::finish(async { ssr::backend()?.delete_price(&ssr::require_member().await?, model).await }.await)
}

/// Reading plain form fields into typed values, each fault a 422 naming its field.
#[cfg(feature = "ssr")]
mod form {
    use std::collections::{BTreeMap, BTreeSet};

    use crate::error::AppError;

    /// A whole number, or `None` when left empty.
    pub fn number(field: &str, raw: &str) -> Result<Option<u32>, AppError> {
        match raw.trim() {
            "" => Ok(None),
            v => v
                .parse()
                .map(Some)
                .map_err(|_| AppError::invalid_field(field, format!("{field}: {v:?} is not a whole number"))),
        }
    }

    /// A number that may have decimals (a credits limit, a price).
    pub fn amount(field: &str, raw: &str) -> Result<f64, AppError> {
        raw.trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| {
            AppError::invalid_field(field, format!("{field}: {:?} is not a number", raw.trim()))
        })
    }

    /// A budget's subject from a form's `target`: `ws`, `member:<id>` or `apikey:<id>`.
    pub fn target(raw: &str) -> Result<(String, Option<i64>), AppError> {
        match raw.split_once(':') {
            None => Ok((raw.to_owned(), None)),
            Some((kind, id)) => id
                .parse()
                .map(|id| (kind.to_owned(), Some(id)))
                .map_err(|_| AppError::invalid_field("subject_id", "choose who the budget is for")),
        }
    }

    /// The ids of checked boxes named `<field>[<id>]`.
    pub fn checked(field: &str, boxes: &BTreeMap<String, String>) -> Result<Vec<i64>, AppError> {
        boxes
            .keys()
            .map(|k| {
                k.parse().map_err(|_| AppError::invalid_field(field, format!("{field}: {k:?} is not an id")))
            })
            .collect()
    }

    /// Model ids one per line or separated by commas; blanks skipped, order kept, repeats dropped.
    pub fn model_list(raw: &str) -> Vec<String> {
        let mut seen = BTreeSet::new();
        raw.split([',', '\n'])
            .map(str::trim)
            .filter(|m| !m.is_empty() && seen.insert(m.to_owned()))
            .map(str::to_owned)
            .collect()
    }

    /// `alias = model` lines (blank lines skipped).
    pub fn alias_lines(raw: &str) -> Result<BTreeMap<String, String>, AppError> {
        const FIELD: &str = "model_policy.aliases";
        let mut aliases = BTreeMap::new();
        for (n, line) in raw.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let Some((alias, model)) = line.split_once('=') else {
                return Err(AppError::invalid_field(
                    FIELD,
                    format!("{FIELD}: line {} should read alias = model", n + 1),
                ));
            };
            if aliases.insert(alias.trim().to_owned(), model.trim().to_owned()).is_some() {
                return Err(AppError::invalid_field(
                    FIELD,
                    format!("{FIELD}: {:?} is given twice", alias.trim()),
                ));
            }
        }
        Ok(aliases)
    }

    /// A `datetime-local` value (minutes) read as UTC; empty is `None`.
    pub fn utc_minute(field: &str, raw: &str) -> Result<Option<chrono::DateTime<chrono::Utc>>, AppError> {
        match raw.trim() {
            "" => Ok(None),
            v => chrono::NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M")
                .map(|t| Some(t.and_utc()))
                .map_err(|_| {
                    AppError::invalid_field(field, format!("{field}: a date and time like 2027-01-31T18:00"))
                }),
        }
    }
}

/// Pool ids as the forms send them: `1,3`.
#[cfg(feature = "ssr")]
fn pool_list(pools: &str) -> Result<Vec<i64>, AppError> {
    pools
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse().map_err(|_| {
                AppError::new("invalid_request", format!("{p:?} is not a pool id")).with_status(422)
            })
        })
        .collect()
}
