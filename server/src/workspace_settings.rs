//! Workspace settings an admin manages in the web app (`GET/PATCH /api/settings`): queue timeout
//! and capacity (ADM-6), workspace capacity (ADM-2), the failure threshold, window and first
//! model cooldown (CD-2), and the stream idle timeout (CD-6).
//!
//! Each has three layers: the built-in default, the environment or config file (read at start),
//! and a value stored in the database, which wins. A change is validated, stored, and applied at
//! once: queues, the failure policy, the workspace gate and new streams use it from the next
//! request on, and nothing admitted is interrupted.

use std::{collections::BTreeMap, sync::RwLock, time::Duration};

use app::model::{SettingSource, SettingView};
use serde_json::Value;

use crate::{
    app_state::AppState,
    error::{Error, Result},
};

/// One managed setting: its name, unit and allowed range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub label: &'static str,
    /// "seconds" or "count".
    pub unit: &'static str,
    pub min: u64,
    pub max: u64,
    /// `null` turns it off (the stream idle timeout).
    pub optional: bool,
}

pub const SETTINGS: [Spec; 7] = [
    Spec {
        name: "queue_timeout",
        label: "Queue timeout",
        unit: "seconds",
        min: 1,
        max: 600,
        optional: false,
    },
    Spec {
        name: "queue_capacity",
        label: "Queue capacity per pool",
        unit: "count",
        min: 0,
        max: 10_000,
        optional: false,
    },
    Spec {
        name: "workspace_capacity",
        label: "Workspace capacity",
        unit: "count",
        min: 1,
        max: 100_000,
        optional: false,
    },
    Spec {
        name: "failure_threshold",
        label: "Failure threshold (0 disables model cooldowns)",
        unit: "count",
        min: 0,
        max: 100,
        optional: false,
    },
    Spec {
        name: "failure_window",
        label: "Failure window",
        unit: "seconds",
        min: 10,
        max: 3600,
        optional: false,
    },
    Spec {
        name: "model_cooldown",
        label: "First model cooldown",
        unit: "seconds",
        min: 1,
        max: 300,
        optional: false,
    },
    Spec {
        name: "stream_idle_timeout",
        label: "Stream idle timeout (empty: off)",
        unit: "seconds",
        min: 10,
        max: 3600,
        optional: true,
    },
];

/// The values in force, one per [`SETTINGS`] entry (`None`: off).
pub type Values = BTreeMap<&'static str, Option<u64>>;

