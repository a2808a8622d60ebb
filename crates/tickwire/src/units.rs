//! Parsing of human-friendly sizes and rates on the command line: the syntax is
//! `tickwire_rt::units`'s, the one of every command.

pub use tickwire_rt::units::parse_size;

pub use tickwire_rt::units::{parse_duration, parse_short_duration};

/// A duration in seconds, in the one duration syntax (`5s`, `250ms`, `2m`; a plain
/// number is seconds), for the options that keep an `f64` of seconds.
pub fn parse_secs(s: &str) -> Result<f64, String> {
    parse_duration(s).map(|d| d.as_secs_f64())
}

/// Parses a message rate in whole messages per second: `10000`, `10k`, `1.5M`
/// ([`tickwire_rt::units::parse_rate`]); 0 is "no pacing" for the commands that take it.
/// A fraction is refused, not rounded (new-user pass: `--rate 0.4` became 0, "as fast as
/// possible", and 1.5 became 2).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let r = tickwire_rt::units::parse_rate(s)?;
    // `1.1k` is 1100.0000000000002 in binary floating point: whole within rounding.
    let whole = r.round();
    if (r - whole).abs() > 1e-12 * r.max(1.0) {
        return Err(format!(
            "{s:?} is not a whole number of messages per second (rates below 1/s are not \
             supported; 1.5k is 1500)"
        ));
    }
    Ok(whole as u64)
}

/// A count of at least 1 (`--count`, `--window`): a plain whole number, with a usage
/// error that says what is wanted (clap's range check printed "0 is not in
/// 1..18446744073709551615").
pub fn parse_count(s: &str) -> Result<u64, String> {
    use std::num::IntErrorKind;
    match s.trim().parse::<u64>() {
        Ok(0) => Err("0: at least 1 is needed".to_owned()),
        Ok(n) => Ok(n),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => {
            Err(format!("{s} is too large: at most {}", u64::MAX))
        }
        Err(_) => Err(format!("{s:?} is not a whole number (e.g. 1000)")),
    }
}

/// A whole number, 0 included (a setting whose 0 its own check refuses or reads as
/// "no limit"), with the usage error [`parse_count`] gives (new-user pass: clap's own
/// said "invalid digit found in string").
pub fn parse_whole(s: &str) -> Result<u64, String> {
    match s.trim() {
        "0" => Ok(0),
        _ => parse_count(s),
    }
}

/// [`parse_whole`] for a `usize` setting.
pub fn parse_whole_usize(s: &str) -> Result<usize, String> {
    let n = parse_whole(s)?;
    usize::try_from(n).map_err(|_| format!("{n} is too large: at most {}", usize::MAX))
}

/// [`parse_count`] for a `u32` setting (at most 4,294,967,295).
pub fn parse_count_u32(s: &str) -> Result<u32, String> {
    let n = parse_count(s)?;
    u32::try_from(n).map_err(|_| format!("{n} is too large: at most {}", u32::MAX))
}

