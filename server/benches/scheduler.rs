//! `make bench` (scheduler part): the cost of a routing decision and how fast a released slot
//! reaches the next waiter, each next to a baseline measured in the same run.
//!
//! - Selection with 1,000 and 10,000 accounts in one pool (target: <= 5 us per decision), with
//!   every account plain, with quota data, with one in ten blocked, and RT-6's weighted pick.
//!   Baseline: a bare round-robin index into the same account list, the least any selection
//!   can do.
//! - Queue-to-admit under contention: 64 clients over 16 accounts of one slot each, so 48 wait
//!   at all times; latency from a lease's release to the next waiter holding that slot.
//!   Baseline: the same clients on one fair `tokio::sync::Semaphore` per account.
//! - The key circuit breaker (BUD-4) as every request pays it: a check before and a count after,
//!   over 1,000 keys with 2 % failures. Baseline: one counter per key in a mutexed map, the
//!   least any per-key accounting can do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use app::model::{CredentialInput, ModelPolicy, Provider};
use sublane::{
    clock::SystemClock,
    credentials::TokenCell,
    directory::{Account, PoolRoutes},
    scheduler::{Ask, ConversationKey, Scheduler, Settings, Step, store},
};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ACCOUNTS: usize = 1_000;
const DECISIONS: usize = 200_000;
const CLIENTS: usize = 64;
const SLOTS: usize = 16;
const HANDOFFS: usize = 40_000;

fn accounts(scheduler: &Scheduler, n: usize, limit: u32) -> Vec<Arc<Account>> {
    (0..n)
        .map(|i| {
            let id = i as i64 + 1;
            Arc::new(Account {
                id,
                provider: Provider::Codex,
                // a few tiers, as real pools have
                priority: (i % 4) as i64,
                max_concurrency: limit,
                revision: 1,
                quota_revision: 0,
                pools: vec![1],
                slot: scheduler.register(id),
                generation: 0,
                tokens: TokenCell::fixed(
                    id,
                    Provider::Codex,
                    CredentialInput::ApiKey { api_key: "k".into() },
                ),
            })
        })
        .collect()
}

fn ask(conversation: Option<ConversationKey>) -> Ask<'static> {
    Ask {
        member_id: 1,
        pool_id: 1,
        model: "gpt-5.1-codex",
        supported: &[Provider::Codex, Provider::OpenaiApi],
        only: None,
        conversation,
        parent: None,
        continuation: false,
        pin: None,
        avoid: &[],
        queued: None,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Fresh quota observations on every account (none spent): two main windows each.
fn observe_quota(scheduler: &Arc<Scheduler>, n: usize) {
    use sublane::clock::Clock;
    use sublane::quota::{
        QuotaLive,
        observation::{Snapshot, Window},
    };
    let now = SystemClock.unix_ms();
    for i in 0..n {
        let window = |id: &str, used: f64, minutes: i64| Window {
            id: id.into(),
            main: true,
            used_percent: Some(used),
            window_minutes: Some(minutes),
            resets_at: Some(now + 3_600_000),
            limit_reached: false,
            observed_at: now,
        };
        let used = (i % 90) as f64;
        let snapshot = Snapshot {
            windows: vec![window("primary", used, 300), window("secondary", used / 2.0, 10080)],
            observed_at: now,
            ..Snapshot::default()
        };
        scheduler.set_quota(i as i64 + 1, 0, Some(QuotaLive::of(Arc::new(snapshot), now)));
    }
}

fn selection(n: usize) {
    let scheduler = Scheduler::new(Settings::default(), Arc::new(SystemClock), store::Writer::discard());
    let pool = PoolRoutes::new(ModelPolicy::default(), accounts(&scheduler, n, 30));
    let unbound = ask(None);
    let bound = ask(Some(ConversationKey::session("bench-conversation")));
    let timings_on = |scheduler: &Arc<Scheduler>, pool: &PoolRoutes, a: &Ask<'_>| {
        let mut each = Vec::with_capacity(DECISIONS);
        for _ in 0..DECISIONS {
            let t = Instant::now();
            let (step, _) = scheduler.decide(pool, a, None);
            let Step::Go(mut lease) = step else { panic!("no account") };
            // The upstream accepts: the first request of the conversation binds it here.
            lease.accepted();
            drop(lease);
            each.push(t.elapsed());
        }
        each.sort();
        each
    };
    let timings = |a: &Ask<'_>| timings_on(&scheduler, &pool, a);
    let rotation = timings(&unbound);
    let binding = timings(&bound);
    // The same pool with quota observed on every account: plain rotation, then RT-6.
    observe_quota(&scheduler, n);
    let with_quota = timings(&unbound);
    // One account in ten with no usable token: those are looked at one by one.
    for id in (1..=n as i64).step_by(10) {
        scheduler.set_credential_block(id, Some(i64::MAX));
    }
    let some_blocked = timings(&unbound);
    let weighted_scheduler = Scheduler::new(
        Settings { quota_weighted: true, ..Settings::default() },
        Arc::new(SystemClock),
        store::Writer::discard(),
    );
    let weighted_pool = PoolRoutes::new(ModelPolicy::default(), accounts(&weighted_scheduler, n, 30));
    observe_quota(&weighted_scheduler, n);
    let weighted = timings_on(&weighted_scheduler, &weighted_pool, &unbound);
    // Baseline: the cheapest possible choice over the same list.
    let next = AtomicUsize::new(0);
    let list = pool.accounts();
    let mut base = Vec::with_capacity(DECISIONS);
    let mut sink = 0i64;
    for _ in 0..DECISIONS {
        let t = Instant::now();
        let a = &list[next.fetch_add(1, Ordering::Relaxed) % list.len()];
        sink = sink.wrapping_add(std::hint::black_box(a.id));
        base.push(t.elapsed());
    }
    base.sort();
    std::hint::black_box(sink);
    println!("selection, {n} accounts in one pool ({DECISIONS} decisions each, lease taken and released):");
    for (name, t) in [
        ("rotation", &rotation),
        ("kept binding", &binding),
        ("rotation, quota data on all", &with_quota),
        ("rotation, 1 in 10 blocked", &some_blocked),
        ("quota-weighted rotation (RT-6)", &weighted),
    ] {
        println!(
            "  {name:<32} p50 {:>6.2} us  p99 {:>6.2} us   (baseline round robin p50 {:.3} us)",
            us(percentile(t, 0.5)),
            us(percentile(t, 0.99)),
            us(percentile(&base, 0.5)),
        );
    }
    let p50 = [&rotation, &with_quota, &some_blocked, &weighted]
        .iter()
        .map(|t| us(percentile(t, 0.5)))
        .fold(0.0, f64::max);
    println!("  target <= 5 us per decision: {}", if p50 <= 5.0 { "met" } else { "MISSED" });
}

