//! `tickwire queue`: create, list, show, delete and purge a router's durable queues,
//! over the protocol (QUEUE_REQUEST / QUEUE_REPLY).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use tickwire_client::{Client, ClientOptions, QueueOp, Start};

use crate::pubsub::DEFAULT_ROUTER;
use crate::units::{parse_duration, parse_size};

const QUEUE_HELP: &str = "\
A queue keeps every guaranteed message whose topic matches one of its subscription
patterns until a consumer acknowledges it, across router restarts. Publish to it with
`tickwire pub --guaranteed`, consume with `tickwire sub --queue NAME`.

Examples:
  tickwire queue create orders --sub 'orders/>'              # a shared work queue
  tickwire queue create audit --sub 'orders/>' --sub 'fills/>' --exclusive \\
      --max-bytes 1GiB --ttl 168h --dead-letter-queue audit-dlq
  tickwire queue list                                        # depth and counters
  tickwire queue show orders --print-json | jq .depth
  tickwire queue purge orders                                # drop its messages
  tickwire queue delete orders

Exit status (every queue command): 0 done; 1 an error, printed (the router not
reached, no such queue, a queue of that name exists, not permitted, guaranteed
messaging off on the router); 2 a usage error (a bad flag, or a create no publish
could reach: neither --sub nor --no-sub).";

/// `tickwire queue ...`.
#[derive(Args)]
#[command(after_help = QUEUE_HELP)]
pub struct QueueArgs {
    #[command(subcommand)]
    cmd: QueueCmd,
}

#[derive(Subcommand)]
enum QueueCmd {
    /// Create a queue (an identical definition of an existing queue is accepted).
    Create(Box<CreateArgs>),
    /// List every queue with its depth and counters.
    #[command(after_help = LIST_HELP)]
    List(Common),
    /// Show one queue's configuration and counters.
    Show(NameArgs),
    /// Delete a queue and every message in it. What the router retains for replay
    /// (`retain_bytes`, `retain_ms`: docs/guaranteed.md) stays replayable by a binding
    /// with --start until retention releases it.
    Delete(NameArgs),
    /// Remove every message from a queue; the queue stays. What the router retains for
    /// replay stays replayable by a binding with --start until retention releases it.
    Purge(NameArgs),
}

#[derive(Args)]
struct Common {
    /// Router address: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for shared
    /// memory on this host.
    #[arg(long, default_value = DEFAULT_ROUTER, value_name = "ADDR", value_parser = crate::units::parse_router_addr)]
    router: String,
    #[command(flatten)]
    login: crate::login::LoginArgs,
    /// Print the router's raw JSON answer instead of a table.
    #[arg(long, alias = "json")]
    print_json: bool,
}

const LIST_HELP: &str = "\
Examples:
  tickwire queue list
  tickwire queue list --router shm:main
  tickwire queue list --print-json                  # the router's JSON answer";

const NAME_HELP: &str = "\
Examples:
  tickwire queue show orders
  tickwire queue purge orders --router 10.0.0.5:7420
  tickwire queue delete orders --print-json";

#[derive(Args)]
#[command(after_help = NAME_HELP)]
struct NameArgs {
    /// The queue.
    name: String,
    #[command(flatten)]
    common: Common,
}

const CREATE_HELP: &str = "\
A queue receives the guaranteed messages whose topics match its --sub patterns (repeat
for several); create refuses a queue without one unless --no-sub says so (a queue that
only receives dead messages: --dead-letter-queue of another queue).
Sizes take units (64KiB, 1GiB, 100MB), durations too (500ms, 30s, 5m, 24h).
--start says which retained messages a new queue begins with: now (default: only
messages published from now on), beginning, id:N (from message id N), or
time:T with T an RFC 3339 time (2026-11-24T09:30:00Z, or with an offset:
2026-11-24T10:30:00+01:00) or Unix nanoseconds (a smaller number, seconds or
milliseconds, is refused). A start after the router's newest message id or clock is
refused: the queue would wait for messages that do not exist yet.
A queue that starts in the past is filled from the router's retained messages in the
background (~800,000 a second; the router serves everyone else meanwhile) and the
create is answered when that is done: --timeout (default 10m) is how long to wait.

