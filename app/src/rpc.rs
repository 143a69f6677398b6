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

#[server(prefix = "/rpc", endpoint = "my_keys")]
pub async fn list_my_keys() -> Result<Vec<ApiKeyView>, AppError> {
    ssr::finish(async { ssr::backend()?.my_keys(&ssr::require_member().await?).await }.await)
}

#[server(prefix = "/rpc", endpoint = "my_pools")]
pub async fn list_my_pools() -> Result<Vec<PoolChoice>, AppError> {
    ssr::finish(async { ssr::backend()?.my_pools(&ssr::require_member().await?).await }.await)
}

/// Creates a key for the signed-in member; the answer holds the secret, shown once.
#[server(prefix = "/rpc", endpoint = "create_key")]
pub async fn create_key(name: String, pool_id: Option<i64>) -> Result<CreatedApiKey, AppError> {
    let new = NewApiKey { name, pool_id, expires_at: None, member_id: None };
    ssr::finish(async { ssr::backend()?.create_my_key(&ssr::require_member().await?, new).await }.await)
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

/// Every account's live scheduling state (admins).
#[server(prefix = "/rpc", endpoint = "account_runtime")]
pub async fn list_account_runtime() -> Result<Vec<AccountRuntime>, AppError> {
    ssr::finish(async { ssr::backend()?.account_runtime(&ssr::require_member().await?).await }.await)
}

/// An ACC-3 action on an account (admins).
#[server(prefix = "/rpc", endpoint = "account_action")]
pub async fn run_account_action(id: i64, action: AccountAction) -> Result<AccountActionDone, AppError> {
    ssr::finish(
        async { ssr::backend()?.account_action(&ssr::require_member().await?, id, action).await }.await,
    )
}

/// An account's scheduling settings (admins).
#[server(prefix = "/rpc", endpoint = "account_scheduling")]
pub async fn set_account_scheduling(
    id: i64,
    max_concurrency: u32,
    priority: i32,
) -> Result<AccountView, AppError> {
    ssr::finish(
        async {
            let me = ssr::require_member().await?;
            ssr::backend()?.account_scheduling(&me, id, max_concurrency, priority).await
        }
        .await,
    )
}
