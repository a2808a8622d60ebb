//! `tickwire bench mcast-fanout`: one multicast sender to 1, 4 and 8 receiver
//! *processes* (issue 21's bar, docs/multicast.md), reliable and plain UDP multicast in
//! the same run, with a raw UDP ping-pong for the half round trip the bar compares with.
//!
//! A separate command from `bench fanout` (a router's fan-out to subscriber clients over
//! TCP under a bursty mixed-size schedule, with its own relay floor): here there is no
//! router and the parties are the existing `tickwire mcast send` and `tickwire mcast
//! recv` processes, started by this command and read back through their `--print-json`
//! summaries, so what is measured is exactly what a user runs.

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use tickwire_rt::MonoNanos;

use crate::console::Console;
use crate::harness::StopFlag;
use crate::outln;
use crate::report::{self, Machine};
use crate::stats::{Latency, Summary};

const AFTER_HELP: &str = "\
What it measures, per receiver count N (--receivers, default 1,4,8), in one run:
  raw    'tickwire mcast send --raw' to N 'tickwire mcast recv --raw' processes: plain UDP
         multicast, one message per datagram, no sequencing, no recovery (the floor)
  mcast  'tickwire mcast send' to N 'tickwire mcast recv' processes: reliable multicast,
         one message per datagram, in order, NAK recovery; the sender lingers until all N
         receivers reported having everything
  Every party is its own process on 127.0.0.1; the group is a fresh port per run.
  Before the runs a raw UDP ping-pong (--pingpongs round trips of --size bytes between
  two threads of this process, blocking sockets) gives the half round trip the bar
  compares the one-way latency with.

Reported per run: the sender's CPU per message (whole process, from its first message
to the end of its linger: total, exact from the scheduler; user and system, the total
split in the ratio of the kernel's tick-sampled utime and stime, so take runs of some
CPU seconds: the JSON gives each sender's cpu_ticks, in 1/100 s), one-way latency (publisher stamp to delivery, one clock:
CLOCK_MONOTONIC of this host; p50 the median of the receivers' p50s, p99 the worst
receiver's), p50 over the UDP half round trip, messages delivered (`min deliv`: the fewest
of any receiver) and, for mcast, whether every receiver got every message in order and how many
datagrams were retransmitted. Then the growth of the sender's CPU per message from the
fewest to the most receivers, total, user and system, raw and mcast side by side (the bar:
the protocol's own cost, user, flat within 1.2x).

Pacing: --rate msg/s in bursts of --burst messages; the sender sleeps between bursts
(no busy wait), so its CPU time is its sending plus one wake-up per burst.

On loopback the kernel delivers a copy of each datagram to every member socket inside
the sender's sendto: the system part grows with N for raw UDP as for mcast.

Examples:
  tickwire bench mcast-fanout                     # 1, 4, 8 receivers, 200k messages each
  tickwire bench mcast-fanout --receivers 1,8 --messages 500k --rate 50k --json mf.json

Exit status: 0 when every run was measured and every mcast receiver got every message
in order, 1 when one did not (or on an error), 130 when Ctrl-C stopped the run (the
run it cut is marked STOPPED; its receivers are judged against what its sender sent
before the stop, in order and none lost up to where the stop ended them), 2 for a
usage error.";

/// Options of `tickwire bench mcast-fanout`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct McastFanoutArgs {
    /// Receiver process counts to run, comma-separated, in this order.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub receivers: Vec<usize>,

    /// Messages per run (k and M suffixes: 200k = 200000).
    #[arg(long, default_value = "200k", value_parser = crate::schedule::parse_count, value_name = "N")]
    pub messages: u64,

    /// Messages per second (k and M suffixes).
    #[arg(long, default_value = "20k", value_parser = crate::schedule::parse_count, value_name = "RATE")]
    pub rate: u64,

    /// Messages sent back to back per wake-up of the sender.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub burst: u64,

    /// Payload bytes per message.
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub size: usize,

    /// Round trips of the raw UDP ping-pong.
    #[arg(long, default_value = "20k", value_parser = crate::schedule::parse_count, value_name = "N")]
    pub pingpongs: u64,

    /// Write every result, with the machine's metadata and each process's summary, as
    /// JSON to FILE.
    #[arg(long, value_name = "FILE", value_parser = crate::report::parse_output_path)]
    pub json: Option<PathBuf>,
}

