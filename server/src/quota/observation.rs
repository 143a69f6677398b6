//! What SubLane knows of an account's subscription quota (QT-2): windows with their usage, reset
//! and observation times, Antigravity's per-model remaining fractions, and the provider's explicit
//! denial; how new evidence merges into it; and what it means for selection (QT-3, QT-4, RT-6)
//! and for the pace shown beside it (PACE-1, PACE-2).
//!
//! Every item carries its own observation time, so a partial observation (a 429 body about one
//! model) never makes older items look fresh. All times are unix milliseconds.

use app::model::{Pace, PaceHidden, QuotaKind, QuotaRow};
use serde::{Deserialize, Serialize};

/// QT-3: an observation shapes selection for at most this long (shortened by its reset time).
pub const FRESH_MS: i64 = 120_000;

/// One quota window (Codex primary/secondary, Claude 5-hour/7-day, extra named limits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Stable id within the account: `primary`, `secondary`, `5h`, `7d`, or an extra limit's id.
    pub id: String,
    /// Part of the main subscription limit. Extra named limits are shown, never exclude (QT-3).
    pub main: bool,
    pub used_percent: Option<f64>,
    pub window_minutes: Option<i64>,
    pub resets_at: Option<i64>,
    /// The provider says this window's limit is reached.
    pub limit_reached: bool,
    pub observed_at: i64,
}

/// Antigravity: one model's quota (QT-4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelQuota {
    pub model: String,
    /// 0.0..=1.0; `None` when the provider did not say (never read as zero).
    pub remaining_fraction: Option<f64>,
    pub resets_at: Option<i64>,
    pub observed_at: i64,
}

/// The provider's explicit refusal of the whole account (Codex `allowed: false` or
/// `usage_limit_reached`, Claude unified status `rejected`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Denial {
    pub reason: String,
    pub resets_at: Option<i64>,
    pub observed_at: i64,
}

/// What one answer or read says about the quota. Items it does not mention stay as they were.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    pub at: i64,
    pub windows: Vec<Window>,
    pub models: Vec<ModelQuota>,
    /// The models listed are every model the account has (an active Antigravity read): models
    /// not listed are dropped.
    pub models_complete: bool,
    /// `Some(None)`: the provider accepted (a denial ends); `Some(Some(_))`: it refused; `None`:
    /// the answer says nothing either way.
    pub denial: Option<Option<Denial>>,
    /// Models the account serves, from a provider's model list (Antigravity).
    pub catalogue: Option<Vec<String>>,
}

impl Observation {
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.models.is_empty() && self.denial.is_none() && self.catalogue.is_none()
    }
}

/// An account's quota as last observed, persisted as JSON (QT-2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    pub windows: Vec<Window>,
    pub models: Vec<ModelQuota>,
    pub denial: Option<Denial>,
    /// The newest item's observation time: a write older than the stored one is refused.
    pub observed_at: i64,
    /// The last active read failed at (PACE-2 hides pace for items observed before it).
    pub read_failed_at: Option<i64>,
    /// The newest answer that said the account is not refused.
    pub accepted_at: Option<i64>,
    pub catalogue: Option<Vec<String>>,
}

/// What a snapshot means for selection at one instant (QT-3, QT-4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Blocks {
    /// The account is left out of new selections until then (0: not).
    pub account_until: i64,
    /// Antigravity models left out until then.
    pub models: Vec<(String, i64)>,
}

/// Whether an item observed at `at`, resetting at `resets_at`, still speaks for now, and until
/// when: never when it is future-dated, older than [`FRESH_MS`], or its window reset since.
pub fn fresh_until(at: i64, resets_at: Option<i64>, now: i64) -> Option<i64> {
    if at > now || now - at > FRESH_MS {
        return None;
    }
    let until = resets_at.map_or(at + FRESH_MS + 1, |r| r.min(at + FRESH_MS + 1));
    (until > now).then_some(until)
}

/// QT-4: the model id an Antigravity quota is keyed by, without an SDK thinking-level suffix
/// (`gemini-3.1-pro-low(high)`, `claude-opus-4-6-thinking(16384)`).
pub fn base_model(model: &str) -> &str {
    match model.strip_suffix(')').and_then(|m| m.rfind('(').map(|at| &model[..at])) {
        Some(base) if !base.trim_end().is_empty() => base.trim_end(),
        _ => model,
    }
}

