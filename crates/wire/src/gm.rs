//! Guaranteed messaging on the wire: the types and encoders of kinds 0x40–0x4B
//! (`docs/protocol.md` section 10, `docs/guaranteed.md` for the semantics). Decoding
//! lives with every other kind in [`crate::frame::decode`].

use crate::frame::{
    begin, finish, flags, truncate_utf8, EncodeError, Kind, Stamps, HEADER_LEN, MAX_NAME_LEN,
    MAX_TEXT_LEN, STAMPS_LEN,
};
use std::fmt;

/// PUB_OPEN option bits.
pub mod open_options {
    /// NACK a guaranteed publish that matches no queue (reason `NO_MATCHING_QUEUE`)
    /// instead of acknowledging it as delivered to nobody.
    pub const NACK_NO_MATCH: u32 = 0x1;
    /// Every option this version knows.
    pub const ALL: u32 = NACK_NO_MATCH;
}

/// Why the router refused a guaranteed publish (PUB_NACK).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NackReason(pub u16);

impl NackReason {
    /// A matching queue is at its message or byte limit (policy `reject`).
    pub const QUEUE_FULL: NackReason = NackReason(1);
    /// The message exceeds a matching queue's maximum message size.
    pub const TOO_LARGE: NackReason = NackReason(2);
    /// No queue matches the topic and the publisher asked to be told.
    pub const NO_MATCHING_QUEUE: NackReason = NackReason(3);
    /// The publisher may not publish to this topic.
    pub const NOT_PERMITTED: NackReason = NackReason(4);
    /// The spool could not store the message (disk full, IO error).
    pub const SPOOL_FAILED: NackReason = NackReason(5);
    /// More unacknowledged publishes than the window PUB_OPENED granted.
    pub const WINDOW_EXCEEDED: NackReason = NackReason(6);
    /// The router's spool hand-off is full; publish again later.
    pub const BUSY: NackReason = NackReason(7);

    /// Short, stable name for logs and tools.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "queue-full",
            2 => "too-large",
            3 => "no-matching-queue",
            4 => "not-permitted",
            5 => "spool-failed",
            6 => "window-exceeded",
            7 => "busy",
            _ => "unknown",
        }
    }
}

impl fmt::Debug for NackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for NackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QUEUE_REQUEST operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum QueueOp {
    /// Create a queue from a JSON definition (idempotent for an identical definition).
    Create = 1,
    /// Delete a queue and every message in it.
    Delete = 2,
    /// Remove every message from a queue, keep the queue.
    Purge = 3,
    /// One queue's configuration and counters.
    Show = 4,
    /// Every queue's counters.
    List = 5,
}

impl QueueOp {
    /// From the wire value.
    pub fn from_u16(v: u16) -> Option<QueueOp> {
        Some(match v {
            1 => QueueOp::Create,
            2 => QueueOp::Delete,
            3 => QueueOp::Purge,
            4 => QueueOp::Show,
            5 => QueueOp::List,
            _ => return None,
        })
    }
}

/// Where a binding starts delivering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Start {
    /// The queue's unacknowledged messages, in order (a normal consumer).
    Queue,
    /// Replay: every retained message matching the queue's subscriptions, from the oldest.
    Beginning,
    /// Replay from this message id (inclusive).
    MessageId(u64),
    /// Replay from the first message the router received at or after this UTC time (ns).
    Time(u64),
}

impl Start {
    /// From the wire's (kind, value) pair.
    pub fn from_parts(how: u16, value: u64) -> Option<Start> {
        Some(match (how, value) {
            (0, 0) => Start::Queue,
            (1, 0) => Start::Beginning,
            (2, v) => Start::MessageId(v),
            (3, v) => Start::Time(v),
            _ => return None,
        })
    }

    /// To the wire's (kind, value) pair.
    pub fn to_parts(self) -> (u16, u64) {
        match self {
            Start::Queue => (0, 0),
            Start::Beginning => (1, 0),
            Start::MessageId(v) => (2, v),
            Start::Time(v) => (3, v),
        }
    }
}

/// CONSUMER_NACK actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NackAction {
    /// Deliver the message again (counts as a delivery attempt).
    Redeliver,
    /// Move it to the queue's dead-message queue now.
    DeadLetter,
}

impl NackAction {
    /// From the wire value.
    pub fn from_u32(v: u32) -> Option<NackAction> {
        match v {
            0 => Some(NackAction::Redeliver),
            1 => Some(NackAction::DeadLetter),
            _ => None,
        }
    }
    fn to_u32(self) -> u32 {
        match self {
            NackAction::Redeliver => 0,
            NackAction::DeadLetter => 1,
        }
    }
}

