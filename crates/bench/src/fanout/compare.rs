//! Several fan-out runs in one invocation (`--compare SYSTEMS`, `--sweep SCALES`): the
//! identical workload against each system at each scale, one after the other, then
//! each percentile as a ratio to the raw floor's in the same invocation, the
//! latency-versus-rate table, the knee, the JSON and the plot (one curve per system).

use std::path::Path;

use serde::Serialize;

use super::output::Report;
use super::workload::human_rate;
use crate::report::{line_chart_svg, Machine, Series};
use crate::stats::Summary;

/// The knee's latency bar: the highest scale whose p99 is at most this (µs), with both
/// verdicts sustained (the issue-16 bar: p99 <= 1 ms).
pub const KNEE_P99_US: f64 = 1_000.0;

/// One (scale, system) run, as the table and the plot use it.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub scale: f64,
    pub system: String,
    pub target_rate: f64,
    pub achieved_rate: f64,
    pub latency: Summary,
    /// The sender rule: achieved >= 90% of the target.
    pub sender_valid: bool,
    /// The receiver rule (output::ReceiverVerdict).
    pub receivers_sustained: bool,
    pub reconciled: bool,
    /// The host took a CPU away during the measured part, or other processes used
    /// enough CPU to disturb it (host_watch: the run's own host line says DISTURBED).
    pub host_disturbed: bool,
}

impl Point {
    pub fn of(report: &Report) -> Point {
        Point {
            scale: report.workload.scale,
            system: report.system.to_owned(),
            target_rate: report.rates.target,
            achieved_rate: report.rates.achieved,
            latency: report.latency.clone(),
            sender_valid: report.valid,
            receivers_sustained: report.receivers.as_ref().is_some_and(|r| r.sustained),
            reconciled: report.counters.reconciled,
            // Bench-review pass: only stalls were counted, so a run whose host line
            // said "DISTURBED: other processes used 0.98 CPU" was "quiet" here.
            host_disturbed: report
                .host
                .as_ref()
                .is_some_and(crate::host_watch::StallSummary::disturbed),
        }
    }

    fn sustained(&self) -> bool {
        self.sender_valid && self.receivers_sustained
    }
}

/// A system's percentiles divided by the floor's at the same scale.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ratio {
    pub scale: f64,
    pub system: String,
    /// The system divided by: "raw".
    pub floor: String,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

/// A system's knee: the highest scale with p99 <= [`KNEE_P99_US`] and both verdicts
/// sustained (None: no scale qualified).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Knee {
    pub system: String,
    pub scale: Option<f64>,
    pub target_rate: Option<f64>,
}

/// The `--json` document of a comparison or sweep.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Always "fanout".
    pub bench: &'static str,
    /// "compare" (one scale) or "sweep".
    pub mode: &'static str,
    /// Where it ran (docs/benchmarking.md rule 10).
    pub machine: Machine,
    /// The command line, word by word.
    pub command: Vec<String>,
    /// The systems compared, in the order run ("tickwire", "raw", "nats").
    pub systems: Vec<String>,
    /// The scales run, in order (one for `--compare` without `--sweep`).
    pub scales: Vec<f64>,
    /// The knee's definition, in words (p99 bound and both verdicts).
    pub knee_rule: String,
    /// One latency point per (system, scale).
    pub points: Vec<Point>,
    /// Each system's percentiles divided by the raw floor's, per scale.
    pub ratios: Vec<Ratio>,
    /// Each system's knee (its `scale` is None when no scale passed).
    pub knees: Vec<Knee>,
    /// Every run's full report, in the order run.
    pub runs: Vec<Report>,
}

impl Comparison {
    pub fn new(machine: Machine, sweep: bool, runs: Vec<Report>) -> Comparison {
        let points: Vec<Point> = runs.iter().map(Point::of).collect();
        let mut systems: Vec<String> = Vec::new();
        let mut scales: Vec<f64> = Vec::new();
        for p in &points {
            if !systems.contains(&p.system) {
                systems.push(p.system.clone());
            }
            if !scales.contains(&p.scale) {
                scales.push(p.scale);
            }
        }
        Comparison {
            bench: "fanout",
            mode: if sweep { "sweep" } else { "compare" },
            machine,
            command: std::env::args().collect(),
            knee_rule: format!(
                "highest scale with p99 <= {KNEE_P99_US:.0} µs, the sender rule valid and the receiver rule sustained"
            ),
            ratios: ratios(&points),
            knees: knees(&systems, &points),
            systems,
            scales,
            points,
            runs,
        }
    }

