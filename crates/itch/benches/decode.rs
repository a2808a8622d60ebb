//! Decode throughput on a realistic message mix (order flow dominated by adds, cancels
//! and deletes, as on a NASDAQ day), from MoldUDP64 packets and from raw messages.
//!
//! Run briefly: `cargo bench -p tickwire-itch --bench decode -- --quick`.

// A bench fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use tickwire_itch::*;

/// A deterministic mix: ~42% add, 3% add-MPID, 30% delete, 10% cancel, 7% replace,
/// 5% execute, 1% execute with price, 1% trade, 1% other.
fn mix(n: usize) -> Vec<Message> {
    let stock = Symbol::new("AAPL").unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let header = Header {
            stock_locate: (x % 8000) as u16 + 1,
            tracking_number: 0,
            timestamp: 34_200_000_000_000 + i * 997,
        };
        let price = Price(1_000_000 + (x % 5_000) as u32);
        let side = if x & 1 == 0 { Side::Buy } else { Side::Sell };
        let m: Message = match x % 100 {
            0..=41 => AddOrder {
                header,
                order_ref: i,
                side,
                shares: 100,
                stock,
                price,
            }
            .into(),
            42..=44 => AddOrderMpid {
                header,
                order_ref: i,
                side,
                shares: 100,
                stock,
                price,
                attribution: *b"GSCO",
            }
            .into(),
            45..=74 => OrderDelete {
                header,
                order_ref: i / 2,
            }
            .into(),
            75..=84 => OrderCancel {
                header,
                order_ref: i / 2,
                cancelled_shares: 50,
            }
            .into(),
            85..=91 => OrderReplace {
                header,
                original_order_ref: i / 2,
                new_order_ref: i,
                shares: 200,
                price,
            }
            .into(),
            92..=96 => OrderExecuted {
                header,
                order_ref: i / 2,
                executed_shares: 100,
                match_number: i,
            }
            .into(),
            97 => OrderExecutedWithPrice {
                header,
                order_ref: i / 2,
                executed_shares: 100,
                match_number: i,
                printable: b'Y',
                execution_price: price,
            }
            .into(),
            98 => Trade {
                header,
                order_ref: 0,
                side: Side::Buy,
                shares: 100,
                stock,
                price,
                match_number: i,
            }
            .into(),
            _ => Noii {
                header,
                paired_shares: 1_000,
                imbalance_shares: 10,
                imbalance_direction: b'B',
                stock,
                far_price: price,
                near_price: price,
                current_reference_price: price,
                cross_type: b'C',
                price_variation_indicator: b'L',
            }
            .into(),
        };
        out.push(m);
    }
    out
}

fn bench(c: &mut Criterion) {
    let msgs = mix(10_000);
    let packets = PacketBuilder::new(Session::new("BENCH").unwrap(), 1, DEFAULT_MAX_PACKET)
        .pack(&msgs)
        .unwrap();
    let raw: Vec<Vec<u8>> = msgs
        .iter()
        .map(|m| {
            let mut v = Vec::new();
            m.encode_to_vec(&mut v).unwrap();
            v
        })
        .collect();

    let mut g = c.benchmark_group("itch");
    g.throughput(Throughput::Elements(msgs.len() as u64));
    g.bench_function("decode_mix", |bch| {
        bch.iter(|| {
            let mut sum = 0u64;
            for r in &raw {
                if let Ok(m) = decode(black_box(r)) {
                    sum = sum.wrapping_add(m.timestamp());
                }
            }
            sum
        })
    });
    g.bench_function("mold_packets_decode_mix", |bch| {
        bch.iter(|| {
            let mut sum = 0u64;
            for p in &packets {
                let Ok(p) = MoldPacket::parse(black_box(p)) else {
                    continue;
                };
                for blk in p.messages().flatten() {
                    if let Ok(m) = decode(blk.data) {
                        sum = sum.wrapping_add(m.timestamp());
                    }
                }
            }
            sum
        })
    });
    let mut out = Vec::with_capacity(1500);
    g.bench_function("encode_mix_into_packets", |bch| {
        bch.iter(|| {
            let mut pb = PacketBuilder::new(Session::new("BENCH").unwrap(), 1, DEFAULT_MAX_PACKET);
            let mut bytes = 0usize;
            for m in &msgs {
                if let Err(BuildError::Full) = pb.push_message(black_box(m)) {
                    out.clear();
                    out.extend_from_slice(pb.finish());
                    bytes += out.len();
                    let _ = pb.push_message(m);
                }
            }
            bytes + pb.finish().len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
