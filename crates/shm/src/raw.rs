//! The crate's one unsafe module: a shared mapping seen only through raw pointers.
//!
//! A [`Region`] is a `MAP_SHARED` mapping of a memfd that another process maps too and
//! may write at any moment. Rust's references promise that nobody else writes the
//! memory behind them, so this module never hands out a `&[u8]` or `&mut [u8]` over the
//! mapping. It offers exactly three things:
//!
//! - [`Region::atomic_u64`] / [`Region::atomic_u32`]: shared references to atomics at
//!   fixed, aligned, in-bounds offsets (atomics are the one type whose memory may be
//!   written concurrently through other references, including another process's);
//! - [`Region::copy_out`]: a `memcpy` from the mapping into private memory;
//! - [`Region::copy_in`]: a `memcpy` from private memory into the mapping;
//! - [`WatchedWord`]: one such atomic `u64` held together with its region (an `Arc`),
//!   so that a loop over many mappings loads each word through one pointer.
//!
//! Every offset is bounds-checked here (a failed check panics: callers compute offsets
//! from their own private state, so a failure is a bug of ours, never peer input).
//! The copies race with the peer by design: what the peer writes while we copy out
//! can only make the copied bytes wrong, and the callers treat every copied byte as
//! hostile (decoded later from the private copy, never in place). Tearing is the worst
//! a racing writer achieves: the copy is a plain byte copy of memory no Rust reference
//! covers. The mapping's size cannot change under us: the memfd is sealed against
//! shrinking and growing before it is shared (see `link.rs`), so no access faults.
//!
//! [`Region::map_file_range`] maps a window of an ordinary file instead: the FIX file
//! store's log (`tickwire_fix::store`) copies its records into the window at its end
//! rather than `pwrite` them. The same operations apply, plus [`Region::populate`] and
//! [`Region::release`]. Its owner writes zeros to a range before copying into it, so
//! the file covers every byte written and a full disk fails that write, never a copy;
//! the file is not sealed, so another process that truncates it while it is mapped makes
//! the next access fault (`SIGBUS`, the process ends): a crash, never a read of freed
//! memory, and the store documents that its directory belongs to its session alone.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::MmapRaw;

/// A shared mapping, accessed only through atomics and bounds-checked copies.
#[derive(Debug)]
pub struct Region {
    map: MmapRaw,
}

impl Region {
    /// Maps all of `file` shared, read and write; pages fault in on first use.
    pub fn map(file: &File) -> io::Result<Region> {
        let map = MmapRaw::map_raw(file)?;
        Ok(Region { map })
    }

    /// [`Region::map`] with every page allocated and mapped now (`MADV_POPULATE_WRITE`),
    /// so the rings' first lap takes no page fault on the data path (a fault and a
    /// zeroed page per 4 KiB, microseconds each). The caller pays the zeroing (a few
    /// milliseconds for 16 MiB): the client does, at its handshake, never the router's
    /// event loop. A kernel without it (before 5.14) leaves the pages to first use.
    pub fn map_populated(file: &File) -> io::Result<Region> {
        let region = Region::map(file)?;
        // Best effort: the mapping works the same without it, only its first lap is slower.
        let _ = region.map.advise(memmap2::Advice::PopulateWrite);
        Ok(region)
    }

    /// Maps `len` bytes of `file` from byte `offset` (any offset: the mapping starts at
    /// the page that holds it, and offset 0 of the region is `offset`), shared, read and
    /// write; pages fault in on first use ([`Region::populate`] faults
    /// them in ahead). The caller makes sure the file extends to `offset + len` for as
    /// long as the region lives (see the module docs).
    pub fn map_file_range(file: &File, offset: u64, len: usize) -> io::Result<Region> {
        let map = memmap2::MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_raw(file)?;
        Ok(Region { map })
    }

