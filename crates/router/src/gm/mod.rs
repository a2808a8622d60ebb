//! Guaranteed messaging: durable queues, acknowledged publishing, redelivery and
//! replay (`docs/guaranteed.md`). A pure core like the rest of the router: frames and
//! time in, frames and spool records out. It never touches a file: records go to a
//! [`Log`] (the driver's spool appender, or a vector in tests) and the driver reports
//! back with [`Engine::handle_durable`] / [`Engine::handle_failed`].
//!
//! Order of events for one guaranteed publish:
//! 1. [`Engine::handle_publish`]: duplicate check (publisher identity + sequence),
//!    window and queue limits, then the message record is appended to the log and the
//!    message is placed in every matching queue (not yet deliverable);
//! 2. the spool makes it durable (group commit) and the driver calls
//!    [`Engine::handle_durable`]: PUB_ACK to the publisher, and the message becomes
//!    deliverable, so nothing is delivered that a crash could take back;
//! 3. consumers' CONSUMER_ACKs remove it from their queues (an `A` record each).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

mod entries;
pub mod queue;
pub mod record;
pub mod store;

use std::collections::{BTreeSet, HashMap, VecDeque};

use tickwire_rt::{MonoNanos, UtcNanos};
use tickwire_wire::frame::{ErrorCode, Msg, Stamps};
use tickwire_wire::gm::{self as wgm, NackAction, NackReason, QueueOp, Start};

use crate::index::{Slot, SubscriptionIndex};
use entries::Entries;
use queue::{Access, FullPolicy, QueueDef, StartAt};
use record::{HoldersBuf, Record};
use store::{NewMessage, Restored, Store};

/// Where the engine's records go: the spool's appender in the router, a vector in tests.
pub trait Log {
    /// Appends one record; returns its record number (increasing).
    fn append(&mut self, record: &[u8]) -> Result<u64, LogError>;
}

/// What the spool reports back to the router thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Every record up to this number is durable (failed ones were reported before).
    Durable(u64),
    /// Records `first..=last` were not written.
    Failed {
        /// First failed record.
        first: u64,
        /// Last failed record.
        last: u64,
        /// Why, for the NACK text.
        why: String,
    },
}

/// The router's side of a spool: the driver adapts the storage thread's appender; a
/// router without a data directory uses [`NoSpool`].
pub trait SpoolPort: Log + Send {
    /// Guaranteed messaging is available.
    fn enabled(&self) -> bool;
    /// Hands the records appended this turn to the storage thread.
    fn flush(&mut self);
    /// What became durable (or failed) since the last call.
    fn poll_progress(&mut self) -> Option<Progress>;
    /// Records below this number are needed by nobody.
    fn reclaim(&mut self, below: u64);
    /// Usage figures for the stats document.
    fn usage(&self) -> serde_json::Value;
    /// Bytes of the spool's segment files (0 when unknown: nothing is relocated).
    fn bytes_on_disk(&self) -> u64 {
        0
    }
}

/// No spool: guaranteed messaging is off (the router was started without one).
pub struct NoSpool;

impl Log for NoSpool {
    fn append(&mut self, _: &[u8]) -> Result<u64, LogError> {
        Err(LogError::Failed)
    }
}

impl SpoolPort for NoSpool {
    fn enabled(&self) -> bool {
        false
    }
    fn flush(&mut self) {}
    fn poll_progress(&mut self) -> Option<Progress> {
        None
    }
    fn reclaim(&mut self, _: u64) {}
    fn usage(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Why a record could not be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogError {
    /// The hand-off to the storage thread is full.
    Busy,
    /// The record is larger than the spool accepts.
    TooLarge,
    /// The spool has failed.
    Failed,
}

/// Whether a queue defined by `def` holds message `id` that arrived at `time`: published
/// after it was created, or retained when it was created and selected by its `start`.
fn holds(def: &QueueDef, id: u64, time: u64) -> bool {
    id >= def.created_at
        || match def.start {
            StartAt::Now => false,
            StartAt::Beginning => true,
            StartAt::Id(from) => id >= from,
            StartAt::TimeNs(t) => time >= t,
        }
}

/// The fewest bytes of one queue's JSON in a LIST answer (its definition alone is
/// longer): more queues than `max_frame / MIN_QUEUE_JSON` cannot fit one answer.
const MIN_QUEUE_JSON: usize = 256;

/// Most retained messages one pump of browse bindings looks at (a BIND, an
/// acknowledgement, a durability step, a timer tick): ~50 µs of index walks at most.
const BROWSE_SCAN: usize = 1024;

/// Most browse bindings one pump looks at, full ones included (a full binding takes
/// nothing from [`BROWSE_SCAN`]: hostile-input pass, 65,536 browse bindings left full,
/// never acknowledging, were each looked at by every pump: ~1.9 ms of router time per
/// guaranteed publish, 17% of a core idle). The next pump goes on from where this one
/// stopped.
const BROWSE_VISITS: usize = 1024;

/// Most retained messages one step of the pending creates' fills looks at (a timer tick;
/// more when guaranteed publishes arrive faster, see [`Engine::pump_fills`]). Each costs
/// a walk of the new queue's own small index, ~0.1–0.2 µs: ~1–1.5 ms per step, so a fill
/// proceeds at ~800,000 retained messages a second (the router ticks every 10 ms while a
/// fill is pending) and 1,000,000 retained messages take ~1.2 s.
const FILL_SCAN: usize = 8_192;

/// Most creates that start in the past one connection may have filling at once; more
/// get a non-fatal BUSY before any scanning, so a connection that floods CREATE frames
/// costs at most this many initial scans (`BROWSE_SCAN` each) per read, not one each.
const MAX_FILLS_PER_CONNECTION: usize = 4;

/// Most pins of an abandoned fill (a create refused or cancelled after finding
/// messages) released per step: a counter decrement each, ~2 ns.
const FILL_UNPIN: usize = 131_072;

/// Most expired deliveries one [`Engine::handle_timeout`] gives back (each a requeue or a
/// dead-lettering, then a redelivery by the pump), ~0.3 µs each: ~0.3 ms of the loop per
/// turn however many a peer lets expire at once. The rest stay due, so
/// [`Engine::poll_timeout`] asks for the next turn at once (the driver runs timer work at
/// most every 1 ms: ~1,000,000 given back a second at most, the IO of everyone else
/// served between turns).
pub const TIMEOUT_BUDGET: usize = 1024;

/// Held-back messages one timer tick looks at for [`store::Store::compact_step`] (it
/// also moves about a chunk, 1 MiB, at most): tens of microseconds.
const COMPACT_ENTRIES_PER_TICK: usize = 4096;

/// Most held messages one relocation step ([`Engine::relocate`], every 10 s) writes
/// again, and most bytes of records it writes. A step of 4,096 messages held by 4
/// queues among 1,000 took 20–22 ms of the router thread in a debug build (`cargo run
/// -p tickwire-router --example scale_costs -- relocate 20000`); ~5 µs a message, most
/// of it the topic match that finds the holders.
pub const RELOCATE_MESSAGES: usize = 4096;
/// See [`RELOCATE_MESSAGES`].
pub const RELOCATE_BYTES: usize = 8 << 20;
/// A spool this small is never worth rewriting (two default segments).
pub const RELOCATE_FLOOR: u64 = 128 << 20;
/// What a message record takes beside its topic and payload, about (the spool's 16
/// bytes of framing, the record's fixed fields, an identity or a queue list): the
/// relocation rule's estimate of what the retained messages take on disk.
const RECORD_OVERHEAD: u64 = 128;

/// Sets `out` to the subscribers of `index` that `topic` (a stored message's topic, so
/// checked again: it may come from a spool file) matches; none when it is not a valid
/// topic.
fn match_stored(index: &mut SubscriptionIndex, topic: &[u8], out: &mut Vec<Slot>) {
    out.clear();
    if let Ok(t) = std::str::from_utf8(topic) {
        if tickwire_wire::topic::validate_topic(t.as_bytes()).is_ok() {
            index.match_topic(t, out);
        }
    }
}

/// Settings of the guaranteed-messaging engine.
#[derive(Debug, Clone)]
pub struct GmConfig {
    /// Most unanswered guaranteed publishes per publisher (announced in PUB_OPENED).
    pub publish_window: u32,
    /// Keep acknowledged messages for replay while they total at most this many bytes
    /// (each message's topic and payload and its index entry, [`store::ENTRY_BYTES`];
    /// messages a queue holds are not counted).
    pub retain_bytes: u64,
    /// ... and are younger than this (ms).
    pub retain_ms: u64,
    /// Most queues.
    pub max_queues: usize,
    /// Most nodes of the queues' subscription index (every queue's patterns together;
    /// each pattern level no other pattern shares is one node, ~560 bytes): a queue
    /// definition that would take it beyond is refused.
    pub max_index_nodes: usize,
    /// Most trie steps one topic match may take in the queues' index (the router's
    /// `max_match_work`): a definition that would raise the bound beyond is refused.
    pub max_match_work: u64,
    /// Most queue entries, every queue together (one per message per queue that holds
    /// it, ~24 bytes each and up to twice that while a queue's buffer grows): a
    /// publish that would pass it is NACKed `queue-full`, and a queue whose starting
    /// point would fill it past it is refused.
    pub max_entries: u64,
    /// Most bytes of guaranteed messages held in memory (each message's topic and
    /// payload and its index entry, [`store::ENTRY_BYTES`]), over every queue and the
    /// replay retention: a publish beyond it is NACKed `queue-full` (after releasing
    /// retained messages no queue holds).
    pub max_stored_bytes: u64,
    /// Most publisher identities remembered (each keeps up to `2 × publish_window + 16`
    /// recent sequence numbers for the duplicate check).
    pub max_publishers: usize,
    /// Largest frame (a DELIVER must fit).
    pub max_frame: u32,
    /// Most bytes (topic + payload) delivered to one binding and not yet acknowledged,
    /// beyond its first message: half the router's `egress_limit`, so that a window of
    /// large messages waits for acknowledgements instead of overflowing the consumer's
    /// egress buffer (64 DELIVERs of 900 KB cut a reading consumer off as a slow one).
    pub max_in_flight_bytes: u64,
    /// A spool of at most this many bytes is never relocated ([`RELOCATE_FLOOR`];
    /// tests make it small).
    pub relocate_floor: u64,
}

impl Default for GmConfig {
    fn default() -> Self {
        GmConfig {
            publish_window: 4096,
            retain_bytes: 64 << 20,
            retain_ms: 3_600_000,
            max_queues: 10_000,
            max_index_nodes: 500_000,
            max_match_work: 1_000,
            max_entries: 20_000_000,
            max_publishers: 1024,
            max_stored_bytes: 1 << 30,
            max_frame: tickwire_wire::frame::DEFAULT_MAX_FRAME,
            max_in_flight_bytes: 4 << 20,
            relocate_floor: RELOCATE_FLOOR,
        }
    }
}

/// A refusal of one frame: the driver sends ERROR (fatal: and closes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The request answered (0: none).
    pub request_id: u32,
    /// Error code.
    pub code: ErrorCode,
    /// Close the connection.
    pub fatal: bool,
    /// For a person.
    pub text: String,
}

/// What a create asking for `asked` changes in the queue's definition `have`: each
/// differing field by its JSON name, with the value it has and the value asked for
/// ("max_messages is 1000, asked 500"). Each value shown is cut at
/// [`DIFF_VALUE_MAX`] characters, so the text stays short whatever was asked.
fn definition_differences(have: &QueueDef, asked: &QueueDef) -> String {
    let (Ok(serde_json::Value::Object(h)), Ok(serde_json::Value::Object(a))) =
        (serde_json::to_value(have), serde_json::to_value(asked))
    else {
        return "its fields differ".to_owned();
    };
    let shown = |v: &serde_json::Value| {
        let t = v.to_string();
        if t.chars().count() > DIFF_VALUE_MAX {
            let cut: String = t.chars().take(DIFF_VALUE_MAX).collect();
            format!("{cut}...")
        } else {
            t
        }
    };
    let diffs: Vec<String> = h
        .iter()
        .filter_map(|(k, hv)| {
            let av = a.get(k).unwrap_or(&serde_json::Value::Null);
            (hv != av).then(|| format!("{k} is {}, asked {}", shown(hv), shown(av)))
        })
        .collect();
    if diffs.is_empty() {
        "its fields differ".to_owned()
    } else {
        diffs.join("; ")
    }
}

/// The most characters of one value [`definition_differences`] shows.
const DIFF_VALUE_MAX: usize = 80;

/// The largest message id recovery takes: no router gets there (1,400 years at 100
/// million messages a second), and one near 2^64 read back made the ids wrap, so that
/// new publishes took the ids of held messages and their acknowledgements removed
/// those (hostile-input pass).
pub const MAX_MESSAGE_ID: u64 = 1 << 62;

/// The largest publisher sequence number (PUBLISH's SEQ is 1 to 2^64-2).
const MAX_PUBLISH_SEQ: u64 = u64::MAX - 1;

/// Why a record read back names a number no router reaches (None: it does not): a
/// message id, a checkpoint's next id or a copy's beyond [`MAX_MESSAGE_ID`], a
/// publisher's high-water mark beyond [`MAX_PUBLISH_SEQ`].
fn beyond_reach(r: &Record<'_>) -> Option<String> {
    let ids: &[u64] = match r {
        Record::Message { id, .. } => &[*id],
        Record::NextId { id } => &[*id],
        Record::Relocated { id, next_id, .. } => &[*id, *next_id],
        Record::Publisher { hwm, .. } => {
            return (*hwm > MAX_PUBLISH_SEQ)
                .then(|| format!("publisher high-water mark {hwm} beyond 2^64-2"));
        }
        _ => &[],
    };
    ids.iter()
        .find(|&&id| id > MAX_MESSAGE_ID)
        .map(|id| format!("message id {id} beyond any a router reaches (2^62)"))
}

/// How far in the future (by the router's clock) a start time may lie: clocks of two
/// hosts differ, and the router's is read at its timer tick.
const START_TIME_SLACK_NS: u64 = 1_000_000_000;

/// Why a binding or a queue may not start at message `id` or time `time_ns` (UTC ns)
/// when the router's next message id is `next_id` and its clock reads `wall` (None:
/// not known yet): a start beyond the newest message or in the future would wait for
/// messages that do not exist yet, and a time read as "now" takes messages published
/// before it (new-user pass: `time:2030-...` browsed a 2026 message, `id:999999999`
/// waited for ever). Almost always a typo: a unit, a zone or a digit.
fn start_beyond_now(
    id: Option<u64>,
    time_ns: Option<u64>,
    next_id: u64,
    wall: Option<UtcNanos>,
) -> Option<String> {
    if let Some(id) = id.filter(|&id| id > next_id) {
        return Some(format!(
            "start id {id} is beyond the next message id {next_id}: no such message yet \
             (`beginning` starts at the oldest retained one)"
        ));
    }
    let wall = wall?.as_nanos();
    let t = time_ns.filter(|&t| t > wall.saturating_add(START_TIME_SLACK_NS))?;
    Some(format!(
        "start time {t} ns is {:.0} s after the router's clock ({wall} ns): times are Unix \
         nanoseconds, UTC",
        (t - wall) as f64 / 1e9
    ))
}

fn reject(request_id: u32, code: ErrorCode, text: impl Into<String>) -> Reject {
    Reject {
        request_id,
        code,
        fatal: false,
        text: text.into(),
    }
}

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct QueueCounters {
    /// Messages spooled to it.
    pub spooled: u64,
    /// Deliveries (first and repeated).
    pub delivered: u64,
    /// Redeliveries.
    pub redelivered: u64,
    /// Acknowledged by consumers.
    pub acked: u64,
    /// Moved to the dead-message queue (max redeliveries, TTL, consumer NACK).
    pub dead_lettered: u64,
    /// Removed to make room under `discard-oldest`.
    pub discarded: u64,
    /// Publishes refused because this queue was full or the message too large.
    pub rejected: u64,
}

/// One message a queue holds (its id is the key in [`Queue::entries`]).
#[derive(Debug, Clone, Copy)]
struct QEntry {
    deliveries: u32,
    /// Binding it is in flight on (0: not in flight).
    binding: u32,
    done: bool,
}

/// Done entries a queue's list may hold behind a live one before it is compacted
/// (`Queue::trim`).
const COMPACT_AT: u64 = 1024;

struct Queue {
    /// Never changed once the queue exists (a definition is immutable: CREATE of an
    /// existing name must match it), so `def_json` stays its serialization.
    def: QueueDef,
    /// `def` as its `QueueDefined` record carries it: made once, when the queue is,
    /// so that a checkpoint copies it instead of serializing every definition on the
    /// loop (3.2 ms for 10,000 queues).
    def_json: Box<str>,
    /// Its messages by id: delivery goes in id order. Not one sorted array: a message
    /// may come in out of id order (dead-lettered from another queue, read back by
    /// recovery, a replay start ahead of the newest id), and a sorted array's insert
    /// moved up to half the queue each time; [`Entries`] appends what comes in order
    /// and keeps the rest in a B-tree, O(log n) wherever the id lies.
    entries: Entries,
    /// Entries not done.
    depth: u64,
    bytes: u64,
    /// Every entry with an id below this was delivered at least once (or is listed in
    /// `redeliver`).
    cursor: u64,
    /// Ids waiting for a redelivery (given back, or stored behind `cursor`), in id
    /// order; ids no longer waiting are stepped over when they reach the front. A set
    /// for the reason `entries` is a tree: ids come back in any order.
    redeliver: BTreeSet<u64>,
    /// Ack deadlines in delivery order: (deadline, id, binding, delivery count).
    timeouts: VecDeque<(MonoNanos, u64, u32, u32)>,
    bindings: Vec<u32>,
    rr: usize,
    counters: QueueCounters,
    /// Listed in [`Engine::touched`].
    touched: bool,
}

impl Queue {
    fn new(def: QueueDef) -> Queue {
        Queue {
            def_json: serde_json::to_string(&def).unwrap_or_default().into(),
            def,
            entries: Entries::new(),
            depth: 0,
            bytes: 0,
            cursor: 0,
            redeliver: BTreeSet::new(),
            timeouts: VecDeque::new(),
            bindings: Vec::new(),
            rr: 0,
            counters: QueueCounters::default(),
            touched: false,
        }
    }

