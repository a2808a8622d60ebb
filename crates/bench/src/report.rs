//! Machine metadata, terminal tables, JSON and SVG plots (rules 10 and 11 of
//! docs/benchmarking.md).

use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use serde::Serialize;

use crate::stats::Summary;

/// What every result records about where it ran (docs/benchmarking.md rule 10).
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub hostname: String,
    pub tickwire_version: String,
    /// The commit the binary was built from (HEAD at build time; uncommitted changes
    /// are not marked), else `git rev-parse --short HEAD` of the current directory at
    /// run time, if available.
    pub commit: Option<String>,
}

impl Machine {
    /// Reads /proc/cpuinfo, uname (via /proc/sys/kernel/osrelease) etc. Never fails.
    ///
    /// cpu model: the first `model name` of /proc/cpuinfo ("unknown" if absent); cores:
    /// `available_parallelism` (the CPUs this process may use); kernel and hostname from
    /// /proc/sys/kernel; commit: the build's HEAD, else `git rev-parse --short HEAD` in
    /// the current directory.
    pub fn detect() -> Machine {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let cpu_model = read("/proc/cpuinfo")
            .and_then(|info| {
                info.lines()
                    .filter_map(|l| l.split_once(':'))
                    .find(|(k, _)| k.trim() == "model name")
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let built = Some(env!("TICKWIRE_BUILD_COMMIT").to_owned()).filter(|c| !c.is_empty());
        let commit = built.or_else(|| {
            std::process::Command::new("git")
                .args(["rev-parse", "--short", "HEAD"])
                .stderr(std::process::Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        });
        Machine {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            hostname: read("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
            tickwire_version: env!("CARGO_PKG_VERSION").to_string(),
            commit,
        }
    }

    /// One line for the top of a terminal report.
    pub fn one_line(&self) -> String {
        format!(
            "{} ({} cores), Linux {}, {}, tickwire {}{}",
            self.cpu_model,
            self.cores,
            self.kernel,
            self.hostname,
            self.tickwire_version,
            self.commit
                .as_ref()
                .map_or(String::new(), |c| format!(" @ {c}"))
        )
    }
}

/// Samples needed before a table shows p99 ([`latency_table`]).
pub const P99_MIN_SAMPLES: u64 = 100;

/// Samples needed before a table shows p99.9 ([`latency_table`]).
pub const P999_MIN_SAMPLES: u64 = 1_000;

/// Terminal table of latency summaries, one row per label: columns samples, min, p50,
/// p90, p99 (blank under [`P99_MIN_SAMPLES`]), p99.9 (blank under
/// [`P999_MIN_SAMPLES`]), p99.99 (blank when None: under 10,000 samples), max, mean,
/// stddev (µs, 2 decimals), under a title line. JSON reports carry every figure.
pub fn latency_table(title: &str, rows: &[(String, Summary)]) -> String {
    const HEADS: [&str; 10] = [
        "samples", "min", "p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "stddev",
    ];
    const W: usize = 10;
    let label_w = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = write!(out, "{:<label_w$}", "");
    for h in HEADS {
        let _ = write!(out, " {h:>W$}");
    }
    let _ = writeln!(out, "  (latency in µs)");
    for (label, s) in rows {
        let _ = write!(out, "{label:<label_w$} {:>W$}", s.samples);
        // A percentile is shown only when samples beyond it exist to place it: p99 from
        // 100 samples, p99.9 from 1,000 (below that it is the maximum, or next to it).
        let shown = |v: f64, min: u64| {
            if s.samples >= min {
                format!("{v:.2}")
            } else {
                String::new()
            }
        };
        for v in [s.min_us, s.p50_us, s.p90_us] {
            let _ = write!(out, " {v:>W$.2}");
        }
        let p99 = shown(s.p99_us, P99_MIN_SAMPLES);
        let p999 = shown(s.p999_us, P999_MIN_SAMPLES);
        let p9999 = s.p9999_us.map_or(String::new(), |v| format!("{v:.2}"));
        for v in [p99, p999, p9999] {
            let _ = write!(out, " {v:>W$}");
        }
        for v in [s.max_us, s.mean_us, s.stddev_us] {
            let _ = write!(out, " {v:>W$.2}");
        }
        out.push('\n');
    }
    out
}

/// Writes pretty JSON to `path` (creating parent dirs), with context in errors.
pub fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    create_parent(path)?;
    let mut text =
        serde_json::to_string_pretty(value).context("serializing the results to JSON")?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `--json FILE` and `--plot FILE.svg`, the output options of every bench command
/// (flattened into each one's arguments; each command says what its chart shows with
/// `mut_arg("plot", ...)`).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct OutputArgs {
    /// Write every result, with the machine's metadata, as JSON to FILE (its directory
    /// must exist; checked before anything is measured).
    #[arg(long, value_name = "FILE", value_parser = parse_output_path)]
    pub json: Option<PathBuf>,

    /// Draw the results as an SVG chart to FILE.
    #[arg(long, value_name = "FILE.svg", value_parser = parse_plot_path)]
    pub plot: Option<PathBuf>,
}

/// An output file named on the command line, checked before a run that may last
/// minutes (new-user pass: `--json /proc/x.json` failed after the whole run, and a
/// missing directory was created without a word): its directory exists, and the file
/// is a regular file this process may append to, or can be created there. Nothing is
/// written: a missing file is created with `O_EXCL` (which follows no symbolic link)
/// and removed again, and only a file this check created is ever removed; a symbolic
/// link must lead to a regular file, and a FIFO or device is refused (opening one could
/// block or write somewhere else).
pub fn parse_output_path(s: &str) -> Result<PathBuf, String> {
    use std::io::ErrorKind;
    if s.is_empty() {
        return Err("an empty file name".to_owned());
    }
    let path = PathBuf::from(s);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "the directory {} does not exist (create it first)",
            dir.display()
        ));
    }
    let appendable = |p: &Path| {
        std::fs::OpenOptions::new()
            .append(true)
            .open(p)
            .map(drop)
            .map_err(|e| format!("cannot write {s}: {e}"))
    };
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => Err(format!("{s} is a directory: name a file in it")),
        Ok(m) if m.is_file() => appendable(&path).map(|()| path),
        Ok(m) if m.file_type().is_symlink() => match std::fs::metadata(&path) {
            Ok(t) if t.is_file() => appendable(&path).map(|()| path),
            Ok(t) if t.is_dir() => Err(format!("{s} leads to a directory: name a file")),
            Ok(_) => Err(format!("{s} leads to something that is not a regular file")),
            Err(_) => Err(format!(
                "{s} is a symbolic link to nothing: name a regular file or an unused name"
            )),
        },
        Ok(_) => Err(format!(
            "{s} is not a regular file (a FIFO, socket or device): name a regular file"
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                drop(f);
                // Ours (created just now, exclusively): removed again.
                let _ = std::fs::remove_file(&path);
                Ok(path)
            }
            // Created by someone else meanwhile: theirs, left alone.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(path),
            Err(e) => Err(format!("cannot write {s}: {e}")),
        },
        Err(e) => Err(format!("cannot write {s}: {e}")),
    }
}

