//! Reliable multicast with the real binary: `tickwire mcast send` to several
//! `tickwire mcast recv` processes on loopback, with seeded injected loss.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::time::Duration;

use common::{assert_help_lists, cli, free_port, run_cli, wait_child};

/// A group of its own per test (a free port), so tests running at once never meet.
fn group(n: u8) -> String {
    format!("239.255.74.{n}:{}", free_port())
}

/// A `tickwire mcast recv --quiet --print-json` process, once it said it joined.
struct Recv {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
    /// Each line of standard error as it comes.
    lines: std::sync::mpsc::Receiver<String>,
}

fn recv(group: &str, extra: &[&str]) -> Recv {
    let mut args = vec!["mcast", "recv", "--group", group, "--quiet", "--print-json"];
    args.extend_from_slice(&["--timeout", "60s"]);
    args.extend_from_slice(extra);
    let mut child = cli(&args).spawn().expect("spawn tickwire mcast recv");
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert!(first.starts_with("ready: joined"), "{first}");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut rest = first;
        let mut line = String::new();
        while matches!(lines.read_line(&mut line), Ok(1..)) {
            let _ = tx.send(line.clone());
            rest.push_str(&line);
            line.clear();
        }
        rest
    });
    Recv {
        child,
        stderr,
        lines: rx,
    }
}

impl Recv {
    /// Waits (bounded) for a line of standard error that contains `marker`.
    fn wait_for(&self, marker: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(marker) => return,
                Ok(_) => {}
                Err(e) => panic!("mcast recv never printed {marker:?}: {e}"),
            }
        }
    }

    /// Waits for the exit and returns the JSON summary and standard error.
    fn finish(self) -> (serde_json::Value, String) {
        self.finish_with(Some(0))
    }

    /// The receiver's end: exit status `code`, its JSON report and standard error.
    fn finish_with(mut self, code: Option<i32>) -> (serde_json::Value, String) {
        let st = wait_child(&mut self.child, Duration::from_secs(90), "mcast recv");
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let err = self.stderr.join().unwrap();
        assert_eq!(st.code(), code, "mcast recv: {st}\n{out}\n{err}");
        (serde_json::from_str(out.trim()).expect(&out), err)
    }
}

