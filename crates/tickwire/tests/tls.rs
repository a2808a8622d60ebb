//! TLS on router connections across processes (docs/security.md, "TLS"): the real
//! `tickwire router` with a TLS listener next to its plaintext one, certificates made at
//! test time with rcgen, and the real CLI and client library connecting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{run_cli, RouterProc};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tickwire_client::tls::{client_config, ClientFiles};
use tickwire_client::{Client, ClientOptions, Error, TlsOptions, Wait};

const LONG: Duration = Duration::from_secs(30);

/// A certificate authority made for one test, and the files it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    dir: PathBuf,
    name: &'static str,
}

impl Ca {
    fn new(dir: &Path, name: &'static str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), cert.pem()).unwrap();
        Ca {
            cert,
            key,
            dir: dir.to_owned(),
            name,
        }
    }

    fn pem(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A certificate with common name `cn` and these alternative names, signed by this
    /// CA: (certificate file, key file).
    fn issue(&self, cn: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let stem = format!("{}-{cn}", self.name);
        let (c, k) = (
            self.dir.join(format!("{stem}.pem")),
            self.dir.join(format!("{stem}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A router with a TLS listener whose certificate `ca` signed for `localhost` and
/// 127.0.0.1; `extra` flags follow.
fn tls_router(ca: &Ca, extra: &[&str]) -> (RouterProc, common::RouterLog) {
    let (cert, key) = ca.issue("router", &["localhost", "127.0.0.1"]);
    let mut args = vec![
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
    ];
    args.extend_from_slice(extra);
    let (r, log) = RouterProc::start_logged(&args);
    assert!(r.tls.is_some(), "the banner names the TLS listener");
    (r, log)
}

fn tls_url(r: &RouterProc) -> String {
    format!("tls://{}", r.tls.unwrap())
}

/// Client options trusting `ca`, optionally presenting a certificate.
fn tls_opts(name: &str, ca: &Path, cert: Option<(&Path, &Path)>) -> ClientOptions {
    let files = ClientFiles {
        ca: Some(ca.to_owned()),
        cert: cert.map(|c| c.0.to_owned()),
        key: cert.map(|c| c.1.to_owned()),
    };
    ClientOptions {
        tls: Some(TlsOptions {
            config: client_config(&files).unwrap(),
            server_name: None,
        }),
        ..ClientOptions::named(name)
    }
}

/// The payloads `c` receives within `within` (at most `n`).
fn receive(c: &mut Client, n: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        if let Some(m) = c.recv(Wait::Timeout(Duration::from_millis(100))).unwrap() {
            got.push(format!(
                "{} {}",
                m.topic(),
                String::from_utf8_lossy(m.payload())
            ));
        }
    }
    got
}

#[test]
fn tls_and_plaintext_clients_on_one_router_see_the_same_messages() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let (r, _log) = tls_router(&ca, &["--no-guaranteed"]);
    let url = tls_url(&r);

    let mut tls_sub = Client::connect_to(&url, tls_opts("tls-sub", &ca.pem(), None)).unwrap();
    tls_sub.subscribe("x/>").unwrap();
    let mut plain_sub = Client::connect(r.addr).unwrap();
    plain_sub.subscribe("x/>").unwrap();

    // The CLI publishes once over each listener (a tls:// address and --ca).
    let (st, _, err) = run_cli(
        &[
            "pub",
            "x/tls",
            "over-tls",
            "--router",
            &url,
            "--ca",
            s(&ca.pem()),
        ],
        LONG,
    );
    assert!(st.success(), "{err}");
    let (st, _, err) = run_cli(
        &["pub", "x/plain", "in-the-clear", "--router", &r.addr_str()],
        LONG,
    );
    assert!(st.success(), "{err}");
    // --tls with a plain address is TLS too; --server-name names the certificate.
    let (st, _, err) = run_cli(
        &[
            "pub",
            "x/tls2",
            "by-name",
            "--router",
            &r.tls.unwrap().to_string(),
            "--tls",
            "--ca",
            s(&ca.pem()),
            "--server-name",
            "localhost",
        ],
        LONG,
    );
    assert!(st.success(), "{err}");

    let want = ["x/tls over-tls", "x/plain in-the-clear", "x/tls2 by-name"];
    for (who, c) in [("TLS", &mut tls_sub), ("plaintext", &mut plain_sub)] {
        let got = receive(c, 3, LONG);
        assert_eq!(got, want, "the {who} subscriber");
    }

    // A larger stream over TLS arrives whole and in order (many records per read).
    let mut tls_pub = Client::connect_to(&url, tls_opts("tls-pub", &ca.pem(), None)).unwrap();
    let payload = vec![b'p'; 3000];
    for _ in 0..2000 {
        tls_pub.publish("x/bulk", &payload).unwrap();
    }
    tls_pub.flush().unwrap();
    for c in [&mut tls_sub, &mut plain_sub] {
        let got = receive(c, 2000, LONG);
        assert_eq!(got.len(), 2000);
        assert!(got.iter().all(|m| m.len() == "x/bulk ".len() + 3000));
    }
    // The TLS subscriber reads stats over TLS (anonymous on loopback: admin).
    let stats = tls_sub.stats_json().unwrap();
    assert!(stats.contains("\"tls-sub\""), "{stats}");
}

#[test]
fn an_untrusted_or_misnamed_router_certificate_is_refused_by_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let other = Ca::new(dir.path(), "other");
    let (r, _log) = tls_router(&ca, &["--no-guaranteed"]);
    let url = tls_url(&r);

    let e = Client::connect_to(&url, tls_opts("t", &other.pem(), None)).unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e}");
    assert!(e.to_string().contains("not signed by a trusted CA"), "{e}");

    let (st, _, err) = run_cli(
        &[
            "sub",
            "x/>",
            "--router",
            &url,
            "--ca",
            s(&ca.pem()),
            "--server-name",
            "elsewhere.example",
            "--no-reconnect",
        ],
        LONG,
    );
    assert!(!st.success());
    assert!(
        err.contains("not valid for the server name") && err.contains("elsewhere.example"),
        "{err}"
    );

    // Nothing listening: the refusal names the tls:// scheme (new-user pass: it
    // dropped it).
    let port = common::free_port();
    let (st, _, err) = run_cli(
        &[
            "stats",
            "--router",
            &format!("tls://127.0.0.1:{port}"),
            "--ca",
            s(&ca.pem()),
        ],
        LONG,
    );
    assert!(!st.success());
    assert!(
        err.contains(&format!(
            "cannot connect to router at tls://127.0.0.1:{port}: connection refused"
        )),
        "{err}"
    );

    // A tls:// address without a CA, and a CA file that is not PEM: named errors.
    let (st, _, err) = run_cli(&["stats", "--router", &url], LONG);
    assert!(!st.success());
    assert!(err.contains("--ca FILE"), "{err}");
    let bogus = dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate").unwrap();
    let (st, _, err) = run_cli(&["stats", "--router", &url, "--ca", s(&bogus)], LONG);
    assert!(!st.success());
    assert!(err.contains("bogus.pem") && err.contains("no PEM"), "{err}");

    // Regression (new-user pass): a plaintext client pointed at the TLS port got only
    // "closed the socket without a CLOSE frame ... during the handshake".
    let plain = r.tls.unwrap().to_string();
    let (st, _, err) = run_cli(&["stats", "--router", &plain], LONG);
    assert!(!st.success());
    assert!(
        err.contains("during the handshake") || err.contains("undecodable frame"),
        "{err}"
    );
    assert!(
        err.contains("connect with tls://HOST:PORT and --ca FILE"),
        "{err}"
    );
}

#[test]
fn client_certificates_are_verified_and_name_users_with_their_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let clients = Ca::new(dir.path(), "clients");
    let rogue = Ca::new(dir.path(), "rogue");
    let config = dir.path().join("router.toml");
    std::fs::write(
        &config,
        r#"
[router]
tls_client_auth = "required"

[[auth.users]]
name = "feed"
cert_name = "feed-svc"
subscribe = { allow = ["md/>"] }
publish = { allow = ["md/>"] }
"#,
    )
    .unwrap();
    let (r, log) = tls_router(
        &ca,
        &[
            "--no-guaranteed",
            "--config",
            s(&config),
            "--tls-client-ca",
            s(&clients.pem()),
        ],
    );
    let url = tls_url(&r);

    // No certificate, or one from a CA the router does not trust: refused in the
    // handshake, logged, and nobody else is affected.
    let e = Client::connect_to(&url, tls_opts("no-cert", &ca.pem(), None)).unwrap_err();
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    let (rc, rk) = rogue.issue("feed-svc", &[]);
    let e = Client::connect_to(&url, tls_opts("rogue", &ca.pem(), Some((&rc, &rk)))).unwrap_err();
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    assert!(
        log.wait_for(&["TLS connection failed"], LONG).is_some(),
        "{}",
        log.text()
    );

    // The certificate whose CN is feed's cert_name logs in as feed, without AUTH.
    let (fc, fk) = clients.issue("feed-svc", &[]);
    let mut feed =
        Client::connect_to(&url, tls_opts("feed-tls", &ca.pem(), Some((&fc, &fk)))).unwrap();
    assert!(
        log.wait_for(
            &["TLS client certificate identifies the user", "feed"],
            LONG
        )
        .is_some(),
        "{}",
        log.text()
    );
    // A certificate that names no user, with many names: its log line shows the first
    // 8 and counts the rest (it held all of them: a 36 KB line per connection from a
    // certificate with 2,000 names, hostile-input pass).
    let many: Vec<String> = (0..40).map(|i| format!("host-{i}.example")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (mc, mk) = clients.issue("nobody-svc", &many);
    let _nobody = Client::connect_to(&url, tls_opts("many-names", &ca.pem(), Some((&mc, &mk))));
    let line = log
        .wait_for(&["TLS client certificate names no user"], LONG)
        .unwrap_or_else(|| panic!("{}", log.text()));
    assert!(
        line.contains("more_names=33")
            && line.contains("host-6.example")
            && !line.contains("host-7.example"),
        "{line}"
    );
    let e = feed.subscribe(">").unwrap_err();
    assert!(matches!(e, Error::Rejected { .. }), "{e}");
    feed.subscribe("md/>").unwrap();
    // Not an admin: STATS is refused, the connection stays.
    assert!(matches!(feed.stats_json(), Err(Error::Rejected { .. })));

    // Anonymous on the loopback plaintext listener publishes inside and outside md/>.
    let mut anon = Client::connect(r.addr).unwrap();
    anon.publish("orders/1", b"outside").unwrap();
    anon.publish("md/a", b"inside").unwrap();
    anon.publish("secret/x", b"outside").unwrap();
    anon.flush().unwrap();
    let got = receive(&mut feed, 3, Duration::from_secs(3));
    assert_eq!(got, ["md/a inside"]);

    // The same user's certificate through the CLI (--cert/--key): publishing outside
    // its patterns is refused, inside works.
    let ca_pem = ca.pem();
    let common_args = [
        "--router",
        url.as_str(),
        "--ca",
        s(&ca_pem),
        "--cert",
        s(&fc),
        "--key",
        s(&fk),
        "--no-reconnect",
    ];
    let mut args = vec!["pub", "md/b", "from-cli"];
    args.extend_from_slice(&common_args);
    let (st, _, err) = run_cli(&args, LONG);
    assert!(st.success(), "{err}");
    assert_eq!(receive(&mut feed, 1, LONG), ["md/b from-cli"]);
}

/// Waits up to `within` for the router to end a raw connection: true at EOF or reset.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn garbage_or_a_stalled_handshake_disconnects_only_that_client() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let (r, log) = tls_router(&ca, &["--no-guaranteed", "--handshake-timeout", "1s"]);
    let url = tls_url(&r);
    let mut sub = Client::connect_to(&url, tls_opts("sub", &ca.pem(), None)).unwrap();
    sub.subscribe("x/>").unwrap();

    // Not TLS at all: an HTTP request, then a stream of junk.
    let mut junk = TcpStream::connect(r.tls.unwrap()).unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let _ = junk.write_all(&[0xAB; 64 * 1024]);
    assert!(
        closed_within(&mut junk, LONG),
        "a non-TLS peer is disconnected"
    );
    assert!(
        log.wait_for(&["TLS connection failed", "does not speak TLS"], LONG)
            .is_some(),
        "{}",
        log.text()
    );

    // A tickwire HELLO in the clear on the TLS port: the same.
    let mut hello = TcpStream::connect(r.tls.unwrap()).unwrap();
    let mut b = Vec::new();
    tickwire_wire::frame::encode_hello(&mut b, tickwire_wire::frame::PROTOCOL_VERSION, "clear");
    hello.write_all(&b).unwrap();
    assert!(
        closed_within(&mut hello, LONG),
        "no WELCOME in the clear on the TLS port"
    );

    // A handshake that starts (a record header) and never finishes: dropped at the
    // handshake deadline.
    let mut stalled = TcpStream::connect(r.tls.unwrap()).unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    assert!(
        closed_within(&mut stalled, LONG),
        "a stalled handshake is dropped"
    );
    assert!(
        log.wait_for(&["no HELLO within the handshake timeout"], LONG)
            .is_some(),
        "{}",
        log.text()
    );

    // The TLS subscriber never noticed.
    let mut p = Client::connect(r.addr).unwrap();
    p.publish("x/after", b"still here").unwrap();
    p.flush().unwrap();
    assert_eq!(receive(&mut sub, 1, LONG), ["x/after still here"]);
}

/// The feed handler publishes into a router that admits only logged-in clients, over
/// TLS with a token (issue 20: the commands that connect to a router share the login
/// and TLS flags); without the token it is refused with the router's reason.
#[test]
fn the_feed_handler_publishes_over_tls_with_a_token_login() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let (feed_token, feed_sha) = common::new_token();
    let (reader_token, reader_sha) = common::new_token();
    let config = dir.path().join("router.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[auth]
anonymous = "deny"

[[auth.users]]
name = "feed"
token_sha256 = "{feed_sha}"
publish = {{ allow = ["md/>"] }}

[[auth.users]]
name = "reader"
token_sha256 = "{reader_sha}"
subscribe = {{ allow = ["md/>"] }}
"#
        ),
    )
    .unwrap();
    let (r, log) = tls_router(&ca, &["--no-guaranteed", "--config", s(&config)]);
    let url = tls_url(&r);
    let mut reader = Client::connect_to(
        &url,
        ClientOptions {
            login: Some(tickwire_client::Login::Token(reader_token)),
            ..tls_opts("reader", &ca.pem(), None)
        },
    )
    .unwrap();
    reader.subscribe("md/>").unwrap();

    let session = common::md_session("feed-tls.itch", "20", 5, 2_000);
    let port = common::free_udp_port_pair();
    let group = format!("239.255.44.{}:{port}", 1 + port % 200);
    let feed_args = |token: &str| {
        let mut a = vec![
            "feed".to_owned(),
            "--group".into(),
            group.clone(),
            "--router".into(),
            url.clone(),
            "--ca".into(),
            s(&ca.pem()).into(),
            "--idle".into(),
            "block".into(),
            "--quiet".into(),
        ];
        if !token.is_empty() {
            a.extend(["--token".into(), token.to_owned()]);
        }
        a
    };

    // Without a login: refused at once, and the error says why.
    let args = feed_args("");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (st, out, err) = run_cli(&args, LONG);
    assert!(!st.success(), "a feed without a login ran: {out}{err}");
    assert!(err.contains("connecting to the router"), "{err}");

    // With the token: every message of the session published over TLS.
    let args = feed_args(&feed_token);
    let mut feed = common::cli(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Logged in, so joined: the feed joins its group before it connects (a 300 ms
    // sleep could end before a loaded machine had it joined, and the session's data
    // went by unheard).
    if log
        .wait_for(&["client connected", "user=\"feed\""], LONG)
        .is_none()
    {
        panic!("the feed handler did not log in:\n{}", log.text());
    }
    let (st, out, err) = common::md_publish(&session, &group, &[]);
    assert!(st.success(), "md publish: {out}{err}");
    let st = common::wait_child(&mut feed, LONG, "the feed handler");
    let mut fout = String::new();
    feed.stdout
        .take()
        .unwrap()
        .read_to_string(&mut fout)
        .unwrap();
    let mut ferr = String::new();
    feed.stderr
        .take()
        .unwrap()
        .read_to_string(&mut ferr)
        .unwrap();
    assert!(st.success(), "feed: {fout}{ferr}");
    let published: u64 = fout
        .split(" · ")
        .find_map(|p| p.trim().strip_prefix("published "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no published count in {fout}"));
    assert!(published > 0, "{fout}");
    assert!(fout.contains("lost 0"), "{fout}");
    let got = receive(&mut reader, published as usize, LONG);
    assert_eq!(got.len() as u64, published, "the reader saw {got:?}");
    assert!(got.iter().all(|m| m.starts_with("md/")), "{got:?}");
}

/// Plaintext on 127.0.0.1 and TLS on every address: the `loopback` policy refuses
/// anonymous clients on both listeners, and the monitoring endpoint (on loopback) asks
/// for a login too; the latency probe logs in as its own user instead of being refused
/// as an anonymous client every second. Before, the endpoint and the probe judged by
/// the plaintext listener alone: the endpoint was open to anonymous requests and the
/// probe was refused (a `login refused` line and an auth failure) once a second.
#[test]
fn a_tls_listener_off_loopback_closes_the_monitoring_endpoint_to_anonymous_requests() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let (cert, key) = ca.issue("router", &["localhost", "127.0.0.1"]);
    let config = dir.path().join("router.toml");
    std::fs::write(
        &config,
        "[[auth.users]]\nname = \"ops\"\ncert_name = \"ops-svc\"\nadmin = true\n",
    )
    .unwrap();
    let (r, log) = RouterProc::start_logged(&[
        "--no-guaranteed",
        "--config",
        s(&config),
        "--tls-listen",
        "0.0.0.0:0",
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
        "--tls-client-ca",
        s(&ca.pem()),
        "--http",
        "127.0.0.1:0",
        "--probe-ms",
        "5",
    ]);
    let http = r.http.expect("the monitoring endpoint's address");
    let (status, head, _) = common::http_get(http, "/varz", &[]);
    assert_eq!(status, 401, "an anonymous request is refused: {head}");
    assert_eq!(common::http_get(http, "/healthz", &[]).0, 200);
    // An anonymous client on the plaintext (loopback) listener is refused as well.
    match Client::connect(r.addr) {
        Err(e) => assert!(e.to_string().contains("log"), "{e}"),
        Ok(mut c) => {
            let e = c
                .subscribe("x")
                .expect_err("an anonymous client is refused");
            assert!(e.to_string().contains("log"), "{e}");
        }
    }
    // The probe has had ~10 tries (it reconnects every second when refused): it
    // logged in, so the only refusal logged is the anonymous client's above.
    std::thread::sleep(Duration::from_millis(2500));
    let refusals = log.count(&["login refused"]);
    assert!(
        refusals <= 1,
        "{refusals} login refusals: the probe was refused"
    );
}

/// A flood of new TLS connections from one address made the router thread pay a
/// handshake each (~830 a second took ~77% of its CPU in a probe). Beyond
/// `--tls-handshake-rate` a second from one source, a connection is closed at accept,
/// before any TLS work, and counted; the others (and later connections) are served.
#[test]
fn new_tls_connections_beyond_the_per_source_rate_are_closed_before_their_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "main");
    let (r, log) = tls_router(
        &ca,
        &[
            "--no-guaranteed",
            "--tls-handshake-rate",
            "2",
            "--handshake-timeout",
            "60s",
        ],
    );
    // 10 connections at once from 127.0.0.1, none of them starting its handshake.
    let mut socks: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(r.tls.unwrap()).unwrap())
        .collect();
    // The router has seen all ten once they are counted: accepted or throttled.
    let deadline = Instant::now() + LONG;
    let (accepted, throttled) = loop {
        let s = common::stats_json(&r.addr_str());
        // The stats command's own (plaintext) connection is one of `connections`.
        let accepted = common::u_at(&s, &["router", "totals", "connections"]) - 1;
        let throttled = common::u_at(&s, &["router", "totals", "tls_throttled"]);
        if accepted + throttled >= 10 || Instant::now() > deadline {
            break (accepted, throttled);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Two at once; one more only if the burst straddled a refill (one per 500 ms).
    assert!((2..=3).contains(&accepted), "{accepted} accepted");
    assert_eq!(accepted + throttled, 10, "{throttled} throttled");
    // The throttled ones were closed (EOF), the accepted ones still wait for a
    // ClientHello (the handshake deadline is a minute away): told apart without waiting.
    let closed = socks
        .iter_mut()
        .filter_map(|s| {
            s.set_nonblocking(true).unwrap();
            match s.read(&mut [0u8; 64]) {
                Ok(0) => Some(()),
                Ok(n) => panic!("the router sent {n} bytes before any ClientHello"),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                Err(_) => Some(()),
            }
        })
        .count() as u64;
    assert_eq!(closed, throttled);
    assert!(
        log.wait_for(&["TLS connection refused", "tls_handshake_rate"], LONG)
            .is_some(),
        "{}",
        log.text()
    );
    // A second later the source has its allowance back: a real TLS client connects.
    drop(socks);
    std::thread::sleep(Duration::from_millis(1_100));
    let mut c = Client::connect_to(&tls_url(&r), tls_opts("later", &ca.pem(), None)).unwrap();
    c.ping().unwrap();
}
