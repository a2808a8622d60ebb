//! Market data through the real binaries on loopback: `tickwire md generate`, `md
//! publish` (MoldUDP64 multicast, seeded loss), `feed` (gap recovery, books, updates to
//! the router), `md capture` and `replay`, with an in-test subscriber. Checked by
//! content and counts, never by durations. The oracle for the published updates is
//! the reference model of `crates/md/tests/model` run over the ITCH session file, not
//! another run of the same binary.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../md/tests/model/mod.rs"]
mod model;

use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_udp_port_pair, run_cli, temp, RouterProc};
use tickwire_client::{Client, Wait};

/// Offset of the feed handler's receive timestamp in an update (docs/market-data.md);
/// it differs between runs and is zeroed before streams are compared.
const RECEIVE_NS: std::ops::Range<usize> = 32..40;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Kill {
    Kill(
        common::cli(args)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tickwire"),
    )
}

/// Waits (bounded) for a child and returns its exit code and stdout.
fn finish(mut k: Kill, limit: Duration) -> (i32, String) {
    let st = common::wait_child(&mut k.0, limit, "the child");
    let mut out = String::new();
    std::io::Read::read_to_string(k.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    (st.code().unwrap_or(-1), out)
}

/// What a collector gathered: (topic, payload with the receive time zeroed).
type Collected = Vec<(String, Vec<u8>)>;

/// [`collector`]'s stop signal: how many messages the feed published, once known.
type Expect = Arc<AtomicU64>;

/// Not yet known ([`Expect`]).
const NOT_YET: u64 = u64::MAX;

/// Subscribes to `md/>` and collects until told how many the feed published
/// ([`stop_collector`]): then until it has that many and nothing more arrived for 300 ms,
/// or nothing arrived for 10 s (fewer: the test's count assertion says so).
fn collector(router: String) -> (Expect, std::thread::JoinHandle<Collected>) {
    let done = Arc::new(AtomicU64::new(NOT_YET));
    let d = done.clone();
    let mut c = Client::connect(router.as_str()).unwrap();
    c.subscribe("md/>").unwrap();
    let h = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut quiet_since = Instant::now();
        let hard_limit = Instant::now() + Duration::from_secs(120);
        loop {
            let mut n = 0;
            c.poll(Wait::Timeout(Duration::from_millis(20)), |m| {
                let mut p = m.payload().to_vec();
                if p.len() >= RECEIVE_NS.end {
                    p[RECEIVE_NS].fill(0);
                }
                got.push((m.topic().to_string(), p));
                n += 1;
            })
            .unwrap();
            let expect = d.load(Ordering::Relaxed);
            let quiet = quiet_since.elapsed();
            if n > 0 {
                quiet_since = Instant::now();
            } else if expect != NOT_YET
                && ((got.len() as u64 >= expect && quiet > Duration::from_millis(300))
                    || quiet > Duration::from_secs(10))
            {
                break;
            }
            assert!(Instant::now() < hard_limit, "collector never told to stop");
        }
        got
    });
    (done, h)
}

/// Tells a [`collector`] what the feed reported published (0 if its report has no such
/// count: the collector then stops at its first 300 ms of quiet).
fn stop_collector(expect: &Expect, feed_out: &str) {
    let published = feed_out
        .split(['·', '\n'])
        .find_map(|part| {
            let mut w = part.split_whitespace();
            (w.next() == Some("published")).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or(0);
    expect.store(published, Ordering::Relaxed);
}

fn generate(name: &str, seed: &str) -> tempfile::TempPath {
    common::md_session(name, seed, 20, 30_000)
}

/// One pass: router, feed handler, collector, publisher; returns (feed stdout, stream).
/// `tickwire feed --group <group> --router <router> <extra>`, once it has joined: it
/// joins its groups before it connects, so connected to the router means joined.
fn start_feed(router: &RouterProc, group: &str, extra: &[&str]) -> Kill {
    let raddr = router.addr_str();
    let mut args = vec![
        "feed", "--group", group, "--router", &raddr, "--idle", "block", "--quiet",
    ];
    args.extend_from_slice(extra);
    let feed = spawn(&args);
    common::wait_for_subscriber(&raddr, "tickwire-feed", 0);
    feed
}

/// [`spawn`], returning once a line of the child's stderr contains `marker` (its
/// stderr is drained on after that, so it never blocks on a full pipe).
fn spawn_until(args: &[&str], marker: &'static str) -> Kill {
    let mut child = common::cli(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tickwire");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains(marker) {
                let _ = tx.send(Ok(()));
            }
            seen.push(line);
        }
        let _ = tx.send(Err(seen.join("\n")));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => Kill(child),
        Ok(Err(stderr)) => panic!("{args:?} ended before {marker:?}:\n{stderr}"),
        Err(_) => panic!("{args:?} did not print {marker:?} within 30 s"),
    }
}

/// `tickwire md publish --file <session> --group <group> --speed <speed> --linger <linger>`.
fn publish_args<'a>(
    session: &'a std::path::Path,
    group: &'a str,
    speed: &'a str,
    linger: &'a str,
) -> Vec<&'a str> {
    vec![
        "md",
        "publish",
        "--file",
        session.to_str().unwrap(),
        "--group",
        group,
        "--speed",
        speed,
        "--linger",
        linger,
    ]
}

fn run_path(
    session: &std::path::Path,
    publish_extra: &[&str],
    feed_extra: &[&str],
) -> (i32, String, Vec<(String, Vec<u8>)>) {
    let port = free_udp_port_pair();
    let group = format!("239.255.42.{}:{port}", 1 + port % 200);
    run_path_on(session, &group, publish_extra, feed_extra)
}

