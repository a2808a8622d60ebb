//! The `tickwire bench pingpong` driver: half round-trip latency versus message size
//! (docs/benchmarking.md family B), over raw TCP, raw UDP, a raw shared-memory ring
//! pair, and tickwire through a router over TCP or over shared memory.
//!
//! One ping is outstanding at a time (closed loop, on purpose: ping-pong measures
//! unloaded latency only, rule 4). Per size, `--warmup` pings are sent first and
//! excluded, then `--iterations` pings are measured; each sample is half the round trip
//! measured on one clock by the pinging thread.
//!
//! The raw transports are the floor: a minimal echo thread with no tickwire code (TCP:
//! echo every byte read; UDP: echo every datagram). The tickwire path is client A →
//! router → echo client B → router → client A, on topics `bench/ping` and `bench/pong`;
//! by default one thread drives both A and B (`--echo same-thread`), so the busy parties
//! are that thread and the router, as in the raw transports.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use tickwire_rt::MonoNanos;

use anyhow::{bail, Context};
use serde::Serialize;
use tickwire_client::{Client, ClientOptions, Wait};

pub use crate::console::Console;
use crate::harness::{parse_pin, ExternalRouter, Pinning, RouterAddr, RouterPath};

use crate::harness::{self, idle_parser, IdleStrategy, Progress, StopFlag, BENCH_IDLE};
use crate::report::OutputArgs;
use crate::report::{self, Machine, Series};
use crate::stats::{Counters, Latency, Summary};

const AFTER_HELP: &str = "\
What it measures:
  One ping outstanding at a time; each sample is half the round trip (RTT/2), taken on
  one monotonic clock by the pinging thread. Warm-up pings are sent first and excluded
  from every figure (the report says how many). Message size is the application
  payload; tickwire adds its frame header and topic on the wire. Ping-pong is unloaded
  latency versus size only: for latency under load use `bench stream` or `bench fanout`.

Transports, measured side by side in the same run:
  tcp       raw TCP (TCP_NODELAY) to a minimal echo thread: the floor, no tickwire code
  udp       raw UDP datagrams to a minimal echo thread: the floor without TCP
  shm       a bare shared-memory ring pair (tickwire-shm, no router, no doorbells) to
            an echo thread that spins: the floor of the shared-memory transport
  tickwire  client A publishes on bench/ping through a `tickwire router` child process
            (or --router ADDR); echo client B, subscribed, republishes on bench/pong;
            A receives. Four TCP hops per round trip (A → router → B → router → A),
            so RTT/2 is two hops and the router's work, against one hop for tcp.
  tickwire-shm  the same through a router started with --shm, A and B connected with
            shm:NAME: four ring hops per round trip, no syscall on the path when
            everyone spins.
  tickwire-tls  the same through a router's TLS listener (--tls-listen), A and B
            connected with tls://HOST:PORT: every hop encrypted (rustls, TLS 1.3); the
            bench makes a throw-away CA and router certificate for the run. The report
            adds tickwire-tls p50 / tickwire (TCP) p50: what TLS costs.

Where echo client B runs (--echo):
  same-thread  (default) the pinging thread drives both clients: it publishes with A,
               polls B until the ping arrives, republishes it with B, then polls A.
               Two connections and the same router path, but only two busy parties
               (that thread and the router), as in the raw transports, so on a 2-core
               machine nobody waits for a CPU.
  thread       B has its own thread next to A. With spin on fewer than 3 cores (or
               pinned), A and B yield the CPU after each empty poll so they never wait
               out a scheduler time slice; the report says so. Costs a context switch
               per hop when A and B share a core.

Idle strategy (--idle), applied to both ends and to the router it starts:
  spin   busy-poll non-blocking sockets (Wait::NoWait): lowest latency, one busy core
         per party.
  block  blocking sockets / sleep in poll(2) (Wait::Timeout), router --idle block.

Pinning (--pin NEAR,FAR): the pinging thread runs on NEAR; the raw echo threads and
the router on FAR; tickwire's echo client B on NEAR with A (the published layout:
router on one core, publisher and subscriber in the measuring process on the other).

Compare tickwire with the floor: the table ends with tickwire's p50 as a multiple of
raw TCP's p50 measured in the same run (docs/benchmarking.md rule 10).

Examples:
  tickwire bench pingpong
      raw TCP, raw UDP and tickwire (the default transports), sizes 64,100,600,1024,1472,
      20000 pings per size, spin
  tickwire bench pingpong --idle block --pin 0,1 --json pp.json --plot pp.svg
  tickwire bench pingpong --transports tcp,tickwire --sizes 64 --iterations 100000
  tickwire bench pingpong --transports shm,tickwire-shm,tcp,tickwire --sizes 64 --pin 0,1
  tickwire bench pingpong --transports tickwire --router 10.0.0.5:7420

Ctrl-C stops the run and still prints (and writes) what was measured.

Exit status: 0 when every transport was measured, 130 when Ctrl-C stopped the run
(what was measured is still reported), 1 when a transport could not be measured (an
error, e.g. the router would not start), 2 for a usage error.";

