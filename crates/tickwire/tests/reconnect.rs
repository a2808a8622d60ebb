//! Reconnecting clients across processes: the real router binary is killed and
//! restarted on the same port under a reconnecting `tickwire sub` and under the
//! library's `ReconnectingClient`.

// Tests fail loudly on any unexpected error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{free_port, FixedRouter};
use tickwire_client::{Client, Error, LinkEvent, ReconnectOptions, ReconnectingClient, Wait};

/// A plain router (no spool) on a fixed port, so that it can be killed and restarted.
fn plain(port: u16) -> FixedRouter {
    FixedRouter::start(port, &["--no-guaranteed"], Stdio::inherit())
}

/// Publishes `topic payload` every 50 ms until `seen` says the line arrived.
fn publish_until_seen(addr: &str, topic: &str, payload: &str, lines: &mpsc::Receiver<String>) {
    let mut c = Client::connect(addr).expect("publisher connects");
    let deadline = Instant::now() + Duration::from_secs(20);
    let want = format!("{topic} {payload}");
    loop {
        c.publish(topic, payload.as_bytes()).unwrap();
        c.flush().unwrap();
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(50)) {
            if line == want {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{want:?} never printed");
    }
}

/// Asserts that a command's standard error told of a lost connection and of its return.
fn assert_reports_the_outage(err: &str) {
    assert!(
        err.contains("disconnected: "),
        "no disconnection report: {err}"
    );
    assert!(
        err.contains("reconnected after"),
        "no reconnection report: {err}"
    );
}

/// A reconnecting `tickwire sub`: its stdout lines arrive on a channel.
fn spawn_sub(addr: &str, extra: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = common::cli(&[&["sub", "--router", addr, "t/>"], extra].concat())
        .spawn()
        .expect("spawn tickwire sub");
    let stdout = child.stdout.take().expect("sub stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

#[test]
fn tickwire_sub_keeps_going_across_a_router_restart() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let (mut sub, lines) = spawn_sub(&addr, &[]);
    publish_until_seen(&addr, "t/a", "before", &lines);

    router.kill9();
    // Down for a while: several attempts fail and back off.
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        sub.try_wait().unwrap().is_none(),
        "sub exited with the router"
    );
    let router = plain(port);
    publish_until_seen(&addr, "t/b", "after", &lines);

    // Twice more, at once: it comes back every time.
    let mut router = router;
    for round in 0..2 {
        router.kill9();
        router = plain(port);
        publish_until_seen(&addr, "t/c", &format!("round-{round}"), &lines);
    }
    // And a graceful shutdown (CLOSE shutting-down) is a loss like any other.
    let st = Command::new("kill")
        .args(["-TERM", &router.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    router.child.wait().unwrap();
    let router = plain(port);
    publish_until_seen(&addr, "t/d", "after-sigterm", &lines);
    drop(router);
    let _ = sub.kill();
    let _ = sub.wait();
    let mut err = String::new();
    sub.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_reports_the_outage(&err);
    assert!(err.contains("1 subscription restored"), "{err}");
    // A subscriber never publishes: no "0 buffered publishes sent" (new-user pass).
    assert!(!err.contains("buffered publish"), "{err}");
}

#[test]
fn tickwire_pub_reports_the_outage_and_sums_it_up() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let mut watch = Client::connect(&addr).unwrap();
    watch.subscribe("t/p").unwrap();
    // Due over 4 s, each sent at its time: the kill falls in the middle.
    let mut publ = common::cli(&[
        "pub", "--router", &addr, "t/p", "x", "--count", "400", "--rate", "100",
    ])
    .spawn()
    .expect("spawn tickwire pub");
    // Publishing (not a 700 ms sleep: a loaded machine could start it later than that,
    // and the kill then came before it had connected).
    assert!(
        watch
            .recv(Wait::Timeout(Duration::from_secs(30)))
            .unwrap()
            .is_some(),
        "pub published nothing"
    );
    router.kill9();
    std::thread::sleep(Duration::from_millis(300));
    let router = plain(port);
    let status = common::wait_child(&mut publ, Duration::from_secs(60), "pub across a restart");
    drop(router);
    let mut err = String::new();
    publ.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert_reports_the_outage(&err);
    assert!(
        err.contains("published 400 messages") && err.contains("1 disconnection, 1 reconnection,"),
        "no summary of the outage: {err}"
    );
}

#[test]
fn sub_stopped_during_an_outage_counts_the_outage_so_far() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let (mut sub, lines) = spawn_sub(&addr, &[]);
    let stderr = sub.stderr.take().unwrap();
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = err_tx.send(line);
        }
    });
    publish_until_seen(&addr, "t/a", "before", &lines);
    router.kill9();
    // The outage counts from when the sub saw the loss: 600 ms from its report (from
    // the kill, a sub that saw it late counted less than 0.5 s).
    let mut err = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !err.contains("disconnected: ") {
        let left = deadline.saturating_duration_since(Instant::now());
        match err_rx.recv_timeout(left) {
            Ok(line) => err += &(line + "\n"),
            Err(_) => panic!("no disconnection report: {err}"),
        }
    }
    std::thread::sleep(Duration::from_millis(600));
    common::interrupt(&sub);
    let status = common::wait_child(&mut sub, Duration::from_secs(20), "sub after Ctrl-C");
    // The reader ends at the end of the stream.
    for line in err_rx.iter() {
        err += &(line + "\n");
    }
    assert!(status.success(), "{status}: {err}");
    // "1 disconnection, 0 reconnections, S s disconnected; ..." with S the outage so far.
    let secs: f64 = err
        .split("1 disconnection, 0 reconnections, ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no outage summary: {err}"));
    assert!(secs >= 0.5, "outage counted as {secs} s: {err}");
    assert!(err.contains("missing messages not counted"), "{err}");
}

