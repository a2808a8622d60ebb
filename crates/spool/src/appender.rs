//! The router's side: batches records and hands them to the storage thread.

use std::fs::{File, OpenOptions};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::record::{encode, HEADER};
use crate::recovery::{segment_path, Recovered, Segment};
use crate::storage::{Batch, Shared, Storage};
use crate::{AppendError, Config, Error, Lsn, SyncPolicy};

/// Progress reported by [`Appender::poll_durable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durable {
    /// Every record up to and including this number is durable, except those reported
    /// `Failed` (always reported before a `Through` that passes them).
    Through(Lsn),
    /// Records `first..=last` were not written (NACK them); their numbers are not reused.
    Failed {
        /// The first failed record.
        first: Lsn,
        /// The last failed record.
        last: Lsn,
        /// The error (`StorageFull` for ENOSPC, `FileTooLarge` for EFBIG, ...).
        kind: io::ErrorKind,
    },
}

/// Usage figures (for `tickwire stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpoolStats {
    /// Bytes in the segment files.
    pub bytes_on_disk: u64,
    /// Segment files.
    pub segments: u64,
    /// Records written since start.
    pub records_written: u64,
    /// `fdatasync`/`fsync` calls since start (directory syncs included).
    pub fsyncs: u64,
    /// Batches written since start.
    pub batches: u64,
    /// `write`/`writev` calls since start.
    pub writes: u64,
    /// Batches that failed to be written.
    pub failed_batches: u64,
    /// `fdatasync` failures under `Interval` (records already reported durable).
    pub sync_errors: u64,
    /// The highest durable record number (0: none).
    pub durable: Lsn,
}

/// A handle other threads may keep to read [`SpoolStats`].
#[derive(Clone)]
pub struct StatsReader(Arc<Shared>);

impl StatsReader {
    /// The current figures.
    pub fn read(&self) -> SpoolStats {
        let c = &self.0.counters;
        SpoolStats {
            bytes_on_disk: c.bytes_on_disk.load(Ordering::Relaxed),
            segments: c.segments.load(Ordering::Relaxed),
            records_written: c.records_written.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            failed_batches: c.failed_batches.load(Ordering::Relaxed),
            sync_errors: c.sync_errors.load(Ordering::Relaxed),
            durable: Lsn(self.0.durable.load(Ordering::Relaxed)),
        }
    }
}

impl std::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.read().fmt(f)
    }
}

/// The writing end, owned by one thread (the router's). Non-blocking: `append` copies
/// into the batch buffer, `flush` hands the batch over, `poll_durable` reports progress.
pub struct Appender {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    batch: Vec<u8>,
    batch_first: u64,
    next_lsn: u64,
    max_record: u32,
    max_pending: usize,
    failures_seen: u64,
    durable_reported: u64,
}

impl std::fmt::Debug for Appender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Appender")
            .field("next_lsn", &self.next_lsn)
            .field("batch_bytes", &self.batch.len())
            .finish()
    }
}

pub(crate) fn start(
    config: Config,
    recovered: Recovered,
    next_lsn: u64,
    wake: Box<dyn Fn() + Send>,
) -> Result<Appender, Error> {
    let Recovered {
        mut segments,
        append_to_last,
    } = recovered;
    let file = if append_to_last {
        // Invariant: `append_to_last` is only set when there is a last segment.
        let Some(last) = segments.last() else {
            return Err(Error::Thread("recovery lost its last segment".into()));
        };
        OpenOptions::new()
            .append(true)
            .open(&last.path)
            .map_err(|e| Error::io("opening segment", &last.path, e))?
    } else {
        let path = segment_path(&config.dir, next_lsn);
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io("creating segment", &path, e))?;
        if config.sync == SyncPolicy::Fsync {
            File::open(&config.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io("syncing spool directory", &config.dir, e))?;
        }
        segments.push(Segment {
            first: next_lsn,
            path,
            len: 0,
        });
        f
    };
    let durable = next_lsn - 1;
    let shared = Arc::new(Shared::new(durable));
    let c = &shared.counters;
    c.segments.store(segments.len() as u64, Ordering::Relaxed);
    c.bytes_on_disk
        .store(segments.iter().map(|s| s.len).sum(), Ordering::Relaxed);
    let storage = Storage {
        shared: shared.clone(),
        wake,
        dir: config.dir.clone(),
        segment_size: config.segment_size,
        policy: config.sync,
        segments,
        file: Some(file),
        pending_skip: None,
        unsynced: false,
        last_sync: Instant::now(),
        dead: None,
    };
    let cpu = config.cpu;
    let thread = std::thread::Builder::new()
        .name("tickwire-spool".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                // A warning (tracing) when the CPU does not exist; the thread runs anyway.
                tickwire_rt::pin::pin_current_thread(cpu);
            }
            storage.run()
        })
        .map_err(|e| Error::Thread(e.to_string()))?;
    Ok(Appender {
        shared,
        thread: Some(thread),
        batch: Vec::new(),
        batch_first: next_lsn,
        next_lsn,
        max_record: config.max_record,
        max_pending: config.max_pending_bytes,
        failures_seen: 0,
        durable_reported: durable,
    })
}

