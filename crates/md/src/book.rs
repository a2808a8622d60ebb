//! Order books for every symbol of an ITCH session.
//!
//! [`OrderBooks`] holds one [`Book`] per stock locate and a single map of live orders
//! keyed by the day-unique ITCH order reference number (ITCH reuses no reference within
//! a day, across all symbols, so one global map serves every book). The feed handler
//! calls one method per ITCH order message:
//!
//! | ITCH message | method |
//! |---|---|
//! | `A` / `F` add order | [`OrderBooks::add`] |
//! | `E` / `C` order executed | [`OrderBooks::execute`] |
//! | `X` order cancel (partial) | [`OrderBooks::cancel`] |
//! | `D` order delete | [`OrderBooks::delete`] |
//! | `U` order replace | [`OrderBooks::replace`] |
//!
//! Trades that never rested on the book (`P` non-displayed, `Q` cross) do not touch it.
//!
//! ## Layout, and why
//!
//! - Orders live in an [`OrderMap`]: open addressing with the reference itself as the
//!   hash, capacity reserved up front, no tombstones, so steady state neither rehashes
//!   nor allocates. The exchange assigns references in sequence and most cancels,
//!   executions and replaces name recent orders, so the entries a feed touches sit in
//!   neighbouring cache lines instead of being scattered over a table of tens of
//!   megabytes (see [`crate::order_map`] for the layout, and for the keyed hash it
//!   switches to when references are crafted to collide).
//! - Before applying a packet, the feed handler looks up all its references once
//!   ([`OrderBooks::warm`]) so that their cache misses overlap.
//! - Each side of a book keeps its best levels (up to 256) in a `Vec<Level>` sorted so
//!   that the **best level is last** (bids by ascending price, asks by descending
//!   price). Order flow is concentrated near the touch, so inserting or removing a
//!   level moves only the few levels between it and the end, and the top of book is
//!   `last()`. Finding a level is a short scan from the end, falling back to a binary
//!   search for levels deeper in the vector. Once the vectors have grown to the book's
//!   depth they never allocate again.
//! - Levels beyond the vector's 256 live in a `BTreeMap`, O(log n) an operation: a
//!   single vector had let a feed of adds each one tick below the whole ladder move
//!   all of it every time, O(n^2) in all. Levels cross between the two in batches
//!   (see `Ladder`), so every operation moves at most a few hundred levels, amortized a
//!   few. The map allocates as it grows, as a vector past its capacity does.
//! - Every mutation returns a [`Change`] saying which book and side it touched and the
//!   **rank** of the touched level (0 = best; exact below [`EXACT_RANKS`], at least
//!   that deeper). The feed handler derives from it, without comparing snapshots,
//!   whether the top of book (rank 0) or the top N levels (rank < N, N at most
//!   [`MAX_DEPTH_LEVELS`](crate::update::MAX_DEPTH_LEVELS)) changed.
//!
//! References that are unknown (never added, already gone, or lost in an unrecoverable
//! gap) are counted in [`OrderBooks::unknown_refs`], never a panic; an add reusing a
//! live reference is counted in [`OrderBooks::duplicate_refs`] and ignored.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::{btree_map, BTreeMap};

use crate::order_map::OrderMap;

/// Side of an order or a level: the ITCH codec's own type (`B` / `S` on the wire).
pub use tickwire_itch::Side;

/// A live order as the book keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// Stock locate of its book.
    pub locate: u16,
    /// Its side.
    pub side: Side,
    /// Limit price, ITCH units (4 implied decimals).
    pub price: u32,
    /// Shares still open.
    pub shares: u32,
}

/// One aggregated price level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Level {
    /// Price, ITCH units (4 implied decimals).
    pub price: u32,
    /// Open orders at this price.
    pub orders: u32,
    /// Sum of their open shares.
    pub shares: u64,
}

/// Best bid and offer of one book; an empty side has price, shares and orders 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Top {
    /// Best bid level (zeroed when there is no bid).
    pub bid: Level,
    /// Best ask level (zeroed when there is no offer).
    pub ask: Level,
}

/// What one book mutation touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// Stock locate of the book.
    pub locate: u16,
    /// Side touched.
    pub side: Side,
    /// Smallest rank of a touched level (0 = the best level), counted on the side's
    /// levels as they were when that level was touched. Exact below [`EXACT_RANKS`];
    /// a deeper level reports a rank of at least [`EXACT_RANKS`] (and at most its own),
    /// which is all the questions below need. The top of book changed iff this is 0;
    /// the best N levels (N <= [`EXACT_RANKS`]) changed iff this is below N.
    pub rank: usize,
    /// Price of the (last) order touched, ITCH units.
    pub price: u32,
}

/// Result of an execution against a resting order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// The book change.
    pub change: Change,
    /// Shares actually removed (the requested count, capped at the order's open shares).
    pub shares: u32,
}

/// Levels kept in the dense, best-last vector of a side ([`Ladder`]). A side deeper
/// than this keeps its worst levels in an ordered map, so no operation moves more than
/// about this many levels. 256 is far deeper than order flow goes on the synthetic
/// sessions and most real books, which therefore never leave the vector.
const NEAR_LEVELS: usize = 256;

/// Ranks below this are reported exactly in [`Change::rank`]; a level at least this
/// deep reports a rank that is at least this, never more than its true rank.
pub const EXACT_RANKS: usize = NEAR_LEVELS / 4;

// The feed decides from `Change::rank < depth_levels` whether a depth update is due: the
// ranks it compares must be exact for every depth it can publish.
const _: () = assert!(crate::update::MAX_DEPTH_LEVELS <= EXACT_RANKS);

