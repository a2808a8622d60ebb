//! A naive reference model of the feed handler, written from docs/market-data.md and
//! the ITCH 5.0 specification only (it shares no code with `tickwire_md::feed`,
//! `book` or `update`): ITCH messages applied in sequence order to a `BTreeMap` book
//! per symbol, and the trade and quote updates the feed handler must publish for them.
//! Payloads are read back by the documented offsets (little-endian), field by field.
//!
//! Used by `crates/md/tests/feed_model.rs` (property test against the core) and by
//! `crates/tickwire/tests/md.rs` (the real binaries, against the ITCH session file).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

use tickwire_itch::{AddOrder, AddOrderMpid, Message, Side};

/// One update, as docs/market-data.md defines it (the receive time is not modelled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    Trade {
        topic: String,
        locate: u16,
        symbol: [u8; 8],
        seq: u64,
        exchange_ns: u64,
        price: u32,
        shares: u32,
        side: u8,
        source: u8,
        flags: u8,
        match_number: u64,
    },
    Quote {
        topic: String,
        locate: u16,
        symbol: [u8; 8],
        seq: u64,
        exchange_ns: u64,
        top: Top,
    },
}

/// Best bid and offer: (price, orders, shares) per side, all 0 for an empty side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Top {
    pub bid: (u32, u32, u64),
    pub ask: (u32, u32, u64),
}

struct Order {
    locate: u16,
    side: Side,
    price: u32,
    shares: u32,
}

/// Aggregated levels: price → (shares, orders).
#[derive(Default)]
struct Book {
    bids: BTreeMap<u32, (u64, u32)>,
    asks: BTreeMap<u32, (u64, u32)>,
}

impl Book {
    fn side(&mut self, side: Side) -> &mut BTreeMap<u32, (u64, u32)> {
        match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        }
    }

    fn top(&self) -> Top {
        let level =
            |l: Option<(&u32, &(u64, u32))>| l.map_or((0, 0, 0), |(p, (s, o))| (*p, *o, *s));
        Top {
            bid: level(self.bids.iter().next_back()),
            ask: level(self.asks.iter().next()),
        }
    }
}

/// The model: feed it every message of the session in sequence order.
pub struct Model {
    venue: String,
    orders: HashMap<u64, Order>,
    books: BTreeMap<u16, Book>,
    symbols: HashMap<u16, [u8; 8]>,
    /// Everything the feed handler must publish, in order.
    pub out: Vec<Update>,
}

impl Model {
    pub fn new(venue: &str) -> Model {
        Model {
            venue: venue.to_string(),
            orders: HashMap::new(),
            books: BTreeMap::new(),
            symbols: HashMap::new(),
            out: Vec::new(),
        }
    }

    fn topic(&self, locate: u16, kind: &str) -> Option<String> {
        let s = self.symbols.get(&locate)?;
        let name = std::str::from_utf8(s).ok()?.trim_end();
        Some(format!("md/{}/{}/{}", self.venue, name, kind))
    }

    fn top(&self, locate: u16) -> Top {
        self.books.get(&locate).map(Book::top).unwrap_or_default()
    }

    fn add(&mut self, locate: u16, order_ref: u64, side: Side, shares: u32, price: u32) {
        let l = self
            .books
            .entry(locate)
            .or_default()
            .side(side)
            .entry(price)
            .or_default();
        l.0 += u64::from(shares);
        l.1 += 1;
        self.orders.insert(
            order_ref,
            Order {
                locate,
                side,
                price,
                shares,
            },
        );
    }

    /// Removes up to `shares` of an order; returns (locate, side, price, removed).
    fn reduce(&mut self, order_ref: u64, shares: u32) -> Option<(u16, Side, u32, u32)> {
        let o = self.orders.get_mut(&order_ref)?;
        let removed = shares.min(o.shares);
        o.shares -= removed;
        let (locate, side, price, left) = (o.locate, o.side, o.price, o.shares);
        if left == 0 {
            self.orders.remove(&order_ref);
        }
        let levels = self.books.get_mut(&locate)?.side(side);
        let l = levels.get_mut(&price)?;
        l.0 -= u64::from(removed);
        if left == 0 {
            l.1 -= 1;
        }
        if l.1 == 0 {
            levels.remove(&price);
        }
        Some((locate, side, price, removed))
    }

    fn trade(&mut self, locate: u16, seq: u64, ts: u64, t: (u32, u32, Side, u8, u8, u64)) {
        let (Some(topic), Some(symbol)) = (self.topic(locate, "trade"), self.symbols.get(&locate))
        else {
            return;
        };
        let (price, shares, side, source, flags, match_number) = t;
        self.out.push(Update::Trade {
            topic,
            locate,
            symbol: *symbol,
            seq,
            exchange_ns: ts,
            price,
            shares,
            side: side_byte(side),
            source,
            flags,
            match_number,
        });
    }

