//! Wire types shared by the JSON API, the server functions and the WASM front end.
//!
//! These are views: they never carry secrets (no password hashes, no sealed credentials, no key
//! hashes). Database row types stay in `server`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A member's role in the workspace (ID-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

/// A workspace member as people and scripts see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberView {
    pub id: i64,
    pub username: String,
    pub role: Role,
    pub enabled: bool,
    /// Concurrent model requests allowed for this member (ADM-3); 0 = unlimited.
    pub concurrency_limit: u32,
    /// Optional requests-per-minute limit (ADM-3).
    pub rpm_limit: Option<u32>,
    pub created_at: DateTime<Utc>,
}

impl MemberView {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// `POST /api/members`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    pub username: String,
    pub password: String,
    #[serde(default = "default_role")]
    pub role: Role,
    #[serde(default)]
    pub concurrency_limit: Option<u32>,
    #[serde(default)]
    pub rpm_limit: Option<u32>,
    /// Pools the new member may use.
    #[serde(default)]
    pub pool_ids: Vec<i64>,
}

fn default_role() -> Role {
    Role::Member
}

/// `PATCH /api/members/{id}`: every field optional; absent fields stay as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberPatch {
    pub role: Option<Role>,
    pub enabled: Option<bool>,
    pub concurrency_limit: Option<u32>,
    /// `null` clears the limit, a number sets it; absent leaves it alone.
    #[serde(default, with = "double_option")]
    pub rpm_limit: Option<Option<u32>>,
    pub password: Option<String>,
}

/// Which models a pool serves (ID-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    /// Every model its accounts support.
    #[default]
    All,
    /// Only the listed models.
    Allow,
    /// Every model except the listed ones.
    Deny,
}

impl PolicyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::All => "all",
            PolicyMode::Allow => "allow",
            PolicyMode::Deny => "deny",
        }
    }

    /// The stored name back as a mode; anything unknown is `All`.
    pub fn parse(s: &str) -> PolicyMode {
        match s {
            "allow" => PolicyMode::Allow,
            "deny" => PolicyMode::Deny,
            _ => PolicyMode::All,
        }
    }
}

/// A pool's model policy: allow/deny list plus optional aliases (alias -> real model id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPolicy {
    #[serde(default)]
    pub mode: PolicyMode,
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
}

/// A resource group (pool): accounts, members allowed to use it, and its model policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolView {
    pub id: i64,
    pub name: String,
    pub model_policy: ModelPolicy,
    pub member_ids: Vec<i64>,
    pub account_ids: Vec<i64>,
    pub created_at: DateTime<Utc>,
}

/// `POST /api/pools`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPool {
    pub name: String,
    #[serde(default)]
    pub model_policy: ModelPolicy,
    #[serde(default)]
    pub member_ids: Vec<i64>,
}

/// `PATCH /api/pools/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolPatch {
    pub name: Option<String>,
    pub model_policy: Option<ModelPolicy>,
    /// Replaces the member list.
    pub member_ids: Option<Vec<i64>>,
}

/// `DELETE /api/members/{id}` and `DELETE /api/pools/{id}`: what the deletion took with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// API keys revoked by the deletion (the member's, or those targeting the pool).
    pub revoked_keys: u64,
}

/// A pool a member may target with a key (for pickers; no account details).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolChoice {
    pub id: i64,
    pub name: String,
}

/// Upstream provider of an account (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// ChatGPT OAuth (Codex backend).
    Codex,
    /// Claude OAuth.
    Claude,
    /// Google Antigravity OAuth (Cloud Code Assist).
    Antigravity,
    /// OpenAI platform API key.
    OpenaiApi,
    /// Anthropic platform API key.
    AnthropicApi,
}

impl Provider {
    pub const ALL: [Provider; 5] = [
        Provider::Codex,
        Provider::Claude,
        Provider::Antigravity,
        Provider::OpenaiApi,
        Provider::AnthropicApi,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Codex => "codex",
            Provider::Claude => "claude",
            Provider::Antigravity => "antigravity",
            Provider::OpenaiApi => "openai_api",
            Provider::AnthropicApi => "anthropic_api",
        }
    }

    pub fn parse(s: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether this provider authenticates with OAuth tokens (else with an API key).
    pub fn uses_oauth(self) -> bool {
        matches!(self, Provider::Codex | Provider::Claude | Provider::Antigravity)
    }
}

/// Credentials supplied by an admin. Write-only: they are sealed at rest and never returned.
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CredentialInput {
    #[serde(rename = "oauth")]
    OAuth {
        access_token: String,
        #[serde(default)]
        refresh_token: Option<String>,
        #[serde(default)]
        expires_at: Option<DateTime<Utc>>,
        /// `chatgpt-account-id` for Codex, the Cloud Code project for Antigravity.
        #[serde(default)]
        provider_account_id: Option<String>,
    },
    ApiKey {
        api_key: String,
    },
}

