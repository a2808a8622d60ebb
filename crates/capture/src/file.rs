//! Standard pcap files of UDP datagrams, nanosecond timestamps.
//!
//! [`CaptureWriter`] writes `LINKTYPE_ETHERNET` frames (see [`crate::packet`]) in the
//! nanosecond variant of the classic pcap format (magic `a1b23c4d`), which tcpdump,
//! tshark and Wireshark read. [`CaptureReader`] reads classic pcap files with either
//! timestamp resolution and the Ethernet or raw-IPv4 link types, skipping (and counting)
//! frames that are not UDP over IPv4.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader};
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::packet::{self, LinkType, PacketError, UdpDatagram};

/// Errors opening, reading or writing a capture file; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a readable pcap file: {source}")]
    Pcap {
        path: PathBuf,
        source: pcap_file::PcapError,
    },
    #[error(
        "{path}: a pcapng file; only classic pcap files are read (convert it: `editcap -F \
         pcap IN OUT`, or `tcpdump -r IN -w OUT`)"
    )]
    Pcapng { path: PathBuf },
    /// Not a capture at all (new-user pass: `replay day.itch` said "Invalid field value:
    /// PcapHeader: wrong magic number").
    #[error(
        "{path}: not a pcap file (it does not begin with a pcap header); an ITCH file is \
         sent with `tickwire md publish --file`, and recorded into a capture with \
         `tickwire md capture`"
    )]
    NotPcap { path: PathBuf },
    #[error("{path}: link type {link:?} is not supported (Ethernet or raw IPv4 only)")]
    LinkType { path: PathBuf, link: DataLink },
    #[error("{path}: {source}")]
    Packet { path: PathBuf, source: PacketError },
    /// A record header no writer could have written: not a file cut short.
    #[error("{path}: corrupt pcap record at byte {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

/// Writes datagrams into a new pcap file.
///
/// The file header is on disk as soon as [`CaptureWriter::create`] returns, so even a
/// capture killed before its first flush leaves a valid (empty) pcap file; records are
/// buffered (1 MiB) until [`CaptureWriter::flush`] or [`CaptureWriter::finish`]. A
/// reader of a file still being written may find its last record cut short:
/// [`Captured::load`] takes the records before it ([`Captured::truncated`]).
pub struct CaptureWriter {
    path: PathBuf,
    out: BufWriter<File>,
    frame: Vec<u8>,
    packets: u64,
}

/// Bytes the writer buffers between flushes.
const WRITE_BUFFER: usize = 1 << 20;
/// The snapshot length the header announces (whole datagrams: at most 65,535 bytes).
const SNAPLEN: u32 = 65_535;

impl CaptureWriter {
    /// Creates (truncates) `path` and writes the pcap file header.
    pub fn create(path: &Path) -> Result<CaptureWriter, FileError> {
        let io = |source| FileError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::create(path).map_err(io)?;
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
        };
        let mut out = BufWriter::with_capacity(WRITE_BUFFER, file);
        header
            .write_to(&mut out)
            .map_err(|source| FileError::Pcap {
                path: path.to_owned(),
                source,
            })?;
        out.flush().map_err(io)?;
        Ok(CaptureWriter {
            path: path.to_owned(),
            out,
            frame: Vec::with_capacity(2048),
            packets: 0,
        })
    }

    /// Appends one datagram received at `unix_ns` (ns since the Unix epoch).
    pub fn write(
        &mut self,
        unix_ns: u64,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) -> Result<(), FileError> {
        self.frame.clear();
        packet::write_frame(&mut self.frame, src, dst, payload).map_err(|source| {
            FileError::Packet {
                path: self.path.clone(),
                source,
            }
        })?;
        let pkt = PcapPacket::new(
            Duration::from_nanos(unix_ns),
            self.frame.len() as u32,
            &self.frame,
        );
        pkt.write_to::<_, byteorder::NativeEndian>(
            &mut self.out,
            TsResolution::NanoSecond,
            SNAPLEN,
        )
        .map_err(|source| FileError::Pcap {
            path: self.path.clone(),
            source,
        })?;
        self.packets += 1;
        Ok(())
    }

    /// Writes the buffered records to the file (a reader then sees them).
    pub fn flush(&mut self) -> Result<(), FileError> {
        self.out.flush().map_err(|source| FileError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Datagrams written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes everything to the file.
    pub fn finish(mut self) -> Result<u64, FileError> {
        self.flush()?;
        Ok(self.packets)
    }
}

/// One datagram of a loaded capture (see [`Captured`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Capture time, ns since the Unix epoch.
    pub unix_ns: u64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    offset: usize,
    len: usize,
}