Examples:
  tickwire queue create orders --sub 'orders/>'
  tickwire queue create risk-dlq --no-sub --ttl 168h             # for risk's dead messages
  tickwire queue create risk --sub 'orders/*/new' --exclusive --max-messages 1000000 \\
      --full-policy discard-oldest --ack-timeout 30s --max-redeliveries 5 \\
      --dead-letter-queue risk-dlq
  tickwire queue create replay --sub 'md/>' --start time:2026-11-24T09:30:00Z";

#[derive(Args)]
#[command(after_help = CREATE_HELP)]
struct CreateArgs {
    /// Queue name (1 to 64 bytes of letters, digits and -_.#).
    #[arg(value_parser = parse_queue_name)]
    name: String,
    /// A subscription pattern (repeat for several), e.g. 'orders/>'.
    #[arg(long = "sub", value_name = "PATTERN", value_parser = crate::units::parse_pattern)]
    subs: Vec<String>,
    /// Create it with no subscription on purpose: no publish reaches it (e.g. a
    /// dead-letter queue, which receives only dead messages). Without --sub or this,
    /// create is refused.
    #[arg(long, conflicts_with = "subs")]
    no_sub: bool,
    /// One consumer at a time (others wait as standbys); default: shared among
    /// consumers.
    #[arg(long)]
    exclusive: bool,
    /// Most messages held (0: no limit) [default: 1000000].
    #[arg(long, value_name = "N", value_parser = crate::units::parse_whole)]
    max_messages: Option<u64>,
    /// Most bytes held, topic and payload of each message, e.g. 512MiB (0: no limit)
    /// [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_bytes: Option<usize>,
    /// Largest message accepted (e.g. 64KiB); a larger one is NACKed too-large
    /// [default: the router's largest frame].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_message_size: Option<usize>,
    /// Messages older than this expire to the dead-letter queue, e.g. 24h [default:
    /// never].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    ttl: Option<Duration>,
    /// Redeliveries of one message before it is dead-lettered: given back once more
    /// after this many, it goes to the dead-message queue (N + 1 deliveries in all)
    /// [default: 16].
    #[arg(long, value_name = "N")]
    max_redeliveries: Option<u64>,
    /// A delivery not acknowledged within this long is redelivered, e.g. 5s (0: only
    /// when its consumer goes away) [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = parse_ack_timeout)]
    ack_timeout: Option<Duration>,
    /// What a full queue does with a new message: refuse it (the publisher gets a
    /// queue-full NACK) or drop the oldest [default: reject].
    #[arg(long, value_name = "POLICY", value_parser = ["reject", "discard-oldest"])]
    full_policy: Option<String>,
    /// Where dead-lettered messages go (created on first use) [default:
    /// #DEAD_MSG_QUEUE]. A message that dies in a queue that is another queue's
    /// dead-letter queue is dropped: dead messages move once.
    #[arg(long, value_name = "NAME", value_parser = parse_queue_name)]
    dead_letter_queue: Option<String>,
    /// now | beginning | id:N | time:RFC3339-or-ns (see below).
    #[arg(long, value_name = "START", value_parser = parse_create_start)]
    start: Option<Value>,
    /// How long to wait for the router's answer: a queue that starts in the past is
    /// answered once it is filled from the retained messages (~800,000 a second).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10m")]
    timeout: Duration,
    #[command(flatten)]
    common: Common,
}

