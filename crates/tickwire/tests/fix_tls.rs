//! TLS on the FIX engine (issue 20), cross-process on 127.0.0.1: the real `tickwire fix`
//! binary with QuickFIX's SSL settings, against itself and against a real QuickFIX/C++
//! 1.15.1 `SSLSocketAcceptor` / `SSLSocketInitiator` (`tools/quickfix/qf_peer`, which
//! picks them for `SocketUseSSL=Y`), both directions; refusals: an untrusted client
//! certificate, an initiator that does not trust the acceptor, clear text on a TLS
//! port, a peer outside `AllowedRemoteAddresses`.
//!
//! Certificates are made at test time with rcgen. QuickFIX 1.15.1 accepts only RSA (or
//! DSA) certificates for itself, so the interop tests use RSA keys made by the openssl
//! CLI (installed with QuickFIX by scripts/install-quickfix.sh); the tickwire-only tests
//! use rcgen's own ECDSA keys.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fix_support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fix_support::{field, free_port, qf_peer, quickfix, temp_dir, Peer};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

const ORDER: &str = "21=1|38=100|40=1|54=1|55=IBM|60=20240101-00:00:00";

/// A test PKI in a directory: `ca.pem`; `server.pem`/`.key` (for 127.0.0.1 and
/// localhost) and `client.pem`/`.key` signed by it; `rogue-ca.pem` and
/// `rogue-client.pem`/`.key` signed by the rogue CA.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// ECDSA keys from rcgen, or RSA keys from the openssl CLI (`rsa`).
    fn new(dir: &Path, rsa: bool) -> Pki {
        let dir = dir.join("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let key = |name: &str| -> KeyPair {
            if !rsa {
                return KeyPair::generate().unwrap();
            }
            let path = dir.join(format!("{name}.rsa"));
            let st = Command::new("openssl")
                .args([
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                    "-out",
                ])
                .arg(&path)
                .stderr(std::process::Stdio::null())
                .status()
                .expect("the openssl CLI (scripts/install-quickfix.sh installs it)");
            assert!(st.success(), "openssl genpkey failed");
            KeyPair::from_pem(&std::fs::read_to_string(&path).unwrap()).unwrap()
        };
        let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
        let ca = |name: &str| {
            let k = key(name);
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, name);
            let c = p.self_signed(&k).unwrap();
            write(&format!("{name}.pem"), c.pem());
            (c, k)
        };
        let leaf = |name: &str, sans: &[&str], issuer: &(rcgen::Certificate, KeyPair)| {
            let k = key(name);
            let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
            let mut p = CertificateParams::new(sans).unwrap();
            p.distinguished_name.push(DnType::CommonName, name);
            let c = p.signed_by(&k, &issuer.0, &issuer.1).unwrap();
            write(&format!("{name}.pem"), c.pem());
            write(&format!("{name}.key"), k.serialize_pem());
        };
        let good = ca("ca");
        leaf("server", &["127.0.0.1", "localhost"], &good);
        leaf("client", &["client.test"], &good);
        let rogue = ca("rogue-ca");
        leaf("rogue-client", &["client.test"], &rogue);
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// An acceptor's SSL settings: our server certificate, client certificates required
    /// (`CertificateVerifyLevel=1`) and verified against `ca.pem`.
    fn acceptor(&self) -> String {
        format!(
            "SocketUseSSL=Y\nServerCertificateFile={}\nServerCertificateKeyFile={}\n\
             CertificationAuthoritiesFile={}\nCertificateVerifyLevel=1\n",
            self.path("server.pem"),
            self.path("server.key"),
            self.path("ca.pem")
        )
    }

    /// An initiator's SSL settings: trusting `ca`, presenting `client`.
    fn initiator(&self, ca: &str, client: &str) -> String {
        format!(
            "SocketUseSSL=Y\nCertificationAuthoritiesFile={}\nClientCertificateFile={}\n\
             ClientCertificateKeyFile={}\n",
            self.path(&format!("{ca}.pem")),
            self.path(&format!("{client}.pem")),
            self.path(&format!("{client}.key"))
        )
    }
}

