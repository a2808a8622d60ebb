//! Small pieces of the text that commands print.

/// `n` and its noun, singular for exactly one: `count(1, "client", "clients")` is
/// `"1 client"`, `count(0, "client", "clients")` is `"0 clients"`. Both forms are
/// given, as English plurals are not all an added `s` ("1 entry", "2 entries").
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "client", "clients"), "1 client");
        assert_eq!(count(0, "client", "clients"), "0 clients");
        assert_eq!(count(2, "client", "clients"), "2 clients");
        assert_eq!(count(1, "entry", "entries"), "1 entry");
        assert_eq!(count(11, "entry", "entries"), "11 entries");
    }
}
