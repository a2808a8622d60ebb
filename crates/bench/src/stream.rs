//! The `tickwire bench stream` driver: a rate sweep (docs/benchmarking.md family B).
//!
//! Per target rate (one "step"), a sender streams fixed-size messages open loop from a
//! [`Schedule`]: every message has an intended send time and the sender never waits
//! for replies. A receiver counts every message (sequence numbers: gaps, duplicates,
//! out-of-order) and reflects 1 in `--reflect-every` back to the sender. The sender
//! and receiver live in one process, so one clock gives:
//!
//! - one-way latency: receiver's receipt time − intended send time (stamped by the
//!   receiver into the reflected message);
//! - round trip: reflection's arrival at the sender − intended send time;
//! - sender lateness: actual − intended send time, in its own histogram.
//!
//! All three are measured from the intended send time, so a stalled sender shows up as
//! latency (no coordinated omission). The sweep stops at the first step whose achieved
//! send or receive rate is below 90% of the target.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use tickwire_rt::MonoNanos;

use anyhow::{bail, Context};
use serde::Serialize;
use tickwire_client::{Client, ClientOptions, PublishOptions, Topic, Wait};

use crate::console::Console;
use crate::harness::{self, ExternalRouter, Progress, RouterAddr, RouterPath, StopFlag};
use crate::harness::{idle_parser, IdleStrategy, BENCH_IDLE};
use crate::harness::{parse_pin, Pinning};
use crate::pingpong::idle_once;
use crate::report::OutputArgs;
use crate::report::{self, Machine, Series};
use crate::schedule::{RatePattern, Schedule};
use crate::stats::{invalid_reason, Counters, Latency, SeqTracker, Summary};

mod mcast;
mod relay;

const AFTER_HELP: &str = "\
What it measures, per target rate (one step of the sweep):
  The sender streams --size-byte messages open loop at the target rate (every message
  has an intended send time from a schedule; the sender never waits for replies). The
  receiver counts every message and reflects 1 in --reflect-every back. Sender and
  receiver are threads of this process, so one clock gives:
    one-way     receiver's receipt time − intended send time (reflected samples)
    round trip  reflection's arrival at the sender − intended send time
    lateness    actual − intended send time of every message (the sender's own delay)
  Measuring from the intended time means a stalled sender shows up as latency.
  Reported per step: target, achieved send and receive rates, the latency summaries,
  and the counters sent / received / gaps / duplicates / out-of-order (they must
  reconcile). A step whose achieved send rate is below 90% of the target is INVALID
  (saturated); the sweep stops at the first step whose send or receive rate falls
  below 90% (unless --keep-going). Each step's first --warmup (a duration) is excluded from
  the rates and latencies (the counters include them, and say how many).

Transports (--transport, measured in the order given, in the same run):
  udp       raw UDP datagrams to a receiver thread that counts and reflects: the floor
  tickwire  the sender publishes on bench/stream through a `tickwire router` child
            process (or --router ADDR); a receiver client subscribed to it counts and
            republishes the sampled ones on bench/reflect; the sender subscribes there
            (it publishes with `publish_to` to a topic checked once, as a one-topic
            publisher such as a feed handler does)
  tickwire-shm  the same through a router started with --shm, both clients connected
            with shm:NAME (docs/shm.md)
  tickwire-tls  the same through the router's TLS listener (--tls-listen), both
            clients connected with tls://HOST:PORT (rustls, TLS 1.3); the bench makes a
            throw-away CA and router certificate for the run (docs/security.md)
  tickwire-mcast  reliable multicast (docs/multicast.md), no router: the sender
            publishes with tickwire's multicast sender to a fresh group on 127.0.0.1
            (the messages due at once share a datagram); a receiver thread joined to it
            delivers in stream order (NAKs recover losses) and reflects by unicast UDP
  udp-mcast the floor of tickwire-mcast: plain UDP datagrams to a multicast group, one
            message each, received and reflected as by udp (one sendto per message,
            where tickwire-mcast batches: above the rate one core's sendto calls
            allow, tickwire-mcast carries more than its floor)
  tcp-relay the floor of tickwire with the router's topology: the sender and a receiver
            thread each hold a TCP connection to a relay thread in the router's place
            (CPU FAR) that copies bytes both ways; messages are a 4-byte length and the
            payload; nothing of the router (no framing, matching or doorbell)
  shm-relay the same over bare shared-memory ring pairs: the floor of tickwire-shm. The
            relay spins (CPU FAR is its own); with --idle block the shm receiver, which
            has no doorbell, yields after an empty poll
  With two or more transports the report ends with each one's highest lossless rate
  (both ends kept 90% of the target, nothing lost) and their ratios: shm-relay /
  tcp-relay is what shared memory itself buys over TCP on this topology, with the
  sender and the receiver as they are; tickwire / tcp-relay and tickwire-shm /
  shm-relay are the router against its floor on each transport.

Idle strategy (--idle): spin busy-polls every socket (when spinners outnumber cores,
e.g. tickwire on 2 cores, the measuring threads yield after an empty poll); block
makes the receiver and the router sleep until data arrives (the sender still paces
by the clock and sleeps only when the next message is more than 200 µs away).
Pinning (--pin NEAR,FAR): the sender on NEAR; the UDP receiver and the router on FAR;
the tickwire receiver client on NEAR (router on one core, measuring process on the
other).

Examples:
  tickwire bench stream
      udp then tickwire, 64-byte messages, 10k → 1M msg/s, 2 s per rate
  tickwire bench stream --transport tickwire --rates 50k,100k,150k,200k --step-duration 5s
  tickwire bench stream --idle block --pin 0,1 --json stream.json --plot stream.svg
  tickwire bench stream --transport tickwire --router 10.0.0.5:7420 --reflect-every 10
  tickwire bench stream --transport tickwire,tickwire-tls --size 100 --rates 500k,1M,2M
      TLS throughput against plaintext through the same router code, same run
  tickwire bench stream --transport tcp-relay,shm-relay,tickwire,tickwire-shm --size 100 \\
      --rates 4M,6M,8M,10M,12M --keep-going --idle block --pin 0,1
      shared memory against TCP through the router, beside both floors of the topology

Ctrl-C stops the run and still prints (and writes) what was measured.

Exit status: 0 when every step was run (a saturated, INVALID or lossy step is a result,
not a failure: a sweep is meant to reach them), 130 when Ctrl-C stopped the run, 1 when
a transport could not be measured (an error), 2 for a usage error.";

/// Options of `tickwire bench stream`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    mut_arg("plot", |a| a.help(
        "Draw latency (one-way p50 and p99, log scale) and the achieved rates (right axis) versus the target rate as an SVG to FILE"
    )),
)]
pub struct StreamArgs {
    /// Transports to sweep, comma-separated, in this order: udp (raw sockets, the
    /// floor), tickwire (through the router), tickwire-shm (over shared memory),
    /// tickwire-tls (over TLS), tickwire-mcast (reliable multicast), udp-mcast (its
    /// floor), tcp-relay and shm-relay (the router's topology over TCP and shared
    /// memory with a bare relay in the router's place: the floors of tickwire and
    /// tickwire-shm).
    #[arg(
        long,
        alias = "transports",
        value_delimiter = ',',
        default_value = "udp,tickwire"
    )]
    pub transport: Vec<Transport>,

    /// Message size in bytes (payload); at least 32 (sequence number, intended send
    /// time, flags and the receiver's stamp travel in it).
    #[arg(long, default_value_t = 64)]
    pub size: usize,

    /// Target rates in msg/s, comma-separated, swept in this order; `k` and `M`
    /// suffixes are decimal (50k = 50000, 1.5M = 1500000).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = parse_rate,
        default_value = "10k,20k,50k,100k,200k,500k,1M"
    )]
    pub rates: Vec<f64>,

    /// Measured time per target rate, after the warm-up (2s, 500ms; a plain number is
    /// seconds).
    #[arg(long = "step-duration", alias = "step-secs", default_value = "2s", value_name = "DURATION", value_parser = secs)]
    pub step_secs: f64,

    /// Warm-up at the start of every step, at the step's rate, excluded from the rates
    /// and latencies (500ms, 1s).
    #[arg(long = "warmup", alias = "warmup-secs", default_value = "500ms", value_name = "DURATION", value_parser = secs)]
    pub warmup_secs: f64,

    /// The receiver reflects message number i back when i is a multiple of N (1 in N
    /// is a latency sample); 1 reflects every message.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub reflect_every: u64,

    /// Idle strategy of the receiving ends and of the router this bench starts:
    /// `spin` (busy-poll) or `block` (sleep in the kernel until data arrives).
    #[arg(long, value_parser = idle_parser(&BENCH_IDLE), default_value_t = IdleStrategy::Spin)]
    pub idle: IdleStrategy,

    /// Pin the sender to CPU NEAR and the UDP receiver and the router to CPU FAR
    /// (e.g. `0,1`; CPUs this process may run on). Default: no pinning.
    #[arg(long, value_name = "NEAR,FAR", value_parser = parse_pin)]
    pub pin: Option<Pinning>,

    /// Use the tickwire router already running at ADDR instead of starting one: HOST:PORT
    /// (its TCP listener) for the tickwire transport, shm:NAME (its `--shm NAME`) for
    /// tickwire-shm; the other tickwire transports start their own router. Its idle
    /// strategy and pinning are then whatever it was started with.
    #[arg(long, value_name = "ADDR", value_parser = harness::parse_external_router)]
    pub router: Option<ExternalRouter>,

    /// Run every rate even after one fell below 90% of its target.
    #[arg(long)]
    pub keep_going: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// A stream transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
