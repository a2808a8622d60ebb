//! Shared-memory transport for tickwire: the same byte stream as TCP, carried by two
//! bounded single-producer/single-consumer byte rings in a mapping private to one
//! client and the router.
//!
//! - [`Listener`] (router): a Unix socket (`/dev/shm/tickwire-NAME.sock`, mode 0600);
//!   each accepted client gets a fresh sealed memfd mapping by `SCM_RIGHTS`, and its
//!   connection stays open as the doorbell both ways; the router's end is a
//!   [`ServerLink`] that reads and writes like a non-blocking socket
//!   (`io::Read`/`io::Write`, `WouldBlock` when empty/full).
//! - [`ClientLink`] (client): connect, `send`, `recv`, `wait`.
//! - [`ring`]: the ring and its wake protocol, safe code over [`ring::Mem`];
//!   [`bare_pair`] two ring ends without a router (the raw floor of the benchmarks).
//!
//! No syscall per message: a write is a copy and a release store; a side that sleeps
//! announces it in the ring header first, and only then is its doorbell rung.
//!
//! Safety: all `unsafe` lives in the private `raw` module (a mapping seen through
//! atomics and bounds-checked copies, each block with a `// SAFETY:` comment); the rest
//! of the crate denies it and `tests/confinement.rs` checks that no other module or
//! crate allows it. What a peer writes into shared memory is hostile input: indexes are
//! checked ([`ring::Corrupt`]), bytes are copied out before anything decodes them.
//! Design and failure handling: docs/shm.md.

#[cfg(not(loom))]
mod raw;
pub mod ring;
mod sync;

#[cfg(not(loom))]
mod closer;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
mod link;
#[cfg(not(loom))]
mod notify;
#[cfg(not(loom))]
mod prefault;

#[cfg(not(loom))]
pub use link::{
    socket_path, ClientLink, Listener, PeerProcess, Ready, ServerLink, DEFAULT_RING_BYTES,
    MAX_RING_BYTES, MIN_RING_BYTES,
};
#[cfg(not(loom))]
pub use raw::{Region, WatchedWord};

/// The address prefix that selects this transport: `shm:NAME`.
pub const ADDR_PREFIX: &str = "shm:";

/// [`valid_name`]'s rule, for error messages.
pub const NAME_RULE: &str = "1 to 64 letters, digits, '-', '_' or '.' (not starting with \
                             '.'), or a socket path with a '/' of at most 80 bytes, not \
                             ending in '/'";

/// The longest socket path a NAME with a `/` may be: the kernel takes at most 107 bytes
/// in a socket address, and the listener binds first in a private directory next to
/// the final path (at most 27 bytes longer than the directory it is in).
pub const MAX_PATH_NAME: usize = 80;

/// Whether `name` can name a router's shared-memory listener: 1 to 64 ASCII letters,
/// digits, `-`, `_` and `.`, not starting with `.` (it becomes a file name under
/// `/dev/shm`), or a name with a `/`: the socket path itself (at most
/// [`MAX_PATH_NAME`] bytes, no NUL, not a directory), placed where its directory's
/// permissions decide who may attach (docs/shm.md).
pub fn valid_name(name: &str) -> bool {
    if name.contains('/') {
        return name.len() <= MAX_PATH_NAME && !name.ends_with('/') && !name.contains('\0');
    }
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// `Some(NAME)` when `addr` is `shm:NAME` (NAME not empty).
pub fn parse_addr(addr: &str) -> Option<&str> {
    addr.strip_prefix(ADDR_PREFIX).filter(|n| !n.is_empty())
}

/// One end of a bare ring pair (no router, no doorbells): the floor the benchmarks
/// measure the transport against.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct BareEnd {
    /// Inbound ring.
    pub rx: ring::Consumer<std::sync::Arc<Region>>,
    /// Outbound ring.
    pub tx: ring::Producer<std::sync::Arc<Region>>,
}

/// Two connected [`BareEnd`]s over one fresh mapping with rings of `cap` bytes.
#[cfg(not(loom))]
pub fn bare_pair(cap: usize) -> std::io::Result<(BareEnd, BareEnd)> {
    let fd = rustix::fs::memfd_create("tickwire-bare", rustix::fs::MemfdFlags::CLOEXEC)?;
    let file = std::fs::File::from(fd);
    file.set_len(layout::mapping_len(cap) as u64)?;
    let region = std::sync::Arc::new(Region::map_populated(&file)?);
    let h = layout::Header::new(cap);
    let a = BareEnd {
        rx: ring::Consumer::new(region.clone(), h.router_to_client()),
        tx: ring::Producer::new(region.clone(), h.client_to_router()),
    };
    let b = BareEnd {
        rx: ring::Consumer::new(region.clone(), h.client_to_router()),
        tx: ring::Producer::new(region, h.router_to_client()),
    };
    Ok((a, b))
}