/// What the environment or config file set at start (`Some`), per setting name.
#[derive(Debug, Clone, Default)]
pub struct Configured(pub BTreeMap<&'static str, Option<u64>>);

/// The settings as they apply now, and what the start-up layers said.
pub struct Live {
    /// Values from the environment/config file or the defaults (whole units, for showing), and
    /// which came from the former.
    base: Values,
    /// The same, exactly, for handing back when a stored value is removed.
    base_scheduler: crate::scheduler::Settings,
    base_workspace: usize,
    base_stream_idle: Option<Duration>,
    configured: Configured,
    stored: RwLock<BTreeMap<&'static str, Option<u64>>>,
    stream_idle: RwLock<Option<Duration>>,
    /// One change at a time, its store and its application together.
    changing: tokio::sync::Mutex<()>,
}

/// Whole seconds, rounded up (a sub-second configured value never shows as 0).
fn secs(d: Duration) -> u64 {
    d.as_secs_f64().ceil() as u64
}

impl Live {
    /// The start-up layers of `config`: what it resolved to, and which names it set explicitly.
    pub fn new(config: &crate::config::Config, configured: Configured) -> Self {
        let s = config.scheduler;
        let base: Values = [
            ("queue_timeout", Some(secs(s.queue_timeout))),
            ("queue_capacity", Some(s.queue_capacity as u64)),
            ("workspace_capacity", Some(config.workspace_capacity as u64)),
            ("failure_threshold", Some(u64::from(s.failure.threshold))),
            ("failure_window", Some(secs(s.failure.window))),
            ("model_cooldown", Some(secs(s.failure.cooldown))),
            ("stream_idle_timeout", config.stream_idle_timeout.map(secs)),
        ]
        .into_iter()
        .collect();
        Live {
            base,
            base_scheduler: s,
            base_workspace: config.workspace_capacity,
            base_stream_idle: config.stream_idle_timeout,
            configured,
            stored: RwLock::default(),
            stream_idle: RwLock::new(config.stream_idle_timeout),
            changing: tokio::sync::Mutex::new(()),
        }
    }

    /// CD-6: the stream idle timeout for a stream starting now.
    pub fn stream_idle_timeout(&self) -> Option<Duration> {
        *self.stream_idle.read().unwrap_or_else(|p| p.into_inner())
    }

    fn stored(&self) -> BTreeMap<&'static str, Option<u64>> {
        self.stored.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The value of `name` in force, and where it comes from.
    fn value(&self, name: &'static str) -> (Option<u64>, SettingSource) {
        if let Some(v) = self.stored.read().unwrap_or_else(|p| p.into_inner()).get(name) {
            return (*v, SettingSource::Database);
        }
        let source = if self.configured.0.contains_key(name) {
            SettingSource::Configuration
        } else {
            SettingSource::Default
        };
        (self.base.get(name).copied().flatten(), source)
    }
}

/// Reads the stored values at start and applies them.
pub async fn load(s: &AppState) -> Result<()> {
    let rows: Vec<(String, Option<i64>)> =
        sqlx::query_as("SELECT name, value FROM workspace_settings").fetch_all(&s.db).await?;
    let mut stored = BTreeMap::new();
    for (name, value) in rows {
        let Some(spec) = SETTINGS.iter().find(|x| x.name == name) else { continue };
        let value = value.and_then(|v| u64::try_from(v).ok()).filter(|v| (spec.min..=spec.max).contains(v));
        if value.is_some() || spec.optional {
            stored.insert(spec.name, value);
        }
    }
    *s.workspace_settings.stored.write().unwrap_or_else(|p| p.into_inner()) = stored;
    apply(s);
    Ok(())
}

/// Every managed setting with its value, source and range.
pub fn view(s: &AppState) -> Vec<SettingView> {
    SETTINGS
        .iter()
        .map(|spec| {
            let (value, source) = s.workspace_settings.value(spec.name);
            SettingView {
                name: spec.name.to_owned(),
                label: spec.label.to_owned(),
                unit: spec.unit.to_owned(),
                value,
                source,
                default: s.workspace_settings.base.get(spec.name).copied().flatten(),
                min: spec.min,
                max: spec.max,
                optional: spec.optional,
            }
        })
        .collect()
}

/// `PATCH /api/settings`: `{"name": value, ...}`; a value of `"default"` removes the stored one
/// (the environment, config file or built-in default applies again). Every value is checked
/// before any is stored; the first bad one is named in a 422.
pub async fn patch(s: &AppState, body: &serde_json::Map<String, Value>) -> Result<Vec<SettingView>> {
    enum Change {
        Set(Option<u64>),
        Reset,
    }
    let mut changes: Vec<(&'static str, Change)> = Vec::new();
    for (name, value) in body {
        let Some(spec) = SETTINGS.iter().find(|x| x.name == name) else {
            return Err(Error::Invalid(format!("{name}: not a workspace setting")));
        };
        let change = match value {
            Value::String(v) if v == "default" => Change::Reset,
            Value::Null if spec.optional => Change::Set(None),
            Value::Number(n) => match n.as_u64().filter(|v| (spec.min..=spec.max).contains(v)) {
                Some(v) => Change::Set(Some(v)),
                None => {
                    return Err(Error::Invalid(format!(
                        "{name}: must be a whole number from {} to {} ({})",
                        spec.min, spec.max, spec.unit
                    )));
                }
            },
            _ => {
                let off = if spec.optional { ", null (off)" } else { "" };
                return Err(Error::Invalid(format!(
                    "{name}: must be a number from {} to {}{off} or \"default\"",
                    spec.min, spec.max
                )));
            }
        };
        changes.push((spec.name, change));
    }
    // Stored and applied in one step per change set, so two admins never interleave.
    let _one = s.workspace_settings.changing.lock().await;
    let now = s.clock.now().timestamp();
    let mut stored = s.workspace_settings.stored();
    let mut tx = s.db.begin().await?;
    for (name, change) in &changes {
        match change {
            Change::Set(v) => {
                sqlx::query(
                    "INSERT INTO workspace_settings (name, value, updated_at) VALUES (?, ?, ?)
                     ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                )
                .bind(name)
                .bind(v.and_then(|v| i64::try_from(v).ok()))
                .bind(now)
                .execute(&mut *tx)
                .await?;
                stored.insert(name, *v);
            }
            Change::Reset => {
                sqlx::query("DELETE FROM workspace_settings WHERE name = ?")
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                stored.remove(name);
            }
        }
    }
    tx.commit().await?;
    *s.workspace_settings.stored.write().unwrap_or_else(|p| p.into_inner()) = stored;
    apply(s);
    Ok(view(s))
}

/// Hands the values in force to the parts that use them: the start-up values exactly, with the
/// stored ones over them.
fn apply(s: &AppState) {
    let live = &s.workspace_settings;
    let stored = live.stored();
    let get = |name: &'static str| stored.get(name).copied();
    let dur = |name: &'static str| get(name).map(|v| v.map(Duration::from_secs));
    let base = live.base_scheduler;
    s.scheduler.set_settings(|x| {
        x.queue_timeout = dur("queue_timeout").flatten().unwrap_or(base.queue_timeout);
        x.queue_capacity = get("queue_capacity")
            .flatten()
            .map_or(base.queue_capacity, |v| usize::try_from(v).unwrap_or(usize::MAX));
        x.failure.threshold = get("failure_threshold")
            .flatten()
            .map_or(base.failure.threshold, |v| u32::try_from(v).unwrap_or(u32::MAX));
        x.failure.window = dur("failure_window").flatten().unwrap_or(base.failure.window);
        x.failure.cooldown = dur("model_cooldown").flatten().unwrap_or(base.failure.cooldown);
    });
    let workspace = get("workspace_capacity")
        .flatten()
        .map_or(live.base_workspace, |v| usize::try_from(v).unwrap_or(usize::MAX));
    s.admission.set_workspace_capacity(workspace);
    // A stored `None` turns the idle timeout off; no stored value hands back the start-up one.
    *live.stream_idle.write().unwrap_or_else(|p| p.into_inner()) =
        dur("stream_idle_timeout").unwrap_or(live.base_stream_idle);
}

/// The setting names the environment or config file set (for "where the value comes from").
pub fn configured(settings: &crate::config::Settings) -> Configured {
    let secs = |d: Option<Duration>| d.map(|d| Some(d.as_secs()));
    let pairs: [(&'static str, Option<Option<u64>>); 7] = [
        ("queue_timeout", secs(settings.queue_timeout)),
        ("queue_capacity", settings.queue_capacity.map(|v| Some(v as u64))),
        ("workspace_capacity", settings.workspace_capacity.map(|v| Some(v as u64))),
        ("failure_threshold", settings.failure_threshold.map(|v| Some(u64::from(v)))),
        ("failure_window", secs(settings.failure_window)),
        ("model_cooldown", secs(settings.model_cooldown)),
        ("stream_idle_timeout", secs(settings.stream_idle_timeout)),
    ];
    Configured(pairs.into_iter().filter_map(|(n, v)| Some((n, v?))).collect())
}
