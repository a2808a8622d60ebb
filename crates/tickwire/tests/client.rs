//! The client library (`tickwire-client`) against the real `tickwire router` binary on
//! loopback.
//!
//! These replace the old scripted fake router: every scenario here is produced by the
//! real router, driven through its flags, other real connections, or signals
//! (SIGSTOP / SIGCONT to make it stop answering, SIGTERM to shut it down, SIGKILL for
//! an abrupt end of stream). Timing is never asserted; the few time limits below only
//! keep a broken test from hanging.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{Got, Raw, RouterProc};
use serde_json::Value;
use tickwire_client::{
    Client, ClientOptions, Error, ErrorCode, OwnedMessage, PublishOptions, Topic, TopicError, Wait,
};
use tickwire_wire::frame;

/// Upper bound for loops that wait for the router to reach some state.
const PATIENCE: Duration = Duration::from_secs(20);

/// The default options with the change `change` makes.
fn options(change: impl FnOnce(&mut ClientOptions)) -> ClientOptions {
    let mut o = ClientOptions::default();
    change(&mut o);
    o
}

fn named(name: &str) -> ClientOptions {
    options(|o| o.name = name.into())
}

/// Receives `want` payloads with `poll`, failing on any error.
fn payloads(c: &mut Client, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while got.len() < want {
        c.poll(Wait::Forever, |m| got.push(m.payload().to_vec()))
            .unwrap();
    }
    got
}

/// The router's stats document, fetched by a fresh client.
fn stats(addr: SocketAddr) -> Value {
    let mut c = Client::connect_with(addr, named("test-stats")).unwrap();
    let json = c.stats_json().unwrap();
    c.close().unwrap();
    serde_json::from_str(&json).unwrap()
}

/// The stats entry of client `id`, if the router still lists it.
fn client_entry(doc: &Value, id: u32) -> Option<Value> {
    doc["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"].as_u64() == Some(u64::from(id)))
        .cloned()
}

/// Polls the router's stats until `done` holds.
fn wait_for_stats(addr: SocketAddr, what: &str, mut done: impl FnMut(&Value) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let doc = stats(addr);
        if done(&doc) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "router never reached: {what}; last stats {doc}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn signal(router: &RouterProc, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &router.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} failed");
}

/// Stops the router process (SIGSTOP) until dropped (SIGCONT), even when a test fails:
/// the kernel still accepts connections and buffers bytes, the router answers nothing.
struct Frozen<'a>(&'a RouterProc);

impl<'a> Frozen<'a> {
    fn new(router: &'a RouterProc) -> Frozen<'a> {
        signal(router, "-STOP");
        Frozen(router)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn seq_payload(seq: u64) -> [u8; 8] {
    seq.to_le_bytes()
}

fn seq_of(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload[..8].try_into().unwrap())
}

#[test]
fn handshake_reports_ids_and_close_is_orderly() {
    let router = RouterProc::start(&["--max-frame", "64K"]);
    let a = Client::connect_with(router.addr, named("probe-a")).unwrap();
    let mut b = Client::connect_with(router.addr, named("probe-b")).unwrap();
    assert_eq!(a.router_max_frame(), 64 * 1024);
    assert_eq!(b.router_max_frame(), 64 * 1024);
    assert_ne!(a.client_id(), b.client_id());

    // The ids from WELCOME are the ones the router reports, with the names from HELLO.
    let doc: Value = serde_json::from_str(&b.stats_json().unwrap()).unwrap();
    let ea = client_entry(&doc, a.client_id()).expect("a listed");
    let eb = client_entry(&doc, b.client_id()).expect("b listed");
    assert_eq!(
        (ea["name"].as_str(), eb["name"].as_str()),
        (Some("probe-a"), Some("probe-b"))
    );

    // close() waits for the router's answer; the router then forgets the client.
    let a_id = a.client_id();
    a.close().unwrap();
    wait_for_stats(router.addr, "client a gone", |doc| {
        client_entry(doc, a_id).is_none_or(|e| e["name"] != "probe-a")
    });
    b.ping().unwrap();
    b.close().unwrap();
    // Both closes were orderly: nothing counted as an error disconnect.
    let doc = stats(router.addr);
    assert_eq!(doc["router"]["totals"]["disconnects_error"], 0, "{doc}");
}

#[test]
fn connect_refused_says_what_to_do() {
    // A port held by a socket that is bound but never listens: connecting is refused,
    // and no router of a test running alongside can take the port meanwhile (a
    // listener bound and dropped could hand its port to one; that made this flaky).
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = held.local_addr().unwrap().as_socket().unwrap();
    let err = Client::connect(addr).unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.is_fatal());
    assert_eq!(
        err.to_string(),
        format!("cannot connect to router at {addr}: connection refused (is `tickwire router` running?)")
    );
    // The CLI says the same, with no hint to add --router to `tickwire router` (the
    // hint is for suggested client commands only).
    let (st, _, err) = common::run_cli(
        &["stats", "--router", &addr.to_string()],
        std::time::Duration::from_secs(20),
    );
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains("connection refused") && !err.contains("hint: add"),
        "{err}"
    );
}

