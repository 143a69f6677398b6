//! Same-origin rule for state-changing requests (ID-5).
//!
//! Mutations of the JSON API (`/api/`) and the web app's server functions (`/rpc/`) must come
//! from this site: the `Origin` header (or, without it, `Referer`) must name the configured public
//! URL, or else the host the request was sent to. JSON API mutations that carry a body must also
//! be `application/json`, which browsers cannot send cross-site without a CORS preflight.
//! The model proxy (`/v1/...`) is authenticated by API keys and is not subject to this rule.

use axum::{
    extract::{Request, State},
    http::{HeaderMap, Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::{app_state::AppState, error::Error};

pub async fn require_same_origin(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let guarded = path.starts_with("/api/") || path.starts_with("/rpc/");
    if !guarded || is_safe(req.method()) {
        return next.run(req).await;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    if !same_origin(req.headers(), state.config.public_url.as_ref(), host.as_deref()) {
        return Error::forbidden(
            "cross-origin request refused: mutating requests must carry an Origin (or Referer) of this site",
        )
        .into_response();
    }
    let has_body = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH);
    if path.starts_with("/api/") && has_body && !is_json(req.headers()) {
        return Error::UnsupportedMediaType.into_response();
    }
    next.run(req).await
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether the request's Origin (else Referer) is this site.
fn same_origin(headers: &HeaderMap, public: Option<&url::Url>, host: Option<&str>) -> bool {
    let claimed = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url::Url::parse(v).ok());
    let Some(claimed) = claimed else { return false };
    if !matches!(claimed.scheme(), "http" | "https") {
        return false;
    }
    if let Some(public) = public {
        return claimed.origin() == public.origin();
    }
    let Some(host) = host else { return false };
    let authority = match (claimed.host_str(), claimed.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => return false,
    };
    authority.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn origin_must_match_the_host() {
        let host = Some("127.0.0.1:3000");
        assert!(same_origin(&headers(&[("origin", "http://127.0.0.1:3000")]), None, host));
        assert!(!same_origin(&headers(&[("origin", "http://evil.example")]), None, host));
        assert!(!same_origin(&headers(&[("origin", "http://127.0.0.1:3001")]), None, host));
        assert!(!same_origin(&headers(&[("origin", "null")]), None, host));
        assert!(!same_origin(&headers(&[]), None, host));
    }

    #[test]
    fn referer_stands_in_for_a_missing_origin() {
        let h = headers(&[("referer", "http://127.0.0.1:3000/keys?x=1")]);
        assert!(same_origin(&h, None, Some("127.0.0.1:3000")));
    }

    #[test]
    fn default_ports_and_public_url() {
        assert!(same_origin(&headers(&[("origin", "https://gw.example")]), None, Some("gw.example")));
        let public = url::Url::parse("https://gw.example").unwrap();
        assert!(same_origin(
            &headers(&[("origin", "https://gw.example")]),
            Some(&public),
            Some("10.0.0.5:3000")
        ));
        assert!(!same_origin(
            &headers(&[("origin", "http://gw.example")]),
            Some(&public),
            Some("gw.example")
        ));
    }

    #[test]
    fn json_content_type_detection() {
        assert!(is_json(&headers(&[("content-type", "application/json; charset=utf-8")])));
        assert!(!is_json(&headers(&[("content-type", "text/plain")])));
        assert!(!is_json(&headers(&[])));
    }
}
