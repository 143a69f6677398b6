//! Timestamps. The server renders UTC (it cannot know the viewer's zone); after hydration the
//! browser rewrites the text into the viewer's local time (UI-5). The `datetime` attribute keeps
//! the exact instant either way.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

#[component]
pub fn Timestamp(at: DateTime<Utc>) -> impl IntoView {
    let iso = at.to_rfc3339();
    let utc_text = at.format("%Y-%m-%d %H:%M UTC").to_string();
    let text = RwSignal::new(utc_text);
    #[cfg(feature = "hydrate")]
    {
        let millis = at.timestamp_millis() as f64;
        Effect::new(move |_| text.set(local_text(millis)));
    }
    view! { <time datetime=iso title=at.to_rfc3339()>{move || text.get()}</time> }
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
