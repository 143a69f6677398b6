//! Each provider's quota evidence, normalized into an [`Observation`] (QT-2). Wire shapes are in
//! `shared/research/protocols.md`:
//! - Codex: `x-codex-{primary,secondary}-*` headers on every answer (extra limit families
//!   `x-<id>-primary-*`), `codex.rate_limits` WebSocket frames, `wham/usage`, and the 429
//!   `usage_limit_reached` / `usage_not_included` bodies;
//! - Claude: `anthropic-ratelimit-unified-*` headers;
//! - Antigravity: `fetchAvailableModels` (per-model remaining fraction) and the 429
//!   `QUOTA_EXHAUSTED` ErrorInfo for one model.
//!
//! Parsers never fail: what is missing or unreadable is simply not observed.

use app::model::Provider;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::observation::{Denial, ModelQuota, Observation, Window};

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

fn number(h: &HeaderMap, name: &str) -> Option<f64> {
    header(h, name)?.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Unix seconds (a number or a numeric string) as unix ms; absurd values are dropped.
fn unix_secs(v: f64) -> Option<i64> {
    (v.is_finite() && v > 0.0 && v < 1e11).then_some((v * 1000.0) as i64)
}

fn json_secs(v: &Value) -> Option<i64> {
    v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())).and_then(unix_secs)
}

fn json_f64(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())).filter(|n: &f64| n.is_finite())
}

/// The quota headers of any answer (`status`: its HTTP status).
pub fn headers(provider: Provider, status: u16, h: &HeaderMap, at: i64) -> Observation {
    match provider {
        Provider::Codex => codex_headers(status, h, at),
        Provider::Claude => claude_headers(h, at),
        _ => Observation::default(),
    }
}

/// Extra named limits kept from one answer.
const MAX_EXTRA_LIMITS: usize = 8;

fn codex_headers(status: u16, h: &HeaderMap, at: i64) -> Observation {
    let mut o = Observation { at, ..Observation::default() };
    // One window from its three headers (used %, length, reset), when any is there.
    let window = |names: [&str; 3], id: &str, main: bool, o: &mut Observation| {
        let used = number(h, names[0]);
        let minutes = number(h, names[1]).map(|m| m as i64);
        let reset = number(h, names[2]).and_then(unix_secs);
        if used.is_some() || minutes.is_some() || reset.is_some() {
            o.windows.push(Window {
                id: id.to_owned(),
                main,
                used_percent: used,
                window_minutes: minutes,
                resets_at: reset,
                limit_reached: false,
                observed_at: at,
            });
        }
    };
    // The main windows by fixed names: no string is built for them on the hot path.
    const PRIMARY: [&str; 3] =
        ["x-codex-primary-used-percent", "x-codex-primary-window-minutes", "x-codex-primary-reset-at"];
    const SECONDARY: [&str; 3] =
        ["x-codex-secondary-used-percent", "x-codex-secondary-window-minutes", "x-codex-secondary-reset-at"];
    window(PRIMARY, "primary", true, &mut o);
    window(SECONDARY, "secondary", true, &mut o);
    // Extra limit families (`x-<id>-primary-used-percent`): shown, never excluding (QT-3).
    let extras = h
        .keys()
        .filter_map(|k| k.as_str().strip_prefix("x-").and_then(|n| n.strip_suffix("-primary-used-percent")));
    for id in extras.filter(|id| *id != "codex" && id.len() <= 64).take(MAX_EXTRA_LIMITS) {
        let label =
            header(h, &format!("x-{id}-limit-name")).unwrap_or(id).chars().take(64).collect::<String>();
        let names = ["used-percent", "window-minutes", "reset-at"].map(|n| format!("x-{id}-primary-{n}"));
        window([&names[0], &names[1], &names[2]], &label, false, &mut o);
    }
    // An accepted answer with the headers says the account is not refused.
    if (200..300).contains(&status) && !o.windows.is_empty() {
        o.denial = Some(None);
    }
    o
}

