//! FIX hot paths allocate nothing per message after warm-up: the codec (encode with a
//! reused `Encoder`, frame with `frame_len`, parse into reused `Fields`), dictionary
//! validation (FIX 4.4), a logged-on session receiving in-sequence application
//! messages (`handle_message` + draining `poll_event`), and re-writing a parsed message
//! in QuickFIX's field order (`order::QuickFixOrder`, what `--app echo` does).
//!
//! Its own test binary, so the counting global allocator is this file's alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/spec.rs"]
mod spec;

use tickwire_alloc_count::{allocations_during, assert_counting, live_bytes, CountingAlloc};
use tickwire_fix::codec::{self, frame_len, Encoder, Fields, TimestampPrecision};
use tickwire_fix::dict::Dictionary;
use tickwire_fix::order::QuickFixOrder;
use tickwire_fix::session::{Event, Output, Role, Session, SessionConfig};
use tickwire_fix::store::MemoryStore;
use tickwire_fix::validate::{validate, Dictionaries, ValidationOptions};
use tickwire_rt::UtcNanos;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const NANOS: u64 = 1_000_000_000;
/// 2026-11-20 08:00:00 UTC.
const T0: u64 = 1_795_161_600 * NANOS;
const WARMUP: u64 = 200;
const MEASURED: u64 = 10_000;

/// An acceptor session logged on at `T0` (the counterparty's Logon, seq 1), and the
/// counterparty's encoder.
fn logged_on_acceptor() -> (Session<MemoryStore>, Encoder) {
    let cfg = SessionConfig::new("FIX.4.4", "TW", "CP", Role::Acceptor);
    let mut s = Session::new(cfg, MemoryStore::new(T0)).expect("valid config");
    let mut peer = Encoder::new("FIX.4.4");
    s.handle_connected(UtcNanos(T0));
    peer.begin(b"A");
    peer.field_u64(34, 1);
    peer.field_str(49, "CP");
    peer.field_timestamp(52, T0, TimestampPrecision::Millis);
    peer.field_str(56, "TW");
    peer.field_u64(98, 0);
    peer.field_u64(108, 30);
    let logon = peer.finish().to_vec();
    s.handle_message(UtcNanos(T0), &logon);
    let mut logged_on = false;
    while let Some(o) = s.poll_event() {
        logged_on |= matches!(o, Output::Event(Event::LoggedOn));
    }
    assert!(logged_on, "the session logged on");
    (s, peer)
}

/// Writes the counterparty's NewOrderSingle number `seq` into `enc`.
fn new_order(enc: &mut Encoder, seq: u64, now: u64) -> &[u8] {
    enc.begin(b"D");
    enc.field_u64(34, seq);
    enc.field_str(49, "CP");
    enc.field_timestamp(52, now, TimestampPrecision::Millis);
    enc.field_str(56, "TW");
    enc.field_u64(11, seq); // ClOrdID
    enc.field_str(21, "1"); // HandlInst
    enc.field_u64(38, 100 + seq % 7); // OrderQty
    enc.field_str(40, "2"); // OrdType: limit
    enc.field_i64(44, 1_000 + (seq % 50) as i64); // Price
    enc.field_str(54, if seq % 2 == 0 { "1" } else { "2" }); // Side
    enc.field_str(55, "IBM"); // Symbol
    enc.field_timestamp(60, now, TimestampPrecision::Millis); // TransactTime
    enc.finish()
}

#[test]
fn encode_frame_parse_validate_allocate_nothing() {
    assert_counting();
    let dict = Dictionary::from_file(spec::spec_file("FIX44.xml")).expect("FIX44.xml");
    let dicts = Dictionaries::single(&dict);
    let opts = ValidationOptions::default();
    let mut enc = Encoder::new("FIX.4.4");
    let mut fields = Fields::default();
    let mut run = |from: u64, to: u64| {
        let mut valid = 0u64;
        for seq in from..to {
            let raw = new_order(&mut enc, seq, T0 + seq * 1_000_000);
            let n = frame_len(raw, 1 << 16).expect("frames").expect("complete");
            assert_eq!(n, raw.len());
            let msg = codec::parse(&raw[..n], &mut fields).expect("parses");
            assert_eq!(msg.get_u64(11), Some(seq));
            if validate(&msg, &dicts, &opts).is_ok() {
                valid += 1;
            }
        }
        valid
    };
    assert_eq!(run(1, 1 + WARMUP), WARMUP, "every warm-up order validates");
    let (valid, allocations) = allocations_during(|| run(1 + WARMUP, 1 + WARMUP + MEASURED));
    assert_eq!(valid, MEASURED, "every order validates");
    assert_eq!(
        allocations, 0,
        "{allocations} allocations encoding, framing, parsing and validating {MEASURED} orders"
    );
}