/// Levels of one side: the best up to `MAX` in `near`, best last, the rest in `far`.
///
/// `Vec::insert` into one vector of every level cost a move of all the levels better
/// than the new one: an add one tick below the whole ladder moved all of it, and N
/// such adds on one symbol cost O(N^2) (a spoofed feed of 300,000 descending bids took
/// 7.2 s of feed CPU). Order flow concentrates near the touch, so the vector still
/// serves nearly every operation with a short scan from the end; what goes deeper than
/// `MAX` levels lands in a `BTreeMap`, at O(log n) an operation.
///
/// Invariants: every `far` key is below every `near` key; `near` holds at most `MAX`
/// levels, and at least `MAX / 4` whenever `far` is not empty (so an empty `near`
/// means an empty side, and `far` ranks are at least `MAX / 4`). Levels move between
/// the two in batches (`spill` down to `5 MAX / 8`, `refill` up to it), so a batch is
/// paid for by the `3 MAX / 8` operations it takes to need the next one.
#[derive(Debug, Clone, Default)]
struct Ladder<const MAX: usize = NEAR_LEVELS> {
    /// The best levels, best last.
    near: Vec<Level>,
    /// The levels worse than all of `near`, by [`key`].
    far: BTreeMap<u32, Level>,
    /// Levels moved in memory, for the tests' work bounds.
    #[cfg(test)]
    moved: u64,
}

/// Sort key: ascending for both sides, best = largest.
#[inline]
fn key(side: Side, price: u32) -> u32 {
    match side {
        Side::Buy => price,
        Side::Sell => !price,
    }
}

impl<const MAX: usize> Ladder<MAX> {
    /// Below this many levels in `near`, `far` refills it.
    const MIN: usize = {
        assert!(MAX >= 8, "a ladder keeps at least 8 levels in its vector");
        MAX / 4
    };
    /// What `spill` and `refill` leave in `near`.
    const KEEP: usize = MAX * 5 / 8;

    fn with_capacity(levels: usize) -> Self {
        Ladder {
            near: Vec::with_capacity(levels.min(MAX + 1)),
            far: BTreeMap::new(),
            #[cfg(test)]
            moved: 0,
        }
    }

    /// Room for `levels` in `near` (as [`Ladder::with_capacity`]) without touching
    /// what it holds.
    fn reserve(&mut self, levels: usize) {
        let want = levels.min(MAX + 1);
        self.near.reserve(want.saturating_sub(self.near.len()));
    }

    fn best(&self) -> Option<Level> {
        self.near.last().copied()
    }

    fn len(&self) -> usize {
        self.near.len() + self.far.len()
    }

    /// Index in `near` of the level with `price`, or `Err(insertion index)`.
    #[inline]
    fn find(&self, side: Side, price: u32) -> Result<usize, usize> {
        let k = key(side, price);
        let lv = &self.near;
        // Near the touch: a short linear scan from the end.
        let mut i = lv.len();
        let stop = lv.len().saturating_sub(8);
        while i > stop {
            let lk = key(side, lv[i - 1].price);
            if lk == k {
                return Ok(i - 1);
            }
            if lk < k {
                return Err(i);
            }
            i -= 1;
        }
        if i == 0 {
            return Err(0);
        }
        lv[..i].binary_search_by_key(&k, |l| key(side, l.price))
    }

    /// Adds `shares` of one new order at `price`; returns the level's rank (exact below
    /// `MAX / 4`, see [`Change::rank`]).
    #[inline]
    fn add(&mut self, side: Side, price: u32, shares: u32) -> usize {
        match self.find(side, price) {
            Ok(i) => {
                let l = &mut self.near[i];
                l.orders += 1;
                l.shares += u64::from(shares);
                self.near.len() - 1 - i
            }
            // Worse than every level of `near`, and `far` holds those.
            Err(0) if !self.far.is_empty() => {
                let l = self.far.entry(key(side, price)).or_insert(Level {
                    price,
                    orders: 0,
                    shares: 0,
                });
                l.orders += 1;
                l.shares += u64::from(shares);
                self.near.len()
            }
            Err(i) => {
                self.count_moves(self.near.len() - i);
                self.near.insert(
                    i,
                    Level {
                        price,
                        orders: 1,
                        shares: u64::from(shares),
                    },
                );
                let rank = self.near.len() - 1 - i;
                if self.near.len() > MAX {
                    self.spill(side);
                }
                rank
            }
        }
    }

    /// Removes `shares` (and the order itself when `gone`) from the level at `price`;
    /// returns the level's rank before any removal (exact below `MAX / 4`). The level
    /// must exist.
    #[inline]
    fn remove(&mut self, side: Side, price: u32, shares: u32, gone: bool) -> usize {
        match self.find(side, price) {
            Ok(i) => {
                let rank = self.near.len() - 1 - i;
                let l = &mut self.near[i];
                l.shares = l.shares.saturating_sub(u64::from(shares));
                if gone {
                    l.orders = l.orders.saturating_sub(1);
                    if l.orders == 0 {
                        self.count_moves(rank);
                        self.near.remove(i);
                        if self.near.len() < Self::MIN && !self.far.is_empty() {
                            self.refill();
                        }
                    }
                }
                rank
            }
            Err(_) => {
                let k = key(side, price);
                let Some(l) = self.far.get_mut(&k) else {
                    // Unreachable while the order map and the ladders agree (every live
                    // order's shares are on its level); report the touch anyway rather
                    // than panic.
                    return 0;
                };
                l.shares = l.shares.saturating_sub(u64::from(shares));
                if gone {
                    l.orders = l.orders.saturating_sub(1);
                    if l.orders == 0 {
                        self.far.remove(&k);
                    }
                }
                self.near.len()
            }
        }
    }