#[test]
fn handshake_refusal_is_a_close() {
    let router = RouterProc::start(&["--max-clients", "1"]);
    let _only = Raw::hello(router.addr, "the-only-one");
    match Client::connect(router.addr) {
        Err(Error::Closed { code, reason }) => {
            assert_eq!(code, ErrorCode::TOO_MANY_CLIENTS);
            assert!(!reason.is_empty());
        }
        other => panic!("expected Closed(TOO_MANY_CLIENTS), got {other:?}"),
    }
}

#[test]
fn silent_router_times_the_handshake_out() {
    let router = RouterProc::start(&[]);
    let opts = options(|o| o.connect_timeout = Duration::from_millis(300));
    let res = {
        let _frozen = Frozen::new(&router);
        Client::connect_with(router.addr, opts)
    };
    match res {
        Err(Error::Timeout { what, .. }) => assert_eq!(what, "the router's WELCOME"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    // Thawed, the router is fine.
    let c = Client::connect(router.addr).unwrap();
    c.close().unwrap();
}

/// `publish_to` a pre-checked `Topic` delivers like `publish`, with the options it is
/// given; a topic that breaks the rules is refused when the `Topic` is made.
#[test]
fn publish_to_a_checked_topic_delivers_with_its_options() {
    let router = RouterProc::start(&[]);
    let mut sub = Client::connect_with(router.addr, named("sub")).unwrap();
    sub.subscribe("md/NASDAQ/>").unwrap();
    let mut publ = Client::connect_with(router.addr, named("pub")).unwrap();
    let topic = Topic::new("md/NASDAQ/AAPL/quote").unwrap();
    let opts = PublishOptions {
        seq: Some(7),
        publisher_send: Some(123),
    };
    publ.publish_to(&topic, b"q", opts).unwrap();
    publ.flush().unwrap();
    let mut got = None;
    while got.is_none() {
        sub.poll(Wait::Forever, |m| {
            got = Some((
                m.topic().to_owned(),
                m.payload().to_vec(),
                m.seq(),
                m.stamps().map(|s| s.publisher_send),
            ))
        })
        .unwrap();
    }
    assert_eq!(
        got.unwrap(),
        (
            "md/NASDAQ/AAPL/quote".to_owned(),
            b"q".to_vec(),
            Some(7),
            Some(123)
        )
    );
    assert!(matches!(
        Topic::new("md/*/x"),
        Err(TopicError::WildcardInTopic { .. })
    ));
    assert!(Topic::new("md//x").is_err());
}

#[test]
fn messages_during_subscribe_and_ping_are_kept_in_order() {
    let router = RouterProc::start(&[]);
    let opts = options(|o| o.batch_bytes = 64 * 1024);
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    c.subscribe("md/>").unwrap();
    // The router handles one connection's frames in order, so the MESSAGEs for these
    // (our own) publishes are queued before the ACK / PONG that follow them: they
    // arrive while subscribe() and ping() wait for their answer.
    c.publish("md/a", b"1").unwrap();
    c.publish("md/b", b"2").unwrap();
    assert!(c.pending_bytes() > 0, "publishes are batched");
    c.subscribe("other/>").unwrap();
    c.publish("md/c", b"3").unwrap();
    c.ping().unwrap();
    c.publish("md/d", b"4").unwrap();
    assert_eq!(payloads(&mut c, 4), [b"1", b"2", b"3", b"4"]);
    c.close().unwrap();
}

#[test]
fn another_publishers_stream_stays_contiguous_across_subscribes() {
    let router = RouterProc::start(&[]);
    let addr = router.addr;
    let mut c = Client::connect(addr).unwrap();
    c.subscribe("feed/>").unwrap();

    // A raw publisher sends numbered messages, paced so the router never has to
    // discard for us, until told to stop; it returns the last number sent.
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut raw = Raw::hello(addr, "feeder");
            let mut seq = 0u64;
            let deadline = Instant::now() + PATIENCE;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                for _ in 0..10 {
                    raw.publish("feed/x", &seq_payload(seq));
                    seq += 1;
                }
                thread::sleep(Duration::from_millis(1));
            }
            // Anything the router still has of ours is routed before this PONG.
            let mut b = Vec::new();
            frame::encode_ping(&mut b, 7);
            raw.send(&b);
            assert_eq!(raw.next(PATIENCE), Ok(Got::Pong(7)));
            seq - 1
        })
    };

    // The stream is flowing once the first message is here.
    let first = seq_of(c.recv(Wait::Forever).unwrap().unwrap().payload());
    // Each subscribe waits for its ACK while the feed keeps arriving.
    for i in 0..50 {
        c.subscribe(&format!("other/{i}")).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let last = publisher.join().unwrap();

    let mut expect = first + 1;
    while expect <= last {
        let m = c.recv(Wait::Forever).unwrap().unwrap();
        assert_eq!(m.discarded(), 0);
        assert_eq!(seq_of(m.payload()), expect, "gap or reordering in the feed");
        expect += 1;
    }
    c.close().unwrap();
}

