//! The fan-out report: terminal tables, JSON (the [`Report`] itself) and the SVG plot.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::measure::{PubResult, SubResult, MAX_BEHIND_NS};
use super::workload::{human_rate, subscriber_topics, Target, Workload};
use crate::report::{latency_table, line_chart_svg, Machine, Series};
use crate::schedule::{RatePattern, Schedule};
use crate::stats::{invalid_reason, Counters, Latency, Summary};
use tickwire_rt::IdleStrategy;

/// The system under test and how it runs.
#[derive(Debug, Clone, Serialize)]
pub struct RouterInfo {
    /// "tickwire" or "NATS".
    pub system: &'static str,
    /// tickwire: where the router listens.
    pub addr: Option<SocketAddr>,
    /// NATS: the server URL.
    pub url: Option<String>,
    /// Started by this bench (a `tickwire router` child process).
    pub started_by_bench: bool,
    /// The router's idle strategy, when the bench started it.
    pub idle: Option<String>,
    /// The router's CPU, when the bench started it pinned.
    pub cpu: Option<usize>,
    pub command: Option<String>,
    /// `shm:NAME` when the tickwire clients connect over shared memory (`--shm`).
    pub shm: Option<String>,
}

impl RouterInfo {
    pub fn nats(url: &str) -> RouterInfo {
        RouterInfo {
            system: "NATS",
            addr: None,
            url: Some(url.to_owned()),
            started_by_bench: false,
            idle: None,
            cpu: None,
            command: None,
            shm: None,
        }
    }
    pub fn external(r: &crate::harness::ExternalRouter) -> RouterInfo {
        let (addr, shm) = match r {
            crate::harness::ExternalRouter::Tcp(a) => (Some(*a), None),
            crate::harness::ExternalRouter::Shm(_) => (None, Some(r.to_string())),
        };
        RouterInfo {
            system: "tickwire",
            addr,
            url: None,
            started_by_bench: false,
            idle: None,
            cpu: None,
            command: None,
            shm,
        }
    }
    pub fn started(addr: SocketAddr, idle: &str, cpu: Option<usize>, command: &str) -> RouterInfo {
        RouterInfo {
            system: "tickwire",
            addr: Some(addr),
            url: None,
            started_by_bench: true,
            idle: Some(idle.to_owned()),
            cpu,
            command: Some(command.to_owned()),
            shm: None,
        }
    }
    /// The same, for the raw fan-out floor's relay.
    pub fn raw_floor(self) -> RouterInfo {
        RouterInfo {
            system: "raw",
            ..self
        }
    }
    pub fn addr_or_err(&self) -> anyhow::Result<SocketAddr> {
        self.addr
            .ok_or_else(|| anyhow::anyhow!("no router address"))
    }
    /// Where tickwire clients connect: `shm:NAME` with `--shm`, else `HOST:PORT`.
    pub fn client_addr(&self) -> anyhow::Result<String> {
        match &self.shm {
            Some(n) => Ok(n.clone()),
            None => Ok(self.addr_or_err()?.to_string()),
        }
    }

    fn describe(&self) -> String {
        match (&self.url, self.addr) {
            (Some(url), _) => format!(
                "core NATS server at {url} (started outside the bench; its pinning is not known)"
            ),
            (None, Some(addr)) if self.started_by_bench => format!(
                "{} at {addr}, started by the bench: idle={}, {}{}",
                if self.system == "raw" {
                    "raw fan-out relay (the floor: frames copied to a fixed table, no protocol)"
                } else {
                    "tickwire router"
                },
                self.idle.as_deref().unwrap_or("?"),
                self.cpu
                    .map_or("not pinned".to_owned(), |c| format!("pinned to CPU {c}")),
                self.shm.as_deref().map_or(String::new(), |n| format!(
                    "; clients connect over shared memory ({n})"
                )),
            ),
            (None, Some(addr)) => format!(
                "tickwire router at {addr} (external: its idle strategy and pinning are not known)"
            ),
            (None, None) => match &self.shm {
                Some(shm) => format!(
                    "tickwire router at {shm} (external, over shared memory: its idle strategy \
                     and pinning are not known)"
                ),
                None => "unknown".into(),
            },
        }
    }
}

