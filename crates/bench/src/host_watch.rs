//! Host stall sentinel: notices when a CPU of this (virtual) machine did not run at all.
//!
//! On a virtual machine the host can take a vCPU away for a while: on the 2-vCPU
//! machines this project is measured on, a vCPU regularly stops for ~100 ms (a
//! CPU-bandwidth period of the host), whatever the guest runs. A 100 ms stall inside a
//! 4 s run delays more than 2% of its messages by up to 100 ms, so it alone decides the
//! run's p99. Nothing in the guest can prevent it; a bench can only notice it and say so.
//!
//! The sentinel is one thread per CPU, pinned to it, raised to the highest SCHED_FIFO
//! priority when allowed (root), sleeping [`PERIOD`] at a time. A FIFO thread that
//! sleeps is runnable again the moment its timer fires and preempts everything else on
//! its CPU, so a wake-up later than [`THRESHOLD`] past its period means the CPU itself
//! did not run. Its cost: 1000 / PERIOD wake-ups per second per CPU, a few µs each.
//! Without realtime priority (not root) the sentinel still runs, but a busy thread of
//! the same priority can delay it: the report says which.
//!
//! A stall is not the only way to share the machine: another process (a build, another
//! bench) competing for the CPUs leaves no stall but slows the measured path. So the
//! watch also reads, at its start and its end, the CPU time of every process that is
//! not this one or one of its children (kernel threads aside: they work for everyone,
//! the measured path included), and the host's steal time (`/proc/stat`): the report
//! gives both as CPUs' worth on average and calls the run DISTURBED above
//! [`BUSY_OTHERS`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use tickwire_rt::text::count;
use tickwire_rt::{Latency, MonoNanos, Summary};

/// How long the sentinel sleeps between two clock readings.
pub const PERIOD: Duration = Duration::from_millis(5);

/// A wake-up later than this past the period counts as a stall.
pub const THRESHOLD: Duration = Duration::from_millis(10);

/// At most this many stalls are kept per CPU (the count goes on).
const KEEP: usize = 4096;

/// Other processes using more than this many CPUs' worth on average (or the host
/// stealing that much) disturb a run measured on a 2-CPU machine.
pub const BUSY_OTHERS: f64 = 0.05;

/// One CPU's stall: it did not run from `from` to `to`, give or take [`PERIOD`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub cpu: usize,
    pub from: MonoNanos,
    pub to: MonoNanos,
}

impl Stall {
    /// How long the CPU did not run (the wake-up's lateness).
    pub fn length_ns(&self) -> u64 {
        self.to.saturating_sub(self.from)
    }
}

/// The running sentinel; [`HostWatch::finish`] stops it.
pub struct HostWatch {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(Vec<Stall>, u64, bool)>>,
    cpu_at_start: Option<CpuUse>,
    /// The server under test when the run did not start it (a NATS server, an
    /// external router): its CPU is the system's, not competition.
    servers: Vec<i32>,
}

/// CPU time, in clock ticks, at one instant: of other processes, of the server under
/// test, and stolen by the host.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuUse {
    at: MonoNanos,
    others: u64,
    servers: u64,
    steal: u64,
}

impl CpuUse {
    /// Reads `/proc`: `None` where it cannot be read (the report then says nothing of
    /// other processes). `servers` and their descendants count as the server under
    /// test, not as others.
    fn now(servers: &[i32]) -> Option<CpuUse> {
        use procfs::CurrentSI;
        let steal = procfs::KernelStats::current()
            .ok()?
            .total
            .steal
            .unwrap_or(0);
        let procs: Vec<Proc> = procfs::process::all_processes()
            .ok()?
            .flatten()
            .filter_map(|p| p.stat().ok())
            .map(|st| Proc {
                pid: st.pid,
                ppid: st.ppid,
                kernel: st.flags & PF_KTHREAD != 0,
                // Reaped children's time lands in their parent's cutime / cstime.
                ticks: st.utime + st.stime + st.cutime.max(0) as u64 + st.cstime.max(0) as u64,
            })
            .collect();
        let me = std::process::id() as i32;
        let mut roots = vec![me];
        roots.extend_from_slice(servers);
        let others = others_ticks(&procs, &roots);
        let servers = if servers.is_empty() {
            0
        } else {
            // What the others and we leave: the servers' trees (ours is excluded).
            others_ticks(&procs, &[me]).saturating_sub(others)
        };
        Some(CpuUse {
            at: MonoNanos::now(),
            others,
            servers,
            steal,
        })
    }

