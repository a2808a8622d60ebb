//! A minimal guaranteed-messaging driver over `tickwire_wire` and std `TcpStream`s:
//! a publisher (writer thread + ACK reader thread per connection) and a consumer
//! (one thread: read a batch of DELIVERs, acknowledge it as ranges of message ids).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tickwire_rt::MonoNanos;
use tickwire_wire::frame::{self, flags, Frame, PublishOptions, DEFAULT_MAX_FRAME};
use tickwire_wire::gm::{self, QueueOp, Start};

use super::{
    since_start, write_header, ConsResult, Plan, PubResult, Shared, DRAIN, START_DELAY_NS,
};

/// The queue every consumer binds to.
pub const QUEUE: &str = "gbench";
/// Topic prefix the queue subscribes to.
const TOPIC_PREFIX: &str = "bench/p";
/// A publisher writes at most this many bytes at once when behind schedule.
const BATCH_BYTES: usize = 64 * 1024;

/// What the tickwire side adds to the report.
pub type Extra = serde_json::Value;

/// A connection with a read buffer: blocking reads of whole frames.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Conn {
    fn connect(addr: SocketAddr, name: &str) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let mut c = Conn {
            stream,
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
        };
        let mut out = Vec::new();
        frame::encode_hello(&mut out, frame::PROTOCOL_VERSION, name);
        c.stream.write_all(&out)?;
        c.expect("WELCOME", |f| {
            matches!(f, Frame::Welcome { .. }).then_some(())
        })?;
        Ok(c)
    }

    /// Reads until one complete frame is buffered, then hands it to `f`.
    /// Ok(None) on a read timeout.
    fn next<T>(&mut self, f: impl FnOnce(Frame<'_>) -> T) -> anyhow::Result<Option<T>> {
        loop {
            if let Some((fr, n)) = frame::decode(&self.buf[self.start..self.end], DEFAULT_MAX_FRAME)
                .map_err(|e| anyhow::anyhow!("malformed frame from the router: {e}"))?
            {
                let out = f(fr);
                self.start += n;
                return Ok(Some(out));
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => bail!("the router closed the connection"),
                Ok(n) => self.end += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the router"),
            }
        }
    }

    /// True when a complete frame is already buffered (no read needed).
    fn has_frame(&self) -> bool {
        matches!(
            frame::frame_len(&self.buf[self.start..self.end], DEFAULT_MAX_FRAME),
            Ok(Some(n)) if n <= self.end - self.start
        )
    }

    /// The next frame must be what `f` accepts (an ERROR or anything else fails).
    fn expect<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&Frame<'_>) -> Option<T>,
    ) -> anyhow::Result<T> {
        let r = self.next(|fr| match f(&fr) {
            Some(v) => Ok(v),
            None => Err(format!("{fr:?}")),
        })?;
        match r {
            Some(Ok(v)) => Ok(v),
            Some(Err(other)) => bail!("expected {what} from the router, got {other}"),
            None => bail!("no {what} from the router in time"),
        }
    }
}

