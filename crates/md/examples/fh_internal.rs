//! The feed handler's internal hop without the network: runs the feed-handler core over
//! the session `tickwire bench md-replay` replays (100 symbols, 1,200,000 messages, seed
//! 7, full 1,400-byte MoldUDP64 packets) and reports, per normalized update, the time
//! from the start of its packet's processing to its publish encoding (the hop's stamps
//! 2 and 3), as p50 / p90 / p99 / p99.9, and the mean processing time per message.
//!
//! ```sh
//! cargo run --release -p tickwire-md --example fh_internal -- [b2b|recv] [ORDER_CAPACITY]
//! ```
//!
//! `b2b` applies the packets back to back; `recv` polls an empty non-blocking UDP socket
//! for 12 µs between packets, as the spinning feed handler does between arrivals (its
//! caches and branch predictors see the kernel's receive path in between). Pin it
//! (`taskset -c 1`) for steadier figures. Used to compare order-map layouts; the real
//! path with sockets and a router is `tickwire bench md-replay`.

// An example is a small program: it prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// An example stops at the first surprise: unwrap/expect are its error handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::UdpSocket;
use std::time::Instant;

use tickwire_itch::{PacketBuilder, Session};
use tickwire_md::feed::{FeedConfig, FeedHandler};
use tickwire_md::generator::{Generator, GeneratorConfig};
use tickwire_wire::frame::{encode_publish, PublishOptions, DEFAULT_MAX_FRAME};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("b2b", String::as_str);
    let recv_between = match mode {
        "b2b" => false,
        "recv" => true,
        other => {
            eprintln!("unknown mode {other:?}: expected b2b or recv");
            std::process::exit(2);
        }
    };
    let capacity: usize = match args.get(2).map(|s| s.parse()) {
        None => FeedConfig::default().order_capacity,
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            eprintln!("ORDER_CAPACITY: {e}");
            std::process::exit(2);
        }
    };
    let cfg = GeneratorConfig {
        symbols: 100,
        messages: 1_200_000,
        seed: 7,
        ..GeneratorConfig::default()
    };
    let packets = PacketBuilder::new(Session::new("BENCH").expect("valid session"), 1, 1400)
        .pack(Generator::new(cfg).expect("valid generator config"))
        .expect("a message fits an empty packet");

    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP socket");
    sock.set_nonblocking(true).expect("non-blocking");
    let mut rbuf = vec![0u8; 65_536];
    let feed = FeedConfig {
        order_capacity: capacity,
        ..FeedConfig::default()
    };
    let mut f = FeedHandler::new(feed).expect("valid feed config");
    let mut tx = Vec::with_capacity(1 << 20);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64;
    let mut lat: Vec<u64> = Vec::with_capacity(2_000_000);
    let mut busy = 0u64;
    for p in &packets {
        if recv_between {
            let until = now() + 12_000;
            while now() < until {
                let _ = sock.recv(&mut rbuf);
            }
        }
        let rx = now();
        let mut sink = |topic: &str, payload: &[u8]| {
            if tx.len() > 256 * 1024 {
                tx.clear();
            }
            let t = now();
            lat.push(t - rx);
            let opts = PublishOptions {
                seq: None,
                publisher_send: Some(t),
            };
            let _ = encode_publish(&mut tx, topic, payload, opts, DEFAULT_MAX_FRAME);
        };
        f.handle_datagram(tickwire_rt::MonoNanos(rx), p, &mut sink);
        busy += now() - rx;
    }
    lat.sort_unstable();
    let n = lat.len();
    if n == 0 {
        println!("{mode}: no updates were published");
        return;
    }
    let q = |f: f64| lat[((n as f64 * f) as usize).min(n - 1)] as f64 / 1000.0;
    println!(
        "{mode}, order capacity {capacity}: {} packets, {} updates; FH internal p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2} µs; {:.0} ns per message",
        packets.len(),
        n,
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        busy as f64 / f.counters().messages as f64
    );
}
