//! `GET /v1/models` and `GET /v1beta/models` (PX-4): the models the caller's pool can serve
//! through the protocol asked in, in that protocol's list shape. A metadata operation: a
//! workspace slot (ADM-2), no model slot, no record (REC-1), no upstream call.
//!
//! `GET /v1/models/{id}` and `GET /v1beta/models/{id}` answer one of them the same way (the SDKs'
//! `models.retrieve` / `models.get`), or 404 `model_not_found` in the protocol's shape.
//!
//! Which protocol: Gemini for `/v1beta/models` and for a client that sends `x-goog-api-key`
//! (google-genai asks `/v1/models` too), Anthropic when the client sends `anthropic-version`
//! (Anthropic SDKs and Claude Code always do), OpenAI otherwise. An OpenAI client is listed what
//! Chat Completions serves, which is every family (the Responses API serves only OpenAI's). The models
//! of an account are the operator's list for its provider (`SUBLANE_<PROVIDER>_MODELS`), else
//! its provider's own list where SubLane read one (Antigravity's `fetchAvailableModels`), else
//! the provider's usual models below. The pool's policy then
//! applies: an allow-list keeps only what it names, a deny-list removes, aliases are added for
//! models that are served.

use std::collections::BTreeSet;

use app::model::{PolicyMode, Provider};
use axum::{
    Json,
    extract::{Path, State},
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

/// The protocol of a `/v1/models` call, and the providers that answer it: Anthropic's when the
/// client sends `anthropic-version`, Gemini's (Antigravity accounts) when it sends its key as
/// `x-goog-api-key` (google-genai asks `GET /v1/models/{model}` too), OpenAI's otherwise.
fn protocol_and_providers(headers: &HeaderMap, only: Option<Provider>) -> (Protocol, Option<Provider>) {
    match protocol_of(headers) {
        Some(Protocol::Gemini) => (Protocol::Gemini, only.or(Some(Provider::Antigravity))),
        Some(protocol) => (protocol, only),
        None => (Protocol::OpenAi, only),
    }
}

/// The protocol a client's headers name, if they name one: `anthropic-version` (Anthropic's
/// SDKs and Claude Code always send it), `x-goog-api-key` (Gemini's SDKs' key).
pub(super) fn protocol_of(headers: &HeaderMap) -> Option<Protocol> {
    if headers.contains_key(&crate::header_names::ANTHROPIC_VERSION) {
        Some(Protocol::Anthropic)
    } else if headers.contains_key(&crate::header_names::X_GOOG_API_KEY) {
        Some(Protocol::Gemini)
    } else {
        None
    }
}

/// `GET /v1/models` under the plain and provider-prefixed paths, in the shape of the client's
/// protocol ([`protocol_and_providers`]).
pub async fn list(State(s): State<AppState>, headers: HeaderMap, only: Option<Provider>) -> Response {
    let (protocol, only) = protocol_and_providers(&headers, only);
    answer(s, headers, only, protocol, None).await
}

/// `GET /v1/models/{id}`: one model, as [`list`] would give it.
pub async fn retrieve(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    only: Option<Provider>,
) -> Response {
    let (protocol, only) = protocol_and_providers(&headers, only);
    answer(s, headers, only, protocol, Some(id)).await
}

/// `GET /v1beta/models` (Gemini shape): the models of the pool's Antigravity accounts.
pub async fn list_gemini(State(s): State<AppState>, headers: HeaderMap) -> Response {
    answer(s, headers, Some(Provider::Antigravity), Protocol::Gemini, None).await
}

/// `GET /v1beta/models/{id}`: one model, as [`list_gemini`] would give it.
pub async fn retrieve_gemini(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answer(s, headers, Some(Provider::Antigravity), Protocol::Gemini, Some(id)).await
}

/// The list, or the one model `id` (`None`: the list).
async fn answer(
    s: AppState,
    headers: HeaderMap,
    only: Option<Provider>,
    protocol: Protocol,
    id: Option<String>,
) -> Response {
    let request_id = new_request_id(s.clock.unix_ms());
    let fail = |e: GatewayError| e.render(protocol, Some(&request_id));
    let mut resp = match authenticate_request(&s, &headers).await {
        Err(e) => fail(e),
        // BUD-4: a listing is a request of the key like any other (refused when blocked, counted).
        Ok(principal) => match s.breaker.check(principal.key_id, s.clock.unix_ms()) {
            Err(e) => fail(e),
            Ok(_) => {
                let resp = served_models(&s, &principal, only, protocol, &request_id, id.as_deref()).await;
                super::call::count_for_breaker(&s, principal.key_id, resp.status().as_u16() >= 400).await;
                resp
            }
        },
    };
    // (every answer, refusals included)
    if let Ok(v) = request_id.parse() {
        resp.headers_mut().insert(crate::header_names::REQUEST_ID.clone(), v);
    }
    resp
}

/// The listing for an admitted key.
async fn served_models(
    s: &AppState,
    principal: &crate::keys::Principal,
    only: Option<Provider>,
    protocol: Protocol,
    request_id: &str,
    one: Option<&str>,
) -> Response {
    let fail = |e: GatewayError| e.render(protocol, Some(request_id));
    // A metadata read: it takes a workspace slot (ADM-2), never a model-request slot (PX-4).
    let Some(_slot) = s.admission.workspace() else { return fail(GatewayError::workspace_busy()) };
    let snapshot = match s.directory.snapshot(&s.db, &s.sealer).await {
        Ok(snap) => snap,
        Err(_) => return fail(GatewayError::internal()),
    };
    let speaks = match protocol {
        // What an OpenAI client can reach: Chat Completions serves every family (`claude-*`,
        // `gemini-*` too), and the tools that speak only it (chat UIs, editor plugins) fill
        // their model picker from this list. Codex reads no list of this shape.
        Protocol::OpenAi => Operation::ChatCompletions.providers(),
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
            // An OpenAI client's call reaches this account through the Responses API (any model
            // of a Codex or OpenAI API account) or through Chat Completions, which goes by the
            // model's name to a family: a model the account lists but would never be sent (an
            // Antigravity catalogue's internal ids) is not offered.
            let responses = Operation::Responses.providers().contains(&account.provider);
            let reaches = |m: &String| {
                protocol != Protocol::OpenAi
                    || responses
                    || Operation::ChatCompletions.providers_for(m).contains(&account.provider)
            };
            match (s.config.models.configured(account.provider), s.quota.catalogue(account.id)) {
                (Some(configured), _) => served.extend(configured.iter().filter(|m| reaches(m)).cloned()),
                (None, Some(listed)) => served.extend(listed.into_iter().filter(|m| reaches(m))),
                (None, None) => served.extend(
                    usual_models(account.provider).iter().map(|m| (*m).to_owned()).filter(|m| reaches(m)),
                ),
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
    let body = match one {
        // (a Gemini client names a model `models/{id}` as often as `{id}`)
        Some(id) => match ids.get(id.strip_prefix("models/").unwrap_or(id)) {
            Some(id) => model_object(protocol, id),
            None => return fail(GatewayError::model_not_found(id)),
        },
        None => {
            let objects: Vec<Value> = ids.iter().map(|id| model_object(protocol, id)).collect();
            match protocol {
                Protocol::Anthropic => {
                    json!({"data": objects, "has_more": false, "first_id": ids.first(), "last_id": ids.last()})
                }
                Protocol::Gemini => json!({ "models": objects }),
                Protocol::OpenAi => json!({"object": "list", "data": objects}),
            }
        }
    };
    Json(body).into_response()
}

/// One model in `protocol`'s shape.
fn model_object(protocol: Protocol, id: &str) -> Value {
    match protocol {
        Protocol::Anthropic => {
            json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z"})
        }
        Protocol::Gemini => json!({"name": format!("models/{id}"), "displayName": id,
                                   "supportedGenerationMethods": ["generateContent", "streamGenerateContent"]}),
        Protocol::OpenAi => json!({"id": id, "object": "model", "created": 0, "owned_by": "sublane"}),
    }
}
