//! `--monitor-poll-ms`: a thread that polls the router's monitoring endpoint at a fixed
//! period while the bench runs, as a dashboard and a Prometheus scraper would, so the
//! report measures fan-out with monitoring in use.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickwire_rt::StopFlag;

/// What the poller did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Polls {
    /// The period.
    pub period_ms: u64,
    /// Polls whose every request answered 200.
    pub ok: u64,
    /// Polls with a failed request.
    pub failed: u64,
}

/// A running poller.
pub struct Poller {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<Polls>>,
}

/// The documents one poll fetches.
const PATHS: [&str; 2] = ["/api/dashboard", "/metrics"];

impl Poller {
    /// Polls `addr` every `period_ms` until [`Poller::finish`] or `stop`.
    pub fn start(addr: SocketAddr, period_ms: u64, stop: StopFlag) -> Poller {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::Builder::new()
            .name("monitor-poll".into())
            .spawn(move || {
                let period = Duration::from_millis(period_ms.max(1));
                let mut polls = Polls {
                    period_ms,
                    ..Polls::default()
                };
                let mut next = Instant::now();
                while !flag.load(Ordering::Relaxed) && !stop.is_set() {
                    if PATHS.iter().all(|p| get_ok(addr, p)) {
                        polls.ok += 1;
                    } else {
                        polls.failed += 1;
                    }
                    next += period;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
                polls
            })
            .ok();
        Poller { done, thread }
    }

    /// Stops polling; what it did.
    pub fn finish(mut self) -> Polls {
        self.done.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

fn get_ok(addr: SocketAddr, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut body = Vec::new();
    s.read_to_end(&mut body).is_ok() && body.starts_with(b"HTTP/1.1 200")
}
