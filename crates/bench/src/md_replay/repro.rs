//! `tickwire bench md-replay`: the published market-data replay test in one command
//! (docs/benchmarking.md family C).
//!
//! 1. Generate a synthetic ITCH session (or use `--file`).
//! 2. Start a router (child process) and, per speed (1x then 4x by default): the
//!    measuring clients (subscribed to `md/NASDAQ/>`), the feed handler (a thread,
//!    spinning), then the exchange publishing the session as MoldUDP64 multicast with its
//!    timing scaled by the speed and each message restamped with its scheduled send time.
//! 3. When the feed handler has seen End of Session and the clients went quiet, report:
//!    per-client table (mean, stddev, p50, p99, max end to end), per-hop table,
//!    latency against update rate per window, and whether anything was lost.
//! 4. With the raw floor among the targets (`--compare tickwire,raw`, the default),
//!    the same speed again through [`super::raw`] (same exchange, session, pinning and
//!    idle choices, a relay child in the router's place), then the tickwire/raw ratio
//!    of every hop's mean, p50 and p99.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tickwire_capture::Speed;
use tickwire_itch::Session;
use tickwire_md::exchange::SessionData;
use tickwire_md::feed::FeedConfig;
use tickwire_md::generator::{write_session, GeneratorConfig};
use tickwire_md::handler::{self, HandlerOptions};
use tickwire_md::publisher::{self, PublishOptions};
use tickwire_rt::{IdleStrategy, MonoNanos};

use super::latency::{self, ClientResult, LatencyOptions, Window};
use super::raw;
use crate::console::Console;
use crate::harness::{spawn_pinned, Pinning, RouterChild, StopFlag};
use crate::host_watch::{HostWatch, StallFree};
use crate::report::{latency_table, line_chart_svg, write_outputs, Announce, Machine, Series};
use crate::stats::Summary;

/// What carries the updates from the exchange to the measuring clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The feed handler, the router and tickwire clients.
    Tickwire,
    /// The raw floor ([`super::raw`]): a forwarding thread, the raw relay, raw clients.
    Raw,
}

impl Target {
    /// Parses one `--compare` entry: `tickwire` or `raw`.
    pub fn parse(s: &str) -> Result<Target, String> {
        match s {
            "tickwire" => Ok(Target::Tickwire),
            "raw" => Ok(Target::Raw),
            _ => Err(format!("{s:?}: expected tickwire or raw")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Target::Tickwire => "tickwire",
            Target::Raw => "raw",
        }
    }
}

/// The placement the test and the demo use unless told otherwise (measured on the
/// 2-CPU machine, BENCHMARKS.md issue 19; docs/benchmarking.md for more cores): with 2
/// or more CPUs the feed handler (the only spinning party) alone on CPU 1, and the
/// exchange, the router and the measuring clients, which all sleep when idle, on CPU 0.
/// Unpinned with a single CPU.
pub fn default_pin() -> Option<Pinning> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus >= 2).then_some(Pinning { near: 0, far: 1 })
}

/// Settings of the reproduction.
#[derive(Debug, Clone)]
pub struct ReproOptions {
    /// The tickwire binary (for the router child).
    pub tickwire: PathBuf,
    /// Replay this session file instead of generating one.
    pub file: Option<PathBuf>,
    pub symbols: u16,
    pub messages: u64,
    pub seed: u64,
    /// Mean ITCH message rate of the generated session at 1x.
    pub rate: f64,
    pub speeds: Vec<Speed>,
    /// Run each speed through these, in order (tickwire, the raw floor or both).
    pub targets: Vec<Target>,
    pub clients: usize,
    pub window: Duration,
    pub router_idle: String,
    pub feed_idle: IdleStrategy,
    /// The exchange sleeps until this long before each packet, then spins.
    pub spin_before: Duration,
    /// The feed handler alone on CPU `far`; the exchange, the router and the measuring
    /// clients on CPU `near` (None: unpinned).
    pub pin: Option<Pinning>,
    /// With `pin`: the router (and the raw relay) on the feed handler's CPU `far`
    /// instead of `near` (the feed handler should then block, not spin).
    pub router_far: bool,
    /// Multicast group; port 0: free ports chosen at the start ([`free_port_run`]), so
    /// that two runs on one host do not hear each other's feed.
    pub group: SocketAddrV4,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    /// Last-value cache patterns for the router (`--cache`); after the replay a late
    /// client queries the cache for each and reports what it found at once.
    pub cache: Vec<String>,
    /// How the feed handler and the measuring clients reach the router: TCP, or the
    /// router's shared memory (`--shm`). The raw floor is TCP either way.
    pub shm: bool,
}

/// One speed's results through one target.
#[derive(Debug, Clone, Serialize)]
pub struct SpeedResult {
    pub speed: String,
    pub target: Target,
    /// ITCH messages the exchange sent (all of the session's unless stopped).
    pub messages: u64,
    /// ITCH messages of the session.
    pub session_messages: u64,
    /// Ctrl-C stopped this run: its figures cover what was sent before the stop.
    pub stopped: bool,
    pub packets_dropped: u64,
    pub publish_seconds: f64,
    pub publisher_lateness: Summary,
    pub feed_packets: u64,
    pub feed_gaps: u64,
    pub feed_recovered: u64,
    pub feed_lost: u64,
    pub feed_malformed: u64,
    pub published_updates: u64,
    pub updates_per_second: f64,
    /// The highest update rate of a complete window of client 0; None when the run was
    /// shorter than one window.
    pub peak_window_rate: Option<f64>,
    pub lossless: bool,
    pub hops: Vec<(String, Summary)>,
    pub clients: Vec<ClientResult>,
    pub windows: Vec<Window>,
    /// CPU stalls of the machine itself during the run (crate::host_watch).
    pub host: crate::host_watch::StallSummary,
    /// End to end over the seconds of the run that no host stall touched (all clients).
    pub stall_free: crate::host_watch::StallFree,
}