    /// What other processes used and the host stole from `start` to `self`, as CPUs'
    /// worth on average (`ticks`: clock ticks per second).
    fn since(&self, start: &CpuUse, ticks: u64) -> Option<Competition> {
        let secs = self.at.saturating_sub(start.at) as f64 / 1e9;
        if secs <= 0.0 || ticks == 0 {
            return None;
        }
        let cpus = |a: u64, b: u64| a.saturating_sub(b) as f64 / ticks as f64 / secs;
        Some(Competition {
            others_cpus: cpus(self.others, start.others),
            steal_cpus: cpus(self.steal, start.steal),
            server_cpus: cpus(self.servers, start.servers),
            window_s: secs,
        })
    }
}

/// The kernel's flag of a kernel thread (`PF_KTHREAD` in `include/linux/sched.h`).
const PF_KTHREAD: u32 = 0x0020_0000;

/// One process as [`others_ticks`] sees it.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: i32,
    ppid: i32,
    kernel: bool,
    /// CPU time in clock ticks, its reaped children's included.
    ticks: u64,
}

/// The CPU ticks of the processes that are neither kernel threads nor one of `roots`
/// or their descendants.
fn others_ticks(procs: &[Proc], roots: &[i32]) -> u64 {
    let parent: std::collections::HashMap<i32, i32> =
        procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let ours = |mut pid: i32| {
        // Bounded walk up the tree (a pid reused mid-scan cannot loop it).
        for _ in 0..256 {
            if roots.contains(&pid) {
                return true;
            }
            match parent.get(&pid) {
                Some(&pp) if pp > 0 && pp != pid => pid = pp,
                _ => return false,
            }
        }
        false
    };
    procs
        .iter()
        .filter(|p| !p.kernel && !ours(p.pid))
        .map(|p| p.ticks)
        .sum()
}

/// What shared the CPUs with a run besides host stalls: other processes and the host's
/// steal time, each as CPUs' worth on average over the run (0.5: half a CPU). The
/// server under test, when the run found it by its port ([`HostWatch::start_all_serving`]),
/// is not among the others: its CPU is `server_cpus`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Competition {
    pub others_cpus: f64,
    pub steal_cpus: f64,
    pub server_cpus: f64,
    /// How long the watch lasted, s: below [`MIN_JUDGED_S`] the figures are not judged
    /// (`/proc` counts CPU time in ticks of 10 ms: one tick in a 5 ms watch reads as
    /// 2 CPUs).
    pub window_s: f64,
}

/// The shortest watch whose `/proc` figures are judged ([`Competition::disturbs`]).
pub const MIN_JUDGED_S: f64 = 1.0;

#[cfg(test)]
impl Competition {
    /// Other processes at `others_cpus` over a 10 s watch, nothing else (tests).
    pub(crate) fn others(others_cpus: f64) -> Competition {
        Competition {
            others_cpus,
            steal_cpus: 0.0,
            server_cpus: 0.0,
            window_s: 10.0,
        }
    }
}

#[cfg(test)]
impl StallSummary {
    /// No stall on 2 realtime-watched CPUs, and other processes at `others_cpus`
    /// (tests).
    pub(crate) fn others(others_cpus: f64) -> StallSummary {
        StallSummary {
            cpus: 2,
            realtime: true,
            count: 0,
            longest_ms: 0.0,
            total_ms: 0.0,
            competition: Some(Competition::others(others_cpus)),
        }
    }
}

impl Competition {
    /// Whether it is enough to disturb a measurement ([`BUSY_OTHERS`]).
    pub fn disturbs(&self) -> bool {
        self.window_s >= MIN_JUDGED_S
            && (self.others_cpus > BUSY_OTHERS || self.steal_cpus > BUSY_OTHERS)
    }

