//! Test-only: a global allocator that counts the allocations made by the current
//! thread, so a test can prove a hot path allocates nothing per message.
//!
//! Each integration-test file that uses it is its own binary with its own global
//! allocator:
//!
//! ```ignore
//! use tickwire_alloc_count::{allocations_during, CountingAlloc};
//!
//! #[global_allocator]
//! static ALLOC: CountingAlloc = CountingAlloc;
//!
//! let (result, allocations) = allocations_during(|| hot_path());
//! assert_eq!(allocations, 0);
//! ```
//!
//! The count is per thread (the test harness's own threads allocate while a test
//! runs), and counts `alloc`, `alloc_zeroed` and `realloc`; `dealloc` is free.
//! [`live_bytes`] is the thread's bytes allocated and not yet freed, for a test that
//! checks what some work leaves held.
//!
//! This is the workspace's one crate with `unsafe` code: `GlobalAlloc` is an unsafe
//! trait. Every method forwards to the system allocator unchanged.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // `const` initialisation: no lazy init and no destructor, so reading it from
    // inside the allocator never allocates or recurses.
    static COUNT: Cell<u64> = const { Cell::new(0) };
    // Bytes allocated by this thread less those it freed (what it holds, when what it
    // allocates it also frees).
    static LIVE: Cell<i64> = const { Cell::new(0) };
    // The highest `LIVE` since the last `peak_during` began.
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

/// The counting allocator: declare it as the test binary's `#[global_allocator]`.
pub struct CountingAlloc;

fn bump() {
    // `try_with`: during thread teardown the slot may be gone; then don't count.
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
}

fn live(delta: i64) {
    let _ = LIVE.try_with(|c| {
        let now = c.get().wrapping_add(delta);
        c.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; counting touches only a const-initialised thread-local
// `Cell` and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        live(layout.size() as i64);
        // SAFETY: the caller's `layout` contract is passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        live(layout.size() as i64);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        live(new_size as i64 - layout.size() as i64);
        // SAFETY: `ptr` was allocated by `System` (through this type) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        live(-(layout.size() as i64));
        // SAFETY: `ptr` was allocated by `System` (through this type) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations made by this thread so far (only meaningful when [`CountingAlloc`] is
/// the global allocator).
pub fn allocations() -> u64 {
    COUNT.with(Cell::get)
}

/// Bytes this thread has allocated and not freed (frees of memory another thread
/// allocated count against it): the difference between two readings around some work
/// is what the work left held.
pub fn live_bytes() -> i64 {
    LIVE.with(Cell::get)
}

/// Runs `f` and returns its result and the number of allocations this thread made
/// while it ran.
pub fn allocations_during<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = allocations();
    let r = f();
    (r, allocations() - before)
}

/// Runs `f` and returns its result and the most bytes this thread held at once while
/// it ran, above what it held when `f` began: what the work needed at its peak, for a
/// test that bounds a work's memory rather than what it leaves.
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, i64) {
    let before = live_bytes();
    let outer = PEAK.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let r = f();
    let peak = PEAK.with(Cell::get);
    // A `peak_during` inside another keeps the outer one's peak.
    PEAK.with(|p| p.set(outer.max(peak)));
    (r, peak - before)
}

/// Panics unless allocations on this thread are being counted, i.e. unless
/// [`CountingAlloc`] is the global allocator: a test that finds zero allocations must
/// first show that it would have seen one.
pub fn assert_counting() {
    let (v, n) = allocations_during(|| std::hint::black_box(Vec::<u8>::with_capacity(16)));
    drop(v);
    assert_eq!(
        n, 1,
        "allocations are not being counted: declare `#[global_allocator] static A: CountingAlloc`"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOC: CountingAlloc = CountingAlloc;

    #[test]
    fn counts_this_threads_allocations() {
        assert_counting();
        let (v, n) = allocations_during(|| {
            let mut v: Vec<u64> = Vec::with_capacity(4);
            v.extend([1, 2, 3, 4]);
            v
        });
        assert_eq!(n, 1);
        let (_, n) = allocations_during(|| v.iter().sum::<u64>());
        assert_eq!(n, 0);
        let (_, n) = allocations_during(|| {
            let mut v = v.clone();
            v.push(5); // grows: a realloc
            v
        });
        assert_eq!(n, 2);
    }

    #[test]
    fn the_peak_is_the_most_held_at_once_not_what_is_left() {
        let held = vec![0u8; 1000];
        let (_, peak) = peak_during(|| {
            for _ in 0..3 {
                drop(std::hint::black_box(vec![0u8; 10_000]));
            }
            std::hint::black_box(vec![0u8; 4_000])
        });
        assert_eq!(peak, 10_000);
        let (_, peak) = peak_during(|| drop(std::hint::black_box(vec![0u8; 50])));
        assert_eq!(peak, 50);
        drop(held);
    }
}
