//! UDP datagrams as link-layer frames (pure: no IO).
//!
//! A capture stores what the wire carried, so that standard tools dissect it: each
//! datagram is written as an Ethernet II frame holding an IPv4 header (no options,
//! correct header checksum) and a UDP header (checksum 0, which IPv4 allows). The
//! destination MAC of a multicast group is the standard `01:00:5e` mapping of the
//! group's low 23 bits, so Wireshark shows the group as it would on a real network.
//!
//! [`parse`] takes frames apart again, for files written by tickwire and by other tools
//! (tcpdump on a real interface: Ethernet, optionally one 802.1Q VLAN tag; or raw IPv4
//! link types). Everything that is not a complete, unfragmented IPv4/UDP datagram is a
//! [`PacketError`], never a panic.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::net::{Ipv4Addr, SocketAddrV4};

/// Bytes of the Ethernet II header.
pub const ETHERNET_HEADER: usize = 14;
/// Bytes of an IPv4 header without options.
pub const IPV4_HEADER: usize = 20;
/// Bytes of a UDP header.
pub const UDP_HEADER: usize = 8;
/// Headers added in front of every datagram by [`write_frame`].
pub const FRAME_OVERHEAD: usize = ETHERNET_HEADER + IPV4_HEADER + UDP_HEADER;
/// Largest UDP payload an IPv4 datagram can carry.
pub const MAX_UDP_PAYLOAD: usize = 65_535 - IPV4_HEADER - UDP_HEADER;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const IPPROTO_UDP: u8 = 17;
/// Source MAC of frames we synthesize (locally administered, unicast).
const SOURCE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];

/// One UDP datagram taken out of a frame: addresses and the payload (borrowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: &'a [u8],
}

/// How the frames of a capture file begin (its pcap link type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1).
    Ethernet,
    /// `LINKTYPE_RAW` (101) or `LINKTYPE_IPV4` (228): the frame starts with the IP header.
    RawIpv4,
}

/// Why a frame is not a UDP datagram we can replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("frame truncated: {needed} bytes needed for the {layer} header, {have} present")]
    Truncated {
        layer: &'static str,
        needed: usize,
        have: usize,
    },
    #[error("not IPv4 (ethertype {0:#06x})")]
    NotIpv4(u16),
    #[error("IPv4 header invalid: {0}")]
    BadIpv4(&'static str),
    #[error("not UDP (IP protocol {0})")]
    NotUdp(u8),
    #[error("IPv4 fragment (fragments are not reassembled)")]
    Fragment,
    #[error("UDP length {udp_len} does not fit the {available} bytes the IP header allows")]
    BadUdpLength { udp_len: usize, available: usize },
    #[error("payload of {0} bytes exceeds the 65507-byte UDP maximum")]
    TooLarge(usize),
}

/// Appends `payload` as an Ethernet/IPv4/UDP frame from `src` to `dst` to `out`.
pub fn write_frame(
    out: &mut Vec<u8>,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: &[u8],
) -> Result<(), PacketError> {
    if payload.len() > MAX_UDP_PAYLOAD {
        return Err(PacketError::TooLarge(payload.len()));
    }
    out.reserve(FRAME_OVERHEAD + payload.len());
    // Ethernet II.
    out.extend_from_slice(&dest_mac(*dst.ip()));
    out.extend_from_slice(&SOURCE_MAC);
    out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    // IPv4, no options. Multicast leaves the host with TTL 1 by default; keep that.
    let total = (IPV4_HEADER + UDP_HEADER + payload.len()) as u16;
    let ttl = if dst.ip().is_multicast() { 1 } else { 64 };
    let mut ip = [0u8; IPV4_HEADER];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = ttl;
    ip[9] = IPPROTO_UDP;
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let sum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&ip);
    // UDP, checksum 0 (none).
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    out.extend_from_slice(&((UDP_HEADER + payload.len()) as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    Ok(())
}

/// Takes a frame of the given link type apart into its UDP datagram.
pub fn parse(link: LinkType, frame: &[u8]) -> Result<UdpDatagram<'_>, PacketError> {
    let ip = match link {
        LinkType::RawIpv4 => frame,
        LinkType::Ethernet => {
            let eth = need(frame, ETHERNET_HEADER, "Ethernet")?;
            let mut ethertype = u16::from_be_bytes([eth[12], eth[13]]);
            let mut rest = &frame[ETHERNET_HEADER..];
            if ethertype == ETHERTYPE_VLAN {
                let tag = need(rest, 4, "802.1Q")?;
                ethertype = u16::from_be_bytes([tag[2], tag[3]]);
                rest = &rest[4..];
            }
            if ethertype != ETHERTYPE_IPV4 {
                return Err(PacketError::NotIpv4(ethertype));
            }
            rest
        }
    };
    let hdr = need(ip, IPV4_HEADER, "IPv4")?;
    if hdr[0] >> 4 != 4 {
        return Err(PacketError::BadIpv4("version is not 4"));
    }
    let ihl = usize::from(hdr[0] & 0x0f) * 4;
    if ihl < IPV4_HEADER {
        return Err(PacketError::BadIpv4("header length below 20 bytes"));
    }
    need(ip, ihl, "IPv4 options")?;
    let total = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
    if total < ihl {
        return Err(PacketError::BadIpv4("total length below header length"));
    }
    if total > ip.len() {
        return Err(PacketError::Truncated {
            layer: "IPv4 payload",
            needed: total,
            have: ip.len(),
        });
    }
    let frag = u16::from_be_bytes([hdr[6], hdr[7]]);
    if frag & 0x2000 != 0 || frag & 0x1fff != 0 {
        return Err(PacketError::Fragment);
    }
    if hdr[9] != IPPROTO_UDP {
        return Err(PacketError::NotUdp(hdr[9]));
    }
    let src_ip = Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]);
    let dst_ip = Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]);
    let udp = &ip[ihl..total];
    let uh = need(udp, UDP_HEADER, "UDP")?;
    let udp_len = usize::from(u16::from_be_bytes([uh[4], uh[5]]));
    if udp_len < UDP_HEADER || udp_len > udp.len() {
        return Err(PacketError::BadUdpLength {
            udp_len,
            available: udp.len(),
        });
    }
    Ok(UdpDatagram {
        src: SocketAddrV4::new(src_ip, u16::from_be_bytes([uh[0], uh[1]])),
        dst: SocketAddrV4::new(dst_ip, u16::from_be_bytes([uh[2], uh[3]])),
        payload: &udp[UDP_HEADER..udp_len],
    })
}

