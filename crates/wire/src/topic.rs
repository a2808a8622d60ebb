//! Topic and subscription-pattern syntax.
//!
//! A **topic** names a stream of messages: UTF-8 levels separated by `/`, such as
//! `md/NASDAQ/AAPL`. A **pattern** is what a client subscribes to; it is a topic whose
//! levels may also use two wildcards:
//!
//! | pattern level | matches |
//! |---|---|
//! | `AAPL`  | exactly the level `AAPL` |
//! | `*`     | any one level |
//! | `NAS*`  | any one level starting with `NAS`, including `NAS` itself |
//! | `>`     | one or more remaining levels (only as the last level) |
//!
//! So `md/>` matches `md/a` and `md/a/b` but not `md`, and the pattern `>` matches
//! every topic.
//!
//! Validation ([`validate_topic`], [`validate_pattern`]) runs once per published
//! message on the router's hot path: it never allocates and walks the bytes once for
//! the syntax, then hands them to the standard library's UTF-8 check (word-at-a-time
//! on ASCII; this crate forbids `unsafe`, so it cannot skip that check).
//! [`segments`] and [`pattern_matches`] take already validated input.

/// Longest topic or pattern, in bytes.
pub const MAX_TOPIC_BYTES: usize = 250;

/// Most levels in a topic or pattern.
///
/// Note: with [`MAX_TOPIC_BYTES`] = 250 a topic can hold at most 125 levels
/// (`a/a/…/a`), so the byte limit is always hit first; the level limit stays as a
/// separate guard should either constant change.
pub const MAX_LEVELS: usize = 128;

/// Why a byte string is not a valid topic or pattern. Always the peer's fault. The
/// texts name neither (the caller's prefix says which: "invalid pattern: empty").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// The topic has no bytes at all.
    #[error("empty")]
    Empty,
    /// The topic is longer than [`MAX_TOPIC_BYTES`].
    #[error("{len} bytes long, more than the limit of {MAX_TOPIC_BYTES}")]
    TooLong {
        /// Length of the rejected topic in bytes.
        len: usize,
    },
    /// The topic has more than [`MAX_LEVELS`] levels.
    #[error("{levels} levels, more than the limit of {MAX_LEVELS}")]
    TooManyLevels {
        /// Number of levels in the rejected topic.
        levels: usize,
    },
    /// A level is empty: the topic starts or ends with `/`, or contains `//`.
    #[error("level {} is empty (leading, trailing or doubled '/')", .level + 1)]
    EmptyLevel {
        /// Index (from 0) of the empty level.
        level: usize,
    },
    /// An ASCII control character (below 0x20, or 0x7f) appears in the topic.
    #[error("control character at byte {offset}")]
    ControlChar {
        /// Byte offset of the control character.
        offset: usize,
    },
    /// A publish topic contains `*` or `>`, which only subscription patterns may use.
    #[error(
        "wildcard character at byte {offset} of a publish topic ('*' and '>' are for patterns)"
    )]
    WildcardInTopic {
        /// Byte offset of the wildcard character.
        offset: usize,
    },
    /// A pattern uses `*` other than as the last character of a level, or `>` other
    /// than as the whole last level.
    #[error(
        "misplaced wildcard in level {} of the pattern \
         ('*' must end a level, '>' must be the whole last level)",
        .level + 1
    )]
    MisplacedWildcard {
        /// Index (from 0) of the offending level.
        level: usize,
    },
    /// The bytes are not valid UTF-8.
    #[error("topic is not valid UTF-8")]
    NotUtf8,
}

/// Checks `bytes` as a topic to publish to (no wildcards) and returns it as `&str`.
///
/// Never allocates; errors report the first fault from the left (length first).
#[inline]
pub fn validate_topic(bytes: &[u8]) -> Result<&str, TopicError> {
    validate::<false>(bytes, MAX_TOPIC_BYTES, MAX_LEVELS)
}

/// A topic checked against the topic rules once (for publishers that send to the
/// same topics over and over: `Client::publish_to` skips the per-message check).
///
/// ```
/// use tickwire_wire::topic::Topic;
/// let t = Topic::new("md/NASDAQ/AAPL/quote").unwrap();
/// assert_eq!(t.as_str(), "md/NASDAQ/AAPL/quote");
/// assert!(Topic::new("md/*/AAPL").is_err()); // wildcards are for subscriptions
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Topic(Box<str>);