/// Nanoseconds since `origin`, for handing instants between tasks.
fn stamp(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

/// The queue-to-admit harness: `CLIENTS` tasks take a slot with `acquire` (which returns the
/// slot's index and a guard), hold it briefly, and release it; the latency measured is from a
/// slot's release to the next holder having it.
async fn handoff<A, F, G>(acquire: A) -> Vec<Duration>
where
    A: Fn() -> F + Clone + Send + 'static,
    F: std::future::Future<Output = (usize, G)> + Send,
    G: Send,
{
    let origin = Instant::now();
    let released: Arc<Vec<AtomicU64>> = Arc::new((0..=SLOTS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (acquire, released, done) = (acquire.clone(), Arc::clone(&released), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while done.load(Ordering::Relaxed) < HANDOFFS {
                let (id, guard) = acquire().await;
                let at = released[id].load(Ordering::Acquire);
                if at != 0 {
                    latencies.push(Duration::from_nanos(stamp(origin).saturating_sub(at)));
                }
                // a little work while holding the slot
                tokio::task::yield_now().await;
                done.fetch_add(1, Ordering::Relaxed);
                released[id].store(stamp(origin), Ordering::Release);
                drop(guard);
                tokio::task::yield_now().await;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all
}

/// SubLane's scheduler: decide, wait in the pool's queue, decide again with the reserved slot.
async fn handoff_scheduler() -> Vec<Duration> {
    let scheduler = Scheduler::new(
        Settings { queue_capacity: CLIENTS, queue_timeout: Duration::from_secs(60), ..Settings::default() },
        Arc::new(SystemClock),
        store::Writer::discard(),
    );
    let pool = Arc::new(PoolRoutes::new(ModelPolicy::default(), accounts(&scheduler, SLOTS, 1)));
    let stop = CancellationToken::new();
    handoff(move || {
        let (scheduler, pool, stop) = (Arc::clone(&scheduler), Arc::clone(&pool), stop.clone());
        async move {
            let a = ask(None);
            let mut reserved = None;
            loop {
                match scheduler.decide(&pool, &a, reserved.take()).0 {
                    Step::Go(lease) => break (lease.account().id as usize, lease),
                    Step::Wait(mut t) => {
                        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                        reserved = t.wait(deadline, stop.cancelled()).await.unwrap();
                    }
                    Step::Refuse(r) => panic!("{r:?}"),
                }
            }
        }
    })
    .await
}

/// The baseline: one fair tokio semaphore per slot, taken in turn.
async fn handoff_semaphores() -> Vec<Duration> {
    let semaphores: Arc<Vec<Arc<tokio::sync::Semaphore>>> =
        Arc::new((0..=SLOTS).map(|_| Arc::new(tokio::sync::Semaphore::new(1))).collect());
    let next = Arc::new(AtomicUsize::new(0));
    handoff(move || {
        let (semaphores, next) = (Arc::clone(&semaphores), Arc::clone(&next));
        async move {
            let id = 1 + next.fetch_add(1, Ordering::Relaxed) % SLOTS;
            (id, Arc::clone(&semaphores[id]).acquire_owned().await.unwrap())
        }
    })
    .await
}

/// BUD-4's per-request cost: `check` then `record`, keys taken in turn, 2 % failed.
fn breaker() {
    const KEYS: i64 = 1_000;
    const REQUESTS: i64 = 2_000_000;
    let b = sublane::breaker::Breaker::default();
    let t0 = 1_900_000_000_000_i64;
    let title = format!("key circuit breaker, {KEYS} keys, 2 % failed ({REQUESTS} requests, best of 3):");
    against_a_counter(&title, "check + record", KEYS, REQUESTS, |i| {
        let (key, now) = (i % KEYS, t0 + i / 1_000);
        b.check(key, now).unwrap();
        std::hint::black_box(b.record(key, (i / KEYS) % 50 == 0, now));
    });
}

/// Runs `one` for request `0..requests` and the least per-key accounting (one counter per key in
/// a mutexed map) as many times, three rounds interleaved, and prints the best of each.
fn against_a_counter(title: &str, what: &str, keys: i64, requests: i64, mut one: impl FnMut(i64)) {
    use std::{collections::HashMap, sync::Mutex};
    let base: Mutex<HashMap<i64, u64>> = Mutex::new(HashMap::new());
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let start = Instant::now();
        for i in 0..requests {
            one(i);
        }
        ours.push(start.elapsed().as_nanos() as f64 / requests as f64);
        let start = Instant::now();
        for i in 0..requests {
            *base.lock().unwrap().entry(i % keys).or_default() += 1;
        }
        theirs.push(start.elapsed().as_nanos() as f64 / requests as f64);
    }
    let (ours, theirs) =
        (ours.iter().cloned().fold(f64::MAX, f64::min), theirs.iter().cloned().fold(f64::MAX, f64::min));
    println!("{title}");
    println!("  {what:<18} {ours:>6.1} ns per request");
    println!("  mutexed counter    {theirs:>6.1} ns per request   (baseline)");
    println!(
        "  ratio to baseline  {:.2}x; share of a 100 us proxy overhead: {:.3} %",
        ours / theirs,
        ours / 1000.0
    );
}

/// BUD-2's per-request cost with three budgets in force on every call (its key's, its member's,
/// the workspace's): `check` before, `charge` after.
fn budgets() {
    use sublane::budgets::{Budgets, Metric, Policy, Prices, Subject, Window, window::DEFAULT_ZONE};
    const KEYS: i64 = 1_000;
    const REQUESTS: i64 = 1_000_000;
    let b = Budgets::new(DEFAULT_ZONE, Prices::default());
    let mut policies = vec![Policy {
        id: 0,
        subject: Subject::Workspace,
        metric: Metric::TotalTokens,
        window: Window::Day,
        limit: i64::MAX,
    }];
    for k in 0..KEYS {
        let limit = i64::MAX;
        policies.push(Policy {
            id: 1 + k,
            subject: Subject::ApiKey(k),
            metric: Metric::Requests,
            window: Window::Day,
            limit,
        });
        policies.push(Policy {
            id: 10_000 + k,
            subject: Subject::Member(k),
            metric: Metric::Credits,
            window: Window::Month,
            limit,
        });
    }
    b.install(policies);
    let usage = sublane::records::Usage { input: Some(120), output: Some(7), cached: Some(64) };
    let now = chrono::DateTime::from_timestamp(1_900_000_000, 0).unwrap();
    let title =
        format!("budgets, 3 in force per call among {} ({REQUESTS} requests, best of 3):", 2 * KEYS + 1);
    against_a_counter(&title, "check + charge", KEYS, REQUESTS, |i| {
        let key = i % KEYS;
        std::hint::black_box(b.check(key, key, now).refused);
        std::hint::black_box(b.charge(key, key, "gpt-5.1-codex", true, &usage, now));
    });
}

fn main() {
    // the usual pool size, then performance goal 4's (10,000 accounts in one pool)
    selection(ACCOUNTS);
    selection(10 * ACCOUNTS);
    breaker();
    budgets();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // interleaved rounds, so both see the same machine state
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        ours.extend(rt.block_on(handoff_scheduler()));
        base.extend(rt.block_on(handoff_semaphores()));
    }
    ours.sort();
    base.sort();
    println!(
        "queue-to-admit after a release, {CLIENTS} clients over {SLOTS} one-slot accounts ({} hand-offs):",
        ours.len()
    );
    println!(
        "  scheduler queue   p50 {:>6.2} us  p99 {:>7.2} us",
        us(percentile(&ours, 0.5)),
        us(percentile(&ours, 0.99))
    );
    println!(
        "  tokio semaphores  p50 {:>6.2} us  p99 {:>7.2} us   (baseline)",
        us(percentile(&base, 0.5)),
        us(percentile(&base, 0.99))
    );
    println!(
        "  ratio to baseline p50 {:.2}x  p99 {:.2}x",
        us(percentile(&ours, 0.5)) / us(percentile(&base, 0.5)),
        us(percentile(&ours, 0.99)) / us(percentile(&base, 0.99))
    );
}
