//! Tests of the synthetic ITCH exchange (`tickwire_md::generator`).
//!
//! Every generated stream is replayed through `Checker`, an independent reference model
//! written here (a map of live orders and per-symbol price levels), which fails on the
//! first message that breaks an exchange invariant.

// A test reports what it generated (visible with --nocapture): tests may print.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;
use tickwire_itch::{Message, Side};
use tickwire_md::generator::{
    append_frame, write_session, write_session_to, Error, FileReader, Generator, GeneratorConfig,
};

/// A live order in the reference model.
#[derive(Debug, Clone, Copy)]
struct Live {
    locate: u16,
    side: Side,
    price: u32,
    shares: u32,
}

/// Price levels of one symbol: price -> live order count.
#[derive(Debug, Default)]
struct Levels {
    bids: BTreeMap<u32, u32>,
    asks: BTreeMap<u32, u32>,
}

impl Levels {
    fn side(&mut self, side: Side) -> &mut BTreeMap<u32, u32> {
        match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        }
    }
    fn add(&mut self, side: Side, price: u32) {
        *self.side(side).entry(price).or_insert(0) += 1;
    }
    fn remove(&mut self, side: Side, price: u32) {
        let levels = self.side(side);
        let n = levels
            .get_mut(&price)
            .expect("level of a live order exists");
        *n -= 1;
        if *n == 0 {
            levels.remove(&price);
        }
    }
    fn best_bid(&self) -> Option<u32> {
        self.bids.keys().next_back().copied()
    }
    fn best_ask(&self) -> Option<u32> {
        self.asks.keys().next().copied()
    }
}

/// How orders left the book.
#[derive(Debug, Default)]
struct Ends {
    deleted: u64,
    replaced: u64,
    executed: u64,
}

/// Independent reference model of an ITCH session; `check` returns the first violation.
#[derive(Default)]
struct Checker {
    directory: HashMap<u16, [u8; 8]>,
    live: HashMap<u64, Live>,
    used_refs: HashSet<u64>,
    books: HashMap<u16, Levels>,
    last_ts: u64,
    system: Vec<u8>,
    messages: u64,
    counts: BTreeMap<u8, u64>,
    per_locate: HashMap<u16, u64>,
    ends: Ends,
    /// Ticks between an add's price and its side's best price before it (0 = at or
    /// better than the touch), for adds that had a touch.
    add_distances: Vec<u32>,
    first_flow_ts: Option<u64>,
    last_flow_ts: u64,
    per_second: BTreeMap<u64, u64>,
}

