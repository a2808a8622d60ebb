//! The synthetic exchange: a seeded, reproducible NASDAQ TotalView-ITCH 5.0 session.
//!
//! No real exchange feed can be downloaded here, so tickwire makes one. [`Generator`]
//! is a pure iterator (no IO, no clock: time is simulated) that yields one whole trading
//! session of ITCH messages; [`write_session`] frames them into a file and
//! [`FileReader`] reads such a file back.
//!
//! # The session
//!
//! In order: System Event `O` (start of messages), one Stock Directory (`R`) per
//! symbol, System Event `S` (start of system hours), one Stock Trading Action (`H`,
//! state `T`, trading) per symbol, System Event `Q` (start of market hours), the order
//! flow, then System Events `M` (end of market hours), `E` (end of system hours) and
//! `C` (end of messages). Symbol `i` (0-based) has stock locate code `i + 1`; the
//! first symbols carry well-known tickers (AAPL, MSFT, NVDA, ...), the rest synthetic
//! four-letter ones.
//!
//! `messages` counts every message of the file, so it must be at least `6 + 2 *
//! symbols`; the order flow is the remainder.
//!
//! # Time
//!
//! Timestamps are nanoseconds since midnight. The flow starts at `session_start`
//! (09:30:00 by default) and the day from the open to the close is *compressed* into
//! `flow messages / mean_rate` seconds, so the file replays at a realistic average
//! rate (20,000 messages/s by default; the published replay test averaged about 10,500
//! updates/s with a 154,000/s peak). The instantaneous rate is the product of:
//!
//! - a U-shaped intraday profile: about 3.9x the mean right after the open, 3.1x just
//!   before the close and 0.8x at midday (`1 + 4 e^(-u/0.04) + 3 e^(-(1-u)/0.04)`,
//!   normalised to mean 1 over the session fraction `u`);
//! - a slow random factor (log-normal AR(1) stepped every simulated second, starting at
//!   1, correlation time about 4.5 s, stationary mean 1, log-sd 0.5), which makes
//!   10-second windows swing well above the mean;
//! - sub-second bursts: a two-state regime, ~100 ms bursts at 6x arriving about once a
//!   simulated second, 0.5x between them (time average 1), during which half the
//!   arrivals hit the previous symbol again;
//! - aggressive orders sweeping several resting orders emit several executions with the
//!   same timestamp.
//!
//! Arrivals are exponential gaps at the current rate, so timestamps never decrease.
//! The realised mean rate is random around `mean_rate`: within a few tens of percent
//! for sessions of a minute or more, more for sessions of a few seconds (the slow
//! factor barely averages out). The session `1M messages, 20,000/s` lasts about 50 s.
//!
//! # Order flow
//!
//! Symbols are chosen by a Zipf law (rank = directory order, exponent 1 by default),
//! so AAPL is the busiest and the median symbol sees a small fraction of its traffic.
//! Each symbol has a reference price that random-walks by one cent. Per arrival, the
//! symbol's book decides among:
//!
//! - Add Order (`A`, 3% as `F` with an MPID): side by book need, price at a geometric
//!   distance in ticks from the touch (mean 1.5 ticks, sometimes one tick better,
//!   5% deep in the book), lot-sized shares with some odd lots. The add probability
//!   grows when the book has fewer than `target_depth` live orders and shrinks above.
//! - Order Delete (`D`, the largest share, some deleting the symbol's newest order
//!   within microseconds, like flickering quotes), Order Cancel (`X`, partial),
//!   Order Replace (`U`, new reference, new price near the touch on the same side).
//! - An aggressive order: a buyer when the reference is above the mid (75%), else a
//!   seller, executing the opposite side in price-time priority (`E`, 10% as `C`
//!   with a price), possibly across several resting orders and levels.
//! - Non-displayed trades (`P`, order reference 0, price within the spread).
//!
//! With the defaults about 90% of orders end deleted, cancelled or replaced and
//! roughly one message in twenty is an execution (seed 7, 50 symbols, 200,000
//! messages: 85,064 `A`+`F`, 77,039 `D`, 18,126 `U`, 5,994 `X`, 9,368 `E`, 1,053 `C`,
//! 3,250 `P`).
//!
//! # Valid by construction
//!
//! The generator keeps every symbol's book (live orders by reference number, price
//! levels in time priority) and only emits what the book allows: no message names a
//! dead or unknown order, executions and cancels never exceed the remaining shares, an
//! add or replace is never priced through the opposite touch (books never cross),
//! reference numbers are unique for the day (increasing from 1), locate codes match
//! the directory, and timestamps are non-decreasing. The property tests in
//! `crates/md/tests/generator.rs` replay generated sessions through an independent
//! model and check all of this.
//!
//! # Reproducibility
//!
//! All randomness comes from one `ChaCha8Rng` seeded with `seed`, and the variates are
//! computed with exactly rounded arithmetic only (see `math.rs`), so a given
//! configuration yields the same bytes on every platform.
//!
//! # File format
//!
//! See [`write_session`]: each message preceded by its length as a 2-byte big-endian
//! integer, nothing else (the layout of NASDAQ's historical "ITCH 5.0 binary" files).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

mod math;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use math::Random;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tickwire_itch::{
    self as itch, DecodeError, EncodeError, Header, Message, Price, Side, Symbol, MAX_MESSAGE_LEN,
};

/// 09:30:00 in nanoseconds since midnight.
pub const MARKET_OPEN_NS: u64 = 9 * 3_600_000_000_000 + 30 * 60_000_000_000;

/// The latest timestamp the generator emits: 23:59:59.999999999.
const LAST_NS_OF_DAY: u64 = 86_400_000_000_000 - 1;

/// ITCH prices carry 4 implied decimals; the tick is one cent.
const TICK: u32 = 100;

