//! The drivers: capture datagrams of a multicast group into a pcap file, and replay a
//! capture over UDP with its recorded timing.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, Socket, Type};
use tickwire_rt::pacing::wait_until_or;
use tickwire_rt::{Latency, MonoNanos, Progress, StopFlag};

use crate::file::{CaptureWriter, Captured, FileError};
use crate::speed::{Schedule, Speed};

/// Errors of the drivers.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{what}: {source}")]
    Socket {
        what: String,
        source: std::io::Error,
    },
}

fn sock_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetError {
    let what = what.into();
    move |source| NetError::Socket { what, source }
}

/// The receive buffer [`group_receiver`] asks for: room for a burst while the reader is
/// busy. The kernel caps it at `net.core.rmem_max` (see [`recv_buffer_granted`]).
pub const RECV_BUFFER_BYTES: usize = 8 << 20;

/// What the kernel grants a receive socket asking for [`RECV_BUFFER_BYTES`], when it
/// grants less (`None`: all of it, or the size could not be read). Linux caps the
/// request at `net.core.rmem_max` without an error, so a receiver that believes it has
/// 8 MiB may have far less; the caller says so. Probed on a throwaway socket: the cap is
/// the host's, the same for every socket.
pub fn recv_buffer_granted() -> Option<usize> {
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).ok()?;
    sock.set_recv_buffer_size(RECV_BUFFER_BYTES).ok()?;
    let got = sock.recv_buffer_size().ok()?;
    // Linux doubles the value it stores (the other half is its bookkeeping) and
    // reports the doubled figure.
    let granted = if cfg!(target_os = "linux") {
        got / 2
    } else {
        got
    };
    (granted < RECV_BUFFER_BYTES).then_some(granted)
}

/// Datagrams the kernel dropped for `sock` because its receive buffer was full (the
/// `drops` column of `/proc/net/udp` for this socket's inode; `None` where that is not
/// available). Cumulative since the socket was created. Reads a proc file: call it
/// once a second or at the end of a run, never per datagram.
pub fn kernel_drops(sock: &UdpSocket) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", sock.as_raw_fd())).ok()?;
    let inode = link
        .to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .to_string();
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
        (f.get(9) == Some(&inode.as_str()))
            .then(|| f.get(12).and_then(|d| d.parse().ok()))
            .flatten()
    })
}

/// A UDP socket receiving `group` (a multicast group, joined on `interface`, or a unicast
/// address to bind). `SO_REUSEADDR` lets several receivers share a group and port.
///
/// A multicast receiver is bound to the group's own address, not the wildcard: the
/// kernel then delivers it only datagrams sent to that group. Bound to `0.0.0.0:PORT`,
/// a socket on Linux gets every group any socket on the host joined on that port
/// (`IP_MULTICAST_ALL` defaults to 1), so the A and B lines of a feed on one port
/// would each receive both lines.
pub fn group_receiver(group: SocketAddrV4, interface: Ipv4Addr) -> Result<UdpSocket, NetError> {
    let sock =
        Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(sock_err("socket"))?;
    sock.set_reuse_address(true)
        .map_err(sock_err("SO_REUSEADDR"))?;
    // A large receive buffer absorbs bursts while the reader is busy. The kernel may
    // grant less without an error: callers report it (`recv_buffer_granted`).
    let _ = sock.set_recv_buffer_size(RECV_BUFFER_BYTES);
    // Unix binds to the group itself (see above); Windows refuses a bind to a
    // multicast address, and filters by joined group anyway.
    let bind = if group.ip().is_multicast() && cfg!(windows) {
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.port())
    } else {
        group
    };
    sock.bind(&SocketAddr::V4(bind).into())
        .map_err(sock_err(format!("bind {bind}")))?;
    if group.ip().is_multicast() {
        sock.join_multicast_v4(group.ip(), &interface)
            .map_err(sock_err(format!(
                "join multicast group {} on {interface}",
                group.ip()
            )))?;
    }
    Ok(sock.into())
}

