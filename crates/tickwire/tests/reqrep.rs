//! Request/reply across processes on the real router: the library's `request` and
//! `reply`, the router's NO_RESPONDERS answer, bad input, and the CLI commands.

// Tests fail loudly on any unexpected error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{run_cli, Got, Raw, RouterProc};
use tickwire_client::{Client, Error, ErrorCode, ReplyTo, Wait};
use tickwire_wire::frame::{self, PublishOptions, ReplyField};

/// A responder thread: answers `n` requests on `pattern` with "re:" + payload.
fn responder(addr: String, pattern: &'static str, n: usize) -> std::thread::JoinHandle<()> {
    let mut c = Client::connect(addr.as_str()).unwrap();
    c.subscribe(pattern).unwrap();
    std::thread::spawn(move || {
        let mut done = 0;
        let mut todo: Vec<(ReplyTo, Vec<u8>)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while done < n {
            c.poll(Wait::Timeout(Duration::from_millis(50)), |m| {
                if let Some(to) = m.reply_target() {
                    todo.push((to, [b"re:", m.payload()].concat()));
                }
            })
            .unwrap();
            for (to, answer) in todo.drain(..) {
                c.reply(&to, &answer).unwrap();
                done += 1;
            }
            c.flush().unwrap();
            assert!(Instant::now() < deadline, "responder saw {done} of {n}");
        }
    })
}

#[test]
fn request_returns_the_first_reply_with_its_correlation_id() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let r = responder(addr.clone(), "svc/echo", 3);
    let mut c = Client::connect(addr.as_str()).unwrap();
    // A plain subscription of the requester keeps its messages across requests.
    c.subscribe("news/>").unwrap();
    for i in 0..3 {
        let reply = c
            .request(
                "svc/echo",
                format!("q{i}").as_bytes(),
                Duration::from_secs(10),
            )
            .unwrap();
        assert_eq!(reply.payload, format!("re:q{i}").as_bytes());
        assert!(reply.topic.starts_with("_reply/"), "{}", reply.topic);
        assert!(reply.correlation.is_some());
        assert!(reply.reply_to.is_none());
    }
    r.join().unwrap();
}

#[test]
fn no_responders_is_answered_at_once_and_the_connection_stays_usable() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let mut c = Client::connect(addr.as_str()).unwrap();
    let started = Instant::now();
    match c.request("svc/nobody", b"hi", Duration::from_secs(30)) {
        Err(e @ Error::NoResponders { .. }) => {
            assert!(e.to_string().contains("no responders"), "{e}");
        }
        other => panic!("expected NoResponders, got {other:?}"),
    }
    // Well within the timeout: the router answered, the client did not time out.
    assert!(started.elapsed() < Duration::from_secs(20));
    let r = responder(addr.clone(), "svc/nobody", 1);
    let reply = c
        .request("svc/nobody", b"now", Duration::from_secs(10))
        .unwrap();
    assert_eq!(reply.payload, b"re:now");
    r.join().unwrap();
    assert!(c.ping().is_ok());
}

#[test]
fn a_request_with_an_invalid_reply_topic_is_refused_before_any_responder_sees_it() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let mut resp = Raw::hello(router.addr, "responder");
    resp.subscribe(1, "svc/>");
    assert_eq!(resp.next(Duration::from_secs(5)), Ok(Got::Ack(1)));
    let mut bad = Raw::hello(router.addr, "bad");
    let mut b = Vec::new();
    let reply = ReplyField {
        correlation: 5,
        to: b"a/>",
    };
    let opts = PublishOptions::default();
    frame::encode_publish_reply(&mut b, "svc/x", b"p", opts, Some(reply), u32::MAX).unwrap();
    bad.send(&b);
    let text = bad.expect_fatal(ErrorCode::INVALID_TOPIC);
    assert!(text.contains("reply topic"), "{text}");
    // The responder got nothing and is still served.
    let mut p = Raw::hello(router.addr, "p");
    p.publish("svc/ok", b"x");
    match resp.next(Duration::from_secs(5)) {
        Ok(Got::Message { topic, .. }) => assert_eq!(topic, "svc/ok"),
        other => panic!("expected svc/ok, got {other:?}"),
    }
}

