//! Publication of a hot thread's state to a monitoring thread, without a lock on the
//! hot thread (the router, the feed handler and the FIX engine use it for `--http`).
//!
//! The hot thread is the single writer of its counters. It shares two things with the
//! monitoring side:
//! - a heartbeat: the time of its last tick, stored with a relaxed atomic store each
//!   tick, so a health check can tell a live loop from a stuck one without asking it
//!   anything;
//! - a snapshot `T` on request: the monitoring side raises a flag (an atomic) and waits
//!   on a bounded channel; at its next tick the loop sees the flag, copies its state
//!   out and hands the copy over with a non-blocking `try_send`. The copy is made at
//!   most once per tick and only when someone asked: nothing happens per message, and
//!   with nobody polling nothing happens at all beyond the heartbeat store.
//!
//! The channel is std's bounded channel (lock-free on the sending side); a reader that
//! gave up waiting leaves at most one stale snapshot behind, which the next request
//! drops before it asks again.
//!
//! ```
//! use std::time::Duration;
//! use tickwire_rt::{snapshot, MonoNanos};
//!
//! let (publisher, reader) = snapshot::channel::<u64>(MonoNanos(1));
//! // The hot thread, at each of its ticks (here: nobody asked, nothing is made):
//! publisher.tick(MonoNanos(2), || unreachable!());
//! assert_eq!(reader.heartbeat(), Some(MonoNanos(2)));
//! assert!(reader.fetch(Duration::from_millis(1)).is_none(), "no tick since the ask");
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use crate::MonoNanos;

struct Shared {
    wanted: AtomicBool,
    /// Nanoseconds on the monotonic clock of the loop's last tick; 0 before the first.
    heartbeat: AtomicU64,
    /// Nanoseconds the last snapshot took to make ([`Publisher::tick_timed`]).
    cost: AtomicU64,
    /// The [`Publisher`] was dropped: the loop has stopped.
    gone: AtomicBool,
}

/// The hot thread's end: see [`Publisher::tick`].
pub struct Publisher<T> {
    shared: Arc<Shared>,
    tx: SyncSender<Box<T>>,
}

/// The monitoring thread's end.
pub struct Reader<T> {
    shared: Arc<Shared>,
    rx: Receiver<Box<T>>,
}

