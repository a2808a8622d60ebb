//! How long one connection takes to subscribe to N exact subjects, against running
//! routers (start them with the CLI):
//!
//! ```sh
//! cargo build --release -p tickwire -p tickwire-bench --bins --examples
//! tickwire router --listen 127.0.0.1:7611 --no-guaranteed --idle block \
//!     --max-subscriptions 100000 --max-subscription-levels 400000 &
//! nats-server -a 127.0.0.1 -p 7612 &            # optional: scripts/install-nats.sh
//! target/release/examples/subscribe_rate 127.0.0.1:7611 100000 3 127.0.0.1:7612
//! ```
//!
//! `subscribe_rate ADDR N ROUNDS [NATS_ADDR]`: each round, on a fresh connection each,
//! in turn:
//! - `one-by-one`: `Client::subscribe` N times (each waits for its ACK);
//! - `subscribe_many`: `Client::subscribe_many` of the N subjects (pipelined);
//! - `nats` (with NATS_ADDR): async-nats subscribes N times (SUB is not answered),
//!   then publishes to the last subject and waits for that message: NATS handles a
//!   connection's commands in order, so then every SUB is in place, as every ACK says
//!   for tickwire.
//!
//! Subjects are `sub/R/MODE/I` (4 levels), distinct for every round and mode. Prints
//! each run's seconds and each mode's median.

// An example is a small program: it prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// An example stops at the first surprise: unwrap/expect are its error handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tickwire_client::{Client, ClientOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: subscribe_rate ADDR N ROUNDS [NATS_ADDR]";
    let (addr, n, rounds, nats) = match args.as_slice() {
        [_, a, n, r, rest @ ..] if rest.len() <= 1 => (
            a.clone(),
            n.parse::<usize>().expect(usage),
            r.parse::<usize>().expect(usage),
            rest.first().cloned(),
        ),
        _ => panic!("{usage}"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut times: Vec<(&str, Vec<f64>)> = vec![("one-by-one", vec![]), ("subscribe_many", vec![])];
    if nats.is_some() {
        times.push(("nats", vec![]));
    }
    for round in 0..rounds {
        for (mode, runs) in &mut times {
            let subjects: Vec<String> = (0..n).map(|i| format!("sub/{round}/{mode}/{i}")).collect();
            let secs = match *mode {
                "one-by-one" => tickwire(&addr, &subjects, false),
                "subscribe_many" => tickwire(&addr, &subjects, true),
                _ => nats_subscribe(&rt, nats.as_deref().unwrap_or_default(), &subjects),
            };
            println!("round {round} {mode}: {n} subjects in {secs:.3} s");
            runs.push(secs);
        }
    }
    for (mode, runs) in &mut times {
        runs.sort_by(f64::total_cmp);
        let median = runs[runs.len() / 2];
        println!(
            "median {mode}: {median:.3} s ({:.0} subscriptions/s)",
            n as f64 / median
        );
    }
}

/// Seconds for one tickwire connection to have `subjects` acknowledged.
fn tickwire(addr: &str, subjects: &[String], many: bool) -> f64 {
    let opts = ClientOptions {
        name: "subscribe-rate".into(),
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut c = Client::connect_with(addr, opts).unwrap();
    let start = Instant::now();
    if many {
        c.subscribe_many(subjects).unwrap();
    } else {
        for s in subjects {
            c.subscribe(s).unwrap();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    c.close().unwrap();
    secs
}

/// Seconds for one NATS connection to have `subjects` in place (see the module docs).
fn nats_subscribe(rt: &tokio::runtime::Runtime, addr: &str, subjects: &[String]) -> f64 {
    rt.block_on(async {
        let c = async_nats::connect(addr).await.unwrap();
        let start = Instant::now();
        let mut subs = Vec::with_capacity(subjects.len());
        for s in subjects {
            subs.push(c.subscribe(s.clone()).await.unwrap());
        }
        let last = subjects.last().expect("at least one subject").clone();
        c.publish(last, "x".into()).await.unwrap();
        c.flush().await.unwrap();
        let got = subs.last_mut().unwrap().next().await;
        let secs = start.elapsed().as_secs_f64();
        assert!(got.is_some(), "NATS closed the subscription");
        drop(subs);
        c.drain().await.unwrap();
        secs
    })
}
