//! The `tickwire` command line end to end: real processes, a real router on loopback.
//!
//! Every process started here is bounded: `run_cli` kills on its timeout, and
//! background commands ([`Bg`]) are killed when dropped, also when a test fails.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{run_cli, RouterProc, BIN};
use serde_json::Value;

/// Limit for one short command (generous: debug build on a busy machine).
const T: Duration = Duration::from_secs(30);

/// Every key of the router's configuration, as `--print-config` writes it.
const CONFIG_KEYS: &[&str] = &[
    "listen",
    "name",
    "idle",
    "hybrid_spin_us",
    "max_frame",
    "max_clients",
    "max_subscriptions",
    "max_subscription_levels",
    "max_index_nodes",
    "max_shared_subscriptions",
    "max_shared_groups",
    "max_match_work",
    "egress_limit",
    "egress_memory_limit",
    "slow_consumer",
    "handshake_timeout_ms",
    "stall_timeout_ms",
    "drain_timeout_ms",
    "read_buffer",
    "read_memory_limit",
    "data_dir",
    "guaranteed",
    "sync",
    "publish_window",
    "retain_bytes",
    "retain_ms",
    "max_stored_bytes",
    "max_queue_index_nodes",
    "max_queue_entries",
    "cache",
    "cache_depth",
    "cache_max_topics",
    "cache_max_bytes",
    "image_scan_rate",
    "image_scan_rate_total",
    "shm_ring",
    "tls_client_auth",
    "tls_handshake_rate",
    "shm_epoll_interval_us",
];

/// A `tickwire` command running in the background; killed when dropped.
struct Bg {
    child: Child,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
    what: String,
}

impl Bg {
    /// Starts `tickwire <args>`; `stdin` (if any) is written and then closed.
    fn spawn(args: &[&str], stdin: Option<Vec<u8>>) -> Bg {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickwire");
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
                // Dropping the pipe closes the child's stdin.
            });
        }
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        Bg {
            child,
            out: Some(thread::spawn(move || {
                let mut s = String::new();
                out.read_to_string(&mut s).ok();
                s
            })),
            err: Some(thread::spawn(move || {
                let mut s = String::new();
                err.read_to_string(&mut s).ok();
                s
            })),
            what: format!("tickwire {args:?}"),
        }
    }

    /// Waits (up to `timeout`, else kills and fails) for the exit; (status, stdout, stderr).
    fn finish(mut self, timeout: Duration) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let out = self.out.take().unwrap().join().unwrap();
                let err = self.err.take().unwrap().join().unwrap();
                panic!(
                    "{} did not finish in {timeout:?}\nstdout: {out}\nstderr: {err}",
                    self.what
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        let out = self.out.take().unwrap().join().unwrap();
        let err = self.err.take().unwrap().join().unwrap();
        (status, out, err)
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a command that must succeed; returns its stdout.
fn ok(args: &[&str]) -> String {
    let (st, out, err) = run_cli(args, T);
    assert!(
        st.success(),
        "tickwire {args:?} failed: {st}\nstdout: {out}\nstderr: {err}"
    );
    out
}

/// Runs a command that must fail; returns (exit code, stderr).
fn fails(args: &[&str]) -> (i32, String) {
    let (st, out, err) = run_cli(args, T);
    assert!(
        !st.success(),
        "tickwire {args:?} succeeded\nstdout: {out}\nstderr: {err}"
    );
    (st.code().expect("exited, not killed"), err)
}

use common::{stats_json, wait_for_subscriber};

/// New-user pass: `stats --router` pointed at the monitoring (HTTP) port said the peer
/// answered in HTTP, then guessed it might be a TLS listener.
#[test]
fn a_client_pointed_at_the_monitoring_port_is_told_so_without_a_tls_guess() {
    let router = RouterProc::start(&["--http", "127.0.0.1:0", "--no-guaranteed"]);
    let http = router.http.expect("monitor address").to_string();
    let (code, err) = fails(&["stats", "--router", &http]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("answered in HTTP"), "{err}");
    assert!(!err.contains("TLS listener"), "{err}");
}

fn print_config(extra: &[&str]) -> toml::Value {
    let mut args = vec!["router", "--print-config"];
    args.extend_from_slice(extra);
    let out = ok(&args);
    toml::from_str(&out).unwrap_or_else(|e| panic!("--print-config is not TOML: {e}\n{out}"))
}

/// A file in the temp dir, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!(
            "tickwire-cli-test-{}-{tag}.toml",
            std::process::id()
        ));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An address nothing listens on.
fn dead_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// New-user pass: these commands' help did not say what their exit statuses mean.
#[test]
fn router_stats_queue_and_cache_help_state_their_exit_statuses() {
    for cmd in [
        &["router", "--help"][..],
        &["stats", "--help"],
        &["queue", "--help"],
        &["cache", "show", "--help"],
    ] {
        let out = ok(cmd);
        assert!(
            out.contains("Exit status") && out.contains("2 a usage"),
            "{cmd:?}:\n{out}"
        );
    }
}

/// New-user pass: a file named by a flag that is missing or wrong is a usage error
/// (exit 2, before anything starts), as the help says; these exited 1.
#[test]
fn missing_or_wrong_config_files_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let no_admin = dir.path().join("no-admin.toml");
    std::fs::write(&no_admin, "[auth]\n").unwrap();
    let initiator_only = dir.path().join("initiator.cfg");
    std::fs::write(
        &initiator_only,
        "[DEFAULT]\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n\
         FileStorePath=/tmp/tickwire-cli-test-store\n[SESSION]\nConnectionType=initiator\n\
         BeginString=FIX.4.4\nSenderCompID=A\nTargetCompID=B\nSocketConnectHost=127.0.0.1\n\
         SocketConnectPort=1\n",
    )
    .unwrap();
    // New-user pass: a DataDictionary that cannot be loaded exited 1 (an error while
    // running) though it is a mistake in the settings, found before anything starts.
    let no_dict = dir.path().join("no-dict.cfg");
    std::fs::write(
        &no_dict,
        format!(
            "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
             SocketAcceptPort=0\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n\
             FileStorePath={}\nUseDataDictionary=Y\n[SESSION]\nBeginString=FIX.4.4\n\
             SenderCompID=A\nTargetCompID=B\nDataDictionary={}\n",
            dir.path().join("store").display(),
            dir.path().join("FIX44-missing.xml").display()
        ),
    )
    .unwrap();
    let no_dict = no_dict.to_str().unwrap();
    let missing = dir.path().join("missing.toml");
    let (missing, no_admin, initiator_only) = (
        missing.to_str().unwrap(),
        no_admin.to_str().unwrap(),
        initiator_only.to_str().unwrap(),
    );
    for (args, says) in [
        (
            &["router", "--listen", "127.0.0.1:0", "--config", missing][..],
            "reading config file",
        ),
        (
            &[
                "router",
                "--listen",
                "127.0.0.1:0",
                "--no-guaranteed",
                "--http",
                "127.0.0.1:0",
                "--http-auth",
                missing,
            ],
            "--http-auth",
        ),
        (
            &[
                "router",
                "--listen",
                "127.0.0.1:0",
                "--no-guaranteed",
                "--http",
                "127.0.0.1:0",
                "--http-auth",
                no_admin,
            ],
            "admin",
        ),
        (
            &["fix", "acceptor", "--config", missing],
            "reading FIX settings",
        ),
        (
            &["fix", "acceptor", "--config", initiator_only],
            "no session with ConnectionType=acceptor; its 1 session is ConnectionType=initiator: `tickwire fix initiator --config",
        ),
        (
            &["fix", "acceptor", "--config", no_dict],
            "FIX44-missing.xml",
        ),
        // Hostile-input probe: a device was read until memory ran out (and a FIFO hung
        // the start: a pipe is now read without waiting for a writer, see
        // tickwire_rt::files); refused at once.
        (
            &["router", "--listen", "127.0.0.1:0", "--config", "/dev/zero"],
            "a socket or device",
        ),
        (
            &["fix", "acceptor", "--config", "/dev/zero"],
            "a socket or device",
        ),
    ] {
        let (st, out, err) = run_cli(args, Duration::from_secs(30));
        assert_eq!(st.code(), Some(2), "{args:?}:\n{out}\n{err}");
        assert!(
            err.contains(says) && !out.contains("listening"),
            "{args:?}:\n{out}\n{err}"
        );
    }
}

/// New-user pass: the bench commands that measure without a pass/fail verdict did not
/// say what their exit statuses mean either.
#[test]
fn bench_pingpong_stream_and_mcast_fanout_help_state_their_exit_statuses() {
    for sub in ["pingpong", "stream", "mcast-fanout"] {
        let out = ok(&["bench", sub, "--help"]);
        assert!(
            out.contains("Exit status:") && out.contains("130 when Ctrl-C stopped the run"),
            "bench {sub}:\n{out}"
        );
    }
}

