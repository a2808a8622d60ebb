//! The last-value cache: the last message (or last N) of every topic matching the
//! configured cache patterns, for initial images and cache queries.
//!
//! Bounded by topics and bytes: when a new message would exceed either bound, the
//! topic **updated least recently** is evicted whole (counted), until it fits; a
//! single message larger than the byte bound is not cached (counted). Requests and
//! replies (PUBLISH with REPLY) are conversations, not state: never cached.
//!
//! The bytes counted are each frame's plus [`MESSAGE_OVERHEAD`] per message and each
//! topic's name plus [`TOPIC_OVERHEAD`]: the bookkeeping a message or topic costs
//! whatever its size (hostile-input pass: 6.2 million empty messages at depth 1,000
//! were counted 64 MiB and held ~385 MB, since only frame bytes were counted).
//!
//! Pure: no IO, no clock (the receive time is a parameter). Steady state (a topic
//! already cached, a message no larger than one it held before and not much smaller:
//! a slot holding more than twice its message's bytes, and over 256, is reallocated
//! to fit, so memory held stays within about twice what is counted) allocates nothing:
//! each topic keeps a ring of `depth` reused buffers, and recency is an intrusive
//! doubly-linked list over the slab of entries.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::HashMap;

use tickwire_wire::topic::pattern_matches;

use crate::index::{Slot, SubscriptionIndex};

/// Limits of a [`Cache`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLimits {
    /// Messages kept per topic (the last N). At least 1.
    pub depth: usize,
    /// Most topics cached.
    pub max_topics: usize,
    /// Most bytes of cached frames (plus topic names).
    pub max_bytes: usize,
}

/// Counters of a [`Cache`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Topics cached now.
    pub topics: usize,
    /// Bytes cached now.
    pub bytes: usize,
    /// Messages stored (replacing older ones included).
    pub stored: u64,
    /// Topics evicted to stay within the limits.
    pub evicted_topics: u64,
    /// Messages evicted with them.
    pub evicted_messages: u64,
    /// Messages not cached because one alone exceeds `max_bytes`.
    pub too_large: u64,
    /// Initial images and cache queries served.
    pub images: u64,
    /// Cached messages sent in them.
    pub image_messages: u64,
    /// Initial images and cache queries answered BUSY: the connection's or the
    /// router's budget of topics to examine (`image_scan_rate`) was spent.
    pub images_throttled: u64,
}

const NIL: u32 = u32::MAX;

/// Counted per cached message beyond its frame: its ring slot (buffer header and
/// receive time, 32 bytes) and its buffer's allocation header (16).
pub const MESSAGE_OVERHEAD: usize = 48;

/// Counted per cached topic beyond its name: its entry (~100 bytes), the topic
/// table's slot and the name's second copy's header.
pub const TOPIC_OVERHEAD: usize = 160;

/// What a topic named `topic` is counted, messages apart.
fn topic_cost(topic: &str) -> usize {
    topic.len() + TOPIC_OVERHEAD
}

/// A topic examined with `pattern` counts as this many (1 up to 15 bytes, then one more
/// per 16 bytes, 16 at the longest pattern): the match compares up to the pattern's
/// length, ~1.5 ns a byte, against ~10 ns to visit a slot (hostile-input probe: a
/// 124-level pattern over 100,000 124-level topics cost 20 times a short one's scan,
/// and the budget counted them alike).
pub fn scan_weight(pattern: &str) -> u64 {
    1 + pattern.len() as u64 / 16
}

/// A slot's buffer keeps its capacity for a message of `len` bytes when the capacity
/// is at most twice that, or at most this: steady state (messages of similar sizes)
/// reuses it, and memory held stays within twice the bytes counted plus this per slot.
const SMALL_SLOT: usize = 256;

fn capacity_fits(capacity: usize, len: usize) -> bool {
    capacity <= SMALL_SLOT.max(len.saturating_mul(2))
}

#[derive(Debug)]
struct Entry {
    topic: Box<str>,
    /// Ring of the last `depth` messages: `(frame, received_unix_ns)`; `len` valid,
    /// the oldest at `head`.
    ring: Vec<(Vec<u8>, u64)>,
    head: usize,
    len: usize,
    bytes: usize,
    prev: u32,
    next: u32,
}

