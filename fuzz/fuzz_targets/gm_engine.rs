//! Drives the real router core (`tickwire_router::core::Core`) with guaranteed
//! messaging ON: an in-memory `SpoolPort` (records in a vector, made durable or failed
//! when the fuzz input says) is attached with `Core::attach_spool`, and several clients
//! send arbitrary bytes and well-formed guaranteed-messaging frames built from fuzz
//! bytes (PUB_OPEN, guaranteed PUBLISH, QUEUE_REQUEST, BIND, CONSUMER_ACK / NACK,
//! UNBIND), interleaved with durability reports (`handle_spool`), timers
//! (`handle_timeout`), reclaim, disconnects and restarts (a new core recovered from the
//! durable records, as `spool_port::open` does).
//!
//! Like `router_input`, each client's input starts after a valid HELLO only when the
//! fuzz input says so, bytes are fed the way the driver feeds them, and the egress is
//! drained in arbitrary amounts.
//!
//! Checks, after every operation:
//! - nothing panics;
//! - everything the router writes to a client is a sequence of well-formed frames;
//! - every DELIVER names a message whose record the spool reported durable and not
//!   failed ("only durable messages are delivered"), and no message id is spooled twice;
//! - what a client has queued stays bounded (`EGRESS_BOUND`);
//! - after `handle_timeout`, `poll_timeout` is never in the past;
//! - `live()` equals the number of clients accepted and not removed.
#![no_main]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use tickwire_router::core::{Core, Input, Phase};
use tickwire_router::gm::record::{self, Record};
use tickwire_router::gm::{Log, LogError, Progress, SpoolPort};
use tickwire_router::index::Slot;
use tickwire_router::{Config, SlowConsumerPolicy};
use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{self, flags, Frame, PublishOptions, PROTOCOL_VERSION};
use tickwire_wire::gm::{self as wgm, NackAction, QueueOp, Start};

#[path = "common/cursor.rs"]
mod cursor;
use cursor::Cursor;

const MAX_FRAME: u32 = 4096;
const EGRESS_LIMIT: usize = 16 << 10;
const MAX_CLIENTS: usize = 6;
/// Most bytes a client may have queued: the MESSAGE limit, plus deliveries (bindings ×
/// window × frame) and control frames answered per input frame. Generous: the check is
/// that egress does not grow without bound, not an exact budget.
const EGRESS_BOUND: usize = 4 << 20;
/// Largest record the fake spool accepts (bigger: `LogError::TooLarge`).
const MAX_RECORD: usize = 3000;

const NAMES: [&str; 4] = ["q0", "q1", "#DEAD_MSG_QUEUE", "dlq"];
const IDENTITIES: [&str; 3] = ["p0", "p1", "p2"];
const TOPICS: [&str; 5] = ["a/b", "a/c", "x/y/z", "a", "q/>"];
const PATTERNS: [&str; 5] = ["a/>", "a/b", "x/*/z", ">", "*"];

/// The spool: every record appended, `flushed` of them handed to "storage", and the
/// outcome reported for those up to `reported`. Failed records are dropped.
#[derive(Default)]
struct MemSpool {
    /// (record number, bytes, failed)
    records: Vec<(u64, Vec<u8>, bool)>,
    next: u64,
    flushed: u64,
    reported: u64,
    progress: VecDeque<Progress>,
    busy: bool,
    /// Every message record ever appended: message id → (record number, failed). Kept
    /// across reclaim and restarts, to check that only durable messages are delivered.
    msgs: HashMap<u64, (u64, bool)>,
    /// The highest `Progress::Durable` reported.
    durable: u64,
}

impl MemSpool {
    fn new(records: Vec<(u64, Vec<u8>, bool)>, msgs: HashMap<u64, (u64, bool)>) -> MemSpool {
        let last = records.last().map_or(0, |r| r.0);
        MemSpool {
            records,
            next: last + 1,
            flushed: last,
            reported: last,
            durable: last,
            msgs,
            ..MemSpool::default()
        }
    }

    /// Storage finishes `n` more flushed records: durable, or failed.
    fn complete(&mut self, n: u64, fail: bool) {
        let to = self.flushed.min(self.reported.saturating_add(n));
        if to <= self.reported {
            return;
        }
        let first = self.reported + 1;
        if fail {
            for r in &mut self.records {
                if (first..=to).contains(&r.0) {
                    r.2 = true;
                }
            }
            for m in self.msgs.values_mut() {
                if (first..=to).contains(&m.0) {
                    m.1 = true;
                }
            }
            self.progress.push_back(Progress::Failed {
                first,
                last: to,
                why: "fuzz: write error".into(),
            });
        } else {
            self.progress.push_back(Progress::Durable(to));
            self.durable = to;
        }
        self.reported = to;
    }

