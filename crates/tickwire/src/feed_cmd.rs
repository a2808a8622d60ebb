//! `tickwire feed`: the ITCH feed handler (crate `tickwire-md`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tickwire_md::feed::{ConfigError, FeedConfig, Session, MAX_CONFIRM_PACKETS};
use tickwire_md::handler::{parse_feed_idle, run_monitored, HandlerOptions, HandlerReport, Second};
use tickwire_md::update::MAX_DEPTH_LEVELS;
use tickwire_rt::IdleStrategy;
use tickwire_rt::StopFlag;

use crate::units::{parse_duration, parse_size, UsageError};

const FEED_HELP: &str = "\
Receives a NASDAQ TotalView-ITCH 5.0 feed as MoldUDP64 over UDP multicast, detects
sequence gaps and recovers them by re-request (repeated, then counted as lost), keeps
an order book per symbol, and publishes normalized updates to the router:

  md/<VENUE>/<SYMBOL>/trade   every execution and non-displayed trade
  md/<VENUE>/<SYMBOL>/quote   top of book, when it changed
  md/<VENUE>/<SYMBOL>/depth   the best N levels, with --depth N

Payloads are the fixed binary layout of docs/market-data.md. Every update carries the
exchange timestamp and the feed handler's receive time, and the router frame's STAMPS
block (publish, router in, router out) for per-hop latency.

