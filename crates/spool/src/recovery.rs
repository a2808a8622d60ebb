//! Recovery: read every segment in order, hand each valid record to the caller, cut a
//! torn tail, report everything else.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::record::{Header, HEADER, MAX_LSN, SKIP_PAYLOAD};

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
        // The window's bytes belong to the previous file.
        self.window.clear();
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
                let (h, ok) = match parse_at(&mut win, off, self.max_record) {
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
                _ => first_record_after(&mut win, off + 1, above, self.max_record),
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

fn parse_at(win: &mut Window<'_>, off: u64, max_record: u32) -> io::Result<Parsed> {
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
    let payload = win.get(off + HEADER as u64, h.len as usize)?;
    // A number no spool reaches is damage, whatever its checksum says.
    let ok = h.check(payload) && (1..=MAX_LSN).contains(&h.lsn);
    Ok(Parsed::Record(h, ok))
}

/// The first offset from `from` holding a valid record numbered above `above` (and
/// plausibly: not more records above it than the file could hold), with its number.
fn first_record_after(
    win: &mut Window<'_>,
    from: u64,
    above: u64,
    max_record: u32,
) -> Option<(u64, u64)> {
    let mut off = from;
    while off + (HEADER as u64) <= win.len {
        if let Some(h) = plausible_record_at(win, off, above, max_record) {
            return Some((off, h.lsn));
        }
        off += 1;
    }
    None
}

/// The header of a valid record at `off` numbered above `above`, and plausibly so: not
/// more records above it than the file could hold. The number is checked before the
/// payload is read, so a scan over garbage reads headers only.
fn plausible_record_at(
    win: &mut Window<'_>,
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
    match parse_at(win, off, max_record) {
        Ok(Parsed::Record(h, true)) => Some(h),
        _ => None,
    }
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

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_name(1), "00000000000000000001.log");
        assert_eq!(parse_segment_name("00000000000000000001.log"), Some(1));
        assert_eq!(parse_segment_name("1.log"), None);
        assert_eq!(parse_segment_name("0000000000000000000x.log"), None);
    }
}
