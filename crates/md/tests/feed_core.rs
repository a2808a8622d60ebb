//! The feed-handler core against real MoldUDP64 packets (built with the itch crate's
//! `PacketBuilder`) carrying sessions from the synthetic exchange (`generator`).
//!
//! Every comparison is of the byte-identical update streams (topic + payload) and of
//! the books, between a lossless run and a run with loss, reordering, duplicates or
//! garbage. The receive timestamp is the same constant in every run, so streams are
//! comparable byte for byte.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod packets;

use packets::{answer, packetize};
use tickwire_itch::{
    AddOrder, Header, Message, MoldHeader, PacketBuilder, Price, Session, Side, StockDirectory,
    Symbol, MOLD_HEADER_LEN,
};
use tickwire_md::book::Level;
use tickwire_md::feed::{FeedConfig, FeedHandler, MAX_CANDIDATES};
use tickwire_md::generator::{Generator, GeneratorConfig};
use tickwire_md::update::{self, Update};
use tickwire_rt::MonoNanos;

/// Receive time passed with every packet.
const NOW: MonoNanos = MonoNanos(1_000_000);

type Stream = Vec<(String, Vec<u8>)>;

fn session() -> Session {
    Session::new("TEST0001").unwrap()
}

fn messages(symbols: u16, messages: u64, seed: u64) -> Vec<Message> {
    let cfg = GeneratorConfig {
        symbols,
        messages,
        seed,
        ..GeneratorConfig::default()
    };
    Generator::new(cfg).unwrap().collect()
}

fn config(depth_levels: usize) -> FeedConfig {
    FeedConfig {
        session: Some(session()),
        depth_levels,
        order_capacity: 1 << 16,
        ..FeedConfig::default()
    }
}

/// Hands `pkt` to the core, then answers every re-request at once (if `server`).
fn deliver(f: &mut FeedHandler, stream: &mut Stream, pkt: &[u8], server: Option<&[Message]>) {
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    f.handle_datagram(NOW, pkt, &mut sink);
    if let Some(msgs) = server {
        while let Some(req) = f.poll_transmit() {
            for p in answer(msgs, req) {
                f.handle_retransmission(NOW, &p, &mut sink);
            }
        }
    }
}

/// A fresh handler (`config(0)`) and an empty stream for what it publishes.
fn fresh() -> (FeedHandler, Stream) {
    (FeedHandler::new(config(0)).unwrap(), Stream::new())
}

/// A fresh handler that has handled `pkt`, and what it published.
fn after_one_packet(pkt: &[u8]) -> (FeedHandler, Stream) {
    let (mut f, mut stream) = fresh();
    deliver(&mut f, &mut stream, pkt, None);
    (f, stream)
}

/// Every level of every book.
fn snapshot(f: &FeedHandler, symbols: u16) -> Vec<(u16, Vec<Level>, Vec<Level>)> {
    (0..=symbols)
        .filter_map(|l| {
            f.books().book(l).map(|b| {
                (
                    l,
                    b.levels(Side::Buy).collect(),
                    b.levels(Side::Sell).collect(),
                )
            })
        })
        .collect()
}

fn lossless(msgs: &[Message], pkts: &[Vec<u8>], depth: usize) -> (FeedHandler, Stream) {
    let mut f = FeedHandler::new(config(depth)).unwrap();
    let mut stream = Stream::new();
    for p in pkts {
        deliver(&mut f, &mut stream, p, None);
    }
    assert_eq!(f.counters().messages, msgs.len() as u64);
    assert_eq!(f.counters().gaps, 0);
    assert_eq!(f.counters().malformed, 0);
    assert_eq!(f.counters().published, stream.len() as u64);
    (f, stream)
}

#[test]
fn gap_recovery_by_retransmission_matches_a_lossless_run() {
    let msgs = messages(30, 30_000, 7);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (clean, clean_stream) = lossless(&msgs, &pkts, 5);
    assert!(clean_stream.iter().any(|(t, _)| t.ends_with("/trade")));
    assert!(clean_stream.iter().any(|(t, _)| t.ends_with("/depth")));

    // Loss (every fifth packet and a run of ten) and reordering (swapped neighbours).
    let mut order: Vec<usize> = (0..pkts.len())
        .filter(|i| i % 5 != 3 && !(100..110).contains(i))
        .collect();
    for pair in order.chunks_mut(2).step_by(7) {
        pair.reverse();
    }
    let mut f = FeedHandler::new(config(5)).unwrap();
    let mut stream = Stream::new();
    for i in order {
        deliver(&mut f, &mut stream, &pkts[i], Some(&msgs));
    }
    let c = *f.counters();
    assert_eq!(c.lost, 0);
    assert!(c.gaps > 0 && c.recovered > 0 && c.requests > 0, "{c:?}");
    assert_eq!(c.messages, msgs.len() as u64);
    assert_eq!(f.expected_sequence(), msgs.len() as u64 + 1);
    assert!(!f.recovering());
    assert_eq!(c.published, clean.counters().published);
    assert!(stream == clean_stream, "update streams differ");
    assert_eq!(snapshot(&f, 30), snapshot(&clean, 30));
    assert_eq!(f.books().order_count(), clean.books().order_count());
}

#[test]
fn an_unanswered_gap_is_declared_lost_after_the_retries_and_the_stream_goes_on() {
    let msgs = messages(10, 8_000, 11);
    let pkts = packetize(session(), 1, &msgs, 600);
    let cfg = FeedConfig {
        retransmit_timeout: std::time::Duration::from_nanos(1_000),
        max_retransmit_tries: 3,
        ..config(0)
    };
    let mut f = FeedHandler::new(cfg).unwrap();
    let mut stream = Stream::new();
    let lost_pkt = 20;
    for p in &pkts[..lost_pkt] {
        deliver(&mut f, &mut stream, p, None);
    }
    let first_lost = f.expected_sequence();
    let lost_count = u64::from(MoldHeader::decode(&pkts[lost_pkt]).unwrap().count);
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    f.handle_datagram(NOW, &pkts[lost_pkt + 1], &mut sink);
    let req = f.poll_transmit().expect("gap re-requested");
    assert_eq!(
        (req.sequence, u64::from(req.count)),
        (first_lost, lost_count)
    );
    assert_eq!(f.counters().gaps, 1);
    assert_eq!(f.poll_timeout(), Some(NOW.add_nanos(1_000)));

    // Early and spurious timeouts do nothing.
    f.handle_timeout(NOW.add_nanos(999), &mut sink);
    assert!(f.poll_transmit().is_none());
    // Two more tries, then the range is declared lost.
    for k in 1..3u64 {
        f.handle_timeout(NOW.add_nanos(k * 1_000), &mut sink);
        assert_eq!(f.poll_transmit(), Some(req));
        assert_eq!(f.counters().lost, 0);
    }
    let published_before = f.counters().published;
    f.handle_timeout(NOW.add_nanos(3_000), &mut sink);
    assert!(f.poll_transmit().is_none());
    assert!(f.poll_timeout().is_none());
    assert_eq!(f.counters().lost, lost_count);
    assert_eq!(f.counters().requests, 3);
    // The held packet was applied at once, and the rest of the session goes on.
    assert!(f.expected_sequence() > first_lost + lost_count);
    for p in &pkts[lost_pkt + 2..] {
        f.handle_datagram(NOW, p, &mut sink);
    }
    let c = *f.counters();
    assert_eq!(c.messages + c.lost, msgs.len() as u64);
    assert_eq!(f.expected_sequence(), msgs.len() as u64 + 1);
    assert!(c.published > published_before);
    assert_eq!(c.gaps, 1);
    assert_eq!(c.recovered, 0);
}

