//! Publication of the router's state to a monitoring thread (the HTTP endpoint of
//! `tickwire router --http`), without a lock on the event-loop thread.
//!
//! The event loop is the single writer of every counter ([`crate::core::Core`]). At
//! each timer tick (at most every 10 ms while busy, 50 ms while idle) it stores a
//! heartbeat and, when the monitoring side asked, copies its state out
//! ([`crate::core::Core::snapshot`]) into a [`Snapshot`], through the lock-free
//! channel of [`tickwire_rt::snapshot`] (shared with the feed handler and the FIX
//! engine).

use serde::Serialize;
use tickwire_rt::{snapshot, MonoNanos};

use std::sync::{Arc, OnceLock};

use crate::core::{ClientStats, RouterStats};
use crate::gm::GmView;

/// The router's state at one timer tick, owned by the monitoring side.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// When it was taken (the tick's time).
    #[serde(skip)]
    pub taken: MonoNanos,
    /// Identity, configuration summary and totals.
    pub router: RouterStats,
    /// Configured connection limit.
    pub max_clients: usize,
    /// Configured per-client egress limit (bytes).
    pub egress_limit: usize,
    /// Shared subscription groups that have members.
    pub shared_groups: usize,
    /// Every connected client, in slot order.
    pub clients: Vec<ClientView>,
    /// Queues, publishers and totals of guaranteed messaging (null when it is off),
    /// copied as plain values: the JSON is built on the monitoring side, once
    /// ([`Snapshot::guaranteed_json`]).
    pub guaranteed: Option<GmView>,
    /// The last-value cache's counters (null without a cache), as `tickwire stats`
    /// shows them (new-user pass: they were there only).
    pub cache: Option<crate::cache::CacheStats>,
    /// The last-value cache's configuration (null without a cache): its patterns and
    /// limits, which `/varz` and `/metrics` show beside its counters (new-user pass:
    /// only `tickwire stats` showed them).
    pub cache_config: Option<CacheConfig>,
    /// The spool's usage (files, syncs, failed batches; null when guaranteed messaging
    /// is off), the stats document's `guaranteed.spool`.
    #[serde(skip)]
    spool: serde_json::Value,
    /// The multicast streams, as the stats document's `multicast` array (empty without
    /// streams).
    pub multicast: serde_json::Value,
    #[serde(skip)]
    guaranteed_json: OnceLock<serde_json::Value>,
}

impl Snapshot {
    /// A snapshot of these parts (`taken`: the tick's time).
    pub fn new(
        taken: MonoNanos,
        router: RouterStats,
        max_clients: usize,
        egress_limit: usize,
        shared_groups: usize,
        clients: Vec<ClientView>,
        guaranteed: Option<GmView>,
    ) -> Snapshot {
        Snapshot {
            taken,
            router,
            max_clients,
            egress_limit,
            shared_groups,
            clients,
            guaranteed,
            cache: None,
            cache_config: None,
            spool: serde_json::Value::Null,
            multicast: serde_json::Value::Array(Vec::new()),
            guaranteed_json: OnceLock::new(),
        }
    }

    /// With the last-value cache's counters and configuration.
    pub fn with_cache(
        mut self,
        cache: Option<(crate::cache::CacheStats, CacheConfig)>,
    ) -> Snapshot {
        (self.cache, self.cache_config) = cache.unzip();
        self
    }

    /// With the multicast streams (the stats document's `multicast`).
    pub fn with_multicast(mut self, multicast: serde_json::Value) -> Snapshot {
        self.multicast = multicast;
        self
    }

    /// With the spool's usage (the stats document's `guaranteed.spool`).
    pub fn with_spool(mut self, spool: serde_json::Value) -> Snapshot {
        self.spool = spool;
        self
    }

    /// [`Snapshot::guaranteed`] as the stats document's JSON (null when off), built at
    /// the first call.
    pub fn guaranteed_json(&self) -> &serde_json::Value {
        self.guaranteed_json.get_or_init(|| {
            let mut v = serde_json::to_value(&self.guaranteed).unwrap_or(serde_json::Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.insert("spool".into(), self.spool.clone());
            }
            v
        })
    }
}

/// The last-value cache's configuration, as the stats document's `cache` object
/// gives it beside the counters.
#[derive(Debug, Clone, Serialize)]
pub struct CacheConfig {
    /// Its patterns (shared with the cache: a snapshot copies a reference count).
    pub patterns: Arc<[String]>,
    /// Messages kept per topic (`cache_depth`).
    pub depth: usize,
    /// Most topics held (`cache_max_topics`).
    pub max_topics: usize,
    /// Most bytes held (`cache_max_bytes`).
    pub max_bytes: usize,
}

/// One client as the monitoring endpoint shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ClientView {
    /// Counters and identity (as in `tickwire stats`).
    #[serde(flatten)]
    pub stats: ClientStats,
    /// The client is a slow consumer right now: its egress buffer filled and the
    /// router is discarding its oldest messages until it catches up.
    pub slow: bool,
    /// Its subscription patterns, in no particular order (shared with the loop's own
    /// set: copying them costs the loop a reference count each, not a string; the
    /// monitoring side sorts them, [`ClientView::sorted_patterns`]; serialized sorted).
    #[serde(serialize_with = "serialize_sorted")]
    pub patterns: Arc<[Arc<str>]>,
}

fn serialize_sorted<S: serde::Serializer>(p: &Arc<[Arc<str>]>, s: S) -> Result<S::Ok, S::Error> {
    let mut v: Vec<&str> = p.iter().map(|p| &**p).collect();
    v.sort_unstable();
    s.collect_seq(v)
}

impl ClientView {
    /// [`ClientView::patterns`], sorted.
    pub fn sorted_patterns(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.patterns.iter().map(|p| &**p).collect();
        v.sort_unstable();
        v
    }
}

/// The event loop's end (a [`tickwire_rt::snapshot::Publisher`] of [`Snapshot`]s).
pub type Publisher = snapshot::Publisher<Snapshot>;
/// The monitoring thread's end.
pub type Reader = snapshot::Reader<Snapshot>;

/// A connected pair (see [`tickwire_rt::snapshot::channel`]).
pub fn channel(now: MonoNanos) -> (Publisher, Reader) {
    snapshot::channel(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::core::Core;
    use std::time::Duration;
    use tickwire_rt::UtcNanos;

    /// Patterns leave the loop in its set's order and are shown sorted.
    #[test]
    fn patterns_are_serialized_sorted() {
        let p: Arc<[Arc<str>]> = ["md/b", "a/>", "md/a"].into_iter().map(Arc::from).collect();
        let v = serialize_sorted(&p, serde_json::value::Serializer).unwrap();
        assert_eq!(v, serde_json::json!(["a/>", "md/a", "md/b"]));
    }

    #[test]
    fn the_loop_hands_over_the_core_snapshot_of_its_tick() {
        let mut core = Core::new(Config::default(), MonoNanos(1), UtcNanos(1));
        let (publisher, reader) = channel(MonoNanos(1));
        std::thread::scope(|s| {
            let r = s.spawn(move || reader.fetch(Duration::from_secs(10)));
            while !publisher.is_wanted() {
                std::thread::yield_now();
            }
            publisher.tick(MonoNanos(7), || core.snapshot(MonoNanos(7)));
            let snap = r.join().unwrap().expect("a snapshot");
            assert_eq!(snap.taken, MonoNanos(7));
            assert!(snap.clients.is_empty());
        });
    }
}
