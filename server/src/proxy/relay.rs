//! The streaming relay (PX-6, CD-6, ADM-5). One task per stream owns the upstream response: it
//! forwards every chunk to the client unchanged as it arrives (no whole-body buffering), watches
//! the events go by, sends an SSE comment heartbeat when the client has been sent nothing for 10 s
//! (only between events, never inside one; a Gemini client gets none), and ends at the total
//! deadline.
//!
//! When the client goes away the upstream request is dropped, which cancels it; for Codex the
//! relay may first keep reading for a short drain window to collect the final usage (ADM-5).
//! A client that stops reading cannot pin the account: every send to it has a write deadline,
//! after which the stream ends as `client_stalled`; the total deadline and the shutdown hard stop
//! fire even while a send is blocked. Whatever happens, the end is reported once, so the request
//! is always recorded.

mod pipe;

use std::{future::Future, time::Duration};

use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use tokio::time::{Instant, sleep_until};

use crate::{
    chat::stream::Transform,
    providers::{Grammar, Observation, Observer, sse::Splitter},
};

/// Comment line sent to keep idle connections (and client idle timers) alive.
pub const HEARTBEAT: &[u8] = b": keep-alive\n\n";

/// Timing rules of one relayed stream.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// When gateway processing started (first output is measured from here, REC-7).
    pub started: Instant,
    /// CD-6: the heartbeat's period: one is sent when the client has been sent nothing for this
    /// long. `None` for a client that cannot read one (see `proxy::call::heartbeat_for`).
    pub heartbeat: Option<Duration>,
    /// CD-6: total request deadline.
    pub deadline: Instant,
    /// CD-6: optional idle timeout counting upstream events only: neither SubLane's heartbeats
    /// nor the upstream's own keep-alives (comments, blank lines, `ping` and `keepalive` events)
    /// reset it. It runs from `answered` until the first event.
    pub idle_timeout: Option<Duration>,
    /// When the upstream's headers came.
    pub answered: Instant,
    /// ADM-5: how long to keep reading for usage after the client left (Codex only).
    pub drain_after_cancel: Option<Duration>,
    /// Longest a send to the client may wait for it to read; then the stream ends.
    pub write_timeout: Duration,
}

/// OPS-3: the server's shutdown; the relay ends when its hard stop comes.
pub type HardStop = std::sync::Arc<crate::app_state::Lifecycle>;

/// Rewrites each event before it reaches the client, where the protocol needs translating;
/// without one, bytes pass unchanged. The observer always sees the upstream's own events.
#[derive(Debug)]
pub enum Rewrite {
    /// Antigravity: each event's `{"response": ...}` unwrapped, on one line (an event without
    /// one passes as it came, but on one line; one that is not JSON is dropped).
    Envelope,
    /// A Chat Completions client of a Responses upstream: a stateful transform (BEY-3).
    Chat(Box<crate::chat::stream::ChatStream>),
    /// A Chat Completions client of a Messages upstream.
    ChatFromMessages(Box<crate::chat::messages::MessagesStream>),
    /// A Chat Completions client of a Gemini upstream (events in the v1internal envelope).
    ChatFromGemini(Box<crate::chat::gemini::GeminiStream>),
}

impl Rewrite {
    /// The `data` payloads one upstream event becomes.
    fn apply(&mut self, data: &str, mut emit: impl FnMut(&str)) {
        match self {
            Rewrite::Envelope => {
                if let Some(d) = crate::providers::unwrap_envelope(data) {
                    emit(&d);
                }
            }
            Rewrite::Chat(chat) => chat.event(data).iter().for_each(|d| emit(d)),
            Rewrite::ChatFromMessages(chat) => chat.event(data).iter().for_each(|d| emit(d)),
            Rewrite::ChatFromGemini(chat) => chat.event(data).iter().for_each(|d| emit(d)),
        }
    }

    /// For a Chat Completions stream that ended before its terminal event: the error object
    /// that tells the client why (it cannot tell a cut stream from a finished one otherwise).
    fn cut(&self, (code, message): (&str, &str)) -> Option<Vec<u8>> {
        let ended = match self {
            Rewrite::Envelope => return None,
            Rewrite::Chat(chat) => chat.ended(),
            Rewrite::ChatFromMessages(chat) => chat.ended(),
            Rewrite::ChatFromGemini(chat) => chat.ended(),
        };
        (!ended).then(|| {
            let mut out = Vec::new();
            write_event(&mut out, &crate::chat::stream::cut(code, message));
            out
        })
    }
}

/// Why a stream was cut before its answer was complete: the record's code, and what the client
/// is told.
fn cut_reason(stop: Stop) -> (&'static str, &'static str) {
    match stop {
        Stop::Unreadable => {
            ("upstream_event_too_large", "an upstream event was too large to read: the answer is incomplete")
        }
        Stop::Stalled => ("client_stalled", "the client stopped reading"),
        Stop::TimedOut => {
            ("request_timeout", "the request reached its deadline before the answer was complete")
        }
        Stop::IdleTimedOut => {
            ("stream_idle_timeout", "the upstream sent no event for longer than the stream idle timeout")
        }
        Stop::ShutDown => ("server_shutdown", "the server shut down before the answer was complete"),
        Stop::Broken => {
            ("upstream_stream_broken", "the upstream stream broke before the answer was complete")
        }
        Stop::Done => ("stream_ended_early", "the upstream stream ended before the answer was complete"),
    }
}

