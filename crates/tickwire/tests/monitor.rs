//! The monitoring endpoint of the real `tickwire router --http`, `tickwire feed --http`
//! and `tickwire fix ... --http`: the JSON endpoints show what real clients, a real
//! lossy feed and a real FIX session just did, the HTTP server refuses hostile
//! requests, every `/metrics` passes `promtool check metrics`, and the dashboard,
//! loaded in a real headless Chromium, shows the counts without a console error.
//!
//! Peers: promtool (Debian's `prometheus`) and Chromium (Debian's `chromium`), both
//! installed by `.ci/setup` (scripts/install-monitoring-peers.sh). Missing locally, the
//! test says SKIPPED loudly; under CI=true it fails.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fix_support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_udp_port_pair, peer_missing, RouterProc};
use fix_support::{free_port, temp_dir, two_sided_cfg, Peer, BIN};
use headless_chrome::{Browser, Tab};
use tickwire_client::{Client, ClientOptions, Wait};

/// GET `path`: (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = common::http_get(addr, path, &[]);
    (status, body)
}

/// GET `path` as JSON. A 503 (the hot thread did not answer the snapshot request in
/// time: a loaded machine) is asked again, up to 10 times.
fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let mut tries = 0;
    let (status, body) = loop {
        let (status, body) = get(addr, path);
        tries += 1;
        if status != 503 || tries == 10 {
            break (status, body);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// A publisher that sent `n` messages to `mon/a` and a subscriber (`mon/>`) that got
/// them all, both still connected.
struct Traffic {
    _publisher: Client,
    _subscriber: Client,
}

fn traffic(router: SocketAddr, n: usize) -> Traffic {
    let mut sub = Client::connect_with(router, ClientOptions::named("mon-sub")).unwrap();
    sub.subscribe("mon/>").unwrap();
    let mut publisher = Client::connect_with(router, ClientOptions::named("mon-pub")).unwrap();
    for i in 0..n {
        publisher
            .publish("mon/a", format!("m{i}").as_bytes())
            .unwrap();
    }
    publisher.flush().unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < n && Instant::now() < deadline {
        if sub
            .recv(Wait::Timeout(Duration::from_millis(200)))
            .unwrap()
            .is_some()
        {
            got += 1;
        }
    }
    assert_eq!(got, n, "the subscriber got every message");
    Traffic {
        _publisher: publisher,
        _subscriber: sub,
    }
}

fn find<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list.as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// A `tickwire router --http` after [`traffic`] of `n` messages; its monitoring address.
fn monitored_router(n: usize) -> (RouterProc, SocketAddr, Traffic) {
    // With a last-value cache of the traffic's topics, so its series are there too.
    let r = RouterProc::start(&["--http", "127.0.0.1:0", "--cache", "mon/>"]);
    let http = r.http.expect("monitor address");
    let t = traffic(r.addr, n);
    (r, http, t)
}

/// The peer, if `found`; otherwise the missing-peer report (a failure under CI).
fn require(test: &str, found: Option<PathBuf>, why: &str) -> Option<PathBuf> {
    if found.is_none() {
        peer_missing(test, why);
    }
    found
}

#[test]
fn json_endpoints_show_what_the_clients_did() {
    let (_r, http, _t) = monitored_router(37);

    let (status, body) = get(http, "/healthz");
    assert_eq!((status, body.contains("ok")), (200, true), "{body}");

    let varz = get_json(http, "/varz");
    assert_eq!(varz["kind"], "router");
    assert!(varz["server"]["totals"]["msgs_in"].as_u64().unwrap() >= 37);
    // The router-wide egress figure (what the buffers hold now) and its bound.
    assert_eq!(varz["server"]["egress_memory_limit"], 1u64 << 30, "{varz}");
    assert!(varz["server"]["egress_bytes"].is_u64(), "{varz}");
    // The cache's counters (new-user pass: only `tickwire stats` had them): one topic,
    // mon/a, every message stored.
    assert_eq!(varz["cache"]["topics"], 1, "{varz}");
    assert_eq!(varz["cache"]["stored"], 37, "{varz}");
    // Its patterns and limits too, as in `tickwire stats` (new-user pass).
    assert_eq!(
        varz["cache"]["patterns"],
        serde_json::json!(["mon/>"]),
        "{varz}"
    );
    assert_eq!(
        (
            &varz["cache"]["depth"],
            &varz["cache"]["max_topics"],
            &varz["cache"]["max_bytes"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(100_000),
            &serde_json::json!(64u64 << 20)
        ),
        "{varz}"
    );

    let connz = get_json(http, "/connz?sort=msgs_in&subs=1");
    let items = &connz["items"];
    assert_eq!(find(items, "mon-pub")["msgs_in"], 37, "{connz}");
    assert_eq!(find(items, "mon-sub")["msgs_out"], 37, "{connz}");
    assert_eq!(find(items, "mon-sub")["patterns"][0], "mon/>");
    // Paging: one per page, the total unchanged.
    let page = get_json(http, "/connz?limit=1&offset=1&sort=id");
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(page["total"], connz["total"]);
    assert_eq!(get(http, "/connz?sort=bogus").0, 400);
    // A paging value that is not a number is refused, not read as the default.
    let (status, body) = get(http, "/connz?limit=abc");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("limit"), "{body}");
    let (status, body) = get(http, "/queuez?offset=-1");
    assert_eq!(status, 400, "{body}");
    // New-user pass: it spoke of the limit's maximum.
    assert!(
        body.contains("offset=\"-1\"") && body.contains("0 or more"),
        "{body}"
    );

    let subsz = get_json(http, "/subsz?pattern=mon/>");
    assert_eq!(subsz["total"], 1, "{subsz}");
    assert_eq!(subsz["items"][0]["name"], "mon-sub");
    // New-user pass: the encoded form (a browser's, `curl --data-urlencode`'s) matched
    // nothing, and an encoded sort key was refused.
    let encoded = get_json(http, "/subsz?pattern=mon%2F%3E");
    assert_eq!(encoded["total"], 1, "{encoded}");
    let sorted = get_json(http, "/connz?sort=msgs%5Fout");
    assert_eq!(sorted["sort"], "msgs_out", "{sorted}");

    let queuez = get_json(http, "/queuez");
    assert_eq!(queuez["enabled"], true);

    // The probe measures within a second or two.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let latz = get_json(http, "/latz");
        if latz["summary"]["samples"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no probe samples: {latz}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(http, "/nope").0, 404);
}

/// New-user pass: `tickwire sub '>'` against a router with `--http` printed the
/// probe's `_tickwire/probe/PID` messages, 200 a second. System topics are matched only
/// by a pattern naming `_tickwire`.
#[test]
fn the_probes_messages_reach_only_a_pattern_naming_tickwire_not_wildcards() {
    let r = RouterProc::start(&[
        "--http",
        "127.0.0.1:0",
        "--no-guaranteed",
        "--probe-ms",
        "5",
    ]);
    let mut all = Client::connect(r.addr).unwrap();
    all.subscribe(">").unwrap();
    all.subscribe("*/probe/>").unwrap();
    let mut system = Client::connect(r.addr).unwrap();
    system.subscribe("_tickwire/>").unwrap();
    // The probe's messages arrive at the system subscriber...
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut probes = 0;
    while probes < 20 {
        assert!(Instant::now() < deadline, "{probes} probe messages in 20 s");
        if let Some(m) = system
            .recv(Wait::Timeout(Duration::from_millis(100)))
            .unwrap()
        {
            assert!(m.topic().starts_with("_tickwire/probe/"), "{}", m.topic());
            probes += 1;
        }
    }
    // ...and none of them, over the same ~20 periods and more, at the wildcards: the
    // first message there is the user's own.
    let mut publisher = Client::connect(r.addr).unwrap();
    publisher.publish("user/topic", b"mine").unwrap();
    publisher.flush().unwrap();
    let m = all
        .recv(Wait::Timeout(Duration::from_secs(10)))
        .unwrap()
        .expect("the user's message");
    assert_eq!((m.topic(), m.payload()), ("user/topic", &b"mine"[..]));
    assert!(all
        .recv(Wait::Timeout(Duration::from_millis(200)))
        .unwrap()
        .is_none());
}

#[test]
fn hostile_requests_are_refused_and_the_endpoint_keeps_serving() {
    let r = RouterProc::start(&["--http", "127.0.0.1:0", "--no-guaranteed"]);
    let http = r.http.expect("monitor address");
    // A connection that never sends a byte does not block others.
    let _idle = TcpStream::connect(http).unwrap();
    let status = |raw: &str| raw.split(' ').nth(1).unwrap_or("").to_string();
    assert_eq!(
        status(&common::http_exchange(http, b"POST /varz HTTP/1.1\r\n\r\n")),
        "405"
    );
    assert_eq!(
        status(&common::http_exchange(
            http,
            b"GET / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
        )),
        "413"
    );
    let huge = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20_000));
    assert_eq!(status(&common::http_exchange(http, huge.as_bytes())), "431");
    assert_eq!(
        status(&common::http_exchange(http, b"\x16\x03\x01garbage\r\n\r\n")),
        "400"
    );
    let queuez = get_json(http, "/queuez");
    assert_eq!(queuez["enabled"], false);
    assert_eq!(get(http, "/healthz").0, 200);
}