/// Settings of one generated session. Build with struct update syntax over
/// [`GeneratorConfig::default`].
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    /// Number of symbols (1..=65535); symbol `i` gets stock locate `i + 1`.
    pub symbols: u16,
    /// Total number of messages in the session, including the system events and the
    /// per-symbol directory and trading action messages (at least `6 + 2 * symbols`).
    pub messages: u64,
    /// Seed of the ChaCha8 random stream; equal configurations give equal sessions.
    pub seed: u64,
    /// Mean order-flow rate in messages per second, which sets how far the session
    /// is compressed in time (default 20,000).
    pub mean_rate: f64,
    /// Timestamp of System Event `Q`, the start of the order flow, in ns since
    /// midnight (default 09:30:00). Header messages are stamped up to a second before.
    pub session_start_ns: u64,
    /// Zipf exponent of symbol activity: symbol of rank `k` is chosen with weight
    /// `k^-s` (default 1.0; 0 makes every symbol equally busy).
    pub zipf_exponent: f64,
    /// Live orders per symbol the flow steers towards (default 40).
    pub target_depth: u32,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        Self {
            symbols: 100,
            messages: 1_000_000,
            seed: 1,
            mean_rate: 20_000.0,
            session_start_ns: MARKET_OPEN_NS,
            zipf_exponent: 1.0,
            target_depth: 40,
        }
    }
}

impl GeneratorConfig {
    /// Messages that every session has whatever its flow: six system events and two
    /// messages per symbol.
    pub fn fixed_messages(&self) -> u64 {
        6 + 2 * u64::from(self.symbols)
    }

    /// Checks the settings, returning the first problem found.
    pub fn validate(&self) -> Result<(), Error> {
        if self.symbols == 0 {
            return Err(Error::NoSymbols);
        }
        if self.messages < self.fixed_messages() {
            return Err(Error::TooFewMessages {
                messages: self.messages,
                minimum: self.fixed_messages(),
            });
        }
        if !(self.mean_rate.is_finite() && self.mean_rate >= 1.0) {
            return Err(Error::InvalidRate(self.mean_rate));
        }
        if !(self.zipf_exponent.is_finite() && (0.0..=10.0).contains(&self.zipf_exponent)) {
            return Err(Error::InvalidZipfExponent(self.zipf_exponent));
        }
        if self.target_depth == 0 {
            return Err(Error::InvalidDepth);
        }
        // Leave room for the header second before the start and for the random
        // spread of the duration (allow twice the expected length) before midnight.
        let flow_s = (self.messages - self.fixed_messages()) as f64 / self.mean_rate;
        let end_ns = self.session_start_ns as f64 + 2.0 * flow_s * 1e9;
        if self.session_start_ns < 1_000_000_000 || end_ns > LAST_NS_OF_DAY as f64 {
            return Err(Error::SessionDoesNotFitInADay {
                start_ns: self.session_start_ns,
                flow_seconds: flow_s,
            });
        }
        Ok(())
    }
}

/// Errors of the generator (configuration) and of session files (input, IO).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Configuration: `symbols` was 0.
    #[error("the session needs at least one symbol")]
    NoSymbols,
    /// Configuration: `messages` cannot hold the system events and directory.
    #[error("{messages} messages cannot hold a session: at least {minimum} are needed (6 system events + 2 per symbol)")]
    TooFewMessages {
        /// The requested total.
        messages: u64,
        /// `6 + 2 * symbols`.
        minimum: u64,
    },
    /// Configuration: the mean rate must be a finite number of at least 1 message/s.
    #[error("mean rate {0} messages/s is not valid (must be finite and >= 1)")]
    InvalidRate(f64),
    /// Configuration: the Zipf exponent must be in [0, 10].
    #[error("Zipf exponent {0} is not valid (must be in [0, 10])")]
    InvalidZipfExponent(f64),
    /// Configuration: `target_depth` was 0.
    #[error("target depth must be at least 1 order")]
    InvalidDepth,
    /// Configuration: at this rate the session would run past midnight.
    #[error("a session starting at {start_ns} ns with {flow_seconds:.0} s of order flow does not fit in the day; raise the rate or lower the message count")]
    SessionDoesNotFitInADay {
        /// `session_start_ns`.
        start_ns: u64,
        /// Expected flow duration in seconds.
        flow_seconds: f64,
    },
    /// Input: the file ends inside a length prefix or a message.
    #[error(
        "session file truncated at byte {offset}: need {needed} more bytes, {available} available"
    )]
    Truncated {
        /// Offset of the incomplete frame's length prefix.
        offset: usize,
        /// Bytes the frame needs from `offset`.
        needed: usize,
        /// Bytes present from `offset`.
        available: usize,
    },
    /// Input: a frame announced a zero-length message.
    #[error("session file has a zero-length message at byte {offset}")]
    EmptyMessage {
        /// Offset of the length prefix.
        offset: usize,
    },
    /// Input: a framed message is not a valid ITCH message.
    #[error("session file: bad ITCH message at byte {offset}: {source}")]
    Decode {
        /// Offset of the frame's length prefix.
        offset: usize,
        /// The codec's reason.
        source: DecodeError,
    },
    /// A message could not be encoded (cannot happen for generated messages, whose
    /// timestamps stay within the day).
    #[error("encoding an ITCH message: {0}")]
    Encode(#[from] EncodeError),
    /// IO: reading or writing the session file failed.
    #[error("session file IO: {0}")]
    Io(#[from] std::io::Error),
}

/// One generated message, in the generator's own terms (converted to the codec's
/// message type on the way out). Prices are ITCH prices (4 implied decimals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    System {
        ts: u64,
        code: u8,
    },
    Directory {
        locate: u16,
        ts: u64,
    },
    TradingAction {
        locate: u16,
        ts: u64,
    },
    Add {
        locate: u16,
        ts: u64,
        order_ref: u64,
        side: Side,
        shares: u32,
        price: u32,
        mpid: Option<[u8; 4]>,
    },
    Executed {
        locate: u16,
        ts: u64,
        order_ref: u64,
        shares: u32,
        match_number: u64,
    },
    ExecutedWithPrice {
        locate: u16,
        ts: u64,
        order_ref: u64,
        shares: u32,
        match_number: u64,
        price: u32,
    },
    Cancel {
        locate: u16,
        ts: u64,
        order_ref: u64,
        shares: u32,
    },
    Delete {
        locate: u16,
        ts: u64,
        order_ref: u64,
    },
    Replace {
        locate: u16,
        ts: u64,
        old_ref: u64,
        new_ref: u64,
        shares: u32,
        price: u32,
    },
    Trade {
        locate: u16,
        ts: u64,
        shares: u32,
        price: u32,
        match_number: u64,
    },
}

