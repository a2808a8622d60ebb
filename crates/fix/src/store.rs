//! Message stores: where a FIX session keeps its sequence numbers and the outgoing
//! messages it may have to resend.
//!
//! Two implementations of [`MessageStore`]:
//!
//! * [`MemoryStore`]: everything in process memory; lost when the process ends.
//! * [`FileStore`]: a durable, append-only log that survives `kill -9` (and, with
//!   [`SyncPolicy::EveryMessage`], power loss) without losing or reusing a sequence number.
//!
//! # The latency contract
//!
//! [`MessageStore::save`] and the sender sequence number setters only append an encoded
//! record to an in-process buffer: no system call, and no allocation once the buffer has
//! grown to its working size; the target sequence number setters only note the value, and
//! the next flush appends one NextTarget record for it (one per flush, however many
//! messages a loop turn received). [`MessageStore::flush`] hands the whole buffer to the
//! kernel by copying it into a shared mapping of the log's end (no system call; below),
//! followed by `fdatasync` when the [`SyncPolicy`] asks for it.
//!
//! # Writing: a mapped window at the log's end
//!
//! The flush copies the pending records into a `MAP_SHARED` window of `store.log` that
//! starts at the log's end: the copy lands in the kernel's page cache exactly as a
//! `pwrite` would, so it survives a `kill -9` the same way and `fdatasync` syncs it the
//! same way, but it costs no system call. Measured (BENCHMARKS.md, issue 18): a flush of
//! one 230-byte message costs 45 ns on average instead of 1,018 ns
//! (`examples/store_flush.rs`), and the tick-to-trade engine's CPU per X→D fell by about
//! 1.2 µs, the two `pwrite`s (one per session) it made per turn.
//!
//! The window is [`WINDOW`] bytes of address space; only what is prepared uses disk and
//! memory. [`MessageStore::prepare`], which the driver calls after the turn's socket
//! writes (off the message path), keeps [`PREPARE_AHEAD`] bytes ahead of the log's end
//! written with zeros (a `pwrite`: the file system reserves the blocks then, or fails it
//! with its error, so a full disk never faults a copy) and faulted in (a
//! `madvise(MADV_POPULATE_WRITE)`), one [`ALLOCATE_STEP`] per call while the log grows
//! by less than that between calls (more when it grew more), and unmaps what is written
//! behind, [`RELEASE_STEP`] bytes at a time in a call that allocates nothing, or all
//! but one step in any call once four wait (turns writing more than a step each make
//! every call allocate) (`MADV_DONTNEED`; the data stays in the file), so that moving to
//! the next window tears down few pages. The steps are small because the next message may arrive while
//! a call runs: on the 2-vCPU guest a call that zeroed and faulted in 64 KiB took ~50 µs
//! and those calls set the tick-to-trade p99; 8 KiB, aligned in the file, takes
//! ~8–13 µs. (Measured on ext4: `fallocate` instead of the zeros left the first write
//! to each fresh MiB ~0.4 ms of extent work, and unmapping a populated 4 MiB window
//! took ~0.5 ms.) A flush whose records do not fit what is
//! prepared prepares it itself; one that does not fit the window maps the next one.
//! Where a mapping or the zeros cannot be had (a file system without shared writable
//! mappings), the flush `pwrite`s instead, and the zeros are never written over records
//! a `pwrite` put past them.
//!
//! So the file is longer than the log while the store is open (by at most
//! [`PREPARE_AHEAD`] + [`ALLOCATE_STEP`]): the rest is zeros, which recovery reads as the end of the log;
//! a clean stop (drop) truncates the file to the log. The mapping is written, never read
//! (resends read with `pread`), through the workspace's one unsafe module
//! (`tickwire_shm::Region`). Another process truncating the file while the store is open
//! makes the next copy fault (`SIGBUS`): a session's store directory belongs to that
//! session alone. [`FileStore::set_mapped_writes`] turns the mapping off.
//!
//! The driver calls `flush()` once per loop turn, **before** it writes the socket. Hence a
//! message is never on the wire before its record is in the kernel's page cache, and a
//! `kill -9` of the process (which keeps the page cache) loses nothing that was sent. Only
//! an operating-system crash or power loss can lose records that were written but not yet
//! synced, and the sync policy bounds that window:
//!
//! | policy | `flush()` does | survives process crash | survives power loss |
//! |---|---|---|---|
//! | [`SyncPolicy::EveryMessage`] | copy + `fdatasync` | everything sent | everything sent |
//! | [`SyncPolicy::Batched`] | copy, `fdatasync` every N message records | everything sent | all but the last < N messages |
//! | [`SyncPolicy::Os`] | copy only (the kernel writes back when it likes) | everything sent | what the kernel wrote back |
//!
//! # File layout
//!
//! One directory per session, named `<BeginString>-<SenderCompID>-<TargetCompID>` with
//! `-<SessionQualifier>` appended when there is one (the same name QuickFIX's `FileStore`
//! uses as prefix of its files under `FileStorePath`; see [`FileStore::session_dir_name`]).
//! The directory holds three files: `store.log`, the log, `store.seqnums`, the
//! redundancy that detects a lost log (below), and `store.lock`, empty, on which an open
//! store holds an exclusive `flock` (taken before anything is read, released when the
//! store is dropped or its process ends): a second store opened on the directory, by
//! another engine with the same `FileStorePath` and session, is refused
//! ([`StoreError::Locked`]) instead of recovering (truncating) and later cutting a log
//! the first one is writing. A store whose recovery failed writes nothing when dropped.
//! The log is a sequence of records:
//!
//! ```text
//! record  = len:u32le  crc:u32le  body[len]
//! body    = kind:u8  value:u64le  payload[len - 9]
//! crc     = CRC-32 (IEEE, crc32fast) of body
//! kinds   = 1 Header   value = creation time (unix ns), payload = "TWFS1" magic
//!           2 Message  value = MsgSeqNum, payload = the raw FIX message
//!           3 NextSender value = next sender MsgSeqNum
//!           4 NextTarget value = next target MsgSeqNum
//! ```
//!
//! The first record is always a Header. A NextSender record is written only when the
//! log does not already imply its value (recovery below takes the larger of the last
//! NextSender record and the highest stored MsgSeqNum + 1): the increment that follows
//! [`MessageStore::save`] of the next message adds no record, so a sent message costs one
//! record, not two. A reset writes a fresh file (`store.log.tmp`,
//! fsync, rename over `store.log`, fsync of the directory), so a crash during a reset
//! leaves either the old or the new store, never a mix. The log is never compacted other
//! than by a reset (sessions normally reset daily).
//!
//! # Recovery
//!
//! [`FileStore::open`] reads the file once, in 1 MiB windows with `pread` (the memory it
//! takes is a window and the index, whatever the log's length), and rebuilds:
//! * the index `MsgSeqNum -> (offset, length)` of every stored message (a later record for
//!   the same sequence number replaces the earlier one);
//! * the next sender sequence number: the last NextSender record, or the last stored
//!   message's sequence + 1 when that is larger (so a message whose sequence record was lost
//!   is never reused);
//! * the next target sequence number (last NextTarget record) and the creation time.
//!
//! Zeros from a record boundary to the end of the file are the unwritten rest of the
//! mapped window (above): the log ends there, and the file is truncated to it.
//! A damaged final record is the mark of a torn write: it is truncated away and reported
//! as a [`StoreWarning`]. "Final" means: a checksum mismatch on a record followed by
//! nothing but zeros (or by nothing); or a record the file ends inside of (or with an
//! impossible length) when the rest of the file, its trailing zeros left aside, is at
//! most 4 MiB long and holds no intact record. Any other damaged record is corruption in
//! the middle of the file: [`StoreError::Corrupt`] with the file and the offset, and
//! nothing is truncated.
//!
//! # A lost, emptied or truncated log
//!
//! The log alone cannot tell "a new session" from "a log someone deleted, emptied
//! (`: > store.log`) or truncated at a record boundary": all are valid logs, and each
//! would silently restart at lower sequence numbers, which the counterparty then sees
//! reused. So a second file, `store.seqnums`, records what the log held at some flush:
//! the log's creation time, its flushed length and the two sequence numbers, in one of
//! two 48-byte slots (generation number + CRC-32, written alternately, so that a torn
//! write of one slot leaves the other; the newest intact slot counts). It is written
//! after the log's write (and sync), so it never records more than the log holds, and a
//! torn log tail is always past it.
//!
//! It is a lower bound, not a mirror of every flush, so that it costs no system call
//! per loop turn. A slot is written on open and on reset; in every `flush()` that
//! `fdatasync`s (where one more small write is noise beside the disk round trip); in
//! [`FileStore::sync`]; in a `flush()` that brings the log [`SEQNUMS_EVERY`] bytes or
//! more past the last recorded length; and when the store is dropped (a clean stop).
//! The sequence numbers themselves never depend on it: they are recovered from the log,
//! which holds every record handed to the kernel, so a `kill -9` never sends them
//! backwards. What the lower bound gives up: a truncation of the log that removes only
//! records written after the last slot (less than [`SEQNUMS_EVERY`] bytes, and only
//! after a crash, since a clean stop records the full length) is not detected.
//!
//! On open: a missing or empty log while `store.seqnums` exists, a log shorter than its
//! recorded length, lower sequence numbers than recorded, damage inside the recorded
//! length, or a log created *before* the recorded one (an old copy put back) is
//! [`StoreError::Lost`]: the store refuses to open, naming both files' figures.
//! [`OnLostLog::StartOver`] (`tickwire fix --reset-lost-store`) starts over at 1/1
//! instead, with a warning. A log created *after* the recorded one is a reset whose
//! `store.seqnums` update a crash prevented: accepted. A log without `store.seqnums`
//! (first start, or a store written before this file existed) is accepted and the file
//! written. Deleting the whole session directory is an explicit fresh start.
//!
//! Cost: with [`SyncPolicy::Os`], one 48-byte `pwrite` per [`SEQNUMS_EVERY`] bytes of
//! log (a few hundred messages), so a loop turn's `flush()` is a copy; with a
//! sync, one per synced flush, beside the `fdatasync`. The slot is not synced by itself.
//! With [`SyncPolicy::Os`], a machine crash may keep the seqnums write and lose log
//! pages; the store then refuses to open instead of reusing the lost sequence numbers.
//!
//! # Reading for resends
//!
//! [`MessageStore::get_range`] looks the range up in the in-memory index (a vector sorted by
//! sequence number, binary search) and reads each message with `pread` at its offset
//! (`FileExt::read_exact_at`), verifying its checksum; records still in the unflushed
//! buffer are read from there. We chose `pread` over reading through a mapping (the
//! window maps only the log's end, and a read map of the whole log would have to be
//! remapped as it grows) and over an in-memory copy of every message (memory grows with
//! the day's traffic); resends are rare and the pages are almost always in the page
//! cache, where the window's copies put them.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tickwire_shm::Region;

