//! Server CPU of the tickwire router and of nats-server under the same paced workloads,
//! against servers already running (start them yourself, pinned):
//!
//! ```sh
//! cargo build --release -p tickwire -p tickwire-bench --bins --examples
//! scripts/install-nats.sh --server                  # nats-server into ~/go/bin
//! taskset -c 0 target/release/tickwire router --listen 127.0.0.1:7611 --no-guaranteed & TW=$!
//! taskset -c 0 ~/go/bin/nats-server -a 127.0.0.1 -p 7612 & NATS=$!
//! taskset -c 1 target/release/examples/peer_cpu 127.0.0.1:7611 $TW 127.0.0.1:7612 $NATS 5 3
//! ```
//!
//! `peer_cpu TW_ADDR TW_PID NATS_ADDR NATS_PID SECS ROUNDS`. Two workloads:
//! - `a`: 1 publisher -> 1 subscriber, 64 KiB payloads at 4,000 msg/s;
//! - `b`: 1 publisher -> 100 subscribers (100 connections, one subject), 100-byte
//!   payloads at 2,000 msg/s.
//!
//! Each runs SECS seconds per server, ROUNDS times, alternating tickwire and NATS. A run
//! connects and subscribes everyone (tickwire: every SUBSCRIBE acknowledged; NATS: every
//! subscriber flushed, a PING round trip), lets the server settle, then reads the
//! server's CPU time (`/proc/PID/stat` utime + stime, in clock ticks, all threads),
//! publishes on an absolute schedule (open loop) and reads the CPU time again the
//! moment the last subscriber has received its last message (or, if messages are lost,
//! 5 s after the schedule's end). So connecting, subscribing and closing are outside the
//! window. The sum of the server threads' on-CPU nanoseconds
//! (`/proc/PID/task/*/schedstat`) is shown too: the same quantity without the 10 ms
//! tick granularity. Under each run, every CPU's busy and steal seconds over the same
//! window (`/proc/stat`) show what else ran on the machine meanwhile.
//!
//! Client side (keep it on its own CPU): the publisher sleeps until each message's
//! intended time and sends every message that is due (no spinning: `pacing::wait_until`
//! spins the last 200 µs, most of a 250 µs slot, on the CPU the subscribers share). The
//! tickwire subscribers are drained by one thread sleeping in `poll(2)` over all their
//! sockets; the NATS subscribers are tasks on a one-worker tokio runtime. Neither spins.
//!
//! Prints every run, then per workload the median CPU of each server and the ratio
//! tickwire / NATS (of the medians). Received must equal sent × subscribers: any
//! shortfall is printed as loss.

// An example is a small program: it prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// An example stops at the first surprise: unwrap/expect are its error handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use rustix::event::{PollFd, PollFlags, Timespec};
use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_rt::MonoNanos;

/// One paced workload.
struct Workload {
    name: &'static str,
    subscribers: usize,
    size: usize,
    rate: u64,
}

const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "a",
        subscribers: 1,
        size: 64 * 1024,
        rate: 4_000,
    },
    Workload {
        name: "b",
        subscribers: 100,
        size: 100,
        rate: 2_000,
    },
];

/// How long the receivers wait after the schedule's last message before giving up.
const GRACE_NS: u64 = 5_000_000_000;
/// Pause between setting up a run and its "before" CPU sample.
const SETTLE: Duration = Duration::from_millis(500);

/// A process's CPU time so far.
#[derive(Debug, Clone)]
struct Cpu {
    /// utime + stime, in clock ticks (`/proc/PID/stat` fields 14 and 15).
    ticks: u64,
    /// Sum over its live threads of on-CPU nanoseconds (`/proc/PID/task/*/schedstat`).
    sched_ns: u64,
    /// When it was read.
    at: MonoNanos,
    /// Per CPU of the machine (`/proc/stat`): (busy, steal) clock ticks, busy being
    /// user + nice + system + irq + softirq. Shows what else ran (a noisy neighbour, a
    /// hypervisor taking the vCPU) during a run.
    machine: Vec<(u64, u64)>,
}

fn machine_ticks() -> Vec<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").expect("reading /proc/stat");
    stat.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal
            (at(0) + at(1) + at(2) + at(5) + at(6), at(7))
        })
        .collect()
}

