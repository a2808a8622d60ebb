//! The FIX tag=value codec: framing, zero-copy parsing, encoding, UTC timestamps.
//!
//! # Design
//!
//! * **Framing** ([`frame_len`]) looks only at the first two fields: `8=BeginString`
//!   and `9=BodyLength`. The message length is `header + BodyLength + 7` (the trailer
//!   `10=xxx<SOH>` is always seven bytes), so a driver knows from the first ~20 bytes how
//!   much to buffer and can refuse anything above its `max_len` before buffering it.
//!   After garbage, the error says how many bytes to drop to reach the next `8=FIX`
//!   candidate ([`FrameError::skip`]). A BodyLength that misses the trailer makes the
//!   framer search for the next `<SOH>10=`; a driver reading in pieces keeps a
//!   [`FrameScan`] so that the search resumes ([`frame_len_resumable`]) instead of
//!   starting again at every read.
//! * **Parsing** ([`parse`]) walks a complete message once, recording each field as a
//!   tag plus a byte range into the borrowed buffer ([`Field`]) in a caller-owned,
//!   reusable table ([`Fields`]): no allocation per message once the table has grown
//!   to the largest message seen. Fields stay in wire order, so repeating groups can be
//!   resolved afterwards with a dictionary (see `dict.rs`); without one, access is flat
//!   ([`MessageRef::get`] returns the first occurrence, by linear scan; for the ~20
//!   fields of a typical message a scan beats any index). BeginString, BodyLength,
//!   MsgType must be the first three fields and CheckSum the last one; BodyLength and
//!   CheckSum are verified.
//! * **Data fields** (type `data`, which may contain SOH) are taken by the length in
//!   their companion length field, from a fixed table of the standard pairs
//!   ([`data_length_tag`]): RawData 96/95, XmlData 213/212, EncodedText 355/354,
//!   Signature 89/93, SecureData 91/90 and the other `Encoded*`/`*Len` pairs of FIX.4.x
//!   and FIX 5.0. QuickFIX takes this from the dictionary; a fixed table keeps the parser
//!   dictionary-free. A custom data field outside this table is parsed up to the first
//!   SOH like any other field. The length field is the last one with that tag anywhere
//!   before the data field (none: the data field is read up to the first SOH), found
//!   in constant time per field.
//! * **Errors** are values ([`FrameError`], [`ParseError`]) carrying the offending tag
//!   where there is one, with [`ParseError::is_garbled`] (QuickFIX drops such messages
//!   silently) and [`ParseError::session_reject_reason`] (QuickFIX answers with a
//!   session-level Reject with that SessionRejectReason) so the session can answer
//!   exactly as QuickFIX does. No input makes the parser panic.
//! * **Encoding** ([`Encoder`]) appends fields to a reusable buffer, leaving a gap in
//!   front of the body; [`Encoder::finish`] writes `8=..|9=len|` right-aligned into the
//!   gap, sums the bytes once for the CheckSum and appends `10=xxx|`, and returns the
//!   finished message as a slice of its buffer. Integers are formatted with `itoa`.
//!   Per-session constant header fields (49, 56, 50, 57, 115, 128...) are cached as one
//!   byte string ([`Encoder::set_header_fields`]) copied right after 35.
//! * **Timestamps** ([`write_utc_timestamp`], [`parse_utc_timestamp`] and friends) use
//!   integer calendar arithmetic, no calendar library.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

mod time;

use thiserror::Error;

pub use time::{
    format_utc_timestamp, parse_utc_date_only, parse_utc_time_only, parse_utc_timestamp,
    write_utc_date_only, write_utc_time_only, write_utc_timestamp, TimestampPrecision,
    TimestampReader, TimestampWriter,
};

/// The FIX field delimiter (Start Of Header, 0x01).
pub const SOH: u8 = 0x01;

/// Length of the CheckSum trailer `10=xxx<SOH>`.
const TRAILER_LEN: usize = 7;
/// Longest BeginString value accepted by [`frame_len`] (`FIXT.1.1` is 8 bytes).
const MAX_BEGIN_STRING: usize = 16;
/// Most BodyLength digits accepted by [`frame_len`] (over a billion bytes is garbage).
const MAX_BODY_LENGTH_DIGITS: usize = 9;
/// The prefix every FIX message starts with, used to resynchronise after garbage.
const MAGIC: &[u8] = b"8=FIX";

/// Why [`frame_len`] cannot frame a message at the start of the buffer. Every variant
/// means "the bytes at the start are not (the start of) a good message": drop
/// [`FrameError::skip`] bytes and call again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The buffer does not start with `8=FIX`, or the BeginString is too long or
    /// has no SOH.
    #[error("garbage before a FIX message (skip {skip} bytes)")]
    Garbage {
        /// Bytes to drop to reach the next `8=FIX` candidate.
        skip: usize,
    },
    /// Field 2 is not `9=<digits><SOH>`.
    #[error("BodyLength (9) missing or malformed (skip {skip} bytes)")]
    BadBodyLength {
        /// Bytes to drop to reach the next `8=FIX` candidate.
        skip: usize,
    },
    /// BodyLength points somewhere that is not `10=xxx<SOH>`: the declared length is
    /// wrong (or the message is corrupt).
    #[error("BodyLength (9) does not lead to the CheckSum (10) field (skip {skip} bytes)")]
    BodyLengthMismatch {
        /// Bytes to drop to reach the next `8=FIX` candidate.
        skip: usize,
    },
    /// The message would be longer than the caller's limit. Detected from the header
    /// alone, before the body is buffered.
    #[error("message of {len} bytes exceeds the limit of {max} (skip {skip} bytes)")]
    TooLong {
        /// Total message length announced by BodyLength.
        len: usize,
        /// The limit passed to [`frame_len`].
        max: usize,
        /// Bytes to drop to reach the next `8=FIX` candidate in what is buffered.
        skip: usize,
    },
}

impl FrameError {
    /// How many bytes at the start of the buffer to discard before calling
    /// [`frame_len`] again: the offset of the next `8=FIX` after the first byte, or, if
    /// there is none, everything except a trailing partial `8=FIX` prefix (which may be
    /// completed by the next read). Always at least 1, so the caller makes progress.
    pub fn skip(&self) -> usize {
        match *self {
            FrameError::Garbage { skip }
            | FrameError::BadBodyLength { skip }
            | FrameError::BodyLengthMismatch { skip }
            | FrameError::TooLong { skip, .. } => skip,
        }
    }
}

/// Offset of the next `8=FIX` candidate in `buf` after position 0 (see
/// [`FrameError::skip`]). Always at least 1 for a non-empty buffer.
fn resync(buf: &[u8]) -> usize {
    let n = buf.len();
    let mut i = 1;
    while i < n {
        if buf[i] == b'8' {
            let rest = &buf[i..];
            let k = rest.len().min(MAGIC.len());
            if rest[..k] == MAGIC[..k] {
                return i;
            }
        }
        i += 1;
    }
    n.max(1)
}

