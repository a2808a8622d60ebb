//! `tickwire bench tick-to-trade`: docs/benchmarking.md family D. A venue simulator sends
//! FIX `35=X` market data at an open-loop schedule to an algo, which answers each with
//! a `35=D` order on a second session; latency is from the X's intended send time to
//! the D's arrival, and the algo's CPU time per X→D is read from `/proc`.
//!
//! - [`plan`]: the cycles (burst, sustained, extended), scaling, intended send times. Pure.
//! - [`protocol`]: the X and D messages byte for byte, the raw responder's order. Pure.
//! - [`venue`]: the simulator (two FIX sessions on tickwire-fix's session core, one
//!   busy-polling thread that never waits for the algo).
//! - [`algo`]: tickwire's algos under test (`builtin` on the FIX engine, `raw` sockets),
//!   run as a child process through the hidden `tickwire bench tick-to-trade-algo`.
//! - [`target`]: child processes (ours and QuickFIX's `qf_peer`) and the CPU probe.
//!
//! `--compare builtin,raw,quickfix` measures several algos one after the other with the
//! same simulator and schedule, and prints their ratios.

pub mod algo;
pub mod plan;
pub mod protocol;
pub mod target;
pub mod venue;

use std::fmt::Write as _;
use std::io::{ErrorKind, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::console::Console;
use crate::harness::{idle_parser, IdleStrategy, BENCH_IDLE};
use crate::harness::{parse_pin, Pinning, StopFlag};
use crate::report::OutputArgs;
use crate::report::{self, Machine, Series};
use crate::stats::{invalid_reason, Counters, Summary};
use algo::{StoreKind, SyncKind};
use plan::{parse_duration, parse_scale, parse_whole_rate, Cycle, Scaling, Timeline};
use target::{AlgoProcess, CpuProbe};
use tickwire_rt::paths;
use tickwire_rt::MonoNanos;
use venue::{TimePoint, VenueOptions, VenueRun};

pub use algo::{run_algo, AlgoArgs};

const ABOUT: &str = "\
Tick-to-trade through a FIX engine (docs/benchmarking.md family D).

A venue simulator (in this process) initiates two FIX.4.4 sessions to the algo under
test: market data VENUE_MD -> ALGO_MD and orders VENUE_OE -> ALGO_OE. It sends 35=X
(268=1|279=0|269=0/1|55|270|271|278=CORRID) at an open-loop schedule; the algo answers
each X with a 35=D (11=CORRID|38|40=2|44|54|55|59=0|60) on the order session.
Latency = D receive time - the X's INTENDED send time (a late simulator counts; its
lateness is reported apart). Each X is shifted within its 1/rate slot by a slow triangle
wave (spacing +-0.1%), so that the kernel's timer tick, which splits CPU time into user
and system, samples every phase of the X->D cycle. The algo's CPU time per X->D comes
from /proc/<pid>/stat (utime+stime) sampled at every step boundary.";

const AFTER: &str = "\
Algos (--algo, or several with --compare builtin,raw,quickfix):
  builtin   tickwire's FIX engine with a tick-to-trade application (child process):
            full sessions, FIX44.xml validation when the dictionaries are found,
            durable file store by default (--store memory to compare)
  raw       raw-socket responder, no FIX engine: canned Logons, frames the X, copies 278
            into a pre-encoded D (34/52/10 patched): the floor, in the same run
  quickfix  the QuickFIX/C++ reference algo (target/quickfix/bin/qf_peer --app algo,
            tools/quickfix/algo-acceptor.cfg; build it with scripts/install-quickfix.sh)
  --algo-addr HOST:PORT  any external acceptor of the two sessions (--algo-pid PID for
            its CPU time)

Cycles (rates are never scaled; durations may be, and the scaling is printed):
  burst      50k msg/s for 5 min
  sustained  10k -> 100k msg/s in 10k steps, 4 min each
  extended   10k -> 40k in 10k steps of 4 min, then 50k held for 4 h
  --rates 1k,5k   your own steps (4 min each unless scaled)
A warm-up (--warmup, at the first step's rate) precedes the steps and is excluded.

Each algo may carry its own idle strategy and store: builtin:block, builtin:spin:memory,
raw:block, quickfix:memory (the name as written labels its results). CPU per tick is
comparable between algos that block in the kernel when idle (a spinning algo burns its
core whatever the rate); latency against the raw floor, with both spinning.

Examples:
  tickwire bench tick-to-trade --compare builtin,raw,quickfix --duration-scale 0.1 --pin 0,1
  tickwire bench tick-to-trade --compare builtin:block,quickfix,builtin:spin,raw:spin --pin 0,1
  tickwire bench tick-to-trade --cycle sustained --step-duration 20s --algo builtin
  tickwire bench tick-to-trade --algo-addr 127.0.0.1:9880 --algo-pid 4242 --json t2t.json

Exit status: 0 when every algo asked for was measured, 1 when any could not be, 130
when stopped by Ctrl-C or SIGTERM (the partial results are printed). What an
algo needs to start (QuickFIX's qf_peer, its settings, the dictionaries) is checked for
every algo before the first is measured: a missing one stops the run at once. An algo
that fails while running is reported as such, with the others' results.

More: docs/bench-tick-to-trade.md.";

/// `tickwire bench tick-to-trade`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    long_about = ABOUT,
    after_help = AFTER,
    mut_arg("plot", |a| a.help(
        "Draw latency percentiles per step (or over time, for one step) as an SVG"
    )),
)]
pub struct TickToTradeArgs {
    /// The algo under test: builtin, raw or quickfix, optionally with `:spin`/`:block`
    /// (idle strategy) and `:file`/`:memory` (store), e.g. `builtin:block:memory`.
    #[arg(long, value_parser = parse_choice, default_value = "builtin", value_name = "ALGO")]
    pub algo: AlgoChoice,

    /// Measure several algos one after the other, same simulator and schedule, and
    /// print their ratios (e.g. builtin,raw,quickfix or builtin:spin,builtin:block,raw).
    /// Overrides --algo.
    #[arg(long, value_parser = parse_choice, value_delimiter = ',', value_name = "ALGOS")]
    pub compare: Vec<AlgoChoice>,

    /// An external algo already accepting both sessions at HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "compare")]
    pub algo_addr: Option<String>,

