//! The algo under test as a child process (tickwire's own algos, the QuickFIX reference
//! algo) and its CPU time read from `/proc/<pid>/stat`.
//!
//! Children are started under `taskset -c <cpu>` when pinned, print one `READY ...`
//! line on stdout once they listen, and are stopped with SIGTERM (then killed) on drop.
//! tickwire's own algos also exit when their standard input closes, so none outlives a
//! bench that was killed.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::harness::{pinned_command, stop_child, wait_for_line};

/// How long a child may take to print READY.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A running algo process; stopped on drop.
#[derive(Debug)]
pub struct AlgoProcess {
    child: Child,
    /// Where it accepts both sessions.
    pub addr: SocketAddr,
    /// Its command line (for reports).
    pub command: String,
    /// A directory to remove after the child exits (its store).
    scratch: Option<PathBuf>,
}

impl AlgoProcess {
    /// Starts `program args...` (pinned to `cpu` with taskset when given), waits for
    /// its `READY` line and takes the address from it (the first word that parses as
    /// one) or, failing that, `default_addr`.
    pub fn start(
        program: &Path,
        args: &[String],
        cpu: Option<usize>,
        default_addr: Option<SocketAddr>,
        own_group: bool,
        scratch: Option<PathBuf>,
    ) -> anyhow::Result<AlgoProcess> {
        let mut cmd = pinned_command(program, cpu, "the algo");
        cmd.args(args)
            .env("TICKWIRE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if own_group {
            // Ctrl-C reaches only the bench, which reports and then stops the algo.
            cmd.process_group(0);
        }
        let command = crate::harness::command_line(&cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the algo: {command}"))?;
        let stdout = child.stdout.take();
        let mut p = AlgoProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            command,
            scratch,
        };
        let stdout = stdout.context("the algo's stdout was not piped")?;
        let ready = |l: &str| l.starts_with("READY");
        let line = wait_for_line(stdout, "algo-stdout", READY_TIMEOUT, ready)?.or_error(
            &mut p.child,
            &p.command,
            "READY line",
            READY_TIMEOUT,
            "it was ready",
        )?;
        let parsed = line
            .split_whitespace()
            .find_map(|w| w.parse::<SocketAddr>().ok());
        p.addr = parsed
            .or(default_addr)
            .with_context(|| format!("no address in the algo's READY line {line:?}"))?;
        Ok(p)
    }

    /// The child's process id (taskset execs the program: the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for AlgoProcess {
    fn drop(&mut self) {
        stop_child(&mut self.child);
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: another process could take it
/// in between, which would make the algo fail to start with a clear error).
pub fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch_dir(what: &str) -> anyhow::Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tickwire-t2t-{}-{what}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A process's CPU time, split into user space (the program's own work) and the kernel
/// (system calls: socket reads and writes, epoll, the store's writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user_ns: u64,
    pub system_ns: u64,
}

impl CpuTime {
    pub fn total_ns(self) -> u64 {
        self.user_ns + self.system_ns
    }

    /// The CPU time spent since `earlier`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
        }
    }
}

/// Reads a process's CPU time (user and system, all threads) from `/proc/<pid>/stat`.
#[derive(Debug, Clone)]
pub struct CpuProbe {
    path: PathBuf,
    ns_per_tick: u64,
}

impl CpuProbe {
    /// A probe for `pid`; None if `/proc/<pid>/stat` cannot be read now.
    pub fn new(pid: u32) -> Option<CpuProbe> {
        let path = PathBuf::from(format!("/proc/{pid}/stat"));
        let p = CpuProbe {
            path,
            ns_per_tick: 1_000_000_000 / clock_ticks_per_second(),
        };
        p.read().map(|_| p)
    }

    /// CPU time so far (resolution: one clock tick, usually 10 ms).
    pub fn read(&self) -> Option<CpuTime> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let (utime, stime) = parse_stat_times(&text)?;
        Some(CpuTime {
            user_ns: utime * self.ns_per_tick,
            system_ns: stime * self.ns_per_tick,
        })
    }

    /// The resolution of [`CpuProbe::read`] in ns.
    pub fn resolution_ns(&self) -> u64 {
        self.ns_per_tick
    }
}

/// utime and stime (fields 14 and 15, clock ticks) of a `/proc/<pid>/stat` line. The
/// command name (field 2) is in parentheses and may contain spaces: fields are counted
/// after its closing parenthesis.
pub fn parse_stat_times(stat: &str) -> Option<(u64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After ")": field 3 (state) is the first; utime is field 14, the 12th.
    let mut it = after.split_whitespace().skip(11);
    let utime = it.next()?.parse().ok()?;
    let stime = it.next()?.parse().ok()?;
    Some((utime, stime))
}

/// USER_HZ from `getconf CLK_TCK` (100 on every mainstream Linux if that fails).
fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&t| t > 0 && t <= 1_000_000)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_are_fields_14_and_15_even_with_spaces_in_the_name() {
        let line = "1234 (qf peer) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 37 0 0 20 0 1 0 \
                    555 1000 10 18446744073709551615";
        assert_eq!(parse_stat_times(line), Some((250, 37)));
        assert_eq!(parse_stat_times("garbage"), None);
        assert_eq!(parse_stat_times("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        let p = CpuProbe::new(std::process::id()).expect("own /proc entry");
        let t = p.read().expect("own CPU time");
        assert_eq!(t.total_ns(), t.user_ns + t.system_ns);
        let later = CpuTime {
            user_ns: t.user_ns + 5,
            system_ns: t.system_ns + 7,
        };
        assert_eq!(
            later.since(t),
            CpuTime {
                user_ns: 5,
                system_ns: 7
            }
        );
        assert!(p.resolution_ns() > 0);
        assert!(CpuProbe::new(u32::MAX).is_none());
    }
}
