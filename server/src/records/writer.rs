//! The one task that writes request records: it takes every record that is waiting, inserts the
//! batch in a single transaction and prunes in the same transaction (REC-5), so the hot path never
//! opens a transaction and pruning is atomic with the write.
//!
//! The writer keeps its own connections, apart from the pool (with the pool's options), each
//! on a SQLite thread of its own name and lower priority. SQLite gives each connection its own
//! page cache, and a connection that sees another's commit drops that cache: batches handed round
//! the pool's connections re-read the table's and indexes' tail pages from the file on every
//! commit, and re-parse their statements on each connection. A connection that writes batch after
//! batch keeps both warm.
//!
//! It has two, for two paces, because a batch is a millisecond or two of SQLite work at once,
//! and on a small machine the scheduler often puts it on the CPU of a thread that is serving a
//! call: that call then waits for the batch, which was most of SubLane's latency tail at
//! concurrency 1 (a scheduler trace showed each call slower than 300 us waiting behind a batch,
//! ready to run, while the other CPU idled). Records are written a moment later instead: a
//! writer that falls behind is waited for (the queue holds its records and pushes back on calls
//! when full), never skipped.
//!
//! - **Keeping up** (a batch that came alone, see [`alone`]), the batch is written by the
//!   [`CALM_THREAD`]'s connection, which runs at idle priority (Linux's `SCHED_IDLE`): on a busy
//!   CPU it gets only a small share, and a thread woken to serve a call takes the CPU from it at
//!   once. Where the kernel refuses that, it yields its CPU every [`YIELD_EVERY_OPS`] SQLite
//!   instructions instead, which lets a waiting thread go first (a hint the kernel may pass over;
//!   the commit's writes to the file are not instructions and do not yield).
//! - **Behind** (a batch that found more waiting, or one received once shutdown began), it is
//!   written by the [`THREAD`]'s connection, at a nice value of `NICE`: under a load that keeps
//!   both CPUs busy, a writer at idle priority would get next to no CPU and its queue would fill.
//!
//! Why not one connection whose thread changes priority: a thread without `CAP_SYS_NICE` (and
//! with the default `RLIMIT_NICE`) may go to idle priority but never come back from it. Each
//! switch between the two costs the next batch a re-read of the tail pages; the pace changes with
//! the load, not from batch to batch.
//!
//! A calm batch holds SQLite's write lock from its first insert to its commit, and at idle
//! priority that lasts as long as the CPUs stay busy: the writer's next batch waits for it (one
//! batch at a time), and so do other writes to the database meanwhile, in their busy handler, for
//! up to its 5 s timeout (a key's breaker trip, a refreshed credential, quota and scheduler state).
//! Within SubLane, a rising load makes the next batch a busy one. A load from outside (another
//! process keeping the CPUs busy) does not fill the queue, so the writer also watches the calm
//! batches themselves: after one that took longer than [`CALM_SLOW`], every batch is written on
//! the busy connection for [`CALM_PAUSE`].

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use sqlx::{
    ConnectOptions as _, Connection as _, Sqlite, SqliteConnection, SqlitePool, sqlite::SqliteArguments,
};
use tokio::{
    sync::mpsc,
    time::{Duration, Instant},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{NewRecord, RETENTION_AGE, RETENTION_ROWS};
use crate::clock::SharedClock;

/// Records waiting for the writer; beyond this, senders wait (backpressure instead of loss).
const QUEUE: usize = 8192;
/// Most records written in one transaction.
const BATCH: usize = 512;
/// Rows per INSERT statement (18 parameters each; SQLite allows 32,766 per statement).
const INSERT_ROWS: usize = 128;
const _: () = assert!(INSERT_ROWS.is_power_of_two(), "eight statement shapes: see `db::statement_sized`");
/// How long a small batch waits for more records before it is written. Each commit rewrites the
/// partly filled tail pages of the table and its index, the pruned head and the daily
/// totals, whatever its size: at 20,000 calls a second, 20 ms makes batches of about 400 instead
/// of about 100, and a record on a quiet server is readable 20 ms after its call ended.
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);
/// The name of the thread that runs the writer's SQLite work when it is behind.
pub const THREAD: &str = "sublane-records";
/// The name of the thread that runs it, at idle priority, while it keeps up.
pub const CALM_THREAD: &str = "sublane-rec-low";
/// Both writer threads' names.
pub const THREADS: [&str; 2] = [CALM_THREAD, THREAD];
const _: () =
    assert!(THREAD.len() <= 15 && CALM_THREAD.len() <= 15, "Linux keeps 15 bytes of a thread's name");