/// Options of `tickwire bench pingpong`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    mut_arg("plot", |a| a.help(
        "Draw latency (p50 and p99) versus message size, one line per transport, as an SVG to FILE"
    )),
)]
pub struct PingpongArgs {
    /// Message sizes in bytes (payload), comma-separated; each is measured in turn.
    /// At least 8 (the ping carries its sequence number); at most 65507 for udp.
    #[arg(
        long,
        alias = "size",
        value_delimiter = ',',
        default_value = "64,100,600,1024,1472",
        value_parser = parse_ping_size
    )]
    pub sizes: Vec<usize>,

    /// Measured pings per size and transport (after the warm-up); `20k`, `1M` work too.
    #[arg(long, default_value = "20000", value_parser = crate::schedule::parse_count)]
    pub iterations: u64,

    /// Warm-up pings per size and transport, sent first and excluded from the results.
    #[arg(long, default_value_t = 2_000)]
    pub warmup: u64,

    /// Transports to measure, comma-separated, in this order: tcp, udp (raw sockets, the
    /// floor), shm (a bare shared-memory ring pair, the shared-memory floor), shm-relay
    /// (the router's topology over bare rings: a relay thread copying between two ring
    /// pairs, the floor of tickwire-shm), tickwire (through the router over TCP) and
    /// tickwire-shm (through the router over shared memory), tickwire-tls (through the
    /// router over TLS).
    #[arg(
        long,
        alias = "transport",
        value_delimiter = ',',
        default_value = "tcp,udp,tickwire"
    )]
    pub transports: Vec<Transport>,

    /// Idle strategy of both ends and of the router this bench starts: `spin`
    /// (busy-poll) or `block` (sleep in the kernel until data arrives).
    #[arg(long, value_parser = idle_parser(&BENCH_IDLE), default_value_t = IdleStrategy::Spin)]
    pub idle: IdleStrategy,

    /// Pin the measuring thread to CPU NEAR and the echo threads and router to CPU FAR
    /// (e.g. `0,1`; CPUs this process may run on). Default: no pinning, the scheduler
    /// decides.
    #[arg(long, value_name = "NEAR,FAR", value_parser = parse_pin)]
    pub pin: Option<Pinning>,

    /// Use the tickwire router already running at ADDR instead of starting one: HOST:PORT
    /// (its TCP listener) for the tickwire transport, shm:NAME (its `--shm NAME`) for
    /// tickwire-shm; the other tickwire transports start their own router. Its idle
    /// strategy and pinning are then whatever it was started with.
    #[arg(long, value_name = "ADDR", value_parser = harness::parse_external_router)]
    pub router: Option<ExternalRouter>,

    /// Where tickwire's echo client B runs: `same-thread` (the pinging thread drives
    /// both A and B, so the only spinners are that thread and the router) or `thread`
    /// (B has its own thread beside A).
    #[arg(long, value_enum, default_value_t = Echo::SameThread)]
    pub echo: Echo,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// A ping-pong transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
// The JSON names are the command line's (`tickwire-shm`, `shm-relay`).
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Raw TCP to a minimal echo thread (the floor).
    Tcp,
    /// Raw UDP to a minimal echo thread (the floor without TCP).
    Udp,
    /// Through a tickwire router: publish, echo client republishes, receive.
    Tickwire,
    /// A bare shared-memory ring pair to a spinning echo thread (the shm floor).
    Shm,
    /// Through a tickwire router over shared memory (`shm:NAME`).
    TickwireShm,
    /// Through a tickwire router over TLS (`tls://HOST:PORT`; a throw-away CA and
    /// certificate made for the run).
    TickwireTls,
    /// The router's topology with nothing of the router: two bare ring pairs and a
    /// relay thread on the far CPU copying bytes between them (the floor of
    /// `tickwire-shm`: the same four CPU crossings per round trip).
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
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Tickwire => "tickwire",
            Transport::Shm => "shm",
            Transport::TickwireShm => "tickwire-shm",
            Transport::TickwireTls => "tickwire-tls",
            Transport::ShmRelay => "shm-relay",
        }
    }
}

/// Where tickwire's echo client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Echo {
    /// The pinging thread drives both clients.
    SameThread,
    /// The echo client has its own thread.
    Thread,
}

/// How a client end waits for one message: not at all (spin), or up to `limit`
/// (block). The bench's ends support [`BENCH_IDLE`] only.
fn client_wait(idle: IdleStrategy, limit: Duration) -> Wait {
    match idle {
        IdleStrategy::Block => Wait::Timeout(limit),
        _ => Wait::NoWait,
    }
}

/// No reply within this long: UDP counts the ping as lost, TCP and tickwire fail.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// Topics of the tickwire path.
const PING_TOPIC: &str = "bench/ping";
const PONG_TOPIC: &str = "bench/pong";
/// Largest UDP payload.
const MAX_UDP: usize = 65_507;

/// One size on one transport.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Payload bytes.
    pub size: usize,
    /// Half round trips, µs; `samples` is the number of measured pings answered.
    pub latency: Summary,
    /// Measured pings sent and answered (warm-up not included); `gaps` are lost pings.
    pub counters: Counters,
    /// Warm-up pings sent before the measurement, excluded from every figure.
    pub warmup_excluded: u64,
    /// False when Ctrl-C ended this size early.
    pub complete: bool,
}

/// All sizes on one transport.
#[derive(Debug, Clone, Serialize)]
pub struct TransportResult {
    pub transport: Transport,
    /// What stood between the two ends.
    pub path: String,
    /// True when the spinning ends yielded the CPU after each empty poll (more spinning
    /// parties than cores).
    pub spin_yields: bool,
    pub sizes: Vec<SizeResult>,
}

/// The whole JSON report.
#[derive(Debug, Serialize)]
struct Report<'a> {
    bench: &'static str,
    machine: Machine,
    metric: &'static str,
    idle: IdleStrategy,
    /// Where tickwire's echo client ran.
    echo: Echo,
    pinning: Option<Pinning>,
    router: Option<String>,
    iterations: u64,
    warmup_excluded: u64,
    stopped_by_user: bool,
    /// Other processes' and the host's CPU over the whole run (`/proc`).
    host: Option<crate::host_watch::Competition>,
    transports: &'a [TransportResult],
    /// tickwire p50 / raw TCP p50 per size, when both were measured.
    ratio_to_tcp_p50: Vec<(usize, f64)>,
    /// tickwire-shm p50 / raw shm p50 per size, when both were measured.
    shm_ratio_to_raw_shm_p50: Vec<(usize, f64)>,
    /// tickwire-shm p50 / tickwire (TCP) p50 per size, when both were measured.
    shm_ratio_to_tickwire_tcp_p50: Vec<(usize, f64)>,
    /// tickwire-shm p50 / shm-relay p50 per size (what the router adds to its
    /// topology's floor), when both were measured.
    shm_ratio_to_shm_relay_p50: Vec<(usize, f64)>,
    /// shm-relay p50 / raw shm p50 per size (what the topology costs), when both were
    /// measured.
    shm_relay_ratio_to_raw_shm_p50: Vec<(usize, f64)>,
    /// tickwire-tls p50 / tickwire (TCP) p50 per size (what TLS adds), when both were
    /// measured.
    tls_ratio_to_tickwire_tcp_p50: Vec<(usize, f64)>,
}

