//! `GET /v1/models` (PX-4): the models the caller's pool can serve. A metadata operation: no
//! model slot, no record (REC-1), no upstream call.
//!
//! The list is the pool's allow-list when it has one; otherwise SubLane's catalogue for the
//! providers that have accounts in the pool, minus the deny-list, plus the pool's aliases.
//! Anthropic clients (they send `anthropic-version`) get Anthropic's list shape, others OpenAI's.

use app::model::{PolicyMode, Provider};
use axum::{
    Json,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    attempt::new_request_id,
    auth::authenticate_request,
    error::{GatewayError, Protocol},
};
use crate::app_state::AppState;

/// Models each provider family is known to serve. Upstream catalogue discovery will refine this.
pub fn catalogue(provider: Provider) -> &'static [&'static str] {
    match provider {
        Provider::Codex => &["gpt-5.1-codex", "gpt-5.1-codex-mini", "gpt-5.1-codex-max", "gpt-5.1"],
        Provider::OpenaiApi => &["gpt-5.1", "gpt-5.1-codex", "gpt-5.1-codex-mini", "gpt-5-mini"],
        Provider::Claude | Provider::AnthropicApi => {
            &["claude-opus-4-8", "claude-sonnet-4-6", "claude-haiku-4-5"]
        }
        Provider::Antigravity => &[
            "gemini-3.1-pro-low",
            "gemini-3.1-pro-high",
            "gemini-3.6-flash-high",
            "claude-opus-4-6-thinking",
            "gpt-oss-120b-medium",
        ],
    }
}

pub async fn list(State(s): State<AppState>, headers: HeaderMap, only: Option<Provider>) -> Response {
    let anthropic = headers.contains_key("anthropic-version");
    let protocol = if anthropic { Protocol::Anthropic } else { Protocol::OpenAi };
    let request_id = new_request_id();
    let fail = |e: GatewayError| e.render(protocol, Some(&request_id));
    let principal = match authenticate_request(&s, &headers).await {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // A metadata read: it takes a workspace slot (ADM-2), never a model-request slot (PX-4).
    let Some(_slot) = s.admission.workspace() else { return fail(GatewayError::workspace_busy()) };
    let snapshot = match s.directory.snapshot(&s.db, &s.sealer).await {
        Ok(snap) => snap,
        Err(_) => {
            return fail(GatewayError::internal());
        }
    };
    let mut ids: Vec<String> = Vec::new();
    if let Some(pool) = snapshot.pool(principal.pool_id) {
        let policy = &pool.policy;
        if policy.mode == PolicyMode::Allow {
            ids.extend(policy.models.iter().cloned());
        } else {
            for provider in pool.providers().into_iter().filter(|p| only.is_none_or(|o| o == *p)) {
                for id in catalogue(provider) {
                    let denied = policy.mode == PolicyMode::Deny && policy.models.iter().any(|m| m == id);
                    if !denied {
                        ids.push((*id).to_owned());
                    }
                }
            }
        }
        ids.extend(policy.aliases.keys().cloned());
    }
    ids.sort();
    ids.dedup();
    let body = if anthropic {
        let data: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z"}))
            .collect();
        json!({"data": data, "has_more": false, "first_id": ids.first(), "last_id": ids.last()})
    } else {
        let data: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "sublane"}))
            .collect();
        json!({"object": "list", "data": data})
    };
    let mut resp = Json(body).into_response();
    if let Ok(v) = request_id.parse() {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}