/// Well-known tickers and plausible prices in dollars, for the busiest symbols.
const KNOWN_TICKERS: &[(&str, u32)] = &[
    ("AAPL", 190),
    ("MSFT", 420),
    ("NVDA", 120),
    ("AMZN", 180),
    ("GOOGL", 170),
    ("META", 500),
    ("TSLA", 250),
    ("AVGO", 160),
    ("GOOG", 172),
    ("COST", 850),
    ("NFLX", 650),
    ("AMD", 150),
    ("PEP", 170),
    ("ADBE", 520),
    ("CSCO", 50),
    ("TMUS", 190),
    ("INTC", 30),
    ("QCOM", 170),
    ("INTU", 620),
    ("CMCSA", 40),
    ("TXN", 195),
    ("AMGN", 310),
    ("AMAT", 200),
    ("ISRG", 430),
    ("HON", 205),
    ("BKNG", 3800),
    ("SBUX", 80),
    ("VRTX", 470),
    ("GILD", 70),
    ("ADP", 260),
    ("MDLZ", 68),
    ("REGN", 1000),
    ("ADI", 220),
    ("LRCX", 90),
    ("PANW", 330),
    ("MU", 110),
    ("KLAC", 750),
    ("SNPS", 540),
    ("CDNS", 280),
    ("MELI", 1700),
    ("PYPL", 65),
    ("ASML", 900),
    ("MAR", 240),
    ("CSX", 34),
    ("ORLY", 1100),
    ("CTAS", 680),
    ("MRVL", 70),
    ("ABNB", 150),
    ("NXPI", 240),
    ("FTNT", 60),
    ("WDAY", 240),
    ("ROP", 540),
    ("PCAR", 105),
    ("MNST", 52),
    ("CPRT", 53),
    ("DXCM", 110),
    ("ODFL", 190),
    ("KDP", 34),
    ("ROST", 145),
    ("PAYX", 125),
    ("SPY", 550),
    ("QQQ", 480),
    ("IWM", 210),
    ("TQQQ", 70),
    ("SQQQ", 9),
];

/// The 8-byte, space-padded ticker of symbol `index`: a known ticker, or a synthetic
/// four-letter one that collides with no known ticker.
fn ticker(index: usize, taken: &mut std::collections::HashSet<[u8; 8]>) -> [u8; 8] {
    if let Some((name, _)) = KNOWN_TICKERS.get(index) {
        return pad(name.as_bytes());
    }
    let mut n = (index - KNOWN_TICKERS.len()) as u64 * 7919 + 11_213;
    loop {
        let mut s = [b' '; 8];
        let mut v = n % (26 * 26 * 26 * 26);
        for slot in s[..4].iter_mut().rev() {
            *slot = b'A' + (v % 26) as u8;
            v /= 26;
        }
        if taken.insert(s) {
            return s;
        }
        n += 1;
    }
}

fn pad(name: &[u8]) -> [u8; 8] {
    let mut s = [b' '; 8];
    for (d, c) in s.iter_mut().zip(name) {
        *d = *c;
    }
    s
}

/// MPIDs used for attributed adds (`F`).
const MPIDS: &[[u8; 4]] = &[
    *b"GSCO", *b"MSCO", *b"JPMS", *b"UBSS", *b"CDRG", *b"VIRT", *b"NITE", *b"SUSQ",
];

/// Hasher for order reference numbers: they are distinct small integers, so one
/// multiply spreads them well, and it is several times cheaper than SipHash. Lookups
/// only, never iteration, so hash order cannot leak into the output.
#[derive(Default)]
struct RefHasher(u64);

impl Hasher for RefHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
        self.0 = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, n: u64) {
        let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type RefMap<V> = HashMap<u64, V, BuildHasherDefault<RefHasher>>;

/// A resting order.
#[derive(Debug, Clone, Copy)]
struct Order {
    symbol: u32,
    side: Side,
    /// Price in ticks (cents).
    ticks: u32,
    shares: u32,
    /// Position in the symbol's `live` list.
    live_pos: u32,
}

/// One symbol's book: price levels per side (time priority within a level) and the
/// live references (for uniform random choice).
struct Book {
    ticker: [u8; 8],
    /// Reference ("fair") price in ticks; random-walks.
    reference: u32,
    bids: BTreeMap<u32, Vec<u64>>,
    asks: BTreeMap<u32, Vec<u64>>,
    live: Vec<u64>,
    /// The last order added, for flickering deletes.
    newest: u64,
}

impl Book {
    fn best_bid(&self) -> Option<u32> {
        self.bids.last_key_value().map(|(p, _)| *p)
    }
    fn best_ask(&self) -> Option<u32> {
        self.asks.first_key_value().map(|(p, _)| *p)
    }
}

/// Where the generator is in the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Emitting header message number `n` (0-based).
    Header(u32),
    Flow,
    /// Emitting trailer message number `n` (0 = M, 1 = E, 2 = C).
    Trailer(u32),
    Done,
}

// Rate model constants (see the module docs).
const OPEN_BUMP: f64 = 4.0;
const CLOSE_BUMP: f64 = 3.0;
const BUMP_WIDTH: f64 = 0.04;
const SLOW_RHO: f64 = 0.8;
const SLOW_SIGMA: f64 = 0.5;
const BURST_MULT: f64 = 6.0;
const BURST_MEAN_S: f64 = 0.1;
const CALM_MEAN_S: f64 = 1.0;

