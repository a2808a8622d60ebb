//! Recovery: read every segment in order, hand each valid record to the caller, cut a
//! torn tail, report everything else.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::record::{Header, HEADER, MAX_LSN, SKIP_CRC_XOR, SKIP_PAYLOAD};

/// The highest segment name recovery takes for one of its own: half of [`MAX_LSN`], so
/// that appending after the highest name a spool could hold never numbers a record
/// past the bound (review: an empty file named 2^62 made every later record damage,
/// cut at the next start).
const MAX_SEGMENT_NAME: u64 = MAX_LSN / 2;

/// The most record numbers one skip marker covers (the batches that failed at once:
/// 2^40 is ten days of failures at a million records a second).
const MAX_SKIP: u64 = 1 << 40;
use crate::{Config, Error, Lsn};

/// What recovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: usize,
    /// Valid records handed to the callback.
    pub records: u64,
    /// The last record number delivered, if any.
    pub last_lsn: Option<Lsn>,
    /// The record number the next `append` will get.
    pub next_lsn: Lsn,
    /// The torn tail cut from the end of the last segment, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Damage anywhere other than the tail: never silently dropped.
    pub damaged: Vec<Damage>,
    /// Record numbers that failed batches used (skip markers). Expected, not damage.
    pub skipped: Vec<SkippedRange>,
    /// Bytes recovery ran through CRC-32C: a small multiple of the segments' bytes
    /// whatever they hold (each byte at most twice, plus under 32 per header a
    /// resynchronisation scan checks: at most 34 × the bytes, under 6 × for headers 16
    /// bytes apart), never a record length per byte scanned.
    pub checksummed_bytes: u64,
}

/// An incomplete or checksum-failing end of the last segment, truncated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub segment: PathBuf,
    /// Where the file now ends.
    pub offset: u64,
    /// Bytes cut.
    pub bytes_cut: u64,
}

/// Damage recovery found and stepped over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub segment: PathBuf,
    /// Byte offset of the first bad record in it (0 for a whole-file problem).
    pub offset: u64,
    /// What is wrong.
    pub reason: DamageReason,
}

/// What is wrong at a damaged place.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageReason {
    /// A record's checksum does not match; recovery read on from the next valid record.
    BadChecksum,
    /// A length field above `max_record` (or a malformed skip marker); the rest of the
    /// segment was skipped.
    BadLength(u32),
    /// A record runs past the end of a segment that is not the last one.
    Truncated,
    /// Record numbers jump: `expected` was next, `found` came. At a segment's first
    /// record the segment is still read; inside a segment the rest is skipped.
    LsnGap {
        /// The record number that should have come.
        expected: Lsn,
        /// The one that came.
        found: Lsn,
    },
    /// The segment could not be read (open or read error).
    Unreadable(io::ErrorKind),
}

/// Record numbers `first..=last` were used by a batch that failed to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedRange {
    /// The first unused number.
    pub first: Lsn,
    /// The last unused number.
    pub last: Lsn,
}

/// One segment file of the log.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub first: u64,
    pub path: PathBuf,
    pub len: u64,
}

/// What `Spool::start` needs from recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segments: Vec<Segment>,
    /// Whether appends may continue at the end of the last segment.
    pub append_to_last: bool,
}

/// A segment file name: the first record number, zero-padded to 20 digits.
pub(crate) fn segment_name(first: u64) -> String {
    format!("{first:020}.log")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Refuses a segment name that is not a regular file: a FIFO would block the open
/// forever (recovery, then the appender), a device reads as empty or endless
/// (hostile-input probe: start-up hung on a FIFO without a log line), and a symbolic
/// link is not followed (hostile-input pass: one to a file outside the data directory
/// was read as the last segment and its target truncated as a "torn tail").
fn regular_file(path: &Path) -> Result<(), Error> {
    let meta =
        fs::symlink_metadata(path).map_err(|e| Error::io("reading spool segment", path, e))?;
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "a directory"
    } else if meta.file_type().is_symlink() {
        "a symbolic link (not followed)"
    } else {
        "not a regular file (a FIFO, socket or device)"
    };
    Err(Error::io(
        "reading spool segment",
        path,
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: move it out of the spool directory"),
        ),
    ))
}

