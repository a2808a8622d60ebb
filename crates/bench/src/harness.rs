//! What every bench driver needs around the measurement: a router child process, CPU
//! pinning, a Ctrl-C flag, a once-per-second progress line (the last three from
//! `tickwire-rt`, re-exported here).
//!
//! Typical driver shape:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use tickwire_bench::harness::{self, Progress, RouterChild, StopFlag};
//! use tickwire_rt::{pacing::wait_until, MonoNanos};
//! let router = RouterChild::start(std::path::Path::new("tickwire"), "spin", Some(0), &[])?;
//! let stop = StopFlag::install();
//! harness::pin_current_thread(1);
//! let mut progress = Progress::new(|line| tracing::info!("{line}")); // the caller's sink
//! let start = MonoNanos::now();
//! for i in 0..1000u64 {
//!     if stop.is_set() {
//!         break; // still report what was measured
//!     }
//!     wait_until(start.add_nanos(i * 10_000));
//!     // ... send to router.addr ...
//!     progress.tick(|| format!("sent {i}"));
//! }
//! drop(router); // SIGTERM, then kill
//! # Ok(())
//! # }
//! ```

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
pub use tickwire_rt::pin::pin_current_thread;
pub use tickwire_rt::progress::Progress;

pub use tickwire_rt::stop::StopFlag;
use tickwire_rt::stop::{register_child, terminate};
pub use tickwire_rt::IdleStrategy;

/// Spawns a thread named `name` that first pins itself to `cpu` (when given), then
/// runs `f`: the echo, receiver and feed-handler threads of the benches.
pub fn spawn_pinned<T: Send + 'static>(
    name: &str,
    cpu: Option<usize>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                pin_current_thread(cpu);
            }
            f()
        })
}

/// What the line a child prints on stdout once it listens has before the address
/// (`tickwire router listening on ADDR`, `tickwire fanout-relay listening on ADDR`).
const BANNER_TAIL: &str = " listening on ";
/// How long [`RouterChild::start`] waits for the banner.
const BANNER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`RouterChild`]'s drop waits after SIGTERM (the router flushes for up to
/// two seconds) before it kills.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// A `tickwire router` child process on a free loopback port; killed (SIGTERM, then
/// kill) on drop.
///
/// When [`StopFlag::install`] ran before [`RouterChild::start`], the child runs in its
/// own process group, so a Ctrl-C in the terminal reaches only the bench (which stops,
/// reports, and drops this; a second Ctrl-C terminates the router and exits). Without a
/// [`StopFlag`], the child stays in the bench's group and Ctrl-C stops both, so no
/// router outlives an interrupted bench.
#[derive(Debug)]
pub struct RouterChild {
    /// Where the router listens.
    pub addr: SocketAddr,
    child: Child,
    /// The command line, for error messages and reports.
    command: String,
}

/// A shared-memory name for a router this process starts: unique per process and
/// purpose, so concurrent runs never meet.
pub fn shm_name(purpose: &str) -> String {
    format!("bench-{purpose}-{}", std::process::id())
}

/// The router a tickwire transport of a bench talks to: the external one at
/// `external` (TCP only), or a child started with `idle` on the far CPU of `pin` (and,
/// for `shm`, `--shm NAME`). Returns the address clients connect to (`HOST:PORT` or
/// `shm:NAME`), the child to keep alive for the measurement, and the description the
/// report shows.
pub fn bench_router(
    tickwire: &Path,
    idle: IdleStrategy,
    pin: Option<Pinning>,
    external: Option<SocketAddr>,
    shm: bool,
) -> anyhow::Result<(String, Option<RouterChild>, String)> {
    if let (Some(a), false) = (external, shm) {
        return Ok((a.to_string(), None, format!("external router at {a}")));
    }
    let (idle, far) = (idle.name(), pin.map(|p| p.far));
    let name = shm.then(|| shm_name("bench"));
    let extra: Vec<&str> = match &name {
        Some(n) => vec!["--shm", n],
        None => Vec::new(),
    };
    let c = RouterChild::start(tickwire, idle, far, &extra)?;
    let addr = match &name {
        Some(n) => format!("{}{n}", tickwire_shm::ADDR_PREFIX),
        None => c.addr.to_string(),
    };
    let desc = c.command().to_owned();
    Ok((addr, Some(c), desc))
}

