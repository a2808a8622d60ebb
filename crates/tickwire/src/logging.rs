//! Logging for every command: `--log-level`, `--log-format text|json`, `--log-file`,
//! and what SIGHUP may change while running ([`reload`]).
//!
//! The level filter sits behind a `tracing_subscriber::reload` layer; the log file
//! behind a mutex that SIGHUP swaps for a freshly opened file (so logrotate's
//! rename-then-HUP works). Between them, [`Throttle`] writes at most
//! [`LINES_PER_SECOND_PER_PLACE`] lines a second from one place in the code (a peer
//! can make the router log per connection) and counts the rest. None of this is on a
//! hot path: nothing logs per message.
//!
//! Lines are written by a thread of their own (`tracing_appender::non_blocking`): the
//! thread that logs (the router's loop, the FIX engine's) formats the line and queues
//! it, at most [`QUEUED_LINES`] lines; a full queue drops the line and counts it. So
//! a standard error nobody reads (a full pipe) or a stalled disk delays the lines,
//! never the program. [`LogGuard`] writes what is queued at exit.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use clap::{Args, ValueEnum};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The logging flags (global: they go before or after the subcommand).
#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log level: error, warn, info, debug, trace, off, or a filter such as
    /// `info,tickwire_router=debug` (a word alone must be a level or one of our modules,
    /// `tickwire...`; for another crate write `mio=debug`) [default: $TICKWIRE_LOG,
    /// checked the same way, else info for the router, warn for every other command].
    #[arg(long, value_name = "LEVEL", global = true, help_heading = "Logging")]
    pub log_level: Option<String>,
    /// Log line format: text (human) or json (one object per line).
    #[arg(
        long,
        value_name = "FORMAT",
        global = true,
        default_value = "text",
        help_heading = "Logging"
    )]
    pub log_format: LogFormat,
    /// Append log lines to FILE instead of standard error; SIGHUP reopens it (rotate by
    /// renaming the file, then `kill -HUP`).
    #[arg(long, value_name = "FILE", global = true, help_heading = "Logging")]
    pub log_file: Option<PathBuf>,
}

/// `--log-format`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-11-24T19:00:00Z  INFO message key=value`.
    Text,
    /// `{"timestamp":...,"level":"INFO","fields":{...}}`, one per line.
    Json,
}

struct Reloader {
    filter: reload::Handle<EnvFilter, Registry>,
    /// --log-level was given.
    from_flag: bool,
    file: Option<(PathBuf, Arc<Mutex<File>>)>,
    /// The level filter as given (flag or TICKWIRE_LOG), for child processes.
    given: Option<String>,
}

static RELOADER: OnceLock<Reloader> = OnceLock::new();

/// Log lines queued for the writing thread at most; more are dropped and counted
/// (about 2 MB of lines: a burst of every place's 100 lines a second fits many times).
/// `$TICKWIRE_LOG_QUEUE` sets another size ([`queue_lines`]).
pub const QUEUED_LINES: usize = 8192;

/// The largest `$TICKWIRE_LOG_QUEUE` taken.
pub const MAX_QUEUED_LINES: usize = 1 << 20;

/// The queue's size: `$TICKWIRE_LOG_QUEUE` (1 to [`MAX_QUEUED_LINES`] lines) if set,
/// else [`QUEUED_LINES`].
pub fn queue_lines(from_env: Option<&str>) -> anyhow::Result<usize> {
    let Some(text) = from_env.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(QUEUED_LINES);
    };
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_QUEUED_LINES).contains(&n) => Ok(n),
        _ => Err(crate::units::UsageError(format!(
            "the environment variable TICKWIRE_LOG_QUEUE: expected a number of log lines \
             from 1 to {MAX_QUEUED_LINES}, got {text:?}"
        ))
        .into()),
    }
}