fn claude_headers(h: &HeaderMap, at: i64) -> Observation {
    const P: &str = "anthropic-ratelimit-unified";
    let mut o = Observation { at, ..Observation::default() };
    for (key, minutes, main) in [
        ("5h", Some(300), true),
        ("7d", Some(10080), true),
        ("7d_oi", Some(10080), false),
        ("overage", None, false),
    ] {
        let used = number(h, &format!("{P}-{key}-utilization")).map(|u| u * 100.0);
        let reset = number(h, &format!("{P}-{key}-reset")).and_then(unix_secs);
        let rejected = header(h, &format!("{P}-{key}-status")) == Some("rejected");
        if used.is_some() || reset.is_some() || rejected {
            o.windows.push(Window {
                id: key.to_owned(),
                main,
                used_percent: used,
                window_minutes: minutes,
                resets_at: reset,
                limit_reached: rejected,
                observed_at: at,
            });
        }
    }
    match header(h, &format!("{P}-status")) {
        Some("rejected") => {
            o.denial = Some(Some(Denial {
                reason: header(h, &format!("{P}-representative-claim"))
                    .unwrap_or("rejected")
                    .chars()
                    .take(40)
                    .collect(),
                resets_at: number(h, &format!("{P}-reset")).and_then(unix_secs),
                observed_at: at,
            }));
        }
        Some(_) => o.denial = Some(None),
        None => {}
    }
    o
}

/// A Codex `wham/usage` answer (an active read).
pub fn codex_usage(body: &Value, at: i64) -> Observation {
    let mut o = Observation { at, ..Observation::default() };
    let rl = &body["rate_limit"];
    for (key, id) in [("primary_window", "primary"), ("secondary_window", "secondary")] {
        if let Some(w) = codex_window(&rl[key], id, true, at) {
            o.windows.push(w);
        }
    }
    let allowed = rl["allowed"].as_bool();
    let reached = rl["limit_reached"].as_bool();
    if allowed.is_some() || reached.is_some() {
        o.denial = Some((allowed == Some(false) || reached == Some(true)).then(|| Denial {
            reason: if reached == Some(true) { "limit_reached" } else { "not_allowed" }.into(),
            resets_at: o.windows.iter().filter(|w| w.exhausted()).filter_map(|w| w.resets_at).max(),
            observed_at: at,
        }));
    }
    o
}

fn codex_window(w: &Value, id: &str, main: bool, at: i64) -> Option<Window> {
    if !w.is_object() {
        return None;
    }
    let reset = json_secs(&w["reset_at"])
        .or_else(|| json_f64(&w["reset_after_seconds"]).map(|s| at + (s.max(0.0) * 1000.0) as i64));
    let minutes = json_f64(&w["limit_window_seconds"])
        .map(|s| (s / 60.0) as i64)
        .or_else(|| json_f64(&w["window_minutes"]).map(|m| m as i64));
    Some(Window {
        id: id.to_owned(),
        main,
        used_percent: json_f64(&w["used_percent"]),
        window_minutes: minutes,
        resets_at: reset,
        limit_reached: false,
        observed_at: at,
    })
}

/// A `codex.rate_limits` WebSocket frame.
pub fn codex_frame(frame: &Value, at: i64) -> Observation {
    let mut o = Observation { at, ..Observation::default() };
    let rl = &frame["rate_limits"];
    for id in ["primary", "secondary"] {
        if let Some(mut w) = codex_window(&rl[id], id, true, at) {
            w.limit_reached = rl[id]["limit_reached"].as_bool() == Some(true);
            o.windows.push(w);
        }
    }
    o
}

/// A 429 (or 403) body that speaks of the subscription quota.
pub fn error_body(provider: Provider, status: u16, body: &Value, at: i64) -> Observation {
    let mut o = Observation { at, ..Observation::default() };
    if !matches!(status, 403 | 429) {
        return o;
    }
    let e = &body["error"];
    match provider {
        Provider::Codex => {
            let kind = [e["type"].as_str(), e["code"].as_str()]
                .into_iter()
                .flatten()
                .find(|k| matches!(*k, "usage_limit_reached" | "usage_not_included"));
            if let Some(kind) = kind {
                let resets = json_secs(&e["resets_at"])
                    .or_else(|| json_f64(&e["resets_in_seconds"]).map(|s| at + (s.max(0.0) * 1000.0) as i64));
                o.denial = Some(Some(Denial { reason: kind.to_owned(), resets_at: resets, observed_at: at }));
            }
        }
        Provider::Antigravity => {
            let info = e["details"].as_array().into_iter().flatten().find(|d| {
                d["@type"].as_str().is_some_and(|t| t.ends_with("google.rpc.ErrorInfo"))
                    && d["reason"] == "QUOTA_EXHAUSTED"
            });
            if let Some(info) = info
                && let Some(model) =
                    info["metadata"]["model"].as_str().filter(|m| !m.is_empty() && m.len() <= 128)
            {
                let resets = info["metadata"]["quotaResetTimeStamp"].as_str().and_then(rfc3339);
                o.models.push(ModelQuota {
                    model: model.to_owned(),
                    remaining_fraction: Some(0.0),
                    resets_at: resets,
                    observed_at: at,
                });
            }
        }
        _ => {}
    }
    o
}

