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
    /// When Ctrl-C stopped the publishers, from schedule time 0 (None: they ran their
    /// schedule, also when the stop came after).
    pub stopped_at_ns: Option<u64>,
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
    /// Publishes sent per second over the whole run (warm-up included; a stopped run's
    /// until the stop).
    pub achieved_publish_rate: f64,
    /// Publishes acknowledged per second over the whole run (warm-up included; a
    /// stopped run's until the stop).
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
    /// When Ctrl-C stopped the publishers (s from schedule time 0; None when they ran
    /// their schedule): the stopped run's rates are over this, not the schedule.
    pub stopped_at_s: Option<f64>,
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
        // the measured slots), until the last send / the last ACK, at least the schedule
        // or, when Ctrl-C stopped the run, at least up to the stop (new-user pass: a run
        // stopped at half time was divided by the whole schedule, and read as INVALID,
        // saturated, at half the rate it kept).
        let ran = i.stopped_at_ns.map_or(warm + dur, |t| t.min(warm + dur));
        let span = |last: u64| last.max(ran) as f64 / 1e9;
        let rate = |n: u64, last: u64| {
            let secs = span(last);
            if secs > 0.0 {
                n as f64 / secs
            } else {
                0.0
            }
        };
        let achieved = rate(sent_m, last_send);
        let acked_rate = rate(acked_m, last_ack);
        let target = s.target_rate();
        // Stopped before anything was sent: nothing to judge.
        let invalid = (span(last_send.max(last_ack)) > 0.0)
            .then(|| {
                invalid_reason(target, achieved).or_else(|| {
                    invalid_reason(target, acked_rate).map(|r| format!("acknowledged rate: {r}"))
                })
            })
            .flatten();
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
            stopped_at_s: i.stopped_at_ns.map(|t| t as f64 / 1e9),
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
            let at = match self.stopped_at_s {
                Some(t) => format!(
                    " {t:.1} s into the planned {} s (warm-up included), rates over those {t:.1} s",
                    self.config.warmup_s + self.config.duration_s
                ),
                None => String::new(),
            };
            crate::outln!(
                w,
                "stopped early ({}){at}: the figures cover what was measured",
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
        let right = [Series::new("acknowledged msg/s", self.acked_rate_points())];
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

    /// The acknowledged rate of each whole second of the timeline: the last one is
    /// cut by the end of the run (new-user pass: its few drain-time ACKs, drawn as a
    /// second's rate, read as a collapse of throughput at the end of every run).
    fn acked_rate_points(&self) -> Vec<(f64, f64)> {
        let whole = self.timeline.len().saturating_sub(1);
        self.timeline[..whole]
            .iter()
            .map(|s| (s.second as f64, s.acked as f64))
            .collect()
    }

    /// 1 lossless check failed or an error, 3 INVALID, 130 stopped, 0 ok: the order
    /// of every bench (docs/benchmarking.md). A stopped run's rates are over the time
    /// it ran, so the stop itself does not make it INVALID.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guaranteed::{reconcile, Target};
    use crate::schedule::{RatePattern, Schedule, SizeMix};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: GuaranteedArgs,
    }

    const S: u64 = 1_000_000_000;

    /// 1000 msg/s for 1 s of warm-up and 10 s measured.
    fn plan() -> Plan {
        Plan {
            schedule: Schedule {
                pattern: RatePattern::Steady { rate: 1000.0 },
                warmup_ns: S,
                duration_ns: 10 * S,
            },
            mix: SizeMix::single(100),
            publishers: 1,
            consumers: 0,
            consumer_window: 10,
            start_ns: 0,
            per_publisher: vec![11_000],
            progress: |_| {},
        }
    }

    /// One publisher that sent `sent` messages evenly over `secs` seconds, each
    /// acknowledged 1 ms after its send.
    fn publisher(plan: &Plan, sent: u64, secs: u64) -> PubResult {
        let mut p = PubResult::new(plan, 0, 4096);
        p.state = vec![0; sent as usize];
        p.sent = sent;
        let gap = secs * S / sent;
        for n in 0..sent {
            p.on_ack(n, n * gap, n * gap + 1_000_000, plan.schedule.warmup_ns);
        }
        p.last_send_ns = (sent - 1) * gap;
        p
    }

    fn report(plan: &Plan, p: PubResult, stopped_at_ns: Option<u64>) -> Report {
        let cli = Cli::try_parse_from(["x", "--rate", "1k", "--duration", "10s"]).unwrap();
        assert_eq!(cli.args.target, Target::Tickwire);
        let pubs = [p];
        let recon = reconcile(&pubs, &[], false);
        Report::build(Inputs {
            machine: Machine::detect(),
            system: "floor",
            server: "127.0.0.1:1".into(),
            server_command: None,
            durability: "test".into(),
            args: &cli.args,
            plan,
            pubs: &pubs,
            cons: &[],
            recon,
            extra: serde_json::Value::Null,
            stopped: stopped_at_ns.is_some(),
            stopped_at_ns,
        })
    }

    fn code(r: &Report) -> String {
        format!("{:?}", r.exit_code())
    }

    /// New-user pass: `bench guaranteed --rate 5k --duration 10s` stopped by Ctrl-C
    /// after 5 s kept its rate, but the rate was divided by the 11 s planned: INVALID
    /// (saturated), exit 3 instead of 130.
    #[test]
    fn a_stopped_run_is_judged_over_the_time_it_ran_and_exits_130_unless_it_fell_behind() {
        let plan = plan();
        let r = report(&plan, publisher(&plan, 5000, 5), Some(5 * S));
        assert!(r.reconciliation.lossless, "{:?}", r.reconciliation);
        assert!(
            (r.achieved_publish_rate - 1000.0).abs() < 10.0,
            "{}",
            r.achieved_publish_rate
        );
        assert!((r.acked_rate - 1000.0).abs() < 10.0, "{}", r.acked_rate);
        assert!(r.valid, "{:?}", r.invalid);
        assert_eq!(r.stopped_at_s, Some(5.0));
        assert_eq!(code(&r), format!("{:?}", ExitCode::from(130)));
        let mut out = Vec::new();
        r.print(&mut out);
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("INVALID"), "{out}");
        assert!(out.contains("5.0 s into the planned 11 s"), "{out}");

        // The stop does not excuse a run that fell behind before it: 2000 messages in
        // the 5 s it ran is 400 msg/s of 1000.
        let r = report(&plan, publisher(&plan, 2000, 5), Some(5 * S));
        assert!(!r.valid);
        assert!(r.invalid.as_deref().unwrap().contains("saturated"));
        assert_eq!(code(&r), format!("{:?}", ExitCode::from(3)));
        // A run that was not stopped is judged over its whole schedule.
        let r = report(&plan, publisher(&plan, 5000, 5), None);
        assert!(!r.valid, "{}", r.achieved_publish_rate);
        let r = report(&plan, publisher(&plan, 11_000, 11), None);
        assert!(r.valid, "{:?}", r.invalid);
        assert_eq!(code(&r), format!("{:?}", ExitCode::SUCCESS));
    }

    /// New-user pass: `--plot` drew the acknowledged msg/s line down to the few ACKs of
    /// the last, partial second (the drain after the last send).
    #[test]
    fn the_plotted_ack_rate_leaves_out_the_last_partial_second() {
        let plan = plan();
        let r = report(&plan, publisher(&plan, 11_000, 11), None);
        // ACKs arrive 1 ms after each send: the last one in second 11.
        assert_eq!(r.timeline.len(), 12);
        assert_eq!(r.timeline[11].acked, 1);
        let pts = r.acked_rate_points();
        assert_eq!(pts.len(), 11);
        assert!(pts.iter().all(|&(_, rate)| rate >= 999.0), "{pts:?}");
        let scratch = tempfile::tempdir().unwrap();
        r.plot(&scratch.path().join("g.svg")).unwrap();
    }
}
