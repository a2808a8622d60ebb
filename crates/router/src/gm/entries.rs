//! A queue's entries by message id ([`Entries`]).

use std::collections::{btree_map, vec_deque, BTreeMap, VecDeque};
use std::iter::Peekable;
use std::ops::{Bound, RangeBounds};

use super::QEntry;

/// A queue's entries, one per message it holds, in id order: a map from message id to
/// [`QEntry`] with the part of `BTreeMap`'s interface the engine uses.
///
/// Two parts, disjoint: `run`, a sorted array that takes every id arriving above all it
/// holds (a publish: appended, found by binary search, trimmed from the front when done;
/// in a steady state it allocates nothing, `tests/alloc.rs`), and `late`, a B-tree for
/// the ids arriving below the run's newest (dead-lettered into a dead-message queue that
/// holds newer ids, given a place by recovery's `D` records, moved on by a TTL or
/// `max_redeliveries`): O(log n) wherever they lie. Before, those went into the middle
/// of the sorted array, moving up to half of it each (a hostile-input pass: two queues
/// sharing a dead-message queue, the second's 600,000 NACKed `dead-letter` into the
/// middle of 600,000–1,200,000 entries, held every client's round trip for up to 1.9 s).
/// A B-tree alone allocated a node every ~6 appends.
///
/// Every operation is O(log n) but [`Entries::retain`] (O(n), amortised by the caller)
/// and [`Entries::remove`] from the run (the shorter side moved; a spool failure's
/// path only).
#[derive(Debug, Default)]
pub(super) struct Entries {
    run: VecDeque<(u64, QEntry)>,
    late: BTreeMap<u64, QEntry>,
}

impl Entries {
    pub(super) fn new() -> Entries {
        Entries::default()
    }

    pub(super) fn len(&self) -> usize {
        self.run.len() + self.late.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.run.is_empty() && self.late.is_empty()
    }

    fn run_at(&self, id: u64) -> Result<usize, usize> {
        self.run.binary_search_by_key(&id, |e| e.0)
    }

    pub(super) fn get(&self, id: &u64) -> Option<&QEntry> {
        match self.run_at(*id) {
            Ok(i) => Some(&self.run[i].1),
            Err(_) => self.late.get(id),
        }
    }

    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut QEntry> {
        match self.run_at(*id) {
            Ok(i) => Some(&mut self.run[i].1),
            Err(_) => self.late.get_mut(id),
        }
    }

    /// Adds `id`; false (and nothing changed) if it is held already.
    pub(super) fn insert(&mut self, id: u64, e: QEntry) -> bool {
        if self.run.back().is_none_or(|b| b.0 < id) {
            if !self.late.is_empty() && self.late.contains_key(&id) {
                return false;
            }
            self.run.push_back((id, e));
            return true;
        }
        if self.run_at(id).is_ok() {
            return false;
        }
        match self.late.entry(id) {
            btree_map::Entry::Occupied(_) => false,
            btree_map::Entry::Vacant(v) => {
                v.insert(e);
                true
            }
        }
    }

    /// Takes `id` out.
    pub(super) fn remove(&mut self, id: &u64) -> Option<QEntry> {
        match self.run_at(*id) {
            Ok(i) => self.run.remove(i).map(|(_, e)| e),
            Err(_) => self.late.remove(id),
        }
    }

    /// True when the oldest entry is the run's (or the tree is empty).
    fn first_in_run(&self) -> bool {
        match (self.run.front(), self.late.first_key_value()) {
            (Some(a), Some((b, _))) => a.0 < *b,
            (_, b) => b.is_none(),
        }
    }

    pub(super) fn first_key_value(&self) -> Option<(&u64, &QEntry)> {
        if self.first_in_run() {
            self.run.front().map(|(id, e)| (id, e))
        } else {
            self.late.first_key_value()
        }
    }

    pub(super) fn pop_first(&mut self) -> Option<(u64, QEntry)> {
        if self.first_in_run() {
            self.run.pop_front()
        } else {
            self.late.pop_first()
        }
    }

    pub(super) fn last_key_value(&self) -> Option<(&u64, &QEntry)> {
        match (self.run.back(), self.late.last_key_value()) {
            (Some(a), Some(b)) if *b.0 > a.0 => Some(b),
            (Some((id, e)), _) => Some((id, e)),
            (None, b) => b,
        }
    }