fn write_cfg(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// tickwire's FIX.4.4 acceptor TW <- `peer` on `port` with `extra` in [DEFAULT].
fn tw_acceptor(dir: &Path, port: u16, peer: &str, extra: &str) -> PathBuf {
    let text = format!(
        "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptHost=127.0.0.1\n\
         SocketAcceptPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n{extra}\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=TW\nTargetCompID={peer}\n"
    );
    write_cfg(dir, &format!("tw-acceptor-{peer}.cfg"), &text)
}

/// tickwire's FIX.4.4 initiator `me` -> `target` on `port` with `extra` in [DEFAULT].
fn tw_initiator(dir: &Path, name: &str, port: u16, me: &str, target: &str, extra: &str) -> PathBuf {
    let text = format!(
        "[DEFAULT]\nConnectionType=initiator\nSocketConnectHost=127.0.0.1\n\
         SocketConnectPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n\
         ReconnectInterval=1\n{extra}\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID={me}\nTargetCompID={target}\n"
    );
    write_cfg(dir, &format!("{name}.cfg"), &text)
}

/// tickwire's TLS initiator CL -> TW on `port` (settings `<name>.cfg`), trusting CA
/// `ca.0`, presenting certificate `ca.1`.
fn cl_initiator(
    dir: &Path,
    pki: &Pki,
    port: u16,
    name: &str,
    title: &str,
    ca: (&str, &str),
) -> Peer {
    let cfg = tw_initiator(dir, name, port, "CL", "TW", &pki.initiator(ca.0, ca.1));
    Peer::tickwire(title, "initiator", &cfg, "log")
}

/// QuickFIX's settings (rendered by qf_peer: PORT, SPEC, DIR) with SSL in [DEFAULT].
fn qf_cfg(dir: &Path, side: &str, ssl: &str) -> PathBuf {
    let socket = if side == "acceptor" {
        "SocketAcceptPort=${PORT}\nSocketReuseAddress=Y\n"
    } else {
        "SocketConnectHost=127.0.0.1\nSocketConnectPort=${PORT}\nHeartBtInt=30\nReconnectInterval=1\n"
    };
    let text = format!(
        "[DEFAULT]\nConnectionType={side}\n{socket}StartTime=00:00:00\nEndTime=00:00:00\n\
         UseDataDictionary=Y\nFileStorePath=${{DIR}}/store\n{ssl}\n\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=QF\nTargetCompID=TW\n\
         DataDictionary=${{SPEC}}/FIX44.xml\n"
    );
    write_cfg(dir, &format!("qf-{side}.cfg"), &text)
}

/// QuickFIX's SSL acceptor or initiator (the same SSL settings as tickwire's) on `port`.
fn qf_ssl_peer(dir: &Path, side: &str, ssl: &str, port: u16) -> Peer {
    let cfg = qf_cfg(dir, side, ssl);
    let qf = quickfix(
        &format!("quickfix SSL {side}"),
        cfg.to_str().unwrap(),
        port,
        &dir.join("qf"),
    );
    qf.wait_ever(&[&format!("READY {side} ssl")]);
    qf
}

/// An order from tickwire to QuickFIX and QuickFIX's execution report back (messages
/// both ways over TLS), nothing rejected by QuickFIX; then our Logout, answered.
fn order_and_logout_with_quickfix(mut tw: Peer, qf: &Peer, id: &str) {
    let (ours, theirs) = ("FIX.4.4:TW->QF", "FIX.4.4:QF->TW");
    let report = order_round_trip(&mut tw, ours, id, "|35=8|");
    assert_eq!(field(&report, 39).as_deref(), Some("0"), "{report}");
    assert_eq!(field(&report, 55).as_deref(), Some("IBM"), "{report}");
    qf.wait_ever(&["IN", theirs, "|35=D|", &format!("|11={id}|")]);
    let rejected = qf.find_all_since(0, &["Rejected"]);
    assert!(rejected.is_empty(), "{}", qf.output());
    tw.send("logout");
    tw.wait(&["LOGOUT", ours]);
    qf.wait_ever(&["EVENT", theirs, "Received logout"]);
    assert!(tw.terminate().success(), "{}", tw.output());
}

/// Sends an order on `tw`'s session and waits for its echo / execution report.
fn order_round_trip(tw: &mut Peer, session: &str, id: &str, answer: &str) -> String {
    tw.send(&format!("{session} 35=D|11={id}|{ORDER}"));
    tw.wait(&["IN", session, answer, &format!("|11={id}|")])
}

/// A connection the acceptor closes: reads until EOF or a reset, bounded; what came
/// back (nothing readable is expected from a refused TLS handshake but an alert).
fn until_closed(mut s: std::net::TcpStream) -> usize {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut total = 0;
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            Instant::now() < deadline,
            "the acceptor never closed the connection"
        );
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

/// tickwire to tickwire over TLS (ECDSA): logon with client certificates, messages both
/// ways; then, while that session carries on: clear text on the TLS port, a client
/// certificate from another CA, and an initiator that does not trust the acceptor are
/// each refused, cost only their own connection, and are logged.
#[test]
fn tickwire_tls_session_works_and_untrusted_or_clear_text_peers_are_refused() {
    let dir = temp_dir("tls-self");
    let pki = Pki::new(dir.path(), false);
    let port = free_port();
    let acc_cfg = tw_acceptor(dir.path(), port, "CL", &pki.acceptor());
    let mut acc = Peer::spawn(
        "tickwire TLS acceptor",
        Command::new(fix_support::BIN)
            .args(["fix", "acceptor", "--config"])
            .arg(&acc_cfg)
            .args(["--app", "echo"])
            .env("TICKWIRE_LOG", "info"),
    );
    acc.wait(&["READY", "acceptor"]);
    acc.wait_ever(&["listening on 127.0.0.1", "TLS"]);
    let mut good = cl_initiator(
        dir.path(),
        &pki,
        port,
        "good",
        "tickwire TLS initiator",
        ("ca", "client"),
    );
    good.wait(&["LOGON", "FIX.4.4:CL->TW"]);
    acc.wait_ever(&["LOGON", "FIX.4.4:TW->CL"]);
    let echo = order_round_trip(&mut good, "FIX.4.4:CL->TW", "T1", "|35=D|");
    assert_eq!(field(&echo, 55).as_deref(), Some("IBM"), "{echo}");

    // Clear text (a FIX Logon) on the TLS port: closed, bounded, logged.
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .write_all(b"8=FIX.4.4\x019=70\x0135=A\x0134=1\x0149=CL\x0152=20240101-00:00:00\x0156=TW\x0198=0\x01108=30\x0110=000\x01")
        .unwrap();
    until_closed(plain);
    acc.wait_ever(&["closed: TLS handshake failed: the peer does not speak TLS"]);

    // A client certificate from a CA the acceptor does not trust.
    let rogue = cl_initiator(
        dir.path(),
        &pki,
        port,
        "rogue",
        "tickwire initiator (rogue cert)",
        ("ca", "rogue-client"),
    );
    // (Refusals are logged at most once a second: its retries get through the limit.)
    acc.wait_ever(&["closed: TLS handshake failed", "not signed by a trusted CA"]);
    assert!(!rogue.ever(&["LOGON"]), "{}", rogue.output());
    drop(rogue);

    // An initiator that trusts only the rogue CA refuses our acceptor's certificate.
    let distrust = cl_initiator(
        dir.path(),
        &pki,
        port,
        "distrust",
        "tickwire initiator (wrong CA)",
        ("rogue-ca", "client"),
    );
    distrust.wait_ever(&[
        "EVENT",
        "FIX.4.4:CL->TW",
        "the peer's certificate is not signed by a trusted CA (check CertificationAuthoritiesFile)",
    ]);
    assert!(!distrust.ever(&["LOGON"]), "{}", distrust.output());
    drop(distrust);

    // The good session carried on through all of it.
    order_round_trip(&mut good, "FIX.4.4:CL->TW", "T2", "|35=D|");
    good.send("logout");
    good.wait(&["LOGOUT", "FIX.4.4:CL->TW"]);
    assert!(good.terminate().success(), "{}", good.output());
    assert!(acc.terminate().success(), "{}", acc.output());
}

/// `AllowedRemoteAddresses` on a TLS acceptor: a peer at 127.0.0.1 when only
/// 127.0.0.2 is allowed is closed at accept (before the handshake) and logged.
#[test]
fn tls_acceptor_refuses_a_peer_outside_allowed_remote_addresses() {
    let dir = temp_dir("tls-allowed");
    let pki = Pki::new(dir.path(), false);
    let port = free_port();
    let extra = format!("{}AllowedRemoteAddresses=127.0.0.2\n", pki.acceptor());
    let acc_cfg = tw_acceptor(dir.path(), port, "CL", &extra);
    let mut acc = Peer::tickwire("tickwire TLS acceptor", "acceptor", &acc_cfg, "echo");
    acc.wait(&["READY", "acceptor"]);
    let tw = cl_initiator(
        dir.path(),
        &pki,
        port,
        "outside",
        "tickwire initiator (127.0.0.1)",
        ("ca", "client"),
    );
    acc.wait_ever(&["127.0.0.1", "address not in AllowedRemoteAddresses"]);
    // Its retries (ReconnectInterval=1) are refused the same way.
    tw.wait_ever(&["EVENT", "FIX.4.4:CL->TW", "Connecting to 127.0.0.1"]);
    assert!(!tw.ever(&["LOGON"]), "{}", tw.output());
    assert!(!acc.ever(&["LOGON"]), "{}", acc.output());
}

/// tickwire's TLS initiator against QuickFIX/C++'s SSLSocketAcceptor (which requires
/// our client certificate): logon, an order and an email each answered, logout.
#[test]
fn our_tls_initiator_with_quickfix_ssl_acceptor() {
    let dir = temp_dir("tls-qf-acceptor");
    qf_peer();
    let pki = Pki::new(dir.path(), true);
    let port = free_port();
    let qf = qf_ssl_peer(dir.path(), "acceptor", &pki.acceptor(), port);
    let cfg = tw_initiator(
        dir.path(),
        "tw-initiator",
        port,
        "TW",
        "QF",
        &pki.initiator("ca", "client"),
    );
    let mut tw = Peer::tickwire("tickwire TLS initiator", "initiator", &cfg, "log");
    tw.wait(&["LOGON", "FIX.4.4:TW->QF"]);
    qf.wait_ever(&["EVENT", "FIX.4.4:QF->TW", "Received logon request"]);

    tw.send("FIX.4.4:TW->QF 35=C|164=T1|94=0|147=over tls|33=1|58=line");
    let email = tw.wait(&["IN", "FIX.4.4:TW->QF", "|35=C|"]);
    assert_eq!(field(&email, 147).as_deref(), Some("over tls"), "{email}");
    order_and_logout_with_quickfix(tw, &qf, "ORD1");
}

/// QuickFIX/C++'s SSLSocketInitiator (presenting its client certificate, verifying
/// ours) against tickwire's TLS acceptor: logon, orders answered both ways, logout.
#[test]
fn quickfix_ssl_initiator_with_our_tls_acceptor() {
    let dir = temp_dir("tls-qf-initiator");
    qf_peer();
    let pki = Pki::new(dir.path(), true);
    let port = free_port();
    let acc_cfg = tw_acceptor(dir.path(), port, "QF", &pki.acceptor());
    let mut tw = Peer::tickwire("tickwire TLS acceptor", "acceptor", &acc_cfg, "log");
    tw.wait(&["READY", "acceptor"]);
    let qf = qf_ssl_peer(
        dir.path(),
        "initiator",
        &pki.initiator("ca", "client"),
        port,
    );
    tw.wait(&["LOGON", "FIX.4.4:TW->QF"]);
    qf.wait_ever(&["EVENT", "FIX.4.4:QF->TW", "Received logon response"]);

    order_and_logout_with_quickfix(tw, &qf, "ORD9");
}
