//! The `tickwire bench guaranteed` driver: open-loop guaranteed publishing into one
//! durable queue with acknowledging consumers (docs/benchmarking.md family E), against
//! tickwire or, with `--target nats[://HOST:PORT]`, the identical workload against NATS
//! JetStream.
//!
//! One measuring process holds every publisher and consumer thread (one clock); the
//! router (or nats-server) is a child process. The parts:
//!
//! - this file: flags, the payload header, what a publisher and a consumer record, the
//!   reconciliation (lossless check) and the orchestration.
//! - [`tickwire`]: a minimal guaranteed-messaging driver over `tickwire_wire` and a
//!   std `TcpStream` (HELLO, PUB_OPEN, PUBLISH SEQ|GUARANTEED, BIND, CONSUMER_ACK).
//! - [`nats`]: the same over async-nats' JetStream API, and the nats-server child.
//! - [`floor`]: `--target floor`, raw TCP + write + fdatasync per read batch + ACK, the
//!   floor measured in the same session.
//! - [`output`]: the terminal report, JSON and the SVG plot.

mod floor;
mod nats;
mod output;
mod tickwire;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tickwire_rt::MonoNanos;

use crate::fanout::workload::Header;
use crate::harness::{RouterChild, StopFlag};
use crate::report::OutputArgs;
use crate::schedule::{RatePattern, Schedule, SizeMix};
use crate::stats::Latency;

const AFTER_HELP: &str = "\
What runs:
  One measuring process (this one) with a thread per publisher and per consumer, and
  the router as a child process: `tickwire router --data-dir <temporary> --sync
  <--sync>` on a free loopback port (unless --router ADDR), or nats-server with
  JetStream (--target nats starts one on a free port with a temporary store directory;
  --target nats://HOST:PORT uses a running one).
  The consumers create (or reuse) one durable queue, `gbench`, subscribed to bench/>
  (JetStream: a file-storage stream GBENCH on bench.> and a durable pull consumer with
  explicit acks), bind to it and acknowledge what they received, one acknowledgement
  range per read batch (JetStream: one ack per message, as its API acknowledges).
  Publishers follow one open-loop schedule (slot i goes to publisher i % P), each
  with its own publisher identity, keeping at most the router's publish window
  (PUB_OPENED) unacknowledged (JetStream: the same number of ack futures in flight);
  a full window holds the publisher back, which shows up as latency (measured from
  the intended send time: no coordinated omission) and as a lower achieved rate.
  Every payload starts with the publisher id, its message number and the intended
  send time. Warm-up messages are excluded from the latency figures (they are counted
  in the reconciliation).

Report: publish->ACK latency (at the ACK covering each publish) and publish->delivery
latency (at the consumer), samples, min, p50, p90, p99, p99.9, p99.99, max, mean,
stddev; target, achieved publish rate and acknowledged rate (below 90% of the target:
INVALID, saturated); sender lateness; NACKs by reason; delivered, redelivered; the
lossless check: every acknowledged message delivered, none delivered twice without the
redelivered flag, none delivered that was not sent. The durability policy is stated
with every result. Exit code: 0 ok, 1 lossless check failed or an error, 3 INVALID,
130 when Ctrl-C stopped the run (the report still printed; its rates are over the time
it ran, so only a run that fell behind before the stop is INVALID), 2 a usage error.

Examples:
  tickwire bench guaranteed                                  # 135k msg/s, fsync, 5 s
  tickwire bench guaranteed --rate 200k --sync interval:10ms --json gm.json --plot gm.svg
  tickwire bench guaranteed --target nats                    # JetStream, default sync
  tickwire bench guaranteed --target nats --nats-sync always # JetStream, fsync per write
  tickwire bench guaranteed --router 127.0.0.1:7420 --rate 135k --duration 20s";

/// Options of `tickwire bench guaranteed`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    mut_arg("json", |a| a.help(
        "Write everything (machine, configuration, durability, results, timeline) as JSON to FILE"
    )),
    mut_arg("plot", |a| a.help(
        "Draw ACK and delivery latency percentiles per second, with the acknowledged rate on the right axis, as an SVG to FILE"
    )),
)]
pub struct GuaranteedArgs {
    /// Publish rate, msg/s over all publishers together (e.g. 2000, 135k, 1M).
    #[arg(long, value_name = "RATE", default_value = "135k", value_parser = crate::schedule::parse_rate)]
    pub rate: f64,

