//! The names a client certificate carries, for the router's certificate-to-user rule
//! (docs/security.md, "Client certificates as identity").

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The names of `cert` that may name a user, in the order they are tried: the subject's
/// common names (CN), then the subject alternative names of type DNS, e-mail (RFC 822)
/// and URI. Empty if the certificate does not parse (rustls verified it before, so that
/// does not happen for a certificate it accepted).
pub fn cert_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, x509)) = X509Certificate::from_der(cert.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = x509
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .map(str::to_owned)
        .collect();
    if let Ok(Some(san)) = x509.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                    names.push((*s).to_owned())
                }
                _ => {}
            }
        }
    }
    names
}
