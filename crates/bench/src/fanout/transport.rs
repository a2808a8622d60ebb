//! The systems under test behind one small interface: a publishing connection and a
//! subscribing connection, for tickwire, for the raw fan-out floor ([`super::raw`]) and
//! for core NATS.
//!
//! NATS client choice: `async-nats`, the official client maintained by the NATS
//! authors (nats-io/nats.rs). The synchronous `nats` crate is deprecated by them
//! ("use async-nats instead") and no longer maintained, so measuring NATS through it
//! would measure a client its users are told not to use. `async-nats` needs a tokio
//! runtime: the bench runs one small multi-thread runtime (2 workers: they drive the
//! connections' socket IO), while the open-loop schedule stays on the bench's own
//! publisher and subscriber threads, which call into the runtime with
//! `Handle::block_on`. So both systems are driven by the same threads, the same
//! schedule and the same clock; NATS adds its client's IO tasks, as its users get.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use futures_util::stream::SelectAll;
use futures_util::{FutureExt, StreamExt};
use tickwire_client::{Client, ClientOptions, PublishOptions, Stamps, Wait};
use tickwire_rt::IdleStrategy;

use super::raw::{RawPub, RawSub};
use super::workload::nats_subject;

/// How subscribers wait for messages.
pub const CLIENT_IDLE: [(IdleStrategy, &str); 3] = [
    (
        IdleStrategy::Block,
        "Sleep in the client library until data arrives (poll(2) / a tokio wake-up)",
    ),
    (
        IdleStrategy::Spin,
        "Busy-poll without sleeping (one busy core per subscriber thread)",
    ),
    (
        IdleStrategy::Yield,
        "Busy-poll, yielding the CPU after each empty poll: for subscribers that share a \
         core with the publishers (the published layout), so a waiting subscriber never \
         holds the core for a scheduler slice and never pays a sleeping thread's wake-up",
    ),
];

/// How long one blocking wait lasts before the subscriber checks whether to stop.
const BLOCK_SLICE: Duration = Duration::from_millis(20);

/// Messages the NATS client may buffer per subscription before it drops them (its
/// default, 65536, is easily exceeded during a burst at full rate).
const NATS_SUBSCRIPTION_CAPACITY: usize = 1 << 20;

/// One publishing connection.
// A handful per run, built once and never moved on the hot path: boxing the larger
// variant would only add an indirection to every publish.
#[allow(clippy::large_enum_variant)]
pub enum PubConn {
    Tickwire {
        client: Client,
        topics: Vec<String>,
    },
    /// The raw floor: frames to the relay, batched like the tickwire client.
    Raw(RawPub),
    Nats {
        rt: tokio::runtime::Handle,
        client: async_nats::Client,
        subjects: Vec<async_nats::Subject>,
    },
}

impl PubConn {
    /// `addr`: `HOST:PORT`, or `shm:NAME` over shared memory.
    pub fn tickwire(
        addr: &str,
        name: &str,
        batch_bytes: usize,
        topics: &[String],
    ) -> anyhow::Result<PubConn> {
        let opts = ClientOptions {
            name: name.into(),
            batch_bytes,
            ..ClientOptions::default()
        };
        let client = Client::connect_to(addr, opts)
            .with_context(|| format!("connecting {name} to the router at {addr}"))?;
        Ok(PubConn::Tickwire {
            client,
            topics: topics.to_vec(),
        })
    }

    pub fn raw(addr: SocketAddr, name: &str, batch_bytes: usize) -> anyhow::Result<PubConn> {
        Ok(PubConn::Raw(RawPub::connect(addr, name, batch_bytes)?))
    }

    pub fn nats(
        rt: &tokio::runtime::Handle,
        url: &str,
        name: &str,
        topics: &[String],
    ) -> anyhow::Result<PubConn> {
        let client = nats_connect(rt, url, name)?;
        let subjects = topics
            .iter()
            .map(|t| async_nats::Subject::from(nats_subject(t)))
            .collect();
        Ok(PubConn::Nats {
            rt: rt.clone(),
            client,
            subjects,
        })
    }

