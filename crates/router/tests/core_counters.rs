//! The router core's counters, stats document and slot reuse, checked in the core's
//! own tests (found by the mutation-testing pass, docs/testing.md: the cross-process
//! tests in crates/tickwire covered these, the router crate's own tests did not).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use tickwire_router::core::{Core, Input, Phase};
use tickwire_router::index::Slot;
use tickwire_router::Config;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, Frame, PROTOCOL_VERSION};

const T0: u64 = 7_000_000_000;

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9))
}

fn feed(core: &mut Core, id: Slot, bytes: &[u8]) {
    assert_eq!(
        core.handle_input(id, MonoNanos(T0), bytes, bytes.len()),
        Input::Consumed(bytes.len())
    );
}

fn open(core: &mut Core, name: &str) -> Slot {
    let id = core
        .handle_accept(addr(), MonoNanos(T0), UtcNanos(0))
        .ok()
        .expect("accepted");
    let mut b = Vec::new();
    frame::encode_hello(&mut b, PROTOCOL_VERSION, name);
    feed(core, id, &b);
    drain(core, id);
    id
}

fn subscribe(core: &mut Core, id: Slot, pattern: &str) {
    let mut b = Vec::new();
    frame::encode_subscribe(&mut b, 1, pattern);
    feed(core, id, &b);
    drain(core, id);
}

fn publish(core: &mut Core, id: Slot, topic: &str, n: usize) {
    let mut b = Vec::new();
    for _ in 0..n {
        frame::encode_publish(&mut b, topic, b"payload", Default::default(), 1 << 20).unwrap();
    }
    feed(core, id, &b);
}

/// Drains `id`'s egress; returns the topics of the MESSAGE frames in it.
fn drain(core: &mut Core, id: Slot) -> Vec<String> {
    let bytes = core.egress(id).to_vec();
    core.handle_written(id, bytes.len());
    let mut topics = Vec::new();
    let mut rest = &bytes[..];
    while let Some((f, n)) = frame::decode(rest, u32::MAX).expect("well-formed egress") {
        if let Frame::Message(m) = f {
            topics.push(String::from_utf8_lossy(m.topic).into_owned());
        }
        rest = &rest[n..];
    }
    assert!(rest.is_empty());
    topics
}

fn client_row<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["clients"]
        .as_array()
        .expect("clients")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no client {name} in {doc}"))
}

#[test]
fn per_client_and_total_counters_count_every_message_once() {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let p = open(&mut core, "p");
    let a = open(&mut core, "a");
    let b = open(&mut core, "b");
    subscribe(&mut core, a, "x/>");
    subscribe(&mut core, b, "x/1");
    publish(&mut core, p, "x/1", 5);
    publish(&mut core, p, "x/2", 3);
    publish(&mut core, p, "y", 2);
    assert_eq!(drain(&mut core, a).len(), 8);
    assert_eq!(drain(&mut core, b).len(), 5);
    let doc: serde_json::Value =
        serde_json::from_str(&core.stats_json(MonoNanos(T0))).expect("stats JSON");
    assert_eq!(client_row(&doc, "p")["msgs_in"], 10);
    assert_eq!(client_row(&doc, "a")["msgs_out"], 8);
    assert_eq!(client_row(&doc, "b")["msgs_out"], 5);
    assert_eq!(client_row(&doc, "p")["msgs_out"], 0);
    let t = &doc["router"]["totals"];
    assert_eq!(t["msgs_in"], 10);
    assert_eq!(t["msgs_out"], 13);
    assert_eq!(t["unrouted"], 2);
    assert_eq!(core.totals().msgs_out, 13);
}

#[test]
fn stats_uptime_is_in_milliseconds_since_the_start() {
    let core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let doc: serde_json::Value =
        serde_json::from_str(&core.stats_json(MonoNanos(T0 + 5_250_000_000))).unwrap();
    assert_eq!(doc["router"]["uptime_ms"], 5_250);
}

#[test]
fn a_vanished_clients_subscriptions_do_not_pass_to_the_next_client_in_its_slot() {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let p = open(&mut core, "p");
    let gone = open(&mut core, "gone");
    subscribe(&mut core, gone, "secret/>");
    // The socket closes without CLOSE or error (EOF): the driver reports it.
    core.handle_closed(gone, "connection closed by the client");
    assert_eq!(core.phase(gone), None);
    let next = open(&mut core, "next");
    assert_eq!(
        next, gone,
        "the slot is reused (the case this test is about)"
    );
    publish(&mut core, p, "secret/x", 3);
    assert_eq!(
        drain(&mut core, next),
        Vec::<String>::new(),
        "the new client got the old client's subscription"
    );
    assert_eq!(core.totals().unrouted, 3);
}

