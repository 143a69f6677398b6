//! Reading an upstream's stream whole, for a client that did not ask to stream from an upstream
//! that only streams (Codex): under the rules a relayed stream keeps (CD-6). Its first byte comes
//! within the header timeout, it goes no longer without an upstream event than the idle timeout
//! when one is set (keep-alives do not count), and all of it within the request's deadline, so
//! that a stalled model does not hold a non-streaming call and its slots until the deadline.

use std::time::Duration;

use axum::body::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use crate::providers::sse::{Event, Splitter};

/// The timing rules of a stream read whole.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules {
    /// CD-6: the total request deadline.
    pub deadline: Instant,
    /// CD-6: the inference response-header timeout, which also bounds the first byte.
    pub header_timeout: Duration,
    /// CD-6: the stream idle timeout, counting upstream events only.
    pub idle: Option<Duration>,
}

/// How reading a stream whole ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Collected {
    /// The upstream ended it.
    Ended,
    /// The connection broke.
    Broken,
    /// A timeout ran out first; the record's code says which.
    Cut(&'static str),
}

/// How long a stream's first chunk may take after the upstream's headers, and the record's code
/// when it does not come: the stream idle timeout (CD-6) runs from the headers, and the header
/// timeout bounds the first byte whichever is set.
fn first_chunk_wait(idle: Option<Duration>, header_timeout: Duration) -> (Duration, &'static str) {
    match idle {
        Some(idle) if idle <= header_timeout => (idle, "stream_idle_timeout"),
        _ => (header_timeout, "upstream_timeout"),
    }
}

impl Rules {
    /// When a stream whose headers came at `answered` is cut if no byte comes, and the record's
    /// code then (the relay waits for a first chunk by this rule too).
    pub(super) fn first_cut(&self, answered: Instant) -> (Instant, &'static str) {
        self.cut(true, answered, answered)
    }

    /// When the read is cut if nothing comes, and the record's code then: before the first chunk
    /// the first-byte rule, after it the idle timeout from the last event (from the headers until
    /// the first event), and the deadline when it comes first (or at the same time).
    fn cut(&self, first: bool, answered: Instant, quiet_since: Instant) -> (Instant, &'static str) {
        let cut = if first {
            let (wait, code) = first_chunk_wait(self.idle, self.header_timeout);
            Some((answered + wait, code))
        } else {
            self.idle.map(|idle| (quiet_since + idle, "stream_idle_timeout"))
        };
        cut.filter(|(by, _)| *by < self.deadline).unwrap_or((self.deadline, "request_timeout"))
    }
}

