//! Browser sessions (ID-2): a random token in an HttpOnly, SameSite=Lax cookie; the server keeps
//! only its SHA-256 with the member and an absolute expiry.
//!
//! A session is valid only while it has not expired and its member is enabled, so disabling a
//! member locks them out even if a session row survived.

use std::{net::IpAddr, time::Duration};

use app::model::{MemberView, PasswordChangeRequest};
use cookie::{Cookie, SameSite};
use http::HeaderMap;
use sqlx::SqlitePool;

use crate::{
    auth::{password, secrets, throttle::LoginThrottle},
    clock::{Clock, to_unix},
    error::{Error, Result},
    members::{self, MemberRow},
};

/// Name of the session cookie.
pub const COOKIE: &str = "sublane_session";

/// The session-lookup query, built once from the member columns (it runs on every signed-in
/// request).
static SESSION_MEMBER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let cols = members::COLUMNS.split(", ").map(|c| format!("m.{c}")).collect::<Vec<_>>().join(", ");
    format!(
        "SELECT {cols} FROM sessions s JOIN members m ON m.id = s.member_id
         WHERE s.token_hash = ? AND s.expires_at > ? AND m.enabled = 1"
    )
});

/// Opens a session for `member_id` and returns its token (to be set as the cookie).
pub async fn create(db: &SqlitePool, clock: &dyn Clock, member_id: i64, ttl: Duration) -> Result<String> {
    let token = secrets::new_session_token();
    let now = clock.now();
    let expires = now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::days(7));
    // Expired rows are dead weight; dropping them here keeps the table small without a timer.
    sqlx::query("DELETE FROM sessions WHERE expires_at <= ?").bind(to_unix(now)).execute(db).await?;
    sqlx::query("INSERT INTO sessions (token_hash, member_id, created_at, expires_at) VALUES (?, ?, ?, ?)")
        .bind(secrets::hash(&token))
        .bind(member_id)
        .bind(to_unix(now))
        .bind(to_unix(expires))
        .execute(db)
        .await?;
    Ok(token)
}

/// The enabled member behind a live session token.
pub async fn member_for_token(db: &SqlitePool, clock: &dyn Clock, token: &str) -> Result<Option<MemberView>> {
    let row: Option<MemberRow> = sqlx::query_as(&SESSION_MEMBER)
        .bind(secrets::hash(token))
        .bind(to_unix(clock.now()))
        .fetch_optional(db)
        .await?;
    Ok(row.map(|r| r.view()))
}

/// Where a sign-in comes from and the throttle it answers to.
pub struct Attempt<'a> {
    pub throttle: &'a LoginThrottle,
    pub ip: IpAddr,
}

/// Checks a username and password and opens a session (ID-2). Unknown users, wrong passwords
/// and disabled members all get the same answer, in about the same time. A username or address
/// with too many recent failures is refused (429) before any password is hashed.
pub async fn sign_in(
    db: &SqlitePool,
    clock: &dyn Clock,
    from: Attempt<'_>,
    username: &str,
    password: &str,
    ttl: Duration,
) -> Result<(MemberView, String)> {
    let gate = || {
        from.throttle
            .check(username, from.ip)
            .map_err(|wait| Error::TooManyAttempts(crate::scheduler::state::retry_secs(wait)))
    };
    gate()?;
    let row = members::find_by_username(db, username).await?;
    // Checked again once a hashing slot is free: guesses queued together see each other's
    // failures, so a burst cannot get more than a few past a block.
    let hash = row.as_ref().map(|r| r.password_hash.clone());
    // A wrong password counts before the next queued guess reaches its gate.
    let wrong = || from.throttle.failed(username, from.ip);
    let ok = password::verify_async(password.to_owned(), hash, gate, wrong).await?;
    match row {
        Some(row) if ok && row.enabled => {
            from.throttle.succeeded(username);
            let token = create(db, clock, row.id, ttl).await?;
            Ok((row.view(), token))
        }
        _ => {
            if ok {
                // the right password of a disabled member is still a failed sign-in
                from.throttle.failed(username, from.ip);
            }
            Err(Error::InvalidCredentials)
        }
    }
}

