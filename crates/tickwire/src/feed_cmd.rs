//! `tickwire feed`: the ITCH feed handler (crate `tickwire-md`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;

use clap::Args;
use tickwire_md::feed::FeedConfig;
use tickwire_md::handler::{parse_feed_idle, run, HandlerOptions};
use tickwire_rt::IdleStrategy;
use tickwire_rt::StopFlag;

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

Once a second it prints: packets, messages, gaps, recovered, lost, published.
Stops at End of Session (unless --keep-running) or Ctrl-C.

Example (with `tickwire router` and `tickwire md publish` running):
  tickwire feed --group 239.1.1.1:26400 --router 127.0.0.1:7420
  tickwire sub 'md/NASDAQ/AAPL/>'";

#[derive(Args)]
#[command(after_help = FEED_HELP)]
pub struct FeedArgs {
    /// Multicast group of the MoldUDP64 feed.
    #[arg(long, value_name = "ADDR:PORT", default_value = "239.1.1.1:26400")]
    group: SocketAddrV4,
    /// The exchange's re-request server (default: 127.0.0.1, the group's port + 1).
    #[arg(long, value_name = "ADDR:PORT")]
    request: Option<SocketAddrV4>,
    /// Router to publish to.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7420", value_parser = crate::units::parse_router_addr)]
    router: String,
    /// Venue level of the topics.
    #[arg(long, value_name = "NAME", default_value = "NASDAQ")]
    venue: String,
    /// Publish depth updates with this many levels a side (0: none).
    #[arg(long, value_name = "LEVELS", default_value_t = 0)]
    depth: usize,
    /// Idle strategy: spin (lowest latency, uses a core) or block.
    #[arg(long, value_name = "spin|block", default_value = "spin", value_parser = parse_feed_idle)]
    idle: IdleStrategy,
    /// Re-request timeout in milliseconds before asking again.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    retransmit_timeout_ms: u64,
    /// Re-requests per missing range before it is counted as lost.
    #[arg(long, value_name = "N", default_value_t = 3)]
    retransmit_tries: u32,
    /// Keep running after End of Session.
    #[arg(long)]
    keep_running: bool,
    /// Don't print the per-second counters.
    #[arg(long)]
    quiet: bool,
    /// Interface address to join the group on.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
}

pub fn run_cmd(a: FeedArgs) -> anyhow::Result<ExitCode> {
    let feed = FeedConfig {
        venue: a.venue,
        depth_levels: a.depth,
        retransmit_timeout_ns: a.retransmit_timeout_ms * 1_000_000,
        max_retransmit_tries: a.retransmit_tries,
        ..FeedConfig::default()
    };
    let opts = HandlerOptions {
        group: a.group,
        interface: a.interface,
        request_to: a.request.unwrap_or_else(|| {
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.group.port().wrapping_add(1))
        }),
        router: a.router,
        feed,
        idle: a.idle,
        exit_on_end_of_session: !a.keep_running,
        print_counters: !a.quiet,
    };
    let stop = StopFlag::install();
    let r = run(&opts, &stop)?;
    let c = &r.counters;
    println!(
        "packets {} · messages {} · gaps {} · recovered {} · lost {} · duplicates {} · malformed {} · published {} · re-requests {}{}",
        c.packets,
        c.messages,
        c.gaps,
        c.recovered,
        c.lost,
        c.duplicates,
        c.malformed,
        r.published,
        r.requests_sent,
        if r.end_of_session { " · end of session" } else { "" }
    );
    Ok(if c.lost > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
