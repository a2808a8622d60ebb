//! tickwire TLS: rustls configurations built from PEM files, with errors that name the
//! file and what is wrong with it, and [`TlsIo`], a non-blocking TLS stream adapter for
//! the router's event loop and the client.
//!
//! [`TlsIo`] keeps the plaintext transports' batching: one `read(2)` fills a ciphertext
//! buffer as large as the caller's (rustls alone would read 4 KiB per call), the records
//! in it are decrypted from memory, and every write of queued records is one
//! `writev(2)`. Its buffers are bounded: at most [`MAX_CIPHER_BUFFER`] of ciphertext,
//! rustls' own 64 KiB limit on a handshake message and 16 KiB of decrypted plaintext, and
//! [`SEND_BUFFER_LIMIT`] of records waiting for the socket. A peer that sends something
//! that is not TLS gets an error from the first read that sees it.
//!
//! The handshake is rustls' (TLS 1.3 and 1.2, the `ring` provider); this crate parses
//! nothing itself but the names of a verified client certificate ([`cert_names`], with
//! `x509-parser`).
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, Connection, RootCertStore, ServerConfig};

mod names;
pub use names::cert_names;

/// Most ciphertext read from the socket at once and held before decryption.
pub const MAX_CIPHER_BUFFER: usize = 256 * 1024;
/// Most bytes of encrypted records waiting for the socket; a write beyond it accepts
/// nothing (`WouldBlock`) until the socket takes them.
pub const SEND_BUFFER_LIMIT: usize = 256 * 1024;
/// Socket reads per [`TlsIo::read`] call at most (then `Interrupted`: call again).
const MAX_READS_PER_CALL: usize = 8;

/// Where a relative path was looked for: the current directory, which a config file's
/// paths are relative to too (new-user pass: `tls_cert = "router.pem"` in a file run
/// from another directory said only "No such file").
fn relative_note(path: &std::path::Path) -> String {
    if path.is_absolute() {
        return String::new();
    }
    match std::env::current_dir() {
        Ok(dir) => format!(
            " (a relative path: read from the current directory, {}; paths in a config file \
             are too)",
            dir.display()
        ),
        Err(_) => " (a relative path: read from the current directory)".to_owned(),
    }
}

/// Errors building a TLS configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read the {what} file {}{}: {source}", path.display(), relative_note(path))]
    Read {
        /// What the file should hold ("certificate", "private key", "CA").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("the {what} file {path} holds no {expected}: {detail}")]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM kind expected.
        expected: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// rustls refused the certificates or keys (a key that does not match its
    /// certificate, an unsupported key type, a CA certificate that does not parse).
    #[error("{context}: {}", setup_reason(.reason))]
    Rustls {
        /// What was being set up.
        context: String,
        /// rustls' reason, in the message already (not an error source: a chain
        /// printed it twice, "...its own key): keys may not be consistent: KeyMismatch").
        reason: rustls::Error,
    },
    /// A client-certificate verifier could not be built from the CA file.
    #[error("the client CA file {path}: {detail}")]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// The server name to verify is not a DNS name or an IP address.
    #[error("invalid TLS server name {0:?}: a DNS name or an IP address (--server-name)")]
    ServerName(String),
    /// An option that needs another one is alone.
    #[error("{0}")]
    Usage(String),
}

/// Whether the router asks TLS clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// No client certificates (the default).
    #[default]
    None,
    /// A client may present one; it must then be signed by the client CA.
    Optional,
    /// Every client must present one signed by the client CA.
    Required,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<ClientAuth, String> {
        match s {
            "none" => Ok(ClientAuth::None),
            "optional" => Ok(ClientAuth::Optional),
            "required" => Ok(ClientAuth::Required),
            _ => Err(format!(
                "unknown client-certificate policy {s:?}: expected none, optional or required"
            )),
        }
    }
}