#[test]
fn a_full_hold_buffer_gives_up_the_oldest_gap_and_loses_only_what_was_missing() {
    // A replay with 1 packet in 10 missing and nobody answering re-requests: every gap
    // waits out its retries while packets keep coming. With room for 16 held packets,
    // the arriving packet used to be dropped (a new gap of its own, and so on: ~95% of
    // the session lost); now the oldest gap is given up to make room, so exactly the
    // missing packets' messages are lost and every other message is applied.
    let msgs = messages(10, 20_000, 5);
    let pkts = packetize(session(), 1, &msgs, 600);
    let cfg = FeedConfig {
        max_held_packets: 16,
        ..config(0)
    };
    let mut f = FeedHandler::new(cfg).unwrap();
    let mut stream = Stream::new();
    let mut missing = 0u64;
    for (i, p) in pkts.iter().enumerate() {
        if i % 10 == 5 {
            missing += u64::from(MoldHeader::decode(p).unwrap().count);
            continue;
        }
        // Re-requests are taken and never answered; no timeout ever fires.
        deliver(&mut f, &mut stream, p, None);
        while f.poll_transmit().is_some() {}
    }
    let c = *f.counters();
    assert!(c.overflow > 0, "the hold buffer never filled: {c:?}");
    // What is still held waits for its gap's retries: give them up too.
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    let mut t = NOW;
    while let Some(at) = f.poll_timeout() {
        t = at.max(t);
        f.handle_timeout(t, &mut sink);
        while f.poll_transmit().is_some() {}
    }
    let c = *f.counters();
    assert_eq!(c.lost, missing, "{c:?}");
    assert_eq!(c.messages + c.lost, msgs.len() as u64, "{c:?}");
    assert_eq!(f.expected_sequence(), msgs.len() as u64 + 1);
}

/// Runs the core's timeouts until no gap is open; returns the re-requests sent.
fn time_out_every_gap(f: &mut FeedHandler, stream: &mut Stream) -> u64 {
    let before = f.counters().requests;
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    while let Some(at) = f.poll_timeout() {
        f.handle_timeout(at, &mut sink);
        while f.poll_transmit().is_some() {}
    }
    f.counters().requests - before
}

#[test]
fn after_a_gap_nobody_answered_the_next_gets_one_request_until_answers_return() {
    let msgs = messages(10, 8_000, 13);
    let pkts = packetize(session(), 1, &msgs, 600);
    let cfg = FeedConfig {
        retransmit_timeout: std::time::Duration::from_nanos(1_000),
        ..config(0)
    };
    let mut f = FeedHandler::new(cfg).unwrap();
    let mut stream = Stream::new();
    let deliver_all = |f: &mut FeedHandler, stream: &mut Stream, range: std::ops::Range<usize>| {
        for p in &pkts[range] {
            deliver(f, stream, p, None);
            while f.poll_transmit().is_some() {}
        }
    };
    // Gap 1 (packet 10 missing): three requests, no answer.
    deliver_all(&mut f, &mut stream, 0..10);
    deliver_all(&mut f, &mut stream, 11..12);
    assert_eq!(time_out_every_gap(&mut f, &mut stream), 3 - 1);
    assert_eq!(f.counters().requests, 3);
    // Gap 2 (packet 20 missing): the server looks silent, one request.
    deliver_all(&mut f, &mut stream, 12..20);
    deliver_all(&mut f, &mut stream, 21..22);
    assert_eq!(time_out_every_gap(&mut f, &mut stream), 0);
    assert_eq!(f.counters().requests, 4);
    // Gap 3 (packet 30 missing) is answered: the server is back...
    deliver_all(&mut f, &mut stream, 22..30);
    deliver(&mut f, &mut stream, &pkts[31], Some(&msgs));
    assert!(f.counters().recovered > 0);
    // ...so gap 4 (packet 40 missing, unanswered) gets its three requests again.
    deliver_all(&mut f, &mut stream, 32..40);
    let requests = f.counters().requests;
    deliver_all(&mut f, &mut stream, 41..42);
    assert_eq!(time_out_every_gap(&mut f, &mut stream), 2);
    assert_eq!(f.counters().requests, requests + 3);
    let lost: u64 = [10, 20, 40]
        .iter()
        .map(|&i| u64::from(MoldHeader::decode(&pkts[i]).unwrap().count))
        .sum();
    assert_eq!(f.counters().lost, lost);
}

#[test]
fn duplicates_and_overlaps_are_skipped() {
    let msgs = messages(10, 5_000, 3);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (clean, clean_stream) = lossless(&msgs, &pkts, 3);
    let seq_of = |p: &[u8]| MoldHeader::decode(p).unwrap().sequence;

    let mut f = FeedHandler::new(config(3)).unwrap();
    let mut stream = Stream::new();
    let mut want_dups = 0u64;
    for (i, p) in pkts.iter().enumerate() {
        if i == 5 {
            // Overlap: from the last 5 messages of packet 5 into the first 10 of packet 6.
            let s6 = seq_of(&pkts[6]);
            let from = s6 - 5;
            let over = packetize(
                session(),
                from,
                &msgs[(from - 1) as usize..(s6 + 9) as usize],
                1400,
            );
            assert_eq!(over.len(), 1);
            deliver(&mut f, &mut stream, p, None);
            deliver(&mut f, &mut stream, &over[0], None);
            // The first 5 are behind; then packet 6 is behind for its first 10.
            want_dups += 5 + 10;
            continue;
        }
        deliver(&mut f, &mut stream, p, None);
        // Every packet twice.
        deliver(&mut f, &mut stream, p, None);
        want_dups += u64::from(MoldHeader::decode(p).unwrap().count);
    }
    assert!(stream == clean_stream, "update streams differ");
    assert_eq!(snapshot(&f, 10), snapshot(&clean, 10));
    assert_eq!(f.counters().duplicates, want_dups);
    assert_eq!(f.counters().messages, msgs.len() as u64);
    assert_eq!(f.counters().gaps, 0);
}

fn set_count(pkt: &mut [u8], count: u16) {
    pkt[18..20].copy_from_slice(&count.to_be_bytes());
}

#[test]
fn malformed_packets_are_counted_and_dropped_whole() {
    let msgs = messages(5, 3_000, 5);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (clean, clean_stream) = lossless(&msgs, &pkts, 0);

    let (mut f, mut stream) = fresh();
    for (i, p) in pkts.iter().enumerate() {
        if i > 0 && i % 10 == 0 {
            // Each bad variant of the packet about to be applied.
            let count = MoldHeader::decode(p).unwrap().count;
            let mut more = p.clone();
            set_count(&mut more, count + 1);
            let mut fewer = p.clone();
            set_count(&mut fewer, count - 1);
            let mut overrun = p.clone();
            overrun[MOLD_HEADER_LEN..MOLD_HEADER_LEN + 2].copy_from_slice(&u16::MAX.to_be_bytes());
            let mut other = p.clone();
            other[..10].copy_from_slice(b"OTHER     ");
            let bad: [&[u8]; 6] = [&p[..10], &p[..p.len() - 1], &more, &fewer, &overrun, &other];
            for b in bad {
                deliver(&mut f, &mut stream, b, None);
            }
        }
        deliver(&mut f, &mut stream, p, None);
    }
    let c = *f.counters();
    let rounds = ((pkts.len() - 1) / 10) as u64;
    assert!(rounds > 0);
    assert_eq!(c.truncated_packets, rounds);
    assert_eq!(c.bad_blocks, 4 * rounds);
    assert_eq!(
        c.foreign_session, rounds,
        "another session is stray traffic"
    );
    assert_eq!(c.malformed, 5 * rounds, "and not counted as malformed");
    assert_eq!(c.gaps, 0);
    assert_eq!(c.messages, msgs.len() as u64);
    assert!(stream == clean_stream, "update streams differ");
    assert_eq!(snapshot(&f, 5), snapshot(&clean, 5));
}

