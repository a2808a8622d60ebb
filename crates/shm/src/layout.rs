//! The mapping's layout, byte by byte (docs/shm.md has the picture).
//!
//! ```text
//! offset  size  field
//!      0     8  magic "TWSHM\0\x02\0" (version 2)
//!      8     8  ring capacity in bytes (each direction; a power of two)
//!     64     8  client→router tail   (written by the client)
//!    128     8  client→router head   (written by the router)
//!    192     4  client→router parked (router sleeps: set by the router, cleared by either)
//!    256     8  router→client tail   (written by the router)
//!    320     8  router→client head   (written by the client)
//!    384     4  router→client parked (client sleeps)
//!    512   cap  client→router data
//! 512+cap  cap  router→client data
//! ```
//! Each index and flag has its own 64-byte cache line, so the two sides never write
//! the same line.

use crate::ring::{Mem, RingLayout};
use crate::sync::Ordering;

/// Version 2's magic number. Version 2 rings the peer through the handshake socket
/// (version 1 passed two eventfds, whose shared file status a client could make
/// blocking): a client and a router of different versions refuse each other at the
/// handshake.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TWSHM\0\x02\0");
/// Bytes before the first data area.
pub const HEADER_LEN: usize = 512;
/// Bytes of the handshake message (magic, capacity).
pub const HELLO_LEN: usize = 16;

/// The mapping's bytes for rings of `cap` bytes.
pub fn mapping_len(cap: usize) -> usize {
    HEADER_LEN + 2 * cap
}

/// What the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes per ring.
    pub cap: usize,
}

impl Header {
    /// A header for rings of `cap` bytes.
    pub fn new(cap: usize) -> Header {
        Header { cap }
    }

    /// The client→router ring.
    pub fn client_to_router(&self) -> RingLayout {
        RingLayout {
            tail: 64,
            head: 128,
            parked: 192,
            data: HEADER_LEN,
            cap: self.cap,
        }
    }

    /// The router→client ring.
    pub fn router_to_client(&self) -> RingLayout {
        RingLayout {
            tail: 256,
            head: 320,
            parked: 384,
            data: HEADER_LEN + self.cap,
            cap: self.cap,
        }
    }

    /// The handshake message.
    pub fn to_bytes(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..].copy_from_slice(&(self.cap as u64).to_le_bytes());
        b
    }

    /// Parses a handshake message; `None` unless the magic matches and the capacity is
    /// a power of two in the accepted range.
    pub fn from_bytes(b: &[u8; HELLO_LEN]) -> Option<Header> {
        let mut word = [0u8; 8];
        word.copy_from_slice(&b[..8]);
        if u64::from_le_bytes(word) != MAGIC {
            return None;
        }
        word.copy_from_slice(&b[8..]);
        let cap = usize::try_from(u64::from_le_bytes(word)).ok()?;
        let ok = cap.is_power_of_two()
            && (crate::link::MIN_RING_BYTES..=crate::link::MAX_RING_BYTES).contains(&cap);
        ok.then_some(Header { cap })
    }
}

/// Writes the header into a fresh (zeroed) mapping.
pub fn write_header(mem: &impl Mem, h: Header) {
    mem.word(0).store(MAGIC, Ordering::Relaxed);
    mem.word(8).store(h.cap as u64, Ordering::Release);
}

/// Reads the header back (`None` when the magic is wrong).
pub fn read_header(mem: &impl Mem) -> Option<Header> {
    let cap = mem.word(8).load(Ordering::Acquire);
    (mem.word(0).load(Ordering::Relaxed) == MAGIC).then_some(Header { cap: cap as usize })
}
