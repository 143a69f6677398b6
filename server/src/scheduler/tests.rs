//! The scheduler on its own: permits, FIFO hand-off, live limits, queue timeouts on paused time,
//! cancellation, binding, and the account state through decisions (a fake clock for stored
//! deadlines).

use std::{sync::Arc, time::Duration};

use app::model::{CredentialInput, ModelPolicy, Provider};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::{clock::FakeClock, credentials::TokenCell, directory::PoolRoutes};

const CODEX: &[Provider] = &[Provider::Codex];

struct Bed {
    scheduler: Arc<Scheduler>,
    pool: PoolRoutes,
    clock: FakeClock,
}

fn bed(accounts: &[(i64, i64, u32)], settings: Settings) -> Bed {
    let clock = FakeClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let scheduler = Scheduler::new(settings, Arc::new(clock.clone()), store::Writer::discard());
    let accounts = accounts
        .iter()
        .map(|&(id, priority, max)| {
            Arc::new(Account {
                id,
                provider: Provider::Codex,
                priority,
                max_concurrency: max,
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
        .collect();
    Bed { scheduler, pool: PoolRoutes::new(ModelPolicy::default(), accounts), clock }
}

fn ask(conversation: Option<&str>) -> Ask<'static> {
    Ask {
        member_id: 1,
        pool_id: 1,
        model: "m",
        supported: CODEX,
        only: None,
        conversation: conversation.map(ConversationKey::session),
        parent: None,
        continuation: false,
        pin: None,
        avoid: &[],
        queued: None,
    }
}

impl Bed {
    /// A lease whose upstream accepted the request (a new conversation is bound).
    fn go(&self, ask: &Ask<'_>) -> Lease {
        let mut l = self.lease(ask);
        l.accepted();
        l
    }

    /// A lease, the upstream not having answered yet.
    fn lease(&self, ask: &Ask<'_>) -> Lease {
        match self.scheduler.decide(&self.pool, ask, None).0 {
            Step::Go(l) => l,
            Step::Refuse(r) => panic!("refused: {r:?}"),
            Step::Wait(_) => panic!("told to wait"),
        }
    }

    fn wait(&self, ask: &Ask<'_>) -> Ticket {
        match self.scheduler.decide(&self.pool, ask, None).0 {
            Step::Wait(t) => t,
            _ => panic!("expected to wait"),
        }
    }

    fn refusal(&self, ask: &Ask<'_>) -> Refusal {
        match self.scheduler.decide(&self.pool, ask, None).0 {
            Step::Refuse(r) => r,
            _ => panic!("expected a refusal"),
        }
    }

    /// Waits with `ticket`, then decides again with the reserved slot.
    async fn admitted(&self, mut ticket: Ticket, ask: &Ask<'_>) -> Lease {
        let deadline = Instant::now() + self.scheduler.settings().queue_timeout;
        let reserved = ticket.wait(deadline, CancellationToken::new().cancelled()).await.unwrap();
        assert!(reserved.is_some(), "a slot, not just a hint");
        match self.scheduler.decide(&self.pool, ask, reserved).0 {
            Step::Go(l) => l,
            _ => panic!("a reserved slot must admit"),
        }
    }
}

#[tokio::test]
async fn permits_cap_each_account_and_released_slots_go_to_the_oldest_waiter() {
    let b = bed(&[(1, 0, 2)], Settings::default());
    let a = ask(None);
    let l1 = b.go(&a);
    let l2 = b.go(&a);
    assert_eq!(b.scheduler.in_flight(1), 2);
    let first = b.wait(&a);
    let second = b.wait(&a);
    assert_eq!(b.scheduler.queue_depth(1), 2);
    drop(l1);
    // the slot went to the first waiter, not back to the pool: a newcomer must wait too
    assert_eq!(b.scheduler.in_flight(1), 2);
    let newcomer = b.wait(&a);
    let l3 = b.admitted(first, &a).await;
    assert_eq!(b.scheduler.in_flight(1), 2, "the reserved slot is not counted twice");
    drop(l2);
    let l4 = b.admitted(second, &a).await;
    drop((l3, l4));
    let l5 = b.admitted(newcomer, &a).await;
    drop(l5);
    assert_eq!((b.scheduler.in_flight(1), b.scheduler.queue_depth(1)), (0, 0));
}

#[tokio::test]
async fn the_queue_is_bounded() {
    let settings = Settings { queue_capacity: 2, ..Settings::default() };
    let b = bed(&[(1, 0, 1)], settings);
    let a = ask(None);
    let _held = b.go(&a);
    let _w1 = b.wait(&a);
    let _w2 = b.wait(&a);
    assert_eq!(b.refusal(&a), Refusal::QueueFull);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_times_out_after_the_queue_timeout_exactly() {
    let b = bed(&[(1, 0, 1)], Settings::default());
    let a = ask(None);
    let _held = b.go(&a);
    let mut ticket = b.wait(&a);
    let started = Instant::now();
    let deadline = started + DEFAULT_QUEUE_TIMEOUT;
    let r = ticket.wait(deadline, CancellationToken::new().cancelled()).await;
    assert!(matches!(r, Err(Refusal::WaitTimeout)));
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    drop(ticket);
    assert_eq!(b.scheduler.queue_depth(1), 0, "a timed-out waiter leaves the queue");
}

#[tokio::test]
async fn cancelled_and_shut_down_waiters_leave_at_once_and_never_swallow_a_slot() {
    let b = bed(&[(1, 0, 1)], Settings::default());
    let a = ask(None);
    let held = b.go(&a);
    let gone = b.wait(&a);
    drop(gone); // client cancel
    assert_eq!(b.scheduler.queue_depth(1), 0);
    // a slot handed to a waiter that then goes away is passed on, not lost
    let vanishing = b.wait(&a);
    let next = b.wait(&a);
    drop(held);
    drop(vanishing);
    let l = b.admitted(next, &a).await;
    drop(l);
    assert_eq!(b.scheduler.in_flight(1), 0);
    // shutdown ends waiting at once
    let _held = b.go(&a);
    let mut ticket = b.wait(&a);
    let stop = CancellationToken::new();
    stop.cancel();
    let r = ticket.wait(Instant::now() + Duration::from_secs(30), stop.cancelled()).await;
    assert!(matches!(r, Err(Refusal::ShuttingDown)));
    drop(ticket);
    assert_eq!(b.scheduler.queue_depth(1), 0);
}

#[tokio::test]
async fn a_lowered_limit_interrupts_nothing_and_a_raised_one_wakes_waiters() {
    let b = bed(&[(1, 0, 3)], Settings::default());
    let a = ask(None);
    let leases: Vec<Lease> = (0..3).map(|_| b.go(&a)).collect();
    b.scheduler.set_limit(1, 1, 1);
    let waiter = b.wait(&a);
    let mut leases = leases.into_iter();
    drop(leases.next());
    drop(leases.next());
    assert_eq!(b.scheduler.in_flight(1), 1, "releases over the new limit are not handed on");
    assert_eq!(b.scheduler.queue_depth(1), 1);
    b.scheduler.set_limit(1, 2, 2);
    let l = b.admitted(waiter, &a).await;
    assert_eq!(b.scheduler.in_flight(1), 2);
    drop((l, leases));
    assert_eq!(b.scheduler.in_flight(1), 0);
}

#[tokio::test]
async fn waking_everyone_lets_waiters_decide_again_in_their_place() {
    let b = bed(&[(1, 0, 1)], Settings::default());
    let a = ask(None);
    let held = b.go(&a);
    let mut older = b.wait(&a);
    let mut younger = b.wait(&a);
    b.scheduler.wake_all();
    assert_eq!(b.scheduler.queue_depth(1), 2, "waking keeps every place");
    let later = Instant::now() + Duration::from_secs(1);
    for t in [&mut older, &mut younger] {
        let r = t.wait(later, CancellationToken::new().cancelled()).await;
        assert!(matches!(r, Ok(None)), "a hint, no slot");
    }
    assert_eq!(b.scheduler.in_flight(1), 1, "nothing was reserved");
    // The younger one decides again first and waits again, in its old place behind the older.
    let again =
        |t: &Ticket| match b.scheduler.decide(&b.pool, &Ask { queued: Some(t.place()), ..ask(None) }, None).0
        {
            Step::Wait(t) => t,
            _ => panic!("still full"),
        };
    let younger_again = again(&younger);
    drop(younger); // an old ticket no longer owns the place
    assert_eq!(b.scheduler.queue_depth(1), 2);
    let older_again = again(&older);
    drop(older);
    drop(held);
    let l = b.admitted(older_again, &a).await;
    assert_eq!(b.scheduler.queue_depth(1), 1, "the freed slot went to the older waiter");
    drop(l);
    drop(b.admitted(younger_again, &a).await);
    assert_eq!((b.scheduler.in_flight(1), b.scheduler.queue_depth(1)), (0, 0));
}

#[tokio::test]
async fn a_bound_waiter_gets_only_its_account_and_unbound_ones_take_any() {
    let b = bed(&[(1, 0, 1), (2, 0, 1)], Settings::default());
    let conv = ask(Some("c"));
    let on_conv = b.go(&conv);
    let bound_to = on_conv.account().id;
    let other = b.go(&ask(None));
    assert_ne!(other.account().id, bound_to);
    let bound_waiter = b.wait(&conv);
    let free_waiter = b.wait(&ask(None));
    // the other account frees first: the unbound waiter (younger) gets it, the bound one waits on
    drop(other);
    let l = b.admitted(free_waiter, &ask(None)).await;
    assert_ne!(l.account().id, bound_to);
    assert_eq!(b.scheduler.queue_depth(1), 1);
    drop(on_conv);
    let l2 = b.admitted(bound_waiter, &conv).await;
    assert_eq!(l2.account().id, bound_to);
}

#[tokio::test]
async fn cooldowns_follow_the_clock_and_a_model_cooldown_admits_one_probe() {
    let b = bed(&[(1, 0, 10)], Settings::default());
    let a = ask(Some("c"));
    let mut l = b.go(&a);
    l.settle(Verdict::RateLimited(Some(Duration::from_secs(20))));
    drop(l);
    assert_eq!(b.refusal(&a), Refusal::AccountCooling(20));
    assert_eq!(b.refusal(&ask(None)), Refusal::UpstreamQuotaExhausted(20));
    b.clock.advance(chrono::Duration::seconds(19));
    assert_eq!(b.refusal(&a), Refusal::AccountCooling(1));
    b.clock.advance(chrono::Duration::seconds(1));
    drop(b.go(&a));
    // three failures cool the model for 10 s
    for _ in 0..3 {
        b.go(&a).settle(Verdict::ModelFailure);
    }
    assert_eq!(b.refusal(&a), Refusal::ModelCooling(10));
    b.clock.advance(chrono::Duration::seconds(10));
    let probe = b.lease(&a);
    assert_eq!(b.refusal(&a), Refusal::ModelCooling(state::PROBE_RETRY_AFTER_SECS), "one probe at a time");
    // a probe that ends without a verdict (cancel) lets the next request probe
    drop(probe);
    // CD-4: the probe is settled as soon as the upstream accepts it, not when its stream ends
    let mut probe = b.lease(&a);
    assert!(matches!(b.scheduler.decide(&b.pool, &a, None).0, Step::Refuse(_)));
    probe.accepted();
    let meanwhile = b.go(&a);
    drop(b.go(&a));
    probe.settle(Verdict::Success);
    drop((probe, meanwhile));
}

#[tokio::test]
async fn rotation_reports_exclusions_and_prefers_the_top_tier_with_room() {
    let b = bed(&[(1, 5, 1), (2, 5, 1), (3, 0, 1)], Settings::default());
    let a = ask(None);
    let (step, d) = b.scheduler.decide(&b.pool, &a, None);
    assert_eq!(d, RoutingDecision::rotation(2, Excluded::default()));
    let Step::Go(l1) = step else { panic!() };
    let l2 = b.go(&a);
    assert_eq!(
        [l1.account().id, l2.account().id].iter().copied().collect::<std::collections::BTreeSet<_>>(),
        [1, 2].into()
    );
    // the top tier is full: the next tier with room serves
    let (step, d) = b.scheduler.decide(&b.pool, &a, None);
    let Step::Go(l3) = step else { panic!() };
    assert_eq!(l3.account().id, 3);
    assert_eq!(d.excluded.capacity, 2);
    assert_eq!((d.candidates, d.rule), (1, Rule::UniformRotation));
    // no Claude account at all: the pool does not serve the request (404, seed 002); one out of
    // service (left out of routing): none available now (503), and counted unavailable (EXP-1)
    let other = Ask { supported: &[Provider::Claude], ..ask(None) };
    assert_eq!(b.refusal(&other), Refusal::ModelNotFound);
    let accounts = b.pool.accounts().to_vec();
    let pool = PoolRoutes::new(ModelPolicy::default(), accounts).with_offline(Provider::Claude, 1);
    let (step, d) = b.scheduler.decide(&pool, &other, None);
    assert!(matches!(step, Step::Refuse(Refusal::NoAccount)));
    assert_eq!(d.excluded, Excluded { model_support: 3, unavailable: 1, ..Excluded::default() });
}

/// Hundreds of tasks on two threads deciding, waiting, giving up and releasing at random: no
/// account ever holds more leases than its limit, and every slot and queue place comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_contention_never_exceeds_a_limit_and_leaks_nothing() {
    use std::sync::atomic::{AtomicU32, Ordering};

    let limits = [1u32, 2, 3, 1];
    let settings = Settings { queue_capacity: 1000, ..Settings::default() };
    let accounts: Vec<(i64, i64, u32)> =
        limits.iter().enumerate().map(|(i, l)| (i as i64 + 1, (i % 2) as i64, *l)).collect();
    let b = Arc::new(bed(&accounts, settings));
    let held: Arc<Vec<AtomicU32>> = Arc::new((0..=limits.len()).map(|_| AtomicU32::new(0)).collect());
    let mut tasks = Vec::new();
    for t in 0..300u64 {
        let (b, held) = (Arc::clone(&b), Arc::clone(&held));
        tasks.push(tokio::spawn(async move {
            let mut next = xorshift(t);
            for _ in 0..20 {
                let conv = format!("c{}", next() % 8);
                let ask = Ask {
                    conversation: (next().is_multiple_of(3)).then(|| ConversationKey::session(&conv)),
                    ..ask(None)
                };
                let patience = Duration::from_micros(next() % 3_000);
                let mut reserved = None;
                let lease = loop {
                    match b.scheduler.decide(&b.pool, &ask, reserved.take()).0 {
                        Step::Go(l) => break Some(l),
                        Step::Refuse(_) => break None,
                        Step::Wait(mut ticket) => {
                            let deadline = Instant::now() + patience;
                            match ticket.wait(deadline, CancellationToken::new().cancelled()).await {
                                Ok(r) => reserved = r,
                                Err(_) => break None,
                            }
                        }
                    }
                };
                let Some(mut lease) = lease else { continue };
                let id = lease.account().id as usize;
                let now = held[id].fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= limits[id - 1], "account {id} held {now} leases over its limit");
                for _ in 0..(next() % 4) {
                    tokio::task::yield_now().await;
                }
                held[id].fetch_sub(1, Ordering::SeqCst);
                if next().is_multiple_of(2) {
                    lease.settle(Verdict::Success);
                }
                drop(lease);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for (i, _) in limits.iter().enumerate() {
        assert_eq!(b.scheduler.in_flight(i as i64 + 1), 0, "account {} leaked a slot", i + 1);
    }
    assert_eq!(b.scheduler.queue_depth(1), 0);
}

/// An account as a directory snapshot would hold it.
fn account(
    s: &Scheduler,
    id: i64,
    provider: Provider,
    pools: Vec<i64>,
    generation: u64,
    revision: i64,
) -> Arc<Account> {
    Arc::new(Account {
        id,
        provider,
        priority: 0,
        max_concurrency: 1,
        revision,
        quota_revision: 0,
        pools,
        slot: s.register(id),
        generation,
        tokens: TokenCell::fixed(id, Provider::Codex, CredentialInput::ApiKey { api_key: "k".into() }),
    })
}

fn in_pool(pool: i64, a: Ask<'static>) -> Ask<'static> {
    Ask { pool_id: pool, ..a }
}

/// Issue 9 item 1: an account moved to another pool (or disabled) no longer hands its freed
/// slots to the old pool's waiters; the pool it joined gets them.
#[tokio::test]
async fn freed_slots_follow_pool_membership_changes() {
    let clock = FakeClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let s = Scheduler::new(Settings::default(), Arc::new(clock), store::Writer::discard());
    let a1 = account(&s, 7, Provider::Codex, vec![1], 1, 1);
    let pool1 = PoolRoutes::new(ModelPolicy::default(), vec![Arc::clone(&a1)]);
    s.sync_directory([&a1].into_iter());
    let Step::Go(held) = s.decide(&pool1, &ask(None), None).0 else { panic!() };
    let Step::Wait(mut old_pool_waiter) = s.decide(&pool1, &ask(None), None).0 else { panic!() };
    // The admin moves the account to pool 2, where a request waits too.
    let a2 = account(&s, 7, Provider::Codex, vec![2], 2, 1);
    let pool1_now = PoolRoutes::new(ModelPolicy::default(), vec![]);
    let pool2 = PoolRoutes::new(ModelPolicy::default(), vec![Arc::clone(&a2)]);
    s.sync_directory([&a2].into_iter());
    let Step::Wait(mut new_pool_waiter) = s.decide(&pool2, &in_pool(2, ask(None)), None).0 else { panic!() };
    drop(held);
    let later = Instant::now() + Duration::from_secs(1);
    let got = new_pool_waiter.wait(later, CancellationToken::new().cancelled()).await.unwrap();
    assert!(got.is_some(), "the pool the account joined gets its slot");
    let Step::Go(l) = s.decide(&pool2, &in_pool(2, ask(None)), got).0 else { panic!() };
    drop(new_pool_waiter); // served: its place goes
    // The old pool's waiter was told to look again (the change may matter), never handed the slot.
    let hint = old_pool_waiter.wait(later, CancellationToken::new().cancelled()).await.unwrap();
    assert!(hint.is_none());
    let step = s.decide(&pool1_now, &Ask { queued: Some(old_pool_waiter.place()), ..ask(None) }, None).0;
    assert!(matches!(step, Step::Refuse(Refusal::ModelNotFound)), "the pool has no account left");
    // Disabled (left out of the snapshot): its freed slot goes to nobody.
    let Step::Wait(waiter2) = s.decide(&pool2, &in_pool(2, ask(None)), None).0 else { panic!() };
    s.sync_directory(std::iter::empty());
    drop(l);
    assert_eq!(s.in_flight(7), 0, "the slot is simply free, not handed around");
    drop(waiter2);
    assert_eq!(s.queue_depth(2), 0);
}

/// Issue 9 item 2: a waiter held back by a cooldown is served when the cooldown ends, without
/// any release, and ahead of a newcomer.
#[tokio::test(start_paused = true)]
async fn a_waiter_is_served_when_a_cooldown_ends() {
    let b = bed(&[(1, 0, 1), (2, 0, 1)], Settings::default());
    let a = ask(None);
    let mut cooled = b.go(&a);
    let busy = b.go(&a);
    let cooled_id = cooled.account().id;
    cooled.settle(Verdict::RateLimited(Some(Duration::from_secs(5))));
    drop(cooled);
    let mut waiter = b.wait(&a);
    // 5 s later the cooldown is over: both clocks move (stored deadlines, timers).
    b.clock.advance(chrono::Duration::seconds(5));
    let got = waiter
        .wait(Instant::now() + Duration::from_secs(30), CancellationToken::new().cancelled())
        .await
        .unwrap();
    assert!(got.is_some(), "a slot of the account whose cooldown ended");
    let Step::Go(l) = b.scheduler.decide(&b.pool, &a, got).0 else { panic!() };
    assert_eq!(l.account().id, cooled_id);
    drop((l, busy));
}

/// Issue 9 item 3: a new conversation is bound only once the upstream accepts its first request.
#[tokio::test]
async fn a_new_conversation_is_bound_by_the_account_that_accepts_it() {
    let b = bed(&[(1, 0, 5), (2, 0, 5)], Settings::default());
    let conv = ask(Some("new"));
    let mut refused = b.lease(&conv);
    let first = refused.account().id;
    refused.settle(Verdict::RateLimited(None));
    drop(refused);
    assert_eq!(b.scheduler.binding_count(), 0, "no binding to an account that refused");
    // the account that refused is cooling: the request moves, and the binding is made there
    let second = b.go(&conv);
    let accepted_by = second.account().id;
    assert_ne!(accepted_by, first);
    drop(second);
    assert_eq!(b.scheduler.binding_count(), 1);
    for _ in 0..3 {
        assert_eq!(b.go(&conv).account().id, accepted_by, "later requests stay there");
    }
}

/// Issue 9 items 9 and 11: a credential pause answers with the credential code; an older
/// snapshot never resets newer state.
#[tokio::test]
async fn bound_codes_follow_the_block_and_revisions_never_go_back() {
    let b = bed(&[(1, 0, 5)], Settings::default());
    let conv = ask(Some("c"));
    b.go(&conv).settle(Verdict::CredentialsRejected(403));
    assert_eq!(b.refusal(&conv), Refusal::CredentialsPaused(403));
    b.scheduler.apply(1, 2, StateAction::Recover);
    b.go(&conv).settle(Verdict::RateLimited(Some(Duration::from_secs(60))));
    // The bed's pool still holds the account at revision 1: that must not wipe the limit.
    assert_eq!(b.refusal(&conv), Refusal::AccountCooling(60));
    assert_eq!(b.refusal(&ask(None)), Refusal::UpstreamQuotaExhausted(60));
}

/// Issue 9 item 9: with every account blocked, an unbound request hears the reason most of them
/// share, not whichever block ends soonest; its Retry-After is when the soonest block ends.
#[tokio::test]
async fn every_account_blocked_answers_with_the_dominant_reason() {
    let b = bed(&[(1, 0, 5), (2, 0, 5), (3, 0, 5)], Settings::default());
    let a = ask(None);
    let mut leases: Vec<Lease> = (0..3).map(|_| b.go(&a)).collect();
    let ids: Vec<i64> = leases.iter().map(|l| l.account().id).collect();
    leases[0].settle(Verdict::RateLimited(Some(Duration::from_secs(300))));
    leases[1].settle(Verdict::RateLimited(Some(Duration::from_secs(200))));
    leases[2].settle(Verdict::Overloaded(Some(Duration::from_secs(2))));
    drop(leases);
    assert_eq!(
        b.refusal(&a),
        Refusal::AccountCooling(2),
        "two rate limits outvote one overload, whose end (the soonest) is when to come back"
    );
    b.scheduler.apply(ids[2], 2, StateAction::Recover);
    let mut l = b.go(&a);
    l.settle(Verdict::RateLimited(None));
    drop(l);
    assert!(matches!(b.refusal(&a), Refusal::UpstreamQuotaExhausted(_)), "all three rate limited: BUD-5");
}

/// A pool mostly paused for its credentials is answered `no_available_account` (no cooldown to
/// wait out), yet says when the soonest of its blocks ends, for a call that already tried an
/// account and must tell its client whether to retry.
#[tokio::test]
async fn a_pool_paused_for_its_credentials_says_when_its_soonest_block_ends() {
    let b = bed(&[(1, 0, 5), (2, 0, 5), (3, 0, 5)], Settings::default());
    let a = ask(None);
    let mut leases: Vec<Lease> = (0..3).map(|_| b.go(&a)).collect();
    leases[0].settle(Verdict::CredentialsRejected(403));
    leases[1].settle(Verdict::CredentialsRejected(401));
    leases[2].settle(Verdict::Overloaded(Some(Duration::from_secs(2))));
    drop(leases);
    let r = b.refusal(&a);
    assert_eq!(r, Refusal::CredentialsPausedPool(2));
    assert_eq!((r.back_in(), r.wait_secs()), (Some(2), None), "no Retry-After of its own to give");
    assert_eq!(Refusal::NoAccount.back_in(), Some(u64::MAX));
}

/// An account both quota-spent (for 10 s) and rate limited (for 600 s) serves again only when
/// both are over: the pool's refusal says 600 s, not the quota's 10 (its code still follows the
/// quota, which comes first).
#[tokio::test]
async fn a_block_lasts_until_the_account_s_latest_account_wide_block_ends() {
    let b = bed(&[(1, 0, 5)], Settings::default());
    let a = ask(None);
    b.go(&a).settle(Verdict::RateLimited(Some(Duration::from_secs(600))));
    let now = b.scheduler.now();
    let mut spent = quota(now, Some(100.0), &[]);
    spent.account_until = now + 10_000;
    b.scheduler.set_quota(1, 0, Some(spent));
    let r = b.refusal(&a);
    assert_eq!(r.back_in(), Some(600), "{r:?}");
    assert_eq!(b.refusal(&ask(Some("c"))).wait_secs(), Some(600), "a conversation waits as long");
}

/// Issue 9 item 13: one rotation position per set of providers: alternating Codex and Claude
/// traffic still spreads over both Codex accounts.
#[tokio::test]
async fn rotation_is_fair_per_protocol() {
    let clock = FakeClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let s = Scheduler::new(Settings::default(), Arc::new(clock), store::Writer::discard());
    let accounts = vec![
        account(&s, 1, Provider::Codex, vec![1], 1, 1),
        account(&s, 2, Provider::Codex, vec![1], 1, 1),
        account(&s, 3, Provider::Claude, vec![1], 1, 1),
        account(&s, 4, Provider::Claude, vec![1], 1, 1),
    ];
    let pool = PoolRoutes::new(ModelPolicy::default(), accounts);
    let claude = Ask { supported: &[Provider::Claude], ..ask(None) };
    let mut codex_served = Vec::new();
    for _ in 0..4 {
        let Step::Go(l) = s.decide(&pool, &ask(None), None).0 else { panic!() };
        codex_served.push(l.account().id);
        drop(l);
        let Step::Go(l) = s.decide(&pool, &claude, None).0 else { panic!() };
        drop(l);
    }
    codex_served.sort();
    assert_eq!(codex_served, [1, 1, 2, 2]);
}

/// The stress test across two pools and two providers, with accounts moving between pools (and
/// out of them) while requests decide, wait and release: never over a limit, every slot and
/// queue place comes back, and no waiter is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_contention_with_membership_changes_never_exceeds_a_limit() {
    use std::sync::{
        Mutex as StdMutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    };

    let clock = FakeClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let settings = Settings { queue_capacity: 1000, ..Settings::default() };
    let s = Scheduler::new(settings, Arc::new(clock), store::Writer::discard());
    let providers = [Provider::Codex, Provider::Claude, Provider::Codex, Provider::Claude, Provider::Codex];
    // (pools of each account) for one generation; built into both pools' routes
    let scheduler = Arc::clone(&s);
    let build = move |generation: u64, layout: &[Vec<i64>]| -> (Vec<Arc<Account>>, [PoolRoutes; 2]) {
        let s = &scheduler;
        let accounts: Vec<Arc<Account>> = layout
            .iter()
            .enumerate()
            .map(|(i, pools)| {
                let id = i as i64 + 1;
                Arc::new(Account {
                    id,
                    provider: providers[i],
                    priority: 0,
                    max_concurrency: 1 + (i as u32 % 2),
                    revision: 1,
                    quota_revision: 0,
                    pools: pools.clone(),
                    slot: s.register(id),
                    generation,
                    tokens: TokenCell::fixed(
                        id,
                        Provider::Codex,
                        CredentialInput::ApiKey { api_key: "k".into() },
                    ),
                })
            })
            .collect();
        let pool = |p: i64| {
            let members = accounts.iter().filter(|a| a.pools.contains(&p)).cloned().collect();
            PoolRoutes::new(ModelPolicy::default(), members)
        };
        (accounts.clone(), [pool(1), pool(2)])
    };
    let layouts: Vec<Vec<Vec<i64>>> = vec![
        vec![vec![1], vec![1], vec![2], vec![2], vec![1, 2]],
        vec![vec![2], vec![1, 2], vec![1], vec![], vec![1]],
        vec![vec![1, 2], vec![2], vec![1, 2], vec![1], vec![]],
    ];
    let (accounts, pools) = build(1, &layouts[0]);
    s.sync_directory(accounts.iter());
    let current = Arc::new(StdMutex::new(Arc::new(pools)));
    let held: Arc<Vec<AtomicU32>> = Arc::new((0..=5).map(|_| AtomicU32::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let changer = {
        let (s, current, stop) = (Arc::clone(&s), Arc::clone(&current), Arc::clone(&stop));
        let build = build.clone();
        tokio::spawn(async move {
            let mut generation = 1;
            while !stop.load(Ordering::SeqCst) {
                generation += 1;
                let (accounts, pools) = build(generation, &layouts[generation as usize % layouts.len()]);
                *current.lock().unwrap() = Arc::new(pools);
                s.sync_directory(accounts.iter());
                tokio::time::sleep(Duration::from_micros(300)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for t in 0..200u64 {
        let (s, held, current) = (Arc::clone(&s), Arc::clone(&held), Arc::clone(&current));
        tasks.push(tokio::spawn(async move {
            let mut next = xorshift(t);
            for _ in 0..15 {
                let pool_id = 1 + (next() % 2) as i64;
                let supported: &'static [Provider] =
                    if next().is_multiple_of(2) { &[Provider::Codex] } else { &[Provider::Claude] };
                let conv = format!("c{}", next() % 6);
                let conversation = (next().is_multiple_of(3)).then(|| ConversationKey::session(&conv));
                let patience = Duration::from_micros(next() % 3_000);
                let mut reserved = None;
                let mut ticket: Option<Ticket> = None;
                let lease = loop {
                    let pools = Arc::clone(&current.lock().unwrap());
                    let ask = Ask {
                        pool_id,
                        supported,
                        conversation,
                        queued: ticket.as_ref().map(Ticket::place),
                        ..ask(None)
                    };
                    match s.decide(&pools[(pool_id - 1) as usize], &ask, reserved.take()).0 {
                        Step::Go(mut l) => {
                            l.accepted();
                            break Some(l);
                        }
                        Step::Refuse(_) => break None,
                        Step::Wait(t) => {
                            let t = ticket.insert(t);
                            match t
                                .wait(Instant::now() + patience, CancellationToken::new().cancelled())
                                .await
                            {
                                Ok(r) => reserved = r,
                                Err(_) => break None,
                            }
                        }
                    }
                };
                drop(ticket);
                let Some(lease) = lease else { continue };
                let id = lease.account().id as usize;
                let limit = lease.account().max_concurrency;
                let now = held[id].fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= limit, "account {id} held {now} leases over its limit {limit}");
                for _ in 0..(next() % 4) {
                    tokio::task::yield_now().await;
                }
                held[id].fetch_sub(1, Ordering::SeqCst);
                drop(lease);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    changer.await.unwrap();
    for id in 1..=5 {
        assert_eq!(s.in_flight(id), 0, "account {id} leaked a slot");
    }
    assert_eq!((s.queue_depth(1), s.queue_depth(2)), (0, 0));
}

/// A block that appears after a request queued still wakes it when it ends: the pool's timer
/// is armed when the block is set, not only when a waiter queues.
#[tokio::test(start_paused = true)]
async fn a_block_set_after_a_waiter_queued_still_wakes_it() {
    let b = bed(&[(1, 0, 1), (2, 0, 1)], Settings::default());
    let a = ask(None);
    let mut first = b.go(&a);
    let second = b.go(&a);
    let mut waiter = b.wait(&a); // nothing blocked yet: no timer
    let first_id = first.account().id;
    first.settle(Verdict::RateLimited(Some(Duration::from_secs(2))));
    drop(first); // its slot cannot go to the waiter: the account is cooling
    assert_eq!(b.scheduler.in_flight(first_id), 0);
    b.clock.advance(chrono::Duration::seconds(2));
    let got = waiter
        .wait(Instant::now() + Duration::from_secs(30), CancellationToken::new().cancelled())
        .await
        .unwrap();
    let Step::Go(l) = b.scheduler.decide(&b.pool, &a, got).0 else { panic!("served when the block ended") };
    assert_eq!(l.account().id, first_id);
    drop((l, second));
}

/// A request that already tried an account waits without being handed that account's slots
/// (no loop of reservations it cannot use), and keeps its place.
#[tokio::test(start_paused = true)]
async fn a_waiter_is_never_handed_an_account_it_already_tried() {
    let b = bed(&[(1, 0, 1), (2, 0, 1)], Settings::default());
    let a = ask(None);
    let tried = b.go(&a);
    let busy = b.go(&a);
    let tried_id = tried.account().id;
    let avoid = [tried_id];
    let moved = Ask { avoid: &avoid, ..ask(None) };
    let Step::Wait(mut waiter) = b.scheduler.decide(&b.pool, &moved, None).0 else { panic!() };
    let newcomer = b.wait(&a);
    drop(tried);
    // the tried account's slot went to the newcomer, not to the waiter that tried it
    assert_eq!(b.scheduler.in_flight(tried_id), 1);
    let r =
        waiter.wait(Instant::now() + Duration::from_millis(100), CancellationToken::new().cancelled()).await;
    assert!(matches!(r, Err(Refusal::WaitTimeout)), "{:?}", r.map(|r| r.is_some()));
    drop((waiter, newcomer, busy));
}

/// A small deterministic random stream per task (xorshift64), for the stress tests.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    }
}

/// A quota snapshot of one main window `used` % observed at `at` (unix ms), and per-model
/// remaining fractions.
fn quota(at: i64, used: Option<f64>, models: &[(&str, f64)]) -> crate::quota::QuotaLive {
    use crate::quota::observation::{ModelQuota, Snapshot, Window};
    let snapshot = Snapshot {
        windows: used
            .map(|u| Window {
                id: "primary".into(),
                main: true,
                used_percent: Some(u),
                window_minutes: Some(300),
                resets_at: None,
                limit_reached: false,
                observed_at: at,
            })
            .into_iter()
            .collect(),
        models: models
            .iter()
            .map(|(m, f)| ModelQuota {
                model: (*m).into(),
                remaining_fraction: Some(*f),
                resets_at: None,
                observed_at: at,
            })
            .collect(),
        observed_at: at,
        ..Snapshot::default()
    };
    crate::quota::QuotaLive::of(Arc::new(snapshot), at)
}

/// Picks per account id over `n` decisions, and the rule of the last one.
fn shares(b: &Bed, a: &Ask<'_>, n: usize) -> (std::collections::HashMap<i64, usize>, Rule) {
    let mut picks = std::collections::HashMap::new();
    let mut rule = Rule::UniformRotation;
    for _ in 0..n {
        let (step, d) = b.scheduler.decide(&b.pool, a, None);
        let Step::Go(l) = step else { panic!("no account") };
        *picks.entry(l.account().id).or_insert(0) += 1;
        rule = d.rule;
    }
    (picks, rule)
}

#[tokio::test]
async fn quota_weighted_rotation_follows_remaining_quota_and_falls_back_to_uniform() {
    let settings = Settings { quota_weighted: true, ..Settings::default() };
    let b = bed(&[(1, 0, 10), (2, 0, 10), (3, 0, 10)], settings);
    let now = b.scheduler.now();
    // remaining 60 %, 30 %, 10 %: shares within two points over many selections
    for (id, used) in [(1, 40.0), (2, 70.0), (3, 90.0)] {
        b.scheduler.set_quota(id, 0, Some(quota(now, Some(used), &[])));
    }
    let (picks, rule) = shares(&b, &ask(None), 10_000);
    assert_eq!(rule, Rule::QuotaWeightedRotation);
    for (id, want) in [(1, 0.6), (2, 0.3), (3, 0.1)] {
        let got = picks[&id] as f64 / 10_000.0;
        assert!((got - want).abs() < 0.02, "account {id}: {got} against {want}");
    }
    // one candidate without numbers: uniform for all
    b.scheduler.set_quota(3, 0, None);
    let (picks, rule) = shares(&b, &ask(None), 300);
    assert_eq!(rule, Rule::UniformRotation);
    assert!(picks.values().all(|n| *n == 100), "{picks:?}");
    // stale numbers: uniform
    b.scheduler.set_quota(3, 0, Some(quota(now, Some(90.0), &[])));
    b.clock.advance(chrono::TimeDelta::seconds(121));
    let (_, rule) = shares(&b, &ask(None), 3);
    assert_eq!(rule, Rule::UniformRotation, "stale data falls back to uniform rotation");
    // switched off (the default): uniform whatever the numbers
    let off = bed(&[(1, 0, 10), (2, 0, 10)], Settings::default());
    let now = off.scheduler.now();
    off.scheduler.set_quota(1, 0, Some(quota(now, Some(0.0), &[])));
    off.scheduler.set_quota(2, 0, Some(quota(now, Some(99.0), &[])));
    let (picks, rule) = shares(&off, &ask(None), 100);
    assert_eq!((rule, picks[&1], picks[&2]), (Rule::UniformRotation, 50, 50));
    // switched on later: the pool's index starts keeping the weights
    off.scheduler.set_settings(|s| s.quota_weighted = true);
    let (picks, rule) = shares(&off, &ask(None), 101);
    assert_eq!(rule, Rule::QuotaWeightedRotation);
    assert!(picks[&1] >= 99, "100 % left against 1 %: {picks:?}");
}

/// RT-6 with candidates over several words of the index: it adds up each word's weights at
/// once (whole, or less the few accounts that are busy, tried or of another tier), and debug
/// builds check every pick with whole-number weights against a sum taken one account at a
/// time. Shares follow the weights; accounts fill up and free, get new numbers (whole, then
/// fractions), and some miss a poll and go stale.
#[tokio::test]
async fn quota_weighted_rotation_over_hundreds_of_accounts_follows_the_weights_as_they_change() {
    let settings = Settings { quota_weighted: true, ..Settings::default() };
    // Highest priority first: 30 accounts with no usable token, then the tier that serves, at
    // positions 30..230 (four words, starting and ending inside one), then 70 more.
    let priority = |id: i64| match id {
        1..=30 => 2,
        31..=230 => 1,
        _ => 0,
    };
    let spec: Vec<(i64, i64, u32)> = (1..=300).map(|id| (id, priority(id), 1)).collect();
    let b = bed(&spec, settings);
    for id in 1..=30 {
        b.scheduler.set_credential_block(id, Some(i64::MAX));
    }
    let start = b.scheduler.now();
    let left = |id: i64| (id * 37 % 100 + 1) as f64;
    for id in 1..=300 {
        b.scheduler.set_quota(id, 0, Some(quota(start, Some(100.0 - left(id)), &[])));
    }
    let (picks, rule) = shares(&b, &ask(None), 20_000);
    assert_eq!(rule, Rule::QuotaWeightedRotation);
    assert!(picks.keys().all(|id| priority(*id) == 1), "only the serving tier");
    let total: f64 = (31..=230).map(left).sum();
    let distance: f64 = (31..=230)
        .map(|id| (picks.get(&id).copied().unwrap_or(0) as f64 / 20_000.0 - left(id) / total).abs())
        .sum();
    assert!(distance < 0.02, "shares off the weights by {distance} in all");

    let mut next = xorshift(7);
    let mut held: Vec<Lease> = Vec::new();
    let mut observed: Vec<i64> = vec![start; 301];
    let (mut whole, mut fractions, mut uniform) = (0, 0, 0);
    for round in 0..4_000 {
        let now = b.scheduler.now();
        // Whole numbers keep the debug builds' cross-check on; fractions come last.
        let used = |r: u64| if round > 2_000 { (r % 1000) as f64 / 10.0 } else { (r % 101) as f64 };
        if round % 150 == 0 {
            // A poll of every account; one in twenty misses the polls of a stretch of rounds,
            // long enough to go stale.
            for id in 31..=300 {
                if (id + round / 600) % 20 != 0 {
                    observed[id as usize] = now;
                    b.scheduler.set_quota(id, 0, Some(quota(now, Some(used(next())), &[])));
                }
            }
        }
        match next() % 8 {
            0 | 1 if held.len() < 60 => {
                let avoid: Vec<i64> = (0..next() % 4).map(|_| 31 + (next() % 200) as i64).collect();
                let a = Ask { avoid: &avoid, ..ask(None) };
                let (step, d) = b.scheduler.decide(&b.pool, &a, None);
                let Step::Go(l) = step else { panic!("round {round}: no account") };
                assert!(!avoid.contains(&l.account().id));
                assert_eq!(priority(l.account().id), 1);
                // (a stale account may be busy or tried, and the rest still weighted)
                let fresh =
                    (31..=230).all(|id| now - observed[id as usize] <= crate::quota::observation::FRESH_MS);
                if d.rule == Rule::QuotaWeightedRotation {
                    *(if round > 2_000 { &mut fractions } else { &mut whole }) += 1;
                } else {
                    assert!(!fresh, "round {round}: uniform with every account's numbers fresh");
                    uniform += 1;
                }
                held.push(l);
            }
            2 if !held.is_empty() => drop(held.swap_remove((next() % held.len() as u64) as usize)),
            3 => {
                let id = 31 + (next() % 270) as i64;
                observed[id as usize] = now;
                b.scheduler.set_quota(id, 0, Some(quota(now, Some(used(next())), &[])));
            }
            4 => b.clock.advance(chrono::TimeDelta::milliseconds((next() % 4_000) as i64)),
            _ => drop(b.scheduler.decide(&b.pool, &ask(None), None)),
        }
    }
    assert!(
        whole > 100 && fractions > 100 && uniform > 10,
        "picks: {whole} weighted with whole numbers, {fractions} with fractions, {uniform} uniform"
    );
}

#[tokio::test]
async fn quota_weighting_needs_one_observed_provider_and_uses_the_requested_antigravity_model() {
    let clock = FakeClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let settings = Settings { quota_weighted: true, ..Settings::default() };
    let s = Scheduler::new(settings, Arc::new(clock.clone()), store::Writer::discard());
    let now = s.now();
    // a Codex and an OpenAI API account in one tier: mixed providers, uniform
    let mixed = PoolRoutes::new(
        ModelPolicy::default(),
        vec![
            account(&s, 1, Provider::Codex, vec![1], 0, 1),
            account(&s, 2, Provider::OpenaiApi, vec![1], 0, 1),
        ],
    );
    s.set_quota(1, 0, Some(quota(now, Some(10.0), &[])));
    let both = [Provider::Codex, Provider::OpenaiApi];
    let a = Ask { supported: &both, ..ask(None) };
    let (_, d) = s.decide(&mixed, &a, None);
    assert_eq!(d.rule, Rule::UniformRotation);
    // Antigravity: the requested model's fraction, nothing else
    let ag = PoolRoutes::new(
        ModelPolicy::default(),
        vec![
            account(&s, 3, Provider::Antigravity, vec![1], 0, 1),
            account(&s, 4, Provider::Antigravity, vec![1], 0, 1),
        ],
    );
    s.set_quota(3, 0, Some(quota(now, Some(99.0), &[("g-pro", 0.9), ("g-flash", 0.1)])));
    s.set_quota(4, 0, Some(quota(now, Some(1.0), &[("g-pro", 0.1), ("g-flash", 0.9)])));
    let only_ag = [Provider::Antigravity];
    let pro = Ask { supported: &only_ag, model: "g-pro(high)", ..ask(None) };
    let mut on_3 = 0;
    for _ in 0..1000 {
        let (step, d) = s.decide(&ag, &pro, None);
        assert_eq!(d.rule, Rule::QuotaWeightedRotation);
        if matches!(step, Step::Go(l) if l.account().id == 3) {
            on_3 += 1;
        }
    }
    assert!((880..=920).contains(&on_3), "{on_3} of 1000 on the account with 90 % of g-pro left");
    // a model one of them has no number for: uniform
    let other = Ask { supported: &only_ag, model: "g-other", ..ask(None) };
    assert_eq!(s.decide(&ag, &other, None).1.rule, Rule::UniformRotation);
}

#[tokio::test]
async fn spent_quota_is_a_quota_exclusion_and_a_bound_conversation_hears_quota_exhausted() {
    let b = bed(&[(1, 0, 10), (2, 0, 10)], Settings::default());
    let now = b.scheduler.now();
    let l = b.go(&ask(Some("c")));
    let bound = l.account().id;
    drop(l);
    b.scheduler.set_quota(bound, 0, Some(quota(now, Some(100.0), &[])));
    assert!(matches!(
        b.scheduler.decide(&b.pool, &ask(Some("c")), None).0,
        Step::Refuse(Refusal::QuotaExhausted)
    ));
    let (step, d) = b.scheduler.decide(&b.pool, &ask(None), None);
    assert!(matches!(step, Step::Go(l) if l.account().id != bound));
    assert_eq!((d.excluded.quota, d.candidates), (1, 1));
    // an older quota revision never overwrites a newer one
    b.scheduler.set_quota(bound, 2, None);
    b.scheduler.set_quota(bound, 1, Some(quota(now, Some(100.0), &[])));
    assert!(matches!(b.scheduler.decide(&b.pool, &ask(Some("c")), None).0, Step::Go(_)));
}

/// A credential pause and a cooldown of about the same length on one account: which one the
/// account reports turns on whole seconds left, so the reason it is excluded for can change
/// while both last (EXP-1: unavailable, then cooldown or back). Every decision counts it as the
/// full scan would (debug builds check each decision against it).
#[test]
fn an_account_with_two_blocks_is_counted_by_the_one_it_reports_now() {
    let b = bed(&[(1, 1, 2), (2, 0, 10)], Settings::default());
    let a = ask(None);
    let mut first = b.lease(&a);
    let mut second = b.lease(&a);
    assert_eq!((first.account().id, second.account().id), (1, 1));
    first.settle(Verdict::RateLimited(Some(Duration::from_secs(300))));
    b.clock.advance(chrono::TimeDelta::milliseconds(500));
    second.settle(Verdict::CredentialsRejected(401));
    drop((first, second));
    let mut reasons = Vec::new();
    for _ in 0..4 {
        b.clock.advance(chrono::TimeDelta::milliseconds(300));
        let (step, decision) = b.scheduler.decide(&b.pool, &a, None);
        assert!(matches!(step, Step::Go(ref l) if l.account().id == 2));
        reasons.push((decision.excluded.cooldown, decision.excluded.unavailable));
    }
    // On a tie in whole seconds the rate limit (read first) is reported, otherwise the pause
    // (half a second longer): 300/300, 299/300, 299/300, 299/299 seconds left.
    assert_eq!(reasons, [(1, 0), (0, 1), (0, 1), (1, 0)]);
}

mod indexed_rotation {
    //! The pool index against the full scan it stands in for: random traffic over pools that
    //! span several bit words, with every kind of state change. Every decision of a debug build
    //! compares the index's exclusions and candidates with the full scan's, so any drift fails
    //! here (the assertion is in `decide`).

    use proptest::prelude::*;

    use super::*;
    use crate::quota::QuotaLive;

    const IDS: i64 = 150;

    #[derive(Debug, Clone)]
    enum Op {
        /// A decision over pool 0 or 1, with `avoid` ids tried before and a set of providers.
        Decide {
            pool: usize,
            avoid: Vec<i64>,
            providers: usize,
            only: bool,
            model: usize,
        },
        /// The lease at this index (modulo) ends with this verdict (0: success ...).
        End {
            lease: usize,
            verdict: u8,
        },
        Limit {
            id: i64,
            limit: u32,
        },
        Credentials {
            id: i64,
            blocked_for: Option<i64>,
        },
        Quota {
            id: i64,
            exhausted_for: i64,
            listed: bool,
        },
        /// The clock moves by this many ms (backwards too).
        Clock {
            ms: i64,
        },
        /// A new snapshot of pool 0: new limits and lifecycle revisions for some accounts.
        Reload {
            bump: Vec<i64>,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let id = 1..=IDS;
        prop_oneof![
            6 => (0..2usize, proptest::collection::vec(1..=IDS, 0..3), 0..3usize, any::<bool>(), 0..3usize)
                .prop_map(|(pool, avoid, providers, only, model)| Op::Decide { pool, avoid, providers, only, model }),
            4 => (any::<usize>(), 0..7u8).prop_map(|(lease, verdict)| Op::End { lease, verdict }),
            1 => (id.clone(), 0..3u32).prop_map(|(id, limit)| Op::Limit { id, limit }),
            1 => (id.clone(), proptest::option::of(-5_000..60_000i64))
                .prop_map(|(id, blocked_for)| Op::Credentials { id, blocked_for }),
            1 => (id.clone(), -5_000..60_000i64, any::<bool>())
                .prop_map(|(id, exhausted_for, listed)| Op::Quota { id, exhausted_for, listed }),
            2 => (-2_000..90_000i64).prop_map(|ms| Op::Clock { ms }),
            2 => (0..1_500i64).prop_map(|ms| Op::Clock { ms }),
            1 => proptest::collection::vec(1..=IDS, 0..20).prop_map(|bump| Op::Reload { bump }),
        ]
    }

    fn account(scheduler: &Scheduler, id: i64, limit: u32, revision: i64, generation: u64) -> Arc<Account> {
        // Three priority tiers; one account in five speaks the plain API.
        let provider = if id % 5 == 0 { Provider::OpenaiApi } else { Provider::Codex };
        Arc::new(Account {
            id,
            provider,
            priority: id % 3,
            max_concurrency: limit,
            revision,
            quota_revision: 0,
            pools: vec![1],
            slot: scheduler.register(id),
            generation,
            tokens: TokenCell::fixed(id, provider, CredentialInput::ApiKey { api_key: "k".into() }),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn the_index_decides_as_the_full_scan_does(ops in proptest::collection::vec(op(), 1..250)) {
            let clock = FakeClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
            // RT-6 on: the weighted pick reads the index's copy of each account's quota.
            let settings = Settings { quota_weighted: true, ..Settings::default() };
            let scheduler = Scheduler::new(settings, Arc::new(clock.clone()), store::Writer::discard());
            // The operator lists the plain API's models: "other" is unknown to those accounts.
            scheduler.set_catalogues(crate::catalogue::Catalogues::new([(
                Provider::OpenaiApi,
                vec!["m".to_owned(), "listed".to_owned()],
            )]));
            let mut limits: HashMap<i64, (u32, i64)> = (1..=IDS).map(|id| (id, (1 + (id % 2) as u32, 1))).collect();
            let mut generation = 1;
            let snapshot = |limits: &HashMap<i64, (u32, i64)>, generation: u64, ids: &mut dyn Iterator<Item = i64>| {
                let accounts = ids.map(|id| account(&scheduler, id, limits[&id].0, limits[&id].1, generation)).collect();
                PoolRoutes::new(ModelPolicy::default(), accounts)
            };
            let mut pools = [snapshot(&limits, generation, &mut (1..=IDS)), snapshot(&limits, generation, &mut (40..=IDS).step_by(2))];
            let mut leases: Vec<Lease> = Vec::new();
            for op in ops {
                let now = scheduler.now();
                match op {
                    Op::Decide { pool, avoid, providers, only, model } => {
                        let supported: &[Provider] = match providers {
                            0 => &[Provider::Codex],
                            1 => &[Provider::Codex, Provider::OpenaiApi],
                            _ => &[Provider::OpenaiApi],
                        };
                        let model = ["m", "listed", "other"][model];
                        let a = Ask {
                            avoid: &avoid,
                            supported,
                            only: only.then_some(supported[0]),
                            model,
                            ..ask(None)
                        };
                        if let (Step::Go(l), decision) = scheduler.decide(&pools[pool], &a, None) {
                            prop_assert!(decision.candidates >= 1);
                            prop_assert!(!avoid.contains(&l.account().id));
                            leases.push(l);
                        }
                    }
                    Op::End { lease, verdict } if !leases.is_empty() => {
                        let mut l = leases.swap_remove(lease % leases.len());
                        l.settle(match verdict {
                            0 => Verdict::Success,
                            1 => Verdict::RateLimited(Some(Duration::from_secs(20))),
                            2 => Verdict::Overloaded(None),
                            3 => Verdict::ModelFailure,
                            4 => Verdict::CredentialsRejected(401),
                            // As long as a credential pause: which of the two is reported
                            // depends on whole seconds left.
                            5 => Verdict::RateLimited(Some(Duration::from_secs(300))),
                            _ => Verdict::Neutral,
                        });
                    }
                    Op::End { .. } => {}
                    Op::Limit { id, limit } => {
                        generation += 1;
                        limits.get_mut(&id).unwrap().0 = limit;
                        scheduler.set_limit(id, limit, generation);
                    }
                    Op::Credentials { id, blocked_for } => {
                        scheduler.set_credential_block(id, blocked_for.map(|ms| now + ms));
                    }
                    Op::Quota { id, exhausted_for, listed } => {
                        let live = QuotaLive {
                            account_until: now + exhausted_for,
                            catalogue: listed.then(|| ["listed".to_owned()].into_iter().collect()),
                            remaining: Some(((exhausted_for % 100) as f64, now + 30_000)),
                            ..QuotaLive::default()
                        };
                        scheduler.set_quota(id, 0, Some(live));
                    }
                    Op::Clock { ms } => clock.advance(chrono::TimeDelta::milliseconds(ms)),
                    Op::Reload { bump } => {
                        generation += 1;
                        for id in bump {
                            let l = limits.get_mut(&id).unwrap();
                            *l = ((l.0 + 1) % 3, l.1 + 1);
                        }
                        pools[0] = snapshot(&limits, generation, &mut (1..=IDS));
                        // Half the time the directory sync comes before the next decision.
                        if generation % 2 == 0 {
                            scheduler.sync_directory(pools[0].accounts().iter());
                        }
                    }
                }
            }
        }
    }
}
