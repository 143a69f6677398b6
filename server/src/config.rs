//! One typed configuration (OPS-1), built from four layers in increasing precedence:
//! built-in defaults < TOML file (`--config`) < `SUBLANE_*` environment < command-line flags.
//!
//! Every layer is the same [`Settings`] shape with all fields optional, so precedence is a plain
//! field-wise merge and each layer can be tested on its own. Defaults are named constants, each
//! written once, next to the SPEC id that sets it.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;
use secrecy::SecretString;
use serde::Deserialize;

/// Listen address for the proxy, the JSON API and the web app.
pub const DEFAULT_ADDR: &str = "127.0.0.1:3000";
/// Data directory: SQLite database, `credentials.key`, the process lock (OPS-2).
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Lifetime of a browser session (ID-2).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Operations in flight at once, waiters and metadata reads included (ADM-2).
pub const DEFAULT_WORKSPACE_CAPACITY: usize = 128;
/// Where the built site (`pkg/` with wasm, js, css) is served from.
pub const DEFAULT_SITE_ROOT: &str = "target/site";

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
    /// End a stream when the upstream sends nothing for this long, e.g. "5m" (CD-6) [env: SUBLANE_STREAM_IDLE_TIMEOUT] [default: off]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub stream_idle_timeout: Option<Duration>,
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
    #[command(flatten)]
    #[serde(default)]
    pub upstream: UpstreamSettings,
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
}

fn parse_secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s.to_owned()))
}

/// The resolved configuration every part of the server reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub admin_password: Option<SecretString>,
    pub public_url: Option<url::Url>,
    pub session_ttl: Duration,
    pub site_root: PathBuf,
    /// CD-6: optional stream idle timeout (upstream bytes only); off by default.
    pub stream_idle_timeout: Option<Duration>,
    /// ADM-2: operations in flight at once.
    pub workspace_capacity: usize,
    /// ADM-6, CD-2: queues and the failure policy.
    pub scheduler: crate::scheduler::Settings,
    pub upstream: UpstreamUrls,
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
            session_ttl: var("SUBLANE_SESSION_TTL")
                .map(|v| humantime::parse_duration(&v).map_err(|e| env_err("SUBLANE_SESSION_TTL", e)))
                .transpose()?,
            site_root: var("SUBLANE_SITE_ROOT").map(PathBuf::from),
            workspace_capacity: var("SUBLANE_WORKSPACE_CAPACITY")
                .map(|v| v.parse().map_err(|e| env_err("SUBLANE_WORKSPACE_CAPACITY", e)))
                .transpose()?,
            stream_idle_timeout: duration("SUBLANE_STREAM_IDLE_TIMEOUT")?,
            queue_timeout: duration("SUBLANE_QUEUE_TIMEOUT")?,
            queue_capacity: parsed("SUBLANE_QUEUE_CAPACITY", var("SUBLANE_QUEUE_CAPACITY"))?,
            failure_threshold: parsed("SUBLANE_FAILURE_THRESHOLD", var("SUBLANE_FAILURE_THRESHOLD"))?,
            failure_window: duration("SUBLANE_FAILURE_WINDOW")?,
            model_cooldown: duration("SUBLANE_MODEL_COOLDOWN")?,
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
        Settings {
            addr: over.addr.or(self.addr),
            data_dir: over.data_dir.or(self.data_dir),
            database_url: over.database_url.or(self.database_url),
            admin_password: over.admin_password.or(self.admin_password),
            public_url: over.public_url.or(self.public_url),
            session_ttl: over.session_ttl.or(self.session_ttl),
            site_root: over.site_root.or(self.site_root),
            stream_idle_timeout: over.stream_idle_timeout.or(self.stream_idle_timeout),
            workspace_capacity: over.workspace_capacity.or(self.workspace_capacity),
            queue_timeout: over.queue_timeout.or(self.queue_timeout),
            queue_capacity: over.queue_capacity.or(self.queue_capacity),
            failure_threshold: over.failure_threshold.or(self.failure_threshold),
            failure_window: over.failure_window.or(self.failure_window),
            model_cooldown: over.model_cooldown.or(self.model_cooldown),
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
            },
        }
    }

    /// Fills every unset field with its default.
    pub fn resolve(self) -> Result<Config, ConfigError> {
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
        let defaults = crate::scheduler::Settings::default();
        let scheduler = crate::scheduler::Settings {
            queue_timeout: self.queue_timeout.unwrap_or(defaults.queue_timeout),
            queue_capacity: self.queue_capacity.unwrap_or(defaults.queue_capacity),
            failure: crate::scheduler::state::FailurePolicy {
                threshold: self.failure_threshold.unwrap_or(defaults.failure.threshold),
                window: self.failure_window.unwrap_or(defaults.failure.window),
                cooldown: self.model_cooldown.unwrap_or(defaults.failure.cooldown),
                ..defaults.failure
            },
            ..defaults
        };
        let u = self.upstream;
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
            session_ttl: self.session_ttl.unwrap_or(DEFAULT_SESSION_TTL),
            site_root: self.site_root.unwrap_or_else(|| PathBuf::from(DEFAULT_SITE_ROOT)),
            stream_idle_timeout: self.stream_idle_timeout.filter(|d| !d.is_zero()),
            workspace_capacity,
            scheduler,
            upstream: UpstreamUrls {
                codex_base_url: url(u.codex_base_url, DEFAULT_CODEX_BASE_URL)?,
                codex_usage_url: url(u.codex_usage_url, DEFAULT_CODEX_USAGE_URL)?,
                codex_token_url: url(u.codex_token_url, DEFAULT_CODEX_TOKEN_URL)?,
                claude_base_url: url(u.claude_base_url, DEFAULT_CLAUDE_BASE_URL)?,
                claude_token_url: url(u.claude_token_url, DEFAULT_CLAUDE_TOKEN_URL)?,
                antigravity_base_url: url(u.antigravity_base_url, DEFAULT_ANTIGRAVITY_BASE_URL)?,
                google_token_url: url(u.google_token_url, DEFAULT_GOOGLE_TOKEN_URL)?,
                openai_base_url: url(u.openai_base_url, DEFAULT_OPENAI_BASE_URL)?,
                anthropic_base_url: url(u.anthropic_base_url, DEFAULT_ANTHROPIC_BASE_URL)?,
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

    /// Whether session cookies must carry `Secure` (only when served over https).
    pub fn secure_cookies(&self) -> bool {
        self.public_url.as_ref().is_some_and(|u| u.scheme() == "https")
    }
}

fn env_err(name: &'static str, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Env { name, message: e.to_string() }
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
        assert!(!c.secure_cookies());
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
    fn https_public_url_makes_cookies_secure() {
        let c = Config::load(cli(&["--public-url", "https://gw.example"]), env(&[])).unwrap();
        assert!(c.secure_cookies());
    }
}