/// Runs the bench; `tickwire` is the path of the tickwire binary (to start a router).
/// The report goes to `con`.
pub fn run(
    args: &PingpongArgs,
    tickwire: &Path,
    con: &mut Console<'_>,
) -> anyhow::Result<ExitCode> {
    validate(args).map_err(crate::UsageError::of)?;
    let paths: Vec<RouterPath> = args
        .transports
        .iter()
        .filter_map(|t| t.router_path())
        .collect();
    harness::check_external_router(args.router.as_ref(), &paths).map_err(crate::UsageError::of)?;
    let stop = StopFlag::install();
    let machine = Machine::detect();
    let cores = machine.cores.max(1);
    if let Some(p) = args.pin {
        harness::pin_current_thread(p.near);
    }
    let mut ctx = Ctx {
        args,
        stop: stop.clone(),
        progress: Progress::new(con.progress),
    };

    let mut router_desc = None;
    let mut results: Vec<TransportResult> = Vec::new();
    // Other processes' and the host's CPU over the whole run, from /proc (no sentinel
    // threads: their wake-ups would preempt the measured ones); a transport alone is
    // often too short for /proc's 10 ms accounting.
    let watch = crate::host_watch::HostWatch::start_serving(
        0,
        &harness::external_router_ports(args.router.as_ref()),
    );
    for &t in &args.transports {
        if stop.is_set() {
            break;
        }
        let r = match t {
            Transport::Tcp => ctx.raw_tcp(),
            Transport::Udp => ctx.raw_udp(),
            Transport::Shm => ctx.raw_shm(),
            Transport::ShmRelay => ctx.shm_relay(),
            Transport::Tickwire | Transport::TickwireShm | Transport::TickwireTls => {
                let path = t.router_path().unwrap_or(RouterPath::Tcp);
                let router = harness::bench_router(
                    tickwire,
                    args.idle,
                    args.pin,
                    args.router.as_ref(),
                    path,
                )?;
                router_desc = Some(router.desc.clone());
                let addr = &router.addr;
                match args.echo {
                    Echo::SameThread => ctx.tickwire_same_thread(t, addr),
                    Echo::Thread => {
                        // A, B and a spinning router: three spinners.
                        let yields =
                            args.idle == IdleStrategy::Spin && (args.pin.is_some() || cores < 3);
                        ctx.tickwire(t, addr, yields)
                    }
                }
            }
        };
        results.push(r.with_context(|| format!("measuring the {} transport", t.name()))?);
    }
    let host = watch.finish().competition;

    print_report(
        con.out,
        args,
        &machine,
        &results,
        router_desc.as_deref(),
        stop.is_set(),
        host,
    );
    let shm_ratio_to_raw_shm_p50 = ratios_of(&results, Transport::TickwireShm, Transport::Shm);
    let shm_ratio_to_tickwire_tcp_p50 =
        ratios_of(&results, Transport::TickwireShm, Transport::Tickwire);
    let shm_ratio_to_shm_relay_p50 =
        ratios_of(&results, Transport::TickwireShm, Transport::ShmRelay);
    let shm_relay_ratio_to_raw_shm_p50 = ratios_of(&results, Transport::ShmRelay, Transport::Shm);
    let tls_ratio_to_tickwire_tcp_p50 =
        ratios_of(&results, Transport::TickwireTls, Transport::Tickwire);
    let ratios = ratios(&results);
    let rep = Report {
        bench: "pingpong",
        machine: machine.clone(),
        metric: "half round trip (RTT/2), µs",
        idle: args.idle,
        echo: args.echo,
        pinning: args.pin,
        router: router_desc.clone(),
        iterations: args.iterations,
        warmup_excluded: args.warmup,
        stopped_by_user: stop.is_set(),
        host,
        transports: &results,
        ratio_to_tcp_p50: ratios,
        shm_ratio_to_raw_shm_p50,
        shm_ratio_to_tickwire_tcp_p50,
        shm_ratio_to_shm_relay_p50,
        shm_relay_ratio_to_raw_shm_p50,
        tls_ratio_to_tickwire_tcp_p50,
    };
    args.output.write(
        con.out,
        &rep,
        |path| plot(path, args, &results),
        report::Announce::Wrote,
    )?;
    Ok(report::exit_code(stop.is_set()))
}

/// One `--sizes` value: at least 8 bytes (a ping carries its sequence number), at most
/// 16 MiB; `1KiB`-style sizes work too.
fn parse_ping_size(s: &str) -> Result<usize, String> {
    let n = tickwire_rt::units::parse_size(s)?;
    if n < 8 {
        return Err(format!(
            "{n} is too small: a ping carries an 8-byte sequence number"
        ));
    }
    if n > 16 << 20 {
        return Err(format!("{n} is larger than 16 MiB"));
    }
    Ok(n)
}

fn validate(args: &PingpongArgs) -> anyhow::Result<()> {
    if args.sizes.is_empty() || args.transports.is_empty() {
        bail!("--sizes and --transports need at least one value");
    }
    if let Some(s) = args.sizes.iter().find(|&&s| s < 8) {
        bail!("--sizes: {s} is too small; a ping carries an 8-byte sequence number");
    }
    if args.transports.contains(&Transport::Udp) {
        if let Some(s) = args.sizes.iter().find(|&&s| s > MAX_UDP) {
            bail!("--sizes: {s} does not fit in one UDP datagram (max {MAX_UDP})");
        }
    }
    if args.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    Ok(())
}

/// What every transport's loop needs.
struct Ctx<'a> {
    args: &'a PingpongArgs,
    stop: StopFlag,
    progress: Progress,
}

/// One ping's outcome.
enum Reply {
    /// Answered; the round trip in ns.
    Rtt(u64),
    /// No answer in time (UDP only).
    Lost,
    /// Ctrl-C while waiting: not counted.
    Stopped,
}