/// Finds the first SOH in `buf[from..to]` (`to` clamped to the buffer length). Scans
/// eight bytes at a time (SWAR: a word XOR 0x01.. has a zero byte where SOH was).
#[inline]
fn find_soh(buf: &[u8], from: usize, to: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let to = to.min(buf.len());
    if from >= to {
        return None;
    }
    let hay = &buf[from..to];
    let mut i = 0;
    while i + 8 <= hay.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&hay[i..i + 8]);
        let x = u64::from_le_bytes(word) ^ ONES;
        // The lowest set bit marks the first zero byte (false positives only occur
        // above a true zero byte).
        let z = x.wrapping_sub(ONES) & !x & HIGHS;
        if z != 0 {
            return Some(from + i + (z.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    hay[i..]
        .iter()
        .position(|&b| b == SOH)
        .map(|p| from + i + p)
}

/// Length of the complete message at the start of `buf` (`8=..|9=len|...|10=xxx|`).
///
/// * `Ok(Some(n))`: `buf[..n]` is one complete message as far as framing can tell (it
///   starts with `8=FIX`, BodyLength is well formed and leads exactly to a `10=xxx<SOH>`
///   trailer). Fields, tag syntax and the CheckSum are checked by [`parse`].
/// * `Ok(None)`: what is there is a valid beginning; read more bytes. The answer for a
///   prefix of a message is always `Ok(None)`, so a stream can be split anywhere.
/// * `Err(e)`: the start of the buffer is garbage, BodyLength is malformed or wrong, or
///   the message would exceed `max_len` bytes (known as soon as field 9 is complete,
///   before the body is buffered). Drop `e.skip()` bytes and call again to
///   resynchronise on the next `8=FIX`.
#[inline]
pub fn frame_len(buf: &[u8], max_len: usize) -> Result<Option<usize>, FrameError> {
    frame_len_resumable(buf, max_len, &mut FrameScan::default())
}

/// Where [`frame_len_resumable`] left off in a buffer that only grows at its end: how
/// far the search for the trailer of a frame whose BodyLength misses it has got (see
/// [`frame_len`]'s "waits for more bytes"). Without it, every call searched again
/// from the declared end, so a peer that announced a short BodyLength and then
/// trickled bytes without a `<SOH>10=` made the reader rescan its whole buffer per
/// read: quadratic in the bytes received (hostile-input report F3: 4 MB in 200-byte
/// segments cost 4.0 s of CPU).
///
/// Keep one per read buffer; reset it ([`FrameScan::reset`]) whenever the start of
/// the buffer moves (a frame consumed or garbage skipped). A scan that belongs to
/// another frame start gives wrong framing, never a panic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameScan {
    /// The declared end (header + BodyLength) of the frame searched; 0: no search yet.
    declared_end: usize,
    /// The search goes on from this offset: before the trailer is found, no
    /// `<SOH>10=` starts before it; after, no SOH ends the CheckSum value before it.
    next: usize,
    /// Where the CheckSum value after the first `<SOH>10=` starts, once found.
    value: Option<usize>,
}

impl FrameScan {
    /// Forgets the search (the start of the buffer moved).
    #[inline]
    pub fn reset(&mut self) {
        *self = FrameScan::default();
    }
}

/// [`frame_len`] for a buffer read in pieces: gives the same answers, and a frame whose
/// BodyLength misses the trailer is searched only in the bytes added since the last
/// call with the same `scan`, so the total work is linear in the bytes received
/// whatever the segment sizes. `scan` must be reset whenever the buffer's start
/// moves (see [`FrameScan`]).
#[inline]
pub fn frame_len_resumable(
    buf: &[u8],
    max_len: usize,
    scan: &mut FrameScan,
) -> Result<Option<usize>, FrameError> {
    let k = buf.len().min(MAGIC.len());
    if buf[..k] != MAGIC[..k] {
        return Err(FrameError::Garbage { skip: resync(buf) });
    }
    if buf.len() <= MAGIC.len() {
        return Ok(None);
    }
    // 8=<BeginString><SOH>
    let limit = 2 + MAX_BEGIN_STRING + 1;
    let Some(soh8) = find_soh(buf, 2, limit) else {
        if buf.len() >= limit {
            return Err(FrameError::Garbage { skip: resync(buf) });
        }
        return Ok(None);
    };
    // 9=<digits><SOH>
    let p = soh8 + 1;
    let mut i = p;
    for &expect in b"9=" {
        match buf.get(i) {
            None => return Ok(None),
            Some(&c) if c == expect => i += 1,
            Some(_) => return Err(FrameError::BadBodyLength { skip: resync(buf) }),
        }
    }
    let digits_start = i;
    let mut body_len: usize = 0;
    loop {
        match buf.get(i) {
            None => return Ok(None),
            Some(&SOH) if i > digits_start => break,
            Some(&c) if c.is_ascii_digit() && i - digits_start < MAX_BODY_LENGTH_DIGITS => {
                body_len = body_len * 10 + usize::from(c - b'0');
                i += 1;
            }
            Some(_) => return Err(FrameError::BadBodyLength { skip: resync(buf) }),
        }
    }
    let body_start = i + 1;
    let total = body_start + body_len + TRAILER_LEN;
    if total > max_len {
        return Err(FrameError::TooLong {
            len: total,
            max: max_len,
            skip: resync(buf),
        });
    }
    if buf.len() < total {
        return Ok(None);
    }
    let t = &buf[total - TRAILER_LEN..total];
    // The trailer must follow an SOH (the end of the last body field) unless the body is
    // empty, which parse() rejects anyway (MsgType missing).
    let soh_before = body_len == 0 || buf[body_start + body_len - 1] == SOH;
    if !soh_before || &t[..3] != b"10=" || t[6] != SOH {
        return mismatched_frame(buf, body_start + body_len, max_len, scan);
    }
    Ok(Some(total))
}

/// A BodyLength that does not lead to the trailer: the frame QuickFIX's parser cuts
/// (`Parser::readFixMessage`): from the first `<SOH>10=` at or after the declared end
/// (one byte before it) to the SOH after it. A BodyLength too short gives the message
/// itself; one too long swallows what follows up to the next trailer (recorded:
/// `body_length_wrong`, `garbled_bad_length`). [`parse`] then finds the mismatch and the
/// session ignores the frame as garbled. Waits for more bytes while no trailer is there,
/// at most up to `max_len`.
#[cold]
fn mismatched_frame(
    buf: &[u8],
    declared_end: usize,
    max_len: usize,
    scan: &mut FrameScan,
) -> Result<Option<usize>, FrameError> {
    if scan.declared_end != declared_end {
        *scan = FrameScan {
            declared_end,
            next: declared_end.saturating_sub(1),
            value: None,
        };
    }
    if scan.value.is_none() {
        let rest = buf.get(scan.next..).unwrap_or_default();
        #[cfg(test)]
        work::add(rest.len());
        match rest.windows(4).position(|w| w == b"\x0110=") {
            Some(p) => {
                scan.value = Some(scan.next + p + 4);
                scan.next += p + 4;
            }
            // The last three bytes may start a `<SOH>10=` the next read completes.
            None => scan.next = scan.next.max(buf.len().saturating_sub(3)),
        }
    }
    let end = match scan.value {
        Some(_) => {
            let rest = buf.get(scan.next..).unwrap_or_default();
            #[cfg(test)]
            work::add(rest.len());
            match rest.iter().position(|&b| b == SOH) {
                Some(p) => Some(scan.next + p + 1),
                None => {
                    scan.next = scan.next.max(buf.len());
                    None
                }
            }
        }
        None => None,
    };
    match end {
        Some(n) if n <= max_len => Ok(Some(n)),
        Some(n) => Err(FrameError::TooLong {
            len: n,
            max: max_len,
            skip: resync(buf),
        }),
        None if buf.len() >= max_len => Err(FrameError::TooLong {
            len: buf.len(),
            max: max_len,
            skip: resync(buf),
        }),
        None => Ok(None),
    }
}

/// SessionRejectReason (373) values, as QuickFIX uses them: the ones the codec's errors
/// map to and the ones the session sends ([`crate::session::session_reject`] re-exports
/// them with QuickFIX's texts).
pub mod reject_reason {
    /// 0 Invalid tag number.
    pub const INVALID_TAG_NUMBER: u32 = 0;
    /// 1 Required tag missing.
    pub const REQUIRED_TAG_MISSING: u32 = 1;
    /// 2 Tag not defined for this message type.
    pub const TAG_NOT_DEFINED_FOR_MESSAGE: u32 = 2;
    /// 3 Undefined tag.
    pub const UNDEFINED_TAG: u32 = 3;
    /// 4 Tag specified without a value.
    pub const TAG_WITHOUT_VALUE: u32 = 4;
    /// 4, the same as [`TAG_WITHOUT_VALUE`] (the name the codec used first).
    pub const TAG_SPECIFIED_WITHOUT_A_VALUE: u32 = TAG_WITHOUT_VALUE;
    /// 5 Value is incorrect (out of range) for this tag.
    pub const VALUE_IS_INCORRECT: u32 = 5;
    /// 6 Incorrect data format for value.
    pub const INCORRECT_DATA_FORMAT: u32 = 6;
    /// 9 CompID problem.
    pub const COMPID_PROBLEM: u32 = 9;
    /// 10 SendingTime accuracy problem.
    pub const SENDING_TIME_ACCURACY: u32 = 10;
    /// 11 Invalid MsgType.
    pub const INVALID_MSG_TYPE: u32 = 11;
    /// 13 Tag appears more than once.
    pub const TAG_APPEARS_MORE_THAN_ONCE: u32 = 13;
    /// 14 Tag specified out of required order.
    pub const TAG_OUT_OF_ORDER: u32 = 14;
    /// 16 Incorrect NumInGroup count for repeating group.
    pub const INCORRECT_NUM_IN_GROUP: u32 = 16;
}

/// Why [`parse`] rejected a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The message is larger than 4 GiB (field offsets are u32).
    #[error("message too large to parse")]
    TooLarge,
    /// The first field is not BeginString (8).
    #[error("BeginString (8) is not the first field")]
    BeginStringNotFirst,
    /// The second field is not BodyLength (9).
    #[error("BodyLength (9) is not the second field")]
    BodyLengthNotSecond,
    /// The third field is not MsgType (35).
    #[error("MsgType (35) is not the third field")]
    MsgTypeNotThird,
    /// BodyLength does not match the number of bytes between it and the CheckSum.
    #[error("BodyLength (9) is {declared} but the body has {actual} bytes")]
    BodyLengthMismatch {
        /// The value of field 9.
        declared: u64,
        /// The number of bytes after 9's SOH up to and including the SOH before 10=.
        actual: u64,
    },
    /// The message ends without a CheckSum (10) field (truncated).
    #[error("CheckSum (10) missing: message truncated")]
    MissingCheckSum,
    /// The CheckSum (10) field is followed by more bytes.
    #[error("CheckSum (10) is not the last field")]
    CheckSumNotLast,
    /// The CheckSum value is not exactly three digits.
    #[error("CheckSum (10) is not three digits")]
    CheckSumFormat,
    /// The CheckSum does not match the bytes.
    #[error("CheckSum (10) is {declared:03} but the message sums to {computed:03}")]
    BadCheckSum {
        /// The value of field 10.
        declared: u16,
        /// The sum of the bytes before `10=` modulo 256.
        computed: u8,
    },
    /// A tag is not a positive decimal number followed by `=` (non-digit, leading zero,
    /// empty, more than 9 digits, or no `=`); `offset` is where the field starts in the message.
    #[error("malformed tag at byte {offset}")]
    InvalidTag {
        /// Byte offset of the start of the field.
        offset: u32,
    },
    /// Tag 0 (not a valid tag number).
    #[error("invalid tag number {tag}")]
    InvalidTagNumber {
        /// The tag number (0).
        tag: u32,
    },
    /// `tag=` followed directly by SOH.
    #[error("tag {tag} specified without a value")]
    EmptyValue {
        /// The tag without a value.
        tag: u32,
    },
    /// A field value is not terminated by SOH before the end of the message.
    #[error("value of tag {tag} not terminated by SOH")]
    MissingSoh {
        /// The unterminated field's tag.
        tag: u32,
    },
    /// A value has the wrong format: BodyLength (9) or a data-length field not a plain
    /// integer.
    #[error("incorrect data format for value of tag {tag}")]
    IncorrectDataFormat {
        /// The offending tag.
        tag: u32,
    },
    /// A data field's length (from its length field) runs past the end of the message
    /// or is not followed by SOH.
    #[error("data field {tag}: length from tag {length_tag} does not match the data")]
    DataLengthMismatch {
        /// The data field's tag (e.g. 96).
        tag: u32,
        /// Its length field's tag (e.g. 95).
        length_tag: u32,
    },
}

