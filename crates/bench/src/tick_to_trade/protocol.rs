//! The tick-to-trade protocol (FIX.4.4), byte for byte. Pure: no clock, no IO.
//!
//! The venue simulator initiates two sessions to the algo (the acceptor): market data
//! `VENUE_MD → ALGO_MD` and orders `VENUE_OE → ALGO_OE`. Each market-data message is
//!
//! ```text
//! 35=X|...header...|268=1|279=0|269=0 or 1|55=SYM|270=PRICE|271=SIZE|278=CORRID|
//! ```
//!
//! and the algo answers each with, on the order session,
//!
//! ```text
//! 35=D|...header...|11=CORRID|38=SIZE|40=2|44=PRICE|54=1 (bid) or 2 (offer)|55=SYM|59=0|60=<now>|
//! ```
//!
//! (the QuickFIX reference algo in `tools/quickfix/qf_peer.cpp` speaks exactly this).
//! The correlation id is the message's index in the run, so the simulator finds the
//! intended send time from it without remembering anything per message.
//!
//! Also here: the raw responder's pieces ([`RawOrder`], [`field`], [`msg_type`]): it
//! frames with the codec and patches a pre-encoded order instead of running a session.

use tickwire_fix::codec::{self, Encoder, SOH};

/// BeginString of both sessions.
pub const BEGIN_STRING: &str = "FIX.4.4";
/// The venue's CompID on the market-data session.
pub const VENUE_MD: &str = "VENUE_MD";
/// The algo's CompID on the market-data session.
pub const ALGO_MD: &str = "ALGO_MD";
/// The venue's CompID on the order session.
pub const VENUE_OE: &str = "VENUE_OE";
/// The algo's CompID on the order session.
pub const ALGO_OE: &str = "ALGO_OE";

/// Symbols the simulator cycles through.
const SYMBOLS: [&[u8]; 8] = [
    b"AAPL", b"MSFT", b"IBM", b"ABC", b"XYZ", b"NVDA", b"AMZN", b"TSLA",
];

/// Writes the body of market-data message `index` (correlation id `index`): one new
/// entry, bid on even and offer on odd indexes, a symbol and price that vary.
#[inline]
pub fn write_x_body(enc: &mut Encoder, index: u64) {
    let mut px = [0u8; 16];
    let px_len = price(&mut px, 10_000 + index % 997);
    enc.field(268, b"1");
    enc.field(279, b"0");
    enc.field(269, if index % 2 == 0 { b"0" } else { b"1" });
    enc.field(55, SYMBOLS[(index % SYMBOLS.len() as u64) as usize]);
    enc.field(270, &px[..px_len]);
    enc.field_u64(271, 100 + index % 900);
    enc.field_u64(278, index);
}

/// Formats `cents` as a price with two decimals (`10025` → `100.25`) into `out`;
/// returns the length.
fn price(out: &mut [u8; 16], cents: u64) -> usize {
    let mut b = itoa_u64(cents / 100);
    let int = b.format();
    let n = int.len();
    out[..n].copy_from_slice(int);
    out[n] = b'.';
    out[n + 1] = b'0' + (cents / 10 % 10) as u8;
    out[n + 2] = b'0' + (cents % 10) as u8;
    n + 3
}

/// A tiny integer formatter (the bench crate does not depend on `itoa`).
struct Digits {
    buf: [u8; 20],
    start: usize,
}

fn itoa_u64(mut v: u64) -> Digits {
    let mut d = Digits {
        buf: [0; 20],
        start: 20,
    };
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return d;
        }
    }
}