#[test]
fn recv_delivers_the_stash_before_newer_messages() {
    let router = RouterProc::start(&[]);
    let mut c = Client::connect(router.addr).unwrap();
    c.subscribe("a").unwrap();
    c.publish("a", b"early").unwrap();
    // "early" arrives before this ACK and is kept.
    c.subscribe("b").unwrap();
    c.publish("a", b"late").unwrap();
    c.flush().unwrap();
    let first = c.recv(Wait::Forever).unwrap().unwrap().into_owned();
    let second = c.recv(Wait::Forever).unwrap().unwrap().into_owned();
    assert_eq!(
        (&first.payload[..], &second.payload[..]),
        (&b"early"[..], &b"late"[..])
    );
    c.close().unwrap();
}

#[test]
fn late_ack_after_a_timeout_is_ignored() {
    let router = RouterProc::start(&[]);
    // 2 s: long enough for the later requests' answers on a loaded machine (the frozen
    // router's ACK is late whatever the timeout).
    let opts = options(|o| o.request_timeout = Duration::from_secs(2));
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    let res = {
        // The SUBSCRIBE reaches the kernel; the router answers only once thawed.
        let _frozen = Frozen::new(&router);
        c.subscribe("slow")
    };
    match res {
        Err(Error::Timeout { what, .. }) => assert!(what.contains("ACK"), "{what}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    // The router handled the SUBSCRIBE (its ACK comes late and is dropped), so our
    // own publish, which it handles next, comes back.
    c.publish("slow", b"after").unwrap();
    assert_eq!(payloads(&mut c, 1), [b"after"]);
    // Later requests get their own answers, not the stale ACK.
    c.subscribe("slow/2").unwrap();
    assert!(c.stats_json().unwrap().contains("\"clients\""));
    c.close().unwrap();
}

/// A client's patterns may hold `max_subscription_levels` levels in all (each level is
/// index memory in the router): one more is refused like one subscription too many,
/// an unsubscribe gives its levels back, and the connection stays usable.
#[test]
fn the_level_budget_bounds_a_clients_patterns() {
    let router = RouterProc::start(&["--max-subscription-levels", "6"]);
    let mut c = Client::connect_with(router.addr, named("levels")).unwrap();
    c.subscribe("a/b/c").unwrap();
    c.subscribe("x/*").unwrap();
    match c.subscribe("p/q") {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::TOO_MANY_SUBSCRIPTIONS);
            assert!(text.contains("at most 6 pattern levels"), "{text}");
            assert!(text.contains("holds 5, the pattern has 2"), "{text}");
        }
        other => panic!("expected Rejected(TOO_MANY_SUBSCRIPTIONS), got {other:?}"),
    }
    c.subscribe("y").unwrap();
    c.unsubscribe("a/b/c").unwrap();
    c.subscribe("p/q").unwrap();
    c.subscribe("r").unwrap();
    assert!(matches!(c.subscribe("s"), Err(Error::Rejected { .. })));
    // Still delivered on what it holds.
    let mut p = Client::connect_with(router.addr, named("levels-pub")).unwrap();
    p.publish("p/q", b"hi").unwrap();
    p.flush().unwrap();
    let m = c
        .recv(Wait::Timeout(PATIENCE))
        .unwrap()
        .expect("a message on p/q");
    assert_eq!(m.payload(), b"hi");
}

