//! How `pub`, `sub` and `request` end when the router goes away or a responder fails:
//! real processes, a real router on loopback, killed and restarted by the test.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{free_port, run_cli, FixedRouter};

/// Limit for one command (generous: debug build on a busy machine).
const T: Duration = Duration::from_secs(60);

/// A plain router (no spool) on a fixed port, so that it can be killed and restarted.
fn plain(port: u16) -> FixedRouter {
    FixedRouter::start(port, &["--no-guaranteed"], Stdio::null())
}

/// The number just before `after` in `text` (e.g. "31091" in "31091 messages dropped").
fn number_before(text: &str, after: &str) -> u64 {
    let at = text
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} in: {text}"));
    let digits: String = text[..at]
        .trim_end()
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number before {after:?} in: {text}"))
}

/// Regression (new-user pass): a paced direct `pub` died within half a second of a
/// router outage ("the offline publish buffer is full (..., ReconnectOptions::
/// offline_buffer_bytes): publish refused", exit 1, no summary). It now drops what its
/// offline buffer cannot keep, counts it, goes on after the reconnection and exits 5
/// with a summary: every message of --count is either sent or counted dropped.
#[test]
fn regression_a_paced_pub_drops_and_counts_through_a_router_outage() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    // A subscriber whose first line says the publisher is under way.
    let mut sub = common::cli(&["sub", "--router", &addr, "t/>"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_subscriber(&addr, "tickwire-sub", 1);
    let total = 40_000u64;
    // A small offline buffer: an outage of any length overflows it.
    let mut publ = common::cli(&[
        "pub",
        "--router",
        &addr,
        "t/load",
        "--count",
        &total.to_string(),
        "--rate",
        "20k",
        "--offline-buffer",
        "4K",
    ])
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(sub.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("t/load "), "{first}");
    router.kill9();
    let _ = sub.kill();
    let _ = sub.wait();
    // Down long enough for the publisher to overflow its buffer (not asserted on).
    std::thread::sleep(Duration::from_millis(500));
    let router = plain(port);
    let st = common::wait_child(&mut publ, T, "pub across a router outage");
    drop(router);
    let (_, err) = common::take_output(&mut publ);
    assert_eq!(st.code(), Some(5), "{err}");
    assert!(!err.contains("ReconnectOptions"), "{err}");
    assert!(err.contains("disconnected: "), "{err}");
    assert!(err.contains("reconnected after"), "{err}");
    let sent = number_before(&err, &format!("of {total} messages of 100 bytes"));
    let dropped = number_before(&err, "messages dropped while disconnected");
    assert!(dropped > 0, "{err}");
    assert_eq!(sent + dropped, total, "{err}");
    assert!(
        err.contains("--guaranteed"),
        "points to --guaranteed: {err}"
    );
    assert!(err.contains("1 disconnection, 1 reconnection,"), "{err}");
}

/// Hostile-input pass: `pub --no-reconnect` reconnected to a router that came back at
/// once ("disconnected ...; reconnecting", "reconnected after 0.001 s") and exited 0.
/// A lost connection now ends it: exit 1, the cause, nothing "reconnecting".
#[test]
fn regression_pub_no_reconnect_does_not_reconnect() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let mut sub = common::cli(&["sub", "--router", &addr, "t/>"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_subscriber(&addr, "tickwire-sub", 1);
    let mut publ = common::cli(&[
        "pub",
        "--router",
        &addr,
        "t/x",
        "--count",
        "400",
        "--rate",
        "20",
        "--no-reconnect",
    ])
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(sub.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("t/x "), "{first}");
    router.kill9();
    let _ = sub.kill();
    let _ = sub.wait();
    // Back at once: a reconnection would succeed.
    let router = plain(port);
    let st = common::wait_child(&mut publ, T, "pub --no-reconnect");
    drop(router);
    let (_, err) = common::take_output(&mut publ);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("(--no-reconnect)"), "{err}");
    assert!(!err.contains("reconnecting"), "{err}");
    assert!(!err.contains("reconnected"), "{err}");
}

/// Review: `--give-up-after 0` gave up without one attempt while saying
/// "reconnecting"; it is a usage error that names --no-reconnect.
#[test]
fn give_up_after_zero_is_a_usage_error() {
    for args in [
        &["pub", "t/x", "m", "--give-up-after", "0"][..],
        &["sub", "t/>", "--give-up-after", "0s"][..],
        &["reply", "t/>", "--give-up-after", "0"][..],
    ] {
        let (st, _, err) = run_cli(args, T);
        assert_eq!(st.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("use --no-reconnect"), "{args:?}: {err}");
    }
}

/// `pub --help` documents the direct publisher's exit statuses and --offline-buffer;
/// `sub --help` its own.
#[test]
fn pub_and_sub_help_document_their_exit_statuses() {
    let help = common::assert_help_lists(
        &["pub", "--help"],
        &[
            "Exit status (direct publishing)",
            "--offline-buffer",
            "5 some were dropped",
        ],
    );
    assert!(help.contains("130"), "{help}");
    common::assert_help_lists(&["sub", "--help"], &["Exit status:", "--no-reconnect"]);
}

/// Regression (new-user pass): `sub --no-reconnect` exited 0 without a summary when the
/// router crashed, so a supervisor could not tell the crash from a normal end. It now
/// prints the summary and the cause, and exits 1.
/// A `sub` with `args` (after `--router ADDR`) on `addr`, once it holds `subs`
/// subscriptions and has printed one message published to `t/a`; its stdout.
fn sub_with_one_message(
    addr: &str,
    args: &[&str],
    subs: u64,
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut cmd = vec!["sub", "--router", addr];
    cmd.extend_from_slice(args);
    let mut sub = common::cli(&cmd).spawn().unwrap();
    common::wait_for_subscriber(addr, "tickwire-sub", subs);
    let mut c = tickwire_client::Client::connect(addr).unwrap();
    let mut stdout = BufReader::new(sub.stdout.take().unwrap());
    c.publish("t/a", b"before").unwrap();
    c.flush().unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "t/a before\n");
    (sub, stdout)
}

