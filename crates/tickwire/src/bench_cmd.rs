//! `tickwire bench`: the benchmark suite (crate `tickwire-bench`).

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use std::io::Write as _;

use tickwire_bench::console::Console;
use tickwire_bench::{fanout, guaranteed, pingpong, stream};

const BENCH_HELP: &str = "\
The industry's latency tests, open loop, HDR histograms, raw-socket baseline in the
same run (test families and rules: docs/benchmarking.md; results: BENCHMARKS.md):
  pingpong   socket ping-pong half round trip vs message size: raw TCP, raw UDP, tickwire
  fanout     router fan-out under bursty mixed-size load (published patterns 1 and 2, mdd);
             --target nats://HOST:PORT runs the identical workload against NATS
  guaranteed guaranteed messaging: open-loop publishes acknowledged once durable, one
             queue, acknowledging consumers; publish->ACK and publish->delivery latency,
             lossless check, durability policy; --target nats runs it against JetStream
  stream     rate sweep: achieved rate and latency per target rate (also over multicast)
  mcast-fanout  multicast to 1, 4, 8 receiver processes, reliable vs plain UDP multicast:
             one-way latency against a UDP half round trip, sender CPU per message
  md-latency market-data measuring clients: per-hop latency of feed-handler updates
  md-replay  market-data replay test in one command: generate, replay 1x and 4x through
             the feed handler and router to measuring clients
  tick-to-trade  FIX 35=X market data in, 35=D order out: latency and the algo's CPU per
             tick; tickwire's FIX engine vs a raw-socket floor vs QuickFIX, side by side
Every command prints a table; --json FILE writes full results, and --plot FILE.svg a
figure (all but mcast-fanout).

Examples:
  tickwire bench pingpong                               # latency vs size, 3 transports
  tickwire bench fanout --duration 30s --json fan.json  # fan-out, results as JSON
  tickwire bench guaranteed --rate 135k --sync fsync      # guaranteed, fsync before ACK
  tickwire bench tick-to-trade --compare builtin,raw    # FIX engine vs raw floor";

#[derive(Args)]
#[command(after_help = BENCH_HELP)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Half round-trip latency versus message size (family B).
    Pingpong(pingpong::PingpongArgs),
    /// Router fan-out under bursty, mixed-size, open-loop load (family A).
    Fanout(fanout::FanoutArgs),
    /// Guaranteed messaging: publish->ACK and publish->delivery latency, lossless check (family E).
    Guaranteed(guaranteed::GuaranteedArgs),
    /// Rate sweep: achieved rate and latency per target rate (family B).
    Stream(stream::StreamArgs),
    /// Multicast fan-out to N receiver processes: latency, sender CPU per message (family B).
    McastFanout(tickwire_bench::mcast_fanout::McastFanoutArgs),
    /// Market-data measuring clients: per-hop latency of feed-handler updates (family C).
    MdLatency(crate::md_bench_cmd::MdLatencyArgs),
    /// The market-data replay test in one command: generate, replay 1x and 4x (family C).
    MdReplay(crate::md_bench_cmd::MdReplayArgs),
    /// Tick-to-trade through a FIX engine: 35=X in, 35=D out, CPU per tick (family D).
    TickToTrade(tickwire_bench::tick_to_trade::TickToTradeArgs),
    /// The algo under test of tick-to-trade, started by it (internal).
    #[command(hide = true)]
    TickToTradeAlgo(tickwire_bench::tick_to_trade::AlgoArgs),
    /// The raw fan-out floor's relay, started by `bench fanout --target raw` (internal).
    #[command(hide = true)]
    FanoutRelay(fanout::relay::RelayArgs),
}

pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    let me = std::env::current_exe().context("locating the tickwire binary")?;
    match a.cmd {
        BenchCmd::Pingpong(a) => with_console(|c| pingpong::run(&a, &me, c)),
        BenchCmd::Fanout(a) => with_console(|c| fanout::run(&a, &me, c)),
        BenchCmd::Guaranteed(a) => with_console(|c| guaranteed::run(&a, &me, c)),
        BenchCmd::Stream(a) => with_console(|c| stream::run(&a, &me, c)),
        BenchCmd::McastFanout(a) => with_console(|c| tickwire_bench::mcast_fanout::run(&a, &me, c)),
        BenchCmd::MdLatency(a) => crate::md_bench_cmd::run_latency(a),
        BenchCmd::MdReplay(a) => crate::md_bench_cmd::run_replay(a, &me),
        BenchCmd::TickToTrade(a) => {
            with_console(|c| tickwire_bench::tick_to_trade::run(&a, &me, c))
        }
        BenchCmd::TickToTradeAlgo(a) => {
            tickwire_bench::tick_to_trade::run_algo(&a, &mut std::io::stdout().lock())
        }
        BenchCmd::FanoutRelay(a) => {
            fanout::relay::run(&a, &mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Runs `f` with a bench console: the report on stdout, progress lines on stderr.
pub(crate) fn with_console<R>(f: impl FnOnce(&mut Console<'_>) -> R) -> R {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let r = f(&mut Console::new(&mut out, progress_line));
    let _ = out.flush();
    r
}

/// The progress sink of the bench commands: one line on stderr.
pub(crate) fn progress_line(line: &str) {
    eprintln!("{line}");
}
