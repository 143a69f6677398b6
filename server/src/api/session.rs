//! `POST /api/session` (sign in, sets the cookie), `DELETE /api/session`, `GET /api/me`.

use app::model::{Credentials, MemberView, PasswordChangeRequest};
use axum::{
    Extension, Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};

use crate::{
    api::ApiJson,
    app_state::AppState,
    auth::{client::ClientInfo, extract::SignedIn, session},
    error::Result,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/session", post(sign_in).delete(sign_out))
        .route("/me", get(me))
        .route("/me/password", post(change_password))
}

async fn sign_in(
    State(s): State<AppState>,
    Extension(client): Extension<ClientInfo>,
    ApiJson(c): ApiJson<Credentials>,
) -> Result<impl IntoResponse> {
    let from = session::Attempt { throttle: &s.logins, ip: client.ip };
    let (member, token) =
        session::sign_in(&s.db, &*s.clock, from, &c.username, &c.password, s.config.session_ttl).await?;
    let cookie = session::set_cookie(&token, s.config.session_ttl, client.https);
    Ok(([(header::SET_COOKIE, cookie)], Json(member)))
}

async fn sign_out(
    State(s): State<AppState>,
    Extension(client): Extension<ClientInfo>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    if let Some(token) = session::token_from(&headers) {
        session::end(&s.db, &token).await?;
    }
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, session::clear_cookie(client.https))]))
}

async fn me(SignedIn(member): SignedIn) -> Json<MemberView> {
    Json(member)
}

/// Self-service: `POST /api/me/password` (204; 403 when the current password is wrong, 422 for a
/// weak or mismatched new one).
async fn change_password(
    SignedIn(me): SignedIn,
    State(s): State<AppState>,
    Extension(client): Extension<ClientInfo>,
    headers: HeaderMap,
    ApiJson(c): ApiJson<PasswordChangeRequest>,
) -> Result<StatusCode> {
    let from = session::Attempt { throttle: &s.logins, ip: client.ip };
    let keep = session::token_from(&headers).unwrap_or_default();
    session::change_password(&s.db, &*s.clock, from, me.id, &c, &keep).await?;
    Ok(StatusCode::NO_CONTENT)
}
