//! The Leptos web app inside the server: SSR routes, server functions, static files, and the
//! [`Backend`] implementation that server functions call.
//!
//! The backend is a second thin edge over the same domain functions the JSON API uses.

use std::sync::Arc;

use app::{
    backend::{Backend, SharedBackend, SignedIn},
    error::AppError,
    model::*,
};
use axum::Router;
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, file_and_error_handler_with_context, generate_route_list};

use crate::{
    account_actions,
    app_state::AppState,
    auth::{client, session},
    budgets::manage as budgets,
    keys, members, pools,
    records::query::{self, Scope},
};

/// Server functions and pages, ready to merge into the main router.
pub fn router(state: &AppState) -> Router<AppState> {
    let backend: SharedBackend = Arc::new(ServerBackend { state: state.clone() });
    let context = move || provide_context(backend.clone());
    let routes = generate_route_list(app::App);
    let shell = {
        let options = state.leptos.clone();
        move || app::shell(options.clone())
    };
    Router::new()
        .leptos_routes_with_context(state, routes, context.clone(), shell)
        .fallback(file_and_error_handler_with_context::<AppState, _>(context, app::shell))
}

struct ServerBackend {
    state: AppState,
}

#[async_trait::async_trait]
impl Backend for ServerBackend {
    async fn member_for(&self, headers: &http::HeaderMap) -> Result<Option<MemberView>, AppError> {
        let Some(token) = session::token_from(headers) else {
            return Ok(None);
        };
        Ok(session::member_for_token(&self.state.db, &*self.state.clock, &token).await?)
    }

    async fn sign_in(
        &self,
        request: &http::request::Parts,
        username: &str,
        password: &str,
    ) -> Result<SignedIn, AppError> {
        let s = &self.state;
        let client = client::from_extensions(&request.extensions);
        let from = session::Attempt { throttle: &s.logins, ip: client.ip };
        let (member, token) =
            session::sign_in(&s.db, &*s.clock, from, username, password, s.config.session_ttl).await?;
        let set_cookie = session::set_cookie(&token, s.config.session_ttl, client.https);
        Ok(SignedIn { member, set_cookie })
    }

    async fn sign_out(&self, request: &http::request::Parts) -> Result<String, AppError> {
        if let Some(token) = session::token_from(&request.headers) {
            session::end(&self.state.db, &token).await?;
        }
        Ok(session::clear_cookie(client::from_extensions(&request.extensions).https))
    }

    async fn change_password(
        &self,
        request: &http::request::Parts,
        me: &MemberView,
        change: PasswordChangeRequest,
    ) -> Result<(), AppError> {
        let client = client::from_extensions(&request.extensions);
        let from = session::Attempt { throttle: &self.state.logins, ip: client.ip };
        let keep = session::token_from(&request.headers).unwrap_or_default();
        Ok(session::change_password(&self.state.db, &*self.state.clock, from, me.id, &change, &keep).await?)
    }

    async fn my_keys(&self, me: &MemberView) -> Result<Vec<ApiKeyView>, AppError> {
        Ok(keys::list_for_member(&self.state.db, &*self.state.clock, me.id).await?)
    }

    async fn my_pools(&self, me: &MemberView) -> Result<Vec<PoolChoice>, AppError> {
        Ok(pools::choices_for(&self.state.db, me.id).await?)
    }

    async fn create_my_key(&self, me: &MemberView, new: NewApiKey) -> Result<CreatedApiKey, AppError> {
        let new = NewApiKey { member_id: None, ..new };
        Ok(keys::create(&self.state.db, &*self.state.clock, me.id, new).await?)
    }

    async fn requests(
        &self,
        me: &MemberView,
        filter: RequestFilter,
        everyone: bool,
    ) -> Result<Page<RequestRecord>, AppError> {
        let scope = scope(me, everyone)?;
        Ok(query::list(&self.state.db, &*self.state.clock, scope, &filter).await?)
    }

    async fn usage(
        &self,
        me: &MemberView,
        filter: UsageFilter,
        everyone: bool,
    ) -> Result<UsageReport, AppError> {
        let s = &self.state;
        let now = s.clock.unix_ms();
        Ok(crate::usage::query::report(&s.db, s.config.time_zone, now, scope(me, everyone)?, &filter).await?)
    }

    async fn request_filters(
        &self,
        me: &MemberView,
        everyone: bool,
    ) -> Result<RequestFilterChoices, AppError> {
        Ok(query::choices(&self.state.db, &*self.state.clock, scope(me, everyone)?).await?)
    }

