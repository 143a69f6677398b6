//! Admission limits that need no queue (ADM-2, ADM-3).
//!
//! - Workspace capacity: at most `capacity` operations in flight at once, model calls and metadata
//!   reads alike; over it the caller gets 429 `workspace_busy` (no record, REC-1).
//! - Member concurrency: at most the member's `concurrency_limit` model calls at once (0 means
//!   unlimited); over it 429 `member_concurrency_exceeded`. The limit is read per request, so a
//!   changed limit applies to the next request and never interrupts admitted ones.
//!
//! - Member RPM (optional): at most `rpm_limit` model calls started in any 60 s; checked once
//!   when the request arrives, so a request that then waits in a queue consumes it once.
//!
//! The slots are guards that release on drop; a request keeps them until its record is queued
//! (ADM-8) — for streams, until the stream ends (ADM-4).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

/// The member RPM window.
const MINUTE: Duration = Duration::from_secs(60);

/// Default workspace capacity (ADM-2).
pub const DEFAULT_WORKSPACE_CAPACITY: usize = 128;

pub struct Admission {
    workspace: Arc<Workspace>,
    members: Arc<Mutex<HashMap<i64, u32>>>,
    /// Start times of each member's calls within the last minute (only members with an RPM).
    starts: Mutex<HashMap<i64, VecDeque<Instant>>>,
}

/// The workspace's operations in flight and its capacity, which an admin may change while it
/// runs: a lower capacity refuses new operations until enough end, never interrupting any.
#[derive(Debug)]
struct Workspace {
    in_use: AtomicUsize,
    capacity: AtomicUsize,
}

/// Holds one workspace slot.
#[derive(Debug)]
pub struct WorkspaceSlot(Arc<Workspace>);

impl Drop for WorkspaceSlot {
    fn drop(&mut self) {
        self.0.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Holds one of a member's concurrent-request slots.
#[derive(Debug)]
pub struct MemberSlot {
    member_id: i64,
    members: Arc<Mutex<HashMap<i64, u32>>>,
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.member_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.member_id);
            }
        }
    }
}

impl Admission {
    pub fn new(workspace_capacity: usize) -> Self {
        Admission {
            workspace: Arc::new(Workspace {
                in_use: AtomicUsize::new(0),
                capacity: AtomicUsize::new(workspace_capacity),
            }),
            members: Arc::default(),
            starts: Mutex::default(),
        }
    }

    /// A workspace slot, or `None` when the workspace is full (ADM-2).
    pub fn workspace(&self) -> Option<WorkspaceSlot> {
        let w = &self.workspace;
        let capacity = w.capacity.load(Ordering::Acquire);
        w.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < capacity).then_some(n + 1))
            .ok()
            .map(|_| WorkspaceSlot(Arc::clone(w)))
    }

    /// A new workspace capacity, for operations admitted from now on (ADM-2).
    pub fn set_workspace_capacity(&self, capacity: usize) {
        self.workspace.capacity.store(capacity.max(1), Ordering::Release);
    }

    /// A slot of `member_id`'s concurrency, or `None` when `limit` are in use (ADM-3; 0 = no limit).
    pub fn member(&self, member_id: i64, limit: u32) -> Option<MemberSlot> {
        let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        let in_use = m.entry(member_id).or_insert(0);
        if limit != 0 && *in_use >= limit {
            return None;
        }
        *in_use += 1;
        Some(MemberSlot { member_id, members: Arc::clone(&self.members) })
    }

    /// Counts a call against the member's RPM limit (ADM-3); `Err(wait)` when `limit` calls
    /// started within the last minute, with the time until the oldest leaves the window.
    pub fn member_rpm(&self, member_id: i64, limit: Option<i64>) -> Result<(), Duration> {
        let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()).filter(|l| *l > 0) else {
            return Ok(());
        };
        let now = Instant::now();
        let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        let q = starts.entry(member_id).or_default();
        while q.front().is_some_and(|t| now.duration_since(*t) >= MINUTE) {
            q.pop_front();
        }
        if q.len() >= limit {
            let oldest = q.front().copied().unwrap_or(now);
            return Err(MINUTE.saturating_sub(now.duration_since(oldest)));
        }
        q.push_back(now);
        Ok(())
    }

    /// Model calls of a member now in flight (for runtime views and tests).
    pub fn member_in_flight(&self, member_id: i64) -> u32 {
        self.members.lock().unwrap_or_else(|p| p.into_inner()).get(&member_id).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn member_rpm_counts_a_sliding_minute() {
        let a = Admission::new(10);
        assert!(a.member_rpm(1, None).is_ok() && a.member_rpm(1, Some(0)).is_ok(), "no limit");
        for _ in 0..3 {
            assert!(a.member_rpm(1, Some(3)).is_ok());
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        // three calls at 0, 10, 20 s; now 30 s: the next one waits until the first is 60 s old
        assert_eq!(a.member_rpm(1, Some(3)), Err(Duration::from_secs(30)));
        assert!(a.member_rpm(2, Some(3)).is_ok(), "members are separate");
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(a.member_rpm(1, Some(3)).is_ok(), "the first call left the window");
        assert_eq!(a.member_rpm(1, Some(3)), Err(Duration::from_secs(10)));
    }

    #[test]
    fn a_changed_workspace_capacity_applies_to_new_operations_only() {
        let a = Admission::new(2);
        let one = a.workspace().unwrap();
        let two = a.workspace().unwrap();
        a.set_workspace_capacity(1);
        assert!(a.workspace().is_none());
        drop(one);
        assert!(a.workspace().is_none(), "still one in use: the cut never interrupts it");
        drop(two);
        let _held = a.workspace().unwrap();
        a.set_workspace_capacity(3);
        assert!(a.workspace().is_some());
    }

    #[test]
    fn workspace_capacity_is_a_hard_cap_and_slots_come_back() {
        let a = Admission::new(2);
        let one = a.workspace().unwrap();
        let _two = a.workspace().unwrap();
        assert!(a.workspace().is_none());
        drop(one);
        assert!(a.workspace().is_some());
    }

    #[test]
    fn member_limit_zero_is_unlimited_and_changes_apply_to_new_requests() {
        let a = Admission::new(10);
        let first = a.member(7, 1).unwrap();
        assert!(a.member(7, 1).is_none(), "limit 1 reached");
        assert!(a.member(8, 1).is_some(), "other members are separate");
        // raising the limit lets the next request in without touching the admitted one
        let second = a.member(7, 2).unwrap();
        assert_eq!(a.member_in_flight(7), 2);
        // lowering it refuses new requests but interrupts nothing
        assert!(a.member(7, 1).is_none());
        drop(first);
        drop(second);
        assert_eq!(a.member_in_flight(7), 0);
        let many: Vec<_> = (0..50).map(|_| a.member(9, 0).unwrap()).collect();
        assert_eq!(a.member_in_flight(9), 50);
        drop(many);
        assert_eq!(a.member_in_flight(9), 0);
    }
}