impl std::fmt::Debug for CredentialInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialInput::OAuth { .. } => f.write_str("CredentialInput::OAuth(*****)"),
            CredentialInput::ApiKey { .. } => f.write_str("CredentialInput::ApiKey(*****)"),
        }
    }
}

/// What may be shown about an account's stored credential.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CredentialSummary {
    /// `oauth`, `api_key`, or `none`.
    pub kind: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub provider_account_id: Option<String>,
}

/// Lifecycle status of an account (ACC-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountStatus {
    Active,
    Error,
    Disabled,
}

/// An upstream account as admins see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountView {
    pub id: i64,
    pub provider: Provider,
    pub name: String,
    pub pool_ids: Vec<i64>,
    pub priority: i32,
    /// Concurrent model requests allowed on this account (ADM-1).
    pub max_concurrency: u32,
    pub status: AccountStatus,
    pub schedulable: bool,
    /// When the account itself stops serving (ACC-1, RT-8): a subscription's end, set by an admin.
    /// Not its token's expiry (`credential.expires_at`), which a refresh moves.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    pub credential: CredentialSummary,
    pub created_at: DateTime<Utc>,
}

/// What may be shown of an OAuth account's tokens (CRED, UI-3). Times are unix seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenState {
    /// When the access token expires.
    pub expires_at: Option<i64>,
    /// A refresh token is held (the access token can be renewed without a sign-in).
    pub refreshable: bool,
    /// The last successful refresh.
    pub refreshed_at: Option<i64>,
    /// Refreshing failed and is not tried again before this.
    pub backoff_until: Option<i64>,
    /// The current access token was refused upstream.
    pub rejected: bool,
    /// Why the account needs re-authorization (CRED-4), when it does.
    pub reauth_required: Option<String>,
    /// Why the last refresh failed (a short code), until one succeeds.
    pub last_error: Option<String>,
}

/// `GET /api/accounts/runtime` (API-1): one account's live scheduling state. Times are unix
/// seconds and present only while they are in the future.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountRuntime {
    pub id: i64,
    pub name: String,
    pub provider: Provider,
    pub priority: i32,
    pub status: AccountStatus,
    pub schedulable: bool,
    /// Requests holding one of the account's slots now.
    pub in_flight: u32,
    pub max_concurrency: u32,
    /// Requests waiting in the queues of the account's pools.
    pub queue_depth: u32,
    pub rate_limited_at: Option<i64>,
    pub rate_limit_reset_at: Option<i64>,
    pub overload_until: Option<i64>,
    pub temp_unschedulable_until: Option<i64>,
    pub temp_unschedulable_reason: Option<String>,
    /// Models cooling or limited now.
    pub limited_models: u32,
    pub models: Vec<ModelRuntime>,
    /// OAuth accounts: the token lifecycle (CRED-1..CRED-4).
    pub token: Option<TokenState>,
    pub pool_ids: Vec<i64>,
    /// QT-3/QT-5: a fresh observation says the subscription quota is spent: new selections
    /// leave the account out until then (unix s), when it is checked again.
    #[serde(default)]
    pub quota_exhausted_until: Option<i64>,
    /// Quota windows as last observed, with pace (UI-3, PACE-1, PACE-2).
    #[serde(default)]
    pub quota: Vec<QuotaRow>,
    /// The account's own expiry (ACC-1), past or future (unix s); `expired` once it has passed,
    /// from when the account serves nothing (RT-8).
    #[serde(default)]
    pub expires_at: Option<i64>,
    #[serde(default)]
    pub expired: bool,
}

/// One quota window of an account (QT-2) as the web app shows it: how much is used, when it
/// resets, when it was observed, and the pace computed at that observation (PACE-1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRow {
    /// What the window is: "5-hour", "Weekly", or an Antigravity model id.
    pub label: String,
    pub kind: QuotaKind,
    /// 0..=100; `None` when the provider did not say.
    pub used_percent: Option<f64>,
    pub window_minutes: Option<i64>,
    /// Unix seconds.
    pub resets_at: Option<i64>,
    /// Unix seconds.
    pub observed_at: i64,
    /// Seconds between the observation and this answer (for "observed N minutes ago").
    pub age_secs: i64,
    /// This window (or model) excludes the account now (QT-3, QT-4).
    pub exhausted: bool,
    pub pace: Pace,
}