    /// Measured after the warm-up (5s, 1m; a plain number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = secs)]
    pub duration: f64,

    /// Warm-up at the same rate, excluded from the latency figures.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = secs)]
    pub warmup: f64,

    /// Payload size in bytes (at least 24, the header). --mix overrides it.
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    pub size: usize,

    /// Message sizes and weights, interleaved, as for `bench fanout`: SIZE:WEIGHT,...
    /// (e.g. 100:67,600:33, the published mix).
    #[arg(long, value_name = "MIX", value_parser = crate::fanout::workload::parse_mix)]
    pub mix: Option<SizeMix>,

    /// Publisher threads, one connection and publisher identity each.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub publishers: usize,

    /// Consumer threads, one connection and binding each, on the one queue.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub consumers: usize,

    /// Most unacknowledged deliveries per consumer (BIND window; JetStream max_ack_pending).
    #[arg(long, value_name = "N", default_value_t = 8192)]
    pub consumer_window: u32,

    /// Publish window used against JetStream (tickwire uses the window its router
    /// grants in PUB_OPENED, reported); 4096 is the tickwire router's default.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub nats_window: u32,

    /// Durability policy of the router this bench starts: fsync (fdatasync before every
    /// ACK, group commit), interval:10ms, page-cache.
    #[arg(long, value_name = "POLICY", default_value = "fsync")]
    pub sync: String,

    /// Idle strategy of the router this bench starts (spin, block, hybrid).
    #[arg(long, value_name = "STRATEGY", default_value = "block", value_parser = ["spin", "block", "hybrid"])]
    pub idle: String,

    /// Use the tickwire router already listening at ADDR (with whatever --sync it runs;
    /// the report says "as configured").
    #[arg(long, value_name = "ADDR")]
    pub router: Option<SocketAddr>,

    /// What to measure: `tickwire`, `nats` (start nats-server -js on a free port with a
    /// temporary store), `nats://HOST:PORT` (a running JetStream server) or `floor` (the
    /// publishers' bytes to a raw TCP server that writes them to a file and fdatasyncs
    /// once per read batch before acknowledging: no routing, no delivery).
    #[arg(long, value_name = "TARGET", default_value = "tickwire", value_parser = Target::parse)]
    pub target: Target,

    /// JetStream sync setting of the nats-server this bench starts: default (the
    /// server's sync_interval, fsync every 2 minutes: acknowledged before fsync) or
    /// always (sync_interval: always: fsync every write before the ack).
    #[arg(long, value_name = "MODE", default_value = "default", value_parser = ["default", "always"])]
    pub nats_sync: String,

    /// The nats-server binary for --target nats.
    #[arg(long, value_name = "PATH", default_value = "nats-server")]
    pub nats_server: String,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// What `--target` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tickwire,
    /// Start a nats-server child.
    NatsLocal,
    /// A running server.
    Nats(String),
    /// The floor: raw TCP + write + fdatasync per read batch, then the ACK; no delivery.
    Floor,
}

impl Target {
    fn parse(s: &str) -> Result<Target, String> {
        match s {
            "tickwire" => Ok(Target::Tickwire),
            "nats" => Ok(Target::NatsLocal),
            "floor" => Ok(Target::Floor),
            _ if s.starts_with("nats://") => Ok(Target::Nats(s.to_string())),
            _ => Err(format!(
                "{s:?}: expected tickwire, nats, nats://HOST:PORT or floor"
            )),
        }
    }
}

/// Bytes at the start of every payload: the fan-out bench's [`Header`] with the topic
/// field reserved (0): publisher id (u32), reserved (u32), message number of that
/// publisher (u64, from 0), intended send time (u64 ns, MonoNanos).
pub const HEADER_LEN: usize = crate::fanout::workload::HEADER_LEN;

fn write_header(buf: &mut [u8], publisher: u32, n: u64, intended_ns: u64) {
    Header {
        publisher,
        topic: 0,
        seq: n,
        intended_ns,
    }
    .encode(buf);
}