/// clap's own similarity misses swapped letters in short names; one edit away is
/// suggested, at the level of the mistyped word, and a word near none gets no tip.
#[test]
fn a_mistyped_subcommand_gets_the_nearest_one_suggested() {
    for (args, near) in [
        (&["sbu"][..], "sub"),
        (&["rotuer"][..], "router"),
        (&["bench", "pignpong"][..], "pingpong"),
        (&["queue", "lsit"][..], "list"),
    ] {
        let (code, err) = fails(args);
        assert_eq!(code, 2, "tickwire {args:?}: {err}");
        assert!(
            err.contains(&format!("a similar subcommand exists: '{near}'")),
            "tickwire {args:?}: {err}"
        );
    }
    // An earlier argument that is not UTF-8 (a path) is passed over, not a panic.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::OsStr::from_bytes(b"/nonexistent/\xff.log");
        let out = common::cli(&[std::ffi::OsStr::new("--log-file"), path, "sbu".as_ref()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("a similar subcommand exists: 'sub'"), "{err}");
    }
    let (code, err) = fails(&["xyzzy"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unrecognized subcommand 'xyzzy'"), "{err}");
    assert!(!err.contains("similar"), "{err}");
}

/// New-user pass: README said `router --help` documents every key `--print-config`
/// prints; seven keys were in neither. Every printed key is in README's "Router
/// configuration" table, and the file-only ones are named in `router --help`.
#[test]
fn every_router_key_is_documented() {
    let (st, out, err) = run_cli(&["router", "--print-config"], Duration::from_secs(30));
    assert!(st.success(), "{err}");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let table = readme
        .split("### Router configuration")
        .nth(1)
        .expect("README has a Router configuration section");
    // The [router] table's keys (those of [auth] and [log] are documented elsewhere).
    let router_table = out
        .split("[router]")
        .nth(1)
        .and_then(|t| t.split("\n[").next())
        .expect("a [router] table");
    let keys: Vec<&str> = router_table
        .lines()
        .filter_map(|l| l.trim_start_matches("# ").split_once(" = "))
        .map(|(k, _)| k.trim())
        .filter(|k| k.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !k.is_empty())
        .collect();
    assert!(keys.len() > 30, "{out}");
    for k in &keys {
        assert!(
            table.contains(&format!("`{k}`")),
            "README's table lacks `{k}`"
        );
    }
    let help = common::assert_help_lists(
        &["router", "--help"],
        &[
            "retain_bytes",
            "retain_ms",
            "max_stored_bytes",
            "max_queue_index_nodes",
            "max_queue_entries",
            "image_scan_rate",
            "image_scan_rate_total",
        ],
    );
    assert!(help.contains("Router configuration"), "{help}");
}

#[test]
fn help_mentions_the_key_words() {
    let out = ok(&["--help"]);
    for w in [
        "router",
        "pub",
        "sub",
        "stats",
        "demo",
        "md/NASDAQ/AAPL",
        "TICKWIRE_LOG",
    ] {
        assert!(out.contains(w), "tickwire --help lacks {w:?}:\n{out}");
    }
    let subcommands: &[(&str, &[&str])] = &[
        (
            "router",
            &[
                "--listen",
                "--config",
                "--print-config",
                "--idle",
                "--egress-limit",
                "--slow-consumer",
                "--max-frame",
                "--max-clients",
                "--handshake-timeout",
                "--stall-timeout",
                "[router]",
            ],
        ),
        (
            "pub",
            &[
                "--router", "--stdin", "--count", "--size", "--rate", "TOPIC",
            ],
        ),
        (
            "sub",
            &[
                "--router",
                "--count",
                "--print-json",
                "--hex",
                "--quiet",
                "PATTERN",
                "Examples:",
            ],
        ),
        (
            "stats",
            &[
                "--router",
                "--print-json",
                "MSGS_IN",
                "DISCARDS",
                "Examples:",
            ],
        ),
        ("demo", &["--duration", "--rate", "--idle", "Examples:"]),
        // Had none (new-user pass: README says every command's --help has examples).
        (
            "md",
            &["generate", "publish", "capture", "Examples:", "tickwire md"],
        ),
    ];
    for (cmd, words) in subcommands {
        let out = ok(&[cmd, "--help"]);
        for w in *words {
            assert!(out.contains(w), "tickwire {cmd} --help lacks {w:?}:\n{out}");
        }
    }
    // Regression: the usage line showed only the patterns form of `sub`.
    let sub = ok(&["sub", "--help"]);
    for form in [
        "tickwire sub [OPTIONS] <PATTERN>...",
        "tickwire sub [OPTIONS] --queue <NAME>",
    ] {
        assert!(sub.contains(form), "sub --help lacks {form:?}:\n{sub}");
    }
    // `help <cmd>` is the same as `<cmd> --help`.
    assert_eq!(ok(&["help", "pub"]), ok(&["pub", "--help"]));
}

#[test]
fn sub_prints_exactly_the_matching_messages() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let sub = Bg::spawn(&["sub", "--router", &r, "--count", "3", "md/*/AAPL"], None);
    wait_for_subscriber(&r, "tickwire-sub", 1);
    ok(&["pub", "--router", &r, "md/NASDAQ/MSFT", "nope"]);
    for _ in 0..3 {
        ok(&["pub", "--router", &r, "md/NASDAQ/AAPL", "hello"]);
    }
    let (st, out, err) = sub.finish(T);
    assert!(st.success(), "sub failed: {st}\nstderr: {err}");
    assert_eq!(out, "md/NASDAQ/AAPL hello\n".repeat(3));
}

/// `--patterns-file` adds the file's patterns (comments and blank lines skipped) to
/// those on the command line, all subscribed; a bad line is a usage error naming the
/// file and the line, before any connection.
#[test]
fn sub_takes_patterns_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("symbols.txt");
    // A byte-order mark and CRLF line ends (a file saved on Windows) are not the
    // patterns' bytes.
    let text = "\u{feff}md/NASDAQ/AAPL\r\n# symbols\r\n\r\n  md/*/IBM  \r\n";
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let args = [
        "sub",
        "--router",
        &r,
        "--count",
        "3",
        "--patterns-file",
        file,
        "md/X/Y",
    ];
    let sub = Bg::spawn(&args, None);
    wait_for_subscriber(&r, "tickwire-sub", 3);
    for (topic, payload) in [
        ("md/NASDAQ/MSFT", "no"),
        ("md/NASDAQ/AAPL", "a"),
        ("md/NYSE/IBM", "b"),
        ("md/X/Y", "c"),
    ] {
        ok(&["pub", "--router", &r, topic, payload]);
    }
    let (st, out, err) = sub.finish(T);
    assert!(st.success(), "sub failed: {st}\nstderr: {err}");
    assert_eq!(out, "md/NASDAQ/AAPL a\nmd/NYSE/IBM b\nmd/X/Y c\n");

    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "ok/1\nnot//valid\n").unwrap();
    let bad = bad.to_str().unwrap();
    let (code, err) = fails(&["sub", "--router", &r, "--patterns-file", bad]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--patterns-file {bad}, line 2:")),
        "{err}"
    );
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "# nothing\n").unwrap();
    let empty = empty.to_str().unwrap();
    let (code, err) = fails(&["sub", "--router", &r, "--patterns-file", empty]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no pattern in it"), "{err}");
    let latin1 = dir.path().join("latin1.txt");
    std::fs::write(&latin1, b"ok/1\nm\xe9/x\n").unwrap();
    let latin1 = latin1.to_str().unwrap();
    let (code, err) = fails(&["sub", "--router", &r, "--patterns-file", latin1]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(", line 2: not UTF-8 text"), "{err}");
    // Standard input cannot give both the patterns and the password.
    let (code, err) = fails(&[
        "sub",
        "--router",
        &r,
        "--user",
        "u",
        "--password-file",
        "-",
        "--patterns-file",
        "-",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("both read standard input"), "{err}");
}

#[test]
fn sub_json_and_hex_output() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let json = Bg::spawn(
        &[
            "sub", "--router", &r, "--count", "2", "--json", "--name", "sub-json", "j/>",
        ],
        None,
    );
    let hex = Bg::spawn(
        &[
            "sub", "--router", &r, "--count", "2", "--hex", "--name", "sub-hex", "j/>",
        ],
        None,
    );
    wait_for_subscriber(&r, "sub-json", 1);
    wait_for_subscriber(&r, "sub-hex", 1);
    ok(&["pub", "--router", &r, "j/x", "hello"]);
    // A payload that is not printable text (a tab is printable; \x01 is not).
    let stdin = Bg::spawn(
        &["pub", "--router", &r, "--stdin", "j/y/z"],
        Some(b"a\x01b\n".to_vec()),
    );
    let (st, _, err) = stdin.finish(T);
    assert!(st.success(), "{err}");

    let (st, out, err) = json.finish(T);
    assert!(st.success(), "sub --json failed: {err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {e}: {l}")))
        .collect();
    assert_eq!(
        lines,
        [
            serde_json::json!({"topic": "j/x", "payload": "hello", "discarded": 0}),
            serde_json::json!({"topic": "j/y/z", "payload_hex": "610162", "discarded": 0}),
        ]
    );

    let (st, out, err) = hex.finish(T);
    assert!(st.success(), "sub --hex failed: {err}");
    assert_eq!(out, "j/x 68656c6c6f\nj/y/z 610162\n");
}

#[test]
fn pub_stdin_publishes_one_message_per_line() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let sub = Bg::spawn(&["sub", "--router", &r, "--count", "3", "in/x"], None);
    wait_for_subscriber(&r, "tickwire-sub", 1);
    let publ = Bg::spawn(
        &["pub", "--router", &r, "--stdin", "in/x"],
        Some(b"first line\nsecond\nthird one\n".to_vec()),
    );
    let (st, _, err) = publ.finish(T);
    assert!(st.success(), "pub --stdin failed: {err}");
    assert!(err.contains("published 3 messages"), "{err}");
    let (st, out, err) = sub.finish(T);
    assert!(st.success(), "sub failed: {err}");
    assert_eq!(out, "in/x first line\nin/x second\nin/x third one\n");
}

/// A subscriber for the `pub` tests below: the library's client, subscribed to `topic`.
fn subscriber(router: &str, topic: &str) -> tickwire_client::Client {
    let mut c = tickwire_client::Client::connect(router).expect("subscriber connects");
    c.subscribe(topic).expect("subscribe");
    c
}

/// Reads from `sub` until `n` messages in all were received, or fails after `T`.
fn receive(sub: &mut tickwire_client::Client, n: usize, got: &mut usize) {
    let deadline = Instant::now() + T;
    while *got < n {
        sub.poll(
            tickwire_client::Wait::Timeout(Duration::from_millis(50)),
            |_| *got += 1,
        )
        .expect("subscriber poll");
        assert!(Instant::now() < deadline, "{got} of {n} messages arrived");
    }
}

#[test]
fn paced_pub_sends_each_message_at_its_time() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "pace/x");
    // Due at 0, 1, 2 and 3 s: the first must arrive while the publisher still has
    // seconds of its schedule left (it used to wait for 64 KiB of batch, or the end).
    let mut publ = Bg::spawn(
        &[
            "pub", "--router", &r, "pace/x", "tick", "--count", "4", "--rate", "1",
        ],
        None,
    );
    let mut got = 0;
    receive(&mut sub, 1, &mut got);
    assert!(
        publ.child.try_wait().unwrap().is_none(),
        "the first paced message arrived only after the publisher ended"
    );
    let (st, _, err) = publ.finish(T);
    assert!(st.success(), "pub failed: {err}");
    receive(&mut sub, 4, &mut got);
}

/// `pub --stdin TOPIC` with one line written, "first line", and its standard input
/// kept open (the caller holds it).
fn pub_stdin_one_line(router: &str, topic: &str) -> (Child, ChildStdin) {
    let mut child = common::cli(&["pub", "--router", router, "--stdin", topic])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn pub --stdin");
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"first line\n").unwrap();
    input.flush().unwrap();
    (child, input)
}

#[test]
fn pub_sends_a_message_argument_that_is_not_utf8_as_its_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "bin/x");
    let bytes: &[u8] = b"\xff\xfe price \x80";
    let args: Vec<&std::ffi::OsStr> = ["pub", "--router", r.as_str(), "bin/x"]
        .into_iter()
        .map(std::ffi::OsStr::new)
        .chain([std::ffi::OsStr::from_bytes(bytes)])
        .collect();
    let out = common::cli(&args).output().expect("run pub");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + T;
    let mut got = Vec::new();
    while got.is_empty() {
        sub.poll(
            tickwire_client::Wait::Timeout(Duration::from_millis(50)),
            |m| got = m.payload().to_vec(),
        )
        .expect("subscriber poll");
        assert!(Instant::now() < deadline, "the message never arrived");
    }
    assert_eq!(got, bytes);
}

#[test]
fn pub_stdin_sends_a_line_before_the_input_ends() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "typed/x");
    // One line, as a person types it; standard input stays open.
    let (mut child, mut input) = pub_stdin_one_line(&r, "typed/x");
    let mut got = 0;
    receive(&mut sub, 1, &mut got);
    assert!(child.try_wait().unwrap().is_none(), "pub exited early");
    input.write_all(b"second\r\n").unwrap();
    drop(input);
    let status = common::wait_child(&mut child, T, "pub --stdin after its input ended");
    let (_, err) = common::take_output(&mut child);
    assert!(status.success(), "pub --stdin failed: {err}");
    assert!(err.contains("published 2 messages to typed/x"), "{err}");
    receive(&mut sub, 2, &mut got);
}

#[test]
fn pub_stdin_refuses_a_line_longer_than_the_routers_frame_without_holding_it() {
    let router = RouterProc::start(&["--max-frame", "4096"]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "long/x");
    // 64 MiB without a line end: read up to the router's largest frame only.
    let mut input = b"short\n".to_vec();
    input.resize(input.len() + (64 << 20), b'x');
    let publ = Bg::spawn(&["pub", "--router", &r, "--stdin", "long/x"], Some(input));
    let (st, _, err) = publ.finish(T);
    assert!(!st.success(), "{err}");
    assert!(
        err.contains(
            "line 2 of standard input is longer than the router's largest frame (4096 bytes)"
        ),
        "{err}"
    );
    // The line before it was published.
    let mut got = 0;
    receive(&mut sub, 1, &mut got);
}

#[test]
fn ctrl_c_stops_a_pub_load_which_sends_what_it_published_and_says_how_much() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "stop/x");
    let mut child = common::cli(&[
        "pub", "--router", &r, "stop/x", "--count", "1000000", "--rate", "1000",
    ])
    .spawn()
    .expect("spawn pub");
    let mut got = 0;
    receive(&mut sub, 10, &mut got);
    common::interrupt(&child);
    let status = common::wait_child(&mut child, T, "pub after Ctrl-C");
    let (_, err) = common::take_output(&mut child);
    assert_eq!(status.code(), Some(130), "{err}");
    // "stopped (Ctrl-C): published N of 1000000 messages of 100 bytes to stop/x in ..."
    let sent: usize = err
        .split("stopped (Ctrl-C): published ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'stopped (Ctrl-C): published N of ...' summary: {err}"));
    assert!(
        err.contains(&format!(
            "stopped (Ctrl-C): published {sent} of 1000000 messages of 100 bytes to stop/x"
        )),
        "{err}"
    );
    // Everything it counted as published reached the subscriber, and nothing more.
    receive(&mut sub, sent, &mut got);
    sub.poll(
        tickwire_client::Wait::Timeout(Duration::from_millis(300)),
        |_| got += 1,
    )
    .unwrap();
    assert_eq!(got, sent, "{err}");

    // A supervisor's SIGTERM is named as such (it said "stopped:" alone).
    let mut child = common::cli(&[
        "pub", "--router", &r, "stop/x", "--count", "1000000", "--rate", "1000",
    ])
    .spawn()
    .expect("spawn pub");
    receive(&mut sub, sent + 10, &mut got);
    common::signal(child.id(), "TERM");
    let status = common::wait_child(&mut child, T, "pub after SIGTERM");
    let (_, err) = common::take_output(&mut child);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("stopped (SIGTERM): "), "{err}");
    assert!(!err.contains("Ctrl-C"), "{err}");
}

