//! QuickFIX's SSL settings, read as QuickFIX/C++ 1.15.1 reads them (`UtilitySSL.cpp`,
//! `SSLSocketAcceptor.cpp`, `SSLSocketInitiator.cpp`): from `[DEFAULT]` only, one TLS
//! configuration for the whole engine. Pure: paths and choices; the engine reads the
//! files and builds the rustls configuration.
//!
//! What rustls cannot do is refused at startup with the reason (an OpenSSL cipher
//! string, a protocol list naming only SSL 3 / TLS 1.0 / 1.1), never ignored.

use std::path::PathBuf;

use super::{Entry, SettingsError, Values};

/// The keys of this module: engine-wide, `[DEFAULT]` only.
pub(super) const KEYS: &[&str] = &[
    "SocketUseSSL",
    "ServerCertificateFile",
    "ServerCertificateKeyFile",
    "ClientCertificateFile",
    "ClientCertificateKeyFile",
    "CertificationAuthoritiesFile",
    "CertificationAuthoritiesDirectory",
    "CertificateRevocationListFile",
    "CertificateRevocationListDirectory",
    "CertificateVerifyLevel",
    "SSLProtocol",
    "SSLCipherSuite",
    "TLSCipherSuites",
];

/// `CertificateVerifyLevel` (QuickFIX's `SSLVerifyClient`): whether an acceptor asks
/// its initiators for a certificate. Only in effect with a CA file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyLevel {
    /// Absent (QuickFIX's `SSL_CLIENT_VERIFY_NOTSET`, 3): no client certificate asked.
    #[default]
    NotSet,
    /// 0: no client certificate asked.
    None,
    /// 1: a client certificate signed by a listed CA is required.
    Require,
    /// 2: a client certificate is asked for; none is accepted, an untrusted one is not.
    Optional,
}

/// The TLS versions `SSLProtocol` leaves on, of those rustls speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsVersions {
    /// TLS 1.2 (`TLSv1_2` in the protocol set).
    pub tls12: bool,
    /// TLS 1.3: QuickFIX 1.15.1 has no name for it and never turns it off (OpenSSL 3
    /// offers it); tickwire turns it off only for `-TLSv1_3` (its extension).
    pub tls13: bool,
}

/// The engine's TLS configuration: `SocketUseSSL=Y` and the certificate settings of
/// `[DEFAULT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Line of `SocketUseSSL`.
    pub line: usize,
    /// `ServerCertificateFile`: the acceptor's certificate (chain), PEM (or DER).
    /// Required when the engine has acceptor sessions.
    pub server_certificate_file: Option<PathBuf>,
    /// `ServerCertificateKeyFile`: its private key; QuickFIX's default: the
    /// certificate file (a PEM file holding both).
    pub server_certificate_key_file: Option<PathBuf>,
    /// `ClientCertificateFile`: the initiator's certificate (optional).
    pub client_certificate_file: Option<PathBuf>,
    /// `ClientCertificateKeyFile`: its key; default: the certificate file.
    pub client_certificate_key_file: Option<PathBuf>,
    /// `CertificationAuthoritiesFile`: trusted CA certificates (PEM). An acceptor
    /// verifies client certificates against them (per [`VerifyLevel`]); an initiator
    /// verifies the acceptor's certificate.
    pub ca_file: Option<PathBuf>,
    /// `CertificationAuthoritiesDirectory`: every PEM certificate in the directory is
    /// trusted (OpenSSL uses hash-named links there; tickwire reads each file).
    pub ca_dir: Option<PathBuf>,
    /// `CertificateRevocationListFile`: revoked certificates (PEM CRLs).
    pub crl_file: Option<PathBuf>,
    /// `CertificateRevocationListDirectory`: every PEM CRL in the directory.
    pub crl_dir: Option<PathBuf>,
    /// `CertificateVerifyLevel`.
    pub verify_level: VerifyLevel,
    /// Line of `CertificateVerifyLevel` (0 when absent).
    pub verify_level_line: usize,
    /// From `SSLProtocol` (default `all -SSLv2`: TLS 1.2 and 1.3).
    pub versions: TlsVersions,
}

fn err(file: &str, e: &Entry, key: &'static str, reason: impl Into<String>) -> SettingsError {
    SettingsError::Tls {
        file: file.to_string(),
        line: e.line,
        key,
        value: e.value.clone(),
        reason: reason.into(),
    }
}

