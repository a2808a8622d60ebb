//! `tickwire`: the router, the command-line clients and the demo in one binary.

#![forbid(unsafe_code)]
// The binary is where output goes: it prints what the libraries return. Library crates
// deny these lints (workspace `[lints]`).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench_cmd;
mod cache_cmd;
mod demo;
mod demo_gm;
mod feed_cmd;
mod fix_cmd;
mod listen;
mod logging;
mod login;
mod mcast_cmd;
mod md_bench_cmd;
mod md_cmd;
mod monitor;
mod pubsub;
mod queue_cmd;
mod replay_cmd;
mod reqrep_cmd;
mod router_cmd;
mod stats;
mod sub_mcast;
mod temp_spool;
mod units;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

const ABOUT: &str =
    "tickwire: a low-latency messaging stack for trading: router, FIX engine, market data";

const LONG_ABOUT: &str = "\
tickwire: a low-latency messaging stack for trading systems, in one binary: a topic
pub/sub message router and its clients, a QuickFIX-compatible FIX engine (tickwire
fix), an ITCH/MoldUDP64 market-data feed handler (tickwire md, feed, replay), and the
benchmark suite that measures them (tickwire bench).

A router accepts TCP connections from clients. Publishers send messages to
hierarchical topics such as md/NASDAQ/AAPL; subscribers register patterns
and the router forwards each message only to the clients whose patterns match.

Patterns: levels are separated by '/'. '*' matches one whole level, or a level
prefix when it ends a level ('md/NAS*/AAPL'); '>' as the last level matches one
or more remaining levels ('md/>').

Start here:  tickwire demo   (router, publishers and subscribers in-process, guaranteed
                               messaging through router crashes, market data and
                               tick-to-trade: about 25 seconds)";

const EXAMPLES: &str = "\
Examples:
  tickwire demo                                   # a ~25-second tour with latency reports
  tickwire router                                 # router on 127.0.0.1:7420
  tickwire sub 'md/NASDAQ/>' 'md/*/IBM'           # print matching messages
  tickwire pub md/NASDAQ/AAPL 'bid 189.20'        # publish one message
  tickwire pub md/NASDAQ/AAPL --count 1000000 --size 100 --rate 0   # load
  tickwire reply svc/time --exec date             # a responder
  tickwire request svc/time now                   # ask it (exit 5: no responders)
  tickwire router --cache 'md/>'                  # keep every md topic's last value
  tickwire sub 'md/>' --initial-image             # cached last values, then live
  tickwire cache show 'md/>'                      # the cached values, no subscription
  tickwire stats                                  # per-client counters
  tickwire queue create orders --sub 'orders/>'   # a durable queue
  tickwire pub orders/new 'buy 100' --guaranteed  # stored, acknowledged publish
  tickwire sub --queue orders                     # consume and acknowledge
  tickwire mcast recv 'md/>'                      # reliable multicast, no router
  tickwire mcast send md/X --count 1000 --loss 0.05   # ... recovered by NAK
  tickwire bench pingpong                         # latency vs size: raw TCP/UDP vs tickwire

Logging: --log-level LEVEL (or TICKWIRE_LOG=debug); the default is 'info' for the
router and 'warn' for the clients. --log-format json writes one JSON object per line;
--log-file FILE appends there instead of stderr. SIGHUP (router) reopens the log file
and re-reads the level from the --config file's [log] table.";

#[derive(Parser)]
#[command(name = "tickwire", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    log: logging::LogArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a message router.
    Router(Box<router_cmd::RouterArgs>),
    /// Publish messages: one, one per stdin line, or a paced load.
    Pub(pubsub::PubArgs),
    /// Subscribe to patterns and print what arrives.
    Sub(pubsub::SubArgs),
    /// Send a request and print the first reply (request/reply).
    Request(reqrep_cmd::RequestArgs),
    /// Answer requests on a pattern: echo, or run a command per request.
    Reply(reqrep_cmd::ReplyArgs),
    /// Show a router's per-client counters and totals.
    Stats(stats::StatsArgs),
    /// Last-value cache: show the cached messages of the topics matching a pattern.
    Cache(cache_cmd::CacheArgs),
    /// Durable queues: create, list, show, delete, purge.
    Queue(queue_cmd::QueueArgs),
    /// Hash a password (or make a token) for the router's [auth] users.
    Passwd(login::PasswdArgs),
    /// The tour on an embedded default: pub/sub latency, guaranteed orders through router crashes, market data, FIX tick-to-trade.
    Demo(demo::DemoArgs),
    /// Measure: ping-pong, router fan-out (vs NATS), rate sweeps, market-data replay, FIX tick-to-trade.
    Bench(bench_cmd::BenchArgs),
    /// Market data: generate a synthetic ITCH session, publish it as MoldUDP64, capture to pcap.
    Md(md_cmd::MdArgs),
    /// Reliable multicast without a router: send to a group, receive with NAK recovery.
    Mcast(mcast_cmd::McastArgs),
    /// ITCH feed handler: MoldUDP64 multicast in, order books, normalized updates to the router.
    Feed(feed_cmd::FeedArgs),
    /// Replay a pcap capture's UDP datagrams with their recorded timing (1x, 4x, max).
    Replay(replay_cmd::ReplayArgs),
    /// FIX engine: run an acceptor or initiator from a QuickFIX settings file.
    Fix(fix_cmd::FixArgs),
}

