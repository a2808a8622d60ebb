//! Regression (hostile-input probe): a queue defined with `ack_timeout_ms: 1` and
//! `max_redeliveries: 4294967295`, bound by a consumer that read its deliveries and never
//! acknowledged them, had the router redeliver the whole window every millisecond, all
//! of it in one timer turn (2.6 M deliveries/s for 20,000 messages; an unrelated
//! pub/sub pair's median latency went from 44 µs to 3.9 ms). Pinned here on the
//! guaranteed-messaging core, time a parameter: the ack timeout has a floor (refused
//! below it at create, raised to it for a definition from an older spool), and one
//! timer call gives back at most `TIMEOUT_BUDGET` expired deliveries, the rest staying
//! due until later calls give them back, each once, in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_router::gm::queue::MIN_ACK_TIMEOUT_MS;
use tickwire_router::gm::record::{self, Record};
use tickwire_router::gm::{Engine, GmConfig, Log, LogError, TIMEOUT_BUDGET};
use tickwire_router::index::Slot;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{decode, flags, ErrorCode, Frame, Msg};
use tickwire_wire::gm::{QueueOp, Start};

const P: Slot = Slot(1);
const ADMIN: Slot = Slot(2);
const C: Slot = Slot(3);
const MS: u64 = 1_000_000;

/// The spool stand-in: records kept in memory, numbered from 1.
#[derive(Default)]
struct MemLog(Vec<Vec<u8>>);

impl Log for MemLog {
    fn append(&mut self, record: &[u8]) -> Result<u64, LogError> {
        self.0.push(record.to_vec());
        Ok(self.0.len() as u64)
    }
}

fn t(ms: u64) -> MonoNanos {
    MonoNanos(ms * MS)
}

fn wall(ms: u64) -> UtcNanos {
    UtcNanos(1_700_000_000_000_000_000 + ms * MS)
}

fn engine() -> Engine {
    let mut e = Engine::new(GmConfig::default());
    e.finish_recovery();
    e
}

/// A DELIVER: (binding, message id, delivery count).
type Delivery = (u32, u64, u32);

/// The DELIVERs and the QUEUE_REPLY texts in `e`'s output.
fn drain(e: &mut Engine) -> (Vec<Delivery>, Vec<String>) {
    let (mut deliveries, mut replies) = (Vec::new(), Vec::new());
    e.poll_transmit(|_, mut bytes| {
        while !bytes.is_empty() {
            let (f, n) = decode(bytes, 1 << 20).unwrap().unwrap();
            match f {
                Frame::Deliver(d) => deliveries.push((d.binding, d.msg_id, d.delivery_count)),
                Frame::QueueReply { json, .. } => replies.push(json.to_owned()),
                _ => {}
            }
            bytes = &bytes[n..];
        }
    });
    (deliveries, replies)
}

fn create(e: &mut Engine, log: &mut MemLog, json: &str) {
    e.handle_queue_request(log, ADMIN, 1, QueueOp::Create, json)
        .unwrap();
    drain(e);
}

/// `n` guaranteed messages from P to `topic`, made durable as they go (the publish
/// window is smaller than `n`).
fn publish(e: &mut Engine, log: &mut MemLog, topic: &str, first_seq: u64, n: u64) {
    for seq in first_seq..first_seq + n {
        let m = Msg {
            flags: flags::GUARANTEED | flags::SEQ,
            seq: Some(seq),
            discarded: 0,
            stamps: None,
            reply: None,
            cached: None,
            topic: topic.as_bytes(),
            payload: b"x",
        };
        e.handle_publish(log, P, wall(0), 0, &m).unwrap();
        if seq % 1000 == 0 {
            e.handle_durable(t(0), log.0.len() as u64);
        }
    }
    e.handle_durable(t(0), log.0.len() as u64);
}

/// A queue `name` on `name`, `n` messages in it, all delivered at t=0 to one binding
/// (returned) that never acknowledges; the messages' ids are returned too.
fn delivered_unacked(
    e: &mut Engine,
    log: &mut MemLog,
    name: &str,
    first_seq: u64,
    n: u64,
) -> (u32, Vec<u64>) {
    create(
        e,
        log,
        &format!(
            r#"{{"name":"{name}","subscriptions":["{name}"],"ack_timeout_ms":{MIN_ACK_TIMEOUT_MS},"max_redeliveries":4294967295}}"#
        ),
    );
    publish(e, log, name, first_seq, n);
    drain(e);
    e.handle_bind(t(0), C, 1, n as u32, Start::Queue, name)
        .unwrap();
    let (d, _) = drain(e);
    assert_eq!(d.len() as u64, n, "the whole queue is delivered once");
    assert!(d.iter().all(|&(_, _, count)| count == 1));
    (d[0].0, d.iter().map(|&(_, id, _)| id).collect())
}

