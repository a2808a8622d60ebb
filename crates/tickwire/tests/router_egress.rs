//! The router-wide egress bound (`--egress-memory-limit`) against the real `tickwire
//! router` binary on loopback: subscribers to `>` that never read, while a publisher
//! floods and a subscriber reads every message as it comes. The non-readers are cut
//! (or lose their oldest messages) once all egress buffers together reach the limit,
//! the router's own figure for those buffers stays within the documented bound, and the
//! reader gets everything. Counts and the router's counters only, never durations.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{RouterLog, RouterProc};
use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_router::{Config, SlowConsumerPolicy};
use tickwire_wire::frame;

const T: Duration = Duration::from_secs(10);
/// Non-reading subscribers.
const HOGS: usize = 10;
/// The flood, in rounds of `ROUND` messages the reader receives before the next round
/// (so its own queue never holds more than a round: it reads promptly).
const ROUND: u64 = 64;
const MAX_ROUNDS: u64 = 1_000;

/// The router's flags, and the same configuration for `Config::egress_memory_bound`.
fn router_args(policy: &str) -> (Vec<&'static str>, Config) {
    let args = vec![
        "--egress-memory-limit",
        "4MiB",
        "--max-clients",
        "32",
        "--max-frame",
        "64KiB",
        "--slow-consumer",
        if policy == "discard" {
            "discard"
        } else {
            "disconnect"
        },
    ];
    let cfg = Config {
        egress_memory_limit: 4 << 20,
        max_clients: 32,
        max_frame: 64 << 10,
        slow_consumer: if policy == "discard" {
            SlowConsumerPolicy::Discard
        } else {
            SlowConsumerPolicy::Disconnect
        },
        ..Config::default()
    };
    (args, cfg)
}

/// How a wait for the router to close a connection ended: a close and silence are
/// different outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Eof,
    Reset,
    Timeout,
}

/// Reads and drops everything until the router closes the connection (EOF or reset),
/// or until `limit` passes with nothing arriving (`Timeout`: still open).
fn wait_closed(s: &mut TcpStream, limit: Duration) -> Ended {
    let mut tmp = vec![0u8; 1 << 16];
    s.set_read_timeout(Some(limit)).unwrap();
    loop {
        match s.read(&mut tmp) {
            Ok(0) => return Ended::Eof,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                return Ended::Timeout
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Ended::Reset,
        }
    }
}

/// A subscriber to `>` that never reads, with a small receive buffer so the kernel
/// holds little of what the router sends it.
fn hog(addr: SocketAddr, i: usize) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    let mut b = Vec::new();
    frame::encode_hello(&mut b, frame::PROTOCOL_VERSION, &format!("hog-{i}"));
    frame::encode_subscribe(&mut b, 1, ">");
    s.write_all(&b).unwrap();
    s
}

fn stats(observer: &mut Client) -> serde_json::Value {
    serde_json::from_str(&observer.stats_json().expect("stats")).expect("stats json")
}

/// What the flood saw.
struct Flood {
    /// Messages the reader received, all in order with no discards.
    received: u64,
    /// The largest `egress_bytes` the router reported.
    peak: u64,
    /// The router's stats at the end.
    last: serde_json::Value,
}

