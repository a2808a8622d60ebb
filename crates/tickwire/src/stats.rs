//! `tickwire stats`: the router's counters, over the protocol.

use std::borrow::Cow;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::Value;
use tickwire_client::{Client, ClientOptions};
use tickwire_rt::text::count;

use crate::pubsub::DEFAULT_ROUTER;

const STATS_HELP: &str = "\
Columns: MSGS_IN = messages the client published; MSGS_OUT = messages queued for
it; DISCARDS = messages dropped because it read too slowly (queued, so counted in
MSGS_OUT too, but never written); BYTES_IN/BYTES_OUT = bytes read from and written
to its connection (frames of every kind); PENDING = bytes queued for it and not
yet written; SUBS = subscriptions held. The totals cover
the router's whole life, including clients that have disconnected. The stats
client itself appears in the list.

Examples:
  tickwire stats                                  # table of clients and totals
  tickwire stats --router 10.0.0.5:7420           # another router
  tickwire stats --print-json | jq .router.totals # the raw document (docs/protocol.md)

Exit status: 0 printed; 1 an error, printed (the router not reached, a refused login,
not permitted: the document is for admin users); 2 a usage error.";

#[derive(Args)]
#[command(after_help = STATS_HELP)]
pub struct StatsArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Print the raw JSON document instead of a table.
    #[arg(long, alias = "json")]
    print_json: bool,
}

/// Said when the router refuses `stats` at its connection limit.
const FULL_ROUTER_HINT: &str = "hint: this command takes a connection like any client; \
    the router's HTTP monitoring needs none: a router started with --http ADDR answers \
    http://ADDR/varz (these figures) and http://ADDR/connz (its clients) when full; or \
    raise its --max-clients";

pub fn run(a: StatsArgs) -> anyhow::Result<ExitCode> {
    let connected = Client::connect_to(
        a.router.as_str(),
        a.login
            .apply(&a.router, ClientOptions::named("tickwire-stats"))?,
    );
    let mut client = match connected {
        Err(e @ tickwire_client::Error::Closed { code, .. })
            if code == tickwire_client::ErrorCode::TOO_MANY_CLIENTS =>
        {
            // New-user pass: at --max-clients the operator's diagnostic tool was
            // refused with nothing pointing to what still answers.
            return Err(anyhow::anyhow!("{e}\n{FULL_ROUTER_HINT}"));
        }
        r => r?,
    };
    let json = client.stats_json()?;
    client.close().ok();
    // Checked before --print-json passes it on too: not JSON, or raw control
    // characters (which JSON forbids in strings), is refused.
    let doc: Value = serde_json::from_str(&json).context("the router sent invalid stats JSON")?;
    if a.print_json {
        println!("{json}");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render(&doc));
    Ok(ExitCode::SUCCESS)
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// A string field, fit for a terminal ([`printable`]).
fn text<'a>(v: &'a Value, k: &str) -> Cow<'a, str> {
    printable(v.get(k).and_then(Value::as_str).unwrap_or(""))
}

/// Every listener clients can use, as the router's first line names them: TLS and
/// shared memory (when the router has them), then TCP.
fn listeners(r: &Value) -> String {
    let mut all: Vec<Cow<'_, str>> = ["tls_listen", "shm"]
        .into_iter()
        .filter(|k| r.get(*k).is_some_and(Value::is_string))
        .map(|k| text(r, k))
        .collect();
    all.push(text(r, "listen"));
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => all.concat(),
    }
}

/// `s` fit for a terminal: strings in the document can come from clients, and a line
/// break or an escape sequence printed raw would forge table lines or drive the admin's
/// terminal. The router refuses them in HELLO names (docs/protocol.md 4.1); this holds
/// for every field, and for older routers.
fn printable(s: &str) -> Cow<'_, str> {
    tickwire_rt::text::terminal_safe(s)
}

