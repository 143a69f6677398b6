//! axum extractors for the JSON API: [`SignedIn`] (401 without a live session) and [`Admin`]
//! (403 for members). Handlers declare what they need in their signature.

use app::model::MemberView;
use axum::{extract::FromRequestParts, http::request::Parts};

use crate::{app_state::AppState, auth::session, error::Error};

/// The member behind the request's session cookie.
pub struct SignedIn(pub MemberView);

/// A signed-in, enabled admin (API-1).
pub struct Admin(pub MemberView);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let token = session::token_from(&parts.headers).ok_or(Error::Unauthenticated)?;
        session::member_for_token(&state.db, &*state.clock, &token)
            .await?
            .map(SignedIn)
            .ok_or(Error::Unauthenticated)
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let SignedIn(member) = SignedIn::from_request_parts(parts, state).await?;
        if member.is_admin() { Ok(Admin(member)) } else { Err(Error::forbidden("this needs an admin")) }
    }
}