/// Everything, for `--json`.
#[derive(Debug, Serialize)]
pub struct ReproReport {
    pub machine: Machine,
    pub router_idle: String,
    pub feed_idle: String,
    pub exchange_spin_before_us: f64,
    pub pin: Option<Pinning>,
    pub session_file: String,
    pub session_messages: u64,
    pub window_seconds: f64,
    /// How tickwire's feed handler and clients reached the router: "tcp" or "shm".
    pub transport: &'static str,
    pub results: Vec<SpeedResult>,
    /// tickwire/raw per hop and speed (when both ran).
    pub ratios: Vec<HopRatio>,
    /// Ctrl-C stopped the test: the last result is partial and `not_run` did not run.
    pub stopped: bool,
    /// The runs (`SPEED TARGET`) a stop left out.
    pub not_run: Vec<String>,
}

impl ReproReport {
    /// 3 when a run the stop did not cut lost updates, else 130 when Ctrl-C stopped
    /// the test (new-user pass: a stopped replay exited 0 like a complete one, with
    /// PASS), else 0; the order of the other benches (docs/benchmarking.md). A cut
    /// run's losses are not judged: its clients stop with updates in flight.
    pub fn exit_code(&self) -> std::process::ExitCode {
        if self.results.iter().any(|r| !r.lossless && !r.stopped) {
            std::process::ExitCode::from(3)
        } else {
            crate::report::exit_code(self.stopped)
        }
    }
}

/// The runs (`SPEED TARGET`, in the order they would have run) of `speeds` x
/// `targets` that have no result.
fn not_run(speeds: &[Speed], targets: &[Target], results: &[SpeedResult]) -> Vec<String> {
    speeds
        .iter()
        .flat_map(|s| targets.iter().map(move |t| (s.to_string(), *t)))
        .filter(|(s, t)| !results.iter().any(|r| r.speed == *s && r.target == *t))
        .map(|(s, t)| format!("{s} {}", t.name()))
        .collect()
}

/// The closing line of a stopped test: what ran, how far the cut run got, what did
/// not run.
fn stopped_line(results: &[SpeedResult], not_run: &[String]) -> String {
    let by = tickwire_rt::stop::stopped_by();
    let cut = results
        .iter()
        .rev()
        .find(|r| r.stopped)
        .map_or(String::new(), |r| {
            format!(
                " during {} {}, after {} of {} messages",
                r.speed,
                r.target.name(),
                r.messages,
                r.session_messages
            )
        });
    let left = match not_run {
        [] => String::new(),
        runs => format!("; not run: {}", runs.join(", ")),
    };
    format!("STOPPED by {by}{cut}{left}: the figures above cover what was sent")
}

/// One hop at one speed: tickwire's and the raw floor's figures and their ratios.
#[derive(Debug, Clone, Serialize)]
pub struct HopRatio {
    pub speed: String,
    pub hop: String,
    /// mean, p50, p99 in µs.
    pub tickwire_us: [f64; 3],
    pub raw_us: [f64; 3],
    /// tickwire / raw of each (None where raw is 0).
    pub ratio: [Option<f64>; 3],
}

/// The label of the end-to-end row over the seconds no host stall touched.
pub const STALL_FREE_HOP: &str = "e2e stall-free";

/// The tickwire/raw rows of one speed (hops in path order, then end to end over the
/// stall-free seconds when both runs had some).
pub fn hop_ratios(tickwire: &SpeedResult, raw: &SpeedResult) -> Vec<HopRatio> {
    let three = |s: &Summary| [s.mean_us, s.p50_us, s.p99_us];
    let stall_free = match (&tickwire.stall_free.latency, &raw.stall_free.latency) {
        (Some(t), Some(r)) => Some((STALL_FREE_HOP.to_string(), t.clone(), r.clone())),
        _ => None,
    };
    tickwire
        .hops
        .iter()
        .zip(&raw.hops)
        .map(|((hop, t), (_, r))| (hop.clone(), t.clone(), r.clone()))
        .chain(stall_free)
        .map(|(hop, t, r)| {
            let (t, r) = (three(&t), three(&r));
            HopRatio {
                speed: tickwire.speed.clone(),
                hop,
                tickwire_us: t,
                raw_us: r,
                ratio: [0, 1, 2].map(|i| (r[i] > 0.0).then(|| t[i] / r[i])),
            }
        })
        .collect()
}

/// The line under a ratio table whose runs (`hosts`, named) were not all quiet: the
/// ratios of disturbed runs compare the machine, not the code (bench-review pass: they
/// were printed like any other; the stall-free row removes host stalls, not other
/// processes' CPU). None when every run was quiet.
pub fn caveat(hosts: [(&crate::host_watch::StallSummary, &str); 2]) -> Option<String> {
    let spoiled: Vec<&str> = hosts
        .into_iter()
        .filter(|(h, _)| h.disturbed())
        .map(|(_, name)| name)
        .collect();
    crate::host_watch::not_a_comparison(&spoiled)
}