    /// Queues one message on topic `t` (tickwire writes once `--batch-bytes` are
    /// pending or on [`PubConn::flush`]; the NATS client writes from its IO task as
    /// soon as it can).
    /// `stamp_ns`: carry in-line STAMPS with this publisher-send time (tickwire only).
    #[inline]
    pub fn send(&mut self, t: usize, payload: &[u8], stamp_ns: Option<u64>) -> anyhow::Result<()> {
        match self {
            PubConn::Tickwire { client, topics } => {
                let opts = PublishOptions {
                    seq: None,
                    publisher_send: stamp_ns,
                };
                client
                    .publish_with(&topics[t], payload, opts)
                    .context("publishing to the router")
            }
            // The workload has at most u16::MAX topics (the raw floor's topic field).
            PubConn::Raw(c) => c.send(t as u16, payload),
            PubConn::Nats {
                rt,
                client,
                subjects,
            } => {
                // async-nats takes the payload as `Bytes` (one allocation per message,
                // as for every user of its API).
                let fut = client.publish(subjects[t].clone(), payload.to_vec().into());
                rt.block_on(fut).context("publishing to NATS")
            }
        }
    }

    /// Writes what is queued (before the publisher waits for its next slot).
    pub fn flush(&mut self) -> anyhow::Result<()> {
        match self {
            PubConn::Tickwire { client, .. } => client.flush().context("flushing to the router"),
            PubConn::Raw(c) => c.flush(),
            // The IO task flushes whenever its queue runs empty.
            PubConn::Nats { .. } => Ok(()),
        }
    }

    /// Final flush and orderly close.
    pub fn close(self) -> anyhow::Result<()> {
        match self {
            PubConn::Tickwire { client, .. } => client.close().context("closing a publisher"),
            PubConn::Raw(c) => c.close(),
            PubConn::Nats { rt, client, .. } => {
                rt.block_on(client.flush()).context("flushing to NATS")?;
                Ok(())
            }
        }
    }
}

/// One subscribing connection, subscribed to its topics.
// One per subscriber, made once and never moved in the measured loop: boxing the client
// would only add an indirection to the path being measured.
#[allow(clippy::large_enum_variant)]
pub enum SubConn {
    Tickwire(Client),
    /// The raw floor, with every topic's name by its index (the frames carry the index).
    Raw(RawSub, Vec<String>),
    Nats(NatsSub),
}

/// NATS subscriptions; dropped inside the runtime (an `async_nats::Subscriber`
/// spawns its UNSUB on the current runtime when dropped).
pub struct NatsSub {
    rt: tokio::runtime::Handle,
    _client: async_nats::Client,
    subs: Option<SelectAll<async_nats::Subscriber>>,
}

impl Drop for NatsSub {
    fn drop(&mut self) {
        let _in_runtime = self.rt.enter();
        self.subs.take();
    }
}

impl SubConn {
    /// Connects and subscribes to every topic in `topics` (exact topics, one
    /// subscription each), waiting for the router's ACKs.
    /// `addr`: `HOST:PORT`, or `shm:NAME` over shared memory.
    pub fn tickwire(addr: &str, name: &str, topics: &[&str]) -> anyhow::Result<SubConn> {
        let mut c = Client::connect_to(addr, ClientOptions::named(name))
            .with_context(|| format!("connecting {name} to the router at {addr}"))?;
        for t in topics {
            c.subscribe(t)
                .with_context(|| format!("{name} subscribing to {t}"))?;
        }
        Ok(SubConn::Tickwire(c))
    }

    /// Connects to the raw relay and subscribes to `topics` (indices into `names`, the
    /// workload's topic names); `idle` is how [`SubConn::poll`] will be called.
    pub fn raw(
        addr: SocketAddr,
        name: &str,
        topics: &[u16],
        names: &[String],
        idle: IdleStrategy,
    ) -> anyhow::Result<SubConn> {
        let c = RawSub::connect(addr, name, topics, idle, BLOCK_SLICE)?;
        Ok(SubConn::Raw(c, names.to_vec()))
    }

