//! TotalView-ITCH 5.0 messages: value types, [`decode`] and [`Message::encode`].
//!
//! # Design
//!
//! Every message type is a small `Copy` struct holding its fields by value (symbols as
//! [`Symbol`], i.e. `[u8; 8]`; prices as [`Price`]); [`Message`] is the enum of all of
//! them. Decoding is a single bounds check of the buffer against the fixed length of the
//! message type (every ITCH 5.0 message has a fixed length, see [`message_len`]) followed
//! by big-endian reads at fixed offsets: no allocation, no copy beyond the field values,
//! no panic on any input. Encoding writes into a caller buffer ([`Message::encode`]) or
//! appends to a reusable `Vec` ([`Message::encode_to_vec`]).
//!
//! The struct definitions, their lengths, the decoder and the encoder are generated from a
//! single field table (the `messages!` macro below), and each type's length is checked at
//! compile time against the length printed in the specification.
//!
//! One-byte code fields (event codes, market categories, indicators) are kept as raw
//! ASCII bytes (`u8`), so that a value added to the specification later still decodes;
//! their documented values are listed on each field. The one exception is the order side,
//! which the order book needs as a closed type: [`Side`] (`B` / `S`), and any other byte
//! is rejected with [`DecodeError::InvalidField`].

use std::fmt;

/// Length of the common header: message type (1), stock locate (2), tracking number (2),
/// timestamp (6).
pub const HEADER_LEN: usize = 11;

/// Largest timestamp an ITCH message can carry (48 bits of nanoseconds).
pub const MAX_TIMESTAMP: u64 = (1 << 48) - 1;

/// Longest ITCH 5.0 message (NOII, 50 bytes).
pub const MAX_MESSAGE_LEN: usize = 50;

/// Why bytes did not decode as an ITCH message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer was empty: not even a message type byte.
    #[error("empty ITCH message")]
    Empty,
    /// The message type byte is not one of the ITCH 5.0 types.
    #[error("unknown ITCH message type 0x{0:02x}")]
    UnknownType(u8),
    /// The buffer is shorter than the fixed length of its message type.
    #[error("truncated ITCH message '{}': need {needed} bytes, have {available}", char::from(*.msg_type))]
    Truncated {
        /// Message type byte.
        msg_type: u8,
        /// Length of that message type.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The buffer is longer than the fixed length of its message type (a message block
    /// must hold exactly one message).
    #[error("ITCH message '{}' has length {actual}, expected {expected}", char::from(*.msg_type))]
    WrongLength {
        /// Message type byte.
        msg_type: u8,
        /// Length of that message type.
        expected: usize,
        /// Length of the buffer.
        actual: usize,
    },
    /// A field with a closed set of values holds something else.
    #[error("ITCH message '{}': invalid {field} 0x{value:02x}", char::from(*.msg_type))]
    InvalidField {
        /// Message type byte.
        msg_type: u8,
        /// Field name.
        field: &'static str,
        /// The byte found.
        value: u8,
    },
}

/// Why a message could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer is shorter than the message.
    #[error("output buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// Encoded length of the message.
        needed: usize,
        /// Length of the output buffer.
        available: usize,
    },
    /// The timestamp does not fit the 6-byte field (see [`MAX_TIMESTAMP`]).
    #[error("timestamp {0} ns does not fit in 48 bits")]
    TimestampOutOfRange(u64),
}

/// A price with 4 implied decimal places (the specification's `Price(4)`): `Price(1_234_500)`
/// is 123.45.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Price(pub u32);

impl Price {
    /// Raw units per whole currency unit (10^4).
    pub const SCALE: u32 = 10_000;
    /// The value the specification uses for "no price" / market orders in some fields
    /// (214748.3647).
    pub const MAX: Price = Price(0x7FFF_FFFF);

    /// The price from raw units of 1/10 000.
    pub const fn from_raw(raw: u32) -> Self {
        Price(raw)
    }

