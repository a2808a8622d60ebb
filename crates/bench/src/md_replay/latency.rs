//! `tickwire bench md-latency`: the measuring clients of the market-data replay test
//! (docs/benchmarking.md family C).
//!
//! N subscriber connections to the router, polled by one thread, each keeping its own
//! per-hop histograms from the six timestamps every update carries:
//!
//! | hop               | from → to                                                  |
//! |-------------------|------------------------------------------------------------|
//! | exchange→FH       | ITCH timestamp (time of day) → feed-handler receive        |
//! | FH internal       | feed-handler receive → feed-handler publish (STAMPS)       |
//! | FH→router         | feed-handler publish → router in                           |
//! | router internal   | router in → router out                                     |
//! | router→client     | router out → client receive                                |
//! | end to end        | ITCH timestamp → client receive                            |
//!
//! All stamps but the ITCH one are CLOCK_MONOTONIC of this host. The ITCH timestamp is
//! converted with the offset between the system clock's time of day and the monotonic
//! clock, read once; it is meaningful only when the exchange stamps its send time
//! (`tickwire md publish --restamp`), so the two exchange hops are measured only when
//! asked (`restamped`). Without it end to end starts at the feed-handler receive.
//!
//! Per client, updates are also grouped in windows (10 s by default) by receive time:
//! the update rate and the latency of each window give latency against update rate.
//! All clients' end-to-end latencies are also kept per second of receive time (the
//! first [`TIMELINE_SECONDS`]), for the figures of the seconds no host stall touched
//! ([`crate::host_watch`]).

use std::time::Duration;
use tickwire_rt::MonoNanos;

use serde::Serialize;
use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_md::publisher::{monotonic_to_time_of_day, time_of_day};
use tickwire_md::update;

use crate::harness::StopFlag;
use crate::stats::{Latency, Summary};

const DAY_NS: u64 = 86_400_000_000_000;

/// The hops, in path order.
pub const HOPS: [&str; 6] = [
    "exchange→FH",
    "FH internal",
    "FH→router",
    "router internal",
    "router→client",
    "end to end",
];

/// Settings of the measuring clients.
#[derive(Debug, Clone)]
pub struct LatencyOptions {
    pub router: String,
    /// The clients' login and TLS settings (docs/security.md); each client's name and
    /// receive buffer are set here.
    pub client: ClientOptions,
    pub clients: usize,
    pub pattern: String,
    /// Stop this long after the first update (None: until stopped or idle).
    pub duration: Option<Duration>,
    /// Stop when nothing arrived for this long after the first update.
    pub idle_exit: Option<Duration>,
    /// Stop when no update at all arrived this long after the start (None: wait for
    /// the first for ever).
    pub first_wait: Option<Duration>,
    /// Window of the latency-versus-rate figures.
    pub window: Duration,
    /// The ITCH timestamps are send times of this host's clock (`--restamp`).
    pub restamped: bool,
}

/// One window of one client.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub start_s: f64,
    /// How much of the window the run covered: the window's length, or less for the
    /// last one when the run ended inside it.
    pub span_s: f64,
    /// The run covered the whole window. Only complete windows give a window rate
    /// ([`peak_rate`], the tables and plots): a partial window's updates over its short
    /// span would be scaled up to a rate no full window had.
    pub complete: bool,
    pub updates: u64,
    /// Updates per second over `span_s`.
    pub rate: f64,
    pub mean_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// One client's results.
#[derive(Debug, Clone, Serialize)]
pub struct ClientResult {
    pub client: usize,
    pub received: u64,
    pub discarded: u64,
    pub out_of_order: u64,
    pub undecodable: u64,
    pub unstamped: u64,
    /// Per hop (in [`HOPS`] order; exchange hops empty unless restamped).
    pub hops: Vec<(String, Summary)>,
    pub windows: Vec<Window>,
    #[serde(skip)]
    pub hists: Vec<Latency>,
}

