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

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
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
    #[error("{path}: link type {link:?} is not supported (Ethernet or raw IPv4 only)")]
    LinkType { path: PathBuf, link: DataLink },
    #[error("{path}: {source}")]
    Packet { path: PathBuf, source: PacketError },
}

/// Writes datagrams into a new pcap file.
pub struct CaptureWriter {
    path: PathBuf,
    writer: PcapWriter<BufWriter<File>>,
    frame: Vec<u8>,
    packets: u64,
}

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
            snaplen: 65_535,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
        };
        let writer = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header)
            .map_err(|source| FileError::Pcap {
                path: path.to_owned(),
                source,
            })?;
        Ok(CaptureWriter {
            path: path.to_owned(),
            writer,
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
        self.writer
            .write_packet(&pkt)
            .map_err(|source| FileError::Pcap {
                path: self.path.clone(),
                source,
            })?;
        self.packets += 1;
        Ok(())
    }

    /// Datagrams written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes everything to the file.
    pub fn finish(self) -> Result<u64, FileError> {
        let path = self.path;
        self.writer
            .into_writer()
            .flush()
            .map_err(|source| FileError::Io {
                path: path.clone(),
                source,
            })?;
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
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// Reads datagrams from a pcap file, one at a time, without copying payloads.
pub struct CaptureReader {
    path: PathBuf,
    reader: PcapReader<BufReader<File>>,
    link: LinkType,
}

impl CaptureReader {
    /// Opens `path` and checks its header and link type.
    pub fn open(path: &Path) -> Result<CaptureReader, FileError> {
        let file = File::open(path).map_err(|source| FileError::Io {
            path: path.to_owned(),
            source,
        })?;
        let reader =
            PcapReader::new(BufReader::with_capacity(1 << 20, file)).map_err(|source| {
                FileError::Pcap {
                    path: path.to_owned(),
                    source,
                }
            })?;
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

    #[test]
    fn a_non_pcap_file_is_a_clear_error() {
        let path = tempfile::Builder::new()
            .prefix("tickwire-notpcap-")
            .tempfile()
            .unwrap()
            .into_temp_path();
        std::fs::write(&path, b"this is not a capture").unwrap();
        let err = Captured::load(&path).unwrap_err().to_string();
        assert!(err.contains("not a readable pcap file"), "{err}");
    }
}