impl Snapshot {
    /// Merges newer evidence: items are replaced by id when the observation is not older than
    /// them; a complete model list replaces the models.
    pub fn merge(&mut self, o: &Observation) {
        for w in &o.windows {
            match self.windows.iter_mut().find(|x| x.id == w.id) {
                Some(x) if x.observed_at <= w.observed_at => *x = w.clone(),
                Some(_) => {}
                None => self.windows.push(w.clone()),
            }
        }
        // A complete list drops the models it no longer names, but only those observed before
        // it: a model spent (a 429) while the read was under way stays spent.
        if o.models_complete {
            self.models.retain(|x| x.observed_at > o.at || o.models.iter().any(|m| m.model == x.model));
        }
        for m in &o.models {
            match self.models.iter_mut().find(|x| x.model == m.model) {
                Some(x) if x.observed_at <= m.observed_at => *x = m.clone(),
                Some(_) => {}
                None => self.models.push(m.clone()),
            }
        }
        // A denial ends only with a strictly newer acceptance (a read that started at the same
        // instant as a refused call does not undo it), and an acceptance seen after a denial was
        // observed keeps an older denial from coming back.
        match &o.denial {
            Some(None) => {
                self.accepted_at = Some(self.accepted_at.map_or(o.at, |a| a.max(o.at)));
                if self.denial.as_ref().is_some_and(|x| x.observed_at < o.at) {
                    self.denial = None;
                }
            }
            Some(Some(d)) => {
                let newest = self.denial.as_ref().is_none_or(|x| x.observed_at <= o.at)
                    && self.accepted_at.is_none_or(|a| a <= o.at);
                if newest {
                    self.denial = Some(d.clone());
                }
            }
            None => {}
        }
        if let Some(c) = &o.catalogue {
            self.catalogue = Some(c.clone());
        }
        self.observed_at = self.observed_at.max(o.at);
        if self.read_failed_at.is_some_and(|f| f <= o.at) && (!o.windows.is_empty() || !o.models.is_empty()) {
            self.read_failed_at = None;
        }
    }