/// Where a workspace setting's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingSource {
    /// Set in the web app or `PATCH /api/settings`: it wins.
    Database,
    /// The environment or config file, read at start.
    Configuration,
    /// SubLane's built-in default.
    Default,
}

/// `GET /api/settings`: one workspace setting an admin manages in the app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingView {
    pub name: String,
    pub label: String,
    /// "seconds" or "count".
    pub unit: String,
    /// `None`: off (only optional settings).
    pub value: Option<u64>,
    pub source: SettingSource,
    /// What applies without a stored value (environment, config file or built-in default).
    pub default: Option<u64>,
    pub min: u64,
    pub max: u64,
    pub optional: bool,
}

/// `POST /api/me/password`: a member's own password change.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChangeRequest {
    pub current_password: String,
    pub new_password: String,
    /// Defaults to the new password (scripts need not repeat it).
    #[serde(default)]
    pub confirm_password: Option<String>,
    /// End every other session of the member (the one making the change stays).
    #[serde(default = "yes")]
    pub sign_out_others: bool,
}

fn yes() -> bool {
    true
}

impl std::fmt::Debug for PasswordChangeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordChangeRequest(*****)")
    }
}

/// One change to a workspace setting from the Settings page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SettingChange {
    Set(Option<u64>),
    /// Back to the environment, config file or built-in default.
    Reset,
}

/// What a quota row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKind {
    /// A window of the main subscription limit (Codex primary/secondary, Claude 5-hour/7-day).
    Main,
    /// An extra named limit: shown, never excluding the account (QT-3).
    Extra,
    /// One Antigravity model's quota (QT-4).
    Model,
}

/// PACE-1/PACE-2: how far usage runs ahead of (positive) or behind (negative) an even pace, in
/// percentage points, at the observation time; or why it is not shown.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Pace {
    Shown { points: f64, elapsed_percent: f64 },
    Hidden { reason: PaceHidden },
}

/// Why a quota row shows no pace (PACE-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaceHidden {
    /// The observation is older than the freshness limit.
    Stale,
    /// The last read of the account's quota failed.
    RefreshFailed,
    /// The window reset after the observation: its numbers no longer hold.
    ResetPassed,
    /// The window's length, reset time or usage is unknown.
    WindowIncomplete,
}

impl Pace {
    /// The pace in words: "+20 points faster than even pace".
    pub fn describe(&self) -> String {
        match *self {
            Pace::Shown { points, .. } => {
                let rounded = points.round();
                if rounded == 0.0 {
                    "on even pace".to_owned()
                } else if rounded > 0.0 {
                    format!("+{rounded:.0} points faster than even pace")
                } else {
                    format!("{:.0} points slower than even pace", rounded.abs())
                }
            }
            Pace::Hidden { reason } => match reason {
                PaceHidden::Stale => "pace hidden: the observation is stale".to_owned(),
                PaceHidden::RefreshFailed => "pace hidden: the last quota read failed".to_owned(),
                PaceHidden::ResetPassed => "pace hidden: the window has reset since".to_owned(),
                PaceHidden::WindowIncomplete => "pace hidden: the window is not fully known".to_owned(),
            },
        }
    }
}

/// Per-model state of an account (API-1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRuntime {
    pub model: String,
    /// Requests sent to this account for this model since the gateway started.
    pub requests: u64,
    /// Failures counted toward a cooldown (CD-2).
    pub recent_failures: u32,
    /// Cooldowns in a row (the escalation step).
    pub cooldown_level: u32,
    pub cooling_until: Option<i64>,
    pub limited_until: Option<i64>,
}

/// The admin actions on an account (ACC-3), each with its own honest meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountAction {
    /// Account and model cooldowns, limits and failure counts. Never enables or re-authorizes.
    ClearCooldown,
    /// Every runtime block and the error status; the schedulable switch stays as it is.
    Recover,
    /// The error status only.
    ClearError,
    Enable,
    Disable,
    /// The manual schedulable switch.
    SchedulableOn,
    SchedulableOff,
    /// One real upstream request; success recovers like `Recover`.
    Test,
    /// OAuth: refresh the access token now, whatever its expiry or backoff (ACC-3).
    RefreshToken,
}

impl AccountAction {
    /// The serialized name (form values, URLs).
    pub fn as_str(self) -> &'static str {
        match self {
            AccountAction::ClearCooldown => "clear_cooldown",
            AccountAction::Recover => "recover",
            AccountAction::ClearError => "clear_error",
            AccountAction::Enable => "enable",
            AccountAction::Disable => "disable",
            AccountAction::SchedulableOn => "schedulable_on",
            AccountAction::SchedulableOff => "schedulable_off",
            AccountAction::Test => "test",
            AccountAction::RefreshToken => "refresh_token",
        }
    }
}