// Flow mix (shares of the non-add arrivals).
const P_DELETE: f64 = 0.70;
const P_REPLACE: f64 = 0.165;
const P_CANCEL: f64 = 0.055;
const P_EXECUTE: f64 = 0.05;
// The rest (0.03) are non-displayed trades.

/// Most messages one arrival may emit (a sweep); bounds the pending queue.
const MAX_BURST: usize = 8;

/// A seeded, reproducible ITCH session; see the module docs. An [`Iterator`] over the
/// session's messages, exactly `config.messages` of them.
pub struct Generator {
    config: GeneratorConfig,
    rng: Random,
    books: Vec<Book>,
    orders: RefMap<Order>,
    /// Reused vectors of emptied price levels (avoids an allocation per new level).
    level_pool: Vec<Vec<u64>>,
    zipf_cdf: Vec<f64>,
    pending: VecDeque<Event>,
    phase: Phase,
    /// Order-flow messages still to emit (pending ones included once queued).
    flow_left: u64,
    flow_total: u64,
    next_ref: u64,
    next_match: u64,
    /// Simulated time since the open, in ns (fractional).
    t: f64,
    /// Expected flow duration in ns.
    duration: f64,
    profile_norm: f64,
    slow_x: f64,
    slow_next: f64,
    bursting: bool,
    regime_until: f64,
    last_symbol: u32,
    last_ts: u64,
}

impl Generator {
    /// A generator for `config`, or the configuration error.
    pub fn new(config: GeneratorConfig) -> Result<Self, Error> {
        config.validate()?;
        let mut rng = Random::new(ChaCha8Rng::seed_from_u64(config.seed));
        let n = usize::from(config.symbols);
        let mut taken: std::collections::HashSet<[u8; 8]> = KNOWN_TICKERS
            .iter()
            .map(|(t, _)| pad(t.as_bytes()))
            .collect();
        let mut books = Vec::with_capacity(n);
        for i in 0..n {
            let ticker = ticker(i, &mut taken);
            let dollars = match KNOWN_TICKERS.get(i) {
                Some((_, d)) => *d,
                // Synthetic: log-uniform between $5 and $300.
                None => math::exp(math::ln(5.0) + rng.uniform() * math::ln(60.0)) as u32,
            };
            books.push(Book {
                ticker,
                reference: dollars.max(2) * 100,
                bids: BTreeMap::new(),
                asks: BTreeMap::new(),
                live: Vec::new(),
                newest: 0,
            });
        }
        let mut zipf_cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += math::exp(-config.zipf_exponent * math::ln(k as f64));
            zipf_cdf.push(acc);
        }
        for c in &mut zipf_cdf {
            *c /= acc;
        }
        let flow_total = config.messages - config.fixed_messages();
        let duration = flow_total as f64 / config.mean_rate * 1e9;
        // Integral over u in [0,1] of the un-normalised profile.
        let tail = BUMP_WIDTH * (1.0 - math::exp(-1.0 / BUMP_WIDTH));
        let profile_norm = 1.0 + (OPEN_BUMP + CLOSE_BUMP) * tail;
        let mut g = Self {
            rng,
            books,
            orders: RefMap::default(),
            level_pool: Vec::new(),
            zipf_cdf,
            pending: VecDeque::with_capacity(MAX_BURST),
            phase: Phase::Header(0),
            flow_left: flow_total,
            flow_total,
            next_ref: 1,
            next_match: 1,
            t: 0.0,
            duration,
            profile_norm,
            slow_x: 0.0,
            slow_next: 1e9,
            bursting: false,
            regime_until: 0.0,
            last_symbol: 0,
            last_ts: 0,
            config,
        };
        g.regime_until = g.rng.exponential() * CALM_MEAN_S * 1e9;
        Ok(g)
    }

    /// The configuration this generator runs.
    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }

    /// The 8-byte, space-padded ticker of stock locate `locate`, if it exists.
    pub fn ticker(&self, locate: u16) -> Option<[u8; 8]> {
        self.books
            .get(usize::from(locate).checked_sub(1)?)
            .map(|b| b.ticker)
    }

    /// Messages not yet yielded.
    pub fn remaining(&self) -> u64 {
        let header = 3 + 2 * u64::from(self.config.symbols);
        match self.phase {
            Phase::Header(i) => header - u64::from(i) + self.flow_total + 3,
            Phase::Flow => self.pending.len() as u64 + self.flow_left + 3,
            Phase::Trailer(i) => 3 - u64::from(i),
            Phase::Done => 0,
        }
    }

    /// The next message of the session in the generator's model.
    fn next_event(&mut self) -> Option<Event> {
        loop {
            match self.phase {
                Phase::Header(i) => {
                    self.phase = Phase::Header(i + 1);
                    if let Some(e) = self.header_event(i) {
                        return Some(e);
                    }
                    self.phase = Phase::Flow;
                }
                Phase::Flow => {
                    if let Some(e) = self.pending.pop_front() {
                        return Some(e);
                    }
                    if self.flow_left == 0 {
                        self.phase = Phase::Trailer(0);
                        continue;
                    }
                    self.arrival();
                }
                Phase::Trailer(i) => {
                    let code = [b'M', b'E', b'C'][i as usize];
                    self.phase = if i == 2 {
                        Phase::Done
                    } else {
                        Phase::Trailer(i + 1)
                    };
                    let ts = (self.last_ts + 1_000_000).min(LAST_NS_OF_DAY);
                    self.last_ts = ts;
                    return Some(Event::System { ts, code });
                }
                Phase::Done => return None,
            }
        }
    }

    /// Header message `i`, or `None` past the header.
    fn header_event(&mut self, i: u32) -> Option<Event> {
        let n = u32::from(self.config.symbols);
        let start = self.config.session_start_ns;
        let open = start - 1_000_000_000;
        let system = start - 500_000_000;
        let ev = if i == 0 {
            Event::System {
                ts: open,
                code: b'O',
            }
        } else if i <= n {
            Event::Directory {
                locate: i as u16,
                ts: open + 1_000 * u64::from(i),
            }
        } else if i == n + 1 {
            Event::System {
                ts: system,
                code: b'S',
            }
        } else if i <= 2 * n + 1 {
            let k = i - n - 1;
            Event::TradingAction {
                locate: k as u16,
                ts: system + 1_000 * u64::from(k),
            }
        } else if i == 2 * n + 2 {
            Event::System {
                ts: start,
                code: b'Q',
            }
        } else {
            return None;
        };
        self.last_ts = match ev {
            Event::System { ts, .. }
            | Event::Directory { ts, .. }
            | Event::TradingAction { ts, .. } => ts,
            _ => self.last_ts,
        };
        Some(ev)
    }
}

