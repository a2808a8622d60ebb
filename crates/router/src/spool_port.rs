//! The driver's side of guaranteed messaging: opens the spool directory (locked, so two
//! routers never share one), replays it into the core's engine, and adapts the storage
//! thread's [`Appender`] to the core's [`SpoolPort`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mio::Waker;
use tickwire_spool::{Appender, Config as SpoolConfig, Durable, Lsn, SyncPolicy};

use crate::config::{parse_sync, Config, SyncSetting};
use crate::core::Core;
use crate::gm::{Log, LogError, Progress, SpoolPort};

/// Why the spool could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Another process holds the directory.
    #[error("the spool directory {0} is in use by another tickwire router; give this router its own with --data-dir DIR (or run it without guaranteed messaging: --no-guaranteed)")]
    Locked(PathBuf),
    /// The directory or its lock file could not be created.
    #[error("cannot use the spool directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The spool failed to open.
    #[error("cannot open the spool in {dir}: {source}")]
    Open {
        /// The directory.
        dir: PathBuf,
        /// What the spool said.
        source: tickwire_spool::Error,
    },
    /// The spool holds a record longer than this router reads (`max_frame` + 256).
    #[error("cannot open the spool in {dir}: {source}: if this router ran before with a larger max_frame, start it with --max-frame {needed} or more (recovery then reads that record; a damaged one is skipped there and the rest recovered); nothing was cut")]
    RecordTooLarge {
        /// The directory.
        dir: PathBuf,
        /// What the spool said.
        source: tickwire_spool::Error,
        /// The least `max_frame` that reads the record.
        needed: u32,
    },
    /// `max_frame` is larger than a guaranteed message can be stored.
    #[error("max_frame {0} is too large for guaranteed messaging: a stored message holds at most {max} bytes with its frame (--max-frame {max}, or --no-guaranteed)", max = tickwire_spool::MAX_RECORD - SPOOL_RECORD_OVERHEAD)]
    FrameTooLarge(u32),
    /// The spool read back holds more than this router holds (queues, their index,
    /// publisher identities): not written by it.
    #[error("cannot recover the spool in {dir}: {why}; the router did not start")]
    Refused {
        /// The directory.
        dir: PathBuf,
        /// Which bound, by how much.
        why: String,
    },
    /// The `sync` setting does not parse.
    #[error("{0}")]
    Sync(String),
}

/// The open spool: the appender and the lock that keeps the directory ours.
pub struct SpoolAdapter {
    appender: Appender,
    _lock: File,
    dir: PathBuf,
    sync: SyncSetting,
}

/// Bytes a spool record holds beyond a message's frame (`max_record` = `max_frame` +
/// this).
const SPOOL_RECORD_OVERHEAD: u32 = 256;

/// The spool's open error, with what to do about a record longer than this router
/// reads.
fn open_error(dir: &Path, source: tickwire_spool::Error) -> SpoolError {
    match source {
        tickwire_spool::Error::RecordTooLarge { len, .. } => SpoolError::RecordTooLarge {
            dir: dir.to_path_buf(),
            source,
            needed: len.saturating_sub(SPOOL_RECORD_OVERHEAD),
        },
        source => SpoolError::Open {
            dir: dir.to_path_buf(),
            source,
        },
    }
}