    fn find(&self, id: u64) -> Option<&QEntry> {
        self.entries.get(&id)
    }

    /// The oldest entry waiting for a delivery (never delivered, or given back): the
    /// first live one listed in `redeliver`, or the first not done at or after `cursor`
    /// (entries from `cursor` on were never handed out), whichever is older. Not a walk
    /// from the front, which would pass every message in flight first.
    fn oldest_waiting(&self) -> Option<u64> {
        let waiting = |id: u64| self.find(id).is_some_and(|e| !e.done && e.binding == 0);
        let given_back = self.redeliver.iter().copied().find(|&id| waiting(id));
        let fresh = self
            .entries
            .range(self.cursor..)
            .find(|(_, e)| !e.done && e.binding == 0)
            .map(|(&id, _)| id);
        match (given_back, fresh) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drops the done entries at the front, and all of them once they are most of the
    /// list; returns how many went. A message held unacknowledged at the front kept every
    /// entry behind it, done or not (a hostile-input pass: one consumer holding its first
    /// message while 20 M went through took the router's `max_queue_entries` and NACKed
    /// every guaranteed publish on every queue, 820 MB held). Compacting when the done
    /// entries pass half the list (and `COMPACT_AT`) keeps the list within about twice
    /// what is live, each entry looked at O(1) times on average.
    fn trim(&mut self) -> u64 {
        let mut n = 0;
        while self.entries.first_key_value().is_some_and(|(_, e)| e.done) {
            self.entries.pop_first();
            n += 1;
        }
        let done = (self.entries.len() as u64).saturating_sub(self.depth);
        if done > COMPACT_AT && done * 2 > self.entries.len() as u64 {
            let before = self.entries.len();
            self.entries.retain(|_, e| !e.done);
            n += (before - self.entries.len()) as u64;
            // Deadlines of deliveries no longer in flight go with them.
            let entries = &self.entries;
            self.timeouts.retain(|&(_, id, binding, count)| {
                entries
                    .get(&id)
                    .is_some_and(|e| e.binding == binding && e.deliveries == count)
            });
        }
        n
    }
}

struct Binding {
    slot: Slot,
    queue: u32,
    window: u32,
    /// Message ids delivered and not yet acknowledged, in id order: an acknowledgement
    /// finds its ids by binary search and takes them out moving the shorter side, so a
    /// consumer acknowledging in order costs what it acknowledges, not its window (a
    /// scan of the whole list per CONSUMER_ACK made 200,000 messages through a window of
    /// 65,536 take 4.5 s instead of 0.2). Each with its size (topic + payload).
    in_flight: VecDeque<(u64, u64)>,
    /// Their sizes together.
    in_flight_bytes: u64,
    active: bool,
    /// Browse (replay) binding: the next message id to look at.
    browse: Option<u64>,
    /// A browse binding's place in [`Engine::browsers`].
    browse_at: usize,
}

impl Binding {
    /// Records `id` as delivered and unacknowledged (a redelivery of an older message
    /// goes to its place in id order).
    fn add_in_flight(&mut self, id: u64, size: u64) {
        self.in_flight_bytes += size;
        match self.in_flight.back() {
            Some(&(last, _)) if last > id => {
                let at = self.in_flight.partition_point(|&(x, _)| x < id);
                self.in_flight.insert(at, (id, size));
            }
            _ => self.in_flight.push_back((id, size)),
        }
    }

    /// Takes `id` out of the in-flight list; false if it was not there.
    fn take_in_flight(&mut self, id: u64) -> bool {
        match self.in_flight.binary_search_by_key(&id, |&(x, _)| x) {
            Ok(at) => {
                if let Some((_, size)) = self.in_flight.remove(at) {
                    self.in_flight_bytes = self.in_flight_bytes.saturating_sub(size);
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Takes every in-flight id in `first..=last` out, appending them to `out`.
    fn take_in_flight_range(&mut self, first: u64, last: u64, out: &mut Vec<u64>) {
        let lo = self.in_flight.partition_point(|&(x, _)| x < first);
        let hi = self.in_flight.partition_point(|&(x, _)| x <= last);
        if lo < hi {
            for (id, size) in self.in_flight.drain(lo..hi) {
                self.in_flight_bytes = self.in_flight_bytes.saturating_sub(size);
                out.push(id);
            }
        }
    }

    /// Whether another message may go out: the window has room, and the bytes in
    /// flight are under `max_bytes` (or nothing is in flight: one message always may).
    fn has_room(&self, max_bytes: u64) -> bool {
        (self.in_flight.len() as u32) < self.window
            && (self.in_flight.is_empty() || self.in_flight_bytes < max_bytes)
    }
}

struct Publisher {
    name: String,
    /// Highest sequence stored.
    hwm: u64,
    /// Recently stored (seq, lsn), ascending by seq: the duplicate check.
    recent: VecDeque<(u64, u64)>,
    /// Sequences up to this are old: stored before what `recent` remembers.
    floor: u64,
    slot: Option<Slot>,
    options: u32,
    unanswered: u32,
    /// When it was last opened or stored to (`Engine::publisher_uses` then): the
    /// identity used longest ago is the one forgotten to make room.
    last_use: u64,
    /// Forgotten at recovery (an `F` record) and not reused since: on the free list,
    /// in no checkpoint.
    forgotten: bool,
    /// Something was stored under it (or a checkpoint said so): it is in the spool,
    /// so forgetting it takes an `F` record. One that stored nothing is in no record
    /// (checkpoints leave it out) and is forgotten for free.
    stored: bool,
}

impl Publisher {
    /// Identity `name`, with nothing stored yet.
    fn new(name: &str) -> Publisher {
        Publisher {
            name: name.to_owned(),
            hwm: 0,
            recent: VecDeque::new(),
            floor: 0,
            slot: None,
            options: 0,
            unanswered: 0,
            last_use: 0,
            forgotten: false,
            stored: false,
        }
    }
}

/// A CREATE whose start is in the past, filling its queue from the retained messages a
/// budget at a time ([`Engine::pump_fills`]). The queue exists for nobody until the fill
/// has caught up with the newest message; then, in that same step, it is placed with
/// what was found and the CREATE is answered.
struct Fill {
    def: QueueDef,
    /// Who asked (dropped with the connection: slots are reused).
    slot: Slot,
    request_id: u32,
    /// The next message id to look at.
    cursor: u64,
    /// Messages that arrived before this (UTC ns) are not taken.
    from_time: u64,
    /// The new queue's own patterns (the queues' index would answer for every queue).
    own: SubscriptionIndex,
    /// The messages found, by id, each pinned in the store (a reference) and counted
    /// in `Engine::entries`; the new queue's `entries` as they are.
    found: Entries,
    /// Their bytes.
    bytes: u64,
    /// Its number in `Engine::fill_index` while it waits in `Engine::fills` (fills are
    /// numbered in the order they wait, so `fills` is sorted by it).
    serial: Option<u32>,
    /// Messages published while it fills that match it, ahead of `cursor`, in id
    /// order: each pinned and counted in `Engine::entries` when stored (retention must
    /// not release them before the scan reaches them), and moved to `found` by it.
    late: VecDeque<u64>,
}

impl Fill {
    fn new(def: QueueDef, slot: Slot, request_id: u32, newest: u64) -> Fill {
        let (cursor, from_time) = start_point(def.start).unwrap_or((newest, 0));
        let own = own_index(&def);
        Fill {
            def,
            slot,
            request_id,
            cursor,
            from_time,
            own,
            found: Entries::new(),
            bytes: 0,
            serial: None,
            late: VecDeque::new(),
        }
    }
}

/// Where a queue's start lies among the retained messages: the first id and the
/// earliest arrival time (UTC ns) it takes; `None` for a queue that starts now.
fn start_point(start: StartAt) -> Option<(u64, u64)> {
    match start {
        StartAt::Now => None,
        StartAt::Beginning => Some((0, 0)),
        StartAt::Id(id) => Some((id, 0)),
        StartAt::TimeNs(t) => Some((0, t)),
    }
}

/// A queue's own patterns in an index of their own (slot 0), to match retained
/// messages against this one queue (the queues' index would answer for every queue).
fn own_index(def: &QueueDef) -> SubscriptionIndex {
    let mut own = SubscriptionIndex::new();
    for p in &def.subscriptions {
        own.subscribe(Slot(0), p);
    }
    own
}

/// Where one step of a fill stopped.
enum FillScan {
    /// Out of budget: goes on from its cursor at the next step.
    Paused,
    /// Every retained message up to the newest was looked at.
    CaughtUp,
    /// The next message found would pass `max_entries`.
    TooManyEntries,
}

struct PendingPub {
    lsn: u64,
    msg_id: u64,
    publisher: u32,
    seq: u64,
}

#[derive(Default)]
struct Conn {
    publisher: Option<u32>,
    bindings: Vec<u32>,
}

/// Guaranteed messaging's state as the stats document and the monitoring endpoint show
/// it (JSON member `guaranteed`), copied out of the engine ([`Engine::view`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct GmView {
    /// Engine-wide counters.
    pub totals: GmTotals,
    /// Messages kept for replay.
    pub retained_messages: usize,
    /// Their bytes.
    pub retained_bytes: u64,
    /// What the memory chunks holding them take: at most about twice
    /// `retained_bytes`, and 16 MiB more, once compaction has caught up (the chunks
    /// being written, and the window's, whose messages go in order, aside).
    pub retained_memory: u64,
    /// Connections open as guaranteed publishers.
    pub publishers: usize,
    /// Publisher identities the router remembers (open or not), and their bound
    /// (`max_publishers`; beyond it a new one replaces an idle one).
    pub publisher_identities: usize,
    /// `max_publishers`.
    pub max_publisher_identities: usize,
    /// Entries of all queues together, and their bound.
    pub queue_entries: u64,
    /// `max_queue_entries`.
    pub max_queue_entries: u64,
    /// Nodes of the queues' subscription index, and their bound.
    pub queue_index_nodes: usize,
    /// `max_queue_index_nodes`.
    pub max_queue_index_nodes: usize,
    /// The queues shown, by name.
    pub queues: Vec<QueueView>,
    /// Queues left out (beyond the number asked for).
    pub queues_omitted: usize,
    /// Pending creates left out.
    pub pending_creates_omitted: usize,
    /// Creates that start in the past, still filling: how far each has looked.
    pub pending_creates: Vec<PendingView>,
}

/// One queue in a [`GmView`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueueView {
    /// Its name.
    pub name: String,
    /// Messages it holds (waiting and in flight).
    pub depth: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Delivered to its consumers, not yet acknowledged.
    pub in_flight: usize,
    /// Bindings.
    pub consumers: usize,
    /// Bindings receiving now.
    pub active_consumers: usize,
    /// Its counters (JSON: their members, beside the others).
    #[serde(flatten)]
    pub counters: QueueCounters,
    /// Its definition.
    pub definition: QueueDef,
}

/// One pending create in a [`GmView`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct PendingView {
    /// The queue's name.
    pub name: String,
    /// The next message id the fill looks at.
    pub next_id: u64,
    /// The newest message id stored.
    pub newest_id: u64,
    /// Messages found so far, and those published for it since (held until found).
    pub found: usize,
}

/// Engine-wide counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GmTotals {
    /// Guaranteed publishes received.
    pub publishes: u64,
    /// Acknowledged (durable) to publishers.
    pub acked: u64,
    /// NACKed.
    pub nacked: u64,
    /// Resends recognised as duplicates (not stored again).
    pub duplicates: u64,
    /// Deliveries to consumers.
    pub delivered: u64,
    /// Redeliveries.
    pub redelivered: u64,
    /// Records the spool refused or failed to write.
    pub spool_failures: u64,
    /// Publisher identities forgotten to make room for new ones (`max_publishers`).
    pub publishers_forgotten: u64,
}

/// Most bytes of queue definitions (their JSON, all queues together): a checkpoint
/// rewrites every one, and must fit in what the spool takes at once (64 MiB, with room
/// left for the publishers' records).
pub const MAX_DEFINITION_BYTES: usize = 32 << 20;

/// Most bindings of one queue (active, standby and browsing together).
pub const MAX_BINDINGS_PER_QUEUE: usize = 4096;

/// Most bindings one connection holds on one queue: so that no connection fills a
/// queue's [`MAX_BINDINGS_PER_QUEUE`] alone and locks the queue's consumers out.
pub const MAX_BINDINGS_PER_QUEUE_PER_CONNECTION: usize = 32;

/// A binding's share of `max_bytes` in flight: the connection's budget split among its
/// bindings (review: each binding's own half of the egress limit let two of them
/// overflow one connection's egress buffer).
fn in_flight_budget(conns: &HashMap<u32, Conn>, slot: Slot, max_bytes: u64) -> u64 {
    let n = conns.get(&slot.0).map_or(1, |c| c.bindings.len().max(1));
    max_bytes / n as u64
}

/// The code of a refused CREATE: `BUSY` when the spool could not take its record (try
/// again), `INVALID_REQUEST` otherwise.
fn create_refusal_code(text: &str) -> ErrorCode {
    if text == SPOOL_REFUSED {
        ErrorCode::BUSY
    } else {
        ErrorCode::INVALID_REQUEST
    }
}

/// Why a queue request was refused when the spool could not take its record.
const SPOOL_REFUSED: &str = "the spool could not take the record now (it is busy, or failing: \
                             see the router's log); nothing was changed: try again";

/// The guaranteed-messaging state of one router.
pub struct Engine {
    cfg: GmConfig,
    /// The router's clocks at the last [`Engine::handle_timeout`] (monotonic, UTC):
    /// what a start time is checked against (None before the first tick).
    tick_clock: Option<(MonoNanos, UtcNanos)>,
    store: Store,
    queues: Vec<Option<Queue>>,
    queue_names: HashMap<String, u32>,
    /// How many queues name each queue as their `dead_letter_queue` (other than
    /// themselves). A message that dies in such a queue is dropped, not moved on: a
    /// dead message moves once, never around a loop of queues naming each other.
    dead_letter_targets: HashMap<String, u32>,
    index: SubscriptionIndex,
    matched: Vec<Slot>,
    /// The queues a retained message matches, for browse scans.
    browse_hits: Vec<Slot>,
    /// Where the next [`Engine::pump_browsers`] starts.
    browse_rr: usize,
    /// The browse bindings (each knows its place: `Binding::browse_at`), so that a
    /// durability step finds them without a walk of every binding.
    browsers: Vec<u32>,
    /// Entries of every queue together (`max_entries`), and those pending creates have
    /// found so far.
    entries: u64,
    /// Creates that start in the past, still filling, oldest first.
    fills: VecDeque<Fill>,
    /// The store's next id at the last [`Engine::pump_fills`].
    fill_seen: u64,
    /// Found messages of abandoned fills, still pinned (released a budget at a time).
    unpin: Vec<Entries>,
    /// The patterns a retained message matches, for fills.
    fill_hits: Vec<Slot>,
    /// The waiting fills' patterns, each under its fill's serial: a publish is matched
    /// against all of them at once (not once per fill).
    fill_index: SubscriptionIndex,
    /// The next fill serial.
    fill_serial: u32,
    /// The positions in `fills` of the fills that take the publish being handled.
    fill_takers: Vec<usize>,
    /// The queues and fills the last [`Engine::handle_publish`] matched: the work it
    /// did, one entry each ([`Engine::last_publish_work`]).
    publish_work: u64,
    /// Retained messages a fill looks at: at its CREATE, and per step
    /// ([`BROWSE_SCAN`], [`FILL_SCAN`]; tests make them small).
    fill_budget: (usize, usize),
    publishers: Vec<Publisher>,
    publisher_names: HashMap<String, u32>,
    /// Entries of `publishers` forgotten at recovery, to be reused.
    free_publishers: Vec<u32>,
    /// Counts uses of publisher identities (opens, stores): their `last_use` clock.
    publisher_uses: u64,
    /// Forgets whose `F` record is not yet durable (record number, identity; 0: its
    /// write failed, appended again when the name is next asked for). Such a name
    /// is not opened again until its record is durable (PUB_OPEN answered BUSY), so
    /// no record of a new publisher of it can outlive the forget in a crash. At most
    /// `max_publishers` (beyond, forgets that need a record wait: BUSY).
    forgets: Vec<(u64, String)>,
    pending: VecDeque<PendingPub>,
    durable_lsn: u64,
    /// Every message with an id up to this is durable (or dead).
    durable_id: u64,
    bindings: HashMap<u32, Binding>,
    next_binding: u32,
    conns: HashMap<u32, Conn>,
    rec: Vec<u8>,
    out: Vec<u8>,
    outq: Vec<(Slot, usize, usize)>,
    fail: Vec<(Slot, ErrorCode, String)>,
    totals: GmTotals,
    recovering: bool,
    /// Recovery's first pass: the queue definitions found, in order (a deleted one's
    /// place empty), and where each name's is (one look per record: a list searched
    /// per record made a forged spool of many definitions quadratic).
    recovered_defs: Vec<Option<QueueDef>>,
    recovered_names: HashMap<String, usize>,
    /// Recovery: the record number of the last deletion of each queue name. Records
    /// naming a queue (acknowledged, dead-lettered, purged) from before it belong to an
    /// earlier queue of that name, not to the one installed (a hostile-input pass: a
    /// queue deleted and made again from the beginning lost at the restart the messages
    /// it held, to the old queue's acknowledgements).
    deleted_at: HashMap<String, u64>,
    defs_preinstalled: bool,
    scratch_ids: Vec<u64>,
    /// `pump`'s list of the bindings with room (index in the queue's list, binding).
    pump_ready: Vec<(usize, u32)>,
    /// Tests: how many times a pump looked at a binding.
    #[cfg(test)]
    pump_looks: std::cell::Cell<u64>,
    /// Tests: how many times a browse pump looked at a browse binding.
    #[cfg(test)]
    browse_looks: u64,
    /// Recovery problems to report (records that do not decode or apply).
    pub recovery_errors: Vec<String>,
    /// No queue has an ack deadline before this: lowered by every delivery, set
    /// exactly by [`Engine::handle_timeout`] (an entry acknowledged since only makes it
    /// early, never late). Keeps [`Engine::poll_timeout`], which the driver asks every
    /// turn, from walking the queues.
    ack_deadline: Option<MonoNanos>,
    /// The queue whose ack timeouts [`Engine::handle_timeout`] looks at first: the one
    /// after where the last call ran out of [`TIMEOUT_BUDGET`], so a queue that always
    /// has more expired than the budget cannot keep the others waiting.
    timeout_from: u32,
    /// Queues that took messages not yet durable: what a durability step may have made
    /// deliverable is in these (a queue leaves the list when its newest entry is
    /// durable), so the step pumps them, not every queue.
    touched: Vec<u32>,
    /// The list a durability step works through: [`Engine::touched`] is swapped into
    /// it and it is cleared after, so a step reuses both allocations.
    pump_list: Vec<u32>,
    /// Relocated copies not yet durable: (record number, message id), in record order.
    /// A message's record number changes (and its old record may go) only once its
    /// copy is durable.
    relocating: VecDeque<(u64, u64)>,
    /// Queues that may hold messages their patterns do not match (dead-message queues,
    /// and queues given relocated copies at recovery): with the queues a topic matches,
    /// the ones to ask who holds a message. A set: noting one is one look, not a scan
    /// (a forged spool's dead-letter records noted 10,000 queues one by one).
    extra_holders: std::collections::BTreeSet<u32>,
    /// The highest `first_message_id` of any queue made (or recovered): no copy is
    /// written while it is the store's next id, so that every queue made before a copy
    /// has a `first_message_id` below the copy's `next_id` and every queue made after
    /// one at or above it (see [`record`]).
    newest_created_at: u64,
    holders: HoldersBuf,
    /// Queues found holding the message being relocated or recovered.
    holder_slots: Vec<u32>,
}

/// What one [`Engine::relocate`] step wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relocated {
    /// Held messages written again.
    pub messages: usize,
    /// Bytes of those records.
    pub bytes: usize,
}

/// The records a [`Engine::checkpoint`] appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// First and last record number appended (None: nothing to write).
    pub records: Option<(u64, u64)>,
    /// Every record was appended (false: one was refused, the checkpoint is not whole
    /// and no segment may go on its account).
    pub complete: bool,
}

