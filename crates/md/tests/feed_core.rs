//! The feed-handler core against real MoldUDP64 packets (built with the itch crate's
//! `PacketBuilder`) carrying sessions from the synthetic exchange (`generator`).
//!
//! Every comparison is of the byte-identical update streams (topic + payload) and of
//! the books, between a lossless run and a run with loss, reordering, duplicates or
//! garbage. The receive timestamp is the same constant in every run, so streams are
//! comparable byte for byte.

use tickwire_itch::{
    AddOrder, Header, Message, MoldHeader, PacketBuilder, Price, RetransmitRequest, Session, Side,
    StockDirectory, Symbol, MOLD_HEADER_LEN,
};
use tickwire_md::book::Level;
use tickwire_md::feed::{FeedConfig, FeedHandler};
use tickwire_md::generator::{Generator, GeneratorConfig};
use tickwire_md::update::{self, Update};

/// Receive time passed with every packet.
const NOW: u64 = 1_000_000;

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

/// Packs `msgs` into packets of at most `max_packet` bytes, first sequence `first`.
fn packetize(session: Session, first: u64, msgs: &[Message], max_packet: usize) -> Vec<Vec<u8>> {
    let mut b = PacketBuilder::new(session, first, max_packet);
    let mut out = Vec::new();
    let mut pending = false;
    for m in msgs {
        if b.push_message(m).is_err() {
            out.push(b.finish().to_vec());
            b.push_message(m).unwrap();
        }
        pending = true;
    }
    if pending {
        out.push(b.finish().to_vec());
    }
    out
}

/// The retransmission server: the packets answering `req` from the session `msgs`.
fn answer(msgs: &[Message], req: RetransmitRequest) -> Vec<Vec<u8>> {
    let from = (req.sequence - 1) as usize;
    let to = (from + usize::from(req.count)).min(msgs.len());
    packetize(req.session, req.sequence, &msgs[from.min(to)..to], 1400)
}

fn config(depth_levels: usize) -> FeedConfig {
    FeedConfig {
        depth_levels,
        order_capacity: 1 << 16,
        ..FeedConfig::default()
    }
}

/// Hands `pkt` to the core, then answers every re-request at once (if `server`).
fn deliver(f: &mut FeedHandler, stream: &mut Stream, pkt: &[u8], server: Option<&[Message]>) {
    let mut sink = |t: &str, p: &[u8]| stream.push((t.to_string(), p.to_vec()));
    f.handle_packet(NOW, pkt, &mut sink);
    if let Some(msgs) = server {
        while let Some(req) = f.poll_request() {
            for p in answer(msgs, req) {
                f.handle_packet(NOW, &p, &mut sink);
            }
        }
    }
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
        retransmit_timeout_ns: 1_000,
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
    f.handle_packet(NOW, &pkts[lost_pkt + 1], &mut sink);
    let req = f.poll_request().expect("gap re-requested");
    assert_eq!(
        (req.sequence, u64::from(req.count)),
        (first_lost, lost_count)
    );
    assert_eq!(f.counters().gaps, 1);
    assert_eq!(f.poll_timeout(), Some(NOW + 1_000));

    // Early and spurious timeouts do nothing.
    f.handle_timeout(NOW + 999, &mut sink);
    assert!(f.poll_request().is_none());
    // Two more tries, then the range is declared lost.
    for k in 1..3u64 {
        f.handle_timeout(NOW + k * 1_000, &mut sink);
        assert_eq!(f.poll_request(), Some(req));
        assert_eq!(f.counters().lost, 0);
    }
    let published_before = f.counters().published;
    f.handle_timeout(NOW + 3_000, &mut sink);
    assert!(f.poll_request().is_none());
    assert!(f.poll_timeout().is_none());
    assert_eq!(f.counters().lost, lost_count);
    assert_eq!(f.counters().requests, 3);
    // The held packet was applied at once, and the rest of the session goes on.
    assert!(f.expected_sequence() > first_lost + lost_count);
    for p in &pkts[lost_pkt + 2..] {
        f.handle_packet(NOW, p, &mut sink);
    }
    let c = *f.counters();
    assert_eq!(c.messages + c.lost, msgs.len() as u64);
    assert_eq!(f.expected_sequence(), msgs.len() as u64 + 1);
    assert!(c.published > published_before);
    assert_eq!(c.gaps, 1);
    assert_eq!(c.recovered, 0);
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

    let mut f = FeedHandler::new(config(0)).unwrap();
    let mut stream = Stream::new();
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
    assert_eq!(c.wrong_session, rounds);
    assert_eq!(c.malformed, 6 * rounds);
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
    let pkt = b.finish().to_vec();

    let mut f = FeedHandler::new(config(0)).unwrap();
    let mut stream = Stream::new();
    deliver(&mut f, &mut stream, &pkt, None);
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

#[test]
fn heartbeats_reveal_gaps_and_end_of_session_is_recorded() {
    let msgs = messages(5, 2_000, 9);
    let pkts = packetize(session(), 1, &msgs, 1400);
    let mut f = FeedHandler::new(config(0)).unwrap();
    let mut stream = Stream::new();
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
    let req = f.poll_request().expect("heartbeat revealed the gap");
    assert_eq!((req.sequence, req.count), (missing.sequence, missing.count));
    deliver(&mut f, &mut stream, &pkts[2], None);
    assert!(!f.recovering());
    assert_eq!(f.counters().recovered, u64::from(missing.count));
    for p in &pkts[3..] {
        deliver(&mut f, &mut stream, p, None);
    }
    assert!(!f.session_ended());
    let eos = MoldHeader {
        session: session(),
        sequence: msgs.len() as u64 + 1,
        count: 0xFFFF,
    };
    deliver(&mut f, &mut stream, &eos.to_bytes(), None);
    assert!(f.session_ended());
    assert!(!f.recovering());
    assert_eq!(f.counters().messages, msgs.len() as u64);
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
        f.handle_packet(NOW, p, &mut sink);
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