/// Errors of a message store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An operating-system call on a store file failed.
    #[error("store file {path}: {op}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What we were doing.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The store file is damaged in a way that is not a torn final write.
    #[error("store file {path} corrupt at offset {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damaged record.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The log is missing, empty, shorter than, or older than what its sequence-number
    /// file (`store.seqnums`) records: records were lost, and starting from what is
    /// left would reuse sequence numbers. Refused unless the caller asked to start over
    /// ([`OnLostLog::StartOver`]).
    #[error("store file {path}: {reason}; refusing to open it, because sequence numbers would be reused (restore the file, or start the session over at 1/1 explicitly: `tickwire fix ... --reset-lost-store`)")]
    Lost {
        /// The store log.
        path: PathBuf,
        /// What was found, with the figures of both files.
        reason: String,
    },
    /// A message longer than a record can hold (4 GiB) was saved.
    #[error("message of {0} bytes is too large for the store")]
    TooLarge(usize),
    /// Another open store (another process: a second engine with the same
    /// `FileStorePath` and session) holds the directory's lock: nothing was read or
    /// written.
    #[error("store directory {0} is in use by another open store (another FIX engine with the same FileStorePath and session, or a path reaching the same directory through a link): stop the other engine, or give this one its own FileStorePath")]
    Locked(PathBuf),
}

/// A recoverable problem found while opening a [`FileStore`]: a torn final record, or
/// (with [`OnLostLog::StartOver`]) a lost log the store started over from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreWarning {
    /// The store file.
    pub path: PathBuf,
    /// Where the torn record started (the file was truncated to this length).
    pub truncated_at: u64,
    /// How many bytes were dropped.
    pub dropped_bytes: u64,
    /// Why the store started over at sequence 1/1 ([`OnLostLog::StartOver`]); `None`
    /// for a torn record.
    pub started_over: Option<String>,
}

impl std::fmt::Display for StoreWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.started_over {
            Some(why) => write!(
                f,
                "store file {}: {why}; started over at sequence 1/1 as asked",
                self.path.display()
            ),
            None => write!(
                f,
                "store file {}: torn final record at offset {} ({} bytes) truncated",
                self.path.display(),
                self.truncated_at,
                self.dropped_bytes
            ),
        }
    }
}

/// What [`FileStore::open_with`] does with a log that lost records (see
/// [`StoreError::Lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLostLog {
    /// Refuse to open ([`StoreError::Lost`]): the default.
    #[default]
    Refuse,
    /// Start over with an empty store at sequence 1/1 (and say so in the warning).
    StartOver,
}

/// Where a FIX session keeps its sequence numbers and outgoing messages.
pub trait MessageStore {
    /// The MsgSeqNum the next outgoing message gets.
    fn next_sender_seq(&self) -> u64;
    /// The MsgSeqNum expected on the next incoming message.
    fn next_target_seq(&self) -> u64;
    /// Set the next outgoing MsgSeqNum.
    fn set_next_sender_seq(&mut self, seq: u64) -> Result<(), StoreError>;
    /// Set the next expected incoming MsgSeqNum.
    fn set_next_target_seq(&mut self, seq: u64) -> Result<(), StoreError>;
    /// Next outgoing MsgSeqNum + 1.
    fn incr_next_sender_seq(&mut self) -> Result<(), StoreError>;
    /// Next expected incoming MsgSeqNum + 1.
    fn incr_next_target_seq(&mut self) -> Result<(), StoreError>;
    /// Persist an outgoing message under its sequence number (before it is sent).
    fn save(&mut self, seq: u64, msg: &[u8]) -> Result<(), StoreError>;
    /// Every stored message with begin <= seq <= end, in order (end = u64::MAX: to the
    /// last), until `f` breaks: no message after that one is read (a resend stops at
    /// its byte budget without loading the rest of its range).
    fn get_range(
        &self,
        begin: u64,
        end: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError>;
    /// Unix nanoseconds of the last reset (or of creation).
    fn creation_time(&self) -> u64;
    /// Back to sequence 1/1, messages dropped, creation time = now.
    fn reset(&mut self, now_unix_nanos: u64) -> Result<(), StoreError>;
    /// Make everything so far durable according to the sync policy (called by the driver
    /// once per loop turn, before writing the socket).
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Work the store may do off the message path: the driver calls it after a turn's
    /// socket writes, for each store it flushed. The file store prepares the next part
    /// of its mapped window there (module docs, "Writing"), so that flushes stay copies.
    /// Nothing depends on it: what it could not do, the next flush does (and reports).
    fn prepare(&mut self) {}
}

/// A store in process memory (QuickFIX's `MemoryStore`): nothing survives the process.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    next_sender: u64,
    next_target: u64,
    creation: u64,
    /// Stored messages sorted by sequence number.
    messages: Vec<(u64, Vec<u8>)>,
}

impl MemoryStore {
    /// An empty store at sequence 1/1 created at `now_unix_nanos`.
    pub fn new(now_unix_nanos: u64) -> MemoryStore {
        MemoryStore {
            next_sender: 1,
            next_target: 1,
            creation: now_unix_nanos,
            messages: Vec::new(),
        }
    }
}

impl MessageStore for MemoryStore {
    fn next_sender_seq(&self) -> u64 {
        self.next_sender
    }
    fn next_target_seq(&self) -> u64 {
        self.next_target
    }
    fn set_next_sender_seq(&mut self, seq: u64) -> Result<(), StoreError> {
        self.next_sender = seq;
        Ok(())
    }
    fn set_next_target_seq(&mut self, seq: u64) -> Result<(), StoreError> {
        self.next_target = seq;
        Ok(())
    }
    fn incr_next_sender_seq(&mut self) -> Result<(), StoreError> {
        self.next_sender = self.next_sender.saturating_add(1);
        Ok(())
    }
    fn incr_next_target_seq(&mut self) -> Result<(), StoreError> {
        self.next_target = self.next_target.saturating_add(1);
        Ok(())
    }
    fn save(&mut self, seq: u64, msg: &[u8]) -> Result<(), StoreError> {
        match self.messages.last() {
            Some(&(last, _)) if last >= seq => {
                match self.messages.binary_search_by_key(&seq, |(s, _)| *s) {
                    Ok(i) => {
                        let slot = &mut self.messages[i].1;
                        slot.clear();
                        slot.extend_from_slice(msg);
                    }
                    Err(i) => self.messages.insert(i, (seq, msg.to_vec())),
                }
            }
            _ => self.messages.push((seq, msg.to_vec())),
        }
        Ok(())
    }
    fn get_range(
        &self,
        begin: u64,
        end: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let start = self.messages.partition_point(|(s, _)| *s < begin);
        for (seq, msg) in &self.messages[start..] {
            if *seq > end || f(*seq, msg).is_break() {
                break;
            }
        }
        Ok(())
    }
    fn creation_time(&self) -> u64 {
        self.creation
    }
    fn reset(&mut self, now_unix_nanos: u64) -> Result<(), StoreError> {
        self.next_sender = 1;
        self.next_target = 1;
        self.creation = now_unix_nanos;
        self.messages.clear();
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// When a [`FileStore`] calls `fdatasync` (see the module docs for what each survives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// `fdatasync` in every `flush()` that wrote something: nothing sent is ever lost,
    /// even on power loss. Costs a disk round trip per loop turn.
    EveryMessage,
    /// `fdatasync` in the `flush()` that brings the number of message records written
    /// since the last sync to `messages` or more. [`FileStore::sync`] forces one (a driver
    /// can call it on idle or on a timer).
    Batched {
        /// Message records per sync (at least 1).
        messages: u32,
    },
    /// Never `fdatasync`; the kernel writes back when it likes. Survives a process crash,
    /// not a machine crash.
    Os,
}

const KIND_HEADER: u8 = 1;
const KIND_MESSAGE: u8 = 2;
const KIND_NEXT_SENDER: u8 = 3;
const KIND_NEXT_TARGET: u8 = 4;
const MAGIC: &[u8] = b"TWFS1";
/// len + crc.
const PREFIX: usize = 8;
/// kind + value.
const BODY_HEAD: usize = 9;
const FILE_NAME: &str = "store.log";
const TMP_NAME: &str = "store.log.tmp";
const SEQ_NAME: &str = "store.seqnums";
/// The lock file in a store's directory: an open store holds an exclusive `flock` on it
/// (released when the store is dropped or its process ends, `kill -9` included), so a
/// second engine cannot open, recover, truncate or write a store another one is using.
const LOCK_NAME: &str = "store.lock";
const SEQ_MAGIC: &[u8; 4] = b"TWSQ";
/// magic + generation + creation + log length + next sender + next target + crc.
const SEQ_SLOT: usize = 4 + 8 * 5 + 4;
/// Log growth (bytes) after which a `flush()` without a sync records the log's length
/// and sequence numbers in `store.seqnums` again (module docs, "A lost, emptied or
/// truncated log").
pub const SEQNUMS_EVERY: u64 = 64 * 1024;

/// Address space mapped at a time at the log's end for flushes to copy into (module
/// docs, "Writing"); a flush larger than this maps a window of its own size. Only what
/// the steps below allocate and fault in uses disk and memory.
pub const WINDOW: u64 = 256 << 20;
/// Bytes of the window [`MessageStore::prepare`] keeps written with zeros and faulted
/// in ahead of the log's end (module docs, "Writing"); after a crash, at most
/// `PREPARE_AHEAD + ALLOCATE_STEP` bytes of zeros follow the log.
pub const PREPARE_AHEAD: usize = 64 << 10;
/// Bytes written with zeros and faulted in by one [`MessageStore::prepare`] call (one
/// `pwrite`, one `madvise(MADV_POPULATE_WRITE)`). Small, so that no call holds the
/// engine long: the next message may arrive while it runs (64 KiB at a time cost
/// ~50 µs a call on the 2-vCPU guest and put those calls in the tick-to-trade p99;
/// 8 KiB ~8–13 µs; BENCHMARKS.md, issue 18). One call does more only when the log
/// grew by more than a step since the last.
pub const ALLOCATE_STEP: usize = 8 << 10;

/// What an allocation step writes.
static ZEROS: [u8; ALLOCATE_STEP] = [0; ALLOCATE_STEP];
/// Bytes of written window unmapped at a time behind the write position (one
/// `madvise(MADV_DONTNEED)`), so that moving the window has few pages to tear down.
pub const RELEASE_STEP: usize = 64 << 10;
/// Bytes before the log's end never released: two pages, so that widening a release to
/// whole pages never unmaps the page the next copy writes.
const RELEASE_SLACK: usize = 2 * 4096;

/// The mapped window at the log's end (module docs, "Writing").
#[derive(Debug)]
struct Tail {
    region: Region,
    /// File offset of the region's byte 0.
    start: u64,
    /// Bytes of the region, from byte 0, written with zeros (or records) and faulted in.
    allocated: usize,
    /// Bytes of the region, from byte 0, unmapped again (written, released).
    released: usize,
}

impl Tail {
    /// The region offset at or after `need` that is a multiple of [`ALLOCATE_STEP`] in
    /// the file (whole pages: a step that began or ended inside a page wrote and
    /// faulted in three pages instead of two), at most the region's end.
    fn step_end(&self, need: usize) -> usize {
        let step = ALLOCATE_STEP as u64;
        let at = (self.start + need as u64).div_ceil(step) * step;
        usize::try_from(at - self.start)
            .unwrap_or(usize::MAX)
            .min(self.region.len())
    }

