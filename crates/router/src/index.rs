//! The subscription index: which clients want a message published to a topic.
//!
//! A trie over pattern levels. Each node has literal children (hash map by level
//! text), one child for a bare `*`, prefix children for `pre*` (hash map by prefix,
//! plus the sorted set of distinct prefix lengths present), the clients whose pattern
//! ends at the node, and the clients with a `>` right below it.
//!
//! Matching walks only the branches the topic can take: per topic level, one literal
//! lookup, the `*` child, and one lookup per distinct prefix length not longer than
//! the level. So its cost grows with the number of *matching* trie nodes, never with
//! the number of subscriptions that cannot match.
//!
//! It does not grow with how many patterns of *one* client match either: each node
//! also keeps the distinct clients subscribed at or below it (with counts), and the
//! walk skips a child whose clients (up to [`SKIP_CHECK_MAX`] of them) were all
//! emitted already. One client holding 10,000 patterns that all match a topic (`*`,
//! `a*`, `aa*`, `a*/a*`, ...) is found at its first matching node and the rest of its
//! nodes are skipped, where the walk used to visit all 10,000 (issue 12: 3,400 msg/s
//! on such a topic). What is still walked: nodes that lead towards patterns that end
//! up not matching (a pattern matching the first levels but not the last), bounded by
//! `max_subscriptions` per client like every subscription's memory.
//!
//! Drive it from the router's single hot thread: [`SubscriptionIndex::subscribe`] /
//! [`SubscriptionIndex::unsubscribe`] on control messages (the router owns each
//! client's pattern set and unsubscribes them all after a disconnect, a bounded number
//! per loop turn: `core::TEARDOWN_PATTERNS_PER_TURN`), and
//! [`SubscriptionIndex::match_topic`] per published message with a reused output
//! vector. Patterns and topics must already be validated by
//! [`tickwire_wire::topic::validate_pattern`] / [`tickwire_wire::topic::validate_topic`].

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use tickwire_wire::topic::{is_system_topic, same_bytes, segments, Segment};

/// The trie's child maps. Their keys are topic levels a client chose, so the hash is
/// keyed at random per map (ahash's `RandomState`: no peer can aim collisions at it)
/// but several times cheaper per lookup than std's SipHash, which took about a sixth of
/// the router's time per message (BENCHMARKS.md, "Issue 15: the router's cost per
/// message over shared memory").
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

/// A connected client's slot: a dense small integer, reused after the client leaves
/// (the router's slab key and mio token). Not an identity: see `core::ClientId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub u32);

/// Index of a node in the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeId(u32);

impl NodeId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// The root is allocated first and never freed.
const ROOT: NodeId = NodeId(0);

/// Children with at most this many distinct clients below them are skipped when all of
/// those were emitted already; checking more would cost more than it saves.
pub const SKIP_CHECK_MAX: usize = 64;

/// Subscriptions by pattern, for matching published topics.
pub struct SubscriptionIndex {
    /// Node arena; slots listed in `free` are unused.
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    /// Number of (client, pattern) subscriptions.
    len: usize,
    /// Per-client generation of the last `match_topic` that emitted it, for dedup.
    /// Invariant: longer than the largest `Slot` ever subscribed.
    marks: Vec<u64>,
    generation: u64,
    /// Scratch for `subscribe` / `unsubscribe`: the nodes on the pattern's path.
    path: Vec<NodeId>,
    /// The last topic matched and what it matched, while no subscription changed: a
    /// stream of messages on one topic walks the trie once (see [`Self::match_topic`]).
    /// The answers for the last two topics matched (a request and its reply, two
    /// publishers interleaved): a miss replaces `memo[next]`, the less recently used.
    memo: [Memo; 2],
    next: usize,
    /// Children the last `match_topic` considered.
    #[cfg(test)]
    last_work: u64,
}

/// One remembered match. Its buffers keep their capacity: after the first messages
/// (the longest topic, the most clients matched) remembering allocates nothing.
#[derive(Default)]
struct Memo {
    valid: bool,
    topic: String,
    clients: Vec<Slot>,
}

impl Memo {
    #[inline(always)]
    fn hits(&self, topic: &str) -> bool {
        self.valid && same_bytes(self.topic.as_bytes(), topic.as_bytes())
    }
}

#[derive(Default)]
struct Node {
    literal: HashMap<Box<str>, NodeId>,
    /// Child for a bare `*` level.
    any: Option<NodeId>,
    /// Children for `pre*` levels, keyed by the non-empty `pre`.
    prefix: HashMap<Box<str>, NodeId>,
    /// Distinct lengths of the keys of `prefix`, ascending.
    prefix_lens: Vec<PrefixLen>,
    /// Clients whose pattern ends at this node, sorted.
    exact: Vec<Slot>,
    /// Clients whose pattern is this node's path followed by `>`, sorted.
    rest: Vec<Slot>,
    /// Distinct clients with a subscription at this node or below it, sorted, with how
    /// many such subscriptions each has. Not kept for the root (never skipped).
    below: Vec<(Slot, u32)>,
    /// The most `Walk::child` steps a walk from this node can take, whatever the topic:
    /// at most one literal child matches a level, but the `*` child and every prefix
    /// child may all be taken. A tree: at most the nodes below this one.
    work: u64,
    /// What this node adds to its parent's `work` as last registered there: 1 + its
    /// `work` (0: not registered yet).
    contrib: u64,
    /// The registered contributions of the literal children, as (value, how many),
    /// ascending: the last is what the literal children add. A vector: a chain node has
    /// one entry, and distinct values are few (each needs a subtree that much larger).
    lit: Vec<(u64, u32)>,
    /// The registered contribution of the `*` child (0: none).
    any_contrib: u64,
    /// The registered contributions of the prefix children, summed.
    prefix_sum: u64,
}