/// `POST /api/accounts/{id}/test` (ACC-3): what one real upstream request found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountTest {
    pub ok: bool,
    pub upstream_status: Option<u16>,
    pub latency_ms: u64,
    /// A sanitized error code when it failed.
    pub error: Option<String>,
    /// The account afterwards (recovered when the test passed).
    pub account: AccountView,
}

/// What an account action did (web app): the account afterwards, and the test's findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountActionDone {
    pub account: AccountView,
    pub test: Option<AccountTest>,
}

/// `POST /api/accounts`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAccount {
    pub provider: Provider,
    pub name: String,
    #[serde(default)]
    pub pool_ids: Vec<i64>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// The account's own expiry ([`AccountView::expires_at`]).
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub credentials: Option<CredentialInput>,
}

/// `PATCH /api/accounts/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountPatch {
    pub provider: Option<Provider>,
    pub name: Option<String>,
    pub pool_ids: Option<Vec<i64>>,
    pub priority: Option<i32>,
    pub max_concurrency: Option<u32>,
    /// Absent: unchanged; `null`: the account never expires; a time: it expires then.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Option<DateTime<Utc>>>,
    pub credentials: Option<CredentialInput>,
}

/// A field that is there, `null` included (`Some(None)`); with `#[serde(default)]`, an absent
/// one is `None`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// An account's settings besides its credentials, as onboarding and the web app's edit form
/// give them (unset priority and limit: the defaults, or unchanged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountSettings {
    pub name: String,
    pub pool_ids: Vec<i64>,
    pub priority: Option<i32>,
    pub max_concurrency: Option<u32>,
    /// The account's own expiry ([`AccountView::expires_at`]): absent, unchanged (a new account:
    /// none); `Some(None)`, it never expires.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// `POST /api/accounts/oauth/start` (CRED-5): begin a provider sign-in.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthStart {
    pub provider: Provider,
}

/// A started sign-in: open `authorize_url`, sign in, paste back the code or the address the
/// browser ended on (`redirect_uri?code=...`). Finish before `expires_at` (unix seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OAuthStarted {
    pub flow_id: String,
    pub provider: Provider,
    pub authorize_url: String,
    pub redirect_uri: String,
    pub expires_at: i64,
}

/// `POST /api/accounts/oauth/finish`: the pasted code of sign-in `flow_id`, and the new
/// account's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthFinish {
    pub flow_id: String,
    /// The code, `code#state`, or the whole callback URL.
    pub code: String,
    pub name: String,
    #[serde(default)]
    pub pool_ids: Vec<i64>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// The account's own expiry ([`AccountView::expires_at`]).
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// `POST /api/accounts/import`: a CLI credential file's content (Codex `auth.json`, Claude Code
/// `.credentials.json`, Gemini / Antigravity OAuth JSON), and the new account's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialImport {
    pub provider: Provider,
    pub file: String,
    pub name: String,
    #[serde(default)]
    pub pool_ids: Vec<i64>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// The account's own expiry ([`AccountView::expires_at`]).
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// Where an account's credentials come from, exactly one way: a finished sign-in (`flow_id` +
/// `code`), a credential `file`, or an `api_key`. The body of `POST /api/accounts/{id}/reauthorize`
/// (ACC-3: new credentials, every other setting kept) and of the web app's Add account.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSource {
    #[serde(default)]
    pub flow_id: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub api_key: Option<String>,
}

/// Whether a key can currently be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    Active,
    Disabled,
    Revoked,
    Expired,
    /// BUD-4: tripped the circuit breaker for the 5th time; refused for good.
    Banned,
}

/// A gateway API key (ID-3). The secret is never part of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ApiKeyView {
    pub id: i64,
    pub name: String,
    pub member_id: i64,
    pub pool_id: i64,
    pub pool_name: String,
    /// Recognisable but useless fragment of the secret, e.g. `sk-sl-Ab3d…x9Qz`.
    pub hint: String,
    pub status: KeyStatus,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    /// BUD-4: times the key tripped the circuit breaker (for its whole life).
    #[serde(default)]
    pub breaker_trips: u32,
    /// BUD-4: the breaker refuses the key until then (only while that lies ahead).
    #[serde(default)]
    pub blocked_until: Option<DateTime<Utc>>,
    /// BUD-4: when the 5th trip banned the key.
    #[serde(default)]
    pub banned_at: Option<DateTime<Utc>>,
}