/// Parses the TLS keys of `[DEFAULT]`: `None` unless `SocketUseSSL=Y`. Any other TLS
/// key without `SocketUseSSL=Y` is an error: the file asks for TLS that would not run.
pub(super) fn parse(file: &str, default: &Values) -> Result<Option<TlsSettings>, SettingsError> {
    let get = |k: &'static str| default.get(&(k, String::new()));
    let on = match get("SocketUseSSL") {
        None => None,
        Some(e) => match e.value.as_str() {
            "Y" => Some(e.line),
            "N" => None,
            _ => return Err(err(file, e, "SocketUseSSL", "expected Y or N")),
        },
    };
    let Some(line) = on else {
        if let Some((k, e)) = KEYS.iter().skip(1).find_map(|k| get(k).map(|e| (*k, e))) {
            return Err(err(
                file,
                e,
                k,
                "an SSL setting without SocketUseSSL=Y: the sessions would run in clear \
                 text; set SocketUseSSL=Y in [DEFAULT] (or remove the SSL settings)",
            ));
        }
        return Ok(None);
    };
    for k in ["SSLCipherSuite", "TLSCipherSuites"] {
        if let Some(e) = get(k).filter(|e| !e.value.is_empty()) {
            return Err(err(
                file,
                e,
                if k == "SSLCipherSuite" {
                    "SSLCipherSuite"
                } else {
                    "TLSCipherSuites"
                },
                "an OpenSSL cipher list, which tickwire's TLS (rustls) cannot honour: it \
                 offers only its fixed modern suites (TLS 1.3 AES-GCM and ChaCha20-Poly1305; \
                 TLS 1.2 ECDHE with AES-GCM or ChaCha20-Poly1305); remove the key",
            ));
        }
    }
    let path = |k: &'static str| {
        get(k)
            .filter(|e| !e.value.is_empty())
            .map(|e| PathBuf::from(&e.value))
    };
    let (verify_level, verify_level_line) = match get("CertificateVerifyLevel") {
        None => (VerifyLevel::NotSet, 0),
        Some(e) => (
            match e.value.as_str() {
                "0" => VerifyLevel::None,
                "1" => VerifyLevel::Require,
                "2" => VerifyLevel::Optional,
                "3" => VerifyLevel::NotSet,
                _ => {
                    return Err(err(
                        file,
                        e,
                        "CertificateVerifyLevel",
                        "expected 0 (no client certificate), 1 (required) or 2 (optional)",
                    ))
                }
            },
            e.line,
        ),
    };
    let versions = match get("SSLProtocol") {
        None => TlsVersions {
            tls12: true,
            tls13: true,
        },
        Some(e) => protocols(&e.value).map_err(|r| err(file, e, "SSLProtocol", r))?,
    };
    Ok(Some(TlsSettings {
        line,
        server_certificate_file: path("ServerCertificateFile"),
        server_certificate_key_file: path("ServerCertificateKeyFile"),
        client_certificate_file: path("ClientCertificateFile"),
        client_certificate_key_file: path("ClientCertificateKeyFile"),
        ca_file: path("CertificationAuthoritiesFile"),
        ca_dir: path("CertificationAuthoritiesDirectory"),
        crl_file: path("CertificateRevocationListFile"),
        crl_dir: path("CertificateRevocationListDirectory"),
        verify_level,
        verify_level_line,
        versions,
    }))
}

const SSLV2: u8 = 1;
const SSLV3: u8 = 2;
const TLSV1: u8 = 4;
const TLSV1_1: u8 = 8;
const TLSV1_2: u8 = 16;
const ALL: u8 = SSLV2 | SSLV3 | TLSV1 | TLSV1_1 | TLSV1_2;

/// `SSLProtocol` as QuickFIX's `protocolOptions` reads it: words separated by spaces,
/// each `SSLv2`, `SSLv3`, `TLSv1`, `TLSv1_1`, `TLSv1_2` or `all` (any case), prefixed
/// `+` (add), `-` (remove) or nothing (this set only); empty: `all -SSLv2`. tickwire
/// adds `TLSv1_3` (only `-TLSv1_3` changes anything: TLS 1.3 is on otherwise, as with
/// QuickFIX on OpenSSL 3). A word QuickFIX does not know is an error (QuickFIX would
/// turn every protocol on). The versions rustls lacks (SSL 2/3, TLS 1.0/1.1) are never
/// offered; a set naming nothing else is an error.
pub fn protocols(value: &str) -> Result<TlsVersions, String> {
    let mut set = ALL & !SSLV2;
    let mut tls13 = true;
    let mut named13 = false;
    if !value.trim().is_empty() {
        set = 0;
        for word in value.split_whitespace() {
            let (action, name) = match word.as_bytes().first() {
                Some(b'+') => ('+', &word[1..]),
                Some(b'-') => ('-', &word[1..]),
                _ => (' ', word),
            };
            if name.eq_ignore_ascii_case("TLSv1_3") {
                tls13 = action != '-';
                named13 |= action != '-';
                continue;
            }
            let bits = match name.to_ascii_lowercase().as_str() {
                "sslv2" => SSLV2,
                "sslv3" => SSLV3,
                "tlsv1" => TLSV1,
                "tlsv1_1" => TLSV1_1,
                "tlsv1_2" => TLSV1_2,
                "all" => ALL,
                _ => {
                    return Err(format!(
                        "unknown protocol '{name}': expected words SSLv2, SSLv3, TLSv1, \
                         TLSv1_1, TLSv1_2, TLSv1_3 or all, each with an optional + or -"
                    ))
                }
            };
            set = match action {
                '+' => set | bits,
                '-' => set & !bits,
                _ => bits,
            };
        }
    }
    let tls12 = set & TLSV1_2 != 0;
    if !tls12 && !named13 {
        return Err(
            "leaves no protocol tickwire speaks: its TLS (rustls) has TLS 1.2 and 1.3 only \
             (SSL 2/3 and TLS 1.0/1.1 are broken or deprecated, and Debian's OpenSSL refuses \
             them too); include TLSv1_2, or TLSv1_3"
                .to_string(),
        );
    }
    if !tls12 && !tls13 {
        return Err("turns off both TLS 1.2 and TLS 1.3, the only versions tickwire speaks".into());
    }
    Ok(TlsVersions { tls12, tls13 })
}