#[test]
fn an_ack_timeout_of_1_ms_is_refused_at_create_naming_the_field_and_floor() {
    let (mut e, mut log) = (engine(), MemLog::default());
    let r = e
        .handle_queue_request(
            &mut log,
            ADMIN,
            7,
            QueueOp::Create,
            r#"{"name":"q","subscriptions":["a"],"ack_timeout_ms":1,"max_redeliveries":4294967295}"#,
        )
        .unwrap_err();
    assert_eq!(r.code, ErrorCode::INVALID_REQUEST);
    assert_eq!(r.request_id, 7);
    assert!(
        !r.fatal,
        "a refused definition does not cost the connection"
    );
    assert_eq!(
        r.text,
        "ack_timeout_ms 1 is below the floor of 50 ms (0: redeliver only when the consumer goes away)"
    );
    assert!(log.0.is_empty(), "nothing spooled");
    // 0 (only when the consumer goes away) and the floor itself are taken.
    create(
        &mut e,
        &mut log,
        r#"{"name":"zero","subscriptions":["a"],"ack_timeout_ms":0}"#,
    );
    create(
        &mut e,
        &mut log,
        &format!(
            r#"{{"name":"floor","subscriptions":["a"],"ack_timeout_ms":{MIN_ACK_TIMEOUT_MS}}}"#
        ),
    );
    assert_eq!(log.0.len(), 2, "both definitions spooled");
}

