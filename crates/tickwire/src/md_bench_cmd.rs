//! `tickwire bench md-latency` and `tickwire bench md-replay` (family C).

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tickwire_bench::harness::{parse_pin, Pinning, StopFlag};
use tickwire_bench::md_replay::latency::{self, LatencyOptions};
use tickwire_bench::md_replay::repro::{self, ReproOptions, Target};
use tickwire_bench::report::{latency_table, write_json};
use tickwire_capture::Speed;
use tickwire_md::handler::parse_feed_idle;
use tickwire_rt::IdleStrategy;

use tickwire_rt::units::parse_duration;

const MD_LATENCY_HELP: &str = "\
Measuring clients for the market-data path: N subscriber connections (polled by one
thread) each keep per-hop histograms from the timestamps every feed-handler update
carries: exchange→FH, FH internal, FH→router, router internal, router→client, end to
end. Prints the per-client and the per-hop tables; latency against update rate per
window (--window, 10 s by default) goes to --json and --plot only. The exchange hops
need an exchange that stamps its send time (`tickwire md publish --restamp`): pass
--restamped. Stops after --duration, when nothing arrived for --idle-exit, or Ctrl-C;
with no update at all after --first-wait it gives up (exit code 3, no updates).

Example (router, `tickwire feed` and `tickwire md publish --restamp` running):
  tickwire bench md-latency --clients 4 --pattern 'md/NASDAQ/>' --restamped";

#[derive(Args)]
#[command(after_help = MD_LATENCY_HELP)]
pub struct MdLatencyArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7420", value_parser = crate::units::parse_router_addr)]
    router: String,
    /// Number of measuring clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Subscription pattern of every client.
    #[arg(long, default_value = "md/NASDAQ/>")]
    pattern: String,
    /// Stop this long after the first update (e.g. 30s, 2m; default: run until the feed
    /// goes quiet, see --idle-exit).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop when nothing arrived for this long (after the first update).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    idle_exit: Duration,
    /// Give up when no update at all arrived this long after the start (exit code 3).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    first_wait: Duration,
    /// Window of the latency-versus-update-rate figures (in --json and --plot).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    window: Duration,
    /// ITCH timestamps are the exchange's send times on this host (md publish --restamp).
    #[arg(long)]
    restamped: bool,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Write the full results as JSON.
    #[arg(long, value_name = "FILE", value_parser = tickwire_bench::report::parse_output_path)]
    json: Option<PathBuf>,
    /// Write an SVG plot of latency against update rate (one pair of lines per client).
    #[arg(long, value_name = "FILE.svg", value_parser = tickwire_bench::report::parse_plot_path)]
    plot: Option<PathBuf>,
}

pub fn run_latency(a: MdLatencyArgs) -> anyhow::Result<ExitCode> {
    let opts = LatencyOptions {
        // Before `router` moves: a TLS address without --ca is refused here.
        client: a
            .login
            .apply(&a.router, tickwire_client::ClientOptions::default())?,
        router: a.router,
        clients: a.clients.max(1),
        pattern: a.pattern,
        duration: a.duration,
        idle_exit: Some(a.idle_exit),
        first_wait: Some(a.first_wait),
        window: a.window,
        restamped: a.restamped,
    };
    let stop = StopFlag::install();
    let clients = latency::connect(&opts)?;
    eprintln!(
        "{} subscribed to {:?} on {}; waiting for updates",
        tickwire_rt::text::count(opts.clients as u64, "client", "clients"),
        opts.pattern,
        opts.router
    );
    let results = latency::run(clients, &opts, &stop)?;
    if results.iter().all(|r| r.received == 0) {
        eprintln!(
            "no updates: nothing matching {:?} arrived from {} in {} (is `tickwire feed` \
             publishing to this router, and an exchange such as `tickwire md publish` \
             sending to the feed?)",
            opts.pattern,
            opts.router,
            if stop.is_set() {
                "the time it ran".to_owned()
            } else {
                format!("{} s (--first-wait)", a.first_wait.as_secs_f64())
            }
        );
        return Ok(ExitCode::from(3));
    }
    print!("{}", latency::client_table(&results));
    println!();
    print!(
        "{}",
        latency_table(
            "per hop, all clients merged:",
            &latency::merged_hops(&results)
        )
    );
    if let Some(j) = &a.json {
        write_json(j, &results)?;
    }
    if let Some(p) = &a.plot {
        let labels: Vec<String> = results
            .iter()
            .map(|r| format!("client {}", r.client))
            .collect();
        let runs: Vec<(&str, &[latency::Window])> = labels
            .iter()
            .zip(&results)
            .map(|(l, r)| (l.as_str(), &r.windows[..]))
            .collect();
        repro::plot_windows(p, "tickwire md-latency", &runs, a.window.as_secs_f64())?;
    }
    Ok(ExitCode::SUCCESS)
}

