//! Delivered messages: a borrowed view for the hot path and an owned copy.

use tickwire_wire::frame::{decode, Frame, Msg, Stamps};
use tickwire_wire::topic::MAX_TOPIC_BYTES;

use crate::Error;

/// One delivered message, borrowing the client's receive buffer (no allocation).
///
/// Valid until the next call on the [`Client`](crate::Client); use
/// [`Message::into_owned`] to keep it longer.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    topic: &'a str,
    payload: &'a [u8],
    discarded: u64,
    stamps: Option<Stamps>,
    seq: Option<u64>,
    /// The REPLY field: correlation id and reply topic (empty for a reply).
    reply: Option<(u32, &'a str)>,
    cached: Option<u64>,
}

#[cold]
fn not_utf8() -> Error {
    Error::Protocol("router delivered a topic that is not UTF-8".into())
}

/// The last delivered topic that was valid UTF-8, so that a stream of messages on one
/// topic is checked once: a hit costs one comparison of the bytes. Remembers topics of
/// at most [`MAX_TOPIC_BYTES`] (the longest the router accepts), so it never grows
/// beyond that.
#[derive(Debug, Default)]
pub(crate) struct TopicText {
    last: String,
}

impl TopicText {
    /// Whether `bytes` are UTF-8 (remembered, as [`TopicText::check`] does).
    #[inline]
    pub(crate) fn is_text(&mut self, bytes: &[u8]) -> bool {
        self.check(bytes).is_some()
    }

    /// `bytes` as text, after [`TopicText::is_text`] said they are (the remembered
    /// topic, or checked again when too long to remember; empty if they were not).
    #[inline]
    pub(crate) fn text<'a>(&'a self, bytes: &'a [u8]) -> &'a str {
        if !self.last.is_empty() && tickwire_wire::topic::same_bytes(self.last.as_bytes(), bytes) {
            return &self.last;
        }
        std::str::from_utf8(bytes).unwrap_or_default()
    }

    /// `bytes` as text, or `None` when they are not UTF-8.
    #[inline]
    pub(crate) fn check<'a>(&'a mut self, bytes: &'a [u8]) -> Option<&'a str> {
        if !self.last.is_empty() && tickwire_wire::topic::same_bytes(self.last.as_bytes(), bytes) {
            return Some(&self.last);
        }
        let text = std::str::from_utf8(bytes).ok()?;
        if text.len() <= MAX_TOPIC_BYTES {
            self.last.clear();
            self.last.push_str(text);
        }
        Some(text)
    }
}

/// Where to send the answer to a request (see [`Client::reply`](crate::Client::reply)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyTo {
    /// The requester's reply topic.
    pub topic: String,
    /// The request's correlation id, carried back in the reply.
    pub correlation: u32,
}

impl<'a> Message<'a> {
    /// Builds the view from a decoded MESSAGE body, checking that the topic is UTF-8.
    #[inline]
    pub(crate) fn from_wire(m: Msg<'a>) -> Result<Message<'a>, Error> {
        let topic = std::str::from_utf8(m.topic).map_err(|_| not_utf8())?;
        Message::with_topic(&m, topic)
    }

    /// [`Message::from_wire`] with the topic checked through `memo` (a run of messages
    /// on one topic is checked once).
    #[inline]
    pub(crate) fn from_wire_in(m: &Msg<'a>, memo: &'a mut TopicText) -> Result<Message<'a>, Error> {
        let topic = memo.check(m.topic).ok_or_else(not_utf8)?;
        Message::with_topic(m, topic)
    }

    /// A message without flags ([`tickwire_wire::frame::plain_message`]): a topic and
    /// a payload.
    #[inline]
    pub(crate) fn plain(topic: &'a str, payload: &'a [u8]) -> Message<'a> {
        Message {
            topic,
            payload,
            discarded: 0,
            stamps: None,
            seq: None,
            reply: None,
            cached: None,
        }
    }

    #[inline]
    fn with_topic(m: &Msg<'a>, topic: &'a str) -> Result<Message<'a>, Error> {
        let reply = match m.reply {
            None => None,
            Some(r) => Some((
                r.correlation,
                std::str::from_utf8(r.to).map_err(|_| {
                    Error::Protocol("router delivered a reply topic that is not UTF-8".into())
                })?,
            )),
        };
        Ok(Message {
            topic,
            payload: m.payload,
            discarded: m.discarded,
            stamps: m.stamps,
            seq: m.seq,
            reply,
            cached: m.cached,
        })
    }

    /// Decodes a MESSAGE from the exact bytes of a frame that was decoded (and its topic
    /// checked) once already; the topic's text through `memo` (a repeated topic costs
    /// one comparison, not a second UTF-8 check).
    pub(crate) fn from_frame(
        bytes: &'a [u8],
        memo: &'a mut TopicText,
    ) -> Result<Message<'a>, Error> {
        match decode(bytes, u32::MAX) {
            Ok(Some((Frame::Message(m), _))) => Message::from_wire_in(&m, memo),
            // Only bytes that decoded as a MESSAGE are kept, so this is unreachable.
            _ => Err(Error::Protocol(
                "internal: kept frame is no longer a MESSAGE".into(),
            )),
        }
    }

    /// The topic it was published to.
    #[inline]
    pub fn topic(&self) -> &'a str {
        self.topic
    }

    /// The application payload.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Messages the router dropped for this (slow) client just before this one.
    #[inline]
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// In-line timestamps, when the publisher asked for them.
    #[inline]
    pub fn stamps(&self) -> Option<Stamps> {
        self.stamps
    }

    /// The publisher's sequence number, when it sent one.
    #[inline]
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// For a request: its reply topic and correlation id (answer with
    /// [`Client::reply`](crate::Client::reply)).
    #[inline]
    pub fn reply_to(&self) -> Option<(&'a str, u32)> {
        self.reply
            .filter(|(_, to)| !to.is_empty())
            .map(|(c, to)| (to, c))
    }

    /// For a request: where to send the answer, owned (to keep past this message, e.g.
    /// to answer after the `poll` that delivered it).
    pub fn reply_target(&self) -> Option<ReplyTo> {
        self.reply_to().map(|(topic, correlation)| ReplyTo {
            topic: topic.to_owned(),
            correlation,
        })
    }

    /// For a reply: the correlation id of the request it answers.
    #[inline]
    pub fn correlation(&self) -> Option<u32> {
        self.reply.filter(|(_, to)| to.is_empty()).map(|(c, _)| c)
    }

    /// From the router's last-value cache (an initial image or a cache query), not
    /// live: when the router received the original publish, in nanoseconds since the
    /// Unix epoch.
    #[inline]
    pub fn cached(&self) -> Option<u64> {
        self.cached
    }

    /// Copies the message out of the receive buffer.
    pub fn into_owned(self) -> OwnedMessage {
        OwnedMessage::from(self)
    }
}

