//! Budgets (BUD-1..BUD-3): limits on requests, tokens or credits per key, member or workspace over
//! a window.
//!
//! This module owns the runtime state: the policies in force, each policy's usage in its current
//! window, and the price table. A call is checked at admission (and again before dispatch after a
//! wait); a finished call is charged at once in memory, and the same charges travel with its
//! request record to the record writer, which adds them to `budget_usage` in the transaction that
//! writes the record. So a crash keeps or loses both, and a restart reloads exactly what was
//! written: nothing is counted twice. Usage is counted after completion (the seed's rule): calls
//! already in flight when a limit is reached complete, so a limit is overshot by at most those.

pub mod manage;
pub mod policy;
pub mod prices;
pub mod store;
pub mod window;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use serde_json::json;

pub use policy::{Metric, Policy, Subject};
pub use prices::{Price, Prices};
pub use window::{Span, Window};

use crate::{proxy::error::GatewayError, records::Usage};

/// Usage added to one policy's window by one finished request; written with its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub policy_id: i64,
    pub window_start_ms: i64,
    pub window_end_ms: Option<i64>,
    pub amount: i64,
}

/// A policy's window and its usage at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub policy: Policy,
    pub span: Span,
    pub used: i64,
}

impl Standing {
    pub fn remaining(&self) -> i64 {
        (self.policy.limit - self.used).max(0)
    }

    pub fn exceeded(&self) -> bool {
        self.used >= self.policy.limit
    }

    /// BUD-2: the seed's message and `limit`, `used`, `reset_at`; no Retry-After (Gemini's body
    /// has its RetryInfo: see [`GatewayError::retry_delay`]). Without one,
    /// an SDK retries a 429 on its own backoff, seconds apart; when the window ends more than a
    /// minute ahead (or never: `total`), every such retry is refused and recorded, and the user
    /// waits through them for the same answer, so the refusal also says `x-should-retry: false`,
    /// which the official SDKs obey.
    pub fn refusal(&self, now: DateTime<Utc>) -> GatewayError {
        let p = &self.policy;
        let message = format!(
            "rate limit exceeded on {} {}/{}",
            p.subject.kind(),
            p.metric.as_str(),
            policy::window_kind(p.window)
        );
        let amount = |units: i64| match p.metric {
            Metric::Credits => json!(p.metric.shown(units)),
            _ => json!(units),
        };
        let soon = self.span.end.is_some_and(|end| end <= now + chrono::Duration::seconds(RETRY_SOON_SECS));
        let mut e = GatewayError::budget_exceeded(message)
            .with_field("limit", amount(p.limit))
            .with_field("used", amount(self.used))
            .not_soon(!soon);
        // `total` never resets: no reset_at at all (Gemini's metadata would print "null")
        if let Some(reset) = self.span.reset_at() {
            e = e
                .with_field("reset_at", json!(rfc3339(reset)))
                .retry_delay((reset - now).num_seconds().max(1) as u64);
        }
        if let Window::Minutes(n) = p.window {
            e = e.with_field("window_minutes", json!(n));
        }
        e
    }
}

/// How near a budget window's end must be for a client's own retries to be worth making
/// (see [`Standing::refusal`]).
const RETRY_SOON_SECS: i64 = 60;

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// What the check at admission found: the refusal, if any, and the BUD-3 headers (for each
/// metric, the applicable policy with the least remaining).
#[derive(Debug, Default)]
pub struct Checked {
    pub refused: Option<Standing>,
    headers: Vec<Standing>,
}

impl Checked {
    /// Whether the call went through a budget check at all (some policy applies).
    pub fn applies(&self) -> bool {
        !self.headers.is_empty()
    }

    /// Adds `x-sublane-quota-<metric>-limit`, `-remaining` and `-reset` (RFC 3339, absent for
    /// `total`).
    pub fn add_headers(&self, to: &mut HeaderMap) {
        for st in &self.headers {
            let m = st.policy.metric;
            let [limit, remaining, reset] = header_names(m);
            let mut put = |name: HeaderName, value: String| {
                if let Ok(value) = HeaderValue::try_from(value) {
                    to.insert(name, value);
                }
            };
            put(limit, number(m.shown(st.policy.limit)));
            put(remaining, number(m.shown(st.remaining())));
            if let Some(at) = st.span.reset_at() {
                put(reset, rfc3339(at));
            }
        }
    }
}