/// The writer threads' nice value, unless SubLane runs at a lower priority already (0 is the
/// default, 19 the lowest). Under a load that keeps both CPUs busy the writer still needs its
/// share (a few microseconds of CPU per record), or its queue fills and calls wait for it: at 10,
/// about one call in twenty waited at 64 connections on two CPUs (`sublane_records_waited_total`)
/// and throughput fell; at 5 next to none did, with the same gain at the latency tail. (At idle
/// priority, 64 connections made one call in nine wait and cost a tenth of the throughput: why
/// a writer that is behind has a thread of its own.)
#[cfg(target_os = "linux")]
const NICE: i32 = 5;
/// How often (in SQLite virtual machine instructions, counted per statement) the calm thread
/// yields its CPU where idle priority was refused (150, 400 and 1,000 all took the c=1 p99 from
/// about 500 us to 250-320 us; the largest makes the fewest syscalls).
const YIELD_EVERY_OPS: i32 = 1000;
/// The longest a calm batch may take, from its first statement to its commit, before the calm
/// connection is left alone for [`CALM_PAUSE`]. A keeping-up writer's batch is a millisecond or
/// two of work; one that took longer waited for a CPU while it held the write lock.
const CALM_SLOW: Duration = Duration::from_millis(50);
/// How long every batch goes to the busy connection after a slow calm one.
const CALM_PAUSE: Duration = Duration::from_secs(10);
/// How often the writer prunes by age: records past seven days and daily usage past 90. By count
/// it prunes with every batch (a range of ids, found by the primary key); by age it has to read
/// every row's start, for which no index is kept, and a row a minute past its time harms no one:
/// every read of records prunes exactly first (REC-5), and usage is read from its first kept day.
const AGE_PRUNE_EVERY_MS: i64 = 60_000;

/// Which of the writer's two connections writes a batch (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Keeping up: a batch that came alone (see [`alone`]) and left nothing waiting after its
    /// linger. Written at idle priority.
    Calm,
    /// Behind: a batch that found more waiting, or the drain at shutdown. Written at `NICE`:
    /// at 64 connections on two CPUs, a writer that yielded with every batch made 10,000-16,000
    /// calls in 6 s wait for room in its queue, and one at idle priority about one in nine.
    Busy,
}

impl Pace {
    /// The pace of a batch of `len` records, `alone` as it came, `calm` allowed or not (see
    /// [`CalmGuard`]).
    fn of(alone: bool, len: usize, calm: bool) -> Pace {
        if alone && len < BATCH && calm { Pace::Calm } else { Pace::Busy }
    }

    /// The name of the thread that runs this pace's connection.
    fn thread(self) -> &'static str {
        match self {
            Pace::Calm => CALM_THREAD,
            Pace::Busy => THREAD,
        }
    }
}

/// Whether the calm connection may take a batch: not for [`CALM_PAUSE`] after a calm batch that
/// took longer than [`CALM_SLOW`] (see the module doc).
#[derive(Debug, Default)]
struct CalmGuard {
    paused_until: Option<Instant>,
}

impl CalmGuard {
    fn allows(&self, now: Instant) -> bool {
        self.paused_until.is_none_or(|until| now >= until)
    }

    /// A calm batch took `took`, ending `now`.
    fn took(&mut self, took: Duration, now: Instant) {
        if took > CALM_SLOW {
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                "a calm record batch was slow; the busy writer takes the next ones"
            );
            self.paused_until = Some(now + CALM_PAUSE);
        }
    }
}

/// How the calm connection's thread keeps out of the calls' way, decided on that thread when the
/// connection opens: at idle priority where the kernel allows it (it does for any thread of one's
/// own on Linux), else by yielding its CPU every [`YIELD_EVERY_OPS`] instructions. The counts are
/// read by tests.
#[derive(Debug, Default)]
struct Courtesy {
    /// How often the progress callback ran: the calm connection's work.
    steps: AtomicU64,
    /// How often the thread yielded.
    yields: AtomicU64,
}

impl Courtesy {
    /// SQLite's progress callback, on the calm connection's thread. Always lets the statement go
    /// on.
    fn step(&self) -> bool {
        // What this thread does: not yet decided (`None`), or whether it yields. (Per thread: a
        // connection opened again after an error runs on a new one.)
        thread_local! {
            static YIELDS: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
        }
        self.steps.fetch_add(1, Ordering::Relaxed);
        let yields = YIELDS.with(|y| match y.get() {
            Some(yields) => yields,
            None => {
                let yields = !idle_priority();
                y.set(Some(yields));
                yields
            }
        });
        if yields {
            self.yields.fetch_add(1, Ordering::Relaxed);
            std::thread::yield_now();
        }
        true
    }
}

/// Puts the calling thread at idle priority (`SCHED_IDLE`); whether it is there now.
#[cfg(target_os = "linux")]
fn idle_priority() -> bool {
    use thread_priority::{
        NormalThreadSchedulePolicy::Idle, ThreadPriority, ThreadSchedulePolicy::Normal,
        set_thread_priority_and_policy, thread_native_id, thread_schedule_policy,
    };
    // (read back rather than trusted: with the policy the crate also asks for nice 0, which a
    // thread already at `NICE` may not take back without privilege, and it then says it failed)
    let _ = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, Normal(Idle));
    matches!(thread_schedule_policy(), Ok(Normal(Idle)))
}

#[cfg(not(target_os = "linux"))]
fn idle_priority() -> bool {
    false
}