/// Reads `stream` to its end under `rules`, counted from `answered` (when its headers came),
/// feeding each chunk to `splitter` and each event it completes to `on_event` with the time its
/// chunk came. One timer for the whole read, moved only when the cut moves.
pub(super) async fn read<S, E>(
    stream: &mut S,
    splitter: &mut Splitter,
    answered: Instant,
    rules: Rules,
    mut on_event: impl FnMut(Event<'_>, Instant),
) -> Collected
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let mut first = true;
    let mut quiet_since = answered;
    let (mut by, mut code) = rules.cut(first, answered, quiet_since);
    let wake = tokio::time::sleep_until(by);
    tokio::pin!(wake);
    loop {
        // (biased to the upstream: what it sent while the timer ran out is read first, as the
        // relay does)
        let next = tokio::select! {
            biased;
            next = stream.next() => next,
            () = &mut wake => return Collected::Cut(code),
        };
        let chunk = match next {
            None => return Collected::Ended,
            Some(Err(_)) => return Collected::Broken,
            Some(Ok(chunk)) => chunk,
        };
        first = false;
        let now = Instant::now();
        if splitter.feed_counting(&chunk, |ev| on_event(ev, now)) {
            quiet_since = now;
        }
        let next_cut = rules.cut(first, answered, quiet_since);
        if next_cut.0 != by {
            wake.as_mut().reset(next_cut.0);
        }
        (by, code) = next_cut;
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use tokio::sync::mpsc;

    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    /// What the upstream does after its headers: a chunk after a wait, or a break.
    enum Step {
        After(Duration, &'static str),
        Break(Duration),
    }

    /// Reads an upstream that plays `steps` and then stays silent (or ends, if `ends`), with a
    /// 5 min header timeout and a 30 min deadline: how it ended, and when.
    async fn play(idle: Option<Duration>, steps: Vec<Step>, ends: bool) -> (Collected, Duration) {
        let answered = Instant::now();
        let rules = Rules { deadline: answered + 30 * MIN, header_timeout: 5 * MIN, idle };
        let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(16);
        tokio::spawn(async move {
            for step in steps {
                let (wait, item) = match step {
                    Step::After(wait, text) => (wait, Ok(Bytes::from_static(text.as_bytes()))),
                    Step::Break(wait) => (wait, Err(io::Error::other("reset"))),
                };
                tokio::time::sleep(wait).await;
                if tx.send(item).await.is_err() {
                    return;
                }
            }
            if !ends {
                // (silent, the connection kept open)
                std::future::pending::<()>().await;
            }
        });
        let mut stream =
            Box::pin(futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
            ));
        let how = read(&mut stream, &mut Splitter::default(), answered, rules, |_, _| {}).await;
        (how, answered.elapsed())
    }

    const EVENT: &str = "event: response.output_text.delta\ndata: {}\n\n";
    const COMMENT: &str = ": keep-alive\n\n";
    const PING: &str = "event: ping\ndata: {\"type\":\"ping\"}\n\n";

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_idle_timeout_the_first_byte_has_the_header_timeout_and_then_the_deadline_holds() {
        assert_eq!(play(None, vec![], false).await, (Collected::Cut("upstream_timeout"), 5 * MIN));
        // a first byte at 4 min, then silence: only the deadline ends it
        let steps = vec![Step::After(4 * MIN, EVENT)];
        assert_eq!(play(None, steps, false).await, (Collected::Cut("request_timeout"), 30 * MIN));
        // a keep-alive is a first byte too
        let steps = vec![Step::After(4 * MIN, COMMENT)];
        assert_eq!(play(None, steps, false).await, (Collected::Cut("request_timeout"), 30 * MIN));
        let steps = vec![Step::After(secs(1), EVENT), Step::After(20 * MIN, EVENT)];
        assert_eq!(play(None, steps, true).await, (Collected::Ended, secs(1) + 20 * MIN));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_timeout_runs_from_the_headers_and_counts_events_only() {
        let idle = Some(secs(10));
        assert_eq!(play(idle, vec![], false).await, (Collected::Cut("stream_idle_timeout"), secs(10)));
        // keep-alives (a comment, Anthropic's ping) do not move it: cut 10 s after the headers
        let steps = vec![Step::After(secs(4), COMMENT), Step::After(secs(4), PING)];
        assert_eq!(play(idle, steps, false).await, (Collected::Cut("stream_idle_timeout"), secs(10)));
        // events do: cut 10 s after the last one
        let steps =
            vec![Step::After(secs(8), EVENT), Step::After(secs(8), EVENT), Step::After(secs(8), COMMENT)];
        assert_eq!(play(idle, steps, false).await, (Collected::Cut("stream_idle_timeout"), secs(26)));
        // part of an event counts as it comes
        let steps =
            vec![Step::After(secs(8), "event: response.completed\n"), Step::After(secs(8), "data: {}\n\n")];
        assert_eq!(play(idle, steps, true).await, (Collected::Ended, secs(16)));
        let steps = vec![Step::After(secs(8), EVENT), Step::Break(secs(1))];
        assert_eq!(play(idle, steps, false).await, (Collected::Broken, secs(9)));
    }

    #[tokio::test(start_paused = true)]
    async fn each_event_is_handed_on_with_the_time_its_chunk_came() {
        let answered = Instant::now();
        let rules = Rules { deadline: answered + 30 * MIN, header_timeout: 5 * MIN, idle: None };
        let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
        tokio::spawn(async move {
            tokio::time::sleep(secs(3)).await;
            let two = format!("{EVENT}{COMMENT}{PING}");
            tx.send(Ok(Bytes::from(two))).await.unwrap();
            tokio::time::sleep(secs(4)).await;
            tx.send(Ok(Bytes::from_static(EVENT.as_bytes()))).await.unwrap();
        });
        let mut stream =
            Box::pin(futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
            ));
        let mut seen = Vec::new();
        let how = read(&mut stream, &mut Splitter::default(), answered, rules, |ev, came| {
            seen.push((ev.name.map(str::to_owned), came - answered));
        })
        .await;
        assert_eq!(how, Collected::Ended);
        let delta = Some("response.output_text.delta".to_owned());
        let ping = Some("ping".to_owned());
        assert_eq!(seen, [(delta.clone(), secs(3)), (ping, secs(3)), (delta, secs(7))]);
    }

    /// What the upstream sent while the cut's time passed is read before the timer is looked at.
    #[tokio::test(start_paused = true)]
    async fn what_came_before_the_cut_is_read_first() {
        let answered = Instant::now();
        tokio::time::advance(secs(20)).await;
        let rules = Rules { deadline: answered + 30 * MIN, header_timeout: 5 * MIN, idle: Some(secs(10)) };
        let mut stream =
            futures_util::stream::iter([Ok::<_, io::Error>(Bytes::from_static(EVENT.as_bytes()))]);
        let how = read(&mut stream, &mut Splitter::default(), answered, rules, |_, _| {}).await;
        assert_eq!(how, Collected::Ended);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_timeout_longer_than_the_header_timeout_or_the_deadline_gives_way_to_them() {
        let idle = Some(10 * MIN);
        assert_eq!(play(idle, vec![], false).await, (Collected::Cut("upstream_timeout"), 5 * MIN));
        let steps = vec![Step::After(MIN, EVENT)];
        assert_eq!(play(idle, steps, false).await, (Collected::Cut("stream_idle_timeout"), 11 * MIN));
        // a first chunk that is a keep-alive: the idle time still runs from the headers
        let steps = vec![Step::After(MIN, COMMENT)];
        assert_eq!(play(idle, steps, false).await, (Collected::Cut("stream_idle_timeout"), 10 * MIN));
        // an idle timeout as long as the header timeout: both run out together, the idle one says why
        let steps = vec![Step::After(25 * MIN, EVENT)];
        assert_eq!(play(Some(5 * MIN), steps, false).await, (Collected::Cut("stream_idle_timeout"), 5 * MIN));
        let steps = vec![Step::After(MIN, EVENT), Step::After(MIN, EVENT)];
        assert_eq!(play(Some(40 * MIN), steps, false).await, (Collected::Cut("request_timeout"), 30 * MIN));
        // the idle time and the deadline at the same instant: the deadline says why
        let steps =
            vec![Step::After(4 * MIN, EVENT), Step::After(8 * MIN, EVENT), Step::After(8 * MIN, EVENT)];
        assert_eq!(play(Some(10 * MIN), steps, false).await, (Collected::Cut("request_timeout"), 30 * MIN));
    }
}
