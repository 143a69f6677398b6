//! The model proxy: the client protocols SubLane speaks (PX), mounted at `/v1/...`, `/v1beta/...`
//! and under the provider prefixes `/codex`, `/claude`, `/antigravity` (PX-5). Authenticated by
//! gateway keys, not sessions.

mod attempt;
pub mod auth;
pub mod body_edit;
pub mod call;
pub mod client;
mod collect;
mod context_limit;
pub mod error;
mod failure;
pub mod models;
pub mod relay;
pub mod request;
pub mod schedule;
pub mod test_call;
pub mod upstream;
pub mod websocket;

use app::model::Provider;
use axum::{
    Router,
    extract::{Path, Request, State},
    http::HeaderMap,
    routing::{MethodRouter, get, post},
};

pub use attempt::new_request_id;
use error::Protocol;

use crate::{app_state::AppState, providers::Operation};

/// Which call a route makes.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub protocol: Protocol,
    pub op: Operation,
    /// PX-5: a provider-prefixed path restricts selection to one provider.
    pub only: Option<Provider>,
}

pub fn router() -> Router<AppState> {
    let mut r = Router::new();
    for (prefix, only) in [("", None), ("/codex", Some(Provider::Codex))] {
        r = r
            .route(
                &format!("{prefix}/v1/responses"),
                model_route(Protocol::OpenAi, Operation::Responses, only).get(
                    move |state: State<AppState>,
                          headers: HeaderMap,
                          uri: axum::http::Uri,
                          ws: Result<
                        axum::extract::ws::WebSocketUpgrade,
                        axum::extract::ws::rejection::WebSocketUpgradeRejection,
                    >| async move {
                        match ws {
                            Ok(ws) => websocket::upgrade(state, headers, only, ws).await,
                            Err(rejection) => not_a_websocket(&state, &headers, &uri, &rejection),
                        }
                    },
                ),
            )
            .route(
                &format!("{prefix}/v1/responses/compact"),
                model_route(Protocol::OpenAi, Operation::ResponsesCompact, only),
            )
            .route(
                &format!("{prefix}/v1/chat/completions"),
                model_route(Protocol::OpenAi, Operation::ChatCompletions, only),
            );
    }
    // Chat Completions reaches every family, so it is pinned under every provider's prefix.
    for (prefix, only) in [("/claude", Provider::Claude), ("/antigravity", Provider::Antigravity)] {
        r = r.route(
            &format!("{prefix}/v1/chat/completions"),
            model_route(Protocol::OpenAi, Operation::ChatCompletions, Some(only)),
        );
    }
    for (prefix, only) in [("", None), ("/claude", Some(Provider::Claude))] {
        r = r
            .route(
                &format!("{prefix}/v1/messages"),
                model_route(Protocol::Anthropic, Operation::Messages, only),
            )
            .route(
                &format!("{prefix}/v1/messages/count_tokens"),
                model_route(Protocol::Anthropic, Operation::CountTokens, only),
            );
    }
    for (prefix, only) in [("", None), ("/codex", Some(Provider::Codex)), ("/claude", Some(Provider::Claude))]
    {
        r = r.route(
            &format!("{prefix}/v1/models"),
            get(move |state: State<AppState>, headers: HeaderMap| models::list(state, headers, only)),
        );
        // (`/v1/models/{id}` also takes Gemini's POSTs, below)
        if !prefix.is_empty() {
            r = r.route(
                &format!("{prefix}/v1/models/{{id}}"),
                get(move |state: State<AppState>, headers: HeaderMap, id: Path<String>| {
                    models::retrieve(state, headers, id, only)
                }),
            );
        }
    }
    for path in ["/v1beta/models", "/antigravity/v1beta/models"] {
        r = r.route(path, get(models::list_gemini));
    }
    for path in ["/v1beta/models/{model_action}", "/antigravity/v1beta/models/{model_action}"] {
        r = r.route(path, post(gemini).get(models::retrieve_gemini));
    }
    // `/antigravity/v1` is both google-genai's (its default API version in recent releases) and
    // an OpenAI client's base (its chat completions are there): the list answers in the shape
    // the client's headers name, Gemini's for google-genai's `x-goog-api-key`.
    let only = Some(Provider::Antigravity);
    r = r
        .route(
            "/antigravity/v1/models",
            get(move |state: State<AppState>, headers: HeaderMap| models::list(state, headers, only)),
        )
        .route(
            "/antigravity/v1/models/{model_action}",
            post(gemini).get(move |state: State<AppState>, headers: HeaderMap, id: Path<String>| {
                models::retrieve(state, headers, id, only)
            }),
        );
    r = r.route(
        "/v1/models/{model_action}",
        post(gemini).get(|state: State<AppState>, headers: HeaderMap, id: Path<String>| {
            models::retrieve(state, headers, id, None)
        }),
    );
    // A model API path SubLane does not serve: a 404 in the protocol's own shape (an SDK reads
    // it as it reads the provider's), not the web app's page.
    for path in
        ["/v1/{*rest}", "/v1beta/{*rest}", "/codex/{*rest}", "/claude/{*rest}", "/antigravity/{*rest}"]
    {
        r = r.route(path, axum::routing::any(refusing(not_served)));
    }
    r.method_not_allowed_fallback(refusing(not_allowed))
}