/// A core whose subscriber `s` (to `x/>`) has `k` unread MESSAGE frames queued, the
/// publisher `p` and the egress limit `limit` (discard policy).
fn with_backlog(limit: usize, k: usize) -> (Core, Slot) {
    let cfg = Config {
        egress_limit: limit,
        slow_consumer: tickwire_router::SlowConsumerPolicy::Discard,
        ..Config::default()
    };
    let mut core = Core::new(cfg, MonoNanos(T0), UtcNanos(0));
    let p = open(&mut core, "p");
    let s = open(&mut core, "s");
    subscribe(&mut core, s, "x/>");
    publish(&mut core, p, "x/1", k);
    (core, s)
}

fn ping(core: &mut Core, id: Slot) {
    let mut b = Vec::new();
    frame::encode_ping(&mut b, 77);
    feed(core, id, &b);
}

#[test]
fn a_control_frame_filling_the_egress_exactly_to_its_limit_discards_nothing() {
    // Sizes as the core queues them: one MESSAGE to the subscriber, one PONG.
    let (mut core, s) = with_backlog(1 << 20, 1);
    let message = core.egress(s).len();
    drain(&mut core, s);
    ping(&mut core, s);
    let pong = core.egress(s).len();
    assert!(message > 0 && pong > 0);

    // Exactly at the limit after the PONG: nothing is discarded, nobody is cut.
    let k = 10;
    let limit = k * message + pong;
    let (mut core, s) = with_backlog(limit, k);
    assert_eq!(core.egress(s).len(), k * message);
    ping(&mut core, s);
    assert_eq!(core.egress(s).len(), limit);
    assert_eq!(drain(&mut core, s).len(), k);
    assert_eq!(core.totals().discards, 0);

    // One byte less of limit: the oldest messages make room.
    let (mut core, s) = with_backlog(limit - 1, k);
    ping(&mut core, s);
    let got = drain(&mut core, s).len() as u64;
    assert!(core.totals().discards > 0);
    assert_eq!(got + core.totals().discards, k as u64);
    assert!(core.phase(s).is_some(), "discarded, not disconnected");
}

#[test]
fn a_client_gone_by_eof_is_not_reported_closing_and_the_one_closing_still_is() {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let leaving = open(&mut core, "leaving");
    let gone = open(&mut core, "gone");
    // `leaving` says goodbye: the router answers CLOSE and starts closing it.
    let mut b = Vec::new();
    frame::encode_close(&mut b, frame::ErrorCode::NORMAL, "bye");
    assert_eq!(
        core.handle_input(leaving, MonoNanos(T0), &b, b.len()),
        Input::Closing
    );
    // `gone`'s socket reaches EOF before the driver polled: it is forgotten at once.
    core.handle_closed(gone, "connection closed by the client");
    // The answer to CLOSE is CLOSE(NORMAL), not an ERROR.
    let answer = core.egress(leaving).to_vec();
    assert!(matches!(
        frame::decode(&answer, u32::MAX),
        Ok(Some((Frame::Close { code: frame::ErrorCode::NORMAL, .. }, n))) if n == answer.len()
    ));
    let mut closing = Vec::new();
    core.poll_closing(&mut closing);
    assert_eq!(
        closing,
        [leaving],
        "the driver must close `leaving` and must not close `gone`'s slot (reusable now)"
    );
}

