//! The `tickwire bench fanout` driver: router fan-out under bursty, mixed-size, open-loop
//! load (docs/benchmarking.md family A), against tickwire or, with `--target nats://..`, the
//! identical workload against a core NATS server.
//!
//! One measuring process holds every publisher and subscriber thread (one clock, true
//! one-way latency); the router is a separate process. The parts:
//!
//! - [`workload`]: presets, flags, topic names, the subscription mapping, the payload
//!   header. Pure.
//! - [`transport`]: a publishing and a subscribing connection, for tickwire, the raw
//!   floor and NATS.
//! - [`raw`] and [`relay`]: the raw fan-out floor (`--target raw`, `--compare
//!   tickwire,raw`): its frames and client ends, and the relay process.
//! - [`compare`]: several runs in one invocation (`--compare`, `--sweep`): ratios to the
//!   floor, the latency-versus-rate table, the knee, JSON and plot.
//! - [`measure`]: the publisher (open loop) and subscriber (tracking) thread bodies.
//! - [`output`]: the terminal report, JSON and the SVG plot.

mod compare;
mod measure;
mod output;
pub mod raw;
pub mod relay;
mod transport;
pub mod workload;

use crate::console::Console;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tickwire_rt::MonoNanos;

use anyhow::Context;

use crate::harness::{self, parse_pin, Pinning, Progress, RouterChild, StopFlag};
use crate::report::OutputArgs;
use crate::schedule::SizeMix;
use measure::{PubResult, Shared, SubResult};
use output::{Layout, ReceiverVerdict, Report, RouterInfo};
use tickwire_rt::IdleStrategy;
pub use transport::CLIENT_IDLE;
use transport::{PubConn, SubConn};
use workload::{human_rate, nats_subject, subscriber_topics, Knobs, Preset, Target, Workload};

const AFTER_HELP: &str = "\
What runs:
  One measuring process (this one) with a thread per publisher and per subscriber,
  and the router as a separate process: `tickwire router` started on a free loopback
  port (unless --router ADDR), or the NATS server you name with --target.
  Publishers follow one open-loop schedule (slot i goes to publisher i % P; publisher
  p sends its j-th message on topic (p + j) % T). Every payload starts with the
  publisher id, the topic, a sequence number per (publisher, topic) and the intended
  send time. Subscriber s subscribes to --sub-topics consecutive topics from s % T
  (default: all of them, so every subscriber receives every message). Latency is
  one-way, from the intended send time to the subscriber's receipt, on one clock: a
  late sender shows up as latency (no coordinated omission); how late the sends were
  is reported on its own (sender lateness). Warm-up messages are excluded from the
  latency figures (they are counted in the correctness counters).

Presets (docs/benchmarking.md family A; flags given with a preset override its parts):
  pattern1  500k msg/s + 500k bursts (1 s every other second: 500k/1M), mix 100:67,600:33
  pattern2  1M msg/s + 500k bursts (1M/1.5M), mix 100:67,600:33
  mdd       1M msg/s, 100-byte messages, 12-byte topics, 10 publishers x 10 topics x
            10 subscribers (the published sweep goes to 5M: use --rate)
  Without a preset: --rate 10k, no bursts, mix 100:67,600:33, 2 publishers, 10 topics,
  2 subscribers, 12-byte topics. Small machines: --scale 0.05 runs at 5% of the rates
  (printed as SCALED at the top and bottom of the report).

Layout (--pin NEAR,FAR; bare --pin means 1,0): the measuring process on CPU NEAR, the
router it starts on CPU FAR, as in the published tests (router on one core, publishers
and subscribers on another). A NATS server is not started by the bench: start it
yourself, e.g. `taskset -c 0 nats-server -a 127.0.0.1 -p 4222`.