/// A DELIVER body: a flyweight over the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// The binding it is delivered on.
    pub binding: u32,
    /// The router's message id (unique per router data directory, increasing).
    pub msg_id: u64,
    /// How many times it has been delivered, this one included (1 = first time).
    pub delivery_count: u32,
    /// Delivered before (or possibly delivered before a router restart).
    pub redelivered: bool,
    /// The publisher's sequence number.
    pub seq: Option<u64>,
    /// In-line timestamps, when the publisher asked for them.
    pub stamps: Option<Stamps>,
    /// Topic bytes.
    pub topic: &'a [u8],
    /// Application payload.
    pub payload: &'a [u8],
}

/// Fixed bytes of a DELIVER before its optional fields: binding, count, id.
pub const DELIVER_FIXED_LEN: usize = 16;

/// Appends a PUB_OPEN. `name` must be 1..=64 bytes (longer is truncated).
pub fn encode_pub_open(out: &mut Vec<u8>, request_id: u32, options: u32, name: &str) {
    let s = begin(out, Kind::PubOpen, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&options.to_le_bytes());
    out.extend_from_slice(truncate_utf8(name, MAX_NAME_LEN).as_bytes());
    finish(out, s);
}

/// Appends a PUB_OPENED.
pub fn encode_pub_opened(out: &mut Vec<u8>, request_id: u32, window: u32, last_seq: u64) {
    let s = begin(out, Kind::PubOpened, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&window.to_le_bytes());
    out.extend_from_slice(&last_seq.to_le_bytes());
    finish(out, s);
}

/// Appends a PUB_ACK for `first..=last`.
pub fn encode_pub_ack(out: &mut Vec<u8>, first: u64, last: u64) {
    let s = begin(out, Kind::PubAck, 0, 0);
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&last.to_le_bytes());
    finish(out, s);
}

/// Appends a PUB_NACK.
pub fn encode_pub_nack(out: &mut Vec<u8>, seq: u64, reason: NackReason, text: &str) {
    let s = begin(out, Kind::PubNack, 0, 0);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&reason.0.to_le_bytes());
    out.extend_from_slice(truncate_utf8(text, MAX_TEXT_LEN).as_bytes());
    finish(out, s);
}

/// Appends a QUEUE_REQUEST.
pub fn encode_queue_request(out: &mut Vec<u8>, request_id: u32, op: QueueOp, arg: &str) {
    let s = begin(out, Kind::QueueRequest, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&(op as u16).to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(arg.as_bytes());
    finish(out, s);
}

/// Appends a QUEUE_REPLY.
pub fn encode_queue_reply(out: &mut Vec<u8>, request_id: u32, json: &str) {
    let s = begin(out, Kind::QueueReply, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    finish(out, s);
}

/// Appends a BIND. `queue` must be 1..=64 bytes (longer is truncated).
pub fn encode_bind(out: &mut Vec<u8>, request_id: u32, window: u32, start: Start, queue: &str) {
    let s = begin(out, Kind::Bind, 0, 0);
    let (how, value) = start.to_parts();
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&window.to_le_bytes());
    out.extend_from_slice(&how.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    out.extend_from_slice(&value.to_le_bytes());
    out.extend_from_slice(truncate_utf8(queue, MAX_NAME_LEN).as_bytes());
    finish(out, s);
}

/// Appends a BOUND.
pub fn encode_bound(out: &mut Vec<u8>, request_id: u32, binding: u32, active: bool) {
    let s = begin(out, Kind::Bound, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&binding.to_le_bytes());
    out.extend_from_slice(&u32::from(active).to_le_bytes());
    finish(out, s);
}

/// Appends a CONSUMER_ACK for message ids `first..=last` of `binding`.
pub fn encode_consumer_ack(out: &mut Vec<u8>, binding: u32, first: u64, last: u64) {
    let s = begin(out, Kind::ConsumerAck, 0, 0);
    out.extend_from_slice(&binding.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&last.to_le_bytes());
    finish(out, s);
}

/// Appends a CONSUMER_NACK.
pub fn encode_consumer_nack(out: &mut Vec<u8>, binding: u32, action: NackAction, msg_id: u64) {
    let s = begin(out, Kind::ConsumerNack, 0, 0);
    out.extend_from_slice(&binding.to_le_bytes());
    out.extend_from_slice(&action.to_u32().to_le_bytes());
    out.extend_from_slice(&msg_id.to_le_bytes());
    finish(out, s);
}

/// Appends an UNBIND.
pub fn encode_unbind(out: &mut Vec<u8>, request_id: u32, binding: u32) {
    let s = begin(out, Kind::Unbind, 0, 0);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&binding.to_le_bytes());
    finish(out, s);
}

/// The parts of a stored guaranteed message a DELIVER carries besides its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored<'a> {
    /// The publisher's sequence number.
    pub seq: u64,
    /// The publisher's send stamp (0: none) and the router's receive stamp.
    pub stamps: Option<Stamps>,
    /// Topic.
    pub topic: &'a [u8],
    /// Payload.
    pub payload: &'a [u8],
}

