//! Conversation bindings (RT-1, RT-2) held in bounded memory: one least-recently-used table per
//! member and pool, at most [`MAX_PER_MEMBER_POOL`] conversations each, expired ones swept while
//! running (on use and every [`SWEEP_INTERVAL_MS`]), so a client minting a fresh session id per
//! call cannot grow memory or the table on disk.
//!
//! Each table is ordered by last use, so the expired and the least recently used are at its
//! front: eviction and sweeping pop from there and never scan live entries. Every change that
//! must reach the database comes back as a [`store::Write`] for the caller to send once the
//! scheduler's lock is released.

use std::collections::HashMap;

use hashlink::LinkedHashMap;

use super::{BindingKey, ConversationKey, store};

/// Conversations remembered per member and pool; the least recently used goes first.
pub const MAX_PER_MEMBER_POOL: usize = 5_000;
/// How often expired bindings are swept from every table (and from the database).
pub const SWEEP_INTERVAL_MS: i64 = 60_000;
/// A binding only touched is written through at most this often.
const STORE_INTERVAL_MS: i64 = 3_600_000;

#[derive(Debug)]
pub(super) struct Binding {
    pub(super) account_id: i64,
    /// The model the conversation was bound with (RT-3 compares against it).
    pub(super) model: Box<str>,
    pub(super) used_at: i64,
    /// When `used_at` was last written to the database.
    stored_at: i64,
}

/// Every binding, by member and pool.
#[derive(Default)]
pub(super) struct Bindings {
    groups: HashMap<(i64, i64), LinkedHashMap<ConversationKey, Binding>>,
    last_sweep: i64,
}

impl Bindings {
    /// The live binding of `key` (not expired at `now`), without marking it used.
    pub(super) fn get(&self, key: &BindingKey, now: i64, ttl_ms: i64) -> Option<&Binding> {
        let (member, pool, conv) = key;
        let b = self.groups.get(&(*member, *pool))?.get(conv)?;
        (now - b.used_at < ttl_ms).then_some(b)
    }

    /// Binds (or keeps) `key` to `account_id` for `model` at `now` and marks it most recently
    /// used. Returns the writes the database needs: the binding when new, moved or stale on
    /// disk, and the removal of whatever was evicted or expired to make room.
    pub(super) fn touch(
        &mut self,
        key: BindingKey,
        account_id: i64,
        model: &str,
        now: i64,
        ttl_ms: i64,
        writes: &mut Vec<store::Write>,
    ) {
        let (member, pool, conv) = key;
        let group = self.groups.entry((member, pool)).or_default();
        if group.to_back(&conv).is_none() {
            // Room first: expired entries, then the least recently used.
            while let Some((old, b)) = group.front() {
                let expired = now - b.used_at >= ttl_ms;
                if !expired && group.len() < MAX_PER_MEMBER_POOL {
                    break;
                }
                let old = *old;
                group.pop_front();
                writes.push(store::Write::Unbind { key: (member, pool, old) });
            }
            let fresh = Binding { account_id, model: model.into(), used_at: now, stored_at: i64::MIN };
            group.insert(conv, fresh);
        }
        let Some(binding) = group.get_mut(&conv) else { return };
        if binding.account_id != account_id || &*binding.model != model {
            binding.account_id = account_id;
            binding.model = model.into();
            binding.stored_at = i64::MIN;
        }
        binding.used_at = now;
        // Written through when new or moved, else at most hourly.
        if now.saturating_sub(binding.stored_at) >= STORE_INTERVAL_MS {
            binding.stored_at = now;
            writes.push(store::Write::Binding { key, account_id, model: model.to_owned(), used_at: now });
        }
        if now - self.last_sweep >= SWEEP_INTERVAL_MS {
            self.sweep(now, ttl_ms, writes);
        }
    }

    /// Drops every expired binding, in memory and (through `writes`) on disk.
    pub(super) fn sweep(&mut self, now: i64, ttl_ms: i64, writes: &mut Vec<store::Write>) {
        self.last_sweep = now;
        for group in self.groups.values_mut() {
            while group.front().is_some_and(|(_, b)| now - b.used_at >= ttl_ms) {
                group.pop_front();
            }
        }
        self.groups.retain(|_, g| !g.is_empty());
        writes.push(store::Write::SweepBindings { used_before: now.saturating_sub(ttl_ms) });
    }