    /// Moves the worst levels of an overfull `near` into `far`, leaving `KEEP`.
    #[cold]
    fn spill(&mut self, side: Side) {
        let n = self.near.len() - Self::KEEP;
        self.count_moves(self.near.len());
        for l in self.near.drain(..n) {
            self.far.insert(key(side, l.price), l);
        }
    }

    /// Moves the best levels of `far` under the worst of `near`, up to `KEEP` in all.
    #[cold]
    fn refill(&mut self) {
        let len = self.near.len();
        let n = Self::KEEP.saturating_sub(len).min(self.far.len());
        self.count_moves(len + n);
        self.near.resize(len + n, Level::default());
        self.near.copy_within(0..len, n);
        // Best first from `far`, so into `near` from the top of the gap down.
        for (slot, (_, l)) in self.near[..n]
            .iter_mut()
            .rev()
            .zip(std::iter::from_fn(|| self.far.pop_last()))
        {
            *slot = l;
        }
    }

    /// Counts `n` levels moved in memory (tests only: their work bound).
    #[inline(always)]
    fn count_moves(&mut self, n: usize) {
        #[cfg(test)]
        {
            self.moved += n as u64;
        }
        let _ = n;
    }

    /// Every level, best first.
    fn iter(&self) -> Levels<'_> {
        Levels {
            near: self.near.iter().rev(),
            far: self.far.values().rev(),
        }
    }
}

/// The levels of one side, best first ([`Book::levels`]).
struct Levels<'a> {
    near: std::iter::Rev<std::slice::Iter<'a, Level>>,
    far: std::iter::Rev<btree_map::Values<'a, u32, Level>>,
}

impl Iterator for Levels<'_> {
    type Item = Level;

    #[inline]
    fn next(&mut self) -> Option<Level> {
        self.near.next().or_else(|| self.far.next()).copied()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.near.len() + self.far.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Levels<'_> {}

/// The book of one symbol.
#[derive(Debug, Clone, Default)]
pub struct Book {
    bids: Ladder,
    asks: Ladder,
}

impl Book {
    /// An empty book with room for `levels` price levels per side before allocating.
    pub fn with_capacity(levels: usize) -> Book {
        Book {
            bids: Ladder::with_capacity(levels),
            asks: Ladder::with_capacity(levels),
        }
    }

    fn ladder(&self, side: Side) -> &Ladder {
        match side {
            Side::Buy => &self.bids,
            Side::Sell => &self.asks,
        }
    }

    fn ladder_mut(&mut self, side: Side) -> &mut Ladder {
        match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        }
    }

    /// Best level of `side`, if any.
    #[inline]
    pub fn best(&self, side: Side) -> Option<Level> {
        self.ladder(side).best()
    }

    /// Best bid and offer (zeroed sides when empty).
    #[inline]
    pub fn top(&self) -> Top {
        Top {
            bid: self.best(Side::Buy).unwrap_or_default(),
            ask: self.best(Side::Sell).unwrap_or_default(),
        }
    }

    /// The levels of `side`, best first.
    pub fn levels(&self, side: Side) -> impl ExactSizeIterator<Item = Level> + '_ {
        self.ladder(side).iter()
    }

    /// The best `n` levels of `side` (fewer if the side is shallower), best first.
    pub fn depth(&self, side: Side, n: usize) -> impl ExactSizeIterator<Item = Level> + '_ {
        self.levels(side).take(n)
    }

    /// Number of price levels on `side`.
    pub fn level_count(&self, side: Side) -> usize {
        self.ladder(side).len()
    }
}

/// Every book of a session plus the global order map.
#[derive(Debug, Clone)]
pub struct OrderBooks {
    orders: OrderMap,
    books: Vec<Book>,
    levels_per_side: usize,
    /// Executes, cancels, deletes and replaces naming a reference that is not live.
    pub unknown_refs: u64,
    /// Adds (or replace targets) reusing a live reference; ignored.
    pub duplicate_refs: u64,
    /// Live orders held at most ([`OrderBooks::set_max_orders`]; unbounded by default).
    max_orders: usize,
    /// Adds refused because `max_orders` orders were live (the order is then unknown,
    /// like one whose add was lost); see [`OrderBooks::set_max_orders`].
    pub refused_full: u64,
}

impl Default for OrderBooks {
    fn default() -> Self {
        OrderBooks::with_capacity(1 << 16, 64)
    }
}

impl OrderBooks {
    /// Books with room for `orders` live orders and `levels_per_side` levels per side of
    /// each book before anything allocates.
    pub fn with_capacity(orders: usize, levels_per_side: usize) -> OrderBooks {
        OrderBooks {
            orders: OrderMap::with_capacity(orders),
            books: Vec::new(),
            levels_per_side,
            unknown_refs: 0,
            duplicate_refs: 0,
            max_orders: usize::MAX,
            refused_full: 0,
        }
    }

    /// Bounds the live orders to `max` (at least 1): an add of a new reference while
    /// `max` are live is refused and counted in [`OrderBooks::refused_full`], and the
    /// later messages naming it count as unknown references. The map's memory grows
    /// with live orders (about 50-100 bytes each), and which orders are live is the
    /// feed's to choose: a spoofed or broken feed adding orders and never deleting
    /// them would otherwise grow the process without end.
    pub fn set_max_orders(&mut self, max: usize) {
        self.max_orders = max.max(1);
    }

