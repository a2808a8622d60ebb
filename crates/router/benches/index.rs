//! Subscription index micro-benchmarks.
//!
//! `match_topic`: one topic, a few matching subscriptions, and 10 vs 10 000
//! subscriptions that cannot match; the two figures should be about equal.
//! `topic_cache`: a prototype topic -> result cache in front of the index (bench-only),
//! to see whether caching would pay off on the hit path.
//! `hasher`: the literal-child lookup with std SipHash vs an Fx-style hasher.
//! `validate_topic`: the per-message syntax check that precedes matching.
//!
//! Run: `cargo bench -p tickwire-router --bench index -- --warm-up-time 1 --measurement-time 3`

// A bench fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use tickwire_router::index::{Slot, SubscriptionIndex};
use tickwire_wire::topic::validate_topic;

const TOPIC: &str = "md/NASDAQ/AAPL";

/// An index with `non_matching` subscriptions that cannot match [`TOPIC`] (spread
/// over literal, prefix, `*` and `>` patterns on the same and other branches) plus
/// four that match it, held by three clients (client 0 twice, to exercise dedup).
///
/// Numbers are zero-padded so both sizes have the same distinct prefix lengths:
/// matching cost is bounded by those, and this isolates the effect of the count.
fn build(non_matching: usize) -> SubscriptionIndex {
    let mut index = SubscriptionIndex::new();
    index.subscribe(Slot(0), "md/NASDAQ/AAPL");
    index.subscribe(Slot(0), "md/*/AAPL");
    index.subscribe(Slot(1), "md/NAS*/AAPL");
    index.subscribe(Slot(2), "md/>");
    for i in 0..non_matching {
        let client = Slot(3 + (i % 1000) as u32);
        let pattern = match i % 5 {
            0 => format!("md/NASDAQ/S{i:05}"),  // sibling literals of AAPL
            1 => format!("md/NASDAQ/Z{i:05}*"), // sibling prefixes
            2 => format!("md/NYSE/S{i:05}/>"),  // other exchange
            3 => format!("md/N{i:05}*/AAPL"),   // prefixes at the exchange level
            _ => format!("fx/P{i:05}/*"),       // other root branch
        };
        index.subscribe(client, &pattern);
    }
    index
}

fn match_topic(c: &mut Criterion) {
    let mut group = c.benchmark_group("match_topic");
    for non_matching in [10, 10_000] {
        let mut index = build(non_matching);
        let mut out = Vec::with_capacity(16);
        out.clear();
        index.match_topic(TOPIC, &mut out);
        assert_eq!(out.len(), 3, "three clients match");
        let id = BenchmarkId::from_parameter(non_matching);
        bench_match(&mut group, id, |t, out| index.match_topic(t, out));
    }
    group.finish();
}

/// Measures `match_topic(TOPIC)` into a reused result vector, as benchmark `id`.
fn bench_match(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    mut match_topic: impl FnMut(&str, &mut Vec<Slot>),
) {
    let mut out = Vec::with_capacity(16);
    group.bench_function(id, |b| {
        b.iter(|| {
            out.clear();
            match_topic(black_box(TOPIC), &mut out);
            black_box(out.len())
        })
    });
}

/// Prototype: exact-topic result cache, invalidated wholesale by any (un)subscribe.
struct CachedIndex {
    index: SubscriptionIndex,
    cache: HashMap<Box<str>, Vec<Slot>>,
}

impl CachedIndex {
    fn match_topic(&mut self, topic: &str, out: &mut Vec<Slot>) {
        if let Some(hit) = self.cache.get(topic) {
            out.extend_from_slice(hit);
            return;
        }
        let start = out.len();
        self.index.match_topic(topic, out);
        self.cache.insert(topic.into(), out[start..].to_vec());
    }
}

fn topic_cache(c: &mut Criterion) {
    let mut group = c.benchmark_group("topic_cache");
    for non_matching in [10, 10_000] {
        let mut cached = CachedIndex {
            index: build(non_matching),
            cache: HashMap::new(),
        };
        // Warm the cache with a realistic number of distinct live topics.
        let mut out = Vec::with_capacity(16);
        for i in 0..5_000 {
            out.clear();
            cached.match_topic(&format!("md/NASDAQ/T{i}"), &mut out);
        }
        cached.match_topic(TOPIC, &mut out);
        let id = BenchmarkId::new("hit", non_matching);
        bench_match(&mut group, id, |t, out| cached.match_topic(t, out));
    }
    group.finish();
}

/// The FxHash of `rustc-hash` 2 (mix per word, rotate at the end so the low bits that
/// pick the bucket depend on every byte), for comparison only: not DoS-resistant.
#[derive(Default, Clone, Copy)]
struct FxHasher {
    hash: u64,
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let mut word = [0; 8];
        word[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(word));
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.hash.rotate_left(26)
    }
}

fn hasher(c: &mut Criterion) {
    let keys: Vec<Box<str>> = (0..10_000)
        .map(|i| format!("S{i}").into_boxed_str())
        .chain(std::iter::once("AAPL".into()))
        .collect();
    let sip: HashMap<Box<str>, u32> = keys.iter().cloned().zip(0..).collect();
    let fx: HashMap<Box<str>, u32, BuildHasherDefault<FxHasher>> =
        keys.iter().cloned().zip(0..).collect();
    let mut group = c.benchmark_group("hasher_lookup");
    group.bench_function("sip", |b| b.iter(|| sip.get(black_box("AAPL")).copied()));
    group.bench_function("fx", |b| b.iter(|| fx.get(black_box("AAPL")).copied()));
    group.finish();
}

fn validate(c: &mut Criterion) {
    c.bench_function("validate_topic", |b| {
        b.iter(|| validate_topic(black_box(TOPIC.as_bytes())).is_ok())
    });
}

criterion_group!(benches, match_topic, topic_cache, hasher, validate);
criterion_main!(benches);