/// [`parse_output_path`] for `--plot`, which draws SVG: a name ending in `.svg`
/// (new-user pass: `--plot pp.png` wrote SVG under a PNG name).
pub fn parse_plot_path(s: &str) -> Result<PathBuf, String> {
    let svg = Path::new(s)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if !svg {
        return Err(format!(
            "{s}: the chart is SVG, so the file name must end in .svg"
        ));
    }
    parse_output_path(s)
}

impl OutputArgs {
    /// [`write_outputs`] to these files.
    pub fn write(
        &self,
        out: &mut dyn std::io::Write,
        report: &impl Serialize,
        draw: impl FnOnce(&Path) -> anyhow::Result<()>,
        announce: Announce,
    ) -> anyhow::Result<()> {
        write_outputs(
            out,
            self.json.as_deref(),
            report,
            self.plot.as_deref(),
            draw,
            announce,
        )
    }
}

/// How a command announces in its report (`out`) the files [`write_outputs`] wrote (each command
/// keeps the wording its users and scripts know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// `wrote FILE` (ping-pong, stream).
    Wrote,
    /// `JSON written to FILE`, `plot written to FILE` (fan-out).
    WrittenTo,
    /// `JSON: FILE`, `plot: FILE` (tick-to-trade, md-replay).
    Labelled,
}

