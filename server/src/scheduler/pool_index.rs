//! A pool's eligibility index, so that a rotation decision (RT-5, EXP-1) over ten thousand
//! accounts costs a pass over a few bit words instead of a look at every account.
//!
//! Most accounts, most of the time, are *plain*: in step with their configuration, no block,
//! no per-model state. For a plain account only three facts decide its fate in a decision: its
//! provider (fixed), whether an earlier attempt of the request tried it, and whether it has a
//! free slot. Next come *held* accounts: a block on the whole account (cooldown, quota,
//! credentials) and no per-model state, so every request hears the same until the block ends.
//! The index keeps, per pool, one bit set per provider, one of accounts at their limit
//! (`full`), one per kind of hold, and one of the remaining accounts (`special`). A decision
//! counts plain and held ones by popcount and looks one by one only at the special ones, exactly
//! as the full scan did; the counts it records are the same numbers (EXP-1).
//!
//! The bits follow the accounts' live state through [`Runtimes`]: every mutable access to an
//! account's runtime marks its slot, and before a decision the marked slots are brought into
//! every index that holds them. A block that ends with time needs no mark: the account stays
//! special until a decision looks at it and finds it plain again.

use std::ops::{Index, IndexMut};

use app::model::Provider;

use super::{Ask, Excluded, runtime::Runtime, state::Block};
use crate::directory::{Entry, PoolRoutes};

/// Live state of every account the scheduler has seen, by dense slot. Mutable access marks the
/// slot as changed for the pools' indexes.
pub(super) struct Runtimes {
    all: Vec<Runtime>,
    /// Slots mutably borrowed since the indexes last followed (each once).
    changed: Vec<usize>,
    marked: Vec<bool>,
    /// The latest time the indexes' bits were worked out at (unix ms).
    seen_now: i64,
}

impl Default for Runtimes {
    fn default() -> Self {
        Runtimes { all: Vec::new(), changed: Vec::new(), marked: Vec::new(), seen_now: i64::MIN }
    }
}

impl Runtimes {
    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    pub(super) fn push(&mut self, rt: Runtime) {
        self.all.push(rt);
        self.marked.push(false);
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Runtime> {
        self.all.iter()
    }
}

impl Index<usize> for Runtimes {
    type Output = Runtime;

    fn index(&self, slot: usize) -> &Runtime {
        &self.all[slot]
    }
}

impl IndexMut<usize> for Runtimes {
    fn index_mut(&mut self, slot: usize) -> &mut Runtime {
        if !self.marked[slot] {
            self.marked[slot] = true;
            self.changed.push(slot);
        }
        &mut self.all[slot]
    }
}

/// What one account is, for one request, once its provider has passed (RT-8, RT-2, ADM-1).
pub(super) enum Verdict {
    /// Its own model list lacks the model.
    Unlisted,
    Blocked(Block),
    Full,
    Eligible,
}

/// The look at one account the full scan took, and the index takes at special accounts.
/// `listed`: what the operator's list for its provider says of the model (`None`: no list).
pub(super) fn judge(rt: &Runtime, listed: Option<bool>, model: &str, has_room: bool, now: i64) -> Verdict {
    // Only an account with a block or per-model state (limits, quota, a model list) needs more
    // than its load looked at.
    if rt.blocked_until > now || rt.has_models {
        if listed.is_none() && !rt.supports(model) {
            return Verdict::Unlisted;
        }
        if let Some(b) = rt.block(model, now) {
            return Verdict::Blocked(b);
        }
    }
    if has_room { Verdict::Eligible } else { Verdict::Full }
}

const PROVIDERS: usize = Provider::ALL.len();

/// Bit sets over a pool's positions.
type Bits = Vec<u64>;

fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] >> (i % 64) & 1 == 1
}

fn set(bits: &mut [u64], i: usize, on: bool) {
    let mask = 1u64 << (i % 64);
    if on {
        bits[i / 64] |= mask;
    } else {
        bits[i / 64] &= !mask;
    }
}

