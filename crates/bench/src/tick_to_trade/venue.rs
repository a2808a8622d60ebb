//! The venue simulator: one thread, two FIX sessions, open loop.
//!
//! It connects both sessions to the algo (orders first, then market data), logs on
//! with tickwire-fix's session core (which also answers test requests and sends
//! heartbeats), then busy-polls one loop:
//!
//! ```text
//! now = clock (once per turn)
//! send every X whose intended time has come (at most 64 per turn): encoded by the
//!     market-data session into its write buffer; lateness = now - intended
//! one write() of the market-data buffer (non-blocking: what the kernel refuses stays
//!     buffered, the simulator never waits for the algo)
//! read the order session (non-blocking): frame, session checks, for each 35=D:
//!     correlation id (11) -> phase and intended time -> latency = receive time - intended
//! read the market-data session (the algo's heartbeats, test requests)
//! every ms: session timers
//! ```
//!
//! Latency is measured from the intended send time ([`Timeline::intended_ns`]), so a
//! late simulator counts against the result (no coordinated omission); its lateness is
//! kept apart. The algo's CPU time is sampled at each phase boundary by the caller's
//! probe. Correctness counters come from [`SeqTracker`] over the correlation ids.
//!
//! # Why this is not the tickwire FIX engine (`tickwire-fix-engine`)
//!
//! It uses the same session core (`tickwire_fix::session::Session`), but drives it
//! itself instead of through `Engine`, for reasons the measurement depends on:
//!
//! * **Open-loop sending on the measuring thread.** Each 35=X must leave at its intended
//!   time, stamped from the same clock read that decides it is due, and the receive
//!   stamp of each 35=D must be taken right after its `read`. The engine owns its loop
//!   (`Engine::turn`: wait, read, timers, drain, write) and hands messages to callbacks
//!   after framing and the session's checks: the stamps would include the engine's own
//!   work for other connections, and sending from outside the loop goes through
//!   `Handle` (a queue and a waker: an allocation and a wake-up per message, i.e.
//!   measuring the queue) or `Engine::with_ctx` between turns (sends wait for the next
//!   turn's write).
//! * **Never blocking, never sleeping.** The simulator must keep its schedule while the
//!   algo is slow: it busy-polls both sockets with non-blocking reads and keeps what the
//!   kernel refuses in its write buffer. The engine's `spin` idle strategy would do the
//!   polling, but its write path closes a connection on a hard error and lingers on
//!   close, which would end a run that is meant to count what the algo missed.
//! * **Two identities, one thread, and the time source.** The venue maps its monotonic
//!   loop clock to the wall clock once (`Clock::wall`) so SendingTime and the latency
//!   stamps agree; the engine reads `UtcNanos::now()` per turn and has no hook for a
//!   caller-supplied clock.
//!
//! What it shares with the engine: the session core (logon, heartbeats, test requests,
//! sequence numbers, checks) and `codec::frame_len`. The algo side (`algo.rs`) is the
//! engine.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tickwire_rt::{MonoNanos, UtcNanos};

use anyhow::{bail, Context};
use serde::Serialize;
use tickwire_fix::codec::frame_len;
use tickwire_fix::session::{Event, Output, Role, Session, SessionConfig};
use tickwire_fix::store::MemoryStore;

use super::plan::Timeline;
use super::protocol::{self, ALGO_MD, ALGO_OE, BEGIN_STRING, VENUE_MD, VENUE_OE};
use super::target::CpuTime;
use crate::harness::{self, StopFlag};
use crate::stats::{Counters, Latency, SeqTracker};

const NS_PER_SEC: u64 = 1_000_000_000;
/// Read buffer per session; a message larger than this closes the run.
const READ_BUF: usize = 256 << 10;
/// Longest FIX message accepted from the algo.
const MAX_MESSAGE: usize = 64 << 10;
/// X messages encoded per loop turn at most (then the socket is read again).
const MAX_SEND_PER_TURN: usize = 64;
/// The algo is not reading: the run stops once this much market data is waiting.
const MAX_BACKLOG: usize = 256 << 20;
/// How often the session timers are checked.
const TIMER_CHECK_NS: u64 = 1_000_000;

