//! The stack floor: SubLane's HTTP stack with none of SubLane's per-call work, as a baseline
//! for performance goals 1 and 2. It serves `POST /v1/responses` on SubLane's serving threads and
//! hyper connection ([`sublane::serve::serve_forever`]) and forwards the body to one upstream URL
//! through SubLane's model-call client, streaming the answer back: no key, no admission, no
//! selection, no record. What SubLane costs above it is SubLane's own work; what the floor costs
//! above a bare nginx proxy is the stack's.

use std::sync::Arc;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use sublane::proxy::client::Client;

struct Floor {
    client: Client,
    upstream: url::Url,
}

/// Serves the floor on `listener` with `threads` serving threads (0: on the calling runtime)
/// until the process ends, forwarding every call to `upstream`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    threads: usize,
    upstream: url::Url,
) -> std::io::Result<()> {
    let client = Client::from_env().map_err(std::io::Error::other)?.with_lanes(threads);
    let app =
        Router::new().route("/v1/responses", post(forward)).with_state(Arc::new(Floor { client, upstream }));
    sublane::serve::serve_forever(listener, threads, app).await
}

/// The call as it came, with a key of the floor's own, and the answer's status, type and body.
async fn forward(State(floor): State<Arc<Floor>>, body: Bytes) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-proj-bench"));
    match floor.client.post(&floor.upstream, headers, body).await {
        Ok(answer) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = answer.status();
            if let Some(kind) = answer.headers().get(header::CONTENT_TYPE) {
                response.headers_mut().insert(header::CONTENT_TYPE, kind.clone());
            }
            *response.body_mut() = Body::from_stream(answer.bytes_stream());
            response
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}
