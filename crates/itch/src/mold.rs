//! MoldUDP64 downstream packets and re-request packets.
//!
//! # Wire format
//!
//! ```text
//! downstream packet:  Session (10, alpha) | SequenceNumber (u64 BE) | MessageCount (u16 BE)
//!                     then MessageCount blocks of: MessageLength (u16 BE) | message bytes
//! heartbeat:          MessageCount = 0 (SequenceNumber = next expected sequence)
//! end of session:     MessageCount = 0xFFFF, no blocks
//! re-request:         Session (10) | SequenceNumber (u64 BE) | RequestedMessageCount (u16 BE)
//! ```
//!
//! # Design
//!
//! [`MoldPacket::parse`] checks only the 20-byte header and borrows the payload;
//! [`MoldPacket::messages`] walks the blocks lazily and reports a block running past the
//! end of the packet, fewer blocks than announced, or bytes after the last block as a
//! [`MoldError`] item (after which the iterator ends): a consumer can process the valid
//! prefix of a damaged packet and count the damage. Nothing here allocates or panics on
//! any input.
//!
//! [`PacketBuilder`] writes packets into one reusable buffer: messages are encoded in
//! place and the header's count is patched on [`PacketBuilder::finish`].

use crate::message::{alpha, alpha_str, AlphaError, EncodeError, Message};

/// Length of the session field.
pub const SESSION_LEN: usize = 10;
/// Length of the downstream packet header (and of a whole re-request packet).
pub const MOLD_HEADER_LEN: usize = 20;
/// Length of a re-request packet.
pub const REQUEST_LEN: usize = 20;
/// Length of the per-message length prefix.
pub const BLOCK_HEADER_LEN: usize = 2;
/// MessageCount value of an End of Session packet.
pub const END_OF_SESSION: u16 = 0xFFFF;
/// A conventional maximum packet size that fits an Ethernet MTU with IP/UDP headers.
pub const DEFAULT_MAX_PACKET: usize = 1400;

/// Why bytes are not a valid MoldUDP64 packet (or message block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MoldError {
    /// Shorter than the 20-byte header.
    #[error("MoldUDP64 packet of {0} bytes is shorter than its 20-byte header")]
    Truncated(usize),
    /// A message block's length runs past the end of the packet.
    #[error("MoldUDP64 block {index} at offset {offset} runs past the packet end")]
    BlockOverrun {
        /// Index of the block in the packet (0-based).
        index: u16,
        /// Offset of the block's length prefix in the packet.
        offset: usize,
    },
    /// The packet ends before the announced number of blocks.
    #[error("MoldUDP64 packet announces {declared} messages but holds {found}")]
    CountMismatch {
        /// MessageCount of the header.
        declared: u16,
        /// Complete blocks found.
        found: u16,
    },
    /// Bytes follow the last announced block (or a heartbeat / end-of-session header).
    #[error("MoldUDP64 packet has {0} bytes after its last message")]
    TrailingBytes(usize),
    /// A re-request packet is not exactly 20 bytes.
    #[error("MoldUDP64 request of {0} bytes, expected 20")]
    RequestLength(usize),
}

/// A 10-byte MoldUDP64 session name, space-padded.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Session(pub [u8; SESSION_LEN]);

impl Session {
    /// The session `s` padded with spaces (at most 10 printable ASCII bytes).
    pub fn new(s: &str) -> Result<Self, AlphaError> {
        alpha::<SESSION_LEN>(s).map(Session)
    }

    /// The wire bytes, padding included.
    pub const fn as_bytes(&self) -> &[u8; SESSION_LEN] {
        &self.0
    }

    /// The session without padding, as text (`None` if not UTF-8).
    pub fn as_str(&self) -> Option<&str> {
        alpha_str(&self.0)
    }
}

impl Default for Session {
    fn default() -> Self {
        Session([b' '; SESSION_LEN])
    }
}

crate::message::alpha_text_impls!(Session);

/// The 20-byte header of a downstream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MoldHeader {
    /// Session name.
    pub session: Session,
    /// Sequence number of the first message in the packet (for a heartbeat or end of
    /// session: the next sequence number to be sent).
    pub sequence: u64,
    /// Number of message blocks; 0 = heartbeat, [`END_OF_SESSION`] = end of session.
    pub count: u16,
}