#[test]
fn pub_load_is_counted_in_stats() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let (st, out, err) = run_cli(
        &[
            "pub", "--router", &r, "load/x", "--count", "1000", "--size", "100", "--rate", "0",
        ],
        T,
    );
    assert!(st.success(), "pub load failed: {err}");
    assert_eq!(out, "");
    assert!(
        err.contains("published 1000 messages of 100 bytes to load/x"),
        "{err}"
    );
    // pub closes in an orderly way, so the router read all of it first.
    let doc = stats_json(&r);
    let t = &doc["router"]["totals"];
    assert_eq!(t["msgs_in"], 1000, "{doc}");
    assert_eq!(t["unrouted"], 1000, "nobody subscribed: {doc}");
}

#[test]
fn stats_table_has_column_headers() {
    let router = RouterProc::start(&["--name", "table-test"]);
    let r = router.addr_str();
    let out = ok(&["stats", "--router", &r]);
    let columns = "ID NAME ADDR PHASE SUBS MSGS_IN MSGS_OUT BYTES_IN BYTES_OUT DISCARDS PENDING";
    let others = ["table-test", "totals:", "msgs_in=", "tickwire-stats"];
    for w in columns.split_whitespace().chain(others) {
        assert!(out.contains(w), "stats table lacks {w:?}:\n{out}");
    }
    // Regression: "1 clients". The stats client is the only one; it subscribes to nothing.
    assert!(out.contains(", 1 client, 0 subscriptions\n"), "{out}");
    // The JSON form is one document.
    let doc = stats_json(&r);
    assert_eq!(doc["router"]["name"], "table-test");
    assert!(doc["clients"].is_array());
}

/// New-user pass: at --max-clients `stats` is refused like any client; the refusal
/// says so and names what still answers (the HTTP monitoring) and what to raise.
#[test]
fn stats_refused_at_the_connection_limit_points_to_http_monitoring() {
    let router = RouterProc::start(&["--max-clients", "1"]);
    let r = router.addr_str();
    let _holder = common::Raw::hello(router.addr, "holder");
    let (code, err) = fails(&["stats", "--router", &r]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("connection limit (1 client)"), "{err}");
    assert!(
        err.contains("hint: this command takes a connection like any client"),
        "{err}"
    );
    assert!(err.contains("http://ADDR/varz"), "{err}");
    assert!(err.contains("--max-clients"), "{err}");
    // Not taken for a suggested command needing this router's flags.
    assert!(
        !err.contains("to the tickwire command suggested above"),
        "{err}"
    );
}

#[test]
fn router_print_config_lists_every_key() {
    let cfg = print_config(&[]);
    let table = cfg["router"].as_table().expect("[router] table");
    let mut keys: Vec<&str> = table.keys().map(String::as_str).collect();
    keys.sort_unstable();
    // Every key but a default data_dir, which depends on the port: a comment says it
    // (regression, new-user pass: a file started from this output and given another
    // listen port shared port 7420's spool).
    let mut want: Vec<&str> = CONFIG_KEYS
        .iter()
        .copied()
        .filter(|k| *k != "data_dir")
        .collect();
    want.sort_unstable();
    assert_eq!(keys, want);
    let text = ok(&["router", "--print-config"]);
    assert!(
        text.contains("# data_dir = \"...\"   # not set: the guaranteed-messaging spool")
            && text.contains("tickwire/router-7420 (for port 7420).\n\n["),
        "{text}"
    );
    // New-user pass: the note came after [log], where a `data_dir = ...` line written
    // in its place was refused as a key of [log]. It is in [router] now: filled in
    // there, the file sets the router's data_dir.
    let filled = text.replace("# data_dir = \"...\"", "data_dir = \"/srv/filled\"");
    let file = TempFile::new("filled-data-dir", &filled);
    let again = print_config(&["--config", file.path()]);
    assert_eq!(
        again["router"]["data_dir"].as_str(),
        Some("/srv/filled"),
        "{again}"
    );
    // The defaults the help text promises.
    assert_eq!(table["listen"].as_str(), Some("127.0.0.1:7420"));
    assert_eq!(table["idle"].as_str(), Some("hybrid"));
    assert_eq!(table["slow_consumer"].as_str(), Some("discard"));
    assert_eq!(table["egress_limit"].as_integer(), Some(8 << 20));
    assert_eq!(table["egress_memory_limit"].as_integer(), Some(1 << 30));
    assert_eq!(table["max_frame"].as_integer(), Some(1 << 20));
    assert_eq!(table["sync"].as_str(), Some("fsync"));
    // New-user pass: the [log] table the file accepts is printed too (its level, unset
    // here, in a comment), and tls_client_auth, which has a default, is printed while
    // the unset tls_* keys are left out (README says which).
    assert!(text.contains("\n[log]\n# level = \"info\""), "{text}");
    assert_eq!(table["tls_client_auth"].as_str(), Some("none"));
    assert!(table.get("tls_listen").is_none() && table.get("tls_cert").is_none());
    let file = TempFile::new("log-level", "[log]\nlevel = \"warn\"\n");
    let logged = print_config(&["--config", file.path()]);
    assert_eq!(logged["log"]["level"].as_str(), Some("warn"), "{logged}");
    // A user without a rule gets no empty rule table (new-user pass: three per user,
    // `[auth.users.subscribe]` with nothing under it), and the output reads back the
    // same.
    let users = TempFile::new(
        "users",
        "[[auth.users]]\nname = \"ops\"\ntoken_sha256 = \"00000000000000000000000000000000\
         00000000000000000000000000000000\"\nadmin = true\n[[auth.users]]\nname = \"alice\"\n\
         token_sha256 = \"1111111111111111111111111111111111111111111111111111111111111111\"\n\
         publish = { allow = [\"a/>\"] }\n",
    );
    let text = ok(&["router", "--print-config", "--config", users.path()]);
    assert!(
        text.contains("[auth.users.publish]\nallow = [\"a/>\"]")
            && !text.contains("[auth.users.subscribe]")
            && !text.contains("[auth.users.queues]")
            && !text.contains("[auth.groups]"),
        "{text}"
    );
    let again = TempFile::new("users-again", &text);
    assert_eq!(
        ok(&["router", "--print-config", "--config", again.path()]),
        text
    );
    let given = print_config(&["--data-dir", "/srv/spool"]);
    assert_eq!(given["router"]["data_dir"].as_str(), Some("/srv/spool"));
    assert_eq!(table["guaranteed"].as_bool(), Some(true));
    // New-user pass: --no-guaranteed survives the round trip through a file (it was
    // not a key, so a file started from this output ran a spool).
    let off = ok(&["router", "--print-config", "--no-guaranteed"]);
    assert!(!off.contains("# data_dir"), "{off}");
    let file = TempFile::new("no-guaranteed", &off);
    let again = print_config(&["--config", file.path()]);
    assert_eq!(
        again["router"]["guaranteed"].as_bool(),
        Some(false),
        "{again}"
    );
    assert!(again["router"].get("data_dir").is_none(), "{again}");
    // Both in one file is a usage error naming them.
    let both = TempFile::new(
        "both",
        "[router]\nguaranteed = false\ndata_dir = \"/srv/x\"\n",
    );
    let (st, _, err) = run_cli(&["router", "--config", both.path()], T);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("guaranteed = false") && err.contains("data_dir"),
        "{err}"
    );
    // New-user pass: a value out of range said neither the file nor the flag it came
    // from (README: refused "with the key's name and line").
    let small = TempFile::new(
        "small-frame",
        "[router]\nlisten = \"127.0.0.1:0\"\nmax_frame = \"10\"\n",
    );
    let (st, _, err) = run_cli(&["router", "--config", small.path()], T);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("max_frame 10 is below the minimum 1024")
            && err.contains(&format!("(config file {}, line 3)", small.path())),
        "{err}"
    );
    let (st, _, err) = run_cli(
        &[
            "router",
            "--listen",
            "127.0.0.1:0",
            "--shm",
            "x",
            "--shm-ring",
            "1000",
        ],
        T,
    );
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("shm_ring 1000") && err.contains("(--shm-ring)"),
        "{err}"
    );
    // Flags show up in it.
    let cfg = print_config(&[
        "--egress-limit",
        "2MiB",
        "--egress-memory-limit",
        "64MiB",
        "--idle",
        "spin",
        "--max-clients",
        "9",
    ]);
    assert_eq!(cfg["router"]["egress_limit"].as_integer(), Some(2 << 20));
    assert_eq!(
        cfg["router"]["egress_memory_limit"].as_integer(),
        Some(64 << 20)
    );
    assert_eq!(cfg["router"]["idle"].as_str(), Some("spin"));
    assert_eq!(cfg["router"]["max_clients"].as_integer(), Some(9));
}

#[test]
fn router_config_file_is_honoured_and_flags_win() {
    let file = TempFile::new(
        "honoured",
        "[router]\n\
         name = \"from-file\"\n\
         idle = \"block\"\n\
         egress_limit = 2097152\n\
         slow_consumer = \"disconnect\"\n\
         max_clients = 7\n",
    );
    let cfg = print_config(&["--config", file.path()]);
    let t = &cfg["router"];
    assert_eq!(t["name"].as_str(), Some("from-file"));
    assert_eq!(t["idle"].as_str(), Some("block"));
    assert_eq!(t["egress_limit"].as_integer(), Some(2 << 20));
    assert_eq!(t["slow_consumer"].as_str(), Some("disconnect"));
    assert_eq!(t["max_clients"].as_integer(), Some(7));
    // Keys the file leaves out keep their defaults.
    assert_eq!(t["max_frame"].as_integer(), Some(1 << 20));

    // Flags win over the file.
    let cfg = print_config(&["--config", file.path(), "--idle", "spin"]);
    assert_eq!(cfg["router"]["idle"].as_str(), Some("spin"));
    assert_eq!(cfg["router"]["name"].as_str(), Some("from-file"));

    // --print-config output is itself a valid config file.
    let full = ok(&["router", "--print-config", "--config", file.path()]);
    let again = TempFile::new("roundtrip", &full);
    assert_eq!(
        ok(&["router", "--print-config", "--config", again.path()]),
        full
    );

    // A running router uses it.
    let router = RouterProc::start(&["--config", file.path()]);
    let doc = stats_json(&router.addr_str());
    assert_eq!(doc["router"]["name"], "from-file", "{doc}");
    assert_eq!(doc["router"]["idle"], "block", "{doc}");
    assert_eq!(doc["router"]["slow_consumer"], "disconnect", "{doc}");
}

