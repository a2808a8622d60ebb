//! One-way latency through the router next to the raw TCP floor, in one run.
//!
//! ```sh
//! cargo build --release -p tickwire -p tickwire-bench --bins --examples
//! target/release/examples/latency --rate 10000 --secs 10 --size 100
//! ```
//!
//! 1. Raw TCP ping-pong (no tickwire code): an echo thread on CPU `--far-cpu` and a
//!    pinger on CPU `--near-cpu`, both busy-polling non-blocking sockets; half the
//!    round trip is the one-hop floor.
//! 2. One raw TCP hop, one way, paced at `--rate`; the rows under it time the receiver's
//!    `read()` calls that returned data. A receiver of one-way traffic sends a pure ACK
//!    from inside `read()` (Linux `tcp_cleanup_rbuf`): for every small segment by
//!    default, for every second one in delayed-ACK mode (`--raw-delayed-acks`, the mode
//!    tickwire's sockets are in after their request/answer handshake). Ping-pong never
//!    pays it: its ACKs ride on the replies. The slow mode of `read()` is that ACK.
//! 3. Two raw TCP hops through a minimal relay: the router's path without the router
//!    (its two readers in delayed-ACK mode too with `--raw-delayed-acks`).
//! 4. The real `tickwire router --idle spin` (or `--idle`), the binary next to this
//!    example, started on a free port and pinned to `--far-cpu` with `taskset`.
//! 5. A paced publisher (`--rate` msg/s, open loop) and a subscriber, in one busy-polling
//!    thread on `--near-cpu` (publish when a message is due, poll otherwise); one clock.
//!    Latency is reported from the publisher's send stamp and from the intended send
//!    time.
//!
//! With `--shm`, the router also listens on shared memory and both clients connect
//! with `shm:NAME` (docs/shm.md); a raw shared-memory ping-pong (a bare ring pair, two
//! spinning threads on the two CPUs, no router) is measured first as that transport's
//! floor, and the p50 is also given as a ratio to it.
//!
//! This is the simple, honest measurement for the router milestone; the full suite is
//! `tickwire bench` (later).

// An example is a small program: it prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// An example stops at the first surprise: unwrap/expect are its error handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use tickwire_rt::MonoNanos;

use hdrhistogram::Histogram;
use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_wire::frame::PublishOptions;

struct Args {
    rate: u64,
    secs: u64,
    size: usize,
    near_cpu: usize,
    far_cpu: usize,
    pings: u64,
    idle: String,
    raw_delayed_acks: bool,
    shm: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        rate: 10_000,
        secs: 10,
        size: 100,
        near_cpu: 0,
        far_cpu: 1,
        pings: 100_000,
        idle: "spin".into(),
        raw_delayed_acks: false,
        shm: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        let n = || {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("{}: not a number", argv[i]))
        };
        match argv[i].as_str() {
            "--rate" => a.rate = n(),
            "--secs" => a.secs = n(),
            "--size" => a.size = n() as usize,
            "--near-cpu" => a.near_cpu = n() as usize,
            "--far-cpu" => a.far_cpu = n() as usize,
            "--pings" => a.pings = n(),
            "--idle" => a.idle = v.clone(),
            "--raw-delayed-acks" => {
                a.raw_delayed_acks = true;
                i += 1;
                continue;
            }
            "--shm" => {
                a.shm = true;
                i += 1;
                continue;
            }
            "-h" | "--help" => {
                println!("latency [--rate 10000] [--secs 10] [--size 100] [--pings 100000] [--near-cpu 0] [--far-cpu 1] [--idle spin|hybrid|block] [--raw-delayed-acks] [--shm]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other} (see --help)"),
        }
        i += 2;
    }
    a
}

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("warning: cannot pin to CPU {cpu}: {e}");
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn row(name: &str, h: &Histogram<u64>) {
    let us = |v: u64| v as f64 / 1000.0;
    println!(
        "{name:<44} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2}",
        h.len(),
        us(h.min()),
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        h.mean() / 1000.0,
        us(h.max())
    );
}

/// Keeps a raw receiver in delayed-ACK mode (`TCP_QUICKACK` off) when asked. The kernel
/// leaves that mode whenever its delayed-ACK timer fires, so it is re-armed now and then:
/// one `setsockopt` per 5 ms, not one per read.
struct DelayedAcks {
    on: bool,
    armed_at: u64,
}

impl DelayedAcks {
    fn new(on: bool) -> DelayedAcks {
        DelayedAcks { on, armed_at: 0 }
    }