/// For a stream passed through as it came that ended before its answer did: the protocol's own
/// mid-stream error event, so the client does not take what it got for the whole answer (an
/// Anthropic SDK would otherwise keep a message with no `stop_reason` as final).
/// - Anthropic ends a failing stream with `event: error` (anthropic-python raises
///   `APIStatusError`, the TypeScript SDK an `APIError`); the cause is in `error.code`.
/// - The Responses API has an `error` event (`{type, code, message, param}`). Its code is
///   `server_error`, the cause in the message: a Codex that reads the event retries that code
///   (protocols.md 1b), where an unknown one would end the turn for good.
/// - A Gemini stream has no such event, and gets none.
///
/// A line left open by the cut is ended first, so that the notice's fields are fields: the
/// block then ends as an `error` event (the last `event:` wins), whose data an SDK cannot read
/// if part of another event's data came before it, which still fails the stream.
fn cut_notice(grammar: Grammar, mid_line: bool, (code, message): (&str, &str)) -> Option<Vec<u8>> {
    let data = match grammar {
        Grammar::Messages => crate::proxy::error::body(
            crate::proxy::error::Protocol::Anthropic,
            axum::http::StatusCode::BAD_GATEWAY,
            code,
            message,
            None,
        ),
        Grammar::Responses => serde_json::json!({"type": "error", "code": "server_error",
            "message": format!("{message} ({code})"), "param": null}),
        Grammar::Gemini => return None,
    };
    let mut out = Vec::new();
    if mid_line {
        out.push(b'\n');
    }
    out.extend_from_slice(b"event: error\n");
    write_event(&mut out, &data.to_string());
    Some(out)
}

/// What one upstream chunk gave.
struct Processed {
    /// What to forward: the chunk itself, or its rewritten events (none yet).
    out: Option<Bytes>,
    /// Whether it carried (some of) an event, not only keep-alives ([`Splitter::feed_counting`]).
    event: bool,
}

/// Watches a chunk and says what to forward.
fn process(
    bytes: Bytes,
    splitter: &mut Splitter,
    observer: &mut Observer,
    rewrite: &mut Option<Rewrite>,
    at: Duration,
) -> Processed {
    match rewrite {
        None => {
            let event = splitter.feed_counting(&bytes, |ev| observer.event(ev.name, &ev.data, at));
            Processed { out: Some(bytes), event }
        }
        Some(rewrite) => {
            let mut out = Vec::new();
            let event = splitter.feed_counting(&bytes, |ev| {
                observer.event(ev.name, &ev.data, at);
                rewrite.apply(&ev.data, |data| write_event(&mut out, data));
            });
            Processed { out: (!out.is_empty()).then(|| Bytes::from(out)), event }
        }
    }
}

/// Writes one SSE event carrying `data`: a `data:` field per line of it, as the SSE grammar
/// requires (a line break inside one field would end it there, and the client would read the
/// rest as a field of its own). Each line terminator the grammar knows (`\r\n`, `\n`, `\r`)
/// starts a new field, so the client reads `data` back with every line break as `\n`.
fn write_event(out: &mut Vec<u8>, data: &str) {
    let mut rest = data;
    loop {
        let (line, next) = match rest.find(['\n', '\r']) {
            None => (rest, None),
            Some(at) => {
                let len = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
                (&rest[..at], Some(&rest[at + len..]))
            }
        };
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
        match next {
            Some(next) => rest = next,
            None => break,
        }
    }
    out.push(b'\n');
}

/// How a relayed stream ended.
#[derive(Debug, Default)]
pub struct End {
    pub observation: Observation,
    /// The client left before the upstream finished.
    pub cancelled: bool,
    /// The upstream connection broke mid-stream.
    pub broken: bool,
    pub timed_out: bool,
    pub idle_timed_out: bool,
    /// Ended by server shutdown after the grace period.
    pub shut_down: bool,
    /// The client stopped reading: a send waited longer than the write deadline.
    pub stalled: bool,
    /// An event over the size cap went by unwatched (a rewritten stream had to end there).
    pub unreadable: bool,
}

/// What became of one send to the client.
enum Delivery {
    Sent,
    ClientGone,
    Stalled,
    TimedOut,
    ShutDown,
}

/// Why the relay loop stopped (at most one reason, so the ending's flags are built from it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The upstream finished, or the client left and there is nothing (more) to drain.
    Done,
    Broken,
    TimedOut,
    IdleTimedOut,
    ShutDown,
    Stalled,
    Unreadable,
}

/// Sends `bytes` to the client without ever blocking past the write deadline, the total deadline
/// or the hard stop. A queue with room takes it at once, without arming any timer; only a full
/// one (a client reading slower than the upstream writes) waits, in a boxed future, so that an
/// open stream's relay does not carry the room of two timers and a send it almost never needs.
async fn deliver(tx: &pipe::Sender, bytes: Bytes, timing: &Timing, hard_stop: &HardStop) -> Delivery {
    let bytes = match tx.try_send(bytes) {
        Ok(()) => return Delivery::Sent,
        Err(pipe::TrySendError::Closed(_)) => return Delivery::ClientGone,
        Err(pipe::TrySendError::Full(b)) => b,
    };
    Box::pin(async move {
        tokio::select! {
            biased;
            sent = tx.send(bytes) => if sent.is_ok() { Delivery::Sent } else { Delivery::ClientGone },
            () = hard_stop.hard_stop.cancelled() => Delivery::ShutDown,
            () = sleep_until(timing.deadline) => Delivery::TimedOut,
            () = tokio::time::sleep(timing.write_timeout) => Delivery::Stalled,
        }
    })
    .await
}

