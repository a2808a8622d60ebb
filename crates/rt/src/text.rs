//! Small pieces of the text that commands print.

/// `n` and its noun, singular for exactly one: `count(1, "client", "clients")` is
/// `"1 client"`, `count(0, "client", "clients")` is `"0 clients"`. Both forms are
/// given, as English plurals are not all an added `s` ("1 entry", "2 entries").
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `s` with its control characters (C0, DEL, C1) escaped as Rust writes them (`\n`,
/// `\u{1b}`, `\u{9b}`), for a terminal: a string from a peer printed raw could forge
/// output lines or drive the terminal with an escape sequence. The line and paragraph
/// separators (U+2028, U+2029) and the bidirectional controls (U+061C, U+200E, U+200F,
/// U+202A..U+202E, U+2066..U+2069: a right-to-left override makes a line read
/// backwards) are escaped too. Borrowed unchanged when there is none.
pub fn terminal_safe(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(unsafe_for_terminal) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_for_terminal(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A character [`terminal_safe`] escapes: controls (C0, DEL, C1) and the characters
/// that reorder or break a line on screen (bidi controls, U+2028/U+2029).
pub fn unsafe_for_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_other_text_borrowed() {
        for s in ["", "feed-1", "Zürich 東京 📈", "a\u{200d}b"] {
            assert!(
                matches!(terminal_safe(s), std::borrow::Cow::Borrowed(b) if b == s),
                "{s:?}"
            );
        }
        assert_eq!(
            terminal_safe("a\tb\u{9b}\u{1b}]0;x\u{7}"),
            r"a\tb\u{9b}\u{1b}]0;x\u{7}"
        );
        // Hostile-input pass: a HELLO name with a right-to-left override or a line
        // separator reordered or broke the line it was printed in.
        assert_eq!(
            terminal_safe("feed\u{202e}gnp.exe\u{2028}x\u{2066}"),
            r"feed\u{202e}gnp.exe\u{2028}x\u{2066}"
        );
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "client", "clients"), "1 client");
        assert_eq!(count(0, "client", "clients"), "0 clients");
        assert_eq!(count(2, "client", "clients"), "2 clients");
        assert_eq!(count(1, "entry", "entries"), "1 entry");
        assert_eq!(count(11, "entry", "entries"), "11 entries");
    }
}