    /// The external algo's process id, for its CPU time per tick.
    #[arg(long, value_name = "PID", requires = "algo_addr")]
    pub algo_pid: Option<u32>,

    /// The published cycle to run.
    #[arg(long, value_enum, default_value_t = Cycle::Burst)]
    pub cycle: Cycle,

    /// Your own steps instead of a cycle: rates in msg/s (k, M suffixes), each for
    /// 4 minutes unless scaled.
    #[arg(long, value_delimiter = ',', value_parser = parse_whole_rate, value_name = "RATES")]
    pub rates: Vec<u64>,

    /// Multiply every published duration by F (0.05: a 5-minute burst runs 15 s).
    #[arg(long, value_parser = parse_scale, value_name = "F", conflicts_with = "step_duration")]
    pub duration_scale: Option<f64>,

    /// Every step (and the extended hold) lasts this long instead (e.g. 20s, 1m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub step_duration: Option<f64>,

    /// Warm-up before the first step, at its rate, excluded from every figure.
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "DURATION")]
    pub warmup: f64,

    /// After the last X, wait at most this long for the orders still missing.
    #[arg(long, value_parser = parse_duration, default_value = "2s", value_name = "DURATION")]
    pub drain: f64,

    /// builtin: message store (the bar is measured with the durable file store).
    #[arg(long, value_enum, default_value_t = StoreKind::File)]
    pub store: StoreKind,

    /// builtin: file store sync policy (os: written each loop turn, no fdatasync, like
    /// QuickFIX's FileStore; every: fdatasync every turn that stored something).
    #[arg(long, value_enum, default_value_t = SyncKind::Os)]
    pub sync: SyncKind,

    /// builtin and raw: idle strategy (spin busy-polls; block sleeps in the kernel).
    #[arg(long, value_parser = idle_parser(&BENCH_IDLE), default_value_t = IdleStrategy::Spin)]
    pub idle: IdleStrategy,

    /// builtin: no dictionary validation (by default FIX44.xml from --spec-dir, as the
    /// QuickFIX reference algo validates).
    #[arg(long)]
    pub no_validate: bool,

    /// Directory of the QuickFIX XML dictionaries (default: $TICKWIRE_FIX_SPEC, else
    /// target/fix-spec under the current directory, ~/.local/share/tickwire/fix-spec,
    /// or beside the binary; fetched by scripts/fetch-fix-spec.sh).
    #[arg(long, value_name = "DIR")]
    pub spec_dir: Option<PathBuf>,

    /// The QuickFIX reference algo binary (default: $TICKWIRE_QUICKFIX, else
    /// target/quickfix/bin/qf_peer under the current directory, the data directory or
    /// beside the binary).
    #[arg(long, value_name = "FILE")]
    pub quickfix_bin: Option<PathBuf>,

    /// Its settings (default: $TICKWIRE_QUICKFIX_ALGO_CONFIG, else
    /// tools/quickfix/algo-acceptor.cfg under the current directory, the data directory
    /// or beside the binary).
    #[arg(long, value_name = "FILE")]
    pub quickfix_config: Option<PathBuf>,

    /// HeartBtInt of both sessions, whole seconds (a plain number is seconds; `1m`
    /// also works).
    #[arg(long, default_value = "30", value_name = "SECS", value_parser = tickwire_rt::units::parse_whole_secs)]
    pub heartbeat: u32,

    /// Pin the simulator to CPU NEAR and the algo to CPU FAR (e.g. 0,1; CPUs this
    /// process may run on).
    #[arg(long, value_name = "NEAR,FAR", value_parser = parse_pin)]
    pub pin: Option<Pinning>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// An algo the bench can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlgoKind {
    /// tickwire's FIX engine with the tick-to-trade application.
    Builtin,
    /// The raw-socket responder: no FIX engine (the floor).
    Raw,
    /// The QuickFIX/C++ reference algo (qf_peer).
    Quickfix,
}

/// An algo with optional per-algo settings (`builtin:block:memory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlgoChoice {
    /// Which algo.
    pub kind: AlgoKind,
    /// Its idle strategy (default: `--idle`).
    pub idle: Option<IdleStrategy>,
    /// Its store (default: `--store`).
    pub store: Option<StoreKind>,
    /// As given on the command line: the name in the report.
    pub name: String,
}

/// Parses `KIND[:OPTION]...`: kind builtin, raw or quickfix; options spin, block
/// (idle strategy), file, memory (store).
pub fn parse_choice(s: &str) -> Result<AlgoChoice, String> {
    let mut parts = s.trim().split(':');
    let kind = match parts.next().unwrap_or("") {
        "builtin" => AlgoKind::Builtin,
        "raw" => AlgoKind::Raw,
        "quickfix" => AlgoKind::Quickfix,
        other => {
            return Err(format!(
                "{other:?} is not an algo (builtin, raw or quickfix, optionally :spin/:block, :file/:memory)"
            ))
        }
    };
    let mut c = AlgoChoice {
        kind,
        idle: None,
        store: None,
        name: s.trim().to_string(),
    };
    for opt in parts {
        match opt {
            "spin" => c.idle = Some(IdleStrategy::Spin),
            "block" => c.idle = Some(IdleStrategy::Block),
            "file" => c.store = Some(StoreKind::File),
            "memory" => c.store = Some(StoreKind::Memory),
            other => {
                return Err(format!(
                "{other:?} in {s:?}: options are spin, block (idle strategy), file, memory (store)"
            ))
            }
        }
    }
    Ok(c)
}

/// One measured step of one algo.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    /// "30k", "burst 50k", ...
    pub label: String,
    /// Target X rate, msg/s.
    pub target_rate: u64,
    /// Duration as run and as published, s.
    pub duration_s: f64,
    pub published_s: f64,
    /// X sent per second of the step.
    pub sent_rate: f64,
    /// Orders received per second during the step (what INVALID compares).
    pub achieved_rate: f64,
    /// X intended send → D receive, µs.
    pub latency: Summary,
    pub p95_us: f64,
    pub p98_us: f64,
    /// Simulator lateness (actual send − intended), µs.
    pub lateness: Summary,
    pub sent: u64,
    pub received: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// The algo's CPU time during the step, ms, and per order received, µs.
    pub cpu_ms: Option<f64>,
    pub cpu_us_per_tick: Option<f64>,
    /// The user-space part of `cpu_us_per_tick` (the rest is the kernel's).
    pub cpu_user_us_per_tick: Option<f64>,
    /// Why the step is INVALID (rule 3), if it is.
    pub invalid: Option<String>,
}