impl MoldHeader {
    /// Reads the header at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self, MoldError> {
        let Some(h) = buf.first_chunk::<MOLD_HEADER_LEN>() else {
            return Err(MoldError::Truncated(buf.len()));
        };
        let mut session = [0u8; SESSION_LEN];
        session.copy_from_slice(&h[..SESSION_LEN]);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&h[SESSION_LEN..SESSION_LEN + 8]);
        Ok(MoldHeader {
            session: Session(session),
            sequence: u64::from_be_bytes(seq),
            count: u16::from_be_bytes([h[18], h[19]]),
        })
    }

    /// The 20 header bytes.
    pub fn to_bytes(&self) -> [u8; MOLD_HEADER_LEN] {
        let mut out = [0u8; MOLD_HEADER_LEN];
        out[..SESSION_LEN].copy_from_slice(&self.session.0);
        out[SESSION_LEN..18].copy_from_slice(&self.sequence.to_be_bytes());
        out[18..].copy_from_slice(&self.count.to_be_bytes());
        out
    }

    /// What kind of packet this header starts.
    pub const fn kind(&self) -> PacketKind {
        match self.count {
            0 => PacketKind::Heartbeat,
            END_OF_SESSION => PacketKind::EndOfSession,
            _ => PacketKind::Messages,
        }
    }

    /// Number of messages carried (0 for heartbeat and end of session).
    pub const fn message_count(&self) -> u16 {
        match self.count {
            END_OF_SESSION => 0,
            n => n,
        }
    }

    /// Sequence number following the last message of this packet.
    pub const fn next_sequence(&self) -> u64 {
        self.sequence.wrapping_add(self.message_count() as u64)
    }
}

/// The kind of a downstream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Carries 1..=65534 messages.
    Messages,
    /// MessageCount 0: keep-alive announcing the next sequence number.
    Heartbeat,
    /// MessageCount 0xFFFF: the session is over.
    EndOfSession,
}

/// A borrowed, header-checked downstream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoldPacket<'a> {
    /// The decoded header.
    pub header: MoldHeader,
    payload: &'a [u8],
}

impl<'a> MoldPacket<'a> {
    /// Checks the header of `buf` and borrows the rest as the block payload. The blocks
    /// are checked as [`MoldPacket::messages`] walks them (or all at once by
    /// [`MoldPacket::validate`]).
    pub fn parse(buf: &'a [u8]) -> Result<Self, MoldError> {
        let header = MoldHeader::decode(buf)?;
        let payload = buf.get(MOLD_HEADER_LEN..).unwrap_or(&[]);
        Ok(MoldPacket { header, payload })
    }

    /// Session name.
    pub const fn session(&self) -> Session {
        self.header.session
    }

    /// Sequence number of the first message.
    pub const fn sequence(&self) -> u64 {
        self.header.sequence
    }

    /// Kind of packet.
    pub const fn kind(&self) -> PacketKind {
        self.header.kind()
    }

    /// Number of messages announced (0 for heartbeat and end of session).
    pub const fn message_count(&self) -> u16 {
        self.header.message_count()
    }

    /// Sequence number after the last message of this packet.
    pub const fn next_sequence(&self) -> u64 {
        self.header.next_sequence()
    }

    /// The bytes after the header.
    pub const fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Iterates over the message blocks, with their sequence numbers.
    pub fn messages(&self) -> MessageBlocks<'a> {
        MessageBlocks {
            rest: self.payload,
            offset: MOLD_HEADER_LEN,
            sequence: self.header.sequence,
            index: 0,
            count: self.header.message_count(),
            done: false,
        }
    }

    /// Walks every block and returns the first error, if any.
    pub fn validate(&self) -> Result<(), MoldError> {
        for block in self.messages() {
            block?;
        }
        Ok(())
    }
}

/// One message block of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageBlock<'a> {
    /// Sequence number of this message.
    pub sequence: u64,
    /// The message bytes (without the length prefix).
    pub data: &'a [u8],
}

/// Iterator over the message blocks of a [`MoldPacket`]; yields at most one error, last.
#[derive(Debug, Clone)]
pub struct MessageBlocks<'a> {
    rest: &'a [u8],
    offset: usize,
    sequence: u64,
    index: u16,
    count: u16,
    done: bool,
}

impl<'a> Iterator for MessageBlocks<'a> {
    type Item = Result<MessageBlock<'a>, MoldError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.index == self.count {
            self.done = true;
            return if self.rest.is_empty() {
                None
            } else {
                Some(Err(MoldError::TrailingBytes(self.rest.len())))
            };
        }
        let Some((len, after)) = self.rest.split_first_chunk::<BLOCK_HEADER_LEN>() else {
            self.done = true;
            return Some(Err(if self.rest.is_empty() {
                MoldError::CountMismatch {
                    declared: self.count,
                    found: self.index,
                }
            } else {
                MoldError::BlockOverrun {
                    index: self.index,
                    offset: self.offset,
                }
            }));
        };
        let len = usize::from(u16::from_be_bytes(*len));
        let Some((data, rest)) = after.split_at_checked(len) else {
            self.done = true;
            return Some(Err(MoldError::BlockOverrun {
                index: self.index,
                offset: self.offset,
            }));
        };
        let block = MessageBlock {
            sequence: self.sequence,
            data,
        };
        self.rest = rest;
        self.offset += BLOCK_HEADER_LEN + len;
        self.sequence = self.sequence.wrapping_add(1);
        self.index += 1;
        Some(Ok(block))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            (0, Some(usize::from(self.count - self.index) + 1))
        }
    }
}