impl Topic {
    /// Checks `topic` with [`validate_topic`] and keeps it (allocates once).
    pub fn new(topic: &str) -> Result<Topic, TopicError> {
        validate_topic(topic.as_bytes())?;
        Ok(Topic(topic.into()))
    }

    /// The topic text.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The last two topics that passed [`validate_topic`], so that a stream of messages on
/// one topic (the common case: a feed handler, a market-data line), or on two in turn (a
/// request and its reply), is checked once, not once per message. A hit costs a
/// comparison of the bytes with a remembered topic; a miss replaces the one used less
/// recently.
///
/// ```
/// use tickwire_wire::topic::TopicMemo;
/// let mut memo = TopicMemo::default();
/// assert_eq!(memo.validate(b"md/AAPL").unwrap(), "md/AAPL"); // checked
/// assert_eq!(memo.validate(b"md/AAPL").unwrap(), "md/AAPL"); // remembered
/// assert_eq!(memo.validate(b"md/MSFT").unwrap(), "md/MSFT"); // checked
/// assert_eq!(memo.validate(b"md/AAPL").unwrap(), "md/AAPL"); // still remembered
/// assert!(memo.validate(b"md//AAPL").is_err()); // a different topic is checked again
/// ```
#[derive(Debug, Clone, Default)]
pub struct TopicMemo {
    /// Each empty, or a topic that passed [`validate_topic`] (never longer than
    /// [`MAX_TOPIC_BYTES`], so each grows to at most that).
    last: [String; 2],
    /// The one a miss replaces: the one used less recently.
    next: usize,
}

impl TopicMemo {
    /// [`validate_topic`], answered from memory when `bytes` are one of the last two
    /// valid topics. An error leaves the remembered topics as they were.
    #[inline]
    pub fn validate<'a>(&'a mut self, bytes: &'a [u8]) -> Result<&'a str, TopicError> {
        if !self.last[0].is_empty() && same_bytes(self.last[0].as_bytes(), bytes) {
            self.next = 1;
            return Ok(&self.last[0]);
        }
        if !self.last[1].is_empty() && same_bytes(self.last[1].as_bytes(), bytes) {
            self.next = 0;
            return Ok(&self.last[1]);
        }
        self.remember(bytes)
    }

    /// The miss path: the full check, and the topic kept in place of the older one.
    #[inline(never)]
    fn remember<'a>(&'a mut self, bytes: &'a [u8]) -> Result<&'a str, TopicError> {
        let topic = validate_topic(bytes)?;
        let i = self.next;
        self.next ^= 1;
        self.last[i].clear();
        self.last[i].push_str(topic);
        Ok(topic)
    }
}

/// Whether two short byte strings (topics) are equal: `a == b`, inline.
///
/// The memos of the hot path ([`TopicMemo`], the router's subscription index, the
/// client's delivered-topic check) compare every message's topic with the last one.
/// For slices `==` calls the C library's `memcmp`, a call and a size dispatch that cost
/// the router ~10% of its time per message at 14M msg/s (perf, shared memory); a topic
/// is a few words, compared here by overlapping 8-byte (or 4-byte) loads without a call.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        if n >= 4 {
            return word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4);
        }
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let mut at = 0;
    while at + 8 < n {
        if word8(a, at) != word8(b, at) {
            return false;
        }
        at += 8;
    }
    // The last (possibly overlapping) word.
    word8(a, n - 8) == word8(b, n - 8)
}

#[inline(always)]
fn word8(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_ne_bytes(w)
}

#[inline(always)]
fn word4(s: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u32::from_ne_bytes(w)
}

/// Checks `bytes` as a subscription pattern and returns it as `&str`.
///
/// Never allocates; errors report the first fault from the left (length first).
#[inline]
pub fn validate_pattern(bytes: &[u8]) -> Result<&str, TopicError> {
    validate::<true>(bytes, MAX_TOPIC_BYTES, MAX_LEVELS)
}

