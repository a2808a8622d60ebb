//! The router as a reliable multicast sender, with the real binaries: `tickwire router
//! --multicast GROUP=md/>` and `tickwire sub` with and without `--multicast auto`, also
//! under seeded injected loss at the router and at the receiver.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{cli, free_port, stats_json, u, wait_child, wait_for_subscriber, RouterProc};

/// A group of its own per test (a free port), so tests running at once never meet.
fn group(n: u8) -> String {
    format!("239.255.75.{n}:{}", free_port())
}

/// `tickwire sub --router R --name NAME PATTERNS... EXTRA...`, to spawn.
fn sub_cmd(router: &RouterProc, name: &str, patterns: &[&str], extra: &[&str]) -> Command {
    let addr = router.addr_str();
    let mut args = vec!["sub", "--router", &addr, "--name", name];
    args.extend_from_slice(patterns);
    args.extend_from_slice(extra);
    cli(&args)
}

/// A `sub` writing its messages to a file (a pipe nobody reads would fill and stop it).
fn sub_to_file(
    router: &RouterProc,
    name: &str,
    patterns: &[&str],
    extra: &[&str],
) -> (Child, tempfile::TempPath) {
    let path = common::temp(&format!("mcast-router-{name}.out"));
    let file = std::fs::File::create(&path).unwrap();
    let child = sub_cmd(router, name, patterns, extra)
        .stdout(file)
        .spawn()
        .expect("spawn tickwire sub");
    (child, path)
}

/// Waits for a `sub` to exit successfully; what it printed and its stderr.
fn finish((mut child, path): (Child, tempfile::TempPath), what: &str) -> (String, String) {
    let st = wait_child(&mut child, Duration::from_secs(120), what);
    let (_, err) = common::take_output(&mut child);
    assert!(st.success(), "{what}: {st}\n{err}");
    (std::fs::read_to_string(&path).unwrap(), err)
}

/// `tickwire pub TOPIC --stdin` of `lines`.
fn publish(router: &RouterProc, topic: &str, lines: &[String]) -> Child {
    let mut child = cli(&["pub", "--router", &router.addr_str(), topic, "--stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn tickwire pub");
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    child
}

/// The payloads printed for `topic`, in order.
fn of_topic<'a>(out: &'a str, topic: &str) -> Vec<&'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(topic)?.strip_prefix(' '))
        .collect()
}