/// [`run_path`] on a given group (ADDR:PORT; the re-request server listens on PORT + 1).
fn run_path_on(
    session: &std::path::Path,
    group: &str,
    publish_extra: &[&str],
    feed_extra: &[&str],
) -> (i32, String, Vec<(String, Vec<u8>)>) {
    let router = RouterProc::start(&[]);
    let group = group.to_string();
    let (done, coll) = collector(router.addr_str());
    let feed = start_feed(&router, &group, feed_extra);
    let mut pub_args = publish_args(session, &group, "1x", "1s");
    pub_args.extend_from_slice(publish_extra);
    let (st, out, err) = run_cli(&pub_args, Duration::from_secs(60));
    assert!(st.success(), "publish failed:\n{out}{err}");
    let (code, feed_out) = finish(feed, Duration::from_secs(60));
    stop_collector(&done, &feed_out);
    let stream = coll.join().unwrap();
    (code, feed_out, stream)
}

/// The value printed after `name` in the feed's report (`name value · name value`,
/// several lines).
fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.split(['·', '\n'])
        .find_map(|part| {
            let mut w = part.split_whitespace();
            (w.next() == Some(name)).then(|| w.next().unwrap())
        })
        .unwrap_or_else(|| panic!("{name} not in {out:?}"))
}

fn counter(out: &str, name: &str) -> u64 {
    field(out, name)
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e} in {out:?}"))
}

/// The trades and quotes the feed must publish for a session file (length-prefixed
/// ITCH 5.0), by the reference model, and a describer of its messages.
fn reference(session: &std::path::Path) -> (Vec<model::Update>, Vec<tickwire_itch::Message>) {
    let bytes = std::fs::read(session).unwrap();
    let mut msgs = Vec::new();
    let mut at = 0;
    while at + 2 <= bytes.len() {
        let n = usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
        msgs.push(tickwire_itch::decode(&bytes[at + 2..at + 2 + n]).unwrap());
        at += 2 + n;
    }
    assert_eq!(at, bytes.len(), "whole records");
    let mut m = model::Model::new("NASDAQ");
    for (i, msg) in msgs.iter().enumerate() {
        m.apply(i as u64 + 1, msg);
    }
    (m.out, msgs)
}

/// Asserts that `stream` is, field by field, what the ITCH input says it must be.
fn assert_matches_input(session: &std::path::Path, stream: &[(String, Vec<u8>)]) {
    let (expected, msgs) = reference(session);
    assert!(expected.len() > 1000, "a session with activity");
    let describe = |seq: u64| format!("{:?}", msgs.get(seq as usize - 1));
    model::assert_stream_eq(&expected, stream, &describe);
}

#[test]
fn generate_is_reproducible() {
    let a = std::fs::read(generate("gen-a.itch", "5")).unwrap();
    let b = std::fs::read(generate("gen-b.itch", "5")).unwrap();
    let c = std::fs::read(generate("gen-c.itch", "6")).unwrap();
    assert_eq!(a, b, "same seed, same bytes");
    assert_ne!(a, c, "another seed, another session");
}

#[test]
fn injected_loss_is_recovered_and_the_stream_equals_a_lossless_run() {
    let session = generate("loss.itch", "11");
    let (code_a, out_a, clean) = run_path(&session, &[], &[]);
    assert_eq!(code_a, 0, "{out_a}");
    assert_eq!(counter(&out_a, "lost"), 0);
    assert_eq!(counter(&out_a, "messages"), 30_000);
    assert!(!clean.is_empty());
    assert_eq!(
        clean.len() as u64,
        counter(&out_a, "published"),
        "the subscriber got every update"
    );

    // Each re-request waits 200 ms for its answer (the default 50 ms is short for a
    // publisher descheduled on a loaded machine), 3 tries within the publisher's 1 s
    // linger.
    let (code_b, out_b, lossy) = run_path(
        &session,
        &["--loss", "0.05", "--seed", "3"],
        &["--retransmit-timeout", "200ms"],
    );
    assert_eq!(code_b, 0, "{out_b}");
    assert!(
        counter(&out_b, "gaps") > 0,
        "5% loss must open gaps: {out_b}"
    );
    assert!(counter(&out_b, "recovered") > 0, "{out_b}");
    assert_eq!(counter(&out_b, "lost"), 0, "{out_b}");
    assert_eq!(counter(&out_b, "duplicates"), 0, "{out_b}");
    assert_eq!(lossy.len(), clean.len(), "same number of updates");
    assert!(
        lossy == clean,
        "the recovered stream equals the lossless one, in order, byte for byte"
    );
    // And both are what the ITCH input says, checked by an independent model.
    assert_matches_input(&session, &clean);
    assert_matches_input(&session, &lossy);
}

/// [`run_path_on`] with A/B lines on `group` and `group_b`: 5% independent loss on each
/// (`seed`), no re-request server, the feed waiting 20 ms for the other line.
fn run_ab_lines(
    session: &std::path::Path,
    group: &str,
    group_b: &str,
    seed: &str,
) -> (i32, String, Vec<(String, Vec<u8>)>) {
    run_path_on(
        session,
        group,
        &[
            "--group-b",
            group_b,
            "--loss",
            "0.05",
            "--loss-b",
            "0.05",
            "--seed",
            seed,
            "--no-retransmit",
        ],
        &["--group-b", group_b, "--line-wait", "20ms"],
    )
}

