//! A serving thread that has just served a client keeps polling its sockets for a moment before
//! it goes to sleep, as Go's scheduler and the kernel's `haltpoll` idle governor do.
//!
//! Why: a proxied call waits twice, for the upstream's answer and, on a keep-alive connection,
//! for the client's next request, and both come back within tens of microseconds when the
//! upstream and the client are near. A thread that sleeps at each wait is woken by the kernel
//! when the bytes arrive, and waking a sleeping CPU (an interrupt to it; in a virtual machine, a
//! trip through the host) costs more than the call's own work: on a two-core VM, c=1 calls through
//! SubLane took 305-307 us at the median with sleeping threads and 161-171 us with polling ones,
//! against 135-165 us through a bare nginx proxy (`side-by-side.sh`, runs alternated).
//!
//! How: the runtime's park hook ([`before_park`]) asks this thread's [`Governor`] whether to
//! sleep. Within the window after the thread last served a client ([`active`]: one of its client
//! connections was polled to read or write, which is also how a WebSocket session, an answer
//! relayed from upstream and a connection's timers reach it), it wakes the [`keeper`] task
//! instead, so tokio polls its sockets and timers without blocking and comes back. Each such
//! turn yields the CPU first: a hint to the kernel, which lets another thread waiting on the same
//! CPU go first.
//!
//! The window adapts, so that polling is spent only where it pays: a sleep that ended (with a
//! client's bytes) within the longest window, counting the polling before it, doubles the
//! window, from a quarter of the longest up to the longest; one that lasted longer halves it, to
//! nothing below an eighth. So the window grows until it catches the thread's waits, and a
//! thread whose waits are long (model calls, streams with gaps of their own, an idle server)
//! soon polls not at all. An idle thread polls for at most one window after its last client.
//!
//! This relies on tokio polling its driver, without blocking, when the park hook left work to do
//! (tokio 1.51.4 and later; older ones skipped the driver, so the window was spent without
//! looking at the sockets).

use std::{
    cell::{Cell, RefCell},
    task::{Poll, Waker},
    time::{Duration, Instant},
};

/// What a serving thread has done since it started; read by tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Parks turned into a poll of the sockets.
    pub polled: u64,
    /// Parks that slept.
    pub slept: u64,
    /// The window now.
    pub window: Duration,
}

/// When one serving thread polls instead of sleeping (see the module doc). Time is given, not
/// read, so that its rules are tested exactly.
#[derive(Debug)]
pub struct Governor {
    /// The longest window (the setting); zero turns polling off.
    longest: Duration,
    window: Duration,
    /// The activity count at the last decision.
    seen: u64,
    /// Polling until then.
    until: Option<Instant>,
    /// Asleep since then, waiting for activity (a wake that brings none, such as a socket's
    /// room to write coming back, does not end the wait).
    asleep: Option<Instant>,
    /// The last wake since.
    woke: Option<Instant>,
    counts: Counts,
}

impl Governor {
    pub fn new(longest: Duration) -> Self {
        Governor {
            longest,
            window: Duration::ZERO,
            seen: 0,
            until: None,
            asleep: None,
            woke: None,
            counts: Counts::default(),
        }
    }

    /// The runtime is about to park at `now`, the thread's activity count at `activity`: whether
    /// it should poll once more instead of sleeping.
    pub fn polls(&mut self, activity: u64, now: Instant) -> bool {
        if activity != self.seen {
            self.seen = activity;
            if let (Some(asleep), Some(woke)) = (self.asleep.take(), self.woke.take()) {
                self.learn(woke.saturating_duration_since(asleep));
            }
            self.until = now.checked_add(self.window);
        }
        if self.until.is_some_and(|until| now < until) {
            self.counts.polled += 1;
            return true;
        }
        self.until = None;
        self.asleep.get_or_insert(now);
        self.counts.slept += 1;
        false
    }

    /// The runtime unparked at `now`.
    pub fn woke(&mut self, now: Instant) {
        if self.asleep.is_some() {
            self.woke = Some(now);
        }
    }

    /// A wait ended with a sleep of `slept`, after the thread had polled for the window: had the
    /// longest window caught it, the window doubles; else it halves, to nothing below an eighth.
    fn learn(&mut self, slept: Duration) {
        if self.window + slept <= self.longest {
            self.window = self.window.saturating_mul(2).clamp(self.longest / 4, self.longest);
        } else {
            self.window /= 2;
            if self.window < self.longest / 8 {
                self.window = Duration::ZERO;
            }
        }
        self.counts.window = self.window;
    }

    #[cfg(test)]
    pub fn counts(&self) -> Counts {
        self.counts
    }
}

thread_local! {
    /// Reads and writes of client connections on this thread, ever.
    static ACTIVITY: Cell<u64> = const { Cell::new(0) };
    /// This thread's governor, once its runtime has the hooks.
    static GOVERNOR: RefCell<Option<Governor>> = const { RefCell::new(None) };
    /// The keeper task, waiting to be woken.
    static KEEPER: RefCell<Option<Waker>> = const { RefCell::new(None) };
}