impl ParseError {
    /// The tag the error is about, if any (for RefTagID (371) in a Reject).
    pub fn tag(&self) -> Option<u32> {
        match *self {
            ParseError::BeginStringNotFirst => Some(8),
            ParseError::BodyLengthNotSecond | ParseError::BodyLengthMismatch { .. } => Some(9),
            ParseError::MsgTypeNotThird => Some(35),
            ParseError::MissingCheckSum
            | ParseError::CheckSumNotLast
            | ParseError::CheckSumFormat
            | ParseError::BadCheckSum { .. } => Some(10),
            ParseError::InvalidTagNumber { tag }
            | ParseError::EmptyValue { tag }
            | ParseError::MissingSoh { tag }
            | ParseError::IncorrectDataFormat { tag }
            | ParseError::DataLengthMismatch { tag, .. } => Some(tag),
            ParseError::TooLarge | ParseError::InvalidTag { .. } => None,
        }
    }

    /// True for errors QuickFIX treats as a garbled message, which the FIX session
    /// protocol says to ignore (no Reject, no sequence number consumed): framing and
    /// checksum problems and a broken standard header/trailer.
    pub fn is_garbled(&self) -> bool {
        matches!(
            self,
            ParseError::TooLarge
                | ParseError::BeginStringNotFirst
                | ParseError::BodyLengthNotSecond
                | ParseError::MsgTypeNotThird
                | ParseError::BodyLengthMismatch { .. }
                | ParseError::MissingCheckSum
                | ParseError::CheckSumNotLast
                | ParseError::CheckSumFormat
                | ParseError::BadCheckSum { .. }
                | ParseError::MissingSoh { .. }
                | ParseError::InvalidTag { .. }
                | ParseError::DataLengthMismatch { .. }
        )
    }

    /// The SessionRejectReason (373) for a session-level Reject, for the errors that
    /// QuickFIX answers with a Reject rather than ignoring the message: tag 0 →
    /// 0 "Invalid tag number", empty value → 4 "Tag specified without a value",
    /// malformed data length → 6 "Incorrect data format for value". None for garbled
    /// messages (see [`ParseError::is_garbled`]).
    pub fn session_reject_reason(&self) -> Option<u32> {
        match self {
            ParseError::InvalidTagNumber { .. } => Some(reject_reason::INVALID_TAG_NUMBER),
            ParseError::EmptyValue { .. } => Some(reject_reason::TAG_SPECIFIED_WITHOUT_A_VALUE),
            ParseError::IncorrectDataFormat { .. } => Some(reject_reason::INCORRECT_DATA_FORMAT),
            _ => None,
        }
    }
}

/// For a data field (type `data`, may contain SOH), the tag of the length field that
/// precedes it; None for any other tag. The fixed table of standard pairs:
///
/// | data | length | name |
/// |------|--------|------|
/// | 89 | 93 | Signature / SignatureLength |
/// | 91 | 90 | SecureData / SecureDataLen |
/// | 96 | 95 | RawData / RawDataLength |
/// | 213 | 212 | XmlData / XmlDataLen |
/// | 349 | 348 | EncodedIssuer |
/// | 351 | 350 | EncodedSecurityDesc |
/// | 353 | 352 | EncodedListExecInst |
/// | 355 | 354 | EncodedText |
/// | 357 | 356 | EncodedSubject |
/// | 359 | 358 | EncodedHeadline |
/// | 361 | 360 | EncodedAllocText |
/// | 363 | 362 | EncodedUnderlyingIssuer |
/// | 365 | 364 | EncodedUnderlyingSecurityDesc |
/// | 446 | 445 | EncodedListStatusText |
/// | 619 | 618 | EncodedLegIssuer |
/// | 622 | 621 | EncodedLegSecurityDesc |
/// | 1185 | 1184 | SecurityXML / SecurityXMLLen |
/// | 1402 | 1401 | EncryptedPassword / EncryptedPasswordLen |
/// | 1404 | 1403 | EncryptedNewPassword / EncryptedNewPasswordLen |
pub const fn data_length_tag(data_tag: u32) -> Option<u32> {
    Some(match data_tag {
        89 => 93,
        91 => 90,
        96 => 95,
        213 => 212,
        349 | 351 | 353 | 355 | 357 | 359 | 361 | 363 | 365 => data_tag - 1,
        446 => 445,
        619 => 618,
        622 => 621,
        1185 => 1184,
        1402 => 1401,
        1404 => 1403,
        _ => return None,
    })
}

/// The data tags of [`data_length_tag`] as a bitset (all below 1408): the parser asks
/// it for every field, and a bit test is cheaper than the match.
const DATA_TAG_BITS: [u64; 22] = {
    let mut bits = [0u64; 22];
    let mut t = 0;
    while t < 22 * 64 {
        if data_length_tag(t as u32).is_some() {
            bits[t / 64] |= 1 << (t % 64);
        }
        t += 1;
    }
    bits
};

/// [`data_length_tag`] behind a bit test.
#[inline]
fn data_length_tag_fast(tag: u32) -> Option<u32> {
    let word = DATA_TAG_BITS.get(tag as usize / 64)?;
    if word & (1 << (tag % 64)) == 0 {
        return None;
    }
    data_length_tag(tag)
}

/// The length tags of [`data_length_tag`], one slot each in [`LengthFields`].
const LENGTH_TAGS: [u32; 19] = [
    93, 90, 95, 212, 348, 350, 352, 354, 356, 358, 360, 362, 364, 445, 618, 621, 1184, 1401, 1403,
];

// Every data tag's length tag has its slot (review: a data tag added to
// `data_length_tag` alone would have run to the first SOH, silently).
const _: () = {
    let mut t = 0;
    while t < 22 * 64 {
        if let Some(len) = data_length_tag(t as u32) {
            let mut found = false;
            let mut i = 0;
            while i < LENGTH_TAGS.len() {
                found |= LENGTH_TAGS[i] == len;
                i += 1;
            }
            assert!(
                found,
                "a length tag of data_length_tag is missing from LENGTH_TAGS"
            );
        }
        t += 1;
    }
};

/// The length tags as a bitset (all below 1408), for the scan of [`LengthFields::last`].
const LENGTH_TAG_BITS: [u64; 22] = {
    let mut bits = [0u64; 22];
    let mut i = 0;
    while i < LENGTH_TAGS.len() {
        let t = LENGTH_TAGS[i] as usize;
        bits[t / 64] |= 1 << (t % 64);
        i += 1;
    }
    bits
};

/// The slot of a length tag in [`LENGTH_TAGS`]; None for any other tag.
#[inline]
fn length_slot(tag: u32) -> Option<usize> {
    let word = LENGTH_TAG_BITS.get(tag as usize / 64)?;
    if word & (1 << (tag % 64)) == 0 {
        return None;
    }
    LENGTH_TAGS.iter().position(|&t| t == tag)
}