const MD_REPLAY_HELP: &str = "\
The published market-data replay test in one command: generates a synthetic ITCH 5.0
session (or takes --file), starts a router, and for each speed (1x, then 4x) replays the
session as MoldUDP64 multicast with its original timing scaled, through the feed handler
and the router, to the measuring clients. Every message is restamped with its scheduled
send time, so the per-hop table starts at the exchange. Prints, per speed: whether
anything was lost, the per-client table (mean, stddev, p50, p99, max end to end), the
per-hop table, and latency against update rate per window; --plot draws the latter.

The raw floor (--compare tickwire,raw, the default): each speed runs a second time with
the same exchange, session, pinning and idle choices through a pipeline with nothing of
tickwire's on it: a thread that forwards every ITCH message as a stamped frame (no
books, no recovery) in the feed handler's place, the raw relay (`bench fanout-relay
--stamp`, a child on the router's CPU with the router's --router-idle) in the router's,
raw TCP clients polled by the same measuring thread. The report then prints, per hop
and end to end, tickwire's and the floor's mean, p50 and p99 and their ratios: what
the machine and the topology cost, and what tickwire adds. --compare tickwire runs
tickwire alone (half the time); --compare raw the floor alone.

Each run is watched for host stalls (a VM's host taking a CPU away): the report gives
end to end over the seconds no stall touched beside the whole run (docs/benchmarking.md).
The default layout on 2 CPUs, chosen by measurement (scripts/bench-md-layouts.sh): the
feed handler and the router on CPU 1, both blocking; the exchange (sleeping to each
packet's time) and the measuring clients on CPU 0.

Examples:
  tickwire bench md-replay                                  # 1x then 4x, tickwire and raw floor
  tickwire bench md-replay --speeds 4x --pin 0,1            # the 4x figures of BENCHMARKS.md
  tickwire bench md-replay --messages 3000000 --clients 8 --plot md.svg --json md.json

Exit status: 0 when every replay was lossless (the feed lost nothing and every client
received every update it published), 3 when a replay that ran to its end was not, 130
when Ctrl-C ended the replay early (the report says after how many messages, and which
runs did not run), 1 on an error, 2 a usage error.";

#[derive(Args)]
#[command(after_help = MD_REPLAY_HELP)]
pub struct MdReplayArgs {
    /// Replay this session file (from `tickwire md generate`) instead of generating one.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Symbols of the generated session.
    #[arg(long, default_value_t = 100)]
    symbols: u16,
    /// Messages of the generated session.
    #[arg(long, default_value_t = 1_200_000)]
    messages: u64,
    /// Seed of the generated session.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Mean ITCH message rate of the generated session at 1x.
    #[arg(long, default_value = "20k", value_parser = tickwire_rt::units::parse_rate)]
    rate: f64,
    /// Speeds, in order.
    #[arg(long, value_delimiter = ',', default_value = "1x,4x", value_parser = Speed::parse)]
    speeds: Vec<Speed>,
    /// What each speed runs through, in order: tickwire (feed handler, router, clients)
    /// and/or raw (the floor: forwarding thread, raw relay, raw clients); with both the
    /// report prints the tickwire/raw ratio of every hop.
    #[arg(long, value_name = "TARGETS", value_delimiter = ',', default_value = "tickwire,raw", value_parser = Target::parse)]
    compare: Vec<Target>,
    /// Number of measuring clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Window of the latency-versus-update-rate figures.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    window: Duration,
    /// Router (and raw relay) idle strategy (block, spin or hybrid). The default is the
    /// measured best on 2 CPUs (BENCHMARKS.md, market data against its raw floor).
    #[arg(long, value_name = "IDLE", default_value = "block")]
    router_idle: String,
    /// Feed-handler (and raw feed thread) idle strategy (spin or block). The default is
    /// the measured best on 2 CPUs: it shares its CPU with the router.
    #[arg(long, value_name = "spin|block", default_value = "block", value_parser = parse_feed_idle)]
    feed_idle: IdleStrategy,
    /// The exchange sleeps until this long before each packet is due, then spins
    /// (default 0: never spins; its lateness is in the report).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    exchange_spin: Option<Duration>,
    /// Pin the feed handler (and, with --router-cpu far, the router) to CPU FAR and the
    /// exchange, the measuring clients (and the router with --router-cpu near) to CPU
    /// NEAR; the raw floor's parts go where their tickwire counterparts go. Default: 0,1
    /// with 2 or more CPUs (the measured layout).
    #[arg(long, value_name = "NEAR,FAR", value_parser = parse_pin)]
    pin: Option<Pinning>,
    /// Run nothing pinned (the scheduler places every thread).
    #[arg(long, conflicts_with = "pin")]
    no_pin: bool,
    /// Where the pinned layout puts the router (and the raw relay): far (with the feed
    /// handler, the default: the measured best on 2 CPUs, with both blocking) or near
    /// (with the exchange and the clients; the layout before 2026-11-25). With far, a
    /// spinning feed handler (--feed-idle spin) would spin against the router.
    #[arg(long, value_name = "near|far", default_value = "far", value_parser = ["near", "far"], conflicts_with = "no_pin")]
    router_cpu: String,
    /// How tickwire's feed handler and measuring clients reach the router: tcp, or shm
    /// (the router's shared memory on this host, docs/shm.md; the router still blocks or
    /// spins per --router-idle). The raw floor stays TCP either way, so with shm the
    /// ratios show what shared memory saves against the TCP floor.
    #[arg(long, value_name = "tcp|shm", default_value = "tcp", value_parser = ["tcp", "shm"])]
    transport: String,
    /// Multicast group (the port grows by 2 per run, a run being one speed through one
    /// target; port + 1 serves re-requests). Port 0 (the default): free ports chosen at
    /// the start, so that two runs on one host do not hear each other's feed.
    #[arg(long, default_value = "239.1.1.7:0")]
    group: SocketAddrV4,
    /// Write the full results as JSON.
    #[arg(long, value_name = "FILE", value_parser = tickwire_bench::report::parse_output_path)]
    json: Option<PathBuf>,
    /// Write an SVG plot of latency against update rate.
    #[arg(long, value_name = "FILE.svg", value_parser = tickwire_bench::report::parse_plot_path)]
    plot: Option<PathBuf>,
}

pub fn run_replay(a: MdReplayArgs, me: &Path) -> anyhow::Result<ExitCode> {
    let opts = ReproOptions {
        tickwire: me.to_path_buf(),
        file: a.file,
        symbols: a.symbols,
        messages: a.messages,
        seed: a.seed,
        rate: a.rate,
        speeds: a.speeds,
        targets: dedup(a.compare),
        clients: a.clients.max(1),
        window: a.window,
        router_idle: a.router_idle,
        feed_idle: a.feed_idle,
        spin_before: a
            .exchange_spin
            .unwrap_or(tickwire_md::publisher::DEFAULT_SPIN_BEFORE),
        router_far: a.router_cpu == "far",
        pin: match a.no_pin {
            true => None,
            false => a.pin.or_else(repro::default_pin),
        },
        group: a.group,
        json: a.json,
        plot: a.plot,
        cache: Vec::new(),
        shm: a.transport == "shm",
    };
    let stop = StopFlag::install();
    let report = crate::bench_cmd::with_console(|c| repro::run(&opts, &stop, c)).map_err(|e| {
        match e.downcast_ref::<repro::PlotImpossible>() {
            Some(p) => crate::units::UsageError(p.0.clone()).into(),
            None => e,
        }
    })?;
    // 3 for a loss in a run that was not cut, else 130 when Ctrl-C cut the replay, as
    // the other benches (new-user pass: a stopped replay said PASS and exited 0).
    Ok(report.exit_code())
}

/// The targets in the order given, each once.
fn dedup(targets: Vec<Target>) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::with_capacity(targets.len());
    for t in targets {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}
