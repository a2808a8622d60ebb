//! What every bench driver needs around the measurement: a router child process, CPU
//! pinning, a Ctrl-C flag, a once-per-second progress line and the clock.
//!
//! Typical driver shape:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use tickwire_bench::harness::{self, Progress, RouterChild, StopFlag};
//! let router = RouterChild::start(std::path::Path::new("tickwire"), "spin", Some(0), &[])?;
//! let stop = StopFlag::install();
//! harness::pin_current_thread(1);
//! let mut progress = Progress::new();
//! let start = harness::now_ns();
//! for i in 0..1000u64 {
//!     if stop.is_set() {
//!         break; // still report what was measured
//!     }
//!     harness::wait_until_ns(start + i * 10_000);
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The line the router prints on stdout once it listens, followed by the address.
const BANNER: &str = "tickwire router listening on ";
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
        let mut args: Vec<String> = vec![
            "router".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--idle".into(),
            idle.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = pinned_command(tickwire, cpu, "the router");
        cmd.args(&args)
            .env("TICKWIRE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if STOP.get().is_some() {
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

        let line = match wait_for_line(stdout, "router-stdout", BANNER_TIMEOUT, |_| true)? {
            ReadyLine::Line(line) => line,
            ReadyLine::TimedOut => bail!(
                "{} printed no banner within {BANNER_TIMEOUT:?}",
                router.command
            ),
            ReadyLine::Closed => {
                let status = router.child.wait().ok();
                bail!(
                    "{} exited before it listened (status {}); see its stderr above",
                    router.command,
                    status.map_or("unknown".into(), |s| s.to_string())
                )
            }
        };
        let addr = line
            .trim()
            .strip_prefix(BANNER)
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
            eprintln!("warning: taskset not found; {what} runs unpinned (wanted CPU {cpu})");
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

/// Pins the calling thread to `cpu` (sched_setaffinity); returns false (and warns once
/// per process) if it cannot.
pub fn pin_current_thread(cpu: usize) -> bool {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let mut set = rustix::thread::CpuSet::new();
    let result = if cpu < rustix::thread::CpuSet::MAX_CPU {
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).map_err(|e| e.to_string())
    } else {
        Err(format!("CPU {cpu} is out of range"))
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                eprintln!("warning: cannot pin a thread to CPU {cpu} ({e}); running unpinned");
            }
            false
        }
    }
}

/// A Ctrl-C (SIGINT/SIGTERM) flag. [`StopFlag::install`] starts, once per process, a
/// thread that receives the signals, and returns a handle to the one shared flag;
/// installing again returns the same flag.
///
/// The first signal sets the flag (the bench stops, reports what it measured, and drops
/// its [`RouterChild`]ren). A second one aborts: it terminates every live
/// [`RouterChild`] (SIGTERM) and exits with status 130.
#[derive(Clone, Debug)]
pub struct StopFlag(pub Arc<AtomicBool>);

/// The process-wide flag, once [`StopFlag::install`] ran.
static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

impl StopFlag {
    /// Installs the signal handling (first call only) and returns the flag. If that
    /// fails, warns and returns a flag that only [`StopFlag::set`] sets (Ctrl-C then
    /// kills the bench, and the router with it: see [`RouterChild`]).
    pub fn install() -> StopFlag {
        let flag = STOP.get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(false));
            if let Err(e) = watch_signals(Arc::clone(&flag)) {
                eprintln!("warning: cannot install the Ctrl-C handler ({e:#}); Ctrl-C will kill the bench");
            }
            flag
        });
        StopFlag(Arc::clone(flag))
    }

    /// A flag with no signal handling (tests, or an internal stop).
    pub fn unregistered() -> StopFlag {
        StopFlag(Arc::new(AtomicBool::new(false)))
    }

    /// True once Ctrl-C (or SIGTERM) arrived, or [`StopFlag::set`] was called.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the flag, as a signal would (e.g. to stop sibling threads after an error).
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Receives SIGINT/SIGTERM on a thread of its own (not in a signal handler, so it may
/// print, run `kill` and exit).
fn watch_signals(flag: Arc<AtomicBool>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("registering SIGINT/SIGTERM")?;
    std::thread::Builder::new()
        .name("stop-signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                if flag.swap(true, Ordering::Relaxed) {
                    eprintln!("aborting: stopping the router(s) and exiting");
                    for pid in live_children() {
                        terminate(pid);
                    }
                    std::process::exit(130);
                }
                eprintln!("stopping: reporting what was measured (Ctrl-C again to abort)");
            }
        })
        .context("spawning the stop-signals thread")?;
    Ok(())
}

