//! Authentication and authorization across processes (docs/security.md): the real
//! `tickwire router` with an `[auth]` table whose hashes and tokens the real
//! `tickwire passwd` made, and the real CLI and client library logging in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::time::Duration;

use common::{new_token, run_cli, RouterProc};
use tickwire_client::{Client, ClientOptions, Error, Login, Wait};
use tickwire_wire::frame::{self, ErrorCode};
use tickwire_wire::gm::{QueueOp, Start};

const ALICE_PASSWORD: &str = "wonder land";
const LONG: Duration = Duration::from_secs(30);

/// A router that admits only these users (anonymous clients are refused):
/// - `alice` (password): group `md` (subscribe inside `md/>` but not `md/secret/>`),
///   publishes to `orders/alice/>` only, no admin;
/// - `ops` (token): admin, no other rule;
/// - `solo` (token): one connection at a time;
/// - `pricer` (token): subscribes inside `svc/>`, publishes nowhere, `allow_responses`;
/// - `clerk` (token): queues named `clerk-*` only, subscribes inside `clerk/>`;
/// - `asker` (token): publishes inside `svc/>`, subscribes inside `quotes/>`;
/// - `bob` (password, alice's): publishes inside `svc/>`, subscribes inside
///   `_reply/user/bob/>` only (its own replies);
/// - `teller` (token): publishes inside `svc/>`, subscribes inside
///   `_reply/user/teller/>`.
struct Fixture {
    router: RouterProc,
    log: common::RouterLog,
    ops_token: String,
    solo_token: String,
    pricer_token: String,
    clerk_token: String,
    asker_token: String,
    teller_token: String,
    _config: tempfile::NamedTempFile,
    alice_password_file: tempfile::NamedTempFile,
}