/// The ratio table printed after each speed that ran through both targets.
pub fn ratio_table(rows: &[HopRatio]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>30} {:>30} {:>26}",
        "", "tickwire mean / p50 / p99", "raw mean / p50 / p99", "ratio mean / p50 / p99"
    );
    let ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}"));
    for r in rows {
        let us = |v: [f64; 3]| format!("{:.1} / {:.1} / {:.1}", v[0], v[1], v[2]);
        let _ = writeln!(
            out,
            "{:<16} {:>30} {:>30} {:>26}",
            r.hop,
            us(r.tickwire_us),
            us(r.raw_us),
            format!(
                "{} / {} / {}",
                ratio(r.ratio[0]),
                ratio(r.ratio[1]),
                ratio(r.ratio[2])
            )
        );
    }
    out
}

/// Runs the test, writes the report to `con`, and returns it.
/// The first of `n` consecutive UDP ports that nothing on this host has bound now
/// (each bound once on the wildcard address, without address reuse, and released): a
/// multicast group's port that another run's feed is unlikely to share.
pub fn free_port_run(n: usize) -> anyhow::Result<u16> {
    let n = u16::try_from(n).map_err(|_| anyhow::anyhow!("too many runs for one port range"))?;
    for _ in 0..64 {
        let probe = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        let base = probe.local_addr()?.port();
        drop(probe);
        let Some(end) = base.checked_add(n) else {
            continue;
        };
        let free =
            (base..end).all(|p| std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, p)).is_ok());
        if free {
            return Ok(base);
        }
    }
    anyhow::bail!("found no {n} consecutive free UDP ports for the multicast feed")
}