fn directory(locate: u16, name: &str) -> Message {
    let header = Header {
        stock_locate: locate,
        tracking_number: 0,
        timestamp: 1,
    };
    Message::from(StockDirectory::common_stock(
        header,
        Symbol::new(name).unwrap(),
    ))
}

fn add(locate: u16, order_ref: u64, side: Side, price: u32) -> Message {
    Message::from(AddOrder {
        header: Header {
            stock_locate: locate,
            tracking_number: 0,
            timestamp: 2,
        },
        order_ref,
        side,
        shares: 100,
        stock: Symbol::new("MSFT").unwrap(),
        price: Price(price),
    })
}

#[test]
fn bad_messages_inside_a_good_packet_are_counted_and_consume_their_sequence_number() {
    let mut b = PacketBuilder::new(session(), 1, 1400);
    b.push_message(&directory(2, "MSFT")).unwrap();
    // An unknown ITCH type, an empty block, and an Add Order one byte too long.
    b.push(&[b'z'; 20]).unwrap();
    b.push(&[]).unwrap();
    let (bytes, n) = add(2, 1, Side::Buy, 100).to_bytes().unwrap();
    let mut long = bytes[..n].to_vec();
    long.push(0);
    b.push(&long).unwrap();
    b.push_message(&add(2, 2, Side::Sell, 200)).unwrap();
    // An order for a locate without a directory: booked, not published.
    b.push_message(&add(9, 3, Side::Sell, 200)).unwrap();
    let (f, stream) = after_one_packet(b.finish());
    let c = *f.counters();
    assert_eq!((c.unknown_types, c.bad_messages, c.malformed), (2, 1, 3));
    assert_eq!(c.messages, 6);
    assert_eq!(f.expected_sequence(), 7);
    assert_eq!(c.unpublished, 1);
    assert_eq!(f.symbol(2), Some(b"MSFT    "));
    assert_eq!(stream.len(), 1);
    assert_eq!(stream[0].0, "md/NASDAQ/MSFT/quote");
    let Ok(Update::Quote(h, q)) = update::decode(&stream[0].1) else {
        panic!("not a quote");
    };
    assert_eq!(
        (h.seq, q.ask_price, q.ask_shares, q.bid_price),
        (5, 200, 100, 0)
    );
    assert!(f.books().order(1).is_none());
    assert_eq!(f.books().book(9).unwrap().top().ask.price, 200);
}

/// The followed session's End of Session packet announcing `sequence`.
fn end_of_session(sequence: u64) -> [u8; 20] {
    MoldHeader {
        session: session(),
        sequence,
        count: 0xFFFF,
    }
    .to_bytes()
}

#[test]
fn heartbeats_reveal_gaps_and_end_of_session_is_recorded() {
    let msgs = messages(5, 2_000, 9);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (mut f, mut stream) = fresh();
    deliver(&mut f, &mut stream, &pkts[0], None);
    deliver(&mut f, &mut stream, &pkts[1], None);
    let missing = MoldHeader::decode(&pkts[2]).unwrap();
    let hb = MoldHeader {
        session: session(),
        sequence: missing.sequence + u64::from(missing.count),
        count: 0,
    };
    deliver(&mut f, &mut stream, &hb.to_bytes(), None);
    assert_eq!(f.counters().heartbeats, 1);
    let req = f.poll_transmit().expect("heartbeat revealed the gap");
    assert_eq!((req.sequence, req.count), (missing.sequence, missing.count));
    deliver(&mut f, &mut stream, &pkts[2], None);
    assert!(!f.recovering());
    assert_eq!(f.counters().recovered, u64::from(missing.count));
    for p in &pkts[3..] {
        deliver(&mut f, &mut stream, p, None);
    }
    assert!(!f.session_ended());
    deliver(
        &mut f,
        &mut stream,
        &end_of_session(msgs.len() as u64 + 1),
        None,
    );
    assert!(!f.recovering());
    assert_eq!(f.counters().messages, msgs.len() as u64);
    believe_the_end(&mut f);
}

/// An End of Session the stream has reached is believed once `jump_quiet` has passed
/// since it arrived (at `NOW`) with nothing past it: not a moment before.
fn believe_the_end(f: &mut FeedHandler) {
    let quiet = FeedConfig::default().jump_quiet;
    assert!(!f.session_ended());
    assert_eq!(f.poll_timeout(), Some(NOW.add_duration(quiet)));
    let mut sink = |_: &str, _: &[u8]| {};
    f.handle_timeout(MonoNanos(NOW.add_duration(quiet).0 - 1), &mut sink);
    assert!(!f.session_ended());
    f.handle_timeout(NOW.add_duration(quiet), &mut sink);
    assert!(f.session_ended());
}

#[test]
fn generator_sessions_never_cross_the_book() {
    let msgs = messages(20, 40_000, 21);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let mut f = FeedHandler::new(config(0)).unwrap();
    let mut quotes = 0u64;
    let mut sink = |_: &str, p: &[u8]| {
        if let Ok(Update::Quote(h, q)) = update::decode(p) {
            quotes += 1;
            if q.bid_orders > 0 && q.ask_orders > 0 {
                assert!(
                    q.bid_price < q.ask_price,
                    "crossed book at seq {}: {q:?}",
                    h.seq
                );
            }
        }
    };
    for p in &pkts {
        f.handle_datagram(NOW, p, &mut sink);
    }
    assert!(quotes > 1000);
    assert_eq!(f.books().unknown_refs, 0);
    assert_eq!(f.books().duplicate_refs, 0);
    for l in 1..=20 {
        let t = f.books().book(l).unwrap().top();
        if t.bid.orders > 0 && t.ask.orders > 0 {
            assert!(t.bid.price < t.ask.price);
        }
    }
}

// Issue 12 item 4: stray and spoofed datagrams (regression tests, fake clock).

/// `config(0)` without an expected session: the core must choose one itself.
fn auto_config() -> FeedConfig {
    FeedConfig {
        session: None,
        ..config(0)
    }
}

/// The lossless run's stream and books, to compare an attacked run with.
fn reference(msgs: &[Message], pkts: &[Vec<u8>]) -> (FeedHandler, Stream) {
    lossless(msgs, pkts, 0)
}

/// A heartbeat of `session` announcing `seq` as the next sequence number.
fn heartbeat(session: Session, seq: u64) -> Vec<u8> {
    MoldHeader {
        session,
        sequence: seq,
        count: 0,
    }
    .to_bytes()
    .to_vec()
}

/// A valid one-message packet of `session` at `seq` (a directory message, so that
/// applying it would register a symbol: its effect would show).
fn stray(session: Session, seq: u64) -> Vec<u8> {
    let mut b = PacketBuilder::new(session, seq, 1400);
    b.push_message(&directory(1, "EVIL")).unwrap();
    b.finish().to_vec()
}

#[test]
fn foreign_session_datagram_first_does_not_drop_the_real_feed() {
    let msgs = messages(5, 3_000, 31);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (clean, clean_stream) = reference(&msgs, &pkts);
    let evil = Session::new("EVIL00001").unwrap();
    for cfg in [auto_config(), config(0)] {
        let expected_session = cfg.session;
        let mut f = FeedHandler::new(cfg).unwrap();
        let mut stream = Stream::new();
        deliver(&mut f, &mut stream, &stray(evil, 1), Some(&msgs));
        for (i, p) in pkts.iter().enumerate() {
            deliver(&mut f, &mut stream, p, Some(&msgs));
            if i == 1 {
                // Another stray in the middle of the candidates' race.
                deliver(&mut f, &mut stream, &stray(evil, 2), Some(&msgs));
            }
        }
        let c = *f.counters();
        let why = format!("session {expected_session:?}: {c:?}");
        assert_eq!(f.session(), Some(session()), "{why}");
        assert_eq!(c.foreign_session, 2, "{why}");
        assert_eq!(c.malformed, 0, "{why}");
        assert_eq!((c.lost, c.gaps, c.requests), (0, 0, 0), "{why}");
        assert_eq!(c.messages, msgs.len() as u64, "{why}");
        assert_eq!(c.published, clean.counters().published, "{why}");
        assert!(
            stream == clean_stream,
            "every update of the real session: {why}"
        );
        assert_eq!(snapshot(&f, 5), snapshot(&clean, 5));
    }
}

