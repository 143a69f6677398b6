//! Request records (REC): one row of metadata per model attempt, written off the hot path by one
//! batched writer task, pruned to 7 days and 5,000 rows.
//!
//! A record holds exactly the fields of REC-2. Nothing in it can carry a prompt, a body, a
//! header, an IP, a session id or a credential: the types below have no place for them.

pub mod query;
mod writer;

use std::time::Duration;

use app::model::{Exclusions, RoutingDecision, RoutingRule};

pub use writer::{RecordSink, Retention, THREADS as WRITER_THREADS, prune, spawn_writer};

/// Retention window (REC-5).
pub const RETENTION_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most records kept (REC-5).
pub const RETENTION_ROWS: i64 = 5_000;
/// Longest model id stored; longer ids are cut (REC-2 "bounded model id").
pub const MAX_MODEL_LEN: usize = 128;

/// How a model attempt ended (REC-2, REC-8). Independent of the upstream HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// The stream ended without its terminal event, or the provider reported it incomplete.
    Incomplete,
    Error,
    /// The client went away before the end.
    Cancelled,
    /// The gateway refused it after authentication (capacity, cooldown, policy).
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Incomplete => "incomplete",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
            Outcome::Rejected => "rejected",
        }
    }
}

/// Token counts reported by the upstream (null when unknown, REC-2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<i64>,
    pub output: Option<i64>,
    pub cached: Option<i64>,
}

/// One finished model attempt, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    pub request_id: String,
    pub member_id: i64,
    pub key_id: Option<i64>,
    pub pool_id: Option<i64>,
    pub account_id: Option<i64>,
    pub provider: Option<&'static str>,
    pub model: String,
    /// Protocol and operation, e.g. `responses`, `responses_ws`, `messages`.
    pub operation: &'static str,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// REC-7: null for compaction, streams without deltas, and failures before output.
    pub first_output_ms: Option<i64>,
    pub outcome: Outcome,
    /// Sanitized gateway or upstream error code, never a raw provider message.
    pub error_code: Option<String>,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    /// Routing explanation as JSON (EXP-1); none when rejected before routing.
    pub routing: Option<String>,
    /// What it added to budget windows (BUD-2), written in the record's transaction.
    pub charges: Vec<crate::budgets::Charge>,
}

/// The routing explanation (EXP-1) as a record stores it: the exclusions only when the decision
/// left an account out. In a healthy pool most decisions exclude none, and their six zero counts
/// were 94 of a record's 240 bytes: a row is written twice (inserted, then pruned), so they were
/// most of the page writes a record costs. It reads back as the same [`RoutingDecision`] (absent
/// exclusions are zeros), which is what the API and the pages show.
pub fn stored_routing(decision: &RoutingDecision) -> Option<String> {
    #[derive(serde::Serialize)]
    struct Stored<'a> {
        rule: RoutingRule,
        candidates: u32,
        #[serde(skip_serializing_if = "none_excluded")]
        excluded: &'a Exclusions,
    }
    fn none_excluded(e: &&Exclusions) -> bool {
        **e == Exclusions::default()
    }
    let stored =
        Stored { rule: decision.rule, candidates: decision.candidates, excluded: &decision.excluded };
    serde_json::to_string(&stored).ok()
}

/// Cuts a model id to [`MAX_MODEL_LEN`] characters.
pub fn bounded_model(model: &str) -> String {
    // (one copy of the bytes kept, not a string grown char by char)
    let end = model.char_indices().nth(MAX_MODEL_LEN).map_or(model.len(), |(at, _)| at);
    model[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_routing_explanation_leaves_out_only_exclusions_that_are_all_zero() {
        let none = RoutingDecision::rotation(2, Exclusions::default());
        let stored = stored_routing(&none).unwrap();
        assert_eq!(stored, r#"{"rule":"uniform_rotation","candidates":2}"#);
        let some =
            RoutingDecision::rotation(1, Exclusions { cooldown: 2, unavailable: 1, ..Exclusions::default() });
        let kept = RoutingDecision::kept(RoutingRule::SessionBinding);
        for d in [none, some, kept] {
            let back: RoutingDecision = serde_json::from_str(&stored_routing(&d).unwrap()).unwrap();
            assert_eq!(back, d);
        }
        let full: serde_json::Value = serde_json::from_str(&stored_routing(&some).unwrap()).unwrap();
        assert_eq!(full["excluded"]["cooldown"], 2);
        assert_eq!(full["excluded"]["quota"], 0);
    }

    #[test]
    fn a_model_id_is_cut_to_its_first_characters_not_bytes() {
        assert_eq!(bounded_model("gpt-5.5"), "gpt-5.5");
        assert_eq!(bounded_model(""), "");
        let exact = "m".repeat(MAX_MODEL_LEN);
        assert_eq!(bounded_model(&exact), exact);
        assert_eq!(bounded_model(&format!("{exact}x")), exact);
        // three bytes a character: cut after 128 characters, on a character's edge
        let wide = "模".repeat(MAX_MODEL_LEN + 5);
        let cut = bounded_model(&wide);
        assert_eq!(cut.chars().count(), MAX_MODEL_LEN);
        assert_eq!(cut.len(), 3 * MAX_MODEL_LEN);
    }
}