/// BUD-3's header names of a metric: limit, remaining, reset. Each set is made at compile time:
/// a name made from text at run time is checked byte by byte on every call.
fn header_names(m: Metric) -> [HeaderName; 3] {
    const fn names(limit: &'static str, remaining: &'static str, reset: &'static str) -> [HeaderName; 3] {
        [HeaderName::from_static(limit), HeaderName::from_static(remaining), HeaderName::from_static(reset)]
    }
    match m {
        Metric::Requests => {
            const {
                names(
                    "x-sublane-quota-requests-limit",
                    "x-sublane-quota-requests-remaining",
                    "x-sublane-quota-requests-reset",
                )
            }
        }
        Metric::TotalTokens => {
            const {
                names(
                    "x-sublane-quota-total_tokens-limit",
                    "x-sublane-quota-total_tokens-remaining",
                    "x-sublane-quota-total_tokens-reset",
                )
            }
        }
        Metric::PromptTokens => {
            const {
                names(
                    "x-sublane-quota-prompt_tokens-limit",
                    "x-sublane-quota-prompt_tokens-remaining",
                    "x-sublane-quota-prompt_tokens-reset",
                )
            }
        }
        Metric::CompletionTokens => {
            const {
                names(
                    "x-sublane-quota-completion_tokens-limit",
                    "x-sublane-quota-completion_tokens-remaining",
                    "x-sublane-quota-completion_tokens-reset",
                )
            }
        }
        Metric::Credits => {
            const {
                names(
                    "x-sublane-quota-credits-limit",
                    "x-sublane-quota-credits-remaining",
                    "x-sublane-quota-credits-reset",
                )
            }
        }
    }
}

/// A number as a header shows it: whole numbers without a decimal point.
fn number(v: f64) -> String {
    if v.fract() == 0.0 { format!("{}", v as i64) } else { format!("{v}") }
}

/// Every policy's usage, and the current span of each window kind (a zone's calendar is worked
/// out once per window, not on every call).
#[derive(Debug, Default)]
struct Counters {
    used: HashMap<i64, Counter>,
    spans: HashMap<Window, Span>,
}

impl Counters {
    fn span(&mut self, w: Window, now: DateTime<Utc>, zone: Tz) -> Span {
        if let Some(s) = self.spans.get(&w)
            && s.start <= now
            && s.end.is_none_or(|e| now < e)
        {
            return *s;
        }
        let s = w.span(now, zone);
        self.spans.insert(w, s);
        s
    }
}

/// A policy's usage in its current window.
#[derive(Debug, Clone, Copy)]
struct Counter {
    start_ms: i64,
    used: i64,
}

/// The policies in force, found by subject: a call looks up its key's, its member's and the
/// workspace's, never scanning the rest (a workspace may hold a budget on every key).
#[derive(Debug, Default)]
pub struct PolicySet {
    all: Vec<Policy>,
    by_key: HashMap<i64, Vec<Policy>>,
    by_member: HashMap<i64, Vec<Policy>>,
    workspace: Vec<Policy>,
}

impl PolicySet {
    fn new(mut all: Vec<Policy>) -> PolicySet {
        all.sort_by_key(|p| p.id);
        let mut set = PolicySet::default();
        for p in &all {
            match p.subject {
                Subject::ApiKey(k) => set.by_key.entry(k).or_default().push(*p),
                Subject::Member(m) => set.by_member.entry(m).or_default().push(*p),
                Subject::Workspace => set.workspace.push(*p),
            }
        }
        set.all = all;
        set
    }

    /// Every policy, by id.
    pub fn all(&self) -> &[Policy] {
        &self.all
    }