    /// Allocates and maps the pages of `offset..offset + len` now
    /// (`MADV_POPULATE_WRITE`, Linux 5.14+), so that copies into them take no page
    /// fault. An error (an older kernel: `EINVAL`) changes nothing else: the pages
    /// fault in on first use.
    pub fn populate(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len, 1);
        self.map
            .advise_range(memmap2::Advice::PopulateWrite, offset, len)
    }

    /// Drops the page-table entries of `offset..offset + len` (`MADV_DONTNEED`, the
    /// range widened to whole pages), so that unmapping the region later has no pages
    /// left to tear down. The data stays: the mapping is shared, so the pages belong to
    /// the file (or memfd), and a later access maps them again.
    pub fn release(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len, 1);
        // SAFETY: `check` proved the range lies inside the mapping. `map_raw` maps
        // `MAP_SHARED` only, and for a shared mapping `MADV_DONTNEED` only unmaps the
        // pages: their content stays in the file's (memfd's) pages, which the next
        // access maps again, so no byte anyone reads changes. No Rust reference covers
        // the mapping (module docs), so none is invalidated.
        unsafe {
            self.map
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
        }
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Which pages of `offset..offset + len` are resident in memory (allocated: for a
    /// memfd, whether they exist at all), one byte per page into `out`, bit 0 set for a
    /// resident page (`mincore(2)`). `offset` must be a multiple of [`page_size`] and
    /// `out` hold a byte per page of the range; panics otherwise, or out of bounds.
    /// Never allocates or maps a page.
    pub fn resident(&self, offset: usize, len: usize, out: &mut [u8]) -> io::Result<()> {
        self.check(offset, len, 1);
        let page = page_size();
        assert!(
            offset % page == 0 && out.len() >= len.div_ceil(page),
            "mincore: offset {offset} not page-aligned or {} bytes for {len}",
            out.len()
        );
        let addr = self.map.as_ptr().wrapping_add(offset) as *mut libc::c_void;
        // SAFETY: `addr..addr + len` lies inside our mapping (checked above) and starts
        // on a page boundary (the mapping does, `offset` is a multiple of the page size);
        // `out` has a byte for each of its pages (checked); mincore writes only `out`.
        let r = unsafe { libc::mincore(addr, len, out.as_mut_ptr()) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// The atomic `u64` at byte `offset` (in bounds, at an 8-aligned address; panics
    /// otherwise).
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8);
        // SAFETY: `check` proved offset..offset+8 lies inside the mapping and that its
        // address is 8-byte aligned. The mapping lives as long as
        // `self`, which the returned reference borrows. `AtomicU64` has the size and
        // alignment of `u64`, every bit pattern is a valid value, and concurrent
        // writes by other threads or processes through atomic operations are exactly
        // what atomics permit. No `&`/`&mut` to plain bytes ever covers this range
        // (the ring layout keeps index words apart from ring data).
        unsafe { &*(self.map.as_ptr().wrapping_add(offset) as *const AtomicU64) }
    }

    /// The atomic `u32` at byte `offset` (in bounds, at a 4-aligned address; panics
    /// otherwise).
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4, 4);
        // SAFETY: as for `atomic_u64`, with 4 bytes and 4-byte alignment.
        unsafe { &*(self.map.as_ptr().wrapping_add(offset) as *const AtomicU32) }
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the mapping.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len(), 1);
        // SAFETY: `check` proved the source range lies inside the mapping, which lives
        // while `self` is borrowed. `dst` is private memory we borrow mutably, so the
        // ranges cannot overlap. The source may be written concurrently by the peer;
        // no Rust reference covers it, and the bytes copied are treated as untrusted
        // input by every caller (see the module docs).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().wrapping_add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }

    /// Copies `src` into the mapping at `offset`.
    pub fn copy_in(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len(), 1);
        // SAFETY: `check` proved the destination range lies inside the mapping, which
        // was mapped writable and lives while `self` is borrowed; `src` is private
        // memory, so the ranges cannot overlap. No Rust reference covers the
        // destination (only raw pointers), so writing it invalidates no borrow.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.map.as_mut_ptr().wrapping_add(offset),
                src.len(),
            )
        }
    }

    /// Panics unless `offset..offset+len` is inside the mapping and `offset` is a
    /// multiple of `align`. Offsets come from our own state, never from the peer.
    fn check(&self, offset: usize, len: usize, align: usize) {
        let end = offset.checked_add(len);
        // The address itself is checked for alignment, not only the offset: a region
        // from `map_file_range` starts where its offset does, which need not be aligned.
        let addr = (self.map.as_ptr() as usize).wrapping_add(offset);
        assert!(
            end.is_some_and(|e| e <= self.map.len()) && addr % align == 0,
            "shared-memory access out of bounds or misaligned: {offset}+{len} of {} (align {align})",
            self.map.len()
        );
    }
}

/// The credentials the kernel recorded for the peer of a Unix socket (`SO_PEERCRED`):
/// its process id, `None` when the kernel gives 0 (a peer in another PID namespace, which
/// has no number in ours), and its user id. Read into the kernel's own `ucred` layout:
/// rustix's `socket_peercred` keeps the pid as a non-zero type, and a 0 from the kernel
/// turned into an invalid value there (a client in a container failed to attach with
/// "Success (os error 0)").
pub fn peer_credentials(sock: &impl std::os::fd::AsFd) -> io::Result<(Option<u32>, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let fd = sock.as_fd().as_raw_fd();
    let out = std::ptr::addr_of_mut!(cred).cast::<libc::c_void>();
    // SAFETY: `fd` is a descriptor borrowed for the call; `out` points to a `ucred` we
    // own, `len` says its size, and the kernel writes at most `len` bytes there (any
    // bit pattern is a valid `ucred`: three integers).
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, out, &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let pid = u32::try_from(cred.pid).ok().filter(|&p| p != 0);
    Ok((pid, cred.uid))
}

