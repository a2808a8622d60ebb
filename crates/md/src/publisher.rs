//! `tickwire md publish`: the exchange's network side. Sends a session file as
//! MoldUDP64 over UDP multicast with the recorded timing scaled by a speed, answers
//! re-requests from its buffer, and can drop packets on purpose (seeded) to exercise
//! recovery.
//!
//! Timing: message `seq` is due at `start + (t_seq - t_1) / speed` (an absolute
//! schedule, see [`tickwire_capture::speed`]); each packet carries the next due message
//! and every following message already due. The publisher sleeps until `spin_before`
//! ahead of each packet and spins only that last stretch (zero: it never spins, and
//! sends when the sleep ends, late by the sleep's wake-up time), so on a machine whose
//! cores it shares it takes no more CPU than its sends need. Its thread's timer slack is
//! set to 1 µs while it publishes (the default 50 µs would make every sleep that late). While idle for a second the publisher
//! sends a heartbeat (as MoldUDP64 servers do), so a receiver detects a lost tail. After
//! the last message it keeps sending heartbeats and answering re-requests for the
//! linger time, then sends End of Session.
//!
//! Re-requests arrive on a unicast UDP socket (`request_listen`); each is answered to
//! its sender with one packet holding as many of the requested messages as fit, paid
//! from a byte budget ([`ANSWER_RATE`], [`ANSWER_BURST`]): a 20-byte request brings up
//! to a full packet back to whatever source address it carries, and a hostile-input
//! probe's 400 KB of them had 27 MB sent (69x, no limit). A request over budget is
//! counted (`requests_over_budget`) and not answered; the receiver asks again.
//! Injected loss applies to the multicast originals only, never to retransmissions.
//!
//! With a line B (`group_b`) every packet goes to both groups, as exchanges send two
//! redundant lines; each line drops originals with its own probability, drawn
//! independently, but never the same packet on both unless asked (`double_loss`): a
//! packet lost on both lines can only come back by re-request.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tickwire_capture::net::group_sender;
use tickwire_capture::{Schedule, Speed};
use tickwire_itch::{PacketBuilder, RetransmitRequest, Session};
use tickwire_rt::bucket::TokenBucket;
use tickwire_rt::{Latency, MonoNanos, Progress, StopFlag};

use crate::exchange::{Exchange, SessionData};

/// How to publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    pub group: SocketAddrV4,
    /// Line B: every packet (originals, heartbeats, End of Session) is also sent to this
    /// group, as exchanges send a redundant line.
    pub group_b: Option<SocketAddrV4>,
    /// Probability of dropping each original packet on line B, drawn independently of
    /// line A's. A packet drawn for dropping on both lines is still sent on line B
    /// (counted in `PublishReport::double_loss_avoided`) unless `double_loss` is set: a
    /// packet lost on both lines is recoverable only by re-request.
    pub loss_b: f64,
    pub double_loss: bool,
    /// Answer re-requests (false: no re-request server, for arbitration tests).
    pub serve_requests: bool,
    pub interface: Ipv4Addr,
    /// Where re-requests are received (unicast).
    pub request_listen: SocketAddrV4,
    pub session: Session,
    pub speed: Speed,
    /// Probability of dropping each original packet (0 = none).
    pub loss: f64,
    pub seed: u64,
    /// Rewrite each message's ITCH timestamp to its scheduled send time (time of day,
    /// UTC), so that exchange-to-feed-handler latency is measurable on one host.
    pub restamp: bool,
    /// Keep answering re-requests this long after the last message.
    pub linger: Duration,
    pub max_packet: usize,
    /// How long before a packet is due the publisher stops sleeping and spins (zero:
    /// never spins). See [`DEFAULT_SPIN_BEFORE`].
    pub spin_before: Duration,
    /// Where progress lines go (None: nowhere): one a second, then the final count. The
    /// library never prints; the binary passes a function that does.
    pub progress: Option<fn(&str)>,
}

/// The default of [`PublishOptions::spin_before`]: no spinning. Measured in `bench
/// md-replay` at 4x on a 2-core machine (BENCHMARKS.md, issue 19): sleeping to the due
/// time costs a few tens of µs of lateness per packet, spinning the last 150 µs (the
/// earlier behaviour) kept the exchange on its CPU nearly all the time at 4x (packets
/// every ~37 µs), starving the router and the clients that share it.
pub const DEFAULT_SPIN_BEFORE: Duration = Duration::ZERO;