#[test]
fn router_config_errors_are_clear() {
    let file = TempFile::new("unknown", "[router]\nbogus = 1\n");
    let (code, err) = fails(&["router", "--config", file.path(), "--print-config"]);
    assert_eq!(
        code, 2,
        "a config file that does not parse is a usage error: {err}"
    );
    assert!(err.contains(file.path()), "{err}");
    assert!(err.contains("unknown key \"bogus\" in [router]"), "{err}");
    assert!(err.contains("egress_limit"), "lists the valid keys: {err}");

    let file = TempFile::new("badtype", "[router]\nidle = \"fast\"\n");
    let (code, err) = fails(&["router", "--config", file.path(), "--print-config"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(file.path()) && err.contains("fast"), "{err}");
    // Only what the router takes is offered (new-user pass: `yield` was offered, then
    // refused).
    assert!(
        err.contains("block, spin or hybrid") || err.contains("`block`, `spin` or `hybrid`"),
        "{err}"
    );
    assert!(!err.contains("yield"), "{err}");

    let file = TempFile::new("syntax", "[router\nidle = \"spin\"\n");
    let (code, err) = fails(&["router", "--config", file.path(), "--print-config"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(file.path()), "{err}");

    let file = TempFile::new("toplevel", "listen = \"127.0.0.1:1\"\n");
    let (_, err) = fails(&["router", "--config", file.path(), "--print-config"]);
    assert!(
        err.contains("unknown key \"listen\" at the top level"),
        "{err}"
    );

    let missing = std::env::temp_dir().join("tickwire-cli-test-no-such-file.toml");
    let (_, err) = fails(&[
        "router",
        "--config",
        missing.to_str().unwrap(),
        "--print-config",
    ]);
    assert!(err.contains("reading config file"), "{err}");

    // Values that parse but do not make sense together.
    let (_, err) = fails(&["router", "--egress-limit", "64K", "--print-config"]);
    assert!(
        err.contains("egress_limit") && err.contains("max_frame"),
        "{err}"
    );
}

/// Regression (new-user review): a misspelt key got serde's list of all ~43 keys of
/// [router] and no suggestion.
#[test]
fn a_misspelt_config_key_gets_a_suggestion_with_its_line_and_table() {
    let cases = [
        (
            "[router]\nlisten = \"127.0.0.1:0\"\nmax_frmae = 100000\n",
            &[
                "unknown key \"max_frmae\" in [router]; did you mean \"max_frame\"?",
                "line 3",
            ][..],
        ),
        (
            "[auth]\nanonymus = \"deny\"\n",
            &[
                "unknown key \"anonymus\" in [auth]; did you mean \"anonymous\"?",
                "line 2",
            ],
        ),
        (
            "[router]\n[[router.multicast]]\ntopics = [\"md/>\"]\nmax_datagrm = 1400\n",
            &[
                "unknown key \"max_datagrm\" in [router.multicast]; did you mean \"max_datagram\"?",
                "line 4",
            ],
        ),
        (
            "[routr]\nlisten = \"127.0.0.1:0\"\n",
            &[
                "unknown key \"routr\" at the top level; did you mean \"router\"?",
                "line 1",
            ],
        ),
        // A host name in listen takes another path through the parser (no line there).
        (
            "[router]\nlisten = \"localhost:0\"\nmax_frmae = 100000\n",
            &["unknown key \"max_frmae\" in [router]; did you mean \"max_frame\"?"],
        ),
        // In an inline table of an [[auth.users]] element: was "in [auth]", quoting the
        // [[auth.users]] header line (new-user pass).
        (
            "[router]\nlisten = \"127.0.0.1:0\"\n[[auth.users]]\nname = \"alice\"\n\
             subscribe = {alow = [\"x\"]}\n",
            &[
                "unknown key \"alow\" in [[auth.users]] subscribe; did you mean \"allow\"?",
                "line 5",
                "5 | subscribe = {alow = [\"x\"]}",
            ],
        ),
        (
            "[router]\nlisten = \"localhost:0\"\n[[auth.users]]\nname = \"alice\"\n\
             subscribe = {alow = [\"x\"]}\n",
            &["unknown key \"alow\" in [[auth.users]] subscribe; did you mean \"allow\"?"],
        ),
    ];
    for (i, (text, words)) in cases.iter().enumerate() {
        let file = TempFile::new(&format!("misspelt-{i}"), text);
        let (_, err) = fails(&["router", "--config", file.path(), "--print-config"]);
        assert!(err.contains(file.path()), "{err}");
        for w in *words {
            assert!(err.contains(w), "{text}: error lacks {w:?}:\n{err}");
        }
        // The valid keys are still listed, on lines a terminal shows whole.
        assert!(err.contains("valid keys"), "{err}");
        assert!(
            err.lines()
                .all(|l| l.len() <= 100 || l.contains(file.path())),
            "{err}"
        );
    }
    // Nothing near: no suggestion, only the list.
    let file = TempFile::new("misspelt-far", "[router]\nzzzz = 1\n");
    let (_, err) = fails(&["router", "--config", file.path(), "--print-config"]);
    assert!(err.contains("unknown key \"zzzz\" in [router]"), "{err}");
    assert!(!err.contains("did you mean"), "{err}");
    assert!(err.contains("max_frame"), "{err}");
}

/// Regression (new-user review): `max_frame = "1MiB"` was a type error in the config
/// file though `--max-frame 1MiB` works: every size key takes both forms.
#[test]
fn config_size_keys_take_the_command_lines_size_syntax() {
    let file = TempFile::new(
        "sizes",
        "[router]\n\
         max_frame = \"1MiB\"\n\
         egress_limit = \"16MiB\"\n\
         egress_memory_limit = \"2G\"\n\
         read_buffer = \"512K\"\n\
         read_memory_limit = 134217728\n\
         retain_bytes = \"128MiB\"\n\
         max_stored_bytes = \"2GiB\"\n\
         cache_max_bytes = \"32MiB\"\n\
         shm_ring = \"64KiB\"\n\
         [[router.multicast]]\n\
         topics = [\"md/>\"]\n\
         max_datagram = \"1K\"\n",
    );
    let cfg = print_config(&["--config", file.path()]);
    let t = &cfg["router"];
    for (key, want) in [
        ("max_frame", 1i64 << 20),
        ("egress_limit", 16 << 20),
        ("egress_memory_limit", 2 << 30),
        ("read_buffer", 512 << 10),
        ("read_memory_limit", 128 << 20),
        ("retain_bytes", 128 << 20),
        ("max_stored_bytes", 2 << 30),
        ("cache_max_bytes", 32 << 20),
        ("shm_ring", 64 << 10),
    ] {
        assert_eq!(t[key].as_integer(), Some(want), "{key}: {t}");
    }
    assert_eq!(t["multicast"][0]["max_datagram"].as_integer(), Some(1024));

    for (i, (line, words)) in [
        (
            "max_frame = \"10GiB\"",
            &["max_frame: 10737418240 is out of range", "4294967295"][..],
        ),
        (
            "max_frame = 4294967296",
            &["max_frame: 4294967296 is out of range"],
        ),
        (
            "egress_limit = \"1.5MiB\"",
            &["egress_limit: \"1.5MiB\"", "a size is a whole number"],
        ),
        (
            "read_buffer = \"8X\"",
            &["read_buffer: \"8X\"", "unknown size suffix"],
        ),
        (
            "cache_max_bytes = -1",
            &["cache_max_bytes: -1 is not a size"],
        ),
    ]
    .iter()
    .enumerate()
    {
        let file = TempFile::new(&format!("badsize-{i}"), &format!("[router]\n{line}\n"));
        let (_, err) = fails(&["router", "--config", file.path(), "--print-config"]);
        assert!(err.contains(file.path()) && err.contains("line 2"), "{err}");
        for w in *words {
            assert!(err.contains(w), "{line}: error lacks {w:?}:\n{err}");
        }
    }
}

#[test]
fn bad_flag_values_are_clear_errors() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["router", "--idle", "fast"],
            &["'fast'", "--idle", "block, spin or hybrid"],
        ),
        (
            &["router", "--slow-consumer", "maybe"],
            &["'maybe'", "--slow-consumer", "discard"],
        ),
        (
            &["router", "--egress-limit", "8X"],
            &["'8X'", "--egress-limit", "suffix"],
        ),
        (
            &["router", "--max-frame", "big"],
            &["'big'", "--max-frame", "not a size"],
        ),
        (
            &["router", "--listen", "nowhere"],
            &["'nowhere'", "--listen"],
        ),
        (&["router", "--no-such-flag"], &["--no-such-flag"]),
        (
            &["pub", "t", "--count", "5", "--rate", "fast"],
            &["'fast'", "--rate", "not a rate"],
        ),
        (&["demo", "--idle", "lazy"], &["'lazy'", "--idle"]),
        (
            &["sub", "--router", "127.0.0.1", "x"],
            &["'127.0.0.1'", "--router", "no port", "HOST:PORT"],
        ),
        (
            &["stats", "--router", "localhost:http"],
            &["--router", "not a port number"],
        ),
        (&["sub"], &["PATTERN"]),
        // Regression: `--port` was a bare "unexpected argument"; a port alone for
        // --listen said only "no port".
        (
            &["router", "--port", "5000"],
            &["--port", "--listen", "127.0.0.1:5000"],
        ),
        (
            &["router", "--listen", "5000"],
            &["port without an address", "127.0.0.1:5000"],
        ),
        // Regression: an unquoted `md/>` reaches the command as `md/` (the shell took
        // `>` for a redirection); the error says to quote it. Checked before connecting.
        (&["sub", "md/"], &["'md/>'", "quote", "redirection"]),
        (&["cache", "show", "md/"], &["'md/>'", "quote"]),
        (
            &["queue", "create", "q", "--sub", "orders/"],
            &["'orders/>'", "quote"],
        ),
        (&["router", "--cache", "md/"], &["'md/>'", "quote"]),
        // Regression: a queue without --sub was created, and no message ever reached it.
        (
            &["queue", "create", "orders"],
            &["no message", "--sub 'orders/>'", "--no-sub"],
        ),
        // A spool thread pinned to a CPU that is not there: refused, as `bench --pin`
        // refuses it (new-user pass: it started unpinned after a log line).
        (
            &["router", "--spool-cpu", "999", "--print-config"],
            &["spool_cpu 999 is not available to this process"],
        ),
        // `sub --queue #DEAD_MSG_QUEUE` unquoted: the shell drops the name as a comment;
        // clap's error gets a tip saying so (new-user pass).
        (
            &["sub", "--queue"],
            &[
                "a value is required for '--queue <NAME>'",
                "'#DEAD_MSG_QUEUE'",
                "comment",
            ],
        ),
        // --group with a shared pattern: a usage error before connecting (nothing
        // listens at port 1).
        (
            &[
                "sub",
                "$share/x/a",
                "--group",
                "pool",
                "--router",
                "127.0.0.1:1",
            ],
            &["give one or the other"],
        ),
        (
            &[
                "reply",
                "$share/x/a",
                "--group",
                "pool",
                "--router",
                "127.0.0.1:1",
            ],
            &["give one or the other"],
        ),
        // ...and the command it suggests goes to the router this one named.
        (
            &["queue", "create", "orders", "--router", "127.0.0.1:7001"],
            &["`tickwire queue create orders --sub 'orders/>' --router 127.0.0.1:7001`"],
        ),
        // Every duration flag takes the one syntax, and a bad one names the examples.
        (
            &["demo", "--duration", "soon"],
            &["'soon'", "--duration", "5s", "250ms"],
        ),
        (
            &["bench", "fanout", "--duration", "soon"],
            &["'soon'", "--duration", "5s", "250ms"],
        ),
        (
            &["router", "--handshake-timeout", "soon"],
            &["'soon'", "--handshake-timeout", "5s"],
        ),
        (
            &["feed", "--retransmit-timeout", "soon"],
            &["'soon'", "--retransmit-timeout", "5s"],
        ),
        // An old spelling and its new one are not both accepted.
        (
            &["router", "--stall-timeout", "1s", "--stall-timeout-ms", "5"],
            &["--stall-timeout"],
        ),
        // Regression: these exited 1, unlike every other usage error.
        (&["pub", "t"], &["nothing to publish", "MESSAGE", "--stdin"]),
        (
            &["mcast", "send", "md/x", "--loss", "2"],
            &["'2'", "--loss", "fraction"],
        ),
        (&["md", "generate", "--symbols", "0"], &["'0'", "--symbols"]),
        (
            &["bench", "pingpong", "--sizes", "0"],
            &["'0'", "--sizes", "too small"],
        ),
        // New-user pass: output files were checked only after the whole run (a bad
        // path lost the results), a missing directory was created without a word, and
        // --plot x.png wrote SVG under a PNG name.
        (
            &["bench", "pingpong", "--json", "/nonexistent-tw/x.json"],
            &["--json", "/nonexistent-tw", "does not exist"],
        ),
        (
            &["bench", "pingpong", "--json", "/proc/x.json"],
            &["--json", "cannot write /proc/x.json"],
        ),
        (
            &["bench", "stream", "--json", "/tmp"],
            &["--json", "is a directory"],
        ),
        (
            &["bench", "fanout", "--plot", "chart.png"],
            &["--plot", "must end in .svg"],
        ),
        (
            &["bench", "md-replay", "--plot", "chart.png"],
            &["--plot", "must end in .svg"],
        ),
        (
            &["bench", "mcast-fanout", "--json", "/nonexistent-tw/x.json"],
            &["--json", "does not exist"],
        ),
        // Exited 1, unlike every other usage error.
        (
            &[
                "bench",
                "pingpong",
                "--sizes",
                "70000",
                "--transports",
                "udp",
            ],
            &["--sizes: 70000 does not fit in one UDP datagram"],
        ),
        (
            &["bench", "stream", "--size", "70000", "--transport", "udp"],
            &["--size 70000 does not fit in one UDP datagram"],
        ),
        (
            &["router", "--shm", "a/b/"],
            &["'a/b/'", "letters, digits", "socket path"],
        ),
        (
            &["router", "--shm", "bad name"],
            &["'bad name'", "letters, digits"],
        ),
        // Regression: a mistyped level was taken for a module name and silenced every
        // log line; settings out of range and a port above 65535 exited 1.
        (
            &["router", "--log-level", "verbose", "--print-config"],
            &["\"verbose\" is not a level", "error, warn, info"],
        ),
        (
            &["router", "--sync", "sometimes", "--print-config"],
            &["sync \"sometimes\"", "fsync"],
        ),
        (
            &["router", "--http", "99999", "--listen", "127.0.0.1:0"],
            &["--http", "not a port number (at most 65535)"],
        ),
        (
            &["sub", "x", "--router", "shm:bad name"],
            &["not a shared-memory name", "letters, digits"],
        ),
    ];
    for (args, words) in cases {
        let (code, err) = fails(args);
        assert_eq!(code, 2, "usage errors exit 2: {args:?}: {err}");
        for w in *words {
            assert!(
                err.contains(w),
                "tickwire {args:?}: error lacks {w:?}:\n{err}"
            );
        }
    }
    // An invalid topic is a usage error (status 2, as a bad pattern), refused before
    // connecting anywhere.
    let (code, err) = fails(&["pub", "--router", &dead_addr().to_string(), "md/*", "x"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid value 'md/*' for '<TOPIC>': wildcard character at byte 3"),
        "{err}"
    );
}