#[test]
fn regression_sub_no_reconnect_exits_1_with_the_summary_when_the_router_goes() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let (mut sub, stdout) = sub_with_one_message(&addr, &["t/>", "--no-reconnect"], 1);
    router.kill9();
    let st = common::wait_child(&mut sub, T, "sub --no-reconnect");
    let (_, err) = common::take_output(&mut sub);
    drop(stdout);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("received 1 message"), "the summary: {err}");
    assert!(err.contains("error: "), "{err}");
    assert!(err.contains("(--no-reconnect)"), "{err}");
}

/// New-user pass: when a restarted router refused the subscriptions back (here its
/// `max_subscriptions` is 1, for two patterns), `sub` exited 1 with the cause but
/// without the summary of what it had received. Now the summary, then the cause.
#[test]
fn sub_whose_restore_is_refused_exits_1_with_the_summary_and_the_pattern() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let (mut sub, stdout) = sub_with_one_message(&addr, &["t/a", "t/b"], 2);
    router.kill9();
    let _strict = FixedRouter::start(
        port,
        &["--no-guaranteed", "--max-subscriptions", "1"],
        Stdio::null(),
    );
    let st = common::wait_child(&mut sub, T, "sub after a refused restore");
    let (_, err) = common::take_output(&mut sub);
    drop(stdout);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("received 1 message"), "the summary: {err}");
    assert!(
        err.contains("restoring the subscriptions after reconnecting: \"t/b\""),
        "the refused pattern, as a restore: {err}"
    );
    assert!(err.contains("max_subscriptions"), "{err}");
}

/// Regression (new-user pass): a responder command that failed without a word
/// (`reply --exec false`) was reported as `error: "false" exit status: 1: `, a
/// dangling ": " before nothing.
#[test]
fn regression_a_silent_failing_exec_has_no_dangling_colon() {
    let router = common::RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let mut replier = common::cli(&[
        "reply", "--router", &addr, "svc/fail", "--exec", "false", "--count", "1",
    ])
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + T;
    let (st, out, err) = loop {
        let (st, out, err) = run_cli(&["request", "--router", &addr, "svc/fail", "x"], T);
        // 5: no responders yet.
        if st.code() != Some(5) || Instant::now() > deadline {
            break (st, out, err);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(st.code(), Some(4), "stdout: {out} stderr: {err}");
    assert_eq!(err, "error: \"false\" exit status: 1\n");
    let st = common::wait_child(&mut replier, T, "the responder");
    let (_, said) = common::take_output(&mut replier);
    assert!(st.success(), "{said}");
    assert!(
        said.contains("failed on a request on svc/fail: \"false\" exit status: 1 ("),
        "{said}"
    );
    assert!(!said.contains("exit status: 1: "), "{said}");
}