/// One level of a validated pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// A level without wildcard: matches exactly this text.
    Literal(&'a str),
    /// A level ending in `*`: matches any level starting with this text (the text
    /// before the `*`; `""` for a bare `*`, which matches any one level).
    Prefix(&'a str),
    /// The level `>`: matches one or more remaining levels. Always the last segment.
    Rest,
}

/// Splits a pattern, already accepted by [`validate_pattern`], into its levels.
pub fn segments(pattern: &str) -> impl Iterator<Item = Segment<'_>> {
    pattern.split('/').map(|level| {
        if level == ">" {
            Segment::Rest
        } else if let Some(prefix) = level.strip_suffix('*') {
            Segment::Prefix(prefix)
        } else {
            Segment::Literal(level)
        }
    })
}

/// The first level of the system's own topics (the monitoring probe's
/// `_tickwire/probe/PID`). As MQTT does for `$SYS`, a pattern whose first level is a
/// wildcard (`>`, `*`, `pre*`) does not match them: only a pattern whose first level is
/// `_tickwire` does. So `sub '>'` does not see the probe's messages (200 a second),
/// and a permission of `>` does not reach them.
pub const SYSTEM_LEVEL: &str = "_tickwire";

/// The first level of a validated topic or pattern.
fn first_level(s: &str) -> &str {
    s.split_once('/').map_or(s, |(first, _)| first)
}

/// Whether a validated topic is one of the system's own ([`SYSTEM_LEVEL`]).
#[inline]
pub fn is_system_topic(topic: &str) -> bool {
    topic.starts_with(SYSTEM_LEVEL) && first_level(topic) == SYSTEM_LEVEL
}

/// Whether a validated pattern's first level is [`SYSTEM_LEVEL`] itself (the only
/// patterns that match system topics).
fn names_system(pattern: &str) -> bool {
    first_level(pattern) == SYSTEM_LEVEL
}

