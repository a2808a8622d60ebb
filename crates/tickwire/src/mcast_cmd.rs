//! `tickwire mcast send` and `tickwire mcast recv`: reliable multicast, no router.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use tickwire_mcast::driver::{Delivery, DEFAULT_GROUP};
use tickwire_mcast::{
    Loss, McastPublisher, McastSubscriber, PublisherOptions, ReceiverConfig, SenderConfig,
    SessionId, SubscriberOptions,
};
use tickwire_rt::{Latency, MonoNanos, StopFlag};
use tickwire_wire::frame::PublishOptions;

use crate::units::{parse_duration, parse_rate, parse_size};

/// Exit status of `mcast recv` when --timeout ran out before --count messages came, or
/// when messages were lost (2 is a usage error's), as `feed` and `bench md-replay`.
const EXIT_SHORT: u8 = 3;

/// A command-line argument's bytes, exactly as the shell passed them.
fn os_bytes(s: &std::ffi::OsStr) -> &[u8] {
    std::os::unix::ffi::OsStrExt::as_bytes(s)
}

const MCAST_HELP: &str = "\
Reliable multicast (docs/multicast.md): one send reaches every receiver on the group,
whatever their number. The sender puts messages into sequenced UDP datagrams; each
receiver delivers them in order, asks the sender again (NAK) for what it missed, and
reports as a gap what cannot be recovered any more (never hidden).

No router is involved: 'mcast send' publishes directly to a group, 'mcast recv' joins
it and filters by its patterns (the router's pattern syntax).

Examples (receivers first; each send is a new session, which a receiver adopts after
2 s without a datagram from the one it follows, hence the sleep):
  tickwire mcast recv 'md/>'                      # another terminal: print what arrives
  tickwire mcast recv md/X --count 100000 --quiet --print-json --timeout 30s &   # check it
  tickwire mcast send md/NASDAQ/AAPL 'bid 189.20'                          # one message
  sleep 2
  tickwire mcast send md/X --count 100000 --rate 50k --loss 0.05 --seed 7  # 5% dropped

Both sides default to group 239.255.74.1:7440 on interface 127.0.0.1 (this host).";

#[derive(Args)]
#[command(after_help = MCAST_HELP)]
pub struct McastArgs {
    #[command(subcommand)]
    cmd: McastCmd,
}

#[derive(Subcommand)]
enum McastCmd {
    /// Publish to a multicast group: one message or a paced load.
    Send(SendArgs),
    /// Join a multicast group and print (or count) the messages matching patterns.
    Recv(RecvArgs),
}

#[derive(Args)]
struct NetArgs {
    /// Multicast group and port.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = DEFAULT_GROUP, value_parser = crate::feed_cmd::parse_addr_port)]
    group: SocketAddrV4,
    /// Interface to send or join on (127.0.0.1 keeps the traffic on this host).
    #[arg(long, value_name = "IP", default_value_t = Ipv4Addr::LOCALHOST)]
    interface: Ipv4Addr,
    /// Injected loss, for tests and demos: drop this fraction of datagrams (0.05 = 5%).
    /// Sender: original datagrams (never retransmissions); receiver: every datagram.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = crate::units::parse_loss)]
    loss: f64,
    /// Seed of the injected loss: the same seed drops the same datagrams.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Session id (8 hex digits). Sender: use this one instead of a random one.
    /// Receiver: accept only this one (default: the first sender heard).
    #[arg(long, value_name = "HEX", value_parser = parse_session)]
    session: Option<SessionId>,
}

fn parse_session(s: &str) -> Result<SessionId, String> {
    u32::from_str_radix(s.trim_start_matches("0x"), 16)
        .map(SessionId)
        .map_err(|_| format!("{s:?} is not a session id: expected up to 8 hex digits"))
}

const SEND_HELP: &str = "\
Load mode (--count N) numbers each message (SEQ) and stamps its send time (STAMPS), so
'mcast recv' can check the order and measure one-way latency. After the last message
the sender stays for --linger, answering NAKs, and prints what it sent, retransmitted
and what its receivers reported; --wait-receivers N ends the linger as soon as N
receivers reported having everything.

Exit status: 0, or 1 on an error (a MESSAGE larger than a datagram, ...), 2 for a
usage error (bad topic, bad flag value, a --group that is not a multicast group, a load
--size that cannot fit in one datagram), 130 when stopped by Ctrl-C or SIGTERM before
every message was sent.

Examples:
  tickwire mcast send md/NASDAQ/AAPL 'hello'                     # one message
  tickwire mcast send md/X --count 100000 --rate 50k             # a paced load run
  tickwire mcast send md/X --count 100000 --loss 0.05 --seed 7   # 5% of datagrams dropped";

#[derive(Args)]
#[command(after_help = SEND_HELP)]
struct SendArgs {
    /// Topic to publish to, e.g. md/NASDAQ/AAPL.
    #[arg(value_parser = crate::units::parse_topic)]
    topic: String,
    /// Message text (omit for a load run: --count N), sent as its bytes (UTF-8 or not).
    #[arg(value_parser = clap::value_parser!(std::ffi::OsString))]
    message: Option<std::ffi::OsString>,
    /// Number of messages (load mode; needed without MESSAGE).
    #[arg(long, value_name = "N", value_parser = crate::units::parse_count)]
    count: Option<u64>,
    /// Payload size in load mode (e.g. 100, 1K). A message is never split, so a size
    /// that cannot fit in one --max-datagram is refused before anything is sent.
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "100")]
    size: usize,
    /// Messages per second (e.g. 10000, 50k); 0 = as fast as possible.
    #[arg(long, value_name = "RATE", value_parser = parse_rate, default_value = "0")]
    rate: u64,
    /// Messages per datagram at most: flush after this many (full datagrams go at once).
    #[arg(long, value_name = "N", default_value_t = 1)]
    batch: u64,
    /// Pace by sleeping, in bursts of N messages sent back to back (with --rate): no
    /// busy wait between bursts, so the sender's CPU time is its sending (plus one
    /// wake-up per burst). Without it the sender spins the last 200 µs before each
    /// message, which is exact but burns CPU.
    #[arg(long, value_name = "N", requires = "rate")]
    burst: Option<u64>,
    /// Stay this long after the last message, answering NAKs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
    linger: Duration,
    /// End the linger once this many receivers reported having every datagram.
    #[arg(long, value_name = "N")]
    wait_receivers: Option<usize>,
    /// Retransmission buffer, in datagrams, 2 to 1048576 (receivers further behind
    /// report a gap).
    #[arg(long, value_name = "DATAGRAMS", default_value_t = 4096)]
    buffer: usize,
    /// Largest datagram in bytes, header included (256 to 65507).
    #[arg(long, value_name = "BYTES", default_value_t = 1400)]
    max_datagram: usize,
    /// Print the summary as JSON on standard output instead of text.
    #[arg(long)]
    print_json: bool,
    /// The floor for benchmarks: plain UDP datagrams, one PUBLISH frame each, no
    /// sequencing, no recovery (receive with 'mcast recv --raw').
    #[arg(long, conflicts_with_all = ["loss", "session"])]
    raw: bool,
    #[command(flatten)]
    net: NetArgs,
}