fn cpu(pid: u32) -> Cpu {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/stat: {e}"));
    // The command name (field 2) may hold spaces: count fields after its ")".
    let after = &stat[stat.rfind(')').expect("a ')' in /proc/PID/stat") + 1..];
    // Field 3 (state) is the first after ")": utime (14) is the 12th, stime (15) the 13th.
    let mut it = after.split_whitespace().skip(11);
    let utime: u64 = it.next().expect("utime").parse().expect("utime");
    let stime: u64 = it.next().expect("stime").parse().expect("stime");
    let mut sched_ns = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task") {
        let path = task.expect("a task entry").path().join("schedstat");
        // A thread may exit between the listing and the read.
        if let Ok(s) = std::fs::read_to_string(path) {
            sched_ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Cpu {
        ticks: utime + stime,
        sched_ns,
        at: MonoNanos::now(),
        machine: machine_ticks(),
    }
}

/// What one run measured.
struct Run {
    cpu_s: f64,
    sched_s: f64,
    window_s: f64,
    sent: u64,
    received: u64,
    expected: u64,
    wrong_size: u64,
    /// Per CPU: (busy, steal) seconds during the window.
    machine: Vec<(f64, f64)>,
}

impl Run {
    fn new(before: Cpu, after: Cpu, hz: u64, sent: u64, received: u64, expected: u64) -> Run {
        let secs = |a: u64, b: u64| a.saturating_sub(b) as f64 / hz as f64;
        let machine = after
            .machine
            .iter()
            .zip(&before.machine)
            .map(|(a, b)| (secs(a.0, b.0), secs(a.1, b.1)))
            .collect();
        Run {
            machine,
            cpu_s: (after.ticks - before.ticks) as f64 / hz as f64,
            sched_s: after.sched_ns.saturating_sub(before.sched_ns) as f64 / 1e9,
            window_s: after.at.saturating_sub(before.at) as f64 / 1e9,
            sent,
            received,
            expected,
            wrong_size: 0,
        }
    }

    fn print(&self, round: usize, w: &Workload, server: &str) {
        let loss = self.expected.saturating_sub(self.received);
        println!(
            "round {round} {} {server:<8}: cpu {:.2} s ({:.1}% of the {:.3} s window; schedstat {:.3} s), sent {}, received {} of {}{}{}",
            w.name,
            self.cpu_s,
            100.0 * self.cpu_s / self.window_s,
            self.window_s,
            self.sched_s,
            self.sent,
            self.received,
            self.expected,
            if loss > 0 { format!(", LOST {loss}") } else { String::new() },
            if self.wrong_size > 0 {
                format!(", {} of the wrong size", self.wrong_size)
            } else {
                String::new()
            },
        );
        let cpus: Vec<String> = self
            .machine
            .iter()
            .enumerate()
            .map(|(i, (busy, steal))| format!("cpu{i} busy {busy:.2} s steal {steal:.2} s"))
            .collect();
        println!("    machine: {}", cpus.join(", "));
    }
}

/// Publishes message `i` at `start + i / rate` (absolute schedule, open loop): sleeps
/// until a message is due, then sends it; a late wake-up sends every message due.
fn paced(start: MonoNanos, total: u64, rate: u64, mut send: impl FnMut()) {
    for i in 0..total {
        let due = start.add_nanos(i * 1_000_000_000 / rate);
        let now = MonoNanos::now();
        if now < due {
            std::thread::sleep(due.duration_since(now));
        }
        send();
    }
}

fn tickwire_run(addr: &str, pid: u32, w: &Workload, secs: u64, round: usize, hz: u64) -> Run {
    let topic = format!("peer/{}/{round}", w.name);
    let opts = |name: String, batch_bytes| ClientOptions {
        name,
        batch_bytes,
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let subs: Vec<Client> = (0..w.subscribers)
        .map(|i| {
            let mut c = Client::connect_with(addr, opts(format!("peer-cpu-sub-{i}"), 64 * 1024))
                .expect("subscriber connect");
            c.subscribe(&topic).expect("subscribe");
            c
        })
        .collect();
    // batch_bytes 0: every publish is written at once, as NATS's client does.
    let mut publ =
        Client::connect_with(addr, opts("peer-cpu-pub".into(), 0)).expect("publisher connect");
    let total = w.rate * secs;
    let per_sub = total;
    let size = w.size;
    std::thread::sleep(SETTLE);
    let before = cpu(pid);
    let start = MonoNanos::now().add_nanos(1_000_000);
    let deadline = start.add_nanos(secs * 1_000_000_000 + GRACE_NS);
    let rx = std::thread::spawn(move || tickwire_receive(subs, per_sub, size, deadline, pid));
    let payload = vec![0x5a_u8; w.size];
    let mut sent = 0;
    paced(start, total, w.rate, || {
        publ.publish(&topic, &payload).expect("publish");
        sent += 1;
    });
    publ.flush().expect("flush");
    let (received, wrong_size, after) = rx.join().expect("receiver thread");
    publ.close().ok();
    let mut run = Run::new(
        before,
        after,
        hz,
        sent,
        received,
        total * w.subscribers as u64,
    );
    run.wrong_size = wrong_size;
    run
}

/// Drains every subscriber until each has `per_sub` messages or `deadline` passes,
/// sleeping in `poll(2)` over all the sockets. Returns (received, wrong size, the
/// server's CPU read the moment the last message arrived or at the deadline).
fn tickwire_receive(
    mut subs: Vec<Client>,
    per_sub: u64,
    size: usize,
    deadline: MonoNanos,
    pid: u32,
) -> (u64, u64, Cpu) {
    let n = subs.len();
    let (mut received, mut wrong_size) = (0u64, 0u64);
    let expected = per_sub * n as u64;
    let mut ready = vec![false; n];
    while received < expected {
        let now = MonoNanos::now();
        if now >= deadline {
            break;
        }
        // Sleep until some socket has data (at most 100 ms, to see the deadline).
        let mut may_sleep = true;
        for c in &mut subs {
            may_sleep &= c.begin_sleep();
        }
        let timeout = if may_sleep {
            Duration::from_nanos(deadline.saturating_sub(now).min(100_000_000))
        } else {
            Duration::ZERO
        };
        {
            let mut fds: Vec<PollFd<'_>> =
                subs.iter().map(|c| PollFd::new(c, PollFlags::IN)).collect();
            let ts = Timespec::try_from(timeout).expect("timeout");
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("poll: {e}"),
            }
            for (r, fd) in ready.iter_mut().zip(&fds) {
                *r = !may_sleep || !fd.revents().is_empty();
            }
        }
        for (i, c) in subs.iter_mut().enumerate() {
            c.end_sleep();
            if !ready[i] {
                continue;
            }
            let got = c
                .poll(Wait::NoWait, |m| {
                    if m.payload().len() != size {
                        wrong_size += 1;
                    }
                })
                .expect("receive");
            received += got as u64;
        }
    }
    let after = cpu(pid);
    for c in subs {
        c.close().ok();
    }
    (received, wrong_size, after)
}

async fn nats_connect(url: &str, name: String) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .name(name)
        // Its default, 65536, could overflow while a burst waits for the task.
        .subscription_capacity(1 << 20)
        .connection_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to NATS at {url}: {e}"))
}