// The JSON names are the command line's (`tickwire-shm`, `shm-relay`).
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Raw UDP to a receiver thread (the floor).
    Udp,
    /// Through a tickwire router.
    Tickwire,
    /// Through a tickwire router over shared memory (`shm:NAME`).
    TickwireShm,
    /// Through a tickwire router over TLS (`tls://HOST:PORT`; a throw-away CA and
    /// certificate made for the run).
    TickwireTls,
    /// tickwire's reliable multicast, no router.
    TickwireMcast,
    /// Raw UDP to a multicast group (the floor of `tickwire-mcast`).
    UdpMcast,
    /// The router's topology over TCP with a relay thread in the router's place (the
    /// floor of `tickwire`).
    TcpRelay,
    /// The router's topology over bare shared-memory rings with a relay thread in the
    /// router's place (the floor of `tickwire-shm`).
    ShmRelay,
}

impl Transport {
    /// The router listener a tickwire transport measures (None: a floor, no router).
    fn router_path(self) -> Option<RouterPath> {
        match self {
            Transport::Tickwire => Some(RouterPath::Tcp),
            Transport::TickwireShm => Some(RouterPath::Shm),
            Transport::TickwireTls => Some(RouterPath::Tls),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tickwire => "tickwire",
            Transport::TickwireShm => "tickwire-shm",
            Transport::TickwireTls => "tickwire-tls",
            Transport::TickwireMcast => "tickwire-mcast",
            Transport::UdpMcast => "udp-mcast",
            Transport::TcpRelay => "tcp-relay",
            Transport::ShmRelay => "shm-relay",
        }
    }
}

/// A sweep rate: the common rate syntax ([`crate::schedule::parse_rate`]), at least 1 msg/s.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let r = crate::schedule::parse_rate(s)?;
    if r < 1.0 {
        return Err(format!("{s:?}: a rate in a sweep is at least 1 msg/s"));
    }
    Ok(r)
}

const STREAM_TOPIC: &str = "bench/stream";
const REFLECT_TOPIC: &str = "bench/reflect";
/// Payload layout (little-endian u64s): sequence, intended send time, flags, the
/// receiver's receipt time (written into reflections).
const OFF_SEQ: usize = 0;
const OFF_INTENDED: usize = 8;
const OFF_FLAGS: usize = 16;
const OFF_RX: usize = 24;
const MIN_SIZE: usize = 32;
const FLAG_WARMUP: u64 = 1;
const FLAG_END: u64 = 2;
/// Largest UDP payload.
const MAX_UDP: usize = 65_507;
/// After the last message, how long the sender waits for the receiver and the last
/// reflections.
const DRAIN: Duration = Duration::from_secs(2);