/// Whether a run is the floor or the reliable stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Raw,
    Mcast,
}

/// One run: one sender, `receivers` receiver processes.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub kind: Kind,
    pub receivers: usize,
    /// Messages the sender sent (its summary's count).
    pub messages: u64,
    /// Messages the run was to send (`--messages`).
    pub planned: u64,
    /// Ctrl-C stopped the run while it ran: its figures cover what was sent.
    pub stopped: bool,
    pub cpu_ns_per_msg: f64,
    pub cpu_user_ns_per_msg: f64,
    pub cpu_sys_ns_per_msg: f64,
    /// Median over the receivers of their one-way p50, µs.
    pub one_way_p50_us: f64,
    /// Worst receiver's one-way p99, µs.
    pub one_way_p99_us: f64,
    /// `one_way_p50_us` over the UDP half round trip's p50.
    pub p50_over_half_rtt: f64,
    /// The fewest messages any receiver delivered.
    pub delivered_min: u64,
    /// Every receiver delivered every message the sender sent, in order.
    pub all_in_order: bool,
    pub retransmitted: u64,
    /// The processes' own `--print-json` summaries.
    pub sender: Value,
    pub receiver_reports: Vec<Value>,
}

impl RunResult {
    /// Marks the run as cut by Ctrl-C. The stop reaches the sender and the receivers
    /// at once, so a receiver may end a few messages short of what the sender sent
    /// (seen: 42870 of 42896, in order, none lost): a cut run is in order when every
    /// receiver delivered an in-order prefix of what was sent, with nothing lost.
    fn mark_stopped(&mut self) {
        self.stopped = true;
        self.all_in_order = self.receiver_reports.len() == self.receivers
            && self.receiver_reports.iter().all(|r| {
                u(r, "delivered") <= self.messages
                    && r.get("in_order") == Some(&Value::Bool(true))
                    && u(r, "lost") == 0
            });
    }
}

/// Growth of the sender's CPU per message from the fewest to the most receivers.
#[derive(Debug, Clone, Serialize)]
pub struct Growth {
    pub kind: Kind,
    pub from_receivers: usize,
    pub to_receivers: usize,
    /// `None` (JSON null) when the fewest receivers' figure is 0: CPU below the
    /// probe's 10 ms resolution, so no ratio can be taken.
    pub total: Option<f64>,
    pub user: Option<f64>,
    pub sys: Option<f64>,
}

/// `hi / lo`, or `None` when `lo` is not above 0.
fn ratio(hi: f64, lo: f64) -> Option<f64> {
    // Zero is below the probe's resolution, not free: no ratio ("user 0.00x").
    (lo > 0.0 && hi > 0.0 && hi.is_finite()).then(|| hi / lo)
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    bench: &'static str,
    machine: Machine,
    messages: u64,
    rate: u64,
    burst: u64,
    size: usize,
    udp_half_round_trip: Summary,
    runs: &'a [RunResult],
    growth: Vec<Growth>,
    stopped_by_user: bool,
}

