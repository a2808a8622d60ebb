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
use tickwire_rt::IdleStrategy;

use super::latency::{self, ClientResult, LatencyOptions, Window};
use crate::console::Console;
use crate::harness::{pin_current_thread, spawn_pinned, Pinning, RouterChild, StopFlag};
use crate::report::{latency_table, line_chart_svg, write_outputs, Announce, Machine, Series};
use crate::stats::Summary;

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
    pub clients: usize,
    pub window: Duration,
    pub router_idle: String,
    pub feed_idle: IdleStrategy,
    /// The feed handler alone on CPU `far`; the exchange, the router and the measuring
    /// clients on CPU `near` (None: unpinned).
    pub pin: Option<Pinning>,
    pub group: SocketAddrV4,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    /// Last-value cache patterns for the router (`--cache`); after the replay a late
    /// client queries the cache for each and reports what it found at once.
    pub cache: Vec<String>,
}

/// One speed's results.
#[derive(Debug, Clone, Serialize)]
pub struct SpeedResult {
    pub speed: String,
    pub messages: u64,
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
    pub peak_window_rate: f64,
    pub lossless: bool,
    pub hops: Vec<(String, Summary)>,
    pub clients: Vec<ClientResult>,
    pub windows: Vec<Window>,
}

/// Everything, for `--json`.
#[derive(Debug, Serialize)]
pub struct ReproReport {
    pub machine: Machine,
    pub router_idle: String,
    pub feed_idle: String,
    pub pin: Option<Pinning>,
    pub session_file: String,
    pub session_messages: u64,
    pub window_seconds: f64,
    pub results: Vec<SpeedResult>,
}