/// (publisher, message number, intended send time in ns), or None when too short.
fn read_header(p: &[u8]) -> Option<(u32, u64, u64)> {
    Header::decode(p).map(|h| (h.publisher, h.seq, h.intended_ns))
}

/// What one run is: the schedule, the sizes, who is where. Shared read-only by every
/// thread.
#[derive(Debug)]
pub struct Plan {
    pub schedule: Schedule,
    pub mix: SizeMix,
    pub publishers: usize,
    pub consumers: usize,
    pub consumer_window: u32,
    /// Schedule time 0 on the monotonic clock.
    pub start_ns: u64,
    /// Messages each publisher sends (its share of the schedule).
    pub per_publisher: Vec<u64>,
    /// Where progress lines go (the caller's sink).
    pub progress: fn(&str),
}

impl Plan {
    fn slots_of(&self, p: usize) -> impl Iterator<Item = crate::schedule::Slot> + '_ {
        self.schedule.slots_for(p, self.publishers)
    }
    /// Seconds of the run (warm-up included), for the per-second timeline.
    fn seconds(&self) -> usize {
        (self.schedule.end_ns().div_ceil(1_000_000_000) as usize).max(1)
    }
}

/// Flags the threads share.
#[derive(Debug, Default)]
pub struct Shared {
    /// Ctrl-C: publishers stop sending (and still wait for outstanding ACKs briefly).
    pub stop: Option<StopFlag>,
    /// Set when every publisher finished: consumers stop once they have what was
    /// acknowledged, or at the drain deadline.
    pub publishers_done: AtomicBool,
    /// Set by the main thread: consumers stop now.
    pub consumers_stop: AtomicBool,
    /// First deliveries over all consumers (for the drain).
    pub delivered: AtomicU64,
    /// ACKs over all publishers (progress line).
    pub acked: AtomicU64,
    /// Publishes sent over all publishers (progress line).
    pub sent: AtomicU64,
    /// When a publisher first saw the stop (monotonic ns; 0: none did): where a
    /// stopped run's rates end.
    pub stopped_at: AtomicU64,
}

impl Shared {
    /// True once Ctrl-C stopped the run. The first call that sees it notes the time
    /// (publishers ask before every send, so within one slot of the signal): a stopped
    /// run's rates are over the time it ran, not its schedule (new-user pass: a run cut
    /// at half time read as INVALID, saturated, at half its rate).
    fn stopped(&self) -> bool {
        let stopped = self.stop.as_ref().is_some_and(|s| s.is_set());
        if stopped && self.stopped_at.load(Ordering::Relaxed) == 0 {
            let now = MonoNanos::now().as_nanos().max(1);
            let _ = self
                .stopped_at
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
        stopped
    }

    /// When the publishers stopped sending because of the stop, from schedule time 0
    /// (`start_ns`); None when they were not stopped (they ran their schedule).
    fn stopped_at_rel(&self, start_ns: u64) -> Option<u64> {
        match self.stopped_at.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t.saturating_sub(start_ns)),
        }
    }
}

/// One publisher's record.
#[derive(Debug)]
pub struct PubResult {
    /// Slots of the schedule for this publisher.
    pub planned: u64,
    pub sent: u64,
    pub sent_measured: u64,
    /// State per message number: 0 sent and unresolved, 1 acknowledged, 2 NACKed.
    pub state: Vec<u8>,
    pub nacks: BTreeMap<String, u64>,
    pub ack: Latency,
    pub lateness: Latency,
    /// Per second of intended send time: ACK latency.
    pub ack_by_second: Vec<Latency>,
    /// Acknowledged messages per second of ACK arrival.
    pub acked_per_second: Vec<u64>,
    /// Last send, last ACK (ns from schedule time 0).
    pub last_send_ns: u64,
    pub last_ack_ns: u64,
    /// Measured messages acknowledged.
    pub acked_measured: u64,
    /// The window granted (tickwire: PUB_OPENED) or used (JetStream).
    pub window: u32,
    /// An error that ended the publisher early, if any.
    pub error: Option<String>,
}