/// The mask of word `w` that keeps positions `start..end`.
fn range_mask(w: usize, start: usize, end: usize) -> u64 {
    let lo = start.saturating_sub(w * 64).min(64);
    let hi = end.saturating_sub(w * 64).min(64);
    if hi <= lo {
        return 0;
    }
    let upper = if hi == 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

/// The outcome of the counting part of a rotation decision.
pub(super) struct Scan {
    pub(super) excluded: Excluded,
    /// Accounts whose model list (the operator's or their own) lacks the model (ID-4).
    pub(super) unlisted: u32,
    /// Accounts that speak the request's protocol and pass its provider prefix.
    pub(super) speaking: u32,
}

pub(super) struct PoolIndex {
    /// The [`PoolRoutes`] this indexes ([`PoolRoutes::key`]).
    key: u64,
    /// When a decision last used it (the scheduler's decision count), for eviction.
    pub(super) used: u64,
    entries: Vec<Entry>,
    /// Slot -> position (`u32::MAX`: not in the pool).
    position: Vec<u32>,
    by_provider: [Bits; PROVIDERS],
    provider_count: [u32; PROVIDERS],
    /// Priority tiers as position ranges, highest first (the pool is sorted by priority).
    tiers: Vec<(usize, usize)>,
    /// Not plain: out of step with its configuration, blocked as last seen, or with per-model
    /// state.
    special: Bits,
    /// At its concurrency limit.
    full: Bits,
    /// Held by an account-wide block, by the exclusion it counts under ([`hold_kind`]).
    held: [Bits; HOLD_KINDS],
    /// When the first hold may end or change kind: every held account is looked at again then.
    held_until: i64,
    /// The latest decision's candidates.
    pub(super) eligible: Bits,
    /// The accounts the latest decision looked at one by one.
    judged: Bits,
    /// Every bit must be worked out again (new index, bulk change, the clock went back).
    stale: bool,
    /// RT-6 is on: the weights below are kept (off, the default, they stay empty).
    weighing: bool,
    /// RT-6: each position's account-wide quota weight (what is left of its tightest main
    /// window, in percent) while it is fresh; 0 where it has none.
    weights: Vec<f64>,
    /// Until when each position's weight is fresh (`i64::MAX`: it has none).
    weights_fresh: Vec<i64>,
    /// Positions with a fresh weight.
    weighted: Bits,
    /// Per word, the sum of its weighted positions' weights: a weighted pick over ten thousand
    /// candidates then adds up words, not accounts.
    word_weights: Vec<f64>,
    /// When the first weight stops being fresh: the stale ones are worked out again then.
    weights_until: i64,
}

impl PoolIndex {
    /// `weighing`: whether to keep quota weights for RT-6.
    pub(super) fn new(pool: &PoolRoutes, weighing: bool) -> Self {
        let entries = pool.entries().to_vec();
        let words = entries.len().div_ceil(64);
        let max_slot = entries.iter().map(|e| e.slot + 1).max().unwrap_or(0);
        let mut position = vec![u32::MAX; max_slot];
        let mut by_provider: [Bits; PROVIDERS] = std::array::from_fn(|_| vec![0; words]);
        let mut provider_count = [0u32; PROVIDERS];
        let mut tiers: Vec<(usize, usize)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            position[e.slot] = u32::try_from(i).unwrap_or(u32::MAX);
            set(&mut by_provider[e.provider as usize], i, true);
            provider_count[e.provider as usize] += 1;
            match tiers.last_mut() {
                Some((_, end)) if entries[i - 1].priority == e.priority => *end = i + 1,
                _ => tiers.push((i, i + 1)),
            }
        }
        let mut ix = PoolIndex {
            key: pool.key(),
            used: 0,
            entries,
            position,
            by_provider,
            provider_count,
            tiers,
            special: vec![0; words],
            full: vec![0; words],
            held: std::array::from_fn(|_| vec![0; words]),
            held_until: i64::MAX,
            eligible: vec![0; words],
            judged: vec![0; words],
            stale: true,
            weighing: false,
            weights: Vec::new(),
            weights_fresh: Vec::new(),
            weighted: vec![0; words],
            word_weights: vec![0.0; words],
            weights_until: i64::MAX,
        };
        ix.keep_weights(weighing);
        ix
    }

    /// Starts (or stops) keeping RT-6's weights; they are worked out with every bit next time.
    fn keep_weights(&mut self, weighing: bool) {
        if self.weighing == weighing {
            return;
        }
        self.weighing = weighing;
        let len = if weighing { self.entries.len() } else { 0 };
        self.weights = vec![0.0; len];
        self.weights_fresh = vec![i64::MAX; len];
        self.weighted.fill(0);
        self.word_weights.fill(0.0);
        self.weights_until = i64::MAX;
        self.stale = true;
    }

    /// Word `w` of the positions whose provider is one of `among`.
    fn of_providers(&self, w: usize, among: &[bool; PROVIDERS]) -> u64 {
        (0..PROVIDERS).filter(|p| among[*p]).fold(0, |m, p| m | self.by_provider[p][w])
    }

    fn position_of(&self, slot: usize) -> Option<usize> {
        self.position.get(slot).filter(|p| **p != u32::MAX).map(|p| *p as usize)
    }

    /// Works out position `i`'s bits from its runtime.
    fn update(&mut self, i: usize, rt: &Runtime, now: i64) {
        let e = &self.entries[i];
        let stale = rt.stale(e);
        let hold = if !stale && !rt.has_models && rt.blocked_until > now { hold(rt, now) } else { None };
        for (k, bits) in self.held.iter_mut().enumerate() {
            set(bits, i, hold.is_some_and(|(kind, _)| kind == k));
        }
        if let Some((_, end)) = hold {
            self.held_until = self.held_until.min(end);
        }
        set(&mut self.special, i, hold.is_none() && (stale || rt.has_models || rt.blocked_until > now));
        set(&mut self.full, i, rt.in_flight >= rt.limit);
        self.reweigh(i, rt, now);
    }

    /// Works out position `i`'s quota weight (RT-6), and its word's sum when it changed.
    fn reweigh(&mut self, i: usize, rt: &Runtime, now: i64) {
        if !self.weighing {
            return;
        }
        let fresh = fresh_weight(rt, now);
        self.weights_fresh[i] = fresh.map_or(i64::MAX, |(_, until)| until);
        self.weights_until = self.weights_until.min(self.weights_fresh[i]);
        let weight = fresh.map_or(0.0, |(left, _)| left);
        if bit(&self.weighted, i) == fresh.is_some() && self.weights[i].to_bits() == weight.to_bits() {
            return;
        }
        self.weights[i] = weight;
        set(&mut self.weighted, i, fresh.is_some());
        let w = i / 64;
        self.word_weights[w] = self.sum_of(w, self.weighted[w]);
    }

    /// The weights of the positions of word `w` in `bits`, added up in position order.
    fn sum_of(&self, w: usize, mut bits: u64) -> f64 {
        let mut sum = 0.0;
        while bits != 0 {
            sum += self.weights[w * 64 + bits.trailing_zeros() as usize];
            bits &= bits - 1;
        }
        sum
    }

    /// Brings the index up to `now` (the runtimes' marked changes were already handed to every
    /// index by [`follow`]).
    fn prepare(&mut self, runtimes: &Runtimes, now: i64) {
        if now >= self.held_until && !self.stale {
            // Some hold ended or changed: held accounts are looked at one by one this time.
            self.held_until = i64::MAX;
            for held in &mut self.held {
                for (w, bits) in held.iter_mut().enumerate() {
                    self.special[w] |= std::mem::take(bits);
                }
            }
        }
        if self.stale {
            self.held_until = i64::MAX;
            self.weights_until = i64::MAX;
            self.stale = false;
            for i in 0..self.entries.len() {
                let slot = self.entries[i].slot;
                self.update(i, &runtimes.all[slot], now);
            }
        } else if now >= self.weights_until {
            // Some quota observations went stale: their accounts' weights are gone from now on.
            self.weights_until = i64::MAX;
            for i in 0..self.weights_fresh.len() {
                if self.weights_fresh[i] <= now {
                    let slot = self.entries[i].slot;
                    self.reweigh(i, &runtimes.all[slot], now);
                }
                self.weights_until = self.weights_until.min(self.weights_fresh[i]);
            }
        }
    }

    /// The counting part of a rotation decision (RT-5, RT-8, EXP-1) for `ask`: exclusions by
    /// reason, with the blocks met handed to `blocked`, and the candidates left in
    /// [`Self::eligible`]. Accounts out of step with their configuration are synced first
    /// (`accounts`: the pool's, position for position).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan(
        &mut self,
        runtimes: &mut Runtimes,
        pool: &PoolRoutes,
        ask: &Ask<'_>,
        listed: &[Option<bool>; PROVIDERS],
        reserved: Option<usize>,
        now: i64,
        mut blocked: impl FnMut(Block),
    ) -> Scan {
        self.prepare(runtimes, now);
        let accounts = pool.accounts();
        let mut excluded = Excluded::default();
        let mut unlisted = 0u32;
        let mut speaking = 0u32;
        // Per provider: whether the request may use it, and whether the operator's list rules
        // the model out for all its accounts.
        let mut open = [false; PROVIDERS];
        let mut closed = [false; PROVIDERS];
        for p in Provider::ALL {
            let n = self.provider_count[p as usize];
            if !ask.supported.contains(&p) {
                excluded.model_support += n;
            } else if ask.only.is_some_and(|o| o != p) {
                excluded.policy += n;
            } else {
                speaking += n;
                if listed[p as usize] == Some(false) {
                    closed[p as usize] = true;
                    excluded.model_support += n;
                    unlisted += n;
                } else {
                    open[p as usize] = true;
                }
            }
        }
        // Accounts this request already tried.
        let mut avoided: Vec<usize> = Vec::new();
        for id in ask.avoid {
            let Some(i) = pool.position(*id) else { continue };
            let p = self.entries[i].provider as usize;
            if !(open[p] || closed[p]) || avoided.contains(&i) {
                continue;
            }
            avoided.push(i);
            excluded.unavailable += 1;
            if closed[p] {
                excluded.model_support -= 1;
                unlisted -= 1;
            }
        }
        // Plain and held accounts, by popcount.
        let mut capacity = 0u32;
        let mut holds = [0u32; HOLD_KINDS];
        for w in 0..self.eligible.len() {
            let speaks = self.of_providers(w, &open);
            let mut plain = speaks & !self.special[w];
            for (k, held) in self.held.iter().enumerate() {
                holds[k] += (speaks & held[w]).count_ones();
                plain &= !held[w];
            }
            capacity += (plain & self.full[w]).count_ones();
            self.eligible[w] = plain & !self.full[w];
        }
        let held_kind = |ix: &Self, i: usize| (0..HOLD_KINDS).find(|k| bit(&ix.held[*k], i));
        let plain_open = |ix: &Self, i: usize| {
            open[ix.entries[i].provider as usize] && !bit(&ix.special, i) && held_kind(ix, i).is_none()
        };
        for &i in &avoided {
            if let Some(k) = held_kind(self, i).filter(|_| open[self.entries[i].provider as usize]) {
                holds[k] -= 1;
            } else if plain_open(self, i) {
                if bit(&self.full, i) {
                    capacity -= 1;
                } else {
                    set(&mut self.eligible, i, false);
                }
            }
        }
        if let Some(i) = reserved.and_then(|s| self.position_of(s))
            && plain_open(self, i)
            && bit(&self.full, i)
            && !avoided.contains(&i)
        {
            capacity -= 1;
            set(&mut self.eligible, i, true);
        }
        excluded.capacity = capacity;
        for (kind, n) in holds.into_iter().enumerate() {
            count_kind(&mut excluded, kind, n);
        }
        // Special accounts, one by one (those of a provider the operator's list rules out are
        // only brought in step with their configuration: they were counted above).
        let looked_at: [bool; PROVIDERS] = std::array::from_fn(|p| open[p] || closed[p]);
        for w in 0..self.special.len() {
            let speaks = self.of_providers(w, &looked_at);
            let mut bits = speaks & self.special[w];
            self.judged[w] = 0;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if avoided.contains(&i) {
                    continue;
                }
                let e = self.entries[i];
                if runtimes.all[e.slot].stale(&e) {
                    let _ = runtimes[e.slot].sync(&accounts[i]);
                }
                let rt = &runtimes.all[e.slot];
                if closed[e.provider as usize] {
                    self.update(i, rt, now);
                    continue;
                }
                set(&mut self.judged, i, true);
                let has_room = reserved == Some(e.slot) || rt.in_flight < rt.limit;
                match judge(rt, listed[e.provider as usize], ask.model, has_room, now) {
                    Verdict::Unlisted => {
                        excluded.model_support += 1;
                        unlisted += 1;
                    }
                    Verdict::Blocked(b) => {
                        count_block(&mut excluded, &b);
                        blocked(b);
                    }
                    Verdict::Full => excluded.capacity += 1,
                    Verdict::Eligible => set(&mut self.eligible, i, true),
                }
                self.update(i, rt, now);
            }
        }
        // With no candidate the answer (or the wait's timer) follows the blocks: the held
        // accounts' are handed over too.
        if self.eligible.iter().all(|w| *w == 0) {
            for w in 0..self.special.len() {
                let speaks = self.of_providers(w, &open);
                // (an account judged above was handed over then)
                let mut bits = self.held.iter().fold(0, |m, h| m | h[w]) & speaks & !self.judged[w];
                while bits != 0 {
                    let i = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if !avoided.contains(&i)
                        && let Some(b) = runtimes.all[self.entries[i].slot].block(ask.model, now)
                    {
                        blocked(b);
                    }
                }
            }
        }
        Scan { excluded, unlisted, speaking }
    }

    /// The highest priority tier with a candidate: its range and how many candidates it has.
    pub(super) fn top_tier(&self) -> Option<(usize, usize, usize)> {
        self.tiers.iter().find_map(|&(start, end)| {
            let n: u32 = (start / 64..end.div_ceil(64))
                .map(|w| (self.eligible[w] & range_mask(w, start, end)).count_ones())
                .sum();
            (n > 0).then_some((start, end, n as usize))
        })
    }

    /// The `k`-th candidate (from 0) within positions `start..end`.
    pub(super) fn nth_eligible(&self, start: usize, end: usize, mut k: usize) -> Option<usize> {
        for w in start / 64..end.div_ceil(64) {
            let mut bits = self.eligible[w] & range_mask(w, start, end);
            let n = bits.count_ones() as usize;
            if k >= n {
                k -= n;
                continue;
            }
            for _ in 0..k {
                bits &= bits - 1;
            }
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        None
    }

    /// RT-6's pick among the candidates within positions `start..end`, as
    /// [`weighted_pick`] makes it, when all of them are accounts of `provider` with a fresh
    /// account-wide weight; `None` otherwise. Sums whole words from [`Self::word_weights`]
    /// where it can, so ten thousand candidates cost a pass over their words.
    pub(super) fn weighted_nth(
        &self,
        start: usize,
        end: usize,
        provider: Provider,
        turn: usize,
    ) -> Option<usize> {
        let words = start / 64..end.div_ceil(64);
        // The candidates' weights in word `w`, or `None` when one of them has none.
        let word = |w: usize| -> Option<(u64, f64)> {
            let m = self.eligible[w] & range_mask(w, start, end);
            if m & !self.by_provider[provider as usize][w] != 0 || m & !self.weighted[w] != 0 {
                return None;
            }
            let others = self.weighted[w] & !m;
            let sum = if others == 0 {
                self.word_weights[w]
            } else if others.count_ones() < m.count_ones() {
                (self.word_weights[w] - self.sum_of(w, others)).max(0.0)
            } else {
                self.sum_of(w, m)
            };
            Some((m, sum))
        };
        let mut total = 0.0;
        for w in words.clone() {
            total += word(w)?.1;
        }
        let mut x = spread(turn, total)?;
        // The last candidate with weight, for a rounding left over at the end.
        let mut last = None;
        for w in words {
            let (mut m, sum) = word(w)?;
            if sum <= 0.0 {
                continue;
            }
            if x >= sum {
                x -= sum;
                last = Some((w, m));
                continue;
            }
            while m != 0 {
                let i = w * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                let weight = self.weights[i];
                if x < weight {
                    return Some(i);
                }
                x -= weight;
            }
            last = Some((w, self.eligible[w] & range_mask(w, start, end)));
            break;
        }
        let (w, mut m) = last?;
        let mut pick = None;
        while m != 0 {
            let i = w * 64 + m.trailing_zeros() as usize;
            m &= m - 1;
            if self.weights[i] > 0.0 {
                pick = Some(i);
            }
        }
        pick
    }

    /// The candidates within positions `start..end`, in pool order.
    pub(super) fn eligible_in(&self, start: usize, end: usize, out: &mut Vec<u32>) {
        out.clear();
        for w in start / 64..end.div_ceil(64) {
            let mut bits = self.eligible[w] & range_mask(w, start, end);
            while bits != 0 {
                out.push(u32::try_from(w * 64).unwrap_or(u32::MAX) + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
    }
}

/// RT-6: an account's account-wide quota weight and until when it is fresh (`None`: no fresh,
/// usable number).
pub(super) fn fresh_weight(rt: &Runtime, now: i64) -> Option<(f64, i64)> {
    let (left, until) = rt.remaining;
    (until > now && usable_weight(left)).then_some((left, until))
}

/// A number RT-6 can share by: a share of nothing at least, and never infinite.
pub(super) fn usable_weight(left: f64) -> bool {
    left.is_finite() && left >= 0.0
}

/// Where the `turn`-th weighted pick falls in `0..total`: the turn spread by the golden ratio,
/// an equidistributed sequence, so shares follow the weights closely with no state to keep.
/// `None` when there is nothing to share.
pub(super) fn spread(turn: usize, total: f64) -> Option<f64> {
    const GOLDEN: f64 = 0.618_033_988_749_894_9;
    (total > 0.0 && total.is_finite()).then(|| ((turn as f64) * GOLDEN).fract() * total)
}

/// RT-6's pick among `candidates` (positions, in pool order) with shares proportional to
/// `weight`; `None` when a candidate has no weight or they add up to nothing.
pub(super) fn weighted_pick(
    candidates: &[u32],
    turn: usize,
    weight: impl Fn(u32) -> Option<f64>,
) -> Option<usize> {
    let mut total = 0.0;
    for &i in candidates {
        total += weight(i)?;
    }
    let mut x = spread(turn, total)?;
    let mut last = None;
    for &i in candidates {
        let w = weight(i).unwrap_or(0.0);
        if w > 0.0 {
            last = Some(i as usize);
        }
        if x < w {
            return Some(i as usize);
        }
        x -= w;
    }
    last
}

/// Kinds of hold, by the exclusion they count under (EXP-1).
const QUOTA: usize = 0;
const UNAVAILABLE: usize = 1;
const COOLDOWN: usize = 2;
const HOLD_KINDS: usize = 3;

fn hold_kind(b: &Block) -> usize {
    if b.quota() {
        QUOTA
    } else if matches!(b, Block::TempUnschedulable { .. } | Block::Credentials { .. }) {
        UNAVAILABLE
    } else {
        COOLDOWN
    }
}

/// An account without per-model state that every request finds blocked the same way until a
/// time: the exclusion its block counts under, and the first time any of its blocks ends (then
/// it is looked at again). `None`: not blocked, or not so simply.
fn hold(rt: &Runtime, now: i64) -> Option<(usize, i64)> {
    let b = rt.block("", now)?;
    let s = &rt.cold.state;
    let active = |until: Option<i64>| until.is_some_and(|u| u > now);
    // Between a credential pause and a cooldown, the account reports the one with more whole
    // seconds left, which can change as time passes: such an account is looked at one by one.
    if rt.credentials_until <= now
        && rt.cold.quota_until <= now
        && active(s.temp_unschedulable_until)
        && (active(s.rate_limit_reset_at) || active(s.overload_until))
    {
        return None;
    }
    let end = [
        Some(rt.credentials_until),
        Some(rt.cold.quota_until),
        s.rate_limit_reset_at,
        s.overload_until,
        s.temp_unschedulable_until,
    ]
    .into_iter()
    .flatten()
    .filter(|u| *u > now)
    .min()?;
    Some((hold_kind(&b), end))
}

/// Counts a block under the exclusion reason it counts under (EXP-1).
fn count_block(excluded: &mut Excluded, b: &Block) {
    count_kind(excluded, hold_kind(b), 1);
}

/// Counts `n` exclusions of hold kind `kind`.
fn count_kind(excluded: &mut Excluded, kind: usize, n: u32) {
    match kind {
        QUOTA => excluded.quota += n,
        UNAVAILABLE => excluded.unavailable += n,
        _ => excluded.cooldown += n,
    }
}

/// Hands the runtimes' marked changes to every index that holds the slots, then forgets them.
pub(super) fn follow(indexes: &mut [PoolIndex], runtimes: &mut Runtimes, now: i64) {
    // The clock went back (decisions read it under the scheduler's lock, so only a clock step
    // does this): a block that had ended may be in force again.
    // Every index is worked out again from `now`, which then is the time to compare with.
    let went_back = now < runtimes.seen_now;
    runtimes.seen_now = now;
    if went_back {
        for ix in indexes.iter_mut() {
            ix.stale = true;
        }
    } else {
        for &slot in &runtimes.changed {
            for ix in indexes.iter_mut() {
                if let Some(i) = ix.position_of(slot) {
                    ix.update(i, &runtimes.all[slot], now);
                }
            }
        }
    }
    for slot in runtimes.changed.drain(..) {
        runtimes.marked[slot] = false;
    }
}

/// Most indexes kept: one per pool, and a few for snapshots still in use by requests.
pub(super) const MAX_INDEXES: usize = 256;
/// An index no decision used in this many is dropped when another is made.
const IDLE_DECISIONS: u64 = 100_000;

/// The index of `pool` among `indexes`, made when it has none (the least recently used one
/// goes when there are too many).
pub(super) fn find_or_make(
    indexes: &mut Vec<PoolIndex>,
    pool: &PoolRoutes,
    used: u64,
    weighing: bool,
) -> usize {
    let at = match indexes.iter().position(|ix| ix.key == pool.key()) {
        Some(at) => at,
        None => {
            // A snapshot's pools go out of use when the configuration changes: their indexes go
            // once nothing has decided over them for a while.
            indexes.retain(|ix| used.saturating_sub(ix.used) < IDLE_DECISIONS);
            if indexes.len() >= MAX_INDEXES
                && let Some(oldest) = indexes.iter().enumerate().min_by_key(|(_, ix)| ix.used).map(|(i, _)| i)
            {
                indexes.swap_remove(oldest);
            }
            indexes.push(PoolIndex::new(pool, weighing));
            indexes.len() - 1
        }
    };
    indexes[at].used = used;
    // RT-6 may have been switched since the index was made.
    indexes[at].keep_weights(weighing);
    at
}

#[cfg(debug_assertions)]
impl PoolIndex {
    /// The index's own bits against the accounts as they are now: a plain or held account is
    /// in step with its configuration, a plain one has no block or model state, a held one is
    /// held as it reports now, and `full` is exact. Debug builds check it on every decision.
    pub(super) fn assert_consistent(&self, runtimes: &Runtimes, now: i64) {
        for (i, e) in self.entries.iter().enumerate() {
            let rt = &runtimes.all[e.slot];
            assert_eq!(bit(&self.full, i), rt.in_flight >= rt.limit, "full bit of position {i}");
            if self.weighing {
                let weight = fresh_weight(rt, now);
                assert_eq!(bit(&self.weighted, i), weight.is_some(), "weighted bit of position {i}");
                assert_eq!(self.weights[i], weight.map_or(0.0, |(left, _)| left), "weight of position {i}");
                assert!(self.weights_until <= self.weights_fresh[i], "freshness of position {i}");
            }
            if bit(&self.special, i) {
                continue;
            }
            assert!(!rt.stale(e), "position {i} is out of step but not looked at");
            let held = (0..HOLD_KINDS).find(|k| bit(&self.held[*k], i));
            match held {
                Some(k) => assert_eq!(hold(rt, now).map(|(kind, _)| kind), Some(k), "hold of position {i}"),
                None => assert!(rt.blocked_until <= now && !rt.has_models, "position {i} is not plain"),
            }
        }
    }
}

/// The full scan the index stands in for, without side effects: exclusions, unlisted count and
/// candidates. Debug builds check every indexed decision against it.
#[cfg(debug_assertions)]
pub(super) fn reference_scan(
    runtimes: &Runtimes,
    pool: &PoolRoutes,
    ask: &Ask<'_>,
    listed: &[Option<bool>; PROVIDERS],
    reserved: Option<usize>,
    now: i64,
) -> (Excluded, u32, Vec<u32>) {
    let mut excluded = Excluded::default();
    let mut unlisted = 0;
    let mut eligible = Vec::new();
    let mut avoided = Vec::new();
    for (i, e) in pool.entries().iter().enumerate() {
        if !ask.supported.contains(&e.provider) {
            excluded.model_support += 1;
            continue;
        }
        if ask.only.is_some_and(|p| p != e.provider) {
            excluded.policy += 1;
            continue;
        }
        let id = pool.accounts()[i].id;
        if ask.avoid.contains(&id) {
            if !avoided.contains(&id) {
                avoided.push(id);
                excluded.unavailable += 1;
            }
            continue;
        }
        if listed[e.provider as usize] == Some(false) {
            excluded.model_support += 1;
            unlisted += 1;
            continue;
        }
        let rt = &runtimes.all[e.slot];
        let has_room = reserved == Some(e.slot) || rt.in_flight < rt.limit;
        match judge(rt, listed[e.provider as usize], ask.model, has_room, now) {
            Verdict::Unlisted => {
                excluded.model_support += 1;
                unlisted += 1;
            }
            Verdict::Blocked(b) => count_block(&mut excluded, &b),
            Verdict::Full => excluded.capacity += 1,
            Verdict::Eligible => eligible.push(u32::try_from(i).unwrap_or(u32::MAX)),
        }
    }
    (excluded, unlisted, eligible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_masks_cover_exactly_the_range() {
        assert_eq!(range_mask(0, 0, 64), u64::MAX);
        assert_eq!(range_mask(0, 3, 5), 0b11000);
        assert_eq!(range_mask(1, 3, 70), 0b111111);
        assert_eq!(range_mask(1, 64, 128), u64::MAX);
        assert_eq!(range_mask(2, 0, 128), 0);
        for start in 0..130 {
            for end in start..130 {
                let n: u32 = (0..3).map(|w| range_mask(w, start, end).count_ones()).sum();
                assert_eq!(n as usize, end - start, "{start}..{end}");
            }
        }
    }
}
