//! One typed configuration (OPS-1), built from four layers in increasing precedence:
//! built-in defaults < TOML file (`--config`) < `SUBLANE_*` environment < command-line flags.
//!
//! Every layer is the same [`Settings`] shape with all fields optional, so precedence is a plain
//! field-wise merge and each layer can be tested on its own. Defaults are named constants, each
//! written once, next to the SPEC id that sets it.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use app::model::Provider;
use clap::Parser;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

/// Listen address for the proxy, the JSON API and the web app.
pub const DEFAULT_ADDR: &str = "127.0.0.1:3000";
/// Data directory: SQLite database, `credentials.key`, the process lock (OPS-2).
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Lifetime of a browser session (ID-2).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Operations in flight at once, waiters and metadata reads included (ADM-2).
pub const DEFAULT_WORKSPACE_CAPACITY: usize = 128;
/// Most threads that serve connections (one per CPU is what helps).
pub const MAX_SERVE_THREADS: usize = 256;
/// Where the built site (`pkg/` with wasm, js, css) is served from.
pub const DEFAULT_SITE_ROOT: &str = "target/site";
/// Longest a send to a client may wait for the client to read (a stalled reader frees its slots).
pub const DEFAULT_CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a client connection may take to send a request's head, counted from the connection's
/// start or its previous answer's end: so also how long an idle keep-alive connection stays
/// open. Longer than the idle time of the connections that come to SubLane (a reverse proxy's
/// upstream keep-alive, 60 s in nginx and AWS's load balancers; the pools of reqwest, which Codex
/// uses, and of Go, 90 s), so that the client, not SubLane, closes an idle one: a request sent
/// just as the server closes its connection fails, and a proxy does not retry a POST.
pub const DEFAULT_CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(100);
/// The longest head timeout accepted (hyper adds it to the time of day, which must not overflow).
pub const MAX_CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The longest a serving thread polls its sockets, after it served a client, before it sleeps
/// (see `serve::spin`): long enough to cover a near upstream's answer and a near client's next
/// request, short enough that an idle thread spends next to nothing.
pub const DEFAULT_SERVE_POLL: Duration = Duration::from_micros(100);
/// The longest poll window accepted: past a millisecond, polling costs a CPU more than sleeping
/// would cost the call.
pub const MAX_SERVE_POLL: Duration = Duration::from_millis(1);
/// CD-6: longest wait for an upstream's answer head on a model call (and, after it, for a
/// stream's first byte).
pub const DEFAULT_UPSTREAM_HEADER_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// CD-6: longest a model call or WebSocket turn may take in all, counted from its start.
pub const DEFAULT_REQUEST_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// The longest request deadline accepted.
pub const MAX_REQUEST_DEADLINE: Duration = Duration::from_secs(24 * 3600);
/// OPS-3: how long open streams may go on after a shutdown signal.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Real upstream hosts; every one is configurable so tests and demos point at the mock upstream.
pub const DEFAULT_CODEX_BASE_URL: &str = "https://chatgpt.com/backend-api/codex";
pub const DEFAULT_CODEX_USAGE_URL: &str = "https://chatgpt.com/backend-api/wham/usage";
pub const DEFAULT_CODEX_TOKEN_URL: &str = "https://auth.openai.com/oauth/token";
pub const DEFAULT_CLAUDE_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_CLAUDE_TOKEN_URL: &str = "https://platform.claude.com/v1/oauth/token";
pub const DEFAULT_ANTIGRAVITY_BASE_URL: &str = "https://cloudcode-pa.googleapis.com";
pub const DEFAULT_GOOGLE_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// The providers' OAuth clients (CRED-5), as their own CLIs register them (protocols.md §3-5).
pub const DEFAULT_CODEX_AUTHORIZE_URL: &str = "https://auth.openai.com/oauth/authorize";
pub const DEFAULT_CODEX_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
pub const DEFAULT_CODEX_REDIRECT_URI: &str = "http://localhost:1455/auth/callback";
pub const DEFAULT_CLAUDE_AUTHORIZE_URL: &str = "https://claude.ai/oauth/authorize";
pub const DEFAULT_CLAUDE_CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
pub const DEFAULT_CLAUDE_REDIRECT_URI: &str = "https://console.anthropic.com/oauth/code/callback";
pub const DEFAULT_GOOGLE_AUTHORIZE_URL: &str = "https://accounts.google.com/o/oauth2/v2/auth";
pub const DEFAULT_GOOGLE_CLIENT_ID: &str =
    "1071006060591-tmhssin2h21lcre235vtolojh4g403ep.apps.googleusercontent.com";
pub const DEFAULT_GOOGLE_REDIRECT_URI: &str = "http://localhost:51121/oauth-callback";

/// A configuration layer that cannot be turned into a [`Config`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ReadFile { path: PathBuf, source: std::io::Error },
    /// The `--config` file is not valid TOML for [`Settings`] (unknown keys are errors too).
    #[error("invalid config file {path}: {message}")]
    ParseFile { path: PathBuf, message: String },
    /// An environment variable holds a value of the wrong shape.
    #[error("invalid value for {name}: {message}")]
    Env { name: &'static str, message: String },
    /// A value that parsed but makes no sense (for example an unsupported database URL).
    #[error("{0}")]
    Invalid(String),
}

/// Command line of the `sublane` binary.
#[derive(Debug, Parser)]
#[command(
    name = "sublane",
    version,
    about = "SubLane: a self-hosted gateway for shared subscription accounts"
)]
pub struct Cli {
    /// Optional TOML file with the same keys as the flags below (snake_case).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
}