#[derive(Default)]
struct Acc {
    hops: Vec<Latency>,
    received: u64,
    discarded: u64,
    out_of_order: u64,
    undecodable: u64,
    unstamped: u64,
    last_seq: u64,
    /// (index, updates, end-to-end latency) per window.
    windows: Vec<(u64, Latency)>,
    /// The latest receive time, ns after the run's start: the end of the last window
    /// that holds anything (a run shorter than a window must not be divided by it).
    last_rx_ns: u64,
}

/// Connects the clients and subscribes them (each waits for its ACK), ready for [`run`].
pub fn connect(opts: &LatencyOptions) -> anyhow::Result<Vec<Client>> {
    let mut out = Vec::with_capacity(opts.clients);
    for i in 0..opts.clients {
        let co = ClientOptions {
            name: format!("md-latency-{i}"),
            recv_buffer: 4 << 20,
            ..opts.client.clone()
        };
        let mut c = Client::connect_to(opts.router.as_str(), co)
            .map_err(|e| anyhow::anyhow!("client {i}: connecting to {}: {e}", opts.router))?;
        c.subscribe(&opts.pattern)
            .map_err(|e| anyhow::anyhow!("client {i}: subscribing to {:?}: {e}", opts.pattern))?;
        out.push(c);
    }
    Ok(out)
}

/// ns from `from` to `to` on a time-of-day clock, across midnight; 0 when `to` is
/// before `from` (clock adjustments).
fn tod_delta(from: u64, to: u64) -> u64 {
    let d = (to + DAY_NS - from % DAY_NS) % DAY_NS;
    if d > DAY_NS / 2 {
        0
    } else {
        d
    }
}

/// What a measuring client reads from one update: the update header's sequence and
/// timestamps, and the router's (or the raw relay's) stamps when it carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub seq: u64,
    /// ITCH timestamp (ns since midnight).
    pub exchange_ns: u64,
    /// Feed-handler receive time (CLOCK_MONOTONIC ns).
    pub receive_ns: u64,
    /// Publisher send, router in, router out (CLOCK_MONOTONIC ns).
    pub stamps: Option<[u64; 3]>,
}

/// One update as a measuring connection delivers it.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    /// Messages the router discarded before this one (slow-consumer policy).
    pub discarded: u64,
    /// `None`: the payload did not decode.
    pub sample: Option<Sample>,
}

/// One measuring connection: a tickwire client, or the raw floor's subscriber
/// ([`super::raw`]). [`run`] polls several of them from one thread.
pub trait Source: std::os::fd::AsFd {
    /// Hands every update already received to `f`, without waiting.
    fn drain(&mut self, f: impl FnMut(Delivery)) -> anyhow::Result<()>;

    /// Before sleeping in `poll(2)` on the descriptor: false when input is already
    /// there (see [`Client::begin_sleep`]: shared memory announces the sleep).
    fn begin_sleep(&mut self) -> bool {
        true
    }

    /// After that `poll(2)`.
    fn end_sleep(&mut self) {}
}

impl Source for Client {
    fn drain(&mut self, mut f: impl FnMut(Delivery)) -> anyhow::Result<()> {
        self.poll(Wait::NoWait, |m| {
            let sample = update::decode(m.payload()).ok().map(|u| {
                let h = u.header();
                Sample {
                    seq: h.seq,
                    exchange_ns: h.exchange_ns,
                    receive_ns: h.receive_ns,
                    stamps: m
                        .stamps()
                        .map(|st| [st.publisher_send, st.router_in, st.router_out]),
                }
            });
            f(Delivery {
                discarded: m.discarded(),
                sample,
            })
        })
        .map_err(|e| anyhow::anyhow!("receiving: {e}"))?;
        Ok(())
    }

    fn begin_sleep(&mut self) -> bool {
        Client::begin_sleep(self)
    }

    fn end_sleep(&mut self) {
        Client::end_sleep(self);
    }
}

/// The monotonic → time-of-day offset and the options that shape what a sample adds.
struct Recorder {
    tod: i128,
    window_ns: u64,
    restamped: bool,
}