/// How the measuring process ran.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    /// The measuring process's CPU (every thread), when pinned.
    pub bench_cpu: Option<usize>,
    /// The router's CPU, when the bench started it pinned.
    pub router_cpu: Option<usize>,
    pub client_idle: IdleStrategy,
    pub batch_bytes: usize,
    /// Publisher write coalescing window (`--coalesce-us`; 0: none).
    pub coalesce_us: u64,
    pub publisher_pacing: &'static str,
    /// Extra IO threads the NATS client runs (tokio workers).
    pub nats_io_threads: Option<usize>,
}

/// One row of the per-second timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the start of the run (warm-up included).
    pub second: u64,
    pub phase: Phase,
    /// Messages scheduled in this second (msg/s).
    pub target_rate: f64,
    /// Messages actually sent in this second (msg/s).
    pub achieved_rate: f64,
    /// Deliveries whose intended send time falls in this second, and their latency
    /// (2 significant digits).
    pub samples: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
}

/// Which part of the run a timeline second belongs to (by its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Warmup,
    Measure,
    /// Past the schedule's end: only late sends (a lagging sender) land here.
    AfterEnd,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Warmup => "warm-up",
            Phase::Measure => "measure",
            Phase::AfterEnd => "late",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SizeRow {
    pub size: usize,
    pub latency: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rates {
    /// Mean target send rate of the measured part (msg/s).
    pub target: f64,
    /// Measured messages sent / time they took (msg/s).
    pub achieved: f64,
    /// Deliveries per second to all subscribers at the target rate.
    pub target_deliveries: f64,
    pub measured_seconds: f64,
    pub measured_sent: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CorrectnessCounters {
    /// `sent`: messages published (warm-up included); `received`: deliveries to all
    /// subscribers; `gaps` / `duplicates` / `out_of_order` per (publisher, topic).
    #[serde(flatten)]
    pub counters: Counters,
    /// Deliveries due: for every message sent, one per subscriber of its topic.
    pub expected: u64,
    /// Messages the router told subscribers it discarded (slow consumer).
    pub discarded: u64,
    /// Messages that did not decode or arrived on the wrong topic.
    pub malformed: u64,
    /// received == expected, nothing lost, duplicated, reordered or malformed.
    pub reconciled: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SubscriberRow {
    pub subscriber: usize,
    pub topics: usize,
    pub expected: u64,
    #[serde(flatten)]
    pub counters: Counters,
    pub discarded: u64,
    pub malformed: u64,
    pub latency: Summary,
}

/// Everything the run measured; serialized as the `--json` document.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub machine: Machine,
    pub command: Vec<String>,
    /// "SCALED: 0.05 x published rates" when --scale is not 1.
    pub scaled: Option<String>,
    pub system: &'static str,
    pub router: RouterInfo,
    pub layout: Layout,
    pub workload: Workload,
    pub topic_example: String,
    /// Latency is one-way from the intended send time to receipt, one clock.
    pub metric: &'static str,
    pub warmup_excluded_seconds: f64,
    pub stopped_by_user: bool,
    pub valid: bool,
    /// Why the run is INVALID (saturated), if it is.
    pub invalid: Option<String>,
    pub rates: Rates,
    pub latency: Summary,
    pub latency_by_size: Vec<SizeRow>,
    pub sender_lateness: Summary,
    /// Per-hop latency from in-line stamps (tickwire `--hops`): publisher -> router,
    /// inside the router, router -> subscriber.
    pub hops: Option<Vec<(String, Summary)>>,
    pub counters: CorrectnessCounters,
    pub subscribers: Vec<SubscriberRow>,
    pub timeline: Vec<Second>,
    /// The router's own counters (`tickwire stats`), tickwire only.
    pub router_stats: Option<serde_json::Value>,
    /// Errors and give-ups from the threads.
    pub problems: Vec<String>,
    /// CPU stalls of the machine itself during the measured part (crate::host_watch);
    /// set by the driver after `build`.
    pub host: Option<crate::host_watch::StallSummary>,
    /// The latency of the measured seconds no host stall touched; set by the driver
    /// after `build`.
    pub stall_free: Option<crate::host_watch::StallFree>,
    /// The receiver rule's verdict (docs/benchmarking.md, "Sustained: the sender rule
    /// and the receiver rule"); set by the driver after `build`.
    pub receivers: Option<ReceiverVerdict>,
}

/// Latency growth allowed by the receiver rule: the last measured second's p50 may be
/// at most this many times the reference second's...
pub const GROWTH_FACTOR: f64 = 2.0;
/// ...plus this much (µs), so that microsecond-level jitter is not called growth.
pub const GROWTH_SLACK_US: f64 = 100.0;

/// Did the receivers keep up? (The sender rule, `valid`, only asks whether the
/// publishers sent at >= 90% of the target rate: a run whose deliveries queue up
/// behind the router passes it.)
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReceiverVerdict {
    /// All three checks below hold.
    pub sustained: bool,
    /// 1. Latency did not grow over the run; `growth` is None (not judged, passes) with
    ///    fewer than two measured seconds at the last second's rate.
    pub no_growth: bool,
    pub growth: Option<Growth>,
    /// 2. The measured part's p99 is within the stated bound (`--max-p99`).
    pub p99_within_bound: bool,
    pub p99_us: f64,
    pub p99_bound_us: f64,
    /// 3. Every delivery arrived (counters reconcile: nothing discarded or lost).
    pub all_delivered: bool,
    /// Why not, in words.
    pub reason: Option<String>,
}

/// The two seconds the growth check compares: the last measured second with samples
/// and the first measured second at the same target rate (bursty patterns alternate
/// rates: like is compared with like).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Growth {
    pub last_second: u64,
    pub last_p50_us: f64,
    pub reference_second: u64,
    pub reference_p50_us: f64,
    /// GROWTH_FACTOR x reference p50 + GROWTH_SLACK_US.
    pub limit_us: f64,
}

impl ReceiverVerdict {
    /// Applies the receiver rule to a run's per-second timeline and figures.
    pub fn judge(
        timeline: &[Second],
        p99_us: f64,
        p99_bound_us: f64,
        reconciled: bool,
    ) -> ReceiverVerdict {
        let measured: Vec<(u64, f64, f64)> = timeline
            .iter()
            .filter(|s| s.phase == Phase::Measure)
            .filter_map(|s| s.p50_us.map(|p50| (s.second, s.target_rate, p50)))
            .collect();
        let growth = measured.last().and_then(|&(last, rate, last_p50)| {
            let &(reference, _, ref_p50) = measured
                .iter()
                .find(|(_, r, _)| (r - rate).abs() <= 0.01 * rate.max(1.0))?;
            (reference != last).then_some(Growth {
                last_second: last,
                last_p50_us: last_p50,
                reference_second: reference,
                reference_p50_us: ref_p50,
                limit_us: GROWTH_FACTOR * ref_p50 + GROWTH_SLACK_US,
            })
        });
        let no_growth = growth.is_none_or(|g| g.last_p50_us <= g.limit_us);
        let p99_within_bound = p99_us <= p99_bound_us;
        let mut why = Vec::new();
        if let Some(g) = growth.filter(|_| !no_growth) {
            why.push(format!(
                "latency grew: p50 {:.0} µs in second {} vs {:.0} µs in second {} (limit {:.0} µs)",
                g.last_p50_us, g.last_second, g.reference_p50_us, g.reference_second, g.limit_us
            ));
        }
        if !p99_within_bound {
            why.push(format!(
                "p99 {p99_us:.0} µs above the bound {p99_bound_us:.0} µs"
            ));
        }
        if !reconciled {
            why.push("deliveries lost, discarded or duplicated".into());
        }
        ReceiverVerdict {
            sustained: no_growth && p99_within_bound && reconciled,
            no_growth,
            growth,
            p99_within_bound,
            p99_us,
            p99_bound_us,
            all_delivered: reconciled,
            reason: (!why.is_empty()).then(|| why.join("; ")),
        }
    }

    /// The report line.
    pub fn line(&self) -> String {
        let growth = match self.growth {
            Some(g) => format!(
                "p50 {:.0} µs in second {} vs {:.0} µs in second {} (same target rate; limit {:.0} µs)",
                g.last_p50_us, g.last_second, g.reference_p50_us, g.reference_second, g.limit_us
            ),
            None => "growth not judged (one measured second at the last second's rate)".into(),
        };
        format!(
            "receivers: {growth}; p99 {:.0} µs (bound {:.0} µs); {} -> {}",
            self.p99_us,
            self.p99_bound_us,
            if self.all_delivered {
                "all delivered"
            } else {
                "NOT all delivered"
            },
            match &self.reason {
                None => "sustained".to_owned(),
                Some(why) => format!("NOT SUSTAINED ({why})"),
            }
        )
    }
}

/// The scaling banner, when scaled.
fn scaled_banner(w: &Workload) -> Option<String> {
    (w.scale != 1.0).then(|| format!("SCALED: {} x published rates", w.scale))
}

fn pattern_text(p: &RatePattern) -> String {
    match *p {
        RatePattern::Steady { rate } => format!("{} msg/s steady", human_rate(rate)),
        RatePattern::Bursts { base, burst } => format!(
            "{} msg/s + {} msg/s bursts in odd seconds ({} / {} msg/s)",
            human_rate(base),
            human_rate(burst),
            human_rate(base),
            human_rate(base + burst)
        ),
    }
}

fn mix_text(w: &Workload) -> String {
    let parts: Vec<String> = w
        .mix
        .parts
        .iter()
        .map(|(s, wt)| format!("{s}:{wt}"))
        .collect();
    parts.join(",")
}

fn banner_lines(out: &mut dyn std::io::Write, text: &str) {
    let bar = "#".repeat(text.len() + 8);
    crate::outln!(out, "{bar}\n### {text} ###\n{bar}");
}

/// What is about to run (printed before the connections are made).
pub fn print_header(
    out: &mut dyn std::io::Write,
    w: &Workload,
    target: &Target,
    router: &RouterInfo,
    layout: &Layout,
) {
    if let Some(s) = scaled_banner(w) {
        banner_lines(out, &s);
    }
    let preset = w
        .preset
        .map_or("custom".to_owned(), |p| format!("{p:?}").to_lowercase());
    crate::outln!(
        out,
        "tickwire bench fanout ({preset}) against {}",
        target.name()
    );
    crate::outln!(out, "system:    {}", router.describe());
    let unscaled = format!(
        "{}{}",
        human_rate(w.published_rate),
        if w.published_burst > 0.0 {
            format!(" + {} bursts", human_rate(w.published_burst))
        } else {
            String::new()
        }
    );
    let origin = match w.preset {
        Some(_) => format!("{}x the published {unscaled}", w.scale),
        None => format!("{}x {unscaled}", w.scale),
    };
    crate::outln!(
        out,
        "workload:  {} ({origin}), mix {}",
        pattern_text(&w.pattern),
        mix_text(w)
    );
    crate::outln!(out,
        "           {} publishers x {} topics ({} bytes, e.g. {}) x {} subscribers, each on {} topic(s)",
        w.publishers,
        w.topics,
        w.topic_len,
        w.topic_names().first().map_or("", |s| s.as_str()),
        w.subscribers,
        w.sub_topics
    );
    crate::outln!(
        out,
        "           warm-up {:.1} s (excluded from latency), measured {:.1} s",
        w.warmup_ns as f64 / 1e9,
        w.duration_ns as f64 / 1e9
    );
    crate::outln!(
        out,
        "layout:    measuring process {}; {} {}; subscribers {}; publishers open loop ({}){}",
        layout
            .bench_cpu
            .map_or("not pinned".to_owned(), |c| format!("on CPU {c}")),
        match target {
            Target::Nats { .. } => "NATS server",
            Target::Tickwire { .. } => "router",
            Target::Raw => "relay",
        },
        layout
            .router_cpu
            .map_or("not pinned by the bench".to_owned(), |c| format!(
                "on CPU {c}"
            )),
        layout.client_idle.name(),
        match layout.coalesce_us {
            0 => layout.publisher_pacing.to_owned(),
            us => format!(
                "{}; writes coalesced within {us} µs",
                layout.publisher_pacing
            ),
        },
        layout.nats_io_threads.map_or(String::new(), |n| format!(
            "; NATS client IO on {n} tokio worker threads"
        ))
    );
    crate::outln!(out);
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        machine: Machine,
        w: &Workload,
        schedule: &Schedule,
        router: &RouterInfo,
        layout: &Layout,
        pubs: &[PubResult],
        subs: &[SubResult],
        timeline: Vec<Option<Histogram<u64>>>,
        router_stats: Option<serde_json::Value>,
        stopped_by_user: bool,
    ) -> Report {
        let end = schedule.end_ns();
        // Where the measured window ends: the schedule's end, or Ctrl-C.
        let t_end = pubs
            .iter()
            .filter_map(|p| p.stopped_at_rel_ns)
            .min()
            .map_or(end, |s| s.min(end));
        let measured_ns = t_end.saturating_sub(w.warmup_ns);
        let target = if t_end < end {
            w.pattern.mean_rate(w.warmup_ns, t_end)
        } else {
            schedule.target_rate()
        };
        let measured_sent: u64 = pubs.iter().map(|p| p.measured_sent).sum();
        let last_send = pubs.iter().map(|p| p.last_send_rel_ns).max().unwrap_or(0);
        let took_ns = t_end.max(last_send).saturating_sub(w.warmup_ns);
        let achieved = if took_ns > 0 {
            measured_sent as f64 / (took_ns as f64 / 1e9)
        } else {
            0.0
        };
        let mut problems: Vec<String> = pubs.iter().filter_map(|p| p.problem.clone()).collect();
        problems.extend(subs.iter().filter_map(|s| s.problem.clone()));
        for (i, s) in subs.iter().enumerate() {
            if s.drain_timed_out {
                problems.push(format!(
                    "subscriber {i}: stopped waiting after {:?} without a message ({} of {} received)",
                    super::measure::DRAIN_IDLE,
                    s.counters.received,
                    s.expected
                ));
            }
        }
        let mut invalid = if measured_ns == 0 {
            None
        } else {
            invalid_reason(target, achieved)
        };
        if invalid.is_none()
            && pubs
                .iter()
                .any(|p| p.problem.as_deref().is_some_and(|m| m.contains("gave up")))
        {
            invalid = Some(format!(
                "a publisher fell more than {} s behind its schedule and gave up: saturated",
                MAX_BEHIND_NS / 1_000_000_000
            ));
        }

        let mut overall = Latency::new();
        let mut by_size: Vec<Latency> = w.mix.parts.iter().map(|_| Latency::new()).collect();
        let mut counters = Counters::default();
        let (mut discarded, mut malformed, mut expected) = (0, 0, 0);
        let mut rows = Vec::new();
        for (i, s) in subs.iter().enumerate() {
            overall.merge(&s.overall);
            for (acc, l) in by_size.iter_mut().zip(&s.per_size) {
                acc.merge(l);
            }
            counters.add(&s.counters);
            discarded += s.discarded;
            malformed += s.malformed;
            expected += s.expected;
            rows.push(SubscriberRow {
                subscriber: i,
                topics: subscriber_topics(i, w.topics, w.sub_topics).count(),
                expected: s.expected,
                counters: s.counters,
                discarded: s.discarded,
                malformed: s.malformed,
                latency: s.overall.summary(),
            });
        }
        counters.sent = pubs.iter().map(|p| p.sent).sum();
        let reconciled = counters.received == expected
            && counters.gaps == 0
            && counters.duplicates == 0
            && counters.out_of_order == 0
            && malformed == 0;
        let mut hops: Option<[Latency; 3]> = None;
        for s in subs {
            if let Some(h) = &s.hops {
                let acc = hops.get_or_insert_with(Default::default);
                for (a, x) in acc.iter_mut().zip(h) {
                    a.merge(x);
                }
            }
        }
        let hops = hops.map(|h| {
            let names = [
                "publisher -> router",
                "inside the router",
                "router -> subscriber",
            ];
            names
                .iter()
                .zip(&h)
                .map(|(n, l)| (n.to_string(), l.summary()))
                .collect()
        });
        let mut lateness = Latency::new();
        for p in pubs {
            lateness.merge(&p.lateness);
        }

        // Per-second timeline over the whole run (and any catch-up past its end).
        let mut sent_per_sec: Vec<u64> = Vec::new();
        for p in pubs {
            if sent_per_sec.len() < p.per_second.len() {
                sent_per_sec.resize(p.per_second.len(), 0);
            }
            for (acc, n) in sent_per_sec.iter_mut().zip(&p.per_second) {
                *acc += n;
            }
        }
        // Up to the schedule's end, or the stop (the seconds a stopped run never
        // reached are not listed: new-user pass, they read as seconds of nothing
        // delivered), and any second with sends or deliveries.
        let seconds = t_end
            .div_ceil(1_000_000_000)
            .max(sent_per_sec.len() as u64)
            .max(timeline.len() as u64);
        let mut tl = Vec::new();
        for sec in 0..seconds {
            let from = sec * 1_000_000_000;
            let to = (from + 1_000_000_000).min(t_end);
            let target_rate = if to > from {
                w.pattern.rate_at(from) * (to - from) as f64 / 1e9
            } else {
                0.0
            };
            let h = timeline.get(sec as usize).and_then(|h| h.as_ref());
            let us = |v: u64| v as f64 / 1e3;
            tl.push(Second {
                second: sec,
                phase: if from >= t_end {
                    Phase::AfterEnd
                } else if from < w.warmup_ns {
                    Phase::Warmup
                } else {
                    Phase::Measure
                },
                target_rate,
                achieved_rate: sent_per_sec.get(sec as usize).copied().unwrap_or(0) as f64,
                samples: h.map_or(0, |h| h.len()),
                p50_us: h.map(|h| us(h.value_at_quantile(0.5))),
                p99_us: h.map(|h| us(h.value_at_quantile(0.99))),
                max_us: h.map(|h| us(h.max())),
            });
        }

        let sub_share: u64 = (0..w.topics).map(|t| w.subscribers_of(t)).sum();
        Report {
            bench: "fanout",
            machine,
            command: std::env::args().collect(),
            scaled: scaled_banner(w),
            system: router.system,
            router: router.clone(),
            layout: layout.clone(),
            workload: w.clone(),
            topic_example: w.topic_names().first().cloned().unwrap_or_default(),
            metric: "one-way latency from the intended send time to the subscriber's receipt, µs (one clock)",
            warmup_excluded_seconds: w.warmup_ns as f64 / 1e9,
            stopped_by_user,
            valid: invalid.is_none(),
            invalid,
            rates: Rates {
                target,
                achieved,
                target_deliveries: target * sub_share as f64 / w.topics as f64,
                measured_seconds: measured_ns as f64 / 1e9,
                measured_sent,
            },
            latency: overall.summary(),
            latency_by_size: w
                .mix
                .parts
                .iter()
                .zip(&by_size)
                .map(|(p, l)| SizeRow {
                    size: p.0,
                    latency: l.summary(),
                })
                .collect(),
            sender_lateness: lateness.summary(),
            hops,
            counters: CorrectnessCounters {
                counters,
                expected,
                discarded,
                malformed,
                reconciled,
            },
            subscribers: rows,
            timeline: tl,
            router_stats,
            problems,
            host: None,
            stall_free: None,
            receivers: None,
        }
    }

    /// The terminal report, to `out`.
    pub fn print(&self, out: &mut dyn std::io::Write) {
        crate::outln!(out);
        crate::outln!(
            out,
            "==== results: {} fan-out, {} ====",
            self.system,
            pattern_text(&self.workload.pattern)
        );
        crate::outln!(out, "machine: {}", self.machine.one_line());
        if self.stopped_by_user {
            crate::outln!(
                out,
                "STOPPED by {} after {:.1} measured seconds: the figures cover what was measured.",
                tickwire_rt::stop::stopped_by(),
                self.rates.measured_seconds
            );
        }
        if let Some(why) = &self.invalid {
            banner_lines(out, &format!("INVALID (saturated): {why}"));
        }
        let mut rows = vec![(
            format!("all ({})", mix_text(&self.workload)),
            self.latency.clone(),
        )];
        for r in &self.latency_by_size {
            if self.latency_by_size.len() > 1 {
                rows.push((format!("{} B", r.size), r.latency.clone()));
            }
        }
        crate::out!(out,
            "{}",
            latency_table(
                &format!(
                    "\nlatency, intended send -> subscriber receipt, {} subscribers merged (warm-up {:.1} s excluded):",
                    self.workload.subscribers, self.warmup_excluded_seconds
                ),
                &rows
            )
        );
        crate::out!(
            out,
            "{}",
            latency_table(
                "\nsender lateness (actual send call - intended send time), all publishers:",
                &[("publishers".to_owned(), self.sender_lateness.clone())]
            )
        );
        if let Some(h) = &self.hops {
            crate::out!(
                out,
                "{}",
                latency_table(
                    "\nper hop, from in-line stamps (one clock), measured part:",
                    h
                )
            );
        }
        let r = &self.rates;
        let pct = if r.target > 0.0 {
            100.0 * r.achieved / r.target
        } else {
            0.0
        };
        crate::outln!(
            out,
            "\nsend rate: target {:.0} msg/s, achieved {:.0} msg/s ({pct:.1}%) over {:.1} s -> {}",
            r.target,
            r.achieved,
            r.measured_seconds,
            if self.valid {
                "valid (>= 90%)"
            } else {
                "INVALID (< 90%: saturated)"
            }
        );
        if let Some(v) = &self.receivers {
            crate::outln!(out, "{}", v.line());
        }
        let c = &self.counters;
        // The server that could discard: NATS drops a slow consumer, the raw floor's
        // relay discards nothing (new-user pass: "by router" in a NATS report).
        let discarder = match self.router.system {
            "NATS" => "server",
            "raw" => "relay",
            _ => "router",
        };
        crate::outln!(out,
            "correctness (whole run, warm-up included): sent {} messages, expected {} deliveries, received {}, gaps {}, duplicates {}, out-of-order {}, discarded by {discarder} {}, malformed {} -> {}",
            c.counters.sent,
            c.expected,
            c.counters.received,
            c.counters.gaps,
            c.counters.duplicates,
            c.counters.out_of_order,
            c.discarded,
            c.malformed,
            if c.reconciled { "OK (reconciled)" } else { "FAILED (does not reconcile)" }
        );
        if !c.reconciled {
            crate::outln!(
                out,
                "  per subscriber:  sub  expected  received  gaps  dups  ooo  discarded"
            );
            for s in &self.subscribers {
                crate::outln!(
                    out,
                    "                  {:>3} {:>9} {:>9} {:>5} {:>5} {:>4} {:>10}",
                    s.subscriber,
                    s.expected,
                    s.counters.received,
                    s.counters.gaps,
                    s.counters.duplicates,
                    s.counters.out_of_order,
                    s.discarded
                );
            }
        }
        if let Some(t) = self.router_stats.as_ref().map(|s| &s["router"]["totals"]) {
            if !t.is_null() {
                crate::outln!(
                    out,
                    "router counters: msgs_in={} msgs_out={} discards={} unrouted={}",
                    t["msgs_in"],
                    t["msgs_out"],
                    t["discards"],
                    t["unrouted"]
                );
            }
        }
        for p in &self.problems {
            crate::outln!(out, "problem: {p}");
        }
        if let Some(h) = &self.host {
            crate::outln!(out, "{}", h.line("the measured part"));
        }
        if let Some(f) = &self.stall_free {
            crate::outln!(out, "{}", f.line());
        }

        crate::outln!(
            out,
            "\nper second (latency by intended send second, from histograms of 2 significant digits: each figure is the top of its bucket, within 1%; rates in msg/s):"
        );
        crate::outln!(
            out,
            "{:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "second",
            "phase",
            "target",
            "achieved",
            "samples",
            "p50 µs",
            "p99 µs",
            "max µs"
        );
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        for s in &self.timeline {
            crate::outln!(
                out,
                "{:>6} {:>8} {:>10.0} {:>10.0} {:>10} {:>10} {:>10} {:>10}",
                s.second,
                s.phase.label(),
                s.target_rate,
                s.achieved_rate,
                s.samples,
                f(s.p50_us),
                f(s.p99_us),
                f(s.max_us)
            );
        }
        crate::outln!(out,
            "\n{}: p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, mean {:.1} µs, sd {:.1} µs at {:.0} msg/s target ({:.0} deliveries/s){}",
            self.system,
            self.latency.p50_us,
            self.latency.p99_us,
            self.latency.p999_us,
            self.latency.mean_us,
            self.latency.stddev_us,
            self.rates.target,
            self.rates.target_deliveries,
            if self.valid { "" } else { " -- INVALID (saturated)" }
        );
        if let Some(why) = &self.invalid {
            banner_lines(out, &format!("INVALID (saturated): {why}"));
        }
        if let Some(s) = &self.scaled {
            banner_lines(out, s);
        }
    }

    /// Latency percentiles per second (left, log µs) with the target and achieved send
    /// rate (right, msg/s).
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let pts = |f: fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
            self.timeline
                .iter()
                .filter(|s| s.phase != Phase::AfterEnd || s.samples > 0)
                .filter_map(|s| f(s).map(|v| (s.second as f64 + 0.5, v)))
                .collect()
        };
        let left = [
            Series::new("p50", pts(|s| s.p50_us)),
            Series::new("p99", pts(|s| s.p99_us)),
            Series::new("max", pts(|s| s.max_us)),
        ];
        // Rates hold for a whole second: drawn as steps. Seconds after the schedule's end
        // (a late sender's last messages) are left out of the plot, not the table.
        let steps = |f: fn(&Second) -> f64| -> Vec<(f64, f64)> {
            self.timeline
                .iter()
                .filter(|s| s.phase != Phase::AfterEnd || s.samples > 0)
                .flat_map(|s| [(s.second as f64, f(s)), (s.second as f64 + 1.0, f(s))])
                .collect()
        };
        let right = [
            Series::new("target rate", steps(|s| s.target_rate)),
            Series::new("achieved rate", steps(|s| s.achieved_rate)),
        ];
        let preset = self
            .workload
            .preset
            .map_or("custom".to_owned(), |p| format!("{p:?}").to_lowercase());
        let title = format!(
            "{} fan-out, {preset}{}{}",
            self.system,
            if self.workload.scale != 1.0 {
                format!(" x{} (SCALED)", self.workload.scale)
            } else {
                String::new()
            },
            if self.valid { "" } else { ", INVALID" }
        );
        line_chart_svg(
            path,
            &title,
            &format!(
                "second of the run (warm-up: first {:.0} s)",
                self.warmup_excluded_seconds
            ),
            "latency from intended send (µs, log)",
            &left,
            true,
            Some(("send rate (msg/s)", &right)),
        )
    }

    /// Lost, duplicated or reordered messages, or a thread error.
    pub fn failed(&self) -> bool {
        let errors = self.problems.iter().any(|p| !p.contains("gave up"));
        !self.counters.reconciled || errors
    }

    /// 0 ok (NOT SUSTAINED is a result), 1 lost / duplicated / reordered messages or a
    /// thread error, 3 INVALID, 130 stopped by Ctrl-C (as the other benches).
    pub fn exit_code(&self) -> ExitCode {
        if self.failed() {
            ExitCode::FAILURE
        } else if !self.valid {
            ExitCode::from(3)
        } else {
            crate::report::exit_code(self.stopped_by_user)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(second: u64, phase: Phase, target_rate: f64, p50: Option<f64>) -> Second {
        Second {
            second,
            phase,
            target_rate,
            achieved_rate: target_rate,
            samples: p50.map_or(0, |_| 100),
            p50_us: p50,
            p99_us: p50.map(|v| v * 3.0),
            max_us: p50.map(|v| v * 5.0),
        }
    }

    /// Pattern 1's shape: base and burst seconds alternate.
    fn timeline(p50s: [f64; 4]) -> Vec<Second> {
        let mut t = vec![sec(0, Phase::Warmup, 500.0, Some(1.0))];
        for (i, p) in p50s.iter().enumerate() {
            let rate = if i % 2 == 0 { 1000.0 } else { 500.0 };
            t.push(sec(i as u64 + 1, Phase::Measure, rate, Some(*p)));
        }
        t
    }

    #[test]
    fn flat_latency_is_sustained_and_like_is_compared_with_like() {
        // The burst seconds are slower; the last (base) second is compared with the
        // first base second (2), not with the first measured second (a burst).
        let v =
            ReceiverVerdict::judge(&timeline([300.0, 50.0, 320.0, 60.0]), 900.0, 10_000.0, true);
        assert!(v.sustained, "{}", v.line());
        let g = v.growth.unwrap();
        assert_eq!((g.last_second, g.reference_second), (4, 2));
        assert_eq!(g.limit_us, 200.0);
        assert!(v.line().ends_with("-> sustained"), "{}", v.line());
    }

    #[test]
    fn growing_latency_a_high_p99_or_a_loss_is_not_sustained() {
        let grew = ReceiverVerdict::judge(
            &timeline([80.0, 90.0, 900.0, 2_000.0]),
            900.0,
            10_000.0,
            true,
        );
        assert!(!grew.sustained && !grew.no_growth);
        assert!(
            grew.line().contains("NOT SUSTAINED (latency grew"),
            "{}",
            grew.line()
        );
        let tail = ReceiverVerdict::judge(&timeline([50.0; 4]), 20_000.0, 10_000.0, true);
        assert!(!tail.sustained && tail.no_growth && !tail.p99_within_bound);
        let lost = ReceiverVerdict::judge(&timeline([50.0; 4]), 100.0, 10_000.0, false);
        assert!(!lost.sustained && !lost.all_delivered);
    }

    #[test]
    fn one_measured_second_leaves_growth_unjudged() {
        let t = vec![
            sec(0, Phase::Warmup, 500.0, Some(1.0)),
            sec(1, Phase::Measure, 500.0, Some(5_000.0)),
            sec(2, Phase::AfterEnd, 0.0, None),
        ];
        let v = ReceiverVerdict::judge(&t, 6_000.0, 10_000.0, true);
        assert!(v.sustained && v.no_growth);
        assert!(v.line().contains("growth not judged"), "{}", v.line());
    }
}
