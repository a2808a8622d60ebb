//! The router's latency probe: a client of the router it monitors that publishes a
//! small message to its own topic every few milliseconds and times the round trip
//! (publish → router → back to the probe) into HDR histograms
//! ([`tickwire_monitor::Latency`]). It runs on its own thread, is one more connection
//! (named `tickwire-probe`) and adds one message per period to the router's load.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwire_client::{Client, ClientOptions, Wait};
use tickwire_monitor::Latency;

/// The probe's histograms, shared with the HTTP threads.
pub type Shared = Arc<Mutex<Latency>>;

/// How long a probe message may take before it is counted as lost (and not timed).
const TIMEOUT: Duration = Duration::from_secs(1);

/// Starts probing `router` every `period`.
pub fn start(router: SocketAddr, period: Duration) -> anyhow::Result<Shared> {
    let shared: Shared = Arc::default();
    let latency = shared.clone();
    std::thread::Builder::new()
        .name("probe".into())
        .spawn(move || loop {
            if let Err(e) = run(router, period, &latency) {
                tracing::debug!(error = %e, "latency probe: reconnecting in 1 s");
            }
            std::thread::sleep(Duration::from_secs(1));
        })?;
    Ok(shared)
}

fn run(router: SocketAddr, period: Duration, latency: &Shared) -> anyhow::Result<()> {
    let opts = ClientOptions {
        batch_bytes: 0,
        ..ClientOptions::named("tickwire-probe")
    };
    let mut client = Client::connect_with(router, opts)?;
    let topic = format!("_tickwire/probe/{}", std::process::id());
    client.subscribe(&topic)?;
    let mut seq: u64 = 0;
    let mut next_roll = Instant::now() + Duration::from_secs(1);
    loop {
        seq += 1;
        let sent = Instant::now();
        client.publish(&topic, &seq.to_le_bytes())?;
        client.flush()?;
        let deadline = sent + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let Some(m) = client.recv(Wait::Timeout(left))? else {
                continue;
            };
            if m.payload() == seq.to_le_bytes() {
                let rtt = sent.elapsed();
                lock(latency).record(u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX));
                break;
            }
        }
        let now = Instant::now();
        if now >= next_roll {
            next_roll = now + Duration::from_secs(1);
            let unix_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            lock(latency).roll(unix_ms);
        }
        std::thread::sleep(period.saturating_sub(sent.elapsed()));
    }
}

/// The histograms, even if a thread panicked while holding them (they stay valid).
pub fn lock(l: &Shared) -> std::sync::MutexGuard<'_, Latency> {
    l.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