impl Checker {
    fn check(&mut self, m: &Message) -> Result<(), String> {
        self.messages += 1;
        *self.counts.entry(m.msg_type()).or_insert(0) += 1;
        let ts = m.timestamp();
        if ts < self.last_ts {
            return Err(format!("timestamp went back from {} to {ts}", self.last_ts));
        }
        self.last_ts = ts;
        let locate = m.stock_locate();
        let in_market = self.system.last() == Some(&b'Q');
        if let Message::SystemEvent(e) = m {
            if locate != 0 {
                return Err("system event with a stock locate".into());
            }
            self.system.push(e.event_code);
            let expected: &[u8] = b"OSQMEC";
            if !expected.starts_with(&self.system) {
                return Err(format!(
                    "system events out of order: {:?}",
                    String::from_utf8_lossy(&self.system)
                ));
            }
            return Ok(());
        }
        if let Message::StockDirectory(d) = m {
            if self.system.as_slice() != b"O" {
                return Err("directory outside the start of messages".into());
            }
            if self.directory.values().any(|s| *s == d.stock.0) {
                return Err(format!("duplicate ticker {}", d.stock));
            }
            if self.directory.insert(locate, d.stock.0).is_some() {
                return Err(format!("duplicate locate {locate}"));
            }
            return Ok(());
        }
        let Some(ticker) = self.directory.get(&locate).copied() else {
            return Err(format!("locate {locate} not in the directory"));
        };
        *self.per_locate.entry(locate).or_insert(0) += 1;
        let stock_ok = |s: &tickwire_itch::Symbol| {
            if s.0 == ticker {
                Ok(())
            } else {
                Err(format!("stock {s} does not match locate {locate}"))
            }
        };
        if let Message::StockTradingAction(h) = m {
            stock_ok(&h.stock)?;
            return if h.trading_state == b'T' {
                Ok(())
            } else {
                Err("not trading".into())
            };
        }
        if !in_market {
            return Err(format!(
                "order message '{}' outside market hours",
                char::from(m.msg_type())
            ));
        }
        self.first_flow_ts.get_or_insert(ts);
        self.last_flow_ts = ts;
        *self.per_second.entry(ts / 1_000_000_000).or_insert(0) += 1;
        match m {
            Message::AddOrder(a) => {
                stock_ok(&a.stock)?;
                self.add(locate, a.order_ref, a.side, a.price.0, a.shares)?;
            }
            Message::AddOrderMpid(a) => {
                stock_ok(&a.stock)?;
                self.add(locate, a.order_ref, a.side, a.price.0, a.shares)?;
            }
            Message::OrderExecuted(e) => {
                self.reduce(locate, e.order_ref, e.executed_shares, true)?
            }
            Message::OrderExecutedWithPrice(e) => {
                let o = self.order(locate, e.order_ref)?;
                if e.execution_price.0 != o.price {
                    return Err("execution price differs from the resting price".into());
                }
                self.reduce(locate, e.order_ref, e.executed_shares, true)?;
            }
            Message::OrderCancel(x) => {
                self.reduce(locate, x.order_ref, x.cancelled_shares, false)?
            }
            Message::OrderDelete(d) => {
                self.remove(locate, d.order_ref)?;
                self.ends.deleted += 1;
            }
            Message::OrderReplace(u) => {
                let old = self.remove(locate, u.original_order_ref)?;
                self.ends.replaced += 1;
                self.add(locate, u.new_order_ref, old.side, u.price.0, u.shares)?;
            }
            Message::Trade(p) => {
                stock_ok(&p.stock)?;
                if p.order_ref != 0 || p.shares == 0 {
                    return Err("non-displayed trade with a reference or no shares".into());
                }
                let book = self.books.entry(locate).or_default();
                if let (Some(b), Some(a)) = (book.best_bid(), book.best_ask()) {
                    if p.price.0 < b || p.price.0 > a {
                        return Err("trade outside the spread".into());
                    }
                }
            }
            other => return Err(format!("unexpected message {other:?}")),
        }
        Ok(())
    }

    fn order(&self, locate: u16, order_ref: u64) -> Result<Live, String> {
        let o = *self
            .live
            .get(&order_ref)
            .ok_or_else(|| format!("dead or unknown order {order_ref}"))?;
        if o.locate != locate {
            return Err(format!(
                "order {order_ref} of locate {} used with locate {locate}",
                o.locate
            ));
        }
        Ok(o)
    }

    fn add(
        &mut self,
        locate: u16,
        order_ref: u64,
        side: Side,
        price: u32,
        shares: u32,
    ) -> Result<(), String> {
        if order_ref == 0 || !self.used_refs.insert(order_ref) {
            return Err(format!("order reference {order_ref} reused"));
        }
        if shares == 0 || price == 0 || price % 100 != 0 {
            return Err(format!("order {order_ref}: {shares} shares at {price}"));
        }
        let book = self.books.entry(locate).or_default();
        let touch = match side {
            Side::Buy => book.best_bid().map(|b| b.saturating_sub(price) / 100),
            Side::Sell => book.best_ask().map(|a| price.saturating_sub(a) / 100),
        };
        if let Some(d) = touch {
            self.add_distances.push(d);
        }
        book.add(side, price);
        if let (Some(b), Some(a)) = (book.best_bid(), book.best_ask()) {
            if b >= a {
                return Err(format!(
                    "order {order_ref} crossed the book of {locate}: bid {b} >= ask {a}"
                ));
            }
        }
        self.live.insert(
            order_ref,
            Live {
                locate,
                side,
                price,
                shares,
            },
        );
        Ok(())
    }