/// One configuration layer. Every field is optional; `None` means "not set at this layer".
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Listen address [env: SUBLANE_ADDR] [default: 127.0.0.1:3000]
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<SocketAddr>,
    /// Data directory for the database, credentials.key and the process lock [env: SUBLANE_DATA_DIR] [default: ./data]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// SQLite database URL [env: SUBLANE_DATABASE_URL] [default: sqlite://<data dir>/sublane.db]
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Password of the bootstrap admin `admin` on first start; generated and printed once when unset [env: SUBLANE_ADMIN_PASSWORD]
    #[arg(long, value_name = "PASSWORD", value_parser = parse_secret)]
    pub admin_password: Option<SecretString>,
    /// Public origin (scheme://host[:port]) when behind a reverse proxy; https makes session cookies Secure [env: SUBLANE_PUBLIC_URL]
    #[arg(long, value_name = "URL")]
    pub public_url: Option<url::Url>,
    /// Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed, comma-separated IPs or CIDRs, e.g. "127.0.0.1,10.0.0.0/8" [env: SUBLANE_TRUSTED_PROXIES] [default: none]
    #[arg(long, value_name = "LIST", value_parser = parse_nets)]
    #[serde(default)]
    pub trusted_proxies: Option<Networks>,
    /// Browser session lifetime, e.g. "12h" or "7d" [env: SUBLANE_SESSION_TTL] [default: 7d]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub session_ttl: Option<Duration>,
    /// Directory of the built web assets (pkg/) [env: SUBLANE_SITE_ROOT] [default: target/site]
    #[arg(long, value_name = "DIR")]
    pub site_root: Option<PathBuf>,
    /// Operations in flight at once, model calls and metadata reads (ADM-2) [env: SUBLANE_WORKSPACE_CAPACITY] [default: 128]
    #[arg(long, value_name = "N")]
    pub workspace_capacity: Option<usize>,
    /// Threads that serve connections, each running its own single-threaded runtime; 0 serves on the runtime that started SubLane [env: SUBLANE_SERVE_THREADS] [default: the number of CPUs]
    #[arg(long, value_name = "N")]
    pub serve_threads: Option<usize>,
    /// How long a serving thread keeps polling its sockets after it served a client, before it sleeps; adapts to the traffic, at most 1ms; "0s" turns it off [env: SUBLANE_SERVE_POLL] [default: 100us]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub serve_poll: Option<Duration>,
    /// Let the kernel back the process's memory with transparent huge pages: 3-6 % less CPU per call at full load, about 1.5x the resident memory per open stream [env: SUBLANE_HUGE_PAGES] [default: false]
    #[arg(long, value_name = "BOOL")]
    pub huge_pages: Option<bool>,
    /// Start although credentials.key cannot open the stored account credentials (the key is lost): a missing key is made anew, and the accounts whose credentials it cannot open are marked error until re-authorized (their credentials kept: the old key, found again, opens them). Without it SubLane refuses to start so [env: SUBLANE_REPLACE_CREDENTIALS_KEY] [default: false]
    #[arg(long, value_name = "BOOL")]
    pub replace_credentials_key: Option<bool>,
    /// End a stream, or a WebSocket turn, when the upstream sends no event for this long (keep-alives do not count), e.g. "5m" (CD-6) [env: SUBLANE_STREAM_IDLE_TIMEOUT] [default: off]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub stream_idle_timeout: Option<Duration>,
    /// Longest wait for an upstream's answer head on a model call, and then for a stream's first byte, e.g. "5m"; at most the request deadline (CD-6) [env: SUBLANE_UPSTREAM_HEADER_TIMEOUT] [default: 5m]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub upstream_header_timeout: Option<Duration>,
    /// Longest a model call or WebSocket turn may take in all, from its start (queueing, retries and streaming included), e.g. "30m"; at most "1d" (CD-6) [env: SUBLANE_REQUEST_DEADLINE] [default: 30m]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub request_deadline: Option<Duration>,
    /// End a response when the client has not read any of it for this long, e.g. "60s" [env: SUBLANE_CLIENT_WRITE_TIMEOUT] [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub client_write_timeout: Option<Duration>,
    /// Close a client connection that has not sent a whole request head this long after it opened or after its last answer (idle keep-alive connections too), e.g. "100s" [env: SUBLANE_CLIENT_HEADER_TIMEOUT] [default: 100s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub client_header_timeout: Option<Duration>,
    /// After SIGTERM/SIGINT, how long open streams may finish before they are cut (OPS-3) [env: SUBLANE_SHUTDOWN_GRACE] [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub shutdown_grace: Option<Duration>,
    /// Longest wait in a pool's queue for an account slot, e.g. "30s" (ADM-6) [env: SUBLANE_QUEUE_TIMEOUT] [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub queue_timeout: Option<Duration>,
    /// Most requests waiting per pool (ADM-6) [env: SUBLANE_QUEUE_CAPACITY] [default: 100]
    #[arg(long, value_name = "N")]
    pub queue_capacity: Option<usize>,
    /// Upstream failures of one model on one account that start a model cooldown; 0 disables (CD-2) [env: SUBLANE_FAILURE_THRESHOLD] [default: 3]
    #[arg(long, value_name = "N")]
    pub failure_threshold: Option<u32>,
    /// Window in which those failures are counted (CD-2) [env: SUBLANE_FAILURE_WINDOW] [default: 2m]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub failure_window: Option<Duration>,
    /// First model cooldown; repeats double it up to 5 minutes (CD-2) [env: SUBLANE_MODEL_COOLDOWN] [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub model_cooldown: Option<Duration>,
    /// Account cooldown after an upstream 429 without a usable Retry-After (CD-1) [env: SUBLANE_RATE_LIMIT_FALLBACK] [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub rate_limit_fallback: Option<Duration>,
    /// Pause after an upstream 529 / overload without a usable Retry-After (CD-5) [env: SUBLANE_OVERLOAD_PAUSE] [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub overload_pause: Option<Duration>,
    /// A conversation binding unused this long is forgotten (RT-1) [env: SUBLANE_BINDING_TTL] [default: 24h]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub binding_ttl: Option<Duration>,
    /// Rotation weighted by each account's remaining subscription quota (RT-6); read at start
    /// [env: SUBLANE_GATEWAY_QUOTA_WEIGHTED] [default: false]
    #[arg(long, value_name = "BOOL")]
    #[serde(default)]
    pub gateway_quota_weighted: Option<bool>,
    /// Time zone of calendar budget windows (days, months), an IANA name [env: SUBLANE_TIME_ZONE] [default: Asia/Shanghai]
    #[arg(long, value_name = "ZONE")]
    #[serde(default)]
    pub time_zone: Option<chrono_tz::Tz>,
    /// Credits per million tokens by model, for `credits` budgets; config file only:
    /// `[prices."gpt-5.1"] prompt = 1.25, completion = 10.0, cached = 0.125` (`"*"` for any other model)
    #[arg(skip)]
    #[serde(default)]
    pub prices: Option<std::collections::BTreeMap<String, crate::budgets::Price>>,
    #[command(flatten)]
    #[serde(default)]
    pub upstream: UpstreamSettings,
    #[command(flatten)]
    #[serde(default)]
    pub oauth: OAuthSettings,
    #[command(flatten)]
    #[serde(default)]
    pub models: ModelSettings,
    #[command(flatten)]
    #[serde(default)]
    pub observability: ObservabilitySettings,
}

/// Metrics, logs and traces (OPS-4, BEY-4, BEY-5).
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct ObservabilitySettings {
    /// Serve Prometheus metrics at /metrics and count them on every call [env: SUBLANE_METRICS] [default: true]
    #[arg(long, value_name = "BOOL")]
    pub metrics: Option<bool>,
    /// Bearer token /metrics requires; open to anyone who reaches it when unset [env: SUBLANE_METRICS_TOKEN]
    #[arg(long, value_name = "TOKEN", value_parser = parse_secret)]
    pub metrics_token: Option<SecretString>,
    /// Log line format: `text` or `json` (one object per line) [env: SUBLANE_LOG_FORMAT] [default: text]
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// OpenTelemetry collector to export traces to over OTLP/HTTP, e.g. http://127.0.0.1:4318; no traces when unset [env: SUBLANE_OTLP_ENDPOINT]
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<url::Url>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("`{other}` is not a log format (text or json)")),
        }
    }
}

/// Resolved observability settings.
#[derive(Debug, Clone, Default)]
pub struct Observability {
    pub metrics: bool,
    pub metrics_token: Option<SecretString>,
    pub log_format: LogFormat,
    pub otlp_endpoint: Option<url::Url>,
}

/// The models each provider's accounts serve (RT-8, ID-4, PX-4), when an operator closes the
/// list: a model outside it is 404 `model_not_found` before any upstream call.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Models Codex accounts serve, comma-separated [env: SUBLANE_CODEX_MODELS] [default: any]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub codex_models: Option<Vec<String>>,
    /// Models Claude accounts serve [env: SUBLANE_CLAUDE_MODELS] [default: any]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub claude_models: Option<Vec<String>>,
    /// Models Antigravity accounts serve [env: SUBLANE_ANTIGRAVITY_MODELS] [default: the provider's list]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub antigravity_models: Option<Vec<String>>,
    /// Models OpenAI API-key accounts serve [env: SUBLANE_OPENAI_MODELS] [default: any]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub openai_models: Option<Vec<String>>,
    /// Models Anthropic API-key accounts serve [env: SUBLANE_ANTHROPIC_MODELS] [default: any]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub anthropic_models: Option<Vec<String>>,
}

/// The OAuth clients SubLane signs accounts in with and refreshes their tokens as (CRED-5). The
/// Google client secret has no default: it is configuration only, never committed.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettings {
    /// Codex (ChatGPT) authorize URL [env: SUBLANE_CODEX_AUTHORIZE_URL]
    #[arg(long, value_name = "URL")]
    pub codex_authorize_url: Option<url::Url>,
    /// Codex OAuth client id [env: SUBLANE_CODEX_CLIENT_ID]
    #[arg(long, value_name = "ID")]
    pub codex_client_id: Option<String>,
    /// Codex OAuth redirect URI (where the browser lands; its URL is pasted back) [env: SUBLANE_CODEX_REDIRECT_URI]
    #[arg(long, value_name = "URI")]
    pub codex_redirect_uri: Option<String>,
    /// Claude authorize URL [env: SUBLANE_CLAUDE_AUTHORIZE_URL]
    #[arg(long, value_name = "URL")]
    pub claude_authorize_url: Option<url::Url>,
    /// Claude OAuth client id [env: SUBLANE_CLAUDE_CLIENT_ID]
    #[arg(long, value_name = "ID")]
    pub claude_client_id: Option<String>,
    /// Claude OAuth redirect URI [env: SUBLANE_CLAUDE_REDIRECT_URI]
    #[arg(long, value_name = "URI")]
    pub claude_redirect_uri: Option<String>,
    /// Google (Antigravity) authorize URL [env: SUBLANE_GOOGLE_AUTHORIZE_URL]
    #[arg(long, value_name = "URL")]
    pub google_authorize_url: Option<url::Url>,
    /// Google (Antigravity) OAuth client id [env: SUBLANE_GOOGLE_CLIENT_ID]
    #[arg(long, value_name = "ID")]
    pub google_client_id: Option<String>,
    /// Google (Antigravity) OAuth client secret, needed to sign in and refresh Antigravity accounts [env: SUBLANE_GOOGLE_CLIENT_SECRET]
    #[arg(long, value_name = "SECRET", value_parser = parse_secret)]
    pub google_client_secret: Option<SecretString>,
    /// Google (Antigravity) OAuth redirect URI [env: SUBLANE_GOOGLE_REDIRECT_URI]
    #[arg(long, value_name = "URI")]
    pub google_redirect_uri: Option<String>,
}