impl std::fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Optional => "optional",
            ClientAuth::Required => "required",
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// The certificates of a PEM file (at least one).
pub fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read_file(what, path)?;
    let pem_err = |detail: String| Error::Pem {
        what,
        path: path.to_owned(),
        expected: "PEM certificate (-----BEGIN CERTIFICATE-----)",
        detail,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_err("no certificate found".into()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let pem = read_file("private key", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| Error::Pem {
        what: "private key",
        path: path.to_owned(),
        expected: "PEM private key (-----BEGIN PRIVATE KEY-----)",
        detail: e.to_string(),
    })
}

fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(what, path)? {
        roots.add(c).map_err(|source| Error::Rustls {
            context: format!("the {what} file {}", path.display()),
            reason: source,
        })?;
    }
    Ok(roots)
}

/// What a TLS listener serves: its certificate chain and key, and how it verifies
/// client certificates.
#[derive(Debug, Clone, Default)]
pub struct ServerFiles {
    /// PEM certificate chain, the router's own first.
    pub cert: Option<PathBuf>,
    /// PEM private key of the first certificate.
    pub key: Option<PathBuf>,
    /// PEM certificates of the CAs that sign client certificates.
    pub client_ca: Option<PathBuf>,
    /// Whether clients present certificates.
    pub client_auth: ClientAuth,
}

/// Builds the router's TLS configuration from `files`.
pub fn server_config(files: &ServerFiles) -> Result<Arc<ServerConfig>, Error> {
    let (Some(cert), Some(key)) = (&files.cert, &files.key) else {
        return Err(Error::Usage(
            "a TLS listener needs tls_cert and tls_key (--tls-cert FILE --tls-key FILE)".into(),
        ));
    };
    let chain = load_certs("certificate", cert)?;
    let key_der = load_key(key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| Error::Rustls {
            context: "TLS protocol versions".into(),
            reason: source,
        })?;
    let builder = match (files.client_auth, &files.client_ca) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(Error::Usage(format!(
                "tls_client_auth = \"{}\" needs tls_client_ca (--tls-client-ca FILE): the CAs that sign client certificates",
                files.client_auth
            )))
        }
        (auth, Some(ca)) => {
            let roots = Arc::new(roots("client CA", ca)?);
            let b = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let b = if auth == ClientAuth::Optional {
                b.allow_unauthenticated()
            } else {
                b
            };
            let verifier = b.build().map_err(|e| Error::ClientCa {
                path: ca.clone(),
                detail: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key_der)
        .map_err(|source| Error::Rustls {
            context: format!(
                "the certificate {} and the key {}",
                cert.display(),
                key.display()
            ),
            reason: source,
        })?;
    // Tickets would make resumed sessions skip the client certificate check's logging;
    // a router's clients connect once and stay.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// What a TLS client trusts and presents.
#[derive(Debug, Clone, Default)]
pub struct ClientFiles {
    /// PEM certificates of the CAs that sign the router's certificate (required).
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain, for a router that asks for one.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
}

/// Builds a client's TLS configuration from `files`.
pub fn client_config(files: &ClientFiles) -> Result<Arc<ClientConfig>, Error> {
    let Some(ca) = &files.ca else {
        return Err(Error::Usage(
            "TLS needs the CA that signed the router's certificate: --ca FILE".into(),
        ));
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| Error::Rustls {
            context: "TLS protocol versions".into(),
            reason: source,
        })?
        .with_root_certificates(roots("CA", ca)?);
    let config = match (&files.cert, &files.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(load_certs("client certificate", cert)?, load_key(key)?)
            .map_err(|source| Error::Rustls {
                context: format!(
                    "the client certificate {} and the key {}",
                    cert.display(),
                    key.display()
                ),
                reason: source,
            })?,
        _ => {
            return Err(Error::Usage(
                "a client certificate needs both --cert FILE and --key FILE".into(),
            ))
        }
    };
    Ok(Arc::new(config))
}

/// `name` as the server name a client verifies the router's certificate against.
pub fn server_name(name: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(name.to_owned()).map_err(|_| Error::ServerName(name.to_owned()))
}

/// A TLS connection over a non-blocking byte stream the caller owns (passed to each
/// call), read and written like that stream: `WouldBlock` when nothing can move now,
/// `Ok(0)` from [`TlsIo::read`] at the end of the stream.
///
/// After a [`TlsIo::write`] (or a read that advanced the handshake) encrypted bytes may
/// still wait for the socket: [`TlsIo::wants_write`] says so, and [`TlsIo::flush_tls`]
/// sends them when the socket is writable again.
pub struct TlsIo {
    conn: Connection,
    /// Ciphertext read from the socket and not yet handed to rustls: `cipher[start..end]`.
    cipher: Vec<u8>,
    start: usize,
    end: usize,
    /// The socket reported its end (or the peer sent close_notify).
    eof: bool,
    /// The last socket read filled the buffer.
    unread: bool,
}

impl std::fmt::Debug for TlsIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIo")
            .field("handshaking", &self.conn.is_handshaking())
            .field("buffered", &(self.end - self.start))
            .finish()
    }
}

