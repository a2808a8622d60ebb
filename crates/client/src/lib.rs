//! tickwire client: connect to a router, subscribe, publish, receive.
//!
//! One [`Client`] is one TCP connection, driven by one thread. The socket stays
//! non-blocking; the calls that wait do so in `poll(2)` with a timeout.
//!
//! # How to drive it
//!
//! 1. [`Client::connect`] (or [`Client::connect_with`] and [`ClientOptions`]) opens the
//!    connection and completes the HELLO / WELCOME handshake.
//! 2. [`Client::subscribe`] / [`Client::unsubscribe`] send a pattern and wait for the
//!    router's ACK; a refusal is [`Error::Rejected`]. [`Client::subscribe_many`]
//!    subscribes a list (a whole market's symbols) with up to [`SUBSCRIBE_PIPELINE`]
//!    requests in flight instead of a round trip each; [`Client::unsubscribe_many`]
//!    removes one the same way.
//! 3. [`Client::publish`] only encodes into a transmit buffer; it writes once
//!    [`ClientOptions::batch_bytes`] are pending. Call [`Client::flush`] after a burst
//!    (or let [`Client::poll`] / [`Client::recv`] do it: they flush first). Setting
//!    `batch_bytes` to 0 writes on every publish.
//! 4. Receive with one of:
//!    - [`Client::poll`]: calls a closure for every message available, each a
//!      [`Message`] borrowing the receive buffer (no allocation per message);
//!    - [`Client::recv`]: at most one message;
//!    - [`Client::messages`]: a blocking iterator of [`OwnedMessage`]s, the simplest.
//!
//!    [`Wait::NoWait`] busy-polls (one non-blocking read, never sleeps: lowest latency,
//!    one busy core); [`Wait::Timeout`] and [`Wait::Forever`] sleep in `poll(2)` until
//!    data arrives.
//! 5. [`Client::close`] says goodbye; dropping a client only flushes (best effort).
//!
//! To log in (a router that requires it, docs/security.md), set
//! [`ClientOptions::login`] to a [`Login`]: the AUTH frame goes out with the HELLO, and a
//! refusal is [`Error::Closed`] with code `auth-failed`. An action the user is not
//! permitted is [`Error::Rejected`] with code `permission-denied` (a subscribe, a
//! request, stats) or, for a direct publish, reported by the next call that reads.
//!
//! PINGs from the router are answered inside every call that reads. Messages that
//! arrive while a call waits for an answer (subscribe, stats, ping) are kept and
//! delivered, in order, by the next `poll` / `recv`: at most 1 GiB of them between
//! polls (a router that sends without end while the client waits cannot make it grow
//! further: the connection is then given up); a cache query's answer is bounded the
//! same way. A call's deadline holds however fast the router keeps sending (a cache
//! query's and an initial image's are on silence: a large image takes a while). Texts the router sends (CLOSE reasons, ERROR and PUB_NACK
//! texts) reach errors with control characters escaped, cut at 1 KiB. Once the router
//! closes the connection every call returns [`Error::Closed`].
//!
//! # Reconnecting
//!
//! A [`Client`] is one connection: when the router goes away every call fails.
//! [`ReconnectingClient`] keeps a pub/sub session across router restarts: it
//! reconnects with bounded exponential backoff and jitter ([`ReconnectOptions`],
//! [`Backoff`]), subscribes again to every pattern, reports [`LinkEvent::Disconnected`]
//! and [`LinkEvent::Reconnected`] among the messages, counts what may have been missed
//! ([`LinkStats`]: router discards, jumps in per-topic SEQ numbers, time disconnected),
//! and keeps publishes made while disconnected in a bounded buffer
//! ([`Error::OfflineBufferFull`] beyond it). The CLI's `tickwire sub` uses it.
//!
//! # Guaranteed messaging
//!
//! Durable queues on the router (`docs/guaranteed.md`):
//!
//! - **Publishing.** [`Client::open_publisher`] opens the connection as a publisher
//!   identity (keep it stable across restarts: the router recognises resends by
//!   identity and sequence number). [`Client::publish_guaranteed`] numbers and queues a
//!   publish, waiting while the router's window of unanswered publishes is full
//!   ([`Client::try_publish_guaranteed`] fails with [`Error::WindowFull`] instead);
//!   [`Client::publish_guaranteed_wait`] waits for its [`Outcome`]. Each publish is
//!   answered exactly once, as [`Event::Acked`] (a range of sequence numbers is
//!   durable) or [`Event::Nacked`] (refused, with a [`NackReason`]), and counted in
//!   [`Client::publish_counts`]. The client keeps every unanswered publish (bounded by
//!   the window, in one reused buffer: no allocation per message at steady state).
//! - **Reconnecting.** [`GuaranteedPublisher`] owns a client: after a lost connection
//!   it reconnects with bounded backoff, re-opens, resends every unanswered publish in
//!   sequence order and carries on ([`ReconnectOptions`]).
//! - **Consuming.** [`Client::bind`] to a queue (at most `window` deliveries
//!   unacknowledged; [`Start`] other than [`Start::Queue`] replays), then
//!   [`Event::Delivery`] from [`Client::poll_events`]; answer each with
//!   [`Client::ack`] / [`Client::ack_range`] or [`Client::nack`] (redeliver or
//!   dead-letter); [`Client::unbind`] ends it. A standby binding of an exclusive queue
//!   reports [`Event::Activated`]. [`QueueConsumer`] binds again after a lost
//!   connection (unacknowledged deliveries come again, marked redelivered).
//! - **Administration.** [`Client::queue_request`] with a [`QueueOp`] returns the
//!   router's JSON.
//!
//! Only [`Client::poll_events`] reports these events. [`Client::poll`] and
//! [`Client::recv`] deliver messages only: publish answers still update the window and
//! counts, but deliveries and the answer events are dropped there. Events that arrive
//! while a call waits (a request, a full window) are kept for the next `poll_events`.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tickwire_client::{Client, Wait};
//!
//! fn main() -> Result<(), tickwire_client::Error> {
//!     let mut client = Client::connect("127.0.0.1:7420")?;
//!     client.subscribe("md/>")?;
//!
//!     client.publish("md/NASDAQ/AAPL", b"189.84")?;
//!     client.flush()?;
//!
//!     // Blocking: sleep up to 100 ms for messages.
//!     client.poll(Wait::Timeout(Duration::from_millis(100)), |m| {
//!         println!("{} {:?} (discarded before: {})", m.topic(), m.payload(), m.discarded());
//!     })?;
//!
//!     // Busy-poll: spin without sleeping.
//!     for _ in 0..1000 {
//!         if let Some(m) = client.recv(Wait::NoWait)? {
//!             println!("{}", m.topic());
//!         }
//!     }
//!
//!     println!("round trip {:?}", client.ping()?);
//!     client.close()
//! }
//! ```
#![forbid(unsafe_code)]

