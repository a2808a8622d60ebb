//! How little a shared-memory topic router can cost: issue 15's ping-pong bar set
//! against the least work any router of this topology must do.
//!
//! Three ping-pongs over the same bare rings (`tickwire_shm::bare_pair`), the
//! measuring thread on one CPU, the far party spinning on the other, as in `tickwire
//! bench pingpong`:
//!
//! - `raw`: a bare ring pair to an echo thread (the `shm` floor);
//! - `relay`: clients A and B each with a ring pair to a relay thread that copies A's
//!   bytes to B and B's to A (the `shm-relay` floor);
//! - `minimal`: the same topology with the least a topic router does per message:
//!   the clients frame each message (length, kind, topic) and the router copies the
//!   bytes out of the (hostile) ring, finds each whole frame, checks its lengths, looks
//!   its topic up in a hash table (FNV-1a, no per-message allocation) to find the
//!   subscriber, and copies the frame into that subscriber's ring; the receiving client
//!   checks the header and takes the payload. No permissions, counters, slow-consumer
//!   policy, stamps or wake-ups: a floor, not a router.
//!
//! ```sh
//! cargo build --release -p tickwire-bench --example minrouter
//! nice -n -20 target/release/examples/minrouter [ITERATIONS] [ROUNDS]
//! ```
//!
//! Prints the p50 half round trip of each, per round (the three alternate), and the
//! ratios to `raw`.

// A measuring program: its output is its report.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context};
use tickwire_rt::time::MonoNanos;
use tickwire_shm::{bare_pair, BareEnd};

type Rx = tickwire_shm::ring::Consumer<Arc<tickwire_shm::Region>>;
type Tx = tickwire_shm::ring::Producer<Arc<tickwire_shm::Region>>;

const RING: usize = 1 << 20;
const SIZE: usize = 100;
const WARMUP: usize = 2_000;
const MAX_FRAME: usize = 64 * 1024;
const HEADER: usize = 6;

/// FNV-1a: a fast hash for short topics.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type Table = HashMap<Box<[u8]>, usize, BuildHasherDefault<Fnv>>;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    pin(0)?;
    println!("p50 half round trip, µs ({SIZE} B, {iterations} pings after {WARMUP})");
    println!("round  raw     relay   minimal  relay/raw  minimal/raw  minimal/relay");
    for round in 0..rounds {
        let raw = raw(iterations)?;
        let minimal = relayed(iterations, true)?;
        let relay = relayed(iterations, false)?;
        println!(
            "{round:>5}  {:.3}   {:.3}   {:.3}    {:.2}x      {:.2}x        {:.2}x",
            raw,
            relay,
            minimal,
            relay / raw,
            minimal / raw,
            minimal / relay
        );
    }
    Ok(())
}

fn pin(cpu: usize) -> anyhow::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).context("pinning")?;
    Ok(())
}

/// The far party: `turn` until told to stop, on CPU 1.
fn far(
    mut turn: impl FnMut(&mut [u8]) -> anyhow::Result<()> + Send + 'static,
) -> (Arc<AtomicBool>, JoinHandle<anyhow::Result<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    let h = std::thread::spawn(move || {
        pin(1)?;
        let mut buf = vec![0u8; 64 * 1024];
        while !done.load(Ordering::Relaxed) {
            turn(&mut buf)?;
        }
        Ok(())
    });
    (stop, h)
}

fn finish((stop, h): (Arc<AtomicBool>, JoinHandle<anyhow::Result<()>>)) -> anyhow::Result<()> {
    stop.store(true, Ordering::Relaxed);
    match h.join() {
        Ok(r) => r,
        Err(_) => bail!("far thread panicked"),
    }
}