/// One provider's OAuth client.
#[derive(Debug, Clone)]
pub struct OAuthClient {
    pub authorize_url: url::Url,
    pub client_id: String,
    pub client_secret: Option<SecretString>,
    pub redirect_uri: String,
}

/// The resolved OAuth clients.
#[derive(Debug, Clone)]
pub struct OAuthClients {
    pub codex: OAuthClient,
    pub claude: OAuthClient,
    pub google: OAuthClient,
}

/// Upstream base URLs, one per provider endpoint family.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSettings {
    /// Codex backend base [env: SUBLANE_CODEX_BASE_URL]
    #[arg(long, value_name = "URL")]
    pub codex_base_url: Option<url::Url>,
    /// Codex usage endpoint [env: SUBLANE_CODEX_USAGE_URL]
    #[arg(long, value_name = "URL")]
    pub codex_usage_url: Option<url::Url>,
    /// Codex OAuth token endpoint [env: SUBLANE_CODEX_TOKEN_URL]
    #[arg(long, value_name = "URL")]
    pub codex_token_url: Option<url::Url>,
    /// Claude API base for OAuth accounts [env: SUBLANE_CLAUDE_BASE_URL]
    #[arg(long, value_name = "URL")]
    pub claude_base_url: Option<url::Url>,
    /// Claude OAuth token endpoint [env: SUBLANE_CLAUDE_TOKEN_URL]
    #[arg(long, value_name = "URL")]
    pub claude_token_url: Option<url::Url>,
    /// Antigravity (Cloud Code Assist) base [env: SUBLANE_ANTIGRAVITY_BASE_URL]
    #[arg(long, value_name = "URL")]
    pub antigravity_base_url: Option<url::Url>,
    /// Google OAuth token endpoint [env: SUBLANE_GOOGLE_TOKEN_URL]
    #[arg(long, value_name = "URL")]
    pub google_token_url: Option<url::Url>,
    /// OpenAI API base for API-key accounts [env: SUBLANE_OPENAI_BASE_URL]
    #[arg(long, value_name = "URL")]
    pub openai_base_url: Option<url::Url>,
    /// Anthropic API base for API-key accounts [env: SUBLANE_ANTHROPIC_BASE_URL]
    #[arg(long, value_name = "URL")]
    pub anthropic_base_url: Option<url::Url>,
    /// User agent of Antigravity calls, for when Cloud Code stops taking the built-in version
    /// [env: SUBLANE_ANTIGRAVITY_USER_AGENT]
    #[arg(long, value_name = "AGENT")]
    pub antigravity_user_agent: Option<String>,
    /// User agent of Claude token calls and test calls [env: SUBLANE_CLAUDE_USER_AGENT]
    #[arg(long, value_name = "AGENT")]
    pub claude_user_agent: Option<String>,
    /// User agent of Codex token, usage and test calls [env: SUBLANE_CODEX_USER_AGENT]
    #[arg(long, value_name = "AGENT")]
    pub codex_user_agent: Option<String>,
}

fn parse_secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s.to_owned()))
}

/// A list of IP networks (a bare address is a /32 or /128).
#[derive(Debug, Clone, Default)]
pub struct Networks(pub Vec<ipnet::IpNet>);

/// A comma-separated list of IP addresses or CIDR networks.
fn parse_nets(list: &str) -> Result<Networks, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            item.parse::<ipnet::IpNet>()
                .or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{item:?} is neither an IP address nor a CIDR network"))
        })
        .collect::<Result<_, _>>()
        .map(Networks)
}

/// In a TOML file: an array of addresses or networks.
impl<'de> Deserialize<'de> for Networks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items: Vec<String> = Deserialize::deserialize(d)?;
        parse_nets(&items.join(",")).map_err(serde::de::Error::custom)
    }
}

/// The resolved configuration every part of the server reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub admin_password: Option<SecretString>,
    pub public_url: Option<url::Url>,
    /// Reverse proxies whose forwarding headers are believed (client address, https).
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub session_ttl: Duration,
    pub site_root: PathBuf,
    /// Longest a send may wait for a client to read (streams, WebSocket frames).
    pub client_write_timeout: Duration,
    /// Longest a client connection may take to send a request head, from its start or its last
    /// answer's end (idle keep-alive connections included); then it is closed.
    pub client_header_timeout: Duration,
    /// OPS-3: how long open streams may finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// CD-6: optional stream idle timeout (upstream events only); off by default.
    pub stream_idle_timeout: Option<Duration>,
    /// CD-6: longest wait for an upstream's answer head on a model call, and then for a stream's
    /// first byte; never longer than `request_deadline`.
    pub upstream_header_timeout: Duration,
    /// CD-6: longest a model call or WebSocket turn may take in all, from its start.
    pub request_deadline: Duration,
    /// ADM-2: operations in flight at once.
    pub workspace_capacity: usize,
    /// Threads that serve connections, each with a single-threaded runtime of its own (a
    /// connection, its calls and their upstream connections stay on one thread, so a call wakes
    /// no other serving thread); 0 serves on the runtime that called [`crate::serve::start`].
    pub serve_threads: usize,
    /// The longest a serving thread polls its sockets before it sleeps (see `serve::spin`);
    /// zero never.
    pub serve_poll: Duration,
    /// Whether the heap may use transparent huge pages (see [`crate::huge_pages`]).
    pub huge_pages: bool,
    /// ID-6: start with a credentials key that cannot open the stored credentials (see
    /// `serve::credentials_key`).
    pub replace_credentials_key: bool,
    /// ADM-6, CD-2: queues and the failure policy.
    pub scheduler: crate::scheduler::Settings,
    pub upstream: UpstreamUrls,
    pub oauth: OAuthClients,
    /// RT-8, ID-4: configured model lists.
    pub models: crate::catalogue::Catalogues,
    /// Which workspace settings the environment or config file set (the web app says so).
    pub configured: crate::workspace_settings::Configured,
    /// BUD-1: the zone calendar budget windows follow.
    pub time_zone: chrono_tz::Tz,
    /// BUD-1: the configured price table (the web app's prices override it).
    pub prices: crate::budgets::Prices,
    /// OPS-4, BEY-5: metrics, log format and trace export.
    pub observability: Observability,
}

/// Resolved upstream URLs.
#[derive(Debug, Clone)]
pub struct UpstreamUrls {
    pub codex_base_url: url::Url,
    pub codex_usage_url: url::Url,
    pub codex_token_url: url::Url,
    pub claude_base_url: url::Url,
    pub claude_token_url: url::Url,
    pub antigravity_base_url: url::Url,
    pub google_token_url: url::Url,
    pub openai_base_url: url::Url,
    pub anthropic_base_url: url::Url,
    /// Who SubLane says it is where no client of its own speaks (`providers::identity`).
    pub agents: crate::providers::identity::Agents,
    /// The model-call URLs, joined from the bases above once, when the settings are resolved
    /// (the only place this struct is made). A base changed afterwards would leave them stale:
    /// make a new `UpstreamUrls` instead.
    pub endpoints: Endpoints,
}

/// Each model-call URL: a base URL joined with its operation's path. Joined when the settings are
/// resolved, not per call: joining parses the path again, and that was the largest part of
/// building a call's upstream request.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub codex_responses: url::Url,
    pub codex_compact: url::Url,
    pub openai_responses: url::Url,
    pub openai_compact: url::Url,
    pub claude_messages: url::Url,
    pub claude_count_tokens: url::Url,
    /// Without a query: the client's `beta` is added per call.
    pub anthropic_messages: url::Url,
    pub anthropic_count_tokens: url::Url,
    pub antigravity_generate: url::Url,
    pub antigravity_stream: url::Url,
}

impl Endpoints {
    fn join(
        codex: &url::Url,
        openai: &url::Url,
        claude: &url::Url,
        anthropic: &url::Url,
        antigravity: &url::Url,
    ) -> Self {
        Endpoints {
            codex_responses: joined(codex, "/responses"),
            codex_compact: joined(codex, "/responses/compact"),
            openai_responses: joined(openai, "/responses"),
            openai_compact: joined(openai, "/responses/compact"),
            claude_messages: joined(claude, "/v1/messages?beta=true"),
            claude_count_tokens: joined(claude, "/v1/messages/count_tokens?beta=true"),
            anthropic_messages: joined(anthropic, "/v1/messages"),
            anthropic_count_tokens: joined(anthropic, "/v1/messages/count_tokens"),
            antigravity_generate: joined(antigravity, "/v1internal:generateContent"),
            antigravity_stream: joined(antigravity, "/v1internal:streamGenerateContent?alt=sse"),
        }
    }
}

