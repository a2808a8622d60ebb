//! `bench stream --transport tickwire-mcast,udp-mcast`: the stream over a multicast
//! group on 127.0.0.1 (issue 21, docs/multicast.md), no router.
//!
//! - `tickwire-mcast`: the sender publishes with [`McastPublisher`] (the sender core the
//!   router's multicast streams use too) to a fresh group; a receiver thread joined with
//!   [`McastSubscriber`] (accepting only this sender's session) delivers in stream order
//!   and reflects 1 in `--reflect-every` back to the sender by unicast UDP. The messages
//!   due at once share a datagram (one `sendto` per batch, as the router path writes
//!   once per batch); NAKs and heartbeats are served from the sender's idle loop.
//! - `udp-mcast`: the floor: plain UDP datagrams to a fresh group, one message each,
//!   received and reflected by the `udp` transport's receiver thread.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{bail, Context};
use tickwire_capture::net::{group_receiver, group_sender};
use tickwire_mcast::driver::Delivery;
use tickwire_mcast::{
    McastPublisher, McastSubscriber, PublisherOptions, ReceiverConfig, SenderConfig,
    SubscriberOptions,
};
use tickwire_rt::MonoNanos;
use tickwire_wire::frame::PublishOptions;

use super::{
    harness, idle_once, spawn_udp, IdleStrategy, Receiver, Reflections, RxOutcome, SenderLink,
    StreamArgs, Transport, STREAM_TOPIC,
};
use crate::stats::SeqTracker;

/// The groups' address; the port is a free one per step, so concurrent runs (and the
/// tests' groups) do not meet.
const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 255, 74, 61);
/// Room for the datagram and frame headers and the topic around a payload.
const OVERHEAD: usize = 256;
/// Largest datagram (IPv4 UDP payload).
const MAX_DATAGRAM: usize = 65_507;
/// How often the sender reads NAKs and runs its timers (heartbeats) while idle.
const SENDER_POLL_NS: u64 = 100_000;

/// The report's description of a multicast transport's path.
pub(super) fn path(t: Transport) -> &'static str {
    if t == Transport::UdpMcast {
        "raw UDP datagrams to a multicast group on 127.0.0.1, one message per datagram (one sendto each), a receiver thread joined to it, reflections by unicast UDP"
    } else {
        "tickwire multicast sender (no router) → group on 127.0.0.1 → receiver thread joined to it (in order, NAK recovery), reflections by unicast UDP; the messages due at once share a datagram, so its rates are not one sendto per message as udp-mcast's are"
    }
}

pub(super) fn validate(args: &StreamArgs) -> anyhow::Result<()> {
    let mcast = args.transport.contains(&Transport::TickwireMcast)
        || args.transport.contains(&Transport::UdpMcast);
    if mcast && args.size + OVERHEAD > MAX_DATAGRAM {
        bail!(
            "--size {} does not fit in one multicast datagram (max {})",
            args.size,
            MAX_DATAGRAM - OVERHEAD
        );
    }
    Ok(())
}

/// A multicast group on a port free on this host now.
fn fresh_group() -> anyhow::Result<SocketAddrV4> {
    let probe = UdpSocket::bind("0.0.0.0:0").context("finding a free UDP port")?;
    Ok(SocketAddrV4::new(GROUP_IP, probe.local_addr()?.port()))
}

pub(super) fn udp_mcast_pair(
    args: &StreamArgs,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    let group = fresh_group()?;
    let rx =
        group_receiver(group, Ipv4Addr::LOCALHOST).with_context(|| format!("joining {group}"))?;
    let sock = group_sender(Ipv4Addr::LOCALHOST).context("opening the multicast sender")?;
    spawn_udp(args, quit, rx, sock, Some(SocketAddr::V4(group)))
}

struct McastLink {
    publisher: McastPublisher,
    /// Where reflections arrive (unicast).
    reflections: UdpSocket,
    buf: Vec<u8>,
    polled: u64,
}

impl SenderLink for McastLink {
    fn send(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        self.publisher
            .publish(STREAM_TOPIC, payload, PublishOptions::default())
            .context("publishing to the multicast group")?;
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.publisher.flush();
        Ok(())
    }