fn send(group: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["mcast", "send", "--group", group, "--print-json"];
    if !args.contains(&"--linger") {
        all.extend_from_slice(&["--linger", "30s"]);
    }
    all.extend_from_slice(args);
    let (st, out, err) = run_cli(&all, Duration::from_secs(120));
    assert!(st.success(), "mcast send: {st}\n{out}\n{err}");
    serde_json::from_str(out.trim()).expect(&out)
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn assert_everything_in_order(doc: &serde_json::Value, n: u64) {
    assert_eq!(u(doc, "delivered"), n, "{doc}");
    assert_eq!(doc["in_order"], true, "{doc}");
    assert_eq!(u(doc, "lost"), 0, "{doc}");
    assert_eq!(doc["gaps"].as_array().unwrap().len(), 0, "{doc}");
    assert_eq!(u(doc, "latency_samples"), n, "{doc}");
}

#[test]
fn every_receiver_gets_every_message_in_order_under_1_and_5_percent_loss() {
    for (loss, n) in [("0.01", 11u8), ("0.05", 12u8)] {
        let g = group(n);
        let count = 3000u64;
        let c = count.to_string();
        // Loss at the sender (every receiver misses the datagram: NAK suppression) and at
        // each receiver (its own), each seeded.
        let receivers: Vec<Recv> = (0..3u64)
            .map(|i| {
                let seed = (100 + i).to_string();
                recv(&g, &["--count", &c, "--loss", loss, "--seed", &seed])
            })
            .collect();
        let args = format!("md/X --count {c} --rate 20k --loss {loss} --seed 7 --wait-receivers 3");
        let sent = send(&g, &words(&args));
        assert_eq!(u(&sent, "messages"), count);
        assert!(u(&sent, "dropped_by_loss") > 0, "{sent}");
        assert!(u(&sent, "retransmitted") > 0, "{sent}");
        assert_eq!(u(&sent, "status_refused"), 0, "{sent}");
        for r in receivers {
            let (doc, _) = r.finish();
            assert_everything_in_order(&doc, count);
            assert!(u(&doc, "dropped_by_loss") > 0, "{doc}");
            assert!(u(&doc, "recovered") > 0, "{doc}");
            assert_eq!(doc["session"], sent["session"]);
        }
    }
}

#[test]
fn a_receiver_that_falls_behind_the_buffer_reports_the_gap_and_carries_on() {
    let g = group(13);
    let count = 5000u64;
    let c = count.to_string();
    let healthy = recv(&g, &["--count", &c]);
    // A small socket buffer and a half-second stall: the kernel drops what it cannot
    // hold, and the sender (64 datagrams of buffer) has moved on by then.
    let slow = recv(
        &g,
        &words(&format!(
            "--count {c} --recv-buffer 16K --stall-after 500 --stall 500ms"
        )),
    );
    let args = format!("md/X --count {c} --rate 5k --buffer 64 --wait-receivers 2");
    let sent = send(&g, &words(&args));
    let (doc, _) = healthy.finish();
    assert_everything_in_order(&doc, count);
    // Exit status 3: messages were lost (a script sees it as with `feed`).
    let (doc, err) = slow.finish_with(Some(3));
    let lost = u(&doc, "lost");
    assert!(lost > 0, "{doc}");
    assert_eq!(u(&doc, "delivered") + lost, count, "{doc}");
    assert_eq!(doc["in_order"], true, "{doc}");
    let gaps = doc["gaps"].as_array().unwrap();
    let last = gaps.last().unwrap();
    let gap_end = u(last, "first") + u(last, "messages");
    assert!(gap_end < count, "nothing delivered after the gap: {doc}");
    // Gaps come in stream order, each after the previous one.
    for w in gaps.windows(2) {
        assert!(
            u(&w[1], "first") > u(&w[0], "first") + u(&w[0], "messages"),
            "{doc}"
        );
    }
    // --quiet is the summary only (new-user pass: a lossy run printed 4,218 gap
    // lines); the JSON summary above lists every range gone.
    assert!(!err.contains("gap: messages "), "{err}");
    assert!(u(&sent, "messages") == count);
}

#[test]
fn a_stray_sender_with_another_session_is_ignored() {
    let g = group(14);
    let r = recv(&g, &["--count", "2000"]);
    let g2 = g.clone();
    let real = std::thread::spawn(move || {
        let args = "md/real --count 2000 --rate 2k --session 00000a11 --wait-receivers 1";
        send(&g2, &words(args))
    });
    // The stray starts once the receiver has adopted the real session (not after a
    // fixed time, which a slow start of the real sender could overrun).
    r.wait_for("session 00000a11: receiving");
    let args = "md/stray --count 500 --rate 5k --session 00000bad --linger 100ms";
    let stray = send(&g, &words(args));
    let real = real.join().unwrap();
    assert_eq!(real["session"], "00000a11");
    assert_eq!(stray["session"], "00000bad");
    let (doc, _) = r.finish();
    assert_eq!(doc["session"], "00000a11", "{doc}");
    assert_everything_in_order(&doc, 2000);
    assert!(u(&doc, "strays") >= 500, "{doc}");
}

#[test]
fn patterns_filter_what_a_receiver_prints() {
    // One stream carrying three topics (the library's publisher: a `mcast send` process
    // publishes one topic), received by the real `mcast recv` with a pattern.
    let g = group(15);
    let mut child = cli(&[
        "mcast",
        "recv",
        "--group",
        &g,
        "--count",
        "2",
        "md/*/AAPL",
        "--timeout",
        "30s",
    ])
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert!(first.starts_with("ready: joined"), "{first}");
    let mut publisher = tickwire_mcast::McastPublisher::new(tickwire_mcast::PublisherOptions {
        group: g.parse().unwrap(),
        ..tickwire_mcast::PublisherOptions::default()
    })
    .unwrap();
    for (topic, text) in [
        ("md/NASDAQ/AAPL", "a"),
        ("md/NASDAQ/IBM", "b"),
        ("md/ARCA/AAPL", "c"),
    ] {
        publisher
            .publish(topic, text.as_bytes(), Default::default())
            .unwrap();
    }
    publisher.flush();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        publisher.linger(Duration::from_millis(20));
    }
    let st = wait_child(&mut child, Duration::from_secs(5), "mcast recv");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(st.success(), "{st}");
    assert_eq!(out, "md/NASDAQ/AAPL a\nmd/ARCA/AAPL c\n");
}

#[test]
fn help_teaches_and_bad_input_gets_clear_errors() {
    assert_help_lists(
        &["mcast", "--help"],
        &["send", "recv", "NAK", "--loss 0.05"],
    );
    assert_help_lists(
        &["mcast", "send", "--help"],
        &[
            "--count",
            "--rate",
            "--loss",
            "--seed",
            "--linger",
            "--buffer",
            "--wait-receivers",
        ],
    );
    assert_help_lists(
        &["mcast", "recv", "--help"],
        &[
            "PATTERN",
            "--count",
            "--session",
            "gap: messages",
            "Exit status",
        ],
    );
    let (st, _, err) = run_cli(&["mcast", "send", "a//b", "x"], Duration::from_secs(30));
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("level 2 is empty"), "{err}");
    // Neither a message nor a load run (new-user pass: it sent one message of load
    // bytes and reported a CPU cost per message of milliseconds).
    let (st, _, err) = run_cli(&["mcast", "send", "md/X"], Duration::from_secs(30));
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("nothing to send") && err.contains("--count"),
        "{err}"
    );
    let (st, _, err) = run_cli(
        &["mcast", "recv", "--group", "127.0.0.1:7440"],
        Duration::from_secs(30),
    );
    assert!(
        !st.success() && err.contains("not a multicast group"),
        "{err}"
    );
    let (st, _, err) = run_cli(
        &["mcast", "send", "t", "x", "--loss", "5"],
        Duration::from_secs(30),
    );
    // A usage error (status 2), as clap reports a bad value.
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("0.05 for 5%"), "{err}");
}