Report: latency (samples, min, p50, p90, p99, p99.9, p99.99, max, mean, stddev) overall
and per message size; target and achieved send rate (the sender rule: below 90% of
target is INVALID, saturated); the receiver rule (sustained when the last measured
second's p50 is at most 2 x that of the first measured second at the same target rate
+ 100 µs, the p99 is within --max-p99, and every delivery arrived); sender lateness; sent / expected / received deliveries, gaps, duplicates,
out-of-order; a per-second timeline (target and achieved rate, p50, p99, max) that
shows the bursts; a `host:` line says whether the VM's host stopped a CPU meanwhile
(a DISTURBED run's tail is the host's, not ours). Exit code: 0 ok, 1 lost / duplicated
/ reordered messages or an error, 3 INVALID (saturated; a --sweep exits 0 then, its top
scales are meant to saturate), 130 when Ctrl-C stopped the run (unless 1 or 3 applies:
a run stopped in its warm-up is INVALID), 2 a usage error. The
receiver rule (NOT SUSTAINED is a result, as on a sweep) does not change the exit code.

The raw floor (--target raw, or --compare tickwire,raw): `tickwire bench fanout-relay`,
a minimal relay started exactly like the router (child process, FAR CPU, same --idle)
that copies length-prefixed frames from publishers to the subscribers of a table fixed
at connect time: no protocol, no trie. Same connections, threads, batching and
schedule, so tickwire / raw per percentile is what the router costs over the kernel
and the measuring process.

Comparisons and sweeps: --compare tickwire,raw[,nats://HOST:PORT] runs the identical
workload against each, one after the other, and prints each percentile's ratio to the
raw floor (JSON: ratios). --sweep 0.1,0.2,0.5,1.0 runs every scale for each system and
prints latency versus rate (p50, p99, p99.9, both verdicts, host) and the knee: the
highest scale with p99 <= 1 ms, sender valid and receivers sustained. --json writes
every run plus points, ratios and knees; --plot draws p50 and p99 versus rate, one
curve per system.

Shared memory: --shm starts the router with --shm NAME as well and connects every
publisher and subscriber with shm:NAME (docs/shm.md): the same workload without the
kernel on the path. With --compare tickwire,raw the tickwire runs use it.

Examples:
  tickwire bench fanout --preset pattern1 --scale 0.05
  tickwire bench fanout --preset pattern1 --scale 0.5 --compare tickwire,raw --pin 1,0 --idle block
  tickwire bench fanout --preset pattern1 --sweep 0.1,0.2,0.3,0.5,1.0 --compare tickwire,raw \\
      --duration 4 --warmup 1 --pin 1,0 --idle block --json sweep.json --plot sweep.svg
  tickwire bench fanout --preset pattern1 --scale 0.2 --shm --pin 1,0 --idle spin
  tickwire bench fanout --preset pattern1 --scale 0.05 --target nats://127.0.0.1:4222
  tickwire bench fanout --preset mdd --scale 0.1 --duration 60 --pin --json mdd.json --plot mdd.svg
  tickwire bench fanout --rate 100k --burst +100k --mix 100:67,600:33 --publishers 1 \\
      --subscribers 1
  tickwire bench fanout --router 10.0.0.5:7420 --preset pattern2 --scale 0.2

Ctrl-C stops the publishers; the subscribers drain and the report (and --json /
--plot) still covers what was measured. A second Ctrl-C exits at once.";

/// Options of `tickwire bench fanout`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    mut_arg("json", |a| a.help(
        "Write everything (machine, configuration, results, timeline) as JSON to FILE"
    )),
    mut_arg("plot", |a| a.help(
        "Draw latency percentiles per second, with the target and achieved rate on the right axis, as an SVG to FILE"
    )),
)]
pub struct FanoutArgs {
    /// A published workload: pattern1 (500k msg/s + 500k bursts), pattern2 (1M + 500k
    /// bursts), mdd (100-byte messages, 10 publishers x 10 topics x 10 subscribers at
    /// 1M msg/s). Flags given alongside override the preset's parts.
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,

    /// Multiply every rate (base and burst) by F, e.g. 0.05 or 5% on a small machine.
    /// The report prints the scaling prominently.
    #[arg(long, value_name = "F", default_value = "1", value_parser = workload::parse_scale)]
    pub scale: f64,

    /// Base send rate, msg/s over all publishers together (e.g. 2000, 500k, 1M).
    /// [default: 10k, or the preset's]
    #[arg(long, value_name = "RATE", value_parser = workload::parse_rate)]
    pub rate: Option<f64>,

    /// Extra msg/s during every other second (seconds 1, 3, 5, ... of the run), e.g.
    /// +500k; 0 for a steady rate. [default: 0, or the preset's]
    #[arg(long, value_name = "+RATE", value_parser = workload::parse_burst, allow_hyphen_values = true)]
    pub burst: Option<f64>,