    /// The ratio table (and, for a sweep, the latency-versus-rate table and the knees).
    pub fn print(&self, out: &mut dyn std::io::Write) {
        crate::outln!(
            out,
            "\n==== fan-out {}: {} ====",
            if self.mode == "sweep" {
                "sweep"
            } else {
                "comparison"
            },
            self.systems.join(" vs ")
        );
        crate::outln!(out, "machine: {}", self.machine.one_line());
        crate::outln!(
            out,
            "{:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {:<7} {:<13} {}",
            "scale",
            "system",
            "target/s",
            "achieved/s",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "max µs",
            "sender",
            "receivers",
            "host"
        );
        for p in &self.points {
            crate::outln!(
                out,
                "{:>6} {:>9} {:>10} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1}  {:<7} {:<13} {}",
                p.scale,
                p.system,
                human_rate(p.target_rate),
                human_rate(p.achieved_rate),
                p.latency.p50_us,
                p.latency.p99_us,
                p.latency.p999_us,
                p.latency.max_us,
                if p.sender_valid { "valid" } else { "INVALID" },
                match (p.receivers_sustained, p.reconciled) {
                    (true, _) => "sustained",
                    (false, true) => "NOT sustained",
                    (false, false) => "LOST",
                },
                if p.host_disturbed {
                    "DISTURBED"
                } else {
                    "quiet"
                }
            );
        }
        if !self.ratios.is_empty() {
            crate::outln!(
                out,
                "\nratio to the raw floor, same invocation (system / raw):"
            );
            crate::outln!(
                out,
                "{:>6} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
                "scale",
                "system",
                "p50",
                "p90",
                "p99",
                "p99.9",
                "max",
                "mean"
            );
            for r in &self.ratios {
                // Bench-review pass: a ratio of a disturbed run (tickwire / raw at 0.55:
                // the "floor" slower than tickwire) was printed without a word.
                let disturbed = self.points.iter().any(|p| {
                    p.scale == r.scale
                        && (p.system == r.system || p.system == r.floor)
                        && p.host_disturbed
                });
                crate::outln!(
                    out,
                    "{:>6} {:>9} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2}{}",
                    r.scale,
                    r.system,
                    r.p50,
                    r.p90,
                    r.p99,
                    r.p999,
                    r.max,
                    r.mean,
                    if disturbed {
                        "  not a comparison: DISTURBED"
                    } else {
                        ""
                    }
                );
            }
        }
        if self.mode == "sweep" {
            crate::outln!(out, "\nknee ({}):", self.knee_rule);
            for k in &self.knees {
                match (k.scale, k.target_rate) {
                    (Some(s), Some(r)) => {
                        crate::outln!(out, "  {:<9} scale {s} ({} msg/s)", k.system, human_rate(r))
                    }
                    _ => crate::outln!(out, "  {:<9} no scale run qualified", k.system),
                }
            }
        }
    }

    /// Latency (p50 and p99, log µs) versus target rate, one curve per system and
    /// percentile.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let mut series = Vec::new();
        for sys in &self.systems {
            for (name, f) in [
                ("p50", (|l: &Summary| l.p50_us) as fn(&Summary) -> f64),
                ("p99", |l: &Summary| l.p99_us),
            ] {
                let pts = self
                    .points
                    .iter()
                    .filter(|p| &p.system == sys)
                    .map(|p| (p.target_rate, f(&p.latency)))
                    .collect();
                series.push(Series::new(format!("{sys} {name}"), pts));
            }
        }
        let preset = self
            .runs
            .first()
            .and_then(|r| r.workload.preset)
            .map_or("custom".to_owned(), |p| format!("{p:?}").to_lowercase());
        line_chart_svg(
            path,
            &format!(
                "fan-out latency versus rate, {preset}: {}",
                self.systems.join(", ")
            ),
            "target send rate (msg/s, all publishers)",
            "latency from intended send (µs, log)",
            &series,
            true,
            None,
        )
    }

    /// 1 when a run lost, duplicated or reordered messages or failed; 3 when a
    /// comparison (not a sweep, whose top scales are meant to saturate) has an INVALID
    /// run; 130 when Ctrl-C stopped a run; else 0.
    pub fn exit_code(&self) -> std::process::ExitCode {
        if self.runs.iter().any(Report::failed) {
            std::process::ExitCode::FAILURE
        } else if self.mode == "compare" && self.runs.iter().any(|r| !r.valid) {
            std::process::ExitCode::from(3)
        } else {
            crate::report::exit_code(self.runs.iter().any(|r| r.stopped_by_user))
        }
    }
}