    fn remove(&mut self, locate: u16, order_ref: u64) -> Result<Live, String> {
        let o = self.order(locate, order_ref)?;
        self.live.remove(&order_ref);
        self.books
            .entry(locate)
            .or_default()
            .remove(o.side, o.price);
        Ok(o)
    }

    fn reduce(
        &mut self,
        locate: u16,
        order_ref: u64,
        shares: u32,
        execution: bool,
    ) -> Result<(), String> {
        let o = self.order(locate, order_ref)?;
        if shares == 0 || shares > o.shares {
            return Err(format!(
                "order {order_ref}: {shares} shares taken from {}",
                o.shares
            ));
        }
        if execution {
            let book = self.books.entry(locate).or_default();
            let best = match o.side {
                Side::Buy => book.best_bid(),
                Side::Sell => book.best_ask(),
            };
            if best != Some(o.price) {
                return Err(format!("order {order_ref} executed away from the touch"));
            }
        }
        if shares == o.shares {
            self.remove(locate, order_ref)?;
            if execution {
                self.ends.executed += 1;
            } else {
                self.ends.deleted += 1;
            }
        } else if let Some(l) = self.live.get_mut(&order_ref) {
            l.shares -= shares;
        }
        Ok(())
    }

    fn finish(&self, config: &GeneratorConfig) -> Result<(), String> {
        if self.system.as_slice() != b"OSQMEC" {
            return Err(format!(
                "system events {:?}",
                String::from_utf8_lossy(&self.system)
            ));
        }
        if self.messages != config.messages {
            return Err(format!(
                "{} messages, asked for {}",
                self.messages, config.messages
            ));
        }
        if self.directory.len() != usize::from(config.symbols) {
            return Err(format!(
                "{} directory entries for {} symbols",
                self.directory.len(),
                config.symbols
            ));
        }
        Ok(())
    }

    fn count(&self, t: u8) -> u64 {
        self.counts.get(&t).copied().unwrap_or(0)
    }
}

fn check_session(config: &GeneratorConfig) -> Checker {
    let mut checker = Checker::default();
    for (i, m) in Generator::new(config.clone())
        .expect("valid config")
        .enumerate()
    {
        if let Err(e) = checker.check(&m) {
            panic!("message {i} ({m:?}) of {config:?}: {e}");
        }
    }
    checker.finish(config).unwrap();
    checker
}

/// The default configuration with `symbols`, `messages` and `seed`.
fn session_config(symbols: u16, messages: u64, seed: u64) -> GeneratorConfig {
    GeneratorConfig {
        symbols,
        messages,
        seed,
        ..Default::default()
    }
}