impl PubResult {
    fn new(plan: &Plan, p: usize, window: u32) -> PubResult {
        let secs = plan.seconds() + 60;
        PubResult {
            planned: plan.per_publisher[p],
            sent: 0,
            sent_measured: 0,
            state: Vec::with_capacity(plan.per_publisher[p] as usize),
            nacks: BTreeMap::new(),
            ack: Latency::new(),
            lateness: Latency::new(),
            ack_by_second: vec![Latency::new(); plan.seconds()],
            acked_per_second: vec![0; secs],
            last_send_ns: 0,
            last_ack_ns: 0,
            acked_measured: 0,
            window,
            error: None,
        }
    }

    /// Records the ACK of message `n` (intended at `intended_ns` from time 0), arriving
    /// at `now_ns` (from time 0).
    fn on_ack(&mut self, n: u64, intended_ns: u64, now_ns: u64, warmup_ns: u64) {
        let Some(s) = self.state.get_mut(n as usize) else {
            return;
        };
        if *s != 0 {
            return;
        }
        *s = 1;
        self.last_ack_ns = self.last_ack_ns.max(now_ns);
        if let Some(c) = self
            .acked_per_second
            .get_mut((now_ns / 1_000_000_000) as usize)
        {
            *c += 1;
        }
        if intended_ns >= warmup_ns {
            let lat = now_ns.saturating_sub(intended_ns);
            self.ack.record(lat);
            self.acked_measured += 1;
            if let Some(h) = self
                .ack_by_second
                .get_mut((intended_ns / 1_000_000_000) as usize)
            {
                h.record(lat);
            }
        }
    }

    fn on_nack(&mut self, n: u64, reason: String) {
        if let Some(s) = self.state.get_mut(n as usize) {
            if *s == 0 {
                *s = 2;
                *self.nacks.entry(reason).or_default() += 1;
            }
        }
    }
}

/// One consumer's record.
#[derive(Debug)]
pub struct ConsResult {
    pub deliveries: u64,
    pub redelivered: u64,
    /// Per publisher, per message number: deliveries without the redelivered flag
    /// (saturating at 255), and with it.
    pub plain: Vec<Vec<u8>>,
    pub flagged: Vec<Vec<u8>>,
    /// Deliveries naming a publisher or message number that was never sent, or too short.
    pub unknown: u64,
    pub delivery: Latency,
    pub delivery_by_second: Vec<Latency>,
    pub error: Option<String>,
}

impl ConsResult {
    fn new(plan: &Plan) -> ConsResult {
        ConsResult {
            deliveries: 0,
            redelivered: 0,
            plain: plan
                .per_publisher
                .iter()
                .map(|n| vec![0; *n as usize])
                .collect(),
            flagged: plan
                .per_publisher
                .iter()
                .map(|n| vec![0; *n as usize])
                .collect(),
            unknown: 0,
            delivery: Latency::new(),
            delivery_by_second: vec![Latency::new(); plan.seconds()],
            error: None,
        }
    }

    /// Records one delivery of `payload` at `now_ns` (from time 0); returns true when it
    /// was this consumer's first of that message.
    fn on_delivery(&mut self, plan: &Plan, payload: &[u8], redelivered: bool, now_ns: u64) -> bool {
        self.deliveries += 1;
        if redelivered {
            self.redelivered += 1;
        }
        let Some((p, n, intended)) = read_header(payload) else {
            self.unknown += 1;
            return false;
        };
        let (Some(plain), Some(flagged)) = (
            self.plain
                .get_mut(p as usize)
                .and_then(|v| v.get_mut(n as usize)),
            self.flagged
                .get_mut(p as usize)
                .and_then(|v| v.get_mut(n as usize)),
        ) else {
            self.unknown += 1;
            return false;
        };
        let first = *plain == 0 && *flagged == 0;
        if redelivered {
            *flagged = flagged.saturating_add(1);
        } else {
            *plain = plain.saturating_add(1);
        }
        if first && intended >= plan.schedule.warmup_ns {
            let lat = now_ns.saturating_sub(intended);
            self.delivery.record(lat);
            if let Some(h) = self
                .delivery_by_second
                .get_mut((intended / 1_000_000_000) as usize)
            {
                h.record(lat);
            }
        }
        first
    }
}

