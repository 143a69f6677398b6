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