/// `max_index_nodes` bounds the subscription index of all clients together (per-client
/// budgets alone allow `max_clients` times theirs): once it is reached every client's
/// next SUBSCRIBE is refused, non-fatally, and an unsubscribe makes room again.
#[test]
fn the_router_wide_index_bound_refuses_any_client_beyond_it() {
    let router = RouterProc::start(&["--max-index-nodes", "9"]);
    let mut a = Client::connect_with(router.addr, named("nodes-a")).unwrap();
    let mut b = Client::connect_with(router.addr, named("nodes-b")).unwrap();
    a.subscribe("a/b/c").unwrap();
    b.subscribe("x/y").unwrap();
    match b.subscribe("p/q/r") {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::TOO_MANY_SUBSCRIPTIONS);
            assert!(text.contains("subscription index is full"), "{text}");
            assert!(text.contains("max_index_nodes"), "{text}");
        }
        other => panic!("expected Rejected(TOO_MANY_SUBSCRIPTIONS), got {other:?}"),
    }
    a.subscribe("a/d").unwrap();
    b.subscribe("m").unwrap();
    assert!(matches!(a.subscribe("n"), Err(Error::Rejected { .. })));
    a.unsubscribe("a/b/c").unwrap();
    b.subscribe("p/q").unwrap();
    // Both still deliver on what they hold.
    let mut p = Client::connect_with(router.addr, named("nodes-pub")).unwrap();
    p.publish("a/d", b"to a").unwrap();
    p.publish("p/q", b"to b").unwrap();
    p.flush().unwrap();
    let m = a
        .recv(Wait::Timeout(PATIENCE))
        .unwrap()
        .expect("a message on a/d");
    assert_eq!(m.payload(), b"to a");
    let m = b
        .recv(Wait::Timeout(PATIENCE))
        .unwrap()
        .expect("a message on p/q");
    assert_eq!(m.payload(), b"to b");
}

/// Patterns that branch at every level make each topic match walk all their prefixes:
/// past `max_match_work` a SUBSCRIBE is refused, non-fatally, the router's stats show
/// the bound held, and the client keeps what was acknowledged.
#[test]
fn the_match_work_bound_refuses_patterns_that_branch_at_every_level() {
    let router = RouterProc::start(&["--max-match-work", "200"]);
    let mut c = Client::connect_with(router.addr, named("walker")).unwrap();
    let (mut held, mut refused) = (Vec::new(), 0);
    for m in 0u32..128 {
        let levels: Vec<&str> = (0..7)
            .map(|i| if m >> i & 1 == 1 { "*" } else { "a" })
            .collect();
        let pattern = format!("{}/z", levels.join("/"));
        match c.subscribe(&pattern) {
            Ok(()) => held.push(pattern),
            Err(Error::Rejected { code, text }) => {
                assert_eq!(code, ErrorCode::TOO_MANY_SUBSCRIPTIONS);
                assert!(text.contains("max_match_work (200)"), "{text}");
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        refused > 0 && !held.is_empty(),
        "held {}, refused {refused}",
        held.len()
    );
    let stats: serde_json::Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
    let work = stats["router"]["match_work"].as_u64().unwrap();
    assert!(work <= 200, "{stats}");
    assert_eq!(stats["router"]["subscriptions"], held.len(), "{stats}");
    // What it holds still delivers.
    let mut p = Client::connect_with(router.addr, named("walker-pub")).unwrap();
    p.publish("a/a/a/a/a/a/a/z", b"hit").unwrap();
    p.flush().unwrap();
    let m = c.recv(Wait::Timeout(PATIENCE)).unwrap().expect("a message");
    assert_eq!(m.payload(), b"hit");
}

/// `subscribe_many` subscribes thousands of patterns in one call; past
/// `max_subscriptions` it sends every pattern anyway and reports the first refusal,
/// naming it and counting the rest, with every pattern not refused subscribed; an
/// invalid pattern anywhere in the list sends nothing; `unsubscribe_many` likewise.
#[test]
fn subscribe_many_and_unsubscribe_many_report_the_refused() {
    let router = RouterProc::start(&["--max-subscriptions", "3000"]);
    let mut c = Client::connect_with(router.addr, named("many")).unwrap();
    // An invalid pattern anywhere: nothing is sent.
    let bad = ["v/1", "v//2"];
    assert!(matches!(
        c.subscribe_many(&bad),
        Err(Error::InvalidPattern(_))
    ));
    let doc = stats(router.addr);
    let me = client_entry(&doc, c.client_id()).unwrap();
    assert_eq!(me["subscriptions"].as_u64(), Some(0), "{me}");
    let first: Vec<String> = (0..2_500).map(|i| format!("t/{i}")).collect();
    c.subscribe_many(&first).unwrap();
    let more: Vec<String> = (0..600).map(|i| format!("u/{i}")).collect();
    match c.subscribe_many(&more) {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::TOO_MANY_SUBSCRIPTIONS);
            assert!(text.starts_with("\"u/500\": "), "{text}");
            assert!(text.contains("(100 of the 600 patterns refused)"), "{text}");
        }
        other => panic!("expected Rejected(TOO_MANY_SUBSCRIPTIONS), got {other:?}"),
    }
    let doc = stats(router.addr);
    let me = client_entry(&doc, c.client_id()).unwrap();
    assert_eq!(me["subscriptions"].as_u64(), Some(3_000), "{me}");
    // The first and last of each accepted run deliver; a refused one does not (the
    // marker published after it arrives first).
    let mut p = Client::connect_with(router.addr, named("many-pub")).unwrap();
    for topic in ["t/0", "t/2499", "u/0", "u/499", "u/500", "v/1", "u/1"] {
        p.publish(topic, topic.as_bytes()).unwrap();
    }
    p.flush().unwrap();
    let got: Vec<Vec<u8>> = payloads(&mut c, 5);
    let want: [&[u8]; 5] = [b"t/0", b"t/2499", b"u/0", b"u/499", b"u/1"];
    assert_eq!(got, want);

    // unsubscribe_many the same way: one not held is counted, the others go.
    let mut drop: Vec<String> = (0..1_000).map(|i| format!("t/{i}")).collect();
    drop.insert(10, "not/held".into());
    match c.unsubscribe_many(&drop) {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::NOT_SUBSCRIBED);
            // The router's text names the pattern: not named twice.
            assert_eq!(text, "not subscribed to \"not/held\"");
            assert!(!text.contains("patterns refused"), "{text}");
        }
        other => panic!("expected Rejected(NOT_SUBSCRIBED), got {other:?}"),
    }
    let doc = stats(router.addr);
    let me = client_entry(&doc, c.client_id()).unwrap();
    assert_eq!(me["subscriptions"].as_u64(), Some(2_000), "{me}");
    for topic in ["t/0", "t/999", "t/1000"] {
        p.publish(topic, topic.as_bytes()).unwrap();
    }
    p.flush().unwrap();
    assert_eq!(payloads(&mut c, 1), [b"t/1000"]);
    c.close().unwrap();
}

