//! Shared harness for the cross-process tests: start the real `tickwire router`
//! binary on a free loopback port and talk to it over real sockets.
#![allow(dead_code)]
// Test output: the router log echo and the loud skip banner go to stderr.
#![allow(clippy::print_stderr)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tickwire_wire::frame::{self, ErrorCode, Frame};

pub const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// A running `tickwire router` child process, killed on drop.
pub struct RouterProc {
    pub child: Child,
    pub addr: SocketAddr,
    /// The spool directory given to the router unless the test chose its own: removed
    /// after the kill on drop (the router's own temporary one would outlive a SIGKILL).
    pub data: Option<tempfile::TempDir>,
    /// The monitoring endpoint, when started with `--http` (its banner's address).
    pub http: Option<SocketAddr>,
    /// The TLS listener, when started with `--tls-listen` (the banner's `tls://` address).
    pub tls: Option<SocketAddr>,
}

impl RouterProc {
    /// Starts `tickwire router --listen 127.0.0.1:0 <extra>` and waits for its address.
    pub fn start(extra: &[&str]) -> RouterProc {
        Self::spawn(extra, "warn", Stdio::inherit(), None)
    }

    /// Like [`RouterProc::start`] under a limit of `nofile` descriptors (`prlimit`, which
    /// execs the router: the child's pid is the router's).
    pub fn start_with_nofile(nofile: u32, extra: &[&str]) -> RouterProc {
        Self::spawn(extra, "warn", Stdio::inherit(), Some((nofile, nofile)))
    }

    /// Like [`RouterProc::start`] with info-level logging captured, for tests that check
    /// what the router saw (a client's CLOSE, a disconnect reason).
    pub fn start_logged(extra: &[&str]) -> (RouterProc, RouterLog) {
        Self::start_logged_limited(None, extra)
    }