#[test]
fn writing_a_parsed_order_in_quickfix_order_allocates_nothing() {
    assert_counting();
    let dict = Dictionary::from_file(spec::spec_file("FIX44.xml")).expect("FIX44.xml");
    let mut enc = Encoder::new("FIX.4.4");
    let mut fields = Fields::default();
    let mut order = QuickFixOrder::new();
    let mut body = Vec::with_capacity(256);
    let mut run = |from: u64, to: u64| {
        let mut bytes = 0;
        for seq in from..to {
            let raw = new_order(&mut enc, seq, T0 + seq * 1_000_000);
            let msg = codec::parse(raw, &mut fields).expect("parses");
            body.clear();
            order.write_body(&msg, Some(&dict), &mut body);
            bytes += body.len();
        }
        bytes
    };
    assert!(run(1, 1 + WARMUP) > 0);
    let (bytes, allocations) = allocations_during(|| run(1 + WARMUP, 1 + WARMUP + MEASURED));
    assert!(bytes > 0);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations re-ordering {MEASURED} orders"
    );
}

#[test]
fn a_logged_on_session_receives_in_sequence_messages_without_allocating() {
    assert_counting();
    let (mut s, mut peer) = logged_on_acceptor();
    let mut now = T0;

    // Counts what the application sees; anything else the session outputs is wrong.
    let mut feed = |s: &mut Session<MemoryStore>, from: u64, to: u64, now: &mut u64| {
        let mut app = 0u64;
        let mut other = 0u64;
        for seq in from..to {
            *now += 1_000_000;
            let raw = new_order(&mut peer, seq, *now);
            s.handle_message(UtcNanos(*now), raw);
            while let Some(o) = s.poll_event() {
                match o {
                    Output::Event(Event::FromApp(m)) if m.starts_with(b"8=FIX.4.4") => app += 1,
                    _ => other += 1,
                }
            }
        }
        (app, other)
    };
    assert_eq!(feed(&mut s, 2, 2 + WARMUP, &mut now), (WARMUP, 0));
    let ((app, other), allocations) =
        allocations_during(|| feed(&mut s, 2 + WARMUP, 2 + WARMUP + MEASURED, &mut now));
    assert_eq!(
        (app, other),
        (MEASURED, 0),
        "every order reached the application"
    );
    assert_eq!(
        allocations, 0,
        "{allocations} allocations receiving {MEASURED} in-sequence orders"
    );
}

/// Hostile-input pass: one message of a million fields left ~38 MB per session held
/// for good (the session's field tables and outbox, kept for reuse at the size of the
/// largest message seen). They now give back what is beyond 65,536 fields and 2 MiB.
#[test]
fn a_session_does_not_keep_a_huge_messages_memory() {
    assert_counting();
    let (mut s, mut peer) = logged_on_acceptor();
    let now = T0;
    // A message of a million fields (12 MB of field table for one parse).
    peer.begin(b"B");
    peer.field_u64(34, 2);
    peer.field_str(49, "CP");
    peer.field_timestamp(52, now, TimestampPrecision::Millis);
    peer.field_str(56, "TW");
    for _ in 0..1_000_000 {
        peer.field_str(5000, "x");
    }
    let huge = peer.finish().to_vec();
    let before = live_bytes();
    s.handle_message(UtcNanos(now), &huge);
    let mut fields = 0;
    while let Some(o) = s.poll_event() {
        if let Output::Event(Event::FromApp(_)) = o {
            fields = s.event_fields().len();
        }
    }
    assert!(
        fields > 1_000_000,
        "the application saw the message ({fields} fields)"
    );
    // The next call (a timer, the next message) gives the outbox's room back.
    s.handle_timeout(UtcNanos(now + 1_000_000_000));
    while s.poll_event().is_some() {}
    let held = live_bytes() - before;
    assert!(
        held < 6 << 20,
        "{held} bytes still held after a {}-byte message of a million fields",
        huge.len()
    );
}