/// The first ciphertext buffer; it doubles while reads fill it, up to the caller's
/// buffer size (at most [`MAX_CIPHER_BUFFER`]).
const INITIAL_CIPHER_BUFFER: usize = 4096;

impl TlsIo {
    /// A new server side of a connection.
    pub fn server(config: Arc<ServerConfig>) -> Result<TlsIo, rustls::Error> {
        Ok(TlsIo::new(Connection::Server(
            rustls::ServerConnection::new(config)?,
        )))
    }

    /// A new client side, verifying the router's certificate against `name`.
    pub fn client(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> Result<TlsIo, rustls::Error> {
        Ok(TlsIo::new(Connection::Client(
            rustls::ClientConnection::new(config, name)?,
        )))
    }

    fn new(mut conn: Connection) -> TlsIo {
        conn.set_buffer_limit(Some(SEND_BUFFER_LIMIT));
        TlsIo {
            conn,
            cipher: Vec::new(),
            start: 0,
            end: 0,
            eof: false,
            unread: false,
        }
    }

    /// The handshake is not finished yet.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The peer's verified certificate chain (its own first), once the handshake is done.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.conn.peer_certificates()
    }

    /// Encrypted bytes wait for the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Decrypted bytes, or ciphertext not yet decrypted, are buffered: a read returns
    /// something without the socket.
    pub fn has_buffered_input(&mut self) -> bool {
        self.start < self.end
            || self
                .conn
                .process_new_packets()
                .is_ok_and(|s| s.plaintext_bytes_to_read() > 0)
    }

