//! The measuring threads: open-loop publishers and tracking subscribers.
//!
//! Every publisher thread walks its share of one [`Schedule`] (slot `i` goes to
//! publisher `i % publishers`); each message carries its intended send time, so a
//! subscriber measures latency from when the message *should* have been sent (a late
//! sender shows up as latency: no coordinated omission). Publishers also record how
//! late they actually called send (sender lateness). All threads read the same
//! monotonic clock ([`MonoNanos::now`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tickwire_rt::MonoNanos;

use hdrhistogram::Histogram;

use super::transport::{PubConn, SubConn};
use super::workload::{publisher_topic, Header, Workload};
use crate::harness::StopFlag;
use crate::schedule::Schedule;
use crate::stats::{Counters, Latency, SeqTracker};
use tickwire_rt::IdleStrategy;

/// A publisher further behind its schedule than this gives up (the run is saturated
/// and would otherwise take arbitrarily long; it is then marked INVALID).
pub const MAX_BEHIND_NS: u64 = 5_000_000_000;

/// Once every publisher is done, a subscriber that has not got all it expects stops
/// after this long without a message (the rest counts as gaps).
pub const DRAIN_IDLE: Duration = Duration::from_secs(3);

/// Below this much remaining time the publisher yields instead of sleeping (sleep
/// wake-ups are late by tens of µs).
const SLEEP_ABOVE_NS: u64 = 200_000;

/// What the threads share: the start time, the stop flag, progress counters and the
/// merged per-second timeline.
pub struct Shared {
    /// Absolute time (ns, [`MonoNanos::now`]) of schedule time 0.
    pub start_ns: u64,
    pub stop: StopFlag,
    /// Publishers carry in-line stamps (tickwire `--hops`).
    pub hops: bool,
    /// Publisher write coalescing window in ns (`--coalesce-us`; 0: none).
    pub coalesce_ns: u64,
    /// Where the progress lines go (the caller's sink; none by default).
    pub progress: fn(&str),
    /// Messages sent so far, per publisher (progress line only).
    pub pub_sent: Vec<AtomicU64>,
    /// Current sender lateness in ns, per publisher (progress line only).
    pub pub_late: Vec<AtomicU64>,
    /// Messages received so far, per subscriber (progress line only).
    pub sub_received: Vec<AtomicU64>,
    /// Messages each subscriber must receive; `u64::MAX` until the publishers are done.
    pub expected: Vec<AtomicU64>,
    /// Latency by intended-send second, merged from every subscriber.
    pub timeline: Mutex<Vec<Option<Histogram<u64>>>>,
}

impl Shared {
    pub fn new(start_ns: u64, stop: StopFlag, publishers: usize, subscribers: usize) -> Shared {
        let zeros = |n: usize, v: u64| (0..n).map(|_| AtomicU64::new(v)).collect();
        Shared {
            start_ns,
            stop,
            hops: false,
            coalesce_ns: 0,
            progress: |_| {},
            pub_sent: zeros(publishers, 0),
            pub_late: zeros(publishers, 0),
            sub_received: zeros(subscribers, 0),
            expected: zeros(subscribers, u64::MAX),
            timeline: Mutex::new(Vec::new()),
        }
    }
}

/// What one publisher did.
#[derive(Debug)]
pub struct PubResult {
    /// Messages sent per topic (warm-up included).
    pub per_topic: Vec<u64>,
    /// Messages sent (warm-up included).
    pub sent: u64,
    /// Messages sent whose intended time is in the measured part.
    pub measured_sent: u64,
    /// How late send was called, measured part only.
    pub lateness: Latency,
    /// Sends per second of actual send time since the start.
    pub per_second: Vec<u64>,
    /// When the last measured message was actually sent (ns since the start).
    pub last_send_rel_ns: u64,
    /// Set when Ctrl-C stopped the publisher: ns since the start.
    pub stopped_at_rel_ns: Option<u64>,
    /// Set when the publisher gave up (too far behind) or failed.
    pub problem: Option<String>,
}

