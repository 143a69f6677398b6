//! One authenticated model attempt (REC-1, REC-2, REC-9, ADM-8): the request id, who asks, the
//! slots it holds and the account lease, recorded exactly once by one of its consuming methods.
//!
//! Every path of the proxy (HTTP calls, WebSocket turns, retries, account switches) builds an
//! [`Attempt`] once the caller is authenticated and admitted, and ends it with
//! [`Attempt::finish`] or [`Attempt::fail`]; the slots go back only after the record is queued.
//! An attempt dropped unfinished (the client went away, or the shutdown hard stop cut its
//! request) is still recorded, as `cancelled`; only [`Attempt::discard`] (WebSocket warm-ups,
//! which REC-1 leaves unrecorded) ends one without a record.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use app::model::Provider;
use axum::response::Response;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::error::{GatewayError, Protocol};
use crate::{
    app_state::AppState,
    keys::Principal,
    records::{NewRecord, Outcome, Usage, bounded_model},
    scheduler::{
        Lease, RoutingDecision, Verdict,
        admission::{MemberSlot, WorkspaceSlot},
    },
};

/// A server-generated request id (REC-9); client-supplied ids are ignored. The first 12 hex
/// digits are the time in milliseconds (`now_ms`), the other 20 random (80 bits): ids made later
/// sort later, and ids made in the same millisecond differ by chance alone, one in 2^80. That is
/// what keeps them unique: the records table keeps no index on them (migration 0011).
pub fn new_request_id(now_ms: i64) -> String {
    let ms = u64::try_from(now_ms).unwrap_or(0) & 0xffff_ffff_ffff;
    let id = (u128::from(ms) << 80) | (rand::random::<u128>() >> 48);
    // Written digit by digit: `format!` with widths cost more than the rest of the call's own
    // header work.
    let mut s = String::with_capacity(36);
    s.push_str("req_");
    s.extend((0..32).rev().map(|i| char::from(b"0123456789abcdef"[((id >> (4 * i)) & 0xf) as usize])));
    s
}

/// When a call began, by both clocks, each read once: the monotonic one times the call, the
/// wall clock makes its request id, dates its record and checks its key's circuit breaker.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    pub at: Instant,
    pub unix_ms: i64,
}

impl Start {
    pub fn now(clock: &dyn crate::clock::Clock) -> Self {
        Start { at: Instant::now(), unix_ms: clock.unix_ms() }
    }
}

/// Where a call's time went (BEY-4): in a pool's queue and on its upstream, the rest being the
/// gateway's own. Shared by the handler, which reports it in the answer's headers, and the
/// attempt, whose scheduling and upstream calls add to it.
#[derive(Debug, Default)]
pub struct Stopwatch {
    queue_us: AtomicU64,
    upstream_us: AtomicU64,
}

impl Stopwatch {
    pub fn queued(&self, waited: Duration) {
        self.queue_us.fetch_add(micros(waited), Ordering::Relaxed);
    }

    pub fn upstream(&self, waited: Duration) {
        self.upstream_us.fetch_add(micros(waited), Ordering::Relaxed);
    }

    /// Time spent waiting in queues so far.
    pub fn queue(&self) -> Duration {
        Duration::from_micros(self.queue_us.load(Ordering::Relaxed))
    }

    /// Time spent waiting on upstreams so far.
    pub fn upstream_total(&self) -> Duration {
        Duration::from_micros(self.upstream_us.load(Ordering::Relaxed))
    }

    /// Times `f` as upstream time: from the end of its first poll, if that poll leaves it
    /// waiting, to its end. The first poll's own work (building and queuing the request, copying
    /// a body already in) is the gateway's; a future done at its first poll (a token at hand)
    /// waited on nothing, and reads no clock.
    pub fn on_upstream<F: Future>(&self, f: F) -> OnUpstream<'_, F> {
        OnUpstream { f, watch: self, start: None }
    }
}