/// A whole capture in memory: the datagrams in file order, payloads in one arena.
///
/// Replay works from memory so that reading the file never delays a send; the memory
/// used is about the file size.
#[derive(Debug, Default)]
pub struct Captured {
    pub entries: Vec<Entry>,
    arena: Vec<u8>,
    /// Frames skipped because they are not UDP over IPv4 (or are malformed).
    pub skipped: u64,
    /// The file ends in the middle of a record (a capture still being written, or cut
    /// off): the entries are the complete records before it.
    pub truncated: bool,
}

impl Captured {
    /// The payload of `entry`.
    pub fn payload(&self, entry: &Entry) -> &[u8] {
        &self.arena[entry.offset..entry.offset + entry.len]
    }

    /// Capture time of the first datagram and duration to the last, in ns.
    pub fn span_ns(&self) -> u64 {
        match (self.entries.first(), self.entries.last()) {
            (Some(a), Some(b)) => b.unix_ns.saturating_sub(a.unix_ns),
            _ => 0,
        }
    }

    /// Reads a whole pcap file.
    pub fn load(path: &Path) -> Result<Captured, FileError> {
        let mut reader = CaptureReader::open(path)?;
        let mut out = Captured::default();
        while let Some(next) = reader.next() {
            match next {
                Ok((unix_ns, d)) => {
                    out.entries.push(Entry {
                        unix_ns,
                        src: d.src,
                        dst: d.dst,
                        offset: out.arena.len(),
                        len: d.payload.len(),
                    });
                    out.arena.extend_from_slice(d.payload);
                }
                Err(FileError::Packet { .. }) => out.skipped += 1,
                Err(FileError::Pcap {
                    source: pcap_file::PcapError::IoError(e),
                    ..
                }) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    // A record cut short by the file's end, or one whose header claims
                    // a length no writer produces (which the pcap reader also reports
                    // as the end of the file while it waits for the bytes).
                    if let Some(e) = reader.corrupt_record() {
                        return Err(e);
                    }
                    out.truncated = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// The classic pcap magic numbers (microsecond and nanosecond timestamps).
const PCAP_MAGICS: [u32; 2] = [0xa1b2_c3d4, 0xa1b2_3c4d];

/// A pcapng file's first block type (Section Header Block), the same in either order.
const PCAPNG_SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// The file's first (up to) 4 bytes and how many there are.
fn head(path: &Path) -> Option<([u8; 4], usize)> {
    let mut head = [0u8; 4];
    let n = File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .ok()?;
    Some((head, n))
}

/// Whether the file's first bytes could begin a classic pcap file (a magic number, in
/// either byte order, or fewer than its 4 bytes).
fn starts_like_pcap(path: &Path) -> bool {
    let Some((head, n)) = head(path) else {
        return false;
    };
    PCAP_MAGICS
        .iter()
        .any(|m| m.to_le_bytes().starts_with(&head[..n]) || m.to_be_bytes().starts_with(&head[..n]))
}

/// Whether the file begins as a capture does: a classic pcap magic number (either byte
/// order) or a pcapng Section Header Block. False for a file shorter than 4 bytes.
pub fn is_capture_file(path: &Path) -> bool {
    match head(path) {
        Some((head, 4)) => {
            head == PCAPNG_SHB
                || PCAP_MAGICS
                    .iter()
                    .any(|m| head == m.to_le_bytes() || head == m.to_be_bytes())
        }
        _ => false,
    }
}

/// Reads datagrams from a pcap file, one at a time, without copying payloads.
pub struct CaptureReader {
    path: PathBuf,
    reader: PcapReader<BufReader<File>>,
    link: LinkType,
    /// Where the next record starts in the file (after the 24-byte file header).
    offset: u64,
}

/// The pcap file header's length; each record's header is 16 bytes.
const FILE_HEADER_LEN: u64 = 24;
const RECORD_HEADER_LEN: u64 = 16;
/// The most a record may hold whatever the header's snapshot length says: the pcap
/// reader's buffer (pcap-file's 8,000,000 bytes, header included: a record beyond it
/// can never be read), far beyond a datagram.
const MAX_RECORD_LEN: u64 = 8_000_000 - RECORD_HEADER_LEN;

impl CaptureReader {
    /// Opens `path` and checks its header and link type.
    pub fn open(path: &Path) -> Result<CaptureReader, FileError> {
        let file = File::open(path).map_err(|source| FileError::Io {
            path: path.to_owned(),
            source,
        })?;
        // Said as such: the pcap reader's "wrong magic number" left a user guessing.
        if head(path).is_some_and(|(h, n)| n == 4 && h == PCAPNG_SHB) {
            return Err(FileError::Pcapng {
                path: path.to_owned(),
            });
        }
        let reader = PcapReader::new(BufReader::with_capacity(1 << 20, file)).map_err(
            |source| match source {
                pcap_file::PcapError::IoError(e)
                    if e.kind() == std::io::ErrorKind::UnexpectedEof && starts_like_pcap(path) =>
                {
                    FileError::Io {
                        path: path.to_owned(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "too short for a pcap file header (24 bytes): empty, or \
                                 still being written (md capture writes its header at \
                                 once and its records every second)",
                        ),
                    }
                }
                // Shorter than a header without a pcap's first bytes, or a header
                // without its magic number.
                pcap_file::PcapError::IoError(e)
                    if e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    FileError::NotPcap {
                        path: path.to_owned(),
                    }
                }
                pcap_file::PcapError::InvalidField(f) if f.contains("magic") => {
                    FileError::NotPcap {
                        path: path.to_owned(),
                    }
                }
                source => FileError::Pcap {
                    path: path.to_owned(),
                    source,
                },
            },
        )?;
        let link = match reader.header().datalink {
            DataLink::ETHERNET => LinkType::Ethernet,
            DataLink::RAW | DataLink::IPV4 => LinkType::RawIpv4,
            other => {
                return Err(FileError::LinkType {
                    path: path.to_owned(),
                    link: other,
                })
            }
        };
        Ok(CaptureReader {
            path: path.to_owned(),
            reader,
            link,
            offset: FILE_HEADER_LEN,
        })
    }

    /// After reading stopped at an unexpected end of the file: the error when the next
    /// record's header is impossible (longer than the file's snapshot length or than
    /// its original length, or than any record this reader takes) rather than cut
    /// short; `None` when the file simply ends inside the record (a capture still
    /// being written, or cut off).
    pub fn corrupt_record(&self) -> Option<FileError> {
        use std::io::{Read, Seek, SeekFrom};
        let mut head = [0u8; RECORD_HEADER_LEN as usize];
        let mut f = File::open(&self.path).ok()?;
        f.seek(SeekFrom::Start(self.offset)).ok()?;
        f.read_exact(&mut head).ok()?;
        let header = self.reader.header();
        let word = |i: usize| {
            let b = [head[i], head[i + 1], head[i + 2], head[i + 3]];
            match header.endianness {
                Endianness::Big => u32::from_be_bytes(b),
                Endianness::Little => u32::from_le_bytes(b),
            }
        };
        let (incl_len, orig_len) = (word(8), word(12));
        let reason = if incl_len > header.snaplen && header.snaplen > 0 {
            format!(
                "it claims {incl_len} bytes, more than the file's snapshot length ({})",
                header.snaplen
            )
        } else if incl_len > orig_len {
            format!("it claims {incl_len} bytes captured of a {orig_len}-byte frame")
        } else if u64::from(incl_len) > MAX_RECORD_LEN {
            format!("it claims {incl_len} bytes (at most {MAX_RECORD_LEN} are read)")
        } else {
            return None;
        };
        Some(FileError::Corrupt {
            path: self.path.clone(),
            offset: self.offset,
            reason,
        })
    }

    /// The next datagram and its capture time (ns since the Unix epoch); `None` at the end
    /// of the file. A frame that is not a UDP datagram is `Err(FileError::Packet)`, after
    /// which reading can go on; other errors end the file.
    #[allow(clippy::should_implement_trait)] // borrows from the reader: not an Iterator
    pub fn next(&mut self) -> Option<Result<(u64, UdpDatagram<'_>), FileError>> {
        let path = &self.path;
        let link = self.link;
        match self.reader.next_packet()? {
            Err(source) => Some(Err(FileError::Pcap {
                path: path.clone(),
                source,
            })),
            Ok(pkt) => {
                self.offset += RECORD_HEADER_LEN + pkt.data.len() as u64;
                let unix_ns = u64::try_from(pkt.timestamp.as_nanos()).unwrap_or(u64::MAX);
                let data: &[u8] = match pkt.data {
                    std::borrow::Cow::Borrowed(b) => b,
                    // pcap-file's reader lends its buffer; an owned packet would be a
                    // change in that crate: report it rather than guess.
                    std::borrow::Cow::Owned(_) => {
                        return Some(Err(FileError::Io {
                            path: path.clone(),
                            source: std::io::Error::other(
                                "unexpected owned packet from the pcap reader",
                            ),
                        }))
                    }
                };
                Some(
                    packet::parse(link, data)
                        .map(|d| (unix_ns, d))
                        .map_err(|source| FileError::Packet {
                            path: path.clone(),
                            source,
                        }),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_being_written_loads_up_to_its_last_complete_record() {
        let dir = tempfile::Builder::new()
            .prefix("tickwire-capture-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("live.pcap");
        let src: SocketAddrV4 = "127.0.0.1:4000".parse().unwrap();
        let dst: SocketAddrV4 = "239.0.0.9:26400".parse().unwrap();
        let mut w = CaptureWriter::create(&path).unwrap();
        // The header is on disk at once: a file nothing was written to yet loads empty.
        let empty = Captured::load(&path).unwrap();
        assert!(empty.entries.is_empty() && !empty.truncated);
        for i in 0..10u64 {
            w.write(1_700_000_000_000_000_000 + i, src, dst, &[i as u8; 100])
                .unwrap();
        }
        w.flush().unwrap();
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(Captured::load(&path).unwrap().entries.len(), 10);
        // Every cut inside the last record (its 16-byte record header, its frame) loads
        // the nine before it, flagged; a cut on a record boundary is a whole file.
        let record = (whole.len() - 24) / 10;
        let cut_path = dir.path().join("cut.pcap");
        for cut in [1, 15, 16, 17, record - 1] {
            std::fs::write(&cut_path, &whole[..whole.len() - record + cut]).unwrap();
            let c = Captured::load(&cut_path).unwrap();
            assert_eq!((c.entries.len(), c.truncated), (9, true), "cut at {cut}");
            assert_eq!(c.payload(&c.entries[8]), &[8u8; 100]);
        }
        std::fs::write(&cut_path, &whole[..whole.len() - record]).unwrap();
        let c = Captured::load(&cut_path).unwrap();
        assert_eq!((c.entries.len(), c.truncated), (9, false));
        // Shorter than the file header: said so, not "unexpected end of file" alone.
        std::fs::write(&cut_path, &whole[..10]).unwrap();
        let e = Captured::load(&cut_path).unwrap_err().to_string();
        assert!(e.contains("too short for a pcap file header"), "{e}");
        drop(w);
    }

    #[test]
    fn write_then_load_round_trips_in_file_order() {
        let dir = tempfile::Builder::new()
            .prefix("tickwire-capture-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("rt.pcap");
        let src: SocketAddrV4 = "127.0.0.1:4000".parse().unwrap();
        let dst: SocketAddrV4 = "239.0.0.9:26400".parse().unwrap();
        let mut w = CaptureWriter::create(&path).unwrap();
        for i in 0..100u64 {
            let payload = vec![i as u8; (i as usize) * 7 % 1400];
            w.write(
                1_700_000_000_000_000_000 + i * 1_234_567,
                src,
                dst,
                &payload,
            )
            .unwrap();
        }
        assert_eq!(w.finish().unwrap(), 100);
        // The nanosecond pcap magic, as tcpdump expects it.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], &0xa1b23c4du32.to_ne_bytes());
        let cap = Captured::load(&path).unwrap();
        assert_eq!(cap.entries.len(), 100);
        assert_eq!(cap.skipped, 0);
        for (i, e) in cap.entries.iter().enumerate() {
            let i = i as u64;
            assert_eq!(e.unix_ns, 1_700_000_000_000_000_000 + i * 1_234_567);
            assert_eq!((e.src, e.dst), (src, dst));
            assert_eq!(cap.payload(e), &vec![i as u8; (i as usize) * 7 % 1400][..]);
        }
        assert_eq!(cap.span_ns(), 99 * 1_234_567);
    }

    /// Hostile-input probe: a last record claiming 4 GB was reported as a capture
    /// still being written ("ends in the middle of a record"), not as corrupt.
    #[test]
    fn a_record_claiming_more_than_any_writer_writes_is_corrupt_not_cut_short() {
        let dir = tempfile::Builder::new()
            .prefix("tickwire-capture-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("ok.pcap");
        let src: SocketAddrV4 = "127.0.0.1:4000".parse().unwrap();
        let dst: SocketAddrV4 = "239.0.0.9:26400".parse().unwrap();
        let mut w = CaptureWriter::create(&path).unwrap();
        for i in 0..3u64 {
            w.write(1_700_000_000_000_000_000 + i, src, dst, &[i as u8; 100])
                .unwrap();
        }
        w.finish().unwrap();
        let whole = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad.pcap");
        let record = |incl: u32, orig: u32| {
            let mut b = whole.clone();
            b.extend_from_slice(&[0; 8]); // time
            b.extend_from_slice(&incl.to_le_bytes());
            b.extend_from_slice(&orig.to_le_bytes());
            b.extend_from_slice(&[0xab; 40]);
            b
        };
        for (incl, orig, says) in [
            (
                u32::MAX,
                u32::MAX,
                "more than the file's snapshot length (65535)",
            ),
            (2000, 1000, "captured of a 1000-byte frame"),
        ] {
            std::fs::write(&bad, record(incl, orig)).unwrap();
            let e = Captured::load(&bad).unwrap_err().to_string();
            let at = format!("corrupt pcap record at byte {}", whole.len());
            assert!(e.contains(&at) && e.contains(says), "{e}");
        }
        // A plausible record cut short is still a capture being written.
        std::fs::write(&bad, record(1000, 1000)).unwrap();
        let c = Captured::load(&bad).unwrap();
        assert_eq!((c.entries.len(), c.truncated), (3, true));
    }

    #[test]
    fn a_non_pcap_file_is_a_clear_error() {
        let path = tempfile::Builder::new()
            .prefix("tickwire-notpcap-")
            .tempfile()
            .unwrap()
            .into_temp_path();
        std::fs::write(&path, b"this is not a capture").unwrap();
        let err = Captured::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("not a pcap file (it does not begin with a pcap header)")
                && err.contains("md publish --file")
                && !err.contains("magic"),
            "{err}"
        );
        // Longer than a header: the magic number is what is wrong.
        std::fs::write(&path, "an ITCH file, not a capture: ".repeat(10)).unwrap();
        let err = Captured::load(&path).unwrap_err().to_string();
        assert!(err.contains("not a pcap file (it does not begin"), "{err}");
        // A pcapng file (its Section Header Block first) is named as one.
        let mut shb = PCAPNG_SHB.to_vec();
        shb.extend_from_slice(&[28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0]);
        std::fs::write(&path, &shb).unwrap();
        let err = Captured::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("a pcapng file") && err.contains("editcap"),
            "{err}"
        );
    }
}