/// The last occurrence of each length field among the fields parsed so far, for the
/// data fields of a message. A data field takes its length from the LAST field with its
/// length tag anywhere before it (not necessarily the field just before), as the parser
/// always did; searching backwards from each data field for it made a message of many
/// data fields quadratic (hostile-input report F1: 160,000 copies of `96=a` froze the
/// engine for 5.7 s). Here every field is looked at once, when the first data field
/// after it asks: linear in the fields, whatever their mix.
#[derive(Clone, Copy, Debug)]
struct LengthFields {
    /// The fields before this index have been looked at.
    scanned: usize,
    /// Per slot of [`LENGTH_TAGS`], the last such field among the first `scanned`.
    last: [Option<Field>; LENGTH_TAGS.len()],
}

impl LengthFields {
    fn new() -> LengthFields {
        LengthFields {
            scanned: 0,
            last: [None; LENGTH_TAGS.len()],
        }
    }

    /// The last field with tag `length_tag` in `fields`, which must be the table this
    /// was last asked about, possibly grown (the parser only appends to it).
    #[inline]
    fn last(&mut self, fields: &[Field], length_tag: u32) -> Option<Field> {
        let new = fields.get(self.scanned..).unwrap_or_default();
        #[cfg(test)]
        work::add(new.len());
        for f in new {
            if let Some(slot) = length_slot(f.tag) {
                self.last[slot] = Some(*f);
            }
        }
        self.scanned = fields.len();
        self.last[length_slot(length_tag)?]
    }
}

/// One parsed field: its tag and the byte range `start..end` of its value in the raw
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The tag number (> 0).
    pub tag: u32,
    /// Offset of the first value byte.
    pub start: u32,
    /// Offset one past the last value byte (the position of its SOH).
    pub end: u32,
}

/// A reusable field table. [`parse`] clears and refills it; its allocation only grows
/// (to the largest message seen), so steady-state parsing does not allocate.
#[derive(Default, Debug, Clone)]
pub struct Fields {
    v: Vec<Field>,
}

impl Fields {
    /// An empty table.
    pub fn new() -> Fields {
        Fields::default()
    }

    /// An empty table with room for `n` fields.
    pub fn with_capacity(n: usize) -> Fields {
        Fields {
            v: Vec::with_capacity(n),
        }
    }

    /// Empties the table and gives back its allocation beyond `n` fields, if it holds
    /// more: a table kept for reuse after one huge message (a million fields: 12 MB)
    /// does not hold that memory for good.
    pub fn release_beyond(&mut self, n: usize) {
        if self.v.capacity() > n {
            self.v.clear();
            self.v.shrink_to(n);
        }
    }
}

/// A parsed message: the raw bytes plus its field table, both borrowed.
#[derive(Clone, Copy, Debug)]
pub struct MessageRef<'a> {
    raw: &'a [u8],
    fields: &'a [Field],
}

/// Parses a run of ASCII digits as u64 (no sign, no spaces, not empty, no overflow).
#[inline]
pub fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 20 {
        return None;
    }
    let mut acc: u64 = 0;
    for &c in v {
        if !c.is_ascii_digit() {
            return None;
        }
        acc = acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(acc)
}

/// Parses an optionally `-`-signed run of ASCII digits as i64.
#[inline]
pub fn parse_i64(v: &[u8]) -> Option<i64> {
    match v.split_first() {
        Some((b'-', rest)) => {
            let m = parse_u64(rest)?;
            if m <= i64::MAX as u64 + 1 {
                Some((m as i128).wrapping_neg() as i64)
            } else {
                None
            }
        }
        _ => i64::try_from(parse_u64(v)?).ok(),
    }
}

impl<'a> MessageRef<'a> {
    /// A message from its bytes and the field table a parse of exactly these bytes
    /// produced (e.g. [`crate::session::Session::event_fields`] beside the event's
    /// bytes). A table that does not belong to `raw` gives wrong values, never a panic:
    /// every accessor reads `raw` through bounds-checked offsets.
    pub fn from_parts(raw: &'a [u8], fields: &'a [Field]) -> MessageRef<'a> {
        MessageRef { raw, fields }
    }

    /// The whole message, `8=` to the trailing SOH.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// All fields in wire order (including 8, 9, 35 and 10).
    pub fn fields(&self) -> &'a [Field] {
        self.fields
    }

    /// The value bytes of a field of this message.
    pub fn value(&self, f: &Field) -> &'a [u8] {
        self.raw
            .get(f.start as usize..f.end as usize)
            .unwrap_or(&[])
    }

    /// The value of the first occurrence of `tag`.
    #[inline]
    pub fn get(&self, tag: u32) -> Option<&'a [u8]> {
        self.fields
            .iter()
            .find(|f| f.tag == tag)
            .map(|f| self.value(f))
    }

    /// The value of the first occurrence of `tag` as UTF-8 (None if absent or not UTF-8).
    pub fn get_str(&self, tag: u32) -> Option<&'a str> {
        std::str::from_utf8(self.get(tag)?).ok()
    }

    /// The first occurrence of `tag` as an unsigned integer; None if absent or not a
    /// plain run of digits fitting in u64.
    pub fn get_u64(&self, tag: u32) -> Option<u64> {
        parse_u64(self.get(tag)?)
    }

    /// The first occurrence of `tag` as a signed integer (optional leading `-`).
    pub fn get_i64(&self, tag: u32) -> Option<i64> {
        parse_i64(self.get(tag)?)
    }

    /// The first occurrence of `tag` as a Boolean: `Y` → true, `N` → false, else None.
    pub fn get_bool(&self, tag: u32) -> Option<bool> {
        match self.get(tag)? {
            b"Y" => Some(true),
            b"N" => Some(false),
            _ => None,
        }
    }

    /// The first occurrence of `tag` as a UTCTimestamp in Unix nanoseconds.
    pub fn get_timestamp(&self, tag: u32) -> Option<u64> {
        parse_utc_timestamp(self.get(tag)?)
    }

    /// MsgType (35), the third field.
    pub fn msg_type(&self) -> &'a [u8] {
        self.fields.get(2).map_or(&[], |f| self.value(f))
    }

    /// BeginString (8), the first field.
    pub fn begin_string(&self) -> &'a [u8] {
        self.fields.first().map_or(&[], |f| self.value(f))
    }

    /// MsgSeqNum (34), if present and numeric.
    pub fn seq_num(&self) -> Option<u64> {
        self.get_u64(34)
    }

    /// Every value of `tag`, in wire order (repeating-group members appear once per
    /// entry).
    pub fn get_all(&self, tag: u32) -> impl Iterator<Item = &'a [u8]> + 'a {
        let raw = self.raw;
        self.fields
            .iter()
            .filter(move |f| f.tag == tag)
            .map(move |f| raw.get(f.start as usize..f.end as usize).unwrap_or(&[]))
    }
}

/// Sum of the bytes modulo 256 (the FIX CheckSum of `bytes`).
#[inline]
pub fn checksum(bytes: &[u8]) -> u8 {
    // Sum in u32 lanes (vectorises) and reduce at the end; u32 cannot overflow below
    // 16 MiB, and chunking keeps that true for any length.
    let mut total: u32 = 0;
    for chunk in bytes.chunks(1 << 20) {
        let s: u32 = chunk.iter().map(|&b| u32::from(b)).sum();
        total = total.wrapping_add(s);
    }
    total as u8
}

/// Parses one complete message (as delimited by [`frame_len`]): BeginString, BodyLength
/// and MsgType must be the first three fields, CheckSum the last; tag syntax, empty
/// values, BodyLength and CheckSum are verified. Data fields of the standard
/// length/data pairs ([`data_length_tag`]) are taken by length and may contain SOH.
pub fn parse<'a>(raw: &'a [u8], fields: &'a mut Fields) -> Result<MessageRef<'a>, ParseError> {
    parse_inner::<false>(raw, fields, true)
}

/// Like [`parse`] but without verifying the CheckSum value (its format is still
/// checked), for messages already verified once (e.g. read back from the store).
pub fn parse_unchecked<'a>(
    raw: &'a [u8],
    fields: &'a mut Fields,
) -> Result<MessageRef<'a>, ParseError> {
    parse_inner::<false>(raw, fields, false)
}

/// Like [`parse`] (CheckSum verified when `verify_checksum`) but an empty value
/// (`tag=<SOH>`) is kept as an empty field instead of failing: QuickFIX rejects empty
/// values only where its validation looks (header, body, trailer), not inside
/// repeating groups (recorded: `empty_values`), which only a dictionary can tell.
pub fn parse_keeping_empty<'a>(
    raw: &'a [u8],
    fields: &'a mut Fields,
    verify_checksum: bool,
) -> Result<MessageRef<'a>, ParseError> {
    parse_inner::<true>(raw, fields, verify_checksum)
}