impl Recorder {
    /// Adds one delivery received at `rx` (first update of the run at `t0`) to `acc`;
    /// its end-to-end latency, if it had the stamps for one.
    #[inline]
    fn record(&self, acc: &mut Acc, rx: u64, t0: u64, d: Delivery) -> Option<u64> {
        acc.received += 1;
        acc.discarded += d.discarded;
        let Some(s) = d.sample else {
            acc.undecodable += 1;
            return None;
        };
        if s.seq < acc.last_seq {
            acc.out_of_order += 1;
        }
        acc.last_seq = s.seq;
        let Some([publisher_send, router_in, router_out]) = s.stamps else {
            acc.unstamped += 1;
            return None;
        };
        let rx_tod = time_of_day(rx, self.tod);
        let fh_rx_tod = time_of_day(s.receive_ns, self.tod);
        if self.restamped {
            acc.hops[0].record(tod_delta(s.exchange_ns, fh_rx_tod));
        }
        acc.hops[1].record(publisher_send.saturating_sub(s.receive_ns));
        acc.hops[2].record(router_in.saturating_sub(publisher_send));
        acc.hops[3].record(router_out.saturating_sub(router_in));
        acc.hops[4].record(rx.saturating_sub(router_out));
        let e2e = if self.restamped {
            tod_delta(s.exchange_ns, rx_tod)
        } else {
            rx.saturating_sub(s.receive_ns)
        };
        acc.hops[5].record(e2e);
        let w = (rx - t0) / self.window_ns;
        acc.last_rx_ns = acc.last_rx_ns.max(rx - t0);
        match acc.windows.last_mut() {
            Some((i, l)) if *i == w => l.record(e2e),
            _ => {
                let mut l = Latency::new();
                l.record(e2e);
                acc.windows.push((w, l));
            }
        }
        Some(e2e)
    }
}

/// The rows of `windows` ((index, latency) by receive time from the first update), the
/// last update received `last_rx_ns` after the first: a window is complete when the run
/// went on to its end, and the last one, where the run stopped, usually is not.
fn window_rows(windows: &[(u64, Latency)], window_ns: u64, last_rx_ns: u64) -> Vec<Window> {
    let window_s = window_ns as f64 / 1e9;
    windows
        .iter()
        .map(|(w, l)| {
            let s = l.summary();
            let start_ns = w.saturating_mul(window_ns);
            let complete = start_ns.saturating_add(window_ns) <= last_rx_ns;
            let span_ns = if complete {
                window_ns
            } else {
                // The last window ends at the last update, not a window later (at
                // least 1 ns: a single update is a window of its own).
                last_rx_ns.saturating_sub(start_ns).clamp(1, window_ns)
            };
            let span_s = span_ns as f64 / 1e9;
            Window {
                start_s: *w as f64 * window_s,
                span_s,
                complete,
                updates: l.len(),
                rate: l.len() as f64 / span_s,
                mean_us: s.mean_us,
                p99_us: s.p99_us,
                max_us: s.max_us,
            }
        })
        .collect()
}

/// The highest update rate of a complete window; None when the run was shorter than
/// one window (no window complete), when there is no peak to give.
pub fn peak_rate(windows: &[Window]) -> Option<f64> {
    windows
        .iter()
        .filter(|w| w.complete)
        .map(|w| w.rate)
        .reduce(f64::max)
}

/// Seconds of per-second end-to-end histograms kept for the stall-free figures (about
/// 30 KB each): a longer run's later seconds count in everything else, not there.
pub const TIMELINE_SECONDS: usize = 600;

/// What [`run_timed`] measured: the clients' results, and all clients' end-to-end
/// latency per second of receive time from `origin` (index k: `[origin + k s, origin +
/// (k+1) s)`), for [`crate::host_watch::StallFree::from_timeline`].
pub struct Timed {
    pub clients: Vec<ClientResult>,
    /// The first update's receipt, where the clients' windows start too: with 1-s
    /// windows, second k and window k are the same second. (The start of the
    /// measurement, before the replay began, counted a second more than the windows
    /// showed: "2 of 2 measured seconds" over a one-row table.) When nothing arrived,
    /// the start of the measurement.
    pub origin: MonoNanos,
    pub seconds: Vec<Option<hdrhistogram::Histogram<u64>>>,
}