fn session_bytes(config: &GeneratorConfig) -> Vec<u8> {
    let mut out = Vec::new();
    write_session_to(Generator::new(config.clone()).unwrap(), &mut out).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn generated_sessions_satisfy_every_invariant(seed in any::<u64>(), symbols in 1u16..12, flow in 0u64..2_500) {
        let config = session_config(symbols, 6 + 2 * u64::from(symbols) + flow, seed);
        let checker = check_session(&config);
        prop_assert_eq!(checker.messages, config.messages);
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_another_seed_others(seed in any::<u64>(), symbols in 1u16..8) {
        let config = session_config(symbols, 600, seed);
        let a = session_bytes(&config);
        prop_assert_eq!(&a, &session_bytes(&config));
        let other = GeneratorConfig { seed: seed.wrapping_add(1), ..config };
        prop_assert_ne!(a, session_bytes(&other));
    }
}

#[test]
fn a_200k_session_has_realistic_statistics() {
    let config = session_config(50, 200_000, 42);
    let c = check_session(&config);

    // Cancels and deletes dominate executions by a wide margin.
    let removals = c.count(b'X') + c.count(b'D');
    let executions = c.count(b'E') + c.count(b'C');
    assert!(executions > 1_000, "some executions: {executions}");
    assert!(
        removals > 5 * executions,
        "cancels+deletes {removals} vs executions {executions}"
    );
    // About 90% or more of the orders that ended were deleted, cancelled or replaced.
    let ended = c.ends.deleted + c.ends.replaced + c.ends.executed;
    let pulled = (c.ends.deleted + c.ends.replaced) as f64 / ended as f64;
    assert!(
        pulled > 0.88,
        "share of orders pulled rather than executed: {pulled:.3} ({:?})",
        c.ends
    );
    // Every message type of the flow appears, attributed adds and trades included.
    for t in *b"AFECXDUP" {
        assert!(c.count(t) > 0, "no '{}' message", char::from(t));
    }
    assert!(c.count(b'A') > 10 * c.count(b'F'));

    // Most adds are near the touch.
    let near =
        c.add_distances.iter().filter(|d| **d <= 3).count() as f64 / c.add_distances.len() as f64;
    assert!(near > 0.8, "adds within 3 ticks of the touch: {near:.3}");

    // Symbol activity is skewed: the busiest symbol is many times the median one.
    let mut per: Vec<u64> = c.per_locate.values().copied().collect();
    per.sort_unstable();
    let (median, busiest) = (per[per.len() / 2], per[per.len() - 1]);
    assert!(busiest > 8 * median, "busiest {busiest}, median {median}");
    assert_eq!(
        c.per_locate
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(l, _)| *l),
        Some(1),
        "AAPL (locate 1) is the busiest"
    );

    // The mean rate is about the configured one and one-second windows swing well above it.
    let flow = (config.messages - 6 - 100) as f64;
    let seconds = (c.last_flow_ts - c.first_flow_ts.unwrap()) as f64 / 1e9;
    let rate = flow / seconds;
    assert!(
        rate > 0.5 * config.mean_rate && rate < 2.0 * config.mean_rate,
        "mean rate {rate:.0}/s"
    );
    let peak = *c.per_second.values().max().unwrap() as f64;
    assert!(peak > 1.5 * rate, "peak second {peak} vs mean {rate:.0}");
}

#[test]
fn many_symbols_get_unique_tickers_and_a_u_shaped_day() {
    let config = GeneratorConfig {
        symbols: 2_000,
        messages: 60_000,
        seed: 3,
        mean_rate: 1_000.0,
        ..Default::default()
    };
    let c = check_session(&config);
    // Deciles of the flow's duration: the first and last are busier than the middle.
    let (start, end) = (c.first_flow_ts.unwrap(), c.last_flow_ts);
    let mut deciles = [0u64; 10];
    for (sec, n) in &c.per_second {
        let t = sec * 1_000_000_000;
        let i = ((t.saturating_sub(start)) * 10 / (end - start + 1)).min(9) as usize;
        deciles[i] += n;
    }
    let middle = deciles[3..7].iter().sum::<u64>() / 4;
    assert!(
        deciles[0] > middle && deciles[9] > middle,
        "deciles {deciles:?}"
    );
}

