//! Issue 14 measurements against running routers (start them with the CLI):
//!
//! ```sh
//! cargo build --release -p tickwire -p tickwire-bench --bins --examples
//! tickwire router --listen 127.0.0.1:7601 --no-guaranteed &
//! target/release/examples/issue14 rtt 127.0.0.1:7601 20000
//! tickwire router --listen 127.0.0.1:7602 --no-guaranteed --cache '>' \
//!     --cache-max-bytes 64MiB --egress-limit 64MiB &
//! target/release/examples/issue14 image 127.0.0.1:7602 100000
//! ```
//!
//! - `rtt ADDR N`: request/reply round trips (`Client::request` to a responder thread
//!   that answers with `Client::reply`) and, in the same run, interleaved in rounds of
//!   1,000, a plain ping-pong through the same router (publish to `pp/req`, the
//!   responder republishes to `pp/rep`); 64-byte payloads; both sides busy-poll. Prints
//!   p50 / p99 of each and the ratio.
//! - `image ADDR N`: publishes N topics of 100-byte payloads (cached by the router),
//!   then times a cache query of all of them (the initial image without the
//!   subscription) and, in the same run, the same number of bytes over a raw loopback
//!   TCP socket (one writer thread, one reader). Prints time and bytes/s of each.

// An example is a small program: it prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// An example stops at the first surprise: unwrap/expect are its error handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwire_client::{Client, ClientOptions, ReplyTo, Wait};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: issue14 rtt ADDR N | issue14 image ADDR N";
    let (mode, addr, n) = match args.as_slice() {
        [_, m, a, n] => (m.as_str(), a.clone(), n.parse::<usize>().expect(usage)),
        _ => panic!("{usage}"),
    };
    match mode {
        "rtt" => rtt(&addr, n),
        "image" => image(&addr, n),
        _ => panic!("{usage}"),
    }
}

fn opts(name: &str) -> ClientOptions {
    ClientOptions {
        name: name.into(),
        batch_bytes: 0,
        request_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    }
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1e3
}

fn rtt(addr: &str, n: usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut responder = Client::connect_with(addr, opts("responder")).unwrap();
    responder.subscribe("rr/echo").unwrap();
    responder.subscribe("pp/req").unwrap();
    let stop2 = stop.clone();
    let t = std::thread::spawn(move || {
        let mut todo: Vec<(Option<ReplyTo>, Vec<u8>)> = Vec::new();
        while !stop2.load(Ordering::Relaxed) {
            responder
                .poll(Wait::NoWait, |m| {
                    todo.push((m.reply_target(), m.payload().to_vec()));
                })
                .unwrap();
            for (to, p) in todo.drain(..) {
                match to {
                    Some(to) => responder.reply(&to, &p).unwrap(),
                    None => responder.publish("pp/rep", &p).unwrap(),
                }
            }
            responder.flush().unwrap();
        }
    });
    let mut c = Client::connect_with(addr, opts("requester")).unwrap();
    c.subscribe("pp/rep").unwrap();
    let payload = [7u8; 64];
    let (mut rr, mut pp) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // Warm-up: the inbox subscription, caches, the responder's first turns.
    for _ in 0..1000 {
        c.request("rr/echo", &payload, Duration::from_secs(5))
            .unwrap();
    }
    let rounds = n.div_ceil(1000);
    for _ in 0..rounds {
        for _ in 0..1000 {
            let t0 = Instant::now();
            c.request("rr/echo", &payload, Duration::from_secs(5))
                .unwrap();
            rr.push(t0.elapsed().as_nanos() as u64);
        }
        for _ in 0..1000 {
            let t0 = Instant::now();
            c.publish("pp/req", &payload).unwrap();
            c.flush().unwrap();
            let mut got = false;
            while !got {
                c.poll(Wait::NoWait, |_| got = true).unwrap();
            }
            pp.push(t0.elapsed().as_nanos() as u64);
        }
    }
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    let (rr50, rr99) = (pct(&mut rr, 0.5), pct(&mut rr, 0.99));
    let (pp50, pp99) = (pct(&mut pp, 0.5), pct(&mut pp, 0.99));
    println!(
        "request/reply RTT  n={}  p50 {rr50:.1} us  p99 {rr99:.1} us",
        rr.len()
    );
    println!(
        "ping-pong RTT      n={}  p50 {pp50:.1} us  p99 {pp99:.1} us",
        pp.len()
    );
    println!("ratio p50 {:.3}  p99 {:.3}", rr50 / pp50, rr99 / pp99);
}

fn image(addr: &str, n: usize) {
    let mut p = Client::connect_with(
        addr,
        ClientOptions {
            batch_bytes: 64 << 10,
            ..opts("loader")
        },
    )
    .unwrap();
    let payload = [b'q'; 100];
    for i in 0..n {
        p.publish(&format!("img/{i:08}"), &payload).unwrap();
    }
    p.flush().unwrap();
    p.ping().unwrap();
    let mut c = Client::connect_with(addr, opts("image")).unwrap();
    let t0 = Instant::now();
    let got = c.cache_query("img/>").unwrap();
    let dt = t0.elapsed();
    // Bytes on the wire: each MESSAGE is header 8 + CACHED 8 + topic + payload.
    let bytes: usize = got
        .iter()
        .map(|m| 16 + m.topic.len() + m.payload.len())
        .sum();
    println!(
        "image: {} cached topics, {bytes} bytes in {:.1} ms: {:.0} MB/s, {:.0} msg/s",
        got.len(),
        dt.as_secs_f64() * 1e3,
        bytes as f64 / dt.as_secs_f64() / 1e6,
        got.len() as f64 / dt.as_secs_f64()
    );
    // The same bytes over a raw loopback socket.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let data = vec![0x5au8; bytes];
    let w = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&data).unwrap();
    });
    let mut s = TcpStream::connect(a).unwrap();
    let mut buf = vec![0u8; 256 << 10];
    let t0 = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0);
        left -= k.min(left);
    }
    let raw = t0.elapsed();
    w.join().unwrap();
    println!(
        "raw socket: {bytes} bytes in {:.1} ms: {:.0} MB/s",
        raw.as_secs_f64() * 1e3,
        bytes as f64 / raw.as_secs_f64() / 1e6
    );
    println!(
        "image time / raw time: {:.2}",
        dt.as_secs_f64() / raw.as_secs_f64()
    );
}