const RECV_HELP: &str = "\
Output: 'ready: joined GROUP ...' on standard error once the group is joined, and
'session ID: receiving from message N' when a sender's session is adopted (the first
heard, or another after the adopted one fell silent); then one
line per message, 'TOPIC PAYLOAD' (hex when not printable); a lost range
that cannot be recovered any more is reported on standard error as
'gap: messages FIRST..LAST lost (N messages)' (not with --quiet). At the end (--count reached, --timeout,
or Ctrl-C) a summary goes to standard error, or as JSON to standard output with --print-json:
messages delivered, whether they came in order, gaps, recoveries and their latency
(p50/p99), one-way latency when the sender stamped messages, strays from other sessions.

Examples:
  tickwire mcast recv 'md/>'                                 # print what arrives
  tickwire mcast recv 'md/NASDAQ/*' 'md/*/IBM'               # only these topics
  tickwire mcast recv --count 100000 --quiet --print-json    # check a load, summary as JSON
  tickwire mcast recv --count 10 --timeout 5s                # exit 3 if 10 do not come in 5 s

Exit status: 0 every message delivered; 3 when messages were lost (a gap, reported on
standard error) or --timeout ran out before --count messages; 1 on an error; 2 a usage
error (bad flag value, a --group that is not a multicast group).";

