//! The TLS path of the benches (issue 20, docs/security.md "TLS"): a throw-away CA and
//! a router certificate for `127.0.0.1` made at start-up, the router started with a
//! TLS listener beside its plaintext one, and the clients' [`TlsOptions`] trusting
//! that CA. Everything else of the path is the router's and the client's own code, so
//! a `tickwire-tls` row differs from a `tickwire` row in the encryption alone.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tickwire_client::{ClientOptions, TlsOptions};

/// Where a bench's clients connect: the address (`tls://…` for TLS) and, for TLS,
/// what they trust.
#[derive(Debug, Clone)]
pub struct RouterAddr {
    /// What [`tickwire_client::Client::connect_to`] takes.
    pub addr: String,
    /// The TLS settings of a `tls://` address.
    pub tls: Option<TlsOptions>,
}

impl RouterAddr {
    /// A plaintext or shared-memory address.
    pub fn plain(addr: String) -> RouterAddr {
        RouterAddr { addr, tls: None }
    }

    /// `base` with this address's TLS settings.
    pub fn options(&self, base: ClientOptions) -> ClientOptions {
        ClientOptions {
            tls: self.tls.clone(),
            ..base
        }
    }
}

impl std::fmt::Display for RouterAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addr)
    }
}

/// A CA and a router certificate in a temporary directory (removed on drop).
pub struct BenchCerts {
    dir: tempfile::TempDir,
}

impl BenchCerts {
    /// Makes a CA and a certificate for `127.0.0.1` and `localhost` signed by it.
    pub fn generate() -> anyhow::Result<BenchCerts> {
        let dir = tempfile::Builder::new()
            .prefix("tickwire-bench-tls")
            .tempdir()
            .context("creating a directory for the bench's TLS certificates")?;
        let gen = || -> Result<(String, String, String), rcgen::Error> {
            let ca_key = KeyPair::generate()?;
            let mut ca = CertificateParams::new(Vec::<String>::new())?;
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca.distinguished_name
                .push(DnType::CommonName, "tickwire bench CA");
            let ca = ca.self_signed(&ca_key)?;
            let key = KeyPair::generate()?;
            let mut leaf =
                CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
            leaf.distinguished_name
                .push(DnType::CommonName, "tickwire bench router");
            let leaf = leaf.signed_by(&key, &ca, &ca_key)?;
            Ok((ca.pem(), leaf.pem(), key.serialize_pem()))
        };
        let (ca, cert, key) = gen().context("generating the bench's TLS certificates")?;
        let certs = BenchCerts { dir };
        for (path, pem) in [(certs.ca(), ca), (certs.cert(), cert), (certs.key(), key)] {
            std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(certs)
    }

    /// The CA's PEM certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The router's PEM certificate.
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("router.pem")
    }

    /// The router's PEM key.
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("router.key")
    }

    /// What a client needs to trust the router's certificate.
    pub fn client_options(&self) -> anyhow::Result<TlsOptions> {
        let config = tickwire_tls::client_config(&tickwire_tls::ClientFiles {
            ca: Some(self.ca()),
            ..Default::default()
        })
        .context("the bench's TLS client configuration")?;
        Ok(TlsOptions {
            config: Arc::clone(&config),
            server_name: Some("127.0.0.1".to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_files_load_as_a_client_and_a_server_configuration() {
        let c = BenchCerts::generate().unwrap();
        let opts = c.client_options().unwrap();
        assert_eq!(opts.server_name.as_deref(), Some("127.0.0.1"));
        tickwire_tls::server_config(&tickwire_tls::ServerFiles {
            cert: Some(c.cert()),
            key: Some(c.key()),
            ..Default::default()
        })
        .unwrap();
        let dir = c.dir.path().to_owned();
        drop(c);
        assert!(!dir.exists(), "the certificates are removed on drop");
    }
}