/// A/B lines (issue 19): 5% independent loss on each line and no re-request server:
/// the feed handler fills every gap from the other line, nothing is lost or
/// re-requested, and the stream is what the ITCH input says.
#[test]
fn ab_lines_with_loss_on_both_and_no_rerequest_server_lose_nothing() {
    let session = generate("ab.itch", "13");
    let port = free_udp_port_pair();
    let group = format!("239.255.42.{}:{port}", 1 + port % 200);
    let port_b = free_udp_port_pair();
    let group_b = format!("239.255.43.{}:{port_b}", 1 + port_b % 200);
    let (code, out, stream) = run_ab_lines(&session, &group, &group_b, "5");
    assert_eq!(code, 0, "{out}");
    assert_eq!(counter(&out, "lost"), 0, "{out}");
    assert_eq!(counter(&out, "re-requests"), 0, "{out}");
    assert!(counter(&out, "gaps") > 0, "5% loss must open gaps: {out}");
    assert_eq!(counter(&out, "line_filled"), counter(&out, "gaps"), "{out}");
    assert!(counter(&out, "duplicates") > 0, "the second copies: {out}");
    assert_eq!(counter(&out, "messages"), 30_000, "{out}");
    assert_eq!(stream.len() as u64, counter(&out, "published"));
    assert_matches_input(&session, &stream);
}

/// Regression: with both lines on one port (239.x.x.1:P and 239.x.x.2:P), each line's
/// socket received both groups (bound to 0.0.0.0:P, Linux delivers every group joined on
/// the host), so duplicates were about three times the messages and line_filled 0.
#[test]
fn ab_lines_on_the_same_port_are_each_received_once() {
    let session = generate("ab-port.itch", "14");
    let port = free_udp_port_pair();
    let group = format!("239.255.47.{}:{port}", 1 + port % 200);
    let group_b = format!("239.255.48.{}:{port}", 1 + port % 200);
    let (code, out, stream) = run_ab_lines(&session, &group, &group_b, "6");
    assert_eq!(code, 0, "{out}");
    assert_eq!(counter(&out, "lost"), 0, "{out}");
    assert_eq!(counter(&out, "messages"), 30_000, "{out}");
    assert!(counter(&out, "gaps") > 0, "5% loss must open gaps: {out}");
    assert!(counter(&out, "line_filled") > 0, "{out}");
    assert_eq!(counter(&out, "line_filled"), counter(&out, "gaps"), "{out}");
    // One second copy per message that reached both lines: about 0.95 x 0.95 of them,
    // never more than the session's messages (each line seen once).
    let duplicates = counter(&out, "duplicates");
    assert!(
        duplicates > 20_000 && duplicates <= 30_000,
        "one duplicate per message received on both lines: {out}"
    );
    assert_eq!(stream.len() as u64, counter(&out, "published"));
    assert_matches_input(&session, &stream);
}

/// Hostile-input pass: the books held every live order a feed added (3 M orders: 333
/// MB, without end). Past `--max-orders` an Add Order is refused, counted, and the run
/// exits 3 (its books are wrong); every message is still applied.
#[test]
fn adds_past_max_orders_are_refused_counted_and_exit_3() {
    let session = generate("capped.itch", "13");
    let (code, out, stream) = run_path(&session, &[], &["--max-orders", "40"]);
    assert_eq!(code, 3, "refused orders give exit code 3: {out}");
    assert!(counter(&out, "orders_refused") > 0, "{out}");
    assert_eq!(counter(&out, "lost"), 0, "{out}");
    assert_eq!(counter(&out, "messages"), 30_000, "{out}");
    assert_eq!(stream.len() as u64, counter(&out, "published"));
}

#[test]
fn unrecoverable_loss_is_counted_and_reported() {
    let session = generate("lost.itch", "12");
    // Re-requests go to a port nobody answers: every gap ends up lost.
    let dead = free_udp_port_pair().to_string();
    let dead_addr = format!("127.0.0.1:{dead}");
    let (code, out, stream) = run_path(
        &session,
        &["--loss", "0.05", "--seed", "4"],
        &[
            "--request",
            &dead_addr,
            "--retransmit-timeout-ms",
            "10",
            "--retransmit-tries",
            "2",
        ],
    );
    assert_eq!(code, 3, "lost messages give exit code 3: {out}");
    assert!(counter(&out, "lost") > 0, "{out}");
    assert_eq!(counter(&out, "recovered"), 0, "{out}");
    // The kernel's drops on the feed's socket are reported with the rest.
    assert!(out.contains(" · kernel_drops "), "{out}");
    assert_eq!(
        counter(&out, "messages") + counter(&out, "lost"),
        30_000,
        "every sequence number is either applied or counted lost: {out}"
    );
    assert_eq!(stream.len() as u64, counter(&out, "published"));
}

