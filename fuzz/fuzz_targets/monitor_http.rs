//! The monitoring endpoint's request-head parser, query-string reader and credentials
//! parser (`tickwire_monitor::http::parse_head`, `split_target`, `Query`,
//! `credentials::parse_authorization`) on arbitrary bytes.
//!
//! Input: 2 bytes of head limit (1..=8192), then the bytes that arrived on a connection.
//!
//! Checks:
//! - `parse_head` never panics; it answers "incomplete" only below the limit;
//! - an accepted head is GET or HEAD, and its target is text from the input;
//! - every prefix of an accepted head's bytes is incomplete or accepted the same way
//!   (never refused as malformed while still arriving), as the server reads it in
//!   pieces;
//! - `split_target` gives back the target (path, then `?query`);
//! - `parse_authorization` (the `Authorization` header of an accepted head, and the
//!   whole input) never panics and keeps its bounds: a Basic user of 1 to 64 bytes
//!   without `:`, a password or token of at most 512 bytes;
//! - every key of the query, percent-decoded, is found by `Query::get` with its first
//!   value, decoded, and `Query::number` never exceeds its maximum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_monitor::credentials::{parse_authorization, Credentials, MAX_SECRET_LEN, MAX_USER_LEN};
use tickwire_monitor::http::{parse_head, split_target, Refusal};
use tickwire_monitor::query::percent_decode;
use tickwire_monitor::Query;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max = (usize::from(u16::from_le_bytes([data[0], data[1]])) % 8192) + 1;
    let input = &data[2..];
    let answer = parse_head(input, max);
    match answer {
        Ok(None) => assert!(input.len() < max, "incomplete at or past the limit"),
        Ok(Some(head)) => {
            assert!(head.method == "GET" || head.method == "HEAD", "{head:?}");
            let haystack = String::from_utf8_lossy(input);
            assert!(haystack.contains(head.target), "{head:?}");
            // The server reads in pieces: every prefix was awaited, or accepted alike
            // (checked on the shorter inputs: it is quadratic).
            let cuts = if input.len() <= 1024 { input.len() } else { 0 };
            for cut in 0..cuts {
                match parse_head(&input[..cut], max) {
                    Ok(None) => {}
                    Ok(Some(h)) => assert_eq!(h, head, "prefix {cut} accepted differently"),
                    Err(Refusal::TooLarge) => {}
                    Err(e) => panic!("prefix {cut} of an accepted head refused: {e:?}"),
                }
            }
            check_target(head.target);
            if let Some(value) = head.authorization {
                check_credentials(value);
            }
        }
        Err(_) => {}
    }
    // The query reader and the credentials parser on any bytes, not only on what the
    // head parser accepted.
    check_target(&String::from_utf8_lossy(input));
    check_credentials(input);
});

fn check_credentials(value: &[u8]) {
    match parse_authorization(value) {
        Ok(Credentials::Basic { user, password }) => {
            assert!(!user.is_empty() && user.len() <= MAX_USER_LEN && !user.contains(':'));
            assert!(password.len() <= MAX_SECRET_LEN);
        }
        Ok(Credentials::Bearer(token)) => {
            assert!(!token.is_empty() && token.len() <= MAX_SECRET_LEN);
        }
        Err(_) => {}
    }
}

fn check_target(target: &str) {
    let (path, query) = split_target(target);
    assert!(target.starts_with(path));
    let text = target.strip_prefix(path).unwrap_or("");
    let text = text.strip_prefix('?').unwrap_or(text);
    let mut seen: Vec<String> = Vec::new();
    for pair in text.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode(k);
        if !seen.iter().any(|s| *s == *k) {
            assert_eq!(
                query.get(&k).as_deref(),
                Some(&*percent_decode(v)),
                "key {k:?} of {target:?}"
            );
            seen.push(k.to_string());
        }
        assert!(query.number(&k, 7, 100) <= 100);
    }
    let standalone = Query::new(text);
    assert_eq!(standalone.get("limit"), query.get("limit"));
}
