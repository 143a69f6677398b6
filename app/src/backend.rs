//! The seam between server functions (in `app`) and the server's domain code (in `server`).
//!
//! `app` must not depend on `server`, so the server puts an `Arc<dyn Backend>` into Leptos
//! context and server functions call it. Each method maps to one domain function that the JSON
//! API calls too: the server function is just a second thin edge over the same logic.

use std::sync::Arc;

use crate::{error::AppError, model::*};

/// A signed-in browser session that was just created.
pub struct SignedIn {
    pub member: MemberView,
    /// Complete `Set-Cookie` value for the session cookie.
    pub set_cookie: String,
}

#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The member behind the request's session cookie, if any (ID-2).
    async fn member_for(&self, headers: &http::HeaderMap) -> Result<Option<MemberView>, AppError>;
    /// Checks a password and opens a session. `request` tells who signs in from where (the
    /// server throttles failures per username and address) and over which scheme (cookies).
    async fn sign_in(
        &self,
        request: &http::request::Parts,
        username: &str,
        password: &str,
    ) -> Result<SignedIn, AppError>;
    /// Ends the request's session; returns the `Set-Cookie` value that clears the cookie.
    async fn sign_out(&self, request: &http::request::Parts) -> Result<String, AppError>;
    /// Self-service: the member's own password (the request's session stays signed in).
    async fn change_password(
        &self,
        request: &http::request::Parts,
        me: &MemberView,
        change: PasswordChangeRequest,
    ) -> Result<(), AppError>;
    async fn my_keys(&self, me: &MemberView) -> Result<Vec<ApiKeyView>, AppError>;
    async fn my_pools(&self, me: &MemberView) -> Result<Vec<PoolChoice>, AppError>;
    async fn create_my_key(&self, me: &MemberView, new: NewApiKey) -> Result<CreatedApiKey, AppError>;
    async fn revoke_my_key(&self, me: &MemberView, key_id: i64) -> Result<(), AppError>;
    /// Switches one of the member's own keys off or on, or changes its expiry.
    async fn update_my_key(
        &self,
        me: &MemberView,
        key_id: i64,
        patch: KeyPatch,
    ) -> Result<ApiKeyView, AppError>;
    /// Request records: the member's own, or with `everyone` (admins only) the workspace's.
    async fn requests(
        &self,
        me: &MemberView,
        filter: RequestFilter,
        everyone: bool,
    ) -> Result<Page<RequestRecord>, AppError>;
    /// The request filters' choices (API-2): the member's own, or with `everyone` (admins) all.
    async fn request_filters(
        &self,
        me: &MemberView,
        everyone: bool,
    ) -> Result<RequestFilterChoices, AppError>;
    /// One record (API-3): the member's own, or with `everyone` (admins) any.
    async fn request(
        &self,
        me: &MemberView,
        request_id: &str,
        everyone: bool,
    ) -> Result<RequestRecord, AppError>;
    /// Daily usage (BEY-1): the member's own, or with `everyone` (admins only) the workspace's.
    async fn usage(
        &self,
        me: &MemberView,
        filter: UsageFilter,
        everyone: bool,
    ) -> Result<UsageReport, AppError>;
    /// Every account's live scheduling state (API-1; admins only).
    async fn account_runtime(&self, me: &MemberView) -> Result<Vec<AccountRuntime>, AppError>;
    /// An ACC-3 action on an account (admins only).
    async fn account_action(
        &self,
        me: &MemberView,
        id: i64,
        action: AccountAction,
    ) -> Result<AccountActionDone, AppError>;
    /// An account's name, pools, concurrency limit (ADM-1) and priority (RT-5) (admins only).
    async fn account_settings(
        &self,
        me: &MemberView,
        id: i64,
        settings: AccountSettings,
    ) -> Result<AccountView, AppError>;
    /// Every pool, for choosing an account's pools (admins only).
    async fn account_pools(&self, me: &MemberView) -> Result<Vec<PoolChoice>, AppError>;
    /// CRED-5: starts a provider sign-in (admins only).
    async fn start_sign_in(&self, me: &MemberView, provider: Provider) -> Result<OAuthStarted, AppError>;
    /// CRED-5: a new account with credentials from `source` (admins only).
    async fn add_account(
        &self,
        me: &MemberView,
        provider: Provider,
        settings: AccountSettings,
        source: CredentialSource,
    ) -> Result<AccountView, AppError>;
    /// ACC-3 "Re-authorize": new credentials from `source`, every other setting kept.
    async fn reauthorize(
        &self,
        me: &MemberView,
        id: i64,
        source: CredentialSource,
    ) -> Result<AccountView, AppError>;
    /// Deletes an account (admins only).
    async fn delete_account(&self, me: &MemberView, id: i64) -> Result<(), AppError>;
    /// QT-1: reads every account's quota now (the Refresh quota button; admins only).
    async fn refresh_quota(&self, me: &MemberView) -> Result<(), AppError>;
    /// The workspace settings with their values and sources (admins only).
    async fn workspace_settings(&self, me: &MemberView) -> Result<Vec<SettingView>, AppError>;
    /// Changes workspace settings (`name -> value`, a value of "default" resets; admins only).
    async fn change_workspace_settings(
        &self,
        me: &MemberView,
        changes: Vec<(String, SettingChange)>,
    ) -> Result<Vec<SettingView>, AppError>;
    /// Every member (admins only).
    async fn members(&self, me: &MemberView) -> Result<Vec<MemberView>, AppError>;
    async fn create_member(&self, me: &MemberView, new: NewMember) -> Result<MemberView, AppError>;
    /// Role, enabled, limits or a new password (admins only; the last admin stays).
    async fn update_member(
        &self,
        me: &MemberView,
        id: i64,
        patch: MemberPatch,
    ) -> Result<MemberView, AppError>;
    /// Deletes a member: signed out, keys revoked, out of every pool; records stay (admins only).
    async fn delete_member(&self, me: &MemberView, id: i64) -> Result<Deleted, AppError>;
    /// Every pool with its members, accounts and model policy (admins only).
    async fn pools(&self, me: &MemberView) -> Result<Vec<PoolView>, AppError>;
    async fn create_pool(&self, me: &MemberView, new: NewPool) -> Result<PoolView, AppError>;
    async fn update_pool(&self, me: &MemberView, id: i64, patch: PoolPatch) -> Result<PoolView, AppError>;
    /// Deletes a pool: its keys are revoked, members and accounts leave it (admins only).
    async fn delete_pool(&self, me: &MemberView, id: i64) -> Result<Deleted, AppError>;
    /// Every account's id and name, for the Pools page (admins only).
    async fn account_choices(&self, me: &MemberView) -> Result<Vec<AccountChoice>, AppError>;
    /// Every key of the workspace, optionally one member's or pool's (admins only).
    async fn all_keys(&self, me: &MemberView, filter: KeyFilter) -> Result<Vec<ApiKeyView>, AppError>;
    /// Switches any key off or on, or changes its expiry (admins only).
    async fn update_key(&self, me: &MemberView, id: i64, patch: KeyPatch) -> Result<ApiKeyView, AppError>;
    /// Revokes any key (admins only).
    async fn revoke_key(&self, me: &MemberView, id: i64) -> Result<(), AppError>;

    /// Every budget policy with its usage now (admins only).
    async fn budgets(&self, me: &MemberView) -> Result<Vec<BudgetView>, AppError>;
    /// The policies that apply to the member: the workspace's, their own, their keys'.
    async fn my_quota(&self, me: &MemberView) -> Result<Vec<BudgetView>, AppError>;
    /// Admins on any subject; a member on their own key.
    async fn create_budget(&self, me: &MemberView, new: NewBudget) -> Result<BudgetView, AppError>;
    async fn update_budget(
        &self,
        me: &MemberView,
        id: i64,
        patch: BudgetPatch,
    ) -> Result<BudgetView, AppError>;
    async fn delete_budget(&self, me: &MemberView, id: i64) -> Result<(), AppError>;
    /// The price table behind `credits` (admins only).
    async fn prices(&self, me: &MemberView) -> Result<Vec<PriceView>, AppError>;
    async fn set_price(
        &self,
        me: &MemberView,
        model: String,
        price: PriceInput,
    ) -> Result<Vec<PriceView>, AppError>;
    async fn delete_price(&self, me: &MemberView, model: String) -> Result<Vec<PriceView>, AppError>;
}

/// How the server provides the backend to Leptos context.
pub type SharedBackend = Arc<dyn Backend>;