fn write_all(to: &mut Tx, mut bytes: &[u8]) -> anyhow::Result<()> {
    while !bytes.is_empty() {
        let n = to.write(bytes)?;
        bytes = &bytes[n..];
        if n == 0 {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

fn read_exact(from: &mut Rx, buf: &mut [u8]) -> anyhow::Result<()> {
    let deadline = MonoNanos::now().as_nanos() + 1_000_000_000;
    let mut got = 0;
    while got < buf.len() {
        let n = from.read(&mut buf[got..])?;
        got += n;
        if n == 0 {
            if MonoNanos::now().as_nanos() > deadline {
                bail!("no reply within 1 s");
            }
            std::hint::spin_loop();
        }
    }
    Ok(())
}

fn p50_half(mut rtts: Vec<u64>) -> f64 {
    rtts.sort_unstable();
    rtts[rtts.len() / 2] as f64 / 2.0 / 1000.0
}

fn raw(iterations: usize) -> anyhow::Result<f64> {
    let (mut a, b) = bare_pair(RING)?;
    let BareEnd {
        rx: mut erx,
        tx: mut etx,
    } = b;
    let echo = far(move |buf| {
        let n = erx.read(buf)?;
        if n > 0 {
            write_all(&mut etx, &buf[..n])?;
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    });
    let ping = [0xA5u8; SIZE];
    let mut back = [0u8; SIZE];
    let mut rtts = Vec::with_capacity(iterations);
    for i in 0..WARMUP + iterations {
        let t0 = MonoNanos::now().as_nanos();
        write_all(&mut a.tx, &ping)?;
        read_exact(&mut a.rx, &mut back)?;
        let t1 = MonoNanos::now().as_nanos();
        if i >= WARMUP {
            rtts.push(t1 - t0);
        }
    }
    finish(echo)?;
    Ok(p50_half(rtts))
}

/// A router's input from one client: bytes copied out of its ring, whole frames
/// routed, a partial one kept.
struct Input {
    rx: Rx,
    buf: Vec<u8>,
    end: usize,
}

impl Input {
    /// Reads what the ring holds and routes each whole frame; returns bytes read.
    fn turn(&mut self, table: &Table, outs: &mut [Tx]) -> anyhow::Result<usize> {
        let n = self.rx.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Ok(0);
        }
        self.end += n;
        let mut at = 0;
        while self.end - at >= HEADER {
            let f = &self.buf[at..self.end];
            let len = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize;
            if !(HEADER..=MAX_FRAME).contains(&len) || f[4] != 1 {
                bail!("bad frame");
            }
            if f.len() < len {
                break;
            }
            let tlen = f[5] as usize;
            if tlen == 0 || HEADER + tlen > len {
                bail!("bad topic length");
            }
            let topic = &f[HEADER..HEADER + tlen];
            if let Some(&to) = table.get(topic) {
                let frame = &mut self.buf[at..at + len];
                frame[4] = 2;
                write_all(&mut outs[to], frame)?;
            }
            at += len;
        }
        self.buf.copy_within(at..self.end, 0);
        self.end -= at;
        Ok(n)
    }
}

/// Frames `payload` for `topic` into `out`.
fn encode(out: &mut Vec<u8>, topic: &[u8], payload: &[u8]) {
    out.clear();
    let len = (HEADER + topic.len() + payload.len()) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.push(1);
    out.push(topic.len() as u8);
    out.extend_from_slice(topic);
    out.extend_from_slice(payload);
}

/// Receives one whole frame into `buf` (one ring read when it is all there, as a
/// client reads what the ring holds) and returns its payload's range.
fn receive(rx: &mut Rx, buf: &mut [u8]) -> anyhow::Result<std::ops::Range<usize>> {
    let deadline = MonoNanos::now().as_nanos() + 1_000_000_000;
    let mut got = 0;
    loop {
        let n = rx.read(&mut buf[got..])?;
        got += n;
        if got >= HEADER {
            let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if !(HEADER..=MAX_FRAME).contains(&len) || buf[4] != 2 {
                bail!("bad frame from the router");
            }
            if got >= len {
                if got > len {
                    bail!("more than one frame (a ping-pong has one in flight)");
                }
                let tlen = buf[5] as usize;
                if HEADER + tlen > len {
                    bail!("bad topic length from the router");
                }
                return Ok(HEADER + tlen..len);
            }
        }
        if n == 0 {
            if MonoNanos::now().as_nanos() > deadline {
                bail!("no reply within 1 s");
            }
            std::hint::spin_loop();
        }
    }
}

fn relayed(iterations: usize, routed: bool) -> anyhow::Result<f64> {
    let (mut a, ra) = bare_pair(RING)?;
    let (mut b, rb) = bare_pair(RING)?;
    let far = if routed {
        let mut table = Table::default();
        // Subscriptions: B takes "bench/ping", A takes "bench/pong"; others unrouted.
        table.insert(Box::from(&b"bench/ping"[..]), 1);
        table.insert(Box::from(&b"bench/pong"[..]), 0);
        for i in 0..1_000 {
            table.insert(format!("other/{i}").into_bytes().into_boxed_slice(), 0);
        }
        let mut outs = [ra.tx, rb.tx];
        let mut ins = [
            Input {
                rx: ra.rx,
                buf: vec![0; 2 * MAX_FRAME],
                end: 0,
            },
            Input {
                rx: rb.rx,
                buf: vec![0; 2 * MAX_FRAME],
                end: 0,
            },
        ];
        far(move |_| {
            let n = ins[0].turn(&table, &mut outs)? + ins[1].turn(&table, &mut outs)?;
            if n == 0 {
                std::hint::spin_loop();
            }
            Ok(())
        })
    } else {
        let (mut rarx, mut ratx, mut rbrx, mut rbtx) = (ra.rx, ra.tx, rb.rx, rb.tx);
        far(move |buf| {
            let n = rarx.read(buf)?;
            if n > 0 {
                write_all(&mut rbtx, &buf[..n])?;
            }
            let m = rbrx.read(buf)?;
            if m > 0 {
                write_all(&mut ratx, &buf[..m])?;
            }
            if n + m == 0 {
                std::hint::spin_loop();
            }
            Ok(())
        })
    };
    let payload = [0xA5u8; SIZE];
    let mut frame = Vec::with_capacity(SIZE + 64);
    let mut got_b = vec![0u8; 2 * MAX_FRAME];
    let mut back = vec![0u8; 2 * MAX_FRAME];
    let mut plain_b = [0u8; SIZE];
    let mut plain_back = [0u8; SIZE];
    let mut rtts = Vec::with_capacity(iterations);
    for i in 0..WARMUP + iterations {
        let t0 = MonoNanos::now().as_nanos();
        if routed {
            encode(&mut frame, b"bench/ping", &payload);
            write_all(&mut a.tx, &frame)?;
            let r = receive(&mut b.rx, &mut got_b)?;
            encode(&mut frame, b"bench/pong", &got_b[r]);
            write_all(&mut b.tx, &frame)?;
            let r = receive(&mut a.rx, &mut back)?;
            if back[r][0] != 0xA5 {
                bail!("wrong pong");
            }
        } else {
            write_all(&mut a.tx, &payload)?;
            read_exact(&mut b.rx, &mut plain_b)?;
            write_all(&mut b.tx, &plain_b)?;
            read_exact(&mut a.rx, &mut plain_back)?;
        }
        let t1 = MonoNanos::now().as_nanos();
        if i >= WARMUP {
            rtts.push(t1 - t0);
        }
    }
    finish(far)?;
    Ok(p50_half(rtts))
}