/// Keeps the log-writing thread; dropping it (at the end of `main`) writes the queued
/// lines, waiting for them at most about a second (a reader that never reads cannot
/// hold the exit), after a last line saying how many lines were dropped, if any.
pub struct LogGuard {
    dropped: tracing_appender::non_blocking::ErrorCounter,
    worker: Option<tracing_appender::non_blocking::WorkerGuard>,
    /// A handle on the queue, to see whether it is full at exit.
    probe: tracing_appender::non_blocking::NonBlocking,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        let dropped = self.dropped.dropped_lines();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "log lines dropped: the log's reader (standard error or the file) did not keep up"
            );
        }
        // An empty line costs the writer nothing; if even it does not fit, the queue is
        // full and its reader stuck. Then the thread is left as it is: waiting for it
        // would time out, and `tracing-appender` would say so on standard output, which
        // is our data (`tickwire sub` prints the messages there).
        let before = self.dropped.dropped_lines();
        let _ = self.probe.write(&[]);
        if self.dropped.dropped_lines() > before {
            std::mem::forget(self.worker.take());
        } else {
            drop(self.worker.take());
        }
    }
}

/// Installs the global subscriber; keep the guard until the program ends.
pub fn init(args: &LogArgs, default_level: &str) -> anyhow::Result<LogGuard> {
    let from_env = std::env::var("TICKWIRE_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let given = args.log_level.clone().or_else(|| from_env.clone());
    let filter = match (&args.log_level, from_env) {
        (Some(level), _) => parse_filter(level)?,
        (None, Some(level)) => {
            parse_filter(&level).with_context(|| "the environment variable TICKWIRE_LOG")?
        }
        // The TLS library's own lines ("Sending fatal alert ...") name no peer: the
        // router logs each TLS failure itself, with the address (probe). Asked for by
        // name (`--log-level rustls=warn`), they are shown.
        (None, None) => EnvFilter::new(format!("{default_level},rustls=error")),
    };
    let lines = queue_lines(std::env::var("TICKWIRE_LOG_QUEUE").ok().as_deref())?;
    let (filter, handle) = reload::Layer::new(filter);
    let queue = |w: Box<dyn Write + Send>| {
        tracing_appender::non_blocking::NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(lines)
            .thread_name("tickwire-log")
            .finish(w)
    };
    let (writer, guard, file, ansi) = match &args.log_file {
        Some(path) => {
            let f = Arc::new(Mutex::new(open(path)?));
            let (writer, guard) = queue(Box::new(SharedFile(f.clone())));
            (writer, guard, Some((path.clone(), f)), false)
        }
        None => {
            let (writer, guard) = queue(Box::new(io::stderr()));
            (
                writer,
                guard,
                None,
                io::IsTerminal::is_terminal(&io::stderr()),
            )
        }
    };
    let dropped = writer.error_counter();
    let probe = writer.clone();
    let writer = BoxMakeWriter::new(writer);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false);
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(ThrottleLayer::default());
    match args.log_format {
        LogFormat::Text => registry.with(fmt.with_ansi(ansi)).try_init(),
        LogFormat::Json => registry
            .with(fmt.json().with_current_span(false))
            .try_init(),
    }
    .context("installing the logger")?;
    let _ = RELOADER.set(Reloader {
        filter: handle,
        from_flag: args.log_level.is_some(),
        file,
        given,
    });
    Ok(LogGuard {
        dropped,
        worker: Some(guard),
        probe,
    })
}

/// Lines a second one place in the code may log (each `tracing::info!` etc. is a
/// place); the rest of that second's lines from there are counted, not written.
pub const LINES_PER_SECOND_PER_PLACE: u32 = 100;

/// What [`Throttle::admit`] decided for one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Write it; first say that `suppressed` lines from the same place were not
    /// written in the windows since the last one written (0: none).
    Write { suppressed: u64 },
    /// Count it, do not write it.
    Suppress,
}

/// Per-place log budget: at most `per_window` lines per place per `window`, so a peer
/// that makes the router log (a connection flood, a stream of refused logins) cannot
/// make it write in proportion to what it sends. Pure: time is a parameter. The places
/// are the program's call sites, so the map is bounded by the code.
#[derive(Debug)]
pub struct Throttle {
    per_window: u32,
    window: std::time::Duration,
    places: std::collections::HashMap<usize, Place>,
}

#[derive(Debug)]
struct Place {
    window_start: std::time::Instant,
    written: u32,
    suppressed: u64,
}

impl Throttle {
    pub fn new(per_window: u32, window: std::time::Duration) -> Throttle {
        Throttle {
            per_window,
            window,
            places: std::collections::HashMap::new(),
        }
    }