#[test]
fn foreign_sessions_cannot_crowd_out_the_real_one_before_adoption() {
    // Up to MAX_CANDIDATES - 2 new sessions between two real packets (more can delay
    // adoption: the documented reason to set the session in production).
    let msgs = messages(5, 3_000, 32);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (_, clean_stream) = reference(&msgs, &pkts);
    let mut f = FeedHandler::new(auto_config()).unwrap();
    let mut stream = Stream::new();
    // Strays of more sessions in all than there are candidate slots.
    let per_round = (MAX_CANDIDATES - 2) as u64;
    for (i, p) in pkts.iter().enumerate() {
        if i < 3 {
            for k in 0..per_round {
                let name = format!("X{i}{k}");
                deliver(
                    &mut f,
                    &mut stream,
                    &stray(Session::new(&name).unwrap(), 1),
                    None,
                );
            }
        }
        deliver(&mut f, &mut stream, p, None);
    }
    let c = *f.counters();
    assert_eq!(f.session(), Some(session()), "{c:?}");
    assert_eq!(c.foreign_session, 3 * per_round, "{c:?}");
    assert_eq!((c.lost, c.gaps), (0, 0), "{c:?}");
    assert!(stream == clean_stream);
}

#[test]
fn datagram_claiming_seq_plus_a_billion_is_suspect_and_the_stream_goes_on() {
    // A slow stream: every packet is followed by enough time for any re-request to
    // time out (and be declared lost, had the spoof opened a gap).
    let msgs = messages(5, 2_000, 33);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (clean, clean_stream) = reference(&msgs, &pkts);
    for (cfg, spoof_at) in [
        (config(0), 0usize),
        (config(0), 10),
        (auto_config(), 0),
        (auto_config(), 10),
    ] {
        let auto = cfg.session.is_none();
        let cfg = FeedConfig {
            retransmit_timeout: std::time::Duration::from_nanos(1_000),
            ..cfg
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        let mut stream = Stream::new();
        let mut now = NOW;
        let mut requests = Vec::new();
        for (i, p) in pkts.iter().enumerate() {
            let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
            if i == spoof_at {
                let seq = f.expected_sequence() + 1_000_000_000;
                f.handle_datagram(now, &stray(session(), seq), &mut sink);
            }
            f.handle_datagram(now, p, &mut sink);
            for _ in 0..5 {
                now = now.add_nanos(10_000);
                f.handle_timeout(now, &mut sink);
                requests.extend(std::iter::from_fn(|| f.poll_transmit()));
            }
        }
        let c = *f.counters();
        let why = format!("auto {auto}, spoof before packet {spoof_at}: {c:?}");
        assert_eq!(c.suspect_jumps, 1, "{why}");
        assert_eq!(c.accepted_jumps, 0, "{why}");
        assert_eq!((c.lost, c.gaps, c.duplicates), (0, 0, 0), "{why}");
        assert!(requests.is_empty(), "no re-request at all: {requests:?}");
        assert_eq!(c.messages, msgs.len() as u64, "{why}");
        assert_eq!(f.expected_sequence(), msgs.len() as u64 + 1, "{why}");
        assert!(
            without_receive_time(stream) == without_receive_time(clean_stream.clone()),
            "every update of the real stream: {why}"
        );
        assert_eq!(snapshot(&f, 5), snapshot(&clean, 5));
        assert!(
            f.symbol(1) != Some(b"EVIL    "),
            "the spoof was never applied"
        );
    }
}

#[test]
fn a_jump_confirmed_by_the_stream_is_followed_without_a_rerequest_storm() {
    // The exchange really jumped (or the feed joined late): packets far ahead keep
    // coming and the old position never shows life again.
    let msgs = messages(5, 2_000, 34);
    let pkts = packetize(session(), 1, &msgs, 300);
    let far = 1_000_000_000u64;
    let moved = packetize(session(), far, &msgs, 300);
    let (mut f, mut stream) = fresh();
    for p in &pkts[..5] {
        deliver(&mut f, &mut stream, p, None);
    }
    let at = f.expected_sequence();
    // One packet of the moved stream every 400 ms: believed once three agree and the
    // old position has been silent for `jump_quiet` (2 s) since the first.
    let mut believed_after = None;
    for (i, p) in moved.iter().enumerate() {
        let now = NOW.add_nanos(400_000_000 * i as u64);
        let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
        f.handle_datagram(now, p, &mut sink);
        if believed_after.is_none() && f.expected_sequence() != at {
            believed_after = Some(i + 1);
        }
    }
    assert_eq!(believed_after, Some(6), "2 s after the first of them");
    let c = *f.counters();
    assert_eq!(c.suspect_jumps, 6, "{c:?}");
    assert_eq!(c.accepted_jumps, 1, "{c:?}");
    // Followed from the three most recent: what lies before them is lost, never
    // re-requested.
    let first_kept = {
        let p = &moved[3];
        u64::from_be_bytes(p[10..18].try_into().unwrap())
    };
    assert_eq!(
        c.lost,
        first_kept - at,
        "the skipped range is lost, not re-requested: {c:?}"
    );
    assert_eq!(c.requests, 0, "{c:?}");
    assert_eq!(f.expected_sequence(), far + msgs.len() as u64);
    // And joining far into a session before any session was adopted does the same.
    let mut g = FeedHandler::new(auto_config()).unwrap();
    let mut s2 = Stream::new();
    for p in &moved {
        deliver(&mut g, &mut s2, p, None);
    }
    let c = *g.counters();
    assert_eq!(
        (c.accepted_jumps, c.suspect_jumps, c.requests),
        (1, 0, 0),
        "{c:?}"
    );
    assert_eq!(c.lost, far - 1);
    assert_eq!(c.messages, msgs.len() as u64);
}

/// Hostile-input probe: three copies of one heartbeat (or three forged packets) sent
/// at once between two real packets of a live stream had been believed as a jump: the
/// feed counted ~10^12 (or ~2^64) messages lost and applied nothing after. Now copies
/// and heartbeats confirm nothing, and a jump needs the old position silent for
/// `jump_quiet`: the live stream's next packet discards it.
#[test]
fn a_burst_of_forged_packets_never_moves_a_live_stream() {
    let msgs = messages(5, 2_000, 36);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (_, clean_stream) = reference(&msgs, &pkts);
    for forged in [
        "heartbeat copies",
        "message copies",
        "a run",
        "a run near 2^64",
    ] {
        let (mut f, mut stream) = fresh();
        for (i, p) in pkts.iter().enumerate() {
            // 20 ms between real packets; the burst lands between two of them.
            let now = NOW.add_nanos(20_000_000 * i as u64);
            let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
            f.handle_datagram(now, p, &mut sink);
            if i % 7 == 3 {
                let far = f.expected_sequence() + 1_000_000_000_000;
                let burst: Vec<Vec<u8>> = match forged {
                    "heartbeat copies" => (0..16).map(|_| heartbeat(session(), far)).collect(),
                    "message copies" => (0..16).map(|_| stray(session(), far)).collect(),
                    "a run" => (0..16).map(|k| stray(session(), far + k)).collect(),
                    _ => (0..16)
                        .map(|k| stray(session(), u64::MAX - 40 + k))
                        .collect(),
                };
                for b in &burst {
                    f.handle_datagram(now.add_nanos(1_000), b, &mut sink);
                }
            }
        }
        let c = *f.counters();
        let why = format!("{forged}: {c:?}");
        assert_eq!((c.accepted_jumps, c.lost, c.gaps), (0, 0, 0), "{why}");
        assert_eq!(c.messages, msgs.len() as u64, "{why}");
        assert!(
            without_receive_time(stream) == without_receive_time(clean_stream.clone()),
            "every real update, nothing forged: {why}"
        );
    }
}

/// A hostile-input probe (2026-12-05): between two real packets of a slow live stream
/// (2 packets a second), 200 forged heartbeats, each 99,000 (within `max_jump`) beyond
/// the one before, moved the stream 19.7 million ahead; the gap was given up and every
/// real packet after it counted a duplicate, for good. Now announcements count at most
/// `max_jump` beyond the stream's own position, and a gap given up on an announcement
/// alone is taken back when a packet then brings messages of the skipped range.
#[test]
fn a_chain_of_forged_heartbeats_neither_moves_nor_wedges_a_slow_live_stream() {
    let msgs = messages(5, 2_000, 37);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (_, clean_stream) = reference(&msgs, &pkts);
    let (mut f, mut stream) = fresh();
    let max_jump = config(0).max_jump;
    let mut bursts = 0;
    for (i, p) in pkts.iter().enumerate() {
        let now = NOW.add_nanos(500_000_000 * i as u64);
        let next_packet = now.add_nanos(500_000_000);
        let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
        f.handle_datagram(now, p, &mut sink);
        if i % 5 == 2 {
            bursts += 1;
            let real = f.expected_sequence();
            let mut at = real;
            for k in 0..200 {
                at += 99_000;
                f.handle_datagram(
                    now.add_nanos(1_000 + k),
                    &heartbeat(session(), at),
                    &mut sink,
                );
            }
            assert!(
                f.expected_sequence() == real,
                "a heartbeat moves nothing by itself"
            );
        }
        // The re-request server is silent: every gap is given up before the next
        // real packet (3 tries of 50 ms).
        while let Some(at) = f.poll_timeout().filter(|&at| at < next_packet) {
            f.handle_timeout(at, &mut sink);
            while f.poll_transmit().is_some() {}
            assert!(
                f.expected_sequence() <= 1 + msgs.len() as u64 + 2 * max_jump,
                "never more than 2 x max_jump beyond the stream: {}",
                f.expected_sequence()
            );
        }
    }
    let c = *f.counters();
    let why = format!("{c:?}");
    assert!(c.suspect_jumps > 0, "the chain was cut: {why}");
    assert!(
        c.false_ends >= bursts - 1,
        "each skip was taken back: {why}"
    );
    assert!(
        c.taken_back > 0 && c.net_lost() == 0,
        "nothing lost for good: {why}"
    );
    assert_eq!(c.messages, msgs.len() as u64, "{why}");
    assert_eq!(f.expected_sequence(), 1 + msgs.len() as u64, "{why}");
    assert!(
        without_receive_time(stream) == without_receive_time(clean_stream),
        "every real update, in order: {why}"
    );
}

#[test]
fn suspect_packets_are_bounded_and_never_opened_a_gap() {
    // A spoofer sending far-ahead packets between every real packet never gets
    // `confirm_packets` in a row; each is dropped and the stream is whole.
    let msgs = messages(5, 3_000, 35);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (_, clean_stream) = reference(&msgs, &pkts);
    let (mut f, mut stream) = fresh();
    for (i, p) in pkts.iter().enumerate() {
        deliver(&mut f, &mut stream, p, Some(&msgs));
        let seq = f.expected_sequence() + 5_000_000 + 1_000 * i as u64;
        deliver(&mut f, &mut stream, &stray(session(), seq), Some(&msgs));
        deliver(&mut f, &mut stream, &stray(session(), seq + 1), Some(&msgs));
    }
    let c = *f.counters();
    assert_eq!(c.suspect_jumps, 2 * pkts.len() as u64, "{c:?}");
    assert_eq!((c.accepted_jumps, c.requests, c.gaps, c.lost), (0, 0, 0, 0));
    assert!(stream == clean_stream);
}

/// The stream with each update's receive timestamp zeroed (for runs whose fake clock
/// advances).
fn without_receive_time(mut s: Stream) -> Stream {
    for (_, p) in &mut s {
        p[32..40].fill(0);
    }
    s
}

#[test]
fn every_datagram_is_counted_as_a_packet_good_bad_or_foreign() {
    let msgs = messages(3, 500, 11);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (mut f, mut stream) = fresh();
    let mut other = pkts[0].clone();
    other[..10].copy_from_slice(b"OTHER     ");
    let extra: [&[u8]; 3] = [&pkts[0][..5], &other, &pkts[0]];
    for p in pkts.iter().map(Vec::as_slice).chain(extra) {
        deliver(&mut f, &mut stream, p, None);
    }
    let c = *f.counters();
    assert_eq!(c.packets, pkts.len() as u64 + 3);
    assert_eq!((c.truncated_packets, c.foreign_session), (1, 1));
    assert_eq!(
        c.duplicates,
        u64::from(MoldHeader::decode(&pkts[0]).unwrap().count)
    );
}

#[test]
fn a_held_packet_overtaken_by_a_wider_retransmission_counts_its_messages_as_duplicates() {
    let msgs = [
        directory(1, "AAPL"),
        add(1, 1, Side::Buy, 100),
        add(1, 2, Side::Buy, 101),
        add(1, 3, Side::Sell, 105),
        add(1, 4, Side::Sell, 104),
    ];
    // Messages 3..=4 arrive first (held: 1..=2 are missing), then one packet with all
    // five (a retransmission grouped differently) makes the held packet wholly behind.
    let ahead = packetize(session(), 3, &msgs[2..4], 1400);
    let all = packetize(session(), 1, &msgs, 1400);
    assert_eq!((ahead.len(), all.len()), (1, 1));
    let (clean, clean_stream) = lossless(&msgs, &all, 0);

    let (mut f, mut stream) = fresh();
    deliver(&mut f, &mut stream, &ahead[0], None);
    assert!(f.recovering());
    assert!(stream.is_empty());
    deliver(&mut f, &mut stream, &all[0], None);
    let c = *f.counters();
    assert_eq!(
        c.duplicates, 2,
        "the two held messages, applied once already"
    );
    assert_eq!(c.messages, 5);
    assert_eq!(f.expected_sequence(), 6);
    assert!(!f.recovering());
    assert!(stream == clean_stream, "update streams differ");
    assert_eq!(snapshot(&f, 1), snapshot(&clean, 1));
}

fn trade(locate: u16, shares: u32, price: u32, match_number: u64) -> Message {
    Message::from(tickwire_itch::Trade {
        header: Header {
            stock_locate: locate,
            tracking_number: 0,
            timestamp: 3,
        },
        order_ref: 0,
        side: Side::Buy,
        shares,
        stock: Symbol::new("MSFT").unwrap(),
        price: Price(price),
        match_number,
    })
}

#[test]
fn a_trade_for_a_symbol_without_a_directory_is_counted_unpublished() {
    let mut b = PacketBuilder::new(session(), 1, 1400);
    b.push_message(&directory(2, "MSFT")).unwrap();
    b.push_message(&trade(7, 300, 1_234_500, 41)).unwrap();
    b.push_message(&trade(2, 200, 2_000_100, 42)).unwrap();
    b.push_message(&trade(7, 100, 1_234_600, 43)).unwrap();
    let (f, stream) = after_one_packet(b.finish());
    let c = *f.counters();
    assert_eq!((c.messages, c.published, c.unpublished), (4, 1, 2));
    assert_eq!(stream.len(), 1);
    assert_eq!(stream[0].0, "md/NASDAQ/MSFT/trade");
    let Ok(Update::Trade(h, t)) = update::decode(&stream[0].1) else {
        panic!("not a trade");
    };
    assert_eq!(
        (h.seq, t.price, t.shares, t.match_number, t.source),
        (3, 2_000_100, 200, 42, b'P')
    );
}

/// Two redundant lines of one session, each losing ~5% of the packets (never the same
/// packet on both), interleaved with line B running behind line A: with a line wait
/// and no re-request server, nothing is lost, nothing is re-requested, and the update
/// stream is the lossless one.
#[test]
fn ab_lines_fill_each_others_gaps_before_any_rerequest() {
    let msgs = messages(20, 20_000, 5);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (clean, clean_stream) = lossless(&msgs, &pkts, 0);
    // A deterministic 5% per line, disjoint: hash of the index picks the line that drops.
    let drop_a = |i: usize| (i * 7919 + 13) % 20 == 0;
    let drop_b = |i: usize| !drop_a(i) && (i * 104_729 + 7) % 20 == 0;
    assert!((0..pkts.len()).any(drop_a) && (0..pkts.len()).any(drop_b));
    let mut f = FeedHandler::new(FeedConfig {
        line_wait: std::time::Duration::from_millis(2),
        ..config(0)
    })
    .unwrap();
    let mut stream = Stream::new();
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    // Line B lags three packets behind line A; the clock moves 10 µs per packet, so
    // every gap is filled long before the 2 ms wait ends.
    let lag = 3;
    for step in 0..pkts.len() + lag {
        let now = MonoNanos(1_000_000 + step as u64 * 10_000);
        if step < pkts.len() && !drop_a(step) {
            f.handle_datagram(now, &pkts[step], &mut sink);
        }
        if let Some(j) = step.checked_sub(lag).filter(|&j| !drop_b(j)) {
            f.handle_datagram(now, &pkts[j], &mut sink);
        }
        if f.poll_timeout().is_some_and(|t| now >= t) {
            f.handle_timeout(now, &mut sink);
        }
        assert!(
            f.poll_transmit().is_none(),
            "a re-request went out at step {step}"
        );
    }
    let c = *f.counters();
    assert_eq!((c.lost, c.requests), (0, 0), "{c:?}");
    assert!(c.gaps > 0 && c.line_filled == c.gaps, "{c:?}");
    assert!(c.duplicates > 0, "{c:?}");
    assert_eq!(c.messages, msgs.len() as u64);
    assert_eq!(snapshot(&f, 20), snapshot(&clean, 20));
    // Receive times differ (the clock moved): everything else is the lossless stream.
    let (got, want) = (
        without_receive_time(stream),
        without_receive_time(clean_stream),
    );
    assert!(got == want, "update streams differ");
}

/// A packet lost on both lines is re-requested once the line wait is over (not
/// before), and recovered from the server.
#[test]
fn a_packet_lost_on_both_lines_is_rerequested_after_the_line_wait() {
    let msgs = messages(5, 2_000, 9);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let wait = std::time::Duration::from_millis(2);
    let mut f = FeedHandler::new(FeedConfig {
        line_wait: wait,
        ..config(0)
    })
    .unwrap();
    let mut stream = Stream::new();
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    let t0 = MonoNanos(1_000_000);
    f.handle_datagram(t0, &pkts[0], &mut sink);
    f.handle_datagram(t0, &pkts[2], &mut sink); // packet 1 missing on both lines
    assert!(
        f.poll_transmit().is_none(),
        "re-requested before the line wait"
    );
    let due = f.poll_timeout().expect("a gap waits for the other line");
    assert_eq!(due, t0.add_duration(wait));
    f.handle_timeout(MonoNanos(due.as_nanos() - 1), &mut sink);
    assert!(
        f.poll_transmit().is_none(),
        "re-requested before the line wait"
    );
    f.handle_timeout(due, &mut sink);
    let req = f.poll_transmit().expect("re-request after the line wait");
    for p in answer(&msgs, req) {
        f.handle_datagram(due, &p, &mut sink);
    }
    let c = *f.counters();
    assert_eq!(
        (c.gaps, c.requests, c.lost, c.line_filled),
        (1, 1, 0, 0),
        "{c:?}"
    );
    assert!(!f.recovering());
}

/// Hostile-input probe: one forged End of Session with an old sequence number (1)
/// stopped the feed partway through; an end announced before messages already applied
/// ends nothing.
#[test]
fn an_end_of_session_behind_what_was_applied_ends_nothing() {
    let msgs = messages(5, 2_000, 35);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let (mut f, mut stream) = fresh();
    for p in &pkts[..3] {
        deliver(&mut f, &mut stream, p, None);
    }
    deliver(&mut f, &mut stream, &end_of_session(1), None);
    assert!(!f.session_ended());
    for p in &pkts[3..] {
        deliver(&mut f, &mut stream, p, None);
    }
    assert_eq!(f.counters().messages, msgs.len() as u64);
    deliver(
        &mut f,
        &mut stream,
        &end_of_session(msgs.len() as u64 + 1),
        None,
    );
    believe_the_end(&mut f);
}

const MS: u64 = 1_000_000;

/// Drives `f` as the feed's driver does: each datagram at its time, the timeouts when
/// due before it, and after the last one until `until`. Returns when the driver would
/// have stopped (the session ended, nothing being recovered), if it would have.
fn drive(f: &mut FeedHandler, events: &[(u64, Vec<u8>)], until: u64) -> Option<u64> {
    fn done(f: &FeedHandler) -> bool {
        f.session_ended() && !f.recovering()
    }
    /// The timeouts due up to `upto`; when the driver would stop, if it would.
    fn timeouts(f: &mut FeedHandler, upto: u64) -> Option<u64> {
        let mut sink = |_: &str, _: &[u8]| {};
        for _ in 0..1_000_000 {
            let t = f.poll_timeout().filter(|t| t.0 <= upto)?;
            f.handle_timeout(t, &mut sink);
            if done(f) {
                return Some(t.0);
            }
        }
        panic!("the timeouts never settle");
    }
    let mut sink = |_: &str, _: &[u8]| {};
    for (at, p) in events {
        if let Some(t) = timeouts(f, *at) {
            return Some(t);
        }
        f.handle_datagram(MonoNanos(*at), p, &mut sink);
        if done(f) {
            return Some(*at);
        }
    }
    timeouts(f, until)
}

/// `pkts` one every `gap_ms` from `start`, as (time, packet).
fn timed(pkts: &[Vec<u8>], start: u64, gap_ms: u64) -> Vec<(u64, Vec<u8>)> {
    pkts.iter()
        .enumerate()
        .map(|(i, p)| (start + i as u64 * gap_ms * MS, p.clone()))
        .collect()
}

/// Hostile-input pass (2026-12-07): one forged End of Session at the next sequence
/// number stopped a live feed after 42 of 300,000 messages, and it exited 0 reporting
/// a complete session. An End of Session is believed only once `jump_quiet` (2 s) has
/// passed with nothing past it; the live stream goes past this one, and once it has
/// for `jump_quiet` the end is forgotten as false.
#[test]
fn a_forged_end_of_session_is_contradicted_by_the_live_stream() {
    let msgs = messages(5, 2_000, 38);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, _) = fresh();
    // 20 ms apart: the stream lasts several seconds.
    let mut events = timed(&pkts, NOW.0, 20);
    let first_end = MoldHeader::decode(&pkts[0]).map(|h| h.sequence + u64::from(h.count));
    let forged = end_of_session(first_end.unwrap());
    events.insert(1, (NOW.0 + MS, forged.to_vec()));
    let last = events.last().unwrap().0;
    assert_eq!(
        drive(&mut f, &events, last + 10_000 * MS),
        None,
        "stopped by the forged end"
    );
    let c = *f.counters();
    assert_eq!(
        (c.false_session_ends, c.messages, c.lost, c.requests),
        (1, msgs.len() as u64, 0, 0),
        "{c:?}"
    );
    assert_eq!(f.poll_timeout(), None);
    // The real one ends it, after its quiet.
    let real = end_of_session(msgs.len() as u64 + 1).to_vec();
    let at = last + 20_000 * MS;
    assert_eq!(
        drive(&mut f, &[(at, real)], at + 10_000 * MS),
        Some(at + 2_000 * MS)
    );
}