/// Regressions from a new-user review: each of these ran (or aborted with a backtrace,
/// or answered at random) instead of being refused as a usage error, before connecting.
#[test]
fn impossible_values_are_usage_errors_before_anything_runs() {
    let dead = dead_addr().to_string();
    let tls_dead = format!("tls://{dead}");
    let tls_needs_ca = format!("--router {tls_dead} connects over TLS");
    let http_beyond_loopback = format!("0.0.0.0:{}", dead_addr().port());
    let cases: &[(&[&str], &[&str])] = &[
        // Aborted "memory allocation of 100000000000 bytes failed" (status 134).
        (
            &[
                "pub",
                "--router",
                &dead,
                "a/b",
                "--size",
                "100000000000",
                "--count",
                "1",
            ],
            &[
                "--size 100000000000 is too large",
                "protocol's largest frame",
            ],
        ),
        (
            &[
                "mcast",
                "send",
                "md/X",
                "--count",
                "1",
                "--size",
                "100000000000",
            ],
            &["--size 100000000000 is too large", "--max-datagram"],
        ),
        // Sometimes a reply, mostly "timed out after 0ns".
        (
            &[
                "request",
                "--router",
                &dead,
                "svc/echo",
                "hello",
                "--timeout",
                "0",
            ],
            &["--timeout", "must be positive"],
        ),
        // New-user pass: "timeouts must be at least 1 ms" named neither the timeout
        // nor the flag; max_clients and cache_depth named no flag.
        (
            &["router", "--drain-timeout", "0", "--print-config"],
            &["drain_timeout_ms 0 is below the minimum 1 ms (--drain-timeout)"],
        ),
        (
            &["router", "--stall-timeout", "0s", "--print-config"],
            &["stall_timeout_ms 0", "(--stall-timeout)"],
        ),
        // "handshake_timeout_ms 0 is below the minimum 1 ms": a 0 nobody had given (and
        // 1.5ms was 1 ms, where the config file refuses "1.5ms").
        (
            &["router", "--handshake-timeout", "0.4ms", "--print-config"],
            &["--handshake-timeout 400µs is not a whole number of milliseconds"],
        ),
        (
            &["router", "--hybrid-spin", "0.5us", "--print-config"],
            &["--hybrid-spin 500ns is not a whole number of microseconds"],
        ),
        (
            &["router", "--drain-timeout", "1.5ms", "--print-config"],
            &["--drain-timeout 1.5ms is not a whole number of milliseconds"],
        ),
        (
            &["router", "--max-clients", "0", "--print-config"],
            &["max_clients", "(--max-clients)"],
        ),
        (
            &["router", "--cache-depth", "2000", "--print-config"],
            &["cache_depth 2000 is out of range", "(--cache-depth)"],
        ),
        // Exited 1 with "out of range integral type conversion attempted".
        (
            &["router", "--max-frame", "10GiB", "--print-config"],
            &["--max-frame 10737418240 is out of range", "4294967295"],
        ),
        // "unknown size suffix (use K, M or G)" though MiB is one.
        (
            &["router", "--max-frame", "1.5MiB"],
            &["'1.5MiB'", "a size is a whole number", "M/MiB"],
        ),
        (
            &[
                "queue",
                "create",
                "q",
                "--sub",
                "a/>",
                "--max-bytes",
                "1.5GiB",
            ],
            &["'1.5GiB'", "a size is a whole number", "G/GiB"],
        ),
        // Queue-only flags were accepted, and ignored, without --queue.
        (
            &["sub", "--router", &dead, "a/>", "--start", "beginning"],
            &["--start only applies with --queue"],
        ),
        (
            &["sub", "--router", &dead, "a/>", "--window", "5"],
            &["--window only applies with --queue"],
        ),
        // The four below exited 1, as if something had failed at run time (a second
        // new-user review).
        (
            &[
                "router",
                "--no-guaranteed",
                "--listen",
                "127.0.0.1:0",
                "--http",
                &http_beyond_loopback,
            ],
            &["--http 0.0.0.0:", "--http-auth FILE", "--http-open"],
        ),
        (
            &["pub", "--router", &tls_dead, "a/b", "hello"],
            &[&tls_needs_ca, "needs --ca FILE"],
        ),
        (
            &["sub", "--router", &tls_dead, "a/>"],
            &[&tls_needs_ca, "needs --ca FILE"],
        ),
        (
            &["pub", "--router", &dead, "--tls", "a/b", "hello"],
            &["--tls connects over TLS", "needs --ca FILE"],
        ),
        // --file does not exist: the value is refused before the file is read.
        (
            &["md", "publish", "--file", "/nonexistent", "--loss", "2"],
            &["--loss", "a probability from 0 to 1"],
        ),
        (
            &[
                "md",
                "publish",
                "--file",
                "/nonexistent",
                "--loss-b",
                "1.5",
                "--group-b",
                "239.1.1.2:26400",
            ],
            &["--loss-b", "a probability from 0 to 1"],
        ),
        (
            &[
                "md",
                "publish",
                "--file",
                "/nonexistent",
                "--session",
                "TICKWIRE0123",
            ],
            &[
                "--session",
                "at most 10 printable ASCII characters",
                "12 bytes",
            ],
        ),
        (
            &["feed", "--session", "TICKWIRE0123"],
            &["--session", "at most 10 printable ASCII characters"],
        ),
        // Captured nothing and exited 0 (new-user pass).
        (
            &[
                "md",
                "capture",
                "--group",
                "239.1.1.1:26400",
                "--out",
                "never-written.pcap",
                "--duration",
                "0s",
            ],
            &["--duration", "captures nothing"],
        ),
        // Was accepted and ignored without --http (new-user pass); then refused with
        // clap's generic "required arguments were not provided" (second pass).
        (
            &[
                "router",
                "--no-guaranteed",
                "--listen",
                "127.0.0.1:0",
                "--probe-ms",
                "1s",
            ],
            &["--probe-ms needs --http (the probe feeds the monitoring endpoint)"],
        ),
        // New-user pass: TLS files without a TLS listener ran plaintext only, silently.
        (
            &[
                "router",
                "--no-guaranteed",
                "--tls-cert",
                "router.pem",
                "--tls-key",
                "router.key",
                "--print-config",
            ],
            &["add tls_listen (--tls-listen ADDR)"],
        ),
        // New-user pass: "invalid digit found in string", "is not a rate" for a count,
        // and a --count 0 that `mcast recv` took (and `pub` refuses).
        (
            &["router", "--max-clients", "abc", "--print-config"],
            &["\"abc\" is not a whole number", "--max-clients"],
        ),
        (
            &[
                "queue",
                "create",
                "q",
                "--sub",
                "a/>",
                "--max-messages",
                "x1",
            ],
            &["\"x1\" is not a whole number", "--max-messages"],
        ),
        (
            &["bench", "pingpong", "--iterations", "abc"],
            &["\"abc\" is not a count"],
        ),
        (
            &[
                "mcast",
                "recv",
                "--group",
                "239.255.74.9:7440",
                "--count",
                "0",
            ],
            &["at least 1 is needed", "--count"],
        ),
        (
            &[
                "mcast",
                "send",
                "--group",
                "239.255.74.9:7440",
                "t",
                "--count",
                "0",
            ],
            &["at least 1 is needed", "--count"],
        ),
        // New-user pass: a control character in --name got the router's "malformed
        // Hello frame" and exit 1.
        (
            &["sub", "x/>", "--name", "a\nb", "--router", "127.0.0.1:1"],
            &["a client name may not hold control characters", "--name"],
        ),
        // New-user pass: TLS flags with a shared-memory address were ignored (exit 0,
        // no TLS).
        (
            &[
                "pub",
                "a/b",
                "c",
                "--router",
                "shm:nosuch",
                "--tls",
                "--ca",
                "ca.pem",
            ],
            &["--tls is for TLS", "shared-memory address"],
        ),
        (
            &["sub", "a/b", "--router", "shm:nosuch", "--ca", "ca.pem"],
            &["--ca is for TLS", "shared-memory address"],
        ),
        // New-user pass: a negative value read as an unknown flag, with clap's tip
        // (`use '-- -5'`) that does not work for an option.
        (
            &["pub", "md/x", "--count", "-5"],
            &["\"-5\" is not a whole number", "--count"],
        ),
        (
            &["router", "--stall-timeout", "-3s", "--print-config"],
            &["out of range: negative", "--stall-timeout"],
        ),
        (
            &[
                "mcast",
                "send",
                "--group",
                "239.255.74.9:7440",
                "t",
                "--loss",
                "-0.1",
            ],
            &["got \"-0.1\"", "--loss"],
        ),
        // New-user pass: these bench flag checks exited 1, as a failed run does.
        (
            &["bench", "fanout", "--duration", "0"],
            &["--duration must be above 0"],
        ),
        (
            &["bench", "guaranteed", "--rate", "0"],
            &["--rate must be positive"],
        ),
        (
            &["bench", "mcast-fanout", "--receivers", "0"],
            &["--receivers takes counts from 1 to 64"],
        ),
        (
            &[
                "bench",
                "pingpong",
                "--router",
                "127.0.0.1:1",
                "--transports",
                "tcp",
            ],
            &["which --transports does not select"],
        ),
    ];
    // Ran the whole benchmark unpinned after "cannot pin ... running unpinned".
    let benches = ["pingpong", "fanout", "stream", "tick-to-trade", "md-replay"];
    let pins: Vec<[&str; 4]> = benches
        .iter()
        .map(|b| ["bench", *b, "--pin", "0,100000"])
        .collect();
    let cases: Vec<(&[&str], &[&str])> = cases
        .iter()
        .copied()
        .chain(pins.iter().map(|p| {
            (
                &p[..],
                &["--pin", "is not available to this process", "run on CPUs"][..],
            )
        }))
        .collect();
    for (args, words) in cases {
        let (code, err) = fails(args);
        assert_eq!(code, 2, "usage errors exit 2: {args:?}: {err}");
        let said = err.lines().filter(|l| l.starts_with("error:")).count();
        assert_eq!(said, 1, "one error line: {args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("integral"),
            "{err}"
        );
        for w in words {
            assert!(
                err.contains(w),
                "tickwire {args:?}: error lacks {w:?}:\n{err}"
            );
        }
    }
}