/// Runs the bench; `tickwire` is the binary whose `mcast send` / `mcast recv` run.
pub fn run(
    args: &McastFanoutArgs,
    tickwire: &Path,
    con: &mut Console<'_>,
) -> anyhow::Result<ExitCode> {
    // Flag checks: usage errors (exit status 2).
    if args.receivers.is_empty() || args.receivers.iter().any(|&n| n == 0 || n > 64) {
        return Err(crate::UsageError("--receivers takes counts from 1 to 64".into()).into());
    }
    if args.burst == 0 || args.size == 0 || args.size > 60_000 {
        return Err(crate::UsageError(
            "--burst must be at least 1 and --size from 1 to 60000 bytes".into(),
        )
        .into());
    }
    let stop = StopFlag::install();
    let machine = Machine::detect();
    (con.progress)(&format!(
        "udp ping-pong: {} round trips of {} B",
        args.pingpongs, args.size
    ));
    let half_rtt = udp_pingpong(args.pingpongs, args.size)?.summary();
    let mut runs = Vec::new();
    'runs: for &n in &args.receivers {
        for kind in [Kind::Raw, Kind::Mcast] {
            if stop.is_set() {
                break 'runs;
            }
            let to = tickwire_rt::text::count(n as u64, "receiver", "receivers");
            (con.progress)(&format!(
                "{kind:?} to {to}: {} messages at {} msg/s",
                args.messages, args.rate
            ));
            let mut r = run_one(args, tickwire, kind, n, half_rtt.p50_us)
                .with_context(|| format!("{kind:?} to {to}"))?;
            // A Ctrl-C at the terminal reaches the sender and the receivers too: they
            // end early and report what they had.
            if stop.is_set() {
                r.mark_stopped();
            }
            runs.push(r);
        }
    }
    let growth = growth(&runs);
    print_report(con.out, args, &half_rtt, &runs, &growth);
    let rep = Report {
        bench: "mcast-fanout",
        machine,
        messages: args.messages,
        rate: args.rate,
        burst: args.burst,
        size: args.size,
        udp_half_round_trip: half_rtt,
        runs: &runs,
        growth,
        stopped_by_user: stop.is_set(),
    };
    report::write_outputs(
        con.out,
        args.json.as_deref(),
        &rep,
        None,
        |_| Ok(()),
        report::Announce::Wrote,
    )?;
    Ok(exit_code(&runs, stop.is_set()))
}

/// 1 when a completed mcast run lost or reordered anything, or sent less than
/// planned (reliable multicast must not), else [`report::exit_code`].
fn exit_code(runs: &[RunResult], stopped: bool) -> ExitCode {
    if !stopped
        && runs
            .iter()
            .any(|r| r.kind == Kind::Mcast && (!r.all_in_order || r.messages < r.planned))
    {
        ExitCode::FAILURE
    } else {
        report::exit_code(stopped)
    }
}

/// Raw UDP ping-pong between two threads of this process on 127.0.0.1 (blocking
/// sockets, as the receivers block): the half round trip of each exchange.
fn udp_pingpong(count: u64, size: usize) -> anyhow::Result<Latency> {
    let echo = UdpSocket::bind("127.0.0.1:0").context("binding the ping-pong echo")?;
    let sock = UdpSocket::bind("127.0.0.1:0").context("binding the ping-pong sender")?;
    sock.connect(echo.local_addr()?)?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    echo.set_read_timeout(Some(Duration::from_secs(2)))?;
    let echoer: JoinHandle<()> = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        // Ends on the empty datagram (or when nothing came for 2 s).
        while let Ok((n, from)) = echo.recv_from(&mut buf) {
            if n == 0 {
                return;
            }
            let _ = echo.send_to(&buf[..n], from);
        }
    });
    let (msg, mut buf) = (vec![0x5au8; size], vec![0u8; 65_536]);
    let mut half = Latency::new();
    for _ in 0..count {
        let t0 = MonoNanos::now();
        sock.send(&msg).context("ping-pong send")?;
        // A lost datagram (rare on loopback) is a missing sample.
        if sock.recv(&mut buf).is_ok() {
            half.record(MonoNanos::now().saturating_sub(t0) / 2);
        }
    }
    let _ = sock.send(&[]);
    let _ = echoer.join();
    if half.summary().samples == 0 {
        bail!("the UDP ping-pong got no reply");
    }
    Ok(half)
}

/// A started child with its stderr drained by a thread (kept for error messages).
struct Proc {
    child: Child,
    stderr: Option<JoinHandle<String>>,
}