    /// Whether `o` changes nothing that matters before the next routine write: no window's
    /// spent state, no denial, no model, a used share within a point, a reset within a minute
    /// (the hot path then writes at most every [`crate::quota::REWRITE_MS`] per account, however
    /// often the provider's numbers creep up).
    pub fn minor_update(&self, o: &Observation) -> bool {
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() < 1.0,
            (a, b) => a.is_none() && b.is_none(),
        };
        let windows = o.windows.iter().all(|w| {
            self.windows.iter().any(|x| {
                x.id == w.id
                    && x.exhausted() == w.exhausted()
                    && close(x.used_percent, w.used_percent)
                    && x.window_minutes == w.window_minutes
                    && match (x.resets_at, w.resets_at) {
                        (Some(a), Some(b)) => (a - b).abs() < 60_000,
                        (a, b) => a == b,
                    }
            })
        });
        let denial = match &o.denial {
            None => true,
            Some(None) => self.denial.is_none(),
            Some(Some(_)) => false,
        };
        windows && o.models.is_empty() && o.catalogue.is_none() && denial
    }

    /// QT-3/QT-4: what leaves the account (or one of its models) out of new selections now.
    pub fn blocks(&self, now: i64) -> Blocks {
        let mut b = Blocks::default();
        let mut block = |until: i64| b.account_until = b.account_until.max(until);
        if let Some(d) = &self.denial
            && let Some(until) = fresh_until(d.observed_at, d.resets_at, now)
        {
            block(until);
        }
        for w in self.windows.iter().filter(|w| w.main && w.exhausted()) {
            if let Some(until) = fresh_until(w.observed_at, w.resets_at, now) {
                block(until);
            }
        }
        for m in &self.models {
            if m.remaining_fraction.is_some_and(|f| f <= 0.0)
                && let Some(until) = fresh_until(m.observed_at, m.resets_at, now)
            {
                b.models.push((base_model(&m.model).to_owned(), until));
            }
        }
        b
    }

    /// RT-6: the remaining percentage of the tightest main window, when every main window is
    /// fresh and fully known, with when that stops being true; for Antigravity, the requested
    /// model's remaining fraction (`model`).
    pub fn remaining(&self, model: Option<&str>, now: i64) -> Option<(f64, i64)> {
        if let Some(model) = model {
            let m = self.models.iter().find(|m| base_model(&m.model) == base_model(model))?;
            let until = fresh_until(m.observed_at, m.resets_at, now)?;
            return Some((m.remaining_fraction? * 100.0, until));
        }
        let mut out: Option<(f64, i64)> = None;
        for w in self.windows.iter().filter(|w| w.main) {
            let until = fresh_until(w.observed_at, w.resets_at, now)?;
            let left = (100.0 - w.used_percent?).clamp(0.0, 100.0);
            out = Some(out.map_or((left, until), |(l, u)| (l.min(left), u.min(until))));
        }
        out
    }

    /// The quota rows of the web app and API (UI-3, PACE), each with its pace.
    pub fn rows(&self, now: i64) -> Vec<QuotaRow> {
        let blocks = self.blocks(now);
        let secs = |ms: i64| ms.div_euclid(1000);
        let mut rows: Vec<QuotaRow> = self
            .windows
            .iter()
            .map(|w| QuotaRow {
                label: window_label(w),
                kind: if w.main { QuotaKind::Main } else { QuotaKind::Extra },
                used_percent: w.used_percent,
                window_minutes: w.window_minutes,
                resets_at: w.resets_at.map(secs),
                observed_at: secs(w.observed_at),
                age_secs: secs(now - w.observed_at).max(0),
                exhausted: w.main && w.exhausted() && fresh_until(w.observed_at, w.resets_at, now).is_some(),
                pace: pace(
                    w.used_percent,
                    w.window_minutes,
                    w.resets_at,
                    w.observed_at,
                    self.read_failed_at,
                    now,
                ),
            })
            .collect();
        let mut models: Vec<&ModelQuota> = self.models.iter().collect();
        models.sort_by(|a, b| a.model.cmp(&b.model));
        rows.extend(models.into_iter().map(|m| {
            let used = m.remaining_fraction.map(|f| ((1.0 - f) * 100.0).clamp(0.0, 100.0));
            QuotaRow {
                label: m.model.clone(),
                kind: QuotaKind::Model,
                used_percent: used,
                window_minutes: None,
                resets_at: m.resets_at.map(secs),
                observed_at: secs(m.observed_at),
                age_secs: secs(now - m.observed_at).max(0),
                exhausted: blocks.models.iter().any(|(b, _)| b == base_model(&m.model)),
                // Antigravity does not say how long its windows are: no even pace to compare.
                pace: pace(used, None, m.resets_at, m.observed_at, self.read_failed_at, now),
            }
        }));
        rows
    }
}

impl Window {
    /// The provider says it is spent: limit reached, or 100 % used.
    pub fn exhausted(&self) -> bool {
        self.limit_reached || self.used_percent.is_some_and(|u| u >= 100.0)
    }
}

fn window_label(w: &Window) -> String {
    match (w.id.as_str(), w.window_minutes) {
        ("5h", _) | (_, Some(300)) if w.main => "5-hour".to_owned(),
        ("7d", _) | (_, Some(10080)) if w.main => "Weekly".to_owned(),
        (_, Some(m)) if w.main && m % 1440 == 0 => format!("{}-day", m / 1440),
        (_, Some(m)) if w.main && m % 60 == 0 => format!("{}-hour", m / 60),
        (id, _) => id.replace(['_', '-'], " "),
    }
}

