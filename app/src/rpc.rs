//! Server functions used by the web app. Each one authenticates the session, then calls one
//! [`Backend`](crate::backend::Backend) method; all rules live behind that trait.
//!
//! They are mounted under `/rpc/`, apart from the JSON API under `/api/`, and the server applies
//! the same-origin check (ID-5) to them.

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

    /// Answers errors with their HTTP status instead of a blanket 500 (a wrong password is a 401),
    /// and a Retry-After where the error invites a retry.
    pub fn finish<T>(result: Result<T, AppError>) -> Result<T, AppError> {
        if let (Err(e), Some(opts)) = (&result, use_context::<leptos_axum::ResponseOptions>())
            && let Ok(status) = http::StatusCode::from_u16(e.status)
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
            let expires_at = match expires_at.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
                None => None,
                Some(v) => Some(
                    chrono::NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M")
                        .map_err(|_| AppError::invalid("expires_at: a date and time like 2027-01-31T18:00"))?
                        .and_utc(),
                ),
            };
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

/// An account's name, pools (comma-separated pool ids), concurrency limit and priority (admins).
#[server(prefix = "/rpc", endpoint = "account_settings")]
pub async fn save_account_settings(
    id: i64,
    name: String,
    pools: String,
    max_concurrency: u32,
    priority: i32,
) -> Result<AccountView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            let settings = AccountSettings {
                name,
                pool_ids: pool_list(&pools)?,
                priority: Some(priority),
                max_concurrency: Some(max_concurrency),
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
    ssr::finish(async { ssr::backend()?.start_sign_in(&ssr::require_member().await?, provider).await }.await)
}

/// CRED-5: adds an account with credentials from a finished sign-in (`flow_id` + `code`), a
/// credential `file`, or an `api_key` (admins).
#[server(prefix = "/rpc", endpoint = "add_account")]
#[allow(clippy::too_many_arguments)]
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
