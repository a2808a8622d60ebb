//! Regression (hostile-input probe): one client made queue `att` on `att/>` and published
//! one guaranteed message it never consumed; a legitimate publisher then sent 120,000 ×
//! 10 KB to queue `legit`, whose consumer read and acknowledged everything. The store
//! released retained messages only from the front, stopping at the first one a queue
//! held, so it kept every later message: 1 GiB, 107,300 messages, though every queue was
//! empty but `att`, and 12,701 legitimate publishes were NACKed `queue-full
//! (max_stored_bytes)`. Pinned here on the guaranteed-messaging core, time a parameter
//! and the bounds scaled down: nothing is refused, the store holds the retention plus
//! what the queues hold, and replay finds the held message and the retained tail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_router::gm::{Engine, GmConfig, Log, LogError};
use tickwire_router::index::Slot;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{decode, flags, Frame, Msg};
use tickwire_wire::gm::{QueueOp, Start};

const ATTACKER: Slot = Slot(1);
const P: Slot = Slot(2);
const C: Slot = Slot(3);
const BROWSER: Slot = Slot(4);
const MS: u64 = 1_000_000;
const SIZE: usize = 10_000;
const RETAIN: u64 = 100_000;

/// The spool stand-in: records kept in memory, numbered from 1.
#[derive(Default)]
struct MemLog(Vec<Vec<u8>>);

impl Log for MemLog {
    fn append(&mut self, record: &[u8]) -> Result<u64, LogError> {
        self.0.push(record.to_vec());
        Ok(self.0.len() as u64)
    }
}

fn wall(ms: u64) -> UtcNanos {
    UtcNanos(1_700_000_000_000_000_000 + ms * MS)
}

/// What came out: DELIVERs (binding, message id) and the number of PUB_NACKs.
#[derive(Default)]
struct Out {
    deliveries: Vec<(u32, u64)>,
    nacks: usize,
}

fn drain(e: &mut Engine, out: &mut Out) {
    e.poll_transmit(|_, mut bytes| {
        while !bytes.is_empty() {
            let (f, n) = decode(bytes, 1 << 20).unwrap().unwrap();
            match f {
                Frame::Deliver(d) => out.deliveries.push((d.binding, d.msg_id)),
                Frame::PubNack { .. } => out.nacks += 1,
                _ => {}
            }
            bytes = &bytes[n..];
        }
    });
}

fn publish(e: &mut Engine, log: &mut MemLog, from: Slot, topic: &str, seq: u64, ms: u64) {
    let payload = [7u8; SIZE];
    let m = Msg {
        flags: flags::GUARANTEED | flags::SEQ,
        seq: Some(seq),
        discarded: 0,
        stamps: None,
        reply: None,
        cached: None,
        topic: topic.as_bytes(),
        payload: &payload,
    };
    e.handle_publish(log, from, wall(ms), 0, &m).unwrap();
    e.handle_durable(MonoNanos(ms * MS), log.0.len() as u64);
}

fn stat(e: &Engine, key: &str) -> u64 {
    e.stats_json()[key].as_u64().unwrap()
}

#[test]
fn one_message_nobody_consumes_does_not_keep_the_messages_after_it() {
    let cfg = GmConfig {
        retain_bytes: RETAIN,
        // Room for 200 messages: the flood below is 2,000.
        max_stored_bytes: 2_000_000,
        ..GmConfig::default()
    };
    let (mut e, mut log, mut out) = (Engine::new(cfg), MemLog::default(), Out::default());
    e.finish_recovery();
    for (name, slot) in [("att", ATTACKER), ("legit", P)] {
        let def = format!(r#"{{"name":"{name}","subscriptions":["{name}/>"]}}"#);
        e.handle_queue_request(&mut log, slot, 1, QueueOp::Create, &def)
            .unwrap();
        e.handle_pub_open(&mut MemLog::default(), slot, 2, 0, name)
            .unwrap();
    }
    publish(&mut e, &mut log, ATTACKER, "att/x", 1, 0);
    e.handle_bind(MonoNanos(0), C, 3, 64, Start::Queue, "legit")
        .unwrap();
    drain(&mut e, &mut out);

    let n = 2_000u64;
    for seq in 1..=n {
        let ms = seq; // 1,000 a second
        publish(&mut e, &mut log, P, "legit/x", seq, ms);
        drain(&mut e, &mut out);
        for (b, id) in std::mem::take(&mut out.deliveries) {
            e.handle_consumer_ack(&mut log, MonoNanos(ms * MS), C, b, id, id)
                .unwrap();
        }
        if seq % 10 == 0 {
            e.handle_timeout(&mut log, MonoNanos(ms * MS), wall(ms));
        }
        let held = 1 + stat(&e, "queue_entries");
        assert!(
            stat(&e, "retained_bytes") <= RETAIN + (held + 10) * (SIZE as u64 + 7),
            "message {seq}: {} bytes retained",
            stat(&e, "retained_bytes")
        );
    }
    drain(&mut e, &mut out);
    assert_eq!(out.nacks, 0, "no legitimate publish refused");
    assert_eq!(stat(&e, "queue_entries"), 1, "only att's message is held");
    e.handle_timeout(&mut log, MonoNanos((n + 10) * MS), wall(n + 10));
    let retained = stat(&e, "retained_bytes");
    assert!(
        retained <= RETAIN + SIZE as u64 + 5,
        "{retained} bytes retained"
    );
    let newest = e.stats_json()["retained_messages"].as_u64().unwrap();
    assert!((2..=12).contains(&newest), "{newest} messages retained");

    // Replay: att's message (id 1) is still there for a browser from the beginning;
    // legit's from the beginning gets the retained tail only, in order.
    e.handle_bind(MonoNanos(n * MS), BROWSER, 4, 100, Start::Beginning, "att")
        .unwrap();
    drain(&mut e, &mut out);
    let att: Vec<u64> = out.deliveries.drain(..).map(|(_, id)| id).collect();
    assert_eq!(att, [1]);
    e.handle_bind(
        MonoNanos(n * MS),
        BROWSER,
        5,
        100,
        Start::Beginning,
        "legit",
    )
    .unwrap();
    drain(&mut e, &mut out);
    let legit: Vec<u64> = out.deliveries.drain(..).map(|(_, id)| id).collect();
    assert_eq!(legit.len() as u64, newest - 1);
    assert_eq!(*legit.last().unwrap(), n + 1, "up to the newest");
    assert!(legit.windows(2).all(|w| w[1] == w[0] + 1), "{legit:?}");
}