/// Hostile-input probe: the password file was read whole (a 300 MB first line was
/// taken as the password, /dev/zero read until memory ran out). Only its first line is
/// read, and at most 4 KiB of it; a longer one is refused.
#[test]
fn a_password_file_is_read_to_its_first_line_and_no_further() {
    // An empty one is a usage error (exit 2, as a bad flag value; it exited 1).
    let empty = tempfile::NamedTempFile::new().unwrap();
    let (st, _, err) = run_cli(
        &["passwd", "--password-file", empty.path().to_str().unwrap()],
        LONG,
    );
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("empty password"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("long");
    std::fs::write(&long, vec![b'a'; 5_000]).unwrap();
    for path in [long.to_str().unwrap(), "/dev/zero"] {
        let (st, out, err) = run_cli(&["passwd", "--password-file", path], LONG);
        assert!(!st.success(), "{path}: {out}");
        assert!(err.contains("more than 4 KiB"), "{path}: {err}");
    }
}

fn fixture() -> Fixture {
    fixture_with(&[])
}

/// The fixture's router with `extra` arguments.
fn fixture_with(extra: &[&str]) -> Fixture {
    let mut password_file = tempfile::NamedTempFile::new().unwrap();
    writeln!(password_file, "{ALICE_PASSWORD}").unwrap();
    let path = password_file.path().to_str().unwrap();
    let (st, hash_line, err) = run_cli(&["passwd", "--password-file", path], LONG);
    assert!(st.success(), "{err}");
    assert!(
        hash_line.starts_with("password_hash = \"$argon2id$"),
        "{hash_line}"
    );
    let (ops_token, ops_sha) = new_token();
    let (solo_token, solo_sha) = new_token();
    let (pricer_token, pricer_sha) = new_token();
    let (clerk_token, clerk_sha) = new_token();
    let (asker_token, asker_sha) = new_token();
    let (teller_token, teller_sha) = new_token();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    write!(
        config,
        r#"
[auth]
anonymous = "deny"

[auth.groups.md]
subscribe = {{ allow = ["md/>"], deny = ["md/secret/>"] }}

[[auth.users]]
name = "alice"
{hash_line}
groups = ["md"]
publish = {{ allow = ["orders/alice/>"] }}

[[auth.users]]
name = "ops"
token_sha256 = "{ops_sha}"
admin = true

[[auth.users]]
name = "solo"
token_sha256 = "{solo_sha}"
max_connections = 1

[[auth.users]]
name = "pricer"
token_sha256 = "{pricer_sha}"
subscribe = {{ allow = ["svc/>"] }}
publish = {{ allow = [] }}
allow_responses = true

[[auth.users]]
name = "clerk"
token_sha256 = "{clerk_sha}"
queues = {{ allow = ["clerk-*"] }}
subscribe = {{ allow = ["clerk/>"] }}

[[auth.users]]
name = "asker"
token_sha256 = "{asker_sha}"
publish = {{ allow = ["svc/>"] }}
subscribe = {{ allow = ["quotes/>"] }}

[[auth.users]]
name = "bob"
{hash_line}
publish = {{ allow = ["svc/>"] }}
subscribe = {{ allow = ["_reply/user/bob/>"] }}

[[auth.users]]
name = "teller"
token_sha256 = "{teller_sha}"
publish = {{ allow = ["svc/>"] }}
subscribe = {{ allow = ["_reply/user/teller/>"] }}
"#
    )
    .unwrap();
    let mut args = vec!["--config", config.path().to_str().unwrap()];
    args.extend(extra);
    let (router, log) = RouterProc::start_logged(&args);
    Fixture {
        router,
        log,
        ops_token,
        solo_token,
        pricer_token,
        clerk_token,
        asker_token,
        teller_token,
        _config: config,
        alice_password_file: password_file,
    }
}

impl Fixture {
    /// `tickwire ARGS --router ADDR` logged in as alice.
    fn alice_cli(&self, args: &[&str]) -> (std::process::ExitStatus, String, String) {
        let addr = self.router.addr_str();
        let password_file = self.alice_password_file.path().to_str().unwrap();
        let mut all = args.to_vec();
        all.extend(["--router", &addr, "--user", "alice"]);
        all.extend(["--password-file", password_file]);
        run_cli(&all, LONG)
    }

    /// Waits until a client of `user` holds one subscription (a responder ready).
    fn wait_subscribed(&self, user: &str) {
        let deadline = std::time::Instant::now() + LONG;
        while !self.stats()["clients"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["user"] == user && c["subscriptions"] == 1)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{user}'s responder never subscribed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `tickwire reply 'svc/>' --count 1` logged in as pricer (allow_responses, no
    /// publish right), subscribed when this returns.
    fn pricer_echo(&self) -> std::process::Child {
        let addr = self.router.addr_str();
        let child = std::process::Command::new(common::BIN)
            .args(["reply", "svc/>", "--count", "1", "--router", &addr])
            .args(["--token", &self.pricer_token])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        self.wait_subscribed("pricer");
        child
    }

    fn connect(&self, login: Login) -> Result<Client, Error> {
        let opts = ClientOptions {
            login: Some(login),
            ..ClientOptions::named("t")
        };
        Client::connect_with(self.router.addr, opts)
    }

    fn alice(&self) -> Client {
        self.connect(Login::Password {
            user: "alice".into(),
            password: ALICE_PASSWORD.into(),
        })
        .unwrap()
    }

    fn ops(&self) -> Client {
        self.connect(Login::Token(self.ops_token.clone())).unwrap()
    }

    fn stats(&self) -> serde_json::Value {
        let mut ops = self.ops();
        let doc = serde_json::from_str(&ops.stats_json().unwrap()).unwrap();
        ops.close().unwrap();
        doc
    }
}

fn is_closed_with(e: &Error, code: ErrorCode) -> bool {
    matches!(e, Error::Closed { code: c, .. } if *c == code)
}

#[test]
fn a_wrong_password_is_refused_counted_and_logged_without_the_secret() {
    let f = fixture();
    let wrong = "not-the-password-42";
    let e = f
        .connect(Login::Password {
            user: "alice".into(),
            password: wrong.into(),
        })
        .unwrap_err();
    assert!(is_closed_with(&e, ErrorCode::AUTH_FAILED), "{e}");
    assert!(
        e.to_string().contains("unknown user or wrong password"),
        "{e}"
    );
    // The CLI says the same and fails.
    let addr = f.router.addr_str();
    let mut wrong_file = tempfile::NamedTempFile::new().unwrap();
    writeln!(wrong_file, "{wrong}").unwrap();
    let path = wrong_file.path().to_str().unwrap();
    let (st, _, err) = run_cli(
        &[
            "stats",
            "--router",
            &addr,
            "--user",
            "alice",
            "--password-file",
            path,
        ],
        LONG,
    );
    assert!(!st.success());
    assert!(err.contains("auth-failed"), "{err}");
    // Counted, and logged with the user, never the secret.
    assert_eq!(
        common::u_at(&f.stats(), &["router", "totals", "auth_failures"]),
        2
    );
    let line = f
        .log
        .wait_for(&["login refused", "alice"], LONG)
        .expect("the refusal is logged");
    assert!(!f.log.text().contains(wrong), "{line}");
    // The right password works, from the CLI too.
    let (_, _, err) = f.alice_cli(&["stats"]);
    assert!(!err.contains("auth-failed"), "{err}");
}

#[test]
fn anonymous_clients_and_unknown_tokens_are_refused_where_anonymous_is_denied() {
    let f = fixture();
    let addr = f.router.addr_str();
    let (st, _, err) = run_cli(&["stats", "--router", &addr], LONG);
    assert!(!st.success());
    assert!(err.contains("authentication required"), "{err}");
    // The CLI says how to log in (new-user pass).
    assert!(
        err.contains("log in with --user NAME")
            && err.contains("--token TOKEN")
            && err.contains("a client certificate whose name the router maps to a user"),
        "{err}"
    );
    let e = f.connect(Login::Token("0".repeat(64))).unwrap_err();
    assert!(is_closed_with(&e, ErrorCode::AUTH_FAILED), "{e}");
}

#[test]
fn a_user_denied_gt_receives_nothing_outside_their_patterns() {
    let f = fixture();
    let mut alice = f.alice();
    // `>` and `md/>` (it overlaps md/secret/>) are refused; the connection stays.
    for pattern in [">", "md/>", "fx/>", "$share/g/>"] {
        match alice.subscribe(pattern) {
            Err(Error::Rejected { code, text }) => {
                assert_eq!(code, ErrorCode::PERMISSION_DENIED, "{pattern}: {text}")
            }
            other => panic!("{pattern}: {other:?}"),
        }
    }
    alice.subscribe("md/NASDAQ/>").unwrap();
    let mut ops = f.ops();
    ops.subscribe(">").unwrap();
    for topic in ["md/secret/x", "fx/EURUSD", "md/NYSE/IBM", "md/NASDAQ/AAPL"] {
        ops.publish(topic, topic.as_bytes()).unwrap();
    }
    ops.flush().unwrap();
    // ops (everything) sees all four, so all four were routed before alice's one.
    let mut seen = Vec::new();
    while seen.len() < 4 {
        if let Some(m) = ops.recv(Wait::Timeout(LONG)).unwrap() {
            seen.push(m.topic().to_owned());
        }
    }
    let m = alice
        .recv(Wait::Timeout(LONG))
        .unwrap()
        .expect("one message");
    assert_eq!(m.topic(), "md/NASDAQ/AAPL");
    assert!(alice
        .recv(Wait::Timeout(Duration::from_millis(300)))
        .unwrap()
        .is_none());
    // The CLI: `tickwire sub '>'` as alice fails with the reason.
    let (st, _, err) = f.alice_cli(&["sub", ">", "--no-reconnect", "--count", "1"]);
    assert!(!st.success());
    assert!(
        err.contains("permission-denied") && err.contains("not permitted to subscribe"),
        "{err}"
    );
    // The pattern is named once (new-user pass: `">": not permitted to subscribe to ">"`).
    assert_eq!(err.matches("\">\"").count(), 1, "{err}");
}

#[test]
fn stats_and_queue_listing_from_a_non_admin_are_refused() {
    let f = fixture();
    let addr = f.router.addr_str();
    let (st, _, err) = f.alice_cli(&["stats"]);
    assert!(!st.success());
    assert!(
        err.contains("permission-denied") && err.contains("admin only"),
        "{err}"
    );
    let (st, _, err) = f.alice_cli(&["queue", "list"]);
    assert!(!st.success());
    assert!(err.contains("permission-denied"), "{err}");
    // The admin sees the stats, with alice's user name and the refusals counted.
    let _alice = f.alice();
    let (st, out, err) = run_cli(
        &[
            "stats",
            "--router",
            &addr,
            "--token",
            &f.ops_token,
            "--print-json",
        ],
        LONG,
    );
    assert!(st.success(), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(doc["clients"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["user"] == "alice"));
    assert_eq!(common::u_at(&doc, &["router", "totals", "denied"]), 2);
}

#[test]
fn a_denied_publish_is_refused_and_harms_nothing_else() {
    let f = fixture();
    let mut ops = f.ops();
    ops.subscribe("orders/>").unwrap();
    // Direct: the CLI reports the refusal and fails.
    let (st, _, err) = f.alice_cli(&["pub", "orders/bob/1", "forged", "--no-reconnect"]);
    assert!(!st.success(), "{err}");
    assert!(
        err.contains("not permitted to publish to \"orders/bob/1\""),
        "{err}"
    );
    // New-user pass: the refusal was said twice, a summary line and then the error.
    let said = |err: &str| err.lines().filter(|l| l.contains("not permitted")).count();
    assert_eq!(said(&err), 1, "{err}");
    // Demanding-user pass: a paced load ran its whole schedule (10 s here) and
    // summed up "published 20000 messages ... 2000 msg/s" though the router refused
    // every one; it now stops within REFUSAL_CHECK_EVERY messages and says so.
    let started = std::time::Instant::now();
    let (st, _, err) = f.alice_cli(&[
        "pub",
        "orders/bob/3",
        "--count",
        "20000",
        "--rate",
        "2000",
        "--no-reconnect",
    ]);
    assert!(!st.success(), "{err}");
    assert!(
        err.contains("publishing to orders/bob/3 refused by the router (")
            && err.contains("not permitted to publish to \"orders/bob/3\"")
            && !err.contains("published 20000"),
        "{err}"
    );
    assert_eq!(said(&err), 1, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    // A few lines of standard input: all refused, so not "published" either (the end
    // of the input is confirmed by a round trip to the router).
    let mut pipe = std::process::Command::new(common::BIN)
        .args(["pub", "orders/bob/4", "--stdin", "--no-reconnect"])
        .args(["--router", &f.router.addr_str(), "--user", "alice"])
        .args([
            "--password-file",
            f.alice_password_file.path().to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    pipe.stdin.take().unwrap().write_all(b"one\ntwo\n").unwrap();
    let st = pipe.wait().unwrap();
    let (_, err) = common::take_output(&mut pipe);
    assert!(!st.success(), "{err}");
    assert!(
        err.contains(
            "publishing to orders/bob/4 refused by the router (2 messages written; it drops \
             every message to a topic it does not permit): router rejected the request: not \
             permitted to publish to \"orders/bob/4\""
        ),
        "{err}"
    );
    assert_eq!(said(&err), 1, "{err}");
    // Guaranteed: a PUB_NACK not-permitted (exit 3, the NACK status).
    let (st, _, err) = f.alice_cli(&["pub", "orders/bob/2", "forged", "--guaranteed"]);
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("not-permitted"), "{err}");
    // Allowed: delivered, and the subscriber never saw the forged ones.
    let (st, _, err) = f.alice_cli(&["pub", "orders/alice/1", "real", "--no-reconnect"]);
    assert!(st.success(), "{err}");
    let m = ops
        .recv(Wait::Timeout(LONG))
        .unwrap()
        .expect("the allowed publish");
    assert_eq!((m.topic(), m.payload()), ("orders/alice/1", &b"real"[..]));
    // New-user pass: the hint for a topic no queue takes names this router and login
    // (copied, it went to the default router), and, to a user under rules, whom to ask.
    let (st, _, err) = f.alice_cli(&["pub", "orders/alice/9", "x", "--guaranteed"]);
    assert_eq!(st.code(), Some(3), "{err}");
    let login = format!(
        " --router {} --user alice --password-file {}",
        f.router.addr_str(),
        f.alice_password_file.path().display()
    );
    assert!(
        err.contains(&format!(
            "`tickwire queue create orders --sub 'orders/>'{login}`"
        )) && !err.contains(&format!("`tickwire queue list{login}`"))
            && err.contains("if this user may not, ask an administrator"),
        "{err}"
    );
}

/// A responder allowed responses (and no publish right at all) answers the request
/// it is handed: `tickwire reply` logged in as `pricer`, a client as `ops` asking.
#[test]
fn a_responder_with_allow_responses_answers_without_publish_rights() {
    let f = fixture();
    let mut responder = f.pricer_echo();
    let mut ops = f.ops();
    let answer = ops.request("svc/time", b"now?", LONG).unwrap();
    assert_eq!(
        (answer.topic.starts_with("_reply/"), &answer.payload[..]),
        (true, &b"now?"[..])
    );
    let status = responder.wait().unwrap();
    let (_, err) = common::take_output(&mut responder);
    assert!(status.success(), "{err}");
    assert!(!err.contains("not permitted"), "{err}");
}

/// New-user pass: docs/security.md advises giving each user an inbox only it may read
/// (`_reply/<user>/>`), but the client's reply topics were `_reply/<client id>/...`,
/// so such a user could make no request at all. A password login's reply topics are
/// now under `_reply/user/<user>` (apart from the other clients' `_reply/<client id>`:
/// a user named `3` must not read client 3's replies); a token login (the client does
/// not know its user) sets the prefix (`--inbox-prefix`, `ClientOptions::inbox_prefix`).
#[test]
fn a_user_who_may_read_only_its_own_inbox_can_make_requests() {
    let f = fixture();
    let addr = f.router.addr_str();
    let password_file = f.alice_password_file.path().to_str().unwrap();
    let bob = [
        "--router",
        addr.as_str(),
        "--user",
        "bob",
        "--password-file",
        password_file,
    ];
    let teller = ["--router", addr.as_str(), "--token", &f.teller_token];
    let ask = |login: &[&str], extra: &[&str]| {
        let mut responder = f.pricer_echo();
        let mut args = vec!["request", "svc/x", "hello"];
        args.extend_from_slice(login);
        args.extend_from_slice(extra);
        let (st, out, err) = run_cli(&args, LONG);
        // The responder answers one request, or is stopped here.
        if !st.success() {
            let _ = responder.kill();
        }
        let _ = responder.wait();
        (st, out, err)
    };
    let (st, out, err) = ask(&bob, &[]);
    assert!(st.success(), "{err}");
    assert_eq!(out, "hello\n", "{err}");

    // A token login under the default prefix is refused by its rules, naming the
    // reply topic; with its prefix it works.
    let (st, _, err) = ask(&teller, &[]);
    assert!(!st.success(), "{err}");
    assert!(
        err.contains("not permitted to subscribe to \"_reply/"),
        "{err}"
    );
    // ...and says how to get a reply inbox the rules allow (new-user pass: it named an
    // internal topic and no way out).
    assert!(
        err.contains("the router refused the reply inbox") && err.contains("--inbox-prefix PREFIX"),
        "{err}"
    );
    let (st, out, err) = ask(&teller, &["--inbox-prefix", "_reply/user/teller"]);
    assert!(st.success(), "{err}");
    assert_eq!(out, "hello\n", "{err}");

    // The library's reply topic: under `_reply/user/bob`, never `_reply/<digits>`
    // where the other clients' inboxes are (a user named `3` read client 3's replies
    // when the user's inbox was `_reply/<user>`: review).
    let mut responder = f.pricer_echo();
    let mut bob_client = f
        .connect(Login::Password {
            user: "bob".into(),
            password: ALICE_PASSWORD.into(),
        })
        .unwrap();
    let answer = bob_client.request("svc/x", b"hi", LONG).unwrap();
    assert!(
        answer.topic.starts_with("_reply/user/bob/"),
        "{}",
        answer.topic
    );
    assert!(responder.wait().unwrap().success());

    // A prefix with a wildcard would subscribe to others' replies: refused.
    let (st, _, err) = run_cli(
        &["request", "svc/x", "hi", "--inbox-prefix", "_reply/*"],
        LONG,
    );
    assert_eq!(st.code(), Some(2), "{err}");
}

/// Hostile-input pass: a reply allowed by `allow_responses` was published to the reply
/// topic for every subscriber, so a requester that may only read a topic (asker:
/// subscribe `quotes/>`, publish `svc/>`) put its own payload there through the echo
/// responder, for everyone reading it: a publish right taken from a subscribe right.
/// Now such a reply goes to the requester alone.
#[test]
fn a_reply_allowed_by_allow_responses_reaches_the_requester_alone() {
    reply_under_a_grant_reaches_the_requester_alone("quotes/>", "quotes/IBM");
}

/// The same when the requester reads its inbox through a shared subscription, in a
/// group with the bystander whose turn it would be: the reply goes to the requester
/// (the group once picked the member whose turn it was, and the reply then went to nobody).
#[test]
fn a_reply_allowed_by_allow_responses_reaches_a_requester_in_a_shared_group() {
    reply_under_a_grant_reaches_the_requester_alone(
        "$share/desk/quotes/IBM",
        "$share/desk/quotes/IBM",
    );
}

/// The pricer's echo answers a request whose reply topic (`quotes/IBM`) the pricer may
/// not publish to; `bystander` (subscribed first) is a pattern of ops, `asker` the
/// requester's own: only the requester gets the answer.
fn reply_under_a_grant_reaches_the_requester_alone(bystander: &str, asker_pattern: &str) {
    let f = fixture();
    let mut responder = f.pricer_echo();
    // A bystander reading the topic.
    let mut ops = f.ops();
    ops.subscribe(bystander).unwrap();
    // The asker, raw: HELLO, AUTH, SUBSCRIBE its "inbox", a request naming it.
    let mut asker = common::Raw::connect(f.router.addr);
    let mut b = Vec::new();
    frame::encode_hello_caps(&mut b, frame::PROTOCOL_VERSION, frame::caps::AUTH, "asker");
    frame::encode_auth(
        &mut b,
        &frame::Auth {
            method: frame::AuthMethod::Token,
            user: "",
            secret: f.asker_token.as_bytes(),
        },
    )
    .unwrap();
    asker.send(&b);
    let welcome = asker.next(LONG);
    assert!(
        matches!(welcome, Ok(common::Got::Welcome { .. })),
        "{welcome:?}"
    );
    asker.subscribe(1, asker_pattern);
    assert!(matches!(asker.next(LONG), Ok(common::Got::Ack(1))));
    let mut b = Vec::new();
    frame::encode_publish_reply(
        &mut b,
        "svc/echo",
        b"IBM 1.00 (forged)",
        Default::default(),
        Some(frame::ReplyField {
            correlation: 7,
            to: b"quotes/IBM",
        }),
        u32::MAX,
    )
    .unwrap();
    asker.send(&b);
    // The answer reaches the asker...
    match asker.next(LONG) {
        Ok(common::Got::Message { topic, payload, .. }) => {
            assert_eq!(
                (topic.as_str(), &payload[..]),
                ("quotes/IBM", &b"IBM 1.00 (forged)"[..])
            );
        }
        other => panic!("expected the reply, got {other:?}"),
    }
    let status = responder.wait().unwrap();
    let (_, err) = common::take_output(&mut responder);
    assert!(status.success(), "{err}");
    // ...and nobody else reading quotes/>.
    let got = ops.recv(Wait::Timeout(Duration::from_millis(500))).unwrap();
    assert!(
        got.is_none(),
        "the bystander got {:?}",
        got.map(|m| m.into_owned())
    );
}

/// Demanding-user pass: a responder without the right to reply (alice: no
/// allow_responses, no publish right on `_reply/>`) died on its first request, its
/// service gone; the refusal is non-fatal and the command now goes on answering.
#[test]
fn a_responder_whose_answer_is_refused_warns_and_goes_on() {
    let f = fixture();
    let addr = f.router.addr_str();
    let password_file = f.alice_password_file.path().to_str().unwrap();
    let mut responder = std::process::Command::new(common::BIN)
        .args(["reply", "md/svc/>", "--count", "2", "--router", &addr])
        .args(["--user", "alice", "--password-file", password_file])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    f.wait_subscribed("alice");
    let mut ops = f.ops();
    for i in 0..2 {
        // No answer reaches the requester: it times out.
        let e = ops
            .request("md/svc/x", b"q", Duration::from_millis(700))
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "request {i}: {e}");
        if i == 0 {
            assert!(
                responder.try_wait().unwrap().is_none(),
                "the responder died on its first refused answer"
            );
        }
    }
    let status = responder.wait().unwrap();
    let (_, err) = common::take_output(&mut responder);
    assert!(status.success(), "{err}");
    assert_eq!(
        err.matches("answered a request on md/svc/x").count(),
        2,
        "{err}"
    );
    assert!(
        err.contains("warning: the router refused an answer") && err.contains("allow_responses"),
        "{err}"
    );
}

#[test]
fn one_user_at_its_connection_limit_locks_out_no_one_else() {
    let f = fixture();
    let solo = f.connect(Login::Token(f.solo_token.clone())).unwrap();
    let e = f.connect(Login::Token(f.solo_token.clone())).unwrap_err();
    assert!(is_closed_with(&e, ErrorCode::AUTH_FAILED), "{e}");
    assert!(e.to_string().contains("limit of 1 connections"), "{e}");
    // New-user pass: it began "authentication failed", read as a wrong token.
    assert!(e.to_string().contains("the credentials are right"), "{e}");
    let _alice = f.alice();
    solo.close().unwrap();
    // The slot is given back when the first connection ends.
    let deadline = std::time::Instant::now() + LONG;
    while f.connect(Login::Token(f.solo_token.clone())).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "solo never got back in"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        common::u_at(&f.stats(), &["router", "totals", "user_limit_refused"]),
        1
    );
}

#[test]
fn a_non_loopback_listener_requires_users_unless_opened() {
    // Refused before any socket is bound.
    let (st, _, err) = run_cli(
        &["router", "--listen", "0.0.0.0:0", "--no-guaranteed"],
        LONG,
    );
    assert!(!st.success());
    assert!(
        err.contains("non-loopback") && err.contains("--anonymous allow"),
        "{err}"
    );
    // The default loopback router still admits anonymous clients with every right.
    let r = RouterProc::start(&[]);
    let (st, out, err) = run_cli(&["stats", "--router", &r.addr_str()], LONG);
    assert!(st.success(), "{err}");
    assert!(out.contains("1 client,"), "{out}");
}

/// Basic credentials for an `Authorization` header.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {b64}")
}

#[test]
fn the_monitoring_endpoint_of_a_router_that_refuses_anonymous_clients_asks_for_an_admin() {
    let f = fixture_with(&["--http", "127.0.0.1:0"]);
    let http = f.router.http.expect("monitor address");
    // No login: 401 with a challenge a browser answers; /healthz stays open.
    let (status, head, _) = common::http_get(http, "/varz", &[]);
    assert_eq!(status, 401, "{head}");
    assert!(head.contains("WWW-Authenticate: Basic realm="), "{head}");
    assert_eq!(common::http_get(http, "/healthz", &[]).0, 200);
    // A wrong password, garbage, an unknown token: 401; a user who is not an admin: 403.
    let wrong = basic("alice", "not her password");
    let (status, _, body) = common::http_get(http, "/varz", &[&wrong]);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("authentication failed"), "{body}");
    let (status, _, body) = common::http_get(http, "/connz", &["Authorization: Basic !!!"]);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("malformed Basic"), "{body}");
    let bad_token = "Authorization: Bearer 0123456789abcdef";
    assert_eq!(common::http_get(http, "/varz", &[bad_token]).0, 401);
    let alice = basic("alice", ALICE_PASSWORD);
    let (status, _, body) = common::http_get(http, "/varz", &[&alice]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("admin = true"), "{body}");
    // The admin, by token: the documents; twice (the second from the remembered login).
    let ops = format!("Authorization: Bearer {}", f.ops_token);
    for _ in 0..2 {
        let (status, _, body) = common::http_get(http, "/varz", &[&ops]);
        assert_eq!(status, 200, "{body}");
        let varz: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(varz.is_object(), "{body}");
    }
    // Four refusals counted (the request without credentials is only challenged).
    let (status, _, metrics) = common::http_get(http, "/metrics", &[&ops]);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("tickwire_monitor_login_failures_total 4"),
        "{metrics}"
    );
    // Logged with the user, never the secret.
    let line = f
        .log
        .wait_for(&["monitoring: login failed", "alice"], LONG)
        .expect("a log line for the wrong password");
    assert!(!line.contains("not her password"), "{line}");
    assert!(!f.log.text().contains("not her password"));
    // The latency probe logs in as its own user (anonymous clients are refused here)
    // and measures: its round trips are counted within a few seconds.
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let (_, _, metrics) = common::http_get(http, "/metrics", &[&ops]);
        let count = metrics
            .lines()
            .find_map(|l| l.strip_prefix("tickwire_router_probe_round_trip_seconds_count "))
            .and_then(|n| n.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if count > 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the probe measured nothing: {metrics}\n{}",
            f.log.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !f.log.text().contains("latency probe off"),
        "{}",
        f.log.text()
    );
}