/// Prepares relaying `upstream`: returns the client's response body and the relay task, which
/// the caller spawns (on the tracker a shutdown waits for). `first` is a chunk already read from
/// the upstream (it is queued at once, so it leaves with the response headers). `on_end` runs
/// once when the relay stops, whoever stopped it.
///
/// The task lives as long as the stream, so its size is paid per open stream (performance goal
/// 3): it waits on one timer for the earliest of the total deadline, the drain window, the idle
/// timeout and the next heartbeat, and on one wait each for the client's leaving and the hard
/// stop, made once rather than anew for every chunk (which also armed and disarmed a timer per
/// chunk). The heartbeat had a timer of its own (tokio's `Interval`, which boxes its timer):
/// about 150 bytes more for every open stream.
pub fn relay<S, E, F, Fut>(
    mut upstream: S,
    first: Option<Bytes>,
    mut observer: Observer,
    timing: Timing,
    hard_stop: HardStop,
    mut rewrite: Option<Rewrite>,
    on_end: F,
) -> (Body, impl Future<Output = ()> + Send + 'static)
where
    S: futures_util::Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: Send + 'static,
    F: FnOnce(End) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (tx, rx) = pipe::pipe(16);
    let mut splitter = Splitter::default();
    // The idle time runs from the headers until a first chunk with an event in it.
    let mut last_upstream = timing.answered;
    if let Some(first) = first {
        let first = process(first, &mut splitter, &mut observer, &mut rewrite, timing.started.elapsed());
        if first.event {
            last_upstream = Instant::now();
        }
        if let Some(out) = first.out {
            let _ = tx.try_send(out); // a fresh queue always has room
        }
    }
    let task = async move {
        let mut client_gone: Option<Instant> = None;
        // What the client was last sent (a chunk or a heartbeat): the next heartbeat is due one
        // period after it.
        let mut last_sent = Instant::now();
        let mut left = std::pin::pin!(tx.closed());
        let mut stopped = std::pin::pin!(hard_stop.hard_stop.cancelled());
        let mut wake = std::pin::pin!(sleep_until(timing.deadline));
        let mut abandoned = false;
        let stop = loop {
            let drain_until = client_gone.zip(timing.drain_after_cancel).map(|(t, d)| t + d);
            let idle_until = timing.idle_timeout.map(|d| last_upstream + d);
            // A heartbeat goes only between the client's events, and never to a client that left.
            // A rewritten stream reaches the client in whole events, so only a stream passed as
            // it comes can be inside one (the upstream's).
            let between_events = rewrite.is_some() || splitter.at_boundary();
            let beat_at = timing
                .heartbeat
                .filter(|_| client_gone.is_none() && between_events)
                .map(|period| last_sent + period);
            let earliest =
                [drain_until, idle_until, beat_at].into_iter().flatten().fold(timing.deadline, Instant::min);
            if wake.deadline() != earliest {
                // Usually later (the idle timeout moving on): tokio then only notes the new time.
                wake.as_mut().reset(earliest);
            }
            let delivery = tokio::select! {
                biased;
                next = upstream.next() => match next {
                    Some(Ok(bytes)) => {
                        let Processed { out, event } =
                            process(bytes, &mut splitter, &mut observer, &mut rewrite, timing.started.elapsed());
                        if event {
                            // CD-6: the idle timeout counts upstream events only, so a stream
                            // kept alive in front of a stalled model is still cut.
                            last_upstream = Instant::now();
                        }
                        if rewrite.is_some() && splitter.overflowed() {
                            // A rewritten stream cannot skip an event it could not read.
                            break Stop::Unreadable;
                        }
                        match out.filter(|_| client_gone.is_none()) {
                            Some(out) => {
                                let delivery = deliver(&tx, out, &timing, &hard_stop).await;
                                // (after the send: one that waited for room was sent when it ended)
                                last_sent = Instant::now();
                                delivery
                            }
                            None => Delivery::Sent,
                        }
                    }
                    Some(Err(_)) => break Stop::Broken,
                    None => break Stop::Done,
                },
                () = &mut left, if client_gone.is_none() => Delivery::ClientGone,
                // `wake` is the earliest of the four. When several have passed by the time the
                // task runs, the first of these decides: the total deadline, the hard stop, the
                // drain window, the idle timeout, then the heartbeat (a stream that ends sends no
                // heartbeat due as it ends; with a timer of its own, one went first).
                () = &mut wake => {
                    let now = Instant::now();
                    if now >= timing.deadline {
                        break Stop::TimedOut;
                    } else if hard_stop.hard_stop.is_cancelled() {
                        break Stop::ShutDown;
                    } else if drain_until.is_some_and(|d| d <= now) {
                        break Stop::Done;
                    } else if idle_until.is_some_and(|d| d <= now) {
                        break Stop::IdleTimedOut;
                    }
                    // (the heartbeat's time, or the loop looks again)
                    if beat_at.is_some_and(|b| b <= now) {
                        let delivery = deliver(&tx, Bytes::from_static(HEARTBEAT), &timing, &hard_stop).await;
                        last_sent = Instant::now();
                        delivery
                    } else {
                        Delivery::Sent
                    }
                }
                () = &mut stopped => break Stop::ShutDown,
            };
            match delivery {
                Delivery::Sent => {}
                Delivery::ClientGone => {
                    client_gone.get_or_insert_with(Instant::now);
                }
                Delivery::Stalled => break Stop::Stalled,
                // (a send given up: what it held never reached the client)
                Delivery::TimedOut => {
                    abandoned = true;
                    break Stop::TimedOut;
                }
                Delivery::ShutDown => {
                    abandoned = true;
                    break Stop::ShutDown;
                }
            }
            if client_gone.is_some()
                && (timing.drain_after_cancel.is_none() || observer.seen.outcome.is_some())
            {
                break Stop::Done;
            }
        };
        // Dropping the upstream stream here closes (cancels) the upstream request.
        drop(upstream);
        // A client cannot tell a cut stream from a finished one by its end: it is told, in its
        // protocol, unless it left or stopped reading. A rewritten stream is sent whole events,
        // so it is told whenever its end did not come. A stream passed as it came is not told
        // when what it got may not line up with what was watched (a send given up; an event too
        // large to watch, which may have been the answer's end), nor when the answer's end was
        // seen. A client that reads slowly gets it after what it still has to read, the queue
        // full or not.
        if client_gone.is_none() && stop != Stop::Stalled {
            let why = cut_reason(stop);
            let notice = match &rewrite {
                Some(rewrite) => rewrite.cut(why),
                None if abandoned || splitter.overflowed() => None,
                None if observer.seen.outcome.is_none() && !observer.seen.answered => {
                    cut_notice(observer.grammar(), splitter.mid_line(), why)
                }
                None => None,
            };
            if let Some(notice) = notice {
                tx.send_last(Bytes::from(notice));
            }
        }
        let end = End {
            observation: observer.seen,
            cancelled: client_gone.is_some(),
            broken: stop == Stop::Broken,
            timed_out: stop == Stop::TimedOut,
            idle_timed_out: stop == Stop::IdleTimedOut,
            shut_down: stop == Stop::ShutDown,
            stalled: stop == Stop::Stalled,
            // An event too large to watch may have been the terminal one: say so rather than
            // calling the stream cut short (which would count against the model, CD-2).
            unreadable: stop == Stop::Unreadable || splitter.overflowed(),
        };
        // Boxed: the ending (the record and its hand-over) is larger than the whole relay loop,
        // and an inline future would make every open stream carry its size.
        Box::pin(on_end(end)).await;
    };
    (Body::new(rx), task)
}

