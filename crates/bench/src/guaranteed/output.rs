//! The report of `tickwire bench guaranteed`: terminal table, JSON, SVG plot.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;

use super::{ConsResult, GuaranteedArgs, Plan, PubResult, Reconciliation};
use crate::report::{latency_table, line_chart_svg, Machine, Series};
use crate::stats::{invalid_reason, Latency, Summary};

/// Everything the report is built from.
pub struct Inputs<'a> {
    pub machine: Machine,
    pub system: &'static str,
    pub server: String,
    pub server_command: Option<String>,
    pub durability: String,
    pub args: &'a GuaranteedArgs,
    pub plan: &'a Plan,
    pub pubs: &'a [PubResult],
    pub cons: &'a [ConsResult],
    pub recon: Reconciliation,
    pub extra: serde_json::Value,
    pub stopped: bool,
}

#[derive(Debug, Serialize)]
pub struct Config {
    pub target_rate: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub sizes: Vec<usize>,
    pub publishers: usize,
    pub consumers: usize,
    pub consumer_window: u32,
    pub publish_windows: Vec<u32>,
    pub router_idle: Option<String>,
    pub ack_batching: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Second {
    pub second: usize,
    pub acked: u64,
    pub ack_p50_us: f64,
    pub ack_p99_us: f64,
    pub delivery_p50_us: f64,
    pub delivery_p99_us: f64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub system: &'static str,
    pub server: String,
    pub server_command: Option<String>,
    /// The durability policy: stated with every result.
    pub durability: String,
    pub machine: Machine,
    pub config: Config,
    pub warmup_excluded: bool,
    /// Publishes sent per second over the whole run (warm-up included).
    pub achieved_publish_rate: f64,
    /// Publishes acknowledged per second over the whole run (warm-up included).
    pub acked_rate: f64,
    pub valid: bool,
    pub invalid: Option<String>,
    pub ack_latency: Summary,
    pub delivery_latency: Summary,
    pub sender_lateness: Summary,
    pub nacks: BTreeMap<String, u64>,
    pub reconciliation: Reconciliation,
    pub errors: Vec<String>,
    pub timeline: Vec<Second>,
    pub stopped: bool,
    pub extra: serde_json::Value,
}

impl Report {
    pub fn build(i: Inputs<'_>) -> Report {
        let s = &i.plan.schedule;
        let (warm, dur) = (s.warmup_ns, s.duration_ns.max(1));
        let mut ack = Latency::new();
        let mut lateness = Latency::new();
        let mut delivery = Latency::new();
        let mut nacks = BTreeMap::new();
        let mut errors = Vec::new();
        let (mut sent_m, mut acked_m, mut last_send, mut last_ack) = (0u64, 0u64, 0u64, 0u64);
        let secs = i.plan.seconds();
        let mut ack_s = vec![Latency::new(); secs];
        let mut del_s = vec![Latency::new(); secs];
        let mut acked_per_s = vec![0u64; secs + 60];
        for (k, p) in i.pubs.iter().enumerate() {
            ack.merge(&p.ack);
            lateness.merge(&p.lateness);
            for (r, n) in &p.nacks {
                *nacks.entry(r.clone()).or_insert(0) += n;
            }
            if let Some(e) = &p.error {
                errors.push(format!("publisher {k}: {e}"));
            }
            sent_m += p.sent;
            acked_m += p.state.iter().filter(|s| **s == 1).count() as u64;
            last_send = last_send.max(p.last_send_ns);
            last_ack = last_ack.max(p.last_ack_ns);
            for (a, b) in ack_s.iter_mut().zip(&p.ack_by_second) {
                a.merge(b);
            }
            for (a, b) in acked_per_s.iter_mut().zip(&p.acked_per_second) {
                *a += b;
            }
        }
        for (k, c) in i.cons.iter().enumerate() {
            delivery.merge(&c.delivery);
            if let Some(e) = &c.error {
                errors.push(format!("consumer {k}: {e}"));
            }
            for (a, b) in del_s.iter_mut().zip(&c.delivery_by_second) {
                a.merge(b);
            }
        }
        // Rates over the whole run, warm-up included (a server far behind never reaches
        // the measured slots), until the last send / the last ACK, at least the schedule.
        let span = |last: u64| last.max(warm + dur) as f64 / 1e9;
        let achieved = sent_m as f64 / span(last_send);
        let acked_rate = acked_m as f64 / span(last_ack);
        let target = s.target_rate();
        let invalid = invalid_reason(target, achieved).or_else(|| {
            invalid_reason(target, acked_rate).map(|r| format!("acknowledged rate: {r}"))
        });
        let last_second = (last_ack.max(last_send) / 1_000_000_000) as usize + 1;
        let timeline = (0..last_second.min(acked_per_s.len()))
            .map(|k| {
                let a = ack_s.get(k).map(Latency::summary);
                let d = del_s.get(k).map(Latency::summary);
                Second {
                    second: k,
                    acked: acked_per_s[k],
                    ack_p50_us: a.as_ref().map_or(0.0, |a| a.p50_us),
                    ack_p99_us: a.as_ref().map_or(0.0, |a| a.p99_us),
                    delivery_p50_us: d.as_ref().map_or(0.0, |d| d.p50_us),
                    delivery_p99_us: d.as_ref().map_or(0.0, |d| d.p99_us),
                }
            })
            .collect();
        let mut sizes = i.plan.mix.cycle();
        sizes.sort_unstable();
        sizes.dedup();
        Report {
            bench: "guaranteed",
            system: i.system,
            server: i.server,
            server_command: i.server_command,
            durability: i.durability,
            machine: i.machine,
            config: Config {
                target_rate: target,
                duration_s: i.args.duration,
                warmup_s: i.args.warmup,
                sizes,
                publishers: i.plan.publishers,
                consumers: i.plan.consumers,
                consumer_window: i.plan.consumer_window,
                publish_windows: i.pubs.iter().map(|p| p.window).collect(),
                router_idle: (i.system == "tickwire" && i.args.router.is_none())
                    .then(|| i.args.idle.clone()),
                ack_batching: if i.system != "nats-jetstream" {
                    "one CONSUMER_ACK range per read batch"
                } else {
                    "one ack per message (JetStream explicit ack)"
                },
            },
            warmup_excluded: true,
            achieved_publish_rate: achieved,
            acked_rate,
            valid: invalid.is_none(),
            invalid,
            ack_latency: ack.summary(),
            delivery_latency: delivery.summary(),
            sender_lateness: lateness.summary(),
            nacks,
            reconciliation: i.recon,
            errors,
            timeline,
            stopped: i.stopped,
            extra: i.extra,
        }
    }