fn need<'a>(buf: &'a [u8], needed: usize, layer: &'static str) -> Result<&'a [u8], PacketError> {
    buf.get(..needed).ok_or(PacketError::Truncated {
        layer,
        needed,
        have: buf.len(),
    })
}

/// The Ethernet destination of an IPv4 address: `01:00:5e` + the low 23 bits for a
/// multicast group, all zeroes otherwise (as on a loopback interface).
fn dest_mac(ip: Ipv4Addr) -> [u8; 6] {
    if ip.is_multicast() {
        let o = ip.octets();
        [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
    } else {
        [0; 6]
    }
}

/// The IPv4 header checksum (RFC 791): ones' complement of the ones' complement sum.
fn ipv4_checksum(hdr: &[u8; IPV4_HEADER]) -> u16 {
    let mut sum: u32 = hdr
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn frame_layout_matches_the_standards() {
        let mut f = Vec::new();
        write_frame(
            &mut f,
            addr("127.0.0.1:5000"),
            addr("239.1.2.3:26400"),
            b"hello",
        )
        .unwrap();
        assert_eq!(f.len(), FRAME_OVERHEAD + 5);
        assert_eq!(
            &f[0..6],
            &[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03],
            "multicast MAC mapping"
        );
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        // A header whose checksum is right sums to 0xffff, i.e. checksums to zero.
        let ip: [u8; 20] = f[14..34].try_into().unwrap();
        assert_eq!(ipv4_checksum(&ip), 0);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 33);
        assert_eq!(&f[34..36], &5000u16.to_be_bytes());
        assert_eq!(&f[36..38], &26400u16.to_be_bytes());
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 13);
        assert_eq!(&f[42..], b"hello");
    }

    #[test]
    fn vlan_tagged_and_raw_frames_parse() {
        let mut f = Vec::new();
        write_frame(&mut f, addr("10.0.0.1:1"), addr("10.0.0.2:2"), b"xyz").unwrap();
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&f[12..]);
        let d = parse(LinkType::Ethernet, &tagged).unwrap();
        assert_eq!((d.dst, d.payload), (addr("10.0.0.2:2"), &b"xyz"[..]));
        let raw = parse(LinkType::RawIpv4, &f[ETHERNET_HEADER..]).unwrap();
        assert_eq!(raw.src, addr("10.0.0.1:1"));
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut f = Vec::new();
        write_frame(&mut f, addr("10.0.0.1:1"), addr("10.0.0.2:2"), b"abcdef").unwrap();
        let mut not_udp = f.clone();
        not_udp[14 + 9] = 6;
        assert_eq!(
            parse(LinkType::Ethernet, &not_udp),
            Err(PacketError::NotUdp(6))
        );
        let mut frag = f.clone();
        frag[14 + 6] = 0x20;
        assert_eq!(parse(LinkType::Ethernet, &frag), Err(PacketError::Fragment));
        let mut long_udp = f.clone();
        long_udp[38..40].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(
            parse(LinkType::Ethernet, &long_udp),
            Err(PacketError::BadUdpLength { .. })
        ));
        let mut ipv6 = f.clone();
        ipv6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(
            parse(LinkType::Ethernet, &ipv6),
            Err(PacketError::NotIpv4(0x86dd))
        );
        assert!(matches!(
            parse(LinkType::Ethernet, &f[..f.len() - 1]),
            Err(PacketError::Truncated { .. })
        ));
    }

    proptest! {
        #[test]
        fn round_trip(src_ip: u32, dst_ip: u32, sp: u16, dp: u16, payload in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let src = SocketAddrV4::new(Ipv4Addr::from(src_ip), sp);
            let dst = SocketAddrV4::new(Ipv4Addr::from(dst_ip), dp);
            let mut f = Vec::new();
            write_frame(&mut f, src, dst, &payload).unwrap();
            let d = parse(LinkType::Ethernet, &f).unwrap();
            prop_assert_eq!(d, UdpDatagram { src, dst, payload: &payload });
            // Every truncation is an error, never a panic.
            for cut in 0..f.len() {
                prop_assert!(parse(LinkType::Ethernet, &f[..cut]).is_err());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(LinkType::Ethernet, &bytes);
            let _ = parse(LinkType::RawIpv4, &bytes);
        }
    }
}