/// A model API path SubLane does not serve. (The path is not repeated back: it is the caller's
/// own text.)
fn not_served() -> error::GatewayError {
    error::GatewayError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        "SubLane serves no such model API path",
    )
}

/// A model API path asked with a method it does not take (a `GET` of `/v1/messages`); axum adds
/// `Allow`.
fn not_allowed() -> error::GatewayError {
    error::GatewayError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this model API path does not take that method",
    )
}

/// A handler that answers `refusal()` as [`refuse_path`] does.
fn refusing(
    refusal: fn() -> error::GatewayError,
) -> impl Fn(State<AppState>, HeaderMap, axum::http::Uri) -> std::future::Ready<axum::response::Response>
+ Clone
+ Send
+ Sync
+ 'static {
    move |State(s), headers, uri| std::future::ready(refuse_path(&s, &headers, &uri, refusal()))
}

/// A `GET` (or `HEAD`) of `/v1/responses` that is no WebSocket handshake: the reason, in OpenAI's
/// shape with a request id, rather than axum's line of text.
fn not_a_websocket(
    s: &AppState,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    rejection: &axum::extract::ws::rejection::WebSocketUpgradeRejection,
) -> axum::response::Response {
    let status = rejection.status();
    let e = match status {
        axum::http::StatusCode::METHOD_NOT_ALLOWED => not_allowed(),
        _ => error::GatewayError::new(
            status,
            "invalid_request",
            "GET /v1/responses is the WebSocket mode: send a WebSocket handshake (Upgrade: websocket), or POST a response",
        ),
    };
    let mut resp = refuse_path(s, headers, uri, e);
    if status == axum::http::StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut()
            .insert(axum::http::header::ALLOW, axum::http::HeaderValue::from_static("GET,POST"));
    }
    resp
}

/// `e` in the shape of the protocol the client's headers or the path name, with a request id.
fn refuse_path(
    s: &AppState,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    e: error::GatewayError,
) -> axum::response::Response {
    let protocol = models::protocol_of(headers).unwrap_or_else(|| Protocol::for_path(uri.path()));
    refuse_as(s, protocol, e)
}

/// `e` in `protocol`'s shape, with a request id (in the body where the protocol has a place for
/// it, and as `x-request-id`) that the operator's log can be searched for.
fn refuse_as(s: &AppState, protocol: Protocol, e: error::GatewayError) -> axum::response::Response {
    let request_id = new_request_id(s.clock.unix_ms());
    let mut resp = e.render(protocol, Some(&request_id));
    if let Ok(v) = request_id.parse() {
        resp.headers_mut().insert(crate::header_names::REQUEST_ID.clone(), v);
    }
    resp
}

fn model_route(protocol: Protocol, op: Operation, only: Option<Provider>) -> MethodRouter<AppState> {
    let spec = Spec { protocol, op, only };
    post(move |State(s): State<AppState>, req: Request| call::handle(s, spec, req, None))
}

/// PX-3: `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`,
/// served by Antigravity accounts. The model and the operation come from the path.
async fn gemini(
    State(s): State<AppState>,
    Path(model_action): Path<String>,
    req: Request,
) -> axum::response::Response {
    let op = match model_action.rsplit_once(':') {
        Some((_, "generateContent")) => Operation::GeminiGenerate,
        Some((_, "streamGenerateContent")) => Operation::GeminiStream,
        _ => {
            let e = error::GatewayError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not_found",
                "use models/{model}:generateContent or :streamGenerateContent",
            );
            return refuse_as(&s, Protocol::Gemini, e);
        }
    };
    // Without `alt=sse`, Google streams a JSON array, which SubLane does not write: such a client
    // would be handed server-sent events it cannot parse. It is told what to ask for instead.
    // (`$alt` is the system parameter's other spelling, which Google takes too.)
    let sse =
        req.uri().query().is_some_and(|q| q.split('&').any(|pair| matches!(pair, "alt=sse" | "$alt=sse")));
    if op == Operation::GeminiStream && !sse {
        let e = error::GatewayError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_request",
            "SubLane streams Gemini answers as server-sent events only: add ?alt=sse to :streamGenerateContent",
        );
        return refuse_as(&s, Protocol::Gemini, e);
    }
    let model = model_action.rsplit_once(':').map(|(m, _)| m.to_owned());
    let spec = Spec { protocol: Protocol::Gemini, op, only: Some(Provider::Antigravity) };
    call::handle(s, spec, req, model).await
}
