//! A bounded single-producer/single-consumer byte ring in shared memory, and the
//! parking flag of its wake protocol. Safe code over [`Mem`]; the only `unsafe` is in
//! `raw.rs` (the real mapping).
//!
//! A ring is a byte stream, like a TCP connection: a write takes what fits, a read
//! takes what is there; frames may straddle the wrap and the end of a read. Indexes are
//! free-running `u64` byte counts (never wrap in practice: 2^64 bytes); the position in
//! the data area is `index % capacity` (capacity a power of two).
//!
//! Each side keeps its own index privately and only *publishes* it to the shared
//! header; it never reads its own index back (the peer could have overwritten it). The
//! peer's index is read, and checked: a producer must never see the consumer ahead of
//! it or more than a capacity behind, a consumer never more than a capacity of bytes
//! available. A violation is [`Corrupt`]: the peer wrote our header; the connection is
//! over.
//!
//! Wake protocol (Dekker-style, no lost wake-up; model-checked in `tests/loom.rs`):
//!
//! ```text
//! producer                               consumer (about to sleep)
//! copy bytes in; tail.store(Release)     parked.store(1)
//! fence(SeqCst)                          fence(SeqCst)
//! parked.load() == 1 ?                   tail.load() != head ?  -> unpark, don't sleep
//!   -> parked.swap(0) == 1 ? -> wake       else sleep until woken (or a timeout)
//! ```
//! The two fences order each side's store before its load, so at least one side sees
//! the other's store: either the producer sees the flag (and wakes the consumer) or
//! the consumer sees the new tail (and does not sleep). A busy consumer never sets the
//! flag, so a busy producer pays one fence and one load of an unchanging cache line
//! per publish, and no syscall.

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

/// Where one ring's words and bytes live in its mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    /// Offset of the producer's index (`u64`, its own cache line).
    pub tail: usize,
    /// Offset of the consumer's index (`u64`, its own cache line).
    pub head: usize,
    /// Offset of the consumer's "parked" flag (`u32`, its own cache line).
    pub parked: usize,
    /// Offset of the data area.
    pub data: usize,
    /// Bytes in the data area, a power of two.
    pub cap: usize,
}

/// Shared memory as the ring protocol sees it: aligned atomics and byte copies.
pub trait Mem {
    /// The `u64` word at `offset`.
    fn word(&self, offset: usize) -> &AtomicU64;
    /// The `u32` flag at `offset`.
    fn flag(&self, offset: usize) -> &AtomicU32;
    /// Copies bytes at `offset` out into `dst`.
    fn copy_out(&self, offset: usize, dst: &mut [u8]);
    /// Copies `src` in at `offset`.
    fn copy_in(&self, offset: usize, src: &[u8]);
}

impl<M: Mem + ?Sized> Mem for std::sync::Arc<M> {
    fn word(&self, offset: usize) -> &AtomicU64 {
        (**self).word(offset)
    }
    fn flag(&self, offset: usize) -> &AtomicU32 {
        (**self).flag(offset)
    }
    fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        (**self).copy_out(offset, dst)
    }
    fn copy_in(&self, offset: usize, src: &[u8]) {
        (**self).copy_in(offset, src)
    }
}

#[cfg(not(loom))]
impl Mem for crate::raw::Region {
    fn word(&self, offset: usize) -> &AtomicU64 {
        self.atomic_u64(offset)
    }
    fn flag(&self, offset: usize) -> &AtomicU32 {
        self.atomic_u32(offset)
    }
    fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        crate::raw::Region::copy_out(self, offset, dst)
    }
    fn copy_in(&self, offset: usize, src: &[u8]) {
        crate::raw::Region::copy_in(self, offset, src)
    }
}

/// The peer broke the ring protocol: the index it published is impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt {
    /// Our own (private) index.
    pub ours: u64,
    /// The index the peer published.
    pub theirs: u64,
}

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shared-memory ring corrupted by the peer (our index {}, theirs {})",
            self.ours, self.theirs
        )
    }
}

impl std::error::Error for Corrupt {}

/// The writing end of a ring.
#[derive(Debug)]
pub struct Producer<M> {
    mem: M,
    lay: RingLayout,
    /// Our index, the truth; the shared copy is only published.
    tail: u64,
    /// The consumer's index as last read (and checked).
    head_seen: u64,
}

impl<M: Mem> Producer<M> {
    /// The writing end of a fresh ring (both indexes zero).
    pub fn new(mem: M, lay: RingLayout) -> Producer<M> {
        debug_assert!(lay.cap.is_power_of_two());
        Producer {
            mem,
            lay,
            tail: 0,
            head_seen: 0,
        }
    }

