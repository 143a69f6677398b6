//! The providers' OAuth endpoints, as strict as the real ones about what matters to a gateway:
//! refresh tokens are single-use and rotate (presenting an old one is `refresh_token_reused` /
//! `invalid_grant`), authorization codes are single-use, bound to their PKCE challenge and
//! redirect URI, and every answer has the provider's own shape.
//!
//! - `POST /oauth/token` (Codex, JSON), `POST /v1/oauth/token` (Claude, JSON), `POST /token`
//!   (Google, form): `grant_type=refresh_token` or `authorization_code`.
//! - `GET /oauth/authorize` (Codex and Claude, told apart by `client_id`) and
//!   `GET /o/oauth2/v2/auth` (Google): the provider's sign-in page, signed in at once; it
//!   redirects to `redirect_uri` with a code and the state, as after a real sign-in.
//!
//! A token family is one simulated grant: refresh tokens `<family>` (the first), then
//! `<family>.1`, `<family>.2`, ... (Google keeps `<family>`: it does not rotate); access tokens
//! carry the provider's prefix and the generation's suffix. A test scripts a family's token endpoint through `PUT /__mock/accounts/token:<family>`
//! (steps: `invalid_grant`, `status` with Retry-After, `html_error`; `token_expires_in`), and its
//! token calls are logged under that key, apart from model calls.

use std::collections::HashMap;

use axum::{
    body::Bytes,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;

use super::{MockState, Step, call, json};
use crate::config::{
    DEFAULT_CLAUDE_CLIENT_ID, DEFAULT_CLAUDE_REDIRECT_URI, DEFAULT_CODEX_CLIENT_ID,
    DEFAULT_CODEX_REDIRECT_URI, DEFAULT_GOOGLE_CLIENT_ID, DEFAULT_GOOGLE_REDIRECT_URI,
};

/// The Google OAuth client secret the mock accepts (SubLane never ships one: it is configuration).
pub const MOCK_GOOGLE_SECRET: &str = "mock-google-client-secret";

/// The provider behind a token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Issuer {
    Codex,
    Claude,
    Google,
}

impl Issuer {
    fn access_prefix(self) -> &'static str {
        match self {
            Issuer::Codex => "at-",
            Issuer::Claude => "sk-ant-oat01-",
            Issuer::Google => "ya29.",
        }
    }

    /// The OAuth client the provider knows (SubLane's defaults are the real clients' ids).
    fn client_id(self) -> &'static str {
        match self {
            Issuer::Codex => DEFAULT_CODEX_CLIENT_ID,
            Issuer::Claude => DEFAULT_CLAUDE_CLIENT_ID,
            Issuer::Google => DEFAULT_GOOGLE_CLIENT_ID,
        }
    }

    /// An unknown client or a wrong secret: a misconfiguration, not a dead grant.
    fn invalid_client(self) -> Response {
        let body = match self {
            Issuer::Codex => {
                json!({"error": {"code": "invalid_client", "message": "Unknown client", "type": "invalid_request_error"}})
            }
            _ => json!({"error": "invalid_client", "error_description": "The OAuth client was not found."}),
        };
        json(StatusCode::UNAUTHORIZED, body)
    }

    fn default_lifetime(self) -> u64 {
        match self {
            Issuer::Codex => 864_000,
            Issuer::Claude => 28_800,
            Issuer::Google => 3_599,
        }
    }

    /// A terminal refusal of a grant, in the provider's shape.
    fn invalid_grant(self, reused: bool) -> Response {
        match self {
            Issuer::Codex => json(
                StatusCode::UNAUTHORIZED,
                json!({"error": {"code": if reused { "refresh_token_reused" } else { "refresh_token_invalidated" },
                    "message": "Your refresh token could not be used", "type": "invalid_request_error"}}),
            ),
            Issuer::Claude => json(
                StatusCode::BAD_REQUEST,
                json!({"error": "invalid_grant", "error_description": "Refresh token not found or invalid"}),
            ),
            Issuer::Google => json(
                StatusCode::BAD_REQUEST,
                json!({"error": "invalid_grant", "error_description": "Token has been expired or revoked."}),
            ),
        }
    }
}

/// What the mock remembers of grants.
#[derive(Default)]
pub(crate) struct Grants {
    /// Per family, the generation of its one valid refresh token.
    current: HashMap<String, u32>,
    /// Codes issued by the authorize endpoints and not yet exchanged.
    codes: HashMap<String, Pending>,
    next: u64,
}

