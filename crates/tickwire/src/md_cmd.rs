//! `tickwire md`: the synthetic exchange and capture (crates `tickwire-md`,
//! `tickwire-capture`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use tickwire_capture::net::{capture, CaptureOptions};
use tickwire_capture::Speed;
use tickwire_itch::Session;
use tickwire_md::exchange::SessionData;
use tickwire_md::generator::{write_session_file, Generator, GeneratorConfig};
use tickwire_md::publisher::{publish, PublishOptions};
use tickwire_rt::units::parse_duration;
use tickwire_rt::StopFlag;

const GENERATE_HELP: &str = "\
The session: system events, a stock directory, trading actions, then order flow (adds,
cancels, deletes, replaces, executions, trades) with realistic statistics: prices near
the touch, cancels dominating, Zipf-skewed symbol activity, a U-shaped intraday rate
with sub-second bursts. Valid by construction: no dead order references, shares
conserved, books never crossed, timestamps monotonic. Same arguments, same bytes.

File format: each ITCH message preceded by its length (2 bytes, big-endian), the
layout of NASDAQ's historical ITCH 5.0 files. An existing --out file is overwritten,
unless it is a pcap capture (refused: a capture given by mistake).

Example:
  tickwire md generate --symbols 100 --messages 1000000 --seed 7 --out day.itch";

#[derive(Args)]
#[command(after_help = GENERATE_HELP)]
struct GenerateArgs {
    /// Number of symbols, 1 to 65535 (the first are well-known tickers).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..))]
    symbols: u16,
    /// Total messages in the session (system and directory messages included).
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Random seed: the same seed gives the same session.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mean order-flow rate in messages/s at 1x (sets the session's duration). The rate
    /// realised is random around it, often a few tens of percent below (the summary
    /// prints it: 20k gave 17,093 msg/s in one run).
    #[arg(long, default_value = "20k", value_parser = tickwire_rt::units::parse_rate)]
    rate: f64,
    /// Output file (binary: a file name, not '-').
    #[arg(long, value_name = "FILE", value_parser = parse_out_file)]
    out: PathBuf,
}

/// An output file of `md generate` / `md capture`: binary, so never a terminal, and
/// `-` is refused rather than created as a file named `-` (new-user pass).
fn parse_out_file(s: &str) -> Result<PathBuf, String> {
    match s {
        "" => Err("an empty file name".to_string()),
        "-" => Err(
            "'-' (standard output) is not supported: the output is binary; give a \
                    file name (e.g. --out day.itch, --out day.pcap)"
                .to_string(),
        ),
        _ => Ok(PathBuf::from(s)),
    }
}

const PUBLISH_HELP: &str = "\
Sends the session as MoldUDP64 downstream packets to the group, message i due at
start + (t_i - t_1) / speed (absolute schedule); a packet carries the next due message
and every following one already due (up to --max-packet bytes). Heartbeats once a
second while idle; after the last message, heartbeats and re-request answers for
--linger, then End of Session. Re-requests (20-byte MoldUDP64 requests) are received on
--request and answered from memory to their sender.

--loss P drops each original packet with probability P (seeded by --seed), never a
retransmission: a feed handler must recover every gap.
--group-b sends every packet to a second group too (the redundant line B of A/B feeds);
--loss-b drops line B's originals independently of line A's, but never a packet line A
dropped too unless --double-loss. --no-retransmit reads re-requests and never answers,
so only line arbitration can fill gaps.
--restamp rewrites each message's ITCH timestamp to its scheduled send time (UTC time of
day), so exchange-to-feed-handler latency can be measured on one host.

Start `md capture` and `feed` before publishing: publish sends the session once, to
whoever is listening then.

Exit codes: 0 every datagram was sent (also after Ctrl-C, which the report says); 1 a
datagram could not be sent (the report prints how many and why the first failed) or
an error (unreadable file, re-request port in use); 2 a usage error, before anything is
sent (a bad option: --loss or --loss-b outside 0 to 1, a --session longer than 10
characters, ...).

Examples:
  tickwire md publish --file day.itch --group 239.1.1.1:26400
  tickwire md publish --file day.itch --group 239.1.1.1:26400 --speed 4x --loss 0.01 --seed 3
  tickwire md publish --file day.itch --group 239.1.1.1:26400 --group-b 239.1.1.2:26400 \\
      --loss 0.05 --loss-b 0.05 --no-retransmit        # A/B lines, no re-request server";