    /// Backs bytes `allocated..to` of the region with file blocks by writing zeros there
    /// (a `pwrite` reserves the blocks or fails with the file system's error, where an
    /// `fallocate`d range would leave each page's first write to split an unwritten
    /// extent: ~0.4 ms per MiB measured on ext4), then faults them in.
    /// `at` is where the log ends in the region: nothing below it is ever overwritten
    /// (the log may have grown past `allocated` by `pwrite`s while mapping failed).
    fn grow(&mut self, file: &File, at: usize, to: usize) -> io::Result<()> {
        self.allocated = self.allocated.max(at);
        while self.allocated < to {
            let n = (to - self.allocated).min(ZEROS.len());
            file.write_all_at(&ZEROS[..n], self.start + self.allocated as u64)?;
            // Best effort: without it the pages fault in on first use.
            let _ = self.region.populate(self.allocated, n);
            self.allocated += n;
        }
        Ok(())
    }
}

/// The content of one `store.seqnums` slot: what the log held after a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SeqSnapshot {
    generation: u64,
    creation: u64,
    log_len: u64,
    next_sender: u64,
    next_target: u64,
}

impl SeqSnapshot {
    fn encode(&self) -> [u8; SEQ_SLOT] {
        let mut b = [0u8; SEQ_SLOT];
        b[..4].copy_from_slice(SEQ_MAGIC);
        let values = [
            self.generation,
            self.creation,
            self.log_len,
            self.next_sender,
            self.next_target,
        ];
        for (i, v) in values.iter().enumerate() {
            b[4 + 8 * i..12 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[..SEQ_SLOT - 4]);
        b[SEQ_SLOT - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<SeqSnapshot> {
        if b.len() < SEQ_SLOT || &b[..4] != SEQ_MAGIC {
            return None;
        }
        if crc32fast::hash(&b[..SEQ_SLOT - 4]) != u32_at(b, SEQ_SLOT - 4)? {
            return None;
        }
        Some(SeqSnapshot {
            generation: u64_at(b, 4)?,
            creation: u64_at(b, 12)?,
            log_len: u64_at(b, 20)?,
            next_sender: u64_at(b, 28)?,
            next_target: u64_at(b, 36)?,
        })
    }
}

/// The newest intact slot of a `store.seqnums` file (two slots, written alternately, so
/// that a torn write of one leaves the other). `Ok(None)`: no file, or an empty one.
fn read_seqnums(path: &Path) -> Result<Option<SeqSnapshot>, StoreError> {
    // Two slots of a few dozen bytes: more is not a seqnums file (a link to /dev/zero
    // was read until memory ran out: probe).
    let data = match tickwire_rt::files::read_limited(path, 64 << 10) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "read")(e)),
    };
    if data.is_empty() {
        return Ok(None);
    }
    let a = SeqSnapshot::decode(&data);
    let b = data.get(SEQ_SLOT..).and_then(SeqSnapshot::decode);
    match (a, b) {
        (Some(a), Some(b)) => Ok(Some(if a.generation >= b.generation { a } else { b })),
        (Some(x), None) | (None, Some(x)) => Ok(Some(x)),
        (None, None) => Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            reason: "no intact slot in the sequence-number file",
        }),
    }
}

/// One stored message: where its payload is in the logical file (file + pending buffer).
#[derive(Debug, Clone, Copy)]
struct Entry {
    seq: u64,
    /// Offset of the record start (its length prefix).
    record: u64,
}

/// A durable store: one append-only log per session directory. See the module docs for
/// the layout, the latency contract and recovery.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    policy: SyncPolicy,
    /// Bytes of the file already handed to the kernel: the log's length.
    file_len: u64,
    /// The file's length: `file_len`, or more while a window is allocated past it.
    allocated: u64,
    /// The mapped window flushes copy into; `None` before the first flush and after
    /// a reset.
    tail: Option<Tail>,
    /// Whether flushes copy into a mapped window (`false` after the file system refused
    /// a shared mapping, or [`FileStore::set_mapped_writes`]: then they `pwrite`).
    map_writes: bool,
    /// Bytes per window ([`WINDOW`]; smaller in tests).
    window: u64,
    /// Records not yet written (they follow `file_len` in the logical file).
    pending: Vec<u8>,
    /// Message records written since the last fdatasync.
    unsynced_messages: u32,
    /// Message records in `pending`.
    pending_messages: u32,
    /// Message index sorted by seq.
    index: Vec<Entry>,
    /// A fresh CRC-32 hasher, cloned for each record (see `encode_record`).
    crc: crc32fast::Hasher,
    /// The value of the log's last NextSender record (1 without one): with the highest
    /// stored MsgSeqNum, what recovery makes the next sender sequence number.
    sender_record: u64,
    /// The value of the log's last NextTarget record (1 without one). The record for a
    /// new value is appended by the next flush: one per flush, however many messages
    /// the turn received.
    target_record: u64,
    next_sender: u64,
    next_target: u64,
    creation: u64,
    /// `store.seqnums`: the log's length and sequence numbers after every flush, the
    /// redundancy that detects a lost, emptied or truncated log (module docs).
    seq_file: File,
    seq_path: PathBuf,
    /// Generation of the last slot written (the next goes to slot `(gen + 1) % 2`).
    seq_generation: u64,
    /// The log length the last slot written records.
    seq_recorded_len: u64,
    /// `store.lock`, locked (`flock`) while the store is open ([`LOCK_NAME`]); `None`
    /// only after a test's simulated crash.
    lock: Option<File>,
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Appends one record to `out`. `crc` is a fresh hasher to clone: `Hasher::new` detects
/// the CPU's features on every call, a clone copies them. The body is written first and
/// hashed in one pass where it lies.
fn encode_record(
    out: &mut Vec<u8>,
    crc: &crc32fast::Hasher,
    kind: u8,
    value: u64,
    payload: &[u8],
) -> Result<(), StoreError> {
    let len = u32::try_from(BODY_HEAD + payload.len())
        .map_err(|_| StoreError::TooLarge(payload.len()))?;
    let start = out.len();
    let mut head = [0u8; PREFIX + BODY_HEAD];
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[PREFIX] = kind;
    head[PREFIX + 1..].copy_from_slice(&value.to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let mut h = crc.clone();
    h.update(&out[start + PREFIX..]);
    out[start + 4..start + PREFIX].copy_from_slice(&h.finalize().to_le_bytes());
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

/// Outcome of decoding the record at some offset.
enum Decoded<'a> {
    Ok {
        kind: u8,
        value: u64,
        payload: &'a [u8],
    },
    /// The record is damaged.
    Bad(Damage),
}

/// How a record is damaged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// The file ends inside the length/checksum prefix.
    ShortPrefix,
    /// The length field is below the minimum body size.
    BadLength,
    /// The file ends inside the body.
    ShortBody,
    /// The body does not match its CRC-32.
    Checksum,
}

impl Damage {
    fn reason(self) -> &'static str {
        match self {
            Damage::ShortPrefix => "incomplete record header",
            Damage::BadLength => "record length too small",
            Damage::ShortBody => "record extends past end of file",
            Damage::Checksum => "record checksum mismatch",
        }
    }
}

fn decode_at(buf: &[u8], at: usize) -> Decoded<'_> {
    let (Some(len), Some(crc)) = (u32_at(buf, at), u32_at(buf, at + 4)) else {
        return Decoded::Bad(Damage::ShortPrefix);
    };
    let len = len as usize;
    if len < BODY_HEAD {
        return Decoded::Bad(Damage::BadLength);
    }
    let Some(body) = buf.get(at + PREFIX..at + PREFIX + len) else {
        return Decoded::Bad(Damage::ShortBody);
    };
    if crc32fast::hash(body) != crc {
        return Decoded::Bad(Damage::Checksum);
    }
    let value = u64_at(body, 1).unwrap_or(0);
    Decoded::Ok {
        kind: body[0],
        value,
        payload: &body[BODY_HEAD..],
    }
}

/// Longest tail after a damaged record that may still be a torn final write (one flush).
const TORN_SCAN_LIMIT: usize = 4 << 20;

/// Whether an intact non-header record starts anywhere after offset `at` and before
/// `end` (a record that starts in zeros cannot be intact: its length would be 0).
fn intact_record_after(data: &[u8], at: usize, end: usize) -> bool {
    (at + 1..end).any(|off| {
        matches!(
            decode_at(data, off),
            Decoded::Ok {
                kind: KIND_MESSAGE | KIND_NEXT_SENDER | KIND_NEXT_TARGET,
                ..
            }
        )
    })
}

/// Bytes recovery reads at once. It reads the log in windows of this size (and a
/// damaged tail, at most [`TORN_SCAN_LIMIT`] and the zeros after it, in one piece), so
/// opening a store takes memory bounded by that, not by the log's length: it read the
/// whole log into memory, and a session's day of messages (gigabytes for a busy one)
/// took as much memory again to open.
const RECOVERY_CHUNK: usize = 1 << 20;

/// A record as recovery reads it: its checksum checked, its payload not kept.
enum Record {
    Ok {
        kind: u8,
        value: u64,
        /// Where the next record starts.
        next: u64,
    },
    /// The record is damaged.
    Bad(Damage),
}

/// The log at recovery, read with `pread` through one window of [`RECOVERY_CHUNK`]
/// bytes.
struct LogReader<'a> {
    file: &'a File,
    path: &'a Path,
    /// The file's length (fixed while recovery reads).
    len: u64,
    /// The window: the file's bytes from `start` on.
    buf: Vec<u8>,
    start: u64,
}

