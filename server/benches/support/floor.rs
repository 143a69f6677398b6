//! The stack floor: SubLane's HTTP stack with none of SubLane's per-call work, as a baseline
//! for performance goals 1 and 2. It serves `POST /v1/responses` on SubLane's serving threads and
//! hyper connection ([`sublane::serve::serve_forever`]) and forwards the body to one upstream URL
//! through SubLane's model-call client, with the key `sk-proj-bench`, sending the answer back
//! with the upstream's status, type and length: no key check, no admission, no selection, no
//! record. SubLane's own side of the split also holds what its router has and this one lacks: the
//! panic catcher, the front door (in-flight tracking) and the watching of the answer's events
//! and usage. What the floor costs above a bare nginx proxy is the stack's.

use std::sync::Arc;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use futures_util::StreamExt as _;
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
    sublane::serve::serve_forever(listener, threads, app, "floor-serve").await
}

/// The call's body as it came, and the answer's status, type, length and body. As SubLane does,
/// an answer of known length is read whole and leaves in one write, and a stream leaves with its
/// first chunk, so the floor writes no more often than SubLane.
async fn forward(State(floor): State<Arc<Floor>>, body: Bytes) -> Response {
    pass_on(&floor, body).await.unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
}

async fn pass_on(floor: &Floor, body: Bytes) -> Result<Response, Box<dyn std::error::Error + Send + Sync>> {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-proj-bench"));
    let answer = floor.client.post(&floor.upstream, headers, body).await?;
    let mut response = Response::new(Body::empty());
    *response.status_mut() = answer.status();
    for name in [header::CONTENT_TYPE, header::CONTENT_LENGTH] {
        if let Some(value) = answer.headers().get(&name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    let whole = answer.content_length().is_some();
    let mut chunks = answer.bytes_stream();
    *response.body_mut() = if whole {
        let mut all = Vec::new();
        while let Some(chunk) = chunks.next().await {
            all.extend_from_slice(&chunk?);
        }
        Body::from(all)
    } else {
        let first = chunks.next().await.transpose()?.unwrap_or_default();
        Body::from_stream(futures_util::stream::once(async { Ok(first) }).chain(chunks))
    };
    Ok(response)
}