#[derive(Args)]
#[command(after_help = RECV_HELP)]
struct RecvArgs {
    /// Patterns to deliver (default: every topic).
    #[arg(value_name = "PATTERN", default_value = ">", value_parser = crate::units::parse_pattern)]
    patterns: Vec<String>,
    /// Exit once this many messages are accounted for (delivered or reported lost).
    #[arg(long, value_name = "N", value_parser = crate::units::parse_count)]
    count: Option<u64>,
    /// Give up after this long (exit status 3 if --count was not reached).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Do not print messages, nor a line per gap (summary only).
    #[arg(long)]
    quiet: bool,
    /// Print the summary as JSON on standard output instead of text.
    #[arg(long)]
    print_json: bool,
    /// Datagrams held out of order while a loss is recovered (2 to 65536).
    #[arg(long, value_name = "DATAGRAMS", default_value_t = 1024)]
    hold: usize,
    /// Socket receive buffer (e.g. 64K); small, a receiver that stalls loses datagrams.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    recv_buffer: Option<usize>,
    /// Stall (stop reading) once, after this many messages, for --stall (tests, demos).
    #[arg(long, value_name = "N", requires = "stall")]
    stall_after: Option<u64>,
    /// How long the stall lasts.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    stall: Option<Duration>,
    /// Receive what 'mcast send --raw' sends: plain datagrams, no recovery (the floor).
    #[arg(long, conflicts_with_all = ["loss", "session", "stall_after"])]
    raw: bool,
    #[command(flatten)]
    net: NetArgs,
}

pub fn run(a: McastArgs) -> anyhow::Result<ExitCode> {
    let group = match &a.cmd {
        McastCmd::Send(s) => s.net.group,
        McastCmd::Recv(r) => r.net.group,
    };
    // The drivers refuse it too, but as an error at run time (exit 1): it is a usage
    // error, caught before anything opens.
    if !group.ip().is_multicast() {
        return Err(crate::units::UsageError(format!(
            "--group {group} is not a multicast group (224.0.0.0/4; try 239.255.74.1:7440)"
        ))
        .into());
    }
    match a.cmd {
        McastCmd::Send(s) => run_send(s),
        McastCmd::Recv(r) => run_recv(r),
    }
}

fn run_send(a: SendArgs) -> anyhow::Result<ExitCode> {
    check_send_flags(&a)?;
    if a.message.is_none() {
        check_load_size(&a)?;
    }
    let opts = PublisherOptions {
        group: a.net.group,
        interface: a.net.interface,
        sender: SenderConfig {
            buffer_datagrams: a.buffer,
            max_datagram: a.max_datagram,
            ..SenderConfig::default()
        },
        session: a.net.session,
        loss: Loss::new(a.net.loss, a.net.seed)?,
    };
    if a.raw {
        return run_send_raw(&a);
    }
    let mut publisher = McastPublisher::new(opts)
        .with_context(|| format!("opening a multicast sender to {}", a.net.group))?;
    let stop = StopFlag::install();
    let start = MonoNanos::now();
    let cpu_start = Cpu::now();
    // Stopped before the last message: (sent, asked for).
    let mut cut = None;
    match (&a.message, a.count) {
        (Some(text), None) => {
            publisher.publish(&a.topic, os_bytes(text), PublishOptions::default())?;
        }
        (message, count) => {
            let count = count.unwrap_or(1);
            let payload = match message {
                Some(t) => os_bytes(t).to_vec(),
                None => crate::pubsub::load_payload(a.size),
            };
            let mut polled = start;
            for i in 0..count {
                if stop.is_set() {
                    cut = Some((i, count));
                    break;
                }
                pace(start, i, a.rate, a.burst);
                let now = MonoNanos::now();
                let opts = PublishOptions {
                    seq: Some(i),
                    publisher_send: Some(now.as_nanos()),
                };
                publisher.publish(&a.topic, &payload, opts)?;
                if (i + 1) % a.batch == 0 {
                    publisher.flush();
                }
                // NAKs and heartbeats: every 100 µs, not per message.
                if now.saturating_sub(polled) > 100_000 {
                    publisher.poll();
                    polled = now;
                }
            }
        }
    }
    publisher.flush();
    let sent_at = MonoNanos::now();
    linger(&mut publisher, a.linger, a.wait_receivers, &stop);
    let cpu = Cpu::now().since(&cpu_start);
    report_send(&publisher, sent_at.duration_since(start), cpu, a.print_json)?;
    stopped_early(cut)
}

/// After a send's report: a send stopped before its last message says so and exits
/// 130, as `pub` does (new-user pass: it exited 0 with a summary that read as a whole
/// run).
fn stopped_early(cut: Option<(u64, u64)>) -> anyhow::Result<ExitCode> {
    let Some((sent, asked)) = cut else {
        return Ok(ExitCode::SUCCESS);
    };
    eprintln!(
        "stopped ({}): {sent} of {asked} messages sent",
        tickwire_rt::stop::stopped_by()
    );
    Ok(ExitCode::from(130))
}