fn rfc3339(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}

/// Most models kept from one catalogue answer.
const MAX_MODELS: usize = 256;

/// An Antigravity `fetchAvailableModels` answer: every model's quota, and the catalogue.
pub fn available_models(body: &Value, at: i64) -> Observation {
    let mut o = Observation { at, models_complete: true, ..Observation::default() };
    let Some(models) = body["models"].as_object() else {
        return Observation { at, ..Observation::default() };
    };
    let mut catalogue = Vec::new();
    for (id, m) in models.iter().take(MAX_MODELS) {
        if id.is_empty() || id.len() > 128 {
            continue;
        }
        catalogue.push(id.clone());
        let q = &m["quotaInfo"];
        if q.is_object() {
            o.models.push(ModelQuota {
                model: id.clone(),
                remaining_fraction: json_f64(&q["remainingFraction"]).map(|f| f.clamp(0.0, 1.0)),
                resets_at: q["resetTime"].as_str().and_then(rfc3339),
                observed_at: at,
            });
        }
    }
    // Ids the provider still maps to a newer model are served too (ERR-1: a model Antigravity
    // answers for is never "not found" here).
    if let Some(old) = body["deprecatedModelIds"].as_object() {
        catalogue.extend(old.keys().filter(|id| !id.is_empty() && id.len() <= 128).take(MAX_MODELS).cloned());
    }
    catalogue.sort();
    catalogue.dedup();
    o.catalogue = Some(catalogue);
    o
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const T: i64 = 1_800_000_000_000;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn codex_headers_give_both_windows_and_extra_families() {
        let h = map(&[
            ("x-codex-primary-used-percent", "12.5"),
            ("x-codex-primary-window-minutes", "300"),
            ("x-codex-primary-reset-at", "1800003600"),
            ("x-codex-secondary-used-percent", "40"),
            ("x-codex-secondary-window-minutes", "10080"),
            ("x-codex_other-primary-used-percent", "100"),
            ("x-codex_other-limit-name", "codex_other"),
        ]);
        let o = headers(Provider::Codex, 200, &h, T);
        assert_eq!(o.windows.len(), 3);
        assert_eq!(o.windows[0].used_percent, Some(12.5));
        assert_eq!(o.windows[0].resets_at, Some(1_800_003_600_000));
        assert_eq!(o.windows[1].window_minutes, Some(10080));
        assert!(!o.windows[2].main, "an extra limit is not the main one");
        assert_eq!(o.denial, Some(None));
        assert!(headers(Provider::Codex, 200, &HeaderMap::new(), T).is_empty());
        assert!(headers(Provider::OpenaiApi, 200, &h, T).is_empty(), "only subscription accounts");
        let junk = map(&[("x-codex-primary-used-percent", "NaN"), ("x-codex-primary-reset-at", "-4")]);
        assert!(headers(Provider::Codex, 200, &junk, T).is_empty());
    }

    #[test]
    fn claude_unified_headers() {
        let h = map(&[
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", "1800000600"),
            ("anthropic-ratelimit-unified-representative-claim", "five_hour"),
            ("anthropic-ratelimit-unified-5h-utilization", "1.0"),
            ("anthropic-ratelimit-unified-5h-reset", "1800000600"),
            ("anthropic-ratelimit-unified-5h-status", "rejected"),
            ("anthropic-ratelimit-unified-7d-utilization", "0.42"),
            ("anthropic-ratelimit-unified-7d-reset", "1800300000"),
            ("anthropic-ratelimit-unified-overage-utilization", "0.1"),
        ]);
        let o = headers(Provider::Claude, 429, &h, T);
        assert_eq!(o.windows.len(), 3);
        assert_eq!(o.windows[0].used_percent, Some(100.0));
        assert!(o.windows[0].limit_reached);
        assert_eq!(o.windows[1].used_percent, Some(42.0));
        assert!(!o.windows[2].main);
        let d = o.denial.unwrap().unwrap();
        assert_eq!((d.reason.as_str(), d.resets_at), ("five_hour", Some(1_800_000_600_000)));
        let ok = map(&[("anthropic-ratelimit-unified-status", "allowed_warning")]);
        assert_eq!(headers(Provider::Claude, 200, &ok, T).denial, Some(None));
    }

    #[test]
    fn codex_usage_read_and_frames() {
        let body = json!({"plan_type":"plus","rate_limit":{"allowed":true,"limit_reached":false,
            "primary_window":{"used_percent":12,"limit_window_seconds":18000,"reset_after_seconds":3600,"reset_at":1_800_003_600},
            "secondary_window":{"used_percent":40.5,"limit_window_seconds":604800,"reset_after_seconds":86400}}});
        let o = codex_usage(&body, T);
        assert_eq!(o.windows[0].window_minutes, Some(300));
        assert_eq!(o.windows[0].resets_at, Some(1_800_003_600_000));
        assert_eq!(o.windows[1].resets_at, Some(T + 86_400_000), "reset_after_seconds when no reset_at");
        assert_eq!(o.denial, Some(None));
        let spent = json!({"rate_limit":{"allowed":false,"limit_reached":true,"primary_window":{"used_percent":100,"limit_window_seconds":18000,"reset_at":1_800_000_900}}});
        let d = codex_usage(&spent, T).denial.unwrap().unwrap();
        assert_eq!((d.reason.as_str(), d.resets_at), ("limit_reached", Some(1_800_000_900_000)));
        let frame = json!({"type":"codex.rate_limits","plan_type":"pro","rate_limits":{
            "primary":{"used_percent":55.0,"window_minutes":300,"reset_at":1_800_001_000},
            "secondary":{"used_percent":20.0,"window_minutes":10080,"reset_at":1_800_500_000}}});
        let o = codex_frame(&frame, T);
        assert_eq!(o.windows.len(), 2);
        assert_eq!(o.windows[0].window_minutes, Some(300));
        assert_eq!(o.windows[1].used_percent, Some(20.0));
    }

    #[test]
    fn error_bodies_that_speak_of_quota() {
        let codex = json!({"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_in_seconds":90}});
        let d = error_body(Provider::Codex, 429, &codex, T).denial.unwrap().unwrap();
        assert_eq!(d.resets_at, Some(T + 90_000));
        let other = json!({"error":{"type":"rate_limit_exceeded"}});
        assert!(error_body(Provider::Codex, 429, &other, T).is_empty(), "a rate limit is not the quota");
        let google = json!({"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[
            {"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"QUOTA_EXHAUSTED","domain":"cloudcode-pa.googleapis.com",
             "metadata":{"model":"claude-opus-4-6-thinking","quotaResetTimeStamp":"2027-01-15T08:00:00Z"}}]}});
        let o = error_body(Provider::Antigravity, 429, &google, T);
        assert_eq!(o.models[0].model, "claude-opus-4-6-thinking");
        assert_eq!(o.models[0].remaining_fraction, Some(0.0));
        assert!(!o.models_complete);
        let short = json!({"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","metadata":{"model":"m"}}]}});
        assert!(error_body(Provider::Antigravity, 429, &short, T).is_empty());
    }

    #[test]
    fn antigravity_available_models() {
        let body = json!({"models":{
            "gemini-3.1-pro-low":{"quotaInfo":{"remainingFraction":0.8,"resetTime":"2027-01-01T00:00:00Z"},"displayName":"Gemini"},
            "claude-opus-4-6-thinking":{"quotaInfo":{"remainingFraction":0,"resetTime":"2027-01-01T00:00:00Z"}},
            "chat_20706":{"displayName":"no quota info"}},
            "deprecatedModelIds":{"old":{"newModelId":"gemini-3.1-pro-low"}}});
        let o = available_models(&body, T);
        assert_eq!(
            o.catalogue.as_deref().unwrap(),
            ["chat_20706", "claude-opus-4-6-thinking", "gemini-3.1-pro-low", "old"]
        );
        assert_eq!(o.models.len(), 2);
        assert!(o.models_complete);
        assert!(available_models(&json!({"error": "x"}), T).is_empty());
    }
}