/// `POST /api/me/keys` (and, with `member_id`, `POST /api/keys`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewApiKey {
    pub name: String,
    /// The pool the key targets; may be omitted when the member belongs to exactly one pool.
    #[serde(default)]
    pub pool_id: Option<i64>,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// Admin route only: whose key it is.
    #[serde(default)]
    pub member_id: Option<i64>,
}

/// `PATCH /api/me/keys/{id}` (own) and `PATCH /api/keys/{id}` (admin): switch a key off or on,
/// or change its expiry (`null`: never). A revoked key stays revoked.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyPatch {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default, with = "double_option")]
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// `GET /api/keys?member_id=&pool_id=` (admin).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyFilter {
    #[serde(default, deserialize_with = "empty_as_none")]
    pub member_id: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub pool_id: Option<i64>,
}

/// The answer to a key creation: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedApiKey {
    pub key: ApiKeyView,
    pub secret: String,
}

/// `POST /api/session`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

/// Body of every JSON API error: `{"error":{"code","message"}}`, and `field` when one input is
/// at fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// The input at fault (a 422 about one field, e.g. `model_policy.models`), so a form can show
    /// the message next to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// Which rule chose the account (EXP-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingRule {
    /// RT-1/RT-2: the conversation's (or WebSocket connection's) account.
    SessionBinding,
    /// RT-7: the parent conversation's account for a Codex review/guardian request.
    ParentSession,
    /// RT-5: round robin within the highest priority tier with room.
    UniformRotation,
    /// RT-6: rotation weighted by each candidate's remaining quota.
    QuotaWeightedRotation,
}

/// Accounts of the pool left out of the final choice, by reason (EXP-1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Exclusions {
    /// The provider does not speak the request's protocol, or the account's model list (the
    /// operator's or its own) lacks the model.
    pub model_support: u32,
    /// A provider prefix (PX-5) left it out.
    pub policy: u32,
    /// Subscription quota (QT-3).
    pub quota: u32,
    /// Account or model cooldown, rate limit, overload (or a model switch leaving it).
    pub cooldown: u32,
    /// No free slot.
    pub capacity: u32,
    /// Out of service: credentials refused for now, already tried by this request, or left out
    /// of routing (disabled, in error, switched off, expired, credentials that do not open).
    pub unavailable: u32,
}

/// The routing explanation stored with a record (EXP-1): counts only, never another account's
/// identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingDecision {
    pub rule: RoutingRule,
    /// Accounts the final choice was made among.
    pub candidates: u32,
    /// (absent from a record that excluded none: see the server's stored form)
    #[serde(default)]
    pub excluded: Exclusions,
}

impl RoutingDecision {
    /// A choice fixed by a binding or a parent conversation: one candidate, nothing scanned.
    pub fn kept(rule: RoutingRule) -> Self {
        RoutingDecision { rule, candidates: 1, excluded: Exclusions::default() }
    }

    pub fn rotation(candidates: u32, excluded: Exclusions) -> Self {
        RoutingDecision { rule: RoutingRule::UniformRotation, candidates, excluded }
    }

    /// A few words for a table cell (UI-1); [`Self::describe`] has the whole explanation.
    pub fn short(&self) -> String {
        match (self.rule, self.candidates) {
            (RoutingRule::SessionBinding, _) => "conversation".to_owned(),
            (RoutingRule::ParentSession, _) => "parent".to_owned(),
            (RoutingRule::UniformRotation, 0) | (RoutingRule::QuotaWeightedRotation, 0) => "none".to_owned(),
            (RoutingRule::UniformRotation, n) => format!("rotation of {n}"),
            (RoutingRule::QuotaWeightedRotation, n) => format!("weighted of {n}"),
        }
    }