/// Records `e2e`, received at `rx`, in second `(rx - origin) / 1 s` of `seconds` (a
/// histogram is made the first time its second sees a sample; none past
/// [`TIMELINE_SECONDS`]).
fn record_second(
    seconds: &mut Vec<Option<hdrhistogram::Histogram<u64>>>,
    origin: u64,
    rx: u64,
    e2e: u64,
) {
    let k = (rx.saturating_sub(origin) / 1_000_000_000) as usize;
    if k >= TIMELINE_SECONDS {
        return;
    }
    if seconds.len() <= k {
        seconds.resize_with(k + 1, || None);
    }
    if seconds[k].is_none() {
        seconds[k] = crate::host_watch::timeline_histogram();
    }
    if let Some(h) = seconds[k].as_mut() {
        h.saturating_record(e2e.clamp(1, crate::host_watch::TIMELINE_MAX_NS));
    }
}

/// Receives on every client until the duration, the idle limit or `stop`.
pub fn run<S: Source>(
    clients: Vec<S>,
    opts: &LatencyOptions,
    stop: &StopFlag,
) -> anyhow::Result<Vec<ClientResult>> {
    run_timed(clients, opts, stop).map(|t| t.clients)
}

/// [`run`], with all clients' end-to-end latency per second ([`Timed`]).
pub fn run_timed<S: Source>(
    mut clients: Vec<S>,
    opts: &LatencyOptions,
    stop: &StopFlag,
) -> anyhow::Result<Timed> {
    let started = MonoNanos::now();
    let mut seconds = Vec::new();
    let rec = Recorder {
        tod: monotonic_to_time_of_day(),
        window_ns: opts.window.as_nanos().max(1) as u64,
        restamped: opts.restamped,
    };
    let mut accs: Vec<Acc> = (0..clients.len())
        .map(|_| Acc {
            hops: (0..HOPS.len()).map(|_| Latency::new()).collect(),
            ..Acc::default()
        })
        .collect();
    let mut first: Option<u64> = None;
    let mut last_rx = MonoNanos::now().as_nanos();
    loop {
        let mut got = 0usize;
        for (client, acc) in clients.iter_mut().zip(accs.iter_mut()) {
            let start = &mut first;
            client.drain(|d| {
                let rx = MonoNanos::now().as_nanos();
                let t0 = *start.get_or_insert(rx);
                got += 1;
                if let Some(e2e) = rec.record(acc, rx, t0, d) {
                    record_second(&mut seconds, t0, rx, e2e);
                }
            })?;
        }
        let now = MonoNanos::now().as_nanos();
        if got > 0 {
            last_rx = now;
        } else {
            // Nothing complete in any buffer: wait (up to 1 ms) until one of the sockets
            // (or shared-memory doorbells) is readable, so idle measuring clients leave
            // the cores to the feed path.
            let mut sleep = true;
            for c in clients.iter_mut() {
                sleep &= c.begin_sleep();
            }
            if sleep {
                let fds: Vec<_> = clients.iter().map(|c| c.as_fd()).collect();
                let mut pfds: Vec<_> = fds
                    .iter()
                    .map(|fd| rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN))
                    .collect();
                let timeout = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                let _ = rustix::event::poll(&mut pfds, Some(&timeout));
            }
            for c in clients.iter_mut() {
                c.end_sleep();
            }
        }
        if stop.is_set() {
            break;
        }
        if first.is_none()
            && opts
                .first_wait
                .is_some_and(|d| now - started.as_nanos() >= d.as_nanos() as u64)
        {
            break;
        }
        if let Some(t0) = first {
            if opts
                .duration
                .is_some_and(|d| now - t0 >= d.as_nanos() as u64)
            {
                break;
            }
            if opts
                .idle_exit
                .is_some_and(|d| now - last_rx >= d.as_nanos() as u64)
            {
                break;
            }
        }
    }
    let clients = accs
        .into_iter()
        .enumerate()
        .map(|(i, a)| ClientResult {
            client: i,
            received: a.received,
            discarded: a.discarded,
            out_of_order: a.out_of_order,
            undecodable: a.undecodable,
            unstamped: a.unstamped,
            hops: HOPS
                .iter()
                .zip(&a.hops)
                .map(|(n, l)| (n.to_string(), l.summary()))
                .collect(),
            windows: window_rows(&a.windows, rec.window_ns, a.last_rx_ns),
            hists: a.hops,
        })
        .collect();
    Ok(Timed {
        clients,
        origin: first.map_or(started, MonoNanos),
        seconds,
    })
}

