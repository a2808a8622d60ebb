//! `bench stream --transport tcp-relay,shm-relay`: the floors of `tickwire` and
//! `tickwire-shm` with the router's topology and none of the router (issue 15).
//!
//! The sender (the measuring thread, CPU NEAR) and the receiver thread (CPU NEAR, as the
//! tickwire receiver client is) each hold one byte stream to a relay thread on CPU FAR
//! (the router's place). The relay copies bytes from the sender's stream to the
//! receiver's and back, without looking at them: no framing, matching or doorbell.
//! Messages travel as a 4-byte little-endian length and the payload; the receiver
//! counts and reflects exactly as the tickwire receiver client does.
//!
//! - `tcp-relay`: the streams are TCP connections on 127.0.0.1 (`TCP_NODELAY`).
//! - `shm-relay`: the streams are bare shared-memory ring pairs (`tickwire_shm::bare_pair`,
//!   1 MiB per ring, the router's default), with no doorbell.
//!
//! The relay spins in both idle modes: CPU FAR is its own, so spinning is its fastest
//! choice and the floor is an upper bound of what that CPU can relay. With `--idle
//! block` the TCP receiver sleeps in `read(2)`; the shm receiver, which has no doorbell
//! to sleep on, yields its CPU to the sender after an empty poll.
//!
//! `shm-relay / tcp-relay` (the highest lossless rates, printed at the end of the
//! report) is what shared memory itself buys over TCP on this topology with this
//! sender and receiver; `tickwire / tcp-relay` and `tickwire-shm / shm-relay` are what
//! the router and the client library cost on each.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use tickwire_rt::MonoNanos;
use tickwire_shm::BareEnd;

use super::{
    harness, idle_once, IdleStrategy, Receiver, Reflections, RxOutcome, SenderLink, StreamArgs,
    Transport,
};
use crate::stats::SeqTracker;

/// The length prefix of a floor frame.
const LEN: usize = 4;
/// Bytes per ring of `shm-relay` (the router's default ring).
const RING: usize = tickwire_shm::DEFAULT_RING_BYTES;
/// The receiver's and the sender's read buffers.
const READ_BUF: usize = 256 * 1024;
/// The relay's buffer per direction.
const RELAY_BUF: usize = 256 * 1024;

/// The report's description of a relay floor's path.
pub(super) fn path(t: Transport) -> &'static str {
    if t == Transport::ShmRelay {
        "sender → bare shared-memory ring pair → relay thread on the far CPU → ring pair → receiver thread, reflections back the same way (the router's topology, no router)"
    } else {
        "sender → TCP → relay thread on the far CPU → TCP → receiver thread, reflections back the same way (the router's topology, no router)"
    }
}

/// A reader's sleep announced to its writer (the ring's wake protocol).
trait Park {
    /// Announces a sleep; false when bytes arrived meanwhile (then do not sleep).
    fn announce_sleep(&self) -> bool;
    /// Withdraws the announcement after waking.
    fn withdraw_sleep(&self);
}

impl Park for BareEnd {
    fn announce_sleep(&self) -> bool {
        !self.rx.park().unwrap_or(true)
    }
    fn withdraw_sleep(&self) {
        self.rx.unpark();
    }
}

/// A TCP reader sleeps in `read(2)`, never here.
impl Park for TcpStream {
    fn announce_sleep(&self) -> bool {
        false
    }
    fn withdraw_sleep(&self) {}
}

/// A byte stream that never blocks: `WouldBlock` when there is nothing to read or no
/// room to write.
trait Pipe: Send + 'static {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// After a write: whether the reader announced that it sleeps (then wake it).
    fn reader_parked(&self) -> bool {
        false
    }
    /// Sleeps up to `timeout` or until there may be bytes to read.
    fn wait_readable(&self, timeout: Duration);
}

impl Pipe for TcpStream {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.read(buf) {
            Ok(0) if !buf.is_empty() => Err(ErrorKind::UnexpectedEof.into()),
            r => r,
        }
    }
    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write(buf)
    }
    fn wait_readable(&self, timeout: Duration) {
        super::wait_readable(self, timeout);
    }
}