/// Parses the tag starting at `pos`; returns it and the position after `=`. Inlined
/// into the parser's loops: out of line, the call and the `Result` returned through
/// memory cost as much as the reading.
#[inline(always)]
fn parse_tag(raw: &[u8], pos: usize) -> Result<(u32, usize), ParseError> {
    // Tags of one to three digits (nearly every tag a session sees) from the four
    // bytes at `pos`, one comparison per byte instead of the bounds-checked digit
    // loop; any other form goes to the loop, which gives the same answer for these.
    if let Some(&[b0, b1, b2, b3]) = raw.get(pos..pos + 4) {
        let (d0, d1, d2) = (
            b0.wrapping_sub(b'1'),
            b1.wrapping_sub(b'0'),
            b2.wrapping_sub(b'0'),
        );
        if d0 <= 8 {
            let t0 = u32::from(d0) + 1;
            if b1 == b'=' {
                return Ok((t0, pos + 2));
            }
            if d1 <= 9 {
                let t1 = t0 * 10 + u32::from(d1);
                if b2 == b'=' {
                    return Ok((t1, pos + 3));
                }
                if d2 <= 9 && b3 == b'=' {
                    return Ok((t1 * 10 + u32::from(d2), pos + 4));
                }
            }
        }
    }
    parse_tag_loop(raw, pos)
}

/// [`parse_tag`] for tags of any length: the common form (1 to 9 digits, the first
/// not 0, then `=`) in a tight loop; any other form goes to the full parser, which
/// gives the same answer for this one. Out of line: tags of four digits or more are
/// rare, and the fast path stays small enough to inline.
#[inline(never)]
fn parse_tag_loop(raw: &[u8], pos: usize) -> Result<(u32, usize), ParseError> {
    let mut tag: u32 = 0;
    let mut i = pos;
    while let Some(&c) = raw.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        tag = tag.wrapping_mul(10).wrapping_add(u32::from(d));
        i += 1;
    }
    if raw.get(i) == Some(&b'=') && (1..=9).contains(&(i - pos)) && raw[pos] != b'0' {
        return Ok((tag, i + 1));
    }
    parse_tag_slow(raw, pos)
}

/// [`parse_tag`] for every form: QuickFIX's readings of odd tags, and the errors.
#[cold]
#[inline(never)]
fn parse_tag_slow(raw: &[u8], pos: usize) -> Result<(u32, usize), ParseError> {
    let bad = ParseError::InvalidTag { offset: pos as u32 };
    let mut tag: u32 = 0;
    let mut i = pos;
    loop {
        match raw.get(i) {
            Some(&b'=') => break,
            // At most 9 digits, so the u32 cannot overflow.
            Some(&c) if c.is_ascii_digit() && i - pos < 9 => {
                tag = tag * 10 + u32::from(c - b'0');
                i += 1;
            }
            Some(&b'-') | Some(b'0'..=b'9') if i == pos || raw[pos] == b'-' || i - pos >= 9 => {
                return quickfix_tag_number(raw, pos);
            }
            _ => return Err(bad),
        }
    }
    if i == pos {
        return Err(bad);
    }
    if tag == 0 {
        return Err(ParseError::InvalidTagNumber { tag: 0 });
    }
    if raw[pos] == b'0' {
        // QuickFIX reads `0112=` as tag 112 (recorded: neighbour_tag_forms).
        return quickfix_tag_number(raw, pos);
    }
    Ok((tag, i + 1))
}

/// A tag QuickFIX reads as a number although it is not a valid tag: a minus sign,
/// a leading zero or more than 9 digits. QuickFIX converts it to a C `int` (wrapping) and rejects the
/// message with "Invalid tag number" and that number as RefTagID (recorded:
/// `invalid_tag_number`, `-1=HI` → `371=-1`, `12345678901=HI` → `371=-539222987`). The
/// number travels in [`ParseError::InvalidTagNumber`] as the `int`'s bits (tags are
/// below 2^31). One that wraps to a positive number is that tag, as in QuickFIX.
#[cold]
fn quickfix_tag_number(raw: &[u8], pos: usize) -> Result<(u32, usize), ParseError> {
    let bad = ParseError::InvalidTag { offset: pos as u32 };
    let negative = raw.get(pos) == Some(&b'-');
    let mut i = pos + usize::from(negative);
    let digits = i;
    let mut v: i32 = 0;
    loop {
        match raw.get(i) {
            Some(&b'=') if i > digits => break,
            Some(&c) if c.is_ascii_digit() => {
                v = v.wrapping_mul(10).wrapping_add(i32::from(c - b'0'));
                i += 1;
            }
            _ => return Err(bad),
        }
    }
    if negative {
        v = v.wrapping_neg();
    }
    if v <= 0 {
        return Err(ParseError::InvalidTagNumber { tag: v as u32 });
    }
    Ok((v as u32, i + 1))
}

/// The end of a data field's value (its SOH), from the value of its length field `lf`.
#[inline]
fn data_end(
    raw: &[u8],
    vstart: usize,
    tag: u32,
    length_tag: u32,
    lf: Field,
) -> Result<usize, ParseError> {
    let len = raw
        .get(lf.start as usize..lf.end as usize)
        .and_then(parse_u64)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or(ParseError::IncorrectDataFormat { tag: length_tag })?;
    vstart
        .checked_add(len)
        .filter(|&e| raw.get(e) == Some(&SOH))
        .ok_or(ParseError::DataLengthMismatch { tag, length_tag })
}

/// The checks of the CheckSum field (`10=` at `field_start`, its value at
/// `vstart..vend`, `pos` past its SOH): BodyLength, last field, format, value.
#[allow(clippy::too_many_arguments)] // the parser's state, passed by value
#[inline]
fn check_trailer(
    raw: &[u8],
    field_start: usize,
    vstart: usize,
    vend: usize,
    pos: usize,
    body_start: usize,
    declared_body_len: u64,
    verify_checksum: bool,
) -> Result<(), ParseError> {
    let actual = (field_start - body_start) as u64;
    if actual != declared_body_len {
        return Err(ParseError::BodyLengthMismatch {
            declared: declared_body_len,
            actual,
        });
    }
    if pos != raw.len() {
        return Err(ParseError::CheckSumNotLast);
    }
    let cs = &raw[vstart..vend];
    if cs.len() != 3 || !cs.iter().all(u8::is_ascii_digit) {
        return Err(ParseError::CheckSumFormat);
    }
    if verify_checksum {
        let declared = cs.iter().fold(0u16, |a, &c| a * 10 + u16::from(c - b'0'));
        let computed = checksum(&raw[..field_start]);
        if declared != u16::from(computed) {
            return Err(ParseError::BadCheckSum { declared, computed });
        }
    }
    Ok(())
}

/// The parser behind [`parse`], [`parse_unchecked`] and [`parse_keeping_empty`];
/// `KEEP_EMPTY` a constant so that the common parse has no per-field test of it.
fn parse_inner<'a, const KEEP_EMPTY: bool>(
    raw: &'a [u8],
    fields: &'a mut Fields,
    verify_checksum: bool,
) -> Result<MessageRef<'a>, ParseError> {
    if raw.len() > u32::MAX as usize {
        return Err(ParseError::TooLarge);
    }
    let v = &mut fields.v;
    v.clear();
    // Set up at the first data field only: most messages have none.
    let mut lengths: Option<LengthFields> = None;
    let mut pos = 0usize;
    let mut declared_body_len: u64 = 0;
    let mut body_start = 0usize;
    // The standard header's first three fields (8, 9, 35); the body loop below.
    while pos < raw.len() && v.len() < 3 {
        // A broken tag or a missing SOH in these fields means the message is garbled.
        let garbled = match v.len() {
            0 => ParseError::BeginStringNotFirst,
            1 => ParseError::BodyLengthNotSecond,
            _ => ParseError::MsgTypeNotThird,
        };
        let Ok((tag, vstart)) = parse_tag(raw, pos) else {
            return Err(garbled);
        };
        let vend = match data_length_tag_fast(tag).and_then(|lt| {
            lengths
                .get_or_insert_with(LengthFields::new)
                .last(v, lt)
                .map(|f| (lt, f))
        }) {
            Some((length_tag, lf)) => data_end(raw, vstart, tag, length_tag, lf)?,
            None => find_soh(raw, vstart, raw.len()).ok_or(garbled)?,
        };
        pos = vend + 1;
        match (v.len(), tag) {
            (0, 8) => {}
            (0, _) => return Err(ParseError::BeginStringNotFirst),
            (1, 9) => {
                declared_body_len =
                    parse_u64(&raw[vstart..vend]).ok_or(ParseError::BodyLengthNotSecond)?;
                body_start = pos;
            }
            (1, _) => return Err(ParseError::BodyLengthNotSecond),
            (2, 35) => {}
            (2, _) => return Err(ParseError::MsgTypeNotThird),
            _ => {}
        }
        if vend == vstart && !KEEP_EMPTY {
            return Err(ParseError::EmptyValue { tag });
        }
        v.push(Field {
            tag,
            start: vstart as u32,
            end: vend as u32,
        });
    }
    // The rest: the checks above for a field past the third, in the same order (a
    // broken tag, a data field's length, the SOH, the CheckSum, an empty value).
    while pos < raw.len() {
        let field_start = pos;
        let (tag, vstart) = parse_tag(raw, pos)?;
        let vend = match data_length_tag_fast(tag).and_then(|lt| {
            lengths
                .get_or_insert_with(LengthFields::new)
                .last(v, lt)
                .map(|f| (lt, f))
        }) {
            Some((length_tag, lf)) => data_end(raw, vstart, tag, length_tag, lf)?,
            // The error only when there is no SOH: built for every field (`ok_or`),
            // it cost a conditional move and a store per field.
            None => match find_soh(raw, vstart, raw.len()) {
                Some(end) => end,
                None if tag == 10 => return Err(ParseError::CheckSumFormat),
                None => return Err(ParseError::MissingSoh { tag }),
            },
        };
        pos = vend + 1;
        if tag == 10 {
            check_trailer(
                raw,
                field_start,
                vstart,
                vend,
                pos,
                body_start,
                declared_body_len,
                verify_checksum,
            )?;
            v.push(Field {
                tag,
                start: vstart as u32,
                end: vend as u32,
            });
            return Ok(MessageRef { raw, fields: v });
        }
        if vend == vstart && !KEEP_EMPTY {
            return Err(ParseError::EmptyValue { tag });
        }
        v.push(Field {
            tag,
            start: vstart as u32,
            end: vend as u32,
        });
    }
    Err(match v.len() {
        0 => ParseError::BeginStringNotFirst,
        1 => ParseError::BodyLengthNotSecond,
        2 => ParseError::MsgTypeNotThird,
        _ => ParseError::MissingCheckSum,
    })
}