impl Generator {
    /// Intraday profile at session fraction `u`, mean 1 over [0, 1].
    fn profile(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        (1.0 + OPEN_BUMP * math::exp(-u / BUMP_WIDTH)
            + CLOSE_BUMP * math::exp(-(1.0 - u) / BUMP_WIDTH))
            / self.profile_norm
    }

    /// Advances simulated time by one arrival gap; returns the new timestamp.
    fn advance_time(&mut self) -> u64 {
        // Regime switches and slow-factor steps that fell due.
        while self.t >= self.regime_until {
            self.bursting = !self.bursting;
            let mean = if self.bursting {
                BURST_MEAN_S
            } else {
                CALM_MEAN_S
            };
            self.regime_until += self.rng.exponential() * mean * 1e9;
        }
        while self.t >= self.slow_next {
            let innovation = SLOW_SIGMA * (1.0 - SLOW_RHO * SLOW_RHO).sqrt() * self.rng.normal();
            self.slow_x = SLOW_RHO * self.slow_x + innovation;
            self.slow_next += 1e9;
        }
        // Time share of bursts p = 0.1/1.1; calm multiplier keeps the mean at 1.
        let p = BURST_MEAN_S / (BURST_MEAN_S + CALM_MEAN_S);
        let regime = if self.bursting {
            BURST_MULT
        } else {
            (1.0 - p * BURST_MULT) / (1.0 - p)
        };
        let slow = math::exp(self.slow_x - SLOW_SIGMA * SLOW_SIGMA / 2.0);
        let rate = self.config.mean_rate * self.profile(self.t / self.duration) * slow * regime;
        self.t += self.rng.exponential() / rate * 1e9;
        let ts = (self.config.session_start_ns + self.t as u64).min(LAST_NS_OF_DAY);
        self.last_ts = self.last_ts.max(ts);
        self.last_ts
    }

    fn pick_symbol(&mut self) -> u32 {
        if self.bursting && self.rng.chance(0.5) {
            return self.last_symbol;
        }
        let u = self.rng.uniform();
        let i = self.zipf_cdf.partition_point(|c| *c <= u);
        let s = i.min(self.books.len() - 1) as u32;
        self.last_symbol = s;
        s
    }

    /// One arrival: advances time, picks a symbol and queues 1..=MAX_BURST messages
    /// (never more than `flow_left`).
    fn arrival(&mut self) {
        let ts = self.advance_time();
        let s = self.pick_symbol();
        let book = &mut self.books[s as usize];
        // Reference random walk: one cent, staying at or above $1.
        if self.rng.chance(0.05) {
            if self.rng.chance(0.5) || book.reference <= 100 {
                book.reference += 1;
            } else {
                book.reference -= 1;
            }
        }
        let n = book.live.len() as f64;
        let one_sided = book.bids.is_empty() || book.asks.is_empty();
        let target = f64::from(self.config.target_depth);
        let p_add = (0.46 + 0.4 * (target - n) / target).clamp(0.05, 0.95);
        let u = self.rng.uniform();
        if one_sided || n < 2.0 || u < p_add {
            self.add(s, ts);
            return;
        }
        let r = (u - p_add) / (1.0 - p_add);
        if r < P_DELETE {
            self.delete(s, ts);
        } else if r < P_DELETE + P_REPLACE {
            self.replace(s, ts);
        } else if r < P_DELETE + P_REPLACE + P_CANCEL {
            self.cancel(s, ts);
        } else if r < P_DELETE + P_REPLACE + P_CANCEL + P_EXECUTE {
            self.execute(s, ts);
        } else {
            self.trade(s, ts);
        }
    }

    fn push(&mut self, e: Event) {
        debug_assert!(self.flow_left > 0);
        self.flow_left -= 1;
        self.pending.push_back(e);
    }

    fn locate(s: u32) -> u16 {
        // Symbols are at most 65535 (u16 in the config), so index + 1 fits.
        (s + 1) as u16
    }

    /// Order size: 20% odd lots, else round lots with a geometric number of lots.
    fn draw_shares(&mut self) -> u32 {
        if self.rng.chance(0.2) {
            1 + self.rng.below(99) as u32
        } else {
            100 * (1 + self.rng.geometric(0.5, 99))
        }
    }