/// Sends requests to `topic` until one is answered with `payload` (20 s at most): the
/// responder may still be reconnecting.
fn request_until_answered(addr: &str, topic: &str, payload: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answered = Client::connect(addr)
            .and_then(|mut c| c.request(topic, payload, Duration::from_millis(500)));
        match answered {
            Ok(reply) => {
                assert_eq!(reply.payload, payload);
                return;
            }
            Err(e) => assert!(Instant::now() < deadline, "no answer on {topic}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn tickwire_reply_keeps_answering_across_a_router_restart() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let mut reply = common::cli(&["reply", "--router", &addr, "svc/echo", "--quiet"])
        .spawn()
        .expect("spawn tickwire reply");
    request_until_answered(&addr, "svc/echo", b"before");
    router.kill9();
    let router = plain(port);
    request_until_answered(&addr, "svc/echo", b"after");
    assert!(reply.try_wait().unwrap().is_none(), "reply exited");
    drop(router);
    let _ = reply.kill();
    let _ = reply.wait();
    let mut err = String::new();
    reply
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_reports_the_outage(&err);
}

#[test]
fn no_reconnect_exits_when_the_router_goes() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let (mut sub, lines) = spawn_sub(&addr, &["--no-reconnect"]);
    publish_until_seen(&addr, "t/a", "x", &lines);
    router.kill9();
    let status = common::wait_child(&mut sub, Duration::from_secs(10), "sub --no-reconnect");
    // The router's loss is an error for a sub that may not reconnect (new-user pass:
    // it exited 0, so a supervisor could not tell a crash from a normal end).
    assert_eq!(status.code(), Some(1), "{status}");
}

/// `reply --no-reconnect` ends with its router, and `--give-up-after` bounds its
/// wait and says so (the README named both flags; `reply` had neither).
#[test]
fn reply_no_reconnect_and_give_up_after() {
    for extra in [&["--no-reconnect"][..], &["--give-up-after", "1s"]] {
        let port = free_port();
        let router = plain(port);
        let addr = router.addr_str();
        let mut args = vec!["reply", "--router", &addr, "svc/echo", "--quiet"];
        args.extend_from_slice(extra);
        let mut reply = common::cli(&args).spawn().expect("spawn tickwire reply");
        request_until_answered(&addr, "svc/echo", b"before");
        router.kill9();
        let status = common::wait_child(&mut reply, Duration::from_secs(15), "reply");
        let (_, err) = common::take_output(&mut reply);
        if extra[0] == "--no-reconnect" {
            // A hostile-router probe: this exited 0, where `sub --no-reconnect` exits 1
            // (a supervisor must tell the loss from a normal end).
            assert_eq!(status.code(), Some(1), "{err}");
            assert!(
                err.contains("(--no-reconnect)") && err.contains("answered "),
                "{err}"
            );
        } else {
            assert_eq!(status.code(), Some(1), "{err}");
            assert!(
                err.contains("gave up: the router could not be reached again for 1s"),
                "{err}"
            );
        }
    }
}

fn opts(buffer: usize) -> ReconnectOptions {
    ReconnectOptions {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(100),
        give_up_after: Some(Duration::from_secs(20)),
        offline_buffer_bytes: buffer,
        ..ReconnectOptions::default()
    }
}

#[test]
fn library_client_reports_the_outage_restores_subscriptions_and_sends_what_it_buffered() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let mut sub = ReconnectingClient::connect(&addr, opts(1 << 20)).unwrap();
    sub.subscribe("t/>").unwrap();
    // 8 + 3 + 10 bytes per publish: two fit in 50 bytes, the third does not.
    let mut publ = ReconnectingClient::connect(&addr, opts(50)).unwrap();

    router.kill9();
    // The publisher notices on its next write, or on a poll.
    let deadline = Instant::now() + Duration::from_secs(10);
    while publ.is_connected() {
        publ.poll(Wait::Timeout(Duration::from_millis(20)), |_| {})
            .unwrap();
        assert!(Instant::now() < deadline, "the loss went unnoticed");
    }
    publ.publish("t/x", b"offline-01").unwrap();
    publ.publish("t/x", b"offline-02").unwrap();
    match publ.publish("t/x", b"offline-03") {
        Err(e @ Error::OfflineBufferFull { limit: 50 }) => {
            assert!(
                e.to_string().contains("offline publish buffer is full"),
                "{e}"
            );
        }
        other => panic!("expected OfflineBufferFull, got {other:?}"),
    }
    assert_eq!(publ.offline_buffered(), (42, 2));
    assert_eq!(publ.stats().offline_refused, 1);

    let _router = plain(port);
    // The subscriber reports the loss, then the reconnection with its subscription.
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !events.iter().any(|e: &String| e.starts_with("reconnected")) {
        sub.poll(Wait::Timeout(Duration::from_millis(50)), |ev| match ev {
            LinkEvent::Disconnected { reason } => events.push(format!("disconnected {reason}")),
            LinkEvent::Reconnected(o) => {
                assert_eq!(o.resubscribed, 1);
                assert!(o.attempts >= 1);
                events.push("reconnected".into());
            }
            LinkEvent::Message(m) => panic!("unexpected message {}", m.topic()),
            _ => {}
        })
        .unwrap();
        assert!(Instant::now() < deadline, "no reconnection: {events:?}");
    }
    assert!(events[0].starts_with("disconnected"), "{events:?}");
    assert_eq!(sub.stats().disconnects, 1);
    assert_eq!(sub.stats().reconnects, 1);

    // Now the publisher reconnects and sends the two buffered publishes, in order.
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 2 {
        publ.poll(Wait::Timeout(Duration::from_millis(20)), |_| {})
            .unwrap();
        sub.poll(Wait::Timeout(Duration::from_millis(20)), |ev| {
            if let LinkEvent::Message(m) = ev {
                got.push(String::from_utf8_lossy(m.payload()).into_owned());
            }
        })
        .unwrap();
        assert!(
            Instant::now() < deadline,
            "buffered publishes never arrived: {got:?}"
        );
    }
    assert_eq!(got, ["offline-01", "offline-02"]);
    assert_eq!(publ.offline_buffered(), (0, 0));
    assert_eq!(publ.stats().offline_published, 2);
}

