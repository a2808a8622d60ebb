//! The router's latency probe: a client of the router it monitors that publishes a
//! small message to its own topic every few milliseconds and times the round trip
//! (publish → router → back to the probe) into HDR histograms
//! ([`tickwire_monitor::Latency`]). It runs on its own thread, is one more connection
//! (named `tickwire-probe`) and adds one message per period to the router's load.
//!
//! Where the router refuses anonymous clients, the probe logs in as [`PROBE_USER`], a
//! user the router command adds for it ([`probe_user`]): a random token made at start-up
//! that never leaves the process, one connection, and the right to publish and
//! subscribe to the probe's own topic and nothing else.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwire_client::{Client, ClientOptions, Login, Wait};
use tickwire_monitor::Latency;
use tickwire_router::auth::{AllowDeny, Rules, UserConfig};

/// The probe's histograms, shared with the HTTP threads.
pub type Shared = Arc<Mutex<Latency>>;

/// How long a probe message may take before it is counted as lost (and not timed).
const TIMEOUT: Duration = Duration::from_secs(1);

/// The user the probe logs in as where anonymous clients are refused (a name that
/// `[[auth.users]]` may not take).
pub const PROBE_USER: &str = "_tickwire-probe";

/// The probe's topic in this process.
fn topic() -> String {
    format!("_tickwire/probe/{}", std::process::id())
}

/// The `[[auth.users]]` entry of the probe, and the token it logs in with: a fresh
/// random token, one connection, publish and subscribe on its topic only.
pub fn probe_user() -> (UserConfig, Login) {
    let (token, sha) = tickwire_router::auth::new_token();
    let only_its_topic = AllowDeny {
        allow: Some(vec![topic()]),
        deny: Vec::new(),
    };
    let user = UserConfig {
        name: PROBE_USER.to_owned(),
        token_sha256: Some(sha),
        max_connections: Some(1),
        rules: Rules {
            publish: only_its_topic.clone(),
            subscribe: only_its_topic,
            ..Rules::default()
        },
        ..UserConfig::default()
    };
    (user, Login::Token(token))
}

/// Starts probing `router` every `period`, logging in with `login` when given.
pub fn start(router: SocketAddr, period: Duration, login: Option<Login>) -> anyhow::Result<Shared> {
    let shared: Shared = Arc::default();
    let latency = shared.clone();
    std::thread::Builder::new()
        .name("probe".into())
        .spawn(move || loop {
            if let Err(e) = run(router, period, login.clone(), &latency) {
                tracing::debug!(error = %e, "latency probe: reconnecting in 1 s");
            }
            std::thread::sleep(Duration::from_secs(1));
        })?;
    Ok(shared)
}

fn run(
    router: SocketAddr,
    period: Duration,
    login: Option<Login>,
    latency: &Shared,
) -> anyhow::Result<()> {
    let opts = ClientOptions {
        batch_bytes: 0,
        login,
        ..ClientOptions::named("tickwire-probe")
    };
    let mut client = Client::connect_with(router, opts)?;
    let topic = topic();
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