impl Digits {
    fn format(&mut self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// The value of the first `tag` field after the first three (8, 9, 35) of a framed
/// message, found by a byte scan for `<SOH>tag=` (no full parse). None if absent.
#[inline]
pub fn field<'a>(raw: &'a [u8], tag: &[u8]) -> Option<&'a [u8]> {
    let mut i = 0;
    while i < raw.len() {
        // Position of the next SOH.
        let soh = i + raw[i..].iter().position(|&b| b == SOH)?;
        let start = soh + 1;
        let rest = raw.get(start..)?;
        if rest.len() > tag.len() && rest.starts_with(tag) && rest[tag.len()] == b'=' {
            let v = start + tag.len() + 1;
            let end = v + raw[v..].iter().position(|&b| b == SOH)?;
            return Some(&raw[v..end]);
        }
        i = start;
    }
    None
}

/// MsgType (35) of a framed message (the third field), or empty.
#[inline]
pub fn msg_type(raw: &[u8]) -> &[u8] {
    field(raw, b"35").unwrap_or(&[])
}

/// The correlation id of an order: ClOrdID (11) as a number.
#[inline]
pub fn order_corr_id(raw: &[u8]) -> Option<u64> {
    codec::parse_u64(field(raw, b"11")?)
}

/// The raw responder's order: a pre-encoded `35=D` into which [`RawOrder::encode`]
/// writes MsgSeqNum (34), SendingTime (52, also used for TransactTime 60), the
/// correlation id (11), then BodyLength and CheckSum. The other fields are fixed.
#[derive(Debug, Clone)]
pub struct RawOrder {
    body: Vec<u8>,
}

/// The fixed part of the raw responder's order after ClOrdID.
const RAW_ORDER_FIXED: &[u8] = b"38=100\x0140=2\x0144=100.25\x0154=1\x0155=ABC\x0159=0\x0160=";

impl Default for RawOrder {
    fn default() -> Self {
        RawOrder::new()
    }
}

impl RawOrder {
    /// A reusable order builder.
    pub fn new() -> RawOrder {
        RawOrder {
            body: Vec::with_capacity(256),
        }
    }

    /// Appends the complete order (`8=` to `10=xxx<SOH>`) to `out`.
    #[inline]
    pub fn encode(&mut self, out: &mut Vec<u8>, seq: u64, sending_time: &[u8], corr_id: &[u8]) {
        let b = &mut self.body;
        b.clear();
        b.extend_from_slice(b"35=D\x0134=");
        b.extend_from_slice(itoa_u64(seq).format());
        b.extend_from_slice(b"\x0149=ALGO_OE\x0152=");
        b.extend_from_slice(sending_time);
        b.extend_from_slice(b"\x0156=VENUE_OE\x0111=");
        b.extend_from_slice(corr_id);
        b.push(SOH);
        b.extend_from_slice(RAW_ORDER_FIXED);
        b.extend_from_slice(sending_time);
        b.push(SOH);
        let start = out.len();
        out.extend_from_slice(b"8=FIX.4.4\x019=");
        out.extend_from_slice(itoa_u64(b.len() as u64).format());
        out.push(SOH);
        out.extend_from_slice(b);
        codec::push_trailer(out, start);
    }
}