Once a second it prints: packets, messages, gaps, recovered, lost, published. Packets of
another session arriving while none of the followed one does (a mistyped --session) are
said once as they come, --quiet or not.
Stops at End of Session (unless --keep-running) or Ctrl-C, then prints every counter
(sequencing, stray traffic, bad input, books, and kernel_drops: datagrams the kernel
dropped because the socket's receive buffer was full) and, if messages were lost, why.
It warns at start when the kernel granted a smaller receive buffer than the 8 MiB asked
for (net.core.rmem_max).

The router: the feed connects once, at start, and needs the router for its whole run.
If the router stops or the connection is lost, the feed prints every counter of its run
so far, then the error, and exits 1 (it does not reconnect: run it under a supervisor
that restarts it, after the router).

Stray traffic: with --session NAME only that MoldUDP64 session is followed; other
sessions are counted (foreign_session) and ignored. Without it, the first session
whose --confirm-packets packets have plausible sequence numbers is adopted (one stray
datagram arriving first is not enough). A packet more than --max-jump messages ahead
of the highest sequence known is suspect (suspect_jumps): it is ignored unless
--confirm-packets such packets agree, each bringing new messages (copies and
heartbeats confirm nothing), and the old position has shown no life for --jump-quiet
(2s, longer than a server's 1-s heartbeat, so forged packets cannot move a live
stream); the jump is then followed (accepted_jumps) from the latest of them and the
skipped messages counted lost, never re-requested. An End of Session is believed once
every message before it is in and --jump-quiet has passed with no packet past it
(messages at or after it, or a heartbeat): a forged one that the live stream goes on
past ends nothing (false_session_ends), and a feed stops about 2 s after the
exchange's real end.

A/B lines: with --group-b, the same session is also received on a second group (the
redundant line every exchange sends). The first copy of each packet wins, the second
is counted as a duplicate; a gap on one line waits --line-wait for the other line's
copy before the first re-request, so a packet lost on one line only is never
re-requested (line_filled counts such gaps).

Monitoring: --http serves /healthz, /varz, /channelz (gaps, recovered, lost,
line_filled, rates), /metrics (Prometheus) and a live dashboard, on 127.0.0.1:7481
unless ADDR says otherwise (docs/monitoring.md).

Exit codes: 0 every message of the session was applied (its End of Session reached;
with --keep-running, 0 also when stopped with nothing lost); 130 stopped (Ctrl-C,
SIGTERM) before the End of Session with nothing lost up to then; 3 messages were lost (counted,
the report says why) or Add Orders were refused at --max-orders (orders_refused); 1 an
error (router unreachable or lost, socket error); 2 a usage error (a bad option or a value out
of range, e.g. --confirm-packets 0, --depth 65, a --venue with a '/', a --session
longer than 10 characters, a --group that is not a multicast group or has no port, or
--router tls://... without --ca), before anything starts.

Example (with `tickwire router` and `tickwire md publish` running):
  tickwire feed --group 239.1.1.1:26400 --router 127.0.0.1:7420
  tickwire feed --group 239.1.1.1:26400 --session TICKWIRE01   # only this session
  tickwire feed --group 239.1.1.1:26400 --group-b 239.1.1.2:26400  # A/B lines
  tickwire feed --group 239.1.1.1:26400 --http   # dashboard on http://127.0.0.1:7481/
  TICKWIRE_TOKEN=... tickwire feed --group 239.1.1.1:26400 --router tls://rtr:7443 --ca ca.pem
      # into a router that requires a login, over TLS (docs/security.md)
  tickwire feed --group 239.1.1.1:26400 --router shm:main
      # into a router on this host started with --shm main (docs/shm.md)
  tickwire sub 'md/NASDAQ/AAPL/>'";

/// `--http` without an address: 127.0.0.1 on this port.
const FEED_HTTP_PORT: u16 = 7481;

#[derive(Args)]
#[command(after_help = FEED_HELP)]
pub struct FeedArgs {
    /// Multicast group of the MoldUDP64 feed (224.0.0.0/4, with its port).
    #[arg(long, value_name = "ADDR:PORT", default_value = "239.1.1.1:26400", value_parser = parse_group)]
    group: SocketAddrV4,
    /// Line B: the same session's redundant copy on a second multicast group.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_group)]
    group_b: Option<SocketAddrV4>,
    /// With --group-b: how long a gap waits for the other line before the first
    /// re-request (without --group-b gaps are re-requested at once).
    #[arg(long, value_name = "DURATION", default_value = "2ms", value_parser = parse_duration)]
    line_wait: Duration,
    /// The exchange's re-request server (default: 127.0.0.1, the group's port + 1).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_addr_port)]
    request: Option<SocketAddrV4>,
    /// Router to publish to: HOST:PORT, tls://HOST:PORT (with --ca), or shm:NAME for a
    /// router on this host with --shm NAME (shared memory: no kernel on the path).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7420", value_parser = crate::units::parse_router_addr)]
    router: String,
    /// Venue level of the topics (one level: no '/', '*' or '>').
    #[arg(long, value_name = "NAME", default_value = "NASDAQ")]
    venue: String,
    /// Publish depth updates with this many levels a side (0: none; at most 64).
    #[arg(long, value_name = "LEVELS", default_value_t = 0)]
    depth: usize,
    /// Idle strategy: spin (lowest latency, uses a core) or block.
    #[arg(long, value_name = "spin|block", default_value = "spin", value_parser = parse_feed_idle)]
    idle: IdleStrategy,
    /// How long to wait for a re-request's answer before asking again: 50ms, 1s.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    retransmit_timeout: Duration,
    /// The old spelling of --retransmit-timeout, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        hide = true,
        conflicts_with = "retransmit_timeout"
    )]
    retransmit_timeout_ms: Option<u64>,
    /// Re-requests per missing range before it is counted as lost (at least 1).
    #[arg(long, value_name = "N", default_value_t = 3)]
    retransmit_tries: u32,
    /// The MoldUDP64 session to follow (default: the first one confirmed by
    /// --confirm-packets packets).
    #[arg(long, value_name = "NAME", value_parser = crate::units::parse_mold_session)]
    session: Option<String>,
    /// Largest believable jump ahead of the highest known sequence number, in messages
    /// (at least 1).
    #[arg(long, value_name = "MESSAGES", default_value_t = FeedConfig::default().max_jump)]
    max_jump: u64,
    /// Packets that must agree before a session is adopted or a larger jump believed (1-16).
    #[arg(long, value_name = "N", default_value_t = FeedConfig::default().confirm_packets)]
    confirm_packets: usize,
    /// How long the followed stream must show no life at its position before a jump
    /// is believed, and an End of Session (e.g. 2s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = tickwire_rt::units::parse_duration)]
    jump_quiet: Duration,
    /// Packets held ahead of a gap while it is re-requested; when all are in use the
    /// oldest gap is given up (counted lost, and in overflow) to make room, unless the
    /// stream still arrives in order below the hold: then the packet furthest ahead is
    /// dropped (overflow).
    #[arg(long, value_name = "N", default_value_t = FeedConfig::default().max_held_packets)]
    max_held: usize,
    /// Bytes of packets held ahead of a gap (at least 64KiB; e.g. 64MiB, the default);
    /// a packet that does not fit gives up the oldest gaps (counted lost, and in
    /// overflow) until it does.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64MiB")]
    max_held_bytes: usize,
    /// Live orders held at most: an Add Order past it is refused and counted
    /// (orders_refused; exit code 3), so a broken or spoofed feed that adds orders and
    /// never deletes them cannot grow the books without end (about 100 bytes a live
    /// order).
    #[arg(long, value_name = "N", default_value_t = FeedConfig::default().max_orders)]
    max_orders: usize,
    /// Keep running after End of Session.
    #[arg(long)]
    keep_running: bool,
    /// Don't print the per-second counters, nor the up-front warning of a small kernel
    /// receive buffer (a run that loses datagrams to it still says so).
    #[arg(long)]
    quiet: bool,
    /// Interface address to join the group on.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
    #[command(flatten)]
    http: crate::monitor::HttpArgs,
    #[command(flatten)]
    login: crate::login::LoginArgs,
}