/// What the simulator needs to know.
#[derive(Debug, Clone)]
pub struct VenueOptions {
    /// The algo's acceptor (both sessions).
    pub addr: SocketAddr,
    /// HeartBtInt sent in both Logons, seconds.
    pub heart_bt_int: u32,
    /// After the last X: wait this long at most for the missing orders.
    pub drain: Duration,
    /// How long the connections and Logons may take.
    pub logon_timeout: Duration,
    /// Name of the algo, for the progress line.
    pub label: String,
    /// Where the progress lines go (the caller's sink).
    pub progress: fn(&str),
    /// Pin the simulator's thread to this CPU.
    pub cpu: Option<usize>,
}

/// Measurements of one phase.
#[derive(Debug, Clone)]
pub struct PhaseMeasure {
    /// X intended send time → D receive time (unique orders only).
    pub latency: Latency,
    /// X actual encode/send time − intended time.
    pub lateness: Latency,
    /// X sent in this phase.
    pub sent: u64,
    /// D received for this phase's correlation ids (duplicates included).
    pub received: u64,
    /// Orders repeating the correlation id answered just before.
    pub duplicates: u64,
    /// Orders arriving after a later one (late or older repeats).
    pub out_of_order: u64,
    /// Orders for this phase's X received while the phase was running (by receive
    /// time): the rate the algo achieved. Orders for earlier X (a backlog drained
    /// during the phase) are not counted: a saturated algo answering the warm-up's
    /// backlog looked as if it kept up with the step (bench-review pass).
    pub in_window: u64,
    /// The algo's CPU time during the phase's window, ns (None: no probe).
    pub cpu: Option<CpuTime>,
}

impl PhaseMeasure {
    fn new() -> PhaseMeasure {
        PhaseMeasure {
            latency: Latency::new(),
            lateness: Latency::new(),
            sent: 0,
            received: 0,
            duplicates: 0,
            out_of_order: 0,
            in_window: 0,
            cpu: None,
        }
    }

    /// X never answered: sent minus unique orders received.
    pub fn missing(&self) -> u64 {
        self.sent
            .saturating_sub(self.received.saturating_sub(self.duplicates))
    }
}

