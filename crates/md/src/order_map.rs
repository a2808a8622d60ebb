//! The live-order map of [`crate::book::OrderBooks`]: order reference → [`Order`].
//!
//! Open addressing with Robin Hood linear probing, the reference itself as the hash
//! (home slot = `reference & mask`), and backward-shift deletion. Why not
//! `std::collections::HashMap`:
//!
//! - **Locality.** The exchange assigns references in sequence, and most cancels,
//!   executions and replaces name recent orders, so with the reference as the slot the
//!   entries a feed touches sit in neighbouring cache lines. A scattering hash spreads
//!   them over the whole table (tens of megabytes at the default size) and nearly every
//!   lookup misses the cache.
//! - **No tombstones.** A SwissTable (std's map) marks a removed slot "deleted" when
//!   its neighbourhood is full, which is exactly what sequential keys produce; deleted
//!   slots do not give insert room back, so the table would rehash in place, a pause
//!   of milliseconds in the feed path, every couple of million adds. Backward-shift
//!   deletion leaves no tombstones: a removal moves the displaced entries after it one
//!   slot back, and the table only ever rehashes when it grows.
//!
//! Robin Hood order (along a probe run, no entry is further from its home than the
//! entry before it plus one) is what keeps removal O(1) here: the shift stops at the
//! first entry already in its home slot, which with sequential references is almost
//! always the next one; a lookup of an absent key stops as soon as it passes entries
//! closer to their homes than it is.
//!
//! The load factor is kept at or below 1/2 (the table doubles past it), so probe runs
//! stay short and every probe loop meets an empty slot.
//!
//! **Crafted keys.** With the reference as the hash, references that agree modulo the
//! table size (`i << 40`) share one home, and each add or lookup walked all of them: a
//! hostile-input probe's 60,000 such adds (2.3 MB of feed) cost the feed 6.2 s of CPU
//! and deletes of unknown colliding references ~46 µs each. So the map is adaptive:
//! an insertion that walks more than [`LONG_PROBE`] slots switches it, once and for
//! good, to a keyed hash (std's `RandomState`, SipHash with a per-map random key) and
//! rebuilds it in place; no feed can then make probes long on purpose. An exchange's
//! references never come close (their runs are a slot or two), so a real feed keeps
//! the locality above.

use std::hash::BuildHasher;

use crate::book::Order;

/// Slots an insertion may walk before the map switches to a keyed hash (see the
/// module docs): far above what sequential or random references produce at a load of
/// at most 1/2, and low enough that no lookup ever walks more than a few hundred.
pub const LONG_PROBE: usize = 128;

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    /// `None`: the slot is empty (its `key` is meaningless).
    order: Option<Order>,
}

const EMPTY: Slot = Slot {
    key: 0,
    order: None,
};

/// Live orders by reference (see the module docs).
#[derive(Debug, Clone)]
pub struct OrderMap {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
    /// `Some` once an insertion walked more than [`LONG_PROBE`] slots: homes come from
    /// this keyed hash instead of the reference itself.
    keyed: Option<std::collections::hash_map::RandomState>,
}

impl OrderMap {
    /// A map that holds `capacity` orders before it grows (allocates its slots now).
    pub fn with_capacity(capacity: usize) -> OrderMap {
        let n = capacity.max(8).saturating_mul(2).next_power_of_two();
        OrderMap {
            slots: vec![EMPTY; n],
            mask: n - 1,
            len: 0,
            keyed: None,
        }
    }

    /// Number of live orders.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no order is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Orders it holds before the next growth.
    pub fn capacity(&self) -> usize {
        self.slots.len() / 2
    }

    /// Whether crafted references switched the map to its keyed hash.
    pub fn is_keyed(&self) -> bool {
        self.keyed.is_some()
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        let h = match &self.keyed {
            None => key,
            Some(k) => k.hash_one(key),
        };
        // Truncation on 32-bit targets keeps the low bits, the ones the mask uses.
        (h as usize) & self.mask
    }

