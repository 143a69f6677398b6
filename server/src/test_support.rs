//! Helpers shared by the unit tests of several modules.

use axum::http::{HeaderMap, HeaderName};

/// A header map from `(name, value)` pairs.
pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    h
}

/// A fresh database in a temporary directory (kept while the returned guard lives).
pub async fn open_db() -> (tempfile::TempDir, sqlx::SqlitePool, crate::db::ProcessLock) {
    let dir = tempfile::tempdir().unwrap();
    let (db, lock) =
        crate::db::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.unwrap();
    (dir, db, lock)
}

/// A successful Codex call's record, number `n`, started at `started_at_ms`.
pub fn record(n: i64, started_at_ms: i64) -> crate::records::NewRecord {
    use crate::records::{NewRecord, Outcome, Usage};
    NewRecord {
        request_id: format!("req_{n}"),
        member_id: 1,
        key_id: Some(1),
        pool_id: Some(1),
        account_id: Some(1),
        provider: Some("codex"),
        model: "gpt-5.1-codex".into(),
        operation: "responses",
        started_at_ms,
        duration_ms: 10,
        first_output_ms: Some(5),
        outcome: Outcome::Success,
        error_code: None,
        upstream_status: Some(200),
        usage: Usage { input: Some(10), output: Some(2), cached: Some(4) },
        routing: None,
        charges: Vec::new(),
    }
}