#[derive(Args)]
#[command(after_help = PUBLISH_HELP)]
struct PublishArgs {
    /// Session file written by `tickwire md generate` (or any length-prefixed ITCH 5.0 file).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// Multicast group to publish to. A unicast ADDR:PORT is sent to as well, for one
    /// receiver: `md capture --group` bound to that address (`feed` joins groups only).
    #[arg(long, value_name = "ADDR:PORT", default_value = "239.1.1.1:26400", value_parser = crate::feed_cmd::parse_addr_port)]
    group: SocketAddrV4,
    /// Speed: 1x (recorded timing), 4x, max, or a fixed message rate such as 100k or
    /// 500/s (a bare number below 1000 must say which: 4x or 4/s).
    #[arg(long, default_value = "1x", value_parser = Speed::parse)]
    speed: Speed,
    /// The re-request server: where to receive re-requests (default: 127.0.0.1, the
    /// group's port + 1). The same flag as `feed --request`.
    // `--request-listen` is the old spelling, kept working and hidden (README).
    #[arg(long = "request", alias = "request-listen", value_name = "ADDR:PORT", value_parser = crate::feed_cmd::parse_addr_port)]
    request_listen: Option<SocketAddrV4>,
    /// MoldUDP64 session name (up to 10 printable ASCII characters).
    #[arg(long, default_value = "TICKWIRE01", value_parser = crate::units::parse_mold_session)]
    session: String,
    /// Probability of dropping each original packet, 0 to 1.
    #[arg(long, default_value_t = 0.0, value_parser = crate::units::parse_probability)]
    loss: f64,
    /// Seed of the loss pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Line B: also send every packet to this group (the redundant line of A/B feeds).
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::feed_cmd::parse_addr_port)]
    group_b: Option<SocketAddrV4>,
    /// Probability of dropping each original packet on line B, drawn independently of
    /// --loss (never the same packet as line A unless --double-loss).
    #[arg(long, value_name = "P", default_value_t = 0.0, requires = "group_b", value_parser = crate::units::parse_probability)]
    loss_b: f64,
    /// Let a packet be dropped on both lines (only a re-request can then recover it).
    #[arg(long, requires = "group_b")]
    double_loss: bool,
    /// Read re-requests but never answer them (no re-request server).
    #[arg(long)]
    no_retransmit: bool,
    /// Rewrite ITCH timestamps to the scheduled send time (time of day, UTC).
    #[arg(long)]
    restamp: bool,
    /// How long to keep answering re-requests after the last message.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    linger: Duration,
    /// Largest packet in bytes (MoldUDP64 header included).
    #[arg(long, value_name = "BYTES", default_value_t = 1400)]
    max_packet: usize,
    /// Sleep until this long before each packet is due, then spin (e.g. 20us; default 0:
    /// never spin, send when the sleep ends, a few tens of µs late; spinning keeps a
    /// core busy between packets).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    spin_before: Option<Duration>,
    /// Interface address multicast leaves through.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
}

const MD_HELP: &str = "\
Market data tools (NASDAQ TotalView-ITCH 5.0 over MoldUDP64):
  generate   write a realistic, reproducible synthetic ITCH session file
  publish    send a session file as MoldUDP64 multicast with its timing; answer re-requests
  capture    record a multicast group's datagrams into a pcap file (ns timestamps)
Replay a capture with `tickwire replay FILE.pcap --speed 1x|4x|max`. Each command's
--help has its own examples (tickwire md publish --help).

Exit codes (every md command): 0 success; 1 an error, printed (publish: also a
datagram that could not be sent); 2 a usage error (a bad option), before anything runs.

Examples: a session end to end on one host (start the router, the feed handler and the
capture before publishing: publish sends the session once, to whoever listens then):
  tickwire md generate --symbols 100 --messages 1000000 --seed 7 --out day.itch
  tickwire router &
  tickwire feed --group 239.1.1.1:26400 &    # books, updates to the router; exits at End of Session
  tickwire md capture --group 239.1.1.1:26400 --out day.pcap --duration 30s &
  tickwire md publish --file day.itch --group 239.1.1.1:26400 --speed 4x
  wait                                       # the feed's End of Session, the capture's 30 s
  tickwire feed --group 239.1.1.1:26400 --quiet &   # a fresh feed for the replay
  tickwire replay day.pcap --speed max       # the capture again, as fast as it goes";

#[derive(Args)]
#[command(after_help = MD_HELP)]
pub struct MdArgs {
    #[command(subcommand)]
    cmd: MdCmd,
}

#[derive(Subcommand)]
enum MdCmd {
    /// Write a synthetic, reproducible ITCH 5.0 session file.
    Generate(GenerateArgs),
    /// Publish a session file as MoldUDP64 over UDP multicast, answering re-requests.
    Publish(PublishArgs),
    /// Record a multicast group into a pcap file (readable by tcpdump and Wireshark).
    Capture(CaptureArgs),
}