/// A queue name the router takes (`valid_name`): refused here, a usage error (exit 2),
/// rather than by the router (exit 1; new-user pass).
fn parse_queue_name(s: &str) -> Result<String, String> {
    if tickwire_router::gm::queue::valid_name(s) {
        Ok(s.to_owned())
    } else {
        Err("1 to 64 bytes of letters, digits and -_.# (e.g. orders, risk-dlq)".to_owned())
    }
}

/// An ack timeout the router takes: 0 (redelivered only when the consumer goes) or at
/// least its minimum (`MIN_ACK_TIMEOUT_MS`); refused here, a usage error (exit 2).
fn parse_ack_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    let min = Duration::from_millis(tickwire_router::gm::queue::MIN_ACK_TIMEOUT_MS);
    if d.is_zero() || d >= min {
        Ok(d)
    } else {
        Err(format!(
            "{d:?} is below the router's minimum of {} ms (0: only when the consumer goes)",
            min.as_millis()
        ))
    }
}

pub fn run(a: QueueArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        QueueCmd::Create(c) => {
            if c.subs.is_empty() && !c.no_sub {
                // A usage error (status 2): nothing was sent to the router.
                eprintln!(
                    "error: queue {name} would receive no message: a guaranteed publish is \
                     stored in the queues whose --sub patterns match its topic. Give it one, \
                     e.g. `tickwire queue create {name} --sub '{name}/>'{flags}`, or --no-sub \
                     for a queue that only receives dead messages (a dead-letter queue)",
                    name = c.name,
                    flags = c.common.login.repeat_flags(&c.common.router),
                );
                return Ok(ExitCode::from(2));
            }
            let def = definition(&c);
            let json = request(
                &c.common,
                QueueOp::Create,
                &def.to_string(),
                Some(c.timeout),
            )
            .with_context(|| format!("creating queue {:?}", c.name))?;
            if c.common.print_json {
                println!("{json}");
            } else {
                let existed = serde_json::from_str::<Value>(&json)
                    .ok()
                    .and_then(|d| d.get("existed").and_then(Value::as_bool))
                    .unwrap_or(false);
                if existed {
                    println!(
                        "queue {} already exists with this definition: nothing changed",
                        c.name
                    );
                } else {
                    println!("queue {} created", c.name);
                }
                if let Some(dlq) = c.dead_letter_queue.as_deref().filter(|d| *d != c.name) {
                    // Created on first use (docs/guaranteed.md): a mistyped name would
                    // quietly become a new queue.
                    let listed = request(&c.common, QueueOp::List, "", None)
                        .ok()
                        .and_then(|j| serde_json::from_str::<Value>(&j).ok());
                    if let Some(doc) = listed {
                        if !queue_listed(&doc, dlq) {
                            eprintln!("{}", missing_dead_letter_note(dlq));
                        }
                    }
                }
            }
        }
        QueueCmd::List(c) => {
            let json = request(&c, QueueOp::List, "", None).context("listing queues")?;
            if c.print_json {
                println!("{json}");
            } else {
                let doc: Value =
                    serde_json::from_str(&json).context("the router sent invalid JSON")?;
                print!("{}", render_list(&doc));
            }
        }
        QueueCmd::Show(n) => {
            let json = request(&n.common, QueueOp::Show, &n.name, None)
                .with_context(|| format!("showing queue {:?}", n.name))?;
            if n.common.print_json {
                println!("{json}");
            } else {
                let doc: Value =
                    serde_json::from_str(&json).context("the router sent invalid JSON")?;
                print!("{}", render_show(&doc));
            }
        }
        QueueCmd::Delete(n) => simple(&n, QueueOp::Delete, "deleted")?,
        QueueCmd::Purge(n) => simple(&n, QueueOp::Purge, "purged")?,
    }
    Ok(ExitCode::SUCCESS)
}

