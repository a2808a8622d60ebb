//! The last-value cache across processes on the real router: the initial-image cut
//! under a concurrent publisher (checked by sequence: no gap, no duplicate), cache
//! queries, bounds with counted eviction, and the CLI.

// Tests fail loudly on any unexpected error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{run_cli, RouterProc};
use tickwire_client::{Client, Error, ErrorCode, PublishOptions, Wait};

const TOPICS: u64 = 50;

fn seq(s: u64) -> PublishOptions {
    PublishOptions {
        seq: Some(s),
        ..Default::default()
    }
}

#[test]
fn initial_image_then_live_has_no_gap_and_no_duplicate_under_a_concurrent_publisher() {
    // The subscribers read only at the end: a large egress limit, so that a test
    // thread descheduled on a loaded machine does not turn into discards (gaps).
    let router = RouterProc::start(&[
        "--no-guaranteed",
        "--cache",
        "t/>",
        "--egress-limit",
        "64MiB",
    ]);
    let addr = router.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // Publishes t/0..t/49 round and round, each topic numbered from 1, until told.
    let publisher = std::thread::spawn(move || {
        let mut p = Client::connect(addr).unwrap();
        let mut n = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            let round = n / TOPICS + 1;
            let t = n % TOPICS;
            p.publish_with(&format!("t/{t}"), b"x", seq(round)).unwrap();
            n += 1;
            if n % 64 == 0 {
                p.flush().unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        p.flush().unwrap();
        // The last seq of every topic.
        (0..TOPICS)
            .map(|t| {
                let full = n / TOPICS + u64::from(t < n % TOPICS);
                (format!("t/{t}"), full)
            })
            .collect::<BTreeMap<_, _>>()
    });
    // Until the cache holds every topic (the image assertion below needs them all),
    // then a little more of the stream.
    let mut q = Client::connect(addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while q.cache_query("t/>").unwrap().len() < TOPICS as usize {
        assert!(Instant::now() < deadline, "the cache never held all topics");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    // Several subscribers join mid-stream, each checked on its own.
    let mut subs = Vec::new();
    for _ in 0..3 {
        let mut s = Client::connect(addr).unwrap();
        s.subscribe_with_image("t/>").unwrap();
        subs.push(s);
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let last = publisher.join().unwrap();

    for (k, s) in subs.iter_mut().enumerate() {
        // topic -> (cached seq, live seqs)
        let mut seen: BTreeMap<String, (Option<u64>, Vec<u64>)> = BTreeMap::new();
        let mut live_started = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        let done = |seen: &BTreeMap<String, (Option<u64>, Vec<u64>)>| {
            last.iter().all(|(t, &l)| {
                seen.get(t)
                    .is_some_and(|(c, v)| v.last().copied().or(*c) == Some(l))
            })
        };
        while !done(&seen) {
            s.poll(Wait::Timeout(Duration::from_millis(50)), |m| {
                let e = seen.entry(m.topic().to_owned()).or_default();
                let sq = m.seq().unwrap();
                if m.cached().is_some() {
                    assert!(!live_started, "sub {k}: a cached message after a live one");
                    assert!(
                        e.0.is_none(),
                        "sub {k}: two cached messages for {}",
                        m.topic()
                    );
                    assert!(m.cached().unwrap() > 1_600_000_000_000_000_000);
                    e.0 = Some(sq);
                } else {
                    live_started = true;
                    e.1.push(sq);
                }
            })
            .unwrap();
            assert!(Instant::now() < deadline, "sub {k}: incomplete: {seen:?}");
        }
        for (t, (cached, live)) in &seen {
            // The image had every topic (the publisher covered them all before).
            let c = cached.unwrap_or_else(|| panic!("sub {k}: no cached message for {t}"));
            let want: Vec<u64> = (c + 1..=last[t]).collect();
            assert_eq!(live, &want, "sub {k} topic {t}: cached {c}, then live");
        }
    }
}

#[test]
fn cache_query_bounds_and_counted_eviction() {
    let router = RouterProc::start(&[
        "--no-guaranteed",
        "--cache",
        ">",
        "--cache-max-topics",
        "10",
        "--cache-depth",
        "2",
    ]);
    let mut p = Client::connect(router.addr).unwrap();
    for round in 1..=3u64 {
        for t in 0..100 {
            p.publish_with(
                &format!("a/{t}"),
                format!("{t}.{round}").as_bytes(),
                seq(round),
            )
            .unwrap();
        }
    }
    // An evicted topic comes back with its last message only; a fourth round on the
    // 10 kept topics gives each its last two.
    for t in 90..100 {
        p.publish_with(&format!("a/{t}"), format!("{t}.4").as_bytes(), seq(4))
            .unwrap();
    }
    p.flush().unwrap();
    let mut q = Client::connect(router.addr).unwrap();
    // The publisher's bytes are in the router once a ping through it returns.
    p.ping().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        let got = q.cache_query(">").unwrap();
        if got.len() == 20 {
            break got;
        }
        assert!(Instant::now() < deadline, "{} cached", got.len());
        std::thread::sleep(Duration::from_millis(20));
    };
    // The 10 topics updated last, each with its last 2 messages, oldest first.
    let mut by_topic: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &got {
        assert!(m.cached.is_some());
        by_topic
            .entry(m.topic.clone())
            .or_default()
            .push(String::from_utf8(m.payload.clone()).unwrap());
    }
    let want: BTreeMap<String, Vec<String>> = (90..100)
        .map(|t| (format!("a/{t}"), vec![format!("{t}.3"), format!("{t}.4")]))
        .collect();
    assert_eq!(by_topic, want);
    assert_eq!(q.cache_query("a/95").unwrap().len(), 2);
    assert!(q.cache_query("b/>").unwrap().is_empty());
    let stats: serde_json::Value = serde_json::from_str(&q.stats_json().unwrap()).unwrap();
    let c = &stats["cache"];
    assert_eq!(c["topics"], 10);
    // 100 topics a round, 10 kept: 90 evicted in round 1, 100 in each later round.
    assert_eq!(c["evicted_topics"], 290, "{c}");
    assert_eq!(c["patterns"][0], ">");
    // A query is not a subscription: nothing live follows.
    p.publish("a/1", b"live").unwrap();
    p.flush().unwrap();
    assert_eq!(
        q.poll(Wait::Timeout(Duration::from_millis(200)), |_| {})
            .unwrap(),
        0
    );
}

#[test]
fn image_requests_bad_input() {
    let router = RouterProc::start(&["--no-guaranteed", "--cache", "md/>"]);
    let mut c = Client::connect(router.addr).unwrap();
    // No image for shared subscriptions.
    match c.cache_query("$share/g/md/>") {
        Err(Error::Rejected { code, .. }) => assert_eq!(code, ErrorCode::INVALID_PATTERN),
        other => panic!("expected INVALID_PATTERN, got {other:?}"),
    }
    // Hostile-input pass: ordinary patterns that merely begin with "$share" were
    // refused as shared ones.
    for ordinary in ["$shared/x", "$sharex"] {
        assert!(c.cache_query(ordinary).unwrap().is_empty(), "{ordinary}");
    }
    // An empty cache answers with nothing; the connection stays usable.
    assert!(c.cache_query("md/>").unwrap().is_empty());
    c.subscribe_with_image("md/>").unwrap();
    // A router without a cache answers images with nothing.
    let plain = RouterProc::start(&["--no-guaranteed"]);
    let mut c = Client::connect(plain.addr).unwrap();
    assert!(c.cache_query(">").unwrap().is_empty());
    c.subscribe_with_image(">").unwrap();
    let stats: serde_json::Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
    assert!(stats["cache"].is_null());
}

/// Also a regression: `cache show` of a pattern the router does not cache said only "0
/// cached messages", as if the topics had simply not been published yet.
/// The first line of `sub PATTERN --initial-image`'s standard error, against a router
/// started with `router_args` (the subscriber is killed after it).
fn initial_image_note(router_args: &[&str], pattern: &str) -> String {
    let router = RouterProc::start(router_args);
    let addr = router.addr_str();
    let lines = sub_stderr_until(&["--router", &addr, pattern, "--initial-image"], |_| true);
    lines.into_iter().next().unwrap_or_default()
}

/// The lines `tickwire sub ARGS` writes to standard error up to the first that `last`
/// accepts (at most 20 s; the subscriber is killed after it).
fn sub_stderr_until(args: &[&str], last: fn(&str) -> bool) -> Vec<String> {
    use std::io::BufRead;
    let mut sub = std::process::Command::new(common::BIN)
        .arg("sub")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = sub.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let done = last(&line);
            lines.push(line);
            if done {
                break;
            }
        }
        let _ = tx.send(lines);
    });
    let lines = rx.recv_timeout(Duration::from_secs(20));
    let _ = sub.kill();
    let _ = sub.wait();
    lines.expect("sub said nothing within 20 s")
}