    /// The explanation in words (UI-2).
    pub fn describe(&self) -> String {
        let mut text = match (self.rule, self.candidates) {
            (RoutingRule::SessionBinding, _) => "kept the conversation's account".to_owned(),
            (RoutingRule::ParentSession, _) => "used the parent conversation's account".to_owned(),
            (RoutingRule::UniformRotation, 0) => "no account could take it".to_owned(),
            (RoutingRule::UniformRotation, 1) => "rotation: 1 account left to choose".to_owned(),
            (RoutingRule::UniformRotation, n) => format!("rotation among {n} accounts"),
            (RoutingRule::QuotaWeightedRotation, n) => {
                format!("quota-weighted rotation among {n} accounts")
            }
        };
        let e = &self.excluded;
        let reasons: Vec<String> = [
            (e.cooldown, "cooling down"),
            (e.capacity, "at capacity"),
            (e.unavailable, "unavailable"),
            (e.quota, "out of quota"),
            (e.policy, "outside the provider path"),
            (e.model_support, "not serving this model or protocol"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
        if !reasons.is_empty() {
            text.push_str("; excluded: ");
            text.push_str(&reasons.join(", "));
        }
        text
    }
}

/// One request record as people see it (REC-2). Personal views never carry account fields (REC-3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub id: i64,
    pub request_id: String,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    /// REC-7 "first output"; null for compaction, streams without deltas and non-streaming calls.
    pub first_output_ms: Option<i64>,
    pub model: String,
    pub operation: String,
    pub key_id: Option<i64>,
    pub key_name: Option<String>,
    pub outcome: String,
    pub error_code: Option<String>,
    pub upstream_status: Option<u16>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
    /// Admin views only.
    pub member_id: Option<i64>,
    pub username: Option<String>,
    pub account_id: Option<i64>,
    /// Admin views only; "deleted" for deleted accounts (ACC-5).
    pub account_name: Option<String>,
    pub provider: Option<String>,
    /// EXP-1: how the account was chosen; none when rejected before routing or for old records.
    pub routing: Option<RoutingDecision>,
}

impl RequestRecord {
    /// REC-6: cached / input as a percentage with one decimal; `None` (shown as an em dash) when
    /// a count is missing, input is zero, or cached exceeds input.
    pub fn cache_hit_rate(&self) -> Option<f64> {
        match (self.input_tokens, self.cached_tokens) {
            (Some(input), Some(cached)) if input > 0 && cached <= input && cached >= 0 => {
                Some((cached as f64 * 1000.0 / input as f64).round() / 10.0)
            }
            _ => None,
        }
    }
}

/// REC-4 filters; `from` inclusive and `until` exclusive, unix seconds. `user_id` and
/// `account_id` are honoured on admin routes only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestFilter {
    #[serde(default, deserialize_with = "empty_as_none")]
    pub cursor: Option<i64>,
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub key_id: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub from: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub until: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub user_id: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub account_id: Option<i64>,
}

/// API-2: what the request filters can be set to, from the records the caller may read (REC-4):
/// the models and keys in retained history, and for admins its members and accounts. Bounded;
/// never a secret, and no subscription account in a personal view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestFilterChoices {
    pub outcomes: Vec<String>,
    pub models: Vec<String>,
    pub keys: Vec<KeyChoice>,
    /// Admin views only.
    pub members: Vec<MemberChoice>,
    /// Admin views only; deleted accounts are named "deleted (#id)".
    pub accounts: Vec<AccountChoice>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyChoice {
    pub id: i64,
    pub name: String,
    /// Revoked since (REC-4: its records stay filterable).
    pub revoked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberChoice {
    pub id: i64,
    pub username: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountChoice {
    pub id: i64,
    pub name: String,
}

/// The record outcomes (REC-2), in the order the filters offer them.
pub const OUTCOMES: [&str; 5] = ["success", "incomplete", "error", "cancelled", "rejected"];

/// Reads `""` (an empty form field) as `None`, and numbers given as strings (query strings).
fn empty_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Num(i64),
        Text(String),
    }
    let n = match Option::<Raw>::deserialize(d)? {
        None => return Ok(None),
        Some(Raw::Num(n)) => n,
        Some(Raw::Text(t)) if t.trim().is_empty() => return Ok(None),
        Some(Raw::Text(t)) => t.trim().parse::<i64>().map_err(serde::de::Error::custom)?,
    };
    T::try_from(n).map(Some).map_err(|_| serde::de::Error::custom(format!("{n} is out of range")))
}

/// A page of results (REC-5: 50 per page, cursor based).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `cursor` for the next (older) page; `None` on the last page.
    pub next_cursor: Option<i64>,
}