/// Latency of the orders received during one second of the run.
#[derive(Debug, Clone, Serialize)]
pub struct TimePoint {
    /// Seconds since the start of the run (warm-up included).
    pub t_s: f64,
    /// Orders received in that second.
    pub orders: u64,
    /// p50 of their latency, µs.
    pub p50_us: f64,
    /// p99, µs.
    pub p99_us: f64,
    /// max, µs.
    pub max_us: f64,
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct VenueRun {
    /// One per phase of the timeline (warm-up included).
    pub phases: Vec<PhaseMeasure>,
    /// Per-second latency of the measured phases.
    pub timeline: Vec<TimePoint>,
    /// All correlation ids together (warm-up included), `sent` filled in.
    pub counters: Counters,
    /// Orders without a correlation id this run sent.
    pub unexpected: u64,
    /// Largest market-data backlog waiting for the algo to read, bytes.
    pub backlog_max: usize,
    /// When sending ended, ns from the start of the run (the schedule's end unless
    /// the run ended early).
    pub sent_until_ns: u64,
    /// Ctrl-C stopped the run.
    pub stopped: bool,
    /// Why the run ended before its schedule did (connection lost, ...).
    pub ended_early: Option<String>,
    /// Session events worth reporting (at most a few dozen).
    pub notes: Vec<String>,
}

/// Runs the whole timeline against the algo at `opts.addr`. `cpu` returns the algo's
/// CPU time so far in ns (None when unknown); it is called at every phase boundary.
pub fn run(
    opts: &VenueOptions,
    tl: &Timeline,
    stop: &StopFlag,
    cpu: &mut dyn FnMut() -> Option<CpuTime>,
) -> anyhow::Result<VenueRun> {
    if let Some(c) = opts.cpu {
        harness::pin_current_thread(c);
    }
    let clock = Clock::new();
    let mut oe = Conn::connect(opts, VENUE_OE, ALGO_OE)?;
    let mut md = Conn::connect(opts, VENUE_MD, ALGO_MD)?;
    let mut rec = Recorder::new(tl);
    let mut notes = Vec::new();

    // Logon: the order session first, as a trading system would.
    let deadline = Instant::now() + opts.logon_timeout;
    oe.session
        .handle_connected(UtcNanos(clock.wall(MonoNanos::now().as_nanos())));
    oe.pump(&mut rec);
    md.session
        .handle_connected(UtcNanos(clock.wall(MonoNanos::now().as_nanos())));
    md.pump(&mut rec);
    while !(oe.logged_on && md.logged_on) {
        let wall = clock.wall(MonoNanos::now().as_nanos());
        for c in [&mut oe, &mut md] {
            c.flush();
            c.read(wall, &mut rec);
            c.timers(wall, &mut rec);
            if !c.open {
                bail!(
                    "{}: the algo closed the {} session during logon{}",
                    opts.addr,
                    c.name,
                    c.notes_suffix()
                );
            }
        }
        if stop.is_set() {
            bail!("stopped during logon");
        }
        if Instant::now() > deadline {
            bail!(
                "{}: no Logon answer on {} within {:?}{}",
                opts.addr,
                if oe.logged_on {
                    "market data"
                } else {
                    "orders"
                },
                opts.logon_timeout,
                oe.notes_suffix()
            );
        }
        std::hint::spin_loop();
    }

    let n_phases = tl.phases.len();
    let total = tl.total();
    let end_ns = tl.end_ns();
    let mut cpu_at: Vec<Option<CpuTime>> = vec![None; n_phases + 1];
    cpu_at[0] = cpu();
    let start = MonoNanos::now().as_nanos();
    rec.start = start;
    let mut time_phase = 0usize;
    let mut next = 0u64;
    let mut send_hint = 0usize;
    let mut next_timer = 0u64;
    let mut backlog_max = 0usize;
    let mut ended_early = None;
    let mut stopped = false;
    let mut drain_until: Option<u64> = None;
    let mut logged_out_at: Option<u64> = None;
    let mut sent_until_ns = end_ns;

    loop {
        let now = MonoNanos::now().as_nanos();
        let rel = now - start;
        let wall = clock.wall(now);
        rec.recv_rel = rel;

        // Phase boundaries by time: the algo's CPU, the phase the orders count for.
        while time_phase < n_phases
            && rel >= tl.start_ns[time_phase] + tl.phases[time_phase].duration_ns
        {
            time_phase += 1;
            cpu_at[time_phase] = cpu();
        }
        rec.time_phase = (time_phase < n_phases).then_some(time_phase);
        // A progress line is due exactly when a second has closed, so every line
        // carries the figures of a second it has not shown before. (A timer of its own
        // fired a few µs before the roll as often as not and showed the previous
        // second's figures again.)
        let closed = rec.roll_second(rel);

        // Send what is due.
        let mut burst = 0;
        while next < total && burst < MAX_SEND_PER_TURN && drain_until.is_none() {
            let Some(k) = tl.phase_of(next, send_hint) else {
                break;
            };
            send_hint = k;
            let due = tl.intended_ns(k, next);
            if due > rel {
                break;
            }
            let index = next;
            // The clock again for every X after the first of the turn: encoding takes
            // time, and lateness is when each X is handed to the session.
            let sent_rel = if burst == 0 {
                rel
            } else {
                MonoNanos::now().as_nanos() - start
            };
            if let Err(e) = md.session.send_app_with(UtcNanos(wall), b"X", |enc| {
                protocol::write_x_body(enc, index)
            }) {
                ended_early = Some(format!("sending market data: {e}"));
                break;
            }
            md.pump(&mut rec);
            if !tl.phases[k].warmup {
                rec.phases[k].lateness.record(sent_rel.saturating_sub(due));
            }
            rec.phases[k].sent += 1;
            rec.sent_total += 1;
            next += 1;
            burst += 1;
        }
        md.flush();
        let backlog = md.wbuf.len() - md.wpos;
        backlog_max = backlog_max.max(backlog);

        oe.read(wall, &mut rec);
        md.read(wall, &mut rec);
        if rel >= next_timer {
            next_timer = rel + TIMER_CHECK_NS;
            oe.timers(wall, &mut rec);
            md.timers(wall, &mut rec);
        }
        oe.flush();

        if ended_early.is_none() && logged_out_at.is_none() {
            if backlog > MAX_BACKLOG {
                ended_early = Some(format!(
                    "the algo stopped reading market data ({} MiB waiting)",
                    backlog >> 20
                ));
            }
            for c in [&oe, &md] {
                if !c.open || !c.session.is_logged_on() {
                    ended_early = Some(format!(
                        "the algo ended the {} session{}",
                        c.name,
                        c.notes_suffix()
                    ));
                }
            }
        }
        if stop.is_set() && !stopped {
            stopped = true;
        }

        // End: schedule done (or stopped/failed), then wait for the missing orders.
        if drain_until.is_none() && (next >= total || stopped || ended_early.is_some()) {
            if next >= total && rel < end_ns && !stopped && ended_early.is_none() {
                // The last X is out; the last phase's window runs to its end.
            } else {
                if time_phase < n_phases {
                    // Ended early: the window of the current phase closes now.
                    cpu_at[time_phase + 1] = cpu();
                }
                let d = if stopped || ended_early.is_some() {
                    (200 * 1_000_000u64).min(opts.drain.as_nanos() as u64)
                } else {
                    opts.drain.as_nanos() as u64
                };
                drain_until = Some(rel + d);
                sent_until_ns = rel.min(end_ns);
                time_phase = n_phases.max(time_phase);
                rec.time_phase = None;
            }
        }
        if let Some(until) = drain_until {
            let answered = rec.counters.received - rec.counters.duplicates;
            let all_in = answered >= rec.sent_total;
            if logged_out_at.is_none() && (all_in || rel >= until || ended_early.is_some()) {
                logged_out_at = Some(rel);
                for c in [&mut oe, &mut md] {
                    if c.open && c.session.is_logged_on() {
                        c.session.logout(UtcNanos(wall), None);
                        c.pump(&mut rec);
                        c.flush();
                    }
                }
            }
            if let Some(at) = logged_out_at {
                let done = [&oe, &md]
                    .iter()
                    .all(|c| !c.open || !c.session.is_logged_on());
                if done || rel >= at + NS_PER_SEC {
                    break;
                }
            }
        }

        if let Some(second) = closed {
            let phase = &tl.phases[rec.time_phase.unwrap_or(n_phases - 1)];
            let last = match rec.last_point {
                Some((p50, p99)) => format!("p50 {p50:.1} µs p99 {p99:.1} µs"),
                None => "nothing measured (warm-up, or no order arrived)".to_string(),
            };
            (opts.progress)(&format!(
                "{}: {} ({}/s) {:.0}/{:.0} s  X sent {}  D received {}  second {}-{} s: {last}  backlog {} KiB",
                opts.label,
                phase.label,
                phase.rate,
                rel as f64 / 1e9,
                end_ns as f64 / 1e9,
                rec.sent_total,
                rec.counters.received,
                second,
                second + 1,
                backlog >> 10
            ));
        }
        std::hint::spin_loop();
    }
    rec.roll_second(u64::MAX);

    for k in 0..n_phases {
        if let (Some(a), Some(b)) = (cpu_at[k], cpu_at[k + 1]) {
            rec.phases[k].cpu = Some(b.since(a));
        }
    }
    for c in [&mut oe, &mut md] {
        notes.extend(c.notes.drain(..).map(|n| format!("{}: {n}", c.name)));
    }
    let mut counters = rec.counters;
    counters.sent = rec.sent_total;
    Ok(VenueRun {
        phases: rec.phases,
        timeline: rec.timeline,
        counters,
        unexpected: rec.unexpected,
        backlog_max,
        sent_until_ns,
        stopped,
        ended_early,
        notes,
    })
}

/// Wall-clock UTC (for SendingTime) derived from the monotonic clock with one offset,
/// so a loop turn reads one clock.
struct Clock {
    offset: u64,
}

impl Clock {
    fn new() -> Clock {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Clock {
            offset: wall.wrapping_sub(MonoNanos::now().as_nanos()),
        }
    }