pub fn run(
    opts: &ReproOptions,
    stop: &StopFlag,
    con: &mut Console<'_>,
) -> anyhow::Result<ReproReport> {
    // Removed however the run ends (dropped): an error before the end (a refused --plot
    // among them, review) left the generated session behind.
    let tmp_dir = tempfile::Builder::new()
        .prefix("tickwire-md-replay-")
        .tempdir()?;
    let tmp = tmp_dir.path();
    let mut generated = None;
    let file = match &opts.file {
        Some(f) => f.clone(),
        None => {
            let f = tmp.join("session.itch");
            let cfg = GeneratorConfig {
                symbols: opts.symbols,
                messages: opts.messages,
                seed: opts.seed,
                mean_rate: opts.rate,
                ..GeneratorConfig::default()
            };
            let s = write_session(cfg, &f)?;
            generated = Some(format!(
                "generated {} ITCH messages, {} symbols, seed {} ({:.1} s of session at 1x)",
                s.messages,
                opts.symbols,
                opts.seed,
                (s.last_timestamp - s.first_timestamp) as f64 / 1e9
            ));
            f
        }
    };
    let data = SessionData::from_file_bytes(&std::fs::read(&file)?)?;
    // Judged before anything is printed: the check needs the session's timestamps, but
    // a refusal is a usage error, and it followed the "generated" line (new-user pass).
    if opts.plot.is_some() {
        plot_possible(&data, &opts.speeds, opts.window)?;
    }
    if let Some(line) = generated {
        crate::outln!(con.out, "{line}");
    }
    // Before pinning: the core count comes from this thread's affinity.
    let machine = Machine::detect();
    // The exchange (this thread) and, through inheritance, the measuring thread; the
    // caller's thread gets its CPUs back when the run ends (the demo goes on to other
    // benches in the same thread).
    let _pinned = opts
        .pin
        .map(|p| tickwire_rt::pin::pin_current_thread_scoped(p.near));
    let cache_args: Vec<&str> = opts
        .cache
        .iter()
        .flat_map(|p| ["--cache", p.as_str()])
        .collect();
    let router_cpu = opts
        .pin
        .map(|p| if opts.router_far { p.far } else { p.near });
    let shm = opts.shm.then(|| crate::harness::shm_name("md-replay"));
    let mut router_args = cache_args.clone();
    if let Some(n) = &shm {
        router_args.extend(["--shm", n.as_str()]);
    }
    let router = match opts.targets.contains(&Target::Tickwire) {
        true => Some(RouterChild::start(
            &opts.tickwire,
            &opts.router_idle,
            router_cpu,
            &router_args,
        )?),
        false => None,
    };
    // Where the feed handler and the measuring clients connect.
    let router_at = router.as_ref().map(|r| match &shm {
        Some(n) => format!("{}{n}", tickwire_shm::ADDR_PREFIX),
        None => r.addr.to_string(),
    });
    // The raw floor's relay runs as the router does: a child on the same CPU, same idle.
    let relay = match opts.targets.contains(&Target::Raw) {
        true => Some(RouterChild::start_as(
            &opts.tickwire,
            &crate::fanout::RELAY_COMMAND,
            &opts.router_idle,
            router_cpu,
            &["--stamp"],
        )?),
        false => None,
    };
    crate::outln!(
        con.out,
        "{}{}idle {} (router{}), feed handler idle {}, {}, {} measuring clients, {}",
        router.as_ref().map_or(String::new(), |r| match &shm {
            Some(n) => format!(
                "router: {} (feed handler and clients over shared memory, {}{n}), ",
                r.addr,
                tickwire_shm::ADDR_PREFIX
            ),
            None => format!("router: {}, ", r.addr),
        }),
        relay
            .as_ref()
            .map_or(String::new(), |r| format!("raw relay: {}, ", r.addr)),
        opts.router_idle,
        if relay.is_some() {
            " and raw relay"
        } else {
            ""
        },
        opts.feed_idle,
        match opts.spin_before.as_micros() {
            0 => "exchange sleeps until each packet is due".to_owned(),
            us => format!("exchange sleeps until {us} µs before each packet is due, then spins"),
        },
        opts.clients,
        opts.pin
            .map_or("unpinned".to_string(), |p| match opts.router_far {
                false => format!(
                    "feed handler pinned to CPU {}, exchange, router and clients to CPU {}",
                    p.far, p.near
                ),
                true => format!(
                    "feed handler and router pinned to CPU {}, exchange and clients to CPU {}",
                    p.far, p.near
                ),
            })
    );
    let mut results = Vec::new();
    let mut ratios = Vec::new();
    let mut run_index = 0u16;
    // Each run takes a port and the next one (re-requests).
    let ports = 2 * (opts.speeds.len() * opts.targets.len()).max(1);
    let base = match opts.group.port() {
        0 => free_port_run(ports)?,
        p => p,
    };
    for &speed in &opts.speeds {
        for &target in &opts.targets {
            if stop.is_set() {
                break;
            }
            let group = SocketAddrV4::new(*opts.group.ip(), base + 2 * run_index);
            run_index += 1;
            let to = match target {
                Target::Tickwire => router_at.clone(),
                Target::Raw => relay.as_ref().map(|c| c.addr.to_string()),
            }
            .ok_or_else(|| anyhow::anyhow!("no {} child", target.name()))?;
            crate::outln!(
                con.out,
                "\n=== replay at {speed} through {}: {} messages via {group} ===",
                target.name(),
                data.len()
            );
            results.push(one_speed(
                opts, &data, speed, target, group, &to, stop, con,
            )?);
        }
        let of = |t: Target| {
            results
                .iter()
                .rev()
                .find(|r: &&SpeedResult| r.target == t && r.speed == speed.to_string())
        };
        if let (Some(t), Some(r)) = (of(Target::Tickwire), of(Target::Raw)) {
            let rows = hop_ratios(t, r);
            crate::outln!(
                con.out,
                "\ntickwire / raw floor at {speed}, per hop, all clients merged (µs):"
            );
            crate::out!(con.out, "{}", ratio_table(&rows));
            if let Some(line) = caveat([(&t.host, "tickwire"), (&r.host, "raw")]) {
                crate::outln!(con.out, "{line}");
            }
            ratios.extend(rows);
        }
    }
    // The late subscriber needs the router (a raw-only run has none).
    for (pattern, router) in opts
        .cache
        .iter()
        .filter_map(|p| Some((p, router.as_ref()?)))
    {
        // A subscriber joining after the session: the cache has every symbol's last
        // update, without waiting for the next one (a quiet symbol may never trade again).
        let started = std::time::Instant::now();
        let mut late = tickwire_client::Client::connect(router.addr)?;
        let cached = late.cache_query(pattern)?;
        crate::outln!(
            con.out,
            "\nlate subscriber: {} cached topics match {pattern} (every symbol's last quote), received in {:.1} ms",
            cached.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let stopped = stop.is_set();
    let not_run = not_run(&opts.speeds, &opts.targets, &results);
    if stopped {
        crate::outln!(con.out, "\n{}", stopped_line(&results, &not_run));
    }
    let report = ReproReport {
        machine,
        router_idle: opts.router_idle.clone(),
        feed_idle: opts.feed_idle.to_string(),
        exchange_spin_before_us: opts.spin_before.as_secs_f64() * 1e6,
        pin: opts.pin,
        session_file: file.display().to_string(),
        session_messages: data.len(),
        window_seconds: opts.window.as_secs_f64(),
        transport: if opts.shm { "shm" } else { "tcp" },
        results,
        ratios,
        stopped,
        not_run,
    };
    if opts.json.is_some() {
        crate::outln!(con.out);
    }
    write_outputs(
        con.out,
        opts.json.as_deref(),
        &report,
        opts.plot.as_deref(),
        |p| plot(p, &report),
        Announce::Labelled,
    )?;
    Ok(report)
}

/// The raw relay's address (always TCP).
fn relay_addr(to: &str) -> anyhow::Result<std::net::SocketAddr> {
    to.parse()
        .map_err(|e| anyhow::anyhow!("the raw relay's address {to}: {e}"))
}

/// What a feed thread (the feed handler or the raw floor's) reports.
struct FeedOutcome {
    packets: u64,
    gaps: u64,
    recovered: u64,
    lost: u64,
    malformed: u64,
    published: u64,
}

#[allow(clippy::too_many_arguments)]
fn one_speed(
    opts: &ReproOptions,
    data: &SessionData,
    speed: Speed,
    target: Target,
    group: SocketAddrV4,
    to: &str,
    stop: &StopFlag,
    con: &mut Console<'_>,
) -> anyhow::Result<SpeedResult> {
    let lat_opts = LatencyOptions {
        router: to.to_string(),
        client: tickwire_client::ClientOptions::default(),
        clients: opts.clients,
        pattern: "md/NASDAQ/>".into(),
        duration: None,
        idle_exit: Some(Duration::from_secs(2)),
        first_wait: None,
        window: opts.window,
        restamped: true,
    };
    let client_stop = stop.clone();
    // The sentinel watches the whole run; the stall-free seconds are decided from its
    // clock alone (docs/benchmarking.md, "When the host takes a CPU away").
    let (watch, watch_from) = (HostWatch::start_all(), MonoNanos::now());
    let measure = match target {
        Target::Tickwire => {
            let clients = latency::connect(&lat_opts)?;
            std::thread::Builder::new()
                .name("md-clients".into())
                .spawn(move || latency::run_timed(clients, &lat_opts, &client_stop))?
        }
        Target::Raw => {
            let clients = raw::connect_clients(relay_addr(to)?, opts.clients)?;
            std::thread::Builder::new()
                .name("md-raw-clients".into())
                .spawn(move || latency::run_timed(clients, &lat_opts, &client_stop))?
        }
    };
    let request = SocketAddrV4::new(Ipv4Addr::LOCALHOST, group.port() + 1);
    let fh_stop = stop.clone();
    let fh_cpu = opts.pin.map(|p| p.far);
    let fh = match target {
        Target::Tickwire => {
            let h_opts = HandlerOptions {
                group_b: None,
                group,
                interface: Ipv4Addr::LOCALHOST,
                request_to: request,
                router: to.to_string(),
                client: tickwire_client::ClientOptions::default(),
                // The exchange is this run's own publisher on loopback: its End of
                // Session is believed after 200 ms of quiet, not the 2 s that guard a
                // live feed against a forged one (they would idle every run 2 s).
                feed: FeedConfig {
                    jump_quiet: Duration::from_millis(200),
                    ..FeedConfig::default()
                },
                idle: opts.feed_idle,
                exit_on_end_of_session: true,
                on_second: None,
            };
            spawn_pinned("feed-handler", fh_cpu, move || {
                handler::run(&h_opts, &fh_stop).map(|r| FeedOutcome {
                    packets: r.counters.packets,
                    gaps: r.counters.gaps,
                    recovered: r.counters.recovered,
                    lost: r.counters.lost,
                    malformed: r.counters.malformed,
                    published: r.published,
                })
            })?
        }
        Target::Raw => {
            let f_opts = raw::FeedOptions {
                group,
                interface: Ipv4Addr::LOCALHOST,
                relay: relay_addr(to)?,
                idle: opts.feed_idle,
            };
            spawn_pinned("raw-feed", fh_cpu, move || {
                raw::run_feed(&f_opts, &fh_stop).map(|r| FeedOutcome {
                    packets: r.packets,
                    gaps: 0,
                    recovered: 0,
                    lost: r.lost,
                    malformed: r.malformed,
                    published: r.published,
                })
            })?
        }
    };
    // Let the feed thread join the group and connect before the first packet.
    std::thread::sleep(Duration::from_millis(300));
    let p_opts = PublishOptions {
        group,
        interface: Ipv4Addr::LOCALHOST,
        request_listen: request,
        session: Session::new("TWREPLAY").map_err(|e| anyhow::anyhow!("{e}"))?,
        speed,
        loss: 0.0,
        group_b: None,
        loss_b: 0.0,
        double_loss: false,
        serve_requests: true,
        seed: 1,
        restamp: true,
        linger: Duration::from_millis(500),
        max_packet: 1400,
        spin_before: opts.spin_before,
        progress: Some(con.progress),
    };
    // Names the run its progress lines belong to (new-user pass: two runs printed the
    // same unlabelled "publish: ..." lines).
    (con.progress)(&format!(
        "{} at {speed}: publishing {} messages",
        target.name(),
        data.len()
    ));
    let pr = publisher::publish(data.clone(), &p_opts, stop)?;
    let fr = fh
        .join()
        .map_err(|_| anyhow::anyhow!("the feed thread panicked"))??;
    let timed = measure
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))??;
    let stalls = watch.finish();
    let host = stalls.within(watch_from, MonoNanos::now());
    let seconds = timed.seconds.len();
    let free = stalls.stall_free_seconds(timed.origin, seconds);
    let stall_free = StallFree::from_timeline(&timed.seconds, 0..seconds, &free);
    let clients = timed.clients;

    let hops = latency::merged_hops(&clients);
    let windows = clients
        .first()
        .map(|c| c.windows.clone())
        .unwrap_or_default();
    let secs = pr.elapsed_ns as f64 / 1e9;
    let lossless = fr.lost == 0
        && clients
            .iter()
            .all(|c| c.received == fr.published && c.discarded == 0);
    let res = SpeedResult {
        speed: speed.to_string(),
        target,
        messages: pr.messages,
        session_messages: data.len(),
        stopped: pr.stopped || stop.is_set(),
        packets_dropped: pr.dropped_packets,
        publish_seconds: secs,
        publisher_lateness: pr.lateness.summary(),
        feed_packets: fr.packets,
        feed_gaps: fr.gaps,
        feed_recovered: fr.recovered,
        feed_lost: fr.lost,
        feed_malformed: fr.malformed,
        published_updates: fr.published,
        updates_per_second: fr.published as f64 / secs.max(1e-9),
        peak_window_rate: latency::peak_rate(&windows),
        lossless,
        hops,
        clients,
        windows,
        host,
        stall_free,
    };
    print_speed(con.out, &res, opts.window);
    Ok(res)
}