    fn wait_poll(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        super::wait_readable(&self.reflections, timeout);
        self.poll(f)
    }

    fn poll(&mut self, f: &mut dyn FnMut(&[u8])) -> anyhow::Result<()> {
        let now = MonoNanos::now().as_nanos();
        if now.saturating_sub(self.polled) >= SENDER_POLL_NS {
            self.publisher.poll();
            self.polled = now;
        }
        while let Ok(n) = self.reflections.recv(&mut self.buf) {
            f(&self.buf[..n]);
        }
        Ok(())
    }
}

pub(super) fn tickwire_mcast_pair(
    args: &StreamArgs,
    quit: Arc<AtomicBool>,
) -> anyhow::Result<(Box<dyn SenderLink>, Receiver)> {
    let group = fresh_group()?;
    let max_datagram = (args.size + OVERHEAD).clamp(1400, MAX_DATAGRAM);
    let publisher = McastPublisher::new(PublisherOptions {
        group,
        sender: SenderConfig {
            max_datagram,
            ..SenderConfig::default()
        },
        ..PublisherOptions::default()
    })
    .with_context(|| format!("opening a multicast sender to {group}"))?;
    let reflections = UdpSocket::bind("127.0.0.1:0").context("binding the reflection socket")?;
    reflections.set_nonblocking(true)?;
    let reflect_to = reflections.local_addr()?;
    let opts = SubscriberOptions {
        group,
        patterns: vec![STREAM_TOPIC.into()],
        receiver: ReceiverConfig {
            session: Some(publisher.session()),
            max_datagram,
            ..ReceiverConfig::default()
        },
        ..SubscriberOptions::default()
    };
    let (spin, every, near) = (
        args.idle == IdleStrategy::Spin,
        args.reflect_every,
        args.pin.map(|p| p.near),
    );
    let q = Arc::clone(&quit);
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let handle = harness::spawn_pinned("mcast-receiver", near, move || {
        let setup = McastSubscriber::new(opts)
            .map_err(anyhow::Error::from)
            .and_then(|s| Ok((s, UdpSocket::bind("127.0.0.1:0")?)))
            .with_context(|| format!("joining {group}"));
        let (sub, sock) = match setup {
            Ok(s) => {
                let _ = ready_tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = ready_tx.send(Err(format!("{e:#}")));
                return Err(e);
            }
        };
        receive(sub, &sock, reflect_to, spin, every, &q)
    })
    .context("spawning the multicast receiver")?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => bail!("starting the multicast receiver: {e}"),
        Err(_) => bail!("the multicast receiver thread died before joining"),
    }
    let link = McastLink {
        publisher,
        reflections,
        buf: vec![0; MAX_DATAGRAM],
        polled: 0,
    };
    Ok((Box::new(link), Receiver { handle, quit }))
}

/// The receiver thread's loop: deliver, count, reflect; until END or `quit`.
fn receive(
    mut sub: McastSubscriber,
    sock: &UdpSocket,
    reflect_to: SocketAddr,
    spin: bool,
    every: u64,
    quit: &AtomicBool,
) -> anyhow::Result<RxOutcome> {
    let mut out = RxOutcome::default();
    let mut tracker = SeqTracker::default();
    let mut refl = Reflections::default();
    loop {
        let mut handler = |d: Delivery<'_>| {
            if let Delivery::Message { msg, .. } = d {
                let now = MonoNanos::now().as_nanos();
                refl.observe(msg.payload, now, every, &mut tracker, &mut out);
            }
        };
        let n = if spin {
            sub.poll(&mut handler)
        } else {
            sub.poll_wait(Duration::from_millis(50), &mut handler)
        };
        // A reflection that does not fit the socket now is lost (and shows as
        // reflections_sent > received).
        for p in refl.iter() {
            if sock.send_to(p, reflect_to).is_ok() {
                out.reflections_sent += 1;
            }
        }
        refl.clear();
        if refl.ended || quit.load(Ordering::Relaxed) {
            sub.close();
            return Ok(out);
        }
        if n == 0 && spin {
            idle_once(false);
        }
    }
}