struct Pending {
    family: String,
    state: String,
    challenge: String,
    redirect_uri: String,
    client_id: String,
}

/// `<family>.<n>` -> (`<family>`, n); a bare family is generation 0.
fn split(refresh: &str) -> (&str, u32) {
    match refresh.rsplit_once('.') {
        Some((family, n)) if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() => {
            (family, n.parse().unwrap_or(0))
        }
        _ => (refresh, 0),
    }
}

fn token_name(family: &str, generation: u32) -> String {
    if generation == 0 { family.to_owned() } else { format!("{family}.{generation}") }
}

/// Codex: JSON (refresh, as Codex sends it) or a form (the code exchange, as Codex sends it).
pub async fn codex_token(s: State<MockState>, m: Method, uri: Uri, h: HeaderMap, body: Bytes) -> Response {
    if content_type_is(&h, b"application/x-www-form-urlencoded") {
        let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
        return token(s.0, Issuer::Codex, &m, &uri, &h, &body, |k| form.get(k).cloned()).await;
    }
    if !content_type_is(&h, b"application/json") {
        return json(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            json!({"error": {"code": "invalid_request", "message": "JSON or form body required"}}),
        );
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    token(s.0, Issuer::Codex, &m, &uri, &h, &body, |k| req[k].as_str().map(str::to_owned)).await
}

pub async fn claude_token(s: State<MockState>, m: Method, uri: Uri, h: HeaderMap, body: Bytes) -> Response {
    if !content_type_is(&h, b"application/json") {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "error_description": "JSON body required"}),
        );
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    token(s.0, Issuer::Claude, &m, &uri, &h, &body, |k| req[k].as_str().map(str::to_owned)).await
}

pub async fn google_token(s: State<MockState>, m: Method, uri: Uri, h: HeaderMap, body: Bytes) -> Response {
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    if !content_type_is(&h, b"application/x-www-form-urlencoded") {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "error_description": "form body required"}),
        );
    }
    token(s.0, Issuer::Google, &m, &uri, &h, &body, |k| form.get(k).cloned()).await
}

fn content_type_is(h: &HeaderMap, expected: &[u8]) -> bool {
    h.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(expected))
}

async fn token(
    s: MockState,
    issuer: Issuer,
    m: &Method,
    uri: &Uri,
    h: &HeaderMap,
    body: &[u8],
    field: impl Fn(&str) -> Option<String>,
) -> Response {
    let grant = field("grant_type").unwrap_or_default();
    // The family: the grant being refreshed, or the one a code was issued for.
    let family = match grant.as_str() {
        "refresh_token" => split(&field("refresh_token").unwrap_or_default()).0.to_owned(),
        "authorization_code" => {
            let grants = s.grants();
            match grants.codes.get(&field("code").unwrap_or_default()) {
                Some(p) => p.family.clone(),
                None => return issuer.invalid_grant(false),
            }
        }
        _ => return json(StatusCode::BAD_REQUEST, json!({"error": "unsupported_grant_type"})),
    };
    let turn = s.begin(&format!("token:{family}"), call(m, uri, h, body));
    if turn.script.delay_ms > 0 {
        // a slow token endpoint: what makes concurrent refreshes of one grant likely
        tokio::time::sleep(std::time::Duration::from_millis(turn.script.delay_ms)).await;
    }
    if field("client_id").as_deref() != Some(issuer.client_id())
        || (issuer == Issuer::Google && field("client_secret").as_deref() != Some(MOCK_GOOGLE_SECRET))
    {
        return issuer.invalid_client();
    }
    match &turn.step {
        Step::InvalidGrant => return issuer.invalid_grant(false),
        Step::Status { status, retry_after, .. } => {
            let mut r = json(
                StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                json!({"error": "temporarily_unavailable"}),
            );
            if let Some(ra) = retry_after.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                r.headers_mut().insert(header::RETRY_AFTER, ra);
            }
            return r;
        }
        Step::HtmlError { status } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut r = (status, "<html><body>502 Bad Gateway</body></html>").into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
            return r;
        }
        _ => {}
    }
    let lifetime = turn.script.token_expires_in.unwrap_or(issuer.default_lifetime());
    let mut grants = s.grants();
    let generation = match grant.as_str() {
        "refresh_token" => {
            let presented = split(&field("refresh_token").unwrap_or_default()).1;
            let current = grants.current.get(&family).copied().unwrap_or(0);
            // Codex and Claude rotate: a refresh token is single-use. Google keeps its refresh
            // token: it may be presented again (only the family's first one is ever issued).
            if presented != current && !(issuer == Issuer::Google && presented == 0) {
                return issuer.invalid_grant(true); // single use: an old token was presented again
            }
            current + 1
        }
        _ => {
            let code = field("code").unwrap_or_default();
            let Some(p) = grants.codes.remove(&code) else { return issuer.invalid_grant(false) };
            let verifier = field("code_verifier").unwrap_or_default();
            let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            // Claude's exchange carries the state too.
            let state_ok = issuer != Issuer::Claude || field("state").as_deref() == Some(p.state.as_str());
            if challenge != p.challenge
                || field("redirect_uri").as_deref() != Some(p.redirect_uri.as_str())
                || field("client_id").as_deref() != Some(p.client_id.as_str())
                || !state_ok
            {
                return issuer.invalid_grant(false);
            }
            0
        }
    };
    grants.current.insert(family.clone(), generation);
    drop(grants);
    let refresh = token_name(&family, generation);
    let access = format!("{}{}", issuer.access_prefix(), refresh);
    let mut answer = json!({"access_token": access, "refresh_token": refresh, "expires_in": lifetime, "token_type": "Bearer"});
    if issuer == Issuer::Google && grant == "refresh_token" {
        // Google answers a refresh without a refresh token: the old one stays valid.
        if let Some(a) = answer.as_object_mut() {
            a.remove("refresh_token");
        }
    }
    match issuer {
        Issuer::Codex => {
            // An unsigned id token with the ChatGPT account id, as Codex reads it.
            let claims = json!({"email": format!("{family}@example.com"),
                "https://api.openai.com/auth": {"chatgpt_account_id": format!("acct-{family}"), "chatgpt_plan_type": "plus"}});
            let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
            answer["id_token"] = json!(format!("{}.{}.", b64(&json!({"alg": "none"})), b64(&claims)));
        }
        Issuer::Claude => answer["scope"] = json!("user:inference user:profile"),
        Issuer::Google => answer["scope"] = json!("https://www.googleapis.com/auth/cloud-platform"),
    }
    json(StatusCode::OK, answer)
}