    /// Applies message `seq` of the session.
    pub fn apply(&mut self, seq: u64, msg: &Message) {
        let ts = msg.header().timestamp;
        let mut touched = None;
        let before = |m: &Model, l: u16| (l, m.top(l));
        match msg {
            Message::StockDirectory(d) => {
                self.symbols.insert(d.header.stock_locate, d.stock.0);
            }
            // The MPID changes nothing in the book: one rule for both adds.
            Message::AddOrder(AddOrder {
                header,
                order_ref,
                side,
                shares,
                price,
                ..
            })
            | Message::AddOrderMpid(AddOrderMpid {
                header,
                order_ref,
                side,
                shares,
                price,
                ..
            }) => {
                touched = Some(before(self, header.stock_locate));
                self.add(header.stock_locate, *order_ref, *side, *shares, price.0);
            }
            Message::OrderExecuted(e) => {
                if let Some(o) = self.orders.get(&e.order_ref) {
                    touched = Some(before(self, o.locate));
                }
                if let Some((locate, side, price, n)) = self.reduce(e.order_ref, e.executed_shares)
                {
                    self.trade(locate, seq, ts, (price, n, side, b'E', 0, e.match_number));
                }
            }
            Message::OrderExecutedWithPrice(c) => {
                if let Some(o) = self.orders.get(&c.order_ref) {
                    touched = Some(before(self, o.locate));
                }
                if let Some((locate, side, _, n)) = self.reduce(c.order_ref, c.executed_shares) {
                    let flags = if c.printable == b'N' { 0x01 } else { 0 };
                    let t = (c.execution_price.0, n, side, b'C', flags, c.match_number);
                    self.trade(locate, seq, ts, t);
                }
            }
            Message::OrderCancel(x) => {
                if let Some(o) = self.orders.get(&x.order_ref) {
                    touched = Some(before(self, o.locate));
                }
                self.reduce(x.order_ref, x.cancelled_shares);
            }
            Message::OrderDelete(d) => {
                if let Some(o) = self.orders.get(&d.order_ref) {
                    touched = Some(before(self, o.locate));
                }
                self.reduce(d.order_ref, u32::MAX);
            }
            Message::OrderReplace(u) => {
                if let Some(o) = self.orders.get(&u.original_order_ref) {
                    let (locate, side) = (o.locate, o.side);
                    touched = Some(before(self, locate));
                    self.reduce(u.original_order_ref, u32::MAX);
                    self.add(locate, u.new_order_ref, side, u.shares, u.price.0);
                }
            }
            Message::Trade(p) => {
                let t = (p.price.0, p.shares, p.side, b'P', 0x02, p.match_number);
                self.trade(p.header.stock_locate, seq, ts, t);
            }
            _ => {}
        }
        // A quote when the top of book changed (docs/market-data.md §1).
        if let Some((locate, old)) = touched {
            let top = self.top(locate);
            if top != old {
                if let (Some(topic), Some(symbol)) =
                    (self.topic(locate, "quote"), self.symbols.get(&locate))
                {
                    self.out.push(Update::Quote {
                        topic,
                        locate,
                        symbol: *symbol,
                        seq,
                        exchange_ns: ts,
                        top,
                    });
                }
            }
        }
    }
}

fn side_byte(s: Side) -> u8 {
    match s {
        Side::Buy => b'B',
        Side::Sell => b'S',
    }
}

fn u16_at(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().unwrap())
}

/// Reads a published trade or quote by the offsets of docs/market-data.md §3–5
/// (`None` for depth updates). Panics on a payload that breaks the documented layout.
pub fn parse(topic: &str, p: &[u8]) -> Option<Update> {
    assert!(
        p.len() >= 40,
        "{topic}: {} bytes, shorter than the header",
        p.len()
    );
    assert_eq!(p[1], 1, "{topic}: version");
    assert_eq!(&p[4..8], &[0; 4], "{topic}: reserved header bytes");
    let (locate, seq, exchange_ns) = (u16_at(p, 2), u64_at(p, 16), u64_at(p, 24));
    let symbol: [u8; 8] = p[8..16].try_into().unwrap();
    let topic = topic.to_string();
    match p[0] {
        1 => {
            assert_eq!(p.len(), 64, "{topic}: trade length");
            assert_eq!(&p[51..56], &[0; 5], "{topic}: reserved trade bytes");
            Some(Update::Trade {
                topic,
                locate,
                symbol,
                seq,
                exchange_ns,
                price: u32_at(p, 40),
                shares: u32_at(p, 44),
                side: p[48],
                source: p[49],
                flags: p[50],
                match_number: u64_at(p, 56),
            })
        }
        2 => {
            assert_eq!(p.len(), 72, "{topic}: quote length");
            Some(Update::Quote {
                topic,
                locate,
                symbol,
                seq,
                exchange_ns,
                top: Top {
                    bid: (u32_at(p, 40), u32_at(p, 44), u64_at(p, 48)),
                    ask: (u32_at(p, 56), u32_at(p, 60), u64_at(p, 64)),
                },
            })
        }
        3 => None,
        k => panic!("{topic}: unknown kind {k}"),
    }
}

/// Asserts that `got` (topic, payload) is exactly the model's stream, reporting the
/// first difference field by field.
/// `input(seq)` describes ITCH message `seq` for the failure message.
pub fn assert_stream_eq(
    model: &[Update],
    got: &[(String, Vec<u8>)],
    input: &dyn Fn(u64) -> String,
) {
    let got: Vec<Update> = got.iter().filter_map(|(t, p)| parse(t, p)).collect();
    for (i, (m, g)) in model.iter().zip(&got).enumerate() {
        let seq = |u: &Update| match u {
            Update::Trade { seq, .. } | Update::Quote { seq, .. } => *seq,
        };
        assert_eq!(
            g,
            m,
            "update {i}: published (left) differs from the ITCH input's (right); \
             message {} was {}, message {} was {}",
            seq(g),
            input(seq(g)),
            seq(m),
            input(seq(m))
        );
    }
    assert_eq!(got.len(), model.len(), "number of trade and quote updates");
}