/// Creates the queue (an existing one of that name is reused).
fn create_queue(addr: SocketAddr) -> anyhow::Result<()> {
    let mut c = Conn::connect(addr, "gbench-admin")?;
    c.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let def = format!(r#"{{"name":"{QUEUE}","subscriptions":["bench/>"]}}"#);
    let mut out = Vec::new();
    gm::encode_queue_request(&mut out, 1, QueueOp::Create, &def);
    c.stream.write_all(&out)?;
    c.expect("QUEUE_REPLY", |f| match f {
        Frame::QueueReply { .. } => Some(()),
        Frame::Error { code, .. } if *code == frame::ErrorCode::QUEUE_EXISTS => Some(()),
        _ => None,
    })
    .context("creating the queue (is guaranteed messaging on? the router needs a data directory)")
}

/// Runs the whole workload against the router at `addr`.
pub fn run(
    addr: SocketAddr,
    plan: &mut Plan,
    shared: &Arc<Shared>,
) -> anyhow::Result<(Vec<PubResult>, Vec<ConsResult>, Extra)> {
    if plan.consumers > 0 {
        create_queue(addr)?;
    }
    let run_id = format!("{}-{}", std::process::id(), MonoNanos::now().as_nanos());
    // Consumers first, so nothing waits in the queue before they are bound.
    let mut cons = Vec::new();
    for c in 0..plan.consumers {
        let mut conn = Conn::connect(addr, &format!("gbench-consumer-{c}"))?;
        conn.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut out = Vec::new();
        gm::encode_bind(&mut out, 1, plan.consumer_window, Start::Queue, QUEUE);
        conn.stream.write_all(&out)?;
        let binding = conn.expect("BOUND", |f| match f {
            Frame::Bound { binding, .. } => Some(*binding),
            _ => None,
        })?;
        conn.stream
            .set_read_timeout(Some(Duration::from_millis(50)))?;
        cons.push((conn, binding));
    }
    let mut pubs = Vec::new();
    for p in 0..plan.publishers {
        let mut conn = Conn::connect(addr, &format!("gbench-pub-{p}"))?;
        conn.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut out = Vec::new();
        gm::encode_pub_open(&mut out, 1, 0, &format!("gbench-{run_id}-{p}"));
        conn.stream.write_all(&out)?;
        let (window, last_seq) = conn.expect("PUB_OPENED", |f| match f {
            Frame::PubOpened {
                window, last_seq, ..
            } => Some((*window, *last_seq)),
            _ => None,
        })?;
        conn.stream
            .set_read_timeout(Some(Duration::from_millis(50)))?;
        pubs.push((conn, window, last_seq));
    }

    plan.start_ns = MonoNanos::now().as_nanos() + START_DELAY_NS;
    let plan: &Plan = plan;
    std::thread::scope(|s| {
        let cons_h: Vec<_> = cons
            .into_iter()
            .enumerate()
            .map(|(c, (conn, binding))| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("gm-cons-{c}"))
                    .spawn_scoped(s, move || consume(conn, binding, plan, &shared))
            })
            .collect::<Result<_, _>>()?;
        let pub_h: Vec<_> = pubs
            .into_iter()
            .enumerate()
            .map(|(p, (conn, window, last_seq))| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("gm-pub-{p}"))
                    .spawn_scoped(s, move || publish(conn, p, window, last_seq, plan, &shared))
            })
            .collect::<Result<_, _>>()?;
        let (pubs, cons) = super::finish(shared, plan, pub_h, cons_h)?;
        let stats = tickwire_client::Client::connect(addr)
            .and_then(|mut c| c.stats_json())
            .ok()
            .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
            .unwrap_or(serde_json::Value::Null);
        Ok((pubs, cons, serde_json::json!({ "router_stats": stats })))
    })
}

/// Intended send times (ns from time 0) of one publisher's messages, shared with its
/// ACK reader; `u64::MAX` until sent.
struct Sent {
    intended: Vec<AtomicU64>,
    /// Messages resolved (ACKed or NACKed), for the window.
    resolved: AtomicU64,
}