    pub fn print(&self, w: &mut dyn std::io::Write) {
        let r = &self.reconciliation;
        crate::outln!(w);
        crate::outln!(
            w,
            "bench guaranteed: {} ({}), {} | {}",
            self.system,
            self.server,
            self.machine.one_line(),
            self.durability
        );
        crate::outln!(
            w,
            "  sizes {:?} B, {} publisher(s) (window {:?}), {} consumer(s) (window {}), warm-up {} s excluded",
            self.config.sizes,
            self.config.publishers,
            self.config.publish_windows,
            self.config.consumers,
            self.config.consumer_window,
            self.config.warmup_s
        );
        // The floor delivers nothing: no delivery row of zeros (bench-review pass).
        let mut rows = vec![("publish->ACK".into(), self.ack_latency.clone())];
        if self.reconciliation.delivery_checked {
            rows.push(("publish->delivery".into(), self.delivery_latency.clone()));
        }
        rows.push(("sender lateness".into(), self.sender_lateness.clone()));
        crate::out!(
            w,
            "{}",
            latency_table(&format!("latency [{}]", self.durability), &rows)
        );
        crate::outln!(
            w,
            "rate (whole run): target {:.0} msg/s, published {:.0} msg/s, acknowledged {:.0} msg/s{}",
            self.config.target_rate,
            self.achieved_publish_rate,
            self.acked_rate,
            match &self.invalid {
                Some(why) => format!("  INVALID ({why})"),
                None => String::new(),
            }
        );
        let nacks = if self.nacks.is_empty() {
            "none".to_string()
        } else {
            self.nacks
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        crate::outln!(
            w,
            "messages: unsent {} sent {} acked {} nacked {} unresolved {} | delivered {} distinct ({} deliveries, {} redelivered) | NACKs: {nacks}",
            r.unsent, r.sent, r.acked, r.nacked, r.unresolved, r.delivered_distinct, r.deliveries, r.redelivered
        );
        if r.delivery_checked {
            crate::outln!(
                w,
                "lossless: {} (acked not delivered {}, unflagged duplicates {}, unknown {}, nacked but delivered {})",
                if r.lossless { "yes" } else { "NO" },
                r.acked_lost,
                r.unflagged_duplicates,
                r.unknown,
                r.nacked_delivered
            );
        } else {
            // The floor: there is no delivery to check (bench-review pass: it said
            // "lossless: yes" next to "delivered 0").
            crate::outln!(
                w,
                "every publish answered: {} ({} of {} sent acknowledged or refused; the floor delivers nothing, so no delivery is checked)",
                if r.lossless { "yes" } else { "NO" },
                r.acked + r.nacked,
                r.sent
            );
        }
        for e in &self.errors {
            crate::outln!(w, "error: {e}");
        }
        if self.stopped {
            crate::outln!(
                w,
                "stopped early ({}): the figures cover what was measured",
                tickwire_rt::stop::stopped_by()
            );
        }
    }

    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let pts = |f: fn(&Second) -> f64| -> Vec<(f64, f64)> {
            self.timeline
                .iter()
                .map(|s| (s.second as f64, f(s)))
                .collect()
        };
        let left = [
            Series::new("ACK p50", pts(|s| s.ack_p50_us)),
            Series::new("ACK p99", pts(|s| s.ack_p99_us)),
            Series::new("delivery p50", pts(|s| s.delivery_p50_us)),
            Series::new("delivery p99", pts(|s| s.delivery_p99_us)),
        ];
        let right = [Series::new("acknowledged msg/s", pts(|s| s.acked as f64))];
        line_chart_svg(
            path,
            &format!("bench guaranteed: {} — {}", self.system, self.durability),
            "second of the run (by intended send time; rate by ACK arrival)",
            "latency (µs)",
            &left,
            true,
            Some(("msg/s", &right)),
        )
    }

    pub fn exit_code(&self) -> ExitCode {
        if !self.reconciliation.lossless || !self.errors.is_empty() {
            ExitCode::from(1)
        } else if !self.valid {
            ExitCode::from(3)
        } else {
            crate::report::exit_code(self.stopped)
        }
    }
}
