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
//!   megabytes (see [`crate::order_map`] for the layout and its limits).
//! - Before applying a packet, the feed handler looks up all its references once
//!   ([`OrderBooks::warm`]) so that their cache misses overlap.
//! - Each side of a book is one `Vec<Level>` sorted so that the **best level is last**
//!   (bids by ascending price, asks by descending price). Order flow is concentrated
//!   near the touch, so inserting or removing a level moves only the few levels between
//!   it and the end, and the top of book is `last()`. Finding a level is a short scan
//!   from the end, falling back to a binary search for levels deep in the book. Once
//!   the vectors have grown to the book's depth they never allocate again.
//! - Every mutation returns a [`Change`] saying which book and side it touched and the
//!   **rank** of the touched level (0 = best). The feed handler derives from it, without
//!   comparing snapshots, whether the top of book (rank 0) or the top N levels
//!   (rank < N) changed.
//!
//! References that are unknown (never added, already gone, or lost in an unrecoverable
//! gap) are counted in [`OrderBooks::unknown_refs`], never a panic; an add reusing a
//! live reference is counted in [`OrderBooks::duplicate_refs`] and ignored.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

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
    /// levels as they were when that level was touched. The top of book changed iff
    /// this is 0; the best N levels changed iff this is below N.
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

/// Levels of one side, best last (see the module docs).
#[derive(Debug, Clone, Default)]
struct Ladder {
    levels: Vec<Level>,
}

/// Sort key: ascending for both sides, best = largest.
#[inline]
fn key(side: Side, price: u32) -> u32 {
    match side {
        Side::Buy => price,
        Side::Sell => !price,
    }
}

impl Ladder {
    /// Index of the level with `price`, or `Err(insertion index)`.
    #[inline]
    fn find(&self, side: Side, price: u32) -> Result<usize, usize> {
        let k = key(side, price);
        let lv = &self.levels;
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

    /// Adds `shares` of one new order at `price`; returns the level's rank.
    #[inline]
    fn add(&mut self, side: Side, price: u32, shares: u32) -> usize {
        match self.find(side, price) {
            Ok(i) => {
                let l = &mut self.levels[i];
                l.orders += 1;
                l.shares += u64::from(shares);
                self.levels.len() - 1 - i
            }
            Err(i) => {
                self.levels.insert(
                    i,
                    Level {
                        price,
                        orders: 1,
                        shares: u64::from(shares),
                    },
                );
                self.levels.len() - 1 - i
            }
        }
    }

    /// Removes `shares` (and the order itself when `gone`) from the level at `price`;
    /// returns the level's rank before any removal. The level must exist.
    #[inline]
    fn remove(&mut self, side: Side, price: u32, shares: u32, gone: bool) -> usize {
        let Ok(i) = self.find(side, price) else {
            // Unreachable while the order map and the ladders agree (every live order's
            // shares are on its level); report the touch anyway rather than panic.
            return 0;
        };
        let rank = self.levels.len() - 1 - i;
        let l = &mut self.levels[i];
        l.shares = l.shares.saturating_sub(u64::from(shares));
        if gone {
            l.orders = l.orders.saturating_sub(1);
            if l.orders == 0 {
                self.levels.remove(i);
            }
        }
        rank
    }
}

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
            bids: Ladder {
                levels: Vec::with_capacity(levels),
            },
            asks: Ladder {
                levels: Vec::with_capacity(levels),
            },
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
        self.ladder(side).levels.last().copied()
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
        self.ladder(side).levels.iter().rev().copied()
    }

    /// The best `n` levels of `side` (fewer if the side is shallower), best first.
    pub fn depth(&self, side: Side, n: usize) -> impl ExactSizeIterator<Item = Level> + '_ {
        self.levels(side).take(n)
    }

    /// Number of price levels on `side`.
    pub fn level_count(&self, side: Side) -> usize {
        self.ladder(side).levels.len()
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
        }
    }

    /// Makes sure a book exists for `locate` (called at Stock Directory time so that the
    /// first order of a symbol does not allocate).
    pub fn ensure(&mut self, locate: u16) -> &mut Book {
        let i = usize::from(locate);
        if self.books.len() <= i {
            self.books.resize_with(i + 1, Book::default);
        }
        let b = &mut self.books[i];
        if b.bids.levels.capacity() == 0 {
            *b = Book::with_capacity(self.levels_per_side);
        }
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

    /// Adds a new order (`A`, `F`). `None` (and counted) if the reference is live.
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

        proptest! {
            #[test]
            fn book_matches_reference_model(ops in proptest::collection::vec(op(), 1..300)) {
                let mut b = OrderBooks::with_capacity(8, 2);
                let mut model: BTreeMap<u64, Order> = BTreeMap::new();
                let mut next_ref = 1u64;
                let mut unknown = 0u64;
                for op in ops {
                    let live: Vec<u64> = model.keys().copied().collect();
                    let pick = |i: usize| live.get(i % live.len().max(1)).copied();
                    match op {
                        Op::Add { locate, buy, shares, price } => {
                            let side = if buy { Side::Buy } else { Side::Sell };
                            let c = b.add(locate, next_ref, side, shares, price).unwrap();
                            model.insert(next_ref, Order { locate, side, price, shares });
                            prop_assert_eq!(c.rank, rank(&model, locate, side, price));
                            next_ref += 1;
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
                            prop_assert_eq!((c.locate, c.side, c.price, c.rank),
                                            (o.locate, o.side, o.price, want_rank));
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
                            prop_assert_eq!(c.rank, want_rank);
                            model.remove(&r);
                        }
                        Op::Replace { pick: i, shares, price } => {
                            let Some(r) = pick(i) else { continue };
                            let o = model.remove(&r).unwrap();
                            let mut old_rank_model = model.clone();
                            old_rank_model.insert(r, o);
                            let old_rank = rank(&old_rank_model, o.locate, o.side, o.price);
                            model.insert(next_ref, Order { shares, price, ..o });
                            let new_rank = rank(&model, o.locate, o.side, price);
                            let c = b.replace(r, next_ref, shares, price).unwrap();
                            prop_assert_eq!((c.locate, c.side, c.price), (o.locate, o.side, price));
                            prop_assert_eq!(c.rank, old_rank.min(new_rank));
                            next_ref += 1;
                        }
                        Op::Unknown { order_ref } => {
                            prop_assert!(b.delete(order_ref).is_none());
                            unknown += 1;
                        }
                    }
                    for locate in 0..3u16 {
                        for side in [Side::Buy, Side::Sell] {
                            let got: Vec<Level> = b.book(locate).map(|bk| bk.levels(side).collect()).unwrap_or_default();
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
        }
    }
}