    fn after_read(&mut self, s: &TcpStream, now: u64) {
        if self.on && now - self.armed_at > 5_000_000 {
            rustix::net::sockopt::set_tcp_quickack(s, false).ok();
            self.armed_at = now;
        }
    }
}

/// The middle of a distribution: a bimodal one (some reads send an ACK, some do not)
/// shows as a jump between quartiles.
fn quartiles(name: &str, h: &Histogram<u64>) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{name:<44} {:>9} {:>8.2} / {:.2} / {:.2}",
        "",
        us(0.25),
        us(0.5),
        us(0.75)
    );
}

/// Busy-polls a non-blocking socket until `buf` is full.
fn read_exact_spin(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("peer closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn raw_pingpong(a: &Args) -> Histogram<u64> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (size, total, far) = (a.size, a.pings + a.pings / 10, a.far_cpu);
    let echo = std::thread::spawn(move || {
        pin(far);
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).ok();
        s.set_nonblocking(true).ok();
        let mut buf = vec![0u8; size];
        for _ in 0..total {
            read_exact_spin(&mut s, &mut buf);
            s.write_all(&buf).expect("echo write");
        }
    });
    pin(a.near_cpu);
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    s.set_nonblocking(true).ok();
    let mut buf = vec![7u8; a.size];
    let mut h = hist();
    for i in 0..total {
        let t0 = MonoNanos::now().as_nanos();
        s.write_all(&buf).expect("ping write");
        read_exact_spin(&mut s, &mut buf);
        if i >= a.pings / 10 {
            h.saturating_record((MonoNanos::now().as_nanos() - t0) / 2);
        }
    }
    echo.join().expect("echo thread");
    h
}

/// One raw TCP hop, one way, paced like the router test: the near CPU sends, a thread
/// on the far CPU busy-polls and records the latency (same clock) and how long each
/// `read()` that returned data took.
fn raw_oneway(a: &Args) -> (Histogram<u64>, Histogram<u64>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (far, total, size) = (a.far_cpu, a.rate * a.secs, a.size.max(8));
    let mut acks = DelayedAcks::new(a.raw_delayed_acks);
    let rx = std::thread::spawn(move || {
        pin(far);
        let (mut s, _) = l.accept().expect("accept");
        s.set_nonblocking(true).ok();
        let mut h = hist();
        let mut reads = hist();
        let mut buf = vec![0u8; 65536];
        let mut pending: Vec<u8> = Vec::new();
        let mut received = 0u64;
        while received < total {
            let before = MonoNanos::now().as_nanos();
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let now = MonoNanos::now().as_nanos();
                    if received >= total / 10 {
                        reads.saturating_record(now - before);
                    }
                    acks.after_read(&s, now);
                    pending.extend_from_slice(&buf[..n]);
                    while pending.len() >= size {
                        let t = u64::from_le_bytes(pending[..8].try_into().unwrap_or([0; 8]));
                        if received >= total / 10 {
                            h.saturating_record(now.saturating_sub(t));
                        }
                        received += 1;
                        pending.drain(..size);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("read: {e}"),
            }
        }
        (h, reads)
    });
    pin(a.near_cpu);
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    let mut msg = vec![0u8; size];
    let start = MonoNanos::now().as_nanos() + 10_000_000;
    for i in 0..total {
        let due = start + i * 1_000_000_000 / a.rate;
        while MonoNanos::now().as_nanos() < due {
            std::hint::spin_loop();
        }
        msg[..8].copy_from_slice(&MonoNanos::now().as_nanos().to_le_bytes());
        s.write_all(&msg).expect("send");
    }
    rx.join().expect("receiver thread")
}