/// A router address as HOST:PORT (a name or an IP address, IPv6 in brackets), the same
/// after `tls://` (TLS), or `shm:NAME`; the port is checked here so that a missing one is a usage error that says so.
pub fn parse_router_addr(s: &str) -> Result<String, String> {
    if s.starts_with(tickwire_shm::ADDR_PREFIX) {
        return match tickwire_shm::parse_addr(s) {
            Some(name) if tickwire_shm::valid_name(name) => Ok(s.to_owned()),
            Some(name) => Err(format!(
                "{name:?} is not a shared-memory name: {}",
                tickwire_shm::NAME_RULE
            )),
            None => Err("expected shm:NAME (the name given to the router's --shm)".to_owned()),
        };
    }
    let expected = "expected HOST:PORT (e.g. 127.0.0.1:7420), tls://HOST:PORT or shm:NAME";
    let plain = s.strip_prefix(tickwire_client::TLS_SCHEME).unwrap_or(s);
    if plain.parse::<u16>().is_ok() {
        // New-user pass: `--router 7420` said "no port in \"7420\"".
        let scheme = &s[..s.len() - plain.len()];
        return Err(format!(
            "{s:?} is a port without a host: give both, e.g. {scheme}127.0.0.1:{plain}"
        ));
    }
    let (host, port) = plain
        .rsplit_once(':')
        .ok_or_else(|| format!("no port in {s:?}: {expected}"))?;
    if host.is_empty() || host == "[" || (host.contains(':') && !host.starts_with('[')) {
        return Err(format!("{s:?} is not an address: {expected}"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("{port:?} is not a port number: {expected}"))?;
    Ok(s.to_owned())
}

/// A topic to publish to (no wildcards), checked at parse time like a pattern: a bad
/// one is a usage error (exit status 2), as a bad pattern is.
pub fn parse_topic(s: &str) -> Result<String, String> {
    match tickwire_wire::topic::validate_topic(s.as_bytes()) {
        Ok(_) => Ok(s.to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// A subscription pattern (`md/NASDAQ/>`), checked against the wire syntax so that a bad
/// one is a usage error before anything connects. A shell takes an unquoted `>` as a
/// redirection (`tickwire sub md/> x` runs `tickwire sub md/` with its output in the file
/// `x`), so a pattern that ends in `/` gets a hint to quote it.
pub fn parse_pattern(s: &str) -> Result<String, String> {
    match tickwire_wire::topic::validate_pattern(s.as_bytes()) {
        Ok(_) => Ok(s.to_owned()),
        Err(e) if s.ends_with('/') => Err(format!(
            "{e}; if you typed '{s}>', quote it: a shell takes an unquoted '>' as an output \
             redirection (e.g. '{s}>' in single quotes)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `--name` of a client command: the client name the router shows, without control
/// characters (the router refuses a HELLO carrying one; new-user pass: `--name
/// $'a\nb'` got the router's "malformed Hello frame" and exit 1, not a usage error).
pub fn parse_client_name(s: &str) -> Result<String, String> {
    match s.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!(
            "{:?}: a client name may not hold control characters ({c:?})",
            tickwire_rt::text::terminal_safe(s)
        )),
        None => Ok(s.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_memory_router_address_needs_a_valid_name() {
        assert_eq!(parse_router_addr("shm:main"), Ok("shm:main".to_owned()));
        // A NAME with a '/' is the socket path (docs/shm.md).
        assert_eq!(
            parse_router_addr("shm:/run/tw/r.sock"),
            Ok("shm:/run/tw/r.sock".to_owned())
        );
        let long = format!("shm:/{}", "d".repeat(80));
        for bad in ["shm:bad name", "shm:/run/tw/", "shm:", &long] {
            assert!(parse_router_addr(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse_router_addr("shm:bad name").unwrap_err();
        assert!(e.contains(tickwire_shm::NAME_RULE), "{e}");
    }

    /// New-user pass: `--router 7420` said "no port in \"7420\"".
    #[test]
    fn a_router_address_that_is_only_a_port_says_the_host_is_missing() {
        for (given, shown) in [
            ("7420", "e.g. 127.0.0.1:7420"),
            ("tls://7443", "e.g. tls://127.0.0.1:7443"),
        ] {
            let e = parse_router_addr(given).unwrap_err();
            assert!(
                e.contains("port without a host") && e.contains(shown),
                "{e}"
            );
        }
        assert!(parse_router_addr("localhost")
            .unwrap_err()
            .contains("no port"));
        assert!(parse_router_addr("127.0.0.1:7420").is_ok());
    }

    /// New-user pass: `pub --rate 0.4` sent everything at once (0.4 rounded to 0, no
    /// pacing).
    #[test]
    fn a_rate_is_a_whole_number_of_messages_per_second() {
        assert_eq!(parse_rate("0"), Ok(0));
        assert_eq!(parse_rate("1.5k"), Ok(1500));
        assert_eq!(parse_rate("2M"), Ok(2_000_000));
        assert_eq!(parse_rate("1.1k"), Ok(1100));
        assert_eq!(parse_rate("2.25k"), Ok(2250));
        // Review: "0.0000000001" passed the rounding tolerance as 0 (no pacing).
        for bad in [
            "0.4",
            "0.0001",
            "0.0000000001",
            "1.5",
            "2.2505k",
            "9999999999.5",
        ] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.contains("whole number"), "{bad}: {e}");
        }
    }

    #[test]
    fn patterns_that_lost_their_wildcard_to_the_shell_say_to_quote_it() {
        assert_eq!(parse_pattern("md/>"), Ok("md/>".to_owned()));
        assert_eq!(parse_pattern("md/*/AAPL"), Ok("md/*/AAPL".to_owned()));
        let e = parse_pattern("md/").unwrap_err();
        assert!(e.contains("'md/>'") && e.contains("redirection"), "{e}");
        let e = parse_pattern("md//x").unwrap_err();
        assert!(e.contains("empty") && !e.contains("redirection"), "{e}");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("0"), Ok(0));
        assert_eq!(parse_rate("50k"), Ok(50_000));
        assert_eq!(parse_rate("1.5M"), Ok(1_500_000));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-1").is_err());
    }

    #[test]
    fn probabilities_are_0_to_1_inclusive() {
        assert_eq!(parse_probability("0"), Ok(0.0));
        assert_eq!(parse_probability("0.05"), Ok(0.05));
        assert_eq!(parse_probability("1"), Ok(1.0));
        for bad in ["2", "-0.1", "1.01", "NaN", "inf", "often", ""] {
            let e = parse_probability(bad).unwrap_err();
            assert!(e.contains("from 0 to 1"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_mold_session_is_at_most_10_printable_characters() {
        assert_eq!(
            parse_mold_session("TICKWIRE01"),
            Ok("TICKWIRE01".to_owned())
        );
        assert_eq!(parse_mold_session("A"), Ok("A".to_owned()));
        for bad in ["TICKWIRE012", "TICKW\u{e9}RE", "A\tB"] {
            let e = parse_mold_session(bad).unwrap_err();
            assert!(e.contains("at most 10 printable ASCII"), "{bad:?}: {e}");
        }
    }
}

/// A mistake in how a command was called that its flags' parsers cannot see alone
/// (e.g. none of several alternatives given): reported like clap's usage errors, with
/// exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

impl UsageError {
    /// An error found in what the user gave (a file named by a flag, its contents):
    /// its text and causes, each said once, as a usage error.
    pub fn of(e: anyhow::Error) -> anyhow::Error {
        UsageError(error_text(&e)).into()
    }
}

/// An error and its causes, each said once. Several error types name their cause in
/// their own message, so anyhow's `{:#}` would repeat it ("...: Address already in use
/// (os error 98): Address already in use (os error 98)").
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if s.is_empty() || text.contains(&s) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&s);
    }
    text
}

/// `--give-up-after`: a duration above zero. Zero would give up at once, without one
/// attempt, while the command said "reconnecting" (review): that is --no-reconnect.
pub fn parse_give_up(s: &str) -> Result<std::time::Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!(
            "{s:?}: 0 would give up without one attempt; to exit on a lost connection, use \
             --no-reconnect"
        )),
        d => Ok(d),
    }
}

/// A fraction of datagrams to drop: 0 to below 1 (e.g. 0.05).
pub fn parse_loss(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "expected a fraction from 0 up to (not including) 1, e.g. 0.05 for 5%; got {s:?}"
        )),
    }
}

/// A probability from 0 to 1, both included (`md publish --loss 0.05`).
pub fn parse_probability(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "expected a probability from 0 to 1, e.g. 0.05 for 5%; got {s:?}"
        )),
    }
}

/// A MoldUDP64 session name (`--session`): the field is 10 bytes, so at most 10
/// printable ASCII characters (padded with spaces on the wire).
pub fn parse_mold_session(s: &str) -> Result<String, String> {
    match tickwire_itch::Session::new(s) {
        Ok(_) => Ok(s.to_owned()),
        Err(_) if s.len() > 10 => Err(format!(
            "must be at most 10 printable ASCII characters (MoldUDP64 session names are a \
             10-byte field; got {} bytes)",
            s.len()
        )),
        Err(_) => Err(
            "must be at most 10 printable ASCII characters (MoldUDP64 session names are \
             a 10-byte field of printable ASCII)"
                .into(),
        ),
    }
}

/// A router's shared-memory listener name (`--shm NAME`).
pub fn parse_shm_name(s: &str) -> Result<String, String> {
    if tickwire_shm::valid_name(s) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "expected {}; clients then connect with shm:NAME",
            tickwire_shm::NAME_RULE
        ))
    }
}

/// Standard output for a command's lines: when its reader has gone (`| head`), the
/// process ends quietly with status 141, as a process ended by SIGPIPE does and as
/// `println!` does here (`exit_quietly_on_broken_pipe` in main.rs); new-user pass:
/// `cache show | head -1` and `mcast recv | head -1` exited 1 with "Broken pipe" where
/// `stats | head -1` ended quietly.
pub struct LinesOut<W: std::io::Write>(pub W);

impl<W: std::io::Write> std::io::Write for LinesOut<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        quiet_on_broken_pipe(self.0.write(b))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        quiet_on_broken_pipe(self.0.flush())
    }
}

fn quiet_on_broken_pipe<T>(r: std::io::Result<T>) -> std::io::Result<T> {
    if r.as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    {
        std::process::exit(141);
    }
    r
}