pub(crate) fn recover(
    config: &Config,
    on_record: &mut dyn FnMut(Lsn, &[u8]),
) -> Result<(Recovered, RecoveryReport), Error> {
    let dir = &config.dir;
    fs::create_dir_all(dir).map_err(|e| Error::io("creating spool directory", dir, e))?;
    let mut segments = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| Error::io("listing spool directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("listing spool directory", dir, e))?;
        let name = entry.file_name();
        let Some(first) = name.to_str().and_then(parse_segment_name) else {
            continue;
        };
        if first == 0 || first > MAX_SEGMENT_NAME {
            // No spool numbers a record so: not a segment of ours, left alone (an empty
            // one named 2^64-1 made every later append wait forever).
            tracing::warn!(file = %entry.path().display(), "spool: a file named like a segment but numbered beyond what a spool reaches, ignored");
            continue;
        }
        regular_file(&entry.path())?;
        segments.push(Segment {
            first,
            path: entry.path(),
            len: 0,
        });
    }
    segments.sort_by_key(|s| s.first);

    let mut report = RecoveryReport {
        segments: segments.len(),
        ..RecoveryReport::default()
    };
    let mut reader = Reader::new(config.max_record);
    // The next record number expected; None before the first record of the log.
    let mut expected: Option<u64> = None;
    // The highest record number seen anywhere, including past damage.
    let mut highest: u64 = 0;
    let mut last_clean = true;
    let count = segments.len();
    for (i, seg) in segments.iter_mut().enumerate() {
        let is_last = i + 1 == count;
        let outcome = reader.read_segment(seg, is_last, &mut expected, &mut report, on_record)?;
        highest = highest.max(outcome.highest);
        last_clean = outcome.clean;
        report.checksummed_bytes = reader.sums.checksummed;
        if outcome.empty {
            // An empty segment promises its first number to the next record.
            highest = highest.max(seg.first.saturating_sub(1));
        }
    }
    // Unreachable from what recovery accepts (names up to 2^61, jumps within a file,
    // skips of 2^40): said plainly rather than numbering past the bound.
    if highest >= MAX_LSN {
        return Err(Error::io(
            "recovering spool",
            dir,
            io::Error::new(
                io::ErrorKind::InvalidData,
                "record numbers reach 2^62: the spool is damaged",
            ),
        ));
    }
    let next = highest + 1;
    report.next_lsn = Lsn(next);
    let append_to_last = match segments.last() {
        Some(last) => last_clean && (last.len > 0 || last.first == next),
        None => false,
    };
    Ok((
        Recovered {
            segments,
            append_to_last,
        },
        report,
    ))
}

struct Outcome {
    /// The highest record number found (0 if none).
    highest: u64,
    /// No damage: appends may continue at its end (if it is the last).
    clean: bool,
    /// The file has no bytes.
    empty: bool,
}

/// Reads segment files through one window buffer whose size depends on `max_record`
/// only, never on a length read from disk.
struct Reader {
    max_record: u32,
    window: Vec<u8>,
    cap: usize,
    sums: Checksums,
}

/// Records that `path` could not be read (or repaired) at `offset`, and gives up on the
/// rest of that segment.
fn unreadable_at(
    report: &mut RecoveryReport,
    path: &Path,
    offset: u64,
    kind: io::ErrorKind,
    highest: u64,
) -> Outcome {
    report.damaged.push(Damage {
        segment: path.to_path_buf(),
        offset,
        reason: DamageReason::Unreadable(kind),
    });
    Outcome {
        highest,
        clean: false,
        empty: false,
    }
}

/// Why parsing stopped inside a segment.
enum Stop {
    Incomplete,
    BadChecksum,
    BadLength(u32),
    Gap { expected: u64, found: u64 },
}

impl Reader {
    fn new(max_record: u32) -> Reader {
        let cap = (2 * (max_record as usize + HEADER)).max(256 << 10);
        Reader {
            max_record,
            window: Vec::new(),
            cap,
            sums: Checksums::default(),
        }
    }

