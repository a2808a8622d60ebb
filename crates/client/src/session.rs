//! Control-frame rules of an established connection (pure: no IO, no clock).
//!
//! The driver ([`Client`](crate::Client)) hands every decoded frame that is not a
//! MESSAGE to [`Session::on_control`], which answers PINGs into the transmit buffer,
//! matches replies against the one outstanding request and records a close.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::VecDeque;

use tickwire_wire::frame::{encode_pong, ErrorCode, Frame};

use crate::Error;

/// The request the client is waiting on (at most one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pending {
    /// SUBSCRIBE / UNSUBSCRIBE / STATS_REQUEST with this request id.
    Request(u32),
    /// PING with this token.
    Ping(u64),
}

/// The answer to the outstanding request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Ack,
    Rejected { code: ErrorCode, text: String },
    Stats(String),
    Pong,
    PubOpened { window: u32, last_seq: u64 },
    Bound { binding: u32, active: bool },
    Queue(String),
}

/// SUBSCRIBEs in flight together (`Client::subscribe_many`). The router handles a
/// connection's frames in order and answers each SUBSCRIBE once, so the answers come
/// in the order sent: each must answer the oldest one waiting; any other answer is
/// not ours (a late one to a request that timed out) and is dropped, as in
/// [`Session::on_control`].
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// (request id, the caller's index of its pattern) of each request sent and not
    /// answered, oldest first; at most the pipeline's depth.
    pub(crate) waiting: VecDeque<(u32, usize)>,
    /// The indexes of the patterns refused, in order.
    pub(crate) refused: Vec<usize>,
    /// The first refusal's code and text.
    pub(crate) first_refusal: Option<(ErrorCode, String)>,
}

impl Batch {
    /// Takes an answer to `request_id`: `None` unless it answers the oldest request
    /// waiting, else the index of that request's pattern.
    fn answer(&mut self, request_id: u32) -> Option<usize> {
        match self.waiting.front() {
            Some(&(id, index)) if id == request_id && id != 0 => {
                self.waiting.pop_front();
                Some(index)
            }
            _ => None,
        }
    }
}

/// Per-connection protocol state.
#[derive(Debug, Default)]
pub(crate) struct Session {
    pub(crate) pending: Option<Pending>,
    pub(crate) reply: Option<Reply>,
    /// The SUBSCRIBEs of a `subscribe_many` in flight.
    pub(crate) batch: Option<Batch>,
    /// Set once the connection is over; every later call reports it.
    pub(crate) closed: Option<(ErrorCode, String)>,
}

impl Session {
    /// Applies one non-MESSAGE frame received after the handshake.
    ///
    /// `Err` for a close (CLOSE, fatal ERROR: recorded in `closed`), for an unsolicited
    /// non-fatal ERROR (`Rejected`, the connection stays usable) and for a frame the
    /// router never sends (`Protocol`).
    pub(crate) fn on_control(&mut self, frame: Frame<'_>, tx: &mut Vec<u8>) -> Result<(), Error> {
        match frame {
            Frame::Ping(token) => encode_pong(tx, token),
            Frame::Pong(token) => {
                // A PONG nobody waits for (late, after a timeout) is harmless.
                if self.pending == Some(Pending::Ping(token)) {
                    self.reply = Some(Reply::Pong);
                }
            }
            Frame::Ack { request_id } => {
                if self.is_pending(request_id) {
                    self.reply = Some(Reply::Ack);
                } else if let Some(b) = &mut self.batch {
                    b.answer(request_id);
                }
            }
            Frame::StatsReply { request_id, json } => {
                if self.is_pending(request_id) {
                    self.reply = Some(Reply::Stats(json.to_owned()));
                }
            }
            Frame::PubOpened {
                request_id,
                window,
                last_seq,
            } => {
                if self.is_pending(request_id) {
                    self.reply = Some(Reply::PubOpened { window, last_seq });
                }
            }
            Frame::Bound {
                request_id,
                binding,
                active,
            } => {
                if self.is_pending(request_id) {
                    self.reply = Some(Reply::Bound { binding, active });
                }
            }
            Frame::QueueReply { request_id, json } => {
                if self.is_pending(request_id) {
                    self.reply = Some(Reply::Queue(json.to_owned()));
                }
            }
            Frame::Error {
                code,
                fatal: true,
                text,
                ..
            }
            | Frame::Close { code, reason: text } => {
                return Err(self.close(code, crate::error::peer_text(text)));
            }
            Frame::Error {
                request_id,
                code,
                text,
                ..
            } => {
                if self.is_pending(request_id) {
                    self.reply = Some(Reply::Rejected {
                        code,
                        text: crate::error::peer_text(text),
                    });
                } else if let Some((b, index)) = self.batch.as_mut().and_then(|b| {
                    let index = b.answer(request_id)?;
                    Some((b, index))
                }) {
                    b.refused.push(index);
                    b.first_refusal
                        .get_or_insert_with(|| (code, crate::error::peer_text(text)));
                } else if request_id == 0 {
                    return Err(Error::Rejected {
                        code,
                        text: crate::error::peer_text(text),
                    });
                }
                // Otherwise it answers a request that already timed out: drop it.
            }
            other => {
                return Err(Error::Protocol(format!(
                    "router sent an unexpected {} frame",
                    frame_name(&other)
                )))
            }
        }
        Ok(())
    }