#[test]
fn sub_initial_image_says_when_the_router_can_send_none() {
    let none = initial_image_note(&["--no-guaranteed"], "md/>");
    assert!(
        none.contains(
            "--initial-image: the router keeps no last-value cache, so md/> gets no initial image"
        ),
        "{none}"
    );
    let other = initial_image_note(&["--no-guaranteed", "--cache", "md/>"], "fx/>");
    assert!(
        other.contains(
            "--initial-image: the router caches no topic matching fx/> (its cache patterns: md/>)"
        ),
        "{other}"
    );
}

/// With many patterns (a patterns file) the no-image notes stop after three and count
/// the rest, rather than one line per pattern.
#[test]
fn sub_initial_image_notes_are_bounded_for_many_patterns() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.txt");
    let patterns: Vec<String> = (0..50).map(|i| format!("md/{i}")).collect();
    std::fs::write(&file, patterns.join("\n")).unwrap();
    let file = file.to_str().unwrap();
    let args = [
        "--router",
        &addr,
        "--initial-image",
        "--patterns-file",
        file,
    ];
    let lines = sub_stderr_until(&args, |l| l.contains("more patterns get no initial image"));
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[0].contains("so md/0 gets no initial image"),
        "{lines:?}"
    );
    assert_eq!(
        lines[3],
        "--initial-image: and 47 more patterns get no initial image"
    );
}