/// A publisher held back by a full window stops sending this long after the schedule
/// ends (the slots left are counted as unsent): bounds a run against a server that
/// does not keep up.
pub const LATE_CUTOFF_NS: u64 = 1_000_000_000;

impl Plan {
    /// True once the schedule's end plus [`LATE_CUTOFF_NS`] has passed.
    fn past_cutoff(&self) -> bool {
        MonoNanos::now().as_nanos() > self.start_ns + self.schedule.end_ns() + LATE_CUTOFF_NS
    }
}

/// The lossless check over every publisher and consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reconciliation {
    /// Slots of the schedule not sent: the publisher was still held back by a full
    /// window one second after the schedule ended.
    pub unsent: u64,
    pub sent: u64,
    pub acked: u64,
    pub nacked: u64,
    /// Sent, neither acknowledged nor refused when the publishers gave up waiting.
    pub unresolved: u64,
    /// Distinct messages delivered at least once.
    pub delivered_distinct: u64,
    pub deliveries: u64,
    pub redelivered: u64,
    /// Acknowledged, never delivered.
    pub acked_lost: u64,
    /// Delivered more than once without the redelivered flag (extra copies).
    pub unflagged_duplicates: u64,
    /// Delivered, never sent (or unreadable).
    pub unknown: u64,
    /// NACKed and delivered anyway.
    pub nacked_delivered: u64,
    /// False for the floor (nothing is delivered): only the ACKs are checked.
    pub delivery_checked: bool,
    pub lossless: bool,
}

fn reconcile(pubs: &[PubResult], cons: &[ConsResult], delivery_checked: bool) -> Reconciliation {
    let mut r = Reconciliation {
        delivery_checked,
        ..Reconciliation::default()
    };
    for c in cons {
        r.deliveries += c.deliveries;
        r.redelivered += c.redelivered;
        r.unknown += c.unknown;
    }
    for (p, pr) in pubs.iter().enumerate() {
        r.sent += pr.sent;
        r.unsent += pr.planned.saturating_sub(pr.sent);
        for (n, state) in pr.state.iter().enumerate() {
            let (mut plain, mut flagged) = (0u64, 0u64);
            for c in cons {
                plain += u64::from(c.plain[p][n]);
                flagged += u64::from(c.flagged[p][n]);
            }
            let delivered = plain + flagged > 0;
            if delivered {
                r.delivered_distinct += 1;
            }
            r.unflagged_duplicates += plain.saturating_sub(1);
            match state {
                1 => {
                    r.acked += 1;
                    if !delivered && delivery_checked {
                        r.acked_lost += 1;
                    }
                }
                2 => {
                    r.nacked += 1;
                    if delivered {
                        r.nacked_delivered += 1;
                    }
                }
                _ => r.unresolved += 1,
            }
        }
        // Deliveries of numbers this publisher never sent.
        for c in cons {
            let extra: u64 = c.plain[p]
                .iter()
                .zip(&c.flagged[p])
                .skip(pr.state.len())
                .map(|(a, b)| u64::from(*a) + u64::from(*b))
                .sum();
            r.unknown += extra;
        }
    }
    r.lossless = r.acked_lost == 0
        && r.unflagged_duplicates == 0
        && r.unknown == 0
        && r.nacked_delivered == 0
        && r.acked > 0
        && (delivery_checked || r.acked + r.nacked == r.sent);
    r
}

/// Time between connecting the last client and schedule time 0.
const START_DELAY_NS: u64 = 100_000_000;
/// How long publishers wait for outstanding ACKs after their last send, and consumers
/// for the last deliveries after the publishers finished.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The durability policy, in words, for the report.
fn durability(args: &GuaranteedArgs) -> String {
    match (&args.target, args.router) {
        (Target::Tickwire, Some(_)) => {
            "tickwire, as configured on the external router (--sync not known here)".into()
        }
        (Target::Tickwire, None) => match args.sync.as_str() {
            "fsync" => "tickwire --sync fsync: fdatasync before every ACK (group commit)".into(),
            "page-cache" => "tickwire --sync page-cache: ACK once in the page cache, no fsync".into(),
            s => format!("tickwire --sync {s}: ACK after write, fdatasync on that interval (acknowledged before fsync)"),
        },
        (Target::NatsLocal, _) if args.nats_sync == "always" => {
            "JetStream file storage, sync_interval: always (fsync every write before the ack)".into()
        }
        (Target::NatsLocal, _) => "JetStream file storage, default sync_interval (fsync every 2 min: acknowledged before fsync)".into(),
        (Target::Floor, _) => "floor: raw TCP + write + fdatasync per read batch before the ACK (group commit; no routing, no delivery)".into(),
        (Target::Nats(_), _) => "JetStream file storage on an external server, sync as configured there (not checked here)".into(),
    }
}

