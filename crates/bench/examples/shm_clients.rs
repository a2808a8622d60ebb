//! What the client library adds to issue 15's shared-memory ping-pong: the same
//! ping-pong through a running router (`tickwire router --shm NAME`) with two kinds of
//! client ends, alternating, so that the router and the machine's state are the same
//! for both:
//!
//! - `lib`: A and B are `tickwire_client::Client`s (`publish`, `recv(Wait::NoWait)`),
//!   as in `tickwire bench pingpong --transports tickwire-shm`;
//! - `lean`: A and B speak the protocol over the bare `tickwire_shm::ClientLink`
//!   themselves: HELLO and SUBSCRIBE once, then each PUBLISH is a frame encoded once
//!   before the run with the ping's number patched in, and a MESSAGE is taken by its
//!   length field alone. The least a client end can do: a floor, not a client.
//!
//! The measuring thread plays A and B (the bench's `--echo same-thread` layout): A
//! publishes the ping to `bench/ping`, B receives it and publishes it back to
//! `bench/pong`, A receives it. Pin the router to the other CPU:
//!
//! ```sh
//! cargo build --release -p tickwire-bench --example shm_clients
//! nice -n -20 taskset -c 1 tickwire router --listen 127.0.0.1:0 --idle spin --shm pp &
//! nice -n -20 taskset -c 0 target/release/examples/shm_clients pp [ITERATIONS] [ROUNDS]
//! ```
//!
//! Prints the p50 and p99 half round trips of each, per round.

// A measuring program: its output is its report.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use anyhow::{bail, Context};
use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_rt::time::MonoNanos;
use tickwire_shm::ClientLink;
use tickwire_wire::frame::{self, Kind, PublishOptions};

const SIZE: usize = 100;
const WARMUP: usize = 2_000;
const MAX_FRAME: u32 = 1 << 20;
const TIMEOUT_NS: u64 = 2_000_000_000;
const PING: &str = "bench/ping";
const PONG: &str = "bench/pong";

fn now() -> u64 {
    MonoNanos::now().as_nanos()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(name) = args.get(1) else {
        bail!("usage: shm_clients NAME [ITERATIONS] [ROUNDS] (NAME: the router's --shm)");
    };
    let iterations: usize = args.get(2).map_or(Ok(20_000), |s| s.parse())?;
    let rounds: usize = args.get(3).map_or(Ok(3), |s| s.parse())?;
    if iterations == 0 {
        bail!("ITERATIONS must be at least 1");
    }
    println!("half round trip, µs ({iterations} pings of {SIZE} B after {WARMUP} warm-up)");
    for round in 1..=rounds {
        let lib = summary(library(name, iterations)?);
        let lean = summary(lean(name, iterations)?);
        println!(
            "round {round}: lib p50 {:.3} p99 {:.3} | lean p50 {:.3} p99 {:.3} | lib - lean p50 {:+.3}",
            lib.0,
            lib.1,
            lean.0,
            lean.1,
            lib.0 - lean.0
        );
    }
    Ok(())
}

/// p50 and p99 half round trips (µs) of round trips in ns.
fn summary(mut rtts: Vec<u64>) -> (f64, f64) {
    rtts.sort_unstable();
    let at = |q: f64| {
        let i = ((rtts.len() as f64 * q) as usize).min(rtts.len() - 1);
        rtts[i] as f64 / 2_000.0
    };
    (at(0.5), at(0.99))
}