fn print_speed(out: &mut dyn std::io::Write, r: &SpeedResult, window: Duration) {
    crate::outln!(
        out,
        "exchange: {} ITCH messages in {:.2} s; publisher lateness p50 {:.1} µs, p99 {:.1} µs",
        r.messages,
        r.publish_seconds,
        r.publisher_lateness.p50_us,
        r.publisher_lateness.p99_us
    );
    if r.stopped {
        crate::outln!(
            out,
            "STOPPED by {} after {} of {} messages: the figures cover what was sent",
            tickwire_rt::stop::stopped_by(),
            r.messages,
            r.session_messages
        );
    }
    // The updates', not the exchange's: an exchange that ran 1.2 s could send its
    // updates within less than a window (new-user pass: read as a contradiction). Then
    // no peak is given, and nothing is said of it (new-user pass: the demo's short run
    // always printed "no peak", which read as something failed).
    let peak = match r.peak_window_rate {
        Some(rate) => format!(", {rate:.0}/s peak {}-s window", window.as_secs_f64()),
        None => String::new(),
    };
    crate::outln!(out,
        "{}: {} packets, {} gaps, {} recovered, {} lost, {} malformed; {} updates published ({:.0}/s average{peak})",
        match r.target {
            Target::Tickwire => {
                "feed handler (updates for trades and for changes to a book's top levels; \
                 an ITCH message deeper in a book publishes none)"
            }
            Target::Raw => "raw feed (one update per ITCH message)",
        },
        r.feed_packets,
        r.feed_gaps,
        r.feed_recovered,
        r.feed_lost,
        r.feed_malformed,
        r.published_updates,
        r.updates_per_second,
    );
    crate::outln!(out, "{}", verdict(r.lossless, r.stopped));
    crate::outln!(
        out,
        "\nper client, end to end (exchange send → client receive):"
    );
    crate::out!(out, "{}", latency::client_table(&r.clients));
    crate::outln!(out);
    crate::out!(
        out,
        "{}",
        latency_table("per hop, all clients merged:", &r.hops)
    );
    crate::outln!(out, "{}", r.host.line("the run"));
    // New-user pass: "1 of 1 measured second" beside "no complete 1-s window" read as
    // a contradiction when the updates spanned less than a second; and the note must
    // name the window (--window, 10 s by default), not a second.
    let secs = window.as_secs_f64();
    let partial = if r.windows.iter().any(|w| w.complete) {
        String::new()
    } else {
        format!(
            " (the updates spanned less than one {secs}-s window: too short for a table of \
             latency against update rate, which takes complete windows only)"
        )
    };
    crate::outln!(out, "end to end, {}{partial}", r.stall_free.line());
    // Complete windows only: the last one, where the run stopped, is partial, and its
    // updates over less than a window would be scaled up to a rate no window had.
    if !r.windows.iter().any(|w| w.complete) {
        // Said on the end-to-end line above.
        return;
    }
    crate::outln!(
        out,
        "\nlatency against update rate ({secs}-s windows, client 0):"
    );
    crate::outln!(
        out,
        "{:>8} {:>12} {:>10} {:>10} {:>10}",
        "start s",
        "updates/s",
        "mean µs",
        "p99 µs",
        "max µs"
    );
    for w in r.windows.iter().filter(|w| w.complete) {
        crate::outln!(
            out,
            "{:>8.0} {:>12.0} {:>10.2} {:>10.2} {:>10.2}",
            w.start_s,
            w.rate,
            w.mean_us,
            w.p99_us,
            w.max_us
        );
    }
    for w in r.windows.iter().filter(|w| !w.complete) {
        crate::outln!(
            out,
            "(left out: the last {:.2} s from {:.0} s, {} updates, a partial window)",
            w.span_s,
            w.start_s,
            w.updates
        );
    }
}

