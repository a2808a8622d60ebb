//! Mapping each client's rings into the router's page tables before the messages need
//! them (docs/shm.md, "Page faults").
//!
//! The client maps its side populated (`MADV_POPULATE_WRITE` at connect), but the
//! router's mapping of the same memfd starts empty: without this, the router's first
//! lap around each ring takes a page fault on every 4 KiB page it writes (~1.5–2 µs
//! each in a KVM guest) and on every 64 KiB it reads. In a ping-pong of 100-byte
//! messages through 8 MiB rings that was one round trip in thirteen, and the p99
//! (BENCHMARKS.md).
//!
//! A helper thread (`tickwire-prefault`) reads one word of every page of a client's
//! mapping that exists, which maps the pages into the process's page tables for the
//! router's thread too (a read fault on a shared page that exists maps it writable, and
//! maps its resident neighbours with it). It asks the kernel which pages exist first
//! (`mincore`, 64 pages at a time) and touches only those: touching a hole would
//! allocate memory on the router's account for a client that never used it. (A client
//! punching holes into its mapping at that moment can win the microseconds between the
//! look and the touch for some pages: those are allocated, never more than the mapping
//! the router created for it.) The router's thread only hands the job over, at the
//! client's first bytes (by then our client library has populated its side), with a
//! non-blocking send on a bounded queue; a full queue skips the job (the faults happen
//! as before).

use std::io;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use crate::raw::{page_size, Region};
use crate::sync::Ordering;

/// Jobs waiting for the helper; more are skipped.
const QUEUE: usize = 64;
/// Pages looked at (`mincore`) and touched at a time; between two such steps the
/// helper checks that the client is still there.
const PAGES_PER_LOOK: usize = 64;

/// One client's mapping to map in.
#[derive(Debug)]
pub(crate) struct Job {
    region: Arc<Region>,
}

impl Job {
    pub(crate) fn new(region: Arc<Region>) -> Job {
        Job { region }
    }
}

/// The helper thread's queue.
#[derive(Debug, Clone)]
pub(crate) struct Prefaulter {
    queue: SyncSender<Job>,
}

impl Prefaulter {
    /// Starts the helper thread; it ends when the last [`Prefaulter`] is dropped.
    pub(crate) fn start() -> io::Result<Prefaulter> {
        let (queue, jobs) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("tickwire-prefault".into())
            .spawn(move || serve(jobs))?;
        Ok(Prefaulter { queue })
    }

    /// Hands a job to the helper without waiting; false when the queue was full (or
    /// the helper gone) and the job was dropped.
    pub(crate) fn submit(&self, job: Job) -> bool {
        match self.queue.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

fn serve(jobs: Receiver<Job>) {
    for job in jobs {
        touch(&job);
    }
}

/// What [`touch`] did with a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Touched {
    /// Every page that existed was touched (`pages` of them).
    Done { pages: usize },
    /// The client went away (only the job held the mapping): stopped early.
    Gone,
    /// The kernel refused to say which pages exist: nothing more was touched.
    Refused,
}

/// Reads one word of every page of the job's mapping that exists.
pub(crate) fn touch(job: &Job) -> Touched {
    let region = &job.region;
    let page = page_size();
    let len = region.len();
    let mut resident = [0u8; PAGES_PER_LOOK];
    let mut pages = 0;
    let mut start = 0;
    while start < len {
        if Arc::strong_count(region) == 1 {
            return Touched::Gone;
        }
        let span = (len - start).min(PAGES_PER_LOOK * page);
        if region.resident(start, span, &mut resident).is_err() {
            return Touched::Refused;
        }
        for (i, flags) in resident.iter().take(span.div_ceil(page)).enumerate() {
            if flags & 1 != 0 {
                let offset = start + i * page;
                std::hint::black_box(region.atomic_u64(offset).load(Ordering::Relaxed));
                pages += 1;
            }
        }
        start += span;
    }
    Touched::Done { pages }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::MetadataExt;

    const PAGE: usize = 4096;

    fn memfd(len: u64) -> File {
        let fd =
            rustix::fs::memfd_create("tickwire-prefault-test", rustix::fs::MemfdFlags::CLOEXEC)
                .unwrap();
        let file = File::from(fd);
        file.set_len(len).unwrap();
        file
    }

    /// Minor faults of this thread so far (the other tests fault meanwhile).
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // Field 10 (minflt), counted after the command name's closing parenthesis.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(7).unwrap().parse().unwrap()
    }