/// Opens `cfg.data_dir`, replays it into `core`, and starts the storage thread.
pub fn open(
    cfg: &Config,
    core: &mut Core,
    waker: Arc<Waker>,
) -> Result<Option<SpoolAdapter>, SpoolError> {
    let Some(dir) = cfg.data_dir.clone() else {
        return Ok(None);
    };
    let sync = parse_sync(&cfg.sync).map_err(SpoolError::Sync)?;
    let lock = lock_dir(&dir)?;
    let mut scfg = SpoolConfig::new(dir.join("spool"));
    // Checked: a max_frame near 4 GiB wrapped this to ~160 bytes, and the queues and
    // messages read back vanished as damage (hostile-input pass).
    scfg.max_record = cfg
        .max_frame
        .checked_add(SPOOL_RECORD_OVERHEAD)
        .filter(|r| *r <= tickwire_spool::MAX_RECORD)
        .ok_or(SpoolError::FrameTooLarge(cfg.max_frame))?;
    scfg.max_pending_bytes = 64 << 20;
    scfg.cpu = cfg.spool_cpu;
    scfg.sync = match sync {
        SyncSetting::Fsync => SyncPolicy::Fsync,
        SyncSetting::Interval(d) => SyncPolicy::Interval(d),
        SyncSetting::PageCache => SyncPolicy::PageCache,
    };
    let engine = core.gm_mut();
    // Pass 1: queue definitions (a checkpoint may have re-written them after messages
    // that need them). Pass 2: everything, in order.
    let (first, _) = tickwire_spool::Spool::open(scfg.clone(), |lsn, rec| {
        engine.recover_definition(lsn.0, rec)
    })
    .map_err(|source| open_error(&dir, source))?;
    drop(first);
    let refused = |why| SpoolError::Refused {
        dir: dir.clone(),
        why,
    };
    engine.install_recovered_definitions().map_err(refused)?;
    let (spool, report) =
        tickwire_spool::Spool::open(scfg, |lsn, rec| engine.recover_record(lsn.0, rec)).map_err(
            |source| SpoolError::Open {
                dir: dir.clone(),
                source,
            },
        )?;
    engine.finish_recovery();
    if let Some(why) = engine.recovery_refusal() {
        return Err(refused(why));
    }
    for e in engine.recovery_errors.drain(..) {
        tracing::error!(dir = %dir.display(), "spool recovery: {e}");
    }
    for d in &report.damaged {
        tracing::error!(dir = %dir.display(), damage = ?d, "spool recovery found a damaged record; it was skipped and the rest recovered");
    }
    if let Some(t) = &report.torn_tail {
        tracing::warn!(dir = %dir.display(), torn_tail = ?t, "spool recovery cut a torn tail (a write the crash interrupted; never acknowledged)");
    }
    let (queues, depth) = engine.queue_summary();
    tracing::info!(dir = %dir.display(), records = report.records, queues, messages = depth, %sync, "guaranteed messaging: spool recovered");
    let appender = spool
        .start(Box::new(move || {
            let _ = waker.wake();
        }))
        .map_err(|source| SpoolError::Open {
            dir: dir.clone(),
            source,
        })?;
    Ok(Some(SpoolAdapter {
        appender,
        _lock: lock,
        dir,
        sync,
    }))
}

fn lock_dir(dir: &Path) -> Result<File, SpoolError> {
    let io = |source| SpoolError::Dir {
        dir: dir.to_path_buf(),
        source,
    };
    if dir.exists() && !dir.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "it exists and is not a directory",
        )));
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))
        .map_err(io)?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(f),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(SpoolError::Locked(dir.to_path_buf())),
        Err(e) => Err(io(e.into())),
    }
}

impl Log for SpoolAdapter {
    fn append(&mut self, record: &[u8]) -> Result<u64, LogError> {
        match self.appender.append(record) {
            Ok(Lsn(n)) => Ok(n),
            Err(tickwire_spool::AppendError::Busy) => Err(LogError::Busy),
            Err(tickwire_spool::AppendError::TooLarge { .. }) => Err(LogError::TooLarge),
            Err(_) => Err(LogError::Failed),
        }
    }
}

impl SpoolPort for SpoolAdapter {
    fn enabled(&self) -> bool {
        true
    }
    fn flush(&mut self) {
        self.appender.flush();
    }
    fn poll_progress(&mut self) -> Option<Progress> {
        match self.appender.poll_durable()? {
            Durable::Through(Lsn(n)) => Some(Progress::Durable(n)),
            Durable::Failed { first, last, kind } => Some(Progress::Failed {
                first: first.0,
                last: last.0,
                why: match kind {
                    std::io::ErrorKind::StorageFull => "the disk is full".to_string(),
                    k => format!("write error: {k}"),
                },
            }),
        }
    }
    fn reclaim(&mut self, below: u64) {
        self.appender.reclaim(Lsn(below));
    }
    fn bytes_on_disk(&self) -> u64 {
        self.appender.stats().bytes_on_disk
    }
    fn usage(&self) -> serde_json::Value {
        let s = self.appender.stats();
        serde_json::json!({
            "dir": self.dir.display().to_string(),
            "sync": self.sync.to_string(),
            "bytes_on_disk": s.bytes_on_disk,
            "segments": s.segments,
            "records_written": s.records_written,
            "batches": s.batches,
            "fsyncs": s.fsyncs,
            "failed_batches": s.failed_batches,
            "durable": s.durable.0,
        })
    }
}