#[test]
fn a_storm_of_unanswerable_requests_costs_the_router_a_bounded_egress() {
    // Small egress limit: the unread NO_RESPONDERS answers end in SLOW_CONSUMER.
    let router = RouterProc::start(&[
        "--no-guaranteed",
        "--egress-limit",
        "64KiB",
        "--max-frame",
        "4096",
    ]);
    let mut storm = Raw::hello(router.addr, "storm");
    let mut b = Vec::new();
    for i in 0..20_000u32 {
        let reply = ReplyField {
            correlation: i + 1,
            to: b"_reply/storm",
        };
        let opts = PublishOptions::default();
        frame::encode_publish_reply(&mut b, "svc/none", b"", opts, Some(reply), u32::MAX).unwrap();
    }
    // Written from a thread: the router stops reading once it closes the connection.
    let mut s = storm.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = s.write_all(&b);
    });
    // Meanwhile another client is served normally.
    let mut c = Client::connect(router.addr).unwrap();
    assert!(c.ping().is_ok());
    // Read nothing until the router has cut the storm client off (its own unread
    // answers; bounded: a router that never does fails here), then look at what it
    // was sent: at most the egress limit's worth, then SLOW_CONSUMER.
    let cut = Instant::now() + Duration::from_secs(20);
    loop {
        let st: serde_json::Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
        let listed = st["clients"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "storm");
        if !listed {
            break;
        }
        assert!(
            Instant::now() < cut,
            "the storm client was not cut off: {st}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = 0;
    loop {
        match storm.next(Duration::from_secs(5)) {
            Ok(Got::Error {
                code, fatal: false, ..
            }) if code == ErrorCode::NO_RESPONDERS => errors += 1,
            Ok(Got::Error {
                code, fatal: true, ..
            }) => {
                assert_eq!(code, ErrorCode::SLOW_CONSUMER);
                break;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => panic!("storm connection ended without SLOW_CONSUMER: {e:?} after {errors}"),
        }
        assert!(Instant::now() < deadline);
    }
    assert!(
        errors < 20_000,
        "every answer arrived: the limit did not apply"
    );
    writer.join().unwrap();
    let stats: serde_json::Value = serde_json::from_str(&c.stats_json().unwrap()).unwrap();
    assert!(common::u(&stats["router"]["totals"], "no_responders") > 0);
    assert!(c.ping().is_ok());
}

#[test]
fn cli_request_and_reply_with_exec_and_no_responders_exit_status() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let (st, _out, err) = run_cli(
        &["request", "--router", &addr, "svc/upper", "x"],
        Duration::from_secs(20),
    );
    assert_eq!(st.code(), Some(5), "{err}");
    assert!(err.contains("no responders"), "{err}");

    let mut replier = common::cli(&[
        "reply",
        "--router",
        &addr,
        "svc/upper",
        "--exec",
        "tr a-z A-Z",
        "--count",
        "1",
    ])
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let out = request_when_answered(&addr, "svc/upper", "hello there");
    assert_eq!(out, "HELLO THERE\n");
    let st = replier.wait().unwrap();
    assert!(st.success());

    // Echo by default; a reply within the timeout, else exit 3.
    let mut echo = common::cli(&["reply", "--router", &addr, "svc/echo", "--count", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = request_when_answered(&addr, "svc/echo", "ping");
    assert_eq!(out, "ping\n");
    echo.wait().unwrap();

    // A subscriber that never answers: the request times out (exit 3).
    let mut silent = Client::connect(router.addr).unwrap();
    silent.subscribe("svc/silent").unwrap();
    let (st, _, err) = run_cli(
        &[
            "request",
            "--router",
            &addr,
            "svc/silent",
            "x",
            "--timeout",
            "300ms",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(st.code(), Some(3), "{err}");
}

/// `reply --group NAME` answers as one member of a shared group (new-user pass: only
/// `sub` had --group; `reply` took it for `--router`): two members, each request
/// answered once, by one of them.
#[test]
fn reply_group_members_share_the_requests() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    /// A member, killed when the test ends, whatever way it ends.
    struct Member(std::process::Child);
    impl Drop for Member {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let member = |tag: &str| {
        Member(
            common::cli(&[
                "reply",
                "--router",
                &addr,
                "svc/who",
                "--group",
                "pool",
                "--exec",
                &format!("echo {tag}"),
                "--quiet",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        )
    };
    let _one = member("one");
    let first = request_when_answered(&addr, "svc/who", "x");
    let _two = member("two");
    // Both members are in the group once the router holds two subscriptions.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, out, _) = run_cli(
            &["stats", "--router", &addr, "--print-json"],
            Duration::from_secs(20),
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        // One group of two members: with --group ignored there would be none (review).
        if v["router"]["subscriptions"] == 2 && v["shared_groups"] == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second member never joined: {out}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut answers = vec![first];
    for _ in 0..20 {
        answers.push(request_when_answered(&addr, "svc/who", "x"));
    }
    assert!(
        answers.iter().all(|a| a == "one\n" || a == "two\n"),
        "{answers:?}"
    );
    // A group shares the requests: the new member answers some of them.
    assert!(answers.iter().any(|a| a == "two\n"), "{answers:?}");
    // A pattern that is shared already, with --group: a usage error, not a
    // subscription that never matches (review).
    let (st, _, err) = run_cli(
        &[
            "reply",
            "$share/x/svc/who",
            "--group",
            "pool",
            "--router",
            &addr,
        ],
        Duration::from_secs(20),
    );
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("give one or the other"), "{err}");
    let (st, _, err) = run_cli(
        &["reply", "svc/x", "--group", "a/b", "--router", &addr],
        Duration::from_secs(20),
    );
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'a/b' for '--group <NAME>': \"a/b\" is not a group name"),
        "{err}"
    );
}

/// A command that floods stderr and fails, one that answers before reading its input,
/// and one that never exits: none of them hangs the responder.
#[test]
fn reply_exec_survives_commands_that_flood_or_hang() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let mut replier = common::cli(&[
        "reply",
        "--router",
        &addr,
        "svc/>",
        "--exec-timeout",
        // Long enough for sh, head and tr to start and pipe 300 KB on a loaded
        // machine; short of the request's own 5 s timeout.
        "2s",
        "--exec",
        // Topic-independent: the command picks its behaviour from the payload.
        "read -r what; case $what in \
           flood) head -c 300000 /dev/zero | tr '\\0' e >&2; exit 3;; \
           early) head -c 200000 /dev/zero | tr '\\0' o | head -c 10; cat >/dev/null;; \
           *) sleep 30.0417 | cat;; esac",
        "--count",
        "3",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // A failed command's answer is a failure for the requester: standard error, exit 4.
    let (st, _, flood) = request_until_answered(&addr, "svc/flood", "flood");
    assert_eq!(st.code(), Some(4), "{flood:.200}");
    assert!(flood.starts_with("error: "), "{flood:.200}");
    assert!(flood.contains("exit status: 3"), "{flood:.200}");
    let early = request_when_answered(&addr, "svc/early", "early");
    assert_eq!(early, "oooooooooo\n");
    let (st, _, hang) = request_until_answered(&addr, "svc/hang", "hang");
    assert_eq!(st.code(), Some(4), "{hang}");
    assert!(hang.contains("still running after 2s: killed"), "{hang}");
    // Killed with what it started (its own process group): no `sleep` left behind
    // (review: only `sh` was killed, the pipeline's members orphaned).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = std::process::Command::new("pgrep")
            .args(["-f", "sleep 30.0417"])
            .output()
            .unwrap();
        if left.stdout.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = common::wait_child(&mut replier, Duration::from_secs(20), "the responder");
    assert!(st.success(), "{st}");
}

/// New-user pass: `reply svc/e --exec ''` ran and answered every request with an
/// empty success; `--count 0` was as meaningless. Both are usage errors now.
#[test]
fn reply_refuses_an_empty_exec_and_a_zero_count() {
    for args in [
        &["reply", "svc/e", "--exec", ""][..],
        &["reply", "svc/e", "--exec", "  "][..],
        &["reply", "svc/e", "--count", "0"][..],
    ] {
        let (st, _, err) = run_cli(args, Duration::from_secs(30));
        assert_eq!(st.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("empty command") || err.contains("at least 1"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn help_has_examples() {
    common::assert_help_lists(&["request", "--help"], &["Examples:", "no responders"]);
    common::assert_help_lists(&["reply", "--help"], &["Examples:", "--exec"]);
}

/// `tickwire request` until a responder answers: until it has subscribed, a request
/// gets "no responders" (exit 5); 20 s at most.
fn request_when_answered(addr: &str, topic: &str, msg: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, out, err) = run_cli(
            &["request", "--router", addr, topic, msg],
            Duration::from_secs(20),
        );
        if st.success() {
            return out;
        }
        assert_eq!(st.code(), Some(5), "{err}");
        assert!(Instant::now() < deadline, "no responder answered {topic}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tickwire request` until it gets something other than "no responders" (exit 5),
/// 20 s at most: its status, standard output and standard error.
fn request_until_answered(
    addr: &str,
    topic: &str,
    msg: &str,
) -> (std::process::ExitStatus, String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, out, err) = run_cli(
            &["request", "--router", addr, topic, msg],
            Duration::from_secs(20),
        );
        if st.code() != Some(5) {
            return (st, out, err);
        }
        assert!(
            Instant::now() < deadline,
            "no responder answered {topic}: {err}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A responder answering one request on `svc/big` with 200,000 bytes of --exec output
/// under `--max-reply MAX_REPLY`, through a router started with `router_args`: the
/// requester's exit status and standard error, and the responder's standard error.
fn one_big_exec_answer(
    router_args: &[&str],
    max_reply: &str,
) -> (std::process::ExitStatus, String, String) {
    let router = RouterProc::start(router_args);
    let addr = router.addr_str();
    let mut replier = common::cli(&[
        "reply",
        "--router",
        &addr,
        "svc/big",
        "--exec",
        "head -c 200000 /dev/zero",
        "--max-reply",
        max_reply,
        "--count",
        "1",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (req, _, req_err) = request_until_answered(&addr, "svc/big", "x");
    let st = common::wait_child(&mut replier, Duration::from_secs(20), "the responder");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut replier.stderr.take().unwrap(), &mut err).unwrap();
    assert!(st.success(), "{st}: {err}");
    (req, req_err, err)
}

/// Regression: an --exec answer longer than the router's max frame was cut silently
/// (the requester got less, the responder logged the full size); then said, but the
/// cut answer still read as a success. It is answered as a failure now: the requester
/// exits 4 with the reason, the responder warns with both sizes.
#[test]
fn an_answer_the_routers_max_frame_cannot_carry_is_a_failure_on_both_sides() {
    let (st, req_err, err) =
        one_big_exec_answer(&["--no-guaranteed", "--max-frame", "64KiB"], "10MiB");
    assert_eq!(st.code(), Some(4), "{req_err}");
    assert!(
        req_err.contains(
            "error: the answer of 200000 bytes does not fit the router's max frame of 65536 bytes"
        ),
        "{req_err}"
    );
    assert!(
        err.contains(
            "warning: answer of 200000 bytes on svc/big does not fit the router's max frame of 65536 bytes: answered with an error instead"
        ),
        "{err}"
    );
}

/// New-user pass: an --exec output longer than --max-reply (64 KiB by default) was cut
/// with nothing said on either side; then cut with a warning at the responder only, the
/// requester taking half an answer for a whole one. It is answered as a failure now.
#[test]
fn an_exec_answer_longer_than_max_reply_is_a_failure_on_both_sides() {
    let (st, req_err, err) = one_big_exec_answer(&["--no-guaranteed"], "1000");
    assert_eq!(st.code(), Some(4), "{req_err}");
    assert!(
        req_err.contains("wrote 200000 bytes, more than --max-reply 1000: none of it sent"),
        "{req_err}"
    );
    assert!(
        err.contains(
            "warning: --exec command wrote 200000 bytes for a request on svc/big, more than --max-reply 1000 bytes: answered with an error instead"
        ),
        "{err}"
    );
}

/// Regression: an --exec command that failed was answered as if it had succeeded: the
/// requester printed `error: ... exit status: 127: ...` on standard output and exited 0,
/// and the responder logged only "answered a request". Now the responder warns (the
/// status and the command's standard error), and the requester prints the answer on
/// standard error and exits 4.
#[test]
fn regression_a_failing_exec_answer_is_a_failure_on_both_sides() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let mut replier = common::cli(&[
        "reply",
        "--router",
        &addr,
        "svc/bad",
        "--exec",
        "nonexistent-cmd-xyz",
        "--count",
        "1",
    ])
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let (st, out, err) = request_until_answered(&addr, "svc/bad", "hi");
    assert_eq!(st.code(), Some(4), "stdout: {out} stderr: {err}");
    assert_eq!(out, "", "{err}");
    assert!(
        err.starts_with("error: \"nonexistent-cmd-xyz\" exit status: 127: "),
        "{err}"
    );
    let st = common::wait_child(&mut replier, Duration::from_secs(20), "the responder");
    let (_, said) = common::take_output(&mut replier);
    assert!(st.success(), "{said}");
    assert!(
        said.contains(
            "warning: --exec command failed on a request on svc/bad: \"nonexistent-cmd-xyz\" \
             exit status: 127: "
        ),
        "{said}"
    );
    assert!(said.contains("not found"), "the command's stderr: {said}");
    assert!(said.contains("with the command's failure"), "{said}");
    // A good answer still exits 0 with the answer on standard output.
    let mut good = common::cli(&["reply", "--router", &addr, "svc/good", "--count", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(request_when_answered(&addr, "svc/good", "fine"), "fine\n");
    common::wait_child(&mut good, Duration::from_secs(20), "the echo responder");
}

/// Regression: `tickwire reply` had no Ctrl-C handling: it died on the signal (no
/// summary, no orderly close). It now answers what it has, prints its summary and
/// closes, exit 0, as `sub` does.
#[test]
fn regression_ctrl_c_stops_reply_in_order_with_its_summary() {
    let (router, log) = RouterProc::start_logged(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let mut replier = common::cli(&["reply", "--router", &addr, "svc/echo", "--name", "rr"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(request_when_answered(&addr, "svc/echo", "one"), "one\n");
    assert_eq!(request_when_answered(&addr, "svc/echo", "two"), "two\n");
    common::interrupt(&replier);
    let st = common::wait_child(&mut replier, Duration::from_secs(20), "reply after Ctrl-C");
    let (_, err) = common::take_output(&mut replier);
    assert_eq!(st.code(), Some(0), "{err}");
    assert!(err.contains("stopping"), "{err}");
    assert!(
        err.contains("answered 2 requests on svc/echo in ")
            && err.starts_with("answering requests on svc/echo at "),
        "the summary: {err}"
    );
    // An orderly close: the router got its CLOSE (a dropped connection is logged
    // with another reason).
    let line = log.wait_for(
        &["closing client", "rr", "closed at the client's request"],
        Duration::from_secs(10),
    );
    assert!(line.is_some(), "no CLOSE from reply: {}", log.text());
}

/// New-user pass: Ctrl-C in a terminal signals the whole foreground process group, so
/// the --exec command answering a request died with `reply` and the requester timed
/// out. The command runs in its own group: the request at hand is answered, then
/// `reply` stops with its summary.
#[test]
fn ctrl_c_to_the_terminals_group_lets_the_exec_answer_the_request_at_hand() {
    use std::os::unix::process::CommandExt;
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let exec = format!("touch {}; sleep 1; echo done", started.display());
    let mut replier = common::cli(&["reply", "--router", &addr, "svc/slow", "--exec", &exec])
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    // Until the responder is there, the request gets "no responders" (exit 5).
    let requester = {
        let addr = addr.clone();
        std::thread::spawn(move || request_until_answered(&addr, "svc/slow", "x"))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(
            Instant::now() < deadline,
            "the --exec command never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // As a terminal does: SIGINT to the process group (the child leads its own, made
    // above; never a negative number on a kill(1) command line, which reads `-N` as
    // an option), the command's too if it were in it.
    let group = rustix::process::Pid::from_child(&replier);
    rustix::process::kill_process_group(group, rustix::process::Signal::INT).unwrap();
    let (st, out, err) = requester.join().unwrap();
    assert!(
        st.success(),
        "the request at hand was not answered: {out}{err}"
    );
    assert_eq!(out, "done\n");
    let st = common::wait_child(&mut replier, Duration::from_secs(20), "reply after Ctrl-C");
    let (_, err) = common::take_output(&mut replier);
    assert_eq!(st.code(), Some(0), "{err}");
    assert!(err.contains("answered 1 request"), "{err}");
}

/// Hostile-router probe: against a router that WELCOMEs and then answers nothing,
/// `request --timeout 1s` waited the client's 5 s for the ACK of its reply inbox's
/// subscription and exited 3 ("no reply"). The router's own part is now waited for no
/// longer than --timeout, and its silence is an error (status 1), not "no reply".
#[test]
fn request_against_a_router_that_never_acks_honours_timeout_and_exits_1() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut welcome = Vec::new();
        frame::encode_welcome(&mut welcome, 1, 1 << 20, "silent");
        s.write_all(&welcome).unwrap();
        // Reads (and answers nothing) until the client goes, at most 20 s.
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut sink = [0u8; 4096];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    });
    let t0 = Instant::now();
    let (st, _, err) = run_cli(
        &[
            "request",
            "svc/x",
            "hi",
            "--timeout",
            "1s",
            "--router",
            &addr,
        ],
        Duration::from_secs(30),
    );
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains("ACK to SUBSCRIBE") && !err.contains("no reply"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    fake.join().unwrap();
}