/// Whether `pattern` matches `topic`; both must already be validated.
///
/// One pass over the bytes of both, a byte compare per literal byte and a skip to the
/// next `/` per wildcard: its cost follows the bytes compared, not a per-level split
/// (a cache query for a 124-level pattern over 100,000 topics of 124 levels took
/// 312 ms with the level-splitting matcher; hostile-input probe). Tests hold it to
/// [`pattern_matches_by_levels`] and use it as the oracle for the router's
/// subscription index. A system topic ([`SYSTEM_LEVEL`]) is matched only by a pattern
/// that names its first level.
pub fn pattern_matches(pattern: &str, topic: &str) -> bool {
    if is_system_topic(topic) && !names_system(pattern) {
        return false;
    }
    let (p, t) = (pattern.as_bytes(), topic.as_bytes());
    // `i` and `j` are at the start of a level of each.
    let (mut i, mut j) = (0, 0);
    loop {
        // `>` is a whole last level: it takes the one or more levels left.
        if p.len() - i == 1 && p[i] == b'>' {
            return j < t.len();
        }
        if j >= t.len() {
            return false;
        }
        // One level.
        loop {
            match p.get(i) {
                None | Some(b'/') => match t.get(j) {
                    None | Some(b'/') => break,
                    Some(_) => return false,
                },
                // A `*` ends its level: the prefix before it matched; skip the rest
                // of the topic's level.
                Some(b'*') => {
                    i += 1;
                    while j < t.len() && t[j] != b'/' {
                        j += 1;
                    }
                    break;
                }
                Some(&c) => {
                    if t.get(j) != Some(&c) {
                        return false;
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        // Both at the end of a level.
        match (i < p.len(), j < t.len()) {
            (false, false) => return true,
            (true, true) => {
                i += 1;
                j += 1;
            }
            // Levels left on one side only.
            _ => return false,
        }
    }
}

/// [`pattern_matches`] level by level: the plain statement of the rules, kept as the
/// oracle the byte matcher is tested against.
pub fn pattern_matches_by_levels(pattern: &str, topic: &str) -> bool {
    if is_system_topic(topic) && !names_system(pattern) {
        return false;
    }
    let mut levels = topic.split('/');
    for segment in segments(pattern) {
        match segment {
            // `>` needs at least one level left, and then takes all of them.
            Segment::Rest => return levels.next().is_some(),
            Segment::Literal(text) => match levels.next() {
                Some(level) if level == text => {}
                _ => return false,
            },
            Segment::Prefix(prefix) => match levels.next() {
                Some(level) if level.starts_with(prefix) => {}
                _ => return false,
            },
        }
    }
    levels.next().is_none()
}

/// Whether every topic `inner` matches is also matched by `outer` (both validated
/// patterns): `md/>` covers `md/NASDAQ/*`, `md/*` does not cover `md/>`.
///
/// Permissions use it to decide a SUBSCRIBE once, at subscribe time: a pattern inside
/// an allowed pattern can only ever deliver allowed topics.
pub fn pattern_covers(outer: &str, inner: &str) -> bool {
    // `inner` naming the system's level matches only system topics, which `outer`
    // matches only if it names that level too.
    if names_system(inner) && !names_system(outer) {
        return false;
    }
    let (mut o, mut i) = (segments(outer), segments(inner));
    loop {
        match (o.next(), i.next()) {
            (None, None) => return true,
            // `>` takes one or more levels, and the rest of `inner` stands for at least one.
            (Some(Segment::Rest), Some(_)) => return true,
            // Nothing but `>` covers the unbounded depth of `>`.
            (Some(_), Some(Segment::Rest)) => return false,
            (Some(Segment::Literal(a)), Some(Segment::Literal(b))) if a == b => {}
            (Some(Segment::Prefix(p)), Some(Segment::Literal(b))) if b.starts_with(p) => {}
            (Some(Segment::Prefix(p)), Some(Segment::Prefix(q))) if q.starts_with(p) => {}
            _ => return false,
        }
    }
}

/// Whether some topic matches both patterns (both validated): `md/>` and `*/secret`
/// overlap (`md/secret`), `md/*` and `fx/*` do not.
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    // One naming the system's level matches system topics only; the other none.
    if names_system(a) != names_system(b) {
        return false;
    }
    let (mut a, mut b) = (segments(a), segments(b));
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            // `>` takes whatever one or more levels the other side's rest becomes.
            (Some(Segment::Rest), Some(_)) | (Some(_), Some(Segment::Rest)) => return true,
            (Some(Segment::Literal(x)), Some(Segment::Literal(y))) if x == y => {}
            (Some(Segment::Literal(x)), Some(Segment::Prefix(p)))
            | (Some(Segment::Prefix(p)), Some(Segment::Literal(x)))
                if x.starts_with(p) => {}
            (Some(Segment::Prefix(p)), Some(Segment::Prefix(q)))
                if p.starts_with(q) || q.starts_with(p) => {}
            _ => return false,
        }
    }
}

/// Byte classes for the validation scan; most bytes are [`ORDINARY`], so the hot loop
/// is one table load and one compare per byte.
const ORDINARY: u8 = 0;
const SLASH: u8 = 1;
const STAR: u8 = 2;
const GREATER: u8 = 3;
const CONTROL: u8 = 4;

static CLASS: [u8; 256] = {
    let mut table = [ORDINARY; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = CONTROL;
        b += 1;
    }
    table[0x7f] = CONTROL;
    table[b'/' as usize] = SLASH;
    table[b'*' as usize] = STAR;
    table[b'>' as usize] = GREATER;
    table
};

/// The single validation pass, with the limits as parameters so tests can reach the
/// level limit, which the byte limit otherwise shadows.
///
/// Bytes of multibyte UTF-8 sequences are all >= 0x80, so they are [`ORDINARY`] and
/// the syntax scan is correct on raw bytes before the UTF-8 check.
#[inline(always)]
fn validate<const PATTERN: bool>(
    bytes: &[u8],
    max_bytes: usize,
    max_levels: usize,
) -> Result<&str, TopicError> {
    let len = bytes.len();
    if len == 0 {
        return Err(TopicError::Empty);
    }
    if len > max_bytes {
        return Err(TopicError::TooLong { len });
    }
    let mut level = 0;
    let mut level_start = 0;
    for (offset, &byte) in bytes.iter().enumerate() {
        let class = CLASS[byte as usize];
        if class == ORDINARY {
            continue;
        }
        match class {
            SLASH => {
                if offset == level_start {
                    return Err(TopicError::EmptyLevel { level });
                }
                level += 1;
                if level >= max_levels {
                    return Err(TopicError::TooManyLevels {
                        levels: count_levels(bytes),
                    });
                }
                level_start = offset + 1;
            }
            STAR if !PATTERN => return Err(TopicError::WildcardInTopic { offset }),
            STAR => {
                // `*` must end its level: the next byte is `/` or the end.
                if bytes.get(offset + 1).is_some_and(|&next| next != b'/') {
                    return Err(TopicError::MisplacedWildcard { level });
                }
            }
            GREATER if !PATTERN => return Err(TopicError::WildcardInTopic { offset }),
            GREATER => {
                // `>` must be the whole level and the last one: first and last byte.
                if offset != level_start || offset + 1 != len {
                    return Err(TopicError::MisplacedWildcard { level });
                }
            }
            _ => return Err(TopicError::ControlChar { offset }),
        }
    }
    if level_start == len {
        return Err(TopicError::EmptyLevel { level });
    }
    std::str::from_utf8(bytes).map_err(|_| TopicError::NotUtf8)
}

/// Counts levels for the error report only (cold path).
#[cold]
fn count_levels(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'/').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn levels_of(n: usize) -> String {
        vec!["a"; n].join("/")
    }

    #[test]
    fn valid_topics() {
        let long = "x".repeat(MAX_TOPIC_BYTES);
        let many = levels_of(125); // 249 bytes: the most levels 250 bytes can hold
        let cases: &[&str] = &[
            "a",
            "md/NASDAQ/AAPL",
            "md/NASDAQ/BRK.B",
            "a b/c-d/e_f/g.h",
            "ü/日本/🚀",
            "~!@#$%^&()+=[]{}|;:'\",.<?",
            &long,
            &many,
        ];
        for &topic in cases {
            assert_eq!(validate_topic(topic.as_bytes()), Ok(topic), "{topic:?}");
            assert_eq!(validate_pattern(topic.as_bytes()), Ok(topic), "{topic:?}");
        }
    }

    #[test]
    fn invalid_topics() {
        use TopicError::*;
        let long = "x".repeat(MAX_TOPIC_BYTES + 1);
        let cases: &[(&[u8], TopicError)] = &[
            (b"", Empty),
            (long.as_bytes(), TooLong { len: 251 }),
            (b"/", EmptyLevel { level: 0 }),
            (b"/a", EmptyLevel { level: 0 }),
            (b"a/", EmptyLevel { level: 1 }),
            (b"a//b", EmptyLevel { level: 1 }),
            (b"a/b/", EmptyLevel { level: 2 }),
            (b"a\0b", ControlChar { offset: 1 }),
            (b"a/b\n", ControlChar { offset: 3 }),
            (b"\x1f", ControlChar { offset: 0 }),
            (b"a\x7f", ControlChar { offset: 1 }),
            (b"*", WildcardInTopic { offset: 0 }),
            (b"md/*", WildcardInTopic { offset: 3 }),
            (b"md/NAS*", WildcardInTopic { offset: 6 }),
            (b">", WildcardInTopic { offset: 0 }),
            (b"md/>", WildcardInTopic { offset: 3 }),
            (b"a>b", WildcardInTopic { offset: 1 }),
            (b"\xff", NotUtf8),
            (b"a/\xc3", NotUtf8),           // truncated 2-byte sequence
            (b"\xc0\xaf", NotUtf8),         // overlong '/'
            (b"\xed\xa0\x80", NotUtf8),     // UTF-16 surrogate
            (b"a/\x80b", NotUtf8),          // lone continuation byte
            (b"\xf4\x90\x80\x80", NotUtf8), // above U+10FFFF
        ];
        for &(bytes, err) in cases {
            assert_eq!(
                validate_topic(bytes),
                Err(err),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn byte_limit_is_inclusive_for_multibyte_text() {
        // 83 three-byte characters + 1 byte = 250 bytes.
        let ok = format!("{}x", "日".repeat(83));
        assert_eq!(ok.len(), MAX_TOPIC_BYTES);
        assert_eq!(validate_topic(ok.as_bytes()), Ok(ok.as_str()));
        let too_long = format!("{ok}x");
        assert_eq!(
            validate_topic(too_long.as_bytes()),
            Err(TopicError::TooLong { len: 251 })
        );
    }

    #[test]
    fn level_limit() {
        // 128 one-byte levels take 255 bytes, over the byte limit, so the level limit
        // is checked with a larger byte limit through the shared scan.
        assert_eq!(
            validate_topic(levels_of(128).as_bytes()),
            Err(TopicError::TooLong { len: 255 })
        );
        let ok = levels_of(MAX_LEVELS);
        assert_eq!(
            validate::<false>(ok.as_bytes(), 1000, MAX_LEVELS),
            Ok(ok.as_str())
        );
        assert_eq!(
            validate::<true>(ok.as_bytes(), 1000, MAX_LEVELS),
            Ok(ok.as_str())
        );
        let over = levels_of(MAX_LEVELS + 1);
        let err = Err(TopicError::TooManyLevels { levels: 129 });
        assert_eq!(validate::<false>(over.as_bytes(), 1000, MAX_LEVELS), err);
        assert_eq!(validate::<true>(over.as_bytes(), 1000, MAX_LEVELS), err);
        let far_over = levels_of(300);
        assert_eq!(
            validate::<false>(far_over.as_bytes(), 1000, MAX_LEVELS),
            Err(TopicError::TooManyLevels { levels: 300 })
        );
    }

    #[test]
    fn valid_patterns() {
        let cases: &[&str] = &[
            "*",
            ">",
            "md/*",
            "md/>",
            "*/>",
            "md/*/AAPL",
            "md/NAS*/AAPL",
            "md/NAS*/A*",
            "md/*/*/>",
            "日*/🚀",
        ];
        for &pattern in cases {
            assert_eq!(
                validate_pattern(pattern.as_bytes()),
                Ok(pattern),
                "{pattern:?}"
            );
        }
    }

    #[test]
    fn invalid_patterns() {
        use TopicError::*;
        let cases: &[(&[u8], TopicError)] = &[
            (b"", Empty),
            (b"md//*", EmptyLevel { level: 1 }),
            (b"md/>/", MisplacedWildcard { level: 1 }),
            (b"a*b", MisplacedWildcard { level: 0 }),
            (b"md/**", MisplacedWildcard { level: 1 }),
            (b"md/*>", MisplacedWildcard { level: 1 }),
            (b"a>", MisplacedWildcard { level: 0 }),
            (b">a", MisplacedWildcard { level: 0 }),
            (b">>", MisplacedWildcard { level: 0 }),
            (b">/x", MisplacedWildcard { level: 0 }),
            (b"md/>/x", MisplacedWildcard { level: 1 }),
            (b"md/a>/x", MisplacedWildcard { level: 1 }),
            (b"md/\t*", ControlChar { offset: 3 }),
            (b"md/\xff*", NotUtf8),
        ];
        for &(bytes, err) in cases {
            assert_eq!(
                validate_pattern(bytes),
                Err(err),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn segments_of_patterns() {
        use Segment::*;
        assert_eq!(segments("md").collect::<Vec<_>>(), [Literal("md")]);
        assert_eq!(
            segments("md/NAS*/*/>").collect::<Vec<_>>(),
            [Literal("md"), Prefix("NAS"), Prefix(""), Rest]
        );
        assert_eq!(segments(">").collect::<Vec<_>>(), [Rest]);
    }

    #[test]
    fn matching_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("md/NASDAQ/AAPL", "md/NASDAQ/AAPL", true),
            ("md/NASDAQ/AAPL", "md/NASDAQ/MSFT", false),
            ("md/NASDAQ/AAPL", "md/NASDAQ", false),
            ("md/NASDAQ", "md/NASDAQ/AAPL", false),
            ("md/*/AAPL", "md/NASDAQ/AAPL", true),
            ("md/*/AAPL", "md/NASDAQ/X/AAPL", false),
            ("md/*", "md", false),
            ("*", "md", true),
            ("*", "md/a", false),
            ("md/NAS*/AAPL", "md/NASDAQ/AAPL", true),
            ("md/NAS*/AAPL", "md/NAS/AAPL", true),
            ("md/NAS*/AAPL", "md/NA/AAPL", false),
            ("md/NAS*/AAPL", "md/NYSE/AAPL", false),
            ("md/NAS*", "md/NASDAQ/AAPL", false),
            ("md/>", "md", false),
            ("md/>", "md/a", true),
            ("md/>", "md/a/b", true),
            ("md/>", "mdx/a", false),
            (">", "md", true),
            (">", "md/a/b/c", true),
            ("*/>", "md", false),
            ("*/>", "md/a", true),
            ("md/A*/>", "md/AAPL/trades", true),
            ("md/A*/>", "md/AAPL", false),
            ("日*/x", "日本/x", true),
            ("日*/x", "月/x", false),
        ];
        for &(pattern, topic, expected) in cases {
            assert_eq!(validate_pattern(pattern.as_bytes()), Ok(pattern));
            assert_eq!(validate_topic(topic.as_bytes()), Ok(topic));
            assert_eq!(
                pattern_matches(pattern, topic),
                expected,
                "{pattern:?} vs {topic:?}"
            );
        }
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            TopicError::TooLong { len: 300 }.to_string(),
            "300 bytes long, more than the limit of 250"
        );
        // The index counts from 0, the message from 1 ("a//b": the second level).
        assert_eq!(
            TopicError::EmptyLevel { level: 1 }.to_string(),
            "level 2 is empty (leading, trailing or doubled '/')"
        );
        assert_eq!(
            TopicError::MisplacedWildcard { level: 0 }.to_string(),
            "misplaced wildcard in level 1 of the pattern \
             ('*' must end a level, '>' must be the whole last level)"
        );
    }

    /// Bytes biased toward the characters the syntax cares about, so the properties
    /// meet valid topics and every error kind, not only `NotUtf8`.
    fn topic_bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            4 => prop::sample::select(b"ab/".to_vec()),
            1 => prop::sample::select(b"*>\x00\x7f".to_vec()),
            1 => any::<u8>(),
        ];
        prop_oneof![
            prop::collection::vec(byte, 0..20),
            prop::collection::vec(any::<u8>(), 0..300),
        ]
    }

    fn small_pattern() -> impl Strategy<Value = String> {
        let level =
            prop::sample::select(vec!["a", "ab", "b", "*", "a*", "ab*", "_tickwire", "_t*"]);
        (prop::collection::vec(level, 1..=3), any::<bool>()).prop_map(|(levels, rest)| {
            let mut p = levels.join("/");
            if rest {
                p.push_str("/>");
            }
            if p == "a/>" && levels.len() == 1 {
                return ">".to_owned();
            }
            p
        })
    }

    fn small_topics() -> Vec<String> {
        let texts = ["a", "ab", "abc", "b", "c", "_tickwire", "_tickwirex"];
        let mut all: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let mut last = all.clone();
        for _ in 1..5 {
            let next: Vec<String> = last
                .iter()
                .flat_map(|p| texts.iter().map(move |t| format!("{p}/{t}")))
                .collect();
            all.extend(next.iter().cloned());
            last = next;
        }
        all
    }

    #[test]
    fn covers_and_overlap_examples() {
        assert!(pattern_covers("md/>", "md/NASDAQ/*"));
        assert!(pattern_covers(">", ">"));
        assert!(pattern_covers("md/NAS*", "md/NASDAQ"));
        assert!(!pattern_covers("md/*", "md/>"));
        assert!(!pattern_covers("md/>", "md"));
        assert!(!pattern_covers("md/NASDAQ", "md/NAS*"));
        assert!(patterns_overlap("md/>", "*/secret"));
        assert!(patterns_overlap(">", "a"));
        assert!(!patterns_overlap("md/*", "fx/*"));
        assert!(!patterns_overlap("md/>", "md"));
        assert!(patterns_overlap("md/NAS*", "md/NA*"));
        // System topics: only a pattern naming their first level reaches them.
        assert!(!pattern_matches(">", "_tickwire/probe/1"));
        assert!(!pattern_matches("*/probe/1", "_tickwire/probe/1"));
        assert!(!pattern_matches("_tick*/>", "_tickwire/probe/1"));
        assert!(pattern_matches("_tickwire/>", "_tickwire/probe/1"));
        assert!(pattern_matches(">", "_tickwirex/probe/1"));
        assert!(pattern_matches("*/_tickwire", "md/_tickwire"));
        assert!(!pattern_covers(">", "_tickwire/probe/1"));
        assert!(pattern_covers("_tickwire/>", "_tickwire/probe/*"));
        assert!(!patterns_overlap(">", "_tickwire/>"));
        assert!(!patterns_overlap("*/probe/>", "_tickwire/probe/1"));
        assert!(patterns_overlap("_tickwire/*/1", "_tickwire/probe/>"));
    }

    proptest! {
        /// `same_bytes` is `==`: on any pair, and on a copy with one byte changed at
        /// each position (the overlapping words must see every byte).
        #[test]
        fn same_bytes_is_equality(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..300),
            flip in any::<u8>(),
        ) {
            prop_assert_eq!(same_bytes(&a, &b), a == b);
            prop_assert!(same_bytes(&a, &a.clone()));
            let flip = flip | 1;
            for i in 0..a.len() {
                let mut c = a.clone();
                c[i] ^= flip;
                prop_assert!(!same_bytes(&a, &c), "byte {} of {} not compared", i, a.len());
                prop_assert!(!same_bytes(&c, &a));
            }
            if !a.is_empty() {
                prop_assert!(!same_bytes(&a, &a[..a.len() - 1]));
            }
        }

        #[test]
        fn validate_never_panics(bytes in topic_bytes()) {
            let _ = validate_topic(&bytes);
            let _ = validate_pattern(&bytes);
        }

        #[test]
        fn validated_text_is_the_input(bytes in topic_bytes()) {
            if let Ok(text) = validate_pattern(&bytes) {
                prop_assert_eq!(text.as_bytes(), &bytes[..]);
            }
        }

        #[test]
        fn topics_are_patterns(bytes in topic_bytes()) {
            if let Ok(topic) = validate_topic(&bytes) {
                prop_assert_eq!(validate_pattern(&bytes), Ok(topic));
            }
        }

        #[test]
        fn topic_as_pattern_matches_itself(topic in "[a-zé日]{1,4}(/[a-zé日]{1,4}){0,6}") {
            let topic = validate_topic(topic.as_bytes()).unwrap();
            prop_assert!(pattern_matches(topic, topic));
        }

        #[test]
        fn any_valid_text_pattern_matches_itself(bytes in topic_bytes()) {
            if let Ok(topic) = validate_topic(&bytes) {
                prop_assert!(pattern_matches(topic, topic));
            }
        }

        #[test]
        fn the_byte_matcher_agrees_with_the_level_matcher(a in small_pattern(), extra in topic_bytes()) {
            for t in small_topics() {
                prop_assert_eq!(pattern_matches(&a, &t), pattern_matches_by_levels(&a, &t), "{} {}", a, t);
            }
            // Any valid pattern against itself as a topic, and against the small topics.
            if let Ok(p) = validate_pattern(&extra) {
                for t in small_topics().iter().map(String::as_str).chain(validate_topic(&extra).ok()) {
                    prop_assert_eq!(pattern_matches(p, t), pattern_matches_by_levels(p, t), "{} {}", p, t);
                }
            }
        }

        #[test]
        fn covers_and_overlap_agree_with_brute_force(a in small_pattern(), b in small_pattern()) {
            // Every topic of up to 5 levels over these level texts: enough to tell the
            // patterns of small_pattern apart (a level no prefix matches, `c`, and one
            // level beyond their 3).
            let universe = small_topics();
            let both = universe.iter().any(|t| pattern_matches(&a, t) && pattern_matches(&b, t));
            prop_assert_eq!(patterns_overlap(&a, &b), both, "overlap {} {}", a, b);
            let inside = universe.iter().all(|t| !pattern_matches(&b, t) || pattern_matches(&a, t));
            prop_assert_eq!(pattern_covers(&a, &b), inside, "covers {} {}", a, b);
        }

        #[test]
        fn the_memo_answers_as_validate_topic_does(seq in prop::collection::vec(
            prop_oneof![topic_bytes(), Just(b"md/AAPL".to_vec()), Just(b"md//x".to_vec())],
            1..12,
        )) {
            // Whatever came before (valid topics, invalid ones, repeats), the memo gives
            // validate_topic's answer for each.
            let mut memo = TopicMemo::default();
            for bytes in &seq {
                prop_assert_eq!(memo.validate(bytes), validate_topic(bytes));
            }
        }

        #[test]
        fn validation_agrees_with_std_utf8(bytes in prop::collection::vec(any::<u8>(), 1..40)) {
            // Bytes that pass the syntax scan are rejected exactly when std rejects them.
            let syntax_ok = !bytes.iter().any(|&b| b < 0x20 || b == 0x7f || b == b'/' || b == b'*' || b == b'>');
            if syntax_ok {
                prop_assert_eq!(validate_topic(&bytes).is_ok(), std::str::from_utf8(&bytes).is_ok());
            }
        }
    }
}