    /// [`RouterProc::start_logged`] under open-file limits `(soft, hard)` when given.
    pub fn start_logged_limited(
        nofile: Option<(u32, u32)>,
        extra: &[&str],
    ) -> (RouterProc, RouterLog) {
        let mut r = Self::spawn(extra, "info", Stdio::piped(), nofile);
        let stderr = r.child.stderr.take().expect("router stderr");
        let log = RouterLog(std::sync::Arc::default());
        let lines = log.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("router: {line}");
                let (m, cv) = &*lines;
                m.lock().unwrap().push(line);
                cv.notify_all();
            }
        });
        (r, log)
    }

    fn spawn(extra: &[&str], level: &str, stderr: Stdio, nofile: Option<(u32, u32)>) -> RouterProc {
        let own_spool = !extra
            .iter()
            .any(|a| ["--data-dir", "--no-guaranteed", "--config"].contains(a));
        let data = own_spool.then(|| tempfile::tempdir().expect("a spool directory"));
        let mut cmd = match nofile {
            Some((soft, hard)) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={soft}:{hard}")).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["router", "--listen", "127.0.0.1:0"]);
        if let Some(d) = &data {
            cmd.arg("--data-dir").arg(d.path());
        }
        let mut child = cmd
            .args(extra)
            .env("TICKWIRE_LOG", level)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn tickwire router");
        let stdout = child.stdout.take().expect("router stdout");
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read router banner");
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("router banner without address: {line:?}"));
        let tls = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("tls://"))
            .and_then(|a| a.trim_end_matches(',').parse().ok());
        // `tickwire monitor listening on http://ADDR/` follows with --http.
        let http = extra.contains(&"--http").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("read monitor banner");
            line.trim()
                .strip_prefix("tickwire monitor listening on http://")
                .and_then(|a| a.trim_end_matches('/').parse().ok())
                .unwrap_or_else(|| panic!("monitor banner without address: {line:?}"))
        });
        RouterProc {
            child,
            addr,
            data,
            http,
            tls,
        }
    }

    /// The address as a string for `--router`.
    pub fn addr_str(&self) -> String {
        self.addr.to_string()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(self) -> std::process::ExitStatus {
        self.sigterm();
        self.wait_exit()
    }

    /// Sends SIGTERM (to this router's PID only) without waiting.
    pub fn sigterm(&self) {
        signal(self.child.id(), "TERM");
    }

    /// Waits (at most 20 s) for the router to exit; returns its status.
    pub fn wait_exit(mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait router") {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "router did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for RouterProc {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A decoded frame, owned, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    Welcome {
        client_id: u32,
        max_frame: u32,
    },
    Error {
        code: ErrorCode,
        fatal: bool,
        text: String,
        request_id: u32,
    },
    Close {
        code: ErrorCode,
        reason: String,
    },
    Ack(u32),
    Pong(u64),
    Message {
        topic: String,
        payload: Vec<u8>,
        discarded: u64,
    },
    Other(String),
}

/// A raw TCP connection speaking frames by hand.
pub struct Raw {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).expect("connect raw");
        s.set_nodelay(true).unwrap();
        Raw { s, buf: Vec::new() }
    }

    /// Wraps an already connected stream.
    pub fn from_stream(s: TcpStream) -> Raw {
        s.set_nodelay(true).unwrap();
        Raw { s, buf: Vec::new() }
    }

    /// Connects and completes the handshake.
    pub fn hello(addr: SocketAddr, name: &str) -> Raw {
        let mut r = Raw::connect(addr);
        let mut b = Vec::new();
        frame::encode_hello(&mut b, frame::PROTOCOL_VERSION, name);
        r.send(&b);
        match r.next(Duration::from_secs(10)) {
            Ok(Got::Welcome { .. }) => r,
            other => panic!("expected WELCOME, got {other:?}"),
        }
    }

    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("raw send");
    }

    pub fn subscribe(&mut self, id: u32, pattern: &str) {
        let mut b = Vec::new();
        frame::encode_subscribe(&mut b, id, pattern);
        self.send(&b);
    }

    pub fn publish(&mut self, topic: &str, payload: &[u8]) {
        self.send(&publish_frame(topic, payload));
    }

    /// The next frame, or why none came: the router closed the connection (EOF), reset
    /// it, or sent nothing within `timeout`. A test that expects a close must tell these
    /// apart: a router that stays silent is not a router that closed.
    pub fn next(&mut self, timeout: Duration) -> Result<Got, Closed> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some((f, n))) = frame::decode(&self.buf, u32::MAX) {
                let got = match f {
                    Frame::Welcome {
                        client_id,
                        max_frame,
                        ..
                    } => Got::Welcome {
                        client_id,
                        max_frame,
                    },
                    Frame::Error {
                        request_id,
                        code,
                        fatal,
                        text,
                    } => Got::Error {
                        code,
                        fatal,
                        text: text.to_string(),
                        request_id,
                    },
                    Frame::Close { code, reason } => Got::Close {
                        code,
                        reason: reason.to_string(),
                    },
                    Frame::Ack { request_id } => Got::Ack(request_id),
                    Frame::Pong(t) => Got::Pong(t),
                    Frame::Message(m) => Got::Message {
                        topic: String::from_utf8_lossy(m.topic).into_owned(),
                        payload: m.payload.to_vec(),
                        discarded: m.discarded,
                    },
                    other => Got::Other(format!("{other:?}")),
                };
                self.buf.drain(..n);
                return Ok(got);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Closed::TimedOut);
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            let mut tmp = [0u8; 65536];
            match self.s.read(&mut tmp) {
                Ok(0) => return Err(Closed::Eof),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(Closed::TimedOut)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    return Err(Closed::Reset)
                }
                Err(e) => panic!("reading from the router: {e}"),
            }
        }
    }

    /// Expects a fatal ERROR with `code`, then the close; returns the ERROR's text.
    pub fn expect_fatal(&mut self, code: ErrorCode) -> String {
        let text = match self.next(Duration::from_secs(10)) {
            Ok(Got::Error {
                code: c,
                fatal: true,
                text,
                ..
            }) if c == code => text,
            other => panic!("expected fatal {code:?}, got {other:?}"),
        };
        self.expect_eof();
        text
    }

    /// Expects the router to close the connection with nothing else first. EOF and
    /// reset both count as closed (the kernel answers a reset when the router closes a
    /// socket with unread input); silence until the timeout fails the test.
    pub fn expect_eof(&mut self) {
        match self.next(Duration::from_secs(10)) {
            Err(Closed::Eof | Closed::Reset) => {}
            Err(Closed::TimedOut) => {
                panic!("expected the router to close the connection; it stayed open and silent")
            }
            Ok(got) => panic!("expected the router to close the connection, got {got:?}"),
        }
    }
}