    /// Copies as much of `src` as fits and publishes it; returns the bytes taken
    /// (0 when the ring is full).
    pub fn write(&mut self, src: &[u8]) -> Result<usize, Corrupt> {
        let cap = self.lay.cap as u64;
        let mut free = cap - self.tail.wrapping_sub(self.head_seen);
        if free < src.len() as u64 {
            self.refresh_head()?;
            free = cap - self.tail.wrapping_sub(self.head_seen);
        }
        let n = free.min(src.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let pos = (self.tail & (cap - 1)) as usize;
        let first = n.min(self.lay.cap - pos);
        self.mem.copy_in(self.lay.data + pos, &src[..first]);
        if first < n {
            self.mem.copy_in(self.lay.data, &src[first..n]);
        }
        self.tail = self.tail.wrapping_add(n as u64);
        self.mem
            .word(self.lay.tail)
            .store(self.tail, Ordering::Release);
        Ok(n)
    }

    /// Bytes the ring can take now (reads the consumer's index).
    pub fn free(&mut self) -> Result<usize, Corrupt> {
        self.refresh_head()?;
        Ok(self.lay.cap - self.tail.wrapping_sub(self.head_seen) as usize)
    }

    /// After publishing: whether the consumer announced it sleeps. Clears the flag, so
    /// one wake-up is sent per sleep however many writes follow.
    pub fn wake_needed(&self) -> bool {
        fence(Ordering::SeqCst);
        let parked = self.mem.flag(self.lay.parked);
        parked.load(Ordering::Relaxed) != 0 && parked.swap(0, Ordering::Relaxed) != 0
    }

    /// Test support: publishes `tail` without writing anything, as a hostile producer
    /// could.
    #[doc(hidden)]
    pub fn debug_store_tail(&self, tail: u64) {
        self.mem.word(self.lay.tail).store(tail, Ordering::Release);
    }

    fn refresh_head(&mut self) -> Result<(), Corrupt> {
        // Acquire: the consumer's copies out of the bytes it released happen before we
        // overwrite them.
        let head = self.mem.word(self.lay.head).load(Ordering::Acquire);
        // The consumer may only move forward, and never past what we published.
        let advanced = head.wrapping_sub(self.head_seen);
        if advanced > self.tail.wrapping_sub(self.head_seen) {
            return Err(Corrupt {
                ours: self.tail,
                theirs: head,
            });
        }
        self.head_seen = head;
        Ok(())
    }
}

/// The reading end of a ring.
#[derive(Debug)]
pub struct Consumer<M> {
    mem: M,
    lay: RingLayout,
    /// Our index, the truth; the shared copy is only published.
    head: u64,
}

impl<M: Mem> Consumer<M> {
    /// The reading end of a fresh ring (both indexes zero).
    pub fn new(mem: M, lay: RingLayout) -> Consumer<M> {
        debug_assert!(lay.cap.is_power_of_two());
        Consumer { mem, lay, head: 0 }
    }

    /// The memory the ring lives in.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Where the ring's words and bytes are in [`Consumer::mem`].
    pub fn layout(&self) -> RingLayout {
        self.lay
    }

    /// Bytes waiting to be read (one acquire load; no copy).
    pub fn available(&self) -> Result<usize, Corrupt> {
        let tail = self.mem.word(self.lay.tail).load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail > self.lay.cap as u64 {
            return Err(Corrupt {
                ours: self.head,
                theirs: tail,
            });
        }
        Ok(avail as usize)
    }

    /// Copies up to `dst.len()` waiting bytes out and releases their space; returns
    /// the bytes copied (0 when the ring is empty). The bytes are as hostile as the
    /// peer: decode them from `dst`, never from the ring.
    pub fn read(&mut self, dst: &mut [u8]) -> Result<usize, Corrupt> {
        let n = self.available()?.min(dst.len());
        if n == 0 {
            return Ok(0);
        }
        let cap = self.lay.cap;
        let pos = (self.head & (cap as u64 - 1)) as usize;
        let first = n.min(cap - pos);
        self.mem.copy_out(self.lay.data + pos, &mut dst[..first]);
        if first < n {
            self.mem.copy_out(self.lay.data, &mut dst[first..n]);
        }
        self.head = self.head.wrapping_add(n as u64);
        // Release: our copies are done before the producer may reuse the space.
        self.mem
            .word(self.lay.head)
            .store(self.head, Ordering::Release);
        Ok(n)
    }

    /// Announces that this side is about to sleep. Returns true when bytes arrived in
    /// the meantime: then do not sleep (the flag is cleared again).
    pub fn park(&self) -> Result<bool, Corrupt> {
        self.mem.flag(self.lay.parked).store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let ready = self.available()? > 0;
        if ready {
            self.unpark();
        }
        Ok(ready)
    }

    /// Withdraws a [`Consumer::park`] announcement (after waking).
    pub fn unpark(&self) {
        self.mem.flag(self.lay.parked).store(0, Ordering::Relaxed);
    }

    /// Test support: publishes `head` without reading anything, as a hostile consumer
    /// could.
    #[doc(hidden)]
    pub fn debug_store_head(&self, head: u64) {
        self.mem.word(self.lay.head).store(head, Ordering::Release);
    }
}