    /// One report sentence.
    pub fn sentence(&self) -> String {
        if self.window_s < MIN_JUDGED_S {
            return format!(
                "other processes' CPU not judged: the watch lasted {:.0} ms, and /proc counts \
                 CPU time in 10 ms ticks",
                self.window_s * 1e3
            );
        }
        let server = if self.server_cpus > 0.0 {
            format!(
                " (the server under test, {:.2} CPU, not counted among them)",
                self.server_cpus
            )
        } else {
            String::new()
        };
        // Three decimals: the limit is 0.05, and at two a 0.052 read "0.05" beside a
        // verdict of DISTURBED while another run's 0.048 read the same, quiet
        // (new-user pass).
        let what = format!(
            "other processes used {:.3} CPU on average{server}, the host stole {:.3} CPU",
            self.others_cpus, self.steal_cpus
        );
        if self.disturbs() {
            format!("DISTURBED: {what} (over {BUSY_OTHERS}): the run shared the machine")
        } else {
            what
        }
    }

    /// [`Competition::sentence`] after a line that already says DISTURBED (CPU
    /// stalls): the same facts without a second "DISTURBED:".
    fn sentence_after_disturbed(&self) -> String {
        let s = self.sentence();
        match s.strip_prefix("DISTURBED: ") {
            Some(rest) => format!("and {rest}"),
            None => s,
        }
    }
}

impl HostWatch {
    /// Starts one sentinel thread per CPU `0..cpus`. Never fails: a thread that cannot
    /// start is left out (the report then lists fewer CPUs).
    pub fn start(cpus: usize) -> HostWatch {
        HostWatch::start_with_servers(cpus, Vec::new())
    }

    fn start_with_servers(cpus: usize, servers: Vec<i32>) -> HostWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cpus)
            .filter_map(|cpu| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("host-watch-{cpu}"))
                    .spawn(move || watch(cpu, &stop))
                    .ok()
            })
            .collect();
        HostWatch {
            stop,
            threads,
            cpu_at_start: CpuUse::now(&servers),
            servers,
        }
    }

    /// Starts one sentinel per CPU of the machine (`/sys/devices/system/cpu/online`,
    /// or the CPUs this process may use if that cannot be read).
    pub fn start_all() -> HostWatch {
        HostWatch::start(online_cpus())
    }

    /// [`HostWatch::start_all`] for a run against a server it did not start (a NATS
    /// server, an external router) listening on one of `ports` on this machine: its
    /// processes' CPU is the system under test's, not competition (bench-review pass:
    /// a NATS run was always DISTURBED by nats-server's own work). Ports nothing here
    /// listens on change nothing.
    pub fn start_all_serving(ports: &[u16]) -> HostWatch {
        HostWatch::start_serving(online_cpus(), ports)
    }

    /// [`HostWatch::start`] with the server under test found by `ports`
    /// ([`HostWatch::start_all_serving`]); 0 CPUs: only what `/proc` says of other
    /// processes and the host, no sentinel thread (for the latency benches, whose
    /// measured threads a sentinel's wake-ups would preempt).
    pub fn start_serving(cpus: usize, ports: &[u16]) -> HostWatch {
        HostWatch::start_with_servers(cpus, listening_pids(ports))
    }

    /// Stops the sentinel and returns what it saw.
    pub fn finish(self) -> HostStalls {
        self.stop.store(true, Ordering::Relaxed);
        let competition = match (self.cpu_at_start, CpuUse::now(&self.servers)) {
            (Some(start), Some(end)) => end.since(&start, procfs::ticks_per_second()),
            _ => None,
        };
        let mut out = HostStalls {
            cpus: 0,
            realtime: true,
            stalls: Vec::new(),
            total: 0,
            competition,
        };
        for t in self.threads {
            if let Ok((stalls, total, realtime)) = t.join() {
                out.cpus += 1;
                out.realtime &= realtime;
                out.total += total;
                out.stalls.extend(stalls);
            }
        }
        out.stalls.sort_by_key(|s| s.from);
        out
    }
}