impl Pipe for BareEnd {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.rx.read(buf) {
            Ok(0) if !buf.is_empty() => Err(ErrorKind::WouldBlock.into()),
            Ok(n) => Ok(n),
            Err(e) => Err(io::Error::new(ErrorKind::InvalidData, e)),
        }
    }
    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.tx.write(buf) {
            Ok(0) if !buf.is_empty() => Err(ErrorKind::WouldBlock.into()),
            Ok(n) => Ok(n),
            Err(e) => Err(io::Error::new(ErrorKind::InvalidData, e)),
        }
    }
    fn reader_parked(&self) -> bool {
        self.tx.wake_needed()
    }
    fn wait_readable(&self, timeout: Duration) {
        // A bare ring has no doorbell for the way back: naps of at most 20 µs between
        // looks (the floor's reflections are timed that much late at worst).
        let until = MonoNanos::now().add_nanos(timeout.as_nanos() as u64);
        while !matches!(self.rx.available(), Ok(n) if n > 0) && MonoNanos::now() < until {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Reads length-prefixed frames out of a byte stream: a bounded buffer, frames no
/// longer than `max`.
struct Framer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max: usize,
}

impl Framer {
    fn new(max: usize) -> Framer {
        Framer {
            buf: vec![0; READ_BUF.max(2 * (max + LEN))],
            start: 0,
            end: 0,
            max,
        }
    }

    /// One read from `p` into the free space; the bytes read (0: nothing waiting or no
    /// space).
    fn fill(&mut self, p: &mut impl Pipe) -> anyhow::Result<usize> {
        if self.start > 0 && self.end + self.max + LEN > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            return Ok(0);
        }
        match p.read_some(&mut self.buf[self.end..]) {
            Ok(n) => {
                self.end += n;
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e).context("relay floor read"),
        }
    }

    /// Calls `f` with each complete frame's payload and drops them.
    fn frames(&mut self, mut f: impl FnMut(&[u8])) -> anyhow::Result<()> {
        while self.end - self.start >= LEN {
            let at = self.start;
            let mut len = [0u8; LEN];
            len.copy_from_slice(&self.buf[at..at + LEN]);
            let len = u32::from_le_bytes(len) as usize;
            if len > self.max {
                bail!("relay floor frame of {len} bytes (at most {})", self.max);
            }
            if self.end - at < LEN + len {
                break;
            }
            f(&self.buf[at + LEN..at + LEN + len]);
            self.start = at + LEN + len;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(())
    }
}

/// Appends one frame to `out`.
fn push_frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Writes all of `out` to `p`, spinning while it is full.
fn write_all(p: &mut impl Pipe, out: &[u8]) -> anyhow::Result<()> {
    let mut at = 0;
    while at < out.len() {
        match p.write_some(&out[at..]) {
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                std::hint::spin_loop()
            }
            Err(e) => return Err(e).context("relay floor write"),
        }
    }
    Ok(())
}

/// The relay thread: copies bytes both ways until told to stop.
struct Relay {
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

/// One direction of the relay: what was read and not yet written.
struct Leg {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Its source ended (the receiver thread exits at END before the step's link is
    /// dropped): nothing more to move.
    ended: bool,
}

impl Leg {
    fn new() -> Leg {
        Leg {
            buf: vec![0; RELAY_BUF],
            start: 0,
            end: 0,
            ended: false,
        }
    }

    /// Writes what is pending to `to`; when nothing is, reads from `from`. The bytes
    /// moved.
    fn turn(&mut self, from: &mut impl Pipe, to: &mut impl Pipe) -> anyhow::Result<usize> {
        if self.start == self.end && !self.ended {
            self.start = 0;
            self.end = match from.read_some(&mut self.buf) {
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => 0,
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    self.ended = true;
                    0
                }
                Err(e) => return Err(e).context("relay read"),
            };
        }
        if self.start == self.end {
            return Ok(0);
        }
        match to.write_some(&self.buf[self.start..self.end]) {
            Ok(n) => {
                self.start += n;
                Ok(n)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(0),
            // The other end left (the receiver thread at END): drop what it would get.
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                self.start = self.end;
                self.ended = true;
                Ok(0)
            }
            Err(e) => Err(e).context("relay write"),
        }
    }
}

impl Relay {
    /// Relays between `a` (the sender's) and `b` (the receiver's); `receiver`, when it
    /// sleeps in `park` (shm with `--idle block`), is woken after a write that finds it
    /// announced asleep, as the router rings a client's doorbell.
    fn start<P: Pipe>(
        mut a: P,
        mut b: P,
        receiver: Option<std::thread::Thread>,
        far: Option<usize>,
    ) -> anyhow::Result<Relay> {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let handle = harness::spawn_pinned("stream-relay", far, move || {
            let (mut down, mut up) = (Leg::new(), Leg::new());
            while !stop.load(Ordering::Relaxed) {
                let to_b = down.turn(&mut a, &mut b)?;
                if to_b > 0 && b.reader_parked() {
                    if let Some(t) = &receiver {
                        t.unpark();
                    }
                }
                let moved = to_b + up.turn(&mut b, &mut a)?;
                if moved == 0 {
                    std::hint::spin_loop();
                }
            }
            Ok(())
        })
        .context("spawning the relay thread")?;
        Ok(Relay {
            done,
            handle: Some(handle),
        })
    }
}

impl Relay {
    /// Whether the relay thread is still running (it stops only when told, or on an
    /// error).
    fn running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("relay floor thread: {e:#}"),
                Err(_) => tracing::warn!("the relay floor thread panicked"),
            }
        }
    }
}

