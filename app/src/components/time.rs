//! Timestamps. The server renders UTC (it cannot know the viewer's zone); after hydration the
//! browser rewrites the text into the viewer's local time and adds how long ago it was ("3 min
//! ago"), refreshed every minute (UI-5). The `datetime` attribute keeps the exact instant either
//! way, and the title gives it in UTC.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

#[component]
pub fn Timestamp(at: DateTime<Utc>) -> impl IntoView {
    let iso = at.to_rfc3339();
    let utc_text = at.format("%Y-%m-%d %H:%M UTC").to_string();
    let text = RwSignal::new(utc_text.clone());
    let ago = RwSignal::new(String::new());
    #[cfg(feature = "hydrate")]
    {
        let millis = at.timestamp_millis() as f64;
        let tick = RwSignal::new(0u32);
        Effect::new(move |_| {
            tick.track();
            text.set(local_text(millis));
            ago.set(relative(((js_sys::Date::now() - millis) / 1000.0) as i64));
        });
        // Relative words go stale; once a minute is enough for their precision.
        if let Ok(handle) = set_interval_with_handle(
            move || tick.update(|t| *t = t.wrapping_add(1)),
            std::time::Duration::from_secs(60),
        ) {
            on_cleanup(move || handle.clear());
        }
    }
    // The "ago" span is always there and only its text changes: the effect may run while the
    // page around it is still hydrating, and a node that appears then is a hydration mismatch.
    view! {
        <time datetime=iso title=utc_text>{move || text.get()}</time>
        <span class="ml-1 text-xs text-slate-500">
            {move || {
                let words = ago.get();
                if words.is_empty() { String::new() } else { format!("· {words}") }
            }}
        </span>
    }
}

/// A time that may be absent ("never": a key that does not expire, was never used).
#[component]
pub fn TimeOrNever(at: Option<DateTime<Utc>>) -> impl IntoView {
    match at {
        Some(at) => leptos::either::Either::Left(view! { <Timestamp at /> }),
        None => leptos::either::Either::Right(view! { <span class="text-slate-400">"never"</span> }),
    }
}

/// A `datetime-local` input in the viewer's time zone. The server renders it in UTC, named `name`
/// (so a form works without JavaScript, and `zone` says "UTC"); once hydrated the visible input
/// shows and takes local time, and a hidden input named `name` carries the UTC value the
/// browser computed for it (daylight saving included), still as `YYYY-MM-DDTHH:MM`, so servers
/// read one format either way.
#[component]
pub fn LocalDateTimeInput(
    id: String,
    name: &'static str,
    value: Option<DateTime<Utc>>,
    #[prop(optional)] class: &'static str,
    #[prop(optional, into)] described_by: Option<String>,
    /// Where the zone in force is written ("UTC" or "your time"), e.g. in the label.
    zone: RwSignal<&'static str>,
) -> impl IntoView {
    let utc_minute = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M").to_string();
    let initial = value.map(utc_minute).unwrap_or_default();
    let shown = RwSignal::new(initial.clone());
    let hydrated = RwSignal::new(false);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if !hydrated.get_untracked() {
            shown.set(
                value.map(|t| local_text(t.timestamp_millis() as f64).replace(' ', "T")).unwrap_or_default(),
            );
            hydrated.set(true);
            zone.set("your time");
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = zone;
    let utc_value = move || {
        #[cfg(feature = "hydrate")]
        {
            // (text that is no local time goes as it is, for the server to refuse in words: read
            // as empty, it would clear the time)
            local_to_utc(&shown.get()).map(utc_minute).unwrap_or_else(|| shown.get())
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = utc_minute;
            shown.get()
        }
    };
    view! {
        <input id=id type="datetime-local" name=move || if hydrated.get() { "" } else { name }
            value=initial prop:value=move || shown.get()
            on:input=move |ev| shown.set(event_target_value(&ev))
            aria-describedby=described_by class=class />
        {move || hydrated.get().then(|| view! { <input type="hidden" name=name prop:value=utc_value /> })}
    }
}

/// A local `YYYY-MM-DDTHH:MM` as the instant it names in the browser's zone.
#[cfg(feature = "hydrate")]
fn local_to_utc(local: &str) -> Option<DateTime<Utc>> {
    let t = chrono::NaiveDateTime::parse_from_str(local.trim(), "%Y-%m-%dT%H:%M").ok()?;
    use chrono::{Datelike, Timelike};
    let d = js_sys::Date::new_with_year_month_day_hr_min(
        t.year() as u32,
        t.month0() as i32,
        t.day() as i32,
        t.hour() as i32,
        t.minute() as i32,
    );
    DateTime::from_timestamp_millis(d.get_time() as i64)
}

/// How long ago `secs` seconds were, in words ("3 min ago", "in 2 h"); empty beyond a week, where
/// the date says enough.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub fn relative(secs: i64) -> String {
    let future = secs < 0;
    let s = secs.unsigned_abs();
    let amount = match s {
        0..=44 => return "just now".to_owned(),
        45..=3_599 => format!("{} min", (s + 30) / 60),
        3_600..=86_399 => format!("{} h", (s + 1_800) / 3_600),
        86_400..=604_799 => match (s + 43_200) / 86_400 {
            1 => "1 day".to_owned(),
            n => format!("{n} days"),
        },
        _ => return String::new(),
    };
    if future { format!("in {amount}") } else { format!("{amount} ago") }
}

#[cfg(feature = "hydrate")]
fn local_text(millis: f64) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(millis));
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        d.get_full_year(),
        d.get_month() + 1,
        d.get_date(),
        d.get_hours(),
        d.get_minutes()
    )
}

#[cfg(test)]
mod tests {
    use super::relative;

    #[test]
    fn relative_words() {
        assert_eq!(relative(0), "just now");
        assert_eq!(relative(44), "just now");
        assert_eq!(relative(45), "1 min ago");
        assert_eq!(relative(180), "3 min ago");
        assert_eq!(relative(-180), "in 3 min");
        assert_eq!(relative(3_600), "1 h ago");
        assert_eq!(relative(5 * 3_600 + 10), "5 h ago");
        assert_eq!(relative(86_400), "1 day ago");
        assert_eq!(relative(3 * 86_400), "3 days ago");
        assert_eq!(relative(8 * 86_400), "");
    }
}