    /// Message sizes and weights, interleaved: SIZE:WEIGHT,... (e.g. 100:67,600:33) or
    /// one SIZE. Bytes of payload; each at least 24 (the header).
    /// [default: 100:67,600:33, or the preset's]
    #[arg(long, value_name = "MIX", value_parser = workload::parse_mix)]
    pub mix: Option<SizeMix>,

    /// Publisher threads, one connection each; the schedule is split evenly among them.
    /// [default: 2, or the preset's]
    #[arg(long, value_name = "N")]
    pub publishers: Option<usize>,

    /// Topics; every publisher cycles through all of them. [default: 10, or the preset's]
    #[arg(long, value_name = "N")]
    pub topics: Option<usize>,

    /// Subscriber threads, one connection each. [default: 2, or the preset's]
    #[arg(long, value_name = "N")]
    pub subscribers: Option<usize>,

    /// Topics each subscriber subscribes to (consecutive, from its own offset); the
    /// expected deliveries follow from it. [default: all topics]
    #[arg(long, value_name = "N")]
    pub sub_topics: Option<usize>,

    /// Topic name length in bytes: `t/` and the zero-padded topic number (12 gives
    /// t/0000000001). NATS gets the same names with `.` (t.0000000001). [default: 12]
    #[arg(long, value_name = "BYTES")]
    pub topic_len: Option<usize>,

    /// Warm-up at the same schedule, excluded from the latency figures (2s, 500ms; a
    /// plain number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = secs)]
    pub warmup: f64,

    /// Measured after the warm-up (10s, 1m; a plain number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = secs)]
    pub duration: f64,

    /// What to measure: `tickwire` (a router this bench starts, or --router), `raw`
    /// (the raw fan-out floor: a minimal relay started like the router) or
    /// `nats://HOST:PORT` (a running core NATS server; topics map `/` to `.`).
    #[arg(long, value_name = "URL", default_value = "tickwire", value_parser = Target::parse)]
    pub target: Target,

    /// Run the identical workload against each of these, one after the other, in this
    /// order (e.g. tickwire,raw or tickwire,raw,nats://127.0.0.1:4222), and print each
    /// percentile's ratio to the raw floor's. Replaces --target.
    #[arg(long, value_name = "SYSTEMS", value_delimiter = ',', value_parser = Target::parse)]
    pub compare: Option<Vec<Target>>,

    /// Run each of these scales (for each --compare system), e.g. 0.1,0.2,0.3,0.5,1.0:
    /// prints latency versus rate and the knee (highest scale with p99 <= 1 ms and both
    /// verdicts sustained); --plot draws one curve per system. Replaces --scale.
    #[arg(long, value_name = "SCALES", value_delimiter = ',', value_parser = workload::parse_scale)]
    pub sweep: Option<Vec<f64>>,