/// An administrative message of the raw responder (Logon answer, Heartbeat, Logout),
/// encoded with the codec: `35=<msg_type>|34|49|52|56|<body>`.
pub fn raw_admin(
    enc: &mut Encoder,
    msg_type: &[u8],
    seq: u64,
    sender: &str,
    target: &str,
    sending_time: &[u8],
    body: &[(u32, &[u8])],
) -> Vec<u8> {
    enc.begin(msg_type);
    enc.field_u64(34, seq);
    enc.field_str(49, sender);
    enc.field(52, sending_time);
    enc.field_str(56, target);
    for &(tag, value) in body {
        enc.field(tag, value);
    }
    enc.finish().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_fix::codec::{frame_len, parse, Fields};

    fn show(b: &[u8]) -> String {
        b.iter()
            .map(|&c| if c == SOH { '|' } else { c as char })
            .collect()
    }

    #[test]
    fn market_data_carries_the_correlation_id_and_parses() {
        let mut enc = Encoder::new(BEGIN_STRING);
        enc.set_header_fields(&[(49, b"VENUE_MD"), (56, b"ALGO_MD")]);
        enc.begin(b"X");
        enc.field_u64(34, 2);
        enc.field(52, b"20261122-08:21:27.172");
        write_x_body(&mut enc, 12_345);
        let msg = enc.finish().to_vec();
        assert_eq!(frame_len(&msg, 4096), Ok(Some(msg.len())));
        let mut fields = Fields::new();
        let m = parse(&msg, &mut fields).expect("valid X");
        assert_eq!(m.msg_type(), b"X");
        assert_eq!(m.get_u64(278), Some(12_345));
        assert_eq!(m.get(269), Some(&b"1"[..]), "odd index: offer");
        assert_eq!(m.get(270), Some(&b"103.81"[..]), "{}", show(&msg));
        assert_eq!(m.get(55), Some(SYMBOLS[(12_345 % 8) as usize]));
        assert_eq!(field(&msg, b"278"), Some(&b"12345"[..]));
        assert_eq!(msg_type(&msg), b"X");
    }

    #[test]
    fn prices_have_two_decimals() {
        let mut b = [0u8; 16];
        for (cents, text) in [(10_025, "100.25"), (5, "0.05"), (100, "1.00"), (0, "0.00")] {
            let n = price(&mut b, cents);
            assert_eq!(&b[..n], text.as_bytes());
        }
    }

    #[test]
    fn the_raw_order_is_a_valid_message_with_the_correlation_id() {
        let mut o = RawOrder::new();
        let mut out = b"junk".to_vec();
        o.encode(&mut out, 7, b"20261122-08:21:27.172", b"991");
        let msg = &out[4..];
        assert_eq!(frame_len(msg, 4096), Ok(Some(msg.len())));
        let mut fields = Fields::new();
        let m = parse(msg, &mut fields).expect("valid D (BodyLength and CheckSum)");
        assert_eq!(m.msg_type(), b"D");
        assert_eq!(m.seq_num(), Some(7));
        assert_eq!(m.get(11), Some(&b"991"[..]));
        assert_eq!(m.get(60), Some(&b"20261122-08:21:27.172"[..]));
        assert_eq!(order_corr_id(msg), Some(991));
        // Reused: a second order is as valid.
        out.clear();
        o.encode(&mut out, 1_000_000, b"20261122-08:21:27.173", b"1");
        assert!(parse(&out, &mut fields).is_ok(), "{}", show(&out));
    }

    #[test]
    fn field_scan_never_panics_and_finds_only_whole_tags() {
        let msg = b"8=FIX.4.4\x019=5\x0135=D\x01111=5\x0111=42\x0110=000\x01";
        assert_eq!(field(msg, b"11"), Some(&b"42"[..]));
        assert_eq!(field(msg, b"111"), Some(&b"5"[..]));
        assert_eq!(field(msg, b"12"), None);
        for cut in 0..msg.len() {
            let _ = field(&msg[..cut], b"11");
            let _ = order_corr_id(&msg[..cut]);
            let _ = msg_type(&msg[..cut]);
        }
        assert_eq!(field(b"", b"11"), None);
        assert_eq!(field(b"\x0111=", b"11"), None, "no SOH after the value");
    }

    #[test]
    fn raw_admin_messages_are_valid() {
        let mut enc = Encoder::new(BEGIN_STRING);
        let m = raw_admin(
            &mut enc,
            b"A",
            1,
            ALGO_MD,
            VENUE_MD,
            b"20261122-08:21:27.172",
            &[(98, b"0"), (108, b"30")],
        );
        let mut fields = Fields::new();
        let p = parse(&m, &mut fields).expect("valid Logon");
        assert_eq!(p.get_str(49), Some(ALGO_MD));
        assert_eq!(p.get_u64(108), Some(30));
    }
}