    fn wall(&self, mono: u64) -> u64 {
        mono.wrapping_add(self.offset)
    }
}

/// Where orders are counted.
struct Recorder<'t> {
    tl: &'t Timeline,
    phases: Vec<PhaseMeasure>,
    tracker: SeqTracker,
    counters: Counters,
    unexpected: u64,
    sent_total: u64,
    hint: usize,
    /// Monotonic ns at the start of the run, and now relative to it.
    start: u64,
    recv_rel: u64,
    /// The phase running now (by time); None after the last one.
    time_phase: Option<usize>,
    /// The second being collected, its histogram and order count.
    second: u64,
    second_hist: Latency,
    second_orders: u64,
    timeline: Vec<TimePoint>,
    /// p50 and p99 of the last whole second (progress line; None: it had no measured
    /// order).
    last_point: Option<(f64, f64)>,
}

impl<'t> Recorder<'t> {
    fn new(tl: &'t Timeline) -> Recorder<'t> {
        Recorder {
            tl,
            phases: (0..tl.phases.len()).map(|_| PhaseMeasure::new()).collect(),
            tracker: SeqTracker::default(),
            counters: Counters::default(),
            unexpected: 0,
            sent_total: 0,
            hint: 0,
            start: 0,
            recv_rel: 0,
            time_phase: Some(0),
            second: 0,
            second_hist: Latency::new(),
            second_orders: 0,
            timeline: Vec::new(),
            last_point: None,
        }
    }

    /// One order received now.
    #[inline]
    fn order(&mut self, raw: &[u8]) {
        let Some(id) = protocol::order_corr_id(raw) else {
            self.unexpected += 1;
            return;
        };
        if id >= self.sent_total {
            self.unexpected += 1;
            return;
        }
        let Some(k) = self.tl.phase_of(id, self.hint) else {
            self.unexpected += 1;
            return;
        };
        self.hint = k;
        let (dups, ooo) = (self.counters.duplicates, self.counters.out_of_order);
        self.tracker.observe(id, 1, &mut self.counters);
        let p = &mut self.phases[k];
        p.received += 1;
        if self.counters.duplicates != dups {
            p.duplicates += 1;
            return;
        }
        if self.counters.out_of_order != ooo {
            p.out_of_order += 1;
        }
        if self.time_phase == Some(k) {
            self.phases[k].in_window += 1;
        }
        if !self.tl.phases[k].warmup {
            let lat = self.recv_rel.saturating_sub(self.tl.intended_ns(k, id));
            self.phases[k].latency.record(lat);
            self.second_hist.record(lat);
            self.second_orders += 1;
        }
    }

    /// Closes the per-second histogram when the second has changed; returns the second
    /// closed (its start, in whole seconds of the run), whose figures are now in
    /// `last_point`.
    fn roll_second(&mut self, rel: u64) -> Option<u64> {
        let s = rel / NS_PER_SEC;
        if s == self.second {
            return None;
        }
        let closed = self.second;
        self.last_point = None;
        if self.second_orders > 0 {
            let sum = self.second_hist.summary();
            self.last_point = Some((sum.p50_us, sum.p99_us));
            self.timeline.push(TimePoint {
                t_s: self.second as f64,
                orders: self.second_orders,
                p50_us: sum.p50_us,
                p99_us: sum.p99_us,
                max_us: sum.max_us,
            });
            self.second_hist.hist.reset();
            self.second_orders = 0;
        }
        self.second = s;
        Some(closed)
    }
}

/// One FIX session over one non-blocking TCP connection.
struct Conn {
    name: &'static str,
    sock: TcpStream,
    session: Session<MemoryStore>,
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    open: bool,
    logged_on: bool,
    notes: Vec<String>,
}

impl Conn {
    fn connect(opts: &VenueOptions, sender: &str, target: &str) -> anyhow::Result<Conn> {
        let name = if sender == VENUE_MD {
            "market data"
        } else {
            "orders"
        };
        let sock =
            TcpStream::connect_timeout(&opts.addr, opts.logon_timeout).with_context(|| {
                format!("connecting the {name} session to the algo at {}", opts.addr)
            })?;
        sock.set_nodelay(true).context("TCP_NODELAY")?;
        sock.set_nonblocking(true).context("non-blocking socket")?;
        let mut cfg = SessionConfig::new(BEGIN_STRING, sender, target, Role::Initiator);
        cfg.heart_bt_int = opts.heart_bt_int;
        cfg.reset_on_logon = true;
        // The simulator never resends: keeping every X would only cost memory.
        cfg.persist_messages = false;
        cfg.logon_timeout = opts.logon_timeout.as_secs().max(1) as u32;
        let wall = Clock::new().wall(MonoNanos::now().as_nanos());
        let session = Session::new(cfg, MemoryStore::new(wall))
            .map_err(|e| anyhow::anyhow!("{name} session configuration: {e}"))?;
        Ok(Conn {
            name,
            sock,
            session,
            rbuf: vec![0; READ_BUF],
            rlen: 0,
            wbuf: Vec::with_capacity(1 << 20),
            wpos: 0,
            open: true,
            logged_on: false,
            notes: Vec::new(),
        })
    }