/// A UDP socket for sending to multicast groups through `interface` (loopback included),
/// with multicast loop on so receivers on this host get the datagrams.
pub fn group_sender(interface: Ipv4Addr) -> Result<UdpSocket, NetError> {
    let sock =
        Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(sock_err("socket"))?;
    let _ = sock.set_send_buffer_size(8 << 20);
    sock.set_multicast_if_v4(&interface)
        .map_err(sock_err(format!("IP_MULTICAST_IF {interface}")))?;
    sock.set_multicast_loop_v4(true)
        .map_err(sock_err("IP_MULTICAST_LOOP"))?;
    sock.set_multicast_ttl_v4(1)
        .map_err(sock_err("IP_MULTICAST_TTL"))?;
    let bind = SocketAddrV4::new(interface, 0);
    sock.bind(&SocketAddr::V4(bind).into())
        .map_err(sock_err(format!("bind {bind}")))?;
    Ok(sock.into())
}

/// What to capture.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    pub group: SocketAddrV4,
    pub interface: Ipv4Addr,
    /// Stop after this long (None: until stopped).
    pub duration: Option<Duration>,
    /// Stop after this many datagrams (None: no limit).
    pub max_packets: Option<u64>,
    /// Where progress lines go (None: nowhere): one when capturing starts, then one a
    /// second. The library never prints; the binary passes a function that does.
    pub progress: Option<fn(&str)>,
}

/// What a capture recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureReport {
    pub packets: u64,
    pub bytes: u64,
    /// Datagrams the kernel dropped because the socket's receive buffer was full
    /// ([`kernel_drops`], read once at the end; `None` where it is not available).
    pub kernel_drops: Option<u64>,
}

/// A refused send in words, with its destination, and what an "Invalid argument" to
/// a unicast address means here (the kernel's word for a destination the interface we
/// send from cannot reach: 127.0.0.1 by default).
pub fn send_error_text(err: &std::io::Error, to: SocketAddr) -> String {
    let unicast = match to {
        SocketAddr::V4(a) => !a.ip().is_multicast(),
        SocketAddr::V6(a) => !a.ip().is_multicast(),
    };
    let hint = if unicast && err.kind() == std::io::ErrorKind::InvalidInput {
        " (a unicast address the sending interface cannot reach: we send from --interface, \
         127.0.0.1 unless given, which reaches only this host; give a multicast group such \
         as 239.1.1.1:26400, or --interface an address of this host on the way there)"
    } else {
        ""
    };
    format!("sending to {to}: {err}{hint}")
}

/// How often a capture's records are flushed to its file.
const FLUSH_EVERY_NS: u64 = 1_000_000_000;

