//! The storage thread: takes batches from the appender, writes them (one `writev` per
//! segment run), syncs according to the policy, reports progress and failures.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::record::{encode_skip, SKIP_RECORD};
use crate::recovery::{segment_path, Segment};
use crate::{Lsn, SyncPolicy};

/// A batch handed over by the appender: whole records `first..=last`.
pub(crate) struct Batch {
    pub buf: Vec<u8>,
    pub first: u64,
    pub last: u64,
}

/// A batch (or run of batches) that could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub first: u64,
    pub last: u64,
    pub kind: io::ErrorKind,
}

#[derive(Default)]
pub(crate) struct State {
    pub queue: Vec<Batch>,
    pub free: Vec<Vec<u8>>,
    pub failures: VecDeque<Failure>,
    pub shutdown: bool,
    pub reclaim: bool,
    /// The storage thread is waiting on the condition variable. The appender notifies
    /// only then: `Condvar::notify_one` is a futex syscall even with nobody waiting, and
    /// the router flushes once per loop turn while the storage thread is mostly busy
    /// writing or syncing (measured: one futex per router turn, 39k/s at 135k msg/s).
    pub sleeping: bool,
}

/// Counters, each written by one side and read by anyone.
#[derive(Default)]
pub(crate) struct Counters {
    pub bytes_on_disk: AtomicU64,
    pub segments: AtomicU64,
    pub records_written: AtomicU64,
    pub fsyncs: AtomicU64,
    pub batches: AtomicU64,
    pub writes: AtomicU64,
    pub failed_batches: AtomicU64,
    pub sync_errors: AtomicU64,
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub cv: Condvar,
    /// The highest durable record number (0: none yet).
    pub durable: AtomicU64,
    /// Failures pushed so far (the appender compares with the ones it has taken).
    pub failures_posted: AtomicU64,
    /// Bytes handed over and not yet written (or failed).
    pub pending_bytes: AtomicUsize,
    /// The storage thread has exited.
    pub stopped: AtomicBool,
    pub reclaim_below: AtomicU64,
    pub counters: Counters,
}

impl Shared {
    pub(crate) fn new(durable: u64) -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            durable: AtomicU64::new(durable),
            failures_posted: AtomicU64::new(0),
            pending_bytes: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
            reclaim_below: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    /// An fdatasync of `f`, counted; a failure is counted and logged as `failed`, and
    /// the caller carries on (the interval sync and the sync at a segment roll).
    fn sync_counted(&self, f: &File, failed: &str) {
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = f.sync_data() {
            self.counters.sync_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "{failed}");
        }
    }

    /// The state, even if a panicking holder poisoned the lock (the state stays
    /// consistent: every critical section only moves whole values).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct Storage {
    pub shared: Arc<Shared>,
    pub wake: Box<dyn Fn() + Send>,
    pub dir: PathBuf,
    pub segment_size: u64,
    pub policy: SyncPolicy,
    pub segments: Vec<Segment>,
    /// The open current segment (the last of `segments`); None after a failed roll.
    pub file: Option<File>,
    /// Record numbers used by failed batches and not yet covered by a skip marker.
    pub pending_skip: Option<(u64, u64)>,
    pub unsynced: bool,
    pub last_sync: Instant,
    /// A fatal error (a failed truncate): every later batch fails with this kind.
    pub dead: Option<io::ErrorKind>,
}

impl Storage {
    pub(crate) fn run(mut self) {
        let mut batches: Vec<Batch> = Vec::new();
        loop {
            let shutdown = {
                let mut st = self.shared.lock();
                loop {
                    if !st.queue.is_empty() || st.shutdown || st.reclaim {
                        break;
                    }
                    match self.sync_deadline() {
                        Some(deadline) => {
                            let now = Instant::now();
                            if now >= deadline {
                                break;
                            }
                            st.sleeping = true;
                            st = match self.shared.cv.wait_timeout(st, deadline - now) {
                                Ok((g, _)) => g,
                                Err(p) => p.into_inner().0,
                            };
                            st.sleeping = false;
                        }
                        None => {
                            st.sleeping = true;
                            st = self.shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                            st.sleeping = false;
                        }
                    }
                }
                std::mem::swap(&mut batches, &mut st.queue);
                st.reclaim = false;
                st.shutdown
            };
            let before = (
                self.shared.durable.load(Ordering::Relaxed),
                self.shared.failures_posted.load(Ordering::Relaxed),
            );
            if !batches.is_empty() {
                self.write_batches(&batches);
                let bytes: usize = batches.iter().map(|b| b.buf.len()).sum();
                self.shared.pending_bytes.fetch_sub(bytes, Ordering::AcqRel);
                let mut st = self.shared.lock();
                for mut b in batches.drain(..) {
                    b.buf.clear();
                    st.free.push(b.buf);
                }
            }
            self.reclaim();
            if self.sync_deadline().is_some_and(|d| Instant::now() >= d) {
                self.sync_now();
            }
            if shutdown {
                self.finish();
            }
            let after = (
                self.shared.durable.load(Ordering::Relaxed),
                self.shared.failures_posted.load(Ordering::Relaxed),
            );
            if after != before {
                (self.wake)();
            }
            if shutdown {
                self.shared.stopped.store(true, Ordering::Release);
                return;
            }
        }
    }

