//! The routing explanation stored with each record (EXP-1): which rule chose, how many accounts
//! were left to choose from, and how many were excluded for each reason. Counts only: nothing in
//! it identifies another account.

use serde::Serialize;

/// The rule that made the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// RT-1/RT-2: the conversation's (or WebSocket connection's) account.
    SessionBinding,
    /// RT-7: the parent conversation's account for a Codex review/guardian request.
    ParentSession,
    /// RT-5: round robin within the highest priority tier.
    UniformRotation,
}

/// Accounts of the pool excluded from the final choice, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Excluded {
    /// The provider does not speak the request's protocol.
    pub model_support: u32,
    /// A provider prefix (PX-5) or a model switch left it out.
    pub policy: u32,
    /// Subscription quota (QT-3); filled once quota awareness exists.
    pub quota: u32,
    /// Account or model cooldown, rate limit, overload.
    pub cooldown: u32,
    /// No free slot.
    pub capacity: u32,
    /// Temporarily unschedulable (credentials refused).
    pub unavailable: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RoutingDecision {
    pub rule: Rule,
    /// Accounts the final choice was made among.
    pub candidates: u32,
    pub excluded: Excluded,
}

impl RoutingDecision {
    /// A choice fixed by a binding or a parent conversation: one candidate, nothing scanned.
    pub fn kept(rule: Rule) -> Self {
        RoutingDecision { rule, candidates: 1, excluded: Excluded::default() }
    }

    pub fn rotation(candidates: u32, excluded: Excluded) -> Self {
        RoutingDecision { rule: Rule::UniformRotation, candidates, excluded }
    }

    /// The JSON stored in the record's `routing` column.
    pub fn to_json(&self) -> Option<String> {
        serde_json::to_string(self).ok()
    }
}