/// `path` (with its query, if any) after `base`'s own path; `base`'s query is not kept.
fn joined(base: &url::Url, path: &str) -> url::Url {
    let (path, query) = path.split_once('?').map_or((path, None), |(p, q)| (p, Some(q)));
    let mut url = base.clone();
    url.set_path(&format!("{}{path}", base.path().trim_end_matches('/')));
    url.set_query(query);
    url
}

impl Settings {
    /// Reads the `SUBLANE_*` variables through `lookup` (the process environment in production,
    /// a map in tests, so tests never race on the real environment).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let var = |name: &'static str| lookup(name).filter(|v| !v.is_empty());
        let parse = |name: &'static str| -> Result<Option<url::Url>, ConfigError> {
            var(name).map(|v| v.parse().map_err(|e: url::ParseError| env_err(name, e))).transpose()
        };
        let duration = |name: &'static str| -> Result<Option<Duration>, ConfigError> {
            var(name).map(|v| humantime::parse_duration(&v).map_err(|e| env_err(name, e))).transpose()
        };
        let list = |name: &'static str| -> Option<Vec<String>> {
            var(name).map(|v| v.split(',').map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect())
        };
        fn parsed<T: std::str::FromStr>(
            name: &'static str,
            v: Option<String>,
        ) -> Result<Option<T>, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            v.map(|v| v.parse().map_err(|e| env_err(name, e))).transpose()
        }

        Ok(Self {
            addr: var("SUBLANE_ADDR")
                .map(|v| v.parse().map_err(|e| env_err("SUBLANE_ADDR", e)))
                .transpose()?,
            data_dir: var("SUBLANE_DATA_DIR").map(PathBuf::from),
            database_url: var("SUBLANE_DATABASE_URL"),
            admin_password: var("SUBLANE_ADMIN_PASSWORD").map(SecretString::from),
            public_url: parse("SUBLANE_PUBLIC_URL")?,
            trusted_proxies: var("SUBLANE_TRUSTED_PROXIES")
                .map(|v| parse_nets(&v).map_err(|e| env_err("SUBLANE_TRUSTED_PROXIES", e)))
                .transpose()?,
            client_write_timeout: duration("SUBLANE_CLIENT_WRITE_TIMEOUT")?,
            client_header_timeout: duration("SUBLANE_CLIENT_HEADER_TIMEOUT")?,
            shutdown_grace: duration("SUBLANE_SHUTDOWN_GRACE")?,
            upstream_header_timeout: duration("SUBLANE_UPSTREAM_HEADER_TIMEOUT")?,
            request_deadline: duration("SUBLANE_REQUEST_DEADLINE")?,
            session_ttl: var("SUBLANE_SESSION_TTL")
                .map(|v| humantime::parse_duration(&v).map_err(|e| env_err("SUBLANE_SESSION_TTL", e)))
                .transpose()?,
            site_root: var("SUBLANE_SITE_ROOT").map(PathBuf::from),
            workspace_capacity: var("SUBLANE_WORKSPACE_CAPACITY")
                .map(|v| v.parse().map_err(|e| env_err("SUBLANE_WORKSPACE_CAPACITY", e)))
                .transpose()?,
            serve_threads: var("SUBLANE_SERVE_THREADS")
                .map(|v| v.parse().map_err(|e| env_err("SUBLANE_SERVE_THREADS", e)))
                .transpose()?,
            serve_poll: duration("SUBLANE_SERVE_POLL")?,
            huge_pages: parsed(
                "SUBLANE_HUGE_PAGES",
                var("SUBLANE_HUGE_PAGES").map(|v| v.to_ascii_lowercase()),
            )?,
            replace_credentials_key: parsed(
                "SUBLANE_REPLACE_CREDENTIALS_KEY",
                var("SUBLANE_REPLACE_CREDENTIALS_KEY").map(|v| v.to_ascii_lowercase()),
            )?,
            stream_idle_timeout: duration("SUBLANE_STREAM_IDLE_TIMEOUT")?,
            queue_timeout: duration("SUBLANE_QUEUE_TIMEOUT")?,
            queue_capacity: parsed("SUBLANE_QUEUE_CAPACITY", var("SUBLANE_QUEUE_CAPACITY"))?,
            failure_threshold: parsed("SUBLANE_FAILURE_THRESHOLD", var("SUBLANE_FAILURE_THRESHOLD"))?,
            failure_window: duration("SUBLANE_FAILURE_WINDOW")?,
            model_cooldown: duration("SUBLANE_MODEL_COOLDOWN")?,
            rate_limit_fallback: duration("SUBLANE_RATE_LIMIT_FALLBACK")?,
            overload_pause: duration("SUBLANE_OVERLOAD_PAUSE")?,
            binding_ttl: duration("SUBLANE_BINDING_TTL")?,
            gateway_quota_weighted: parsed(
                "SUBLANE_GATEWAY_QUOTA_WEIGHTED",
                var("SUBLANE_GATEWAY_QUOTA_WEIGHTED").map(|v| v.to_ascii_lowercase()),
            )?,
            time_zone: parsed("SUBLANE_TIME_ZONE", var("SUBLANE_TIME_ZONE"))?,
            prices: None,
            upstream: UpstreamSettings {
                codex_base_url: parse("SUBLANE_CODEX_BASE_URL")?,
                codex_usage_url: parse("SUBLANE_CODEX_USAGE_URL")?,
                codex_token_url: parse("SUBLANE_CODEX_TOKEN_URL")?,
                claude_base_url: parse("SUBLANE_CLAUDE_BASE_URL")?,
                claude_token_url: parse("SUBLANE_CLAUDE_TOKEN_URL")?,
                antigravity_base_url: parse("SUBLANE_ANTIGRAVITY_BASE_URL")?,
                google_token_url: parse("SUBLANE_GOOGLE_TOKEN_URL")?,
                openai_base_url: parse("SUBLANE_OPENAI_BASE_URL")?,
                anthropic_base_url: parse("SUBLANE_ANTHROPIC_BASE_URL")?,
                antigravity_user_agent: var("SUBLANE_ANTIGRAVITY_USER_AGENT"),
                claude_user_agent: var("SUBLANE_CLAUDE_USER_AGENT"),
                codex_user_agent: var("SUBLANE_CODEX_USER_AGENT"),
            },
            models: ModelSettings {
                codex_models: list("SUBLANE_CODEX_MODELS"),
                claude_models: list("SUBLANE_CLAUDE_MODELS"),
                antigravity_models: list("SUBLANE_ANTIGRAVITY_MODELS"),
                openai_models: list("SUBLANE_OPENAI_MODELS"),
                anthropic_models: list("SUBLANE_ANTHROPIC_MODELS"),
            },
            oauth: OAuthSettings {
                codex_authorize_url: parse("SUBLANE_CODEX_AUTHORIZE_URL")?,
                codex_client_id: var("SUBLANE_CODEX_CLIENT_ID"),
                codex_redirect_uri: var("SUBLANE_CODEX_REDIRECT_URI"),
                claude_authorize_url: parse("SUBLANE_CLAUDE_AUTHORIZE_URL")?,
                claude_client_id: var("SUBLANE_CLAUDE_CLIENT_ID"),
                claude_redirect_uri: var("SUBLANE_CLAUDE_REDIRECT_URI"),
                google_authorize_url: parse("SUBLANE_GOOGLE_AUTHORIZE_URL")?,
                google_client_id: var("SUBLANE_GOOGLE_CLIENT_ID"),
                google_client_secret: var("SUBLANE_GOOGLE_CLIENT_SECRET").map(SecretString::from),
                google_redirect_uri: var("SUBLANE_GOOGLE_REDIRECT_URI"),
            },
            observability: ObservabilitySettings {
                metrics: parsed("SUBLANE_METRICS", var("SUBLANE_METRICS").map(|v| v.to_ascii_lowercase()))?,
                metrics_token: var("SUBLANE_METRICS_TOKEN").map(SecretString::from),
                log_format: parsed("SUBLANE_LOG_FORMAT", var("SUBLANE_LOG_FORMAT"))?,
                otlp_endpoint: parse("SUBLANE_OTLP_ENDPOINT")?,
            },
        })
    }

    /// Parses a TOML file layer.
    pub fn from_toml(path: &std::path::Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text)
            .map_err(|e| ConfigError::ParseFile { path: path.to_owned(), message: e.message().to_owned() })
    }

    /// Field-wise merge: values set in `over` win.
    pub fn overlay(self, over: Settings) -> Settings {
        let u = self.upstream;
        let o = over.upstream;
        let (a, b) = (self.oauth, over.oauth);
        let (ma, mb) = (self.models, over.models);
        let (va, vb) = (self.observability, over.observability);
        Settings {
            models: ModelSettings {
                codex_models: mb.codex_models.or(ma.codex_models),
                claude_models: mb.claude_models.or(ma.claude_models),
                antigravity_models: mb.antigravity_models.or(ma.antigravity_models),
                openai_models: mb.openai_models.or(ma.openai_models),
                anthropic_models: mb.anthropic_models.or(ma.anthropic_models),
            },
            addr: over.addr.or(self.addr),
            data_dir: over.data_dir.or(self.data_dir),
            database_url: over.database_url.or(self.database_url),
            admin_password: over.admin_password.or(self.admin_password),
            public_url: over.public_url.or(self.public_url),
            trusted_proxies: over.trusted_proxies.or(self.trusted_proxies),
            client_write_timeout: over.client_write_timeout.or(self.client_write_timeout),
            client_header_timeout: over.client_header_timeout.or(self.client_header_timeout),
            shutdown_grace: over.shutdown_grace.or(self.shutdown_grace),
            session_ttl: over.session_ttl.or(self.session_ttl),
            site_root: over.site_root.or(self.site_root),
            stream_idle_timeout: over.stream_idle_timeout.or(self.stream_idle_timeout),
            upstream_header_timeout: over.upstream_header_timeout.or(self.upstream_header_timeout),
            request_deadline: over.request_deadline.or(self.request_deadline),
            workspace_capacity: over.workspace_capacity.or(self.workspace_capacity),
            serve_threads: over.serve_threads.or(self.serve_threads),
            serve_poll: over.serve_poll.or(self.serve_poll),
            huge_pages: over.huge_pages.or(self.huge_pages),
            replace_credentials_key: over.replace_credentials_key.or(self.replace_credentials_key),
            queue_timeout: over.queue_timeout.or(self.queue_timeout),
            queue_capacity: over.queue_capacity.or(self.queue_capacity),
            failure_threshold: over.failure_threshold.or(self.failure_threshold),
            failure_window: over.failure_window.or(self.failure_window),
            model_cooldown: over.model_cooldown.or(self.model_cooldown),
            rate_limit_fallback: over.rate_limit_fallback.or(self.rate_limit_fallback),
            overload_pause: over.overload_pause.or(self.overload_pause),
            binding_ttl: over.binding_ttl.or(self.binding_ttl),
            gateway_quota_weighted: over.gateway_quota_weighted.or(self.gateway_quota_weighted),
            time_zone: over.time_zone.or(self.time_zone),
            prices: over.prices.or(self.prices),
            upstream: UpstreamSettings {
                codex_base_url: o.codex_base_url.or(u.codex_base_url),
                codex_usage_url: o.codex_usage_url.or(u.codex_usage_url),
                codex_token_url: o.codex_token_url.or(u.codex_token_url),
                claude_base_url: o.claude_base_url.or(u.claude_base_url),
                claude_token_url: o.claude_token_url.or(u.claude_token_url),
                antigravity_base_url: o.antigravity_base_url.or(u.antigravity_base_url),
                google_token_url: o.google_token_url.or(u.google_token_url),
                openai_base_url: o.openai_base_url.or(u.openai_base_url),
                anthropic_base_url: o.anthropic_base_url.or(u.anthropic_base_url),
                antigravity_user_agent: o.antigravity_user_agent.or(u.antigravity_user_agent),
                claude_user_agent: o.claude_user_agent.or(u.claude_user_agent),
                codex_user_agent: o.codex_user_agent.or(u.codex_user_agent),
            },
            oauth: OAuthSettings {
                codex_authorize_url: b.codex_authorize_url.or(a.codex_authorize_url),
                codex_client_id: b.codex_client_id.or(a.codex_client_id),
                codex_redirect_uri: b.codex_redirect_uri.or(a.codex_redirect_uri),
                claude_authorize_url: b.claude_authorize_url.or(a.claude_authorize_url),
                claude_client_id: b.claude_client_id.or(a.claude_client_id),
                claude_redirect_uri: b.claude_redirect_uri.or(a.claude_redirect_uri),
                google_authorize_url: b.google_authorize_url.or(a.google_authorize_url),
                google_client_id: b.google_client_id.or(a.google_client_id),
                google_client_secret: b.google_client_secret.or(a.google_client_secret),
                google_redirect_uri: b.google_redirect_uri.or(a.google_redirect_uri),
            },
            observability: ObservabilitySettings {
                metrics: vb.metrics.or(va.metrics),
                metrics_token: vb.metrics_token.or(va.metrics_token),
                log_format: vb.log_format.or(va.log_format),
                otlp_endpoint: vb.otlp_endpoint.or(va.otlp_endpoint),
            },
        }
    }

    /// Fills every unset field with its default.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        // An empty token would let a request with no token in: refused rather than read as "open".
        if self.observability.metrics_token.as_ref().is_some_and(|t| t.expose_secret().trim().is_empty()) {
            return Err(ConfigError::Invalid(
                "metrics_token must not be empty (leave it unset for an open /metrics)".into(),
            ));
        }
        self.check_scheduling_ranges()?;
        let configured = crate::workspace_settings::configured(&self);
        let data_dir = self.data_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        let database_url = self
            .database_url
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("sublane.db").display()));
        if !database_url.starts_with("sqlite:") {
            return Err(ConfigError::Invalid(format!(
                "SUBLANE_DATABASE_URL must be a sqlite: URL (got scheme of {:?}); only embedded SQLite is supported",
                database_url.split(':').next().unwrap_or_default()
            )));
        }
        let workspace_capacity = self.workspace_capacity.unwrap_or(DEFAULT_WORKSPACE_CAPACITY);
        if workspace_capacity == 0 {
            return Err(ConfigError::Invalid("workspace capacity must be at least 1".into()));
        }
        let serve_threads = self
            .serve_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get));
        if serve_threads > MAX_SERVE_THREADS {
            return Err(ConfigError::Invalid(format!(
                "serve threads must be at most {MAX_SERVE_THREADS} (got {serve_threads})"
            )));
        }
        let client_header_timeout = at_most_a_day(
            self.client_header_timeout,
            DEFAULT_CLIENT_HEADER_TIMEOUT,
            MAX_CLIENT_HEADER_TIMEOUT,
            "the client header timeout",
        )?;
        let request_deadline = at_most_a_day(
            self.request_deadline,
            DEFAULT_REQUEST_DEADLINE,
            MAX_REQUEST_DEADLINE,
            "the request deadline",
        )?;
        // (a shorter deadline shortens the header wait with it: the deadline holds over all)
        let upstream_header_timeout = self
            .upstream_header_timeout
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_UPSTREAM_HEADER_TIMEOUT)
            .min(request_deadline);
        let serve_poll = self.serve_poll.unwrap_or(DEFAULT_SERVE_POLL);
        if serve_poll > MAX_SERVE_POLL {
            return Err(ConfigError::Invalid(format!(
                "the serve poll must be at most 1ms (got {})",
                humantime::format_duration(serve_poll)
            )));
        }
        let defaults = crate::scheduler::Settings::default();
        let scheduler = crate::scheduler::Settings {
            queue_timeout: self.queue_timeout.unwrap_or(defaults.queue_timeout),
            queue_capacity: self.queue_capacity.unwrap_or(defaults.queue_capacity),
            failure: crate::scheduler::state::FailurePolicy {
                threshold: self.failure_threshold.unwrap_or(defaults.failure.threshold),
                window: self.failure_window.unwrap_or(defaults.failure.window),
                cooldown: self.model_cooldown.unwrap_or(defaults.failure.cooldown),
                fallback_429: self.rate_limit_fallback.unwrap_or(defaults.failure.fallback_429),
                overload: self.overload_pause.unwrap_or(defaults.failure.overload),
                ..defaults.failure
            },
            binding_ttl: self.binding_ttl.filter(|d| !d.is_zero()).unwrap_or(defaults.binding_ttl),
            quota_weighted: self.gateway_quota_weighted.unwrap_or(defaults.quota_weighted),
        };
        let prices = crate::budgets::Prices(self.prices.unwrap_or_default());
        for (model, price) in &prices.0 {
            price.validate().map_err(|e| ConfigError::Invalid(format!("price of {model:?}: {e}")))?;
        }
        let u = self.upstream;
        let oa = self.oauth;
        let m = self.models;
        let models = crate::catalogue::Catalogues::new(
            [
                (Provider::Codex, m.codex_models),
                (Provider::Claude, m.claude_models),
                (Provider::Antigravity, m.antigravity_models),
                (Provider::OpenaiApi, m.openai_models),
                (Provider::AnthropicApi, m.anthropic_models),
            ]
            .into_iter()
            .filter_map(|(p, l)| Some((p, l?))),
        );
        let url = |v: Option<url::Url>, default: &str| -> Result<url::Url, ConfigError> {
            match v {
                Some(v) => Ok(v),
                None => default
                    .parse()
                    .map_err(|e| ConfigError::Invalid(format!("bad built-in URL {default}: {e}"))),
            }
        };
        Ok(Config {
            addr: match self.addr {
                Some(a) => a,
                None => DEFAULT_ADDR
                    .parse()
                    .map_err(|e| ConfigError::Invalid(format!("bad built-in address: {e}")))?,
            },
            data_dir,
            database_url,
            admin_password: self.admin_password,
            public_url: self.public_url,
            trusted_proxies: self.trusted_proxies.unwrap_or_default().0,
            session_ttl: self.session_ttl.unwrap_or(DEFAULT_SESSION_TTL),
            client_write_timeout: self
                .client_write_timeout
                .filter(|d| !d.is_zero())
                .unwrap_or(DEFAULT_CLIENT_WRITE_TIMEOUT),
            client_header_timeout,
            shutdown_grace: self.shutdown_grace.unwrap_or(DEFAULT_SHUTDOWN_GRACE),
            site_root: self.site_root.unwrap_or_else(|| PathBuf::from(DEFAULT_SITE_ROOT)),
            stream_idle_timeout: self.stream_idle_timeout.filter(|d| !d.is_zero()),
            upstream_header_timeout,
            request_deadline,
            workspace_capacity,
            serve_threads,
            serve_poll,
            huge_pages: self.huge_pages.unwrap_or(false),
            replace_credentials_key: self.replace_credentials_key.unwrap_or(false),
            scheduler,
            models,
            configured,
            time_zone: self.time_zone.unwrap_or(crate::budgets::window::DEFAULT_ZONE),
            observability: Observability {
                metrics: self.observability.metrics.unwrap_or(true),
                metrics_token: self.observability.metrics_token,
                log_format: self.observability.log_format.unwrap_or_default(),
                otlp_endpoint: self.observability.otlp_endpoint,
            },
            prices,
            upstream: {
                let codex_base_url = url(u.codex_base_url, DEFAULT_CODEX_BASE_URL)?;
                let claude_base_url = url(u.claude_base_url, DEFAULT_CLAUDE_BASE_URL)?;
                let antigravity_base_url = url(u.antigravity_base_url, DEFAULT_ANTIGRAVITY_BASE_URL)?;
                let openai_base_url = url(u.openai_base_url, DEFAULT_OPENAI_BASE_URL)?;
                let anthropic_base_url = url(u.anthropic_base_url, DEFAULT_ANTHROPIC_BASE_URL)?;
                UpstreamUrls {
                    endpoints: Endpoints::join(
                        &codex_base_url,
                        &openai_base_url,
                        &claude_base_url,
                        &anthropic_base_url,
                        &antigravity_base_url,
                    ),
                    codex_base_url,
                    codex_usage_url: url(u.codex_usage_url, DEFAULT_CODEX_USAGE_URL)?,
                    codex_token_url: url(u.codex_token_url, DEFAULT_CODEX_TOKEN_URL)?,
                    claude_base_url,
                    claude_token_url: url(u.claude_token_url, DEFAULT_CLAUDE_TOKEN_URL)?,
                    antigravity_base_url,
                    google_token_url: url(u.google_token_url, DEFAULT_GOOGLE_TOKEN_URL)?,
                    openai_base_url,
                    anthropic_base_url,
                    agents: crate::providers::identity::Agents::new(
                        u.antigravity_user_agent,
                        u.claude_user_agent,
                        u.codex_user_agent,
                    )
                    .map_err(ConfigError::Invalid)?,
                }
            },
            oauth: OAuthClients {
                codex: OAuthClient {
                    authorize_url: url(oa.codex_authorize_url, DEFAULT_CODEX_AUTHORIZE_URL)?,
                    client_id: oa.codex_client_id.unwrap_or_else(|| DEFAULT_CODEX_CLIENT_ID.into()),
                    client_secret: None,
                    redirect_uri: oa.codex_redirect_uri.unwrap_or_else(|| DEFAULT_CODEX_REDIRECT_URI.into()),
                },
                claude: OAuthClient {
                    authorize_url: url(oa.claude_authorize_url, DEFAULT_CLAUDE_AUTHORIZE_URL)?,
                    client_id: oa.claude_client_id.unwrap_or_else(|| DEFAULT_CLAUDE_CLIENT_ID.into()),
                    client_secret: None,
                    redirect_uri: oa
                        .claude_redirect_uri
                        .unwrap_or_else(|| DEFAULT_CLAUDE_REDIRECT_URI.into()),
                },
                google: OAuthClient {
                    authorize_url: url(oa.google_authorize_url, DEFAULT_GOOGLE_AUTHORIZE_URL)?,
                    client_id: oa.google_client_id.unwrap_or_else(|| DEFAULT_GOOGLE_CLIENT_ID.into()),
                    client_secret: oa.google_client_secret,
                    redirect_uri: oa
                        .google_redirect_uri
                        .unwrap_or_else(|| DEFAULT_GOOGLE_REDIRECT_URI.into()),
                },
            },
        })
    }
}

