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

/// Whether a thread of this process can be pinned to `cpu`, tried on a scratch thread
/// (no warning): a CPU that does not exist, or that the process's cpuset (a container's)
/// excludes, cannot; the affinity mask inherited from `taskset` does not limit it.
/// Without a thread to try on, the CPUs the calling thread runs on now.
pub fn can_pin(cpu: usize) -> bool {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return false;
    }
    let tried = std::thread::Builder::new().spawn(move || {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).is_ok()
    });
    match tried {
        Ok(t) => t.join().unwrap_or(false),
        // No thread to try on (a process or container thread limit): the CPUs this
        // thread runs on now are certainly usable.
        Err(_) => usable_cpus().is_some_and(|cpus| cpus.contains(&cpu)),
    }
}

/// The CPUs the calling thread runs on now (its affinity mask, which a process inherits
/// from `taskset` or a container's CPU set), in order; `None` when it cannot be read.
pub fn usable_cpus() -> Option<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None).ok()?;
    Some(
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
    )
}

/// The calling thread's CPU affinity before [`pin_current_thread_scoped`] pinned it;
/// restores it on drop.
#[derive(Debug)]
#[must_use = "dropping it at once restores the affinity at once"]
pub struct Pinned {
    before: Option<rustix::thread::CpuSet>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.before {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
    }
}

/// [`pin_current_thread`] until the returned guard is dropped, which gives the thread
/// back the CPUs it had: for a run inside a longer-lived process (the demo runs several
/// benches in turn; threads and children started while pinned keep the pinning).
pub fn pin_current_thread_scoped(cpu: usize) -> Pinned {
    let before = rustix::thread::sched_getaffinity(None).ok();
    if pin_current_thread(cpu) {
        Pinned { before }
    } else {
        Pinned { before: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_cpus_are_the_ones_a_pin_succeeds_on() {
        let cpus = usable_cpus().expect("the affinity mask of this thread");
        assert!(!cpus.is_empty());
        assert!(cpus.iter().all(|&c| can_pin(c)), "{cpus:?}");
        // No CPU of that number exists (nor can be named in a CPU set).
        assert!(!can_pin(rustix::thread::CpuSet::MAX_CPU));
        assert!(!can_pin(100_000));
        let _guard = pin_current_thread_scoped(cpus[0]);
        assert_eq!(usable_cpus(), Some(vec![cpus[0]]));
        // Pinned to one CPU (as under `taskset -c`), the others can still be pinned to.
        assert!(cpus.iter().all(|&c| can_pin(c)), "{cpus:?}");
    }

    #[test]
    fn a_scoped_pin_gives_the_thread_its_cpus_back() {
        std::thread::spawn(|| {
            let before = rustix::thread::sched_getaffinity(None).unwrap();
            {
                let _pinned = pin_current_thread_scoped(0);
                let now = rustix::thread::sched_getaffinity(None).unwrap();
                assert_eq!(now.count(), 1);
                assert!(now.is_set(0));
            }
            let after = rustix::thread::sched_getaffinity(None).unwrap();
            assert_eq!(after.count(), before.count());
            for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
                assert_eq!(after.is_set(cpu), before.is_set(cpu), "CPU {cpu}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pinning_to_an_impossible_cpu_fails_without_panicking() {
        assert!(!pin_current_thread(usize::MAX));
    }
}