    /// A price in ticks for a new order on `side` of symbol `s`: near the touch (or the
    /// reference when the side is empty), never through the opposite touch.
    fn draw_price(&mut self, s: u32, side: Side) -> u32 {
        let deep = self.rng.chance(0.05);
        let distance = if deep {
            5 + self.rng.below(96) as u32
        } else {
            self.rng.geometric(0.6, 50)
        };
        let improve = !deep && self.rng.chance(0.15);
        let book = &self.books[s as usize];
        let r = book.reference;
        match side {
            Side::Buy => {
                let anchor = book.best_bid().map_or(r - 1, |b| b.max(r - 1));
                let p = if improve {
                    anchor + 1
                } else {
                    anchor.saturating_sub(distance)
                };
                let p = match book.best_ask() {
                    Some(a) => p.min(a - 1),
                    None => p,
                };
                p.max(1)
            }
            Side::Sell => {
                let anchor = book.best_ask().map_or(r + 1, |a| a.min(r + 1));
                let p = if improve {
                    anchor.saturating_sub(1)
                } else {
                    anchor + distance
                };
                // Asks stay at 2 ticks or more so a bid can always fit below them.
                let floor = book.best_bid().map_or(2, |b| (b + 1).max(2));
                p.max(floor).min(u32::MAX / TICK)
            }
        }
    }

    /// Rests a new order; returns its reference.
    fn insert(&mut self, s: u32, side: Side, ticks: u32, shares: u32) -> u64 {
        let order_ref = self.next_ref;
        self.next_ref += 1;
        let book = &mut self.books[s as usize];
        let levels = match side {
            Side::Buy => &mut book.bids,
            Side::Sell => &mut book.asks,
        };
        let pool = &mut self.level_pool;
        levels
            .entry(ticks)
            .or_insert_with(|| pool.pop().unwrap_or_default())
            .push(order_ref);
        let live_pos = book.live.len() as u32;
        book.live.push(order_ref);
        book.newest = order_ref;
        self.orders.insert(
            order_ref,
            Order {
                symbol: s,
                side,
                ticks,
                shares,
                live_pos,
            },
        );
        order_ref
    }

    /// Removes a live order from its book entirely.
    fn remove(&mut self, order_ref: u64) -> Option<Order> {
        let o = self.orders.remove(&order_ref)?;
        let book = &mut self.books[o.symbol as usize];
        let levels = match o.side {
            Side::Buy => &mut book.bids,
            Side::Sell => &mut book.asks,
        };
        if let Some(level) = levels.get_mut(&o.ticks) {
            if let Some(i) = level.iter().position(|r| *r == order_ref) {
                level.remove(i);
            }
            if level.is_empty() {
                if let Some(v) = levels.remove(&o.ticks) {
                    self.level_pool.push(v);
                }
            }
        }
        let pos = o.live_pos as usize;
        book.live.swap_remove(pos);
        if let Some(moved) = book.live.get(pos).copied() {
            if let Some(m) = self.orders.get_mut(&moved) {
                m.live_pos = pos as u32;
            }
        }
        Some(o)
    }

    fn random_live(&mut self, s: u32) -> u64 {
        let book = &self.books[s as usize];
        // Callers ensure the book has at least two live orders.
        book.live[self.rng.below(book.live.len() as u64) as usize]
    }

    fn add(&mut self, s: u32, ts: u64) {
        let book = &self.books[s as usize];
        let side = if book.bids.is_empty() && !book.asks.is_empty() {
            Side::Buy
        } else if book.asks.is_empty() && !book.bids.is_empty() {
            Side::Sell
        } else if self.rng.chance(0.5) {
            Side::Buy
        } else {
            Side::Sell
        };
        let ticks = self.draw_price(s, side);
        let shares = self.draw_shares();
        let mpid = if self.rng.chance(0.03) {
            Some(MPIDS[self.rng.below(MPIDS.len() as u64) as usize])
        } else {
            None
        };
        let order_ref = self.insert(s, side, ticks, shares);
        self.push(Event::Add {
            locate: Self::locate(s),
            ts,
            order_ref,
            side,
            shares,
            price: ticks * TICK,
            mpid,
        });
    }

    fn delete(&mut self, s: u32, ts: u64) {
        let newest = self.books[s as usize].newest;
        let order_ref = if self.rng.chance(0.3) && self.orders.contains_key(&newest) {
            newest
        } else {
            self.random_live(s)
        };
        self.remove(order_ref);
        self.push(Event::Delete {
            locate: Self::locate(s),
            ts,
            order_ref,
        });
    }

    fn cancel(&mut self, s: u32, ts: u64) {
        let order_ref = self.random_live(s);
        let remaining = self.orders.get(&order_ref).map_or(0, |o| o.shares);
        if remaining < 2 {
            self.remove(order_ref);
            self.push(Event::Delete {
                locate: Self::locate(s),
                ts,
                order_ref,
            });
            return;
        }
        // Partial: keep at least one share; whole lots when the order is in lots.
        let shares = if remaining % 100 == 0 && remaining >= 200 {
            100 * (1 + self.rng.below(u64::from(remaining / 100 - 1)) as u32)
        } else {
            1 + self.rng.below(u64::from(remaining - 1)) as u32
        };
        if let Some(o) = self.orders.get_mut(&order_ref) {
            o.shares -= shares;
        }
        self.push(Event::Cancel {
            locate: Self::locate(s),
            ts,
            order_ref,
            shares,
        });
    }

    fn replace(&mut self, s: u32, ts: u64) {
        let old_ref = self.random_live(s);
        let Some(old) = self.remove(old_ref) else {
            return;
        };
        let ticks = self.draw_price(s, old.side);
        let shares = if self.rng.chance(0.5) {
            old.shares
        } else {
            self.draw_shares()
        };
        let new_ref = self.insert(s, old.side, ticks, shares);
        self.push(Event::Replace {
            locate: Self::locate(s),
            ts,
            old_ref,
            new_ref,
            shares,
            price: ticks * TICK,
        });
    }

