//! `tickwire cache show PATTERN`: a one-shot query of the router's last-value cache.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tickwire_client::{Client, ClientOptions};

use tickwire_wire::topic::patterns_overlap;

use crate::pubsub::DEFAULT_ROUTER;

const CACHE_HELP: &str = "\
The router keeps the last message of every topic matching its cache patterns
(`tickwire router --cache PATTERN`). `cache show PATTERN` prints the cached messages of
the topics matching PATTERN, one line each ('TOPIC PAYLOAD' as `tickwire sub` prints
it: text as text, a feed handler's md/ update decoded, other bytes as hex; or JSON with
--print-json), in topic order (a topic's messages, with a cache depth above 1, oldest
first), without subscribing; standard error gets the count. When there is none,
it says why: the router keeps no cache, or caches no topic matching PATTERN (it names
its cache patterns), or caches them but none was published since it started. (The
reason needs the router's stats, which only admin users may read; others get the count.)

Examples:
  tickwire cache show 'md/>'                       # every cached market-data topic
  tickwire cache show 'md/NASDAQ/AAPL' --print-json

Exit status: 0 printed (also when nothing is cached: standard error says why); 1 an
error, printed (the router not reached, a refused login); 2 a usage error (a bad
pattern or flag).";

#[derive(Args)]
#[command(after_help = CACHE_HELP)]
pub struct CacheArgs {
    #[command(subcommand)]
    cmd: CacheCmd,
}

#[derive(Subcommand)]
enum CacheCmd {
    /// Print the cached messages of the topics matching PATTERN.
    Show(ShowArgs),
}

#[derive(Args)]
#[command(after_help = CACHE_HELP)]
struct ShowArgs {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Pattern of the topics to show, e.g. 'md/>' (quoted: a shell takes '>' as a redirection).
    #[arg(value_parser = crate::units::parse_pattern)]
    pattern: String,
    /// Print payloads as hex (also text and market-data updates).
    #[arg(long)]
    hex: bool,
    /// One JSON object per message ({"topic", "payload", "cached_unix_ns", ...}).
    #[arg(long, conflicts_with = "hex")]
    print_json: bool,
}

pub fn run(a: CacheArgs) -> anyhow::Result<ExitCode> {
    let CacheCmd::Show(a) = a.cmd;
    let mut c = Client::connect_to(
        a.router.as_str(),
        a.login
            .apply(&a.router, ClientOptions::named("tickwire-cache"))?,
    )?;
    let mut msgs = c
        .cache_query(&a.pattern)
        .with_context(|| format!("querying the cache for {:?}", a.pattern))?;
    // The router answers in its own order (its cache's); people read topics sorted.
    // Stable: a topic's messages keep their order.
    msgs.sort_by(|x, y| x.topic.cmp(&y.topic));
    let mut out = std::io::BufWriter::new(crate::units::LinesOut(std::io::stdout().lock()));
    // Printed as `sub` prints a message (one shared writer): the topic made safe for
    // a terminal, a market-data update on an md/ topic decoded, other binary as hex
    // (new-user pass: the cache printed a feed's updates as hex where sub decoded them).
    for m in &msgs {
        if a.print_json {
            let mut obj = crate::pubsub::json_object(&m.topic, &m.payload, a.hex);
            obj.insert("cached_unix_ns".into(), m.cached.unwrap_or(0).into());
            if let Some(seq) = m.seq {
                obj.insert("seq".into(), seq.into());
            }
            writeln!(out, "{}", serde_json::Value::Object(obj))?;
        } else {
            crate::pubsub::write_line(&mut out, &m.topic, &m.payload, a.hex)?;
        }
    }
    out.flush()?;
    let found = tickwire_rt::text::count(msgs.len() as u64, "cached message", "cached messages");
    if !msgs.is_empty() {
        let verb = if msgs.len() == 1 { "matches" } else { "match" };
        eprintln!("{found} {verb} {}", a.pattern);
    } else {
        // Nothing: say whether the router caches these topics at all. Its cache
        // patterns are in the stats document (admin users only; else say less).
        let patterns = c.stats_json().ok().and_then(|j| cache_patterns(&j));
        eprintln!("{}", why_none(&a.pattern, patterns.as_deref()));
    }
    c.close().ok();
    Ok(ExitCode::SUCCESS)
}

/// The router's cache patterns from its stats document: `Some(empty)` when it keeps
/// no cache, `None` when the document does not say.
pub(crate) fn cache_patterns(stats: &str) -> Option<Vec<String>> {
    let doc: serde_json::Value = serde_json::from_str(stats).ok()?;
    match doc.get("cache")? {
        serde_json::Value::Null => Some(Vec::new()),
        cache => Some(
            cache
                .get("patterns")?
                .as_array()?
                .iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect(),
        ),
    }
}

/// For `sub --initial-image PATTERN`: a note when the router's cache patterns (`None`:
/// unknown) show that no image can come, which the subscriber would otherwise not
/// notice (the subscription is live only).
pub(crate) fn no_image_note(pattern: &str, cached: Option<&[String]>) -> Option<String> {
    const HOW: &str = "(a router caches the topics matching its --cache patterns)";
    match cached? {
        [] => Some(format!(
            "--initial-image: the router keeps no last-value cache, so {pattern} gets no \
             initial image, live messages only {HOW}"
        )),
        list if !list.iter().any(|c| patterns_overlap(c, pattern)) => Some(format!(
            "--initial-image: the router caches no topic matching {pattern} (its cache \
             patterns: {}), so it gets no initial image, live messages only",
            list.join(" ")
        )),
        _ => None,
    }
}

/// What an empty answer to `pattern` means, given the router's cache patterns (`None`:
/// unknown).
fn why_none(pattern: &str, cached: Option<&[String]>) -> String {
    const HOW: &str = "(a router caches the topics matching its --cache patterns: \
                       `tickwire router --cache 'md/>'`, config key cache)";
    match cached {
        Some([]) => {
            format!("0 cached messages match {pattern}: the router keeps no last-value cache {HOW}")
        }
        Some(list) if !list.iter().any(|c| patterns_overlap(c, pattern)) => format!(
            "0 cached messages match {pattern}: the router caches no topic matching it; its \
             cache patterns are {} {HOW}",
            list.join(" ")
        ),
        Some(list) => format!(
            "0 cached messages match {pattern}: the router caches such topics (its cache \
             patterns: {}) but holds none now (none published since it started, or \
             evicted)",
            list.join(" ")
        ),
        None => format!(
            "0 cached messages match {pattern}: none published since the router started, \
             or the router does not cache these topics {HOW}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_answer_says_whether_the_router_caches_the_pattern() {
        let none = cache_patterns(r#"{"router": {}, "cache": null}"#);
        assert_eq!(none.as_deref(), Some(&[][..]));
        let md = cache_patterns(r#"{"cache": {"patterns": ["md/>"], "depth": 1}}"#);
        assert_eq!(md, Some(vec!["md/>".to_owned()]));
        assert_eq!(cache_patterns(r#"{"router": {}}"#), None);
        let say = |p: &str, c: Option<Vec<String>>| why_none(p, c.as_deref());
        assert!(say("md/>", none.clone()).contains("keeps no last-value cache"));
        assert!(say("fx/>", md.clone()).contains("caches no topic matching it"));
        // Overlapping, not only contained: md/NASDAQ/* and md/> share topics.
        assert!(say("md/NASDAQ/*", md.clone()).contains("holds none now"));
        assert!(say(">", md).contains("holds none now"));
        assert!(say("md/>", None).contains("or the router does not cache"));
    }
}