/// The sender's end: frames queued by `send`, written by `flush`; reflections read
/// from the same stream.
struct RelaySender<P: Pipe> {
    pipe: P,
    out: Vec<u8>,
    back: Framer,
    /// Reflections read while a flush waited for room (as frames), for the next poll:
    /// the way back must keep moving, or the relay and the receiver stall behind it.
    stash: Vec<u8>,
    /// Stops and joins the relay when the step's link is dropped.
    relay: Relay,
}

impl<P: Pipe> RelaySender<P> {
    fn new(pipe: P, size: usize, relay: Relay) -> RelaySender<P> {
        RelaySender {
            pipe,
            out: Vec::new(),
            back: Framer::new(size),
            stash: Vec::new(),
            relay,
        }
    }
}

impl<P: Pipe> SenderLink for RelaySender<P> {
    fn send(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        push_frame(&mut self.out, payload);
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        let back = &mut self.back;
        let mut at = 0;
        while at < self.out.len() {
            match self.pipe.write_some(&self.out[at..]) {
                Ok(n) => at += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    // Keep the way back moving while the way out is full.
                    back.fill(&mut self.pipe)?;
                    let stash = &mut self.stash;
                    back.frames(|p| push_frame(stash, p))?;
                    if !self.relay.running() {
                        bail!("the relay floor thread stopped (its error is logged when the step ends)");
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e).context("relay floor send"),
            }
        }
        self.out.clear();
        Ok(())
    }

    fn wait_poll(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        if self.stash.is_empty() {
            self.pipe.wait_readable(timeout);
        }
        self.poll(f)
    }

    fn poll(&mut self, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        if !self.stash.is_empty() {
            let mut at = 0;
            while at + LEN <= self.stash.len() {
                let mut len = [0u8; LEN];
                len.copy_from_slice(&self.stash[at..at + LEN]);
                let end = at + LEN + u32::from_le_bytes(len) as usize;
                f(&self.stash[at + LEN..end]);
                at = end;
            }
            self.stash.clear();
        }
        loop {
            let n = self.back.fill(&mut self.pipe)?;
            self.back.frames(&mut *f)?;
            if n == 0 {
                return Ok(());
            }
        }
    }
}

/// `tcp-relay`: the sender's and the receiver's TCP connections to a relay thread.
pub(super) fn tcp_relay_pair(
    args: &StreamArgs,
    yields: bool,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the relay floor")?;
    let addr = listener.local_addr()?;
    let connect = || -> anyhow::Result<(TcpStream, TcpStream)> {
        let near = TcpStream::connect(addr).context("connecting to the relay floor")?;
        let (far, _) = listener.accept().context("accepting at the relay floor")?;
        for s in [&near, &far] {
            s.set_nodelay(true)?;
        }
        far.set_nonblocking(true)?;
        Ok((near, far))
    };
    let (tx, relay_a) = connect()?;
    let (rx, relay_b) = connect()?;
    tx.set_nonblocking(true)?;
    let block = args.idle == IdleStrategy::Block;
    rx.set_nonblocking(!block)?;
    if block {
        rx.set_read_timeout(Some(Duration::from_millis(50)))?;
    }
    let receiver = spawn_receiver(args, rx, Idle::new(yields, false), quit)?;
    let relay = Relay::start(relay_a, relay_b, None, args.pin.map(|p| p.far))?;
    Ok((Box::new(RelaySender::new(tx, args.size, relay)), receiver))
}

/// `shm-relay`: the sender's and the receiver's bare ring pairs to a relay thread.
pub(super) fn shm_relay_pair(
    args: &StreamArgs,
    yields: bool,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    let map = || tickwire_shm::bare_pair(RING).context("mapping a bare shared-memory ring pair");
    let (tx, relay_a) = map()?;
    let (rx, relay_b) = map()?;
    // With --idle block the receiver announces its sleep in the ring and parks; the
    // relay wakes it (one futex wake, as the router's eventfd doorbell).
    let block = args.idle == IdleStrategy::Block;
    let receiver = spawn_receiver(args, rx, Idle::new(yields, block), quit)?;
    let wake = block.then(|| receiver.handle.thread().clone());
    let relay = Relay::start(relay_a, relay_b, wake, args.pin.map(|p| p.far))?;
    Ok((Box::new(RelaySender::new(tx, args.size, relay)), receiver))
}