/// Two raw TCP hops through a minimal forwarder (no tickwire code): the measuring thread
/// on the near CPU sends paced messages to a relay thread on the far CPU, which
/// busy-polls and writes each chunk to a second socket read by the measuring thread.
/// The same pattern as the router path, minus the router.
fn raw_relay(a: &Args) -> Histogram<u64> {
    let l_in = TcpListener::bind("127.0.0.1:0").expect("bind");
    let l_out = TcpListener::bind("127.0.0.1:0").expect("bind");
    let (in_addr, out_addr) = (
        l_in.local_addr().expect("addr"),
        l_out.local_addr().expect("addr"),
    );
    let far = a.far_cpu;
    let total = a.rate * a.secs;
    let size = a.size.max(8);
    let mut relay_acks = DelayedAcks::new(a.raw_delayed_acks);
    let mut back_acks = DelayedAcks::new(a.raw_delayed_acks);
    let relay = std::thread::spawn(move || {
        pin(far);
        let (mut rx, _) = l_in.accept().expect("accept in");
        let (mut tx, _) = l_out.accept().expect("accept out");
        for s in [&rx, &tx] {
            s.set_nodelay(true).ok();
        }
        rx.set_nonblocking(true).ok();
        let mut buf = vec![0u8; 65536];
        let mut moved = 0u64;
        while moved < total * size as u64 {
            match rx.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    tx.write_all(&buf[..n]).expect("relay write");
                    moved += n as u64;
                    relay_acks.after_read(&rx, MonoNanos::now().as_nanos());
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("relay read: {e}"),
            }
        }
    });
    pin(a.near_cpu);
    let mut out = TcpStream::connect(in_addr).expect("connect in");
    let mut back = TcpStream::connect(out_addr).expect("connect out");
    for s in [&out, &back] {
        s.set_nodelay(true).ok();
    }
    back.set_nonblocking(true).ok();
    let mut h = hist();
    let mut msg = vec![0u8; size];
    let mut inbuf = vec![0u8; 65536];
    let mut pending: Vec<u8> = Vec::new();
    let (mut sent, mut received) = (0u64, 0u64);
    let start = MonoNanos::now().as_nanos() + 10_000_000;
    let warm = total / 10;
    while received < total {
        if sent < total && MonoNanos::now().as_nanos() >= start + sent * 1_000_000_000 / a.rate {
            msg[..8].copy_from_slice(&MonoNanos::now().as_nanos().to_le_bytes());
            out.write_all(&msg).expect("send");
            sent += 1;
        }
        match back.read(&mut inbuf) {
            Ok(0) => break,
            Ok(n) => {
                let now = MonoNanos::now().as_nanos();
                back_acks.after_read(&back, now);
                pending.extend_from_slice(&inbuf[..n]);
                while pending.len() >= size {
                    let t = u64::from_le_bytes(pending[..8].try_into().unwrap_or([0; 8]));
                    if received >= warm {
                        h.saturating_record(now.saturating_sub(t));
                    }
                    received += 1;
                    pending.drain(..size);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    relay.join().expect("relay thread");
    h
}

fn main() {
    let a = parse_args();
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("tickwire"))
        .expect("target dir");
    println!(
        "machine: {} cores; near CPU {}, far CPU {}; {}-byte messages",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        a.near_cpu,
        a.far_cpu,
        a.size
    );
    println!(
        "\n{:<44} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "µs", "samples", "min", "p50", "p99", "p99.9", "mean", "max"
    );
    let raw = raw_pingpong(&a);
    row("raw TCP ping-pong, half round trip (spin)", &raw);
    let (oneway, reads) = raw_oneway(&a);
    let acks = if a.raw_delayed_acks {
        "delayed ACKs"
    } else {
        "default ACKs"
    };
    row(
        &format!("raw TCP one-way, 1 hop @{} msg/s, {acks}", a.rate),
        &oneway,
    );
    quartiles("  the same, p25 / p50 / p75", &oneway);
    row("  receiver's read() returning data", &reads);
    quartiles("  the same, p25 / p50 / p75", &reads);
    let relay = raw_relay(&a);
    row(
        &format!("raw TCP relay, 2 hops one-way @{} msg/s, {acks}", a.rate),
        &relay,
    );

    let raw_shm = a.shm.then(|| {
        let h = raw_shm_pingpong(&a);
        row("raw shm ping-pong, half round trip (spin)", &h);
        h
    });

    // The real router, pinned to the far CPU.
    let shm_name = format!("latency-{}", std::process::id());
    let mut router_args = vec!["router", "--listen", "127.0.0.1:0", "--idle", &a.idle];
    if a.shm {
        router_args.extend(["--shm", &shm_name]);
    }
    let mut child = Command::new("taskset")
        .args(["-c", &a.far_cpu.to_string()])
        .arg(&bin)
        .args(&router_args)
        .env("TICKWIRE_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {} under taskset: {e}", bin.display()));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("router banner");
    let addr: std::net::SocketAddr = line
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("router address");

    pin(a.near_cpu);
    let target = if a.shm {
        format!("shm:{shm_name}")
    } else {
        addr.to_string()
    };
    let mut sub = Client::connect_to(&target, ClientOptions::named("latency-sub"))
        .expect("subscriber connect");
    sub.subscribe("lat/>").expect("subscribe");
    let opts = ClientOptions {
        name: "latency-pub".into(),
        batch_bytes: 0,
        ..ClientOptions::default()
    };
    let mut publ = Client::connect_to(&target, opts).expect("publisher connect");
    let total = a.rate * a.secs;
    let warm = total / 10;
    // One thread publishes on schedule and busy-polls the subscriber in between: no
    // sleeps and no context switches on the measuring CPU.
    let mut payload = vec![0u8; a.size.max(8)];
    let mut from_send = hist();
    let mut from_intended = hist();
    let mut router_hop = hist();
    let mut hop_in = hist();
    let mut hop_out = hist();
    let mut received = 0u64;
    let mut sent = 0u64;
    let start = MonoNanos::now().as_nanos() + 10_000_000;
    let deadline = start + (a.secs + 30) * 1_000_000_000;
    while received < total && MonoNanos::now().as_nanos() < deadline {
        if sent < total {
            let intended = start + sent * 1_000_000_000 / a.rate;
            if MonoNanos::now().as_nanos() >= intended {
                payload[..8].copy_from_slice(&intended.to_le_bytes());
                let send = PublishOptions {
                    seq: Some(sent),
                    publisher_send: Some(MonoNanos::now().as_nanos()),
                };
                publ.publish_with("lat/x", &payload, send).expect("publish");
                sent += 1;
            }
        }
        sub.poll(Wait::NoWait, |m| {
            let now = MonoNanos::now().as_nanos();
            let i = m.seq().unwrap_or(0);
            received += 1;
            if i < warm {
                return;
            }
            let intended = u64::from_le_bytes(m.payload()[..8].try_into().unwrap_or([0; 8]));
            from_intended.saturating_record(now.saturating_sub(intended));
            if let Some(st) = m.stamps() {
                from_send.saturating_record(now.saturating_sub(st.publisher_send));
                router_hop.saturating_record(st.router_out.saturating_sub(st.router_in));
                hop_in.saturating_record(st.router_in.saturating_sub(st.publisher_send));
                hop_out.saturating_record(now.saturating_sub(st.router_out));
            }
        })
        .expect("poll");
    }
    row(
        &format!(
            "tickwire ({}{}) one-way @{} msg/s, from send",
            a.idle,
            if a.shm { ", shm" } else { "" },
            a.rate
        ),
        &from_send,
    );
    quartiles("  the same, p25 / p50 / p75", &from_send);
    row("tickwire one-way, from intended send time", &from_intended);
    row("  publisher send -> router read", &hop_in);
    row("  router read -> queued for the subscriber", &router_hop);
    row("  queued -> subscriber received", &hop_out);
    let raw50 = raw.value_at_quantile(0.5) as f64;
    println!(
        "\nreceived {received} of {total} (first {warm} are warm-up, excluded); p50 ratio tickwire/raw = {:.2}; tickwire/relay = {:.2}",
        from_send.value_at_quantile(0.5) as f64 / raw50,
        from_send.value_at_quantile(0.5) as f64 / relay.value_at_quantile(0.5) as f64
    );
    if let Some(h) = &raw_shm {
        println!(
            "p50 ratio tickwire/raw shm ping-pong = {:.2}",
            from_send.value_at_quantile(0.5) as f64 / h.value_at_quantile(0.5) as f64
        );
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Half round trips over a bare shared-memory ring pair: an echo thread on the far CPU
/// and the pinger on the near CPU, both spinning (no router, no doorbells).
fn raw_shm_pingpong(a: &Args) -> Histogram<u64> {
    let (mut near, mut far) = tickwire_shm::bare_pair(1 << 20).expect("bare ring pair");
    let size = a.size.max(8);
    let total = a.pings + a.pings / 10;
    let far_cpu = a.far_cpu;
    let echo = std::thread::spawn(move || {
        pin(far_cpu);
        let mut buf = vec![0u8; size];
        for _ in 0..total {
            let mut got = 0;
            while got < size {
                got += far.rx.read(&mut buf[got..]).expect("echo read");
            }
            let mut sent = 0;
            while sent < size {
                sent += far.tx.write(&buf[sent..]).expect("echo write");
            }
        }
    });
    pin(a.near_cpu);
    let mut h = hist();
    let msg = vec![1u8; size];
    let mut back = vec![0u8; size];
    for i in 0..total {
        let t0 = MonoNanos::now().as_nanos();
        let mut sent = 0;
        while sent < size {
            sent += near.tx.write(&msg[sent..]).expect("ping write");
        }
        let mut got = 0;
        while got < size {
            got += near.rx.read(&mut back[got..]).expect("ping read");
        }
        if i >= a.pings / 10 {
            h.saturating_record((MonoNanos::now().as_nanos() - t0) / 2);
        }
    }
    echo.join().expect("echo thread");
    h
}