/// Floods `flood/x` in rounds (100 B to 1 KiB messages) while the reader takes every
/// message of each round; every 10 rounds reads the router's stats and checks its
/// egress figure against `bound`; stops when `done` says so or after `MAX_ROUNDS`.
fn flood(addr: SocketAddr, bound: u64, done: impl Fn(&serde_json::Value) -> bool) -> Flood {
    let mut reader = Client::connect_with(addr, ClientOptions::named("reader")).unwrap();
    reader.subscribe("flood/>").unwrap();
    let mut publisher = Client::connect_with(addr, ClientOptions::named("flooder")).unwrap();
    let mut observer = Client::connect_with(addr, ClientOptions::named("observer")).unwrap();
    let payload = vec![7u8; 1024];
    let mut sent = 0u64;
    let mut received = 0u64;
    let mut peak = 0;
    let mut last = stats(&mut observer);
    for round in 0..MAX_ROUNDS {
        for _ in 0..ROUND {
            let size = 100 + (sent as usize * 389) % 925;
            let mut p = payload[..size].to_vec();
            p[..8].copy_from_slice(&sent.to_le_bytes());
            publisher.publish("flood/x", &p).unwrap();
            sent += 1;
        }
        publisher.flush().unwrap();
        let deadline = Instant::now() + T;
        while received < sent && Instant::now() < deadline {
            reader
                .poll(Wait::Timeout(Duration::from_millis(50)), |m| {
                    let seq = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                    assert_eq!(seq, received, "the reader: gap or reorder");
                    assert_eq!(m.discarded(), 0, "the reader: discards");
                    received += 1;
                })
                .expect("the reader's poll");
        }
        assert_eq!(received, sent, "the reader lost messages");
        if round % 10 == 9 {
            last = stats(&mut observer);
            let egress = last["router"]["egress_bytes"].as_u64().unwrap();
            assert!(
                egress <= bound,
                "egress_bytes {egress} over the bound {bound}"
            );
            peak = peak.max(egress);
            if done(&last) {
                break;
            }
        }
    }
    Flood {
        received,
        peak,
        last,
    }
}

#[test]
fn non_readers_are_cut_at_the_router_wide_bound_while_a_reader_gets_everything() {
    let (args, cfg) = router_args("disconnect");
    let bound = cfg.egress_memory_bound();
    let (r, log): (RouterProc, RouterLog) = RouterProc::start_logged(&args);
    let mut hogs: Vec<TcpStream> = (0..HOGS).map(|i| hog(r.addr, i)).collect();
    let f = flood(r.addr, bound, |st| {
        st["router"]["totals"]["memory_disconnects"].as_u64() == Some(HOGS as u64)
    });
    let t = &f.last["router"]["totals"];
    assert_eq!(t["memory_disconnects"], HOGS as u64, "{t}");
    assert_eq!(t["disconnects_error"], HOGS as u64, "{t}");
    assert!(f.received >= ROUND * 10);
    // Without the bound each would queue up to its egress_limit (8 MiB): 80 MiB.
    assert!(f.peak <= bound, "peak {} bound {bound}", f.peak);
    // The log says which bound cut them.
    let line = log
        .wait_for(&["hog-", "egress_memory_limit", "disconnecting"], T)
        .unwrap_or_else(|| panic!("no disconnect line naming the bound:\n{}", log.text()));
    assert!(line.contains("its share"), "{line}");
    // Every hog was closed by the router, not left silent. (The fatal ERROR sits
    // behind what the kernel holds for it and may be lost to a reset at the linger:
    // the router's count above is exact.)
    for (i, s) in hogs.iter_mut().enumerate() {
        assert_ne!(
            wait_closed(s, T),
            Ended::Timeout,
            "hog {i} was never closed"
        );
    }
}

#[test]
fn non_readers_lose_their_oldest_messages_at_the_router_wide_bound_under_discard() {
    let (args, cfg) = router_args("discard");
    let bound = cfg.egress_memory_bound();
    let (r, log): (RouterProc, RouterLog) = RouterProc::start_logged(&args);
    let hogs: Vec<TcpStream> = (0..HOGS).map(|i| hog(r.addr, i)).collect();
    // Until every hog has lost messages to the bound for 20 more rounds.
    let f = flood(r.addr, bound, |st| {
        st["router"]["totals"]["memory_discards"].as_u64() > Some(20 * ROUND * HOGS as u64)
    });
    let rt = &f.last["router"];
    let t = &rt["totals"];
    assert!(t["memory_discards"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["memory_disconnects"], 0, "{t}");
    assert_eq!(t["disconnects_error"], 0, "{t}");
    // The hogs, the reader, the publisher and the observer are all still connected.
    assert_eq!(rt["clients"], HOGS as u64 + 3, "{rt}");
    assert!(f.peak <= bound, "peak {} bound {bound}", f.peak);
    let line = log
        .wait_for(&["hog-", "egress_memory_limit", "discarding"], T)
        .unwrap_or_else(|| panic!("no discard line naming the bound:\n{}", log.text()));
    assert!(line.contains("its share"), "{line}");
    drop(hogs);
}