impl<'a> LogReader<'a> {
    fn new(file: &'a File, path: &'a Path, len: u64) -> LogReader<'a> {
        LogReader {
            file,
            path,
            len,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The `n` (at most [`RECOVERY_CHUNK`]) bytes at `at`, or `None` when the file
    /// ends before their end.
    fn get(&mut self, at: u64, n: usize) -> Result<Option<&[u8]>, StoreError> {
        debug_assert!(n <= RECOVERY_CHUNK);
        let end = match at.checked_add(n as u64) {
            Some(end) if end <= self.len => end,
            _ => return Ok(None),
        };
        if at < self.start || end > self.start + self.buf.len() as u64 {
            let take = (self.len - at).min(RECOVERY_CHUNK as u64) as usize;
            self.buf.resize(take, 0);
            self.start = at;
            #[cfg(test)]
            tests::RECOVERY_READS.with(|r| r.set(r.get() + 1));
            if let Err(e) = self.file.read_exact_at(&mut self.buf, at) {
                self.buf.clear();
                return Err(io_err(self.path, "read")(e));
            }
        }
        let off = (at - self.start) as usize;
        Ok(Some(&self.buf[off..off + n]))
    }

    fn u32_at(&mut self, at: u64) -> Result<Option<u32>, StoreError> {
        Ok(self.get(at, 4)?.and_then(|b| u32_at(b, 0)))
    }

    /// The record at `at`, its body's checksum computed window by window (a record,
    /// or a damaged length field, may be larger than a window).
    fn decode(&mut self, at: u64) -> Result<Record, StoreError> {
        let (Some(len), Some(crc)) = (self.u32_at(at)?, self.u32_at(at + 4)?) else {
            return Ok(Record::Bad(Damage::ShortPrefix));
        };
        let len = len as usize;
        if len < BODY_HEAD {
            return Ok(Record::Bad(Damage::BadLength));
        }
        let body = at + PREFIX as u64;
        let next = body + len as u64;
        if next > self.len {
            return Ok(Record::Bad(Damage::ShortBody));
        }
        let (kind, value) = match self.get(body, BODY_HEAD)? {
            Some(head) => (head[0], u64_at(head, 1).unwrap_or(0)),
            None => return Ok(Record::Bad(Damage::ShortBody)),
        };
        let mut hash = crc32fast::Hasher::new();
        let mut pos = body;
        while pos < next {
            let n = (next - pos).min(RECOVERY_CHUNK as u64) as usize;
            match self.get(pos, n)? {
                Some(bytes) => hash.update(bytes),
                None => return Ok(Record::Bad(Damage::ShortBody)),
            }
            pos += n as u64;
        }
        if hash.finalize() != crc {
            return Ok(Record::Bad(Damage::Checksum));
        }
        Ok(Record::Ok { kind, value, next })
    }

    /// Whether the payload of the record at `at` (ending at `next`) is `want`.
    fn payload_is(&mut self, at: u64, next: u64, want: &[u8]) -> Result<bool, StoreError> {
        let payload = at + (PREFIX + BODY_HEAD) as u64;
        if next - payload != want.len() as u64 {
            return Ok(false);
        }
        Ok(self.get(payload, want.len())? == Some(want))
    }

    /// The bytes from `at` to the end of the window, read anew from `at` when the window
    /// does not hold it (empty at the end of the file).
    fn rest(&mut self, at: u64) -> Result<&[u8], StoreError> {
        let end = self.start + self.buf.len() as u64;
        if at < self.start || at >= end {
            let n = self.len.saturating_sub(at).min(RECOVERY_CHUNK as u64) as usize;
            if n == 0 {
                return Ok(&[]);
            }
            return Ok(self.get(at, n)?.unwrap_or_default());
        }
        Ok(&self.buf[(at - self.start) as usize..])
    }

    /// Whether the file holds only zeros from `at` to its end (the unwritten rest of
    /// a mapped window). Stops at the first other byte, looking first at what the
    /// window already holds: a record whose length starts with a zero byte (one in
    /// 256) must not cost a window's read.
    fn zeros_from(&mut self, at: u64) -> Result<bool, StoreError> {
        let mut pos = at;
        while pos < self.len {
            let bytes = self.rest(pos)?;
            if bytes.is_empty() {
                break;
            }
            if bytes.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            pos += bytes.len() as u64;
        }
        Ok(true)
    }

    /// The file's length without the zeros at its end.
    fn written(&mut self) -> Result<u64, StoreError> {
        let mut end = self.len;
        while end > 0 {
            let n = end.min(RECOVERY_CHUNK as u64) as usize;
            let from = end - n as u64;
            let Some(bytes) = self.get(from, n)? else {
                break;
            };
            match bytes.iter().rposition(|&b| b != 0) {
                Some(i) => return Ok(from + i as u64 + 1),
                None => end = from,
            }
        }
        Ok(0)
    }

    /// The file's bytes from `from` to `to` (at most a few windows: a damaged tail).
    fn read_range(&self, from: u64, to: u64) -> Result<Vec<u8>, StoreError> {
        let mut out = vec![0u8; to.saturating_sub(from) as usize];
        self.file
            .read_exact_at(&mut out, from)
            .map_err(io_err(self.path, "read"))?;
        Ok(out)
    }
}

impl FileStore {
    /// The directory name of a session's store: `BeginString-Sender-Target[-Qualifier]`.
    /// Path separators and NUL in the parts are replaced by `_`.
    pub fn session_dir_name(
        begin_string: &str,
        sender: &str,
        target: &str,
        qualifier: Option<&str>,
    ) -> String {
        let mut s = format!("{begin_string}-{sender}-{target}");
        if let Some(q) = qualifier.filter(|q| !q.is_empty()) {
            s.push('-');
            s.push_str(q);
        }
        s.chars()
            .map(|c| {
                if c == '/' || c == '\\' || c == '\0' {
                    '_'
                } else {
                    c
                }
            })
            .collect()
    }

    /// Open (or create) the store of one session under `file_store_path` (QuickFIX's
    /// `FileStorePath`), in the directory named by [`FileStore::session_dir_name`]; see
    /// [`FileStore::open_with`] for `on_lost`.
    #[allow(clippy::too_many_arguments)] // main's clippy failed here; the "fix" owner may fold them
    pub fn open_session(
        file_store_path: &Path,
        begin_string: &str,
        sender: &str,
        target: &str,
        qualifier: Option<&str>,
        policy: SyncPolicy,
        now_unix_nanos: u64,
        on_lost: OnLostLog,
    ) -> Result<(FileStore, Option<StoreWarning>), StoreError> {
        let dir = file_store_path.join(Self::session_dir_name(
            begin_string,
            sender,
            target,
            qualifier,
        ));
        Self::open_with(&dir, policy, now_unix_nanos, on_lost)
    }

    /// Open the store in directory `dir`, creating the directory and an empty store
    /// (sequence 1/1, creation time `now_unix_nanos`) if there is none. Returns a warning
    /// when a torn final record was truncated; corruption elsewhere is an error.
    pub fn open(
        dir: &Path,
        policy: SyncPolicy,
        now_unix_nanos: u64,
    ) -> Result<(FileStore, Option<StoreWarning>), StoreError> {
        Self::open_with(dir, policy, now_unix_nanos, OnLostLog::Refuse)
    }

    /// [`FileStore::open`], choosing what happens when the log lost records (missing,
    /// emptied, truncated or replaced by an older one while `store.seqnums` remains):
    /// [`StoreError::Lost`], or an empty store at 1/1 with a warning.
    pub fn open_with(
        dir: &Path,
        policy: SyncPolicy,
        now_unix_nanos: u64,
        on_lost: OnLostLog,
    ) -> Result<(FileStore, Option<StoreWarning>), StoreError> {
        if dir.exists() && !dir.is_dir() {
            return Err(io_err(dir, "open directory")(io::Error::new(
                io::ErrorKind::NotADirectory,
                "it exists and is not a directory",
            )));
        }
        fs::create_dir_all(dir).map_err(io_err(dir, "create directory"))?;
        // Before anything is read: recovery may truncate a torn record, and a fresh
        // log replaces the file.
        let mut lock = Some(lock_dir(dir)?);
        match Self::open_checked(dir, policy, now_unix_nanos, &mut lock) {
            Err(StoreError::Lost { path, reason }) if on_lost == OnLostLog::StartOver => {
                write_fresh(dir, now_unix_nanos)?;
                let _ = fs::remove_file(dir.join(SEQ_NAME));
                let (store, _) = Self::open_checked(dir, policy, now_unix_nanos, &mut lock)?;
                let w = StoreWarning {
                    path,
                    truncated_at: 0,
                    dropped_bytes: 0,
                    started_over: Some(reason),
                };
                Ok((store, Some(w)))
            }
            other => other,
        }
    }

