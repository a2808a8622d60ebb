//! tickwire reliable multicast: one send reaches every subscriber (docs/multicast.md).
//!
//! A sender puts the project's PUBLISH frames (crates/wire) into sequenced datagrams
//! for a multicast group; receivers join the group, deliver in order, detect gaps and
//! ask the sender for what they missed with NAKs (unicast, randomised back-off, so a
//! loss seen by many receivers costs one retransmission); loss that cannot be recovered
//! is reported as a counted gap, never hidden.
//!
//! Layers, bottom up:
//! - [`packet`]: the datagram layout and its bounded decoder (pure);
//! - [`sender`] and [`receiver`]: the protocol cores (pure: bytes and [`MonoNanos`]
//!   in, datagrams and events out; `handle_*` in, `poll_*` out);
//! - [`loss`]: seeded loss injection (`--loss P --seed S`);
//! - [`driver`]: [`McastPublisher`] and [`McastSubscriber`], the thin drivers over UDP
//!   sockets (non-blocking; the application calls them from its own loop), filtering
//!   by subscription patterns.
//!
//! Hot path: per message, a `memcpy` into a preallocated slot (sender) and a flyweight
//! decode (receiver); syscalls are per datagram. Bad input: a datagram that does not
//! decode, comes from another session or source, or claims an implausible jump is
//! counted and dropped; nothing panics (fuzzed: `fuzz/fuzz_targets/mcast_input.rs`).

#![forbid(unsafe_code)]

pub mod driver;
pub mod loss;
pub mod packet;
pub mod receiver;
pub mod sender;

pub use driver::{McastPublisher, McastSubscriber, PublisherOptions, SubscriberOptions};
pub use loss::Loss;
pub use receiver::{Event, Receiver, ReceiverConfig, ReceiverStats};
pub use sender::{ReceiverReport, SendError, Sender, SenderConfig, SenderEvent, SenderStats};

#[doc(no_inline)]
pub use tickwire_rt::MonoNanos;

/// A sender's session id: chosen at random when the sender starts, carried in every
/// datagram, so a receiver never mixes two senders' sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub u32);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// Errors of this crate, by who is at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting out of its bounds (the text names it).
    #[error("{0}")]
    Config(String),
    /// A socket operation failed (the text says which).
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A subscription pattern is not valid.
    #[error("invalid pattern {0:?}: {1}")]
    Pattern(String, tickwire_wire::topic::TopicError),
    /// The message cannot be sent (bad topic, too large).
    #[error(transparent)]
    Send(#[from] SendError),
}