/// Everything measured for one algo.
#[derive(Debug, Clone, Serialize)]
pub struct AlgoResult {
    /// As given (`builtin`, `raw:block`, ...), or `external`.
    pub name: String,
    /// Which algo (None: external).
    pub kind: Option<AlgoKind>,
    /// Its idle strategy (None: QuickFIX and external algos, which wait in the kernel).
    pub idle: Option<IdleStrategy>,
    /// What it is (engine, store, validation, idle strategy).
    pub description: String,
    /// The command that started it (None for an external algo).
    pub command: Option<String>,
    /// Measured steps (warm-up excluded).
    pub steps: Vec<StepResult>,
    /// X sent during the warm-up, excluded from every figure.
    pub warmup_excluded: u64,
    /// Per-second latency over the run.
    pub timeline: Vec<TimePoint>,
    /// All X of the run (warm-up included): sent, received, gaps (missing), duplicates.
    pub counters: Counters,
    /// Orders whose correlation id was never sent.
    pub unexpected: u64,
    /// Largest market-data backlog the algo left unread, bytes.
    pub backlog_max_bytes: usize,
    /// Resolution of the CPU probe, ms (None: no CPU figures).
    pub cpu_resolution_ms: Option<f64>,
    pub stopped: bool,
    pub ended_early: Option<String>,
    pub notes: Vec<String>,
    /// The algo could not be measured at all.
    pub error: Option<String>,
    /// CPU stalls of the machine itself during this algo's run, warm-up included
    /// (crate::host_watch).
    pub host: Option<crate::host_watch::StallSummary>,
}

/// Ratios of one algo to another for one step.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub step: String,
    pub algo: String,
    pub versus: String,
    pub p50: f64,
    pub p99: f64,
    pub cpu_per_tick: Option<f64>,
}

/// The JSON document.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub machine: Machine,
    pub cycle: String,
    pub scaling: String,
    pub warmup_s: f64,
    pub warmup_note: &'static str,
    pub drain_s: f64,
    pub heartbeat_s: u32,
    pub pin: Option<Pinning>,
    pub simulator_idle: &'static str,
    pub plan: Timeline,
    pub algos: Vec<AlgoResult>,
    pub ratios: Vec<Ratio>,
    /// Stopped by Ctrl-C or SIGTERM: the figures are partial, and algos asked for may
    /// be missing.
    pub stopped: bool,
}

/// Runs the bench; `tickwire` is the binary that starts tickwire's own algos.
/// Fails (status 1) when any algo asked for could not be measured: a comparison with a
/// side missing (QuickFIX's peer not built, say) is not a result. A missing
/// prerequisite is an error before anything is measured; an algo that fails while
/// running is reported with what was measured (to `con`). Stopped by Ctrl-C or
/// SIGTERM: status 130, as every bench (new-user pass: it was 0 with an algo asked for
/// never run).
pub fn run(
    a: &TickToTradeArgs,
    tickwire: &Path,
    con: &mut Console<'_>,
) -> anyhow::Result<ExitCode> {
    let report = run_report(a, tickwire, con)?;
    if report.stopped {
        return Ok(report::exit_code(true));
    }
    let missing: Vec<&str> = report
        .algos
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| r.name.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    crate::outln!(
        con.out,
        "not measured: {} (see above); exit status 1",
        missing.join(", ")
    );
    Ok(ExitCode::FAILURE)
}

/// Runs the bench, writes the report to `con` (and writes `--json`/`--plot`), and
/// returns it.
pub fn run_report(
    a: &TickToTradeArgs,
    tickwire: &Path,
    con: &mut Console<'_>,
) -> anyhow::Result<Report> {
    let (cycle_name, steps) = if a.rates.is_empty() {
        (a.cycle.name().to_string(), a.cycle.published())
    } else {
        let steps: Vec<(String, u64, f64)> = a
            .rates
            .iter()
            .map(|&r| (format!("{r}/s"), r, 240.0))
            .collect();
        ("custom".to_string(), steps)
    };
    let scaling = match (a.duration_scale, a.step_duration) {
        (Some(f), _) if f != 1.0 => Scaling::Factor(f),
        (_, Some(s)) => Scaling::StepSeconds(s),
        _ => Scaling::None,
    };
    let tl = plan::build(&steps, scaling, a.warmup).map_err(anyhow::Error::msg)?;
    let choices: Vec<AlgoChoice> = if !a.compare.is_empty() {
        a.compare.clone()
    } else {
        vec![a.algo.clone()]
    };
    if a.algo_addr.is_none() {
        check_prerequisites(&choices, a)?;
    }

    let machine = Machine::detect();
    let (published, run_s) = tl.measured_secs();
    crate::outln!(
        con.out,
        "tick-to-trade (docs/benchmarking.md family D) — {}",
        machine.one_line()
    );
    // A custom list of rates has no published cycle to compare with: each of its steps
    // has the published step's length (new-user pass: "the published cycle: 240 s").
    let published_text = if a.rates.is_empty() {
        format!("the published cycle: {published:.0} s")
    } else {
        format!(
            "a published step: {:.0} s",
            published / steps.len().max(1) as f64
        )
    };
    crate::outln!(
        con.out,
        "cycle {cycle_name}: {} step(s), {run_s:.1} s measured per algo ({published_text})",
        tl.phases.iter().filter(|p| !p.warmup).count()
    );
    crate::outln!(con.out, "*** {} ***", tl.scaling.describe());
    crate::outln!(con.out,
        "warm-up {:.1} s at {}/s excluded from every figure; drain up to {:.1} s; HeartBtInt {} s; pinning {}",
        a.warmup,
        steps[0].1,
        a.drain,
        a.heartbeat,
        a.pin
            .map_or("none".to_string(), |p| format!("simulator CPU {}, algo CPU {}", p.near, p.far))
    );

    let stop = StopFlag::install();
    let mut results = Vec::new();
    if let Some(addr) = &a.algo_addr {
        let addr = resolve(addr)?;
        let probe = a.algo_pid.and_then(CpuProbe::new);
        if a.algo_pid.is_some() && probe.is_none() {
            tracing::warn!(
                "cannot read /proc/{}/stat: no CPU figures",
                a.algo_pid.unwrap_or(0)
            );
        }
        let description = format!("external acceptor at {addr}");
        results.push(measure(
            "external",
            description,
            None,
            addr,
            probe,
            a,
            &tl,
            &stop,
            con,
        ));
    } else {
        for choice in choices {
            if stop.is_set() {
                break;
            }
            let started = start_algo(&choice, a, tickwire);
            let r = match started {
                Ok((p, description)) => {
                    let probe = CpuProbe::new(p.pid());
                    let mut r = measure(
                        &choice.name,
                        description,
                        Some(p.command.clone()),
                        p.addr,
                        probe,
                        a,
                        &tl,
                        &stop,
                        con,
                    );
                    drop(p);
                    r.kind = Some(choice.kind);
                    r.idle = idle_of(&choice, a);
                    r
                }
                Err(e) => {
                    let mut r = failed(&choice.name, format!("{e:#}"));
                    r.kind = Some(choice.kind);
                    r.idle = idle_of(&choice, a);
                    r
                }
            };
            if let Some(e) = &r.error {
                tracing::error!("{}: {e}", r.name);
            }
            results.push(r);
        }
    }

    let ratios = ratios(&results);
    print_report(con.out, &results, &ratios, stop.is_set());
    let report = Report {
        bench: "tick-to-trade",
        machine,
        cycle: cycle_name,
        scaling: tl.scaling.describe(),
        warmup_s: a.warmup,
        warmup_note: "the warm-up is excluded from every figure",
        drain_s: a.drain,
        heartbeat_s: a.heartbeat,
        pin: a.pin,
        simulator_idle: "spin",
        plan: tl,
        algos: results,
        ratios,
        stopped: stop.is_set(),
    };
    a.output.write(
        con.out,
        &report,
        |path| plot(path, &report),
        report::Announce::Labelled,
    )?;
    Ok(report)
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))
}

