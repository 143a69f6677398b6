//! Plays a scripted stream: events with delays between them, ending normally, stalling forever,
//! or breaking the connection.

use std::{io, time::Duration};

use axum::body::{Body, Bytes};
use tokio::sync::mpsc;

pub(crate) enum Action {
    Send(String),
    Sleep(u64),
    /// Break the connection (the body errors, so the HTTP message never completes).
    Abort,
    /// Send nothing more but keep the connection open until the client leaves.
    Stall,
}

/// One SSE event: `event: <name>` and the JSON payload.
pub(crate) fn sse(name: &str, data: &serde_json::Value) -> Action {
    Action::Send(format!("event: {name}\ndata: {data}\n\n"))
}

pub(crate) fn body(actions: Vec<Action>) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(16);
    tokio::spawn(async move {
        for action in actions {
            match action {
                Action::Send(s) => {
                    if tx.send(Ok(Bytes::from(s))).await.is_err() {
                        return;
                    }
                }
                Action::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                Action::Abort => {
                    let _ = tx.send(Err(io::Error::other("mock upstream aborted the stream"))).await;
                    return;
                }
                Action::Stall => {
                    tx.closed().await;
                    return;
                }
            }
        }
    });
    Body::from_stream(futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
    ))
}