#[test]
fn capture_then_replay_feeds_the_same_stream() {
    let session = generate("cap.itch", "13");
    let router = RouterProc::start(&[]);
    let port = free_udp_port_pair();
    let group = format!("239.255.43.{}:{port}", 1 + port % 200);
    let pcap = temp("cap.pcap");
    // Capture the live publish (no feed handler: nothing re-requests).
    let cap = spawn_until(
        &[
            "md",
            "capture",
            "--group",
            &group,
            "--out",
            pcap.to_str().unwrap(),
            "--duration",
            "4s",
        ],
        "capturing ",
    );
    let (st, out, err) = run_cli(
        &publish_args(&session, &group, "1x", "0s"),
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
    let (code, cap_out) = finish(cap, Duration::from_secs(30));
    assert_eq!(code, 0, "{cap_out}");
    // The summary counts the kernel's drops, as its receive-buffer warning promises.
    assert!(
        cap_out.contains("captured ") && cap_out.contains(" · kernel_drops "),
        "{cap_out}"
    );
    drop(router);
    // Replay the capture (datagrams in file order) into a feed handler on another group:
    // it must see the complete session (a capture missing a datagram would show as lost).
    let port2 = free_udp_port_pair();
    let group2 = format!("239.255.44.{}:{port2}", 1 + port2 % 200);
    let router2 = RouterProc::start(&[]);
    let (done, coll) = collector(router2.addr_str());
    let feed = spawn(&[
        "feed",
        "--group",
        &group2,
        "--router",
        &router2.addr_str(),
        "--idle",
        "block",
        "--quiet",
        "--retransmit-tries",
        "1",
    ]);
    common::wait_for_subscriber(&router2.addr_str(), "tickwire-feed", 0);
    let (st, out, err) = run_cli(
        &[
            "replay",
            pcap.to_str().unwrap(),
            "--speed",
            "4x",
            "--to",
            &group2,
        ],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
    // Passes are counted complete (new-user pass: a loop stopped in its third said 2).
    assert!(out.contains("passes        1 complete\n"), "{out}");
    let (code, feed_out) = finish(feed, Duration::from_secs(60));
    stop_collector(&done, &feed_out);
    let stream = coll.join().unwrap();
    assert_eq!(code, 0, "{feed_out}");
    assert_eq!(counter(&feed_out, "messages"), 30_000, "{feed_out}");
    assert_eq!(counter(&feed_out, "gaps"), 0, "{feed_out}");
    assert_eq!(stream.len() as u64, counter(&feed_out, "published"));
}

/// A MoldUDP64 packet of `session` at `seq` carrying one Add Order for AAPL (locate 1)
/// at an absurd price: applied, it would show in AAPL's quotes.
fn spoof(session: &str, seq: u64) -> Vec<u8> {
    use tickwire_itch::{AddOrder, Header, Message, PacketBuilder, Price, Session, Side, Symbol};
    let mut b = PacketBuilder::new(Session::new(session).unwrap(), seq, 1400);
    let add = Message::from(AddOrder {
        header: Header {
            stock_locate: 1,
            tracking_number: 0,
            timestamp: 1,
        },
        order_ref: 999_999_999,
        side: Side::Buy,
        shares: 1,
        stock: Symbol::new("AAPL").unwrap(),
        price: Price(999_999_999),
    });
    b.push_message(&add).unwrap();
    b.finish().to_vec()
}

/// Issue 12 item 4: a stray datagram of another session arrives first, and datagrams of
/// the real session claim seq + 10^9 (before the session starts and while it runs).
/// Without and with `--session`, the feed must publish every message of the real
/// session, exactly as the ITCH input says.
#[test]
fn feed_publishes_every_message_after_a_stray_session_first_and_a_billion_jump() {
    let session = generate("stray.itch", "14");
    for feed_extra in [&[][..], &["--session", "TICKWIRE01"][..]] {
        let router = RouterProc::start(&[]);
        let port = free_udp_port_pair();
        let group = format!("239.255.45.{}:{port}", 1 + port % 200);
        let dst: std::net::SocketAddrV4 = group.parse().unwrap();
        let (done, coll) = collector(router.addr_str());
        let feed = start_feed(&router, &group, feed_extra);
        let inject = tickwire_capture::net::group_sender(std::net::Ipv4Addr::LOCALHOST).unwrap();
        inject.send_to(&spoof("STRAY00001", 1), dst).unwrap();
        inject
            .send_to(&spoof("TICKWIRE01", 1_000_000_000), dst)
            .unwrap();
        let publisher = spawn(&publish_args(&session, &group, "0.25x", "1s"));
        // Another spoof, most likely while the session runs (its count is the same
        // whenever it lands: it is far from the first one, so they never agree).
        std::thread::sleep(Duration::from_millis(200));
        inject
            .send_to(&spoof("TICKWIRE01", 3_000_000_000), dst)
            .unwrap();
        let (st, pub_out) = finish(publisher, Duration::from_secs(60));
        assert_eq!(st, 0, "publish failed: {pub_out}");
        let (code, out) = finish(feed, Duration::from_secs(60));
        stop_collector(&done, &out);
        let stream = coll.join().unwrap();
        let why = format!("feed {feed_extra:?}:\n{out}");
        assert_eq!(code, 0, "{why}");
        assert_eq!(field(&out, "session"), "TICKWIRE01", "{why}");
        assert_eq!(counter(&out, "messages"), 30_000, "{why}");
        assert_eq!(counter(&out, "lost"), 0, "{why}");
        assert_eq!(counter(&out, "foreign_session"), 1, "{why}");
        assert_eq!(counter(&out, "suspect_jumps"), 2, "{why}");
        assert_eq!(counter(&out, "accepted_jumps"), 0, "{why}");
        assert_eq!(counter(&out, "malformed"), 0, "{why}");
        assert_eq!(stream.len() as u64, counter(&out, "published"), "{why}");
        assert_matches_input(&session, &stream);
    }
}

/// A hostile-input probe (2026-12-05): 200 forged heartbeats, each 99,000 beyond the
/// one before, sent between two packets of a slow live session, moved the feed 19.7
/// million ahead: it counted them lost, took every real packet after for a duplicate,
/// ignored the real End of Session and never exited. Now the chain is cut at
/// `max_jump` and the gap it opened is taken back by the next real packet.
#[test]
fn a_chain_of_forged_heartbeats_neither_moves_nor_wedges_a_slow_feed() {
    // 4 packets a second: a gap opened by the chain is given up (3 re-requests 50 ms
    // apart, no answer beyond the real end) before the next real packet takes it back.
    let session = common::md_session("slow.itch", "21", 5, 30);
    let router = RouterProc::start(&[]);
    let port = free_udp_port_pair();
    let group = format!("239.255.46.{}:{port}", 1 + port % 200);
    let dst: std::net::SocketAddrV4 = group.parse().unwrap();
    let (done, coll) = collector(router.addr_str());
    let feed = start_feed(&router, &group, &["--session", "TICKWIRE01"]);
    let publisher = spawn(&publish_args(&session, &group, "4/s", "1s"));
    std::thread::sleep(Duration::from_millis(2_500));
    let inject = tickwire_capture::net::group_sender(std::net::Ipv4Addr::LOCALHOST).unwrap();
    for k in 1..=200u64 {
        let mut hb = b"TICKWIRE01".to_vec();
        hb.extend_from_slice(&(15 + k * 99_000).to_be_bytes());
        hb.extend_from_slice(&0u16.to_be_bytes());
        inject.send_to(&hb, dst).unwrap();
    }
    let (st, pub_out) = finish(publisher, Duration::from_secs(60));
    assert_eq!(st, 0, "publish failed: {pub_out}");
    let (code, out) = finish(feed, Duration::from_secs(30));
    stop_collector(&done, &out);
    let stream = coll.join().unwrap();
    assert_eq!(code, 0, "{out}");
    assert_eq!(counter(&out, "messages"), 30, "{out}");
    assert_eq!(counter(&out, "lost"), 0, "{out}");
    assert!(
        counter(&out, "suspect_jumps") > 0,
        "the chain was cut: {out}"
    );
    assert!(
        counter(&out, "false_ends") > 0,
        "the skip was taken back: {out}"
    );
    assert!(out.contains("end of session"), "{out}");
    assert!(counter(&out, "published") > 0, "{out}");
    assert_eq!(stream.len() as u64, counter(&out, "published"), "{out}");
}

/// New-user pass: `feed --session` with a mistyped name waited for ever and said why only
/// when stopped. It says so once while it runs (with --quiet too).
#[test]
fn a_feed_following_another_session_says_so_while_it_runs() {
    let session = common::md_session("foreign.itch", "23", 5, 60);
    let router = RouterProc::start(&[]);
    let port = free_udp_port_pair();
    let group = format!("239.255.47.{}:{port}", 1 + port % 200);
    let raddr = router.addr_str();
    let publisher = spawn(&publish_args(&session, &group, "20/s", "1s"));
    let feed = spawn_until(
        &[
            "feed",
            "--group",
            &group,
            "--router",
            &raddr,
            "--idle",
            "block",
            "--quiet",
            "--session",
            "WRONGNAME",
        ],
        "and no message of the session followed: is --session mistyped?",
    );
    drop(feed);
    let (st, pub_out) = finish(publisher, Duration::from_secs(60));
    assert_eq!(st, 0, "publish failed: {pub_out}");
}

/// Issue 12 item 8: a publish that can send nothing says why and exits 1.
#[test]
fn md_publish_that_cannot_send_says_why() {
    let session = generate("unsent.itch", "15");
    let port = free_udp_port_pair();
    // The broadcast address without SO_BROADCAST: every send is refused (EACCES).
    let request = format!("127.0.0.1:{}", port + 1);
    let broadcast = format!("255.255.255.255:{port}");
    let mut args = publish_args(&session, &broadcast, "max", "0s");
    // The old spelling of --request: hidden from --help, still accepted.
    args.extend_from_slice(&["--request-listen", &request]);
    let (st, out, err) = run_cli(&args, Duration::from_secs(60));
    assert_eq!(st.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("could not be sent") && err.contains("the first: "),
        "the reason is printed: {out}{err}"
    );
}

/// Hostile-input pass (2026-12-07): a session file with a 3,000-byte message in it was
/// published without it, the messages after it renumbered, exit status 0. It is
/// refused before anything is sent.
#[test]
fn md_publish_refuses_a_message_no_packet_can_carry() {
    let session = generate("oversize.itch", "16");
    let mut bytes = std::fs::read(&session).unwrap();
    bytes.extend_from_slice(&3000u16.to_be_bytes());
    bytes.push(b'S');
    bytes.extend_from_slice(&[0u8; 2999]);
    std::fs::write(&session, &bytes).unwrap();
    let port = free_udp_port_pair();
    let request = format!("127.0.0.1:{}", port + 1);
    let group = format!("239.9.9.7:{port}");
    let mut args = publish_args(&session, &group, "max", "0s");
    args.extend_from_slice(&["--request", &request]);
    let (st, out, err) = run_cli(&args, Duration::from_secs(60));
    assert_eq!(st.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("message 30001 of the session is 3000 bytes") && err.contains("at most 1378"),
        "{out}{err}"
    );
    assert!(!out.contains("scheduled"), "nothing was sent: {out}");
}

#[test]
fn feed_group_must_be_a_multicast_group_with_a_port() {
    let t = Duration::from_secs(30);
    let (st, _, err) = run_cli(&["feed", "--group", "1.2.3.4:26400"], t);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("1.2.3.4:26400 is not a multicast group (224.0.0.0/4"),
        "{err}"
    );
    let (st, _, err) = run_cli(&["feed", "--group-b", "10.0.0.1:26400"], t);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("is not a multicast group"), "{err}");
    let (st, _, err) = run_cli(&["feed", "--group", "239.1.1.1"], t);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("239.1.1.1 has no port") && err.contains("239.1.1.1:26400"),
        "{err}"
    ); // md capture takes a unicast address too, but needs the port as well.
    let (st, _, err) = run_cli(
        &[
            "md",
            "capture",
            "--group",
            "239.1.1.1",
            "--out",
            "/nonexistent/x.pcap",
        ],
        t,
    );
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("239.1.1.1 has no port"), "{err}");
    // Every other ADDR:PORT flag says the same (they gave the parser's "invalid IPv4
    // socket address syntax"), before any file or socket is opened.
    for args in [
        &[
            "md",
            "publish",
            "--file",
            "/nonexistent",
            "--group",
            "239.1.1.1",
        ][..],
        &[
            "md",
            "publish",
            "--file",
            "/nonexistent",
            "--group-b",
            "239.1.1.2",
        ],
        &[
            "md",
            "publish",
            "--file",
            "/nonexistent",
            "--request",
            "127.0.0.1",
        ],
        &["feed", "--request", "127.0.0.1"],
        &["replay", "/nonexistent.pcap", "--to", "127.0.0.1"],
        &["mcast", "send", "--group", "239.1.1.1"],
        &["mcast", "recv", "--group", "239.1.1.1"],
    ] {
        let (st, _, err) = run_cli(args, t);
        assert_eq!(st.code(), Some(2), "{args:?}: {err}");
        let ip = args.last().unwrap();
        assert!(
            err.contains(&format!("{ip} has no port")) && err.contains(&format!("{ip}:26400")),
            "{args:?}: {err}"
        );
    }
}