/// Where finished attempts are sent. Cheap to clone: it is cloned with `AppState` on every
/// request, so the close signal sits behind an `Arc` (cloning a `CancellationToken` takes a lock).
#[derive(Clone, Debug)]
pub struct RecordSink {
    tx: mpsc::Sender<NewRecord>,
    closed: Arc<CancellationToken>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl RecordSink {
    /// Queues a record. Waits only when the writer is thousands of records behind.
    pub async fn send(&self, record: NewRecord) {
        self.send_into(record, &mut None).await;
    }

    /// Queues `record`, waiting only when the writer is thousands behind: then the record waits
    /// in `slot`, and leaves it only when queued, so a wait cut short leaves it there for the
    /// caller to hand over. (Boxed, and filled only when the queue is full: the slot sits in
    /// every call's attempt, which a stream holds while it is open.)
    pub async fn send_into(&self, record: NewRecord, slot: &mut Option<Box<NewRecord>>) {
        let Some(record) = self.try_send(record) else { return };
        self.metrics.record_waited();
        *slot = Some(Box::new(record));
        self.when_room(slot).await;
    }

    /// Queues a record that already found the queue full, once there is room: for a record
    /// whose call has ended (a dropped attempt's), so no call waits and none is counted as
    /// having waited, however often the record found the queue full.
    pub async fn send_when_room(&self, record: NewRecord) {
        self.when_room(&mut Some(Box::new(record))).await;
    }

    /// Queues the record in `slot` once the queue has room; a wait cut short leaves it there.
    async fn when_room(&self, slot: &mut Option<Box<NewRecord>>) {
        match self.tx.reserve().await {
            Ok(permit) => {
                if let Some(record) = slot.take() {
                    permit.send(*record);
                }
            }
            Err(_) => {
                slot.take();
                tracing::error!("record writer stopped; a request record was dropped");
                self.metrics.records_dropped(1);
            }
        }
    }

    /// Queues a record without waiting (for places that cannot await, such as a drop); a full
    /// queue hands it back.
    pub fn try_send(&self, record: NewRecord) -> Option<NewRecord> {
        match self.tx.try_send(record) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(record)) => Some(record),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::error!("record writer stopped; a request record was dropped");
                self.metrics.records_dropped(1);
                None
            }
        }
    }

    /// Stops the writer once what is queued is written (shutdown: the senders may outlive it).
    pub fn close(&self) {
        self.closed.cancel();
    }
}

/// Retention limits, injectable for tests.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub max_age_ms: i64,
    pub max_rows: i64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { max_age_ms: RETENTION_AGE.as_millis() as i64, max_rows: RETENTION_ROWS }
    }
}

/// Whether a batch that came with `received` records came alone: few, and not while shutting
/// down (when the writer drains its queue at full speed). Such a batch lingers for company, and
/// unless that fills it, it is written on the calm connection (see [`Pace`]).
fn alone(received: usize, closing: bool) -> bool {
    received < BATCH / 8 && !closing
}

/// Starts the writer. It ends after every sender is dropped, or after [`RecordSink::close`], once
/// the queue is drained, so no record queued before shutdown is lost.
pub fn spawn_writer(
    db: SqlitePool,
    clock: SharedClock,
    retention: Retention,
    zone: chrono_tz::Tz,
    metrics: Arc<crate::metrics::Metrics>,
) -> (RecordSink, tokio::task::JoinHandle<()>) {
    spawn_counted_in(db, clock, retention, zone, metrics, Arc::default())
}

