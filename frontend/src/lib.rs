//! The WASM entry point: hydrates the server-rendered app, then marks `<body data-hydrated>` so
//! browser tests (and curious people) can tell the page is interactive.

use wasm_bindgen::prelude::wasm_bindgen;

#[wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
    if let Some(body) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.body()) {
        let _ = body.set_attribute("data-hydrated", "");
    }
}