const CAPTURE_HELP: &str = "\
Joins the group and writes every datagram, with its receive time in nanoseconds, as an
Ethernet/IPv4/UDP frame into a standard pcap file (nanosecond variant), so tcpdump,
tshark and Wireshark read it and `tickwire replay` plays it back. The file header is
written at once and the records once a second, so a replay of a capture still running
takes what it recorded up to the last second (and says the file was cut short). An
existing pcap FILE is overwritten; any other existing file (an ITCH session given by
mistake) is refused. Stops at Ctrl-C,
after --duration, or after --count datagrams, then prints
`captured N datagrams, B bytes into FILE · kernel_drops D`: D datagrams were dropped by
the kernel because the socket's receive buffer was full (the capture misses them; n/a
where the count cannot be read). It warns at start when the kernel granted a smaller
receive buffer than the 8 MiB asked for (net.core.rmem_max).

Example:
  tickwire md capture --group 239.1.1.1:26400 --out feed.pcap --duration 60s";

#[derive(Args)]
#[command(after_help = CAPTURE_HELP)]
struct CaptureArgs {
    /// Multicast group (or unicast address to bind) to record.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::feed_cmd::parse_addr_port)]
    group: SocketAddrV4,
    /// Output pcap file (a file name, not '-').
    #[arg(long, value_name = "FILE.pcap", value_parser = parse_out_file)]
    out: PathBuf,
    /// Interface address to join the group on.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
    /// Stop after this long (e.g. 30s, 5m; more than 0); default: until Ctrl-C.
    #[arg(long, value_parser = parse_capture_duration)]
    duration: Option<Duration>,
    /// Stop after this many datagrams.
    #[arg(long)]
    count: Option<u64>,
}

pub fn run(a: MdArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        MdCmd::Capture(c) => run_capture(c),
        MdCmd::Generate(g) => run_generate(g),
        MdCmd::Publish(p) => run_publish(p),
    }
}

/// A usage error when `path` holds something `md capture` (`pcap`) or `md generate`
/// (not `pcap`) must not overwrite: a session file and a capture are easy to swap
/// on a command line, and the output replaced the input without a word (new-user pass:
/// a 30.8 MB session became a 24-byte empty capture).
fn refuse_overwriting(path: &std::path::Path, pcap: bool) -> Result<(), crate::units::UsageError> {
    let holds_data = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= 4);
    if !holds_data || tickwire_capture::is_capture_file(path) == pcap {
        return Ok(());
    }
    let (is, flag) = if pcap {
        (
            "is not a pcap capture (an ITCH session?)",
            "md capture --out",
        )
    } else {
        (
            "is a pcap capture, not an ITCH session",
            "md generate --out",
        )
    };
    Err(crate::units::UsageError(format!(
        "{flag} {}: the file exists and {is}: refusing to overwrite it; remove it or \
         give another name",
        path.display()
    )))
}

fn run_capture(a: CaptureArgs) -> anyhow::Result<ExitCode> {
    refuse_overwriting(&a.out, true)?;
    // Before the receive-buffer warning (new-user pass: the warning came first, then
    // a bare "No such file or directory").
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            anyhow::bail!(
                "cannot create the capture file {}: the directory {} does not exist",
                a.out.display(),
                dir.display()
            );
        }
    }
    crate::feed_cmd::warn_small_recv_buffer("md capture");
    let stop = StopFlag::install();
    let opts = CaptureOptions {
        group: a.group,
        interface: a.interface,
        duration: a.duration,
        max_packets: a.count,
        progress: Some(print_progress),
    };
    let r = capture(&opts, &a.out, &stop)?;
    println!(
        "captured {} datagrams, {} bytes into {} · kernel_drops {}",
        r.packets,
        r.bytes,
        a.out.display(),
        r.kernel_drops.map_or("n/a".to_string(), |d| d.to_string()),
    );
    Ok(ExitCode::SUCCESS)
}