fn main() -> std::process::ExitCode {
    // Started by a bench or the demo: end with it, even when it is killed.
    if !tickwire_rt::child::exit_with_parent() {
        eprintln!("error: the command that started this one has already ended");
        return std::process::ExitCode::FAILURE;
    }
    exit_quietly_on_broken_pipe();
    let cli = hyphen_values(Cli::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| hash_name_tip(suggest_subcommand(e)).exit());
    let default_level = match cli.cmd {
        Cmd::Router(_) => "info",
        _ => "warn",
    };
    // Where SIGHUP reopens the log file (or reloads the router's settings), it must not
    // end the process before that handling is installed (after the file is open).
    let sighup_reloads = cli.log.log_file.is_some()
        || matches!(cli.cmd, Cmd::Router(_) | Cmd::Feed(_) | Cmd::Fix(_));
    if sighup_reloads {
        if let Err(e) = logging::hold_sighup() {
            eprintln!("error: {}", units::error_text(&e));
            return std::process::ExitCode::FAILURE;
        }
    }
    let log = match logging::init(&cli.log, default_level) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("error: {}", units::error_text(&e));
            return match e.downcast_ref::<units::UsageError>() {
                Some(_) => std::process::ExitCode::from(2),
                None => std::process::ExitCode::FAILURE,
            };
        }
    };
    // `--log-file`'s promise, for every command: SIGHUP reopens the file (the router,
    // the feed handler and the FIX engine install their own SIGHUP handling).
    if cli.log.log_file.is_some() && !matches!(cli.cmd, Cmd::Router(_) | Cmd::Feed(_) | Cmd::Fix(_))
    {
        if let Err(e) = logging::reopen_on_sighup() {
            eprintln!("error: {}", units::error_text(&e));
            return std::process::ExitCode::FAILURE;
        }
    }
    // The router logs its Ctrl-C with its other events; every other command tells the
    // person who pressed it in a plain line.
    if !matches!(cli.cmd, Cmd::Router(_)) {
        tickwire_rt::stop::set_notifier(|note| eprintln!("{note}"));
    }
    let result = match cli.cmd {
        Cmd::Router(a) => router_cmd::run(*a),
        Cmd::Pub(a) => pubsub::run_pub(a),
        Cmd::Sub(a) => pubsub::run_sub(a),
        Cmd::Request(a) => reqrep_cmd::run_request(a),
        Cmd::Reply(a) => reqrep_cmd::run_reply(a),
        Cmd::Stats(a) => stats::run(a),
        Cmd::Cache(a) => cache_cmd::run(a),
        Cmd::Queue(a) => queue_cmd::run(a),
        Cmd::Passwd(a) => login::run_passwd(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Bench(a) => bench_cmd::run(a),
        Cmd::Md(a) => md_cmd::run(a),
        Cmd::Replay(a) => replay_cmd::run(a),
        Cmd::Feed(a) => feed_cmd::run_cmd(a),
        Cmd::Mcast(a) => mcast_cmd::run(a),
        Cmd::Fix(a) => fix_cmd::run(a),
    };
    // The queued log lines first, then the final error (in the order they happened).
    drop(log);
    match result {
        Ok(code) => code,
        // As clap reports a usage error: status 2.
        // A router setting out of range (a flag or the config file) is one too.
        Err(e)
            if e.downcast_ref::<units::UsageError>().is_some()
                || e.downcast_ref::<tickwire_bench::UsageError>().is_some()
                || e.downcast_ref::<tickwire_router::config::ConfigError>()
                    .is_some() =>
        {
            eprintln!("error: {}", units::error_text(&e));
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            let text = units::error_text(&e);
            eprintln!("error: {text}");
            // The router's refusal names no flags (its clients are not all this CLI);
            // new-user pass: the message did not say how to log in here.
            if text.contains("authentication required") {
                eprintln!("{LOGIN_HINT}");
            }
            // A command the router suggests ("tickwire queue show orders") names no
            // router or login: it knows neither (new-user pass: copied, it went to the
            // default router).
            let flags = login::connection_flags();
            if !flags.is_empty() && suggests_client_command(&text) && !text.contains(flags) {
                eprintln!(
                    "hint: add `{}` to the tickwire command suggested above to run it \
                     against this router",
                    flags.trim_start()
                );
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether `text` suggests a command that connects to a router as a client (`tickwire
/// queue show orders`), which the failing command's --router and login flags must
/// follow to reach the same router; not `tickwire router`, `tickwire passwd` and the
/// like.
fn suggests_client_command(text: &str) -> bool {
    ["queue", "pub", "sub", "stats", "request", "reply", "cache"]
        .iter()
        .any(|cmd| {
            let word = format!("tickwire {cmd}");
            text.match_indices(&word).any(|(at, _)| {
                text[at + word.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '_')
            })
        })
}

/// Lets every option that takes exactly one value take one that starts with `-`
/// (`--count -5`, `--duration -5s`), so its own parser refuses it with the reason
/// ("out of range: negative"). Left to clap, such a value reads as an unknown flag,
/// with a tip (`use '-- -5'`) that does not work for an option (new-user pass).
fn hyphen_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let one_value = a
            .get_num_args()
            .is_none_or(|r| r.min_values() == 1 && r.max_values() == 1);
        let sets = matches!(
            a.get_action(),
            clap::ArgAction::Set | clap::ArgAction::Append
        );
        if !a.is_positional() && sets && one_value {
            a.allow_hyphen_values(true)
        } else {
            a
        }
    })
    .mut_subcommands(hyphen_values)
}

/// Adds a tip to clap's "a value is required for '--queue <NAME>'" error: an unquoted
/// `#DEAD_MSG_QUEUE` is a shell comment, so the flag reaches the program without its
/// value (new-user pass: clap's bare error did not say why).
fn hash_name_tip(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let names_a_queue = matches!(
        e.get(ContextKind::InvalidArg),
        Some(ContextValue::String(arg))
            if arg.starts_with("--queue") || arg.starts_with("--dead-letter-queue")
    );
    let missing = matches!(
        e.get(ContextKind::InvalidValue),
        Some(ContextValue::String(v)) if v.is_empty()
    );
    if e.kind() == ErrorKind::InvalidValue && names_a_queue && missing {
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![
                "a queue name starting with '#' must be quoted ('#DEAD_MSG_QUEUE'): the shell \
                 takes an unquoted # for the start of a comment"
                    .into(),
            ]),
        );
    }
    e
}