impl Announce {
    fn say(self, out: &mut dyn std::io::Write, what: &str, path: &Path) {
        match self {
            Announce::Wrote => crate::outln!(out, "wrote {}", path.display()),
            Announce::WrittenTo => crate::outln!(out, "{what} written to {}", path.display()),
            Announce::Labelled => crate::outln!(out, "{what}: {}", path.display()),
        }
    }
}

/// The tail of every bench command: `report` as JSON to `json` (`--json`), then the
/// chart `draw` makes to `plot` (`--plot`), each announced in `out` once written.
pub fn write_outputs(
    out: &mut dyn std::io::Write,
    json: Option<&Path>,
    report: &impl Serialize,
    plot: Option<&Path>,
    draw: impl FnOnce(&Path) -> anyhow::Result<()>,
    announce: Announce,
) -> anyhow::Result<()> {
    if let Some(path) = json {
        write_json(path, report).with_context(|| format!("writing {}", path.display()))?;
        announce.say(out, "JSON", path);
    }
    if let Some(path) = plot {
        draw(path).with_context(|| format!("writing {}", path.display()))?;
        announce.say(out, "plot", path);
    }
    Ok(())
}

/// A command's exit status when it measured without failing: 130 (as after SIGINT)
/// when the user stopped it, else success.
pub fn exit_code(stopped: bool) -> std::process::ExitCode {
    if stopped {
        std::process::ExitCode::from(130)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

fn create_parent(path: &Path) -> anyhow::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory {}", dir.display())),
        _ => Ok(()),
    }
}

/// One named line of a chart: (x, y) points, drawn in the order given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// Size of the SVG charts in pixels.
const CHART_SIZE: (u32, u32) = (1000, 600);

/// An SVG line chart: `series` against the left axis (log-scale y when `log_y`; points
/// with y <= 0 are then left out), and optionally `right = (label, series)` against a
/// right axis of its own (dashed lines), e.g. the target rate over latency percentiles.
/// Each series gets its own colour and a legend entry (right-axis ones marked "(right)");
/// one with no point left to draw gets neither. Non-finite points are left out. Text is plain SVG `<text>` (no font files needed).
pub fn line_chart_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
    right: Option<(&str, &[Series])>,
) -> anyhow::Result<()> {
    create_parent(path)?;
    let keep = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!log_y || y > 0.0);
    let left: Vec<Series> = series
        .iter()
        .map(|s| {
            Series::new(
                s.name.clone(),
                s.points.iter().copied().filter(keep).collect(),
            )
        })
        .collect();
    let right_series: Vec<Series> = right
        .map(|(_, rs)| {
            rs.iter()
                .map(|s| {
                    let pts = s
                        .points
                        .iter()
                        .copied()
                        .filter(|(x, y)| x.is_finite() && y.is_finite());
                    Series::new(s.name.clone(), pts.collect())
                })
                .collect()
        })
        .unwrap_or_default();
    let all_points = || {
        left.iter()
            .chain(&right_series)
            .flat_map(|s| s.points.iter())
    };
    let x_range = padded(all_points().map(|p| p.0), false, false, 0.02);
    // 30% headroom keeps the lines clear of the legend in the upper left.
    let y_range = padded(
        left.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        log_y,
        true,
        0.3,
    );
    let y2_range = padded(
        right_series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1)),
        false,
        true,
        0.3,
    );
    let chart = Chart {
        path,
        title,
        x_label,
        y_label,
        left: &left,
        right: right.map(|(label, _)| (label, right_series.as_slice())),
    };
    let drawn = if log_y {
        chart.draw(x_range, y_range.log_scale(), y2_range)
    } else {
        chart.draw(x_range, y_range, y2_range)
    };
    drawn.with_context(|| format!("drawing the chart {}", path.display()))
}

