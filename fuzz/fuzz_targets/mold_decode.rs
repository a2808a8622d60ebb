//! Decodes arbitrary bytes as a MoldUDP64 downstream packet and its message blocks, each
//! block as an ITCH message, and as a re-request packet.
//!
//! Checks:
//! - no decoder panics;
//! - the block iterator yields at most one error, last, and the blocks it accepts lie
//!   inside the packet with consecutive sequence numbers;
//! - a packet whose blocks are all valid is rebuilt byte-identically by `PacketBuilder`;
//! - a 20-byte re-request re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_itch::{
    decode, MoldPacket, PacketBuilder, PacketKind, RetransmitRequest, MOLD_HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RetransmitRequest::decode(data) {
        assert_eq!(&r.to_bytes()[..], data);
    }
    let Ok(p) = MoldPacket::parse(data) else {
        assert!(data.len() < MOLD_HEADER_LEN);
        return;
    };
    let mut errors = 0;
    let mut blocks = Vec::new();
    let mut used = MOLD_HEADER_LEN;
    for item in p.messages() {
        assert_eq!(errors, 0, "an error must be the last item");
        match item {
            Ok(b) => {
                assert_eq!(b.sequence, p.sequence().wrapping_add(blocks.len() as u64));
                used += 2 + b.data.len();
                assert!(used <= data.len());
                let _ = decode(b.data);
                blocks.push(b.data);
            }
            Err(_) => errors += 1,
        }
    }
    assert_eq!(p.validate().is_ok(), errors == 0);
    if errors == 0 && p.kind() == PacketKind::Messages {
        assert_eq!(used, data.len());
        assert_eq!(blocks.len(), usize::from(p.message_count()));
        let mut b = PacketBuilder::new(p.session(), p.sequence(), data.len());
        for m in &blocks {
            b.push(m)
                .expect("the blocks of a valid packet fit a packet of its size");
        }
        assert_eq!(b.finish(), data);
    }
});