/// Regression: `pub --size 3GiB` (below the protocol's bound) filled 3 GiB before
/// failing; the router's max frame, learnt at connect, refuses it first.
#[test]
fn pub_refuses_a_size_above_the_routers_max_frame_before_building_it() {
    let router = RouterProc::start(&["--no-guaranteed", "--max-frame", "64KiB"]);
    let addr = router.addr_str();
    for size in ["3GiB", "65536"] {
        let (code, err) = fails(&[
            "pub", "--router", &addr, "a/b", "--size", size, "--count", "1",
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("is too large"), "{err}");
        assert!(
            err.contains("the router's max frame is 65536 bytes"),
            "{err}"
        );
    }
    // The largest payload that fits still goes out: 64 KiB less the header and topic.
    let fits = (65536 - 8 - "a/b".len()).to_string();
    ok(&[
        "pub", "--router", &addr, "a/b", "--size", &fits, "--count", "1",
    ]);
}

/// New-user pass: `pub --count 1` printed no summary where `--count 2` did; one message
/// without --count still goes quietly.
#[test]
fn pub_count_one_has_its_summary_and_a_plain_pub_none() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let (st, _, err) = run_cli(&["pub", "--router", &addr, "a/b", "x", "--count", "1"], T);
    assert!(st.success(), "{err}");
    assert!(
        err.contains("published 1 message of 1 byte to a/b"),
        "{err}"
    );
    let (st, _, err) = run_cli(&["pub", "--router", &addr, "a/b", "x"], T);
    assert!(st.success(), "{err}");
    assert_eq!(err, "", "a plain pub is quiet");
    // New-user pass: a load run given only --size said nothing, like a plain pub.
    let (st, _, err) = run_cli(&["pub", "--router", &addr, "a/b", "--size", "10"], T);
    assert!(st.success(), "{err}");
    assert!(
        err.contains("published 1 message of 10 bytes to a/b"),
        "{err}"
    );
    // New-user pass: --count 0 published nothing and exited 0 (sub refuses it); --rate
    // without load mode was ignored without a word.
    for extra in [&["--count", "0"][..], &["--count", "0", "--guaranteed"][..]] {
        let mut args = vec!["pub", "--router", &addr, "a/b", "x"];
        args.extend_from_slice(extra);
        let (st, _, err) = run_cli(&args, T);
        assert_eq!(st.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("--count"), "{extra:?}: {err}");
        assert!(err.contains("at least 1"), "{extra:?}: {err}");
    }
    // New-user pass: `seq 10 | pub --stdin --count 5` published all 10 lines; --rate
    // was as silently ignored with --stdin.
    for extra in [&["--count", "5"][..], &["--rate", "10"][..]] {
        let mut args = vec!["pub", "--router", &addr, "a/b", "--stdin"];
        args.extend_from_slice(extra);
        let (st, _, err) = run_cli(&args, T);
        assert_eq!(st.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("cannot be used with"), "{extra:?}: {err}");
    }
    let (st, _, err) = run_cli(&["pub", "--router", &addr, "a/b", "x", "--rate", "10"], T);
    assert!(st.success(), "{err}");
    assert!(err.contains("--rate paces the --count messages"), "{err}");
}

/// Every command fails at once without a router, the guaranteed ones too (they retried
/// silently for `--give-up-after`, 60 s, before `retry_first`).
#[test]
fn commands_without_a_router_say_to_start_one() {
    let addr = dead_addr().to_string();
    for args in [
        vec!["pub", "--router", &addr, "md/x", "hello"],
        vec!["pub", "--guaranteed", "--router", &addr, "md/x", "hello"],
        vec!["sub", "--router", &addr, "md/>"],
        vec!["sub", "--queue", "q", "--router", &addr],
        vec!["stats", "--router", &addr],
    ] {
        let started = Instant::now();
        let (code, err) = fails(&args);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(&addr), "{args:?}: {err}");
        assert!(
            err.contains("is `tickwire router` running?"),
            "{args:?}: {err}"
        );
    }
}

/// A short demo; --idle block keeps the in-process router from spinning a core.
const SHORT_DEMO: &[&str] = &[
    "demo",
    "--duration",
    "1",
    "--rate",
    "2000",
    "--idle",
    "block",
];

#[test]
fn ctrl_c_ends_the_demo_in_order_and_leaves_nothing_behind() {
    use std::io::BufRead;
    let mut args = SHORT_DEMO.to_vec();
    args.push("--no-tick-to-trade");
    let mut child = common::cli(&args).spawn().expect("spawn demo");
    // "router child process on 127.0.0.1:P, spool in /tmp/tickwire-demo-spool-X (sync …"
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut out = String::new();
    let (router, spool) = loop {
        let line = match lines.next() {
            Some(l) => l.expect("demo stdout"),
            None => panic!("the demo ended before its guaranteed-messaging part: {out}"),
        };
        out.push_str(&line);
        out.push('\n');
        if let Some(rest) = line.strip_prefix("router child process on ") {
            let (addr, rest) = rest.split_once(", spool in ").expect("spool path");
            let dir = rest.split(" (").next().expect("a path");
            break (addr.to_owned(), PathBuf::from(dir));
        }
    };
    assert!(spool.is_dir(), "{}", spool.display());
    common::interrupt(&child);
    let status = common::wait_child(&mut child, T, "demo after Ctrl-C");
    for line in lines {
        out.push_str(&line.expect("demo stdout"));
        out.push('\n');
    }
    let (_, err) = common::take_output(&mut child);
    assert_eq!(status.code(), Some(130), "{out}\n{err}");
    assert!(err.contains("stopping the demo"), "{err}");
    // The part under way ended with a true report; the rest was skipped.
    assert!(out.contains("stopped by Ctrl-C after "), "{out}");
    assert!(
        out.contains("guaranteed messaging stopped by Ctrl-C: 0 acknowledged orders missing"),
        "{out}"
    );
    // An interrupted part is not reported as passed.
    assert!(
        out.contains("guaranteed messaging stopped, market data skipped, tick-to-trade skipped"),
        "{out}"
    );
    // The router child is gone, and so is its spool directory.
    assert!(
        std::net::TcpStream::connect(&router).is_err(),
        "the demo's router child still listens on {router}"
    );
    assert!(
        !spool.exists(),
        "the stopped demo left {} behind",
        spool.display()
    );
}