/// The idle strategy an algo of ours runs with (None for QuickFIX: it blocks).
fn idle_of(choice: &AlgoChoice, a: &TickToTradeArgs) -> Option<IdleStrategy> {
    match choice.kind {
        AlgoKind::Builtin | AlgoKind::Raw => Some(choice.idle.unwrap_or(a.idle)),
        AlgoKind::Quickfix => None,
    }
}

fn failed(name: &str, error: String) -> AlgoResult {
    AlgoResult {
        name: name.into(),
        kind: None,
        idle: None,
        description: String::new(),
        command: None,
        steps: Vec::new(),
        warmup_excluded: 0,
        timeline: Vec::new(),
        counters: Counters::default(),
        unexpected: 0,
        backlog_max_bytes: 0,
        cpu_resolution_ms: None,
        stopped: false,
        ended_early: None,
        notes: Vec::new(),
        error: Some(error),
        host: None,
    }
}

/// The dictionaries' directory (`--spec-dir`, `$TICKWIRE_FIX_SPEC`, the checkout, the data
/// directory or beside the binary: `tickwire_rt::paths`); the error names every place.
fn spec_dir(a: &TickToTradeArgs) -> Result<PathBuf, paths::NotFound> {
    paths::find(
        &paths::FIX_SPEC,
        a.spec_dir.as_deref().map(|d| ("--spec-dir", d)),
    )
}

/// What the QuickFIX reference algo needs besides this binary.
struct QuickfixFiles {
    /// `qf_peer`.
    bin: PathBuf,
    /// Its settings, `algo-acceptor.cfg`.
    cfg: PathBuf,
    /// The dictionaries' directory, with FIX44.xml in it.
    spec: PathBuf,
}

/// Finds [`QuickfixFiles`] (flag, environment variable, checkout, data directory, beside
/// the binary: `tickwire_rt::paths`); the error names every place looked and how to
/// install what is missing.
fn quickfix_files(a: &TickToTradeArgs) -> anyhow::Result<QuickfixFiles> {
    let bin = paths::find(
        &paths::QUICKFIX_PEER,
        a.quickfix_bin.as_deref().map(|b| ("--quickfix-bin", b)),
    )?;
    let cfg = paths::find(
        &paths::QUICKFIX_ALGO_CONFIG,
        a.quickfix_config
            .as_deref()
            .map(|c| ("--quickfix-config", c)),
    )?;
    let spec = spec_dir(a)?;
    if !spec.join("FIX44.xml").exists() {
        bail!(
            "{} has no FIX44.xml: {}",
            spec.display(),
            paths::FIX_SPEC.hint
        );
    }
    Ok(QuickfixFiles { bin, cfg, spec })
}

/// Refuses the run, before anything is measured, when an algo asked for lacks what it
/// needs to start (QuickFIX's `qf_peer`, its settings, the dictionaries), found the way
/// [`start_algo`] finds them: a comparison with a side missing is not a result, and it
/// used to be reported only after the other algos had been measured (80 s and more).
fn check_prerequisites(choices: &[AlgoChoice], a: &TickToTradeArgs) -> anyhow::Result<()> {
    for choice in choices {
        match choice.kind {
            AlgoKind::Quickfix => {
                quickfix_files(a).with_context(|| {
                    format!(
                        "{} cannot be measured, so nothing was (checked before the first algo)",
                        choice.name
                    )
                })?;
            }
            // Our own algos are this binary; a missing dictionary only turns builtin's
            // validation off, and the description says so.
            AlgoKind::Builtin | AlgoKind::Raw => {}
        }
    }
    Ok(())
}