/// A client connection of this thread read or wrote (or tried to).
pub(super) fn active() {
    ACTIVITY.set(ACTIVITY.get().wrapping_add(1));
}

/// Gives `builder` (a serving thread's runtime) the hooks, with `longest` as the longest window,
/// and the [`keeper`] the thread must then spawn on it; nothing where `longest` is zero (off).
pub(super) fn hook(
    builder: &mut tokio::runtime::Builder,
    longest: Duration,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    if longest.is_zero() {
        return None;
    }
    builder.on_thread_park(move || before_park(longest)).on_thread_unpark(after_unpark);
    Some(keeper())
}

/// The runtime's `on_thread_park` hook: a thread that polls instead wakes the keeper, so tokio
/// polls its sockets without blocking (tokio does so whenever the hook left work to do).
fn before_park(longest: Duration) {
    let polls = GOVERNOR.with_borrow_mut(|governor| {
        governor.get_or_insert_with(|| Governor::new(longest)).polls(ACTIVITY.get(), Instant::now())
    });
    if polls {
        std::thread::yield_now();
        KEEPER.with_borrow(|keeper| keeper.as_ref().map(Waker::wake_by_ref));
    }
}

/// The runtime's `on_thread_unpark` hook.
fn after_unpark() {
    // (the time only after a sleep: every turn of polling unparks too)
    GOVERNOR.with_borrow_mut(|governor| {
        if let Some(g) = governor.as_mut().filter(|g| g.asleep.is_some()) {
            g.woke(Instant::now());
        }
    });
}

/// This thread's counts (zero where it has no governor).
#[cfg(test)]
pub fn counts() -> Counts {
    GOVERNOR.with_borrow(|governor| governor.as_ref().map(Governor::counts).unwrap_or_default())
}