/// A range covering `values`: linear from 0 when `from_zero` (and no value is negative)
/// with `headroom` (a fraction of the span; room for the legend) above and 2% below;
/// log from
/// the power of ten below the smallest value (so the axis has decade labels) to the power
/// of ten at least 3x above the largest. `0..1` (log `1..10`) when there are no values.
fn padded(
    values: impl Iterator<Item = f64>,
    log: bool,
    from_zero: bool,
    headroom: f64,
) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return if log { 1.0..10.0 } else { 0.0..1.0 };
    }
    if log {
        return 10f64.powf(lo.log10().floor())..10f64.powf((hi * 3.0).log10().ceil());
    }
    let lo = if from_zero { lo.min(0.0) } else { lo };
    if hi <= lo {
        return lo - 0.5..hi + 0.5;
    }
    let span = hi - lo;
    let lo = if from_zero && lo >= 0.0 {
        lo
    } else {
        lo - span * 0.02
    };
    lo..hi + span * headroom
}

/// Axis numbers without needless digits: `0.5`, `20`, `150k`, `1.5M`.
fn tick_label(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        trim(format!("{v:.3}"))
    }
}

struct Chart<'a> {
    path: &'a Path,
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    left: &'a [Series],
    right: Option<(&'a str, &'a [Series])>,
}

impl Chart<'_> {
    /// Generic over the left y axis so one body serves linear and log scales.
    fn draw<Y>(&self, x: Range<f64>, y: Y, y2: Range<f64>) -> anyhow::Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let root = SVGBackend::new(self.path, CHART_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(self.title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .right_y_label_area_size(if self.right.is_some() { 70 } else { 0 })
            .build_cartesian_2d(x.clone(), y)?
            // Always dual so both cases share one type; the right axis is drawn only if used.
            .set_secondary_coord(x, y2);
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .x_label_formatter(&|v| tick_label(*v))
            .y_label_formatter(&|v| tick_label(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        if let Some((label, _)) = self.right {
            chart
                .configure_secondary_axes()
                .y_desc(label)
                .y_label_formatter(&|v| tick_label(*v))
                .draw()?;
        }
        // A series with no point is left out of the legend too (new-user pass: `bench
        // md-replay --plot` listed runs too short for a window over nothing drawn); the
        // others keep their colours.
        for (i, s) in self.left.iter().enumerate() {
            if s.points.is_empty() {
                continue;
            }
            let colour = series_colour(i);
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    colour.stroke_width(2),
                ))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
            if s.points.len() <= 60 {
                chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
            }
        }
        for (i, s) in self.right.map_or(&[][..], |r| r.1).iter().enumerate() {
            if s.points.is_empty() {
                continue;
            }
            let colour = series_colour(self.left.len() + i);
            chart
                .draw_secondary_series(DashedLineSeries::new(
                    s.points.iter().copied(),
                    8,
                    4,
                    colour.stroke_width(2),
                ))?
                .label(format!("{} (right)", s.name))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.5))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// Distinct colours for up to 10 series, then plotters' 99-colour palette.
fn series_colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    COLOURS.get(i).copied().unwrap_or_else(|| {
        let c = Palette99::pick(i).to_rgba();
        RGBColor(c.0, c.1, c.2)
    })
}

/// Writes the router's command line (when the bench started one) and, after Ctrl-C,
/// that the results below are partial.
pub fn print_run_notes(out: &mut dyn std::io::Write, router: Option<&str>, stopped: bool) {
    if let Some(r) = router {
        crate::outln!(out, "router: {r}");
    }
    if stopped {
        let by = tickwire_rt::stop::stopped_by();
        crate::outln!(out, "STOPPED by {by}: partial results below");
    }
}

