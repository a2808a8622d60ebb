//! `tickwire pub` and `tickwire sub`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use tickwire_client::{Client, ClientOptions, Wait};

use crate::units::{parse_rate, parse_size};

/// Default router address of every client command.
pub const DEFAULT_ROUTER: &str = "127.0.0.1:7420";

const PUB_HELP: &str = "\
Modes:
  tickwire pub TOPIC MESSAGE                  one message
  tickwire pub TOPIC --stdin                  one message per input line
  tickwire pub TOPIC --count N --size B --rate R
                                              load: N messages of B bytes at R msg/s
                                              (rate 0 = as fast as possible); prints
                                              the achieved rate
  tickwire pub TOPIC MESSAGE --count N        the same message N times

Topics are levels separated by '/', e.g. md/NASDAQ/AAPL (no '*' or '>').";

#[derive(Args)]
#[command(after_help = PUB_HELP)]
pub struct PubArgs {
    /// Router address.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    /// Topic to publish to, e.g. md/NASDAQ/AAPL.
    topic: String,
    /// Message text (omit with --stdin or a load run).
    message: Option<String>,
    /// Publish one message per line read from standard input.
    #[arg(long, conflicts_with = "message")]
    stdin: bool,
    /// Number of messages to send (load mode).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Payload size in bytes for load mode (e.g. 100, 4K) [default: 100].
    #[arg(long, value_name = "BYTES", value_parser = parse_size, conflicts_with_all = ["message", "stdin"])]
    size: Option<usize>,
    /// Messages per second in load mode (e.g. 10000, 50k, 1M); 0 = as fast as possible.
    #[arg(long, value_name = "RATE", value_parser = parse_rate, default_value = "0")]
    rate: u64,
    /// Client name shown in the router's stats.
    #[arg(long, default_value = "tickwire-pub")]
    name: String,
}