impl Config {
    /// Builds the configuration from the parsed command line, an optional file and `env`.
    pub fn load(cli: Cli, env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let file = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| ConfigError::ReadFile { path: path.clone(), source })?;
                Settings::from_toml(path, &text)?
            }
            None => Settings::default(),
        };
        file.overlay(Settings::from_env(env)?).overlay(cli.settings).resolve()
    }

    /// Whether the configured public origin is https (then every session cookie is `Secure`,
    /// whatever the request looked like: see `auth::client` for the per-request answer).
    pub fn https_public_url(&self) -> bool {
        self.public_url.as_ref().is_some_and(|u| u.scheme() == "https")
    }
}

fn env_err(name: &'static str, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Env { name, message: e.to_string() }
}

impl Settings {
    /// OPS-1: the scheduling settings are refused at start where the rule they set would stop
    /// working: a zero wait (every queued call failing at once, a 429 cooling nothing) or one past
    /// the ceiling the Settings page and the seeds hold to (CD-2's cooldowns reach at most 5
    /// minutes). Waits shorter than the page's own lower bounds stay allowed here, for operators
    /// (and tests) that want them short.
    fn check_scheduling_ranges(&self) -> Result<(), ConfigError> {
        let waits = [
            ("SUBLANE_QUEUE_TIMEOUT", "queue_timeout", self.queue_timeout, 600),
            ("SUBLANE_FAILURE_WINDOW", "failure_window", self.failure_window, 3600),
            ("SUBLANE_MODEL_COOLDOWN", "model_cooldown", self.model_cooldown, 300),
            ("SUBLANE_RATE_LIMIT_FALLBACK", "rate_limit_fallback", self.rate_limit_fallback, 3600),
            ("SUBLANE_OVERLOAD_PAUSE", "overload_pause", self.overload_pause, 3600),
        ];
        for (env, key, value, max_secs) in waits {
            let Some(value) = value else { continue };
            if value.is_zero() || value > Duration::from_secs(max_secs) {
                return Err(ConfigError::Invalid(format!(
                    "{env} ({key}) must be more than 0s and at most {} (got {})",
                    humantime::format_duration(Duration::from_secs(max_secs)),
                    humantime::format_duration(value)
                )));
            }
        }
        let counts = [
            ("SUBLANE_QUEUE_CAPACITY", "queue_capacity", self.queue_capacity.map(|n| n as u64), 0, 10_000),
            (
                "SUBLANE_WORKSPACE_CAPACITY",
                "workspace_capacity",
                self.workspace_capacity.map(|n| n as u64),
                1,
                100_000,
            ),
            ("SUBLANE_FAILURE_THRESHOLD", "failure_threshold", self.failure_threshold.map(u64::from), 0, 100),
        ];
        for (env, key, value, min, max) in counts {
            if let Some(n) = value.filter(|n| !(min..=max).contains(n)) {
                return Err(ConfigError::Invalid(format!("{env} ({key}) must be {min} to {max} (got {n})")));
            }
        }
        Ok(())
    }
}