/// Starts one of the bench's own algos; returns it and its description.
fn start_algo(
    choice: &AlgoChoice,
    a: &TickToTradeArgs,
    tickwire: &Path,
) -> anyhow::Result<(AlgoProcess, String)> {
    let cpu = a.pin.map(|p| p.far);
    let idle = choice.idle.unwrap_or(a.idle).name();
    let store_kind = choice.store.unwrap_or(a.store);
    match choice.kind {
        AlgoKind::Raw => {
            let args: Vec<String> = [
                "bench",
                "tick-to-trade-algo",
                "--kind",
                "raw",
                "--idle",
                idle,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let p = AlgoProcess::start(tickwire, &args, cpu, None, true, None)?;
            let d = format!("raw-socket responder, no FIX engine, idle {idle}");
            Ok((p, d))
        }
        AlgoKind::Builtin => {
            let mut args: Vec<String> = [
                "bench",
                "tick-to-trade-algo",
                "--kind",
                "builtin",
                "--idle",
                idle,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut scratch = None;
            let store = match store_kind {
                StoreKind::File => {
                    let dir = target::scratch_dir("builtin-store")?;
                    args.extend([
                        "--store".into(),
                        "file".into(),
                        "--store-dir".into(),
                        dir.display().to_string(),
                        "--sync".into(),
                        match a.sync {
                            SyncKind::Os => "os".into(),
                            SyncKind::Every => "every".into(),
                        },
                    ]);
                    scratch = Some(dir);
                    match a.sync {
                        SyncKind::Os => "file store (sync os: written to the page cache, no fsync)",
                        SyncKind::Every => "durable file store (fdatasync every turn)",
                    }
                }
                StoreKind::Memory => {
                    args.extend(["--store".into(), "memory".into()]);
                    "memory store"
                }
            };
            let dict = if a.no_validate {
                None
            } else {
                spec_dir(a)
                    .ok()
                    .map(|d| d.join("FIX44.xml"))
                    .filter(|p| p.exists())
            };
            let validation = match &dict {
                Some(p) => {
                    args.extend(["--dictionary".into(), p.display().to_string()]);
                    "FIX44.xml validation".to_string()
                }
                None if a.no_validate => "no dictionary validation (--no-validate)".into(),
                None => {
                    "no dictionary validation (FIX44.xml not found: run scripts/fetch-fix-spec.sh \
                     or set TICKWIRE_FIX_SPEC)"
                        .into()
                }
            };
            let p = AlgoProcess::start(tickwire, &args, cpu, None, true, scratch)?;
            let d = format!("tickwire FIX engine, {store}, {validation}, idle {idle}");
            Ok((p, d))
        }
        AlgoKind::Quickfix => {
            let QuickfixFiles { bin, cfg, spec } = quickfix_files(a)?;
            let port = target::free_port()?;
            let dir = target::scratch_dir("quickfix")?;
            let store = match store_kind {
                StoreKind::File => "file",
                StoreKind::Memory => "memory",
            };
            let args: Vec<String> = vec![
                "--config".into(),
                cfg.display().to_string(),
                "--app".into(),
                "algo".into(),
                "--store".into(),
                store.into(),
                "--define".into(),
                format!("PORT={port}"),
                "--define".into(),
                format!("SPEC={}", spec.display()),
                "--define".into(),
                format!("DIR={}", dir.display()),
            ];
            let default_addr = SocketAddr::from(([127, 0, 0, 1], port));
            let p = AlgoProcess::start(&bin, &args, cpu, Some(default_addr), false, Some(dir))?;
            let d = format!(
                "QuickFIX/C++ reference algo (qf_peer), {store} store, FIX44.xml validation"
            );
            Ok((p, d))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn measure(
    name: &str,
    description: String,
    command: Option<String>,
    addr: SocketAddr,
    probe: Option<CpuProbe>,
    a: &TickToTradeArgs,
    tl: &Timeline,
    stop: &StopFlag,
    con: &mut Console<'_>,
) -> AlgoResult {
    crate::outln!(con.out, "\n== {name}: {description}");
    if let Some(c) = &command {
        crate::outln!(con.out, "   {c}");
    }
    let opts = VenueOptions {
        addr,
        heart_bt_int: a.heartbeat,
        drain: Duration::from_secs_f64(a.drain),
        logon_timeout: Duration::from_secs(10),
        label: name.into(),
        cpu: a.pin.map(|p| p.near),
        progress: con.progress,
    };
    let mut cpu = || probe.as_ref().and_then(|p| p.read());
    let (watch, from) = (crate::host_watch::HostWatch::start_all(), MonoNanos::now());
    let ran = venue::run(&opts, tl, stop, &mut cpu);
    let host = watch.finish().within(from, MonoNanos::now());
    match ran {
        Ok(run) => {
            let mut r = summarise(name, description, command, tl, &run);
            r.cpu_resolution_ms = probe.map(|p| p.resolution_ns() as f64 / 1e6);
            r.host = Some(host);
            r
        }
        Err(e) => {
            let mut r = failed(name, format!("{e:#}"));
            r.description = description;
            r.command = command;
            r
        }
    }
}

/// Turns the simulator's raw measurements into the reported figures.
fn summarise(
    name: &str,
    description: String,
    command: Option<String>,
    tl: &Timeline,
    run: &VenueRun,
) -> AlgoResult {
    let mut steps = Vec::new();
    let mut warmup_excluded = 0;
    for (k, (phase, m)) in tl.phases.iter().zip(&run.phases).enumerate() {
        if phase.warmup {
            warmup_excluded += m.sent;
            continue;
        }
        if m.sent == 0 {
            continue; // never reached (stopped before)
        }
        let window_ns = phase
            .duration_ns
            .min(run.sent_until_ns.saturating_sub(tl.start_ns[k]))
            .max(1);
        let secs = window_ns as f64 / 1e9;
        let achieved = m.in_window as f64 / secs;
        let h = &m.latency.hist;
        let q = |x: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(x) as f64 / 1000.0
            }
        };
        let mut invalid = invalid_reason(phase.rate as f64, achieved);
        if invalid.is_none() && m.missing() > 0 {
            invalid = Some(format!("{} orders missing", m.missing()));
        }
        steps.push(StepResult {
            label: phase.label.clone(),
            target_rate: phase.rate,
            duration_s: phase.duration_ns as f64 / 1e9,
            published_s: phase.published_ns as f64 / 1e9,
            sent_rate: m.sent as f64 / secs,
            achieved_rate: achieved,
            latency: m.latency.summary(),
            p95_us: q(0.95),
            p98_us: q(0.98),
            lateness: m.lateness.summary(),
            sent: m.sent,
            received: m.received,
            missing: m.missing(),
            duplicates: m.duplicates,
            out_of_order: m.out_of_order,
            cpu_ms: m.cpu.map(|c| c.total_ns() as f64 / 1e6),
            cpu_us_per_tick: m
                .cpu
                .filter(|_| m.in_window > 0)
                .map(|c| c.total_ns() as f64 / 1e3 / m.in_window as f64),
            cpu_user_us_per_tick: m
                .cpu
                .filter(|_| m.in_window > 0)
                .map(|c| c.user_ns as f64 / 1e3 / m.in_window as f64),
            invalid,
        });
    }
    AlgoResult {
        name: name.into(),
        kind: None,
        idle: None,
        description,
        command,
        steps,
        warmup_excluded,
        timeline: run.timeline.clone(),
        counters: run.counters,
        unexpected: run.unexpected,
        backlog_max_bytes: run.backlog_max,
        cpu_resolution_ms: None,
        stopped: run.stopped,
        ended_early: run.ended_early.clone(),
        notes: run.notes.clone(),
        error: None,
        host: None,
    }
}

/// Every algo against the raw floor (the first `raw` measured) and against the first
/// `builtin` measured.
/// Every algo against the raw floor and against tickwire's engine. The base of each
/// comparison waits the same way as the algo compared (spinning against spinning,
/// blocking against blocking; QuickFIX blocks) when the run has one.
fn ratios(results: &[AlgoResult]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for base_kind in [AlgoKind::Raw, AlgoKind::Builtin] {
        let bases: Vec<&AlgoResult> = results
            .iter()
            .filter(|r| r.kind == Some(base_kind) && r.error.is_none())
            .collect();
        let Some(&first) = bases.first() else {
            continue;
        };
        for r in results.iter().filter(|r| r.error.is_none()) {
            let idle = r.idle.unwrap_or(IdleStrategy::Block);
            let b = bases
                .iter()
                .copied()
                .find(|b| b.idle.unwrap_or(IdleStrategy::Block) == idle)
                .unwrap_or(first);
            // Raw against builtin would only repeat builtin against raw, inverted.
            if b.name == r.name
                || r.kind == Some(base_kind)
                || (base_kind == AlgoKind::Builtin && r.kind == Some(AlgoKind::Raw))
            {
                continue;
            }
            let base = b.name.as_str();
            for s in &r.steps {
                let Some(bs) = b.steps.iter().find(|x| x.label == s.label) else {
                    continue;
                };
                let div = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
                out.push(Ratio {
                    step: s.label.clone(),
                    algo: r.name.clone(),
                    versus: base.into(),
                    p50: div(s.latency.p50_us, bs.latency.p50_us),
                    p99: div(s.latency.p99_us, bs.latency.p99_us),
                    // Spinning algos use their whole core: no CPU cost to compare.
                    cpu_per_tick: match (s.cpu_us_per_tick, bs.cpu_us_per_tick) {
                        _ if r.idle == Some(IdleStrategy::Spin)
                            || b.idle == Some(IdleStrategy::Spin) =>
                        {
                            None
                        }
                        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                        _ => None,
                    },
                });
            }
        }
    }
    out
}

/// The terminal table of one algo.
pub fn algo_table(r: &AlgoResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} — {}", r.name, r.description);
    if let Some(e) = &r.error {
        let _ = writeln!(out, "  NOT MEASURED: {e}");
        return out;
    }
    let heads = [
        "target/s",
        "orders/s",
        "samples",
        "p50",
        "p95",
        "p98",
        "p99",
        "p99.9",
        "max",
        "mean",
        "stddev",
        "CPU/tick",
        "user/tick",
    ];
    let lw = r
        .steps
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = write!(out, "{:<lw$}", "step");
    for h in heads {
        let _ = write!(out, " {h:>9}");
    }
    let _ = writeln!(
        out,
        "  (latency µs; CPU µs per X→D, all and user space only: the rest is the kernel)"
    );
    for s in &r.steps {
        let l = &s.latency;
        let _ = write!(
            out,
            "{:<lw$} {:>9} {:>9.0} {:>9}",
            s.label, s.target_rate, s.achieved_rate, l.samples
        );
        for v in [
            l.p50_us,
            s.p95_us,
            s.p98_us,
            l.p99_us,
            l.p999_us,
            l.max_us,
            l.mean_us,
            l.stddev_us,
        ] {
            let _ = write!(out, " {v:>9.2}");
        }
        for c in [s.cpu_us_per_tick, s.cpu_user_us_per_tick] {
            // A spinning algo uses its whole core whatever it does: its CPU per tick is
            // 1 / rate, not a cost.
            let c = match c {
                _ if r.idle == Some(IdleStrategy::Spin) => "(spins)".to_string(),
                None => "-".to_string(),
                Some(c) => format!("{c:.2}"),
            };
            let _ = write!(out, " {c:>9}");
        }
        if let Some(why) = &s.invalid {
            let _ = write!(out, "  INVALID: {why}");
        }
        out.push('\n');
    }
    for s in &r.steps {
        let _ = writeln!(
            out,
            "  {}: sent {} received {} missing {} duplicates {} out-of-order {}; simulator lateness p50 {:.2} p99 {:.2} max {:.2} µs",
            s.label,
            s.sent,
            s.received,
            s.missing,
            s.duplicates,
            s.out_of_order,
            s.lateness.p50_us,
            s.lateness.p99_us,
            s.lateness.max_us
        );
    }
    let c = &r.counters;
    let _ = writeln!(
        out,
        "  whole run: X sent {} ({} of them warm-up, excluded from the latencies), D received {}, missing {}, duplicates {}, unexpected {}, largest backlog {} KiB{}",
        c.sent,
        r.warmup_excluded,
        c.received,
        c.sent.saturating_sub(c.received.saturating_sub(c.duplicates)),
        c.duplicates,
        r.unexpected,
        r.backlog_max_bytes >> 10,
        r.cpu_resolution_ms
            .map_or("; no CPU probe".to_string(), |ms| format!("; CPU probe resolution {ms} ms"))
    );
    if let Some(h) = &r.host {
        let _ = writeln!(out, "  {}", h.line("this algo's run, warm-up included"));
    }
    if let Some(e) = &r.ended_early {
        let _ = writeln!(out, "  ENDED EARLY: {e}");
    }
    if r.stopped {
        let by = tickwire_rt::stop::stopped_by();
        let _ = writeln!(out, "  STOPPED by {by}: partial results");
    }
    // Session notes (logon, logout, ...) matter when something went wrong; the JSON
    // has them all.
    let trouble = r.ended_early.is_some() || r.counters.gaps > 0 || r.unexpected > 0;
    for n in r.notes.iter().filter(|_| trouble).take(12) {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

/// A ratio with two decimals, or "<0.01x" where two decimals would show 0.00x (a
/// new-user pass read "p99 0.00x": 74 µs against a disturbed 50,692 µs).
fn ratio_text(r: f64) -> String {
    if r > 0.0 && r < 0.005 {
        "<0.01x".to_owned()
    } else {
        format!("{r:.2}x")
    }
}

fn print_report(
    out: &mut dyn std::io::Write,
    results: &[AlgoResult],
    ratios: &[Ratio],
    stopped: bool,
) {
    crate::outln!(out);
    if stopped {
        let by = tickwire_rt::stop::stopped_by();
        crate::outln!(out, "STOPPED by {by}: partial results below");
    }
    for r in results {
        crate::out!(out, "{}", algo_table(r));
        crate::outln!(out);
    }
    if !ratios.is_empty() {
        crate::outln!(out, "ratios (same simulator, same schedule, same run):");
        let invalid_step = |name: &str, step: &str| {
            results.iter().any(|r| {
                r.name == name
                    && r.steps
                        .iter()
                        .any(|s| s.label == step && s.invalid.is_some())
            })
        };
        let disturbed = |name: &str| {
            results
                .iter()
                .any(|r| r.name == name && r.host.as_ref().is_some_and(|h| h.disturbed()))
        };
        for x in ratios {
            let cpu = x
                .cpu_per_tick
                .map_or("- (a spinning algo uses its whole core)".to_string(), |c| {
                    format!("{c:.2}x")
                });
            crate::outln!(
                out,
                "  {:<12} {:>9} / {:<8} p50 {:>7}  p99 {:>7}  CPU per tick {}",
                x.step,
                x.algo,
                x.versus,
                ratio_text(x.p50),
                ratio_text(x.p99),
                cpu
            );
            let spoiled: Vec<&str> = [x.algo.as_str(), x.versus.as_str()]
                .into_iter()
                .filter(|n| disturbed(n))
                .collect();
            if let Some(line) = crate::host_watch::not_a_comparison(&spoiled) {
                crate::outln!(out, "    {line}");
            }
            // Rule 3: an INVALID step is never compared (bench-review pass: a ratio of
            // 2231.50x was printed from a saturated QuickFIX step without a word).
            let invalid: Vec<&str> = [x.algo.as_str(), x.versus.as_str()]
                .into_iter()
                .filter(|n| invalid_step(n, &x.step))
                .collect();
            if !invalid.is_empty() {
                crate::outln!(
                    out,
                    "    ^ not a comparison: {} was INVALID at {} (it did not keep up: the latency is its backlog)",
                    invalid.join(" and "),
                    x.step
                );
            }
        }
    }
}

fn plot(path: &Path, r: &Report) -> anyhow::Result<()> {
    let measured_steps = r.plan.phases.iter().filter(|p| !p.warmup).count();
    let mut series = Vec::new();
    if measured_steps > 1 {
        for a in r.algos.iter().filter(|a| a.error.is_none()) {
            let pts = |f: &dyn Fn(&StepResult) -> f64| -> Vec<(f64, f64)> {
                a.steps
                    .iter()
                    .map(|s| (s.target_rate as f64, f(s)))
                    .collect()
            };
            series.push(Series::new(
                format!("{} p50", a.name),
                pts(&|s| s.latency.p50_us),
            ));
            series.push(Series::new(
                format!("{} p99", a.name),
                pts(&|s| s.latency.p99_us),
            ));
        }
        report::line_chart_svg(
            path,
            &format!(
                "tick-to-trade {}: X→D latency per step ({})",
                r.cycle,
                r.plan.scaling.short()
            ),
            "target rate (msg/s)",
            "latency (µs)",
            &series,
            true,
            None,
        )
    } else {
        for a in r.algos.iter().filter(|a| a.error.is_none()) {
            let pts = |f: &dyn Fn(&TimePoint) -> f64| -> Vec<(f64, f64)> {
                a.timeline.iter().map(|t| (t.t_s, f(t))).collect()
            };
            series.push(Series::new(format!("{} p50", a.name), pts(&|t| t.p50_us)));
            series.push(Series::new(format!("{} p99", a.name), pts(&|t| t.p99_us)));
        }
        report::line_chart_svg(
            path,
            &format!(
                "tick-to-trade {}: X→D latency per second ({})",
                r.cycle,
                r.plan.scaling.short()
            ),
            "time (s)",
            "latency (µs)",
            &series,
            true,
            None,
        )
    }
}

/// Writes `buf[*pos..]` to the non-blocking `sock` until all is written or it would
/// block, advancing `pos`: `Ok(false)` when the peer is gone (a write took nothing).
/// For the simulator's and the raw responder's write buffers.
fn write_pending(sock: &mut TcpStream, buf: &[u8], pos: &mut usize) -> std::io::Result<bool> {
    while *pos < buf.len() {
        match sock.write(&buf[*pos..]) {
            Ok(0) => return Ok(false),
            Ok(n) => *pos += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Latency;

    #[test]
    fn a_ratio_too_small_for_two_decimals_is_not_shown_as_zero() {
        assert_eq!(ratio_text(74.0 / 50_692.0), "<0.01x");
        assert_eq!(ratio_text(0.005), "0.01x");
        assert_eq!(ratio_text(0.97), "0.97x");
        assert_eq!(ratio_text(0.0), "0.00x");
        assert_eq!(ratio_text(12.345), "12.35x");
    }

    fn step(label: &str, p50: f64, cpu: Option<f64>) -> StepResult {
        let mut l = Latency::new();
        l.record((p50 * 1000.0) as u64);
        StepResult {
            label: label.into(),
            target_rate: 1000,
            duration_s: 1.0,
            published_s: 240.0,
            sent_rate: 1000.0,
            achieved_rate: 1000.0,
            latency: l.summary(),
            p95_us: p50,
            p98_us: p50,
            lateness: Latency::new().summary(),
            sent: 1000,
            received: 1000,
            missing: 0,
            duplicates: 0,
            out_of_order: 0,
            cpu_ms: cpu,
            cpu_us_per_tick: cpu,
            cpu_user_us_per_tick: cpu,
            invalid: None,
        }
    }

    fn algo(name: &str, steps: Vec<StepResult>) -> AlgoResult {
        let mut r = failed(name, String::new());
        r.error = None;
        r.steps = steps;
        r.kind = parse_choice(name).ok().map(|c| c.kind);
        r
    }

    #[test]
    fn algo_choices_parse_with_their_options() {
        let c = parse_choice("builtin:block:memory").unwrap();
        assert_eq!(c.kind, AlgoKind::Builtin);
        assert_eq!(c.idle, Some(IdleStrategy::Block));
        assert_eq!(c.store, Some(StoreKind::Memory));
        assert_eq!(c.name, "builtin:block:memory");
        let r = parse_choice("raw").unwrap();
        assert_eq!((r.kind, r.idle, r.store), (AlgoKind::Raw, None, None));
        assert!(parse_choice("quickfix:spin").is_ok());
        assert!(parse_choice("artio").unwrap_err().contains("not an algo"));
        assert!(parse_choice("raw:fast")
            .unwrap_err()
            .contains("options are"));
    }

    #[test]
    fn a_ratio_against_a_disturbed_run_says_it_is_not_a_comparison() {
        let quiet = crate::host_watch::StallSummary::others(0.01);
        let busy = crate::host_watch::StallSummary::others(0.32);
        let report = |raw_host: &crate::host_watch::StallSummary| {
            let mut builtin = algo("builtin", vec![step("10k", 20.0, Some(2.0))]);
            builtin.host = Some(quiet.clone());
            let mut raw = algo("raw", vec![step("10k", 10.0, Some(1.0))]);
            raw.host = Some(raw_host.clone());
            let rs = vec![builtin, raw];
            let mut out = Vec::new();
            print_report(&mut out, &rs, &ratios(&rs), false);
            String::from_utf8(out).unwrap()
        };
        let text = report(&busy);
        assert!(
            text.contains("^ not a comparison: raw ran DISTURBED"),
            "{text}"
        );
        let text = report(&quiet);
        assert!(text.contains("builtin / raw"), "{text}");
        assert!(!text.contains("not a comparison"), "{text}");
    }

    /// Bench-review pass: a ratio from a saturated (INVALID) step was printed like any
    /// other.
    #[test]
    fn a_ratio_with_an_invalid_step_says_it_is_not_a_comparison() {
        let builtin = algo("builtin", vec![step("10k", 20.0, Some(2.0))]);
        let mut slow = step("10k", 15_000_000.0, Some(2.0));
        slow.invalid = Some("saturated: 2,637 of 10,000 orders/s".into());
        let raw = algo("raw", vec![step("10k", 10.0, Some(1.0))]);
        let qf = algo("quickfix", vec![slow]);
        let rs = vec![builtin, raw, qf];
        let mut out = Vec::new();
        print_report(&mut out, &rs, &ratios(&rs), false);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("^ not a comparison: quickfix was INVALID at 10k"),
            "{text}"
        );
        assert_eq!(text.matches("was INVALID").count(), 2, "{text}");
    }

    #[test]
    fn ratios_are_against_raw_and_builtin() {
        let rs = vec![
            algo("builtin", vec![step("50k", 20.0, Some(2.0))]),
            algo("raw", vec![step("50k", 10.0, Some(1.0))]),
            algo("quickfix", vec![step("50k", 100.0, Some(18.0))]),
            failed("external", "refused".into()),
        ];
        let r = ratios(&rs);
        let find = |a: &str, v: &str| r.iter().find(|x| x.algo == a && x.versus == v).unwrap();
        let b = find("builtin", "raw");
        assert!((b.p50 - 2.0).abs() < 0.01, "{}", b.p50);
        assert_eq!(b.cpu_per_tick, Some(2.0));
        let q = find("quickfix", "builtin");
        assert!((q.cpu_per_tick.unwrap() - 9.0).abs() < 1e-9);
        assert!(r
            .iter()
            .all(|x| x.algo != "external" && x.versus != "external"));
        assert!(
            !r.iter().any(|x| x.algo == "raw"),
            "raw against builtin repeats builtin against raw"
        );
        assert_eq!(r.len(), 3, "builtin/raw, quickfix/raw, quickfix/builtin");
    }

    #[test]
    fn ratios_pair_algos_with_the_base_that_waits_the_same_way() {
        let with = |name: &str, kind, idle, p50| {
            let mut r = algo(name, vec![step("50k", p50, Some(1.0))]);
            r.kind = Some(kind);
            r.idle = idle;
            r
        };
        let rs = vec![
            with(
                "builtin:block",
                AlgoKind::Builtin,
                Some(IdleStrategy::Block),
                30.0,
            ),
            with("quickfix", AlgoKind::Quickfix, None, 60.0),
            with("raw:block", AlgoKind::Raw, Some(IdleStrategy::Block), 20.0),
            with(
                "builtin:spin",
                AlgoKind::Builtin,
                Some(IdleStrategy::Spin),
                24.0,
            ),
            with("raw:spin", AlgoKind::Raw, Some(IdleStrategy::Spin), 16.0),
        ];
        let r = ratios(&rs);
        let versus = |a: &str, base_kind: &str| {
            r.iter()
                .find(|x| x.algo == a && x.versus.starts_with(base_kind))
                .map(|x| (x.versus.clone(), x.p50))
                .unwrap()
        };
        for (algo, base_kind, want_base, want_p50) in [
            ("builtin:spin", "raw", "raw:spin", 1.5),
            ("builtin:block", "raw", "raw:block", 1.5),
            // QuickFIX waits in the kernel: against the blocking floor and engine.
            ("quickfix", "raw", "raw:block", 3.0),
            ("quickfix", "builtin", "builtin:block", 2.0),
        ] {
            let (base, p50) = versus(algo, base_kind);
            assert_eq!(base, want_base, "{algo}");
            assert!((p50 - want_p50).abs() < 0.01, "{algo}: {p50}");
        }
        assert!(r
            .iter()
            .all(|x| x.algo.split(':').next() != x.versus.split(':').next()));
    }

    #[test]
    fn the_table_shows_every_step_invalid_steps_and_failures() {
        let mut s = step("30k", 12.5, Some(1.25));
        s.invalid = Some("saturated".into());
        let t = algo_table(&algo("builtin", vec![s, step("40k", 13.0, None)]));
        assert!(t.contains("30k") && t.contains("40k"), "{t}");
        assert!(t.contains("INVALID: saturated"), "{t}");
        assert!(t.contains("1.25"), "{t}");
        assert!(t.contains("p98") && t.contains("CPU/tick"), "{t}");
        let f = algo_table(&failed("quickfix", "not built".into()));
        assert!(f.contains("NOT MEASURED: not built"), "{f}");
    }
}