impl Engine {
    /// An empty engine.
    pub fn new(cfg: GmConfig) -> Engine {
        Engine {
            cfg,
            tick_clock: None,
            store: Store::new(1),
            queues: Vec::new(),
            queue_names: HashMap::new(),
            dead_letter_targets: HashMap::new(),
            index: SubscriptionIndex::new(),
            matched: Vec::new(),
            browse_hits: Vec::new(),
            browse_rr: 0,
            browsers: Vec::new(),
            entries: 0,
            fills: VecDeque::new(),
            fill_seen: 0,
            unpin: Vec::new(),
            fill_hits: Vec::new(),
            fill_index: SubscriptionIndex::new(),
            fill_serial: 0,
            fill_takers: Vec::new(),
            publish_work: 0,
            fill_budget: (BROWSE_SCAN, FILL_SCAN),
            publishers: Vec::new(),
            publisher_names: HashMap::new(),
            free_publishers: Vec::new(),
            publisher_uses: 0,
            forgets: Vec::new(),
            pending: VecDeque::new(),
            durable_lsn: 0,
            durable_id: 0,
            bindings: HashMap::new(),
            next_binding: 0,
            conns: HashMap::new(),
            rec: Vec::new(),
            out: Vec::new(),
            outq: Vec::new(),
            fail: Vec::new(),
            totals: GmTotals::default(),
            recovering: true,
            recovered_defs: Vec::new(),
            recovered_names: HashMap::new(),
            deleted_at: HashMap::new(),
            defs_preinstalled: false,
            scratch_ids: Vec::new(),
            pump_ready: Vec::new(),
            #[cfg(test)]
            pump_looks: std::cell::Cell::new(0),
            #[cfg(test)]
            browse_looks: 0,
            recovery_errors: Vec::new(),
            ack_deadline: None,
            timeout_from: 0,
            touched: Vec::new(),
            pump_list: Vec::new(),
            relocating: VecDeque::new(),
            extra_holders: std::collections::BTreeSet::new(),
            newest_created_at: 0,
            holders: HoldersBuf::default(),
            holder_slots: Vec::new(),
        }
    }

    /// Totals.
    pub fn totals(&self) -> &GmTotals {
        &self.totals
    }

    // ------------------------------------------------------------------ recovery

    /// First recovery pass: queue definitions and deletions only, so that messages
    /// recorded before a (re-written, checkpointed) definition still find their queue.
    pub fn recover_definition(&mut self, lsn: u64, bytes: &[u8]) {
        match record::decode(bytes) {
            Ok(Record::QueueDefined { json }) => {
                let mut def = match serde_json::from_str::<QueueDef>(json) {
                    Ok(def) => def,
                    Err(e) => {
                        self.recovery_errors.push(format!(
                            "record {lsn}: queue definition: {e}: damage; skipped"
                        ));
                        return;
                    }
                };
                if def.created_at > MAX_MESSAGE_ID {
                    self.recovery_errors.push(format!(
                        "record {lsn}: queue {:?}'s first_message_id {} is beyond any \
                         message id (2^62): damage; skipped",
                        def.name, def.created_at
                    ));
                    return;
                }
                // What a create checks (name, dead-letter queue, 256 subscriptions and
                // their syntax) holds for what is read back: the router never stored a
                // definition that fails it (hostile-input pass: forged definitions were
                // indexed unchecked). Floors added since are raised, not refused.
                def.raise_to_floors();
                if let Err(e) = def.check() {
                    self.recovery_errors.push(format!(
                        "record {lsn}: queue definition {:?}: {e}: damage; skipped",
                        def.name
                    ));
                    return;
                }
                match self.recovered_names.get(&def.name).copied() {
                    // A checkpoint repeats a definition: the first one stays.
                    Some(i) => {
                        let slot = &mut self.recovered_defs[i];
                        if slot.as_ref().is_none_or(|d| d.created_at != def.created_at) {
                            *slot = Some(def);
                        }
                    }
                    None => {
                        self.recovered_names
                            .insert(def.name.clone(), self.recovered_defs.len());
                        self.recovered_defs.push(Some(def));
                    }
                }
            }
            Ok(Record::QueueDeleted { queue }) => {
                if let Some(i) = self.recovered_names.remove(queue) {
                    self.recovered_defs[i] = None;
                }
                self.deleted_at.insert(queue.to_owned(), lsn);
            }
            _ => {}
        }
    }

    /// Recovery: the queue named `name` that a record numbered `lsn` speaks of, if it
    /// is the one installed: with its definitions preinstalled, a record from before the
    /// name's last deletion is an earlier queue's.
    fn recovered_instance(&self, name: &str, lsn: u64) -> Option<u32> {
        let q = *self.queue_names.get(name)?;
        if self.defs_preinstalled && self.deleted_at.get(name).is_some_and(|&d| lsn < d) {
            return None;
        }
        Some(q)
    }

    /// Between the passes: installs the queues the first pass found, within the
    /// bounds a create is held to: at most `max_queues` queues (and the router's own
    /// dead-message queue), [`MAX_DEFINITION_BYTES`] of definitions, and the queues'
    /// index within `max_index_nodes` and `max_match_work`. A spool past them was not
    /// written by this router (hostile-input pass: 7.9 MB of forged definitions took
    /// 2.2 GB to index): the start is refused, saying which bound, and nothing is
    /// installed.
    pub fn install_recovered_definitions(&mut self) -> Result<(), String> {
        self.recovered_names = HashMap::new();
        let defs: Vec<QueueDef> = std::mem::take(&mut self.recovered_defs)
            .into_iter()
            .flatten()
            .collect();
        let most = self.cfg.max_queues + 1;
        if defs.len() > most {
            return Err(format!(
                "it defines {} queues, more than the {most} a router holds (max_queues {} \
                 and the dead-message queue): not a spool tickwire wrote (forged or \
                 damaged)",
                defs.len(),
                self.cfg.max_queues
            ));
        }
        let bytes: usize = defs
            .iter()
            .map(|d| serde_json::to_string(d).map_or(0, |j| j.len()))
            .sum();
        // Dead-message queues made on demand add a short definition each.
        let most_bytes = MAX_DEFINITION_BYTES + most * MIN_QUEUE_JSON;
        if bytes > most_bytes {
            return Err(format!(
                "its queue definitions total {bytes} bytes, more than the {most_bytes} a \
                 router holds ({} MiB, and the dead-message queues): not a spool tickwire \
                 wrote (forged or damaged)",
                MAX_DEFINITION_BYTES >> 20
            ));
        }
        for mut def in defs {
            def.raise_to_floors();
            let qi = self.free_queue_slot();
            if let Err(e) = self.index_queue(qi, &def) {
                return Err(format!(
                    "queue {:?} cannot be installed: {e}; if this router ran with a larger \
                     max_queue_index_nodes or max_match_work ([router] in the --config \
                     file), start it with that",
                    def.name
                ));
            }
            let fill = self.retained_for(&def);
            self.place_queue(qi, def, fill);
        }
        self.defs_preinstalled = true;
        Ok(())
    }

    /// After recovery: why the spool read back cannot be this router's, if it cannot
    /// (more publisher identities than `max_publishers`: each checkpoint would rewrite
    /// them all; hostile-input pass, 500,000 forged ones).
    pub fn recovery_refusal(&self) -> Option<String> {
        let n = self.publisher_names.len();
        (n > self.cfg.max_publishers).then(|| {
            format!(
                "it remembers {n} publisher identities, more than the {} a router holds: \
                 not a spool tickwire wrote (forged or damaged)",
                self.cfg.max_publishers
            )
        })
    }

    /// Replays one spool record at start-up (in record order).
    pub fn recover_record(&mut self, lsn: u64, bytes: &[u8]) {
        let r = match record::decode(bytes) {
            Ok(r) => r,
            Err(e) => {
                self.recovery_errors
                    .push(format!("record {lsn}: {e}; skipped"));
                return;
            }
        };
        if let Some(why) = beyond_reach(&r) {
            self.recovery_errors
                .push(format!("record {lsn}: {why}: damage; skipped"));
            return;
        }
        match r {
            Record::Message {
                id,
                time,
                seq,
                stamps,
                identity,
                topic,
                payload,
            } => {
                if id < self.store.next_id() {
                    self.recovery_errors.push(format!(
                        "record {lsn}: message id {id} not after the previous; skipped"
                    ));
                    return;
                }
                let Ok(t) = std::str::from_utf8(topic) else {
                    self.recovery_errors
                        .push(format!("record {lsn}: topic is not UTF-8; skipped"));
                    return;
                };
                let p = self.publisher_idx(identity);
                self.note_stored(p, seq, lsn);
                self.match_queues(t);
                let m = NewMessage {
                    id,
                    lsn,
                    time,
                    seq,
                    stamps,
                    topic,
                    payload,
                };
                self.store.push(&m);
                let size = (topic.len() + payload.len()) as u64;
                for i in 0..self.matched.len() {
                    let q = self.matched[i].0;
                    if self.queue(q).is_some_and(|q| holds(&q.def, id, time)) {
                        self.enqueue(q, id, size);
                    }
                }
                if let Some(e) = self.store.entry_mut(id) {
                    e.maybe_delivered = true;
                }
            }
            Record::Acked { id, queue } => {
                if let Some(q) = self.recovered_instance(queue, lsn) {
                    self.remove_from_queue(q, id);
                }
            }
            Record::DeadLettered { id, from, to } => {
                // A dead-message queue it would make must be one a create could have
                // named (hostile-input pass: 200,000 forged records made 200,000
                // queues): else the record is damage and the message stays where it is.
                if !self.queue_names.contains_key(to) {
                    if !queue::valid_name(to) {
                        self.recovery_errors.push(format!(
                            "record {lsn}: dead-letter queue name {to:?} is invalid: \
                             damage; skipped"
                        ));
                        return;
                    }
                    if self.queue_names.len() > self.cfg.max_queues {
                        self.recovery_errors.push(format!(
                            "record {lsn}: dead-letter queue {to:?} would pass the {} queues \
                             a router holds: damage; skipped",
                            self.cfg.max_queues + 1
                        ));
                        return;
                    }
                }
                // Into the dead-message queue before the other lets it go (see
                // `dead_letter`).
                let to = self.dmq(to);
                if let Some(e) = self.store.entry(id).copied() {
                    if e.live {
                        self.enqueue(to, id, Store::size_of(&e));
                        self.note_extra_holder(to);
                    }
                }
                if let Some(q) = self.recovered_instance(from, lsn) {
                    self.remove_from_queue(q, id);
                }
            }
            Record::Purged { up_to, queue } => {
                if let Some(q) = self.recovered_instance(queue, lsn) {
                    self.purge(q, up_to);
                }
            }
            Record::QueueDefined { .. } | Record::QueueDeleted { .. } if self.defs_preinstalled => {
            }
            Record::QueueDefined { json } => match serde_json::from_str::<QueueDef>(json) {
                Ok(mut def) => {
                    def.raise_to_floors();
                    if !self.queue_names.contains_key(&def.name)
                        && self.queue_names.len() <= self.cfg.max_queues
                        && def.check().is_ok()
                    {
                        self.install_queue(def);
                    }
                }
                Err(e) => self
                    .recovery_errors
                    .push(format!("record {lsn}: queue definition: {e}; skipped")),
            },
            Record::QueueDeleted { queue } => {
                if let Some(&q) = self.queue_names.get(queue) {
                    self.remove_queue(q);
                }
            }
            Record::Publisher { hwm, identity } => {
                let p = self.publisher_idx(identity) as usize;
                let pb = &mut self.publishers[p];
                pb.hwm = pb.hwm.max(hwm);
                pb.floor = pb.floor.max(hwm);
                pb.stored |= hwm > 0;
            }
            Record::NextId { id } => {
                // The records of the messages before a checkpoint may be gone: ids go
                // on from where they were when it was written.
                if id > self.store.next_id() {
                    self.store.advance_to(id);
                }
            }
            Record::Forgotten { identity } => {
                // What the records before stored under it no longer counts: a new
                // publisher of this name numbers from 1 and is not taken for it.
                if let Some(p) = self.publisher_names.remove(identity) {
                    let pb = &mut self.publishers[p as usize];
                    *pb = Publisher::new("");
                    pb.forgotten = true;
                    self.free_publishers.push(p);
                }
            }
            Record::Relocated {
                id,
                time,
                seq,
                stamps,
                next_id,
                holders,
                topic,
                payload,
            } => {
                // The newest messages' records may have gone before the copy: ids go
                // on from where they were when it was written.
                if next_id > id {
                    self.store.advance_to(next_id);
                }
                let Ok(t) = std::str::from_utf8(topic) else {
                    self.recovery_errors
                        .push(format!("record {lsn}: topic is not UTF-8; skipped"));
                    return;
                };
                // Who holds it: the queue instances the copy names (name and
                // first_message_id: a queue deleted and made again since is another),
                // and the queues made after the copy that take it as they would take
                // an `M` record. Not matched again by topic otherwise: a queue that let
                // it go before the copy, or was made after it and does not start early
                // enough, does not get it.
                let mut slots = std::mem::take(&mut self.holder_slots);
                slots.clear();
                for (created_at, name) in holders.iter() {
                    if let Some(&q) = self.queue_names.get(name) {
                        if self
                            .queue(q)
                            .is_some_and(|q| q.def.created_at == created_at)
                        {
                            slots.push(q);
                        }
                    }
                }
                self.match_queues(t);
                let listed = slots.len();
                for i in 0..self.matched.len() {
                    let q = self.matched[i].0;
                    let later = self
                        .queue(q)
                        .is_some_and(|qd| qd.def.created_at >= next_id && holds(&qd.def, id, time));
                    if later && !slots.contains(&q) {
                        slots.push(q);
                    }
                }
                if !slots.is_empty() {
                    let m = NewMessage {
                        id,
                        lsn,
                        time,
                        seq,
                        stamps,
                        topic,
                        payload,
                    };
                    match self.store.restore(&m) {
                        Ok(Restored::Present) => {}
                        Ok(Restored::Added) => {
                            let size = (topic.len() + payload.len()) as u64;
                            for (i, &q) in slots.iter().enumerate() {
                                self.enqueue(q, id, size);
                                if i < listed && !self.matched.contains(&Slot(q)) {
                                    self.note_extra_holder(q);
                                }
                            }
                            if self.store.entry(id).is_some_and(|e| e.refs() > 0) {
                                if let Some(e) = self.store.entry_mut(id) {
                                    e.maybe_delivered = true;
                                }
                            } else {
                                self.store.kill(id);
                            }
                        }
                        Err(why) => self.recovery_errors.push(format!(
                            "record {lsn}: relocated message {id}: {why}; skipped"
                        )),
                    }
                }
                self.holder_slots = slots;
            }
        }
        self.durable_lsn = lsn;
    }

    /// Ends recovery: everything read is durable; messages read back are flagged as
    /// possibly delivered, so their next delivery says REDELIVERED.
    pub fn finish_recovery(&mut self) {
        // Ids go on at least from every queue's first_message_id: with nothing retained
        // a checkpoint's NextId record alone carries them, and should it be lost (a
        // damaged record is skipped) they would restart below the queues' and be given
        // out twice (review).
        let floor = self
            .queues
            .iter()
            .flatten()
            .map(|q| q.def.created_at)
            .max()
            .unwrap_or(0);
        if floor > self.store.next_id() {
            self.store.advance_to(floor);
        }
        self.recovering = false;
        self.durable_id = self.store.next_id().saturating_sub(1);
        for q in self.queues.iter_mut().flatten() {
            q.cursor = 0;
            // Counters start at recovery: what it found held counts as spooled (the
            // replay also counted messages its later records acknowledged or moved,
            // which no other counter shows), so spooled = depth + acked + dead_lettered
            // + discarded from here on.
            q.counters.spooled = q.depth;
        }
    }

    /// Queues and their depth (for the start-up log line).
    pub fn queue_summary(&self) -> (usize, u64) {
        let n = self.queues.iter().flatten().count();
        let d = self.queues.iter().flatten().map(|q| q.depth).sum();
        (n, d)
    }

    // ------------------------------------------------------------------ publishers

    fn publisher_idx(&mut self, name: &str) -> u32 {
        if let Some(&p) = self.publisher_names.get(name) {
            return p;
        }
        let p = match self.free_publishers.pop() {
            Some(p) => {
                self.publishers[p as usize] = Publisher::new(name);
                p
            }
            None => {
                self.publishers.push(Publisher::new(name));
                self.publishers.len() as u32 - 1
            }
        };
        self.publisher_names.insert(name.to_owned(), p);
        p
    }