/// New-user pass: values out of range started the feed (sockets open, the receive
/// buffer warning printed) and then exited 1 naming internal fields
/// (`confirm_packets must be between 1 and 16`). They are usage errors, exit 2, naming
/// the flag, before anything starts.
#[test]
fn feed_values_out_of_range_are_usage_errors_naming_the_flag() {
    let t = Duration::from_secs(30);
    let router = format!("127.0.0.1:{}", free_udp_port_pair());
    for (flag, value, says) in [
        (
            "--confirm-packets",
            "0",
            "--confirm-packets must be 1 to 16 (got 0)",
        ),
        (
            "--confirm-packets",
            "17",
            "--confirm-packets must be 1 to 16 (got 17)",
        ),
        (
            "--depth",
            "65",
            "--depth must be 0 to 64 levels a side (got 65)",
        ),
        (
            "--retransmit-tries",
            "0",
            "--retransmit-tries must be at least 1 (got 0)",
        ),
        ("--max-jump", "0", "--max-jump must be at least 1 (got 0)"),
        (
            "--max-orders",
            "0",
            "--max-orders must be at least 1 (got 0)",
        ),
        (
            "--max-held-bytes",
            "64000",
            "--max-held-bytes must be at least 64KiB, the largest datagram (got 64000)",
        ),
        ("--venue", "a/b", "--venue must be one topic level"),
        (
            "--session",
            "ABCDEFGHIJK",
            "--session <NAME>': must be at most 10 printable ASCII characters (MoldUDP64 \
             session names are a 10-byte field; got 11 bytes)",
        ),
    ] {
        let (st, out, err) = run_cli(
            &[
                "feed",
                "--group",
                "239.1.1.1:26400",
                "--router",
                &router,
                flag,
                value,
            ],
            t,
        );
        assert_eq!(st.code(), Some(2), "{flag} {value}: {out}{err}");
        assert!(err.contains(says), "{flag} {value}: {err}");
        // Nothing started: no socket warning, no internal field names.
        assert!(!err.contains("warning"), "{flag} {value}: {err}");
        assert!(
            !err.contains("confirm_packets") && !err.contains("alpha value"),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn md_generate_with_too_few_messages_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.itch");
    let (st, _, err) = run_cli(
        &[
            "md",
            "generate",
            "--symbols",
            "10",
            "--messages",
            "10",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("10 messages cannot hold a session"), "{err}");
    assert!(!out.exists(), "a bad setting leaves no file behind");
}

/// New-user pass: `md capture --out nodir/x.pcap` warned about the receive buffer, then
/// failed with a bare "No such file or directory". The missing directory is said first,
/// and nothing else.
#[test]
fn md_capture_into_a_missing_directory_says_so_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nodir").join("x.pcap");
    let (st, stdout, err) = run_cli(
        &[
            "md",
            "capture",
            "--group",
            "239.1.1.1:26400",
            "--out",
            out.to_str().unwrap(),
            "--count",
            "1",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(st.code(), Some(1), "{stdout}{err}");
    assert!(
        err.starts_with("error: cannot create the capture file") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
}

/// New-user pass: `md generate --out -` wrote a file named `-`; `-` is refused (the
/// output is binary) in the directory it ran in, for generate and capture alike.
#[test]
fn md_out_dash_is_a_usage_error_not_a_file_named_dash() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["md", "generate", "--messages", "1000", "--out", "-"][..],
        &[
            "md",
            "capture",
            "--group",
            "239.1.1.1:26400",
            "--out",
            "-",
            "--count",
            "1",
        ],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickwire"))
            .args(args)
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("standard output) is not supported"),
            "{args:?}: {err}"
        );
        assert!(
            !dir.path().join("-").exists(),
            "{args:?} created a file named -"
        );
    }
}

/// The kernel caps a receive buffer at net.core.rmem_max without an error: the feed
/// says so once, with the sysctl to raise, before it starts (here it then fails to
/// reach a router nobody runs).
#[test]
fn feed_warns_once_when_the_kernel_grants_a_smaller_receive_buffer() {
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(usize::MAX);
    let group = format!("239.1.1.1:{}", free_udp_port_pair());
    let router = format!("127.0.0.1:{}", common::free_port());
    let (st, _, err) = run_cli(
        &["feed", "--group", &group, "--router", &router],
        Duration::from_secs(30),
    );
    assert_eq!(st.code(), Some(1), "{err}");
    let warned = err.matches("net.core.rmem_max").count();
    if rmem_max < 8 << 20 {
        assert_eq!(warned, 1, "{err}");
        assert!(
            err.contains(&format!(
                "receive buffer of {rmem_max} bytes, not the 8388608"
            )),
            "{err}"
        );
    } else {
        assert_eq!(warned, 0, "{err}");
    }
}

/// A hostile-input probe (2026-12-05): a capture whose two records are 136 years
/// apart made `replay` sleep for that long, and the first SIGTERM only printed
/// "stopping". Now the replay says how long it would take and ends at the first stop.
#[test]
fn a_replay_of_records_years_apart_says_so_and_stops_at_the_first_signal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("years.pcap");
    let mut w = tickwire_capture::CaptureWriter::create(&path).unwrap();
    let src = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 40000);
    let dst = std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(239, 1, 1, 1), 40001);
    w.write(1_000_000_000, src, dst, b"first").unwrap();
    w.write(4_294_967_295_000_000_000, src, dst, b"second")
        .unwrap();
    // A last record one second after the first: the note was computed from the last
    // record, so a middle one years ahead was waited for without a word (probe).
    w.write(2_000_000_000, src, dst, b"third").unwrap();
    w.finish().unwrap();
    let mut k = spawn_until(
        &["replay", path.to_str().unwrap(), "--to", "127.0.0.1:9"],
        "later than the last record's",
    );
    let started = std::time::Instant::now();
    common::signal(k.0.id(), "TERM");
    let st = common::wait_child(&mut k.0, Duration::from_secs(10), "replay after SIGTERM");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped at the first signal: {:?}",
        started.elapsed()
    );
    let mut out = String::new();
    std::io::Read::read_to_string(k.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(st.code().is_some(), "exited, not killed: {st:?} {out}");
    assert!(out.contains("1 sent"), "the first record went out: {out}");
}