    /// Probe distance of the entry in slot `j` from its home slot.
    #[inline]
    fn dist(&self, j: usize) -> usize {
        j.wrapping_sub(self.home(self.slots[j].key)) & self.mask
    }

    /// The slot holding `key`, if it is live.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        let mut i = self.home(key);
        let mut d = 0;
        loop {
            let s = &self.slots[i];
            match s.order {
                None => return None,
                Some(_) if s.key == key => return Some(i),
                // Robin Hood: `key` would have displaced this entry.
                Some(_) if self.dist(i) < d => return None,
                Some(_) => {
                    i = (i + 1) & self.mask;
                    d += 1;
                }
            }
        }
    }

    /// The order with reference `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&Order> {
        self.find(key).and_then(|i| self.slots[i].order.as_ref())
    }

    /// The order with reference `key`, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut Order> {
        let i = self.find(key)?;
        self.slots[i].order.as_mut()
    }

    /// Whether `key` is live.
    #[inline]
    pub fn contains_key(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    /// Inserts `order` under `key` unless `key` is live; returns whether it inserted.
    #[inline]
    pub fn insert(&mut self, key: u64, order: Order) -> bool {
        if self.find(key).is_some() {
            return false;
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let walked = self.place(Slot {
            key,
            order: Some(order),
        });
        self.len += 1;
        if walked > LONG_PROBE && self.keyed.is_none() {
            self.keyed = Some(std::collections::hash_map::RandomState::new());
            self.rebuild(self.slots.len());
        }
        true
    }

    /// Robin Hood insertion of an absent key: walk from its home, and whenever the
    /// resident entry is closer to its own home than the carried one, swap them.
    /// Returns the number of slots walked.
    #[inline]
    fn place(&mut self, mut carried: Slot) -> usize {
        let mut i = self.home(carried.key);
        let mut d = 0;
        let mut walked = 0;
        loop {
            if self.slots[i].order.is_none() {
                self.slots[i] = carried;
                return walked;
            }
            let resident = self.dist(i);
            if resident < d {
                std::mem::swap(&mut self.slots[i], &mut carried);
                d = resident;
            }
            i = (i + 1) & self.mask;
            d += 1;
            walked += 1;
        }
    }

    /// Removes and returns the order with reference `key`.
    #[inline]
    pub fn remove(&mut self, key: u64) -> Option<Order> {
        let i = self.find(key)?;
        self.remove_slot(i)
    }

    /// Applies `f` to the order with reference `key`, removes the order when `f`
    /// returns true, and returns it as `f` left it. One lookup for both.
    #[inline]
    pub fn modify(&mut self, key: u64, f: impl FnOnce(&mut Order) -> bool) -> Option<Order> {
        let i = self.find(key)?;
        let o = self.slots[i].order.as_mut()?;
        let remove = f(o);
        let after = *o;
        if remove {
            self.remove_slot(i);
        }
        Some(after)
    }

    #[inline]
    fn remove_slot(&mut self, i: usize) -> Option<Order> {
        let removed = self.slots[i].order.take();
        self.len -= 1;
        // Backward shift: move each following displaced entry one slot back, up to an
        // empty slot or an entry already in its home.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        while self.slots[j].order.is_some() && self.dist(j) > 0 {
            self.slots[hole] = self.slots[j];
            self.slots[j].order = None;
            hole = j;
            j = (j + 1) & self.mask;
        }
        removed
    }

    /// Doubles the slots and reinserts every live order (allocates; only when more
    /// orders are live than the capacity asked for).
    #[cold]
    fn grow(&mut self) {
        self.rebuild(self.slots.len() * 2);
    }

    /// Places every live order again in `n` slots (growth, or the switch to the keyed
    /// hash).
    #[cold]
    fn rebuild(&mut self, n: usize) {
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        self.mask = n - 1;
        for s in old {
            if s.order.is_some() {
                self.place(s);
            }
        }
    }

    /// Longest probe run a lookup of a live key walks (tests, diagnostics).
    #[cfg(test)]
    fn max_probe(&self) -> usize {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.order.is_some())
            .map(|(j, _)| self.dist(j))
            .max()
            .unwrap_or(0)
    }

    /// The Robin Hood invariant: along a run, each entry is at most one slot further
    /// from its home than the entry before it, and an entry after an empty slot is
    /// in its home.
    #[cfg(test)]
    fn robin_hood_holds(&self) -> bool {
        (0..self.slots.len()).all(|j| {
            let prev = j.wrapping_sub(1) & self.mask;
            match (self.slots[prev].order, self.slots[j].order) {
                (_, None) => true,
                (None, Some(_)) => self.dist(j) == 0,
                (Some(_), Some(_)) => self.dist(j) <= self.dist(prev) + 1,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::Side;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn order(n: u32) -> Order {
        Order {
            locate: (n % 7) as u16,
            side: if n % 2 == 0 { Side::Buy } else { Side::Sell },
            price: n,
            shares: n.wrapping_mul(3),
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Modify(u64, u32),
        Take(u64, u32),
    }

    /// Keys from a small range (so operations collide and probe runs wrap the table)
    /// or far apart but equal modulo small powers of two.
    fn key() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..40, (0u64..8).prop_map(|k| k << 20), any::<u64>()]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            key().prop_map(Op::Remove),
            (key(), any::<u32>()).prop_map(|(k, v)| Op::Modify(k, v)),
            (key(), any::<u32>()).prop_map(|(k, v)| Op::Take(k, v)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// The same across the switch to the keyed hash: a run of colliding inserts
        /// first (past `LONG_PROBE`), then any sequence.
        #[test]
        fn agrees_with_a_hash_map_across_the_keyed_switch(
            ops in prop::collection::vec(op(), 0..200),
            colliding in (LONG_PROBE as u64 + 2)..300,
        ) {
            let mut m = OrderMap::with_capacity(8);
            let mut reference: HashMap<u64, Order> = HashMap::new();
            for i in 0..colliding {
                prop_assert!(m.insert(i << 40, order(i as u32)));
                reference.insert(i << 40, order(i as u32));
            }
            prop_assert!(m.is_keyed());
            for op in &ops {
                match *op {
                    Op::Insert(k, v) => {
                        let fresh = !reference.contains_key(&k);
                        prop_assert_eq!(m.insert(k, order(v)), fresh);
                        reference.entry(k).or_insert(order(v));
                    }
                    Op::Remove(k) | Op::Take(k, _) => prop_assert_eq!(m.remove(k), reference.remove(&k)),
                    Op::Modify(k, v) => {
                        if let Some(o) = m.get_mut(k) {
                            o.shares = v;
                        }
                        if let Some(o) = reference.get_mut(&k) {
                            o.shares = v;
                        }
                    }
                }
                prop_assert_eq!(m.len(), reference.len());
            }
            prop_assert!(m.robin_hood_holds());
            for (k, o) in &reference {
                prop_assert_eq!(m.get(*k), Some(o));
            }
        }

        /// Any sequence of inserts, removes and in-place changes leaves the map
        /// agreeing with std's HashMap on every key, through growth and wrap-around.
        #[test]
        fn agrees_with_a_hash_map(ops in prop::collection::vec(op(), 0..300), cap in 0usize..20) {
            let mut m = OrderMap::with_capacity(cap);
            let mut reference: HashMap<u64, Order> = HashMap::new();
            for op in &ops {
                match *op {
                    Op::Insert(k, v) => {
                        let fresh = !reference.contains_key(&k);
                        prop_assert_eq!(m.insert(k, order(v)), fresh);
                        reference.entry(k).or_insert(order(v));
                    }
                    Op::Remove(k) => prop_assert_eq!(m.remove(k), reference.remove(&k)),
                    Op::Modify(k, v) => {
                        if let Some(o) = m.get_mut(k) {
                            o.shares = v;
                        }
                        if let Some(o) = reference.get_mut(&k) {
                            o.shares = v;
                        }
                    }
                    // `modify` that removes when the new share count is even.
                    Op::Take(k, v) => {
                        let got = m.modify(k, |o| {
                            o.shares = v;
                            v % 2 == 0
                        });
                        let want = reference.get_mut(&k).map(|o| {
                            o.shares = v;
                            *o
                        });
                        if v % 2 == 0 {
                            reference.remove(&k);
                        }
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(m.len(), reference.len());
                prop_assert!(m.robin_hood_holds());
            }
            for (k, o) in &reference {
                prop_assert_eq!(m.get(*k), Some(o));
            }
            for k in 0..40u64 {
                prop_assert_eq!(m.contains_key(k), reference.contains_key(&k));
            }
        }
    }

    /// A day's worth of sequential references with short-lived orders: the table never
    /// grows (no rehash pause) and probe runs stay short, however far the references
    /// run past the table size.
    #[test]
    fn sequential_churn_never_grows_the_table() {
        let mut m = OrderMap::with_capacity(1 << 12);
        let slots = m.slots.len();
        // 4,000 orders live at any time, each removed 4,000 references later, except
        // one in 50,000 which stays until the end.
        let long_lived = |r: u64| r % 50_000 == 0;
        for r in 1..=2_000_000u64 {
            assert!(m.insert(r, order(r as u32)));
            if r > 4000 && !long_lived(r - 4000) {
                assert!(m.remove(r - 4000).is_some(), "order {} is live", r - 4000);
            }
        }
        assert_eq!(m.slots.len(), slots, "the table grew");
        assert!(m.max_probe() < 64, "probe run of {}", m.max_probe());
        assert!(
            !m.is_keyed(),
            "an exchange's references keep the direct hash"
        );
        assert!(m.robin_hood_holds());
        for r in (50_000..=1_996_000u64).step_by(50_000) {
            assert!(m.contains_key(r), "long-lived order {r}");
        }
        assert!(!m.contains_key(4000));
    }

    /// Hostile-input probe: 60,000 references `i << 40` (one home slot) cost the feed
    /// 6.2 s of CPU, each add walking all the earlier ones. The 129th long walk
    /// switches the map to its keyed hash: probe runs stay short, every order is kept,
    /// lookups of absent colliding references stop at once, the invariant holds.
    #[test]
    fn colliding_references_switch_the_map_to_a_keyed_hash() {
        let mut m = OrderMap::with_capacity(1 << 10);
        for i in 0..(LONG_PROBE as u64) {
            assert!(m.insert(i << 40, order(i as u32)));
        }
        assert!(!m.is_keyed(), "not before a walk longer than LONG_PROBE");
        for i in LONG_PROBE as u64..60_000 {
            assert!(m.insert(i << 40, order(i as u32)));
        }
        assert!(m.is_keyed());
        assert!(m.max_probe() < 64, "probe run of {}", m.max_probe());
        assert!(m.robin_hood_holds());
        assert_eq!(m.len(), 60_000);
        for i in 0..60_000u64 {
            assert_eq!(m.get(i << 40), Some(&order(i as u32)));
        }
        for i in 60_000..120_000u64 {
            assert!(!m.contains_key(i << 40));
        }
        for i in (0..60_000u64).step_by(2) {
            assert_eq!(m.remove(i << 40), Some(order(i as u32)));
        }
        assert!(m.robin_hood_holds());
        assert_eq!(m.len(), 30_000);
        assert!(m.contains_key(1 << 40) && !m.contains_key(0));
    }

    #[test]
    fn grows_past_its_capacity_and_keeps_every_order() {
        let mut m = OrderMap::with_capacity(8);
        assert_eq!(m.capacity(), 8);
        for r in 0..1000u64 {
            assert!(m.insert(r * 977, order(r as u32)));
        }
        assert!(m.capacity() >= 1000);
        for r in 0..1000u64 {
            assert_eq!(m.get(r * 977), Some(&order(r as u32)));
        }
        assert!(!m.insert(977, order(1)), "a live reference is not replaced");
        assert_eq!(m.len(), 1000);
        assert!(!m.is_empty());
    }
}
