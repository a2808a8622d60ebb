//! Logging for every command: `--log-level`, `--log-format text|json`, `--log-file`,
//! and what SIGHUP may change while running ([`reload`]).
//!
//! The level filter sits behind a `tracing_subscriber::reload` layer; the log file
//! behind a mutex that SIGHUP swaps for a freshly opened file (so logrotate's
//! rename-then-HUP works). Neither is on a hot path: nothing logs per message.

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
}

static RELOADER: OnceLock<Reloader> = OnceLock::new();

/// Installs the global subscriber.
pub fn init(args: &LogArgs, default_level: &str) -> anyhow::Result<()> {
    let from_env = std::env::var("TICKWIRE_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let filter = match (&args.log_level, from_env) {
        (Some(level), _) => parse_filter(level)?,
        (None, Some(level)) => {
            parse_filter(&level).with_context(|| "the environment variable TICKWIRE_LOG")?
        }
        (None, None) => EnvFilter::new(default_level),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let (writer, file, ansi) = match &args.log_file {
        Some(path) => {
            let f = Arc::new(Mutex::new(open(path)?));
            let shared = f.clone();
            let writer = BoxMakeWriter::new(move || SharedFile(shared.clone()));
            (writer, Some((path.clone(), f)), false)
        }
        None => (
            BoxMakeWriter::new(io::stderr),
            None,
            io::IsTerminal::is_terminal(&io::stderr()),
        ),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false);
    let registry = tracing_subscriber::registry().with(filter);
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
    });
    Ok(())
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
        set_level(level)?;
        tracing::info!(level, "log level reloaded");
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

/// For commands without a config file (`feed`, `fix`): SIGHUP reopens the log file
/// (rotation by rename), on a thread of its own; the level stays as started.
pub fn reopen_on_sighup() -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .context("installing the SIGHUP handler")?;
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

/// True when --log-level chose the level at start.
pub fn level_from_flag() -> bool {
    RELOADER.get().is_some_and(|r| r.from_flag)
}

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
        let known = LEVELS.iter().any(|l| directive.eq_ignore_ascii_case(l))
            || directive.starts_with("tickwire")
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
    use super::*;

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
        // A filter EnvFilter refuses is a usage error too.
        let e = parse_filter("tickwire_router=loud").unwrap_err();
        assert!(
            e.downcast_ref::<crate::units::UsageError>().is_some(),
            "{e}"
        );
    }
}
