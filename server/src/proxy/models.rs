//! `GET /v1/models` and `GET /v1beta/models` (PX-4): the models the caller's pool can serve
//! through the protocol asked in, in that protocol's list shape. A metadata operation: a
//! workspace slot (ADM-2), no model slot, no record (REC-1), no upstream call.
//!
//! Which protocol: Gemini for `/v1beta/models`, Anthropic when the client sends
//! `anthropic-version` (Anthropic SDKs and Claude Code always do), OpenAI otherwise. The models
//! of an account are the operator's list for its provider (`SUBLANE_<PROVIDER>_MODELS`), else
//! its provider's own list where SubLane read one (Antigravity's `fetchAvailableModels`), else
//! the provider's usual models below. The pool's policy then
//! applies: an allow-list keeps only what it names, a deny-list removes, aliases are added for
//! models that are served.

use std::collections::BTreeSet;

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
use crate::{app_state::AppState, providers::Operation, quota::observation::base_model};

/// The usual models of each provider, for accounts whose provider publishes no list SubLane
/// reads. They only fill `/v1/models`: a request for another model still reaches the upstream,
/// whose answer decides (RT-3).
pub fn usual_models(provider: Provider) -> &'static [&'static str] {
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

/// `GET /v1/models` (OpenAI or Anthropic shape) under the plain and provider-prefixed paths.
pub async fn list(State(s): State<AppState>, headers: HeaderMap, only: Option<Provider>) -> Response {
    let protocol = if headers.contains_key(&crate::header_names::ANTHROPIC_VERSION) {
        Protocol::Anthropic
    } else {
        Protocol::OpenAi
    };
    answer(s, headers, only, protocol).await
}

/// `GET /v1beta/models` (Gemini shape): the models of the pool's Antigravity accounts.
pub async fn list_gemini(State(s): State<AppState>, headers: HeaderMap) -> Response {
    answer(s, headers, Some(Provider::Antigravity), Protocol::Gemini).await
}

async fn answer(s: AppState, headers: HeaderMap, only: Option<Provider>, protocol: Protocol) -> Response {
    let request_id = new_request_id(s.clock.unix_ms());
    let fail = |e: GatewayError| e.render(protocol, Some(&request_id));
    let principal = match authenticate_request(&s, &headers).await {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // BUD-4: a listing is a request of the key like any other (refused when blocked, counted).
    if let Err(e) = s.breaker.check(principal.key_id, s.clock.unix_ms()) {
        return fail(e);
    }
    let resp = served_models(&s, &principal, only, protocol, &request_id).await;
    super::call::count_for_breaker(&s, principal.key_id, resp.status().as_u16() >= 400).await;
    resp
}

/// The listing for an admitted key.
async fn served_models(
    s: &AppState,
    principal: &crate::keys::Principal,
    only: Option<Provider>,
    protocol: Protocol,
    request_id: &str,
) -> Response {
    let fail = |e: GatewayError| e.render(protocol, Some(request_id));
    // A metadata read: it takes a workspace slot (ADM-2), never a model-request slot (PX-4).
    let Some(_slot) = s.admission.workspace() else { return fail(GatewayError::workspace_busy()) };
    let snapshot = match s.directory.snapshot(&s.db, &s.sealer).await {
        Ok(snap) => snap,
        Err(_) => return fail(GatewayError::internal()),
    };
    let speaks = match protocol {
        Protocol::OpenAi => Operation::Responses.providers(),
        Protocol::Anthropic => Operation::Messages.providers(),
        Protocol::Gemini => Operation::GeminiGenerate.providers(),
    };
    let mut served: BTreeSet<String> = BTreeSet::new();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    if let Some(pool) = snapshot.pool(principal.pool_id) {
        for account in pool.accounts() {
            if !speaks.contains(&account.provider) || only.is_some_and(|o| o != account.provider) {
                continue;
            }
            match (s.config.models.configured(account.provider), s.quota.catalogue(account.id)) {
                (Some(configured), _) => served.extend(configured.iter().cloned()),
                (None, Some(listed)) => served.extend(listed),
                (None, None) => served.extend(usual_models(account.provider).iter().map(|m| (*m).to_owned())),
            }
        }
        let policy = &pool.policy;
        let allowed = |m: &str| match policy.mode {
            PolicyMode::All => true,
            PolicyMode::Allow => policy.models.iter().any(|p| p == m),
            PolicyMode::Deny => !policy.models.iter().any(|p| p == m),
        };
        ids.extend(served.iter().filter(|m| allowed(m)).cloned());
        for (alias, target) in &policy.aliases {
            if served.contains(base_model(target)) && allowed(target) {
                ids.insert(alias.clone());
            }
        }
    }
    let body = match protocol {
        Protocol::Anthropic => {
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z"}))
                .collect();
            json!({"data": data, "has_more": false, "first_id": ids.first(), "last_id": ids.last()})
        }
        Protocol::Gemini => {
            let models: Vec<Value> = ids
                .iter()
                .map(|id| {
                    json!({"name": format!("models/{id}"), "displayName": id,
                           "supportedGenerationMethods": ["generateContent", "streamGenerateContent"]})
                })
                .collect();
            json!({ "models": models })
        }
        Protocol::OpenAi => {
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "sublane"}))
                .collect();
            json!({"object": "list", "data": data})
        }
    };
    let mut resp = Json(body).into_response();
    if let Ok(v) = request_id.parse() {
        resp.headers_mut().insert(crate::header_names::REQUEST_ID.clone(), v);
    }
    resp
}
