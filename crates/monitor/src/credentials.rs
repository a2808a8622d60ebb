//! The credentials of an HTTP `Authorization` header: `Basic` (RFC 7617, a user and a
//! password) or `Bearer` (RFC 6750, a token). The header is hostile input: parsing is
//! bounded (the head is at most [`crate::http::Limits::max_head_bytes`], and anything
//! longer than the limits below is refused before decoding), never panics, and never
//! shows a secret in `Debug`.

use base64::Engine;

/// Longest user name accepted (the router's limit for a login name).
pub const MAX_USER_LEN: usize = 64;
/// Longest password or token accepted (the router's limit for a secret).
pub const MAX_SECRET_LEN: usize = 512;

/// What an `Authorization` header offers.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user name and a password.
    Basic {
        /// The user name (UTF-8, 1 to [`MAX_USER_LEN`] bytes, no `:`).
        user: String,
        /// The password's bytes (at most [`MAX_SECRET_LEN`]).
        password: Vec<u8>,
    },
    /// A token (at most [`MAX_SECRET_LEN`] bytes).
    Bearer(Vec<u8>),
}

impl std::fmt::Debug for Credentials {
    // Never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Basic { user, .. } => f
                .debug_struct("Basic")
                .field("user", user)
                .finish_non_exhaustive(),
            Credentials::Bearer(_) => f.write_str("Bearer(..)"),
        }
    }
}

/// Why an `Authorization` header was not understood (the text of the 401 answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadCredentials {
    /// Neither `Basic` nor `Bearer`.
    #[error("unsupported authorization scheme (use Basic or Bearer)")]
    Scheme,
    /// Basic: not base64 of `user:password`, or a part out of bounds.
    #[error("malformed Basic credentials (base64 of user:password, user 1-64 bytes, password at most 512)")]
    Basic,
    /// Bearer: empty, too long or not a token.
    #[error("malformed Bearer token (1-512 visible characters)")]
    Bearer,
}

/// Parses an `Authorization` header's value. Pure; never panics.
pub fn parse_authorization(value: &[u8]) -> Result<Credentials, BadCredentials> {
    let value = value.trim_ascii();
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], value[i..].trim_ascii_start()),
        None => (value, &[][..]),
    };
    if scheme.eq_ignore_ascii_case(b"basic") {
        // base64 of at most 64 + 1 + 512 bytes.
        if rest.is_empty() || rest.len() > (MAX_USER_LEN + 1 + MAX_SECRET_LEN).div_ceil(3) * 4 {
            return Err(BadCredentials::Basic);
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| BadCredentials::Basic)?;
        let colon = decoded
            .iter()
            .position(|&b| b == b':')
            .ok_or(BadCredentials::Basic)?;
        let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
        let user = std::str::from_utf8(user).map_err(|_| BadCredentials::Basic)?;
        if user.is_empty() || user.len() > MAX_USER_LEN || password.len() > MAX_SECRET_LEN {
            return Err(BadCredentials::Basic);
        }
        Ok(Credentials::Basic {
            user: user.to_owned(),
            password: password.to_vec(),
        })
    } else if scheme.eq_ignore_ascii_case(b"bearer") {
        if rest.is_empty()
            || rest.len() > MAX_SECRET_LEN
            || !rest.iter().all(|b| b.is_ascii_graphic())
        {
            return Err(BadCredentials::Bearer);
        }
        Ok(Credentials::Bearer(rest.to_vec()))
    } else {
        Err(BadCredentials::Scheme)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn basic(user: &str, password: &[u8]) -> Vec<u8> {
        let mut plain = user.as_bytes().to_vec();
        plain.push(b':');
        plain.extend_from_slice(password);
        let mut v = b"Basic ".to_vec();
        v.extend(
            base64::engine::general_purpose::STANDARD
                .encode(plain)
                .bytes(),
        );
        v
    }

    #[test]
    fn basic_and_bearer_are_read_and_the_rest_refused() {
        assert_eq!(
            parse_authorization(&basic("ops", b"pa:ss")),
            Ok(Credentials::Basic {
                user: "ops".into(),
                password: b"pa:ss".to_vec()
            })
        );
        assert_eq!(
            parse_authorization(b"bearer  abc123 "),
            Ok(Credentials::Bearer(b"abc123".to_vec()))
        );
        assert_eq!(
            parse_authorization(b"Digest x"),
            Err(BadCredentials::Scheme)
        );
        assert_eq!(parse_authorization(b""), Err(BadCredentials::Scheme));
        assert_eq!(
            parse_authorization(b"Basic !!!"),
            Err(BadCredentials::Basic)
        );
        assert_eq!(
            parse_authorization(&basic("", b"x")),
            Err(BadCredentials::Basic)
        );
        assert_eq!(
            parse_authorization(&basic(&"u".repeat(65), b"x")),
            Err(BadCredentials::Basic)
        );
        assert_eq!(
            parse_authorization(&basic("u", &[b'p'; 513])),
            Err(BadCredentials::Basic)
        );
        // No colon at all.
        let mut v = b"Basic ".to_vec();
        v.extend(
            base64::engine::general_purpose::STANDARD
                .encode("nocolon")
                .bytes(),
        );
        assert_eq!(parse_authorization(&v), Err(BadCredentials::Basic));
        assert_eq!(parse_authorization(b"Bearer"), Err(BadCredentials::Bearer));
        assert_eq!(
            parse_authorization(b"Bearer a\x01b"),
            Err(BadCredentials::Bearer)
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let c = parse_authorization(&basic("ops", b"hunter2")).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        let t = parse_authorization(b"Bearer s3cr3t").unwrap();
        assert!(!format!("{t:?}").contains("s3cr3t"));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            match parse_authorization(&bytes) {
                Ok(Credentials::Basic { user, password }) => {
                    prop_assert!(!user.is_empty() && user.len() <= MAX_USER_LEN);
                    prop_assert!(password.len() <= MAX_SECRET_LEN);
                }
                Ok(Credentials::Bearer(t)) => prop_assert!(!t.is_empty() && t.len() <= MAX_SECRET_LEN),
                Err(_) => {}
            }
        }

        #[test]
        fn basic_round_trips(user in "[a-zA-Z0-9_.-]{1,64}", password in proptest::collection::vec(any::<u8>(), 0..512)) {
            prop_assert_eq!(
                parse_authorization(&basic(&user, &password)),
                Ok(Credentials::Basic { user: user.clone(), password: password.clone() })
            );
        }
    }
}