/// Title of one transport's table, marking runs whose busy-polling ends yield the CPU
/// when idle (more spinning threads than cores).
pub fn transport_title(name: &str, path: &str, spin_yields: bool) -> String {
    let yields = if spin_yields {
        " [spinning threads yield when idle: more spinners than cores]"
    } else {
        ""
    };
    format!("{name} — {path}{yields}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Latency;

    /// Review: the check removed a user's dangling symbolic link (and left its target
    /// created), could remove a file another process created meanwhile, and blocked
    /// on a FIFO. Now nothing but a file it created itself is removed.
    #[test]
    fn output_paths_are_checked_without_touching_what_is_there() {
        let d = scratch("outpaths");
        let p = |name: &str| d.path().join(name).to_str().unwrap().to_owned();
        // A new name: accepted, and nothing left behind.
        assert!(parse_output_path(&p("new.json")).is_ok());
        assert!(!d.path().join("new.json").exists());
        // An existing file: accepted, kept, its bytes untouched.
        std::fs::write(d.path().join("old.json"), b"keep").unwrap();
        assert!(parse_output_path(&p("old.json")).is_ok());
        assert_eq!(std::fs::read(d.path().join("old.json")).unwrap(), b"keep");
        // A dangling symbolic link: refused, and neither it nor a target touched.
        std::os::unix::fs::symlink(d.path().join("gone.json"), d.path().join("link.json")).unwrap();
        let e = parse_output_path(&p("link.json")).unwrap_err();
        assert!(e.contains("symbolic link to nothing"), "{e}");
        assert!(std::fs::symlink_metadata(d.path().join("link.json")).is_ok());
        assert!(!d.path().join("gone.json").exists());
        // A link to a regular file: accepted, both kept.
        std::os::unix::fs::symlink(d.path().join("old.json"), d.path().join("ok.json")).unwrap();
        assert!(parse_output_path(&p("ok.json")).is_ok());
        assert!(std::fs::symlink_metadata(d.path().join("ok.json")).is_ok());
        // A FIFO: refused at once (opening it would block).
        let fifo = d.path().join("pipe.json");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = parse_output_path(&p("pipe.json")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // A directory, a missing directory, a plot that is not SVG.
        assert!(parse_output_path(d.path().to_str().unwrap())
            .unwrap_err()
            .contains("is a directory"));
        assert!(parse_output_path(&p("no/such.json"))
            .unwrap_err()
            .contains("does not exist"));
        assert!(parse_plot_path(&p("chart.png"))
            .unwrap_err()
            .contains("must end in .svg"));
        assert!(parse_plot_path(&p("chart.SVG")).is_ok());
    }

    /// A fresh, empty directory (`tickwire-bench-report-NAME-*`), removed when the
    /// guard drops.
    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("tickwire-bench-report-{name}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn machine_detection_never_panics_and_fills_what_linux_has() {
        let m = Machine::detect();
        assert!(m.cores >= 1);
        assert!(!m.cpu_model.is_empty() && !m.kernel.is_empty() && !m.hostname.is_empty());
        assert_eq!(m.tickwire_version, env!("CARGO_PKG_VERSION"));
        assert!(m.one_line().contains(&m.kernel));
    }

    #[test]
    fn latency_table_has_a_row_per_label_and_blanks_missing_p9999() {
        let mut l = Latency::new();
        for us in 1..=100u64 {
            l.record(us * 1000);
        }
        let mut big = Latency::new();
        for i in 0..10_000u64 {
            big.record(2000 + i);
        }
        let table = latency_table(
            "fan-out",
            &[
                ("100 B".into(), l.summary()),
                ("all sizes".into(), big.summary()),
            ],
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(lines[0], "fan-out");
        for head in [
            "samples", "min", "p50", "p99.9", "p99.99", "max", "mean", "stddev",
        ] {
            assert!(lines[1].contains(head), "{head} missing: {table}");
        }
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        // "100 B" is two words; then samples, min, p50, p90, p99, (no p99.9 from 100
        // samples, no p99.99), max, mean, stddev.
        assert_eq!(
            &row[..7],
            ["100", "B", "100", "1.00", "50.02", "90.05", "99.01"],
            "{table}"
        );
        assert_eq!(row.len(), 2 + 8, "p99.9 and p99.99 are blank: {table}");
        assert_eq!(row[7], "100.03", "the max follows p99: {table}");
        assert_eq!(row[9], "28.87");
        let full: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(full.len(), 2 + 10, "{table}");
        // Columns line up: every line of the table has the same width.
        assert!(lines[1..]
            .iter()
            .all(|l| l.trim_end().chars().count() <= lines[1].chars().count()));
    }

    #[test]
    fn tick_labels_are_short() {
        let labels: Vec<String> = [
            0.0,
            0.5,
            2.25,
            20.0,
            150.0,
            9999.0,
            150_000.0,
            1_500_000.0,
            1e6,
        ]
        .into_iter()
        .map(tick_label)
        .collect();
        assert_eq!(
            labels,
            ["0", "0.5", "2.25", "20", "150", "9999", "150k", "1.5M", "1M"]
        );
    }

    #[test]
    fn write_json_creates_directories() {
        let dir = scratch("json");
        let path = dir.path().join("a/b/result.json");
        write_json(&path, &Machine::detect()).unwrap();
        let back: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(back["cores"].as_u64().is_some_and(|c| c >= 1));
        let err = write_json(Path::new("/proc/nonexistent/x.json"), &1).unwrap_err();
        assert!(format!("{err:#}").contains("/proc/nonexistent"), "{err:#}");
    }

    #[test]
    fn line_chart_writes_an_svg_with_every_series_named() {
        let scratch = scratch("svg");
        let dir = scratch.path();
        let secs: Vec<f64> = (0..20).map(f64::from).collect();
        let p50 = Series::new(
            "p50",
            secs.iter().map(|&t| (t, 30.0 + (t % 2.0) * 5.0)).collect(),
        );
        let p99 = Series::new(
            "p99",
            secs.iter().map(|&t| (t, 60.0 + (t % 2.0) * 40.0)).collect(),
        );
        let max = Series::new(
            "max",
            secs.iter()
                .map(|&t| (t, 300.0 + (t % 2.0) * 900.0))
                .collect(),
        );
        let rate = Series::new(
            "target rate",
            secs.iter()
                .map(|&t| (t, 500_000.0 + (t % 2.0) * 500_000.0))
                .collect(),
        );
        let path = dir.join("timeline.svg");
        line_chart_svg(
            &path,
            "fan-out pattern 1: latency over time",
            "time (s)",
            "latency (µs)",
            &[p50, p99, max],
            true,
            Some(("rate (msg/s)", &[rate])),
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("<svg"));
        for text in [
            "p50",
            "p99",
            "max",
            "target rate (right)",
            "latency (µs)",
            "rate (msg/s)",
            "time (s)",
        ] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }

        // Linear, no right axis, awkward data: empty series, a single point, NaN.
        let path2 = dir.join("sub/size.svg");
        let odd = [
            Series::new("empty", vec![]),
            Series::new("one", vec![(64.0, 5.0)]),
            Series::new("nan", vec![(1.0, f64::NAN), (2.0, 1.0)]),
        ];
        line_chart_svg(
            &path2,
            "latency vs size",
            "size (bytes)",
            "µs",
            &odd,
            false,
            None,
        )
        .unwrap();
        assert!(std::fs::read_to_string(&path2).unwrap().contains("<svg"));
        line_chart_svg(&dir.join("empty.svg"), "nothing", "x", "y", &[], true, None).unwrap();
        if std::env::var_os("KEEP_SVG").is_some() {
            // KEEP_SVG=1 keeps the charts to look at, in the system's temporary directory
            // under `tickwire-bench-report-svg-*` (the guard removes them otherwise).
            let _kept = scratch.keep();
        }
    }

    /// New-user pass: `bench md-replay --plot` listed "4x tickwire mean/p99, 4x raw
    /// mean/p99" over an empty plot area (runs too short for a window). A series with
    /// nothing to draw has no legend entry, on either axis (on a log axis a series of
    /// zeros has nothing to draw).
    #[test]
    fn a_series_with_nothing_to_draw_has_no_legend_entry() {
        let scratch = scratch("legend");
        let path3 = scratch.path().join("legend.svg");
        line_chart_svg(
            &path3,
            "legend",
            "x",
            "y",
            &[
                Series::new("drawn", vec![(1.0, 5.0), (2.0, 6.0)]),
                Series::new("ghost", vec![]),
                Series::new("zeros", vec![(1.0, 0.0)]),
            ],
            true,
            Some(("rate", &[Series::new("phantom", vec![])])),
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path3).unwrap();
        assert!(svg.contains("drawn"), "the drawn series is missing");
        for name in ["ghost", "zeros", "phantom"] {
            assert!(!svg.contains(name), "{name} is in the legend");
        }
    }
}