#[test]
fn metrics_pass_promtool() {
    let Some(promtool) = promtool("metrics_pass_promtool") else {
        return;
    };
    let (r, http, _t) = monitored_router(10);
    // A queue, so the per-queue families are present too.
    let (st, _, err) = common::run_cli(
        &[
            "queue",
            "create",
            "mon-q",
            "--sub",
            "monq/>",
            "--router",
            &r.addr_str(),
        ],
        Duration::from_secs(20),
    );
    assert!(st.success(), "queue create: {err}");
    // Two guaranteed publishes stored in it: the guaranteed families count them.
    let (st, _, err) = common::run_cli(
        &[
            "pub",
            "--guaranteed",
            "monq/x",
            "stored",
            "--count",
            "2",
            "--router",
            &r.addr_str(),
        ],
        Duration::from_secs(20),
    );
    assert!(st.success(), "pub --guaranteed: {err}");
    let (status, metrics) = get(http, "/metrics");
    assert_eq!(status, 200);
    // Demanding-user pass: guaranteed messaging, the spool and the security counters
    // were only in `tickwire stats`, nothing to scrape or alert on.
    for name in [
        "tickwire_router_received_messages_total",
        "tickwire_router_client_received_messages_total{client=",
        "tickwire_router_queue_depth_messages{queue=\"mon-q\"} 2",
        "tickwire_router_probe_round_trip_seconds_count",
        "tickwire_router_index_nodes ",
        "tickwire_router_subscriptions_removing 0",
        "tickwire_router_egress_bytes ",
        "tickwire_router_memory_disconnects_total ",
        "tickwire_router_guaranteed_acked_total 2",
        // New-user pass: the cache's counters were only in `tickwire stats`.
        "tickwire_router_cache_topics ",
        "tickwire_router_cache_stored_messages_total ",
        "tickwire_router_cache_evicted_topics_total 0",
        "tickwire_router_cache_images_throttled_total 0",
        // ...and its limits.
        "tickwire_router_cache_max_topics 100000",
        "tickwire_router_cache_max_bytes 67108864",
        "tickwire_router_cache_depth 1",
        "tickwire_router_cache_patterns 1",
        "tickwire_router_guaranteed_nacked_total 0",
        "tickwire_router_guaranteed_spool_failures_total 0",
        "tickwire_router_guaranteed_retained_messages 2",
        "tickwire_router_spool_failed_batches_total 0",
        "tickwire_router_queue_redelivered_messages_total{queue=\"mon-q\"} 0",
        "tickwire_router_queue_dead_lettered_messages_total{queue=\"mon-q\"} 0",
        "tickwire_router_queue_rejected_messages_total{queue=\"mon-q\"} 0",
        "tickwire_router_auth_failures_total 0",
        "tickwire_router_denied_total 0",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    // Review: the spool's families read fields the monitoring snapshot did not have,
    // and were 0 whatever the spool did.
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
    };
    assert!(value("tickwire_router_spool_disk_bytes") > 0.0, "{metrics}");
    assert!(
        value("tickwire_router_spool_fsyncs_total") > 0.0,
        "{metrics}"
    );
    promtool_check(&promtool, &metrics);
}