/// Why a message was not added to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The packet has no room left for this message: [`PacketBuilder::finish`] it and push
    /// again.
    #[error("packet full")]
    Full,
    /// The message can never fit a packet of this builder's maximum size (or is longer
    /// than a block length can say).
    #[error("message of {len} bytes exceeds the packet limit of {max}")]
    TooLarge {
        /// Message length.
        len: usize,
        /// Largest message this builder can carry.
        max: usize,
    },
    /// The message did not encode.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Builds downstream packets in one reusable buffer.
///
/// ```
/// use tickwire_itch::{PacketBuilder, Session};
/// let mut b = PacketBuilder::new(Session::new("SESSION1").unwrap(), 1, 1400);
/// b.push(b"raw message").unwrap();
/// let packet: &[u8] = b.finish(); // send it; the next push starts packet 2
/// assert_eq!(packet.len(), 20 + 2 + 11);
/// assert_eq!(b.next_sequence(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct PacketBuilder {
    buf: Vec<u8>,
    session: Session,
    /// Sequence number of the first message of the packet being built.
    sequence: u64,
    count: u16,
    max_packet: usize,
    /// `finish` was called: the next push starts a new packet.
    finished: bool,
}

impl PacketBuilder {
    /// A builder for `session` whose first message gets `first_sequence`, making packets of
    /// at most `max_packet` bytes (raised to at least header + one 2-byte block prefix).
    pub fn new(session: Session, first_sequence: u64, max_packet: usize) -> Self {
        let max_packet = max_packet.max(MOLD_HEADER_LEN + BLOCK_HEADER_LEN);
        let mut b = PacketBuilder {
            buf: Vec::with_capacity(max_packet),
            session,
            sequence: first_sequence,
            count: 0,
            max_packet,
            finished: false,
        };
        b.start();
        b
    }

    fn start(&mut self) {
        self.buf.clear();
        let h = MoldHeader {
            session: self.session,
            sequence: self.sequence,
            count: 0,
        };
        self.buf.extend_from_slice(&h.to_bytes());
        self.finished = false;
    }

    fn reopen(&mut self) {
        if self.finished {
            self.sequence = self.sequence.wrapping_add(u64::from(self.count));
            self.count = 0;
            self.start();
        }
    }

    /// Largest message a packet of this builder can carry.
    pub fn max_message_len(&self) -> usize {
        (self.max_packet - MOLD_HEADER_LEN - BLOCK_HEADER_LEN).min(usize::from(u16::MAX))
    }

    /// Bytes still free for message blocks (prefix included) in the current packet.
    pub fn remaining(&self) -> usize {
        if self.finished {
            self.max_packet - MOLD_HEADER_LEN
        } else {
            self.max_packet - self.buf.len()
        }
    }

    /// Messages in the current (unfinished) packet.
    pub fn count(&self) -> u16 {
        if self.finished {
            0
        } else {
            self.count
        }
    }

    /// No message in the current packet.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// The session name.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Sequence number the next pushed message will get.
    pub fn next_sequence(&self) -> u64 {
        self.sequence.wrapping_add(u64::from(self.count))
    }

    /// Sets the sequence number of the next message; discards an unfinished packet.
    pub fn reset(&mut self, next_sequence: u64) {
        self.sequence = next_sequence;
        self.count = 0;
        self.start();
    }

    fn check(&self, len: usize) -> Result<(), BuildError> {
        if len > self.max_message_len() {
            return Err(BuildError::TooLarge {
                len,
                max: self.max_message_len(),
            });
        }
        // One short of 0xFFFF: that count means end of session.
        if BLOCK_HEADER_LEN + len > self.remaining() || self.count() == END_OF_SESSION - 1 {
            return Err(BuildError::Full);
        }
        Ok(())
    }