/// [`spawn_writer`], its calm connection's work counted in `courtesy`.
fn spawn_counted_in(
    db: SqlitePool,
    clock: SharedClock,
    retention: Retention,
    zone: chrono_tz::Tz,
    metrics: Arc<crate::metrics::Metrics>,
    courtesy: Arc<Courtesy>,
) -> (RecordSink, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<NewRecord>(QUEUE);
    let closed = Arc::new(CancellationToken::new());
    let close = Arc::clone(&closed);
    let sink_metrics = Arc::clone(&metrics);
    let task = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(BATCH);
        let mut names = crate::usage::Names::default();
        // One per pace, opened at its first batch; closed after an error, so a broken one is
        // not kept.
        let (mut calm, mut busy): (Option<SqliteConnection>, Option<SqliteConnection>) = (None, None);
        let mut guard = CalmGuard::default();
        // The first batch prunes by age, then one a minute.
        let mut next_age_prune_ms = i64::MIN;
        loop {
            let received = tokio::select! {
                biased;
                n = rx.recv_many(&mut batch, BATCH) => n,
                () = close.cancelled(), if !rx.is_closed() => {
                    // No new records; what is queued is still received below.
                    rx.close();
                    continue;
                }
            };
            if received == 0 {
                break;
            }
            // A batch that came alone waits a moment for company: each commit rewrites the tail
            // pages of the table and its index (and the pruned head) and may checkpoint, so
            // under load fewer, larger commits write far less per record; a quiet server's record
            // is merely written a few milliseconds later. (At shutdown the queue is closed only
            // once empty, so the cancelled signal says so first.)
            let alone = alone(received, rx.is_closed() || close.is_cancelled());
            if alone {
                tokio::time::sleep(LINGER).await;
                let room = BATCH - batch.len();
                if !rx.is_empty() {
                    rx.recv_many(&mut batch, room).await;
                }
            }
            let pace = Pace::of(alone, batch.len(), guard.allows(Instant::now()));
            let now_ms = clock.unix_ms();
            // (and at once after the wall clock went back more than a minute)
            let by_age =
                now_ms >= next_age_prune_ms || now_ms < next_age_prune_ms.saturating_sub(AGE_PRUNE_EVERY_MS);
            let span = tracing::debug_span!("write_records", records = batch.len());
            let conn = match pace {
                Pace::Calm => &mut calm,
                Pace::Busy => &mut busy,
            };
            let written = async {
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => conn.insert(connect(&db, pace, &courtesy).await?),
                };
                // (the batch's own time: opening the connection is not holding the write lock)
                let started = Instant::now();
                let written = write_batch(c, &batch, now_ms, retention, by_age, zone, &mut names).await;
                if pace == Pace::Calm {
                    let now = Instant::now();
                    guard.took(now - started, now);
                }
                written
            };
            match written.instrument(span).await {
                Ok(()) => {
                    metrics.records_written(batch.len());
                    if by_age {
                        next_age_prune_ms = now_ms.saturating_add(AGE_PRUNE_EVERY_MS);
                    }
                }
                Err(e) => {
                    // Closed, and a new one opened for the next batch: after `OR ROLLBACK`
                    // SQLite has ended the transaction that sqlx still counts as open, so the
                    // next `begin` on it would open a savepoint inside nothing.
                    if let Some(c) = conn.take() {
                        let _ = c.close().await;
                    }
                    tracing::error!(error = %e, records = batch.len(), "writing request records failed");
                    metrics.records_dropped(batch.len());
                }
            }
            batch.clear();
        }
        // Closed before the writer ends, so shutdown's wait for it covers the connections too:
        // a dropped one is closed later by its own thread, perhaps after the process lock went.
        for c in [calm, busy].into_iter().flatten() {
            let _ = c.close().await;
        }
    });
    (RecordSink { tx, closed, metrics: sink_metrics }, task)
}

/// The writer's connection for `pace`, with the pool's options, its SQLite thread named for the
/// pace and given a lower priority; the calm one's thread keeps out of the calls' way as
/// `courtesy` finds it can.
async fn connect(db: &SqlitePool, pace: Pace, courtesy: &Arc<Courtesy>) -> sqlx::Result<SqliteConnection> {
    let name = pace.thread();
    let mut conn = (*db.connect_options()).clone().thread_name(move |_| name.to_owned()).connect().await?;
    lower_priority(name);
    if pace == Pace::Calm {
        // The thread decides now how it keeps out of the way (the callback at every instruction
        // of a trivial statement), then looks again every `YIELD_EVERY_OPS` instructions.
        let first = Arc::clone(courtesy);
        conn.lock_handle().await?.set_progress_handler(1, move || first.step());
        sqlx::query("SELECT 1").execute(&mut conn).await?;
        let courtesy = Arc::clone(courtesy);
        conn.lock_handle().await?.set_progress_handler(YIELD_EVERY_OPS, move || courtesy.step());
    }
    Ok(conn)
}

/// Gives every thread named `name` the nice value `NICE` (or keeps its own, if higher):
/// found by name, because sqlx starts the thread and tells nothing of it. Where that fails (not
/// Linux, no `/proc`), the writer runs at SubLane's priority, as it did before; that is only
/// slower at the tail.
#[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
fn lower_priority(name: &str) {
    #[cfg(target_os = "linux")]
    {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
        for task in tasks.flatten() {
            let named = std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim_end() == name);
            let tid = task.file_name().to_str().and_then(|t| t.parse::<i32>().ok());
            let Some(pid) = tid.and_then(rustix::process::Pid::from_raw).filter(|_| named) else { continue };
            let nice = rustix::process::getpriority_process(Some(pid)).map_or(NICE, |now| now.max(NICE));
            if let Err(e) = rustix::process::setpriority_process(Some(pid), nice) {
                tracing::debug!(error = %e, "cannot lower the record writer's priority");
            }
        }
    }
}