/// An End of Session believed during a pause of the stream (forged, or another run's)
/// is taken back by the messages that come after it.
#[test]
fn an_ended_session_is_taken_back_by_messages_past_its_end() {
    let msgs = messages(5, 2_000, 39);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, mut stream) = fresh();
    for p in &pkts[..5] {
        deliver(&mut f, &mut stream, p, None);
    }
    let end = end_of_session(f.expected_sequence());
    deliver(&mut f, &mut stream, &end, None);
    believe_the_end(&mut f);
    for p in &pkts[5..] {
        deliver(&mut f, &mut stream, p, None);
    }
    assert!(!f.session_ended());
    assert_eq!(f.counters().messages, msgs.len() as u64);
}

/// Review: a forged End of Session 5,000 ahead of a live stream that pauses (60 ms
/// every 100 packets) stopped the feed at packet 300 with 2,483 messages counted lost:
/// the pauses used up the gap's tries, the give-up reached the end, and the end was
/// believed at once. Then (second review), with pauses longer than the gap's three
/// tries (200 ms), the gap up to it was given up and taken back at every pause, for
/// good. A line's packets after an End of Session go past it: it is forgotten once the
/// stream has gone on for `jump_quiet`, with what only it announced.
#[test]
fn a_forged_end_ahead_of_a_pausing_stream_stops_nothing() {
    let msgs = messages(5, 3_000, 43);
    let pkts = packetize(session(), 1, &msgs, 300);
    for pause_ms in [60, 200] {
        let (mut f, _) = fresh();
        let mut events = Vec::new();
        let mut at = NOW.0;
        for (i, p) in pkts.iter().enumerate() {
            at += if i % 100 == 99 {
                pause_ms * MS
            } else {
                10 * MS
            };
            events.push((at, p.clone()));
            if i == 9 {
                events.push((at + 1, end_of_session(5_000).to_vec()));
            }
        }
        // Well past the stream's last packet: nothing stops it (no real end came).
        let stopped = drive(&mut f, &events, at + 5_000 * MS);
        let c = *f.counters();
        assert_eq!(stopped, None, "{pause_ms} ms: {c:?}");
        assert_eq!(
            (c.messages, c.net_lost()),
            (msgs.len() as u64, 0),
            "{pause_ms} ms: {c:?}"
        );
        assert_eq!(c.false_session_ends, 1, "{pause_ms} ms: {c:?}");
        assert!(
            c.requests <= 10 && c.false_ends <= 1,
            "{pause_ms} ms: {c:?}"
        );
        assert!(!f.recovering(), "{pause_ms} ms: {c:?}");
    }
}

