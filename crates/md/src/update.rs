//! The normalized market-data update: the payload the feed handler publishes to
//! `md/NASDAQ/<SYMBOL>/trade`, `.../quote` and `.../depth`.
//!
//! A fixed little-endian binary layout, documented byte by byte in
//! `docs/market-data.md` (that document is normative; this module implements it):
//! a 40-byte [`Header`] followed by a body whose layout depends on the kind
//! ([`Trade`], [`Quote`] or a depth book of up to [`MAX_DEPTH_LEVELS`] levels a side).
//!
//! Encoding appends to a caller-owned `Vec<u8>` (reused, so steady state does not
//! allocate). Decoding is a flyweight over `&[u8]` ([`decode`] returns an [`Update`]
//! borrowing the input for depth levels) and treats its input as hostile: any byte
//! string gives either an update or an [`UpdateError`], never a panic, and the whole
//! input must be consumed.
//!
//! Timestamps in the header: the ITCH exchange timestamp (ns since midnight) and the
//! feed handler's receive time (ns of `CLOCK_MONOTONIC`, the clock the router stamps
//! with). The feed-handler publish, router-in and router-out times travel in the router
//! frame's STAMPS block, and the client stamps its own receive time; see the timestamp
//! chain in `docs/market-data.md`.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use crate::book::{Level, Side};

/// Version byte written by this encoder (offset 1).
pub const VERSION: u8 = 1;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 40;
/// Bytes of a trade update (header included).
pub const TRADE_LEN: usize = HEADER_LEN + 24;
/// Bytes of a quote update (header included).
pub const QUOTE_LEN: usize = HEADER_LEN + 32;
/// Bytes of the fixed part of a depth update (header plus the two counts and padding).
pub const DEPTH_FIXED_LEN: usize = HEADER_LEN + 8;
/// Bytes of one depth level.
pub const LEVEL_LEN: usize = 16;
/// Most levels a side of a depth update may carry.
pub const MAX_DEPTH_LEVELS: usize = 64;

/// Update kinds (offset 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A trade (execution of a resting order, or a non-displayed trade).
    Trade = 1,
    /// Top of book.
    Quote = 2,
    /// The best N levels of each side.
    Depth = 3,
}

impl Kind {
    /// Maps the kind byte; `None` for an unknown kind.
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Trade),
            2 => Some(Kind::Quote),
            3 => Some(Kind::Depth),
            _ => None,
        }
    }
}

/// Fields every update carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// ITCH stock locate code.
    pub locate: u16,
    /// ITCH symbol, 8 bytes, left-justified and space-padded as in ITCH.
    pub symbol: [u8; 8],
    /// MoldUDP64 sequence number of the ITCH message that caused the update.
    pub seq: u64,
    /// ITCH timestamp of that message: nanoseconds since midnight (exchange clock).
    pub exchange_ns: u64,
    /// Feed-handler receive time of the packet: nanoseconds of `CLOCK_MONOTONIC`.
    pub receive_ns: u64,
}

/// Flag bits of a trade (offset 50).
pub mod trade_flags {
    /// The exchange marked the execution non-printable (`C` with printable = `N`):
    /// it must not be counted in volume, the trade it belongs to was printed elsewhere.
    pub const NON_PRINTABLE: u8 = 0x01;
    /// A trade against non-displayed liquidity (ITCH `P`): the book did not change.
    pub const NON_DISPLAYED: u8 = 0x02;
}

/// A trade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trade {
    /// Execution price, ITCH units (4 implied decimals).
    pub price: u32,
    /// Shares executed.
    pub shares: u32,
    /// Side of the resting order (the passive side), as ITCH reports it.
    pub side: Side,
    /// The ITCH message type that reported it: `b'E'`, `b'C'` or `b'P'`.
    pub source: u8,
    /// [`trade_flags`] bits.
    pub flags: u8,
    /// ITCH match number.
    pub match_number: u64,
}