async fn write_batch(
    conn: &mut SqliteConnection,
    batch: &[NewRecord],
    now_ms: i64,
    retention: Retention,
    by_age: bool,
    zone: chrono_tz::Tz,
    names: &mut crate::usage::Names,
) -> sqlx::Result<()> {
    let mut tx = conn.begin().await?;
    // One multi-row INSERT per chunk: SQLite statements run on sqlx's worker thread, so each
    // statement is a cross-thread round trip; a statement per record would cost one per request.
    // `OR ROLLBACK`: a row that breaks a constraint ends the whole transaction, which is what an
    // error here does anyway (the batch is dropped). With the default `ABORT`, SQLite would copy
    // every page the statement touches into a statement journal first, to undo just that
    // statement. SQLite only; PostgreSQL has no such clause and needs none.
    // (in eight statement shapes, each prepared once: see `db::statement_sized`)
    for chunk in crate::db::statement_sized(batch, INSERT_ROWS) {
        let mut values = SqliteArguments::default();
        for r in chunk {
            add(&mut values, &r.request_id)?;
            add(&mut values, r.member_id)?;
            add(&mut values, r.key_id)?;
            add(&mut values, r.pool_id)?;
            add(&mut values, r.account_id)?;
            add(&mut values, r.provider)?;
            add(&mut values, &r.model)?;
            add(&mut values, r.operation)?;
            add(&mut values, r.started_at_ms)?;
            add(&mut values, r.duration_ms)?;
            add(&mut values, r.first_output_ms)?;
            add(&mut values, r.outcome.as_str())?;
            add(&mut values, r.error_code.as_deref())?;
            add(&mut values, r.upstream_status.map(i64::from))?;
            add(&mut values, r.usage.input)?;
            add(&mut values, r.usage.output)?;
            add(&mut values, r.usage.cached)?;
            add(&mut values, r.routing.as_deref())?;
        }
        sqlx::query_with(insert_statement(chunk.len()), values).execute(&mut *tx).await?;
    }
    touch_keys(&mut tx, batch).await?;
    crate::budgets::store::add_charges(&mut tx, batch.iter().flat_map(|r| &r.charges), now_ms).await?;
    crate::usage::add(&mut tx, batch, zone, names).await?;
    // (the daily usage, kept 90 days, with the prune by age, once a minute: a statement a batch
    // is a round trip to SQLite's thread a batch)
    if by_age {
        prune(&mut tx, now_ms, retention).await?;
        crate::usage::prune(&mut tx, now_ms, zone).await?;
    } else {
        prune_by_count(&mut tx, retention).await?;
    }
    tx.commit().await
}

/// The columns of a record, in the order [`write_batch`] binds them.
const INSERT_COLUMNS: [&str; 18] = [
    "request_id",
    "member_id",
    "key_id",
    "pool_id",
    "account_id",
    "provider",
    "model",
    "operation",
    "started_at_ms",
    "duration_ms",
    "first_output_ms",
    "outcome",
    "error_code",
    "upstream_status",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "routing",
];

/// The INSERT of `rows` records (a power of two up to [`INSERT_ROWS`], as `db::statement_sized`
/// cuts a batch), its text made once: a query builder wrote the placeholders anew for every
/// record, through `fmt`, and that was most of the writer's own work per record.
fn insert_statement(rows: usize) -> &'static str {
    static SHAPES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let shapes = SHAPES.get_or_init(|| {
        let one = format!("({})", vec!["?"; INSERT_COLUMNS.len()].join(", "));
        (0..=INSERT_ROWS.ilog2())
            .map(|shape| {
                format!(
                    "INSERT OR ROLLBACK INTO request_records ({}) VALUES {}",
                    INSERT_COLUMNS.join(", "),
                    vec![one.as_str(); 1 << shape].join(", ")
                )
            })
            .collect()
    });
    &shapes[rows.ilog2() as usize]
}

/// Binds one value of a record.
fn add<'q, T>(args: &mut SqliteArguments<'q>, value: T) -> sqlx::Result<()>
where
    T: 'q + sqlx::Encode<'q, Sqlite> + sqlx::Type<Sqlite>,
{
    sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
}