/// Runs publisher `k`: sends its share of `schedule`, open loop.
pub fn publish(
    k: usize,
    mut conn: PubConn,
    w: &Workload,
    schedule: &Schedule,
    shared: &Shared,
) -> PubResult {
    let mut r = PubResult {
        per_topic: vec![0; w.topics],
        sent: 0,
        measured_sent: 0,
        lateness: Latency::new(),
        per_second: Vec::new(),
        last_send_rel_ns: 0,
        stopped_at_rel_ns: None,
        problem: None,
    };
    let start = shared.start_ns;
    let mut buf = vec![0x5Au8; w.mix.max_size()];
    // The intended time of the oldest message not written yet.
    let mut unwritten_since: Option<u64> = None;
    for (j, slot) in schedule.slots_for(k, w.publishers).enumerate() {
        if shared.stop.is_set() {
            r.stopped_at_rel_ns = Some(MonoNanos::now().as_nanos().saturating_sub(start));
            break;
        }
        let intended = start + slot.at_ns;
        let mut now = MonoNanos::now().as_nanos();
        if now < intended {
            // Nothing is due yet: write what is batched (unless the next slot falls in
            // the coalescing window of the oldest unwritten message), then wait.
            let coalesce =
                unwritten_since.is_some_and(|t0| intended.saturating_sub(t0) <= shared.coalesce_ns);
            if !coalesce {
                if let Err(e) = conn.flush() {
                    r.problem = Some(format!("publisher {k}: {e:#}"));
                    break;
                }
                unwritten_since = None;
            }
            pace_until(intended);
            now = MonoNanos::now().as_nanos();
        } else if now - intended > MAX_BEHIND_NS {
            r.problem = Some(format!(
                "publisher {k} gave up: {:.1} s behind its schedule (saturated)",
                (now - intended) as f64 / 1e9
            ));
            break;
        }
        let t = publisher_topic(k, j as u64, w.topics);
        let size = w.mix.size_at(slot.index);
        Header {
            publisher: k as u32,
            topic: t as u32,
            seq: r.per_topic[t],
            intended_ns: intended,
        }
        .encode(&mut buf);
        if let Err(e) = conn.send(
            t,
            &buf[..size],
            shared.hops.then(|| MonoNanos::now().as_nanos()),
        ) {
            r.problem = Some(format!("publisher {k}: {e:#}"));
            break;
        }
        unwritten_since.get_or_insert(intended);
        r.per_topic[t] += 1;
        r.sent += 1;
        if !slot.warmup {
            r.lateness.record(now - intended);
            r.measured_sent += 1;
            r.last_send_rel_ns = now - start;
        }
        let sec = ((now - start) / 1_000_000_000) as usize;
        if r.per_second.len() <= sec {
            r.per_second.resize(sec + 1, 0);
        }
        r.per_second[sec] += 1;
        if r.sent % 64 == 0 {
            shared.pub_sent[k].store(r.sent, Ordering::Relaxed);
            shared.pub_late[k].store(now - intended, Ordering::Relaxed);
        }
    }
    if let Err(e) = conn.close() {
        r.problem.get_or_insert(format!("publisher {k}: {e:#}"));
    }
    shared.pub_sent[k].store(r.sent, Ordering::Relaxed);
    shared.pub_late[k].store(0, Ordering::Relaxed);
    r
}

/// Waits until `MonoNanos::now().as_nanos() >= t`: sleeps while more than 200 µs remain, then yields the
/// CPU in a loop. Yielding rather than spinning matters here: the measuring process's
/// publishers and subscribers share one core in the published layout, and a spinning
/// publisher would delay the subscribers' wake-ups by a scheduler slice. Alone on a
/// core, `yield` returns at once and this is a spin.
fn pace_until(t: u64) {
    loop {
        let now = MonoNanos::now().as_nanos();
        if now >= t {
            return;
        }
        let left = t - now;
        if left > SLEEP_ABOVE_NS {
            std::thread::sleep(Duration::from_nanos(left - SLEEP_ABOVE_NS + 50_000));
        } else {
            std::thread::yield_now();
        }
    }
}

/// What one subscriber saw.
#[derive(Debug)]
pub struct SubResult {
    /// `received` counts every valid message; `gaps`, `duplicates`, `out_of_order` per
    /// (publisher, topic) stream. `sent` is left 0 (the run's total is filled in later).
    pub counters: Counters,
    /// Messages the router reported it discarded for this (slow) subscriber.
    pub discarded: u64,
    /// Messages that were not ours or did not decode (wrong topic, bad header).
    pub malformed: u64,
    /// What it should have received (from what was published and its topics).
    pub expected: u64,
    /// Latency from the intended send time, measured part only.
    pub overall: Latency,
    /// The same, per message size (index as in the size mix).
    pub per_size: Vec<Latency>,
    /// With in-line stamps (tickwire `--hops`): publisher send -> router in, router in
    /// -> router out, router out -> receipt; measured part only.
    pub hops: Option<[Latency; 3]>,
    /// Stopped after [`DRAIN_IDLE`] without getting everything.
    pub drain_timed_out: bool,
    pub problem: Option<String>,
}