impl Appender {
    /// Copies one record into the current batch and returns its number. Not written
    /// until [`flush`](Self::flush). On error no number is used.
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, AppendError> {
        if payload.len() > self.max_record as usize {
            return Err(AppendError::TooLarge {
                len: payload.len(),
                max: self.max_record,
            });
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(AppendError::Failed);
        }
        let need = HEADER + payload.len();
        let pending = self.shared.pending_bytes.load(Ordering::Acquire);
        if pending + self.batch.len() + need > self.max_pending {
            return Err(AppendError::Busy);
        }
        let lsn = self.next_lsn;
        encode(&mut self.batch, lsn, payload);
        self.next_lsn += 1;
        Ok(Lsn(lsn))
    }

    /// Hands the current batch to the storage thread (one uncontended mutex per batch,
    /// and a notify only when the storage thread sleeps; the buffer is swapped for a
    /// recycled one). A no-op when empty.
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let len = self.batch.len();
        let mut st = self.shared.lock();
        let fresh = st.free.pop().unwrap_or_else(|| Vec::with_capacity(len));
        let buf = std::mem::replace(&mut self.batch, fresh);
        st.queue.push(Batch {
            buf,
            first: self.batch_first,
            last: self.next_lsn - 1,
        });
        self.shared.pending_bytes.fetch_add(len, Ordering::AcqRel);
        let sleeping = st.sleeping;
        drop(st);
        if sleeping {
            self.shared.cv.notify_one();
        }
        self.batch_first = self.next_lsn;
    }

    /// Non-blocking: the next piece of progress, failures first. Call until `None`.
    pub fn poll_durable(&mut self) -> Option<Durable> {
        // Durable first, then the failure count: a `Through` past a failure is only
        // published after that failure, so this order never reports it too early.
        let durable = self.shared.durable.load(Ordering::Acquire);
        let posted = self.shared.failures_posted.load(Ordering::Acquire);
        if posted != self.failures_seen {
            let mut st = self.shared.lock();
            if let Some(f) = st.failures.pop_front() {
                return Some(f.into());
            }
            // Every posted failure has been taken (merged posts count once).
            self.failures_seen = posted;
        }
        if durable > self.durable_reported {
            self.durable_reported = durable;
            return Some(Durable::Through(Lsn(durable)));
        }
        None
    }

    /// Asks the storage thread to delete the segments (never the current one) whose
    /// records are all below `below`.
    pub fn reclaim(&mut self, below: Lsn) {
        self.shared
            .reclaim_below
            .fetch_max(below.0, Ordering::AcqRel);
        let mut st = self.shared.lock();
        st.reclaim = true;
        let sleeping = st.sleeping;
        drop(st);
        if sleeping {
            self.shared.cv.notify_one();
        }
    }

    /// The number the next record will get.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.next_lsn)
    }

    /// The current usage figures.
    pub fn stats(&self) -> SpoolStats {
        self.stats_reader().read()
    }

    /// A handle for reading the figures from another thread.
    pub fn stats_reader(&self) -> StatsReader {
        StatsReader(self.shared.clone())
    }

    /// Flushes, lets the storage thread write and sync everything, and joins it.
    /// Progress made meanwhile can still be read with `poll_durable`.
    pub fn close(&mut self) -> Result<(), Error> {
        self.flush();
        self.shared.lock().shutdown = true;
        self.shared.cv.notify_one();
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Error::Thread("storage thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(error = %e, "spool: close on drop");
        }
    }
}