/// Pids of the live [`RouterChild`]ren, for the abort path.
static CHILDREN: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn live_children() -> Vec<u32> {
    CHILDREN.lock().map(|c| c.clone()).unwrap_or_default()
}

fn register_child(pid: u32, live: bool) {
    if let Ok(mut c) = CHILDREN.lock() {
        if live {
            c.push(pid);
        } else {
            c.retain(|&p| p != pid);
        }
    }
}

/// Sends SIGTERM; true if it was delivered. `kill(1)` rather than a libc call: this
/// crate forbids unsafe and rustix's `process` feature is not enabled here.
fn terminate(pid: u32) -> bool {
    Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Prints a progress line to stderr at most once per second.
#[derive(Debug)]
pub struct Progress {
    last: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Progress {
    /// The first line comes one second after this.
    pub fn new() -> Progress {
        Progress {
            last: Instant::now(),
        }
    }

    /// Prints `line()` if a second has passed since the last line; `line` is only
    /// called then, so formatting costs nothing on the other calls (one clock read).
    pub fn tick(&mut self, line: impl FnOnce() -> String) {
        if let Some(l) = self.due(Instant::now(), line) {
            eprintln!("{l}");
        }
    }

    /// The line to print at `now`, if a second has passed since the last one (`line`
    /// is only called then). Split from [`Progress::tick`] so tests can pass the time.
    fn due(&mut self, now: Instant, line: impl FnOnce() -> String) -> Option<String> {
        if now.duration_since(self.last) >= Duration::from_secs(1) {
            self.last = now;
            Some(line())
        } else {
            None
        }
    }
}

/// Monotonic clock in ns (CLOCK_MONOTONIC; the same clock as `tickwire_client::now_nanos`,
/// so timestamps from the client library and from the bench compare directly).
#[inline]
pub fn now_ns() -> u64 {
    tickwire_client::now_nanos()
}

/// Below this much remaining time, [`wait_until_ns`] spins instead of sleeping (sleep
/// wake-ups are late by tens of µs, more on a loaded machine).
const SPIN_BELOW_NS: u64 = 200_000;

/// Busy-waits (sleeping while more than ~200 µs remain) until `now_ns() >= t`.
/// Returns at once when `t` is already past.
pub fn wait_until_ns(t: u64) {
    loop {
        let now = now_ns();
        if now >= t {
            return;
        }
        let remaining = t - now;
        if remaining > SPIN_BELOW_NS {
            std::thread::sleep(Duration::from_nanos(remaining - SPIN_BELOW_NS));
        } else {
            std::hint::spin_loop();
        }
    }
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

    #[test]
    fn wait_until_reaches_the_deadline() {
        let t = now_ns() + 1_000_000;
        wait_until_ns(t);
        assert!(now_ns() >= t);
        // A past deadline returns at once.
        wait_until_ns(0);
    }

    #[test]
    fn stop_flag_installs_twice_and_shares_one_flag() {
        let a = StopFlag::install();
        let b = StopFlag::install();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        let c = StopFlag::unregistered();
        assert!(!c.is_set());
        c.set();
        assert!(c.is_set());
    }

    #[test]
    fn progress_calls_the_closure_at_most_once_per_second() {
        // Times are passed in, so the test does not depend on how fast the machine is.
        let t0 = Instant::now();
        let mut p = Progress { last: t0 };
        let mut calls = 0;
        let mut at = |p: &mut Progress, ms: u64| {
            p.due(t0 + Duration::from_millis(ms), || {
                calls += 1;
                format!("line at {ms} ms")
            })
        };
        for ms in 0..1000 {
            assert_eq!(at(&mut p, ms), None, "{ms} ms after the start");
        }
        assert_eq!(at(&mut p, 1000).as_deref(), Some("line at 1000 ms"));
        assert_eq!(at(&mut p, 1500), None);
        assert_eq!(at(&mut p, 1999), None);
        assert_eq!(at(&mut p, 2000).as_deref(), Some("line at 2000 ms"));
        assert_eq!(at(&mut p, 7000).as_deref(), Some("line at 7000 ms"));
        assert_eq!(calls, 3);
    }

    #[test]
    fn pinning_to_an_impossible_cpu_fails_without_panicking() {
        assert!(!pin_current_thread(usize::MAX));
    }

    /// Uses the workspace's debug `tickwire` binary (the bench crate cannot depend on
    /// the binary crate; `cargo test --workspace` builds it). Under CI (`CI=true`) a
    /// missing binary fails the test; locally the test skips with a loud banner.
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
            eprintln!("\n{0}\nSKIPPED starts_a_real_router_pinned_and_terminates_it_on_drop: {why}\n{0}\n", "=".repeat(78));
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