/// `promtool check metrics` on `metrics`: it must pass without a word.
fn promtool_check(promtool: &std::path::Path, metrics: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}\n{metrics}",
        out.status
    );
}

fn promtool(test: &str) -> Option<PathBuf> {
    require(
        test,
        which("promtool"),
        "promtool not found (apt-get install prometheus; .ci/setup)",
    )
}

#[test]
fn metrics_cap_the_per_client_series() {
    let r = RouterProc::start(&[
        "--http",
        "127.0.0.1:0",
        "--metrics-max-series",
        "2",
        "--no-guaranteed",
    ]);
    let http = r.http.expect("monitor address");
    let _t = traffic(r.addr, 3);
    let _more: Vec<Client> = (0..3)
        .map(|i| Client::connect_with(r.addr, ClientOptions::named(format!("extra{i}"))).unwrap())
        .collect();
    let (_, metrics) = get(http, "/metrics");
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("tickwire_router_client_received_messages_total{"))
        .count();
    assert_eq!(series, 2, "{metrics}");
    // Probe, two clients of the traffic and three extras: six, two with series.
    assert!(
        metrics.contains("tickwire_router_client_series_omitted 4"),
        "{metrics}"
    );
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A dashboard open in a headless Chromium tab, with every console error, exception
/// and error log entry of the page collected.
struct Dashboard {
    _browser: Browser,
    tab: Arc<Tab>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Dashboard {
    /// Opens `http://<http>/?poll=250` in a new headless Chromium.
    fn open(chrome: PathBuf, http: SocketAddr) -> Dashboard {
        use headless_chrome::protocol::cdp::types::Event;
        use headless_chrome::protocol::cdp::{Log, Runtime};
        use headless_chrome::LaunchOptions;

        let browser = Browser::new(LaunchOptions {
            path: Some(chrome),
            headless: true,
            // Containers and CI run as root, where Chromium's sandbox cannot start.
            sandbox: false,
            window_size: Some((1280, 1400)),
            idle_browser_timeout: Duration::from_secs(60),
            ..LaunchOptions::default()
        })
        .expect("start headless chromium");
        let tab = browser.new_tab().expect("a tab");
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = errors.clone();
        tab.add_event_listener(Arc::new(move |event: &Event| {
            let error = match event {
                Event::RuntimeConsoleAPICalled(e)
                    if e.params.Type == Runtime::ConsoleAPICalledEventTypeOption::Error =>
                {
                    Some(format!("console.error: {:?}", e.params.args))
                }
                Event::RuntimeExceptionThrown(e) => {
                    Some(format!("exception: {:?}", e.params.exception_details))
                }
                Event::LogEntryAdded(e) if e.params.entry.level == Log::LogEntryLevel::Error => {
                    Some(format!(
                        "log: {} {:?}",
                        e.params.entry.text, e.params.entry.url
                    ))
                }
                _ => None,
            };
            if let Some(e) = error {
                seen.lock().unwrap().push(e);
            }
        }))
        .unwrap();
        tab.enable_runtime().unwrap();
        tab.enable_log().unwrap();
        tab.set_default_timeout(Duration::from_secs(20));
        tab.navigate_to(&format!("http://{http}/?poll=250"))
            .unwrap()
            .wait_until_navigated()
            .unwrap();
        Dashboard {
            _browser: browser,
            tab,
            errors,
        }
    }

    /// The text of cell `key` in the row of table `table` whose `by` cell is `value`
    /// ("" while there is no such row).
    fn cell(&self, table: &str, by: &str, value: &str, key: &str) -> String {
        let js = format!(
            "(() => {{ for (const tr of document.querySelectorAll('#{table} tr')) {{
                 const n = tr.querySelector('td[data-key={by}]');
                 if (n && n.textContent === {value:?}) return tr.querySelector('td[data-key={key}]').textContent;
               }} return ''; }})()"
        );
        self.tab
            .evaluate(&js, false)
            .unwrap()
            .value
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// Waits (bounded) until cell `key` of the row is `want`.
    fn wait_cell(&self, table: &str, by: &str, value: &str, key: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.cell(table, by, value, key);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "#{table} row {value}: {key} shows {got:?}, not {want:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves a screenshot as `name` in TICKWIRE_SCREENSHOT_DIR (if set; how docs/ got
    /// its screenshots), then asserts the page logged no error.
    fn finish(&self, name: &str) {
        use headless_chrome::protocol::cdp::Page;
        if let Some(dir) = std::env::var_os("TICKWIRE_SCREENSHOT_DIR") {
            let png = self
                .tab
                .capture_screenshot(Page::CaptureScreenshotFormatOption::Png, None, None, true)
                .unwrap();
            std::fs::write(PathBuf::from(dir).join(name), png).unwrap();
        }
        let errors = self.errors.lock().unwrap();
        assert!(errors.is_empty(), "console errors: {errors:#?}");
    }
}