fn publish(
    conn: Conn,
    p: usize,
    window: u32,
    last_seq: u64,
    plan: &Plan,
    shared: &Shared,
) -> PubResult {
    let n_msgs = plan.per_publisher[p] as usize;
    let sent = Arc::new(Sent {
        intended: (0..n_msgs).map(|_| AtomicU64::new(u64::MAX)).collect(),
        resolved: AtomicU64::new(0),
    });
    let result = Arc::new(Mutex::new(PubResult::new(plan, p, window)));
    if let Ok(mut r) = result.lock() {
        r.state = vec![0; n_msgs];
    }
    let mut stream = match conn.stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            let mut r = PubResult::new(plan, p, window);
            r.error = Some(format!("cloning the socket: {e}"));
            return r;
        }
    };
    let base = last_seq + 1; // seq of message 0
    let reader_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|s| {
        let reader = {
            let (sent, result, reader_done) = (sent.clone(), result.clone(), reader_done.clone());
            s.spawn(move || read_acks(conn, base, plan, shared, &sent, &result, &reader_done))
        };
        let mut err = None;
        let mut out = Vec::with_capacity(BATCH_BYTES + 4096);
        let mut payload = vec![0u8; plan.mix.max_size()];
        let topic = format!("{TOPIC_PREFIX}{p}");
        let mut lateness = tickwire_rt::latency::Latency::new();
        let (mut n, mut n_measured, mut last_send) = (0u64, 0u64, 0u64);
        for slot in plan.slots_of(p) {
            if shared.stopped() || reader_done.load(Ordering::Acquire) || plan.past_cutoff() {
                break;
            }
            // Wait for the slot: sleep while far, then yield (2 shared cores).
            let due = plan.start_ns + slot.at_ns;
            let mut now = MonoNanos::now().as_nanos();
            if now < due && !out.is_empty() {
                if let Err(e) = stream.write_all(&out) {
                    err = Some(format!("writing to the router: {e}"));
                    break;
                }
                out.clear();
            }
            while now < due {
                if due - now > 200_000 {
                    std::thread::sleep(Duration::from_nanos(due - now - 200_000));
                } else {
                    std::thread::yield_now();
                }
                now = MonoNanos::now().as_nanos();
            }
            // The window: unresolved publishes (and the ones still in `out`).
            while n - sent.resolved.load(Ordering::Acquire) >= u64::from(window) {
                if !out.is_empty() {
                    if let Err(e) = stream.write_all(&out) {
                        err = Some(format!("writing to the router: {e}"));
                        break;
                    }
                    out.clear();
                }
                if reader_done.load(Ordering::Acquire) || shared.stopped() || plan.past_cutoff() {
                    break;
                }
                std::thread::yield_now();
            }
            if err.is_some() {
                break;
            }
            if plan.past_cutoff() || shared.stopped() {
                break;
            }
            let size = plan.mix.size_at(slot.index);
            write_header(&mut payload[..size], p as u32, n, slot.at_ns);
            let at = out.len();
            let opts = PublishOptions {
                seq: Some(base + n),
                publisher_send: None,
            };
            if let Err(e) =
                frame::encode_publish(&mut out, &topic, &payload[..size], opts, DEFAULT_MAX_FRAME)
            {
                err = Some(format!("encoding: {e}"));
                break;
            }
            out[at + 5] |= flags::GUARANTEED;
            sent.intended[n as usize].store(slot.at_ns, Ordering::Release);
            let now_rel = MonoNanos::now().as_nanos().saturating_sub(plan.start_ns);
            if !slot.warmup {
                lateness.record(now_rel.saturating_sub(slot.at_ns));
                n_measured += 1;
            }
            last_send = now_rel;
            n += 1;
            shared.sent.fetch_add(1, Ordering::Relaxed);
            if out.len() >= BATCH_BYTES {
                if let Err(e) = stream.write_all(&out) {
                    err = Some(format!("writing to the router: {e}"));
                    break;
                }
                out.clear();
            }
        }
        if err.is_none() && !out.is_empty() {
            if let Err(e) = stream.write_all(&out) {
                err = Some(format!("writing to the router: {e}"));
            }
        }
        // Wait for the outstanding ACKs.
        let deadline = Instant::now() + DRAIN;
        while sent.resolved.load(Ordering::Acquire) < n
            && Instant::now() < deadline
            && !reader_done.load(Ordering::Acquire)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        reader_done.store(true, Ordering::Release);
        let reader_err = reader.join().ok().flatten();
        let mut r = match result.lock() {
            Ok(mut g) => std::mem::replace(&mut *g, PubResult::new(plan, p, window)),
            Err(_) => PubResult::new(plan, p, window),
        };
        r.state.truncate(n as usize);
        r.sent = n;
        r.sent_measured = n_measured;
        r.last_send_ns = last_send;
        r.lateness = lateness;
        r.error = err.or(reader_err);
        r
    })
}