/// Review: a forged End of Session at the next sequence number of an idle stream, whose
/// only packets are the server's heartbeats at that number, was believed after 2 s. A
/// heartbeat after an End of Session goes past it (a server sends none after its end).
#[test]
fn heartbeats_after_an_end_of_session_contradict_it() {
    let msgs = messages(5, 2_000, 44);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, _) = fresh();
    let mut events = timed(&pkts[..10], NOW.0, 10);
    // The next sequence number after the ten packets.
    let mut probe = FeedHandler::new(config(0)).unwrap();
    let mut sink = |_: &str, _: &[u8]| {};
    for (_, p) in &events {
        probe.handle_datagram(NOW, p, &mut sink);
    }
    let next = probe.expected_sequence();
    let t = events.last().unwrap().0;
    events.push((t + MS, end_of_session(next).to_vec()));
    for k in 1..=5 {
        events.push((t + k * 1_000 * MS, heartbeat(session(), next)));
    }
    // The first heartbeat goes past it; the stream still there 2 s later proves it
    // false: forgotten, and the feed runs on.
    assert_eq!(drive(&mut f, &events, t + 60_000 * MS), None);
    assert_eq!(f.counters().false_session_ends, 1);
    assert_eq!(f.poll_timeout(), None);
}

/// Review: after a real end, one forged heartbeat beyond it kept the feed running for
/// good (it cleared the end). It only starts the quiet again.
#[test]
fn one_packet_past_a_real_end_delays_the_stop_only() {
    let msgs = messages(5, 2_000, 45);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, _) = fresh();
    let mut events = timed(&pkts, NOW.0, 1);
    let t = events.last().unwrap().0;
    let e = msgs.len() as u64 + 1;
    for k in 0..3 {
        events.push((t + MS + k, end_of_session(e).to_vec()));
    }
    events.push((t + 500 * MS, heartbeat(session(), e + 1)));
    let stopped = drive(&mut f, &events, t + 60_000 * MS).expect("the feed stops");
    // The gap the heartbeat opened is given up (~150 ms), then 2 s of quiet.
    assert!(
        stopped > t + 2_500 * MS && stopped < t + 3_000 * MS,
        "{stopped}"
    );
}