struct PrefixLen {
    len: usize,
    /// How many keys of `prefix` have this length.
    keys: u32,
}

impl Node {
    /// `work` from the registered contributions of the children.
    fn work_from_children(&self) -> u64 {
        self.lit.last().map_or(0, |&(v, _)| v) + self.any_contrib + self.prefix_sum
    }

    /// Replaces a child's registered contribution `old` by `new` (0: none) under
    /// `edge`'s kind.
    fn register(&mut self, edge: &Edge<'_>, old: u64, new: u64) {
        match edge {
            Edge::Literal(_) => {
                if old > 0 {
                    if let Ok(i) = self.lit.binary_search_by_key(&old, |e| e.0) {
                        self.lit[i].1 -= 1;
                        if self.lit[i].1 == 0 {
                            self.lit.remove(i);
                        }
                    }
                }
                if new > 0 {
                    match self.lit.binary_search_by_key(&new, |e| e.0) {
                        Ok(i) => self.lit[i].1 += 1,
                        Err(i) => self.lit.insert(i, (new, 1)),
                    }
                }
            }
            Edge::Any => self.any_contrib = new,
            Edge::Prefix(_) => self.prefix_sum = self.prefix_sum - old + new,
        }
    }

    /// The clients whose pattern ends here: with a trailing `>` (`rest`) or exactly.
    fn clients_mut(&mut self, rest: bool) -> &mut Vec<Slot> {
        if rest {
            &mut self.rest
        } else {
            &mut self.exact
        }
    }

    fn is_unused(&self) -> bool {
        self.literal.is_empty()
            && self.any.is_none()
            && self.prefix.is_empty()
            && self.exact.is_empty()
            && self.rest.is_empty()
    }
}

