//! The demo's guaranteed-messaging part: orders through a durable queue while the router
//! process is killed with SIGKILL and restarted, and a count of what arrived.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tickwire_client::{
    Client, GuaranteedPublisher, QueueConsumer, QueueOp, ReconnectOptions, Start, Wait,
};
use tickwire_rt::{MonoNanos, StopFlag};

const ORDERS: u64 = 20_000;
const RATE: u64 = 10_000;
/// The router is killed when this many orders have been handed to the publisher.
const KILL_AT: [u64; 2] = [6_000, 13_000];

struct RouterChild(Child);

impl RouterChild {
    /// `tickwire router` on `port` with its spool in `dir`; retried while the killed
    /// predecessor's port or lock is still being released.
    fn start(me: &Path, port: u16, dir: &Path) -> anyhow::Result<RouterChild> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut cmd = Command::new(me);
            // Ends with the demo, also when the demo is killed (tickwire_rt::child).
            tickwire_rt::child::mark(&mut cmd);
            cmd.args([
                "router",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(dir)
            .env("TICKWIRE_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
            // `demo --log-file`: the killed and restarted routers log there too (at
            // the demo's level, or the router's default), not into nothing.
            if let Some((file, level)) = crate::logging::file_and_level() {
                cmd.arg("--log-file").arg(file);
                cmd.env("TICKWIRE_LOG", level.as_deref().unwrap_or("info"));
            }
            // Ctrl-C in the terminal reaches the demo only: it ends this part in order
            // and stops the router itself (a router stopped behind its back would leave
            // the part waiting on reconnects).
            if tickwire_rt::StopFlag::is_installed() {
                cmd.process_group(0);
            }
            let mut child = cmd.spawn().context("starting a router child process")?;
            // A second Ctrl-C aborts the demo with exit(): it terminates the router too,
            // not leave it running (the first stops the demo, which drops it).
            tickwire_rt::stop::register_child(child.id(), true);
            let mut line = String::new();
            if let Some(out) = child.stdout.take() {
                BufReader::new(out).read_line(&mut line).ok();
            }
            if line.starts_with("tickwire router listening on") {
                return Ok(RouterChild(child));
            }
            tickwire_rt::stop::register_child(child.id(), false);
            let _ = child.kill();
            let _ = child.wait();
            anyhow::ensure!(
                Instant::now() < deadline,
                "the router did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill9(mut self) -> anyhow::Result<()> {
        tickwire_rt::stop::register_child(self.0.id(), false);
        self.0.kill().context("SIGKILL the router")?;
        self.0.wait().context("reaping the router")?;
        Ok(())
    }
}

impl Drop for RouterChild {
    fn drop(&mut self) {
        tickwire_rt::stop::register_child(self.0.id(), false);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Default)]
struct Seen {
    deliveries: BTreeMap<u64, u32>,
    redelivered: u64,
    unflagged_duplicates: u64,
}

fn reconnecting(name: &str) -> ReconnectOptions {
    ReconnectOptions::local(name, Duration::from_secs(30))
}

/// Runs the part and prints its report; true when every acknowledged order arrived and
/// every repeat was flagged.
pub fn run(ctrl_c: &StopFlag) -> anyhow::Result<bool> {
    println!("\n==================== guaranteed messaging ====================");
    let me = std::env::current_exe().context("locating the tickwire binary")?;
    let dir = tempfile::Builder::new()
        .prefix("tickwire-demo-spool-")
        .tempdir()
        .context("creating a temporary spool directory")?;
    // A second Ctrl-C exits without running `dir`'s drop: that path removes it instead.
    let _scratch = ScratchGuard::register(dir.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port")?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut router = RouterChild::start(&me, port, dir.path())?;
    println!(
        "router child process on {addr}, spool in {} (sync fsync: fdatasync before every ACK)",
        dir.path().display()
    );
    let mut admin = Client::connect(addr.as_str()).context("connecting to the router")?;
    admin
        .queue_request(
            QueueOp::Create,
            r#"{"name":"orders","subscriptions":["orders/>"]}"#,
        )
        .context("creating queue 'orders'")?;
    admin.close().ok();
    println!("queue 'orders' <- orders/>; publisher 'oms' sends {ORDERS} orders guaranteed at {RATE}/s; consumer 'booking' acknowledges each");

    // The host-stall sentinel over the traffic, the crashes and the delivery, as the
    // benchmarks' parts.
    let watch = tickwire_bench::host_watch::HostWatch::start_all();
    let watch_from = MonoNanos::now();
    let stop = Arc::new(AtomicBool::new(false));
    let handed = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let consumer = {
        let (addr, stop, seen) = (addr.clone(), stop.clone(), seen.clone());
        std::thread::Builder::new()
            .name("demo-booking".into())
            .spawn(move || -> anyhow::Result<u64> {
                let mut c = QueueConsumer::connect(
                    &addr,
                    "orders",
                    256,
                    Start::Queue,
                    reconnecting("booking"),
                )
                .context("consumer")?;
                while !stop.load(Ordering::Acquire) {
                    let mut ids = Vec::new();
                    c.poll(Wait::Timeout(Duration::from_millis(20)), |d| {
                        let seq = u64::from_le_bytes(
                            d.payload
                                .get(..8)
                                .and_then(|b| b.try_into().ok())
                                .unwrap_or([0; 8]),
                        );
                        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
                        let n = s.deliveries.entry(seq).or_insert(0);
                        *n += 1;
                        if d.redelivered {
                            s.redelivered += 1;
                        } else if *n > 1 {
                            s.unflagged_duplicates += 1;
                        }
                        ids.push(d.msg_id);
                    })
                    .context("consumer poll")?;
                    for id in ids {
                        c.ack(id).context("consumer ack")?;
                    }
                }
                let reconnects = c.reconnects();
                c.close().ok();
                Ok(reconnects)
            })
            .context("starting the consumer thread")?
    };
    let publisher = {
        let (addr, handed, ctrl_c) = (addr.clone(), handed.clone(), ctrl_c.clone());
        std::thread::Builder::new()
            .name("demo-oms".into())
            .spawn(
                move || -> anyhow::Result<(tickwire_client::PublishCounts, u64, bool)> {
                    let mut p = GuaranteedPublisher::connect(&addr, "oms", reconnecting("oms"))
                        .context("publisher")?;
                    let mut payload = vec![0u8; 100];
                    let start = MonoNanos::now().as_nanos();
                    for seq in 1..=ORDERS {
                        if ctrl_c.is_set() {
                            break;
                        }
                        tickwire_rt::pacing::wait_until(MonoNanos(
                            start + seq * 1_000_000_000 / RATE,
                        ));
                        payload[..8].copy_from_slice(&seq.to_le_bytes());
                        p.publish("orders/desk1/NEW", &payload).context("publish")?;
                        handed.store(seq, Ordering::Release);
                        if seq % 64 == 0 {
                            p.poll(Wait::NoWait).context("publisher poll")?;
                        }
                    }
                    let all = p
                        .wait_answered(Duration::from_secs(30))
                        .context("waiting for ACKs")?;
                    Ok((p.counts().clone(), p.reconnects(), all))
                },
            )
            .context("starting the publisher thread")?
    };
    let started = Instant::now();
    for at in KILL_AT {
        while handed.load(Ordering::Acquire) < at && !publisher.is_finished() {
            std::thread::sleep(Duration::from_millis(2));
        }
        if handed.load(Ordering::Acquire) < at {
            // Stopped by Ctrl-C before this crash was due.
            break;
        }
        router.kill9()?;
        let t = Instant::now();
        router = RouterChild::start(&me, port, dir.path())?;
        println!(
            "  kill -9 of the router after {} orders; restarted and recovered in {:.0} ms",
            handed.load(Ordering::Acquire),
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let (counts, reconnects, all_answered) = publisher
        .join()
        .map_err(|_| anyhow::anyhow!("the publisher thread panicked"))??;
    // Wait for every acknowledged order to arrive (bounded).
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let s = seen.lock().unwrap_or_else(|p| p.into_inner());
        if s.deliveries.len() as u64 >= counts.acked {
            break;
        }
        drop(s);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Release);
    let consumer_reconnects = consumer
        .join()
        .map_err(|_| anyhow::anyhow!("the consumer thread panicked"))??;
    let elapsed = started.elapsed().as_secs_f64();
    let host = watch.finish().within(watch_from, MonoNanos::now());
    drop(router);

    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
    let delivered = s.deliveries.len() as u64;
    // Ctrl-C ends the publishing early: the orders handed over are the ones judged.
    let orders = handed.load(Ordering::Acquire);
    let crashes = KILL_AT.iter().filter(|&&at| orders >= at).count();
    let missing = (1..=orders)
        .filter(|q| !s.deliveries.contains_key(q))
        .count() as u64;
    let ok = all_answered
        && counts.nacked == 0
        && counts.acked == orders
        && missing == 0
        && s.unflagged_duplicates == 0;
    if orders < ORDERS {
        let by = tickwire_rt::stop::stopped_by();
        println!("stopped by {by} after {orders} of {ORDERS} orders");
    }
    println!(
        "publisher: {} published, {} acknowledged, {} refused, {} resent after {}{}",
        counts.published,
        counts.acked,
        counts.nacked,
        counts.resent,
        reconnects_text(reconnects),
        if all_answered {
            ""
        } else {
            ", SOME UNANSWERED"
        }
    );
    println!(
        "consumer:  {delivered} distinct orders received ({} deliveries flagged REDELIVERED, {} duplicates NOT flagged) after {}",
        s.redelivered, s.unflagged_duplicates, reconnects_text(consumer_reconnects)
    );
    // The sentence's "percentiles above" are the benchmarks'; here the figures a stall
    // delays are the recovery times.
    println!(
        "{}",
        host.line("the guaranteed-messaging part").replace(
            "the percentiles above include the delay",
            "the recovery times above include the delay"
        )
    );
    let stopped = format!("stopped by {}", tickwire_rt::stop::stopped_by());
    println!(
        "guaranteed messaging {}: {missing} acknowledged orders missing, {} unflagged duplicates, in {elapsed:.1} s with {crashes} router crash{}",
        match (orders < ORDERS, ok) {
            (true, _) => stopped.as_str(),
            (false, true) => "PASS",
            (false, false) => "FAIL",
        },
        s.unflagged_duplicates,
        if crashes == 1 { "" } else { "es" }
    );
    Ok(ok)
}

/// Keeps a scratch directory registered for the abort path while it exists.
struct ScratchGuard(std::path::PathBuf);

impl ScratchGuard {
    fn register(dir: &std::path::Path) -> ScratchGuard {
        tickwire_rt::stop::register_scratch_dir(dir, true);
        ScratchGuard(dir.to_owned())
    }
}

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        tickwire_rt::stop::register_scratch_dir(&self.0, false);
    }
}

/// "1 reconnect", "3 reconnects" (new-user pass: "after 1 reconnects").
fn reconnects_text(n: impl Into<u64>) -> String {
    let n = n.into();
    format!("{n} reconnect{}", if n == 1 { "" } else { "s" })
}