    /// The receiver rule's bound on the measured part's p99 (10ms, 500us): above it,
    /// the receivers are NOT SUSTAINED whatever the sender achieved.
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = secs)]
    pub max_p99: f64,

    /// Use the tickwire router already running at ADDR instead of starting one:
    /// HOST:PORT (its TCP listener), or shm:NAME (its `--shm NAME`: every tickwire
    /// publisher and subscriber then connects over shared memory). Its idle strategy
    /// and pinning are then whatever it was started with.
    #[arg(long, value_name = "ADDR", conflicts_with = "idle", value_parser = harness::parse_external_router)]
    pub router: Option<harness::ExternalRouter>,

    /// Idle strategy of the router this bench starts: spin (busy-poll: lowest median
    /// latency, one busy core, the published appliances' setting), block (epoll) or
    /// hybrid. When the router's core also runs the kernel's network work (a 2-vCPU
    /// machine), a spinning router delays it and the tail pays: block gave the lower
    /// p99 there (BENCHMARKS.md, fan-out).
    #[arg(long, value_name = "STRATEGY", default_value = "spin", value_parser = ["spin", "block", "hybrid"])]
    pub idle: String,

    /// How subscriber threads wait: block (sleep in the client library until data
    /// arrives), spin (busy-poll; only sensible with a core per subscriber) or yield
    /// (busy-poll, giving the core to any other runnable thread after each empty poll:
    /// for subscribers sharing a core with the publishers).
    #[arg(long, value_parser = crate::harness::idle_parser(&CLIENT_IDLE), value_name = "IDLE", default_value_t = IdleStrategy::Block)]
    pub client_idle: IdleStrategy,

    /// Pin the measuring process (all its threads) to CPU NEAR and the router this
    /// bench starts to CPU FAR (CPUs this process may run on). A bare --pin means 1,0.
    #[arg(long, value_name = "NEAR,FAR", num_args = 0..=1, default_missing_value = "1,0", value_parser = parse_pin)]
    pub pin: Option<Pinning>,

    /// tickwire only: every message carries in-line stamps (publisher send, router in,
    /// router out; 24 more bytes on the wire) and the report adds per-hop latency:
    /// publisher -> router, inside the router, router -> subscriber.
    #[arg(long)]
    pub hops: bool,

    /// tickwire publishers batch up to this many bytes while they are behind schedule
    /// (they always flush before waiting for the next slot).
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024)]
    pub batch_bytes: usize,

    /// Publisher write coalescing: before waiting for its next slot, a publisher keeps
    /// what it has not written yet if that slot is due within this many µs of the
    /// oldest unwritten message, and writes them together (one write instead of
    /// several; latency is still measured from each message's intended time, so the
    /// wait is charged). 0: write whenever nothing is due. A plain number is µs;
    /// `50us`, `1ms` also work.
    #[arg(long, value_name = "US", default_value = "0", value_parser = tickwire_rt::units::parse_us)]
    pub coalesce_us: u64,

    /// Start the router with its monitoring endpoint (`--http` on a free loopback port,
    /// the latency probe on) and poll it every MS milliseconds from a thread of this
    /// process, as a dashboard and a Prometheus scraper would: each poll fetches
    /// `/api/dashboard` and `/metrics`. For measuring what monitoring costs
    /// (BENCHMARKS.md, "Monitoring"). A plain number is milliseconds; `1s` also works.
    #[arg(long, value_name = "MS", conflicts_with = "router", value_parser = tickwire_rt::units::parse_ms)]
    pub monitor_poll_ms: Option<u64>,

    /// Connect every tickwire publisher and subscriber over shared memory (`shm:NAME`,
    /// docs/shm.md) to the router the bench starts with `--shm NAME`, instead of TCP.
    /// With --compare it applies to the tickwire runs only. (A running router's shared
    /// memory: --router shm:NAME.)
    #[arg(long, conflicts_with = "router")]
    pub shm: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Time between connecting the last client and schedule time 0.
const START_DELAY_NS: u64 = 50_000_000;

/// Runs the bench; `tickwire` is the path of the tickwire binary (to start a router).
/// The report goes to `con`.
pub fn run(args: &FanoutArgs, tickwire: &Path, con: &mut Console<'_>) -> anyhow::Result<ExitCode> {
    // Before pinning: pinned, the process sees one core.
    let machine = crate::report::Machine::detect();
    if args.compare.is_none() && args.sweep.is_none() {
        let report = run_one(args, &args.target, args.scale, machine, tickwire, con)?;
        return finish(args, con, &report);
    }
    let systems = args
        .compare
        .clone()
        .unwrap_or_else(|| vec![args.target.clone()]);
    let scales = args.sweep.clone().unwrap_or_else(|| vec![args.scale]);
    let stop = StopFlag::install();
    let mut runs = Vec::new();
    'all: for &scale in &scales {
        for target in &systems {
            if stop.is_set() {
                break 'all;
            }
            let report = run_one(args, target, scale, machine.clone(), tickwire, con)?;
            report.print(con.out);
            runs.push(report);
        }
    }
    let all = compare::Comparison::new(machine, args.sweep.is_some(), runs);
    finish(args, con, &all)
}

/// What a fan-out invocation ends with: one run's report or a comparison of several.
trait Outcome: serde::Serialize {
    fn print(&self, out: &mut dyn std::io::Write);
    fn plot(&self, path: &Path) -> anyhow::Result<()>;
    fn exit_code(&self) -> ExitCode;
}

impl Outcome for Report {
    fn print(&self, out: &mut dyn std::io::Write) {
        Report::print(self, out)
    }
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        Report::plot(self, path)
    }
    fn exit_code(&self) -> ExitCode {
        Report::exit_code(self)
    }
}