    /// Connects, subscribes to every subject, then round-trips a PING so the server has
    /// registered the subscriptions before anything is published.
    pub fn nats(
        rt: &tokio::runtime::Handle,
        url: &str,
        name: &str,
        topics: &[&str],
    ) -> anyhow::Result<SubConn> {
        let client = nats_connect(rt, url, name)?;
        let mut subs = SelectAll::new();
        for t in topics {
            let subject = nats_subject(t);
            let s = rt
                .block_on(client.subscribe(subject.clone()))
                .with_context(|| format!("{name} subscribing to {subject}"))?;
            subs.push(s);
        }
        rt.block_on(client.flush())
            .with_context(|| format!("{name} flushing its subscriptions"))?;
        Ok(SubConn::Nats(NatsSub {
            rt: rt.clone(),
            _client: client,
            subs: Some(subs),
        }))
    }

    /// Calls `f(topic, payload, discarded_before, stamps)` for every message available, waiting
    /// (per `idle`) up to a short slice when none is. Returns how many were handled.
    /// Topics are given as the system names them (NATS subjects use `.`).
    pub fn poll(
        &mut self,
        idle: IdleStrategy,
        mut f: impl FnMut(&str, &[u8], u64, Option<Stamps>),
    ) -> anyhow::Result<usize> {
        match self {
            SubConn::Tickwire(c) => {
                let wait = match idle {
                    IdleStrategy::Block => Wait::Timeout(BLOCK_SLICE),
                    // Hybrid: refused by the option's parser (CLIENT_IDLE).
                    IdleStrategy::Spin | IdleStrategy::Yield | IdleStrategy::Hybrid => Wait::NoWait,
                };
                let n = c
                    .poll(wait, |m| {
                        f(m.topic(), m.payload(), m.discarded(), m.stamps())
                    })
                    .context("receiving from the router")?;
                if n == 0 && idle == IdleStrategy::Yield {
                    std::thread::yield_now();
                }
                Ok(n)
            }
            SubConn::Raw(c, names) => {
                let n = c.poll(|t, payload| {
                    let topic = names.get(t as usize).map_or("", String::as_str);
                    f(topic, payload, 0, None)
                })?;
                if n == 0 && idle == IdleStrategy::Yield {
                    std::thread::yield_now();
                }
                Ok(n)
            }
            SubConn::Nats(NatsSub { rt, subs, .. }) => {
                let Some(subs) = subs.as_mut() else {
                    anyhow::bail!("the NATS subscriptions are closed");
                };
                let first = match idle {
                    // A timeout (Err) means nothing arrived within the slice. The
                    // timer is created inside the runtime (it needs its time driver).
                    IdleStrategy::Block => rt
                        .block_on(async { tokio::time::timeout(BLOCK_SLICE, subs.next()).await })
                        .ok(),
                    IdleStrategy::Spin | IdleStrategy::Yield | IdleStrategy::Hybrid => {
                        subs.next().now_or_never()
                    }
                };
                if first.is_none() && idle == IdleStrategy::Yield {
                    std::thread::yield_now();
                }
                let mut n = 0;
                let mut next = first;
                loop {
                    match next {
                        None => return Ok(n),
                        Some(None) => {
                            anyhow::bail!("the NATS subscription ended (connection closed?)")
                        }
                        Some(Some(m)) => {
                            n += 1;
                            f(m.subject.as_str(), &m.payload, 0, None);
                        }
                    }
                    // Drain what is already buffered without waiting.
                    next = subs.next().now_or_never();
                }
            }
        }
    }

    pub fn close(self) {
        if let SubConn::Tickwire(c) = self {
            let _ = c.close();
        }
    }
}

fn nats_connect(
    rt: &tokio::runtime::Handle,
    url: &str,
    name: &str,
) -> anyhow::Result<async_nats::Client> {
    let opts = async_nats::ConnectOptions::new()
        .name(name)
        .subscription_capacity(NATS_SUBSCRIPTION_CAPACITY)
        .connection_timeout(Duration::from_secs(5));
    rt.block_on(opts.connect(url))
        .with_context(|| format!("connecting {name} to NATS at {url}: {}", crate::NATS_HINT))
}

/// The runtime that drives the NATS connections' IO.
pub fn nats_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("nats-io")
        .enable_all()
        .build()
        .context("starting the tokio runtime for the NATS client")
}