/// A PUBLISH frame of `payload` to `topic`, without options.
pub fn publish_frame(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    frame::encode_publish(&mut b, topic, payload, Default::default(), u32::MAX).unwrap();
    b
}

/// The log lines of a router started with [`RouterProc::start_logged`].
#[derive(Clone)]
pub struct RouterLog(std::sync::Arc<(std::sync::Mutex<Vec<String>>, std::sync::Condvar)>);

impl RouterLog {
    /// Waits (at most `timeout`) for a line containing every part; returns it.
    pub fn wait_for(&self, parts: &[&str], timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.0;
        let mut lines = m.lock().unwrap();
        loop {
            if let Some(l) = lines.iter().find(|l| parts.iter().all(|p| l.contains(p))) {
                return Some(l.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            lines = cv.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// How many lines so far contain every part.
    pub fn count(&self, parts: &[&str]) -> usize {
        let lines = self.0 .0.lock().unwrap();
        lines
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
    }

    /// Every line so far.
    pub fn text(&self) -> String {
        self.0 .0.lock().unwrap().join("\n")
    }
}

/// The lines of a child's output, read on a thread: a wait for a line has a deadline
/// and tells the stream's end from a timeout.
pub struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: String,
}

impl Lines {
    /// Reads `r` line by line on a new thread.
    pub fn start<R: Read + Send + 'static>(r: R) -> Lines {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: String::new(),
        }
    }

    /// The next line containing `what`, read within `timeout`; panics, saying which,
    /// when the stream ends first or the time runs out.
    pub fn wait_for(&mut self, what: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self.next(deadline) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(ended) => panic!(
                    "{} without a line with {what:?} ({timeout:?}):\n{}",
                    if ended {
                        "the output ended"
                    } else {
                        "timed out"
                    },
                    self.seen
                ),
            }
        }
    }

    /// Every line until the stream ends (within `timeout`, else a panic).
    pub fn rest(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self.next(deadline) {
                Ok(_) => {}
                Err(true) => return self.seen.clone(),
                Err(false) => panic!("the output did not end within {timeout:?}:\n{}", self.seen),
            }
        }
    }

    /// The next line (kept in `seen`), or whether the stream ended (true) rather than
    /// the deadline passed (false).
    fn next(&mut self, deadline: Instant) -> Result<String, bool> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(line) => {
                self.seen.push_str(&line);
                self.seen.push('\n');
                Ok(line)
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(false),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(true),
        }
    }
}

/// Why [`Raw::next`] returned no frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The router closed the connection in order (read returned 0).
    Eof,
    /// The connection was reset (the router closed it with input unread, or aborted).
    Reset,
    /// Nothing arrived before the deadline; the connection is still open.
    TimedOut,
}

/// Runs a `tickwire` subcommand to completion with a timeout; returns (status, stdout, stderr).
pub fn run_cli(args: &[&str], timeout: Duration) -> (std::process::ExitStatus, String, String) {
    run_cli_in(None, args, timeout)
}

/// Everything left on an exited child's stdout and stderr (both piped).
pub fn take_output(child: &mut Child) -> (String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out).expect("child stdout");
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).expect("child stderr");
    }
    (out, err)
}

/// `tickwire stats --json` of the router at `router`.
pub fn stats_json(router: &str) -> serde_json::Value {
    let (st, out, err) = run_cli(
        &["stats", "--json", "--router", router],
        Duration::from_secs(30),
    );
    assert!(
        st.success(),
        "tickwire stats failed: {st}\nstdout: {out}\nstderr: {err}"
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("stats --json: {e}: {out}"))
}