    /// The entries with ids in `r`, in id order.
    pub(super) fn range<R: RangeBounds<u64> + Clone>(&self, r: R) -> Iter<'_> {
        let lo = match r.start_bound() {
            Bound::Included(&x) => self.run.partition_point(|e| e.0 < x),
            Bound::Excluded(&x) => self.run.partition_point(|e| e.0 <= x),
            Bound::Unbounded => 0,
        };
        let hi = match r.end_bound() {
            Bound::Included(&x) => self.run.partition_point(|e| e.0 <= x),
            Bound::Excluded(&x) => self.run.partition_point(|e| e.0 < x),
            Bound::Unbounded => self.run.len(),
        };
        Iter {
            run: self.run.range(lo..hi.max(lo)).peekable(),
            late: self.late.range(r).peekable(),
        }
    }

    pub(super) fn iter(&self) -> Iter<'_> {
        self.range(..)
    }

    /// Keeps the entries `keep` says to: O(n).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&u64, &mut QEntry) -> bool) {
        self.run.retain_mut(|(id, e)| keep(id, e));
        self.late.retain(|id, e| keep(id, e));
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = (&'a u64, &'a QEntry);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// [`Entries`] in id order: the run and the tree merged.
pub(super) struct Iter<'a> {
    run: Peekable<vec_deque::Iter<'a, (u64, QEntry)>>,
    late: Peekable<btree_map::Range<'a, u64, QEntry>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a u64, &'a QEntry);

    fn next(&mut self) -> Option<Self::Item> {
        let from_run = match (self.run.peek(), self.late.peek()) {
            (Some(a), Some(b)) => a.0 < *b.0,
            (a, _) => a.is_some(),
        };
        if from_run {
            self.run.next().map(|(id, e)| (id, e))
        } else {
            self.late.next()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(tag: u32) -> QEntry {
        QEntry {
            deliveries: tag,
            binding: 0,
            done: false,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        PopFirst,
        Mark(u64),
        RetainUnmarked,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..200).prop_map(Op::Insert),
            1 => (0u64..200).prop_map(Op::Remove),
            1 => Just(Op::PopFirst),
            2 => (0u64..200).prop_map(Op::Mark),
            1 => Just(Op::RetainUnmarked),
        ]
    }

    proptest! {
        /// Inserts in any order (ascending runs and out-of-order ones), removals, pops
        /// and retains agree with a `BTreeMap`: lookups, first, last, ranges and the
        /// iteration order.
        #[test]
        fn entries_agree_with_a_btree_map(
            ops in proptest::collection::vec(op(), 0..300),
            ascending in proptest::collection::vec(0u64..200, 0..100),
        ) {
            let mut e = Entries::new();
            let mut m: BTreeMap<u64, QEntry> = BTreeMap::new();
            // A first stretch in id order (the run), then the random operations.
            let mut sorted = ascending.clone();
            sorted.sort_unstable();
            let ops = sorted.into_iter().map(Op::Insert).chain(ops);
            for (k, op) in ops.enumerate() {
                match op {
                    Op::Insert(id) => {
                        let fresh = !m.contains_key(&id);
                        if fresh {
                            m.insert(id, entry(k as u32));
                        }
                        prop_assert_eq!(e.insert(id, entry(k as u32)), fresh);
                    }
                    Op::Remove(id) => {
                        let want = m.remove(&id).map(|x| x.deliveries);
                        prop_assert_eq!(e.remove(&id).map(|x| x.deliveries), want);
                    }
                    Op::PopFirst => {
                        let want = m.pop_first().map(|(id, x)| (id, x.deliveries));
                        prop_assert_eq!(e.pop_first().map(|(id, x)| (id, x.deliveries)), want);
                    }
                    Op::Mark(id) => {
                        if let Some(x) = m.get_mut(&id) {
                            x.done = true;
                        }
                        if let Some(x) = e.get_mut(&id) {
                            x.done = true;
                        }
                    }
                    Op::RetainUnmarked => {
                        m.retain(|_, x| !x.done);
                        e.retain(|_, x| !x.done);
                    }
                }
                prop_assert_eq!(e.len(), m.len());
                prop_assert_eq!(e.is_empty(), m.is_empty());
                let key = |x: Option<(&u64, &QEntry)>| x.map(|(id, q)| (*id, q.deliveries, q.done));
                prop_assert_eq!(key(e.first_key_value()), key(m.first_key_value()));
                prop_assert_eq!(key(e.last_key_value()), key(m.last_key_value()));
                let all: Vec<_> = e.iter().map(|x| key(Some(x))).collect();
                let want: Vec<_> = m.iter().map(|x| key(Some(x))).collect();
                prop_assert_eq!(all, want);
                let from = (k as u64 * 7) % 200;
                let got: Vec<u64> = e.range(from..).map(|(id, _)| *id).collect();
                let want: Vec<u64> = m.range(from..).map(|(id, _)| *id).collect();
                prop_assert_eq!(got, want);
                let got: Vec<u64> = e.range(..=from).map(|(id, _)| *id).collect();
                let want: Vec<u64> = m.range(..=from).map(|(id, _)| *id).collect();
                prop_assert_eq!(got, want);
                for id in [from, from + 1] {
                    prop_assert_eq!(key(e.get(&id).map(|q| (&id, q))), key(m.get(&id).map(|q| (&id, q))));
                }
            }
        }
    }

    /// In order, every id goes to the run (no tree node: nothing allocated once the
    /// array has grown); below the newest, to the tree.
    #[test]
    fn ids_in_order_go_to_the_run_and_the_others_to_the_tree() {
        let mut e = Entries::new();
        for id in [1, 2, 5, 9] {
            assert!(e.insert(id, entry(0)));
        }
        assert!(e.late.is_empty());
        assert!(e.insert(3, entry(0)));
        assert!(!e.insert(3, entry(0)), "held already");
        assert!(!e.insert(5, entry(0)), "held already");
        assert_eq!(e.late.len(), 1);
        let ids: Vec<u64> = e.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 5, 9]);
    }
}