    /// Raw units of 1/10 000.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Whole units and 1/10 000 fractions (`frac` < 10 000), or `None` on overflow.
    pub const fn from_parts(whole: u32, frac: u32) -> Option<Self> {
        if frac >= Self::SCALE {
            return None;
        }
        match whole.checked_mul(Self::SCALE) {
            Some(w) => match w.checked_add(frac) {
                Some(v) => Some(Price(v)),
                None => None,
            },
            None => None,
        }
    }

    /// The price as a floating-point number (for display and statistics, not arithmetic).
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / f64::from(Self::SCALE)
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:04}", self.0 / Self::SCALE, self.0 % Self::SCALE)
    }
}

/// A price with 8 implied decimal places (the specification's `Price(8)`, used by the MWCB
/// decline levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Price8(pub u64);

impl Price8 {
    /// Raw units per whole currency unit (10^8).
    pub const SCALE: u64 = 100_000_000;

    /// The price as a floating-point number.
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / Self::SCALE as f64
    }
}

impl fmt::Display for Price8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:08}", self.0 / Self::SCALE, self.0 % Self::SCALE)
    }
}

/// Why a string is not a valid alpha field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AlphaError {
    /// Longer than the field.
    #[error("alpha value of {len} bytes does not fit a {max}-byte field")]
    TooLong {
        /// Length of the value.
        len: usize,
        /// Size of the field.
        max: usize,
    },
    /// Contains a byte outside printable ASCII.
    #[error("alpha value contains non-printable or non-ASCII byte 0x{0:02x}")]
    NotPrintable(u8),
}

/// Pads `s` with spaces on the right into an `N`-byte alpha field.
pub fn alpha<const N: usize>(s: &str) -> Result<[u8; N], AlphaError> {
    let b = s.as_bytes();
    if b.len() > N {
        return Err(AlphaError::TooLong {
            len: b.len(),
            max: N,
        });
    }
    if let Some(&c) = b.iter().find(|c| !(0x20..0x7f).contains(*c)) {
        return Err(AlphaError::NotPrintable(c));
    }
    let mut out = [b' '; N];
    out[..b.len()].copy_from_slice(b);
    Ok(out)
}

/// An alpha field without its right space padding.
pub fn alpha_trim(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
    &b[..end]
}

/// An alpha field as text without its padding; `None` if it is not UTF-8.
pub fn alpha_str(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(alpha_trim(b)).ok()
}

/// `FromStr` (through `new`), `Display` (the text without its padding, a byte other
/// than printable ASCII as `\xNN`) and `Debug` (`Name("text")`) for a space-padded
/// alpha newtype over a byte array: [`Symbol`] and [`Session`](crate::Session).
macro_rules! alpha_text_impls {
    ($name:ident) => {
        impl std::str::FromStr for $name {
            type Err = $crate::message::AlphaError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::new(s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                for &c in $crate::message::alpha_trim(&self.0) {
                    if (0x20..0x7f).contains(&c) {
                        write!(f, "{}", char::from(c))?;
                    } else {
                        write!(f, "\\x{c:02x}")?;
                    }
                }
                Ok(())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "(\"{}\")"), self)
            }
        }
    };
}
pub(crate) use alpha_text_impls;

/// An 8-byte stock symbol, space-padded on the right as on the wire.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Symbol(pub [u8; 8]);

impl Symbol {
    /// The symbol `s` padded with spaces (at most 8 printable ASCII bytes).
    pub fn new(s: &str) -> Result<Self, AlphaError> {
        alpha::<8>(s).map(Symbol)
    }

    /// The wire bytes, padding included.
    pub const fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }

    /// The symbol without padding.
    pub fn trimmed(&self) -> &[u8] {
        alpha_trim(&self.0)
    }

    /// The symbol without padding, as text (`None` if the bytes are not UTF-8).
    pub fn as_str(&self) -> Option<&str> {
        alpha_str(&self.0)
    }
}

alpha_text_impls!(Symbol);

/// A 4-byte market participant identifier (MPID), space-padded like all alpha fields.
pub type Mpid = [u8; 4];

/// Side of an order: `B` (buy) or `S` (sell) on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Buy order (`B`).
    Buy,
    /// Sell order (`S`).
    Sell,
}

