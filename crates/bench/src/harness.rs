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

pub use crate::bench_tls::{BenchCerts, RouterAddr};
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
    /// Where its TLS listener listens, when it has one (`--tls-listen`).
    pub tls_addr: Option<SocketAddr>,
    child: Child,
    /// The command line, for error messages and reports.
    command: String,
}

/// A shared-memory name for a router this process starts: unique per process and
/// purpose, so concurrent runs never meet.
pub fn shm_name(purpose: &str) -> String {
    format!("bench-{purpose}-{}", std::process::id())
}

/// Which of the router's listeners a tickwire transport of a bench measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterPath {
    /// Plain TCP.
    Tcp,
    /// Shared memory (`--shm NAME`, clients at `shm:NAME`).
    Shm,
    /// TLS over TCP (`--tls-listen`, clients at `tls://HOST:PORT`), with a throw-away
    /// CA and certificate ([`BenchCerts`]).
    Tls,
}

/// The router a tickwire transport of a bench talks to, and what keeps it alive.
pub struct BenchRouter {
    /// Where clients connect, and with what TLS settings.
    pub addr: RouterAddr,
    /// The child to keep alive for the measurement (None: an external router).
    pub child: Option<RouterChild>,
    /// The description the report shows.
    pub desc: String,
    /// The TLS path's certificates, removed once the router is gone.
    _certs: Option<BenchCerts>,
}

/// `--router` of the benches: a running router's TCP address or shared-memory name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalRouter {
    /// `HOST:PORT` (a host name is resolved once, when the flag is parsed).
    Tcp(SocketAddr),
    /// `shm:NAME`: the name the router was started with (`--shm NAME`).
    Shm(String),
}

/// The TCP port of an external router, by which the host watch finds its process
/// (its CPU is the system under test's, not competition); none for `shm:NAME`.
pub fn external_router_ports(r: Option<&ExternalRouter>) -> Vec<u16> {
    match r {
        Some(ExternalRouter::Tcp(a)) => vec![a.port()],
        _ => Vec::new(),
    }
}

impl ExternalRouter {
    /// Whether the tickwire transport over `path` measures this router (otherwise the
    /// bench starts its own for that transport).
    pub fn serves(&self, path: RouterPath) -> bool {
        matches!(
            (self, path),
            (ExternalRouter::Tcp(_), RouterPath::Tcp) | (ExternalRouter::Shm(_), RouterPath::Shm)
        )
    }
}

impl std::fmt::Display for ExternalRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExternalRouter::Tcp(a) => write!(f, "{a}"),
            ExternalRouter::Shm(n) => write!(f, "{}{n}", tickwire_shm::ADDR_PREFIX),
        }
    }
}

/// Parses `--router`: `shm:NAME`, or `HOST:PORT` (resolved; the first address).
pub fn parse_external_router(s: &str) -> Result<ExternalRouter, String> {
    if let Some(name) = s.strip_prefix(tickwire_shm::ADDR_PREFIX) {
        if name.is_empty() {
            return Err(format!(
                "{s:?}: expected shm:NAME, the name the router was started with (--shm NAME)"
            ));
        }
        return Ok(ExternalRouter::Shm(name.to_owned()));
    }
    use std::net::ToSocketAddrs;
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .map(ExternalRouter::Tcp)
            .ok_or_else(|| format!("{s:?}: the name has no address")),
        Err(e) => Err(format!(
            "{s:?}: expected HOST:PORT (the router's TCP listener) or shm:NAME (its \
             shared-memory name): {e}"
        )),
    }
}

/// Fails when `--router` names a router that none of the selected tickwire transports
/// (`paths`) would measure: the flag would be ignored.
pub fn check_external_router(
    external: Option<&ExternalRouter>,
    paths: &[RouterPath],
) -> anyhow::Result<()> {
    let Some(r) = external else {
        return Ok(());
    };
    if paths.iter().any(|&p| r.serves(p)) {
        return Ok(());
    }
    let (kind, wants) = match r {
        ExternalRouter::Tcp(_) => ("a TCP address", "the tickwire transport"),
        ExternalRouter::Shm(_) => ("a shared-memory name", "the tickwire-shm transport"),
    };
    anyhow::bail!(
        "--router {r} is {kind}: it is measured by {wants}, which --transports does not \
         select (the other tickwire transports start their own router)"
    )
}

