//! FIX codec micro-benchmarks (the bar: decode a typical 35=X and encode a
//! 35=D, each well under a microsecond).
//!
//! * `decode_35X`: `frame_len` + `parse` (CheckSum verified) of a realistic FIX.4.4
//!   MarketDataIncrementalRefresh (header 49/56/34/52, 262, 268=2 entries of
//!   279/269/55/270/271/273/290), then the gets a strategy does: 35, 34, 52 parsed as a
//!   timestamp, 55, and both 270 prices.
//! * `encode_35D`: a NewOrderSingle with header 49/56 (cached), 34, 52 and body
//!   11/55/54/60/38/40/44/59, finished (BodyLength and CheckSum).
//! * `validate_35X`: the same 35=X, parsed, then validated against QuickFIX's FIX44.xml
//!   with the default switches (what the tick-to-trade algo does per market-data
//!   message). The dictionary comes from `target/fix-spec` (fetched by
//!   `scripts/fetch-fix-spec.sh` on first use, as in the tests).
//! * `write_utc_timestamp_millis`, `parse_utc_timestamp_millis`: the timestamp helpers
//!   alone.
//!
//! Run: `cargo bench -p tickwire-fix --bench codec -- --warm-up-time 1 --measurement-time 2`

// A bench fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tickwire_fix::codec::{
    frame_len, parse, parse_utc_timestamp, write_utc_timestamp, Encoder, Fields, TimestampPrecision,
};
use tickwire_fix::dict::Dictionary;
use tickwire_fix::validate::{validate, Dictionaries, ValidationOptions};

#[path = "../tests/support/spec.rs"]
mod spec;

const NOW: u64 = 1_710_495_000_123_456_789;

/// The 35=X under test, built with the Encoder.
fn market_data() -> Vec<u8> {
    let mut enc = Encoder::new("FIX.4.4");
    enc.set_header_fields(&[(49, b"VENUE"), (56, b"ALGO")]);
    enc.begin(b"X");
    enc.field_u64(34, 123_456);
    enc.field_timestamp(52, NOW, TimestampPrecision::Millis);
    enc.field(262, b"MDREQ-1");
    enc.field_u64(268, 2);
    for (action, side, px, qty) in [
        (b"1", b"0", b"1.08345", 1_000_000),
        (b"1", b"1", b"1.08350", 500_000),
    ] {
        enc.field(279, action);
        enc.field(269, side);
        enc.field(55, b"EUR/USD");
        enc.field(270, px);
        enc.field_u64(271, qty);
        enc.field(273, b"09:30:00.123");
        enc.field_u64(290, 1);
    }
    enc.finish().to_vec()
}

fn decode_35x(c: &mut Criterion) {
    let msg = market_data();
    let mut fields = Fields::default();
    c.bench_function("decode_35X", |b| {
        b.iter(|| {
            let buf = black_box(&msg[..]);
            let n = frame_len(buf, 4096).ok().flatten().expect("framed");
            let m = parse(&buf[..n], &mut fields).expect("parsed");
            let mut acc = m.msg_type().len() as u64;
            acc += m.seq_num().unwrap_or(0);
            acc += m.get_timestamp(52).unwrap_or(0);
            acc += m.get(55).map_or(0, <[u8]>::len) as u64;
            for px in m.get_all(270) {
                acc += px.len() as u64;
            }
            black_box(acc)
        })
    });
}

fn validate_35x(c: &mut Criterion) {
    let dict = Dictionary::from_file(spec::spec_file("FIX44.xml")).expect("FIX44.xml");
    let dicts = Dictionaries::single(&dict);
    let opts = ValidationOptions::default();
    let msg = market_data();
    let mut fields = Fields::default();
    let m = parse(&msg, &mut fields).expect("parsed");
    validate(&m, &dicts, &opts).expect("the bench message is valid");
    c.bench_function("validate_35X", |b| {
        b.iter(|| black_box(validate(black_box(&m), &dicts, &opts).is_ok()))
    });
}

fn encode_35d(c: &mut Criterion) {
    let mut enc = Encoder::new("FIX.4.4");
    enc.set_header_fields(&[(49, b"ALGO"), (56, b"VENUE")]);
    let mut seq = 1u64;
    c.bench_function("encode_35D", |b| {
        b.iter(|| {
            enc.begin(b"D");
            enc.field_u64(34, seq);
            enc.field_timestamp(52, black_box(NOW), TimestampPrecision::Millis);
            enc.field(11, black_box(b"ORD-0000123456"));
            enc.field(55, b"EUR/USD");
            enc.field(54, b"1");
            enc.field_timestamp(60, black_box(NOW), TimestampPrecision::Micros);
            enc.field_u64(38, black_box(1_000_000));
            enc.field(40, b"2");
            enc.field(44, black_box(b"1.08350"));
            enc.field(59, b"3");
            seq += 1;
            black_box(enc.finish().len())
        })
    });
}

fn timestamps(c: &mut Criterion) {
    let mut out = Vec::with_capacity(64);
    c.bench_function("write_utc_timestamp_millis", |b| {
        b.iter(|| {
            out.clear();
            write_utc_timestamp(&mut out, black_box(NOW), TimestampPrecision::Millis);
            black_box(out.len())
        })
    });
    c.bench_function("parse_utc_timestamp_millis", |b| {
        b.iter(|| parse_utc_timestamp(black_box(b"20240315-09:30:00.123")))
    });
}

criterion_group!(benches, decode_35x, validate_35x, encode_35d, timestamps);
criterion_main!(benches);
