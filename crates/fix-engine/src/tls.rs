//! TLS for the engine (rustls, ring provider) from QuickFIX's SSL settings
//! ([`TlsSettings`]): reads the certificate, key, CA and CRL files once at startup and
//! builds one server configuration (acceptor sessions) and one client configuration
//! (initiator sessions). See docs/fix.md "TLS" for each setting's QuickFIX meaning and
//! ours.
//!
//! Where QuickFIX/C++ 1.15.1 would quietly run less safely than the file suggests,
//! tickwire refuses to start and says why:
//! * an initiator without `CertificationAuthoritiesFile`/`Directory` (QuickFIX would
//!   not verify the acceptor's certificate at all);
//! * `CertificateVerifyLevel` 1 or 2 without a CA file or directory (QuickFIX would
//!   skip client verification).
//!
//! An initiator also checks that the acceptor's certificate names the
//! `SocketConnectHost` it connects to (DNS name or IP address); QuickFIX does not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use tickwire_fix::settings::{TlsSettings, VerifyLevel};

use crate::Error;

/// The engine's TLS: a server configuration when it has acceptor sessions, a client
/// configuration when it has initiator sessions.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// For accepted connections.
    pub server: Option<Arc<ServerConfig>>,
    /// For initiated connections.
    pub client: Option<Arc<ClientConfig>>,
}

fn fail(reason: impl Into<String>) -> Error {
    Error::Tls {
        reason: reason.into(),
    }
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, Error> {
    // Certificates and keys: kilobytes; 16 MiB is not one (a link to /dev/zero was read
    // until memory ran out: probe).
    tickwire_rt::files::read_limited(path, 16 << 20)
        .map_err(|e| fail(format!("{key} {}: {e}", path.display())))
}

/// Certificates of a PEM file; a file without PEM sections is taken as one DER
/// certificate (QuickFIX also reads DER).
fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = read(key, path)?;
    let pem: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| fail(format!("{key} {}: {e}", path.display())))?;
    if !pem.is_empty() {
        return Ok(pem);
    }
    if bytes.starts_with(b"-----") || bytes.is_empty() {
        return Err(fail(format!(
            "{key} {}: no certificate in the file",
            path.display()
        )));
    }
    Ok(vec![CertificateDer::from(bytes)])
}

/// The private key of a PEM (PKCS#8, PKCS#1 or SEC1) or DER file.
fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let bytes = read(key, path)?;
    if let Ok(k) = PrivateKeyDer::from_pem_slice(&bytes) {
        return Ok(k);
    }
    if bytes.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(fail(format!(
            "{key} {}: the key is protected by a passphrase, which tickwire cannot ask for \
             (QuickFIX prompts for it); store it decrypted with restricted file permissions \
             (openssl pkey -in KEY -out KEY.plain)",
            path.display()
        )));
    }
    PrivateKeyDer::try_from(bytes)
        .map_err(|e| fail(format!("{key} {}: no private key: {e}", path.display())))
}

/// `<which>File` (a certificate chain) and `<which>KeyFile` (its key; QuickFIX's
/// default: the certificate file).
fn cert_and_key(
    which: &str,
    cert: &Path,
    key: Option<&Path>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let chain = certs(&format!("{which}File"), cert)?;
    let key = match key {
        Some(k) => private_key(&format!("{which}KeyFile"), k)?,
        None => private_key(&format!("{which}File (no {which}KeyFile)"), cert)?,
    };
    Ok((chain, key))
}