/// Records datagrams arriving on `opts.group` into the pcap file `out` until the
/// duration or packet limit is reached or `stop` is set. Timestamps are the system clock
/// (ns since the Unix epoch) read right after each receive.
pub fn capture(
    opts: &CaptureOptions,
    out: &Path,
    stop: &StopFlag,
) -> Result<CaptureReport, NetError> {
    let sock = group_receiver(opts.group, opts.interface)?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(sock_err("SO_RCVTIMEO"))?;
    let mut writer = CaptureWriter::create(out)?;
    if let Some(line) = opts.progress {
        // Only now that the group is joined and the file exists.
        line(&format!(
            "capturing {} into {} (Ctrl-C to stop)",
            opts.group,
            out.display()
        ));
    }
    let mut buf = vec![0u8; 65_536];
    let mut report = CaptureReport::default();
    let deadline = opts
        .duration
        .map(|d| MonoNanos::now().as_nanos() + d.as_nanos() as u64);
    let mut progress = opts.progress.map(Progress::new);
    // Records reach the file once a second, so a reader (replay) sees a live capture
    // at most a second behind.
    let mut next_flush = MonoNanos::now().as_nanos() + FLUSH_EVERY_NS;
    let mut unflushed = false;
    loop {
        let now = MonoNanos::now().as_nanos();
        if unflushed && now >= next_flush {
            writer.flush()?;
            unflushed = false;
            next_flush = now + FLUSH_EVERY_NS;
        }
        if stop.is_set()
            || deadline.is_some_and(|d| now >= d)
            || opts.max_packets.is_some_and(|m| report.packets >= m)
        {
            break;
        }
        match sock.recv_from(&mut buf) {
            Ok((n, SocketAddr::V4(src))) => {
                let unix_ns = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                writer.write(unix_ns, src, opts.group, &buf[..n])?;
                unflushed = true;
                report.packets += 1;
                report.bytes += n as u64;
            }
            Ok((_, SocketAddr::V6(_))) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(NetError::Socket {
                    what: format!("receive on {}", opts.group),
                    source: e,
                })
            }
        }
        if let Some(progress) = progress.as_mut() {
            progress.tick(|| {
                format!(
                    "capture: {}, {}",
                    // "datagrams", as the summary says (new-user pass).
                    tickwire_rt::text::count(report.packets, "datagram", "datagrams"),
                    tickwire_rt::text::count(report.bytes, "byte", "bytes")
                )
            });
        }
    }
    report.kernel_drops = kernel_drops(&sock);
    writer.finish()?;
    Ok(report)
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub speed: Speed,
    /// Send everything here instead of to each datagram's recorded destination.
    pub target: Option<SocketAddrV4>,
    /// Interface multicast leaves through (loopback by default).
    pub interface: Ipv4Addr,
    /// Passes over the file (`None`: loop until stopped).
    pub passes: Option<u64>,
    /// Where the progress line goes once a second (None: nowhere). The library never
    /// prints; the binary passes a function that does.
    pub progress: Option<fn(&str)>,
}

/// What a replay did and how faithful its timing was.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    pub packets: u64,
    pub bytes: u64,
    pub passes: u64,
    pub send_errors: u64,
    /// Why the first refused send failed, with its destination (`None`: none failed).
    pub first_send_error: Option<String>,
    pub elapsed_ns: u64,
    /// Actual send time minus scheduled time, per datagram (empty under `max`).
    pub lateness: Latency,
}