/// `SO_PASSRIGHTS` (Linux 6.16): 0 makes a Unix socket refuse `SCM_RIGHTS`, the
/// sender's `sendmsg` failing with `EPERM`. The generic value; the few architectures
/// with their own socket option numbers are left to [`refuse_passed_descriptors`]'s
/// error.
#[cfg(not(any(
    target_arch = "sparc",
    target_arch = "sparc64",
    target_arch = "mips",
    target_arch = "mips64"
)))]
const SO_PASSRIGHTS: libc::c_int = 83;

/// Makes the Unix socket `sock` refuse descriptors passed to it (`SO_PASSRIGHTS` = 0;
/// a listening socket's connections inherit it). An error on a kernel without the
/// option (`ENOPROTOOPT` before Linux 6.16): see `closer.rs` for what happens then.
pub fn refuse_passed_descriptors(sock: &impl std::os::fd::AsFd) -> io::Result<()> {
    set_pass_rights(sock, false)
}

/// Sets `SO_PASSRIGHTS` on `sock` (see [`refuse_passed_descriptors`]); tests turn it
/// back on to exercise what a kernel without the option does.
pub fn set_pass_rights(sock: &impl std::os::fd::AsFd, on: bool) -> io::Result<()> {
    #[cfg(any(
        target_arch = "sparc",
        target_arch = "sparc64",
        target_arch = "mips",
        target_arch = "mips64"
    ))]
    {
        let _ = (sock, on);
        Err(io::ErrorKind::Unsupported.into())
    }
    #[cfg(not(any(
        target_arch = "sparc",
        target_arch = "sparc64",
        target_arch = "mips",
        target_arch = "mips64"
    )))]
    {
        use std::os::fd::AsRawFd;
        let flag: libc::c_int = on.into();
        let fd = sock.as_fd().as_raw_fd();
        let value = std::ptr::addr_of!(flag).cast::<libc::c_void>();
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `fd` is a descriptor borrowed for the call; `value` points to an
        // `int` we own for the call's duration and `len` is its size; the kernel only
        // reads it.
        let rc = unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, SO_PASSRIGHTS, value, len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The system's page size in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// An atomic `u64` of a region, held with the region: loading it is one load through
/// one pointer (not through a ring, an `Arc` and the region), for the router's scan of
/// every client's ring index each turn.
#[derive(Debug)]
pub struct WatchedWord {
    word: NonNull<AtomicU64>,
    /// Keeps the mapping `word` points into alive.
    _region: Arc<Region>,
}

impl WatchedWord {
    /// The word at byte `offset` of `region` (a multiple of 8, in bounds: checked as by
    /// [`Region::atomic_u64`]).
    pub fn new(region: Arc<Region>, offset: usize) -> WatchedWord {
        let word = NonNull::from(region.atomic_u64(offset));
        WatchedWord {
            word,
            _region: region,
        }
    }

    /// The word's value (a relaxed load: the watcher only looks for a change and reads
    /// through the ring itself, with its own ordering, when it sees one).
    #[inline]
    pub fn load(&self) -> u64 {
        // SAFETY: `word` came from `Region::atomic_u64` on the region `_region` keeps
        // alive (the mapping is unmapped only when the last `Arc` drops), so it points
        // to an in-bounds, aligned `AtomicU64` for as long as `self` lives; shared
        // references to atomics may coexist with any other atomic access.
        unsafe { self.word.as_ref() }.load(Ordering::Relaxed)
    }
}

// SAFETY: a `WatchedWord` is an `Arc<Region>` (Send and Sync, below) and a pointer into
// that region used only for atomic loads, which any thread may do.
unsafe impl Send for WatchedWord {}
// SAFETY: as for `Send`: `&WatchedWord` only allows an atomic load.
unsafe impl Sync for WatchedWord {}

// SAFETY: a `Region` is a pointer to a shared mapping; every access goes through
// atomics or through copies whose races are part of the contract above, so sharing it
// between threads adds nothing another process could not already do.
unsafe impl Send for Region {}
// SAFETY: as for `Send`: `&Region` only allows atomic access and racing-tolerant copies.
unsafe impl Sync for Region {}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(len: u64) -> Region {
        let fd =
            rustix::fs::memfd_create("tickwire-raw-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let file = File::from(fd);
        file.set_len(len).unwrap();
        Region::map(&file).unwrap()
    }

    #[test]
    fn a_watched_word_sees_stores_through_the_region_and_keeps_it_mapped() {
        let r = Arc::new(region(4096));
        let w = WatchedWord::new(r.clone(), 64);
        assert_eq!(w.load(), 0);
        r.atomic_u64(64).store(7, Ordering::Release);
        assert_eq!(w.load(), 7);
        drop(r);
        // The watch holds the last reference: the mapping is still there.
        assert_eq!(w.load(), 7);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_watched_word_outside_the_region_is_refused() {
        let _ = WatchedWord::new(Arc::new(region(4096)), 4096);
    }

    /// A region mapped from an offset that is not a multiple of 8 starts at an address
    /// that is not either: alignment is checked on the address, not the offset.
    #[test]
    fn atomics_in_a_region_from_an_unaligned_offset_are_checked_on_their_address() {
        let fd =
            rustix::fs::memfd_create("tickwire-raw-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let file = File::from(fd);
        file.set_len(8192).unwrap();
        let r = Region::map_file_range(&file, 4100, 64).unwrap();
        // File byte 4104 is 8-aligned in memory: region offset 4.
        r.atomic_u64(4).store(7, Ordering::Relaxed);
        let mut out = [0u8; 8];
        r.copy_out(4, &mut out);
        assert_eq!(u64::from_le_bytes(out), 7);
        let misaligned = std::panic::catch_unwind(|| r.atomic_u64(0).load(Ordering::Relaxed));
        assert!(
            misaligned.is_err(),
            "offset 0 is file byte 4100, not 8-aligned"
        );
        let misaligned = std::panic::catch_unwind(|| r.atomic_u32(2).load(Ordering::Relaxed));
        assert!(
            misaligned.is_err(),
            "offset 2 is file byte 4102, not 4-aligned"
        );
    }

    #[test]
    fn copies_round_trip_and_atomics_alias_the_bytes() {
        let r = region(4096);
        r.copy_in(100, b"hello");
        let mut out = [0u8; 5];
        r.copy_out(100, &mut out);
        assert_eq!(&out, b"hello");
        r.atomic_u64(8)
            .store(0x0102_0304_0506_0708, std::sync::atomic::Ordering::Relaxed);
        let mut w = [0u8; 8];
        r.copy_out(8, &mut w);
        assert_eq!(u64::from_ne_bytes(w), 0x0102_0304_0506_0708);
    }

    #[test]
    fn a_populated_mapping_is_resident_and_shared_with_a_plain_one() {
        let fd =
            rustix::fs::memfd_create("tickwire-raw-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let file = File::from(fd);
        file.set_len(1 << 20).unwrap();
        let populated = Region::map_populated(&file).unwrap();
        // Every page of the memfd was allocated by the populate (st_blocks counts them).
        use std::os::unix::fs::MetadataExt;
        assert!(file.metadata().unwrap().blocks() * 512 >= 1 << 20);
        let plain = Region::map(&file).unwrap();
        populated.copy_in(4096 * 7, b"both ends");
        let mut out = [0u8; 9];
        plain.copy_out(4096 * 7, &mut out);
        assert_eq!(&out, b"both ends");
    }

    #[test]
    fn a_file_window_writes_the_file_at_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("window");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(3 * 4096).unwrap();
        let w = Region::map_file_range(&file, 4096, 2 * 4096).unwrap();
        assert_eq!(w.len(), 2 * 4096);
        w.populate(0, 4096).unwrap();
        w.copy_in(10, b"in the file");
        w.copy_in(2 * 4096 - 3, b"end");
        // Released pages keep their bytes (a shared mapping): the next access maps them.
        w.release(0, 4096).unwrap();
        let mut back = [0u8; 11];
        w.copy_out(10, &mut back);
        assert_eq!(&back, b"in the file");
        let data = std::fs::read(&path).unwrap();
        assert_eq!(&data[4096 + 10..4096 + 21], b"in the file");
        assert_eq!(&data[3 * 4096 - 3..], b"end");
        assert!(data[..4096].iter().all(|&b| b == 0));
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn populate_past_the_end_panics() {
        let r = region(4096);
        let _ = r.populate(0, 8192);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn copy_past_the_end_panics() {
        let r = region(4096);
        let mut out = [0u8; 8];
        r.copy_out(4090, &mut out);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn misaligned_atomic_panics() {
        let r = region(4096);
        let _ = r.atomic_u64(4);
    }
}
