//! MoldUDP64 packets for the feed handler tests: a session packed into packets, and
//! the retransmission server's answer to a request.

use tickwire_itch::{Message, PacketBuilder, RetransmitRequest, Session};

/// Packs `msgs` into packets of at most `max_packet` bytes, first sequence `first`.
pub fn packetize(
    session: Session,
    first: u64,
    msgs: &[Message],
    max_packet: usize,
) -> Vec<Vec<u8>> {
    PacketBuilder::new(session, first, max_packet)
        .pack(msgs)
        .unwrap()
}

/// The retransmission server: the packets answering `req` from the session `msgs`.
pub fn answer(msgs: &[Message], req: RetransmitRequest) -> Vec<Vec<u8>> {
    let from = (req.sequence - 1) as usize;
    let to = (from + usize::from(req.count)).min(msgs.len());
    packetize(req.session, req.sequence, &msgs[from.min(to)..to], 1400)
}