/// `subscribe_many` does not wait for each answer: with the router stopped, the
/// router's socket fills with exactly `SUBSCRIBE_PIPELINE` SUBSCRIBEs (the kernel's
/// receive queue, read from /proc/net/tcp), and once the router runs again all are
/// answered.
#[test]
fn subscribe_many_keeps_a_pipeline_of_requests_in_flight() {
    let router = RouterProc::start(&[]);
    let mut c = Client::connect_with(router.addr, named("pipeline")).unwrap();
    // Many in flight, not one: what the test is about.
    const { assert!(tickwire_client::SUBSCRIBE_PIPELINE >= 256) };
    let patterns: Vec<String> = (0..2_000).map(|i| format!("p/{i}")).collect();
    let mut window = Vec::new();
    for (i, p) in patterns
        .iter()
        .take(tickwire_client::SUBSCRIBE_PIPELINE)
        .enumerate()
    {
        frame::encode_subscribe(&mut window, i as u32 + 1, p);
    }
    let frozen = Frozen::new(&router);
    let worker = thread::spawn(move || {
        let r = c.subscribe_many(&patterns);
        (c, r)
    });
    let port = router.addr.port();
    let deadline = Instant::now() + PATIENCE;
    let queued = loop {
        let q = router_receive_queue(port);
        if q == Some(window.len()) || Instant::now() > deadline {
            break q;
        }
        thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        queued,
        Some(window.len()),
        "bytes the stopped router's socket holds: {queued:?}, {} SUBSCRIBEs make {}",
        tickwire_client::SUBSCRIBE_PIPELINE,
        window.len()
    );
    drop(frozen);
    let (c, r) = worker.join().unwrap();
    r.unwrap();
    let doc = stats(router.addr);
    let me = client_entry(&doc, c.client_id()).unwrap();
    assert_eq!(me["subscriptions"].as_u64(), Some(2_000), "{me}");
    c.close().unwrap();
}

