//! Topic and pattern validation on arbitrary bytes, and matching on what it accepts.
//!
//! Input: `pattern bytes 0xFF topic bytes` (0xFF never occurs in UTF-8, so it cannot be
//! part of a valid topic); without 0xFF the whole input is used as both.
//!
//! Checks:
//! - `validate_topic` / `validate_pattern` never panic, and accept exactly what the
//!   syntax in `docs/protocol.md` allows (checked against a slow, obvious validator);
//! - every accepted topic is also an accepted pattern, and matches itself;
//! - for a valid pattern and a valid topic, `pattern_matches` never panics and agrees
//!   with an independent, recursive reference matcher;
//! - a pattern with its wildcards filled in is a valid topic that the pattern matches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_wire::topic::{
    pattern_matches, validate_pattern, validate_topic, MAX_LEVELS, MAX_TOPIC_BYTES,
};

fuzz_target!(|data: &[u8]| {
    let (a, b) = match data.iter().position(|&x| x == 0xFF) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    for bytes in [a, b] {
        let topic = validate_topic(bytes);
        let pattern = validate_pattern(bytes);
        assert_eq!(
            topic.is_ok(),
            obviously_valid(bytes, false),
            "topic {bytes:?}"
        );
        assert_eq!(
            pattern.is_ok(),
            obviously_valid(bytes, true),
            "pattern {bytes:?}"
        );
        if let Ok(t) = topic {
            assert_eq!(t.as_bytes(), bytes);
            assert_eq!(pattern, Ok(t), "a topic must also be a pattern");
            assert!(pattern_matches(t, t), "{t:?} does not match itself");
        }
        if let Ok(p) = pattern {
            assert_eq!(p.as_bytes(), bytes);
            let filled = fill_wildcards(p);
            let filled = validate_topic(filled.as_bytes())
                .unwrap_or_else(|e| panic!("{p:?} filled in is not a topic: {e}"));
            assert!(
                pattern_matches(p, filled),
                "{p:?} does not match {filled:?}"
            );
        }
    }
    if let (Ok(p), Ok(t)) = (validate_pattern(a), validate_topic(b)) {
        let levels: Vec<&str> = p.split('/').collect();
        let topic: Vec<&str> = t.split('/').collect();
        // System topics (first level `_tickwire`) match only a pattern naming that
        // level (docs/protocol.md, "System topics").
        let system_only = topic[0] == "_tickwire" && levels[0] != "_tickwire";
        assert_eq!(
            pattern_matches(p, t),
            !system_only && reference(&levels, &topic),
            "{p:?} vs {t:?}"
        );
    }
});

/// The syntax, spelled out level by level (slow, allocation-happy, obvious).
fn obviously_valid(bytes: &[u8], pattern: bool) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    if text.is_empty() || text.len() > MAX_TOPIC_BYTES {
        return false;
    }
    let levels: Vec<&str> = text.split('/').collect();
    if levels.len() > MAX_LEVELS {
        return false;
    }
    let last = levels.len() - 1;
    levels.iter().enumerate().all(|(i, level)| {
        if level.is_empty() || level.chars().any(|c| c < ' ' || c == '\x7f') {
            return false;
        }
        if !pattern {
            return !level.contains(['*', '>']);
        }
        if *level == ">" {
            return i == last;
        }
        let body = level.strip_suffix('*').unwrap_or(level);
        !body.contains(['*', '>'])
    })
}

/// Replaces each wildcard by one ordinary character: `NAS*` → `NASx`, `*` → `x`,
/// `>` → `x` (`>` needs one level or more; one is enough).
fn fill_wildcards(pattern: &str) -> String {
    pattern.replace(['*', '>'], "x")
}

/// Matching, written as the recursive definition.
fn reference(pattern: &[&str], topic: &[&str]) -> bool {
    match (pattern.split_first(), topic.split_first()) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some((&">", _)), t) => t.is_some(),
        (Some(_), None) => false,
        (Some((&p, p_rest)), Some((&t, t_rest))) => {
            let level_ok = match p.strip_suffix('*') {
                Some(prefix) => t.starts_with(prefix),
                None => p == t,
            };
            level_ok && reference(p_rest, t_rest)
        }
    }
}