/// Renders the stats document as a table.
pub fn render(doc: &Value) -> String {
    let r = &doc["router"];
    let t = &r["totals"];
    let mut s = format!(
        "router {} (v{}) on {}: up {:.1} s, idle={}, slow_consumer={}, {}, {}\n\n",
        text(r, "name"),
        text(r, "version"),
        listeners(r),
        num(r, "uptime_ms") as f64 / 1000.0,
        text(r, "idle"),
        text(r, "slow_consumer"),
        count(num(r, "clients"), "client", "clients"),
        count(num(r, "subscriptions"), "subscription", "subscriptions"),
    );
    let clients = doc["clients"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    // Who each client logged in as, on a router with logins (an anonymous one: `-`).
    let users = clients
        .iter()
        .any(|c| c.get("user").is_some_and(Value::is_string));
    let user = |c: &Value| match c.get("user").and_then(Value::as_str) {
        _ if !users => String::new(),
        Some(_) => format!("{:<16} ", cell(c, "user", 16)),
        None => format!("{:<16} ", "-"),
    };
    s += &format!(
        "{:>4} {}{:<20} {:<21} {:<9} {:>5} {:>12} {:>12} {:>13} {:>13} {:>10} {:>10} {:>9}\n",
        "ID",
        if users {
            format!("{:<16} ", "USER")
        } else {
            String::new()
        },
        "NAME",
        "ADDR",
        "PHASE",
        "SUBS",
        "MSGS_IN",
        "MSGS_OUT",
        "BYTES_IN",
        "BYTES_OUT",
        "DISCARDS",
        "PENDING",
        "CONN_S"
    );
    for c in clients {
        s += &format!(
            "{:>4} {}{:<20} {:<21} {:<9} {:>5} {:>12} {:>12} {:>13} {:>13} {:>10} {:>10} {:>9.1}\n",
            num(c, "id"),
            user(c),
            cell(c, "name", 20),
            text(c, "addr"),
            text(c, "phase"),
            num(c, "subscriptions"),
            num(c, "msgs_in"),
            num(c, "msgs_out"),
            num(c, "bytes_in"),
            num(c, "bytes_out"),
            num(c, "discards"),
            num(c, "egress_pending"),
            num(c, "connected_for_ms") as f64 / 1000.0,
        );
    }
    s += &format!(
        "\ntotals: msgs_in={} msgs_out={} unrouted={} discards={} bytes_in={} bytes_out={} connections={} refused={} error_disconnects={}\n",
        num(t, "msgs_in"),
        num(t, "msgs_out"),
        num(t, "unrouted"),
        num(t, "discards"),
        num(t, "bytes_in"),
        num(t, "bytes_out"),
        num(t, "connections"),
        num(t, "refused"),
        num(t, "disconnects_error"),
    );
    // The --http probe's messages are in the totals; on a quiet router they are most of
    // them (new-user pass: 7,789 of 8,814 after 40 s), so say how many.
    let probe = clients.iter().find(|c| {
        c.get("user").and_then(Value::as_str) == Some(crate::monitor::probe::PROBE_USER)
            || (c.get("user").is_none_or(Value::is_null) && text(c, "name") == "tickwire-probe")
    });
    if let Some(p) = probe {
        s += &format!(
            "        (of which the --http latency probe, client {}: msgs_in={} msgs_out={})\n",
            num(p, "id"),
            num(p, "msgs_in"),
            num(p, "msgs_out"),
        );
    }
    s += &render_cache(&doc["cache"]);
    s += &render_multicast(&doc["multicast"]);
    s += &render_guaranteed(&doc["guaranteed"]);
    s
}

/// One line per multicast stream (nothing without streams): what it sent to its
/// receivers, who count in no client's msgs_out (new-user pass: a healthy fan-out of
/// 50,000 messages read as "msgs_out=0" everywhere but the JSON).
pub fn render_multicast(m: &Value) -> String {
    let Some(streams) = m.as_array().filter(|a| !a.is_empty()) else {
        return String::new();
    };
    let mut s = String::from("\n");
    for st in streams {
        let topics: Vec<Cow<'_, str>> = st["topics"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(printable).collect())
            .unwrap_or_default();
        s += &format!(
            "multicast {} ({}): messages={} datagrams={} retransmitted={} naks={} receivers={} too_large={} (not counted in msgs_out)\n",
            text(st, "group"),
            topics.join(" "),
            num(st, "messages"),
            num(st, "datagrams"),
            num(st, "retransmitted"),
            num(st, "naks"),
            num(st, "receivers"),
            num(st, "too_large"),
        );
    }
    s
}

/// The last-value cache's line (nothing when the router has no cache patterns).
pub fn render_cache(c: &Value) -> String {
    if !c.is_object() {
        return String::new();
    }
    let patterns: Vec<Cow<'_, str>> = c["patterns"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(printable).collect())
        .unwrap_or_default();
    format!(
        "\ncache ({}): topics={} of {} bytes={} of {} stored={} evicted_topics={} evicted_messages={} too_large={} images={} images_throttled={}\n",
        patterns.join(" "),
        num(c, "topics"),
        num(c, "max_topics"),
        num(c, "bytes"),
        num(c, "max_bytes"),
        num(c, "stored"),
        num(c, "evicted_topics"),
        num(c, "evicted_messages"),
        num(c, "too_large"),
        num(c, "images"),
        num(c, "images_throttled"),
    )
}

/// The queues and the spool (guaranteed messaging), or a line saying it is off.
pub fn render_guaranteed(g: &Value) -> String {
    if g.is_null() {
        // Off by --no-guaranteed or by `guaranteed = false` in the config file: the
        // document does not say which (it said "--no-guaranteed" for both).
        return "\nguaranteed messaging: off (router started with --no-guaranteed or \
                `guaranteed = false`)\n"
            .into();
    }
    let sp = &g["spool"];
    let t = &g["totals"];
    let mut s = format!(
        "\nguaranteed: spool {} ({}), {} in {}, {} since start, {}; publishes={} acked={} nacked={} duplicates={} delivered={} redelivered={}\n",
        text(sp, "dir"),
        text(sp, "sync"),
        count(num(sp, "bytes_on_disk"), "byte", "bytes"),
        count(num(sp, "segments"), "segment", "segments"),
        // Written by this run of the router (what a restart recovered is not counted).
        count(num(sp, "records_written"), "record written", "records written"),
        count(num(sp, "fsyncs"), "fsync", "fsyncs"),
        num(t, "publishes"),
        num(t, "acked"),
        num(t, "nacked"),
        num(t, "duplicates"),
        num(t, "delivered"),
        num(t, "redelivered"),
    );
    s += &queue_table(g["queues"].as_array().map(Vec::as_slice).unwrap_or(&[]));
    s
}

/// One line per queue: depth, bytes, consumers, redeliveries, dead-lettered, rejected
/// and discarded (by `discard-oldest`).
pub fn queue_table(queues: &[Value]) -> String {
    if queues.is_empty() {
        return format!(
            "no queues (tickwire queue create NAME --sub PATTERN{})\n",
            crate::login::connection_flags()
        );
    }
    let mut s = format!(
        "{:<24} {:<13} {:>10} {:>12} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}\n",
        "QUEUE",
        "ACCESS",
        "DEPTH",
        "BYTES",
        "IN_FLIGHT",
        "CONSUMERS",
        "SPOOLED",
        "ACKED",
        "REDELIV",
        "DEAD",
        "REJECTED",
        "DISCARDED"
    );
    for q in queues {
        let d = &q["definition"];
        s += &format!(
            "{:<24} {:<13} {:>10} {:>12} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}\n",
            cell(q, "name", 24),
            text(d, "access"),
            num(q, "depth"),
            num(q, "bytes"),
            num(q, "in_flight"),
            num(q, "consumers"),
            num(q, "spooled"),
            num(q, "acked"),
            num(q, "redelivered"),
            num(q, "dead_lettered"),
            num(q, "rejected"),
            // Dropped by full_policy discard-oldest (new-user pass: only `queue show`
            // and /metrics showed them).
            num(q, "discarded"),
        );
    }
    s
}

/// String field `k` fit for a terminal ([`printable`]) in at most `n` characters: cut
/// before the first character whose escape would cross the limit, never inside an
/// escape (a half `\u{1b` would misstate the name).
fn cell(v: &Value, k: &str, n: usize) -> String {
    let raw = v.get(k).and_then(Value::as_str).unwrap_or("");
    let mut out = String::new();
    let mut used = 0;
    let mut one = [0u8; 4];
    for c in raw.chars() {
        let piece = printable(c.encode_utf8(&mut one));
        let width = piece.chars().count();
        if used + width > n {
            break;
        }
        used += width;
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A long name is cut before an escape that would not fit whole: a cut inside it
    /// (`\u{` with the rest missing) misstated the name (hostile-input pass).
    #[test]
    fn a_cell_is_never_cut_inside_an_escape() {
        let c = json!({ "name": "abcdefghijklmnopq\u{1b}[2Jxyz", "plain": "Zürich-東京-0123456789-abc" });
        assert_eq!(cell(&c, "name", 20), "abcdefghijklmnopq");
        assert_eq!(cell(&c, "name", 23), r"abcdefghijklmnopq\u{1b}");
        assert_eq!(cell(&c, "plain", 20), "Zürich-東京-0123456789");
        assert_eq!(cell(&c, "missing", 20), "");
    }

    /// New-user pass: on a quiet router with --http the probe's messages were most of
    /// the totals, unexplained.
    #[test]
    fn the_totals_say_how_much_of_them_is_the_probe() {
        let doc = |clients: Value| {
            json!({
                "router": { "name": "r", "version": "1", "listen": "127.0.0.1:7420",
                    "totals": { "msgs_in": 100 } },
                "clients": clients,
            })
        };
        let probe = json!([
            { "id": 1, "name": "tickwire-probe", "user": "_tickwire-probe", "msgs_in": 90, "msgs_out": 90 },
            { "id": 2, "name": "app", "user": "alice", "msgs_in": 10, "msgs_out": 0 },
        ]);
        assert!(render(&doc(probe))
            .contains("(of which the --http latency probe, client 1: msgs_in=90 msgs_out=90)"));
        let none = json!([{ "id": 2, "name": "app", "msgs_in": 10, "msgs_out": 0 }]);
        assert!(!render(&doc(none)).contains("probe"));
        // Anyone may take the name; with logins, only the probe's user counts.
        let named = json!([{ "id": 3, "name": "tickwire-probe", "user": "mallory", "msgs_in": 1 }]);
        assert!(!render(&doc(named)).contains("latency probe"));
    }

    #[test]
    fn control_characters_in_any_field_are_escaped_not_printed() {
        let doc = json!({
            "router": {
                "name": "r\u{1b}]0;title\u{7}",
                "version": "1\r",
                "listen": "127.0.0.1:7420",
                "totals": {},
            },
            "clients": [
                { "id": 7, "name": "feed\nERROR spool failed; data lost", "addr": "a\u{9b}2J", "phase": "open" },
                { "id": 8, "name": "Zürich 東京", "addr": "127.0.0.1:5000", "phase": "open" },
            ],
            "guaranteed": {
                "spool": { "dir": "/d\u{7f}", "sync": "batch" },
                "totals": {},
                "queues": [{ "name": "q\u{0}", "definition": { "access": "exclusive\u{85}" } }],
            },
        });
        let out = render(&doc);
        assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
        // One line per client: the forged line is part of the name's (truncated) cell.
        assert!(!out.lines().any(|l| l.starts_with("ERROR")), "{out}");
        for shown in [
            r"r\u{1b}]0;title\u{7}",
            r"1\r",
            r"feed\nERROR spool f",
            r"a\u{9b}2J",
            "Zürich 東京",
            r"/d\u{7f}",
            r"q\u{0}",
            r"exclusive\u{85}",
        ] {
            assert!(out.contains(shown), "{shown} missing from\n{out}");
        }
    }

    /// A router with logins: who each client is (anonymous ones `-`); without any
    /// login the table has no USER column.
    #[test]
    fn the_user_column_appears_when_a_client_logged_in() {
        let mut doc = json!({
            "router": { "name": "r", "version": "1", "listen": "127.0.0.1:7420", "totals": {} },
            "clients": [
                { "id": 1, "name": "feed", "addr": "127.0.0.1:5000", "phase": "open" },
                { "id": 2, "name": "strat", "addr": "127.0.0.1:5001", "phase": "open" },
            ],
        });
        assert!(!render(&doc).contains("USER"), "{}", render(&doc));
        doc["clients"][1]["user"] = json!("trader\u{1b}[2J-with-a-long-name");
        let out = render(&doc);
        let lines: Vec<&str> = out.lines().collect();
        let header = lines.iter().find(|l| l.contains("NAME")).expect("header");
        assert!(header.starts_with("  ID USER             NAME "), "{out}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("   1 -                feed ")),
            "{out}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(r"   2 trader\u{1b}[2J- strat ")),
            "{out}"
        );
    }

    /// New-user pass: the header named only the TCP listener of a router with
    /// `--shm` (and `--tls-listen`).
    #[test]
    fn the_header_names_every_listener() {
        let mut doc = json!({
            "router": { "name": "r", "version": "1", "listen": "127.0.0.1:7420", "totals": {} },
        });
        assert!(render(&doc).starts_with("router r (v1) on 127.0.0.1:7420: "));
        doc["router"]["shm"] = json!("shm:main");
        assert!(render(&doc).starts_with("router r (v1) on shm:main and 127.0.0.1:7420: "));
        doc["router"]["tls_listen"] = json!("tls://127.0.0.1:7443");
        assert!(render(&doc)
            .starts_with("router r (v1) on tls://127.0.0.1:7443, shm:main and 127.0.0.1:7420: "));
    }

    /// New-user pass: a router's multicast streams showed only in `--print-json`.
    #[test]
    fn a_line_per_multicast_stream_and_none_without() {
        let doc = serde_json::json!([{"group": "239.255.74.4:7451", "topics": ["md/>"],
            "messages": 50000, "datagrams": 22153, "retransmitted": 1192, "naks": 1128,
            "receivers": 1, "too_large": 0}]);
        assert_eq!(
            render_multicast(&doc),
            "\nmulticast 239.255.74.4:7451 (md/>): messages=50000 datagrams=22153 retransmitted=1192 naks=1128 receivers=1 too_large=0 (not counted in msgs_out)\n"
        );
        assert_eq!(render_multicast(&Value::Null), "");
        assert_eq!(render_multicast(&serde_json::json!([])), "");
    }

    #[test]
    fn the_cache_line_shows_evictions_and_is_absent_without_a_cache() {
        let doc = serde_json::json!({"patterns": ["c/>"], "topics": 1, "max_topics": 1,
            "bytes": 20, "max_bytes": 100, "stored": 2, "evicted_topics": 1,
            "evicted_messages": 1, "too_large": 0, "images": 0, "images_throttled": 0});
        let line = render_cache(&doc);
        assert!(line.contains("cache (c/>): topics=1 of 1"), "{line}");
        assert!(
            line.contains("evicted_topics=1 evicted_messages=1"),
            "{line}"
        );
        assert_eq!(render_cache(&Value::Null), "");
    }

    #[test]
    fn printable_strings_are_borrowed_unchanged() {
        for s in ["", "feed-1", "Zürich 東京 📈", "a\u{200d}b"] {
            assert!(matches!(printable(s), Cow::Borrowed(b) if b == s), "{s:?}");
        }
        assert_eq!(printable("a\tb\u{9b}"), r"a\tb\u{9b}");
    }
}
