//! tickwire's algos under test, run as a child process by the bench
//! (`tickwire bench tick-to-trade-algo`, hidden):
//!
//! * `builtin`: tickwire's FIX engine (`tickwire-fix-engine`) with an [`Application`]
//!   that answers every market-data entry with an order from inside the `from_app`
//!   callback, on the other session, in the same loop turn. Both sessions are full FIX
//!   sessions: dictionary validation (FIX44.xml, as the QuickFIX reference algo does),
//!   sequence numbers, the durable file store by default, heartbeats.
//! * `raw`: the floor. No FIX engine and no session layer: it answers the two Logons
//!   (and test requests) with canned messages, frames the market data with
//!   `codec::frame_len`, finds 278 by a byte scan and writes a pre-encoded order with
//!   34/52/11/9/10 patched in ([`RawOrder`]). One `write` per batch.
//!
//! Both print `READY <addr>` on stdout once they listen, and stop on SIGTERM/SIGINT or
//! when their standard input closes (the bench is gone).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tickwire_fix::codec::{
    format_utc_timestamp, frame_len, Encoder, MessageRef, TimestampPrecision,
};
use tickwire_fix::session::{Role, SessionConfig, Validation};
use tickwire_fix::store::SyncPolicy;
use tickwire_fix::validate::ValidationOptions;
use tickwire_fix_engine::{
    Application, Ctx, DictionaryCache, Engine, EngineOptions, IdleStrategy, SessionKey,
    SessionSpec, StoreSpec,
};

use super::protocol::{self, RawOrder, ALGO_MD, ALGO_OE, BEGIN_STRING, VENUE_MD, VENUE_OE};
use crate::harness::{idle_parser, BENCH_IDLE};

/// Which of tickwire's algos to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnAlgo {
    /// The FIX engine with the tick-to-trade application.
    Builtin,
    /// The raw-socket responder (no FIX engine).
    Raw,
}

/// Message store of the builtin algo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// The durable file store (sync policy: `--sync`).
    File,
    /// In memory.
    Memory,
}

/// File store sync policy of the builtin algo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncKind {
    /// Written to the OS each loop turn, never fdatasync (QuickFIX's FileStore
    /// flushes to the OS per message and never syncs).
    Os,
    /// fdatasync in every flush that wrote something.
    Every,
}

/// `tickwire bench tick-to-trade-algo` (started by `tickwire bench tick-to-trade`).
#[derive(Debug, Clone, clap::Args)]
pub struct AlgoArgs {
    /// Which algo.
    #[arg(long, value_enum)]
    pub kind: OwnAlgo,
    /// Address to accept both sessions on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Idle strategy: busy-poll or block in the kernel.
    #[arg(long, value_parser = idle_parser(&BENCH_IDLE), default_value_t = IdleStrategy::Spin)]
    pub idle: IdleStrategy,
    /// builtin: message store.
    #[arg(long, value_enum, default_value_t = StoreKind::File)]
    pub store: StoreKind,
    /// builtin: file store directory (FileStorePath).
    #[arg(long)]
    pub store_dir: Option<PathBuf>,
    /// builtin: file store sync policy.
    #[arg(long, value_enum, default_value_t = SyncKind::Os)]
    pub sync: SyncKind,
    /// builtin: validate received messages with this FIX.4.4 dictionary (QuickFIX XML).
    #[arg(long)]
    pub dictionary: Option<PathBuf>,
}

/// Runs the algo until SIGTERM/SIGINT or the end of standard input. The line
/// `READY <addr>` the parent waits for goes to `out` (the binary passes stdout).
pub fn run_algo(a: &AlgoArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    watch_stdin(stop.clone());
    match a.kind {
        OwnAlgo::Raw => run_raw(a, &stop, out),
        OwnAlgo::Builtin => run_builtin(a, stop, out),
    }
}