/// PACE-1/PACE-2: used% minus the elapsed share of the window, both at the observation time
/// (never at the viewer's time, so old data never looks more generous as time passes).
pub fn pace(
    used: Option<f64>,
    window_minutes: Option<i64>,
    resets_at: Option<i64>,
    observed_at: i64,
    read_failed_at: Option<i64>,
    now: i64,
) -> Pace {
    let hidden = |reason| Pace::Hidden { reason };
    if resets_at.is_some_and(|r| r <= now) {
        return hidden(PaceHidden::ResetPassed);
    }
    if read_failed_at.is_some_and(|f| f >= observed_at) {
        return hidden(PaceHidden::RefreshFailed);
    }
    if observed_at > now || now - observed_at > FRESH_MS {
        return hidden(PaceHidden::Stale);
    }
    let (Some(used), Some(minutes), Some(resets_at)) = (used, window_minutes, resets_at) else {
        return hidden(PaceHidden::WindowIncomplete);
    };
    let length = minutes.saturating_mul(60_000);
    let left = resets_at - observed_at;
    if length <= 0 || left < 0 || left > length {
        return hidden(PaceHidden::WindowIncomplete);
    }
    let elapsed = (length - left) as f64 * 100.0 / length as f64;
    Pace::Shown { points: used - elapsed, elapsed_percent: elapsed }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_800_000_000_000;

    fn window(id: &str, used: f64, resets_in: Option<i64>, at: i64) -> Window {
        Window {
            id: id.into(),
            main: true,
            used_percent: Some(used),
            window_minutes: Some(300),
            resets_at: resets_in.map(|r| at + r),
            limit_reached: false,
            observed_at: at,
        }
    }

    fn snap(windows: Vec<Window>) -> Snapshot {
        Snapshot { windows, ..Snapshot::default() }
    }

    #[test]
    fn freshness_edges() {
        // exactly 2 min old still counts; a millisecond later it does not
        assert_eq!(fresh_until(T, None, T + FRESH_MS), Some(T + FRESH_MS + 1));
        assert_eq!(fresh_until(T, None, T + FRESH_MS + 1), None);
        // a reset earlier than the freshness limit shortens it
        assert_eq!(fresh_until(T, Some(T + 30_000), T + 10_000), Some(T + 30_000));
        // already reset
        assert_eq!(fresh_until(T, Some(T + 30_000), T + 30_000), None);
        // future-dated
        assert_eq!(fresh_until(T + 1, None, T), None);
    }

    #[test]
    fn only_fresh_spent_main_windows_or_denials_exclude() {
        let full = snap(vec![window("primary", 100.0, Some(3_600_000), T)]);
        assert_eq!(full.blocks(T + 1000).account_until, T + FRESH_MS + 1);
        assert_eq!(full.blocks(T + FRESH_MS + 1).account_until, 0, "stale data never means zero");
        let low = snap(vec![window("primary", 99.5, Some(3_600_000), T)]);
        assert_eq!(low.blocks(T).account_until, 0, "low but positive quota is not exhaustion");
        let mut extra = window("codex_other", 100.0, Some(3_600_000), T);
        extra.main = false;
        assert_eq!(snap(vec![extra]).blocks(T).account_until, 0, "extra named limits never exclude");
        let soon = snap(vec![window("primary", 100.0, Some(20_000), T)]);
        assert_eq!(soon.blocks(T).account_until, T + 20_000, "the reset shortens the exclusion");
        assert_eq!(soon.blocks(T + 20_000).account_until, 0, "already reset");
        let mut reached = window("secondary", 80.0, None, T);
        reached.limit_reached = true;
        assert_eq!(snap(vec![reached]).blocks(T).account_until, T + FRESH_MS + 1);
        let denied = Snapshot {
            denial: Some(Denial { reason: "rejected".into(), resets_at: None, observed_at: T }),
            ..Snapshot::default()
        };
        assert_eq!(denied.blocks(T + 5).account_until, T + FRESH_MS + 1);
        let future = snap(vec![window("primary", 100.0, None, T + 10)]);
        assert_eq!(future.blocks(T).account_until, 0, "future-dated data never means zero");
    }

    #[test]
    fn antigravity_checks_exactly_the_model_with_suffixes_normalized() {
        let s = Snapshot {
            models: vec![
                ModelQuota {
                    model: "gemini-3.1-pro-low".into(),
                    remaining_fraction: Some(0.0),
                    resets_at: None,
                    observed_at: T,
                },
                ModelQuota {
                    model: "gemini-3.6-flash-high".into(),
                    remaining_fraction: Some(0.4),
                    resets_at: None,
                    observed_at: T,
                },
                ModelQuota {
                    model: "gpt-oss-120b-medium".into(),
                    remaining_fraction: None,
                    resets_at: None,
                    observed_at: T,
                },
            ],
            ..Snapshot::default()
        };
        let b = s.blocks(T);
        assert_eq!(b.account_until, 0, "one model's quota never blocks the account");
        assert_eq!(b.models, vec![("gemini-3.1-pro-low".to_owned(), T + FRESH_MS + 1)]);
        assert_eq!(base_model("gemini-3.1-pro-low(high)"), "gemini-3.1-pro-low");
        assert_eq!(base_model("claude-opus-4-6-thinking(16384)"), "claude-opus-4-6-thinking");
        assert_eq!(base_model("plain"), "plain");
        assert_eq!(base_model("(x)"), "(x)");
        assert_eq!(s.remaining(Some("gemini-3.6-flash-high(low)"), T), Some((40.0, T + FRESH_MS + 1)));
        assert_eq!(s.remaining(Some("gpt-oss-120b-medium"), T), None, "unknown is not a number");
    }

    #[test]
    fn merging_keeps_newer_items_and_partial_observations_touch_only_theirs() {
        let mut s = snap(vec![window("primary", 10.0, None, T), window("secondary", 20.0, None, T)]);
        s.merge(&Observation {
            at: T + 5,
            windows: vec![window("primary", 15.0, None, T + 5)],
            ..Default::default()
        });
        assert_eq!(s.windows[0].used_percent, Some(15.0));
        assert_eq!(s.windows[1].observed_at, T, "an item not mentioned keeps its own time");
        // an older in-flight read never overwrites a newer item
        s.merge(&Observation {
            at: T + 1,
            windows: vec![window("primary", 90.0, None, T + 1)],
            ..Default::default()
        });
        assert_eq!(s.windows[0].used_percent, Some(15.0));
        let denial = Denial { reason: "usage_limit_reached".into(), resets_at: None, observed_at: T + 6 };
        s.merge(&Observation { at: T + 6, denial: Some(Some(denial)), ..Default::default() });
        assert!(s.blocks(T + 7).account_until > 0);
        s.merge(&Observation { at: T + 8, denial: Some(None), ..Default::default() });
        assert_eq!(s.blocks(T + 9).account_until, 0, "an accepted answer ends the denial");
        assert_eq!(s.observed_at, T + 8);
    }

    #[test]
    fn older_in_flight_reads_never_undo_newer_evidence() {
        let denial =
            |at| Some(Some(Denial { reason: "limit_reached".into(), resets_at: None, observed_at: at }));
        // a read stamped at T saying "spent" lands after an accepted answer at T + 5
        let mut s = Snapshot::default();
        s.merge(&Observation { at: T + 5, denial: Some(None), ..Default::default() });
        s.merge(&Observation { at: T, denial: denial(T), ..Default::default() });
        assert_eq!(s.blocks(T + 6).account_until, 0, "the older denial stays out");
        // a complete model list read from T lands after a 429 spent one model at T + 5
        let model = |m: &str, f: f64, at| ModelQuota {
            model: m.into(),
            remaining_fraction: Some(f),
            resets_at: None,
            observed_at: at,
        };
        let mut s = Snapshot {
            models: vec![model("a", 0.5, T - 10), model("gone", 0.5, T - 10)],
            ..Snapshot::default()
        };
        s.merge(&Observation { at: T + 5, models: vec![model("a", 0.0, T + 5)], ..Default::default() });
        s.merge(&Observation {
            at: T,
            models: vec![model("a", 0.7, T), model("new", 0.9, T)],
            models_complete: true,
            ..Default::default()
        });
        assert_eq!(s.blocks(T + 6).models, vec![("a".to_owned(), T + 5 + FRESH_MS + 1)]);
        let names: Vec<&str> = s.models.iter().map(|m| m.model.as_str()).collect();
        assert_eq!(names, ["a", "new"], "a model the complete list no longer names goes");
    }

    #[test]
    fn creeping_numbers_are_minor_and_a_spent_window_is_not() {
        let s = snap(vec![window("primary", 40.0, Some(3_600_000), T)]);
        let o = |used: f64, resets_in: i64| Observation {
            at: T + 5,
            windows: vec![window("primary", used, Some(resets_in), T + 5)],
            ..Default::default()
        };
        assert!(s.minor_update(&o(40.6, 3_600_000 - 5)));
        assert!(!s.minor_update(&o(41.0, 3_600_000)), "a point more is written");
        assert!(!s.minor_update(&o(100.0, 3_600_000)), "spent is written at once");
        assert!(!s.minor_update(&o(40.0, 7_200_000)), "a new reset is written");
        let denied = Observation {
            at: T + 5,
            denial: Some(Some(Denial { reason: "x".into(), resets_at: None, observed_at: T + 5 })),
            ..Default::default()
        };
        assert!(!s.minor_update(&denied));
    }

    #[test]
    fn rt6_weights_need_every_main_window_fresh_and_known() {
        let s = snap(vec![window("primary", 30.0, None, T), window("secondary", 55.0, None, T)]);
        assert_eq!(s.remaining(None, T), Some((45.0, T + FRESH_MS + 1)), "the tightest window");
        assert_eq!(s.remaining(None, T + FRESH_MS + 1), None, "stale");
        let mut unknown = window("secondary", 0.0, None, T);
        unknown.used_percent = None;
        assert_eq!(snap(vec![window("primary", 30.0, None, T), unknown]).remaining(None, T), None);
        assert_eq!(snap(vec![]).remaining(None, T), None, "no numbers at all");
    }

    #[test]
    fn pace_arithmetic_and_every_hidden_case() {
        let hour = 60;
        // a 5-hour window, half elapsed at the observation, 70 % used: +20 points
        let reset = T + 150 * 60_000;
        let p = pace(Some(70.0), Some(5 * hour), Some(reset), T, None, T + 60_000);
        assert_eq!(p, Pace::Shown { points: 20.0, elapsed_percent: 50.0 });
        assert_eq!(p.describe(), "+20 points faster than even pace");
        let slow = pace(Some(30.0), Some(5 * hour), Some(reset), T, None, T);
        assert_eq!(slow.describe(), "20 points slower than even pace");
        // computed at the observation time: the viewer's later clock changes nothing
        assert_eq!(pace(Some(70.0), Some(5 * hour), Some(reset), T, None, T + FRESH_MS), p);
        let hidden = |reason| Pace::Hidden { reason };
        assert_eq!(
            pace(Some(70.0), Some(300), Some(reset), T, None, T + FRESH_MS + 1),
            hidden(PaceHidden::Stale)
        );
        assert_eq!(
            pace(Some(70.0), Some(300), Some(reset), T, Some(T + 1), T + 2),
            hidden(PaceHidden::RefreshFailed)
        );
        assert_eq!(
            pace(Some(70.0), Some(300), Some(T + 10), T, None, T + 10),
            hidden(PaceHidden::ResetPassed)
        );
        assert_eq!(pace(Some(70.0), None, Some(reset), T, None, T), hidden(PaceHidden::WindowIncomplete));
        assert_eq!(pace(None, Some(300), Some(reset), T, None, T), hidden(PaceHidden::WindowIncomplete));
        assert_eq!(pace(Some(70.0), Some(300), None, T, None, T), hidden(PaceHidden::WindowIncomplete));
        // a reset further away than the window is long: inconsistent, not shown
        let far = T + 301 * 60_000;
        assert_eq!(pace(Some(70.0), Some(300), Some(far), T, None, T), hidden(PaceHidden::WindowIncomplete));
        assert_eq!(pace(Some(70.0), Some(300), Some(reset), T + 5, None, T), hidden(PaceHidden::Stale));
    }

    #[test]
    fn rows_carry_labels_exhaustion_and_pace() {
        let mut w = window("primary", 100.0, Some(60 * 60_000), T);
        w.window_minutes = Some(300);
        let s = snap(vec![
            w,
            Window {
                id: "secondary".into(),
                window_minutes: Some(10080),
                ..window("secondary", 10.0, None, T)
            },
        ]);
        let rows = s.rows(T + 1000);
        assert_eq!(rows[0].label, "5-hour");
        assert!(rows[0].exhausted);
        assert_eq!(rows[1].label, "Weekly");
        assert!(!rows[1].exhausted);
        assert!(matches!(rows[0].pace, Pace::Shown { .. }));
    }
}