    /// Appends one message block; [`BuildError::Full`] if it does not fit the current
    /// packet (which is then unchanged).
    pub fn push(&mut self, msg: &[u8]) -> Result<u64, BuildError> {
        self.check(msg.len())?;
        self.reopen();
        self.buf
            .extend_from_slice(&(msg.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(msg);
        Ok(self.bump())
    }

    /// Encodes `msg` directly into the packet; returns its sequence number.
    pub fn push_message(&mut self, msg: &Message) -> Result<u64, BuildError> {
        self.check(msg.encoded_len())?;
        self.reopen();
        let at = self.buf.len();
        self.buf
            .extend_from_slice(&(msg.encoded_len() as u16).to_be_bytes());
        if let Err(e) = msg.encode_to_vec(&mut self.buf) {
            self.buf.truncate(at);
            return Err(e.into());
        }
        Ok(self.bump())
    }

    /// Packs every message of `msgs` into as many packets as it takes, finishing each
    /// when the next message does not fit; returns the packets (none for no messages).
    /// A message that fits no packet of this size, or does not encode, is the error.
    pub fn pack<M: std::borrow::Borrow<Message>>(
        &mut self,
        msgs: impl IntoIterator<Item = M>,
    ) -> Result<Vec<Vec<u8>>, BuildError> {
        let mut packets = Vec::new();
        for m in msgs {
            match self.push_message(m.borrow()) {
                Ok(_) => {}
                Err(BuildError::Full) => {
                    packets.push(self.finish().to_vec());
                    self.push_message(m.borrow())?;
                }
                Err(e) => return Err(e),
            }
        }
        if !self.is_empty() {
            packets.push(self.finish().to_vec());
        }
        Ok(packets)
    }

    fn bump(&mut self) -> u64 {
        let seq = self.sequence.wrapping_add(u64::from(self.count));
        self.count += 1;
        seq
    }

    /// The finished packet bytes (header count patched). The next push starts a new
    /// packet whose first sequence number follows this one's last. Calling it again
    /// without a push returns the same packet.
    pub fn finish(&mut self) -> &[u8] {
        let count = self.count.to_be_bytes();
        self.buf[18..MOLD_HEADER_LEN].copy_from_slice(&count);
        self.finished = true;
        &self.buf
    }

    /// A heartbeat packet announcing [`PacketBuilder::next_sequence`] (send pending
    /// messages with [`PacketBuilder::finish`] first).
    pub fn heartbeat(&self) -> [u8; MOLD_HEADER_LEN] {
        MoldHeader {
            session: self.session,
            sequence: self.next_sequence(),
            count: 0,
        }
        .to_bytes()
    }

    /// An End of Session packet announcing the next sequence number.
    pub fn end_of_session(&self) -> [u8; MOLD_HEADER_LEN] {
        MoldHeader {
            session: self.session,
            sequence: self.next_sequence(),
            count: END_OF_SESSION,
        }
        .to_bytes()
    }
}

/// Writes a complete downstream packet of `messages` into `out` (cleared first) and
/// returns the number of messages written. Stops at the first message that does not fit
/// `max_packet`.
pub fn encode_packet<'m>(
    out: &mut Vec<u8>,
    session: Session,
    sequence: u64,
    max_packet: usize,
    messages: impl IntoIterator<Item = &'m [u8]>,
) -> u16 {
    out.clear();
    out.extend_from_slice(
        &MoldHeader {
            session,
            sequence,
            count: 0,
        }
        .to_bytes(),
    );
    let mut count: u16 = 0;
    for m in messages {
        if m.len() > usize::from(u16::MAX)
            || out.len() + BLOCK_HEADER_LEN + m.len() > max_packet
            || count == END_OF_SESSION - 1
        {
            break;
        }
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
        count += 1;
    }
    out[18..MOLD_HEADER_LEN].copy_from_slice(&count.to_be_bytes());
    count
}

/// A re-request (retransmission request) packet, sent by a receiver to the rerequest
/// server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetransmitRequest {
    /// Session name.
    pub session: Session,
    /// First sequence number requested.
    pub sequence: u64,
    /// Number of messages requested.
    pub count: u16,
}

impl RetransmitRequest {
    /// Decodes a request; it must be exactly 20 bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, MoldError> {
        if buf.len() != REQUEST_LEN {
            return Err(MoldError::RequestLength(buf.len()));
        }
        let h = MoldHeader::decode(buf)?;
        Ok(RetransmitRequest {
            session: h.session,
            sequence: h.sequence,
            count: h.count,
        })
    }

    /// The 20 wire bytes.
    pub fn to_bytes(&self) -> [u8; REQUEST_LEN] {
        MoldHeader {
            session: self.session,
            sequence: self.sequence,
            count: self.count,
        }
        .to_bytes()
    }

    /// Writes the request at the start of `out`; returns 20.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let Some(dst) = out.get_mut(..REQUEST_LEN) else {
            return Err(EncodeError::BufferTooSmall {
                needed: REQUEST_LEN,
                available: out.len(),
            });
        };
        dst.copy_from_slice(&self.to_bytes());
        Ok(REQUEST_LEN)
    }
}