impl RouterChild {
    /// Starts `<tickwire> router --listen 127.0.0.1:0 --idle <idle> <extra...>` (stdout
    /// piped: the first line is `tickwire router listening on ADDR`; stderr inherited;
    /// TICKWIRE_LOG=warn), optionally under `taskset -c <cpu>` when `cpu` is Some (if
    /// taskset is missing, warns and starts unpinned). Waits for the banner (10 s
    /// timeout → error).
    pub fn start(
        tickwire: &Path,
        idle: &str,
        cpu: Option<usize>,
        extra: &[&str],
    ) -> anyhow::Result<RouterChild> {
        RouterChild::start_as(tickwire, &["router"], idle, cpu, extra)
    }

    /// [`RouterChild::start`] for another subcommand that takes the router's
    /// `--listen` and `--idle` and prints a `... listening on ADDR` banner first (the
    /// raw fan-out relay, `bench fanout-relay`), so it runs exactly as the router does.
    pub fn start_as(
        tickwire: &Path,
        subcommand: &[&str],
        idle: &str,
        cpu: Option<usize>,
        extra: &[&str],
    ) -> anyhow::Result<RouterChild> {
        let mut args: Vec<String> = subcommand.iter().map(|s| s.to_string()).collect();
        args.extend([
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--idle".into(),
            idle.into(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = pinned_command(tickwire, cpu, "the router");
        cmd.args(&args)
            .env("TICKWIRE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if StopFlag::is_installed() {
            cmd.process_group(0);
        }
        let command = format!("{:?}", cmd).replace('"', "");
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the router: {command}"))?;
        register_child(child.id(), true);
        let stdout = child.stdout.take();
        // From here on, dropping `router` terminates the child on every error path.
        let mut router = RouterChild {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child,
            command,
        };
        let stdout = stdout.context("the router's stdout was not piped")?;

        let line = wait_for_line(stdout, "router-stdout", BANNER_TIMEOUT, |_| true)?.or_error(
            &mut router.child,
            &router.command,
            "banner",
            BANNER_TIMEOUT,
            "it listened",
        )?;
        let addr = line
            .trim()
            .split_once(BANNER_TAIL)
            .map(|(_, addr)| addr)
            .with_context(|| format!("unexpected first line from the router: {line:?}"))?;
        router.addr = addr
            .parse()
            .with_context(|| format!("parsing the router's address {addr:?}"))?;
        Ok(router)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The command line that started the router (for reports).
    pub fn command(&self) -> &str {
        &self.command
    }
}

impl Drop for RouterChild {
    fn drop(&mut self) {
        register_child(self.child.id(), false);
        stop_child(&mut self.child);
    }
}

/// `program` as a command, under `taskset -c <cpu>` when `cpu` is Some (warning and
/// running unpinned when taskset is missing). `taskset` execs the program, so the
/// child's pid is the program's.
pub fn pinned_command(program: &Path, cpu: Option<usize>, what: &str) -> Command {
    match cpu {
        Some(cpu) if taskset_available() => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(program);
            c
        }
        Some(cpu) => {
            tracing::warn!("taskset not found; {what} runs unpinned (wanted CPU {cpu})");
            Command::new(program)
        }
        None => Command::new(program),
    }
}

/// What [`wait_for_line`] saw.
#[derive(Debug)]
pub enum ReadyLine {
    /// The first line `is_ready` accepted.
    Line(String),
    /// None within the timeout.
    TimedOut,
    /// The output ended (the child exited) first.
    Closed,
}

impl ReadyLine {
    /// The line; otherwise an error naming `command`: it printed no `line` (e.g.
    /// "banner") within `timeout`, or it exited (`child` is reaped for its status)
    /// before `ready` (e.g. "it listened").
    pub fn or_error(
        self,
        child: &mut Child,
        command: &str,
        line: &str,
        timeout: Duration,
        ready: &str,
    ) -> anyhow::Result<String> {
        match self {
            ReadyLine::Line(l) => Ok(l),
            ReadyLine::TimedOut => bail!("{command} printed no {line} within {timeout:?}"),
            ReadyLine::Closed => {
                let status = child.wait().ok();
                bail!(
                    "{command} exited before {ready} (status {}); see its stderr above",
                    status.map_or("unknown".into(), |s| s.to_string())
                )
            }
        }
    }
}

/// Reads a child's stdout on a thread named `name` until a line satisfies `is_ready`,
/// waiting at most `timeout` for it; the thread then drains the rest, so the child
/// never blocks on a full pipe.
pub fn wait_for_line(
    stdout: ChildStdout,
    name: &str,
    timeout: Duration,
    is_ready: impl Fn(&str) -> bool + Send + 'static,
) -> anyhow::Result<ReadyLine> {
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut ready = Some(tx);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if ready.is_some() && is_ready(&line) {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(line);
                    }
                }
            }
        })
        .with_context(|| format!("spawning the {name} thread"))?;
    Ok(match rx.recv_timeout(timeout) {
        Ok(line) => ReadyLine::Line(line),
        Err(mpsc::RecvTimeoutError::Timeout) => ReadyLine::TimedOut,
        Err(mpsc::RecvTimeoutError::Disconnected) => ReadyLine::Closed,
    })
}