    fn read_segment(
        &mut self,
        seg: &mut Segment,
        is_last: bool,
        expected: &mut Option<u64>,
        report: &mut RecoveryReport,
        on_record: &mut dyn FnMut(Lsn, &[u8]),
    ) -> Result<Outcome, Error> {
        // A segment that cannot be opened (its permissions, say) is not damage: read as
        // such, the spool started without its records and wrote new ones numbered
        // over them, into the same file (hostile-input pass: a write-only last
        // segment lost what was acknowledged after the start). The start fails.
        let file = OpenOptions::new()
            .read(true)
            .write(is_last)
            .open(&seg.path)
            .map_err(|e| Error::io("opening spool segment", &seg.path, e))?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::io("reading spool segment", &seg.path, e))?
            .len();
        seg.len = file_len;
        // The window's bytes and the running checksums belong to the previous file.
        self.window.clear();
        self.sums.clear();
        let mut win = Window {
            file: &file,
            len: file_len,
            buf: &mut self.window,
            start: 0,
            cap: self.cap,
        };
        let mut off = 0u64;
        let mut highest = 0u64;
        // Damage was found (and skipped) earlier in this segment.
        let mut damaged = false;
        loop {
            let stop = loop {
                if off == file_len {
                    break None;
                }
                let (h, ok) = match parse_at(&mut win, &mut self.sums, off, self.max_record) {
                    Ok(Parsed::Record(h, ok)) => (h, ok),
                    Ok(Parsed::Incomplete) => break Some(Stop::Incomplete),
                    Ok(Parsed::BadLength(len)) => break Some(Stop::BadLength(len)),
                    // A record longer than this spool reads that the file holds whole:
                    // written under a larger limit (a router restarted with a smaller
                    // --max-frame cut three acknowledged messages as a "torn tail":
                    // hostile-input pass), or a damaged length. Neither is cut or
                    // skipped: the start fails, saying which.
                    Ok(Parsed::TooLong(len))
                        if off + HEADER as u64 + u64::from(len) <= file_len =>
                    {
                        return Err(Error::RecordTooLarge {
                            segment: seg.path.clone(),
                            offset: off,
                            len,
                            max_record: self.max_record,
                        });
                    }
                    Ok(Parsed::TooLong(len)) => break Some(Stop::BadLength(len)),
                    Err(e) => {
                        return Ok(unreadable_at(report, &seg.path, off, e.kind(), highest));
                    }
                };
                if !ok {
                    break Some(Stop::BadChecksum);
                }
                if let Some(exp) = *expected {
                    if h.lsn != exp {
                        if off == 0 && h.lsn > exp && h.lsn == seg.first {
                            // A gap between segments: report it, keep this segment's records.
                            report.damaged.push(Damage {
                                segment: seg.path.clone(),
                                offset: 0,
                                reason: DamageReason::LsnGap {
                                    expected: Lsn(exp),
                                    found: Lsn(h.lsn),
                                },
                            });
                        } else {
                            // A good checksum, read through once: if the scan looks
                            // inside this record, it does so from running checksums.
                            if let Err(e) = self.sums.keep(&mut win, off, &h) {
                                return Ok(unreadable_at(
                                    report,
                                    &seg.path,
                                    off,
                                    e.kind(),
                                    highest,
                                ));
                            }
                            break Some(Stop::Gap {
                                expected: exp,
                                found: h.lsn,
                            });
                        }
                    }
                }
                let next = if h.skip {
                    let Ok(payload) = win.get(off + HEADER as u64, SKIP_PAYLOAD) else {
                        break Some(Stop::Incomplete);
                    };
                    let mut b = [0u8; 8];
                    b.copy_from_slice(payload);
                    let n = u64::from_le_bytes(b);
                    if n == 0 || n > MAX_SKIP || n > MAX_LSN - h.lsn {
                        break Some(Stop::BadLength(h.len));
                    }
                    let last = h.lsn.saturating_add(n - 1);
                    report.skipped.push(SkippedRange {
                        first: Lsn(h.lsn),
                        last: Lsn(last),
                    });
                    last
                } else {
                    let payload = match win.get(off + HEADER as u64, h.len as usize) {
                        Ok(p) => p,
                        Err(e) => {
                            return Ok(unreadable_at(report, &seg.path, off, e.kind(), highest));
                        }
                    };
                    on_record(Lsn(h.lsn), payload);
                    report.records += 1;
                    report.last_lsn = Some(Lsn(h.lsn));
                    h.lsn
                };
                highest = highest.max(next);
                *expected = Some(next.saturating_add(1));
                off += (HEADER + h.len as usize) as u64;
            };
            let Some(stop) = stop else {
                return Ok(Outcome {
                    highest,
                    clean: !damaged,
                    empty: file_len == 0,
                });
            };
            // Is there any valid record after the bad one? Then it is damage, not a tail.
            // Numbers after the bad record are above everything read so far, and above
            // what the segment's name promises.
            let above = highest
                .max(expected.map_or(0, |e| e.saturating_sub(1)))
                .max(seg.first.saturating_sub(1));
            // Where reading resumes: the next valid record (found once: looking for any
            // later record, then again for the first, rescanned the rest of the segment
            // per damaged record, 27 s of start-up for 3,030 of them: probe).
            let ceiling = above.saturating_add(win.len / HEADER as u64 + 1);
            let resume = match stop {
                // A jump ahead within what the file could hold: numbers were lost
                // before it; read on from it. Beyond that, it is damage.
                Stop::Gap { found, .. } if found > above && found <= ceiling => Some((off, found)),
                _ => first_record_after(&mut win, &mut self.sums, off + 1, above, self.max_record),
            };
            let tail_like = matches!(
                stop,
                Stop::Incomplete | Stop::BadChecksum | Stop::BadLength(_)
            );
            if is_last && tail_like && resume.is_none() {
                let cut = file_len - off;
                if let Err(e) = file.set_len(off).and_then(|()| file.sync_all()) {
                    return Ok(unreadable_at(report, &seg.path, off, e.kind(), highest));
                }
                tracing::warn!(segment = %seg.path.display(), offset = off, bytes_cut = cut, "spool: torn tail truncated");
                seg.len = off;
                report.torn_tail = Some(TornTail {
                    segment: seg.path.clone(),
                    offset: off,
                    bytes_cut: cut,
                });
                return Ok(Outcome {
                    highest,
                    clean: !damaged,
                    empty: off == 0,
                });
            }
            let reason = match stop {
                Stop::Incomplete => DamageReason::Truncated,
                Stop::BadChecksum => DamageReason::BadChecksum,
                Stop::BadLength(len) => DamageReason::BadLength(len),
                Stop::Gap { expected, found } => DamageReason::LsnGap {
                    expected: Lsn(expected),
                    found: Lsn(found),
                },
            };
            report.damaged.push(Damage {
                segment: seg.path.clone(),
                offset: off,
                reason: reason.clone(),
            });
            damaged = true;
            // Resynchronise on the next valid record and go on reading from there: one
            // damaged record costs that record, not the rest of the segment.
            match resume {
                Some((at, lsn)) => {
                    tracing::warn!(segment = %seg.path.display(), offset = off, ?reason, resume_offset = at, resume_record = lsn, "spool: damaged record skipped, reading on");
                    off = at;
                    *expected = Some(lsn);
                }
                None => {
                    tracing::warn!(segment = %seg.path.display(), offset = off, ?reason, "spool: damaged segment, rest skipped");
                    // A number on disk is not given out again, if it is one the file
                    // could hold; one beyond is damage and raises nothing (review: a
                    // forged number near 2^62 became the next one).
                    if let Stop::Gap { found, .. } = stop {
                        if found <= ceiling {
                            highest = highest.max(found);
                        }
                    }
                    return Ok(Outcome {
                        highest,
                        clean: false,
                        empty: false,
                    });
                }
            }
        }
    }
}

enum Parsed {
    /// A complete record; whether its checksum holds.
    Record(Header, bool),
    Incomplete,
    /// A malformed skip marker.
    BadLength(u32),
    /// A record's length above `max_record`.
    TooLong(u32),
}