/// Waits (up to 30 s) until the router lists a client called `name` holding `subs`
/// subscriptions.
pub fn wait_for_subscriber(router: &str, name: &str, subs: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let doc = stats_json(router);
        let found = doc["clients"].as_array().unwrap().iter().any(|c| {
            c["name"] == name && c["subscriptions"].as_u64() == Some(subs) && c["phase"] == "open"
        });
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no client {name} with {subs} subscriptions: {doc}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`run_cli`] in the directory `dir` (None: the test's own).
pub fn run_cli_in(
    dir: Option<&std::path::Path>,
    args: &[&str],
    timeout: Duration,
) -> (std::process::ExitStatus, String, String) {
    let mut cmd = cli(args);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let mut child = cmd.spawn().expect("spawn tickwire");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            // SIGTERM first, so a bench stops the router it started; then kill.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (t_out.join().unwrap(), t_err.join().unwrap());
            panic!("tickwire {args:?} did not finish in {timeout:?}\nstdout:\n{o}\nstderr:\n{e}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, t_out.join().unwrap(), t_err.join().unwrap())
}

/// A temporary path for a test's output file (created empty), deleted when dropped.
pub fn temp(name: &str) -> tempfile::TempPath {
    tempfile::Builder::new()
        .prefix("tickwire-test-")
        .suffix(&format!("-{name}"))
        .tempfile()
        .expect("a temporary file")
        .into_temp_path()
}

/// The unsigned integer at `key` of a JSON object; panics with the document when absent.
pub fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// The unsigned integer at `path` (object keys, outermost first) of a bench's JSON
/// report; panics naming the path when it is absent or not a number.
pub fn u_at(doc: &serde_json::Value, path: &[&str]) -> u64 {
    let mut v = doc;
    for p in path {
        v = &v[*p];
    }
    v.as_u64()
        .unwrap_or_else(|| panic!("{} is not a number in the report", path.join(".")))
}

/// nats-server from $GOBIN, ~/go/bin or PATH (the first of them that holds it), if
/// installed.
pub fn nats_server() -> Option<std::path::PathBuf> {
    let gobin = std::env::var_os("GOBIN").map(|d| std::path::Path::new(&d).join("nats-server"));
    let home =
        std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join("go/bin/nats-server"));
    let path = std::env::var_os("PATH").into_iter().flat_map(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("nats-server"))
            .collect::<Vec<_>>()
    });
    gobin
        .into_iter()
        .chain(home)
        .chain(path)
        .find(|p| p.is_file())
}

/// Runs a `tickwire bench ...` command with a generous limit (a debug build on a busy
/// 2-core machine); SIGTERM, then kill, on timeout.
pub fn run_bench(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    run_cli(args, Duration::from_secs(120))
}

/// Runs `tickwire bench <bench> <args> --json FILE` (in `dir`, if given) within `timeout`;
/// returns the exit code, the parsed JSON report and the output (stdout then stderr, for
/// failure messages). Panics, with the output, when there is no JSON or it is invalid.
pub fn run_bench_json(
    bench: &str,
    tag: &str,
    args: &[&str],
    dir: Option<&std::path::Path>,
    timeout: Duration,
) -> (i32, serde_json::Value, String) {
    let json = temp(&format!("bench-{bench}-{tag}.json"));
    let _ = std::fs::remove_file(&json);
    let json_arg = json.display().to_string();
    let mut full = vec!["bench", bench];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--json", &json_arg]);
    let (status, out, err) = run_cli_in(dir, &full, timeout);
    let output = format!("{out}{err}");
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); output:\n{output}"));
    let _ = std::fs::remove_file(&json);
    let doc = serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{text}"));
    (status.code().unwrap_or(-1), doc, output)
}

/// A test cannot run because a peer it needs (nats-server, QuickFIX, ...) is missing.
/// Under CI (`CI=true`, where `.ci/setup` installs every peer) that is a failure: the
/// test panics. Locally the caller skips, and this prints a banner that is hard to miss.
pub fn peer_missing(test: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: under CI a missing peer is a failure, not a skip: {why}");
    }
    let bar = "=".repeat(78);
    eprintln!("\n{bar}\nSKIPPED {test}: {why}\n(under CI=true this fails)\n{bar}\n");
}

/// Runs `tickwire <args>` (a `--help`), expects success and every word in its output;
/// returns the output.
pub fn assert_help_lists(args: &[&str], words: &[&str]) -> String {
    let (st, out, _) = run_cli(args, Duration::from_secs(120));
    assert!(st.success(), "tickwire {args:?}: {st}");
    for w in words {
        assert!(out.contains(w), "{w} not in tickwire {args:?}:\n{out}");
    }
    out
}

