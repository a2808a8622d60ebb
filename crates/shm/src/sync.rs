//! The atomics the ring protocol uses: `std`'s, or loom's under `--cfg loom` so the
//! index and wake protocol can be model-checked (`tests/loom.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