/// Runs the bench; `tickwire_bin` is the path of the tickwire binary (to start a router).
pub fn run(
    args: &GuaranteedArgs,
    tickwire_bin: &Path,
    con: &mut crate::console::Console<'_>,
) -> anyhow::Result<ExitCode> {
    let mix = args
        .mix
        .clone()
        .unwrap_or_else(|| SizeMix::single(args.size));
    if mix.cycle().iter().any(|s| *s < HEADER_LEN) {
        return Err(crate::UsageError(format!(
            "every message size must be at least {HEADER_LEN} bytes (the header)"
        ))
        .into());
    }
    if args.publishers == 0 || args.consumers == 0 {
        return Err(
            crate::UsageError("--publishers and --consumers must be at least 1".into()).into(),
        );
    }
    if !(args.rate.is_finite() && args.rate > 0.0) {
        return Err(crate::UsageError("--rate must be positive".into()).into());
    }
    // New-user pass: --duration 0 ran, and reported a target of 0 msg/s next to the
    // warm-up's 135,000 published a second and zero samples as 0.00 µs.
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err(crate::UsageError(
            "--duration must be above 0 (the measured part's length, e.g. 10s)".into(),
        )
        .into());
    }
    let stop = StopFlag::install();
    let machine = crate::report::Machine::detect();
    let schedule = Schedule {
        pattern: RatePattern::Steady { rate: args.rate },
        warmup_ns: (args.warmup * 1e9) as u64,
        duration_ns: (args.duration * 1e9) as u64,
    };
    let mut per_publisher = vec![0u64; args.publishers];
    for s in schedule.slots() {
        per_publisher[(s.index % args.publishers as u64) as usize] += 1;
    }
    let durability = durability(args);

    // The server.
    let data_dir = tempfile::Builder::new()
        .prefix("tickwire-gbench-")
        .tempdir()
        .context("creating a temporary data directory")?;
    let data_path = data_dir.path().display().to_string();
    let mut router_child = None;
    let mut nats_child = None;
    let (system, server, server_command) = match &args.target {
        Target::Tickwire => match args.router {
            Some(addr) => ("tickwire", addr.to_string(), None),
            None => {
                let c = RouterChild::start(
                    tickwire_bin,
                    &args.idle,
                    None,
                    &["--data-dir", &data_path, "--sync", &args.sync],
                )?;
                let out = (
                    "tickwire",
                    c.addr.to_string(),
                    Some(c.command().to_string()),
                );
                router_child = Some(c);
                out
            }
        },
        Target::NatsLocal => {
            let c = nats::NatsChild::start(&args.nats_server, data_dir.path(), &args.nats_sync)?;
            let out = ("nats-jetstream", c.url.clone(), Some(c.command.clone()));
            nats_child = Some(c);
            out
        }
        Target::Nats(url) => ("nats-jetstream", url.clone(), None),
        Target::Floor => ("floor", floor::start(data_dir.path())?.to_string(), None),
    };
    (con.progress)(&format!(
        "bench guaranteed: {system} at {server}; {} msg/s for {} s (+{} s warm-up), sizes {:?}, {} publisher(s), {} consumer(s)\n  durability: {durability}",
        args.rate,
        args.duration,
        args.warmup,
        mix.cycle().iter().collect::<std::collections::BTreeSet<_>>(),
        args.publishers,
        args.consumers
    ));

    let mut plan = Plan {
        schedule,
        mix,
        publishers: args.publishers,
        consumers: if args.target == Target::Floor {
            0
        } else {
            args.consumers
        },
        consumer_window: args.consumer_window,
        start_ns: 0,
        per_publisher,
        progress: con.progress,
    };
    let shared = Arc::new(Shared {
        stop: Some(stop.clone()),
        ..Shared::default()
    });

    let (pubs, cons, extra) = match &args.target {
        Target::Tickwire | Target::Floor => {
            let addr: SocketAddr = server.parse().context("the router's address")?;
            tickwire::run(addr, &mut plan, &shared)?
        }
        Target::NatsLocal | Target::Nats(_) => {
            let url = match &nats_child {
                Some(c) => c.url.clone(),
                None => server.clone(),
            };
            nats::run(&url, args.nats_window, &mut plan, &shared)?
        }
    };
    drop(router_child);
    drop(nats_child);

    let recon = reconcile(&pubs, &cons, plan.consumers > 0);
    let report = output::Report::build(output::Inputs {
        machine,
        system,
        server,
        server_command,
        durability,
        args,
        plan: &plan,
        pubs: &pubs,
        cons: &cons,
        recon,
        extra,
        stopped: stop.is_set(),
        stopped_at_ns: shared.stopped_at_rel(plan.start_ns),
    });
    report.print(con.out);
    args.output.write(
        con.out,
        &report,
        |path| report.plot(path),
        crate::report::Announce::WrittenTo,
    )?;
    Ok(report.exit_code())
}