pin_project_lite::pin_project! {
    /// [`Stopwatch::on_upstream`]'s future. A combinator rather than an `async fn`: an `async fn`
    /// keeps its future argument and the same future being awaited side by side, so every call
    /// future that waits on an upstream would carry the upstream future's room twice.
    #[must_use = "futures do nothing unless polled"]
    pub struct OnUpstream<'a, F> {
        #[pin]
        f: F,
        watch: &'a Stopwatch,
        start: Option<Instant>,
    }
}

impl<F: Future> Future for OnUpstream<'_, F> {
    type Output = F::Output;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.project();
        match this.f.poll(cx) {
            std::task::Poll::Pending => {
                if this.start.is_none() {
                    *this.start = Some(Instant::now());
                }
                std::task::Poll::Pending
            }
            std::task::Poll::Ready(out) => {
                if let Some(start) = *this.start {
                    this.watch.upstream(start.elapsed());
                }
                std::task::Poll::Ready(out)
            }
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// ADM-3: a slot of the member's concurrency (0 = unlimited), and the call counted against
/// their optional RPM limit. Refusals are recorded as rejected by the caller.
pub(super) fn member_admission(s: &AppState, p: &Principal) -> Result<MemberSlot, GatewayError> {
    let slot = member_slot(s, p)?;
    member_rpm(s, p)?;
    Ok(slot)
}

/// ADM-3: a slot of the member's concurrency (0 = unlimited).
pub(super) fn member_slot(s: &AppState, p: &Principal) -> Result<MemberSlot, GatewayError> {
    s.admission
        .member(p.member_id, u32::try_from(p.concurrency_limit).unwrap_or(0))
        .ok_or_else(GatewayError::member_concurrency_exceeded)
}

/// ADM-3: the call counted against the member's optional RPM limit (Retry-After rounded up).
pub(super) fn member_rpm(s: &AppState, p: &Principal) -> Result<(), GatewayError> {
    s.admission
        .member_rpm(p.member_id, p.rpm_limit)
        .map_err(|wait| GatewayError::member_rpm_exceeded(crate::scheduler::state::retry_secs(wait)))
}

/// One authenticated model attempt; recorded exactly once by one of its consuming methods.
pub(super) struct Attempt {
    pub records: crate::records::RecordSink,
    pub request_id: String,
    pub protocol: Protocol,
    /// Recorded operation name (`responses`, `responses_ws`, ...).
    pub operation: &'static str,
    pub started: Instant,
    pub started_at_ms: i64,
    pub principal: Principal,
    pub model: String,
    pub account: Option<(i64, Provider)>,
    /// The account slot, settled with the attempt's verdict and released after its record (ADM-8).
    /// (Fields drop in order: the account slot goes back before the workspace and member slots.)
    pub lease: Option<Lease>,
    /// Workspace and member slots, released when the attempt is recorded (ADM-8).
    pub slots: Option<(WorkspaceSlot, MemberSlot)>,
    /// The scheduler's explanation (EXP-1); none when rejected before routing.
    pub routing: Option<RoutingDecision>,
    /// Queue and upstream time (BEY-4).
    pub stopwatch: Arc<Stopwatch>,
    /// The gateway's refusal of this call, if it refused it (the admissions metric).
    pub refused: Option<&'static str>,
    /// The call's span (BEY-5): the record's hand-over is traced inside it wherever that happens.
    pub span: tracing::Span,
    metrics: Arc<crate::metrics::Metrics>,
    /// Where a finished attempt is charged (BUD-2).
    budgets: std::sync::Arc<crate::budgets::Budgets>,
    clock: crate::clock::SharedClock,
    /// Tells a drop why the attempt ended unfinished (shutdown rather than the client).
    lifecycle: std::sync::Arc<crate::app_state::Lifecycle>,
    /// Recorded (or deliberately not): a drop does nothing more.
    done: bool,
    /// The record waiting for room in a full queue: if that wait is cut short, the drop queues
    /// it. Boxed: it is empty nearly always, yet inline it took 296 of the attempt's 776 bytes,
    /// carried by every open stream's relay (performance goal 3).
    pending: Option<Box<NewRecord>>,
}

/// The end of an attempt, as recorded.
pub(super) struct Ending {
    pub outcome: Outcome,
    pub error_code: Option<String>,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    pub first_output: Option<Duration>,
    /// What the answer says about the account (CD-*); `Neutral` for local failures.
    pub verdict: Verdict,
}

impl Ending {
    /// A local failure before any upstream answer: nothing learned about the account.
    pub(super) fn failed(code: &str, outcome: Outcome) -> Self {
        Ending {
            outcome,
            error_code: Some(code.to_owned()),
            upstream_status: None,
            usage: Usage::default(),
            first_output: None,
            verdict: Verdict::Neutral,
        }
    }
}

impl Attempt {
    pub(super) fn new(
        s: &AppState,
        request_id: String,
        protocol: Protocol,
        operation: &'static str,
        start: Start,
        principal: Principal,
        model: String,
    ) -> Self {
        Attempt {
            records: s.records.clone(),
            request_id,
            protocol,
            operation,
            started: start.at,
            started_at_ms: start.unix_ms,
            principal,
            model,
            account: None,
            lease: None,
            slots: None,
            routing: None,
            stopwatch: Arc::default(),
            refused: None,
            span: tracing::Span::current(),
            metrics: Arc::clone(&s.metrics),
            budgets: std::sync::Arc::clone(&s.budgets),
            clock: std::sync::Arc::clone(&s.clock),
            lifecycle: std::sync::Arc::clone(&s.lifecycle),
            done: false,
            pending: None,
        }
    }

    /// Settles the lease, charges the budgets (a call that reached an upstream counts as a
    /// request; tokens as reported) and builds the record.
    fn record(&mut self, end: Ending) -> NewRecord {
        if let Some(lease) = self.lease.as_mut() {
            lease.settle(end.verdict);
        }
        let duration = self.started.elapsed();
        let provider = self.account.map(|a| a.1.as_str());
        tracing::debug!(
            request_id = %self.request_id,
            operation = self.operation,
            outcome = end.outcome.as_str(),
            status = end.upstream_status,
            account_id = self.account.map(|a| a.0),
            duration_ms = duration.as_millis() as u64,
            "call finished"
        );
        // Each call is counted once: recorded exactly once, it was refused by the gateway or not.
        match self.refused {
            Some(code) => self.metrics.refused(code),
            None => self.metrics.admitted(),
        }
        self.metrics.call(self.operation, end.outcome.as_str(), provider, duration, end.first_output);
        let upstream = self.stopwatch.upstream_total();
        if let Some(provider) = provider.filter(|_| !upstream.is_zero()) {
            self.metrics.upstream_time(provider, upstream);
        }
        let queued = self.stopwatch.queue();
        if !queued.is_zero() {
            self.metrics.queue_wait(self.principal.pool_id, queued);
        }
        let p = &self.principal;
        // Counting tokens is not a model call: it uses no request of a budget.
        let reached_upstream = end.upstream_status.is_some()
            && self.operation != crate::providers::Operation::CountTokens.record_name();
        let charges = self.budgets.charge(
            p.key_id,
            p.member_id,
            &self.model,
            reached_upstream,
            &end.usage,
            self.clock.now(),
        );
        NewRecord {
            request_id: self.request_id.clone(),
            member_id: self.principal.member_id,
            key_id: Some(self.principal.key_id),
            pool_id: Some(self.principal.pool_id),
            account_id: self.account.map(|a| a.0),
            provider,
            model: bounded_model(&self.model),
            operation: self.operation,
            started_at_ms: self.started_at_ms,
            duration_ms: duration.as_millis() as i64,
            first_output_ms: end.first_output.map(|d| d.as_millis() as i64),
            outcome: end.outcome,
            error_code: end.error_code,
            upstream_status: end.upstream_status,
            usage: end.usage,
            routing: self.routing.as_ref().and_then(crate::records::stored_routing),
            charges,
        }
    }

    /// Records the attempt and queues its record.
    ///
    /// A plain fn returning an async block (see `call::dispatch`): the attempt lives in the
    /// future once, not twice. The record is made inside the block, so a future dropped before
    /// its first poll leaves the attempt to its drop, which records it once.
    // (`done` is read by `Drop`, which the lint does not see through the block's capture.)
    #[allow(unused_assignments)]
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    pub(super) fn finish(mut self, end: Ending) -> impl Future<Output = ()> {
        async move {
            let record = self.record(end);
            // If this is cut short while the queue is full, the record waits in `pending`, and
            // the drop queues it.
            // (The writer commits records in batches; this span is the call's part: the
            // hand-over.)
            let span = tracing::debug_span!(parent: &self.span, "record_write");
            self.records.send_into(record, &mut self.pending).instrument(span).await;
            self.done = true;
            // The slots are released only now (when `self` drops), after the record is queued
            // (ADM-8).
        }
    }

    /// Ends the attempt without a record (REC-1: WebSocket warm-ups create none).
    pub(super) fn discard(mut self) {
        self.done = true;
    }

    /// Answers with a gateway error and records it.
    pub(super) fn fail(self, err: GatewayError, outcome: Outcome, upstream_status: Option<u16>) -> Failing {
        self.fail_with(err, outcome, upstream_status, Verdict::Neutral)
    }

    /// Answers with a gateway error, records it, and settles the account with `verdict`.
    pub(super) fn fail_with(
        self,
        err: GatewayError,
        outcome: Outcome,
        upstream_status: Option<u16>,
        verdict: Verdict,
    ) -> Failing {
        let code = err.code;
        self.fail_recorded_as(err, code, outcome, upstream_status, verdict)
    }

    /// As [`Self::fail_with`], with the record saying why more closely than the client's error
    /// does (the client hears `upstream_timeout` whichever timeout ran out).
    pub(super) fn fail_recorded_as(
        mut self,
        err: GatewayError,
        code: &'static str,
        outcome: Outcome,
        upstream_status: Option<u16>,
        verdict: Verdict,
    ) -> Failing {
        Box::pin(async move {
            let resp = err.render(self.protocol, Some(&self.request_id));
            if outcome == Outcome::Rejected {
                self.refused = Some(err.code);
            }
            self.finish(Ending {
                outcome,
                error_code: Some(code.to_owned()),
                upstream_status,
                usage: Usage::default(),
                first_output: None,
                verdict,
            })
            .await;
            resp
        })
    }
}

/// The answer to a call that failed, on its way. Boxed: a future holds room for the largest
/// future it awaits, and a failing attempt's is several times the size of the successful path's,
/// so a call future embedding it would carry (and copy on every move) kilobytes it rarely uses.
pub(super) type Failing = futures_util::future::BoxFuture<'static, Response>;

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let record = match self.pending.take() {
            Some(r) => *r,
            None => {
                let stopped = self.lifecycle.hard_stop.is_cancelled();
                let code = if stopped { "server_shutdown" } else { "client_cancelled" };
                self.record(Ending::failed(code, Outcome::Cancelled))
            }
        };
        // Queued now, or by a task the shutdown waits for when the queue is full (no call waits
        // for it, so it is not counted as a call that waited).
        if let Some(record) = self.records.try_send(record) {
            let sink = self.records.clone();
            self.lifecycle.tasks.spawn(async move { sink.send_when_room(record).await });
        }
    }
}