/// The processes with a TCP socket listening on one of `ports` (any local address).
fn listening_pids(ports: &[u16]) -> Vec<i32> {
    if ports.is_empty() {
        return Vec::new();
    }
    let inodes: std::collections::HashSet<u64> = [procfs::net::tcp(), procfs::net::tcp6()]
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.state == procfs::net::TcpState::Listen && ports.contains(&e.local_address.port())
        })
        .map(|e| e.inode)
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter(|p| {
            p.fd().is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    matches!(fd.target, procfs::process::FDTarget::Socket(i) if inodes.contains(&i))
                })
            })
        })
        .map(|p| p.pid)
        .collect()
}

/// The line under a ratio whose runs `disturbed` (their names) were not quiet: such a
/// ratio compares the machine, not the code. None when the list is empty. Every bench
/// that prints ratios says it in these words.
pub fn not_a_comparison(disturbed: &[&str]) -> Option<String> {
    (!disturbed.is_empty()).then(|| {
        format!(
            "^ not a comparison: {} ran DISTURBED (host line above); run again on a quiet machine",
            disturbed.join(" and ")
        )
    })
}

/// Sentinel thread body: returns (kept stalls, all stalls, ran at realtime priority).
fn watch(cpu: usize, stop: &AtomicBool) -> (Vec<Stall>, u64, bool) {
    let pinned = tickwire_rt::pin::pin_current_thread(cpu);
    let realtime = pinned && raise_to_realtime();
    let limit = (PERIOD + THRESHOLD).as_nanos() as u64;
    let mut stalls = Vec::new();
    let mut total = 0u64;
    let mut last = MonoNanos::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(PERIOD);
        let now = MonoNanos::now();
        if now.saturating_sub(last) > limit {
            total += 1;
            if stalls.len() < KEEP {
                stalls.push(Stall {
                    cpu,
                    from: last.add_duration(PERIOD),
                    to: now,
                });
            }
        }
        last = now;
    }
    (stalls, total, realtime)
}

/// SCHED_FIFO at the highest priority, if this process may (root or CAP_SYS_NICE).
fn raise_to_realtime() -> bool {
    use thread_priority::{RealtimeThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Max,
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
    )
    .is_ok()
}

fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// "0-1" or "0,2-3" -> the highest CPU number + 1 (sentinels go on 0..that).
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.split(',') {
        let hi = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        max = Some(max.map_or(hi, |m: usize| m.max(hi)));
    }
    max.map(|m| m + 1).filter(|&n| n <= 4096)
}

/// What the sentinel saw over a run.
#[derive(Debug, Clone, Default)]
pub struct HostStalls {
    /// CPUs watched.
    pub cpus: usize,
    /// Every sentinel ran at SCHED_FIFO (otherwise a busy thread may look like a stall).
    pub realtime: bool,
    /// The stalls kept, oldest first.
    pub stalls: Vec<Stall>,
    /// All stalls seen (the list keeps at most 4096 per CPU).
    pub total: u64,
    /// Other processes and steal time over the whole watch, when `/proc` could say.
    pub competition: Option<Competition>,
}

/// The stalls that overlap a window, summed up for a report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StallSummary {
    /// CPUs watched and whether the sentinel ran at realtime priority.
    pub cpus: usize,
    pub realtime: bool,
    /// Stalls longer than the threshold overlapping the window.
    pub count: usize,
    /// The longest one, in ms (0 when none).
    pub longest_ms: f64,
    /// All of them together (CPU-milliseconds lost).
    pub total_ms: f64,
    /// Other processes and the host's steal time over the whole watch (warm-up
    /// included), when `/proc` could say.
    pub competition: Option<Competition>,
}