fn get_u64(p: &[u8], off: usize) -> u64 {
    p.get(off..off + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn put_u64(p: &mut [u8], off: usize, v: u64) {
    p[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// One target rate on one transport.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    pub target_rate: f64,
    /// Measured messages sent per second of the measured window (lateness stretches
    /// the window, so a sender that cannot keep up shows a lower rate).
    pub achieved_send_rate: f64,
    /// Measured messages received per second of the same window.
    pub achieved_recv_rate: f64,
    /// Receiver's receipt − intended send time, reflected samples, µs.
    pub one_way: Summary,
    /// Reflection's arrival at the sender − intended send time, µs.
    pub round_trip: Summary,
    /// Actual − intended send time of every measured message, µs.
    pub sender_lateness: Summary,
    /// Every message of the step, warm-up included.
    pub counters: Counters,
    /// Warm-up messages (included in `counters`, excluded from rates and latencies).
    pub warmup_messages: u64,
    pub reflections_sent: u64,
    pub reflections_received: u64,
    /// Why the step is INVALID (rule 3), if it is.
    pub invalid: Option<String>,
    /// False when Ctrl-C or the sender's deadline cut the step short.
    pub complete: bool,
}

/// The sweep of one transport.
#[derive(Debug, Clone, Serialize)]
pub struct TransportResult {
    pub transport: Transport,
    pub path: String,
    /// True when the spinning measuring threads yielded after an empty poll.
    pub spin_yields: bool,
    pub steps: Vec<StepResult>,
    /// Why the sweep ended before the last rate, if it did.
    pub stopped: Option<String>,
    /// The highest target rate of a step that was valid, complete and lost nothing
    /// ([`highest_lossless`]).
    pub highest_lossless_rate: Option<f64>,
    /// What other processes and the host took over this transport's sweep (read from
    /// `/proc` before and after; no sentinel threads on the measured CPUs). `None`
    /// where `/proc` could not say.
    pub host: Option<crate::host_watch::Competition>,
}

/// Whether a step counts as carried without loss at its rate: the sender and the
/// receiver both kept at least 90% of the target, the step completed, every message
/// arrived, no gap.
pub fn lossless(s: &StepResult) -> bool {
    invalid_reason(
        s.target_rate,
        s.achieved_send_rate.min(s.achieved_recv_rate),
    )
    .is_none()
        && s.complete
        && s.counters.received == s.counters.sent
        && s.counters.gaps == 0
}

/// The highest target rate among `steps` that were [`lossless`].
pub fn highest_lossless(steps: &[StepResult]) -> Option<f64> {
    steps
        .iter()
        .filter(|s| lossless(s))
        .map(|s| s.target_rate)
        .fold(None, |m, r| Some(m.map_or(r, |m: f64| m.max(r))))
}

/// The ratios the end of the report prints, when both transports ran: (numerator,
/// denominator, what it says).
const LOSSLESS_RATIOS: [(Transport, Transport, &str); 4] = [
    (
        Transport::TickwireShm,
        Transport::Tickwire,
        "shared memory against TCP through the router",
    ),
    (
        Transport::ShmRelay,
        Transport::TcpRelay,
        "the same for the bare topology: what the transports alone allow",
    ),
    (
        Transport::Tickwire,
        Transport::TcpRelay,
        "the router over TCP against its floor",
    ),
    (
        Transport::TickwireShm,
        Transport::ShmRelay,
        "the router over shared memory against its floor",
    ),
];

#[derive(Debug, Serialize)]
struct Report<'a> {
    bench: &'static str,
    machine: Machine,
    size: usize,
    step_secs: f64,
    warmup_secs: f64,
    reflect_every: u64,
    idle: IdleStrategy,
    pinning: Option<Pinning>,
    router: Option<String>,
    stopped_by_user: bool,
    transports: &'a [TransportResult],
}

/// Runs the bench; `tickwire` is the path of the tickwire binary (to start a router).
/// The report goes to `con`.
pub fn run(args: &StreamArgs, tickwire: &Path, con: &mut Console<'_>) -> anyhow::Result<ExitCode> {
    validate(args).map_err(crate::UsageError::of)?;
    let paths: Vec<RouterPath> = args
        .transport
        .iter()
        .filter_map(|t| t.router_path())
        .collect();
    harness::check_external_router(args.router.as_ref(), &paths).map_err(crate::UsageError::of)?;
    let stop = StopFlag::install();
    let machine = Machine::detect();
    if let Some(p) = args.pin {
        harness::pin_current_thread(p.near);
    }
    let mut progress = Progress::new(con.progress);
    let mut results = Vec::new();
    let mut router_desc = None;
    for &t in &args.transport {
        if stop.is_set() {
            break;
        }
        let mut _router = None;
        let (addr, yields) = match t {
            Transport::Udp | Transport::TickwireMcast | Transport::UdpMcast => (None, false),
            // Three parties on the cores, as through the router.
            Transport::TcpRelay | Transport::ShmRelay => (
                None,
                args.idle == IdleStrategy::Spin && (args.pin.is_some() || machine.cores < 3),
            ),
            Transport::Tickwire | Transport::TickwireShm | Transport::TickwireTls => {
                let path = t.router_path().unwrap_or(RouterPath::Tcp);
                let r = harness::bench_router(
                    tickwire,
                    args.idle,
                    args.pin,
                    args.router.as_ref(),
                    path,
                )?;
                router_desc = Some(r.desc.clone());
                let addr = r.addr.clone();
                _router = Some(r);
                let yields =
                    args.idle == IdleStrategy::Spin && (args.pin.is_some() || machine.cores < 3);
                (Some(addr), yields)
            }
        };
        let mut tr = TransportResult {
            transport: t,
            path: match t {
                Transport::Udp => "raw UDP datagrams to a receiver thread, loopback".into(),
                Transport::Tickwire => {
                    "sender → router → receiver client (bench/stream), sampled reflections → router → sender (bench/reflect)".into()
                }
                Transport::TickwireShm => {
                    "as tickwire, every hop over shared memory (shm:NAME)".into()
                }
                Transport::TickwireTls => "as tickwire, every hop over TLS (tls://HOST:PORT)".into(),
                Transport::TickwireMcast | Transport::UdpMcast => mcast::path(t).into(),
                Transport::TcpRelay | Transport::ShmRelay => relay::path(t).into(),
            },
            spin_yields: yields,
            steps: Vec::new(),
            stopped: None,
            highest_lossless_rate: None,
            host: None,
        };
        let watch = crate::host_watch::HostWatch::start_serving(
            0,
            &harness::external_router_ports(args.router.as_ref()),
        );
        for &rate in &args.rates {
            if stop.is_set() {
                tr.stopped = Some(format!("stopped by {}", tickwire_rt::stop::stopped_by()));
                break;
            }
            let step = run_step(args, t, addr.as_ref(), rate, yields, &stop, &mut progress)
                .with_context(|| format!("{} at {rate:.0} msg/s", t.name()))?;
            // A step Ctrl-C cut short has no verdict: the sweep ends as stopped.
            let short = if stop.is_set() {
                None
            } else {
                invalid_reason(rate, step.achieved_send_rate.min(step.achieved_recv_rate))
            };
            tr.steps.push(step);
            if let Some(why) = short {
                if !args.keep_going {
                    tr.stopped = Some(format!("sweep stopped at {rate:.0} msg/s: {why}"));
                    break;
                }
            }
        }
        tr.highest_lossless_rate = highest_lossless(&tr.steps);
        tr.host = watch.finish().competition;
        results.push(tr);
    }

    print_report(
        con.out,
        args,
        &machine,
        &results,
        router_desc.as_deref(),
        stop.is_set(),
    );
    let rep = Report {
        bench: "stream",
        machine: machine.clone(),
        size: args.size,
        step_secs: args.step_secs,
        warmup_secs: args.warmup_secs,
        reflect_every: args.reflect_every,
        idle: args.idle,
        pinning: args.pin,
        router: router_desc.clone(),
        stopped_by_user: stop.is_set(),
        transports: &results,
    };
    args.output.write(
        con.out,
        &rep,
        |path| plot(path, args, &results),
        report::Announce::Wrote,
    )?;
    Ok(report::exit_code(stop.is_set()))
}

fn validate(args: &StreamArgs) -> anyhow::Result<()> {
    if args.transport.is_empty() || args.rates.is_empty() {
        bail!("--transport and --rates need at least one value");
    }
    if args.size < MIN_SIZE {
        bail!(
            "--size {} is too small: at least {MIN_SIZE} bytes",
            args.size
        );
    }
    mcast::validate(args)?;
    if args.transport.contains(&Transport::Udp) && args.size > MAX_UDP {
        bail!(
            "--size {} does not fit in one UDP datagram (max {MAX_UDP})",
            args.size
        );
    }
    if !(args.step_secs > 0.0 && args.step_secs.is_finite()) {
        bail!("--step-duration must be positive");
    }
    if !(args.warmup_secs >= 0.0 && args.warmup_secs.is_finite()) {
        bail!("--warmup must be 0 or more");
    }
    if args.reflect_every == 0 {
        bail!("--reflect-every must be at least 1");
    }
    Ok(())
}

/// The sender's end of a transport.
trait SenderLink {
    /// Sends (or queues) one message.
    fn send(&mut self, payload: &[u8]) -> anyhow::Result<()>;
    /// Writes what `send` queued.
    fn flush(&mut self) -> anyhow::Result<()>;
    /// Calls `f` for every reflection available now, without waiting.
    fn poll(&mut self, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()>;
    /// Sleeps up to `timeout` until a reflection arrives, then calls `f` for every one
    /// available (`--idle block`: a reflection is timed when it arrives, not when the
    /// sender wakes for its next send).
    fn wait_poll(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()>;
}

/// What the receiver thread saw in one step.
#[derive(Debug, Default)]
struct RxOutcome {
    counters: Counters,
    /// Measured (not warm-up) messages received, and when the last one arrived.
    measured: u64,
    last_measured_ns: u64,
    reflections_sent: u64,
    /// Highest sequence number + 1 seen (trailing losses are `sent` − this).
    next_expected: u64,
}

/// Counts one received message and decides whether to reflect it.
fn observe(p: &[u8], now: u64, every: u64, tracker: &mut SeqTracker, rx: &mut RxOutcome) -> Msg {
    let flags = get_u64(p, OFF_FLAGS);
    if flags & FLAG_END != 0 {
        return Msg::End;
    }
    let seq = get_u64(p, OFF_SEQ);
    tracker.observe(seq, 1, &mut rx.counters);
    rx.next_expected = tracker.next_expected();
    if flags & FLAG_WARMUP == 0 {
        rx.measured += 1;
        rx.last_measured_ns = now;
    }
    if seq % every == 0 {
        Msg::Reflect
    } else {
        Msg::Count
    }
}

enum Msg {
    Count,
    Reflect,
    End,
}

/// A receiver's reflections collected during one read (written after it), each stamped
/// with its receipt time, and whether END came.
#[derive(Default)]
struct Reflections {
    buf: Vec<u8>,
    size: usize,
    ended: bool,
}

impl Reflections {
    /// [`observe`]s one message; keeps a stamped copy when it is to be reflected.
    fn observe(
        &mut self,
        p: &[u8],
        now: u64,
        every: u64,
        tracker: &mut SeqTracker,
        rx: &mut RxOutcome,
    ) {
        match observe(p, now, every, tracker, rx) {
            Msg::End => self.ended = true,
            Msg::Count => {}
            Msg::Reflect => {
                let at = self.buf.len();
                self.buf.extend_from_slice(p);
                self.size = p.len();
                if p.len() >= MIN_SIZE {
                    put_u64(&mut self.buf[at..], OFF_RX, now);
                }
            }
        }
    }

    fn pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The collected reflections (every message of a stream has the same size).
    fn iter(&self) -> std::slice::Chunks<'_, u8> {
        self.buf.chunks(self.size.max(1))
    }

    fn clear(&mut self) {
        self.buf.clear();
    }
}

/// A running receiver thread: its result arrives once it saw END or `quit` was set.
struct Receiver {
    handle: JoinHandle<anyhow::Result<RxOutcome>>,
    quit: Arc<AtomicBool>,
}

fn run_step(
    args: &StreamArgs,
    t: Transport,
    router: Option<&RouterAddr>,
    rate: f64,
    yields: bool,
    stop: &StopFlag,
    progress: &mut Progress,
) -> anyhow::Result<StepResult> {
    let quit = Arc::new(AtomicBool::new(false));
    let (mut link, receiver): (Box<dyn SenderLink>, Receiver) = match (t, router) {
        (Transport::Tickwire | Transport::TickwireShm | Transport::TickwireTls, Some(addr)) => {
            tickwire_pair(args, addr, yields, quit)?
        }
        (Transport::TickwireMcast, _) => mcast::tickwire_mcast_pair(args, quit)?,
        (Transport::UdpMcast, _) => mcast::udp_mcast_pair(args, quit)?,
        (Transport::TcpRelay, _) => relay::tcp_relay_pair(args, yields, quit)?,
        (Transport::ShmRelay, _) => relay::shm_relay_pair(args, yields, quit)?,
        _ => udp_pair(args, quit)?,
    };
    let sched = Schedule {
        pattern: RatePattern::Steady { rate },
        warmup_ns: secs_ns(args.warmup_secs),
        duration_ns: secs_ns(args.step_secs),
    };
    let spin = args.idle == IdleStrategy::Spin;
    let mut payload = vec![0u8; args.size];
    let mut one_way = Latency::new();
    let mut round_trip = Latency::new();
    let mut lateness = Latency::new();
    let (mut sent, mut warm, mut measured_sent, mut reflected) = (0u64, 0u64, 0u64, 0u64);
    let mut last_measured_send = 0u64;
    let on_reflection = |p: &[u8], ow: &mut Latency, rt: &mut Latency, n: &mut u64| {
        let now = MonoNanos::now().as_nanos();
        *n += 1;
        if get_u64(p, OFF_FLAGS) & FLAG_WARMUP == 0 {
            let intended = get_u64(p, OFF_INTENDED);
            rt.record(now.saturating_sub(intended));
            ow.record(get_u64(p, OFF_RX).saturating_sub(intended));
        }
    };

    // Give the receiver a moment, then start on a round time.
    let start = MonoNanos::now().as_nanos() + 5_000_000;
    let measure_start = start + sched.warmup_ns;
    // A sender that cannot keep up is cut off here; its rate then shows the shortfall.
    let give_up = start + sched.end_ns() + sched.end_ns().max(1_000_000_000);
    let mut complete = true;
    // Cut short by Ctrl-C (not by the sender falling behind): measured over the time
    // it ran, and no verdict (new-user pass: a stopped step's rate over the whole
    // planned step read as INVALID, saturated, at half the rate really kept).
    let mut by_user = false;
    let mut slots = sched.slots().peekable();
    'send: while let Some(&slot) = slots.peek() {
        let due = start + slot.at_ns;
        // Until the next message is due: take reflections, then spin or sleep.
        loop {
            link.poll(&mut |p| on_reflection(p, &mut one_way, &mut round_trip, &mut reflected))?;
            let now = MonoNanos::now().as_nanos();
            if now >= due {
                break;
            }
            if stop.is_set() {
                complete = false;
                by_user = true;
                break 'send;
            }
            if spin {
                idle_once(yields);
            } else if due - now > BLOCK_SPIN_NS {
                // Asleep on the reflections, not on a timer: one that arrives meanwhile
                // is timed on arrival (a timer sleep had timed them at the next send, so
                // the round trip read as the send interval). The last stretch spins, so
                // sends stay on time.
                let nap = Duration::from_nanos((due - now - BLOCK_SPIN_NS).min(1_000_000));
                link.wait_poll(nap, &mut |p| {
                    on_reflection(p, &mut one_way, &mut round_trip, &mut reflected)
                })?;
            } else {
                std::hint::spin_loop();
            }
        }
        // Send everything that is due, then write once. One clock read for the batch:
        // nothing of it leaves before the write, so each message's lateness is the
        // batch's start less its intended time.
        let now = MonoNanos::now().as_nanos();
        while let Some(&slot) = slots.peek() {
            let intended = start + slot.at_ns;
            if intended > now {
                break;
            }
            put_u64(&mut payload, OFF_SEQ, slot.index);
            put_u64(&mut payload, OFF_INTENDED, intended);
            put_u64(
                &mut payload,
                OFF_FLAGS,
                if slot.warmup { FLAG_WARMUP } else { 0 },
            );
            link.send(&payload)?;
            sent += 1;
            if slot.warmup {
                warm += 1;
            } else {
                measured_sent += 1;
                last_measured_send = now;
                lateness.record(now - intended);
            }
            slots.next();
        }
        link.flush()?;
        if MonoNanos::now().as_nanos() > give_up {
            complete = false;
            break;
        }
        progress.tick(|| {
            format!(
                "stream {} {rate:.0} msg/s: sent {sent}, reflections {reflected}, lateness p50 {:.1} µs",
                t.name(),
                lateness.summary().p50_us
            )
        });
    }

    // END, then wait for the receiver's count and the last reflections.
    put_u64(&mut payload, OFF_FLAGS, FLAG_END);
    let drain_until = MonoNanos::now().as_nanos() + DRAIN.as_nanos() as u64;
    let mut end_sent_at = 0;
    let mut rx: Option<RxOutcome> = None;
    let mut receiver = Some(receiver);
    loop {
        let now = MonoNanos::now().as_nanos();
        if now >= end_sent_at + 20_000_000 && rx.is_none() {
            // Repeated: a UDP datagram may be lost.
            link.send(&payload)?;
            link.flush()?;
            end_sent_at = now;
        }
        link.poll(&mut |p| on_reflection(p, &mut one_way, &mut round_trip, &mut reflected))?;
        if let Some(r) = receiver.take_if(|r| r.handle.is_finished()) {
            rx = Some(join_receiver(r)?);
        }
        let done = rx.as_ref().is_some_and(|r| reflected >= r.reflections_sent);
        if done || now > drain_until {
            break;
        }
        idle_once(true);
    }
    let rx = match (rx, receiver) {
        (Some(rx), _) => rx,
        (None, Some(r)) => {
            r.quit.store(true, Ordering::Relaxed);
            join_receiver(r)?
        }
        (None, None) => RxOutcome::default(),
    };

    let mut counters = rx.counters;
    counters.sent = sent;
    counters.gaps += sent.saturating_sub(rx.next_expected);
    let planned = if by_user { 0 } else { sched.duration_ns };
    let window = (last_measured_send.max(rx.last_measured_ns))
        .saturating_sub(measure_start)
        .max(planned)
        .max(1) as f64;
    let send_window = last_measured_send
        .saturating_sub(measure_start)
        .max(planned)
        .max(1) as f64;
    let achieved_send_rate = measured_sent as f64 * 1e9 / send_window;
    let achieved_recv_rate = rx.measured as f64 * 1e9 / window;
    Ok(StepResult {
        target_rate: rate,
        achieved_send_rate,
        achieved_recv_rate,
        one_way: one_way.summary(),
        round_trip: round_trip.summary(),
        sender_lateness: lateness.summary(),
        counters,
        warmup_messages: warm,
        reflections_sent: rx.reflections_sent,
        reflections_received: reflected,
        invalid: if by_user {
            None
        } else {
            invalid_reason(rate, achieved_send_rate)
        },
        complete,
    })
}

fn join_receiver(r: Receiver) -> anyhow::Result<RxOutcome> {
    match r.handle.join() {
        Ok(res) => res.context("receiver thread"),
        Err(_) => bail!("the receiver thread panicked"),
    }
}

fn secs_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// Sleeps in `poll(2)` up to `timeout` until `fd` is readable. An error or a signal
/// ends the wait early: the read that follows tells.
pub(super) fn wait_readable(fd: impl std::os::fd::AsFd, timeout: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let spec = Timespec::try_from(timeout).ok();
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let _ = poll(&mut fds, spec.as_ref());
}

/// `--idle block`: the sender spins the last this many ns before a send is due (a
/// sleep wakes tens of µs late).
const BLOCK_SPIN_NS: u64 = 200_000;

// ---- raw UDP ----

struct UdpSender {
    sock: UdpSocket,
    /// Where to send when `sock` is not connected (a multicast group: a socket
    /// connected to it would not accept the reflections from the receiver's address).
    to: Option<SocketAddr>,
    buf: Vec<u8>,
}

impl SenderLink for UdpSender {
    fn wait_poll(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        wait_readable(&self.sock, timeout);
        self.poll(f)
    }

    fn send(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        loop {
            let sent = match self.to {
                Some(to) => self.sock.send_to(payload, to),
                None => self.sock.send(payload),
            };
            match sent {
                Ok(_) => return Ok(()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    std::hint::spin_loop()
                }
                // The receiver's socket is gone (ICMP port unreachable): count as lost.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Ok(()),
                Err(e) => return Err(e).context("UDP send"),
            }
        }
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    fn poll(&mut self, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        loop {
            match self.sock.recv(&mut self.buf) {
                Ok(n) => f(&self.buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e).context("UDP receive of a reflection"),
            }
        }
    }
}

/// Requested UDP socket buffer size (the kernel caps it at rmem_max / wmem_max).
const UDP_BUFFER: usize = 4 << 20;

fn udp_pair(
    args: &StreamArgs,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    let rx_sock = UdpSocket::bind("127.0.0.1:0").context("binding the UDP receiver")?;
    let rx_addr = rx_sock.local_addr()?;
    let sock = UdpSocket::bind("127.0.0.1:0").context("binding the UDP sender")?;
    sock.connect(rx_addr)?;
    spawn_udp(args, quit, rx_sock, sock, None)
}

/// The raw UDP link over `sock` (connected to where `rx_sock` receives, or sending to
/// `to`: a multicast group `rx_sock` joined) and its receiver thread on `rx_sock`.
fn spawn_udp(
    args: &StreamArgs,
    quit: Arc<AtomicBool>,
    rx_sock: UdpSocket,
    sock: UdpSocket,
    to: Option<SocketAddr>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    // Large socket buffers (capped by net.core.{r,w}mem_max), so that losses at high
    // rates measure the receiver, not a 200 KiB default buffer.
    for s in [&rx_sock, &sock] {
        let s = socket2::SockRef::from(s);
        let _ = s.set_recv_buffer_size(UDP_BUFFER);
        let _ = s.set_send_buffer_size(UDP_BUFFER);
    }
    sock.set_nonblocking(true)?;
    let (spin, every, far) = (
        args.idle == IdleStrategy::Spin,
        args.reflect_every,
        args.pin.map(|p| p.far),
    );
    let q = Arc::clone(&quit);
    let handle =
        harness::spawn_pinned("udp-receiver", far, move || -> anyhow::Result<RxOutcome> {
            rx_sock.set_nonblocking(spin)?;
            if !spin {
                rx_sock.set_read_timeout(Some(Duration::from_millis(50)))?;
            }
            let mut out = RxOutcome::default();
            let mut tracker = SeqTracker::default();
            let mut buf = vec![0u8; MAX_UDP + 1];
            loop {
                match rx_sock.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let now = MonoNanos::now().as_nanos();
                        match observe(&buf[..n], now, every, &mut tracker, &mut out) {
                            Msg::End => return Ok(out),
                            Msg::Count => {}
                            Msg::Reflect => {
                                if n >= MIN_SIZE {
                                    put_u64(&mut buf, OFF_RX, now);
                                }
                                // A reflection that does not fit the socket now is lost
                                // (and shows as reflections_sent > received).
                                if rx_sock.send_to(&buf[..n], from).is_ok() {
                                    out.reflections_sent += 1;
                                }
                            }
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) =>
                    {
                        if q.load(Ordering::Relaxed) {
                            return Ok(out);
                        }
                        std::hint::spin_loop();
                    }
                    Err(e) => return Err(e).context("UDP receiver"),
                }
            }
        })
        .context("spawning the UDP receiver")?;
    let link = UdpSender {
        sock,
        to,
        buf: vec![0u8; MAX_UDP + 1],
    };
    Ok((Box::new(link), Receiver { handle, quit }))
}

// ---- tickwire ----

struct TickwireSender {
    client: Client,
    /// bench/stream, checked once: a publisher that sends to one topic over and over
    /// uses `publish_to`, as a feed handler does (no per-message topic check).
    topic: Topic,
}

impl SenderLink for TickwireSender {
    fn send(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        self.client
            .publish_to(&self.topic, payload, PublishOptions::default())
            .context("publishing on bench/stream")
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.client.flush().context("flushing the sender")
    }

    fn poll(&mut self, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        self.client
            .poll(Wait::NoWait, |m| f(m.payload()))
            .context("receiving reflections")?;
        Ok(())
    }

    fn wait_poll(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        self.client
            .poll(Wait::Timeout(timeout), |m| f(m.payload()))
            .context("receiving reflections")?;
        Ok(())
    }
}

fn tickwire_pair(
    args: &StreamArgs,
    addr: &RouterAddr,
    yields: bool,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    let (spin, every, near) = (
        args.idle == IdleStrategy::Spin,
        args.reflect_every,
        args.pin.map(|p| p.near),
    );
    let q = Arc::clone(&quit);
    let rx_addr = addr.clone();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let handle = harness::spawn_pinned(
        "tickwire-receiver",
        near,
        move || -> anyhow::Result<RxOutcome> {
            let opts = rx_addr.options(ClientOptions::named("bench-stream-receiver"));
            let setup = Client::connect_to(&rx_addr.addr, opts)
                .and_then(|mut c| c.subscribe(STREAM_TOPIC).map(|()| c))
                .with_context(|| format!("receiver connecting to the router at {rx_addr}"));
            let mut c = match setup {
                Ok(c) => {
                    let _ = ready_tx.send(Ok(()));
                    c
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                    return Err(e);
                }
            };
            let mut out = RxOutcome::default();
            let mut tracker = SeqTracker::default();
            let mut refl = Reflections::default();
            let wait = if spin {
                Wait::NoWait
            } else {
                Wait::Timeout(Duration::from_millis(50))
            };
            loop {
                // One clock read per batch read from the router: every message of
                // the batch had arrived when it was read.
                let mut batch_now = None;
                let n = c
                    .poll(wait, |m| {
                        let p = m.payload();
                        let now = *batch_now.get_or_insert_with(|| MonoNanos::now().as_nanos());
                        refl.observe(p, now, every, &mut tracker, &mut out);
                    })
                    .context("receiver poll")?;
                if refl.pending() {
                    for p in refl.iter() {
                        c.publish(REFLECT_TOPIC, p)
                            .context("publishing a reflection")?;
                        out.reflections_sent += 1;
                    }
                    refl.clear();
                    c.flush().context("flushing reflections")?;
                }
                if refl.ended || q.load(Ordering::Relaxed) {
                    let _ = c.close();
                    return Ok(out);
                }
                if n == 0 && spin {
                    idle_once(yields);
                }
            }
        },
    )
    .context("spawning the tickwire receiver")?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => bail!("starting the receiver client: {e}"),
        Err(_) => {
            let e = match handle.join() {
                Ok(Err(e)) => format!("{e:#}"),
                _ => "it exited".into(),
            };
            bail!("the receiver thread died: {e}");
        }
    }
    let mut client = Client::connect_to(
        &addr.addr,
        addr.options(ClientOptions::named("bench-stream-sender")),
    )
    .with_context(|| format!("sender connecting to the router at {addr}"))?;
    client
        .subscribe(REFLECT_TOPIC)
        .context("subscribing to bench/reflect")?;
    Ok((
        Box::new(TickwireSender {
            client,
            topic: Topic::new(STREAM_TOPIC)?,
        }),
        Receiver { handle, quit },
    ))
}

// ---- output ----

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

/// The per-rate table: target, achieved rates, counters, status.
pub fn rate_table(title: &str, steps: &[StepResult]) -> String {
    let mut out = format!("{title}\n");
    out.push_str(&format!(
        "{:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>5} {:>5} {:>9} {:>9}  {}\n",
        "target/s",
        "sent/s",
        "recv/s",
        "sent",
        "received",
        "gaps",
        "dups",
        "ooo",
        "reflected",
        "late p99",
        "status"
    ));
    for s in steps {
        let c = &s.counters;
        let status = match (&s.invalid, s.complete) {
            (Some(_), _) => "INVALID (saturated)",
            (None, false) => "cut short",
            (None, true) if c.sent != c.received => "lost messages",
            // Sent on time, but received below 90% of the rate: the sweep stops here
            // and the step is not lossless (new-user pass: "ok" beside "saturated").
            (None, true) if invalid_reason(s.target_rate, s.achieved_recv_rate).is_some() => {
                "saturated (receive rate)"
            }
            (None, true) => "ok",
        };
        out.push_str(&format!(
            "{:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>5} {:>5} {:>9} {:>9.1}  {status}\n",
            fmt_rate(s.target_rate),
            fmt_rate(s.achieved_send_rate),
            fmt_rate(s.achieved_recv_rate),
            c.sent,
            c.received,
            c.gaps,
            c.duplicates,
            c.out_of_order,
            format!("{}/{}", s.reflections_received, s.reflections_sent),
            s.sender_lateness.p99_us,
        ));
    }
    out
}

fn print_report(
    out: &mut dyn std::io::Write,
    args: &StreamArgs,
    machine: &Machine,
    results: &[TransportResult],
    router: Option<&str>,
    stopped: bool,
) {
    crate::outln!(out);
    crate::outln!(out,
        "tickwire bench stream: {}-byte messages, 1 in {} reflected, {} s per rate after {} s warm-up (excluded from rates and latencies; the sent/received counters include it); {} ({} cores)",
        args.size, args.reflect_every, args.step_secs, args.warmup_secs, machine.cpu_model, machine.cores
    );
    let pin = match args.pin {
        Some(p) => format!(
            "pinned: sender CPU {}, receiver/router CPU {}",
            p.near, p.far
        ),
        None => "not pinned".into(),
    };
    crate::outln!(out, "idle {}; {pin}", args.idle.name());
    report::print_run_notes(out, router, stopped);
    for r in results {
        crate::outln!(out);
        crate::out!(
            out,
            "{}",
            rate_table(
                &report::transport_title(r.transport.name(), &r.path, r.spin_yields),
                &r.steps
            )
        );
        let label = |s: &StepResult| {
            format!(
                "{} {}",
                fmt_rate(s.target_rate),
                if s.invalid.is_some() { "INVALID" } else { "" }
            )
        };
        for (what, pick) in [
            ("one-way latency from intended send time (µs)", 0),
            ("round trip from intended send time (µs)", 1),
            ("sender lateness (µs)", 2),
        ] {
            let rows: Vec<(String, Summary)> = r
                .steps
                .iter()
                .map(|s| {
                    let sum = match pick {
                        0 => &s.one_way,
                        1 => &s.round_trip,
                        _ => &s.sender_lateness,
                    };
                    (label(s), sum.clone())
                })
                .collect();
            crate::outln!(out);
            crate::out!(
                out,
                "{}",
                report::latency_table(&format!("{} {what}", r.transport.name()), &rows)
            );
        }
        for s in r
            .steps
            .iter()
            .filter_map(|s| s.invalid.as_ref().map(|w| (s.target_rate, w)))
        {
            crate::outln!(out, "INVALID at {}: {}", fmt_rate(s.0), s.1);
        }
        if let Some(why) = &r.stopped {
            crate::outln!(out, "{why}");
        }
        if let Some(c) = &r.host {
            crate::outln!(out, "host: {}", c.sentence());
        }
    }
    if results.len() >= 2 {
        crate::outln!(out);
        crate::out!(out, "{}", lossless_summary(results));
    }
}

/// Each transport's highest lossless rate, and the ratios of [`LOSSLESS_RATIOS`] whose
/// two transports both ran.
pub fn lossless_summary(results: &[TransportResult]) -> String {
    let mut out = String::from("highest lossless rate (valid, complete, nothing lost)\n");
    let top = |r: &TransportResult| r.steps.iter().map(|s| s.target_rate).fold(0.0, f64::max);
    for r in results {
        let line = match r.highest_lossless_rate {
            Some(h) if h >= top(r) => {
                format!("{} (the top of the sweep: may be higher)", fmt_rate(h))
            }
            Some(h) => fmt_rate(h),
            None => "none of the rates swept".into(),
        };
        out.push_str(&format!("  {:<15} {line}\n", r.transport.name()));
    }
    let find = |t| {
        results
            .iter()
            .find(|r| r.transport == t)
            .and_then(|r| r.highest_lossless_rate)
    };
    let disturbed = |t| {
        results
            .iter()
            .any(|r| r.transport == t && r.host.is_some_and(|c| c.disturbs()))
    };
    for (a, b, what) in LOSSLESS_RATIOS {
        if let (Some(x), Some(y)) = (find(a), find(b)) {
            out.push_str(&format!(
                "  {} / {}: {:.2}x  ({what})\n",
                a.name(),
                b.name(),
                x / y
            ));
            // Bench-review pass: ratios of disturbed sweeps were printed like any other.
            let spoiled: Vec<&str> = [a, b]
                .into_iter()
                .filter(|t| disturbed(*t))
                .map(Transport::name)
                .collect();
            if let Some(line) = crate::host_watch::not_a_comparison(&spoiled) {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    out
}

fn plot(path: &Path, args: &StreamArgs, results: &[TransportResult]) -> anyhow::Result<()> {
    let mut lat = Vec::new();
    let mut rates = Vec::new();
    for r in results {
        let pts = |f: &dyn Fn(&StepResult) -> Option<f64>| -> Vec<(f64, f64)> {
            r.steps
                .iter()
                .filter_map(|s| f(s).map(|v| (s.target_rate / 1e3, v)))
                .collect()
        };
        let name = r.transport.name();
        let has = |s: &StepResult| s.one_way.samples > 0;
        lat.push(Series {
            name: format!("{name} one-way p50"),
            points: pts(&|s| has(s).then_some(s.one_way.p50_us)),
        });
        lat.push(Series {
            name: format!("{name} one-way p99"),
            points: pts(&|s| has(s).then_some(s.one_way.p99_us)),
        });
        rates.push(Series {
            name: format!("{name} achieved send"),
            points: pts(&|s| Some(s.achieved_send_rate / 1e3)),
        });
        rates.push(Series {
            name: format!("{name} achieved recv"),
            points: pts(&|s| Some(s.achieved_recv_rate / 1e3)),
        });
    }
    report::line_chart_svg(
        path,
        &format!(
            "stream: latency and achieved rate vs target ({} B, idle {})",
            args.size,
            args.idle.name()
        ),
        "target rate (k msg/s)",
        "one-way latency from intended send (µs, log)",
        &lat,
        true,
        Some(("achieved rate (k msg/s)", &rates)),
    )
}

/// A duration option kept as f64 seconds, in tickwire-rt's one duration syntax.
fn secs(s: &str) -> Result<f64, String> {
    tickwire_rt::units::parse_duration(s).map(|d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_decimal_suffixes() {
        assert_eq!(parse_rate("10000"), Ok(10_000.0));
        assert_eq!(parse_rate("50k"), Ok(50_000.0));
        assert_eq!(parse_rate("1.5M"), Ok(1_500_000.0));
        assert_eq!(parse_rate(" 20K "), Ok(20_000.0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-5k").is_err());
        assert!(parse_rate("").is_err());
    }

    #[test]
    fn payload_fields_round_trip() {
        let mut p = vec![0u8; MIN_SIZE];
        put_u64(&mut p, OFF_SEQ, 7);
        put_u64(&mut p, OFF_INTENDED, 123_456_789);
        put_u64(&mut p, OFF_FLAGS, FLAG_WARMUP);
        assert_eq!(get_u64(&p, OFF_SEQ), 7);
        assert_eq!(get_u64(&p, OFF_INTENDED), 123_456_789);
        assert_eq!(get_u64(&p, OFF_FLAGS), FLAG_WARMUP);
        // A short payload reads as 0 instead of panicking.
        assert_eq!(get_u64(&p[..10], OFF_INTENDED), 0);
    }

    fn msg(seq: u64, flags: u64) -> Vec<u8> {
        let mut p = vec![0u8; MIN_SIZE];
        put_u64(&mut p, OFF_SEQ, seq);
        put_u64(&mut p, OFF_FLAGS, flags);
        p
    }

    #[test]
    fn observe_counts_samples_reflects_and_ends() {
        let mut t = SeqTracker::default();
        let mut rx = RxOutcome::default();
        assert!(matches!(
            observe(&msg(0, FLAG_WARMUP), 10, 3, &mut t, &mut rx),
            Msg::Reflect
        ));
        assert!(matches!(
            observe(&msg(1, 0), 20, 3, &mut t, &mut rx),
            Msg::Count
        ));
        // 2 is lost.
        assert!(matches!(
            observe(&msg(3, 0), 30, 3, &mut t, &mut rx),
            Msg::Reflect
        ));
        assert!(matches!(
            observe(&msg(4, FLAG_END), 40, 3, &mut t, &mut rx),
            Msg::End
        ));
        assert_eq!(rx.counters.received, 3);
        assert_eq!(rx.counters.gaps, 1);
        assert_eq!(rx.measured, 2);
        assert_eq!(rx.last_measured_ns, 30);
        assert_eq!(rx.next_expected, 4);
    }

    #[test]
    fn rate_table_marks_invalid_steps() {
        let sum = Latency::new().summary();
        let step = StepResult {
            target_rate: 100_000.0,
            achieved_send_rate: 50_000.0,
            achieved_recv_rate: 50_000.0,
            one_way: sum.clone(),
            round_trip: sum.clone(),
            sender_lateness: sum,
            counters: Counters {
                sent: 10,
                received: 10,
                ..Counters::default()
            },
            warmup_messages: 0,
            reflections_sent: 1,
            reflections_received: 1,
            invalid: invalid_reason(100_000.0, 50_000.0),
            complete: true,
        };
        let t = rate_table("udp", &[step]);
        assert!(t.contains("target/s") && t.contains("recv/s"), "{t}");
        assert!(t.contains("100.0k") && t.contains("INVALID"), "{t}");
    }

    #[test]
    fn rate_table_marks_a_step_received_below_its_rate_saturated_not_ok() {
        let behind = step(200_000.0, 174_000.0, 10, 10);
        assert!(!lossless(&behind));
        let t = rate_table("udp", &[behind, step(100_000.0, 100_000.0, 10, 10)]);
        let rows: Vec<&str> = t.lines().filter(|l| l.contains(".0k")).collect();
        assert_eq!(rows.len(), 2, "{t}");
        assert!(rows[0].ends_with("saturated (receive rate)"), "{t}");
        assert!(rows[1].ends_with("ok"), "{t}");
    }

    fn step(target: f64, recv: f64, sent: u64, received: u64) -> StepResult {
        let sum = Latency::new().summary();
        StepResult {
            target_rate: target,
            achieved_send_rate: target,
            achieved_recv_rate: recv,
            one_way: sum.clone(),
            round_trip: sum.clone(),
            sender_lateness: sum,
            counters: Counters {
                sent,
                received,
                gaps: sent - received,
                ..Counters::default()
            },
            warmup_messages: 0,
            reflections_sent: 0,
            reflections_received: 0,
            invalid: invalid_reason(target, target),
            complete: true,
        }
    }

    #[test]
    fn highest_lossless_needs_both_ends_at_the_rate_and_nothing_lost() {
        let steps = [
            step(1e6, 1e6, 10, 10),
            // Lost one.
            step(2e6, 2e6, 10, 9),
            // Everything arrived, but the receiver fell behind the rate.
            step(3e6, 2e6, 10, 10),
            step(1.5e6, 1.5e6, 10, 10),
        ];
        assert_eq!(highest_lossless(&steps), Some(1.5e6));
        assert_eq!(highest_lossless(&steps[1..3]), None);

        let result = |t, steps: Vec<StepResult>| TransportResult {
            transport: t,
            path: String::new(),
            spin_yields: false,
            highest_lossless_rate: highest_lossless(&steps),
            steps,
            stopped: None,
            host: None,
        };
        let text = lossless_summary(&[
            result(
                Transport::TcpRelay,
                vec![step(4e6, 4e6, 1, 1), step(8e6, 8e6, 1, 1)],
            ),
            result(
                Transport::ShmRelay,
                vec![step(4e6, 4e6, 1, 1), step(8e6, 8e6, 2, 1)],
            ),
            result(Transport::Tickwire, vec![step(4e6, 4e6, 2, 1)]),
        ]);
        assert!(
            text.contains("8.00M (the top of the sweep: may be higher)"),
            "{text}"
        );
        assert!(text.contains("shm-relay / tcp-relay: 0.50x"), "{text}");
        assert!(text.contains("none of the rates swept"), "{text}");
        // tickwire lost at its only rate: no ratio with it.
        assert!(!text.contains("tickwire / tcp-relay"), "{text}");
        assert!(!text.contains("not a comparison"), "{text}");
        // A sweep that shared the machine: its ratios say they are none.
        let mut tcp = result(Transport::TcpRelay, vec![step(4e6, 4e6, 1, 1)]);
        tcp.host = Some(crate::host_watch::Competition::others(0.7));
        let shm = result(Transport::ShmRelay, vec![step(4e6, 4e6, 1, 1)]);
        let text = lossless_summary(&[tcp, shm]);
        assert!(
            text.contains("shm-relay / tcp-relay: 1.00x")
                && text.contains("^ not a comparison: tcp-relay ran DISTURBED"),
            "{text}"
        );
    }

    #[test]
    fn rates_format_compactly() {
        assert_eq!(fmt_rate(950.0), "950");
        assert_eq!(fmt_rate(20_000.0), "20.0k");
        assert_eq!(fmt_rate(1_500_000.0), "1.50M");
    }
}