    /// Opens the store of `dir`, whose lock the caller holds in `lock` (taken into the
    /// store when it opens).
    fn open_checked(
        dir: &Path,
        policy: SyncPolicy,
        now_unix_nanos: u64,
        lock: &mut Option<File>,
    ) -> Result<(FileStore, Option<StoreWarning>), StoreError> {
        let path = dir.join(FILE_NAME);
        let seq_path = dir.join(SEQ_NAME);
        let log_len = match fs::metadata(&path) {
            Ok(m) => Some(m.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&path, "stat")(e)),
        };
        let expected = read_seqnums(&seq_path)?;
        match (log_len, expected) {
            (None | Some(0), None) => write_fresh(dir, now_unix_nanos)?,
            (None | Some(0), Some(e)) => {
                let what = if log_len.is_none() {
                    "missing"
                } else {
                    "empty"
                };
                return Err(StoreError::Lost {
                    path,
                    reason: format!(
                        "the log is {what}, but {SEQ_NAME} records {} bytes with next \
                         sender/target sequence {}/{}",
                        e.log_len, e.next_sender, e.next_target
                    ),
                });
            }
            (Some(_), _) => {}
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path, "open"))?;
        let seq_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&seq_path)
            .map_err(io_err(&seq_path, "open"))?;
        let mut store = FileStore {
            dir: dir.to_path_buf(),
            path: path.clone(),
            file,
            policy,
            file_len: 0,
            allocated: 0,
            tail: None,
            map_writes: true,
            window: WINDOW,
            pending: Vec::with_capacity(64 * 1024),
            unsynced_messages: 0,
            pending_messages: 0,
            index: Vec::new(),
            crc: crc32fast::Hasher::new(),
            sender_record: 1,
            target_record: 1,
            next_sender: 1,
            next_target: 1,
            creation: now_unix_nanos,
            seq_file,
            seq_path,
            seq_generation: expected.map_or(0, |e| e.generation),
            seq_recorded_len: 0,
            lock: None,
        };
        let warning = store.recover(expected)?;
        store.lock = lock.take();
        // From here on the sequence-number file describes this log.
        store.write_seqnums()?;
        Ok((store, warning))
    }

    /// Writes the next `store.seqnums` slot: the flushed log length and the sequence
    /// numbers. One small `pwrite`, after the log's own write (and sync), so that the
    /// file never records more than the log holds. When: see the module docs.
    fn write_seqnums(&mut self) -> Result<(), StoreError> {
        let generation = self.seq_generation.wrapping_add(1);
        let snap = SeqSnapshot {
            generation,
            creation: self.creation,
            log_len: self.file_len,
            next_sender: self.next_sender,
            next_target: self.next_target,
        };
        let at = (generation % 2) * SEQ_SLOT as u64;
        self.seq_file
            .write_all_at(&snap.encode(), at)
            .map_err(io_err(&self.seq_path, "write"))?;
        self.seq_generation = generation;
        self.seq_recorded_len = self.file_len;
        Ok(())
    }

    /// Rebuilds the index and the sequence numbers from the log, checked against
    /// `expected` (the sequence-number file), see the module docs. The log is read in
    /// windows ([`LogReader`]), never whole.
    fn recover(
        &mut self,
        expected: Option<SeqSnapshot>,
    ) -> Result<Option<StoreWarning>, StoreError> {
        let lost_path = self.path.clone();
        let lost = |reason: String| StoreError::Lost {
            path: lost_path.clone(),
            reason,
        };
        let path = self.path.clone();
        let corrupt = |offset: u64, reason| StoreError::Corrupt {
            path: path.clone(),
            offset,
            reason,
        };
        let file_len = self
            .file
            .metadata()
            .map_err(io_err(&self.path, "stat"))?
            .len();
        let mut log = LogReader::new(&self.file, &path, file_len);
        match log.decode(0)? {
            Record::Ok {
                kind: KIND_HEADER,
                value,
                next,
            } if log.payload_is(0, next, MAGIC)? => self.creation = value,
            Record::Ok { .. } => return Err(corrupt(0, "missing store header")),
            Record::Bad(d) => return Err(corrupt(0, d.reason())),
        }
        // A log created after the sequence-number file's is a reset whose seqnums
        // update did not happen (crash in between): the new log wins. One created
        // before it is an older log put back: records are missing.
        let expected = match expected {
            Some(e) if e.creation == self.creation => Some(e),
            Some(e) if e.creation < self.creation => None,
            Some(e) => {
                return Err(lost(format!(
                    "the log was created at {} ns, before the one {SEQ_NAME} describes \
                     (created at {} ns, {} bytes, next sender/target sequence {}/{})",
                    self.creation, e.creation, e.log_len, e.next_sender, e.next_target
                )))
            }
            None => None,
        };
        let min_len = expected.map_or(0, |e| e.log_len);
        let mut at = 0u64;
        let mut sender_rec = 1u64;
        let mut last_msg: Option<u64> = None;
        let mut warning = None;
        while at < file_len {
            if log.zeros_from(at)? {
                // The unwritten rest of the mapped window: the log ends here.
                break;
            }
            match log.decode(at)? {
                Record::Ok { kind, value, next } => {
                    match kind {
                        KIND_HEADER if at == 0 => {}
                        KIND_MESSAGE => {
                            // In file order; sorted once below (inserting each in place
                            // was quadratic for a log whose numbers go down: 400,000
                            // records took 16 s to open, hostile-input probe).
                            self.index.push(Entry {
                                seq: value,
                                record: at,
                            });
                            last_msg = Some(last_msg.map_or(value, |m| m.max(value)));
                        }
                        KIND_NEXT_SENDER => sender_rec = value,
                        KIND_NEXT_TARGET => self.next_target = value,
                        _ => return Err(corrupt(at, "unknown record kind")),
                    }
                    at = next;
                }
                Record::Bad(damage) => {
                    // The file without the zeros of the window's unwritten rest.
                    let written = log.written()?;
                    let torn = match damage {
                        // Torn only if this record is the last thing in the file.
                        Damage::Checksum => {
                            let len = log.u32_at(at)?.unwrap_or(0);
                            at + (PREFIX as u64) + u64::from(len) >= written
                        }
                        // The file ends inside the record, or its length is damaged: a
                        // torn write only if no intact record follows (a damaged length
                        // field in the middle must not silently drop the records after it).
                        Damage::ShortPrefix | Damage::ShortBody | Damage::BadLength => {
                            written.saturating_sub(at) <= TORN_SCAN_LIMIT as u64 && {
                                // The tail from the damage on (a few MiB at most, and
                                // the zeros after it up to as much again).
                                let end = file_len.min(written + TORN_SCAN_LIMIT as u64);
                                let tail = log.read_range(at, end)?;
                                let written_in_tail = (written - at) as usize;
                                !intact_record_after(&tail, 0, written_in_tail)
                            }
                        }
                    };
                    if !torn {
                        return Err(corrupt(at, damage.reason()));
                    }
                    // A torn write can only be past what the last completed flush wrote.
                    if at < min_len {
                        return Err(lost(format!(
                            "damaged record at offset {at} ({}), inside the {min_len} bytes \
                             {SEQ_NAME} records as written",
                            damage.reason()
                        )));
                    }
                    let w = StoreWarning {
                        path: self.path.clone(),
                        truncated_at: at,
                        dropped_bytes: file_len - at,
                        started_over: None,
                    };
                    self.file
                        .set_len(at)
                        .map_err(io_err(&self.path, "truncate torn record"))?;
                    self.file
                        .sync_all()
                        .map_err(io_err(&self.path, "sync after truncate"))?;
                    warning = Some(w);
                    break;
                }
            }
        }
        // By number; of records with one number the last written wins (a resend stored
        // again), as `index_insert` keeps it. The sort is stable: file order within one.
        self.index.sort_by_key(|e| e.seq);
        let mut kept = 0;
        for i in 0..self.index.len() {
            if kept > 0 && self.index[kept - 1].seq == self.index[i].seq {
                self.index[kept - 1] = self.index[i];
            } else {
                self.index[kept] = self.index[i];
                kept += 1;
            }
        }
        self.index.truncate(kept);
        if warning.is_none() && at < file_len {
            // Drop the zeros past the log (a window a crash left allocated).
            self.file
                .set_len(at)
                .map_err(io_err(&self.path, "truncate past the log"))?;
        }
        self.file_len = at;
        self.allocated = self.file_len;
        self.sender_record = sender_rec;
        self.target_record = self.next_target;
        self.next_sender = match last_msg {
            Some(m) => sender_rec.max(m.saturating_add(1)),
            None => sender_rec,
        };
        if let Some(e) = expected {
            if self.file_len < e.log_len
                || self.next_sender < e.next_sender
                || self.next_target < e.next_target
            {
                return Err(lost(format!(
                    "the log holds {} bytes with next sender/target sequence {}/{}, but \
                     {SEQ_NAME} records {} bytes with {}/{} (truncated)",
                    self.file_len,
                    self.next_sender,
                    self.next_target,
                    e.log_len,
                    e.next_sender,
                    e.next_target
                )));
            }
        }
        Ok(warning)
    }

    fn index_insert(&mut self, seq: u64, record: u64) {
        let e = Entry { seq, record };
        match self.index.last() {
            Some(last) if last.seq >= seq => {
                match self.index.binary_search_by_key(&seq, |e| e.seq) {
                    Ok(i) => self.index[i] = e,
                    Err(i) => self.index.insert(i, e),
                }
            }
            _ => self.index.push(e),
        }
    }

    /// The next sender sequence number recovery would find in the log as it stands
    /// (flushed and pending records).
    fn recovered_next_sender(&self) -> u64 {
        match self.index.last() {
            Some(e) => self.sender_record.max(e.seq.saturating_add(1)),
            None => self.sender_record,
        }
    }

    fn append(&mut self, kind: u8, value: u64, payload: &[u8]) -> Result<u64, StoreError> {
        let at = self.file_len + self.pending.len() as u64;
        encode_record(&mut self.pending, &self.crc, kind, value, payload)?;
        Ok(at)
    }

    /// Force an `fdatasync` of everything written so far (after writing what is pending),
    /// whatever the policy. For a driver's idle or timer with [`SyncPolicy::Batched`].
    pub fn sync(&mut self) -> Result<(), StoreError> {
        self.write_pending()?;
        self.file
            .sync_data()
            .map_err(io_err(&self.path, "fdatasync"))?;
        self.unsynced_messages = 0;
        if self.seq_recorded_len != self.file_len {
            self.write_seqnums()?;
        }
        Ok(())
    }

    /// The session directory of this store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sync policy.
    pub fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// One `pwrite` of the pending buffer at the end of the file. On failure nothing is
    /// lost from the buffer and a retry writes the same bytes at the same offset.
    fn write_pending(&mut self) -> Result<bool, StoreError> {
        if self.next_target != self.target_record {
            self.append(KIND_NEXT_TARGET, self.next_target, &[])?;
            self.target_record = self.next_target;
        }
        if self.pending.is_empty() {
            return Ok(false);
        }
        if !self.copy_to_tail() {
            self.file
                .write_all_at(&self.pending, self.file_len)
                .map_err(io_err(&self.path, "write"))?;
            self.allocated = self
                .allocated
                .max(self.file_len + self.pending.len() as u64);
        }
        self.file_len += self.pending.len() as u64;
        self.pending.clear();
        self.unsynced_messages = self.unsynced_messages.saturating_add(self.pending_messages);
        self.pending_messages = 0;
        Ok(true)
    }

    /// Copies the pending records into the mapped window at the log's end, mapping a
    /// new window first when they do not fit, and preparing the pages they need when
    /// [`MessageStore::prepare`] has not (module docs, "Writing"). `false`: writes are
    /// not mapped, or the file system refused; the caller `pwrite`s.
    fn copy_to_tail(&mut self) -> bool {
        if !self.map_writes {
            return false;
        }
        let end = self.file_len + self.pending.len() as u64;
        let fits = self
            .tail
            .as_ref()
            .is_some_and(|t| end <= t.start + t.region.len() as u64);
        if !fits && !self.map_tail(end) {
            return false;
        }
        let Some(t) = self.tail.as_mut() else {
            return false;
        };
        // In bounds: `file_len >= start` (the window starts at a past `file_len`) and
        // `end` fits in the region (checked or mapped above).
        let at = (self.file_len - t.start) as usize;
        let need = at + self.pending.len();
        if need > t.allocated {
            let to = t.step_end(need);
            let grown = t.grow(&self.file, at, to);
            self.allocated = self.allocated.max(t.start + t.allocated as u64);
            if grown.is_err() {
                self.tail = None;
                return false;
            }
        }
        t.region.copy_in(at, &self.pending);
        true
    }

    /// [`MessageStore::prepare`]: keeps [`PREPARE_AHEAD`] bytes of the window ahead of
    /// the log's end written with zeros and faulted in, one [`ALLOCATE_STEP`] per call
    /// while the log grows by less than that between calls,
    /// maps the next window when this one is nearly used up, and unmaps what is written
    /// behind, a [`RELEASE_STEP`] at a time in a call that allocated nothing.
    fn prepare_tail(&mut self) {
        if !self.map_writes {
            return;
        }
        let end = self.file_len + self.pending.len() as u64;
        let room = self
            .tail
            .as_ref()
            .map_or(0, |t| (t.start + t.region.len() as u64).saturating_sub(end));
        if room < (PREPARE_AHEAD + ALLOCATE_STEP) as u64 && !self.map_tail(end) {
            return;
        }
        let Some(t) = self.tail.as_mut() else {
            return;
        };
        // Where the log ends in the file: records still pending are not in it, and
        // the zeros must cover the bytes their copy will write.
        let at = (self.file_len - t.start) as usize;
        let want = (end - t.start) as usize;
        // One step per call while the turns between calls write less than a step (the
        // engine calls this once per turn: a turn's records rarely fill a step), more
        // when they wrote more, so that at least `PREPARE_AHEAD - ALLOCATE_STEP` stays
        // prepared ahead (records still pending included) and a busy engine's flushes
        // do not prepare on the message path.
        let grew = t.allocated < want + PREPARE_AHEAD && t.allocated < t.region.len();
        if grew {
            let to = t.step_end((t.allocated + 1).max(want + PREPARE_AHEAD - ALLOCATE_STEP));
            // Whatever `grow` did (it may fail part way): the file is that long.
            let _ = t.grow(&self.file, at, to);
            self.allocated = self.allocated.max(t.start + t.allocated as u64);
        }
        // Never the page being written (the release widens to whole pages). One
        // `RELEASE_STEP` in a call that allocated nothing; when turns write so much
        // that every call allocates, all but one step as soon as four are waiting (the
        // work is then proportional to what the turns wrote), so that the window never
        // stays faulted in and moving it never tears down much.
        let done = at.saturating_sub(RELEASE_SLACK);
        let waiting = done.saturating_sub(t.released);
        let n = if waiting >= 4 * RELEASE_STEP {
            waiting - RELEASE_STEP
        } else if waiting >= RELEASE_STEP && !grew {
            RELEASE_STEP
        } else {
            0
        };
        if n > 0 {
            // Best effort: what is not released is unmapped with the window.
            let _ = t.region.release(t.released, n);
            t.released += n;
        }
    }

    /// Maps a new window from the log's end: `window` bytes of address space, or up to
    /// `end` if that is more (nothing is allocated or faulted in yet; `copy_to_tail`
    /// does that a step at a time). A file system without shared file mappings turns
    /// mapping off for good; any other failure `pwrite`s this flush.
    fn map_tail(&mut self, end: u64) -> bool {
        self.tail = None;
        let start = self.file_len;
        let Ok(len) = usize::try_from((end - start).max(self.window)) else {
            return false;
        };
        match Region::map_file_range(&self.file, start, len) {
            Ok(region) => {
                // Blocks a previous window allocated past the log are still there.
                let allocated = usize::try_from(self.allocated.saturating_sub(start))
                    .unwrap_or(usize::MAX)
                    .min(len);
                self.tail = Some(Tail {
                    region,
                    start,
                    allocated,
                    released: 0,
                });
                true
            }
            Err(e) => {
                if e.raw_os_error() == Some(rustix::io::Errno::NODEV.raw_os_error()) {
                    self.map_writes = false;
                }
                false
            }
        }
    }

    /// Ends the store as `kill -9` of its process would, for crash tests in one
    /// process: nothing of the drop runs (no `store.seqnums` slot, no truncation of the
    /// prepared window; the mapping and files stay open until the process ends), and
    /// the directory's lock is released so that the test can open the store again.
    #[doc(hidden)]
    pub fn end_as_if_killed(mut self) {
        drop(self.lock.take());
        std::mem::forget(self);
    }

    /// Whether flushes copy into a mapped window (`false`: they `pwrite`, module docs
    /// "Writing").
    pub fn writes_mapped(&self) -> bool {
        self.map_writes
    }

    /// Turns mapped writes off (one `pwrite` per flush from the next flush on) or back
    /// on (a fresh window at the log's end). For comparisons and file systems where a
    /// shared mapping is unwelcome; mapping is on by default.
    pub fn set_mapped_writes(&mut self, on: bool) {
        self.tail = None;
        self.map_writes = on;
    }

    /// The log's length in bytes: what recovery would read (the file is longer while
    /// a mapped window is allocated past it).
    pub fn log_len(&self) -> u64 {
        self.file_len
    }

    /// Read the record starting at logical offset `at` and hand its payload to `f`.
    fn with_record(
        &self,
        at: u64,
        scratch: &mut Vec<u8>,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, StoreError> {
        let corrupt = |reason| StoreError::Corrupt {
            path: self.path.clone(),
            offset: at,
            reason,
        };
        let decoded = if at >= self.file_len {
            let rel = usize::try_from(at - self.file_len).map_err(|_| corrupt("bad offset"))?;
            decode_at(&self.pending, rel)
        } else {
            let mut prefix = [0u8; PREFIX];
            self.file
                .read_exact_at(&mut prefix, at)
                .map_err(io_err(&self.path, "read"))?;
            let len = u32_at(&prefix, 0).unwrap_or(0) as usize;
            scratch.clear();
            scratch.resize(PREFIX + len, 0);
            self.file
                .read_exact_at(scratch, at)
                .map_err(io_err(&self.path, "read"))?;
            decode_at(scratch, 0)
        };
        match decoded {
            Decoded::Ok {
                kind: KIND_MESSAGE,
                value,
                payload,
                ..
            } => Ok(f(value, payload)),
            Decoded::Ok { .. } => Err(corrupt("index points at a non-message record")),
            Decoded::Bad(d) => Err(corrupt(d.reason())),
        }
    }
}