/// See the module docs.
pub struct Cache {
    patterns: SubscriptionIndex,
    pattern_list: std::sync::Arc<[String]>,
    scratch: Vec<Slot>,
    limits: CacheLimits,
    topics: HashMap<Box<str>, u32>,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// Least recently updated first.
    lru_head: u32,
    lru_tail: u32,
    stats: CacheStats,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("patterns", &self.pattern_list)
            .field("limits", &self.limits)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// A cache of the topics matching `patterns` (already validated); none: disabled.
    pub fn new(patterns: &[String], limits: CacheLimits) -> Cache {
        let mut index = SubscriptionIndex::new();
        for (i, p) in patterns.iter().enumerate() {
            index.subscribe(Slot(i as u32), p);
        }
        Cache {
            patterns: index,
            pattern_list: patterns.into(),
            scratch: Vec::with_capacity(patterns.len()),
            limits: CacheLimits {
                depth: limits.depth.max(1),
                ..limits
            },
            topics: HashMap::new(),
            entries: Vec::new(),
            free: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            stats: CacheStats::default(),
        }
    }

    /// Whether any pattern is configured.
    pub fn is_enabled(&self) -> bool {
        !self.pattern_list.is_empty()
    }

    /// The cache patterns.
    pub fn patterns(&self) -> &[String] {
        &self.pattern_list
    }

    /// The cache patterns, shared (a reference count, no copy: for snapshots).
    pub fn patterns_shared(&self) -> std::sync::Arc<[String]> {
        self.pattern_list.clone()
    }

    /// The counters.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Keeps `publish` (a decoded PUBLISH's exact bytes) as the latest message of
    /// `topic` if a cache pattern matches it.
    pub fn handle_publish(&mut self, topic: &str, publish: &[u8], received_unix_ns: u64) {
        if self.pattern_list.is_empty() {
            return;
        }
        self.scratch.clear();
        self.patterns.match_topic(topic, &mut self.scratch);
        if self.scratch.is_empty() {
            return;
        }
        let cost = publish.len() + MESSAGE_OVERHEAD;
        if cost + topic_cost(topic) > self.limits.max_bytes {
            self.stats.too_large += 1;
            return;
        }
        let idx = match self.topics.get(topic) {
            Some(&i) => i,
            None => {
                // A new topic: make room for one more topic and its name.
                while self.topics.len() >= self.limits.max_topics.max(1)
                    || self.stats.bytes + cost + topic_cost(topic) > self.limits.max_bytes
                {
                    if !self.evict_oldest() {
                        break;
                    }
                }
                self.insert(topic)
            }
        };
        self.store(idx, publish, received_unix_ns);
        // A larger message (or a deeper ring) may exceed the byte bound: evict other
        // topics, then this topic's own older messages (the newest always fits).
        while self.stats.bytes > self.limits.max_bytes && self.lru_head != idx {
            if !self.evict_oldest() {
                break;
            }
        }
        while self.stats.bytes > self.limits.max_bytes && self.drop_oldest_message(idx) {}
        self.stats.stored += 1;
    }

    /// Calls `f(frame, received_unix_ns)` for every cached message whose topic
    /// matches `pattern`: per topic oldest first; topics in no particular order.
    /// Returns how many.
    pub fn for_each_matching(&mut self, pattern: &str, mut f: impl FnMut(&[u8], u64)) -> usize {
        let mut n = 0;
        for e in self.entries.iter().flatten() {
            if !pattern_matches(pattern, &e.topic) {
                continue;
            }
            for k in 0..e.len {
                let (frame, at) = &e.ring[(e.head + k) % e.ring.len()];
                f(frame, *at);
                n += 1;
            }
        }
        self.stats.images += 1;
        self.stats.image_messages += n as u64;
        n
    }

    /// What [`Cache::for_each_matching`] costs for `pattern`, in topics examined:
    /// every topic slot, whatever the pattern (at most `max_topics`), weighted by
    /// [`scan_weight`] (a long pattern compares up to its length per topic).
    pub fn scan_cost(&self, pattern: &str) -> u64 {
        self.entries.len() as u64 * scan_weight(pattern)
    }

    /// Counts an image refused because its scan was over budget.
    pub fn count_throttled(&mut self) {
        self.stats.images_throttled += 1;
    }