#[test]
fn http_auth_protects_an_endpoint_on_loopback_and_beyond_loopback_needs_a_login() {
    let (ops_token, ops_sha) = new_token();
    let mut users = tempfile::NamedTempFile::new().unwrap();
    write!(
        users,
        "[auth]\n[[auth.users]]\nname = \"ops\"\ntoken_sha256 = \"{ops_sha}\"\nadmin = true\n"
    )
    .unwrap();
    let file = users.path().to_str().unwrap();
    // An anonymous router, but its endpoint only for the file's admin.
    let r = RouterProc::start(&[
        "--no-guaranteed",
        "--http",
        "127.0.0.1:0",
        "--http-auth",
        file,
    ]);
    let http = r.http.expect("monitor address");
    assert_eq!(common::http_get(http, "/varz", &[]).0, 401);
    let ops = format!("Authorization: Bearer {ops_token}");
    assert_eq!(common::http_get(http, "/varz", &[&ops]).0, 200);
    drop(r);
    // Beyond loopback without a way to log in: refused at start, saying what to do.
    let (st, _, err) = run_cli(
        &[
            "router",
            "--listen",
            "127.0.0.1:0",
            "--no-guaranteed",
            "--http",
            "0.0.0.0:0",
        ],
        LONG,
    );
    assert!(!st.success());
    assert!(
        err.contains("--http-auth") && err.contains("--http-open"),
        "{err}"
    );
    // A file without an admin: refused at start too.
    let mut no_admin = tempfile::NamedTempFile::new().unwrap();
    write!(
        no_admin,
        "[auth]\n[[auth.users]]\nname = \"x\"\ntoken_sha256 = \"{ops_sha}\"\n"
    )
    .unwrap();
    let (st, _, err) = run_cli(
        &[
            "feed",
            "--http",
            "127.0.0.1:0",
            "--http-auth",
            no_admin.path().to_str().unwrap(),
        ],
        LONG,
    );
    assert!(!st.success());
    assert!(err.contains("no user with admin = true"), "{err}");
}

