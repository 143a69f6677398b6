//! Prometheus metrics (OPS-4, BEY-4): counters and histograms the request path moves, and gauges
//! read from the scheduler when `/metrics` is scraped.
//!
//! Every label value is one of a closed set (a gateway error code, a provider, an operation, an
//! HTTP status) or an id an admin created (pool, account): nothing a client sends (model ids,
//! session ids, key names) becomes a label, so a client cannot grow the series without bound.
//!
//! Metrics can be switched off (`SUBLANE_METRICS=false`); every method is then a no-op, which is
//! how `make bench` measures what they cost.

pub mod endpoint;

use std::time::Duration;

use prometheus_client::{
    encoding::{EncodeLabelSet, text},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// Every metric family `/metrics` serves, by the name in its `# TYPE` line.
/// (Samples add `_bucket`, `_sum`, `_count` or `_total` to these names.)
pub const FAMILIES: [&str; 19] = [
    "sublane_admissions",
    "sublane_upstream_responses",
    "sublane_request_duration_seconds",
    "sublane_upstream_duration_seconds",
    "sublane_first_output_seconds",
    "sublane_gateway_overhead_seconds",
    "sublane_queue_wait_seconds",
    "sublane_records_written",
    "sublane_records_dropped",
    "sublane_records_waited",
    "sublane_quota_reads",
    "sublane_token_refreshes",
    "sublane_pool_info",
    "sublane_queue_depth",
    "sublane_account_info",
    "sublane_account_in_flight",
    "sublane_account_concurrency_limit",
    "sublane_account_models_limited",
    "sublane_account_blocked",
];

/// The media type of what [`Metrics::render`] writes (OpenMetrics text, which Prometheus asks
/// for first and which every Prometheus-format parser reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Admission {
    outcome: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamAnswer {
    provider: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabel {
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    pool_id: i64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointCall {
    provider: &'static str,
    outcome: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Gateway overhead and other sub-second times: 10 µs to about 1.5 s.
fn fine() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.5, 14))
}

/// Whole calls and upstream times: 5 ms to about 12 minutes.
fn coarse() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

struct Live {
    registry: Registry,
    admissions: Family<Admission, Counter>,
    /// The `admitted` series of `admissions`, held: nearly every call moves it, and a lookup in
    /// the family takes its lock and hashes the labels.
    admitted: Counter,
    upstream_answers: Family<UpstreamAnswer, Counter>,
    durations: Histograms<CallLabel>,
    upstream_times: Histograms<ProviderLabel>,
    first_outputs: Histograms<ProviderLabel>,
    overhead: Histogram,
    queue_waits: Histograms<PoolLabel>,
    records_written: Counter,
    records_dropped: Counter,
    records_waited: Counter,
    quota_reads: Family<EndpointCall, Counter>,
    token_refreshes: Family<EndpointCall, Counter>,
}

/// The process's metrics; cheap to call on every request, or nothing at all when switched off.
pub struct Metrics(Option<Box<Live>>);

impl Metrics {
    pub fn new(enabled: bool) -> Metrics {
        if !enabled {
            return Metrics(None);
        }
        let mut registry = Registry::with_prefix("sublane");
        let admissions = Family::<Admission, Counter>::default();
        registry.register(
            "admissions",
            "Calls admitted or refused by the gateway (capacity, budget, queue, key), by error code",
            admissions.clone(),
        );
        let upstream_answers = Family::<UpstreamAnswer, Counter>::default();
        registry.register(
            "upstream_responses",
            "Answers from upstream providers, by provider and HTTP status (retries included)",
            upstream_answers.clone(),
        );
        let durations: Histograms<CallLabel> = Family::new_with_constructor(coarse);
        registry.register(
            "request_duration_seconds",
            "Recorded model calls, start to end, by operation and outcome",
            durations.clone(),
        );
        let upstream_times: Histograms<ProviderLabel> = Family::new_with_constructor(coarse);
        registry.register(
            "upstream_duration_seconds",
            "Time a call waited on its upstream before its answer could be passed on (token refresh and retries included)",
            upstream_times.clone(),
        );
        let first_outputs: Histograms<ProviderLabel> = Family::new_with_constructor(coarse);
        registry.register(
            "first_output_seconds",
            "Time from a call's start to its first output token",
            first_outputs.clone(),
        );
        let overhead = fine();
        registry.register(
            "gateway_overhead_seconds",
            "Time a call spent in the gateway itself, upstream time and queue wait excluded (x-sublane-overhead-ms)",
            overhead.clone(),
        );
        let queue_waits: Histograms<PoolLabel> = Family::new_with_constructor(coarse);
        registry.register(
            "queue_wait_seconds",
            "Time calls waited in a pool's queue for an account (x-sublane-queue-ms)",
            queue_waits.clone(),
        );
        let records_written = Counter::default();
        registry.register(
            "records_written",
            "Request records written to the database",
            records_written.clone(),
        );
        let records_dropped = Counter::default();
        registry.register(
            "records_dropped",
            "Request records lost (the writer stopped, or a write failed)",
            records_dropped.clone(),
        );
        let records_waited = Counter::default();
        registry.register(
            "records_waited",
            "Request records that found the writer's queue full, so that their calls waited for room",
            records_waited.clone(),
        );
        let quota_reads = Family::<EndpointCall, Counter>::default();
        registry.register(
            "quota_reads",
            "Subscription quota reads, by provider and outcome",
            quota_reads.clone(),
        );
        let token_refreshes = Family::<EndpointCall, Counter>::default();
        registry.register(
            "token_refreshes",
            "OAuth token endpoint calls, by provider and outcome",
            token_refreshes.clone(),
        );
        // Series with closed label sets start at 0, so a rate over them is defined from the first
        // scrape on (Prometheus's advice: a series that appears only when it first moves hides
        // that first move).
        let admitted = admissions.get_or_create(&Admission { outcome: "admitted", code: "" }).clone();
        for outcome in ["ok", "error"] {
            for provider in ["codex", "claude", "antigravity"] {
                token_refreshes.get_or_create(&EndpointCall { provider, outcome }).inc_by(0);
            }
            for provider in ["codex", "antigravity"] {
                quota_reads.get_or_create(&EndpointCall { provider, outcome }).inc_by(0);
            }
        }
        Metrics(Some(Box::new(Live {
            registry,
            admissions,
            admitted,
            upstream_answers,
            durations,
            upstream_times,
            first_outputs,
            overhead,
            queue_waits,
            records_written,
            records_dropped,
            records_waited,
            quota_reads,
            token_refreshes,
        })))
    }

    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// A call let in past admission (ADM-2, ADM-3, BUD-2).
    pub fn admitted(&self) {
        if let Some(m) = &self.0 {
            m.admitted.inc();
        }
    }

    /// A call the gateway refused, with its error code.
    pub fn refused(&self, code: &'static str) {
        if let Some(m) = &self.0 {
            m.admissions.get_or_create(&Admission { outcome: "rejected", code }).inc();
        }
    }

    /// An upstream answer's status, each retry's included.
    pub fn upstream_answer(&self, provider: &'static str, status: u16) {
        if let Some(m) = &self.0 {
            m.upstream_answers.get_or_create(&UpstreamAnswer { provider, status }).inc();
        }
    }

    /// A recorded call: its duration, and its time to first output when it had one.
    pub fn call(
        &self,
        operation: &'static str,
        outcome: &'static str,
        provider: Option<&'static str>,
        duration: Duration,
        first_output: Option<Duration>,
    ) {
        if let Some(m) = &self.0 {
            m.durations.get_or_create(&CallLabel { operation, outcome }).observe(duration.as_secs_f64());
            if let (Some(provider), Some(first)) = (provider, first_output) {
                m.first_outputs.get_or_create(&ProviderLabel { provider }).observe(first.as_secs_f64());
            }
        }
    }

    /// How long a call waited on its upstream before its answer could go on.
    pub fn upstream_time(&self, provider: &'static str, waited: Duration) {
        if let Some(m) = &self.0 {
            m.upstream_times.get_or_create(&ProviderLabel { provider }).observe(waited.as_secs_f64());
        }
    }

    /// A call's time in the gateway itself (BEY-4).
    pub fn overhead(&self, spent: Duration) {
        if let Some(m) = &self.0 {
            m.overhead.observe(spent.as_secs_f64());
        }
    }

    /// A wait in a pool's queue that ended (with an account or not).
    pub fn queue_wait(&self, pool_id: i64, waited: Duration) {
        if let Some(m) = &self.0 {
            m.queue_waits.get_or_create(&PoolLabel { pool_id }).observe(waited.as_secs_f64());
        }
    }

    pub fn records_written(&self, n: usize) {
        if let Some(m) = &self.0 {
            m.records_written.inc_by(n as u64);
        }
    }

    pub fn records_dropped(&self, n: usize) {
        if let Some(m) = &self.0 {
            m.records_dropped.inc_by(n as u64);
        }
    }

    /// A record that found the writer's queue full, so its call waited (nothing is lost).
    pub fn record_waited(&self) {
        if let Some(m) = &self.0 {
            m.records_waited.inc();
        }
    }

    /// A subscription quota read (QT-1) and whether it brought an answer.
    pub fn quota_read(&self, provider: &'static str, ok: bool) {
        if let Some(m) = &self.0 {
            let outcome = if ok { "ok" } else { "error" };
            m.quota_reads.get_or_create(&EndpointCall { provider, outcome }).inc();
        }
    }

    /// An OAuth token endpoint call (CRED-1) and whether it brought a token.
    pub fn token_refresh(&self, provider: &'static str, ok: bool) {
        if let Some(m) = &self.0 {
            let outcome = if ok { "ok" } else { "error" };
            m.token_refreshes.get_or_create(&EndpointCall { provider, outcome }).inc();
        }
    }

    /// The metrics as OpenMetrics text: the counted ones, then `state`'s gauges. `None` when
    /// metrics are switched off.
    pub fn render(&self, state: &State) -> Option<String> {
        let m = self.0.as_ref()?;
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = text::encode_registry(&mut out, &m.registry);
        let _ = text::encode_registry(&mut out, &state.registry());
        let _ = text::encode_eof(&mut out);
        Some(out)
    }
}

/// What is in force now, read when scraped: queues, each account's load, limit and blocks.
#[derive(Debug, Default)]
pub struct State {
    pub pools: Vec<PoolState>,
    pub accounts: Vec<AccountStateView>,
}

#[derive(Debug)]
pub struct PoolState {
    pub id: i64,
    pub name: String,
    pub queue_depth: usize,
}

#[derive(Debug)]
pub struct AccountStateView {
    pub id: i64,
    pub name: String,
    pub provider: &'static str,
    pub in_flight: u32,
    pub limit: u32,
    pub models_limited: usize,
    /// Each account-wide block reason and whether it is in force now.
    pub blocks: [(&'static str, bool); BLOCK_REASONS.len()],
}

/// The account-wide reasons an account takes no calls (ACC-1, CRED-3, QT-3).
pub const BLOCK_REASONS: [&str; 5] =
    ["rate_limited", "overloaded", "temp_unschedulable", "credentials", "quota_exhausted"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolInfo {
    pool_id: i64,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabel {
    account_id: i64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountInfo {
    account_id: i64,
    name: String,
    provider: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountBlock {
    account_id: i64,
    reason: &'static str,
}

impl State {
    fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("sublane");
        let pool_info = Family::<PoolInfo, Gauge>::default();
        let depth = Family::<PoolLabel, Gauge>::default();
        for p in &self.pools {
            pool_info.get_or_create(&PoolInfo { pool_id: p.id, name: p.name.clone() }).set(1);
            depth.get_or_create(&PoolLabel { pool_id: p.id }).set(p.queue_depth as i64);
        }
        r.register("pool_info", "Pools by id, with their names (always 1)", pool_info);
        r.register("queue_depth", "Calls waiting in a pool's queue now", depth);

        let info = Family::<AccountInfo, Gauge>::default();
        let in_flight = Family::<AccountLabel, Gauge>::default();
        let limit = Family::<AccountLabel, Gauge>::default();
        let limited = Family::<AccountLabel, Gauge>::default();
        let blocked = Family::<AccountBlock, Gauge>::default();
        for a in &self.accounts {
            let id = AccountLabel { account_id: a.id };
            info.get_or_create(&AccountInfo { account_id: a.id, name: a.name.clone(), provider: a.provider })
                .set(1);
            in_flight.get_or_create(&id).set(i64::from(a.in_flight));
            limit.get_or_create(&id).set(i64::from(a.limit));
            limited.get_or_create(&id).set(a.models_limited as i64);
            for (reason, on) in a.blocks {
                blocked.get_or_create(&AccountBlock { account_id: a.id, reason }).set(i64::from(on));
            }
        }
        r.register("account_info", "Accounts by id, with name and provider (always 1)", info);
        r.register("account_in_flight", "Calls holding one of the account's slots now", in_flight);
        r.register("account_concurrency_limit", "The account's concurrency limit (ADM-1)", limit);
        r.register("account_models_limited", "Models cooling down or limited on the account now", limited);
        r.register(
            "account_blocked",
            "1 while the account takes no calls for this reason (cooldowns, credentials, quota)",
            blocked,
        );
        r
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Metrics({})", if self.enabled() { "on" } else { "off" })
    }
}

/// Milliseconds with three decimals (to the nearest microsecond, a half rounded up), as the
/// overhead headers carry them. Written without float formatting, which cost as much as the rest
/// of the headers' work. (Float formatting rounded an exact half microsecond either way, as the
/// float's error fell; only those values read 0.001 apart.)
pub fn millis(d: Duration) -> String {
    let micros = (d.as_nanos() + 500) / 1000;
    let mut s = (micros / 1000).to_string();
    let frac = micros % 1000;
    s.push('.');
    s.extend([frac / 100, frac / 10 % 10, frac % 10].map(|digit| char::from(b'0' + digit as u8)));
    s
}

impl Default for Metrics {
    /// Switched off (tests that do not look at metrics).
    fn default() -> Self {
        Metrics::new(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_have_three_decimals_to_the_nearest_microsecond() {
        for (d, text) in [
            (Duration::ZERO, "0.000"),
            (Duration::from_nanos(499), "0.000"),
            (Duration::from_nanos(500), "0.001"),
            (Duration::from_micros(40), "0.040"),
            (Duration::from_micros(1_234_567), "1234.567"),
            (Duration::from_nanos(2_999_999), "3.000"),
            (Duration::from_micros(980), "0.980"),
        ] {
            assert_eq!(millis(d), text, "{d:?}");
        }
    }

    /// Every family, each moved once, with one pool and one account in the state.
    fn rendered() -> String {
        let m = Metrics::new(true);
        m.admitted();
        m.refused("invalid_api_key");
        m.upstream_answer("codex", 200);
        m.call(
            "responses",
            "success",
            Some("codex"),
            Duration::from_millis(20),
            Some(Duration::from_millis(5)),
        );
        m.upstream_time("codex", Duration::from_millis(15));
        m.overhead(Duration::from_micros(40));
        m.queue_wait(1, Duration::from_millis(3));
        m.records_written(1);
        m.records_dropped(0);
        m.quota_read("codex", true);
        m.token_refresh("claude", false);
        let state = State {
            pools: vec![PoolState { id: 1, name: "default".into(), queue_depth: 2 }],
            accounts: vec![AccountStateView {
                id: 7,
                name: "team \"one\"".into(),
                provider: "codex",
                in_flight: 1,
                limit: 3,
                models_limited: 0,
                blocks: BLOCK_REASONS.map(|r| (r, r == "overloaded")),
            }],
        };
        m.render(&state).unwrap()
    }

    #[test]
    fn every_family_is_served_and_listed() {
        let text = rendered();
        let served: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let mut listed = FAMILIES.to_vec();
        listed.sort_unstable();
        let mut sorted = served.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, listed, "FAMILIES names what /metrics serves");
        assert!(
            text.contains(r#"sublane_account_info{account_id="7",name="team \"one\"",provider="codex"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"sublane_account_blocked{account_id="7",reason="overloaded"} 1"#));
        assert!(text.ends_with("# EOF\n"));
        assert!(Metrics::new(false).render(&State::default()).is_none(), "off: nothing to serve");
    }

    /// The Grafana dashboard shipped in `ops/grafana` asks only for families SubLane serves.
    #[test]
    fn the_grafana_dashboard_reads_served_metrics() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../ops/grafana/sublane-dashboard.json");
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut asked = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                let words = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
                for name in words.filter(|w| w.starts_with("sublane_")) {
                    let family = ["_bucket", "_count", "_sum", "_total"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s))
                        .unwrap_or(name);
                    assert!(FAMILIES.contains(&family), "{} asks for {name}", panel["title"]);
                    asked += 1;
                }
            }
        }
        assert!(asked >= 12, "the dashboard's panels were read");
    }
}