/// Review: a packet held since before the End of Session arrived and applied after it
/// went past the end unnoticed.
#[test]
fn messages_applied_past_the_end_from_the_hold_contradict_it() {
    let msgs = messages(5, 2_000, 46);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, _) = fresh();
    let mut sink = |_: &str, _: &[u8]| {};
    f.handle_datagram(NOW, &pkts[0], &mut sink);
    // pkts[2] held (pkts[1] missing), then an End of Session at pkts[1]'s end.
    f.handle_datagram(NOW, &pkts[2], &mut sink);
    let h1 = MoldHeader::decode(&pkts[1]).unwrap();
    let e = h1.sequence + u64::from(h1.count);
    f.handle_datagram(NOW, &end_of_session(e), &mut sink);
    // pkts[1] comes back: pkts[2] (past the end) is applied from the hold.
    f.handle_retransmission(NOW.add_nanos(MS), &pkts[1], &mut sink);
    assert!(f.expected_sequence() > e);
    // Its quiet starts again when the messages past it were applied (1 ms later).
    let mut sink = |_: &str, _: &[u8]| {};
    f.handle_timeout(NOW.add_nanos(2_000 * MS), &mut sink);
    assert!(!f.session_ended(), "the end was gone past");
    f.handle_timeout(NOW.add_nanos(2_001 * MS), &mut sink);
    assert!(f.session_ended(), "silence after it");
}

/// Hostile-input pass (2026-12-07): 9,000 forged one-message packets within `max_jump`
/// ahead of a live stream filled the hold, and each further one gave up the gap at the
/// live position: 86,627 real messages were declared lost and the real packets after
/// them counted duplicates. While a line brings packets in order below the hold, the
/// packets furthest ahead make room instead.
#[test]
fn forged_packets_filling_the_hold_ahead_of_a_live_stream_lose_nothing() {
    let msgs = messages(5, 2_000, 40);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (_, clean_stream) = reference(&msgs, &pkts);
    let mut f = FeedHandler::new(FeedConfig {
        max_held_packets: 64,
        ..config(0)
    })
    .unwrap();
    let mut stream = Stream::new();
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    let mut forged = 0u64;
    for (i, p) in pkts.iter().enumerate() {
        // 1 ms apart, the timeouts run as the driver runs them: the gap up to the
        // first forged packet is filled by the live stream, never given up.
        let now = NOW.add_nanos(1_000_000 * i as u64);
        if f.poll_timeout().is_some_and(|t| t <= now) {
            f.handle_timeout(now, &mut sink);
        }
        f.handle_datagram(now, p, &mut sink);
        // After each real packet, 20 forged ones ahead of the session's end (so that
        // none is ever applied), spread over 50,000 sequence numbers.
        for _ in 0..20 {
            let seq = msgs.len() as u64 + 10 + (forged * 7_919) % 50_000;
            f.handle_datagram(now.add_nanos(1_000), &stray(session(), seq), &mut sink);
            forged += 1;
        }
    }
    let c = *f.counters();
    assert_eq!((c.lost, c.messages), (0, msgs.len() as u64), "{c:?}");
    assert!(c.overflow > 0, "the hold never filled: {c:?}");
    assert!(
        without_receive_time(stream) == without_receive_time(clean_stream),
        "every real update: {c:?}"
    );
}