fn parse_at(
    win: &mut Window<'_>,
    sums: &mut Checksums,
    off: u64,
    max_record: u32,
) -> io::Result<Parsed> {
    if win.len - off < HEADER as u64 {
        return Ok(Parsed::Incomplete);
    }
    let mut hb = [0u8; HEADER];
    hb.copy_from_slice(win.get(off, HEADER)?);
    let h = Header::parse(&hb);
    if h.skip && h.len as usize != SKIP_PAYLOAD {
        return Ok(Parsed::BadLength(h.len));
    }
    if !h.skip && h.len > max_record {
        return Ok(Parsed::TooLong(h.len));
    }
    if win.len - off - (HEADER as u64) < u64::from(h.len) {
        return Ok(Parsed::Incomplete);
    }
    // A number no spool reaches is damage, whatever its checksum says.
    let ok = sums.holds(win, off, &h)? && (1..=MAX_LSN).contains(&h.lsn);
    Ok(Parsed::Record(h, ok))
}

/// The first offset from `from` holding a valid record numbered above `above` (and
/// plausibly: not more records above it than the file could hold), with its number.
///
/// Every byte offset is tried, and a forged header can claim a `max_record` payload at
/// each of them (hostile-input pass: 16-byte headers claiming 1 MB each held the start
/// for 35 s per 5 MB, the scan CRC'ing 1 MB per 16 bytes). The checksums come from
/// [`Checksums`], which runs over each byte of the segment about once, so the scan
/// costs its bytes plus under 32 bytes per header it looks at, whatever they claim.
fn first_record_after(
    win: &mut Window<'_>,
    sums: &mut Checksums,
    from: u64,
    above: u64,
    max_record: u32,
) -> Option<(u64, u64)> {
    let mut off = from;
    while off + (HEADER as u64) <= win.len {
        if let Some(h) = plausible_record_at(win, sums, off, above, max_record) {
            return Some((off, h.lsn));
        }
        off += 1;
    }
    None
}

/// The header of a valid record at `off` numbered above `above`, and plausibly so: not
/// more records above it than the file could hold. The number is checked before the
/// checksum, so a scan over garbage reads headers only.
fn plausible_record_at(
    win: &mut Window<'_>,
    sums: &mut Checksums,
    off: u64,
    above: u64,
    max_record: u32,
) -> Option<Header> {
    let ceiling = above.saturating_add(win.len / HEADER as u64 + 1);
    let mut hb = [0u8; HEADER];
    hb.copy_from_slice(win.get(off, HEADER).ok()?);
    let h = Header::parse(&hb);
    if h.lsn <= above || h.lsn > ceiling {
        return None;
    }
    match parse_at(win, sums, off, max_record) {
        Ok(Parsed::Record(h, true)) => Some(h),
        _ => None,
    }
}

/// Distance between two running checksums [`Checksums`] keeps: the header size, so a
/// header at every 16th byte (the densest a forged file packs them) costs one mark.
const MARK: u64 = HEADER as u64;

/// Bytes [`Checksums`] runs through per read of the window.
const MARK_CHUNK: usize = 64 << 10;

/// The checksum of any byte range of one segment without running through its bytes
/// again: the running CRC-32C from an origin, kept at every [`MARK`]th byte.
///
/// CRC-32C is linear: for bytes `A` then `B`, `crc(AB) = crc(A) · x^(8|B|) ⊕ crc(B)`
/// (zlib's `crc32_combine`), so with `run(x)` the checksum of the segment's bytes from
/// the origin to `x`, `crc([a, b)) = run(b) ⊕ run(a) · x^(8(b − a))`. `run(x)` is the
/// mark at or below `x` run on over fewer than [`MARK`] bytes, and the product is 32
/// shift-and-xor steps per set bit of the length.
///
/// A record's checksum runs over its bytes from offset 8 (the number) to its end.
/// Reading forward, a record past the marks (the usual case) is checked directly and
/// nothing is kept; one that fails is run through again keeping marks (it is the one
/// the resynchronisation scan will look inside). A record starting inside the marks
/// (every candidate of a scan, and the records read after one) is checked from them,
/// the marks extended as far as its end. The marks only move forward in a segment, so:
///
/// - **Bytes checksummed** per segment: each byte at most once directly (records read
///   past the marks do not overlap) and once by the marks extending (never backwards),
///   plus under 2 × [`MARK`] per checksum taken from the marks (one per header a scan
///   tries, at most one per byte offset, and one per record read inside the marks, at
///   most one per 16 bytes): at most `2 × len + 30 × (tried + len / 16)` — under 6 × the
///   file for headers 16 bytes apart, the forged layout of the hostile-input pass, and
///   34 × for one at every byte offset. The tests measure 1.7 × on forged layouts.
/// - **Memory**: marks below the record being checked are dropped, so they span at most
///   one record: `4 × (max_record + 24) / 16` bytes, a quarter of the length limit (up
///   to twice that allocated), beside the window of twice it. Nothing follows a length read from disk beyond
///   `max_record`.
#[derive(Debug, Default)]
struct Checksums {
    /// The file offset where the running checksum starts (from 0).
    origin: u64,
    /// The index of `marks[0]`: mark `i` is the running checksum at `origin + i × MARK`.
    first: u64,
    marks: VecDeque<u32>,
    /// The last `x^(8n)` computed, with its `n` (records in a file tend to share a size).
    shift: (u32, u32),
    /// Bytes run through CRC-32C, for [`RecoveryReport::checksummed_bytes`].
    checksummed: u64,
}