impl Ctx<'_> {
    /// [`Ctx::measure`] for every size in turn, until stopped or the first error. The
    /// results so far, and that error: a caller may have an echo to shut down first.
    fn measure_sizes(
        &mut self,
        transport: Transport,
        mut ping: impl FnMut(&mut [u8]) -> anyhow::Result<Reply>,
    ) -> (Vec<SizeResult>, anyhow::Result<()>) {
        let mut sizes = Vec::new();
        for size in self.args.sizes.clone() {
            if self.stop.is_set() {
                break;
            }
            match self.measure(transport, size, &mut ping) {
                Ok(r) => sizes.push(r),
                Err(e) => return (sizes, Err(e)),
            }
        }
        (sizes, Ok(()))
    }

    /// Runs warm-up then measurement for one size; `ping(seq, buf)` sends `buf` (with
    /// `seq` in its first 8 bytes) and waits for its echo.
    fn measure(
        &mut self,
        transport: Transport,
        size: usize,
        mut ping: impl FnMut(&mut [u8]) -> anyhow::Result<Reply>,
    ) -> anyhow::Result<SizeResult> {
        let mut buf = vec![0xA5u8; size];
        let mut lat = Latency::new();
        let mut c = Counters::default();
        let total = self.args.warmup + self.args.iterations;
        let mut complete = true;
        let mut warm = 0;
        for seq in 0..total {
            if self.stop.is_set() {
                complete = false;
                break;
            }
            buf[..8].copy_from_slice(&seq.to_le_bytes());
            let reply = ping(&mut buf)?;
            if let Reply::Stopped = reply {
                complete = false;
                break;
            }
            if seq < self.args.warmup {
                warm += 1;
                continue;
            }
            c.sent += 1;
            match reply {
                Reply::Rtt(rtt) => {
                    c.received += 1;
                    lat.record(rtt / 2);
                }
                Reply::Lost | Reply::Stopped => c.gaps += 1,
            }
            self.progress.tick(|| {
                format!(
                    "pingpong {} {size} B: {seq}/{total} pings ({} warm-up)",
                    transport.name(),
                    self.args.warmup
                )
            });
        }
        Ok(SizeResult {
            size,
            latency: lat.summary(),
            counters: c,
            warmup_excluded: warm,
            complete,
        })
    }

    fn raw_tcp(&mut self) -> anyhow::Result<TransportResult> {
        let spin = self.args.idle == IdleStrategy::Spin;
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the TCP echo")?;
        let addr = listener.local_addr().context("TCP echo address")?;
        let far = self.args.pin.map(|p| p.far);
        let echo: JoinHandle<anyhow::Result<()>> =
            harness::spawn_pinned("tcp-echo", far, move || {
                let (mut s, _) = listener.accept().context("accepting the pinger")?;
                s.set_nodelay(true)?;
                s.set_nonblocking(spin)?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(n) => n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::hint::spin_loop();
                            continue;
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e).context("TCP echo read"),
                    };
                    write_all_spin(&mut s, &buf[..n]).context("TCP echo write")?;
                }
            })
            .context("spawning the TCP echo thread")?;
        let mut s = TcpStream::connect(addr).context("connecting to the TCP echo")?;
        s.set_nodelay(true)?;
        s.set_nonblocking(spin)?;
        if !spin {
            s.set_read_timeout(Some(REPLY_TIMEOUT))?;
        }
        let mut back = Vec::new();
        let (sizes, result) = self.measure_sizes(Transport::Tcp, |buf| {
            back.resize(buf.len(), 0);
            let t0 = MonoNanos::now().as_nanos();
            write_all_spin(&mut s, buf).context("TCP ping write")?;
            read_exact_until(&mut s, &mut back, t0 + REPLY_TIMEOUT.as_nanos() as u64)?;
            let t1 = MonoNanos::now().as_nanos();
            if back[..8] != buf[..8] {
                bail!("TCP echo returned the wrong ping");
            }
            Ok(Reply::Rtt(t1 - t0))
        });
        result?;
        drop(s);
        join(echo, "TCP echo")?;
        Ok(TransportResult {
            transport: Transport::Tcp,
            path: "raw TCP (TCP_NODELAY) to an echo thread, loopback".into(),
            spin_yields: false,
            sizes,
        })
    }

    /// The shared-memory floor: a bare ring pair (no router, no doorbells) to an echo
    /// thread that spins whatever `--idle` says (a bare ring has nothing to sleep on).
    fn raw_shm(&mut self) -> anyhow::Result<TransportResult> {
        let (mut near, mut far_end) =
            tickwire_shm::bare_pair(1 << 20).context("mapping a bare shared-memory ring pair")?;
        let echo = FarSpinner::start("shm echo", self.args.pin.map(|p| p.far), move |buf| {
            copy_ring(&mut far_end.rx, &mut far_end.tx, buf)
        })?;
        let mut back = Vec::new();
        let (sizes, result) = self.measure_sizes(Transport::Shm, |buf| {
            back.resize(buf.len(), 0);
            let t0 = MonoNanos::now().as_nanos();
            let deadline = t0 + REPLY_TIMEOUT.as_nanos() as u64;
            write_ring(&mut near.tx, buf)?;
            read_ring(&mut near.rx, &mut back, deadline)?;
            let t1 = MonoNanos::now().as_nanos();
            if back[..8] != buf[..8] {
                bail!("shm echo returned the wrong ping");
            }
            Ok(Reply::Rtt(t1 - t0))
        });
        echo.stop()?;
        result?;
        Ok(TransportResult {
            transport: Transport::Shm,
            path: "bare shared-memory ring pair (memfd, no router) to a spinning echo thread"
                .into(),
            spin_yields: false,
            sizes,
        })
    }

    /// The floor of `tickwire-shm` in its default layout (`--echo same-thread`): the
    /// measuring thread plays both clients, A and B, each with a bare ring pair to a
    /// relay thread on the far CPU that copies A's bytes to B and B's to A — the
    /// router's place and its four CPU crossings per round trip, with no framing,
    /// matching or doorbell.
    fn shm_relay(&mut self) -> anyhow::Result<TransportResult> {
        let ring = 1 << 20;
        let (mut a, mut relay_a) =
            tickwire_shm::bare_pair(ring).context("mapping a bare shared-memory ring pair")?;
        let (mut b, mut relay_b) =
            tickwire_shm::bare_pair(ring).context("mapping a bare shared-memory ring pair")?;
        let relay = FarSpinner::start("shm relay", self.args.pin.map(|p| p.far), move |buf| {
            let from_a = copy_ring(&mut relay_a.rx, &mut relay_b.tx, buf)?;
            Ok(from_a + copy_ring(&mut relay_b.rx, &mut relay_a.tx, buf)?)
        })?;
        let mut got_b = Vec::new();
        let mut back = Vec::new();
        let (sizes, result) = self.measure_sizes(Transport::ShmRelay, |buf| {
            got_b.resize(buf.len(), 0);
            back.resize(buf.len(), 0);
            let t0 = MonoNanos::now().as_nanos();
            let deadline = t0 + REPLY_TIMEOUT.as_nanos() as u64;
            write_ring(&mut a.tx, buf)?;
            read_ring(&mut b.rx, &mut got_b, deadline)?;
            write_ring(&mut b.tx, &got_b)?;
            read_ring(&mut a.rx, &mut back, deadline)?;
            let t1 = MonoNanos::now().as_nanos();
            if back[..8] != buf[..8] {
                bail!("shm relay returned the wrong ping");
            }
            Ok(Reply::Rtt(t1 - t0))
        });
        relay.stop()?;
        result?;
        Ok(TransportResult {
            transport: Transport::ShmRelay,
            path: "two bare shared-memory ring pairs through a spinning relay thread (the router's topology, no router)"
                .into(),
            spin_yields: false,
            sizes,
        })
    }

    fn raw_udp(&mut self) -> anyhow::Result<TransportResult> {
        let spin = self.args.idle == IdleStrategy::Spin;
        let echo_sock = UdpSocket::bind("127.0.0.1:0").context("binding the UDP echo")?;
        let echo_addr = echo_sock.local_addr()?;
        let s = UdpSocket::bind("127.0.0.1:0").context("binding the UDP pinger")?;
        s.connect(echo_addr)?;
        let far = self.args.pin.map(|p| p.far);
        let echo: JoinHandle<anyhow::Result<()>> =
            harness::spawn_pinned("udp-echo", far, move || {
                echo_sock.set_nonblocking(spin)?;
                let mut buf = vec![0u8; MAX_UDP + 1];
                loop {
                    match echo_sock.recv_from(&mut buf) {
                        // An empty datagram is the pinger's goodbye.
                        Ok((0, _)) => return Ok(()),
                        Ok((n, from)) => loop {
                            match echo_sock.send_to(&buf[..n], from) {
                                Ok(_) => break,
                                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                    std::hint::spin_loop()
                                }
                                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                                Err(e) => return Err(e).context("UDP echo send"),
                            }
                        },
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(e).context("UDP echo receive"),
                    }
                }
            })
            .context("spawning the UDP echo thread")?;
        s.set_nonblocking(spin)?;
        if !spin {
            s.set_read_timeout(Some(Duration::from_millis(100)))?;
        }
        let mut back = vec![0u8; MAX_UDP + 1];
        let stop = self.stop.clone();
        let (sizes, result) = self.measure_sizes(Transport::Udp, |buf| {
            let t0 = MonoNanos::now().as_nanos();
            let deadline = t0 + REPLY_TIMEOUT.as_nanos() as u64;
            s.send(buf).context("UDP ping send")?;
            loop {
                match s.recv(&mut back) {
                    // A late echo of an earlier (lost) ping is skipped.
                    Ok(n) if n == buf.len() && back[..8] == buf[..8] => {
                        return Ok(Reply::Rtt(MonoNanos::now().as_nanos() - t0))
                    }
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) =>
                    {
                        std::hint::spin_loop()
                    }
                    Err(e) => return Err(e).context("UDP ping receive"),
                }
                if stop.is_set() {
                    return Ok(Reply::Stopped);
                }
                if MonoNanos::now().as_nanos() > deadline {
                    return Ok(Reply::Lost);
                }
            }
        });
        // The goodbye may be lost too: repeat it until the echo thread is gone.
        for _ in 0..50 {
            let _ = s.send(&[]);
            if echo.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if echo.is_finished() {
            join(echo, "UDP echo")?;
        }
        result?;
        Ok(TransportResult {
            transport: Transport::Udp,
            path: "raw UDP datagrams to an echo thread, loopback".into(),
            spin_yields: false,
            sizes,
        })
    }

    /// The tickwire path with A and B driven by one thread: A publishes the ping, the
    /// thread polls B until the ping arrives, B republishes it, the thread polls A.
    fn tickwire_same_thread(
        &mut self,
        transport: Transport,
        addr: &RouterAddr,
    ) -> anyhow::Result<TransportResult> {
        let idle = self.args.idle;
        let mut b = connect_subscribed(addr, ECHO_NAME, PING_TOPIC)?;
        let mut a = connect_subscribed(addr, PINGER_NAME, PONG_TOPIC)?;
        let wait = client_wait(idle, REPLY_TIMEOUT);
        let mut echo_buf = Vec::with_capacity(64 * 1024);
        let stop = self.stop.clone();
        let (sizes, result) = self.measure_sizes(transport, |buf| {
            let t0 = MonoNanos::now().as_nanos();
            let deadline = t0 + REPLY_TIMEOUT.as_nanos() as u64;
            a.publish(PING_TOPIC, buf).context("publishing a ping")?;
            // B: receive the ping and republish it.
            let mut empty = EmptyPolls::default();
            loop {
                if let Some(m) = b.recv(wait).context("echo client receive")? {
                    echo_buf.clear();
                    echo_buf.extend_from_slice(m.payload());
                    break;
                }
                // A spinning wait looks at its clock now and then; a blocking one
                // returned after its whole timeout.
                if matches!(wait, Wait::NoWait) && !empty.look_now() {
                    std::hint::spin_loop();
                    continue;
                }
                if MonoNanos::now().as_nanos() > deadline {
                    bail!(
                        "the echo client got no ping within {REPLY_TIMEOUT:?} (router at {addr})"
                    );
                }
                if stop.is_set() {
                    return Ok(Reply::Stopped);
                }
                std::hint::spin_loop();
            }
            b.publish(PONG_TOPIC, &echo_buf)
                .context("echo client publish")?;
            // A: receive the pong.
            await_pong(&mut a, buf, t0, wait, &stop, addr, false)
        });
        result?;
        let _ = a.close();
        let _ = b.close();
        Ok(TransportResult {
            transport,
            path: format!(
                "client A → router → echo client B → router → A over {} (topics bench/ping, \
                 bench/pong; A and B driven by one thread)",
                path_of(transport)
            ),
            spin_yields: false,
            sizes,
        })
    }

    fn tickwire(
        &mut self,
        transport: Transport,
        addr: &RouterAddr,
        yields: bool,
    ) -> anyhow::Result<TransportResult> {
        let echo_addr = addr.clone();
        let idle = self.args.idle;
        let near = self.args.pin.map(|p| p.near);
        let (ready_tx, ready_rx) = mpsc::channel::<anyhow::Result<()>>();
        let stop = self.stop.clone();
        let echo: JoinHandle<anyhow::Result<()>> =
            harness::spawn_pinned("tickwire-echo", near, move || {
                let setup = connect_subscribed(&echo_addr, ECHO_NAME, PING_TOPIC);
                let mut b = match setup {
                    Ok(b) => {
                        let _ = ready_tx.send(Ok(()));
                        b
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                        return Err(e);
                    }
                };
                let mut buf = Vec::with_capacity(64 * 1024);
                loop {
                    let wait = client_wait(idle, Duration::from_millis(100));
                    match b.recv(wait).context("echo client receive")? {
                        Some(m) => {
                            buf.clear();
                            buf.extend_from_slice(m.payload());
                        }
                        None => {
                            if stop.is_set() {
                                return Ok(());
                            }
                            idle_once(yields);
                            continue;
                        }
                    }
                    // An empty ping is A's goodbye.
                    if buf.is_empty() {
                        let _ = b.close();
                        return Ok(());
                    }
                    b.publish(PONG_TOPIC, &buf).context("echo client publish")?;
                }
            })
            .context("spawning the tickwire echo thread")?;
        ready_rx
            .recv()
            .context("the tickwire echo thread died")?
            .context("starting the tickwire echo client")?;
        let mut a = connect_subscribed(addr, PINGER_NAME, PONG_TOPIC)?;

        let stop = self.stop.clone();
        let (sizes, result) = self.measure_sizes(transport, |buf| {
            let t0 = MonoNanos::now().as_nanos();
            a.publish(PING_TOPIC, buf).context("publishing a ping")?;
            let wait = client_wait(idle, REPLY_TIMEOUT);
            await_pong(&mut a, buf, t0, wait, &stop, addr, yields)
        });
        let _ = a.publish(PING_TOPIC, &[]);
        let _ = a.close();
        if result.is_ok() || echo.is_finished() {
            join(echo, "tickwire echo")?;
        }
        result?;
        Ok(TransportResult {
            transport,
            path: format!(
                "client A → router → echo client B → router → A over {} (topics bench/ping, \
                 bench/pong)",
                path_of(transport)
            ),
            spin_yields: yields,
            sizes,
        })
    }
}

