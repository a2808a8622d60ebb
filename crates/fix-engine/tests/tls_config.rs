//! The TLS configuration built from QuickFIX's SSL settings: what starts, and what is
//! refused at startup with a reason instead of running less safely than QuickFIX's
//! settings suggest. (The TLS path itself runs cross-process in
//! crates/tickwire/tests/fix_tls.rs, against tickwire and QuickFIX/C++.)

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use rcgen::{CertificateParams, KeyPair};
use tickwire_fix::settings::Settings;
use tickwire_fix_engine::TlsConfig;

/// A fresh, empty directory (`tickwire-tlscfg-NAME-*`), removed when the guard drops.
fn dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tickwire-tlscfg-{name}-"))
        .tempdir()
        .unwrap()
}

/// A self-signed certificate for 127.0.0.1 in `cert.pem` / `key.pem` (also the CA).
fn cert(d: &Path) -> (String, String) {
    let k = KeyPair::generate().unwrap();
    let c = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&k)
        .unwrap();
    let (cp, kp) = (d.join("cert.pem"), d.join("key.pem"));
    std::fs::write(&cp, c.pem()).unwrap();
    std::fs::write(&kp, k.serialize_pem()).unwrap();
    (cp.display().to_string(), kp.display().to_string())
}

/// Builds the TLS configuration of a one-session file of `side` with `ssl` in
/// [DEFAULT]; the error text on failure.
fn build(side: &str, ssl: &str) -> Result<TlsConfig, String> {
    let text = format!(
        "[DEFAULT]\nConnectionType={side}\nSocketAcceptPort=7\nSocketConnectHost=127.0.0.1\n\
         SocketConnectPort=7\nHeartBtInt=30\nNonStopSession=Y\nSocketUseSSL=Y\n{ssl}\
         [SESSION]\nBeginString=FIX.4.4\nSenderCompID=S\nTargetCompID=T\n"
    );
    let s = Settings::parse(&text, "tls.cfg").unwrap();
    let t = s.tls.expect("SocketUseSSL=Y");
    TlsConfig::from_settings(&t, side == "acceptor", side == "initiator").map_err(|e| e.to_string())
}

#[test]
fn acceptor_and_initiator_configurations_build_from_quickfix_settings() {
    let tmp = dir("ok");
    let d = tmp.path();
    let (c, k) = cert(d);
    let acc = build(
        "acceptor",
        &format!("ServerCertificateFile={c}\nServerCertificateKeyFile={k}\nCertificationAuthoritiesFile={c}\nCertificateVerifyLevel=1\n"),
    )
    .unwrap();
    assert!(acc.server.is_some() && acc.client.is_none());
    // The key may live in the certificate file (QuickFIX's default for the key file).
    let both = d.join("both.pem");
    std::fs::write(
        &both,
        format!(
            "{}{}",
            std::fs::read_to_string(&c).unwrap(),
            std::fs::read_to_string(&k).unwrap()
        ),
    )
    .unwrap();
    build(
        "acceptor",
        &format!("ServerCertificateFile={}\n", both.display()),
    )
    .unwrap();
    // A CA directory instead of a file.
    let cas = d.join("cas");
    std::fs::create_dir_all(&cas).unwrap();
    std::fs::copy(&c, cas.join("a.pem")).unwrap();
    std::fs::write(cas.join("README"), "not a certificate").unwrap();
    let ini = build(
        "initiator",
        &format!("CertificationAuthoritiesDirectory={}\nClientCertificateFile={c}\nClientCertificateKeyFile={k}\n", cas.display()),
    )
    .unwrap();
    assert!(ini.client.is_some() && ini.server.is_none());
}

#[test]
fn settings_that_would_run_less_safely_than_quickfix_suggests_are_refused() {
    let tmp = dir("refused");
    let d = tmp.path();
    let (c, k) = cert(d);
    let cases = [
        ("acceptor", String::new(), "ServerCertificateFile parameter not found"),
        (
            "acceptor",
            format!("ServerCertificateFile={c}\nServerCertificateKeyFile={k}\nCertificateVerifyLevel=1\n"),
            "needs CertificationAuthoritiesFile",
        ),
        ("initiator", String::new(), "needs CertificationAuthoritiesFile"),
        (
            "acceptor",
            format!("ServerCertificateFile={}\nServerCertificateKeyFile={k}\n", d.join("missing.pem").display()),
            "missing.pem",
        ),
        (
            "acceptor",
            format!("ServerCertificateFile={c}\nServerCertificateKeyFile={c}\n"),
            "no private key",
        ),
    ];
    for (side, ssl, want) in cases {
        match build(side, &ssl) {
            Err(e) => assert!(e.contains(want), "{side} {ssl:?}: {e}"),
            Ok(_) => panic!("{side} {ssl:?}: built, expected an error with {want:?}"),
        }
    }
    // A passphrase-protected key: refused with how to decrypt it.
    let enc = d.join("enc.pem");
    std::fs::write(
        &enc,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBAA==\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let e = build(
        "acceptor",
        &format!(
            "ServerCertificateFile={c}\nServerCertificateKeyFile={}\n",
            enc.display()
        ),
    )
    .expect_err("refused");
    assert!(e.contains("passphrase"), "{e}");
}
