//! The raw fan-out floor: `tickwire bench fanout-relay` (hidden), a minimal relay that
//! `bench fanout --target raw` (or `--compare tickwire,raw`) starts exactly as it starts
//! the router: a child process on a free loopback port, pinned to the FAR CPU, with the
//! router's `--idle` strategy.
//!
//! It copies frames ([`super::raw`]) from publishers to the subscribers of a table fixed
//! at connect time (topic -> connections, from each connection's HELLO): no protocol
//! state, no trie, no validation beyond the length. Its loop is the router's
//! (ARCHITECTURE.md, "One loop turn") without the core: wait per the idle strategy
//! (never while a connection has unread or unwritten bytes), accept, read once from
//! each readable connection (256 KiB), append each complete frame to its subscribers'
//! output buffers, then one `write` per destination per turn. Buffers are allocated at
//! connect and only grow, so the steady state allocates nothing per message.
//!
//! What it leaves out, so the floor is a floor: the router's read buffer growth (the
//! relay's is 256 KiB from the start), protocol decoding and validation, the trie,
//! per-client counters, slow-consumer policy (an output buffer above
//! [`MAX_PENDING`] drops that subscriber; the bench then reports gaps).
//!
//! With `--stamp` (the market-data floor of `bench md-replay`, [`crate::md_replay::raw`])
//! it also writes, as the router does for STAMPS, its read time and each copy's routing
//! time into the second and third u64 of every payload of at least [`STAMPS_LEN`] bytes.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use tickwire_rt::stop::StopFlag;
use tickwire_rt::{IdleStrategy, MonoNanos};

use super::raw::{self, CONTROL, READ_BUFFER};

/// The listening banner's prefix (the bench reads the address after " listening on ").
pub const BANNER: &str = "tickwire fanout-relay listening on ";

/// The longest a blocking wait lasts (so the relay sees SIGTERM), as in the router.
const MAX_BLOCK: Duration = Duration::from_millis(50);
/// The longest `hybrid` spins after the last activity before it blocks (router
/// default; shorter while spinning finds nothing, as in the router).
const HYBRID_SPIN: Duration = Duration::from_micros(200);
/// Unwritten bytes above which a subscriber is dropped (it cannot keep up).
pub const MAX_PENDING: usize = 256 * 1024 * 1024;
/// Output buffer a connection starts with.
const OUT_BUFFER: usize = 256 * 1024;

const LISTENER: Token = Token(usize::MAX);

/// Options of the hidden `tickwire bench fanout-relay`.
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// Where to listen.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// block (epoll with a timeout), spin (epoll(0) in a loop) or hybrid, as the router.
    #[arg(long, value_name = "STRATEGY", default_value = "spin", value_parser = ["spin", "block", "hybrid"])]
    pub idle: String,
    /// Stamp as the router does (the market-data floor, `bench md-replay --compare
    /// tickwire,raw`): a payload of at least 24 bytes starts with three u64 (publisher
    /// send, relay in, relay out); the relay writes its read time and, per copy, its
    /// routing time into the second and third.
    #[arg(long)]
    pub stamp: bool,
}

/// Payload bytes a stamped frame starts with: publisher send, relay in, relay out
/// (u64 little-endian each, CLOCK_MONOTONIC ns).
pub const STAMPS_LEN: usize = 24;

/// Runs the relay until SIGTERM or SIGINT; prints the banner with the address to `out`.
pub fn run(args: &RelayArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let idle = IdleStrategy::parse_one_of(
        &args.idle,
        &[
            IdleStrategy::Block,
            IdleStrategy::Spin,
            IdleStrategy::Hybrid,
        ],
    )
    .map_err(anyhow::Error::msg)?;
    // A plain flag, not `StopFlag::install` (whose messages speak to a person running a
    // bench): the bench stops the relay with SIGTERM after every run.
    let stop = StopFlag::unregistered();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&stop.0))
            .context("handling SIGTERM")?;
    }
    let mut relay = Relay::bind(args.listen)?;
    relay.stamp = args.stamp;
    writeln!(out, "{BANNER}{}", relay.listener.local_addr()?)?;
    out.flush()?;
    relay.run(idle, &stop)
}

/// One connection: its read buffer (`start..end` unconsumed) and its output buffer
/// (`sent..` unwritten).
struct Conn {
    stream: TcpStream,
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    sent: usize,
    /// Said HELLO (and is in the table).
    greeted: bool,
    writable: bool,
    on_read_list: bool,
    on_write_list: bool,
}

