//! The crate's errors.

use std::io;
use std::path::PathBuf;

/// Why the spool could not be opened, started or closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid (the operator's to fix).
    #[error("invalid spool configuration: {0}")]
    Config(String),
    /// A filesystem operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("opening segment", "creating directory", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A segment holds, whole, a record longer than this spool reads
    /// (`Config::max_record`): written under a larger limit, or its length is damaged.
    /// Recovery neither cuts nor skips it.
    #[error(
        "{} holds a record of {len} bytes at offset {offset}, more than the {max_record} this spool reads (written under a larger limit, or a damaged length)",
        segment.display()
    )]
    RecordTooLarge {
        /// The segment file.
        segment: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// Its length field.
        len: u32,
        /// The most this spool reads.
        max_record: u32,
    },
    /// The storage thread could not be started, or panicked.
    #[error("spool storage thread: {0}")]
    Thread(String),
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Why `Appender::append` refused a record. No record number was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The payload is longer than `Config::max_record` (the caller's message).
    #[error("record of {len} bytes exceeds max_record ({max})")]
    TooLarge {
        /// The payload length.
        len: usize,
        /// `Config::max_record`.
        max: u32,
    },
    /// Too many bytes wait for the storage thread (`Config::max_pending_bytes`): apply
    /// back-pressure and retry after `poll_durable` reports progress.
    #[error("spool busy: max_pending_bytes reached")]
    Busy,
    /// The storage thread has stopped (closed, or a fatal IO error); nothing more can be
    /// written.
    #[error("spool storage thread has stopped")]
    Failed,
}
