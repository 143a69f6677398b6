//! What a budget policy is (BUD-1): a subject (a key, a member, the workspace), a metric, a window
//! and a limit, and how a finished request counts against each metric.

use crate::{error::Error, records::Usage};

use super::{prices::Prices, window::Window};

/// Who a policy limits. (`dept`, which the seed also names, is out of scope: SubLane has no
/// departments.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    ApiKey(i64),
    Member(i64),
    Workspace,
}

impl Subject {
    /// The seed's name, as in `rate limit exceeded on <subject> ...`.
    pub fn kind(self) -> &'static str {
        match self {
            Subject::ApiKey(_) => "apikey",
            Subject::Member(_) => "member",
            Subject::Workspace => "ws",
        }
    }

    pub fn id(self) -> Option<i64> {
        match self {
            Subject::ApiKey(id) | Subject::Member(id) => Some(id),
            Subject::Workspace => None,
        }
    }

    pub fn parse(kind: &str, id: Option<i64>) -> Result<Subject, Error> {
        match (kind, id) {
            ("apikey", Some(id)) => Ok(Subject::ApiKey(id)),
            ("member", Some(id)) => Ok(Subject::Member(id)),
            ("ws", None) => Ok(Subject::Workspace),
            ("ws", Some(_)) => Err(Error::field("subject_id", "the workspace subject takes no subject_id")),
            ("apikey" | "member", None) => Err(Error::field("subject_id", "name the key or member")),
            _ => Err(Error::field("subject", "subject must be one of apikey, member, ws")),
        }
    }

    /// Most specific first: a key, a member, the workspace.
    pub fn rank(self) -> u8 {
        match self {
            Subject::ApiKey(_) => 0,
            Subject::Member(_) => 1,
            Subject::Workspace => 2,
        }
    }
}

/// What a policy counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    Requests,
    TotalTokens,
    PromptTokens,
    CompletionTokens,
    /// Counted in micro-credits (see [`Prices`]); shown as credits.
    Credits,
}

impl Metric {
    pub const ALL: [Metric; 5] = [
        Metric::Requests,
        Metric::TotalTokens,
        Metric::PromptTokens,
        Metric::CompletionTokens,
        Metric::Credits,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Requests => "requests",
            Metric::TotalTokens => "total_tokens",
            Metric::PromptTokens => "prompt_tokens",
            Metric::CompletionTokens => "completion_tokens",
            Metric::Credits => "credits",
        }
    }

    pub fn parse(s: &str) -> Result<Metric, Error> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| {
            Error::field(
                "metric",
                "metric must be one of requests, total_tokens, prompt_tokens, completion_tokens, credits",
            )
        })
    }

    /// Counted units per shown unit: credits are kept as micro-credits, the rest as they are.
    pub fn scale(self) -> f64 {
        if self == Metric::Credits { 1e6 } else { 1.0 }
    }

    /// A shown amount (credits may have decimals) as counted units.
    pub fn units(self, shown: f64) -> Result<i64, Error> {
        let units = (shown * self.scale()).round();
        if !shown.is_finite() || shown < 0.0 || units > 9e15 {
            return Err(Error::field("limit", "limit must be a number from 0 up"));
        }
        if self != Metric::Credits && shown.fract() != 0.0 {
            return Err(Error::field("limit", "limit must be a whole number"));
        }
        Ok(units as i64)
    }

    /// Counted units as shown.
    pub fn shown(self, units: i64) -> f64 {
        units as f64 / self.scale()
    }

    /// What one finished request adds. A request counts when it reached an upstream (a refusal
    /// of SubLane's own is not a use of anything); tokens count as the upstream reported them.
    pub fn amount(self, reached_upstream: bool, usage: &Usage, model: &str, prices: &Prices) -> i64 {
        let input = usage.input.unwrap_or(0).max(0);
        let output = usage.output.unwrap_or(0).max(0);
        match self {
            Metric::Requests => i64::from(reached_upstream),
            Metric::TotalTokens => input + output,
            Metric::PromptTokens => input,
            Metric::CompletionTokens => output,
            Metric::Credits => prices.micro_credits(model, usage),
        }
    }
}

/// A window as the API names it: `minute`, `minutes` (with a count), `day`, `month`, `total`.
pub fn window_kind(w: Window) -> &'static str {
    match w {
        Window::Minute => "minute",
        Window::Minutes(_) => "minutes",
        Window::Day => "day",
        Window::Month => "month",
        Window::Total => "total",
    }
}

pub fn parse_window(kind: &str, minutes: Option<i64>) -> Result<Window, Error> {
    match (kind, minutes) {
        ("minutes", Some(n)) if (1..=1440).contains(&n) => Ok(Window::Minutes(n as u32)),
        ("minutes", _) => Err(Error::field("window_minutes", "a minutes window takes 1 to 1440 minutes")),
        (_, Some(_)) if ["minute", "day", "month", "total"].contains(&kind) => {
            Err(Error::field("window_minutes", "only a minutes window takes a number of minutes"))
        }
        ("minute", None) => Ok(Window::Minute),
        ("day", None) => Ok(Window::Day),
        ("month", None) => Ok(Window::Month),
        ("total", None) => Ok(Window::Total),
        _ => Err(Error::field("window", "window must be one of minute, minutes, day, month, total")),
    }
}

/// One limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub id: i64,
    pub subject: Subject,
    pub metric: Metric,
    pub window: Window,
    /// In counted units (micro-credits for credits).
    pub limit: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_in_the_metrics_units() {
        assert_eq!(Metric::Credits.units(2.5).unwrap(), 2_500_000);
        assert_eq!(Metric::Requests.units(300.0).unwrap(), 300);
        assert!(Metric::Requests.units(1.5).is_err());
        assert!(Metric::TotalTokens.units(-1.0).is_err());
        assert!(Metric::TotalTokens.units(f64::NAN).is_err());
    }

    #[test]
    fn windows_parse_with_their_minutes() {
        assert_eq!(parse_window("minutes", Some(15)).unwrap(), Window::Minutes(15));
        assert!(parse_window("minutes", None).is_err());
        assert!(parse_window("minutes", Some(1441)).is_err());
        assert!(parse_window("day", Some(5)).is_err());
        assert!(parse_window("week", None).is_err());
        assert_eq!(window_kind(Window::Minutes(5)), "minutes");
    }

    #[test]
    fn a_refused_request_uses_nothing_and_tokens_count_as_reported() {
        let usage = Usage { input: Some(100), output: Some(20), cached: Some(40) };
        let prices = Prices::default();
        assert_eq!(Metric::Requests.amount(false, &Usage::default(), "m", &prices), 0);
        assert_eq!(Metric::Requests.amount(true, &usage, "m", &prices), 1);
        assert_eq!(Metric::TotalTokens.amount(true, &usage, "m", &prices), 120);
        assert_eq!(Metric::PromptTokens.amount(true, &usage, "m", &prices), 100);
        assert_eq!(Metric::CompletionTokens.amount(true, &usage, "m", &prices), 20);
    }
}