/// Adds a suggestion to clap's "unrecognized subcommand" error when it made none:
/// its similarity measure misses swapped letters in short names (`tickwire sbu`,
/// `tickwire bench pignpong`), which one edit away (a swap counts as one) catches.
fn suggest_subcommand(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidSubcommand || e.get(ContextKind::SuggestedSubcommand).is_some()
    {
        return e;
    }
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidSubcommand).cloned() else {
        return e;
    };
    // The command whose subcommand was mistyped: the one the words before it name.
    let mut cmd = Cli::command();
    // `args_os`: an earlier argument need not be UTF-8 (a --log-file path), and
    // `args` would panic on it (review).
    for word in std::env::args_os().skip(1) {
        let Some(word) = word.to_str() else {
            continue;
        };
        if word == typed {
            break;
        }
        if let Some(sub) = cmd.find_subcommand(word).cloned() {
            cmd = sub;
        }
    }
    if let Some(near) = nearest_subcommand(&cmd, &typed) {
        e.insert(
            ContextKind::SuggestedSubcommand,
            ContextValue::Strings(vec![near]),
        );
    }
    e
}

/// The subcommand of `cmd` one edit (an insertion, deletion, substitution or swap of
/// neighbours) from `typed`, if exactly one is.
fn nearest_subcommand(cmd: &clap::Command, typed: &str) -> Option<String> {
    let mut near = cmd
        .get_subcommands()
        .map(|s| s.get_name())
        .filter(|name| *name != "help" && strsim::osa_distance(typed, name) == 1);
    let first = near.next()?;
    near.next().is_none().then(|| first.to_owned())
}

/// Printed under a refusal of an anonymous login.
const LOGIN_HINT: &str = "\
log in with --user NAME (the password from --password-file FILE, TICKWIRE_PASSWORD, or a \
prompt) or --token TOKEN (or TICKWIRE_TOKEN); `tickwire passwd --help` makes them; over TLS, \
a client certificate whose name the router maps to a user (--cert FILE --key FILE)";

/// `println!` panics when standard output is a closed pipe (`tickwire ... | head`).
/// Exit quietly instead, with the status of a process ended by SIGPIPE (141), as other
/// Unix tools do.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to std") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_suggested_client_command_asks_for_the_connection_flags() {
        for yes in [
            "no queue named \"q\" (tickwire queue create q --sub PATTERN)",
            "look at the queues (`tickwire queue show NAME`)",
            "run `tickwire stats`",
            "tickwire sub",
        ] {
            assert!(suggests_client_command(yes), "{yes}");
        }
        for no in [
            "connection refused (is `tickwire router` running?)",
            "make one with tickwire passwd --token",
            "tickwire subscribers",
            "tickwire pub-sub",
        ] {
            assert!(!suggests_client_command(no), "{no}");
        }
    }
}