#[test]
fn demo_runs_and_reports_ok() {
    let (st, out, err) = run_cli(SHORT_DEMO, Duration::from_secs(120));
    assert!(
        st.success(),
        "demo failed: {st}\nstdout: {out}\nstderr: {err}"
    );
    assert!(out.contains("pub/sub PASS"), "stdout: {out}\nstderr: {err}");
    for name in ["nasdaq", "aapl", "prefix", "risk"] {
        assert!(out.contains(name), "report lacks subscriber {name}: {out}");
    }
    // Regression: the verdicts were OK, PASS and NO LOSS by part, and the ALL row left
    // EXPECTED (and LOST, DUP) blank. Now PASS (or FAIL) everywhere, and the ALL row's
    // counts are the sums of the subscribers' rows.
    for old in ["result: OK", "NO LOSS"] {
        assert!(!out.contains(old), "{old:?} in: {out}");
    }
    assert!(
        out.contains(
            "pub/sub PASS, guaranteed messaging PASS, market data PASS, tick-to-trade PASS"
        ),
        "{out}"
    );
    let counts = |line: &str| -> Vec<u64> {
        line.split_whitespace()
            .filter_map(|w| w.parse::<u64>().ok())
            .take(4)
            .collect()
    };
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("SUB "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let rows: Vec<Vec<u64>> = ["nasdaq", "aapl", "prefix", "risk"]
        .iter()
        .map(|name| {
            let row = table
                .iter()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no row {name}: {out}"));
            counts(row)
        })
        .collect();
    let all = table
        .iter()
        .find(|l| l.starts_with("ALL "))
        .unwrap_or_else(|| panic!("no ALL row: {out}"));
    let sums: Vec<u64> = (0..4).map(|k| rows.iter().map(|r| r[k]).sum()).collect();
    assert_eq!(counts(all), sums, "ALL row: {all}\n{out}");
    assert!(sums[0] > 0 && sums[0] == sums[1], "{out}");
    // The market-data and tick-to-trade parts ran too (the exit code covers their
    // losses); the tick-to-trade report names both algos.
    assert!(out.contains("== market data =="), "stdout: {out}");
    let t2t = out
        .split("== tick-to-trade (FIX) ==")
        .nth(1)
        .unwrap_or_else(|| panic!("no tick-to-trade part: {out}"));
    for algo in ["builtin", "raw"] {
        assert!(t2t.contains(algo), "tick-to-trade lacks {algo}: {t2t}");
    }
    // The market-data part pins its thread while it runs and must give it back: the
    // tick-to-trade part after it sees (and reports) every CPU, not the one it was left on.
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert!(
        t2t.contains(&format!("({cpus} cores)")),
        "tick-to-trade ran on fewer CPUs than the machine has ({cpus}): {t2t}"
    );
}

/// `tickwire ARGS` with stdout and stderr piped to the test.
fn spawn_piped(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tickwire")
}

#[test]
fn sub_ends_quietly_when_its_reader_goes_away() {
    // `tickwire sub ... | head -1`: once `head` has its line and exits, sub must exit
    // too, even if no further message ever arrives.
    use std::io::BufRead;
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = spawn_piped(&["sub", "--router", &r, "pipe/>"]);
    wait_for_subscriber(&r, "tickwire-sub", 1);
    for _ in 0..5 {
        ok(&["pub", "--router", &r, "pipe/x", "hello"]);
    }
    let mut reader = std::io::BufReader::new(sub.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("first line");
    assert_eq!(line, "pipe/x hello\n");
    drop(reader); // like `head -1` exiting
    let status = common::wait_child(&mut sub, T, "tickwire sub, whose stdout reader went away,");
    let (_, err) = common::take_output(&mut sub);
    assert!(status.success(), "sub: {status}, stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Ctrl-C on `sub` writes out what arrived and prints the count, with or without
/// --quiet. Regression: it said "reporting what was measured" and then, without
/// --quiet, reported nothing; and a router going away while it stopped made it report
/// "reconnecting" (once it even reconnected).
#[test]
fn sub_reports_its_count_when_stopped_with_ctrl_c() {
    use std::io::BufRead;
    for quiet in [true, false] {
        let router = RouterProc::start(&[]);
        let r = router.addr_str();
        let mut args = vec!["sub", "--router", &r, "quiet/>"];
        if quiet {
            args.push("--quiet");
        }
        let mut sub = spawn_piped(&args);
        wait_for_subscriber(&r, "tickwire-sub", 1);
        ok(&[
            "pub", "--router", &r, "quiet/x", "--count", "7", "--size", "16",
        ]);
        // The router has written all 7 to the subscriber before it is stopped.
        let deadline = Instant::now() + T;
        loop {
            let doc = stats_json(&r);
            let sent = doc["clients"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["name"] == "tickwire-sub" && c["msgs_out"] == 7)
            });
            if sent {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the 7 messages never left: {doc}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        // ...and the subscriber has read them: its socket holds nothing unread.
        let port = stats_json(&r)["clients"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "tickwire-sub"))
            .and_then(|c| c["addr"].as_str()?.rsplit(':').next()?.parse::<u16>().ok())
            .expect("the subscriber's port");
        let deadline = Instant::now() + T;
        while unread_on_loopback_port(port) != Some(0) {
            assert!(
                Instant::now() < deadline,
                "the subscriber never read its 7 messages"
            );
            thread::sleep(Duration::from_millis(20));
        }
        let pid = sub.id().to_string();
        let signal = |sig: &str| {
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .expect("kill")
        };
        let stderr = sub.stderr.take().expect("stderr");
        let (noted, note) = std::sync::mpsc::channel();
        let err_reader = thread::spawn(move || {
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("stopping") {
                    noted.send(()).ok();
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        assert!(signal("-INT").success());
        note.recv_timeout(T).expect("a note that it is stopping");
        // Stopping now: the router goes away while the command is frozen, before its
        // next poll (if it has not exited already). That is no news to report, and
        // nothing must reconnect.
        signal("-STOP");
        drop(router);
        thread::sleep(Duration::from_millis(200));
        signal("-CONT");
        let status = common::wait_child(&mut sub, T, "tickwire sub after Ctrl-C");
        let (out, _) = common::take_output(&mut sub);
        let err = err_reader.join().expect("stderr reader");
        assert!(
            status.success(),
            "sub (quiet: {quiet}): {status}, stderr: {err}"
        );
        assert!(
            err.contains("received 7 messages"),
            "no summary after Ctrl-C (quiet: {quiet}): {err}"
        );
        assert!(!err.contains("reporting what was measured"), "{err}");
        // (The summary may count the disconnection: "1 disconnection, 0 reconnections".)
        for link in ["reconnecting", "reconnected after"] {
            assert!(!err.contains(link), "quiet: {quiet}: {err}");
        }
        let printed = if quiet { 0 } else { 7 };
        assert_eq!(out.lines().count(), printed, "{out}");
    }
}

/// New-user pass: `timeout 2 tickwire sub ...` sometimes ended with "aborting" and no
/// summary: `timeout` signals the command and then its process group, and the second
/// SIGTERM read as "Ctrl-C again". Two signals close together are one request now.
#[test]
fn a_signal_sent_twice_at_once_stops_sub_with_its_summary() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = spawn_piped(&["sub", "--router", &r, "twice/>", "--quiet"]);
    wait_for_subscriber(&r, "tickwire-sub", 1);
    let pid = sub.id().to_string();
    // As `timeout` does: the process, then its group (here: the process again).
    let st = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}; kill -TERM {pid}")])
        .status()
        .expect("sh");
    assert!(st.success());
    let status = common::wait_child(&mut sub, T, "tickwire sub after two SIGTERMs");
    let (_, err) = common::take_output(&mut sub);
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("received 0 messages"), "{err}");
    assert!(!err.contains("aborting"), "{err}");
    // A SIGTERM is named as such, not as a Ctrl-C nobody pressed.
    assert!(err.contains("stopping (SIGTERM again to abort)"), "{err}");
    assert!(!err.contains("Ctrl-C"), "{err}");
}

#[test]
fn output_to_a_closed_pipe_is_not_a_panic() {
    // The reading end is closed before (or while) the command prints: it either got its
    // output out first (status 0) or ends as if by SIGPIPE (141), never with a panic.
    for _ in 0..3 {
        let mut child = Command::new(BIN)
            .args(["router", "--print-config"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickwire");
        drop(child.stdout.take());
        let mut err = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .ok();
        let status = child.wait().expect("wait");
        assert!(
            matches!(status.code(), Some(0) | Some(141)),
            "status {status}, stderr: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn an_error_names_its_cause_once() {
    // "cannot listen on ...: Address already in use (os error 98)", not the OS error
    // twice over.
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let (_, err) = fails(&["router", "--listen", &addr]);
    let cause = "(os error 98)";
    assert_eq!(err.matches(cause).count(), 1, "{err}");
}

/// Bytes waiting unread in the receive queue of the TCP socket bound to local port
/// `port` (IPv4, from /proc/net/tcp), if there is one.
fn unread_on_loopback_port(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let mut cols = line.split_whitespace();
        let local = cols.nth(1)?;
        let queues = cols.nth(2)?;
        let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        if local_port != port {
            return None;
        }
        u64::from_str_radix(queues.rsplit(':').next()?, 16).ok()
    })
}

/// Regression: a port in use said only "Address already in use". Every listener of the
/// CLI now says what to do, naming the flag (or key) that picks another port.
#[test]
fn a_port_in_use_says_what_to_do() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let tcp = taken.local_addr().expect("addr").to_string();
    let taken_udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let udp = taken_udp.local_addr().expect("addr").to_string();

    let (_, err) = fails(&["router", "--listen", &tcp, "--no-guaranteed"]);
    assert!(
        err.contains("Address already in use")
            && err.contains("is another tickwire router running? pick another port with --listen"),
        "{err}"
    );
    // A router that could not start says only that, not what it would have run.
    assert!(
        !err.contains("guaranteed messaging") && !err.contains("authentication"),
        "{err}"
    );
    let (_, err) = fails(&[
        "router",
        "--listen",
        "127.0.0.1:0",
        "--no-guaranteed",
        "--http",
        &tcp,
    ]);
    assert!(err.contains("pick another port with --http"), "{err}");
    assert!(
        !err.contains("guaranteed messaging") && !err.contains("authentication"),
        "{err}"
    );

    let session = common::temp("in-use.itch");
    let session = session.to_str().unwrap();
    ok(&[
        "md",
        "generate",
        "--messages",
        "1000",
        "--symbols",
        "5",
        "--out",
        session,
    ]);
    let (_, err) = fails(&["md", "publish", "--file", session, "--request", &udp]);
    assert!(
        err.contains(&format!("cannot listen for re-requests on {udp}"))
            && err.contains("pick another port with --request"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("acceptor.cfg");
    let port = taken.local_addr().unwrap().port();
    std::fs::write(
        &cfg,
        format!(
            "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
             SocketAcceptPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n\
             FileStorePath={}\n[SESSION]\nBeginString=FIX.4.4\nSenderCompID=A\n\
             TargetCompID=B\n",
            dir.path().join("store").display()
        ),
    )
    .unwrap();
    let (_, err) = fails(&["fix", "acceptor", "--config", cfg.to_str().unwrap()]);
    assert!(
        err.contains("is another FIX acceptor running? pick another SocketAcceptPort in")
            && err.contains("acceptor.cfg"),
        "{err}"
    );
}

/// Regression: `router --listen localhost:PORT` was refused ("invalid socket address
/// syntax") while every client takes a host name. The listen flags resolve a name and
/// log what it resolved to.
#[test]
fn router_listen_flags_take_a_host_name() {
    let mut child = common::cli(&[
        "router",
        "--listen",
        "localhost:0",
        "--http",
        "localhost:0",
        "--no-guaranteed",
        "--log-level",
        "info",
    ])
    .spawn()
    .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut banner).unwrap();
    let addr: SocketAddr = banner
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in the banner {banner:?}"));
    assert!(addr.ip().is_loopback(), "{banner}");
    let mut monitor = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut monitor).unwrap();
    assert!(
        monitor.starts_with("tickwire monitor listening on http://") && !monitor.contains(":0/"),
        "{monitor}"
    );
    let out = ok(&["stats", "--router", &addr.to_string()]);
    assert!(out.contains("tickwire-stats"), "{out}");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("--listen localhost:0 resolves to"), "{log}");
    assert!(log.contains("--http localhost:0 resolves to"), "{log}");
    // A malformed address is still a usage error, and says what is expected.
    let (code, err) = fails(&["router", "--listen", "localhost"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("HOST:PORT"), "{err}");
}

/// Regression: `md generate` named a bad setting as an error "writing" the output
/// file, and the output path is checked before any message is generated.
#[test]
fn md_generate_checks_settings_and_output_path_first() {
    let (_, err) = fails(&["md", "generate", "--out", "/nonexistent-dir/x.itch"]);
    assert!(
        err.contains("cannot create the output file /nonexistent-dir/x.itch")
            && err.contains("No such file or directory"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.itch");
    let (_, err) = fails(&[
        "md",
        "generate",
        "--symbols",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    // Refused as a usage error now (it was "invalid session settings", exit 1).
    assert!(
        err.contains("'0' for '--symbols") && !err.contains("writing"),
        "{err}"
    );
    assert!(!out.exists(), "a bad setting leaves no file behind");
}

/// Every help page, from the top command down through every listed subcommand.
fn every_help_page() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(cmd) = todo.pop() {
        let mut args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        args.push("--help");
        let text = ok(&args);
        let mut in_commands = false;
        for line in text.lines() {
            if line == "Commands:" {
                in_commands = true;
            } else if line.is_empty() {
                in_commands = false;
            } else if in_commands && line.starts_with("  ") && !line.starts_with("   ") {
                let sub = line.split_whitespace().next().unwrap_or("");
                if sub != "help" {
                    let mut next = cmd.clone();
                    next.push(sub.to_string());
                    todo.push(next);
                }
            }
        }
        pages.push((cmd.join(" "), text));
    }
    pages
}

/// Regression: `bench --help` said "(issue 21)", `md publish --help` used the old hidden
/// spelling `--request-listen`. Help is for users: no internal issue numbers, no
/// hidden old spellings.
#[test]
fn help_cites_no_internal_issue_and_no_hidden_spelling() {
    let pages = every_help_page();
    assert!(pages.len() > 30, "{} pages", pages.len());
    for (cmd, text) in &pages {
        // Word by word: a reference may be wrapped ("(issue\n  21)").
        let words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
        for pair in words.windows(2) {
            let cites = pair[0].trim_start_matches('(') == "issue"
                && pair[1].starts_with(|c: char| c.is_ascii_digit());
            assert!(
                !cites,
                "tickwire {cmd} --help cites an internal issue ({pair:?}):\n{text}"
            );
        }
        assert!(
            !words
                .iter()
                .any(|w| w.starts_with("issue-") || w.starts_with("issue#")),
            "tickwire {cmd} --help:\n{text}"
        );
        assert!(
            !text.contains("--request-listen"),
            "tickwire {cmd} --help: {text}"
        );
    }
    let (_, publish) = pages.iter().find(|(c, _)| c == "md publish").unwrap();
    assert!(publish.contains("--request <ADDR:PORT>"), "{publish}");
}

#[test]
fn every_subcommand_help_has_examples() {
    let commands: &[&[&str]] = &[
        &["router"],
        &["pub"],
        &["sub"],
        &["stats"],
        &["demo"],
        &["bench"],
        &["feed"],
        &["replay"],
        &["md"],
        &["fix", "acceptor"],
        &["fix", "initiator"],
    ];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = ok(&args);
        // An example is an indented command line, not the `Usage:` line.
        let examples = out
            .lines()
            .filter(|l| l.starts_with("  tickwire ") || l.starts_with("  $ tickwire "))
            .count();
        assert!(
            examples >= 1,
            "tickwire {cmd:?} --help has no example command:\n{out}"
        );
    }
}

#[test]
fn duration_flags_take_units_and_plain_numbers_stay_seconds_or_old_units() {
    // The new spellings take durations with units...
    let c = print_config(&[
        "--handshake-timeout",
        "300ms",
        "--stall-timeout",
        "2s",
        "--hybrid-spin",
        "1ms",
    ]);
    assert_eq!(
        c["router"]["handshake_timeout_ms"].as_integer(),
        Some(300),
        "{c}"
    );
    assert_eq!(
        c["router"]["stall_timeout_ms"].as_integer(),
        Some(2000),
        "{c}"
    );
    assert_eq!(
        c["router"]["hybrid_spin_us"].as_integer(),
        Some(1000),
        "{c}"
    );
    let c = print_config(&["--drain-timeout", "2m"]);
    assert_eq!(
        c["router"]["drain_timeout_ms"].as_integer(),
        Some(120_000),
        "{c}"
    );
    // ...a plain number is seconds...
    let c = print_config(&["--stall-timeout", "3"]);
    assert_eq!(
        c["router"]["stall_timeout_ms"].as_integer(),
        Some(3000),
        "{c}"
    );
    // ...and the old (hidden) spellings keep their units.
    let c = print_config(&["--handshake-timeout-ms", "300", "--hybrid-spin-us", "50"]);
    assert_eq!(
        c["router"]["handshake_timeout_ms"].as_integer(),
        Some(300),
        "{c}"
    );
    assert_eq!(c["router"]["hybrid_spin_us"].as_integer(), Some(50), "{c}");
}

#[test]
fn a_client_of_a_missing_shm_router_says_to_start_one() {
    let name = format!("cli-test-nosuch-{}", std::process::id());
    let (_, err) = fails(&["sub", "--router", &format!("shm:{name}"), "a/>"]);
    assert!(
        err.contains(&format!("shm:{name}"))
            && err.contains("no router listens on that shared-memory name")
            && err.contains("tickwire router --shm NAME"),
        "{err}"
    );
}

#[test]
fn sub_second_duration_flags_refuse_a_plain_number() {
    // `--hybrid-spin 200` as seconds would spin for minutes: refused, with the fix.
    for flag in ["--hybrid-spin", "--shm-epoll-interval"] {
        let (code, err) = fails(&["router", "--print-config", flag, "200"]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(
            err.contains("needs a unit") && err.contains("200us"),
            "{flag}: {err}"
        );
    }
    // 0 needs no unit (--shm-epoll-interval 0: every turn); units work as everywhere.
    let c = print_config(&[
        "--shm",
        "t-flags",
        "--shm-epoll-interval",
        "0",
        "--hybrid-spin",
        "50us",
    ]);
    assert_eq!(
        c["router"]["shm_epoll_interval_us"].as_integer(),
        Some(0),
        "{c}"
    );
    assert_eq!(c["router"]["hybrid_spin_us"].as_integer(), Some(50), "{c}");
}

/// The pub/sub part of the demo alone, for half a second at `rate`, with a blocking
/// router and `extra` flags; it must succeed. Its stdout and stderr.
fn demo_pubsub_half_second(rate: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "demo",
        "--duration",
        "500ms",
        "--rate",
        rate,
        "--idle",
        "block",
        "--no-market-data",
        "--no-tick-to-trade",
    ];
    args.extend_from_slice(extra);
    let (st, out, err) = run_cli(&args, Duration::from_secs(60));
    assert!(
        st.success(),
        "demo failed: {st}\nstdout: {out}\nstderr: {err}"
    );
    (out, err)
}

#[test]
fn demo_duration_with_units_runs() {
    // The cheapest real run: the pub/sub part only, half a second, a blocking router.
    let (out, err) = demo_pubsub_half_second("2000", &[]);
    assert!(out.contains("for 0.5 s"), "stdout: {out}");
    assert!(out.contains("pub/sub PASS"), "stdout: {out}\nstderr: {err}");
}

/// New-user pass: a --rate the publishers cannot keep stretched the part far past
/// --duration (the whole schedule was sent, however late). Now --duration ends it, and
/// the report says what was sent and that the rest never was.
#[test]
fn demo_duration_bounds_a_saturated_run() {
    let (out, err) = demo_pubsub_half_second("50M", &["--no-guaranteed"]);
    // 25,000,000 planned messages: sending them all takes minutes here.
    assert!(
        out.contains("of 25000000 planned (the rest not sent: --duration ended first)"),
        "stdout: {out}"
    );
    assert!(out.contains("SATURATED"), "stdout: {out}");
    assert!(out.contains("pub/sub PASS"), "stdout: {out}\nstderr: {err}");
}

#[test]
fn bench_fanout_duration_with_units_is_accepted() {
    // Parsing succeeds (no usage error, exit 2); the run then fails on the router
    // address nothing listens on, saying so.
    let addr = dead_addr().to_string();
    let (code, err) = fails(&[
        "bench",
        "fanout",
        "--router",
        &addr,
        "--duration",
        "5s",
        "--warmup",
        "250ms",
    ]);
    assert_ne!(code, 2, "a usage error: {err}");
    assert!(!err.contains("invalid value"), "{err}");
}

/// Regression: feed and fix, which have no users of their own, told to "configure users
/// in the router's [auth]" for a non-loopback --http; `bench guaranteed --help` gave
/// --nats-window two default lines.
#[test]
fn help_and_errors_name_only_what_the_command_accepts() {
    let port = dead_addr().port().to_string();
    let http = format!("0.0.0.0:{port}");
    let (code, err) = fails(&["feed", "--http", &http]);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(
        err.contains("--http-auth FILE") && err.contains("--http-open"),
        "{err}"
    );
    assert!(!err.contains("router"), "feed has no router users: {err}");
    let (code, err) = fails(&[
        "router",
        "--no-guaranteed",
        "--listen",
        "127.0.0.1:0",
        "--http",
        &http,
    ]);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(
        err.contains("configure users in the router's [auth]"),
        "{err}"
    );
    for cmd in ["feed", "fix", "router"] {
        let help = ok(&[cmd, "--help"]);
        assert!(!help.contains("or the router's own users"), "{cmd}: {help}");
    }
    let help = ok(&["bench", "guaranteed", "--help"]);
    let window = help
        .split("--nats-window")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .expect("--nats-window in the help");
    assert_eq!(window.matches("[default:").count(), 1, "{window}");
}

/// Ctrl-C on a direct `pub --stdin` whose input stays open and quiet: it stops
/// reading, sends what it read, says so and exits 130, as `pub --count` does (it used
/// to die on the signal, with no summary).
#[test]
fn ctrl_c_stops_pub_stdin_while_its_input_is_quiet() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "quietin/x");
    let (mut child, input) = pub_stdin_one_line(&r, "quietin/x");
    let mut got = 0;
    receive(&mut sub, 1, &mut got);
    common::interrupt(&child);
    let status = common::wait_child(&mut child, T, "pub --stdin after Ctrl-C, its input open");
    drop(input);
    let (_, err) = common::take_output(&mut child);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("stopped (Ctrl-C): published 1 message to quietin/x"),
        "{err}"
    );

    // The same stopped by a SIGTERM (a supervisor) says so, not "Ctrl-C".
    let (mut child, input) = pub_stdin_one_line(&r, "quietin/x");
    receive(&mut sub, 2, &mut got);
    common::signal(child.id(), "TERM");
    let status = common::wait_child(&mut child, T, "pub --stdin after SIGTERM, its input open");
    drop(input);
    let (_, err) = common::take_output(&mut child);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("stopped (SIGTERM): published 1 message to quietin/x"),
        "{err}"
    );
    assert!(err.contains("(SIGTERM again to abort)"), "{err}");
    assert!(!err.contains("Ctrl-C"), "{err}");
}

/// New-user pass: a `pub` told to stop while its router hangs went on reconnecting
/// until the router came back (or --give-up-after, 60 s): once stopping it no longer
/// reconnects, so a supervisor's SIGTERM ends it after one write timeout.
#[test]
fn a_stopping_pub_does_not_reconnect_to_a_hung_router() {
    let router = RouterProc::start(&[]);
    let r = router.addr_str();
    let mut sub = subscriber(&r, "hung/x");
    let mut child = spawn_piped(&[
        "pub",
        "--router",
        &r,
        "hung/x",
        "--count",
        "100000000",
        "--rate",
        "0",
    ]);
    let mut got = 0;
    receive(&mut sub, 1, &mut got);
    common::signal(router.child.id(), "STOP");
    // Stopped once the pub has noticed the hung router and is reconnecting.
    let stderr = child.stderr.take().expect("pub stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut err = String::new();
    let deadline = Instant::now() + T;
    while !err.contains("reconnecting") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => err.push_str(&(line + "\n")),
            Err(_) => panic!("pub never noticed the stopped router: {err}"),
        }
    }
    common::signal(child.id(), "TERM");
    let status = common::wait_child(&mut child, T, "pub after SIGTERM, its router stopped");
    common::signal(router.child.id(), "CONT");
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
        err.push_str(&(line + "\n"));
    }
    assert!(!status.success(), "{err}");
    assert!(!err.contains("reconnected"), "{err}");
}