impl Side {
    /// The wire byte.
    pub const fn as_byte(self) -> u8 {
        match self {
            Side::Buy => b'B',
            Side::Sell => b'S',
        }
    }

    /// The side for a wire byte.
    pub const fn from_byte(b: u8) -> Option<Side> {
        match b {
            b'B' => Some(Side::Buy),
            b'S' => Some(Side::Sell),
            _ => None,
        }
    }
}

/// The common header of every message (the type byte is implied by the [`Message`]
/// variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Locate code identifying the security (0 for messages about no security).
    pub stock_locate: u16,
    /// NASDAQ internal tracking number.
    pub tracking_number: u16,
    /// Nanoseconds since midnight (48 bits on the wire, at most [`MAX_TIMESTAMP`]).
    pub timestamp: u64,
}

/// Cursor over a buffer whose length was checked against the message length.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    msg_type: u8,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.pos + N;
        match self.buf.get(self.pos..end) {
            Some(s) => {
                self.pos = end;
                let mut a = [0u8; N];
                a.copy_from_slice(s);
                Ok(a)
            }
            None => Err(DecodeError::Truncated {
                msg_type: self.msg_type,
                needed: end,
                available: self.buf.len(),
            }),
        }
    }
}

/// Cursor over an output buffer at least as long as the message.
struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        // The caller checked that the buffer holds the whole message, and the field
        // sizes add up to the message length (checked at compile time).
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
}

