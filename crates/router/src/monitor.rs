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

use crate::core::{ClientStats, RouterStats};

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
    /// Queues, publishers and totals of guaranteed messaging (null when it is off).
    pub guaranteed: serde_json::Value,
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
    /// Its subscription patterns, sorted.
    pub patterns: Vec<String>,
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

    #[test]
    fn the_loop_hands_over_the_core_snapshot_of_its_tick() {
        let core = Core::new(Config::default(), MonoNanos(1), UtcNanos(1));
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