    /// Records the end of the connection and returns the matching error.
    pub(crate) fn close(&mut self, code: ErrorCode, reason: String) -> Error {
        self.closed.get_or_insert((code, reason));
        self.closed_error().unwrap_or(Error::Closed {
            code: ErrorCode::NORMAL,
            reason: String::new(),
        })
    }

    /// The error every call reports once the connection is over.
    pub(crate) fn closed_error(&self) -> Option<Error> {
        self.closed.as_ref().map(|(code, reason)| Error::Closed {
            code: *code,
            reason: reason.clone(),
        })
    }

    fn is_pending(&self, request_id: u32) -> bool {
        request_id != 0 && self.pending == Some(Pending::Request(request_id))
    }
}

/// The frame's kind, for messages.
pub(crate) fn frame_name(frame: &Frame<'_>) -> &'static str {
    match frame {
        Frame::Hello { .. } => "HELLO",
        Frame::Welcome { .. } => "WELCOME",
        Frame::Close { .. } => "CLOSE",
        Frame::Error { .. } => "ERROR",
        Frame::Ping(_) => "PING",
        Frame::Pong(_) => "PONG",
        Frame::Subscribe { .. } => "SUBSCRIBE",
        Frame::Unsubscribe { .. } => "UNSUBSCRIBE",
        Frame::Ack { .. } => "ACK",
        Frame::Publish(_) => "PUBLISH",
        Frame::Message(_) => "MESSAGE",
        Frame::StatsRequest { .. } => "STATS_REQUEST",
        Frame::StatsReply { .. } => "STATS_REPLY",
        Frame::PubOpen { .. } => "PUB_OPEN",
        Frame::PubOpened { .. } => "PUB_OPENED",
        Frame::PubAck { .. } => "PUB_ACK",
        Frame::PubNack { .. } => "PUB_NACK",
        Frame::QueueRequest { .. } => "QUEUE_REQUEST",
        Frame::QueueReply { .. } => "QUEUE_REPLY",
        Frame::Bind { .. } => "BIND",
        Frame::Bound { .. } => "BOUND",
        Frame::Deliver(_) => "DELIVER",
        Frame::ConsumerAck { .. } => "CONSUMER_ACK",
        Frame::ConsumerNack { .. } => "CONSUMER_NACK",
        Frame::Unbind { .. } => "UNBIND",
        Frame::McastRoute(_) => "MCAST_ROUTE",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::frame::{decode, DEFAULT_MAX_FRAME};

    /// An ERROR frame from the router.
    fn error(request_id: u32, code: ErrorCode, fatal: bool, text: &str) -> Frame<'_> {
        Frame::Error {
            request_id,
            code,
            fatal,
            text,
        }
    }

    #[test]
    fn ping_is_answered_with_the_same_token() {
        let mut s = Session::default();
        let mut tx = Vec::new();
        s.on_control(Frame::Ping(77), &mut tx).unwrap();
        let (f, _) = decode(&tx, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(f, Frame::Pong(77));
        assert_eq!(s.reply, None);
    }

    #[test]
    fn only_the_pending_request_gets_a_reply() {
        let mut s = Session::default();
        let mut tx = Vec::new();
        s.pending = Some(Pending::Request(2));
        // Stale ACK and ERROR for an earlier, timed-out request: ignored.
        s.on_control(Frame::Ack { request_id: 1 }, &mut tx).unwrap();
        let stale = error(1, ErrorCode::INVALID_PATTERN, false, "x");
        s.on_control(stale, &mut tx).unwrap();
        s.on_control(Frame::Pong(2), &mut tx).unwrap();
        assert_eq!(s.reply, None);
        let answer = error(2, ErrorCode::NOT_SUBSCRIBED, false, "no such subscription");
        s.on_control(answer, &mut tx).unwrap();
        assert_eq!(
            s.reply,
            Some(Reply::Rejected {
                code: ErrorCode::NOT_SUBSCRIBED,
                text: "no such subscription".into()
            })
        );
        assert!(tx.is_empty());
    }

    /// A batch's answers are taken in the order its requests were sent; a refusal is
    /// recorded with its pattern's index; an answer to anything else (a stale id, an
    /// id out of order, a repeat) changes nothing; an unsolicited ERROR is still
    /// reported.
    #[test]
    fn a_batch_takes_its_answers_in_order() {
        let mut s = Session::default();
        let mut tx = Vec::new();
        let mut b = Batch::default();
        b.waiting.extend([(7, 0), (8, 1), (9, 2)]);
        s.batch = Some(b);
        let waiting = |s: &Session| s.batch.as_ref().unwrap().waiting.len();
        // Out of order, stale: dropped.
        s.on_control(Frame::Ack { request_id: 8 }, &mut tx).unwrap();
        s.on_control(Frame::Ack { request_id: 3 }, &mut tx).unwrap();
        assert_eq!(waiting(&s), 3);
        s.on_control(Frame::Ack { request_id: 7 }, &mut tx).unwrap();
        // A repeat of an answered one: dropped.
        s.on_control(Frame::Ack { request_id: 7 }, &mut tx).unwrap();
        assert_eq!(waiting(&s), 2);
        let refused = error(8, ErrorCode::TOO_MANY_SUBSCRIPTIONS, false, "too many");
        s.on_control(refused, &mut tx).unwrap();
        let unsolicited = error(0, ErrorCode::UNSUPPORTED, false, "nope");
        assert!(s.on_control(unsolicited, &mut tx).is_err());
        let second = error(9, ErrorCode::INVALID_PATTERN, false, "bad");
        s.on_control(second, &mut tx).unwrap();
        let b = s.batch.take().unwrap();
        assert!(b.waiting.is_empty());
        assert_eq!(b.refused, [1, 2]);
        assert_eq!(
            b.first_refusal,
            Some((ErrorCode::TOO_MANY_SUBSCRIPTIONS, "too many".into()))
        );
        assert_eq!(s.reply, None);
        assert!(s.closed.is_none() && tx.is_empty());
    }

    #[test]
    fn unsolicited_error_is_reported_without_closing() {
        let mut s = Session::default();
        let e = s
            .on_control(
                error(0, ErrorCode::UNSUPPORTED, false, "nope"),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(matches!(e, Error::Rejected { code, .. } if code == ErrorCode::UNSUPPORTED));
        assert!(s.closed.is_none());
    }

    #[test]
    fn fatal_error_and_close_are_sticky() {
        let mut s = Session::default();
        let fatal = error(0, ErrorCode::SLOW_CONSUMER, true, "too slow");
        let e = s.on_control(fatal, &mut Vec::new()).unwrap_err();
        assert!(matches!(e, Error::Closed { code, .. } if code == ErrorCode::SLOW_CONSUMER));
        // A later CLOSE does not overwrite the first reason.
        let close = Frame::Close {
            code: ErrorCode::NORMAL,
            reason: "bye",
        };
        let e = s.on_control(close, &mut Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "router closed the connection: too slow (slow-consumer (code 9))"
        );
    }

    #[test]
    fn router_only_frames_from_the_router_are_protocol_errors() {
        let mut s = Session::default();
        let e = s
            .on_control(Frame::StatsRequest { request_id: 1 }, &mut Vec::new())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol error: router sent an unexpected STATS_REQUEST frame"
        );
    }
}
