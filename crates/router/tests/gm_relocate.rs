//! Regression (probe of the spool's size): one guaranteed message a queue never
//! consumes pinned every spool segment from its own on, so the spool grew with all the
//! traffic after it, acknowledged and released in memory long before, until the disk
//! filled (a scaled run: 202 MB on disk against 68 MB without the held message). Here
//! on the real spool in a temporary directory, with small segments: the engine's
//! relocation step writes the held message again, the checkpoint and reclaim that
//! follow (as `Core::maybe_reclaim` orders them) delete the old segments, and a
//! restart from what is left finds the held message in its queue and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tickwire_router::gm::{Engine, GmConfig, Log, LogError};
use tickwire_router::index::Slot;
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_spool::{Appender, Config, Durable, Lsn, Spool, SyncPolicy};
use tickwire_wire::frame::{decode, flags, Frame, Msg};
use tickwire_wire::gm::{QueueOp, Start};

const ATTACKER: Slot = Slot(1);
const P: Slot = Slot(2);
const C: Slot = Slot(3);
const SEGMENT: u64 = 64 << 10;

struct SpoolLog(Appender);

impl Log for SpoolLog {
    fn append(&mut self, record: &[u8]) -> Result<u64, LogError> {
        self.0
            .append(record)
            .map(|l| l.0)
            .map_err(|_| LogError::Failed)
    }
}

