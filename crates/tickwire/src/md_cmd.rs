//! `tickwire md`: the synthetic exchange and capture (crates `tickwire-md`,
//! `tickwire-capture`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use tickwire_bench::harness::StopFlag;
use tickwire_capture::net::{capture, CaptureOptions};

const MD_HELP: &str = "\
Market data tools:
  capture    record a multicast group's datagrams into a pcap file (ns timestamps)
Replay a capture with `tickwire replay FILE.pcap --speed 1x|4x|max`.";

#[derive(Args)]
#[command(after_help = MD_HELP)]
pub struct MdArgs {
    #[command(subcommand)]
    cmd: MdCmd,
}

#[derive(Subcommand)]
enum MdCmd {
    /// Record a multicast group into a pcap file (readable by tcpdump and Wireshark).
    Capture(CaptureArgs),
}

const CAPTURE_HELP: &str = "\
Joins the group and writes every datagram, with its receive time in nanoseconds, as an
Ethernet/IPv4/UDP frame into a standard pcap file (nanosecond variant), so tcpdump,
tshark and Wireshark read it and `tickwire replay` plays it back. Stops at Ctrl-C,
after --duration, or after --count datagrams.

Example:
  tickwire md capture --group 239.1.1.1:26400 --out feed.pcap --duration 60s";

#[derive(Args)]
#[command(after_help = CAPTURE_HELP)]
struct CaptureArgs {
    /// Multicast group (or unicast address to bind) to record.
    #[arg(long, value_name = "ADDR:PORT")]
    group: SocketAddrV4,
    /// Output pcap file.
    #[arg(long, value_name = "FILE.pcap")]
    out: PathBuf,
    /// Interface address to join the group on.
    #[arg(long, default_value = "127.0.0.1")]
    interface: Ipv4Addr,
    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many datagrams.
    #[arg(long)]
    count: Option<u64>,
}

pub fn run(a: MdArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        MdCmd::Capture(c) => run_capture(c),
    }
}

fn run_capture(a: CaptureArgs) -> anyhow::Result<ExitCode> {
    let stop = StopFlag::install();
    eprintln!(
        "capturing {} into {} (Ctrl-C to stop)",
        a.group,
        a.out.display()
    );
    let opts = CaptureOptions {
        group: a.group,
        interface: a.interface,
        duration: a.duration,
        max_packets: a.count,
        progress: true,
    };
    let r = capture(&opts, &a.out, &stop)?;
    println!(
        "captured {} datagrams, {} bytes into {}",
        r.packets,
        r.bytes,
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `500ms`, `30s`, `5m`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (examples: 500ms, 30s, 5m)"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("{s:?} is not a duration"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