/// Self-service (issue 12): a member changes their own password, proving the current one (the
/// sign-in throttle applies, so this is no way around it). The session `keep` stays signed in;
/// with `sign_out_others`, every other session of the member ends.
pub async fn change_password(
    db: &SqlitePool,
    clock: &dyn Clock,
    from: Attempt<'_>,
    member_id: i64,
    change: &PasswordChangeRequest,
    keep: &str,
) -> Result<()> {
    let me = members::get(db, member_id).await?;
    let gate = || {
        from.throttle
            .check(&me.username, from.ip)
            .map_err(|wait| Error::TooManyAttempts(crate::scheduler::state::retry_secs(wait)))
    };
    gate()?;
    if change.new_password != change.confirm_password.as_deref().unwrap_or(&change.new_password) {
        return Err(Error::field("confirm_password", "confirm_password: the two new passwords differ"));
    }
    password::validate(&change.new_password)
        .map_err(|e| Error::field("new_password", format!("new_password: {}", e.public_message())))?;
    let row = members::find_by_username(db, &me.username).await?;
    let hash = row.as_ref().map(|r| r.password_hash.clone());
    let wrong = || from.throttle.failed(&me.username, from.ip);
    if !password::verify_async(change.current_password.clone(), hash, gate, wrong).await? {
        return Err(Error::Forbidden("current_password: the current password is wrong".into()));
    }
    from.throttle.succeeded(&me.username);
    let new_hash = password::hash_async(change.new_password.clone()).await?;
    let mut tx = db.begin().await?;
    sqlx::query("UPDATE members SET password_hash = ?, updated_at = ? WHERE id = ?")
        .bind(new_hash)
        .bind(to_unix(clock.now()))
        .bind(member_id)
        .execute(&mut *tx)
        .await?;
    if change.sign_out_others {
        sqlx::query("DELETE FROM sessions WHERE member_id = ? AND token_hash != ?")
            .bind(member_id)
            .bind(secrets::hash(keep))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Ends one session (sign-out). Unknown tokens are ignored.
pub async fn end(db: &SqlitePool, token: &str) -> Result<()> {
    sqlx::query("DELETE FROM sessions WHERE token_hash = ?").bind(secrets::hash(token)).execute(db).await?;
    Ok(())
}

/// The session token from a request's `Cookie` headers.
pub fn token_from(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(std::result::Result::ok)
        .find(|c| c.name() == COOKIE && !c.value().is_empty())
        .map(|c| c.value().to_owned())
}

/// `Set-Cookie` value that stores `token` for `ttl`.
pub fn set_cookie(token: &str, ttl: Duration, secure: bool) -> String {
    Cookie::build((COOKIE, token.to_owned()))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)))
        .build()
        .to_string()
}

/// `Set-Cookie` value that deletes the session cookie.
pub fn clear_cookie(secure: bool) -> String {
    Cookie::build((COOKIE, ""))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure)
        .max_age(cookie::time::Duration::ZERO)
        .build()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_attributes() {
        let c = set_cookie("tok", Duration::from_secs(60), false);
        assert!(c.starts_with("sublane_session=tok"), "{c}");
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Lax") && c.contains("Path=/"), "{c}");
        assert!(c.contains("Max-Age=60"), "{c}");
        assert!(!c.contains("Secure"));
        assert!(set_cookie("tok", Duration::from_secs(60), true).contains("Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }

    #[test]
    fn token_is_found_among_other_cookies() {
        let mut h = HeaderMap::new();
        h.insert(http::header::COOKIE, "a=1; sublane_session=abc; b=2".parse().unwrap());
        assert_eq!(token_from(&h).as_deref(), Some("abc"));
        assert_eq!(token_from(&HeaderMap::new()), None);
    }
}