/// What the receiver does after an empty poll.
#[derive(Clone, Copy)]
struct Idle {
    /// Yield the CPU (spin mode with spinners outnumbering cores).
    yields: bool,
    /// Announce the sleep in the ring and park until the relay wakes it (shm, block).
    parks: bool,
}

impl Idle {
    fn new(yields: bool, parks: bool) -> Idle {
        Idle { yields, parks }
    }
}

/// Longest park of the shm receiver (it looks at `quit` this often).
const PARK: Duration = Duration::from_millis(50);

/// The receiver thread on CPU NEAR: counts, reflects 1 in `--reflect-every` back
/// through the relay, ends at END or when `quit` is set. A TCP stream in blocking mode
/// sleeps in its read; otherwise `idle` says what to do after an empty poll.
fn spawn_receiver<P: Pipe + Park>(
    args: &StreamArgs,
    mut pipe: P,
    idle: Idle,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<Receiver> {
    let (every, size, near) = (args.reflect_every, args.size, args.pin.map(|p| p.near));
    let q = Arc::clone(&quit);
    let handle = harness::spawn_pinned(
        "relay-floor-receiver",
        near,
        move || -> anyhow::Result<RxOutcome> {
            let mut out = RxOutcome::default();
            let mut tracker = SeqTracker::default();
            let mut refl = Reflections::default();
            let mut framer = Framer::new(size);
            let mut frames = Vec::new();
            loop {
                let n = framer.fill(&mut pipe)?;
                if n > 0 {
                    // One clock read per read: every message of it had arrived.
                    let now = MonoNanos::now().as_nanos();
                    framer.frames(|p| refl.observe(p, now, every, &mut tracker, &mut out))?;
                }
                if refl.pending() {
                    for p in refl.iter() {
                        push_frame(&mut frames, p);
                        out.reflections_sent += 1;
                    }
                    refl.clear();
                    write_all(&mut pipe, &frames)?;
                    frames.clear();
                }
                if refl.ended || q.load(Ordering::Relaxed) {
                    return Ok(out);
                }
                if n == 0 {
                    if idle.parks {
                        if pipe.announce_sleep() {
                            std::thread::park_timeout(PARK);
                            pipe.withdraw_sleep();
                        }
                    } else {
                        idle_once(idle.yields);
                    }
                }
            }
        },
    )
    .context("spawning the relay floor's receiver")?;
    Ok(Receiver { handle, quit })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe over two in-memory byte queues, `chunk` bytes per call at most.
    struct Mem {
        inbox: std::collections::VecDeque<u8>,
        chunk: usize,
    }

    impl Pipe for Mem {
        fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.chunk).min(self.inbox.len());
            if n == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            for b in buf.iter_mut().take(n) {
                *b = self.inbox.pop_front().unwrap_or(0);
            }
            Ok(n)
        }
        fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn wait_readable(&self, _: Duration) {}
    }

    #[test]
    fn framer_reassembles_frames_split_at_any_byte() {
        let mut wire = Vec::new();
        for i in 0..50u8 {
            push_frame(&mut wire, &[i; 40]);
        }
        for chunk in [1, 3, 7, 44, 1000] {
            let mut p = Mem {
                inbox: wire.iter().copied().collect(),
                chunk,
            };
            let mut f = Framer::new(40);
            let mut got = Vec::new();
            while f.fill(&mut p).unwrap() > 0 {
                f.frames(|m| got.push(m.to_vec())).unwrap();
            }
            assert_eq!(got.len(), 50, "chunk {chunk}");
            for (i, m) in got.iter().enumerate() {
                assert_eq!(m, &vec![i as u8; 40], "chunk {chunk}");
            }
        }
    }

    #[test]
    fn framer_refuses_a_frame_longer_than_its_bound() {
        let mut wire = Vec::new();
        push_frame(&mut wire, &[0u8; 41]);
        let mut p = Mem {
            inbox: wire.into_iter().collect(),
            chunk: 1000,
        };
        let mut f = Framer::new(40);
        f.fill(&mut p).unwrap();
        let e = f.frames(|_| {}).unwrap_err();
        assert!(e.to_string().contains("41 bytes"), "{e}");
    }
}
