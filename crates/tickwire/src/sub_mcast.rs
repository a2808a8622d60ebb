//! `tickwire sub --multicast auto`: the topics the router sends by multicast are
//! received by multicast (docs/multicast.md §10); the rest, as always, over TCP.

use std::time::Duration;

use clap::Args;
use tickwire_client::{
    Message, MulticastEvent, MulticastOptions, MulticastReceiver, ReconnectOptions,
    ReconnectingClient,
};
use tickwire_rt::text::count;

/// `--multicast auto|off` and its settings.
#[derive(Args, Debug, Clone)]
pub struct MulticastArgs {
    /// auto: receive the topics the router sends by multicast that way (it
    /// announces the groups when connecting; nothing else changes); off: everything over
    /// TCP.
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = ["auto", "off"])]
    multicast: String,
    /// The interface to join the groups on [default: 127.0.0.1].
    #[arg(long, value_name = "IP")]
    multicast_interface: Option<std::net::Ipv4Addr>,
    /// Tests and demos: drop this fraction of the multicast datagrams received (0.05 =
    /// 5%; recovered by NAK) [default: 0].
    #[arg(long, value_name = "P")]
    multicast_loss: Option<f64>,
    /// Seed of --multicast-loss [default: 0].
    #[arg(long, value_name = "S", requires = "multicast_loss")]
    multicast_seed: Option<u64>,
}

impl MulticastArgs {
    pub fn on(&self) -> bool {
        self.multicast == "auto"
    }

    /// Offers the MCAST capability on every connection when on.
    pub fn apply(&self, mut opts: ReconnectOptions) -> ReconnectOptions {
        opts.client.multicast = self.on();
        opts
    }
}

/// The multicast side of `sub`: joined to the streams of the current connection, and
/// joined again when a new connection (a restarted router) announces new ones.
pub struct SubMulticast {
    args: MulticastArgs,
    patterns: Vec<String>,
    sessions: Vec<u32>,
    rx: Option<MulticastReceiver>,
}

impl SubMulticast {
    pub fn new(args: &MulticastArgs, patterns: &[String]) -> SubMulticast {
        SubMulticast {
            args: args.clone(),
            patterns: patterns.to_vec(),
            sessions: Vec::new(),
            rx: None,
        }
    }

    /// Whether any stream is being received.
    pub fn active(&self) -> bool {
        self.rx.as_ref().is_some_and(|r| !r.is_empty())
    }

    /// Joins the streams the current connection announced, if they changed.
    pub fn refresh(&mut self, client: &mut ReconnectingClient) -> anyhow::Result<()> {
        if !self.args.on() {
            return Ok(());
        }
        let Some(c) = client.client() else {
            return Ok(());
        };
        let routes = c.multicast_routes();
        let sessions: Vec<u32> = routes.iter().map(|r| r.session).collect();
        if sessions == self.sessions && self.rx.is_some() {
            return Ok(());
        }
        if let Some(mut old) = self.rx.take() {
            old.close();
        }
        let opts = MulticastOptions {
            interface: self
                .args
                .multicast_interface
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST),
            loss: self.args.multicast_loss.unwrap_or(0.0),
            seed: self.args.multicast_seed.unwrap_or(0),
        };
        let mut rx = MulticastReceiver::join(routes, &opts)?;
        for p in &self.patterns {
            rx.add_pattern(p)?;
        }
        for r in routes {
            eprintln!(
                "multicast: receiving {} from {} (session {:08x})",
                r.patterns.join(","),
                r.group,
                r.session
            );
        }
        if routes.is_empty() {
            eprintln!(
                "multicast: the router sends no topic by multicast (its [[router.multicast]] \
                 streams, docs/multicast.md): everything comes over the connection"
            );
        }
        self.sessions = sessions;
        self.rx = Some(rx);
        Ok(())
    }

    /// Reads the streams, waiting up to `wait`: each message to `on(Some(m))`; before a
    /// gap is reported on standard error, `on(None)` (to flush standard output first).
    pub fn poll(&mut self, wait: Duration, mut on: impl FnMut(Option<&Message<'_>>)) -> usize {
        let Some(rx) = &mut self.rx else { return 0 };
        rx.poll(wait, |ev| match ev {
            MulticastEvent::Message(m) => on(Some(&m)),
            MulticastEvent::Gap {
                group,
                first_msg,
                messages,
            } => {
                on(None);
                eprintln!(
                    "multicast gap: messages {first_msg}..{} of {group} lost ({})",
                    (first_msg + messages).saturating_sub(1),
                    tickwire_rt::text::count(messages, "message", "messages")
                );
            }
        })
    }

    /// The multicast summary line (printed with `--quiet`, on Ctrl-C or when the router
    /// connection is lost), when multicast was used.
    pub fn report(&mut self) {
        if let Some(rx) = &mut self.rx {
            rx.close();
            let s = rx.stats();
            eprintln!(
                "multicast: {}, {}, {} ({} lost), {} dropped by --multicast-loss",
                count(s.delivered, "message", "messages"),
                count(s.recovered, "recovered hole", "recovered holes"),
                count(s.gaps, "gap", "gaps"),
                count(s.lost, "message", "messages"),
                count(s.injected_loss, "datagram", "datagrams"),
            );
        }
    }

    /// A last flow report to each sender.
    pub fn close(&mut self) {
        if let Some(rx) = &mut self.rx {
            rx.close();
        }
    }
}