    /// Makes sure a book exists for `locate` (called at Stock Directory time so that the
    /// first order of a symbol does not allocate).
    pub fn ensure(&mut self, locate: u16) -> &mut Book {
        let i = usize::from(locate);
        if self.books.len() <= i {
            self.books.resize_with(i + 1, Book::default);
        }
        let b = &mut self.books[i];
        // Room made, never the book replaced: a book made empty by a later locate's
        // resize may hold orders already (asks only left its bids without capacity, and
        // replacing it lost its levels while the orders stayed; review).
        b.bids.reserve(self.levels_per_side);
        b.asks.reserve(self.levels_per_side);
        b
    }

    /// The book of `locate`, if one was ever created.
    pub fn book(&self, locate: u16) -> Option<&Book> {
        self.books.get(usize::from(locate))
    }

    /// A live order by reference.
    pub fn order(&self, order_ref: u64) -> Option<&Order> {
        self.orders.get(order_ref)
    }

    /// Looks `order_ref` up and throws the answer away: run over the references of a
    /// whole packet before applying it, the lookups are independent of each other, so
    /// the CPU overlaps their cache misses instead of taking them one message at a
    /// time (see `FeedHandler::apply_packet`). Returns whether the order is live.
    #[inline]
    pub fn warm(&self, order_ref: u64) -> bool {
        self.orders.contains_key(order_ref)
    }

    /// Number of live orders.
    pub fn order_count(&self) -> usize {
        self.orders.len()
    }

    #[inline]
    fn book_mut(&mut self, locate: u16) -> &mut Book {
        let i = usize::from(locate);
        if self.books.len() <= i {
            self.ensure(locate);
        }
        &mut self.books[i]
    }

    /// Adds a new order (`A`, `F`). `None` (and counted) if the reference is live, or
    /// if the books hold their maximum of live orders ([`OrderBooks::set_max_orders`]).
    #[inline]
    pub fn add(
        &mut self,
        locate: u16,
        order_ref: u64,
        side: Side,
        shares: u32,
        price: u32,
    ) -> Option<Change> {
        let order = Order {
            locate,
            side,
            price,
            shares,
        };
        if self.orders.len() >= self.max_orders {
            if self.orders.contains_key(order_ref) {
                self.duplicate_refs += 1;
            } else {
                self.refused_full += 1;
            }
            return None;
        }
        if !self.orders.insert(order_ref, order) {
            self.duplicate_refs += 1;
            return None;
        }
        let rank = self
            .book_mut(locate)
            .ladder_mut(side)
            .add(side, price, shares);
        Some(Change {
            locate,
            side,
            rank,
            price,
        })
    }

    /// Removes up to `shares` from a live order; the order goes when none are left.
    #[inline]
    fn reduce(&mut self, order_ref: u64, shares: u32, delete: bool) -> Option<Execution> {
        // One lookup: takes the shares and removes the order when none are left.
        let mut taken = 0;
        let Some(o) = self.orders.modify(order_ref, |o| {
            taken = if delete {
                o.shares
            } else {
                shares.min(o.shares)
            };
            o.shares -= taken;
            o.shares == 0
        }) else {
            self.unknown_refs += 1;
            return None;
        };
        let (locate, side, price, gone) = (o.locate, o.side, o.price, o.shares == 0);
        let rank = self
            .book_mut(locate)
            .ladder_mut(side)
            .remove(side, price, taken, gone);
        Some(Execution {
            change: Change {
                locate,
                side,
                rank,
                price,
            },
            shares: taken,
        })
    }

    /// Executes `shares` of a resting order (`E`, `C`); the fill is capped at its open
    /// shares. `None` (and counted) for an unknown reference.
    #[inline]
    pub fn execute(&mut self, order_ref: u64, shares: u32) -> Option<Execution> {
        self.reduce(order_ref, shares, false)
    }

    /// Cancels `shares` of an order (`X`), capped at its open shares.
    #[inline]
    pub fn cancel(&mut self, order_ref: u64, shares: u32) -> Option<Change> {
        self.reduce(order_ref, shares, false).map(|e| e.change)
    }

    /// Deletes an order (`D`).
    #[inline]
    pub fn delete(&mut self, order_ref: u64) -> Option<Change> {
        self.reduce(order_ref, 0, true).map(|e| e.change)
    }