/// Runs subscriber `s` until it has what it expects (or the drain times out).
/// `names[t]` is topic `t` as the system under test names it.
pub fn subscribe(
    s: usize,
    mut conn: SubConn,
    w: &Workload,
    names: &[String],
    idle: IdleStrategy,
    shared: &Shared,
) -> SubResult {
    let mut r = SubResult {
        counters: Counters::default(),
        discarded: 0,
        malformed: 0,
        expected: 0,
        overall: Latency::new(),
        per_size: w.mix.parts.iter().map(|_| Latency::new()).collect(),
        hops: None,
        drain_timed_out: false,
        problem: None,
    };
    let mut trackers = vec![SeqTracker::default(); w.publishers * w.topics];
    let mut timeline = TimelineRecorder::new(&shared.timeline);
    let start = shared.start_ns;
    let measure_from = start + w.warmup_ns;
    let sizes: Vec<usize> = w.mix.parts.iter().map(|p| p.0).collect();
    let mut last_msg = Instant::now();
    loop {
        let polled = conn.poll(idle, |topic, payload, discarded, stamps| {
            let now = MonoNanos::now().as_nanos();
            r.discarded += discarded;
            let Some(h) = Header::decode(payload) else {
                r.malformed += 1;
                return;
            };
            let (p, t) = (h.publisher as usize, h.topic as usize);
            if p >= w.publishers || t >= w.topics || names[t] != topic {
                r.malformed += 1;
                return;
            }
            trackers[p * w.topics + t].observe(h.seq, 1, &mut r.counters);
            let lat = now.saturating_sub(h.intended_ns);
            if h.intended_ns >= measure_from {
                r.overall.record(lat);
                if let Some(i) = sizes.iter().position(|&x| x == payload.len()) {
                    r.per_size[i].record(lat);
                }
                if let Some(st) = stamps {
                    let hops = r.hops.get_or_insert_with(Default::default);
                    hops[0].record(st.router_in.saturating_sub(st.publisher_send));
                    hops[1].record(st.router_out.saturating_sub(st.router_in));
                    hops[2].record(now.saturating_sub(st.router_out));
                }
            }
            timeline.record(h.intended_ns.saturating_sub(start) / 1_000_000_000, lat);
        });
        match polled {
            Ok(0) => {}
            Ok(_) => last_msg = Instant::now(),
            Err(e) => {
                r.problem = Some(format!("subscriber {s}: {e:#}"));
                break;
            }
        }
        shared.sub_received[s].store(r.counters.received, Ordering::Relaxed);
        let want = shared.expected[s].load(Ordering::Acquire);
        if want != u64::MAX {
            if r.counters.received + r.malformed >= want {
                break;
            }
            if last_msg.elapsed() >= DRAIN_IDLE {
                r.drain_timed_out = true;
                break;
            }
        }
    }
    r.expected = shared.expected[s].load(Ordering::Acquire);
    timeline.flush_all();
    conn.close();
    r
}

/// Per-second latency histograms of one subscriber, merged into the shared timeline as
/// soon as a second is (almost surely) complete, so memory stays a few histograms per
/// thread however long the run.
struct TimelineRecorder<'a> {
    live: Vec<(u64, Histogram<u64>)>,
    newest: u64,
    shared: &'a Mutex<Vec<Option<Histogram<u64>>>>,
}

impl<'a> TimelineRecorder<'a> {
    fn new(shared: &'a Mutex<Vec<Option<Histogram<u64>>>>) -> Self {
        TimelineRecorder {
            live: Vec::new(),
            newest: 0,
            shared,
        }
    }

    fn record(&mut self, sec: u64, ns: u64) {
        if let Some((_, h)) = self.live.iter_mut().find(|(s, _)| *s == sec) {
            h.saturating_record(ns);
            return;
        }
        let Some(mut h) = timeline_histogram() else {
            return;
        };
        h.saturating_record(ns);
        self.live.push((sec, h));
        if sec > self.newest {
            self.newest = sec;
            // Seconds two behind the newest are done but for stragglers; a straggler
            // just starts a new histogram that is merged later (merging is lossless).
            let newest = self.newest;
            self.flush_where(|s| s + 2 < newest);
        }
    }

    fn flush_all(&mut self) {
        self.flush_where(|_| true);
    }

    fn flush_where(&mut self, done: impl Fn(u64) -> bool) {
        if !self.live.iter().any(|(s, _)| done(*s)) {
            return;
        }
        let Ok(mut shared) = self.shared.lock() else {
            return;
        };
        let mut i = 0;
        while i < self.live.len() {
            if done(self.live[i].0) {
                let (sec, h) = self.live.swap_remove(i);
                let sec = sec as usize;
                if shared.len() <= sec {
                    shared.resize(sec + 1, None);
                }
                match &mut shared[sec] {
                    Some(acc) => {
                        // Same bounds on both sides: cannot fail.
                        let _ = acc.add(&h);
                    }
                    slot => *slot = Some(h),
                }
            } else {
                i += 1;
            }
        }
    }
}

pub use crate::host_watch::timeline_histogram;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_recorder_merges_every_sample_into_its_second() {
        let shared = Mutex::new(Vec::new());
        let mut t = TimelineRecorder::new(&shared);
        t.record(0, 1_000);
        t.record(1, 2_000);
        t.record(5, 3_000); // flushes 0, 1 and 2
        t.record(0, 4_000); // a straggler for second 0
        assert!(t.live.len() <= 2);
        t.flush_all();
        let v = shared.into_inner().unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(v[0].as_ref().map(|h| h.len()), Some(2));
        assert_eq!(v[1].as_ref().map(|h| h.len()), Some(1));
        assert!(v[2].is_none());
        assert_eq!(v[5].as_ref().map(|h| h.max()), Some(h_equiv(3_000)));
    }

    fn h_equiv(v: u64) -> u64 {
        timeline_histogram().unwrap().highest_equivalent(v)
    }
}