    /// An aggressive order sweeping the opposite side in price-time priority.
    fn execute(&mut self, s: u32, ts: u64) {
        let book = &self.books[s as usize];
        let (Some(bid), Some(ask)) = (book.best_bid(), book.best_ask()) else {
            return self.add(s, ts);
        };
        let reference2 = u64::from(book.reference) * 2;
        let mid2 = u64::from(bid) + u64::from(ask);
        let p_buy = match reference2.cmp(&mid2) {
            std::cmp::Ordering::Greater => 0.75,
            std::cmp::Ordering::Less => 0.25,
            std::cmp::Ordering::Equal => 0.5,
        };
        let aggressor = if self.rng.chance(p_buy) {
            Side::Buy
        } else {
            Side::Sell
        };
        let mut want = self.draw_shares();
        let cap = (MAX_BURST as u64).min(self.flow_left);
        let mut emitted = 0;
        while want > 0 && emitted < cap {
            let book = &self.books[s as usize];
            let front = match aggressor {
                Side::Buy => book
                    .asks
                    .first_key_value()
                    .and_then(|(_, l)| l.first().copied()),
                Side::Sell => book
                    .bids
                    .last_key_value()
                    .and_then(|(_, l)| l.first().copied()),
            };
            let Some(order_ref) = front else { break };
            let Some(o) = self.orders.get(&order_ref).copied() else {
                break;
            };
            let shares = o.shares.min(want);
            want -= shares;
            let match_number = self.next_match;
            self.next_match += 1;
            let locate = Self::locate(s);
            let ev = if self.rng.chance(0.1) {
                Event::ExecutedWithPrice {
                    locate,
                    ts,
                    order_ref,
                    shares,
                    match_number,
                    price: o.ticks * TICK,
                }
            } else {
                Event::Executed {
                    locate,
                    ts,
                    order_ref,
                    shares,
                    match_number,
                }
            };
            if shares == o.shares {
                self.remove(order_ref);
            } else if let Some(o) = self.orders.get_mut(&order_ref) {
                o.shares -= shares;
            }
            self.push(ev);
            emitted += 1;
        }
    }

    /// A non-displayed trade inside the spread.
    fn trade(&mut self, s: u32, ts: u64) {
        let book = &self.books[s as usize];
        let (Some(bid), Some(ask)) = (book.best_bid(), book.best_ask()) else {
            return self.add(s, ts);
        };
        let ticks = bid + self.rng.below(u64::from(ask - bid) + 1) as u32;
        let shares = self.draw_shares();
        let match_number = self.next_match;
        self.next_match += 1;
        self.push(Event::Trade {
            locate: Self::locate(s),
            ts,
            shares,
            price: ticks * TICK,
            match_number,
        });
    }
}

impl Generator {
    /// The codec's message for a model event.
    fn to_message(&self, e: Event) -> Message {
        let header = |stock_locate: u16, timestamp: u64| Header {
            stock_locate,
            tracking_number: 0,
            timestamp,
        };
        let stock = |locate: u16| Symbol(self.books[usize::from(locate) - 1].ticker);
        match e {
            Event::System { ts, code } => Message::SystemEvent(itch::SystemEvent {
                header: header(0, ts),
                event_code: code,
            }),
            Event::Directory { locate, ts } => {
                let name = KNOWN_TICKERS
                    .get(usize::from(locate) - 1)
                    .map_or("", |(n, _)| *n);
                let (etp, leverage, inverse) = match name {
                    "SPY" | "QQQ" | "IWM" => (b'Y', 1, b'N'),
                    "TQQQ" => (b'Y', 3, b'N'),
                    "SQQQ" => (b'Y', 3, b'Y'),
                    _ => (b'N', 0, b'N'),
                };
                Message::StockDirectory(itch::StockDirectory {
                    header: header(locate, ts),
                    stock: stock(locate),
                    market_category: b'Q',
                    financial_status_indicator: b'N',
                    round_lot_size: 100,
                    round_lots_only: b'N',
                    issue_classification: if etp == b'Y' { b'Q' } else { b'C' },
                    issue_sub_type: *b"Z ",
                    authenticity: b'P',
                    short_sale_threshold_indicator: b'N',
                    ipo_flag: b'N',
                    luld_reference_price_tier: if locate <= 100 { b'1' } else { b'2' },
                    etp_flag: etp,
                    etp_leverage_factor: leverage,
                    inverse_indicator: inverse,
                })
            }
            Event::TradingAction { locate, ts } => {
                Message::StockTradingAction(itch::StockTradingAction {
                    header: header(locate, ts),
                    stock: stock(locate),
                    trading_state: b'T',
                    reserved: b' ',
                    reason: *b"    ",
                })
            }
            Event::Add {
                locate,
                ts,
                order_ref,
                side,
                shares,
                price,
                mpid: None,
            } => Message::AddOrder(itch::AddOrder {
                header: header(locate, ts),
                order_ref,
                side,
                shares,
                stock: stock(locate),
                price: Price(price),
            }),
            Event::Add {
                locate,
                ts,
                order_ref,
                side,
                shares,
                price,
                mpid: Some(attribution),
            } => Message::AddOrderMpid(itch::AddOrderMpid {
                header: header(locate, ts),
                order_ref,
                side,
                shares,
                stock: stock(locate),
                price: Price(price),
                attribution,
            }),
            Event::Executed {
                locate,
                ts,
                order_ref,
                shares,
                match_number,
            } => Message::OrderExecuted(itch::OrderExecuted {
                header: header(locate, ts),
                order_ref,
                executed_shares: shares,
                match_number,
            }),
            Event::ExecutedWithPrice {
                locate,
                ts,
                order_ref,
                shares,
                match_number,
                price,
            } => Message::OrderExecutedWithPrice(itch::OrderExecutedWithPrice {
                header: header(locate, ts),
                order_ref,
                executed_shares: shares,
                match_number,
                printable: b'Y',
                execution_price: Price(price),
            }),
            Event::Cancel {
                locate,
                ts,
                order_ref,
                shares,
            } => Message::OrderCancel(itch::OrderCancel {
                header: header(locate, ts),
                order_ref,
                cancelled_shares: shares,
            }),
            Event::Delete {
                locate,
                ts,
                order_ref,
            } => Message::OrderDelete(itch::OrderDelete {
                header: header(locate, ts),
                order_ref,
            }),
            Event::Replace {
                locate,
                ts,
                old_ref,
                new_ref,
                shares,
                price,
            } => Message::OrderReplace(itch::OrderReplace {
                header: header(locate, ts),
                original_order_ref: old_ref,
                new_order_ref: new_ref,
                shares,
                price: Price(price),
            }),
            Event::Trade {
                locate,
                ts,
                shares,
                price,
                match_number,
            } => Message::Trade(itch::Trade {
                header: header(locate, ts),
                // Non-displayed orders have had reference 0 (and side B) since 2014.
                order_ref: 0,
                side: Side::Buy,
                shares,
                stock: stock(locate),
                price: Price(price),
                match_number,
            }),
        }
    }