/// Client names of the tickwire path's two ends.
const PINGER_NAME: &str = "bench-pingpong";
const ECHO_NAME: &str = "bench-pingpong-echo";

/// A tickwire client named `name`, writing every publish at once (no batching: one
/// ping is outstanding), subscribed to `pattern`.
fn connect_subscribed(addr: &RouterAddr, name: &str, pattern: &str) -> anyhow::Result<Client> {
    let opts = addr.options(ClientOptions {
        name: name.to_owned(),
        batch_bytes: 0,
        ..ClientOptions::default()
    });
    let mut c = Client::connect_to(&addr.addr, opts)
        .with_context(|| format!("{name} connecting to the router at {addr}"))?;
    c.subscribe(pattern)
        .with_context(|| format!("{name} subscribing to {pattern}"))?;
    Ok(c)
}

/// Client A's wait for the pong of `ping`, sent at `t0`: the round trip, or `Stopped`
/// on Ctrl-C; an error after [`REPLY_TIMEOUT`] or for a pong that is not `ping`'s.
fn await_pong(
    a: &mut Client,
    ping: &[u8],
    t0: u64,
    wait: Wait,
    stop: &StopFlag,
    addr: &RouterAddr,
    yields: bool,
) -> anyhow::Result<Reply> {
    let deadline = t0 + REPLY_TIMEOUT.as_nanos() as u64;
    let mut empty = EmptyPolls::default();
    loop {
        if let Some(m) = a.recv(wait).context("receiving a pong")? {
            let t1 = MonoNanos::now().as_nanos();
            if m.payload().len() == ping.len() && m.payload()[..8] == ping[..8] {
                return Ok(Reply::Rtt(t1 - t0));
            }
            bail!("the echo client returned the wrong ping");
        }
        if matches!(wait, Wait::NoWait) && !empty.look_now() {
            idle_once(yields);
            continue;
        }
        if MonoNanos::now().as_nanos() > deadline {
            bail!("no pong within {REPLY_TIMEOUT:?} (router at {addr})");
        }
        if stop.is_set() {
            return Ok(Reply::Stopped);
        }
        idle_once(yields);
    }
}

