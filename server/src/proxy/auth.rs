//! Gateway keys on the model path (ID-3): accepted as `Authorization: Bearer`, `x-api-key` or
//! `x-goog-api-key` (anthropic-python sends its key as Bearer; Gemini SDKs use x-goog-api-key).
//!
//! Lookups are cached so the hot path does not touch SQLite: an entry lives at most
//! [`CACHE_TTL`], and every change made through the JSON API or the web app bumps the shared
//! [`Generation`], which empties the cache at once (a revoked key stops working immediately).
//! Expiry is checked against the clock on every use, cached or not.

use std::{collections::HashMap, sync::RwLock, time::Duration};

use axum::http::{HeaderMap, HeaderName, header};
use sqlx::SqlitePool;
use tokio::time::Instant;

use crate::{
    auth::secrets,
    clock::{Clock, to_unix},
    error::Result,
    keys::{self, Principal},
};

/// Longest a cached lookup is trusted (covers changes made outside this process's API).
pub const CACHE_TTL: Duration = Duration::from_secs(5);
/// Entries kept before the cache is emptied (bounds memory under a flood of bad keys).
const CACHE_MAX: usize = 10_000;

pub use crate::directory::Generation;

/// The principal behind a model request's key: 401 `invalid_api_key` when missing or refused,
/// 500 when the lookup itself fails (a platform fault is never disguised as a bad key, ERR-1).
pub async fn authenticate_request(
    s: &crate::app_state::AppState,
    headers: &HeaderMap,
) -> std::result::Result<Principal, super::error::GatewayError> {
    use super::error::GatewayError;
    let key = presented_key(headers).ok_or_else(GatewayError::invalid_api_key)?;
    s.principals
        .authenticate(&s.db, &*s.clock, key)
        .await
        .map_err(|_| GatewayError::internal())?
        .ok_or_else(GatewayError::invalid_api_key)
}

/// The key a client presents, from the first header that has one.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    use crate::header_names::{X_API_KEY, X_GOOG_API_KEY};
    let h = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    h(&header::AUTHORIZATION)
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .or_else(|| h(&X_API_KEY))
        .or_else(|| h(&X_GOOG_API_KEY))
        .filter(|k| !k.is_empty())
}

struct Entry {
    principal: Option<Principal>,
    at: Instant,
    generation: u64,
}

/// Cached key lookups.
pub struct Principals {
    generation: Generation,
    cache: RwLock<HashMap<Vec<u8>, Entry>>,
}

impl Principals {
    pub fn new(generation: Generation) -> Self {
        Principals { generation, cache: RwLock::new(HashMap::new()) }
    }

    /// The principal for `secret`, or `None` when the key must be refused.
    pub async fn authenticate(
        &self,
        db: &SqlitePool,
        clock: &dyn Clock,
        secret: &str,
    ) -> Result<Option<Principal>> {
        let hash = secrets::hash(secret);
        let generation = self.generation.current();
        let now = to_unix(clock.now());
        let cached = {
            let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
            cache
                .get(&hash)
                .filter(|e| e.generation == generation && e.at.elapsed() < CACHE_TTL)
                .map(|e| e.principal.clone())
        };
        let principal = match cached {
            Some(p) => p,
            None => {
                let p = keys::authenticate(db, clock, secret).await?;
                let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= CACHE_MAX {
                    cache.clear();
                }
                cache.insert(hash, Entry { principal: p.clone(), at: Instant::now(), generation });
                p
            }
        };
        Ok(principal.filter(|p| p.expires_at.is_none_or(|e| e > now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn key_is_taken_from_any_supported_header() {
        assert_eq!(presented_key(&headers(&[("authorization", "Bearer sk-sl-a")])), Some("sk-sl-a"));
        assert_eq!(presented_key(&headers(&[("x-api-key", "sk-sl-b")])), Some("sk-sl-b"));
        assert_eq!(presented_key(&headers(&[("x-goog-api-key", "sk-sl-c")])), Some("sk-sl-c"));
        assert_eq!(presented_key(&headers(&[("authorization", "Basic xyz")])), None);
        assert_eq!(presented_key(&headers(&[("authorization", "Bearer ")])), None);
        assert_eq!(presented_key(&headers(&[])), None);
    }
}