/// The provider's sign-in page, signed in at once: a new grant, redirected back with its code.
pub async fn authorize(State(s): State<MockState>, Query(q): Query<HashMap<String, String>>) -> Response {
    let needed = ["client_id", "redirect_uri", "code_challenge", "state", "response_type"];
    if let Some(missing) = needed.iter().find(|k| q.get(**k).is_none_or(String::is_empty)) {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "error_description": format!("{missing} is required")}),
        );
    }
    if q.get("code_challenge_method").map(String::as_str) != Some("S256") || q["response_type"] != "code" {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "error_description": "PKCE S256 and response_type=code required"}),
        );
    }
    let known: &[&str] =
        if q.contains_key("access_type") || q["client_id"].ends_with(".apps.googleusercontent.com") {
            &[DEFAULT_GOOGLE_CLIENT_ID]
        } else {
            &[DEFAULT_CODEX_CLIENT_ID, DEFAULT_CLAUDE_CLIENT_ID]
        };
    if !known.contains(&q["client_id"].as_str()) {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_client", "error_description": "unknown client_id"}),
        );
    }
    // Each client may only send its sign-ins back to its registered address.
    let registered = match q["client_id"].as_str() {
        DEFAULT_CODEX_CLIENT_ID => DEFAULT_CODEX_REDIRECT_URI,
        DEFAULT_CLAUDE_CLIENT_ID => DEFAULT_CLAUDE_REDIRECT_URI,
        _ => DEFAULT_GOOGLE_REDIRECT_URI,
    };
    if q["redirect_uri"] != registered {
        return json(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "error_description": "redirect_uri mismatch"}),
        );
    }
    let mut grants = s.grants();
    grants.next += 1;
    let n = grants.next;
    let code = format!("code-{n}");
    grants.codes.insert(
        code.clone(),
        Pending {
            family: format!("signin-{n}"),
            state: q["state"].clone(),
            challenge: q["code_challenge"].clone(),
            redirect_uri: q["redirect_uri"].clone(),
            client_id: q["client_id"].clone(),
        },
    );
    let separator = if q["redirect_uri"].contains('?') { '&' } else { '?' };
    let location = format!(
        "{}{separator}code={code}&state={}",
        q["redirect_uri"],
        url::form_urlencoded::byte_serialize(q["state"].as_bytes()).collect::<String>()
    );
    let mut r = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}