/// Answers NAKs for `time`, or until `wait` receivers reported having everything.
fn linger(p: &mut McastPublisher, time: Duration, wait: Option<usize>, stop: &StopFlag) {
    let end = MonoNanos::now().add_duration(time);
    while MonoNanos::now() < end && !stop.is_set() {
        p.linger(Duration::from_millis(20));
        let sent = p.stats().datagrams;
        let done = p.receivers().iter().filter(|r| r.expected >= sent).count();
        if wait.is_some_and(|n| done >= n) {
            return;
        }
    }
}

/// Waits until message `i` is due at `rate` msg/s (0: at once): spinning the last
/// 200 µs before each message, or with `burst`, sleeping until each burst of that many.
fn pace(start: MonoNanos, i: u64, rate: u64, burst: Option<u64>) {
    let Some(burst) = burst else {
        if let Some(offset) = i.saturating_mul(1_000_000_000).checked_div(rate) {
            tickwire_rt::pacing::wait_until(start.add_nanos(offset));
        }
        return;
    };
    if i % burst != 0 {
        return;
    }
    if let Some(offset) = i.saturating_mul(1_000_000_000).checked_div(rate) {
        let wait = start.add_nanos(offset).saturating_sub(MonoNanos::now());
        if wait > 0 {
            std::thread::sleep(Duration::from_nanos(wait));
        }
    }
}

/// This process's CPU time (every thread): the exact total (the scheduler's runtime,
/// ns) and the clock ticks (`/proc/self/stat` utime and stime) that apportion it into
/// user and system time. The kernel counts a tick as user or system by where the
/// process was when its timer tick came, so the split is only as fine as the ticks
/// counted (reported as `cpu_ticks`): take runs of some CPU seconds.
struct Cpu {
    total_ns: u64,
    user_ticks: u64,
    sys_ticks: u64,
}

impl Cpu {
    fn now() -> Cpu {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let (user_ticks, sys_ticks) = proc_stat_times().unwrap_or((0, 0));
        Cpu {
            total_ns: t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64,
            user_ticks,
            sys_ticks,
        }
    }

    fn since(&self, start: &Cpu) -> Cpu {
        Cpu {
            total_ns: self.total_ns.saturating_sub(start.total_ns),
            user_ticks: self.user_ticks.saturating_sub(start.user_ticks),
            sys_ticks: self.sys_ticks.saturating_sub(start.sys_ticks),
        }
    }

    /// The JSON fields of CPU per message: the total, its user and system shares (ns;
    /// null when no tick was counted) and the ticks counted.
    fn per_message_json(&self, messages: u64) -> serde_json::Value {
        let ticks = self.user_ticks + self.sys_ticks;
        let share = |part: u64| {
            (ticks > 0).then(|| per_message(self.total_ns, messages) * part as f64 / ticks as f64)
        };
        serde_json::json!({
            "cpu_ns_per_msg": per_message(self.total_ns, messages),
            "cpu_user_ns_per_msg": share(self.user_ticks),
            "cpu_sys_ns_per_msg": share(self.sys_ticks),
            "cpu_ticks": ticks,
        })
    }
}

/// utime and stime of this process, in clock ticks (fields 14 and 15 of
/// `/proc/self/stat`, after the parenthesised command name).
fn proc_stat_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut f = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

fn per_message(cpu_ns: u64, messages: u64) -> f64 {
    cpu_ns as f64 / messages.max(1) as f64
}

/// Below this many messages the process's start, linger and exit outweigh the
/// messages: the report gives the CPU in all, not per message.
const CPU_PER_MESSAGE_FROM: u64 = 1000;

/// The CPU figure of a send report: per message, or in all for a handful of messages
/// (one message "cost" the whole process's ~ms).
fn cpu_text(cpu_ns: u64, messages: u64) -> String {
    if messages >= CPU_PER_MESSAGE_FROM {
        format!("{:.0} ns CPU per message", per_message(cpu_ns, messages))
    } else {
        format!(
            "{:.1} ms CPU in all, start and linger included",
            cpu_ns as f64 / 1e6
        )
    }
}

/// `doc` (an object) with `extra`'s fields added.
fn merged(mut doc: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(d), serde_json::Value::Object(e)) = (doc.as_object_mut(), extra) {
        d.extend(e);
    }
    doc
}