pub fn run_pub(a: PubArgs) -> anyhow::Result<ExitCode> {
    tickwire_wire::topic::validate_topic(a.topic.as_bytes())
        .map_err(|e| anyhow::anyhow!("invalid topic {:?}: {e}", a.topic))?;
    let opts = ClientOptions {
        name: a.name.clone(),
        ..ClientOptions::default()
    };
    let mut client = Client::connect_with(a.router.as_str(), opts)?;
    if a.stdin {
        let stdin = std::io::stdin();
        let mut n = 0u64;
        for line in stdin.lock().lines() {
            let line = line.context("reading standard input")?;
            client.publish(&a.topic, line.as_bytes())?;
            n += 1;
        }
        client.flush()?;
        client.close()?;
        eprintln!("published {n} messages to {}", a.topic);
        return Ok(ExitCode::SUCCESS);
    }
    let payload: Vec<u8> = match (&a.message, a.size, a.count) {
        (Some(m), _, _) => m.clone().into_bytes(),
        (None, Some(size), _) => load_payload(size),
        (None, None, Some(_)) => load_payload(100),
        (None, None, None) => {
            bail!("nothing to publish: give a MESSAGE, --stdin, or --count N (see --help)")
        }
    };
    let count = a.count.unwrap_or(1);
    let start = tickwire_rt::MonoNanos::now();
    pace(count, a.rate, start, |_| client.publish(&a.topic, &payload))?;
    client.flush()?;
    let elapsed = tickwire_rt::MonoNanos::now().duration_since(start);
    client.close()?;
    if count > 1 {
        let secs = elapsed.as_secs_f64().max(1e-9);
        eprintln!(
            "published {count} messages of {} bytes to {} in {:.3} s: {:.0} msg/s, {:.1} MB/s",
            payload.len(),
            a.topic,
            secs,
            count as f64 / secs,
            count as f64 * payload.len() as f64 / secs / 1e6
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn load_payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Calls `send(i)` for i in 0..count on an open-loop schedule of `rate` msg/s
/// (0 = no pacing). Late sends are not skipped: they go out as soon as possible.
pub fn pace(
    count: u64,
    rate: u64,
    start: tickwire_rt::MonoNanos,
    mut send: impl FnMut(u64) -> Result<(), tickwire_client::Error>,
) -> anyhow::Result<()> {
    for i in 0..count {
        // rate 0: no pacing.
        if let Some(offset) = i.saturating_mul(1_000_000_000).checked_div(rate) {
            tickwire_rt::pacing::wait_until(start.add_nanos(offset));
        }
        send(i)?;
    }
    Ok(())
}

const SUB_HELP: &str = "\
Patterns: levels separated by '/'. '*' matches one level ('md/*/AAPL') or a
level prefix ('md/NAS*/AAPL'); '>' as the last level matches one or more levels
('md/>'). A message matching several of the patterns is printed once.

Output: one line per message, 'TOPIC PAYLOAD'. Payloads that are not printable
UTF-8 are shown as hex; --hex forces hex; --print-json prints one JSON object per line
({\"topic\", \"payload\" or \"payload_hex\", \"discarded\"}). When the router had to
drop messages because this subscriber read too slowly, a line says how many.

Examples:
  tickwire sub 'md/NASDAQ/>' 'md/*/IBM'              # print matching messages
  tickwire sub 'orders/>' --count 10 --print-json    # 10 messages as JSON lines
  tickwire sub 'md/>' --quiet --count 1000000        # count and rate only
  tickwire sub 'md/>' --router 10.0.0.5:7420        # another router";

#[derive(Args)]
#[command(after_help = SUB_HELP)]
pub struct SubArgs {
    /// Router address.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    /// One or more patterns, e.g. 'md/NASDAQ/>' 'md/*/IBM'.
    #[arg(required = true, value_name = "PATTERN")]
    patterns: Vec<String>,
    /// Exit after this many messages.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Print payloads as hex.
    #[arg(long)]
    hex: bool,
    /// Print one JSON object per message (`--json` is the old spelling: `--json FILE`
    /// means "write results to FILE" in every other command).
    #[arg(long, alias = "json", conflicts_with = "hex")]
    print_json: bool,
    /// Print nothing per message; report the count (and rate) at the end.
    #[arg(long, conflicts_with_all = ["hex", "print_json"])]
    quiet: bool,
    /// Client name shown in the router's stats.
    #[arg(long, default_value = "tickwire-sub")]
    name: String,
}

/// Whether `out` is a pipe whose reading end has been closed: `poll(2)` reports an error
/// on such a pipe without writing to it. False for terminals and files.
fn reader_gone(out: &impl std::os::fd::AsFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(out, PollFlags::empty())];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

pub fn run_sub(a: SubArgs) -> anyhow::Result<ExitCode> {
    let opts = ClientOptions {
        name: a.name.clone(),
        ..ClientOptions::default()
    };
    let mut client = Client::connect_with(a.router.as_str(), opts)?;
    for p in &a.patterns {
        client
            .subscribe(p)
            .with_context(|| format!("subscribing to {p:?}"))?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 << 10, stdout.lock());
    let limit = a.count.unwrap_or(u64::MAX);
    let mut received = 0u64;
    let mut discarded = 0u64;
    let mut first: Option<Instant> = None;
    let mut io_err: Option<std::io::Error> = None;
    while received < limit {
        let polled = client.poll(Wait::Timeout(Duration::from_millis(200)), |m| {
            if received >= limit || io_err.is_some() {
                return;
            }
            received += 1;
            discarded += m.discarded();
            first.get_or_insert_with(Instant::now);
            if a.quiet {
                return;
            }
            let r = print_message(&mut out, &m, a.hex, a.print_json);
            if let Err(e) = r {
                io_err = Some(e);
            }
        });
        let idle = matches!(polled, Ok(0));
        match polled {
            Ok(_) => {}
            Err(tickwire_client::Error::Closed { code, reason })
                if code == tickwire_wire::frame::ErrorCode::NORMAL
                    || code == tickwire_wire::frame::ErrorCode::SHUTTING_DOWN =>
            {
                out.flush().ok();
                eprintln!("router closed the connection: {reason}");
                break;
            }
            Err(e) => return Err(e.into()),
        }
        // A closed pipe (`tickwire sub ... | head`) ends the command quietly; the
        // buffered writer reports it on a write or on this flush, whichever comes first,
        // and a quiet subscription notices it through `reader_gone`.
        let closed = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let gone = idle && reader_gone(&std::io::stdout());
        if let Some(e) = io_err
            .take()
            .or_else(|| out.flush().err())
            .or_else(|| gone.then(closed))
        {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e).context("writing to standard output");
        }
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing to standard output");
        }
        _ => {}
    }
    if a.quiet {
        let secs = first.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
        eprintln!(
            "received {received} messages ({discarded} discarded by the router) in {secs:.3} s: {:.0} msg/s",
            received as f64 / secs.max(1e-9)
        );
    }
    client.close().ok();
    Ok(ExitCode::SUCCESS)
}

fn print_message(
    out: &mut impl Write,
    m: &tickwire_client::Message<'_>,
    hex: bool,
    json: bool,
) -> std::io::Result<()> {
    if m.discarded() > 0 && !json {
        writeln!(
            out,
            "# {} messages were discarded by the router (this subscriber read too slowly)",
            m.discarded()
        )?;
    }
    let text = std::str::from_utf8(m.payload())
        .ok()
        .filter(|t| !t.chars().any(|c| c.is_control() && c != '\t'));
    if json {
        let mut obj = serde_json::Map::new();
        obj.insert("topic".into(), m.topic().into());
        match (text, hex) {
            (Some(t), false) => obj.insert("payload".into(), t.into()),
            _ => obj.insert("payload_hex".into(), to_hex(m.payload()).into()),
        };
        obj.insert("discarded".into(), m.discarded().into());
        writeln!(out, "{}", serde_json::Value::Object(obj))
    } else {
        match (text, hex) {
            (Some(t), false) => writeln!(out, "{} {}", m.topic(), t),
            _ => writeln!(out, "{} {}", m.topic(), to_hex(m.payload())),
        }
    }
}

fn to_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}