    fn insert(&mut self, topic: &str) -> u32 {
        let e = Entry {
            topic: topic.into(),
            ring: Vec::new(),
            head: 0,
            len: 0,
            bytes: topic_cost(topic),
            prev: NIL,
            next: NIL,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = Some(e);
                i
            }
            None => {
                self.entries.push(Some(e));
                (self.entries.len() - 1) as u32
            }
        };
        self.topics.insert(topic.into(), idx);
        self.stats.topics = self.topics.len();
        self.stats.bytes += topic_cost(topic);
        self.link_tail(idx);
        idx
    }

    fn store(&mut self, idx: u32, publish: &[u8], at: u64) {
        let depth = self.limits.depth;
        let Some(Some(e)) = self.entries.get_mut(idx as usize) else {
            return;
        };
        // A message more (not one overwritten) adds its bookkeeping; a slot beyond
        // `len` is empty (cleared when its message was dropped).
        let added = if e.len < depth { MESSAGE_OVERHEAD } else { 0 };
        let slot = if e.len < depth {
            if e.ring.len() < depth {
                e.ring.push((Vec::new(), 0));
            }
            let s = (e.head + e.len) % e.ring.len().max(1);
            e.len += 1;
            s
        } else {
            // Full: overwrite the oldest, which becomes the newest.
            let s = e.head;
            e.head = (e.head + 1) % e.ring.len();
            s
        };
        let (buf, when) = &mut e.ring[slot];
        e.bytes = e.bytes - buf.len() + publish.len() + added;
        self.stats.bytes = self.stats.bytes - buf.len() + publish.len() + added;
        buf.clear();
        if !capacity_fits(buf.capacity(), publish.len()) {
            // A slot that once held a much larger message gives its memory back, so
            // what is held stays within twice what is counted (hostile-input probe:
            // one 1 MiB message then a 10-byte one per topic held 1 MiB per topic
            // while counting 10 bytes).
            *buf = Vec::with_capacity(publish.len());
        }
        buf.extend_from_slice(publish);
        *when = at;
        self.unlink(idx);
        self.link_tail(idx);
    }

    /// Drops the oldest message of topic `idx` if it has more than one.
    fn drop_oldest_message(&mut self, idx: u32) -> bool {
        let Some(Some(e)) = self.entries.get_mut(idx as usize) else {
            return false;
        };
        if e.len <= 1 {
            return false;
        }
        let (buf, _) = &mut e.ring[e.head];
        let freed = buf.len() + MESSAGE_OVERHEAD;
        // Cleared, not freed: the slot is reused by the next message. A large one is
        // freed: an empty slot holds no more than `SMALL_SLOT`.
        buf.clear();
        if !capacity_fits(buf.capacity(), 0) {
            *buf = Vec::new();
        }
        e.head = (e.head + 1) % e.ring.len();
        e.len -= 1;
        e.bytes -= freed;
        self.stats.bytes -= freed;
        self.stats.evicted_messages += 1;
        true
    }

    /// Evicts the least recently updated topic; false when none is left.
    fn evict_oldest(&mut self) -> bool {
        let idx = self.lru_head;
        if idx == NIL {
            return false;
        }
        self.unlink(idx);
        if let Some(e) = self.entries.get_mut(idx as usize).and_then(Option::take) {
            self.topics.remove(&e.topic);
            self.stats.bytes -= e.bytes;
            self.stats.evicted_topics += 1;
            self.stats.evicted_messages += e.len as u64;
        }
        self.free.push(idx);
        self.stats.topics = self.topics.len();
        true
    }

    fn link_tail(&mut self, idx: u32) {
        let tail = self.lru_tail;
        if let Some(Some(e)) = self.entries.get_mut(idx as usize) {
            e.prev = tail;
            e.next = NIL;
        }
        match self.entries.get_mut(tail as usize) {
            Some(Some(t)) => t.next = idx,
            _ => self.lru_head = idx,
        }
        self.lru_tail = idx;
    }

    fn unlink(&mut self, idx: u32) {
        let Some(Some(e)) = self.entries.get(idx as usize) else {
            return;
        };
        let (prev, next) = (e.prev, e.next);
        match self.entries.get_mut(prev as usize) {
            Some(Some(p)) => p.next = next,
            _ => {
                if self.lru_head == idx {
                    self.lru_head = next;
                }
            }
        }
        match self.entries.get_mut(next as usize) {
            Some(Some(n)) => n.prev = prev,
            _ => {
                if self.lru_tail == idx {
                    self.lru_tail = prev;
                }
            }
        }
        if let Some(Some(e)) = self.entries.get_mut(idx as usize) {
            e.prev = NIL;
            e.next = NIL;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(depth: usize, topics: usize, bytes: usize) -> CacheLimits {
        CacheLimits {
            depth,
            max_topics: topics,
            max_bytes: bytes,
        }
    }

    fn image(c: &mut Cache, pattern: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        c.for_each_matching(pattern, |f, at| {
            out.push((String::from_utf8_lossy(f).into_owned(), at))
        });
        out.sort();
        out
    }

    /// Bytes the slots' buffers hold (their capacity), for the memory bound.
    fn held(c: &Cache) -> usize {
        c.entries
            .iter()
            .flatten()
            .flat_map(|e| e.ring.iter())
            .map(|(buf, _)| buf.capacity())
            .sum()
    }

    #[test]
    fn memory_held_follows_what_is_counted_after_a_large_message() {
        // Hostile-input probe: a 1 MiB message, then a 10-byte one, per topic.
        let mut c = Cache::new(&["c/>".into()], limits(2, 1000, 64 << 20));
        let big = vec![b'x'; 1 << 20];
        for i in 0..20 {
            let topic = format!("c/{i}");
            c.handle_publish(&topic, &big, 1);
            c.handle_publish(&topic, b"0123456789", 2);
            c.handle_publish(&topic, b"0123456789", 3);
        }
        let counted = c.stats().bytes;
        // 20 topics of 3 or 4 bytes, 2 messages of 10 bytes each: no trace of 1 MiB.
        let most = 20 * (4 + TOPIC_OVERHEAD) + 40 * (10 + MESSAGE_OVERHEAD);
        assert!(counted <= most, "{counted}");
        assert!(
            held(&c) <= 2 * counted + 20 * 2 * SMALL_SLOT,
            "{} held for {counted} counted",
            held(&c)
        );
        // Steady state reuses the buffers: the same sizes again change no capacity.
        let before: Vec<*const u8> = c
            .entries
            .iter()
            .flatten()
            .flat_map(|e| e.ring.iter().map(|(b, _)| b.as_ptr()))
            .collect();
        for i in 0..20 {
            c.handle_publish(&format!("c/{i}"), b"9876543210", 4);
            c.handle_publish(&format!("c/{i}"), b"98765", 5);
        }
        let after: Vec<*const u8> = c
            .entries
            .iter()
            .flatten()
            .flat_map(|e| e.ring.iter().map(|(b, _)| b.as_ptr()))
            .collect();
        assert_eq!(before, after, "a steady-state store reallocated");
    }

    #[test]
    fn keeps_the_last_message_of_matching_topics_only() {
        let mut c = Cache::new(&["md/>".into()], limits(1, 100, 1 << 20));
        c.handle_publish("md/a", b"a1", 1);
        c.handle_publish("md/a", b"a2", 2);
        c.handle_publish("md/b", b"b1", 3);
        c.handle_publish("other", b"x", 4);
        assert_eq!(image(&mut c, "md/>"), [("a2".into(), 2), ("b1".into(), 3)]);
        assert_eq!(image(&mut c, "md/b"), [("b1".into(), 3)]);
        assert_eq!(image(&mut c, "other"), []);
        assert_eq!(c.stats().topics, 2);
        assert_eq!(
            c.stats().bytes,
            2 * (4 + TOPIC_OVERHEAD) + 2 * (2 + MESSAGE_OVERHEAD)
        );
    }

    #[test]
    fn depth_keeps_the_last_n_oldest_first() {
        let mut c = Cache::new(&[">".into()], limits(3, 100, 1 << 20));
        for i in 1..=5u64 {
            c.handle_publish("t", format!("m{i}").as_bytes(), i);
        }
        let mut got = Vec::new();
        c.for_each_matching("t", |f, _| got.push(f.to_vec()));
        assert_eq!(got, [b"m3".to_vec(), b"m4".to_vec(), b"m5".to_vec()]);
    }

    #[test]
    fn the_least_recently_updated_topic_is_evicted_at_the_topic_bound() {
        let mut c = Cache::new(&[">".into()], limits(1, 2, 1 << 20));
        c.handle_publish("a", b"1", 1);
        c.handle_publish("b", b"1", 2);
        c.handle_publish("a", b"2", 3); // a is now the most recent
        c.handle_publish("c", b"1", 4); // evicts b
        let mut ats: Vec<_> = image(&mut c, ">").into_iter().map(|(_, at)| at).collect();
        ats.sort();
        assert_eq!(ats, [3, 4]);
        assert_eq!(c.stats().evicted_topics, 1);
        assert_eq!(c.stats().topics, 2);
    }

    #[test]
    fn the_byte_bound_holds_and_a_message_too_large_alone_is_refused() {
        // Each topic costs its name and bookkeeping, its frame and bookkeeping.
        let one = 1 + TOPIC_OVERHEAD + 10 + MESSAGE_OVERHEAD;
        let max = 3 * one + 2;
        let mut c = Cache::new(&[">".into()], limits(1, 1000, max));
        for t in ["a", "b", "c", "d", "e"] {
            c.handle_publish(t, &[0; 10], 0);
            assert!(c.stats().bytes <= max, "{:?}", c.stats());
        }
        assert_eq!(c.stats().topics, 3);
        assert_eq!(c.stats().evicted_topics, 2);
        c.handle_publish("big", &vec![0; max], 0);
        assert_eq!(c.stats().too_large, 1);
        // Growing one entry evicts the others, never itself.
        c.handle_publish("e", &vec![0; 2 * one], 0);
        assert!(c.stats().bytes <= max);
        assert_eq!(image(&mut c, "e").len(), 1);
    }

    /// Hostile-input pass: empty messages at depth 1,000 were counted by their frame
    /// bytes only; the bookkeeping of each (~50 bytes) made memory ~6 times the bound.
    /// Now it is counted: a bound of 1 MiB holds at most 1 MiB / 48 tiny messages.
    #[test]
    fn tiny_messages_are_counted_with_their_bookkeeping() {
        let max = 1 << 20;
        let mut c = Cache::new(&[">".into()], limits(1000, 100, max));
        for i in 0..100_000u32 {
            c.handle_publish(&format!("t/{}", i % 50), &[0; 2], u64::from(i));
        }
        assert!(c.stats().bytes <= max, "{:?}", c.stats());
        let kept: usize = c.entries.iter().flatten().map(|e| e.len).sum();
        assert!(kept <= max / MESSAGE_OVERHEAD, "{kept} messages kept");
        assert!(kept > max / (2 * MESSAGE_OVERHEAD), "{kept} messages kept");
        // What is held is within twice what is counted.
        let held_bytes = held(&c)
            + c.entries
                .iter()
                .flatten()
                .map(|e| e.ring.capacity() * 32 + e.len * 16)
                .sum::<usize>();
        assert!(held_bytes <= 2 * c.stats().bytes, "{held_bytes} held");
    }

    #[test]
    fn a_deep_ring_of_one_topic_stays_within_the_byte_bound() {
        let max = 1 + TOPIC_OVERHEAD + 2 * (15 + MESSAGE_OVERHEAD) + 9;
        let mut c = Cache::new(&[">".into()], limits(4, 10, max));
        for i in 0..6u8 {
            c.handle_publish("t", &[i; 15], u64::from(i));
            assert!(c.stats().bytes <= max, "{:?}", c.stats());
        }
        // The topic and two messages fit, a third would not: the last two are kept.
        let mut got = Vec::new();
        c.for_each_matching("t", |f, _| got.push(f[0]));
        assert_eq!(got, [4, 5]);
    }

    #[test]
    fn an_evicted_slot_is_reused_and_the_lru_list_stays_consistent() {
        let mut c = Cache::new(&[">".into()], limits(2, 3, 1 << 20));
        for round in 0..50u64 {
            for t in ["a", "b", "c", "d", "e"] {
                c.handle_publish(t, &round.to_le_bytes(), round);
            }
            assert_eq!(c.stats().topics, 3);
            assert!(c.entries.len() <= 4);
        }
        // Walk the list both ways.
        let mut n = 0;
        let mut at = c.lru_head;
        let mut prev = NIL;
        while at != NIL {
            let e = c.entries[at as usize].as_ref().unwrap();
            assert_eq!(e.prev, prev);
            prev = at;
            at = e.next;
            n += 1;
        }
        assert_eq!((n, prev), (3, c.lru_tail));
    }

    #[test]
    fn disabled_cache_keeps_nothing() {
        let mut c = Cache::new(&[], limits(1, 10, 100));
        c.handle_publish("a", b"x", 1);
        assert!(!c.is_enabled());
        assert_eq!(c.stats().topics, 0);
    }
}
