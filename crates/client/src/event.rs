//! What [`Client::poll_events`](crate::Client::poll_events) delivers: messages,
//! guaranteed-publish answers and queue deliveries, each borrowing the receive buffer.

use tickwire_wire::frame::{decode, Frame};
use tickwire_wire::gm::NackReason;

use crate::{Error, Message};

/// A queue delivery (DELIVER): binding, message id, delivery count, redelivered flag,
/// publisher seq, stamps, topic bytes and payload. Acknowledge it with
/// [`Client::ack`](crate::Client::ack) (or a range), or refuse it with
/// [`Client::nack`](crate::Client::nack).
pub use tickwire_wire::gm::Delivery;

/// One thing that arrived from the router.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A MESSAGE for one of this client's subscriptions.
    Message(Message<'a>),
    /// Guaranteed publishes `first..=last` of this client's publisher are durable
    /// (the router's PUB_ACK as sent; the publisher's counts take each seq once).
    Acked {
        /// First sequence number.
        first: u64,
        /// Last sequence number (inclusive).
        last: u64,
    },
    /// The router refused guaranteed publish `seq` (PUB_NACK).
    Nacked {
        /// The refused publish.
        seq: u64,
        /// Why.
        reason: NackReason,
        /// The router's explanation as it sent it: UTF-8 (checked) of at most
        /// 512 bytes (`MAX_TEXT_LEN` of the wire crate), control characters not escaped
        /// (escape it before writing it to a terminal or a log line; the publisher's
        /// [`Outcome::Nacked`](crate::Outcome) text and [`Error`] texts are escaped).
        text: &'a str,
    },
    /// A message from a queue this client is bound to.
    Delivery(Delivery<'a>),
    /// A standby binding (exclusive queue) became the active consumer.
    Activated {
        /// The binding.
        binding: BindingId,
    },
}

impl<'a> Event<'a> {
    /// The event a kept frame stands for. Only event frames are kept, so any other frame is an internal error.
    pub(crate) fn from_frame(bytes: &'a [u8]) -> Result<Event<'a>, Error> {
        match decode(bytes, u32::MAX) {
            Ok(Some((frame, _))) => Event::from_decoded(frame),
            _ => Err(Error::Protocol(
                "internal: kept frame no longer decodes".into(),
            )),
        }
    }

    /// The event of a decoded frame that the driver classified as one.
    pub(crate) fn from_decoded(frame: Frame<'a>) -> Result<Event<'a>, Error> {
        match frame {
            Frame::Message(m) => Message::from_wire(m).map(Event::Message),
            other => Event::other(other),
        }
    }

    fn other(frame: Frame<'a>) -> Result<Event<'a>, Error> {
        match frame {
            Frame::PubAck { first, last } => Ok(Event::Acked { first, last }),
            Frame::PubNack { seq, reason, text } => Ok(Event::Nacked { seq, reason, text }),
            Frame::Deliver(d) => Ok(Event::Delivery(d)),
            Frame::Bound {
                request_id: 0,
                binding,
                active: true,
            } => Ok(Event::Activated {
                binding: BindingId(binding),
            }),
            _ => Err(Error::Protocol("internal: frame is not an event".into())),
        }
    }
}

/// A binding's id, as the router numbers it (named by deliveries, acks and unbind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BindingId(pub u32);

/// A consumer's binding to a queue, from [`Client::bind`](crate::Client::bind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Its id.
    pub id: BindingId,
    /// Deliveries flow now; `false`: a standby of an exclusive queue, activated later
    /// ([`Event::Activated`]).
    pub active: bool,
}

/// A publisher identity is open on the connection (PUB_OPENED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// Most guaranteed publishes the router lets be unanswered at once.
    pub window: u32,
    /// Highest sequence number the router holds for this identity (0: none).
    pub last_seq: u64,
    /// Unanswered publishes from an earlier connection sent again after opening.
    pub resent: usize,
}