    /// The records a restart recovers: durable and not failed.
    fn durable(&self) -> Vec<(u64, Vec<u8>, bool)> {
        self.records
            .iter()
            .filter(|r| r.0 <= self.reported && !r.2)
            .cloned()
            .collect()
    }
}

/// The core owns the spool; the target keeps a handle to it (the core needs `Send`).
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<MemSpool>>);

impl Shared {
    fn with<R>(&self, f: impl FnOnce(&mut MemSpool) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Log for Shared {
    fn append(&mut self, record: &[u8]) -> Result<u64, LogError> {
        self.with(|s| {
            if s.busy {
                return Err(LogError::Busy);
            }
            if record.len() > MAX_RECORD {
                return Err(LogError::TooLarge);
            }
            let n = s.next;
            s.next += 1;
            s.records.push((n, record.to_vec(), false));
            if let Ok(Record::Message { id, .. }) = record::decode(record) {
                let old = s.msgs.insert(id, (n, false));
                assert!(old.is_none(), "message id {id} appended twice");
            }
            Ok(n)
        })
    }
}

impl SpoolPort for Shared {
    fn enabled(&self) -> bool {
        true
    }
    fn flush(&mut self) {
        self.with(|s| s.flushed = s.next - 1);
    }
    fn poll_progress(&mut self) -> Option<Progress> {
        self.with(|s| s.progress.pop_front())
    }
    fn reclaim(&mut self, below: u64) {
        // Records below `below` are needed by nobody: a restart must not need them.
        self.with(|s| s.records.retain(|r| r.0 >= below || r.0 > s.reported));
    }
    fn usage(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn bytes_on_disk(&self) -> u64 {
        // Always "large": every reclaim tick may relocate held messages (`R` records),
        // so restarts after reclaims recover from copies too.
        u64::MAX / 4
    }
}

/// One connected client as the driver and the client on the other end see it.
struct Conn {
    id: Slot,
    rbuf: Vec<u8>,
    rx: Vec<u8>,
    closing: bool,
    /// (binding, msg_id) of DELIVERs seen, to answer with real ids.
    delivered: Vec<(u32, u64)>,
    /// Bindings BOUND to this client.
    bindings: Vec<u32>,
}

struct World {
    cfg: Config,
    core: Core,
    spool: Shared,
    conns: Vec<Conn>,
    now: MonoNanos,
    scratch: Vec<u8>,
}

fn new_core(
    cfg: &Config,
    now: MonoNanos,
    records: Vec<(u64, Vec<u8>, bool)>,
    msgs: HashMap<u64, (u64, bool)>,
) -> (Core, Shared) {
    let mut core = Core::new(cfg.clone(), now, UtcNanos(1_700_000_000_000_000_000));
    // Recovery, as `spool_port::open` does it: definitions first, then every record.
    let engine = core.gm_mut();
    for (lsn, r, _) in &records {
        engine.recover_definition(*lsn, r);
    }
    // A spool past the router's bounds refuses the start (nothing installed): the
    // fuzzing goes on with the engine as it is, the records not replayed.
    if engine.install_recovered_definitions().is_ok() {
        for (lsn, r, _) in &records {
            engine.recover_record(*lsn, r);
        }
    }
    engine.finish_recovery();
    engine.recovery_errors.clear();
    let spool = Shared(Arc::new(Mutex::new(MemSpool::new(records, msgs))));
    core.attach_spool(Box::new(spool.clone()));
    (core, spool)
}

impl World {
    fn feed(&mut self, k: usize, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(k) else {
            return;
        };
        if c.closing {
            return;
        }
        c.rbuf.extend_from_slice(bytes);
        // Fed again while the core pauses at its subscription work bound, as the driver
        // does on the next turns (before reading more).
        let mut fresh = bytes.len();
        let mut input = self.core.handle_input(c.id, self.now, &c.rbuf, fresh);
        while let (Input::Consumed(n), true) = (input, self.core.input_paused()) {
            assert!(
                n > 0 && n <= c.rbuf.len(),
                "a paused call consumed {n} of {}",
                c.rbuf.len()
            );
            c.rbuf.drain(..n);
            fresh = 0;
            input = self.core.handle_input(c.id, self.now, &c.rbuf, fresh);
        }
        match input {
            Input::Consumed(n) => {
                assert!(n <= c.rbuf.len(), "consumed {n} of {}", c.rbuf.len());
                c.rbuf.drain(..n);
                let limit = self.core.frame_limit(c.id) as usize;
                assert!(
                    c.rbuf.len() < limit.max(1),
                    "{} bytes left unconsumed with a frame limit of {limit}",
                    c.rbuf.len()
                );
            }
            Input::Closing => {
                c.closing = true;
                c.rbuf.clear();
                assert!(matches!(self.core.phase(c.id), Some(Phase::Closing) | None));
            }
        }
    }

    fn send(&mut self, k: usize, f: impl FnOnce(&mut Vec<u8>)) {
        self.scratch.clear();
        f(&mut self.scratch);
        let b = std::mem::take(&mut self.scratch);
        self.feed(k, &b);
        self.scratch = b;
    }

    /// Drains up to `n` bytes of client `k`'s egress to its "socket" and decodes them.
    fn write(&mut self, k: usize, n: usize) {
        let Some(c) = self.conns.get_mut(k) else {
            return;
        };
        let spool = self.spool.clone();
        let egress = self.core.egress(c.id);
        let n = n.min(egress.len());
        c.rx.extend_from_slice(&egress[..n]);
        self.core.handle_written(c.id, n);
        loop {
            match frame::decode(&c.rx, u32::MAX) {
                Ok(Some((f, used))) => {
                    match f {
                        Frame::Deliver(d) => {
                            // Only durable messages are delivered (docs/guaranteed.md 3.5).
                            spool.with(|s| match s.msgs.get(&d.msg_id) {
                                Some(&(lsn, failed)) => assert!(
                                    !failed && lsn <= s.durable,
                                    "message {} delivered but its record {lsn} is {} (durable through {})",
                                    d.msg_id,
                                    if failed { "failed" } else { "not durable" },
                                    s.durable
                                ),
                                None => panic!("message {} delivered but never spooled", d.msg_id),
                            });
                            if c.delivered.len() >= 64 {
                                c.delivered.remove(0);
                            }
                            c.delivered.push((d.binding, d.msg_id));
                        }
                        Frame::Bound { binding, .. } => {
                            if c.bindings.len() >= 16 {
                                c.bindings.remove(0);
                            }
                            c.bindings.push(binding);
                        }
                        _ => {}
                    }
                    c.rx.drain(..used);
                }
                Ok(None) => break,
                Err(e) => panic!("the router wrote a malformed frame: {e}"),
            }
        }
    }

    fn check(&self) {
        assert_eq!(self.core.live(), self.conns.len());
        for c in &self.conns {
            let q = self.core.egress(c.id).len();
            assert!(q <= EGRESS_BOUND, "{q} bytes queued for one client");
        }
    }

    fn mark_closing(&mut self) {
        for c in &mut self.conns {
            if self.core.phase(c.id) == Some(Phase::Closing) {
                c.closing = true;
            }
        }
    }

    fn step(&mut self, cur: &mut Cursor<'_>) -> Option<()> {
        let op = cur.u8()?;
        let k = usize::from(cur.u8()?) % MAX_CLIENTS;
        match op % 16 {
            // Accept a client and (usually) say HELLO for it.
            0 => {
                let addr = SocketAddr::from(([127, 0, 0, 1], 40_000 + k as u16));
                if let Ok(id) = self.core.handle_accept(addr, self.now, UtcNanos(0)) {
                    self.conns.push(Conn {
                        id,
                        rbuf: Vec::new(),
                        rx: Vec::new(),
                        closing: false,
                        delivered: Vec::new(),
                        bindings: Vec::new(),
                    });
                    if op & 0x80 == 0 {
                        let last = self.conns.len() - 1;
                        self.send(last, |o| frame::encode_hello(o, PROTOCOL_VERSION, "fuzz"));
                    }
                } else {
                    assert!(self.conns.len() >= MAX_CLIENTS);
                }
            }
            // Raw bytes.
            1 => {
                let n = usize::from(cur.u8()?);
                let bytes = cur.bytes(n).to_vec();
                self.feed(k, &bytes);
            }
            // PUB_OPEN.
            2 => {
                let b = cur.u8()?;
                let id = IDENTITIES[usize::from(b) % IDENTITIES.len()];
                let options = u32::from(b >> 6);
                self.send(k, |o| wgm::encode_pub_open(o, u32::from(b), options, id));
            }
            // A guaranteed PUBLISH (or several with increasing seqs).
            3 => {
                let b = cur.u8()?;
                let seq = u64::from(cur.u8()?);
                let size = usize::from(cur.u8()?) * 12;
                let topic = TOPICS[usize::from(b) % TOPICS.len()];
                let payload = vec![0x5A; size];
                let repeat = 1 + u64::from(b >> 5);
                self.scratch.clear();
                for i in 0..repeat {
                    let start = self.scratch.len();
                    let opts = PublishOptions {
                        seq: Some(seq + i),
                        publisher_send: (b & 0x10 != 0).then_some(self.now.0),
                    };
                    if frame::encode_publish(&mut self.scratch, topic, &payload, opts, MAX_FRAME)
                        .is_ok()
                    {
                        self.scratch[start + 5] |= flags::GUARANTEED;
                    } else {
                        self.scratch.truncate(start);
                    }
                }
                let b = std::mem::take(&mut self.scratch);
                self.feed(k, &b);
                self.scratch = b;
            }
            // QUEUE_REQUEST create, from a few fuzz-chosen members.
            4 => {
                let b = cur.u8()?;
                let c = cur.u8()?;
                let d = cur.u8()?;
                let name = NAMES[usize::from(b) % NAMES.len()];
                let pat = PATTERNS[usize::from(b >> 2) % PATTERNS.len()];
                let mut def = serde_json::json!({ "name": name, "subscriptions": [pat] });
                if c & 1 != 0 {
                    def["access"] = "exclusive".into();
                }
                if c & 2 != 0 {
                    def["max_messages"] = u64::from(d % 4).into();
                }
                if c & 4 != 0 {
                    def["max_bytes"] = (u64::from(d) * 64).into();
                }
                if c & 8 != 0 {
                    def["ttl_ms"] = (u64::from(d) * 10).into();
                }
                if c & 16 != 0 {
                    def["ack_timeout_ms"] = (u64::from(d >> 4) * 100).into();
                }
                if c & 32 != 0 {
                    def["max_redeliveries"] = u64::from(d % 3).into();
                }
                if c & 64 != 0 {
                    def["full_policy"] = "discard-oldest".into();
                }
                if c & 128 != 0 {
                    def["dead_letter_queue"] = NAMES[usize::from(d) % NAMES.len()].into();
                    def["start"] = match d % 3 {
                        0 => "beginning".into(),
                        1 => serde_json::json!({ "id": u64::from(d >> 2) }),
                        _ => "now".into(),
                    };
                }
                if b & 0x80 != 0 {
                    // An arbitrary member value: the definition parser's error paths.
                    let n = usize::from(d % 24);
                    let raw = String::from_utf8_lossy(cur.bytes(n)).into_owned();
                    def["max_message_size"] = raw.into();
                }
                let json = def.to_string();
                self.send(k, |o| {
                    wgm::encode_queue_request(o, u32::from(c), QueueOp::Create, &json)
                });
            }
            // Other queue requests.
            5 => {
                let b = cur.u8()?;
                let name = NAMES[usize::from(b) % NAMES.len()];
                let (qop, arg) = match (b >> 2) % 4 {
                    0 => (QueueOp::Delete, name),
                    1 => (QueueOp::Purge, name),
                    2 => (QueueOp::Show, name),
                    _ => (QueueOp::List, ""),
                };
                self.send(k, |o| wgm::encode_queue_request(o, u32::from(b), qop, arg));
            }
            // BIND.
            6 => {
                let b = cur.u8()?;
                let w = u32::from(cur.u8()? % 6);
                let name = NAMES[usize::from(b) % NAMES.len()];
                let start = match (b >> 2) % 4 {
                    0 => Start::Queue,
                    1 => Start::Beginning,
                    2 => Start::MessageId(u64::from(b >> 4)),
                    _ => Start::Time(u64::from(b)),
                };
                self.send(k, |o| wgm::encode_bind(o, u32::from(b) + 1, w, start, name));
            }
            // CONSUMER_ACK of something delivered (or made up).
            7 => {
                let b = cur.u8()?;
                let Some(c) = self.conns.get(k) else {
                    return Some(());
                };
                let (binding, id) = if c.delivered.is_empty() || b & 1 != 0 {
                    (u32::from(b >> 4), u64::from(b >> 1))
                } else {
                    c.delivered[usize::from(b >> 1) % c.delivered.len()]
                };
                let first = if b & 2 != 0 { 0 } else { id };
                self.send(k, |o| wgm::encode_consumer_ack(o, binding, first, id));
            }
            // CONSUMER_NACK.
            8 => {
                let b = cur.u8()?;
                let Some(c) = self.conns.get(k) else {
                    return Some(());
                };
                let (binding, id) = if c.delivered.is_empty() || b & 1 != 0 {
                    (u32::from(b >> 4), u64::from(b >> 1))
                } else {
                    c.delivered[usize::from(b >> 1) % c.delivered.len()]
                };
                let action = if b & 2 != 0 {
                    NackAction::DeadLetter
                } else {
                    NackAction::Redeliver
                };
                self.send(k, |o| wgm::encode_consumer_nack(o, binding, action, id));
            }
            // UNBIND.
            9 => {
                let b = cur.u8()?;
                let Some(c) = self.conns.get(k) else {
                    return Some(());
                };
                let binding = if c.bindings.is_empty() || b & 1 != 0 {
                    u32::from(b >> 1)
                } else {
                    c.bindings[usize::from(b >> 1) % c.bindings.len()]
                };
                self.send(k, |o| wgm::encode_unbind(o, u32::from(b), binding));
            }
            // Drain egress.
            10 => {
                let n = usize::from(cur.u8()?) * 64;
                self.write(k, n);
            }
            // End of a loop turn: hand records to storage; storage reports some.
            11 => {
                let b = cur.u8()?;
                self.core.flush_spool();
                self.spool
                    .with(|s| s.complete(u64::from(b & 0x3F), b & 0xC0 == 0xC0));
                self.core.handle_spool(self.now);
                self.mark_closing();
            }
            // Timers, reclaim.
            12 => {
                self.now = self.now.add_nanos(u64::from(cur.u8()?) * 50_000_000);
                self.core.handle_timeout(self.now);
                if let Some(d) = self.core.poll_timeout() {
                    assert!(d >= self.now, "the next deadline is already past");
                }
                self.core.maybe_reclaim(self.now);
                self.mark_closing();
            }
            // Disconnect.
            13 => {
                if k < self.conns.len() {
                    let c = self.conns.swap_remove(k);
                    self.core.handle_closed(c.id, "fuzz: connection closed");
                    assert_eq!(self.core.phase(c.id), None);
                }
            }
            // The storage hand-off is full (or not).
            14 => {
                let b = cur.u8()?;
                self.spool.with(|s| s.busy = b & 1 != 0);
            }
            // Restart: a new core recovered from what was durable; every client is gone.
            _ => {
                self.core.flush_spool();
                let (records, msgs) = self.spool.with(|s| {
                    // What was not durable is lost in the crash.
                    let durable = s.durable;
                    let msgs = s
                        .msgs
                        .iter()
                        .filter(|(_, &(lsn, failed))| !failed && lsn <= durable)
                        .map(|(&id, &m)| (id, m))
                        .collect();
                    (s.durable(), msgs)
                });
                let (core, spool) = new_core(&self.cfg, self.now, records, msgs);
                self.core = core;
                self.spool = spool;
                self.conns.clear();
            }
        }
        Some(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&policy, ops)) = data.split_first() else {
        return;
    };
    let cfg = Config {
        max_frame: MAX_FRAME,
        max_clients: MAX_CLIENTS,
        max_subscriptions: 8,
        egress_limit: EGRESS_LIMIT,
        slow_consumer: if policy & 1 == 1 {
            SlowConsumerPolicy::Discard
        } else {
            SlowConsumerPolicy::Disconnect
        },
        handshake_timeout_ms: 1_000,
        stall_timeout_ms: 2_000,
        read_buffer: MAX_FRAME as usize,
        publish_window: u32::from(policy >> 1) % 8 + 1,
        ..Config::default()
    };
    let now = MonoNanos(1_000_000_000);
    let (core, spool) = new_core(&cfg, now, Vec::new(), HashMap::new());
    let mut w = World {
        cfg,
        core,
        spool,
        conns: Vec::new(),
        now,
        scratch: Vec::new(),
    };
    let mut cur = Cursor(ops);
    while w.step(&mut cur).is_some() {
        w.check();
    }
    for k in 0..w.conns.len() {
        w.write(k, usize::MAX);
    }
});