/// serde helper: distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        T: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }

    pub fn serialize<T: Serialize, S: Serializer>(v: &Option<Option<T>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn routing_explanations_read_as_words() {
        let kept = RoutingDecision::kept(RoutingRule::SessionBinding);
        assert_eq!(kept.describe(), "kept the conversation's account");
        let excluded = Exclusions { cooldown: 2, capacity: 1, model_support: 3, ..Exclusions::default() };
        assert_eq!(
            RoutingDecision::rotation(4, excluded).describe(),
            "rotation among 4 accounts; excluded: 2 cooling down, 1 at capacity, 3 not serving this model or protocol"
        );
        assert_eq!(
            RoutingDecision::rotation(0, Exclusions { unavailable: 1, ..Exclusions::default() }).describe(),
            "no account could take it; excluded: 1 unavailable"
        );
    }

    use super::*;

    #[test]
    fn member_patch_tells_absent_from_null() {
        let p: MemberPatch = serde_json::from_str("{}").unwrap();
        assert_eq!(p.rpm_limit, None);
        let p: MemberPatch = serde_json::from_str(r#"{"rpm_limit":null}"#).unwrap();
        assert_eq!(p.rpm_limit, Some(None));
        let p: MemberPatch = serde_json::from_str(r#"{"rpm_limit":60}"#).unwrap();
        assert_eq!(p.rpm_limit, Some(Some(60)));
    }

    #[test]
    fn credential_input_debug_hides_secrets() {
        let c: CredentialInput =
            serde_json::from_str(r#"{"kind":"api_key","api_key":"sk-very-secret"}"#).unwrap();
        assert!(!format!("{c:?}").contains("very-secret"));
    }

    fn record(input: Option<i64>, cached: Option<i64>) -> RequestRecord {
        RequestRecord {
            id: 1,
            request_id: "req_1".into(),
            started_at: DateTime::default(),
            duration_ms: 1,
            first_output_ms: None,
            model: "m".into(),
            operation: "responses".into(),
            key_id: None,
            key_name: None,
            outcome: "success".into(),
            error_code: None,
            upstream_status: None,
            input_tokens: input,
            output_tokens: None,
            cached_tokens: cached,
            member_id: None,
            username: None,
            account_id: None,
            account_name: None,
            provider: None,
            routing: None,
        }
    }

    #[test]
    fn cache_hit_rate_rules() {
        assert_eq!(record(Some(120), Some(64)).cache_hit_rate(), Some(53.3));
        assert_eq!(record(Some(100), Some(0)).cache_hit_rate(), Some(0.0));
        assert_eq!(record(Some(0), Some(0)).cache_hit_rate(), None);
        assert_eq!(record(Some(10), Some(11)).cache_hit_rate(), None);
        assert_eq!(record(None, Some(1)).cache_hit_rate(), None);
        assert_eq!(record(Some(1), None).cache_hit_rate(), None);
    }

    #[test]
    fn provider_names_round_trip() {
        for p in Provider::ALL {
            assert_eq!(Provider::parse(p.as_str()), Some(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
        }
    }
}

/// A budget policy (BUD-1) with its usage in the current window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetView {
    pub id: i64,
    /// `apikey`, `member` or `ws` (the workspace).
    pub subject: String,
    /// The key or member; none for the workspace.
    pub subject_id: Option<i64>,
    /// The key's name and owner, the member's username, or "Workspace".
    pub subject_name: String,
    /// `requests`, `total_tokens`, `prompt_tokens`, `completion_tokens` or `credits`.
    pub metric: String,
    /// `minute`, `minutes`, `day`, `month` or `total`.
    pub window: String,
    /// For a `minutes` window.
    pub window_minutes: Option<u32>,
    /// Credits may have decimals; the other metrics are whole numbers.
    pub limit: f64,
    pub used: f64,
    pub remaining: f64,
    /// When a refused client may retry (BUD-2: 90 s after the window's end); none for `total`.
    pub reset_at: Option<DateTime<Utc>>,
    /// Whether the viewer may change or delete it: an admin any; a member only one they set on
    /// a key of theirs (an admin's binds them).
    #[serde(default)]
    pub changeable: bool,
}

impl BudgetView {
    /// `300 requests / day`, `2.5 credits / 15 minutes`.
    pub fn describe(&self) -> String {
        let window = match (self.window.as_str(), self.window_minutes) {
            ("minutes", Some(n)) => format!("{n} minutes"),
            ("total", _) => "in total".to_owned(),
            (w, _) => w.to_owned(),
        };
        let sep = if self.window == "total" { " " } else { " / " };
        format!("{} {}{sep}{window}", self.limit, self.metric.replace('_', " "))
    }
}

/// A new budget policy. Admins set any; a key's owner sets their key's (`apikey`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewBudget {
    pub subject: String,
    #[serde(default)]
    pub subject_id: Option<i64>,
    pub metric: String,
    pub window: String,
    #[serde(default)]
    pub window_minutes: Option<i64>,
    pub limit: f64,
}

/// A budget's new limit. Its subject, metric and window stay: a different one is a new budget
/// (so no usage counted under the old rule can land in the new one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetPatch {
    pub limit: f64,
}

/// A model's price for the `credits` metric: credits per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceView {
    /// A model id, or `*` for every model without a price of its own.
    pub model: String,
    pub prompt: f64,
    pub completion: f64,
    /// Cached prompt tokens; the prompt price when none.
    pub cached: Option<f64>,
    /// `app` (set in the web app or API, overrides) or `config` (the configuration file).
    pub source: String,
}

/// A price set in the web app or API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceInput {
    pub prompt: f64,
    pub completion: f64,
    #[serde(default)]
    pub cached: Option<f64>,
}