/// Stops a child: SIGTERM, up to 3 s to exit, then SIGKILL; reaps it.
pub fn stop_child(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if terminate(child.id()) {
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break,
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn taskset_available() -> bool {
    Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The idle strategies of the bench's own ends (ping-pong, stream, tick-to-trade),
/// with what each means there.
pub const BENCH_IDLE: [(IdleStrategy, &str); 2] = [
    (IdleStrategy::Spin, "Busy-poll non-blocking sockets"),
    (
        IdleStrategy::Block,
        "Sleep in the kernel until data arrives",
    ),
];

/// A clap parser for an `--idle`-style option accepting only the strategies of
/// `allowed`, each listed in `--help` with its meaning for the command.
pub fn idle_parser(
    allowed: &'static [(IdleStrategy, &'static str)],
) -> impl clap::builder::TypedValueParser<Value = IdleStrategy> {
    use clap::builder::{PossibleValue, TypedValueParser};
    clap::builder::PossibleValuesParser::new(
        allowed
            .iter()
            .map(|(i, help)| PossibleValue::new(i.name()).help(*help)),
    )
    .try_map(|s| s.parse::<IdleStrategy>())
}

/// `--pin NEAR,FAR` of every bench command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Pinning {
    /// The measuring threads' CPU.
    pub near: usize,
    /// The CPU of the far end: echo threads, receivers, the router.
    pub far: usize,
}

/// Parses `NEAR,FAR` (two CPU numbers).
pub fn parse_pin(s: &str) -> Result<Pinning, String> {
    let mut it = s.split(',').map(|p| p.trim().parse::<usize>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(near)), Some(Ok(far)), None) => Ok(Pinning { near, far }),
        _ => Err(format!(
            "{s:?}: expected two CPU numbers NEAR,FAR, e.g. 0,1"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uses the workspace's debug `tickwire` binary when it has been built (the bench
    /// crate cannot depend on the binary crate); otherwise says so and skips.
    // A skip is loud: it says so on the test's stderr.
    #[allow(clippy::print_stderr)]
    #[test]
    fn starts_a_real_router_pinned_and_terminates_it_on_drop() {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        let bin = target.join("debug/tickwire");
        if !bin.exists() {
            let why = format!(
                "{} is not built (run `cargo test --workspace`)",
                bin.display()
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("under CI a missing peer is a failure: {why}");
            }
            eprintln!(
                "\n{0}\nSKIPPED starts_a_real_router_pinned_and_terminates_it_on_drop: {why}\n{0}\n",
                "=".repeat(78)
            );
            return;
        }
        let router = RouterChild::start(&bin, "block", Some(0), &[]).expect("router starts");
        assert!(router.addr.ip().is_loopback());
        assert_ne!(router.addr.port(), 0);
        std::net::TcpStream::connect(router.addr).expect("router accepts");
        let pid = router.pid();
        drop(router);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "router {pid} still running"
        );
    }

    #[test]
    fn a_missing_binary_is_an_error() {
        let e =
            RouterChild::start(Path::new("/nonexistent/tickwire"), "block", None, &[]).unwrap_err();
        assert!(format!("{e:#}").contains("starting the router"), "{e:#}");
    }
}