fn simple(n: &NameArgs, op: QueueOp, done: &str) -> anyhow::Result<()> {
    let json =
        request(&n.common, op, &n.name, None).with_context(|| format!("queue {:?}", n.name))?;
    let doc = serde_json::from_str::<Value>(&json).unwrap_or(Value::Null);
    if n.common.print_json {
        println!("{json}");
    } else if let Some(purged) = doc.get("purged").and_then(Value::as_u64) {
        let dropped = tickwire_rt::text::count(purged, "message", "messages");
        println!("queue {} {done}: {dropped} dropped", n.name);
    } else if let (QueueOp::Delete, Some(depth)) = (op, doc["depth"].as_u64()) {
        // A delete answers with the queue as it was: what went with it.
        let dropped = tickwire_rt::text::count(depth, "message", "messages");
        let bound = match doc["consumers"].as_u64().unwrap_or(0) {
            0 => String::new(),
            c => format!(
                "; {} bound to it lost {}",
                tickwire_rt::text::count(c, "consumer", "consumers"),
                if c == 1 {
                    "its binding"
                } else {
                    "their bindings"
                }
            ),
        };
        println!("queue {} {done}: {dropped} dropped{bound}", n.name);
    } else {
        println!("queue {} {done}", n.name);
    }
    Ok(())
}