    /// The policies covering a call: its key's, then its member's, then the workspace's (the
    /// most specific refusal wins).
    pub fn covering(&self, key_id: i64, member_id: i64) -> impl Iterator<Item = &Policy> {
        let none: &[Policy] = &[];
        let key = self.by_key.get(&key_id).map_or(none, Vec::as_slice);
        let member = self.by_member.get(&member_id).map_or(none, Vec::as_slice);
        key.iter().chain(member).chain(&self.workspace)
    }
}

/// The budgets in force and their usage.
pub struct Budgets {
    zone: Tz,
    /// False while no policy exists: the check then costs one atomic load.
    active: AtomicBool,
    policies: RwLock<Arc<PolicySet>>,
    counters: Mutex<Counters>,
    /// The configuration file's prices, under the web app's.
    configured_prices: Prices,
    prices: RwLock<Arc<Prices>>,
}

impl Budgets {
    pub fn new(zone: Tz, configured_prices: Prices) -> Budgets {
        Budgets {
            zone,
            active: AtomicBool::new(false),
            policies: RwLock::new(Arc::new(PolicySet::default())),
            counters: Mutex::new(Counters::default()),
            prices: RwLock::new(Arc::new(configured_prices.clone())),
            configured_prices,
        }
    }

    /// The workspace time zone calendar windows follow.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// Reads policies, prices and the current windows' usage (at start).
    pub async fn load(&self, db: &sqlx::SqlitePool, now: DateTime<Utc>) -> sqlx::Result<()> {
        self.reload_prices(db).await?;
        self.reload_policies(db).await?;
        let policies = self.policies();
        let rows: HashMap<(i64, i64), i64> =
            store::usage(db).await?.into_iter().map(|(id, start, used)| ((id, start), used)).collect();
        let mut counters = lock(&self.counters);
        for p in policies.all() {
            let start_ms = counters.span(p.window, now, self.zone).start.timestamp_millis();
            if let Some(&used) = rows.get(&(p.id, start_ms)) {
                counters.used.insert(p.id, Counter { start_ms, used });
            }
        }
        Ok(())
    }

    /// Re-reads the policies after a change; usage of the policies that remain is kept.
    pub async fn reload_policies(&self, db: &sqlx::SqlitePool) -> sqlx::Result<()> {
        self.install(store::policies(db).await?);
        Ok(())
    }

    /// Puts `policies` in force; usage of the policies that remain is kept.
    pub fn install(&self, policies: Vec<Policy>) {
        let ids: std::collections::HashSet<i64> = policies.iter().map(|p| p.id).collect();
        lock(&self.counters).used.retain(|id, _| ids.contains(id));
        self.active.store(!policies.is_empty(), Ordering::Release);
        *self.policies.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(PolicySet::new(policies));
    }

    /// Re-reads the web app's prices over the configured ones.
    pub async fn reload_prices(&self, db: &sqlx::SqlitePool) -> sqlx::Result<()> {
        let set = store::prices(db).await?;
        *self.prices.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(self.configured_prices.overlay(&set));
        Ok(())
    }

    pub fn configured_prices(&self) -> &Prices {
        &self.configured_prices
    }