    /// Reads plaintext into `buf`: what is decrypted already, then one socket read at a
    /// time (each up to `buf.len()` of ciphertext, at most [`MAX_CIPHER_BUFFER`]) until
    /// `buf` is full, the socket has nothing more (`WouldBlock`, or a read shorter than
    /// the space offered) or several reads were made; [`TlsIo::socket_unread`] then says
    /// whether the socket may still hold bytes. `Ok(0)` is the end of the stream.
    ///
    /// Errors: `InvalidData` for a TLS failure (the peer sent something that is not
    /// TLS, a certificate was refused: the text says which; the alert is sent first),
    /// `Interrupted` when several socket reads produced no plaintext (call again).
    pub fn read<S: Read + Write>(&mut self, sock: &mut S, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        let mut reads = 0;
        loop {
            filled += self.plaintext(&mut buf[filled..])?;
            if filled == buf.len() {
                return Ok(filled);
            }
            if self.start < self.end {
                self.decrypt(sock)?;
                continue;
            }
            if self.eof {
                return Ok(filled);
            }
            if (reads > 0 && !self.unread) || reads == MAX_READS_PER_CALL {
                return match filled {
                    0 if self.unread => Err(io::ErrorKind::Interrupted.into()),
                    0 => Err(io::ErrorKind::WouldBlock.into()),
                    n => Ok(n),
                };
            }
            // The buffer: as large as the caller's space, within bounds.
            let want = buf.len().clamp(INITIAL_CIPHER_BUFFER, MAX_CIPHER_BUFFER);
            if self.cipher.len() < want {
                self.cipher.resize(want, 0);
            }
            reads += 1;
            match sock.read(&mut self.cipher) {
                Ok(0) => {
                    self.eof = true;
                    self.unread = false;
                    // Tells rustls: reading on reports close_notify or an unexpected end.
                    let _ = self.conn.read_tls(&mut io::empty());
                }
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                    self.unread = n == self.cipher.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.unread = false;
                    return if filled == 0 { Err(e) } else { Ok(filled) };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The last socket read filled the ciphertext buffer: the socket may hold more
    /// (a read shorter than `buf` does not then mean the socket is drained).
    pub fn socket_unread(&self) -> bool {
        self.unread
    }

    /// Decrypted bytes into `buf`; notes the end of the stream.
    fn plaintext(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match self.conn.reader().read(buf) {
            Ok(0) => {
                // close_notify received.
                self.eof = true;
                Ok(0)
            }
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            // The socket ended without close_notify: an end of stream all the same.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                self.eof = true;
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Hands buffered ciphertext to rustls (as much as it takes) and processes it;
    /// sends what the handshake answers.
    fn decrypt<S: Read + Write>(&mut self, sock: &mut S) -> io::Result<()> {
        let mut input = &self.cipher[self.start..self.end];
        let before = input.len();
        match self.conn.read_tls(&mut input) {
            Ok(0) if before > 0 => {
                // After close_notify nothing more is read: drop the rest.
                self.start = 0;
                self.end = 0;
                self.eof = true;
                return Ok(());
            }
            Ok(_) => {}
            // Decrypted plaintext is full: the caller takes it first.
            Err(e) if e.kind() == io::ErrorKind::Other => {}
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("TLS: {e}"),
                ))
            }
        }
        self.start += before - input.len();
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if let Err(e) = self.conn.process_new_packets() {
            // The alert, if any, in one try: the connection is over anyway.
            let _ = self.conn.write_tls(sock);
            // After the handshake it is not "handshake failed" (hostile-input pass: a
            // client that asked to renegotiate and gave up at the refusal was logged
            // as a handshake with no cipher suite in common).
            // TLS 1.2 only: under 1.3 a client's handshake is complete before the
            // router has checked its certificate, whose refusal then comes as an alert.
            let renegotiable =
                self.conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_2);
            let text = match !self.conn.is_handshaking() && renegotiable {
                true => describe_after_handshake(&e),
                false => describe(&e),
            };
            return Err(io::Error::new(io::ErrorKind::InvalidData, text));
        }
        // The handshake's answer (a few records): until the socket stops taking them.
        while self.conn.wants_write() {
            match self.conn.write_tls(sock) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Encrypts what of `buf` fits the send buffer and writes the queued records with
    /// one `writev`. Records still queued from before are written first; if the socket
    /// takes none of them, nothing new is accepted (`WouldBlock`).
    pub fn write<S: Write>(&mut self, sock: &mut S, buf: &[u8]) -> io::Result<usize> {
        if self.conn.wants_write() {
            self.conn.write_tls(sock)?;
            if self.conn.wants_write() && !self.conn.is_handshaking() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        let n = self.conn.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match self.conn.write_tls(sock) {
            Ok(_) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            Err(e) => Err(e),
        }
    }

    /// Writes queued records (one `writev`). Returns true if some still wait.
    pub fn flush_tls<S: Write>(&mut self, sock: &mut S) -> io::Result<bool> {
        if self.conn.wants_write() {
            match self.conn.write_tls(sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.conn.wants_write())
    }

    /// Queues a close_notify alert (sent by the next write or flush).
    pub fn send_close_notify(&mut self) {
        self.conn.send_close_notify();
    }
}

/// Why rustls refused a certificate and key at set-up, in words (a key that does not
/// match its certificate was "keys may not be consistent: KeyMismatch").
fn setup_reason(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => describe(e),
        e => e.to_string(),
    }
}

/// The settings a [`describe_with`] text points to, in its program's words.
#[derive(Debug, Clone, Copy)]
pub struct Hints {
    /// Where the trusted CAs are set.
    pub ca: &'static str,
    /// Where the name the server's certificate must hold comes from.
    pub server_name: &'static str,
    /// Where a client certificate and its key are set.
    pub client_cert: &'static str,
}

/// The router's and the client commands' settings ([`describe`]).
pub const ROUTER_HINTS: Hints = Hints {
    ca: "--ca / tls_client_ca",
    server_name: "--server-name",
    client_cert: "--cert FILE --key FILE",
};

/// A TLS failure in words a person can act on: which certificate check failed, or that
/// the peer does not speak TLS; hints name the router's and clients' flags.
pub fn describe(e: &rustls::Error) -> String {
    describe_with(e, &ROUTER_HINTS)
}

/// [`describe`] of a failure on a TLS 1.2 session whose handshake completed: a
/// HandshakeFailure alert then ends a renegotiation (which is refused) that the peer
/// gave up, not a handshake with nothing in common.
pub fn describe_after_handshake(e: &rustls::Error) -> String {
    match e {
        rustls::Error::AlertReceived(a @ rustls::AlertDescription::HandshakeFailure) => format!(
            "TLS failed after the handshake: the peer ended the session with the alert {a:?} \
             (it asked for a new handshake, a renegotiation, which is refused, and gave up?)"
        ),
        _ => describe(e),
    }
}

/// [`describe`], its hints naming `hints`' settings (the FIX engine's are QuickFIX's).
pub fn describe_with(e: &rustls::Error, hints: &Hints) -> String {
    use rustls::{CertificateError, Error as E};
    match e {
        E::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "TLS handshake failed: the peer's certificate is not signed by a trusted CA (check {})",
            hints.ca
        ),
        E::InvalidCertificate(CertificateError::NotValidForName)
        | E::InvalidCertificate(CertificateError::NotValidForNameContext { .. }) => {
            format!(
                "TLS handshake failed: the peer's certificate is not valid for the server name (check {}): {e}",
                hints.server_name
            )
        }
        E::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => format!("TLS handshake failed: the peer's certificate has expired: {e}"),
        E::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => format!("TLS handshake failed: the peer's certificate is not valid yet: {e}"),
        E::InvalidCertificate(CertificateError::Revoked) => {
            "TLS handshake failed: the peer's certificate has been revoked (it is on the certificate revocation list)".into()
        }
        E::InvalidCertificate(
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. },
        ) => format!(
            "TLS handshake failed: the peer's certificate is not for this use (a server certificate where a client one is needed, or the reverse: its extended key usage): {e}"
        ),
        E::InvalidCertificate(CertificateError::BadSignature) => {
            "TLS handshake failed: the peer's certificate is not correctly signed by its issuer".into()
        }
        // The verifier's other refusals come as text: say the one a person meets most
        // (a CA's own certificate presented as a client or server certificate) plainly.
        E::InvalidCertificate(CertificateError::Other(o))
            if o.to_string().contains("CaUsedAsEndEntity") =>
        {
            "TLS handshake failed: the peer presented a CA certificate as its own (present the certificate the CA issued to it, with that certificate's key)".into()
        }
        E::InvalidCertificate(CertificateError::Other(o))
            if o.to_string().contains("EndEntityUsedAsCa") =>
        {
            "TLS handshake failed: the peer's certificate chain has a certificate that is not a CA's signing another (an end-entity certificate used as an intermediate: issue the certificate from the CA itself, or from an intermediate CA certificate)".into()
        }
        E::InvalidCertificate(c) => {
            format!("TLS handshake failed: the peer's certificate was refused: {c}")
        }
        E::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            "the private key does not belong to the certificate (check that the key file given with it is this certificate's private key)".into()
        }
        E::NoCertificatesPresented => format!(
            "TLS handshake failed: no client certificate presented, and this listener requires one ({})",
            hints.client_cert
        ),
        // Sizes first: a record or handshake message over the limits is TLS, only too
        // large (a probe's 16 MiB ClientHello read as "does not speak TLS").
        E::InvalidMessage(
            m @ (rustls::InvalidMessage::MessageTooLarge
            | rustls::InvalidMessage::HandshakePayloadTooLarge
            | rustls::InvalidMessage::CertificatePayloadTooLarge),
        ) => format!("TLS failed: the peer sent a TLS message larger than allowed ({m:?}): {e}"),
        E::InvalidMessage(_) => {
            format!("TLS handshake failed: the peer does not speak TLS (or sent a corrupt record; a plaintext port? the router's TLS clients connect to its --tls-listen address): {e}")
        }
        E::AlertReceived(a) if is_certificate_alert(*a) => format!(
            "TLS handshake failed: the peer refused the connection with the alert {a:?} (a certificate it does not trust, or no certificate where one is required)"
        ),
        E::AlertReceived(a @ rustls::AlertDescription::HandshakeFailure) => format!(
            "TLS handshake failed: the peer refused the handshake with the alert {a:?} (no TLS version or cipher suite in common, or a certificate it would not accept)"
        ),
        // Any other alert says what the peer objected to, not a certificate (a refused
        // renegotiation read as "does not trust a certificate": probe).
        E::AlertReceived(a) => format!("TLS failed: the peer ended the session with the alert {a:?}"),
        _ => format!("TLS failed: {e}"),
    }
}

/// Alerts a peer sends about a certificate (ours, or the lack of one).
fn is_certificate_alert(a: rustls::AlertDescription) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        a,
        A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired
            | A::AccessDenied
            | A::BadCertificateStatusResponse
            | A::BadCertificateHashValue
            | A::CertificateUnobtainable
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Hostile-input probe: a refused renegotiation was logged as a certificate the
    /// peer does not trust, and an oversized ClientHello as a peer not speaking TLS.
    #[test]
    fn failures_are_described_by_what_they_are() {
        use rustls::{AlertDescription as A, Error as E, InvalidMessage as M};
        let d = |e: E| describe(&e);
        assert!(d(E::AlertReceived(A::UnknownCA)).contains("a certificate it does not trust"));
        assert!(d(E::AlertReceived(A::CertificateRequired)).contains("no certificate where"));
        let reneg = d(E::AlertReceived(A::NoRenegotiation));
        assert!(
            reneg.contains("ended the session with the alert NoRenegotiation")
                && !reneg.contains("certificate"),
            "{reneg}"
        );
        assert!(d(E::AlertReceived(A::HandshakeFailure)).contains("in common"));
        // Hostile-input pass: after the handshake, the same alert (a refused
        // renegotiation given up) is no handshake failure.
        let after = describe_after_handshake(&E::AlertReceived(A::HandshakeFailure));
        assert!(
            after.contains("after the handshake") && after.contains("renegotiation"),
            "{after}"
        );
        assert_eq!(
            describe_after_handshake(&E::AlertReceived(A::UnknownCA)),
            d(E::AlertReceived(A::UnknownCA))
        );
        // Hostile-input pass: rustls's Debug form leaked.
        let chain = d(E::InvalidCertificate(rustls::CertificateError::Other(
            rustls::OtherError(std::sync::Arc::new(std::io::Error::other(
                "EndEntityUsedAsCa",
            ))),
        )));
        assert!(chain.contains("not a CA's signing another"), "{chain}");
        // New-user pass: rustls's own words leaked ("keys may not be consistent:
        // KeyMismatch", "Other(OtherError(CaUsedAsEndEntity))").
        let mismatch = d(E::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch));
        assert!(
            mismatch.contains("does not belong to the certificate")
                && mismatch.contains("is this certificate's private key"),
            "{mismatch}"
        );
        // ...and once more through the error chain (a second new-user pass: printed
        // with its causes it ended "...own key): keys may not be consistent:
        // KeyMismatch"). The reason is in the message, not a source.
        let set_up = Error::Rustls {
            context: "the certificate c.pem and the key k.pem".into(),
            reason: E::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch),
        };
        assert!(std::error::Error::source(&set_up).is_none());
        assert!(!set_up.to_string().contains("KeyMismatch"), "{set_up}");
        let ca = d(E::InvalidCertificate(rustls::CertificateError::Other(
            rustls::OtherError(std::sync::Arc::new(std::io::Error::other(
                "CaUsedAsEndEntity",
            ))),
        )));
        assert!(ca.contains("presented a CA certificate as its own"), "{ca}");
        let purpose = d(E::InvalidCertificate(
            rustls::CertificateError::InvalidPurpose,
        ));
        assert!(purpose.contains("not for this use"), "{purpose}");
        let big = d(E::InvalidMessage(M::HandshakePayloadTooLarge));
        assert!(
            big.contains("larger than allowed") && !big.contains("does not speak TLS"),
            "{big}"
        );
        assert!(d(E::InvalidMessage(M::InvalidContentType)).contains("does not speak TLS"));
    }

    /// One direction of an in-memory non-blocking socket pair: `WouldBlock` when empty.
    #[derive(Default)]
    struct Pipe {
        bytes: VecDeque<u8>,
        /// Most bytes one write takes (a socket buffer).
        room: usize,
    }

    /// One end: reads `inbound`, writes `outbound`.
    struct End<'a> {
        inbound: &'a mut Pipe,
        outbound: &'a mut Pipe,
    }

    impl Read for End<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.inbound.bytes.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.inbound.bytes.len());
            for (b, v) in buf.iter_mut().zip(self.inbound.bytes.drain(..n)) {
                *b = v;
            }
            Ok(n)
        }
    }

    impl Write for End<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let free = self.outbound.room.saturating_sub(self.outbound.bytes.len());
            if free == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(free);
            self.outbound.bytes.extend(&buf[..n]);
            Ok(n)
        }
        /// Like `writev(2)`: as much of every buffer as there is room for.
        fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
            let mut total = 0;
            for b in bufs.iter().filter(|b| !b.is_empty()) {
                match self.write(b) {
                    Ok(n) => {
                        total += n;
                        if n < b.len() {
                            break;
                        }
                    }
                    Err(e) if total == 0 => return Err(e),
                    Err(_) => break,
                }
            }
            Ok(total)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Pki {
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
    }

    fn pki(tag: &str) -> Pki {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("tickwire-tls-{tag}-"))
            .tempdir()
            .unwrap();
        let dir = scratch.path();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let files = ServerFiles {
            cert: Some(write("router.pem", leaf.pem())),
            key: Some(write("router.key", key.serialize_pem())),
            ..ServerFiles::default()
        };
        let client = ClientFiles {
            ca: Some(write("ca.pem", ca.pem())),
            ..ClientFiles::default()
        };
        // Read before `scratch` (the files' directory) drops at the end of the block.
        Pki {
            server: server_config(&files).unwrap(),
            client: client_config(&client).unwrap(),
        }
    }

    /// One side's turn: flush its records, read what came. True if it read something.
    fn step(
        io: &mut TlsIo,
        inbound: &mut Pipe,
        outbound: &mut Pipe,
        buf: &mut [u8],
        got: &mut Vec<u8>,
    ) -> bool {
        let mut end = End { inbound, outbound };
        io.flush_tls(&mut end).unwrap();
        match io.read(&mut end, buf) {
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                n > 0
            }
            Err(e) => {
                let kind = e.kind();
                assert!(
                    matches!(kind, io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
                    "{e}"
                );
                false
            }
        }
    }

    /// Moves bytes both ways until neither side makes progress; returns what each
    /// side read.
    fn pump(
        c: &mut TlsIo,
        s: &mut TlsIo,
        c2s: &mut Pipe,
        s2c: &mut Pipe,
        got_c: &mut Vec<u8>,
        got_s: &mut Vec<u8>,
    ) {
        let mut buf = vec![0u8; 8192];
        for _ in 0..1000 {
            let progress = step(c, s2c, c2s, &mut buf, got_c) | step(s, c2s, s2c, &mut buf, got_s);
            let idle = c2s.bytes.is_empty() && s2c.bytes.is_empty();
            if !progress && idle && !c.wants_write() && !s.wants_write() {
                return;
            }
        }
    }

    #[test]
    fn a_client_and_a_server_exchange_bytes_through_small_socket_buffers() {
        let pki = pki("pair");
        let mut c = TlsIo::client(pki.client.clone(), server_name("localhost").unwrap()).unwrap();
        let mut s = TlsIo::server(pki.server.clone()).unwrap();
        let (mut c2s, mut s2c) = (
            Pipe {
                room: 1500,
                ..Pipe::default()
            },
            Pipe {
                room: 1500,
                ..Pipe::default()
            },
        );
        let (mut got_c, mut got_s) = (Vec::new(), Vec::new());
        // Written before the handshake: buffered, sent once it ends.
        let hello: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut sent = 0;
        while sent < hello.len() {
            let mut end = End {
                inbound: &mut s2c,
                outbound: &mut c2s,
            };
            match c.write(&mut end, &hello[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            pump(&mut c, &mut s, &mut c2s, &mut s2c, &mut got_c, &mut got_s);
        }
        pump(&mut c, &mut s, &mut c2s, &mut s2c, &mut got_c, &mut got_s);
        assert!(!s.is_handshaking());
        assert_eq!(got_s, hello);
        let mut end = End {
            inbound: &mut c2s,
            outbound: &mut s2c,
        };
        let n = s.write(&mut end, b"welcome").unwrap();
        assert_eq!(n, 7);
        pump(&mut c, &mut s, &mut c2s, &mut s2c, &mut got_c, &mut got_s);
        assert_eq!(got_c, b"welcome");
    }

    #[test]
    fn a_client_refuses_a_certificate_for_another_name() {
        let pki = pki("name");
        let mut c = TlsIo::client(pki.client.clone(), server_name("elsewhere").unwrap()).unwrap();
        let mut s = TlsIo::server(pki.server.clone()).unwrap();
        let (mut c2s, mut s2c) = (
            Pipe {
                room: 1 << 20,
                ..Pipe::default()
            },
            Pipe {
                room: 1 << 20,
                ..Pipe::default()
            },
        );
        let mut buf = [0u8; 4096];
        let mut err = None;
        for _ in 0..10 {
            let _ = c.flush_tls(&mut End {
                inbound: &mut s2c,
                outbound: &mut c2s,
            });
            let mut end = End {
                inbound: &mut c2s,
                outbound: &mut s2c,
            };
            let _ = s.read(&mut end, &mut buf);
            let _ = s.flush_tls(&mut end);
            if let Err(e) = c.read(
                &mut End {
                    inbound: &mut s2c,
                    outbound: &mut c2s,
                },
                &mut buf,
            ) {
                if e.kind() == io::ErrorKind::InvalidData {
                    err = Some(e.to_string());
                    break;
                }
            }
        }
        let err = err.expect("the handshake fails");
        assert!(err.contains("not valid for the server name"), "{err}");
    }

    #[test]
    fn missing_or_broken_files_are_named_in_the_error() {
        let e = client_config(&ClientFiles::default()).unwrap_err();
        assert!(e.to_string().contains("--ca FILE"), "{e}");
        let e = client_config(&ClientFiles {
            ca: Some("/nonexistent/ca.pem".into()),
            ..ClientFiles::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let e = server_config(&ServerFiles {
            cert: Some("/nonexistent/c.pem".into()),
            key: Some("/nonexistent/k.pem".into()),
            ..ServerFiles::default()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("certificate file /nonexistent/c.pem: "),
            "{e}"
        );
        // A relative path says where it was looked for (new-user pass).
        let e = server_config(&ServerFiles {
            cert: Some("no-such-router.pem".into()),
            key: Some("no-such-router.key".into()),
            ..ServerFiles::default()
        })
        .unwrap_err();
        let cwd = std::env::current_dir().unwrap();
        assert!(
            e.to_string().contains(&format!(
                "certificate file no-such-router.pem (a relative path: read from the current \
                 directory, {}; paths in a config file are too): ",
                cwd.display()
            )),
            "{e}"
        );
        let e = server_config(&ServerFiles {
            client_auth: ClientAuth::Required,
            ..ServerFiles::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("tls_cert"), "{e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever a peer sends instead of a ClientHello, the server side never panics,
        /// holds at most its bounded buffers, and ends with an error or still waits.
        #[test]
        fn hostile_bytes_before_the_handshake_are_refused_within_bounds(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..20_000), 1..8)
        ) {
            let pki = hostile_pki();
            let mut s = TlsIo::server(pki.server.clone()).unwrap();
            let (mut inbound, mut outbound) = (Pipe::default(), Pipe { room: 1 << 20, ..Pipe::default() });
            let mut buf = vec![0u8; 4096];
            for chunk in chunks {
                inbound.bytes.extend(chunk);
                let r = s.read(&mut End { inbound: &mut inbound, outbound: &mut outbound }, &mut buf);
                proptest::prop_assert!(s.cipher.len() <= MAX_CIPHER_BUFFER);
                match r {
                    Err(e) if e.kind() == io::ErrorKind::InvalidData => break,
                    Err(e) => proptest::prop_assert!(matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted), "{}", e),
                    // No plaintext can come before a handshake.
                    Ok(n) => proptest::prop_assert_eq!(n, 0),
                }
            }
        }
    }

    fn hostile_pki() -> &'static Pki {
        static PKI: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();
        PKI.get_or_init(|| pki("hostile"))
    }
}