    fn note_stored(&mut self, p: u32, seq: u64, lsn: u64) {
        let keep = 2 * self.cfg.publish_window as usize + 16;
        self.publisher_uses += 1;
        let pb = &mut self.publishers[p as usize];
        pb.last_use = self.publisher_uses;
        pb.stored = true;
        pb.hwm = pb.hwm.max(seq);
        let at = pb.recent.partition_point(|&(s, _)| s < seq);
        pb.recent.insert(at, (seq, lsn));
        while pb.recent.len() > keep {
            if let Some((s, _)) = pb.recent.pop_front() {
                pb.floor = pb.floor.max(s);
            }
        }
    }

    /// PUB_OPEN: this connection publishes as `name` (taking the identity over from
    /// another connection that holds it). A new identity beyond `max_publishers`
    /// takes the place of an idle one (`forget_publisher` says which); a
    /// name whose forget is not yet durable is refused BUSY
    /// (`forget_in_progress`).
    pub fn handle_pub_open(
        &mut self,
        log: &mut dyn Log,
        slot: Slot,
        request_id: u32,
        options: u32,
        name: &str,
    ) -> Result<(), Reject> {
        // Every guaranteed publish gets one answer, sent to the connection that holds
        // its identity then: switching this connection to another identity would leave
        // the current one's pending publishes unanswered (hostile-input pass: 1,100
        // open-publish pairs on one connection, 2 PUB_ACKs for 1,098 stored).
        if let Some(prev) = self.conns.get(&slot.0).and_then(|c| c.publisher) {
            let pb = &self.publishers[prev as usize];
            if pb.unanswered > 0 && pb.name != name {
                return Err(reject(
                    request_id,
                    ErrorCode::BUSY,
                    format!(
                        "this connection's publisher identity {:?} has {} guaranteed \
                         publish{} not answered yet; open another identity once {} answered",
                        shown_identity(&pb.name),
                        pb.unanswered,
                        if pb.unanswered == 1 { "" } else { "es" },
                        if pb.unanswered == 1 {
                            "it is"
                        } else {
                            "they are"
                        },
                    ),
                ));
            }
        }
        let p = match self.publisher_names.get(name) {
            Some(&p) => p,
            None => {
                if !self.forgets.is_empty() {
                    self.forget_in_progress(log, request_id, name)?;
                }
                if self.publisher_names.len() >= self.cfg.max_publishers {
                    self.forget_publisher(log, slot, request_id, name)?
                } else {
                    self.publisher_idx(name)
                }
            }
        };
        self.publisher_uses += 1;
        self.publishers[p as usize].last_use = self.publisher_uses;
        if let Some(old) = self.publishers[p as usize].slot {
            if old != slot {
                self.fail.push((
                    old,
                    ErrorCode::TAKEN_OVER,
                    format!(
                        "publisher identity {:?} was opened by another connection",
                        shown_identity(name)
                    ),
                ));
                if let Some(c) = self.conns.get_mut(&old.0) {
                    c.publisher = None;
                }
            }
        }
        let conn = self.conns.entry(slot.0).or_default();
        if let Some(prev) = conn.publisher.replace(p) {
            if prev != p {
                self.publishers[prev as usize].slot = None;
            }
        }
        let pb = &mut self.publishers[p as usize];
        pb.slot = Some(slot);
        pb.options = options;
        let (window, hwm) = (self.cfg.publish_window, pb.hwm);
        self.emit(slot, |b| wgm::encode_pub_opened(b, request_id, window, hwm));
        Ok(())
    }

    /// Refuses (BUSY) a PUB_OPEN of `name` while its forget is not yet durable: a
    /// publisher of it now would be taken for the old one at recovery if the router
    /// stopped before the `F` record is on disk. A forget whose record failed is
    /// appended again here (when its name is asked for, so a spool that keeps failing
    /// costs an append per request, not a loop).
    fn forget_in_progress(
        &mut self,
        log: &mut dyn Log,
        request_id: u32,
        name: &str,
    ) -> Result<(), Reject> {
        let Some(i) = self.forgets.iter().position(|f| f.1 == name) else {
            return Ok(());
        };
        if self.forgets[i].0 == 0 {
            let mut rec = std::mem::take(&mut self.rec);
            record::encode(&mut rec, &Record::Forgotten { identity: name });
            if let Ok(lsn) = log.append(&rec) {
                self.forgets[i].0 = lsn;
            }
            self.rec = rec;
        }
        Err(reject(
            request_id,
            ErrorCode::BUSY,
            format!(
                "publisher identity {:?} was forgotten to make room for another and \
                 that is not yet on disk; open it again in a moment",
                shown_identity(name)
            ),
        ))
    }

    /// Appends again the `F` records whose write failed. The driver calls it when the
    /// spool reported progress (it writes again), so a spool that keeps failing is
    /// not fed in a loop: at most one append per such forget per report.
    pub fn rewrite_failed_forgets(&mut self, log: &mut dyn Log) {
        if self.forgets.iter().all(|f| f.0 != 0) {
            return;
        }
        let mut rec = std::mem::take(&mut self.rec);
        for f in self.forgets.iter_mut().filter(|f| f.0 == 0) {
            record::encode(&mut rec, &Record::Forgotten { identity: &f.1 });
            match log.append(&rec) {
                Ok(lsn) => f.0 = lsn,
                Err(_) => break,
            }
        }
        self.rec = rec;
    }

    /// Makes room for the new identity `name` (the router remembers `max_publishers`):
    /// of the identities no connection holds and nothing awaits an answer for, one
    /// that stored nothing if there is one (forgetting it loses nothing and writes
    /// nothing), else the one used longest ago, whose forget is an `F` record (at
    /// recovery the records before it no longer count for that name). Its entry
    /// becomes `name`'s. A look at each remembered identity (at most
    /// `max_publishers`). Refused (BUSY) when every identity is held or awaits
    /// answers, when `max_publishers` forgets already wait for the disk, or when the
    /// record cannot be appended.
    fn forget_publisher(
        &mut self,
        log: &mut dyn Log,
        slot: Slot,
        request_id: u32,
        name: &str,
    ) -> Result<u32, Reject> {
        let busy = |text: String| Err(reject(request_id, ErrorCode::BUSY, text));
        let victim = self
            .publishers
            .iter()
            .enumerate()
            .filter(|(_, pb)| {
                // The identity this connection holds counts as idle: this open lets
                // it go (so a connection opening name after name replaces its own
                // empty ones, not others').
                !pb.forgotten && pb.slot.is_none_or(|s| s == slot) && pb.unanswered == 0
            })
            .min_by_key(|(_, pb)| (pb.stored, pb.last_use))
            .map(|(i, _)| i as u32);
        let Some(p) = victim else {
            return busy(format!(
                "the router remembers at most {} publisher identities and each is open on a \
                 connection or awaits acknowledgements; try again later or reuse one",
                self.cfg.max_publishers
            ));
        };
        if self.publishers[p as usize].stored {
            if self.forgets.len() >= self.cfg.max_publishers {
                return busy(
                    "too many forgotten publisher identities wait for the disk; \
                     try again in a moment"
                        .to_owned(),
                );
            }
            let mut rec = std::mem::take(&mut self.rec);
            let old = &self.publishers[p as usize].name;
            record::encode(&mut rec, &Record::Forgotten { identity: old });
            let appended = log.append(&rec);
            self.rec = rec;
            match appended {
                Ok(lsn) => self.forgets.push((lsn, old.clone())),
                Err(e) => {
                    self.totals.spool_failures += 1;
                    return busy(format!(
                        "the router remembers at most {} publisher identities and could not \
                         record forgetting one ({}); try again",
                        self.cfg.max_publishers,
                        match e {
                            LogError::Busy => "the spool is busy",
                            LogError::TooLarge => "record too large",
                            LogError::Failed => "the spool has failed",
                        }
                    ));
                }
            }
        }
        let old = std::mem::take(&mut self.publishers[p as usize].name);
        self.publisher_names.remove(&old);
        self.publishers[p as usize] = Publisher::new(name);
        self.publisher_names.insert(name.to_owned(), p);
        self.totals.publishers_forgotten += 1;
        Ok(p)
    }

    fn nack(&mut self, slot: Slot, seq: u64, reason: NackReason, text: &str) {
        self.totals.nacked += 1;
        self.emit(slot, |b| wgm::encode_pub_nack(b, seq, reason, text));
    }

    /// Answers a guaranteed publish the publisher was not permitted to make (the core
    /// checked its topic): PUB_NACK `not-permitted`. Nothing is stored or routed.
    pub fn handle_denied_publish(&mut self, slot: Slot, seq: u64, text: &str) {
        self.nack(slot, seq, NackReason::NOT_PERMITTED, text);
    }

    /// Whether this connection opened a publisher identity or is bound to a queue.
    pub fn is_guaranteed_client(&self, slot: Slot) -> bool {
        self.conns
            .get(&slot.0)
            .is_some_and(|c| c.publisher.is_some() || !c.bindings.is_empty())
    }

    /// Queues, or pending creates if there are more of those: what the stats document
    /// lists.
    pub fn queue_count(&self) -> usize {
        self.queue_names.len().max(self.fills.len())
    }

    /// Whether creates that start in the past are still filling (the driver keeps its
    /// timer ticking every 10 ms meanwhile, even when idle).
    pub fn is_filling(&self) -> bool {
        !self.fills.is_empty() || !self.unpin.is_empty()
    }

    /// The queues (and filling creates) the last [`Engine::handle_publish`] matched,
    /// each an entry to check and insert: the caller counts them against its routing
    /// work per read, as it counts a direct message's subscribers (hostile-input pass:
    /// one window of 4,096 publishes to a topic 10,000 queues subscribe was ~41 million
    /// inserts in one turn, 1.3 s during which no other client was served).
    pub fn last_publish_work(&self) -> u64 {
        self.publish_work
    }

    /// Whether this connection opened a publisher identity (a guaranteed PUBLISH before
    /// PUB_OPEN is refused before anything is routed).
    pub fn is_publisher(&self, slot: Slot) -> bool {
        self.conns
            .get(&slot.0)
            .is_some_and(|c| c.publisher.is_some())
    }

    /// A guaranteed PUBLISH (`m.flags` has GUARANTEED). Direct subscribers were served
    /// by the caller already.
    pub fn handle_publish(
        &mut self,
        log: &mut dyn Log,
        slot: Slot,
        wall: UtcNanos,
        router_in: u64,
        m: &Msg<'_>,
    ) -> Result<(), Reject> {
        let seq = m.seq.unwrap_or(0);
        self.publish_work = 0;
        let Some(p) = self.conns.get(&slot.0).and_then(|c| c.publisher) else {
            return Err(Reject {
                request_id: 0,
                code: ErrorCode::NOT_OPEN,
                fatal: true,
                text: "guaranteed PUBLISH before PUB_OPEN on this connection".into(),
            });
        };
        self.totals.publishes += 1;
        // Duplicate: already stored under this identity.
        let pb = &self.publishers[p as usize];
        let dup = match pb.recent.binary_search_by_key(&seq, |&(s, _)| s) {
            Ok(i) => Some(pb.recent[i].1),
            Err(_) if seq <= pb.floor => Some(0),
            Err(_) => None,
        };
        if let Some(lsn) = dup {
            self.totals.duplicates += 1;
            if lsn <= self.durable_lsn {
                self.totals.acked += 1;
                self.emit(slot, |b| wgm::encode_pub_ack(b, seq, seq));
            }
            // Otherwise the pending original's durability answers it.
            return Ok(());
        }
        if pb.unanswered >= self.cfg.publish_window {
            let text = format!(
                "more than {} guaranteed publishes unanswered",
                self.cfg.publish_window
            );
            self.nack(slot, seq, NackReason::WINDOW_EXCEEDED, &text);
            return Ok(());
        }
        let nack_no_match = pb.options & wgm::open_options::NACK_NO_MATCH != 0;
        let topic = std::str::from_utf8(m.topic).unwrap_or_default();
        self.match_queues(topic);
        self.find_fill_takers(topic, wall);
        self.publish_work = (self.matched.len() + self.fill_takers.len()) as u64;
        if self.matched.is_empty() && self.fill_takers.is_empty() {
            if nack_no_match {
                self.nack(
                    slot,
                    seq,
                    NackReason::NO_MATCHING_QUEUE,
                    &format!("no queue subscribes to {topic}"),
                );
            } else {
                self.totals.acked += 1;
                self.emit(slot, |b| wgm::encode_pub_ack(b, seq, seq));
            }
            return Ok(());
        }
        let size = (m.topic.len() + m.payload.len()) as u64;
        // Limits, all or nothing.
        for i in 0..self.matched.len() {
            let qi = self.matched[i].0;
            let Some(q) = self.queue_mut(qi) else {
                continue;
            };
            if q.def.max_message_size > 0 && m.payload.len() as u64 > q.def.max_message_size {
                q.counters.rejected += 1;
                let text = format!(
                    "{} bytes exceed queue {}'s max_message_size {}",
                    m.payload.len(),
                    q.def.name,
                    q.def.max_message_size
                );
                self.nack(slot, seq, NackReason::TOO_LARGE, &text);
                return Ok(());
            }
            let over = |q: &Queue| {
                (q.def.max_messages > 0 && q.depth >= q.def.max_messages)
                    || (q.def.max_bytes > 0 && q.bytes + size > q.def.max_bytes)
            };
            if over(q) {
                if q.def.full_policy == FullPolicy::Reject {
                    q.counters.rejected += 1;
                    // New-user pass: "(1 messages, 6 bytes)" read as neither the
                    // contents nor the limit clearly.
                    let holds = format!(
                        "{} ({} bytes)",
                        tickwire_rt::text::count(q.depth, "message", "messages"),
                        q.bytes
                    );
                    let text = if q.def.max_messages > 0 && q.depth >= q.def.max_messages {
                        format!(
                            "queue {} is full: it holds {holds}, its limit is max_messages {}",
                            q.def.name, q.def.max_messages
                        )
                    } else if size > q.def.max_bytes {
                        // It would not fit an empty queue: waiting or purging cannot help
                        // (new-user pass: "is full ... it holds 0 messages").
                        format!(
                            "queue {} cannot hold this message: {size} bytes as stored \
                             (topic and payload), more than its max_bytes {}",
                            q.def.name, q.def.max_bytes
                        )
                    } else {
                        // This message is what does not fit (review: "it holds 0
                        // messages" for one larger than max_bytes alone).
                        format!(
                            "queue {} is full: this message ({size} bytes as stored) would \
                             take it past max_bytes {}; it holds {holds}",
                            q.def.name, q.def.max_bytes
                        )
                    };
                    self.nack(slot, seq, NackReason::QUEUE_FULL, &text);
                    return Ok(());
                }
                while self.queue(qi).is_some_and(over) {
                    if !self.discard_oldest(log, qi) {
                        break;
                    }
                }
            }
        }
        let takers = (self.matched.len() + self.fill_takers.len()) as u64;
        if self.entries + takers > self.cfg.max_entries {
            let text = format!(
                "the router holds its maximum of {} queue entries (max_queue_entries); \
                 {takers} queues match {topic}",
                self.cfg.max_entries,
            );
            self.nack(slot, seq, NackReason::QUEUE_FULL, &text);
            return Ok(());
        }
        // The message's index entry counts too (store::ENTRY_BYTES).
        let counted = size + store::ENTRY_BYTES;
        if self.store.footprint() + counted > self.cfg.max_stored_bytes {
            // Replay retention gives way first; then the publish is refused.
            self.store.release_front(|_, _| false);
            if self.store.footprint() + counted > self.cfg.max_stored_bytes {
                let text = format!(
                    "the router holds its maximum of {} bytes of guaranteed messages \
                     (max_stored_bytes: {} counted, this message {} more; topics, payloads \
                     and {} bytes per index entry)",
                    self.cfg.max_stored_bytes,
                    self.store.footprint(),
                    counted,
                    store::ENTRY_BYTES,
                );
                self.nack(slot, seq, NackReason::QUEUE_FULL, &text);
                return Ok(());
            }
        }
        let id = self.store.next_id();
        let stamps = m.stamps.map(|s| (s.publisher_send, router_in));
        let mut rec = std::mem::take(&mut self.rec);
        record::encode(
            &mut rec,
            &Record::Message {
                id,
                time: wall.as_nanos(),
                seq,
                stamps,
                identity: &self.publishers[p as usize].name,
                topic: m.topic,
                payload: m.payload,
            },
        );
        let appended = log.append(&rec);
        self.rec = rec;
        let lsn = match appended {
            Ok(lsn) => lsn,
            Err(e) => {
                self.totals.spool_failures += 1;
                let (reason, text) = match e {
                    LogError::Busy => (
                        NackReason::BUSY,
                        "the spool is busy; publish again under a new sequence number",
                    ),
                    LogError::TooLarge => (NackReason::TOO_LARGE, "larger than a spool record"),
                    LogError::Failed => (NackReason::SPOOL_FAILED, "the spool has failed"),
                };
                self.nack(slot, seq, reason, text);
                return Ok(());
            }
        };
        self.store.push(&NewMessage {
            id,
            lsn,
            time: wall.as_nanos(),
            seq,
            stamps,
            topic: m.topic,
            payload: m.payload,
        });
        for i in 0..self.matched.len() {
            let q = self.matched[i].0;
            self.enqueue(q, id, size);
        }
        for i in 0..self.fill_takers.len() {
            let at = self.fill_takers[i];
            if let Some(f) = self.fills.get_mut(at) {
                f.late.push_back(id);
                self.entries += 1;
                self.store.hold(id);
            }
        }
        self.note_stored(p, seq, lsn);
        self.publishers[p as usize].unanswered += 1;
        self.pending.push_back(PendingPub {
            lsn,
            msg_id: id,
            publisher: p,
            seq,
        });
        Ok(())
    }

