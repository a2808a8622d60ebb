//! Helpers for the FIX cross-process tests: child processes whose stdout lines are
//! collected and waited for (bounded), free loopback ports, the QuickFIX peer and
//! dictionaries obtained on demand.
#![allow(dead_code)]
// Test support reports skips and child output on stderr: tests may print.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// How long any expected line may take (debug builds on a busy 2-core machine).
pub const WAIT: Duration = Duration::from_secs(30);

type Lines = Arc<(Mutex<Vec<String>>, Condvar)>;

/// A child process whose stdout (and stderr, prefixed `stderr: `) lines are collected.
/// Killed by PID on drop.
pub struct Peer {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines,
    cursor: usize,
}

fn collect(lines: Lines, r: impl std::io::Read + Send + 'static, prefix: &'static str) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            let (m, cv) = &*lines;
            m.lock().unwrap().push(format!("{prefix}{line}"));
            cv.notify_all();
        }
    });
}

impl Peer {
    /// Starts `cmd` with piped stdio.
    pub fn spawn(name: &str, cmd: &mut Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        let lines: Lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        collect(lines.clone(), child.stdout.take().unwrap(), "");
        collect(lines.clone(), child.stderr.take().unwrap(), "stderr: ");
        let stdin = child.stdin.take();
        Peer {
            name: name.to_string(),
            child,
            stdin,
            lines,
            cursor: 0,
        }
    }

    /// `tickwire fix <side> --config <cfg> --app <app>`.
    pub fn tickwire(name: &str, side: &str, cfg: &Path, app: &str) -> Peer {
        Peer::spawn(
            name,
            Command::new(BIN)
                .args(["fix", side, "--config"])
                .arg(cfg)
                .args(["--app", app])
                .env("TICKWIRE_LOG", "warn"),
        )
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's resident memory in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in /proc/{}/status", self.pid()))
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        self.lines.0.lock().unwrap().join("\n")
    }

    /// Waits (bounded) for the next line after the cursor containing every part;
    /// moves the cursor past it and returns it.
    pub fn wait(&mut self, parts: &[&str]) -> String {
        let (i, line) = self.wait_from(self.cursor, parts);
        self.cursor = i + 1;
        line
    }

    /// Waits (bounded) for any line since the start containing every part, without
    /// moving the cursor (for lines whose order relative to others is not fixed).
    pub fn wait_ever(&self, parts: &[&str]) -> String {
        self.wait_from(0, parts).1
    }

    /// Waits (bounded) for the first line at or after `from` containing every part;
    /// returns its index and the line.
    fn wait_from(&self, from: usize, parts: &[&str]) -> (usize, String) {
        let deadline = Instant::now() + WAIT;
        let (m, cv) = &*self.lines;
        let mut lines = m.lock().unwrap();
        loop {
            if let Some(i) = lines[from..]
                .iter()
                .position(|l| parts.iter().all(|p| l.contains(p)))
            {
                return (from + i, lines[from + i].clone());
            }
            let now = Instant::now();
            if now >= deadline {
                let all = lines.join("\n");
                drop(lines);
                panic!(
                    "{}: no line with {parts:?} within {WAIT:?}; output:\n{all}",
                    self.name
                );
            }
            lines = cv.wait_timeout(lines, deadline - now).unwrap().0;
        }
    }

    /// The cursor's position, to look back from with [`Peer::find_all_since`].
    pub fn mark(&self) -> usize {
        self.cursor
    }

    /// The lines from `mark` on (including the ones the cursor has passed since) that
    /// contain every part, so far (no waiting).
    pub fn find_all_since(&self, mark: usize, parts: &[&str]) -> Vec<String> {
        self.lines.0.lock().unwrap()[mark..]
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .cloned()
            .collect()
    }

    /// The lines after the cursor so far that contain every part (no waiting).
    pub fn find_all(&self, parts: &[&str]) -> Vec<String> {
        self.lines.0.lock().unwrap()[self.cursor..]
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .cloned()
            .collect()
    }

    /// The last line printed so far (from the start) containing every part.
    pub fn last_ever(&self, parts: &[&str]) -> Option<String> {
        self.lines
            .0
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .cloned()
    }

    /// How many lines printed so far (from the start) contain every part.
    pub fn count_ever(&self, parts: &[&str]) -> usize {
        self.lines
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
    }

    /// SIGKILL (no chance to flush or log out), and waits for the exit.
    pub fn kill_9(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// Any line ever printed containing every part.
    pub fn ever(&self, parts: &[&str]) -> bool {
        self.lines
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|l| parts.iter().all(|p| l.contains(p)))
    }