    /// Drains the session's outputs: bytes to the write buffer, orders to `rec`.
    fn pump(&mut self, rec: &mut Recorder<'_>) {
        while let Some(o) = self.session.poll_event() {
            match o {
                Output::Send(b) => self.wbuf.extend_from_slice(b),
                Output::Disconnect => self.open = false,
                Output::Event(Event::LoggedOn) => self.logged_on = true,
                Output::Event(Event::LoggedOut) => self.logged_on = false,
                Output::Event(Event::FromApp(m)) => {
                    if protocol::msg_type(m) == b"D" {
                        rec.order(m);
                    } else {
                        rec.unexpected += 1;
                    }
                }
                Output::Event(Event::Note(t)) if self.notes.len() < 40 => {
                    self.notes.push(t.to_string());
                }
                _ => {}
            }
        }
    }

    /// One non-blocking read, then every complete message to the session.
    fn read(&mut self, wall: u64, rec: &mut Recorder<'_>) {
        if !self.open {
            return;
        }
        match self.sock.read(&mut self.rbuf[self.rlen..]) {
            Ok(0) => {
                self.open = false;
                self.session.handle_disconnected(UtcNanos(wall));
                self.pump(rec);
                return;
            }
            Ok(n) => {
                self.rlen += n;
                // The receive time of everything in this read (not the turn's start:
                // the turn may have spent microseconds sending first).
                rec.recv_rel = MonoNanos::now().as_nanos().saturating_sub(rec.start);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                return
            }
            Err(e) => {
                self.note(format!("read error: {e}"));
                self.open = false;
                self.session.handle_disconnected(UtcNanos(wall));
                self.pump(rec);
                return;
            }
        }
        let mut pos = 0;
        while pos < self.rlen {
            match frame_len(&self.rbuf[pos..self.rlen], MAX_MESSAGE) {
                Ok(Some(n)) => {
                    self.session
                        .handle_message(UtcNanos(wall), &self.rbuf[pos..pos + n]);
                    pos += n;
                    self.pump(rec);
                }
                Ok(None) => break,
                Err(e) => {
                    let skip = e.skip().min(self.rlen - pos);
                    self.note(format!("framing: {e}"));
                    pos += skip;
                }
            }
        }
        self.rbuf.copy_within(pos..self.rlen, 0);
        self.rlen -= pos;
        if self.rlen == self.rbuf.len() {
            self.note("a message larger than the read buffer".into());
            self.open = false;
        }
    }