    /// When an `Interval` policy owes an fsync.
    fn sync_deadline(&self) -> Option<Instant> {
        match self.policy {
            SyncPolicy::Interval(d) if self.unsynced => Some(self.last_sync + d),
            _ => None,
        }
    }

    fn sync_now(&mut self) {
        if let Some(f) = &self.file {
            self.shared.sync_counted(f, "spool: fdatasync failed");
        }
        self.unsynced = false;
        self.last_sync = Instant::now();
    }

    /// At shutdown: cover failed numbers with a marker (so they are not reused after a
    /// restart) and sync unless the policy never does.
    fn finish(&mut self) {
        if let (Some((first, count)), Some(f), None) =
            (self.pending_skip, self.file.as_mut(), self.dead)
        {
            let marker = encode_skip(first, count);
            if f.write_all(&marker).is_ok() {
                self.pending_skip = None;
                self.add_len(SKIP_RECORD as u64);
                self.unsynced = true;
            }
        }
        if self.unsynced && self.policy != SyncPolicy::PageCache {
            self.sync_now();
        }
    }

    fn write_batches(&mut self, batches: &[Batch]) {
        let mut i = 0;
        while i < batches.len() {
            if let Some(kind) = self.dead {
                let last = batches[batches.len() - 1].last;
                self.post_failure(batches[i].first, last, kind, (batches.len() - i) as u64);
                return;
            }
            let skip_len = if self.pending_skip.is_some() {
                SKIP_RECORD as u64
            } else {
                0
            };
            let cur_len = self.segments.last().map_or(0, |s| s.len);
            let first_len = batches[i].buf.len() as u64 + skip_len;
            if self.file.is_none() || (cur_len > 0 && cur_len + first_len > self.segment_size) {
                let first = self.pending_skip.map_or(batches[i].first, |(f, _)| f);
                if let Err(e) = self.roll(first) {
                    tracing::warn!(error = %e, "spool: creating a segment failed");
                    let j = i + 1;
                    self.fail_run(&batches[i..j], e.kind());
                    i = j;
                    continue;
                }
            }
            // The run: as many batches as fit in this segment (at least one).
            let cur_len = self.segments.last().map_or(0, |s| s.len);
            let mut j = i + 1;
            let mut len = first_len;
            while j < batches.len()
                && cur_len + len + batches[j].buf.len() as u64 <= self.segment_size
            {
                len += batches[j].buf.len() as u64;
                j += 1;
            }
            self.write_run(&batches[i..j], cur_len);
            i = j;
        }
    }

    fn write_run(&mut self, run: &[Batch], start: u64) {
        let marker = self.pending_skip.map(|(f, n)| encode_skip(f, n));
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(run.len() + 1);
        if let Some(m) = &marker {
            slices.push(IoSlice::new(m));
        }
        slices.extend(run.iter().map(|b| IoSlice::new(&b.buf)));
        let total: u64 = slices.iter().map(|s| s.len() as u64).sum();
        let Some(file) = self.file.as_mut() else {
            self.fail_run(run, io::ErrorKind::NotFound);
            return;
        };
        let mut result = write_all_vectored(file, &mut slices, &self.shared.counters.writes);
        if result.is_ok() && self.policy == SyncPolicy::Fsync {
            self.shared.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
            result = file.sync_data();
        }
        match result {
            Ok(()) => {
                self.pending_skip = None;
                self.add_len(total);
                if self.policy != SyncPolicy::Fsync {
                    self.unsynced = true;
                } else {
                    self.last_sync = Instant::now();
                }
                let records: u64 = run.iter().map(|b| b.last - b.first + 1).sum();
                let c = &self.shared.counters;
                c.records_written.fetch_add(records, Ordering::Relaxed);
                c.batches.fetch_add(run.len() as u64, Ordering::Relaxed);
                self.shared
                    .durable
                    .fetch_max(run[run.len() - 1].last, Ordering::AcqRel);
            }
            Err(e) => {
                tracing::warn!(error = %e, first = run[0].first, last = run[run.len() - 1].last, "spool: batch write failed; truncating it away");
                // Cut the partial write so the log stays valid; if even that fails the
                // file's end is unknown and nothing more may be appended to it.
                if let Err(te) = file.set_len(start).and_then(|()| file.sync_data()) {
                    tracing::error!(error = %te, "spool: truncating a failed batch failed; storage stops");
                    self.dead = Some(te.kind());
                }
                self.fail_run(run, e.kind());
            }
        }
    }