/// Top of book; an empty side has price, shares and orders 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quote {
    /// Best bid price, ITCH units.
    pub bid_price: u32,
    /// Best ask price, ITCH units.
    pub ask_price: u32,
    /// Shares at the best bid.
    pub bid_shares: u64,
    /// Shares at the best ask.
    pub ask_shares: u64,
    /// Orders at the best bid.
    pub bid_orders: u32,
    /// Orders at the best ask.
    pub ask_orders: u32,
}

/// The levels of a decoded depth update: a flyweight over the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth<'a> {
    bid_count: usize,
    ask_count: usize,
    /// Exactly `(bid_count + ask_count) * LEVEL_LEN` bytes, bids first.
    levels: &'a [u8],
}

impl<'a> Depth<'a> {
    /// Number of levels carried for `side`.
    pub fn count(&self, side: Side) -> usize {
        match side {
            Side::Buy => self.bid_count,
            Side::Sell => self.ask_count,
        }
    }

    /// The levels of `side`, best first.
    pub fn levels(&self, side: Side) -> impl ExactSizeIterator<Item = Level> + 'a {
        let (from, n) = match side {
            Side::Buy => (0, self.bid_count),
            Side::Sell => (self.bid_count, self.ask_count),
        };
        let bytes: &'a [u8] = self.levels;
        bytes
            .chunks_exact(LEVEL_LEN)
            .skip(from)
            .take(n)
            .map(|c| Level {
                price: u32_at(c, 0),
                orders: u32_at(c, 4),
                shares: u64_at(c, 8),
            })
    }
}

/// A decoded update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update<'a> {
    /// A trade.
    Trade(Header, Trade),
    /// A top-of-book change.
    Quote(Header, Quote),
    /// The best levels of each side.
    Depth(Header, Depth<'a>),
}

impl Update<'_> {
    /// The common header.
    pub fn header(&self) -> &Header {
        match self {
            Update::Trade(h, _) | Update::Quote(h, _) | Update::Depth(h, _) => h,
        }
    }
}

/// Why a payload is not a valid update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// Fewer bytes than the kind's layout needs.
    #[error("update truncated: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the layout needs.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// More bytes than the kind's layout has.
    #[error("update of {have} bytes has trailing bytes (layout is {need} bytes)")]
    TrailingBytes {
        /// Bytes the layout has.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The kind byte is not a known kind.
    #[error("unknown update kind {0}")]
    UnknownKind(u8),
    /// The version byte is not one this decoder reads.
    #[error("unsupported update version {0}")]
    UnsupportedVersion(u8),
    /// A side byte that is neither `B` nor `S`.
    #[error("invalid side byte {0:#04x}")]
    InvalidSide(u8),
    /// A depth side announces more than [`MAX_DEPTH_LEVELS`] levels.
    #[error("depth update announces {0} levels on a side (at most {MAX_DEPTH_LEVELS})")]
    TooManyLevels(usize),
    /// A reserved byte is not zero.
    #[error("reserved byte at offset {0} is not zero")]
    Reserved(usize),
}

// ---------------------------------------------------------------------------------
// Encoding

/// The header bytes (built on the stack so that a payload is appended in one copy).
#[inline]
fn header_bytes(kind: Kind, h: &Header) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    b[0] = kind as u8;
    b[1] = VERSION;
    b[2..4].copy_from_slice(&h.locate.to_le_bytes());
    b[8..16].copy_from_slice(&h.symbol);
    b[16..24].copy_from_slice(&h.seq.to_le_bytes());
    b[24..32].copy_from_slice(&h.exchange_ns.to_le_bytes());
    b[32..40].copy_from_slice(&h.receive_ns.to_le_bytes());
    b
}

#[inline]
fn put_header(out: &mut Vec<u8>, kind: Kind, h: &Header) {
    out.extend_from_slice(&header_bytes(kind, h));
}

/// Appends a trade update ([`TRADE_LEN`] bytes).
#[inline]
pub fn encode_trade(out: &mut Vec<u8>, h: &Header, t: &Trade) {
    let mut b = [0u8; TRADE_LEN];
    b[..HEADER_LEN].copy_from_slice(&header_bytes(Kind::Trade, h));
    b[40..44].copy_from_slice(&t.price.to_le_bytes());
    b[44..48].copy_from_slice(&t.shares.to_le_bytes());
    b[48] = t.side.as_byte();
    b[49] = t.source;
    b[50] = t.flags;
    b[56..64].copy_from_slice(&t.match_number.to_le_bytes());
    out.extend_from_slice(&b);
}