impl SpoolLog {
    /// Hands the batch over and waits until everything appended is durable.
    fn settle(&mut self, e: &mut Engine) {
        self.0.flush();
        let want = self.0.next_lsn().0 - 1;
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            match self.0.poll_durable() {
                Some(Durable::Through(Lsn(n))) => e.handle_durable(MonoNanos(0), n),
                Some(d) => panic!("{d:?}"),
                None if self.0.stats().durable.0 >= want => return,
                None => {
                    assert!(Instant::now() < until, "the spool did not catch up");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    fn segments(&self) -> (u64, u64) {
        let s = self.0.stats();
        (s.segments, s.bytes_on_disk)
    }
}

fn config(dir: &PathBuf) -> Config {
    let mut c = Config::new(dir);
    c.segment_size = SEGMENT;
    c.sync = SyncPolicy::PageCache;
    c
}

fn gm_config() -> GmConfig {
    GmConfig {
        retain_bytes: 0,
        retain_ms: 0,
        publish_window: 1024,
        relocate_floor: 2 * SEGMENT,
        ..GmConfig::default()
    }
}

fn wall(ms: u64) -> UtcNanos {
    UtcNanos(1_700_000_000_000_000_000 + ms * 1_000_000)
}

/// The DELIVERs' message ids.
fn delivered(e: &mut Engine) -> Vec<u64> {
    let mut ids = Vec::new();
    e.poll_transmit(|_, mut bytes| {
        while !bytes.is_empty() {
            let (f, n) = decode(bytes, 1 << 20).unwrap().unwrap();
            if let Frame::Deliver(d) = f {
                ids.push(d.msg_id);
            }
            bytes = &bytes[n..];
        }
    });
    ids
}

fn publish(e: &mut Engine, log: &mut SpoolLog, from: Slot, topic: &str, seq: u64) {
    let payload = [7u8; 1000];
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
    e.handle_publish(log, from, wall(0), 0, &m).unwrap();
}

/// A restart: both recovery passes over the spool in `dir`.
fn restart(dir: &PathBuf) -> Engine {
    let mut e = Engine::new(gm_config());
    let (first, _) = Spool::open(config(dir), |lsn, r| e.recover_definition(lsn.0, r)).unwrap();
    drop(first);
    e.install_recovered_definitions()
        .expect("definitions within the bounds");
    let (_spool, report) = Spool::open(config(dir), |l, r| e.recover_record(l.0, r)).unwrap();
    e.finish_recovery();
    assert!(report.damaged.is_empty(), "{:?}", report.damaged);
    assert!(e.recovery_errors.is_empty(), "{:?}", e.recovery_errors);
    e
}

#[test]
fn one_held_message_no_longer_keeps_every_segment_after_it() {
    let dir = std::env::temp_dir().join(format!("tickwire-gm-relocate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (spool, _) = Spool::open(config(&dir), |_, _| {}).unwrap();
    let mut log = SpoolLog(spool.start(Box::new(|| {})).unwrap());
    let mut e = Engine::new(gm_config());
    e.finish_recovery();
    for (name, slot) in [("att", ATTACKER), ("legit", P)] {
        let def = format!(r#"{{"name":"{name}","subscriptions":["{name}/>"]}}"#);
        e.handle_queue_request(&mut log, slot, 1, QueueOp::Create, &def)
            .unwrap();
        e.handle_pub_open(&mut log, slot, 2, 0, name).unwrap();
    }
    publish(&mut e, &mut log, ATTACKER, "att/x", 1);
    e.handle_bind(MonoNanos(0), C, 3, 64, Start::Queue, "legit")
        .unwrap();
    // 3,000 × 1 KB through `legit`, each acknowledged, the retention releasing them.
    for seq in 1..=3_000u64 {
        publish(&mut e, &mut log, P, "legit/x", seq);
        if seq % 50 == 0 {
            log.settle(&mut e);
            for id in delivered(&mut e) {
                e.handle_consumer_ack(&mut log, MonoNanos(0), C, 1, id, id)
                    .unwrap();
            }
            e.handle_timeout(&mut log, MonoNanos(0), wall(1));
        }
    }
    log.settle(&mut e);
    e.handle_timeout(&mut log, MonoNanos(0), wall(1));
    let held = e.reclaim_below();
    let (pinned_segments, pinned_bytes) = log.segments();
    assert!(
        pinned_segments >= 40,
        "{pinned_segments} segments, {pinned_bytes} bytes"
    );
    // Without relocation, reclaiming frees nothing after the held message's record.
    e.checkpoint(&mut log);
    log.settle(&mut e);
    log.0.reclaim(Lsn(held));
    log.settle(&mut e);
    assert!(log.segments().0 + 1 >= pinned_segments);

    // One relocation step, then (10 s later in the router) checkpoint and reclaim.
    let started = Instant::now();
    let moved = e.relocate(&mut log, pinned_bytes);
    let took = started.elapsed();
    assert_eq!(moved.messages, 1);
    log.settle(&mut e);
    let below = e.reclaim_below();
    assert!(below > held, "the copy is now the oldest record needed");
    assert!(e.checkpoint(&mut log).complete);
    log.settle(&mut e);
    log.0.reclaim(Lsn(below));
    let until = Instant::now() + Duration::from_secs(20);
    while log.segments().0 > 2 {
        assert!(Instant::now() < until, "{:?}", log.segments());
        std::thread::sleep(Duration::from_millis(1));
    }
    let (segments, bytes) = log.segments();
    eprintln!(
        "held message pinned {pinned_segments} segments / {pinned_bytes} bytes; \
         after one relocation ({took:?}) and reclaim: {segments} / {bytes}"
    );
    assert!(
        segments <= 2 && bytes <= 2 * SEGMENT,
        "{bytes} bytes on disk"
    );
    log.0.close().unwrap();
    drop(log);

    // A restart finds the held message in its queue, and nothing else held.
    let mut r = restart(&dir);
    r.handle_bind(MonoNanos(0), C, 1, 64, Start::Queue, "att")
        .unwrap();
    assert_eq!(delivered(&mut r), vec![1]);
    r.handle_bind(MonoNanos(0), C, 2, 64, Start::Queue, "legit")
        .unwrap();
    assert_eq!(delivered(&mut r), Vec::<u64>::new(), "acknowledged: gone");
    let _ = std::fs::remove_dir_all(&dir);
}