/// The regular files of a directory, sorted (for CA and CRL directories).
fn dir_files(key: &str, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let rd = std::fs::read_dir(dir).map_err(|e| fail(format!("{key} {}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// The trusted CAs of `CertificationAuthoritiesFile` and `...Directory` (None: neither).
fn roots(t: &TlsSettings) -> Result<Option<Arc<RootCertStore>>, Error> {
    if t.ca_file.is_none() && t.ca_dir.is_none() {
        return Ok(None);
    }
    let mut store = RootCertStore::empty();
    let mut add = |key: &str, path: &Path, der: Vec<CertificateDer<'static>>| {
        for c in der {
            store.add(c).map_err(|e| {
                fail(format!(
                    "{key} {}: not a usable CA certificate: {e}",
                    path.display()
                ))
            })?;
        }
        Ok::<(), Error>(())
    };
    if let Some(f) = &t.ca_file {
        add(
            "CertificationAuthoritiesFile",
            f,
            certs("CertificationAuthoritiesFile", f)?,
        )?;
    }
    if let Some(d) = &t.ca_dir {
        for f in dir_files("CertificationAuthoritiesDirectory", d)? {
            // Other files (CRLs, READMEs) may live there: only PEM certificates count.
            let bytes = read("CertificationAuthoritiesDirectory", &f)?;
            let der: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
                .filter_map(Result::ok)
                .collect();
            add("CertificationAuthoritiesDirectory", &f, der)?;
        }
    }
    if store.is_empty() {
        return Err(fail(
            "CertificationAuthoritiesFile/Directory: no CA certificate found",
        ));
    }
    Ok(Some(Arc::new(store)))
}

/// The revocation lists of `CertificateRevocationListFile` and `...Directory`.
fn crls(t: &TlsSettings) -> Result<Vec<CertificateRevocationListDer<'static>>, Error> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    if let Some(f) = &t.crl_file {
        files.push(("CertificateRevocationListFile", f.clone()));
    }
    if let Some(d) = &t.crl_dir {
        for f in dir_files("CertificateRevocationListDirectory", d)? {
            files.push(("CertificateRevocationListDirectory", f));
        }
    }
    for (key, f) in files {
        let bytes = read(key, &f)?;
        let before = out.len();
        for crl in CertificateRevocationListDer::pem_slice_iter(&bytes) {
            out.push(crl.map_err(|e| fail(format!("{key} {}: {e}", f.display())))?);
        }
        if out.len() == before && key == "CertificateRevocationListFile" {
            return Err(fail(format!("{key} {}: no PEM X509 CRL", f.display())));
        }
    }
    Ok(out)
}

fn versions(t: &TlsSettings) -> Vec<&'static SupportedProtocolVersion> {
    let mut v = Vec::new();
    if t.versions.tls13 {
        v.push(&rustls::version::TLS13);
    }
    if t.versions.tls12 {
        v.push(&rustls::version::TLS12);
    }
    v
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server configuration of an acceptor (QuickFIX's `SSLSocketAcceptor`).
fn server(t: &TlsSettings) -> Result<ServerConfig, Error> {
    let cert_file = t.server_certificate_file.as_deref().ok_or_else(|| {
        fail("ServerCertificateFile parameter not found (an acceptor with SocketUseSSL=Y needs its certificate)")
    })?;
    let (chain, key) = cert_and_key(
        "ServerCertificate",
        cert_file,
        t.server_certificate_key_file.as_deref(),
    )?;
    let roots = roots(t)?;
    let verifier = match (t.verify_level, roots) {
        (VerifyLevel::Require | VerifyLevel::Optional, None) => {
            return Err(fail(format!(
                "CertificateVerifyLevel={} needs CertificationAuthoritiesFile or \
                 CertificationAuthoritiesDirectory to verify client certificates against \
                 (QuickFIX would silently skip the verification)",
                if t.verify_level == VerifyLevel::Require {
                    1
                } else {
                    2
                }
            )))
        }
        (VerifyLevel::Require, Some(r)) => {
            WebPkiClientVerifier::builder_with_provider(r, provider())
                .with_crls(crls(t)?)
                .build()
                .map_err(|e| fail(format!("client certificate verification: {e}")))?
        }
        (VerifyLevel::Optional, Some(r)) => {
            WebPkiClientVerifier::builder_with_provider(r, provider())
                .with_crls(crls(t)?)
                .allow_unauthenticated()
                .build()
                .map_err(|e| fail(format!("client certificate verification: {e}")))?
        }
        (VerifyLevel::NotSet | VerifyLevel::None, _) => WebPkiClientVerifier::no_client_auth(),
    };
    ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions(t))
        .map_err(|e| fail(format!("SSLProtocol: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| {
            fail(format!(
                "ServerCertificateFile / ServerCertificateKeyFile: {e}"
            ))
        })
}

/// The client configuration of an initiator (QuickFIX's `SSLSocketInitiator`).
fn client(t: &TlsSettings) -> Result<ClientConfig, Error> {
    let roots = roots(t)?.ok_or_else(|| {
        fail(
            "an initiator with SocketUseSSL=Y needs CertificationAuthoritiesFile (or \
             CertificationAuthoritiesDirectory) to verify the acceptor's certificate; \
             QuickFIX 1.15.1 would connect without verifying it, which tickwire refuses",
        )
    })?;
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .with_crls(crls(t)?)
        .build()
        .map_err(|e| fail(format!("server certificate verification: {e}")))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions(t))
        .map_err(|e| fail(format!("SSLProtocol: {e}")))?
        .with_webpki_verifier(verifier);
    match &t.client_certificate_file {
        None => Ok(builder.with_no_client_auth()),
        Some(cert_file) => {
            let (chain, key) = cert_and_key(
                "ClientCertificate",
                cert_file,
                t.client_certificate_key_file.as_deref(),
            )?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                fail(format!(
                    "ClientCertificateFile / ClientCertificateKeyFile: {e}"
                ))
            })
        }
    }
}

impl TlsConfig {
    /// Reads the files `t` names and builds the configurations the engine needs:
    /// `acceptors` / `initiators` say which sides it runs.
    pub fn from_settings(
        t: &TlsSettings,
        acceptors: bool,
        initiators: bool,
    ) -> Result<TlsConfig, Error> {
        Ok(TlsConfig {
            server: acceptors.then(|| server(t).map(Arc::new)).transpose()?,
            client: initiators.then(|| client(t).map(Arc::new)).transpose()?,
        })
    }
}
