//! Cross-process tests of the router: the real `tickwire router` binary on a free
//! loopback port, driven by the client library and by raw sockets.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Closed, Got, Raw, RouterProc};
use tickwire_client::{Client, ClientOptions, Error, Wait};
use tickwire_wire::frame::{self, ErrorCode};
use tickwire_wire::topic::pattern_matches;

const T: Duration = Duration::from_secs(10);

fn client(r: &RouterProc, name: &str) -> Client {
    Client::connect_with(r.addr, ClientOptions::named(name)).expect("connect")
}

/// Receives until `n` messages arrived or `timeout` passed; returns (topic, payload).
fn drain(c: &mut Client, n: usize, timeout: Duration) -> Vec<(String, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + timeout;
    while got.len() < n && Instant::now() < deadline {
        c.poll(Wait::Timeout(Duration::from_millis(50)), |m| {
            got.push((m.topic().to_string(), m.payload().to_vec()))
        })
        .expect("poll");
    }
    got
}

/// Publishes a marker on `topic` and receives until it arrives; returns what came before it.
fn until_marker(p: &mut Client, s: &mut Client, topic: &str) -> Vec<(String, Vec<u8>)> {
    p.publish(topic, b"MARKER").unwrap();
    p.flush().unwrap();
    let mut before = Vec::new();
    let deadline = Instant::now() + T;
    loop {
        assert!(Instant::now() < deadline, "marker never arrived");
        let mut done = false;
        s.poll(Wait::Timeout(Duration::from_millis(50)), |m| {
            if m.payload() == b"MARKER" {
                done = true;
            } else if !done {
                before.push((m.topic().to_string(), m.payload().to_vec()));
            }
        })
        .unwrap();
        if done {
            return before;
        }
    }
}

fn stats(c: &mut Client) -> serde_json::Value {
    serde_json::from_str(&c.stats_json().expect("stats")).expect("stats json")
}

/// A client called `name` subscribed to `pattern`.
fn subscriber(r: &RouterProc, name: &str, pattern: &str) -> Client {
    let mut c = client(r, name);
    c.subscribe(pattern).unwrap();
    c
}