/// The verdict line of one run; a stopped one's is partial (new-user pass: a cut run
/// said PASS like a complete one).
fn verdict(lossless: bool, stopped: bool) -> &'static str {
    match (lossless, stopped) {
        (true, false) => "PASS: every client received every update (no loss)",
        (false, false) => {
            "FAIL: updates were lost: see the counters above and the per-client table"
        }
        (true, true) => {
            "PASS (partial, stopped): every client received every update published before \
             the stop (no loss)"
        }
        (false, true) => {
            "not judged (partial, stopped): not every update published reached every \
             client, and the stop ended the clients with updates possibly in flight"
        }
    }
}

fn plot(path: &Path, report: &ReproReport) -> anyhow::Result<()> {
    let labels: Vec<String> = report
        .results
        .iter()
        .map(|r| format!("{} {}", r.speed, r.target.name()))
        .collect();
    let runs: Vec<(&str, &[Window])> = labels
        .iter()
        .zip(&report.results)
        .map(|(l, r)| (l.as_str(), &r.windows[..]))
        .collect();
    plot_windows(
        path,
        "tickwire market-data replay",
        &runs,
        report.window_seconds,
    )
}

/// Whether a `--plot` can be drawn: it needs one complete `--window` of updates in
/// some run, so a session that lasts less than a window at every speed is refused
/// before anything runs (new-user pass: a run of a few seconds passed, then ended in an
/// error and exit status 1 over the plot it could not draw). How long a run lasts is
/// judged from the session's first and last ITCH timestamps (`Nx`) or its messages
/// (`N/s`); `max` cannot be judged, and the check after the run stays.
fn plot_possible(data: &SessionData, speeds: &[Speed], window: Duration) -> anyhow::Result<()> {
    let n = data.len();
    // The schedule runs from the first message's time to the latest one's (not the
    // last message's: a session's times need not be in order; review).
    let Some(first) = data.timestamp(1) else {
        return Ok(());
    };
    let latest = (1..=n)
        .filter_map(|i| data.timestamp(i))
        .max()
        .unwrap_or(first);
    let recorded_s = latest.saturating_sub(first) as f64 / 1e9;
    // A schedule faster than the feed path may carry lasts longer than scheduled, so
    // it is not judged, as `max` is not (review: a 5M/s replay of 20M messages was
    // refused, though it would have run for many windows).
    let lasts = |s: &Speed| {
        let scheduled = match *s {
            Speed::Factor(f) => recorded_s / f,
            Speed::Rate(r) => n as f64 / r,
            Speed::Max => return f64::INFINITY,
        };
        if n as f64 > JUDGED_RATE * scheduled {
            f64::INFINITY
        } else {
            scheduled
        }
    };
    let longest = speeds.iter().map(lasts).fold(0.0, f64::max);
    let secs = window.as_secs_f64();
    if longest < secs {
        return Err(PlotImpossible(format!(
            "--plot draws complete {secs}-s windows of updates, and this session of {n} \
             messages lasts about {longest:.1} s at its slowest speed: replay more \
             messages (--messages), more slowly, or give a shorter --window"
        ))
        .into());
    }
    Ok(())
}