/// Write a new store file with only a header, atomically replacing any existing one.
/// Takes the exclusive lock of the store directory `dir` ([`LOCK_NAME`]) without
/// waiting: [`StoreError::Locked`] when another open store holds it.
fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK_NAME);
    // A regular file only: a FIFO here hung the start (hostile-input probe).
    let mut o = OpenOptions::new();
    o.create(true).truncate(false).write(true);
    let f = tickwire_rt::files::open_regular(&o, &path).map_err(io_err(&path, "open"))?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(f),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(StoreError::Locked(dir.to_path_buf())),
        // A file system without locks (NFS mounted `nolock`, some FUSE mounts): the
        // store opens as it did before the lock existed, unprotected.
        Err(rustix::io::Errno::NOLCK | rustix::io::Errno::OPNOTSUPP) => Ok(f),
        Err(e) => Err(io_err(&path, "lock")(e.into())),
    }
}

fn write_fresh(dir: &Path, creation: u64) -> Result<(), StoreError> {
    let tmp = dir.join(TMP_NAME);
    let path = dir.join(FILE_NAME);
    let mut buf = Vec::with_capacity(32);
    encode_record(
        &mut buf,
        &crc32fast::Hasher::new(),
        KIND_HEADER,
        creation,
        MAGIC,
    )?;
    {
        // A regular file only (a FIFO here hung the start; a symlink to one too).
        use std::io::Write;
        let mut o = OpenOptions::new();
        o.create(true).truncate(true).write(true);
        let mut f = tickwire_rt::files::open_regular(&o, &tmp).map_err(io_err(&tmp, "open"))?;
        f.write_all(&buf).map_err(io_err(&tmp, "write"))?;
    }
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_err(&tmp, "fsync"))?;
    fs::rename(&tmp, &path).map_err(io_err(&path, "rename"))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))?;
    Ok(())
}

impl MessageStore for FileStore {
    fn next_sender_seq(&self) -> u64 {
        self.next_sender
    }
    fn next_target_seq(&self) -> u64 {
        self.next_target
    }
    fn set_next_sender_seq(&mut self, seq: u64) -> Result<(), StoreError> {
        // Recovery takes the larger of the last NextSender record and the highest
        // stored MsgSeqNum + 1; a record that would not change that is not written (the
        // increment after `save`: one record per sent message, not two).
        if seq != self.recovered_next_sender() {
            self.append(KIND_NEXT_SENDER, seq, &[])?;
            self.sender_record = seq;
        }
        self.next_sender = seq;
        Ok(())
    }
    fn set_next_target_seq(&mut self, seq: u64) -> Result<(), StoreError> {
        // Recorded by the next flush (`write_pending`), before anything is written.
        self.next_target = seq;
        Ok(())
    }
    fn incr_next_sender_seq(&mut self) -> Result<(), StoreError> {
        self.set_next_sender_seq(self.next_sender.saturating_add(1))
    }
    fn incr_next_target_seq(&mut self) -> Result<(), StoreError> {
        self.set_next_target_seq(self.next_target.saturating_add(1))
    }
    fn save(&mut self, seq: u64, msg: &[u8]) -> Result<(), StoreError> {
        let at = self.append(KIND_MESSAGE, seq, msg)?;
        self.index_insert(seq, at);
        self.pending_messages = self.pending_messages.saturating_add(1);
        Ok(())
    }
    fn get_range(
        &self,
        begin: u64,
        end: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let start = self.index.partition_point(|e| e.seq < begin);
        let mut scratch = Vec::new();
        for e in &self.index[start..] {
            if e.seq > end || self.with_record(e.record, &mut scratch, f)?.is_break() {
                break;
            }
        }
        Ok(())
    }
    fn creation_time(&self) -> u64 {
        self.creation
    }
    fn reset(&mut self, now_unix_nanos: u64) -> Result<(), StoreError> {
        write_fresh(&self.dir, now_unix_nanos)?;
        // The window maps the old file, which the rename just replaced.
        self.tail = None;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io_err(&self.path, "open"))?;
        self.file_len = self
            .file
            .metadata()
            .map_err(io_err(&self.path, "stat"))?
            .len();
        self.allocated = self.file_len;
        self.pending.clear();
        self.pending_messages = 0;
        self.unsynced_messages = 0;
        self.index.clear();
        self.sender_record = 1;
        self.target_record = 1;
        self.next_sender = 1;
        self.next_target = 1;
        self.creation = now_unix_nanos;
        self.write_seqnums()
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        if !self.write_pending()? {
            return Ok(());
        }
        let sync = match self.policy {
            SyncPolicy::EveryMessage => true,
            SyncPolicy::Batched { messages } => self.unsynced_messages >= messages.max(1),
            SyncPolicy::Os => false,
        };
        if sync {
            self.file
                .sync_data()
                .map_err(io_err(&self.path, "fdatasync"))?;
            self.unsynced_messages = 0;
        }
        if sync || self.file_len.saturating_sub(self.seq_recorded_len) >= SEQNUMS_EVERY {
            self.write_seqnums()?;
        }
        Ok(())
    }
    fn prepare(&mut self) {
        self.prepare_tail();
    }
}