/// A TCP subscriber and two multicast ones (one printing, one counting) on a router
/// sending md/> by multicast; two publishers, md/a (multicast) and fx/a (TCP).
fn same_messages_both_ways(router_extra: &[&str], sub_loss: &[&str], n: usize) {
    let g = group(1);
    let route = format!("{g}=md/>");
    let mut args = vec![
        "--no-guaranteed",
        "--multicast",
        &route,
        "--http",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(router_extra);
    let router = RouterProc::start(&args);
    let count = (2 * n).to_string();
    let both = ["md/>", "fx/>"];
    let tcp = sub_to_file(&router, "tcp", &both, &["--count", &count]);
    let mut mc_args = vec!["--multicast", "auto", "--count", &count];
    mc_args.extend_from_slice(sub_loss);
    let mc = sub_to_file(&router, "mc", &both, &mc_args);
    let mut quiet_args = mc_args.clone();
    quiet_args.push("--quiet");
    let quiet = sub_to_file(&router, "mc-quiet", &both, &quiet_args);
    for name in ["tcp", "mc", "mc-quiet"] {
        wait_for_subscriber(&router.addr_str(), name, 2);
    }
    let md: Vec<String> = (0..n).map(|i| format!("md-{i}")).collect();
    let fx: Vec<String> = (0..n).map(|i| format!("fx-{i}")).collect();
    let (mut p1, mut p2) = (publish(&router, "md/a", &md), publish(&router, "fx/a", &fx));
    for (p, what) in [(&mut p1, "pub md"), (&mut p2, "pub fx")] {
        let st = wait_child(p, Duration::from_secs(60), what);
        assert!(st.success(), "{what}: {st}");
    }
    let (tcp_out, _) = finish(tcp, "tcp sub");
    let (mc_out, mc_err) = finish(mc, "multicast sub");
    let (_, quiet_err) = finish(quiet, "quiet multicast sub");
    // Every message, in publish order, to both, by topic (the two paths may interleave
    // the two topics differently; each topic's order is its publisher's).
    for (topic, sent) in [("md/a", &md), ("fx/a", &fx)] {
        let want: Vec<&str> = sent.iter().map(String::as_str).collect();
        assert_eq!(of_topic(&tcp_out, topic), want, "tcp, {topic}");
        assert_eq!(of_topic(&mc_out, topic), want, "multicast, {topic}");
    }
    assert!(
        mc_err.contains(&format!("multicast: receiving md/> from {g}")),
        "{mc_err}"
    );
    // The md messages came by multicast (only they could), none lost for good.
    assert!(
        quiet_err.contains(&format!("multicast: {n} messages")),
        "{quiet_err}"
    );
    assert!(
        quiet_err.contains(" 0 gaps (0 messages lost)"),
        "{quiet_err}"
    );
    assert!(!mc_err.contains("multicast gap"), "{mc_err}");
    stream_stats_account_for(&router, &g, n as u64, !router_extra.is_empty());
}

/// The router's stats document (`tickwire stats --json`) lists the stream with its
/// counters and the receivers' flow reports: the subscribers, done, told it they
/// delivered all `n` messages. `lossy`: the router dropped datagrams (NAKs answered).
fn stream_stats_account_for(router: &RouterProc, g: &str, n: u64, lossy: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let doc = stats_json(&router.addr_str());
        let streams = doc["multicast"].as_array().expect("a multicast array");
        assert_eq!(streams.len(), 1, "{doc}");
        let s = &streams[0];
        assert_eq!(s["group"], g, "{s}");
        assert_eq!(s["topics"], serde_json::json!(["md/>"]), "{s}");
        assert_eq!(u(s, "messages"), n, "{s}");
        assert!((1..=n).contains(&u(s, "datagrams")), "{s}");
        // Honest receivers: nothing refused, no NAK for a datagram already gone.
        assert_eq!(u(s, "status_refused"), 0, "{s}");
        assert_eq!(u(s, "nak_heartbeat_suppressed"), 0, "{s}");
        if lossy {
            assert!(u(s, "naks") > 0 && u(s, "retransmitted") > 0, "{s}");
        }
        let reports = s["receiver_reports"].as_array().expect("receiver_reports");
        assert_eq!(u(s, "receivers"), reports.len() as u64, "{s}");
        let done = reports.iter().filter(|r| u(r, "delivered") == n).count();
        if done >= 2 {
            // The text stats say it too (new-user pass: only the JSON did).
            let (st, out, err) = common::run_cli(
                &["stats", "--router", &router.addr_str()],
                Duration::from_secs(30),
            );
            assert!(st.success(), "{err}");
            assert!(
                out.contains(&format!("multicast {g} (md/>): messages={n} datagrams=")),
                "{out}"
            );
            // And /varz and /metrics, when the router serves them.
            if let Some(http) = router.http {
                let (_, _, varz) = common::http_get(http, "/varz", &[]);
                let varz: serde_json::Value = serde_json::from_str(&varz).expect("/varz JSON");
                assert_eq!(u(&varz["multicast"][0], "messages"), n, "{varz}");
                let (_, _, metrics) = common::http_get(http, "/metrics", &[]);
                assert!(
                    metrics.contains(&format!(
                        "tickwire_router_multicast_messages_total{{group=\"{g}\"}} {n}\n"
                    )),
                    "{metrics}"
                );
            }
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the two multicast subscribers' reports of {n} messages never came: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn tcp_and_multicast_subscribers_see_the_same_messages_in_the_same_order() {
    same_messages_both_ways(&[], &[], 2_000);
}

/// `sub --multicast auto` on a router that sends nothing by multicast says so (a
/// new-user pass saw it carry on silently and end with "multicast: 0 messages"), and
/// gets everything over its connection.
#[test]
fn multicast_auto_on_a_router_without_multicast_says_so() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let sub = sub_to_file(
        &router,
        "no-mc",
        &["md/>"],
        &["--multicast", "auto", "--count", "3"],
    );
    wait_for_subscriber(&router.addr_str(), "no-mc", 1);
    let lines: Vec<String> = (0..3).map(|i| format!("m-{i}")).collect();
    let mut p = publish(&router, "md/a", &lines);
    assert!(wait_child(&mut p, Duration::from_secs(60), "pub").success());
    let (out, err) = finish(sub, "multicast-auto sub");
    assert_eq!(of_topic(&out, "md/a"), ["m-0", "m-1", "m-2"]);
    assert!(
        err.contains("multicast: the router sends no topic by multicast"),
        "{err}"
    );
}

/// [`same_messages_both_ways`] with loss `p` at the router (seed `seeds.0`) and at the
/// receivers (seed `seeds.1`).
fn under_loss(p: &str, seeds: (&str, &str)) {
    let at = |seed| ["--multicast-loss", p, "--multicast-seed", seed];
    same_messages_both_ways(&at(seeds.0), &at(seeds.1), 5_000);
}

#[test]
fn one_percent_injected_loss_at_router_and_receiver_is_recovered() {
    under_loss("0.01", ("3", "4"));
}

#[test]
fn five_percent_injected_loss_at_router_and_receiver_is_recovered() {
    under_loss("0.05", ("5", "6"));
}

/// A subscriber stopped (SIGSTOP) while the router sends far more than its 16-datagram
/// retransmission buffer, losing some datagrams on the way in: what it can no longer
/// recover is reported as a counted gap, and it carries on with the later messages.
#[test]
fn a_receiver_behind_the_retransmission_buffer_reports_the_gap_and_carries_on() {
    let g = group(2);
    let cfg = common::temp("mcast-router.toml");
    std::fs::write(
        &cfg,
        format!("[[router.multicast]]\ngroup = \"{g}\"\ntopics = [\"md/>\"]\nbuffer = 16\n"),
    )
    .unwrap();
    let router = RouterProc::start(&["--no-guaranteed", "--config", cfg.to_str().unwrap()]);
    let mut mc = sub_cmd(
        &router,
        "mc",
        &["md/>"],
        &[
            "--multicast",
            "auto",
            "--multicast-loss",
            "0.2",
            "--multicast-seed",
            "9",
        ],
    )
    .spawn()
    .expect("spawn tickwire sub");
    wait_for_subscriber(&router.addr_str(), "mc", 1);
    let pid = mc.id().to_string();
    let signal = |sig: &str| {
        let st = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(st.success(), "kill {sig}");
    };
    signal("-STOP");
    // One message per datagram (1200 bytes each in 1400-byte datagrams): 300 datagrams.
    let pad = "x".repeat(1200);
    let early: Vec<String> = (0..300).map(|i| format!("early-{i:03}-{pad}")).collect();
    let mut p = publish(&router, "md/a", &early);
    assert!(wait_child(&mut p, Duration::from_secs(60), "pub early").success());
    std::thread::sleep(Duration::from_millis(200));
    signal("-CONT");
    std::thread::sleep(Duration::from_millis(500));
    let late: Vec<String> = (0..20).map(|i| format!("late-{i:02}")).collect();
    let mut p = publish(&router, "md/a", &late);
    assert!(wait_child(&mut p, Duration::from_secs(60), "pub late").success());
    // Read until the last late message, then stop it.
    let mut lines = BufReader::new(mc.stdout.take().unwrap()).lines();
    let mut got = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.ends_with("late-19");
        got.push(line);
        if done {
            break;
        }
    }
    signal("-TERM");
    wait_child(&mut mc, Duration::from_secs(30), "multicast sub");
    let (_, err) = common::take_output(&mut mc);
    let payloads = of_topic_owned(&got);
    let early_seen: Vec<usize> = payloads
        .iter()
        .filter_map(|p| p.strip_prefix("early-")?.get(..3)?.parse().ok())
        .collect();
    assert!(
        early_seen.windows(2).all(|w| w[0] < w[1]),
        "in order: {early_seen:?}"
    );
    let late_seen: Vec<&str> = payloads
        .iter()
        .filter(|p| p.starts_with("late-"))
        .map(String::as_str)
        .collect();
    let want: Vec<String> = (0..20).map(|i| format!("late-{i:02}")).collect();
    assert_eq!(late_seen, want, "every later message, in order");
    // The gaps reported count exactly the early messages missing.
    let lost: u64 = err
        .lines()
        .filter(|l| l.starts_with("multicast gap:"))
        .map(|l| {
            let n = l.rsplit('(').next().unwrap();
            n.split_whitespace().next().unwrap().parse::<u64>().unwrap()
        })
        .sum();
    assert!(lost > 0, "a gap was reported: {err}");
    assert_eq!(lost as usize, 300 - early_seen.len(), "{err}");
}

fn of_topic_owned(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| Some(l.strip_prefix("md/a ")?.to_owned()))
        .collect()
}

#[test]
fn help_teaches_multicast() {
    common::assert_help_lists(
        &["router", "--help"],
        &["--multicast", "[[router.multicast]]", "--multicast-loss"],
    );
    common::assert_help_lists(
        &["sub", "--help"],
        &["--multicast", "auto", "--multicast-loss"],
    );
}