/// The fastest schedule, in messages a second, whose length [`plot_possible`] judges
/// (well under what the feed handler and router carry here: BENCHMARKS.md).
const JUDGED_RATE: f64 = 200_000.0;

/// [`plot_possible`]'s refusal: a mistake in the flags, found once the session is
/// known (the command reports it as a usage error).
#[derive(Debug)]
pub struct PlotImpossible(pub String);

impl std::fmt::Display for PlotImpossible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlotImpossible {}

/// Writes an SVG of end-to-end latency (mean and p99) against the update rate of each
/// window, one pair of lines per labelled run (a replay speed, a measuring client).
pub fn plot_windows(
    path: &Path,
    title: &str,
    runs: &[(&str, &[Window])],
    window_seconds: f64,
) -> anyhow::Result<()> {
    // New-user pass: a run without one complete window wrote a chart of empty axes and
    // announced it as written.
    if !runs.iter().any(|(_, w)| w.iter().any(|w| w.complete)) {
        anyhow::bail!(
            "nothing to plot: no complete {window_seconds}-s window of updates (replay \
             more messages, or give a shorter --window)"
        );
    }
    let mut series = Vec::new();
    for (label, windows) in runs {
        // Complete windows only: a partial one's rate is scaled up from less.
        let complete = || windows.iter().filter(|w| w.complete);
        let mut mean: Vec<(f64, f64)> = complete().map(|w| (w.rate, w.mean_us)).collect();
        let mut p99: Vec<(f64, f64)> = complete().map(|w| (w.rate, w.p99_us)).collect();
        mean.sort_by(|a, b| a.0.total_cmp(&b.0));
        p99.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(Series::new(format!("{label} mean"), mean));
        series.push(Series::new(format!("{label} p99"), p99));
    }
    line_chart_svg(
        path,
        &format!("{title}: end-to-end latency vs update rate ({window_seconds}-s windows)"),
        "updates/s in the window",
        "latency (µs)",
        &series,
        true,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::ExitCode;

    /// `--plot` is refused before a run only when every speed's schedule is judged
    /// shorter than the window; schedules the feed path may not keep up with, and
    /// `max`, are not judged (review: a 5M/s replay was refused).
    #[test]
    fn a_plot_is_refused_before_the_run_only_when_no_speed_can_fill_a_window() {
        let mut bytes = Vec::new();
        let cfg = GeneratorConfig {
            symbols: 10,
            messages: 2_000,
            seed: 7,
            ..GeneratorConfig::default()
        };
        tickwire_md::generator::write_session_to(
            tickwire_md::generator::Generator::new(cfg).unwrap(),
            &mut bytes,
        )
        .unwrap();
        let data = SessionData::from_file_bytes(&bytes).unwrap();
        let ten = Duration::from_secs(10);
        let e = plot_possible(&data, &[Speed::Factor(4.0)], ten).unwrap_err();
        assert!(e.downcast_ref::<PlotImpossible>().is_some(), "{e}");
        assert!(e.to_string().contains("lasts about"), "{e}");
        // One slow enough speed among several is enough.
        plot_possible(&data, &[Speed::Factor(4.0), Speed::Rate(100.0)], ten).unwrap();
        // Not judged: max, and a schedule over JUDGED_RATE.
        plot_possible(&data, &[Speed::Max], ten).unwrap();
        plot_possible(&data, &[Speed::Rate(5e6)], ten).unwrap();
        // A window the session fills at 1x.
        plot_possible(&data, &[Speed::Factor(1.0)], Duration::from_millis(100)).unwrap();
    }

    /// New-user pass: `--plot` of a run without one complete window wrote empty axes
    /// and said "plot: md.svg"; now an error says why, and nothing is written.
    #[test]
    fn a_plot_without_a_complete_window_is_refused_and_one_with_is_drawn() {
        let w = |complete| Window {
            start_s: 0.0,
            span_s: if complete { 10.0 } else { 0.4 },
            complete,
            updates: 1000,
            rate: 100.0,
            mean_us: 5.0,
            p99_us: 9.0,
            max_us: 12.0,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("md.svg");
        let partial = [w(false)];
        let e = plot_windows(&path, "t", &[("4x tickwire", &partial[..])], 10.0).unwrap_err();
        assert!(e.to_string().contains("no complete 10-s window"), "{e}");
        assert!(!path.exists());
        let full = [w(true), w(false)];
        plot_windows(&path, "t", &[("4x tickwire", &full[..])], 10.0).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 0);
    }

    /// One run's result with no clients, for the report's wording.
    fn result(
        speed: Speed,
        target: Target,
        messages: u64,
        lossless: bool,
        stopped: bool,
    ) -> SpeedResult {
        SpeedResult {
            speed: speed.to_string(),
            target,
            messages,
            session_messages: 100_000,
            stopped,
            packets_dropped: 0,
            publish_seconds: 4.61,
            publisher_lateness: crate::stats::Latency::new().summary(),
            feed_packets: 0,
            feed_gaps: 0,
            feed_recovered: 0,
            feed_lost: 0,
            feed_malformed: 0,
            published_updates: 0,
            updates_per_second: 0.0,
            peak_window_rate: None,
            lossless,
            hops: Vec::new(),
            clients: Vec::new(),
            windows: Vec::new(),
            host: crate::host_watch::StallSummary::others(0.0),
            stall_free: StallFree {
                seconds: 0,
                of: 0,
                latency: None,
            },
        }
    }

    fn report(results: Vec<SpeedResult>, stopped: bool) -> ReproReport {
        ReproReport {
            machine: Machine::detect(),
            router_idle: "block".into(),
            feed_idle: "block".into(),
            exchange_spin_before_us: 0.0,
            pin: None,
            session_file: "s.itch".into(),
            session_messages: 100_000,
            window_seconds: 2.0,
            transport: "tcp",
            results,
            ratios: Vec::new(),
            stopped,
            not_run: Vec::new(),
        }
    }

    fn code(r: &ReproReport) -> String {
        format!("{:?}", r.exit_code())
    }

    /// New-user pass: `bench md-replay --messages 100000` stopped by Ctrl-C at 1x
    /// printed a full report ending in PASS and exited 0, with no word of the cut or of
    /// the 4x runs that never ran.
    #[test]
    fn a_stopped_replay_says_so_and_exits_130() {
        let (one, four) = (Speed::parse("1x").unwrap(), Speed::parse("4x").unwrap());
        let cut = result(one, Target::Tickwire, 63_649, true, true);
        let mut out = Vec::new();
        print_speed(&mut out, &cut, Duration::from_secs(2));
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("after 63649 of 100000 messages"), "{out}");
        assert!(out.contains("PASS (partial, stopped)"), "{out}");
        assert!(!out.contains("PASS: every client"), "{out}");

        let speeds = [one, four];
        let targets = [Target::Tickwire, Target::Raw];
        let left = not_run(&speeds, &targets, std::slice::from_ref(&cut));
        assert_eq!(left, ["1x raw", "4x tickwire", "4x raw"]);
        let line = stopped_line(std::slice::from_ref(&cut), &left);
        assert!(line.starts_with("STOPPED by "), "{line}");
        assert!(
            line.contains(
                "during 1x tickwire, after 63649 of 100000 messages; not run: 1x raw, 4x tickwire, 4x raw"
            ),
            "{line}"
        );
        assert_eq!(
            code(&report(vec![cut], true)),
            format!("{:?}", ExitCode::from(130))
        );
    }

    /// A complete run that lost updates is a failure (3) also when a later run was
    /// stopped; a stopped run's own shortfall is not judged, and its line says so.
    #[test]
    fn a_replay_exit_status_is_3_for_a_loss_130_for_a_stop_0_otherwise() {
        let one = Speed::parse("1x").unwrap();
        let ok = || result(one, Target::Tickwire, 100_000, true, false);
        let lost = result(one, Target::Raw, 100_000, false, false);
        let cut_short = result(one, Target::Raw, 50_000, false, true);
        assert_eq!(
            code(&report(vec![ok()], false)),
            format!("{:?}", ExitCode::SUCCESS)
        );
        assert_eq!(
            code(&report(vec![ok(), lost.clone()], false)),
            format!("{:?}", ExitCode::from(3))
        );
        assert_eq!(
            code(&report(vec![lost, cut_short.clone()], true)),
            format!("{:?}", ExitCode::from(3))
        );
        assert_eq!(
            code(&report(vec![ok(), cut_short], true)),
            format!("{:?}", ExitCode::from(130))
        );
        assert!(verdict(false, true).starts_with("not judged"));
        assert!(verdict(false, false).starts_with("FAIL"));
    }

    /// Bench-review pass: ratios of disturbed runs were printed like any other.
    #[test]
    fn a_ratio_of_a_disturbed_run_is_marked() {
        let quiet = crate::host_watch::StallSummary::others(0.0);
        let busy = crate::host_watch::StallSummary::others(1.46);
        assert_eq!(caveat([(&quiet, "tickwire"), (&quiet, "raw")]), None);
        let line = caveat([(&busy, "tickwire"), (&quiet, "raw")]).unwrap();
        assert!(
            line.starts_with("^ not a comparison: tickwire ran DISTURBED"),
            "{line}"
        );
    }

    /// The ports handed out are free (bindable) and a port held by someone else is
    /// never inside the run.
    #[test]
    fn a_free_port_run_avoids_ports_in_use() {
        let held = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        let taken = held.local_addr().unwrap().port();
        for _ in 0..20 {
            let base = free_port_run(6).unwrap();
            let run = base..base + 6;
            assert!(
                !run.contains(&taken),
                "{run:?} includes the held port {taken}"
            );
            let sockets: Vec<_> = run
                .clone()
                .map(|p| std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, p)))
                .collect();
            assert!(sockets.iter().all(Result::is_ok), "{run:?}: {sockets:?}");
        }
    }
}
