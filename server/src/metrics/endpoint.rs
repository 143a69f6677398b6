//! `GET /metrics` (OPS-4): the counters and histograms, and the state in force now read from
//! the scheduler, the accounts and the pools. With `SUBLANE_METRICS_TOKEN` set, only a request
//! bearing it is answered; switched off, the route answers 404.

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};

use super::{AccountStateView, BLOCK_REASONS, CONTENT_TYPE, PoolState};
use crate::app_state::AppState;

pub async fn scrape(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if !s.metrics.enabled() {
        return StatusCode::NOT_FOUND.into_response();
    }
    if let Some(token) = &s.config.observability.metrics_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Digests of equal length are compared, so the comparison's time says nothing of the token.
        if Sha256::digest(given.as_bytes()) != Sha256::digest(token.expose_secret().as_bytes()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "metrics need the bearer token\n",
            )
                .into_response();
        }
    }
    let state = match state(&s).await {
        Ok(state) => state,
        Err(e) => {
            tracing::error!(error = %e, "metrics: reading accounts and pools failed");
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    };
    match s.metrics.render(&state) {
        Some(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Queues, account load, limits and blocks as they are now.
async fn state(s: &AppState) -> sqlx::Result<super::State> {
    let now = s.clock.unix_ms();
    let pools: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, name FROM pools WHERE deleted_at IS NULL ORDER BY id")
            .fetch_all(&s.db)
            .await?;
    let accounts: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT id, name, provider FROM accounts WHERE deleted_at IS NULL ORDER BY id")
            .fetch_all(&s.db)
            .await?;
    let live: std::collections::HashMap<i64, crate::scheduler::RuntimeView> =
        s.scheduler.runtime().into_iter().map(|r| (r.account_id, r)).collect();
    Ok(super::State {
        pools: pools
            .into_iter()
            .map(|(id, name)| PoolState { id, name, queue_depth: s.scheduler.queue_depth(id) })
            .collect(),
        accounts: accounts
            .into_iter()
            .map(|(id, name, provider)| {
                let r = live.get(&id);
                let provider = app::model::Provider::parse(&provider).map_or("unknown", |p| p.as_str());
                let in_force = |reason: &str| {
                    r.is_some_and(|r| match reason {
                        "rate_limited" => r.state.rate_limit_reset_at.is_some_and(|t| t > now),
                        "overloaded" => r.state.overload_until.is_some_and(|t| t > now),
                        "temp_unschedulable" => r.state.temp_unschedulable_until.is_some_and(|t| t > now),
                        "credentials" => r.credentials_until > now,
                        "quota_exhausted" => r.quota_until > now,
                        _ => false,
                    })
                };
                AccountStateView {
                    id,
                    name,
                    provider,
                    in_flight: r.map_or(0, |r| r.in_flight),
                    limit: r.map_or(0, |r| r.max_concurrency),
                    models_limited: r.map_or(0, |r| r.limited_models),
                    blocks: BLOCK_REASONS.map(|reason| (reason, in_force(reason))),
                }
            })
            .collect(),
    })
}