    pub fn prices(&self) -> Arc<Prices> {
        Arc::clone(&self.prices.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn policies(&self) -> Arc<PolicySet> {
        Arc::clone(&self.policies.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Every policy `keep` selects, with its usage now, by id.
    pub fn standings(&self, now: DateTime<Utc>, keep: impl Fn(&Policy) -> bool) -> Vec<Standing> {
        let policies = self.policies();
        let mut counters = lock(&self.counters);
        policies.all().iter().filter(|p| keep(p)).map(|p| self.standing(&mut counters, p, now)).collect()
    }

    fn standing(&self, counters: &mut Counters, p: &Policy, now: DateTime<Utc>) -> Standing {
        let span = counters.span(p.window, now, self.zone);
        let start_ms = span.start.timestamp_millis();
        let used = counters.used.get(&p.id).filter(|c| c.start_ms == start_ms).map_or(0, |c| c.used);
        Standing { policy: *p, span, used }
    }

    /// BUD-2 at admission: the exhausted policy of the caller's key, member or workspace that
    /// holds longest, if any.
    pub fn check(&self, key_id: i64, member_id: i64, now: DateTime<Utc>) -> Checked {
        if !self.active.load(Ordering::Acquire) {
            return Checked::default();
        }
        let policies = self.policies();
        let all: Vec<Standing> = {
            let mut counters = lock(&self.counters);
            policies.covering(key_id, member_id).map(|p| self.standing(&mut counters, p, now)).collect()
        };
        // Of the exhausted policies, the one that holds longest: its `reset_at` is when the
        // caller can come back (a minute's would tell it too early while a day's still holds).
        let holds = |s: &Standing| s.span.end.map_or(i64::MAX, |end| end.timestamp_millis());
        let refused = all.iter().filter(|s| s.exceeded()).max_by_key(|s| holds(s)).copied();
        let mut headers: Vec<Standing> = Vec::new();
        for st in all {
            // (the least remaining; of equals, the one that holds longest, as the refusal)
            match headers.iter_mut().find(|h| h.policy.metric == st.policy.metric) {
                Some(h) if (st.remaining(), -holds(&st)) < (h.remaining(), -holds(h)) => *h = st,
                Some(_) => {}
                None => headers.push(st),
            }
        }
        Checked { refused, headers }
    }

    /// Counts a finished request against every policy that covers it (in memory now; the
    /// returned charges are written with its record).
    pub fn charge(
        &self,
        key_id: i64,
        member_id: i64,
        model: &str,
        reached_upstream: bool,
        usage: &Usage,
        now: DateTime<Utc>,
    ) -> Vec<Charge> {
        if !self.active.load(Ordering::Acquire) {
            return Vec::new();
        }
        let policies = self.policies();
        let prices = self.prices();
        let mut counters = lock(&self.counters);
        let mut charges = Vec::new();
        for p in policies.covering(key_id, member_id) {
            let amount = p.metric.amount(reached_upstream, usage, model, &prices);
            if amount <= 0 {
                continue;
            }
            let span = counters.span(p.window, now, self.zone);
            let start_ms = span.start.timestamp_millis();
            let c = counters.used.entry(p.id).or_insert(Counter { start_ms, used: 0 });
            if c.start_ms != start_ms {
                *c = Counter { start_ms, used: 0 };
            }
            c.used = c.used.saturating_add(amount);
            charges.push(Charge {
                policy_id: p.id,
                window_start_ms: start_ms,
                window_end_ms: span.end.map(|e| e.timestamp_millis()),
                amount,
            });
        }
        charges
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(policies: Vec<Policy>) -> Budgets {
        let b = Budgets::new(window::DEFAULT_ZONE, Prices::default());
        b.install(policies);
        b
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const TOKENS: Usage = Usage { input: Some(70), output: Some(30), cached: None };

    #[test]
    fn the_refusal_is_the_exhausted_policy_that_holds_longest() {
        let policy = |id, window| Policy {
            id,
            subject: Subject::ApiKey(7),
            metric: Metric::Requests,
            window,
            limit: 1,
        };
        let b = budgets(vec![policy(1, Window::Minute), policy(2, Window::Day)]);
        let now = at("2026-12-01T10:00:30Z");
        b.charge(7, 1, "m", true, &TOKENS, now);
        let checked = b.check(7, 1, now);
        let e = checked.refused.unwrap().refusal(now);
        assert_eq!(e.message, "rate limit exceeded on apikey requests/day", "the minute's end frees nothing");
        assert!(e.not_soon);
        assert_eq!(checked.headers[0].policy.id, 2, "the BUD-3 headers' reset is the refusal's");
        // the minute alone: it ends within the minute a client's own retries take
        let b = budgets(vec![policy(1, Window::Minute)]);
        b.charge(7, 1, "m", true, &TOKENS, now);
        let e = b.check(7, 1, now).refused.unwrap().refusal(now);
        assert_eq!(e.message, "rate limit exceeded on apikey requests/minute");
        assert!(!e.not_soon, "retrying may well succeed");
    }

    #[test]
    fn the_request_that_crosses_the_limit_completes_and_the_next_is_refused() {
        let p = Policy {
            id: 1,
            subject: Subject::ApiKey(7),
            metric: Metric::TotalTokens,
            window: Window::Day,
            limit: 150,
        };
        let b = budgets(vec![p]);
        let now = at("2026-12-01T10:00:00Z");
        assert!(b.check(7, 1, now).refused.is_none());
        b.charge(7, 1, "m", true, &TOKENS, now);
        assert!(b.check(7, 1, now).refused.is_none(), "100 of 150 used");
        b.charge(7, 1, "m", true, &TOKENS, now);
        let refused = b.check(7, 1, now).refused.unwrap();
        assert_eq!((refused.used, refused.remaining()), (200, 0));
        let e = refused.refusal(now);
        assert_eq!(e.message, "rate limit exceeded on apikey total_tokens/day");
        assert_eq!(e.retry_after, None);
        assert!(e.not_soon, "six hours to the window's end: the client's own retries are futile");
        // the next day in Shanghai starts at 16:00 UTC; reset_at is 90 s later
        assert!(e.fields.contains(&("reset_at".into(), json!("2026-12-01T16:01:30Z"))));
        // a Gemini client hears when in the body's RetryInfo (gemini-cli retries a 429 without
        // one), and still no Retry-After
        let r = e.render(crate::proxy::error::Protocol::Gemini, None);
        assert!(r.headers().get("retry-after").is_none());
        let body = e.body(crate::proxy::error::Protocol::Gemini, None);
        let info = &body["error"]["details"][1];
        assert_eq!(
            (&info["@type"], &info["retryDelay"]),
            (&json!("type.googleapis.com/google.rpc.RetryInfo"), &json!("21690s"))
        );
        assert!(b.check(8, 1, now).refused.is_none(), "another key is not limited");
        assert!(b.check(7, 1, at("2026-12-01T16:00:00Z")).refused.is_none(), "a new day");
    }

    #[test]
    fn the_most_specific_refusal_and_the_tightest_headers_win() {
        let b = budgets(vec![
            Policy {
                id: 1,
                subject: Subject::ApiKey(7),
                metric: Metric::Requests,
                window: Window::Minute,
                limit: 1,
            },
            Policy {
                id: 2,
                subject: Subject::Workspace,
                metric: Metric::Requests,
                window: Window::Total,
                limit: 10,
            },
        ]);
        let now = at("2026-12-01T10:00:00Z");
        b.charge(7, 1, "m", true, &Usage::default(), now);
        let c = b.check(7, 1, now);
        assert_eq!(c.refused.unwrap().policy.id, 1);
        let mut h = HeaderMap::new();
        c.add_headers(&mut h);
        assert_eq!(h["x-sublane-quota-requests-limit"], "1");
        assert_eq!(h["x-sublane-quota-requests-remaining"], "0");
        assert_eq!(h["x-sublane-quota-requests-reset"], "2026-12-01T10:02:30Z");
        // another member's key sees only the workspace's 9 left
        let mut h = HeaderMap::new();
        b.check(9, 2, now).add_headers(&mut h);
        assert_eq!(h["x-sublane-quota-requests-remaining"], "9");
        assert!(h.get("x-sublane-quota-requests-reset").is_none(), "total never resets");
    }

    #[test]
    fn header_names_follow_the_metric() {
        for m in Metric::ALL {
            let expected =
                ["limit", "remaining", "reset"].map(|s| format!("x-sublane-quota-{}-{s}", m.as_str()));
            assert_eq!(header_names(m).map(|n| n.as_str().to_owned()), expected);
        }
    }

    #[test]
    fn no_policy_means_no_check_and_no_charge() {
        let b = Budgets::new(window::DEFAULT_ZONE, Prices::default());
        let now = at("2026-12-01T10:00:00Z");
        assert!(!b.check(1, 1, now).applies());
        assert!(b.charge(1, 1, "m", true, &TOKENS, now).is_empty());
    }
}