impl Outcome for compare::Comparison {
    fn print(&self, out: &mut dyn std::io::Write) {
        compare::Comparison::print(self, out)
    }
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        compare::Comparison::plot(self, path)
    }
    fn exit_code(&self) -> ExitCode {
        compare::Comparison::exit_code(self)
    }
}

/// Prints `r`, writes its --json and --plot, and returns its exit code.
fn finish(args: &FanoutArgs, con: &mut Console<'_>, r: &impl Outcome) -> anyhow::Result<ExitCode> {
    r.print(con.out);
    args.output.write(
        con.out,
        r,
        |path| r.plot(path),
        crate::report::Announce::WrittenTo,
    )?;
    Ok(r.exit_code())
}

/// One run against `target` at `scale`; the report is returned, not printed.
fn run_one(
    args: &FanoutArgs,
    target: &Target,
    scale: f64,
    machine: crate::report::Machine,
    tickwire: &Path,
    con: &mut Console<'_>,
) -> anyhow::Result<Report> {
    let knobs = Knobs {
        rate: args.rate,
        burst: args.burst,
        mix: args.mix.clone(),
        publishers: args.publishers,
        topics: args.topics,
        subscribers: args.subscribers,
        sub_topics: args.sub_topics,
        topic_len: args.topic_len,
    };
    let w = Workload::resolve(args.preset, knobs, scale, args.warmup, args.duration)
        .map_err(|e| crate::UsageError(e.to_string()))?;
    if args.hops && !matches!(target, Target::Tickwire { .. }) {
        anyhow::bail!(
            "--hops needs tickwire's in-line stamps: it cannot be used with a {} target",
            target.name()
        );
    }
    if args.shm && args.compare.is_none() && !matches!(target, Target::Tickwire { .. }) {
        anyhow::bail!(
            "--shm connects tickwire clients over shared memory: use it with --target tickwire"
        );
    }
    if matches!(target, Target::Raw) && w.topics >= usize::from(raw::CONTROL) {
        anyhow::bail!("the raw floor numbers topics with 16 bits: at most 65534 topics");
    }
    let stop = StopFlag::install();

    // The router (unless external), then pin this process: threads inherit it.
    let mut child = None;
    let mut monitor = None;
    let router = match (target, &args.router) {
        (Target::Nats { url }, _) => RouterInfo::nats(url),
        (Target::Raw, _) => {
            let far = args.pin.map(|p| p.far);
            let c = RouterChild::start_as(tickwire, &RELAY_COMMAND, &args.idle, far, &[])?;
            let info = RouterInfo::started(c.addr, &args.idle, far, c.command()).raw_floor();
            child = Some(c);
            info
        }
        (Target::Tickwire { .. }, Some(r)) => RouterInfo::external(r),
        (Target::Tickwire { .. }, None) => {
            let far = args.pin.map(|p| p.far);
            let http = match args.monitor_poll_ms {
                Some(_) => Some(
                    std::net::TcpListener::bind("127.0.0.1:0")
                        .and_then(|l| l.local_addr())
                        .context("finding a free port for the router's --http")?,
                ),
                None => None,
            };
            monitor = http.zip(args.monitor_poll_ms);
            let http_arg = http.map(|a| a.to_string());
            let mut extra: Vec<&str> = match &http_arg {
                Some(a) => vec!["--http", a.as_str()],
                None => vec![],
            };
            let shm_name = args.shm.then(|| crate::harness::shm_name("fanout"));
            if let Some(n) = &shm_name {
                extra.extend(["--shm", n.as_str()]);
            }
            let c = RouterChild::start(tickwire, &args.idle, far, &extra)?;
            let mut info = RouterInfo::started(c.addr, &args.idle, far, c.command());
            info.shm = shm_name.map(|n| format!("{}{n}", tickwire_shm::ADDR_PREFIX));
            child = Some(c);
            info
        }
    };
    let pinned = args.pin.map(|p| harness::pin_current_thread(p.near));
    let layout = Layout {
        bench_cpu: args.pin.map(|p| p.near).filter(|_| pinned == Some(true)),
        router_cpu: if child.is_some() {
            args.pin.map(|p| p.far)
        } else {
            None
        },
        client_idle: args.client_idle,
        batch_bytes: args.batch_bytes,
        coalesce_us: args.coalesce_us,
        publisher_pacing: "sleep while > 200 µs remain, then yield the CPU until the slot",
        nats_io_threads: matches!(target, Target::Nats { .. }).then_some(2),
    };
    output::print_header(con.out, &w, target, &router, &layout);

    let rt = match target {
        Target::Nats { .. } => Some(transport::nats_runtime()?),
        Target::Tickwire { .. } | Target::Raw => None,
    };
    let names = w.topic_names();
    let target_names: Vec<String> = match target {
        Target::Nats { .. } => names.iter().map(|t| nats_subject(t)).collect(),
        Target::Tickwire { .. } | Target::Raw => names.clone(),
    };

    // Connect everything before the clock starts.
    let mut subs = Vec::with_capacity(w.subscribers);
    for s in 0..w.subscribers {
        let topics: Vec<&str> = subscriber_topics(s, w.topics, w.sub_topics)
            .map(|t| names[t].as_str())
            .collect();
        let name = format!("fanout-sub-{s}");
        subs.push(match (target, &rt) {
            (Target::Nats { url }, Some(rt)) => SubConn::nats(rt.handle(), url, &name, &topics)?,
            (Target::Raw, _) => {
                // Topic numbers fit 16 bits: checked above.
                let ids: Vec<u16> = subscriber_topics(s, w.topics, w.sub_topics)
                    .map(|t| t as u16)
                    .collect();
                SubConn::raw(router.addr_or_err()?, &name, &ids, &names, args.client_idle)?
            }
            _ => SubConn::tickwire(&router.client_addr()?, &name, &topics)?,
        });
    }
    let mut pubs = Vec::with_capacity(w.publishers);
    for p in 0..w.publishers {
        let name = format!("fanout-pub-{p}");
        pubs.push(match (target, &rt) {
            (Target::Nats { url }, Some(rt)) => PubConn::nats(rt.handle(), url, &name, &names)?,
            (Target::Raw, _) => PubConn::raw(router.addr_or_err()?, &name, args.batch_bytes)?,
            _ => PubConn::tickwire(&router.client_addr()?, &name, args.batch_bytes, &names)?,
        });
    }

    let poller =
        monitor.map(|(addr, ms)| crate::monitor_poll::Poller::start(addr, ms, stop.clone()));
    let schedule = w.schedule();
    let mut shared = Shared::new(
        MonoNanos::now().as_nanos() + START_DELAY_NS,
        stop.clone(),
        w.publishers,
        w.subscribers,
    );
    shared.hops = args.hops;
    shared.coalesce_ns = args.coalesce_us.saturating_mul(1_000);
    shared.progress = con.progress;
    // A server this run did not start (NATS, an external router) is the system under
    // test: found by its port, its CPU is not counted as competition.
    let server_port = match (target, &args.router) {
        (Target::Nats { url }, _) => url
            .rsplit_once(':')
            .and_then(|(_, p)| p.trim_end_matches('/').parse::<u16>().ok()),
        (Target::Tickwire { .. }, Some(crate::harness::ExternalRouter::Tcp(a))) => Some(a.port()),
        _ => None,
    };
    let watch = crate::host_watch::HostWatch::start_all_serving(server_port.as_slice());
    let (pub_results, sub_results) = run_threads(
        &w,
        &schedule,
        pubs,
        subs,
        &target_names,
        args.client_idle,
        &shared,
    )?;

    let stalls = watch.finish();
    let host = stalls.within(MonoNanos(shared.start_ns + w.warmup_ns), MonoNanos::now());
    let router_stats = match (target, router.client_addr()) {
        (Target::Tickwire { .. }, Ok(addr)) => {
            tickwire_client::Client::connect_to(&addr, tickwire_client::ClientOptions::default())
                .and_then(|mut c| c.stats_json())
                .ok()
                .and_then(|j| serde_json::from_str(&j).ok())
        }
        _ => None,
    };
    // The poller stops before the router does (a poll of a stopped router would fail).
    let polls = poller.map(crate::monitor_poll::Poller::finish);
    drop(child);
    drop(rt);

    let timeline = std::mem::take(
        &mut *shared
            .timeline
            .lock()
            .map_err(|_| anyhow::anyhow!("a subscriber panicked"))?,
    );
    // Seconds wholly inside the measured part: from the first after the warm-up to the
    // schedule's end, or to the second Ctrl-C stopped the publishers in (new-user pass:
    // a run stopped after 2 measured seconds said "10 of 10 measured seconds").
    let stopped_at = pub_results.iter().filter_map(|p| p.stopped_at_rel_ns).min();
    let measured_end = stopped_at.map_or(schedule.end_ns() / 1_000_000_000, |at| {
        at.min(schedule.end_ns()).div_ceil(1_000_000_000)
    });
    let measured_start = w.warmup_ns.div_ceil(1_000_000_000) as usize;
    let measured = measured_start..(measured_end as usize).max(measured_start);
    let free = stalls.stall_free_seconds(MonoNanos(shared.start_ns), measured.end);
    let stall_free = crate::host_watch::StallFree::from_timeline(&timeline, measured, &free);
    let mut report = Report::build(
        machine,
        &w,
        &schedule,
        &router,
        &layout,
        &pub_results,
        &sub_results,
        timeline,
        router_stats,
        stop.is_set(),
    );
    report.host = Some(host);
    report.stall_free = Some(stall_free);
    if let Some(polls) = polls {
        let _ = writeln!(
            con.out,
            "monitoring: --http on the router, polled every {} ms: {} polls, {} failed",
            polls.period_ms, polls.ok, polls.failed
        );
    }
    report.receivers = Some(ReceiverVerdict::judge(
        &report.timeline,
        report.latency.p99_us,
        args.max_p99 * 1e6,
        report.counters.reconciled,
    ));
    Ok(report)
}