#[cfg(test)]
mod tests {
    use std::{
        io,
        sync::{Arc, Mutex},
    };

    use futures_util::FutureExt as _;
    use tokio::sync::mpsc;

    use super::*;
    use crate::providers::Grammar;

    fn timing(drain: Option<Duration>) -> Timing {
        let now = Instant::now();
        Timing {
            started: now,
            heartbeat: Some(Duration::from_secs(10)),
            deadline: now + Duration::from_secs(1800),
            idle_timeout: None,
            answered: now,
            drain_after_cancel: drain,
            write_timeout: Duration::from_secs(60),
        }
    }

    type Ended = Arc<Mutex<Option<End>>>;

    fn capture() -> (Ended, impl FnOnce(End) -> std::future::Ready<()> + Send + 'static) {
        let slot: Ended = Arc::default();
        let s = slot.clone();
        (slot, move |e| {
            *s.lock().unwrap() = Some(e);
            std::future::ready(())
        })
    }

    /// An upstream the test feeds chunk by chunk.
    fn upstream()
    -> (mpsc::Sender<io::Result<Bytes>>, impl futures_util::Stream<Item = io::Result<Bytes>> + Unpin) {
        let (tx, rx) = mpsc::channel(16);
        (
            tx,
            Box::pin(futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
            )),
        )
    }

    /// Starts a relay without a first chunk or rewrite, its task on the runtime.
    fn start<S, F>(upstream: S, grammar: Grammar, timing: Timing, stop: HardStop, on_end: F) -> Body
    where
        S: futures_util::Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static,
        F: FnOnce(End) -> std::future::Ready<()> + Send + 'static,
    {
        let (body, task) = relay(upstream, None, Observer::new(grammar), timing, stop, None, on_end);
        tokio::spawn(task);
        body
    }

    /// Starts a relay that rewrites a Responses upstream for a Chat Completions client.
    fn start_chat<S, F>(upstream: S, on_end: F) -> axum::body::BodyDataStream
    where
        S: futures_util::Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static,
        F: FnOnce(End) -> std::future::Ready<()> + Send + 'static,
    {
        let chat = Rewrite::Chat(Box::new(crate::chat::stream::ChatStream::new("gpt-5.1", false)));
        let observer = Observer::new(Grammar::Responses);
        let (body, task) =
            relay(upstream, None, observer, timing(None), HardStop::default(), Some(chat), on_end);
        tokio::spawn(task);
        body.into_data_stream()
    }

    async fn next(body: &mut axum::body::BodyDataStream) -> Bytes {
        body.next().await.unwrap().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_pass_unchanged_and_heartbeats_fill_silence_between_events() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut body =
            start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end).into_data_stream();
        up.send(Ok(Bytes::from_static(b"event: response.created\ndata: {}\n\n"))).await.unwrap();
        assert_eq!(&next(&mut body).await[..], b"event: response.created\ndata: {}\n\n");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        // half an event: no heartbeat may be spliced into it
        up.send(Ok(Bytes::from_static(b"event: response.output_text.delta\ndata: {\"delta\":\"Hi\"}\n")))
            .await
            .unwrap();
        assert_eq!(
            &next(&mut body).await[..],
            b"event: response.output_text.delta\ndata: {\"delta\":\"Hi\"}\n"
        );
        tokio::time::advance(Duration::from_secs(25)).await;
        up.send(Ok(Bytes::from_static(b"\n"))).await.unwrap();
        assert_eq!(&next(&mut body).await[..], b"\n", "the event completes without a heartbeat inside");
        up.send(Ok(Bytes::from_static(
            b"event: response.completed\ndata: {\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        )))
        .await
        .unwrap();
        drop(up);
        let _ = next(&mut body).await;
        assert!(body.next().await.is_none());
        tokio::task::yield_now().await;
        let end = ended.lock().unwrap().take().unwrap();
        assert!(!end.cancelled && !end.broken);
        assert_eq!(end.observation.outcome, Some(crate::records::Outcome::Success));
        assert_eq!(end.observation.usage.input, Some(3));
        // the first delta was complete only when its blank line arrived, at t = 10 s + 25 s
        assert_eq!(end.observation.first_output, Some(Duration::from_secs(35)));
    }

    /// The client is told the stream was cut (a Responses `error` event naming `cause`), and then
    /// the stream ends.
    async fn assert_cut(body: &mut axum::body::BodyDataStream, cause: &str) {
        let notice = String::from_utf8(next(body).await.to_vec()).unwrap();
        assert!(notice.starts_with("event: error\n") && notice.contains(&format!("({cause})")), "{notice}");
        assert!(body.next().await.is_none(), "the notice ends the stream");
    }

    /// Everything the client is sent from here to the body's end, as text.
    async fn rest(body: &mut axum::body::BodyDataStream) -> String {
        let mut all = Vec::new();
        while let Some(chunk) = body.next().await {
            all.extend_from_slice(&chunk.unwrap());
        }
        String::from_utf8(all).unwrap()
    }

    /// Runs a relay of `chunks` (`None`: the connection breaks) in `grammar`, the upstream then
    /// ending or (if `silent`) going silent until the 10 s idle timeout: what the client got.
    async fn cut_after(grammar: Grammar, chunks: Vec<Option<&'static str>>, silent: bool) -> String {
        let (up, stream) = upstream();
        let (_ended, on_end) = capture();
        let timing = Timing { idle_timeout: Some(Duration::from_secs(10)), heartbeat: None, ..timing(None) };
        let mut body = start(stream, grammar, timing, HardStop::default(), on_end).into_data_stream();
        for chunk in chunks {
            let item =
                chunk.map(|c| Bytes::from_static(c.as_bytes())).ok_or_else(|| io::Error::other("reset"));
            up.send(item).await.unwrap();
        }
        if silent {
            let text = rest(&mut body).await;
            drop(up);
            return text;
        }
        drop(up);
        rest(&mut body).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_cut_before_its_terminal_event_ends_with_the_protocol_s_error_event() {
        const START: &str = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n";
        // Anthropic: broken mid-stream, the client gets an `error` event (api_error) after what came
        let got = cut_after(Grammar::Messages, vec![Some(START), None], false).await;
        let (before, notice) = got.split_once("event: error\n").expect(&got);
        assert_eq!(before, START);
        let data: serde_json::Value =
            serde_json::from_str(notice.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(data["type"], "error", "{data}");
        assert_eq!(data["error"]["type"], "api_error");
        assert_eq!(data["error"]["code"], "upstream_stream_broken");
        assert!(notice.ends_with("\n\n"), "a whole event: {notice:?}");
        // the Responses API: silent past the idle timeout
        let created = "event: response.created\ndata: {}\n\n";
        let got = cut_after(Grammar::Responses, vec![Some(created)], true).await;
        let notice = got.strip_prefix(created).unwrap();
        let data: serde_json::Value =
            serde_json::from_str(notice.strip_prefix("event: error\ndata: ").unwrap().trim_end()).unwrap();
        // (server_error: the code Codex retries; the cause is in the message)
        assert_eq!((data["type"].as_str(), data["code"].as_str()), (Some("error"), Some("server_error")));
        assert!(data["message"].as_str().unwrap().ends_with("(stream_idle_timeout)"), "{data}");
        // ended by the upstream without its terminal event
        let got = cut_after(Grammar::Responses, vec![Some(created)], false).await;
        assert!(got.contains("(stream_ended_early)"), "{got}");
        // cut inside a line: the line is ended before the notice's fields
        let half = "event: message_start\ndata: {\"type\":";
        let got = cut_after(Grammar::Messages, vec![Some(half), None], false).await;
        assert!(got.starts_with(&format!("{half}\nevent: error\ndata: ")), "{got:?}");
        let whole_line = "event: content_block_delta\n";
        let got = cut_after(Grammar::Messages, vec![Some(whole_line), None], false).await;
        assert!(got.starts_with(&format!("{whole_line}event: error\ndata: ")), "{got:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_stream_and_a_gemini_stream_get_no_notice() {
        let done = "event: message_start\ndata: {}\n\nevent: message_stop\ndata: {}\n\n";
        assert_eq!(cut_after(Grammar::Messages, vec![Some(done)], false).await, done);
        // an upstream error event is its own terminal event
        let failed = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n";
        assert_eq!(cut_after(Grammar::Messages, vec![Some(failed)], false).await, failed);
        let chunk = "data: {\"candidates\":[]}\n\n";
        assert_eq!(cut_after(Grammar::Gemini, vec![Some(chunk), None], false).await, chunk);
        // Anthropic's answer is whole once its stop_reason came: only message_stop was missing
        let ended = "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n";
        assert_eq!(cut_after(Grammar::Messages, vec![Some(ended), None], false).await, ended);
    }

    #[tokio::test(start_paused = true)]
    async fn a_forwarded_chunk_puts_the_next_heartbeat_a_period_after_it() {
        let (up, stream) = upstream();
        let (_ended, on_end) = capture();
        let t0 = Instant::now();
        let mut body =
            start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end).into_data_stream();
        tokio::task::yield_now().await; // the relay starts at t = 0
        tokio::time::advance(Duration::from_secs(6)).await;
        up.send(Ok(Bytes::from_static(b"event: response.created\ndata: {}\n\n"))).await.unwrap();
        assert_eq!(&next(&mut body).await[..], b"event: response.created\ndata: {}\n\n");
        tokio::time::advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
        assert!(body.next().now_or_never().is_none(), "no heartbeat 10 s after the start, 5 s after a chunk");
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        assert_eq!(Instant::now() - t0, Duration::from_secs(16), "10 s after the chunk");
        drop(up);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_without_a_heartbeat_sends_only_what_the_upstream_sends() {
        let (up, stream) = upstream();
        let (_ended, on_end) = capture();
        let t0 = Instant::now();
        let mut t = timing(None);
        t.heartbeat = None;
        let mut body = start(stream, Grammar::Gemini, t, HardStop::default(), on_end).into_data_stream();
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(35)).await;
        tokio::task::yield_now().await;
        up.send(Ok(Bytes::from_static(b"data: {}\n\n"))).await.unwrap();
        assert_eq!(&next(&mut body).await[..], b"data: {}\n\n", "nothing before it");
        assert_eq!(Instant::now() - t0, Duration::from_secs(35));
        drop(up);
        assert!(body.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_timeout_ends_a_stream_before_a_heartbeat_due_at_the_same_time() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut t = timing(None);
        t.idle_timeout = Some(Duration::from_secs(20));
        let mut body = start(stream, Grammar::Responses, t, HardStop::default(), on_end).into_data_stream();
        assert_eq!(&next(&mut body).await[..], HEARTBEAT, "at 10 s");
        assert_cut(&mut body, "stream_idle_timeout").await; // at 20 s, without the heartbeat due then
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().idle_timed_out);
        drop(up);
    }

    /// Queues 16 whole events at t = 0 to a client that does not read them: the relay's queue
    /// to it is full.
    async fn fill_the_queue(up: &mpsc::Sender<io::Result<Bytes>>) {
        for _ in 0..16 {
            up.send(Ok(Bytes::from_static(b"data: {}\n\n"))).await.unwrap();
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_client_is_told_of_a_cut_after_what_it_still_has_to_read() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut body =
            start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end).into_data_stream();
        fill_the_queue(&up).await;
        up.send(Err(io::Error::other("connection reset"))).await.unwrap();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().broken, "the relay ended with the queue full");
        for _ in 0..16 {
            assert_eq!(&next(&mut body).await[..], b"data: {}\n\n");
        }
        assert_cut(&mut body, "upstream_stream_broken").await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_into_a_full_queue_waits_for_room_and_the_next_is_a_period_after_it_went() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let t0 = Instant::now();
        let mut body =
            start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end).into_data_stream();
        fill_the_queue(&up).await;
        // the heartbeat falls due at 10 s and waits; the client reads everything at 30 s
        tokio::time::advance(Duration::from_secs(10)).await;
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(20)).await;
        for _ in 0..16 {
            assert_eq!(&next(&mut body).await[..], b"data: {}\n\n");
        }
        assert_eq!(&next(&mut body).await[..], HEARTBEAT, "the waiting heartbeat, after the events");
        tokio::task::yield_now().await;
        assert!(body.next().now_or_never().is_none(), "none again at once");
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        assert_eq!(Instant::now() - t0, Duration::from_secs(40), "a period after the last one went");
        assert!(ended.lock().unwrap().is_none());
        drop(up);
    }

    #[tokio::test(start_paused = true)]
    async fn a_chunk_that_waited_for_room_puts_the_next_heartbeat_a_period_after_it_went() {
        let (up, stream) = upstream();
        let (_ended, on_end) = capture();
        let t0 = Instant::now();
        let mut body =
            start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end).into_data_stream();
        fill_the_queue(&up).await;
        // a 17th event at 5 s waits for room; the client reads everything at 30 s
        tokio::time::advance(Duration::from_secs(5)).await;
        up.send(Ok(Bytes::from_static(b"data: {}\n\n"))).await.unwrap();
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(25)).await;
        for _ in 0..17 {
            assert_eq!(&next(&mut body).await[..], b"data: {}\n\n");
        }
        tokio::task::yield_now().await;
        assert!(body.next().now_or_never().is_none(), "no heartbeat at once");
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        assert_eq!(Instant::now() - t0, Duration::from_secs(40));
        drop(up);
    }

    /// A relay with a 30 s idle timeout whose 17th event, at 5 s, waits for room until the client
    /// reads everything at 45 s; `meanwhile` runs at 40 s. Returns the body, its ending and the
    /// upstream's sender (kept: dropping it would end the stream as finished).
    async fn a_send_waits_from_5_to_45_s(
        meanwhile: impl FnOnce(&mpsc::Sender<io::Result<Bytes>>),
    ) -> (axum::body::BodyDataStream, Ended, mpsc::Sender<io::Result<Bytes>>) {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut t = timing(None);
        t.idle_timeout = Some(Duration::from_secs(30));
        let mut body = start(stream, Grammar::Responses, t, HardStop::default(), on_end).into_data_stream();
        fill_the_queue(&up).await;
        tokio::time::advance(Duration::from_secs(5)).await;
        up.send(Ok(Bytes::from_static(b"data: {}\n\n"))).await.unwrap();
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(35)).await;
        meanwhile(&up);
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..17 {
            assert_eq!(&next(&mut body).await[..], b"data: {}\n\n");
        }
        (body, ended, up)
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_timeout_counts_upstream_silence_while_a_send_waits_for_a_slow_client() {
        // The upstream sent nothing from 5 s: once the send is done, at 45 s, it has been silent
        // for longer than 30 s, whatever the relay was doing meanwhile (CD-6).
        let t0 = Instant::now();
        let (mut body, ended, _up) = a_send_waits_from_5_to_45_s(|_| {}).await;
        assert_cut(&mut body, "stream_idle_timeout").await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(45));
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().idle_timed_out);
    }

    #[tokio::test(start_paused = true)]
    async fn what_the_upstream_sent_while_a_send_waited_is_read_before_the_idle_timeout_is_looked_at() {
        // An event sent at 40 s waits, unread, until the send is done: it is read first, and the
        // silence counts from then (a heartbeat at 55 s and 65 s, the end at 75 s).
        let t0 = Instant::now();
        let (mut body, ended, _up) = a_send_waits_from_5_to_45_s(|up| {
            up.try_send(Ok(Bytes::from_static(b"data: {\"late\":1}\n\n"))).unwrap();
        })
        .await;
        assert_eq!(&next(&mut body).await[..], b"data: {\"late\":1}\n\n");
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        assert_cut(&mut body, "stream_idle_timeout").await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(75));
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().idle_timed_out);
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_to_a_client_that_never_reads_ends_the_stream_at_the_write_deadline() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let body = start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end);
        fill_the_queue(&up).await;
        // the heartbeat falls due at 10 s; its send may wait 60 s
        tokio::time::advance(Duration::from_secs(10)).await;
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_millis(59_900)).await;
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().is_none(), "still waiting for room");
        tokio::time::advance(Duration::from_millis(100)).await;
        tokio::time::timeout(Duration::from_secs(1), up.closed()).await.expect("the upstream is dropped");
        tokio::task::yield_now().await;
        let end = ended.lock().unwrap().take().unwrap();
        assert!(end.stalled && !end.timed_out);
        drop(body);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rewritten_stream_gets_heartbeats_while_an_upstream_event_is_half_read() {
        // The client of a rewritten stream (here a Chat Completions client of a Responses
        // upstream) is sent whole events only: half an upstream event leaves it between two,
        // where a heartbeat may go.
        let (up, stream) = upstream();
        let (_ended, on_end) = capture();
        let t0 = Instant::now();
        let mut body = start_chat(stream, on_end);
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(5)).await;
        up.send(Ok(Bytes::from_static(b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n")))
            .await
            .unwrap();
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        assert_eq!(Instant::now() - t0, Duration::from_secs(10));
        up.send(Ok(Bytes::from_static(b"\n"))).await.unwrap();
        let chunk = next(&mut body).await;
        assert!(chunk.starts_with(b"data: ") && chunk.ends_with(b"\n\n"), "{chunk:?}");
        assert!(String::from_utf8_lossy(&chunk).contains("Hi"), "{chunk:?}");
        drop(up);
    }

    /// A rewritten stream cannot skip an event too large to read: it ends there, and its client
    /// is told so in its own protocol (a Chat Completions error object, no `[DONE]`).
    #[tokio::test(start_paused = true)]
    async fn a_rewritten_stream_cut_by_an_event_too_large_to_read_is_told() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut body = start_chat(stream, on_end);
        let mut huge = b"event: response.output_text.delta\ndata: ".to_vec();
        huge.resize(crate::providers::sse::MAX_EVENT_BYTES + 1024, b'x');
        up.send(Ok(Bytes::from(huge))).await.unwrap();
        let got = rest(&mut body).await;
        let data = got.strip_prefix("data: ").and_then(|d| d.strip_suffix("\n\n")).expect(&got);
        let error: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(error["error"]["code"], "upstream_event_too_large", "{error}");
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().unreadable);
        drop(up);
    }

    #[tokio::test(start_paused = true)]
    async fn client_disconnect_cancels_upstream_at_once_without_drain() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let body = start(stream, Grammar::Responses, timing(None), HardStop::default(), on_end);
        up.send(Ok(Bytes::from_static(b"event: response.created\ndata: {}\n\n"))).await.unwrap();
        drop(body);
        tokio::time::timeout(Duration::from_secs(1), up.closed()).await.expect("upstream dropped promptly");
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().as_ref().unwrap().cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn codex_drain_keeps_reading_for_usage_up_to_its_window() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let body = start(
            stream,
            Grammar::Responses,
            timing(Some(Duration::from_secs(3))),
            HardStop::default(),
            on_end,
        );
        drop(body);
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(2)).await;
        up.send(Ok(Bytes::from_static(
            b"event: response.completed\ndata: {\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":9,\"output_tokens\":4}}}\n\n",
        )))
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(1), up.closed())
            .await
            .expect("relay stops once usage is in");
        tokio::task::yield_now().await;
        let end = ended.lock().unwrap().take().unwrap();
        assert!(end.cancelled);
        assert_eq!(end.observation.usage.output, Some(4), "usage collected after the client left");

        // nothing arrives: the drain window closes after 3 s
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        drop(start(
            stream,
            Grammar::Responses,
            timing(Some(Duration::from_secs(3))),
            HardStop::default(),
            on_end,
        ));
        tokio::task::yield_now().await; // the relay notices the client is gone at t = 0
        tokio::time::advance(Duration::from_millis(2_900)).await;
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().is_none(), "still draining before 3 s");
        tokio::time::advance(Duration::from_millis(200)).await;
        tokio::time::timeout(Duration::from_secs(1), up.closed())
            .await
            .expect("upstream dropped after the window");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_counts_upstream_silence_not_heartbeats() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut t = timing(None);
        t.idle_timeout = Some(Duration::from_secs(25));
        let mut body = start(stream, Grammar::Responses, t, HardStop::default(), on_end).into_data_stream();
        // (the relay runs at 0 s: its first heartbeat is due at 10 s, its idle end at 25 s)
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(&next(&mut body).await[..], HEARTBEAT);
        tokio::time::advance(Duration::from_secs(6)).await;
        while body.next().await.is_some() {}
        tokio::task::yield_now().await;
        let end = ended.lock().unwrap().take().unwrap();
        assert!(end.idle_timed_out, "25 s without an upstream event, heartbeats notwithstanding");
        drop(up);
    }

    /// A relay with a 25 s idle timeout fed `chunks` (each after its number of seconds), each
    /// passed on to the client as it came; returns when the relay has ended, and how.
    async fn idle_relay(chunks: &[(u64, &'static [u8])]) -> End {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut t = timing(None);
        t.idle_timeout = Some(Duration::from_secs(25));
        let mut body = start(stream, Grammar::Messages, t, HardStop::default(), on_end).into_data_stream();
        for &(after, chunk) in chunks {
            // (a second at a time: the relay sees each second pass, not only the chunk)
            for _ in 0..after {
                tokio::time::advance(Duration::from_secs(1)).await;
            }
            up.send(Ok(Bytes::from_static(chunk))).await.unwrap();
            assert_eq!(&next(&mut body).await[..], chunk);
        }
        while body.next().await.is_some() {}
        tokio::task::yield_now().await;
        drop(up);
        ended.lock().unwrap().take().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_counts_upstream_events_not_the_upstream_s_keep_alives() {
        // An event at 0 s, then only keep-alives: comments at 8 s and 16 s, a `ping` event
        // (Anthropic's) at 20 s, a `keepalive` (OpenAI's) at 21 s, a blank line and the start of
        // a comment at 22 s. The stream ends 25 s after the event (CD-6).
        let t0 = Instant::now();
        let end = idle_relay(&[
            (0, b"event: message_start\ndata: {}\n\n"),
            (8, b": keep-alive\n\n"),
            (8, b": keep-alive\n\n"),
            (4, b"event: ping\ndata: {\"type\": \"ping\"}\n\n"),
            (1, b"event: keepalive\ndata: {\"type\":\"keepalive\",\"sequence_number\":3}\n\n"),
            (1, b"\n: keep"),
        ])
        .await;
        assert!(end.idle_timed_out);
        assert_eq!(Instant::now() - t0, Duration::from_secs(25));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_time_runs_from_the_headers_until_a_first_chunk_with_an_event() {
        // Headers at 0 s, then a first chunk at 20 s: a keep-alive leaves the idle time running
        // from the headers (the end at 25 s), an event starts it afresh (the end at 45 s).
        for (chunk, ends_at) in [(&b": keep-alive\n\n"[..], 25), (b"event: message_start\ndata: {}\n\n", 45)]
        {
            let t0 = Instant::now();
            let mut t = timing(None);
            t.idle_timeout = Some(Duration::from_secs(25));
            for _ in 0..20 {
                tokio::time::advance(Duration::from_secs(1)).await;
            }
            let (up, stream) = upstream();
            let (ended, on_end) = capture();
            let first = Some(Bytes::from_static(chunk));
            let (body, task) =
                relay(stream, first, Observer::new(Grammar::Messages), t, HardStop::default(), None, on_end);
            tokio::spawn(task);
            let mut body = body.into_data_stream();
            while body.next().await.is_some() {}
            tokio::task::yield_now().await;
            assert!(ended.lock().unwrap().take().unwrap().idle_timed_out);
            assert_eq!(Instant::now() - t0, Duration::from_secs(ends_at), "{chunk:?}");
            drop(up);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_arriving_slowly_counts_as_it_comes() {
        // One event in four parts, 10 s apart: the upstream is sending it, so the stream is not
        // idle until 25 s after its last part (at 30 s).
        let t0 = Instant::now();
        let end = idle_relay(&[
            (0, b"event: content_block_delta\ndata: {\"a\":"),
            (10, b" \"long\""),
            (10, b", \"b\": 1"),
            (10, b"}\n\n"),
        ])
        .await;
        assert!(end.idle_timed_out);
        assert_eq!(Instant::now() - t0, Duration::from_secs(55));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_after_grace_ends_the_stream_and_reports_it() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let stop = HardStop::default();
        let mut body =
            start(stream, Grammar::Responses, timing(None), stop.clone(), on_end).into_data_stream();
        stop.hard_stop.cancel();
        while body.next().await.is_some() {}
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().shut_down);
        tokio::time::timeout(Duration::from_secs(1), up.closed()).await.expect("upstream dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn total_deadline_and_truncated_upstream_end_the_relay() {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut t = timing(None);
        t.deadline = t.started + Duration::from_secs(60);
        let mut body = start(stream, Grammar::Responses, t, HardStop::default(), on_end).into_data_stream();
        tokio::time::advance(Duration::from_secs(61)).await;
        while body.next().await.is_some() {}
        tokio::task::yield_now().await;
        assert!(ended.lock().unwrap().take().unwrap().timed_out);
        drop(up);

        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let mut body =
            start(stream, Grammar::Messages, timing(None), HardStop::default(), on_end).into_data_stream();
        // the upstream closes after a partial answer: no terminal event, so not a success
        up.send(Ok(Bytes::from_static(b"event: message_start\ndata: {}\n\n"))).await.unwrap();
        drop(up);
        while body.next().await.is_some() {}
        tokio::task::yield_now().await;
        let end = ended.lock().unwrap().take().unwrap();
        assert_eq!(end.observation.outcome, None, "no terminal event seen");
    }

    /// A relay whose client never reads: `stop` ends it by one of the three deadlines while its
    /// send to the client is blocked.
    async fn blocked_send_then(stop: impl FnOnce(&HardStop) -> Duration, deadline: Duration) -> End {
        let (up, stream) = upstream();
        let (ended, on_end) = capture();
        let hard_stop = HardStop::default();
        let mut t = timing(None);
        t.deadline = t.started + deadline;
        t.write_timeout = Duration::from_secs(60);
        let body = start(stream, Grammar::Responses, t, hard_stop.clone(), on_end);
        // The body is kept but never read: the relay's queue fills and its next send blocks.
        for _ in 0..40 {
            let _ = up.try_send(Ok(Bytes::from_static(b"data: {}\n\n")));
            tokio::task::yield_now().await;
        }
        assert!(ended.lock().unwrap().is_none(), "blocked, not ended");
        let wait = stop(&hard_stop);
        tokio::time::advance(wait).await;
        tokio::time::timeout(Duration::from_secs(1), up.closed()).await.expect("the upstream is dropped");
        tokio::task::yield_now().await;
        drop(body);
        ended.lock().unwrap().take().expect("the end is reported")
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_ends_the_stream_at_the_write_deadline() {
        let end = blocked_send_then(|_| Duration::from_secs(61), Duration::from_secs(1800)).await;
        assert!(end.stalled && !end.timed_out && !end.shut_down);
    }

    #[tokio::test(start_paused = true)]
    async fn the_hard_stop_and_the_total_deadline_fire_while_a_send_is_blocked() {
        let end = blocked_send_then(
            |stop| {
                stop.hard_stop.cancel();
                Duration::ZERO
            },
            Duration::from_secs(1800),
        )
        .await;
        assert!(end.shut_down && !end.stalled);
        let end = blocked_send_then(|_| Duration::from_secs(11), Duration::from_secs(10)).await;
        assert!(end.timed_out && !end.stalled);
    }

    /// What an SSE client reads from `bytes`: each event's data.
    fn read_events(bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        Splitter::default().feed(bytes, |ev| events.push(ev.data.into_owned()));
        events
    }

    #[test]
    fn a_rewritten_event_over_several_lines_reaches_the_client_whole() {
        // An Antigravity event without a `response` passes as it came, but on one line: here an
        // error written over several lines, which must reach the client whole, as one document
        // on one `data:` line (google-genai's clients parse each line as a document).
        let upstream = "data: {\ndata:   \"error\": {\"code\": 429}\ndata: }\n\n";
        let mut rewrite = Some(Rewrite::Envelope);
        let out = process(
            Bytes::from_static(upstream.as_bytes()),
            &mut Splitter::default(),
            &mut Observer::new(Grammar::Gemini),
            &mut rewrite,
            Duration::ZERO,
        )
        .out
        .unwrap();
        assert_eq!(&out[..], b"data: {   \"error\": {\"code\": 429} }\n\n");
        let events = read_events(&out);
        assert_eq!(events.len(), 1);
        let error: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(error["error"]["code"], 429);

        // Data with line breaks of its own (the Chat transforms' error object could carry one)
        // is still one event: a field per line.
        for data in ["", "one", "a\nb", "a\r\nb", "a\rb", "\n", "a\n\nb\n", "\r\r\n"] {
            let mut out = Vec::new();
            write_event(&mut out, data);
            let lines = data.replace("\r\n", "\n").replace('\r', "\n");
            assert_eq!(read_events(&out), [lines], "{data:?} as {:?}", String::from_utf8_lossy(&out));
            assert!(out.ends_with(b"\n\n") && !out[..out.len() - 1].windows(2).any(|w| w == b"\n\n"));
            assert!(!out.contains(&b'\r'), "{data:?}");
        }
    }
}
