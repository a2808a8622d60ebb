//! The client's guaranteed messaging against the real router
//! (`tickwire_router::Router` in a thread of this process, on 127.0.0.1, with a spool
//! in a fresh data directory): PUB_OPEN / window / ACK / NACK, resend after a router
//! restart, TAKEN_OVER, BIND / DELIVER / CONSUMER_ACK / CONSUMER_NACK / UNBIND,
//! exclusive-queue standby activation, queue requests, deliveries that arrive while a
//! request waits, and a `QueueConsumer` binding again after a restart.
//!
//! Waits are bounded (`DEADLINE`) and fail loudly; no assertion depends on timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use support::InProcessRouter;
use tickwire_client::{
    open_options, Client, ClientOptions, Error, ErrorCode, Event, GuaranteedPublisher, NackAction,
    NackReason, Outcome, QueueConsumer, QueueOp, ReconnectOptions, Start, Wait,
};
use tickwire_router::{Config, IdleStrategy, Router};

/// Longest any single wait of these tests may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);

/// A fresh, empty data directory under cargo's per-test-target temporary directory,
/// removed when dropped.
struct DataDir(PathBuf);

impl DataDir {
    fn new(name: &str) -> DataDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "gm-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        DataDir(p)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A real router with a spool, running in a thread of this process.
struct TestRouter(InProcessRouter);

impl TestRouter {
    /// A router with a spool in `dir`, on `addr` (port 0: a free one). Binding the port
    /// of a router that just stopped is retried briefly.
    fn start(dir: &DataDir, addr: SocketAddr, publish_window: u32) -> TestRouter {
        let cfg = Config {
            listen: addr,
            idle: IdleStrategy::Block,
            data_dir: Some(dir.0.clone()),
            publish_window,
            ..Config::default()
        };
        let deadline = Instant::now() + DEADLINE;
        let router = loop {
            match Router::bind(cfg.clone()) {
                Ok(r) => break r,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("router does not bind {addr}: {e}"),
            }
        };
        TestRouter(InProcessRouter::run(router))
    }

    fn addr(&self) -> String {
        self.0.addr.to_string()
    }