/// Refuses (a usage error, exit status 2) a flag value of `mcast send` out of its
/// range, naming the flag, before any socket opens. The bounds are the sender core's
/// own ([`SenderConfig::validate`]), checked one flag at a time so that the error names
/// the flag that set it (the core's error names only its setting, and the driver's came
/// at run time, exit status 1).
fn check_send_flags(a: &SendArgs) -> Result<(), crate::units::UsageError> {
    let bad = |flag: &str, value: &dyn std::fmt::Display, why: String| {
        Err(crate::units::UsageError(format!("{flag} {value}: {why}")))
    };
    if a.message.is_none() && a.count.is_none() {
        return Err(crate::units::UsageError(
            "nothing to send: give a MESSAGE to send one, or --count N (with --size, --rate) \
             for a load run"
                .into(),
        ));
    }
    if a.batch == 0 {
        return bad("--batch", &a.batch, "must be at least 1".into());
    }
    if let Some(n @ 0) = a.burst {
        return bad("--burst", &n, "must be at least 1".into());
    }
    let flags: [(&str, usize, SenderConfig); 2] = [
        (
            "--max-datagram",
            a.max_datagram,
            SenderConfig {
                max_datagram: a.max_datagram,
                ..SenderConfig::default()
            },
        ),
        (
            "--buffer",
            a.buffer,
            SenderConfig {
                buffer_datagrams: a.buffer,
                ..SenderConfig::default()
            },
        ),
    ];
    for (flag, value, cfg) in flags {
        if let Err(e) = cfg.validate() {
            return bad(flag, &value, e.to_string());
        }
    }
    Ok(())
}

/// The same for `mcast recv`: `--hold` against the receiver core's bounds
/// ([`ReceiverConfig::validate`]), `--recv-buffer` against what `SO_RCVBUF` takes (a C
/// `int`: a larger value was cut to its low 32 bits, 8G to 0, silently).
fn check_recv_flags(a: &RecvArgs) -> Result<(), crate::units::UsageError> {
    let cfg = ReceiverConfig {
        hold_datagrams: a.hold,
        ..ReceiverConfig::default()
    };
    if let Err(e) = cfg.validate() {
        return Err(crate::units::UsageError(format!("--hold {}: {e}", a.hold)));
    }
    if let Some(bytes) = a.recv_buffer.filter(|&b| b > i32::MAX as usize) {
        return Err(crate::units::UsageError(format!(
            "--recv-buffer {bytes}: at most {} bytes (the kernel caps it at \
             net.core.rmem_max anyway)",
            i32::MAX
        )));
    }
    Ok(())
}

/// Refuses (a usage error) a load `--size` that cannot fit in one datagram of
/// `--max-datagram` bytes, before the payload is allocated: a message is never split,
/// so it could not be sent, and a huge one could exhaust memory first.
fn check_load_size(a: &SendArgs) -> anyhow::Result<()> {
    // Every message carries SEQ and STAMPS; the reliable stream adds its packet header.
    let framing = tickwire_wire::frame::HEADER_LEN + 8 + tickwire_wire::frame::STAMPS_LEN;
    let packet = match a.raw {
        true => 0,
        false => tickwire_mcast::packet::HEADER_LEN,
    };
    let limit = a
        .max_datagram
        .saturating_sub(packet + framing + a.topic.len());
    if a.size > limit {
        return Err(crate::units::UsageError(format!(
            "--size {} is too large: a message to {} carries at most {limit} bytes in a \
             {}-byte datagram (--max-datagram; messages are not split)",
            a.size, a.topic, a.max_datagram
        ))
        .into());
    }
    Ok(())
}

