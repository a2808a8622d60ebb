//! Publication of the router's state to a monitoring thread (the HTTP endpoint of
//! `tickwire router --http`), without a lock on the event-loop thread.
//!
//! The event loop is the single writer of every counter ([`crate::core::Core`]). It
//! shares two things with the monitoring side:
//! - a heartbeat: the time of its last timer tick, stored with a relaxed atomic store
//!   every tick (at most every 10 ms while busy, 50 ms while idle), so `/healthz` can
//!   tell a live loop from a stuck one without asking it anything;
//! - a [`Snapshot`] on request: the monitoring side raises a flag (an atomic) and waits
//!   on a bounded channel; at its next timer tick the loop sees the flag, copies its
//!   state out ([`crate::core::Core::snapshot`]) and hands the copy over with a
//!   non-blocking `try_send`. The copy is made at most once per tick and only when
//!   someone asked: nothing happens per message, and with nobody polling nothing
//!   happens at all beyond the heartbeat store.
//!
//! The channel is std's bounded channel (lock-free on the sending side); a reader that
//! gave up waiting leaves at most one stale snapshot behind, which the next request
//! drops before it asks again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tickwire_rt::MonoNanos;

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

struct Shared {
    wanted: AtomicBool,
    /// Nanoseconds on the monotonic clock of the loop's last timer tick; 0 before the first.
    heartbeat: AtomicU64,
}

/// The event loop's end: see [`Publisher::tick`].
pub struct Publisher {
    shared: Arc<Shared>,
    tx: SyncSender<Box<Snapshot>>,
}

/// The monitoring thread's end.
pub struct Reader {
    shared: Arc<Shared>,
    rx: Receiver<Box<Snapshot>>,
}

/// A connected pair; the heartbeat starts at `now` (a loop that never ticks is then
/// seen as stuck, not as starting forever).
pub fn channel(now: MonoNanos) -> (Publisher, Reader) {
    let shared = Arc::new(Shared {
        wanted: AtomicBool::new(false),
        heartbeat: AtomicU64::new(now.0),
    });
    let (tx, rx) = sync_channel(1);
    (
        Publisher {
            shared: shared.clone(),
            tx,
        },
        Reader { shared, rx },
    )
}

impl Publisher {
    /// Called by the event loop at each timer tick: stores the heartbeat and, when the
    /// reader asked, hands it `make()`. Never blocks.
    pub fn tick(&self, now: MonoNanos, make: impl FnOnce() -> Snapshot) {
        self.shared.heartbeat.store(now.0, Ordering::Relaxed);
        if self.shared.wanted.load(Ordering::Relaxed) {
            self.shared.wanted.store(false, Ordering::Relaxed);
            // Full (the reader has not taken the last one) or disconnected: drop it.
            let _ = self.tx.try_send(Box::new(make()));
        }
    }
}

impl Reader {
    /// Asks the loop for a snapshot and waits up to `timeout` for it (the loop answers
    /// at its next timer tick: within 50 ms unless it is stuck). None on timeout.
    pub fn fetch(&self, timeout: Duration) -> Option<Box<Snapshot>> {
        // A snapshot left by a request that timed out is stale: drop it.
        while let Ok(_stale) = self.rx.try_recv() {}
        self.shared.wanted.store(true, Ordering::Relaxed);
        self.rx.recv_timeout(timeout).ok()
    }

    /// The loop's last timer tick (None before the first).
    pub fn heartbeat(&self) -> Option<MonoNanos> {
        match self.shared.heartbeat.load(Ordering::Relaxed) {
            0 => None,
            t => Some(MonoNanos(t)),
        }
    }

    /// True once the loop has stopped (its end is dropped).
    pub fn loop_gone(&self) -> bool {
        matches!(self.rx.try_recv(), Err(TryRecvError::Disconnected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::core::Core;
    use tickwire_rt::UtcNanos;

    #[test]
    fn a_snapshot_is_made_only_when_asked_and_handed_over_at_the_next_tick() {
        let core = Core::new(Config::default(), MonoNanos(1), UtcNanos(1));
        let (publisher, reader) = channel(MonoNanos(1));
        let mut made = 0;
        publisher.tick(MonoNanos(5), || {
            made += 1;
            core.snapshot(MonoNanos(5))
        });
        assert_eq!(made, 0, "nobody asked");
        assert_eq!(reader.heartbeat(), Some(MonoNanos(5)));
        std::thread::scope(|s| {
            let r = s.spawn(move || reader.fetch(Duration::from_secs(10)));
            while !publisher.shared.wanted.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            publisher.tick(MonoNanos(7), || {
                made += 1;
                core.snapshot(MonoNanos(7))
            });
            let snap = r.join().unwrap().expect("a snapshot");
            assert_eq!(snap.taken, MonoNanos(7));
        });
        assert_eq!(made, 1);
        // Nobody waits: a tick makes nothing.
        publisher.tick(MonoNanos(9), || unreachable!());
    }
}