/// Replays `cap` in file order on an absolute schedule (see [`crate::speed`]).
pub fn replay(
    cap: &Captured,
    opts: &ReplayOptions,
    stop: &StopFlag,
) -> Result<ReplayReport, NetError> {
    let sock = group_sender(opts.interface)?;
    let mut report = ReplayReport {
        packets: 0,
        bytes: 0,
        passes: 0,
        send_errors: 0,
        first_send_error: None,
        elapsed_ns: 0,
        lateness: Latency::new(),
    };
    let Some(first) = cap.entries.first() else {
        return Ok(report);
    };
    let count = cap.entries.len() as u64;
    let begin = MonoNanos::now().as_nanos();
    let mut pass_start = begin;
    let mut progress = opts.progress.map(Progress::new);
    'passes: while opts.passes.is_none_or(|p| report.passes < p) {
        let schedule = Schedule::new(opts.speed, pass_start, first.unix_ns);
        for (i, e) in cap.entries.iter().enumerate() {
            if let Some(due) = schedule.due(i as u64, e.unix_ns) {
                // Records may be years apart (a capture's timestamps are input): the
                // wait ends at the first Ctrl-C.
                if !wait_until_or(MonoNanos(due), || stop.is_set()) {
                    break 'passes;
                }
                report
                    .lateness
                    .record(MonoNanos::now().as_nanos().saturating_sub(due));
            }
            if i % 1024 == 0 && stop.is_set() {
                break 'passes;
            }
            let dst = opts.target.unwrap_or(e.dst);
            let payload = cap.payload(e);
            match sock.send_to(payload, dst) {
                Ok(_) => {
                    report.packets += 1;
                    report.bytes += payload.len() as u64;
                }
                Err(err) => {
                    report.send_errors += 1;
                    if report.first_send_error.is_none() {
                        report.first_send_error = Some(send_error_text(&err, dst.into()));
                    }
                }
            }
            if let Some(progress) = progress.as_mut().filter(|_| i % 256 == 0) {
                progress.tick(|| {
                    format!(
                        "replay: pass {}, {} packets sent",
                        report.passes + 1,
                        report.packets
                    )
                });
            }
        }
        report.passes += 1;
        pass_start = pass_start.saturating_add(schedule.pass_ns(count, cap.span_ns()));
        if matches!(opts.speed, Speed::Max) {
            pass_start = MonoNanos::now().as_nanos();
        }
    }
    report.elapsed_ns = MonoNanos::now().as_nanos() - begin;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_unicast_send_says_what_invalid_argument_means() {
        let einval = std::io::Error::from_raw_os_error(22);
        let to: SocketAddr = "10.255.255.1:26400".parse().unwrap();
        let t = send_error_text(&einval, to);
        assert!(
            t.starts_with("sending to 10.255.255.1:26400: Invalid argument"),
            "{t}"
        );
        assert!(
            t.contains("--interface") && t.contains("239.1.1.1:26400"),
            "{t}"
        );
        // To a group, or another error: the kernel's words alone.
        let group: SocketAddr = "239.1.1.1:26400".parse().unwrap();
        assert!(!send_error_text(&einval, group).contains("--interface"));
        let unreachable = std::io::Error::from_raw_os_error(101);
        assert!(!send_error_text(&unreachable, to).contains("--interface"));
    }

    #[test]
    fn kernel_drops_counts_what_a_full_receive_buffer_refused() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(64 * 1024)
            .unwrap();
        let Some(before) = kernel_drops(&rx) else {
            return; // no /proc/net/udp here: nothing to check
        };
        assert_eq!(before, 0);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        // 4 MiB into a 64 KiB buffer nobody reads.
        for _ in 0..4096 {
            tx.send_to(&[7u8; 1024], to).unwrap();
        }
        let dropped = kernel_drops(&rx).unwrap();
        assert!(dropped > 0 && dropped < 4096, "{dropped}");
    }

    /// Regression: `feed --group 239.1.1.1:P --group-b 239.1.1.2:P` counted every
    /// datagram twice (each line's socket, bound to 0.0.0.0:P, got both groups).
    #[test]
    fn receivers_of_two_groups_on_one_port_get_only_their_own_group() {
        let port = {
            let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let a = SocketAddrV4::new(Ipv4Addr::new(239, 255, 46, 1), port);
        let b = SocketAddrV4::new(Ipv4Addr::new(239, 255, 46, 2), port);
        let rx_a = group_receiver(a, Ipv4Addr::LOCALHOST).unwrap();
        let rx_b = group_receiver(b, Ipv4Addr::LOCALHOST).unwrap();
        for rx in [&rx_a, &rx_b] {
            rx.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
        }
        let tx = group_sender(Ipv4Addr::LOCALHOST).unwrap();
        for i in 0..5u8 {
            tx.send_to(&[b'A', i], a).unwrap();
            tx.send_to(&[b'B', i], b).unwrap();
        }
        let drain = |rx: &UdpSocket| {
            let mut got = Vec::new();
            let mut buf = [0u8; 16];
            while let Ok((n, _)) = rx.recv_from(&mut buf) {
                got.push(buf[..n].to_vec());
            }
            got
        };
        let want = |line: u8| (0..5u8).map(|i| vec![line, i]).collect::<Vec<_>>();
        assert_eq!(drain(&rx_a), want(b'A'));
        assert_eq!(drain(&rx_b), want(b'B'));
    }

    #[test]
    fn recv_buffer_granted_is_none_or_less_than_asked() {
        if let Some(granted) = recv_buffer_granted() {
            assert!(granted < RECV_BUFFER_BYTES, "{granted}");
        }
    }
}
