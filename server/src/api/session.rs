//! `POST /api/session` (sign in, sets the cookie), `DELETE /api/session`, `GET /api/me`.

use app::model::{Credentials, MemberView};
use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};

use crate::{
    api::ApiJson,
    app_state::AppState,
    auth::{extract::SignedIn, session},
    error::Result,
};

pub fn router() -> Router<AppState> {
    Router::new().route("/session", post(sign_in).delete(sign_out)).route("/me", get(me))
}

async fn sign_in(State(s): State<AppState>, ApiJson(c): ApiJson<Credentials>) -> Result<impl IntoResponse> {
    let (member, token) =
        session::sign_in(&s.db, &*s.clock, &c.username, &c.password, s.config.session_ttl).await?;
    let cookie = session::set_cookie(&token, s.config.session_ttl, s.config.secure_cookies());
    Ok(([(header::SET_COOKIE, cookie)], Json(member)))
}

async fn sign_out(State(s): State<AppState>, headers: HeaderMap) -> Result<impl IntoResponse> {
    if let Some(token) = session::token_from(&headers) {
        session::end(&s.db, &token).await?;
    }
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, session::clear_cookie(s.config.secure_cookies()))]))
}

async fn me(SignedIn(member): SignedIn) -> Json<MemberView> {
    Json(member)
}