#[test]
fn a_stats_reply_read_to_its_end_lets_the_next_request_through_while_messages_wait() {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let p = open(&mut core, "p");
    let s = open(&mut core, "s");
    subscribe(&mut core, s, "x/>");
    let mut req = Vec::new();
    frame::encode_stats_request(&mut req, 1);
    feed(&mut core, s, &req);
    let reply = core.egress(s).len();
    assert!(reply > 0);
    // Unread, the reply makes a second request BUSY.
    let mut again = Vec::new();
    frame::encode_stats_request(&mut again, 2);
    feed(&mut core, s, &again);
    let busy = core.egress(s)[reply..].to_vec();
    assert!(matches!(
        frame::decode(&busy, u32::MAX),
        Ok(Some((Frame::Error { request_id: 2, .. }, _)))
    ));
    core.handle_written(s, reply + busy.len());
    // Messages queue behind a new reply; the client reads exactly the reply.
    feed(&mut core, s, &again);
    let reply = core.egress(s).len();
    publish(&mut core, p, "x/1", 3);
    core.handle_written(s, reply);
    // The reply was read to its end: the next request is answered, not BUSY.
    let mut third = Vec::new();
    frame::encode_stats_request(&mut third, 3);
    feed(&mut core, s, &third);
    let mut rest = core.egress(s);
    let mut kinds = Vec::new();
    while let Some((f, n)) = frame::decode(rest, u32::MAX).expect("well-formed egress") {
        kinds.push(match f {
            Frame::Message(_) => "message".to_owned(),
            Frame::StatsReply { request_id, .. } => format!("stats {request_id}"),
            other => format!("{other:?}"),
        });
        rest = &rest[n..];
    }
    assert_eq!(kinds, ["message", "message", "message", "stats 3"]);
}

#[test]
fn total_bytes_out_is_the_sum_of_the_bytes_written() {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let p = open(&mut core, "p");
    let s = open(&mut core, "s");
    subscribe(&mut core, s, "x/>");
    let before = core.totals().bytes_out;
    assert!(before > 0, "WELCOME and ACK were written");
    publish(&mut core, p, "x/1", 4);
    let queued = core.egress(s).len();
    core.handle_written(s, 10);
    core.handle_written(s, queued - 10);
    assert_eq!(core.totals().bytes_out, before + queued as u64);
}

#[test]
fn the_next_timeout_is_the_earliest_handshake_deadline_whatever_the_slot_order() {
    let hs = Config::default().handshake_timeout_ms * 1_000_000;
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let first = core
        .handle_accept(addr(), MonoNanos(T0), UtcNanos(0))
        .ok()
        .expect("accepted");
    let early = core
        .handle_accept(addr(), MonoNanos(T0), UtcNanos(0))
        .ok()
        .expect("accepted");
    // Slot 0 is freed and taken by a later connection: the lower slot now holds the
    // later deadline.
    core.handle_closed(first, "connection reset");
    let late = core
        .handle_accept(addr(), MonoNanos(T0 + 1_000_000_000), UtcNanos(0))
        .ok()
        .expect("accepted");
    assert_eq!(
        late, first,
        "the slot is reused (the case this test is about)"
    );
    core.handle_timeout(MonoNanos(T0 + 1_000_000_000));
    assert_eq!(core.poll_timeout(), Some(MonoNanos(T0 + hs)));
    // At that deadline the early client is cut, the late one is not.
    core.handle_timeout(MonoNanos(T0 + hs + 1));
    assert_eq!(core.phase(early), Some(Phase::Closing));
    assert_eq!(core.phase(late), Some(Phase::Handshake));
}

#[test]
fn a_guaranteed_publish_before_pub_open_closes_the_client_and_nothing_after_it_is_read() {
    let mut core = Core::new(Config::default(), MonoNanos(T0), UtcNanos(0));
    let c = open(&mut core, "c");
    let mut b = Vec::new();
    let opts = frame::PublishOptions {
        seq: Some(1),
        publisher_send: None,
    };
    frame::encode_publish(&mut b, "orders/new", b"x", opts, 1 << 20).unwrap();
    b[5] |= frame::flags::GUARANTEED;
    // In the same read: a SUBSCRIBE that must not be processed.
    frame::encode_subscribe(&mut b, 9, "orders/>");
    assert_eq!(
        core.handle_input(c, MonoNanos(T0), &b, b.len()),
        Input::Closing
    );
    let out = core.egress(c).to_vec();
    let mut rest = &out[..];
    let mut frames = Vec::new();
    while let Some((f, n)) = frame::decode(rest, u32::MAX).expect("well-formed egress") {
        frames.push(format!("{f:?}"));
        rest = &rest[n..];
    }
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(matches!(
        frame::decode(&out, u32::MAX),
        Ok(Some((
            Frame::Error {
                code: frame::ErrorCode::NOT_OPEN,
                fatal: true,
                ..
            },
            _
        )))
    ));
    assert_eq!(core.phase(c), Some(Phase::Closing));
}