/// Room reserved in front of the body for `9=` digits and SOH (u32 fits in 10 digits).
const LEN_RESERVE: usize = 10 + 1;

/// A reusable message encoder.
///
/// ```
/// use tickwire_fix::codec::{Encoder, parse, Fields};
/// let mut enc = Encoder::new("FIX.4.4");
/// enc.set_header_fields(&[(49, b"CLIENT"), (56, b"VENUE")]);
/// enc.begin(b"0");
/// enc.field_u64(34, 7);
/// enc.field(52, b"20240102-03:04:05.678");
/// let msg = enc.finish();
/// let mut fields = Fields::default();
/// let m = parse(msg, &mut fields).unwrap();
/// assert_eq!(m.get(49), Some(&b"CLIENT"[..]));
/// ```
///
/// Layout: the buffer holds a gap, then the body starting with `35=`. [`Encoder::begin`]
/// writes `35=<type>` and the cached header fields (see
/// [`Encoder::set_header_fields`]); the caller appends the remaining fields in standard
/// order (for the session: 34, 52, other header fields, body, groups in dictionary
/// order; never 8, 9 or 10). [`Encoder::finish`] writes `8=..<SOH>9=len<SOH>` at the end
/// of the gap, computes the CheckSum over the message in one pass, appends `10=xxx<SOH>`
/// and returns the message. Values are written as given: the caller must not put SOH in
/// a value, except in data fields (write the length field first, or use
/// [`Encoder::field_data`]).
#[derive(Debug, Clone)]
pub struct Encoder {
    buf: Vec<u8>,
    /// `8=<BeginString><SOH>9=`.
    prefix: Vec<u8>,
    /// Cached `49=..<SOH>56=..<SOH>...`.
    header: Vec<u8>,
    /// Offset of the body (`35=`) in `buf`.
    body_start: usize,
    /// Offset of the finished message in `buf`, once finished.
    finished_at: Option<usize>,
    /// Timestamps of one second share their formatted date and time.
    stamps: TimestampWriter,
}

impl Encoder {
    /// An encoder for messages with this BeginString (e.g. "FIX.4.4", "FIXT.1.1").
    pub fn new(begin_string: &str) -> Encoder {
        let mut prefix = Vec::with_capacity(begin_string.len() + 5);
        prefix.extend_from_slice(b"8=");
        prefix.extend_from_slice(begin_string.as_bytes());
        prefix.push(SOH);
        prefix.extend_from_slice(b"9=");
        let body_start = prefix.len() + LEN_RESERVE;
        let mut buf = Vec::with_capacity(512);
        buf.resize(body_start, 0);
        Encoder {
            buf,
            prefix,
            header: Vec::new(),
            body_start,
            finished_at: None,
            stamps: TimestampWriter::default(),
        }
    }

    /// The BeginString this encoder writes.
    pub fn begin_string(&self) -> &[u8] {
        &self.prefix[2..self.prefix.len() - 3]
    }

    /// Caches header fields that never change in a session, written by
    /// [`Encoder::begin`] right after 35 in the order given. Give them in QuickFIX's
    /// order: SenderCompID (49), TargetCompID (56), then e.g. SenderSubID (50),
    /// TargetSubID (57), OnBehalfOfCompID (115), DeliverToCompID (128); the session
    /// then writes 34 and 52. Replaces any earlier set.
    pub fn set_header_fields(&mut self, fields: &[(u32, &[u8])]) {
        self.header.clear();
        for &(tag, value) in fields {
            push_field(&mut self.header, tag, value);
        }
    }

    /// Starts a message: discards anything written before, writes `35=<msg_type>` and
    /// the cached header fields.
    pub fn begin(&mut self, msg_type: &[u8]) {
        self.buf.truncate(self.body_start);
        self.finished_at = None;
        push_field(&mut self.buf, 35, msg_type);
        if !self.header.is_empty() {
            self.buf.extend_from_slice(&self.header);
        }
    }

    /// Appends `tag=value<SOH>`.
    #[inline]
    pub fn field(&mut self, tag: u32, value: &[u8]) {
        push_field(&mut self.buf, tag, value);
    }

    /// Appends `tag=value<SOH>`.
    #[inline]
    pub fn field_str(&mut self, tag: u32, value: &str) {
        push_field(&mut self.buf, tag, value.as_bytes());
    }

    /// Appends an unsigned integer field.
    #[inline]
    pub fn field_u64(&mut self, tag: u32, value: u64) {
        self.field(tag, itoa::Buffer::new().format(value).as_bytes());
    }

    /// Appends a signed integer field.
    #[inline]
    pub fn field_i64(&mut self, tag: u32, value: i64) {
        self.field(tag, itoa::Buffer::new().format(value).as_bytes());
    }

    /// Appends a Boolean field (`Y` / `N`).
    #[inline]
    pub fn field_bool(&mut self, tag: u32, value: bool) {
        push_field(&mut self.buf, tag, if value { b"Y" } else { b"N" });
    }

    /// Appends a UTCTimestamp field at the given precision.
    #[inline]
    pub fn field_timestamp(&mut self, tag: u32, unix_nanos: u64, p: TimestampPrecision) {
        push_field(&mut self.buf, tag, self.stamps.stamp(unix_nanos, p));
    }

    /// Appends a length/data pair: `length_tag=<len><SOH>data_tag=<data><SOH>` (the data
    /// may contain SOH).
    pub fn field_data(&mut self, length_tag: u32, data_tag: u32, data: &[u8]) {
        self.field_u64(length_tag, data.len() as u64);
        push_field(&mut self.buf, data_tag, data);
    }