    /// Replaces an order (`U`): deletes `order_ref` and adds `new_ref` on the same book
    /// and side with the new shares and price. Unknown `order_ref` counts and changes
    /// nothing; a live `new_ref` counts as a duplicate (the old order is still gone).
    #[inline]
    pub fn replace(
        &mut self,
        order_ref: u64,
        new_ref: u64,
        shares: u32,
        price: u32,
    ) -> Option<Change> {
        let gone = self.reduce(order_ref, 0, true)?.change;
        match self.add(gone.locate, new_ref, gone.side, shares, price) {
            Some(added) => Some(Change {
                rank: gone.rank.min(added.rank),
                ..added
            }),
            None => Some(gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review: a book created empty by a later locate's resize, holding only asks, was
    /// replaced at its Stock Directory (`ensure`), its levels lost while its orders
    /// stayed.
    #[test]
    fn ensure_keeps_what_a_book_holds() {
        let mut b = OrderBooks::with_capacity(16, 4);
        b.add(5, 1, Side::Sell, 100, 10_000);
        b.add(3, 2, Side::Sell, 200, 10_100);
        b.ensure(3);
        let book = b.book(3).unwrap();
        assert_eq!(book.level_count(Side::Sell), 1);
        assert_eq!(book.levels(Side::Sell).next().map(|l| l.shares), Some(200));
    }

    /// Hostile-input pass: a feed adding orders and never deleting them grew the map
    /// without end (3 M orders: 333 MB). At the bound an add is refused and counted,
    /// a duplicate stays a duplicate, and a delete makes room again.
    #[test]
    fn adds_past_max_orders_are_refused_and_counted() {
        let mut b = OrderBooks::with_capacity(16, 4);
        b.set_max_orders(3);
        for r in 1..=3 {
            assert!(b.add(1, r, Side::Buy, 100, 10_000 + r as u32).is_some());
        }
        assert!(b.add(1, 4, Side::Buy, 100, 9_000).is_none());
        assert!(b.add(1, 2, Side::Buy, 100, 9_000).is_none());
        assert_eq!(
            (b.order_count(), b.refused_full, b.duplicate_refs),
            (3, 1, 1)
        );
        assert!(b.order(4).is_none());
        // The refused order is unknown to later messages.
        assert!(b.delete(4).is_none());
        assert_eq!(b.unknown_refs, 1);
        // A replace at the bound frees the old reference first.
        assert!(b.replace(3, 5, 50, 10_005).is_some());
        assert!(b.order(5).is_some() && b.order(3).is_none());
        assert!(b.delete(1).is_some());
        assert!(b.add(1, 6, Side::Sell, 10, 11_000).is_some());
        assert_eq!((b.order_count(), b.refused_full), (3, 1));
        let bids: u64 = b.book(1).unwrap().levels(Side::Buy).map(|l| l.shares).sum();
        assert_eq!(bids, 150);
    }

    #[test]
    fn warm_answers_whether_an_order_is_live() {
        let mut b = OrderBooks::with_capacity(16, 4);
        b.add(1, 7, Side::Buy, 100, 10_0000);
        assert!(b.warm(7));
        assert!(!b.warm(8));
        b.delete(7);
        assert!(!b.warm(7));
    }

    #[test]
    fn levels_aggregate_and_sort_best_first() {
        let mut b = OrderBooks::with_capacity(16, 4);
        assert_eq!(b.add(1, 1, Side::Buy, 100, 10_0000).unwrap().rank, 0);
        assert_eq!(b.add(1, 2, Side::Buy, 50, 10_0100).unwrap().rank, 0);
        assert_eq!(b.add(1, 3, Side::Buy, 25, 10_0000).unwrap().rank, 1);
        assert_eq!(b.add(1, 4, Side::Sell, 10, 10_0300).unwrap().rank, 0);
        assert_eq!(b.add(1, 5, Side::Sell, 10, 10_0200).unwrap().rank, 0);
        let book = b.book(1).unwrap();
        let bids: Vec<_> = book.levels(Side::Buy).collect();
        assert_eq!(
            bids,
            vec![
                Level {
                    price: 10_0100,
                    orders: 1,
                    shares: 50
                },
                Level {
                    price: 10_0000,
                    orders: 2,
                    shares: 125
                },
            ]
        );
        let asks: Vec<_> = book.levels(Side::Sell).map(|l| l.price).collect();
        assert_eq!(asks, vec![10_0200, 10_0300]);
        assert_eq!(book.top().bid.price, 10_0100);
        assert_eq!(book.top().ask.price, 10_0200);
    }

    #[test]
    fn execute_cancel_delete_replace() {
        let mut b = OrderBooks::with_capacity(16, 4);
        b.add(7, 1, Side::Sell, 100, 500);
        b.add(7, 2, Side::Sell, 100, 600);
        let e = b.execute(1, 30).unwrap();
        assert_eq!((e.shares, e.change.rank, e.change.price), (30, 0, 500));
        assert_eq!(b.book(7).unwrap().top().ask.shares, 70);
        // Over-execution is capped and removes the order.
        assert_eq!(b.execute(1, 1000).unwrap().shares, 70);
        assert!(b.order(1).is_none());
        assert_eq!(b.book(7).unwrap().top().ask.price, 600);
        assert_eq!(b.cancel(2, 40).unwrap().rank, 0);
        assert_eq!(b.order(2).unwrap().shares, 60);
        let r = b.replace(2, 3, 10, 550).unwrap();
        assert_eq!((r.side, r.rank, r.price), (Side::Sell, 0, 550));
        assert_eq!(b.order(3).unwrap().locate, 7);
        assert_eq!(b.book(7).unwrap().level_count(Side::Sell), 1);
        assert!(b.delete(3).is_some());
        assert_eq!(b.book(7).unwrap().top(), Top::default());
        assert_eq!(b.order_count(), 0);
    }

    #[test]
    fn unknown_and_duplicate_refs_are_counted() {
        let mut b = OrderBooks::with_capacity(16, 4);
        assert!(b.delete(9).is_none());
        assert!(b.execute(9, 1).is_none());
        assert!(b.cancel(9, 1).is_none());
        assert!(b.replace(9, 10, 1, 1).is_none());
        assert_eq!(b.unknown_refs, 4);
        b.add(0, 1, Side::Buy, 1, 1);
        assert!(b.add(0, 1, Side::Sell, 1, 1).is_none());
        assert_eq!(b.duplicate_refs, 1);
        assert_eq!(b.book(0).unwrap().level_count(Side::Sell), 0);
    }

    #[test]
    fn deep_levels_use_the_binary_search() {
        let mut b = OrderBooks::with_capacity(256, 4);
        for i in 0..100u32 {
            b.add(2, u64::from(i), Side::Buy, 1, 1000 + (i * 37) % 100 * 10);
        }
        let prices: Vec<u32> = b
            .book(2)
            .unwrap()
            .levels(Side::Buy)
            .map(|l| l.price)
            .collect();
        assert_eq!(prices.len(), 100);
        assert!(prices.windows(2).all(|w| w[0] > w[1]));
        // A level far from the touch.
        let c = b.delete(0).unwrap();
        assert_eq!((c.price, c.rank), (1000, 99));
    }

    /// Regression: `Ladder::add` used `Vec::insert` into one vector of every level with
    /// the best last, so each bid one tick below the whole ladder moved all of it (N
    /// such adds: N^2 / 2 level moves, 7.2 s of feed CPU for 300,000 from a spoofed
    /// feed). Counts the levels moved instead of timing anything.
    #[test]
    fn adds_each_one_tick_below_the_ladder_move_few_levels() {
        const N: u32 = 100_000;
        let n = u64::from(N);
        let mut b = OrderBooks::with_capacity(2 * N as usize, 64);
        for i in 0..N {
            let bid = b
                .add(1, u64::from(i), Side::Buy, 100, 4_000_000 - i)
                .unwrap();
            let ask = b
                .add(1, n + u64::from(i), Side::Sell, 100, 5_000_000 + i)
                .unwrap();
            for c in [bid, ask] {
                assert!(c.rank == i as usize || c.rank >= EXACT_RANKS, "{c:?}");
            }
        }
        let book = b.book(1).unwrap();
        for (side, best) in [(Side::Buy, 4_000_000), (Side::Sell, 5_000_000)] {
            assert_eq!(book.level_count(side), N as usize);
            assert_eq!(book.levels(side).len(), N as usize);
            assert_eq!(book.best(side).unwrap().price, best);
            let l = book.ladder(side);
            assert!(l.near.len() <= NEAR_LEVELS);
            // The first adds each went under the whole vector (~NEAR_LEVELS^2 / 2 moves),
            // the rest into the map; one vector of every level moved N^2 / 2 = 5e9.
            assert!(l.moved <= n, "{side:?}: {} levels moved", l.moved);
        }
        let prices: Vec<u32> = book.depth(Side::Buy, 3).map(|l| l.price).collect();
        assert_eq!(prices, [4_000_000, 3_999_999, 3_999_998]);
        let prices: Vec<u32> = book.levels(Side::Sell).map(|l| l.price).collect();
        assert!(prices.windows(2).all(|w| w[0] + 1 == w[1]));

        // Bids deleted worst first, asks best first (every level comes back out of the
        // map into the vector on the way).
        for i in (0..N).rev() {
            assert!(b.delete(u64::from(i)).is_some());
        }
        for i in 0..N {
            let c = b.delete(n + u64::from(i)).unwrap();
            assert_eq!((c.rank, c.price), (0, 5_000_000 + i));
        }
        let book = b.book(1).unwrap();
        assert_eq!(book.top(), Top::default());
        for side in [Side::Buy, Side::Sell] {
            let l = book.ladder(side);
            assert!(l.far.is_empty());
            // Refills: ~KEEP levels moved per 3 NEAR_LEVELS / 8 deletes.
            assert!(l.moved <= 3 * n, "{side:?}: {} levels moved", l.moved);
        }
    }

    mod ladder {
        //! Property test: one ladder with a small vector (8 levels), so that short
        //! sequences spill into the map and refill from it, against a naive model.
        use super::*;
        use proptest::prelude::*;

        type Small = Ladder<8>;

        #[derive(Debug, Clone)]
        enum Op {
            Add {
                price: u32,
                shares: u32,
            },
            Run {
                from: u32,
                count: u32,
            },
            Remove {
                pick: usize,
                shares: u32,
                delete: bool,
            },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                5 => (1u32..40, 1u32..100).prop_map(|(price, shares)| Op::Add { price, shares }),
                1 => (20u32..40, 1u32..20).prop_map(|(from, count)| Op::Run { from, count }),
                6 => (any::<usize>(), 1u32..100, any::<bool>())
                    .prop_map(|(pick, shares, delete)| Op::Remove { pick, shares, delete }),
            ]
        }

        /// Levels of the model's orders, best first, and the true rank of `price`.
        fn levels(side: Side, orders: &[(u32, u32)]) -> Vec<Level> {
            let mut by_key: BTreeMap<u32, Level> = BTreeMap::new();
            for &(price, shares) in orders {
                let l = by_key.entry(key(side, price)).or_insert(Level {
                    price,
                    ..Level::default()
                });
                l.orders += 1;
                l.shares += u64::from(shares);
            }
            by_key.into_values().rev().collect()
        }

        fn true_rank(side: Side, orders: &[(u32, u32)], price: u32) -> usize {
            levels(side, orders)
                .iter()
                .filter(|l| key(side, l.price) > key(side, price))
                .count()
        }

        fn rank_ok(got: usize, want: usize) -> bool {
            if want < Small::MIN {
                got == want
            } else {
                (Small::MIN..=want).contains(&got)
            }
        }

        proptest! {
            #[test]
            fn small_ladder_matches_reference_model(
                buy in any::<bool>(),
                ops in proptest::collection::vec(op(), 1..200),
            ) {
                let side = if buy { Side::Buy } else { Side::Sell };
                let mut l = Small::with_capacity(4);
                // Live orders: (price, open shares).
                let mut orders: Vec<(u32, u32)> = Vec::new();
                for op in ops {
                    match op {
                        Op::Add { price, shares } => {
                            orders.push((price, shares));
                            let want = true_rank(side, &orders, price);
                            let got = l.add(side, price, shares);
                            prop_assert!(rank_ok(got, want), "rank {} for {}", got, want);
                        }
                        Op::Run { from, count } => {
                            for j in 0..count {
                                let price = if buy { from - j.min(from - 1) } else { from + j };
                                orders.push((price, 1));
                                let want = true_rank(side, &orders, price);
                                let got = l.add(side, price, 1);
                                prop_assert!(rank_ok(got, want), "rank {} for {}", got, want);
                            }
                        }
                        Op::Remove { pick, shares, delete } => {
                            if orders.is_empty() {
                                continue;
                            }
                            let i = pick % orders.len();
                            let (price, open) = orders[i];
                            let want = true_rank(side, &orders, price);
                            let take = if delete { open } else { shares.min(open) };
                            let got = l.remove(side, price, take, take == open);
                            prop_assert!(rank_ok(got, want), "rank {} for {}", got, want);
                            if take == open {
                                orders.swap_remove(i);
                            } else {
                                orders[i].1 -= take;
                            }
                        }
                    }
                    let want = levels(side, &orders);
                    prop_assert_eq!(l.iter().len(), want.len());
                    prop_assert_eq!(l.len(), want.len());
                    prop_assert_eq!(l.iter().collect::<Vec<_>>(), want.clone());
                    prop_assert_eq!(l.best(), want.first().copied());
                    // The invariants of `Ladder`.
                    prop_assert!(l.near.len() <= 8);
                    prop_assert!(l.far.is_empty() || l.near.len() >= Small::MIN);
                    prop_assert!(l.near.windows(2).all(|w| key(side, w[0].price) < key(side, w[1].price)));
                    if let (Some((&k, _)), Some(w)) = (l.far.last_key_value(), l.near.first()) {
                        prop_assert!(k < key(side, w.price));
                    }
                }
            }
        }
    }

    mod model {
        //! Property test: the book against a naive BTreeMap reference model.
        use super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        #[derive(Debug, Clone)]
        enum Op {
            Add {
                locate: u16,
                buy: bool,
                shares: u32,
                price: u32,
            },
            Execute {
                pick: usize,
                shares: u32,
            },
            Cancel {
                pick: usize,
                shares: u32,
            },
            Delete {
                pick: usize,
            },
            Replace {
                pick: usize,
                shares: u32,
                price: u32,
            },
            Unknown {
                order_ref: u64,
            },
            Run {
                locate: u16,
                buy: bool,
                from: u32,
                count: u32,
            },
            DeleteMany {
                pick: usize,
                count: u32,
                down: bool,
            },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u16..3, any::<bool>(), 1u32..500, 1u32..40).prop_map(
                    |(locate, buy, shares, price)| Op::Add { locate, buy, shares, price }),
                2 => (any::<usize>(), 1u32..600).prop_map(|(pick, shares)| Op::Execute { pick, shares }),
                2 => (any::<usize>(), 1u32..600).prop_map(|(pick, shares)| Op::Cancel { pick, shares }),
                2 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
                2 => (any::<usize>(), 1u32..500, 1u32..40).prop_map(
                    |(pick, shares, price)| Op::Replace { pick, shares, price }),
                1 => (1_000_000u64..1_000_010).prop_map(|order_ref| Op::Unknown { order_ref }),
            ]
        }

        /// Levels of one side from the reference orders, best first.
        fn levels(orders: &BTreeMap<u64, Order>, locate: u16, side: Side) -> Vec<Level> {
            let mut by_price: BTreeMap<u32, Level> = BTreeMap::new();
            for o in orders
                .values()
                .filter(|o| o.locate == locate && o.side == side)
            {
                let l = by_price.entry(o.price).or_insert(Level {
                    price: o.price,
                    ..Default::default()
                });
                l.orders += 1;
                l.shares += u64::from(o.shares);
            }
            let v: Vec<Level> = by_price.into_values().collect();
            match side {
                Side::Buy => v.into_iter().rev().collect(),
                Side::Sell => v,
            }
        }

        fn rank(orders: &BTreeMap<u64, Order>, locate: u16, side: Side, price: u32) -> usize {
            levels(orders, locate, side)
                .iter()
                .filter(|l| key(side, l.price) > key(side, price))
                .count()
        }

        /// `got` is the rank `Change::rank` may report for a level of true rank `want`.
        fn rank_ok(got: usize, want: usize) -> bool {
            if want < EXACT_RANKS {
                got == want
            } else {
                (EXACT_RANKS..=want).contains(&got)
            }
        }

        proptest! {
            #[test]
            fn book_matches_reference_model(ops in proptest::collection::vec(op(), 1..300)) {
                check(ops)?;
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(24))]
            /// Books deeper than the vector of a ladder, with runs of adds each one tick
            /// worse than the last (the descending-bids regression), so that levels
            /// spill into the map and come back.
            #[test]
            fn deep_book_matches_reference_model(ops in proptest::collection::vec(deep_op(), 1..120)) {
                check(ops)?;
            }
        }