/// Hostile-input pass (2026-12-07): one forged heartbeat 90,000 ahead of a live stream
/// drew 7,020 re-requests, one per live packet: each moved the gap on and re-requested
/// at once. A line's packets filling the gap inside the range already asked for ask for
/// nothing new.
#[test]
fn an_end_announced_ahead_of_a_live_stream_draws_no_rerequest_per_packet() {
    let msgs = messages(5, 2_000, 41);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, mut stream) = fresh();
    deliver(&mut f, &mut stream, &pkts[0], None);
    let ahead = f.expected_sequence() + 5_000;
    deliver(&mut f, &mut stream, &heartbeat(session(), ahead), None);
    assert!(f.recovering());
    for p in &pkts[1..] {
        deliver(&mut f, &mut stream, p, None);
    }
    let c = *f.counters();
    assert_eq!(c.messages, msgs.len() as u64, "{c:?}");
    // One request per 1,000 messages (`max_request_count`) the stream moved through,
    // not one per packet (the stream has ~200 packets).
    assert!(pkts.len() > 100);
    assert!(c.requests <= 3, "{} packets drew {c:?}", pkts.len());
}

/// A partial answer from the re-request server still draws the next request at once.
#[test]
fn a_partial_answer_draws_the_next_rerequest_at_once() {
    let msgs = messages(5, 2_000, 42);
    let pkts = packetize(session(), 1, &msgs, 300);
    let (mut f, mut stream) = fresh();
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    f.handle_datagram(NOW, &pkts[0], &mut sink);
    // Packets 1..=4 lost; 5 held.
    f.handle_datagram(NOW, &pkts[5], &mut sink);
    let req = f.poll_transmit().expect("a re-request for the gap");
    // The server answers with the first missing packet only.
    f.handle_retransmission(NOW, &pkts[1], &mut sink);
    let next = f.poll_transmit().expect("the rest asked for at once");
    assert!(next.sequence > req.sequence);
    assert_eq!(next.sequence, f.expected_sequence());
    // The same packet from a line (a late, reordered copy) asks for nothing new.
    let (mut g, mut stream) = fresh();
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    g.handle_datagram(NOW, &pkts[0], &mut sink);
    g.handle_datagram(NOW, &pkts[5], &mut sink);
    g.poll_transmit().expect("a re-request for the gap");
    g.handle_datagram(NOW, &pkts[1], &mut sink);
    assert_eq!(g.poll_transmit(), None);
    assert!(g.recovering());
}

/// Review: with the hold full during a gap, a packet reordered just after the loss
/// (p12 before p10) counted as the stream being alive below the hold for the whole
/// life of the gap, so every live packet after it, all held ahead, was dropped: one
/// lost packet (p11) became 2,432 lost messages. Also with A/B lines, line B 2 ms
/// behind bringing p10, p11 lost on both.
#[test]
fn a_reordered_packet_beside_a_loss_loses_only_the_lost_packet() {
    let msgs = messages(5, 4_000, 47);
    let pkts = packetize(session(), 1, &msgs, 300);
    let count = |p: &[u8]| u64::from(MoldHeader::decode(p).unwrap().count);
    let cfg = FeedConfig {
        max_held_packets: 16,
        ..config(0)
    };
    // Reordered: p0..p9, p12, p10, p13..; p11 lost. One packet a millisecond.
    let mut order: Vec<usize> = (0..10).collect();
    order.extend([12, 10]);
    order.extend(13..pkts.len());
    let reordered: Vec<Vec<u8>> = order.iter().map(|&i| pkts[i].clone()).collect();
    let mut f = FeedHandler::new(cfg.clone()).unwrap();
    let events = timed(&reordered, NOW.0, 1);
    drive(&mut f, &events, events.last().unwrap().0 + 5_000 * MS);
    let c = *f.counters();
    assert_eq!(c.lost, count(&pkts[11]), "{c:?}");
    // A/B: line A lost p10 and p11, line B (2 or 5 ms behind) lost p11 only.
    for lag in [2, 5] {
        let mut events: Vec<(u64, Vec<u8>)> = Vec::new();
        for (i, p) in pkts.iter().enumerate() {
            let at = NOW.0 + i as u64 * MS;
            if i != 10 && i != 11 {
                events.push((at, p.clone()));
            }
            if i != 11 {
                events.push((at + lag * MS + 1, p.clone()));
            }
        }
        events.sort_by_key(|e| e.0);
        let mut f = FeedHandler::new(cfg.clone()).unwrap();
        drive(&mut f, &events, events.last().unwrap().0 + 5_000 * MS);
        let c = *f.counters();
        assert_eq!(c.lost, count(&pkts[11]), "lag {lag} ms: {c:?}");
    }
}

/// A live stream slower than a forged burst (a packet every 20 ms; 200 forged packets
/// within 400 ms, filling a 16-packet hold in 32 ms) still loses nothing: the forged
/// packets continue nothing at the hold's top, so the last packet that looked like the
/// stream was the in-order one (the second version of the rule wanted an in-order
/// packet in the later half of the hold's life, which a stream this slow never had).
/// A burst that fills the hold between two of its packets still wins: nothing showed
/// the stream alive below the hold meanwhile (8,192 packets by default).
#[test]
fn a_forged_burst_faster_than_a_slow_stream_loses_nothing() {
    let msgs = messages(5, 2_000, 48);
    let pkts = packetize(session(), 1, &msgs, 300);
    let mut f = FeedHandler::new(FeedConfig {
        max_held_packets: 16,
        ..config(0)
    })
    .unwrap();
    let mut events = timed(&pkts, NOW.0, 20);
    let burst_at = events[5].0 + MS;
    for k in 0..200u64 {
        let seq = msgs.len() as u64 + 100 + k * 7;
        events.push((burst_at + k * 2 * MS, stray(session(), seq)));
    }
    events.sort_by_key(|e| e.0);
    drive(&mut f, &events, events.last().unwrap().0);
    let c = *f.counters();
    assert_eq!((c.lost, c.messages), (0, msgs.len() as u64), "{c:?}");
    assert!(c.overflow > 0, "{c:?}");
}

/// Second review: a forged run of consecutive sequence numbers continues the hold's
/// top like a stream; a live stream that keeps coming in order beside it (two or more
/// packets since the hold began, the last within `retransmit_timeout`) is still the
/// one followed.
#[test]
fn a_forged_consecutive_run_beside_a_live_stream_loses_nothing() {
    let msgs = messages(5, 2_000, 49);
    let pkts = packetize(session(), 1, &msgs, 300);
    let mut f = FeedHandler::new(FeedConfig {
        max_held_packets: 16,
        ..config(0)
    })
    .unwrap();
    let mut events = timed(&pkts, NOW.0, 1);
    // 200 one-message packets at consecutive numbers past the session, 1 every 0.5 ms
    // (twice the stream's rate: the hold fills in 8 ms, beside 8 live packets).
    let from = msgs.len() as u64 + 100;
    for k in 0..200u64 {
        events.push((NOW.0 + 5 * MS + k * 500_000 + 1, stray(session(), from + k)));
    }
    events.sort_by_key(|e| e.0);
    drive(&mut f, &events, events.last().unwrap().0);
    let c = *f.counters();
    assert_eq!((c.lost, c.messages), (0, msgs.len() as u64), "{c:?}");
    assert!(c.overflow > 0, "{c:?}");
}