#[test]
fn a_spooled_definition_below_the_floor_still_starts_and_is_raised_to_the_floor() {
    // As a router before the floor wrote it.
    let mut rec = Vec::new();
    record::encode(
        &mut rec,
        &Record::QueueDefined {
            json: r#"{"name":"old","subscriptions":["old"],"ack_timeout_ms":1,"max_redeliveries":4294967295}"#,
        },
    );
    let records = [rec];
    let mut e = Engine::new(GmConfig::default());
    for (i, r) in records.iter().enumerate() {
        e.recover_definition(i as u64 + 1, r);
    }
    e.install_recovered_definitions()
        .expect("definitions within the bounds");
    for (i, r) in records.iter().enumerate() {
        e.recover_record(i as u64 + 1, r);
    }
    e.finish_recovery();
    assert!(e.recovery_errors.is_empty(), "{:?}", e.recovery_errors);
    assert_eq!(e.queue_summary().0, 1, "the queue is there");

    let mut log = MemLog(records.to_vec());
    e.handle_queue_request(&mut log, ADMIN, 1, QueueOp::Show, "old")
        .unwrap();
    let (_, replies) = drain(&mut e);
    let shown: serde_json::Value = serde_json::from_str(&replies[0]).unwrap();
    assert_eq!(
        shown["definition"]["ack_timeout_ms"], MIN_ACK_TIMEOUT_MS,
        "{shown}"
    );
    assert_eq!(shown["definition"]["max_redeliveries"], u32::MAX);

    // The raised value is the one in use: a delivery at 10 ms is due at 60 ms, not 11.
    e.handle_pub_open(&mut MemLog::default(), P, 1, 0, "pub")
        .unwrap();
    publish(&mut e, &mut log, "old", 1, 1);
    e.handle_bind(t(10), C, 1, 8, Start::Queue, "old").unwrap();
    assert_eq!(drain(&mut e).0.len(), 1);
    assert_eq!(e.poll_timeout(), Some(t(10 + MIN_ACK_TIMEOUT_MS)));

    // And what a checkpoint writes carries it, so the next start reads the floor.
    let before = log.0.len();
    e.checkpoint(&mut log);
    let written: Vec<String> = log.0[before..]
        .iter()
        .filter_map(|r| match record::decode(r) {
            Ok(Record::QueueDefined { json }) => Some(json.to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(written.len(), 1);
    let def: serde_json::Value = serde_json::from_str(&written[0]).unwrap();
    assert_eq!(def["ack_timeout_ms"], MIN_ACK_TIMEOUT_MS);
}

#[test]
fn thousands_of_expired_deliveries_are_given_back_a_budget_per_call_each_once_in_order() {
    let (mut e, mut log) = (engine(), MemLog::default());
    e.handle_pub_open(&mut MemLog::default(), P, 1, 0, "pub")
        .unwrap();
    let n = 5_000u64;
    let (binding, ids) = delivered_unacked(&mut e, &mut log, "q", 1, n);
    assert_eq!(e.poll_timeout(), Some(t(MIN_ACK_TIMEOUT_MS)));

    // Not yet due: nothing.
    e.handle_timeout(&mut log, t(MIN_ACK_TIMEOUT_MS - 1), wall(0));
    assert!(drain(&mut e).0.is_empty());

    // All 5,000 are due from here on; each call gives back (and the pump redelivers)
    // at most the budget, and says the rest are still due.
    let mut now = MIN_ACK_TIMEOUT_MS + 10;
    let mut again = Vec::new();
    let mut calls = 0;
    while e.poll_timeout().is_some_and(|d| d <= t(now)) {
        e.handle_timeout(&mut log, t(now), wall(now));
        calls += 1;
        let (d, _) = drain(&mut e);
        assert!(
            d.len() <= TIMEOUT_BUDGET,
            "call {calls} redelivered {}",
            d.len()
        );
        if (again.len() + d.len()) < ids.len() {
            assert_eq!(d.len(), TIMEOUT_BUDGET, "a full budget while more are due");
            assert!(
                e.poll_timeout().is_some_and(|at| at <= t(now)),
                "the rest are still due: the driver calls again at once"
            );
        }
        for (b, id, count) in d {
            assert_eq!((b, count), (binding, 2), "message {id}");
            again.push(id);
        }
        assert!(calls <= 100, "stuck");
        now += 1;
    }
    assert_eq!(calls, n.div_ceil(TIMEOUT_BUDGET as u64));
    assert_eq!(again, ids, "every expired delivery once, in order");
    // What is left is the redeliveries' own deadline, the first of them given at 60 ms.
    assert_eq!(
        e.poll_timeout(),
        Some(t(MIN_ACK_TIMEOUT_MS + 10 + MIN_ACK_TIMEOUT_MS))
    );
    let stats = e.stats_json();
    assert_eq!(stats["totals"]["redelivered"], n, "{stats}");
}

#[test]
fn a_queue_with_more_expired_than_the_budget_does_not_keep_another_waiting() {
    let (mut e, mut log) = (engine(), MemLog::default());
    e.handle_pub_open(&mut MemLog::default(), P, 1, 0, "pub")
        .unwrap();
    let big = 3 * TIMEOUT_BUDGET as u64;
    let (b_big, _) = delivered_unacked(&mut e, &mut log, "big", 1, big);
    let (b_small, small) = delivered_unacked(&mut e, &mut log, "small", big + 1, 10);

    // The big queue alone has more due than two calls give back; the small one's are
    // given back within those two calls all the same.
    let mut small_again = Vec::new();
    let mut big_again = 0;
    for k in 0..2 {
        e.handle_timeout(&mut log, t(MIN_ACK_TIMEOUT_MS + k), wall(0));
        for (b, id, _) in drain(&mut e).0 {
            if b == b_small {
                small_again.push(id);
            } else {
                assert_eq!(b, b_big);
                big_again += 1;
            }
        }
    }
    assert_eq!(small_again, small);
    assert_eq!(big_again, 2 * TIMEOUT_BUDGET - small.len());
}

/// As for ack timeouts: a queue whose messages all outlive a short `ttl_ms` at once has
/// them dead-lettered (a spool record each) a budget per call, not all in one turn; the
/// rest stay due, and every one is dead-lettered once.
#[test]
fn thousands_of_expired_messages_are_dead_lettered_a_budget_per_call() {
    let (mut e, mut log) = (engine(), MemLog::default());
    e.handle_pub_open(&mut MemLog::default(), P, 1, 0, "pub")
        .unwrap();
    create(
        &mut e,
        &mut log,
        r#"{"name":"short","subscriptions":["short"],"ttl_ms":1}"#,
    );
    let n = 3 * TIMEOUT_BUDGET as u64 + 5;
    publish(&mut e, &mut log, "short", 1, n);
    drain(&mut e);
    // Dead-lettered so far: what left the queue (nobody consumes it).
    let dead = |e: &Engine| {
        let stats = e.stats_json();
        let q = stats["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "short")
            .cloned()
            .unwrap();
        n - q["depth"].as_u64().unwrap()
    };
    assert_eq!(dead(&e), 0);
    let mut calls = 0;
    let mut now = 10;
    loop {
        e.handle_timeout(&mut log, t(now), wall(now));
        drain(&mut e);
        calls += 1;
        let done = dead(&e);
        assert!(
            done <= calls * TIMEOUT_BUDGET as u64,
            "call {calls}: {done} dead-lettered"
        );
        if done == n {
            break;
        }
        assert!(
            e.poll_timeout().is_some_and(|at| at <= t(now)),
            "call {calls}: {done} of {n}, the rest must stay due"
        );
        assert!(calls <= 10, "stuck at {done} of {n}");
        now += 1;
    }
    assert_eq!(calls, n.div_ceil(TIMEOUT_BUDGET as u64));
}