/// What a relayed stream's end says about the model on this account (CD-2): a completed stream
/// is a success; a broken or cut-off one a failure, and so is an error the upstream reports
/// inside a 200 stream when it is the upstream's own fault (`response.failed` with
/// `server_error`, Anthropic `overloaded_error` / `api_error`: the seeds' invalid or abnormally
/// ended streams). Anything else (cancel, timeout, shutdown, a stalled client, a refusal,
/// `max_tokens`, a content filter) says nothing.
pub(super) fn stream_verdict(outcome: Outcome, error_code: Option<&str>) -> Verdict {
    match (outcome, error_code) {
        (Outcome::Success, _) => Verdict::Success,
        (_, Some("upstream_stream_broken" | "stream_ended_early")) => Verdict::ModelFailure,
        (Outcome::Error, Some(code)) if upstream_fault(code) => Verdict::ModelFailure,
        _ => Verdict::Neutral,
    }
}

/// Error codes by which an upstream reports a fault of its own in a stream.
fn upstream_fault(code: &str) -> bool {
    matches!(
        code,
        "server_error"
            | "internal_error"
            | "internal_server_error"
            | "api_error"
            | "overloaded_error"
            | "service_unavailable"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_faults_inside_a_stream_count_and_refusals_do_not() {
        for code in ["server_error", "overloaded_error", "api_error"] {
            assert_eq!(stream_verdict(Outcome::Error, Some(code)), Verdict::ModelFailure, "{code}");
        }
        for code in ["content_filter", "refusal", "invalid_prompt", "safety", "rate_limit_exceeded"] {
            assert_eq!(stream_verdict(Outcome::Error, Some(code)), Verdict::Neutral, "{code}");
        }
        assert_eq!(stream_verdict(Outcome::Incomplete, Some("max_output_tokens")), Verdict::Neutral);
        assert_eq!(stream_verdict(Outcome::Cancelled, Some("client_stalled")), Verdict::Neutral);
        assert_eq!(stream_verdict(Outcome::Error, Some("upstream_stream_broken")), Verdict::ModelFailure);
    }

    #[tokio::test(start_paused = true)]
    async fn upstream_time_runs_from_the_first_wait_to_the_end() {
        let watch = Stopwatch::default();
        let waiting = watch.on_upstream(async { tokio::time::sleep(Duration::from_millis(50)).await });
        tokio::time::advance(Duration::from_secs(1)).await;
        waiting.await;
        assert_eq!(
            watch.upstream_total(),
            Duration::from_millis(50),
            "made earlier, timed from its first poll"
        );
        assert_eq!(watch.queue(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_future_done_at_its_first_poll_waited_on_nothing() {
        let watch = Stopwatch::default();
        // Work in the first poll (a body already in, copied) is the gateway's own time.
        let busy = std::future::poll_fn(|_| {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(2) {}
            std::task::Poll::Ready(())
        });
        watch.on_upstream(busy).await;
        assert_eq!(watch.upstream_total(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_upstream_wait_cut_short_counts_nothing() {
        let watch = Stopwatch::default();
        let mut waiting = std::pin::pin!(watch.on_upstream(std::future::pending::<()>()));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert_eq!(watch.upstream_total(), Duration::ZERO, "only a finished wait is upstream time");
    }

    #[test]
    fn waiting_on_an_upstream_keeps_one_copy_of_its_future() {
        let watch = Stopwatch::default();
        let big = [7u8; 2048];
        let upstream = async move {
            tokio::task::yield_now().await;
            big.len()
        };
        let alone = std::mem::size_of_val(&upstream);
        let timed = watch.on_upstream(upstream);
        assert!(
            std::mem::size_of_val(&timed) <= alone + 64,
            "{} bytes around {alone}",
            std::mem::size_of_val(&timed)
        );
    }

    #[test]
    fn request_ids_are_prefixed_unique_and_ordered_by_time() {
        let a = new_request_id(1_900_000_000_000);
        assert!(a.starts_with("req_") && a.len() == 36, "{a}");
        assert!(a[4..].bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        assert_eq!(&a[4..16], format!("{:012x}", 1_900_000_000_000_u64), "the time, then chance");
        assert_ne!(a, new_request_id(1_900_000_000_000));
        assert!(new_request_id(1_900_000_000_001) > a && new_request_id(1_899_999_999_999) < a);
    }
}