/// The hops merged over every client (lossless HDR merge).
pub fn merged_hops(results: &[ClientResult]) -> Vec<(String, Summary)> {
    (0..HOPS.len())
        .map(|h| {
            let mut m = Latency::new();
            for r in results {
                if let Some(l) = r.hists.get(h) {
                    m.merge(l);
                }
            }
            (HOPS[h].to_string(), m.summary())
        })
        .collect()
}

/// The published per-client table: updates, end-to-end mean, stddev, p50, p99, max,
/// and the correctness counters.
pub fn client_table(results: &[ClientResult]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "client",
        "updates",
        "mean µs",
        "stddev µs",
        "p50 µs",
        "p99 µs",
        "max µs",
        "discarded",
        "reordered"
    );
    for r in results {
        let e = &r.hops[HOPS.len() - 1].1;
        let _ = writeln!(
            out,
            "{:>6} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10} {:>9}",
            r.client,
            r.received,
            e.mean_us,
            e.stddev_us,
            e.p50_us,
            e.p99_us,
            e.max_us,
            r.discarded,
            r.out_of_order
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_the_second_of_their_receipt_and_none_past_the_cap() {
        let mut s = Vec::new();
        let origin = 5_000_000_000;
        record_second(&mut s, origin, origin + 10, 100);
        record_second(&mut s, origin, origin + 2_500_000_000, 300);
        record_second(&mut s, origin, origin + 2_600_000_000, 200_000_000_000);
        record_second(&mut s, origin, origin - 1, 7); // before the origin: second 0
        let beyond = origin + TIMELINE_SECONDS as u64 * 1_000_000_000;
        record_second(&mut s, origin, beyond, 9);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].as_ref().unwrap().len(), 2);
        assert!(s[1].is_none());
        let third = s[2].as_ref().unwrap();
        assert_eq!(third.len(), 2);
        // Clamped into the timeline's range, not dropped.
        assert!(third.max() >= crate::host_watch::TIMELINE_MAX_NS / 2);
    }

    /// A source with nothing for `quiet`, then a burst of `n` stamped updates at once.
    struct LateBurst {
        sock: std::net::UdpSocket,
        since: std::time::Instant,
        quiet: Duration,
        n: u64,
    }

    impl std::os::fd::AsFd for LateBurst {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.sock.as_fd()
        }
    }

    impl Source for LateBurst {
        fn drain(&mut self, mut f: impl FnMut(Delivery)) -> anyhow::Result<()> {
            if self.since.elapsed() < self.quiet {
                return Ok(());
            }
            for seq in 1..=std::mem::take(&mut self.n) {
                let now = MonoNanos::now().as_nanos();
                f(Delivery {
                    discarded: 0,
                    sample: Some(Sample {
                        seq,
                        exchange_ns: 0,
                        receive_ns: now,
                        stamps: Some([now, now, now]),
                    }),
                });
            }
            Ok(())
        }
    }

    fn window_of(index: u64, updates: u64) -> (u64, Latency) {
        let mut l = Latency::new();
        for _ in 0..updates {
            l.record(1_000);
        }
        (index, l)
    }

    /// Regression: a 1.2 s run printed "69649 updates published (57940/s average,
    /// 73235/s peak 1-s window)": the last 0.2 s were scaled up to a rate above the
    /// whole run's count. Only complete windows give a window rate.
    #[test]
    fn a_partial_window_is_not_scaled_up_to_a_rate() {
        const S: u64 = 1_000_000_000;
        // Window 0 complete (50,000 updates), window 1 cut at 1.2 s (20,000 updates).
        let rows = window_rows(
            &[window_of(0, 50_000), window_of(1, 20_000)],
            S,
            1_200_000_000,
        );
        assert_eq!(rows.len(), 2);
        assert!(rows[0].complete && !rows[1].complete);
        assert_eq!(rows[0].span_s, 1.0);
        assert!((rows[1].span_s - 0.2).abs() < 1e-9, "{}", rows[1].span_s);
        assert_eq!(peak_rate(&rows), Some(50_000.0));
        // A window ending exactly at the last update is complete.
        let rows = window_rows(&[window_of(0, 10), window_of(1, 30)], S, 2 * S);
        assert!(rows.iter().all(|w| w.complete));
        assert_eq!(peak_rate(&rows), Some(30.0));
    }

    #[test]
    fn a_run_shorter_than_one_window_has_no_peak() {
        let rows = window_rows(&[window_of(0, 42_829)], 10_000_000_000, 1_170_000_000);
        assert_eq!(rows.len(), 1);
        assert!(!rows[0].complete);
        assert_eq!(peak_rate(&rows), None);
        // Nothing received at all: no rows, no peak.
        assert_eq!(peak_rate(&window_rows(&[], 1_000_000_000, 0)), None);
        // A single update: a window of 1 ns, not a division by zero.
        let rows = window_rows(&[window_of(0, 1)], 1_000_000_000, 0);
        assert!(rows[0].rate.is_finite() && !rows[0].complete);
    }

    /// `bench md-latency` with nothing publishing: it gives up after `first_wait`
    /// (it waited for ever, then printed a table of zeros when killed).
    #[test]
    fn with_nothing_arriving_the_run_ends_after_the_first_wait() {
        let source = LateBurst {
            sock: std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
            since: std::time::Instant::now(),
            quiet: Duration::from_secs(3600),
            n: 1,
        };
        let opts = LatencyOptions {
            router: String::new(),
            client: ClientOptions::default(),
            clients: 1,
            pattern: String::new(),
            duration: Some(Duration::from_secs(3600)),
            idle_exit: Some(Duration::from_secs(3600)),
            first_wait: Some(Duration::from_millis(200)),
            window: Duration::from_secs(1),
            restamped: false,
        };
        let t0 = std::time::Instant::now();
        let timed = run_timed(vec![source], &opts, &StopFlag::unregistered()).unwrap();
        assert_eq!(timed.clients[0].received, 0);
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "still waiting after {:?}",
            t0.elapsed()
        );
    }

    /// Regression: the per-second timeline counted from the start of the measurement,
    /// before the replay began, and the windows from the first update, so `demo` said
    /// "2 of 2 measured seconds" over a table of one 1-s window. Both count from the
    /// first update now.
    #[test]
    fn the_timeline_seconds_start_with_the_first_update_as_the_windows_do() {
        let source = LateBurst {
            sock: std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
            since: std::time::Instant::now(),
            quiet: Duration::from_millis(1_100),
            n: 50,
        };
        let opts = LatencyOptions {
            router: String::new(),
            client: ClientOptions::default(),
            clients: 1,
            pattern: String::new(),
            duration: None,
            idle_exit: Some(Duration::from_millis(100)),
            first_wait: None,
            window: Duration::from_secs(1),
            restamped: false,
        };
        let timed = run_timed(vec![source], &opts, &StopFlag::unregistered()).unwrap();
        assert_eq!(timed.clients[0].received, 50);
        // One burst: one window, one second (it was two, the first empty).
        assert_eq!(timed.clients[0].windows.len(), 1);
        assert_eq!(timed.seconds.len(), 1);
        assert_eq!(timed.seconds[0].as_ref().map(|h| h.len()), Some(50));
    }
}