/// One QUEUE_REQUEST; `timeout` replaces the client's default request timeout.
fn request(
    c: &Common,
    op: QueueOp,
    arg: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<String> {
    let mut opts = c
        .login
        .apply(&c.router, ClientOptions::named("tickwire-queue"))?;
    if let Some(t) = timeout {
        opts.request_timeout = t;
    }
    let mut client = Client::connect_to(c.router.as_str(), opts)?;
    let json = match client.queue_request(op, arg) {
        Ok(json) => json,
        // New-user pass: `queue show nope` said no more than that (`sub --queue nope`
        // suggests creating it).
        Err(tickwire_client::Error::Rejected { code, text })
            if code == tickwire_client::ErrorCode::NO_SUCH_QUEUE
                && matches!(op, QueueOp::Show | QueueOp::Delete | QueueOp::Purge) =>
        {
            let flags = crate::login::connection_flags();
            return Err(tickwire_client::Error::Rejected {
                code,
                text: format!("{text} (`tickwire queue list{flags}` lists the queues)"),
            }
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    client.close().ok();
    // Checked even where it is printed as it came (--print-json): a router's answer
    // that is not JSON (or holds raw control characters) is refused, not passed on.
    serde_json::from_str::<Value>(&json).context("the router's answer is not valid JSON")?;
    Ok(json)
}

/// Whether the router's queue list holds a queue `name`.
fn queue_listed(doc: &Value, name: &str) -> bool {
    doc["queues"]
        .as_array()
        .is_some_and(|qs| qs.iter().any(|q| q["name"].as_str() == Some(name)))
}

/// What `queue create --dead-letter-queue D` says when D does not exist yet.
fn missing_dead_letter_note(dlq: &str) -> String {
    format!(
        "note: dead-letter queue {dlq} does not exist yet: the router creates it with the \
         first dead message (if the name is mistyped, that is a new queue). To choose its \
         limits, create it now: tickwire queue create {dlq} --no-sub{}",
        crate::login::connection_flags()
    )
}

/// The JSON queue definition QUEUE_REQUEST(create) carries (docs/protocol.md).
fn definition(c: &CreateArgs) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), c.name.clone().into());
    m.insert("subscriptions".into(), c.subs.clone().into());
    let access = if c.exclusive {
        "exclusive"
    } else {
        "non-exclusive"
    };
    m.insert("access".into(), access.into());
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    let ms = |d: Option<Duration>| d.map(|d| Value::from(d.as_millis() as u64));
    put("max_messages", c.max_messages.map(Value::from));
    put("max_bytes", c.max_bytes.map(|v| Value::from(v as u64)));
    put(
        "max_message_size",
        c.max_message_size.map(|v| Value::from(v as u64)),
    );
    put("ttl_ms", ms(c.ttl));
    put("max_redeliveries", c.max_redeliveries.map(Value::from));
    put("ack_timeout_ms", ms(c.ack_timeout));
    put("full_policy", c.full_policy.clone().map(Value::from));
    put(
        "dead_letter_queue",
        c.dead_letter_queue.clone().map(Value::from),
    );
    put("start", c.start.clone());
    Value::Object(m)
}

/// `now | beginning | id:N | time:T` as the definition's `start` value.
fn parse_create_start(s: &str) -> Result<Value, String> {
    Ok(match s {
        "now" => json!("now"),
        _ => match parse_start(s)? {
            Start::Queue => json!("now"),
            Start::Beginning => json!("beginning"),
            Start::MessageId(id) => json!({ "id": id }),
            Start::Time(ns) => json!({ "time_ns": ns }),
        },
    })
}

/// `queue | beginning | id:N | time:T` (T: RFC 3339 UTC or Unix nanoseconds) as a
/// binding start; `queue` (also spelled `now`) is a normal consumer.
pub fn parse_start(s: &str) -> Result<Start, String> {
    let expected = "expected queue, now, beginning, id:N or time:T (RFC 3339 or Unix ns)";
    match s {
        "queue" | "now" => return Ok(Start::Queue),
        "beginning" => return Ok(Start::Beginning),
        _ => {}
    }
    if let Some(id) = s.strip_prefix("id:") {
        return id
            .parse()
            .map(Start::MessageId)
            .map_err(|_| format!("{id:?} is not a message id: {expected}"));
    }
    if let Some(t) = s.strip_prefix("time:") {
        if let Ok(ns) = t.parse::<u64>() {
            // Below 10^15 ns is before 1970-01-12: a time in seconds or milliseconds,
            // read as nanoseconds, would replay everything retained (new-user pass).
            if ns < MIN_UNIX_NS {
                return Err(format!(
                    "{t} as Unix nanoseconds is within 12 days of 1970: a time in seconds \
                     or milliseconds? Give nanoseconds ({}000000 for {t} ms) or an RFC 3339 \
                     time (2026-11-24T09:30:00Z); `beginning` starts at the oldest message",
                    t
                ));
            }
            return Ok(Start::Time(ns));
        }
        return parse_rfc3339_utc(t).map(Start::Time).ok_or_else(|| {
            format!("{t:?} is not a time: {expected}; e.g. 2026-11-24T09:30:00Z or 2026-11-24T10:30:00+01:00")
        });
    }
    Err(format!("{s:?}: {expected}"))
}

/// The least Unix time in nanoseconds `time:N` takes: 10^15 (1970-01-12); smaller
/// numbers are seconds or milliseconds mistaken for nanoseconds.
const MIN_UNIX_NS: u64 = 1_000_000_000_000_000;

/// `2026-11-24T09:30:00Z`, with optional fraction (up to 9 digits) and `Z` or an offset
/// (`+01:00`, `-05:00`), to Unix nanoseconds (UTC).
fn parse_rfc3339_utc(t: &str) -> Option<u64> {
    let (t, offset_s) = match t.strip_suffix(['Z', 'z']) {
        Some(t) => (t, 0i64),
        None => {
            let (t, off) = t.split_at_checked(t.len().checked_sub(6)?)?;
            let o = off.as_bytes();
            let sign = match o[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if o[3] != b':'
                || !off[1..3]
                    .bytes()
                    .chain(off[4..].bytes())
                    .all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let (h, m): (i64, i64) = (off[1..3].parse().ok()?, off[4..].parse().ok()?);
            if h > 23 || m > 59 {
                return None;
            }
            (t, sign * (h * 3600 + m * 60))
        }
    };
    let (date, time) = t.split_once(['T', 't', ' '])?;
    let d = date.as_bytes();
    if d.len() != 10 || d[4] != b'-' || d[7] != b'-' {
        return None;
    }
    let (hms, frac) = match time.split_once('.') {
        Some((h, f)) => (h, f),
        None => (time, ""),
    };
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // FIX UTCTimestamp syntax, whose parser checks every field's range.
    let mut fix = format!("{}{}{}-{}", &date[..4], &date[5..7], &date[8..10], hms);
    if !frac.is_empty() {
        let width = [3, 6, 9].into_iter().find(|w| *w >= frac.len())?;
        fix.push('.');
        fix.push_str(frac);
        fix.extend(std::iter::repeat_n('0', width - frac.len()));
    }
    let local = tickwire_fix::codec::parse_utc_timestamp(fix.as_bytes())?;
    // Local time = UTC + offset.
    let utc = i128::from(local) - i128::from(offset_s) * 1_000_000_000;
    u64::try_from(utc).ok()
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn render_list(doc: &Value) -> String {
    let queues = doc["queues"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if queues.is_empty() {
        return "no queues\n".into();
    }
    let mut s = format!(
        "{:<24} {:>12} {:>14} {:>9} {:>12} {:>11} {:>13} {:>10}  SUBSCRIPTIONS\n",
        "NAME", "DEPTH", "BYTES", "CONSUMERS", "ACKED", "REDELIVERED", "DEAD_LETTERED", "DISCARDED"
    );
    for q in queues {
        // The router puts them in the definition; accept them at the top level too.
        let subs = q["definition"]["subscriptions"]
            .as_array()
            .or_else(|| q["subscriptions"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(safe)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        s += &format!(
            "{:<24} {:>12} {:>14} {:>9} {:>12} {:>11} {:>13} {:>10}  {}\n",
            safe(q["name"].as_str().unwrap_or("")),
            num(q, "depth"),
            num(q, "bytes"),
            num(q, "consumers"),
            num(q, "acked"),
            num(q, "redelivered"),
            num(q, "dead_lettered"),
            num(q, "discarded"),
            subs
        );
    }
    s
}

/// One `key  value` line per field, sorted by key; a nested object's fields as
/// `parent.key` lines (the definition's `definition.max_bytes`, ...), a list of plain
/// values space-separated, anything deeper as JSON.
fn render_show(doc: &Value) -> String {
    let Some(obj) = doc.as_object() else {
        return format!("{}\n", safe(&doc.to_string()));
    };
    let mut rows = Vec::new();
    flatten("", obj, &mut rows);
    // The name first, the state next, the definition last (new-user pass: in key order
    // `name` sat between `in_flight` and `redelivered`, the definition in the middle).
    // What an operator looks at first (depth, in flight, consumers) right after it;
    // the definition's own name is the name again.
    rows.retain(|(k, _)| k != "definition.name");
    let first = ["name", "depth", "bytes", "in_flight", "consumers"];
    rows.sort_by_key(|(k, _)| match first.iter().position(|f| f == k) {
        Some(i) => i,
        None if k.starts_with("definition.") => first.len() + 1,
        None => first.len(),
    });
    for (k, v) in &mut rows {
        if let (Some(meaning), "0") = (zero_means(k), v.as_str()) {
            *v = format!("0 ({meaning})");
        }
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

/// What 0 means for a definition's limit `key` (docs/guaranteed.md), which a bare 0
/// does not say (new-user pass: `definition.max_message_size 0`).
fn zero_means(key: &str) -> Option<&'static str> {
    Some(match key.strip_prefix("definition.")? {
        "max_messages" | "max_bytes" => "no limit",
        "max_message_size" => "up to the router's max frame",
        "ttl_ms" => "forever",
        "ack_timeout_ms" => "redelivered only when its consumer goes away",
        _ => return None,
    })
}

/// `s` fit for a terminal (the router's strings, names and patterns, printed raw could
/// forge table rows or drive the terminal: hostile-input pass; `stats` escaped them
/// already).
fn safe(s: &str) -> String {
    tickwire_rt::text::terminal_safe(s).into_owned()
}

/// `obj`'s fields as `(prefix + key, shown value)` rows, nested objects expanded; every
/// string made fit for a terminal ([`safe`]).
fn flatten(prefix: &str, obj: &serde_json::Map<String, Value>, rows: &mut Vec<(String, String)>) {
    for (k, v) in obj {
        let key = format!("{prefix}{}", safe(k));
        match v {
            Value::Object(inner) if !inner.is_empty() => flatten(&format!("{key}."), inner, rows),
            Value::String(t) => rows.push((key, safe(t))),
            Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                let shown: Vec<String> = items
                    .iter()
                    .map(|i| match i {
                        Value::String(t) => safe(t),
                        other => safe(&other.to_string()),
                    })
                    .collect();
                rows.push((key, shown.join(" ")));
            }
            // JSON text of anything deeper: serde_json leaves DEL, C1 controls and bidi
            // overrides unescaped (review).
            other => rows.push((key, safe(&other.to_string()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        cmd: QueueCmd,
    }

    /// Hostile-input pass: a router's queue names, patterns and fields were printed
    /// raw (an escape sequence cleared the screen, a line break forged a row).
    #[test]
    fn router_strings_are_escaped_in_list_and_show() {
        let doc = serde_json::json!({ "queues": [{
            "name": "q\u{1b}[2J\nforged 1 2 3",
            "depth": 1,
            "definition": { "subscriptions": ["a/\u{1b}[31m>"] },
        }]});
        let list = render_list(&doc);
        assert_eq!(list.lines().count(), 2, "{list}");
        assert!(
            !list.chars().any(|c| c.is_control() && c != '\n'),
            "{list:?}"
        );
        let show = render_show(&serde_json::json!({
            "deep": [{ "n": "\u{9b}2J\u{202e}" }],
            "name": "x\ry",
            "k\u{7}": ["\u{1b}]0;OWNED\u{7}"],
            "definition": { "d\u{1b}": "v\n" },
        }));
        assert_eq!(show.lines().count(), 4, "{show}");
        assert!(
            !show.chars().any(|c| c.is_control() && c != '\n'),
            "{show:?}"
        );
        assert!(!show.contains('\u{202e}'), "{show:?}");
    }

    /// Regression (new-user pass): the definition was one line of raw JSON.
    #[test]
    fn show_expands_the_definition() {
        let doc = serde_json::json!({
            "name": "orders",
            "depth": 3,
            "definition": { "subscriptions": ["orders/>", "fills/*"], "max_bytes": 1024,
                "max_messages": 0, "ttl_ms": 0 },
            "empty": {},
            "redelivered": 0,
        });
        // New-user pass: a limit of 0 says what it means.
        // New-user pass: the name and the depth first, the definition last.
        assert_eq!(
            render_show(&doc),
            "name                      orders\n\
             depth                     3\n\
             empty                     {}\n\
             redelivered               0\n\
             definition.max_bytes      1024\n\
             definition.max_messages   0 (no limit)\n\
             definition.subscriptions  orders/> fills/*\n\
             definition.ttl_ms         0 (forever)\n"
        );
    }

    #[test]
    fn start_positions() {
        assert_eq!(parse_start("queue"), Ok(Start::Queue));
        assert_eq!(parse_start("beginning"), Ok(Start::Beginning));
        assert_eq!(parse_start("id:42"), Ok(Start::MessageId(42)));
        assert_eq!(
            parse_start("time:1796666800000000000"),
            Ok(Start::Time(1_796_666_800_000_000_000))
        );
        // Seconds or milliseconds taken for nanoseconds: refused with the reason.
        for small in ["5", "1796666800", "1796666800000"] {
            let e = parse_start(&format!("time:{small}")).unwrap_err();
            assert!(e.contains("seconds or milliseconds"), "{e}");
        }
        assert_eq!(
            parse_start("time:1970-01-01T00:00:01Z"),
            Ok(Start::Time(1_000_000_000))
        );
        assert_eq!(
            parse_start("time:2026-11-24T09:30:00.5Z"),
            Ok(Start::Time(1_795_512_600_500_000_000))
        );
        // An offset is taken: 10:30 at +01:00 is 09:30 UTC.
        assert_eq!(
            parse_start("time:2026-11-24T10:30:00+01:00"),
            parse_start("time:2026-11-24T09:30:00Z")
        );
        assert_eq!(
            parse_start("time:2026-11-24T04:30:00-05:00"),
            parse_start("time:2026-11-24T09:30:00Z")
        );
        assert!(parse_start("time:2026-11-24T09:30:00+25:00").is_err());
        assert!(parse_start("time:2026-11-24T09:30:00+0100").is_err());
        assert!(parse_start("time:2026-13-24T09:30:00Z").is_err());
        assert!(parse_start("id:x").is_err());
        assert!(parse_start("later").is_err());
        assert_eq!(parse_create_start("now"), Ok(json!("now")));
        assert_eq!(parse_create_start("id:7"), Ok(json!({"id": 7})));
    }

    /// New-user pass: a bad queue name and an ack timeout under the router's 50 ms were
    /// refused by the router (exit 1); the help says a bad flag is a usage error.
    #[test]
    fn bad_names_and_short_ack_timeouts_are_usage_errors() {
        for args in [
            &["t", "create", "bad name", "--sub", "a/>"][..],
            &["t", "create", "x", "--sub", "a/>", "--ack-timeout", "10ms"][..],
            &[
                "t",
                "create",
                "x",
                "--sub",
                "a/>",
                "--dead-letter-queue",
                "a/b",
            ][..],
        ] {
            let e = T::try_parse_from(args).err().expect("refused");
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
        for ok in ["0s", "50ms", "5s"] {
            assert!(
                T::try_parse_from(["t", "create", "x#1", "--sub", "a/>", "--ack-timeout", ok])
                    .is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn create_builds_the_documented_definition() {
        let t = T::parse_from([
            "t",
            "create",
            "orders",
            "--sub",
            "orders/>",
            "--sub",
            "fills/>",
            "--exclusive",
            "--max-bytes",
            "1KiB",
            "--ttl",
            "2s",
            "--ack-timeout",
            "500ms",
            "--full-policy",
            "discard-oldest",
            "--start",
            "beginning",
        ]);
        let QueueCmd::Create(c) = t.cmd else { panic!() };
        assert_eq!(
            definition(&c),
            json!({
                "name": "orders",
                "subscriptions": ["orders/>", "fills/>"],
                "access": "exclusive",
                "max_bytes": 1024,
                "ttl_ms": 2000,
                "ack_timeout_ms": 500,
                "full_policy": "discard-oldest",
                "start": "beginning",
            })
        );
    }

    #[test]
    fn list_renders_one_row_per_queue() {
        let doc = json!({"queues": [{"name": "orders", "depth": 3, "bytes": 300,
            "consumers": 1, "acked": 9, "redelivered": 2, "dead_lettered": 0,
            "discarded": 7, "subscriptions": ["orders/>"]}]});
        let s = render_list(&doc);
        assert!(s.starts_with("NAME"), "{s}");
        assert!(s.contains("orders") && s.contains("orders/>"), "{s}");
        // New-user pass: what discard-oldest dropped was in `queue show` only.
        let head: Vec<&str> = s.lines().next().unwrap().split_whitespace().collect();
        let row: Vec<&str> = s.lines().nth(1).unwrap().split_whitespace().collect();
        let at = head
            .iter()
            .position(|h| *h == "DISCARDED")
            .expect("a DISCARDED column");
        assert_eq!(row[at], "7", "{s}");
        assert_eq!(render_list(&json!({"queues": []})), "no queues\n");
    }
}