/// Runs `tickwire bench <bench> <args> --json F --plot G` to success; checks that the
/// JSON names the bench and the machine and that the plot is an SVG; removes both
/// files. Returns stdout and the JSON report.
pub fn run_bench_report(bench: &str, args: &[&str]) -> (String, serde_json::Value) {
    let json = temp(&format!("{bench}.json"));
    let svg = temp(&format!("{bench}.svg"));
    let (json_arg, svg_arg) = (json.display().to_string(), svg.display().to_string());
    let mut full = vec!["bench", bench];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--json", &json_arg, "--plot", &svg_arg]);
    let (st, out, err) = run_bench(&full);
    assert!(st.success(), "exit {st}\nstdout:\n{out}\nstderr:\n{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["bench"], bench);
    assert!(
        v["machine"]["cores"].as_u64().is_some(),
        "no machine metadata: {v}"
    );
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("<svg"), "not an SVG");
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
    (out, v)
}

/// Every (transport, row) of a bench report whose `transports` each hold a `rows` array;
/// checks there are `transports` of them with `per` rows each.
pub fn transport_rows<'a>(
    v: &'a serde_json::Value,
    rows: &str,
    transports: usize,
    per: usize,
) -> Vec<(&'a serde_json::Value, &'a serde_json::Value)> {
    let ts = v["transports"].as_array().unwrap();
    assert_eq!(ts.len(), transports, "{v}");
    let mut all = Vec::new();
    for t in ts {
        let rs = t[rows].as_array().unwrap();
        assert_eq!(rs.len(), per, "{t}");
        all.extend(rs.iter().map(|r| (t, r)));
    }
    all
}

/// `tickwire md generate` of `messages` ITCH messages over `symbols` symbols with
/// `seed`, at 300k messages/s, into a temporary file `name`.
pub fn md_session(name: &str, seed: &str, symbols: u32, messages: u64) -> tempfile::TempPath {
    let f = temp(name);
    let path = f.to_str().expect("a UTF-8 temporary path").to_string();
    let (symbols, messages) = (symbols.to_string(), messages.to_string());
    let (st, out, err) = run_cli(
        &[
            "md",
            "generate",
            "--symbols",
            &symbols,
            "--messages",
            &messages,
            "--seed",
            seed,
            "--rate",
            "300k",
            "--out",
            &path,
        ],
        Duration::from_secs(60),
    );
    assert!(st.success(), "md generate: {out}{err}");
    f
}

/// `tickwire md publish --file SESSION --group GROUP --speed 1x --linger 1s EXTRA...`,
/// waited for (60 s at most): its exit status, stdout and stderr.
pub fn md_publish(
    session: &std::path::Path,
    group: &str,
    extra: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let session = session.to_str().expect("a UTF-8 session path");
    let mut args = vec![
        "md", "publish", "--file", session, "--group", group, "--speed", "1x", "--linger", "1s",
    ];
    args.extend_from_slice(extra);
    run_cli(&args, Duration::from_secs(60))
}

/// `tickwire passwd --token`: (token, token_sha256).
pub fn new_token() -> (String, String) {
    let (st, out, err) = run_cli(&["passwd", "--token"], Duration::from_secs(30));
    assert!(st.success(), "{err}");
    let value = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
            .and_then(|l| l.split('"').next())
            .unwrap_or_else(|| panic!("no {key} in {out}"))
            .to_owned()
    };
    (value("token"), value("token_sha256"))
}

/// A free UDP port P with P+1 free too (a feed's group port and its
/// re-request port).
pub fn free_udp_port_pair() -> u16 {
    tickwire_bench::md_replay::repro::free_port_run(2).expect("two free UDP ports")
}

/// A free loopback port, for a router that is restarted on the same one.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A `tickwire router` child on a fixed port, so it can be killed and restarted;
/// killed on drop.
pub struct FixedRouter {
    pub child: Child,
    pub addr: SocketAddr,
}