#[test]
fn recv_that_times_out_before_its_count_exits_3_not_a_usage_errors_2() {
    // Nobody sends: --timeout runs out with 0 of 1 message. Status 3, so that a script
    // tells it from a usage error (2).
    let g = group(32);
    let (st, _, err) = run_cli(
        &[
            "mcast",
            "recv",
            "--group",
            &g,
            "--count",
            "1",
            "--timeout",
            "300ms",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("ready: joined"), "{err}");
    assert!(
        err.contains("timed out: --timeout 0.300 s ran out with 0 of the 1 messages"),
        "{err}"
    );
}

#[test]
fn send_to_a_unicast_group_is_a_usage_error() {
    for cmd in ["send", "recv"] {
        let mut args = vec!["mcast", cmd, "--group", "10.0.0.1:7440"];
        if cmd == "send" {
            args.extend(["t", "x"]);
        }
        let (st, _, err) = run_cli(&args, Duration::from_secs(30));
        assert_eq!(st.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("10.0.0.1:7440 is not a multicast group (224.0.0.0/4"),
            "{cmd}: {err}"
        );
    }
}

/// New-user pass: `mcast send` stopped by Ctrl-C exited 0 with a summary that read
/// as a whole run. It now says how far it got and exits 130, as `pub` does; with and
/// without the reliable layer (`--raw`).
#[test]
fn a_send_stopped_by_ctrl_c_says_so_and_exits_130() {
    for raw in [false, true] {
        let g = group(32);
        let mut args = vec!["mcast", "send", "--group", &g, "t", "--count", "10000000"];
        args.extend(["--rate", "20000"]);
        if raw {
            args.push("--raw");
        }
        let mut child = cli(&args).spawn().expect("spawn tickwire mcast send");
        std::thread::sleep(Duration::from_millis(700));
        common::interrupt(&child);
        let st = wait_child(&mut child, Duration::from_secs(30), "mcast send");
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(st.code(), Some(130), "raw {raw}: {err}");
        assert!(err.contains("stopped (Ctrl-C): "), "raw {raw}: {err}");
        assert!(
            err.contains(" of 10000000 messages sent"),
            "raw {raw}: {err}"
        );
    }
}

#[test]
fn send_counts_one_message_delivered_in_the_singular() {
    let g = group(31);
    let r = recv(&g, &["--count", "1"]);
    let (st, out, err) = run_cli(
        &["mcast", "send", "--group", &g, "t", "x", "--linger", "10s"],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{st}\n{out}\n{err}");
    let _ = r.finish();
    assert!(
        err.contains(": 1 message delivered, 0 datagrams behind"),
        "{err}"
    );
    assert!(!err.contains("1 messages"), "{err}");
}

/// Every flag value out of its range is a usage error (status 2) that names the flag,
/// found before any socket opens (no "ready: joined"). `--max-datagram 70000`,
/// `--buffer 0` and `--hold 0` exited 1 from the driver's check at run time, `--batch 0`
/// and `--burst 0` too, and `send --raw --max-datagram 70000` was not checked at all.
#[test]
fn out_of_range_flag_values_are_usage_errors_that_name_the_flag() {
    let g = group(33);
    let cases: &[(&[&str], &str)] = &[
        (
            &["send", "t", "x", "--max-datagram", "70000"],
            "--max-datagram 70000",
        ),
        (
            &["send", "t", "x", "--max-datagram", "100"],
            "--max-datagram 100",
        ),
        (
            &["send", "t", "x", "--raw", "--max-datagram", "70000"],
            "--max-datagram 70000",
        ),
        (&["send", "t", "x", "--buffer", "0"], "--buffer 0"),
        (
            &["send", "t", "x", "--buffer", "2000000"],
            "--buffer 2000000",
        ),
        (&["send", "t", "x", "--batch", "0"], "--batch 0"),
        (
            &["send", "t", "x", "--rate", "10", "--burst", "0"],
            "--burst 0",
        ),
        (
            &["send", "t", "--count", "1", "--size", "2000"],
            "--size 2000",
        ),
        (&["recv", "--hold", "0"], "--hold 0"),
        (&["recv", "--hold", "70000"], "--hold 70000"),
        (&["recv", "--recv-buffer", "8G"], "--recv-buffer 8589934592"),
    ];
    for (args, flag) in cases {
        let mut full = vec!["mcast"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--group", &g]);
        let (st, out, err) = run_cli(&full, Duration::from_secs(30));
        assert_eq!(st.code(), Some(2), "{full:?}: {err}");
        assert!(err.contains(flag), "{full:?} does not name {flag}: {err}");
        assert!(
            !err.contains("ready: joined"),
            "{full:?} opened a socket: {err}"
        );
        assert!(out.is_empty(), "{full:?} sent or printed: {out}");
    }
}