/// The row of the client called `name` in a STATS document.
fn client_row(st: &serde_json::Value, name: &str) -> Option<serde_json::Value> {
    st["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
}

#[test]
fn wildcard_delivery_and_filtering_agree_with_the_reference_matcher() {
    let r = RouterProc::start(&[]);
    let subs: &[&[&str]] = &[
        &["md/NASDAQ/>"],
        &["md/*/AAPL"],
        &["md/NAS*/MSFT"],
        &["md/NAS*/>", "md/*/IBM"],
        &[">"],
        &["orders/>"],
        &["md/NASDAQ"],
    ];
    let topics = [
        "md/NASDAQ/AAPL",
        "md/NASDAQ/MSFT",
        "md/NASDAQX/MSFT",
        "md/NYSE/IBM",
        "md/NYSE/AAPL",
        "md/NASDAQ",
        "md/NASDAQ/AAPL/trades",
        "fx/EUR/USD",
    ];
    let mut clients: Vec<Client> = subs
        .iter()
        .enumerate()
        .map(|(i, pats)| {
            let mut c = client(&r, &format!("sub{i}"));
            for p in *pats {
                c.subscribe(p).unwrap();
            }
            c
        })
        .collect();
    let mut p = client(&r, "pub");
    for t in topics {
        p.publish(t, t.as_bytes()).unwrap();
    }
    p.flush().unwrap();
    let mut marker = client(&r, "marker");
    for (pats, c) in subs.iter().zip(&mut clients) {
        c.subscribe("zz/marker").unwrap();
        let got = until_marker(&mut marker, c, "zz/marker");
        let want: Vec<&str> = topics
            .iter()
            .copied()
            .filter(|t| pats.iter().any(|p| pattern_matches(p, t)))
            .collect();
        let got_topics: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(got_topics, want, "subscriber with {pats:?}");
        for (t, payload) in &got {
            assert_eq!(t.as_bytes(), &payload[..]);
        }
    }
}

#[test]
fn overlapping_subscriptions_deliver_each_message_once() {
    let r = RouterProc::start(&[]);
    let mut s = client(&r, "overlap");
    for pat in ["md/NASDAQ/AAPL", "md/*/AAPL", "md/NAS*/AAPL", "md/>", ">"] {
        s.subscribe(pat).unwrap();
    }
    let mut p = client(&r, "pub");
    for i in 0..100u32 {
        p.publish("md/NASDAQ/AAPL", &i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    let got = until_marker(&mut p, &mut s, "md/NASDAQ/AAPL");
    assert_eq!(got.len(), 100);
    let st = stats(&mut s);
    let me = client_row(&st, "overlap").unwrap();
    assert_eq!(me["msgs_out"], 101);
    assert_eq!(me["subscriptions"], 5);
}

#[test]
fn unsubscribe_stops_delivery_and_leaves_other_patterns() {
    let r = RouterProc::start(&[]);
    let mut s = subscriber(&r, "sub", "a/>");
    s.subscribe("b/>").unwrap();
    let mut p = client(&r, "pub");
    p.publish("a/1", b"x").unwrap();
    let got = until_marker(&mut p, &mut s, "b/marker");
    assert_eq!(got.len(), 1);
    s.unsubscribe("a/>").unwrap();
    p.publish("a/1", b"y").unwrap();
    let got = until_marker(&mut p, &mut s, "b/marker");
    assert!(got.is_empty(), "delivered after unsubscribe: {got:?}");
    // Unsubscribing again is a request error, not a disconnect.
    match s.unsubscribe("a/>") {
        Err(Error::Rejected { code, .. }) => assert_eq!(code, ErrorCode::NOT_SUBSCRIBED),
        other => panic!("expected NOT_SUBSCRIBED, got {other:?}"),
    }
    assert_eq!(stats(&mut s)["router"]["subscriptions"], 1);
}

#[test]
fn messages_from_one_publisher_arrive_in_order() {
    let r = RouterProc::start(&[]);
    let mut s = subscriber(&r, "sub", "seq/>");
    let mut p = client(&r, "pub");
    const N: u64 = 50_000;
    for i in 0..N {
        let topic = if i % 2 == 0 { "seq/even" } else { "seq/odd" };
        p.publish(topic, &i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    let got = drain(&mut s, N as usize, Duration::from_secs(60));
    assert_eq!(got.len() as u64, N);
    for (i, (_, payload)) in got.iter().enumerate() {
        assert_eq!(
            u64::from_le_bytes(payload[..8].try_into().unwrap()),
            i as u64
        );
    }
}

#[test]
fn invalid_pattern_is_rejected_and_the_client_stays_connected() {
    let r = RouterProc::start(&[]);
    let mut raw = Raw::hello(r.addr, "raw");
    for (i, bad) in ["a//b", "a*b", ">/x", "", "md/>/x"].iter().enumerate() {
        raw.subscribe(i as u32 + 1, bad);
        match raw.next(T) {
            Ok(Got::Error {
                code,
                fatal: false,
                request_id,
                ..
            }) => {
                assert_eq!(code, ErrorCode::INVALID_PATTERN, "{bad:?}");
                assert_eq!(request_id, i as u32 + 1);
            }
            other => panic!("{bad:?}: expected INVALID_PATTERN, got {other:?}"),
        }
    }
    raw.subscribe(99, "ok/>");
    assert_eq!(raw.next(T), Ok(Got::Ack(99)));
    raw.publish("ok/1", b"still here");
    assert!(matches!(raw.next(T), Ok(Got::Message { payload, .. }) if payload == b"still here"));
}

/// A healthy publisher/subscriber pair keeps working: the router carried on.
fn assert_router_healthy(r: &RouterProc) {
    let mut s = client(r, "healthy-sub");
    s.subscribe("health/>").unwrap();
    let mut p = client(r, "healthy-pub");
    for i in 0..1000u32 {
        p.publish("health/x", &i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    assert_eq!(drain(&mut s, 1000, T).len(), 1000);
}

#[test]
fn bad_input_gets_a_clear_error_and_harms_no_one_else() {
    let r = RouterProc::start(&["--max-frame", "64K"]);
    // A healthy subscriber connected through all of it.
    let mut watcher = subscriber(&r, "watcher", "w/>");
    let mut wp = client(&r, "watcher-pub");
    let mut sent = 0u32;

    let cases: Vec<(&str, Vec<u8>, bool, ErrorCode)> = {
        let mut v = Vec::new();
        let mut ping_short = Vec::new();
        frame::encode_ping(&mut ping_short, 1);
        ping_short.truncate(12);
        ping_short[0] = 12;
        v.push((
            "malformed PING",
            ping_short,
            true,
            ErrorCode::MALFORMED_FRAME,
        ));
        v.push((
            "oversize length",
            0xFFFF_FFF0u32.to_le_bytes().to_vec(),
            true,
            ErrorCode::FRAME_TOO_LARGE,
        ));
        v.push((
            "above max_frame",
            (70_000u32).to_le_bytes().to_vec(),
            true,
            ErrorCode::FRAME_TOO_LARGE,
        ));
        v.push((
            "unknown kind",
            vec![8, 0, 0, 0, 0x7e, 0, 0, 0],
            true,
            ErrorCode::UNKNOWN_KIND,
        ));
        let bad_topic = common::publish_frame("a//b", b"x");
        v.push((
            "invalid topic",
            bad_topic.clone(),
            true,
            ErrorCode::INVALID_TOPIC,
        ));
        let wild = common::publish_frame("md/*/AAPL", b"x");
        v.push(("wildcard topic", wild, true, ErrorCode::INVALID_TOPIC));
        let publish = common::publish_frame("w/x", b"x");
        v.push((
            "publish before handshake",
            publish,
            false,
            ErrorCode::HANDSHAKE,
        ));
        let mut hello2 = Vec::new();
        frame::encode_hello(&mut hello2, frame::PROTOCOL_VERSION, "again");
        v.push(("second HELLO", hello2, true, ErrorCode::HANDSHAKE));
        let mut v9 = Vec::new();
        frame::encode_hello(&mut v9, 9, "future");
        v.push((
            "unsupported version",
            v9,
            false,
            ErrorCode::UNSUPPORTED_VERSION,
        ));
        let mut welcome = Vec::new();
        frame::encode_welcome(&mut welcome, 1, 1024, "me");
        v.push((
            "router-only frame",
            welcome,
            true,
            ErrorCode::UNEXPECTED_KIND,
        ));
        let mut guaranteed = common::publish_frame("w/x", b"x");
        guaranteed[5] = frame::flags::GUARANTEED;
        v.push((
            "guaranteed publish without SEQ",
            guaranteed,
            true,
            ErrorCode::MALFORMED_FRAME,
        ));
        let mut unopened = Vec::new();
        frame::encode_publish(
            &mut unopened,
            "w/x",
            b"x",
            frame::PublishOptions {
                seq: Some(1),
                publisher_send: None,
            },
            u32::MAX,
        )
        .unwrap();
        unopened[5] |= frame::flags::GUARANTEED;
        v.push((
            "guaranteed publish before PUB_OPEN",
            unopened,
            true,
            ErrorCode::NOT_OPEN,
        ));
        let mut unknown = common::publish_frame("w/x", b"x");
        unknown[5] = 0x40;
        v.push(("unknown flag", unknown, true, ErrorCode::MALFORMED_FRAME));
        v
    };
    // Every case ends in a fatal error: one error disconnect each.
    let fatal_cases = cases.len();
    for (what, bytes, handshake_first, code) in cases {
        let mut raw = if handshake_first {
            Raw::hello(r.addr, what)
        } else {
            Raw::connect(r.addr)
        };
        raw.send(&bytes);
        let text = raw.expect_fatal(code);
        assert!(!text.is_empty(), "{what}: error text is empty");
        // Everyone else is unaffected.
        wp.publish("w/x", &sent.to_le_bytes()).unwrap();
        wp.flush().unwrap();
        sent += 1;
    }
    let got = drain(&mut watcher, sent as usize, T);
    assert_eq!(got.len(), sent as usize, "the watcher lost messages");
    assert_router_healthy(&r);
    let st = stats(&mut watcher);
    assert_eq!(
        st["router"]["totals"]["disconnects_error"],
        fatal_cases as u64
    );
}

#[test]
fn stalled_and_vanished_clients_are_dropped_alone() {
    let r = RouterProc::start(&["--stall-timeout-ms", "300", "--handshake-timeout-ms", "300"]);
    // Half a frame, then silence.
    let mut half = Raw::hello(r.addr, "half");
    let p = common::publish_frame("a/b", &[0; 100]);
    half.send(&p[..20]);
    half.expect_fatal(ErrorCode::STALLED);
    // Connected, never says HELLO.
    let mut mute = Raw::connect(r.addr);
    mute.expect_fatal(ErrorCode::STALLED);
    // Vanishes in the middle of a frame.
    let mut gone = Raw::hello(r.addr, "gone");
    gone.send(&p[..30]);
    drop(gone);
    // A huge length field announced, a few bytes sent, then gone: nothing is allocated
    // for it (the length is above max_frame and rejected at once).
    let mut liar = Raw::hello(r.addr, "liar");
    liar.send(&(16u32 << 20).to_le_bytes());
    liar.expect_fatal(ErrorCode::FRAME_TOO_LARGE);
    assert_router_healthy(&r);
}

#[test]
fn connections_beyond_the_limit_are_refused_with_a_reason() {
    let r = RouterProc::start(&["--max-clients", "3"]);
    let _a = Raw::hello(r.addr, "a");
    let _b = Raw::hello(r.addr, "b");
    let mut c = client(&r, "c");
    let mut d = Raw::connect(r.addr);
    let text = d.expect_fatal(ErrorCode::TOO_MANY_CLIENTS);
    assert!(text.contains("limit"), "{text}");
    // The connected ones still work.
    assert!(c.ping().is_ok());
    assert_eq!(stats(&mut c)["router"]["totals"]["refused"], 1);
}

/// Connects a subscriber to `flood/>` that then stops reading (tiny receive buffer).
fn stalled_subscriber(r: &RouterProc) -> Raw {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&r.addr.into()).unwrap();
    let mut slow = Raw::from_stream(s.into());
    let mut b = Vec::new();
    frame::encode_hello(&mut b, frame::PROTOCOL_VERSION, "stalled");
    slow.send(&b);
    assert!(matches!(slow.next(T), Ok(Got::Welcome { .. })));
    slow.subscribe(1, "flood/>");
    assert_eq!(slow.next(T), Ok(Got::Ack(1)));
    slow
}

const FLOOD: u64 = 40_000;

/// Publishes FLOOD 600-byte messages (sequence number first) while a healthy subscriber
/// reads in its own thread; returns what the healthy one received, the discards it
/// saw, and the (still connected) healthy client. The publisher keeps at most 1,000
/// messages (~600 KB, under the 1 MiB egress limit of the tests) ahead of what the
/// healthy one has read, so a reader descheduled on a loaded machine never falls
/// behind by the limit; a subscriber that does not read at all still does.
fn flood(r: &RouterProc) -> (u64, u64, Client) {
    let mut healthy = client(r, "healthy");
    healthy.subscribe("flood/>").unwrap();
    let read = Arc::new(AtomicU64::new(0));
    let read_by_reader = read.clone();
    let reader = std::thread::spawn(move || {
        let (mut got, mut disc, mut next) = (0u64, 0u64, 0u64);
        let deadline = Instant::now() + Duration::from_secs(120);
        while got < FLOOD && Instant::now() < deadline {
            healthy
                .poll(Wait::Timeout(Duration::from_millis(50)), |m| {
                    let seq = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                    assert_eq!(seq, next, "healthy subscriber saw a gap");
                    next += 1;
                    got += 1;
                    disc += m.discarded();
                })
                .unwrap();
            read_by_reader.store(got, Ordering::Relaxed);
        }
        (got, disc, healthy)
    });
    let mut p = client(r, "pub");
    let mut m = vec![7u8; 600];
    for i in 0..FLOOD {
        m[..8].copy_from_slice(&i.to_le_bytes());
        p.publish("flood/x", &m).unwrap();
        if i % 100 == 99 {
            // Paced in chunks so that a reading subscriber keeps up on a loaded machine.
            p.flush().unwrap();
            std::thread::sleep(Duration::from_millis(1));
            let deadline = Instant::now() + Duration::from_secs(60);
            while i + 1 > read.load(Ordering::Relaxed) + 1_000 && !reader.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "the healthy reader stopped reading"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    p.flush().unwrap();
    reader.join().unwrap()
}

/// A stalled subscriber, then a flood that the healthy subscriber receives in full;
/// returns the stalled one, which has not read yet, and the healthy one (the caller
/// keeps it connected).
fn stalled_while_flooded(r: &RouterProc) -> (Raw, Client) {
    let slow = stalled_subscriber(r);
    let (got, disc, healthy) = flood(r);
    assert_eq!(
        (got, disc),
        (FLOOD, 0),
        "the healthy subscriber must receive every message"
    );
    (slow, healthy)
}

#[test]
fn a_stalled_subscriber_loses_only_its_own_messages_and_is_told_how_many() {
    let r = RouterProc::start(&["--egress-limit", "1M", "--max-frame", "16K"]);
    let (mut slow, _healthy) = stalled_while_flooded(&r);

    // Now the stalled one reads: everything is either delivered or counted as discarded,
    // and the sequence gaps are exactly where the counts say.
    let mut delivered = 0u64;
    let mut discarded = 0u64;
    let mut expect_next = 0u64;
    while delivered + discarded < FLOOD {
        match slow.next(T) {
            Ok(Got::Message {
                payload,
                discarded: d,
                ..
            }) => {
                let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
                assert_eq!(seq, expect_next + d, "gap must equal the discard count");
                expect_next = seq + 1;
                delivered += 1;
                discarded += d;
            }
            other => {
                panic!("stalled subscriber: unexpected {other:?} after {delivered} + {discarded}")
            }
        }
    }
    assert!(
        discarded > 0,
        "the 1M egress limit should have forced discards"
    );
    assert_eq!(delivered + discarded, FLOOD);
    let mut c = client(&r, "observer");
    let st = stats(&mut c);
    let row = |name: &str| client_row(&st, name).unwrap();
    assert_eq!(row("stalled")["discards"], discarded);
    assert_eq!(row("healthy")["discards"], 0);
    assert_eq!(st["router"]["totals"]["discards"], discarded);
}

#[test]
fn slow_consumer_disconnect_policy_drops_only_the_slow_one() {
    let r = RouterProc::start(&[
        "--egress-limit",
        "1M",
        "--max-frame",
        "16K",
        "--slow-consumer",
        "disconnect",
    ]);
    let (mut slow, _healthy) = stalled_while_flooded(&r);
    // The slow one reads what was queued before the cut, then the reason, then EOF.
    let mut seen_error = false;
    let mut before = 0u64;
    let end = loop {
        let g = match slow.next(T) {
            Ok(g) => g,
            Err(closed) => break closed,
        };
        match g {
            Got::Message { discarded, .. } => {
                assert!(!seen_error);
                assert_eq!(discarded, 0);
                before += 1;
            }
            Got::Error { code, fatal, .. } => {
                assert_eq!(code, ErrorCode::SLOW_CONSUMER);
                assert!(fatal);
                seen_error = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(
        seen_error,
        "the slow consumer was not told why it was disconnected"
    );
    assert_ne!(
        end,
        Closed::TimedOut,
        "the slow consumer was told, but its connection was never closed"
    );
    assert!(before < FLOOD);
    let mut c = client(&r, "observer");
    let st = stats(&mut c);
    let names: HashSet<String> = st["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!names.contains("stalled"));
    assert!(names.contains("healthy"));
}

#[test]
fn stats_counters_add_up() {
    let r = RouterProc::start(&[]);
    let mut s1 = subscriber(&r, "s1", "x/>");
    let mut s2 = subscriber(&r, "s2", "x/a");
    let mut p = client(&r, "p");
    for _ in 0..300 {
        p.publish("x/a", &[0; 100]).unwrap();
    }
    for _ in 0..200 {
        p.publish("x/b", &[0; 100]).unwrap();
    }
    for _ in 0..50 {
        p.publish("nobody/here", &[0; 100]).unwrap();
    }
    p.flush().unwrap();
    // The PONG follows every frame p sent: all of them are routed before the stats
    // (the router may read p's bytes over several turns).
    p.ping().unwrap();
    assert_eq!(drain(&mut s1, 500, T).len(), 500);
    assert_eq!(drain(&mut s2, 300, T).len(), 300);
    let st = stats(&mut s1);
    let t = &st["router"]["totals"];
    assert_eq!(t["msgs_in"], 550);
    assert_eq!(t["msgs_out"], 800);
    assert_eq!(t["unrouted"], 50);
    let clients = st["clients"].as_array().unwrap();
    let sum = |k: &str| clients.iter().map(|c| c[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("msgs_in"), 550);
    assert_eq!(sum("msgs_out"), 800);
    assert_eq!(sum("subscriptions"), 2);
    let p_row = clients.iter().find(|c| c["name"] == "p").unwrap();
    assert_eq!(p_row["msgs_in"], 550);
    assert!(p_row["bytes_in"].as_u64().unwrap() >= 550 * 100);
    assert_eq!(st["router"]["clients"], 3);
}

#[test]
fn sigterm_closes_clients_cleanly_and_exits_zero() {
    let r = RouterProc::start(&[]);
    let mut raw = Raw::hello(r.addr, "raw");
    raw.subscribe(1, "x/>");
    assert_eq!(raw.next(T), Ok(Got::Ack(1)));
    let status = r.terminate();
    assert!(status.success(), "router exit status {status}");
    match raw.next(T) {
        Ok(Got::Close { code, .. }) => assert_eq!(code, ErrorCode::SHUTTING_DOWN),
        other => panic!("expected CLOSE(SHUTTING_DOWN), got {other:?}"),
    }
    raw.expect_eof();
}

/// 8,000 messages of 1 KiB: 8 MiB, far more than the stalled subscriber's socket
/// buffers (4 KiB receive buffer asked; the send side is at most `tcp_wmem`'s 4 MiB).
const BACKLOG: u64 = 8_000;

/// Publishes BACKLOG messages (sequence number first) to `flood/x` and waits until the
/// router has queued all of them for the stalled subscriber; returns the observer
/// client and the bytes still in the router's egress for it.
fn queue_backlog(r: &RouterProc) -> (Client, u64) {
    let mut p = client(r, "publisher");
    for i in 0..BACKLOG {
        let mut payload = vec![0xEE; 1024];
        payload[..8].copy_from_slice(&i.to_le_bytes());
        p.publish("flood/x", &payload).unwrap();
    }
    p.flush().unwrap();
    let mut observer = client(r, "observer");
    let deadline = Instant::now() + T;
    loop {
        let st = stats(&mut observer);
        let row = client_row(&st, "stalled").expect("the stalled subscriber is connected");
        if row["msgs_out"].as_u64() == Some(BACKLOG) {
            assert_eq!(row["discards"], 0, "{row}");
            let pending = row["egress_pending"].as_u64().unwrap();
            return (observer, pending);
        }
        assert!(
            Instant::now() < deadline,
            "the router never queued the backlog: {row}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_flushes_a_backlog_larger_than_the_socket_buffers_then_closes() {
    let r = RouterProc::start(&["--egress-limit", "64MiB"]);
    let mut slow = stalled_subscriber(&r);
    let (observer, pending) = queue_backlog(&r);
    assert!(
        pending > 4 << 20,
        "the backlog must be in the router, not in socket buffers: {pending} bytes pending"
    );
    drop(observer);
    // The subscriber starts reading only after the SIGTERM.
    r.sigterm();
    let mut next_seq = 0u64;
    let end = loop {
        match slow.next(T) {
            Ok(Got::Message { payload, .. }) => {
                let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
                assert_eq!(seq, next_seq, "messages lost or reordered in the flush");
                next_seq += 1;
            }
            Ok(Got::Close { code, .. }) => break code,
            other => {
                panic!("after {next_seq} messages: expected a MESSAGE or CLOSE, got {other:?}")
            }
        }
    };
    assert_eq!(
        next_seq, BACKLOG,
        "every queued message is delivered before the CLOSE"
    );
    assert_eq!(end, ErrorCode::SHUTTING_DOWN);
    slow.expect_eof();
    let status = r.wait_exit();
    assert!(status.success(), "router exit status {status}");
}

#[test]
fn a_client_that_never_reads_its_error_is_still_closed_after_the_linger() {
    let (r, log) = RouterProc::start_logged(&["--egress-limit", "64MiB"]);
    let mut slow = stalled_subscriber(&r);
    let (mut observer, _) = queue_backlog(&r);
    // A fatal error for the stalled client: its ERROR is queued behind megabytes it
    // does not read, so it cannot be flushed; the router must close it anyway.
    let bad = common::publish_frame("bad//topic", b"x");
    slow.send(&bad);
    let line = log.wait_for(&["disconnecting client", "stalled", "invalid topic"], T);
    assert!(line.is_some(), "no disconnect logged:\n{}", log.text());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = stats(&mut observer);
        let gone = !st["clients"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "stalled");
        if gone {
            assert_eq!(st["router"]["totals"]["disconnects_error"], 1, "{st}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the router kept a client whose error it could not deliver: {st}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its socket is closed: reading drains what was flushed, then ends (EOF or reset),
    // never a silent open connection.
    let end = loop {
        match slow.next(T) {
            Ok(Got::Message { .. }) => {}
            Ok(Got::Error { code, fatal, .. }) => {
                assert_eq!(code, ErrorCode::INVALID_TOPIC);
                assert!(fatal);
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(closed) => break closed,
        }
    };
    assert_ne!(end, Closed::TimedOut, "the connection was left open");
    assert_router_healthy(&r);
}

#[test]
fn stats_counters_are_exact_after_a_load() {
    const N: u64 = 50_000;
    let r = RouterProc::start(&[]);
    let all = subscriber(&r, "all", "load/>");
    let evens = subscriber(&r, "evens", "load/even");
    let readers = [("all", all, N), ("evens", evens, N / 2)].map(|(name, mut c, want)| {
        std::thread::spawn(move || {
            let got = drain(&mut c, want as usize, Duration::from_secs(60));
            assert_eq!(got.len() as u64, want, "{name} received");
            c
        })
    });
    let mut p = client(&r, "loader");
    for i in 0..N {
        let topic = if i % 2 == 0 { "load/even" } else { "load/odd" };
        p.publish(topic, &i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    let mut readers = readers.map(|h| h.join().expect("reader thread"));
    let st = stats(&mut readers[0]);
    let t = &st["router"]["totals"];
    assert_eq!(t["msgs_in"], N, "{st}");
    assert_eq!(t["msgs_out"], N + N / 2, "{st}");
    assert_eq!(t["unrouted"], 0, "{st}");
    assert_eq!(t["discards"], 0, "{st}");
    let row = |name: &str| client_row(&st, name).unwrap_or_else(|| panic!("no {name} in {st}"));
    assert_eq!(row("loader")["msgs_in"], N);
    assert_eq!(row("all")["msgs_out"], N);
    assert_eq!(row("evens")["msgs_out"], N / 2);
    // A PUBLISH is 8 (header) + 9 or 8 (topic `load/even` or `load/odd`) + 8 (payload)
    // bytes: bytes_in counts at least those (HELLO and the rest come on top).
    let publish_bytes = N / 2 * 25 + N / 2 * 24;
    let loader_in = row("loader")["bytes_in"].as_u64().unwrap();
    assert!(
        loader_in >= publish_bytes,
        "loader bytes_in {loader_in} < {publish_bytes}"
    );
}

/// The `tickwire-spool-*` directories in `tmp`.
fn temp_spools(tmp: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("tickwire-spool-"))
        })
        .collect();
    v.sort();
    v
}

/// Starts `tickwire router --listen 127.0.0.1:0` with `TMPDIR=tmp` and waits for its
/// banner.
fn port_zero_router(tmp: &std::path::Path) -> std::process::Child {
    use std::io::BufRead;
    let mut child = common::cli(&["router", "--listen", "127.0.0.1:0"])
        .env("TMPDIR", tmp)
        .env("TICKWIRE_LOG", "info")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening on"), "{line:?}");
    child
}

/// A router on port 0 keeps its spool in a temporary directory, removed when it stops;
/// one killed outright (SIGKILL) cannot remove it, so the next router on port 0 does
/// (before, each killed benchmark or test router left tens of megabytes in /tmp).
#[test]
fn a_killed_port_zero_routers_temporary_spool_is_removed_by_the_next_one() {
    let tmp = tempfile::tempdir().unwrap();
    let mut first = port_zero_router(tmp.path());
    let spools = temp_spools(tmp.path());
    assert_eq!(spools.len(), 1, "{spools:?}");
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(spools[0].exists(), "a killed router cannot clean up");

    let mut second = port_zero_router(tmp.path());
    let now = temp_spools(tmp.path());
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(
        now[0], spools[0],
        "the killed router's spool is gone, the new one's is there"
    );

    // A clean stop removes its own.
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&second),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(second.wait().unwrap().success());
    assert!(temp_spools(tmp.path()).is_empty());
}