/// The relay's subcommand: the hidden `tickwire bench fanout-relay`.
pub const RELAY_COMMAND: [&str; 2] = ["bench", "fanout-relay"];

/// Spawns the subscriber and publisher threads, shows progress, waits for the
/// publishers, tells the subscribers what to expect and waits for them.
fn run_threads(
    w: &Workload,
    schedule: &crate::schedule::Schedule,
    pubs: Vec<PubConn>,
    subs: Vec<SubConn>,
    names: &[String],
    idle: IdleStrategy,
    shared: &Shared,
) -> anyhow::Result<(Vec<PubResult>, Vec<SubResult>)> {
    // On any failure: stop the publishers and release the subscribers.
    let abort = || {
        shared.stop.set();
        for e in &shared.expected {
            e.store(0, Ordering::Release);
        }
    };
    std::thread::scope(|sc| {
        let mut sub_handles = Vec::new();
        for (s, conn) in subs.into_iter().enumerate() {
            let h = std::thread::Builder::new()
                .name(format!("fanout-sub-{s}"))
                .spawn_scoped(sc, move || {
                    measure::subscribe(s, conn, w, names, idle, shared)
                });
            match h {
                Ok(h) => sub_handles.push(h),
                Err(e) => {
                    abort();
                    return Err(e).context("starting a subscriber thread");
                }
            }
        }
        let mut pub_handles = Vec::new();
        for (k, conn) in pubs.into_iter().enumerate() {
            let h = std::thread::Builder::new()
                .name(format!("fanout-pub-{k}"))
                .spawn_scoped(sc, move || measure::publish(k, conn, w, schedule, shared));
            match h {
                Ok(h) => pub_handles.push(h),
                Err(e) => {
                    abort();
                    return Err(e).context("starting a publisher thread");
                }
            }
        }

        let mut progress = Progress::new(shared.progress);
        let mut last = (MonoNanos::now().as_nanos(), 0u64, 0u64);
        let mut tick = |progress: &mut Progress, draining: bool| {
            progress.tick(|| {
                let now = MonoNanos::now().as_nanos();
                let sent: u64 = shared.pub_sent.iter().map(|a| a.load(Ordering::Relaxed)).sum();
                let recv: u64 = shared.sub_received.iter().map(|a| a.load(Ordering::Relaxed)).sum();
                let behind = shared.pub_late.iter().map(|a| a.load(Ordering::Relaxed)).max().unwrap_or(0);
                let dt = (now.saturating_sub(last.0) as f64 / 1e9).max(1e-9);
                let (ds, dr) = (sent.saturating_sub(last.1), recv.saturating_sub(last.2));
                // The rates are over the interval since the last line: so is the target,
                // taken at its middle (bench-review pass: at a step change the line paired
                // the new step's target with the old step's rates).
                let mid = (last.0 / 2 + now / 2).saturating_sub(shared.start_ns);
                // Labelled by the interval the rates are over (new-user pass: "[8.0 s]"
                // read as second 8 of the table, which is the one starting at 8 s).
                let from = last.0.saturating_sub(shared.start_ns);
                last = (now, sent, recv);
                let t = now.saturating_sub(shared.start_ns);
                let phase = if draining {
                    "drain"
                } else if t < w.warmup_ns {
                    "warm-up"
                } else {
                    "measure"
                };
                format!(
                    "[{:>5.1}-{:.1} s {phase:>7}] target {:>6} msg/s | sent {:>6} msg/s | delivered {:>6} msg/s | sender behind {:.0} µs",
                    from as f64 / 1e9,
                    t as f64 / 1e9,
                    human_rate(w.pattern.rate_at(mid)),
                    human_rate(ds as f64 / dt),
                    human_rate(dr as f64 / dt),
                    behind as f64 / 1e3
                )
            })
        };
        while !pub_handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            tick(&mut progress, false);
        }
        let mut pub_results = Vec::new();
        for h in pub_handles {
            match h.join() {
                Ok(r) => pub_results.push(r),
                Err(_) => {
                    abort();
                    anyhow::bail!("a publisher thread panicked");
                }
            }
        }

        // What each subscriber must receive, from what was actually sent.
        let mut per_topic = vec![0u64; w.topics];
        for r in &pub_results {
            for (acc, n) in per_topic.iter_mut().zip(&r.per_topic) {
                *acc += n;
            }
        }
        for (s, e) in shared.expected.iter().enumerate() {
            let n = subscriber_topics(s, w.topics, w.sub_topics)
                .map(|t| per_topic[t])
                .sum();
            e.store(n, Ordering::Release);
        }
        while !sub_handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            tick(&mut progress, true);
        }
        let mut sub_results = Vec::new();
        for h in sub_handles {
            sub_results.push(
                h.join()
                    .map_err(|_| anyhow::anyhow!("a subscriber thread panicked"))?,
            );
        }
        Ok((pub_results, sub_results))
    })
}