impl Proc {
    /// Starts `tickwire ARGS`; with `ready`, waits for a stderr line containing it.
    fn start(tickwire: &Path, args: &[String], ready: Option<&str>) -> anyhow::Result<Proc> {
        let mut child = tickwire_rt::child::mark(&mut Command::new(tickwire))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} {}", tickwire.display(), args.join(" ")))?;
        let mut err = BufReader::new(child.stderr.take().context("child stderr")?);
        let mut seen = String::new();
        if let Some(word) = ready {
            loop {
                let mut line = String::new();
                if err.read_line(&mut line)? == 0 {
                    let _ = child.wait();
                    bail!("`tickwire {}` exited: {seen}", args.join(" "));
                }
                seen.push_str(&line);
                if line.contains(word) {
                    break;
                }
            }
        }
        let stderr = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
            seen + &rest
        });
        Ok(Proc {
            child,
            stderr: Some(stderr),
        })
    }

    /// Waits up to `limit` for the child (then SIGTERM: it still prints its summary;
    /// SIGKILL 5 s later), and parses its standard output as JSON.
    fn finish(mut self, limit: Duration) -> anyhow::Result<Value> {
        let end = MonoNanos::now().add_duration(limit);
        let mut termed = None;
        loop {
            if self.child.try_wait()?.is_some() {
                break;
            }
            let now = MonoNanos::now();
            match termed {
                None if now >= end => {
                    let pid = rustix::process::Pid::from_child(&self.child);
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    termed = Some(now);
                }
                Some(t) if now.saturating_sub(t) > 5_000_000_000 => {
                    let _ = self.child.kill();
                }
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out)?;
        }
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        serde_json::from_str(out.trim()).with_context(|| {
            format!("no JSON summary from the process (stdout {out:?}, stderr {err:?})")
        })
    }
}

/// A group on a port free on this host now.
fn fresh_group() -> anyhow::Result<SocketAddrV4> {
    let probe = UdpSocket::bind("0.0.0.0:0").context("finding a free UDP port")?;
    Ok(SocketAddrV4::new(
        Ipv4Addr::new(239, 255, 74, 62),
        probe.local_addr()?.port(),
    ))
}

fn run_one(
    args: &McastFanoutArgs,
    tickwire: &Path,
    kind: Kind,
    n: usize,
    half_rtt_p50: f64,
) -> anyhow::Result<RunResult> {
    let group = fresh_group()?.to_string();
    let m = args.messages.to_string();
    // Generous: the run's paced time, three times over, plus 30 s.
    let limit = Duration::from_secs(30 + 3 * args.messages / args.rate.max(1));
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut recv = s(&["mcast", "recv", "--group", &group, "--count", &m, "--quiet"]);
    recv.extend(s(&[
        "--print-json",
        "--timeout",
        &format!("{}s", limit.as_secs()),
    ]));
    let (rate, burst, size) = (
        args.rate.to_string(),
        args.burst.to_string(),
        args.size.to_string(),
    );
    let mut send = s(&["mcast", "send", "bench/mcast", "--group", &group]);
    send.extend(s(&["--count", &m, "--rate", &rate, "--burst", &burst]));
    send.extend(s(&["--size", &size, "--print-json"]));
    if kind == Kind::Raw {
        recv.push("--raw".into());
        send.push("--raw".into());
    } else {
        let wait = n.to_string();
        send.extend(s(&["--wait-receivers", &wait, "--linger", "30s"]));
    }
    let mut receivers = Vec::new();
    for _ in 0..n {
        receivers.push(Proc::start(tickwire, &recv, Some("ready"))?);
    }
    let sender = Proc::start(tickwire, &send, None)?.finish(limit)?;
    // A raw receiver that lost a datagram waits for it until stopped: 2 s after the
    // sender is plenty on loopback.
    let recv_limit = if kind == Kind::Raw {
        Duration::from_secs(2)
    } else {
        limit
    };
    let reports = receivers
        .into_iter()
        .map(|r| r.finish(recv_limit))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(summarise(
        kind,
        n,
        args.messages,
        half_rtt_p50,
        sender,
        reports,
    ))
}

fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// One run's row from the processes' summaries. Pure. "In order" compares each
/// receiver with what the sender sent (its summary's `messages`), not with the
/// `planned` count (new-user pass: a run cut by Ctrl-C printed "in order NO" though
/// every receiver had every message sent, in order); [`exit_code`] judges a sender
/// short of `planned`.
fn summarise(
    kind: Kind,
    n: usize,
    planned: u64,
    half_rtt_p50: f64,
    sender: Value,
    reports: Vec<Value>,
) -> RunResult {
    let mut p50s: Vec<f64> = reports.iter().map(|r| f(r, "latency_p50_us")).collect();
    p50s.sort_by(f64::total_cmp);
    let one_way_p50_us = match p50s.len() {
        0 => f64::NAN,
        l if l % 2 == 1 => p50s[l / 2],
        l => (p50s[l / 2 - 1] + p50s[l / 2]) / 2.0,
    };
    let one_way_p99_us = reports
        .iter()
        .map(|r| f(r, "latency_p99_us"))
        .fold(f64::NAN, f64::max);
    // A sender without a count in its summary is taken to have sent what it was told.
    let sent = sender
        .get("messages")
        .and_then(Value::as_u64)
        .unwrap_or(planned);
    let all_in_order = reports.len() == n
        && reports.iter().all(|r| {
            u(r, "delivered") == sent
                && r.get("in_order") == Some(&Value::Bool(true))
                && u(r, "lost") == 0
        });
    RunResult {
        kind,
        receivers: n,
        messages: sent,
        planned,
        stopped: false,
        cpu_ns_per_msg: f(&sender, "cpu_ns_per_msg"),
        cpu_user_ns_per_msg: f(&sender, "cpu_user_ns_per_msg"),
        cpu_sys_ns_per_msg: f(&sender, "cpu_sys_ns_per_msg"),
        one_way_p50_us,
        one_way_p99_us,
        p50_over_half_rtt: one_way_p50_us / half_rtt_p50,
        delivered_min: reports.iter().map(|r| u(r, "delivered")).min().unwrap_or(0),
        all_in_order,
        retransmitted: u(&sender, "retransmitted"),
        sender,
        receiver_reports: reports,
    }
}

/// Per kind, the CPU per message at the most receivers over that at the fewest. Pure.
fn growth(runs: &[RunResult]) -> Vec<Growth> {
    [Kind::Raw, Kind::Mcast]
        .into_iter()
        .filter_map(|kind| {
            let of = |r: &&RunResult| r.kind == kind;
            let lo = runs.iter().filter(of).min_by_key(|r| r.receivers)?;
            let hi = runs.iter().filter(of).max_by_key(|r| r.receivers)?;
            (hi.receivers > lo.receivers).then(|| Growth {
                kind,
                from_receivers: lo.receivers,
                to_receivers: hi.receivers,
                total: ratio(hi.cpu_ns_per_msg, lo.cpu_ns_per_msg),
                user: ratio(hi.cpu_user_ns_per_msg, lo.cpu_user_ns_per_msg),
                sys: ratio(hi.cpu_sys_ns_per_msg, lo.cpu_sys_ns_per_msg),
            })
        })
        .collect()
}