impl HostStalls {
    /// The stalls overlapping `[from, to]`.
    pub fn within(&self, from: MonoNanos, to: MonoNanos) -> StallSummary {
        let hit: Vec<&Stall> = self
            .stalls
            .iter()
            .filter(|s| s.to >= from && s.from <= to)
            .collect();
        let ms = |ns: u64| ns as f64 / 1e6;
        StallSummary {
            cpus: self.cpus,
            realtime: self.realtime,
            count: hit.len(),
            longest_ms: ms(hit.iter().map(|s| s.length_ns()).max().unwrap_or(0)),
            total_ms: ms(hit.iter().map(|s| s.length_ns()).sum()),
            competition: self.competition,
        }
    }
}

/// How long before a second a stall still disturbs it: a message sent near a second's end
/// is still in flight, or queued, when a stall starting just after it hits.
pub const STALL_LEAD_NS: u64 = 50_000_000;
/// How long after a stall its backlog is assumed to take to drain.
pub const STALL_DRAIN_NS: u64 = 250_000_000;

impl HostStalls {
    /// For each of `seconds` seconds from `start` (second k is `[start + k s, start +
    /// (k+1) s)`), whether no stall touched it: none overlaps
    /// `[second start - STALL_DRAIN_NS, second end + STALL_LEAD_NS)`. Decided from the
    /// sentinels' clock alone, never from the latencies measured.
    pub fn stall_free_seconds(&self, start: MonoNanos, seconds: usize) -> Vec<bool> {
        (0..seconds as u64)
            .map(|k| {
                let from = start.as_nanos() + k * 1_000_000_000;
                let lo = from.saturating_sub(STALL_DRAIN_NS);
                let hi = from + 1_000_000_000 + STALL_LEAD_NS;
                !self
                    .stalls
                    .iter()
                    .any(|s| s.from.as_nanos() < hi && s.to.as_nanos() > lo)
            })
            .collect()
    }
}

/// Significant digits of the per-second timeline histograms (the summaries use 3;
/// 2 keeps a long run's per-second histograms small: ~30 KB per second).
const TIMELINE_SIGFIG: u8 = 2;
/// Highest latency the timeline tracks (larger values are clamped): 100 s.
pub const TIMELINE_MAX_NS: u64 = 100_000_000_000;

/// An empty per-second timeline histogram (1 ns .. 100 s, 2 significant digits), the
/// kind [`StallFree::from_timeline`] merges.
pub fn timeline_histogram() -> Option<hdrhistogram::Histogram<u64>> {
    hdrhistogram::Histogram::new_with_bounds(1, TIMELINE_MAX_NS, TIMELINE_SIGFIG).ok()
}

/// The latency of the measured seconds that no host stall touched
/// ([`HostStalls::stall_free_seconds`]): the figure a p99 comparison can use on a
/// machine whose host takes CPUs away (docs/benchmarking.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StallFree {
    /// Measured seconds kept, and of how many.
    pub seconds: usize,
    pub of: usize,
    /// The deliveries of the kept seconds (their per-second histograms have 2
    /// significant digits); None when no kept second had any.
    pub latency: Option<Summary>,
}

impl StallFree {
    /// Merges the per-second histograms `timeline[k]` for `k` in `measured` whose
    /// second is stall-free (`free[k]`).
    pub fn from_timeline(
        timeline: &[Option<hdrhistogram::Histogram<u64>>],
        measured: std::ops::Range<usize>,
        free: &[bool],
    ) -> StallFree {
        let mut merged = Latency::new();
        let mut kept = 0;
        for k in measured.clone() {
            if !free.get(k).copied().unwrap_or(false) {
                continue;
            }
            kept += 1;
            if let Some(h) = timeline.get(k).and_then(Option::as_ref) {
                merged.merge(&Latency { hist: h.clone() });
            }
        }
        StallFree {
            seconds: kept,
            of: measured.len(),
            latency: (!merged.is_empty()).then(|| merged.summary()),
        }
    }

