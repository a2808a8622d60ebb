//! Capture files and timed replay.
//!
//! * [`packet`]: the pure part: wraps a UDP datagram into an Ethernet/IPv4/UDP frame
//!   (so tcpdump and Wireshark dissect the capture) and takes one apart again, rejecting
//!   anything malformed with a typed error.
//! * [`file`]: standard pcap files (nanosecond resolution, `LINKTYPE_ETHERNET`) through
//!   the `pcap-file` crate.
//! * [`speed`]: `1x`, `4x`, `max`, ... and the absolute replay schedule (pure).
//! * [`net`]: the drivers: multicast capture and replay over UDP.

pub mod file;
pub mod net;
pub mod packet;
pub mod speed;

pub use file::{is_capture_file, CaptureReader, CaptureWriter, Captured};
pub use packet::{PacketError, UdpDatagram};
pub use speed::{Schedule, Speed};