/// A delivered message that owns its bytes (see [`Message`] for the fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedMessage {
    /// The topic it was published to.
    pub topic: String,
    /// The application payload.
    pub payload: Vec<u8>,
    /// Messages the router dropped for this client just before this one.
    pub discarded: u64,
    /// In-line timestamps, when the publisher asked for them.
    pub stamps: Option<Stamps>,
    /// The publisher's sequence number, when it sent one.
    pub seq: Option<u64>,
    /// For a request: where the answer goes.
    pub reply_to: Option<ReplyTo>,
    /// For a reply: the correlation id of the request it answers.
    pub correlation: Option<u32>,
    /// From the cache: when the router received the original publish (Unix ns).
    pub cached: Option<u64>,
}

impl From<Message<'_>> for OwnedMessage {
    fn from(m: Message<'_>) -> OwnedMessage {
        OwnedMessage {
            topic: m.topic.to_owned(),
            payload: m.payload.to_vec(),
            discarded: m.discarded,
            stamps: m.stamps,
            seq: m.seq,
            reply_to: m.reply_target(),
            correlation: m.correlation(),
            cached: m.cached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::frame::{encode_message_from_publish, encode_publish, PublishOptions};

    #[test]
    fn topic_text_answers_as_from_utf8_whatever_came_before() {
        let long = "x".repeat(MAX_TOPIC_BYTES + 1);
        let inputs: [&[u8]; 8] = [
            b"md/x",
            b"md/x",
            b"\xff/x",
            b"md/x",
            "md/é".as_bytes(),
            b"md/\xc3",
            long.as_bytes(),
            long.as_bytes(),
        ];
        let mut memo = TopicText::default();
        for bytes in inputs {
            assert_eq!(
                memo.check(bytes),
                std::str::from_utf8(bytes).ok(),
                "{bytes:?}"
            );
        }
        // Longer than any topic the router accepts: answered, never remembered.
        assert_eq!(memo.last, "md/é");
    }

    #[test]
    fn view_and_owned_copy_agree() {
        let mut p = Vec::new();
        let opts = PublishOptions {
            seq: Some(9),
            publisher_send: Some(5),
        };
        encode_publish(&mut p, "md/x", b"hello", opts, 4096).unwrap();
        let mut m = Vec::new();
        encode_message_from_publish(&mut m, &p, 2, 6, 7);
        let mut memo = TopicText::default();
        let view = Message::from_frame(&m, &mut memo).unwrap();
        assert_eq!(view.topic(), "md/x");
        assert_eq!(view.payload(), b"hello");
        assert_eq!((view.discarded(), view.seq()), (2, Some(9)));
        let owned = view.into_owned();
        assert_eq!(
            owned,
            OwnedMessage {
                topic: "md/x".into(),
                payload: b"hello".to_vec(),
                discarded: 2,
                stamps: Some(Stamps {
                    publisher_send: 5,
                    router_in: 6,
                    router_out: 7
                }),
                reply_to: None,
                correlation: None,
                cached: None,
                seq: Some(9),
            }
        );
    }

    #[test]
    fn non_utf8_topic_is_a_protocol_error() {
        // MESSAGE, topic length 1, topic byte 0xff.
        let m = [9, 0, 0, 0, 0x21, 0, 1, 0, 0xff];
        let mut memo = TopicText::default();
        assert!(matches!(
            Message::from_frame(&m, &mut memo),
            Err(Error::Protocol(_))
        ));
        // A frame that is not a MESSAGE.
        let mut p = Vec::new();
        tickwire_wire::frame::encode_ping(&mut p, 1);
        assert!(matches!(
            Message::from_frame(&p, &mut memo),
            Err(Error::Protocol(_))
        ));
    }
}