/// A duration option kept as f64 seconds, in tickwire-rt's one duration syntax.
fn secs(s: &str) -> Result<f64, String> {
    tickwire_rt::units::parse_duration(s).map(|d| d.as_secs_f64())
}

/// Nanoseconds from schedule time 0 (`start_ns` on the monotonic clock) to now.
#[inline]
fn since_start(start_ns: u64) -> u64 {
    MonoNanos::now().as_nanos().saturating_sub(start_ns)
}

/// The end of a run, the same for every target: progress until the publishers finish,
/// then until every accepted publish is delivered (or `DRAIN` passes, or the consumers
/// stop), a little longer so a duplicate right behind the last message is seen too, then
/// the consumers stop; returns what each side counted.
fn finish(
    shared: &Shared,
    plan: &Plan,
    pub_h: Vec<std::thread::ScopedJoinHandle<'_, PubResult>>,
    cons_h: Vec<std::thread::ScopedJoinHandle<'_, ConsResult>>,
) -> anyhow::Result<(Vec<PubResult>, Vec<ConsResult>)> {
    progress_until(shared, plan, || pub_h.iter().all(|h| h.is_finished()));
    let pubs: Vec<PubResult> = pub_h
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a publisher panicked"))
        })
        .collect::<anyhow::Result<_>>()?;
    let accepted: u64 = pubs
        .iter()
        .map(|p| p.sent - p.nacks.values().sum::<u64>())
        .sum();
    shared.publishers_done.store(true, Ordering::Release);
    let deadline = std::time::Instant::now() + DRAIN;
    progress_until(shared, plan, || {
        shared.delivered.load(Ordering::Acquire) >= accepted
            || std::time::Instant::now() > deadline
            || cons_h.iter().all(|h| h.is_finished())
    });
    std::thread::sleep(Duration::from_millis(200));
    shared.consumers_stop.store(true, Ordering::Release);
    let cons: Vec<ConsResult> = cons_h
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a consumer panicked")))
        .collect::<anyhow::Result<_>>()?;
    Ok((pubs, cons))
}