fn nats_run(
    rt: &tokio::runtime::Runtime,
    url: &str,
    pid: u32,
    w: &Workload,
    secs: u64,
    round: usize,
    hz: u64,
) -> Run {
    let subject = async_nats::Subject::from(format!("peer.{}.{round}", w.name));
    let mut subs = Vec::with_capacity(w.subscribers);
    for i in 0..w.subscribers {
        rt.block_on(async {
            let c = nats_connect(url, format!("peer-cpu-sub-{i}")).await;
            let s = c.subscribe(subject.clone()).await.expect("NATS subscribe");
            // A PING round trip: the server has the SUB once this returns.
            c.flush().await.expect("NATS flush");
            subs.push((c, s));
        });
    }
    let publ = rt.block_on(nats_connect(url, "peer-cpu-pub".into()));
    let total = w.rate * secs;
    let expected = total * w.subscribers as u64;
    let received = Arc::new(AtomicU64::new(0));
    let wrong_size = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let after: Arc<OnceLock<Cpu>> = Arc::new(OnceLock::new());
    std::thread::sleep(SETTLE);
    let before = cpu(pid);
    let start = MonoNanos::now().add_nanos(1_000_000);
    let deadline = start.add_nanos(secs * 1_000_000_000 + GRACE_NS);
    let n = w.subscribers;
    let size = w.size;
    let mut tasks: Vec<_> = subs
        .into_iter()
        .map(|(c, mut s)| {
            let (received, wrong_size) = (received.clone(), wrong_size.clone());
            let (finished, after) = (finished.clone(), after.clone());
            rt.spawn(async move {
                let mut got = 0;
                while got < total {
                    let Some(m) = s.next().await else { break };
                    got += 1;
                    received.fetch_add(1, Ordering::Relaxed);
                    if m.payload.len() != size {
                        wrong_size.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if got == total && finished.fetch_add(1, Ordering::AcqRel) + 1 == n {
                    after.set(cpu(pid)).ok();
                }
                // Dropped here, inside the runtime (a Subscriber's drop spawns its UNSUB).
                drop((s, c));
            })
        })
        .collect();
    // async-nats takes the payload as `Bytes`; one made here, cloned (a reference
    // count) per message, without naming the bytes crate.
    let payload = vec![0x5a_u8; w.size].into();
    let mut sent = 0;
    paced(start, total, w.rate, || {
        rt.block_on(publ.publish(subject.clone(), Clone::clone(&payload)))
            .expect("NATS publish");
        sent += 1;
    });
    rt.block_on(publ.flush()).expect("NATS flush");
    let wait = Duration::from_nanos(deadline.saturating_sub(MonoNanos::now()));
    rt.block_on(async {
        let all = async {
            for t in tasks.iter_mut() {
                t.await.expect("NATS subscriber task");
            }
        };
        let _ = tokio::time::timeout(wait, all).await;
    });
    let after = match after.get() {
        Some(c) => c.clone(),
        None => cpu(pid),
    };
    for t in &tasks {
        t.abort();
    }
    {
        let _in_runtime = rt.enter();
        drop(publ);
    }
    let mut run = Run::new(
        before,
        after,
        hz,
        sent,
        received.load(Ordering::Relaxed),
        expected,
    );
    run.wrong_size = wrong_size.load(Ordering::Relaxed);
    run
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: peer_cpu TW_ADDR TW_PID NATS_ADDR NATS_PID SECS ROUNDS";
    let [_, tw_addr, tw_pid, nats_addr, nats_pid, secs, rounds] = args.as_slice() else {
        panic!("{usage}");
    };
    let tw_pid: u32 = tw_pid.parse().expect(usage);
    let nats_pid: u32 = nats_pid.parse().expect(usage);
    let secs: u64 = secs.parse().expect(usage);
    let rounds: usize = rounds.parse().expect(usage);
    assert!(secs > 0 && rounds > 0, "{usage}");
    let nats_url = format!("nats://{nats_addr}");
    // USER_HZ, sysconf(_SC_CLK_TCK): 100 on mainstream Linux.
    let hz = procfs::ticks_per_second();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("nats-io")
        .enable_all()
        .build()
        .unwrap();
    println!(
        "tickwire router pid {tw_pid} at {tw_addr}; nats-server pid {nats_pid} at {nats_addr}; {secs} s per run, {rounds} rounds; clock ticks {hz}/s"
    );
    for w in &WORKLOADS {
        println!(
            "\nworkload {}: 1 publisher -> {} subscriber(s), {}-byte payloads at {} msg/s",
            w.name, w.subscribers, w.size, w.rate
        );
        let mut tw: Vec<Run> = Vec::new();
        let mut nats: Vec<Run> = Vec::new();
        for round in 0..rounds {
            let r = tickwire_run(tw_addr, tw_pid, w, secs, round, hz);
            r.print(round, w, "tickwire");
            tw.push(r);
            let r = nats_run(&rt, &nats_url, nats_pid, w, secs, round, hz);
            r.print(round, w, "nats");
            nats.push(r);
        }
        let med =
            |runs: &[Run], f: fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        let (tw_cpu, nats_cpu) = (med(&tw, |r| r.cpu_s), med(&nats, |r| r.cpu_s));
        let (tw_sched, nats_sched) = (med(&tw, |r| r.sched_s), med(&nats, |r| r.sched_s));
        let lost = |runs: &[Run]| -> u64 {
            runs.iter()
                .map(|r| r.expected.saturating_sub(r.received))
                .sum()
        };
        println!(
            "median {} tickwire: cpu {tw_cpu:.2} s (schedstat {tw_sched:.3} s); lost {} in all runs",
            w.name,
            lost(&tw)
        );
        println!(
            "median {} nats    : cpu {nats_cpu:.2} s (schedstat {nats_sched:.3} s); lost {} in all runs",
            w.name,
            lost(&nats)
        );
        println!(
            "ratio {} tickwire / nats: {:.2} (ticks), {:.2} (schedstat)",
            w.name,
            tw_cpu / nats_cpu,
            tw_sched / nats_sched
        );
    }
}