impl Checksums {
    /// Forgets the marks (a new file).
    fn clear(&mut self) {
        self.marks.clear();
        self.first = 0;
    }

    /// Keeps the running checksums over the record at `off` (one reading stopped at
    /// with a good checksum: a number out of turn), for the scan that looks inside it.
    fn keep(&mut self, win: &mut Window<'_>, off: u64, h: &Header) -> io::Result<()> {
        let (a, b) = (off + 8, off + HEADER as u64 + u64::from(h.len));
        if self.covers(a) {
            self.forget_below(a);
        } else {
            self.restart(a);
        }
        self.run(win, b).map(|_| ())
    }

    /// Whether the checksum of the whole record at `off`, whose header is `h`, holds.
    /// The caller keeps the record within the file.
    fn holds(&mut self, win: &mut Window<'_>, off: u64, h: &Header) -> io::Result<bool> {
        let (a, b) = (off + 8, off + HEADER as u64 + u64::from(h.len));
        let want = if h.skip { h.crc ^ SKIP_CRC_XOR } else { h.crc };
        if self.covers(a) {
            return Ok(self.range(win, a, b)? == want);
        }
        let crc = crc32c::crc32c(win.get(a, (b - a) as usize)?);
        self.checksummed += b - a;
        if crc == want {
            return Ok(true);
        }
        // A scan will look for a record inside this one: keep its running checksums.
        self.restart(a);
        self.run(win, b)?;
        Ok(false)
    }

    /// Whether the marks reach `at` (and start at or below it).
    fn covers(&self, at: u64) -> bool {
        let Some(last) = (self.marks.len() as u64).checked_sub(1) else {
            return false;
        };
        let low = self.origin + self.first * MARK;
        let high = self.origin + (self.first + last) * MARK;
        low <= at && at <= high
    }

    /// Drops the marks below the one at or below `at` (which [`Checksums::covers`]).
    fn forget_below(&mut self, at: u64) {
        let keep = (at - self.origin) / MARK;
        while self.first < keep && self.marks.len() > 1 {
            self.marks.pop_front();
            self.first += 1;
        }
    }

    /// Starts the running checksum at `at`, forgetting the marks before.
    fn restart(&mut self, at: u64) {
        self.origin = at;
        self.first = 0;
        self.marks.clear();
        self.marks.push_back(0);
    }

    /// CRC-32C of the file's bytes `a..b`, `a` at or above the lowest mark (the
    /// caller checks [`Checksums::covers`]); marks below `a` are dropped.
    fn range(&mut self, win: &mut Window<'_>, a: u64, b: u64) -> io::Result<u32> {
        // `a` first: the window then holds every byte from `a` to the record's end.
        let at_a = self.run(win, a)?;
        self.forget_below(a);
        let at_b = self.run(win, b)?;
        // A record's range is at most `FORMAT_MAX_PAYLOAD + 8` bytes: it fits.
        let n = (b - a) as u32;
        if self.shift.0 != n {
            self.shift = (n, x_pow_8n(n));
        }
        Ok(at_b ^ gf2_mul(self.shift.1, at_a))
    }

    /// The running checksum at `x` (at or above the lowest mark, within the file),
    /// extending the marks to it; with no marks, they start at `x`.
    fn run(&mut self, win: &mut Window<'_>, x: u64) -> io::Result<u32> {
        if self.marks.is_empty() {
            self.restart(x);
        }
        let want = (x - self.origin) / MARK;
        loop {
            let last = self.first + self.marks.len() as u64 - 1;
            let Some(&crc) = self.marks.back() else {
                break;
            };
            if last >= want {
                break;
            }
            let n = ((want - last) * MARK).min(MARK_CHUNK as u64) as usize;
            let bytes = win.get(self.origin + last * MARK, n)?;
            let mut crc = crc;
            for piece in bytes.chunks(MARK as usize) {
                crc = crc32c::crc32c_append(crc, piece);
                self.marks.push_back(crc);
            }
            self.checksummed += n as u64;
        }
        let k = (want - self.first) as usize;
        let mark = self.marks[k];
        let at = self.origin + want * MARK;
        if x == at {
            // No read: one of zero bytes at the end of the file would empty the window.
            return Ok(mark);
        }
        let tail = win.get(at, (x - at) as usize)?;
        self.checksummed += tail.len() as u64;
        Ok(crc32c::crc32c_append(mark, tail))
    }
}

/// The CRC-32C polynomial, bit-reflected (as the checksum computes).
const CRC32C_POLY: u32 = 0x82F6_3B78;

/// `a · b` modulo the CRC-32C polynomial, both bit-reflected (bit 31 is `x^0`): zlib's
/// `multmodp`, over a fixed 32 steps.
const fn gf2_mul(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    let mut bit = 0;
    while bit < 32 {
        if a & (1 << (31 - bit)) != 0 {
            p ^= b;
        }
        b = if b & 1 != 0 {
            (b >> 1) ^ CRC32C_POLY
        } else {
            b >> 1
        };
        bit += 1;
    }
    p
}