/// `send --raw`: one PUBLISH frame per plain datagram, the same payload, SEQ and STAMPS
/// as the reliable stream, nothing else: what the protocol costs is the difference.
fn run_send_raw(a: &SendArgs) -> anyhow::Result<ExitCode> {
    let sock = tickwire_capture::net::group_sender(a.net.interface)
        .with_context(|| format!("opening a UDP sender on {}", a.net.interface))?;
    let count = a.count.unwrap_or(1);
    let payload = match &a.message {
        Some(t) => os_bytes(t).to_vec(),
        None => crate::pubsub::load_payload(a.size),
    };
    let stop = StopFlag::install();
    let mut buf = Vec::with_capacity(a.max_datagram);
    let (start, cpu_start) = (MonoNanos::now(), Cpu::now());
    let mut sent = 0u64;
    let mut cut = None;
    for i in 0..count {
        if stop.is_set() {
            cut = Some((i, count));
            break;
        }
        pace(start, i, a.rate, a.burst);
        buf.clear();
        let opts = PublishOptions {
            seq: Some(i),
            publisher_send: Some(MonoNanos::now().as_nanos()),
        };
        tickwire_wire::frame::encode_publish(
            &mut buf,
            &a.topic,
            &payload,
            opts,
            a.max_datagram as u32,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        if sock.send_to(&buf, a.net.group).is_ok() {
            sent += 1;
        }
    }
    let (took, cpu) = (
        MonoNanos::now().duration_since(start),
        Cpu::now().since(&cpu_start),
    );
    let doc = serde_json::json!({
        "raw": true, "messages": sent, "seconds": took.as_secs_f64(),
    });
    let doc = merged(doc, cpu.per_message_json(sent));
    if a.print_json {
        println!("{doc}");
    } else {
        eprintln!(
            "sent {sent} plain datagrams in {:.3} s, {}",
            took.as_secs_f64(),
            cpu_text(cpu.total_ns, sent)
        );
    }
    stopped_early(cut)
}

fn report_send(p: &McastPublisher, took: Duration, cpu: Cpu, json: bool) -> anyhow::Result<()> {
    let st = p.stats();
    let (dropped, send_errors) = p.dropped();
    let receivers: Vec<serde_json::Value> = p
        .receivers()
        .iter()
        .map(|r| {
            serde_json::json!({
                "receiver": format!("{:016x}", r.receiver),
                "expected": r.expected, "delivered": r.delivered, "behind": r.behind,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "session": p.session().to_string(),
        "messages": st.messages, "datagrams": st.datagrams, "seconds": took.as_secs_f64(),
        "heartbeats": st.heartbeats, "naks": st.naks, "retransmitted": st.retransmitted,
        "nak_suppressed": st.nak_suppressed, "nak_rate_limited": st.nak_rate_limited,
        "nak_unrecoverable": st.nak_unrecoverable,
        "nak_heartbeat_suppressed": st.nak_heartbeat_suppressed,
        "status_refused": st.status_refused, "dropped_by_loss": dropped,
        "send_errors": send_errors, "receivers": receivers,
    });
    let doc = merged(doc, cpu.per_message_json(st.messages));
    if json {
        println!("{doc}");
        return Ok(());
    }
    eprintln!(
        "sent {} in {} in {:.3} s ({}, session {}); \
         {} NAKs: {} datagrams retransmitted, {} suppressed (linger), {} over the rate \
         limit, {} asked for after they left the buffer; {} dropped by injected loss",
        tickwire_rt::text::count(st.messages, "message", "messages"),
        tickwire_rt::text::count(st.datagrams, "datagram", "datagrams"),
        took.as_secs_f64(),
        cpu_text(cpu.total_ns, st.messages),
        p.session(),
        st.naks,
        st.retransmitted,
        st.nak_suppressed,
        st.nak_rate_limited,
        st.nak_unrecoverable,
        dropped
    );
    for r in p.receivers() {
        eprintln!(
            "receiver {:016x}: {} delivered, {} behind when it last told",
            r.receiver,
            tickwire_rt::text::count(r.delivered, "message", "messages"),
            tickwire_rt::text::count(r.behind, "datagram", "datagrams")
        );
    }
    Ok(())
}

#[derive(Default)]
struct RecvState {
    delivered: u64,
    lost: u64,
    next_index: Option<u64>,
    in_order: bool,
    gaps: Vec<(u64, u64)>,
    recovery: Latency,
    latency: Latency,
    session: Option<SessionId>,
}

impl RecvState {
    /// A message at stream position `index`, received `now`: order, count, latency.
    fn message(&mut self, index: u64, msg: &tickwire_wire::frame::Msg<'_>, now: MonoNanos) {
        if self.next_index.is_some_and(|n| n != index) {
            self.in_order = false;
        }
        self.next_index = Some(index + 1);
        self.delivered += 1;
        if let Some(s) = msg.stamps {
            self.latency
                .record(now.as_nanos().saturating_sub(s.publisher_send));
        }
    }
}

fn run_recv(a: RecvArgs) -> anyhow::Result<ExitCode> {
    check_recv_flags(&a)?;
    if a.raw {
        return run_recv_raw(&a);
    }
    let opts = SubscriberOptions {
        group: a.net.group,
        interface: a.net.interface,
        patterns: a.patterns.clone(),
        receiver: ReceiverConfig {
            session: a.net.session,
            hold_datagrams: a.hold,
            ..ReceiverConfig::default()
        },
        loss: Loss::new(a.net.loss, a.net.seed)?,
        recv_buffer: a.recv_buffer,
    };
    let mut sub = McastSubscriber::new(opts)
        .with_context(|| format!("joining multicast group {}", a.net.group))?;
    eprintln!(
        "ready: joined {} on {}, patterns {}",
        a.net.group,
        a.net.interface,
        a.patterns.join(" ")
    );
    let stop = StopFlag::install();
    let deadline = a.timeout.map(|t| MonoNanos::now().add_duration(t));
    let mut st = RecvState {
        in_order: true,
        ..RecvState::default()
    };
    let mut stall = a.stall_after.zip(a.stall);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(crate::units::LinesOut(stdout.lock()));
    let mut write_error = None;
    loop {
        let accounted = st.delivered + st.lost;
        if a.count.is_some_and(|n| accounted >= n) || stop.is_set() {
            break;
        }
        if deadline.is_some_and(|d| MonoNanos::now() >= d) {
            break;
        }
        if let Some((after, time)) = stall {
            if st.delivered >= after {
                std::thread::sleep(time);
                stall = None;
            }
        }
        sub.poll_wait(Duration::from_millis(10), |d| {
            let now = MonoNanos::now();
            on_delivery(&mut st, d, now, a.quiet, |topic, payload| {
                if !a.quiet && write_error.is_none() {
                    if let Err(e) = crate::pubsub::write_line(&mut out, topic, payload, false) {
                        write_error = Some(e);
                    }
                }
            })
        });
        if !a.quiet {
            out.flush().context("writing standard output")?;
        }
        if let Some(e) = write_error.take() {
            return Err(e).context("writing standard output");
        }
    }
    drop(out);
    sub.close();
    report_recv(&sub, &st, a.print_json);
    let reached = a.count.is_none_or(|n| st.delivered + st.lost >= n);
    Ok(if !reached && !stop.is_set() {
        timed_out(a.timeout, st.delivered + st.lost, a.count);
        ExitCode::from(EXIT_SHORT)
    } else if st.lost > 0 {
        // A script must see the loss as `feed` shows it (new-user pass: 97% lost, 0).
        ExitCode::from(EXIT_SHORT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Says that --timeout ended a receive short of --count (exit status 3).
fn timed_out(timeout: Option<Duration>, got: u64, count: Option<u64>) {
    eprintln!(
        "timed out: --timeout {:.3} s ran out with {got} of the {} messages --count asked for",
        timeout.unwrap_or_default().as_secs_f64(),
        count.unwrap_or(0)
    );
}

/// `quiet`: no line per gap either (`--quiet` is the summary only; a new-user pass got
/// 4,218 gap lines on stderr from a lossy run), the summary counts them.
/// The line `mcast recv` prints on standard error for a lost range (not with --quiet).
fn gap_line(first_msg: u64, messages: u64) -> String {
    format!(
        "gap: messages {first_msg}..{} lost ({})",
        first_msg + messages.saturating_sub(1),
        tickwire_rt::text::count(messages, "message", "messages")
    )
}

fn on_delivery(
    st: &mut RecvState,
    d: Delivery<'_>,
    now: MonoNanos,
    quiet: bool,
    mut print: impl FnMut(&str, &[u8]),
) {
    match d {
        Delivery::Message { index, topic, msg } => {
            if msg.seq.is_some_and(|s| s != index) {
                st.in_order = false;
            }
            st.message(index, &msg, now);
            print(topic, msg.payload);
        }
        Delivery::Gap {
            first_msg,
            messages,
            ..
        } => {
            if !quiet {
                eprintln!("{}", gap_line(first_msg, messages));
            }
            if st.next_index.is_some_and(|n| n != first_msg) {
                st.in_order = false;
            }
            st.next_index = Some(first_msg + messages);
            st.lost += messages;
            st.gaps.push((first_msg, messages));
        }
        Delivery::Recovered { after } => st.recovery.record(after.as_nanos() as u64),
        Delivery::Joined { session, first_msg } => {
            eprintln!("session {session}: receiving from message {first_msg}");
            st.session = Some(session);
            st.next_index = Some(first_msg);
        }
    }
}

fn report_recv(sub: &McastSubscriber, st: &RecvState, json: bool) {
    let c = sub.stats();
    let (rec, lat) = (st.recovery.summary(), st.latency.summary());
    if json {
        let gaps: Vec<_> = st
            .gaps
            .iter()
            .map(|(f, n)| serde_json::json!({"first": f, "messages": n}))
            .collect();
        let doc = serde_json::json!({
            "session": st.session.map(|s| s.to_string()),
            "delivered": st.delivered, "in_order": st.in_order, "lost": st.lost, "gaps": gaps,
            "recovered": c.recovered, "recovery_p50_us": rec.p50_us, "recovery_p99_us": rec.p99_us,
            "latency_samples": lat.samples, "latency_p50_us": lat.p50_us, "latency_p99_us": lat.p99_us,
            "strays": c.strays, "malformed": c.malformed, "implausible": c.implausible,
            "false_skips": c.false_skips,
            "duplicates": c.duplicates, "naks_sent": c.naks_sent, "overrun": c.overrun,
            "dropped_by_loss": sub.dropped(),
        });
        println!("{doc}");
        return;
    }
    let recovery = if c.recovered > 0 {
        format!(
            " (p50 {:.0} µs, p99 {:.0} µs after the loss was seen)",
            rec.p50_us, rec.p99_us
        )
    } else {
        String::new()
    };
    eprintln!(
        "received {} ({}), {} lost in {} gaps; {} datagrams recovered{}; {} NAKs \
         sent; {} strays, {} malformed; {} dropped by injected loss",
        tickwire_rt::text::count(st.delivered, "message", "messages"),
        if st.in_order {
            "in order"
        } else {
            "OUT OF ORDER"
        },
        st.lost,
        st.gaps.len(),
        c.recovered,
        recovery,
        c.naks_sent,
        c.strays,
        c.malformed,
        sub.dropped()
    );
    if c.implausible > 0 || c.false_skips > 0 {
        eprintln!(
            "spoofing guard: {} datagrams too far ahead refused (implausible), {} skips \
             taken back when the sender showed it was behind them (false_skips); \
             docs/multicast.md",
            c.implausible, c.false_skips
        );
    }
    if lat.samples > 0 {
        eprintln!(
            "one-way latency (publisher stamp to delivery): p50 {:.1} µs, p99 {:.1} µs",
            lat.p50_us, lat.p99_us
        );
    }
}

/// `recv --raw`: counts and times what `send --raw` sends; a lost datagram is lost.
fn run_recv_raw(a: &RecvArgs) -> anyhow::Result<ExitCode> {
    let sock = tickwire_capture::net::group_receiver(a.net.group, a.net.interface)
        .with_context(|| format!("joining multicast group {}", a.net.group))?;
    sock.set_read_timeout(Some(Duration::from_millis(10)))
        .context("SO_RCVTIMEO")?;
    eprintln!("ready: joined {} on {} (raw)", a.net.group, a.net.interface);
    let stop = StopFlag::install();
    let deadline = a.timeout.map(|t| MonoNanos::now().add_duration(t));
    let mut st = RecvState {
        in_order: true,
        ..RecvState::default()
    };
    let mut buf = vec![0u8; tickwire_mcast::packet::MAX_DATAGRAM];
    while !stop.is_set() && a.count.is_none_or(|n| st.delivered < n) {
        if deadline.is_some_and(|d| MonoNanos::now() >= d) {
            break;
        }
        let Ok(n) = sock.recv(&mut buf) else { continue };
        let now = MonoNanos::now();
        if let Ok(Some((tickwire_wire::frame::Frame::Publish(msg), _))) =
            tickwire_wire::frame::decode(&buf[..n], u32::MAX)
        {
            st.message(msg.seq.unwrap_or(st.delivered), &msg, now);
        }
    }
    let lat = st.latency.summary();
    let doc = serde_json::json!({
        "raw": true, "delivered": st.delivered, "in_order": st.in_order,
        "latency_samples": lat.samples, "latency_p50_us": lat.p50_us, "latency_p99_us": lat.p99_us,
    });
    if a.print_json {
        println!("{doc}");
    } else {
        eprintln!(
            "received {} plain datagrams; one-way latency p50 {:.1} µs, p99 {:.1} µs",
            st.delivered, lat.p50_us, lat.p99_us
        );
    }
    let reached = a.count.is_none_or(|n| st.delivered >= n);
    Ok(if reached || stop.is_set() {
        ExitCode::SUCCESS
    } else {
        timed_out(a.timeout, st.delivered, a.count);
        ExitCode::from(EXIT_SHORT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gap line (printed without --quiet) says the range and counts it, "1 message"
    /// for one (new-user pass: "(1 messages)").
    #[test]
    fn the_gap_line_names_the_range_and_counts_it() {
        assert_eq!(
            gap_line(1812, 943),
            "gap: messages 1812..2754 lost (943 messages)"
        );
        assert_eq!(gap_line(7, 1), "gap: messages 7..7 lost (1 message)");
    }

    /// New-user pass: `mcast send` of one message printed the whole process's CPU
    /// (start, linger, exit) as "ns CPU per message".
    #[test]
    fn a_handful_of_messages_reports_cpu_in_all_not_per_message() {
        assert_eq!(
            cpu_text(3_400_000, 1),
            "3.4 ms CPU in all, start and linger included"
        );
        assert_eq!(cpu_text(2_500_000, 1000), "2500 ns CPU per message");
    }
}