    /// Shuts the router down gracefully and waits for its thread.
    fn stop(self) -> SocketAddr {
        let addr = self.0.addr;
        self.0.stop();
        addr
    }
}

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn opts(name: &str) -> ClientOptions {
    ClientOptions {
        name: name.into(),
        request_timeout: DEADLINE,
        ..ClientOptions::default()
    }
}

fn connect(r: &TestRouter, name: &str) -> Client {
    Client::connect_with(r.addr().as_str(), opts(name)).unwrap()
}

fn reconnect_opts(name: &str) -> ReconnectOptions {
    ReconnectOptions {
        client: opts(name),
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(100),
        give_up_after: Some(DEADLINE),
        ..ReconnectOptions::default()
    }
}

fn create_queue(c: &mut Client, json: &str) {
    c.queue_request(QueueOp::Create, json)
        .unwrap_or_else(|e| panic!("creating queue {json}: {e}"));
}

/// The number `"key":N` in a compact JSON document (the router's queue JSON).
fn json_u64(json: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let at = json
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + pat.len();
    let digits: String = json[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {json}"))
}

fn show(c: &mut Client, queue: &str) -> String {
    c.queue_request(QueueOp::Show, queue).unwrap()
}

/// Calls `poll_events` until `done` holds, failing after `DEADLINE`.
fn poll_until(
    c: &mut Client,
    what: &str,
    mut on: impl FnMut(Event<'_>),
    mut done: impl FnMut(&Client) -> bool,
) {
    let deadline = Instant::now() + DEADLINE;
    while !done(c) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        c.poll_events(Wait::Timeout(Duration::from_millis(100)), &mut on)
            .unwrap();
    }
}

/// Calls `poll_events` until `f` has mapped `n` events to items; fails after
/// `DEADLINE`.
fn collect<T>(
    c: &mut Client,
    what: &str,
    n: usize,
    mut f: impl FnMut(Event<'_>) -> Option<T>,
) -> Vec<T> {
    let mut out = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {} of {n}",
            out.len()
        );
        c.poll_events(Wait::Timeout(Duration::from_millis(100)), |ev| {
            out.extend(f(ev))
        })
        .unwrap();
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Acked,
    Nacked(NackReason, String),
}

#[test]
fn window_acks_and_nacks_reach_the_application_once() {
    let dir = DataDir::new("window");
    let r = TestRouter::start(&dir, any_port(), 2);
    let mut admin = connect(&r, "admin");
    create_queue(
        &mut admin,
        r#"{"name":"full","subscriptions":["o/full/>"],"max_messages":1}"#,
    );
    create_queue(&mut admin, r#"{"name":"orders","subscriptions":["o/x"]}"#);

    let mut c = connect(&r, "pub");
    assert!(matches!(
        c.publish_guaranteed("o/x", b"x"),
        Err(Error::PublisherNotOpen)
    ));
    let o = c
        .open_publisher("pub-a", open_options::NACK_NO_MATCH)
        .unwrap();
    assert_eq!((o.window, o.last_seq, o.resent), (2, 0, 0));
    assert_eq!(c.publish_window(), 2);

    // One each: stored, refused by the full queue, refused for matching no queue.
    assert_eq!(
        c.publish_guaranteed_wait("o/full/a", b"one").unwrap(),
        Outcome::Acked
    );
    let Outcome::Nacked { reason, text } = c.publish_guaranteed_wait("o/full/b", b"two").unwrap()
    else {
        panic!("a publish to a full queue was stored")
    };
    assert_eq!(reason, NackReason::QUEUE_FULL);
    assert!(text.contains("queue full is full"), "{text}");
    let Outcome::Nacked { reason, .. } = c.publish_guaranteed_wait("no/queue", b"three").unwrap()
    else {
        panic!("a publish matching no queue was acknowledged despite NACK_NO_MATCH")
    };
    assert_eq!(reason, NackReason::NO_MATCHING_QUEUE);

    // Fill the window: try_publish_guaranteed refuses once two are unanswered (it
    // reads what has arrived first, so it may take a few rounds before the router is
    // slower than the client).
    let mut tries = 0;
    loop {
        tries += 1;
        assert!(tries < 10_000, "the window never filled");
        match c.try_publish_guaranteed("o/x", b"w") {
            Ok(_) => {}
            Err(Error::WindowFull) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(c.unanswered(), 2);
    // publish_guaranteed waits for room instead.
    let last = c.publish_guaranteed("o/x", b"last").unwrap();
    assert!(c.unanswered() <= 2);
    c.flush().unwrap();

    // Every publish is answered exactly once, the three above included.
    let mut answers: BTreeMap<u64, Vec<Answer>> = BTreeMap::new();
    poll_until(
        &mut c,
        "every answer",
        |ev| match ev {
            Event::Acked { first, last } => {
                assert!(first <= last);
                for s in first..=last {
                    answers.entry(s).or_default().push(Answer::Acked);
                }
            }
            Event::Nacked { seq, reason, text } => answers
                .entry(seq)
                .or_default()
                .push(Answer::Nacked(reason, text.to_owned())),
            other => panic!("unexpected {other:?}"),
        },
        |c| c.unanswered() == 0,
    );
    assert_eq!(answers.len() as u64, last, "{answers:?}");
    for (seq, a) in &answers {
        assert_eq!(a.len(), 1, "seq {seq} answered {a:?}");
        let want_nack = match seq {
            2 => Some(NackReason::QUEUE_FULL),
            3 => Some(NackReason::NO_MATCHING_QUEUE),
            _ => None,
        };
        match (&a[0], want_nack) {
            (Answer::Acked, None) => {}
            (Answer::Nacked(r, _), Some(w)) if *r == w => {}
            (got, want) => panic!("seq {seq}: {got:?}, expected a nack {want:?}"),
        }
    }
    let counts = c.publish_counts().clone();
    assert_eq!(
        (counts.published, counts.acked, counts.nacked, counts.resent),
        (last, last - 2, 2, 0)
    );
    assert_eq!(
        counts.nacked_by_reason,
        vec![
            (NackReason::QUEUE_FULL, 1),
            (NackReason::NO_MATCHING_QUEUE, 1)
        ]
    );

    // What the router holds agrees.
    let full = show(&mut admin, "full");
    assert_eq!(
        (json_u64(&full, "depth"), json_u64(&full, "rejected")),
        (1, 1)
    );
    let orders = show(&mut admin, "orders");
    assert_eq!(json_u64(&orders, "depth"), last - 3);
    c.close().unwrap();
    admin.close().unwrap();
    r.stop();
}

#[test]
fn a_reconnecting_publisher_resends_what_was_unanswered_after_a_restart() {
    let dir = DataDir::new("resend");
    let r = TestRouter::start(&dir, any_port(), 64);
    let mut admin = connect(&r, "admin");
    create_queue(&mut admin, r#"{"name":"rq","subscriptions":["t/>"]}"#);
    admin.close().unwrap();

    let mut p = GuaranteedPublisher::connect(&r.addr(), "gw-1", reconnect_opts("gw")).unwrap();
    assert_eq!(p.publish("t/a", b"m1").unwrap(), 1);
    assert!(p.wait_answered(DEADLINE).unwrap());
    assert_eq!(p.counts().acked, 1);

    // The router stops: 2 and 3 are published while it is down, so they cannot have
    // been answered.
    let addr = r.stop();
    assert_eq!(p.publish("t/a", b"m2").unwrap(), 2);
    assert_eq!(p.publish("t/a", b"m3").unwrap(), 3);
    assert_eq!(p.unanswered(), 2);

    // A new router on the same port and data directory.
    let r = TestRouter::start(&dir, addr, 64);
    // Reconnects, re-opens (the router holds 1), resends 2 and 3.
    assert!(p.wait_answered(DEADLINE).unwrap());
    assert_eq!(p.reconnects(), 1);
    assert_eq!(p.publish("t/a", b"m4").unwrap(), 4);
    assert!(p.wait_answered(DEADLINE).unwrap());
    let c = p.counts().clone();
    assert_eq!((c.published, c.acked, c.nacked, c.resent), (4, 4, 0, 2));
    p.close().unwrap();

    // The queue holds each message once, in order.
    let mut cons = connect(&r, "cons");
    let b = cons.bind("rq", 16, Start::Queue).unwrap();
    assert!(b.active);
    let got = collect(&mut cons, "four deliveries", 4, |ev| {
        let Event::Delivery(d) = ev else {
            panic!("unexpected {ev:?}")
        };
        Some((d.seq, d.payload.to_vec()))
    });
    let want: Vec<_> = (1..=4u64)
        .map(|i| (Some(i), format!("m{i}").into_bytes()))
        .collect();
    assert_eq!(got, want);
    let q = show(&mut cons, "rq");
    assert_eq!(json_u64(&q, "depth"), 4);
    cons.close().unwrap();
    r.stop();
}

#[test]
fn a_taken_over_identity_is_not_reconnected() {
    let dir = DataDir::new("takeover");
    let r = TestRouter::start(&dir, any_port(), 64);
    let mut admin = connect(&r, "admin");
    create_queue(&mut admin, r#"{"name":"tq","subscriptions":["t/>"]}"#);
    admin.close().unwrap();
    let mut p = GuaranteedPublisher::connect(&r.addr(), "gw-2", reconnect_opts("first")).unwrap();
    assert_eq!(p.publish("t/x", b"one").unwrap(), 1);
    assert!(p.wait_answered(DEADLINE).unwrap());

    // A second connection opens the same identity: it continues the numbering.
    let mut second = connect(&r, "second");
    let o = second.open_publisher("gw-2", 0).unwrap();
    assert_eq!(o.last_seq, 1);

    let deadline = Instant::now() + DEADLINE;
    let e = loop {
        assert!(
            Instant::now() < deadline,
            "the first publisher was not told"
        );
        match p.poll(Wait::Timeout(Duration::from_millis(100))) {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(
        matches!(e, Error::Closed { code, .. } if code == ErrorCode::TAKEN_OVER),
        "{e:?}"
    );
    assert_eq!(p.reconnects(), 0);

    // The second connection owns the identity.
    assert_eq!(
        second.publish_guaranteed_wait("t/x", b"two").unwrap(),
        Outcome::Acked
    );
    assert_eq!(second.publish_counts().acked, 1);
    second.close().unwrap();
    r.stop();
}

#[test]
fn bind_deliver_ack_nack_unbind_and_queue_requests() {
    let dir = DataDir::new("bind");
    let r = TestRouter::start(&dir, any_port(), 64);
    let mut c = connect(&r, "consumer");
    create_queue(&mut c, r#"{"name":"orders","subscriptions":["orders/>"]}"#);

    // BIND to a missing queue.
    let e = c.bind("nope", 4, Start::Queue).unwrap_err();
    assert!(
        matches!(e, Error::Rejected { code, .. } if code == ErrorCode::NO_SUCH_QUEUE),
        "{e:?}"
    );
    let b = c.bind("orders", 4, Start::Queue).unwrap();
    assert!(b.active);

    let mut p = connect(&r, "publisher");
    p.open_publisher("orders-gw", 0).unwrap();
    for m in [&b"buy"[..], b"sell"] {
        assert_eq!(
            p.publish_guaranteed_wait("orders/new", m).unwrap(),
            Outcome::Acked
        );
    }

    // A QUEUE_REQUEST now: the two deliveries were sent before its reply (they were
    // queued when the publishes became durable, before the router read the request),
    // so they arrive while it waits, and are kept for poll_events.
    let json = show(&mut c, "orders");
    assert_eq!(
        (json_u64(&json, "in_flight"), json_u64(&json, "delivered")),
        (2, 2),
        "{json}"
    );
    let got = collect(&mut c, "two deliveries", 2, |ev| {
        let Event::Delivery(d) = ev else {
            panic!("unexpected {ev:?}")
        };
        assert_eq!((d.binding, d.topic), (b.id.0, &b"orders/new"[..]));
        Some((
            d.msg_id,
            d.delivery_count,
            d.redelivered,
            d.payload.to_vec(),
        ))
    });
    assert_eq!((got[0].1, got[0].2, &got[0].3[..]), (1, false, &b"buy"[..]));
    assert_eq!(
        (got[1].1, got[1].2, &got[1].3[..]),
        (1, false, &b"sell"[..])
    );
    assert!(got[0].0 < got[1].0, "message ids increase");
    let (buy, sell) = (got[0].0, got[1].0);

    // ACK the first; NACK the second for redelivery: it comes again, flagged.
    c.ack(b.id, buy).unwrap();
    c.nack(b.id, sell, NackAction::Redeliver).unwrap();
    let again = collect(&mut c, "the redelivery", 1, |ev| {
        let Event::Delivery(d) = ev else {
            panic!("unexpected {ev:?}")
        };
        Some((d.msg_id, d.delivery_count, d.redelivered))
    });
    assert_eq!(again, vec![(sell, 2, true)]);
    // Then dead-letter it.
    c.nack(b.id, sell, NackAction::DeadLetter).unwrap();
    let json = show(&mut c, "orders");
    assert_eq!(
        (
            json_u64(&json, "depth"),
            json_u64(&json, "in_flight"),
            json_u64(&json, "acked"),
            json_u64(&json, "dead_lettered"),
            json_u64(&json, "redelivered"),
        ),
        (0, 0, 1, 1, 1),
        "{json}"
    );
    let dead = show(&mut c, "#DEAD_MSG_QUEUE");
    assert_eq!(json_u64(&dead, "depth"), 1, "{dead}");

    c.unbind(b.id).unwrap();
    let json = show(&mut c, "orders");
    assert_eq!(json_u64(&json, "consumers"), 0, "{json}");
    // After UNBIND, nothing more is delivered to this client.
    assert_eq!(
        p.publish_guaranteed_wait("orders/new", b"later").unwrap(),
        Outcome::Acked
    );
    let json = show(&mut c, "orders");
    assert_eq!(
        (json_u64(&json, "depth"), json_u64(&json, "in_flight")),
        (1, 0)
    );
    let n = c
        .poll_events(Wait::NoWait, |ev| panic!("unexpected {ev:?}"))
        .unwrap();
    assert_eq!(n, 0);
    p.close().unwrap();
    c.close().unwrap();
    r.stop();
}

#[test]
fn an_exclusive_standby_is_activated_when_the_active_consumer_goes() {
    let dir = DataDir::new("exclusive");
    let r = TestRouter::start(&dir, any_port(), 64);
    let mut a = connect(&r, "a");
    create_queue(
        &mut a,
        r#"{"name":"ex","subscriptions":["ex/>"],"access":"exclusive"}"#,
    );
    let ba = a.bind("ex", 4, Start::Queue).unwrap();
    assert!(ba.active);
    let mut s = connect(&r, "standby");
    let bs = s.bind("ex", 4, Start::Queue).unwrap();
    assert!(!bs.active);
    assert_ne!(ba.id, bs.id);

    let mut p = connect(&r, "publisher");
    p.open_publisher("ex-gw", 0).unwrap();
    assert_eq!(
        p.publish_guaranteed_wait("ex/1", b"one").unwrap(),
        Outcome::Acked
    );
    // Only the active binding gets it.
    let first = collect(&mut a, "the delivery to the active binding", 1, |ev| {
        let Event::Delivery(d) = ev else {
            panic!("unexpected {ev:?}")
        };
        Some((d.binding, d.msg_id, d.redelivered))
    });
    let (binding, id, redelivered) = first[0];
    assert_eq!((binding, redelivered), (ba.id.0, false));

    // The active consumer unbinds without acknowledging: the standby takes over and
    // gets the message again, flagged.
    a.unbind(ba.id).unwrap();
    // Activation comes first: a standby gets nothing before it is active.
    let events = collect(&mut s, "activation and the redelivery", 2, |ev| match ev {
        Event::Activated { binding } => Some(format!("activated {}", binding.0)),
        Event::Delivery(d) => Some(format!(
            "delivery {} {} {}",
            d.binding, d.msg_id, d.redelivered
        )),
        other => panic!("unexpected {other:?}"),
    });
    assert_eq!(
        events,
        vec![
            format!("activated {}", bs.id.0),
            format!("delivery {} {id} true", bs.id.0)
        ]
    );
    s.ack(bs.id, id).unwrap();
    let json = show(&mut s, "ex");
    assert_eq!(
        (
            json_u64(&json, "depth"),
            json_u64(&json, "acked"),
            json_u64(&json, "active_consumers")
        ),
        (0, 1, 1),
        "{json}"
    );
    p.close().unwrap();
    a.close().unwrap();
    s.close().unwrap();
    r.stop();
}

#[test]
fn a_queue_consumer_binds_again_after_a_router_restart() {
    let dir = DataDir::new("consumer");
    let r = TestRouter::start(&dir, any_port(), 64);
    let mut p = connect(&r, "publisher");
    create_queue(&mut p, r#"{"name":"q","subscriptions":["q/>"]}"#);
    p.open_publisher("q-gw", 0).unwrap();
    for m in [&b"p1"[..], b"p2"] {
        assert_eq!(p.publish_guaranteed_wait("q/t", m).unwrap(), Outcome::Acked);
    }
    p.close().unwrap();

    let mut c =
        QueueConsumer::connect(&r.addr(), "q", 8, Start::Queue, reconnect_opts("qc")).unwrap();
    let mut got: Vec<(u64, bool, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "only {} deliveries", got.len());
        c.poll(Wait::Timeout(Duration::from_millis(100)), |d| {
            got.push((d.msg_id, d.redelivered, d.payload.to_vec()))
        })
        .unwrap();
    }
    assert_eq!(
        got.iter().map(|g| (g.1, &g.2[..])).collect::<Vec<_>>(),
        vec![(false, &b"p1"[..]), (false, &b"p2"[..])]
    );
    let (id1, id2) = (got[0].0, got[1].0);
    c.ack(id1).unwrap();
    // A request after the ACK: once it is answered the router has processed the ACK.
    let json = show(c.client(), "q");
    assert_eq!(
        (json_u64(&json, "depth"), json_u64(&json, "in_flight")),
        (1, 1),
        "{json}"
    );

    // The router restarts on the same port and data directory; the consumer binds
    // again and gets the unacknowledged message again, flagged.
    let addr = r.stop();
    let r = TestRouter::start(&dir, addr, 64);
    let deadline = Instant::now() + DEADLINE;
    while got.len() < 3 {
        assert!(Instant::now() < deadline, "no redelivery after the restart");
        c.poll(Wait::Timeout(Duration::from_millis(100)), |d| {
            got.push((d.msg_id, d.redelivered, d.payload.to_vec()))
        })
        .unwrap();
    }
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[2], (id2, true, b"p2".to_vec()));
    assert_eq!(c.reconnects(), 1);
    assert!(c.binding().active);
    c.ack(id2).unwrap();
    let json = show(c.client(), "q");
    assert_eq!(
        (
            json_u64(&json, "depth"),
            json_u64(&json, "in_flight"),
            json_u64(&json, "consumers")
        ),
        (0, 0, 1),
        "{json}"
    );
    c.close().unwrap();
    r.stop();
}