    /// One line from `place` at `now`.
    pub fn admit(&mut self, place: usize, now: std::time::Instant) -> Admit {
        let p = self.places.entry(place).or_insert(Place {
            window_start: now,
            written: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(p.window_start) >= self.window {
            p.window_start = now;
            p.written = 0;
        }
        if p.written >= self.per_window {
            p.suppressed += 1;
            return Admit::Suppress;
        }
        p.written += 1;
        Admit::Write {
            suppressed: std::mem::take(&mut p.suppressed),
        }
    }
}

/// [`Throttle`] over every event that passed the level filter, one second windows.
/// A place's suppressed count is reported by a line of its own just before the next
/// line that place writes.
struct ThrottleLayer {
    throttle: Mutex<Throttle>,
}

impl Default for ThrottleLayer {
    fn default() -> Self {
        ThrottleLayer {
            throttle: Mutex::new(Throttle::new(
                LINES_PER_SECOND_PER_PLACE,
                std::time::Duration::from_secs(1),
            )),
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ThrottleLayer {
    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        let meta = event.metadata();
        let place = meta as *const tracing::Metadata<'static> as usize;
        let admit = self
            .throttle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(place, std::time::Instant::now());
        match admit {
            Admit::Suppress => false,
            Admit::Write { suppressed: 0 } => true,
            Admit::Write { suppressed } => {
                let mut like = MessageOf(String::new());
                event.record(&mut like);
                // The lock is released: this line passes through here too.
                tracing::warn!(
                    suppressed,
                    like = %like.0,
                    place = %format_args!("{}:{}", meta.file().unwrap_or("?"), meta.line().unwrap_or(0)),
                    "log lines suppressed: over {LINES_PER_SECOND_PER_PLACE} a second from one place in the code"
                );
                true
            }
        }
    }
}

/// An event's message, for the line that says how many like it were suppressed.
struct MessageOf(String);

impl tracing::field::Visit for MessageOf {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// What SIGHUP changes: the level (when `level` is Some: from the config file) and the
/// log file (reopened). The format and the destination stay as started.
pub fn reload(level: Option<&str>) -> anyhow::Result<()> {
    let Some(r) = RELOADER.get() else {
        return Ok(());
    };
    if let Some((path, file)) = &r.file {
        let fresh = open(path)?;
        *file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    }
    if let Some(level) = level {
        if r.from_flag {
            // --log-level wins over the config file, at start and at every reload.
            tracing::info!(
                config = level,
                "log level kept: --log-level was given (the config file's [log] level applies only without it)"
            );
        } else {
            // Said at the old level and at the new: one of them shows it.
            tracing::info!(to = level, "log level changing");
            set_level(level)?;
            tracing::info!(level, "log level reloaded");
        }
    }
    Ok(())
}

/// Sets the level (the config file's, at start: nothing is logged about it).
pub fn set_level(level: &str) -> anyhow::Result<()> {
    let Some(r) = RELOADER.get() else {
        return Ok(());
    };
    r.filter
        .reload(parse_filter(level)?)
        .context("replacing the log level filter")
}

/// Set by a SIGHUP that came before the command's own handling was installed
/// ([`hold_sighup`]).
static EARLY_SIGHUP: OnceLock<Arc<std::sync::atomic::AtomicBool>> = OnceLock::new();

/// For a command whose SIGHUP means "reopen the log file" (or reload its settings):
/// from now on a SIGHUP no longer ends the process, it is noted, and
/// [`replay_early_sighup`] delivers it once the command's handling is installed. Before,
/// a SIGHUP between the log file's opening and that handling (logrotate at a start; a
/// router still recovering its spool) killed the process.
pub fn hold_sighup() -> anyhow::Result<()> {
    let flag = EARLY_SIGHUP.get_or_init(Arc::default).clone();
    signal_hook::flag::register(signal_hook::consts::SIGHUP, flag)
        .context("installing the SIGHUP handler")?;
    Ok(())
}

/// After installing a SIGHUP handler: a SIGHUP [`hold_sighup`] noted before is raised
/// again, for that handler. (One that comes between the installation and this call is
/// seen by both, and the file is reopened twice: harmless, where the other order could
/// lose it.)
pub fn replay_early_sighup() {
    let noted = EARLY_SIGHUP
        .get()
        .is_some_and(|f| f.swap(false, std::sync::atomic::Ordering::SeqCst));
    if noted {
        let _ = signal_hook::low_level::raise(signal_hook::consts::SIGHUP);
    }
}

/// For commands without a config file (every one but the router): SIGHUP reopens the
/// log file (rotation by rename), on a thread of its own; the level stays as started.
pub fn reopen_on_sighup() -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .context("installing the SIGHUP handler")?;
    replay_early_sighup();
    std::thread::Builder::new()
        .name("sighup".into())
        .spawn(move || {
            for _ in signals.forever() {
                match reload(None) {
                    Ok(()) => tracing::info!("SIGHUP: log file reopened"),
                    Err(e) => tracing::warn!(error = %format!("{e:#}"), "SIGHUP: reopening the log file failed"),
                }
            }
        })
        .context("starting the SIGHUP thread")?;
    Ok(())
}

/// The log file and the level given at start (`--log-file`, `--log-level` or
/// `TICKWIRE_LOG`), for a command that starts tickwire child processes whose lines
/// belong in the same file (the demo's routers).
pub fn file_and_level() -> Option<(PathBuf, Option<String>)> {
    let r = RELOADER.get()?;
    let (path, _) = r.file.as_ref()?;
    Some((path.clone(), r.given.clone()))
}

/// True when --log-level chose the level at start.
pub fn level_from_flag() -> bool {
    RELOADER.get().is_some_and(|r| r.from_flag)
}

/// The workspace's crates as `tracing` names their events' targets (a test checks the
/// list against `crates/`).
const OUR_CRATES: [&str; 17] = [
    "tickwire",
    "tickwire_alloc_count",
    "tickwire_bench",
    "tickwire_capture",
    "tickwire_client",
    "tickwire_fix",
    "tickwire_fix_engine",
    "tickwire_itch",
    "tickwire_mcast",
    "tickwire_md",
    "tickwire_monitor",
    "tickwire_router",
    "tickwire_rt",
    "tickwire_shm",
    "tickwire_spool",
    "tickwire_tls",
    "tickwire_wire",
];

/// What a log level may be, for the errors of [`parse_filter`].
const LEVEL_HINT: &str =
    "use error, warn, info, debug, trace or off, or a filter such as info,tickwire_router=debug";

/// A level or a filter. A bare word in a filter names a module whose events are all
/// shown and nothing else, so a mistyped level (`verbose`, `warning`) would silence
/// every line: a bare word must be a level or name one of our modules (`tickwire...`,
/// or a path with `::`).
fn parse_filter(level: &str) -> anyhow::Result<EnvFilter> {
    const LEVELS: [&str; 12] = [
        "error", "warn", "info", "debug", "trace", "off", "0", "1", "2", "3", "4", "5",
    ];
    // Spaces around the commas would become part of a target name (" debug").
    let directives: Vec<&str> = level
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    for directive in &directives {
        let bare = !directive.contains('=') && !directive.contains('[');
        let target = directive.split(['=', '[']).next().unwrap_or("").trim();
        let crate_name = target.split("::").next().unwrap_or("");
        // One of ours mistyped (`tickwire_ruoter`) would match nothing and show
        // nothing from there, silently: refused, with the names that exist.
        if crate_name.starts_with("tickwire") && !OUR_CRATES.contains(&crate_name) {
            return Err(crate::units::UsageError(format!(
                "log level {level:?}: {crate_name:?} is none of tickwire's modules ({})",
                OUR_CRATES.join(", ")
            ))
            .into());
        }
        let known = LEVELS.iter().any(|l| directive.eq_ignore_ascii_case(l))
            || crate_name.starts_with("tickwire")
            || directive.contains("::");
        if bare && !known {
            return Err(crate::units::UsageError(format!(
                "log level {level:?}: {directive:?} is not a level: {LEVEL_HINT}"
            ))
            .into());
        }
    }
    EnvFilter::try_new(directives.join(",")).map_err(|e| {
        crate::units::UsageError(format!("log level {level:?}: {e}: {LEVEL_HINT}")).into()
    })
}

fn open(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the log file {}", path.display()))
}

/// A writer into the current log file.
struct SharedFile(Arc<Mutex<File>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .flush()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_queue_size_comes_from_the_environment_within_bounds() {
        assert_eq!(queue_lines(None).unwrap(), QUEUED_LINES);
        assert_eq!(queue_lines(Some("  ")).unwrap(), QUEUED_LINES);
        assert_eq!(queue_lines(Some("8")).unwrap(), 8);
        assert_eq!(
            queue_lines(Some(&MAX_QUEUED_LINES.to_string())).unwrap(),
            MAX_QUEUED_LINES
        );
        for bad in ["0", "-1", "lots", "1048577", "8k"] {
            let e = queue_lines(Some(bad)).unwrap_err();
            assert!(
                e.downcast_ref::<crate::units::UsageError>().is_some(),
                "{bad}: a usage error (exit 2)"
            );
            let e = e.to_string();
            assert!(
                e.contains("TICKWIRE_LOG_QUEUE") && e.contains(bad),
                "{bad}: {e}"
            );
        }
    }

    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_place_writes_its_budget_a_window_then_counts_and_reports_the_rest() {
        let mut t = Throttle::new(3, Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(
                t.admit(1, t0 + Duration::from_millis(i)),
                Admit::Write { suppressed: 0 }
            );
        }
        for i in 3..10 {
            assert_eq!(t.admit(1, t0 + Duration::from_millis(i)), Admit::Suppress);
        }
        // Another place has a budget of its own.
        assert_eq!(t.admit(2, t0), Admit::Write { suppressed: 0 });
        // The next window: the first line written carries the count, once.
        let t1 = t0 + Duration::from_millis(1_000);
        assert_eq!(t.admit(1, t1), Admit::Write { suppressed: 7 });
        assert_eq!(t.admit(1, t1), Admit::Write { suppressed: 0 });
        assert_eq!(t.admit(1, t1), Admit::Write { suppressed: 0 });
        assert_eq!(t.admit(1, t1), Admit::Suppress);
        // Counts over several windows add up until a line is written.
        let t2 = t1 + Duration::from_secs(5);
        assert_eq!(t.admit(1, t2), Admit::Write { suppressed: 1 });
    }

    #[test]
    fn a_clock_that_steps_back_does_not_open_a_window() {
        let mut t = Throttle::new(1, Duration::from_secs(1));
        let t0 = Instant::now() + Duration::from_secs(10);
        assert_eq!(t.admit(1, t0), Admit::Write { suppressed: 0 });
        assert_eq!(t.admit(1, t0 - Duration::from_secs(5)), Admit::Suppress);
    }

    #[test]
    fn a_word_that_is_not_a_level_is_refused_not_taken_for_a_module() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,tickwire_router=debug",
            "tickwire_router",
            "tickwire_router::core=trace",
            "debug,hyper::proto=off",
            "warn, tickwire_router=debug",
            "info,",
            "3",
            "mio=debug",
        ] {
            assert!(parse_filter(ok).is_ok(), "{ok:?} refused");
        }
        for bad in ["verbose", "warning", "info,verbose"] {
            let e = parse_filter(bad).unwrap_err();
            assert!(
                e.downcast_ref::<crate::units::UsageError>().is_some(),
                "{bad:?}: {e}"
            );
            assert!(e.to_string().contains("is not a level"), "{e}");
        }
        // One of ours, mistyped: refused (it would silence that module's lines).
        for bad in [
            "tickwire_ruoter",
            "tickwire_ruoter=debug",
            "info,tickwire_foo::x=trace",
        ] {
            let e = parse_filter(bad).unwrap_err();
            assert!(
                e.downcast_ref::<crate::units::UsageError>().is_some()
                    && e.to_string().contains("none of tickwire's modules"),
                "{bad:?}: {e}"
            );
        }
        // A filter EnvFilter refuses is a usage error too.
        let e = parse_filter("tickwire_router=loud").unwrap_err();
        assert!(
            e.downcast_ref::<crate::units::UsageError>().is_some(),
            "{e}"
        );
    }

    /// `OUR_CRATES` names every crate of the workspace (`crates/*/Cargo.toml`).
    #[test]
    fn our_crates_are_the_workspace_crates() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let manifest = std::fs::read_to_string(e.ok()?.path().join("Cargo.toml")).ok()?;
                let name = manifest.lines().find_map(|l| {
                    l.strip_prefix("name = \"")
                        .and_then(|r| r.strip_suffix('"'))
                        .map(str::to_owned)
                })?;
                Some(name.replace('-', "_"))
            })
            .collect();
        found.sort();
        let mut ours: Vec<String> = OUR_CRATES.iter().map(|s| s.to_string()).collect();
        ours.sort();
        assert_eq!(found, ours);
    }
}