/// `ReconnectingClient::subscribe_many` records the patterns the router took, not the
/// ones it refused, and a new connection restores them (the plain runs pipelined, an
/// image subscription as one: its image comes); a router that then refuses one (a
/// lower limit) fails the reconnection with its refusal.
#[test]
fn library_client_restores_many_subscriptions_but_not_the_refused() {
    let port = free_port();
    let with_limit = |n: &'static str| {
        [
            "--no-guaranteed",
            "--max-subscriptions",
            n,
            "--cache",
            "img",
        ]
    };
    let router = FixedRouter::start(port, &with_limit("1002"), Stdio::inherit());
    let addr = router.addr_str();
    let mut sub = ReconnectingClient::connect(&addr, opts(1 << 20)).unwrap();
    sub.subscribe("first").unwrap();
    sub.subscribe_with_image("img").unwrap();
    let many: Vec<String> = (0..1_100).map(|i| format!("m/{i}")).collect();
    match sub.subscribe_many(&many) {
        Err(Error::Rejected { text, .. }) => {
            assert!(text.starts_with("\"m/1000\": "), "{text}");
            assert!(
                text.contains("(100 of the 1100 patterns refused)"),
                "{text}"
            );
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    sub.unsubscribe_many(&["m/0", "m/1"]).unwrap();
    // Subscribed twice, held once by the router: one unsubscribe takes both copies.
    sub.subscribe_many(&["dup", "dup"]).unwrap();
    sub.unsubscribe_many(&["dup"]).unwrap();
    assert!(!sub.subscriptions().any(|p| p == "dup"));

    router.kill9();
    let router = FixedRouter::start(port, &with_limit("1002"), Stdio::inherit());
    // Cached by the new router before the client is back: the restored image has it.
    let mut publ = Client::connect(&addr).unwrap();
    publ.publish("img", b"cached").unwrap();
    publ.ping().unwrap();
    let outage = reconnected(&mut sub);
    assert_eq!(outage.resubscribed, 1 + 1 + 998);
    for topic in ["m/1000", "first", "m/0", "m/999", "img"] {
        publ.publish(topic, topic.as_bytes()).unwrap();
    }
    publ.flush().unwrap();
    let got = topics(&mut sub, 4);
    assert_eq!(
        got,
        [
            "img (cached)".to_owned(),
            "first".into(),
            "m/999".into(),
            "img".into()
        ]
    );

    // A router that takes one fewer: the reconnection fails with the router's refusal,
    // naming the pattern (not worth retrying: the caller decides).
    router.kill9();
    let _router = FixedRouter::start(port, &with_limit("999"), Stdio::inherit());
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        match sub.poll(Wait::Timeout(Duration::from_millis(50)), |_| {}) {
            Ok(_) => assert!(Instant::now() < deadline, "no refusal"),
            Err(e) => break e,
        }
    };
    match err {
        Error::Rejected { text, .. } => {
            assert!(
                text.starts_with("restoring the subscriptions after reconnecting: \"m/999\": "),
                "{text}"
            );
            assert!(text.contains("at most 999 subscriptions"), "{text}");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
}

/// Polls `sub` until it reports a reconnection; its outage.
fn reconnected(sub: &mut ReconnectingClient) -> tickwire_client::Outage {
    let mut outage = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while outage.is_none() {
        sub.poll(Wait::Timeout(Duration::from_millis(50)), |ev| {
            if let LinkEvent::Reconnected(o) = ev {
                outage = Some(o.clone());
            }
        })
        .unwrap();
        assert!(Instant::now() < deadline, "no reconnection");
    }
    outage.unwrap()
}

/// The topics of the next `n` messages `sub` gets, " (cached)" after an image's.
fn topics(sub: &mut ReconnectingClient, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n {
        sub.poll(Wait::Timeout(Duration::from_millis(50)), |ev| {
            if let LinkEvent::Message(m) = ev {
                let cached = if m.cached().is_some() {
                    " (cached)"
                } else {
                    ""
                };
                got.push(format!("{}{cached}", m.topic()));
            }
        })
        .unwrap();
        assert!(Instant::now() < deadline, "got only {got:?}");
    }
    got
}

#[test]
fn library_client_gives_up_after_the_configured_outage() {
    let port = free_port();
    let router = plain(port);
    let mut c = ReconnectingClient::connect(
        &router.addr_str(),
        ReconnectOptions {
            give_up_after: Some(Duration::from_millis(300)),
            ..opts(1024)
        },
    )
    .unwrap();
    c.subscribe("t/>").unwrap();
    router.kill9();
    let started = Instant::now();
    let err = loop {
        match c.poll(Wait::Timeout(Duration::from_millis(50)), |_| {}) {
            Ok(_) => assert!(started.elapsed() < Duration::from_secs(20), "never gave up"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(c.stats().failed_attempts >= 2, "{:?}", c.stats());
}

#[test]
fn sequence_jumps_across_an_outage_are_counted_as_missed() {
    let port = free_port();
    let router = plain(port);
    let addr = router.addr_str();
    let mut sub = ReconnectingClient::connect(&addr, opts(1024)).unwrap();
    sub.subscribe("t/>").unwrap();
    let mut p = Client::connect(&addr).unwrap();
    let seq = |s| tickwire_client::PublishOptions {
        seq: Some(s),
        ..Default::default()
    };
    p.publish_with("t/s", b"1", seq(1)).unwrap();
    p.flush().unwrap();
    let mut n = 0;
    while n < 1 {
        sub.poll(Wait::Timeout(Duration::from_millis(50)), |ev| {
            n += usize::from(matches!(ev, LinkEvent::Message(_)));
        })
        .unwrap();
    }
    router.kill9();
    let _router = plain(port);
    // Seqs 2..=4 are published while the subscriber is still away (never seen), then
    // 5 after it is back.
    let mut p = Client::connect(&addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while last != Some(5) {
        sub.poll(Wait::Timeout(Duration::from_millis(20)), |ev| {
            if let LinkEvent::Message(m) = ev {
                last = m.seq();
            }
        })
        .unwrap();
        if sub.is_connected() && sub.stats().reconnects == 1 {
            p.publish_with("t/s", b"5", seq(5)).unwrap();
            p.flush().unwrap();
        }
        assert!(Instant::now() < deadline, "seq 5 never arrived");
    }
    // Duplicate 5s (published until seen) are not gaps.
    assert_eq!(sub.stats().missed_by_seq, 3, "{:?}", sub.stats());
    assert!(sub.stats().numbered >= 2, "{:?}", sub.stats());
}
