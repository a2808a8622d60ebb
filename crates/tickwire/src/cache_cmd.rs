//! `tickwire cache show PATTERN`: a one-shot query of the router's last-value cache.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tickwire_client::{Client, ClientOptions};

use crate::pubsub::DEFAULT_ROUTER;

const CACHE_HELP: &str = "\
The router keeps the last message of every topic matching its cache patterns
(`tickwire router --cache PATTERN`). `cache show PATTERN` prints the cached messages of
the topics matching PATTERN, one line each ('TOPIC PAYLOAD', or JSON with
--print-json), without subscribing; standard error gets the count. A router without a
cache answers with nothing.

Examples:
  tickwire cache show 'md/>'                       # every cached market-data topic
  tickwire cache show 'md/NASDAQ/AAPL' --print-json";

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
    /// Router address.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Pattern of the topics to show, e.g. 'md/>' (quoted: a shell takes '>' as a redirection).
    #[arg(value_parser = crate::units::parse_pattern)]
    pattern: String,
    /// Print payloads as hex.
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
        a.login.apply(ClientOptions::named("tickwire-cache"))?,
    )?;
    let msgs = c
        .cache_query(&a.pattern)
        .with_context(|| format!("querying the cache for {:?}", a.pattern))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for m in &msgs {
        let text = std::str::from_utf8(&m.payload)
            .ok()
            .filter(|t| !t.chars().any(|c| c.is_control() && c != '\t'));
        if a.print_json {
            let mut obj = serde_json::Map::new();
            obj.insert("topic".into(), m.topic.clone().into());
            match (text, a.hex) {
                (Some(t), false) => obj.insert("payload".into(), t.into()),
                _ => obj.insert("payload_hex".into(), hex(&m.payload).into()),
            };
            obj.insert("cached_unix_ns".into(), m.cached.unwrap_or(0).into());
            if let Some(seq) = m.seq {
                obj.insert("seq".into(), seq.into());
            }
            writeln!(out, "{}", serde_json::Value::Object(obj))?;
        } else {
            match (text, a.hex) {
                (Some(t), false) => writeln!(out, "{} {t}", m.topic)?,
                _ => writeln!(out, "{} {}", m.topic, hex(&m.payload))?,
            }
        }
    }
    out.flush()?;
    eprintln!(
        "{} match {}",
        tickwire_rt::text::count(msgs.len() as u64, "cached message", "cached messages"),
        a.pattern
    );
    c.close().ok();
    Ok(ExitCode::SUCCESS)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
