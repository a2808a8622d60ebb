//! The query string of a monitoring request: `key=value` pairs split on `&`, with no
//! percent-decoding (every key and value the endpoints accept is plain ASCII).

/// A borrowed query string.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<'a>(&'a str);

impl<'a> Query<'a> {
    /// Wraps the text after `?`.
    pub fn new(text: &'a str) -> Query<'a> {
        Query(text)
    }

    /// The first value of `key` (`Some("")` for a bare `key`).
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.0.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == key).then_some(v)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_numbers_and_defaults() {
        let q = Query::new("offset=10&limit=abc&sort=msgs_out&flag");
        assert_eq!(q.get("sort"), Some("msgs_out"));
        assert_eq!(q.get("flag"), Some(""));
        assert_eq!(q.get("nope"), None);
        assert_eq!(q.number("offset", 0, 5), 5);
        assert_eq!(q.number("limit", 7, 100), 7);
        assert_eq!(Query::new("").get(""), Some(""));
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
            prop_assert_eq!(Query::new(&built).get(&key), Some(value.as_str()));
        }
    }
}