    /// Appends the next message's ITCH bytes (unframed) to `out` and returns their
    /// length, or `None` at the end of the session. No allocation once `out` has room.
    pub fn encode_next(&mut self, out: &mut Vec<u8>) -> Option<Result<usize, Error>> {
        let m = self.next()?;
        Some(m.encode_to_vec(out).map_err(Error::from))
    }
}

impl Iterator for Generator {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        let e = self.next_event()?;
        Some(self.to_message(e))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// Appends `msg` to `out` in the session file framing: its length as a 2-byte
/// big-endian integer, then its ITCH bytes. Returns the bytes appended.
pub fn append_frame(msg: &Message, out: &mut Vec<u8>) -> Result<usize, Error> {
    let (bytes, n) = msg.to_bytes()?;
    // ITCH messages are at most MAX_MESSAGE_LEN (50) bytes, so the length fits.
    out.extend_from_slice(&(n as u16).to_be_bytes());
    out.extend_from_slice(&bytes[..n]);
    Ok(n + 2)
}

/// What [`write_session`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSummary {
    /// Messages written.
    pub messages: u64,
    /// Bytes written (frames included).
    pub bytes: u64,
    /// Timestamp of the first message (System Event `O`), ns since midnight.
    pub first_timestamp: u64,
    /// Timestamp of the last message (System Event `C`), ns since midnight.
    pub last_timestamp: u64,
}

/// Generates the session of `config` into the file at `path` (created or truncated).
///
/// # File format
///
/// A sequence of frames and nothing else: each frame is a message length `L` as an
/// unsigned 16-bit big-endian integer followed by `L` bytes holding exactly one ITCH 5.0
/// message (type byte first). This is the layout of NASDAQ's historical TotalView-ITCH
/// 5.0 binary files; [`FileReader`] reads it back.
pub fn write_session(
    config: GeneratorConfig,
    path: &std::path::Path,
) -> Result<SessionSummary, Error> {
    let generator = Generator::new(config)?;
    write_session_file(generator, std::fs::File::create(path)?)
}

/// [`write_session`] into a file the caller created: it can then check the path (and
/// name it in its error) before generating anything. Synced to disk before returning.
pub fn write_session_file(
    generator: Generator,
    file: std::fs::File,
) -> Result<SessionSummary, Error> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let summary = write_session_to(generator, &mut out)?;
    let file = out.into_inner().map_err(|e| Error::Io(e.into_error()))?;
    file.sync_all()?;
    Ok(summary)
}

/// Writes every remaining message of `generator` to `out` in the session file framing
/// (see [`write_session`]), in chunks of about 64 KiB.
pub fn write_session_to<W: std::io::Write>(
    generator: Generator,
    mut out: W,
) -> Result<SessionSummary, Error> {
    let mut buf = Vec::with_capacity(64 * 1024 + MAX_MESSAGE_LEN + 2);
    let mut summary = SessionSummary {
        messages: 0,
        bytes: 0,
        first_timestamp: 0,
        last_timestamp: 0,
    };
    for msg in generator {
        if summary.messages == 0 {
            summary.first_timestamp = msg.timestamp();
        }
        summary.last_timestamp = msg.timestamp();
        summary.messages += 1;
        summary.bytes += append_frame(&msg, &mut buf)? as u64;
        if buf.len() >= 64 * 1024 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)?;
    out.flush()?;
    Ok(summary)
}

/// Reads a session file (see [`write_session`]) from a byte slice: an iterator over the
/// ITCH bytes of each framed message, without copying. A truncated or empty frame yields
/// one error and ends the iteration.
#[derive(Debug, Clone)]
pub struct FileReader<'a> {
    data: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> FileReader<'a> {
    /// A reader over the whole contents of a session file.
    pub fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            offset: 0,
            failed: false,
        }
    }

    /// Offset of the next frame (the bytes consumed so far).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The messages decoded by the ITCH codec; a frame that does not decode yields
    /// [`Error::Decode`] and ends the iteration.
    pub fn messages(self) -> impl Iterator<Item = Result<Message, Error>> + 'a {
        let mut reader = self;
        std::iter::from_fn(move || {
            let offset = reader.offset;
            match reader.next()? {
                Ok(bytes) => match itch::decode(bytes) {
                    Ok(m) => Some(Ok(m)),
                    Err(source) => {
                        reader.failed = true;
                        Some(Err(Error::Decode { offset, source }))
                    }
                },
                Err(e) => Some(Err(e)),
            }
        })
    }
}

impl<'a> Iterator for FileReader<'a> {
    type Item = Result<&'a [u8], Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = self.data.get(self.offset..).unwrap_or_default();
        if rest.is_empty() {
            return None;
        }
        let offset = self.offset;
        let truncated = |needed: usize| Error::Truncated {
            offset,
            needed,
            available: rest.len(),
        };
        let Some(prefix) = rest.get(..2) else {
            self.failed = true;
            return Some(Err(truncated(2)));
        };
        let len = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
        if len == 0 {
            self.failed = true;
            return Some(Err(Error::EmptyMessage { offset }));
        }
        let Some(body) = rest.get(2..2 + len) else {
            self.failed = true;
            return Some(Err(truncated(2 + len)));
        };
        self.offset += 2 + len;
        Some(Ok(body))
    }
}