/// Counts a waiting loop's empty polls so that it reads the clock (for its deadline)
/// and its stop flag once every [`EmptyPolls::EVERY`] of them, not after each: a clock
/// read (~20-40 ns in this guest) after every empty poll delayed the sight of the reply
/// by up to that much, once per waiting end, the harness's cost rather than the
/// transport's (a tickwire-shm round trip has two such ends on the measuring thread,
/// the raw shm floor one). The spinning waits on rings and tickwire clients use it; a
/// wait whose poll is a system call (UDP, TCP) or blocks looks every time.
#[derive(Default)]
struct EmptyPolls(u32);

impl EmptyPolls {
    /// Empty polls per look at the clock: ~64 x ~10 ns, a few µs at most late on a
    /// deadline of seconds.
    const EVERY: u32 = 64;

    /// Counts one empty poll; true when the loop should look at its clock now.
    #[inline]
    fn look_now(&mut self) -> bool {
        self.0 = self.0.wrapping_add(1);
        self.0 % Self::EVERY == 0
    }
}

/// One empty poll in a spin loop: a pause hint, or a yield when spinners share a core.
pub(crate) fn idle_once(yields: bool) {
    if yields {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

fn join(h: JoinHandle<anyhow::Result<()>>, what: &str) -> anyhow::Result<()> {
    match h.join() {
        Ok(r) => r.with_context(|| format!("{what} thread")),
        Err(_) => bail!("the {what} thread panicked"),
    }
}

/// `write_all` that also works on a non-blocking socket (spins on WouldBlock).
fn write_all_spin(s: &mut TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf` from a blocking (with read timeout) or non-blocking socket.
fn read_exact_until(s: &mut TcpStream, buf: &mut [u8], deadline: u64) -> anyhow::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => bail!("the TCP echo closed the connection"),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if MonoNanos::now().as_nanos() > deadline {
                    bail!("no TCP echo within {REPLY_TIMEOUT:?}");
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("TCP ping read"),
        }
    }
    Ok(())
}

/// What the router path of `transport` runs over.
fn path_of(transport: Transport) -> &'static str {
    match transport {
        Transport::TickwireShm => "shared memory (shm:NAME)",
        Transport::TickwireTls => "TLS (tls://HOST:PORT)",
        _ => "TCP",
    }
}

/// tickwire p50 / tcp p50 per size, where both have samples.
fn ratios(results: &[TransportResult]) -> Vec<(usize, f64)> {
    ratios_of(results, Transport::Tickwire, Transport::Tcp)
}

/// `of` p50 / `base` p50 per size, where both have samples.
/// A thread on the far CPU that runs `turn` over a 64 KiB scratch buffer until stopped,
/// spinning after a turn that moved no bytes (the shared-memory floors' echo and relay).
struct FarSpinner {
    done: Arc<AtomicBool>,
    handle: JoinHandle<anyhow::Result<()>>,
    what: &'static str,
}

impl FarSpinner {
    fn start(
        what: &'static str,
        cpu: Option<usize>,
        mut turn: impl FnMut(&mut [u8]) -> anyhow::Result<usize> + Send + 'static,
    ) -> anyhow::Result<FarSpinner> {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let handle = harness::spawn_pinned(&what.replace(' ', "-"), cpu, move || {
            let mut buf = vec![0u8; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                if turn(&mut buf)? == 0 {
                    std::hint::spin_loop();
                }
            }
            Ok(())
        })
        .with_context(|| format!("spawning the {what} thread"))?;
        Ok(FarSpinner { done, handle, what })
    }

    fn stop(self) -> anyhow::Result<()> {
        self.done.store(true, Ordering::Relaxed);
        join(self.handle, self.what)
    }
}

type ShmRx = tickwire_shm::ring::Consumer<Arc<tickwire_shm::Region>>;
type ShmTx = tickwire_shm::ring::Producer<Arc<tickwire_shm::Region>>;

/// Moves what `from` holds into `to` (all of it: `to` is as large as `from`); the
/// bytes moved.
fn copy_ring(from: &mut ShmRx, to: &mut ShmTx, buf: &mut [u8]) -> anyhow::Result<usize> {
    let n = from.read(buf).context("shm relay read")?;
    if n > 0 {
        write_ring(to, &buf[..n])?;
    }
    Ok(n)
}

/// Writes all of `bytes` into `to`, spinning while it is full.
fn write_ring(to: &mut ShmTx, mut bytes: &[u8]) -> anyhow::Result<()> {
    while !bytes.is_empty() {
        let n = to.write(bytes).context("shm write")?;
        bytes = &bytes[n..];
        if n == 0 {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// Fills `buf` from `from`, spinning, until full or past `deadline` (ns).
fn read_ring(from: &mut ShmRx, buf: &mut [u8], deadline: u64) -> anyhow::Result<()> {
    let mut got = 0;
    let mut empty = EmptyPolls::default();
    while got < buf.len() {
        let n = from.read(&mut buf[got..]).context("shm read")?;
        got += n;
        if n == 0 {
            if empty.look_now() && MonoNanos::now().as_nanos() > deadline {
                bail!("no shm reply within {REPLY_TIMEOUT:?}");
            }
            std::hint::spin_loop();
        }
    }
    Ok(())
}

fn ratios_of(results: &[TransportResult], of: Transport, base: Transport) -> Vec<(usize, f64)> {
    let find = |t| results.iter().find(|r| r.transport == t);
    let (Some(tcp), Some(tw)) = (find(base), find(of)) else {
        return Vec::new();
    };
    tw.sizes
        .iter()
        .filter_map(|w| {
            let base = tcp.sizes.iter().find(|b| b.size == w.size)?;
            ratio(
                w.latency.p50_us,
                base.latency.p50_us,
                w.latency.samples.min(base.latency.samples),
            )
            .map(|r| (w.size, r))
        })
        .collect()
}

fn ratio(a: f64, b: f64, samples: u64) -> Option<f64> {
    (samples > 0 && b > 0.0).then(|| a / b)
}

/// The per-size table of one transport: the published ping-pong layout.
pub fn size_table(title: &str, sizes: &[SizeResult]) -> String {
    let mut out = format!("{title}\n");
    out.push_str(&format!(
        "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}\n",
        "size", "mean", "min", "median", "max", "p99", "p99.9", "stddev", "iterations"
    ));
    for s in sizes {
        let l = &s.latency;
        if l.samples == 0 {
            out.push_str(&format!("{:>6} {:>9}\n", s.size, "no samples"));
            continue;
        }
        out.push_str(&format!(
            "{:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10}{}\n",
            s.size,
            l.mean_us,
            l.min_us,
            l.p50_us,
            l.max_us,
            l.p99_us,
            l.p999_us,
            l.stddev_us,
            l.samples,
            if s.complete { "" } else { "  (stopped early)" }
        ));
    }
    out
}

fn print_report(
    out: &mut dyn std::io::Write,
    args: &PingpongArgs,
    machine: &Machine,
    results: &[TransportResult],
    router: Option<&str>,
    stopped: bool,
    host: Option<crate::host_watch::Competition>,
) {
    crate::outln!(out);
    crate::outln!(
        out,
        "tickwire bench pingpong: half round trip (RTT/2) in µs on {} ({} cores, kernel {})",
        machine.cpu_model,
        machine.cores,
        machine.kernel
    );
    let pin = match args.pin {
        Some(p) => format!(
            "pinned: measuring thread CPU {}, echo/router CPU {}",
            p.near, p.far
        ),
        None => "not pinned".into(),
    };
    crate::outln!(
        out,
        "idle {} on both ends; {pin}; warm-up {} pings per size excluded",
        args.idle.name(),
        args.warmup
    );
    report::print_run_notes(out, router, stopped);
    for r in results {
        crate::outln!(out);
        crate::out!(
            out,
            "{}",
            size_table(
                &report::transport_title(r.transport.name(), &r.path, r.spin_yields),
                &r.sizes
            )
        );
        let lost: u64 = r.sizes.iter().map(|s| s.counters.gaps).sum();
        let sent: u64 = r.sizes.iter().map(|s| s.counters.sent).sum();
        let recv: u64 = r.sizes.iter().map(|s| s.counters.received).sum();
        crate::outln!(out, "counters: sent {sent}, received {recv}, lost {lost}");
    }
    crate::outln!(out);
    if let Some(c) = host {
        crate::outln!(out, "host over the whole run: {}", c.sentence());
    }
    print_ratios(out, results, host.is_some_and(|c| c.disturbs()));
}

/// The p50 ratios between the transports measured, each marked when the run was
/// `disturbed`.
fn print_ratios(out: &mut dyn std::io::Write, results: &[TransportResult], disturbed: bool) {
    for (of, base, what) in [
        (
            Transport::Tickwire,
            Transport::Tcp,
            "tickwire p50 / raw TCP p50",
        ),
        (
            Transport::TickwireShm,
            Transport::Shm,
            "tickwire-shm p50 / raw shm p50",
        ),
        (
            Transport::TickwireShm,
            Transport::Tickwire,
            "tickwire-shm p50 / tickwire (TCP) p50",
        ),
        (
            Transport::TickwireShm,
            Transport::ShmRelay,
            "tickwire-shm p50 / shm-relay p50",
        ),
        (
            Transport::ShmRelay,
            Transport::Shm,
            "shm-relay p50 / raw shm p50",
        ),
        (Transport::Shm, Transport::Tcp, "raw shm p50 / raw TCP p50"),
        (
            Transport::TickwireTls,
            Transport::Tickwire,
            "tickwire-tls p50 / tickwire (TCP) p50",
        ),
        (
            Transport::TickwireTls,
            Transport::Tcp,
            "tickwire-tls p50 / raw TCP p50",
        ),
    ] {
        let ratios = ratios_of(results, of, base);
        if !ratios.is_empty() {
            let parts: Vec<String> = ratios
                .iter()
                .map(|(s, r)| format!("{s} B {r:.3}x"))
                .collect();
            crate::outln!(out, "{what} (same run): {}", parts.join(", "));
            // Bench-review pass: ratios of disturbed runs were printed like any other.
            if disturbed {
                crate::outln!(
                    out,
                    "    ^ not a comparison: the run was DISTURBED (host line above); run again on a quiet machine"
                );
            }
        }
    }
}

fn plot(path: &Path, args: &PingpongArgs, results: &[TransportResult]) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for r in results {
        for (label, pick) in [("p50", 0), ("p99", 1)] {
            let points: Vec<(f64, f64)> = r
                .sizes
                .iter()
                .filter(|s| s.latency.samples > 0)
                .map(|s| {
                    let v = if pick == 0 {
                        s.latency.p50_us
                    } else {
                        s.latency.p99_us
                    };
                    (s.size as f64, v)
                })
                .collect();
            series.push(Series {
                name: format!("{} {label}", r.transport.name()),
                points,
            });
        }
    }
    let pin = if args.pin.is_some() {
        "pinned"
    } else {
        "unpinned"
    };
    report::line_chart_svg(
        path,
        &format!(
            "ping-pong half round trip vs size (idle {}, {pin})",
            args.idle.name()
        ),
        "message size (bytes)",
        "latency (µs, log scale)",
        &series,
        true,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_parses_two_cpus() {
        assert_eq!(parse_pin("0,1"), Ok(Pinning { near: 0, far: 1 }));
        assert!(parse_pin("0").is_err());
        assert!(parse_pin("0,1,2").is_err());
        assert!(parse_pin("a,b").is_err());
    }

    #[test]
    fn ratio_needs_samples_and_a_baseline() {
        assert_eq!(ratio(10.0, 4.0, 5), Some(2.5));
        assert_eq!(ratio(10.0, 0.0, 5), None);
        assert_eq!(ratio(10.0, 4.0, 0), None);
    }

    fn summary(samples: u64, p50: f64) -> Summary {
        Summary {
            samples,
            min_us: 1.0,
            p50_us: p50,
            p90_us: p50,
            p99_us: p50,
            p999_us: p50,
            p9999_us: None,
            max_us: p50,
            mean_us: p50,
            stddev_us: 0.0,
        }
    }

    fn result(t: Transport, sizes: &[(usize, f64)]) -> TransportResult {
        TransportResult {
            transport: t,
            path: String::new(),
            spin_yields: false,
            sizes: sizes
                .iter()
                .map(|&(size, p50)| SizeResult {
                    size,
                    latency: summary(10, p50),
                    counters: Counters::default(),
                    warmup_excluded: 0,
                    complete: true,
                })
                .collect(),
        }
    }

    /// Bench-review pass: the ratios of a disturbed run were printed like any other.
    #[test]
    fn a_ratio_of_a_disturbed_run_says_it_is_not_a_comparison() {
        let rs = [
            result(Transport::Shm, &[(100, 0.12)]),
            result(Transport::TickwireShm, &[(100, 0.34)]),
        ];
        let text = |disturbed| {
            let mut out = Vec::new();
            print_ratios(&mut out, &rs, disturbed);
            String::from_utf8(out).unwrap()
        };
        let t = text(true);
        assert!(
            t.contains("tickwire-shm p50 / raw shm p50 (same run): 100 B 2.833x"),
            "{t}"
        );
        assert!(
            t.contains("^ not a comparison: the run was DISTURBED"),
            "{t}"
        );
        assert!(!text(false).contains("not a comparison"));
    }

    #[test]
    fn ratios_pair_tickwire_with_tcp_by_size() {
        let rs = vec![
            result(Transport::Tcp, &[(64, 5.0), (100, 10.0)]),
            result(Transport::Tickwire, &[(64, 10.0), (1472, 30.0)]),
        ];
        assert_eq!(ratios(&rs), vec![(64, 2.0)]);
        assert!(ratios(&rs[..1]).is_empty());
    }

    #[test]
    fn size_table_has_the_published_columns() {
        let t = size_table("tcp", &result(Transport::Tcp, &[(64, 5.0)]).sizes);
        for col in [
            "size",
            "mean",
            "min",
            "median",
            "max",
            "p99",
            "p99.9",
            "stddev",
            "iterations",
        ] {
            assert!(t.contains(col), "{col} missing in\n{t}");
        }
        assert!(t.contains("    64"));
    }
}