/// Runs the test, writes the report to `con`, and returns it.
pub fn run(
    opts: &ReproOptions,
    stop: &StopFlag,
    con: &mut Console<'_>,
) -> anyhow::Result<ReproReport> {
    let tmp = std::env::temp_dir().join(format!("tickwire-md-replay-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
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
            crate::outln!(
                con.out,
                "generated {} ITCH messages, {} symbols, seed {} ({:.1} s of session at 1x)",
                s.messages,
                opts.symbols,
                opts.seed,
                (s.last_timestamp - s.first_timestamp) as f64 / 1e9
            );
            f
        }
    };
    let data = SessionData::from_file_bytes(&std::fs::read(&file)?)?;
    // Before pinning: the core count comes from this thread's affinity.
    let machine = Machine::detect();
    if let Some(p) = opts.pin {
        // The exchange (this thread) and, through inheritance, the measuring thread.
        pin_current_thread(p.near);
    }
    let cache_args: Vec<&str> = opts
        .cache
        .iter()
        .flat_map(|p| ["--cache", p.as_str()])
        .collect();
    let router = RouterChild::start(
        &opts.tickwire,
        &opts.router_idle,
        opts.pin.map(|p| p.near),
        &cache_args,
    )?;
    crate::outln!(
        con.out,
        "router: {} (idle {}), feed handler idle {}, {} measuring clients, {}",
        router.addr,
        opts.router_idle,
        opts.feed_idle,
        opts.clients,
        opts.pin.map_or("unpinned".to_string(), |p| format!(
            "feed handler pinned to CPU {}, exchange, router and clients to CPU {}",
            p.far, p.near
        ))
    );
    let mut results = Vec::new();
    for (k, &speed) in opts.speeds.iter().enumerate() {
        if stop.is_set() {
            break;
        }
        let group = SocketAddrV4::new(*opts.group.ip(), opts.group.port() + 2 * k as u16);
        crate::outln!(
            con.out,
            "\n=== replay at {speed}: {} messages via {group} ===",
            data.len()
        );
        results.push(one_speed(
            opts,
            &data,
            speed,
            group,
            &router.addr.to_string(),
            stop,
            con,
        )?);
    }
    for pattern in &opts.cache {
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
    let _ = std::fs::remove_dir_all(&tmp);
    let report = ReproReport {
        machine,
        router_idle: opts.router_idle.clone(),
        feed_idle: opts.feed_idle.to_string(),
        pin: opts.pin,
        session_file: file.display().to_string(),
        session_messages: data.len(),
        window_seconds: opts.window.as_secs_f64(),
        results,
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

fn one_speed(
    opts: &ReproOptions,
    data: &SessionData,
    speed: Speed,
    group: SocketAddrV4,
    router: &str,
    stop: &StopFlag,
    con: &mut Console<'_>,
) -> anyhow::Result<SpeedResult> {
    let lat_opts = LatencyOptions {
        router: router.to_string(),
        clients: opts.clients,
        pattern: "md/NASDAQ/>".into(),
        duration: None,
        idle_exit: Some(Duration::from_secs(2)),
        window: opts.window,
        restamped: true,
    };
    let clients = latency::connect(&lat_opts)?;
    let client_stop = stop.clone();
    let measure = std::thread::Builder::new()
        .name("md-clients".into())
        .spawn(move || latency::run(clients, &lat_opts, &client_stop))?;
    let request = SocketAddrV4::new(Ipv4Addr::LOCALHOST, group.port() + 1);
    let h_opts = HandlerOptions {
        group_b: None,
        group,
        interface: Ipv4Addr::LOCALHOST,
        request_to: request,
        router: router.to_string(),
        feed: FeedConfig::default(),
        idle: opts.feed_idle,
        exit_on_end_of_session: true,
        on_second: None,
    };
    let fh_stop = stop.clone();
    let fh_cpu = opts.pin.map(|p| p.far);
    let fh = spawn_pinned("feed-handler", fh_cpu, move || {
        handler::run(&h_opts, &fh_stop)
    })?;
    // Let the feed handler join the group and connect before the first packet.
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
        progress: Some(con.progress),
    };
    let pr = publisher::publish(data.clone(), &p_opts, stop)?;
    let fr = fh
        .join()
        .map_err(|_| anyhow::anyhow!("the feed-handler thread panicked"))??;
    let clients = measure
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))??;

    let hops = latency::merged_hops(&clients);
    let windows = clients
        .first()
        .map(|c| c.windows.clone())
        .unwrap_or_default();
    let secs = pr.elapsed_ns as f64 / 1e9;
    let lossless = fr.counters.lost == 0
        && clients
            .iter()
            .all(|c| c.received == fr.published && c.discarded == 0);
    let res = SpeedResult {
        speed: speed.to_string(),
        messages: pr.messages,
        packets_dropped: pr.dropped_packets,
        publish_seconds: secs,
        publisher_lateness: pr.lateness.summary(),
        feed_packets: fr.counters.packets,
        feed_gaps: fr.counters.gaps,
        feed_recovered: fr.counters.recovered,
        feed_lost: fr.counters.lost,
        feed_malformed: fr.counters.malformed,
        published_updates: fr.published,
        updates_per_second: fr.published as f64 / secs.max(1e-9),
        peak_window_rate: windows.iter().map(|w| w.rate).fold(0.0, f64::max),
        lossless,
        hops,
        clients,
        windows,
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
    crate::outln!(out,
        "feed handler: {} packets, {} gaps, {} recovered, {} lost, {} malformed; {} updates published ({:.0}/s average, {:.0}/s peak {}-s window)",
        r.feed_packets,
        r.feed_gaps,
        r.feed_recovered,
        r.feed_lost,
        r.feed_malformed,
        r.published_updates,
        r.updates_per_second,
        r.peak_window_rate,
        window.as_secs_f64()
    );
    crate::outln!(
        out,
        "{}",
        if r.lossless {
            "NO LOSS: every client received every update"
        } else {
            "LOSS: see the counters above and the per-client table"
        }
    );
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
    crate::outln!(
        out,
        "\nlatency against update rate ({}-s windows, client 0):",
        window.as_secs_f64()
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
    for w in &r.windows {
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
}

fn plot(path: &Path, report: &ReproReport) -> anyhow::Result<()> {
    let labels: Vec<String> = report.results.iter().map(|r| r.speed.clone()).collect();
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

/// Writes an SVG of end-to-end latency (mean and p99) against the update rate of each
/// window, one pair of lines per labelled run (a replay speed, a measuring client).
pub fn plot_windows(
    path: &Path,
    title: &str,
    runs: &[(&str, &[Window])],
    window_seconds: f64,
) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for (label, windows) in runs {
        let mut mean: Vec<(f64, f64)> = windows.iter().map(|w| (w.rate, w.mean_us)).collect();
        let mut p99: Vec<(f64, f64)> = windows.iter().map(|w| (w.rate, w.p99_us)).collect();
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
