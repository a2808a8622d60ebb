//! tickwire's durable write-ahead log for guaranteed messaging.
//!
//! The router persists guaranteed publishes and consumer acks as opaque records; this
//! crate numbers them, writes them to append-only segment files on a storage thread
//! with group commit, tells the router which numbers are durable (or failed), and on
//! start hands every valid record back.
//!
//! # What it guarantees
//!
//! - Every record gets a record number ([`Lsn`]), dense from 1 and continuing across
//!   segments and restarts. Numbers are never reused while the log survives, except
//!   those of batches that failed to be written when the process stopped before any
//!   later write succeeded (they were reported failed, never durable).
//! - [`Appender::poll_durable`] reports `Through(n)` only when every record up to `n`,
//!   other than those already reported `Failed`, is durable under the [`SyncPolicy`]:
//!   on disk after `fdatasync` for `Fsync`, in the page cache for `Interval` (synced
//!   within one interval) and `PageCache` (never synced by us).
//! - A failed write (ENOSPC, EIO, EFBIG, ...) is reported as `Failed { first, last,
//!   kind }`, the partial write is truncated away so the log stays valid, and later
//!   batches are tried normally (the disk may free up).
//! - Recovery never drops anything silently: a torn tail is cut and reported, any other
//!   damage is reported in [`RecoveryReport::damaged`] with segment, offset and reason.
//!
//! # On disk
//!
//! A directory of segment files, each named by the number of its first record, zero
//! padded to 20 digits (`00000000000000000001.log`). A segment is rolled before a batch
//! that would take it past [`Config::segment_size`] (64 MiB by default), so a segment
//! holds whole batches and may pass the size by less than one batch. Each record, little
//! endian:
//!
//! ```text
//! u32 len | u32 crc32c(lsn bytes + payload) | u64 lsn | payload (len bytes)
//! ```
//!
//! The checksum is CRC-32C (Castagnoli, the `crc32c` crate: SSE4.2/ARMv8 instructions
//! with a software fallback). The top bit of `len` marks a **skip marker**: the numbers
//! `lsn .. lsn + count` (its 8-byte payload is `u64 count`) were used by batches that
//! failed to be written. The storage thread writes one in front of the next successful
//! write after a failure (and at clean shutdown), so the numbering on disk stays dense
//! and a real gap is always damage. A marker's checksum is XORed with a constant so a
//! flipped flag bit cannot turn a record into a marker or back.
//!
//! # Recovery rules ([`Spool::open`])
//!
//! Segments are read in name order; each valid record goes to the callback in order.
//! Reading a segment stops at the first record that is incomplete, has a length above
//! [`Config::max_record`], fails its checksum, or breaks the numbering. Then:
//!
//! - In the **last** segment, if no valid record follows that point (a byte-by-byte scan
//!   for a record with a good checksum and a plausible number), it is a **torn tail**:
//!   the file is truncated there and [`RecoveryReport::torn_tail`] says how many bytes
//!   were cut. Appends continue at the new end.
//! - Anywhere else it is **damage**: reported in [`RecoveryReport::damaged`], and
//!   recovery resynchronises on the next valid record (the same byte-by-byte scan) and
//!   reads on, so one damaged record costs that record alone; only when no valid record
//!   follows in the segment is the rest of it skipped. If the last segment is damaged, appends go
//!   to a new segment and the next number is above every number seen, including those
//!   after the damage, so none is used twice.
//! - A segment whose first record does not continue the numbering is reported as a
//!   [`DamageReason::LsnGap`] and still read. Skip markers are not damage: they are listed
//!   in [`RecoveryReport::skipped`].
//!
//! Memory stays bounded: segments are read through one window of
//! `max(256 KiB, 2 × (max_record + 16))` bytes, plus running checksums every 16 bytes
//! over at most one record (`(max_record + 24) / 4` bytes); no allocation follows a
//! length read from disk.
//!
//! Work stays bounded too: the scan tries every byte offset, and a forged header at
//! each may claim a `max_record` payload, but a record's checksum is taken from the
//! running checksums (CRC-32C is linear), so each byte is checksummed at most twice,
//! plus under 32 bytes per header tried:
//! [`RecoveryReport::checksummed_bytes`] is at most 34 × the segments' bytes (under 6 ×
//! for headers 16 bytes apart), never `max_record` per byte scanned (before, 5.2 MB of
//! headers claiming 1 MB each took 35 s to recover).
//!
//! # Threading and how to drive it
//!
//! ```text
//! router thread                                  storage thread ("tickwire-spool")
//! ─────────────                                  ─────────────────────────────────
//! Spool::open(config, |lsn, payload| ..)  (recovery, on the caller's thread)
//! spool.start(wake) ─────────────────────────────► spawned
//! appender.append(payload) -> Lsn    copy into the batch buffer (no lock, no syscall)
//! appender.flush()  ── one mutex (+ notify) ────► takes every queued batch, one writev
//!                                                 per segment run, fdatasync (Fsync),
//! appender.poll_durable() ◄── atomics ──────────  publishes durable / failures, calls wake()
//! appender.reclaim(below)                         deletes fully-below segments
//! appender.close() / drop  ─────────────────────► drains, syncs, exits; joined
//! ```
//!
//! The hot path: `append` takes no lock, makes no syscall and, once buffers have grown
//! to the batch size, allocates nothing; `flush` takes one mutex per batch and recycles
//! the written buffers (double buffering, more when the disk lags). `poll_durable` reads
//! two atomics, and locks only to take a failure. `Busy` bounds the memory in flight
//! ([`Config::max_pending_bytes`]): the caller applies back-pressure.
#![forbid(unsafe_code)]