/// Hostile-input probe: the re-request server answered every request, to any source
/// address, with a full packet: 400 KB of 20-byte requests had 27 MB sent back (69x).
/// Answers now come out of a byte budget (16 MiB/s, 1 MiB at once): a flood gets at
/// most that, the rest is counted and not answered, and the summary says so.
#[test]
fn a_flood_of_re_requests_is_answered_within_the_byte_budget() {
    use tickwire_itch::{RetransmitRequest, Session};
    let session = common::md_session("rereq.itch", "5", 20, 20_000);
    let port = free_udp_port_pair();
    let group = format!("239.255.48.{}:{port}", 1 + port % 200);
    let publisher = std::process::Command::new(common::BIN)
        .args(["md", "publish", "--file"])
        .arg(&*session)
        .args(["--group", &group, "--speed", "max", "--linger", "4s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let server = format!("127.0.0.1:{}", port + 1);
    let mut req = [0u8; 20];
    let n = RetransmitRequest {
        session: Session::new("TICKWIRE01").unwrap(),
        sequence: 1,
        count: u16::MAX,
    }
    .encode(&mut req)
    .unwrap();
    // Let the publisher reach its re-request server, then 2 s of requests.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (mut sent, mut got) = (0u64, 0u64);
    let mut buf = [0u8; 65536];
    while started.elapsed() < Duration::from_secs(2) && sent < 400_000 {
        if sock.send_to(&req[..n], &server).is_ok() {
            sent += 1;
        }
        while let Ok((len, _)) = sock.recv_from(&mut buf) {
            got += len as u64;
        }
    }
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        match sock.recv_from(&mut buf) {
            Ok((len, _)) => got += len as u64,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let out = publisher.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the publisher sent back, by its own count, is within the budget: 1 MiB at
    // once, 16 MiB/s over the publisher's whole run (its start, the requests, the
    // linger: at most `secs` + 6 s), one packet of slack. Without the budget every
    // request got a ~1,400-byte packet.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("re-requests"))
        .unwrap_or_else(|| panic!("no re-requests line: {stdout}"));
    let bytes: f64 = line
        .split(" messages retransmitted, ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let bound = (1u64 << 20) as f64 + (16u64 << 20) as f64 * (secs + 6.0) + 1500.0;
    assert!(sent > 1000, "only {sent} requests sent");
    assert!(
        bytes <= bound,
        "{line}: {bytes} bytes for {sent} requests ({got} received here)"
    );
}

/// `tickwire feed --group GROUP --router ROUTER --idle block --quiet EXTRA...` with its
/// standard output and error kept, once it has connected.
fn feed_child(router: &str, group: &str, extra: &[&str]) -> std::process::Child {
    let mut args = vec![
        "feed", "--group", group, "--router", router, "--idle", "block", "--quiet",
    ];
    args.extend_from_slice(extra);
    common::cli(&args).spawn().expect("spawn tickwire feed")
}

/// Waits (30 s at most) for a [`feed_child`] to end: its exit code, stdout and stderr.
fn feed_ended(mut feed: std::process::Child) -> (Option<i32>, String, String) {
    let status = common::wait_child(&mut feed, Duration::from_secs(30), "the feed");
    let mut out = String::new();
    std::io::Read::read_to_string(feed.stdout.as_mut().unwrap(), &mut out).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(feed.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code(), out, err)
}

/// A [`feed_child`] on `router` and `group`, and `md publish` of `session` to it (30,000
/// messages over 10 s), once the feed has published something (not a sleep: a loaded
/// machine may start the publisher late).
fn feed_publishing(
    router: &str,
    group: &str,
    session: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, Kill) {
    let feed = feed_child(router, group, extra);
    common::wait_for_subscriber(router, "tickwire-feed", 0);
    let mut watch = Client::connect(router).unwrap();
    watch.subscribe("md/>").unwrap();
    let publisher = spawn(&publish_args(session, group, "3000/s", "1s"));
    assert!(
        watch
            .recv(Wait::Timeout(Duration::from_secs(30)))
            .unwrap()
            .is_some(),
        "the feed published nothing"
    );
    (feed, publisher)
}

/// A router lost in the middle of a session ends the feed with every counter of its run
/// so far, then the error, exit 1 (new-user pass: it printed only the error, and the
/// run's loss accounting was gone).
#[test]
fn a_lost_router_ends_the_feed_with_its_counters_then_the_error() {
    let session = generate("lost-router.itch", "31");
    let port = free_udp_port_pair();
    let group = format!("239.255.43.{}:{port}", 1 + port % 200);
    let router = RouterProc::start(&["--no-guaranteed"]);
    let (feed, publisher) = feed_publishing(&router.addr_str(), &group, &session, &[]);
    // The feed still publishes when the router goes.
    drop(router);
    let (code, out, err) = feed_ended(feed);
    drop(publisher);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(counter(&out, "packets") > 0, "{out}");
    assert!(counter(&out, "published") > 0, "{out}");
    assert!(
        err.contains("error: publishing to the router: ")
            && err.contains("the feed handler stopped"),
        "{err}"
    );
}

/// A feed stopped by Ctrl-C before the End of Session exits 130, not 0 (new-user pass:
/// 0 said the whole session was applied); with --keep-running, stopping is how it ends,
/// and nothing lost is 0.
#[test]
fn a_feed_stopped_before_the_end_of_session_exits_130() {
    let session = generate("stopped.itch", "32");
    let port = free_udp_port_pair();
    let group = format!("239.255.44.{}:{port}", 1 + port % 200);
    let router = RouterProc::start(&["--no-guaranteed"]);
    let raddr = router.addr_str();
    for (extra, expected) in [(&[][..], 130), (&["--keep-running"][..], 0)] {
        // Stopped partway.
        let (feed, publisher) = feed_publishing(&raddr, &group, &session, extra);
        common::interrupt(&feed);
        let (code, out, err) = feed_ended(feed);
        drop(publisher);
        assert_eq!(code, Some(expected), "{extra:?}: {out}{err}");
        assert!(counter(&out, "packets") > 0, "{out}");
        assert!(!out.contains("end of session"), "{out}");
        assert_eq!(
            err.contains("stopped before the End of Session"),
            expected == 130,
            "{err}"
        );
    }
}

/// A feed with nothing to publish still notices its router stopping (its CLOSE), within
/// about a second, and ends as above.
#[test]
fn an_idle_feed_notices_its_router_stopping() {
    let port = free_udp_port_pair();
    let group = format!("239.255.43.{}:{port}", 1 + port % 200);
    let router = RouterProc::start(&["--no-guaranteed"]);
    let raddr = router.addr_str();
    let feed = feed_child(&raddr, &group, &[]);
    common::wait_for_subscriber(&raddr, "tickwire-feed", 0);
    router.terminate();
    let (code, out, err) = feed_ended(feed);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(counter(&out, "packets"), 0, "{out}");
    assert!(err.contains("router shutting down"), "{err}");
}

/// `md capture --out` refuses to overwrite a file that is not a pcap capture (an ITCH
/// session swapped for it on the command line), and `md generate --out` one that is;
/// each still overwrites a file of its own kind (new-user pass: a 30.8 MB session
/// became a 24-byte empty capture, exit 0).
#[test]
fn md_outputs_refuse_to_overwrite_a_file_of_the_other_kind() {
    let dir = tempfile::tempdir().unwrap();
    let session = generate("kept.itch", "5");
    let itch = dir.path().join("day.itch");
    std::fs::copy(&session, &itch).unwrap();
    let before = std::fs::read(&itch).unwrap();
    let group = format!("239.255.45.1:{}", free_udp_port_pair());
    let capture = |out: &std::path::Path| {
        run_cli(
            &[
                "md",
                "capture",
                "--group",
                &group,
                "--out",
                out.to_str().unwrap(),
                "--duration",
                "200ms",
            ],
            Duration::from_secs(30),
        )
    };
    let (st, out, err) = capture(&itch);
    assert_eq!(st.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("is not a pcap capture") && err.contains("refusing to overwrite"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&itch).unwrap(),
        before,
        "the session was changed"
    );
    let generate_into = |out: &std::path::Path| {
        run_cli(
            &[
                "md",
                "generate",
                "--symbols",
                "2",
                "--messages",
                "100",
                "--seed",
                "1",
                "--out",
                out.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        )
    };
    // A capture is overwritten by a capture...
    let pcap = dir.path().join("day.pcap");
    let (st, out, err) = capture(&pcap);
    assert!(st.success(), "{out}{err}");
    let (st, out, err) = capture(&pcap);
    assert!(st.success(), "{out}{err}");
    // ...and refused as the output of a session.
    let (st, out, err) = generate_into(&pcap);
    assert_eq!(st.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("is a pcap capture, not an ITCH session"),
        "{err}"
    );
    // A pcapng capture counts as a capture: refused as a session's output, overwritten
    // by a capture.
    let pcapng = dir.path().join("old.pcapng");
    std::fs::write(&pcapng, [0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0]).unwrap();
    let (st, out, err) = generate_into(&pcapng);
    assert_eq!(st.code(), Some(2), "{out}{err}");
    let (st, out, err) = capture(&pcapng);
    assert!(st.success(), "{out}{err}");
    // A session is overwritten by a session.
    let (st, out, err) = generate_into(&itch);
    assert!(st.success(), "{out}{err}");
}

/// A publish the router refuses without closing the connection (the feed's user may
/// publish quotes and trades, not the depth updates of --depth) does not end the feed:
/// it runs to the end of the session and says what was refused.
#[test]
fn a_refused_update_does_not_end_the_feed() {
    let dir = tempfile::tempdir().unwrap();
    let (token, sha) = common::new_token();
    let config = dir.path().join("router.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nanonymous = \"allow\"\n\n[[auth.users]]\nname = \"feed\"\n\
             token_sha256 = \"{sha}\"\npublish = {{ allow = [\"md/*/*/quote\", \"md/*/*/trade\"] }}\n"
        ),
    )
    .unwrap();
    let router = RouterProc::start(&["--no-guaranteed", "--config", config.to_str().unwrap()]);
    let raddr = router.addr_str();
    let session = common::md_session("refused.itch", "9", 5, 3_000);
    let port = free_udp_port_pair();
    let group = format!("239.255.43.{}:{port}", 1 + port % 200);
    let feed = feed_child(&raddr, &group, &["--depth", "5", "--token", &token]);
    common::wait_for_subscriber(&raddr, "tickwire-feed", 0);
    // Published over 3 s, so that the feed looks at its connection during it.
    let (st, out, err) = run_cli(
        &publish_args(&session, &group, "1000/s", "1s"),
        Duration::from_secs(60),
    );
    assert!(st.success(), "publish failed:\n{out}{err}");
    let (code, out, err) = feed_ended(feed);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("end of session"), "{out}");
    assert!(
        err.contains("the router refused updates and kept the connection")
            && err.contains("not permitted to publish to"),
        "{err}"
    );
}