mod backoff;
mod buffers;
mod client;
mod consumer;
mod error;
mod event;
mod gm;
mod mcast;
mod message;
mod publisher;
mod reconnecting;
mod session;
mod transport;

pub use backoff::Backoff;
pub use client::{
    shared_pattern, validate_group, Client, ClientOptions, Login, Messages, TlsOptions, Wait,
    REQUEST_REPLY_WAIT, SUBSCRIBE_PIPELINE, TLS_SCHEME,
};
pub use consumer::QueueConsumer;
pub use error::Error;
pub use event::{Binding, BindingId, Delivery, Event, Opened};
pub use gm::{NackRecord, Outcome, PublishCounts, RECENT_NACKS};
pub use mcast::{
    MulticastEvent, MulticastOptions, MulticastReceiver, MulticastRoute, MulticastStats, MAX_ROUTES,
};
pub use message::{Message, OwnedMessage, ReplyTo};
pub use publisher::{GuaranteedPublisher, Outages, ReconnectOptions};
pub use reconnecting::{LinkEvent, LinkStats, Outage, ReconnectingClient, SEQ_TOPICS};
/// The clock of every STAMPS field: `CLOCK_MONOTONIC` (the router stamps with it too,
/// so stamps from one host subtract directly).
pub use tickwire_rt::MonoNanos;
/// TLS configurations from PEM files (for [`TlsOptions::config`]).
pub use tickwire_tls as tls;
pub use tickwire_wire::frame::{EncodeError, ErrorCode, PublishOptions, Stamps};
pub use tickwire_wire::gm::{open_options, NackAction, NackReason, QueueOp, Start};
pub use tickwire_wire::topic::{Topic, TopicError};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_match_the_docs() {
        let o = ClientOptions::default();
        assert_eq!(o.name, "tickwire-client");
        assert_eq!(o.batch_bytes, 64 * 1024);
        assert_eq!(o.recv_buffer, 256 * 1024);
        assert_eq!(o.max_frame, tickwire_wire::frame::DEFAULT_MAX_FRAME);
        assert!(!o.stamp);
    }
}