/// A connection slot (the mio token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot(usize);

struct Relay {
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    /// topic -> subscribing connections, fixed by each connection's HELLO.
    table: Vec<Vec<Slot>>,
    read_list: Vec<Slot>,
    write_list: Vec<Slot>,
    /// Write relay-in and relay-out stamps into the copies ([`RelayArgs::stamp`]).
    stamp: bool,
}

impl Relay {
    fn bind(addr: SocketAddr) -> anyhow::Result<Relay> {
        let poll = Poll::new().context("creating the relay's poll")?;
        let mut listener =
            TcpListener::bind(addr).with_context(|| format!("binding the relay to {addr}"))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Relay {
            poll,
            listener,
            conns: Vec::new(),
            table: Vec::new(),
            read_list: Vec::with_capacity(64),
            write_list: Vec::with_capacity(64),
            stamp: false,
        })
    }

    fn run(&mut self, idle: IdleStrategy, stop: &StopFlag) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut reading: Vec<Slot> = Vec::with_capacity(64);
        let mut writing: Vec<Slot> = Vec::with_capacity(64);
        let mut last_active = MonoNanos::now();
        // Hybrid spins as the router's does: shorter while spinning finds nothing.
        let mut spin = tickwire_rt::idle::SpinBudget::new(HYBRID_SPIN);
        while !stop.is_set() {
            let busy = !self.read_list.is_empty()
                || self
                    .write_list
                    .iter()
                    .any(|s| self.conns[s.0].as_ref().is_some_and(|c| c.writable));
            let timeout = if busy {
                Duration::ZERO
            } else {
                let quiet = MonoNanos::now().saturating_sub(last_active);
                idle.wait_timeout(Duration::from_nanos(quiet), spin.get(), MAX_BLOCK)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e).context("waiting for the relay's sockets");
                }
            }
            if !events.is_empty() {
                let now = MonoNanos::now();
                spin.on_activity(Duration::from_nanos(now.saturating_sub(last_active)));
                last_active = now;
            }
            for ev in events.iter() {
                if ev.token() == LISTENER {
                    self.accept_all();
                    continue;
                }
                let slot = Slot(ev.token().0);
                let Some(c) = self.conns.get_mut(slot.0).and_then(Option::as_mut) else {
                    continue;
                };
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                if readable && !c.on_read_list {
                    c.on_read_list = true;
                    self.read_list.push(slot);
                }
                if ev.is_writable() || ev.is_write_closed() {
                    c.writable = true;
                }
            }
            // One read per readable connection, routing what it brought...
            std::mem::swap(&mut self.read_list, &mut reading);
            for &slot in &reading {
                self.read_once(slot);
            }
            reading.clear();
            // ...then one write per destination.
            std::mem::swap(&mut self.write_list, &mut writing);
            for &slot in &writing {
                self.write_once(slot);
            }
            writing.clear();
        }
        Ok(())
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let i = match self.conns.iter().position(Option::is_none) {
                        Some(i) => i,
                        None => {
                            self.conns.push(None);
                            self.conns.len() - 1
                        }
                    };
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(i), interest)
                        .is_err()
                    {
                        continue;
                    }
                    self.conns[i] = Some(Conn {
                        stream,
                        rbuf: vec![0; READ_BUFFER],
                        start: 0,
                        end: 0,
                        out: Vec::with_capacity(OUT_BUFFER),
                        sent: 0,
                        greeted: false,
                        writable: false,
                        on_read_list: false,
                        on_write_list: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors and the like: try again on the next event.
                Err(_) => return,
            }
        }
    }

    /// One read from `slot`, then routes every complete frame. Keeps it on the read
    /// list while a read fills the space offered.
    fn read_once(&mut self, slot: Slot) {
        let Some(c) = self.conns.get_mut(slot.0).and_then(Option::as_mut) else {
            return;
        };
        c.on_read_list = false;
        if c.end == c.rbuf.len() {
            c.rbuf.copy_within(c.start..c.end, 0);
            c.end -= c.start;
            c.start = 0;
        }
        let space = c.rbuf.len() - c.end;
        let n = match c.stream.read(&mut c.rbuf[c.end..]) {
            Ok(0) => return self.drop_conn(slot),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                c.on_read_list = true;
                self.read_list.push(slot);
                return;
            }
            Err(_) => return self.drop_conn(slot),
        };
        c.end += n;
        // The relay-in stamp: one clock read per read, as the router's.
        let relay_in = if self.stamp {
            MonoNanos::now().as_nanos()
        } else {
            0
        };
        if n == space {
            // More may be waiting (edge-triggered): read again next turn.
            c.on_read_list = true;
            self.read_list.push(slot);
        }
        // Route with the read buffer taken out of the connection (a move, no copy), so
        // the frames can be appended to any connection's output, this one's included.
        let rbuf = std::mem::take(&mut c.rbuf);
        let (mut at, end) = (c.start, c.end);
        let mut bad = false;
        loop {
            match raw::split(&rbuf[at..end]) {
                Ok(Some(f)) => {
                    let bytes = &rbuf[at..at + f.len];
                    at += f.len;
                    if f.topic == CONTROL {
                        self.greet(slot, f.payload);
                    } else {
                        self.route(f.topic, bytes, relay_in);
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    bad = true;
                    break;
                }
            }
        }
        let Some(c) = self.conns.get_mut(slot.0).and_then(Option::as_mut) else {
            return;
        };
        c.rbuf = rbuf;
        c.start = at;
        if c.start == c.end {
            c.start = 0;
            c.end = 0;
        }
        if bad {
            self.drop_conn(slot);
        }
    }

    /// HELLO: puts `slot` in the table for its topics (once) and answers.
    fn greet(&mut self, slot: Slot, topics: &[u8]) {
        let Some(c) = self.conns.get_mut(slot.0).and_then(Option::as_mut) else {
            return;
        };
        if c.greeted {
            return;
        }
        c.greeted = true;
        raw::encode(&mut c.out, CONTROL, &[]);
        for t in raw::hello_topics(topics) {
            let t = t as usize;
            if self.table.len() <= t {
                self.table.resize_with(t + 1, Vec::new);
            }
            if !self.table[t].contains(&slot) {
                self.table[t].push(slot);
            }
        }
        self.queue_write(slot);
    }

    /// Appends one frame's bytes to every subscriber of `topic` (stamping each copy
    /// when asked: `relay_in`, and the time of the copy as relay out).
    #[inline]
    fn route(&mut self, topic: u16, bytes: &[u8], relay_in: u64) {
        let Some(subs) = self.table.get(topic as usize) else {
            return;
        };
        let stamp = self.stamp && bytes.len() >= raw::HEADER + STAMPS_LEN;
        for &s in subs {
            if let Some(c) = self.conns.get_mut(s.0).and_then(Option::as_mut) {
                let at = c.out.len() + raw::HEADER + 8;
                c.out.extend_from_slice(bytes);
                if stamp {
                    let relay_out = MonoNanos::now().as_nanos();
                    c.out[at..at + 8].copy_from_slice(&relay_in.to_le_bytes());
                    c.out[at + 8..at + 16].copy_from_slice(&relay_out.to_le_bytes());
                }
                if !c.on_write_list {
                    c.on_write_list = true;
                    self.write_list.push(s);
                }
            }
        }
    }

    fn queue_write(&mut self, slot: Slot) {
        if let Some(c) = self.conns.get_mut(slot.0).and_then(Option::as_mut) {
            if !c.on_write_list {
                c.on_write_list = true;
                self.write_list.push(slot);
            }
        }
    }

    /// One write of `slot`'s pending bytes; stays on the write list while bytes remain.
    fn write_once(&mut self, slot: Slot) {
        let Some(c) = self.conns.get_mut(slot.0).and_then(Option::as_mut) else {
            return;
        };
        c.on_write_list = false;
        if c.sent < c.out.len() && c.writable {
            match c.stream.write(&c.out[c.sent..]) {
                Ok(n) => {
                    c.sent += n;
                    if c.sent < c.out.len() {
                        // The socket buffer is full: wait for the writable edge.
                        c.writable = false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.drop_conn(slot),
            }
        }
        if c.sent == c.out.len() {
            c.out.clear();
            c.sent = 0;
            return;
        }
        if c.out.len() - c.sent > MAX_PENDING {
            return self.drop_conn(slot);
        }
        if c.sent >= c.out.len() / 2 {
            // Keep the buffer from growing with what was written already.
            c.out.drain(..c.sent);
            c.sent = 0;
        }
        c.on_write_list = true;
        self.write_list.push(slot);
    }

    fn drop_conn(&mut self, slot: Slot) {
        if let Some(mut c) = self.conns.get_mut(slot.0).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
        for subs in &mut self.table {
            subs.retain(|&s| s != slot);
        }
        // Stale entries on the read and write lists find an empty slot and are skipped;
        // a new connection in this slot before then gets at most one spurious try.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream as StdStream;

    fn start(idle: &str) -> SocketAddr {
        start_stamping(idle, false)
    }

    fn start_stamping(idle: &str, stamp: bool) -> SocketAddr {
        let mut relay = Relay::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        relay.stamp = stamp;
        let addr = relay.listener.local_addr().unwrap();
        let idle = IdleStrategy::parse_one_of(idle, &IdleStrategy::ALL).unwrap();
        std::thread::spawn(move || {
            let _ = relay.run(idle, &StopFlag::unregistered());
        });
        addr
    }

    fn client(addr: SocketAddr, topics: &[u16]) -> StdStream {
        let mut s = StdStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&raw::hello(topics)).unwrap();
        let mut ack = [0u8; raw::HEADER];
        s.read_exact(&mut ack).unwrap();
        assert_eq!(raw::split(&ack).unwrap().unwrap().topic, CONTROL);
        s
    }

    fn read_frames(s: &mut StdStream, n: usize) -> Vec<(u16, Vec<u8>)> {
        let mut got = Vec::new();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while got.len() < n {
            let k = s.read(&mut chunk).unwrap();
            assert!(k > 0, "closed after {} frames", got.len());
            buf.extend_from_slice(&chunk[..k]);
            let mut used = 0;
            while let Some(f) = raw::split(&buf[used..]).unwrap() {
                got.push((f.topic, f.payload.to_vec()));
                used += f.len;
            }
            buf.drain(..used);
        }
        got
    }

    #[test]
    fn frames_reach_the_subscribers_of_their_topic_in_order() {
        for idle in ["block", "spin"] {
            let addr = start(idle);
            let mut a = client(addr, &[1, 2]);
            let mut b = client(addr, &[2]);
            let mut p = client(addr, &[]);
            let mut out = Vec::new();
            for i in 0..1000u32 {
                raw::encode(&mut out, (i % 3) as u16, &i.to_le_bytes());
            }
            // Written in awkward pieces: the relay must reassemble frames.
            for piece in out.chunks(7) {
                p.write_all(piece).unwrap();
            }
            let want = |t: &[u16]| -> Vec<(u16, Vec<u8>)> {
                (0..1000u32)
                    .filter(|i| t.contains(&((i % 3) as u16)))
                    .map(|i| ((i % 3) as u16, i.to_le_bytes().to_vec()))
                    .collect()
            };
            let (want_a, want_b) = (want(&[1, 2]), want(&[2]));
            assert_eq!(read_frames(&mut a, want_a.len()), want_a, "{idle}");
            assert_eq!(read_frames(&mut b, want_b.len()), want_b, "{idle}");
        }
    }

    #[test]
    fn a_bad_length_drops_only_that_connection() {
        let addr = start("block");
        let mut sub = client(addr, &[5]);
        let mut bad = client(addr, &[]);
        bad.write_all(&[0xFF, 0xFF, 0xFF, 0xFF, 5, 0]).unwrap();
        let mut one = [0u8; 1];
        assert_eq!(bad.read(&mut one).unwrap_or(0), 0, "dropped");
        let mut p = client(addr, &[]);
        let mut out = Vec::new();
        raw::encode(&mut out, 5, b"still here");
        p.write_all(&out).unwrap();
        assert_eq!(read_frames(&mut sub, 1), [(5, b"still here".to_vec())]);
    }

    #[test]
    fn a_stamping_relay_writes_in_and_out_into_each_copy_and_nothing_else() {
        let addr = start_stamping("block", true);
        let mut a = client(addr, &[1]);
        let mut b = client(addr, &[1]);
        let mut p = client(addr, &[]);
        let before = MonoNanos::now().as_nanos();
        let mut payload = 7u64.to_le_bytes().to_vec();
        payload.extend_from_slice(&[0; 16]);
        payload.extend_from_slice(b"tail");
        let mut out = Vec::new();
        raw::encode(&mut out, 1, &payload);
        // Too short to carry stamps: copied unchanged.
        raw::encode(&mut out, 1, b"short");
        p.write_all(&out).unwrap();
        for s in [&mut a, &mut b] {
            let got = read_frames(s, 2);
            let f = &got[0].1;
            let word = |i: usize| u64::from_le_bytes(f[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(word(0), 7, "publisher send untouched");
            assert!(
                word(1) >= before && word(2) >= word(1),
                "in {} out {}",
                word(1),
                word(2)
            );
            assert_eq!(&f[STAMPS_LEN..], b"tail");
            assert_eq!(got[1], (1, b"short".to_vec()));
        }
    }
}