    /// A binding read back at startup; call in order of `used_at` so recency is kept. Beyond a
    /// table's capacity the least recently used are dropped (and deleted from the database).
    pub(super) fn restore(
        &mut self,
        key: BindingKey,
        account_id: i64,
        model: String,
        used_at: i64,
        writes: &mut Vec<store::Write>,
    ) {
        let (member, pool, conv) = key;
        let group = self.groups.entry((member, pool)).or_default();
        group.insert(conv, Binding { account_id, model: model.into(), used_at, stored_at: used_at });
        while group.len() > MAX_PER_MEMBER_POOL {
            if let Some((old, _)) = group.pop_front() {
                writes.push(store::Write::Unbind { key: (member, pool, old) });
            }
        }
    }

    /// Bindings held in memory.
    pub(super) fn len(&self) -> usize {
        self.groups.values().map(LinkedHashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 24 * 3_600_000;

    fn key(member: i64, n: u32) -> BindingKey {
        (member, 1, ConversationKey::session(&format!("s{n}")))
    }

    #[test]
    fn each_member_and_pool_keeps_its_most_recent_conversations() {
        let mut b = Bindings::default();
        let mut writes = Vec::new();
        for n in 0..(MAX_PER_MEMBER_POOL as u32 + 10) {
            b.touch(key(1, n), 7, "m", 1_000 + i64::from(n), TTL, &mut writes);
        }
        b.touch(key(2, 0), 7, "m", 5_000, TTL, &mut writes);
        assert_eq!(b.len(), MAX_PER_MEMBER_POOL + 1, "member 2 is not crowded out by member 1");
        assert!(b.get(&key(1, 0), 10_000, TTL).is_none(), "the least recently used went first");
        assert!(b.get(&key(1, 10), 10_000, TTL).is_some());
        let unbinds = writes.iter().filter(|w| matches!(w, store::Write::Unbind { .. })).count();
        assert_eq!(unbinds, 10, "evictions are deleted on disk too");
    }

    #[test]
    fn using_a_conversation_keeps_it_from_eviction() {
        let mut b = Bindings::default();
        let mut w = Vec::new();
        b.touch(key(1, 0), 7, "m", 0, TTL, &mut w);
        for n in 1..MAX_PER_MEMBER_POOL as u32 {
            b.touch(key(1, n), 7, "m", i64::from(n), TTL, &mut w);
        }
        b.touch(key(1, 0), 7, "m", 100_000, TTL, &mut w); // used again: now the most recent
        b.touch(key(1, 999_999), 7, "m", 100_001, TTL, &mut w);
        assert!(b.get(&key(1, 0), 100_002, TTL).is_some());
        assert!(b.get(&key(1, 1), 100_002, TTL).is_none());
    }

    #[test]
    fn expired_bindings_are_swept_while_running() {
        let mut b = Bindings::default();
        let mut w = Vec::new();
        for n in 0..100 {
            b.touch(key(i64::from(n % 4), n), 7, "m", 0, TTL, &mut w);
        }
        assert_eq!(b.len(), 100);
        w.clear();
        // long after: the next use anywhere sweeps every table
        b.touch(key(9, 0), 7, "m", TTL + SWEEP_INTERVAL_MS, TTL, &mut w);
        assert_eq!(b.len(), 1);
        assert!(w.iter().any(|w| matches!(w, store::Write::SweepBindings { .. })));
    }

    #[test]
    fn a_binding_is_written_when_new_or_moved_and_otherwise_hourly() {
        let mut b = Bindings::default();
        let mut w = Vec::new();
        b.touch(key(1, 0), 7, "m", 0, TTL, &mut w);
        assert_eq!(w.len(), 1);
        b.touch(key(1, 0), 7, "m", 1_000, TTL, &mut w);
        assert_eq!(w.len(), 1, "a touch alone is not written");
        b.touch(key(1, 0), 8, "m", 2_000, TTL, &mut w);
        assert_eq!(w.len(), 2, "a move is");
        b.touch(key(1, 0), 8, "m", 2_000 + STORE_INTERVAL_MS, TTL, &mut w);
        assert!(w.len() >= 3, "an hour later it is written again");
    }
}