fn library(name: &str, iterations: usize) -> anyhow::Result<Vec<u64>> {
    let connect = |client: &str, pattern: &str| -> anyhow::Result<Client> {
        let opts = ClientOptions {
            name: client.to_owned(),
            batch_bytes: 0,
            ..ClientOptions::default()
        };
        let mut c = Client::connect_to(&format!("shm:{name}"), opts)
            .with_context(|| format!("connecting to shm:{name}"))?;
        c.subscribe(pattern)?;
        Ok(c)
    };
    let mut b = connect("shm-clients-b", PING)?;
    let mut a = connect("shm-clients-a", PONG)?;
    // Both subscriptions are in place once each client's SUBSCRIBE was answered.
    let mut ping = vec![7u8; SIZE];
    let mut echo = Vec::with_capacity(SIZE);
    let mut rtts = Vec::with_capacity(iterations);
    for i in 0..WARMUP + iterations {
        ping[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let t0 = now();
        a.publish(PING, &ping)?;
        loop {
            if let Some(m) = b.recv(Wait::NoWait)? {
                echo.clear();
                echo.extend_from_slice(m.payload());
                break;
            }
            std::hint::spin_loop();
            if now() - t0 > TIMEOUT_NS {
                bail!("no ping at B");
            }
        }
        b.publish(PONG, &echo)?;
        let t1 = loop {
            if let Some(m) = a.recv(Wait::NoWait)? {
                let t1 = now();
                if m.payload() != ping {
                    bail!("the pong is not the ping");
                }
                break t1;
            }
            std::hint::spin_loop();
            if now() - t0 > TIMEOUT_NS {
                bail!("no pong at A");
            }
        };
        if i >= WARMUP {
            rtts.push(t1 - t0);
        }
    }
    a.close()?;
    b.close()?;
    Ok(rtts)
}

/// A bare link that has said HELLO and subscribed to `pattern`, its WELCOME and the
/// SUBSCRIBE's ACK read.
fn lean_client(name: &str, client: &str, pattern: &str) -> anyhow::Result<ClientLink> {
    let path = tickwire_shm::socket_path(name);
    let mut link = ClientLink::connect(&path, Duration::from_secs(2))
        .with_context(|| format!("connecting to {}", path.display()))?;
    let mut out = Vec::new();
    frame::encode_hello(&mut out, frame::PROTOCOL_VERSION, client);
    frame::encode_subscribe(&mut out, 1, pattern);
    send_all(&mut link, &out)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut have = 0;
    let t0 = now();
    for want in [Kind::Welcome, Kind::Ack] {
        loop {
            if let Ok(Some(len)) = frame::frame_len(&buf[..have], MAX_FRAME) {
                if have >= len {
                    if buf[4] != want as u8 {
                        bail!("{client}: expected {want:?}, got frame kind {:#x}", buf[4]);
                    }
                    buf.copy_within(len..have, 0);
                    have -= len;
                    break;
                }
            }
            match link.recv(&mut buf[have..]) {
                Ok(0) => bail!("{client}: the router closed the connection"),
                Ok(n) => have += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            if now() - t0 > TIMEOUT_NS {
                bail!("{client}: no {want:?} from the router");
            }
        }
    }
    Ok(link)
}

fn send_all(link: &mut ClientLink, mut bytes: &[u8]) -> anyhow::Result<()> {
    let t0 = now();
    while !bytes.is_empty() {
        match link.send(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        if now() - t0 > TIMEOUT_NS {
            bail!("the router's ring stayed full");
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes (one MESSAGE of a known length), spinning.
fn recv_exact(link: &mut ClientLink, buf: &mut [u8], t0: u64) -> anyhow::Result<()> {
    let mut have = 0;
    while have < buf.len() {
        match link.recv(&mut buf[have..]) {
            Ok(0) => bail!("the router closed the connection"),
            Ok(n) => have += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::hint::spin_loop();
                if now() - t0 > TIMEOUT_NS {
                    bail!("no message within 2 s");
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn lean(name: &str, iterations: usize) -> anyhow::Result<Vec<u64>> {
    let mut b = lean_client(name, "shm-clients-lean-b", PING)?;
    let mut a = lean_client(name, "shm-clients-lean-a", PONG)?;
    let payload = [7u8; SIZE];
    let mut ping = Vec::new();
    frame::encode_publish(
        &mut ping,
        PING,
        &payload,
        PublishOptions::default(),
        MAX_FRAME,
    )?;
    let mut pong = Vec::new();
    frame::encode_publish(
        &mut pong,
        PONG,
        &payload,
        PublishOptions::default(),
        MAX_FRAME,
    )?;
    // A plain MESSAGE is its PUBLISH with the kind changed: same length, payload last.
    let len = ping.len();
    let at = len - SIZE;
    let mut got = vec![0u8; len];
    let mut rtts = Vec::with_capacity(iterations);
    for i in 0..WARMUP + iterations {
        ping[at..at + 8].copy_from_slice(&(i as u64).to_le_bytes());
        let t0 = now();
        send_all(&mut a, &ping)?;
        recv_exact(&mut b, &mut got, t0)?;
        if got[4] != Kind::Message as u8 {
            bail!("B got frame kind {:#x}, not a MESSAGE", got[4]);
        }
        pong[at..].copy_from_slice(&got[at..]);
        send_all(&mut b, &pong)?;
        recv_exact(&mut a, &mut got, t0)?;
        let t1 = now();
        if got[4] != Kind::Message as u8 || got[at..] != ping[at..] {
            bail!("the pong is not the ping");
        }
        if i >= WARMUP {
            rtts.push(t1 - t0);
        }
    }
    Ok(rtts)
}