/// Appends a quote update ([`QUOTE_LEN`] bytes).
#[inline]
pub fn encode_quote(out: &mut Vec<u8>, h: &Header, q: &Quote) {
    let mut b = [0u8; QUOTE_LEN];
    b[..HEADER_LEN].copy_from_slice(&header_bytes(Kind::Quote, h));
    b[40..44].copy_from_slice(&q.bid_price.to_le_bytes());
    b[44..48].copy_from_slice(&q.bid_orders.to_le_bytes());
    b[48..56].copy_from_slice(&q.bid_shares.to_le_bytes());
    b[56..60].copy_from_slice(&q.ask_price.to_le_bytes());
    b[60..64].copy_from_slice(&q.ask_orders.to_le_bytes());
    b[64..72].copy_from_slice(&q.ask_shares.to_le_bytes());
    out.extend_from_slice(&b);
}

/// Appends a depth update with the given levels, best first. Each side is cut at
/// [`MAX_DEPTH_LEVELS`] levels.
#[inline]
pub fn encode_depth(
    out: &mut Vec<u8>,
    h: &Header,
    bids: impl Iterator<Item = Level>,
    asks: impl Iterator<Item = Level>,
) {
    put_header(out, Kind::Depth, h);
    let counts_at = out.len();
    out.extend_from_slice(&[0; 8]);
    let nb = put_levels(out, bids);
    let na = put_levels(out, asks);
    out[counts_at] = nb;
    out[counts_at + 1] = na;
}

#[inline]
fn put_levels(out: &mut Vec<u8>, levels: impl Iterator<Item = Level>) -> u8 {
    let mut n = 0;
    for l in levels.take(MAX_DEPTH_LEVELS) {
        out.extend_from_slice(&l.price.to_le_bytes());
        out.extend_from_slice(&l.orders.to_le_bytes());
        out.extend_from_slice(&l.shares.to_le_bytes());
        n += 1;
    }
    n
}

// ---------------------------------------------------------------------------------
// Decoding

/// The `N` bytes at `at`; zeros where `b` is shorter (the callers check lengths first).
#[inline]
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0; N];
    if let Some(s) = b.get(at..at + N) {
        a.copy_from_slice(s);
    }
    a
}

#[inline]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes_at(b, at))
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes_at(b, at))
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes_at(b, at))
}

fn exact(b: &[u8], need: usize) -> Result<(), UpdateError> {
    let have = b.len();
    if have < need {
        Err(UpdateError::Truncated { need, have })
    } else if have > need {
        Err(UpdateError::TrailingBytes { need, have })
    } else {
        Ok(())
    }
}

fn zero(b: &[u8], range: std::ops::Range<usize>) -> Result<(), UpdateError> {
    for i in range {
        if b.get(i).copied().unwrap_or(0) != 0 {
            return Err(UpdateError::Reserved(i));
        }
    }
    Ok(())
}

