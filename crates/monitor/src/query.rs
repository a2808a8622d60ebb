//! The query string of a monitoring request: `key=value` pairs split on `&`, keys and
//! values percent-decoded (`%3E` is `>`, `+` a space) as browsers and `curl
//! --data-urlencode` send them (new-user pass: `?pattern=c/%3E` matched nothing).

use std::borrow::Cow;

/// A borrowed query string.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<'a>(&'a str);

impl<'a> Query<'a> {
    /// Wraps the text after `?`.
    pub fn new(text: &'a str) -> Query<'a> {
        Query(text)
    }

    /// The first value of `key` (`Some("")` for a bare `key`), decoded.
    pub fn get(&self, key: &str) -> Option<Cow<'a, str>> {
        self.0.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == key).then(|| percent_decode(v))
        })
    }

    /// `key` as a number, `default` when absent or not a number, at most `max`.
    pub fn number(&self, key: &str, default: usize, max: usize) -> usize {
        self.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
            .min(max)
    }
}

/// `text` percent-decoded (`%XX` is that byte, `+` a space; a `%` not followed by two
/// hex digits stays as it is); bytes that do not form UTF-8 become U+FFFD. Borrowed when
/// there is nothing to decode. Linear in the text (which the HTTP server bounds).
pub fn percent_decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => match (
                b.get(i + 1).and_then(|&c| hex(c)),
                b.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    match String::from_utf8(out) {
        Ok(s) => Cow::Owned(s),
        Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_numbers_and_defaults() {
        let q = Query::new("offset=10&limit=abc&sort=msgs_out&flag");
        assert_eq!(q.get("sort").as_deref(), Some("msgs_out"));
        assert_eq!(q.get("flag").as_deref(), Some(""));
        assert_eq!(q.get("nope"), None);
        assert_eq!(q.number("offset", 0, 5), 5);
        assert_eq!(q.number("limit", 7, 100), 7);
        assert_eq!(Query::new("").get("").as_deref(), Some(""));
    }

    /// New-user pass: `?pattern=c/%3E` (what browsers and `curl --data-urlencode` send
    /// for `c/>`) matched nothing, and `sort=msgs%5Fout` was an unknown key.
    #[test]
    fn keys_and_values_are_percent_decoded() {
        let q = Query::new("pattern=c%2F%3E&sort=msgs%5Fout&so%72t2=x&name=a+b&bad=%4&odd=%zz%");
        assert_eq!(q.get("pattern").as_deref(), Some("c/>"));
        assert_eq!(q.get("sort").as_deref(), Some("msgs_out"));
        assert_eq!(q.get("sort2").as_deref(), Some("x"));
        assert_eq!(q.get("name").as_deref(), Some("a b"));
        assert_eq!(q.get("bad").as_deref(), Some("%4"));
        assert_eq!(q.get("odd").as_deref(), Some("%zz%"));
        assert_eq!(
            Query::new("p=%C3%A9%FF").get("p").as_deref(),
            Some("\u{e9}\u{fffd}")
        );
        assert!(matches!(q.get("name"), Some(Cow::Owned(_))));
        assert!(matches!(
            Query::new("a=b").get("a"),
            Some(Cow::Borrowed("b"))
        ));
    }

    proptest! {
        #[test]
        fn any_text_is_read_without_panicking_and_finds_what_was_put(
            text in "\\PC{0,80}", key in "[a-z]{1,6}", value in "[a-z0-9]{0,6}"
        ) {
            let q = Query::new(&text);
            let _ = q.get(&key);
            let _ = q.number(&key, 1, 10);
            let built = format!("{key}={value}&{text}");
            let got = Query::new(&built).get(&key);
            prop_assert_eq!(got.as_deref(), Some(value.as_str()));
        }
    }
}
