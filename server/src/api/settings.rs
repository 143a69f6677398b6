//! Admin: `GET /api/settings` (every workspace setting with its value, where it comes from and
//! its range) and `PATCH /api/settings` (`{"queue_timeout": 45, "stream_idle_timeout": null,
//! "queue_capacity": "default"}`), applied at once.

use app::model::SettingView;
use axum::{Json, Router, extract::State, routing::get};

use crate::{api::ApiJson, app_state::AppState, auth::extract::Admin, error::Result, workspace_settings};

pub fn router() -> Router<AppState> {
    Router::new().route("/settings", get(show).patch(change))
}

async fn show(_: Admin, State(s): State<AppState>) -> Json<Vec<SettingView>> {
    Json(workspace_settings::view(&s))
}

async fn change(
    _: Admin,
    State(s): State<AppState>,
    ApiJson(body): ApiJson<serde_json::Map<String, serde_json::Value>>,
) -> Result<Json<Vec<SettingView>>> {
    Ok(Json(workspace_settings::patch(&s, &body).await?))
}