    /// The waiting fills that would take a message published on `topic` now (their
    /// patterns match, their start is not after it), into `fill_takers`: such a message
    /// is stored though no queue may hold it yet, and pinned for each of them, so the
    /// new queue holds every match from its start on, those published while it filled
    /// included. One match against all waiting fills' patterns together.
    fn find_fill_takers(&mut self, topic: &str, wall: UtcNanos) {
        self.fill_takers.clear();
        if self.fills.is_empty() {
            return;
        }
        let mut hit = std::mem::take(&mut self.fill_hits);
        match_stored(&mut self.fill_index, topic.as_bytes(), &mut hit);
        let next = self.store.next_id();
        for serial in &hit {
            let Ok(at) = self
                .fills
                .binary_search_by_key(&Some(serial.0), |f| f.serial)
            else {
                continue;
            };
            let f = &self.fills[at];
            if f.cursor <= next && f.from_time <= wall.as_nanos() {
                self.fill_takers.push(at);
            }
        }
        self.fill_hits = hit;
        // One pin per fill however many of its patterns matched.
        self.fill_takers.sort_unstable();
        self.fill_takers.dedup();
    }

    /// Puts fill `f` in line: numbered, its patterns in `fill_index`.
    fn wait_fill(&mut self, mut f: Fill) {
        let serial = self.fill_serial;
        self.fill_serial = self.fill_serial.wrapping_add(1);
        for p in &f.def.subscriptions {
            self.fill_index.subscribe(Slot(serial), p);
        }
        f.serial = Some(serial);
        self.fills.push_back(f);
    }

    /// Takes fill `f`'s patterns out of `fill_index` (it no longer waits), and gives
    /// back the pins of messages published for it that its scan did not reach (none
    /// once it caught up; a spool failure takes them out of `late` itself).
    fn unwait_fill(&mut self, f: &mut Fill) {
        if let Some(serial) = f.serial.take() {
            for p in &f.def.subscriptions {
                self.fill_index.unsubscribe(Slot(serial), p);
            }
        }
        self.entries = self.entries.saturating_sub(f.late.len() as u64);
        for id in f.late.drain(..) {
            self.store.unhold(id);
        }
    }

    /// Records up to `lsn` are durable: acknowledge publishes, make messages deliverable.
    pub fn handle_durable(&mut self, now: MonoNanos, lsn: u64) {
        self.durable_lsn = self.durable_lsn.max(lsn);
        while self.relocating.front().is_some_and(|r| r.0 <= lsn) {
            if let Some((at, id)) = self.relocating.pop_front() {
                // False when it was let go meanwhile (or an older one before it was
                // not relocated after all): the copy is then just not needed.
                self.store.relocate(id, at);
            }
        }
        if !self.forgets.is_empty() {
            self.forgets.retain(|f| f.0 == 0 || f.0 > lsn);
        }
        let mut run: Option<(u32, u64, u64)> = None;
        while let Some(p) = self.pending.front() {
            if p.lsn > lsn {
                break;
            }
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.durable_id = self.durable_id.max(p.msg_id);
            let pb = &mut self.publishers[p.publisher as usize];
            pb.unanswered = pb.unanswered.saturating_sub(1);
            self.totals.acked += 1;
            run = match run {
                Some((who, first, last)) if who == p.publisher && last + 1 == p.seq => {
                    Some((who, first, p.seq))
                }
                Some(r) => {
                    self.send_ack(r);
                    Some((p.publisher, p.seq, p.seq))
                }
                None => Some((p.publisher, p.seq, p.seq)),
            };
        }
        if let Some(r) = run {
            self.send_ack(r);
        }
        if self.pending.is_empty() {
            self.durable_id = self.store.next_id().saturating_sub(1);
        }
        self.pump_all(now);
    }

    fn send_ack(&mut self, (p, first, last): (u32, u64, u64)) {
        if let Some(slot) = self.publishers[p as usize].slot {
            self.emit(slot, |b| wgm::encode_pub_ack(b, first, last));
        }
    }

    /// Records `first..=last` could not be written: NACK those publishes and forget them.
    /// A forget whose record failed waits to be appended again (its name stays
    /// closed until that record is durable).
    pub fn handle_failed(&mut self, now: MonoNanos, first: u64, last: u64, why: &str) {
        self.totals.spool_failures += 1;
        // Copies not written: their messages keep their records (a later step tries
        // again).
        self.relocating.retain(|r| r.0 < first || r.0 > last);
        for f in &mut self.forgets {
            if (first..=last).contains(&f.0) {
                f.0 = 0;
            }
        }
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some(p) = self.pending.pop_front() {
            if p.lsn < first || p.lsn > last {
                keep.push_back(p);
                continue;
            }
            let pb = &mut self.publishers[p.publisher as usize];
            pb.unanswered = pb.unanswered.saturating_sub(1);
            if let Ok(i) = pb.recent.binary_search_by_key(&p.seq, |&(s, _)| s) {
                pb.recent.remove(i);
            }
            for qi in 0..self.queues.len() as u32 {
                self.remove_from_queue(qi, p.msg_id);
            }
            let size = self.store.entry(p.msg_id).map_or(0, Store::size_of);
            for f in &mut self.fills {
                if f.found.remove(&p.msg_id).is_some() {
                    f.bytes = f.bytes.saturating_sub(size);
                    self.entries = self.entries.saturating_sub(1);
                }
                if let Ok(i) = f.late.binary_search(&p.msg_id) {
                    f.late.remove(i);
                    self.entries = self.entries.saturating_sub(1);
                }
            }
            self.store.kill(p.msg_id);
            if let Some(slot) = self.publishers[p.publisher as usize].slot {
                let text = format!("the spool could not store it: {why}");
                self.nack(slot, p.seq, NackReason::SPOOL_FAILED, &text);
            }
        }
        self.pending = keep;
        match self.pending.front() {
            Some(p) => self.durable_id = self.durable_id.max(p.msg_id.saturating_sub(1)),
            None => self.durable_id = self.store.next_id().saturating_sub(1),
        }
        self.pump_all(now);
    }

    // ------------------------------------------------------------------ queues

    fn queue(&self, q: u32) -> Option<&Queue> {
        self.queues.get(q as usize).and_then(Option::as_ref)
    }

    fn queue_mut(&mut self, q: u32) -> Option<&mut Queue> {
        self.queues.get_mut(q as usize).and_then(Option::as_mut)
    }

    fn match_queues(&mut self, topic: &str) {
        match_stored(&mut self.index, topic.as_bytes(), &mut self.matched);
    }

    /// Installs a queue from the spool or a dead-letter queue: no bound applies (the
    /// definition was accepted when it was made), but a non-zero ack timeout stored
    /// before [`queue::MIN_ACK_TIMEOUT_MS`] existed is raised to it (the definition the
    /// queue shows and the next checkpoint writes carries the raised value).
    fn install_queue(&mut self, mut def: QueueDef) -> u32 {
        def.raise_to_floors();
        let qi = self.free_queue_slot();
        for p in &def.subscriptions {
            self.index.subscribe(Slot(qi), p);
        }
        let fill = self.retained_for(&def);
        self.place_queue(qi, def, fill);
        qi
    }

    /// Indexes queue `def`'s patterns in the queues' index under slot `qi`, unless that
    /// would pass `max_index_nodes` or `max_match_work`: then nothing stays indexed and
    /// the refusal says why.
    fn index_queue(&mut self, qi: u32, def: &QueueDef) -> Result<(), String> {
        let work_before = self.index.match_work();
        for p in &def.subscriptions {
            self.index.subscribe(Slot(qi), p);
        }
        let (nodes, work) = (self.index.node_count(), self.index.match_work());
        let refusal = if nodes > self.cfg.max_index_nodes {
            Some(format!(
                "its subscriptions would take the queues' subscription index to {nodes} \
                 nodes, more than max_queue_index_nodes ({})",
                self.cfg.max_index_nodes
            ))
        } else if work > self.cfg.max_match_work && work > work_before {
            Some(format!(
                "its subscriptions would let one topic match take {work} steps in the \
                 queues' subscription index, more than max_match_work ({}): patterns that \
                 branch at many levels (a/*/a/*/...) cost every guaranteed publish that much",
                self.cfg.max_match_work
            ))
        } else {
            None
        };
        match refusal {
            Some(text) => {
                self.unindex(qi, &def.subscriptions);
                Err(text)
            }
            None => Ok(()),
        }
    }

    /// Looks at up to `budget` retained messages of fill `f` from its cursor (counting
    /// them off `budget`), taking those its patterns match: each is pinned in the store
    /// (so retention cannot take it before the queue exists) and counted in `entries`.
    /// A message released before the fill reached it is simply not found: a fill takes
    /// what is still retained when it gets there.
    fn scan_fill(&mut self, f: &mut Fill, budget: &mut usize) -> FillScan {
        let room = self.cfg.max_entries.saturating_sub(self.entries);
        let before = f.found.len();
        // Everything found before this call lies below its cursor, everything found
        // now at or above it.
        let from = f.cursor;
        let mut hit = std::mem::take(&mut self.fill_hits);
        let mut end = FillScan::CaughtUp;
        // Messages published for it (`late`): already pinned and counted.
        let mut pinned = Vec::new();
        let mut stale = Vec::new();
        for e in self.store.ids_from(f.cursor) {
            if *budget == 0 {
                end = FillScan::Paused;
                break;
            }
            *budget -= 1;
            f.cursor = e.id + 1;
            // (A late id below this one was not stored after all: no longer live.)
            while f.late.front().is_some_and(|&l| l < e.id) {
                stale.push(f.late.pop_front().unwrap_or_default());
            }
            if f.late.front() == Some(&e.id) {
                f.late.pop_front();
                pinned.push(e.id);
            } else {
                if e.time < f.from_time {
                    continue;
                }
                let (topic, _) = self.store.bytes_of(e);
                match_stored(&mut f.own, topic, &mut hit);
                if hit.is_empty() {
                    continue;
                }
                if (f.found.len() - before - pinned.len()) as u64 >= room {
                    end = FillScan::TooManyEntries;
                    break;
                }
            }
            // In id order: an append to the run.
            f.found.insert(
                e.id,
                QEntry {
                    deliveries: 0,
                    binding: 0,
                    done: false,
                },
            );
            f.bytes += Store::size_of(e);
        }
        self.fill_hits = hit;
        if matches!(end, FillScan::CaughtUp) {
            f.cursor = f.cursor.max(self.store.next_id());
        }
        self.entries = self.entries.saturating_sub(stale.len() as u64);
        for id in stale {
            self.store.unhold(id);
        }
        self.entries += (f.found.len() - before - pinned.len()) as u64;
        let mut pinned = pinned.iter().peekable();
        for &id in f.found.range(from..).map(|(id, _)| id) {
            if pinned.next_if_eq(&&id).is_some() {
                continue;
            }
            self.store.hold(id);
        }
        end
    }

    /// The refusal of a fill whose next message would pass `max_entries`.
    fn too_many_entries(&self, f: &Fill) -> String {
        let found = f.found.len() as u64;
        format!(
            "its start would enter at least {} retained messages, and the queues hold {} \
             other entries of at most max_queue_entries ({})",
            found + 1,
            self.entries.saturating_sub(found),
            self.cfg.max_entries
        )
    }

    /// Gives up fill `f`: its entries no longer count, and its pins go a budget at a
    /// time ([`Engine::release_pins`]), so a large abandoned fill costs no long step.
    fn drop_fill(&mut self, mut f: Fill) {
        self.unwait_fill(&mut f);
        self.entries = self.entries.saturating_sub(f.found.len() as u64);
        if !f.found.is_empty() {
            self.unpin.push(f.found);
        }
    }

    /// Releases up to `budget` pins of abandoned fills, oldest messages first (retention
    /// releases from the front).
    fn release_pins(&mut self, mut budget: usize) {
        while budget > 0 {
            let Some(list) = self.unpin.last_mut() else {
                return;
            };
            let Some((id, _)) = list.pop_first() else {
                self.unpin.pop();
                continue;
            };
            budget -= 1;
            self.store.unhold(id);
        }
    }

    /// Fill `f` has caught up with the newest message: creates its queue now, in this
    /// step (nothing can arrive in between), as the create of a queue that starts now
    /// plus what was found. Every message from `created_at` on is matched at publish
    /// time. A definition the queues' index cannot take is refused whole and leaves
    /// nothing behind. The `QueueDefined` record carries the final `created_at`.
    fn finish_fill(&mut self, log: &mut dyn Log, mut f: Fill) -> Result<u32, String> {
        self.unwait_fill(&mut f);
        if self.queue_names.contains_key(&f.def.name) {
            // Only a dead-message queue is made without a CREATE.
            let text = format!(
                "a queue named {} (a dead-message queue) was made while this one was being filled",
                f.def.name
            );
            self.drop_fill(f);
            return Err(text);
        }
        let qi = self.free_queue_slot();
        if let Err(text) = self.index_queue(qi, &f.def) {
            self.drop_fill(f);
            return Err(text);
        }
        f.def.created_at = self.store.next_id();
        // The definition is in the spool before the queue takes anything: a queue the
        // spool did not record (busy) took publishes that were acknowledged, and after
        // a restart was gone with them (a hostile-input probe lost 30 acknowledged
        // messages that way).
        let json = serde_json::to_string(&f.def).unwrap_or_default();
        if !self.log_record(log, &Record::QueueDefined { json: &json }) {
            self.unindex(qi, &f.def.subscriptions);
            self.drop_fill(f);
            return Err(SPOOL_REFUSED.to_owned());
        }
        self.newest_created_at = self.newest_created_at.max(f.def.created_at);
        let name = f.def.name.clone();
        self.count_dead_letter_target(&f.def);
        let mut q = Queue::new(f.def);
        q.depth = f.found.len() as u64;
        q.bytes = f.bytes;
        q.counters.spooled = q.depth;
        // Already pinned and counted in `entries`: they move over as they are.
        q.entries = f.found;
        // Its newest finds may not be durable yet.
        q.touched = true;
        self.touched.push(qi);
        self.queue_names.insert(name, qi);
        self.queues[qi as usize] = Some(q);
        Ok(qi)
    }

    /// One step of the pending creates' fills (a timer tick), oldest first; a create
    /// whose fill catches up is answered. The step looks at no more than
    /// `max(FILL_SCAN, 2 × the ids stored since the previous step)` retained messages:
    /// at least twice what arrived meanwhile, so the gap between the oldest fill and the
    /// newest message shrinks at every step (by at least `FILL_SCAN / 2`) however fast
    /// guaranteed publishes arrive, and each fill completes. The extra is proportional
    /// to what the router stored itself, not to anything a peer chose. Oldest first
    /// rather than round-robin: fills taking turns would each fall behind by what
    /// arrived during the others' turns.
    fn pump_fills(&mut self, log: &mut dyn Log) {
        let newest = self.store.next_id();
        let arrived = newest.saturating_sub(self.fill_seen);
        self.fill_seen = newest;
        self.release_pins(FILL_UNPIN);
        let mut budget = self
            .fill_budget
            .1
            .max(usize::try_from(arrived.saturating_mul(2)).unwrap_or(usize::MAX));
        while budget > 0 {
            let Some(mut f) = self.fills.pop_front() else {
                return;
            };
            let (slot, request_id) = (f.slot, f.request_id);
            let done = match self.scan_fill(&mut f, &mut budget) {
                FillScan::Paused => {
                    self.fills.push_front(f);
                    return;
                }
                FillScan::CaughtUp => self.finish_fill(log, f),
                FillScan::TooManyEntries => {
                    let text = self.too_many_entries(&f);
                    self.drop_fill(f);
                    Err(text)
                }
            };
            let answer = done
                .map_err(|e| {
                    reject(
                        request_id,
                        create_refusal_code(&e),
                        format!("queue not created: {e}"),
                    )
                })
                .and_then(|q| self.reply_json(request_id, &self.queue_json(q)));
            match answer {
                Ok(text) => self.emit(slot, |b| wgm::encode_queue_reply(b, request_id, &text)),
                Err(r) => self.emit(slot, |b| {
                    tickwire_wire::frame::encode_error(b, r.request_id, r.code, false, &r.text)
                }),
            }
        }
    }

    /// A QUEUE_REPLY's text, unless it does not fit in one frame.
    fn reply_json(&self, request_id: u32, json: &serde_json::Value) -> Result<String, Reject> {
        let text = json.to_string();
        if text.len() + 16 > self.cfg.max_frame as usize {
            return Err(reject(
                request_id,
                ErrorCode::INVALID_REQUEST,
                "the answer does not fit in one frame; ask for one queue at a time",
            ));
        }
        Ok(text)
    }

    /// The first free queue slot (a new one at the end if none is free).
    fn free_queue_slot(&mut self) -> u32 {
        match self.queues.iter().position(Option::is_none) {
            Some(i) => i as u32,
            None => {
                self.queues.push(None);
                (self.queues.len() - 1) as u32
            }
        }
    }

    /// The retained messages (id, size) a recovered queue's start selects, matched
    /// against its own patterns only (the queues' index would answer for every queue):
    /// one walk of its small index per retained message, no allocation per message. In
    /// one go: at start-up, before any client (a client's CREATE fills in steps, see
    /// [`Engine::pump_fills`]).
    fn retained_for(&self, def: &QueueDef) -> Vec<(u64, u64)> {
        let Some((from_id, from_time)) = start_point(def.start) else {
            return Vec::new();
        };
        let mut own = own_index(def);
        let mut hit = Vec::with_capacity(1);
        let mut fill = Vec::new();
        for e in self.store.ids_from(from_id) {
            if e.id >= def.created_at || e.time < from_time {
                continue;
            }
            let (topic, _) = self.store.bytes_of(e);
            match_stored(&mut own, topic, &mut hit);
            if !hit.is_empty() {
                fill.push((e.id, Store::size_of(e)));
            }
        }
        fill
    }

    /// Puts queue `def` in slot `qi` (its patterns already indexed) with `fill`.
    fn place_queue(&mut self, qi: u32, def: QueueDef, fill: Vec<(u64, u64)>) {
        self.newest_created_at = self.newest_created_at.max(def.created_at);
        self.queue_names.insert(def.name.clone(), qi);
        self.count_dead_letter_target(&def);
        self.queues[qi as usize] = Some(Queue::new(def));
        for (id, size) in fill {
            self.enqueue(qi, id, size);
        }
    }

    /// Counts the queue `def` names as its dead-message queue (see
    /// `dead_letter_targets`); every queue made goes through here.
    fn count_dead_letter_target(&mut self, def: &QueueDef) {
        if def.dead_letter_queue != def.name {
            *self
                .dead_letter_targets
                .entry(def.dead_letter_queue.clone())
                .or_insert(0) += 1;
        }
    }