/// The router a tickwire transport of a bench talks to: the external one when it
/// serves `path` (a TCP address for the TCP path, a shared-memory name for the shm
/// path), or a child started with `idle` on the far CPU of `pin`, with the listener
/// `path` needs.
pub fn bench_router(
    tickwire: &Path,
    idle: IdleStrategy,
    pin: Option<Pinning>,
    external: Option<&ExternalRouter>,
    path: RouterPath,
) -> anyhow::Result<BenchRouter> {
    if let Some(r) = external.filter(|r| r.serves(path)) {
        return Ok(BenchRouter {
            addr: RouterAddr::plain(r.to_string()),
            child: None,
            desc: format!("external router at {r}"),
            _certs: None,
        });
    }
    let (idle, far) = (idle.name(), pin.map(|p| p.far));
    let name = (path == RouterPath::Shm).then(|| shm_name("router"));
    let certs = match path {
        RouterPath::Tls => Some(BenchCerts::generate()?),
        _ => None,
    };
    let mut extra: Vec<String> = Vec::new();
    if let Some(n) = &name {
        extra.extend(["--shm".into(), n.clone()]);
    }
    if let Some(c) = &certs {
        extra.extend([
            "--tls-listen".into(),
            "127.0.0.1:0".into(),
            "--tls-cert".into(),
            c.cert().display().to_string(),
            "--tls-key".into(),
            c.key().display().to_string(),
        ]);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let c = RouterChild::start(tickwire, idle, far, &extra)?;
    let addr = match (&name, &certs) {
        (Some(n), _) => RouterAddr::plain(format!("{}{n}", tickwire_shm::ADDR_PREFIX)),
        (None, Some(certs)) => {
            let tls = c.tls_addr.with_context(|| {
                format!("the router did not report a TLS listener: {}", c.command)
            })?;
            RouterAddr {
                addr: format!("{}{tls}", tickwire_client::TLS_SCHEME),
                tls: Some(certs.client_options()?),
            }
        }
        (None, None) => RouterAddr::plain(c.addr.to_string()),
    };
    let desc = c.command().to_owned();
    Ok(BenchRouter {
        addr,
        child: Some(c),
        desc,
        _certs: certs,
    })
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
        // As a user would type it (new-user pass: the `Debug` form carried the bench's
        // own `TICKWIRE_EXIT_WITH_PARENT=PID`, and the line pasted into a shell started
        // a router that exited at once, its "parent" long gone).
        let command = command_line(&cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the router: {command}"))?;
        register_child(child.id(), true);
        let stdout = child.stdout.take();
        // From here on, dropping `router` terminates the child on every error path.
        let mut router = RouterChild {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls_addr: None,
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
        (router.addr, router.tls_addr) = parse_banner(&line)?;
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

/// The addresses in a router's banner: `... listening on ADDR`, or with a TLS or
/// shared-memory listener `... listening on tls://TLS_ADDR, shm:NAME and ADDR` (the
/// last word is always the plaintext listener).
fn parse_banner(line: &str) -> anyhow::Result<(SocketAddr, Option<SocketAddr>)> {
    let bad = || format!("unexpected first line from the router: {line:?}");
    let (_, addrs) = line.trim().split_once(BANNER_TAIL).with_context(bad)?;
    // `[tls://A, ][shm:NAME and ]PLAIN`: the plaintext address last.
    let (tls, plain) = match addrs.rsplit_once(" and ") {
        Some((others, plain)) => {
            let mut tls = None;
            for other in others.split(", ") {
                match other.strip_prefix(tickwire_client::TLS_SCHEME) {
                    Some(a) => tls = Some(a),
                    None if other.starts_with(tickwire_shm::ADDR_PREFIX) => {}
                    None => anyhow::bail!(bad()),
                }
            }
            (tls, plain)
        }
        None => (None, addrs),
    };
    let parse = |a: &str| -> anyhow::Result<SocketAddr> {
        a.parse()
            .with_context(|| format!("parsing the router's address {a:?}"))
    };
    Ok((parse(plain)?, tls.map(parse).transpose()?))
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
///
/// The child ends with this process, also when this one is killed
/// ([`tickwire_rt::child`]: a `tickwire` child asks for SIGTERM on its parent's death).
pub fn pinned_command(program: &Path, cpu: Option<usize>, what: &str) -> Command {
    let mut c = match cpu {
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
    };
    tickwire_rt::child::mark(&mut c);
    c
}

/// `cmd` as a user would type it: the program and its arguments (quoted where they
/// hold a space or a quote), without the environment the bench sets for its own
/// bookkeeping (which `Command`'s `Debug` shows, e.g. `TICKWIRE_EXIT_WITH_PARENT`).
pub fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            if a.is_empty() || a.contains([' ', '\'', '"', '\t']) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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

/// Parses `NEAR,FAR` (two CPU numbers), each one a thread of this process can be
/// pinned to ([`tickwire_rt::pin::can_pin`]): a pin that cannot be done is a usage
/// error before anything is measured (it ran unpinned, with a warning, and reported
/// figures for a setup that never was).
pub fn parse_pin(s: &str) -> Result<Pinning, String> {
    let pin = parse_pin_numbers(s)?;
    match [pin.near, pin.far]
        .into_iter()
        .find(|&c| !tickwire_rt::pin::can_pin(c))
    {
        None => Ok(pin),
        Some(cpu) => {
            let runs_on = tickwire_rt::pin::usable_cpus()
                .map(|cpus| {
                    let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
                    format!(
                        " (no such CPU, or outside its cpuset; its threads run on CPUs {} \
                         now)",
                        list.join(",")
                    )
                })
                .unwrap_or_default();
            Err(format!(
                "{s:?}: CPU {cpu} is not available to this process{runs_on}"
            ))
        }
    }
}

/// The syntax of [`parse_pin`]: `NEAR,FAR`, two CPU numbers.
fn parse_pin_numbers(s: &str) -> Result<Pinning, String> {
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

    #[test]
    fn a_command_line_shows_the_program_and_its_arguments_but_not_the_environment() {
        let mut c = pinned_command(Path::new("/bin/tickwire"), None, "test");
        c.args(["bench", "x", "--dir", "/tmp/a b", "it's", ""])
            .env("TICKWIRE_LOG", "warn");
        assert_eq!(
            command_line(&c),
            "/bin/tickwire bench x --dir '/tmp/a b' 'it'\\''s' ''"
        );
    }

    #[test]
    fn pin_refuses_a_cpu_the_process_cannot_run_on() {
        assert_eq!(
            parse_pin_numbers(" 3 , 2 "),
            Ok(Pinning { near: 3, far: 2 })
        );
        let cpus = tickwire_rt::pin::usable_cpus().unwrap();
        let first = cpus[0];
        assert_eq!(
            parse_pin(&format!("{first},{first}")),
            Ok(Pinning {
                near: first,
                far: first
            })
        );
        let absent = rustix::thread::CpuSet::MAX_CPU;
        let e = parse_pin(&format!("{first},{absent}")).unwrap_err();
        assert!(
            e.contains(&format!("CPU {absent} is not available to this process")),
            "{e}"
        );
    }

    #[test]
    fn external_router_is_an_address_or_a_shared_memory_name() {
        assert_eq!(
            parse_external_router("127.0.0.1:7420"),
            Ok(ExternalRouter::Tcp("127.0.0.1:7420".parse().unwrap()))
        );
        assert!(matches!(
            parse_external_router("localhost:7420"),
            Ok(ExternalRouter::Tcp(a)) if a.port() == 7420 && a.ip().is_loopback()
        ));
        assert_eq!(
            parse_external_router("shm:main"),
            Ok(ExternalRouter::Shm("main".into()))
        );
        assert_eq!(
            parse_external_router("shm:main").unwrap().to_string(),
            "shm:main"
        );
        for bad in ["shm:", "7420", "localhost", ""] {
            assert!(parse_external_router(bad).is_err(), "{bad:?} was accepted");
        }
        let shm = ExternalRouter::Shm("main".into());
        assert!(shm.serves(RouterPath::Shm) && !shm.serves(RouterPath::Tcp));
        let tcp = parse_external_router("127.0.0.1:7420").unwrap();
        assert!(tcp.serves(RouterPath::Tcp) && !tcp.serves(RouterPath::Shm));
        assert!(!tcp.serves(RouterPath::Tls));
        let err = check_external_router(Some(&shm), &[RouterPath::Tcp])
            .unwrap_err()
            .to_string();
        assert!(err.contains("tickwire-shm"), "{err}");
        check_external_router(Some(&shm), &[RouterPath::Tcp, RouterPath::Shm]).unwrap();
        check_external_router(None, &[]).unwrap();
    }

    #[test]
    fn banner_with_and_without_a_tls_listener() {
        let (plain, tls) = parse_banner("tickwire router listening on 127.0.0.1:7000\n").unwrap();
        assert_eq!(plain, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(tls, None);
        let (plain, tls) =
            parse_banner("tickwire router listening on tls://127.0.0.1:7443 and 127.0.0.1:7000")
                .unwrap();
        assert_eq!(plain, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(tls, Some("127.0.0.1:7443".parse().unwrap()));
        // A shared-memory listener is named before the plaintext address too.
        let both = "tickwire router listening on tls://127.0.0.1:7443, shm:m and 127.0.0.1:7000";
        let (plain, tls) = parse_banner(both).unwrap();
        assert_eq!(plain, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(tls, Some("127.0.0.1:7443".parse().unwrap()));
        let (plain, tls) =
            parse_banner("tickwire router listening on shm:m and 127.0.0.1:7000").unwrap();
        assert_eq!(plain, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(tls, None);
        for bad in [
            "hello",
            "tickwire router listening on 127.0.0.1:7443 and 127.0.0.1:7000",
            "tickwire router listening on tls://nowhere and 127.0.0.1:7000",
        ] {
            assert!(parse_banner(bad).is_err(), "{bad:?} was accepted");
        }
    }

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

    /// New-user pass: the router line of `bench pingpong` / `bench stream` (and this
    /// error) carried `TICKWIRE_EXIT_WITH_PARENT=PID`; pasted, the router exited at once.
    #[test]
    fn the_router_command_is_printed_as_a_user_would_type_it() {
        let e =
            RouterChild::start(Path::new("/nonexistent/tickwire"), "spin", None, &[]).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains(
                "starting the router: /nonexistent/tickwire router --listen 127.0.0.1:0 --idle spin"
            ),
            "{e}"
        );
        assert!(!e.contains("TICKWIRE_"), "{e}");
    }
}
