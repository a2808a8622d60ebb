//! The record format, byte by byte (little endian):
//!
//! ```text
//! u32 len | u32 crc32c(lsn bytes + payload) | u64 lsn | payload (len bytes)
//! ```
//!
//! The top bit of `len` marks a skip marker (see the crate docs): its payload is a
//! `u64` count of record numbers that a failed batch used, and its checksum is the
//! same crc XOR [`SKIP_CRC_XOR`], so that a flipped flag bit never turns a record into
//! a marker or back (the length field itself is outside the checksum).

/// Bytes before the payload.
pub(crate) const HEADER: usize = 16;

/// The highest record number a spool uses: 2^62 (at 100 million records a second,
/// 1,400 years). A record, a skip range or a segment name beyond it is damage: a
/// forged record numbered 2^64-1 made the next number wrap to 0, and the router then
/// deleted every segment as reclaimed (hostile-input probe).
pub(crate) const MAX_LSN: u64 = 1 << 62;
/// The flag bit in `len` that marks a skip marker.
pub(crate) const SKIP_FLAG: u32 = 0x8000_0000;
/// A skip marker's checksum is the record checksum XOR this ("SKPM").
pub(crate) const SKIP_CRC_XOR: u32 = 0x534B_504D;
/// A skip marker's payload length.
pub(crate) const SKIP_PAYLOAD: usize = 8;
/// A skip marker's size on disk.
pub(crate) const SKIP_RECORD: usize = HEADER + SKIP_PAYLOAD;
/// The largest payload the format can describe (the flag bit excluded).
pub(crate) const FORMAT_MAX_PAYLOAD: u32 = SKIP_FLAG - 1;

/// The checksum of one record: crc32c over the lsn bytes then the payload.
pub(crate) fn checksum(lsn: u64, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&lsn.to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

/// Appends one data record to `out` (no allocation once `out` has the capacity).
pub(crate) fn encode(out: &mut Vec<u8>, lsn: u64, payload: &[u8]) {
    // The caller checked `payload.len() <= max_record < SKIP_FLAG`.
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(lsn, payload).to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(payload);
}

/// A skip marker saying that record numbers `first .. first + count` were used by
/// batches that failed to be written.
pub(crate) fn encode_skip(first: u64, count: u64) -> [u8; SKIP_RECORD] {
    let payload = count.to_le_bytes();
    let mut out = [0u8; SKIP_RECORD];
    out[0..4].copy_from_slice(&(SKIP_FLAG | SKIP_PAYLOAD as u32).to_le_bytes());
    out[4..8].copy_from_slice(&(checksum(first, &payload) ^ SKIP_CRC_XOR).to_le_bytes());
    out[8..16].copy_from_slice(&first.to_le_bytes());
    out[16..24].copy_from_slice(&payload);
    out
}

/// A decoded header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub skip: bool,
    pub len: u32,
    pub crc: u32,
    pub lsn: u64,
}

impl Header {
    pub(crate) fn parse(b: &[u8; HEADER]) -> Header {
        let raw = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        Header {
            skip: raw & SKIP_FLAG != 0,
            len: raw & !SKIP_FLAG,
            crc: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            lsn: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }

    /// Whether the payload matches the checksum (for either kind of record). Recovery
    /// checks through running checksums instead (`Checksums` in recovery.rs), so that
    /// overlapping candidates cost no re-reading; this is the reference its tests use.
    #[cfg(test)]
    pub(crate) fn check(&self, payload: &[u8]) -> bool {
        let crc = checksum(self.lsn, payload);
        if self.skip {
            crc ^ SKIP_CRC_XOR == self.crc
        } else {
            crc == self.crc
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_parse() {
        let mut out = Vec::new();
        encode(&mut out, 7, b"hello");
        let h = Header::parse(out[..HEADER].try_into().unwrap());
        assert!(!h.skip);
        assert_eq!((h.len, h.lsn), (5, 7));
        assert!(h.check(&out[HEADER..]));
    }

    #[test]
    fn a_flipped_flag_bit_fails_the_checksum() {
        let mut out = Vec::new();
        encode(&mut out, 3, &9u64.to_le_bytes());
        out[3] ^= 0x80;
        let h = Header::parse(out[..HEADER].try_into().unwrap());
        assert!(h.skip);
        assert!(!h.check(&out[HEADER..]));

        let mut skip = encode_skip(3, 9);
        let h = Header::parse(skip[..HEADER].try_into().unwrap());
        assert!(h.skip && h.check(&skip[HEADER..]));
        skip[3] ^= 0x80;
        let h = Header::parse(skip[..HEADER].try_into().unwrap());
        assert!(!h.skip && !h.check(&skip[HEADER..]));
    }
}