        fn deep_op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (0u16..2, any::<bool>(), 1u32..500, 1u32..700).prop_map(
                    |(locate, buy, shares, price)| Op::Add { locate, buy, shares, price }),
                2 => (0u16..2, any::<bool>(), 300u32..700, 1u32..300).prop_map(
                    |(locate, buy, from, count)| Op::Run { locate, buy, from, count }),
                1 => (any::<usize>(), 1u32..600).prop_map(|(pick, shares)| Op::Execute { pick, shares }),
                1 => (any::<usize>(), 1u32..600).prop_map(|(pick, shares)| Op::Cancel { pick, shares }),
                2 => (any::<usize>(), 1u32..300, any::<bool>()).prop_map(
                    |(pick, count, down)| Op::DeleteMany { pick, count, down }),
                1 => (any::<usize>(), 1u32..500, 1u32..700).prop_map(
                    |(pick, shares, price)| Op::Replace { pick, shares, price }),
            ]
        }

        /// Adds `o` as `order_ref` to the book and to the model alike.
        fn add_both(
            b: &mut OrderBooks,
            model: &mut BTreeMap<u64, Order>,
            order_ref: u64,
            o: Order,
        ) -> Change {
            let c = b
                .add(o.locate, order_ref, o.side, o.shares, o.price)
                .unwrap();
            model.insert(order_ref, o);
            c
        }

        fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
            {
                let mut b = OrderBooks::with_capacity(8, 2);
                let mut model: BTreeMap<u64, Order> = BTreeMap::new();
                let mut next_ref = 1u64;
                let mut unknown = 0u64;
                for op in ops {
                    let live: Vec<u64> = model.keys().copied().collect();
                    let pick = |i: usize| live.get(i % live.len().max(1)).copied();
                    match op {
                        Op::Add {
                            locate,
                            buy,
                            shares,
                            price,
                        } => {
                            let side = if buy { Side::Buy } else { Side::Sell };
                            let order = Order {
                                locate,
                                side,
                                price,
                                shares,
                            };
                            let c = add_both(&mut b, &mut model, next_ref, order);
                            let want = rank(&model, locate, side, price);
                            prop_assert!(rank_ok(c.rank, want), "rank {} for {}", c.rank, want);
                            next_ref += 1;
                        }
                        Op::Run {
                            locate,
                            buy,
                            from,
                            count,
                        } => {
                            // Each add one tick worse than the one before.
                            let side = if buy { Side::Buy } else { Side::Sell };
                            for j in 0..count {
                                let price = if buy {
                                    from - j.min(from - 1)
                                } else {
                                    from + j
                                };
                                let order = Order {
                                    locate,
                                    side,
                                    price,
                                    shares: 100,
                                };
                                let c = add_both(&mut b, &mut model, next_ref, order);
                                if j == 0 || j + 1 == count {
                                    let want = rank(&model, locate, side, price);
                                    prop_assert!(
                                        rank_ok(c.rank, want),
                                        "rank {} for {}",
                                        c.rank,
                                        want
                                    );
                                }
                                next_ref += 1;
                            }
                        }
                        Op::DeleteMany {
                            pick: i,
                            count,
                            down,
                        } => {
                            // Consecutive references: a run's orders, best first (up)
                            // or worst first (down).
                            let Some(first) = pick(i) else { continue };
                            let refs: Vec<u64> = if down {
                                (first.saturating_sub(u64::from(count))..=first)
                                    .rev()
                                    .collect()
                            } else {
                                (first..first + u64::from(count)).collect()
                            };
                            for r in refs {
                                let Some(o) = model.remove(&r) else { break };
                                let c = b.delete(r).unwrap();
                                prop_assert_eq!(
                                    (c.locate, c.side, c.price),
                                    (o.locate, o.side, o.price)
                                );
                            }
                        }
                        Op::Execute { pick: i, shares } | Op::Cancel { pick: i, shares } => {
                            let Some(r) = pick(i) else { continue };
                            let o = model[&r];
                            let want_rank = rank(&model, o.locate, o.side, o.price);
                            let take = shares.min(o.shares);
                            let c = if matches!(op, Op::Execute { .. }) {
                                let e = b.execute(r, shares).unwrap();
                                prop_assert_eq!(e.shares, take);
                                e.change
                            } else {
                                b.cancel(r, shares).unwrap()
                            };
                            prop_assert_eq!(
                                (c.locate, c.side, c.price),
                                (o.locate, o.side, o.price)
                            );
                            prop_assert!(
                                rank_ok(c.rank, want_rank),
                                "rank {} for {}",
                                c.rank,
                                want_rank
                            );
                            if take == o.shares {
                                model.remove(&r);
                            } else if let Some(m) = model.get_mut(&r) {
                                m.shares -= take;
                            }
                        }
                        Op::Delete { pick: i } => {
                            let Some(r) = pick(i) else { continue };
                            let o = model[&r];
                            let want_rank = rank(&model, o.locate, o.side, o.price);
                            let c = b.delete(r).unwrap();
                            prop_assert!(
                                rank_ok(c.rank, want_rank),
                                "rank {} for {}",
                                c.rank,
                                want_rank
                            );
                            model.remove(&r);
                        }
                        Op::Replace {
                            pick: i,
                            shares,
                            price,
                        } => {
                            let Some(r) = pick(i) else { continue };
                            let o = model.remove(&r).unwrap();
                            let mut old_rank_model = model.clone();
                            old_rank_model.insert(r, o);
                            let old_rank = rank(&old_rank_model, o.locate, o.side, o.price);
                            model.insert(next_ref, Order { shares, price, ..o });
                            let new_rank = rank(&model, o.locate, o.side, price);
                            let c = b.replace(r, next_ref, shares, price).unwrap();
                            prop_assert_eq!((c.locate, c.side, c.price), (o.locate, o.side, price));
                            let want = old_rank.min(new_rank);
                            prop_assert!(rank_ok(c.rank, want), "rank {} for {}", c.rank, want);
                            next_ref += 1;
                        }
                        Op::Unknown { order_ref } => {
                            prop_assert!(b.delete(order_ref).is_none());
                            unknown += 1;
                        }
                    }
                    for locate in 0..3u16 {
                        for side in [Side::Buy, Side::Sell] {
                            let got: Vec<Level> = b
                                .book(locate)
                                .map(|bk| bk.levels(side).collect())
                                .unwrap_or_default();
                            prop_assert_eq!(got, levels(&model, locate, side));
                        }
                    }
                }
                prop_assert_eq!(b.order_count(), model.len());
                prop_assert_eq!(b.unknown_refs, unknown);
                for (r, o) in &model {
                    prop_assert_eq!(b.order(*r), Some(o));
                }
            }
            Ok(())
        }
    }
}