/// The rate a stopped `sub` reports per message count and the span it is over, from its
/// summary line ('... R msg/s over the T s from the first message to the last'); None
/// when it gives none.
fn sub_rate(err: &str) -> Option<(f64, f64)> {
    let line = err.lines().find(|l| l.starts_with("received "))?;
    let (head, tail) = line.split_once(" msg/s over the ")?;
    let (span, _) = tail.split_once(" s from the first message to the last")?;
    Some((head.rsplit(' ').next()?.parse().ok()?, span.parse().ok()?))
}

/// Regression: `sub`'s summary divided by the time from the first message to Ctrl-C:
/// 3 messages in a burst gave "0 msg/s", and a stream that had ended long before the
/// Ctrl-C was reported far below its rate. The rate now runs from the first message
/// to the last; with fewer than 2 messages there is none, and (new-user pass) none
/// over a burst that arrived within 10 ms either: 3 messages at once gave
/// "4073320 msg/s", the speed of one read, not of the stream.
#[test]
fn regression_sub_rate_runs_from_the_first_message_to_the_last() {
    // (messages, pub --rate: 0 at once, 20 msg/s is 50 ms apart, whether a rate is given)
    for (n, pub_rate, rated) in [(1u64, "0", false), (3, "0", false), (3, "20", true)] {
        let router = RouterProc::start(&[]);
        let r = router.addr_str();
        let mut sub = spawn_piped(&["sub", "--router", &r, "rate/>", "--quiet"]);
        wait_for_subscriber(&r, "tickwire-sub", 1);
        let count = n.to_string();
        ok(&[
            "pub", "--router", &r, "rate/x", "m", "--count", &count, "--rate", pub_rate,
        ]);
        // All arrived and read; then a quiet second before Ctrl-C, which the rate must
        // not count.
        let deadline = Instant::now() + T;
        loop {
            let doc = stats_json(&r);
            let sent = doc["clients"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["name"] == "tickwire-sub" && c["msgs_out"] == n)
            });
            if sent {
                break;
            }
            assert!(Instant::now() < deadline, "the messages never left: {doc}");
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(Duration::from_secs(1));
        common::interrupt(&sub);
        let status = common::wait_child(&mut sub, T, "sub after Ctrl-C");
        let (_, err) = common::take_output(&mut sub);
        assert!(status.success(), "{err}");
        assert!(err.contains(&format!("received {count} message")), "{err}");
        match (rated, n) {
            // 3 messages 50 ms apart: over 2 msg/s (it said 0 msg/s, or ~3 msg/s
            // counting the quiet second).
            (true, _) => {
                let (rate, _) = sub_rate(&err).unwrap_or_else(|| panic!("no rate: {err}"));
                assert!(rate > 2.0, "{err}");
            }
            (false, 1) => assert!(!err.contains("msg/s"), "{err}"),
            // Published at once, they arrive within a few ms (a loaded machine could
            // spread them over more than 10 ms: then a rate is fair).
            (false, _) => match sub_rate(&err) {
                Some((_, span)) => assert!(span >= 0.010, "{err}"),
                None => assert!(err.contains("too short a span for a rate"), "{err}"),
            },
        }
    }
}

/// New-user pass: `tickwire passwd` at a terminal printed no prompt and echoed the
/// password as it was typed. At a terminal (a pty from `script`, util-linux) it now
/// prompts on standard error and turns the echo off while the password is typed.
#[test]
fn passwd_at_a_terminal_prompts_and_does_not_echo() {
    let test = "passwd_at_a_terminal_prompts_and_does_not_echo";
    let Some(mut term) = common::OnTerminal::start(test, &["passwd"]) else {
        return;
    };
    term.wait_for("password (not shown): ", T);
    term.type_line("hunter2");
    // Asked twice (new-user pass: a typo went into [auth] unnoticed).
    term.wait_for("the same again: ", T);
    term.type_line("hunter2");
    let (st, all) = term.finish(T);
    assert!(st.success(), "{all}");
    assert!(all.contains("password_hash = \"$argon2id$"), "{all}");
    assert!(!all.contains("hunter2"), "the password was echoed: {all}");
    // Two that differ: refused, nothing printed.
    let Some(mut term) = common::OnTerminal::start(test, &["passwd"]) else {
        return;
    };
    term.wait_for("password (not shown): ", T);
    term.type_line("hunter2");
    term.wait_for("the same again: ", T);
    term.type_line("hunter3");
    let (st, all) = term.finish(T);
    assert_eq!(st.code(), Some(2), "{all}");
    assert!(all.contains("the two passwords typed differ"), "{all}");
    assert!(!all.contains("password_hash"), "{all}");
}