    fn fail_run(&mut self, run: &[Batch], kind: io::ErrorKind) {
        let first = run[0].first;
        let last = run[run.len() - 1].last;
        self.pending_skip = Some(match self.pending_skip {
            Some((f, _)) => (f, last - f + 1),
            None => (first, last - first + 1),
        });
        self.post_failure(first, last, kind, run.len() as u64);
    }

    fn post_failure(&mut self, first: u64, last: u64, kind: io::ErrorKind, batches: u64) {
        self.shared
            .counters
            .failed_batches
            .fetch_add(batches, Ordering::Relaxed);
        let mut st = self.shared.lock();
        match st.failures.back_mut() {
            // Merge with a still-unread neighbour of the same kind: the queue stays short.
            Some(prev) if prev.last + 1 == first && prev.kind == kind => prev.last = last,
            _ => st.failures.push_back(Failure { first, last, kind }),
        }
        self.shared.failures_posted.fetch_add(1, Ordering::AcqRel);
    }

    fn add_len(&mut self, n: u64) {
        if let Some(s) = self.segments.last_mut() {
            s.len += n;
        }
        self.shared
            .counters
            .bytes_on_disk
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Closes the current segment (synced unless the policy never syncs) and starts a
    /// new one named `first`.
    fn roll(&mut self, first: u64) -> io::Result<()> {
        if let Some(f) = self.file.take() {
            // Under `Fsync` every run was synced already.
            if self.unsynced && self.policy != SyncPolicy::PageCache {
                self.shared
                    .sync_counted(&f, "spool: fdatasync at segment roll failed");
                self.unsynced = false;
            }
        }
        let path = segment_path(&self.dir, first);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        // A file left by an earlier failed attempt under the same name is empty or was
        // truncated; start it from zero.
        file.set_len(0)?;
        if self.policy == SyncPolicy::Fsync {
            self.shared.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
            File::open(&self.dir)?.sync_all()?;
        }
        if self.segments.last().is_none_or(|s| s.first != first) {
            self.segments.push(Segment {
                first,
                path,
                len: 0,
            });
            self.shared
                .counters
                .segments
                .fetch_add(1, Ordering::Relaxed);
        } else if let Some(s) = self.segments.last_mut() {
            self.shared
                .counters
                .bytes_on_disk
                .fetch_sub(s.len, Ordering::Relaxed);
            s.len = 0;
        }
        self.file = Some(file);
        Ok(())
    }

    /// Deletes the segments (never the current one) whose records are all below the
    /// requested number: those followed by a segment starting at or below it.
    fn reclaim(&mut self) {
        let below = self.shared.reclaim_below.load(Ordering::Acquire);
        while self.segments.len() >= 2 && self.segments[1].first <= below {
            let seg = &self.segments[0];
            match fs::remove_file(&seg.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(error = %e, segment = %seg.path.display(), "spool: deleting a reclaimed segment failed");
                    return;
                }
            }
            let seg = self.segments.remove(0);
            self.shared
                .counters
                .bytes_on_disk
                .fetch_sub(seg.len, Ordering::Relaxed);
            self.shared
                .counters
                .segments
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn write_all_vectored(
    file: &mut File,
    mut bufs: &mut [IoSlice<'_>],
    writes: &AtomicU64,
) -> io::Result<()> {
    while !bufs.is_empty() {
        writes.fetch_add(1, Ordering::Relaxed);
        match file.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A failure as the appender reports it.
impl From<Failure> for crate::Durable {
    fn from(f: Failure) -> crate::Durable {
        crate::Durable::Failed {
            first: Lsn(f.first),
            last: Lsn(f.last),
            kind: f.kind,
        }
    }
}