#[test]
fn a_session_file_round_trips_through_the_reader() {
    let config = session_config(5, 3_000, 9);
    let dir = tempfile::Builder::new()
        .prefix("tickwire-mdgen-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("session.itch");
    let summary = write_session(config.clone(), &path).unwrap();
    let data = std::fs::read(&path).unwrap();
    assert_eq!(summary.messages, 3_000);
    assert_eq!(summary.bytes, data.len() as u64);
    let read: Vec<Message> = FileReader::new(&data)
        .messages()
        .collect::<Result<_, _>>()
        .unwrap();
    let generated: Vec<Message> = Generator::new(config).unwrap().collect();
    assert_eq!(read, generated);
    assert_eq!(summary.first_timestamp, read[0].timestamp());
    assert_eq!(summary.last_timestamp, read[read.len() - 1].timestamp());
    // The frame is a big-endian length then the message.
    let mut frame = Vec::new();
    assert_eq!(append_frame(&generated[0], &mut frame).unwrap(), 14);
    assert_eq!(&frame[..3], &[0, 12, b'S']);
    assert_eq!(&data[..14], &frame[..]);
}

#[test]
fn the_reader_reports_truncation_empty_frames_and_bad_messages() {
    let data = session_bytes(&GeneratorConfig {
        symbols: 1,
        messages: 20,
        ..Default::default()
    });
    // Cut inside the second frame's body: one good message, then Truncated, then the end.
    let mut r = FileReader::new(&data[..14 + 10]);
    assert_eq!(r.next().unwrap().unwrap().len(), 12);
    match r.next() {
        Some(Err(Error::Truncated {
            offset: 14,
            needed: 41,
            available: 10,
        })) => {}
        other => panic!("expected truncation, got {other:?}"),
    }
    assert!(r.next().is_none());
    // Cut inside a length prefix.
    let mut r = FileReader::new(&data[..15]);
    r.next().unwrap().unwrap();
    assert!(matches!(
        r.next(),
        Some(Err(Error::Truncated {
            offset: 14,
            needed: 2,
            available: 1
        }))
    ));
    // A zero-length frame.
    assert!(matches!(
        FileReader::new(&[0, 0, 1]).next(),
        Some(Err(Error::EmptyMessage { offset: 0 }))
    ));
    // A frame holding an unknown message type decodes to an error.
    let mut it = FileReader::new(&[0, 1, b'z']).messages();
    assert!(matches!(
        it.next(),
        Some(Err(Error::Decode { offset: 0, .. }))
    ));
    assert!(it.next().is_none());
    // An empty file holds no messages.
    assert!(FileReader::new(&[]).next().is_none());
}

#[test]
fn configurations_are_validated() {
    let ok = GeneratorConfig::default();
    assert!(ok.validate().is_ok());
    let bad = [
        GeneratorConfig {
            symbols: 0,
            ..ok.clone()
        },
        GeneratorConfig {
            symbols: 10,
            messages: 25,
            ..ok.clone()
        },
        GeneratorConfig {
            mean_rate: 0.0,
            ..ok.clone()
        },
        GeneratorConfig {
            mean_rate: f64::NAN,
            ..ok.clone()
        },
        GeneratorConfig {
            zipf_exponent: -1.0,
            ..ok.clone()
        },
        GeneratorConfig {
            target_depth: 0,
            ..ok.clone()
        },
        GeneratorConfig {
            messages: 10_000_000,
            mean_rate: 10.0,
            ..ok.clone()
        },
    ];
    for config in bad {
        assert!(
            Generator::new(config.clone()).is_err(),
            "{config:?} accepted"
        );
    }
    // The minimum is exactly the fixed messages: a session with no order flow.
    let min = GeneratorConfig {
        symbols: 10,
        messages: 26,
        ..ok
    };
    let c = check_session(&min);
    assert_eq!(c.count(b'A'), 0);
}

#[test]
fn size_hint_counts_down_exactly() {
    let mut g = Generator::new(GeneratorConfig {
        symbols: 3,
        messages: 500,
        ..Default::default()
    })
    .unwrap();
    let mut left = 500;
    assert_eq!(g.size_hint(), (500, Some(500)));
    while g.next().is_some() {
        left -= 1;
        assert_eq!(g.size_hint(), (left, Some(left)));
    }
    assert_eq!(left, 0);
    assert_eq!(g.ticker(1), Some(*b"AAPL    "));
    assert_eq!(g.ticker(4), None);
}

/// Speed check, run by hand: `cargo test --release -p tickwire-md --test generator --
/// --ignored --nocapture` (tests never assert durations; this prints the rate).
#[test]
#[ignore = "speed check: run by hand in release"]
fn one_million_messages() {
    let config = GeneratorConfig {
        symbols: 500,
        messages: 1_000_000,
        ..Default::default()
    };
    let start = std::time::Instant::now();
    let mut out = Vec::with_capacity(40 << 20);
    let summary = write_session_to(Generator::new(config).unwrap(), &mut out).unwrap();
    let elapsed = start.elapsed();
    eprintln!(
        "{} messages, {} bytes in {elapsed:?}",
        summary.messages, summary.bytes
    );
    assert_eq!(summary.messages, 1_000_000);
    assert_eq!(summary.bytes, out.len() as u64);
}