/// Appends a DELIVER. `router_out` is written into the STAMPS block when present.
/// Returns the bytes appended, or an error when the frame would exceed `max_frame`.
pub fn encode_deliver(
    out: &mut Vec<u8>,
    binding: u32,
    msg_id: u64,
    delivery_count: u32,
    redelivered: bool,
    m: Stored<'_>,
    max_frame: u32,
) -> Result<usize, EncodeError> {
    let topic_len =
        u16::try_from(m.topic.len()).map_err(|_| EncodeError::TopicTooLong(m.topic.len()))?;
    let mut fl = flags::SEQ;
    let mut len = HEADER_LEN + DELIVER_FIXED_LEN + 8 + m.topic.len() + m.payload.len();
    if m.stamps.is_some() {
        fl |= flags::STAMPS;
        len += STAMPS_LEN;
    }
    if redelivered {
        fl |= flags::REDELIVERED;
    }
    if len > max_frame as usize {
        return Err(EncodeError::TooLarge {
            len,
            max: max_frame,
        });
    }
    out.reserve(len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[Kind::Deliver as u8, fl]);
    out.extend_from_slice(&topic_len.to_le_bytes());
    out.extend_from_slice(&binding.to_le_bytes());
    out.extend_from_slice(&delivery_count.to_le_bytes());
    out.extend_from_slice(&msg_id.to_le_bytes());
    out.extend_from_slice(&m.seq.to_le_bytes());
    if let Some(st) = m.stamps {
        out.extend_from_slice(&st.publisher_send.to_le_bytes());
        out.extend_from_slice(&st.router_in.to_le_bytes());
        out.extend_from_slice(&st.router_out.to_le_bytes());
    }
    out.extend_from_slice(m.topic);
    out.extend_from_slice(m.payload);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode, encode_publish, Frame, PublishOptions};
    use proptest::prelude::*;

    const MAX: u32 = 1 << 16;

    fn one(buf: &[u8]) -> Frame<'_> {
        let (f, n) = decode(buf, MAX).unwrap().unwrap();
        assert_eq!(n, buf.len());
        f
    }

    #[test]
    fn control_frames_round_trip() {
        let mut b = Vec::new();
        encode_pub_open(&mut b, 7, open_options::NACK_NO_MATCH, "orders-1");
        assert_eq!(
            one(&b),
            Frame::PubOpen {
                request_id: 7,
                options: 1,
                name: "orders-1"
            }
        );
        b.clear();
        encode_pub_opened(&mut b, 7, 1024, 99);
        assert_eq!(
            one(&b),
            Frame::PubOpened {
                request_id: 7,
                window: 1024,
                last_seq: 99
            }
        );
        b.clear();
        encode_pub_ack(&mut b, 3, 9);
        assert_eq!(one(&b), Frame::PubAck { first: 3, last: 9 });
        b.clear();
        encode_pub_nack(&mut b, 4, NackReason::QUEUE_FULL, "queue q full");
        assert_eq!(
            one(&b),
            Frame::PubNack {
                seq: 4,
                reason: NackReason::QUEUE_FULL,
                text: "queue q full"
            }
        );
        b.clear();
        encode_queue_request(&mut b, 2, QueueOp::Purge, "q");
        assert_eq!(
            one(&b),
            Frame::QueueRequest {
                request_id: 2,
                op: QueueOp::Purge,
                arg: "q"
            }
        );
        b.clear();
        encode_queue_reply(&mut b, 2, "{}");
        assert_eq!(
            one(&b),
            Frame::QueueReply {
                request_id: 2,
                json: "{}"
            }
        );
        for start in [
            Start::Queue,
            Start::Beginning,
            Start::MessageId(5),
            Start::Time(1 << 60),
        ] {
            b.clear();
            encode_bind(&mut b, 3, 64, start, "orders");
            assert_eq!(
                one(&b),
                Frame::Bind {
                    request_id: 3,
                    window: 64,
                    start,
                    queue: "orders"
                }
            );
        }
        b.clear();
        encode_bound(&mut b, 3, 11, false);
        assert_eq!(
            one(&b),
            Frame::Bound {
                request_id: 3,
                binding: 11,
                active: false
            }
        );
        b.clear();
        encode_consumer_ack(&mut b, 11, 5, 5);
        assert_eq!(
            one(&b),
            Frame::ConsumerAck {
                binding: 11,
                first: 5,
                last: 5
            }
        );
        b.clear();
        encode_consumer_nack(&mut b, 11, NackAction::DeadLetter, 5);
        assert_eq!(
            one(&b),
            Frame::ConsumerNack {
                binding: 11,
                action: NackAction::DeadLetter,
                msg_id: 5
            }
        );
        b.clear();
        encode_unbind(&mut b, 4, 11);
        assert_eq!(
            one(&b),
            Frame::Unbind {
                request_id: 4,
                binding: 11
            }
        );
    }

    #[test]
    fn bad_guaranteed_frames_are_malformed() {
        let mut b = Vec::new();
        // PUB_OPEN with an empty name.
        encode_pub_open(&mut b, 1, 0, "");
        assert!(decode(&b, MAX).is_err());
        // PUB_OPEN with an unknown option.
        b.clear();
        encode_pub_open(&mut b, 1, 0x80, "p");
        assert!(decode(&b, MAX).is_err());
        // PUB_ACK with first > last.
        b.clear();
        encode_pub_ack(&mut b, 9, 3);
        assert!(decode(&b, MAX).is_err());
        // BIND with window 0 and with an unknown start.
        b.clear();
        encode_bind(&mut b, 1, 0, Start::Queue, "q");
        assert!(decode(&b, MAX).is_err());
        b.clear();
        encode_bind(&mut b, 1, 1, Start::Queue, "q");
        b[16] = 9;
        assert!(decode(&b, MAX).is_err());
        // QUEUE_REQUEST with an unknown op.
        b.clear();
        encode_queue_request(&mut b, 1, QueueOp::List, "");
        b[12] = 0x77;
        assert!(decode(&b, MAX).is_err());
        // CONSUMER_NACK with an unknown action.
        b.clear();
        encode_consumer_nack(&mut b, 1, NackAction::Redeliver, 1);
        b[12] = 5;
        assert!(decode(&b, MAX).is_err());
        // REDELIVERED on a PUBLISH.
        b.clear();
        encode_publish(&mut b, "a", b"x", PublishOptions::default(), MAX).unwrap();
        b[5] = flags::REDELIVERED;
        assert!(decode(&b, MAX).is_err());
    }

    proptest! {
        #[test]
        fn deliver_round_trips(
            binding in any::<u32>(),
            id in any::<u64>(),
            count in 1u32..100,
            redelivered in any::<bool>(),
            seq in any::<u64>(),
            stamps in proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>())),
            topic in "[a-z]{1,20}(\\.[a-z]{1,8}){0,3}",
            payload in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let stamps = stamps.map(|(a, b, c)| Stamps { publisher_send: a, router_in: b, router_out: c });
            let mut b = Vec::new();
            let m = Stored { seq, stamps, topic: topic.as_bytes(), payload: &payload };
            let n = encode_deliver(&mut b, binding, id, count, redelivered, m, MAX).unwrap();
            prop_assert_eq!(n, b.len());
            let Frame::Deliver(d) = one(&b) else { panic!("not a DELIVER") };
            prop_assert_eq!(d, Delivery { binding, msg_id: id, delivery_count: count, redelivered,
                seq: Some(seq), stamps, topic: topic.as_bytes(), payload: &payload });
        }
    }

    #[test]
    fn guaranteed_publish_becomes_a_plain_message_for_direct_subscribers() {
        let mut b = Vec::new();
        encode_publish(
            &mut b,
            "o.x",
            b"buy",
            PublishOptions {
                seq: Some(4),
                publisher_send: None,
            },
            MAX,
        )
        .unwrap();
        b[5] |= flags::GUARANTEED;
        let Frame::Publish(p) = one(&b) else { panic!() };
        assert_eq!(p.flags, flags::SEQ | flags::GUARANTEED);
        let mut m = Vec::new();
        crate::frame::encode_message_from_publish(&mut m, &b, 0, 0, 0);
        let Frame::Message(msg) = one(&m) else {
            panic!()
        };
        assert_eq!(msg.flags, flags::SEQ);
        m.clear();
        crate::frame::encode_message_from_publish(&mut m, &b, 2, 0, 0);
        let Frame::Message(msg) = one(&m) else {
            panic!()
        };
        assert_eq!(msg.flags, flags::SEQ | flags::DISCARDS);
        assert_eq!(msg.payload, b"buy");
    }
}