/// A fixed-size field type.
trait Field: Sized {
    const SIZE: usize;
    fn get(r: &mut Reader<'_>, name: &'static str) -> Result<Self, DecodeError>;
    fn put(&self, w: &mut Writer<'_>);
}

impl Field for u8 {
    const SIZE: usize = 1;
    #[inline(always)]
    fn get(r: &mut Reader<'_>, _: &'static str) -> Result<Self, DecodeError> {
        r.take::<1>().map(|[b]| b)
    }
    #[inline(always)]
    fn put(&self, w: &mut Writer<'_>) {
        w.put(&[*self]);
    }
}

macro_rules! be_field {
    ($t:ty, $n:literal) => {
        impl Field for $t {
            const SIZE: usize = $n;
            #[inline(always)]
            fn get(r: &mut Reader<'_>, _: &'static str) -> Result<Self, DecodeError> {
                r.take::<$n>().map(<$t>::from_be_bytes)
            }
            #[inline(always)]
            fn put(&self, w: &mut Writer<'_>) {
                w.put(&self.to_be_bytes());
            }
        }
    };
}
be_field!(u16, 2);
be_field!(u32, 4);
be_field!(u64, 8);

impl<const N: usize> Field for [u8; N] {
    const SIZE: usize = N;
    #[inline(always)]
    fn get(r: &mut Reader<'_>, _: &'static str) -> Result<Self, DecodeError> {
        r.take::<N>()
    }
    #[inline(always)]
    fn put(&self, w: &mut Writer<'_>) {
        w.put(self);
    }
}

impl Field for Price {
    const SIZE: usize = 4;
    #[inline(always)]
    fn get(r: &mut Reader<'_>, n: &'static str) -> Result<Self, DecodeError> {
        u32::get(r, n).map(Price)
    }
    #[inline(always)]
    fn put(&self, w: &mut Writer<'_>) {
        self.0.put(w);
    }
}

impl Field for Price8 {
    const SIZE: usize = 8;
    #[inline(always)]
    fn get(r: &mut Reader<'_>, n: &'static str) -> Result<Self, DecodeError> {
        u64::get(r, n).map(Price8)
    }
    #[inline(always)]
    fn put(&self, w: &mut Writer<'_>) {
        self.0.put(w);
    }
}

impl Field for Symbol {
    const SIZE: usize = 8;
    #[inline(always)]
    fn get(r: &mut Reader<'_>, _: &'static str) -> Result<Self, DecodeError> {
        r.take::<8>().map(Symbol)
    }
    #[inline(always)]
    fn put(&self, w: &mut Writer<'_>) {
        w.put(&self.0);
    }
}

impl Field for Side {
    const SIZE: usize = 1;
    #[inline(always)]
    fn get(r: &mut Reader<'_>, name: &'static str) -> Result<Self, DecodeError> {
        let [b] = r.take::<1>()?;
        Side::from_byte(b).ok_or(DecodeError::InvalidField {
            msg_type: r.msg_type,
            field: name,
            value: b,
        })
    }
    #[inline(always)]
    fn put(&self, w: &mut Writer<'_>) {
        w.put(&[self.as_byte()]);
    }
}

fn read_header(r: &mut Reader<'_>) -> Result<Header, DecodeError> {
    let _type = r.take::<1>()?;
    let stock_locate = u16::get(r, "stock_locate")?;
    let tracking_number = u16::get(r, "tracking_number")?;
    let ts: [u8; 6] = r.take()?;
    let timestamp = u64::from_be_bytes([0, 0, ts[0], ts[1], ts[2], ts[3], ts[4], ts[5]]);
    Ok(Header {
        stock_locate,
        tracking_number,
        timestamp,
    })
}

fn write_header(w: &mut Writer<'_>, msg_type: u8, h: &Header) {
    w.put(&[msg_type]);
    h.stock_locate.put(w);
    h.tracking_number.put(w);
    w.put(&h.timestamp.to_be_bytes()[2..]);
}

macro_rules! messages {
    ($(
        $(#[$m:meta])*
        $name:ident = $ty:literal, $len_const:ident = $len:literal {
            $( $(#[$fm:meta])* $field:ident : $fty:ty ),* $(,)?
        }
    )*) => {
        $(
            $(#[$m])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
            pub struct $name {
                /// Common header.
                pub header: Header,
                $( $(#[$fm])* pub $field: $fty, )*
            }

            #[doc = concat!("Encoded length of [`", stringify!($name), "`] (type `",
                stringify!($ty), "`), type byte included.")]
            pub const $len_const: usize = $len;

            // The field table adds up to the length printed in the specification.
            const _: () = assert!(HEADER_LEN $( + <$fty as Field>::SIZE )* == $len);

            impl $name {
                /// Message type byte.
                pub const TYPE: u8 = $ty;
                /// Encoded length, type byte included.
                pub const LEN: usize = $len;

                #[inline(always)]
                fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                    let header = read_header(r)?;
                    $( let $field = <$fty as Field>::get(r, stringify!($field))?; )*
                    Ok($name { header, $( $field, )* })
                }

                #[inline(always)]
                fn encode_into(&self, w: &mut Writer<'_>) {
                    write_header(w, $ty, &self.header);
                    $( Field::put(&self.$field, w); )*
                }
            }

            impl From<$name> for Message {
                fn from(m: $name) -> Message {
                    Message::$name(m)
                }
            }
        )*

        /// Any ITCH 5.0 message.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Message {
            $( $(#[$m])* $name($name), )*
        }

        /// Every ITCH 5.0 message type with its encoded length and name, in specification
        /// order.
        pub const MESSAGE_TYPES: &[(u8, usize, &str)] = &[
            $( ($ty, $len, stringify!($name)), )*
        ];

        /// The fixed encoded length of message type `msg_type`, or `None` if the type is
        /// unknown.
        #[inline]
        pub const fn message_len(msg_type: u8) -> Option<usize> {
            match msg_type {
                $( $ty => Some($len), )*
                _ => None,
            }
        }

        #[inline(always)]
        fn decode_typed(msg_type: u8, r: &mut Reader<'_>) -> Result<Message, DecodeError> {
            match msg_type {
                $( $ty => $name::decode_from(r).map(Message::$name), )*
                other => Err(DecodeError::UnknownType(other)),
            }
        }

        impl StockDirectory {
    /// A live NASDAQ Global Select common stock in normal status: round lot 100, odd
    /// lots allowed, sub-type `Z `, LULD tier 1, not an ETP, not an IPO. The directory
    /// entry tests and examples build (override fields with `..`).
    pub fn common_stock(header: Header, stock: Symbol) -> StockDirectory {
        StockDirectory {
            header,
            stock,
            market_category: b'Q',
            financial_status_indicator: b'N',
            round_lot_size: 100,
            round_lots_only: b'N',
            issue_classification: b'C',
            issue_sub_type: *b"Z ",
            authenticity: b'P',
            short_sale_threshold_indicator: b'N',
            ipo_flag: b'N',
            luld_reference_price_tier: b'1',
            etp_flag: b'N',
            etp_leverage_factor: 0,
            inverse_indicator: b'N',
        }
    }
}

impl Message {
            /// The message type byte.
            pub const fn msg_type(&self) -> u8 {
                match self {
                    $( Message::$name(_) => $ty, )*
                }
            }

            /// The encoded length, type byte included.
            pub const fn encoded_len(&self) -> usize {
                match self {
                    $( Message::$name(_) => $len, )*
                }
            }

            /// The common header.
            pub const fn header(&self) -> &Header {
                match self {
                    $( Message::$name(m) => &m.header, )*
                }
            }

            /// The common header, mutably (e.g. to restamp or relocate a message).
            pub fn header_mut(&mut self) -> &mut Header {
                match self {
                    $( Message::$name(m) => &mut m.header, )*
                }
            }

            fn encode_unchecked(&self, w: &mut Writer<'_>) {
                match self {
                    $( Message::$name(m) => m.encode_into(w), )*
                }
            }
        }
    };
}

messages! {
    /// System Event (`S`): start/end of messages, system hours, market hours.
    SystemEvent = b'S', SYSTEM_EVENT_LEN = 12 {
        /// `O` start of messages, `S` start of system hours, `Q` start of market hours,
        /// `M` end of market hours, `E` end of system hours, `C` end of messages.
        event_code: u8,
    }

    /// Stock Directory (`R`): one per security at the start of the day.
    StockDirectory = b'R', STOCK_DIRECTORY_LEN = 39 {
        /// Security symbol.
        stock: Symbol,
        /// Listing market: `Q` NASDAQ Global Select, `G` Global Market, `S` Capital Market,
        /// `N` NYSE, `A` NYSE American, `P` NYSE Arca, `Z` BATS, `V` IEX, space n/a.
        market_category: u8,
        /// Financial status (`D`, `E`, `Q`, `S`, `G`, `H`, `J`, `K`, `C`, `N`, space).
        financial_status_indicator: u8,
        /// Shares in a round lot.
        round_lot_size: u32,
        /// `Y` only round lots accepted, `N` odd/mixed lots allowed.
        round_lots_only: u8,
        /// Issue classification code (e.g. `C` common stock, `E` ETF...).
        issue_classification: u8,
        /// Issue sub-type (2-byte alpha code).
        issue_sub_type: [u8; 2],
        /// `P` live/production, `T` test.
        authenticity: u8,
        /// `Y` / `N` Reg SHO short-sale threshold, space n/a.
        short_sale_threshold_indicator: u8,
        /// `Y` new IPO, `N` not, space n/a.
        ipo_flag: u8,
        /// `1` tier 1, `2` tier 2, space n/a.
        luld_reference_price_tier: u8,
        /// `Y` exchange-traded product, `N` not, space n/a.
        etp_flag: u8,
        /// ETP leverage factor (integer).
        etp_leverage_factor: u32,
        /// `Y` inverse ETP, `N` not.
        inverse_indicator: u8,
    }

    /// Stock Trading Action (`H`): halt, pause, quotation and trading states.
    StockTradingAction = b'H', STOCK_TRADING_ACTION_LEN = 25 {
        /// Security symbol.
        stock: Symbol,
        /// `H` halted, `P` paused, `Q` quotation only, `T` trading.
        trading_state: u8,
        /// Reserved.
        reserved: u8,
        /// Trading action reason code (4-byte alpha).
        reason: [u8; 4],
    }

    /// Reg SHO Short Sale Price Test Restricted Indicator (`Y`).
    RegShoRestriction = b'Y', REG_SHO_RESTRICTION_LEN = 20 {
        /// Security symbol.
        stock: Symbol,
        /// `0` no price test, `1` in effect (intraday drop), `2` remains in effect.
        reg_sho_action: u8,
    }

    /// Market Participant Position (`L`).
    MarketParticipantPosition = b'L', MARKET_PARTICIPANT_POSITION_LEN = 26 {
        /// Market participant identifier.
        mpid: Mpid,
        /// Security symbol.
        stock: Symbol,
        /// `Y` primary market maker, `N` not.
        primary_market_maker: u8,
        /// `N` normal, `P` passive, `S` syndicate, `R` pre-syndicate, `L` penalty.
        market_maker_mode: u8,
        /// `A` active, `E` excused/withdrawn, `W` withdrawn, `S` suspended, `D` deleted.
        market_participant_state: u8,
    }

    /// Market-Wide Circuit Breaker Decline Level (`V`).
    MwcbDeclineLevel = b'V', MWCB_DECLINE_LEVEL_LEN = 35 {
        /// Level 1 (Price(8)).
        level1: Price8,
        /// Level 2 (Price(8)).
        level2: Price8,
        /// Level 3 (Price(8)).
        level3: Price8,
    }

    /// Market-Wide Circuit Breaker Status (`W`).
    MwcbStatus = b'W', MWCB_STATUS_LEN = 12 {
        /// Level breached: `1`, `2` or `3`.
        breached_level: u8,
    }

    /// IPO Quoting Period Update (`K`).
    IpoQuotingPeriodUpdate = b'K', IPO_QUOTING_PERIOD_UPDATE_LEN = 28 {
        /// Security symbol.
        stock: Symbol,
        /// Quotation release time, seconds since midnight.
        ipo_quotation_release_time: u32,
        /// `A` anticipated release time, `C` canceled/postponed.
        ipo_quotation_release_qualifier: u8,
        /// IPO price.
        ipo_price: Price,
    }

    /// Limit Up – Limit Down Auction Collar (`J`).
    LuldAuctionCollar = b'J', LULD_AUCTION_COLLAR_LEN = 35 {
        /// Security symbol.
        stock: Symbol,
        /// Reference price used to set the auction collars.
        auction_collar_reference_price: Price,
        /// Upper auction collar price.
        upper_auction_collar_price: Price,
        /// Lower auction collar price.
        lower_auction_collar_price: Price,
        /// Number of extensions to the reopening auction.
        auction_collar_extension: u32,
    }

    /// Operational Halt (`h`).
    OperationalHalt = b'h', OPERATIONAL_HALT_LEN = 21 {
        /// Security symbol.
        stock: Symbol,
        /// `Q` NASDAQ, `B` BX, `X` PSX.
        market_code: u8,
        /// `H` operationally halted, `T` resumed.
        operational_halt_action: u8,
    }

    /// Add Order – No MPID Attribution (`A`).
    AddOrder = b'A', ADD_ORDER_LEN = 36 {
        /// Order reference number, unique for the day.
        order_ref: u64,
        /// Buy or sell.
        side: Side,
        /// Number of shares.
        shares: u32,
        /// Security symbol.
        stock: Symbol,
        /// Limit price.
        price: Price,
    }

    /// Add Order with MPID Attribution (`F`).
    AddOrderMpid = b'F', ADD_ORDER_MPID_LEN = 40 {
        /// Order reference number, unique for the day.
        order_ref: u64,
        /// Buy or sell.
        side: Side,
        /// Number of shares.
        shares: u32,
        /// Security symbol.
        stock: Symbol,
        /// Limit price.
        price: Price,
        /// Market participant identifier of the order.
        attribution: Mpid,
    }

    /// Order Executed (`E`): at the order's price.
    OrderExecuted = b'E', ORDER_EXECUTED_LEN = 31 {
        /// Order reference number.
        order_ref: u64,
        /// Shares executed.
        executed_shares: u32,
        /// Match number of the execution.
        match_number: u64,
    }

    /// Order Executed With Price (`C`): at a price other than the order's.
    OrderExecutedWithPrice = b'C', ORDER_EXECUTED_WITH_PRICE_LEN = 36 {
        /// Order reference number.
        order_ref: u64,
        /// Shares executed.
        executed_shares: u32,
        /// Match number of the execution.
        match_number: u64,
        /// `Y` printable (counts for volume), `N` non-printable.
        printable: u8,
        /// Execution price.
        execution_price: Price,
    }

    /// Order Cancel (`X`): partial cancellation.
    OrderCancel = b'X', ORDER_CANCEL_LEN = 23 {
        /// Order reference number.
        order_ref: u64,
        /// Shares removed from the order.
        cancelled_shares: u32,
    }

    /// Order Delete (`D`).
    OrderDelete = b'D', ORDER_DELETE_LEN = 19 {
        /// Order reference number.
        order_ref: u64,
    }

    /// Order Replace (`U`): cancel-replace with a new reference number.
    OrderReplace = b'U', ORDER_REPLACE_LEN = 35 {
        /// Reference number of the replaced order.
        original_order_ref: u64,
        /// Reference number of the new order.
        new_order_ref: u64,
        /// Shares of the new order.
        shares: u32,
        /// Price of the new order.
        price: Price,
    }

    /// Trade (`P`): execution of a non-displayed order.
    Trade = b'P', TRADE_LEN = 44 {
        /// Order reference number (0 since 2008 for non-displayed orders).
        order_ref: u64,
        /// Side of the non-displayed order.
        side: Side,
        /// Shares executed.
        shares: u32,
        /// Security symbol.
        stock: Symbol,
        /// Execution price.
        price: Price,
        /// Match number of the trade.
        match_number: u64,
    }

    /// Cross Trade (`Q`): the result of an opening, closing, IPO or halt cross.
    CrossTrade = b'Q', CROSS_TRADE_LEN = 40 {
        /// Shares matched in the cross.
        shares: u64,
        /// Security symbol.
        stock: Symbol,
        /// Cross price.
        cross_price: Price,
        /// Match number of the cross.
        match_number: u64,
        /// `O` opening, `C` closing, `H` halt/IPO, `I` intraday/post-close.
        cross_type: u8,
    }

    /// Broken Trade / Order Execution (`B`).
    BrokenTrade = b'B', BROKEN_TRADE_LEN = 19 {
        /// Match number of the broken execution.
        match_number: u64,
    }

    /// Net Order Imbalance Indicator (`I`).
    Noii = b'I', NOII_LEN = 50 {
        /// Shares paired at the current reference price.
        paired_shares: u64,
        /// Shares not paired at the current reference price.
        imbalance_shares: u64,
        /// `B` buy, `S` sell, `N` none, `O` insufficient orders, `P` paused.
        imbalance_direction: u8,
        /// Security symbol.
        stock: Symbol,
        /// Hypothetical clearing price of cross orders only.
        far_price: Price,
        /// Hypothetical clearing price of cross and continuous orders.
        near_price: Price,
        /// Price at which the NOII shares are calculated.
        current_reference_price: Price,
        /// `O` opening, `C` closing, `H` halt/IPO, `A` extended trading close.
        cross_type: u8,
        /// Deviation of the near price from the consolidated price (`L`, `1`..`9`, `A`..`C`,
        /// space).
        price_variation_indicator: u8,
    }

    /// Retail Price Improvement Indicator (`N`).
    Rpii = b'N', RPII_LEN = 20 {
        /// Security symbol.
        stock: Symbol,
        /// `B` buy side, `S` sell side, `A` both, `N` none.
        interest_flag: u8,
    }

    /// Direct Listing with Capital Raise Price Discovery (`O`).
    DlcrPriceDiscovery = b'O', DLCR_PRICE_DISCOVERY_LEN = 48 {
        /// Security symbol.
        stock: Symbol,
        /// `N` not eligible, `Y` eligible.
        open_eligibility_status: u8,
        /// Minimum allowable price (20% below the registration statement's lower bound).
        minimum_allowable_price: Price,
        /// Maximum allowable price (80% above the upper bound).
        maximum_allowable_price: Price,
        /// Current near execution price.
        near_execution_price: Price,
        /// Time at which the near execution price was set (ns since midnight).
        near_execution_time: u64,
        /// Lower price range collar (10% below the near execution price).
        lower_price_range_collar: Price,
        /// Upper price range collar (10% above the near execution price).
        upper_price_range_collar: Price,
    }
}

/// The order reference number of an order message (`A`, `F`, `E`, `C`, `X`, `D`, and
/// the original reference of `U`) without decoding the rest, or `None` for any other
/// type or a buffer too short to hold it. Every one of these types carries it right
/// after the common header, at bytes 11..19.
///
/// For looking orders up ahead of decoding (a feed handler warming its order map for a
/// whole packet); [`decode`] remains the validating path.
#[inline]
pub fn order_ref_of(buf: &[u8]) -> Option<u64> {
    match buf.first()? {
        b'A' | b'F' | b'E' | b'C' | b'X' | b'D' | b'U' => {
            let b: [u8; 8] = buf.get(11..19)?.try_into().ok()?;
            Some(u64::from_be_bytes(b))
        }
        _ => None,
    }
}

/// Decodes exactly one ITCH message occupying all of `buf` (as framed by a MoldUDP64
/// message block or a length-prefixed file).
///
/// Errors: [`DecodeError::Empty`], [`DecodeError::UnknownType`],
/// [`DecodeError::Truncated`] (shorter than the type's length),
/// [`DecodeError::WrongLength`] (longer), [`DecodeError::InvalidField`] (bad side).
#[inline]
pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
    let (msg, n) = decode_prefix(buf)?;
    if n != buf.len() {
        return Err(DecodeError::WrongLength {
            msg_type: msg.msg_type(),
            expected: n,
            actual: buf.len(),
        });
    }
    Ok(msg)
}

/// Decodes the ITCH message at the start of `buf`, ignoring any bytes after it, and returns
/// it with its length (for streams of concatenated messages).
#[inline]
pub fn decode_prefix(buf: &[u8]) -> Result<(Message, usize), DecodeError> {
    let Some(&msg_type) = buf.first() else {
        return Err(DecodeError::Empty);
    };
    let Some(len) = message_len(msg_type) else {
        return Err(DecodeError::UnknownType(msg_type));
    };
    let Some(body) = buf.get(..len) else {
        return Err(DecodeError::Truncated {
            msg_type,
            needed: len,
            available: buf.len(),
        });
    };
    let mut r = Reader {
        buf: body,
        pos: 0,
        msg_type,
    };
    decode_typed(msg_type, &mut r).map(|m| (m, len))
}

impl Message {
    /// Encodes the message at the start of `out` and returns its length.
    ///
    /// Errors: [`EncodeError::BufferTooSmall`], [`EncodeError::TimestampOutOfRange`].
    #[inline]
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let len = self.encoded_len();
        let ts = self.header().timestamp;
        if ts > MAX_TIMESTAMP {
            return Err(EncodeError::TimestampOutOfRange(ts));
        }
        let Some(dst) = out.get_mut(..len) else {
            return Err(EncodeError::BufferTooSmall {
                needed: len,
                available: out.len(),
            });
        };
        let mut w = Writer { buf: dst, pos: 0 };
        self.encode_unchecked(&mut w);
        debug_assert_eq!(w.pos, len);
        Ok(len)
    }

    /// Appends the encoded message to `out` and returns its length (no allocation once
    /// `out` has the capacity).
    ///
    /// Errors: [`EncodeError::TimestampOutOfRange`]; `out` is then unchanged.
    #[inline]
    pub fn encode_to_vec(&self, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = self.encode(&mut buf)?;
        out.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    /// The encoded bytes in a fixed array, with the length used.
    pub fn to_bytes(&self) -> Result<([u8; MAX_MESSAGE_LEN], usize), EncodeError> {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = self.encode(&mut buf)?;
        Ok((buf, n))
    }

    /// The message's stock locate code.
    pub const fn stock_locate(&self) -> u16 {
        self.header().stock_locate
    }

    /// The message's timestamp, nanoseconds since midnight.
    pub const fn timestamp(&self) -> u64 {
        self.header().timestamp
    }
}