/// The receive queue (bytes not yet read) of the established IPv4 connection whose
/// local port is `port` (the router's end of the one client connected), from
/// /proc/net/tcp.
fn router_receive_queue(port: u16) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // local_address, rem_address, st ("01": ESTABLISHED), tx_queue:rx_queue.
        if f.get(1)?.ends_with(&local) && *f.get(3)? == "01" {
            let rx = f.get(4)?.split(':').nth(1)?;
            usize::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

#[test]
fn rejected_requests_leave_the_connection_usable() {
    let router = RouterProc::start(&["--max-subscriptions", "2"]);
    let mut c = Client::connect_with(router.addr, named("rejected")).unwrap();
    // Invalid locally: never sent.
    assert!(matches!(c.subscribe("a//b"), Err(Error::InvalidPattern(_))));
    assert!(matches!(
        c.unsubscribe("a/>/b"),
        Err(Error::InvalidPattern(_))
    ));
    match c.unsubscribe("x") {
        Err(e @ Error::Rejected { .. }) => {
            assert!(!e.is_fatal());
            let Error::Rejected { code, text } = e else {
                unreachable!()
            };
            assert_eq!(code, ErrorCode::NOT_SUBSCRIBED);
            assert!(!text.is_empty());
        }
        other => panic!("expected Rejected(NOT_SUBSCRIBED), got {other:?}"),
    }
    c.subscribe("x/*").unwrap();
    c.subscribe("y").unwrap();
    match c.subscribe("z") {
        Err(Error::Rejected { code, .. }) => assert_eq!(code, ErrorCode::TOO_MANY_SUBSCRIPTIONS),
        other => panic!("expected Rejected(TOO_MANY_SUBSCRIPTIONS), got {other:?}"),
    }
    // The router's own INVALID_PATTERN answer (the client never sends such a pattern,
    // so a raw connection asks) is just as harmless.
    let mut raw = Raw::hello(router.addr, "raw");
    raw.subscribe(5, "a//b");
    raw.subscribe(6, "ok");
    match raw.next(PATIENCE) {
        Ok(Got::Error {
            code,
            fatal: false,
            request_id: 5,
            ..
        }) => assert_eq!(code, ErrorCode::INVALID_PATTERN),
        other => panic!("expected non-fatal INVALID_PATTERN, got {other:?}"),
    }
    assert_eq!(raw.next(PATIENCE), Ok(Got::Ack(6)));

    // Still usable: publish / receive, stats, ping.
    c.publish("x/1", b"still here").unwrap();
    assert_eq!(payloads(&mut c, 1), [b"still here"]);
    let doc: Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
    let me = client_entry(&doc, c.client_id()).unwrap();
    assert_eq!(
        (me["name"].as_str(), me["subscriptions"].as_u64()),
        (Some("rejected"), Some(2))
    );
    c.ping().unwrap();
    c.close().unwrap();
}

#[test]
fn publishes_are_batched_and_echoes_arrive_with_their_metadata() {
    const N: u64 = 100;
    let router = RouterProc::start(&[]);
    let opts = ClientOptions {
        batch_bytes: 1024,
        stamp: true,
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    c.subscribe("t/>").unwrap();
    for i in 0..N {
        let payload = vec![b'x'; i as usize];
        let topic = format!("t/{i}");
        match i % 3 {
            0 => c.publish(&topic, &payload).unwrap(),
            1 => {
                let o = PublishOptions {
                    seq: Some(i),
                    publisher_send: None,
                };
                c.publish_with(&topic, &payload, o).unwrap();
            }
            _ => {
                // An explicit stamp wins over the automatic one.
                let o = PublishOptions {
                    seq: None,
                    publisher_send: Some(1000 + i),
                };
                c.publish_with(&topic, &payload, o).unwrap();
            }
        }
        if i == 0 {
            assert!(c.pending_bytes() > 0, "a small publish waits for the batch");
        }
    }
    c.flush().unwrap();
    assert_eq!(c.pending_bytes(), 0);
    // The router routes our publishes before it answers this PING.
    c.ping().unwrap();

    // The router's shutdown (SIGTERM) closes with SHUTTING_DOWN after flushing
    // everything queued; the iterator yields it all and then ends.
    assert!(router.terminate().success());
    let got: Vec<OwnedMessage> = c.messages().collect::<Result<_, _>>().unwrap();
    assert_eq!(got.len(), N as usize);
    for (i, m) in got.iter().enumerate() {
        let i = i as u64;
        assert_eq!(m.topic, format!("t/{i}"));
        assert_eq!(m.payload.len(), i as usize);
        assert_eq!(m.discarded, 0);
        assert_eq!(m.seq, (i % 3 == 1).then_some(i));
        let s = m.stamps.expect("stamped");
        if i % 3 == 2 {
            assert_eq!(s.publisher_send, 1000 + i);
        } else {
            // The client and the router stamp with the same monotonic clock.
            assert!(
                s.publisher_send > 0 && s.publisher_send <= s.router_in,
                "{s:?}"
            );
        }
        assert!(s.router_in > 0 && s.router_in <= s.router_out, "{s:?}");
    }
    match c.recv(Wait::NoWait) {
        Err(Error::Closed { code, .. }) => assert_eq!(code, ErrorCode::SHUTTING_DOWN),
        other => panic!("expected Closed(SHUTTING_DOWN), got {other:?}"),
    }
}

/// New-user pass: `bench md-replay` showed a FH→router hop of 0.00 µs (router-in
/// before publisher-send, clamped): the router stamped a read with the turn's clock
/// reading, taken before the read, so a message published and arrived in between
/// looked routed before it was sent (without the fix this test counted 12 to 138 such
/// messages of 1,000,000 in two runs of three). A STAMPS message read with that
/// reading now reads the clock again. A streaming publisher (small batches, a spinning
/// router, a subscriber reading on its own connection) checks every message.
#[test]
fn a_streaming_publishers_stamps_never_show_the_router_before_the_send() {
    const N: u64 = 1_000_000;
    let router = RouterProc::start(&["--idle", "spin"]);
    let mut sub = Client::connect(router.addr).unwrap();
    sub.subscribe("s/x").unwrap();
    let publisher = {
        let addr = router.addr;
        thread::spawn(move || {
            let opts = ClientOptions {
                batch_bytes: 256,
                stamp: true,
                ..ClientOptions::default()
            };
            let mut p = Client::connect_with(addr, opts).unwrap();
            for _ in 0..N {
                p.publish("s/x", b"0123456789").unwrap();
            }
            p.flush().unwrap();
            p.ping().unwrap();
            p
        })
    };
    let mut early = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut got = 0;
    while got < N {
        assert!(Instant::now() < deadline, "{got} of {N} messages in 120 s");
        if let Some(m) = sub.recv(Wait::Timeout(Duration::from_millis(100))).unwrap() {
            let s = m.stamps().expect("stamped");
            if s.router_in < s.publisher_send {
                early.push((got, s.publisher_send - s.router_in));
            }
            got += 1;
        }
    }
    let _p = publisher.join().unwrap();
    assert!(
        early.is_empty(),
        "{} of {N} messages stamped router-in before publisher-send (message, ns early): {:?}",
        early.len(),
        &early[..early.len().min(10)]
    );
}

#[test]
fn end_of_stream_ends_the_iterator() {
    let mut router = RouterProc::start(&[]);
    let mut c = Client::connect(router.addr).unwrap();
    c.subscribe("a").unwrap();
    c.publish("a", b"only").unwrap();
    c.ping().unwrap();
    // An abrupt end: the router dies without a CLOSE.
    router.child.kill().unwrap();
    router.child.wait().unwrap();
    let got: Vec<_> = c.messages().map(Result::unwrap).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, b"only");
    match c.recv(Wait::NoWait) {
        Err(Error::Closed { code, reason }) => {
            assert_eq!(code, ErrorCode::NORMAL);
            assert!(
                reason.contains("without a CLOSE frame"),
                "an end of stream must not read as an orderly close: {reason}"
            );
        }
        other => panic!("expected Closed, got {other:?}"),
    }
}

#[test]
fn fatal_error_is_reported_after_the_messages_before_it() {
    // egress_limit must be at least max_frame.
    let router = RouterProc::start(&[
        "--egress-limit",
        "64K",
        "--max-frame",
        "64K",
        "--slow-consumer",
        "disconnect",
    ]);
    let addr = router.addr;
    let mut c = Client::connect_with(addr, named("sleepy")).unwrap();
    c.subscribe("flood").unwrap();
    let id = c.client_id();

    // We do not read; a raw publisher floods us until the router gives up on us.
    let mut raw = Raw::hello(addr, "flooder");
    let payload_len = 1000;
    let mut seq = 0u64;
    let deadline = Instant::now() + PATIENCE;
    loop {
        for _ in 0..500 {
            let mut p = vec![0u8; payload_len];
            p[..8].copy_from_slice(&seq_payload(seq));
            raw.publish("flood", &p);
            seq += 1;
        }
        let doc = stats(addr);
        let gone = client_entry(&doc, id).is_none_or(|e| e["name"] != "sleepy");
        if gone || doc["router"]["totals"]["disconnects_error"].as_u64() > Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the router never disconnected the slow consumer"
        );
    }

    let mut got = Vec::new();
    let err = loop {
        match c.poll(Wait::Forever, |m| got.push(seq_of(m.payload()))) {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(
        !got.is_empty(),
        "messages queued before the ERROR are delivered"
    );
    let want: Vec<u64> = (0..got.len() as u64).collect();
    assert_eq!(
        got, want,
        "the messages before the error are intact and in order"
    );
    match &err {
        Error::Closed { code, reason } => {
            assert_eq!(*code, ErrorCode::SLOW_CONSUMER);
            assert!(reason.contains("slow consumer"), "{reason}");
        }
        other => panic!("expected Closed(SLOW_CONSUMER), got {other:?}"),
    }
    // Sticky: every later call says the same.
    assert!(matches!(c.publish("a", b""), Err(Error::Closed { .. })));
    let rest: Vec<_> = c.messages().collect();
    assert!(
        matches!(
            &rest[..],
            [Err(Error::Closed {
                code: ErrorCode::SLOW_CONSUMER,
                ..
            })]
        ),
        "{rest:?}"
    );
}

#[test]
fn recv_with_a_timeout_returns_none_then_the_message() {
    let router = RouterProc::start(&[]);
    let mut c = Client::connect(router.addr).unwrap();
    c.subscribe("q/>").unwrap();
    assert!(c
        .recv(Wait::Timeout(Duration::from_millis(50)))
        .unwrap()
        .is_none());
    assert!(c.recv(Wait::NoWait).unwrap().is_none());
    let mut raw = Raw::hello(router.addr, "pub");
    raw.publish("q/1", b"hi");
    // Bounded wait; loops only because the message may be on its way.
    let deadline = Instant::now() + PATIENCE;
    let m = loop {
        if let Some(m) = c.recv(Wait::Timeout(Duration::from_millis(100))).unwrap() {
            break m.into_owned();
        }
        assert!(Instant::now() < deadline, "message never arrived");
    };
    assert_eq!((m.topic.as_str(), &m.payload[..]), ("q/1", &b"hi"[..]));
    c.close().unwrap();
}

#[test]
fn a_frame_larger_than_the_receive_buffer_grows_it() {
    let router = RouterProc::start(&["--max-frame", "1MiB"]);
    let big: Vec<u8> = (0..600_000u32).map(|i| i as u8).collect();
    let opts = options(|o| o.recv_buffer = 1024);
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    c.subscribe("big").unwrap();
    c.subscribe("small").unwrap();
    c.publish("big", &big).unwrap();
    c.publish("small", b"s").unwrap();
    let m = c.recv(Wait::Forever).unwrap().unwrap();
    assert_eq!((m.topic(), m.payload()), ("big", &big[..]));
    let m = c.recv(Wait::Forever).unwrap().unwrap();
    assert_eq!((m.topic(), m.payload()), ("small", &b"s"[..]));
    c.close().unwrap();
}

#[test]
fn local_validation_and_router_frame_limit() {
    let router = RouterProc::start(&["--max-frame", "4096"]);
    let mut c = Client::connect(router.addr).unwrap();
    assert_eq!(c.router_max_frame(), 4096);
    assert!(matches!(c.publish("a/*", b""), Err(Error::InvalidTopic(_))));
    assert!(matches!(c.publish("a/>", b""), Err(Error::InvalidTopic(_))));
    assert!(matches!(c.publish("", b""), Err(Error::InvalidTopic(_))));
    assert!(matches!(
        c.publish("a", &[0; 5000]),
        Err(Error::TooLarge(_))
    ));
    assert_eq!(c.pending_bytes(), 0);
    // Nothing was sent: the router saw no PUBLISH and the connection is fine.
    let doc: Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
    assert_eq!(client_entry(&doc, c.client_id()).unwrap()["msgs_in"], 0);
    // What fits goes through.
    c.subscribe("a").unwrap();
    c.publish("a", &[7; 2000]).unwrap();
    assert_eq!(payloads(&mut c, 1), [vec![7u8; 2000]]);
    c.close().unwrap();
}

#[test]
fn a_frame_above_our_max_frame_is_a_protocol_error() {
    let (router, log) = RouterProc::start_logged(&[]);
    let opts = ClientOptions {
        max_frame: 4096,
        name: "strict".into(),
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    c.subscribe("big").unwrap();
    let mut raw = Raw::hello(router.addr, "pub");
    raw.publish("big", &[0; 5000]);
    let err = c.recv(Wait::Forever).unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    assert!(matches!(c.recv(Wait::NoWait), Err(Error::Closed { .. })));
    // The client told the router why it left: the router received its CLOSE (a
    // client that just dropped the connection is logged with another reason).
    let line = log.wait_for(
        &["closing client", "strict", "closed at the client's request"],
        Duration::from_secs(10),
    );
    assert!(
        line.is_some(),
        "the router never got the client's CLOSE; router log:\n{}",
        log.text()
    );
    wait_for_stats(router.addr, "client gone", |doc| {
        doc["clients"].as_array().unwrap().len() == 2 // raw + the stats client
    });
    drop(raw);
}

#[test]
fn flush_waits_while_the_router_is_not_reading() {
    const N: usize = 2000;
    const SIZE: usize = 16 * 1024;
    let router = RouterProc::start(&[]);
    let opts = ClientOptions {
        batch_bytes: 0,
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(router.addr, opts).unwrap();
    let thawed = AtomicBool::new(false);
    thread::scope(|s| {
        // 32 MB is more than the socket buffers hold while the router is frozen, so
        // the publishes below block in flush until it is thawed.
        let frozen = Frozen::new(&router);
        let thawed = &thawed;
        s.spawn(move || {
            thread::sleep(Duration::from_millis(300));
            thawed.store(true, Ordering::SeqCst);
            drop(frozen);
        });
        for i in 0..N {
            c.publish("bulk", &[i as u8; SIZE]).unwrap();
        }
        assert!(
            thawed.load(Ordering::SeqCst),
            "every publish was written while the router was frozen: no back-pressure"
        );
    });
    assert_eq!(c.pending_bytes(), 0);
    // The router handles our STATS_REQUEST after every PUBLISH before it.
    let doc: Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
    let me = client_entry(&doc, c.client_id()).unwrap();
    assert_eq!(me["msgs_in"].as_u64(), Some(N as u64), "{me}");
    c.close().unwrap();
}