    fn timers(&mut self, wall: u64, rec: &mut Recorder<'_>) {
        if self
            .session
            .poll_timeout()
            .is_some_and(|d| wall >= d.as_nanos())
        {
            self.session.handle_timeout(UtcNanos(wall));
            self.pump(rec);
        }
    }

    /// Writes as much of the buffer as the kernel takes, never waiting.
    fn flush(&mut self) {
        if self.open {
            match super::write_pending(&mut self.sock, &self.wbuf, &mut self.wpos) {
                Ok(open) => self.open = open,
                Err(e) => {
                    self.note(format!("write error: {e}"));
                    self.open = false;
                }
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        } else if self.wpos >= (1 << 20) && self.wpos * 2 >= self.wbuf.len() {
            self.wbuf.drain(..self.wpos);
            self.wpos = 0;
        }
    }

    fn note(&mut self, n: String) {
        if self.notes.len() < 40 {
            self.notes.push(n);
        }
    }

    fn notes_suffix(&self) -> String {
        if self.notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.notes.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan::{build, Scaling};
    use super::*;

    /// Bench-review pass: a saturated algo answering the warm-up's backlog during the
    /// step had those orders counted as the step's achieved rate. Only orders for the
    /// step's own X count.
    #[test]
    fn a_backlog_answered_during_a_step_is_not_its_achieved_rate() {
        let tl = build(&[("10".into(), 10, 5.0)], Scaling::None, 2.0).unwrap();
        assert!(tl.phases[0].warmup && !tl.phases[1].warmup);
        let mut rec = Recorder::new(&tl);
        rec.sent_total = tl.first_index[1] + 10;
        let order = |id: u64| format!("8=FIX.4.4\x0135=D\x0111={id}\x01").into_bytes();
        rec.time_phase = Some(1);
        // Five warm-up orders, late, then three of the step's own.
        for id in 0..5 {
            rec.order(&order(id));
        }
        for id in tl.first_index[1]..tl.first_index[1] + 3 {
            rec.order(&order(id));
        }
        assert_eq!(rec.phases[1].in_window, 3);
        assert_eq!(rec.phases[0].in_window, 0);
        assert_eq!(rec.phases[0].received, 5);
    }

    /// Regression: progress lines repeated the previous second's figures when their
    /// own timer fired just before the second rolled. A line is now printed when, and
    /// only when, `roll_second` closes a second, with that second's figures.
    #[test]
    fn a_second_closes_once_and_carries_its_own_figures() {
        let tl = build(&[("10".into(), 10, 5.0)], Scaling::None, 0.0).unwrap();
        let mut rec = Recorder::new(&tl);
        let ms = |m: u64| m * 1_000_000;
        assert_eq!(rec.roll_second(ms(500)), None);
        rec.second_hist.record(2_000);
        rec.second_orders += 1;
        assert_eq!(rec.roll_second(ms(999)), None);
        assert_eq!(rec.roll_second(ms(1_000)), Some(0));
        let (p50, _) = rec.last_point.expect("second 0 had an order");
        assert!((p50 - 2.0).abs() < 0.01, "{p50}");
        // Later turns of the same second close nothing: no second line for it.
        assert_eq!(rec.roll_second(ms(1_001)), None);
        assert_eq!(rec.roll_second(ms(1_999)), None);
        // A second without orders says so instead of repeating second 0's figures.
        assert_eq!(rec.roll_second(ms(2_000)), Some(1));
        assert_eq!(rec.last_point, None);
        assert_eq!(rec.timeline.len(), 1);
    }
}