/// Sets `stop` when standard input reaches its end (the parent is gone).
fn watch_stdin(stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("stdin-eof".into())
        .spawn(move || {
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin();
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
}

fn ready(out: &mut dyn Write, addr: SocketAddr) {
    let _ = writeln!(out, "READY {addr}");
    let _ = out.flush();
}

// ---------------------------------------------------------------- builtin

/// The fields of one market-data entry the order copies (borrowed from the message).
struct Entry<'m> {
    side: &'m [u8],
    sym: &'m [u8],
    px: &'m [u8],
    size: &'m [u8],
    id: &'m [u8],
}

/// The tick-to-trade application: every market-data entry becomes an order.
struct TickToTrade {
    md: SessionKey,
    oe: SessionKey,
    errors: u64,
}

impl Application for TickToTrade {
    fn from_app(&mut self, ctx: &mut Ctx<'_>, session: SessionKey, msg: &MessageRef<'_>) {
        if session != self.md || msg.msg_type() != b"X" {
            if let Some(seq) = msg.seq_num() {
                let _ = ctx.reject_unsupported(session, seq, msg.msg_type());
            }
            return;
        }
        // Entries of the 268 group, flat: each starts at 279 (MDUpdateAction).
        let now = ctx.now().as_nanos();
        let fields = msg.fields();
        let mut i = 0;
        while i < fields.len() {
            if fields[i].tag != 279 {
                i += 1;
                continue;
            }
            let mut e = Entry {
                side: b"0",
                sym: b"",
                px: b"",
                size: b"",
                id: b"",
            };
            i += 1;
            while i < fields.len() && fields[i].tag != 279 {
                let f = &fields[i];
                match f.tag {
                    269 => e.side = msg.value(f),
                    55 => e.sym = msg.value(f),
                    270 => e.px = msg.value(f),
                    271 => e.size = msg.value(f),
                    278 => e.id = msg.value(f),
                    _ => {}
                }
                i += 1;
            }
            if e.id.is_empty() {
                continue;
            }
            let r = ctx.send_with(self.oe, b"D", |enc| {
                enc.field(11, e.id);
                enc.field(38, e.size);
                enc.field(40, b"2");
                enc.field(44, e.px);
                enc.field(54, if e.side == b"1" { b"2" } else { b"1" });
                enc.field(55, e.sym);
                enc.field(59, b"0");
                enc.field_timestamp(60, now, TimestampPrecision::Millis);
            });
            if r.is_err() {
                self.errors += 1;
            }
        }
    }

    fn observe_outgoing(&self) -> bool {
        false
    }
}

fn run_builtin(
    a: &AlgoArgs,
    stop: Arc<AtomicBool>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let mut dicts = DictionaryCache::new();
    let validation = match &a.dictionary {
        Some(path) => {
            let d = dicts
                .load(path, "tick-to-trade")
                .with_context(|| format!("loading the dictionary {}", path.display()))?;
            Some(Validation::single(d, ValidationOptions::default()))
        }
        None => None,
    };
    let store = match a.store {
        StoreKind::Memory => StoreSpec::Memory,
        StoreKind::File => StoreSpec::File {
            path: a
                .store_dir
                .clone()
                .context("--store file needs --store-dir")?,
            sync: match a.sync {
                SyncKind::Os => SyncPolicy::Os,
                SyncKind::Every => SyncPolicy::EveryMessage,
            },
        },
    };
    let spec = |sender: &str, target: &str| {
        let mut cfg = SessionConfig::new(BEGIN_STRING, sender, target, Role::Acceptor);
        cfg.reset_on_logon = true;
        let mut s = SessionSpec::new(cfg);
        s.accept = Some(a.listen);
        s.store = store.clone();
        s.validation = validation.clone();
        s
    };
    let opts = EngineOptions {
        idle: a.idle,
        ..EngineOptions::default()
    };
    let app = TickToTrade {
        md: SessionKey(0),
        oe: SessionKey(1),
        errors: 0,
    };
    let mut engine = Engine::new(
        vec![spec(ALGO_MD, VENUE_MD), spec(ALGO_OE, VENUE_OE)],
        app,
        opts,
    )
    .context("starting the builtin algo's FIX engine")?;
    let engine_stop = engine.stop_flag();
    let addr = *engine
        .listen_addrs()
        .first()
        .context("the engine listens nowhere")?;
    ready(out, addr);
    // Forward our stop flag (signals, stdin EOF) to the engine's.
    std::thread::Builder::new()
        .name("stop".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            engine_stop.store(true, Ordering::Relaxed);
        })
        .context("spawning the stop thread")?;
    engine.run().context("running the builtin algo")?;
    engine
        .shutdown(Duration::from_secs(2))
        .context("stopping the builtin algo")?;
    if engine.app().errors > 0 {
        tracing::warn!("algo: {} orders could not be sent", engine.app().errors);
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- raw

/// Read buffer per connection.
const RAW_READ_BUF: usize = 256 << 10;
/// Longest message the raw responder frames.
const RAW_MAX_MESSAGE: usize = 64 << 10;

/// One connection of the raw responder.
struct RawConn {
    sock: TcpStream,
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Our next MsgSeqNum.
    seq: u64,
    /// Our CompID and the venue's (once the Logon told us which session this is).
    me: &'static str,
    them: &'static str,
    open: bool,
}

impl RawConn {
    fn new(sock: TcpStream) -> std::io::Result<RawConn> {
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        Ok(RawConn {
            sock,
            rbuf: vec![0; RAW_READ_BUF],
            rlen: 0,
            wbuf: Vec::with_capacity(1 << 20),
            wpos: 0,
            seq: 1,
            me: "",
            them: "",
            open: true,
        })
    }

    /// One read; true if bytes arrived.
    fn read(&mut self) -> bool {
        if !self.open || self.rlen == self.rbuf.len() {
            return false;
        }
        match self.sock.read(&mut self.rbuf[self.rlen..]) {
            Ok(0) => {
                self.open = false;
                false
            }
            Ok(n) => {
                self.rlen += n;
                true
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                false
            }
            Err(_) => {
                self.open = false;
                false
            }
        }
    }

    /// Calls `f` with every complete message buffered, then keeps the rest.
    fn frames(&mut self, mut f: impl FnMut(&[u8], &mut Vec<u8>, &mut u64)) {
        let mut pos = 0;
        while pos < self.rlen {
            match frame_len(&self.rbuf[pos..self.rlen], RAW_MAX_MESSAGE) {
                Ok(Some(n)) => {
                    f(&self.rbuf[pos..pos + n], &mut self.wbuf, &mut self.seq);
                    pos += n;
                }
                Ok(None) => break,
                Err(e) => pos += e.skip().min(self.rlen - pos),
            }
        }
        self.rbuf.copy_within(pos..self.rlen, 0);
        self.rlen -= pos;
        if self.rlen == self.rbuf.len() {
            self.open = false;
        }
    }

    fn flush(&mut self) {
        if self.open {
            self.open =
                super::write_pending(&mut self.sock, &self.wbuf, &mut self.wpos).unwrap_or(false);
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        } else if self.wpos >= (1 << 20) {
            self.wbuf.drain(..self.wpos);
            self.wpos = 0;
        }
    }
}

/// SendingTime formatting, redone only when the millisecond changes.
struct Stamp {
    ms: u64,
    buf: [u8; 27],
    len: usize,
}

impl Stamp {
    fn new() -> Stamp {
        Stamp {
            ms: u64::MAX,
            buf: [0; 27],
            len: 0,
        }
    }

    fn now(&mut self) -> &[u8] {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        if ns / 1_000_000 != self.ms {
            self.ms = ns / 1_000_000;
            self.len = format_utc_timestamp(&mut self.buf, ns, TimestampPrecision::Millis);
        }
        &self.buf[..self.len]
    }
}

/// Answers the administrative messages the raw responder must: Logon (canned
/// answer), TestRequest (Heartbeat), Logout (Logout). Returns false on a Logout.
fn raw_admin(
    msg: &[u8],
    wbuf: &mut Vec<u8>,
    seq: &mut u64,
    me: &str,
    them: &str,
    enc: &mut Encoder,
    ts: &[u8],
) -> bool {
    let mut answer = |t: &[u8], body: &[(u32, &[u8])]| {
        wbuf.extend_from_slice(&protocol::raw_admin(enc, t, *seq, me, them, ts, body));
        *seq += 1;
    };
    match protocol::msg_type(msg) {
        b"A" => {
            let hb = protocol::field(msg, b"108").unwrap_or(b"30");
            let reset = protocol::field(msg, b"141") == Some(b"Y");
            if reset {
                answer(b"A", &[(98, b"0"), (108, hb), (141, b"Y")]);
            } else {
                answer(b"A", &[(98, b"0"), (108, hb)]);
            }
        }
        b"1" => {
            let id = protocol::field(msg, b"112").unwrap_or(b"");
            answer(b"0", &[(112, id)]);
        }
        b"5" => {
            answer(b"5", &[]);
            return false;
        }
        _ => {}
    }
    true
}

fn run_raw(a: &AlgoArgs, stop: &AtomicBool, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let listener = TcpListener::bind(a.listen)
        .with_context(|| format!("binding the raw responder to {}", a.listen))?;
    listener.set_nonblocking(true)?;
    ready(out, listener.local_addr()?);
    let mut enc = Encoder::new(BEGIN_STRING);
    let mut stamp = Stamp::new();

    // Accept until both sessions have logged on (identified by the Logon's 49).
    let mut pending: Vec<RawConn> = Vec::new();
    let (mut md, mut oe): (Option<RawConn>, Option<RawConn>) = (None, None);
    while md.is_none() || oe.is_none() {
        if stop.load(Ordering::Relaxed) {
            return Ok(ExitCode::SUCCESS);
        }
        match listener.accept() {
            Ok((s, _)) => pending.push(RawConn::new(s).context("configuring a connection")?),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("accepting"),
        }
        let mut i = 0;
        while i < pending.len() {
            let c = &mut pending[i];
            c.read();
            let mut who: Option<bool> = None;
            let ts = stamp.now().to_vec();
            c.frames(|m, w, seq| {
                if who.is_some() {
                    return;
                }
                if protocol::msg_type(m) != b"A" {
                    return;
                }
                let (is_md, me, them) = match protocol::field(m, b"49") {
                    Some(s) if s == VENUE_MD.as_bytes() => (true, ALGO_MD, VENUE_MD),
                    Some(s) if s == VENUE_OE.as_bytes() => (false, ALGO_OE, VENUE_OE),
                    _ => return,
                };
                raw_admin(m, w, seq, me, them, &mut enc, &ts);
                who = Some(is_md);
            });
            if let Some(is_md) = who {
                let mut c = pending.swap_remove(i);
                c.flush();
                if is_md {
                    (c.me, c.them) = (ALGO_MD, VENUE_MD);
                    md = Some(c);
                } else {
                    (c.me, c.them) = (ALGO_OE, VENUE_OE);
                    oe = Some(c);
                }
            } else if !c.open {
                pending.swap_remove(i);
            } else {
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let (Some(mut md), Some(mut oe)) = (md, oe) else {
        bail!("unreachable: both sessions are connected here");
    };
    if a.idle == IdleStrategy::Block {
        md.sock.set_nonblocking(false)?;
        md.sock.set_read_timeout(Some(Duration::from_millis(10)))?;
    }

    let mut order = RawOrder::new();
    let mut running = true;
    while running && !stop.load(Ordering::Relaxed) && md.open && oe.open {
        let got_md = md.read();
        let got_oe = oe.read();
        if got_md || got_oe {
            let ts = stamp.now();
            let (me, them) = (md.me, md.them);
            let oe_out = &mut oe.wbuf;
            let oe_seq = &mut oe.seq;
            md.frames(|m, w, seq| {
                if protocol::msg_type(m) == b"X" {
                    if let Some(id) = protocol::field(m, b"278") {
                        order.encode(oe_out, *oe_seq, ts, id);
                        *oe_seq += 1;
                    }
                } else if !raw_admin(m, w, seq, me, them, &mut enc, ts) {
                    running = false;
                }
            });
            let (me, them) = (oe.me, oe.them);
            let mut oe_running = true;
            oe.frames(|m, w, seq| {
                if !raw_admin(m, w, seq, me, them, &mut enc, ts) {
                    oe_running = false;
                }
            });
            running &= oe_running;
            oe.flush();
            md.flush();
        } else if a.idle == IdleStrategy::Spin {
            std::hint::spin_loop();
        }
    }
    // Last answers (e.g. our Logout) out before closing.
    oe.flush();
    md.flush();
    Ok(ExitCode::SUCCESS)
}