/// Stamps each used key's `last_used_at` (unix seconds) once per batch, never moving it back.
async fn touch_keys(conn: &mut sqlx::SqliteConnection, batch: &[NewRecord]) -> sqlx::Result<()> {
    let mut latest: std::collections::BTreeMap<i64, i64> = std::collections::BTreeMap::new();
    for r in batch {
        if let Some(key) = r.key_id {
            let at = r.started_at_ms / 1000;
            latest.entry(key).and_modify(|v| *v = (*v).max(at)).or_insert(at);
        }
    }
    for (key, at) in latest {
        sqlx::query("UPDATE api_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE id = ?")
            .bind(at)
            .bind(key)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Deletes records beyond the newest `max_rows` (REC-5), the writer's prune between its prunes by
/// age: a range of the primary key, so it reads no row it does not delete.
async fn prune_by_count(conn: &mut sqlx::SqliteConnection, retention: Retention) -> sqlx::Result<u64> {
    let done =
        sqlx::query("DELETE FROM request_records WHERE id <= (SELECT MAX(id) FROM request_records) - ?")
            .bind(retention.max_rows)
            .execute(conn)
            .await?;
    Ok(done.rows_affected())
}

/// Deletes records older than the window or beyond the newest `max_rows` (REC-5).
pub async fn prune(
    conn: &mut sqlx::SqliteConnection,
    now_ms: i64,
    retention: Retention,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM request_records
         WHERE started_at_ms < ?
            OR id <= (SELECT MAX(id) FROM request_records) - ?",
    )
    .bind(now_ms - retention.max_age_ms)
    .bind(retention.max_rows)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{DateTime, TimeDelta};

    use super::*;

    #[test]
    fn inserts_come_in_eight_shapes_whatever_the_batch() {
        let sizes = |n: usize| {
            let rows: Vec<usize> = (0..n).collect();
            let chunks: Vec<&[usize]> = crate::db::statement_sized(&rows, INSERT_ROWS).collect();
            assert_eq!(chunks.concat(), rows, "every row once, in order (ids follow it)");
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>()
        };
        assert_eq!(sizes(0), Vec::<usize>::new());
        assert_eq!(sizes(1), [1]);
        assert_eq!(sizes(5), [4, 1]);
        assert_eq!(sizes(128), [128]);
        assert_eq!(sizes(300), [128, 128, 32, 8, 4]);
        let mut shapes = std::collections::BTreeSet::new();
        for n in 0..=BATCH {
            let chunks = sizes(n);
            assert!(chunks.iter().filter(|&&c| c < INSERT_ROWS).count() <= 7, "{n}: {chunks:?}");
            shapes.extend(chunks);
        }
        assert_eq!(shapes.len(), 8, "{shapes:?}");
    }

    #[test]
    fn each_insert_shape_has_a_placeholder_per_column_and_row() {
        for shape in 0..=INSERT_ROWS.ilog2() {
            let rows = 1 << shape;
            let sql = insert_statement(rows);
            assert_eq!(sql.matches('?').count(), rows * INSERT_COLUMNS.len(), "{rows} rows");
            assert_eq!(sql.matches('(').count(), rows + 1, "{rows} rows");
        }
    }

    use crate::{
        clock::{Clock, FakeClock},
        test_support::{open_db, record},
    };

    async fn ids(db: &SqlitePool) -> Vec<i64> {
        sqlx::query_scalar("SELECT id FROM request_records ORDER BY id").fetch_all(db).await.unwrap()
    }

    #[tokio::test]
    async fn keeps_at_most_max_rows_and_never_reuses_ids() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let now = clock.unix_ms();
        let retention = Retention { max_age_ms: 3_600_000, max_rows: 3 };

        let (sink, task) =
            spawn_writer(db.clone(), Arc::new(clock.clone()), retention, chrono_tz::UTC, Default::default());
        for n in 1..=5 {
            sink.send(record(n, now)).await;
        }
        drop(sink);
        task.await.unwrap();
        assert_eq!(ids(&db).await, vec![3, 4, 5], "the newest three remain, everything was written first");

        let (sink, task) =
            spawn_writer(db.clone(), Arc::new(clock), retention, chrono_tz::UTC, Default::default());
        sink.send(record(6, now)).await;
        drop(sink);
        task.await.unwrap();
        assert_eq!(ids(&db).await, vec![4, 5, 6], "a pruned id is never handed out again");
    }

    /// The writer's SQLite work runs on threads of their own names, at a lower priority: while
    /// it keeps up at idle priority, when behind at [`NICE`]. (It counts the process's writer
    /// threads: nextest runs each test in a process of its own.)
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_threads_are_named_and_run_at_a_lower_priority() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let now = clock.unix_ms();
        let (sink, task, metrics) = counting_writer(&db, &clock, Retention::default());
        // (nice and the scheduling policy are the 19th and 41st fields of a thread's stat, the
        // 17th and 39th after its parenthesised name; SCHED_IDLE is 5, SCHED_OTHER 0)
        let threads = |name: &str| -> Vec<(i32, i32)> {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
                })
                .map(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).unwrap();
                    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
                    (fields[16].parse().unwrap(), fields[38].parse().unwrap())
                })
                .collect()
        };
        // A batch that came alone.
        let mut sent = 1;
        sink.send(record(sent, now)).await;
        settled(&metrics, sent as f64).await;
        let calm = threads(CALM_THREAD);
        assert_eq!(calm.len(), 1, "one calm writer thread");
        assert_eq!(calm[0].1, 5, "at idle priority");
        assert!(threads(THREAD).is_empty(), "no busy writer thread yet");
        // A batch that found more waiting (sent without awaiting: the test's runtime has one
        // thread, so all are waiting when the writer next looks).
        for _ in 0..BATCH / 8 {
            sent += 1;
            assert!(sink.try_send(record(sent, now)).is_none());
        }
        settled(&metrics, sent as f64).await;
        assert_eq!(threads(THREAD), [(NICE, 0)], "one busy writer thread, at its nice value");
        assert_eq!(threads(CALM_THREAD).len(), 1, "the calm one kept");
        drop(sink);
        task.await.unwrap();
        assert_eq!(ids(&db).await.len(), sent as usize, "every record written");
    }

    /// A batch that came alone is written by the calm connection, which keeps out of the calls'
    /// way (at idle priority here, so without yielding); a batch that found more waiting, and the
    /// drain at shutdown, by the busy one. (The test's runtime has one thread: records sent
    /// without awaiting are all waiting when the writer next looks.)
    #[tokio::test]
    async fn only_a_writer_keeping_up_writes_on_its_calm_connection() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let now = clock.unix_ms();
        let retention = Retention { max_age_ms: 3_600_000, max_rows: 100_000 };
        let courtesy = Arc::new(Courtesy::default());
        let (sink, task, metrics) = counting_writer_counted_in(&db, &clock, retention, Arc::clone(&courtesy));
        let steps = || courtesy.steps.load(Ordering::Relaxed);
        let mut sent = 0;
        let mut send = |n: usize| {
            for _ in 0..n {
                sent += 1;
                assert!(sink.try_send(record(sent, now)).is_none());
            }
            sent as f64
        };

        let total = send(BATCH / 8 - 1);
        settled(&metrics, total).await;
        let after_alone = steps();
        assert!(after_alone > 0, "a batch that came alone is written on the calm connection");
        #[cfg(target_os = "linux")]
        assert_eq!(courtesy.yields.load(Ordering::Relaxed), 0, "at idle priority, it need not yield");

        let total = send(BATCH / 8);
        settled(&metrics, total).await;
        assert_eq!(steps(), after_alone, "a batch that found more waiting is not");

        let total = send(10);
        sink.close();
        settled(&metrics, total).await;
        assert_eq!(steps(), after_alone, "nor one drained at shutdown");
        drop(sink);
        task.await.unwrap();
        assert_eq!(ids(&db).await.len(), sent as usize, "every record written");
    }

    /// A batch that came alone goes to the calm connection unless a calm batch was slow (it
    /// waited for a CPU while holding the write lock) within the last `CALM_PAUSE`; a full one,
    /// or one that found more waiting, never does.
    #[test]
    fn the_calm_connection_is_left_alone_for_a_while_after_a_slow_batch() {
        let t = Instant::now();
        let mut guard = CalmGuard::default();
        assert!(guard.allows(t));
        assert_eq!(Pace::of(true, 10, guard.allows(t)), Pace::Calm);
        assert_eq!(Pace::of(true, BATCH, guard.allows(t)), Pace::Busy, "a full batch");
        assert_eq!(Pace::of(false, 10, guard.allows(t)), Pace::Busy, "a batch behind");
        guard.took(CALM_SLOW, t);
        assert!(guard.allows(t), "a batch as slow as allowed");
        guard.took(CALM_SLOW + Duration::from_millis(1), t);
        assert!(!guard.allows(t + CALM_PAUSE - Duration::from_millis(1)));
        assert_eq!(Pace::of(true, 10, guard.allows(t)), Pace::Busy, "a calm batch, written busy");
        assert!(guard.allows(t + CALM_PAUSE), "calm again after the pause");
    }

    /// A call that finds the queue full waits for room, is counted as having waited, and its
    /// record is written with the rest; calls that found room are not counted, nor a record sent
    /// after its call ended (a dropped attempt's), which no call waits for.
    #[tokio::test]
    async fn a_record_that_finds_the_queue_full_waits_and_is_counted() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let now = clock.unix_ms();
        let retention = Retention { max_age_ms: 3_600_000, max_rows: 100_000 };
        let (sink, task, metrics) = counting_writer(&db, &clock, retention);
        let mut sent = 0;
        // Fills what room there is, without awaiting: this test's runtime has one thread, so the
        // writer receives nothing meanwhile. The record that finds it full comes back.
        fn fill(sink: &RecordSink, sent: &mut i64, now: i64) -> NewRecord {
            loop {
                *sent += 1;
                if let Some(back) = sink.try_send(record(*sent, now)) {
                    return back;
                }
            }
        }
        drop(fill(&sink, &mut sent, now));
        assert_eq!(sent, QUEUE as i64 + 1, "the queue's room, and one that found it full");
        assert_eq!(counted(&metrics, "sublane_records_waited_total"), 0.0);
        sink.send(fill(&sink, &mut sent, now)).await;
        assert_eq!(counted(&metrics, "sublane_records_waited_total"), 1.0);
        sink.send_when_room(fill(&sink, &mut sent, now)).await;
        assert_eq!(counted(&metrics, "sublane_records_waited_total"), 1.0, "no call waited for that one");
        drop(sink);
        task.await.unwrap();
        let all = sent - 1;
        assert_eq!(counted(&metrics, "sublane_records_written_total"), all as f64, "nothing lost");
    }

    /// A writer on `db` at `clock`'s time, with metrics on (to count what it wrote and dropped).
    fn counting_writer(
        db: &SqlitePool,
        clock: &FakeClock,
        retention: Retention,
    ) -> (RecordSink, tokio::task::JoinHandle<()>, Arc<crate::metrics::Metrics>) {
        counting_writer_counted_in(db, clock, retention, Arc::default())
    }

    /// [`counting_writer`], its calm connection's work counted in `courtesy`.
    fn counting_writer_counted_in(
        db: &SqlitePool,
        clock: &FakeClock,
        retention: Retention,
        courtesy: Arc<Courtesy>,
    ) -> (RecordSink, tokio::task::JoinHandle<()>, Arc<crate::metrics::Metrics>) {
        let metrics = Arc::new(crate::metrics::Metrics::new(true));
        let clock = Arc::new(clock.clone());
        let (sink, task) =
            spawn_counted_in(db.clone(), clock, retention, chrono_tz::UTC, Arc::clone(&metrics), courtesy);
        (sink, task, metrics)
    }

    /// A counter of the writer's, read from the metrics text.
    fn counted(metrics: &crate::metrics::Metrics, name: &str) -> f64 {
        let text = metrics.render(&crate::metrics::State::default()).unwrap();
        let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// Waits (up to 5 s) until the writer has dealt with `n` records in all.
    async fn settled(metrics: &crate::metrics::Metrics, n: f64) {
        for _ in 0..1000 {
            let seen = counted(metrics, "sublane_records_written_total")
                + counted(metrics, "sublane_records_dropped_total");
            if seen >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the writer did not get to {n} records");
    }

    #[tokio::test]
    async fn a_batch_that_cannot_be_written_is_dropped_whole_and_the_next_one_is_written() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let now = clock.unix_ms();
        let (sink, task, metrics) = counting_writer(&db, &clock, Retention::default());
        sink.send(record(1, now)).await;
        settled(&metrics, 1.0).await;
        // One batch: a new record, and one the database refuses. A row breaking a constraint
        // ends the transaction (`INSERT OR ROLLBACK`); this trigger does the same to one id.
        sqlx::query(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON request_records WHEN NEW.request_id = 'req_9'
             BEGIN SELECT RAISE(ROLLBACK, 'refused'); END",
        )
        .execute(&db)
        .await
        .unwrap();
        sink.send(record(2, now)).await;
        sink.send(record(9, now)).await;
        settled(&metrics, 3.0).await;
        assert_eq!(counted(&metrics, "sublane_records_dropped_total"), 2.0);
        // The writer's connection ended with that batch's transaction; the next batch gets another.
        sink.send(record(3, now)).await;
        drop(sink);
        task.await.unwrap();
        let written: Vec<String> = sqlx::query_scalar("SELECT request_id FROM request_records ORDER BY id")
            .fetch_all(&db)
            .await
            .unwrap();
        assert_eq!(written, ["req_1", "req_3"], "none of the failed batch stays, the next one is written");
        assert_eq!(counted(&metrics, "sublane_records_written_total"), 2.0);
    }

    #[tokio::test]
    async fn prunes_by_age_using_the_injected_clock() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let start = clock.unix_ms();
        let retention = Retention::default();

        let (sink, task) =
            spawn_writer(db.clone(), Arc::new(clock.clone()), retention, chrono_tz::UTC, Default::default());
        sink.send(record(1, start)).await;
        sink.send(record(2, start + 60_000)).await;
        drop(sink);
        task.await.unwrap();
        assert_eq!(ids(&db).await.len(), 2);

        // 7 days after the first start, only the second (a minute younger) survives the next write
        clock.advance(TimeDelta::days(7) + TimeDelta::milliseconds(1));
        let (sink, task) =
            spawn_writer(db.clone(), Arc::new(clock.clone()), retention, chrono_tz::UTC, Default::default());
        sink.send(record(3, clock.unix_ms())).await;
        drop(sink);
        task.await.unwrap();
        assert_eq!(ids(&db).await, vec![2, 3]);
    }

    #[tokio::test]
    async fn a_running_writer_prunes_by_count_every_batch_and_by_age_once_a_minute() {
        let (_dir, db, _lock) = open_db().await;
        let clock = FakeClock::new(DateTime::from_timestamp(1_900_000_000, 0).unwrap());
        let t0 = clock.unix_ms();
        let retention = Retention { max_age_ms: 10_000, max_rows: 3 };
        let (sink, task, metrics) = counting_writer(&db, &clock, retention);
        sink.send(record(1, t0)).await;
        settled(&metrics, 1.0).await;

        // 30 s on, record 1 is past its 10 s; the last prune by age was 30 s ago, so it stays
        // (a read would not see it: reads prune exactly).
        clock.advance(TimeDelta::seconds(30));
        let t30 = clock.unix_ms();
        sink.send(record(2, t30)).await;
        settled(&metrics, 2.0).await;
        assert_eq!(ids(&db).await, vec![1, 2]);
        sink.send(record(3, t30)).await;
        settled(&metrics, 3.0).await;
        sink.send(record(4, t30)).await;
        settled(&metrics, 4.0).await;
        assert_eq!(ids(&db).await, vec![2, 3, 4], "by count, with every batch");

        // A minute after the first prune by age, the next batch prunes by age again.
        clock.advance(TimeDelta::seconds(30));
        sink.send(record(5, clock.unix_ms())).await;
        settled(&metrics, 5.0).await;
        assert_eq!(ids(&db).await, vec![5], "by age, once the minute is up");

        // The wall clock set back two minutes: the next batch prunes by age at once (record 6
        // started 20 s before the new now, so pruning removes it in the batch that wrote it).
        clock.advance(TimeDelta::minutes(-2));
        sink.send(record(6, clock.unix_ms() - 20_000)).await;
        settled(&metrics, 6.0).await;
        assert_eq!(ids(&db).await, vec![5], "a clock set back does not stop pruning by age");
        drop(sink);
        task.await.unwrap();
    }
}