/// Decodes one update payload (the whole slice).
pub fn decode(b: &[u8]) -> Result<Update<'_>, UpdateError> {
    if b.len() < HEADER_LEN {
        return Err(UpdateError::Truncated {
            need: HEADER_LEN,
            have: b.len(),
        });
    }
    let kind = Kind::from_u8(b[0]).ok_or(UpdateError::UnknownKind(b[0]))?;
    if b[1] != VERSION {
        return Err(UpdateError::UnsupportedVersion(b[1]));
    }
    zero(b, 4..8)?;
    let mut symbol = [0; 8];
    symbol.copy_from_slice(&b[8..16]);
    let h = Header {
        locate: u16_at(b, 2),
        symbol,
        seq: u64_at(b, 16),
        exchange_ns: u64_at(b, 24),
        receive_ns: u64_at(b, 32),
    };
    let body = HEADER_LEN;
    match kind {
        Kind::Trade => {
            exact(b, TRADE_LEN)?;
            let side = Side::from_byte(b[body + 8]).ok_or(UpdateError::InvalidSide(b[body + 8]))?;
            zero(b, body + 11..body + 16)?;
            Ok(Update::Trade(
                h,
                Trade {
                    price: u32_at(b, body),
                    shares: u32_at(b, body + 4),
                    side,
                    source: b[body + 9],
                    flags: b[body + 10],
                    match_number: u64_at(b, body + 16),
                },
            ))
        }
        Kind::Quote => {
            exact(b, QUOTE_LEN)?;
            Ok(Update::Quote(
                h,
                Quote {
                    bid_price: u32_at(b, body),
                    bid_orders: u32_at(b, body + 4),
                    bid_shares: u64_at(b, body + 8),
                    ask_price: u32_at(b, body + 16),
                    ask_orders: u32_at(b, body + 20),
                    ask_shares: u64_at(b, body + 24),
                },
            ))
        }
        Kind::Depth => {
            if b.len() < DEPTH_FIXED_LEN {
                return Err(UpdateError::Truncated {
                    need: DEPTH_FIXED_LEN,
                    have: b.len(),
                });
            }
            let (bid_count, ask_count) = (usize::from(b[body]), usize::from(b[body + 1]));
            for n in [bid_count, ask_count] {
                if n > MAX_DEPTH_LEVELS {
                    return Err(UpdateError::TooManyLevels(n));
                }
            }
            zero(b, body + 2..body + 8)?;
            exact(b, DEPTH_FIXED_LEN + (bid_count + ask_count) * LEVEL_LEN)?;
            Ok(Update::Depth(
                h,
                Depth {
                    bid_count,
                    ask_count,
                    levels: &b[DEPTH_FIXED_LEN..],
                },
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            locate: 7,
            symbol: *b"AAPL    ",
            seq: 42,
            exchange_ns: 34_200_000_000_123,
            receive_ns: 99,
        }
    }

    #[test]
    fn trade_layout_is_as_documented() {
        let mut out = vec![0xEE]; // encoders append
        let t = Trade {
            price: 1_234_500,
            shares: 100,
            side: Side::Sell,
            source: b'E',
            flags: 0,
            match_number: 0x0102_0304_0506_0708,
        };
        encode_trade(&mut out, &header(), &t);
        let p = &out[1..];
        assert_eq!(p.len(), TRADE_LEN);
        assert_eq!(&p[..4], &[1, 1, 7, 0]);
        assert_eq!(&p[8..16], b"AAPL    ");
        assert_eq!(&p[16..24], &42u64.to_le_bytes());
        assert_eq!(&p[40..44], &1_234_500u32.to_le_bytes());
        assert_eq!(&p[48..52], &[b'S', b'E', 0, 0]);
        assert_eq!(&p[56..64], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(decode(p), Ok(Update::Trade(header(), t)));
    }

    #[test]
    fn depth_round_trip_and_empty_sides() {
        let bids = [
            Level {
                price: 100,
                orders: 2,
                shares: 300,
            },
            Level {
                price: 99,
                orders: 1,
                shares: 10,
            },
        ];
        let mut out = Vec::new();
        encode_depth(
            &mut out,
            &header(),
            bids.iter().copied(),
            std::iter::empty(),
        );
        assert_eq!(out.len(), DEPTH_FIXED_LEN + 2 * LEVEL_LEN);
        let Ok(Update::Depth(h, d)) = decode(&out) else {
            panic!("depth does not decode");
        };
        assert_eq!(h, header());
        assert_eq!(d.count(Side::Buy), 2);
        assert_eq!(d.levels(Side::Buy).collect::<Vec<_>>(), bids);
        assert_eq!(d.levels(Side::Sell).count(), 0);
    }

    #[test]
    fn bad_payloads_are_errors() {
        let mut q = Vec::new();
        encode_quote(&mut q, &header(), &Quote::default());
        assert_eq!(q.len(), QUOTE_LEN);
        assert!(decode(&q).is_ok());
        assert_eq!(
            decode(&q[..QUOTE_LEN - 1]),
            Err(UpdateError::Truncated {
                need: QUOTE_LEN,
                have: QUOTE_LEN - 1
            })
        );
        let mut long = q.clone();
        long.push(0);
        assert!(matches!(
            decode(&long),
            Err(UpdateError::TrailingBytes { .. })
        ));
        let mut bad = q.clone();
        bad[0] = 9;
        assert_eq!(decode(&bad), Err(UpdateError::UnknownKind(9)));
        bad = q.clone();
        bad[1] = 2;
        assert_eq!(decode(&bad), Err(UpdateError::UnsupportedVersion(2)));
        bad = q.clone();
        bad[5] = 1;
        assert_eq!(decode(&bad), Err(UpdateError::Reserved(5)));
        let mut d = Vec::new();
        encode_depth(&mut d, &header(), std::iter::empty(), std::iter::empty());
        d[HEADER_LEN] = 200;
        assert_eq!(decode(&d), Err(UpdateError::TooManyLevels(200)));
        d[HEADER_LEN] = 1;
        assert!(matches!(decode(&d), Err(UpdateError::Truncated { .. })));
        assert!(matches!(decode(&[]), Err(UpdateError::Truncated { .. })));
    }

    fn arb_header() -> impl Strategy<Value = Header> {
        (
            any::<u16>(),
            any::<[u8; 8]>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(locate, symbol, seq, exchange_ns, receive_ns)| Header {
                locate,
                symbol,
                seq,
                exchange_ns,
                receive_ns,
            })
    }

    fn arb_side() -> impl Strategy<Value = Side> {
        prop_oneof![Just(Side::Buy), Just(Side::Sell)]
    }

    fn arb_level() -> impl Strategy<Value = Level> {
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(price, orders, shares)| Level {
            price,
            orders,
            shares,
        })
    }

    proptest! {
        #[test]
        fn trade_round_trips(h in arb_header(), price: u32, shares: u32, side in arb_side(),
                             source: u8, flags: u8, match_number: u64) {
            let t = Trade { price, shares, side, source, flags, match_number };
            let mut out = Vec::new();
            encode_trade(&mut out, &h, &t);
            prop_assert_eq!(decode(&out), Ok(Update::Trade(h, t)));
        }

        #[test]
        fn quote_round_trips(h in arb_header(), bp: u32, ap: u32, bs: u64, as_: u64,
                             bo: u32, ao: u32) {
            let q = Quote { bid_price: bp, ask_price: ap, bid_shares: bs, ask_shares: as_,
                            bid_orders: bo, ask_orders: ao };
            let mut out = Vec::new();
            encode_quote(&mut out, &h, &q);
            prop_assert_eq!(decode(&out), Ok(Update::Quote(h, q)));
        }

        #[test]
        fn depth_round_trips(h in arb_header(),
                             bids in proptest::collection::vec(arb_level(), 0..70),
                             asks in proptest::collection::vec(arb_level(), 0..70)) {
            let mut out = Vec::new();
            encode_depth(&mut out, &h, bids.iter().copied(), asks.iter().copied());
            let Ok(Update::Depth(h2, d)) = decode(&out) else {
                return Err(TestCaseError::fail("depth does not decode"));
            };
            prop_assert_eq!(h2, h);
            let want_b: Vec<Level> = bids.iter().copied().take(MAX_DEPTH_LEVELS).collect();
            let want_a: Vec<Level> = asks.iter().copied().take(MAX_DEPTH_LEVELS).collect();
            prop_assert_eq!(d.levels(Side::Buy).collect::<Vec<_>>(), want_b);
            prop_assert_eq!(d.levels(Side::Sell).collect::<Vec<_>>(), want_a);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(u) = decode(&bytes) {
                // Whatever decodes re-encodes to the same bytes.
                let mut out = Vec::new();
                match u {
                    Update::Trade(h, t) => encode_trade(&mut out, &h, &t),
                    Update::Quote(h, q) => encode_quote(&mut out, &h, &q),
                    Update::Depth(h, d) => encode_depth(&mut out, &h, d.levels(Side::Buy), d.levels(Side::Sell)),
                }
                prop_assert_eq!(out, bytes);
            }
        }
    }
}