    /// Appends pre-encoded fields (`tag=value<SOH>...`) verbatim.
    #[inline]
    pub fn raw_fields(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Completes the message: writes 8 and 9 in front of the body, appends
    /// `10=xxx<SOH>`, and returns the whole message. Calling it again without
    /// [`Encoder::begin`] returns the same message.
    pub fn finish(&mut self) -> &[u8] {
        if let Some(at) = self.finished_at {
            return &self.buf[at..];
        }
        let body_len = self.buf.len() - self.body_start;
        let mut itoa_buf = itoa::Buffer::new();
        let digits = itoa_buf.format(body_len).as_bytes();
        // Bodies over 10 digits (> 9.3 GB) cannot happen in practice; clamp the digits
        // to the reserved room rather than panic (the message would then be rejected
        // by the peer).
        let digits = &digits[digits.len().saturating_sub(LEN_RESERVE - 1)..];
        let len_at = self.body_start - 1 - digits.len();
        let start = len_at - self.prefix.len();
        copy_short(&mut self.buf[start..len_at], &self.prefix);
        copy_short(&mut self.buf[len_at..self.body_start - 1], digits);
        self.buf[self.body_start - 1] = SOH;
        push_trailer(&mut self.buf, start);
        self.finished_at = Some(start);
        &self.buf[start..]
    }

    /// The message returned by the last [`Encoder::finish`], if finished since the last
    /// [`Encoder::begin`].
    pub fn message(&self) -> Option<&[u8]> {
        self.finished_at.map(|at| &self.buf[at..])
    }
}

/// Appends the trailer `10=xxx<SOH>`: the CheckSum of `out[start..]`, which must be
/// the message from its `8=` on. The one trailer writer, for the [`Encoder`] and for
/// hand-assembled messages (the tick-to-trade venue's pre-encoded orders).
#[inline]
pub fn push_trailer(out: &mut Vec<u8>, start: usize) {
    let cs = checksum(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&[
        b'1',
        b'0',
        b'=',
        b'0' + cs / 100,
        b'0' + cs / 10 % 10,
        b'0' + cs % 10,
        SOH,
    ]);
}

/// Appends `tag=`. Tags below 1000 (nearly every field of a session) are written as a
/// fixed-size array, which compiles to a few stores instead of a formatter and a copy.
#[inline]
fn push_tag(out: &mut Vec<u8>, tag: u32) {
    let d = |n: u32| b'0' + (n % 10) as u8;
    match tag {
        0..=9 => out.extend_from_slice(&[d(tag), b'=']),
        10..=99 => out.extend_from_slice(&[d(tag / 10), d(tag), b'=']),
        100..=999 => out.extend_from_slice(&[d(tag / 100), d(tag / 10), d(tag), b'=']),
        _ => {
            out.extend_from_slice(itoa::Buffer::new().format(tag).as_bytes());
            out.push(b'=');
        }
    }
}

/// Appends `tag=value<SOH>`. A field of a tag below 1000 with a value of at most 27
/// bytes (every field of the hot path, timestamps included) is assembled in a 32-byte
/// block and appended by one fixed-size copy: one capacity check instead of three and
/// no `memcpy` call for the value. Always inlined: the tag is a constant at nearly
/// every call site, and its digits then fold into constant stores (out of line, the
/// digit arithmetic and the call made it dearer than the three appends).
#[inline(always)]
fn push_field(out: &mut Vec<u8>, tag: u32, value: &[u8]) {
    let n = value.len();
    if tag >= 1000 || n > FIELD_BLOCK - 5 {
        push_tag(out, tag);
        out.extend_from_slice(value);
        out.push(SOH);
        return;
    }
    let d = |n: u32| b'0' + (n % 10) as u8;
    let mut block = [0u8; FIELD_BLOCK];
    let k = match tag {
        0..=9 => {
            block[..2].copy_from_slice(&[d(tag), b'=']);
            2
        }
        10..=99 => {
            block[..3].copy_from_slice(&[d(tag / 10), d(tag), b'=']);
            3
        }
        _ => {
            block[..4].copy_from_slice(&[d(tag / 100), d(tag / 10), d(tag), b'=']);
            4
        }
    };
    copy_short(&mut block[k..k + n], value);
    block[k + n] = SOH;
    let at = out.len();
    out.extend_from_slice(&block);
    out.truncate(at + k + n + 1);
}

/// The block [`push_field`] assembles a short field in: `ttt=` + 27 value bytes + SOH.
const FIELD_BLOCK: usize = 32;

/// `dst.copy_from_slice(src)` (same length) by at most two overlapping fixed-size
/// copies for up to 32 bytes, which compile to a few moves where a slice copy of a
/// length known only at run time is a call to `memcpy`.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() != n {
        // Not reached by the callers (same-length ranges); the slice copy's panic says
        // what went wrong if it ever were.
        dst.copy_from_slice(src);
        return;
    }
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..n].copy_from_slice(&src[n - 4..n]);
        }
        8..=16 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..n].copy_from_slice(&src[n - 8..n]);
        }
        17..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..n].copy_from_slice(&src[n - 16..n]);
        }
        _ => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
work_counter!(
    /// The fields [`LengthFields`] looks at and the bytes [`mismatched_frame`] searches.
    work
);

#[cfg(test)]
mod tests {
    use super::*;

    /// `tag=` is written as the formatter writes the tag, on both sides of each
    /// fast-path boundary.
    #[test]
    fn push_tag_matches_itoa() {
        let tags = (0..2000).chain([9_999, 10_000, 50_002, 999_999, u32::MAX]);
        for tag in tags {
            let mut out = vec![b'x'];
            push_tag(&mut out, tag);
            assert_eq!(out, format!("x{tag}=").into_bytes());
        }
    }