/// How a level of a validated pattern selects a child.
enum Edge<'a> {
    Literal(&'a str),
    Any,
    Prefix(&'a str),
}

impl<'a> Edge<'a> {
    /// Classifies one non-`>` level, as [`segments`] would.
    fn of_level(level: &'a str) -> Self {
        match level.strip_suffix('*') {
            Some("") => Edge::Any,
            Some(prefix) => Edge::Prefix(prefix),
            None => Edge::Literal(level),
        }
    }
}

impl Default for SubscriptionIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl SubscriptionIndex {
    /// An empty index (just the root node).
    pub fn new() -> Self {
        Self {
            nodes: vec![Node::default()],
            free: Vec::new(),
            len: 0,
            marks: Vec::new(),
            generation: 0,
            path: Vec::new(),
            memo: Default::default(),
            next: 0,
            #[cfg(test)]
            last_work: 0,
        }
    }

    /// Adds `client`'s subscription to a validated pattern. Returns false if the
    /// client already had exactly this pattern (idempotent).
    pub fn subscribe(&mut self, client: Slot, pattern: &str) -> bool {
        debug_assert!(
            tickwire_wire::topic::validate_pattern(pattern.as_bytes()).is_ok(),
            "unvalidated pattern {pattern:?}"
        );
        self.forget();
        let mut node = ROOT;
        let mut rest = false;
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        for segment in segments(pattern) {
            node = match segment {
                // Validation puts `>` last.
                Segment::Rest => {
                    rest = true;
                    break;
                }
                Segment::Literal(text) => self.child_or_insert(node, Edge::Literal(text)),
                Segment::Prefix("") => self.child_or_insert(node, Edge::Any),
                Segment::Prefix(prefix) => self.child_or_insert(node, Edge::Prefix(prefix)),
            };
            path.push(node);
        }
        let clients = self.nodes[node.index()].clients_mut(rest);
        let Err(at) = clients.binary_search(&client) else {
            self.path = path;
            return false;
        };
        clients.insert(at, client);
        self.len += 1;
        for &id in &path {
            let below = &mut self.nodes[id.index()].below;
            match below.binary_search_by_key(&client, |b| b.0) {
                Ok(i) => below[i].1 += 1,
                Err(i) => below.insert(i, (client, 1)),
            }
        }
        self.update_work(pattern, &path, path.len());
        self.path = path;
        let slot = client.0 as usize;
        if slot >= self.marks.len() {
            self.marks.resize(slot + 1, 0);
        }
        true
    }

    /// Removes `client`'s subscription to a validated pattern; returns false if the
    /// client had no such subscription. Frees the trie nodes it leaves unused.
    pub fn unsubscribe(&mut self, client: Slot, pattern: &str) -> bool {
        self.forget();
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        path.push(ROOT);
        let removed = self.unsubscribe_along(client, pattern, &mut path);
        if removed {
            for &id in &path[1..] {
                let below = &mut self.nodes[id.index()].below;
                if let Ok(i) = below.binary_search_by_key(&client, |b| b.0) {
                    below[i].1 -= 1;
                    if below[i].1 == 0 {
                        below.remove(i);
                    }
                }
            }
            let kept = self.prune(pattern, &path);
            self.update_work(pattern, &path[1..], kept);
        }
        self.path = path;
        removed
    }

    /// Appends to `out` every client with at least one pattern matching the validated
    /// `topic`, each client once. Allocates only if `out` (or, for a topic longer or a
    /// match larger than any before, the memo) must grow.
    ///
    /// The same topic as one of the two calls before (with no subscription changed in
    /// between) copies the remembered answer instead of walking the trie: a comparison
    /// of the topic's bytes, where the walk hashes and compares every level. Another
    /// topic costs the two comparisons and a copy of the answer into the memo.
    ///
    /// The remembered answer is taken inline (one subscriber, the common case, by a
    /// push rather than a call to copy); the walk is out of line.
    #[inline(always)]
    pub fn match_topic(&mut self, topic: &str, out: &mut Vec<Slot>) {
        debug_assert!(
            tickwire_wire::topic::validate_topic(topic.as_bytes()).is_ok(),
            "unvalidated topic {topic:?}"
        );
        let hit = if self.memo[0].hits(topic) {
            0
        } else if self.memo[1].hits(topic) {
            1
        } else {
            return self.walk_and_remember(topic, out);
        };
        // The other one is now the less recently used.
        self.next = hit ^ 1;
        let m = &self.memo[hit];
        if let [one] = m.clients[..] {
            out.push(one);
        } else {
            out.extend_from_slice(&m.clients);
        }
        #[cfg(test)]
        {
            self.last_work = 0;
        }
    }

    /// A subscription changed: no remembered answer holds.
    fn forget(&mut self) {
        for m in &mut self.memo {
            m.valid = false;
        }
    }

    /// [`SubscriptionIndex::match_topic`] for a topic other than the remembered one.
    #[inline(never)]
    fn walk_and_remember(&mut self, topic: &str, out: &mut Vec<Slot>) {
        let start = out.len();
        // A u64 bumped once per call does not wrap in the life of the process.
        self.generation += 1;
        let mut walk = Walk {
            nodes: &self.nodes,
            marks: &mut self.marks,
            generation: self.generation,
            out,
            #[cfg(test)]
            work: 0,
        };
        walk.root(topic);
        #[cfg(test)]
        {
            self.last_work = walk.work;
        }
        let m = &mut self.memo[self.next];
        self.next ^= 1;
        m.topic.clear();
        m.topic.push_str(topic);
        m.clients.clear();
        m.clients.extend_from_slice(&out[start..]);
        m.valid = true;
    }

    /// Number of (client, pattern) subscriptions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no subscription is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of trie nodes in use, including the root; 1 when empty.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    fn child_or_insert(&mut self, parent: NodeId, edge: Edge<'_>) -> NodeId {
        let node = &self.nodes[parent.index()];
        let existing = match edge {
            Edge::Literal(text) => node.literal.get(text).copied(),
            Edge::Any => node.any,
            Edge::Prefix(prefix) => node.prefix.get(prefix).copied(),
        };
        if let Some(child) = existing {
            return child;
        }
        let child = self.alloc();
        let node = &mut self.nodes[parent.index()];
        match edge {
            Edge::Literal(text) => {
                node.literal.insert(text.into(), child);
            }
            Edge::Any => node.any = Some(child),
            Edge::Prefix(prefix) => {
                node.prefix.insert(prefix.into(), child);
                match node
                    .prefix_lens
                    .binary_search_by_key(&prefix.len(), |p| p.len)
                {
                    Ok(at) => node.prefix_lens[at].keys += 1,
                    Err(at) => node.prefix_lens.insert(
                        at,
                        PrefixLen {
                            len: prefix.len(),
                            keys: 1,
                        },
                    ),
                }
            }
        }
        child
    }

    /// Finds the pattern's node, recording the path, and removes `client` there.
    fn unsubscribe_along(&mut self, client: Slot, pattern: &str, path: &mut Vec<NodeId>) -> bool {
        let mut node = ROOT;
        let mut rest = false;
        for level in pattern.split('/') {
            if level == ">" {
                rest = true;
                break;
            }
            let parent = &self.nodes[node.index()];
            let child = match Edge::of_level(level) {
                Edge::Literal(text) => parent.literal.get(text).copied(),
                Edge::Any => parent.any,
                Edge::Prefix(prefix) => parent.prefix.get(prefix).copied(),
            };
            let Some(child) = child else {
                return false;
            };
            node = child;
            path.push(node);
        }
        let clients = self.nodes[node.index()].clients_mut(rest);
        let Ok(at) = clients.binary_search(&client) else {
            return false;
        };
        clients.remove(at);
        self.len -= 1;
        true
    }

    /// The most `Walk::child` steps one `match_topic` walk can take, whatever the topic
    /// (the trie's worst case; a walk that finds the clients below a child all emitted
    /// already takes fewer). Patterns that branch at many levels (`a/*/a/*/...`, every
    /// mix) make it grow with their number even when they match nothing in the end;
    /// the router refuses a SUBSCRIBE that takes it past `max_match_work`.
    pub fn match_work(&self) -> u64 {
        self.nodes[ROOT.index()].work
    }

    /// Recomputes `work` up a pattern's path after a change: `path` holds the nodes
    /// below the root on `pattern`'s levels, of which the first `kept` still exist.
    fn update_work(&mut self, pattern: &str, path: &[NodeId], kept: usize) {
        // (parent, child, edge) down the path, then registered deepest first: each
        // child's contribution is final once its own children's are.
        let levels = pattern.split('/').take_while(|&l| l != ">");
        let mut parent = ROOT;
        let mut steps: Vec<(NodeId, NodeId, Edge<'_>)> = Vec::with_capacity(kept);
        for (&child, level) in path[..kept].iter().zip(levels) {
            steps.push((parent, child, Edge::of_level(level)));
            parent = child;
        }
        while let Some((parent, child, edge)) = steps.pop() {
            let c = &self.nodes[child.index()];
            let (old, new) = (c.contrib, c.work + 1);
            if old == new {
                continue;
            }
            self.nodes[child.index()].contrib = new;
            let p = &mut self.nodes[parent.index()];
            p.register(&edge, old, new);
            p.work = p.work_from_children();
        }
    }

    /// Frees the unused nodes at the end of `path` (the root first), deepest first, and
    /// withdraws their contributions to their parents' `work`. Returns how many of the
    /// nodes below the root are left.
    fn prune(&mut self, pattern: &str, path: &[NodeId]) -> usize {
        let mut kept = path.len() - 1;
        // Levels deepest first, without the `>` (which has no node of its own);
        // they pair with the path's edges deepest first.
        let levels = pattern.rsplit('/').skip_while(|&level| level == ">");
        for (edge, level) in path.windows(2).rev().zip(levels) {
            let (parent, child) = (edge[0], edge[1]);
            if !self.nodes[child.index()].is_unused() {
                break;
            }
            let old = self.nodes[child.index()].contrib;
            let node = &mut self.nodes[parent.index()];
            node.register(&Edge::of_level(level), old, 0);
            node.work = node.work_from_children();
            kept -= 1;
            match Edge::of_level(level) {
                Edge::Literal(text) => {
                    node.literal.remove(text);
                }
                Edge::Any => node.any = None,
                Edge::Prefix(prefix) => {
                    node.prefix.remove(prefix);
                    if let Ok(at) = node
                        .prefix_lens
                        .binary_search_by_key(&prefix.len(), |p| p.len)
                    {
                        node.prefix_lens[at].keys -= 1;
                        if node.prefix_lens[at].keys == 0 {
                            node.prefix_lens.remove(at);
                        }
                    }
                }
            }
            self.release(child);
        }
        kept
    }

    fn alloc(&mut self) -> NodeId {
        if let Some(id) = self.free.pop() {
            return id;
        }
        // A topic of 250 bytes has at most 125 levels, so exhausting u32 node ids
        // would need ~34 million distinct patterns' worth of memory first.
        #[allow(clippy::expect_used)]
        let id = NodeId(u32::try_from(self.nodes.len()).expect("fewer than 2^32 trie nodes"));
        self.nodes.push(Node::default());
        id
    }

    fn release(&mut self, id: NodeId) {
        // Drop the maps' storage so a burst of subscriptions does not pin memory.
        self.nodes[id.index()] = Node::default();
        self.free.push(id);
    }
}

/// State of one `match_topic` walk, split from the index so the arena is borrowed
/// shared while the marks are borrowed mutably.
struct Walk<'a> {
    nodes: &'a [Node],
    marks: &'a mut [u64],
    generation: u64,
    out: &'a mut Vec<Slot>,
    /// Children considered (tests count work, never time).
    #[cfg(test)]
    work: u64,
}

