//! `tickwire replay`: send a pcap capture's UDP datagrams again with their recorded
//! timing (crate `tickwire-capture`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use tickwire_capture::net::{replay, ReplayOptions};
use tickwire_capture::{Captured, Speed};
use tickwire_rt::StopFlag;

const REPLAY_HELP: &str = "\
Replays the UDP datagrams of a pcap file (Ethernet or raw IPv4 link type; tcpdump's
files and those of `tickwire md capture`) in file order. Datagram i is sent at
start + (t_i - t_0) / speed, an absolute schedule: a late send never delays the
ones after it. The report gives the replay's own timing fidelity: how late each
send was against its schedule (p50/p99/max).

Start a feed handler for the replay before replaying: the one that followed the live
session exited at its End of Session (and one kept running with --keep-running would
count the replayed session as duplicates). A capture has no re-request server: a
datagram missing from it is lost for the feed handler, which says so (exit code 3).

Exit codes: 0 every datagram was sent; 1 a datagram could not be sent (the report
prints how many and why the first failed) or an error (unreadable file, no UDP
datagrams in it).

Examples:
  tickwire replay feed.pcap                          # original timing, to the recorded groups
  tickwire replay feed.pcap --speed 4x               # four times faster
  tickwire replay feed.pcap --speed max --loop       # as fast as possible, until Ctrl-C
  tickwire replay feed.pcap --to 239.1.1.1:26400     # everything to another group";

#[derive(Args)]
#[command(after_help = REPLAY_HELP)]
pub struct ReplayArgs {
    /// The pcap file to replay.
    file: PathBuf,
    /// Speed: 1x (recorded timing), 4x, 0.5x..., max, or a fixed rate in datagrams a
    /// second (not messages: a datagram may carry several) such as 50k or 500/s (a bare
    /// number below 1000 must say which: 4x or 4/s).
    #[arg(long, default_value = "1x", value_parser = Speed::parse)]
    speed: Speed,
    /// Replay again and again until Ctrl-C.
    #[arg(long = "loop", conflicts_with = "passes")]
    looped: bool,
    /// Number of passes over the file.
    #[arg(long, default_value_t = 1)]
    passes: u64,
    /// Send every datagram to this ADDR:PORT instead of its recorded destination.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::feed_cmd::parse_addr_port)]
    to: Option<SocketAddrV4>,
    /// Interface address multicast leaves through.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
}

pub fn run(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    // The error names the file.
    let cap = Captured::load(&a.file).context("loading the capture")?;
    if cap.truncated {
        eprintln!(
            "replay: warning: {} ends in the middle of a record (is md capture still \
             writing it? it flushes once a second): replaying the {} complete datagrams \
             before it",
            a.file.display(),
            cap.entries.len()
        );
    }
    if cap.entries.is_empty() {
        anyhow::bail!(
            "{}: no UDP datagrams to replay ({} other frames skipped)",
            a.file.display(),
            cap.skipped
        );
    }
    let stop = StopFlag::install();
    eprintln!(
        "replaying {} datagrams ({:.3} s recorded{}) at {}{}",
        cap.entries.len(),
        cap.span_ns() as f64 / 1e9,
        if cap.skipped > 0 {
            format!(", {} non-UDP frames skipped", cap.skipped)
        } else {
            String::new()
        },
        a.speed,
        if a.looped {
            ", looping until Ctrl-C"
        } else {
            ""
        }
    );
    if let Speed::Factor(f) = a.speed {
        // The latest timestamp, not the last record's: one record years ahead of the
        // others was waited for without a word (hostile-input probe).
        let first = cap.entries.first().map_or(0, |e| e.unix_ns);
        let latest = cap.entries.iter().map(|e| e.unix_ns).max().unwrap_or(first);
        let secs = latest.saturating_sub(first) as f64 / 1e9 / f;
        if secs > 86_400.0 {
            eprintln!(
                "note: at {} this replay takes {:.1} days (the records' timestamps are that far \
                 apart{}); Ctrl-C stops it, --speed max or a rate such as 10k/s ignores the timing",
                a.speed,
                secs / 86_400.0,
                if latest > cap.entries.last().map_or(first, |e| e.unix_ns) {
                    ", one of them later than the last record's"
                } else {
                    ""
                }
            );
        }
    }
    let opts = ReplayOptions {
        speed: a.speed,
        target: a.to,
        interface: a.interface,
        passes: if a.looped { None } else { Some(a.passes) },
        progress: Some(crate::md_cmd::print_progress),
    };
    let r = replay(&cap, &opts, &stop)?;
    let secs = r.elapsed_ns as f64 / 1e9;
    // Completed passes; one cut short by Ctrl-C is not counted, and is said (new-user
    // pass: "passes 2" for a run stopped in its third).
    let cut = stop.is_set() && (a.looped || r.passes < a.passes);
    println!(
        "passes        {} complete{}",
        r.passes,
        if cut { " (the next one cut short)" } else { "" }
    );
    println!(
        "datagrams     {} sent, {} send errors",
        r.packets, r.send_errors
    );
    println!("bytes         {}", r.bytes);
    println!(
        "elapsed       {secs:.3} s ({:.0} datagrams/s)",
        r.packets as f64 / secs.max(1e-9)
    );
    if r.lateness.is_empty() {
        println!("lateness      n/a (speed max has no schedule)");
    } else {
        let s = r.lateness.summary();
        println!(
            "lateness      p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs ({} sends)",
            s.p50_us, s.p99_us, s.p999_us, s.max_us, s.samples
        );
    }
    Ok(exit_after_send_errors(
        "replay",
        r.send_errors,
        r.first_send_error.as_deref(),
    ))
}

/// Failure when datagrams could not be sent (says how many, and the first error, on
/// stderr); success otherwise. For `md publish` and `replay`.
pub(crate) fn exit_after_send_errors(
    command: &str,
    send_errors: u64,
    first: Option<&str>,
) -> ExitCode {
    if send_errors > 0 {
        eprintln!(
            "{command}: {send_errors} datagrams could not be sent; the first: {}",
            first.unwrap_or("?")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