/// A multicast group with its port (`--group`, `--group-b`): a unicast address or a
/// missing port is a usage error that says so, not a failed bind or a syntax error.
fn parse_group(s: &str) -> Result<SocketAddrV4, String> {
    let group = parse_addr_port(s)?;
    if !group.ip().is_multicast() {
        return Err(format!(
            "{group} is not a multicast group (224.0.0.0/4; try 239.1.1.1:26400)"
        ));
    }
    Ok(group)
}

/// An IPv4 ADDR:PORT whose error says what is missing: every `ADDR:PORT` flag of the
/// market-data, replay and multicast commands (`md capture --group` also takes a
/// unicast address to bind).
pub(crate) fn parse_addr_port(s: &str) -> Result<SocketAddrV4, String> {
    if s.parse::<Ipv4Addr>().is_ok() {
        return Err(format!(
            "{s} has no port: this flag takes ADDR:PORT (e.g. {s}:26400)"
        ));
    }
    s.parse()
        .map_err(|_| format!("{s:?} is not ADDR:PORT (e.g. 239.1.1.1:26400)"))
}

pub fn run_cmd(a: FeedArgs) -> anyhow::Result<ExitCode> {
    let session = a
        .session
        .as_deref()
        .map(Session::new)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--session {:?}: {e}", a.session.unwrap_or_default()))?;
    let feed = FeedConfig {
        session,
        max_jump: a.max_jump,
        confirm_packets: a.confirm_packets,
        jump_quiet: a.jump_quiet,
        max_held_packets: a.max_held,
        max_held_bytes: a.max_held_bytes,
        max_orders: a.max_orders,
        venue: a.venue,
        depth_levels: a.depth,
        retransmit_timeout: match a.retransmit_timeout_ms {
            Some(ms) => Duration::from_millis(ms),
            None => a.retransmit_timeout,
        },
        max_retransmit_tries: a.retransmit_tries,
        line_wait: if a.group_b.is_some() {
            a.line_wait
        } else {
            Duration::ZERO
        },
        ..FeedConfig::default()
    };
    if a.group_b == Some(a.group) {
        anyhow::bail!("--group-b must differ from --group (line B is a second group)");
    }
    // Before any socket opens: a value out of range is a usage error naming its flag.
    feed.validate()
        .map_err(|e| UsageError(flag_error(&e, &feed)))?;
    let opts = HandlerOptions {
        group: a.group,
        group_b: a.group_b,
        interface: a.interface,
        request_to: a.request.unwrap_or_else(|| {
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.group.port().wrapping_add(1))
        }),
        // Before `router` moves: a TLS address without --ca is refused here.
        client: a
            .login
            .apply(&a.router, tickwire_client::ClientOptions::default())?,
        router: a.router,
        feed,
        idle: a.idle,
        exit_on_end_of_session: !a.keep_running,
        on_second: Some(match a.quiet {
            false => print_second as fn(&Second),
            true => warn_foreign,
        }),
    };
    let http = a.http.addr(FEED_HTTP_PORT)?;
    let access = match http {
        Some(addr) => a.http.access(addr, None)?,
        None => None,
    };
    // With --quiet, said only if the kernel did drop datagrams (in the lost-message
    // report; new-user pass: printed first, it came before the real error).
    let quiet = a.quiet;
    if !quiet {
        warn_small_recv_buffer("feed");
    }
    let stop = StopFlag::install();
    crate::logging::reopen_on_sighup()?;
    let (publisher, _server) = match http {
        Some(addr) => {
            let (publisher, reader) = tickwire_rt::snapshot::channel(tickwire_rt::MonoNanos::now());
            let component = std::sync::Arc::new(crate::monitor::feed::FeedMonitor::new(reader));
            let server = crate::monitor::serve(addr, component, a.http.metrics_max_series, access)?;
            (Some(publisher), Some(server))
        }
        None => (None, None),
    };
    let r = run_monitored(&opts, &stop, publisher.as_ref())?;
    print!("{}", summary(&r));
    let c = &r.counters;
    if c.net_lost() > 0 {
        eprint!("{}", why_lost(&r, &opts));
    }
    eprint!("{}", foreign_hint(&r, opts.feed.session.is_some()));
    if r.orders_refused > 0 {
        eprintln!(
            "feed: {} refused with {} orders live (--max-orders): those orders are \
             missing from the books, which are wrong until they would have gone",
            tickwire_rt::text::count(r.orders_refused, "Add Order was", "Add Orders were"),
            opts.feed.max_orders
        );
    }
    if let Some(first) = &r.first_router_refusal {
        eprintln!(
            "feed: the router refused updates and kept the connection (published counts \
             them); the first refusal: {first}"
        );
    }
    // A lost router ends the run: its counters are above, then why (the feed connects
    // once; a supervisor restarts it).
    if let Some(e) = &r.router_error {
        eprintln!(
            "error: {e}: the feed handler stopped (it does not reconnect; the counters \
             above are its run up to then)"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(if c.net_lost() > 0 || r.orders_refused > 0 {
        ExitCode::from(3)
    } else if !r.end_of_session && opts.exit_on_end_of_session {
        // Stopped (Ctrl-C, SIGTERM) before the End of Session: the session was not
        // applied whole, so not 0 (new-user pass: a supervisor could not tell a feed
        // interrupted partway from a complete one).
        eprintln!("feed: stopped before the End of Session (exit status 130)");
        ExitCode::from(EXIT_STOPPED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Exit status of a feed stopped before its End of Session, as a shell reports a
/// command that SIGINT ended.
const EXIT_STOPPED: u8 = 130;

/// A [`FeedConfig`] the core refuses, in terms of the flag that set it.
fn flag_error(e: &ConfigError, feed: &FeedConfig) -> String {
    match e {
        ConfigError::DepthLevels(got) => {
            format!("--depth must be 0 to {MAX_DEPTH_LEVELS} levels a side (got {got})")
        }
        ConfigError::RetransmitTries => format!(
            "--retransmit-tries must be at least 1 (got {})",
            feed.max_retransmit_tries
        ),
        ConfigError::ConfirmPackets => format!(
            "--confirm-packets must be 1 to {MAX_CONFIRM_PACKETS} (got {})",
            feed.confirm_packets
        ),
        ConfigError::MaxJump => format!("--max-jump must be at least 1 (got {})", feed.max_jump),
        ConfigError::MaxHeldBytes => format!(
            "--max-held-bytes must be at least {}KiB, the largest datagram (got {})",
            tickwire_md::feed::MIN_MAX_HELD_BYTES >> 10,
            feed.max_held_bytes
        ),
        ConfigError::MaxOrders => "--max-orders must be at least 1 (got 0)".to_string(),
        ConfigError::Venue(venue) => format!(
            "--venue must be one topic level: no '/', '*' or '>', not empty (got {venue:?})"
        ),
        // Settings no flag sets (max_request_count) and any added later.
        e => format!("feed settings: {e}"),
    }
}

/// Every counter, as `name value` pairs separated by ` · `, four lines.
fn summary(r: &HandlerReport) -> String {
    let c = &r.counters;
    let session = r.session.map_or_else(
        || "none".to_string(),
        |s| s.to_string().trim_end().to_string(),
    );
    format!(
        "packets {} · messages {} · gaps {} · recovered {} · lost {} · duplicates {} · malformed {} · published {} · re-requests {}{}\n\
         session {session} · heartbeats {} · overflow {} · foreign_session {} · suspect_jumps {} · accepted_jumps {} · false_ends {} · taken_back {} · false_session_ends {} · request_send_errors {}\n\
         truncated_packets {} · bad_blocks {} · unknown_types {} · bad_messages {}\n\
         unpublished {} · unknown_refs {} · orders_refused {} · line_filled {} · kernel_drops {}\n",
        c.packets,
        c.messages,
        c.gaps,
        c.recovered,
        c.net_lost(),
        c.duplicates,
        c.malformed,
        r.published,
        r.requests_sent,
        if r.end_of_session { " · end of session" } else { "" },
        c.heartbeats,
        c.overflow,
        c.foreign_session,
        c.suspect_jumps,
        c.accepted_jumps,
        c.false_ends,
        c.taken_back,
        c.false_session_ends,
        r.request_send_errors,
        c.truncated_packets,
        c.bad_blocks,
        c.unknown_types,
        c.bad_messages,
        c.unpublished,
        r.unknown_refs,
        r.orders_refused,
        c.line_filled,
        r.kernel_drops.map_or("n/a".to_string(), |d| d.to_string()),
    )
}

/// Says once, before receiving, that the kernel granted a smaller receive buffer than
/// the one asked for (it caps it at net.core.rmem_max without an error), and how to
/// raise it. For `feed` and `md capture`.
pub(crate) fn warn_small_recv_buffer(command: &str) {
    use tickwire_capture::net::{recv_buffer_granted, RECV_BUFFER_BYTES};
    if let Some(granted) = recv_buffer_granted() {
        eprintln!(
            "{command}: warning: the kernel granted a receive buffer of {} bytes, not the \
             {RECV_BUFFER_BYTES} asked for: a burst larger than that while the reader is \
             busy is dropped by the kernel (kernel_drops in the summary); raise the cap with \
             `sysctl -w net.core.rmem_max={RECV_BUFFER_BYTES}`",
            granted
        );
    }
}

/// The counters that explain lost messages, in words.
fn why_lost(r: &HandlerReport, opts: &HandlerOptions) -> String {
    let c = &r.counters;
    let mut s = format!(
        "feed: {} lost:\n",
        tickwire_rt::text::count(c.net_lost(), "message", "messages")
    );
    if let Some(d) = r.kernel_drops.filter(|&d| d > 0) {
        s += &format!(
            "  {} dropped by the kernel before the feed read them (its receive buffer was \
             full: the feed fell behind); their messages were among the gaps below\n",
            tickwire_rt::text::count(d, "datagram was", "datagrams were")
        );
        if let Some(granted) = tickwire_capture::net::recv_buffer_granted() {
            s += &format!(
                "  the kernel granted a receive buffer of {granted} bytes, not the {} asked \
                 for: raise the cap with `sysctl -w net.core.rmem_max={}`\n",
                tickwire_capture::net::RECV_BUFFER_BYTES,
                tickwire_capture::net::RECV_BUFFER_BYTES
            );
        }
    }
    if c.overflow > 0 {
        s += &format!(
            "  the hold was full {} ({} packets or {} bytes held, --max-held, \
             --max-held-bytes): each time the oldest gap was given up before its \
             re-requests ran out or, while the stream still arrived in order below the \
             hold, the packet furthest ahead was dropped\n",
            tickwire_rt::text::count(c.overflow, "time", "times"),
            opts.feed.max_held_packets,
            opts.feed.max_held_bytes
        );
    }
    if c.accepted_jumps > 0 {
        s += &format!(
            "  {} confirmed jumps of more than {} messages were followed; what they skipped \
             is lost (--max-jump)\n",
            c.accepted_jumps, opts.feed.max_jump
        );
    }
    if r.request_send_errors > 0 {
        s += &format!(
            "  {} re-requests could not be sent: {}\n",
            r.request_send_errors,
            r.first_request_error.as_deref().unwrap_or("?")
        );
    }
    s += &format!(
        "  {} re-requests were sent to {} and {} missing messages came back; the rest went \
         unanswered after {} tries {} ms apart (one per gap after a gap nothing came back \
         for)\n",
        r.requests_sent,
        opts.request_to,
        c.recovered,
        opts.feed.max_retransmit_tries,
        opts.feed.retransmit_timeout.as_millis()
    );
    s += &answer_hint(c.recovered, c.duplicates);
    s
}

/// Packets of other MoldUDP64 sessions were ignored: which session was followed, and
/// what to do if it was the wrong one (new-user pass: a stray sender's session was
/// adopted, every packet of it malformed, the exchange's discarded as foreign, and the
/// report blamed the re-request server). Empty when there were none.
fn foreign_hint(r: &HandlerReport, named: bool) -> String {
    let c = &r.counters;
    if c.foreign_session == 0 {
        return String::new();
    }
    let followed = r.session.map_or_else(
        || "none".to_string(),
        |s| format!("{:?}", s.to_string().trim_end()),
    );
    let how = if named {
        "the one --session names"
    } else {
        "the first one seen on the group"
    };
    let seen = r.last_foreign_session.map_or_else(String::new, |s| {
        format!(
            " (the last of them of session {:?})",
            s.to_string().trim_end()
        )
    });
    let mut s = format!(
        "feed: {} of other MoldUDP64 sessions ignored (foreign_session){seen}: this feed \
         followed session {followed}, {how}",
        tickwire_rt::text::count(c.foreign_session, "packet", "packets")
    );
    if c.malformed > 0 && r.published == 0 {
        s += &format!(
            "; nothing was published and {} malformed: not an ITCH feed",
            tickwire_rt::text::count(c.malformed, "message was", "messages were")
        );
    }
    if !named {
        s += "; if another sender shares the group, name the exchange's session with \
              --session";
    }
    s + "\n"
}

/// What the re-request server's answers say about the lost messages: none came back
/// (is it there?), or late ones did (duplicates: give it longer), or some did.
fn answer_hint(recovered: u64, duplicates: u64) -> String {
    if recovered == 0 && duplicates == 0 {
        // New-user pass: a replayed capture's losses read as a missing server only.
        "  nothing came back: is the re-request server running there (--request)? A \
         replayed capture (`tickwire replay`) has none: packets the capture itself missed \
         stay lost\n"
            .to_owned()
    } else if duplicates > 0 {
        format!(
            "  the server answers, late: {} arrived after they were applied or given up \
             (duplicates); give it longer with --retransmit-timeout or --retransmit-tries\n",
            tickwire_rt::text::count(duplicates, "message", "messages")
        )
    } else {
        "  the server answers, but not every re-request: if it is slow or overloaded, give \
         it longer with --retransmit-timeout or --retransmit-tries\n"
            .to_owned()
    }
}

/// Whether [`warn_foreign`] has spoken.
static FOREIGN_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says once, while the feed runs, that packets of another MoldUDP64 session arrive
/// and none of the one followed: a mistyped --session waited for ever and said why
/// only when stopped (new-user pass).
fn warn_foreign(s: &Second) {
    use std::sync::atomic::Ordering;
    if s.foreign > 0 && s.messages == 0 && !FOREIGN_WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "feed: {} of another MoldUDP64 session arrived in second {} and no message of \
             the session followed: is --session mistyped? (they are ignored; the summary \
             names their session)",
            tickwire_rt::text::count(s.foreign, "packet", "packets"),
            s.second
        );
    }
}

/// The feed's per-second counter line (stderr), as the handler reports each second,
/// and [`warn_foreign`].
fn print_second(s: &Second) {
    use tickwire_rt::text::count;
    eprintln!(
        "feed {:>4}s: {}, {}, {}, {} recovered, {} lost, {} published",
        s.second,
        count(s.packets, "packet", "packets"),
        count(s.messages, "message", "messages"),
        count(s.gaps, "gap", "gaps"),
        s.recovered,
        s.lost,
        s.published
    );
    warn_foreign(s);
}

#[cfg(test)]
mod tests {
    use super::{answer_hint, foreign_hint};
    use tickwire_md::feed::{Counters, Session};
    use tickwire_md::handler::HandlerReport;

    fn report(foreign_session: u64, malformed: u64, published: u64) -> HandlerReport {
        HandlerReport {
            counters: Counters {
                foreign_session,
                malformed,
                ..Counters::default()
            },
            published,
            requests_sent: 0,
            request_send_errors: 0,
            first_request_error: None,
            unknown_refs: 0,
            orders_refused: 0,
            last_foreign_session: None,
            session: Some(Session::new("S1").unwrap()),
            timeline: Vec::new(),
            end_of_session: false,
            kernel_drops: None,
            router_error: None,
            first_router_refusal: None,
        }
    }

    /// New-user pass: a stray sender's session was adopted (every packet malformed),
    /// the exchange's ignored as foreign, and nothing said so.
    #[test]
    fn packets_of_other_sessions_are_explained_with_the_session_followed() {
        assert_eq!(foreign_hint(&report(0, 5, 0), false), "");
        let stray = foreign_hint(&report(278_853, 190_719, 0), false);
        assert!(
            stray.contains("278853 packets of other MoldUDP64 sessions ignored")
                && stray.contains("followed session \"S1\", the first one seen")
                && stray.contains("190719 messages were malformed: not an ITCH feed")
                && stray.contains("--session"),
            "{stray}"
        );
        let named = foreign_hint(&report(3, 0, 10), true);
        assert!(
            named.contains("the one --session names") && !named.contains("malformed"),
            "{named}"
        );
        assert!(!named.contains("name the exchange's session"), "{named}");
        // New-user pass: `--session WRONG` did not say which session the packets were.
        let mut r = report(13_782, 0, 0);
        r.last_foreign_session = Some(Session::new("TICKWIRE01").unwrap());
        let wrong = foreign_hint(&r, true);
        assert!(
            wrong.contains("(the last of them of session \"TICKWIRE01\")"),
            "{wrong}"
        );
    }

    #[test]
    fn the_lost_messages_hint_follows_what_the_server_answered() {
        let silent = answer_hint(0, 0);
        assert!(
            silent.contains("is the re-request server running")
                && silent.contains("packets the capture itself missed stay lost"),
            "{silent}"
        );
        let late = answer_hint(8052, 1994);
        assert!(
            late.contains("late: 1994 messages arrived") && late.contains("--retransmit-timeout"),
            "{late}"
        );
        assert!(!late.contains("running"), "{late}");
        let some = answer_hint(10, 0);
        assert!(
            some.contains("not every re-request") && some.contains("--retransmit-tries"),
            "{some}"
        );
    }
}
