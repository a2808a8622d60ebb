//! [`AnyStore`]: the store a session gets from its settings (memory or file), as one
//! concrete type so that one engine can mix both kinds without boxing.

use std::cell::Cell;

use tickwire_fix::store::{FileStore, MemoryStore, MessageStore, StoreError};

thread_local! {
    /// File store resets done on this thread (the engine's).
    static FILE_RESETS: Cell<u64> = const { Cell::new(0) };
}

/// How many file stores this thread has reset so far. A reset rewrites the store's
/// files with two `fsync`s, where a message costs none: the engine reads how many a
/// frame caused, and takes at most one per connection per turn (hostile-input pass:
/// a counterparty's in-session Logons with 141=Y, ~2,800 in one turn's read, held
/// every other session ~1 s).
pub(crate) fn file_resets() -> u64 {
    FILE_RESETS.with(Cell::get)
}

/// A [`MemoryStore`] or a [`FileStore`] (`FileStorePath` set), chosen per session.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per session, never moved on the hot path
pub enum AnyStore {
    /// Process memory (no `FileStorePath`).
    Memory(MemoryStore),
    /// The durable file store under `FileStorePath`.
    File(FileStore),
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Memory($s) => $e,
            AnyStore::File($s) => $e,
        }
    };
}

impl MessageStore for AnyStore {
    fn next_sender_seq(&self) -> u64 {
        delegate!(self, s => s.next_sender_seq())
    }
    fn next_target_seq(&self) -> u64 {
        delegate!(self, s => s.next_target_seq())
    }
    fn set_next_sender_seq(&mut self, seq: u64) -> Result<(), StoreError> {
        delegate!(self, s => s.set_next_sender_seq(seq))
    }
    fn set_next_target_seq(&mut self, seq: u64) -> Result<(), StoreError> {
        delegate!(self, s => s.set_next_target_seq(seq))
    }
    fn incr_next_sender_seq(&mut self) -> Result<(), StoreError> {
        delegate!(self, s => s.incr_next_sender_seq())
    }
    fn incr_next_target_seq(&mut self) -> Result<(), StoreError> {
        delegate!(self, s => s.incr_next_target_seq())
    }
    fn save(&mut self, seq: u64, msg: &[u8]) -> Result<(), StoreError> {
        delegate!(self, s => s.save(seq, msg))
    }
    fn get_range(
        &self,
        begin: u64,
        end: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.get_range(begin, end, f))
    }
    fn creation_time(&self) -> u64 {
        delegate!(self, s => s.creation_time())
    }
    fn reset(&mut self, now_unix_nanos: u64) -> Result<(), StoreError> {
        if matches!(self, AnyStore::File(_)) {
            FILE_RESETS.with(|n| n.set(n.get() + 1));
        }
        delegate!(self, s => s.reset(now_unix_nanos))
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        delegate!(self, s => s.flush())
    }
    fn prepare(&mut self) {
        delegate!(self, s => s.prepare())
    }
}