impl Drop for FileStore {
    /// A clean stop records the full flushed length (what is still pending is not the
    /// log's yet: the owner flushes before dropping) and truncates the file to the log
    /// (the mapped window's unwritten rest goes).
    fn drop(&mut self) {
        // A store whose recovery failed (it never took the lock) is not open: it must
        // not record the log it refused (a `store.seqnums` slot of a truncated log
        // would make the next open accept it) nor truncate anything.
        if self.lock.is_none() {
            return;
        }
        if self.seq_recorded_len != self.file_len {
            let _ = self.write_seqnums();
        }
        self.tail = None;
        if self.allocated > self.file_len {
            let _ = self.file.set_len(self.file_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Windows recovery read on this thread ([`LogReader::get`]).
        pub(super) static RECOVERY_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Review: a record whose length starts with a zero byte (a 256-byte record) made
    /// the end-of-log check read a whole window: 40,000 such records took 3 s to open
    /// instead of 25 ms. Recovery reads each window of the log once.
    #[test]
    fn recovery_reads_each_window_once_whatever_the_record_lengths() {
        let d = dir("zero-byte-lengths");
        // A record's length is BODY_HEAD + payload: 256 for a 247-byte message.
        let message = |seq: u64| {
            let mut m = format!("8=FIX.4.4\x0135=D\x0134={seq}\x0158=").into_bytes();
            m.resize(247 - 8, b'x');
            m.extend_from_slice(b"\x0110=000\x01");
            assert_eq!(m.len(), 247);
            m
        };
        const N: u64 = 20_000;
        {
            let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 1).unwrap();
            for seq in 1..=N {
                s.save(seq, &message(seq)).unwrap();
                s.incr_next_sender_seq().unwrap();
            }
            s.flush().unwrap();
        }
        let len = fs::metadata(d.join(FILE_NAME)).unwrap().len();
        RECOVERY_READS.with(|r| r.set(0));
        let (s, _) = FileStore::open(&d, SyncPolicy::Os, 2).unwrap();
        assert_eq!(s.next_sender_seq(), N + 1);
        let reads = RECOVERY_READS.with(std::cell::Cell::get);
        let windows = len.div_ceil(RECOVERY_CHUNK as u64);
        assert!(
            reads <= 2 * windows + 2,
            "{reads} reads of a window for a {len}-byte log ({windows} windows)"
        );
    }

    /// A scratch directory for one test's store, removed when the guard drops (also
    /// when the test fails).
    struct Scratch(tempfile::TempDir);

    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            self.0.path()
        }
    }

    fn dir(name: &str) -> Scratch {
        Scratch(
            tempfile::Builder::new()
                .prefix(&format!("tickwire-store-unit-{name}-"))
                .tempdir()
                .unwrap(),
        )
    }

    fn msg(seq: u64, pad: usize) -> Vec<u8> {
        format!(
            "8=FIX.4.4\x019=5\x0135=D\x0134={seq}\x0158={}\x0110=000\x01",
            "x".repeat(pad)
        )
        .into_bytes()
    }

    /// Saves `n` messages of varied sizes, one flush (and `prepare`, as the engine does)
    /// per `per_flush`, with target moves.
    fn fill(s: &mut FileStore, n: u64, per_flush: u64) {
        for seq in 1..=n {
            s.save(seq, &msg(seq, (seq as usize * 37) % 700)).unwrap();
            s.incr_next_sender_seq().unwrap();
            s.incr_next_target_seq().unwrap();
            if seq % per_flush == 0 {
                s.flush().unwrap();
                s.prepare();
            }
        }
        s.flush().unwrap();
    }