    async fn request(
        &self,
        me: &MemberView,
        request_id: &str,
        everyone: bool,
    ) -> Result<RequestRecord, AppError> {
        Ok(query::one(&self.state.db, &*self.state.clock, scope(me, everyone)?, request_id).await?)
    }

    async fn revoke_my_key(&self, me: &MemberView, key_id: i64) -> Result<(), AppError> {
        keys::revoke(&self.state.db, &*self.state.clock, Some(me.id), key_id).await?;
        // The proxy's key cache must forget the key at once.
        self.state.configuration_changed().await;
        Ok(())
    }

    async fn update_my_key(
        &self,
        me: &MemberView,
        key_id: i64,
        patch: KeyPatch,
    ) -> Result<ApiKeyView, AppError> {
        let view = keys::update(&self.state.db, &*self.state.clock, Some(me.id), key_id, patch).await?;
        // The proxy's key cache must see a switched-off key at once.
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn account_runtime(&self, me: &MemberView) -> Result<Vec<AccountRuntime>, AppError> {
        admin(me)?;
        Ok(account_actions::runtime(&self.state).await?)
    }

    async fn account_action(
        &self,
        me: &MemberView,
        id: i64,
        action: AccountAction,
    ) -> Result<AccountActionDone, AppError> {
        admin(me)?;
        let (account, test) = account_actions::act(&self.state, id, action).await?;
        Ok(AccountActionDone { account, test })
    }

    async fn account_settings(
        &self,
        me: &MemberView,
        id: i64,
        settings: AccountSettings,
    ) -> Result<AccountView, AppError> {
        admin(me)?;
        Ok(account_actions::edit(&self.state, id, settings).await?)
    }

    async fn account_pools(&self, me: &MemberView) -> Result<Vec<PoolChoice>, AppError> {
        admin(me)?;
        let pools = pools::list(&self.state.db).await?;
        Ok(pools.into_iter().map(|p| PoolChoice { id: p.id, name: p.name }).collect())
    }

    async fn start_sign_in(&self, me: &MemberView, provider: Provider) -> Result<OAuthStarted, AppError> {
        admin(me)?;
        Ok(account_actions::start_sign_in(&self.state, provider)?)
    }

    async fn add_account(
        &self,
        me: &MemberView,
        provider: Provider,
        settings: AccountSettings,
        source: CredentialSource,
    ) -> Result<AccountView, AppError> {
        admin(me)?;
        let view = account_actions::add(&self.state, Some(provider), settings, source).await?;
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn reauthorize(
        &self,
        me: &MemberView,
        id: i64,
        source: CredentialSource,
    ) -> Result<AccountView, AppError> {
        admin(me)?;
        Ok(account_actions::reauthorize(&self.state, id, source).await?)
    }

    async fn delete_account(&self, me: &MemberView, id: i64) -> Result<(), AppError> {
        admin(me)?;
        Ok(account_actions::delete(&self.state, id).await?)
    }

    async fn refresh_quota(&self, me: &MemberView) -> Result<(), AppError> {
        admin(me)?;
        Ok(account_actions::refresh_quota(&self.state).await?)
    }

    async fn workspace_settings(&self, me: &MemberView) -> Result<Vec<SettingView>, AppError> {
        admin(me)?;
        Ok(crate::workspace_settings::view(&self.state))
    }

    async fn change_workspace_settings(
        &self,
        me: &MemberView,
        changes: Vec<(String, SettingChange)>,
    ) -> Result<Vec<SettingView>, AppError> {
        admin(me)?;
        let body = changes
            .into_iter()
            .map(|(name, change)| {
                let value = match change {
                    SettingChange::Reset => serde_json::Value::from("default"),
                    SettingChange::Set(v) => v.map_or(serde_json::Value::Null, serde_json::Value::from),
                };
                (name, value)
            })
            .collect();
        Ok(crate::workspace_settings::patch(&self.state, &body).await?)
    }

    async fn members(&self, me: &MemberView) -> Result<Vec<MemberView>, AppError> {
        admin(me)?;
        Ok(members::list(&self.state.db).await?)
    }

    async fn create_member(&self, me: &MemberView, new: NewMember) -> Result<MemberView, AppError> {
        admin(me)?;
        let view = members::create(&self.state.db, &*self.state.clock, new).await?;
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn update_member(
        &self,
        me: &MemberView,
        id: i64,
        patch: MemberPatch,
    ) -> Result<MemberView, AppError> {
        admin(me)?;
        let view = members::update(&self.state.db, &*self.state.clock, id, patch).await?;
        // A switched-off member's keys and limits reach the proxy at once.
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn delete_member(&self, me: &MemberView, id: i64) -> Result<Deleted, AppError> {
        admin(me)?;
        let revoked_keys = members::delete(&self.state.db, &*self.state.clock, me.id, id).await?;
        self.state.configuration_changed().await;
        Ok(Deleted { revoked_keys })
    }

    async fn pools(&self, me: &MemberView) -> Result<Vec<PoolView>, AppError> {
        admin(me)?;
        Ok(pools::list(&self.state.db).await?)
    }

    async fn create_pool(&self, me: &MemberView, new: NewPool) -> Result<PoolView, AppError> {
        admin(me)?;
        let view = pools::create(&self.state.db, &*self.state.clock, new).await?;
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn update_pool(&self, me: &MemberView, id: i64, patch: PoolPatch) -> Result<PoolView, AppError> {
        admin(me)?;
        let view = pools::update(&self.state.db, &*self.state.clock, id, patch).await?;
        // The model policy is enforced from the directory: the next request sees the new one.
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn delete_pool(&self, me: &MemberView, id: i64) -> Result<Deleted, AppError> {
        admin(me)?;
        let revoked_keys = pools::delete(&self.state.db, &*self.state.clock, id).await?;
        self.state.configuration_changed().await;
        Ok(Deleted { revoked_keys })
    }

    async fn account_choices(&self, me: &MemberView) -> Result<Vec<AccountChoice>, AppError> {
        admin(me)?;
        let accounts = crate::accounts::list(&self.state.db).await?;
        Ok(accounts.into_iter().map(|a| AccountChoice { id: a.id, name: a.name }).collect())
    }

    async fn all_keys(&self, me: &MemberView, filter: KeyFilter) -> Result<Vec<ApiKeyView>, AppError> {
        admin(me)?;
        Ok(keys::list_all(&self.state.db, &*self.state.clock, &filter).await?)
    }

    async fn update_key(&self, me: &MemberView, id: i64, patch: KeyPatch) -> Result<ApiKeyView, AppError> {
        admin(me)?;
        let view = keys::update(&self.state.db, &*self.state.clock, None, id, patch).await?;
        self.state.configuration_changed().await;
        Ok(view)
    }

    async fn revoke_key(&self, me: &MemberView, id: i64) -> Result<(), AppError> {
        admin(me)?;
        keys::revoke(&self.state.db, &*self.state.clock, None, id).await?;
        self.state.configuration_changed().await;
        Ok(())
    }

    async fn budgets(&self, me: &MemberView) -> Result<Vec<BudgetView>, AppError> {
        Ok(budgets::list(&self.state, me).await?)
    }

    async fn my_quota(&self, me: &MemberView) -> Result<Vec<BudgetView>, AppError> {
        Ok(budgets::mine(&self.state, me).await?)
    }

    async fn create_budget(&self, me: &MemberView, new: NewBudget) -> Result<BudgetView, AppError> {
        Ok(budgets::create(&self.state, me, new).await?)
    }

    async fn update_budget(
        &self,
        me: &MemberView,
        id: i64,
        patch: BudgetPatch,
    ) -> Result<BudgetView, AppError> {
        Ok(budgets::update(&self.state, me, id, patch).await?)
    }

    async fn delete_budget(&self, me: &MemberView, id: i64) -> Result<(), AppError> {
        Ok(budgets::delete(&self.state, me, id).await?)
    }

    async fn prices(&self, me: &MemberView) -> Result<Vec<PriceView>, AppError> {
        Ok(budgets::prices(&self.state, me).await?)
    }

    async fn set_price(
        &self,
        me: &MemberView,
        model: String,
        price: PriceInput,
    ) -> Result<Vec<PriceView>, AppError> {
        Ok(budgets::set_price(&self.state, me, &model, price).await?)
    }

    async fn delete_price(&self, me: &MemberView, model: String) -> Result<Vec<PriceView>, AppError> {
        Ok(budgets::delete_price(&self.state, me, &model).await?)
    }
}

/// Whose records a request-history call reads: the member's own, or (admins) everyone's.
fn scope(me: &MemberView, everyone: bool) -> Result<Scope, AppError> {
    match (everyone, me.is_admin()) {
        (false, _) => Ok(Scope::Member(me.id)),
        (true, true) => Ok(Scope::Admin),
        (true, false) => Err(crate::error::Error::forbidden("this needs an admin").into()),
    }
}

/// Admin-only backend calls refuse other members (the JSON API's `Admin` extractor, here).
fn admin(me: &MemberView) -> Result<(), AppError> {
    if me.is_admin() { Ok(()) } else { Err(crate::error::Error::forbidden("this needs an admin").into()) }
}