/// Bytes a second of re-request answers at most (see the module docs): far above what
/// recovering a lossy line takes (the synthetic session's whole stream at its default
/// rate is under 1 MB/s), far below what a flood of forged requests would otherwise
/// reflect.
pub const ANSWER_RATE: u64 = 16 << 20;
/// Answer bytes that may go at once, out of a full budget.
pub const ANSWER_BURST: u64 = 1 << 20;

/// The longest single sleep of the publisher, so it serves re-requests and heartbeats
/// while it waits for a distant packet.
const MAX_SLEEP: Duration = Duration::from_millis(1);

/// What a publish run did.
#[derive(Debug, Clone)]
pub struct PublishReport {
    pub messages: u64,
    pub packets: u64,
    pub dropped_packets: u64,
    pub dropped_messages: u64,
    /// Line B's drops, and the packets drawn for dropping on both lines but sent on B.
    pub dropped_packets_b: u64,
    pub double_loss_avoided: u64,
    pub heartbeats: u64,
    pub requests: u64,
    pub bad_requests: u64,
    /// Requests answered (a packet sent back).
    pub requests_answered: u64,
    /// Requests not answered: the answer budget ([`ANSWER_RATE`]) was spent.
    pub requests_over_budget: u64,
    pub retransmitted_messages: u64,
    /// Bytes of the answers sent (what the budget bounds).
    pub retransmitted_bytes: u64,
    /// Datagrams (originals, retransmissions, heartbeats, End of Session) the socket
    /// refused to send.
    pub send_errors: u64,
    /// Why the first refused send failed (e.g. "Network is unreachable"), with its
    /// destination; `None` if every send succeeded.
    pub first_send_error: Option<String>,
    /// From the first to the last message.
    pub elapsed_ns: u64,
    /// Actual send minus scheduled time per packet (empty under `max`).
    pub lateness: Latency,
    pub stopped: bool,
}

impl PublishReport {
    /// Counts a refused send and keeps the reason of the first.
    fn send_failed(&mut self, e: &std::io::Error, to: SocketAddr) {
        self.send_errors += 1;
        if self.first_send_error.is_none() {
            self.first_send_error = Some(tickwire_capture::net::send_error_text(e, to));
        }
    }
}

/// Offset to add to CLOCK_MONOTONIC ns to get wall-clock ns (read once per run).
///
/// The exchange stamps with it and the measuring clients convert back with their own
/// reading, so an error in either shows up as exchange→FH latency: each reading
/// brackets the wall clock between two monotonic reads and keeps the tightest of 16
/// (a thread preempted between the reads would otherwise skew it by the preemption).
pub fn monotonic_to_time_of_day() -> i128 {
    let mut best: Option<(u64, i128)> = None;
    for _ in 0..16 {
        let before = MonoNanos::now().as_nanos();
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        let after = MonoNanos::now().as_nanos();
        let width = after.saturating_sub(before);
        let offset = real - (before as i128 + after as i128) / 2;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, offset));
        }
    }
    best.map_or(0, |(_, offset)| offset)
}

/// ns since midnight UTC for a CLOCK_MONOTONIC instant, given the offset above.
pub fn time_of_day(mono_ns: u64, offset: i128) -> u64 {
    ((mono_ns as i128 + offset).rem_euclid(86_400_000_000_000)) as u64
}