/// The ACK reader of one publisher: PUB_ACK ranges and PUB_NACKs until `done`.
/// Returns an error text if the connection failed.
fn read_acks(
    mut conn: Conn,
    base: u64,
    plan: &Plan,
    shared: &Shared,
    sent: &Sent,
    result: &Mutex<PubResult>,
    done: &std::sync::atomic::AtomicBool,
) -> Option<String> {
    enum Got {
        Ack(u64, u64),
        Nack(u64, String),
        Error(String),
        Other,
    }
    let warmup = plan.schedule.warmup_ns;
    while !done.load(Ordering::Acquire) {
        let got = match conn.next(|f| match f {
            Frame::PubAck { first, last } => Got::Ack(first, last),
            Frame::PubNack { seq, reason, .. } => Got::Nack(seq, reason.name().to_string()),
            Frame::Error {
                code, text, fatal, ..
            } => Got::Error(format!(
                "{} ({text}){}",
                code.name(),
                if fatal { ", fatal" } else { "" }
            )),
            Frame::Close { code, reason } => {
                Got::Error(format!("CLOSE {} ({reason})", code.name()))
            }
            _ => Got::Other,
        }) {
            Ok(Some(g)) => g,
            Ok(None) => continue,
            Err(e) => {
                done.store(true, Ordering::Release);
                return Some(format!("{e:#}"));
            }
        };
        let now = since_start(plan.start_ns);
        let Ok(mut r) = result.lock() else {
            return Some("poisoned".into());
        };
        match got {
            Got::Ack(first, last) => {
                let (lo, hi) = (first.max(base) - base, last.saturating_sub(base));
                let mut k = 0;
                for n in lo..=hi {
                    let intended = sent
                        .intended
                        .get(n as usize)
                        .map_or(u64::MAX, |a| a.load(Ordering::Acquire));
                    if intended != u64::MAX {
                        r.on_ack(n, intended, now, warmup);
                        k += 1;
                    }
                }
                sent.resolved.fetch_add(k, Ordering::AcqRel);
                shared.acked.fetch_add(k, Ordering::Relaxed);
            }
            Got::Nack(seq, reason) => {
                if seq >= base {
                    r.on_nack(seq - base, reason);
                    sent.resolved.fetch_add(1, Ordering::AcqRel);
                }
            }
            Got::Error(text) => {
                *r.nacks.entry(format!("ERROR {text}")).or_default() += 1;
            }
            Got::Other => {}
        }
    }
    None
}

fn consume(mut conn: Conn, binding: u32, plan: &Plan, shared: &Shared) -> ConsResult {
    let mut r = ConsResult::new(plan);
    let mut acks = Vec::with_capacity(4096);
    // The current run of consecutive message ids to acknowledge: (first, last).
    let mut run: Option<(u64, u64)> = None;
    let mut drained_since: Option<Instant> = None;
    loop {
        if shared.consumers_stop.load(Ordering::Acquire) {
            break;
        }
        let got = conn.next(|f| match f {
            Frame::Deliver(d) => {
                let now = since_start(plan.start_ns);
                let first = r.on_delivery(plan, d.payload, d.redelivered, now);
                Ok(Some((d.msg_id, first)))
            }
            Frame::Error { code, text, .. } => Err(format!("{} ({text})", code.name())),
            Frame::Close { code, reason } => Err(format!("CLOSE {} ({reason})", code.name())),
            _ => Ok(None),
        });
        match got {
            Ok(Some(Ok(Some((id, first))))) => {
                if first {
                    shared.delivered.fetch_add(1, Ordering::Relaxed);
                }
                run = match run {
                    Some((a, b)) if id == b + 1 => Some((a, id)),
                    Some((a, b)) => {
                        gm::encode_consumer_ack(&mut acks, binding, a, b);
                        Some((id, id))
                    }
                    None => Some((id, id)),
                };
            }
            Ok(Some(Ok(None))) => {}
            Ok(Some(Err(e))) => {
                r.error = Some(e);
                break;
            }
            Ok(None) => {
                if shared.publishers_done.load(Ordering::Acquire) {
                    drained_since.get_or_insert_with(Instant::now);
                }
            }
            Err(e) => {
                r.error = Some(format!("{e:#}"));
                break;
            }
        }
        // End of a read batch: acknowledge it.
        if !conn.has_frame() {
            if let Some((a, b)) = run.take() {
                gm::encode_consumer_ack(&mut acks, binding, a, b);
            }
            if !acks.is_empty() {
                if let Err(e) = conn.stream.write_all(&acks) {
                    r.error = Some(format!("writing acks: {e}"));
                    break;
                }
                acks.clear();
            }
        }
    }
    r
}