/// A connected pair; the heartbeat starts at `now` (a loop that never ticks is then
/// seen as stuck, not as starting forever).
pub fn channel<T>(now: MonoNanos) -> (Publisher<T>, Reader<T>) {
    let shared = Arc::new(Shared {
        wanted: AtomicBool::new(false),
        heartbeat: AtomicU64::new(now.0),
        cost: AtomicU64::new(0),
        gone: AtomicBool::new(false),
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

impl<T> Drop for Publisher<T> {
    fn drop(&mut self) {
        self.shared.gone.store(true, Ordering::Release);
    }
}

/// The loop's liveness alone, read without the [`Reader`] (which a monitoring thread
/// may hold while it waits for a snapshot): a health check never waits behind a fetch.
#[derive(Clone)]
pub struct Pulse {
    shared: Arc<Shared>,
}

impl Pulse {
    /// The loop's last tick (None before the first).
    pub fn heartbeat(&self) -> Option<MonoNanos> {
        match self.shared.heartbeat.load(Ordering::Relaxed) {
            0 => None,
            t => Some(MonoNanos(t)),
        }
    }

    /// True once the loop has stopped (its end is dropped).
    pub fn loop_gone(&self) -> bool {
        self.shared.gone.load(Ordering::Acquire)
    }
}

impl<T> Publisher<T> {
    /// Called by the hot thread at each tick: stores the heartbeat and, when the reader
    /// asked, hands it `make()`. Never blocks.
    pub fn tick(&self, now: MonoNanos, make: impl FnOnce() -> T) {
        self.tick_timed(now, || now, make);
    }

    /// [`Publisher::tick`], measuring what `make()` took with `clock` (read twice, and
    /// only when a snapshot is made): the reader's [`Reader::last_cost`], so that the
    /// monitoring side can ask less often when snapshots are expensive.
    pub fn tick_timed(
        &self,
        now: MonoNanos,
        clock: impl Fn() -> MonoNanos,
        make: impl FnOnce() -> T,
    ) {
        self.shared.heartbeat.store(now.0, Ordering::Relaxed);
        if self.shared.wanted.load(Ordering::Relaxed) {
            self.shared.wanted.store(false, Ordering::Relaxed);
            let start = clock();
            let snapshot = Box::new(make());
            let cost = clock().saturating_sub(start);
            self.shared.cost.store(cost, Ordering::Relaxed);
            // Full (the reader has not taken the last one) or disconnected: drop it.
            let _ = self.tx.try_send(snapshot);
        }
    }

    /// True while a reader waits for a snapshot (a loop that sleeps long between ticks
    /// may tick early).
    pub fn is_wanted(&self) -> bool {
        self.shared.wanted.load(Ordering::Relaxed)
    }
}

impl<T> Reader<T> {
    /// Asks the loop for a snapshot and waits up to `timeout` for it (the loop answers
    /// at its next tick). None on timeout.
    pub fn fetch(&self, timeout: Duration) -> Option<Box<T>> {
        // A snapshot left by a request that timed out is stale: drop it.
        while let Ok(_stale) = self.rx.try_recv() {}
        self.shared.wanted.store(true, Ordering::Relaxed);
        self.rx.recv_timeout(timeout).ok()
    }

    /// What the last snapshot took the loop to make (zero when not measured).
    pub fn last_cost(&self) -> Duration {
        Duration::from_nanos(self.shared.cost.load(Ordering::Relaxed))
    }

    /// The loop's last tick (None before the first).
    pub fn heartbeat(&self) -> Option<MonoNanos> {
        self.pulse().heartbeat()
    }

    /// True once the loop has stopped (its end is dropped).
    pub fn loop_gone(&self) -> bool {
        self.pulse().loop_gone()
    }

    /// A handle on the loop's liveness that needs no access to this reader.
    pub fn pulse(&self) -> Pulse {
        Pulse {
            shared: self.shared.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_made_only_when_asked_and_handed_over_at_the_next_tick() {
        let (publisher, reader) = channel::<u64>(MonoNanos(1));
        let mut made = 0;
        publisher.tick(MonoNanos(5), || {
            made += 1;
            5
        });
        assert_eq!(made, 0, "nobody asked");
        assert_eq!(reader.heartbeat(), Some(MonoNanos(5)));
        let reader = std::thread::scope(|s| {
            let r = s.spawn(move || (reader.fetch(Duration::from_secs(10)), reader));
            while !publisher.is_wanted() {
                std::thread::yield_now();
            }
            publisher.tick(MonoNanos(7), || {
                made += 1;
                7
            });
            let (got, reader) = r.join().unwrap();
            assert_eq!(got.map(|b| *b), Some(7));
            reader
        });
        assert_eq!(made, 1);
        // Nobody waits: a tick makes nothing.
        publisher.tick(MonoNanos(9), || unreachable!());
        assert!(!reader.loop_gone());
        drop(publisher);
        assert!(reader.loop_gone());
    }

    #[test]
    fn a_timed_tick_reports_what_the_snapshot_took_to_make() {
        let (publisher, reader) = channel::<u64>(MonoNanos(1));
        assert_eq!(reader.last_cost(), Duration::ZERO);
        // A clock that advances 3 ms per reading: the snapshot took one step.
        let t = std::cell::Cell::new(100_000_000u64);
        let clock = || {
            t.set(t.get() + 3_000_000);
            MonoNanos(t.get())
        };
        // Nobody asked: the clock is not read.
        publisher.tick_timed(MonoNanos(2), clock, || unreachable!());
        assert_eq!(t.get(), 100_000_000);
        let reader = std::thread::scope(|s| {
            let r = s.spawn(move || (reader.fetch(Duration::from_secs(10)), reader));
            while !publisher.is_wanted() {
                std::thread::yield_now();
            }
            publisher.tick_timed(MonoNanos(3), clock, || 3);
            let (got, reader) = r.join().unwrap();
            assert_eq!(got.map(|b| *b), Some(3));
            reader
        });
        assert_eq!(reader.last_cost(), Duration::from_millis(3));
    }
}