impl FixedRouter {
    /// Starts `tickwire router --listen 127.0.0.1:PORT <extra>`, retrying (20 s at
    /// most) while the port or a spool directory's lock is still held by a killed
    /// predecessor.
    pub fn start(port: u16, extra: &[&str], stderr: Stdio) -> FixedRouter {
        let mut stderr = Some(stderr);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut child = Command::new(BIN)
                .args(["router", "--listen", &format!("127.0.0.1:{port}")])
                .args(extra)
                .env("TICKWIRE_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(stderr.take().unwrap_or_else(Stdio::inherit))
                .spawn()
                .expect("spawn tickwire router");
            let mut line = String::new();
            let stdout = child.stdout.take().expect("stdout");
            BufReader::new(stdout).read_line(&mut line).ok();
            let addr = line.trim().rsplit(' ').next().and_then(|a| a.parse().ok());
            if let Some(addr) = addr.filter(|a: &SocketAddr| a.port() == port) {
                return FixedRouter { child, addr };
            }
            let _ = child.wait();
            assert!(
                Instant::now() < deadline,
                "router did not restart on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The address as a string for `--router`.
    pub fn addr_str(&self) -> String {
        self.addr.to_string()
    }

    /// SIGKILL, and reap.
    pub fn kill9(mut self) {
        self.child.kill().expect("SIGKILL the router");
        self.child.wait().expect("reap the router");
    }
}

impl Drop for FixedRouter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tickwire ARGS` with stdin closed and stdout and stderr piped; set other stdio on
/// it before spawning.
pub fn cli<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Sends SIGINT to `child`, as Ctrl-C would.
pub fn interrupt(child: &std::process::Child) {
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -INT {}", child.id());
}

/// Waits for `child` to exit, at most `limit` (then kills it and fails the test, saying
/// `what` kept running), and returns its status: a timeout is never mistaken for an exit.
pub fn wait_child(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `request` raw to an HTTP endpoint and reads the answer until the server
/// closes. A reset after the answer (the server closes before reading a long request)
/// ends the answer; no close within 20 s is a failure, never an answer.
pub fn http_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the HTTP endpoint");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer and close before a long request is fully written.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the HTTP endpoint {addr} did not close within 20 s (got {} bytes)",
            out.len()
        );
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET path` with `headers` (each `Name: value`): the status, the response head and
/// the body.
pub fn http_get(addr: SocketAddr, path: &str, headers: &[&str]) -> (u16, String, String) {
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let raw = http_exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes(),
    );
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head.to_owned(), body.to_owned())
}

/// Sends signal `name` (`TERM`, `HUP`, ...) to process `pid` only, with kill(1).
pub fn signal(pid: u32, name: &str) {
    let pid = pid.to_string();
    let st = Command::new("kill")
        .args([format!("-{name}").as_str(), &pid])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -{name} {pid}: {st}");
}

/// `tickwire <args>` on a pseudo-terminal (script(1), util-linux, under `/bin/sh`),
/// without the login variables `TICKWIRE_PASSWORD` and `TICKWIRE_TOKEN`: what a person
/// at a terminal sees is collected on a thread. `None` (after [`peer_missing`]) when
/// `script` is missing.
pub struct OnTerminal {
    child: Child,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl OnTerminal {
    pub fn start(test: &str, args: &[&str]) -> Option<OnTerminal> {
        // Quoted for the shell script(1) runs the command with.
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let cmd: Vec<String> = std::iter::once(BIN)
            .chain(args.iter().copied())
            .map(quote)
            .collect();
        let spawned = Command::new("script")
            .args(["-q", "-e", "-c", &cmd.join(" "), "/dev/null"])
            .env("SHELL", "/bin/sh")
            .env_remove("TICKWIRE_PASSWORD")
            .env_remove("TICKWIRE_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = spawned else {
            peer_missing(test, "script (util-linux) is needed for a pseudo-terminal");
            return None;
        };
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut out = child.stdout.take().expect("piped stdout");
        let sink = seen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Some(OnTerminal {
            child,
            seen,
            reader: Some(reader),
        })
    }

    /// Everything the terminal showed so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }

    /// Waits until the terminal shows `what`; panics (the command ended) if it does not
    /// within `timeout` or the command exits first.
    pub fn wait_for(&mut self, what: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.text().contains(what) {
            if Instant::now() > deadline || self.child.try_wait().unwrap().is_some() {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the terminal never showed {what:?}: {}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `text` (with the Enter key as `\r`, as a terminal sends it).
    pub fn type_line(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.write_all(b"\r").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the command to end (within `timeout`): its status and everything the
    /// terminal showed.
    pub fn finish(mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let st = wait_child(&mut self.child, timeout, "a command on a terminal");
        drop(self.child.stdin.take());
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (st, self.text())
    }
}