/// The Usage page's filters (BEY-1): a period of 7, 30 or 90 days ending today, and for admins a
/// member, key, pool, account or model. Members see only their own usage, without accounts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageFilter {
    #[serde(default, deserialize_with = "empty_as_none")]
    pub days: Option<u32>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub user_id: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub key_id: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub pool_id: Option<i64>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub account_id: Option<i64>,
    #[serde(default)]
    pub model: Option<String>,
}

/// The periods the Usage page offers, in days.
pub const USAGE_PERIODS: [u32; 3] = [7, 30, 90];

impl UsageFilter {
    /// The period asked for, or 7 days when it is none of [`USAGE_PERIODS`].
    pub fn period(&self) -> u32 {
        self.days.filter(|d| USAGE_PERIODS.contains(d)).unwrap_or(7)
    }
}

/// Summed usage over some days (BEY-1): requests by outcome, tokens, and the sums behind the
/// average duration and time to first output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub requests: i64,
    pub succeeded: i64,
    pub incomplete: i64,
    pub errors: i64,
    pub cancelled: i64,
    pub rejected: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub duration_ms_sum: i64,
    pub first_output_ms_sum: i64,
    pub first_output_count: i64,
}

impl UsageTotals {
    /// Calls that did not end well for the caller: upstream errors, cut-off answers and the
    /// gateway's refusals. A client that went away is not counted.
    pub fn failed(&self) -> i64 {
        self.errors + self.incomplete + self.rejected
    }

    /// Failed calls as a share of all calls, 0..=1 (0 without calls).
    pub fn error_rate(&self) -> f64 {
        if self.requests == 0 { 0.0 } else { self.failed() as f64 / self.requests as f64 }
    }

    /// Mean duration in milliseconds.
    pub fn mean_duration_ms(&self) -> Option<i64> {
        (self.requests > 0).then(|| self.duration_ms_sum / self.requests)
    }

    /// Mean time to first output in milliseconds, over the calls that had one.
    pub fn mean_first_output_ms(&self) -> Option<i64> {
        (self.first_output_count > 0).then(|| self.first_output_ms_sum / self.first_output_count)
    }

    /// What is left of these totals without `o` (a part of them).
    pub fn subtract(&mut self, o: &UsageTotals) {
        self.requests -= o.requests;
        self.succeeded -= o.succeeded;
        self.incomplete -= o.incomplete;
        self.errors -= o.errors;
        self.cancelled -= o.cancelled;
        self.rejected -= o.rejected;
        self.input_tokens -= o.input_tokens;
        self.output_tokens -= o.output_tokens;
        self.cached_tokens -= o.cached_tokens;
        self.duration_ms_sum -= o.duration_ms_sum;
        self.first_output_ms_sum -= o.first_output_ms_sum;
        self.first_output_count -= o.first_output_count;
    }

    pub fn add(&mut self, o: &UsageTotals) {
        self.requests += o.requests;
        self.succeeded += o.succeeded;
        self.incomplete += o.incomplete;
        self.errors += o.errors;
        self.cancelled += o.cancelled;
        self.rejected += o.rejected;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.duration_ms_sum += o.duration_ms_sum;
        self.first_output_ms_sum += o.first_output_ms_sum;
        self.first_output_count += o.first_output_count;
    }
}

/// One day's usage; `day` is `YYYY-MM-DD` in the workspace time zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageDay {
    pub day: String,
    pub totals: UsageTotals,
}

/// One model's usage over the period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageByModel {
    pub model: String,
    pub totals: UsageTotals,
}

/// One row of the Usage table and its CSV: a day and a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    pub day: String,
    pub model: String,
    pub totals: UsageTotals,
}

/// The Usage page (BEY-1): the period's days (every one, zero when quiet), its models, the rows
/// of its table, and the filter choices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// The IANA time zone the days follow.
    pub zone: String,
    pub days: u32,
    /// Oldest first.
    pub series: Vec<UsageDay>,
    /// Most requests first.
    pub by_model: Vec<UsageByModel>,
    /// Newest day first, then by model.
    pub rows: Vec<UsageRow>,
    /// The rows stop at a limit (the days, models and totals still count everything).
    #[serde(default)]
    pub truncated: bool,
    pub totals: UsageTotals,
    pub choices: UsageChoices,
}

/// What the Usage filters offer: who and what appears in the kept summaries (members and
/// accounts for admins only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageChoices {
    pub models: Vec<String>,
    pub keys: Vec<KeyChoice>,
    pub pools: Vec<PoolChoice>,
    pub members: Vec<MemberChoice>,
    pub accounts: Vec<AccountChoice>,
}
