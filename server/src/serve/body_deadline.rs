//! People's requests (the JSON API and the web app, signing in included) bring their whole body
//! within [`API_BODY_DEADLINE`] of the moment they reached the routes. Their bodies are small
//! (see `API_BODY_BYTES`), and the connection's head deadline stops while a body is read: without
//! this, a client that declares a body and sends it a byte at a time, with no key and no session,
//! would hold its connection for as long as it liked. Model calls read their bodies with a
//! deadline of their own (`proxy::request`), after the key is checked.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::{body::Body, extract::Request};

/// How long a people's request may take to send its whole body, counted from the moment its head
/// reached the routes: 128 KiB in a minute is about 2 KiB a second.
pub const API_BODY_DEADLINE: Duration = Duration::from_secs(60);

/// Gives `req`'s body [`API_BODY_DEADLINE`] to come whole (a request without a body is left as it
/// is). For `middleware::map_request`.
pub async fn in_time(req: Request) -> Request {
    if http_body::Body::is_end_stream(req.body()) {
        return req;
    }
    req.map(|body| Body::new(InTime { body, deadline: tokio::time::sleep(API_BODY_DEADLINE) }))
}

/// Why a people's request body was cut: it did not come whole in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not come whole within {} s", API_BODY_DEADLINE.as_secs())]
pub struct BodyTooSlow;

pin_project_lite::pin_project! {
    /// A request body that fails once its deadline has passed, whether bytes still trickle in or
    /// none come at all.
    struct InTime {
        #[pin]
        body: Body,
        #[pin]
        deadline: tokio::time::Sleep,
    }
}

impl http_body::Body for InTime {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        // (what has come is taken first, so a body already whole is never refused; a client
        // that trickles its bytes still waits between them, and the body limit bounds the rest)
        if let Poll::Ready(frame) = this.body.poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match this.deadline.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTooSlow)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use axum::{Router, http::StatusCode, middleware, response::IntoResponse, routing::post};
    use tower::ServiceExt as _;

    use super::*;

    /// A route that reads its whole body and says how it went, behind the deadline.
    fn routes() -> Router {
        let read = |req: Request| async move {
            match axum::body::to_bytes(req.into_body(), usize::MAX).await {
                Ok(bytes) => (StatusCode::OK, bytes).into_response(),
                Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
            }
        };
        let json = |crate::api::extract::ApiJson(v): crate::api::extract::ApiJson<serde_json::Value>| async move {
            axum::Json(v)
        };
        Router::new()
            .route("/", post(read))
            .route("/json", post(json))
            .layer(middleware::map_request(in_time))
    }

    /// A body sent a chunk every `every`, `chunks` times.
    fn trickle(chunks: usize, every: Duration) -> Body {
        let stream = futures_util::stream::unfold(0, move |sent| async move {
            if sent == chunks {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"x")), sent + 1))
        });
        Body::from_stream(stream)
    }

    /// The answer of the route at `path` to `body`, and how long it took (failing, not hanging,
    /// when a body outlives the deadline).
    async fn answer(path: &str, body: Body) -> (StatusCode, String, Duration) {
        let started = tokio::time::Instant::now();
        let answered = async {
            let req = Request::post(path).header("content-type", "application/json").body(body).unwrap();
            let resp = routes().oneshot(req).await.unwrap();
            let status = resp.status();
            let text = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
            (status, String::from_utf8(text.to_vec()).unwrap())
        };
        let (status, text) =
            tokio::time::timeout(API_BODY_DEADLINE * 2, answered).await.expect("answered by the deadline");
        (status, text, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_comes_whole_in_time_is_read_and_one_that_does_not_is_cut_at_the_deadline() {
        let (status, text, _) = answer("/", Body::from("{\"username\":\"admin\"}")).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "{\"username\":\"admin\"}"));
        // a byte every second for 59 s: in time
        let (status, text, took) = answer("/", trickle(59, Duration::from_secs(1))).await;
        assert_eq!((status, text.len(), took), (StatusCode::OK, 59, Duration::from_secs(59)));
        // a byte every second for ever: cut at the deadline, though bytes keep coming
        let (status, text, took) = answer("/", trickle(usize::MAX, Duration::from_secs(1))).await;
        assert_eq!((status, took), (StatusCode::BAD_REQUEST, API_BODY_DEADLINE));
        assert!(text.contains("did not come whole within 60 s"), "{text}");
        // nothing at all after the head: cut at the deadline too
        let (status, _, took) = answer(
            "/",
            Body::from_stream(futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>()),
        )
        .await;
        assert_eq!((status, took), (StatusCode::BAD_REQUEST, API_BODY_DEADLINE));
        // the JSON API says so: 408 `request_timeout`, as the model paths do
        let (status, text, took) = answer("/json", trickle(usize::MAX, Duration::from_secs(1))).await;
        assert_eq!((status, took), (StatusCode::REQUEST_TIMEOUT, API_BODY_DEADLINE));
        assert!(text.contains("\"request_timeout\"") && text.contains("within 60 s"), "{text}");
        let (status, text, _) = answer("/json", Body::from("{\"a\":1}")).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "{\"a\":1}"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_already_whole_is_read_past_the_deadline() {
        // (a handler that reads its body late: what has come is never refused)
        let req = in_time(Request::post("/").body(Body::from("whole")).unwrap()).await;
        tokio::time::sleep(API_BODY_DEADLINE * 2).await;
        let body = axum::body::to_bytes(req.into_body(), usize::MAX).await.unwrap();
        assert_eq!(&body[..], b"whole");
    }
}