/// Every non-raw system's percentiles over the raw floor's at the same scale.
fn ratios(points: &[Point]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for p in points.iter().filter(|p| p.system != "raw") {
        let Some(floor) = points
            .iter()
            .find(|f| f.system == "raw" && f.scale == p.scale)
        else {
            continue;
        };
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let (a, b) = (&p.latency, &floor.latency);
        out.push(Ratio {
            scale: p.scale,
            system: p.system.clone(),
            floor: "raw".into(),
            p50: div(a.p50_us, b.p50_us),
            p90: div(a.p90_us, b.p90_us),
            p99: div(a.p99_us, b.p99_us),
            p999: div(a.p999_us, b.p999_us),
            max: div(a.max_us, b.max_us),
            mean: div(a.mean_us, b.mean_us),
        });
    }
    out
}

fn knees(systems: &[String], points: &[Point]) -> Vec<Knee> {
    systems
        .iter()
        .map(|sys| {
            let best = points
                .iter()
                .filter(|p| &p.system == sys && p.sustained() && p.latency.p99_us <= KNEE_P99_US)
                .max_by(|a, b| a.scale.total_cmp(&b.scale));
            Knee {
                system: sys.clone(),
                scale: best.map(|p| p.scale),
                target_rate: best.map(|p| p.target_rate),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(system: &str, scale: f64, p99: f64, sustained: bool) -> Point {
        let mut latency = crate::stats::Latency::new().summary();
        latency.p50_us = p99 / 4.0;
        latency.p90_us = p99 / 2.0;
        latency.p99_us = p99;
        latency.p999_us = p99 * 2.0;
        latency.max_us = p99 * 3.0;
        latency.mean_us = p99 / 3.0;
        Point {
            scale,
            system: system.into(),
            target_rate: scale * 750_000.0,
            achieved_rate: scale * 750_000.0,
            latency,
            sender_valid: true,
            receivers_sustained: sustained,
            reconciled: true,
            host_disturbed: false,
        }
    }

    #[test]
    fn ratios_divide_by_the_raw_floor_at_the_same_scale() {
        let pts = [
            point("tickwire", 0.5, 800.0, true),
            point("raw", 0.5, 200.0, true),
            point("tickwire", 1.0, 900.0, true),
        ];
        let r = ratios(&pts);
        assert_eq!(r.len(), 1, "no floor at 1.0: no ratio");
        assert_eq!((r[0].scale, r[0].p99, r[0].p50), (0.5, 4.0, 4.0));
        assert_eq!(r[0].floor, "raw");
    }

    /// Bench-review pass: the sweep table said "quiet" and the ratios came without a
    /// word for runs whose host line said DISTURBED.
    #[test]
    fn a_disturbed_point_is_marked_in_the_table_and_its_ratios() {
        let mut pts = vec![
            point("tickwire", 0.5, 800.0, true),
            point("raw", 0.5, 200.0, true),
            point("tickwire", 1.0, 900.0, true),
            point("raw", 1.0, 300.0, true),
        ];
        pts[1].host_disturbed = true;
        let mut c = Comparison::new(crate::report::Machine::detect(), true, Vec::new());
        c.ratios = ratios(&pts);
        c.points = pts;
        let mut out = Vec::new();
        c.print(&mut out);
        let text = String::from_utf8(out).unwrap();
        let marked: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("not a comparison: DISTURBED"))
            .collect();
        assert_eq!(marked.len(), 1, "{text}");
        assert!(marked[0].trim_start().starts_with("0.5"), "{text}");
        assert_eq!(
            text.matches("DISTURBED").count(),
            2,
            "table row and ratio: {text}"
        );
    }

    #[test]
    fn the_knee_is_the_highest_sustained_scale_under_1_ms() {
        let pts = [
            point("tickwire", 0.1, 200.0, true),
            point("tickwire", 0.3, 900.0, true),
            point("tickwire", 0.5, 950.0, false),
            point("tickwire", 1.0, 5_000.0, true),
            point("raw", 1.0, 2_000.0, true),
        ];
        let k = knees(&["tickwire".into(), "raw".into()], &pts);
        assert_eq!(k[0].scale, Some(0.3));
        assert_eq!(k[1].scale, None);
    }
}