    /// Takes a refused queue's patterns out of the queues' index again.
    fn unindex(&mut self, qi: u32, subscriptions: &[String]) {
        for p in subscriptions {
            self.index.unsubscribe(Slot(qi), p);
        }
    }

    fn remove_queue(&mut self, qi: u32) {
        let Some(q) = self.queues.get_mut(qi as usize).and_then(Option::take) else {
            return;
        };
        self.extra_holders.remove(&qi);
        for p in &q.def.subscriptions {
            self.index.unsubscribe(Slot(qi), p);
        }
        self.entries = self.entries.saturating_sub(q.entries.len() as u64);
        self.queue_names.remove(&q.def.name);
        // As counted (`count_dead_letter_target`): a queue that names itself is not.
        if q.def.dead_letter_queue != q.def.name {
            if let Some(n) = self.dead_letter_targets.get_mut(&q.def.dead_letter_queue) {
                *n -= 1;
                if *n == 0 {
                    self.dead_letter_targets.remove(&q.def.dead_letter_queue);
                }
            }
        }
        for (&id, e) in &q.entries {
            if !e.done {
                self.store.unhold(id);
            }
        }
        for b in q.bindings {
            if let Some(bd) = self.bindings.remove(&b) {
                if let Some(c) = self.conns.get_mut(&bd.slot.0) {
                    c.bindings.retain(|&x| x != b);
                }
                self.fail.push((
                    bd.slot,
                    ErrorCode::NO_SUCH_QUEUE,
                    format!("queue {} was deleted", q.def.name),
                ));
            }
        }
    }

    fn enqueue(&mut self, qi: u32, id: u64, size: u64) {
        let Some(q) = self.queues.get_mut(qi as usize).and_then(Option::as_mut) else {
            return;
        };
        // O(log n) wherever `id` lies (out of id order: dead-lettered here, recovered,
        // moved on by TTL or max redeliveries); an id already held is left as it is.
        let fresh = QEntry {
            deliveries: 0,
            binding: 0,
            done: false,
        };
        if !q.entries.insert(id, fresh) {
            return;
        }
        self.entries += 1;
        if id < q.cursor {
            q.redeliver.insert(id);
        }
        q.depth += 1;
        q.bytes += size;
        q.counters.spooled += 1;
        if !q.touched {
            q.touched = true;
            self.touched.push(qi);
        }
        self.store.hold(id);
    }

    /// Marks `id` done in queue `qi`; true if it was there.
    fn remove_from_queue(&mut self, qi: u32, id: u64) -> bool {
        let Some(q) = self.queues.get_mut(qi as usize).and_then(Option::as_mut) else {
            return false;
        };
        let Some(e) = q.entries.get_mut(&id) else {
            return false;
        };
        if e.done {
            return false;
        }
        let b = e.binding;
        e.done = true;
        q.depth -= 1;
        let size = self.store.entry(id).map_or(0, Store::size_of);
        q.bytes = q.bytes.saturating_sub(size);
        let trimmed = q.trim();
        self.entries = self.entries.saturating_sub(trimmed);
        if b != 0 {
            if let Some(bd) = self.bindings.get_mut(&b) {
                bd.take_in_flight(id);
            }
        }
        self.store.unhold(id);
        true
    }

    /// Appends `r` to the spool; false when the spool refused it (busy, or failing).
    /// A lost acknowledgement or move only means a redelivery after a restart; a
    /// queue's definition, deletion or purge must be refused instead (the callers
    /// check).
    fn log_record(&mut self, log: &mut dyn Log, r: &Record<'_>) -> bool {
        if self.recovering {
            return true;
        }
        let mut rec = std::mem::take(&mut self.rec);
        record::encode(&mut rec, r);
        let ok = log.append(&rec).is_ok();
        if !ok {
            self.totals.spool_failures += 1;
        }
        self.rec = rec;
        ok
    }

    fn discard_oldest(&mut self, log: &mut dyn Log, qi: u32) -> bool {
        let Some(q) = self.queue(qi) else {
            return false;
        };
        // Not a walk from the front, which passes every message in flight first (78 µs
        // per publish into a full queue with 100,000 in flight).
        let Some(id) = q.oldest_waiting() else {
            return false;
        };
        let name = q.def.name.clone();
        self.remove_from_queue(qi, id);
        if let Some(q) = self.queue_mut(qi) {
            q.counters.discarded += 1;
        }
        self.log_record(log, &Record::Acked { id, queue: &name });
        true
    }

    fn purge(&mut self, qi: u32, up_to: u64) -> u64 {
        let ids: Vec<u64> = self.queue(qi).map_or(Vec::new(), |q| {
            q.entries
                .range(..=up_to)
                .filter(|(_, e)| !e.done)
                .map(|(&id, _)| id)
                .collect()
        });
        let n = ids.len() as u64;
        for id in ids {
            self.remove_from_queue(qi, id);
        }
        n
    }

    /// The dead-message queue named `name`, created (no subscriptions) if missing.
    fn dmq(&mut self, name: &str) -> u32 {
        if let Some(&q) = self.queue_names.get(name) {
            return q;
        }
        let def = QueueDef {
            name: name.to_owned(),
            created_at: self.store.next_id(),
            ..QueueDef::default()
        };
        self.install_queue(def)
    }

    fn dead_letter(&mut self, log: &mut dyn Log, qi: u32, id: u64) {
        let Some(q) = self.queue(qi) else {
            return;
        };
        let from = q.def.name.clone();
        let to = q.def.dead_letter_queue.clone();
        if from == to || self.dead_letter_targets.contains_key(&from) {
            // A dead-message queue (its own, or another queue's): the message is
            // dropped. Moving it on could send it around a loop of queues that name
            // each other, each move a spool record, forever.
            self.remove_from_queue(qi, id);
            self.log_record(log, &Record::Acked { id, queue: &from });
            return;
        }
        let size = self.store.entry(id).map_or(0, Store::size_of);
        // Into the dead-message queue first: a message held back from the store's
        // window is released the moment the last queue lets it go.
        let dq = self.dmq(&to);
        self.enqueue(dq, id, size);
        self.note_extra_holder(dq);
        self.remove_from_queue(qi, id);
        if let Some(q) = self.queue_mut(qi) {
            q.counters.dead_lettered += 1;
        }
        self.log_record(
            log,
            &Record::DeadLettered {
                id,
                from: &from,
                to: &to,
            },
        );
    }

