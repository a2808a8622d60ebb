//! The spool's configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::record::{FORMAT_MAX_PAYLOAD, HEADER};
use crate::Error;

/// When a written record counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Group commit: everything handed over is written with one `writev`, then one
    /// `fdatasync`, and only then reported durable. New segment files are followed by
    /// an fsync of the directory.
    Fsync,
    /// Reported durable once written to the page cache; `fdatasync` at most once per
    /// interval (and at segment roll and shutdown). A machine crash can lose up to one
    /// interval of records the caller was told were durable.
    Interval(Duration),
    /// Reported durable once written to the page cache; never `fdatasync`. Survives a
    /// process crash, not a machine crash.
    PageCache,
}

/// How a spool stores its records.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory of segment files (created if missing).
    pub dir: PathBuf,
    /// A segment is rolled before a batch that would take it past this many bytes
    /// (a single batch larger than this gets a segment of its own). Default 64 MiB.
    pub segment_size: u64,
    /// The largest payload accepted by `append` and believed by recovery; also bounds
    /// every allocation recovery makes. Default 1 MiB.
    pub max_record: u32,
    /// `append` answers `Busy` while the bytes handed to the storage thread and not yet
    /// written, plus the batch being filled, would exceed this. Default 16 MiB.
    pub max_pending_bytes: usize,
    /// When records count as durable. Default `Fsync`.
    pub sync: SyncPolicy,
    /// Pin the storage thread to this CPU (its writes and fdatasyncs then leave the
    /// caller's core alone). Default: not pinned.
    pub cpu: Option<usize>,
}

impl Config {
    /// The defaults, storing in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Config {
        Config {
            dir: dir.into(),
            segment_size: 64 << 20,
            max_record: 1 << 20,
            max_pending_bytes: 16 << 20,
            sync: SyncPolicy::Fsync,
            cpu: None,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.max_record == 0 || self.max_record > FORMAT_MAX_PAYLOAD {
            return Err(Error::Config(format!(
                "max_record must be in 1..={FORMAT_MAX_PAYLOAD}, not {}",
                self.max_record
            )));
        }
        if self.segment_size == 0 {
            return Err(Error::Config("segment_size must not be 0".into()));
        }
        let min = self.max_record as usize + HEADER;
        if self.max_pending_bytes < min {
            return Err(Error::Config(format!(
                "max_pending_bytes ({}) must hold one largest record ({min} bytes)",
                self.max_pending_bytes
            )));
        }
        if let SyncPolicy::Interval(d) = self.sync {
            if d.is_zero() {
                return Err(Error::Config(
                    "sync interval must not be 0 (use Fsync)".into(),
                ));
            }
        }
        Ok(())
    }
}