/// New-user pass: under the README's example rules (alice subscribes inside `md/>`, no
/// `queues` rule) alice bound an admin's queue of `orders/>` and took bob's order out of
/// it, though she may not subscribe there. Binding a queue now takes the subscribe
/// rights its subscriptions need, as creating one does; a queue with no subscriptions of
/// its own (a dead-letter target) takes a `queues` rule naming it.
#[test]
fn binding_a_queue_takes_the_subscribe_rights_of_its_subscriptions() {
    let spool = tempfile::tempdir().unwrap();
    let f = fixture_with(&["--data-dir", spool.path().to_str().unwrap()]);
    let mut ops = f.ops();
    for def in [
        r#"{"name":"critical-orders","subscriptions":["orders/>"]}"#,
        r#"{"name":"md-ticks","subscriptions":["md/NASDAQ/>"]}"#,
        r#"{"name":"md-all","subscriptions":["md/>"]}"#,
        r#"{"name":"dead-orders","subscriptions":[]}"#,
    ] {
        ops.queue_request(QueueOp::Create, def).unwrap();
    }
    ops.open_publisher("ops-1", 0).unwrap();
    ops.publish_guaranteed_wait("orders/bob/new", b"bob buys 1000 AAPL")
        .unwrap();
    let mut alice = f.alice();
    for (queue, start) in [
        ("critical-orders", Start::Queue),
        ("critical-orders", Start::Beginning),
        // md/> overlaps her group's denied md/secret/>.
        ("md-all", Start::Queue),
        // No subscriptions of its own: a dead-letter target.
        ("dead-orders", Start::Queue),
    ] {
        match alice.bind(queue, 16, start) {
            Err(Error::Rejected { code, text }) => {
                assert_eq!(code, ErrorCode::PERMISSION_DENIED, "{queue}: {text}");
                assert!(text.contains(queue), "{queue}: {text}");
            }
            other => panic!("{queue}: expected a refusal, got {other:?}"),
        }
    }
    // A queue of what she may read is hers to bind; the order is still there for ops.
    alice.bind("md-ticks", 16, Start::Queue).unwrap();
    alice.ping().unwrap();
    assert_eq!(depth(&mut ops, "critical-orders"), 1);
    // Without subscribe rules nothing changes: ops binds all three.
    for queue in ["critical-orders", "md-all", "dead-orders"] {
        ops.bind(queue, 16, Start::Queue).unwrap();
    }
    // Review: a queue of her own patterns that takes dead letters holds any topic. She
    // may not make the router's dead-message queue, nor a queue another names as its
    // dead-letter queue, and one she made before it was named is no longer hers to bind.
    ops.queue_request(
        QueueOp::Create,
        r#"{"name":"desk","subscriptions":["orders/>"],"dead_letter_queue":"desk-dlq"}"#,
    )
    .unwrap();
    alice
        .queue_request(
            QueueOp::Create,
            r#"{"name":"early-dlq","subscriptions":["md/NASDAQ/>"]}"#,
        )
        .unwrap();
    ops.queue_request(
        QueueOp::Create,
        r#"{"name":"desk2","subscriptions":["orders/>"],"dead_letter_queue":"early-dlq"}"#,
    )
    .unwrap();
    // Nor, in advance, a queue with no subscriptions of its own, which is one (a
    // hostile-input pass: such a create passed, under a name an admin then named).
    for def in [
        r##"{"name":"#DEAD_MSG_QUEUE","subscriptions":["md/NASDAQ/>"]}"##,
        r#"{"name":"desk-dlq","subscriptions":["md/NASDAQ/>"]}"#,
        r#"{"name":"later-dlq","subscriptions":[]}"#,
        r#"{"name":"later-dlq2"}"#,
    ] {
        let name = def.split('"').nth(3).unwrap();
        match alice.queue_request(QueueOp::Create, def) {
            Err(Error::Rejected { code, text }) => {
                assert_eq!(code, ErrorCode::PERMISSION_DENIED, "{name}: {text}");
                assert!(text.contains("dead-lettered"), "{name}: {text}");
            }
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    match alice.bind("early-dlq", 16, Start::Queue) {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::PERMISSION_DENIED, "{text}");
        }
        other => panic!("early-dlq: expected a refusal, got {other:?}"),
    }
    // Review: bound first, then named as a dead-letter queue, a queue of her own
    // patterns would hand her every dead letter. Naming it is refused while she is
    // bound; once she is gone it is not.
    alice
        .queue_request(
            QueueOp::Create,
            r#"{"name":"sneaky-dlq","subscriptions":["md/NASDAQ/>"]}"#,
        )
        .unwrap();
    alice.bind("sneaky-dlq", 16, Start::Queue).unwrap();
    alice.ping().unwrap();
    let desk3 = r#"{"name":"desk3","subscriptions":["orders/>"],"dead_letter_queue":"sneaky-dlq"}"#;
    match ops.queue_request(QueueOp::Create, desk3) {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::PERMISSION_DENIED, "{text}");
            assert!(
                text.contains("is bound by a consumer that may not read dead letters"),
                "{text}"
            );
        }
        other => panic!("desk3: expected a refusal, got {other:?}"),
    }
    drop(alice);
    let deadline = std::time::Instant::now() + LONG;
    loop {
        match ops.queue_request(QueueOp::Create, desk3) {
            Ok(_) => break,
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// New-user pass: a config with users on the default loopback address restricted
/// nothing (anonymous clients keep every right there) and nothing said so. The log now
/// warns; a router that refuses anonymous clients, or restricts them, does not.
#[test]
fn users_beside_unrestricted_anonymous_clients_are_warned_about() {
    let (_, sha) = new_token();
    for (auth, warns) in [
        ("", true),
        ("anonymous = \"deny\"\n", false),
        ("anonymous_rules = { admin = false }\n", false),
    ] {
        let mut config = tempfile::NamedTempFile::new().unwrap();
        write!(
            config,
            "[auth]\n{auth}[[auth.users]]\nname = \"ops\"\ntoken_sha256 = \"{sha}\"\n"
        )
        .unwrap();
        let (router, log) =
            RouterProc::start_logged(&["--config", config.path().to_str().unwrap()]);
        // The warning comes between the authentication line and the settings line:
        // wait for the latter (the log is read by a thread of its own, so the
        // authentication line alone could be in while the warning was not yet: a CI
        // run failed so).
        log.wait_for(&["egress_memory_limit="], LONG)
            .expect("the settings line");
        let text = log.text();
        assert!(text.contains("authentication"), "{text}");
        assert_eq!(
            text.contains("clients that do not log in are admitted here with every right"),
            warns,
            "{auth:?}: {text}"
        );
        drop(router);
    }
}

/// Hostile-input pass: `anonymous_rules` that limit topics but leave out `queues` let
/// anonymous clients show, purge and delete an admin's queues ("no rule" is
/// everything), and nothing said so. The log now warns.
#[test]
fn anonymous_rules_without_a_queues_rule_are_warned_about() {
    for (rules, warns) in [
        (
            "anonymous_rules = { subscribe = { allow = [\"public/>\"] } }\n",
            true,
        ),
        (
            "anonymous_rules = { subscribe = { allow = [\"public/>\"] }, queues = { allow = [] } }\n",
            false,
        ),
    ] {
        let spool = tempfile::tempdir().unwrap();
        let mut config = tempfile::NamedTempFile::new().unwrap();
        write!(config, "[auth]\n{rules}").unwrap();
        let (router, log) = RouterProc::start_logged(&[
            "--config",
            config.path().to_str().unwrap(),
            "--data-dir",
            spool.path().to_str().unwrap(),
        ]);
        log.wait_for(&["egress_memory_limit="], LONG)
            .expect("the settings line");
        let text = log.text();
        assert_eq!(
            text.contains("anonymous_rules has no queues rule"),
            warns,
            "{rules:?}: {text}"
        );
        drop(router);
    }
}

/// Queue `name`'s depth, as `queue show` counts it (asked by `c`, an admin).
fn depth(c: &mut Client, name: &str) -> u64 {
    let show: serde_json::Value =
        serde_json::from_str(&c.queue_request(QueueOp::Show, name).unwrap()).unwrap();
    show["depth"].as_u64().expect("depth")
}

/// Hostile-input probe: any user could PUB_OPEN another user's publisher identity,
/// which disconnected its publisher (TAKEN_OVER) and let the intruder's sequence
/// numbers stand for it — the victim's resend of a number the intruder had used was
/// acknowledged as a duplicate and stored nowhere. Identities are now per user: the same
/// name opened by another user is another identity.
#[test]
fn regression_a_user_cannot_take_over_or_resend_as_another_users_publisher() {
    let spool = tempfile::tempdir().unwrap();
    let f = fixture_with(&["--data-dir", spool.path().to_str().unwrap()]);
    let mut ops = f.ops();
    ops.queue_request(
        QueueOp::Create,
        r#"{"name":"desk","subscriptions":["orders/>"]}"#,
    )
    .unwrap();
    let mut alice = f.alice();
    assert_eq!(alice.open_publisher("desk-1", 0).unwrap().last_seq, 0);
    let acked = |o: tickwire_client::Outcome| matches!(o, tickwire_client::Outcome::Acked);
    assert!(acked(
        alice
            .publish_guaranteed_wait("orders/alice/1", b"a1")
            .unwrap()
    ));
    // ops opens the same name: its own identity, numbered from 0; alice keeps hers.
    let mut intruder = f.ops();
    assert_eq!(intruder.open_publisher("desk-1", 0).unwrap().last_seq, 0);
    assert!(acked(
        intruder
            .publish_guaranteed_wait("orders/ops/1", b"o1")
            .unwrap()
    ));
    assert!(acked(
        alice
            .publish_guaranteed_wait("orders/alice/2", b"a2")
            .unwrap()
    ));
    // Every acknowledged publish is stored: alice's two, the intruder's one.
    assert_eq!(depth(&mut ops, "desk"), 3);
    // Alice's connection was never taken over: it still works.
    alice.ping().unwrap();
    // Her identity is hers across connections: a new one continues her numbering.
    alice.close().unwrap();
    let mut again = f.alice();
    assert_eq!(again.open_publisher("desk-1", 0).unwrap().last_seq, 2);
    // An identity holding a control character is refused, and the connection goes on.
    match again.open_publisher("desk\u{1f}1", 0) {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::INVALID_REQUEST, "{text}");
            assert!(text.contains("control character"), "{text}");
            // Escaped once (hostile-input pass: it read "desk\\u{1f}1").
            assert!(
                text.contains(r#""desk\u{1f}1": its character 5 (counting from 1)"#),
                "{text}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    again.ping().unwrap();
}

/// Hostile-input probe: a queue's `dead_letter_queue` was not checked against the
/// creator's `queues` rules, so a user could write into (or create, or turn into a
/// dead-message queue) a queue it may not use.
#[test]
fn regression_a_dead_letter_queue_must_be_one_the_creator_may_use() {
    let spool = tempfile::tempdir().unwrap();
    let f = fixture_with(&["--data-dir", spool.path().to_str().unwrap()]);
    let create = |c: &mut Client, def: &str| c.queue_request(QueueOp::Create, def);
    let mut clerk = f.connect(Login::Token(f.clerk_token.clone())).unwrap();
    match create(
        &mut clerk,
        r#"{"name":"clerk-q","subscriptions":["clerk/>"],"dead_letter_queue":"payroll"}"#,
    ) {
        Err(Error::Rejected { code, text }) => {
            assert_eq!(code, ErrorCode::PERMISSION_DENIED, "{text}");
            assert!(
                text.contains("dead_letter_queue") && text.contains("payroll"),
                "{text}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Its own dead-letter queue, or the router's, is fine.
    create(
        &mut clerk,
        r#"{"name":"clerk-q","subscriptions":["clerk/>"],"dead_letter_queue":"clerk-dlq"}"#,
    )
    .unwrap();
    create(
        &mut clerk,
        r##"{"name":"clerk-q2","subscriptions":["clerk/>"],"dead_letter_queue":"#DEAD_MSG_QUEUE"}"##,
    )
    .unwrap();
    // payroll was never created.
    let mut ops = f.ops();
    assert!(ops.queue_request(QueueOp::Show, "payroll").is_err());
}

/// New-user pass: the login hint offered a password prompt that only `passwd` gave.
/// At a terminal (`script` runs the command on one) `--user` without a password file
/// or TICKWIRE_PASSWORD asks for it, with the echo off, and logs in; with no terminal
/// it fails saying what it needs.
#[test]
fn a_user_without_a_password_is_asked_for_it_at_a_terminal() {
    use std::process::{Command, Stdio};
    let test = "a_user_without_a_password_is_asked_for_it_at_a_terminal";
    let f = fixture();
    let addr = f.router.addr_str();
    let args = [
        "pub",
        "orders/alice/typed",
        "hi",
        "--router",
        &addr,
        "--user",
        "alice",
    ];
    let Some(mut term) = common::OnTerminal::start(test, &args) else {
        return;
    };
    term.wait_for("password for alice (not shown): ", LONG);
    term.type_line(ALICE_PASSWORD);
    let (status, out) = term.finish(LONG);
    assert!(status.success(), "logged in and published: {status}: {out}");
    assert!(
        !out.contains(ALICE_PASSWORD),
        "the password was echoed: {out}"
    );
    // No terminal, or an empty TICKWIRE_PASSWORD (as an empty TICKWIRE_TOKEN is no
    // token): refused with what it needs, before connecting.
    for password in [None, Some("")] {
        let mut cmd = Command::new(common::BIN);
        cmd.args(["stats", "--router", &addr, "--user", "alice"])
            .env_remove("TICKWIRE_PASSWORD")
            .env_remove("TICKWIRE_TOKEN")
            .stdin(Stdio::null());
        if let Some(p) = password {
            cmd.env("TICKWIRE_PASSWORD", p);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{password:?}: {err}");
        assert!(
            err.contains("a terminal to type it at"),
            "{password:?}: {err}"
        );
    }
}