fn run_generate(a: GenerateArgs) -> anyhow::Result<ExitCode> {
    let config = GeneratorConfig {
        symbols: a.symbols,
        messages: a.messages,
        seed: a.seed,
        mean_rate: a.rate,
        ..GeneratorConfig::default()
    };
    // What can be checked is checked before any message is generated: the settings
    // (no side effect), then the output file (created now, so a bad path fails at once
    // and names itself).
    // Every error of `Generator::new` is a setting out of range: a usage error (exit 2).
    let generator = Generator::new(config)
        .map_err(|e| crate::units::UsageError(format!("invalid session settings: {e}")))?;
    refuse_overwriting(&a.out, false)?;
    let file = std::fs::File::create(&a.out)
        .with_context(|| format!("cannot create the output file {}", a.out.display()))?;
    let t0 = std::time::Instant::now();
    let s = write_session_file(generator, file)
        .with_context(|| format!("writing {}", a.out.display()))?;
    let span = (s.last_timestamp.saturating_sub(s.first_timestamp)) as f64 / 1e9;
    println!(
        "wrote {} messages ({} bytes) to {} in {:.2} s; the session spans {:.1} s at 1x ({:.0} msg/s mean)",
        s.messages,
        s.bytes,
        a.out.display(),
        t0.elapsed().as_secs_f64(),
        span,
        s.messages as f64 / span.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

fn run_publish(a: PublishArgs) -> anyhow::Result<ExitCode> {
    // --loss, --loss-b and --session were checked as they were parsed (usage errors).
    if a.group_b == Some(a.group) {
        anyhow::bail!("--group-b must differ from --group (line B is a second group)");
    }
    let session =
        Session::new(&a.session).map_err(|e| anyhow::anyhow!("--session {:?}: {e}", a.session))?;
    let bytes = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let data =
        SessionData::from_file_bytes(&bytes).with_context(|| format!("{}", a.file.display()))?;
    drop(bytes);
    let request_listen = a
        .request_listen
        .unwrap_or_else(|| SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.group.port().wrapping_add(1)));
    let stop = StopFlag::install();
    eprintln!(
        "publishing {} messages to {}{} at {} (re-requests on {}{})",
        data.len(),
        a.group,
        if a.group.ip().is_multicast() {
            ""
        } else {
            " (unicast: one receiver, not a group)"
        },
        a.speed,
        request_listen,
        if a.loss > 0.0 {
            format!(
                ", dropping {:.2}% of packets, seed {}",
                a.loss * 100.0,
                a.seed
            )
        } else {
            String::new()
        }
    );
    let opts = PublishOptions {
        group: a.group,
        interface: a.interface,
        request_listen,
        session,
        speed: a.speed,
        loss: a.loss,
        group_b: a.group_b,
        loss_b: a.loss_b,
        double_loss: a.double_loss,
        serve_requests: !a.no_retransmit,
        seed: a.seed,
        restamp: a.restamp,
        linger: a.linger,
        max_packet: a.max_packet,
        spin_before: a
            .spin_before
            .unwrap_or(tickwire_md::publisher::DEFAULT_SPIN_BEFORE),
        progress: Some(print_progress),
    };
    let r = publish(data, &opts, &stop).map_err(|e| {
        crate::listen::hint_in_use(
            e,
            "is another md publish running? pick another port with --request",
        )
    })?;
    let secs = r.elapsed_ns as f64 / 1e9;
    println!(
        "messages      {} scheduled ({:.3} s, {:.0} msg/s): {} packets sent, {} dropped by --loss",
        r.messages,
        secs,
        r.messages as f64 / secs.max(1e-9),
        r.packets,
        r.dropped_packets
    );
    println!(
        "dropped       {} packets ({} messages) by --loss",
        r.dropped_packets, r.dropped_messages
    );
    if let Some(b) = a.group_b {
        println!(
            "line B        {b}: {} packets dropped by --loss-b; {} drawn on both lines and sent on B{}",
            r.dropped_packets_b,
            r.double_loss_avoided,
            if a.double_loss { " (none: --double-loss)" } else { "" }
        );
    }
    if a.no_retransmit {
        println!(
            "re-requests   {} received, none answered (--no-retransmit), {} malformed",
            r.requests, r.bad_requests
        );
    } else {
        println!(
            "re-requests   {} answered ({} messages retransmitted, {} bytes), {} malformed{}",
            r.requests_answered,
            r.retransmitted_messages,
            r.retransmitted_bytes,
            r.bad_requests,
            match r.requests_over_budget {
                0 => String::new(),
                n => format!(
                    ", {n} not answered (over the {} MiB/s answer budget)",
                    tickwire_md::publisher::ANSWER_RATE >> 20
                ),
            }
        );
    }
    println!("heartbeats    {}", r.heartbeats);
    println!("send errors   {}", r.send_errors);
    if !r.lateness.is_empty() {
        let l = r.lateness.summary();
        println!(
            "lateness      p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            l.p50_us, l.p99_us, l.max_us
        );
    }
    if r.stopped {
        let by = tickwire_rt::stop::stopped_by();
        println!("stopped by {by} before the end of the session");
    }
    Ok(crate::replay_cmd::exit_after_send_errors(
        "md publish",
        r.send_errors,
        r.first_send_error.as_deref(),
    ))
}

/// Where the md and replay drivers' progress lines go: stderr, one line each.
pub(crate) fn print_progress(line: &str) {
    eprintln!("{line}");
}

/// `md capture --duration`: a duration above zero (0 captured nothing and exited 0).
fn parse_capture_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?} captures nothing: give a duration above 0, or leave --duration out to capture until Ctrl-C")),
        d => Ok(d),
    }
}