/// A duration option kept as f64 seconds, in tickwire-rt's one duration syntax.
fn secs(s: &str) -> Result<f64, String> {
    tickwire_rt::units::parse_duration(s).map(|d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FanoutArgs,
    }

    #[test]
    fn flags_parse_with_presets_units_and_a_bare_pin() {
        let c = Cli::try_parse_from([
            "x",
            "--preset",
            "pattern1",
            "--scale",
            "0.05",
            "--burst",
            "+250k",
            "--mix",
            "100:2,600:1",
            "--pin",
            "--target",
            "nats://127.0.0.1:4222",
        ])
        .unwrap();
        assert_eq!(c.args.preset, Some(Preset::Pattern1));
        assert_eq!(c.args.scale, 0.05);
        assert_eq!(c.args.burst, Some(250_000.0));
        assert_eq!(c.args.pin, Some(Pinning { near: 1, far: 0 }));
        assert!(matches!(c.args.target, Target::Nats { .. }));
        let c = Cli::try_parse_from([
            "x",
            "--sweep",
            "0.1,0.5",
            "--compare",
            "tickwire,raw",
            "--max-p99",
            "2ms",
        ])
        .unwrap();
        assert_eq!(c.args.sweep, Some(vec![0.1, 0.5]));
        assert_eq!(
            c.args.compare,
            Some(vec![Target::Tickwire { addr: None }, Target::Raw])
        );
        assert_eq!(c.args.max_p99, 0.002);
        let c = Cli::try_parse_from(["x", "--pin", "0,1", "--rate", "2k"]).unwrap();
        assert_eq!(c.args.pin, Some(Pinning { near: 0, far: 1 }));
        assert_eq!(c.args.rate, Some(2000.0));
        assert!(Cli::try_parse_from(["x", "--target", "tcp://x:1"]).is_err());
        assert!(Cli::try_parse_from(["x", "--idle", "nap"]).is_err());
    }
}