/// Publishes `data` (consumed: restamping rewrites it) until the end or `stop`.
pub fn publish(
    mut data: SessionData,
    opts: &PublishOptions,
    stop: &StopFlag,
) -> anyhow::Result<PublishReport> {
    let mut answer_buf = PacketBuilder::new(opts.session, 1, opts.max_packet);
    // A message no packet can carry was skipped while sending, and the rest went out
    // renumbered, exit status 0 (hostile-input pass): refused before anything is sent.
    if let Some((seq, len)) = data.longest() {
        let max = answer_buf.max_message_len();
        if len > max {
            anyhow::bail!(
                "message {seq} of the session is {len} bytes: a packet of --max-packet {} \
                 bytes carries messages of at most {max} (ITCH 5.0 messages are at most \
                 {} bytes: is this an ITCH session file?)",
                opts.max_packet,
                tickwire_itch::MAX_MESSAGE_LEN
            );
        }
    }
    let sock = group_sender(opts.interface)?;
    // The OS error stays the cause (not only its text), so the caller can tell a port
    // in use from other failures.
    let req_sock = UdpSocket::bind(opts.request_listen)
        .with_context(|| format!("cannot listen for re-requests on {}", opts.request_listen))?;
    req_sock.set_nonblocking(true)?;
    let mut ex = Exchange::new(opts.session, opts.max_packet);
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut r = PublishReport {
        messages: 0,
        packets: 0,
        dropped_packets: 0,
        dropped_messages: 0,
        dropped_packets_b: 0,
        double_loss_avoided: 0,
        heartbeats: 0,
        requests: 0,
        bad_requests: 0,
        requests_answered: 0,
        requests_over_budget: 0,
        retransmitted_bytes: 0,
        retransmitted_messages: 0,
        send_errors: 0,
        first_send_error: None,
        elapsed_ns: 0,
        lateness: Latency::new(),
        stopped: false,
    };
    let first_ts = data.timestamp(1).unwrap_or(0);
    let tod = monotonic_to_time_of_day();
    let start = MonoNanos::now().as_nanos();
    let schedule = Schedule::new(opts.speed, start, first_ts);
    let mut last_send = start;
    let mut progress = opts.progress.map(Progress::new);
    let dst = SocketAddr::V4(opts.group);
    let dst_b = opts.group_b.map(SocketAddr::V4);
    // Heartbeats and End of Session go to both lines, never dropped.
    let send_both = |p: &[u8], r: &mut PublishReport| -> bool {
        let mut ok = true;
        for to in std::iter::once(dst).chain(dst_b) {
            if let Err(e) = sock.send_to(p, to) {
                r.send_failed(&e, to);
                ok = false;
            }
        }
        ok
    };
    let mut req_buf = [0u8; 64];
    // A sleep ends up to the timer slack late (50 µs by default): 1 µs while publishing.
    let slack = rustix::thread::current_timer_slack().ok();
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1_000));
    let spin_before = opts.spin_before.as_nanos() as u64;

    let mut answer_budget = TokenBucket::full(ANSWER_RATE, ANSWER_BURST, MonoNanos::now());
    let mut serve_requests = |ex: &Exchange, data: &SessionData, r: &mut PublishReport| {
        while let Ok((n, from)) = req_sock.recv_from(&mut req_buf) {
            let Ok(req) = RetransmitRequest::decode(&req_buf[..n]) else {
                r.bad_requests += 1;
                continue;
            };
            r.requests += 1;
            if !opts.serve_requests {
                continue; // read and ignored: no re-request server
            }
            if let Some(p) = ex.answer(data, &req, &mut answer_buf) {
                if !answer_budget.try_take(MonoNanos::now(), p.len() as u64) {
                    r.requests_over_budget += 1;
                    continue;
                }
                let count = u64::from(u16::from_be_bytes([p[18], p[19]]));
                match sock.send_to(p, from) {
                    Ok(n) => {
                        r.requests_answered += 1;
                        r.retransmitted_messages += count;
                        r.retransmitted_bytes += n as u64;
                    }
                    Err(e) => r.send_failed(&e, from),
                }
            }
        }
    };

    while !ex.done(&data) {
        let seq = ex.next_sequence();
        if let Some(due) = schedule.due(seq - 1, data.timestamp(seq).unwrap_or(first_ts)) {
            loop {
                let now = MonoNanos::now().as_nanos();
                if now >= due {
                    r.lateness.record(now - due);
                    break;
                }
                serve_requests(&ex, &data, &mut r);
                if now - last_send >= 1_000_000_000 {
                    if send_both(&ex.heartbeat(), &mut r) {
                        r.heartbeats += 1;
                    }
                    last_send = now;
                }
                if stop.is_set() {
                    r.stopped = true;
                    break;
                }
                // Sleep while further than `spin_before` from due (other threads on a
                // small machine need the core), spin the last stretch.
                let left = due - now;
                if left > spin_before {
                    let nap = Duration::from_nanos(left - spin_before).min(MAX_SLEEP);
                    std::thread::sleep(nap);
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        if r.stopped || (seq % 1024 == 0 && stop.is_set()) {
            r.stopped = true;
            break;
        }
        // Which messages go in this packet: `seq` and those after it already due.
        let now = MonoNanos::now().as_nanos();
        let mut limit = seq + 1;
        while limit < seq + 256 && limit <= data.len() {
            let due = schedule.due(limit - 1, data.timestamp(limit).unwrap_or(first_ts));
            if due.is_some_and(|d| d > now) {
                break;
            }
            limit += 1;
        }
        let packet = if opts.restamp {
            ex.next_packet_restamped(
                &mut data,
                |s| s < limit,
                |s, recorded| {
                    let due = schedule.due(s - 1, recorded).unwrap_or(now);
                    time_of_day(due, tod)
                },
            )
        } else {
            ex.next_packet(&data, |s| s < limit)
        };
        let Some(p) = packet else {
            break;
        };
        let count = u64::from(u16::from_be_bytes([p[18], p[19]]));
        r.messages += count;
        // Both draws every packet, so line A's pattern does not depend on line B.
        let drop_a = opts.loss > 0.0 && rng.gen_bool(opts.loss.min(1.0));
        let mut drop_b = opts.loss_b > 0.0 && rng.gen_bool(opts.loss_b.min(1.0));
        if drop_a && drop_b && !opts.double_loss {
            drop_b = false;
            r.double_loss_avoided += 1;
        }
        if drop_a {
            r.dropped_packets += 1;
            r.dropped_messages += count;
        } else {
            match sock.send_to(p, dst) {
                Ok(_) => r.packets += 1,
                Err(e) => r.send_failed(&e, dst),
            }
        }
        if let Some(to) = dst_b {
            if drop_b {
                r.dropped_packets_b += 1;
            } else if let Err(e) = sock.send_to(p, to) {
                r.send_failed(&e, to);
            }
        }
        last_send = MonoNanos::now().as_nanos();
        serve_requests(&ex, &data, &mut r);
        if let Some(progress) = progress.as_mut().filter(|_| r.packets % 64 == 0) {
            progress.tick(|| {
                format!(
                    "publish: {} / {} messages, {} re-requests {}",
                    r.messages,
                    data.len(),
                    if opts.serve_requests {
                        r.requests_answered
                    } else {
                        r.requests
                    },
                    answered(opts.serve_requests)
                )
            });
        }
    }
    r.elapsed_ns = MonoNanos::now().as_nanos() - start;
    if let Some(sink) = opts.progress {
        // The last per-second line stops short of the total; end on the final count.
        // "sent" only when the socket took every datagram: a refused send is not sent.
        let refused = match r.send_errors {
            0 => String::new(),
            n => format!(" ({n} datagrams refused by the socket)"),
        };
        sink(&format!(
            "publish: {} / {} messages {}{refused}, {} re-requests {} so far",
            r.messages,
            data.len(),
            if r.send_errors == 0 {
                "sent"
            } else {
                "scheduled"
            },
            if opts.serve_requests {
                r.requests_answered
            } else {
                r.requests
            },
            answered(opts.serve_requests)
        ));
    }

    // Linger: heartbeats once per second (the first at once) and re-requests.
    let linger_end = MonoNanos::now().as_nanos() + opts.linger.as_nanos() as u64;
    let mut next_hb = MonoNanos::now().as_nanos();
    while MonoNanos::now().as_nanos() < linger_end && !stop.is_set() {
        if MonoNanos::now().as_nanos() >= next_hb {
            if send_both(&ex.heartbeat(), &mut r) {
                r.heartbeats += 1;
            }
            next_hb += 1_000_000_000;
        }
        serve_requests(&ex, &data, &mut r);
        std::thread::sleep(Duration::from_micros(200));
    }
    for _ in 0..3 {
        send_both(&ex.end_of_session(), &mut r);
    }
    if let Some(v) = slack {
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(v));
    }
    Ok(r)
}

/// What the progress lines say of re-requests: answered, or only read
/// (`--no-retransmit`).
fn answered(serving: bool) -> &'static str {
    if serving {
        "answered"
    } else {
        "received, none answered (--no-retransmit)"
    }
}