/// The task [`before_park`] wakes; it never ends (it goes with its runtime).
async fn keeper() {
    std::future::poll_fn(|cx| {
        KEEPER.with_borrow_mut(|keeper| match keeper {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => *keeper = Some(cx.waker().clone()),
        });
        Poll::<()>::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONGEST: Duration = Duration::from_micros(100);

    /// A governor whose window is already `window`.
    fn polling_for(window: Duration) -> Governor {
        Governor { window, ..Governor::new(LONGEST) }
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_thread_sleeps_at_once_until_its_sleeps_turn_out_short() {
        let t0 = Instant::now();
        let mut g = Governor::new(LONGEST);
        assert!(!g.polls(1, t0), "no window yet: it sleeps");
        g.woke(t0 + us(40));
        assert!(g.polls(2, t0 + us(45)), "the wake brought bytes 40 us on: a short sleep opens the window");
        assert_eq!(g.counts().window, LONGEST / 4);
    }

    #[test]
    fn it_polls_for_the_window_after_each_activity_and_no_longer() {
        let t0 = Instant::now();
        let mut g = polling_for(us(50));
        assert!(g.polls(1, t0));
        assert!(g.polls(1, t0 + us(49)));
        assert!(g.polls(2, t0 + us(60)), "new activity: a new window from now");
        assert!(g.polls(2, t0 + us(109)));
        assert!(!g.polls(2, t0 + us(110)), "the window is over");
        assert!(!g.polls(2, t0 + us(111)), "and stays over without new activity");
        assert_eq!((g.counts().polled, g.counts().slept), (4, 2));
    }

    #[test]
    fn a_wake_that_brings_nothing_does_not_end_the_wait() {
        let t0 = Instant::now();
        let mut g = polling_for(us(50));
        assert!(g.polls(1, t0));
        assert!(!g.polls(1, t0 + us(50)));
        // (the socket's room to write came back)
        g.woke(t0 + us(60));
        assert!(!g.polls(1, t0 + us(61)), "no activity: back to sleep");
        g.woke(t0 + us(900));
        g.polls(2, t0 + us(901));
        assert_eq!(g.counts().window, us(25), "the wait was 850 us, not 10");
    }

    /// One wait: the thread saw activity `activity` at `start`, and the next bytes come `gap`
    /// later; it polls every microsecond until it sleeps or they come. The window it polled for.
    fn wait(g: &mut Governor, activity: u64, start: Instant, gap: Duration) -> Duration {
        let polls = g.polls(activity, start);
        let window = g.window;
        let mut now = start + us(1);
        if polls {
            while now < start + gap && g.polls(activity, now) {
                now += us(1);
            }
        }
        if now < start + gap {
            g.woke(start + gap);
        }
        window
    }

    #[test]
    fn short_sleeps_double_the_window_up_to_the_longest_and_long_ones_halve_it_to_nothing() {
        let t0 = Instant::now();
        let mut g = Governor::new(LONGEST);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // Bytes 60 us after the last: each sleep was short, until the window catches them.
        let windows: Vec<_> = (1..=5).map(|i| wait(&mut g, i, ms(i), us(60))).collect();
        assert_eq!(windows, [us(0), us(25), us(50), us(100), us(100)]);
        assert_eq!(g.counts().slept, 3, "the fourth and fifth waits were polled through");
        // Then 1 ms apart: 50, 25, 12.5, then nothing.
        let windows: Vec<_> = (6..=11).map(|i| wait(&mut g, i, ms(i), us(1000))).collect();
        assert_eq!(
            windows,
            [us(100), us(50), us(25), Duration::from_nanos(12_500), Duration::ZERO, Duration::ZERO]
        );
        assert_eq!(g.counts().polled, 25 + 50 + 60 + 60 + 100 + 50 + 25 + 13, "once per microsecond of each");
    }

    #[test]
    fn a_window_of_nothing_never_polls() {
        let t0 = Instant::now();
        let mut g = Governor::new(Duration::ZERO);
        for i in 1..=10 {
            assert!(!g.polls(i, t0 + us(i)));
            g.woke(t0 + us(i) + us(1));
        }
        assert_eq!(g.counts(), Counts { polled: 0, slept: 10, window: Duration::ZERO });
    }

    /// Through a serving thread: it polls between calls that come back to back, and sleeps
    /// through a client's long pauses, after which it no longer polls.
    #[tokio::test]
    async fn a_serving_thread_polls_between_quick_calls_and_sleeps_through_long_pauses() {
        use axum::{Router, routing::get};
        use http_body_util::BodyExt as _;
        use hyper_util::rt::TokioIo;

        // Long enough that a busy test machine's delays between calls still fall inside it.
        const WINDOW: Duration = Duration::from_millis(20);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route(
            "/",
            get(|| async {
                let c = counts();
                // (the parks that slept, as tokio counts them)
                let parked = tokio::runtime::Handle::current().metrics().worker_park_count(0);
                format!("{} {} {} {parked}", c.polled, c.slept, c.window.as_micros())
            }),
        );
        let connections = super::super::Connections::new(
            listener,
            Duration::from_secs(60),
            Duration::from_secs(100),
            WINDOW,
        );
        let serving = super::super::serve(1, connections, app, "spin-test").await.unwrap();
        let _stop = [serving.closed, serving.abandon, serving.release].map(|t| t.drop_guard());
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client)).await.unwrap();
        tokio::spawn(conn);
        let mut call = async || {
            let request =
                axum::http::Request::get("/").header("host", "sublane").body(String::new()).unwrap();
            let body = sender.send_request(request).await.unwrap().into_body().collect().await.unwrap();
            let text = String::from_utf8(body.to_bytes().to_vec()).unwrap();
            let n: Vec<u64> = text.split(' ').map(|n| n.parse().unwrap()).collect();
            (Counts { polled: n[0], slept: n[1], window: Duration::from_micros(n[2]) }, n[3])
        };

        let (first, first_parked) = call().await;
        let (mut quick, mut quick_parked) = (first, first_parked);
        for _ in 0..200 {
            (quick, quick_parked) = call().await;
        }
        assert!(quick.polled > first.polled, "it polled between quick calls: {first:?} then {quick:?}");
        assert!(quick.window > Duration::ZERO, "quick calls keep a window open: {quick:?}");
        // A park the governor turned into a poll did not sleep (tokio counts the parks that do).
        assert!(
            quick_parked - first_parked <= quick.slept - first.slept,
            "{} parks slept, where the governor let {} sleep",
            quick_parked - first_parked,
            quick.slept - first.slept
        );

        // A pause past the window: the thread polled for the window, then slept. (A call's
        // counts are read before its own wait is learnt from.)
        let (before, _) = call().await;
        tokio::time::sleep(WINDOW * 5).await;
        call().await;
        let (paused, _) = call().await;
        assert!(paused.slept > before.slept, "{before:?} then {paused:?}");
        assert!(paused.window < before.window, "a long sleep shrinks the window: {before:?} then {paused:?}");
        for _ in 0..5 {
            tokio::time::sleep(WINDOW * 3).await;
            call().await;
        }
        let (idle, _) = call().await;
        assert_eq!(idle.window, Duration::ZERO, "long pauses end the polling: {idle:?}");

        // An idle thread sleeps: once its last window is over, it takes no CPU.
        tokio::time::sleep(WINDOW * 2).await;
        let before = cpu_ticks("spin-test-1");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = cpu_ticks("spin-test-1");
        assert!(after - before <= 5, "{} ticks of CPU in 500 ms of idleness", after - before);
    }

    /// The CPU time (user and system, in clock ticks, 100 a second) of this process's thread
    /// named `name`.
    fn cpu_ticks(name: &str) -> u64 {
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap();
            // (the name is in brackets, and may hold spaces; the fields after it do not)
            let (comm, rest) = stat.split_once(") ").unwrap();
            if comm.ends_with(&format!("({name}")) {
                let fields: Vec<u64> = rest.split(' ').skip(11).take(2).map(|f| f.parse().unwrap()).collect();
                return fields[0] + fields[1];
            }
        }
        panic!("no thread {name}");
    }
}