/// Prints a progress line every second until `done` is true.
fn progress_until(shared: &Shared, plan: &Plan, done: impl Fn() -> bool) {
    let mut progress = crate::harness::Progress::new(plan.progress);
    while !done() {
        std::thread::sleep(Duration::from_millis(50));
        progress.tick(|| {
            format!(
                "t={:.0}s sent {} acked {} delivered {}",
                since_start(plan.start_ns) as f64 / 1e9,
                shared.sent.load(Ordering::Relaxed),
                shared.acked.load(Ordering::Relaxed),
                shared.delivered.load(Ordering::Relaxed)
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: GuaranteedArgs,
    }

    #[test]
    fn flags_parse_with_units_and_targets() {
        let c = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(c.args.rate, 135_000.0);
        assert_eq!(c.args.duration, 5.0);
        assert_eq!(c.args.sync, "fsync");
        assert_eq!(c.args.target, Target::Tickwire);
        let c = Cli::try_parse_from([
            "x",
            "--rate",
            "2k",
            "--duration",
            "500ms",
            "--target",
            "nats",
            "--nats-sync",
            "always",
            "--mix",
            "100:67,600:33",
        ])
        .unwrap();
        assert_eq!(c.args.rate, 2000.0);
        assert_eq!(c.args.duration, 0.5);
        assert_eq!(c.args.target, Target::NatsLocal);
        let c = Cli::try_parse_from(["x", "--target", "nats://127.0.0.1:4222"]).unwrap();
        assert_eq!(c.args.target, Target::Nats("nats://127.0.0.1:4222".into()));
        assert!(Cli::try_parse_from(["x", "--target", "kafka"]).is_err());
        assert!(Cli::try_parse_from(["x", "--nats-sync", "never"]).is_err());
    }

    /// A stopped run's rates end where the publishers first saw the stop (new-user
    /// pass: they were divided by the schedule the run never finished).
    #[test]
    fn the_first_look_at_a_stop_notes_when_it_came() {
        let flag = StopFlag::unregistered();
        let shared = Shared {
            stop: Some(flag.clone()),
            ..Shared::default()
        };
        let start = MonoNanos::now().as_nanos();
        assert!(!shared.stopped());
        assert_eq!(shared.stopped_at_rel(start), None);
        flag.set();
        assert!(shared.stopped());
        let at = shared.stopped_at_rel(start).expect("the stop's time");
        std::thread::sleep(Duration::from_millis(2));
        assert!(shared.stopped());
        assert_eq!(
            shared.stopped_at_rel(start),
            Some(at),
            "the first look counts"
        );
    }

    #[test]
    fn header_round_trips() {
        let mut b = [0u8; 30];
        write_header(&mut b, 3, 77, 123_456);
        assert_eq!(read_header(&b), Some((3, 77, 123_456)));
        assert_eq!(read_header(&b[..10]), None);
    }

    fn plan(per: Vec<u64>) -> Plan {
        Plan {
            schedule: Schedule {
                pattern: RatePattern::Steady { rate: 10.0 },
                warmup_ns: 0,
                duration_ns: 1_000_000_000,
            },
            mix: SizeMix::single(100),
            publishers: per.len(),
            consumers: 1,
            consumer_window: 10,
            start_ns: 0,
            per_publisher: per,
            progress: |_| {},
        }
    }

    #[test]
    fn reconciliation_finds_losses_and_unflagged_duplicates() {
        let pl = plan(vec![3]);
        let mut p = PubResult::new(&pl, 0, 10);
        p.state = vec![0; 3];
        p.sent = 3;
        for n in 0..3 {
            p.on_ack(n, 0, 10, 0);
        }
        let mut c = ConsResult::new(&pl);
        let mut payload = [0u8; 24];
        for n in [0u64, 1, 2] {
            write_header(&mut payload, 0, n, 0);
            c.on_delivery(&pl, &payload, false, 5);
        }
        let r = reconcile(std::slice::from_ref(&p), std::slice::from_ref(&c), true);
        assert!(r.lossless, "{r:?}");
        assert_eq!((r.acked, r.delivered_distinct), (3, 3));
        // A flagged redelivery is fine; an unflagged second copy is not.
        write_header(&mut payload, 0, 1, 0);
        c.on_delivery(&pl, &payload, true, 6);
        assert!(reconcile(std::slice::from_ref(&p), std::slice::from_ref(&c), true).lossless);
        c.on_delivery(&pl, &payload, false, 7);
        let r = reconcile(std::slice::from_ref(&p), std::slice::from_ref(&c), true);
        assert_eq!(r.unflagged_duplicates, 1);
        assert!(!r.lossless);
        // An acknowledged message never delivered is a loss.
        let c2 = ConsResult::new(&pl);
        let r = reconcile(std::slice::from_ref(&p), &[c2], true);
        assert_eq!(r.acked_lost, 3);
        assert!(!r.lossless);
    }
}