    /// QUEUE_REQUEST.
    pub fn handle_queue_request(
        &mut self,
        log: &mut dyn Log,
        slot: Slot,
        request_id: u32,
        op: QueueOp,
        arg: &str,
    ) -> Result<(), Reject> {
        let json = match op {
            QueueOp::Create => {
                let mut def: QueueDef = serde_json::from_str(arg).map_err(|e| {
                    reject(
                        request_id,
                        ErrorCode::INVALID_REQUEST,
                        format!("queue definition: {e}"),
                    )
                })?;
                def.check()
                    .map_err(|e| reject(request_id, ErrorCode::INVALID_REQUEST, e))?;
                def.created_at = self.store.next_id();
                if let Some(&q) = self.queue_names.get(&def.name) {
                    let mut have = self.queue(q).map(|q| q.def.clone()).unwrap_or_default();
                    have.created_at = def.created_at;
                    have.start = def.start;
                    if have != def {
                        return Err(reject(
                            request_id,
                            ErrorCode::QUEUE_EXISTS,
                            format!(
                                "queue {} exists with a different definition: {} (`tickwire \
                                 queue show {}` shows it; to redefine it, delete it first, \
                                 which drops its messages)",
                                def.name,
                                definition_differences(&have, &def),
                                def.name
                            ),
                        ));
                    }
                    // Nothing created: the answer says so.
                    let mut json = self.queue_json(q);
                    if let Some(o) = json.as_object_mut() {
                        o.insert("existed".to_owned(), serde_json::Value::Bool(true));
                    }
                    json
                } else {
                    let (id, time) = match def.start {
                        StartAt::Id(id) => (Some(id), None),
                        StartAt::TimeNs(t) => (None, Some(t)),
                        StartAt::Now | StartAt::Beginning => (None, None),
                    };
                    let wall = self.tick_clock.map(|(_, w)| w);
                    if let Some(why) = start_beyond_now(id, time, self.store.next_id(), wall) {
                        return Err(reject(request_id, ErrorCode::INVALID_REQUEST, why));
                    }
                    if self.fills.iter().any(|f| f.def.name == def.name) {
                        return Err(reject(
                            request_id,
                            ErrorCode::BUSY,
                            format!(
                                "queue {} is being created (its start is still being filled); \
                                 try again",
                                def.name
                            ),
                        ));
                    }
                    if self.fills.iter().filter(|f| f.slot == slot).count()
                        >= MAX_FILLS_PER_CONNECTION
                    {
                        return Err(reject(
                            request_id,
                            ErrorCode::BUSY,
                            format!(
                                "this connection has {MAX_FILLS_PER_CONNECTION} queue creates \
                                 still filling from the retained messages; wait for their \
                                 answers, then try again"
                            ),
                        ));
                    }
                    // Pending creates count: each will be a queue; so do the dead-letter
                    // queues named and not made yet (the first dead letter makes one,
                    // and went past the limit: a hostile-input probe's 10,000 queues
                    // each naming its own made 20,000), this one's included. The
                    // router's own dead-message queue is made whatever the count.
                    // Pending creates' targets too (review: counted only once made,
                    // fills that name their own went past the limit the same way); a
                    // name that is itself a queue, a pending create or this one is not
                    // counted again.
                    let named = |n: &str| {
                        n != queue::DEFAULT_DMQ
                            && n != def.name
                            && !self.queue_names.contains_key(n)
                            && !self.fills.iter().any(|f| f.def.name == n)
                    };
                    let pending_targets = self
                        .dead_letter_targets
                        .keys()
                        .map(String::as_str)
                        .chain(self.fills.iter().map(|f| f.def.dead_letter_queue.as_str()))
                        .chain(std::iter::once(def.dead_letter_queue.as_str()))
                        .filter(|n| named(n))
                        .collect::<std::collections::HashSet<&str>>()
                        .len();
                    if self.queue_names.len() + self.fills.len() + pending_targets
                        >= self.cfg.max_queues
                    {
                        return Err(reject(
                            request_id,
                            ErrorCode::INVALID_REQUEST,
                            format!(
                                "the router holds its maximum of {} queues (counting the \
                                 dead-letter queues named and not made yet)",
                                self.cfg.max_queues
                            ),
                        ));
                    }
                    // Every definition is rewritten by each checkpoint, which must fit
                    // in what the spool takes at once: definitions beyond it made every
                    // checkpoint incomplete, the spool grew without end and the retries
                    // crowded out publishes (a hostile-input probe: 1,250 queues of 256
                    // long patterns, the spool +65 MB every 10 s). A sum per CREATE:
                    // at most `max_queues` lengths.
                    let defined: usize = self
                        .queues
                        .iter()
                        .flatten()
                        .map(|q| q.def_json.len())
                        .sum::<usize>()
                        // Pending creates: their patterns, and the rest of a definition.
                        + self
                            .fills
                            .iter()
                            .map(|f| f.def.subscriptions.iter().map(|p| p.len() + 3).sum::<usize>() + 256)
                            .sum::<usize>();
                    // What a checkpoint writes: the definition as stored, defaults in
                    // (review: the request's own text could be shorter or padded).
                    let this_len = serde_json::to_string(&def).map_or(arg.len(), |j| j.len());
                    if defined + this_len > MAX_DEFINITION_BYTES {
                        return Err(reject(
                            request_id,
                            ErrorCode::INVALID_REQUEST,
                            format!(
                                "queue not created: the queues' definitions would total more \
                                 than {} MiB (they are {defined} bytes now), what one spool \
                                 checkpoint rewrites; delete queues, or define fewer or \
                                 shorter subscriptions",
                                MAX_DEFINITION_BYTES >> 20
                            ),
                        ));
                    }
                    let not_created = |e: String| {
                        reject(
                            request_id,
                            create_refusal_code(&e),
                            format!("queue not created: {e}"),
                        )
                    };
                    // A start in the past is filled from the retained messages: the
                    // first budget now (as a BIND's browse scan), the rest at the timer
                    // ticks (`pump_fills`), which answer the CREATE when it is done.
                    let newest = self.store.next_id();
                    let mut f = Fill::new(def, slot, request_id, newest);
                    let mut budget = self.fill_budget.0;
                    match self.scan_fill(&mut f, &mut budget) {
                        FillScan::CaughtUp => {
                            let q = self.finish_fill(log, f).map_err(not_created)?;
                            self.queue_json(q)
                        }
                        FillScan::TooManyEntries => {
                            let text = self.too_many_entries(&f);
                            self.drop_fill(f);
                            return Err(not_created(text));
                        }
                        FillScan::Paused => {
                            // What the queues' index would refuse at the end is refused
                            // now, before any more scanning.
                            let qi = self.free_queue_slot();
                            if let Err(text) = self.index_queue(qi, &f.def) {
                                self.drop_fill(f);
                                return Err(not_created(text));
                            }
                            self.unindex(qi, &f.def.subscriptions);
                            if self.fills.is_empty() {
                                // What arrives from now on is what the catch-up counts.
                                self.fill_seen = newest;
                            }
                            self.wait_fill(f);
                            return Ok(());
                        }
                    }
                }
            }
            QueueOp::Delete | QueueOp::Purge | QueueOp::Show => {
                let Some(&q) = self.queue_names.get(arg) else {
                    return Err(reject(
                        request_id,
                        ErrorCode::NO_SUCH_QUEUE,
                        format!("no queue named {arg:?}"),
                    ));
                };
                match op {
                    // Recorded first, and refused when the spool cannot take the record
                    // (else the queue, or its messages, came back after a restart).
                    QueueOp::Delete => {
                        let j = self.queue_json(q);
                        if !self.log_record(log, &Record::QueueDeleted { queue: arg }) {
                            return Err(reject(request_id, ErrorCode::BUSY, SPOOL_REFUSED));
                        }
                        self.remove_queue(q);
                        j
                    }
                    QueueOp::Purge => {
                        let up_to = self.store.next_id();
                        if !self.log_record(log, &Record::Purged { up_to, queue: arg }) {
                            return Err(reject(request_id, ErrorCode::BUSY, SPOOL_REFUSED));
                        }
                        let n = self.purge(q, up_to);
                        serde_json::json!({ "name": arg, "purged": n })
                    }
                    _ => self.queue_json(q),
                }
            }
            QueueOp::List => {
                // Built a queue at a time and given up as soon as it cannot fit, and not
                // even begun when the queues are too many to fit: a LIST costs at most
                // one frame of JSON (with 10,000 queues each one cost ~185 ms before
                // being refused as too large).
                let cap = (self.cfg.max_frame as usize).saturating_sub(16);
                let too_large = || {
                    reject(
                        request_id,
                        ErrorCode::INVALID_REQUEST,
                        "the answer does not fit in one frame; ask for one queue at a time \
                         (tickwire queue show NAME)",
                    )
                };
                if self.queue_names.len().saturating_mul(MIN_QUEUE_JSON) > cap {
                    return Err(too_large());
                }
                let mut names: Vec<(&String, &u32)> = self.queue_names.iter().collect();
                names.sort();
                let mut text = String::from(r#"{"queues":["#);
                for (i, (_, &q)) in names.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&self.queue_json(q).to_string());
                    if text.len() + 2 > cap {
                        return Err(too_large());
                    }
                }
                text.push_str("]}");
                self.emit(slot, |b| wgm::encode_queue_reply(b, request_id, &text));
                return Ok(());
            }
        };
        let text = self.reply_json(request_id, &json)?;
        self.emit(slot, |b| wgm::encode_queue_reply(b, request_id, &text));
        Ok(())
    }

    fn queue_json(&self, qi: u32) -> serde_json::Value {
        match self.queue_view(qi) {
            Some(v) => serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
            None => serde_json::Value::Null,
        }
    }

    /// Queue `qi`'s counters and definition, copied.
    fn queue_view(&self, qi: u32) -> Option<QueueView> {
        let q = self.queue(qi)?;
        let consumers = q.bindings.len();
        let active = q
            .bindings
            .iter()
            .filter(|b| self.bindings.get(b).is_some_and(|b| b.active))
            .count();
        // What its consumers hold (not a walk of its entries: a queue may hold millions).
        let in_flight: usize = q
            .bindings
            .iter()
            .filter_map(|b| self.bindings.get(b))
            .map(|b| b.in_flight.len())
            .sum();
        Some(QueueView {
            name: q.def.name.clone(),
            depth: q.depth,
            bytes: q.bytes,
            in_flight,
            consumers,
            active_consumers: active,
            counters: q.counters,
            definition: q.def.clone(),
        })
    }

    /// Stats document member `guaranteed`.
    pub fn stats_json(&self) -> serde_json::Value {
        self.stats_json_cut(usize::MAX)
    }

    /// [`Engine::stats_json`] with at most `max_queues` queues (the first by name) and
    /// at most that many pending creates: `queues_omitted` and `pending_creates_omitted`
    /// say how many were left out (the STATS reply must fit in one frame, and the router
    /// may hold `max_queues` queues of a few hundred bytes of JSON each).
    pub fn stats_json_cut(&self, max_queues: usize) -> serde_json::Value {
        serde_json::to_value(self.view(max_queues)).unwrap_or(serde_json::Value::Null)
    }

    /// What [`Engine::stats_json_cut`] shows, copied out as plain values (for the
    /// monitoring snapshot: building JSON costs ~8 µs per queue, copying ~0.3).
    pub fn view(&self, max_queues: usize) -> GmView {
        let mut names: Vec<(&String, &u32)> = self.queue_names.iter().collect();
        names.sort_unstable();
        let queues = names
            .iter()
            .take(max_queues)
            .filter_map(|(_, &q)| self.queue_view(q))
            .collect();
        GmView {
            totals: self.totals,
            retained_messages: self.store.len(),
            retained_bytes: self.store.bytes(),
            retained_memory: self.store.memory(),
            publishers: self.publishers.iter().filter(|p| p.slot.is_some()).count(),
            publisher_identities: self.publisher_names.len(),
            max_publisher_identities: self.cfg.max_publishers,
            queue_entries: self.entries,
            max_queue_entries: self.cfg.max_entries,
            queue_index_nodes: self.index.node_count(),
            max_queue_index_nodes: self.cfg.max_index_nodes,
            queues,
            queues_omitted: names.len().saturating_sub(max_queues),
            pending_creates_omitted: self.fills.len().saturating_sub(max_queues),
            pending_creates: self
                .fills
                .iter()
                .take(max_queues)
                .map(|f| PendingView {
                    name: f.def.name.clone(),
                    next_id: f.cursor,
                    newest_id: self.store.next_id().saturating_sub(1),
                    found: f.found.len() + f.late.len(),
                })
                .collect(),
        }
    }

    // ------------------------------------------------------------------ consumers

    /// The subscriptions of queue `name`, if it exists (for the bind's permission
    /// check).
    pub fn queue_subscriptions(&self, name: &str) -> Option<&[String]> {
        let &qi = self.queue_names.get(name)?;
        self.queues
            .get(qi as usize)
            .and_then(Option::as_ref)
            .map(|q| q.def.subscriptions.as_slice())
    }

    /// Whether messages of any topic can land in the queue `name`: the router's
    /// dead-message queue, or a queue another names as its dead-letter queue, whatever
    /// its own subscriptions (for the permission checks of BIND and CREATE).
    pub fn takes_dead_letters(&self, name: &str) -> bool {
        name == queue::DEFAULT_DMQ || self.dead_letter_targets.contains_key(name)
    }

    /// The connections bound to queue `name` now (none when there is no such queue).
    pub fn bound_slots(&self, name: &str) -> Vec<Slot> {
        let Some(q) = self.queue_names.get(name).and_then(|&qi| self.queue(qi)) else {
            return Vec::new();
        };
        q.bindings
            .iter()
            .filter_map(|b| self.bindings.get(b).map(|b| b.slot))
            .collect()
    }

    /// BIND.
    pub fn handle_bind(
        &mut self,
        now: MonoNanos,
        slot: Slot,
        request_id: u32,
        window: u32,
        start: Start,
        queue: &str,
    ) -> Result<(), Reject> {
        let Some(&qi) = self.queue_names.get(queue) else {
            return Err(reject(
                request_id,
                ErrorCode::NO_SUCH_QUEUE,
                format!("no queue named {queue:?} (tickwire queue create {queue} --sub PATTERN)"),
            ));
        };
        if self
            .conns
            .get(&slot.0)
            .is_some_and(|c| c.bindings.len() >= 1024)
        {
            return Err(reject(
                request_id,
                ErrorCode::INVALID_REQUEST,
                "at most 1024 bindings per connection",
            ));
        }
        // A delivery walks the queue's bindings (skipping standbys), and each binding
        // that goes walks them again: 40,960 standbys on one exclusive queue stalled
        // the router ~9 s when their connections closed (hostile-input probe).
        // The connection's own list (at most 1,024), not the queue's (4,096).
        let mine = self.conns.get(&slot.0).map_or(0, |c| {
            c.bindings
                .iter()
                .filter(|b| self.bindings.get(b).is_some_and(|b| b.queue == qi))
                .count()
        });
        if mine >= MAX_BINDINGS_PER_QUEUE_PER_CONNECTION {
            return Err(reject(
                request_id,
                ErrorCode::INVALID_REQUEST,
                format!(
                    "this connection holds {MAX_BINDINGS_PER_QUEUE_PER_CONNECTION} bindings of \
                     queue {queue:?}, the most one connection may"
                ),
            ));
        }
        if self
            .queue(qi)
            .is_some_and(|q| q.bindings.len() >= MAX_BINDINGS_PER_QUEUE)
        {
            return Err(reject(
                request_id,
                ErrorCode::BUSY,
                format!(
                    "queue {queue:?} has its maximum of {MAX_BINDINGS_PER_QUEUE} bindings \
                     (consumers and browsers, standbys included); try again when one goes"
                ),
            ));
        }
        self.next_binding = self.next_binding.wrapping_add(1).max(1);
        while self.bindings.contains_key(&self.next_binding) {
            self.next_binding = self.next_binding.wrapping_add(1).max(1);
        }
        let (start_id, start_time) = match start {
            Start::MessageId(m) => (Some(m), None),
            Start::Time(t) => (None, Some(t)),
            Start::Queue | Start::Beginning => (None, None),
        };
        let wall = self
            .tick_clock
            .map(|(at, w)| UtcNanos(w.as_nanos() + now.saturating_sub(at)));
        if let Some(why) = start_beyond_now(start_id, start_time, self.store.next_id(), wall) {
            return Err(reject(request_id, ErrorCode::INVALID_REQUEST, why));
        }
        let id = self.next_binding;
        let browse = match start {
            Start::Queue => None,
            Start::Beginning => Some(0),
            Start::MessageId(m) => Some(m),
            Start::Time(t) => Some(self.store.first_id_since(t)),
        };
        let window = window.min(65_536);
        let q = self
            .queue(qi)
            .map(|q| (q.def.access, q.bindings.is_empty()));
        let active =
            browse.is_some() || q.is_some_and(|(a, empty)| a == Access::NonExclusive || empty);
        self.conns.entry(slot.0).or_default().bindings.push(id);
        let browse_at = self.browsers.len();
        if browse.is_some() {
            self.browsers.push(id);
        }
        self.bindings.insert(
            id,
            Binding {
                slot,
                queue: qi,
                window,
                in_flight: VecDeque::new(),
                in_flight_bytes: 0,
                active,
                browse,
                browse_at,
            },
        );
        if browse.is_none() {
            if let Some(q) = self.queue_mut(qi) {
                q.bindings.push(id);
            }
        }
        self.emit(slot, |b| wgm::encode_bound(b, request_id, id, active));
        if browse.is_some() {
            let mut budget = BROWSE_SCAN;
            self.pump_browse(now, id, &mut budget);
        } else {
            self.pump(now, qi);
        }
        Ok(())
    }

    fn own_binding(&self, slot: Slot, binding: u32) -> Result<(), Reject> {
        match self.bindings.get(&binding) {
            Some(b) if b.slot == slot => Ok(()),
            _ => Err(reject(
                0,
                ErrorCode::UNKNOWN_DELIVERY,
                format!("no binding {binding} on this connection"),
            )),
        }
    }

    /// CONSUMER_ACK: delivered messages `first..=last` of `binding` are handled.
    pub fn handle_consumer_ack(
        &mut self,
        log: &mut dyn Log,
        now: MonoNanos,
        slot: Slot,
        binding: u32,
        first: u64,
        last: u64,
    ) -> Result<(), Reject> {
        self.own_binding(slot, binding)?;
        let Some(b) = self.bindings.get_mut(&binding) else {
            return Ok(());
        };
        let qi = b.queue;
        let browse = b.browse.is_some();
        let mut acked = std::mem::take(&mut self.scratch_ids);
        acked.clear();
        b.take_in_flight_range(first, last, &mut acked);
        if acked.is_empty() {
            self.scratch_ids = acked;
            return Err(reject(
                0,
                ErrorCode::UNKNOWN_DELIVERY,
                format!("binding {binding} has no unacknowledged delivery in {first}..={last}"),
            ));
        }
        if !browse {
            for &id in &acked {
                if self.remove_from_queue(qi, id) {
                    if let Some(q) = self.queue_mut(qi) {
                        q.counters.acked += 1;
                    }
                    self.log_acked(log, qi, id);
                }
            }
        }
        self.scratch_ids = acked;
        if browse {
            let mut budget = BROWSE_SCAN;
            self.pump_browse(now, binding, &mut budget);
        } else {
            self.pump(now, qi);
        }
        Ok(())
    }

    /// Appends an `A` record for message `id` of queue `qi` (no allocation).
    fn log_acked(&mut self, log: &mut dyn Log, qi: u32, id: u64) {
        if self.recovering {
            return;
        }
        let mut rec = std::mem::take(&mut self.rec);
        if let Some(q) = self.queues.get(qi as usize).and_then(Option::as_ref) {
            record::encode(
                &mut rec,
                &Record::Acked {
                    id,
                    queue: &q.def.name,
                },
            );
            if log.append(&rec).is_err() {
                self.totals.spool_failures += 1;
            }
        }
        self.rec = rec;
    }

    /// CONSUMER_NACK.
    pub fn handle_consumer_nack(
        &mut self,
        log: &mut dyn Log,
        now: MonoNanos,
        slot: Slot,
        binding: u32,
        action: NackAction,
        id: u64,
    ) -> Result<(), Reject> {
        self.own_binding(slot, binding)?;
        let Some(b) = self.bindings.get_mut(&binding) else {
            return Ok(());
        };
        if !b.take_in_flight(id) {
            return Err(reject(
                0,
                ErrorCode::UNKNOWN_DELIVERY,
                format!("message {id} is not in flight on binding {binding}"),
            ));
        }
        let qi = b.queue;
        if b.browse.is_some() {
            let mut budget = BROWSE_SCAN;
            self.pump_browse(now, binding, &mut budget);
        } else {
            match action {
                NackAction::Redeliver => self.requeue(log, qi, id),
                NackAction::DeadLetter => self.dead_letter(log, qi, id),
            }
        }
        self.pump(now, qi);
        Ok(())
    }

    /// Puts an in-flight message back for redelivery (or dead-letters it at its limit).
    fn requeue(&mut self, log: &mut dyn Log, qi: u32, id: u64) {
        if self.give_back(log, qi, id) {
            if let Some(q) = self.queue_mut(qi) {
                q.redeliver.insert(id);
            }
        }
    }

    /// [`Engine::requeue`] for a binding's whole in-flight list: each id given back
    /// joins the queue's `redeliver` set at O(log n) (inserts into the middle of a
    /// sorted list made an UNBIND or disconnect of a 65,536 window, interleaved with
    /// another's given-back ids, hold the router ~0.2 s).
    fn requeue_all(&mut self, log: &mut dyn Log, qi: u32, ids: impl Iterator<Item = u64>) {
        for id in ids {
            self.requeue(log, qi, id);
        }
    }

    /// Takes in-flight message `id` of queue `qi` off its binding, dead-lettering it
    /// when it has had its redeliveries. True when it now waits for redelivery (the
    /// caller lists it in `redeliver`).
    fn give_back(&mut self, log: &mut dyn Log, qi: u32, id: u64) -> bool {
        let Some(q) = self.queue_mut(qi) else {
            return false;
        };
        let Some(e) = q.entries.get_mut(&id) else {
            return false;
        };
        if e.done {
            return false;
        }
        e.binding = 0;
        if e.deliveries >= q.def.max_redeliveries.saturating_add(1) {
            self.dead_letter(log, qi, id);
            return false;
        }
        true
    }

    /// UNBIND.
    pub fn handle_unbind(
        &mut self,
        log: &mut dyn Log,
        now: MonoNanos,
        slot: Slot,
        request_id: u32,
        binding: u32,
    ) -> Result<(), Reject> {
        self.own_binding(slot, binding).map_err(|mut r| {
            r.request_id = request_id;
            r
        })?;
        self.drop_binding(log, now, binding);
        self.emit(slot, |b| tickwire_wire::frame::encode_ack(b, request_id));
        Ok(())
    }

    fn drop_binding(&mut self, log: &mut dyn Log, now: MonoNanos, binding: u32) {
        let Some(b) = self.bindings.remove(&binding) else {
            return;
        };
        if let Some(c) = self.conns.get_mut(&b.slot.0) {
            c.bindings.retain(|&x| x != binding);
        }
        if b.browse.is_some() {
            self.forget_browser(b.browse_at);
            return;
        }
        let qi = b.queue;
        self.requeue_all(log, qi, b.in_flight.into_iter().map(|(id, _)| id));
        let mut promote = None;
        if let Some(q) = self.queue_mut(qi) {
            q.bindings.retain(|&x| x != binding);
            if q.def.access == Access::Exclusive {
                promote = q.bindings.first().copied();
            }
        }
        if let Some(next) = promote {
            if let Some(nb) = self.bindings.get_mut(&next) {
                if !nb.active {
                    nb.active = true;
                    let slot = nb.slot;
                    self.emit(slot, |b| wgm::encode_bound(b, 0, next, true));
                }
            }
        }
        self.pump(now, qi);
    }

    /// The connection is gone: its bindings' in-flight messages are redelivered, its
    /// publisher identity is free.
    pub fn handle_disconnect(&mut self, log: &mut dyn Log, now: MonoNanos, slot: Slot) {
        // Its pending creates go (nothing created, nothing spooled): the slot may serve
        // another client next, which must not get their answers.
        if self.fills.iter().any(|f| f.slot == slot) {
            for f in std::mem::take(&mut self.fills) {
                if f.slot == slot {
                    self.drop_fill(f);
                } else {
                    self.fills.push_back(f);
                }
            }
        }
        let Some(c) = self.conns.remove(&slot.0) else {
            return;
        };
        if let Some(p) = c.publisher {
            let pb = &mut self.publishers[p as usize];
            if pb.slot == Some(slot) {
                pb.slot = None;
            }
        }
        for b in c.bindings {
            self.drop_binding(log, now, b);
        }
    }

    // ------------------------------------------------------------------ delivery

    /// After a durability step: delivers what it made deliverable, in the queues that
    /// took messages not durable before ([`Engine::touched`]; with 10,000 queues a walk
    /// of them all cost each step 16–37 µs) and to the browse bindings. A queue whose
    /// newest entry is still not durable stays listed.
    fn pump_all(&mut self, now: MonoNanos) {
        // Swapped, not taken: both lists keep their capacity from step to step.
        let mut list = std::mem::take(&mut self.pump_list);
        std::mem::swap(&mut list, &mut self.touched);
        // A deleted queue's slot may have been reused and listed again.
        list.sort_unstable();
        list.dedup();
        for &qi in &list {
            if let Some(q) = self.queue_mut(qi) {
                q.touched = false;
            }
        }
        for &qi in &list {
            self.pump(now, qi);
        }
        let durable = self.durable_id;
        for &qi in &list {
            let Some(q) = self.queues.get_mut(qi as usize).and_then(Option::as_mut) else {
                continue;
            };
            if !q.touched
                && q.entries
                    .last_key_value()
                    .is_some_and(|(&id, _)| id > durable)
            {
                q.touched = true;
                self.touched.push(qi);
            }
        }
        list.clear();
        self.pump_list = list;
        self.pump_browsers(now);
    }

    /// Delivers what queue `qi` can deliver now.
    fn pump(&mut self, now: MonoNanos, qi: u32) {
        if self.recovering {
            return;
        }
        let max_bytes = self.cfg.max_in_flight_bytes;
        let Some(q) = self.queue(qi) else {
            return;
        };
        if q.bindings.is_empty() {
            return;
        }
        // Nothing to deliver: no look at the bindings (a tick pumps every queue that
        // holds anything; a hostile-input pass's 131,072 standby bindings on queues
        // whose only message was in flight kept an idle router at 90% of a core).
        if self.peek_for(qi).is_none() {
            return;
        }
        let mut ready = std::mem::take(&mut self.pump_ready);
        ready.clear();
        let Some(q) = self.queue(qi) else {
            self.pump_ready = ready;
            return;
        };
        // The bindings with room, from the round-robin position on: one look at each.
        // Deliveries only take room, so a binding found full stays full for this pump
        // (before, each delivery walked every binding again: one BIND with room among
        // 4,095 full ones cost ~4,096 lookups a message, 10 s a window of 65,536).
        let n = q.bindings.len();
        let start = q.rr % n;
        for k in 0..n {
            let bi = (start + k) % n;
            let binding = q.bindings[bi];
            if self.binding_ready(binding, max_bytes) {
                ready.push((bi, binding));
            }
        }
        // Round robin over them: one message each a pass, those still with room go on.
        let mut last = None;
        'deliver: while !ready.is_empty() {
            let mut kept = 0;
            for j in 0..ready.len() {
                let (bi, binding) = ready[j];
                if !self.binding_ready(binding, max_bytes) {
                    continue;
                }
                let Some(id) = self.next_for(qi) else {
                    break 'deliver;
                };
                self.deliver(now, qi, binding, id);
                last = Some(bi);
                ready[kept] = (bi, binding);
                kept += 1;
            }
            ready.truncate(kept);
        }
        if let (Some(bi), Some(q)) = (last, self.queue_mut(qi)) {
            q.rr = bi.wrapping_add(1);
        }
        self.pump_ready = ready;
    }

    /// Whether `binding` takes a delivery now: active, with room in its window and its
    /// connection's in-flight budget.
    #[inline]
    fn binding_ready(&self, binding: u32, max_bytes: u64) -> bool {
        #[cfg(test)]
        self.pump_looks.set(self.pump_looks.get() + 1);
        self.bindings.get(&binding).is_some_and(|b| {
            b.active && b.has_room(in_flight_budget(&self.conns, b.slot, max_bytes))
        })
    }

    /// The next message queue `qi` should deliver, if one is deliverable, taken.
    fn next_for(&mut self, qi: u32) -> Option<u64> {
        let (id, redelivery) = self.peek_for(qi)?;
        let q = self.queue_mut(qi)?;
        if redelivery {
            q.redeliver.pop_first();
        } else {
            q.cursor = id + 1;
        }
        Some(id)
    }

    /// The next message queue `qi` should deliver, if one is deliverable, and whether it
    /// is a redelivery, not taken: what it passes (stale redeliveries, delivered or
    /// acknowledged entries) it steps over for good.
    fn peek_for(&mut self, qi: u32) -> Option<(u64, bool)> {
        let durable = self.durable_id;
        let q = self.queues.get_mut(qi as usize)?.as_mut()?;
        while let Some(&id) = q.redeliver.first() {
            // A message published behind the queue's cursor (a replay start ahead of
            // the newest id) waits here too, and may not be durable yet: the set is in
            // id order, so nothing after a non-durable one is durable either.
            if id > durable {
                break;
            }
            if q.find(id).is_some_and(|e| !e.done && e.binding == 0) {
                return Some((id, true));
            }
            q.redeliver.pop_first();
        }
        for (&id, e) in q.entries.range(q.cursor..) {
            if id > durable {
                q.cursor = id;
                return None;
            }
            if !e.done && e.binding == 0 {
                q.cursor = id;
                return Some((id, false));
            }
        }
        q.cursor = q
            .entries
            .last_key_value()
            .map_or(q.cursor, |(&id, _)| id + 1);
        None
    }

    fn deliver(&mut self, now: MonoNanos, qi: u32, binding: u32, id: u64) {
        let Some(q) = self.queues.get_mut(qi as usize).and_then(Option::as_mut) else {
            return;
        };
        let Some(e) = q.entries.get_mut(&id) else {
            return;
        };
        e.deliveries += 1;
        e.binding = binding;
        let count = e.deliveries;
        let timeout = q.def.ack_timeout_ms;
        q.counters.delivered += 1;
        let maybe = self.store.entry(id).is_some_and(|s| s.maybe_delivered);
        let redelivered = count > 1 || maybe;
        if redelivered {
            q.counters.redelivered += 1;
            self.totals.redelivered += 1;
        }
        if timeout > 0 {
            let at = now.add_nanos(timeout.saturating_mul(1_000_000));
            q.timeouts.push_back((at, id, binding, count));
            if self.ack_deadline.is_none_or(|d| at < d) {
                self.ack_deadline = Some(at);
            }
        }
        self.totals.delivered += 1;
        let size = self.store.entry(id).map_or(0, Store::size_of);
        let Some(b) = self.bindings.get_mut(&binding) else {
            return;
        };
        b.add_in_flight(id, size);
        let slot = b.slot;
        self.emit_deliver(slot, binding, id, count, redelivered, now);
    }

    fn emit_deliver(
        &mut self,
        slot: Slot,
        binding: u32,
        id: u64,
        count: u32,
        redelivered: bool,
        now: MonoNanos,
    ) {
        let Some(e) = self.store.entry(id) else {
            return;
        };
        let (topic, payload) = self.store.bytes_of(e);
        let m = wgm::Stored {
            seq: e.seq,
            stamps: e.stamps.map(|(send, rin)| Stamps {
                publisher_send: send,
                router_in: rin,
                router_out: now.as_nanos(),
            }),
            topic,
            payload,
        };
        let start = self.out.len();
        let max = self.cfg.max_frame + 64;
        if wgm::encode_deliver(&mut self.out, binding, id, count, redelivered, m, max).is_ok() {
            let end = self.out.len();
            self.push_out(slot, start, end);
        }
    }

    /// Delivers what browse binding `binding` may take now: the next retained messages
    /// its queue's patterns match, up to its window. Looks at no more than `budget`
    /// retained messages (each one costs a walk of the queues' index, bounded by
    /// `max_match_work`); a scan that runs out keeps its place and goes on at the next
    /// pump or timer tick, so a BIND over a large retention of messages its queue does
    /// not match cannot hold the router (it took ~8.5 s per BIND over 1,000,000 retained
    /// messages and 256 patterns, matched one pattern at a time).
    fn pump_browse(&mut self, now: MonoNanos, binding: u32, budget: &mut usize) {
        if self.recovering {
            return;
        }
        #[cfg(test)]
        {
            self.browse_looks += 1;
        }
        loop {
            let Some(b) = self.bindings.get(&binding) else {
                return;
            };
            let Some(cursor) = b.browse else {
                return;
            };
            if !b.has_room(in_flight_budget(
                &self.conns,
                b.slot,
                self.cfg.max_in_flight_bytes,
            )) {
                return;
            }
            let qi = b.queue;
            let slot = b.slot;
            if self.queue(qi).is_none() {
                return;
            }
            let durable = self.durable_id;
            // Only durable messages; ids are in order, so the scan stops at the first
            // one that is not.
            let mut next = None;
            let mut reached = None;
            for e in self.store.ids_from(cursor) {
                if e.id > durable {
                    break;
                }
                if *budget == 0 {
                    reached = Some(e.id);
                    break;
                }
                *budget -= 1;
                let (t, _) = self.store.bytes_of(e);
                match_stored(&mut self.index, t, &mut self.browse_hits);
                if self.browse_hits.contains(&Slot(qi)) {
                    next = Some(e.id);
                    break;
                }
            }
            let Some(id) = next else {
                if let Some(b) = self.bindings.get_mut(&binding) {
                    b.browse = Some(match reached {
                        // Out of budget: go on from here next time.
                        Some(at) => at,
                        None => self.store.next_id().min(durable + 1).max(cursor),
                    });
                }
                return;
            };
            let size = self.store.entry(id).map_or(0, Store::size_of);
            if let Some(b) = self.bindings.get_mut(&binding) {
                b.browse = Some(id + 1);
                b.add_in_flight(id, size);
            }
            self.totals.delivered += 1;
            self.emit_deliver(slot, binding, id, 1, false, now);
        }
    }

    /// Pumps the browse bindings within one budget of [`BROWSE_SCAN`] retained
    /// messages and [`BROWSE_VISITS`] bindings, starting where the last call left off,
    /// so a binding whose scan is long does not keep the others waiting, and many full
    /// ones do not make every call long.
    fn pump_browsers(&mut self, now: MonoNanos) {
        // pump_browse adds and removes no binding: the list stands still meanwhile.
        let n = self.browsers.len();
        let mut budget = BROWSE_SCAN;
        for k in 0..n.min(BROWSE_VISITS) {
            let at = (self.browse_rr + k) % n;
            self.pump_browse(now, self.browsers[at], &mut budget);
            if budget == 0 || k + 1 == BROWSE_VISITS {
                self.browse_rr = at + 1;
                break;
            }
        }
    }

    /// Takes the browse binding at `at` out of [`Engine::browsers`] (the last one moves
    /// to its place).
    fn forget_browser(&mut self, at: usize) {
        if at >= self.browsers.len() {
            return;
        }
        self.browsers.swap_remove(at);
        if let Some(&moved) = self.browsers.get(at) {
            if let Some(b) = self.bindings.get_mut(&moved) {
                b.browse_at = at;
            }
        }
    }

    // ------------------------------------------------------------------ time

    /// Ack timeouts and TTLs. At most [`TIMEOUT_BUDGET`] expired deliveries are given
    /// back, and expired messages dead-lettered, per call (oldest first in each queue;
    /// a call starts with the queue after the one where the last call ran out); the
    /// rest stay due and [`Engine::poll_timeout`] says so.
    pub fn handle_timeout(&mut self, log: &mut dyn Log, now: MonoNanos, wall: UtcNanos) {
        self.tick_clock = Some((now, wall));
        // Set again from the fronts below; deliveries meanwhile lower it themselves.
        self.ack_deadline = None;
        let n = self.queues.len() as u32;
        let from = self.timeout_from.checked_rem(n).unwrap_or(0);
        let mut budget = TIMEOUT_BUDGET;
        for k in 0..n {
            let qi = (from + k) % n;
            // A queue holding nothing has nothing to time out, expire or deliver: an
            // idle queue costs a tick three emptiness checks.
            if self.queue(qi).is_none_or(|q| {
                q.timeouts.is_empty() && q.entries.is_empty() && q.redeliver.is_empty()
            }) {
                continue;
            }
            // Ack timeouts: a client's definition and window choose how many expire at
            // once, so they are given back a budget per call.
            while budget > 0 {
                let Some(q) = self.queue_mut(qi) else {
                    break;
                };
                let Some(&(at, id, binding, count)) = q.timeouts.front() else {
                    break;
                };
                // Entries of acknowledged (or since redelivered) messages go as soon as
                // they reach the front, so the list holds about what is in flight.
                let still = q
                    .find(id)
                    .is_some_and(|e| !e.done && e.binding == binding && e.deliveries == count);
                if still && at > now {
                    break;
                }
                q.timeouts.pop_front();
                if !still {
                    continue;
                }
                if let Some(b) = self.bindings.get_mut(&binding) {
                    b.take_in_flight(id);
                }
                self.requeue(log, qi, id);
                budget -= 1;
                if budget == 0 {
                    // The next call starts with the queue after this one.
                    self.timeout_from = (qi + 1) % n;
                }
            }
            // Time to live: undelivered messages past it are dead-lettered, from the
            // same budget (each writes a record; a client's TTL and publishes choose
            // how many expire at once).
            let mut ttl_spent = false;
            while let Some(q) = self.queue(qi) {
                if q.def.ttl_ms == 0 {
                    break;
                }
                // A client's definition: any u64 (no overflow, a huge TTL never expires).
                let ttl = q.def.ttl_ms.saturating_mul(1_000_000);
                let Some(id) = q.oldest_waiting() else {
                    break;
                };
                let Some(s) = self.store.entry(id) else {
                    break;
                };
                if s.time.saturating_add(ttl) > wall.as_nanos() {
                    break;
                }
                if budget == 0 {
                    // More expired than one call gives back: the next call comes
                    // promptly (the driver spaces core deadlines), starting after the
                    // queue where the budget ran out.
                    if ttl_spent {
                        self.timeout_from = (qi + 1) % n;
                    }
                    self.ack_deadline = Some(now);
                    break;
                }
                self.dead_letter(log, qi, id);
                budget -= 1;
                ttl_spent = true;
            }
            self.pump(now, qi);
            // After the pump: its deliveries add deadlines too. A queue left with
            // expired deliveries (the budget ran out) has a front at or before `now`.
            let front = self.queue(qi).and_then(|q| q.timeouts.front()).map(|t| t.0);
            if let Some(at) = front {
                self.ack_deadline = Some(self.ack_deadline.map_or(at, |d| d.min(at)));
            }
        }
        // Browse scans that ran out of budget go on (and find messages that became
        // durable since).
        self.pump_browsers(now);
        // Creates that start in the past go on filling (and are answered when done).
        self.pump_fills(log);
        let (bytes, age) = (
            self.cfg.retain_bytes,
            self.cfg.retain_ms.saturating_mul(1_000_000),
        );
        let t = wall.as_nanos();
        self.store
            .release_front(|e, total| total <= bytes && e.time.saturating_add(age) > t);
        // Held-back messages out of chunks they alone keep (a bounded step per tick).
        self.store.compact_step(COMPACT_ENTRIES_PER_TICK);
    }

    /// The earliest ack deadline (TTL and retention are checked at every timeout call);
    /// at or before the last call's `now` while expired deliveries wait for their turn.
    pub fn poll_timeout(&self) -> Option<MonoNanos> {
        self.ack_deadline
    }

    /// No guaranteed message was ever stored (ids start at 1; recovery carries them on
    /// from the message records and a checkpoint's [`Record::NextId`]).
    pub fn never_stored(&self) -> bool {
        self.store.next_id() == 1
    }

    /// The spool may reclaim records below this (nothing retained needs them).
    pub fn reclaim_below(&self) -> u64 {
        let pending = self.pending.front().map_or(u64::MAX, |p| p.lsn);
        self.store.oldest_lsn().unwrap_or(u64::MAX).min(pending)
    }

    /// Records that keep the state needing no older segment: the next message id (once
    /// a message was stored), every queue definition and every publisher's high-water
    /// mark. Appended before reclaiming; the segments it replaces may go once it is
    /// durable, and only when it is [`Checkpoint::complete`].
    pub fn checkpoint(&mut self, log: &mut dyn Log) -> Checkpoint {
        let mut records: Option<(u64, u64)> = None;
        let mut complete = true;
        let mut rec = Vec::new();
        let mut put = |log: &mut dyn Log, rec: &[u8]| match log.append(rec) {
            Ok(l) => records = Some(records.map_or((l, l), |(f, _)| (f, l))),
            Err(_) => complete = false,
        };
        if !self.never_stored() {
            // With nothing retained, the checkpoint may replace every message record:
            // without this, ids restarted at 1 after a restart, below the queues'
            // `first_message_id` (review), and were given out twice.
            record::encode(
                &mut rec,
                &Record::NextId {
                    id: self.store.next_id(),
                },
            );
            put(log, &rec);
        }
        for q in self.queues.iter().flatten() {
            record::encode(&mut rec, &Record::QueueDefined { json: &q.def_json });
            put(log, &rec);
        }
        for p in self.publishers.iter().filter(|p| !p.forgotten && p.stored) {
            record::encode(
                &mut rec,
                &Record::Publisher {
                    hwm: p.hwm,
                    identity: &p.name,
                },
            );
            put(log, &rec);
        }
        Checkpoint { records, complete }
    }

    /// Every record up to this number is durable (or was reported failed).
    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn
    }

    /// One relocation step (the driver's reclaim tick, every 10 s). When the spool
    /// holds `spool_bytes`, more than [`GmConfig::relocate_floor`] and more than twice
    /// what the retained messages would take as records (so each byte copied frees at
    /// least one), it writes again (`R` records, oldest record first, at most
    /// [`RELOCATE_MESSAGES`] and [`RELOCATE_BYTES`]) the held-back messages whose
    /// records are older than every record the retention and the pending publishes
    /// need and lie in the older half of the records from the oldest needed to the
    /// newest durable, each with the queue instances holding it. Once a copy is
    /// durable its message's record number is the copy's, so [`Engine::reclaim_below`]
    /// moves on and the next checkpoint and reclaim delete the old segments. Nothing is
    /// written while copies of the previous step are not yet durable, while a queue
    /// made since the last message would be ambiguous for recovery (see
    /// `newest_created_at`), or before recovery has finished. A message whose copy
    /// would not fit in a record stops the step (it pins its segment).
    pub fn relocate(&mut self, log: &mut dyn Log, spool_bytes: u64) -> Relocated {
        let mut done = Relocated::default();
        self.store.trim_relocations();
        // What the retained messages would take as records (~`RECORD_OVERHEAD` bytes
        // each beside topic and payload).
        let live = self
            .store
            .bytes()
            .saturating_add((self.store.len() as u64).saturating_mul(RECORD_OVERHEAD));
        if self.recovering
            || !self.relocating.is_empty()
            || self.newest_created_at >= self.store.next_id()
            || spool_bytes <= self.cfg.relocate_floor
            || spool_bytes <= live.saturating_mul(2)
        {
            return done;
        }
        let Some(oldest) = self.store.oldest_lsn() else {
            return done;
        };
        // Copied: held-back messages whose records are older than every record the
        // retention and the pending publishes need, and in the older half of the
        // records from the oldest needed to the newest durable (so copies just made,
        // which are the newest records, are not copied again at once).
        let needed = self
            .store
            .oldest_window_lsn()
            .unwrap_or(u64::MAX)
            .min(self.pending.front().map_or(u64::MAX, |p| p.lsn))
            .min(oldest + self.durable_lsn.saturating_sub(oldest) / 2);
        if oldest >= needed {
            return done;
        }
        let next_id = self.store.next_id();
        let max_record = self.cfg.max_frame as usize + 256;
        let mut rec = std::mem::take(&mut self.rec);
        let mut slots = std::mem::take(&mut self.holder_slots);
        for id in self.store.pinning(needed, RELOCATE_MESSAGES) {
            let Some(e) = self.store.entry(id).copied() else {
                break;
            };
            let (topic, payload) = self.store.bytes_of(&e);
            // Who holds it: the queues its topic matches and those that may hold
            // messages they do not match, each asked.
            match_stored(&mut self.index, topic, &mut self.matched);
            slots.clear();
            slots.extend(self.matched.iter().map(|s| s.0));
            for &q in &self.extra_holders {
                if !slots.contains(&q) {
                    slots.push(q);
                }
            }
            self.holders.clear();
            for &qi in &slots {
                let Some(q) = self.queues.get(qi as usize).and_then(Option::as_ref) else {
                    continue;
                };
                if q.find(id).is_some_and(|e| !e.done) {
                    self.holders.push(q.def.created_at, &q.def.name);
                }
            }
            record::encode(
                &mut rec,
                &Record::Relocated {
                    id,
                    time: e.time,
                    seq: e.seq,
                    stamps: e.stamps,
                    next_id,
                    holders: self.holders.holders(),
                    topic,
                    payload,
                },
            );
            if rec.len() > max_record || done.bytes + rec.len() > RELOCATE_BYTES {
                break;
            }
            let Ok(at) = log.append(&rec) else {
                break;
            };
            self.relocating.push_back((at, id));
            done.messages += 1;
            done.bytes += rec.len();
        }
        self.rec = rec;
        self.holder_slots = slots;
        done
    }

    /// Notes a queue that may hold messages its patterns do not match.
    fn note_extra_holder(&mut self, qi: u32) {
        self.extra_holders.insert(qi);
    }

    // ------------------------------------------------------------------ output

    fn emit(&mut self, slot: Slot, encode: impl FnOnce(&mut Vec<u8>)) {
        let start = self.out.len();
        encode(&mut self.out);
        let end = self.out.len();
        self.push_out(slot, start, end);
    }

    fn push_out(&mut self, slot: Slot, start: usize, end: usize) {
        if let Some(last) = self.outq.last_mut() {
            if last.0 == slot && last.2 == start {
                last.2 = end;
                return;
            }
        }
        self.outq.push((slot, start, end));
    }

    /// Takes the frames queued since the last call: the bytes and (connection, start,
    /// end) ranges into them. Give both back with [`Engine::return_output`] so their
    /// capacity is reused.
    pub fn take_output(&mut self) -> (Vec<u8>, Vec<(Slot, usize, usize)>) {
        (
            std::mem::take(&mut self.out),
            std::mem::take(&mut self.outq),
        )
    }

    /// Returns the buffers of [`Engine::take_output`], emptied.
    pub fn return_output(&mut self, mut out: Vec<u8>, mut q: Vec<(Slot, usize, usize)>) {
        out.clear();
        q.clear();
        if self.out.is_empty() && self.outq.is_empty() {
            self.out = out;
            self.outq = q;
        }
    }

    /// Hands each connection the frames queued for it since the last call.
    pub fn poll_transmit(&mut self, mut send: impl FnMut(Slot, &[u8])) {
        for &(slot, a, b) in &self.outq {
            send(slot, &self.out[a..b]);
        }
        self.outq.clear();
        self.out.clear();
    }

    /// Whether [`Engine::take_output`] or [`Engine::poll_fail`] has anything (the router
    /// asks every loop turn; most turns of a router without guaranteed traffic have
    /// nothing).
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.outq.is_empty() || !self.fail.is_empty()
    }

    /// Connections to close with a fatal error (identity taken over, queue deleted).
    pub fn poll_fail(&mut self) -> Option<(Slot, ErrorCode, String)> {
        self.fail.pop()
    }
}

/// A publisher identity as its publisher named it: without the user it is kept under
/// (`user` + [`crate::core::IDENTITY_OWNER_SEP`] + name, for a logged-in user).
fn shown_identity(key: &str) -> &str {
    key.rsplit_once(crate::core::IDENTITY_OWNER_SEP)
        .map_or(key, |(_, name)| name)
}

#[cfg(test)]
mod tests;