    /// Faults of this thread writing a word into every page of `region`.
    fn faults_writing(region: &Region) -> u64 {
        let before = minor_faults();
        for offset in (0..region.len()).step_by(PAGE) {
            region.copy_in(offset + 100, b"router");
        }
        minor_faults() - before
    }

    #[test]
    fn a_mapping_the_client_populated_is_mapped_in_and_then_written_without_faults() {
        let len = 4 << 20;
        let file = memfd(len as u64);
        let client = Region::map_populated(&file).unwrap();
        client.copy_in(3 * PAGE + 5, b"from the client");
        let ours = Arc::new(Region::map(&file).unwrap());
        let job = Job::new(ours.clone());
        assert_eq!(touch(&job), Touched::Done { pages: len / PAGE });
        // 1,024 pages written: each would fault once without the touches.
        let faults = faults_writing(&ours);
        assert!(faults < 16, "{faults} faults writing a touched mapping");
        let mut back = [0u8; 15];
        ours.copy_out(3 * PAGE + 5, &mut back);
        assert_eq!(&back, b"from the client", "the touches changed nothing");
        // The control: another mapping of the same pages, not touched, faults on
        // (nearly) every page it writes.
        let untouched = Region::map(&file).unwrap();
        let faults = faults_writing(&untouched);
        assert!(
            faults > 512,
            "only {faults} faults writing an untouched mapping"
        );
    }

    #[test]
    fn only_the_pages_the_client_allocated_are_touched_and_nothing_is_allocated() {
        let len = 1 << 20;
        let file = memfd(len as u64);
        let ours = Arc::new(Region::map(&file).unwrap());
        let job = Job::new(ours.clone());
        assert_eq!(touch(&job), Touched::Done { pages: 0 });
        assert_eq!(
            file.metadata().unwrap().blocks(),
            0,
            "nothing was allocated"
        );
        // The client allocates every other 64 KiB: those pages, and only those.
        let client = Region::map(&file).unwrap();
        for offset in (0..len).step_by(2 * 16 * PAGE) {
            client.populate(offset, 16 * PAGE).unwrap();
        }
        let blocks = file.metadata().unwrap().blocks();
        assert_eq!(
            touch(&job),
            Touched::Done {
                pages: len / PAGE / 2
            }
        );
        assert_eq!(
            file.metadata().unwrap().blocks(),
            blocks,
            "nothing more allocated"
        );
    }

    #[test]
    fn a_mapping_whose_client_is_gone_is_not_walked() {
        let file = memfd(1 << 20);
        let _client = Region::map_populated(&file).unwrap();
        let job = Job::new(Arc::new(Region::map(&file).unwrap()));
        assert_eq!(touch(&job), Touched::Gone);
    }

    #[test]
    fn a_full_queue_drops_the_job_instead_of_waiting() {
        let (queue, jobs) = sync_channel(1);
        let p = Prefaulter { queue };
        let file = memfd(PAGE as u64);
        let region = Arc::new(Region::map(&file).unwrap());
        assert!(p.submit(Job::new(region.clone())));
        assert!(!p.submit(Job::new(region.clone())));
        drop(jobs);
        assert!(!p.submit(Job::new(region)), "helper gone");
    }

    #[test]
    fn the_helper_maps_a_submitted_job_in() {
        let len = 1 << 20;
        let file = memfd(len as u64);
        let _client = Region::map_populated(&file).unwrap();
        let ours = Arc::new(Region::map(&file).unwrap());
        let p = Prefaulter::start().unwrap();
        assert!(p.submit(Job::new(ours.clone())));
        // The helper drops its clone when done.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while Arc::strong_count(&ours) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the helper never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let faults = faults_writing(&ours);
        assert!(
            faults < 16,
            "{faults} faults writing a mapping the helper touched"
        );
    }
}
