//! Pinning a thread to one CPU.

use std::sync::atomic::{AtomicBool, Ordering};

/// Pins the calling thread to `cpu` (sched_setaffinity); returns false (and warns once
/// per process, a `tracing` event) if it cannot.
pub fn pin_current_thread(cpu: usize) -> bool {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let mut set = rustix::thread::CpuSet::new();
    let result = if cpu < rustix::thread::CpuSet::MAX_CPU {
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).map_err(|e| e.to_string())
    } else {
        Err(format!("CPU {cpu} is out of range"))
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!("cannot pin a thread to CPU {cpu} ({e}); running unpinned");
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_an_impossible_cpu_fails_without_panicking() {
        assert!(!pin_current_thread(usize::MAX));
    }
}