    /// The four-byte tag reader answers as the digit loop for every string of up to
    /// six bytes over the characters the two tell apart, at every start position.
    #[test]
    fn parse_tag_fast_path_matches_the_loop_exhaustively() {
        let alphabet = [b'0', b'1', b'5', b'9', b'=', SOH, b'-', b'a', b'/', b':'];
        let mut buf = Vec::new();
        for len in 0..=6u32 {
            for mut n in 0..(alphabet.len() as u64).pow(len) {
                buf.clear();
                for _ in 0..len {
                    buf.push(alphabet[(n % alphabet.len() as u64) as usize]);
                    n /= alphabet.len() as u64;
                }
                for pos in 0..=buf.len() {
                    assert_eq!(
                        parse_tag(&buf, pos),
                        parse_tag_loop(&buf, pos),
                        "{buf:?} at {pos}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// The same for any bytes (fields of a message with tags of 1 to 12 digits).
        #[test]
        fn parse_tag_fast_path_matches_the_loop(
            raw in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => b'0'..=b'9',
                    2 => proptest::strategy::Just(b'='),
                    1 => proptest::strategy::Just(SOH),
                    1 => proptest::num::u8::ANY,
                ],
                0..40,
            ),
        ) {
            for pos in 0..=raw.len() {
                proptest::prop_assert_eq!(parse_tag(&raw, pos), parse_tag_loop(&raw, pos));
            }
        }
    }

    /// The one-block field writer writes what the three appends write, for every
    /// value length on both sides of the block's limit and every tag width.
    #[test]
    fn push_field_matches_tag_value_soh() {
        let tags = [0, 9, 10, 99, 100, 999, 1000, 10_000, u32::MAX];
        for tag in tags {
            for len in 0..=40 {
                let value: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                let mut fast = b"x=1\x01".to_vec();
                push_field(&mut fast, tag, &value);
                let mut slow = b"x=1\x01".to_vec();
                push_tag(&mut slow, tag);
                slow.extend_from_slice(&value);
                slow.push(SOH);
                assert_eq!(fast, slow, "tag {tag}, {len} bytes");
            }
        }
    }

    proptest::proptest! {
        /// `copy_short` copies any bytes of any length as the slice copy does.
        #[test]
        fn copy_short_matches_copy_from_slice(
            src in proptest::collection::vec(proptest::num::u8::ANY, 0..48),
            fill in proptest::num::u8::ANY,
        ) {
            let mut fast = vec![fill; src.len()];
            copy_short(&mut fast, &src);
            proptest::prop_assert_eq!(&fast, &src);
        }

        /// `push_field` for any tag and value appends what the three appends do.
        #[test]
        fn push_field_matches_the_appends(
            tag in proptest::prop_oneof![0u32..1100, proptest::num::u32::ANY],
            value in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            before in proptest::collection::vec(proptest::num::u8::ANY, 0..8),
        ) {
            let mut fast = before.clone();
            push_field(&mut fast, tag, &value);
            let mut slow = before;
            push_tag(&mut slow, tag);
            slow.extend_from_slice(&value);
            slow.push(SOH);
            proptest::prop_assert_eq!(fast, slow);
        }
    }

    /// The bitset in front of the data tag match agrees with it for every tag.
    #[test]
    fn data_tag_bits_agree_with_the_match() {
        for tag in 0..100_000 {
            assert_eq!(data_length_tag_fast(tag), data_length_tag(tag), "tag {tag}");
        }
        assert_eq!(data_length_tag_fast(u32::MAX), None);
    }

    /// The SWAR SOH search agrees with a naive scan for every window of buffers with
    /// SOH, 0x00, 0x81 and 0x02 bytes (the values near the bit tricks' edge cases).
    #[test]
    fn find_soh_matches_naive_scan() {
        let alphabet = [SOH, 0x00, 0x81, 0x02, b'a', 0xff];
        let mut seed: u32 = 12345;
        for len in 0..40 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    alphabet[(seed >> 16) as usize % alphabet.len()]
                })
                .collect();
            for from in 0..=len + 1 {
                for to in from..=len + 2 {
                    let naive = (from..to.min(len)).find(|&i| buf[i] == SOH);
                    assert_eq!(find_soh(&buf, from, to), naive, "{buf:?} {from}..{to}");
                }
            }
        }
    }

    /// A message `8=FIX.4.4|9=..|35=D|<body>10=..|` with a correct BodyLength and
    /// CheckSum, `|` standing for SOH in `body`.
    fn message(body: &str) -> Vec<u8> {
        let body = format!("35=D|{body}").replace('|', "\x01");
        let mut m = format!("8=FIX.4.4\x019={}\x01{body}", body.len()).into_bytes();
        push_trailer(&mut m, 0);
        m
    }

    /// The tags and values of a parse, `|` for SOH in values.
    fn parsed(raw: &[u8]) -> Result<Vec<(u32, String)>, ParseError> {
        let mut f = Fields::default();
        let m = parse(raw, &mut f)?;
        Ok(m.fields()[3..m.fields().len() - 1]
            .iter()
            .map(|fl| {
                let v = String::from_utf8_lossy(m.value(fl)).replace('\x01', "|");
                (fl.tag, v)
            })
            .collect())
    }

    fn pairs(p: &[(u32, &str)]) -> Vec<(u32, String)> {
        p.iter().map(|&(t, v)| (t, v.to_string())).collect()
    }

    /// What the data fields of a message take their length from (the semantics
    /// `LengthFields` keeps): the last field with their length tag anywhere before
    /// them, not necessarily just before; none → up to the first SOH.
    #[test]
    fn data_fields_take_the_last_length_field_before_them() {
        // The length field need not be the field just before.
        assert_eq!(
            parsed(&message("95=3|58=x|96=a|b|")),
            Ok(pairs(&[(95, "3"), (58, "x"), (96, "a|b")]))
        );
        // No length field: an ordinary field, up to the first SOH.
        assert_eq!(
            parsed(&message("96=ab|58=x|")),
            Ok(pairs(&[(96, "ab"), (58, "x")]))
        );
        // The last of several wins.
        assert_eq!(
            parsed(&message("95=1|95=3|96=a|b|")),
            Ok(pairs(&[(95, "1"), (95, "3"), (96, "a|b")]))
        );
        // A length field after its data field does not count for it.
        assert_eq!(
            parsed(&message("96=ab|95=1|")),
            Ok(pairs(&[(96, "ab"), (95, "1")]))
        );
        // Each data field its own length tag, interleaved; a length field serves every
        // later data field of its pair.
        assert_eq!(
            parsed(&message("95=1|354=3|96=a|355=b|c|96=d|93=2|89=|x|")),
            Ok(pairs(&[
                (95, "1"),
                (354, "3"),
                (96, "a"),
                (355, "b|c"),
                (96, "d"),
                (93, "2"),
                (89, "|x"),
            ]))
        );
        // Another pair's length field does not count.
        assert_eq!(
            parsed(&message("354=3|96=ab|")),
            Ok(pairs(&[(354, "3"), (96, "ab")]))
        );
        // A malformed length, a length past the SOH.
        assert_eq!(
            parsed(&message("95=x|96=ab|")),
            Err(ParseError::IncorrectDataFormat { tag: 95 })
        );
        assert_eq!(
            parsed(&message("95=3|58=x|96=ab|")),
            Err(ParseError::DataLengthMismatch {
                tag: 96,
                length_tag: 95
            })
        );
    }

    /// Regression (hostile-input report F1): each data field searched backwards through
    /// every field before it for its length field, so 160,000 copies of `96=a` cost
    /// 1.3e10 steps. Now every field is looked at once, whatever the mix.
    #[test]
    fn regression_many_data_fields_parse_in_linear_work() {
        let n = 20_000;
        for unit in ["96=a|", "95=1|96=a|", "96=a|58=x|355=b|95=1|"] {
            let m = message(&unit.repeat(n));
            let mut f = Fields::default();
            work::take();
            let fields = parse(&m, &mut f).map(|r| r.fields().len()).unwrap();
            let steps = work::take();
            assert!(fields > n, "{unit}");
            assert!(steps <= fields, "{unit}: {steps} steps for {fields} fields");
        }
        // The same with a bad CheckSum (parsed before being ignored).
        let mut m = message(&"96=a|".repeat(n));
        let k = m.len() - 2;
        m[k] = if m[k] == b'0' { b'1' } else { b'0' };
        let mut f = Fields::default();
        work::take();
        assert!(matches!(
            parse(&m, &mut f),
            Err(ParseError::BadCheckSum { .. })
        ));
        assert!(work::take() <= n + 5);
    }

    proptest::proptest! {
        /// `LengthFields::last` answers as the backward search it replaces, for any
        /// table grown field by field and asked at any point.
        #[test]
        fn length_fields_agree_with_a_backward_search(
            steps in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        93u32, 89, 95, 96, 212, 213, 354, 355, 1401, 1402, 58, 10, 1403,
                    ]),
                    proptest::num::u32::ANY,
                    proptest::bool::ANY,
                ),
                0..60,
            ),
        ) {
            let mut fields = Vec::new();
            let mut index = LengthFields::new();
            for (tag, start, ask) in steps {
                if ask {
                    if let Some(length_tag) = data_length_tag(tag) {
                        let naive = fields.iter().rev().find(|f: &&Field| f.tag == length_tag);
                        proptest::prop_assert_eq!(
                            index.last(&fields, length_tag),
                            naive.copied()
                        );
                    }
                }
                fields.push(Field { tag, start, end: start });
            }
        }
    }

    /// A driver over `frame_len_resumable`: feeds `stream` in `chunks`, resetting the
    /// scan whenever the start moves, and lists what it framed (and skipped).
    fn frame_in_chunks(
        stream: &[u8],
        chunks: &[usize],
        max: usize,
        resumable: bool,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let (mut start, mut end) = (0, 0);
        let mut scan = FrameScan::default();
        let mut cuts = chunks.iter().copied().chain(std::iter::repeat(usize::MAX));
        while end < stream.len() {
            end = end
                .saturating_add(cuts.next().unwrap_or(1).max(1))
                .min(stream.len());
            while start < end {
                let buf = &stream[start..end];
                let r = if resumable {
                    frame_len_resumable(buf, max, &mut scan)
                } else {
                    frame_len(buf, max)
                };
                match r {
                    Ok(Some(n)) => {
                        out.push(format!("frame {start}..{}", start + n));
                        start += n;
                        scan.reset();
                    }
                    Ok(None) => break,
                    Err(e) => {
                        out.push(format!("{e:?}"));
                        start += e.skip();
                        scan.reset();
                    }
                }
            }
        }
        out
    }

    proptest::proptest! {
        /// Resuming gives the answers of `frame_len` on every prefix, for streams of
        /// messages with wrong BodyLengths, stray trailers and garbage, split anywhere.
        #[test]
        fn frame_len_resumable_answers_as_frame_len(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "8=FIX.4.4|9=5|35=D|", "8=FIX.4.4|9=30|35=D|", "8=FIX.4.4|9=5|35=0|10=000|",
                    "|10=", "|10=12", "3|", "|", "1", "0", "=", "AAAA", "8=FIX", "10=123|",
                ]),
                1..20,
            ),
            chunks in proptest::collection::vec(1usize..9, 0..40),
            max in proptest::sample::select(vec![40usize, 100, 10_000]),
        ) {
            let stream = parts.concat().replace('|', "\x01").into_bytes();
            proptest::prop_assert_eq!(
                frame_in_chunks(&stream, &chunks, max, true),
                frame_in_chunks(&stream, &chunks, max, false)
            );
        }
    }

    /// Regression (hostile-input report F3): a frame with a short BodyLength followed by
    /// bytes that never hold `<SOH>10=` was searched from its declared end at every
    /// read: 4 MB in 200-byte segments cost 4.0 s of CPU. Resumed, each byte is searched
    /// once (the last three again, for a `<SOH>10=` cut between reads), also once the
    /// `<SOH>10=` has come and only the SOH after its value is missing.
    #[test]
    fn regression_trickled_frame_without_trailer_is_searched_once() {
        let head = b"8=FIX.4.4\x019=5\x0135=D\x01";
        for tail in [&b""[..], b"\x0110=1"] {
            let mut buf = head.to_vec();
            buf.extend_from_slice(tail);
            let mut scan = FrameScan::default();
            let reads = 5_000;
            work::take();
            for _ in 0..reads {
                buf.extend_from_slice(&[b'A'; 200]);
                assert_eq!(frame_len_resumable(&buf, usize::MAX, &mut scan), Ok(None));
            }
            let steps = work::take();
            assert!(
                steps <= buf.len() + 4 * reads,
                "{steps} bytes searched for {} buffered",
                buf.len()
            );
            // The answer once the rest comes is frame_len's: up to the new trailer, or
            // up to the SOH that ends the value of the first `<SOH>10=`.
            buf.extend_from_slice(b"\x0110=000\x01");
            let whole = frame_len(&buf, usize::MAX);
            assert_eq!(frame_len_resumable(&buf, usize::MAX, &mut scan), whole);
            let want = if tail.is_empty() {
                buf.len()
            } else {
                buf.len() - 7
            };
            assert_eq!(whole, Ok(Some(want)));
        }
    }

    /// A `<SOH>10=` and the SOH after its value arriving one byte at a time are found
    /// (the search keeps the last three bytes for the next read).
    #[test]
    fn trailer_split_across_reads_is_found() {
        let stream = b"8=FIX.4.4\x019=5\x0135=D\x0158=xyz\x0110=123\x018=FIX";
        let ones = vec![1; stream.len()];
        assert_eq!(
            frame_in_chunks(stream, &ones, 10_000, true),
            vec!["frame 0..33".to_string()]
        );
        assert_eq!(
            frame_in_chunks(stream, &ones, 10_000, true),
            frame_in_chunks(stream, &[stream.len()], 10_000, false)
        );
    }
}