fn print_report(
    out: &mut dyn std::io::Write,
    args: &McastFanoutArgs,
    half: &Summary,
    runs: &[RunResult],
    growth: &[Growth],
) {
    outln!(
        out,
        "multicast fan-out on 127.0.0.1: {} messages of {} B per run at {} msg/s, bursts of {}",
        args.messages,
        args.size,
        args.rate,
        args.burst
    );
    outln!(
        out,
        "raw UDP ping-pong half round trip ({} samples): p50 {:.1} µs, p99 {:.1} µs",
        half.samples,
        half.p50_us,
        half.p99_us
    );
    outln!(
        out,
        "{:<6} {:>9} {:>12} {:>9} {:>9} {:>12} {:>11} {:>10} {:>10} {:>9} {:>9}",
        "",
        "receivers",
        "CPU ns/msg",
        "user",
        "sys",
        "one-way p50",
        "p99 µs",
        "p50/halfRTT",
        "min deliv",
        "in order",
        "retrans"
    );
    for r in runs {
        let order = match r.kind {
            Kind::Raw => "-".to_string(),
            Kind::Mcast => if r.all_in_order { "yes" } else { "NO" }.to_string(),
        };
        outln!(
            out,
            "{:<6} {:>9} {:>12.0} {:>9.0} {:>9.0} {:>12.1} {:>11.1} {:>10.2}x {:>10} {:>9} {:>9}{}",
            format!("{:?}", r.kind).to_lowercase(),
            r.receivers,
            r.cpu_ns_per_msg,
            r.cpu_user_ns_per_msg,
            r.cpu_sys_ns_per_msg,
            r.one_way_p50_us,
            r.one_way_p99_us,
            r.p50_over_half_rtt,
            r.delivered_min,
            order,
            r.retransmitted,
            if r.stopped { "  STOPPED" } else { "" }
        );
    }
    for r in runs.iter().filter(|r| r.stopped) {
        outln!(
            out,
            "{} to {}: STOPPED by {} after {} of {} messages sent: the row covers those \
             (\"in order\": every receiver delivered them in order, none lost, up to where \
             the stop ended it)",
            format!("{:?}", r.kind).to_lowercase(),
            tickwire_rt::text::count(r.receivers as u64, "receiver", "receivers"),
            tickwire_rt::stop::stopped_by(),
            r.messages,
            r.planned
        );
    }
    let times = |r: Option<f64>| r.map_or_else(|| "n/a".to_owned(), |r| format!("{r:.2}x"));
    for g in growth {
        outln!(
            out,
            "sender CPU per message, {} → {} receivers, {}: total {}, user {}, system {}",
            g.from_receivers,
            g.to_receivers,
            format!("{:?}", g.kind).to_lowercase(),
            times(g.total),
            times(g.user),
            times(g.sys)
        );
    }
    if growth
        .iter()
        .any(|g| g.total.is_none() || g.user.is_none() || g.sys.is_none())
    {
        outln!(
            out,
            "(n/a: the sender's CPU at the fewest or the most receivers was below the CPU probe's 10 ms \
             resolution; more --messages give a ratio)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(p50: f64, p99: f64, delivered: u64) -> Value {
        serde_json::json!({"latency_p50_us": p50, "latency_p99_us": p99,
            "delivered": delivered, "in_order": true, "lost": 0})
    }

    #[test]
    fn a_run_is_summarised_over_its_receivers() {
        let sender = serde_json::json!({"messages": 10, "cpu_ns_per_msg": 3000.0,
            "cpu_user_ns_per_msg": 1000.0, "cpu_sys_ns_per_msg": 2000.0, "retransmitted": 2});
        let rs = vec![
            recv(10.0, 50.0, 10),
            recv(30.0, 90.0, 10),
            recv(20.0, 60.0, 10),
        ];
        let r = summarise(Kind::Mcast, 3, 10, 5.0, sender.clone(), rs);
        assert_eq!((r.one_way_p50_us, r.one_way_p99_us), (20.0, 90.0));
        assert_eq!(r.p50_over_half_rtt, 4.0);
        assert!(r.all_in_order);
        assert_eq!((r.delivered_min, r.retransmitted), (10, 2));
        // One receiver short: not everything arrived.
        let rs = vec![recv(10.0, 50.0, 10), recv(30.0, 90.0, 9)];
        let r = summarise(Kind::Mcast, 2, 10, 5.0, sender, rs);
        assert!(!r.all_in_order);
        assert_eq!((r.one_way_p50_us, r.delivered_min), (20.0, 9));
    }

    #[test]
    fn an_mcast_run_short_of_a_message_fails_the_command_a_raw_one_does_not() {
        let sender = serde_json::json!({"messages": 10, "cpu_ns_per_msg": 1.0});
        let run = |kind, delivered| {
            summarise(
                kind,
                1,
                10,
                1.0,
                sender.clone(),
                vec![recv(1.0, 2.0, delivered)],
            )
        };
        let code = |runs: &[RunResult], stopped| format!("{:?}", exit_code(runs, stopped));
        let ok = format!("{:?}", ExitCode::SUCCESS);
        let failure = format!("{:?}", ExitCode::FAILURE);
        assert_eq!(code(&[run(Kind::Raw, 9), run(Kind::Mcast, 10)], false), ok);
        assert_eq!(
            code(&[run(Kind::Raw, 10), run(Kind::Mcast, 9)], false),
            failure
        );
        // Stopped by the user: a short run is expected; 130 as after SIGINT.
        assert_eq!(
            code(&[run(Kind::Mcast, 9)], true),
            format!("{:?}", ExitCode::from(130))
        );
    }

    /// New-user pass: `bench mcast-fanout --messages 100000` stopped by Ctrl-C printed
    /// "in order NO" for the run it cut, though its one receiver had delivered all
    /// 44191 messages the sender sent, in order, none lost.
    #[test]
    fn a_stopped_run_is_compared_with_what_its_sender_sent_and_marked() {
        let sender = serde_json::json!({"messages": 44_191, "cpu_ns_per_msg": 10_620.0,
            "retransmitted": 0});
        let mut r = summarise(
            Kind::Mcast,
            1,
            100_000,
            1.0,
            sender,
            vec![recv(20.0, 40.0, 44_191)],
        );
        assert!(r.all_in_order);
        assert_eq!((r.messages, r.planned), (44_191, 100_000));
        r.mark_stopped();
        assert!(r.all_in_order && r.stopped);
        let args = McastFanoutArgs {
            receivers: vec![1],
            messages: 100_000,
            rate: 20_000,
            burst: 5,
            size: 100,
            pingpongs: 10,
            json: None,
        };
        let mut out = Vec::new();
        print_report(
            &mut out,
            &args,
            &Latency::new().summary(),
            std::slice::from_ref(&r),
            &[],
        );
        let out = String::from_utf8(out).unwrap();
        let row = out.lines().find(|l| l.starts_with("mcast")).unwrap();
        assert!(row.contains(" yes ") && row.ends_with("STOPPED"), "{out}");
        assert!(out.contains("after 44191 of 100000 messages sent"), "{out}");
        // The stop reaches the receivers as it reaches the sender: one may end a few
        // messages short, in order and with none lost (seen: 42870 of 42896). Only a
        // cut run may; a cut receiver that lost one is not in order.
        let sender = serde_json::json!({"messages": 42_896});
        let cut =
            |report: Value| summarise(Kind::Mcast, 1, 100_000, 1.0, sender.clone(), vec![report]);
        let mut short = cut(recv(1.0, 2.0, 42_870));
        assert!(!short.all_in_order);
        short.mark_stopped();
        assert!(short.all_in_order);
        let mut lossy = recv(1.0, 2.0, 42_870);
        lossy["lost"] = 1.into();
        let mut lossy = cut(lossy);
        lossy.mark_stopped();
        assert!(!lossy.all_in_order);
        // A sender that sent less than planned without a stop fails the command.
        let code = format!("{:?}", exit_code(std::slice::from_ref(&r), false));
        assert_eq!(code, format!("{:?}", ExitCode::FAILURE));
    }

    #[test]
    fn growth_compares_the_fewest_and_the_most_receivers_per_kind() {
        let sender = |cpu: f64| {
            serde_json::json!({"messages": 1, "cpu_ns_per_msg": cpu,
                "cpu_user_ns_per_msg": cpu / 4.0, "cpu_sys_ns_per_msg": cpu * 3.0 / 4.0})
        };
        let runs: Vec<RunResult> = [(Kind::Raw, 1, 100.0), (Kind::Raw, 8, 400.0)]
            .into_iter()
            .chain([(Kind::Mcast, 8, 300.0), (Kind::Mcast, 1, 200.0)])
            .map(|(k, n, cpu)| summarise(k, n, 1, 1.0, sender(cpu), vec![]))
            .collect();
        let g = growth(&runs);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].kind, g[0].total, g[0].user),
            (Kind::Raw, Some(4.0), Some(4.0))
        );
        assert_eq!(
            (g[1].kind, g[1].from_receivers, g[1].total),
            (Kind::Mcast, 1, Some(1.5))
        );
        // CPU below the probe's resolution at the fewest receivers: no ratio (it
        // printed "infx" and "NaNx").
        let zero: Vec<RunResult> = [(Kind::Raw, 1, 0.0), (Kind::Raw, 2, 100.0)]
            .into_iter()
            .map(|(k, n, cpu)| summarise(k, n, 1, 1.0, sender(cpu), vec![]))
            .collect();
        let g = growth(&zero);
        assert_eq!((g[0].total, g[0].user, g[0].sys), (None, None, None));
        // A single receiver count gives no growth.
        assert!(growth(&runs[..1]).is_empty());
    }

    #[test]
    fn counts_take_suffixes() {
        use crate::schedule::parse_count;
        assert_eq!(parse_count("200k"), Ok(200_000));
        assert_eq!(parse_count("1M"), Ok(1_000_000));
        assert!(parse_count("0").is_err());
    }
}