    /// One report line.
    pub fn line(&self) -> String {
        match &self.latency {
            Some(l) => format!(
                // From the per-second histograms (2 significant digits): even with every
                // second kept its figures differ a little from the table's (new-user
                // pass read that as a contradiction).
                "stall-free: {} of {} untouched by a host stall, {}: mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs (from the per-second histograms, 2 significant digits)",
                self.seconds,
                count(self.of as u64, "measured second", "measured seconds"),
                count(l.samples, "delivery", "deliveries"),
                l.mean_us,
                l.p50_us,
                l.p99_us,
                l.p999_us
            ),
            None if self.of == 1 => {
                "stall-free: the one measured second was touched by a host stall".to_string()
            }
            None => format!(
                "stall-free: none of the {} measured seconds was untouched by a host stall",
                self.of
            ),
        }
    }
}

impl StallSummary {
    /// Whether the host stalled a CPU or other work shared the machine: the figures
    /// measured then are the machine's, not the code's.
    pub fn disturbed(&self) -> bool {
        self.count > 0 || self.competition.is_some_and(|c| c.disturbs())
    }

    /// One report line: what the sentinel saw `during` (e.g. "the measured part"), and
    /// what it means for the figures.
    pub fn line(&self, during: &str) -> String {
        let how = if self.realtime {
            "one SCHED_FIFO sentinel per CPU"
        } else {
            "one sentinel per CPU, NOT realtime (not root): a busy thread can look like a stall"
        };
        let stalls = if self.count == 0 {
            format!(
                "host: no CPU stall over {} ms during {during} ({how}, {} CPUs)",
                THRESHOLD.as_millis(),
                self.cpus
            )
        } else {
            format!(
                "host: DISTURBED: {} during {during}, longest {:.1} ms, \
                 {:.1} CPU-ms in all ({how}, {} CPUs): the host did not run a CPU of this \
                 machine; the percentiles above include the delay",
                count(self.count as u64, "CPU stall", "CPU stalls"),
                self.longest_ms,
                self.total_ms,
                self.cpus
            )
        };
        match &self.competition {
            Some(c) if self.count > 0 => format!("{stalls}; {}", c.sentence_after_disturbed()),
            Some(c) => format!("{stalls}; {}", c.sentence()),
            None => stalls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bench-review pass: the sweep table called a run "quiet" when its host line said
    /// DISTURBED for other processes' CPU; both now ask `disturbed`, which counts
    /// stalls and competition alike.
    #[test]
    fn competition_alone_disturbs_a_run() {
        let quiet = StallSummary::others(0.01);
        assert!(!quiet.disturbed());
        assert!(StallSummary::others(0.98).disturbed());
        let stalled = StallSummary { count: 1, ..quiet };
        assert!(stalled.disturbed());
    }

    fn stall(cpu: usize, from_ms: u64, to_ms: u64) -> Stall {
        Stall {
            cpu,
            from: MonoNanos(from_ms * 1_000_000),
            to: MonoNanos(to_ms * 1_000_000),
        }
    }

    #[test]
    fn a_second_is_disturbed_by_a_stall_inside_it_just_after_it_or_draining_into_it() {
        let h = HostStalls {
            cpus: 2,
            realtime: true,
            // Inside second 1; 30 ms after second 3 ends (within the lead); ending
            // 200 ms before second 7 starts (within the 250 ms drain).
            stalls: vec![
                stall(0, 1_400, 1_500),
                stall(1, 4_030, 4_130),
                stall(0, 6_700, 6_800),
            ],
            total: 3,
            competition: None,
        };
        let free = h.stall_free_seconds(MonoNanos(0), 9);
        // 0: clear; 1: inside; 2: clear (the first drained by 1.75 s); 3: the second
        // starts within the lead after it; 4: inside; 5: clear; 6: inside; 7: the
        // third's drain reaches 7.05 s; 8: clear.
        assert_eq!(
            free,
            [true, false, true, false, false, true, false, false, true]
        );
        let none = HostStalls::default().stall_free_seconds(MonoNanos(5), 3);
        assert_eq!(none, [true, true, true]);
    }

    #[test]
    fn stall_free_latency_merges_only_the_kept_measured_seconds() {
        let sec = |v: u64, n: u64| {
            let mut h =
                hdrhistogram::Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 2).unwrap();
            h.record_n(v, n).unwrap();
            Some(h)
        };
        // Second 0 is warm-up, 2 is disturbed (a 50 ms value), 1 and 3 are kept (1 µs
        // and 2 µs); second 4 has no samples.
        let timeline = vec![
            sec(9_000_000, 10),
            sec(1_000, 50),
            sec(50_000_000, 50),
            sec(2_000, 50),
            None,
        ];
        let free = [true, true, false, true, true];
        let f = StallFree::from_timeline(&timeline, 1..5, &free);
        let l = f.latency.clone().expect("kept seconds have samples");
        assert_eq!((f.seconds, f.of, l.samples), (3, 4, 100));
        // 2 significant digits: a value reads back as the top of its bucket.
        let near = |v: f64, want: f64| (v - want).abs() < want * 0.01;
        assert!(near(l.p50_us, 1.0), "{}", l.p50_us);
        assert!(near(l.p99_us, 2.0), "{}", l.p99_us);
        assert!(f.line().contains("3 of 4 measured seconds"), "{}", f.line());
        let one = StallFree::from_timeline(&timeline, 1..2, &free);
        assert!(
            one.line().contains("1 of 1 measured second untouched"),
            "{}",
            one.line()
        );
        let none = StallFree::from_timeline(&timeline, 1..3, &[false; 5]);
        assert_eq!((none.seconds, &none.latency), (0, &None));
        assert!(none.line().contains("none of the 2"), "{}", none.line());
    }

    #[test]
    fn a_window_counts_the_stalls_that_overlap_it() {
        let h = HostStalls {
            cpus: 2,
            realtime: true,
            stalls: vec![stall(0, 100, 200), stall(1, 450, 550), stall(0, 900, 1000)],
            total: 3,
            competition: None,
        };
        let s = h.within(MonoNanos(150_000_000), MonoNanos(500_000_000));
        assert_eq!(s.count, 2);
        assert_eq!(s.longest_ms, 100.0);
        assert_eq!(s.total_ms, 200.0);
        assert!(
            s.line("the run").contains("DISTURBED: 2 CPU stalls"),
            "{}",
            s.line("the run")
        );
        // Stalls and busy neighbours: one DISTURBED, both facts (it said it twice).
        let mut busy = h.within(MonoNanos(150_000_000), MonoNanos(500_000_000));
        busy.competition = Some(Competition::others(0.3));
        let line = busy.line("the run");
        assert_eq!(line.matches("DISTURBED").count(), 1, "{line}");
        assert!(
            line.contains("; and other processes used 0.300 CPU on average"),
            "{line}"
        );
        let none = h.within(MonoNanos(600_000_000), MonoNanos(800_000_000));
        assert_eq!(none.count, 0);
        assert!(
            none.line("the run").starts_with("host: no CPU stall"),
            "{}",
            none.line("the run")
        );
    }

    #[test]
    fn competition_is_reported_and_disturbs_above_the_threshold() {
        let start = CpuUse {
            at: MonoNanos(0),
            others: 1_000,
            servers: 0,
            steal: 50,
        };
        // 2 s at 100 ticks per second: 90 ticks of others = 0.45 CPU; 2 of steal.
        let end = CpuUse {
            at: MonoNanos(2_000_000_000),
            others: 1_090,
            servers: 130,
            steal: 52,
        };
        let c = end.since(&start, 100).unwrap();
        assert!((c.others_cpus - 0.45).abs() < 1e-9, "{c:?}");
        assert!((c.steal_cpus - 0.01).abs() < 1e-9, "{c:?}");
        assert!((c.server_cpus - 0.65).abs() < 1e-9, "{c:?}");
        assert!(
            c.sentence()
                .contains("(the server under test, 0.65 CPU, not counted among them)"),
            "{}",
            c.sentence()
        );
        assert!(c.disturbs());
        let mut h = HostStalls {
            cpus: 2,
            realtime: true,
            stalls: Vec::new(),
            total: 0,
            competition: Some(c),
        };
        let line = h.within(MonoNanos(0), MonoNanos(1)).line("the run");
        assert!(
            line.starts_with("host: no CPU stall")
                && line.contains("DISTURBED: other processes used 0.450 CPU on average"),
            "{line}"
        );
        // A quiet machine: said, not flagged.
        h.competition = Some(Competition::others(0.01));
        let line = h.within(MonoNanos(0), MonoNanos(1)).line("the run");
        assert!(!line.contains("DISTURBED"), "{line}");
        assert!(line.contains("other processes used 0.010 CPU"), "{line}");
        // Either side of the limit reads differently (0.052 and 0.048 both read 0.05).
        for (cpus, disturbed) in [(0.052, true), (0.048, false)] {
            h.competition = Some(Competition::others(cpus));
            let line = h.within(MonoNanos(0), MonoNanos(1)).line("the run");
            assert_eq!(line.contains("DISTURBED"), disturbed, "{line}");
            assert!(line.contains(&format!("used {cpus:.3} CPU")), "{line}");
        }
        // One tick of another process in a 5 ms watch would read as 2 CPUs: a watch
        // under MIN_JUDGED_S is not judged.
        let short = CpuUse {
            at: MonoNanos(5_000_000),
            others: 1_001,
            ..start
        };
        let c = short.since(&start, 100).unwrap();
        assert!(!c.disturbs(), "{c:?}");
        assert!(
            c.sentence().contains("not judged: the watch lasted 5 ms"),
            "{}",
            c.sentence()
        );
        // No time passed, or no clock ticks: nothing to say.
        assert_eq!(start.since(&start, 100), None);
        assert_eq!(end.since(&start, 0), None);
    }

    #[test]
    fn others_are_every_process_but_ours_and_kernel_threads() {
        let p = |pid, ppid, kernel, ticks| Proc {
            pid,
            ppid,
            kernel,
            ticks,
        };
        let procs = [
            p(1, 0, false, 1),         // init: another process
            p(2, 0, true, 1_000),      // kthreadd
            p(30, 2, true, 2_000),     // a kernel worker
            p(100, 1, false, 10),      // a shell: another process
            p(200, 100, false, 7_000), // the bench (me)
            p(201, 200, false, 5_000), // its router child
            p(202, 201, false, 300),   // a grandchild
            p(300, 100, false, 40),    // a build beside it
            p(301, 300, false, 500),   // the build's compiler
        ];
        assert_eq!(others_ticks(&procs, &[200]), 1 + 10 + 40 + 500);
        // Seen from the build, the bench and its children are the others.
        assert_eq!(others_ticks(&procs, &[300]), 1 + 10 + 7_000 + 5_000 + 300);
        // A pid whose parent is missing (exited mid-scan) is not ours.
        assert_eq!(others_ticks(&[p(5, 4, false, 9)], &[200]), 9);
        // A server under test (the build's tree standing in for it) is not "others".
        assert_eq!(others_ticks(&procs, &[200, 300]), 1 + 10);
    }

    /// The server under test is found by its listening port: here a listener of this
    /// very process (so "ours" twice over); a port nothing listens on finds nothing.
    #[test]
    fn servers_are_found_by_their_listening_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listening_pids(&[port]), vec![std::process::id() as i32]);
        drop(l);
        assert!(listening_pids(&[port]).is_empty());
        assert!(listening_pids(&[]).is_empty());
    }

    #[test]
    fn the_watch_reads_proc() {
        let w = HostWatch::start(1);
        std::thread::sleep(Duration::from_millis(30));
        let c = w.finish().competition.expect("/proc is readable on Linux");
        assert!(c.others_cpus >= 0.0 && c.steal_cpus >= 0.0, "{c:?}");
    }

    #[test]
    fn cpu_lists_give_the_number_of_cpus_to_watch() {
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0,2-3"), Some(4));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn a_quiet_sentinel_starts_and_stops() {
        let w = HostWatch::start(1);
        std::thread::sleep(Duration::from_millis(30));
        let h = w.finish();
        assert_eq!(h.cpus, 1);
        // A stall may happen on a shared machine; the list and the count agree.
        assert_eq!(h.total as usize, h.stalls.len());
    }
}