/// `cache show` prints what it finds as `sub` does (new-user pass: it printed a feed
/// handler's updates as hex where `sub` decodes them, and topics raw to the terminal):
/// an md/ update decoded, a C1 control character in a topic escaped, other binary hex;
/// --hex forces hex.
#[test]
fn cli_cache_show_prints_messages_as_sub_does() {
    use tickwire_md::update::{encode_quote, Header, Quote};
    let router = RouterProc::start(&["--no-guaranteed", "--cache", "md/>"]);
    let addr = router.addr_str();
    let mut quote = Vec::new();
    let header = Header {
        locate: 7,
        symbol: *b"AAPL    ",
        seq: 42,
        exchange_ns: 1,
        receive_ns: 2,
    };
    let q = Quote {
        bid_price: 1_892_500,
        bid_orders: 2,
        bid_shares: 300,
        ask_price: 0,
        ask_orders: 0,
        ask_shares: 0,
    };
    encode_quote(&mut quote, &header, &q);
    let mut p = Client::connect(router.addr).unwrap();
    p.publish("md/NASDAQ/AAPL/quote", &quote).unwrap();
    p.publish("md/\u{9b}31m", &[0xff, 0x00, 0x01]).unwrap();
    p.flush().unwrap();
    p.ping().unwrap();
    let (st, out, err) = run_cli(
        &["cache", "show", "--router", &addr, "md/>"],
        Duration::from_secs(20),
    );
    assert!(st.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "md/NASDAQ/AAPL/quote quote AAPL seq 42 bid 300 @ 189.2500 (2 orders) ask none",
            "md/\\u{9b}31m ff0001",
        ],
        "{out}"
    );
    let (st, out, err) = run_cli(
        &["cache", "show", "--router", &addr, "--hex", "md/NASDAQ/>"],
        Duration::from_secs(20),
    );
    assert!(st.success(), "{err}");
    let hex: String = quote.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(out.trim_end(), format!("md/NASDAQ/AAPL/quote {hex}"));
}