/// `x^(2^k)` modulo the polynomial, `k` in `0..64` (zlib's `x2n_table`, not wrapped).
const X_POW_2K: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = gf2_mul(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// `x^(8n)` modulo the polynomial: what shifts a checksum past `n` bytes.
fn x_pow_8n(mut n: u32) -> u32 {
    let mut p = 1 << 31; // x^0
    let mut k = 3;
    while n != 0 {
        if n & 1 != 0 {
            p = gf2_mul(X_POW_2K[k], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// A read window over one file: positioned reads into a buffer of at most `cap` bytes.
struct Window<'a> {
    file: &'a File,
    len: u64,
    buf: &'a mut Vec<u8>,
    start: u64,
    cap: usize,
}

impl Window<'_> {
    /// `n` bytes at `off`; the caller keeps `off + n <= len` and `n <= cap / 2`.
    fn get(&mut self, off: u64, n: usize) -> io::Result<&[u8]> {
        let end = off + n as u64;
        if end > self.len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if off < self.start || end > self.start + self.buf.len() as u64 {
            let want = (self.cap as u64).min(self.len - off) as usize;
            self.buf.clear();
            self.buf.resize(want, 0);
            self.file.read_exact_at(self.buf, off)?;
            self.start = off;
        }
        let at = (off - self.start) as usize;
        Ok(&self.buf[at..at + n])
    }
}

pub(crate) fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(segment_name(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spool in a fresh directory holding `n` records of 10 bytes (`[i; 10]`),
    /// closed: its directory (kept alive by the caller) and configuration.
    fn written(n: u8) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(dir.path());
        let (spool, _) = crate::Spool::open(config.clone(), |_, _| {}).unwrap();
        let mut app = spool.start(Box::new(|| {})).unwrap();
        for i in 1..=n {
            app.append(&[i; 10]).unwrap();
        }
        app.close().unwrap();
        (dir, config)
    }

    /// Opens (recovers) the spool of `config`: the records read, the spool, the report.
    fn recovered(config: &Config) -> (Vec<(u64, Vec<u8>)>, crate::Spool, RecoveryReport) {
        let mut got = Vec::new();
        let (spool, report) =
            crate::Spool::open(config.clone(), |l, p| got.push((l.0, p.to_vec()))).unwrap();
        (got, spool, report)
    }

    /// Hostile-input probe: a record with a valid checksum numbered 2^64-1 appended to
    /// the last segment made the next number wrap to 0, and the router then deleted
    /// every segment as reclaimed. Numbers beyond MAX_LSN are damage: the records
    /// before stay, the next number follows them, and appending goes on.
    #[test]
    fn a_record_numbered_beyond_the_spool_is_damage_not_the_next_number() {
        let (dir, config) = written(5);
        for forged in [u64::MAX, MAX_LSN + 1, 1 << 63] {
            let seg = dir.path().join(segment_name(1));
            let mut bytes = std::fs::read(&seg).unwrap();
            let before = bytes.len();
            crate::record::encode(&mut bytes, forged, b"forged");
            std::fs::write(&seg, &bytes).unwrap();
            let (got, spool, report) = recovered(&config);
            assert_eq!(got.len(), 5, "{forged}: {got:?}");
            assert_eq!(spool.next_lsn(), Lsn(6), "{forged}");
            // At the end of the last segment, with nothing valid after it: a torn tail.
            assert_eq!(report.torn_tail.map(|t| t.offset), Some(before as u64));
            drop(spool);
        }
        let (spool, _) = crate::Spool::open(config.clone(), |_, _| {}).unwrap();
        let mut app = spool.start(Box::new(|| {})).unwrap();
        assert_eq!(app.append(b"after").unwrap(), Lsn(6));
        app.close().unwrap();
        let (got, _, _) = recovered(&config);
        assert_eq!(got.len(), 6);
        assert_eq!(got[5], (6, b"after".to_vec()));
    }

    /// The same forged number in the middle of a segment, valid records after it: it
    /// is damage there too (it was read as a jump ahead and became the next number).
    #[test]
    fn a_record_numbered_beyond_the_spool_mid_segment_is_skipped() {
        let (dir, config) = written(3);
        let seg = dir.path().join(segment_name(1));
        let mut bytes = std::fs::read(&seg).unwrap();
        crate::record::encode(
            &mut bytes,
            1 << 61,
            b"forged, plausible only by its checksum",
        );
        crate::record::encode(&mut bytes, 4, b"four");
        std::fs::write(&seg, &bytes).unwrap();
        let (got, spool, report) = recovered(&config);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[3], (4, b"four".to_vec()));
        assert_eq!(spool.next_lsn(), Lsn(5));
        assert_eq!(report.damaged.len(), 1, "{:?}", report.damaged);
    }

    /// Review: the bound itself was reachable: an empty file named 2^62, a valid record
    /// numbered between the file's plausible numbers and 2^62 at the end of a segment,
    /// or a skip marker reaching 2^62 made the next number reach it, and every record
    /// appended after was damage at the next start, cut as a torn tail. None of them
    /// moves the next number now, and what is appended stays.
    #[test]
    fn nothing_on_disk_moves_the_next_number_near_the_bound() {
        let forge = |kind: &str| {
            let (dir, config) = written(5);
            let seg = dir.path().join(segment_name(1));
            match kind {
                "name" => std::fs::write(dir.path().join(segment_name(MAX_LSN)), b"").unwrap(),
                "record" => {
                    let mut bytes = std::fs::read(&seg).unwrap();
                    crate::record::encode(&mut bytes, MAX_LSN, b"forged");
                    std::fs::write(&seg, &bytes).unwrap();
                }
                _ => {
                    let mut bytes = std::fs::read(&seg).unwrap();
                    bytes.extend_from_slice(&crate::record::encode_skip(6, MAX_LSN - 6));
                    std::fs::write(&seg, &bytes).unwrap();
                }
            }
            (dir, config)
        };
        for kind in ["name", "record", "skip"] {
            let (_dir, config) = forge(kind);
            let (spool, _) = crate::Spool::open(config.clone(), |_, _| {}).unwrap();
            assert_eq!(spool.next_lsn(), Lsn(6), "{kind}");
            let mut app = spool.start(Box::new(|| {})).unwrap();
            for _ in 0..3 {
                app.append(b"after").unwrap();
            }
            app.close().unwrap();
            // The appended records stay, start after start.
            for _ in 0..2 {
                let (got, spool, _) = recovered(&config);
                assert_eq!(got.len(), 8, "{kind}: {got:?}");
                assert_eq!(spool.next_lsn(), Lsn(9), "{kind}");
            }
        }
    }

    /// Writes `bytes` to a file and runs `f` over a window on it.
    fn with_window<T>(bytes: &[u8], f: impl FnOnce(&mut Window<'_>) -> T) -> T {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, bytes).unwrap();
        let mut buf = Vec::new();
        let mut win = Window {
            file: &file,
            len: bytes.len() as u64,
            buf: &mut buf,
            start: 0,
            cap: 256 << 10,
        };
        f(&mut win)
    }

    /// Bytes that look like nothing in particular (xorshift).
    fn noise(n: usize, mut seed: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    #[test]
    fn the_shift_agrees_with_crc32c_combine() {
        // (Not 0: zlib's combine then returns its first argument.)
        assert_eq!(x_pow_8n(0), 1 << 31);
        for n in [1u32, 7, 16, 1000, 65_536, 1_000_008, (1 << 31) + 7] {
            for crc in [0u32, 1, 0xDEAD_BEEF, u32::MAX] {
                assert_eq!(
                    gf2_mul(x_pow_8n(n), crc) ^ 0x1234_5678,
                    crc32c::crc32c_combine(crc, 0x1234_5678, n as usize),
                    "{n} {crc:#x}"
                );
            }
        }
    }

    /// Ranges checked from the running checksums, forward as the scan goes, agree with
    /// CRC-32C run over their bytes.
    #[test]
    fn a_range_from_the_marks_is_its_crc() {
        let bytes = noise(300_000, 7);
        with_window(&bytes, |win| {
            let mut sums = Checksums::default();
            sums.restart(3);
            let mut a = 3u64;
            let mut step = 1u64;
            while a < 250_000 {
                for len in [0u64, 1, 15, 16, 17, 40_000] {
                    let b = (a + len).min(bytes.len() as u64);
                    let want = crc32c::crc32c(&bytes[a as usize..b as usize]);
                    assert!(sums.covers(a), "{a}");
                    assert_eq!(sums.range(win, a, b).unwrap(), want, "{a}..{b}");
                }
                a += step;
                step = step * 7 % 997 + 1;
            }
            // The marks span one range's worth, not what was passed over.
            assert!(sums.marks.len() <= 40_000 / 16 + 2, "{}", sums.marks.len());
        });
    }

    /// The scan before the running checksums (every candidate's payload CRC'd from its
    /// bytes), kept as the reference the new one must agree with.
    fn reference_first_record_after(
        bytes: &[u8],
        from: u64,
        above: u64,
        max_record: u32,
    ) -> Option<(u64, u64)> {
        let len = bytes.len() as u64;
        let ceiling = above.saturating_add(len / HEADER as u64 + 1);
        let mut off = from;
        while off + HEADER as u64 <= len {
            let o = off as usize;
            let h = Header::parse(bytes[o..o + HEADER].try_into().unwrap());
            let fits = !h.skip && h.len <= max_record || h.skip && h.len as usize == SKIP_PAYLOAD;
            let end = off + HEADER as u64 + u64::from(h.len);
            if h.lsn > above && h.lsn <= ceiling && fits && end <= len {
                let ok = h.check(&bytes[o + HEADER..end as usize]) && h.lsn <= MAX_LSN;
                if ok {
                    return Some((off, h.lsn));
                }
            }
            off += 1;
        }
        None
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 200, ..Default::default() })]

        /// Forged headers (good numbers, any length, some with good checksums), genuine
        /// records and noise, scanned from several points as recovery does: the scan finds
        /// what the scan before the running checksums found.
        #[test]
        fn the_scan_finds_what_the_direct_scan_found(
            parts in proptest::collection::vec((0u8..4, 0u32..300, 0u64..6, 0u64..1000), 1..40),
            starts in proptest::collection::vec(0usize..4000, 1..6),
        ) {
            let max_record = 256;
            let mut bytes = Vec::new();
            for (kind, len, lsn, seed) in parts {
                match kind {
                    0 => crate::record::encode(&mut bytes, lsn, &noise(len.min(max_record) as usize, seed + 1)),
                    1 => {
                        bytes.extend_from_slice(&len.to_le_bytes());
                        bytes.extend_from_slice(&(seed as u32).to_le_bytes());
                        bytes.extend_from_slice(&lsn.to_le_bytes());
                    }
                    2 => bytes.extend_from_slice(&crate::record::encode_skip(lsn, seed % 3 + 1)),
                    _ => bytes.extend_from_slice(&noise((len % 40) as usize, seed + 1)),
                }
            }
            let mut starts = starts;
            starts.sort_unstable();
            with_window(&bytes, |win| {
                let mut sums = Checksums::default();
                for (i, from) in starts.into_iter().enumerate() {
                    let from = from.min(bytes.len()) as u64;
                    let above = i as u64;
                    let want = reference_first_record_after(&bytes, from, above, max_record);
                    let got = first_record_after(win, &mut sums, from, above, max_record);
                    assert_eq!(got, want, "from {from} above {above}");
                }
            });
        }
    }

    /// Hostile-input pass (F6): a file of 16-byte headers each claiming a max_record
    /// payload with the next number made the resynchronisation scan CRC max_record
    /// bytes per 16 bytes of file (5 MB held the router's start for 35 s). The genuine
    /// records after them are still found, the forged run reported as damage, and the
    /// bytes checksummed stay a small multiple of the file.
    #[test]
    fn forged_headers_claiming_max_payloads_cost_a_small_multiple_of_the_file() {
        let (dir, mut config) = written(5);
        config.max_record = 64 << 10;
        let seg = dir.path().join(segment_name(1));
        let mut bytes = std::fs::read(&seg).unwrap();
        let damage_at = bytes.len() as u64;
        for _ in 0..8192 {
            bytes.extend_from_slice(&config.max_record.to_le_bytes());
            bytes.extend_from_slice(&0u32.to_le_bytes());
            bytes.extend_from_slice(&6u64.to_le_bytes());
        }
        // Genuine: one record as long as the reader takes (every forged header before it
        // is then whole in the file and checked), and one after it.
        crate::record::encode(&mut bytes, 6, &noise(config.max_record as usize, 3));
        crate::record::encode(&mut bytes, 7, b"seven");
        std::fs::write(&seg, &bytes).unwrap();
        let file = bytes.len() as u64;
        for _ in 0..2 {
            let (got, spool, report) = recovered(&config);
            let lsns: Vec<u64> = got.iter().map(|g| g.0).collect();
            assert_eq!(lsns, [1, 2, 3, 4, 5, 6, 7]);
            assert_eq!(got[6].1, b"seven");
            assert_eq!(spool.next_lsn(), Lsn(8));
            assert_eq!(
                report.damaged,
                [Damage {
                    segment: seg.clone(),
                    offset: damage_at,
                    reason: DamageReason::BadChecksum,
                }]
            );
            assert!(report.torn_tail.is_none());
            // Before: 8,192 × 64 KiB = 512 MiB checksummed for a 0.2 MB file.
            assert!(
                report.checksummed_bytes <= 4 * file,
                "{} bytes checksummed for a file of {file}",
                report.checksummed_bytes
            );
            assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing cut");
        }
    }

    /// The same cost by another road: a damaged record claiming a max_record payload,
    /// then a genuine record, over and over. Each damaged one used to be CRC'd whole
    /// by the reading and again by the scan; now each byte is run through about once.
    /// Half the damaged records have good checksums and numbers out of turn (a gap).
    #[test]
    fn many_damaged_records_claiming_max_payloads_cost_a_small_multiple_of_the_file() {
        let (dir, mut config) = written(1);
        config.max_record = 4096;
        let seg = dir.path().join(segment_name(1));
        let mut bytes = std::fs::read(&seg).unwrap();
        let pairs = 2000u64;
        // Built from the end, so a forged record's checksum covers what follows it.
        let mut tail = noise(config.max_record as usize, 9);
        for i in (0..pairs).rev() {
            let mut pair = Vec::new();
            let lsn = 2 + i;
            let claim = config.max_record;
            let mut following = Vec::new();
            crate::record::encode(&mut following, lsn, &[i as u8; 20]);
            following.extend_from_slice(&tail);
            let payload = &following[..claim as usize];
            let forged_lsn = if i % 2 == 0 { lsn } else { 1 << 40 };
            let crc = if i % 2 == 0 {
                0
            } else {
                crate::record::checksum(forged_lsn, payload)
            };
            pair.extend_from_slice(&claim.to_le_bytes());
            pair.extend_from_slice(&crc.to_le_bytes());
            pair.extend_from_slice(&forged_lsn.to_le_bytes());
            pair.extend_from_slice(&following[..following.len() - tail.len()]);
            pair.extend_from_slice(&tail);
            tail = pair;
        }
        // The noise at the end is a torn tail.
        bytes.extend_from_slice(&tail);
        std::fs::write(&seg, &bytes).unwrap();
        let file = bytes.len() as u64;
        let (got, spool, report) = recovered(&config);
        let lsns: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(lsns, (1..=pairs + 1).collect::<Vec<_>>());
        assert_eq!(spool.next_lsn(), Lsn(pairs + 2));
        assert_eq!(
            report.damaged.len() as u64,
            pairs,
            "{:?}",
            &report.damaged[..3]
        );
        assert!(report
            .damaged
            .iter()
            .any(|d| d.reason == DamageReason::BadChecksum));
        assert!(report
            .damaged
            .iter()
            .any(|d| matches!(d.reason, DamageReason::LsnGap { .. })));
        assert_eq!(
            report.torn_tail.map(|t| t.bytes_cut),
            Some(u64::from(config.max_record))
        );
        // Before: 2,000 × 4 KiB read and scanned again, 16 MB for a 0.1 MB file.
        assert!(
            report.checksummed_bytes <= 4 * file,
            "{} bytes checksummed for a file of {file}",
            report.checksummed_bytes
        );
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_name(1), "00000000000000000001.log");
        assert_eq!(parse_segment_name("00000000000000000001.log"), Some(1));
        assert_eq!(parse_segment_name("1.log"), None);
        assert_eq!(parse_segment_name("0000000000000000000x.log"), None);
    }
}