fn require_chromium(test: &str) -> Option<PathBuf> {
    require(
        test,
        chromium(),
        "no chromium on PATH (apt-get install chromium; .ci/setup) and CHROMIUM unset",
    )
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|n| which(n))
}

/// The dashboard in a real browser: no console error, and the connection table shows
/// the publisher's and the subscriber's counts. With TICKWIRE_SCREENSHOT_DIR set it
/// also saves `dashboard.png` there (how docs/ got its screenshot).
#[test]
fn dashboard_in_headless_chromium_shows_the_counts() {
    let Some(chrome) = require_chromium("dashboard_in_headless_chromium_shows_the_counts") else {
        return;
    };
    let (r, http, _t) = monitored_router(42);
    let router = r.addr_str();

    let page = Dashboard::open(chrome, http);
    let tab = &page.tab;

    // Wait for the table row of each client, then read the cells the page drew.
    let cell = |name: &str, key: &str| page.cell("connections", "name", name, key);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cell("mon-sub", "msgs_out").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the dashboard never listed mon-sub"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(cell("mon-pub", "msgs_in"), "42");
    assert_eq!(cell("mon-sub", "msgs_out"), "42");
    assert_eq!(cell("mon-sub", "slow"), "false");
    // The totals card counts the probe's messages too: at least the 42.
    let total = tab
        .evaluate(
            "Number(document.getElementById('counter-msgs_in').dataset.value)",
            false,
        )
        .unwrap()
        .value
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    assert!(total >= 42.0, "msgs_in card shows {total}");
    // The last-value cache's cards (new-user pass: the dashboard did not show the
    // cache): one topic, mon/a, every message stored.
    let card = |key: &str| {
        tab.evaluate(
            &format!("document.getElementById('counter-{key}')?.dataset.value ?? ''"),
            false,
        )
        .unwrap()
        .value
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
    };
    assert_eq!(
        (card("cache_topics"), card("cache_stored")),
        ("1".to_owned(), "42".to_owned())
    );
    // The queue-depth chart draws the deepest queues and says of how many: seven
    // queues, q0 to q6 holding 0 to 6 messages (new-user pass: the first five by name).
    for i in 0..7 {
        let q = format!("q{i}");
        let (st, _, err) = common::run_cli(
            &[
                "queue",
                "create",
                &q,
                "--sub",
                &format!("{q}/>"),
                "--router",
                &router,
            ],
            Duration::from_secs(20),
        );
        assert!(st.success(), "{err}");
        if i > 0 {
            let (st, _, err) = common::run_cli(
                &[
                    "pub",
                    "--guaranteed",
                    &format!("{q}/x"),
                    "m",
                    "--count",
                    &i.to_string(),
                    "--router",
                    &router,
                ],
                Duration::from_secs(20),
            );
            assert!(st.success(), "{err}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let title = loop {
        let title = tab
            .evaluate(
                "document.querySelector('#chart-queue-depth .title')?.textContent ?? ''",
                false,
            )
            .unwrap()
            .value
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        if title.contains("of 7") {
            break title;
        }
        assert!(Instant::now() < deadline, "queue chart title: {title:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(title, "queue depth (messages): the 5 deepest of 7");
    let legend = tab
        .evaluate(
            "[...document.querySelectorAll('#chart-queue-depth .legend span')].map((s) => s.textContent.split(' ')[0]).join(',')",
            false,
        )
        .unwrap()
        .value
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    assert_eq!(legend, "q6,q5,q4,q3,q2");
    // A card says whether it is a total or a value now (new-user pass: "connections",
    // a total, sat next to "clients" without saying so).
    let label = |key: &str| {
        tab.evaluate(
            &format!("document.querySelector('#counter-{key} .label')?.textContent ?? ''"),
            false,
        )
        .unwrap()
        .value
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
    };
    assert_eq!(label("connections"), "connections (total)");
    assert_eq!(label("clients"), "clients (now)");
    // Let a few more polls and the latency chart happen, then check for errors.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let points = tab
            .evaluate(
                "document.querySelectorAll('#chart-latency polyline').length",
                false,
            )
            .unwrap()
            .value
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        if points > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no latency chart");
        std::thread::sleep(Duration::from_millis(200));
    }
    page.finish("dashboard.png");
}

/// `--log-format json --log-file`: JSON lines in the file; SIGHUP re-reads the config
/// file's `[log] level` and reopens the file (rotation by rename).
#[test]
fn json_log_file_and_sighup_reload() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("router.toml");
    let log = dir.path().join("router.log");
    std::fs::write(&config, "[log]\nlevel = \"warn\"\n").unwrap();
    let r = RouterProc::start(&[
        "--config",
        config.to_str().unwrap(),
        "--no-guaranteed",
        "--log-format",
        "json",
        "--log-file",
        log.to_str().unwrap(),
    ]);
    // At warn, a client's connect logs nothing.
    drop(Client::connect(r.addr).unwrap());
    std::fs::write(&config, "[log]\nlevel = \"info\"\n").unwrap();
    let rotated = dir.path().join("router.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    common::signal(r.child.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("log settings reloaded") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no reload line in the new log file"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // At info a connect is logged, the client's name a plain JSON string (new-user
    // pass: it was "\"tickwire-client\"", quotes inside the value).
    drop(Client::connect(r.addr).unwrap());
    let connected = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("client connected")) {
            break serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        assert!(Instant::now() < deadline, "no connect line in the log file");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        connected["fields"]["name"], "tickwire-client",
        "{connected}"
    );
    // The client id a number, as in /varz and /connz (it was the string "2").
    assert!(
        connected["fields"]["client"]
            .as_u64()
            .is_some_and(|id| id > 0),
        "{connected}"
    );
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
    let mut r = r;
    assert!(r.is_running(), "the router survived SIGHUP");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(
        !old.contains("connected"),
        "warn level logged a connect: {old}"
    );
}

/// The address in a `tickwire monitor listening on http://ADDR/` line.
fn banner_addr(line: &str) -> SocketAddr {
    line.split("http://")
        .nth(1)
        .and_then(|a| a.trim().trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("monitor banner without address: {line:?}"))
}

/// GETs `path` (bounded) until `done` holds for the JSON document, and returns it.
fn poll_json(
    http: SocketAddr,
    path: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = get(http, path);
        if status == 200 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if done(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "GET {path}: never done: {v}");
        } else {
            assert!(Instant::now() < deadline, "GET {path}: {status} {body}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

const FEED_MESSAGES: u64 = 5_000;

/// A real `tickwire feed --http` receiving a `tickwire md publish` with 5% loss
/// (re-requests answered by the publisher): `/channelz`, `/varz` and `/metrics` show
/// the gaps it saw and recovered, and every message; `/metrics` passes promtool; the
/// dashboard in headless Chromium shows the same gap and message counts.
#[test]
fn feed_endpoint_shows_the_gaps_it_recovered() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let session = common::md_session("mon-feed.itch", "21", 10, FEED_MESSAGES);
    let port = free_udp_port_pair();
    let group = format!("239.255.44.{}:{port}", 1 + port % 200);
    let mut feed = Peer::spawn(
        "tickwire feed",
        Command::new(BIN)
            .args(["feed", "--group", &group, "--router", &router.addr_str()])
            .args(["--idle", "block", "--quiet", "--keep-running"])
            .args(["--http", "127.0.0.1:0"])
            .env("TICKWIRE_LOG", "warn"),
    );
    let http = banner_addr(&feed.wait(&["tickwire monitor listening on http://"]));
    // The loop answers once it runs, i.e. after it joined the group.
    let before = poll_json(http, "/varz", |v| v["kind"] == "feed");
    assert_eq!(before["counters"]["messages"], 0, "{before}");

    let (st, out, err) = common::md_publish(&session, &group, &["--loss", "0.05", "--seed", "3"]);
    assert!(st.success(), "publish failed:\n{out}{err}");
    let channelz = poll_json(http, "/channelz", |v| {
        v["items"][0]["messages"] == FEED_MESSAGES && v["items"][0]["recovering"] == false
    });
    let ch = &channelz["items"][0];
    assert_eq!(channelz["total"], 1);
    let gaps = ch["gaps"].as_u64().unwrap();
    assert!(gaps > 0, "5% loss must open gaps: {ch}");
    assert!(ch["recovered"].as_u64().unwrap() > 0, "{ch}");
    assert_eq!(ch["lost"], 0, "{ch}");
    assert!(ch["requests"].as_u64().unwrap() > 0, "{ch}");
    assert!(ch["published"].as_u64().unwrap() > 0, "{ch}");
    assert!(
        ch["datagrams"]["retransmissions"].as_u64().unwrap() > 0,
        "{ch}"
    );
    assert!(
        ch["channel"].as_str().unwrap().starts_with("TICKWIRE"),
        "{ch}"
    );

    // Linux has /proc/net/udp: the kernel's drops are a number, live, in both documents.
    assert!(ch["kernel_drops"].is_u64(), "{ch}");
    let varz = get_json(http, "/varz");
    assert_eq!(varz["counters"]["gaps"], gaps, "{varz}");
    assert_eq!(varz["group"], group.as_str(), "{varz}");
    assert!(varz["kernel_drops"].is_u64(), "{varz}");
    assert_eq!(get(http, "/healthz").0, 200);

    let (status, metrics) = get(http, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "tickwire_feed_up 1".to_string(),
        format!("tickwire_feed_messages_total {FEED_MESSAGES}"),
        format!("tickwire_feed_gaps_total {gaps}"),
        "tickwire_feed_lost_messages_total 0".to_string(),
        "tickwire_feed_received_datagrams_total{line=\"retransmit\"}".to_string(),
        "tickwire_feed_kernel_dropped_datagrams_total ".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    if let Some(promtool) = promtool("feed_endpoint_shows_the_gaps_it_recovered") {
        promtool_check(&promtool, &metrics);
    }
    let Some(chrome) = require_chromium("feed_endpoint_shows_the_gaps_it_recovered") else {
        return;
    };
    let page = Dashboard::open(chrome, http);
    let name = ch["channel"].as_str().unwrap();
    page.wait_cell(
        "channels",
        "channel",
        name,
        "messages",
        &FEED_MESSAGES.to_string(),
    );
    page.wait_cell("channels", "channel", name, "gaps", &gaps.to_string());
    page.wait_cell("channels", "channel", name, "lost", "0");
    page.finish("dashboard-feed.png");
    drop(feed);
}

/// A `tickwire fix acceptor --app echo --http` and a `tickwire fix initiator`, one order
/// sent and echoed: the acceptor's `/sessionz` shows the session logged on with its
/// next sender and target sequence numbers and message counts; `/metrics` says the
/// same and passes promtool; the dashboard in headless Chromium shows the session row.
#[test]
fn fix_endpoint_shows_the_session_and_its_sequence_numbers() {
    let dir = temp_dir("mon-fix");
    let cfg = two_sided_cfg(dir.path(), free_port(), false);
    let mut venue = Peer::spawn(
        "tickwire acceptor",
        Command::new(BIN)
            .args(["fix", "acceptor", "--config"])
            .arg(&cfg)
            .args(["--app", "echo", "--http", "127.0.0.1:0"])
            .env("TICKWIRE_LOG", "warn"),
    );
    let http = banner_addr(&venue.wait(&["tickwire monitor listening on http://"]));
    venue.wait(&["READY acceptor"]);
    let mut client = Peer::tickwire("tickwire initiator", "initiator", &cfg, "log");
    let c = "FIX.4.4:CLIENT->VENUE";
    let v = "FIX.4.4:VENUE->CLIENT";
    client.wait(&["LOGON", c]);
    client.send("35=D|11=ORD1|38=100|40=1|54=1|55=IBM|60=20240101-00:00:00");
    client.wait(&["IN", c, "|35=D|", "|11=ORD1|"]);

    // In: Logon and the order; out: Logon and the echo.
    let sessionz = poll_json(http, "/sessionz", |d| d["items"][0]["app_msgs_in"] == 1);
    let s = &sessionz["items"][0];
    assert_eq!(sessionz["total"], 1);
    assert_eq!(sessionz["logged_on"], 1);
    assert_eq!(s["session"], v, "{s}");
    assert_eq!(s["role"], "acceptor", "{s}");
    assert_eq!(s["state"], "logged_on", "{s}");
    assert_eq!(s["next_sender_seq"], 3, "{s}");
    assert_eq!(s["next_target_seq"], 3, "{s}");
    assert_eq!(s["msgs_in"], 2, "{s}");
    assert_eq!(s["msgs_out"], 2, "{s}");
    assert_eq!(s["logons"], 1, "{s}");
    assert_eq!(s["resend_requests_in"], 0, "{s}");
    let varz = get_json(http, "/varz");
    assert_eq!(
        (&varz["kind"], &varz["side"], &varz["logged_on"]),
        (&"fix".into(), &"acceptor".into(), &1.into()),
        "{varz}"
    );
    assert_eq!(varz["evicted_pending_connections"], 0, "{varz}");
    assert_eq!(get(http, "/healthz").0, 200);

    let (status, metrics) = get(http, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "tickwire_fix_up 1".to_string(),
        "tickwire_fix_sessions_logged_on 1".to_string(),
        format!("tickwire_fix_session_next_sender_seq_number{{session=\"{v}\"}} 3"),
        format!("tickwire_fix_session_next_target_seq_number{{session=\"{v}\"}} 3"),
        format!("tickwire_fix_session_received_messages_total{{session=\"{v}\"}} 2"),
        "tickwire_fix_session_series_omitted 0".to_string(),
        "tickwire_fix_evicted_pending_connections_total 0".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    if let Some(promtool) = promtool("fix_endpoint_shows_the_session_and_its_sequence_numbers") {
        promtool_check(&promtool, &metrics);
    }
    let Some(chrome) = require_chromium("fix_endpoint_shows_the_session_and_its_sequence_numbers")
    else {
        return;
    };
    let page = Dashboard::open(chrome, http);
    page.wait_cell("sessions", "session", v, "state", "logged_on");
    page.wait_cell("sessions", "session", v, "next_target_seq", "3");
    page.wait_cell("sessions", "session", v, "next_sender_seq", "3");
    page.wait_cell("sessions", "session", v, "msgs_in", "2");
    page.finish("dashboard-fix.png");
}

/// `tickwire sub h/>` of router `r`, logging at info to `log`.
fn logging_sub(r: &RouterProc, log: &std::path::Path) -> std::process::Child {
    common::cli(&[
        "sub",
        "h/>",
        "--router",
        &r.addr_str(),
        "--log-file",
        log.to_str().unwrap(),
        "--log-level",
        "info",
    ])
    .spawn()
    .unwrap()
}

/// `--log-file`'s help promises that SIGHUP reopens the file, for every command: a
/// subscriber given one survives SIGHUP and writes on in a fresh file after a rename.
#[test]
fn a_client_command_with_a_log_file_reopens_it_on_sighup() {
    let r = RouterProc::start(&["--no-guaranteed"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sub.log");
    let mut sub = logging_sub(&r, &log);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log.exists() {
        assert!(Instant::now() < deadline, "no log file");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::rename(&log, dir.path().join("sub.log.1")).unwrap();
    common::signal(sub.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("log file reopened") {
            break;
        }
        assert!(
            sub.try_wait().unwrap().is_none(),
            "the subscriber died of SIGHUP"
        );
        assert!(Instant::now() < deadline, "no line in the reopened file");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sub.try_wait().unwrap().is_none(), "the subscriber died");
    sub.kill().unwrap();
    sub.wait().unwrap();
}

/// A SIGHUP right after the log file appears (logrotate at a start) does not end the
/// command: it killed a `sub` whose SIGHUP handling was not installed yet (it was
/// installed after the file was opened; a flakiness audit saw 23 of 40 such `sub`s
/// die). The SIGHUP is held from before the file opens and reopens the file once the
/// handling is in place.
#[test]
fn a_sighup_as_the_log_file_appears_does_not_end_the_command() {
    use rustix::process::{kill_process, Pid, Signal};
    let r = RouterProc::start(&["--no-guaranteed"]);
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5 {
        let log = dir.path().join(format!("sub-{round}.log"));
        let mut sub = logging_sub(&r, &log);
        let pid = Pid::from_raw(i32::try_from(sub.id()).unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !log.exists() {
            assert!(Instant::now() < deadline, "no log file");
            std::thread::sleep(Duration::from_micros(100));
        }
        for _ in 0..20 {
            kill_process(pid, Signal::HUP).unwrap();
            std::thread::sleep(Duration::from_micros(500));
        }
        std::thread::sleep(Duration::from_millis(300));
        let status = sub.try_wait().unwrap();
        assert!(
            status.is_none(),
            "round {round}: the subscriber ended: {status:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("log file reopened")
        {
            assert!(Instant::now() < deadline, "round {round}: no reopen logged");
            std::thread::sleep(Duration::from_millis(20));
        }
        sub.kill().unwrap();
        sub.wait().unwrap();
    }
}

/// `--log-level` wins over the config file's `[log] level` at every SIGHUP too, and
/// the reload says so.
#[test]
fn sighup_keeps_an_explicit_log_level() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("router.toml");
    let log = dir.path().join("router.log");
    std::fs::write(&config, "[log]\nlevel = \"warn\"\n").unwrap();
    let r = RouterProc::start(&[
        "--config",
        config.to_str().unwrap(),
        "--no-guaranteed",
        "--log-level",
        "info",
        "--log-file",
        log.to_str().unwrap(),
    ]);
    common::signal(r.child.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("log level kept")
    {
        assert!(Instant::now() < deadline, "no 'log level kept' line");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Still at info: a connect is logged.
    drop(Client::connect(r.addr).unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("client connected")
    {
        assert!(
            Instant::now() < deadline,
            "the config's warn replaced --log-level info"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