    /// The store in `d`, opened again after a clean stop, holds `messages` messages and
    /// no warning.
    fn reopen_holds(d: &Path, messages: u64) {
        let (s, w) = FileStore::open(d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        assert_eq!(all(&s).len() as u64, messages);
        drop(s);
    }

    /// The logs of the stores in `a` and `b` are the same bytes.
    fn assert_same_log(a: &Path, b: &Path) {
        assert_eq!(
            fs::read(a.join(FILE_NAME)).unwrap(),
            fs::read(b.join(FILE_NAME)).unwrap()
        );
    }

    fn all(s: &FileStore) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        s.get_range(1, u64::MAX, &mut |q, m| {
            out.push((q, m.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    /// Flushes copy into a window that moves along the log (a 4 KiB window moves dozens
    /// of times, with records straddling its end; the default one allocates, faults in
    /// and releases its pages over several steps), and the log they leave is byte for
    /// byte the one `pwrite` leaves.
    #[test]
    fn mapped_windows_write_the_same_log_as_pwrite() {
        for (window, n) in [(4096, 300), (WINDOW, 6000)] {
            let (a, b) = (dir("mapped"), dir("pwrite"));
            {
                let (mut m, _) = FileStore::open(&a, SyncPolicy::Os, 7).unwrap();
                let (mut p, _) = FileStore::open(&b, SyncPolicy::Os, 7).unwrap();
                m.window = window;
                p.map_writes = false;
                fill(&mut m, n, 3);
                fill(&mut p, n, 3);
                assert!(m.writes_mapped() && !p.writes_mapped());
                assert_eq!(m.log_len(), p.log_len());
                if window == WINDOW {
                    let t = m.tail.as_ref().unwrap();
                    assert!(m.log_len() > 2 * ALLOCATE_STEP as u64);
                    assert!(t.released >= 4 * RELEASE_STEP, "{}", t.released);
                }
                // Open: the mapped store's file runs past the log (allocated blocks);
                // resends read the same messages from both.
                let m_size = fs::metadata(a.join(FILE_NAME)).unwrap().len();
                assert!(m_size > m.log_len(), "{m_size} vs {}", m.log_len());
                assert_eq!(fs::metadata(b.join(FILE_NAME)).unwrap().len(), p.log_len());
                assert_eq!(all(&m), all(&p));
                assert_eq!(all(&m).len() as u64, n);
            }
            let (m, w) = FileStore::open(&a, SyncPolicy::Os, 0).unwrap();
            assert_eq!(w, None);
            assert_eq!((m.next_sender_seq(), m.next_target_seq()), (n + 1, n + 1));
            drop(m);
            // Dropped: truncated to the log, identical files.
            assert_same_log(&a, &b);
        }
    }

    /// `prepare` with records still pending (not the engine's order, but allowed) zeros
    /// and faults in the bytes their copy will write: no hole (blocks the file system
    /// never reserved, so a full disk would fault the copy) lies under them.
    #[test]
    fn prepare_with_pending_records_covers_them() {
        let d = dir("prepare-pending");
        {
            let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
            s.save(1, &msg(1, 10)).unwrap();
            s.flush().unwrap();
            s.prepare();
            // More than is kept prepared ahead, pending when `prepare` runs.
            for seq in 2..=400 {
                s.save(seq, &msg(seq, 300)).unwrap();
            }
            assert!(s.pending.len() > PREPARE_AHEAD);
            s.prepare();
            let t = s.tail.as_ref().unwrap();
            let end = s.file_len + s.pending.len() as u64;
            let prepared = t.start + t.allocated as u64;
            assert!(prepared >= end, "{prepared} vs {end}");
            assert_eq!(prepared % ALLOCATE_STEP as u64, 0, "{prepared}");
            // Written with zeros up to there: no hole (unreserved blocks) under the copy.
            let size = fs::metadata(d.join(FILE_NAME)).unwrap().len();
            assert!(size >= end);
            let hole = rustix::fs::seek(&s.file, rustix::fs::SeekFrom::Hole(0)).unwrap();
            assert_eq!(hole, size, "a hole in the prepared range");
            s.flush().unwrap();
            assert_eq!(all(&s).len(), 400);
        }
        let (s, w) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        assert_eq!(all(&s).len(), 400);
    }

    /// While the log grows by less than an [`ALLOCATE_STEP`] between `prepare` calls
    /// (the engine's turns), each call zeros and faults in at most one step, so no
    /// call holds the engine long; at least `PREPARE_AHEAD - ALLOCATE_STEP` stays
    /// prepared after every call, also after a flush larger than the whole lead; calls
    /// in a row reach [`PREPARE_AHEAD`] and then do nothing more; a release happens
    /// only in a call that allocated nothing.
    #[test]
    fn prepare_calls_allocate_one_step_while_turns_write_less() {
        let d = dir("prepare-step");
        let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        let ahead = |s: &FileStore| {
            let t = s.tail.as_ref().unwrap();
            t.start + t.allocated as u64 - s.file_len
        };
        let min_lead = (PREPARE_AHEAD - ALLOCATE_STEP) as u64;
        let mut seq = 1;
        let mut calls = 0;
        let mut one_step_calls = 0;
        // Small turns; then one turn of more than the whole lead; then small again,
        // past a release step.
        let turns = (0..300)
            .map(|_| 300)
            .chain([PREPARE_AHEAD * 2])
            .chain((0..500).map(|_| 500));
        for size in turns {
            s.save(seq, &msg(seq, size)).unwrap();
            s.flush().unwrap();
            seq += 1;
            let t = s.tail.as_ref().unwrap();
            let (allocated, released) = (t.allocated, t.released);
            let written = s.file_len;
            s.prepare();
            calls += 1;
            let t = s.tail.as_ref().unwrap();
            assert!(ahead(&s) >= min_lead, "call {calls}: {} ahead", ahead(&s));
            let grown = t.allocated - allocated;
            // After the first call (which prepares the whole lead), a turn that wrote
            // less than a step costs at most one step.
            if calls > 1 && size < ALLOCATE_STEP && grown > 0 {
                assert!(grown <= ALLOCATE_STEP, "call {calls} grew {grown}");
                one_step_calls += 1;
            }
            assert!(
                grown == 0 || t.released == released || t.released - released > RELEASE_STEP,
                "call {calls} allocated and released one step"
            );
            assert_eq!(written, s.file_len);
        }
        assert!(one_step_calls > 10, "{one_step_calls}");
        while ahead(&s) < PREPARE_AHEAD as u64 {
            s.prepare();
        }
        let full = s.tail.as_ref().unwrap().allocated;
        s.prepare();
        assert_eq!(s.tail.as_ref().unwrap().allocated, full);
        assert!(s.tail.as_ref().unwrap().released >= RELEASE_STEP);
        drop(s);
        reopen_holds(&d, seq - 1);
    }

    /// Turns that each write more than a step make every `prepare` call allocate; the
    /// written pages are released all the same (all but one step once four wait), so
    /// the window never stays faulted in behind the log.
    #[test]
    fn sustained_large_turns_still_release_what_is_written() {
        let d = dir("prepare-busy");
        let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        let mut seq = 1;
        for _ in 0..200 {
            // ~16 KiB a turn: two steps.
            for _ in 0..16 {
                s.save(seq, &msg(seq, 1000)).unwrap();
                seq += 1;
            }
            s.flush().unwrap();
            let before = s.tail.as_ref().unwrap().allocated;
            s.prepare();
            let t = s.tail.as_ref().unwrap();
            assert!(t.allocated > before, "every call allocates here");
            let at = (s.file_len - t.start) as usize;
            assert!(
                at - t.released <= 4 * RELEASE_STEP + RELEASE_SLACK,
                "{} bytes written and not released",
                at - t.released
            );
        }
        assert!(s.tail.as_ref().unwrap().released > 2 << 20);
        drop(s);
        reopen_holds(&d, seq - 1);
    }

    /// Flushes that `pwrite` while a window is mapped (as when mapping failed for a
    /// while) and mapped flushes after them leave the same log as `pwrite` alone: the
    /// window's preparation never writes its zeros over records written past it.
    #[test]
    fn pwrite_flushes_between_mapped_ones_are_never_overwritten() {
        let (a, b) = (dir("mixed"), dir("mixed-pwrite"));
        {
            let (mut m, _) = FileStore::open(&a, SyncPolicy::Os, 7).unwrap();
            let (mut p, _) = FileStore::open(&b, SyncPolicy::Os, 7).unwrap();
            p.map_writes = false;
            let mut seq = 1;
            for round in 0..6 {
                m.map_writes = round % 2 == 0;
                for _ in 0..400 {
                    for s in [&mut m, &mut p] {
                        s.save(seq, &msg(seq, 300)).unwrap();
                        s.incr_next_sender_seq().unwrap();
                        s.flush().unwrap();
                        s.prepare();
                    }
                    seq += 1;
                }
            }
            m.map_writes = true;
            assert_eq!(all(&m), all(&p));
        }
        assert_same_log(&a, &b);
    }

    /// A flush larger than the window maps a window of its own size.
    #[test]
    fn a_flush_larger_than_the_window_gets_a_window_of_its_size() {
        let d = dir("large");
        {
            let (mut s, _) = FileStore::open(&d, SyncPolicy::EveryMessage, 0).unwrap();
            s.window = 4096;
            s.save(1, &msg(1, 20_000)).unwrap();
            s.incr_next_sender_seq().unwrap();
            s.flush().unwrap();
            assert!(s.writes_mapped());
            s.save(2, &msg(2, 10)).unwrap();
            s.incr_next_sender_seq().unwrap();
            s.flush().unwrap();
        }
        let (s, w) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        assert_eq!(all(&s), vec![(1, msg(1, 20_000)), (2, msg(2, 10))]);
    }

    /// Without a clean stop (as after `kill -9`) the file keeps the window's zeros past
    /// the log: recovery ends the log there, with no warning, and truncates them.
    #[test]
    fn a_crash_leaves_the_window_zeros_which_recovery_drops() {
        let d = dir("crash");
        let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        fill(&mut s, 50, 1);
        let log = s.log_len();
        s.end_as_if_killed();
        // Up to a multiple of the allocation step, as far as keeps `PREPARE_AHEAD`
        // bytes ahead of the log: fifty `prepare` calls of one step each reached that
        // long before the last.
        let len = fs::metadata(d.join(FILE_NAME)).unwrap().len();
        assert_eq!(len % ALLOCATE_STEP as u64, 0, "{len}");
        assert!(len >= log + PREPARE_AHEAD as u64, "{len} vs {log}");
        assert!(
            len < log + (PREPARE_AHEAD + ALLOCATE_STEP) as u64,
            "{len} vs {log}"
        );
        let (s, w) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        assert_eq!(s.log_len(), log);
        assert_eq!(fs::metadata(d.join(FILE_NAME)).unwrap().len(), log);
        assert_eq!((s.next_sender_seq(), s.next_target_seq()), (51, 51));
        assert_eq!(all(&s).len(), 50);
    }

    /// A second open of a store directory while another store has it open (a second
    /// engine with the same `FileStorePath` and session) is refused before it reads or
    /// writes anything: the first store's log and sequence numbers stay whole, and it
    /// goes on; once the first is closed, the directory opens again.
    #[test]
    fn a_store_in_use_is_refused_and_left_alone() {
        let d = dir("locked");
        let (mut a, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        fill(&mut a, 40, 1);
        // As the engine: a window prepared past the log, which a second store's
        // recovery would have cut (and its drop recorded as the log).
        a.prepare();
        let log = a.log_len();
        let size = fs::metadata(d.join(FILE_NAME)).unwrap().len();
        let seqnums = fs::read(d.join(SEQ_NAME)).unwrap();
        for on_lost in [OnLostLog::Refuse, OnLostLog::StartOver] {
            match FileStore::open_with(&d, SyncPolicy::Os, 0, on_lost) {
                Err(StoreError::Locked(p)) => assert_eq!(p, *d),
                other => panic!("{:?}", other.map(|(s, w)| (s.log_len(), w))),
            }
        }
        let e = FileStore::open(&d, SyncPolicy::Os, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("in use by another open store"), "{e}");
        assert_eq!(fs::metadata(d.join(FILE_NAME)).unwrap().len(), size);
        assert_eq!(fs::read(d.join(SEQ_NAME)).unwrap(), seqnums);
        a.save(41, &msg(41, 10)).unwrap();
        a.incr_next_sender_seq().unwrap();
        a.flush().unwrap();
        assert!(a.log_len() > log);
        drop(a);
        let (b, w) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        assert_eq!(all(&b).len(), 41);
        assert_eq!(b.next_sender_seq(), 42);
        drop(b);
    }

    /// An open refused because the log lost records stays refused: the refused store
    /// records nothing on its way out (a `store.seqnums` slot describing the damaged log
    /// would make the next open accept it and reuse sequence numbers).
    #[test]
    fn a_refused_open_stays_refused() {
        let d = dir("refused");
        {
            let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
            fill(&mut s, 30, 1);
        }
        let header = (PREFIX + BODY_HEAD + MAGIC.len()) as u64;
        let f = OpenOptions::new()
            .write(true)
            .open(d.join(FILE_NAME))
            .unwrap();
        f.set_len(header).unwrap();
        drop(f);
        for _ in 0..3 {
            match FileStore::open(&d, SyncPolicy::Os, 0) {
                Err(StoreError::Lost { .. }) => {}
                other => panic!("{:?}", other.map(|(s, w)| (s.log_len(), w))),
            }
        }
        assert_eq!(fs::metadata(d.join(FILE_NAME)).unwrap().len(), header);
    }

    /// A reset replaces the file: the window of the old one is dropped, and the next
    /// flush maps the new one.
    #[test]
    fn reset_maps_the_new_file() {
        let d = dir("reset");
        {
            let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
            fill(&mut s, 5, 1);
            s.reset(99).unwrap();
            fill(&mut s, 3, 1);
            assert!(s.writes_mapped());
        }
        let (s, w) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        assert_eq!(s.creation_time(), 99);
        assert_eq!(all(&s).len(), 3);
    }

    #[test]
    fn a_log_whose_numbers_go_down_is_indexed_in_order_and_the_last_copy_wins() {
        // Hostile-input probe: each record inserted at the front of the index made a
        // log of 400,000 descending numbers take 16 s to open. Now one sort.
        let d = dir("descending");
        drop(FileStore::open(&d, SyncPolicy::Os, 0).unwrap());
        let path = d.join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap();
        let crc = crc32fast::Hasher::new();
        for seq in (1..=2000u64).rev() {
            encode_record(
                &mut bytes,
                &crc,
                KIND_MESSAGE,
                seq,
                format!("m{seq}").as_bytes(),
            )
            .unwrap();
        }
        encode_record(&mut bytes, &crc, KIND_MESSAGE, 5, b"again").unwrap();
        fs::write(&path, &bytes).unwrap();
        let (s, w) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
        assert_eq!(w, None);
        let got = all(&s);
        assert_eq!(got.len(), 2000);
        for (i, (seq, m)) in got.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1);
            let want = if *seq == 5 {
                b"again".to_vec()
            } else {
                format!("m{seq}").into_bytes()
            };
            assert_eq!(*m, want, "{seq}");
        }
        assert_eq!(s.next_sender_seq(), 2001);
    }

    /// A damaged record followed by an intact one whose last bytes are zeros (a
    /// NextTarget record's value) and then the window's zeros is corruption, not a torn
    /// tail: the zeros of the intact record are not taken for the window's.
    #[test]
    fn an_intact_record_ending_in_zeros_after_damage_is_corruption() {
        let d = dir("zero-end");
        {
            let (mut s, _) = FileStore::open(&d, SyncPolicy::Os, 0).unwrap();
            fill(&mut s, 2, 1);
        }
        let path = d.join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap();
        let damaged = bytes.len();
        // A record whose length is too small, then an intact NextTarget record for 5.
        bytes.extend_from_slice(&[3, 0, 0, 0, 1, 2, 3, 4]);
        let mut next = Vec::new();
        encode_record(
            &mut next,
            &crc32fast::Hasher::new(),
            KIND_NEXT_TARGET,
            5,
            &[],
        )
        .unwrap();
        assert_eq!(next.last(), Some(&0));
        bytes.extend_from_slice(&next);
        bytes.resize(bytes.len() + 1000, 0);
        fs::write(&path, &bytes).unwrap();
        let err = FileStore::open(&d, SyncPolicy::Os, 0).unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { offset, .. } if offset == damaged as u64),
            "{err}"
        );
    }
}