    /// Writes a line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("writing to the child's stdin");
        stdin.flush().unwrap();
    }

    /// Writes raw bytes (e.g. a line that is not UTF-8) to the child's stdin.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin
            .write_all(bytes)
            .expect("writing to the child's stdin");
        stdin.flush().unwrap();
    }

    /// Waits (bounded) for the child to exit by itself (after `quit`); kills it and
    /// fails on timeout.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.exit_within(WAIT, "did not exit")
    }

    /// SIGTERM, then waits (bounded) for the exit; kills on timeout.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.exit_within(WAIT, "did not exit after SIGTERM")
    }

    /// The exit status once the child has exited, within `limit`; past it the child is
    /// killed and the test fails with `what` and its output.
    fn exit_within(&mut self, limit: Duration, what: &str) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} {what}:\n{}", self.name, self.output());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- output of {} -----\n{}\n-----",
                self.name,
                self.output()
            );
        }
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty temporary directory for one test (`tickwire-fix-NAME-*`), removed
/// when the guard drops, pass or fail. Keep the guard until every child process that
/// uses the directory has exited: declare it before the `Peer`s, which drop first.
pub fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tickwire-fix-{name}-"))
        .tempdir()
        .expect("a temporary directory")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

#[path = "../../../fix/tests/support/provide.rs"]
mod provide;

/// Runs `script` once per process under the shared cross-process lock (the one copy,
/// in `crates/fix/tests/support/provide.rs`) unless `done()` already holds.
fn provide(lock_name: &str, script: &str, done: impl Fn() -> bool) {
    provide::provide(&repo_root(), lock_name, script, &[], done);
}

/// `target/quickfix/bin/qf_peer`, built on demand (scripts/install-quickfix.sh).
pub fn qf_peer() -> PathBuf {
    static ONCE: Once = Once::new();
    let bin = repo_root().join("target/quickfix/bin/qf_peer");
    // The script rebuilds when the source is newer; run it once per test process.
    ONCE.call_once(|| {
        let src = repo_root().join("tools/quickfix/qf_peer.cpp");
        let fresh = || {
            let (Ok(b), Ok(s)) = (std::fs::metadata(&bin), std::fs::metadata(&src)) else {
                return false;
            };
            matches!((b.modified(), s.modified()), (Ok(b), Ok(s)) if b >= s)
        };
        provide("quickfix.lock", "scripts/install-quickfix.sh", fresh);
    });
    assert!(bin.exists(), "{} missing", bin.display());
    bin
}

/// `target/fix-spec` with the QuickFIX dictionaries (scripts/fetch-fix-spec.sh).
pub fn spec_dir() -> PathBuf {
    static ONCE: Once = Once::new();
    let dir = repo_root().join("target/fix-spec");
    let present = {
        let dir = dir.clone();
        move || {
            ["FIX42.xml", "FIX44.xml"]
                .iter()
                .all(|f| std::fs::metadata(dir.join(f)).is_ok_and(|m| m.len() > 0))
        }
    };
    ONCE.call_once(|| provide("fix-spec.lock", "scripts/fetch-fix-spec.sh", &present));
    assert!(
        present(),
        "QuickFIX dictionaries missing from {}",
        dir.display()
    );
    dir
}

/// The QuickFIX peer with one of the settings files of tools/quickfix.
pub fn quickfix(name: &str, cfg: &str, port: u16, dir: &Path) -> Peer {
    let root = repo_root();
    let bin = qf_peer();
    let spec = spec_dir();
    let mut p = Peer::spawn(
        name,
        Command::new(bin)
            .arg("--config")
            .arg(root.join("tools/quickfix").join(cfg))
            .args(["--app", "echo"])
            .arg("--define")
            .arg(format!("PORT={port}"))
            .arg("--define")
            .arg(format!("SPEC={}", spec.display()))
            .arg("--define")
            .arg(format!("DIR={}", dir.display())),
    );
    p.wait(&["READY"]);
    // QuickFIX's own threads may log (even send a Logon) before its main thread prints
    // READY: waits that follow must see those lines too.
    p.cursor = 0;
    p
}

/// The value of `tag` in a `|`-separated message line.
pub fn field(line: &str, tag: u32) -> Option<String> {
    let prefix = format!("{tag}=");
    // The first field follows "IN <session> "; values may contain spaces.
    line.split('|')
        .enumerate()
        .map(|(i, f)| {
            if i == 0 {
                f.rsplit(' ').next().unwrap_or(f)
            } else {
                f
            }
        })
        .find_map(|f| f.strip_prefix(&prefix).map(str::to_string))
}

/// One settings file for both sides (each command takes the sessions of its
/// ConnectionType), with a file store and, when `log`, a message log in `dir`.
pub fn two_sided_cfg(dir: &std::path::Path, port: u16, log: bool) -> std::path::PathBuf {
    let d = dir.display();
    let log = if log {
        format!("FileLogPath={d}/log\n")
    } else {
        String::new()
    };
    let cfg = dir.join("fix.cfg");
    std::fs::write(
        &cfg,
        format!(
            "[DEFAULT]\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n\
             ReconnectInterval=1\nFileStorePath={d}/store\n{log}\n\
             [SESSION]\nConnectionType=acceptor\nBeginString=FIX.4.4\nSenderCompID=VENUE\n\
             TargetCompID=CLIENT\nSocketAcceptHost=127.0.0.1\nSocketAcceptPort={port}\n\n\
             [SESSION]\nConnectionType=initiator\nBeginString=FIX.4.4\nSenderCompID=CLIENT\n\
             TargetCompID=VENUE\nSocketConnectHost=127.0.0.1\nSocketConnectPort={port}\n"
        ),
    )
    .unwrap();
    cfg
}