/// A duration setting that `0` or absence leave at `default` and that may not pass `max` (one
/// day, since hyper and tokio add it to the time of day).
fn at_most_a_day(
    set: Option<Duration>,
    default: Duration,
    max: Duration,
    what: &str,
) -> Result<Duration, ConfigError> {
    let value = set.filter(|d| !d.is_zero()).unwrap_or(default);
    if value > max {
        return Err(ConfigError::Invalid(format!(
            "{what} must be at most 1 day (got {})",
            humantime::format_duration(value)
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("sublane").chain(args.iter().copied())).unwrap()
    }

    /// OPS-1: a scheduling setting that would stop its rule working is refused at start, by name.
    #[test]
    fn scheduling_settings_out_of_range_are_refused_by_name() {
        let load = |vars: &[(&str, &str)]| Config::load(cli(&[]), env(vars));
        for (var, value) in [
            ("SUBLANE_QUEUE_TIMEOUT", "0s"),
            ("SUBLANE_QUEUE_TIMEOUT", "11m"),
            ("SUBLANE_FAILURE_WINDOW", "0s"),
            ("SUBLANE_MODEL_COOLDOWN", "1h"),
            ("SUBLANE_RATE_LIMIT_FALLBACK", "0s"),
            ("SUBLANE_OVERLOAD_PAUSE", "2h"),
            ("SUBLANE_QUEUE_CAPACITY", "10001"),
            ("SUBLANE_WORKSPACE_CAPACITY", "100001"),
            ("SUBLANE_FAILURE_THRESHOLD", "101"),
        ] {
            let e = load(&[(var, value)]).unwrap_err().to_string();
            assert!(e.contains(var), "{var}={value}: {e}");
        }
        for (var, value) in [
            ("SUBLANE_QUEUE_TIMEOUT", "300ms"),
            ("SUBLANE_MODEL_COOLDOWN", "5m"),
            ("SUBLANE_RATE_LIMIT_FALLBACK", "1h"),
            ("SUBLANE_QUEUE_CAPACITY", "0"),
            ("SUBLANE_FAILURE_THRESHOLD", "0"),
        ] {
            assert!(load(&[(var, value)]).is_ok(), "{var}={value}");
        }
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let c = Config::load(cli(&[]), env(&[])).unwrap();
        assert_eq!(c.addr.to_string(), DEFAULT_ADDR);
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert_eq!(c.database_url, "sqlite://./data/sublane.db");
        assert_eq!(c.session_ttl, DEFAULT_SESSION_TTL);
        assert!(c.admin_password.is_none());
        assert_eq!(c.upstream.codex_base_url.as_str(), DEFAULT_CODEX_BASE_URL);
        assert_eq!(c.workspace_capacity, 128);
        assert!(!c.https_public_url());
        assert!(c.trusted_proxies.is_empty());
        assert_eq!(c.client_write_timeout, DEFAULT_CLIENT_WRITE_TIMEOUT);
        assert_eq!(c.client_header_timeout, DEFAULT_CLIENT_HEADER_TIMEOUT);
        assert_eq!(c.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
        assert_eq!(c.upstream_header_timeout, DEFAULT_UPSTREAM_HEADER_TIMEOUT);
        assert_eq!(c.request_deadline, DEFAULT_REQUEST_DEADLINE);
    }

    #[test]
    fn the_upstream_header_timeout_and_the_request_deadline_are_set_and_bounded() {
        let both = |args: &[&str], vars: &[(&str, &str)]| {
            Config::load(cli(args), env(vars)).map(|c| (c.upstream_header_timeout, c.request_deadline))
        };
        let (m, h) = (Duration::from_secs(60), Duration::from_secs(3600));
        let set = both(&[], &[("SUBLANE_UPSTREAM_HEADER_TIMEOUT", "2m"), ("SUBLANE_REQUEST_DEADLINE", "1h")]);
        assert_eq!(set.unwrap(), (2 * m, h));
        let flag = both(&["--request-deadline", "2h"], &[("SUBLANE_REQUEST_DEADLINE", "1h")]);
        assert_eq!(flag.unwrap(), (5 * m, 2 * h), "the flag wins over the environment");
        let zero =
            both(&[], &[("SUBLANE_UPSTREAM_HEADER_TIMEOUT", "0s"), ("SUBLANE_REQUEST_DEADLINE", "0s")]);
        assert_eq!(zero.unwrap(), (DEFAULT_UPSTREAM_HEADER_TIMEOUT, DEFAULT_REQUEST_DEADLINE));
        let short = both(&[], &[("SUBLANE_REQUEST_DEADLINE", "2m")]).unwrap();
        assert_eq!(short, (2 * m, 2 * m), "the header wait is never longer than the deadline");
        assert_eq!(both(&[], &[("SUBLANE_REQUEST_DEADLINE", "1d")]).unwrap().1, MAX_REQUEST_DEADLINE);
        let over = both(&[], &[("SUBLANE_REQUEST_DEADLINE", "25h")]).unwrap_err().to_string();
        assert!(over.contains("at most 1 day"), "{over}");
        let bad = both(&[], &[("SUBLANE_UPSTREAM_HEADER_TIMEOUT", "soon")]).unwrap_err().to_string();
        assert!(bad.contains("SUBLANE_UPSTREAM_HEADER_TIMEOUT"), "{bad}");
    }

    #[test]
    fn huge_pages_are_off_unless_allowed() {
        assert!(!Config::load(cli(&[]), env(&[])).unwrap().huge_pages);
        assert!(Config::load(cli(&[]), env(&[("SUBLANE_HUGE_PAGES", "TRUE")])).unwrap().huge_pages);
        let c =
            Config::load(cli(&["--huge-pages", "false"]), env(&[("SUBLANE_HUGE_PAGES", "true")])).unwrap();
        assert!(!c.huge_pages, "the flag wins over the environment");
        let bad =
            Config::load(cli(&[]), env(&[("SUBLANE_HUGE_PAGES", "sometimes")])).unwrap_err().to_string();
        assert!(bad.contains("SUBLANE_HUGE_PAGES"), "{bad}");
    }

    #[test]
    fn the_serve_poll_is_on_unless_turned_off_and_bounded() {
        let poll =
            |args: &[&str], vars: &[(&str, &str)]| Config::load(cli(args), env(vars)).map(|c| c.serve_poll);
        assert_eq!(poll(&[], &[]).unwrap(), DEFAULT_SERVE_POLL);
        assert_eq!(poll(&[], &[("SUBLANE_SERVE_POLL", "0s")]).unwrap(), Duration::ZERO, "0 turns it off");
        let flag = poll(&["--serve-poll", "250us"], &[("SUBLANE_SERVE_POLL", "0s")]).unwrap();
        assert_eq!(flag, Duration::from_micros(250), "the flag wins over the environment");
        assert_eq!(poll(&[], &[("SUBLANE_SERVE_POLL", "1ms")]).unwrap(), MAX_SERVE_POLL);
        let over = poll(&[], &[("SUBLANE_SERVE_POLL", "2ms")]).unwrap_err().to_string();
        assert!(over.contains("at most 1ms"), "{over}");
        let bad = poll(&[], &[("SUBLANE_SERVE_POLL", "briefly")]).unwrap_err().to_string();
        assert!(bad.contains("SUBLANE_SERVE_POLL"), "{bad}");
    }

    #[test]
    fn serve_threads_default_to_the_cpus_and_are_bounded() {
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(Config::load(cli(&[]), env(&[])).unwrap().serve_threads, cpus);
        let c = Config::load(cli(&["--serve-threads", "0"]), env(&[("SUBLANE_SERVE_THREADS", "3")])).unwrap();
        assert_eq!(c.serve_threads, 0, "the flag wins over the environment");
        assert_eq!(Config::load(cli(&[]), env(&[("SUBLANE_SERVE_THREADS", "3")])).unwrap().serve_threads, 3);
        let over = Config::load(cli(&[]), env(&[("SUBLANE_SERVE_THREADS", "257")])).unwrap_err().to_string();
        assert!(over.contains("at most 256"), "{over}");
        let bad = Config::load(cli(&[]), env(&[("SUBLANE_SERVE_THREADS", "two")])).unwrap_err().to_string();
        assert!(bad.contains("SUBLANE_SERVE_THREADS"), "{bad}");
    }

    #[test]
    fn the_client_header_timeout_is_set_like_the_write_timeout_and_bounded() {
        let header = |args: &[&str], vars: &[(&str, &str)]| {
            Config::load(cli(args), env(vars)).map(|c| c.client_header_timeout)
        };
        assert_eq!(header(&[], &[]).unwrap(), DEFAULT_CLIENT_HEADER_TIMEOUT);
        assert_eq!(
            header(&[], &[("SUBLANE_CLIENT_HEADER_TIMEOUT", "75s")]).unwrap(),
            Duration::from_secs(75)
        );
        let flag = header(&["--client-header-timeout", "2m"], &[("SUBLANE_CLIENT_HEADER_TIMEOUT", "75s")]);
        assert_eq!(flag.unwrap(), Duration::from_secs(120), "the flag wins over the environment");
        assert_eq!(
            header(&[], &[("SUBLANE_CLIENT_HEADER_TIMEOUT", "0s")]).unwrap(),
            DEFAULT_CLIENT_HEADER_TIMEOUT
        );
        assert_eq!(
            header(&[], &[("SUBLANE_CLIENT_HEADER_TIMEOUT", "1day")]).unwrap(),
            MAX_CLIENT_HEADER_TIMEOUT
        );
        let over = header(&[], &[("SUBLANE_CLIENT_HEADER_TIMEOUT", "25h")]).unwrap_err().to_string();
        assert!(over.contains("at most 1 day"), "{over}");
        let bad = header(&[], &[("SUBLANE_CLIENT_HEADER_TIMEOUT", "soon")]).unwrap_err().to_string();
        assert!(bad.contains("SUBLANE_CLIENT_HEADER_TIMEOUT"), "{bad}");
    }

    #[test]
    fn database_url_follows_data_dir_unless_set() {
        let c = Config::load(cli(&["--data-dir", "/srv/sl"]), env(&[])).unwrap();
        assert_eq!(c.database_url, "sqlite:///srv/sl/sublane.db");
        let c = Config::load(
            cli(&["--data-dir", "/srv/sl"]),
            env(&[("SUBLANE_DATABASE_URL", "sqlite:///other.db")]),
        )
        .unwrap();
        assert_eq!(c.database_url, "sqlite:///other.db");
    }

    #[test]
    fn precedence_is_default_file_env_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sublane.toml");
        std::fs::write(
            &path,
            "addr = \"127.0.0.1:4000\"\ndata_dir = \"/from/file\"\nsession_ttl = \"2h\"\n\
             [upstream]\ncodex_base_url = \"http://file.example/codex\"\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();

        // file over defaults
        let c = Config::load(cli(&["--config", p]), env(&[])).unwrap();
        assert_eq!(c.addr.port(), 4000);
        assert_eq!(c.data_dir, PathBuf::from("/from/file"));
        assert_eq!(c.session_ttl, Duration::from_secs(7200));
        assert_eq!(c.upstream.codex_base_url.as_str(), "http://file.example/codex");

        // env over file
        let e = env(&[
            ("SUBLANE_ADDR", "127.0.0.1:5000"),
            ("SUBLANE_CODEX_BASE_URL", "http://env.example/codex"),
        ]);
        let c = Config::load(cli(&["--config", p]), &e).unwrap();
        assert_eq!(c.addr.port(), 5000);
        assert_eq!(c.data_dir, PathBuf::from("/from/file"), "unset in env keeps the file value");
        assert_eq!(c.upstream.codex_base_url.as_str(), "http://env.example/codex");

        // flags over env
        let c = Config::load(
            cli(&["--config", p, "--addr", "127.0.0.1:6000", "--codex-base-url", "http://flag/"]),
            &e,
        )
        .unwrap();
        assert_eq!(c.addr.port(), 6000);
        assert_eq!(c.upstream.codex_base_url.as_str(), "http://flag/");
    }

    #[test]
    fn budget_zone_and_prices() {
        let c = Config::load(cli(&[]), env(&[])).unwrap();
        assert_eq!(c.time_zone, chrono_tz::Asia::Shanghai);
        let c = Config::load(cli(&[]), env(&[("SUBLANE_TIME_ZONE", "Europe/Berlin")])).unwrap();
        assert_eq!(c.time_zone, chrono_tz::Europe::Berlin);
        assert!(
            Config::load(cli(&[]), env(&[("SUBLANE_TIME_ZONE", "UTC+8")])).is_err(),
            "a zone, not an offset"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sublane.toml");
        std::fs::write(&path, "[prices.\"gpt-5.1\"]\nprompt = 1.25\ncompletion = 10.0\n[prices.\"*\"]\nprompt = 1\ncompletion = 2\ncached = 0.5\n")
            .unwrap();
        let c = Config::load(cli(&["--config", path.to_str().unwrap()]), env(&[])).unwrap();
        assert_eq!(
            c.prices.price("gpt-5.1").map(|p| (p.prompt, p.completion, p.cached)),
            Some((1.25, 10.0, None))
        );
        assert_eq!(c.prices.price("other").and_then(|p| p.cached), Some(0.5));
        std::fs::write(&path, "[prices.m]\nprompt = -1\ncompletion = 1\n").unwrap();
        assert!(
            Config::load(cli(&["--config", path.to_str().unwrap()]), env(&[])).is_err(),
            "negative price"
        );
    }

    #[test]
    fn admin_password_from_env_is_kept_secret() {
        let c = Config::load(cli(&[]), env(&[("SUBLANE_ADMIN_PASSWORD", "hunter22")])).unwrap();
        assert_eq!(c.admin_password.as_ref().unwrap().expose_secret(), "hunter22");
        assert!(!format!("{c:?}").contains("hunter22"), "Debug must not print the password");
    }

    #[test]
    fn unknown_file_keys_and_bad_env_values_are_errors() {
        let err = Settings::from_toml(std::path::Path::new("x.toml"), "adress = \"1\"").unwrap_err();
        assert!(err.to_string().contains("adress"), "{err}");
        let err = Settings::from_env(env(&[("SUBLANE_ADDR", "nope")])).unwrap_err();
        assert!(err.to_string().contains("SUBLANE_ADDR"), "{err}");
        let err = Config::load(cli(&[]), env(&[("SUBLANE_DATABASE_URL", "postgres://x")])).unwrap_err();
        assert!(err.to_string().contains("sqlite"), "{err}");
    }

    #[test]
    fn scheduling_numbers_are_configurable_with_the_seed_defaults() {
        let c = Config::load(cli(&[]), env(&[])).unwrap();
        assert_eq!(c.scheduler.failure.fallback_429, Duration::from_secs(5));
        assert_eq!(c.scheduler.failure.overload, Duration::from_secs(30));
        assert_eq!(c.scheduler.binding_ttl, Duration::from_secs(24 * 3600));
        let c = Config::load(
            cli(&["--overload-pause", "1m"]),
            env(&[("SUBLANE_RATE_LIMIT_FALLBACK", "9s"), ("SUBLANE_BINDING_TTL", "2h")]),
        )
        .unwrap();
        assert_eq!(c.scheduler.failure.fallback_429, Duration::from_secs(9));
        assert_eq!(c.scheduler.failure.overload, Duration::from_secs(60));
        assert_eq!(c.scheduler.binding_ttl, Duration::from_secs(7200));
    }

    #[test]
    fn client_user_agents_come_from_the_settings_and_are_checked_at_start() {
        let c = Config::load(cli(&[]), env(&[])).unwrap();
        assert_eq!(c.upstream.agents.antigravity, crate::providers::identity::ANTIGRAVITY_USER_AGENT);
        let c = Config::load(
            cli(&["--claude-user-agent", "claude-cli/9.0.0 (external, cli)"]),
            env(&[("SUBLANE_ANTIGRAVITY_USER_AGENT", "antigravity/hub/3.0.0 linux/amd64")]),
        )
        .unwrap();
        assert_eq!(c.upstream.agents.antigravity, "antigravity/hub/3.0.0 linux/amd64");
        assert_eq!(c.upstream.agents.claude, "claude-cli/9.0.0 (external, cli)");
        let err = Config::load(cli(&[]), env(&[("SUBLANE_CODEX_USER_AGENT", "codex\u{7f}")])).unwrap_err();
        assert!(err.to_string().contains("SUBLANE_CODEX_USER_AGENT"), "{err}");
        let file = Settings::from_toml(
            std::path::Path::new("x.toml"),
            "[upstream]\ncodex_user_agent = \"codex_cli_rs/9.9.9\"\n",
        )
        .unwrap();
        assert_eq!(file.resolve().unwrap().upstream.agents.codex, "codex_cli_rs/9.9.9");
    }

    #[test]
    fn https_public_url_makes_cookies_secure() {
        let c = Config::load(cli(&["--public-url", "https://gw.example"]), env(&[])).unwrap();
        assert!(c.https_public_url());
    }

    #[test]
    fn trusted_proxies_take_addresses_and_networks() {
        let c =
            Config::load(cli(&[]), env(&[("SUBLANE_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8,::1")])).unwrap();
        let nets: Vec<String> = c.trusted_proxies.iter().map(ToString::to_string).collect();
        assert_eq!(nets, ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]);
        let err = Settings::from_env(env(&[("SUBLANE_TRUSTED_PROXIES", "nope")])).unwrap_err();
        assert!(err.to_string().contains("SUBLANE_TRUSTED_PROXIES"), "{err}");
        let file =
            Settings::from_toml(std::path::Path::new("x.toml"), "trusted_proxies = [\"192.168.0.0/16\"]")
                .unwrap();
        assert_eq!(file.trusted_proxies.unwrap().0[0].to_string(), "192.168.0.0/16");
    }
}
