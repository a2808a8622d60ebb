//! The identical workload against NATS JetStream (async-nats' jetstream API): a
//! file-storage stream on `bench.>`, a durable pull consumer with explicit acks,
//! publishes whose ack futures are kept in flight up to the window; and the
//! nats-server child (`-js`, or a config file with `sync_interval: always`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_nats::jetstream::{self, consumer, stream};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tickwire_rt::MonoNanos;

use super::{
    since_start, write_header, ConsResult, Plan, PubResult, Shared, DRAIN, START_DELAY_NS,
};

const STREAM: &str = "GBENCH";
const CONSUMER: &str = "gbench";

/// A nats-server child with JetStream on a free loopback port; killed on drop.
pub struct NatsChild {
    child: Child,
    pub url: String,
    pub command: String,
}

impl NatsChild {
    /// Starts `nats-server -js -sd DIR/nats -a 127.0.0.1 -p PORT` (sync `default`) or
    /// `nats-server -c DIR/nats.conf` with `jetstream { store_dir, sync_interval: always }`
    /// (sync `always`), and waits until it accepts connections.
    pub fn start(bin: &str, dir: &Path, sync: &str) -> anyhow::Result<NatsChild> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?
            .port();
        let store = dir.join("nats");
        let mut cmd = Command::new(bin);
        if sync == "always" {
            let conf = dir.join("nats.conf");
            std::fs::write(
                &conf,
                format!(
                    "listen: 127.0.0.1:{port}\njetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n",
                    store.display()
                ),
            )
            .context("writing the nats-server config")?;
            cmd.arg("-c").arg(&conf);
        } else {
            cmd.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                .arg(&store);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let command = crate::harness::command_line(&cmd);
        let child = cmd.spawn().with_context(|| {
            format!("starting {command} (is nats-server installed? scripts/install-nats.sh)")
        })?;
        let mut me = NatsChild {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            command,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(st)) = me.child.try_wait() {
                bail!("{} exited ({st}) before it listened", me.command);
            }
            if Instant::now() > deadline {
                bail!("{} did not listen within 10 s", me.command);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
    }
}

impl Drop for NatsChild {
    fn drop(&mut self) {
        crate::harness::stop_child(&mut self.child);
    }
}

/// Runs the whole workload against the JetStream server at `url`.
pub fn run(
    url: &str,
    window: u32,
    plan: &mut Plan,
    shared: &Arc<Shared>,
) -> anyhow::Result<(Vec<PubResult>, Vec<ConsResult>, serde_json::Value)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("nats-io")
        .enable_all()
        .build()
        .context("starting the tokio runtime for the NATS client")?;
    // jetstream::new spawns onto the current runtime.
    let guard = rt.enter();
    let connect = |name: String| {
        let u = url.to_string();
        rt.block_on(async move {
            async_nats::ConnectOptions::new()
                .name(name)
                .connection_timeout(Duration::from_secs(5))
                .connect(u.as_str())
                .await
        })
        .with_context(|| format!("connecting to NATS at {url}: {}", crate::NATS_HINT))
    };
    // A fresh stream and consumer.
    let admin = jetstream::new(connect("gbench-admin".into())?);
    let server_version = admin.client().server_info().version.clone();
    rt.block_on(async {
        let _ = admin.delete_stream(STREAM).await;
        let s = admin
            .create_stream(stream::Config {
                name: STREAM.into(),
                subjects: vec!["bench.>".into()],
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .context("creating the JetStream stream (is JetStream enabled?)")?;
        s.create_consumer(consumer::pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: i64::from(plan.consumer_window),
            ..Default::default()
        })
        .await
        .context("creating the JetStream consumer")?;
        anyhow::Ok(())
    })?;

    let mut cons = Vec::new();
    for c in 0..plan.consumers {
        let js = jetstream::new(connect(format!("gbench-consumer-{c}"))?);
        let messages = rt.block_on(async {
            let stream = js.get_stream(STREAM).await?;
            let consumer: consumer::PullConsumer = stream
                .get_consumer(CONSUMER)
                .await
                .map_err(|e| anyhow::anyhow!("getting the JetStream consumer: {e}"))?;
            let m = consumer.messages().await?;
            anyhow::Ok(m)
        })?;
        cons.push(messages);
    }
    let mut pubs = Vec::new();
    for p in 0..plan.publishers {
        pubs.push(jetstream::new(connect(format!("gbench-pub-{p}"))?));
    }

    plan.start_ns = MonoNanos::now().as_nanos() + START_DELAY_NS;
    let plan: &Plan = plan;
    let handle = rt.handle().clone();
    let out = std::thread::scope(|s| {
        let cons_h = on_threads(s, &handle, "js-cons", cons, |_, messages| {
            let shared = shared.clone();
            async move { consume(messages, plan, &shared).await }
        })?;
        let pub_h = on_threads(s, &handle, "js-pub", pubs, |p, js| {
            let shared = shared.clone();
            async move { publish(js, p, window, plan, &shared).await }
        })?;
        let (pubs, cons) = super::finish(shared, plan, pub_h, cons_h)?;
        anyhow::Ok((pubs, cons))
    })?;
    let _ = rt.block_on(admin.delete_stream(STREAM));
    drop(admin);
    drop(guard);
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok((
        out.0,
        out.1,
        serde_json::json!({
            "nats_server_version": server_version,
            "publish_window": window,
            "client": "async-nats 0.46 jetstream, 2 tokio IO threads",
        }),
    ))
}

async fn publish(
    js: jetstream::Context,
    p: usize,
    window: u32,
    plan: &Plan,
    shared: &Shared,
) -> PubResult {
    let mut r = PubResult::new(plan, p, window);
    r.state = vec![0; plan.per_publisher[p] as usize];
    let subject = format!("bench.p{p}");
    let warmup = plan.schedule.warmup_ns;
    let mut inflight = FuturesUnordered::new();
    let mut payload = vec![0u8; plan.mix.max_size()];
    let (mut n, mut last_send) = (0u64, 0u64);
    let on_done = |r: &mut PubResult, (k, intended, res): (u64, u64, Result<_, String>)| {
        let now = since_start(plan.start_ns);
        match res {
            Ok(()) => {
                r.on_ack(k, intended, now, warmup);
                shared.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => r.on_nack(k, e),
        }
    };
    for slot in plan.slots_of(p) {
        if shared.stopped() || plan.past_cutoff() {
            break;
        }
        let due = plan.start_ns + slot.at_ns;
        // Wait for the slot, taking ACKs meanwhile: a timer while far (1 ms timer
        // granularity), then yield.
        loop {
            let now = MonoNanos::now().as_nanos();
            if now >= due {
                break;
            }
            let remaining = due - now;
            if remaining > 1_200_000 || !inflight.is_empty() && remaining > 200_000 {
                let wait = Duration::from_nanos(remaining.saturating_sub(1_000_000).max(100_000));
                if inflight.is_empty() {
                    tokio::time::sleep(wait).await;
                } else if let Ok(Some(done)) = tokio::time::timeout(wait, inflight.next()).await {
                    on_done(&mut r, done);
                }
            } else {
                tokio::task::yield_now().await;
                std::thread::yield_now();
            }
        }
        while inflight.len() >= window as usize && !plan.past_cutoff() {
            let wait = Duration::from_millis(100);
            if let Ok(Some(done)) = tokio::time::timeout(wait, inflight.next()).await {
                on_done(&mut r, done);
            }
        }
        if plan.past_cutoff() {
            break;
        }
        let size = plan.mix.size_at(slot.index);
        write_header(&mut payload[..size], p as u32, n, slot.at_ns);
        let fut = match js
            .publish(subject.clone(), payload[..size].to_vec().into())
            .await
        {
            Ok(f) => f,
            Err(e) => {
                r.error = Some(format!("publishing: {e}"));
                break;
            }
        };
        let (k, intended) = (n, slot.at_ns);
        inflight.push(async move {
            let res = fut.await.map(|_| ()).map_err(|e| format!("{:?}", e.kind()));
            (k, intended, res)
        });
        let now_rel = since_start(plan.start_ns);
        if !slot.warmup {
            r.lateness.record(now_rel.saturating_sub(slot.at_ns));
            r.sent_measured += 1;
        }
        last_send = now_rel;
        n += 1;
        shared.sent.fetch_add(1, Ordering::Relaxed);
        // Take whatever ACKs are ready without waiting.
        while let Some(Some(done)) = futures_util::FutureExt::now_or_never(inflight.next()) {
            on_done(&mut r, done);
        }
    }
    let deadline = tokio::time::Instant::now() + DRAIN;
    while !inflight.is_empty() {
        match tokio::time::timeout_at(deadline, inflight.next()).await {
            Ok(Some(done)) => on_done(&mut r, done),
            _ => break,
        }
    }
    r.state.truncate(n as usize);
    r.sent = n;
    r.last_send_ns = last_send;
    r
}

async fn consume(mut messages: consumer::pull::Stream, plan: &Plan, shared: &Shared) -> ConsResult {
    let mut r = ConsResult::new(plan);
    while !shared.consumers_stop.load(Ordering::Acquire) {
        let m = match tokio::time::timeout(Duration::from_millis(50), messages.next()).await {
            Err(_) | Ok(None) => continue,
            Ok(Some(Err(e))) => {
                // Heartbeat / flow-control hiccups are reported, not fatal.
                r.error
                    .get_or_insert_with(|| format!("consumer stream: {e}"));
                continue;
            }
            Ok(Some(Ok(m))) => m,
        };
        let now = since_start(plan.start_ns);
        let redelivered = m.info().map(|i| i.delivered > 1).unwrap_or(false);
        if r.on_delivery(plan, &m.payload, redelivered, now) {
            shared.delivered.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = m.ack().await {
            r.error = Some(format!("ack: {e}"));
            break;
        }
    }
    r
}

/// One scoped thread per item, named `PREFIX-i`, each running `make(i, item)` to
/// completion on the runtime behind `handle` (the JetStream publishers and consumers).
fn on_threads<'s, T, F>(
    s: &'s std::thread::Scope<'s, '_>,
    handle: &tokio::runtime::Handle,
    prefix: &str,
    items: Vec<T>,
    make: impl Fn(usize, T) -> F,
) -> std::io::Result<Vec<std::thread::ScopedJoinHandle<'s, F::Output>>>
where
    F: std::future::Future + Send + 's,
    F::Output: Send + 's,
{
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let (handle, fut) = (handle.clone(), make(i, item));
            std::thread::Builder::new()
                .name(format!("{prefix}-{i}"))
                .spawn_scoped(s, move || handle.block_on(fut))
        })
        .collect()
}