impl Walk<'_> {
    /// Visits the root. A system topic (`tickwire_wire::topic::SYSTEM_LEVEL`) takes
    /// only the literal child of its first level: no pattern with a wildcard first
    /// level (`>`, `*`, `pre*`) matches it.
    fn root(&mut self, topic: &str) {
        if !is_system_topic(topic) {
            return self.node(ROOT, topic);
        }
        let (level, tail) = match topic.split_once('/') {
            Some((level, tail)) => (level, Some(tail)),
            None => (topic, None),
        };
        if let Some(&child) = self.nodes[ROOT.index()].literal.get(level) {
            self.child(child, tail);
        }
    }

    /// Visits `node` with `topic` holding the remaining (at least one) levels.
    fn node(&mut self, id: NodeId, topic: &str) {
        let node = &self.nodes[id.index()];
        // `>` below this node takes the one or more levels left.
        self.emit(&node.rest);
        let (level, tail) = match topic.split_once('/') {
            Some((level, tail)) => (level, Some(tail)),
            None => (topic, None),
        };
        if !node.literal.is_empty() {
            if let Some(&child) = node.literal.get(level) {
                self.child(child, tail);
            }
        }
        if let Some(child) = node.any {
            self.child(child, tail);
        }
        for prefix_len in &node.prefix_lens {
            if prefix_len.len > level.len() {
                break;
            }
            // A cut inside a character cannot equal a (valid UTF-8) prefix key.
            if let Some(&child) = level.get(..prefix_len.len).and_then(|p| node.prefix.get(p)) {
                self.child(child, tail);
            }
        }
    }

    /// Continues into `child`, which consumed one level, unless every client below it
    /// was emitted already.
    fn child(&mut self, child: NodeId, tail: Option<&str>) {
        #[cfg(test)]
        {
            self.work += 1;
        }
        let below = &self.nodes[child.index()].below;
        if below.len() <= SKIP_CHECK_MAX
            && below
                .iter()
                .all(|&(client, _)| self.marks[client.0 as usize] == self.generation)
        {
            return;
        }
        match tail {
            Some(tail) => self.node(child, tail),
            None => self.emit(&self.nodes[child.index()].exact),
        }
    }

    fn emit(&mut self, clients: &[Slot]) {
        for &client in clients {
            // `subscribe` sized `marks` past every subscribed client id.
            let mark = &mut self.marks[client.0 as usize];
            if *mark != self.generation {
                *mark = self.generation;
                self.out.push(client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashSet};
    use tickwire_wire::topic::{pattern_matches, validate_pattern, validate_topic};

    fn matches(index: &mut SubscriptionIndex, topic: &str) -> Vec<u32> {
        let mut out = Vec::new();
        index.match_topic(topic, &mut out);
        let mut ids: Vec<u32> = out.iter().map(|c| c.0).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn empty_index_matches_nothing() {
        let mut index = SubscriptionIndex::new();
        assert!(index.is_empty());
        assert_eq!(index.len(), 0);
        assert_eq!(index.node_count(), 1);
        assert_eq!(matches(&mut index, "md/NASDAQ/AAPL"), Vec::<u32>::new());
        assert_eq!(SubscriptionIndex::default().node_count(), 1);
    }

    #[test]
    fn matching_table() {
        // One client per pattern, client id = position in this list.
        let patterns = [
            "md/NASDAQ/AAPL",    // 0
            "md/NAS*/AAPL",      // 1
            "md/*/AAPL",         // 2
            "md/>",              // 3
            ">",                 // 4
            "md/NASDAQ",         // 5
            "md/N*/>",           // 6
            "md/NASDAQ/A*",      // 7
            "md/NYSE/*",         // 8
            "*",                 // 9
            "md/NASDAQX/*",      // 10
            "日*/x",             // 11
            "_tickwire/>",       // 12
            "_tick*/>",          // 13
            "*/probe/>",         // 14
            "_tickwire/probe/1", // 15
        ];
        let mut index = SubscriptionIndex::new();
        for (id, pattern) in patterns.iter().enumerate() {
            assert!(index.subscribe(Slot(id as u32), pattern));
        }
        let cases: &[(&str, &[u32])] = &[
            ("md/NASDAQ/AAPL", &[0, 1, 2, 3, 4, 6, 7]),
            ("md/NASDAQ/MSFT", &[3, 4, 6]),
            ("md/NAS/AAPL", &[1, 2, 3, 4, 6]),
            ("md/NA/AAPL", &[2, 3, 4, 6]),
            ("md/NASDAQ", &[3, 4, 5]),
            ("md/NASDAQ/A", &[3, 4, 6, 7]),
            ("md/NYSE/IBM", &[3, 4, 6, 8]),
            ("md/NYSE/IBM/x", &[3, 4, 6]),
            ("md", &[4, 9]),
            ("fx/EURUSD", &[4]),
            ("md/NASDAQX/Q", &[3, 4, 6, 10]),
            ("日本/x", &[4, 11]),
            ("日/x", &[4, 11]),
            // System topics: only patterns whose first level is `_tickwire` itself.
            ("_tickwire/probe/1", &[12, 15]),
            ("_tickwire/probe/2", &[12]),
            ("_tickwire", &[]),
            ("_tickwirex/probe/1", &[4, 13, 14]),
        ];
        for &(topic, expected) in cases {
            for (id, pattern) in patterns.iter().enumerate() {
                assert_eq!(
                    pattern_matches(pattern, topic),
                    expected.contains(&(id as u32)),
                    "table disagrees with reference: {pattern:?} vs {topic:?}"
                );
            }
            assert_eq!(matches(&mut index, topic), expected, "topic {topic:?}");
        }
    }

    #[test]
    fn overlapping_patterns_of_one_client_deliver_once() {
        let mut index = SubscriptionIndex::new();
        let client = Slot(7);
        for pattern in [
            "md/NASDAQ/AAPL",
            "md/NAS*/AAPL",
            "md/*/AAPL",
            "md/>",
            ">",
            "md/NASDAQ/A*",
        ] {
            assert!(index.subscribe(client, pattern));
        }
        assert!(index.subscribe(Slot(3), "md/>"));
        let mut out = vec![Slot(99)];
        index.match_topic("md/NASDAQ/AAPL", &mut out);
        // Appends, and each client once.
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], Slot(99));
        let rest: BTreeSet<_> = out[1..].iter().copied().collect();
        assert_eq!(rest, BTreeSet::from([Slot(3), client]));
        // And again: the marks of the previous call do not hide anyone.
        out.clear();
        index.match_topic("md/NASDAQ/AAPL", &mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn subscribe_is_idempotent_and_unsubscribe_prunes() {
        let mut index = SubscriptionIndex::new();
        let a = Slot(0);
        let b = Slot(1);
        assert!(index.subscribe(a, "md/NAS*/AAPL"));
        assert!(!index.subscribe(a, "md/NAS*/AAPL"));
        assert!(index.subscribe(b, "md/NAS*/AAPL"));
        assert!(index.subscribe(a, "md/NAS*/>"));
        assert_eq!(index.len(), 3);
        // root, md, NAS*, AAPL
        assert_eq!(index.node_count(), 4);

        assert!(!index.unsubscribe(a, "md/NAS*/MSFT"));
        assert!(!index.unsubscribe(a, "md/NASDAQ/AAPL"));
        assert!(!index.unsubscribe(Slot(2), "md/NAS*/AAPL"));
        assert!(!index.unsubscribe(a, "md/>"));
        assert!(index.unsubscribe(a, "md/NAS*/AAPL"));
        assert!(!index.unsubscribe(a, "md/NAS*/AAPL"));
        assert_eq!(index.node_count(), 4);
        assert!(index.unsubscribe(b, "md/NAS*/AAPL"));
        assert_eq!(index.node_count(), 3); // AAPL gone; NAS* still holds a's `>`
        assert_eq!(matches(&mut index, "md/NASDAQ/AAPL"), [0]);
        assert!(index.unsubscribe(a, "md/NAS*/>"));
        assert_eq!(index.node_count(), 1);
        assert!(index.is_empty());
        assert_eq!(matches(&mut index, "md/NASDAQ/AAPL"), Vec::<u32>::new());

        // Freed nodes are reused.
        assert!(index.subscribe(a, "x/y*/*/z"));
        assert_eq!(index.node_count(), 5);
        assert_eq!(matches(&mut index, "x/yes/q/z"), [0]);
        assert!(index.unsubscribe(a, "x/y*/*/z"));
        assert_eq!(index.node_count(), 1);
    }

    #[test]
    fn prefixes_of_several_lengths_share_a_node() {
        let mut index = SubscriptionIndex::new();
        for (id, pattern) in ["A*", "AA*", "AAP*", "AAPL*", "AB*", "B*", "AAPLX*"]
            .iter()
            .enumerate()
        {
            index.subscribe(Slot(id as u32), pattern);
        }
        assert_eq!(matches(&mut index, "AAPL"), [0, 1, 2, 3]);
        assert_eq!(matches(&mut index, "A"), [0]);
        assert_eq!(matches(&mut index, "ABC"), [0, 4]);
        assert_eq!(matches(&mut index, "AAPLXY"), [0, 1, 2, 3, 6]);
        for (id, pattern) in ["A*", "AA*", "AAP*", "AAPL*", "AB*", "B*", "AAPLX*"]
            .iter()
            .enumerate()
        {
            assert!(index.unsubscribe(Slot(id as u32), pattern));
        }
        assert_eq!(index.node_count(), 1);
        assert!(index.nodes[ROOT.index()].prefix_lens.is_empty());
    }

    #[test]
    fn prefix_probe_skips_cuts_inside_a_character() {
        let mut index = SubscriptionIndex::new();
        index.subscribe(Slot(0), "a*"); // length 1: would cut "日" mid-character
        index.subscribe(Slot(1), "日*");
        assert_eq!(matches(&mut index, "日本"), [1]);
    }

    #[test]
    fn match_topic_does_not_allocate_with_capacity() {
        let mut index = SubscriptionIndex::new();
        for id in 0..50 {
            index.subscribe(Slot(id), "md/>");
        }
        let mut out = Vec::with_capacity(64);
        let before = out.as_ptr();
        for _ in 0..10 {
            out.clear();
            index.match_topic("md/x", &mut out);
        }
        assert_eq!(out.len(), 50);
        assert_eq!(out.as_ptr(), before);
    }

    #[test]
    fn a_repeated_topic_is_answered_from_the_memo_until_a_subscription_changes() {
        let mut index = SubscriptionIndex::new();
        index.subscribe(Slot(1), "md/*/q");
        assert_eq!(matches(&mut index, "md/a/q"), [1]);
        assert!(index.last_work > 0);
        // Again: no walk, the same answer.
        assert_eq!(matches(&mut index, "md/a/q"), [1]);
        assert_eq!(index.last_work, 0);
        // Another topic walks, and is remembered beside the first: alternating
        // between the two (a request and its reply) walks no more.
        assert_eq!(matches(&mut index, "md/b/t"), Vec::<u32>::new());
        assert!(index.last_work > 0);
        for _ in 0..3 {
            assert_eq!(matches(&mut index, "md/a/q"), [1]);
            assert_eq!(index.last_work, 0);
            assert_eq!(matches(&mut index, "md/b/t"), Vec::<u32>::new());
            assert_eq!(index.last_work, 0);
        }
        // A third topic walks and takes the place of the less recently used one.
        assert_eq!(matches(&mut index, "md/a/q"), [1]);
        assert_eq!(matches(&mut index, "md/b/t"), Vec::<u32>::new());
        assert_eq!(matches(&mut index, "md/a/q"), [1]);
        assert_eq!(matches(&mut index, "md/c/q"), [1]);
        assert!(index.last_work > 0);
        assert_eq!(matches(&mut index, "md/a/q"), [1]);
        assert_eq!(index.last_work, 0, "md/a/q was used last: kept");
        assert_eq!(matches(&mut index, "md/b/t"), Vec::<u32>::new());
        assert!(index.last_work > 0, "md/b/t was replaced by md/c/q");
        // Every change forgets: subscribe, then unsubscribe, an idempotent one too.
        index.subscribe(Slot(2), "md/>");
        assert_eq!(matches(&mut index, "md/b/t"), [2]);
        assert_eq!(matches(&mut index, "md/a/q"), [1, 2]);
        index.subscribe(Slot(2), "md/>");
        assert_eq!(matches(&mut index, "md/a/q"), [1, 2]);
        index.unsubscribe(Slot(1), "md/*/q");
        assert_eq!(matches(&mut index, "md/a/q"), [2]);
        index.unsubscribe(Slot(2), "md/>");
        assert_eq!(matches(&mut index, "md/a/q"), Vec::<u32>::new());
        // A topic that is a prefix of the remembered one is not it.
        index.subscribe(Slot(3), "md/a");
        assert_eq!(matches(&mut index, "md/a/q"), Vec::<u32>::new());
        assert_eq!(matches(&mut index, "md/a"), [3]);
    }

    #[test]
    fn many_matching_patterns_of_one_client_cost_one_delivery_not_one_walk_each() {
        let mut index = SubscriptionIndex::new();
        let attacker = Slot(5);
        let level = "a".repeat(50);
        let topic = format!("{level}/{level}");
        // 2,500 patterns, every one matching the topic.
        for i in 1..=50 {
            for j in 1..=50 {
                let pattern = format!("{}*/{}*", "a".repeat(i), "a".repeat(j));
                assert!(index.subscribe(attacker, &pattern));
            }
        }
        index.subscribe(attacker, "*/*");
        index.subscribe(attacker, ">");
        // Healthy clients, one sharing a node with the attacker.
        index.subscribe(Slot(1), "a*/a*");
        index.subscribe(Slot(2), &topic);
        index.subscribe(Slot(3), "b/>");
        assert_eq!(matches(&mut index, &topic), [1, 2, 5]);
        // Children considered: about the prefix probes of the two levels (50 each)
        // plus the healthy clients' paths, not the attacker's 2,502 nodes.
        let work = index.last_work;
        assert!(work < 200, "work {work}");
        assert_eq!(matches(&mut index, "b/x"), [3, 5]);
        // Unsubscribing all but one keeps the summaries right.
        for i in 1..=50 {
            for j in 1..=50 {
                let pattern = format!("{}*/{}*", "a".repeat(i), "a".repeat(j));
                assert!(index.unsubscribe(attacker, &pattern));
            }
        }
        assert!(index.unsubscribe(attacker, ">"));
        assert_eq!(matches(&mut index, &topic), [1, 2, 5]);
        assert!(index.unsubscribe(attacker, "*/*"));
        assert_eq!(matches(&mut index, &topic), [1, 2]);
        assert!(index
            .nodes
            .iter()
            .all(|n| n.below.iter().all(|b| b.0 != attacker)));
    }

    const PATTERN_LEVELS: &[&str] = &[
        "a",
        "b",
        "ab",
        "abc",
        "md",
        "NASDAQ",
        "*",
        "a*",
        "ab*",
        "N*",
        "NAS*",
        "abc*",
        "_tickwire",
        "_tick*",
        "_tickwire*",
        "_tickwirex",
    ];
    const TOPIC_LEVELS: &[&str] = &[
        "a",
        "b",
        "ab",
        "abc",
        "md",
        "NASDAQ",
        "_tickwire",
        "_tickwirex",
    ];

    fn pattern() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(prop::sample::select(PATTERN_LEVELS), 0..4),
            any::<bool>(),
        )
            .prop_map(|(levels, rest)| {
                let mut pattern = levels.join("/");
                if rest || pattern.is_empty() {
                    pattern.push_str(if pattern.is_empty() { ">" } else { "/>" });
                }
                pattern
            })
    }

    fn topic() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(TOPIC_LEVELS), 1..5)
            .prop_map(|levels| levels.join("/"))
    }

    /// Clients matching `topic` by the naive reference over `subscriptions`.
    fn reference<'a>(
        subscriptions: impl IntoIterator<Item = &'a (u32, String)>,
        topic: &str,
    ) -> Vec<u32> {
        let set: BTreeSet<u32> = subscriptions
            .into_iter()
            .filter(|(_, pattern)| pattern_matches(pattern, topic))
            .map(|&(client, _)| client)
            .collect();
        set.into_iter().collect()
    }

    /// Checks `match_topic` against the reference, including no duplicates.
    fn check_topic(
        index: &mut SubscriptionIndex,
        model: &HashSet<(u32, String)>,
        topic: &str,
    ) -> Result<(), TestCaseError> {
        let mut out = Vec::new();
        index.match_topic(topic, &mut out);
        prop_assert!(
            index.last_work <= index.match_work(),
            "walk of {:?} took {} steps, bound {}",
            topic,
            index.last_work,
            index.match_work()
        );
        let distinct: HashSet<_> = out.iter().collect();
        prop_assert_eq!(
            distinct.len(),
            out.len(),
            "duplicates for {:?}: {:?}",
            topic,
            out
        );
        let mut got: Vec<u32> = out.iter().map(|c| c.0).collect();
        got.sort_unstable();
        prop_assert_eq!(got, reference(model, topic), "topic {:?}", topic);
        Ok(())
    }

    /// Nodes the trie must have for `model`: the root plus one per distinct proper
    /// path of non-`>` levels.
    fn expected_nodes(model: &HashSet<(u32, String)>) -> usize {
        let mut paths = HashSet::new();
        for (_, pattern) in model {
            let levels: Vec<&str> = pattern.split('/').filter(|&level| level != ">").collect();
            for depth in 1..=levels.len() {
                paths.insert(levels[..depth].join("/"));
            }
        }
        1 + paths.len()
    }

    /// Every mix of `a` and `*` over k levels, then a last level `z`: a topic
    /// `a/.../a/b` walks every one of those prefixes and matches nothing. The bound
    /// counts that walk; literal patterns keep it at their depth.
    #[test]
    fn the_walk_bound_counts_patterns_that_branch_at_every_level() {
        let mut index = SubscriptionIndex::new();
        for p in [
            "md/NASDAQ/AAPL/quote",
            "md/NYSE/IBM/quote",
            "md/NASDAQ/MSFT/trade",
        ] {
            index.subscribe(Slot(1), p);
        }
        assert_eq!(index.match_work(), 4, "one literal path of four levels");
        index.subscribe(Slot(2), "md/*/AAPL/quote");
        assert_eq!(
            index.match_work(),
            7,
            "the * branch adds its own three levels"
        );
        let k = 10;
        let mut big = SubscriptionIndex::new();
        for m in 0u32..(1 << k) {
            let mut levels: Vec<&str> = (0..k)
                .map(|i| if m >> i & 1 == 1 { "*" } else { "a" })
                .collect();
            levels.push("z");
            big.subscribe(Slot(m % 7), &levels.join("/"));
        }
        let topic = format!("{}/b", vec!["a"; k].join("/"));
        let mut out = Vec::new();
        big.match_topic(&topic, &mut out);
        assert!(out.is_empty());
        // 2 + 4 + ... + 2^k prefixes, and the last level's lookups.
        assert!(big.last_work >= (1 << (k + 1)) - 2, "{}", big.last_work);
        assert!(big.last_work <= big.match_work());
        assert_eq!(big.match_work(), (1 << (k + 1)) - 2 + (1 << k));
        // Gone with the patterns.
        for m in 0u32..(1 << k) {
            let mut levels: Vec<&str> = (0..k)
                .map(|i| if m >> i & 1 == 1 { "*" } else { "a" })
                .collect();
            levels.push("z");
            assert!(big.unsubscribe(Slot(m % 7), &levels.join("/")));
        }
        assert_eq!(big.match_work(), 0);
    }

    proptest! {
        #[test]
        fn matches_agree_with_reference(
            subscriptions in prop::collection::vec((0u32..8, pattern()), 0..40),
            topics in prop::collection::vec(topic(), 1..10),
        ) {
            let mut index = SubscriptionIndex::new();
            let mut model = HashSet::new();
            for (client, pattern) in &subscriptions {
                prop_assert!(validate_pattern(pattern.as_bytes()).is_ok(), "{}", pattern);
                let added = index.subscribe(Slot(*client), pattern);
                prop_assert_eq!(added, model.insert((*client, pattern.clone())));
            }
            prop_assert_eq!(index.len(), model.len());
            for topic in &topics {
                prop_assert!(validate_topic(topic.as_bytes()).is_ok());
                check_topic(&mut index, &model, topic)?;
            }
        }

        #[test]
        fn subscribe_unsubscribe_agrees_with_model(
            ops in prop::collection::vec((any::<bool>(), 0u32..4, pattern()), 0..60),
            topics in prop::collection::vec(topic(), 3),
        ) {
            let mut index = SubscriptionIndex::new();
            let mut model: HashSet<(u32, String)> = HashSet::new();
            for (subscribe, client, pattern) in &ops {
                let key = (*client, pattern.clone());
                if *subscribe {
                    prop_assert_eq!(index.subscribe(Slot(*client), pattern), model.insert(key));
                } else {
                    prop_assert_eq!(index.unsubscribe(Slot(*client), pattern), model.remove(&key));
                }
                prop_assert_eq!(index.len(), model.len());
                prop_assert_eq!(index.is_empty(), model.is_empty());
                prop_assert_eq!(index.node_count(), expected_nodes(&model));
                // The walk bound kept up to date equals one computed from scratch.
                let mut fresh = SubscriptionIndex::new();
                for (c, p) in &model {
                    fresh.subscribe(Slot(*c), p);
                }
                prop_assert_eq!(index.match_work(), fresh.match_work());
                // Each topic twice in a row: the second answer comes from the memo, and
                // the op above must have made the first one walk.
                for topic in &topics {
                    check_topic(&mut index, &model, topic)?;
                    check_topic(&mut index, &model, topic)?;
                }
            }
            for (client, pattern) in model.drain() {
                prop_assert!(index.unsubscribe(Slot(client), &pattern));
            }
            prop_assert_eq!(index.len(), 0);
            prop_assert_eq!(index.node_count(), 1);
            let root = &index.nodes[ROOT.index()];
            prop_assert!(root.is_unused() && root.prefix_lens.is_empty());
            prop_assert_eq!(index.match_work(), 0);
            prop_assert!(root.lit.is_empty() && root.any_contrib == 0 && root.prefix_sum == 0);
        }
    }
}