#[test]
fn cli_cache_show_and_sub_initial_image() {
    let router = RouterProc::start(&["--no-guaranteed", "--cache", "md/>"]);
    let addr = router.addr_str();
    let mut p = Client::connect(router.addr).unwrap();
    // Published out of topic order: the output is sorted (a demanding-user pass found
    // it in the router's order).
    p.publish("md/B", b"3").unwrap();
    p.publish("md/A", b"1").unwrap();
    p.publish("md/A", b"2").unwrap();
    p.publish("other", b"4").unwrap();
    p.flush().unwrap();
    p.ping().unwrap();
    let (st, out, err) = run_cli(
        &["cache", "show", "--router", &addr, "md/>"],
        Duration::from_secs(20),
    );
    assert!(st.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["md/A 2", "md/B 3"]);
    assert!(err.contains("2 cached messages"), "{err}");

    // sub --initial-image prints the image marked, then live.
    let sub = std::process::Command::new(common::BIN)
        .args([
            "sub",
            "--router",
            &addr,
            "md/>",
            "--initial-image",
            "--count",
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The two cached lines come at once; then one live message ends it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stats = Client::connect(router.addr).unwrap();
    loop {
        let doc: serde_json::Value = serde_json::from_str(&stats.stats_json().unwrap()).unwrap();
        if doc["cache"]["images"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    p.publish("md/B", b"live").unwrap();
    p.flush().unwrap();
    let out = sub.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let mut image = lines[..2].to_vec();
    image.sort();
    assert_eq!(image, ["[cached] md/A 2", "[cached] md/B 3"]);
    assert_eq!(lines[2], "md/B live");
    // Its reader gone (`| head`): ended quietly as by SIGPIPE, 141, as `stats` does
    // (new-user pass: status 1 and "Broken pipe").
    let mut shown = common::cli(&["cache", "show", "--router", &addr, "md/>"])
        .spawn()
        .unwrap();
    drop(shown.stdout.take());
    let st = common::wait_child(&mut shown, Duration::from_secs(20), "cache show");
    let (_, err) = common::take_output(&mut shown);
    assert_eq!(st.code(), Some(141), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    // An empty answer says why: caches such topics but holds none, caches none of
    // them (naming its patterns), or keeps no cache at all.
    let show = |addr: &str, pattern: &str| {
        let (st, out, err) = run_cli(
            &["cache", "show", "--router", addr, pattern],
            Duration::from_secs(20),
        );
        assert!(st.success() && out.is_empty(), "{out}{err}");
        err
    };
    let err = show(&addr, "md/C");
    assert!(
        err.contains("0 cached messages match md/C") && err.contains("holds none now"),
        "{err}"
    );
    let err = show(&addr, "fx/>");
    assert!(
        err.contains("caches no topic matching it") && err.contains("md/>"),
        "{err}"
    );
    let plain = RouterProc::start(&["--no-guaranteed"]);
    let err = show(&plain.addr_str(), "md/>");
    assert!(
        err.contains("keeps no last-value cache") && err.contains("--cache"),
        "{err}"
    );
    common::assert_help_lists(&["cache", "show", "--help"], &["Examples:"]);
    common::assert_help_lists(&["sub", "--help"], &["--initial-image"]);
    common::assert_help_lists(&["router", "--help"], &["--cache"]);
}

/// New-user pass: `sub 'md/X/A' 'md/*/A' --initial-image` printed every cached message
/// twice (each pattern's SUBSCRIBE gets its own image), where its help promises nothing
/// twice. A cached message is printed once (v2..v4 arrived in one read: one router time,
/// told apart by their payloads).
#[test]
fn sub_initial_image_prints_a_cached_message_that_several_patterns_match_once() {
    let router = RouterProc::start(&["--no-guaranteed", "--cache", "md/>", "--cache-depth", "3"]);
    let addr = router.addr_str();
    let mut p = Client::connect(router.addr).unwrap();
    for v in ["v1", "v2", "v3", "v4"] {
        p.publish("md/X/A", v.as_bytes()).unwrap();
    }
    p.publish("md/Y/A", b"y1").unwrap();
    p.flush().unwrap();
    p.ping().unwrap();
    let sub = std::process::Command::new(common::BIN)
        .args([
            "sub",
            "--router",
            &addr,
            "md/X/A",
            "md/*/A",
            "--initial-image",
        ])
        .args(["--count", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Both images served (two requests: 3 + 4 cached messages), then one live message
    // ends it.
    let mut sub = sub;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stats = Client::connect(router.addr).unwrap();
    loop {
        let doc: serde_json::Value = serde_json::from_str(&stats.stats_json().unwrap()).unwrap();
        if doc["cache"]["images"].as_u64() >= Some(2) {
            break;
        }
        if Instant::now() > deadline {
            let _ = sub.kill();
            panic!("the images were not sent: {doc}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    p.publish("md/X/A", b"live").unwrap();
    p.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let st = loop {
        if let Some(st) = sub.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = sub.kill();
            let _ = sub.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (text, err) = common::take_output(&mut sub);
    assert!(st.is_some_and(|s| s.success()), "{st:?}: {text}{err}");
    let mut image: Vec<&str> = text.lines().filter(|l| l.starts_with("[cached]")).collect();
    image.sort();
    assert_eq!(
        image,
        [
            "[cached] md/X/A v2",
            "[cached] md/X/A v3",
            "[cached] md/X/A v4",
            "[cached] md/Y/A y1"
        ],
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("md/X/A live"), "{text}{err}");
}

/// A router with ten cached topics `c/0`..`c/9` and the given `[router]` lines.
fn ten_cached_topics(lines: &str) -> (RouterProc, tempfile::NamedTempFile) {
    use std::io::Write;
    let mut config = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        config,
        "[router]\ncache = [\"c/>\"]\ncache_max_topics = 10\n{lines}"
    )
    .unwrap();
    let path = config.path().to_str().unwrap();
    let router = RouterProc::start(&["--no-guaranteed", "--config", path]);
    let mut p = Client::connect(router.addr).unwrap();
    for t in 0..10 {
        p.publish(&format!("c/{t}"), b"v").unwrap();
    }
    p.flush().unwrap();
    p.ping().unwrap();
    (router, config)
}

/// Images and cache queries past the scan budget get BUSY ("ask again later"), which
/// the client library retries: a reconnecting subscriber with several image
/// subscriptions, or several subscribers at once, get their images a little later
/// instead of an error.
#[test]
fn image_requests_past_the_scan_budget_are_retried_by_the_client() {
    // Router-wide: 50 topic slots a second, a burst of one full scan (10): each
    // further image waits ~0.2 s for its budget.
    let (router, _config) = ten_cached_topics("image_scan_rate_total = 50");
    let mut q = Client::connect(router.addr).unwrap();
    let t = Instant::now();
    for _ in 0..3 {
        assert_eq!(q.cache_query("c/>").unwrap().len(), 10);
    }
    q.subscribe_with_image("c/>").unwrap();
    q.subscribe_with_image("c/1").unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let stats: serde_json::Value = serde_json::from_str(&q.stats_json().unwrap()).unwrap();
    assert!(stats["cache"]["images_throttled"].as_u64().unwrap() >= 4);
    assert_eq!(stats["cache"]["images"], 5);
}

/// Every cache query examines every cached topic, so the router budgets the topics
/// examined (`image_scan_rate`, `image_scan_rate_total`, from the configuration file):
/// past the budget a query is refused with a non-fatal BUSY that names the key (after
/// the client's retries for its request timeout), the connection stays usable, the
/// refusal is counted, and `cache show` says why.
#[test]
fn cache_queries_past_the_scan_budget_are_refused_busy() {
    // Ten topics, a full scan each query; the router may examine 1 a second (burst:
    // one full scan, cache_max_topics), so a second scan waits ~10 s, longer than the
    // client retries (its request timeout, 1 s here).
    let (router, _config) = ten_cached_topics("image_scan_rate_total = 1");
    let opts = tickwire_client::ClientOptions {
        request_timeout: Duration::from_secs(1),
        ..tickwire_client::ClientOptions::named("q")
    };
    let mut q = Client::connect_to(&router.addr_str(), opts).unwrap();
    assert_eq!(q.cache_query("c/>").unwrap().len(), 10);
    match q.cache_query("nothing/>") {
        Err(Error::Rejected { code, text, .. }) => {
            assert_eq!(code, ErrorCode::BUSY);
            assert!(text.contains("image_scan_rate_total"), "{text}");
        }
        other => panic!("expected BUSY, got {other:?}"),
    }
    // Still connected; the refusal counted; another connection meets the same budget.
    q.ping().unwrap();
    let stats: serde_json::Value = serde_json::from_str(&q.stats_json().unwrap()).unwrap();
    let throttled = stats["cache"]["images_throttled"].as_u64().unwrap();
    assert!(
        (2..=8).contains(&throttled),
        "retried, then refused: {}",
        stats["cache"]
    );
    let (st, _, err) = run_cli(
        &["cache", "show", "--router", &router.addr_str(), "c/>"],
        Duration::from_secs(20),
    );
    assert!(!st.success());
    assert!(
        err.contains("busy") && err.contains("ask again later"),
        "{err}"
    );
}

/// Hostile-input probe: connections that asked for large images and never read held
/// the router's egress memory, so every other image was refused BUSY until they left.
/// An image over `egress_limit` must be read back under it within `--drain-timeout`:
/// the real router disconnects a client that does not (SLOW_CONSUMER, its unread image
/// dropped), and images work for the others.
#[test]
fn a_client_that_never_reads_its_image_is_disconnected_after_the_drain_timeout() {
    use std::io::{Read, Write};
    use tickwire_wire::frame::{self, Frame, Image};

    let router = RouterProc::start(&[
        "--no-guaranteed",
        "--cache",
        "big/>",
        "--egress-limit",
        "1MiB",
        "--drain-timeout",
        "1s",
    ]);
    // A 20 MB image: far more than loopback's socket buffers can hide.
    let mut p = Client::connect(router.addr).unwrap();
    let payload = vec![7u8; 100_000];
    for t in 0..200 {
        p.publish(&format!("big/{t}"), &payload).unwrap();
    }
    p.flush().unwrap();
    p.ping().unwrap();

    let mut s = std::net::TcpStream::connect(router.addr).unwrap();
    let mut out = Vec::new();
    frame::encode_hello(&mut out, frame::PROTOCOL_VERSION, "never-reads");
    frame::encode_subscribe_image(&mut out, 1, "big/>", Image::Only);
    s.write_all(&out).unwrap();
    // Unread past the deadline (1 s from the request, checked on the router's 10 ms
    // timer)...
    std::thread::sleep(Duration::from_millis(2_000));
    // ...then everything it was sent: WELCOME, what the socket buffers held of the
    // image, the ERROR, and the close. (The router gives a closing client 1 s to take
    // its last frames: a test thread descheduled past that finds the stream cut, the
    // ERROR not sent; the close and the count below hold either way.)
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .expect("the router closes the connection (not a read timeout)");
    let mut at = 0;
    let mut last = None;
    let mut messages = 0;
    while let Some((f, n)) = frame::decode(&got[at..], u32::MAX).unwrap() {
        match f {
            Frame::Message(_) => messages += 1,
            Frame::Error { code, text, .. } => last = Some((code, text.to_string())),
            _ => {}
        }
        at += n;
    }
    assert!(
        messages < 200,
        "the image was cut short: {messages} of 200 sent"
    );
    if at == got.len() {
        let (code, text) = last.expect("an ERROR before the close");
        assert_eq!(code, ErrorCode::SLOW_CONSUMER);
        assert!(text.contains("drain_timeout_ms"), "{text}");
    } else {
        eprintln!(
            "the stream was cut after its linger: {at} of {} bytes whole",
            got.len()
        );
    }
    let mut q = Client::connect(router.addr).unwrap();
    let stats: serde_json::Value = serde_json::from_str(&q.stats_json().unwrap()).unwrap();
    let totals = &stats["router"]["totals"];
    assert_eq!(totals["disconnects_error"], 1, "{totals}");

    // Another client still gets the whole image.
    assert_eq!(q.cache_query("big/>").unwrap().len(), 200);
}