mod appender;
mod config;
mod error;
mod record;
mod recovery;
mod storage;

pub use appender::{Appender, Durable, SpoolStats, StatsReader};

/// The longest record the on-disk format holds (`Config::max_record` at most).
pub const MAX_RECORD: u32 = record::FORMAT_MAX_PAYLOAD;
pub use config::{Config, SyncPolicy};
pub use error::{AppendError, Error};
pub use recovery::{Damage, DamageReason, RecoveryReport, SkippedRange, TornTail};

use std::fmt;

/// A record number: dense from 1, continuing across segments and restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An opened, recovered spool, not yet writing. [`Spool::start`] starts the storage
/// thread and returns the [`Appender`].
#[derive(Debug)]
pub struct Spool {
    config: Config,
    recovered: recovery::Recovered,
    next_lsn: u64,
}

impl Spool {
    /// Opens (creating if needed) the spool directory and recovers it: every valid record
    /// goes to `on_record` in order; a torn tail is truncated; damage is reported.
    pub fn open(
        config: Config,
        mut on_record: impl FnMut(Lsn, &[u8]),
    ) -> Result<(Spool, RecoveryReport), Error> {
        config.validate()?;
        let (recovered, report) = recovery::recover(&config, &mut on_record)?;
        tracing::debug!(
            dir = %config.dir.display(),
            segments = report.segments,
            records = report.records,
            next_lsn = report.next_lsn.0,
            damaged = report.damaged.len(),
            torn_tail = report.torn_tail.as_ref().map_or(0, |t| t.bytes_cut),
            checksummed_bytes = report.checksummed_bytes,
            "spool recovered"
        );
        let next_lsn = report.next_lsn.0;
        Ok((
            Spool {
                config,
                recovered,
                next_lsn,
            },
            report,
        ))
    }

    /// The number the next appended record will get.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.next_lsn)
    }

    /// Starts the storage thread. `wake` is called by that thread after each durable
    /// advance or failure (the router passes a `mio::Waker`).
    pub fn start(self, wake: Box<dyn Fn() + Send>) -> Result<Appender, Error> {
        appender::start(self.config, self.recovered, self.next_lsn, wake)
    }
}
