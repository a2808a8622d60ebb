//! Holds N idle client connections to a router for a while: what idle clients cost
//! everyone else (`scripts/bench-idle-clients.sh`, BENCHMARKS.md).
//!
//!     cargo run --release -p tickwire-client --example hold_clients -- ADDR N SECS
//!
//! ADDR is anything `tickwire --router` takes (`127.0.0.1:PORT`, `shm:NAME`). Each
//! client subscribes to a topic of its own that nothing publishes, then the program
//! sleeps SECS seconds and closes them all. It prints `ready` once every client is
//! connected.
// A measurement tool, not library code: it reports on stdout.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use tickwire_client::{Client, ClientOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, n, secs] = args.as_slice() else {
        return Err("usage: hold_clients ADDR N SECS".into());
    };
    let n: usize = n.parse()?;
    let secs: u64 = secs.parse()?;
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Client::connect_to(addr, ClientOptions::default())
            .map_err(|e| format!("client {i}: {e}"))?;
        c.subscribe(&format!("idle/{i}"))?;
        clients.push(c);
    }
    println!("ready");
    std::thread::sleep(Duration::from_secs(secs));
    for c in clients {
        let _ = c.close();
    }
    Ok(())
}
