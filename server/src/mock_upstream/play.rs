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
    /// Send nothing more but keep the connection open until the client leaves, with a keep-alive
    /// (no event) every `keep_alive_ms` when that is not 0.
    Stall {
        keep_alive_ms: u64,
    },
}

/// The deltas of a scripted answer: `delta(i)` for each, with the script's delay between them,
/// cut short by a `stall`/`abort` step. Returns the actions and whether the answer was cut (then
/// nothing may follow).
pub(crate) fn deltas(turn: &super::Turn, mut delta: impl FnMut(u32) -> Action) -> (Vec<Action>, bool) {
    use super::Step;
    let cut = match turn.step {
        Step::Stall { after_deltas, .. } | Step::Abort { after_deltas } => Some(after_deltas),
        _ => None,
    };
    let end = || match turn.step {
        Step::Stall { keep_alive_ms, .. } => Action::Stall { keep_alive_ms },
        _ => Action::Abort,
    };
    let mut actions = Vec::new();
    for i in 0..turn.script.deltas {
        if cut == Some(i) {
            actions.push(end());
            return (actions, true);
        }
        if i > 0 && turn.script.delta_delay_ms > 0 {
            actions.push(Action::Sleep(turn.script.delta_delay_ms));
        }
        actions.push(delta(i));
    }
    if cut.is_some() {
        actions.push(end());
        return (actions, true);
    }
    (actions, false)
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
                Action::Stall { keep_alive_ms } => {
                    if keep_alive_ms == 0 {
                        tx.closed().await;
                        return;
                    }
                    loop {
                        tokio::select! {
                            () = tx.closed() => return,
                            () = tokio::time::sleep(Duration::from_millis(keep_alive_ms)) => {}
                        }
                        if tx.send(Ok(Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    Body::from_stream(futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
    ))
}
